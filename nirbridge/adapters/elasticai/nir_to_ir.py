"""A NIR graph → an IR in the 0.63-0.67 dict form, with its state_dict."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import nir
import numpy as np
import torch

from ... import graph as graph_utils
from ...errors import (
    LossyConversionWarning,
    NirBridgeError,
    NodeConversionError,
    ParameterError,
)
from .checks import _parameter, _shape_value, _shown
from .ir_to_nir import _listed, _prefixed
from .literals import _metadata_of, _same, _stored, _stored_keys
from .mapping import _GRAPH_TYPES, _ON_GRAPHS, _ON_LAYERS, IR, FromNir, StateDict, _generic_from_nir
from .roundtrip import _rename, _unique

# ----------------------------------------------------------------------------- NIR → IR (raw)


def _tensor(value: np.ndarray, what: str) -> torch.Tensor:
    array = np.ascontiguousarray(value)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        return torch.from_numpy(array.copy())
    except TypeError:  # a dtype torch has no counterpart for (float128, ...)
        raise ParameterError(
            f"{what} has dtype {array.dtype}, which a torch state_dict cannot hold; store it as "
            "float64 or another dtype torch has"
        ) from None


class _NirToIr:
    def __init__(self, type_map: Mapping[type, FromNir]) -> None:
        self.type_map = type_map
        self.impls: IR = {}
        self.state: StateDict = {}
        self.owner: dict[str, str] = {}  # implementation → the NIR node path that made it

    def run(self, graph: nir.NIRGraph) -> tuple[IR, StateDict]:
        metadata, extra = _metadata_of(graph, "the graph")
        _stored_keys(extra, _ON_GRAPHS, "the graph", "the root graph")
        root: dict[str, Any] = {}
        if "elasticai.implementation" in extra:
            root = _stored(extra, "elasticai.implementation", "the graph")
        root = {k: v for k, v in root.items() if k not in ("nodes", "edges")}
        name = root.pop("name", "")
        if root.pop("type", "module") != "module":
            raise ParameterError(
                "the graph: metadata 'elasticai.implementation' gives the root another type than "
                "'module', the only one an IR's root has; remove the entry or write the file again with "
                "nirbridge.adapters.elasticai.write"
            )
        if metadata:
            root["nir_metadata"] = metadata
        record: dict[str, Any] = {**root, "nodes": {}, "edges": {}, "type": "module", "name": name}
        self.impls[name] = record
        self.fill(graph, record, "", extra)
        outputs = [n for n, node in graph.nodes.items() if isinstance(node, nir.Output)]
        if (
            len(outputs) == 1
            and outputs[0] != "output"
            and "output" not in graph.nodes
            and "elasticai.edges" not in extra  # edges as an IR named them
        ):  # elasticai's Ir2Torch starts from the node called "output"
            _rename(record, outputs[0], "output")
            record["nir_output"] = outputs[0]
        return self.impls, self.state

    def fill(
        self, graph: nir.NIRGraph, record: dict[str, Any], prefix: str, extra: Mapping[str, Any]
    ) -> None:
        for name, node in graph.nodes.items():
            path = f"{prefix}.{name}" if prefix else name
            record["nodes"][name] = self.node(name, node, path)
        edges: dict[str, dict[str, Any]] = {}
        for src, dst in graph.edges:
            edges.setdefault(str(src), {})[str(dst)] = {}
        if "elasticai.edges" in extra:
            edges = _stored(extra, "elasticai.edges", f"graph {prefix!r}" if prefix else "the graph")
        record["edges"] = edges

    def convert(self, node: nir.NIRNode, path: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        convert = self.type_map.get(type(node))
        try:
            converted = convert(node) if convert is not None else None
            if converted is None:
                return _generic_from_nir(node)
            if not (
                isinstance(converted, tuple)
                and len(converted) == 3
                and isinstance(converted[0], str)
                and isinstance(converted[1], Mapping)
                and isinstance(converted[2], Mapping)
            ):
                raise TypeError(
                    f"the converter returned {_shown(converted)}, not (type, attributes, parameters) or None"
                )
        except NirBridgeError as error:
            raise _prefixed(error, f"node {path!r} ({type(node).__name__})") from None
        except Exception as error:  # a converter from the user's type_map, or a field it cannot read
            raise NodeConversionError(path, type(node).__name__, error) from error
        kind, attributes, parameters = converted
        return kind, dict(attributes), dict(parameters)

    def node(self, name: str, node: nir.NIRNode, path: str) -> dict[str, Any]:
        metadata, extra = _metadata_of(node, f"node {path!r}")
        if isinstance(node, (nir.Input, nir.Output)):
            kind = "input" if isinstance(node, nir.Input) else "output"
            node_record: dict[str, Any] = {"type": kind, "implementation": kind}
            types = node.input_type if kind == "input" else node.output_type
            shape = types.get(kind) if isinstance(types, Mapping) else None
            try:
                unknown = shape is None or np.asarray(shape).dtype == object  # nir's "not known"
            except (TypeError, ValueError):  # ragged: integers() names it
                unknown = False
            if not unknown:
                owner = f"node {path!r} ({type(node).__name__})"
                node_record["shape"] = graph_utils.integers(shape, "shape", owner)
            _stored_keys(extra, ("elasticai.node",), f"node {path!r}", f"an {type(node).__name__} node")
            if "elasticai.node" in extra:  # the record as the IR spelt it; the node's own values win
                stored = _stored(extra, "elasticai.node", f"node {path!r}")
                if "shape" in stored and "shape" in node_record:
                    what = f"node {path!r}: metadata 'elasticai.node', 'shape'"
                    spelt, held = _shape_value(stored["shape"], what), tuple(node_record["shape"])
                    if spelt != held:
                        raise ParameterError(
                            f"node {path!r}: metadata 'elasticai.node' gives shape {spelt}, but the "
                            f"{type(node).__name__} node holds {held}; remove the entry or write the file "
                            "again with nirbridge.adapters.elasticai.write"
                        )
                node_record = {k: v for k, v in stored.items() if k != "nir_metadata"}
            if metadata:
                node_record["nir_metadata"] = metadata
            return node_record
        if isinstance(node, nir.NIRGraph):
            kind, attributes, parameters = "NIRGraph", {}, {}
        else:
            kind, attributes, parameters = self.convert(node, path)
        node_record = {"type": kind, "implementation": path}
        if "elasticai.node" in extra:
            node_record = _stored(extra, "elasticai.node", f"node {path!r}")
            if not isinstance(node_record.get("implementation"), str):
                raise ParameterError(
                    f"node {path!r}: metadata 'elasticai.node' holds {_shown(node_record)}, which names no "
                    f"implementation for this {type(node).__name__}; remove the entry or write the file "
                    "again with nirbridge.adapters.elasticai.write"
                )
        target = node_record.get("implementation", path)
        if "elasticai.implementation" in extra:
            stored = _stored(extra, "elasticai.implementation", f"node {path!r}")
            kind = stored.pop("type", kind)
            attributes = {k: v for k, v in stored.items() if k not in ("name", "nodes", "edges")}
        is_graph = kind in _GRAPH_TYPES and isinstance(node, nir.NIRGraph)
        _stored_keys(
            extra,
            (*_ON_GRAPHS, "elasticai.node") if is_graph else _ON_LAYERS,
            f"node {path!r}",
            f"a node that becomes a {'graph' if is_graph else 'layer'} implementation ({kind})",
        )
        if metadata:
            attributes["nir_metadata"] = metadata
        if "elasticai.parameters" in extra:
            keep = _stored(extra, "elasticai.parameters", f"node {path!r}")
            absent = [k for k in keep if k not in parameters]
            if absent:
                warnings.warn(
                    f"node {path!r} ({type(node).__name__}): metadata 'elasticai.parameters' names "
                    f"{_listed(absent)}, which this node does not hold (its fields: "
                    f"{', '.join(sorted(parameters)) or 'none'}); the state_dict read back lacks them",
                    LossyConversionWarning,
                    stacklevel=5,
                )
            parameters = {k: v for k, v in parameters.items() if k in keep}
        parameters = {
            k: _parameter(v, f"node {path!r} ({type(node).__name__}), field {k!r}")
            for k, v in parameters.items()
        }
        if target in self.impls:
            if "elasticai.node" in extra:  # IR nodes that share one implementation
                self.shared(target, path, kind, attributes, parameters)
                return node_record
            target = _unique(target, self.impls)  # "a.b" at the top and "b" in graph "a"
            node_record["implementation"] = target
        self.owner[target] = path
        if kind in _GRAPH_TYPES and isinstance(node, nir.NIRGraph):
            record = {**attributes, "nodes": {}, "edges": {}, "name": target, "type": kind}
            self.impls[target] = record
            self.fill(node, record, target, extra)
        else:
            self.impls[target] = {**attributes, "nodes": {}, "edges": {}, "name": target, "type": kind}
        for field, value in parameters.items():
            what = f"node {path!r} ({type(node).__name__}), field {field!r}"
            self.state[f"{target}.{field}"] = _tensor(value, what)
        return node_record

    def shared(
        self, target: str, path: str, kind: str, attributes: Mapping[str, Any], parameters: Mapping[str, Any]
    ) -> None:
        """Node ``path`` shares implementation ``target`` with a node converted before:
        what it holds otherwise (type, attributes, metadata, parameters) cannot be kept."""
        first = self.owner.get(target, target)
        record = self.impls[target]
        mine = {**attributes, "type": kind}
        theirs = {k: v for k, v in record.items() if k not in ("nodes", "edges", "name")}
        differ = [
            k for k in {**theirs, **mine} if not (k in mine and k in theirs and _same(mine[k], theirs[k]))
        ]
        held = {k.rpartition(".")[2]: v for k, v in self.state.items() if k.rpartition(".")[0] == target}
        differ += [
            field
            for field in {**held, **parameters}
            if not (
                field in held
                and field in parameters
                and np.array_equal(np.asarray(parameters[field]), held[field].numpy())
            )
        ]
        if differ:
            warnings.warn(
                f"nodes {first!r} and {path!r} share implementation {target!r} but hold "
                f"different {differ}; the IR keeps those of {first!r}",
                LossyConversionWarning,
                stacklevel=4,
            )

"""elasticai.creator 0.68's IR, read and written.

0.68 (April 2026) describes a network as a pair ``(root, registry)``: ``root`` is a
``DataGraph`` whose ``attributes`` hold ``{"type": "module"}``, whose ``nodes`` each hold
``attributes`` ``{"type", "implementation"}`` and whose ``successors`` give the edges
``{src: {dst: attributes}}``; ``registry`` maps each implementation's name to a
``DataGraph`` whose ``attributes`` hold its type and hyperparameters. Its serializers
write a graph as ``{"nodes", "edges", "attributes"}`` (``IrSerializer``) or with the
attributes at the top level (``IrSerializerLegacy``, 0.66's ``as_dict()`` layout
without the name). ``Torch2IrWithParams`` also puts each module's parameters in its
attributes, as nested tuples (so a layer's ``"bias"`` there holds the bias values, not
``True``).

Reading needs no elasticai.creator: the objects are read through the attributes above.
Writing gives the objects where elasticai.creator 0.68 or later is importable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import GraphStructureError, ParameterError
from ...limits import MAX_METADATA_NESTING
from .checks import _kind, _name, _record, _shown
from .mapping import IR

__all__ = ["carried_weights", "entries", "is_graph", "to_dicts", "to_objects"]


def is_graph(value: Any) -> bool:
    """Whether ``value`` reads as a 0.68 ``DataGraph`` (not a dict of one)."""
    return not isinstance(value, Mapping) and all(
        hasattr(value, field) for field in ("attributes", "nodes", "successors")
    )


def _plain(value: Any, where: str, depth: int = 0) -> Any:
    """An attribute value with its ``AttributeMapping``s as dicts (tuples stay tuples)."""
    if depth > MAX_METADATA_NESTING:
        raise GraphStructureError(f"{where} nests more than {MAX_METADATA_NESTING} deep (or holds itself)")
    if isinstance(value, Mapping):
        return {k: _plain(v, where, depth + 1) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v, where, depth + 1) for v in value)
    return value


def graph_record(graph: Any, where: str) -> dict[str, Any]:
    """A 0.68 ``DataGraph`` as ``IrSerializer`` writes it."""
    try:
        nodes, successors, attributes = graph.nodes, graph.successors, graph.attributes
        record = {
            "nodes": {
                _name(name, f"{where}: its nodes"): _plain(
                    getattr(node, "attributes", node), f"{where}: node {name!r}"
                )
                for name, node in nodes.items()
            },
            "edges": {
                _name(src, f"{where}: its edges"): {
                    _name(dst, f"{where}: edge {src!r}"): _plain(data, f"{where}: edge {src!r} -> {dst!r}")
                    for dst, data in targets.items()
                }
                for src, targets in successors.items()
            },
            "attributes": _plain(attributes, f"{where}: its attributes"),
        }
    except AttributeError as error:
        raise GraphStructureError(
            f"{where} ({_kind(graph)}) does not read as an elasticai.creator 0.68 DataGraph ({error})"
        ) from None
    return record


def entries(ir: Any) -> list[tuple[str, dict[str, Any]]] | None:
    """(name, record) pairs of a 0.68 IR: a ``(root, registry)`` pair of ``DataGraph``s
    or of their serialized dicts; None where ``ir`` is no such pair."""
    if not (isinstance(ir, tuple) and len(ir) == 2 and isinstance(ir[1], Mapping)):
        return None
    root, registry = ir
    if is_graph(root):
        records = [("", graph_record(root, "the root graph"))]
        for name, graph in registry.items():
            where = f"implementation {name!r} of the registry"
            if not is_graph(graph):
                raise GraphStructureError(
                    f"{where} is {_shown(graph)} ({_kind(graph)}); a registry maps names to DataGraphs"
                )
            records.append((_name(name, "the registry"), graph_record(graph, where)))
    elif isinstance(root, Mapping) and ("attributes" in root or root.get("type") == "module"):
        # serialized: IrSerializer's form, or IrSerializerLegacy's (the attributes beside
        # the nodes and edges)
        records = [
            ("", _record(root, "the root graph")),
            *((_name(k, "the registry"), _record(v, f"implementation {k!r}")) for k, v in registry.items()),
        ]
    else:
        return None
    return [_root_named(*records[0]), *records[1:]]


def _root_named(name: str, record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The root under the name :func:`to_dicts` keeps in its attributes, if any."""
    block = record.get("attributes") if isinstance(record.get("attributes"), Mapping) else record
    given = block.get("name")
    if not isinstance(given, str) or not given:
        return name, record
    if block is record:
        return given, {k: v for k, v in record.items() if k != "name"}
    return given, {**record, "attributes": {k: v for k, v in block.items() if k != "name"}}


def _numbers(value: Any, depth: int) -> np.ndarray | None:
    """``value`` as an array if it is a nested sequence, ``depth`` deep, of real numbers."""
    if not isinstance(value, (tuple, list)):
        return None
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if array.ndim != depth or array.dtype.kind != "f":
        return None
    if not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in np.asarray(value, dtype=object).flat
    ):
        return None
    single = array.astype(np.float32)
    return single if np.array_equal(single.astype(np.float64), array, equal_nan=True) else array


def carried_weights(kind: str, attributes: dict[str, Any], where: str) -> dict[str, np.ndarray]:
    """The parameters that ``Torch2IrWithParams`` put in a built-in layer's attributes,
    taken out of them (``"bias"`` becomes ``True`` again): float32 where every value is a
    float32, as a float32 model's values are, else float64."""
    if kind not in _WEIGHTS_DEPTH:
        return {}
    weights = {}
    weight_depth = _WEIGHTS_DEPTH[kind]
    weight = attributes.get("weight")
    if weight is not None:
        array = _numbers(weight, weight_depth)
        if array is None:
            raise ParameterError(
                f"{where}: attribute 'weight' is {_shown(weight)}; Torch2IrWithParams gives a layer's "
                f"weight as nested tuples of numbers, {weight_depth} deep"
            )
        weights["weight"] = array
        del attributes["weight"]
    bias = attributes.get("bias")
    if isinstance(bias, (tuple, list)):
        array = _numbers(bias, 1)
        if array is None:
            raise ParameterError(
                f"{where}: attribute 'bias' is {_shown(bias)}; give True, False or the bias values"
            )
        weights["bias"] = array
        attributes["bias"] = True
    return weights


_WEIGHTS_DEPTH = {"linear": 2, "conv1d": 3, "conv2d": 4}


def to_dicts(ir: IR) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The 0.63-0.67 dict form (``{name: as_dict()}``, root ``""``) as 0.68's
    ``(root, registry)``, each graph as ``IrSerializer`` writes it."""

    def graph(record: Mapping[str, Any]) -> dict[str, Any]:
        attributes = {k: v for k, v in record.items() if k not in ("name", "nodes", "edges")}
        nodes = {name: dict(node) for name, node in record.get("nodes", {}).items()}
        given = record.get("edges", {})
        # a DataGraph gives its edges by source in node order (every node a source, of none
        # or more edges); where that changes the order, NIR's goes to 'nir_edges'
        edges: dict[str, dict[str, Any]] = {name: {} for name in nodes}
        for src, targets in given.items():
            edges.setdefault(src, {}).update({dst: dict(data) for dst, data in targets.items()})
        order = [(src, dst) for src, targets in given.items() for dst in targets]
        if order != [(src, dst) for src, targets in edges.items() for dst in targets] and nodes:
            output = attributes.get("nir_output")  # the NIR name of the IR's "output"
            attributes.setdefault(
                "nir_edges",
                [
                    tuple(output if output is not None and end == "output" else end for end in e)
                    for e in order
                ],
            )
        return {"nodes": nodes, "edges": edges, "attributes": attributes}

    modules = [name for name, record in ir.items() if record.get("type") == "module"]
    root = next((name for name in ("", "root", "network") if name in modules), modules[0])  # as records reads
    top = graph(ir[root])
    if root:  # 0.68's root has no name: one other than "" (the documentation's "root") goes along
        top["attributes"]["name"] = root
    return top, {name: graph(record) for name, record in ir.items() if name != root}


def to_objects(root: Mapping[str, Any], registry: Mapping[str, Mapping[str, Any]]) -> tuple[Any, Any]:
    """0.68's own ``(DataGraph, Registry)`` from the dicts of :func:`to_dicts`, built by
    its ``IrDeserializer``; ``Ir2Torch()(root, registry, state_dict)`` takes them."""
    from elasticai.creator import ir as eai_ir

    reader = eai_ir.IrDeserializer(eai_ir.DefaultIrFactory())
    graphs = {name: reader.deserialize_graph(dict(record)) for name, record in registry.items()}
    return reader.deserialize_graph(dict(root)), eai_ir.Registry(graphs)

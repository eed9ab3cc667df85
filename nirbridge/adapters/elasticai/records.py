"""Every spelling of an elasticai.creator IR, read into one form (:class:`_Impl` per
implementation): 0.62's node lists, the 0.63-0.67 ``as_dict()`` dicts, the
documentation's ``(src, dst)`` edges and 0.68's ``attributes`` blocks.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...errors import (
    GraphStructureError,
)
from . import ir066, ir068
from .checks import (
    _check_nesting,
    _check_node_side_channel,
    _check_side_channel,
    _kind,
    _name,
    _record,
    _shown,
    _string_keys,
)
from .literals import _same
from .mapping import _GRAPH_TYPES

# ----------------------------------------------------------------------------- IR spellings


@dataclass
class _Impl:
    name: str
    type: str
    attributes: dict[str, Any]
    nodes: dict[str, dict[str, Any]]
    edges: list[tuple[str, str, dict[str, Any]]]
    weights: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # Torch2IrWithParams' (ir068)


def _entries(ir: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, record) pairs from every spelling of an IR."""
    found = ir068.entries(ir)
    if found is not None:
        return found
    if ir068.is_graph(ir):
        raise GraphStructureError(
            "the IR is one elasticai.creator 0.68 DataGraph; give the (root, registry) pair that "
            "Torch2Ir returns: to_nir((root, registry), state_dict)"
        )
    if isinstance(ir, Mapping):
        return [(_name(k, "the IR"), _record(v, f"implementation {k!r}")) for k, v in ir.items()]
    if isinstance(ir, (str, bytes, os.PathLike)):
        raise GraphStructureError(
            "to_nir takes the IR itself (implementations or their dicts); to read a .nir file "
            "use nirbridge.adapters.elasticai.read(path)"
        )
    if isinstance(ir, Iterable) and not isinstance(ir, (np.ndarray, torch.Tensor)):
        return ir066.entries(ir)
    raise GraphStructureError(
        f"the IR must be elasticai Implementations, a dict of their as_dict() forms or a "
        f"(root, registry) pair; got {type(ir).__name__}"
    )


def _agree_twice(outside: Mapping[str, Any], block: Mapping[str, Any], what: str) -> None:
    """A 0.68 ``attributes`` block and the fields beside it may repeat a field, but not
    give it two values (one would win unseen)."""
    for key, value in block.items():
        if key in outside and not _same(outside[key], value):
            raise GraphStructureError(
                f"{what} gives {key!r} the value {_shown(value)}, the record beside it "
                f"{_shown(outside[key])}; keep one"
            )


def _nodes(value: Any, where: str) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):  # 0.62: a list of {"name", "type", "implementation"}
        items = [(n.get("name") if isinstance(n, Mapping) else None, n) for n in value]
    else:
        raise GraphStructureError(
            f"{where}: 'nodes' is {_shown(value)} ({_kind(value)}); give a dict "
            "{name: {'type': ..., 'implementation': ...}}"
        )
    nodes = {}
    for name, data in items:
        if not isinstance(data, Mapping):
            raise GraphStructureError(
                f"{where}: node {name!r} is {_shown(data)} ({_kind(data)}), not a dict with "
                "'type' and 'implementation'"
            )
        if not isinstance(name, str):
            raise GraphStructureError(
                f"{where}: node entry {_shown(data)} has the name {_shown(name)}; node names are strings"
            )
        if name in nodes:
            raise GraphStructureError(f"{where}: two nodes are named {name!r}; rename one")
        what = f"{where}: node {name!r}"
        _string_keys(data, what, GraphStructureError)
        record = dict(data)
        given = record.pop("name", name)
        if not (isinstance(given, str) and given == name):
            raise GraphStructureError(f"{what} says its name is {_shown(given)}")
        if "type" not in record and "attributes" in record:  # 0.68 nodes hold their attributes
            block = record.pop("attributes")
            if not isinstance(block, Mapping):
                raise GraphStructureError(f"{what}: 'attributes' is {_shown(block)}, not a dict")
            _string_keys(block, f"{what}: 'attributes'", GraphStructureError)
            _agree_twice(record, block, f"{what}: 'attributes'")
            record = {**block, **record}
        if not isinstance(record.get("type"), str):
            raise GraphStructureError(
                f"{what} has type {_shown(record.get('type'))}; give it a type string ('input', 'output' "
                "or its implementation's type)"
            )
        if "implementation" in record and not isinstance(record["implementation"], str):
            raise GraphStructureError(
                f"{what} names implementation {_shown(record['implementation'])} (a "
                f"{type(record['implementation']).__name__}); give the implementation's name"
            )
        for key, field in record.items():
            _check_nesting(field, f"{what}, field {key!r}")
        _check_node_side_channel(record, what)
        nodes[name] = record
    return nodes


_EDGE_FORMS = "give edges as {src: {dst: {}}} or a list of {'src': ..., 'dst': ...} dicts"


def _edge(data: Any, where: str) -> tuple[str, str, dict[str, Any]]:
    if not isinstance(data, Mapping):
        raise GraphStructureError(
            f"{where}: edge {_shown(data)} is {_kind(data)}, not a dict with 'src' and 'dst' "
            f"(or 'sink'); {_EDGE_FORMS}"
        )
    rest = dict(data)
    src = rest.pop("src", None)
    dst = rest.pop("dst", None)
    sink = rest.pop("sink", None)
    if dst is not None and sink is not None and not _same(dst, sink):
        raise GraphStructureError(
            f"{where}: edge {_shown(dict(data))} names its target twice, 'dst' {_shown(dst)} and 'sink' "
            f"{_shown(sink)}; keep one"
        )
    dst = dst if dst is not None else sink
    if not isinstance(src, str) or not isinstance(dst, str):
        raise GraphStructureError(f"{where}: edge {_shown(dict(data))} needs 'src' and 'dst' (or 'sink')")
    _string_keys(rest, f"{where}: edge {src!r} -> {dst!r}", GraphStructureError)
    for key, field in rest.items():
        _check_nesting(field, f"{where}: edge {src!r} -> {dst!r}, field {key!r}")
    return src, dst, rest


def _edges(value: Any, where: str) -> list[tuple[str, str, dict[str, Any]]]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):  # 0.62: a list of {"src", "sink"}
        return [_edge(e, where) for e in value]
    if not isinstance(value, Mapping):
        raise GraphStructureError(f"{where}: 'edges' is {_shown(value)} ({_kind(value)}); {_EDGE_FORMS}")
    edges = []
    for key, data in value.items():
        if isinstance(key, tuple):  # the documentation's {(src, dst): {"src", "dst"|"sink"}}
            if len(key) != 2 or not isinstance(data, Mapping):
                raise GraphStructureError(
                    f"{where}: edge key {_shown(key)} with {_shown(data)} is not a (src, dst) key with a "
                    f"dict; {_EDGE_FORMS}"
                )
            src, dst, rest = _edge({"src": key[0], "dst": key[1], **dict(data)}, where)
            if (src, dst) != tuple(key):
                raise GraphStructureError(f"{where}: edge key {key!r} disagrees with its data {dict(data)!r}")
            edges.append((src, dst, rest))
        elif isinstance(data, Mapping) and isinstance(data.get("src"), str):  # {"a,b": {"src", "dst"}}
            edges.append(_edge(data, where))
        elif isinstance(data, Mapping) and isinstance(key, str):  # 0.63-0.68: {src: {dst: {...}}}
            for dst, attrs in data.items():
                if not isinstance(dst, str):
                    raise GraphStructureError(
                        f"{where}: edge {key!r} -> {_shown(dst)} names {_kind(dst)}; node names are strings"
                    )
                if not isinstance(attrs, Mapping):
                    raise GraphStructureError(
                        f"{where}: edge {key!r} -> {dst!r} carries {_shown(attrs)}, not a dict"
                    )
                _string_keys(attrs, f"{where}: edge {key!r} -> {dst!r}", GraphStructureError)
                for name, field in attrs.items():
                    _check_nesting(field, f"{where}: edge {key!r} -> {dst!r}, field {name!r}")
                edges.append((key, dst, dict(attrs)))
        else:
            raise GraphStructureError(
                f"{where}: cannot read edge entry {_shown(key)}: {_shown(data)}; {_EDGE_FORMS}"
            )
    return edges


def _normalize(ir: Any) -> tuple[dict[str, _Impl], str]:
    impls: dict[str, _Impl] = {}
    for name, record in _entries(ir):
        where = f"implementation {name!r}"
        given = record.get("name", name)
        if not (isinstance(given, str) and given == name):
            raise GraphStructureError(f"{where} says its name is {_shown(given)}")
        block = record.get("attributes")
        attributes = {
            k: v for k, v in record.items() if k not in ("name", "type", "nodes", "edges", "attributes")
        }
        kind = record.get("type")
        if block is not None:  # 0.68: type and hyperparameters in an attributes block
            if not isinstance(block, Mapping):
                raise GraphStructureError(
                    f"{where}: 'attributes' is {_shown(block)} ({_kind(block)}), not a dict of "
                    "its type and hyperparameters"
                )
            _string_keys(block, f"{where}: 'attributes'", GraphStructureError)
            given_twice = {**attributes, "type": kind} if "type" in record else attributes
            _agree_twice(given_twice, block, f"{where}: 'attributes'")
            kind = block.get("type", kind)
            attributes.update({k: v for k, v in block.items() if k != "type"})
        if not isinstance(kind, str):
            raise GraphStructureError(
                f"{where} has type {_shown(kind)}; give it a type string such as 'linear'"
            )
        if name in impls:
            raise GraphStructureError(f"two implementations are named {name!r}")
        for key, field in attributes.items():
            _check_nesting(field, f"{where}, field {key!r}")
        _check_side_channel(attributes, where, kind in _GRAPH_TYPES)
        weights = ir068.carried_weights(kind, attributes, where)
        impls[name] = _Impl(
            name,
            kind,
            attributes,
            _nodes(record.get("nodes"), where),
            _edges(record.get("edges"), where),
            weights,
        )
    roots = [i.name for i in impls.values() if i.type == "module"]
    if not roots:
        raise GraphStructureError("no implementation has type 'module'; the IR needs its root graph")
    if len(roots) > 1:
        named = [r for r in ("", "root", "network") if r in roots]
        if not named:
            raise GraphStructureError(f"implementations {roots} all have type 'module'; which is the root?")
        return impls, named[0]
    return impls, roots[0]

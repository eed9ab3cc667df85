"""What each side stores for the other, so that a round trip gives back what it
started from (see the package docs).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import nir
import numpy as np

from ...errors import (
    LossyConversionWarning,
    ParameterError,
)
from .checks import _IO, _META, _SIDE_CHANNEL, _field_disagreement, _shown
from .ir066 import as_dict
from .ir_to_nir import _listed
from .literals import _literal, _same
from .mapping import _GRAPH_TYPES, IR, StateDict
from .records import _Impl

# ----------------------------------------------------------------------------- the round trip's record


def _unique(name: str, taken: Mapping[str, Any]) -> str:
    count = 1
    while f"{name}_{count}" in taken:
        count += 1
    return f"{name}_{count}"


def _rename(record: dict[str, Any], old: str, new: str) -> None:
    record["nodes"] = {new if k == old else k: v for k, v in record["nodes"].items()}
    record["edges"] = {
        new if src == old else src: {new if dst == old else dst: data for dst, data in dsts.items()}
        for src, dsts in record["edges"].items()
    }


def _ir_name(attributes: Mapping[str, Any], name: str) -> str:
    """The IR's name for a root node: a lone Output is ``"output"`` there."""
    return "output" if attributes.get("nir_output") == name else name


def _without(record: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    drop = set(keys)
    return {k: v for k, v in record.items() if k not in drop}


def _record_ir_in_metadata(
    graph: nir.NIRGraph,
    impls: dict[str, _Impl],
    root: str,
    used: Mapping[str, set[str]],
    back: IR,
    back_state: StateDict,
) -> None:
    """Store in ``graph``'s metadata what NIR → IR would not give back as ``impls`` holds it."""
    structural = ("nodes", "edges", *_SIDE_CHANNEL)
    originals = {name: as_dict(impl, name == root) for name, impl in impls.items()}
    given_keys = {name: sorted(fields) for name, fields in used.items()}  # state_dict fields in NIR
    rebuilt_fields: dict[str, list[str]] = {}
    for key in back_state:
        owner, _, field = key.rpartition(".")
        rebuilt_fields.setdefault(owner, []).append(field)
    reached = {root}

    def note(target: dict[str, Any], key: str, value: Any, what: str) -> None:
        if isinstance(value, dict):  # keep the entries that can be kept
            value = {k: v for k, v in value.items() if _literal(v, f"{what}, {k!r}") is not None}
        text = _literal(value, what)
        if text is not None:
            target[key] = text

    def visit(nir_graph: nir.NIRGraph, impl: _Impl, back_impl: Mapping[str, Any]) -> None:
        for name, node in nir_graph.nodes.items():
            record = impl.nodes[_ir_name(impl.attributes, name)]
            back_record = back_impl["nodes"][_ir_name(back_impl, name)]
            metadata = node.metadata if node.metadata is not None else {}
            node.metadata = metadata
            if not _same(record, back_record):
                note(metadata, "elasticai.node", record, f"IR node {name!r}")
            if record["type"] in _IO:
                continue
            target, back_target = record["implementation"], back_record["implementation"]
            reached.add(target)
            original, rebuilt = originals[target], back[back_target]
            if not _same(_without(original, (*structural, "name")), _without(rebuilt, (*structural, "name"))):
                note(
                    metadata,
                    "elasticai.implementation",
                    _without(original, structural),
                    f"implementation {target!r}",
                )
            kept = given_keys.get(target, [])
            rebuilt_keys = sorted(rebuilt_fields.get(back_target, []))
            if isinstance(node, nir.NIRGraph) and impls[target].type in _GRAPH_TYPES:
                if not _same(original["edges"], rebuilt["edges"]):
                    note(metadata, "elasticai.edges", original["edges"], f"the edges of {target!r}")
                visit(node, impls[target], rebuilt)
            elif kept != rebuilt_keys:
                note(metadata, "elasticai.parameters", tuple(kept), f"the parameters of {target!r}")

    root_impl = impls[root]
    back_root = next(r for r in back.values() if r.get("type") == "module")
    metadata = graph.metadata if graph.metadata is not None else {}
    graph.metadata = metadata
    if not _same(_without(originals[root], structural), _without(back_root, structural)):
        note(metadata, "elasticai.implementation", _without(originals[root], structural), "the root")
    if not _same(originals[root]["edges"], back_root["edges"]):
        note(metadata, "elasticai.edges", originals[root]["edges"], "the root's edges")
    visit(graph, root_impl, back_root)
    orphans = [name for name in impls if name not in reached]
    if orphans:
        warnings.warn(
            f"implementations {_listed(orphans)} are used by no node of the IR; NIR has no place for them",
            LossyConversionWarning,
            stacklevel=3,
        )


def _record_nir_in_ir(graph: nir.NIRGraph, ir: IR, rebuilt: nir.NIRGraph) -> None:
    """Store in ``ir`` what IR → NIR would not give back as ``graph`` holds it: NIR's
    spelling of a value the IR holds too goes to ``nir_fields``. A value the IR gives
    otherwise is an error where this adapter's metadata on the node made it so (the
    metadata contradicts the node), else a :class:`~nirbridge.LossyConversionWarning`
    (a declared shape the data flow contradicts: the IR keeps the shape that arrives)."""

    def visit(original: nir.NIRGraph, again: nir.NIRGraph, record: dict[str, Any], prefix: str) -> None:
        edges = [(str(a), str(b)) for a, b in original.edges]
        if edges != [(str(a), str(b)) for a, b in again.edges]:
            record["nir_edges"] = edges
        for name, node in original.nodes.items():
            if isinstance(node, (nir.Input, nir.Output)):
                continue  # their IR nodes carry their shapes
            path = f"{prefix}.{name}" if prefix else name
            other = again.nodes[name]
            node_record = record["nodes"][name]
            target = ir[node_record["implementation"]]
            if isinstance(node, nir.NIRGraph):
                visit(node, other, target, path)
                continue
            differ = {}
            for f in dataclasses.fields(node):
                if not f.init or f.name in ("metadata", "output_type"):
                    continue
                if f.name == "input_type" and not isinstance(node, nir.Flatten):
                    continue
                value, built = getattr(node, f.name), getattr(other, f.name)
                if _same_field(value, built):
                    continue
                problem = _field_disagreement(node, f.name, built, value)
                if problem is None:
                    differ[f.name] = value
                    continue
                kind = type(node).__name__
                stored = sorted(
                    k for k in (node.metadata or {}) if isinstance(k, str) and k.startswith(_META)
                )
                if stored:
                    raise ParameterError(
                        f"node {path!r} ({kind}): its metadata {stored} makes the IR give field {f.name!r} "
                        f"{_shown(built)}, but the node holds {_shown(value)} ({problem}); remove those "
                        "entries or write the file again with nirbridge.adapters.elasticai.write"
                    )
                warnings.warn(
                    f"node {path!r} ({kind}): field {f.name!r} holds {_shown(value)}, but what flows through "
                    f"the graph makes it {_shown(built)} ({problem}); the IR keeps {_shown(built)}",
                    LossyConversionWarning,
                    stacklevel=4,
                )
            if differ:
                target.setdefault("nir_fields", {}).update(differ)

    visit(graph, rebuilt, next(r for r in ir.values() if r.get("type") == "module"), "")


def _same_field(a: Any, b: Any) -> bool:
    """Equal NIR field values: the same values, shape and (for numbers) dtype, whether
    held as Python or numpy scalars, as files give them back."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (
            isinstance(a, Mapping)
            and isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(_same_field(a[k], b[k]) for k in a)
        )
    if a is None or b is None:
        return a is b
    try:
        x, y = np.asarray(a), np.asarray(b)
    except (ValueError, TypeError):
        return _same(a, b)
    if x.dtype.kind in "USO" or y.dtype.kind in "USO":
        return x.shape == y.shape and bool(np.all(x == y))
    return _same(x, y)

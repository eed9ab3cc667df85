"""Checks of the input that :mod:`nirbridge.adapters.elasticai` converts: the shape and
types of an elasticai.creator IR (its implementation records, node and edge fields, the
``nir_*`` fields :func:`~nirbridge.adapters.elasticai.from_nir` adds), of its state_dict,
and of the ``elasticai.*`` metadata literals that
:func:`~nirbridge.adapters.elasticai.to_nir` stores in a NIR graph.

An IR comes from user code or a file and may be malformed in any way: a field of the
wrong type, a name that is not a string, a container holding itself. Every such input
ends in a :class:`~nirbridge.NirBridgeError` (:class:`~nirbridge.GraphStructureError`
for the graph's structure, :class:`~nirbridge.ParameterError` for values) whose message
names the implementation, node, edge or field at fault and says what to give instead,
never in a ``TypeError``, ``KeyError`` or ``RecursionError`` from deep inside the
conversion. Values nest at most :data:`nirbridge.limits.MAX_METADATA_NESTING` deep, as
NIR metadata does (graph implementations nest at most
:data:`nirbridge.limits.MAX_NESTING`, checked where the graph is built), so that
comparing and writing them cannot exhaust the stack.

These functions only check (and hand back the checked value); the conversion itself is
in :mod:`nirbridge.adapters.elasticai`.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import nir
import numpy as np
import torch

from .. import graph as graph_utils
from ..errors import GraphStructureError, NirBridgeError, ParameterError
from ..limits import MAX_METADATA_NESTING

_IO = ("input", "output")
_META = "elasticai."


# ----------------------------------------------------------------------------- messages


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 80 characters (and safe from a ``repr`` that fails)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__, or one nested too deep
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    """``value``'s type with its article: "a list", "an int"."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


# ----------------------------------------------------------------------------- IR records


_MAX_ITEMS = 10_000_000
"""Most items (counted with repeats) one field of the IR may hold: it is written out as
a Python literal, where every repeat of a shared list is written again."""


def _check_nesting(value: Any, what: str) -> None:
    """Refuse containers nested more than :data:`MAX_METADATA_NESTING` deep (or holding
    themselves), or holding more than :data:`_MAX_ITEMS` items counted with repeats, in
    one field of the IR: the IR's fields travel as NIR metadata, and comparing or writing
    them must neither exhaust the stack nor run for ever. Each container is checked once
    per depth it is met at, so shared containers cost no more than their count."""
    checked: dict[int, tuple[int, int]] = {}  # id -> (deepest depth checked at, items with repeats)

    def visit(item: Any, depth: int) -> int:
        if isinstance(item, Mapping):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = list(item)
        else:
            return 1
        if depth >= MAX_METADATA_NESTING:
            raise ParameterError(
                f"{what} nests lists, tuples or dicts more than {MAX_METADATA_NESTING} deep (or holds "
                "itself); NIR metadata keeps at most that many levels. Flatten the value"
            )
        seen = checked.get(id(item))
        if seen is not None and seen[0] >= depth:  # safe at any depth up to the one checked
            return seen[1]
        items = 1 + sum(visit(child, depth + 1) for child in children)  # at most 16 frames deep
        if items > _MAX_ITEMS:
            raise ParameterError(
                f"{what} holds more than {_MAX_ITEMS} items, counting each repeat of a list it holds "
                "several times; a .nir file would store every repeat. Store it another way"
            )
        checked[id(item)] = (depth, items)
        return items

    visit(value, 0)


def _string_keys(record: Mapping[Any, Any], what: str, error: type[NirBridgeError]) -> None:
    for key in record:
        if not isinstance(key, str):
            raise error(f"{what} has a field named {_shown(key)} ({_kind(key)}); field names are strings")


def _record(value: Any, where: str) -> dict[str, Any]:
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if not isinstance(value, Mapping):
        raise GraphStructureError(f"{where} is {_shown(value)} ({_kind(value)}), not an implementation dict")
    _string_keys(value, where, GraphStructureError)
    return dict(value)


def _name(key: Any, where: str) -> str:
    if not isinstance(key, str):
        raise GraphStructureError(
            f"{where} names an implementation {_shown(key)} ({_kind(key)}); implementation names are strings"
        )
    return key


def _str_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _metadata_dict(value: Any, what: str) -> dict[str, Any]:
    """A ``nir_metadata`` entry: a dict keyed by strings (``None``: empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParameterError(
            f"{what} is {_shown(value)} ({_kind(value)}); NIR metadata is a dict keyed by "
            "strings. Give a dict or remove the entry"
        )
    _string_keys(value, what, ParameterError)
    return dict(value)


def _check_side_channel(attributes: Mapping[str, Any], where: str) -> None:
    """The types of the fields :func:`from_nir` adds to an implementation."""
    _metadata_dict(attributes.get("nir_metadata"), f"{where}: 'nir_metadata'")
    fields = attributes.get("nir_fields")
    if fields is not None:
        if not isinstance(fields, Mapping):
            raise ParameterError(
                f"{where}: 'nir_fields' is {_shown(fields)} ({_kind(fields)}); it must be a dict "
                "{NIR field: value}. Correct it or remove it"
            )
        _string_keys(fields, f"{where}: 'nir_fields'", ParameterError)
    edges = attributes.get("nir_edges")
    if edges is not None:
        if not isinstance(edges, (list, tuple)):
            raise GraphStructureError(
                f"{where}: 'nir_edges' is {_shown(edges)} ({_kind(edges)}); it must be a list "
                "of (source, target) pairs of node names. Correct it or remove it"
            )
        for edge in edges:
            if not (
                isinstance(edge, (list, tuple)) and len(edge) == 2 and all(isinstance(e, str) for e in edge)
            ):
                raise GraphStructureError(
                    f"{where}: 'nir_edges' holds {_shown(edge)}, which is not a (source, target) pair of "
                    "node names. Correct it or remove 'nir_edges'"
                )
    output = attributes.get("nir_output")
    if output is not None and not isinstance(output, str):
        raise GraphStructureError(
            f"{where}: 'nir_output' is {_shown(output)} ({_kind(output)}), not the name of an "
            "Output node. Correct it or remove it"
        )


# ----------------------------------------------------------------------------- attributes and shapes


def _unprefixed(error: ParameterError) -> ParameterError:
    """``graph_utils``' errors with an empty owner start with ": "; the caller names the owner."""
    return ParameterError(str(error).removeprefix(": "))


def _ints(value: Any, count: int, what: str) -> tuple[int, ...]:
    try:
        return graph_utils.ints(value, count, what, "")
    except ParameterError as error:
        raise _unprefixed(error) from None


def _int_attribute(attributes: Mapping[str, Any], key: str, default: int) -> int:
    try:
        return graph_utils.integer(attributes.get(key, default), f"attribute {key!r}", "")
    except ParameterError as error:
        raise _unprefixed(error) from None


_LARGEST_SIZE = 2**31 - 1  # as nirbridge.graph takes sizes


def _shape_value(value: Any, what: str) -> tuple[int, ...]:
    shape = None
    if not isinstance(value, (str, bytes)):
        try:
            array = np.asarray(value)
            if (
                array.ndim == 1
                and array.dtype.kind in "iuf"
                and bool(np.all(np.isfinite(array)))
                and bool(np.all(array == np.round(array)))
            ):
                shape = tuple(int(s) for s in array)
        except (TypeError, ValueError, OverflowError):
            shape = None
    if shape is None or any(s < 1 or s > _LARGEST_SIZE for s in shape):
        raise ParameterError(
            f"{what} must be a tuple of positive ints without the batch axis, such as (2, 10); "
            f"got {_shown(value)}"
        )
    return shape


def _nir_fields(node: nir.NIRNode, fields: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``nir_fields`` checked against ``node``: fields it has, arrays where it holds arrays."""
    if isinstance(node, nir.NIRGraph) or not dataclasses.is_dataclass(node):
        raise ParameterError(f"{where}: 'nir_fields' applies to single NIR nodes, not to a graph; remove it")
    names = [f.name for f in dataclasses.fields(node) if f.init and f.name != "metadata"]
    for field, value in fields.items():
        if field not in names:
            raise ParameterError(
                f"{where}: 'nir_fields' names {field!r}, which {type(node).__name__} has no field for; "
                f"its fields: {names}. Correct or remove the entry"
            )
        current = getattr(node, field)
        if isinstance(current, np.ndarray) or isinstance(value, np.ndarray):
            try:
                kind = np.asarray(value).dtype.kind
            except (TypeError, ValueError):
                kind = "O"
            if kind not in "biuf":
                raise ParameterError(
                    f"{where}: 'nir_fields' gives {field!r} the value {_shown(value)}, not numbers; "
                    "correct or remove the entry"
                )
        elif isinstance(current, Mapping) and not _str_dict(value):
            raise ParameterError(
                f"{where}: 'nir_fields' gives {field!r} the value {_shown(value)}, not a dict keyed by "
                "strings; correct or remove the entry"
            )
    return dict(fields)


# ----------------------------------------------------------------------------- state_dict


def _check_state_dict(state_dict: Any) -> None:
    """The state_dict: ``None`` or a dict keyed by ``"<implementation>.<field>"`` strings."""
    if state_dict is not None and not isinstance(state_dict, Mapping):
        raise ParameterError(
            f"state_dict is {_shown(state_dict)} ({_kind(state_dict)}); pass the weights as "
            "a dict keyed '<implementation>.<field>', such as model.state_dict()"
        )
    for key in state_dict or {}:
        if not isinstance(key, str):
            raise ParameterError(
                f"state_dict key {_shown(key)} is {_kind(key)}; keys are "
                "'<implementation>.<field>' strings, as model.state_dict() gives them"
            )


def _array(key: str, value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        try:
            return value.detach().cpu().numpy().copy()
        except (TypeError, RuntimeError, NotImplementedError):
            raise ParameterError(
                f"state_dict entry {key!r} has dtype {value.dtype} (layout {value.layout}), which numpy "
                "cannot hold; convert it (for example .float()) first"
            ) from None
    try:
        array = np.array(value, copy=True)
    except (TypeError, ValueError, OverflowError):
        array = np.asarray(None)  # a ragged list and the like
    if array.dtype.kind not in "biuf":
        raise ParameterError(
            f"state_dict entry {key!r} is {_shown(value)}, not an array of real numbers; give a tensor or "
            "a numpy array of real numbers"
        )
    return array


def _parameter(value: Any, what: str) -> np.ndarray:
    """A NIR node's array field, as an array of numbers for the state_dict."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        array = np.asarray(None)  # ragged
    if array.dtype.kind not in "biuf":
        raise ParameterError(f"{what} is {_shown(value)}, not an array of numbers; give it numbers")
    return array


# ----------------------------------------------------------------------------- metadata literals


def _metadata_of(node: nir.NIRNode, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A NIR node's metadata, split into what this adapter stored (``elasticai.*``) and the rest."""
    metadata = node.metadata if node.metadata is not None else {}
    if not isinstance(metadata, Mapping):
        raise ParameterError(
            f"{what}: its metadata is {_shown(metadata)} ({_kind(metadata)}); NIR metadata is a "
            "dict keyed by strings"
        )
    metadata = dict(metadata)
    extra = {k: metadata.pop(k) for k in list(metadata) if isinstance(k, str) and k.startswith(_META)}
    return metadata, extra


def _from_literal(text: Any, what: str) -> Any:
    if isinstance(text, np.ndarray) and text.dtype.kind in "US" and text.size == 1:
        text = text.reshape(-1)[0]
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    try:
        return ast.literal_eval(str(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as error:
        raise ParameterError(
            f"{what} is {_shown(text)}, not a Python literal ({type(error).__name__}); remove the entry "
            "or write the file again with nirbridge.adapters.elasticai.write"
        ) from None


def _valid_node(value: Any) -> bool:
    if not (_str_dict(value) and isinstance(value.get("type"), str)):
        return False
    target = value.get("implementation")
    return isinstance(target, str) or (target is None and value["type"] in _IO)


_STORED: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "elasticai.node": (
        "a dict of the IR node's fields with a 'type' and an 'implementation' string",
        _valid_node,
    ),
    "elasticai.implementation": (
        "a dict of the implementation's fields (its 'type' and 'name' strings)",
        lambda v: (
            _str_dict(v)
            and isinstance(v.get("type", ""), str)
            and isinstance(v.get("name", ""), str)
            and all(isinstance(v.get(k, {}), dict) for k in ("nodes", "edges"))
        ),
    ),
    "elasticai.parameters": (
        "a tuple of state_dict field names",
        lambda v: isinstance(v, (tuple, list)) and all(isinstance(k, str) for k in v),
    ),
    "elasticai.edges": (
        "the IR's edges as a dict {src: {dst: {...}}} of node names",
        lambda v: (
            _str_dict(v) and all(_str_dict(d) and all(_str_dict(a) for a in d.values()) for d in v.values())
        ),
    ),
}


def _stored(extra: Mapping[str, Any], key: str, owner: str) -> Any:
    """What :func:`to_nir` stored under ``key`` in ``owner``'s metadata, checked to have
    the type it is written with."""
    what = f"{owner}: metadata {key!r}"
    value = _from_literal(extra[key], what)
    expected, valid = _STORED[key]
    if not valid(value):
        raise ParameterError(
            f"{what} holds {_shown(value)} ({_kind(value)}) where {expected} is expected; "
            "remove the entry or write the file again with nirbridge.adapters.elasticai.write"
        )
    return value

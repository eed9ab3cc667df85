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

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import nir
import numpy as np
import torch

from ... import graph as graph_utils
from ...errors import GraphStructureError, NirBridgeError, ParameterError
from ...limits import MAX_METADATA_NESTING

_IO = ("input", "output")
_META = "elasticai."


# ----------------------------------------------------------------------------- messages


_SHOWN = 80  # characters of a value that messages show


def _shown(value: Any) -> str:
    """``repr(value)`` on one line, cut to 80 characters. Builtin containers and text are
    walked only as far as those characters need (a value of millions of items costs no
    more), and a ``repr`` that fails (a hostile ``__repr__``, an int too long to print) is
    named by type."""
    text = re.sub(r"\n\s*", " ", _bounded_repr(value, _SHOWN + 1, 0))  # numpy's reprs span lines
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _bounded_repr(value: Any, budget: int, depth: int) -> str:
    """``repr(value)``, or a text of at least ``budget`` characters that starts as it does."""
    kind = type(value)
    if kind in (str, bytes):
        return repr(value[:budget])
    brackets = {list: "[]", tuple: "()", dict: "{}", set: "{}"}.get(kind)
    if brackets is None or not value or depth > 8:
        if brackets is not None and value:
            return brackets[0] + "..."
        if kind is set:
            return "set()"
        try:
            return repr(value)
        except Exception:  # noqa: BLE001 - a hostile __repr__, or an int too long to print
            return f"<{kind.__name__}>"
    parts: list[str] = []
    used = 1
    items = value.items() if kind is dict else value
    for item in items:
        if used >= budget:
            parts.append("...")
            break
        if kind is dict:
            key = _bounded_repr(item[0], budget - used, depth + 1)
            text = f"{key}: {_bounded_repr(item[1], budget - used - len(key) - 2, depth + 1)}"
        else:
            text = _bounded_repr(item, budget - used, depth + 1)
        parts.append(text)
        used += len(text) + 2
    inner = ", ".join(parts)
    if kind is tuple and len(value) == 1 and parts[-1] != "...":
        inner += ","
    return brackets[0] + inner + brackets[1]


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


_SIDE_CHANNEL = ("nir_metadata", "nir_fields", "nir_edges", "nir_output")
_GRAPH_ONLY = ("nir_edges", "nir_output")


def _reserved_metadata(metadata: Mapping[str, Any], what: str) -> None:
    """``nir_metadata`` may not hold the keys this adapter writes itself (``elasticai.*``):
    the NIR graph would hold two records of one thing, and one would win unseen."""
    taken = [k for k in metadata if k.startswith(_META)]
    if taken:
        raise ParameterError(
            f"{what} holds {taken}; keys starting with {_META!r} are where this adapter records the "
            "IR in NIR metadata, so it does not take them from the IR. Rename or remove them"
        )


def _check_side_channel(attributes: Mapping[str, Any], where: str, graph: bool) -> None:
    """The fields :func:`from_nir` adds to an implementation (``graph``: one of type
    ``NIRGraph``/``module``): their types, and that each is one this adapter reads, where
    it applies. A ``nir_*`` field it would not read (a misspelt one, ``nir_edges`` of a
    layer, ``nir_fields`` of a graph) is an error, not a field dropped unseen."""
    for key in attributes:
        if key.startswith("nir_") and key not in _SIDE_CHANNEL:
            raise ParameterError(
                f"{where}: field {key!r} is none of the fields this adapter keeps NIR's values in "
                f"({', '.join(_SIDE_CHANNEL)}); correct or remove it"
            )
    if graph and "nir_fields" in attributes:
        raise ParameterError(f"{where}: 'nir_fields' applies to single NIR nodes, not to a graph; remove it")
    for key in _GRAPH_ONLY:
        if not graph and key in attributes:
            raise GraphStructureError(
                f"{where}: {key!r} applies to graph implementations (type 'module' or 'NIRGraph'), "
                "not to a layer; remove it"
            )
    metadata = _metadata_dict(attributes.get("nir_metadata"), f"{where}: 'nir_metadata'")
    _reserved_metadata(metadata, f"{where}: 'nir_metadata'")
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


def _check_node_side_channel(record: Mapping[str, Any], what: str) -> None:
    """A node record's ``nir_*`` fields: only an input or output node keeps its NIR
    metadata in the record (a layer's goes with its implementation)."""
    for key in record:
        if not key.startswith("nir_"):
            continue
        if key != "nir_metadata" or record.get("type") not in _IO:
            raise ParameterError(
                f"{what}: field {key!r} is not read from a node record (only an input or output node "
                "keeps 'nir_metadata' there; a layer's NIR fields go with its implementation); move or "
                "remove it"
            )
    metadata = _metadata_dict(record.get("nir_metadata"), f"{what}: 'nir_metadata'")
    _reserved_metadata(metadata, f"{what}: 'nir_metadata'")


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
    """``nir_fields`` checked against ``node``: fields it has, dicts keyed by strings where
    it holds such a dict. Whether the values agree with the node is checked once its
    shapes are known (:func:`_field_disagreement`)."""
    if isinstance(node, nir.NIRGraph) or not dataclasses.is_dataclass(node):
        raise ParameterError(f"{where}: 'nir_fields' applies to single NIR nodes, not to a graph; remove it")
    names = [f.name for f in dataclasses.fields(node) if f.init and f.name != "metadata"]
    for field, value in fields.items():
        if field not in names:
            raise ParameterError(
                f"{where}: 'nir_fields' names {field!r}, which {type(node).__name__} has no field for; "
                f"its fields: {names}. Correct or remove the entry"
            )
        if isinstance(getattr(node, field), Mapping) and not _str_dict(value):
            raise ParameterError(
                f"{where}: 'nir_fields' gives {field!r} the value {_shown(value)}, not a dict keyed by "
                "strings; correct or remove the entry"
            )
    return dict(fields)


_SHAPE_TYPES = ("input_type", "output_type")
"""Fields that declare a node's shapes, as dicts of arrays; a leading axis of 1 (the
batch axis, as old spyx files count it) spells the same shape."""

_SPELLINGS = ("stride", "padding", "dilation", "groups", "kernel_size", "start_dim", "end_dim", "input_shape")
"""Fields NIR lets one value spell for every axis (``stride=2`` is ``(2, 2)``); other
number fields hold one number per element and must keep their shape."""


def _text(value: Any) -> str | None:
    """Text held as a str, bytes or a one-element array of them; None for anything else."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "US" and value.size == 1:
        value = value.reshape(-1)[0]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def _numbers(value: Any) -> np.ndarray | None:
    """``value`` as an array of real numbers (or booleans); None for anything else."""
    if value is None or isinstance(value, (str, bytes, Mapping)):
        return None
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return None
    return array if array.dtype.kind in "biuf" else None


def _conv_padding(node: nir.NIRNode, value: Any) -> Any:
    """A convolution's padding with ``"valid"``, and ``"same"`` where it pads evenly, as the
    integers they stand for (as :func:`nirbridge.layers.conv_node` writes them)."""
    text = _text(value)
    weight = np.asarray(getattr(node, "weight", None))
    if text not in ("same", "valid") or weight.dtype.kind not in "biuf" or weight.ndim < 3:
        return value
    dims = weight.ndim - 2
    if text == "valid":
        return np.zeros(dims, dtype=np.int64)
    dilation = _numbers(getattr(node, "dilation", 1))
    if dilation is None:
        return value
    try:
        dilations = np.broadcast_to(dilation.reshape(-1) if dilation.ndim else dilation, (dims,))
    except ValueError:
        return value
    totals = [int(d) * (int(k) - 1) for d, k in zip(dilations, weight.shape[2:])]
    return np.array([t // 2 for t in totals], dtype=np.int64) if all(t % 2 == 0 for t in totals) else value


def _core_shape(value: Any) -> tuple[int, ...] | str:
    """A declared shape without its leading axes of 1; ``"unknown"`` for NIR's unknown
    shape (None, an array of None), ``"invalid"`` for what is no shape."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return "invalid"
    if value is None or array.dtype == object:
        return "unknown" if all(v is None for v in array.reshape(-1)) else "invalid"
    if (
        array.ndim != 1
        or array.dtype.kind not in "iuf"
        or not np.all(np.isfinite(array))
        or not np.all(array == np.round(array))
    ):
        return "invalid"
    shape = tuple(int(v) for v in array)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _same_shape(a: Any, b: Any) -> bool:
    """Two declared shapes alike but for leading axes of 1 (or both unknown)."""
    core = _core_shape(a)
    return core != "invalid" and core == _core_shape(b)


def _field_disagreement(node: nir.NIRNode, field: str, built: Any, given: Any) -> str | None:
    """None where ``given`` (NIR's spelling of ``node``'s ``field``) spells what ``built``
    (what the IR, its state_dict and the inferred shapes give the field) holds: another
    dtype or byte order of the same numbers, an array for a tuple, ``2`` for ``(2, 2)`` in
    a stride, ``"same"`` for the padding it stands for, a declared shape with a leading
    axis of 1. Otherwise how they differ, in a few words."""
    if field in _SHAPE_TYPES:
        if not (isinstance(built, Mapping) and isinstance(given, Mapping)) or built.keys() != given.keys():
            return "other ports"
        for port in built:
            if not _same_shape(built[port], given[port]):
                return f"another shape for {port!r}"
        return None
    if field == "padding" and isinstance(node, (nir.Conv1d, nir.Conv2d)):
        built, given = _conv_padding(node, built), _conv_padding(node, given)
    if built is None or given is None:
        return None if built is None and given is None else "a value against None"
    a, b = _numbers(built), _numbers(given)
    if a is not None and b is not None:
        if field in _SPELLINGS:
            try:
                a, b = np.broadcast_arrays(a.reshape(-1), b.reshape(-1))
            except ValueError:
                return "another number of values"
        elif a.shape != b.shape:
            return f"shape {b.shape} against {a.shape}"
        nan = a.dtype.kind == "f" and b.dtype.kind == "f"
        return None if np.array_equal(a, b, equal_nan=nan) else "other values"
    ta, tb = _text(built), _text(given)
    if ta is not None and tb is not None:
        return None if ta == tb else "other text"
    try:
        equal = type(built) is type(given) and bool(built == given)
    except Exception:  # noqa: BLE001 - values that do not compare
        equal = False
    return None if equal else "values of another kind"


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

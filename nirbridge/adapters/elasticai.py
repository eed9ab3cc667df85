"""elasticai.creator IR ⇄ NIR, stored as ``.nir`` HDF5.

elasticai.creator describes a network as a dict of *implementations*: one of type
``"module"`` (the root, named ``""``) holds ``nodes`` (``{name: {"type",
"implementation"}}``) and ``edges`` (``{src: {dst: {}}}``); every other implementation
holds one submodule's hyperparameters. Its IR carries no weights and no shapes: the
weights are a ``state_dict`` keyed ``"<implementation>.<field>"`` and shapes follow from
the input shape.

==============================  ==========================================================
elasticai type                  NIR node
==============================  ==========================================================
``input`` / ``output``          Input / Output (the IR node's ``shape``, batch excluded)
``linear``                      Affine (``bias=True``) / Linear (``bias=False``)
``conv1d`` / ``conv2d``         Conv1d / Conv2d: padding, stride, dilation, groups kept
``flatten``                     Flatten (torch dims, batch axis 0; default 1 … -1)
the NIR type name (``LIF``,     that NIR node: array fields in the state_dict, the rest as
``CubaLIF``, ``Delay``, …)      hyperparameters
``NIRGraph`` (or ``module``)    a nested NIRGraph; its nodes' implementations are named
                                ``"<graph>.<node>"``
==============================  ==========================================================

Every other elasticai type (``relu``, ``sigmoid``, ``batchnorm1d``, ``maxpool1d`` …) is
an :class:`~nirbridge.UnsupportedImplementationError` listing its nodes, unless
``type_map`` maps it.

Both directions are exact. What one side holds and the other cannot express goes along
so that a round trip gives back what it started from:

* IR → NIR: an IR node record, implementation or set of parameters that the NIR node
  would not give back as they are (a node whose implementation has another name, a
  submodule called twice, ``bias=False`` in a convolution, a spelling such as
  ``padding="same"``) is stored in the NIR node's metadata as a Python literal under
  ``"elasticai.node"``, ``"elasticai.implementation"``, ``"elasticai.parameters"``; the
  root's under the graph's ``"elasticai.implementation"`` and ``"elasticai.edges"``.
* NIR → IR: node and graph metadata go to the implementation's ``"nir_metadata"``; a
  field the IR would not give back as it is (an array spelling of a stride, a shape
  that differs from the inferred one) to ``"nir_fields"``; an edge order that grouping
  by source changes to ``"nir_edges"``.

Nothing given is dropped unseen, and nothing stored for the round trip overrides what
the IR holds:

* A state_dict key that names no implementation, names a graph implementation, or names
  a field a built-in type does not take (``"fc.bais"`` of a ``linear``) is a
  :class:`~nirbridge.ParameterError` naming the key. Entries a ``type_map`` converter
  leaves, attributes and node fields NIR has no use for (kept for the way back) and
  implementations no node uses are named in a
  :class:`~nirbridge.LossyConversionWarning`. A ``nir_*`` field this adapter does not
  read there, and an ``elasticai.*`` metadata key it does not write there, are errors.
* ``nir_fields`` only restores how NIR spelt a value the IR holds too (another dtype or
  byte order of the same numbers, ``2`` for ``(2, 2)``, ``"same"`` for the padding it
  stands for, a shape with a leading batch axis of 1). One that gives other weights or
  contradicts the inferred shapes is a :class:`~nirbridge.ParameterError` naming the
  implementation, node and field; ``elasticai.*`` metadata that contradicts its node
  is one naming the node and the metadata key.
* ``elasticai.*`` metadata entries are Python literals of at most
  :data:`MAX_LITERAL_CHARS` characters, read by a parser whose cost follows the value
  it builds (``ast.literal_eval`` spends some 450 bytes a character): longer ones are
  left out on writing (with a warning) and refused before parsing on reading.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import nir
import numpy as np
import torch

from .. import graph as graph_utils
from .. import io
from ..errors import (
    GraphStructureError,
    LossyConversionWarning,
    MissingNodeError,
    MissingShapeError,
    NirBridgeError,
    NodeConversionError,
    ParameterError,
    RepairWarning,
    ShapeMismatchError,
    UnsupportedImplementationError,
)
from ..layers import _nir_dim, conv_node
from ..limits import MAX_NESTING, check_memory
from ._elasticai_checks import (
    _IO,
    _META,
    _SIDE_CHANNEL,
    MAX_LITERAL_CHARS,
    _array,
    _check_nesting,
    _check_node_side_channel,
    _check_side_channel,
    _check_state_dict,
    _field_disagreement,
    _int_attribute,
    _ints,
    _kind,
    _metadata_dict,
    _metadata_of,
    _name,
    _nir_fields,
    _parameter,
    _record,
    _shape_value,
    _shown,
    _stored,
    _stored_keys,
    _string_keys,
    parse_literal,
)

__all__ = ["FROM_NIR", "MAX_LITERAL_CHARS", "TO_NIR", "from_nir", "read", "to_nir", "write"]

IR = dict[str, dict[str, Any]]
StateDict = dict[str, torch.Tensor]
ToNir = Callable[[dict[str, Any], dict[str, np.ndarray]], nir.NIRNode]
FromNir = Callable[[Any], "tuple[str, dict[str, Any], dict[str, np.ndarray]] | None"]

_GRAPH_TYPES = ("NIRGraph", "module")
_NODE_FIELDS = ("type", "implementation")  # what an IR node record holds
_IO_FIELDS = ("type", "implementation", "shape", "nir_metadata")  # an input or output node's
_ON_GRAPHS = ("elasticai.implementation", "elasticai.edges")  # what to_nir records on a graph
_ON_LAYERS = ("elasticai.node", "elasticai.implementation", "elasticai.parameters")  # on a layer's node


# ----------------------------------------------------------------------------- elasticai → NIR


class _MissingParameter(Exception):
    pass


class _Parameters(dict):
    """A converter's parameters; a missing one becomes an error naming the state_dict key,
    and those never read are reported as left out."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> np.ndarray:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __missing__(self, key: str) -> np.ndarray:
        raise _MissingParameter(key)


class _Attributes(dict):
    """A converter's attributes, noting which it looks at (read, ``get`` or ``in``), so
    that those a built-in converter never looks at can be named."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


def _check(attributes: Mapping[str, Any], key: str, actual: int, what: str) -> None:
    if key in attributes and _int_attribute(attributes, key, actual) != actual:
        raise ParameterError(f"{key}={attributes[key]!r} does not match the {what} ({actual})")


def _bias(attributes: Mapping[str, Any], parameters: _Parameters, out: int) -> np.ndarray | None:
    flag = attributes.get("bias", "bias" in parameters)
    if not isinstance(flag, (bool, np.bool_)):
        raise ParameterError(f"attribute 'bias' is {_shown(flag)}; give True or False")
    if not flag:
        if "bias" in parameters:
            raise ParameterError("bias=False, but the state_dict holds a bias; drop one of them")
        return None
    bias = parameters["bias"]
    if bias.shape != (out,):
        raise ParameterError(f"bias must have shape ({out},), got {bias.shape}")
    return bias


def linear_to_nir(attributes: dict[str, Any], parameters: _Parameters) -> nir.Affine | nir.Linear:
    """``linear`` (``in_features``, ``out_features``, ``bias``): y = W x (+ b)."""
    weight = parameters["weight"]
    if weight.ndim != 2:
        raise ParameterError(f"weight must be 2-D (out_features, in_features), got shape {weight.shape}")
    _check(attributes, "out_features", weight.shape[0], "weight's rows")
    _check(attributes, "in_features", weight.shape[1], "weight's columns")
    bias = _bias(attributes, parameters, weight.shape[0])
    return nir.Linear(weight=weight) if bias is None else nir.Affine(weight=weight, bias=bias)


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _conv_to_nir(dims: int) -> ToNir:
    def convert(attributes: dict[str, Any], parameters: _Parameters) -> nir.Conv1d | nir.Conv2d:
        weight = parameters["weight"]
        if weight.ndim != dims + 2:
            raise ParameterError(
                f"weight must be {dims + 2}-D (out_channels, in_channels/groups, kernel...), "
                f"got shape {weight.shape}"
            )
        groups = _int_attribute(attributes, "groups", 1)
        padding_mode = attributes.get("padding_mode", "zeros")
        if not (isinstance(padding_mode, str) and padding_mode in _PADDING_MODES):
            raise ParameterError(
                f"attribute 'padding_mode' is {_shown(padding_mode)}; give one of torch's "
                f"{', '.join(repr(m) for m in _PADDING_MODES)}"
            )
        _check(attributes, "out_channels", weight.shape[0], "weight's first axis")
        _check(attributes, "in_channels", weight.shape[1] * groups, "weight's second axis times groups")
        if "kernel_size" in attributes:
            kernel = _ints(attributes["kernel_size"], dims, "kernel_size")
            if kernel != tuple(weight.shape[2:]):
                raise ParameterError(
                    f"kernel_size={attributes['kernel_size']!r} does not match the weight's shape "
                    f"{weight.shape}"
                )
        return conv_node(
            weight,
            _bias(attributes, parameters, weight.shape[0]),
            stride=attributes.get("stride", 1),
            padding=attributes.get("padding", 0),
            dilation=attributes.get("dilation", 1),
            groups=groups,
            padding_mode=padding_mode,
        )

    convert.__name__ = convert.__qualname__ = f"conv{dims}d_to_nir"
    convert.__doc__ = (
        f"``conv{dims}d`` (torch.nn.Conv{dims}d's arguments) as NIR Conv{dims}d; ``bias=False`` "
        "gives a zero bias."
    )
    return convert


def flatten_to_nir(attributes: dict[str, Any], parameters: _Parameters) -> nir.Flatten:
    """``flatten`` (``start_dim``, ``end_dim`` counted with the batch axis; default 1, -1)."""
    return nir.Flatten(
        input_type=None,
        start_dim=_nir_dim(_int_attribute(attributes, "start_dim", 1), "start_dim", "flatten"),
        end_dim=_nir_dim(_int_attribute(attributes, "end_dim", -1), "end_dim", "flatten"),
    )


TO_NIR: dict[str, ToNir] = {
    "linear": linear_to_nir,
    "conv1d": _conv_to_nir(1),
    "conv2d": _conv_to_nir(2),
    "flatten": flatten_to_nir,
}
"""elasticai types → NIR nodes: ``fn(attributes, parameters) -> nir.NIRNode``, where
``parameters`` are the implementation's state_dict entries as numpy arrays (by field).
NIR type names (``"LIF"``) and nested graphs are handled besides these."""

_WEIGHTS: dict[Callable[..., Any], tuple[str, ...]] = {
    linear_to_nir: ("weight", "bias"),
    TO_NIR["conv1d"]: ("weight", "bias"),
    TO_NIR["conv2d"]: ("weight", "bias"),
    flatten_to_nir: (),
}
"""The built-in converters and the state_dict fields each takes: a state_dict entry or
an attribute they do not read is named (an error for an entry, whose weights would be
lost; a warning for an attribute, which the NIR node ignores but the IR read back keeps).
A converter from ``type_map`` decides for itself what it needs: entries it leaves are
named in one warning."""


def _nir_class(kind: str) -> type | None:
    cls = getattr(nir, kind, None)
    if (
        isinstance(cls, type)
        and issubclass(cls, nir.NIRNode)
        and dataclasses.is_dataclass(cls)
        and cls not in (nir.NIRGraph, nir.Input, nir.Output, nir.NIRNode)
    ):
        return cls
    return None


_SHAPE_FIELDS = ("input_type", "output_type", "metadata", "input_shape")


_ARRAY_TYPES = (np.ndarray, np.ndarray | None, "np.ndarray", "Optional[np.ndarray]", "np.ndarray | None")


def _generic_to_nir(cls: type, attributes: dict[str, Any], parameters: _Parameters) -> nir.NIRNode:
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    twice = [k for k in parameters if dict.__contains__(attributes, k)]
    if twice:
        raise ParameterError(
            f"{cls.__name__}'s field(s) {twice} are given twice: as attributes of the implementation "
            "and in the state_dict. Keep one (arrays go in the state_dict)"
        )
    kwargs = {**attributes, **parameters}
    parameters.read.update(parameters)
    unknown = [k for k in kwargs if k not in fields or k in _SHAPE_FIELDS]
    if unknown:
        raise ParameterError(f"{cls.__name__} has no field(s) {unknown}; its fields: {list(fields)}")
    for name, f in fields.items():
        if name in ("input_type", "input_shape"):
            kwargs[name] = None  # filled in by shape inference
        elif name not in kwargs and name != "metadata":
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _MissingParameter(name)
        elif name in kwargs and (f.type in _ARRAY_TYPES or isinstance(kwargs[name], list)):
            value = kwargs[name]
            if value is None and f.type not in (np.ndarray, "np.ndarray"):
                continue
            try:  # JSON gives arrays back as lists
                array = np.asarray(value)
            except (TypeError, ValueError):
                array = np.asarray(None)  # ragged
            if array.dtype.kind not in "biuf":
                raise ParameterError(
                    f"{cls.__name__}'s field {name!r} is {_shown(value)}, not numbers; give an array "
                    "(in the state_dict) or a number"
                )
            if isinstance(value, list):
                kwargs[name] = array
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, AttributeError, IndexError) as error:
        raise ParameterError(f"{cls.__name__}({', '.join(kwargs)}) cannot be built: {error}") from None


# ----------------------------------------------------------------------------- NIR → elasticai


def _int(value: Any) -> int:
    return int(np.asarray(value).reshape(-1)[0])


def affine_from_nir(node: nir.Affine) -> tuple[str, dict[str, Any], dict[str, np.ndarray]] | None:
    weight, bias = np.asarray(node.weight), np.asarray(node.bias)
    if weight.ndim != 2 or bias.shape != (weight.shape[0],):
        return None
    out, features = weight.shape
    return (
        "linear",
        {"in_features": features, "out_features": out, "bias": True},
        {"weight": weight, "bias": bias},
    )


def linear_from_nir(node: nir.Linear) -> tuple[str, dict[str, Any], dict[str, np.ndarray]] | None:
    weight = np.asarray(node.weight)
    if weight.ndim != 2:
        return None
    out, features = weight.shape
    return "linear", {"in_features": features, "out_features": out, "bias": False}, {"weight": weight}


def conv_from_nir(node: nir.Conv1d | nir.Conv2d) -> tuple[str, dict[str, Any], dict[str, np.ndarray]] | None:
    dims = 1 if isinstance(node, nir.Conv1d) else 2
    weight = np.asarray(node.weight)
    bias = None if node.bias is None else np.asarray(node.bias)
    if weight.ndim != dims + 2 or bias is None or bias.shape != (weight.shape[0],):
        return None
    groups = _int(node.groups)
    attributes = {
        "in_channels": weight.shape[1] * groups,
        "out_channels": weight.shape[0],
        "kernel_size": tuple(int(k) for k in weight.shape[2:]),
        "stride": _ints(node.stride, dims, "stride"),
        "padding": graph_utils.padding_arg(node.padding, dims, type(node).__name__),
        "dilation": _ints(node.dilation, dims, "dilation"),
        "groups": groups,
        "bias": True,
        "padding_mode": "zeros",
    }
    return f"conv{dims}d", attributes, {"weight": weight, "bias": bias}


def flatten_from_nir(node: nir.Flatten) -> tuple[str, dict[str, Any], dict[str, np.ndarray]] | None:
    if _int(node.start_dim) == 0 and _int(node.end_dim) == -1:
        return "flatten", {}, {}
    return None  # other dims: elasticai's flatten rebuilds a default nn.Flatten


FROM_NIR: dict[type, FromNir] = {
    nir.Affine: affine_from_nir,
    nir.Linear: linear_from_nir,
    nir.Conv1d: conv_from_nir,
    nir.Conv2d: conv_from_nir,
    nir.Flatten: flatten_from_nir,
}
"""NIR node types → elasticai: ``fn(node) -> (type, attributes, parameters)``, or
``None`` to keep the node as its NIR type. Types missing here keep their NIR type."""


def _generic_from_nir(node: nir.NIRNode) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    attributes, parameters = {}, {}
    for f in dataclasses.fields(node):
        if not f.init or f.name in _SHAPE_FIELDS:
            continue
        value = getattr(node, f.name)
        if isinstance(value, np.ndarray):
            parameters[f.name] = value
        else:
            attributes[f.name] = value
    return type(node).__name__, attributes, parameters


# ----------------------------------------------------------------------------- IR spellings


@dataclass
class _Impl:
    name: str
    type: str
    attributes: dict[str, Any]
    nodes: dict[str, dict[str, Any]]
    edges: list[tuple[str, str, dict[str, Any]]]


def _entries(ir: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, record) pairs from every spelling of an IR."""
    if (
        isinstance(ir, tuple)
        and len(ir) == 2
        and isinstance(ir[0], Mapping)
        and "attributes" in ir[0]
        and isinstance(ir[1], Mapping)
    ):  # 0.68: (root graph, registry)
        root = _record(ir[0], "the root graph")
        return [
            ("", root),
            *((_name(k, "the registry"), _record(v, f"implementation {k!r}")) for k, v in ir[1].items()),
        ]
    if isinstance(ir, Mapping):
        return [(_name(k, "the IR"), _record(v, f"implementation {k!r}")) for k, v in ir.items()]
    if isinstance(ir, (str, bytes, os.PathLike)):
        raise GraphStructureError(
            "to_nir takes the IR itself (implementations or their dicts); to read a .nir file "
            "use nirbridge.adapters.elasticai.read(path)"
        )
    if isinstance(ir, Iterable) and not isinstance(ir, (np.ndarray, torch.Tensor)):
        entries = []
        for index, item in enumerate(ir):
            record = _record(item, f"item {index} of the IR")
            name = getattr(item, "name", record.get("name"))
            if not isinstance(name, str):
                raise GraphStructureError(f"item {index} of the IR has no name; give each implementation one")
            entries.append((name, record))
        return entries
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
        impls[name] = _Impl(
            name, kind, attributes, _nodes(record.get("nodes"), where), _edges(record.get("edges"), where)
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


def _as_dict(impl: _Impl, root: bool) -> dict[str, Any]:
    """The 0.63-0.67 ``Implementation.as_dict()`` form."""
    nodes = {name: dict(record) for name, record in impl.nodes.items()}
    edges: dict[str, dict[str, Any]] = {}
    for src, dst, data in impl.edges:
        edges.setdefault(src, {})[dst] = dict(data)
    if root:
        return {**impl.attributes, "nodes": nodes, "edges": edges, "type": impl.type, "name": impl.name}
    return {**impl.attributes, "nodes": nodes, "edges": edges, "name": impl.name, "type": impl.type}


# ----------------------------------------------------------------------------- equality, literals


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types (arrays: same dtype and shape); NaN equals NaN."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if type(a) is not type(b):
        return False
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _literal(value: Any, what: str) -> str | None:
    """``value`` as the Python literal a .nir file keeps it in, checked to read back as
    it is (with the bounded reader :func:`from_nir` uses); None, with a
    :class:`~nirbridge.LossyConversionWarning`, where it is no literal or longer than
    :data:`MAX_LITERAL_CHARS`."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an int too long to print, a hostile __repr__
        text = None
    if text is not None and len(text) > MAX_LITERAL_CHARS:
        problem = (
            f"is {len(text)} characters long as a Python literal, more than the {MAX_LITERAL_CHARS} "
            "(nirbridge.adapters.elasticai.MAX_LITERAL_CHARS) a .nir file keeps in one entry"
        )
    else:
        try:
            ok = text is not None and _same(parse_literal(text), value)
        except (ValueError, MemoryError, RecursionError):
            ok = False
        if ok:
            return text
        shown = text[:80] if text is not None else f"a {type(value).__name__} that cannot be printed"
        problem = f"holds values that a .nir file cannot keep as Python literals ({shown})"
    warnings.warn(
        f"{what} {problem}; it is left out, so the IR read back from NIR differs there",
        LossyConversionWarning,
        stacklevel=4,
    )
    return None


# ----------------------------------------------------------------------------- IR → NIR (raw)


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.nelement() * value.element_size()
    return value.nbytes if isinstance(value, np.ndarray) else 0


_NODE_BYTES = 4096  # a NIR node's objects besides its arrays, roughly


def _prefixed(error: NirBridgeError, where: str) -> NirBridgeError:
    """``error`` with ``where`` before its message, as the same class where that class
    takes a message alone (else ``error`` as it is: its message names what it is about)."""
    try:
        again = type(error)(f"{where}: {str(error).removeprefix(': ')}")
    except TypeError:
        return error
    return again


class _IrToNir:
    def __init__(
        self,
        impls: dict[str, _Impl],
        root: str,
        state_dict: Mapping[str, Any] | None,
        type_map: Mapping[str, ToNir],
    ) -> None:
        self.impls, self.root, self.type_map = impls, root, type_map
        self.parameters: dict[str, dict[str, Any]] = {}
        _check_state_dict(state_dict)
        nameless, of_graphs = [], []
        for key, value in (state_dict or {}).items():
            owner, dot, field = key.rpartition(".")
            if not (dot and field and owner in impls):
                nameless.append(key)
            elif impls[owner].type in _GRAPH_TYPES:
                of_graphs.append(key)
            else:
                self.parameters.setdefault(owner, {})[field] = value
        if nameless:
            raise ParameterError(_nameless_keys(nameless, impls))
        if of_graphs:
            raise ParameterError(
                f"state_dict entries {_listed(of_graphs)} belong to graph implementations, which hold "
                "no weights of their own (their nodes' implementations do: '<graph>.<node>.<field>'); "
                "correct the keys or remove them"
            )
        self.used: dict[str, set[str]] = {}
        self.fields: list[tuple[nir.NIRNode, dict[str, Any], str]] = []  # nir_fields, checked last
        self.declared: list[tuple[str, nir.Output, np.ndarray]] = []  # output shapes the IR gives

    def check_types(self) -> None:
        """Check, before anything is built, every implementation the root reaches: each
        type has a converter, no graph implementation holds itself, graphs nest at most
        :data:`MAX_NESTING` deep and the NIR graph (which copies an implementation for
        every node that uses it) fits in memory. Iterative, each implementation once."""
        offenders: dict[str, list[str]] = {}
        height: dict[str, int] = {}  # graphs nested inside a graph implementation (0: none)
        cost: dict[str, int] = {}  # bytes one use of an implementation builds, roughly
        count: dict[str, int] = {}  # NIR nodes one use of an implementation builds
        root = self.impls[self.root]
        stack: list[tuple[_Impl, str, Iterator[tuple[str, dict[str, Any]]]]] = [
            (root, "", iter(root.nodes.items()))
        ]
        while stack:
            impl, path, todo = stack[-1]
            for name, record in todo:
                if record["type"] in _IO:
                    continue
                label = f"{path}.{name}" if path else name
                target = self.implementation(record, label)
                sub = self.impls[target]
                if sub.type not in _GRAPH_TYPES:
                    if target not in cost:
                        given = self.parameters.get(target, {}).values()
                        cost[target] = _NODE_BYTES + sum(_nbytes(v) for v in given)
                        count[target] = 1
                    if sub.type not in self.type_map and _nir_class(sub.type) is None:
                        offenders.setdefault(sub.type, []).append(f"{label!r} (implementation {target!r})")
                    continue
                chain = [entry[0].name for entry in stack]
                if target in chain:
                    loop = " -> ".join(repr(n) for n in [*chain[chain.index(target) :], target])
                    raise GraphStructureError(
                        f"implementation {target!r} contains itself ({loop}, at node {label!r}); a graph "
                        "cannot hold itself. Point the node at another implementation"
                    )
                if len(stack) + height.get(target, 0) > MAX_NESTING:
                    shown = label if len(label) <= 200 else label[:200] + "..."
                    raise GraphStructureError(
                        f"graph implementations nest more than {MAX_NESTING} deep (at node {shown!r}, "
                        f"implementation {target!r}); nirbridge reads, writes and runs graphs nested up to "
                        f"{MAX_NESTING} deep. Flatten the inner graphs into their parents"
                    )
                if target not in height:
                    stack.append((sub, label, iter(sub.nodes.items())))
                    break
            else:
                stack.pop()
                used = [r["implementation"] for r in impl.nodes.values() if r["type"] not in _IO]
                graphs = [t for t in used if self.impls[t].type in _GRAPH_TYPES]
                height[impl.name] = max((height[t] + 1 for t in graphs), default=0)
                own = 1 + len(impl.nodes) - len(used)  # the graph and its Input and Output nodes
                cost[impl.name] = own * _NODE_BYTES + sum(cost[t] for t in used)
                count[impl.name] = own + sum(count[t] for t in used)
        if offenders:
            raise UnsupportedImplementationError(offenders, sorted(self.type_map))
        check_memory(
            cost[self.root],
            f"the NIR graph of this IR ({count[self.root]} nodes: a node for every use of every "
            "implementation, through every graph implementation that uses it)",
            "use each graph implementation in fewer places, or flatten the inner graphs",
        )

    def implementation(self, record: Mapping[str, Any], label: str) -> str:
        target = record.get("implementation")
        if not isinstance(target, str) or target not in self.impls:
            raise GraphStructureError(
                f"IR node {label!r} ({record['type']}) names implementation {_shown(target)}, which is not "
                "in the IR; add it or correct the node"
            )
        return target

    def graph(self, impl: _Impl, path: str) -> nir.NIRGraph:
        where = f"implementation {impl.name!r}"
        original = impl.attributes.get("nir_output")  # the NIR name of the IR's "output"
        renamed = original is not None
        if renamed and (impl.nodes.get("output", {}).get("type") != "output" or original in impl.nodes):
            raise GraphStructureError(
                f"{where}: 'nir_output' gives node 'output' the NIR name {original!r}, but "
                + (
                    f"a node is named {original!r} already"
                    if original in impl.nodes
                    else "the graph has no output node named 'output'"
                )
                + "; correct or remove 'nir_output'"
            )
        ignored = [k for k in impl.attributes if k not in _SIDE_CHANNEL]
        if ignored:
            warnings.warn(
                f"{where} ({impl.type}, node {path or '<root>'!r}): attribute(s) {_listed(ignored)} have no "
                "place in a NIR graph, so the graph ignores them (its metadata keeps them for the IR "
                "read back)",
                LossyConversionWarning,
                stacklevel=4,
            )

        def nir_name(name: str) -> str:
            return original if renamed and name == "output" else name

        nodes: dict[str, nir.NIRNode] = {}
        for name, record in impl.nodes.items():
            label = f"{path}.{name}" if path else name
            kind = record["type"]
            ignored = [k for k in record if k not in (_IO_FIELDS if kind in _IO else _NODE_FIELDS)]
            if ignored:
                warnings.warn(
                    f"IR node {label!r} ({kind}): field(s) {_listed(ignored)} mean nothing to NIR (a node "
                    f"record holds {', '.join(_IO_FIELDS if kind in _IO else _NODE_FIELDS)}), so the NIR "
                    "graph ignores them; its metadata keeps them for the IR read back. Correct the name "
                    "if one is misspelt",
                    LossyConversionWarning,
                    stacklevel=4,
                )
            if kind in _IO:
                shape = record.get("shape")
                value = (
                    None
                    if shape is None
                    else np.array(_shape_value(shape, f"the shape of IR node {label!r}"), dtype=np.int64)
                )
                node = nir.Input(input_type={"input": value}) if kind == "input" else nir.Output(None)
                node.metadata = _metadata_dict(record.get("nir_metadata"), f"IR node {label!r}")
                if kind == "output" and value is not None:  # a declared shape wins over the inferred
                    self.declared.append((label, node, value))
            else:
                sub = self.impls[self.implementation(record, label)]
                node = self.graph(sub, label) if sub.type in _GRAPH_TYPES else self.node(sub, label)
                node.metadata = _metadata_dict(
                    sub.attributes.get("nir_metadata"), f"implementation {sub.name!r}"
                )
                if sub.attributes.get("nir_fields"):
                    at = f"implementation {sub.name!r} (node {label!r})"
                    self.fields.append((node, _nir_fields(node, sub.attributes["nir_fields"], at), at))
            nodes[nir_name(name)] = node
        for src, dst, _ in impl.edges:
            for end in (src, dst):
                if end not in impl.nodes:
                    raise MissingNodeError((src, dst), end, file=where)
        ir_edges = [(nir_name(src), nir_name(dst)) for src, dst, _ in impl.edges]
        edges = impl.attributes.get("nir_edges")  # NIR's names and order
        if edges is None:
            edges = ir_edges
        else:
            edges = [(src, dst) for src, dst in edges]
            for src, dst in edges:
                for end in (src, dst):
                    if end not in nodes:
                        raise MissingNodeError((src, dst), end, file=f"{where}, 'nir_edges'")
            counted, ir_counted = Counter(edges), Counter(ir_edges)  # an edge listed twice sums twice
            only_nir, only_ir = set(counted - ir_counted), set(ir_counted - counted)
            if only_nir or only_ir:
                raise GraphStructureError(
                    f"{where}: 'nir_edges' (the order NIR gave its edges) does not list the same edges as "
                    f"'edges', counting repeats: {_listed(sorted(only_nir))} only in 'nir_edges', "
                    f"{_listed(sorted(only_ir))} only in 'edges'. "
                    "Remove 'nir_edges' (the edges then keep the order of 'edges') or correct it"
                )
        return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)

    def node(self, impl: _Impl, label: str) -> nir.NIRNode:
        given = self.parameters.get(impl.name, {})
        parameters = _Parameters({k: _array(f"{impl.name}.{k}", v) for k, v in given.items()})
        attributes = _Attributes({k: v for k, v in impl.attributes.items() if k not in _SIDE_CHANNEL})
        where = f"implementation {impl.name!r} ({impl.type}, node {label!r})"
        convert = self.type_map.get(impl.type)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if convert is not None:
                    node = convert(attributes, parameters)
                else:
                    node = _generic_to_nir(_nir_class(impl.type), attributes, parameters)
            except _MissingParameter as missing:
                raise ParameterError(
                    f"{where} needs {missing.args[0]!r}, but the state_dict has no key "
                    f"'{impl.name}.{missing.args[0]}'; pass the model's state_dict(): "
                    "to_nir(ir, model.state_dict())"
                ) from None
            except NirBridgeError as error:
                raise _prefixed(error, where) from None
            except Exception as error:  # a converter from the user's type_map
                raise NodeConversionError(label, impl.type, error) from error
        for warning in caught:
            warnings.warn_explicit(
                f"{where}: {warning.message}", warning.category, warning.filename, warning.lineno
            )
        if not isinstance(node, nir.NIRNode):
            raise NodeConversionError(
                label, impl.type, TypeError(f"its converter returned {type(node).__name__}, not a NIR node")
            )
        weights = next((w for fn, w in _WEIGHTS.items() if fn is convert), None)  # converters may not hash
        if weights is not None:
            self.unread(impl, where, weights, parameters, attributes)
        used = self.used.setdefault(impl.name, set())
        used.update(parameters.read & set(given))
        return node

    def unread(
        self,
        impl: _Impl,
        where: str,
        weights: tuple[str, ...],
        parameters: _Parameters,
        attributes: _Attributes,
    ) -> None:
        """Name what a built-in converter did not read: state_dict entries are an error
        (their weights would be lost), attributes a warning (the NIR node ignores them;
        the IR read back keeps them)."""
        extra = [f"{impl.name}.{k}" for k in parameters if k not in parameters.read]
        if extra:
            raise ParameterError(
                f"{where}: the state_dict holds {_listed(extra)}, which {impl.type} has no field for (it "
                f"takes {', '.join(repr(w) for w in weights) or 'no weights'}); correct the key(s) or remove "
                "them. A type_map converter may take other fields"
            )
        ignored = [k for k in attributes if k not in attributes.read]
        if ignored:
            warnings.warn(
                f"{where}: attribute(s) {_listed(ignored)} mean nothing to {impl.type} (it reads "
                f"{', '.join(repr(k) for k in sorted(attributes.read)) or 'no attributes'}), so the NIR node "
                "ignores them; its metadata keeps them for the IR read back. Correct the name if one is "
                "misspelt",
                LossyConversionWarning,
                stacklevel=5,
            )

    def unused_parameters(self) -> list[str]:
        return [
            f"{owner}.{field}"
            for owner, fields in self.parameters.items()
            for field in fields
            if field not in self.used.get(owner, set())
        ]


def _listed(keys: list[str], most: int = 8) -> str:
    """Keys as a list for a message, at most ``most`` of them (and how many more)."""
    shown = ", ".join(_shown(k) for k in keys[:most])
    return f"[{shown}]" if len(keys) <= most else f"[{shown}, ... ({len(keys) - most} more)]"


def _nameless_keys(keys: list[str], impls: Mapping[str, _Impl]) -> str:
    """The message for state_dict keys that name no implementation of the IR."""
    names = sorted(impls)
    hints = []
    for key in keys[:8]:
        owner = key.rpartition(".")[0]
        cheap = len(owner) <= 200 and len(names) <= 2000  # difflib compares with every name
        close = difflib.get_close_matches(owner, names, n=1) if cheap else []
        if close:
            hints.append(f"{_shown(key)}: did you mean {_shown(close[0] + key[len(owner) :])}?")
    listed = ", ".join(_shown(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
    return (
        f"state_dict keys {_listed(keys)} name no implementation of the IR (keys are "
        f"'<implementation>.<field>'; its implementations: {listed})"
        + (f" ({'; '.join(hints)})" if hints else "")
        + ". Correct the keys or remove them: the IR would be converted without those weights"
    )


def _input_shapes(
    graph: nir.NIRGraph, the_plan: graph_utils.Plan, input_shape: Any, ir_nodes: Mapping[str, Any]
) -> dict[str, tuple[int, ...]]:
    from ..trace import _declared, _shape_from_consumers

    if input_shape is None:
        given: dict[str, Any] = {}
    elif isinstance(input_shape, Mapping):
        given = dict(input_shape)
        unknown = [k for k in given if k not in the_plan.inputs]
        if unknown:
            raise GraphStructureError(
                f"input_shape names {unknown}, but the IR's inputs are {the_plan.inputs}"
            )
    elif len(the_plan.inputs) == 1:
        given = {the_plan.inputs[0]: input_shape}
    else:
        raise GraphStructureError(
            f"the IR has inputs {the_plan.inputs}; give input_shape as a dict of shapes by input name"
        )
    shapes = {}
    for name in the_plan.inputs:
        declared = _declared(graph.nodes[name])
        shape = _shape_value(given[name], f"input_shape for {name!r}") if name in given else declared
        if declared is not None and shape != declared:
            raise ShapeMismatchError(
                f"input_shape gives input {name!r} the shape {shape}, but the IR node says {declared}"
            )
        if shape is None:
            shape = _shape_from_consumers(graph, name, the_plan)
        if shape is None:
            fed = [
                f"{t!r} ({ir_nodes[t].get('type')}, implementation {ir_nodes[t].get('implementation')!r})"
                for t, sources in the_plan.incoming.items()
                if any(s == name for s, _ in sources)
            ]
            raise MissingShapeError(
                f"the shape of input {name!r} cannot be found from what it feeds "
                f"({', '.join(fed) or 'nothing'}): the IR carries no shapes; pass input_shape=(...) "
                "without the batch axis (a dict by input name for several inputs)"
            )
        graph.nodes[name].input_type = {"input": np.array(shape, dtype=np.int64)}
        graph.nodes[name].output_type = {"output": np.array(shape, dtype=np.int64)}
        shapes[name] = shape
    return shapes


def _set_shapes(graph: nir.NIRGraph, shapes: graph_utils.Shapes, path: str) -> None:
    for name, node in graph.nodes.items():
        label = f"{path}.{name}" if path else name
        given, out = shapes.inputs.get(name), shapes.outputs.get(name)
        if isinstance(node, nir.Input):
            given = out
        if isinstance(node, nir.Output):
            out = given
        if given is None or out is None:
            raise MissingShapeError(
                f"node {label!r} ({type(node).__name__}): its shape cannot be inferred from the "
                "input shapes; pass input_shape=(...)"
            )
        if isinstance(node, nir.NIRGraph):
            _set_shapes(node, shapes.nested[name], label)
            node._update_input_output_types()
            continue
        if isinstance(node, nir.Conv1d):
            node.input_shape = int(given[1])
        elif isinstance(node, nir.Conv2d):
            node.input_shape = (int(given[1]), int(given[2]))
        elif isinstance(node, nir.Flatten):
            node.input_type = {"input": np.array(given, dtype=np.int64)}
            node.output_type = {"output": np.array(out, dtype=np.int64)}
            continue
        node.input_type = {"input": np.array(given, dtype=np.int64)}
        node.output_type = {"output": np.array(out, dtype=np.int64)}


def _ir_to_graph(
    impls: dict[str, _Impl],
    root: str,
    state_dict: Mapping[str, Any] | None,
    input_shape: Any,
    type_map: Mapping[str, ToNir],
) -> tuple[nir.NIRGraph, _IrToNir]:
    build = _IrToNir(impls, root, state_dict, type_map)
    build.check_types()
    root_impl = impls[root]
    graph = build.graph(root_impl, "")
    graph.metadata = _metadata_dict(root_impl.attributes.get("nir_metadata"), f"implementation {root!r}")
    the_plan = graph_utils.plan(graph)
    inputs = _input_shapes(graph, the_plan, input_shape, root_impl.nodes)
    # misfits with one reading (old spyx files) warn with RepairWarning and stay as stored,
    # as nirbridge.read keeps them; nir_to_torch repairs them
    shapes = graph_utils.infer_shapes(graph, the_plan, inputs)
    _set_shapes(graph, shapes, "")
    for label, output, shape in build.declared:
        inferred = np.asarray(output.output_type["output"])
        if int(np.prod(shape)) != int(np.prod(inferred)):
            raise ShapeMismatchError(
                f"IR output node {label!r} declares shape {tuple(int(s) for s in shape)}, but "
                f"{tuple(int(s) for s in inferred)} arrives; "
                "correct or remove its 'shape'"
            )
        output.input_type, output.output_type = {"input": shape}, {"output": shape}
    for node, fields, where in build.fields:  # NIR's spelling of what the IR holds, never other values
        for field, value in fields.items():
            built = getattr(node, field)
            problem = _field_disagreement(node, field, built, value)
            if problem is not None:
                raise ParameterError(
                    f"{where}: 'nir_fields' gives {type(node).__name__} field {field!r} {_shown(value)}, "
                    "but the implementation, its state_dict entries and the inferred shapes give "
                    f"{_shown(built)} ({problem}). 'nir_fields' only restores how NIR spelt a value, never "
                    "another value; correct or remove the entry"
                )
            setattr(node, field, value)
    if isinstance(graph, nir.NIRGraph):
        graph._update_input_output_types()
    return graph, build


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
    originals = {name: _as_dict(impl, name == root) for name, impl in impls.items()}
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


# ----------------------------------------------------------------------------- public API


def to_nir(
    ir: Any,
    state_dict: Mapping[str, Any] | None = None,
    *,
    input_shape: Any = None,
    type_map: Mapping[str, ToNir] | None = None,
) -> nir.NIRGraph:
    """Translate an elasticai.creator IR into a NIR graph.

    Args:
        ir: any spelling of the IR: the ``Implementation`` objects (or the generator)
            from elasticai.creator's ``Torch2Ir``; a dict of their ``as_dict()`` forms
            keyed by name (0.63-0.67: root ``""``, edges ``{src: {dst: {}}}``); the 0.62
            form (node lists, edges ``{"src", "sink"}``); the documentation's form (root
            ``"root"``, edges keyed ``(src, dst)`` carrying ``dst`` or ``sink``); the 0.68
            form (an ``attributes`` block; a ``(root, registry)`` pair or one dict).
        state_dict: the weights, keyed ``"<implementation>.<field>"`` as
            ``model.state_dict()`` gives them (tensors or arrays).
        input_shape: the input's shape without the batch axis (a dict by input node for
            several inputs); optional where the first layers' weights fix it or the IR's
            input nodes carry a ``shape``.
        type_map: ``{elasticai type: fn(attributes, parameters) -> nir.NIRNode}`` entries
            that win over :data:`TO_NIR`.

    Edges keep the IR's order; a node fed by several edges sums them, as NIR does.
    Raises :class:`~nirbridge.UnsupportedImplementationError` listing every node whose
    type NIR cannot express, :class:`~nirbridge.ParameterError` naming the implementation
    whose weight is missing or does not fit, the state_dict keys that name no
    implementation or no field of a built-in type, and the ``nir_fields`` entry that
    contradicts the weights or shapes, and :class:`~nirbridge.MissingShapeError` when no
    shape is known. A malformed IR (a field of the wrong type, a name that is not
    a string, an edge to a node that does not exist, graph implementations nested more
    than :data:`nirbridge.limits.MAX_NESTING` deep or holding themselves) is a
    :class:`~nirbridge.GraphStructureError` (:class:`~nirbridge.MissingNodeError` for
    the edge) or :class:`~nirbridge.ParameterError` naming the implementation, node,
    edge or field.
    """
    impls, root = _normalize(ir)
    the_map = {**TO_NIR, **_checked_map(type_map, str, "an elasticai type name such as 'linear'")}
    graph, build = _ir_to_graph(impls, root, state_dict, input_shape, the_map)
    unused = build.unused_parameters()
    if unused:
        warnings.warn(
            f"state_dict entries {_listed(unused)} belong to implementations of the IR but no NIR field "
            "holds them; they are left out",
            LossyConversionWarning,
            stacklevel=2,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossyConversionWarning)  # the reverse only serves comparison
        back, back_state = _NirToIr(FROM_NIR).run(graph)
    _record_ir_in_metadata(graph, impls, root, build.used, back, back_state)
    return graph


def from_nir(
    graph: nir.NIRGraph | str | os.PathLike[str],
    *,
    type_map: Mapping[type, FromNir] | None = None,
) -> tuple[IR, StateDict]:
    """Translate a NIR graph (or a ``.nir`` file) into an elasticai.creator IR.

    Returns ``(ir, state_dict)``: the IR as ``{name: Implementation.as_dict()}`` in the
    0.63-0.67 form (root ``""`` of type ``"module"``, edges ``{src: {dst: {}}}``), ready
    for ``Implementation.load_from_dict``, and the weights as tensors keyed
    ``"<implementation>.<field>"``, ready for elasticai's ``Ir2Torch``. ``type_map``:
    ``{nir type: fn(node) -> (type, attributes, parameters) | None}`` entries that win
    over :data:`FROM_NIR`. See the module docs for the table and what is stored where.
    What :func:`to_nir` stored in metadata is checked to have the type it is written
    with; anything else is a :class:`~nirbridge.ParameterError` naming the file, the
    node and the metadata key.
    """
    source = ""
    if not isinstance(graph, nir.NIRNode):
        source = str(os.fspath(graph)) if isinstance(graph, (str, os.PathLike)) else ""
        graph = io.read(graph)
    try:
        return _from_nir(graph, type_map)
    except NirBridgeError as error:
        raise (_prefixed(error, source) if source else error) from None


def _checked_map(type_map: Any, kind: type, what: str) -> dict[Any, Any]:
    """``type_map`` as a dict, once it is one whose keys are of ``kind`` and values callable."""
    if type_map is None:
        return {}
    if not isinstance(type_map, Mapping):
        raise ParameterError(f"type_map must be a dict {{key: fn}}, got a {type(type_map).__name__}")
    for key, fn in type_map.items():
        if not isinstance(key, kind) or (kind is type and not issubclass(key, nir.NIRNode)):
            hint = (
                f" (nir.{key})" if isinstance(key, str) and isinstance(getattr(nir, key, None), type) else ""
            )
            raise ParameterError(f"type_map: key {key!r} is not {what}{hint}; use that as the key")
        if not callable(fn):
            raise ParameterError(f"type_map: the entry for {key!r} is a {type(fn).__name__}, not a function")
    return dict(type_map)


def _from_nir(graph: nir.NIRNode, type_map: Mapping[type, FromNir] | None) -> tuple[IR, StateDict]:
    if isinstance(graph, nir.NIRGraph):
        graph_utils.check_edges(graph)  # and how deep graphs nest
    else:
        types = (getattr(graph, "input_type", None), getattr(graph, "output_type", None))
        if not (isinstance(types[0], Mapping) and "input" in types[0]) or not (
            isinstance(types[1], Mapping) and "output" in types[1]
        ):
            raise ParameterError(
                f"the {type(graph).__name__} node given has no input_type {{'input': shape}} and "
                "output_type {'output': shape}; give a nir.NIRGraph with Input and Output nodes"
            )
        graph = nir.NIRGraph(
            nodes={
                "input": nir.Input(types[0]["input"]),
                "node": graph,
                "output": nir.Output(types[1]["output"]),
            },
            edges=[("input", "node"), ("node", "output")],
            type_check=False,
        )
    the_map = {**FROM_NIR, **_checked_map(type_map, type, "a NIR node class such as nir.LIF")}
    ir, state = _NirToIr(the_map).run(graph)
    impls, root = _normalize(ir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossyConversionWarning)
        warnings.simplefilter("ignore", RepairWarning)  # the graph's own, already reported
        inputs = {
            name: node.input_type["input"]
            for name, node in graph.nodes.items()
            if isinstance(node, nir.Input)
            and isinstance(node.input_type, Mapping)
            and node.input_type.get("input") is not None
        }
        try:
            rebuilt, _ = _ir_to_graph(impls, root, state, inputs or None, TO_NIR)
        except (UnsupportedImplementationError, MissingShapeError):
            return ir, state  # types from the user's map, or inputs of unknown shape: nothing to compare
    _record_nir_in_ir(graph, ir, rebuilt)
    return ir, state


def write(
    path: str | os.PathLike[str],
    ir: Any,
    state_dict: Mapping[str, Any] | None = None,
    *,
    input_shape: Any = None,
    type_map: Mapping[str, ToNir] | None = None,
) -> None:
    """Write an elasticai.creator IR and its weights as a ``.nir`` file (see :func:`to_nir`).

    The file is an ordinary NIR graph (``nir.read`` opens it); :func:`read` gives back
    the same IR and state_dict. Written to a temporary file and renamed, as
    :func:`nirbridge.write` does.
    """
    io.write(path, to_nir(ir, state_dict, input_shape=input_shape, type_map=type_map))


def read(
    path: str | os.PathLike[str], *, type_map: Mapping[type, FromNir] | None = None
) -> tuple[IR, StateDict]:
    """Read a ``.nir`` file as ``(ir, state_dict)`` (see :func:`from_nir`).

    An IR written without shapes (``input_shape=`` given to :func:`write`) comes back
    without them, as it was; give ``input_shape`` again to convert it.
    """
    return from_nir(path, type_map=type_map)

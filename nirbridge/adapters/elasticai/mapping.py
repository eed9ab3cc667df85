"""How each elasticai.creator type becomes a NIR node, and back: the converters of
:data:`TO_NIR` and :data:`FROM_NIR`, and the generic mapping of NIR type names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import nir
import numpy as np
import torch

from ... import graph as graph_utils
from ...errors import (
    ParameterError,
)
from ...layers import _nir_dim, conv_node
from .checks import _int_attribute, _ints, _shown

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

INSTEAD: dict[str, str] = {
    "add": "NIR sums every edge into a node: leave the add out and connect its inputs to the layer after it",
    "batchnorm1d": "NIR has no batch normalization: fold it into the layer before it "
    "(weight * gamma / sqrt(var + eps), (bias - mean) * gamma / sqrt(var + eps) + beta) before converting",
    "batchnorm2d": "NIR has no batch normalization: fold it into the convolution before it "
    "(weight * gamma / sqrt(var + eps), (bias - mean) * gamma / sqrt(var + eps) + beta) before converting",
    "maxpool1d": "NIR has no max pooling: use an average or sum pooling (nir.AvgPool2d, nir.SumPool2d)",
    "maxpool2d": "NIR has no max pooling: use nn.AvgPool2d (nir.AvgPool2d) or a sum pooling",
    "adaptiveavgpool2d": "NIR has no adaptive pooling: use nn.AvgPool2d with kernel_size = stride = "
    "input size / output size",
    "relu": "NIR has no stateless activation: a spiking network puts neuron nodes (IF, LIF, ...) there",
    "sigmoid": "NIR has no stateless activation: a spiking network puts neuron nodes (IF, LIF, ...) there",
}
"""What to use instead of the elasticai types that no NIR node expresses (0.68's default
handlers give all of these), said when an IR holds one."""

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

"""Module maps: what a map's values can be, how a module or function finds its entry,
and how a key is named to users.

A module map (:data:`nirbridge.trace.DEFAULT_MAP` merged with the user's) takes module
types and functions to converters, or to :data:`FAN_IN` or :data:`BRIDGE`. The tracer
(:mod:`nirbridge.trace`) looks modules and functions up here, and its error messages
(:mod:`nirbridge.diagnose`) name them the way it does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx
from torch import nn

__all__ = ["BRIDGE", "FAN_IN", "ModuleMap"]


class _Marker:
    def __init__(self, name: str, doc: str) -> None:
        self.name, self.__doc__ = name, doc

    def __repr__(self) -> str:
        return f"nirbridge.trace.{self.name}"


FAN_IN = _Marker(
    "FAN_IN",
    "Map value for addition: ``a + b`` becomes edges from both operands' sources into "
    "every consumer of the sum, since NIR sums a node's incoming edges.",
)
BRIDGE = _Marker(
    "BRIDGE",
    "Map value for modules that pass their input through: the module is left out and its "
    "input is connected to its consumers (``nn.Identity``, and every type in ``skip=``).",
)

ModuleMap = Mapping[Any, Any]


# ----------------------------------------------------------------------------- lookups


def _nir_meta(module: Any) -> dict[str, Any] | None:
    meta = getattr(module, "meta", None) if isinstance(module, fx.GraphModule) else None
    found = meta.get("nirbridge") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) and "order" in found else None


def _lookup_module(the_map: ModuleMap, module: nn.Module) -> Any:
    """The map's entry for a module: its type's, else its nearest base class's, as long
    as the subclass computes what the base computes (does not override ``forward``)."""
    kind = type(module)
    for cls in kind.__mro__:
        if cls in the_map:
            if cls is fx.GraphModule:
                if _nir_meta(module) is None:
                    return None  # an ordinary GraphModule is traced like any other module
            elif cls is not kind and getattr(kind, "forward", None) is not getattr(cls, "forward", None):
                return None  # a subclass with its own forward: traced into, or reported
            return the_map[cls]
    return None


def _lookup_callable(the_map: ModuleMap, target: Any) -> Any:
    try:
        return the_map.get(target)
    except TypeError:  # unhashable target
        return None


def _lookup_type(the_map: ModuleMap, kind: type) -> Any:
    """:func:`_lookup_module` for a type."""
    for cls in kind.__mro__:
        if cls in the_map:
            same = cls is kind or getattr(kind, "forward", None) is getattr(cls, "forward", None)
            return the_map[cls] if same else None
    return None


# ----------------------------------------------------------------------------- names

_OPERATORS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "matmul": "@",
    "getitem": "[]",
    "neg": "unary -",
}


def _callable_name(target: Any) -> str:
    """How a function or tensor method is written in Python: ``torch.flatten``,
    ``torch.Tensor.view``, ``operator.add (+)``."""
    if isinstance(target, str):
        return f"torch.Tensor.{target}"
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", None) or ""
    name = getattr(target, "__name__", None) or repr(target)
    if qualname.startswith("TensorBase.") or qualname.startswith("Tensor."):
        return f"torch.Tensor.{name}"
    if module == "_operator":
        symbol = _OPERATORS.get(name)
        return f"operator.{name} ({symbol})" if symbol else f"operator.{name}"
    if qualname.startswith("_VariableFunctionsClass."):
        return f"torch.{name}"
    if module.startswith("torch._C"):  # builtins re-exported under public names
        for public, namespace in (("torch.nn.functional", torch.nn.functional), ("torch", torch)):
            if getattr(namespace, name, None) is target:
                return f"{public}.{name}"
    return f"{module}.{qualname or name}" if module else name


def _key_name(key: Any) -> str:
    if key is fx.GraphModule:
        return "GraphModule (from nir_to_torch)"
    if isinstance(key, type):
        module = key.__module__
        if module.startswith("torch"):
            return key.__name__
        if module.startswith("nirbridge.neurons"):
            module = "nirbridge.neurons"
        return f"{module}.{key.__qualname__}"
    return _callable_name(key)

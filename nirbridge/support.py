"""What converts to what: the default maps of :func:`nirbridge.nir_to_torch`,
:func:`nirbridge.torch_to_nir` and the norse, snntorch and spikingjelly adapters, read from the maps
themselves, one row per NIR type (``nirbridge support`` prints it).

A cell names the module and the direction: ``⇄`` both ways, ``→ NIR`` export only,
``← NIR`` import only.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

import nir
from torch import fx

from . import interpret, trace
from .errors import NirBridgeError
from .maps import _callable_name

__all__ = ["COLUMNS", "support_table"]

COLUMNS = ("NIR type", "nirbridge", "torch (export)", "norse", "snntorch", "spikingjelly")

_NIR_NAME = re.compile(r"\bnir\.(\w+)")


def _nir_types(fn: Callable[..., Any], module_type: type | None = None) -> list[str]:
    """The NIR types a converter returns, from its return annotation (or, for
    :func:`nirbridge.trace.neuron_to_nir`, the module type's ``nir_type``)."""
    nir_type = getattr(module_type, "nir_type", None)
    if isinstance(nir_type, type):
        return [nir_type.__name__]
    if fn is trace.neuron_to_nir and callable(getattr(module_type, "to_nir", None)):
        fn = module_type.to_nir
    try:
        annotation = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return []
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return [name for name in _NIR_NAME.findall(text) if name != "NIRNode"]


def _display(module: str, name: str) -> str:
    """How a module type is written in user code: ``nn.Linear``, ``neurons.LIF``."""
    if module.startswith("torch.nn") or module == "torch":
        return f"nn.{name}" if module.startswith("torch.nn") else f"torch.{name}"
    if module.startswith("nirbridge."):
        return f"{module.split('.')[1]}.{name}"
    if module.startswith("spikingjelly.activation_based.layer"):
        return f"layer.{name}"  # spikingjelly's wrappers of torch's layers
    return name


def _module_name(fn: Callable[..., Any]) -> str:
    """The module type an import converter builds: a ``Class.from_nir`` classmethod's
    class, else the class in its return annotation."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type):
        return _display(owner.__module__, owner.__name__)
    try:
        annotation = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return "?"
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__qualname__", "?")
    if "." not in text:  # a class of the converter's own module
        return _display(fn.__module__, text)
    module, _, name = text.rpartition(".")
    return _display("torch.nn" if module in ("torch.nn", "nn") else module, name)


def _exports(the_map: Mapping[Any, Any]) -> dict[str, list[str]]:
    """NIR type -> module types (and functions) a torch → NIR map exports as it."""
    found: dict[str, list[str]] = {}
    for key, fn in the_map.items():
        if fn is trace.FAN_IN or fn is trace.BRIDGE or not isinstance(key, type):
            continue
        if key is fx.GraphModule:
            found.setdefault("NIRGraph", []).append("GraphModule (from nir_to_torch)")
            continue
        names = _nir_types(fn, key)
        if len(names) > 1 and key.__name__ in names and re.search(r"\dd$", key.__name__):
            names = [key.__name__]  # one converter for Conv1d and Conv2d
        for name in names:
            found.setdefault(name, []).append(_display(key.__module__, key.__name__))
    return found


def _simulator(to_nir: Mapping[Any, Any], from_nir: Mapping[type, Any], imported: str) -> dict[str, str]:
    cells: dict[str, str] = {}
    exported = _exports(to_nir)
    for name in sorted(set(exported) | {t.__name__ for t in from_nir}):
        both = name in exported and any(t.__name__ == name for t in from_nir)
        if name in exported:
            cells[name] = f"{', '.join(exported[name])} {'⇄' if both else '→ NIR'}"
        else:
            cells[name] = f"{imported} ← NIR"
    return cells


def support_table() -> list[dict[str, str]]:
    """One row per NIR type, keyed by :data:`COLUMNS`: the module nirbridge imports it
    as, the torch modules exported as it, and the norse, snntorch and spikingjelly
    modules both ways."""
    from .adapters import norse as norse_adapter
    from .adapters import snntorch as snntorch_adapter

    exports = _exports(trace.DEFAULT_MAP)
    norse = _simulator(norse_adapter.TO_NIR, norse_adapter.FROM_NIR, "NorseNeuron (norse cell)")
    snn = _simulator(snntorch_adapter.TO_NIR, snntorch_adapter.FROM_NIR, "SnntorchNeuron")
    try:
        from .adapters import spikingjelly as sj_adapter
    except NirBridgeError:  # installed apart (--no-deps), so it may be missing
        jelly: dict[str, str] = {}
        missing = "(spikingjelly not installed)"
    else:
        jelly = _simulator(sj_adapter.TO_NIR, sj_adapter.FROM_NIR, "SpikingjellyNeuron")
        missing = "-"
    for key, fn in trace.DEFAULT_MAP.items():
        if not isinstance(key, type) and fn is not trace.FAN_IN:
            for name in _nir_types(fn):
                exports.setdefault(name, []).append(_callable_name(key))
    types: list[type] = [nir.Input, nir.Output, *interpret.DEFAULT_MAP, nir.NIRGraph]
    exports["Input"] = ["forward's arguments"]
    exports["Output"] = ["forward's return value"]
    rows = []
    for nir_type in types:
        name = nir_type.__name__
        fn = interpret.DEFAULT_MAP.get(nir_type)
        if fn is not None:
            imported = _module_name(fn)
        else:
            imported = {nir.NIRGraph: "nested GraphModule", nir.Input: "forward's arguments"}.get(
                nir_type, "forward's return value"
            )
        rows.append(
            {
                "NIR type": name,
                "nirbridge": f"{imported} {'⇄' if name in exports else '← NIR'}",
                "torch (export)": ", ".join(exports.get(name, [])) or "-",
                "norse": norse.get(name, "-"),
                "snntorch": snn.get(name, "-"),
                "spikingjelly": jelly.get(name, missing),
            }
        )
    return rows

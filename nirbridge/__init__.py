"""nirbridge: move spiking neural networks between PyTorch and NIR.

``nir_to_torch`` turns a ``nir.NIRGraph`` (or a ``.nir`` file) into a stateful
``torch.fx.GraphModule``; ``torch_to_nir`` traces a torch model into a ``nir.NIRGraph``;
``read`` and ``write`` handle ``.nir`` files, and the
``nirbridge info FILE`` command summarises one. The time-step
semantics are documented in :mod:`nirbridge.neurons.functional` and
:mod:`nirbridge.graph`; the state layout in :mod:`nirbridge.state`.

Names here are imported when first used (PEP 562), so that importing the package, and
``nirbridge --help``, cost no torch import; ``from nirbridge import run`` works as ever.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import native as native
    from . import neurons as neurons
    from . import testing as testing
    from .conformance import conformance as conformance
    from .data import read_data as read_data
    from .data import write_data as write_data
    from .engine.precision import precision as precision
    from .engine.schedule import RecordError as RecordError
    from .errors import AssumedDtWarning as AssumedDtWarning
    from .errors import BackendUnavailableError as BackendUnavailableError
    from .errors import CompileWarning as CompileWarning
    from .errors import DtWarning as DtWarning
    from .errors import GraphStructureError as GraphStructureError
    from .errors import InputError as InputError
    from .errors import LossyConversionWarning as LossyConversionWarning
    from .errors import MemoryLimitError as MemoryLimitError
    from .errors import MetricsError as MetricsError
    from .errors import MissingNodeError as MissingNodeError
    from .errors import MissingShapeError as MissingShapeError
    from .errors import NirBridgeError as NirBridgeError
    from .errors import NirBridgeWarning as NirBridgeWarning
    from .errors import NirFileError as NirFileError
    from .errors import NirFileWarning as NirFileWarning
    from .errors import NodeConversionError as NodeConversionError
    from .errors import NonFiniteWarning as NonFiniteWarning
    from .errors import ParameterError as ParameterError
    from .errors import ParameterWarning as ParameterWarning
    from .errors import RepairWarning as RepairWarning
    from .errors import ShapeMismatchError as ShapeMismatchError
    from .errors import SilentNetworkWarning as SilentNetworkWarning
    from .errors import TraceError as TraceError
    from .errors import UnknownNodeTypeError as UnknownNodeTypeError
    from .errors import UnsupportedImplementationError as UnsupportedImplementationError
    from .errors import UnsupportedModuleError as UnsupportedModuleError
    from .errors import UnsupportedNodeError as UnsupportedNodeError
    from .interpret import DEFAULT_MAP as DEFAULT_MAP
    from .interpret import nir_to_torch as nir_to_torch
    from .io import read as read
    from .io import write as write
    from .run import Run as Run
    from .run import SequenceModule as SequenceModule
    from .run import run as run
    from .state import StateError as StateError
    from .trace import torch_to_nir as torch_to_nir
    from .verify import Report as Report
    from .verify import VerifyError as VerifyError
    from .verify import verify as verify

#: public name -> (module relative to this package, attribute; None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "native": (".native", None),
    "neurons": (".neurons", None),
    "testing": (".testing", None),
    "conformance": (".conformance", "conformance"),
    "read_data": (".data", "read_data"),
    "write_data": (".data", "write_data"),
    "precision": (".engine.precision", "precision"),
    "RecordError": (".engine.schedule", "RecordError"),
    "AssumedDtWarning": (".errors", "AssumedDtWarning"),
    "BackendUnavailableError": (".errors", "BackendUnavailableError"),
    "CompileWarning": (".errors", "CompileWarning"),
    "DtWarning": (".errors", "DtWarning"),
    "GraphStructureError": (".errors", "GraphStructureError"),
    "InputError": (".errors", "InputError"),
    "LossyConversionWarning": (".errors", "LossyConversionWarning"),
    "MemoryLimitError": (".errors", "MemoryLimitError"),
    "MetricsError": (".errors", "MetricsError"),
    "MissingNodeError": (".errors", "MissingNodeError"),
    "MissingShapeError": (".errors", "MissingShapeError"),
    "NirBridgeError": (".errors", "NirBridgeError"),
    "NirBridgeWarning": (".errors", "NirBridgeWarning"),
    "NirFileError": (".errors", "NirFileError"),
    "NirFileWarning": (".errors", "NirFileWarning"),
    "NodeConversionError": (".errors", "NodeConversionError"),
    "NonFiniteWarning": (".errors", "NonFiniteWarning"),
    "ParameterError": (".errors", "ParameterError"),
    "ParameterWarning": (".errors", "ParameterWarning"),
    "RepairWarning": (".errors", "RepairWarning"),
    "ShapeMismatchError": (".errors", "ShapeMismatchError"),
    "SilentNetworkWarning": (".errors", "SilentNetworkWarning"),
    "TraceError": (".errors", "TraceError"),
    "UnknownNodeTypeError": (".errors", "UnknownNodeTypeError"),
    "UnsupportedImplementationError": (".errors", "UnsupportedImplementationError"),
    "UnsupportedModuleError": (".errors", "UnsupportedModuleError"),
    "UnsupportedNodeError": (".errors", "UnsupportedNodeError"),
    "DEFAULT_MAP": (".interpret", "DEFAULT_MAP"),
    "nir_to_torch": (".interpret", "nir_to_torch"),
    "read": (".io", "read"),
    "write": (".io", "write"),
    "Run": (".run", "Run"),
    "SequenceModule": (".run", "SequenceModule"),
    "run": (".run", "run"),
    "StateError": (".state", "StateError"),
    "torch_to_nir": (".trace", "torch_to_nir"),
    "Report": (".verify", "Report"),
    "VerifyError": (".verify", "VerifyError"),
    "verify": (".verify", "verify"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        module, attribute = f".{name}", None  # a submodule: nirbridge.io, nirbridge.errors, ...
    else:
        raise AttributeError(f"module 'nirbridge' has no attribute {name!r}")
    value = importlib.import_module(module, __name__)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


#: functions named as the module that holds them (``nirbridge.run`` is run.py's ``run``)
_SHADOWED = frozenset(name for name, (module, attribute) in _LAZY.items() if module == f".{attribute}")


class _Package(types.ModuleType):
    """Keeps ``nirbridge.run``, ``.verify`` and ``.conformance`` the functions: importing the
    module of that name (``from nirbridge.run import Run``) would otherwise set the package's
    attribute to the module, as Python's import system does for every submodule."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAP",
    "AssumedDtWarning",
    "BackendUnavailableError",
    "CompileWarning",
    "DtWarning",
    "GraphStructureError",
    "InputError",
    "LossyConversionWarning",
    "MemoryLimitError",
    "MetricsError",
    "MissingNodeError",
    "MissingShapeError",
    "NirBridgeError",
    "NirBridgeWarning",
    "NirFileError",
    "NirFileWarning",
    "NodeConversionError",
    "ParameterError",
    "ParameterWarning",
    "RecordError",
    "RepairWarning",
    "Report",
    "SequenceModule",
    "Run",
    "ShapeMismatchError",
    "NonFiniteWarning",
    "SilentNetworkWarning",
    "StateError",
    "TraceError",
    "UnknownNodeTypeError",
    "UnsupportedImplementationError",
    "UnsupportedModuleError",
    "UnsupportedNodeError",
    "VerifyError",
    "__version__",
    "conformance",
    "native",
    "neurons",
    "nir_to_torch",
    "precision",
    "read",
    "read_data",
    "run",
    "testing",
    "torch_to_nir",
    "verify",
    "write",
    "write_data",
]

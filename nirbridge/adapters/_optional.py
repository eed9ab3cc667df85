"""Import a simulator package for an adapter, or say how to install it."""

from __future__ import annotations

import importlib
import logging
import warnings
from types import ModuleType

from ..errors import NirBridgeError

_INSTALL = {
    "norse": "pip install nirtorch && pip install norse==1.1.0 --no-deps (norse imports nirtorch, and "
    "declares torchvision, which would pull a second torch)",
    "snntorch": "pip install snntorch",
    "spikingjelly": "pip install spikingjelly==2.0.0 loguru --no-deps (spikingjelly declares torchvision "
    "and torchaudio, which would pull a second torch)",
}


def require(module: str, package: str) -> ModuleType:
    """``importlib.import_module(module)``, or a :class:`NirBridgeError` with the install line."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        with warnings.catch_warnings():
            # norse 1.1 uses torch.jit.script at import time, which torch 2.13 deprecates (a
            # DeprecationWarning) and torch 2.14 too (a FutureWarning): not nirbridge's code
            warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated")
            return importlib.import_module(module)
    except ImportError as error:
        raise NirBridgeError(
            f"nirbridge.adapters.{package} needs the {package} package, which cannot be imported "
            f"({error}). Install it: {_INSTALL.get(package, f'pip install {package}')}"
        ) from error
    finally:
        # norse 1.1 calls logging.debug at import, which gives the root logger a stderr
        # handler (logging.basicConfig) when it has none: every library's warnings would
        # then print in the user's program. The handlers the import added go again.
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)

"""A model named as ``FILE.py:NAME`` (``nirbridge verify --against``), loaded as
``python FILE.py`` would see the file: its folder first on ``sys.path`` (so ``from model
import Net`` beside it works), its own ``sys.argv`` (so an argparse script reads none of
nirbridge's options), what it prints on stderr (so it cannot mix with the command's
output). A file that exits instead of giving a model (``sys.exit``, argparse, an exit in
the model's own methods) is a :class:`~nirbridge.errors.ParameterError` naming the file
and the ``if __name__ == "__main__":`` guard to add; status 0 only ever means verified.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from .errors import ParameterError

__all__ = ["as_script", "is_model_file", "model_from_file"]


def is_model_file(candidate: str) -> bool:
    path, _, name = candidate.rpartition(":")
    return path.endswith(".py") and name.isidentifier()


@contextlib.contextmanager
def as_script(path: str) -> Iterator[None]:
    """Run code of ``path`` as ``python path`` would see it: its folder first on
    ``sys.path`` (so ``from model import Net`` beside it imports) and ``sys.argv`` =
    ``[path]`` (so an argparse script reads no nirbridge options); both restored after.
    What it prints goes to stderr, so that it cannot mix with the command's own output."""
    folder = os.path.dirname(os.path.abspath(path))
    saved_path, saved_argv = list(sys.path), list(sys.argv)
    sys.path.insert(0, folder)
    sys.argv = [path]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.path[:], sys.argv[:] = saved_path, saved_argv


def _script_failed(spec: str, path: str, doing: str, error: BaseException) -> str:
    """What to say when ``path`` raised ``error`` (SystemExit included) while loaded."""
    if isinstance(error, GeneratorExit):
        return (
            f"--against {spec}: {doing} raised GeneratorExit, which ends a generator, not a script; "
            "it gave no model"
        )
    if isinstance(error, SystemExit):
        code = error.code
        status = (
            "" if code in (None, 0) else f" with status {code}" if isinstance(code, int) else f" ({code})"
        )
        return (
            f"--against {spec}: {doing} exited{status} (sys.exit or argparse) before giving a model; "
            f'nirbridge imports {path} as a module, so add an `if __name__ == "__main__":` guard '
            "around its script part (argument parsing, training, sys.exit)"
        )
    return f"--against {spec}: {doing} failed: {type(error).__name__}: {error}"


def model_from_file(spec: str, weights: str | None) -> Any:
    """The model FILE.py:NAME names (a class built without arguments, a function that
    returns a model, or a model), with ``weights`` (a state dict) loaded."""
    import importlib.util

    import torch

    path, _, name = spec.rpartition(":")
    if not os.path.isfile(path):
        raise ParameterError(f"--against {spec}: {path} is not a file")
    module_name = f"nirbridge_native_{abs(hash(os.path.abspath(path)))}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    if loader is None or loader.loader is None:
        raise ParameterError(f"--against {spec}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module  # dataclasses and pickling look classes up here
    with as_script(path):
        try:
            loader.loader.exec_module(module)
        except (Exception, SystemExit, GeneratorExit) as error:
            sys.modules.pop(module_name, None)
            raise ParameterError(_script_failed(spec, path, f"running {path}", error)) from error
    if not hasattr(module, name):
        found = sorted(
            k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, torch.nn.Module)
        )
        raise ParameterError(
            f"--against {spec}: {path} has no {name!r}; its modules: {', '.join(found) or 'none'}"
        )
    value = getattr(module, name)
    if not isinstance(value, torch.nn.Module):
        with as_script(path):
            try:
                value = value()
            except (SystemExit, GeneratorExit) as error:
                raise ParameterError(_script_failed(spec, path, f"calling {name}()", error)) from error
            except Exception as error:
                raise ParameterError(
                    f"--against {spec}: {name}() failed ({type(error).__name__}: {error}); NAME must be a "
                    "model, a class built without arguments, or a function returning a model"
                ) from error
    if not isinstance(value, torch.nn.Module):
        raise ParameterError(f"--against {spec}: {name} gave a {type(value).__name__}, not a torch.nn.Module")
    with as_script(path):  # the model's own methods run here too: an exit in them is the file's
        if weights is not None:
            try:
                state = torch.load(weights, map_location="cpu", weights_only=True)
                value.load_state_dict(state)
            except (SystemExit, GeneratorExit) as error:
                raise ParameterError(_script_failed(spec, path, f"{name}.load_state_dict", error)) from error
            except Exception as error:
                raise ParameterError(
                    f"--weights {weights}: cannot load it into {name} ({type(error).__name__}: {error}); "
                    "give the state dict torch.save(model.state_dict(), path) wrote"
                ) from error
        try:
            return value.eval()
        except (SystemExit, GeneratorExit) as error:
            raise ParameterError(_script_failed(spec, path, f"{name}.eval()", error)) from error
        except Exception as error:
            raise ParameterError(
                f"--against {spec}: {name}.eval() failed ({type(error).__name__}: {error})"
            ) from error

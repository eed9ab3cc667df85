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
from collections.abc import Callable, Iterator
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
        return f"{spec}: {doing} raised GeneratorExit, which ends a generator, not a script; it gave no model"
    if isinstance(error, SystemExit):
        code = error.code
        status = (
            "" if code in (None, 0) else f" with status {code}" if isinstance(code, int) else f" ({code})"
        )
        return (
            f"{spec}: {doing} exited{status} (sys.exit or argparse) before giving a model; "
            f'nirbridge imports {path} as a module, so add an `if __name__ == "__main__":` guard '
            "around its script part (argument parsing, training, sys.exit)"
        )
    return f"{spec}: {doing} failed: {type(error).__name__}: {error}"


def model_from_file(spec: str, weights: str | None, option: str = "--against") -> Any:
    """The model FILE.py:NAME names (a class built without arguments, a function that
    returns a model, or a model), with ``weights`` (a state dict) loaded; errors name
    ``option`` (the command line's option that gave ``spec``) before it."""
    import importlib.util

    import torch

    path, _, name = spec.rpartition(":")
    spec = f"{option} {spec}" if option else spec
    if not os.path.isfile(path):
        raise ParameterError(f"{spec}: {path} is not a file")
    module_name = f"nirbridge_native_{abs(hash(os.path.abspath(path)))}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    if loader is None or loader.loader is None:
        raise ParameterError(f"{spec}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module  # dataclasses and pickling look classes up here
    try:
        with _running(spec, path, f"running {path}"):
            loader.loader.exec_module(module)
    except ParameterError:
        sys.modules.pop(module_name, None)  # no half-run module left behind
        raise
    if not hasattr(module, name):
        found = sorted(
            k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, torch.nn.Module)
        )
        raise ParameterError(f"{spec}: {path} has no {name!r}; its modules: {', '.join(found) or 'none'}")
    value = getattr(module, name)
    if not isinstance(value, torch.nn.Module):
        with _running(spec, path, f"calling {name}()", lambda error: (
            f"{spec}: {name}() failed ({type(error).__name__}: {error}); NAME must be a "
            "model, a class built without arguments, or a function returning a model"
        )):  # fmt: skip
            value = value()
    if not isinstance(value, torch.nn.Module):
        raise ParameterError(f"{spec}: {name} gave a {type(value).__name__}, not a torch.nn.Module")
    if weights is not None:
        with _running(spec, path, f"{name}.load_state_dict", lambda error: (
            f"--weights {weights}: cannot load it into {name} ({type(error).__name__}: {error}); "
            "give the state dict torch.save(model.state_dict(), path) wrote"
        )):  # fmt: skip
            value.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    with _running(spec, path, f"{name}.eval()"):
        return value.eval()


@contextlib.contextmanager
def _running(
    spec: str, path: str, doing: str, failed: Callable[[Exception], str] | None = None
) -> Iterator[None]:
    """Run code of ``path`` (its import, or the model's own methods) as :func:`as_script`
    runs it: an exit is the file's, said with the guard to add; another error is said by
    ``failed`` (by default as the file's too)."""
    with as_script(path):
        try:
            yield
        except (SystemExit, GeneratorExit) as error:
            raise ParameterError(_script_failed(spec, path, doing, error)) from error
        except Exception as error:
            text = failed(error) if failed is not None else _script_failed(spec, path, doing, error)
            raise ParameterError(text) from error

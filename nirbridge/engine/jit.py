"""numba's ``njit`` with a disk cache that cannot break a run (the CPU back-end's kernels).

numba caches a compiled kernel in two files beside its source (``__pycache__``) or in a
user-wide folder: an index (``.nbi``) and one data file per signature (``.nbc``). Left to
itself, numba turns a damaged cache into an error on every call until someone deletes the
files, and a machine with no writable cache location into an error at import:

* a truncated, garbage or foreign file raises ``UnpicklingError``, ``EOFError`` or the
  like while loading, and again while saving the rebuilt kernel (numba re-reads the index);
* a data file of another kernel (swapped, or copied over) loads as that kernel, and its
  first call fails with ``TypeError: ... expected 31 arguments, got 21``;
* with no writable location (a read-only install, run as a user whose home is read-only,
  no ``NUMBA_CACHE_DIR``), ``njit(cache=True)`` raises ``RuntimeError: cannot cache
  function ...`` when the kernel is defined.

:func:`njit` keeps every run going instead: a file that cannot be read, or that holds
another kernel than the one asked for, is treated as a miss (the kernel is rebuilt, and the
index rewritten where it can be); where nothing can be written, or there is no location,
the kernel is compiled in memory for this process. Each such event is said once per
process and kernel as a :class:`~nirbridge.CompileWarning` naming the cache folder and
what to do.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import CompileWarning

__all__ = ["njit"]

_SAID: set[tuple[str, str]] = set()


def _say(name: str, what: str, text: str) -> None:
    """One :class:`~nirbridge.CompileWarning` per process, kernel and kind of event."""
    if (name, what) in _SAID:
        return
    _SAID.add((name, what))
    warnings.warn(text, CompileWarning, stacklevel=4)


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _same_kernel(result: Any, function: Callable[..., Any], signature: Any) -> bool:
    """Whether a compile result loaded from the cache is ``function``'s, for ``signature``
    (a data file of another kernel loads without complaint and fails at its first call)."""
    try:
        qualname = result.fndesc.qualname
        arguments = tuple(result.signature.args)
    except AttributeError:
        return False
    return qualname == function.__qualname__ and arguments == tuple(signature)


def _not_regular(cache: Any) -> str | None:
    """The first of the kernel's cache files (its index, its data files) that exists but
    is not a regular file or a folder: reading a named pipe blocks for ever."""
    try:
        folder = cache.cache_path
        base = cache._cache_file._index_name.removesuffix(".nbi")
        for entry in os.scandir(folder):
            if entry.name.startswith(base) and not (entry.is_file() or entry.is_dir()):
                return entry.name
    except (AttributeError, OSError):
        return None
    return None


def _guard(dispatcher: Any, function: Callable[..., Any]) -> None:
    """Wrap ``dispatcher``'s cache so that loading and saving can only miss, never raise."""
    cache = getattr(dispatcher, "_cache", None)
    if cache is None:  # not a caching dispatcher (NUMBA_DISABLE_JIT=1 gives the Python function)
        return
    load, save = cache.load_overload, cache.save_overload
    name = function.__name__.lstrip("_")
    folder = getattr(cache, "cache_path", None)

    def guarded_load(signature: Any, target_context: Any) -> Any:
        odd = _not_regular(cache)
        try:
            if odd:  # a pipe or a device would block numba's read for ever
                raise OSError(f"{odd} is not a regular file")
            result = load(signature, target_context)
        except Exception as error:  # noqa: BLE001 - a damaged file of any kind is a miss
            problem = f"could not be read ({_reason(error)})"
        else:
            if result is None or _same_kernel(result, function, signature):
                return result
            problem = "holds another kernel"
        try:
            cache.flush()  # an empty index: the rebuilt kernel replaces the damaged entry
            outcome = "it was rebuilt and the cache entry replaced"
        except Exception:  # noqa: BLE001 - read-only: rebuilt for this process only
            outcome = "it was rebuilt for this process (the cache could not be rewritten)"
        _say(
            name,
            "load",
            f"run(backend='cpu'): numba's cached kernel {name!r} in {folder} {problem}; {outcome}. "
            f"If this repeats, delete that folder's {function.__module__.rsplit('.', 1)[-1]}.* files "
            "or set NUMBA_CACHE_DIR to a writable folder.",
        )
        return None

    def guarded_save(signature: Any, result: Any) -> None:
        try:
            save(signature, result)
        except Exception as error:  # noqa: BLE001 - an unwritable or damaged cache: kept in memory
            if (name, "load") in _SAID:  # said already: rebuilt, and the cache not rewritten
                return
            _say(
                name,
                "save",
                f"run(backend='cpu'): numba could not cache kernel {name!r} in {folder} ({_reason(error)}); "
                "it is compiled anew in every process. Set NUMBA_CACHE_DIR to a writable folder "
                "to keep it.",
            )

    cache.load_overload = guarded_load
    cache.save_overload = guarded_save


def njit(function: Callable[..., Any], options: dict[str, Any]) -> Any:
    """``numba.njit(**options)(function)``, with ``options["cache"]`` kept only as far as the
    cache can be used (see the module's docstring)."""
    import numba

    from .announce import watch_numba

    watch_numba()  # a compile that takes longer than a second says so, once
    if not options.get("cache"):
        return numba.njit(**options)(function)
    try:
        dispatcher = numba.njit(**options)(function)
    except RuntimeError as error:  # numba found no writable cache location
        _say(
            "",
            "locate",
            f"run(backend='cpu'): numba has no writable cache location here ({_reason(error)}), so the "
            "CPU kernels are compiled anew in every process (about a second each). Set NUMBA_CACHE_DIR "
            "to a writable folder to keep them.",
        )
        return numba.njit(**{**options, "cache": False})(function)
    _guard(dispatcher, function)
    return dispatcher

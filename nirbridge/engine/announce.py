"""Saying that a compile is under way, once, when it takes longer than about a second.

The CPU back-end's numba kernels compile on their first call for a new signature (4-6 s
for a network's set on a laptop, then read from numba's cache in about 0.5 s), and
``backend="compile"`` runs ``torch.compile`` (10-30 s). A run that stops for that long
without a word looks hung, so each says, once per process, on stderr (flushed), what is
compiling and where it is cached, if it is still compiling a second after it began.
Quick compiles and cached loads say nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

AFTER = 1.0  # seconds a compile runs before it is announced
GAP = 0.25  # seconds between one kernel's compile and the next's that still count as compiling

_SAID: set[str] = set()
_LOCK = threading.Lock()


def say_once(key: str, text: str) -> None:
    """Print ``nirbridge: text`` on stderr, the first time ``key`` is said in this process."""
    with _LOCK:
        if key in _SAID:
            return
        _SAID.add(key)
    print(f"nirbridge: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def if_slow(key: str, text: str, after: float = AFTER) -> Iterator[None]:
    """Say ``text`` (once per process and ``key``) if the block is still running ``after``
    seconds after it began."""
    if key in _SAID:
        yield
        return
    timer = threading.Timer(after, say_once, (key, text))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class _NumbaCompiles:
    """numba's ``numba:compile`` events (real compiles only: a kernel read from numba's
    cache raises none), counted so that a compile still running a second after the first
    one began is announced."""

    def __init__(self) -> None:
        self.running = 0
        self.ended = 0.0  # time.monotonic() of the last compile's end
        self.timer: threading.Timer | None = None
        self.folder: str | None = None

    @staticmethod
    def ours(event: Any) -> bool:
        """An event of one of nirbridge's kernels (not of the user's own numba code)."""
        dispatcher = (getattr(event, "data", None) or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
        return module.split(".")[0] == "nirbridge"

    def on_start(self, event: Any) -> None:
        if not self.ours(event):
            return
        dispatcher = event.data["dispatcher"]
        cache = getattr(dispatcher, "_cache", None)
        self.folder = getattr(cache, "cache_path", None) or self.folder
        with _LOCK:
            self.running += 1
            if self.timer is None and "numba" not in _SAID:
                self.timer = threading.Timer(AFTER, self.fire)
                self.timer.daemon = True
                self.timer.start()

    def on_end(self, event: Any) -> None:
        if not self.ours(event):
            return
        with _LOCK:
            self.running -= 1
            self.ended = time.monotonic()

    def fire(self) -> None:
        with _LOCK:  # compiling, or between two kernels' compiles
            still = self.running > 0 or time.monotonic() - self.ended < GAP
            self.timer = None
        if not still:
            return  # it finished within the second: nothing to say
        where = (
            f"numba caches them in {self.folder} for later processes"
            if self.folder
            else "numba cannot cache them here, so each process compiles them again"
        )
        say_once(
            "numba",
            "compiling the CPU back-end's kernels for this network's shapes and dtypes (a few seconds, "
            f"once: {where})",
        )


_LISTENER: _NumbaCompiles | None = None


def watch_numba() -> None:
    """Install the listener of numba's compile events (once)."""
    global _LISTENER
    with _LOCK:
        if _LISTENER is not None:
            return
        _LISTENER = _NumbaCompiles()
    from numba.core import event

    class Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            _LISTENER.on_start(ev)  # type: ignore[union-attr]

        def on_end(self, ev: Any) -> None:
            _LISTENER.on_end(ev)  # type: ignore[union-attr]

    event.register("numba:compile", Listener())

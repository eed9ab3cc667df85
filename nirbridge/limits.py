"""The limits nirbridge keeps to: how deep graphs may nest, and how much memory a build
or a run may ask for.

**Nesting.** :data:`MAX_NESTING` graphs inside graphs, the same for
:func:`nirbridge.read`, :func:`nirbridge.write`, :func:`nirbridge.nir_to_torch` and
:func:`nirbridge.run`: what one accepts, the others accept. Real graphs nest one to
three levels (a recurrent block inside a network); the limit keeps a hostile file from
exhausting Python's stack. Metadata dicts nest up to :data:`MAX_METADATA_NESTING`.

**Memory.** Before allocating what grows with a graph's parameters or a run's length
(a delay line's history, a convolution's padded feature maps, a run's records and
outputs), nirbridge estimates the bytes and compares them with the memory the device
has free: :func:`available` (``MemAvailable``, the container's limit and what ``ulimit
-v`` leaves on Linux; free memory on CUDA). An estimate above it raises
:class:`MemoryLimitError`, saying how much was asked and what to change, instead of the
allocator failing (or the kernel killing the process) part way through. Where the free
memory cannot be found, nothing is refused.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .errors import MemoryLimitError

__all__ = ["MAX_METADATA_NESTING", "MAX_NESTING", "available", "check_memory", "human"]

MAX_NESTING = 32
"""Graphs nested inside graphs that nirbridge reads, writes, builds and runs (a graph
holding a subgraph is 1 deep)."""

MAX_METADATA_NESTING = 16
"""Dicts nested inside a node's metadata that nirbridge writes and reads."""


def human(count: float) -> str:
    """Bytes as text with a binary unit (``"1.5 GiB"``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(count) < 1024 or unit == "PiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} PiB"  # pragma: no cover - the loop returns


def _meminfo() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup() -> int | None:
    """What the container's memory limit leaves (cgroup v2, then v1)."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            with open(limit_file, encoding="ascii") as file:
                limit = file.read().strip()
            if limit == "max":
                return None
            with open(usage_file, encoding="ascii") as file:
                usage = int(file.read().strip())
            return max(0, int(limit) - usage)
        except (OSError, ValueError):
            continue
    return None


def _address_space() -> int | None:
    """What the process's address-space limit (``ulimit -v``) leaves, where one is set."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm", encoding="ascii") as file:
            used = int(file.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return max(0, soft - used)
    except (ImportError, OSError, ValueError, IndexError):
        return None


def _physical() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def available(device: Any = None) -> int | None:
    """Bytes free for new tensors on ``device`` (``None`` or CPU: main memory), or
    ``None`` where it cannot be found. On CUDA, torch's ``mem_get_info`` plus what
    torch's caching allocator holds unused."""
    kind = getattr(device, "type", None) or (str(device).split(":")[0] if device is not None else "cpu")
    if kind == "cuda":
        torch = sys.modules.get("torch")
        try:
            free, _ = torch.cuda.mem_get_info(device)
            return int(free) + int(torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
        except (RuntimeError, AssertionError, AttributeError, ValueError):  # no CUDA, no driver
            return None
    if kind != "cpu":
        return None
    found = [v for v in (_meminfo(), _cgroup(), _address_space()) if v is not None]
    if not found:
        physical = _physical()
        return physical
    return min(found)


def check_memory(nbytes: float, what: str, fix: str, device: Any = None) -> None:
    """Raise :class:`MemoryLimitError` if ``nbytes`` exceed what :func:`available` finds
    on ``device``; ``what`` says what asks for it, ``fix`` what to change."""
    free = available(device)
    if free is None or nbytes <= free:
        return
    where = "main memory" if getattr(device, "type", str(device or "cpu")).startswith("cpu") else str(device)
    raise MemoryLimitError(
        f"{what} needs {human(nbytes)}, but {where} has {human(free)} free; {fix}",
        requested=int(nbytes),
        free=free,
    )


def allocation_failure(error: BaseException, what: str, fix: str) -> MemoryLimitError | None:
    """The :class:`MemoryLimitError` that an allocation failing inside torch means (its
    ``OutOfMemoryError``, or a ``RuntimeError`` saying it could not allocate), naming
    ``what`` asked for it and ``fix``; ``None`` for any other error."""
    torch = sys.modules.get("torch")
    out_of_memory = getattr(torch, "OutOfMemoryError", None)
    text = str(error)
    if (out_of_memory is not None and isinstance(error, out_of_memory)) or (
        isinstance(error, RuntimeError)
        and ("can't allocate memory" in text or "out of memory" in text.lower())
    ):
        reason = text.strip().splitlines()[0] if text.strip() else type(error).__name__
        return MemoryLimitError(f"{what} ran out of memory ({reason[:200]}); {fix}")
    return None

"""Float32 precision inside nirbridge's calls: full IEEE float32 unless asked otherwise.

torch lets cuDNN compute float32 convolutions in TF32 by default, and a matrix product
may use TF32 (CUDA) or bfloat16 (oneDNN on the CPU) where the user's settings allow it;
Triton and a C++ compiler may contract ``a * b + c`` into one fused multiply-add. Each
changes float32 results with the batch size or the kernel, so a time-batched run would
no longer equal stepping (on an H100, TF32 made the N-MNIST CNN's run differ from
stepping in 1588 output values).

:func:`precision` is the policy, as a context manager:

* ``"exact"`` (the default of every nirbridge call): float32 convolutions and matrix
  products in full float32 on every device, and no contraction in any kernel nirbridge
  compiles or launches;
* ``"fast"``: TF32 for float32 convolutions and matrix products where the hardware has
  it (NVIDIA GPUs since Ampere; on the CPU, oneDNN uses it only on the few processors
  that have it), and contraction allowed. Results then differ from stepping in the last bits, and
  spikes can flip.

Modules built by :func:`nirbridge.nir_to_torch` and :func:`nirbridge.run` enter
``precision("exact")`` around each call unless a policy is already in force, so
``with nirbridge.precision("fast"): ...`` around calls opts in. The user's global
flags are as they were after the call, also when it raises.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch

from ..errors import ParameterError

__all__ = ["PRECISIONS", "Precision", "active", "check", "contract", "enter", "leave", "precision"]

Precision = Literal["exact", "fast"]
PRECISIONS: tuple[str, ...] = ("exact", "fast")

# torch >= 2.9 keeps float32 precision per back-end and operation ("ieee", "tf32",
# "bf16", or "none" to inherit from the back-end's "all", which inherits from
# "generic"); the legacy flags read and write the same settings
_NEW_API = hasattr(torch._C, "_get_fp32_precision_getter")
_OPS = {
    "cuda": (("cuda", "matmul"), ("cuda", "conv"), ("cuda", "rnn")),
    "cpu": (("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn")),
}
_PARENTS = {"cuda": (("cuda", "all"), ("generic", "all")), "cpu": (("mkldnn", "all"), ("generic", "all"))}
_FULL = frozenset({"ieee", "none"})
# per device kind: every setting that must read "ieee" or "none" for full float32
_CHECKED = {kind: (*_OPS[kind], *_PARENTS[kind]) for kind in _OPS}

# the policy in force in this thread (see active()); a context variable, which a thread
# starts without, and which per-step paths read in ~15 ns (a thread-local takes ~300)
MODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("nirbridge_precision", default=None)
_GET = getattr(torch._C, "_get_fp32_precision_getter", None)


def full(kind: str) -> bool:
    """Whether every float32 setting of device kind ``kind`` (``"cpu"`` or ``"cuda"``,
    :data:`_CHECKED`) already computes in full float32, so that ``"exact"`` has nothing
    to change (a module's call asks at every step)."""
    checked = _CHECKED.get(kind)
    if not _NEW_API or checked is None:
        return False  # the legacy flags, or another device kind: let enter() decide
    for op in checked:
        if _GET(*op) not in _FULL:
            return False
    return True


def active() -> str | None:
    """The policy in force in this thread (``"exact"`` or ``"fast"``), ``None`` outside one."""
    return MODE.get()


def contract() -> bool:
    """Whether kernels compiled now may contract multiply-adds (only under ``"fast"``)."""
    return active() == "fast"


def check(mode: str, where: str = "nirbridge.precision") -> str:
    """Validate a policy name; ``where`` names the call in the error."""
    if mode not in PRECISIONS:
        raise ParameterError(
            f"{where}(precision={mode!r}): use 'exact' (full float32, the default) or 'fast' (TF32)"
        )
    return mode


@contextmanager
def precision(mode: Precision = "exact", device: str | torch.device | None = None) -> Iterator[None]:
    """Compute float32 convolutions and matrix products as ``mode`` says, in this block.

    Args:
        mode: ``"exact"`` (full float32, no contraction) or ``"fast"`` (TF32 and
            contraction where the hardware has them).
        device: the device type the block computes on (``"cpu"``, ``"cuda"``), so that
            only its settings are touched; ``None``: both.

    Policies nest: inside a block, an inner ``precision(...)`` and nirbridge's own
    calls keep the outer policy. torch's settings are restored on exit, also when the
    block raises.
    """
    check(mode)
    token = enter(mode, device)
    try:
        yield
    finally:
        leave(token)


class _Entry:
    """One policy put in force: what restores torch's settings, and the context
    variable's token."""

    __slots__ = ("saved", "token")

    def __init__(self, saved: list[tuple[str, ...]], token: contextvars.Token[str | None]) -> None:
        self.saved = saved
        self.token = token


# torch's settings are the process's, while a policy is per thread (and asyncio task):
# the policies in force, oldest first, so that one left while a newer one is still in
# force hands what it saved to the newer one instead of restoring under it
_ENTERED: list[_Entry] = []
_LOCK = threading.Lock()


def enter(mode: str, device: str | torch.device | None = None) -> _Entry | None:
    """Put ``mode`` in force unless a policy already is (then ``None``); pass what it
    returns to :func:`leave`. The context manager :func:`precision` in two calls, for
    the modules' per-step path."""
    if MODE.get() is not None:
        return None
    if device is None:
        kinds: tuple[str, ...] = ("cpu", "cuda")
    elif device == "cpu" or device == "cuda":
        kinds = (device,)
    else:
        kinds = (_kind(device),)
    with _LOCK:
        entry = _Entry(_apply(mode, kinds), MODE.set(mode))
        _ENTERED.append(entry)
    return entry


def leave(entry: _Entry | None) -> None:
    """Undo :func:`enter`: torch's settings as they were before it, unless a policy
    entered after it (another thread's or task's) is still in force; that one then
    restores them when it leaves."""
    if entry is None:
        return
    try:
        MODE.reset(entry.token)
    except ValueError:  # left in another context than it was entered in
        MODE.set(None)
    with _LOCK:
        index = next((k for k, e in enumerate(_ENTERED) if e is entry), None)
        if index is None:
            return
        del _ENTERED[index]
        if index == len(_ENTERED):  # the newest: restore
            _restore(entry.saved)
            return
        newer = _ENTERED[index]  # what it saved is older than what the newer one saved
        merged = {_setting(item): item for item in newer.saved}
        merged.update({_setting(item): item for item in entry.saved})
        newer.saved = list(merged.values())


def _setting(item: tuple[str, ...]) -> tuple[str, ...]:
    """Which setting a saved item restores: ``("legacy",)``, ``("cudnn",)`` or
    ``("op", backend, op)``."""
    return item[:-1]


def _kind(device: str | torch.device) -> str:
    kind = torch.device(device).type
    return "cuda" if kind == "cuda" else "cpu"


def _apply(mode: str, kinds: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Put ``mode`` in force for the device kinds; returns what restores the settings."""
    if not _NEW_API:
        return _apply_legacy(mode, kinds)
    if mode == "exact" and len(kinds) == 1 and full(kinds[0]):
        return []  # already full float32: nothing to change, nothing to restore
    target = "ieee" if mode == "exact" else "tf32"
    ops = [op for kind in kinds for op in _OPS[kind]]
    current = {op: _GET(*op) for op in ops}
    # torch also keeps the legacy settings beside the new ones and refuses to read them
    # when the two disagree (inductor reads them): change them first, so that both
    # agree during the call; a user who mixed the two APIs keeps the legacy ones as set
    saved: list[tuple[str, ...]] = []
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:
        legacy = None
    if legacy is not None:
        torch.set_float32_matmul_precision("highest" if mode == "exact" else "high")
        saved.append(("legacy", legacy))
    if "cuda" in kinds:
        try:
            cudnn = torch.backends.cudnn.allow_tf32
        except RuntimeError:
            cudnn = None
        if cudnn is not None:
            torch.backends.cudnn.allow_tf32 = mode == "fast"
            saved.append(("cudnn", cudnn))
    setter = torch._C._set_fp32_precision_setter
    for op in ops:
        setter(*op, target)
    saved += [("op", *op, value) for op, value in current.items()]
    return saved


def _apply_legacy(mode: str, kinds: tuple[str, ...]) -> list[tuple[str, ...]]:
    """torch < 2.9: the TF32 flags and the matmul precision."""
    allow = mode == "fast"
    saved: list[tuple[str, ...]] = [("legacy", torch.get_float32_matmul_precision())]
    torch.set_float32_matmul_precision("high" if allow else "highest")
    if "cuda" in kinds:
        saved.append(("cudnn", torch.backends.cudnn.allow_tf32))
        torch.backends.cudnn.allow_tf32 = allow
    return saved


def _restore(saved: list[tuple[str, ...]]) -> None:
    for entry in saved:  # the legacy setting first: restoring it rewrites the matmul ops
        if entry[0] == "legacy":
            torch.set_float32_matmul_precision(entry[1])
        elif entry[0] == "cudnn":
            torch.backends.cudnn.allow_tf32 = entry[1]
    for entry in saved:
        if entry[0] == "op":
            torch._C._set_fp32_precision_setter(entry[1], entry[2], entry[3])

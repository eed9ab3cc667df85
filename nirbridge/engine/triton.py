r"""The Triton back-end (``run(backend="triton")``): neuron scans as GPU kernels.

The schedule is the eager back-end's (:mod:`.eager`): stateless nodes over all
``Tc·B`` rows of a chunk, recurrent loops stepped together. Each of nirbridge's neuron
populations outside every cycle (I, IF, LI, LIF, CubaLI, CubaLIF) runs as one Triton
kernel launch per chunk instead of several launches per step: a program holds a block
of neurons' state in registers and loops over the chunk's steps, reading the
precomputed input term and writing the outputs (and the state variables, where they
are recorded).

Exact: the state-independent terms (``dt/τ``, ``r·x``, ``w_in·x``, ``dt·r·x``) are
computed by torch as the eager kernels compute them (:mod:`.kernels`), and the kernel
does the float operations of :mod:`nirbridge.neurons.functional` in the same order,
the reset as :math:`(1 - z) v + z v_{reset}`, compiled with ``enable_fp_fusion=False``
(no fused multiply-adds) under the ``"exact"`` precision policy, so outputs and states
equal stepping's bit for bit, in float32 and float64.

A Delay outside every cycle is an index shift over the chunk (one gather, as in the
eager back-end).

Where it runs: CUDA tensors; CPU tensors only under Triton's interpreter
(``TRITON_INTERPRET=1`` set before this module is imported), which is how the tests
check the kernels without a GPU, slowly. Elsewhere :class:`~nirbridge.BackendUnavailableError`
says why.

BPTT: with gradients, the forward kernel also keeps each step's membrane before the
reset, and a reverse-time kernel gives the gradients eager autograd defines (the
surrogate of :func:`nirbridge.neurons.functional.spike`, the reset's path), to the
input, every neuron parameter (``trainable=``) and the initial state; equal to eager
autograd's within rounding (tested: 1e-5 relative in float32, 1e-9 in float64).

Recurrent loops: a small ``neuron ⇄ linear`` loop (the Braille SRNN's) runs as one
kernel per chunk (:mod:`.triton_loop`) where the device's matrix product sums as that
kernel does, and with gradients as that kernel and a reverse-time one
(:mod:`.triton_loop_grad`: BPTT to the input, the layer's weight and bias, the initial
state and the neuron parameters); other loops step as in the eager back-end.

``backend="auto"`` is this back-end on CUDA (:func:`nirbridge.engine.backend_for`).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from ..errors import BackendUnavailableError, CompileWarning
from ..neurons import functional as F
from ..neurons import modules as M
from . import precision as _precision
from . import selfcheck
from .eager import eager_stepper, scan_neuron
from .families import (
    FAMILIES,
    FAMILY_OF,
    factors,
    kernel_buffers,
    kernel_results,
    reverse_scan_inputs,
    scan_operands,
)
from .schedule import Level, Request

__all__ = [
    "FAMILIES",
    "FAMILY_OF",
    "INTERPRETED",
    "factors",
    "give_up",
    "scan",
    "triton_stepper",
    "unavailable",
]

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
"""Whether Triton's interpreter runs the kernels (on CPU tensors), as this module was imported."""

try:
    import triton
    import triton.language as tl
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources
except ImportError:  # the back-end says so when asked for
    triton = None
    CompilationError = OutOfResources = RuntimeError  # never raised: nothing launches

_BLOCK = 1024  # neurons per program (a power of two)
_failed: list[Exception] = []  # a kernel Triton could not build: eager from then on


def unavailable(device: torch.device) -> str | None:
    """Why the back-end cannot run on ``device`` (``None``: it can)."""
    if triton is None:
        return "Triton is not installed (pip install triton; it comes with torch's CUDA builds)"
    if device.type == "cuda":
        return None
    if device.type == "cpu" and INTERPRETED:
        return None
    return (
        f"its kernels run on CUDA, and the module is on {device.type}; on the CPU they run only "
        "under Triton's interpreter (TRITON_INTERPRET=1 set before nirbridge's Triton back-end is "
        "imported, for tests: slow)"
    )


def triton_stepper(module: torch.nn.Module, level: Level | None, request: Request) -> Any:
    """The eager schedule with the neuron scans, and small recurrent loops
    (:mod:`.triton_loop`), as Triton kernels."""
    device = next((t.device for t in (*module.parameters(), *module.buffers())), torch.device("cpu"))
    reason = unavailable(device)
    if reason is not None:
        raise BackendUnavailableError(
            f"run(backend='triton'): {reason}. Use backend='eager' or backend='compile'."
        )
    from .triton_loop import run_loop

    dtype = next((t.dtype for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()), None)

    def loop(*args: Any) -> bool:  # the loop kernel where it passed its self-check
        return (dtype is None or selfcheck.passed("loop", device, dtype)) and run_loop(*args)

    return eager_stepper(module, level, request, scan, loop)


def scan(module: M.Neuron, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """``(outputs, state, traces)`` of ``module`` over ``x`` ``[T, B, ...]``, one kernel
    launch (two with gradients: forward, then reverse time); the eager scan where Triton
    has no kernel (Delay) or the parameters are of another dtype than the input. If
    Triton cannot compile or fit a kernel on this device, the run goes on eagerly and a
    :class:`~nirbridge.CompileWarning` says why, once."""
    family = FAMILY_OF.get(type(module))
    if family is None or any(getattr(module, name).dtype != x.dtype for name in module.params):
        return scan_neuron(module, x, state, trace)  # no kernel, or mixed precision: as eager
    if _failed or not _trusted(module, x, state):
        return scan_neuron(module, x, state, trace)
    try:
        return _scan(module, family, x, state, trace)
    except (CompilationError, OutOfResources) as error:
        give_up(error)
        return scan_neuron(module, x, state, trace)


def _trusted(module: M.Neuron, x: torch.Tensor, state: Any) -> bool:
    """Whether the scan's kernels (the reverse one too, where a gradient will flow)
    passed their self-check on this device and dtype (:mod:`.selfcheck`)."""
    if not selfcheck.passed("scan", x.device, x.dtype):
        return False
    return not module.needs_grad(x, state if state is not None else ()) or selfcheck.passed(
        "scan backward", x.device, x.dtype
    )


def give_up(error: Exception) -> None:
    """Remember that Triton could not build a kernel on this device (everything runs
    eagerly from then on) and say so once, as a :class:`~nirbridge.CompileWarning`."""
    _failed.append(error)
    text = str(error).strip()
    warnings.warn(
        f"run(backend='triton'): Triton could not build its kernel on this device, so neurons "
        f"run eagerly from now on ({type(error).__name__}: {text.splitlines()[0] if text else ''})",
        CompileWarning,
        stacklevel=7,
    )


def _scan(module: M.Neuron, family: str, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """One launch, or with gradients the autograd function :class:`_Scan` (the forward
    kernel keeps each step's membrane before the reset, and a reverse-time kernel gives
    the gradients eager autograd defines: the surrogate of
    :func:`nirbridge.neurons.functional.spike`, the reset's path). The input term and
    the decay factors are the torch operations the eager kernels do (``dt * r * x``,
    ``r * x``, ``w_in * x``, ``dt / tau``), so values are the same, and gradients reach
    the input, the parameters and the initial state."""
    if state is None:
        state = module.initial_state(x[0])
    cuba = family == "cuba"
    spiking = isinstance(module, (M.IF, M.LIF, M.CubaLIF))
    operands = scan_operands(module, family, x, state)
    if module.needs_grad(x, state):
        out, v, i, trace_v, trace_i, _ = _Scan.apply(*operands, FAMILIES[family], spiking)
    else:
        out, v, i, trace_v, trace_i, _ = _forward(*operands, FAMILIES[family], spiking, trace, False)
    traces: dict[str, torch.Tensor] = {}
    if trace:
        traces = {"i": trace_i, "v": trace_v} if cuba else {"v": trace_v}
    return out, (F.CubaLIState(i, v) if cuba else F.IState(v)), traces


def _forward(pre, v0, i0, a, b, r, leak, threshold, reset, family, spiking, trace, save) -> tuple:  # type: ignore[no-untyped-def]
    """Launch the forward kernel: ``(out, v, i, trace_v, trace_i, v_pre)``; the state
    starts from copies of ``v0`` and ``i0``. Outputs a family does not have (``i``
    without a current, traces not asked for) are 0-d placeholders that alias nothing."""
    steps, n = pre.shape[0], v0.numel()
    cuba = family == 2
    buffers = kernel_buffers(pre, v0, i0, cuba, trace, save, current=cuba and trace)
    operands = _pointers((a, b, r, leak, threshold, reset), v0)
    _neuron_scan[(triton.cdiv(n, _BLOCK),)](
        pre, *buffers[:2], *operands, *buffers[2:],
        steps, n,
        FAMILY=family, SPIKING=spiking, TRACE=trace, SAVE=save, BLOCK=_BLOCK,
        enable_fp_fusion=_precision.contract(),
    )  # fmt: skip
    return kernel_results(buffers, cuba, trace, save, current=cuba and trace)


def _pointers(operands: tuple[torch.Tensor, ...], stand_in: torch.Tensor) -> list[torch.Tensor]:
    """The operands as the kernels take them: a 0-d placeholder (an operand the family
    does not read) becomes ``stand_in``, a pointer that is never loaded."""
    return [t if t.dim() else stand_in for t in operands]


class _Scan(torch.autograd.Function):
    """``(out, v, i, trace_v, trace_i, v_pre)`` of a scan (:func:`_forward`), differentiable."""

    @staticmethod
    def forward(ctx: Any, pre, v0, i0, a, b, r, leak, threshold, reset, family, spiking):  # type: ignore[override]
        results = _forward(pre, v0, i0, a, b, r, leak, threshold, reset, family, spiking, True, True)
        out, _, _, trace_v, trace_i, v_pre = results
        operands = _pointers((a, b, r, leak, threshold, reset), v0)
        ctx.save_for_backward(
            pre, v0, i0, *operands, out, trace_v, trace_i if family == 2 else trace_v, v_pre
        )
        ctx.family, ctx.spiking = family, spiking
        ctx.alpha = F.SURROGATE_ALPHA  # as eager's spike does: the value at the forward pass
        ctx.scalars = [t.dim() == 0 for t in (a, b, r, leak, threshold, reset)]
        ctx.mark_non_differentiable(v_pre)
        return results

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        pre, v0, i0, a, b, r, leak, threshold, reset, out, trace_v, trace_i, v_pre = ctx.saved_tensors
        steps, n = pre.shape[0], v0.numel()
        read, written = reverse_scan_inputs(grads, pre, v0, ctx.family == 2)
        g_pre, g_v0, g_i0, *g_params = written
        _neuron_scan_backward[(triton.cdiv(n, _BLOCK),)](
            pre, v0, i0 if ctx.family == 2 else v0, a, b, r, leak, threshold, reset,
            out, trace_v, trace_i, v_pre, *read, *written,
            steps, n, ctx.alpha,
            FAMILY=ctx.family, SPIKING=ctx.spiking, BLOCK=_BLOCK,
            enable_fp_fusion=_precision.contract(),
        )  # fmt: skip
        grads = [None if scalar else g for scalar, g in zip(ctx.scalars, g_params)]
        return (g_pre, g_v0, g_i0 if ctx.family == 2 else None, *grads, None, None)


if triton is not None:

    @triton.jit
    def _load_neurons(
        v_ptr, i_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr, offsets, mask,
        FAMILY: tl.constexpr, SPIKING: tl.constexpr,
    ):  # fmt: skip
        """``(v, i, a, b, r, leak, threshold, reset)`` at ``offsets``: what ``FAMILY``
        reads is loaded, the rest are stand-ins (``v``) that are never used."""
        v = tl.load(v_ptr + offsets, mask=mask)
        i, a, b, r, leak, threshold, reset = v, v, v, v, v, v, v
        if FAMILY >= 1:
            a = tl.load(a_ptr + offsets, mask=mask)
            leak = tl.load(leak_ptr + offsets, mask=mask)
        if FAMILY == 2:
            i = tl.load(i_ptr + offsets, mask=mask)
            b = tl.load(b_ptr + offsets, mask=mask)
            r = tl.load(r_ptr + offsets, mask=mask)
        if SPIKING:
            threshold = tl.load(th_ptr + offsets, mask=mask)
            reset = tl.load(reset_ptr + offsets, mask=mask)
        return v, i, a, b, r, leak, threshold, reset

    @triton.jit
    def _update(x, v, i, a, b, r, leak, FAMILY: tl.constexpr):
        """One step of the family's update from the input term ``x``, as
        :mod:`nirbridge.neurons.functional` orders it: ``(v, i)``."""
        if FAMILY == 0:
            v = v + x
        if FAMILY == 1:
            v = v + a * ((leak - v) + x)
        if FAMILY == 2:
            i = i + (x - i) * a
            v = v + ((leak - v) + i * r) * b
        return v, i

    @triton.jit
    def _fire(v, threshold, reset):
        """``(z, v)``: the spike ``v > threshold`` as 0/1 and the membrane after the
        reset ``(1 - z) v + z v_reset``."""
        z = (v > threshold).to(v.dtype)
        return z, (1.0 - z) * v + z * reset

    @triton.jit
    def _neuron_scan(
        pre_ptr, v_ptr, i_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr,
        out_ptr, trace_v_ptr, trace_i_ptr, v_pre_ptr,
        steps, n,
        FAMILY: tl.constexpr, SPIKING: tl.constexpr, TRACE: tl.constexpr, SAVE: tl.constexpr,
        BLOCK: tl.constexpr,
    ):  # fmt: skip
        """One block of neurons over ``steps``: FAMILY 0 (I, IF) ``v += pre``; 1 (LI,
        LIF) ``v += a ((v_leak - v) + pre)``; 2 (CubaLI, CubaLIF) ``i += a (pre - i)``,
        ``v += b ((v_leak - v) + r i)``; SPIKING: ``z = v > th``,
        ``v = (1 - z) v + z v_reset``. The state is written back at the end; TRACE
        writes it after every step, SAVE the membrane before each reset (for BPTT)."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        pre_at = pre_ptr + offsets  # pointers advance by n a step: 64-bit, however long the chunk
        out_at = out_ptr + offsets
        trace_v_at = trace_v_ptr + offsets
        trace_i_at = trace_i_ptr + offsets
        v_pre_at = v_pre_ptr + offsets
        v, i, a, b, r, leak, threshold, reset = _load_neurons(
            v_ptr, i_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr, offsets, mask, FAMILY, SPIKING
        )
        for _ in range(steps):
            v, i = _update(tl.load(pre_at, mask=mask), v, i, a, b, r, leak, FAMILY)
            if SAVE:
                tl.store(v_pre_at, v, mask=mask)
            if SPIKING:
                z, v = _fire(v, threshold, reset)
                tl.store(out_at, z, mask=mask)
            else:
                tl.store(out_at, v, mask=mask)
            if TRACE:
                tl.store(trace_v_at, v, mask=mask)
                if FAMILY == 2:
                    tl.store(trace_i_at, i, mask=mask)
            pre_at += n
            out_at += n
            trace_v_at += n
            trace_i_at += n
            v_pre_at += n
        tl.store(v_ptr + offsets, v, mask=mask)
        if FAMILY == 2:
            tl.store(i_ptr + offsets, i, mask=mask)

    @triton.jit
    def _neuron_scan_backward(
        pre_ptr, v0_ptr, i0_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr,
        out_ptr, v_ptr, i_ptr, v_pre_ptr,
        g_out_ptr, g_v_ptr, g_i_ptr, g_trace_v_ptr, g_trace_i_ptr,
        g_pre_ptr, g_v0_ptr, g_i0_ptr, g_a_ptr, g_b_ptr, g_r_ptr, g_leak_ptr, g_th_ptr, g_reset_ptr,
        steps, n, alpha,
        FAMILY: tl.constexpr, SPIKING: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        """The scan's gradients, last step first. Per step, with ``gv`` the gradient of
        the state after it: the spike's surrogate ``s = 1 / (alpha |v' - th| + 1)^2`` on
        the membrane before the reset ``v'``, the reset's path ``gz = g_out + gv (v_reset
        - v')``, ``gv' = gv (1 - z) + gz s``; then back through the family's update to
        the input term, the previous state and the parameters (summed over the steps)."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        last = (steps - 1) * n  # pointers walk back from the last step
        pre_at = pre_ptr + last + offsets
        out_at = out_ptr + last + offsets
        v_at = v_ptr + last + offsets
        i_at = i_ptr + last + offsets
        v_pre_at = v_pre_ptr + last + offsets
        g_out_at = g_out_ptr + last + offsets
        g_trace_v_at = g_trace_v_ptr + last + offsets
        g_trace_i_at = g_trace_i_ptr + last + offsets
        g_pre_at = g_pre_ptr + last + offsets
        v0, i0, a, b, r, leak, threshold, reset = _load_neurons(
            v0_ptr, i0_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr, offsets, mask, FAMILY, SPIKING
        )
        gv = tl.load(g_v_ptr + offsets, mask=mask)
        zero = gv * 0.0
        g_a = zero
        g_b = zero
        g_r = zero
        g_leak = zero
        g_th = zero
        g_reset = zero
        if FAMILY == 2:
            gi = tl.load(g_i_ptr + offsets, mask=mask)
        for k in range(steps):
            first = k == steps - 1  # step 0: the previous state is the initial one
            gv = gv + tl.load(g_trace_v_at, mask=mask)
            v_new = tl.load(v_pre_at, mask=mask)
            if SPIKING:
                z = tl.load(out_at, mask=mask)
                gz = tl.load(g_out_at, mask=mask) + gv * (reset - v_new)
                distance = tl.abs(v_new - threshold) * alpha + 1.0
                surrogate = gz / (distance * distance)
                g_th = g_th - surrogate
                g_reset = g_reset + gv * z
                gv = gv * (1.0 - z) + surrogate
            else:
                gv = gv + tl.load(g_out_at, mask=mask)
            if first:
                v_before = v0
            else:
                v_before = tl.load(v_at - n, mask=mask)
            if FAMILY == 0:
                tl.store(g_pre_at, gv, mask=mask)
            if FAMILY == 1:
                x = tl.load(pre_at, mask=mask)
                tl.store(g_pre_at, gv * a, mask=mask)
                g_a = g_a + gv * ((leak - v_before) + x)
                g_leak = g_leak + gv * a
                gv = gv * (1.0 - a)
            if FAMILY == 2:
                x = tl.load(pre_at, mask=mask)
                i_new = tl.load(i_at, mask=mask)
                if first:
                    i_before = i0
                else:
                    i_before = tl.load(i_at - n, mask=mask)
                gi = gi + tl.load(g_trace_i_at, mask=mask)
                g_b = g_b + gv * ((leak - v_before) + i_new * r)
                g_r = g_r + gv * i_new * b
                g_leak = g_leak + gv * b
                gi = gi + gv * r * b
                gv = gv * (1.0 - b)
                tl.store(g_pre_at, gi * a, mask=mask)
                g_a = g_a + gi * (x - i_before)
                gi = gi * (1.0 - a)
            pre_at -= n
            out_at -= n
            v_at -= n
            i_at -= n
            v_pre_at -= n
            g_out_at -= n
            g_trace_v_at -= n
            g_trace_i_at -= n
            g_pre_at -= n
        tl.store(g_v0_ptr + offsets, gv, mask=mask)
        if FAMILY == 2:
            tl.store(g_i0_ptr + offsets, gi, mask=mask)
        tl.store(g_a_ptr + offsets, g_a, mask=mask)
        tl.store(g_b_ptr + offsets, g_b, mask=mask)
        tl.store(g_r_ptr + offsets, g_r, mask=mask)
        tl.store(g_leak_ptr + offsets, g_leak, mask=mask)
        tl.store(g_th_ptr + offsets, g_th, mask=mask)
        tl.store(g_reset_ptr + offsets, g_reset, mask=mask)

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
says why. With gradients the neurons step eagerly (BPTT) and the first such run says so.
Not yet here: reverse-time kernels for BPTT, recurrent loops in one kernel, and
figures measured on a GPU; ``backend="auto"`` stays eager until they are.
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
from .eager import eager_stepper, scan_neuron
from .kernels import CubaKernel, IKernel, LIKernel
from .schedule import Level, Request

__all__ = ["INTERPRETED", "scan", "triton_stepper"]

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
"""Whether Triton's interpreter runs the kernels (on CPU tensors), as this module was imported."""

try:
    import triton
    import triton.language as tl
except ImportError:  # the back-end says so when asked for
    triton = None

_BLOCK = 1024  # neurons per program (a power of two)
_warned: set[str] = set()


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
    """The eager schedule with the neuron scans as Triton kernels."""
    device = next((t.device for t in (*module.parameters(), *module.buffers())), torch.device("cpu"))
    reason = unavailable(device)
    if reason is not None:
        raise BackendUnavailableError(
            f"run(backend='triton'): {reason}. Use backend='eager' or backend='compile'."
        )
    return eager_stepper(module, level, request, scan)


def scan(module: M.Neuron, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """``(outputs, state, traces)`` of ``module`` over ``x`` ``[T, B, ...]``, one kernel
    launch; the eager scan where Triton has no kernel (Delay) or gradients are needed."""
    family = _FAMILY.get(type(module))
    if family is None or any(getattr(module, name).dtype != x.dtype for name in module.params):
        return scan_neuron(module, x, state, trace)  # no kernel, or mixed precision: as eager
    if state is None:
        state = module.initial_state(x[0])
    if module.needs_grad(x, state):
        if "gradients" not in _warned:
            _warned.add("gradients")
            warnings.warn(
                "run(backend='triton'): gradients are required, and this version has no reverse-time "
                "kernels, so the neurons step eagerly for BPTT; for the kernels, call run inside "
                "torch.no_grad() or torch.inference_mode()",
                CompileWarning,
                stacklevel=6,
            )
        return scan_neuron(module, x, state, trace)
    kernel = module.kernel(state, x[0])  # the eager kernel: its private state and operands
    shape = kernel.v.shape
    steps, n = x.shape[0], kernel.v.numel()
    pre = kernel.pre(x).expand(steps, *shape).contiguous()
    v = kernel.v.contiguous()
    out = torch.empty((steps, *shape), dtype=v.dtype, device=v.device)
    cuba = family == "cuba"
    i = kernel.i.contiguous() if cuba else v  # type: ignore[attr-defined]
    trace_v = torch.empty_like(out) if trace else out
    trace_i = torch.empty_like(out) if trace and cuba else out
    a, b, r, leak = _operands(kernel, family, shape, v)
    threshold, reset = (
        (_full(kernel.threshold, shape, v), _full(kernel.reset, shape, v)) if kernel.spiking else (v, v)
    )
    grid = (triton.cdiv(n, _BLOCK),)
    _neuron_scan[grid](
        pre, v, i, a, b, r, leak, threshold, reset, out, trace_v, trace_i,
        steps, n,
        FAMILY=_FAMILIES[family], SPIKING=kernel.spiking, TRACE=trace, BLOCK=_BLOCK,
        enable_fp_fusion=_precision.contract(),
    )  # fmt: skip
    traces: dict[str, torch.Tensor] = {}
    if trace:
        traces = {"i": trace_i, "v": trace_v} if cuba else {"v": trace_v}
    final = F.CubaLIState(i, v) if cuba else F.IState(v)
    return out, final, traces


_FAMILY = {M.I: "i", M.IF: "i", M.LI: "li", M.LIF: "li", M.CubaLI: "cuba", M.CubaLIF: "cuba"}
_FAMILIES = {"i": 0, "li": 1, "cuba": 2}


def _full(value: Any, shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
    """An operand of the eager kernel (a number or a tensor) as a contiguous tensor of ``shape``."""
    if isinstance(value, torch.Tensor):
        return value.to(like.dtype).expand(shape).contiguous()
    return torch.full(shape, value, dtype=like.dtype, device=like.device)


def _operands(kernel: Any, family: str, shape: torch.Size, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(a, b, r, v_leak): the decay factors and parameters each family's update reads."""
    if family == "i":
        assert isinstance(kernel, IKernel)
        return v, v, v, v  # unused: the input term holds dt * r * x
    if family == "li":
        assert isinstance(kernel, LIKernel)
        return _full(kernel.a, shape, v), v, v, _full(kernel.v_leak, shape, v)
    assert isinstance(kernel, CubaKernel)
    return (
        _full(kernel.a_syn, shape, v),
        _full(kernel.a_mem, shape, v),
        _full(kernel.r, shape, v),
        _full(kernel.v_leak, shape, v),
    )


if triton is not None:

    @triton.jit
    def _neuron_scan(
        pre_ptr, v_ptr, i_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr,
        out_ptr, trace_v_ptr, trace_i_ptr,
        steps, n,
        FAMILY: tl.constexpr, SPIKING: tl.constexpr, TRACE: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        """One block of neurons over ``steps``: FAMILY 0 (I, IF) ``v += pre``; 1 (LI,
        LIF) ``v += a ((v_leak - v) + pre)``; 2 (CubaLI, CubaLIF) ``i += a (pre - i)``,
        ``v += b ((v_leak - v) + r i)``; SPIKING: ``z = v > th``,
        ``v = (1 - z) v + z v_reset``. The state is written back at the end."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        pre_at = pre_ptr + offsets  # pointers advance by n a step: 64-bit, however long the chunk
        out_at = out_ptr + offsets
        trace_v_at = trace_v_ptr + offsets
        trace_i_at = trace_i_ptr + offsets
        v = tl.load(v_ptr + offsets, mask=mask)
        if FAMILY == 1:
            a = tl.load(a_ptr + offsets, mask=mask)
            leak = tl.load(leak_ptr + offsets, mask=mask)
        if FAMILY == 2:
            i = tl.load(i_ptr + offsets, mask=mask)
            a = tl.load(a_ptr + offsets, mask=mask)
            b = tl.load(b_ptr + offsets, mask=mask)
            r = tl.load(r_ptr + offsets, mask=mask)
            leak = tl.load(leak_ptr + offsets, mask=mask)
        if SPIKING:
            threshold = tl.load(th_ptr + offsets, mask=mask)
            reset = tl.load(reset_ptr + offsets, mask=mask)
        for _ in range(steps):
            x = tl.load(pre_at, mask=mask)
            if FAMILY == 0:
                v = v + x
            if FAMILY == 1:
                v = v + a * ((leak - v) + x)
            if FAMILY == 2:
                i = i + (x - i) * a
                v = v + ((leak - v) + i * r) * b
            if SPIKING:
                z = (v > threshold).to(v.dtype)
                v = (1.0 - z) * v + z * reset
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
        tl.store(v_ptr + offsets, v, mask=mask)
        if FAMILY == 2:
            tl.store(i_ptr + offsets, i, mask=mask)

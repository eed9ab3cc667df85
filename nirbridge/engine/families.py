"""What the compiled back-ends (Triton, CPU) share about nirbridge's neuron families:
which family a module is, and its operands as the eager kernels compute them."""

from __future__ import annotations

from typing import Any

import torch

from ..neurons import modules as M

__all__ = [
    "FAMILIES",
    "FAMILY_OF",
    "factors",
    "kernel_buffers",
    "kernel_results",
    "reverse_scan_inputs",
    "scan_operands",
]

FAMILY_OF = {M.I: "i", M.IF: "i", M.LI: "li", M.LIF: "li", M.CubaLI: "cuba", M.CubaLIF: "cuba"}
"""The family of each neuron type: integrators, leaky integrators, current-based ones."""

FAMILIES = {"i": 0, "li": 1, "cuba": 2}
"""The families' numbers, as the kernels take them."""


def factors(module: M.Neuron, family: str, dummy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(scale, a, b, r, leak)`` of a population, as the eager kernels compute them:
    the input term is ``scale * x`` (``dt·r`` for I/IF, ``r`` for LI/LIF, ``w_in`` for
    CubaLI/CubaLIF), the decay factors ``a = dt/τ`` (``dt/τ_syn`` and ``b = dt/τ_mem``
    for the current-based ones); ``dummy`` where the family has no such operand."""
    dt = module.dt
    if family == "i":
        return dt * module.r, dummy, dummy, dummy, dummy
    if family == "li":
        return module.r, dt / module.tau, dummy, dummy, module.v_leak
    return module.w_in, dt / module.tau_syn, dt / module.tau_mem, module.r, module.v_leak


def scan_operands(module: M.Neuron, family: str, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, ...]:
    """``(pre, v0, i0, a, b, r, leak, threshold, reset)`` of a population's scan over
    ``x`` ``[T, B, ...]`` from ``state``, as the scan kernels take them: the input term
    ``pre = scale * x`` ``[T, *shape]`` and the rest ``[*shape]`` (the population's
    shape), each contiguous; a 0-d placeholder where the family reads no such operand
    (``i0`` of a non-current-based family; ``threshold`` and ``reset`` of I, LI,
    CubaLI)."""
    shape = module._shape(x[0])
    dummy = x.new_zeros(())
    scale, a, b, r, leak = factors(module, family, dummy)
    spiking = isinstance(module, (M.IF, M.LIF, M.CubaLIF))
    threshold = module.v_threshold if spiking else dummy
    reset = module.v_reset if spiking else dummy

    def full(t: torch.Tensor) -> torch.Tensor:
        return t if t is dummy else t.expand(shape).contiguous()

    return (
        (scale * x).expand(x.shape[0], *shape).contiguous(),
        full(state.v),
        full(state.i) if family == "cuba" else dummy,
        *(full(t) for t in (a, b, r, leak, threshold, reset)),
    )


def kernel_buffers(
    like: torch.Tensor, v0: torch.Tensor, i0: torch.Tensor, cuba: bool, trace: bool, save: bool, current: bool
) -> tuple[torch.Tensor, ...]:
    """``(v, i, out, trace_v, trace_i, v_pre)`` that a forward kernel (a scan's or a
    loop's, Triton's or the CPU's) writes: the state from contiguous copies of ``v0``
    and ``i0`` (``i`` is ``v`` without a current), and buffers like ``like`` for the
    outputs, the state after every step (``trace``), the current after every step
    (``current``) and the membrane before every reset (``save``); one not asked for
    aliases another, and is never written."""
    v = v0.detach().clone(memory_format=torch.contiguous_format)
    i = i0.detach().clone(memory_format=torch.contiguous_format) if cuba else v
    out = torch.empty_like(like)
    trace_v = torch.empty_like(like) if trace else out
    trace_i = torch.empty_like(like) if current else trace_v
    v_pre = torch.empty_like(like) if save else out
    return v, i, out, trace_v, trace_i, v_pre


def kernel_results(
    buffers: tuple[torch.Tensor, ...], cuba: bool, trace: bool, save: bool, current: bool
) -> tuple[torch.Tensor, ...]:
    """``(out, v, i, trace_v, trace_i, v_pre)`` from :func:`kernel_buffers`' after the
    kernel ran: what was not written (``i`` without a current, buffers not asked for)
    is a 0-d placeholder that aliases nothing."""
    v, i, out, trace_v, trace_i, v_pre = buffers
    placeholder = out.new_zeros(())
    return (
        out,
        v,
        i if cuba else placeholder,
        trace_v if trace else placeholder,
        trace_i if current else placeholder,
        v_pre if save else placeholder,
    )


def reverse_scan_inputs(
    grads: tuple[torch.Tensor | None, ...], pre: torch.Tensor, v0: torch.Tensor, cuba: bool
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """What a scan's reverse-time kernel (Triton's, the CPU's) reads and writes, from the
    gradients autograd gives its autograd function (``out, v, i, trace_v, trace_i,
    v_pre``; ``None`` or 0-d where none reaches one): ``([g_out, g_v, g_i, g_trace_v,
    g_trace_i], [g_pre, g_v0, g_i0, g_a, g_b, g_r, g_leak, g_th, g_reset])``. Missing
    gradients are zeros; those of a current a family does not have alias ``g_v`` and
    ``g_trace_v`` (never read)."""
    g_out, g_v, g_i, g_trace_v, g_trace_i, _ = grads  # v_pre has none

    def given(g: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
        return g.contiguous() if g is not None and g.dim() else torch.zeros_like(like)

    g_v, g_trace_v = given(g_v, v0), given(g_trace_v, pre)
    read = [given(g_out, pre), g_v, given(g_i, v0) if cuba else g_v, g_trace_v]
    read.append(given(g_trace_i, pre) if cuba else g_trace_v)
    written = [torch.empty_like(pre), *(torch.empty_like(v0) for _ in range(8))]
    return read, written

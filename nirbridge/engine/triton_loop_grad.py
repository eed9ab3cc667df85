r"""BPTT through a small recurrent loop as Triton kernels (the Triton back-end).

The loop of :mod:`.triton_loop` (a spiking population of ``n`` neurons, IF, LIF or
CubaLIF, and a Linear/Affine layer ``n → n`` fed back through a delayed edge) runs
forward as that module's kernel, which also keeps each step's membrane before the
reset :math:`v'_t` (and for CubaLIF the current :math:`i_t`); then one reverse-time
kernel gives the gradients that eager autograd defines through the stepped loop.

Forward, per batch row and step :math:`t`, with :math:`p_t = s\,x_t` the input term
(:math:`s` = ``dt·r``, ``r`` or ``w_in``, as :func:`.triton.factors` forms it):

.. math::

    x_t = e_t + y_{t-1}, \quad (v'_t, i_t) = \mathrm{update}(p_t, v_{t-1}, i_{t-1}), \quad
    z_t = [v'_t > \theta], \quad v_t = (1 - z_t)\,v'_t + z_t\,v_{reset}, \quad
    y_t = W z_t + b.

Reverse, last step first, with :math:`\bar u` the gradient of the loss with respect to
:math:`u` through every path:

.. math::

    \bar y_t = g^{rec}_t + \bar x_{t+1}, \qquad
    \bar z_t = g^{out}_t + W^\top \bar y_t + \bar v_t (v_{reset} - v'_t), \qquad
    \bar v'_t = \bar v_t (1 - z_t) + \sigma_t \bar z_t,

with the surrogate of :func:`nirbridge.neurons.functional.spike`,
:math:`\sigma_t = 1 / (\alpha |v'_t - \theta| + 1)^2`, and :math:`\bar\theta \mathrel{-}=
\sigma_t \bar z_t`, :math:`\bar v_{reset} \mathrel{+}= \bar v_t z_t`; then back through
the family's update to :math:`\bar p_t`, the previous state and the decay factors
(as in :func:`.triton._neuron_scan_backward`), and :math:`\bar x_t = s\,\bar p_t`,
:math:`\bar s \mathrel{+}= x_t \bar p_t`. :math:`\bar x_t` is the gradient of the
input term :math:`e_t`, and of the layer's previous output :math:`y_{t-1}`
(:math:`\bar x_0` of the output carried in from the previous chunk).

The kernel writes :math:`\bar y_t` for every step; torch then sums the layer's
gradients over the steps and the batch rows, :math:`\bar W = \sum_{t,b} \bar y_t
z_t^\top` (one matrix product) and :math:`\bar b = \sum_{t,b} \bar y_t`. The neuron
parameters' gradients are summed over the steps in the kernel, per batch row, and
autograd sums them over the rows (the operands are expanded to ``[B, n]``) and on to
the module's own parameters (``dt / tau`` and log-space time constants included).

Memory, beyond the forward pass's outputs: :math:`v'` kept from the forward pass
(``T·B·n`` values, and as much again for the current of a CubaLIF population when its
trace is not recorded), and in the backward pass :math:`\bar y` and the input's
gradient (``T·B·n`` each) and zeros for gradients autograd leaves out. The membrane
after each reset is recomputed from :math:`v'` and the spikes, not kept.
"""

from __future__ import annotations

from typing import Any

import torch

from ..neurons import functional as F
from ..neurons import modules as M
from . import loops as _loops
from . import precision as _precision
from . import triton_loop as _loop
from .triton import FAMILIES, triton

__all__ = ["scan_loop"]


def scan_loop(
    neuron: M.Neuron,
    family: str,
    layer: torch.nn.Linear,
    ext: torch.Tensor,
    state: Any,
    previous: torch.Tensor | None,
    trace: bool,
) -> tuple[torch.Tensor, ...]:
    """``(spikes, layer outputs, v, i, trace_v, trace_i)`` of the loop over the chunk
    ``ext`` ``[T, B, n]`` from ``state`` and the layer's ``previous`` output,
    differentiable (:class:`_LoopScan`): the operands are formed in torch
    (:func:`.triton_loop.operands`), so gradients reach the module's parameters."""
    batch, n = ext.shape[1:]
    dummy = ext.new_zeros(())  # an operand the family does not read
    cuba = family == "cuba"
    v0 = state.v.expand(batch, n).contiguous()
    i0 = state.i.expand(batch, n).contiguous() if cuba else dummy
    start = previous.contiguous() if previous is not None else None
    operands = _loop.operands(neuron, family, batch, n, dummy)
    results = _LoopScan.apply(
        ext, layer.weight.contiguous(), layer.bias, start, v0, i0, *operands, family, trace
    )
    return results[:6]


def _stand_in(t: torch.Tensor | None, stand_in: torch.Tensor) -> torch.Tensor:
    """``t`` as a kernel takes it: ``stand_in`` (a pointer never read) for ``None`` or 0-d."""
    return stand_in if t is None or t.dim() == 0 else t


class _LoopScan(torch.autograd.Function):
    """``(spikes, layer outputs, v, i, trace_v, trace_i, v_pre)`` of the loop
    (:func:`.triton_loop._launch` with ``save``), differentiable with respect to the
    input term, the weight and bias, the previous output, the initial state and the
    operands ``scale, a, b, r, leak, threshold, reset``."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        ext: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        previous: torch.Tensor | None,
        v0: torch.Tensor,
        i0: torch.Tensor,
        scale: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        r: torch.Tensor,
        leak: torch.Tensor,
        threshold: torch.Tensor,
        reset: torch.Tensor,
        family: str,
        trace: bool,
    ) -> tuple[torch.Tensor, ...]:
        operands = [scale, a, b, r, leak, threshold, reset]
        results = _loop._launch(family, ext, operands, weight, bias, v0, i0, previous, trace, True)
        out, rec, _, _, _, trace_i, v_pre = results
        ctx.save_for_backward(
            ext, weight, _stand_in(previous, v0), v0, _stand_in(i0, v0),
            *(_stand_in(t, v0) for t in operands), out, rec, _stand_in(trace_i, v0), v_pre,
        )  # fmt: skip
        ctx.family, ctx.has_bias, ctx.has_previous = FAMILIES[family], bias is not None, previous is not None
        ctx.alpha = F.SURROGATE_ALPHA  # as eager's spike does: the value at the forward pass
        ctx.scalars = [t.dim() == 0 for t in operands]
        ctx.mark_non_differentiable(v_pre)
        ctx.set_materialize_grads(False)  # None for outputs the loss does not reach
        return results

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, *grads: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        ext, weight, start, v0, i0, scale, a, b, r, leak, threshold, reset, out, rec, i_trace, v_pre = (
            ctx.saved_tensors
        )
        steps, batch, n = ext.shape
        cuba = ctx.family == FAMILIES["cuba"]
        traced, read, written = _loops.reverse_inputs(grads, ext, v0, cuba, untraced=v0)
        block_n = triton.next_power_of_2(n)
        block_b = max(1, min(triton.next_power_of_2(batch), _loop._TILE // block_n))
        _loop_scan_backward[(triton.cdiv(batch, block_b),)](
            ext, scale, v0, i0, a, b, r, leak, threshold, reset,
            weight, start, out, rec, i_trace, v_pre, *read, *written,
            steps, batch, n, (steps - 1) * batch * n, ctx.alpha,
            FAMILY=ctx.family, HAS_PREVIOUS=ctx.has_previous, TRACED=traced,
            BLOCK_B=block_b, BLOCK_N=block_n,
            enable_fp_fusion=_precision.contract(),
        )  # fmt: skip
        return _loops.reverse_outputs(ctx, written, out, cuba, shared=False, trailing=2)


if triton is not None:
    import triton.language as tl

    from .triton import _fire, _load_neurons

    @triton.jit
    def _loop_scan_backward(
        ext_ptr, scale_ptr, v0_ptr, i0_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr,
        w_ptr, start_ptr, out_ptr, rec_ptr, i_ptr, v_pre_ptr,
        g_out_ptr, g_rec_ptr, g_v_ptr, g_i_ptr, g_trace_v_ptr, g_trace_i_ptr,
        g_ext_ptr, g_y_ptr, g_start_ptr, g_v0_ptr, g_i0_ptr,
        g_scale_ptr, g_a_ptr, g_b_ptr, g_r_ptr, g_leak_ptr, g_th_ptr, g_reset_ptr,
        steps, batch, n, last, alpha,
        FAMILY: tl.constexpr, HAS_PREVIOUS: tl.constexpr, TRACED: tl.constexpr,
        BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
    ):  # fmt: skip
        """A block of batch rows through the loop's steps, last first (the module's
        equations). Per step: the layer output's gradient ``g_y = g_rec + g_x`` (``g_x``
        from the next step's input) is stored and, after a barrier, summed against the
        weight's columns in index order, ``W^T g_y``; the spike and reset as in
        :func:`.triton._neuron_scan_backward`, the membrane the step started from
        recomputed as the previous step's reset of its ``v_pre``; the input term
        ``scale * x`` with ``x = ext + rec`` of the step before (``start`` at the first
        step) rebuilt as the forward kernel adds it. Parameter gradients are summed over
        the steps. TRACED: the recorded traces have gradients (``g_trace_v``,
        ``g_trace_i`` are read); ``last`` is the offset of the last step."""
        rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)[:, None]
        cols = tl.arange(0, BLOCK_N)[None, :]
        row_ok = rows < batch
        col_ok = cols < n
        mask = row_ok & col_ok
        offsets = rows * n + cols
        v0, i0, a, b, r, leak, threshold, reset = _load_neurons(
            v0_ptr, i0_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr, offsets, mask, FAMILY, True
        )
        scale = tl.load(scale_ptr + offsets, mask=mask)
        start = tl.load(start_ptr + offsets, mask=mask)  # the layer's previous output (unused without one)
        stride = batch * n  # pointers walk back from the last step, at offset ``last``
        ext_at = ext_ptr + last + offsets
        out_at = out_ptr + last + offsets
        rec_at = rec_ptr + last + offsets
        i_at = i_ptr + last + offsets
        v_pre_at = v_pre_ptr + last + offsets
        g_out_at = g_out_ptr + last + offsets
        g_rec_at = g_rec_ptr + last + offsets
        g_trace_v_at = g_trace_v_ptr + last + offsets
        g_trace_i_at = g_trace_i_ptr + last + offsets
        g_ext_at = g_ext_ptr + last + offsets
        g_y_at = g_y_ptr + last + offsets
        g_rows_at = g_y_ptr + last + rows * n
        gv = tl.load(g_v_ptr + offsets, mask=mask)
        gi = gv
        if FAMILY == 2:
            gi = tl.load(g_i_ptr + offsets, mask=mask)
        zero = gv * 0.0
        g_x = zero
        g_scale = zero
        g_a = zero
        g_b = zero
        g_r = zero
        g_leak = zero
        g_th = zero
        g_reset = zero
        for k in range(steps):
            first = k == steps - 1  # step 0: the previous state is the initial one
            g_y = tl.load(g_rec_at, mask=mask) + g_x
            tl.store(g_y_at, g_y, mask=mask)
            tl.debug_barrier()
            back = zero
            for j in range(n):
                g = tl.load(g_rows_at + j, mask=row_ok)
                weight = tl.load(w_ptr + j * n + cols, mask=col_ok)
                back = back + g * weight
            if TRACED:
                gv = gv + tl.load(g_trace_v_at, mask=mask)
            z = tl.load(out_at, mask=mask)
            v_new = tl.load(v_pre_at, mask=mask)
            gz = (tl.load(g_out_at, mask=mask) + back) + gv * (reset - v_new)
            distance = tl.abs(v_new - threshold) * alpha + 1.0
            surrogate = gz / (distance * distance)
            g_th = g_th - surrogate
            g_reset = g_reset + gv * z
            gv = gv * (1.0 - z) + surrogate
            x = tl.load(ext_at, mask=mask)
            if first:
                earlier = start
                v_before = v0
                i_before = i0
            else:
                earlier = tl.load(rec_at - stride, mask=mask)
                v_before = v0
                if FAMILY >= 1:
                    _, v_before = _fire(tl.load(v_pre_at - stride, mask=mask), threshold, reset)
                i_before = i0
                if FAMILY == 2:
                    i_before = tl.load(i_at - stride, mask=mask)
            if HAS_PREVIOUS:
                x = x + earlier
            else:
                x = tl.where(first, x, x + earlier)
            pre = scale * x
            g_pre = gv
            if FAMILY == 1:
                g_pre = gv * a
                g_a = g_a + gv * ((leak - v_before) + pre)
                g_leak = g_leak + gv * a
                gv = gv * (1.0 - a)
            if FAMILY == 2:
                i_new = tl.load(i_at, mask=mask)
                if TRACED:
                    gi = gi + tl.load(g_trace_i_at, mask=mask)
                g_b = g_b + gv * ((leak - v_before) + i_new * r)
                g_r = g_r + gv * i_new * b
                g_leak = g_leak + gv * b
                gi = gi + gv * r * b
                gv = gv * (1.0 - b)
                g_pre = gi * a
                g_a = g_a + gi * (pre - i_before)
                gi = gi * (1.0 - a)
            g_scale = g_scale + g_pre * x
            g_x = g_pre * scale
            tl.store(g_ext_at, g_x, mask=mask)
            ext_at -= stride
            out_at -= stride
            rec_at -= stride
            i_at -= stride
            v_pre_at -= stride
            g_out_at -= stride
            g_rec_at -= stride
            g_trace_v_at -= stride
            g_trace_i_at -= stride
            g_ext_at -= stride
            g_y_at -= stride
            g_rows_at -= stride
        if HAS_PREVIOUS:
            tl.store(g_start_ptr + offsets, g_x, mask=mask)
        tl.store(g_v0_ptr + offsets, gv, mask=mask)
        if FAMILY == 2:
            tl.store(g_i0_ptr + offsets, gi, mask=mask)
        tl.store(g_scale_ptr + offsets, g_scale, mask=mask)
        tl.store(g_a_ptr + offsets, g_a, mask=mask)
        tl.store(g_b_ptr + offsets, g_b, mask=mask)
        tl.store(g_r_ptr + offsets, g_r, mask=mask)
        tl.store(g_leak_ptr + offsets, g_leak, mask=mask)
        tl.store(g_th_ptr + offsets, g_th, mask=mask)
        tl.store(g_reset_ptr + offsets, g_reset, mask=mask)

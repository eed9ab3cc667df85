r"""Small recurrent loops as one Triton kernel per chunk (the Triton back-end).

A loop ``neuron ⇄ linear`` (a spiking population of ``n`` neurons, IF, LIF or CubaLIF,
whose spikes feed a Linear or Affine layer ``n → n`` whose output comes back through
the delayed edge, as ``input → fc → lif ⇄ w_rec`` in the Braille SRNN) runs as one
launch per chunk. A program holds a block of batch rows: their state in registers,
and per step

.. math::

    x_t = e_t + y_{t-1}, \quad \text{the neuron's update and reset on } x_t, \quad
    y_t = W z_t + b,

where :math:`e_t` is the sum of the population's other inputs (computed by torch over
the chunk, outside the loop), :math:`y_{t-1}` the layer's output at the previous step
(none at the very first step), :math:`z_t` the spikes. Spikes, the layer's outputs and
recorded state variables are written out; nothing is allocated per step.

Exact: the neuron's float operations are those of :mod:`.triton` (no fused
multiply-adds under the ``"exact"`` policy), and the product :math:`W z_t` is summed
over the inputs in index order with the bias added last. As spikes are 0 or 1, every
term :math:`z_k W_{jk}` is exact, so only that order matters; whether the device's own
matrix product (MKL, oneDNN, cuBLAS) sums this layer in that order is checked once per
device, dtype, batch size and shape, by a probe: the layer applied to random spike
patterns, against the sum in that order. Where it differs (on the CPU here: a batch of
one, float64, layers wider than about 128), the loop is stepped as the eager back-end
steps it, with the same results. Under the ``"fast"`` policy the probe is skipped.

BPTT: with gradients, the same kernel also keeps each step's membrane before the reset
(and the current, for CubaLIF), and a reverse-time kernel (:mod:`.triton_loop_grad`)
gives the gradients eager autograd defines, to the input, the layer's weight and bias,
the layer's previous output, the initial state and every trainable neuron parameter.

Not here: loops wider than :data:`WIDEST` neurons, or of other shapes (several neurons,
nested graphs, delays inside the loop).
"""

from __future__ import annotations

from typing import Any

import torch

from ..neurons import modules as M
from . import loops, selfcheck
from . import precision as _precision
from .families import kernel_buffers, kernel_results
from .loops import PROBES, WIDEST, operands, sums_in_order
from .schedule import Level, Recorded, Request
from .triton import FAMILIES, CompilationError, OutOfResources, give_up, triton
from .triton import _failed as failed

__all__ = ["PROBES", "WIDEST", "operands", "run_loop", "sums_in_order"]


_TILE = 1024  # batch rows x neurons per program (a power of two)


def run_loop(
    level: Level,
    members: list[str],
    values: dict[str, Any],
    nodes: dict[str, Any],
    delayed: dict[str, Any],
    request: Request,
    recorded: Recorded,
) -> bool:
    """Run the loop ``members`` over the chunk in one kernel (:func:`.loops.run_loop`
    with this back-end's kernels), filling ``values``, ``nodes``, ``delayed`` and
    ``recorded`` as stepping would; ``False`` (nothing done) where it is not a loop
    this kernel runs exactly, or Triton could not build it."""
    if failed:
        return False
    try:
        return loops.run_loop(
            level, members, values, nodes, delayed, request, recorded, _scan_loop, _checked_grad
        )
    except (CompilationError, OutOfResources) as error:
        give_up(error)
        return False


def _checked_grad(
    neuron: M.Neuron, family: str, layer: torch.nn.Linear, ext: torch.Tensor, *rest: Any
) -> Any:
    """BPTT: this kernel, then its reverse (:mod:`.triton_loop_grad`), where the reverse
    kernel passed its self-check on this device and dtype; the loop stepped through
    autograd otherwise (:class:`.loops.Stepped`)."""
    if not selfcheck.passed("loop backward", ext.device, ext.dtype):
        raise loops.Stepped
    from .triton_loop_grad import scan_loop

    return scan_loop(neuron, family, layer, ext, *rest)


def _scan_loop(
    neuron: M.Neuron,
    family: str,
    layer: torch.nn.Linear,
    ext: torch.Tensor,
    state: Any,
    previous: torch.Tensor | None,
    trace: bool,
) -> tuple[torch.Tensor, ...]:
    """``(spikes, layer outputs, v, i, trace_v, trace_i)`` over the chunk ``ext``,
    without gradients: one :func:`_launch`."""
    batch, n = ext.shape[1:]
    dummy = ext.new_zeros(())
    v0 = state.v.expand(batch, n)
    i0 = state.i.expand(batch, n) if family == "cuba" else dummy
    weight = layer.weight.contiguous()
    start = previous.contiguous() if previous is not None else None
    found = _launch(
        family, ext, operands(neuron, family, batch, n, dummy), weight, layer.bias, v0, i0, start, trace
    )
    return found[:6]


def _launch(
    family: str,
    ext: torch.Tensor,
    operands: list[torch.Tensor],
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    v0: torch.Tensor,
    i0: torch.Tensor,
    previous: torch.Tensor | None,
    trace: bool,
    save: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Launch :func:`_loop_scan` over the chunk ``ext`` ``[T, B, n]``: ``(spikes, layer
    outputs, v, i, trace_v, trace_i, v_pre)``. The state starts from copies of ``v0``
    and ``i0`` (``[B, n]``); ``operands`` are :func:`operands`' (``[B, n]``
    contiguous, or 0-d where the family has none), ``weight`` and ``previous``
    contiguous. ``trace`` writes the state after every step; ``save`` (for BPTT) the
    membrane before every reset in ``v_pre`` and, for CubaLIF, the current after
    every step in ``trace_i``. What is not written is a 0-d placeholder of its own."""
    steps, batch, n = ext.shape
    cuba = family == "cuba"
    current = cuba and (trace or save)
    buffers = kernel_buffers(ext, v0, i0, cuba, trace, save, current)
    v, i, out, trace_v, trace_i, v_pre = buffers
    rec = torch.empty_like(ext)
    start = previous if previous is not None else v
    scale, a, b, r, leak, threshold, reset = (t if t.dim() else v for t in operands)  # 0-d: never read
    block_n = triton.next_power_of_2(n)
    block_b = max(1, min(triton.next_power_of_2(batch), _TILE // block_n))
    _loop_scan[(triton.cdiv(batch, block_b),)](
        ext, scale, i, a, b, r, leak, threshold, reset, v,
        weight, bias if bias is not None else weight, start, out, rec, trace_v, trace_i, v_pre,
        steps, batch, n,
        FAMILY=FAMILIES[family], HAS_PREVIOUS=previous is not None, HAS_BIAS=bias is not None,
        TRACE=trace, SAVE=save, BLOCK_B=block_b, BLOCK_N=block_n,
        enable_fp_fusion=_precision.contract(),
    )  # fmt: skip
    out, *rest = kernel_results(buffers, cuba, trace, save, current)
    return (out, rec, *rest)


if triton is not None:
    import triton.language as tl

    from .triton import _fire, _load_neurons, _update

    @triton.jit
    def _loop_scan(
        ext_ptr, scale_ptr, i_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr, v_ptr,
        w_ptr, bias_ptr, start_ptr, out_ptr, rec_ptr, trace_v_ptr, trace_i_ptr, v_pre_ptr,
        steps, batch, n,
        FAMILY: tl.constexpr, HAS_PREVIOUS: tl.constexpr, HAS_BIAS: tl.constexpr, TRACE: tl.constexpr,
        SAVE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
    ):  # fmt: skip
        """A block of batch rows through ``steps`` of the loop: the input ``ext`` plus
        the layer's previous output, the family's update and reset, then the layer
        ``rec = W z + bias`` summed over ``k`` in order from the spikes just stored
        (a barrier makes the block's spikes visible to all its threads). TRACE writes
        the state after every step; SAVE the membrane before every reset and, for
        CubaLIF, the current after every step (what the reverse kernel reads)."""
        rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)[:, None]
        cols = tl.arange(0, BLOCK_N)[None, :]
        row_ok = rows < batch
        col_ok = cols < n
        mask = row_ok & col_ok
        offsets = rows * n + cols
        v, i, a, b, r, leak, threshold, reset = _load_neurons(
            v_ptr, i_ptr, a_ptr, b_ptr, r_ptr, leak_ptr, th_ptr, reset_ptr, offsets, mask, FAMILY, True
        )
        scale = tl.load(scale_ptr + offsets, mask=mask)
        rec = tl.load(start_ptr + offsets, mask=mask)  # the layer's previous output (unused without one)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + cols, mask=col_ok)
        ext_at = ext_ptr + offsets  # pointers advance by batch x n a step
        out_at = out_ptr + offsets
        spikes_at = out_ptr + rows * n
        rec_at = rec_ptr + offsets
        trace_v_at = trace_v_ptr + offsets
        trace_i_at = trace_i_ptr + offsets
        v_pre_at = v_pre_ptr + offsets
        stride = batch * n
        for t in range(steps):
            x = tl.load(ext_at, mask=mask)
            if HAS_PREVIOUS:
                x = x + rec
            else:
                x = tl.where(t > 0, x + rec, x)
            v, i = _update(scale * x, v, i, a, b, r, leak, FAMILY)
            if SAVE:
                tl.store(v_pre_at, v, mask=mask)
            z, v = _fire(v, threshold, reset)
            tl.store(out_at, z, mask=mask)
            if TRACE:
                tl.store(trace_v_at, v, mask=mask)
            if TRACE or SAVE:
                if FAMILY == 2:
                    tl.store(trace_i_at, i, mask=mask)
            tl.debug_barrier()
            total = tl.zeros_like(v)
            for k in range(n):
                spike = tl.load(spikes_at + k, mask=row_ok)
                weight = tl.load(w_ptr + cols * n + k, mask=col_ok)
                total = total + spike * weight
            if HAS_BIAS:
                rec = total + bias
            else:
                rec = total
            tl.store(rec_at, rec, mask=mask)
            ext_at += stride
            out_at += stride
            spikes_at += stride
            rec_at += stride
            trace_v_at += stride
            trace_i_at += stride
            v_pre_at += stride
        tl.store(v_ptr + offsets, v, mask=mask)
        if FAMILY == 2:
            tl.store(i_ptr + offsets, i, mask=mask)

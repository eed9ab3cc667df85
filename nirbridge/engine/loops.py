r"""Small recurrent loops ``neuron ⇄ linear`` run by a back-end's kernel (Triton's,
:mod:`.triton_loop`; the CPU's, :mod:`.cpu`): which loops qualify, the operands as the
kernels read them, and the probe that says whether the device's own matrix product
sums the layer in the kernels' order (inputs in index order, the bias last), so that
the kernel equals stepping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..neurons import functional as F
from ..neurons import modules as M
from . import precision as _precision
from .eager import record_traces
from .families import FAMILY_OF, factors
from .schedule import Level, Recorded, Request, node_input

__all__ = [
    "PROBES",
    "WIDEST",
    "Stepped",
    "in_order",
    "operands",
    "probe_cases",
    "reverse_inputs",
    "reverse_outputs",
    "run_loop",
    "sums_in_order",
]

WIDEST = 128
"""The widest loop (neurons) that runs as one kernel; its weights stay in the cache."""

PROBES = 32
"""Calls of the device's matrix product that :func:`sums_in_order` compares."""

LoopScan = Callable[..., tuple[torch.Tensor, ...]]


class Stepped(Exception):
    """Raised by a kernel that declines the chunk (its self-check failed, say): the
    loop is stepped, as where no kernel fits."""


_ORDER: dict[tuple[Any, ...], bool] = {}  # probe results: does the device sum like the kernel?


def run_loop(
    level: Level,
    members: list[str],
    values: dict[str, Any],
    nodes: dict[str, Any],
    delayed: dict[str, Any],
    request: Request,
    recorded: Recorded,
    scan: LoopScan,
    grad_scan: LoopScan | None = None,
    summed: Callable[[torch.nn.Linear, int, torch.Tensor], bool] | None = None,
) -> bool:
    """Run the loop ``members`` over the chunk with a back-end's kernel ``scan`` (and
    ``grad_scan`` where gradients are needed; without one the loop is stepped),
    filling ``values``, ``nodes``, ``delayed`` and ``recorded`` as stepping would;
    ``False`` (nothing done) where it is not a loop these kernels run exactly.

    A kernel takes ``(neuron, family, layer, ext, state, previous, trace)`` and gives
    ``(spikes, layer outputs, v, i, trace_v, trace_i)`` over the chunk. ``summed``
    says whether the kernel sums the layer as the device's own product does for this
    batch size (default :func:`sums_in_order`; not asked under the ``"fast"``
    precision policy)."""
    found = _shape_of_loop(level, members)
    if found is None:
        return False
    name, layer_name = found
    neuron, layer = level.modules[name], level.modules[layer_name]
    family = FAMILY_OF[type(neuron)]
    direct = [values[s] for s, late in level.incoming[name] if not late]
    ext = node_input(direct).contiguous()
    previous, state = delayed.get(layer_name), nodes.get(name)
    tensors = [ext, layer.weight, layer.bias, previous, *(getattr(neuron, p) for p in neuron.params)]
    tensors += list(state) if state is not None else []
    if ext.dim() != 3 or any(t.dtype != ext.dtype for t in tensors if isinstance(t, torch.Tensor)):
        return False
    batch, n = ext.shape[1:]
    square = layer.in_features == n == layer.out_features
    if not (n <= WIDEST and square) or neuron._shape(ext[0]) != (batch, n):
        return False
    if previous is not None and tuple(previous.shape) != (batch, n):
        return False
    if not _precision.contract() and not (summed or sums_in_order)(layer, batch, ext):
        return False
    if state is None:
        state = neuron.initial_state(ext[0])
    wanted = request.wanted(name)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        if grad_scan is None:
            return False  # BPTT: stepped
        scan = grad_scan
    try:
        out, rec, v, i, trace_v, trace_i = scan(
            neuron, family, layer, ext, state, previous, wanted is not False
        )
    except Stepped:
        return False
    cuba = family == "cuba"
    new_state = F.CubaLIState(i, v) if cuba else F.IState(v)
    values[name], values[layer_name] = out, rec
    nodes[name], delayed[layer_name] = new_state, rec[-1].clone()
    for member in (name, layer_name):
        if member in request.outputs:
            recorded[(level.prefix + member, None)] = values[member]
    if wanted is not False:
        traces = {"i": trace_i, "v": trace_v} if cuba else {"v": trace_v}
        record_traces(level, name, neuron, new_state, traces, request, recorded)
    return True


def _shape_of_loop(level: Level, members: list[str]) -> tuple[str, str] | None:
    """``(neuron, layer)`` where ``members`` is a loop this kernel runs: a spiking
    population fed by nodes outside the loop and, through one delayed edge, by a
    Linear/Affine layer that reads only the population."""
    if len(members) != 2 or any(m in level.children for m in members):
        return None
    name, layer_name = members
    neuron, layer = level.modules[name], level.modules[layer_name]
    if not isinstance(neuron, (M.IF, M.LIF, M.CubaLIF)) or type(layer) is not torch.nn.Linear:
        return None
    incoming = level.incoming[name]
    direct = [s for s, late in incoming if not late]
    if [s for s, late in incoming if late] != [layer_name] or not direct or set(direct) & set(members):
        return None
    if level.incoming[layer_name] != [(name, False)]:
        return None
    return name, layer_name


def sums_in_order(layer: torch.nn.Linear, batch: int, like: torch.Tensor) -> bool:
    """Whether the device's matrix product sums ``layer`` over ``batch`` rows of spikes
    on ``like``'s device and dtype as the loop kernel does (inputs in index order, bias
    last). Probed once per device, dtype, batch size, shape and bias with
    :data:`PROBES` calls of the same torch function on random weights (full-precision
    mantissas over a wide range of magnitudes, so that any other order shows in the
    rounding) and spike patterns of every density, against the sum in that order."""
    if not layer.weight.is_contiguous():
        return False
    key = (like.device, like.dtype, batch, tuple(layer.weight.shape), layer.bias is not None)
    if key not in _ORDER:
        z, w, b, expected = probe_cases(layer, batch, like)
        with torch.no_grad():
            _ORDER[key] = torch.equal(expected, in_order(z, w, b))
    return _ORDER[key]


def probe_cases(
    layer: torch.nn.Linear, batch: int, like: torch.Tensor, spikes: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(z, w, b, expected)``: :data:`PROBES` patterns ``z`` ``[PROBES, batch, in]`` of
    spikes of every density (``spikes=False``: random values spread over 13 octaves,
    every other one with a density's zeros), random weights ``w`` and bias ``b`` of
    ``layer``'s shape
    (full-precision mantissas over a wide range of magnitudes, so that any other order
    of summation shows in the rounding), on ``like``'s device and dtype, and
    ``expected``: the device's own ``torch.nn.functional.linear`` of each pattern, one
    call each, as stepping calls it."""
    generator = torch.Generator().manual_seed(0)
    options = {"dtype": like.dtype, "generator": generator}
    rows, columns = layer.weight.shape
    scales = torch.exp2(torch.randint(-6, 7, (rows, columns), generator=generator)).to(like.dtype)
    w = (torch.randn(rows, columns, **options) * scales).to(like.device)
    b = torch.randn(rows, **options).to(like.device) if layer.bias is not None else None
    density = torch.linspace(0.05, 0.95, PROBES, dtype=torch.float64).view(PROBES, 1, 1)
    z = (torch.rand(PROBES, batch, columns, generator=generator, dtype=torch.float64) < density).to(like)
    if not spikes:
        octaves = torch.randint(-6, 7, z.shape, generator=generator).to(like.dtype)
        values = torch.randn(z.shape, **options) * torch.exp2(octaves)
        z = torch.where(torch.arange(PROBES).view(PROBES, 1, 1) % 2 == 0, values, values * z).to(like.device)
    with torch.no_grad():
        expected = torch.stack([torch.nn.functional.linear(pattern, w, b) for pattern in z])
    return z, w, b, expected


def in_order(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``z @ weight.T + bias`` (``z`` ``[..., in]``) summed as the kernel sums it: over
    the inputs in index order from zero, the bias last (separate torch operations: no
    fused multiply-adds)."""
    total = z.new_zeros(*z.shape[:-1], weight.shape[0])
    for k in range(weight.shape[1]):
        total = total + z[..., k : k + 1] * weight[:, k]
    return total + bias if bias is not None else total


def operands(neuron: M.Neuron, family: str, batch: int, n: int, dummy: torch.Tensor) -> list[torch.Tensor]:
    """``[scale, a, b, r, leak, threshold, reset]`` of ``neuron`` as the kernels read
    them (:func:`.families.factors`, then the threshold and the reset), each expanded to
    a contiguous ``[batch, n]``; ``dummy`` where the family has no such operand."""
    return [
        t if t is dummy else t.expand(batch, n).contiguous()
        for t in (*factors(neuron, family, dummy), neuron.v_threshold, neuron.v_reset)
    ]


def reverse_inputs(
    grads: tuple[torch.Tensor | None, ...],
    ext: torch.Tensor,
    v0: torch.Tensor,
    cuba: bool,
    untraced: torch.Tensor,
) -> tuple[bool, list[torch.Tensor], list[torch.Tensor]]:
    """What a loop's reverse-time kernel (Triton's, the CPU's) reads and writes, from the
    gradients autograd gives its autograd function (``spikes, layer outputs, v, i,
    trace_v, trace_i, v_pre``; ``None`` or 0-d where the loss does not reach one):
    ``(traced, [g_out, g_rec, g_v, g_i, g_trace_v, g_trace_i], [g_ext, g_y, g_start,
    g_v0, g_i0, g_scale, g_a, g_b, g_r, g_leak, g_th, g_reset])``. Missing gradients are
    zeros; the traces' are ``untraced`` (never read) unless a loss reaches a trace
    (``traced``)."""
    g_out, g_rec, g_v, g_i, g_trace_v, g_trace_i, _ = grads  # v_pre has none

    def given(g: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
        return g.contiguous() if g is not None and g.dim() else torch.zeros_like(like)

    traced = any(g is not None and g.dim() for g in (g_trace_v, g_trace_i))
    g_trace_v = given(g_trace_v, ext) if traced else untraced
    g_trace_i = given(g_trace_i, ext) if traced and cuba else g_trace_v
    g_v = given(g_v, v0)
    read = [given(g_out, ext), given(g_rec, ext), g_v, given(g_i, v0) if cuba else g_v, g_trace_v, g_trace_i]
    written = [torch.empty_like(ext), torch.empty_like(ext), *(torch.empty_like(v0) for _ in range(10))]
    return traced, read, written


def reverse_outputs(
    ctx: Any, written: list[torch.Tensor], out: torch.Tensor, cuba: bool, shared: bool, trailing: int
) -> tuple[torch.Tensor | None, ...]:
    r"""``backward``'s result from what the reverse kernel ``written`` (as
    :func:`reverse_inputs` made it): the layer's gradients summed over the steps and
    rows by torch, :math:`\bar W = \sum_{t,b} \bar y_t z_t^\top` (one matrix
    product, ``out`` the spikes) and :math:`\bar b = \sum \bar y_t`; the operands'
    per-row gradients summed over the rows where the operands were ``shared`` by them
    (``[n]``), as they are; ``None`` for the ``trailing`` arguments that are not
    tensors."""
    g_ext, g_y, g_start, g_v0, g_i0, *g_operands = written
    g_weight = g_bias = None
    if ctx.needs_input_grad[1]:
        g_weight = g_y.reshape(-1, g_y.shape[-1]).T @ out.reshape(-1, out.shape[-1])
    if ctx.has_bias and ctx.needs_input_grad[2]:
        g_bias = g_y.sum((0, 1))
    found = [None if scalar else (g.sum(0) if shared else g) for scalar, g in zip(ctx.scalars, g_operands)]
    return (
        g_ext,
        g_weight,
        g_bias,
        g_start if ctx.has_previous else None,
        g_v0,
        g_i0 if cuba else None,
        *found,
        *([None] * trailing),
    )

r"""The CPU back-end (``run(backend="cpu")``, and ``"auto"`` on the CPU): neuron scans,
small recurrent loops and their gradients as compiled loops (numba,
:mod:`.cpu_kernels`).

The schedule is the eager back-end's (:mod:`.eager`): stateless nodes over all
``Tc·B`` rows of a chunk, recurrent loops stepped together. Each of nirbridge's neuron
populations outside every cycle (I, IF, LI, LIF, CubaLI, CubaLIF) runs as one call of
a compiled loop over the chunk's steps and its neurons, instead of several torch
operations per step:

* I, IF: :math:`v \leftarrow v + p_t`;
* LI, LIF: :math:`v \leftarrow v + a\,((v_{leak} - v) + p_t)`;
* CubaLI, CubaLIF: :math:`i \leftarrow i + (p_t - i)\,a`,
  :math:`v \leftarrow v + ((v_{leak} - v) + r\,i)\,b`;
* spiking ones: :math:`z = [v > v_{th}]`, :math:`v \leftarrow (1 - z)\,v + z\,v_{reset}`;

with :math:`p_t` the input term (``dt·r·x``, ``r·x`` or ``w_in·x``) and the decay
factors :math:`a = dt/\tau` (:math:`dt/\tau_{syn}`) and :math:`b = dt/\tau_{mem}`
computed by torch as the eager kernels compute them (:func:`.families.factors`).

A small loop ``neuron ⇄ linear`` (:mod:`.loops`: IF, LIF or CubaLIF and an ``n → n``
layer fed back through a delayed edge, as in the Braille and SHD networks) runs as one
compiled loop per chunk that does each step's update and the layer's product inside,
summed as the CPU's own ``linear`` sums it for that shape: in index order, or through
torch's own BLAS routine (:func:`summation` probes which; a batch of one is a
matrix-vector product that BLAS sums in its own order). Where neither equals it, the
loop is stepped. A Linear layer that must be stepped to be exact (a batch of one, whose
matrix-vector product sums otherwise than one product over all of a chunk's rows:
:mod:`.rows`) runs as one compiled loop of the same BLAS call per step
(:func:`layer_steps`).

Exact: the kernels do the float operations of :mod:`nirbridge.neurons.functional` in
the same order, in the dtype of the module (float32 or float64), compiled without
fast-math, so no multiply-add is contracted into one rounding: outputs, records and
states equal stepping bit for bit.

BPTT: with gradients, the forward kernels also keep each step's membrane before the
reset, and reverse-time kernels give the gradients eager autograd defines (as the
Triton back-end's do, :mod:`.triton`, :mod:`.triton_loop_grad`), to the input, every
neuron parameter, the loop's weight and bias and the initial state; equal to eager
autograd's within rounding (1e-5 relative in float32, 1e-9 in float64).

Other dtypes, and populations whose parameters have another dtype than their input,
run as the eager back-end runs them.

Compiling: each kernel is compiled on first use (0.5-1 s each; a first run compiles
three or four) and cached on disk by numba (``__pycache__`` beside :mod:`.cpu_kernels`,
or where that is not writable numba's user cache; ``NUMBA_CACHE_DIR`` moves it), so
later processes load it in milliseconds; a damaged or unwritable cache only costs a
rebuild and a :class:`~nirbridge.CompileWarning` (:mod:`.jit`). Without numba this back-end raises
:class:`~nirbridge.BackendUnavailableError` saying so, and ``"auto"`` runs eagerly;
where numba cannot build a kernel, the run goes on eagerly from then on and a
:class:`~nirbridge.CompileWarning` says so once (:func:`give_up`).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import torch

from ..errors import BackendUnavailableError, CompileWarning
from ..neurons import functional as F
from ..neurons import modules as M
from . import cpu_kernels as K
from . import loops
from . import precision as _precision
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

__all__ = ["cpu_stepper", "layer_steps", "run_loop", "scan", "summation", "unavailable"]

_DTYPES = (torch.float32, torch.float64)


_failed: list[Exception] = []  # a kernel numba could not build: eager from then on
_BUILD_ERRORS: tuple[type[Exception], ...] = (K.numba.core.errors.NumbaError,) if K.numba is not None else ()


def give_up(error: Exception) -> None:
    """Remember that numba could not build a kernel here (everything runs eagerly from
    then on) and say so once, as a :class:`~nirbridge.CompileWarning`."""
    _failed.append(error)
    text = str(error).strip()
    warnings.warn(
        f"run(backend='cpu'): numba could not build its kernel on this machine, so neurons and "
        f"loops run eagerly from now on ({type(error).__name__}: {text.splitlines()[0] if text else ''}); "
        "please report it with `nirbridge selftest --json`",
        CompileWarning,
        stacklevel=7,
    )


def unavailable(device: torch.device) -> str | None:
    """Why the back-end cannot run on ``device`` (``None``: it can)."""
    if K.SETUP_ERROR is not None:
        return f"numba is installed but could not be set up here ({K.SETUP_ERROR})"
    if K.numba is None:
        return "numba is not installed (pip install numba, or pip install 'nirbridge[cpu]')"
    if device.type != "cpu":
        return f"it runs CPU tensors, and the module is on {device.type}"
    return None


def cpu_stepper(module: torch.nn.Module, level: Level | None, request: Request) -> Any:
    """The eager schedule with the neuron scans, and small recurrent loops, as compiled loops."""
    device = next((t.device for t in (*module.parameters(), *module.buffers())), torch.device("cpu"))
    reason = unavailable(device)
    if reason is not None:
        raise BackendUnavailableError(f"run(backend='cpu'): {reason}. Use backend='eager'.")
    return eager_stepper(module, level, request, scan, run_loop, layer_steps)


def _kinds(dtype: torch.dtype) -> tuple[Any, Any]:
    """1 and 0 in ``dtype``, so that no operation of a kernel widens to float64."""
    kind = np.float32 if dtype == torch.float32 else np.float64
    return kind(1), kind(0)


def _arrays(tensors: Any) -> list[np.ndarray]:
    """numpy views of detached tensors (which share their memory)."""
    return [t.detach().numpy() for t in tensors]


def scan(module: M.Neuron, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """``(outputs, state, traces)`` of ``module`` over ``x`` ``[T, B, ...]``: one call of
    the compiled loop (two with gradients: forward, then reverse time), or the eager
    scan where there is no kernel (Delay) or the dtypes differ."""
    family = FAMILY_OF.get(type(module))
    if (
        family is None
        or _failed
        or x.dtype not in _DTYPES
        or any(getattr(module, name).dtype != x.dtype for name in module.params)
    ):
        return scan_neuron(module, x, state, trace)
    steps, shape = x.shape[0], module._shape(x[0])
    if len(shape) != x.dim() - 1:  # parameters with more axes than a step's input: as eager does it
        return scan_neuron(module, x, state, trace)
    if state is None:
        state = module.initial_state(x[0])
    cuba = family == "cuba"
    spiking = isinstance(module, (M.IF, M.LIF, M.CubaLIF))
    try:
        if module.needs_grad(x, state):
            pre, v0, i0, *rest = scan_operands(module, family, x, state)
            operands = (pre.reshape(steps, -1), v0.reshape(-1), i0.reshape(-1) if cuba else i0, *rest)
            out, v, i, trace_v, trace_i, _ = _Scan.apply(*operands, FAMILIES[family], spiking)
        else:
            with torch.no_grad():
                out, v, i, trace_v, trace_i, _ = _scan_rows(module, family, spiking, x, state, shape, trace)
    except _BUILD_ERRORS as error:
        give_up(error)
        return scan_neuron(module, x, state, trace)
    traces: dict[str, torch.Tensor] = {}
    if trace:
        traces["v"] = trace_v.reshape(steps, *shape)
        if cuba:
            traces["i"] = trace_i.reshape(steps, *shape)
    new_state = F.CubaLIState(i.reshape(shape), v.reshape(shape)) if cuba else F.IState(v.reshape(shape))
    return out.reshape(steps, *shape), new_state, traces


_LONG_ROW = 64
"""Neurons a row of a population needs for the scan to read the parameters once per
neuron of a row: shorter rows (the Braille SRNN's 7 outputs) make loops too short to
vectorize, so their parameters are copied for every row and the neurons run as one."""


def _scan_rows(
    module: M.Neuron, family: str, spiking: bool, x: torch.Tensor, state: Any, shape: torch.Size, trace: bool
) -> tuple[torch.Tensor, ...]:
    """The scan without gradients: the input ``x`` as it is, and the scale and parameters
    once per neuron of a row (``[M]``, ``M`` the population's size without the batch),
    not per row, where rows are long (:data:`_LONG_ROW`); the kernel forms the input
    term ``scale · x`` itself (the same multiplication as torch's). Where rows are
    short, or a parameter differs between the rows (none of nirbridge's do), every
    row gets its own copy."""
    dummy = x.new_zeros(())
    threshold, reset = (module.v_threshold, module.v_reset) if spiking else (dummy, dummy)
    operands = (*factors(module, family, dummy), threshold, reset)
    shared = all(t.dim() < len(shape) or t.shape[0] == 1 for t in operands)
    rows = shape[0] if shared and shape[1:].numel() >= _LONG_ROW else 1
    if rows > 1:  # [M]: the population without the batch
        flat = [
            t if t is dummy else (t[0] if t.dim() == len(shape) else t).expand(shape[1:]) for t in operands
        ]
    else:  # [N]
        flat = [t if t is dummy else t.expand(shape) for t in operands]
    flat = [t if t is dummy else t.contiguous().reshape(-1) for t in flat]
    inputs = x.expand(x.shape[0], *shape).reshape(x.shape[0], -1)
    v0 = state.v.expand(shape).reshape(-1)
    i0 = state.i.expand(shape).reshape(-1) if family == "cuba" else dummy
    return _scan(inputs, v0, i0, *flat, FAMILIES[family], spiking, trace, False, rows)


def _flat(operands: tuple[torch.Tensor, ...], stand_in: torch.Tensor) -> list[torch.Tensor]:
    """The operands as the kernels take them: ``[N]`` (a population's shape flattened),
    a 0-d placeholder (an operand the family does not read) replaced by ``stand_in``."""
    return [t.reshape(-1) if t.dim() else stand_in for t in operands]


def _scan(x, v0, i0, scale, a, b, r, leak, threshold, reset, family, spiking, trace, save, rows) -> tuple:  # type: ignore[no-untyped-def]
    """One call of the forward kernel over ``x`` ``[T, N]`` from copies of ``v0``, ``i0``
    ``[N]``, with ``scale`` and the parameters ``[N / rows]`` (the same for each of the
    ``rows``; 0-d where a family has none): ``(out, v, i, trace_v, trace_i, v_pre)``;
    what a family does not have (``i`` without a current, traces not asked for) is a
    0-d placeholder."""
    x = x.contiguous()
    cuba = family == 2
    buffers = kernel_buffers(x, v0, i0, cuba, trace, save, current=cuba and trace)
    v, i = buffers[:2]
    one, zero = _kinds(x.dtype)
    K.kernel("scan")(
        *_arrays((x, v, i, *_flat((scale, a, b, r, leak, threshold, reset), scale))),
        *_arrays(buffers[2:]), rows, family, spiking, trace, save, one, zero,
    )  # fmt: skip
    return kernel_results(buffers, cuba, trace, save, current=cuba and trace)


class _Scan(torch.autograd.Function):
    """``(out, v, i, trace_v, trace_i, v_pre)`` of a scan (:func:`_scan`), differentiable
    with respect to the input term, the initial state and the operands."""

    @staticmethod
    def forward(ctx: Any, pre, v0, i0, a, b, r, leak, threshold, reset, family, spiking):  # type: ignore[override]
        ones = torch.ones_like(v0)  # the input term is pre itself: 1 · pre = pre, exactly
        results = _scan(pre, v0, i0, ones, a, b, r, leak, threshold, reset, family, spiking, True, True, 1)
        out, _, _, trace_v, trace_i, v_pre = results
        operands = _flat((a, b, r, leak, threshold, reset), v0)
        cuba = family == 2
        ctx.save_for_backward(
            pre, v0, i0 if cuba else v0, *operands, out, trace_v, trace_i if cuba else trace_v, v_pre
        )
        ctx.family, ctx.spiking = family, spiking
        ctx.alpha = F.SURROGATE_ALPHA  # as eager's spike does: the value at the forward pass
        ctx.shapes = [t.shape if t.dim() else None for t in (a, b, r, leak, threshold, reset)]
        ctx.mark_non_differentiable(v_pre)
        return results

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        pre, v0, i0, a, b, r, leak, threshold, reset, out, trace_v, trace_i, v_pre = ctx.saved_tensors
        cuba = ctx.family == 2
        read, written = reverse_scan_inputs(grads, pre, v0, cuba)
        g_pre, g_v0, g_i0, *g_params = written
        one, _ = _kinds(pre.dtype)
        _reverse(
            "scan backward",
            *_arrays((pre, v0, i0, a, b, r, leak, threshold, reset, out, trace_v, trace_i, v_pre)),
            *_arrays((*read, *written)), one * ctx.alpha, ctx.family, ctx.spiking, one,
        )  # fmt: skip
        grads = [None if shape is None else g.reshape(shape) for shape, g in zip(ctx.shapes, g_params)]
        return (g_pre, g_v0, g_i0 if cuba else None, *grads, None, None)


def _reverse(name: str, *arguments: Any) -> None:
    """Call the reverse-time kernel ``name``. numba builds it on its first call, inside
    ``backward``, where nothing can run eagerly instead: if it cannot, the back-end is
    given up (later runs are eager) and the error says so."""
    try:
        K.kernel(name)(*arguments)
    except _BUILD_ERRORS as error:
        give_up(error)
        raise BackendUnavailableError(
            f"run(backend='cpu'): numba could not build its {name} kernel on this machine "
            f"({type(error).__name__}), so this backward pass cannot run; run the forward pass "
            "again (the run is eager from now on) or pass backend='eager'"
        ) from error


_MODES: dict[tuple[Any, ...], int | None] = {}  # probe results: which summation equals torch's


def summation(layer: torch.nn.Linear, batch: int, like: torch.Tensor, spikes: bool = True) -> int | None:
    """How the loop kernel sums ``layer`` over ``batch`` rows of spikes so that it
    equals the CPU's own ``torch.nn.functional.linear`` bit for bit:
    :data:`.cpu_kernels.IN_ORDER`, :data:`.cpu_kernels.BLAS`, :data:`.cpu_kernels.EITHER`
    (both do), or ``None`` (neither: the loop is stepped). Probed once per dtype,
    batch size, shape and bias, with the compiled product itself on
    :func:`.loops.probe_cases`' weights and spikes, or (``spikes=False``) random values
    over 13 octaves; under the ``"fast"`` precision policy, in index order without a
    probe."""
    weight, bias = layer.weight, layer.bias
    if not weight.is_contiguous():
        return None
    if _precision.contract():
        return K.IN_ORDER
    key = (like.dtype, batch, tuple(weight.shape), bias is not None, spikes, torch.get_num_threads())
    if key not in _MODES:
        z, w, b, expected = loops.probe_cases(layer, batch, like, spikes)
        equal = []
        ways = (K.BLAS, K.IN_ORDER) if spikes else (K.BLAS,)  # in order: 0/1 inputs only
        for mode in ways if K.BLAS_LIBRARY else ways[1:]:
            got = torch.empty_like(expected)
            try:
                for pattern, y in zip(z, got):
                    _product(pattern, w, b, y, mode)
            except _BUILD_ERRORS as error:
                give_up(error)
                return None
            if torch.equal(got, expected):
                equal.append(mode)
        _MODES[key] = K.EITHER if len(equal) == 2 else (equal[0] if equal else None)
    return _MODES[key]


def _product(
    z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, mode: int
) -> None:
    """``y = z weight^T + bias`` (``z`` ``[B, in]`` of 0/1, ``y`` ``[B, out]``) as the loop
    kernel sums it in ``mode`` (:func:`.cpu_kernels._linear_rows`)."""
    K.kernel("linear")(
        z.numpy(), *_weights(weight, bias), y.numpy(), mode, bool(weight.isfinite().all()) and _binary(z),
        *_blas(z, weight, bias), _kinds(z.dtype)[1],
    )  # fmt: skip


def _binary(z: torch.Tensor) -> bool:
    """Whether ``z`` holds only 0 and 1 (spikes: the in-order product may skip the zeros)."""
    return bool(((z == 0) | (z == 1)).all())


def layer_steps(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """A plain ``nn.Linear`` over a chunk ``x`` ``[Tc, B, in]`` that must be stepped to be
    exact: one compiled loop of the BLAS call stepping makes at each step (where
    :func:`summation` finds it equal to the CPU's own product), differentiable;
    ``None`` (stepped by the caller) otherwise."""
    if (
        _failed
        or type(layer) is not torch.nn.Linear
        or layer._forward_hooks
        or layer._forward_pre_hooks
        or x.dim() != 3
        or not x.is_contiguous()  # stepping's call on a strided x[t] is another BLAS call
        or x.dtype not in _DTYPES
        or any(p.dtype != x.dtype for p in layer.parameters())
        or summation(layer, x.shape[1], x, spikes=False) != K.BLAS
    ):
        return None
    try:
        if torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, layer.weight, layer.bias)
        ):
            return _Linear.apply(x, layer.weight, layer.bias)
        with torch.no_grad():
            return _linear_steps(x, layer.weight, layer.bias)
    except _BUILD_ERRORS as error:
        give_up(error)
        return None


def _linear_steps(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x W^T + b`` per step of ``x`` ``[Tc, B, in]``: one kernel call (BLAS per step)."""
    x, weight = x.detach().contiguous(), weight.detach().contiguous()
    bias = bias.detach() if bias is not None else None
    y = x.new_empty(*x.shape[:2], weight.shape[0])
    K.kernel("linear steps")(
        x.numpy(), *_weights(weight, bias), y.numpy(), K.BLAS, False, *_blas(x[0], weight, bias),
        _kinds(x.dtype)[1],
    )  # fmt: skip
    return y


class _Linear(torch.autograd.Function):
    """:func:`_linear_steps`, differentiable: the input's gradient ``g W``, the weight's
    ``sum_t g_t^T x_t`` and the bias's ``sum g`` (torch's products)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _linear_steps(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        g_x = g @ weight if ctx.needs_input_grad[0] else None
        g_weight = (
            g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[1] else None
        )
        g_bias = g.sum((0, 1)) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return g_x, g_weight, g_bias


def _weights(weight: torch.Tensor, bias: torch.Tensor | None) -> list[Any]:
    """``[weight, weight transposed, bias, has_bias]`` as the kernels take them (a
    stand-in that is never read for a missing bias)."""
    stand_in = bias if bias is not None else weight[0]
    return [*_arrays((weight, weight.t().contiguous(), stand_in)), bias is not None]


def _blas(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[np.ndarray, ...]:
    """``(chars, dims, scalars)``: the BLAS ``gemm`` arguments of ``z weight^T + bias``
    as torch's ``addmm`` passes them (``'t', 'n'``; ``out, B, in``; ``1, beta``)."""
    kind = np.float32 if z.dtype == torch.float32 else np.float64
    dims = np.array([weight.shape[0], z.shape[-2], weight.shape[1]], dtype=np.int32)
    return np.frombuffer(b"tn", dtype=np.uint8).copy(), dims, np.array([1, int(bias is not None)], dtype=kind)


def _loop_forward(
    family: str,
    ext: torch.Tensor,
    operands: list[torch.Tensor],
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    v0: torch.Tensor,
    i0: torch.Tensor,
    previous: torch.Tensor | None,
    trace: bool,
    save: bool,
    mode: int,
) -> tuple[torch.Tensor, ...]:
    """One call of the loop kernel over the chunk ``ext`` ``[T, B, n]``: ``(spikes, layer
    outputs, v, i, trace_v, trace_i, v_pre)``. The state starts from copies of ``v0``
    and ``i0`` (``[B, n]``); ``operands`` are ``scale, a, b, r, leak, threshold, reset``
    (:func:`.families.factors`), ``[n]`` each, or 0-d where the family has none; the
    kernel reads them as ``[B · n]``.
    ``trace`` writes the state after every step; ``save`` (for BPTT) the membrane
    before every reset in ``v_pre`` and, for CubaLIF, the current after every step in
    ``trace_i``. What is not written is a 0-d
    placeholder."""
    cuba = family == "cuba"
    ext = ext.detach().contiguous()
    batch, n = ext.shape[1:]
    stand_in = ext.new_zeros(batch * n)  # an operand the family does not read
    current = cuba and (trace or save)
    buffers = kernel_buffers(ext, v0, i0, cuba, trace, save, current)
    v, i, out, trace_v, trace_i, v_pre = buffers
    rec = torch.empty_like(ext)
    weight = weight.detach().contiguous()
    start = previous.detach().contiguous() if previous is not None else v
    one, zero = _kinds(ext.dtype)
    sparse = bool(weight.isfinite().all())
    K.kernel("loop")(
        *_arrays((ext, v, i, *(t.expand(batch, n).reshape(-1) if t.dim() else stand_in for t in operands))),
        *_weights(weight, bias), start.numpy(), previous is not None,
        *_arrays((out, rec, trace_v, trace_i, v_pre)),
        FAMILIES[family], trace, save, mode, sparse, *_blas(ext[0], weight, bias), one, zero,
    )  # fmt: skip
    out, *rest = kernel_results(buffers, cuba, trace, save, current)
    return (out, rec, *rest)


def _loop_scan(
    neuron: M.Neuron,
    family: str,
    layer: torch.nn.Linear,
    ext: torch.Tensor,
    state: Any,
    previous: torch.Tensor | None,
    trace: bool,
) -> tuple[torch.Tensor, ...]:
    """``(spikes, layer outputs, v, i, trace_v, trace_i)`` of the loop over the chunk
    ``ext`` ``[T, B, n]`` from ``state`` and the layer's ``previous`` output: one call
    of the kernel, or with gradients :class:`_Loop` (forward, then reverse time). Other
    dtypes than float32 and float64, and sums that equal neither kernel mode, are
    stepped (:class:`.loops.Stepped`)."""
    batch, n = ext.shape[1:]
    mode = summation(layer, batch, ext) if ext.dtype in _DTYPES and not _failed else None
    if mode is None:
        raise loops.Stepped
    cuba = family == "cuba"
    dummy = ext.new_zeros(())
    v0 = state.v.expand(batch, n)
    i0 = state.i.expand(batch, n) if cuba else dummy
    try:  # the neurons' operands, shared by the rows: [n] each
        operands = [
            t if t is dummy else t.expand(n).contiguous()
            for t in (*factors(neuron, family, dummy), neuron.v_threshold, neuron.v_reset)
        ]
    except RuntimeError:  # an operand with a batch dimension (none of nirbridge's)
        raise loops.Stepped from None
    arguments = (ext, layer.weight, layer.bias, previous, v0, i0, *operands)
    try:
        if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in arguments
        ):
            return _Loop.apply(*arguments, family, trace, mode)[:6]
        with torch.no_grad():
            weight, bias = layer.weight, layer.bias
            return _loop_forward(family, ext, operands, weight, bias, v0, i0, previous, trace, False, mode)[
                :6
            ]
    except _BUILD_ERRORS as error:
        give_up(error)
        raise loops.Stepped from None


class _Loop(torch.autograd.Function):
    """``(spikes, layer outputs, v, i, trace_v, trace_i, v_pre)`` of the loop
    (:func:`_loop_forward` with ``save``), differentiable with respect to the input
    term, the weight and bias, the previous output, the initial state and the operands
    ``scale, a, b, r, leak, threshold, reset`` (the equations:
    :mod:`.triton_loop_grad`)."""

    @staticmethod
    def forward(
        ctx: Any,
        ext,
        weight,
        bias,
        previous,
        v0,
        i0,
        scale,
        a,
        b,
        r,
        leak,
        threshold,
        reset,
        family,
        trace,
        mode,
    ):  # type: ignore[override]
        operands = [scale, a, b, r, leak, threshold, reset]
        results = _loop_forward(family, ext, operands, weight, bias, v0, i0, previous, trace, True, mode)
        out, rec, _, _, _, trace_i, v_pre = results
        stand_in = v0.contiguous()

        def kept(t: torch.Tensor | None) -> torch.Tensor:
            return stand_in if t is None or t.dim() == 0 else t.contiguous()

        batch, n = ext.shape[1:]
        ctx.save_for_backward(
            ext.contiguous(), weight.contiguous(), kept(previous), stand_in, kept(i0),
            *(kept(t.expand(batch, n)) for t in operands), out, rec, trace_i if trace_i.dim() else out, v_pre,
        )  # fmt: skip
        ctx.family, ctx.has_bias, ctx.has_previous = FAMILIES[family], bias is not None, previous is not None
        ctx.alpha = F.SURROGATE_ALPHA
        ctx.scalars = [t.dim() == 0 for t in operands]
        ctx.mark_non_differentiable(v_pre)
        ctx.set_materialize_grads(False)
        return results

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        ext, weight, start, v0, i0, scale, a, b, r, leak, threshold, reset, out, rec, i_trace, v_pre = (
            ctx.saved_tensors
        )
        cuba = ctx.family == FAMILIES["cuba"]
        traced, read, written = loops.reverse_inputs(grads, ext, v0, cuba, untraced=ext)
        one, _ = _kinds(ext.dtype)
        _reverse(
            "loop backward",
            *_arrays((ext, scale, v0, i0, a, b, r, leak, threshold, reset, weight, start, out, rec)),
            *_arrays((i_trace, v_pre, *read, *written)),
            one * ctx.alpha, ctx.family, ctx.has_previous, traced, one,
        )  # fmt: skip
        return loops.reverse_outputs(ctx, written, out, cuba, shared=True, trailing=3)


run_loop = functools.partial(
    loops.run_loop,
    scan=_loop_scan,
    grad_scan=_loop_scan,
    summed=lambda layer, batch, like: (
        like.dtype in _DTYPES and not _failed and summation(layer, batch, like) is not None
    ),
)
"""A small ``neuron ⇄ linear`` loop over the chunk in one compiled loop (with
gradients, and its reverse-time kernel), where :func:`summation` finds the kernel's
sum equal to the CPU's own product; ``False`` (stepped) otherwise."""

r"""The CPU back-end (``run(backend="cpu")``): neuron scans and small recurrent loops as
compiled loops (numba).

The schedule is the eager back-end's (:mod:`.eager`): stateless nodes over all
``Tc·B`` rows of a chunk, recurrent loops stepped together. Each of nirbridge's neuron
populations outside every cycle (I, IF, LI, LIF, CubaLI, CubaLIF) runs as one call of
a numba-compiled loop over the chunk's steps and its neurons, instead of several torch
operations per step:

* I, IF: :math:`v \leftarrow v + p_t`;
* LI, LIF: :math:`v \leftarrow v + a\,((v_{leak} - v) + p_t)`;
* CubaLI, CubaLIF: :math:`i \leftarrow i + (p_t - i)\,a`,
  :math:`v \leftarrow v + ((v_{leak} - v) + r\,i)\,b`;
* spiking ones: :math:`z = [v > v_{th}]`, :math:`v \leftarrow (1 - z)\,v + z\,v_{reset}`;

with :math:`p_t` the input term (``dt·r·x``, ``r·x`` or ``w_in·x``) and the decay
factors :math:`a = dt/\tau` (:math:`dt/\tau_{syn}`) and :math:`b = dt/\tau_{mem}`
computed by torch as the eager kernels compute them (:func:`.families.factors`).

Exact: the loop does the float operations of :mod:`nirbridge.neurons.functional` in
the same order, in the dtype of the module (float32 or float64), compiled without
fast-math, so no multiply-add is contracted into one rounding: outputs, records and
states equal stepping bit for bit.

A small loop ``neuron ⇄ linear`` (:mod:`.loops`: IF, LIF or CubaLIF and an ``n → n``
layer fed back through a delayed edge) runs as one compiled loop per chunk that does
each step's update and the matrix-vector product inside, summed over the inputs in
index order with the bias last, where the probe :func:`.loops.sums_in_order` shows
that the CPU's own product sums the layer so; it is stepped otherwise.

Gradients (BPTT), other dtypes and populations whose parameters have another dtype than
their input run as the eager back-end runs them.

The kernel is compiled on first use (about 0.5 s) and cached on disk by numba
(``__pycache__`` beside this file, or ``NUMBA_CACHE_DIR``), so later processes load it
in about 0.2 s. numba is an optional dependency (``pip install numba``, or
``nirbridge[cpu]``); without it, this back-end raises
:class:`~nirbridge.BackendUnavailableError` saying so.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from ..errors import BackendUnavailableError
from ..neurons import functional as F
from ..neurons import modules as M
from . import loops
from .eager import eager_stepper, scan_neuron
from .families import FAMILIES, FAMILY_OF, scan_operands
from .schedule import Level, Request

__all__ = ["cpu_stepper", "run_loop", "scan", "unavailable"]

try:
    import numba
except ImportError:  # the back-end says so when asked for
    numba = None

_DTYPES = (torch.float32, torch.float64)


def unavailable(device: torch.device) -> str | None:
    """Why the back-end cannot run on ``device`` (``None``: it can)."""
    if numba is None:
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
    return eager_stepper(module, level, request, scan, run_loop)


def scan(module: M.Neuron, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """``(outputs, state, traces)`` of ``module`` over ``x`` ``[T, B, ...]``: one call of
    the compiled loop, or the eager scan where there is no kernel (Delay), gradients
    are needed, or the dtypes differ."""
    family = FAMILY_OF.get(type(module))
    if (
        family is None
        or x.dtype not in _DTYPES
        or any(getattr(module, name).dtype != x.dtype for name in module.params)
        or module.needs_grad(x, state if state is not None else ())
    ):
        return scan_neuron(module, x, state, trace)
    return _scan(module, family, x, state, trace)


def _scan(module: M.Neuron, family: str, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """The operands as the Triton back-end forms them (:func:`.families.scan_operands`:
    torch's own operations for the input term and the decay factors), flattened to
    ``[N]`` neurons, then one call."""
    if state is None:
        state = module.initial_state(x[0])
    steps = x.shape[0]
    shape = module._shape(x[0])
    cuba = family == "cuba"
    spiking = isinstance(module, (M.IF, M.LIF, M.CubaLIF))
    pre, v0, i0, *rest = (t.detach() for t in scan_operands(module, family, x, state))
    pre = pre.reshape(steps, -1)
    v = v0.reshape(-1).clone()
    i = i0.reshape(-1).clone() if cuba else v
    parameters = [(v if t.dim() == 0 else t.reshape(-1)).numpy() for t in rest]  # 0-d: never read
    out = torch.empty_like(pre)
    trace_v = torch.empty_like(pre) if trace else out
    trace_i = torch.empty_like(pre) if trace and cuba else trace_v
    one, zero = _one_zero(x.dtype)
    with torch.no_grad():
        _kernel("scan")(
            pre.numpy(), v.numpy(), i.numpy(), *parameters, out.numpy(), trace_v.numpy(), trace_i.numpy(),
            FAMILIES[family], spiking, trace, one, zero,
        )  # fmt: skip
    new_state = F.CubaLIState(i.reshape(shape), v.reshape(shape)) if cuba else F.IState(v.reshape(shape))
    traces: dict[str, torch.Tensor] = {}
    if trace:
        traces["v"] = trace_v.reshape(steps, *shape)
        if cuba:
            traces["i"] = trace_i.reshape(steps, *shape)
    return out.reshape(steps, *shape), new_state, traces


OPTIONS: dict[str, Any] = {
    "cache": True,
    "fastmath": False,
    "nogil": True,
    "boundscheck": False,
    "error_model": "numpy",
}
"""numba's options: cached on disk, and no fast-math (no contraction, no reassociation)."""

_COMPILED: dict[str, Any] = {}


def _kernel(name: str) -> Any:
    """The compiled ``"scan"`` or ``"loop"``, built (or loaded from numba's cache) on
    first use."""
    if name not in _COMPILED:
        _COMPILED[name] = numba.njit(**OPTIONS)(_scan_loop if name == "scan" else _loop_loop)
    return _COMPILED[name]


def _one_zero(dtype: torch.dtype) -> tuple[Any, Any]:
    """1 and 0 in ``dtype``, so that no operation of a kernel widens to float64."""
    kind = np.float32 if dtype == torch.float32 else np.float64
    return kind(1), kind(0)


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
    ``ext`` ``[T, B, n]``: the operands as :func:`.loops.operands` forms them, the
    layer's weight transposed (``[in, out]``, contiguous: the inner sum runs along
    memory), then one call. Other dtypes than float32 and float64 are stepped
    (:class:`.loops.Stepped`): numba takes no others."""
    if ext.dtype not in _DTYPES:
        raise loops.Stepped
    batch, n = ext.shape[1:]
    cuba = family == "cuba"
    dummy = ext.new_zeros(())
    with torch.no_grad():
        operands = loops.operands(neuron, family, batch, n, dummy)
        v = state.v.detach().expand(batch, n).contiguous().clone()
        i = state.i.detach().expand(batch, n).contiguous().clone() if cuba else v
        out, rec = torch.empty_like(ext), torch.empty_like(ext)
        trace_v = torch.empty_like(ext) if trace else out
        trace_i = torch.empty_like(ext) if trace and cuba else trace_v
        weight = layer.weight.detach().t().contiguous()
        bias = layer.bias.detach() if layer.bias is not None else weight[0]
        start = previous.detach().contiguous() if previous is not None else v
        one, zero = _one_zero(ext.dtype)
        _kernel("loop")(
            ext.detach().contiguous().numpy(), v.numpy(), i.numpy(),
            *(v.numpy() if t is dummy else t.numpy() for t in operands),
            weight.numpy(), bias.numpy(), layer.bias is not None, start.numpy(), previous is not None,
            out.numpy(), rec.numpy(), trace_v.numpy(), trace_i.numpy(),
            FAMILIES[family], trace, one, zero,
        )  # fmt: skip
    placeholder = ext.new_zeros(())
    return (
        out,
        rec,
        v,
        i if cuba else placeholder,
        trace_v if trace else placeholder,
        trace_i if trace and cuba else placeholder,
    )


def _scan_loop(
    pre, v, i, a, b, r, leak, threshold, reset, out, trace_v, trace_i, family, spiking, trace, one, zero
):  # type: ignore[no-untyped-def]
    """Over ``T`` steps and ``N`` neurons (``pre``, ``out``, traces ``[T, N]``; state
    and parameters ``[N]``): FAMILY 0 (I, IF) ``v += p``; 1 (LI, LIF)
    ``v += a ((leak - v) + p)``; 2 (CubaLI, CubaLIF) ``i += (p - i) a``,
    ``v += ((leak - v) + i r) b``; spiking: ``z = v > threshold``,
    ``v = (1 - z) v + z reset``. ``one`` and ``zero`` are of the arrays' dtype, so
    that no operation widens to float64."""
    steps, n = pre.shape
    for t in range(steps):
        for j in range(n):
            p = pre[t, j]
            vj = v[j]
            if family == 0:
                vj = vj + p
            elif family == 1:
                vj = vj + a[j] * ((leak[j] - vj) + p)
            else:
                ij = i[j] + (p - i[j]) * a[j]
                i[j] = ij
                vj = vj + ((leak[j] - vj) + ij * r[j]) * b[j]
                if trace:
                    trace_i[t, j] = ij
            if spiking:
                z = one if vj > threshold[j] else zero
                out[t, j] = z
                vj = (one - z) * vj + z * reset[j]
            else:
                out[t, j] = vj
            v[j] = vj
            if trace:
                trace_v[t, j] = vj


run_loop = functools.partial(loops.run_loop, scan=_loop_scan)
"""A small ``neuron ⇄ linear`` loop over the chunk in one compiled loop
(:func:`.loops.run_loop` with :func:`_loop_scan`: where the CPU's matrix product sums
the layer in the kernel's order, without gradients); ``False`` (stepped) otherwise."""


def _loop_loop(
    ext,
    v,
    i,
    scale,
    a,
    b,
    r,
    leak,
    threshold,
    reset,
    wt,
    bias,
    has_bias,
    previous,
    has_previous,
    out,
    rec,
    trace_v,
    trace_i,
    family,
    trace,
    one,
    zero,
):  # type: ignore[no-untyped-def]
    """Over ``T`` steps and ``B`` rows of ``n`` neurons (``ext``, ``out``, ``rec``,
    traces ``[T, B, n]``; state and operands ``[B, n]``; ``wt`` the layer's weight
    ``[in, out]``): ``x = e_t + y_{t-1}`` (``previous`` at the chunk's first step
    where there is one), the family's update on ``scale x`` and the reset as in
    :func:`_scan_loop`, then ``y_t = sum_k z_k wt[k] + bias``, summed over the inputs
    in index order from 0, the bias last."""
    steps, batch, n = ext.shape
    total = np.empty(n, dtype=v.dtype)
    for t in range(steps):
        for row in range(batch):
            for j in range(n):
                x = ext[t, row, j]
                if t > 0:
                    x = x + rec[t - 1, row, j]
                elif has_previous:
                    x = x + previous[row, j]
                p = scale[row, j] * x
                vj = v[row, j]
                if family == 0:
                    vj = vj + p
                elif family == 1:
                    vj = vj + a[row, j] * ((leak[row, j] - vj) + p)
                else:
                    ij = i[row, j] + (p - i[row, j]) * a[row, j]
                    i[row, j] = ij
                    vj = vj + ((leak[row, j] - vj) + ij * r[row, j]) * b[row, j]
                    if trace:
                        trace_i[t, row, j] = ij
                z = one if vj > threshold[row, j] else zero
                out[t, row, j] = z
                vj = (one - z) * vj + z * reset[row, j]
                v[row, j] = vj
                if trace:
                    trace_v[t, row, j] = vj
            for j in range(n):
                total[j] = zero
            for k in range(n):
                zk = out[t, row, k]
                for j in range(n):
                    total[j] = total[j] + zk * wt[k, j]
            for j in range(n):
                rec[t, row, j] = total[j] + bias[j] if has_bias else total[j]

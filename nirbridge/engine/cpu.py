r"""The CPU back-end (``run(backend="cpu")``): neuron scans as compiled loops (numba).

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

Gradients (BPTT), other dtypes and populations whose parameters have another dtype than
their input run as the eager back-end runs them.

The kernel is compiled on first use (about 0.5 s) and cached on disk by numba
(``__pycache__`` beside this file, or ``NUMBA_CACHE_DIR``), so later processes load it
in about 0.2 s. numba is an optional dependency (``pip install numba``, or
``nirbridge[cpu]``); without it, this back-end raises
:class:`~nirbridge.BackendUnavailableError` saying so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import BackendUnavailableError
from ..neurons import functional as F
from ..neurons import modules as M
from .eager import eager_stepper, scan_neuron
from .families import FAMILIES, FAMILY_OF, factors
from .schedule import Level, Request

__all__ = ["cpu_stepper", "scan", "unavailable"]

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
    """The eager schedule with the neuron scans as compiled loops."""
    device = next((t.device for t in (*module.parameters(), *module.buffers())), torch.device("cpu"))
    reason = unavailable(device)
    if reason is not None:
        raise BackendUnavailableError(f"run(backend='cpu'): {reason}. Use backend='eager'.")
    return eager_stepper(module, level, request, scan)


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
    """The operands as the Triton back-end forms them (torch's own operations for the
    input term and the decay factors), flattened to ``[N]`` neurons, then one call."""
    if state is None:
        state = module.initial_state(x[0])
    steps = x.shape[0]
    shape = module._shape(x[0])
    cuba = family == "cuba"
    dummy = x.new_zeros(())
    scale, a, b, r, leak = factors(module, family, dummy)
    spiking = isinstance(module, (M.IF, M.LIF, M.CubaLIF))
    threshold = module.v_threshold if spiking else dummy
    reset = module.v_reset if spiking else dummy
    pre = (scale * x).expand(steps, *shape).reshape(steps, -1).contiguous()
    v = state.v.expand(shape).reshape(-1).clone()
    i = state.i.expand(shape).reshape(-1).clone() if cuba else v

    def flat(t: torch.Tensor) -> np.ndarray:
        return (v if t is dummy else t.expand(shape).reshape(-1).contiguous()).numpy()

    out = torch.empty_like(pre)
    trace_v = torch.empty_like(pre) if trace else out
    trace_i = torch.empty_like(pre) if trace and cuba else trace_v
    one, zero = (np.float32(1), np.float32(0)) if x.dtype == torch.float32 else (np.float64(1), np.float64(0))
    with torch.no_grad():
        _kernel()(
            pre.numpy(), v.numpy(), i.numpy(), flat(a), flat(b), flat(r), flat(leak), flat(threshold),
            flat(reset), out.numpy(), trace_v.numpy(), trace_i.numpy(),
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

_COMPILED: list[Any] = []


def _kernel() -> Any:
    """The compiled scan, built (or loaded from numba's cache) on first use."""
    if not _COMPILED:
        _COMPILED.append(
            numba.njit(cache=True, fastmath=False, nogil=True, boundscheck=False, error_model="numpy")(
                _scan_loop
            )
        )
    return _COMPILED[0]


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

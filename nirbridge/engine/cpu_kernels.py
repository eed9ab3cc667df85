r"""The CPU back-end's kernels (:mod:`.cpu`): plain Python loops that numba compiles
(LLVM, no fast-math: no contraction, no reassociation) and caches on disk.

* :func:`scan`: a neuron population over a chunk's steps;
* :func:`scan_backward`: its gradients, last step first;
* :func:`loop`: a small recurrent loop ``neuron ⇄ linear`` over a chunk, the layer's
  product inside (:func:`linear`);
* :func:`loop_backward`: that loop's gradients, last step first;
* :func:`linear_steps`: a Linear layer over a chunk's steps, one product per step (where
  stepping's batch-of-``B`` product sums otherwise than one over all rows).

Every kernel does the float operations of :mod:`nirbridge.neurons.functional` (and the
Triton kernels) in the same order, in the arrays' dtype: ``one``, ``zero`` and
``alpha`` are passed in that dtype, so that no operation widens to float64.

The layer's product :math:`y = W z + b` of a loop is summed one of two ways
(``mode``), whichever equals the CPU's own ``torch.nn.functional.linear`` for the
loop's shape (:func:`.cpu.summation` probes it):

* ``IN_ORDER``: over the inputs in index order from zero, the bias last. Spikes are
  0 or 1, so a step adds ``W[:, k]`` for every ``k`` that spiked (``1 · w = w`` and,
  with finite weights, adding ``0 · w`` changes nothing: the sum starts at ``+0`` and
  never becomes ``-0``);
* ``BLAS``: torch's own BLAS ``gemm`` (MKL in torch's x86 wheels), called as torch's
  ``addmm`` calls it: the bias copied into the output, then ``Y^T = W Z^T + Y^T``. This
  is how a batch of one (a matrix-vector product, which BLAS sums in its own order)
  runs exactly.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np
import torch

from .jit import njit

try:
    import llvmlite.binding as llvm
    import numba
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload
except ImportError:  # the back-end says so when asked for
    numba = None

__all__ = ["BLAS", "BLAS_LIBRARY", "EITHER", "IN_ORDER", "OPTIONS", "SETUP_ERROR", "kernel"]

IN_ORDER, BLAS, EITHER = 0, 1, 2
"""The summation modes of a loop's layer (see the module's docstring); ``EITHER``
where both equal the CPU's product: in order at a step where fewer than one in eight
inputs spiked (its cost is the spikes'), else BLAS (its cost is the matrix's)."""

OPTIONS: dict[str, Any] = {
    "cache": True,
    "fastmath": False,
    "nogil": True,
    "boundscheck": False,
    "error_model": "numpy",
}
"""numba's options: cached on disk, and no fast-math (no contraction, no reassociation)."""

_SYMBOLS = {"nirbridge_sgemm": "sgemm_", "nirbridge_dgemm": "dgemm_"}
"""The names the kernels call (nirbridge's own, so that no other library's symbols are
replaced in LLVM's process-wide table) and the BLAS routines of torch's they stand for."""


def _torch_blas() -> str | None:
    """The library whose ``sgemm_``/``dgemm_`` torch calls (torch's CPU library, which
    links MKL statically in the x86 wheels), registered with LLVM under
    :data:`_SYMBOLS`' names; ``None`` where it does not export them (the ``BLAS`` mode
    is then never used)."""
    folder = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        try:
            library = ctypes.CDLL(path)
            addresses = [
                ctypes.cast(getattr(library, routine), ctypes.c_void_p).value for routine in _SYMBOLS.values()
            ]
        except (OSError, AttributeError):
            return None
        for symbol, address in zip(_SYMBOLS, addresses):
            llvm.add_symbol(symbol, address)
        return path
    return None


def _never(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
    """Stands in for the BLAS routines where torch's are not found: the kernels link, and
    the ``BLAS`` mode, which would call it, is never chosen."""


BLAS_LIBRARY: str | None = None
"""The library the ``BLAS`` mode calls (``None``: none found, the mode is not used)."""

SETUP_ERROR: str | None = None
"""Why numba, though installed, could not be set up here (the back-end is then unavailable)."""

if numba is not None:
    try:
        BLAS_LIBRARY = _torch_blas()
        if BLAS_LIBRARY is None:
            _stand_in = numba.cfunc(types.void(*[types.voidptr] * 13))(_never)
            for _symbol in _SYMBOLS:
                llvm.add_symbol(_symbol, _stand_in.address)
    except Exception as error:  # noqa: BLE001 - whatever numba or LLVM says: eager, with the reason
        SETUP_ERROR = f"{type(error).__name__}: {error}"
        numba = None

if numba is not None:
    _voidptr = types.voidptr
    _gemm = {
        np.float32: types.ExternalFunction("nirbridge_sgemm", types.void(*[_voidptr] * 13)),
        np.float64: types.ExternalFunction("nirbridge_dgemm", types.void(*[_voidptr] * 13)),
    }

    @intrinsic
    def _address(typingctx, array):  # type: ignore[no-untyped-def]
        """The address of ``array``'s first element, as the BLAS routine takes it."""

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            return builder.bitcast(data, cgutils.voidptr_t)

        return types.voidptr(array), codegen

    def _blas_gemm(chars, dims, scalars, w, z, y):  # type: ignore[no-untyped-def]
        """``gemm(chars[0], chars[1], *dims, scalars[0], w, z, scalars[1], y)`` (Fortran
        BLAS, column-major): see :func:`linear_rows`."""

    @overload(_blas_gemm)
    def _blas_gemm_typed(chars, dims, scalars, w, z, y):  # type: ignore[no-untyped-def]
        routine = _gemm[np.float32 if w.dtype == types.float32 else np.float64]

        def call(chars, dims, scalars, w, z, y):  # type: ignore[no-untyped-def]
            routine(
                _address(chars[0:1]), _address(chars[1:2]),
                _address(dims[0:1]), _address(dims[1:2]), _address(dims[2:3]),
                _address(scalars[0:1]), _address(w), _address(dims[2:3]),
                _address(z), _address(dims[2:3]),
                _address(scalars[1:2]), _address(y), _address(dims[0:1]),
            )  # fmt: skip

        return call


def _linear_rows(z, w, wt, bias, has_bias, y, mode, sparse, chars, dims, scalars, zero):  # type: ignore[no-untyped-def]
    """``y = z W^T + bias`` over the rows of ``z`` ``[B, in]`` (``w`` ``[out, in]``,
    ``wt`` the same transposed, ``[in, out]``; ``y`` ``[B, out]``). IN_ORDER: per row,
    ``y_j = sum_k z_k wt[k, j]`` in index order from zero, the bias last; ``sparse``
    (``z`` is 0/1 and the weights are finite) adds ``wt[k]`` where ``z_k`` is 1 and
    skips the rest (the same bits). BLAS: the bias copied into ``y``, then
    ``gemm('t', 'n', out, B, in, 1, w, in, z, in, beta, y, out)`` with ``beta`` 1 with a
    bias, else 0 (``chars``, ``dims``, ``scalars`` hold those arguments)."""
    batch, inputs = z.shape
    outputs = y.shape[1]
    if mode == 2:  # either: in order where few spiked (the zeros are skipped), else BLAS
        mode = 1
        if sparse:
            count = 0
            for row in range(batch):
                for k in range(inputs):
                    if z[row, k] != zero:
                        count += 1
            if count * 8 < batch * inputs:
                mode = 0
    if mode == 1:
        if has_bias:
            for row in range(batch):
                for j in range(outputs):
                    y[row, j] = bias[j]
        _blas_gemm(chars, dims, scalars, w, z, y)
        return
    for row in range(batch):
        for j in range(outputs):
            y[row, j] = zero
        for k in range(inputs):
            zk = z[row, k]
            if sparse:
                if zk != zero:
                    for j in range(outputs):
                        y[row, j] = y[row, j] + wt[k, j]
            else:
                for j in range(outputs):
                    y[row, j] = y[row, j] + zk * wt[k, j]
        if has_bias:
            for j in range(outputs):
                y[row, j] = y[row, j] + bias[j]


def _linear_steps(x, w, wt, bias, has_bias, y, mode, sparse, chars, dims, scalars, zero):  # type: ignore[no-untyped-def]
    """:func:`_linear_rows` for each step of ``x`` ``[T, B, in]`` into ``y`` ``[T, B, out]``:
    a stateless layer stepped as stepping calls it, one call per step."""
    for t in range(x.shape[0]):
        _linear_rows(x[t], w, wt, bias, has_bias, y[t], mode, sparse, chars, dims, scalars, zero)


def _scan(
    x, v, i, scale, a, b, r, leak, threshold, reset, out, trace_v, trace_i, v_pre,
    rows, family, spiking, trace, save, one, zero,
):  # type: ignore[no-untyped-def]  # fmt: skip
    """Over ``T`` steps and ``N = rows · M`` neurons (``x``, ``out``, traces, ``v_pre``
    ``[T, N]``; state ``[N]``; ``scale`` and the parameters ``[M]``, the same for every
    row): the input term ``p = scale · x``, then FAMILY 0 (I, IF) ``v += p``; 1 (LI, LIF)
    ``v += a ((leak - v) + p)``; 2 (CubaLI, CubaLIF) ``i += (p - i) a``,
    ``v += ((leak - v) + i r) b``; spiking: ``z = v > threshold``,
    ``v = (1 - z) v + z reset``. ``trace`` writes the state after every step, ``save``
    the membrane before every reset (for BPTT). Each step is a few short loops that
    each write few arrays, so that LLVM vectorizes them."""
    steps, n = x.shape
    m = n // rows
    for t in range(steps):
        for row in range(rows):
            o = row * m
            if family == 0:
                for k in range(m):
                    v[o + k] = v[o + k] + scale[k] * x[t, o + k]
            elif family == 1:
                for k in range(m):
                    vj = v[o + k]
                    v[o + k] = vj + a[k] * ((leak[k] - vj) + scale[k] * x[t, o + k])
            else:
                for k in range(m):
                    ij = i[o + k] + (scale[k] * x[t, o + k] - i[o + k]) * a[k]
                    i[o + k] = ij
                    vj = v[o + k]
                    v[o + k] = vj + ((leak[k] - vj) + ij * r[k]) * b[k]
            if save:
                for k in range(m):
                    v_pre[t, o + k] = v[o + k]
            if spiking:
                for k in range(m):
                    vj = v[o + k]
                    z = one if vj > threshold[k] else zero
                    out[t, o + k] = z
                    v[o + k] = (one - z) * vj + z * reset[k]
            else:
                for k in range(m):
                    out[t, o + k] = v[o + k]
        if trace:
            for j in range(n):
                trace_v[t, j] = v[j]
            if family == 2:
                for j in range(n):
                    trace_i[t, j] = i[j]


def _scan_backward(
    pre, v0, i0, a, b, r, leak, threshold, reset, out, trace_v, trace_i, v_pre,
    g_out, g_v, g_i, g_trace_v, g_trace_i,
    g_pre, g_v0, g_i0, g_a, g_b, g_r, g_leak, g_th, g_reset,
    alpha, family, spiking, one,
):  # type: ignore[no-untyped-def]  # fmt: skip
    """The scan's gradients, last step first, per neuron (as
    :func:`.triton._neuron_scan_backward`): with ``gv`` the gradient of the state after
    a step, the spike's surrogate ``s = 1 / (alpha |v' - th| + 1)^2`` on the membrane
    before the reset ``v'``, the reset's path ``gz = g_out + gv (v_reset - v')``,
    ``gv' = gv (1 - z) + gz s``; then back through the family's update to the input
    term, the previous state and the parameters (summed over the steps). ``trace_v``
    and ``trace_i`` are the state after every step."""
    steps, n = pre.shape
    for j in range(n):
        gv = g_v[j]
        gi = g_i[j] if family == 2 else gv
        zero = one - one
        ga, gb, gr, gleak, gth, greset = zero, zero, zero, zero, zero, zero
        for t in range(steps - 1, -1, -1):
            gv = gv + g_trace_v[t, j]
            v_new = v_pre[t, j]
            if spiking:
                z = out[t, j]
                gz = g_out[t, j] + gv * (reset[j] - v_new)
                distance = abs(v_new - threshold[j]) * alpha + one
                surrogate = gz / (distance * distance)
                gth = gth - surrogate
                greset = greset + gv * z
                gv = gv * (one - z) + surrogate
            else:
                gv = gv + g_out[t, j]
            v_before = v0[j] if t == 0 else trace_v[t - 1, j]
            if family == 0:
                g_pre[t, j] = gv
            elif family == 1:
                g_pre[t, j] = gv * a[j]
                ga = ga + gv * ((leak[j] - v_before) + pre[t, j])
                gleak = gleak + gv * a[j]
                gv = gv * (one - a[j])
            else:
                i_new = trace_i[t, j]
                i_before = i0[j] if t == 0 else trace_i[t - 1, j]
                gi = gi + g_trace_i[t, j]
                gb = gb + gv * ((leak[j] - v_before) + i_new * r[j])
                gr = gr + gv * i_new * b[j]
                gleak = gleak + gv * b[j]
                gi = gi + gv * r[j] * b[j]
                gv = gv * (one - b[j])
                g_pre[t, j] = gi * a[j]
                ga = ga + gi * (pre[t, j] - i_before)
                gi = gi * (one - a[j])
        g_v0[j] = gv
        g_i0[j] = gi
        g_a[j], g_b[j], g_r[j], g_leak[j], g_th[j], g_reset[j] = ga, gb, gr, gleak, gth, greset


def _loop(
    ext, v, i, scale, a, b, r, leak, threshold, reset,
    w, wt, bias, has_bias, previous, has_previous,
    out, rec, trace_v, trace_i, v_pre,
    family, trace, save, mode, sparse, chars, dims, scalars, one, zero,
):  # type: ignore[no-untyped-def]  # fmt: skip
    """Over ``T`` steps and ``B`` rows of ``n`` neurons (``ext``, ``out``, ``rec``,
    traces, ``v_pre`` ``[T, B, n]``; state ``[B, n]``; operands ``[B · n]``): ``x = e_t +
    y_{t-1}`` (``previous`` at the chunk's first step where there is one, else ``e_0``
    alone), the family's update on ``scale x`` and the reset as in :func:`_scan`, then
    the layer ``y_t = W z_t + b`` (:func:`_linear_rows`, all rows at once). ``trace``
    writes the state after every step; ``save`` the membrane before every reset and,
    for CubaLIF, the current after every step in ``trace_i`` (what the reverse kernel
    reads). Each step's neurons, all rows together, go through short flat loops that
    each write few arrays (the update, the spike and reset, the stores of what is
    kept), which LLVM vectorizes: one loop writing them all is not, nor are loops as
    short as one row."""
    steps, batch, n = ext.shape
    size = batch * n
    x = np.empty(size, dtype=ext.dtype)
    pending = np.empty(size, dtype=ext.dtype)
    state_v = v.reshape(size)
    state_i = i.reshape(size)
    keep_i = family == 2 and (trace or save)
    for t in range(steps):
        now = ext[t].reshape(size)
        if t > 0 or has_previous:
            before = rec[t - 1].reshape(size) if t > 0 else previous.reshape(size)
            for j in range(size):
                x[j] = now[j] + before[j]
        else:
            for j in range(size):
                x[j] = now[j]
        if family == 0:  # the update: membrane before the reset into ``pending``
            for j in range(size):
                pending[j] = state_v[j] + scale[j] * x[j]
        elif family == 1:
            for j in range(size):
                vj = state_v[j]
                pending[j] = vj + a[j] * ((leak[j] - vj) + scale[j] * x[j])
        else:
            for j in range(size):
                ij = state_i[j] + (scale[j] * x[j] - state_i[j]) * a[j]
                state_i[j] = ij
                vj = state_v[j]
                pending[j] = vj + ((leak[j] - vj) + ij * r[j]) * b[j]
        if keep_i:
            kept = trace_i[t].reshape(size)
            for j in range(size):
                kept[j] = state_i[j]
        if save:
            kept = v_pre[t].reshape(size)
            for j in range(size):
                kept[j] = pending[j]
        spikes = out[t].reshape(size)
        for j in range(size):  # the spike and the reset
            vj = pending[j]
            z = one if vj > threshold[j] else zero
            spikes[j] = z
            state_v[j] = (one - z) * vj + z * reset[j]
        if trace:
            kept = trace_v[t].reshape(size)
            for j in range(size):
                kept[j] = state_v[j]
        _linear_rows(out[t], w, wt, bias, has_bias, rec[t], mode, sparse, chars, dims, scalars, zero)


def _loop_backward(
    ext, scale, v0, i0, a, b, r, leak, threshold, reset,
    w, start, out, rec, i_trace, v_pre,
    g_out, g_rec, g_v, g_i, g_trace_v, g_trace_i,
    g_ext, g_y, g_start, g_v0, g_i0,
    g_scale, g_a, g_b, g_r, g_leak, g_th, g_reset,
    alpha, family, has_previous, traced, one,
):  # type: ignore[no-untyped-def]  # fmt: skip
    """The loop's gradients, last step first, per batch row (as
    :func:`.triton_loop_grad._loop_scan_backward`): ``g_y = g_rec + g_x`` (``g_x`` from
    the next step's input) is stored and summed against the weight, ``W^T g_y``, in
    index order; the spike and reset as in :func:`_scan_backward`, the membrane the
    step started from recomputed as the previous step's reset of its ``v_pre``; the
    input term ``scale * x`` with ``x = ext + rec`` of the step before (``start`` at
    the first step) rebuilt as the forward kernel adds it. Parameter gradients are
    summed over the steps, per row. ``traced``: ``g_trace_v``, ``g_trace_i`` are read."""
    steps, batch, n = ext.shape
    back = np.empty(n, dtype=ext.dtype)
    for row in range(batch):
        gv = g_v[row].copy()
        gi = g_i[row].copy() if family == 2 else gv.copy()
        g_x = np.zeros(n, dtype=ext.dtype)
        gs = np.zeros(n, dtype=ext.dtype)
        ga = np.zeros(n, dtype=ext.dtype)
        gb = np.zeros(n, dtype=ext.dtype)
        gr = np.zeros(n, dtype=ext.dtype)
        gleak = np.zeros(n, dtype=ext.dtype)
        gth = np.zeros(n, dtype=ext.dtype)
        greset = np.zeros(n, dtype=ext.dtype)
        for t in range(steps - 1, -1, -1):
            for k in range(n):
                g_y[t, row, k] = g_rec[t, row, k] + g_x[k]
            for j in range(n):
                back[j] = one - one
            for k in range(n):
                gk = g_y[t, row, k]
                for j in range(n):
                    back[j] = back[j] + gk * w[k, j]
            for j in range(n):
                if traced:
                    gv[j] = gv[j] + g_trace_v[t, row, j]
                z = out[t, row, j]
                v_new = v_pre[t, row, j]
                gz = (g_out[t, row, j] + back[j]) + gv[j] * (reset[row, j] - v_new)
                distance = abs(v_new - threshold[row, j]) * alpha + one
                surrogate = gz / (distance * distance)
                gth[j] = gth[j] - surrogate
                greset[j] = greset[j] + gv[j] * z
                gv[j] = gv[j] * (one - z) + surrogate
                x = ext[t, row, j]
                if t == 0:
                    if has_previous:
                        x = x + start[row, j]
                    v_before = v0[row, j]
                    i_before = i0[row, j]
                else:
                    x = x + rec[t - 1, row, j]
                    v_before = v0[row, j]
                    if family >= 1:
                        earlier = v_pre[t - 1, row, j]
                        fired = one if earlier > threshold[row, j] else one - one
                        v_before = (one - fired) * earlier + fired * reset[row, j]
                    i_before = i0[row, j]
                    if family == 2:
                        i_before = i_trace[t - 1, row, j]
                pre = scale[row, j] * x
                g_pre = gv[j]
                if family == 1:
                    g_pre = gv[j] * a[row, j]
                    ga[j] = ga[j] + gv[j] * ((leak[row, j] - v_before) + pre)
                    gleak[j] = gleak[j] + gv[j] * a[row, j]
                    gv[j] = gv[j] * (one - a[row, j])
                elif family == 2:
                    i_new = i_trace[t, row, j]
                    if traced:
                        gi[j] = gi[j] + g_trace_i[t, row, j]
                    gb[j] = gb[j] + gv[j] * ((leak[row, j] - v_before) + i_new * r[row, j])
                    gr[j] = gr[j] + gv[j] * i_new * b[row, j]
                    gleak[j] = gleak[j] + gv[j] * b[row, j]
                    gi[j] = gi[j] + gv[j] * r[row, j] * b[row, j]
                    gv[j] = gv[j] * (one - b[row, j])
                    g_pre = gi[j] * a[row, j]
                    ga[j] = ga[j] + gi[j] * (pre - i_before)
                    gi[j] = gi[j] * (one - a[row, j])
                gs[j] = gs[j] + g_pre * x
                g_x[j] = g_pre * scale[row, j]
                g_ext[t, row, j] = g_x[j]
        for j in range(n):
            g_start[row, j] = g_x[j]
            g_v0[row, j] = gv[j]
            g_i0[row, j] = gi[j]
            g_scale[row, j] = gs[j]
            g_a[row, j] = ga[j]
            g_b[row, j] = gb[j]
            g_r[row, j] = gr[j]
            g_leak[row, j] = gleak[j]
            g_th[row, j] = gth[j]
            g_reset[row, j] = greset[j]


_SOURCES = {
    "scan": _scan,
    "scan backward": _scan_backward,
    "loop": _loop,
    "loop backward": _loop_backward,
    "linear": _linear_rows,
    "linear steps": _linear_steps,
}
_COMPILED: dict[str, Any] = {}


def kernel(name: str) -> Any:
    """The compiled ``"scan"``, ``"scan backward"``, ``"loop"``, ``"loop backward"`` or
    ``"linear"``, built (or loaded from numba's disk cache) on first use."""
    if name not in _COMPILED:
        _COMPILED[name] = njit(_SOURCES[name], OPTIONS)
    return _COMPILED[name]


if numba is not None:  # the loop kernel calls the compiled product (and so does the probe)
    _linear_rows = _COMPILED["linear"] = njit(_linear_rows, OPTIONS)

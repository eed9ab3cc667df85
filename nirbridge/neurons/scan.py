r"""Neuron updates over many time steps at once, equal to stepping bit for bit.

``scan(x, state, params, dt, trace)`` takes a chunk of inputs ``x`` of shape
``[T, B, ...]`` and returns ``(outputs [T, B, ...], state, traces)``, where ``traces``
maps state-variable names to their values after each step (``[T, B, ...]``, only when
``trace`` is true). The equations are those of :mod:`.functional`; the values are
those of calling the step function ``T`` times, because every arithmetic operation is
the same one on the same operands in the same order:

* terms that do not depend on the state (``dt / tau``, ``r * x``, ``w_in * x``) are
  computed once per chunk, elementwise, which gives the same values as per step;
* the state update runs in place on a private copy of the state (the state passed in
  is never modified);
* the reset :math:`(1 - z) v + z v_{reset}` is applied as a select, which gives the
  same value wherever :math:`v` is finite.

These kernels are for inference; when gradients are needed the modules step with the
functional updates (whose reset lets gradients flow through the spikes).
"""

from __future__ import annotations

import torch

from . import functional as F

__all__ = ["cuba_scan", "i_scan", "if_scan", "li_scan", "lif_scan"]

Traces = dict[str, torch.Tensor]


def _start(x: torch.Tensor, v: torch.Tensor, trace: bool, spikes: bool) -> tuple[torch.Tensor | None, ...]:
    steps = x.shape[0]
    fired = torch.empty((steps, *v.shape), dtype=torch.bool, device=v.device) if spikes else None
    values = v.new_empty((steps, *v.shape)) if trace or not spikes else None
    return fired, values


def i_scan(
    x: torch.Tensor, state: F.IState, r: torch.Tensor, dt: float, trace: bool = False
) -> tuple[torch.Tensor, F.IState, Traces]:
    """I over a chunk: ``v <- v + dt * r * x`` per step; outputs ``v``."""
    drx = dt * r * x
    v = state.v.expand(torch.broadcast_shapes(state.v.shape, drx.shape[1:])).clone()
    _, out = _start(x, v, trace, spikes=False)
    assert out is not None
    for t in range(x.shape[0]):
        v.add_(drx[t])
        out[t] = v
    return out, F.IState(v), {"v": out} if trace else {}


def li_scan(
    x: torch.Tensor,
    state: F.IState,
    tau: torch.Tensor,
    r: torch.Tensor,
    v_leak: torch.Tensor,
    dt: float,
    trace: bool = False,
) -> tuple[torch.Tensor, F.IState, Traces]:
    """LI over a chunk: ``v <- v + (dt / tau) * (v_leak - v + r * x)`` per step; outputs ``v``."""
    a = dt / tau
    rx = r * x
    v = state.v.expand(torch.broadcast_shapes(state.v.shape, rx.shape[1:])).clone()
    _, out = _start(x, v, trace, spikes=False)
    assert out is not None
    for t in range(x.shape[0]):
        step = torch.sub(v_leak, v)
        step.add_(rx[t]).mul_(a)
        v.add_(step)
        out[t] = v
    return out, F.IState(v), {"v": out} if trace else {}


def if_scan(
    x: torch.Tensor,
    state: F.IState,
    r: torch.Tensor,
    v_threshold: torch.Tensor,
    v_reset: torch.Tensor,
    dt: float,
    trace: bool = False,
) -> tuple[torch.Tensor, F.IState, Traces]:
    """IF over a chunk: integrate ``dt * r * x``, spike where ``v > v_threshold``, reset."""
    drx = dt * r * x
    v = state.v.expand(torch.broadcast_shapes(state.v.shape, drx.shape[1:])).clone()
    fired, values = _start(x, v, trace, spikes=True)
    assert fired is not None
    for t in range(x.shape[0]):
        v.add_(drx[t])
        torch.gt(v, v_threshold, out=fired[t])
        v = torch.where(fired[t], v_reset, v)
        if values is not None:
            values[t] = v
    return fired.to(v.dtype), F.IState(v), {"v": values} if values is not None else {}


def lif_scan(
    x: torch.Tensor,
    state: F.IState,
    tau: torch.Tensor,
    r: torch.Tensor,
    v_leak: torch.Tensor,
    v_threshold: torch.Tensor,
    v_reset: torch.Tensor,
    dt: float,
    trace: bool = False,
) -> tuple[torch.Tensor, F.IState, Traces]:
    """LIF over a chunk: the LI update, spike where ``v > v_threshold``, reset."""
    a = dt / tau
    rx = r * x
    v = state.v.expand(torch.broadcast_shapes(state.v.shape, rx.shape[1:])).clone()
    fired, values = _start(x, v, trace, spikes=True)
    assert fired is not None
    for t in range(x.shape[0]):
        step = torch.sub(v_leak, v)
        step.add_(rx[t]).mul_(a)
        v.add_(step)
        torch.gt(v, v_threshold, out=fired[t])
        v = torch.where(fired[t], v_reset, v)
        if values is not None:
            values[t] = v
    return fired.to(v.dtype), F.IState(v), {"v": values} if values is not None else {}


def cuba_scan(
    x: torch.Tensor,
    state: F.CubaLIState,
    tau_syn: torch.Tensor,
    tau_mem: torch.Tensor,
    r: torch.Tensor,
    v_leak: torch.Tensor,
    w_in: torch.Tensor,
    dt: float,
    v_threshold: torch.Tensor | None = None,
    v_reset: torch.Tensor | None = None,
    trace: bool = False,
) -> tuple[torch.Tensor, F.CubaLIState, Traces]:
    """CubaLI (``v_threshold`` None, outputs ``v``) or CubaLIF (outputs spikes) over a chunk."""
    a_syn, a_mem = dt / tau_syn, dt / tau_mem
    wx = w_in * x
    shape = torch.broadcast_shapes(state.i.shape, state.v.shape, wx.shape[1:], r.shape, v_leak.shape)
    i, v = state.i.expand(shape).clone(), state.v.expand(shape).clone()
    spiking = v_threshold is not None
    fired, values = _start(x, v, trace, spikes=spiking)
    currents = i.new_empty((x.shape[0], *shape)) if trace else None
    for t in range(x.shape[0]):
        step = torch.sub(wx[t], i)
        step.mul_(a_syn)
        i.add_(step)
        step = torch.sub(v_leak, v)
        step.add_(torch.mul(r, i)).mul_(a_mem)
        v.add_(step)
        if fired is not None:
            torch.gt(v, v_threshold, out=fired[t])
            v = torch.where(fired[t], v_reset, v)
        if values is not None:
            values[t] = v
        if currents is not None:
            currents[t] = i
    traces = {"i": currents, "v": values} if trace else {}
    out = fired.to(v.dtype) if fired is not None else values
    return out, F.CubaLIState(i, v), traces

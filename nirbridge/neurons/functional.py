r"""Pure step functions of NIR's neuron models, integrated with forward Euler.

Every function takes the summed input ``x`` of one time step (batch axis first), the
previous state (a NamedTuple of tensors), the NIR parameters (tensors broadcastable to
``x``) and the step ``dt`` in seconds, and returns ``(output, new_state)``. Nothing is
modified in place.

With :math:`\Delta t` the step, per neuron:

============  ===========================================================================
model         update (:math:`x` the summed input)
============  ===========================================================================
I             :math:`v \leftarrow v + \Delta t\, r\, x`; output :math:`v`
LI            :math:`v \leftarrow v + \frac{\Delta t}{\tau}(v_{leak} - v + r x)`; output
              :math:`v`
IF            as I, then :math:`z = [v > v_{th}]`, :math:`v \leftarrow v_{reset}` where
              :math:`z`; output :math:`z`
LIF           as LI, then the IF threshold and reset; output :math:`z`
CubaLI        :math:`i \leftarrow i + \frac{\Delta t}{\tau_{syn}}(-i + w_{in} x)`, then
              :math:`v \leftarrow v + \frac{\Delta t}{\tau_{mem}}(v_{leak} - v + r i)`
              with the new :math:`i`; output :math:`v`
CubaLIF       as CubaLI, then the IF threshold and reset; output :math:`z`
Delay         output :math:`x` from :math:`\mathrm{round}(d/\Delta t)` steps ago
              (per element), zeros before the first input
============  ===========================================================================

Spikes are floats 0/1 from the strict comparison :math:`v > v_{th}`. When gradients are
required they pass through :func:`spike`'s surrogate, the SuperSpike fast-sigmoid
derivative :math:`1 / (\alpha |v - v_{th}| + 1)^2` with :math:`\alpha` =
``SURROGATE_ALPHA`` (per unit of membrane potential), read when a spike is computed,
so ``nirbridge.neurons.functional.SURROGATE_ALPHA = 20.0`` changes the gradients of
every later run, on every back-end. The forward values never depend on it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "SURROGATE_ALPHA",
    "CubaLIState",
    "DelayState",
    "IState",
    "cuba_li_step",
    "cuba_lif_step",
    "delay_step",
    "i_step",
    "if_step",
    "li_step",
    "lif_step",
    "spike",
]

SURROGATE_ALPHA = 100.0  # the surrogate's sharpness; set it to change every later run's gradients


class IState(NamedTuple):
    """Membrane potential ``v`` of an I, IF, LI or LIF population (batch first)."""

    v: torch.Tensor


class CubaLIState(NamedTuple):
    """Synaptic current ``i`` and membrane potential ``v`` of a CubaLI(F) population."""

    i: torch.Tensor
    v: torch.Tensor


class DelayState(NamedTuple):
    """Past inputs of a Delay node, most recent first: ``history[k]`` is ``k + 1`` steps old."""

    history: torch.Tensor


class _SuperSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v: torch.Tensor, threshold: torch.Tensor, alpha: float) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(v, threshold)
        ctx.alpha = alpha
        return (v > threshold).to(v.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        v, threshold = ctx.saved_tensors
        surrogate = grad / (ctx.alpha * (v - threshold).abs() + 1.0) ** 2
        grad_threshold = None
        if ctx.needs_input_grad[1]:
            grad_threshold = -surrogate
            while grad_threshold.dim() > threshold.dim():
                grad_threshold = grad_threshold.sum(0)
            for axis, size in enumerate(threshold.shape):
                if size == 1:
                    grad_threshold = grad_threshold.sum(axis, keepdim=True)
        return surrogate, grad_threshold, None


def spike(v: torch.Tensor, threshold: torch.Tensor, alpha: float | None = None) -> torch.Tensor:
    """Heaviside spike ``z = [v > threshold]`` as 0/1 floats, with a surrogate gradient
    ``1 / (alpha |v - threshold| + 1)^2``; ``alpha`` defaults to :data:`SURROGATE_ALPHA`
    as it is at the call."""
    if torch.is_grad_enabled() and (v.requires_grad or threshold.requires_grad):
        return _SuperSpike.apply(v, threshold, SURROGATE_ALPHA if alpha is None else alpha)
    return (v > threshold).to(v.dtype)


def _reset(v: torch.Tensor, z: torch.Tensor, v_reset: torch.Tensor) -> torch.Tensor:
    # (1 - z) v + z v_reset is exactly v_reset where z = 1 and exactly v where z = 0,
    # and lets gradients flow through z.
    return (1.0 - z) * v + z * v_reset


def i_step(x: torch.Tensor, state: IState, r: torch.Tensor, dt: float) -> tuple[torch.Tensor, IState]:
    """Integrator: ``v <- v + dt * r * x``; returns ``(v, state)``."""
    v = state.v + dt * r * x
    return v, IState(v)


def li_step(
    x: torch.Tensor, state: IState, tau: torch.Tensor, r: torch.Tensor, v_leak: torch.Tensor, dt: float
) -> tuple[torch.Tensor, IState]:
    """Leaky integrator: ``v <- v + (dt / tau) * (v_leak - v + r * x)``; returns ``(v, state)``."""
    v = state.v + (dt / tau) * (v_leak - state.v + r * x)
    return v, IState(v)


def if_step(
    x: torch.Tensor,
    state: IState,
    r: torch.Tensor,
    v_threshold: torch.Tensor,
    v_reset: torch.Tensor,
    dt: float,
) -> tuple[torch.Tensor, IState]:
    """Integrate-and-fire: integrate, spike where ``v > v_threshold``, reset to ``v_reset``."""
    v = state.v + dt * r * x
    z = spike(v, v_threshold)
    return z, IState(_reset(v, z, v_reset))


def lif_step(
    x: torch.Tensor,
    state: IState,
    tau: torch.Tensor,
    r: torch.Tensor,
    v_leak: torch.Tensor,
    v_threshold: torch.Tensor,
    v_reset: torch.Tensor,
    dt: float,
) -> tuple[torch.Tensor, IState]:
    """Leaky integrate-and-fire: the LI update, then threshold and reset as IF."""
    v = state.v + (dt / tau) * (v_leak - state.v + r * x)
    z = spike(v, v_threshold)
    return z, IState(_reset(v, z, v_reset))


def _cuba(
    x: torch.Tensor,
    state: CubaLIState,
    tau_syn: torch.Tensor,
    tau_mem: torch.Tensor,
    r: torch.Tensor,
    v_leak: torch.Tensor,
    w_in: torch.Tensor,
    dt: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    i = state.i + (dt / tau_syn) * (w_in * x - state.i)
    v = state.v + (dt / tau_mem) * (v_leak - state.v + r * i)
    return i, v


def cuba_li_step(
    x: torch.Tensor,
    state: CubaLIState,
    tau_syn: torch.Tensor,
    tau_mem: torch.Tensor,
    r: torch.Tensor,
    v_leak: torch.Tensor,
    w_in: torch.Tensor,
    dt: float,
) -> tuple[torch.Tensor, CubaLIState]:
    """Current-based LI: synaptic current, then membrane (with the new current); returns ``v``."""
    i, v = _cuba(x, state, tau_syn, tau_mem, r, v_leak, w_in, dt)
    return v, CubaLIState(i, v)


def cuba_lif_step(
    x: torch.Tensor,
    state: CubaLIState,
    tau_syn: torch.Tensor,
    tau_mem: torch.Tensor,
    r: torch.Tensor,
    v_leak: torch.Tensor,
    v_threshold: torch.Tensor,
    v_reset: torch.Tensor,
    w_in: torch.Tensor,
    dt: float,
) -> tuple[torch.Tensor, CubaLIState]:
    """Current-based LIF: the CubaLI updates, then threshold and reset; returns spikes."""
    i, v = _cuba(x, state, tau_syn, tau_mem, r, v_leak, w_in, dt)
    z = spike(v, v_threshold)
    return z, CubaLIState(i, _reset(v, z, v_reset))


def delay_step(x: torch.Tensor, state: DelayState, steps: torch.Tensor) -> tuple[torch.Tensor, DelayState]:
    """Delay line: element ``j`` of the output is ``x[j]`` from ``steps[j]`` steps ago.

    ``state.history`` holds ``max(steps)`` past inputs, most recent first; zeros before
    the first step.
    """
    full = torch.cat((x.unsqueeze(0), state.history), 0)
    index = steps.expand(x.shape).unsqueeze(0)
    out = full.gather(0, index).squeeze(0)
    return out, DelayState(full[:-1])

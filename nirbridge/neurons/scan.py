r"""Neuron updates over many time steps, equal to stepping bit for bit.

A :class:`Kernel` advances one neuron population step by step in place, on a private
copy of the state (the state it starts from is never modified). :func:`scan` runs it
over a chunk of inputs ``[T, B, ...]``; :mod:`nirbridge.schedule` also steps kernels
inside recurrent loops. The equations are those of :mod:`.functional`, and the values
are those of calling the step functions, because every arithmetic operation is the
same one on the same operands in the same order:

* terms that do not depend on the state (``dt / tau``, ``r * x``, ``w_in * x``,
  ``dt * r * x``) are computed once, elementwise, which gives the same values as per
  step (over a whole chunk when scanning);
* the reset :math:`(1 - z) v + z v_{reset}` is applied as a select, which gives the
  same value wherever :math:`v` is finite.

Kernels are for inference: the modules step with the functional updates when
gradients are needed (their reset lets gradients flow through the spikes).
"""

from __future__ import annotations

from typing import Any

import torch

from . import functional as F

__all__ = ["Kernel", "scan"]


class Kernel:
    """One population's state, advanced in place: ``out = kernel.advance(pre_t)``.

    ``pre(x)`` computes the state-independent input term for any number of steps;
    ``advance`` takes one step of it and returns the output (spikes as bool, or a
    fresh copy of ``v``); ``variables()`` gives the live state variables and
    ``state()`` the state in the module's NamedTuple. ``fire`` is
    ``(v_threshold, v_reset)`` for spiking models, ``None`` otherwise.
    """

    def __init__(self, v: torch.Tensor, fire: Any) -> None:
        self.v = v
        self.fire = fire
        self.spiking = fire is not None

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def advance(self, pre: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _output(self) -> torch.Tensor:
        """After the update of ``v``: spike and reset, or a copy of ``v``."""
        if self.fire is None:
            return self.v.clone()
        fired = torch.gt(self.v, self.fire[0])
        torch.where(fired, self.fire[1], self.v, out=self.v)  # elementwise: in place is safe
        return fired

    def variables(self) -> dict[str, torch.Tensor]:
        return {"v": self.v}

    def state(self) -> Any:
        return F.IState(self.v)


def _private(value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return value.expand(shape).clone()


class IKernel(Kernel):
    """I and IF: ``v <- v + dt * r * x``; IF then spikes and resets."""

    def __init__(self, state: F.IState, shape: torch.Size, r: torch.Tensor, dt: float, fire: Any = None):
        super().__init__(_private(state.v, shape), fire)
        self.scale = dt * r

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x

    def advance(self, pre: torch.Tensor) -> torch.Tensor:
        self.v.add_(pre)
        return self._output()


class LIKernel(Kernel):
    """LI and LIF: ``v <- v + (dt / tau) * (v_leak - v + r * x)``; LIF then spikes and resets."""

    def __init__(
        self,
        state: F.IState,
        shape: torch.Size,
        tau: torch.Tensor,
        r: torch.Tensor,
        v_leak: torch.Tensor,
        dt: float,
        fire: Any = None,
    ):
        super().__init__(_private(state.v, shape), fire)
        self.a, self.r, self.v_leak = dt / tau, r, v_leak

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.r * x

    def advance(self, pre: torch.Tensor) -> torch.Tensor:
        step = torch.sub(self.v_leak, self.v)
        step.add_(pre).mul_(self.a)
        self.v.add_(step)
        return self._output()


class CubaKernel(Kernel):
    """CubaLI and CubaLIF: the synaptic current, then the membrane with the new current."""

    def __init__(
        self,
        state: F.CubaLIState,
        shape: torch.Size,
        tau_syn: torch.Tensor,
        tau_mem: torch.Tensor,
        r: torch.Tensor,
        v_leak: torch.Tensor,
        w_in: torch.Tensor,
        dt: float,
        fire: Any = None,
    ):
        super().__init__(_private(state.v, shape), fire)
        self.i = _private(state.i, shape)
        self.a_syn, self.a_mem = dt / tau_syn, dt / tau_mem
        self.r, self.v_leak, self.w_in = r, v_leak, w_in

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_in * x

    def advance(self, pre: torch.Tensor) -> torch.Tensor:
        step = torch.sub(pre, self.i)
        step.mul_(self.a_syn)
        self.i.add_(step)
        step = torch.sub(self.v_leak, self.v)
        step.add_(torch.mul(self.r, self.i)).mul_(self.a_mem)
        self.v.add_(step)
        return self._output()

    def variables(self) -> dict[str, torch.Tensor]:
        return {"i": self.i, "v": self.v}

    def state(self) -> F.CubaLIState:
        return F.CubaLIState(self.i, self.v)


def scan(
    kernel: Kernel, x: torch.Tensor, trace: bool = False
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Advance ``kernel`` over ``x`` ``[T, B, ...]``: ``(outputs, traces)``.

    Spikes come out as 0/1 in ``x``'s dtype; ``traces`` holds each state variable
    after every step (``[T, B, ...]``) when ``trace`` is true.
    """
    pre = kernel.pre(x)
    steps = x.shape[0]
    out: torch.Tensor | None = None
    traces: dict[str, torch.Tensor] = {}
    for t in range(steps):
        value = kernel.advance(pre[t])
        if out is None:
            out = value.new_empty((steps, *value.shape))
        out[t] = value
        if trace:
            for name, variable in kernel.variables().items():
                if name not in traces:
                    traces[name] = variable.new_empty((steps, *variable.shape))
                traces[name][t] = variable
    assert out is not None
    dtype = next(iter(kernel.variables().values())).dtype
    return (out.to(dtype) if kernel.spiking else out), traces

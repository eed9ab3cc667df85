r"""Neuron updates over many time steps, in place, equal to stepping bit for bit.

A :class:`Kernel` advances one neuron population step by step in place, on a private
copy of the state (the state it starts from is never modified). :func:`scan` runs it
over a chunk of inputs ``[T, B, ...]``; the eager back-end (:mod:`.eager`) also steps
kernels inside recurrent loops. The equations are those of
:mod:`nirbridge.neurons.functional`, and the values are those of calling the step
functions, because every arithmetic operation is the same one on the same operands in
the same order:

* terms that do not depend on the state (``dt / tau``, ``r * x``, ``w_in * x``,
  ``dt * r * x``) are computed once, elementwise, which gives the same values as per
  step (over a whole chunk when scanning); a factor that is exactly 1 everywhere is
  left out (``1 * x`` is ``x``);
* a parameter whose values are all equal (a population sharing its ``tau`` or its
  threshold, as most files have it) enters as a number of its own dtype: the same
  operand, without reading a tensor at every step;
* the reset :math:`(1 - z) v + z v_{reset}` is computed as stepping computes it, with
  the spikes :math:`z` as 0/1 floats written straight into the output, in place: a
  few passes over memory, where a select on a bool mask takes several times longer
  (and would give :math:`v_{reset}` where stepping gives NaN, for an infinite
  :math:`v` that fires).

Kernels are for inference: the modules step with the functional updates when
gradients are needed (their reset lets gradients flow through the spikes).
"""

from __future__ import annotations

from typing import Any

import torch

from ..neurons import functional as F

__all__ = ["CubaKernel", "IKernel", "Kernel", "LIKernel", "scan"]

Operand = torch.Tensor | float


def operand(value: torch.Tensor, like: torch.Tensor) -> Operand:
    """``value`` as a Python number where all its elements are equal, it has ``like``'s
    dtype and lives on the CPU (reading a CUDA tensor would wait for the device);
    otherwise the tensor. The number is the element's own value, so an operation with
    it computes what the operation with the tensor computes."""
    if value.device.type != "cpu" or value.dtype != like.dtype or value.numel() == 0:
        return value
    flat = value.reshape(-1)
    first = flat[0]
    if flat.numel() > 1 and not bool(torch.all(flat == first)):
        return value
    number = first.item()
    return value if number != number else number  # NaN: keep the tensor


def _is_one(value: Operand) -> bool:
    return not isinstance(value, torch.Tensor) and value == 1.0


class Kernel:
    """One population's state, advanced in place: ``out = kernel.advance(pre_t)``.

    ``pre(x)`` computes the state-independent input term for any number of steps;
    ``advance(pre_t, out=None)`` takes one step of it and returns the output (spikes
    as 0/1 in the state's dtype, or a copy of ``v``), written into ``out`` when one
    is given; ``variables()`` gives the live state variables and
    ``state()`` the state in the module's NamedTuple. ``fire`` is
    ``(v_threshold, v_reset)`` for spiking models, ``None`` otherwise.
    """

    def __init__(self, v: torch.Tensor, fire: Any) -> None:
        self.v = v
        self.spiking = fire is not None
        self._kept: torch.Tensor | None = None  # 1 - z, reused from step to step
        self._ones = torch.ones((), dtype=v.dtype, device=v.device)
        if fire is not None:
            self.threshold = operand(fire[0], v)
            self.reset = operand(fire[1], v)

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def advance(self, pre: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def _output(self, out: torch.Tensor | None) -> torch.Tensor:
        """After the update of ``v``: spike and reset, or a copy of ``v``."""
        v = self.v
        if out is None:
            out = torch.empty_like(v)
        if not self.spiking:
            return out.copy_(v)
        z = torch.gt(v, self.threshold, out=out)  # 0/1 in v's dtype
        if self._kept is None or self._kept.shape != v.shape:
            self._kept = torch.empty_like(v)
        v.mul_(torch.sub(self._ones, z, out=self._kept))  # (1 - z) v
        if isinstance(self.reset, torch.Tensor):
            torch.addcmul(v, z, self.reset, out=v)  # + z v_reset: the product is exact (z is 0 or 1)
        else:
            v.add_(z, alpha=self.reset)
        return z

    def variables(self) -> dict[str, torch.Tensor]:
        return {"v": self.v}

    def state(self) -> Any:
        return F.IState(self.v)


def _private(value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return value.expand(shape).clone()


def _times(factor: Operand, x: torch.Tensor) -> torch.Tensor:
    return x if _is_one(factor) else factor * x


class IKernel(Kernel):
    """I and IF: ``v <- v + dt * r * x``; IF then spikes and resets."""

    def __init__(self, state: F.IState, shape: torch.Size, r: torch.Tensor, dt: float, fire: Any = None):
        super().__init__(_private(state.v, shape), fire)
        self.scale = operand(dt * r, self.v)

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return _times(self.scale, x)

    def advance(self, pre: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        self.v.add_(pre)
        return self._output(out)


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
        self.a, self.r, self.v_leak = (operand(t, self.v) for t in (dt / tau, r, v_leak))

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return _times(self.r, x)

    def advance(self, pre: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        step = torch.rsub(self.v, self.v_leak)  # v_leak - v
        step.add_(pre).mul_(self.a)
        self.v.add_(step)
        return self._output(out)


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
        self.a_syn, self.a_mem, self.r, self.v_leak, self.w_in = (
            operand(t, self.v) for t in (dt / tau_syn, dt / tau_mem, r, v_leak, w_in)
        )

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return _times(self.w_in, x)

    def advance(self, pre: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        step = torch.sub(pre, self.i)
        step.mul_(self.a_syn)
        self.i.add_(step)
        step = torch.rsub(self.v, self.v_leak)  # v_leak - v
        step.add_(torch.mul(self.i, self.r)).mul_(self.a_mem)
        self.v.add_(step)
        return self._output(out)

    def variables(self) -> dict[str, torch.Tensor]:
        return {"i": self.i, "v": self.v}

    def state(self) -> F.CubaLIState:
        return F.CubaLIState(self.i, self.v)


def scan(
    kernel: Kernel, x: torch.Tensor, trace: bool = False
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Advance ``kernel`` over ``x`` ``[T, B, ...]``: ``(outputs, traces)``.

    Spikes come out as 0/1 in the state's dtype; ``traces`` holds each state variable
    after every step (``[T, B, ...]``) when ``trace`` is true.
    """
    pre = kernel.pre(x)
    steps = x.shape[0]
    out = kernel.v.new_empty((steps, *kernel.v.shape))
    traces: dict[str, torch.Tensor] = {}
    if trace:
        traces = {name: v.new_empty((steps, *v.shape)) for name, v in kernel.variables().items()}
    for t in range(steps):
        kernel.advance(pre[t], out[t])
        for name, variable in kernel.variables().items() if trace else ():
            traces[name][t] = variable
    return out, traces

"""What the compiled back-ends (Triton, CPU) share about nirbridge's neuron families:
which family a module is, and its operands as the eager kernels compute them."""

from __future__ import annotations

from typing import Any

import torch

from ..neurons import modules as M

__all__ = ["FAMILIES", "FAMILY_OF", "factors", "scan_operands"]

FAMILY_OF = {M.I: "i", M.IF: "i", M.LI: "li", M.LIF: "li", M.CubaLI: "cuba", M.CubaLIF: "cuba"}
"""The family of each neuron type: integrators, leaky integrators, current-based ones."""

FAMILIES = {"i": 0, "li": 1, "cuba": 2}
"""The families' numbers, as the kernels take them."""


def factors(module: M.Neuron, family: str, dummy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(scale, a, b, r, leak)`` of a population, as the eager kernels compute them:
    the input term is ``scale * x`` (``dt·r`` for I/IF, ``r`` for LI/LIF, ``w_in`` for
    CubaLI/CubaLIF), the decay factors ``a = dt/τ`` (``dt/τ_syn`` and ``b = dt/τ_mem``
    for the current-based ones); ``dummy`` where the family has no such operand."""
    dt = module.dt
    if family == "i":
        return dt * module.r, dummy, dummy, dummy, dummy
    if family == "li":
        return module.r, dt / module.tau, dummy, dummy, module.v_leak
    return module.w_in, dt / module.tau_syn, dt / module.tau_mem, module.r, module.v_leak


def scan_operands(module: M.Neuron, family: str, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, ...]:
    """``(pre, v0, i0, a, b, r, leak, threshold, reset)`` of a population's scan over
    ``x`` ``[T, B, ...]`` from ``state``, as the scan kernels take them: the input term
    ``pre = scale * x`` ``[T, *shape]`` and the rest ``[*shape]`` (the population's
    shape), each contiguous; a 0-d placeholder where the family reads no such operand
    (``i0`` of a non-current-based family; ``threshold`` and ``reset`` of I, LI,
    CubaLI)."""
    shape = module._shape(x[0])
    dummy = x.new_zeros(())
    scale, a, b, r, leak = factors(module, family, dummy)
    spiking = isinstance(module, (M.IF, M.LIF, M.CubaLIF))
    threshold = module.v_threshold if spiking else dummy
    reset = module.v_reset if spiking else dummy

    def full(t: torch.Tensor) -> torch.Tensor:
        return t if t is dummy else t.expand(shape).contiguous()

    return (
        (scale * x).expand(x.shape[0], *shape).contiguous(),
        full(state.v),
        full(state.i) if family == "cuba" else dummy,
        *(full(t) for t in (a, b, r, leak, threshold, reset)),
    )

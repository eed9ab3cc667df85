r"""The reference a simulator is measured against, and the conventions that explain a
difference from it.

The reference is NIR's equations as nirbridge computes them (:mod:`nirbridge.neurons`),
in float64, stepped one time step per call from a fresh state. A *convention* is one
way a simulator's import is known to read a graph otherwise; each is the same
reference run with one change, so that a simulator whose outputs equal a convention's
to the last value is explained by it:

========================  ===================================================================
convention                the reference run with
========================  ===================================================================
``dt=1``                  the time step taken as 1 (sinabs: no ``dt``)
``dt=1e-4``               the time step taken as 1e-4 whatever the file's (snntorch)
``r ignored``             every neuron's ``r`` taken as 1
``w_in ignored``          every CubaLI(F)'s ``w_in`` taken as 1
``v_leak ignored``        every neuron's ``v_leak`` taken as 0
``subtractive reset``     :math:`v \leftarrow v - v_{th}` at a spike instead of
                          :math:`v \leftarrow v_{reset}`
``one-step lag``          every output one step later (zeros at step 0)
``dt from r``             the time step taken as :math:`\tau / r` of the first neuron
                          (rockpool)
========================  ===================================================================

and, tried after those alone and in pairs, :data:`COMPOSITES`: sets one simulator is
known to follow together (sinabs' IF: several spikes a step, subtractive reset and a
clamp at :math:`-v_{th}`; its LIF: exponential decay with :math:`\tau` in steps and
several spikes a step, in float32).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import nir
import numpy as np
import torch

from ..neurons import functional as F
from ..neurons import modules as M

__all__ = ["CONVENTIONS", "Convention", "output_names", "reference"]

Outputs = dict[str, np.ndarray]
"""A run's outputs over time, ``[T, B, ...]`` float64, by Output node name."""


@dataclasses.dataclass(frozen=True)
class Convention:
    """One known way of reading a NIR graph otherwise than its equations say."""

    name: str
    fixed_dt: float | None = None  # the time step taken as this, whatever the file's
    ignore: tuple[str, ...] = ()  # neuron fields taken as neutral: "r" and "w_in" as 1, "v_leak" as 0
    subtractive: bool = False
    lag: int = 0
    dt_from_r: bool = False
    multispike: bool = False  # trunc(v / v_th) spikes a step where v > 0, each subtracting v_th
    clamp: bool = False  # the membrane kept at -v_th or above after the reset
    steps_decay: bool = False  # LIF: v <- exp(-1 / tau) v + x, tau in steps (r, v_leak, dt unused)
    float32: bool = False  # computed in float32, as the simulator computes (trunc(v / v_th) differs)


CONVENTIONS: tuple[Convention, ...] = (
    Convention("dt=1", fixed_dt=1.0),
    Convention("dt=1e-4", fixed_dt=1e-4),
    Convention("r ignored", ignore=("r",)),
    Convention("w_in ignored", ignore=("w_in",)),
    Convention("v_leak ignored", ignore=("v_leak",)),
    Convention("subtractive reset", subtractive=True),
    Convention("one-step lag", lag=1),
    Convention("dt from r", dt_from_r=True),
)
"""The single conventions a diagnosis tries; it then tries them two at a time."""


def combined(a: Convention, b: Convention) -> Convention:
    """Both conventions at once (``"r ignored + one-step lag"``)."""
    return Convention(
        f"{a.name} + {b.name}",
        fixed_dt=a.fixed_dt if a.fixed_dt is not None else b.fixed_dt,
        ignore=tuple(dict.fromkeys(a.ignore + b.ignore)),
        subtractive=a.subtractive or b.subtractive,
        lag=a.lag + b.lag,
        dt_from_r=a.dt_from_r or b.dt_from_r,
        multispike=a.multispike or b.multispike,
        clamp=a.clamp or b.clamp,
        steps_decay=a.steps_decay or b.steps_decay,
        float32=a.float32 or b.float32,
    )


COMPOSITES: tuple[Convention, ...] = (
    Convention(
        "several spikes a step + subtractive reset + clamp at -v_th",
        subtractive=True,
        multispike=True,
        clamp=True,
    ),
    Convention(
        "exponential decay, tau in steps + several spikes a step + subtractive reset, in float32",
        subtractive=True,
        multispike=True,
        steps_decay=True,
        float32=True,
    ),
)
"""Sets of conventions one simulator is known to follow together (sinabs' IF and LIF),
tried after the pairs."""


def candidates() -> list[Convention]:
    """Every convention alone, then every compatible pair, then :data:`COMPOSITES`."""
    pairs = [
        combined(a, b)
        for a, b in itertools.combinations(CONVENTIONS, 2)
        if not ((a.fixed_dt is not None or a.dt_from_r) and (b.fixed_dt is not None or b.dt_from_r))
    ]
    return [*CONVENTIONS, *pairs, *COMPOSITES]


_NEUTRAL = {"r": 1.0, "w_in": 1.0, "v_leak": 0.0}


def _rewritten(graph: nir.NIRGraph, ignore: tuple[str, ...]) -> nir.NIRGraph:
    """A copy of ``graph`` with the ``ignore``d neuron fields set to their neutral value."""
    graph = copy.deepcopy(graph)

    def visit(g: nir.NIRGraph) -> None:
        for node in g.nodes.values():
            if isinstance(node, nir.NIRGraph):
                visit(node)
                continue
            for field in ignore:
                value = getattr(node, field, None)
                if isinstance(value, np.ndarray) and not isinstance(node, (nir.Affine, nir.Linear)):
                    setattr(node, field, np.full_like(value, _NEUTRAL[field], dtype=np.float64))

    visit(graph)
    return graph


def _first_tau_over_r(graph: nir.NIRGraph) -> float | None:
    for node in graph.nodes.values():
        if isinstance(node, nir.NIRGraph):
            found = _first_tau_over_r(node)
            if found is not None:
                return found
        tau = getattr(node, "tau", getattr(node, "tau_mem", None))
        r = getattr(node, "r", None)
        if tau is not None and r is not None:
            ratio = (
                np.asarray(tau, dtype=np.float64).reshape(-1)[0]
                / np.asarray(r, dtype=np.float64).reshape(-1)[0]
            )
            if np.isfinite(ratio) and ratio > 0:
                return float(ratio)
    return None


class _Subtract:
    """A neuron module's forward with the reset :math:`v \\leftarrow v - v_{th}`, and the
    variants of :class:`Convention` (``convention`` is set on the class)."""

    convention: Convention

    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        c = self.convention
        if state is None:
            state = self.initial_state(x)
            if c.steps_decay:
                state = F.IState(torch.zeros_like(state.v))
        if isinstance(self, M.CubaLIF):
            i, v = F._cuba(x, state, self.tau_syn, self.tau_mem, self.r, self.v_leak, self.w_in, self.dt)
        elif isinstance(self, M.LIF) and c.steps_decay:
            i, v = None, torch.exp(-1.0 / self.tau) * state.v + x
        elif isinstance(self, M.LIF):
            i, v = None, state.v + (self.dt / self.tau) * (self.v_leak - state.v + self.r * x)
        else:
            i, v = None, state.v + self.dt * self.r * x
        if c.multispike:
            z = (v > 0).to(v.dtype) * torch.div(v, self.v_threshold, rounding_mode="trunc")
        else:
            z = (v > self.v_threshold).to(v.dtype)
        v = v - z * self.v_threshold
        if c.clamp:
            v = torch.maximum(v, -self.v_threshold)
        return z, (F.CubaLIState(i, v) if i is not None else F.IState(v))


def _subtractive_map(convention: Convention) -> dict[type, Callable[..., torch.nn.Module]]:
    def make(module_type: type) -> Callable[..., torch.nn.Module]:
        variant = type(
            f"Subtractive{module_type.__name__}", (_Subtract, module_type), {"convention": convention}
        )

        def build(node: nir.NIRNode, dt: float) -> torch.nn.Module:
            module = module_type.from_nir(node, dt=dt)
            module.__class__ = variant
            return module

        return build

    return {nir.IF: make(M.IF), nir.LIF: make(M.LIF), nir.CubaLIF: make(M.CubaLIF)}


def output_names(graph: nir.NIRGraph) -> list[str]:
    return [name for name, node in graph.nodes.items() if isinstance(node, nir.Output)]


def input_names(graph: nir.NIRGraph) -> list[str]:
    return [name for name, node in graph.nodes.items() if isinstance(node, nir.Input)]


def reference(
    graph: nir.NIRGraph,
    inputs: Mapping[str, np.ndarray],
    dt: float,
    convention: Convention | None = None,
) -> Outputs:
    """The float64 reference outputs of ``graph`` over ``inputs`` (``[T, B, ...]`` by
    Input name), under ``convention`` where one is given."""
    from ..interpret import nir_to_torch

    convention = convention or Convention("equations")
    if convention.ignore:
        graph = _rewritten(graph, convention.ignore)
    step = convention.fixed_dt if convention.fixed_dt is not None else dt
    if convention.dt_from_r:
        found = _first_tau_over_r(graph)
        if found is None:
            raise ValueError("no neuron has both a time constant and r")
        step = found
    node_map = _subtractive_map(convention) if convention.subtractive else None
    # a file is measured as its equations say, time constants below 0 included
    dtype = torch.float32 if convention.float32 else torch.float64
    gm = nir_to_torch(graph, node_map, dt=step, dtype=dtype, allow_negative_tau=True)
    result = stepped(gm, graph, inputs, dtype)
    if convention.lag:
        for key, value in result.items():
            shifted = np.zeros_like(value)
            shifted[convention.lag :] = value[: -convention.lag]
            result[key] = shifted
    return result


def stepped(
    module: torch.nn.Module,
    graph: nir.NIRGraph,
    inputs: Mapping[str, np.ndarray],
    dtype: torch.dtype = torch.float64,
) -> Outputs:
    """``module`` (built from ``graph``: one positional input per Input node, one output
    or a dict of them) stepped ``out, state = module(*x_t, state=state)`` from a fresh
    state over ``inputs``, in float64; its outputs by Output name."""
    xs = [torch.as_tensor(np.asarray(inputs[n]), dtype=dtype) for n in input_names(graph)]
    outs: list[Any] = []
    state = None
    with torch.no_grad():
        for t in range(xs[0].shape[0]):
            out, state = module(*(x[t] for x in xs), state=state)
            outs.append(out)
    if isinstance(outs[0], Mapping):
        return {k: torch.stack([o[k] for o in outs]).double().numpy() for k in outs[0]}
    return {output_names(graph)[0]: torch.stack(outs).double().numpy()}

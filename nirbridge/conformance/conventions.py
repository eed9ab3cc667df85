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
``v_reset ignored``       every neuron's ``v_reset`` taken as 0 (norse's import)
``subtractive reset``     :math:`v \leftarrow v - v_{th}` at a spike instead of
                          :math:`v \leftarrow v_{reset}`
``spikes at v = v_th``    a spike where :math:`v \ge v_{th}` (spikingjelly), not only above
``one-step lag``          every output one step later (zeros at step 0)
``dt from r``             the time step taken as :math:`\tau / r` of the first neuron
                          (rockpool)
``nirtorch's order``      the graph run as nirtorch 2.0.2's ``GraphExecutor`` runs it
                          (sinabs, rockpool; see :func:`_in_nirtorch_order`)
========================  ===================================================================

and, tried after those alone and in pairs, :data:`COMPOSITES`: sets one simulator is
known to follow together, each written from that simulator's source:

- sinabs' IF: no time step (dt = 1), several spikes a step, subtractive reset and a
  clamp at :math:`-v_{th}`, in nirtorch's order;
- sinabs' LIF: exponential decay with :math:`\tau` in steps and several spikes a step,
  in nirtorch's order, in float32;
- spyx's neurons (:func:`_spyx_step`): decays :math:`1 - dt/\tau` clipped to [0, 1],
  input added as it comes (``r``, ``w_in`` and :math:`dt/\tau` unused), ``v_leak``
  ignored, a spike's subtraction applied at the next step, and each neuron's output one
  step late, in float32;
- norse's CubaLIF: ``v_reset`` ignored, and a synaptic current that starts at
  ``v_leak`` and relaxes to it;
- rockpool's ``LIFTorch`` (:func:`_rockpool_step`): its own
  :math:`dt = \min \tau_{mem}/(1 + r)` per node, exponential decay, input added as it
  comes, ``v_leak`` added every step, several spikes a step where :math:`v \ge v_{th}`,
  subtractive reset, and nirtorch's order (below), in float32;
- "nirtorch's order" (nirtorch 2.0.2's, which sinabs and rockpool run graphs in): an
  edge from a node its ``GraphExecutor`` runs later carries nothing, since it runs the
  whole sequence in one call (a loop at the top level is cut);
- "a loop's input straight to its neuron": spyx and rockpool build one recurrent neuron
  from a recurrent subgraph, whatever its wiring.
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

__all__ = [
    "COMPOSITES",
    "CONVENTIONS",
    "ROCKPOOL",
    "SINABS_IF",
    "NORSE_CUBA",
    "SINABS_LIF",
    "SPYX",
    "Convention",
    "output_names",
    "reference",
]

Outputs = dict[str, np.ndarray]
"""A run's outputs over time, ``[T, B, ...]`` float64, by Output node name."""


@dataclasses.dataclass(frozen=True)
class Convention:
    """One known way of reading a NIR graph otherwise than its equations say."""

    name: str
    fixed_dt: float | None = None  # the time step taken as this, whatever the file's
    ignore: tuple[str, ...] = ()  # neuron fields taken as neutral: r, w_in as 1; v_leak, v_reset as 0
    subtractive: bool = False
    lag: int = 0
    dt_from_r: bool = False
    multispike: bool = False  # trunc(v / v_th) spikes a step where v > 0, each subtracting v_th
    clamp: bool = False  # the membrane kept at -v_th or above after the reset
    steps_decay: bool = False  # LIF: v <- exp(-1 / tau) v + x, tau in steps (r, v_leak, dt unused)
    float32: bool = False  # computed in float32, as the simulator computes (trunc(v / v_th) differs)
    at_threshold: bool = False  # a spike where v >= v_th (the equations: v > v_th)
    current_leak: bool = False  # CubaLIF: i <- i + dt/tau_syn (v_leak - i + w_in x), from i = v_leak
    neuron: str | None = None  # a simulator's own neuron update, a key of NEURONS
    neuron_lag: bool = False  # each neuron's output one step late, except around its own loop
    nirtorch_order: bool = False  # an edge from a node nirtorch 2.0.2 runs later carries nothing
    loop_input_direct: bool = False  # a 4-node recurrent subgraph's input goes to its neuron
    loop_bias_dropped: bool = False  # an Affine on a loop (a recurrent weight) without its bias


CONVENTIONS: tuple[Convention, ...] = (
    Convention("dt=1", fixed_dt=1.0),
    Convention("dt=1e-4", fixed_dt=1e-4),
    Convention("r ignored", ignore=("r",)),
    Convention("w_in ignored", ignore=("w_in",)),
    Convention("v_leak ignored", ignore=("v_leak",)),
    Convention("v_reset ignored", ignore=("v_reset",)),
    Convention("subtractive reset", subtractive=True),
    Convention("spikes at v = v_th", at_threshold=True),
    Convention("one-step lag", lag=1),
    Convention("dt from r", dt_from_r=True),
    Convention("nirtorch's order", nirtorch_order=True),
)
"""The single conventions a diagnosis tries; it then tries them two at a time."""


def combined(a: Convention, b: Convention) -> Convention:
    """Both conventions at once (``"r ignored + one-step lag"``): the names joined, the
    ignored fields and the lags added up, and of every other field the first that is
    set (a ``True`` flag, a time step, a simulator's neurons)."""
    merged: dict[str, Any] = {}
    for field in dataclasses.fields(Convention):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if field.name == "name":
            merged["name"] = f"{x} + {y}"
        elif field.name == "ignore":
            merged["ignore"] = tuple(dict.fromkeys(x + y))
        elif field.name == "lag":
            merged["lag"] = x + y
        else:
            merged[field.name] = x if x is not None and x is not False else y
    return Convention(**merged)


SINABS_IF = Convention(
    "dt=1 + several spikes a step + subtractive reset + clamp at -v_th + nirtorch's order",
    fixed_dt=1.0,
    subtractive=True,
    multispike=True,
    clamp=True,
    nirtorch_order=True,
)
"""sinabs 3.1's ``IAFSqueeze`` as its import builds it for a NIR IF."""

SINABS_LIF = Convention(
    "exponential decay, tau in steps + several spikes a step + subtractive reset + nirtorch's order,"
    " in float32",
    subtractive=True,
    multispike=True,
    steps_decay=True,
    float32=True,
    nirtorch_order=True,
)
"""sinabs 3.1's ``LIFSqueeze`` as its import builds it for a NIR LIF."""

SPYX = Convention(
    "decay 1 - dt/tau clipped to [0, 1] + input unscaled (r, w_in, dt/tau unused) + v_leak ignored"
    " + subtractive reset a step late + each neuron one step late + recurrent bias dropped"
    " + a loop's input straight to its neuron, in float32",
    neuron="spyx",
    neuron_lag=True,
    loop_bias_dropped=True,
    loop_input_direct=True,
    float32=True,
)
"""spyx 1.0's ``IF``, ``LIF``, ``CuBaLIF`` and their recurrent forms, as ``spyx.nir.from_nir``
builds them."""

ROCKPOOL = Convention(
    "dt = min(tau_mem / (1 + r)) per node + exponential decay + input unscaled + v_leak as a bias"
    " + several spikes a step (v >= v_th) + subtractive reset + nirtorch's order"
    " + recurrent bias dropped + a loop's input straight to its neuron, in float32",
    neuron="rockpool",
    nirtorch_order=True,
    loop_bias_dropped=True,
    loop_input_direct=True,
    float32=True,
)
"""rockpool 3.1's ``LIFTorch`` and ``ExpSynTorch``, as ``rockpool.nn.modules.from_nir``
builds them for a CubaLIF and an LI, run through nirtorch 2.0.2."""

NORSE_CUBA = Convention(
    "v_reset ignored + synaptic current relaxing to v_leak, from v_leak",
    ignore=("v_reset",),
    current_leak=True,
)
"""norse 1.1's own import of a CubaLIF: a ``LIBoxCell`` synapse given the node's
``v_leak`` (its state starts there and relaxes to it), then a ``LIFBoxCell`` without
``v_reset`` (norse's default, 0)."""

COMPOSITES: tuple[Convention, ...] = (SINABS_IF, SINABS_LIF, SPYX, ROCKPOOL, NORSE_CUBA)
"""Sets of conventions one simulator is known to follow together (sinabs' IF and LIF,
spyx's neurons, rockpool's ``LIFTorch``), tried after the pairs."""


def candidates() -> list[Convention]:
    """Every convention alone, then every compatible pair, then :data:`COMPOSITES`."""
    pairs = [
        combined(a, b)
        for a, b in itertools.combinations(CONVENTIONS, 2)
        if not ((a.fixed_dt is not None or a.dt_from_r) and (b.fixed_dt is not None or b.dt_from_r))
    ]
    return [*CONVENTIONS, *pairs, *COMPOSITES]


_NEUTRAL = {"r": 1.0, "w_in": 1.0, "v_leak": 0.0, "v_reset": 0.0}


def _copy_and_levels(graph: nir.NIRGraph) -> tuple[nir.NIRGraph, list[nir.NIRGraph]]:
    """A deep copy of ``graph``, and it with every graph nested in it (to rewrite)."""
    from ..graph import _levels

    graph = copy.deepcopy(graph)
    return graph, [level for level, _ in _levels(graph)]


def _rewritten(graph: nir.NIRGraph, ignore: tuple[str, ...]) -> nir.NIRGraph:
    """A copy of ``graph`` with the ``ignore``d neuron fields set to their neutral value."""
    graph, levels = _copy_and_levels(graph)
    for level in levels:
        for node in level.nodes.values():
            if isinstance(node, (nir.NIRGraph, nir.Affine, nir.Linear)):
                continue
            for field in ignore:
                value = getattr(node, field, None)
                if isinstance(value, np.ndarray):
                    setattr(node, field, np.full_like(value, _NEUTRAL[field], dtype=np.float64))
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


def _f32(value: Any) -> torch.Tensor:
    return torch.from_numpy(np.asarray(value).astype(np.float32))


def _spyx_factors(node: nir.NIRNode, dt: float) -> dict[str, torch.Tensor]:
    """What ``spyx.nir.from_nir`` loads: the threshold, and decays ``1 - dt / tau``
    computed in the file's dtype, then held in float32 (JAX's default) and clipped to
    [0, 1] at each call, as ``spyx.nn.LIF`` and ``CuBaLIF`` do."""
    if isinstance(node, nir.LI):  # the membrane of a PSU_LIF (spyx builds LI -> Threshold as one)
        return {"beta": _f32(1 - (dt / node.tau)).clamp(0, 1)}
    factors = {"threshold": _f32(node.v_threshold)}
    if isinstance(node, nir.LIF):
        factors["beta"] = _f32(1 - (dt / node.tau)).clamp(0, 1)
    elif isinstance(node, nir.CubaLIF):
        factors["alpha"] = _f32(1 - (dt / node.tau_syn)).clamp(0, 1)
        factors["beta"] = _f32(1 - (dt / node.tau_mem)).clamp(0, 1)
    return factors


def _spyx_step(module: torch.nn.Module, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
    r"""One step of spyx 1.0's ``IF``, ``LIF`` and ``CuBaLIF`` (``spyx/nn.py``), with the
    spike they emit one step late moved to :func:`_lagged`: the state ``v`` holds the
    potential before its reset, :math:`s = v > v_{th}` is the spike of the step before,

    .. math::
        v \leftarrow v + x - s\,v_{th} \;(IF), \qquad
        v \leftarrow \beta v + x - s\,v_{th} \;(LIF), \qquad
        i \leftarrow \alpha i + x,\; v \leftarrow \beta (v - s\,v_{th}) + i \;(CuBaLIF),

    and the output is :math:`v > v_{th}`; states start at 0. An LI is the membrane of a
    ``PSU_LIF`` (an LI and the Threshold after it, in spyx): :math:`v \leftarrow \beta v
    + x`, no reset, no lag, output :math:`v`."""
    f = module.conformance_factors
    if isinstance(module, M.LI):
        v = f["beta"] * state.v + x
        return v, F.IState(v)
    threshold = f["threshold"]
    v = state.v
    fired = (v > threshold).to(v.dtype)
    i = None
    if isinstance(module, M.CubaLIF):
        i = f["alpha"] * state.i + x
        v = f["beta"] * (v - fired * threshold) + i
    elif isinstance(module, M.LIF):
        v = f["beta"] * v + x - fired * threshold
    else:
        v = v + x - fired * threshold
    z = (v > threshold).to(v.dtype)
    return z, (F.CubaLIState(i, v) if i is not None else F.IState(v))


def _rockpool_factors(node: nir.NIRNode, dt: float) -> dict[str, torch.Tensor]:
    r"""What ``rockpool.nn.modules.from_nir`` builds: its own time step
    :math:`dt = \min \tau/(1 + r)` over the node (``dt`` is not used), decays
    :math:`\exp(-dt/\tau)` in float32 as ``LIFTorch`` computes them, the threshold and
    ``v_leak`` as a bias; an LI becomes an ``ExpSynTorch`` with :math:`\tau` cast to an
    integer."""
    if isinstance(node, nir.LI):
        own = _rockpool_dt(node.tau / (1 + node.r))
        return {"beta": torch.exp(-own / torch.as_tensor(node.tau).int())}
    own = _rockpool_dt(node.tau_mem / (1 + node.r))
    return {
        "alpha": torch.exp(-own / _f32(node.tau_mem)),
        "beta": torch.exp(-own / _f32(node.tau_syn)),
        "threshold": _f32(node.v_threshold),
        "bias": _f32(node.v_leak),
    }


def _rockpool_dt(ratio: np.ndarray) -> float:
    """``torch.min(torch.as_tensor(_to_tensor(ratio))).item()`` as rockpool computes it:
    its ``_to_tensor`` gives a Python float for one element, which ``as_tensor`` holds in
    float32."""
    ratio = np.asarray(ratio)
    value = torch.as_tensor(float(ratio.reshape(-1)[0])) if ratio.size == 1 else torch.as_tensor(ratio)
    return torch.min(value).item()


def _rockpool_step(module: torch.nn.Module, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
    r"""One step of rockpool 3.1's ``LIFTorch`` (a CubaLIF) and ``ExpSynTorch`` (an LI):

    .. math::
        i \leftarrow \beta (i + x),\; v \leftarrow \alpha v + i + b,\;
        n = \lfloor v / v_{th} \rfloor \text{ where } v \ge v_{th},\; v \leftarrow v - n\,v_{th}

    with :math:`\alpha = e^{-dt/\tau_{mem}}`, :math:`\beta = e^{-dt/\tau_{syn}}`, output
    :math:`n`; the LI: :math:`v \leftarrow \beta (v + x)`, output :math:`v`. States
    start at 0."""
    f = module.conformance_factors
    if isinstance(module, M.LI):
        v = (state.v + x) * f["beta"]
        return v, F.IState(v)
    i = (state.i + x) * f["beta"]
    v = state.v * f["alpha"] + i + f["bias"]
    n = (v >= f["threshold"]).to(v.dtype) * torch.floor(v / f["threshold"])
    v = v - n * f["threshold"]
    return n, F.CubaLIState(i, v)


Factors = Callable[[nir.NIRNode, float], dict[str, torch.Tensor]]
Step = Callable[[torch.nn.Module, torch.Tensor, Any], tuple[torch.Tensor, Any]]
NEURONS: dict[str, tuple[tuple[type, ...], Factors, Step]] = {
    "spyx": ((nir.IF, nir.LIF, nir.CubaLIF, nir.LI), _spyx_factors, _spyx_step),
    "rockpool": ((nir.LI, nir.CubaLIF), _rockpool_factors, _rockpool_step),
}
"""A simulator's own neuron updates: the NIR types they stand for, what they load from
a node, and one step."""


class _Variant:
    """A neuron module's forward under the neuron conventions of :class:`Convention`
    (``convention`` is set on the class): the reset, the spike condition, and the
    simulators' own updates."""

    convention: Convention

    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        c = self.convention
        if c.neuron is not None:
            if state is None:
                zero = torch.zeros_like(x)
                cuba = isinstance(self, (M.CubaLIF, M.CubaLI))
                state = F.CubaLIState(zero, zero) if cuba else F.IState(zero)
            return NEURONS[c.neuron][2](self, x, state)
        if state is None:
            state = self.initial_state(x)
            if c.steps_decay and not isinstance(state, F.CubaLIState):
                state = F.IState(torch.zeros_like(state.v))
            if c.current_leak and isinstance(state, F.CubaLIState):
                state = F.CubaLIState(torch.zeros_like(state.i) + self.v_leak, state.v)
        if isinstance(self, M.CubaLIF) and c.current_leak:
            i = state.i + (self.dt / self.tau_syn) * (self.v_leak - state.i + self.w_in * x)
            v = state.v + (self.dt / self.tau_mem) * (self.v_leak - state.v + self.r * i)
        elif isinstance(self, M.CubaLIF):
            i, v = F._cuba(x, state, self.tau_syn, self.tau_mem, self.r, self.v_leak, self.w_in, self.dt)
        elif isinstance(self, M.LIF) and c.steps_decay:
            i, v = None, torch.exp(-1.0 / self.tau) * state.v + x
        elif isinstance(self, M.LIF):
            i, v = None, state.v + (self.dt / self.tau) * (self.v_leak - state.v + self.r * x)
        else:
            i, v = None, state.v + self.dt * self.r * x
        if c.multispike:
            z = (v > 0).to(v.dtype) * torch.div(v, self.v_threshold, rounding_mode="trunc")
        elif c.at_threshold:
            z = (v >= self.v_threshold).to(v.dtype)
        else:
            z = (v > self.v_threshold).to(v.dtype)
        if c.subtractive:
            v = v - z * self.v_threshold
        else:
            v = torch.where(z > 0, self.v_reset, v)
        if c.clamp:
            v = torch.maximum(v, -self.v_threshold)
        return z, (F.CubaLIState(i, v) if i is not None else F.IState(v))


_MODULES = {nir.IF: M.IF, nir.LIF: M.LIF, nir.CubaLIF: M.CubaLIF, nir.LI: M.LI}


def _variant_map(convention: Convention) -> dict[type, Callable[..., torch.nn.Module]]:
    def make(node_type: type) -> Callable[..., torch.nn.Module]:
        module_type = _MODULES[node_type]
        variant = type(f"Variant{module_type.__name__}", (_Variant, module_type), {"convention": convention})

        def build(node: nir.NIRNode, dt: float) -> torch.nn.Module:
            module = module_type.from_nir(node, dt=dt)
            module.__class__ = variant
            if convention.neuron is not None:
                module.conformance_factors = NEURONS[convention.neuron][1](node, dt)
            return module

        return build

    types = NEURONS[convention.neuron][0] if convention.neuron else (nir.IF, nir.LIF, nir.CubaLIF)
    return {t: make(t) for t in types}


def _reaches(edges: list[tuple[str, str]], source: str, target: str) -> bool:
    """Whether a path of one or more ``edges`` leads from ``source`` to ``target``."""
    seen, todo = set(), [source]
    while todo:
        node = todo.pop()
        for a, b in edges:
            if a == node:
                if b == target:
                    return True
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
    return False


def _lagged(graph: nir.NIRGraph, dt: float) -> nir.NIRGraph:
    """A copy of ``graph`` with a one-step Delay after each IF, LIF and CubaLIF on its
    edges to nodes outside its own loop (spyx's neurons emit the spike of the state
    they start the step with; around a loop, the loop's delayed edge is that step)."""
    graph, levels = _copy_and_levels(graph)
    for level in levels:
        for name, node in list(level.nodes.items()):
            if not isinstance(node, (nir.IF, nir.LIF, nir.CubaLIF)):
                continue
            edges = [tuple(e) for e in level.edges]
            late = [i for i, (a, b) in enumerate(edges) if a == name and not _reaches(edges, b, name)]
            if not late:
                continue
            lag = f"{name}__one_step_late"
            shape = np.asarray(node.v_threshold).shape
            level.nodes[lag] = nir.Delay(delay=np.full(shape, dt, dtype=np.float64))
            level.edges = [(lag, b) if i in late else (a, b) for i, (a, b) in enumerate(edges)]
            level.edges.append((name, lag))
    return graph


def _loop_bias_dropped(graph: nir.NIRGraph) -> nir.NIRGraph:
    """A copy of ``graph`` whose Affine nodes on a loop (recurrent weights) have a zero
    bias: spyx's recurrent neurons and rockpool's ``LIFTorch(has_rec=True)`` hold the
    weight alone."""
    graph, levels = _copy_and_levels(graph)
    for level in levels:
        edges = [tuple(e) for e in level.edges]
        for name, node in level.nodes.items():
            if isinstance(node, nir.Affine) and _reaches(edges, name, name):
                node.bias = np.zeros_like(node.bias)
    return graph


def _in_nirtorch_order(graph: nir.NIRGraph) -> nir.NIRGraph:
    """A copy of ``graph`` whose top level keeps only the edges that nirtorch 2.0.2's
    ``GraphExecutor`` (under sinabs and rockpool) feeds: it runs the nodes once, in
    depth-first preorder from the first Input (successors in edge order), over the whole
    sequence in one call, so an edge from a node that runs later (a loop's, a skip
    connection's that arrives first) carries nothing, and a node it never reaches
    feeds nothing; and it returns the output of the node that ran last (the one
    before the Output node, where the Output node is last)."""
    graph = copy.copy(graph)
    edges = [tuple(e) for e in graph.edges]
    roots = input_names(graph)
    successors: dict[str, list[str]] = {}
    for a, b in edges:
        successors.setdefault(a, []).append(b)
    order: list[str] = []
    if roots:
        seen = {roots[0]}
        order.append(roots[0])
        stack = [iter(successors.get(roots[0], []))]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
            elif child not in seen:
                seen.add(child)
                order.append(child)
                stack.append(iter(successors.get(child, [])))
    position = {name: i for i, name in enumerate(order)}
    kept = [(a, b) for a, b in edges if a in position and b in position and position[a] < position[b]]
    outputs = output_names(graph)
    if len(order) >= 2 and len(outputs) == 1:  # it returns what ran last (before the Output, if that is last)
        last = order[-2] if isinstance(graph.nodes[order[-1]], nir.Output) else order[-1]
        kept = [(a, b) for a, b in kept if b != outputs[0]] + [(last, outputs[0])]
    graph.edges = kept
    return graph


def _loop_input_direct(graph: nir.NIRGraph) -> nir.NIRGraph:
    """A copy of ``graph`` in which each recurrent subgraph of four nodes (Input, a
    neuron, an Affine or Linear, Output) takes its input straight into the neuron: spyx
    and rockpool build one recurrent neuron from such a subgraph, ``v += x + W s``,
    however the file wires the input (spyx 1.0's own export sends it through W)."""
    graph, levels = _copy_and_levels(graph)
    for level in levels[1:]:  # the subgraphs; the top level is no recurrent neuron of theirs
        kinds = {type(v): k for k, v in level.nodes.items()}
        neuron = next((kinds[t] for t in (nir.IF, nir.LIF, nir.CubaLIF) if t in kinds), None)
        weight = next((kinds[t] for t in (nir.Affine, nir.Linear) if t in kinds), None)
        source = kinds.get(nir.Input)
        if len(level.nodes) != 4 or neuron is None or weight is None or source is None:
            continue
        edges = [tuple(e) for e in level.edges]
        level.edges = [(a, neuron) if (a, b) == (source, weight) else (a, b) for a, b in edges]
    return graph


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
    if convention.loop_input_direct:  # before the lag's Delay nodes make the loop five nodes
        graph = _loop_input_direct(graph)
    if convention.neuron_lag:
        graph = _lagged(graph, step)
    if convention.nirtorch_order:
        graph = _in_nirtorch_order(graph)
    if convention.loop_bias_dropped:
        graph = _loop_bias_dropped(graph)
    c = convention
    variant = c.subtractive or c.multispike or c.clamp or c.steps_decay or c.at_threshold or c.current_leak
    node_map = _variant_map(convention) if variant or c.neuron is not None else None
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

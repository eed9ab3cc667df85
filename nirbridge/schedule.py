"""The time-batched schedule behind :func:`nirbridge.run`: one module evaluated over a
chunk of time steps at once, exactly as stepping it would.

A module built by :func:`nirbridge.nir_to_torch` evaluates its graph one step per call.
Over a chunk of ``Tc`` steps the same values come out of fewer, larger operations:

* a stateless node outside every cycle (Affine, Linear, Scale, conv, pooling, Flatten,
  Threshold) runs once on its whole input, the time axis folded into the batch axis
  (``[Tc, B, ...]`` → ``[Tc·B, ...]``);
* a stateful node outside every cycle (a neuron, a Delay) is scanned over time, its
  state carried from step to step;
* a nested graph outside every cycle is scheduled the same way, recursively;
* the nodes of a cycle (a strongly connected component: a recurrent loop, a
  self-loop) are stepped together, in the order one step evaluates them, delayed edges
  carrying the previous step's output.

Components run in an order where each comes after those that feed it (see
:func:`nirbridge.graph.cycles`); fan-in sums add the same terms in the same order as a
step does, so every value equals stepping's, bit for bit where the operations are the
same. Stateless modules must treat batch rows independently (every NIR primitive
does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx

from . import graph as graph_utils
from .errors import NirBridgeError
from .interpret import add_delayed, delayed_only, forward_takes_state
from .neurons.modules import Neuron
from .state import DELAYED, NODES, unpack_state

__all__ = ["SPIKING", "Level", "level_of", "node_input", "state_variables"]

SPIKING = frozenset({"IF", "LIF", "CubaLIF", "Threshold"})
"""NIR node types whose output is spikes (0/1)."""


def state_variables(module: torch.nn.Module, state: Any) -> dict[str, torch.Tensor]:
    """A stateful module's state as named tensors, in NIR's vocabulary (``v``, ``i``).

    A module may say how with a ``nir_state(state)`` method (the snntorch adapter
    does); otherwise NamedTuple fields are used (nirbridge's and norse's states), and a
    lone tensor is called ``state``. States that are not per-neuron (a Delay's history)
    give nothing.
    """
    hook = getattr(module, "nir_state", None)
    if callable(hook):
        return dict(hook(state))
    if isinstance(state, tuple) and hasattr(state, "_asdict"):
        return {k: v for k, v in state._asdict().items() if isinstance(v, torch.Tensor)}
    if isinstance(state, torch.Tensor):
        return {"state": state}
    return {}


@dataclasses.dataclass
class Level:
    """One graph level of a built module, as the schedule sees it."""

    module: fx.GraphModule
    prefix: str  # record-key prefix: "" at the top, "sub." inside subgraph "sub"
    path: tuple[str, ...]  # node names from the top graph down to this level
    inputs: list[str]
    outputs: list[str]
    units: list[tuple[list[str], bool]]  # components: (members in step order, cyclic)
    incoming: dict[str, list[tuple[str, bool]]]
    modules: dict[str, torch.nn.Module]  # non-structural nodes, by node name
    stateful: dict[str, bool]
    children: dict[str, Level]  # nested graphs built by nir_to_torch
    late_shapes: dict[str, tuple[int, ...]]
    delayed_sources: list[str]
    types: dict[str, str]  # NIR type name of each node
    order: list[str]  # every node of this level and below, as one step evaluates them

    def walk(self) -> list[Level]:
        """This level and every nested one."""
        found = [self]
        for child in self.children.values():
            found += child.walk()
        return found


def is_built(module: Any) -> bool:
    """Whether ``module`` is a graph module :func:`nirbridge.nir_to_torch` built."""
    return isinstance(module, fx.GraphModule) and "plan" in module.meta.get("nirbridge", {})


def level_of(module: fx.GraphModule, prefix: str = "", path: tuple[str, ...] = ()) -> Level:
    """The schedule of a module :func:`nirbridge.nir_to_torch` built (recursively)."""
    info = module.meta["nirbridge"]
    the_plan: graph_utils.Plan = info["plan"]
    types = {
        node.meta["nir_node"]: node.meta["nir_type"] for node in module.graph.nodes if "nir_type" in node.meta
    }
    modules: dict[str, torch.nn.Module] = {}
    stateful: dict[str, bool] = {}
    children: dict[str, Level] = {}
    order: list[str] = []
    for name in the_plan.order:
        module_path = info["module_paths"].get(name)
        if module_path is None:
            continue  # Input, Output
        sub = module.get_submodule(module_path)
        modules[name] = sub
        stateful[name] = isinstance(sub, fx.GraphModule) or forward_takes_state(type(sub))
        order.append(prefix + name)
        if is_built(sub):
            children[name] = level_of(sub, f"{prefix}{name}.", (*path, name))
            types[name] = "NIRGraph"
            order += children[name].order
    return Level(
        module=module,
        prefix=prefix,
        path=path,
        inputs=list(info["inputs"]),
        outputs=list(info["outputs"]),
        units=graph_utils.cycles(the_plan),
        incoming=the_plan.incoming,
        modules=modules,
        stateful=stateful,
        children=children,
        late_shapes=dict(info.get("late_shapes", {})),
        delayed_sources=list(the_plan.delayed_sources),
        types=types,
        order=order,
    )


@dataclasses.dataclass
class Request:
    """What to record at one level: node outputs, and state variables per node
    (``None``: all of them)."""

    outputs: set[str] = dataclasses.field(default_factory=set)
    variables: dict[str, set[str] | None] = dataclasses.field(default_factory=dict)
    nested: dict[str, Request] = dataclasses.field(default_factory=dict)

    def wanted(self, name: str) -> set[str] | bool | None:
        """The state variables to record for node ``name``: a set, None for all, False for none."""
        return self.variables[name] if name in self.variables else False


Recorded = dict[tuple[str, str | None], torch.Tensor]  # (node path, variable or None) -> [Tc, B, ...]


def run_chunk(
    level: Level,
    xs: Mapping[str, torch.Tensor],
    state: Any,
    request: Request,
    recorded: Recorded,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Evaluate ``level`` over a chunk: ``xs`` maps Input names to ``[Tc, B, ...]``.

    Returns ``(values, new_state)``: every node's output over the chunk and the state
    after its last step (in the module's own state layout). Requested records are
    added to ``recorded`` under their keys.
    """
    node_states, delayed = unpack_state(state)
    new_nodes: dict[str, Any] = dict(node_states)
    new_delayed: dict[str, Any] = dict(delayed)
    values: dict[str, Any] = dict(xs)
    steps = next(iter(xs.values())).shape[0]
    for members, cyclic in level.units:
        if cyclic:
            _step_cycle(level, members, steps, values, new_nodes, new_delayed, request, recorded)
            continue
        name = members[0]
        if name in xs:
            continue
        x = node_input([values[s] for s, _ in level.incoming[name]])
        if name not in level.modules:  # an Output node
            values[name] = x
            continue
        module = level.modules[name]
        if name in level.children:
            child = level.children[name]
            inner, new_nodes[name] = run_chunk(
                child,
                {child.inputs[0]: x},
                node_states.get(name),
                request.nested.get(name, Request()),
                recorded,
            )
            out = _graph_output(child, inner)
        elif level.stateful[name]:
            out, new_nodes[name] = _scan(level, name, module, x, node_states.get(name), request, recorded)
        else:
            flat = module(x.reshape(-1, *x.shape[2:]))
            out = flat.reshape(x.shape[0], x.shape[1], *flat.shape[1:])
        values[name] = out
        if name in request.outputs:
            recorded[(level.prefix + name, None)] = out
    # the layout one step returns: stateful nodes in step order, delayed sources in plan order
    state_out = {
        NODES: {name: new_nodes[name] for name in level.modules if level.stateful[name]},
        DELAYED: {source: new_delayed[source] for source in level.delayed_sources},
    }
    return values, state_out


def node_input(
    direct: list[torch.Tensor], late: list[torch.Tensor | None] = (), empty: Callable[[], Any] | None = None
) -> torch.Tensor:
    """A node's summed input for one step (or a chunk), added as one step adds it:
    direct edges in edge order, then the delayed edges' previous outputs (``None`` at
    the first step). A node fed only by delayed edges starts from zeros:
    ``empty()`` gives ``(reference, shape)``, a tensor whose first axis is the batch
    and the input's shape without it."""
    if direct:
        x = direct[0]
        for other in direct[1:]:
            x = x + other
        return add_delayed(x, *late) if late else x
    assert empty is not None
    reference, shape = empty()
    return delayed_only(reference, shape, *late)


def _graph_output(level: Level, values: Mapping[str, Any]) -> Any:
    if len(level.outputs) == 1:
        return values[level.outputs[0]]
    return {name: values[name] for name in level.outputs}


def _scan(
    level: Level,
    name: str,
    module: torch.nn.Module,
    x: torch.Tensor,
    state: Any,
    request: Request,
    recorded: Recorded,
) -> tuple[torch.Tensor, Any]:
    wanted = request.variables.get(name, set())
    want_all = name in request.variables and wanted is None
    if isinstance(module, Neuron):  # nirbridge's neurons: one call for the whole chunk
        out, state, traces = module.scan(x, state, trace=bool(want_all or wanted))
        if want_all or wanted:
            for var, value in traces.items():
                if want_all or var in wanted:
                    recorded[(level.prefix + name, var)] = value
            _pick(level, name, module, state, wanted or set(), want_all)  # unknown names raise
        return out, state
    outs = []
    collected: dict[str, list[torch.Tensor]] = {}
    for t in range(x.shape[0]):
        out, state = module(x[t], state=state)
        outs.append(out)
        if want_all or wanted:
            for var, value in _pick(level, name, module, state, wanted or set(), want_all).items():
                collected.setdefault(var, []).append(value)
    for var, trace in collected.items():
        recorded[(level.prefix + name, var)] = torch.stack(trace)
    return torch.stack(outs), state


def _pick(
    level: Level, name: str, module: torch.nn.Module, state: Any, wanted: set[str], want_all: bool
) -> dict[str, torch.Tensor]:
    variables = state_variables(module, state)
    if want_all:
        return variables
    missing = wanted - set(variables)
    if missing:
        raise RecordError(
            f"record: node {level.prefix + name!r} ({level.types.get(name, type(module).__name__)}) has no "
            f"state variable {sorted(missing)[0]!r}; its state variables are {sorted(variables) or 'none'}"
        )
    return {var: variables[var] for var in wanted}


def _step_cycle(
    level: Level,
    members: list[str],
    steps: int,
    values: dict[str, Any],
    new_nodes: dict[str, Any],
    new_delayed: dict[str, Any],
    request: Request,
    recorded: Recorded,
) -> None:
    inside = set(members)
    previous = {s: new_delayed.get(s) for s in level.delayed_sources if s in inside}
    # per member, worked out once: its direct sources (this step's value inside the
    # cycle, the chunk's sequence outside it) and delayed sources in edge order, its
    # module, its kind, and the state variables to record (None: all; False: none)
    recipes = [
        (
            name,
            [(s in inside, s if s in inside else values[s]) for s, late in level.incoming[name] if not late],
            [s for s, late in level.incoming[name] if late],
            level.modules[name],
            "child" if name in level.children else "stateful" if level.stateful[name] else "stateless",
            request.wanted(name),
        )
        for name in members
    ]
    # in-place kernels only where no gradient can reach the loop: a step's input may
    # need one later even when the first step's does not (through a delayed edge)
    kernels_allowed = not torch.is_grad_enabled() or not _any_requires_grad(
        [*(level.modules[n] for n in members)],
        [values[s] for s in {s for n in members for s, _ in level.incoming[n]} - inside],
        [new_nodes.get(n) for n in members] + [previous[s] for s in previous],
    )
    kernels: dict[str, Any] = {}
    outs: dict[str, list[Any]] = {name: [] for name in members}
    nested_records: dict[tuple[str, str | None], list[torch.Tensor]] = {}
    traces: dict[tuple[str, str | None], list[torch.Tensor]] = {}
    for t in range(steps):
        current: dict[str, Any] = {}
        for name, direct_sources, late_sources, module, kind, wanted in recipes:
            x = node_input(
                [current[source] if is_current else source[t] for is_current, source in direct_sources],
                [previous[s] for s in late_sources],
                lambda name=name, t=t: (values[level.inputs[0]][t], level.late_shapes[name]),
            )
            if kind == "stateless":
                out = module(x)
            elif kind == "child":
                out = _step_child(level, name, x, new_nodes, request, nested_records)
            else:
                if t == 0:
                    kernels[name] = _kernel(module, new_nodes.get(name), x) if kernels_allowed else None
                kernel = kernels[name]
                if kernel is not None:
                    out = kernel.advance(kernel.pre(x))
                    out = out.to(x.dtype) if kernel.spiking else out
                else:
                    out, new_nodes[name] = module(x, state=new_nodes.get(name))
                if wanted is not False:
                    chosen = (
                        _pick(level, name, module, new_nodes[name], wanted or set(), wanted is None)
                        if kernel is None
                        else _pick_live(level, name, module, kernel, wanted)
                    )
                    for var, value in chosen.items():
                        traces.setdefault((level.prefix + name, var), []).append(value)
            current[name] = out
            outs[name].append(out)
        for s in previous:
            previous[s] = current[s]
    for name, kernel in kernels.items():
        if kernel is not None:
            new_nodes[name] = kernel.state()
    for s, value in previous.items():
        new_delayed[s] = value
    for name in members:
        if isinstance(outs[name][0], torch.Tensor):
            values[name] = torch.stack(outs[name])
        else:
            values[name] = {k: torch.stack([o[k] for o in outs[name]]) for k in outs[name][0]}
        if name in request.outputs:
            recorded[(level.prefix + name, None)] = values[name]
    for key, trace in traces.items():
        recorded[key] = torch.stack(trace)
    for key, pieces in nested_records.items():
        recorded[key] = torch.cat(pieces)


def _pick_live(level: Level, name: str, module: torch.nn.Module, kernel: Any, wanted: set[str] | None) -> Any:
    """Copies of a kernel's state variables (it updates them in place), as :func:`_pick` names them."""
    chosen = _pick(level, name, module, kernel.state(), wanted or set(), wanted is None)
    return {var: value.clone() for var, value in chosen.items()}


def _kernel(module: torch.nn.Module, state: Any, x: torch.Tensor) -> Any:
    """An in-place stepper for one of nirbridge's neurons (for inference)."""
    if not isinstance(module, Neuron):
        return None
    return module.kernel(module.initial_state(x) if state is None else state, x)


def _any_requires_grad(modules: list[torch.nn.Module], *trees: Any) -> bool:
    """Whether a parameter or buffer of ``modules``, or a tensor in ``trees``, requires grad."""
    from torch.utils._pytree import tree_leaves

    tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    tensors += [t for t in tree_leaves(trees) if isinstance(t, torch.Tensor)]
    return any(t.requires_grad for t in tensors)


def _step_child(
    level: Level,
    name: str,
    x: torch.Tensor,
    new_nodes: dict[str, Any],
    request: Request,
    nested_records: dict[tuple[str, str | None], list[torch.Tensor]],
) -> Any:
    """One step of a nested graph inside a cycle: a chunk of one step."""
    child = level.children[name]
    inner_records: Recorded = {}
    inner, new_nodes[name] = run_chunk(
        child,
        {child.inputs[0]: x.unsqueeze(0)},
        new_nodes.get(name),
        request.nested.get(name, Request()),
        inner_records,
    )
    for key, value in inner_records.items():
        nested_records.setdefault(key, []).append(value)
    out = _graph_output(child, inner)
    return out[0] if isinstance(out, torch.Tensor) else {k: v[0] for k, v in out.items()}


class RecordError(NirBridgeError):
    """``record=`` names a node or state variable the module does not have."""

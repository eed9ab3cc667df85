"""The eager back-end: the schedule of :mod:`.schedule` in plain torch operations.

Stateless nodes run once over a chunk, nirbridge's neurons outside cycles are scanned
by the in-place kernels of :mod:`.kernels` (the steps themselves, through the modules'
``forward``, when gradients are needed), other stateful modules are stepped through
their ``forward``, and recurrent loops are stepped together. It runs on every device
and dtype, and it is the back-end gradients flow through (BPTT).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from ..checks import check_output
from ..errors import ShapeMismatchError
from ..neurons.modules import Delay, Neuron
from ..state import DELAYED, NODES, unpack_state
from .rows import time_batched
from .schedule import Level, Recorded, RecordError, Request, node_input, state_variables

__all__ = [
    "LayerSteps",
    "LoopRunner",
    "NeuronScan",
    "eager_stepper",
    "record_traces",
    "run_chunk",
    "scan_neuron",
]

Stepper = Any  # (xs, state) -> (outputs, state, recorded, largest value's bytes per step)
NeuronScan = Callable[[Any, torch.Tensor, Any, bool], tuple[torch.Tensor, Any, dict[str, torch.Tensor]]]
"""``(module, x [T, B, ...], state, trace) -> (outputs, state, traces)`` for one of
nirbridge's neurons or delays outside every cycle; the Triton back-end brings its own."""
LoopRunner = Callable[..., bool]
"""``(level, members, values, nodes, delayed, request, recorded) -> handled`` runs a
recurrent loop over a chunk the way :func:`run_chunk` would step it (filling ``values``,
``nodes``, ``delayed`` and ``recorded``), or returns ``False`` to have it stepped."""
LayerSteps = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor | None]
"""``(layer, x [Tc, B, ...]) -> [Tc, B, ...]`` of a stateless layer that must be stepped
to be exact (:func:`.rows.time_batched`), run by a back-end its own way; ``None`` to
have it stepped."""


def scan_neuron(module: Neuron | Delay, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """The eager scan: :meth:`Neuron.scan` (in-place kernels, or the steps with
    gradients) or :meth:`Delay.scan` (an index shift)."""
    return module.scan(x, state, trace=trace)


def eager_stepper(
    module: torch.nn.Module,
    level: Level | None,
    request: Request,
    scan: NeuronScan = scan_neuron,
    loop: LoopRunner | None = None,
    layer_steps: LayerSteps | None = None,
) -> Stepper:
    """``(xs, state) -> (outputs, state, recorded, step_bytes)`` for one chunk, in
    eager torch (neurons outside cycles by ``scan``, recurrent loops by ``loop`` where
    it takes them, stateless layers that must be stepped by ``layer_steps`` where it
    takes them: :func:`.rows.time_batched`); ``step_bytes`` is the largest value's
    bytes per time step."""
    if level is not None:

        def step_level(xs: Mapping[str, torch.Tensor], state: Any) -> Any:
            recorded: Recorded = {}
            values, new_state = run_chunk(level, xs, state, request, recorded, scan, loop, layer_steps)
            outputs = {name: values[name] for name in level.outputs}
            return outputs, new_state, recorded, largest_step_bytes(values.values())

        return step_level

    from ..interpret import forward_takes_state

    stateful = forward_takes_state(type(module))  # one of nirbridge's own modules, alone

    def step_module(xs: Mapping[str, torch.Tensor], state: Any) -> Any:
        x = xs["input"]
        if not stateful:
            flat = module(x.reshape(-1, *x.shape[2:]))
            out = flat.reshape(x.shape[0], x.shape[1], *flat.shape[1:])
            return {"output": out}, state, {}, largest_step_bytes((x, out))
        if isinstance(module, Neuron):  # one of nirbridge's neurons alone: scanned
            out, state, _ = scan(module, x, state, False)
            return {"output": out}, state, {}, largest_step_bytes((x, out))
        outs = []
        for t in range(x.shape[0]):
            out, state = module(x[t], state=state)
            outs.append(out)
        out = torch.stack(outs)
        return {"output": out}, state, {}, largest_step_bytes((x, out))

    return step_module


def largest_step_bytes(values: Iterable[Any]) -> int:
    """The bytes per time step of the largest ``[Tc, B, ...]`` tensor among ``values``."""
    return max(
        (
            v.numel() // max(1, v.shape[0]) * v.element_size()
            for v in values
            if isinstance(v, torch.Tensor) and v.dim()
        ),
        default=0,
    )


def run_chunk(
    level: Level,
    xs: Mapping[str, torch.Tensor],
    state: Any,
    request: Request,
    recorded: Recorded,
    scan: NeuronScan = scan_neuron,
    loop: LoopRunner | None = None,
    layer_steps: LayerSteps | None = None,
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
            if loop is None or not loop(level, members, values, new_nodes, new_delayed, request, recorded):
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
                scan,
                loop,
                layer_steps,
            )
            out = _graph_output(child, inner)
        elif level.stateful[name]:
            out, new_nodes[name] = _scan(
                level, name, module, x, node_states.get(name), request, recorded, scan
            )
        else:
            path = level.prefix + name
            check = (lambda o, path=path: check_output(o, path, None)) if name in level.checked else None
            out = time_batched(module, x, check, layer_steps)
        if name in level.checked:
            check_output(out, level.prefix + name, level.checked[name], lead=2)
        values[name] = out
        if name in request.outputs:
            recorded[(level.prefix + name, None)] = out
    # the layout one step returns: stateful nodes in step order, delayed sources in plan order
    state_out = {
        NODES: {name: new_nodes[name] for name in level.modules if level.stateful[name]},
        DELAYED: {source: new_delayed[source] for source in level.delayed_sources},
    }
    return values, state_out


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
    scan: NeuronScan,
) -> tuple[torch.Tensor, Any]:
    wanted = request.variables.get(name, set())
    want_all = name in request.variables and wanted is None
    if isinstance(module, (Neuron, Delay)):  # nirbridge's neurons and delays: one call a chunk
        out, state, traces = scan(module, x, state, bool(want_all or wanted))
        record_traces(level, name, module, state, traces, request, recorded)
        return out, state
    outs = []
    collected: dict[str, list[torch.Tensor]] = {}
    for t in range(x.shape[0]):
        result = module(x[t], state=state)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ShapeMismatchError(
                f"node {level.prefix + name!r}: its module takes a state, so it must return (output, "
                f"state), but returned a {type(result).__name__}"
                + (f" of {len(result)}" if isinstance(result, tuple) else "")
            )
        out, state = result
        outs.append(out)
        if want_all or wanted:
            for var, value in _pick(level, name, module, state, wanted or set(), want_all).items():
                collected.setdefault(var, []).append(value)
    for var, trace in collected.items():
        recorded[(level.prefix + name, var)] = torch.stack(trace)
    return torch.stack(outs), state


def record_traces(
    level: Level,
    name: str,
    module: torch.nn.Module,
    state: Any,
    traces: Mapping[str, torch.Tensor],
    request: Request,
    recorded: Recorded,
) -> None:
    """Add the state variables of node ``name`` that ``request`` asks for, from a
    scan's ``traces`` ``{variable: [Tc, B, ...]}``, to ``recorded``; a variable the
    node lacks raises :class:`RecordError`."""
    wanted = request.variables.get(name, set())
    want_all = name in request.variables and wanted is None
    if want_all or wanted:
        for var, value in traces.items():
            if want_all or var in wanted:
                recorded[(level.prefix + name, var)] = value
        _pick(level, name, module, state, wanted or set(), want_all)  # unknown names raise


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

"""The schedule of :func:`nirbridge.run`: the plan of components that evaluates a module
over a chunk of time steps at once, exactly as stepping it would, and the chunk length.

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

The back-ends (:mod:`.eager`, :mod:`.compile`, :mod:`.triton`) carry this plan out;
:func:`chunk_length` sizes the chunks for all of them from what a chunk costs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx

from .. import graph as graph_utils
from ..errors import NirBridgeError
from ..graph_module import add_delayed, delayed_only
from ..interpret import forward_takes_state

__all__ = [
    "CACHE_BYTES",
    "CHUNK_ROWS",
    "SPIKING",
    "Level",
    "RecordError",
    "Request",
    "chunk_length",
    "describe",
    "is_built",
    "level_of",
    "node_input",
    "state_variables",
    "run_bytes",
    "step_bytes",
]

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
    widths: dict[str, int | None]  # values per sample of each node's output (None: not known)
    checked: dict[str, tuple[int, ...] | None] = dataclasses.field(default_factory=dict)  # user modules

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
        widths=dict(info.get("widths", {})),
        checked=dict(info.get("checked_outputs", {})),
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


CACHE_BYTES = 4 << 20
"""A chunk keeps each node's values over the chunk within this many bytes."""

CHUNK_ROWS = 4096
"""A chunk folds at most this many rows (time steps x batch) into one operation."""

CPU_CHUNK_ROWS = 16384
"""How far the CPU back-end lengthens a chunk past :data:`CHUNK_ROWS` rows, while its
nodes' values stay within half of :data:`CACHE_BYTES`: its compiled loops cost the same
per step however long the chunk, while its per-chunk set-up (operands, buffers,
autograd) is a Python round trip. Measured on 1 thread, the Braille SRNN ran fastest
with 64-step chunks at batch 256 (42 ms against 63 ms with 16) and whole 500-step ones
at batch 32 (5.2 ms against 7.1 ms with 128); the half keeps the dense chain's chunks
(and its peak memory: 148 MiB against 97 MiB for T=5000 with 256-step chunks) as they
were. On this back-end a last chunk of at most a quarter of the length joins the one
before it (``run``): at batch 32, 500 steps in one chunk took 4.3 ms against 5.3 ms as
431 + 69."""


def step_bytes(level: Level, batch: int, element_size: int) -> int | None:
    """The bytes of the largest value one step computes at ``level`` (nested levels
    included), from the nodes' declared shapes; ``None`` where a shape is unknown."""
    widest = 0
    for lv in level.walk():
        for name in lv.modules:
            if name in lv.children:
                continue
            width = lv.widths.get(name)
            if width is None:
                return None
            widest = max(widest, width)
    return widest * batch * element_size


def run_bytes(
    level: Level,
    request: Request,
    steps: int,
    batch: int,
    element_size: int,
    need_grad: bool,
    spike_types: Mapping[str, str] = {},
    bool_spikes: bool = False,
) -> int:
    """A lower estimate of the bytes a whole run keeps until it returns: its outputs and
    records (``steps x batch`` values per node output or state variable; a delay's
    recorded history is ``max_steps`` times that), and with ``need_grad`` one output
    and one state per node and step, which autograd keeps for the backward pass.
    Nodes of unknown width count nothing."""

    def width(lv: Level, name: str) -> int:
        return lv.widths.get(name) or 0

    def size(lv: Level, name: str) -> int:
        spikes = bool_spikes and spike_types.get(lv.prefix + name) in SPIKING
        return 1 if spikes else element_size

    per_step = 0
    for output in level.outputs:
        sources = [s for s, _ in level.incoming.get(output, [])]
        per_step += max((width(level, s) for s in sources), default=0) * element_size
    requests = {id(level): request}
    for lv in level.walk():
        req = requests.get(id(lv), Request())
        for name, child in lv.children.items():
            requests[id(child)] = req.nested.get(name, Request())
        for name in lv.modules:
            per_step += width(lv, name) * size(lv, name) * (name in req.outputs)
            wanted = req.wanted(name)
            if wanted is False or name in lv.children:
                continue
            module = lv.modules[name]
            fields = getattr(getattr(module, "state_type", None), "_fields", ("state",))
            count = len(fields) if wanted is None else len(wanted)
            depth = max(1, int(getattr(module, "max_steps", 1)))
            per_step += width(lv, name) * element_size * count * depth
        if need_grad:
            per_step += sum(
                2 * width(lv, name) * element_size for name in lv.modules if name not in lv.children
            )
    return per_step * batch * steps


def chunk_length(largest_step_bytes: int, batch: int, steps: int, cpu: bool = False) -> int:
    """Time steps per chunk, from what a chunk costs: at most :data:`CHUNK_ROWS` rows
    (steps x batch; for the CPU back-end, ``cpu``, up to :data:`CPU_CHUNK_ROWS` where
    that keeps half the cache share) per operation and :data:`CACHE_BYTES` of the largest node's values,
    at least 1 step and at most ``steps``.

    A chunk pays its per-operation overhead once for all its steps, so longer is better
    until an operation no longer gains from more rows (a matrix product of a few
    thousand rows already runs at the processor's pace) or a node's values over the
    chunk leave the cache, and convolutions over large feature maps then run slower per
    step than one step at a time. Measured on 1 thread at batch 32: the 4 x 128 dense
    chain ran fastest with 64- to 128-step chunks, the Braille SRNN compiled with 128
    (18% faster than with 64: its loop pays a setup per chunk), the N-MNIST CNN with 8
    (4 MiB of feature maps per node; 16 steps ran slower, 1 no faster than stepping).
    """
    fitting = CACHE_BYTES // max(1, largest_step_bytes)
    rows = CHUNK_ROWS // max(1, batch)
    if cpu:
        rows = max(rows, min(CPU_CHUNK_ROWS // max(1, batch), fitting // 2))
    return max(1, min(steps, fitting, rows))


def describe(level: Level, batch: int = 32, steps: int = 500, element_size: int = 4) -> str:
    """The schedule of ``level`` as text: one line per component, in the order a chunk
    runs them, saying how each runs, and the chunk length for ``batch`` and ``steps``."""
    lines: list[str] = []

    def visit(lv: Level, indent: str) -> None:
        for members, cyclic in lv.units:
            names = [lv.prefix + m for m in members]
            if cyclic:
                lines.append(f"{indent}{' -> '.join(names)}: a loop, stepped together ({len(members)} nodes)")
                continue
            name = members[0]
            if name not in lv.modules:
                kind = "Input" if name in lv.inputs else "Output"
                lines.append(f"{indent}{lv.prefix + name}: {kind}")
            elif name in lv.children:
                lines.append(f"{indent}{lv.prefix + name}: a subgraph, scheduled the same way:")
                visit(lv.children[name], indent + "  ")
            elif lv.stateful[name]:
                lines.append(
                    f"{indent}{lv.prefix + name}: {lv.types.get(name, '?')}, scanned over the chunk's steps"
                )
            else:
                lines.append(
                    f"{indent}{lv.prefix + name}: {lv.types.get(name, '?')}, once over all steps x batch rows"
                )

    visit(level, "")
    largest = step_bytes(level, batch, element_size)
    if largest is None:
        lines.append(f"chunk (T={steps}, batch {batch}): measured from the first chunk's values")
    else:
        length = chunk_length(largest, batch, steps)
        lines.append(
            f"chunk (T={steps}, batch {batch}): {length} steps ({length * batch} rows; "
            f"largest node {largest * length / (1 << 20):.2f} MiB per chunk)"
        )
    return "\n".join(lines)


class RecordError(NirBridgeError):
    """``record=`` names a node or state variable the module does not have."""

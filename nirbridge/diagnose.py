"""What the tracer tells users about models it cannot export.

:func:`_unsupported` builds the one :class:`nirbridge.UnsupportedModuleError` naming
everything a module map lacks, with what to do about it: a converter through
``module_map=``, ``skip=`` for layers that do not change the output, and for neurons
(never ``skip=``, which would drop their dynamics) a converter to a NIR neuron node or
the simulator's adapter (:func:`_neuron_fix`).

:func:`_time_loop` recognises a ``forward`` that loops over time steps itself
(snntorch's tutorial style) from the submodule calls the tracer recorded
(:class:`_Call`), and says so, with the one-step ``forward`` to write instead
(:func:`_one_step_sketch`): a NIR graph is one step of a recurrence.

This module never imports :mod:`nirbridge.trace`; the tracer imports it.
"""

from __future__ import annotations

import dataclasses
import importlib
import operator
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from .errors import NirBridgeError, UnsupportedModuleError
from .interpret import forward_takes_state
from .maps import BRIDGE, ModuleMap, _callable_name, _key_name, _lookup_type, _nir_meta

# ----------------------------------------------------------------------------- unsupported modules


def _unsupported(
    offenders: dict[str, list[str]], the_map: ModuleMap, found_neurons: Mapping[str, type] | None = None
) -> UnsupportedModuleError:
    """The error for everything the map lacks. ``found_neurons`` (offender kind: module
    type) are the neurons among them, found from the kinds' names when not given; they
    are never told to use ``skip=``."""
    modules = sorted(_key_name(k) for k, v in the_map.items() if isinstance(k, type) and v is not BRIDGE)
    functions = sorted(_key_name(k) for k, v in the_map.items() if not isinstance(k, type))
    bridged = sorted(_key_name(k) for k, v in the_map.items() if isinstance(k, type) and v is BRIDGE)
    supported = [*modules, *functions] + ([f"left out: {', '.join(bridged)}"] if bridged else [])
    if found_neurons is None:
        named = {k: _named_type(k.split(" ", 2)[1]) for k in offenders if k.startswith("module ")}
        found_neurons = {k: t for k, t in named.items() if t is not None and _neuron_type(t)}
    found_neurons = {k: t for k, t in found_neurons.items() if k in offenders}
    fixes = []
    without = {k: _NO_COUNTERPART[k.split(" ", 2)[1]] for k in offenders if _without_counterpart(k)}
    fixes += list(dict.fromkeys(without.values()))
    layers_first = [
        k for k in offenders if k.startswith("module ") and k not in found_neurons and k not in without
    ]
    if layers_first:
        example = layers_first[0].split(" ", 2)[1]
        example = f"nn.{example}" if "." not in example else example
        fixes.append(
            f"convert each with module_map={{{example}: fn}}, where fn(module) returns a "
            f"nir.NIRNode, or leave out modules that do not change the output with skip=({example},)"
        )
    if found_neurons:
        fixes.append(_neuron_fix(list(dict.fromkeys(found_neurons.values())), the_map))
    if not fixes or (not layers_first and not found_neurons and len(without) < len(offenders)):
        example = next(k for k in offenders if k not in without).split(" ", 2)[1]
        fixes.append(
            f"map the function to a NIR node with module_map={{{example}: fn}}, where "
            "fn(*args, **kwargs) gets the call's arguments and returns a nir.NIRNode; or map "
            "the module that calls it (named in parentheses) to one NIR node"
        )
    return UnsupportedModuleError(offenders, supported, ". ".join(fixes))


_MAX_POOL = (
    "NIR has no max pooling, so no NIR simulator or chip can run {kinds}: replace it with "
    "nn.AvgPool2d (exported as NIR's AvgPool2d) or nirbridge.layers.SumPool2d (NIR's SumPool2d) "
    "and retrain; skip= would drop the pooling and change every shape after it"
)
_BATCH_NORM = (
    "NIR has no batch normalisation: fold {kinds} into the layer before it before exporting "
    "(torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn) for a convolution, "
    "fuse_linear_bn_eval(linear, bn) for a Linear, in eval mode)"
)
_NO_COUNTERPART = {
    **{f"MaxPool{d}d": _MAX_POOL.format(kinds=f"nn.MaxPool{d}d") for d in (1, 2, 3)},
    **{f"AdaptiveMaxPool{d}d": _MAX_POOL.format(kinds=f"nn.AdaptiveMaxPool{d}d") for d in (1, 2, 3)},
    **{f"BatchNorm{d}d": _BATCH_NORM.format(kinds=f"nn.BatchNorm{d}d") for d in (1, 2, 3)},
}
"""torch modules NIR has no node for, by class name: what to do instead of skip=."""


def _without_counterpart(offender: str) -> bool:
    """``offender`` ("module MaxPool2d", "function ...") names a torch.nn module NIR has no node for."""
    kind, _, rest = offender.partition(" ")
    return kind == "module" and rest.split(" ", 1)[0] in _NO_COUNTERPART


def _named_type(name: str) -> type | None:
    """The class :func:`_key_name` wrote as ``name``, among the modules already imported."""
    module, _, qualname = name.rpartition(".")
    while module:
        found: Any = sys.modules.get(module)
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if isinstance(found, type):
            return found
        module, _, head = module.rpartition(".")
        qualname = f"{head}.{qualname}"
    return None


def _neuron_type(kind: type) -> bool:
    """A module type that carries state from one time step to the next: an snntorch
    neuron, or a ``forward`` with a ``state`` parameter (norse's cells, nirbridge's)."""
    if issubclass(kind, fx.GraphModule):
        return False  # what nir_to_torch builds is a graph, not a neuron
    spiking = getattr(sys.modules.get("snntorch"), "SpikingNeuron", None)
    return (isinstance(spiking, type) and issubclass(kind, spiking)) or forward_takes_state(kind)


def _is_neuron(module: nn.Module, stateful: Callable[[nn.Module], bool] | None = None) -> bool:
    """A neuron (:func:`_neuron_type`), or a module ``stateful`` says returns ``(output,
    state)``; modules built by :func:`nirbridge.nir_to_torch` are graphs, not neurons."""
    if _nir_meta(module) is not None:
        return False
    return _neuron_type(type(module)) or (stateful is not None and bool(stateful(module)))


def _public_name(kind: type) -> str:
    """A class as its users write it: ``nn.Dropout``, ``snntorch.Alpha``,
    ``norse.torch.LSNNCell``; else its full name."""
    if kind.__module__.startswith("torch.nn") and getattr(nn, kind.__name__, None) is kind:
        return f"nn.{kind.__name__}"
    top = kind.__module__.split(".")[0]
    for namespace in (top, f"{top}.torch"):
        if getattr(sys.modules.get(namespace), kind.__name__, None) is kind:
            return f"{namespace}.{kind.__name__}"
    return _key_name(kind)


_ADAPTERS = {"snntorch": "nirbridge.adapters.snntorch", "norse": "nirbridge.adapters.norse"}


def _adapter(kind: type) -> Any:
    """The nirbridge adapter module for a simulator's module type (snntorch, norse), or
    ``None``. The simulator is already imported when one of its modules exists."""
    name = _ADAPTERS.get(kind.__module__.split(".")[0])
    if name is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except (ImportError, NirBridgeError):  # no adapter to suggest after all
        return None


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _neuron_fix(kinds: Sequence[type], the_map: ModuleMap) -> str:
    """What to do about neuron types the map lacks: a converter to a NIR neuron node, or
    the simulator's adapter when the user called plain torch_to_nir; never ``skip=``,
    which would drop the neuron's dynamics."""
    names = list(dict.fromkeys(_public_name(k) for k in kinds))
    one = len(names) == 1
    text = (
        f"{_join(names)} {'is a neuron' if one else 'are neurons'} (stateful: "
        f"{'it carries' if one else 'they carry'} state from one time step to the next) with no "
        f"NIR converter in this map; convert {'it' if one else 'each'} with "
        f"module_map={{{names[0]}: fn}}, where fn(module) returns the NIR neuron node it "
        "computes (nir.LIF, nir.CubaLIF, nir.LI, nir.IF, ...) with its parameters"
    )
    by_adapter: dict[Any, list[type]] = {}
    for kind in kinds:
        adapter = _adapter(kind)
        if adapter is not None and isinstance(getattr(adapter, "TO_NIR", None), Mapping):
            by_adapter.setdefault(adapter, []).append(kind)
    for adapter, members in by_adapter.items():
        to_nir, no_form = adapter.TO_NIR, getattr(adapter, "NO_NIR_FORM", {})
        name = adapter.__name__
        simulator = name.rsplit(".", 1)[1]
        if any(key in the_map for key in to_nir):
            continue  # the adapter's own map is in use: nothing more it can do
        covered = [
            k for k in members if _lookup_type(to_nir, k) is not None and _lookup_type(no_form, k) is None
        ]
        if covered:
            text += (
                f". {simulator} models export with {name}.to_nir(model), which converts "
                f"{_join([_public_name(k) for k in covered])}; torch_to_nir's default map has no "
                f"{simulator} neurons"
            )
        for kind in members:
            if kind in covered:
                continue
            reason = _lookup_type(no_form, kind)
            text += (
                f" ({_public_name(kind)} has no NIR form: {reason})"
                if isinstance(reason, str)
                else f" ({name}.to_nir has no converter for {_public_name(kind)} either)"
            )
    return text


# ----------------------------------------------------------------------------- time loops


@dataclasses.dataclass(eq=False)
class _Call:
    """One call of a submodule while tracing: the fx nodes of its first argument, of its
    other arguments (where a neuron's state goes) and of its result."""

    path: str
    order: int
    inputs: list[fx.Node]
    state_inputs: list[fx.Node]
    outputs: list[fx.Node]
    result: Any


_LOOP_SIGNS = (
    "cannot be interpreted as an integer",  # range(x.shape[0])
    "Proxy object cannot be iterated",  # for x_t in x
    "'len' is not supported",  # range(len(x))
)

_ONE_STEP = (
    "a NIR graph is one time step of a recurrence (each neuron keeps its state from one step "
    "to the next), and the time loop belongs to whoever runs the graph. Write a forward that "
    "computes one step, `def forward(self, x, state=None): ...` returning (output, state), or "
    "export the layers directly, e.g. torch_to_nir(nn.Sequential(model.fc1, model.lif1)); then "
    "run the exported graph over time with nirbridge.run(graph, x), x time first."
)

_STACKS = tuple(
    getattr(torch, name)
    for name in ("stack", "cat", "concat", "concatenate", "hstack", "vstack")
    if hasattr(torch, name)
)
"""Functions that put the outputs of several time steps together."""

_MANY = 10
"""A neuron called this many times in one forward is stepped over time, whatever else."""


def _time_loop(
    root: nn.Module,
    g: fx.Graph,
    calls: list[_Call],
    input_names: list[str],
    the_map: ModuleMap,
    stateful: Callable[[nn.Module], bool],
) -> str | None:
    """The error message for a ``forward`` that loops over time steps, or ``None``.

    Tracing unrolls a Python loop, so each module in its body is called once per step. A
    module called more than once is such a loop (rather than a layer reused within one
    step, which stays a warning and two nodes) when a call takes the state an earlier
    call of it returned, when the outputs of its calls are stacked or concatenated
    (three or more, or a neuron's), when it is a neuron that keeps its own state
    (snntorch's ``init_hidden=True``) or is called ten times or more, or when the
    model indexes its input along the first axis at several steps (``x[step]``), which
    is the batch axis in NIR's convention.
    """
    by_path: dict[str, list[_Call]] = {}
    for call in sorted(calls, key=lambda c: c.order):
        by_path.setdefault(call.path, []).append(call)
    repeated = [p for p, cs in by_path.items() if len(cs) > 1]
    if not repeated:
        return None
    number = {id(c): i for cs in by_path.values() for i, c in enumerate(cs)}
    origin: dict[fx.Node, tuple[str, int]] = {}  # a call's result -> (module path, call number)
    for call in sorted(calls, key=lambda c: c.order):  # inner calls start later and win
        passed = set(call.inputs) | set(call.state_inputs)  # a module may return its input
        for node in call.outputs:
            if node not in passed:
                origin[node] = (call.path, number[id(call)])
    memo: dict[fx.Node, frozenset[tuple[str, int]]] = {}

    def nearest(node: fx.Node) -> frozenset[tuple[str, int]]:
        """The module calls whose results ``node`` is computed from, the nearest ones."""
        stack = [node]
        while stack:
            n = stack[-1]
            if n in memo:
                stack.pop()
            elif n in origin:
                memo[n] = frozenset({origin[n]})
                stack.pop()
            else:
                waiting = [a for a in n.all_input_nodes if a not in memo]
                if waiting:
                    stack.extend(waiting)
                else:
                    memo[n] = frozenset().union(*(memo[a] for a in n.all_input_nodes))
                    stack.pop()
        return memo[node]

    def sources(nodes: Iterable[fx.Node]) -> frozenset[tuple[str, int]]:
        return frozenset().union(*(nearest(n) for n in nodes))

    modules = {p: root.get_submodule(p) for p in repeated}
    neuron = {p: _is_neuron(m, stateful) for p, m in modules.items()}
    threaded = [
        p for p in repeated if any(q == p for c in by_path[p][1:] for q, _ in sources(c.state_inputs))
    ]
    own_state = [p for p in repeated if neuron[p] and getattr(modules[p], "init_hidden", None) is True]
    many = [p for p in repeated if neuron[p] and len(by_path[p]) >= _MANY]
    stacked: dict[str, str] = {}  # path -> how: "torch.stack (model.py:12)"
    indexed: dict[str, list[int]] = {}
    for node in g.nodes:
        if node.op != "call_function":
            continue
        if node.target in _STACKS and node.args and isinstance(node.args[0], (tuple, list)):
            steps: dict[str, set[int]] = {}
            for item in node.args[0]:
                if isinstance(item, fx.Node):
                    for p, i in nearest(item):
                        steps.setdefault(p, set()).add(i)
            source = node.meta.get("nirbridge_source", "")
            how = _callable_name(node.target) + (f" ({source})" if source else "")
            for p, found in steps.items():
                if p in modules and (len(found) >= 3 or (len(found) >= 2 and neuron[p])):
                    stacked.setdefault(p, how)
        elif node.target is operator.getitem and len(node.args) == 2:
            base, index = node.args
            if isinstance(index, tuple) and index:
                index = index[0]
            if isinstance(base, fx.Node) and base.op == "placeholder" and type(index) is int:
                name = str(base.target).lstrip("*")
                if name in input_names and index not in indexed.setdefault(name, []):
                    indexed[name].append(index)
    indexed = {name: found for name, found in indexed.items() if len(found) >= 2}
    if not (threaded or own_state or many or stacked or indexed):
        return None

    def quoted(paths: Sequence[str]) -> str:
        return _join([repr(p) for p in paths])

    top = [p for p in repeated if not any(p.startswith(f"{q}.") for q in repeated)]  # outermost
    counts = {len(by_path[p]) for p in top}
    more = [f"{len(top) - 7} more"] if len(top) > 8 else []
    shown = top[:7] if more else top
    if len(counts) == 1:
        listing = f"{_join([repr(p) for p in shown] + more)} {counts.pop()} times"
        listing += " each" if len(top) > 1 else ""
    else:
        listing = _join([f"{p!r} {len(by_path[p])} times" for p in shown] + more)
    found = [f"it calls {listing}"]
    if threaded:
        one = len(threaded) == 1
        found.append(
            f"{quoted(threaded)} {'takes' if one else 'take'} the state "
            f"{'its' if one else 'their'} previous call returned"
        )
    if own_state:
        one = len(own_state) == 1
        found.append(
            f"{quoted(own_state)} {'keeps its' if one else 'keep their'} state inside the module "
            "(init_hidden=True), so each call is one more step"
        )
    if stacked:
        hows = list(dict.fromkeys(stacked.values()))
        found.append(f"it stacks the outputs of {quoted(list(stacked))} with {_join(hows)}")
    for name, steps in indexed.items():
        shown_steps = ", ".join(f"{name}[{i}]" for i in steps[:2]) + (
            f", ..., {name}[{steps[-1]}]" if len(steps) > 2 else ""
        )
        found.append(f"it indexes its input {name!r} by step ({shown_steps})")
    lines = [
        f"{type(root).__name__}.forward loops over time: {'; '.join(found)}.",
        "The model must compute one time step: a NIR graph is one step of a recurrence (each neuron "
        "keeps its state from one step to the next), and the time loop belongs to whoever runs the "
        "graph. Write a forward that does one step:",
    ]
    export_with, note = "nirbridge.torch_to_nir", ""
    for p in top:
        adapter = _adapter(type(modules[p]))
        if adapter is not None:
            export_with = f"{adapter.__name__}.to_nir"
            if not any(key in the_map for key in getattr(adapter, "TO_NIR", {})):
                simulator = adapter.__name__.rsplit(".", 1)[1]
                note = f" (torch_to_nir's default map has no {simulator} neurons)"
            break
    body, directly = _one_step_sketch(top, by_path, sources, input_names, modules)
    lines += body
    lines.append(f"and export that model with {export_with}(model){note}")
    if directly:
        lines[-1] += f", {directly.format(export_with=export_with)}"
    lines[-1] += "."
    first_input = input_names[0] if input_names else "x"
    lines.append(
        f"Then run the exported graph over time with nirbridge.run(graph, {first_input}), "
        f"{first_input} time first ([T, batch, ...]); the graph keeps each neuron's state from "
        "step to step."
    )
    return "\n".join(lines)


def _one_step_sketch(
    top: list[str],
    by_path: dict[str, list[_Call]],
    sources: Callable[[Iterable[fx.Node]], frozenset[tuple[str, int]]],
    input_names: list[str],
    modules: dict[str, nn.Module],
) -> tuple[list[str], str]:
    """Lines showing the one-step forward of the modules a loop calls (code when they form
    a chain, each call's input the previous call's output; else the pattern), and how to
    export those modules without a forward, if there is a way (``{export_with}`` in it)."""
    chain = len(input_names) == 1 and len({len(by_path[p]) for p in top}) == 1
    for i, p in enumerate(top):
        if not chain:
            break
        feeds = sources(by_path[p][0].inputs)
        chain = feeds == (frozenset({(top[i - 1], 0)}) if i else frozenset())
    x = input_names[0] if input_names else "x"
    if not chain:
        return [
            f"    def forward(self, {x}, state=None):",
            "        state = state or {}",
            "        # each layer called once; each neuron given its state from the step before:",
            '        out, s = self.lif(h, state.get("lif"))',
            '        return out, {"lif": s, ...}',
            "giving each neuron its own key in state and returning the output and the new state,",
        ], ""

    def arity(p: str) -> int:
        result = by_path[p][0].result
        if isinstance(result, (tuple, list)):
            return len(result)
        if not isinstance(result, fx.Proxy):
            return 0
        used = [
            u.args[1]
            for u in result.node.users
            if u.op == "call_function" and u.target is operator.getitem and type(u.args[1]) is int
        ]
        return max(2, max(used) + 1) if used else 0

    sizes = {p: arity(p) for p in top}
    # snntorch's init_hidden=True neurons keep their state themselves and take none
    inside = {p for p in top if getattr(modules[p], "init_hidden", None) is True}
    keyed = [p for p in top if sizes[p] >= 2 and p not in inside]
    body = [f"    def forward(self, {x}{', state=None' if keyed else ''}):"]
    if keyed:
        body.append("        state = state or {}")
    h = x
    for p in top:
        if sizes[p] < 2 or p in inside:
            body.append(f"        h = self.{p}({h}){'[0]' if sizes[p] >= 2 else ''}")
        elif sizes[p] == 2:
            body.append(f'        h, s{keyed.index(p) + 1} = self.{p}({h}, state.get("{p}"))')
        else:
            nones = ", ".join(["None"] * (sizes[p] - 1))
            body.append(f'        r = self.{p}({h}, *state.get("{p}", ({nones})))')
            body.append(f"        h, s{keyed.index(p) + 1} = r[0], r[1:]")
        h = "h"
    if keyed:
        states = ", ".join(f'"{p}": s{i + 1}' for i, p in enumerate(keyed))
        body.append(f"        return h, {{{states}}}")
    else:
        body.append("        return h")
    layers_list = ", ".join(f"model.{p}" for p in top)
    inner = [p for p in top[:-1] if sizes[p] >= 2]
    if not inner:
        directly = f"or export the layers directly: {{export_with}}(nn.Sequential({layers_list}))"
    elif all(getattr(modules[p], "init_hidden", None) is False for p in inner):
        directly = (
            "or, with the neurons built with init_hidden=True (each then returns its spikes "
            f"alone), export the layers directly: {{export_with}}(nn.Sequential({layers_list}))"
        )
    elif all(type(modules[p]).__module__.startswith("norse.") for p in inner):
        directly = (
            f"or export the layers directly: {{export_with}}(norse.torch.SequentialState({layers_list}))"
        )
    else:
        directly = ""
    return body, directly

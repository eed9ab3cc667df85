"""The compile back-end (``run(backend="compile")``, or ``compile=True``): each chunk of
time steps as one ``torch.compile``'d function.

The function follows :mod:`.schedule` (stateless nodes over the whole chunk,
neurons and recurrent loops scanned over time), with the time loops written as
torch's ``scan`` operator, so that the whole chunk, loops included, runs in code that
inductor generated. It is compiled once per module and record request, with every
axis dynamic: a different number of steps or batch size does not recompile.

Each step computes what the module's own ``forward`` computes, so results equal
stepping: the same operations, with IEEE semantics kept. Under the ``"exact"``
precision policy (:mod:`.precision`) the generated code has no contraction into fused
multiply-adds (C++ with ``-ffp-contract=off``; Triton kernels on CUDA with
``enable_fp_fusion=False``, divisions rounded as eager torch rounds them, denormals
kept); ``"fast"`` compiles without these guards, separately. A chunk starting from a
fresh state runs its first step eagerly, so that every state the scan carries exists.
On CUDA that is not enough: on an H200 the compiled code still differed from stepping
(:func:`inexact_on`), so an exact compiled run there warns once, pointing to Triton.
Compilation happens on the first call; if it fails (or a graph break occurs), the run
continues eagerly and a :class:`nirbridge.CompileWarning` names the reason. With
gradients, chunks run eagerly (BPTT runs on the eager back-end), and the first such
call says so once, with how to get the compiled path: ``torch.no_grad()`` or
``torch.inference_mode()``.
"""

from __future__ import annotations

import types
import warnings
import weakref
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any

import torch

from ..errors import CompileWarning
from ..neurons.modules import time_constants_fixed
from ..state import DELAYED, NODES
from . import precision as _precision
from .announce import if_slow
from .eager import largest_step_bytes
from .schedule import Level, Request, node_input, state_variables

__all__ = ["compiled_stepper"]

Stepper = Callable[[Mapping[str, torch.Tensor], Any], Any]

# one compile attempt per module, record request and precision policy
_CACHE: weakref.WeakKeyDictionary[torch.nn.Module, dict[Any, Any]] = weakref.WeakKeyDictionary()
_OPTIONS = {
    "cpp_wrapper": True,  # C++ call glue: several times less overhead per scan step on the CPU
    # inductor would otherwise move convolutions to channels-last, where oneDNN sums in
    # another order than eager torch does: values one rounding apart, and spikes that flip
    "layout_optimization": False,
    # the per-step kernels are small: OpenMP around each costs more than it gains, and
    # much more when other processes share the cores (matrix products keep torch's threads)
    "cpp.threads": 1,
    # torch 2.14's joint-graph pass removes `x * 1.0` (and `x + 0`, which is not exact for
    # -0.0): _scan's copy of a repeated carry leaf then becomes the same buffer twice, which
    # the C++ wrapper frees twice (a segmentation fault; 2.13 kept the copy)
    "joint_graph_constant_folding": False,
}
# the "exact" policy: no contraction into fused multiply-adds, in C++ (CPU) and in
# Triton (CUDA: emulate_precision_casts compiles with enable_fp_fusion=False), divisions
# rounded as eager torch does, denormals not flushed; options this torch lacks are left out
_EXACT = {
    "cpp.enable_floating_point_contract_flag": "off",
    "emulate_precision_casts": True,
    "eager_numerics.division_rounding": True,
    "eager_numerics.disable_ftz": True,
}
_FAST = {"cpp.enable_floating_point_contract_flag": "fast"}
# inductor's C++ wrapper (torch 2.13) fails to compile some nested scans (a recurrent
# subgraph inside a recurrent loop); its Python wrapper is tried next, then eager
_WRAPPERS = (True, False)


def compile_options(mode: str, cpp_wrapper: bool = True) -> dict[str, Any]:
    """inductor's options for the precision policy ``mode``, those this torch knows."""
    from torch._inductor import config

    known = set(config.get_config_copy())
    options = {**_OPTIONS, **(_EXACT if mode == "exact" else _FAST), "cpp_wrapper": cpp_wrapper}
    return {key: value for key, value in options.items() if key in known}


def compiled_stepper(
    module: torch.nn.Module, level: Level | None, request: Request, eager: Stepper
) -> Stepper:
    """A chunk stepper that runs compiled code, with ``eager`` for fresh states, for
    gradients, and as the fallback when compilation fails."""
    if level is None:
        return eager  # a lone module: nothing to schedule
    cache = _CACHE.setdefault(module, {})

    def step(xs: Mapping[str, torch.Tensor], state: Any) -> Any:
        if torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters()):
            _warn_once(
                cache,
                "gradients",
                "gradients are required (the module's parameters require grad), and BPTT runs "
                "on the eager back-end, so this run and later ones with gradients run eagerly; for "
                "the compiled path, call run inside torch.no_grad() or torch.inference_mode()",
            )
            return eager(xs, state)
        if next(iter(xs.values())).shape[0] < 2:
            return eager(xs, state)  # one step: a compiled length-1 scan would compile anew
        if not _complete(level, state):
            first = {name: x[:1] for name, x in xs.items()}
            head = eager(first, state)
            rest = {name: x[1:] for name, x in xs.items()}
            tail = step(rest, head[1])
            return _join(head, tail)
        mode = _precision.active() or "exact"
        why = inexact_on(next(iter(xs.values())).device, mode)
        if why is not None:
            _warn_once(cache, "inexact", why)
        attempt = cache.setdefault((_request_key(request), mode), _Attempt())
        while attempt.options < len(_WRAPPERS):
            if attempt.function is None:
                attempt.function = _compile(level, request, compile_options(mode, _WRAPPERS[attempt.options]))
            try:
                # specialize_float: dt and other Python floats as constants (a float read in
                # two scan bodies crashes dynamo when it is symbolic); and torch's compiler
                # warns about its own internals
                # trainable time constants (tau = tau_ref * exp(tau_log)) computed eagerly,
                # as the other back-ends compute them: inductor's exp rounds otherwise
                with (
                    torch._dynamo.config.patch(specialize_float=True),
                    warnings.catch_warnings(),
                    time_constants_fixed(module),
                ):
                    warnings.filterwarnings("ignore", category=DeprecationWarning)
                    warnings.filterwarnings("ignore", module=r"torch\._(dynamo|inductor)")
                    announce = if_slow("torch.compile", _COMPILING) if not attempt.ran else nullcontext()
                    with announce:  # the first call compiles
                        outputs, new_state, recorded = attempt.function(*_fresh((dict(xs), state)))
                    attempt.ran = True
            except Exception as error:  # noqa: BLE001 - any compiler failure falls back
                attempt.options += 1
                attempt.function = None
                if attempt.options == len(_WRAPPERS):
                    text = str(error).strip()
                    reason = f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
                    warnings.warn(
                        f"run(backend='compile'): compilation failed, running eagerly instead ({reason})",
                        CompileWarning,
                        stacklevel=4,
                    )
                continue
            return outputs, new_state, recorded, largest_step_bytes(outputs.values())
        return eager(xs, state)

    return step


_COMPILING = (
    "run(backend='compile'): torch.compile is compiling this network for these shapes (10-30 s; "
    "later runs of the same module in this process reuse it, and torch caches the generated "
    "kernels on disk for later processes)"
)


def _fresh(tree: Any) -> Any:
    """Tensors as dense copies where they are views (compiled code guards on strides,
    storage offsets and view bases, and a slice of the input would recompile it), and a
    copy for each repeated appearance of one tensor (a state that holds one tensor in
    two places, as a neuron's ``v`` and its delayed output; scan refuses aliases)."""
    from torch.utils._pytree import tree_map

    seen: set[int] = set()

    def dense(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) in seen or t._base is not None or not (t.is_contiguous() and t.storage_offset() == 0):
            t = t.clone(memory_format=torch.contiguous_format)
        seen.add(id(t))
        return t

    return tree_map(dense, tree)


def inexact_on(device: torch.device, mode: str) -> str | None:
    """Why inductor's code on ``device`` may differ from stepping under the precision
    policy ``mode``, or None where it was found exact (the CPU, and any "fast" run)."""
    if mode != "exact" or device.type != "cuda":
        return None
    return (
        "on CUDA its code was measured to differ from stepping although TF32 and contraction "
        "are off (an H200 with torch 2.11: 35 of 1664 values of a dense chain, 315 of 1184 of "
        "the Braille SRNN); for results equal to stepping use backend='triton', the default "
        "on CUDA (docs/gpu.md)"
    )


def _warn_once(cache: dict[Any, Any], what: str, why: str) -> None:
    if cache.get(("warned", what)):
        return
    cache[("warned", what)] = True
    warnings.warn(f"run(backend='compile'): {why}", CompileWarning, stacklevel=4)


def _request_key(request: Request) -> Any:
    return (
        frozenset(request.outputs),
        frozenset((k, None if v is None else frozenset(v)) for k, v in request.variables.items()),
        frozenset((k, _request_key(v)) for k, v in request.nested.items()),
    )


def _complete(level: Level, state: Any) -> bool:
    """Whether ``state`` holds every stateful node's state and every delayed output."""
    if not isinstance(state, dict):
        return False
    nodes, delayed = state.get(NODES) or {}, state.get(DELAYED) or {}
    for name, stateful in level.stateful.items():
        if stateful and nodes.get(name) is None:
            return False
        if name in level.children and not _complete(level.children[name], nodes[name]):
            return False
    return all(delayed.get(s) is not None for s in level.delayed_sources)


def _join(head: Any, tail: Any) -> Any:
    """Two consecutive chunk results as one."""
    outputs = {k: _cat(v, tail[0][k]) for k, v in head[0].items()}
    recorded = {k: _cat(v, tail[2][k]) for k, v in head[2].items()}
    return outputs, tail[1], recorded, max(head[3], tail[3])


def _cat(a: Any, b: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return torch.cat((a, b))
    return {k: torch.cat((v, b[k])) for k, v in a.items()}


class _Attempt:
    """Where compiling one module, request and precision stands: which of ``_WRAPPERS``
    is in use (all tried and failed: ``len(_WRAPPERS)``) and its compiled function."""

    def __init__(self) -> None:
        self.options = 0
        self.function: Callable[..., Any] | None = None
        self.ran = False  # the function has run once: compiled


def _compile(level: Level, request: Request, options: Mapping[str, Any]) -> Callable[..., Any]:
    def chunk(xs: dict[str, torch.Tensor], state: dict[str, Any]) -> Any:
        recorded: dict[Any, torch.Tensor] = {}
        values, new_state = _chunk(level, xs, state, request, recorded)
        return {name: values[name] for name in level.outputs}, new_state, recorded

    # dynamo caches compiled code per code object, at most a few variants each: a code
    # object of its own per module keeps one module's graphs from evicting another's
    own = types.FunctionType(
        chunk.__code__.replace(), chunk.__globals__, "nirbridge_chunk", None, chunk.__closure__
    )
    return torch.compile(own, fullgraph=True, dynamic=True, options=dict(options))


def _scan(body: Callable[..., Any], init: Any, xs: Any) -> Any:
    """torch's scan for any pytree carry: ``carry, ys = body(carry, x_t)`` per step.

    scan takes tuples, lists and dicts of tensors (no NamedTuples) and no output that
    aliases another, so the carry travels as its flat leaves and outputs are copies. A
    carry holding one tensor twice (a neuron's ``v`` that is also its delayed output)
    gets the second as ``v * 1.0``, an exact copy: with two identical copies, inductor's
    C++ wrapper (torch 2.13 and 2.14) returns one buffer for both and crashes. torch 2.14
    would fold ``v * 1.0`` into ``v``, so ``_OPTIONS`` turns that folding off.
    """
    from torch._higher_order_ops.scan import scan
    from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

    leaves, spec = tree_flatten(init)

    def flat_body(carry: list[torch.Tensor], x_t: Any) -> Any:
        new, ys = body(tree_unflatten(list(carry), spec), x_t)
        new_leaves, _ = tree_flatten(new)
        copies = [
            leaf * 1.0 if any(leaf is other for other in new_leaves[:i]) else leaf.clone()
            for i, leaf in enumerate(new_leaves)
        ]
        return copies, tree_map(torch.clone, ys)

    final, ys = scan(flat_body, leaves, xs)
    return tree_unflatten(list(final), spec), ys


def _chunk(
    level: Level,
    xs: Mapping[str, torch.Tensor],
    state: Any,
    request: Request,
    recorded: dict[Any, torch.Tensor],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`nirbridge.schedule.run_chunk` with the time loops as scans (traced by dynamo)."""
    node_states, delayed = state[NODES], state[DELAYED]
    new_nodes = dict(node_states)
    new_delayed = dict(delayed)
    values: dict[str, Any] = dict(xs)
    for members, cyclic in level.units:
        if cyclic:
            _cycle(level, members, values, new_nodes, new_delayed, request, recorded)
            continue
        name = members[0]
        if name in xs:
            continue
        x = node_input([values[s] for s, _ in level.incoming[name]])
        if name not in level.modules:
            values[name] = x
            continue
        module = level.modules[name]
        if name in level.children:
            child = level.children[name]
            inner, new_nodes[name] = _chunk(
                child, {child.inputs[0]: x}, node_states[name], request.nested.get(name, Request()), recorded
            )
            out = inner[child.outputs[0]] if len(child.outputs) == 1 else None
        elif level.stateful[name]:
            wanted = request.wanted(name)

            def body(carry: Any, x_t: torch.Tensor, module: Any = module, wanted: Any = wanted) -> Any:
                out_t, carry = module(x_t, state=carry)
                return carry, (out_t, _variables(module, carry, wanted))

            new_nodes[name], (out, traces) = _scan(body, node_states[name], x)
            for var, trace in traces.items():
                recorded[(level.prefix + name, var)] = trace
        else:
            flat = module(x.reshape(-1, *x.shape[2:]))
            out = flat.reshape(x.shape[0], x.shape[1], *flat.shape[1:])
        values[name] = out
        if name in request.outputs and out is not None:
            recorded[(level.prefix + name, None)] = out
    return values, {
        NODES: {name: new_nodes[name] for name in level.modules if level.stateful[name]},
        DELAYED: {source: new_delayed[source] for source in level.delayed_sources},
    }


def _variables(
    module: torch.nn.Module, state: Any, wanted: set[str] | bool | None
) -> dict[str, torch.Tensor]:
    if wanted is False:
        return {}
    variables = state_variables(module, state)
    return variables if wanted is None else {k: v for k, v in variables.items() if k in wanted}


def _cycle(
    level: Level,
    members: list[str],
    values: dict[str, Any],
    new_nodes: dict[str, Any],
    new_delayed: dict[str, Any],
    request: Request,
    recorded: dict[Any, torch.Tensor],
) -> None:
    inside = set(members)
    outside = {s for name in members for s, _ in level.incoming[name] if s not in inside}
    if any(not isinstance(values[s], torch.Tensor) for s in outside):
        raise TypeError("a cycle fed by a subgraph with several outputs")
    # the sequences the loop reads from outside it, each once (scan refuses aliases); the
    # first Input gives the batch size of nodes fed only by delayed edges
    reference = level.inputs[0]
    sequences = {s: values[s] for s in dict.fromkeys([*sorted(outside), reference])}
    stateful = [n for n in members if level.stateful[n]]
    late_sources = [s for s in level.delayed_sources if s in inside]
    carry = (
        {n: new_nodes[n] for n in stateful},
        {s: new_delayed[s] for s in late_sources},
    )

    def body(carry: Any, inputs: Any) -> Any:
        states, previous = carry
        states = dict(states)
        outside_t = inputs
        current: dict[str, Any] = {}
        traces: dict[Any, torch.Tensor] = {}
        for name in members:
            x = node_input(
                [current[s] if s in inside else outside_t[s] for s, late in level.incoming[name] if not late],
                [previous[s] for s, late in level.incoming[name] if late],
                lambda name=name: (outside_t[reference], level.late_shapes[name]),
            )
            module = level.modules[name]
            if name in level.children:
                child = level.children[name]
                inner_records: dict[Any, torch.Tensor] = {}
                inner, states[name] = _chunk(
                    child,
                    {child.inputs[0]: x.unsqueeze(0)},
                    states[name],
                    request.nested.get(name, Request()),
                    inner_records,
                )
                out = inner[child.outputs[0]][0]
                for key, value in inner_records.items():
                    traces[key] = value[0]
            elif level.stateful[name]:
                out, states[name] = module(x, state=states[name])
                for var, value in _variables(module, states[name], request.wanted(name)).items():
                    traces[(level.prefix + name, var)] = value
            else:
                out = module(x)
            current[name] = out
        new_previous = {s: current[s] for s in late_sources}
        return (states, new_previous), ({n: current[n] for n in members}, traces)

    (states, previous), (outs, traces) = _scan(body, carry, sequences)
    for name, value in states.items():
        new_nodes[name] = value
    for source, value in previous.items():
        new_delayed[source] = value
    for name in members:
        values[name] = outs[name]
        if name in request.outputs:
            recorded[(level.prefix + name, None)] = outs[name]
    recorded.update(traces)

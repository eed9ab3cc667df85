"""Native models in :func:`nirbridge.run` and :func:`nirbridge.verify`: how a simulator's
own model is stepped, and which of its layers became which NIR node.

A *native* model is one nirbridge did not build: an snntorch, norse or spikingjelly
network, or plain torch. :func:`plan` reads how it is called, from its ``forward``
signature and its modules, and :func:`run_native` steps it over a sequence
``[T, B, ...]`` the way the simulator's own tutorials loop over time:

======================  =====================================================================
form                    how one run calls it
======================  =====================================================================
``"state"``             ``out, state = model(x[t], state=state)`` from ``state=None``
                        (norse's ``SequentialState`` and cells, any ``forward(x, state)``);
                        once over the whole sequence where its modules take sequences
                        (norse's ``LIF``, ``LIFBox``, ...)
``"arguments"``         ``out, *state = model(x[t], *state)``: the arguments after ``x`` that
                        default to ``None`` are the state (snntorch's tutorials,
                        ``forward(self, x, mem=None) -> (spk, mem)``); the result is
                        ``(out, *state)``, or the state alone where its first argument is
                        the spikes (``forward(x, spk=None, mem=None) -> (spk, mem)``)
``"hidden"``            ``out = model(x[t])``, the state kept inside modules between calls
                        (snntorch's neurons, with ``init_hidden`` True or False;
                        spikingjelly in ``step_mode="s"``); once over the whole sequence in
                        ``step_mode="m"``
``"stateless"``         ``out = model(x)`` once over all ``T·B`` rows (no module keeps state)
======================  =====================================================================

Each run starts from the model's own initial state (the simulators' resets: snntorch's
``reset_mem``, spikingjelly's ``reset``; ``None`` for the state arguments) and leaves
the model as it found it: what its neurons held, and every buffer (batch norm's
statistics), is put back after. The state after the run is a
:class:`nirbridge.state.State`, ``{"passed": ..., "hidden": ...}``: ``"passed"`` what
forward returned as its state (the ``"state"`` and ``"arguments"`` forms),
``"hidden"`` what the neurons keep inside them, ``{module path: {"mem": tensor}}``
(where any does); passed back as ``state=``, it continues the run exactly. A model
none of whose modules keeps state between calls returns ``None``.

Every other form is refused with :class:`NativeModelError`, which names the one-line
wrapper that says how to call it: :class:`Stateless`, :class:`Steps` (one call per
step) or :class:`WholeSequence` (one call with ``[T, B, ...]``). Nothing is guessed.

The simulators' knowledge lives in their adapters, which register a
:class:`NativeSimulator` here; the core finds the adapter of a model's modules by the
package they come from.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from .errors import InputError, NirBridgeError, ParameterError
from .limits import allocation_failure, check_memory
from .state import State, StateError, same_form

__all__ = [
    "NativeModelError",
    "NativePlan",
    "NativeSimulator",
    "Stateless",
    "Steps",
    "WholeSequence",
    "layer_names",
    "plan",
    "register",
    "run_native",
]


class NativeModelError(NirBridgeError, ValueError):
    """A native model whose form :func:`nirbridge.run` cannot step safely; the message
    names the wrapper that says how to call it."""


# ----------------------------------------------------------------------------- wrappers


class _Wrapper(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise ParameterError(
                f"{type(self).__name__}(model): give a torch.nn.Module, got {type(model).__name__}"
            )
        self.model = model

    def forward(self, x: Any) -> Any:
        return self.model(x)


class Stateless(_Wrapper):
    """``Stateless(model)``: the model keeps no state between calls and treats the rows of
    its input alone, so :func:`nirbridge.run` calls it once over all ``T·B`` rows of a
    sequence (a custom layer nirbridge cannot vouch for). torch's own layers that mix
    rows (softmax over dim 0 or an implicit dim, batch norm without running statistics,
    dropout in training mode, attention) are still stepped, ``model(x[t])`` per step."""


class Steps(_Wrapper):
    """``Steps(model, reset=None)``: one call is one time step, ``out = model(x[t])``,
    with whatever state the model keeps inside it; ``reset(model)`` (default: the
    simulators' own resets of their neurons) is called before a run. For models whose
    neurons are called more than once per step on purpose."""

    def __init__(self, model: nn.Module, reset: Callable[[nn.Module], Any] | None = None) -> None:
        super().__init__(model)
        self.reset = reset


class WholeSequence(_Wrapper):
    """``WholeSequence(model)``: one call takes the whole sequence ``[T, B, ...]`` and
    returns ``[T, B, ...]`` (a ``forward`` that loops over time itself, as snntorch's
    tutorials write it, or spikingjelly's multi-step mode); the simulators' resets run
    before the call."""


_WRAPPERS = (Stateless, Steps, WholeSequence)


# ----------------------------------------------------------------------------- simulators


class NativeSimulator:
    """What run and verify need to know of one simulator; an adapter subclasses it and
    :func:`register` s an instance. Every method takes one module of a model."""

    name = "torch"
    no_dt = "plain torch has no time step"
    """Why a model of this simulator has no ``dt``, for :attr:`nirbridge.Run.dt_from`."""

    def owns(self, module: nn.Module) -> bool:
        """Whether ``module`` is one of this simulator's."""
        return False

    def keeps_state(self, module: nn.Module) -> bool:
        """Whether ``module`` keeps state inside it between calls."""
        return False

    def is_neuron(self, module: nn.Module) -> bool:
        """Whether the first item of ``module``'s output is spikes."""
        return self.keeps_state(module)

    def takes_state(self, module: nn.Module) -> bool:
        """Whether ``module`` keeps its state only in what it returns (norse's cells), so
        a model must pass it on."""
        return False

    def stateless(self, module: nn.Module) -> bool:
        """Whether ``module`` (a leaf) keeps no state at all."""
        return False

    def whole_sequence(self, module: nn.Module) -> bool | None:
        """Whether ``module`` takes whole sequences ``[T, B, ...]`` (True), one step
        (False), or either (None)."""
        return None

    def folds(self, module: nn.Module) -> bool:
        """Whether ``module`` takes ``[T, B, ...]`` and gives the modules inside it the
        time axis folded into the batch, ``[T·B, ...]`` (spikingjelly's SeqToANNContainer)."""
        return False

    def reset(self, module: nn.Module) -> None:
        """Put a :meth:`keeps_state` module back to its initial state."""

    def variables(self, module: nn.Module) -> dict[str, Any]:
        """A :meth:`keeps_state` module's state variables, by name."""
        return {}

    def load(self, module: nn.Module, variables: Mapping[str, Any]) -> None:
        """Set a :meth:`keeps_state` module's state variables."""
        for name, value in variables.items():
            setattr(module, name, value)

    def snapshot(self, module: nn.Module) -> Any:
        """What a run may change in a module besides its buffers (which every run puts
        back for every module): its public attributes, whatever their type (a neuron's
        ``mem``, a ``reset_mechanism`` or a Python counter a forward rebinds)."""
        return {k: v for k, v in vars(module).items() if not k.startswith("_")}

    def restore(self, module: nn.Module, snapshot: Any) -> None:
        """Undo a run: :meth:`snapshot` 's attributes back, those the run added gone."""
        attributes = vars(module)
        for key in [k for k in attributes if not k.startswith("_") and k not in snapshot]:
            del attributes[key]
        attributes.update(snapshot)

    def dt(self, module: nn.Module) -> float | None:
        """``module``'s own time step in seconds, or None."""
        return None

    def to_nir(self, model: nn.Module, example_input: Any) -> Any:
        """The adapter's export of ``model`` (for the names of its layers)."""
        from .trace import torch_to_nir

        return torch_to_nir(model, example_input=example_input)


class _Own(NativeSimulator):
    """nirbridge's own neurons inside a user's torch model (``forward(x, state)``): they
    keep their state only in what they return, integrate at their ``dt`` in seconds."""

    name = "nirbridge"

    def owns(self, module: nn.Module) -> bool:
        from .neurons.modules import Delay, Neuron
        from .neurons.simulator import SimulatorNeuron

        return isinstance(module, (Neuron, SimulatorNeuron, Delay))

    def is_neuron(self, module: nn.Module) -> bool:
        from .engine.schedule import SPIKING

        return getattr(getattr(module, "nir_type", None), "__name__", "") in SPIKING

    def takes_state(self, module: nn.Module) -> bool:
        return True

    def dt(self, module: nn.Module) -> float | None:
        value = getattr(module, "dt", None)
        return float(value) if isinstance(value, (int, float)) else None


_REGISTRY: dict[str, NativeSimulator] = {"nirbridge": _Own()}
PASSED, HIDDEN = "passed", "hidden"
"""The keys of a native run's state: what forward is passed (its ``state=`` or state
arguments) and what the neurons keep inside (by module path and variable)."""
_ADAPTERS = {"snntorch": "snntorch", "norse": "norse", "spikingjelly": "spikingjelly"}
"""Top-level package of a module type -> the adapter that knows it (imported lazily)."""
_TORCH = NativeSimulator()


def register(simulator: NativeSimulator) -> None:
    """Make ``simulator`` known to run and verify (an adapter does this when imported)."""
    _REGISTRY[simulator.name] = simulator


def simulators_of(model: nn.Module) -> list[NativeSimulator]:
    """The registered simulators that own modules of ``model``, importing the adapters
    of the packages its module types come from."""
    packages = {cls.__module__.split(".")[0] for m in model.modules() for cls in type(m).__mro__}
    for package in sorted(packages & set(_ADAPTERS)):
        if _ADAPTERS[package] not in _REGISTRY:
            importlib.import_module(f"nirbridge.adapters.{_ADAPTERS[package]}")
    return [sim for sim in _REGISTRY.values() if any(sim.owns(m) for m in model.modules())]


def _known_stateless(module: nn.Module) -> bool:
    """A leaf of torch.nn (or nirbridge's layers) that keeps nothing between calls and
    treats rows independently, so a sequence can run as ``T·B`` rows."""
    if isinstance(module, (nn.RNNBase, nn.RNNCellBase, nn.MultiheadAttention, nn.Transformer)):
        return False
    if isinstance(module, nn.modules.batchnorm._NormBase) and module.training:
        return False  # statistics over the batch (all T·B rows at once) and running averages
    return type(module).__module__.startswith(("torch.nn.modules.", "nirbridge.layers"))


_ROWWISE = tuple(
    getattr(nn, name)
    for name in (
        "Identity Linear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d "
        "MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d LPPool1d LPPool2d LPPool3d "
        "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d "
        "AdaptiveMaxPool3d ReLU ReLU6 LeakyReLU PReLU ELU SELU CELU GELU SiLU Mish Sigmoid Tanh Hardtanh "
        "Hardsigmoid Hardswish Softplus Softsign Tanhshrink Threshold LogSigmoid Hardshrink Softshrink "
        "LayerNorm GroupNorm RMSNorm LocalResponseNorm Embedding Upsample PixelShuffle PixelUnshuffle "
        "ZeroPad1d ZeroPad2d ZeroPad3d ConstantPad1d ConstantPad2d ConstantPad3d ReflectionPad1d "
        "ReflectionPad2d ReflectionPad3d ReplicationPad1d ReplicationPad2d ReplicationPad3d"
    ).split()
    if hasattr(nn, name)
)
"""torch.nn leaves that compute each row of their input's leading axis from that row
alone, whatever that axis holds: a batch ``[B, ...]`` or the rows ``[T·B, ...]``."""


def _rowwise(module: nn.Module) -> bool | None:
    """Whether ``module`` (any module of a stateless model, containers included) treats
    the rows of its input's leading axis independently, so that ``[T·B, ...]`` in one
    call gives what a loop over the T steps gives: True, False (a torch.nn module known
    to mix them: softmax over dim 0 or an implicit dim, batch statistics, attention,
    dropout drawing its masks in another order), or None (a forward nirbridge cannot read)."""
    kind = type(module)
    if module._forward_hooks or module._forward_pre_hooks:  # a hook may read or change any row
        return None
    if isinstance(module, nn.Sequential):
        return kind.forward is nn.Sequential.forward or None
    if kind in (nn.Softmax, nn.LogSoftmax, nn.Softmin, nn.GLU):
        return module.dim is not None and module.dim >= 1  # dim 0, None (implicit) or < 0 may be axis 0
    if kind is nn.Flatten:
        return module.start_dim >= 1 and (module.end_dim < 0 or module.end_dim >= module.start_dim)
    if kind is nn.Unflatten:
        return isinstance(module.dim, int) and module.dim >= 1
    if isinstance(module, nn.modules.batchnorm._NormBase) and kind.__module__.startswith("torch.nn.modules."):
        # statistics over the rows given: in training, and always without running statistics
        return not module.training and module.track_running_stats
    if isinstance(module, nn.modules.dropout._DropoutNd) and kind.__module__.startswith("torch.nn.modules."):
        return not module.training  # in training: the masks of all T·B rows drawn at once
    if kind in _ROWWISE or kind.__module__.startswith("nirbridge.layers"):
        return True
    if kind.__module__.startswith("torch.nn.modules."):
        return False  # attention, transformers, Softmax2d, ... (rows mixed, or unknown to nirbridge)
    return None


# ----------------------------------------------------------------------------- plan


@dataclasses.dataclass
class NativePlan:
    """How :func:`run_native` steps a native model (see the module's table).

    Attributes:
        model: the model itself (a wrapper's ``model``).
        form: ``"state"``, ``"arguments"``, ``"hidden"`` or ``"stateless"``.
        sequence: one call takes the whole sequence ``[T, B, ...]``.
        arguments: the state arguments (``"arguments"`` form).
        holders: module path -> (module, simulator) of the modules keeping state inside.
        neurons: modules whose output's first item is spikes.
        simulators: the simulators whose modules the model holds.
        dt: the model's own time step in seconds, or None; ``dt_from`` says where it
            comes from, or why there is none.
        several_calls: a neuron may be called more than once per step (``Steps``).
        reset: the wrapper's reset, if any.
        folded: paths of the modules that see ``[T·B, ...]`` in a whole-sequence call.
    """

    model: nn.Module
    form: str
    sequence: bool
    arguments: tuple[str, ...]
    holders: dict[str, tuple[nn.Module, NativeSimulator]]
    neurons: dict[str, nn.Module]
    simulators: list[NativeSimulator]
    dt: float | None
    dt_from: str
    several_calls: bool = False
    reset: Callable[[nn.Module], Any] | None = None
    folded: frozenset[str] = frozenset()
    rows: bool = False
    """``"stateless"`` form: one call over all ``T·B`` rows (every module row-wise, or
    ``Stateless``); else one call per step, as the model's own loop calls it."""


def _wrap_hint(name: str) -> str:
    return (
        f"Say how to call it with a one-line wrapper: nirbridge.native.WholeSequence({name}) if forward "
        f"takes the whole sequence [T, B, ...] (a loop over time inside forward), nirbridge.native.Steps"
        f"({name}) if one call is one step with the state kept inside, nirbridge.native.Stateless({name}) "
        "if it keeps no state; or give forward a state argument, forward(x, state=None) -> (out, state)"
    )


def plan(module: nn.Module) -> NativePlan:
    """How to step ``module`` (see the module's table), or :class:`NativeModelError`."""
    wrapper = module if isinstance(module, _WRAPPERS) else None
    model = wrapper.model if wrapper is not None else module
    name = type(model).__name__
    simulators = simulators_of(model)
    owner = {id(m): sim for sim in simulators for m in model.modules() if sim.owns(m)}

    def having(ask: Callable[[NativeSimulator, nn.Module], Any]) -> dict[str, nn.Module]:
        """The modules (by path) whose simulator says yes to ``ask``."""
        return {path: m for path, m in model.named_modules() if id(m) in owner and ask(owner[id(m)], m)}

    holders = {path: (m, owner[id(m)]) for path, m in having(lambda sim, m: sim.keeps_state(m)).items()}
    neurons = having(lambda sim, m: sim.is_neuron(m))
    modes = _modes(model, owner)
    dt, dt_from = _own_dt(model, owner, simulators)
    folding = having(lambda sim, m: sim.folds(m))
    folded = frozenset(
        path for path, _ in model.named_modules() if any(path.startswith(f"{f}.") for f in folding)
    )
    common = dict(
        holders=holders, neurons=neurons, simulators=simulators, dt=dt, dt_from=dt_from, folded=folded
    )
    if isinstance(wrapper, Stateless):  # the user vouches for its layers; torch's own that mix rows step
        rows = all(_rowwise(m) is not False for m in model.modules())
        return NativePlan(model, "stateless", False, (), rows=rows, **common)
    if isinstance(wrapper, WholeSequence):
        return NativePlan(model, "hidden", True, (), **common)
    if isinstance(wrapper, Steps):
        return NativePlan(model, "hidden", False, (), several_calls=True, reset=wrapper.reset, **common)
    if modes == {True, False}:
        raise NativeModelError(
            f"{name} mixes modules that take whole sequences [T, B, ...] (spikingjelly's step_mode='m', "
            "norse's LIF, LIFBox, ...) with modules that take one step; nirbridge.run cannot call it "
            "one way. Put them all in one mode (spikingjelly: functional.set_step_mode(model, 'm'))"
        )
    sequence = modes == {True}
    if "" in holders:  # a simulator's neuron alone (its forward's own arguments are not the form)
        return NativePlan(model, "hidden", sequence, (), **common)
    recurrent = [
        f"{path!r} ({type(m).__name__})" if path else f"the model itself ({name})"
        for path, m in model.named_modules()
        if isinstance(m, (nn.RNNBase, nn.RNNCellBase))
    ]
    if recurrent:
        raise NativeModelError(
            f"{name}: {', '.join(recurrent)} is one of torch's recurrent layers, which take a whole "
            "sequence (or their state as (h, c)); nirbridge.run cannot tell how forward passes them. "
            + _wrap_hint("model")
        )
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        raise NativeModelError(
            f"cannot read the signature of {name}.forward. {_wrap_hint('model')}"
        ) from None
    if not parameters or parameters[0].kind not in (
        parameters[0].POSITIONAL_ONLY,
        parameters[0].POSITIONAL_OR_KEYWORD,
    ):
        raise NativeModelError(f"{name}.forward takes no input argument x. {_wrap_hint('model')}")
    rest = parameters[1:]
    if any(p.name == "state" for p in rest):
        return NativePlan(model, "state", sequence, (), **common)
    required = [
        p.name for p in rest if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise NativeModelError(
            f"{name}.forward takes {[parameters[0].name, *required]} without defaults; nirbridge.run passes "
            f"one input. Give the other arguments defaults (None for state). {_wrap_hint('model')}"
        )
    arguments = tuple(p.name for p in rest if p.default is None and p.kind is p.POSITIONAL_OR_KEYWORD)
    if arguments:
        return NativePlan(model, "arguments", sequence, arguments, **common)
    if holders:
        return NativePlan(model, "hidden", sequence, (), **common)
    passing = list(having(lambda sim, m: sim.takes_state(m) and not (sequence and sim.whole_sequence(m))))
    if passing:
        raise NativeModelError(
            f"{name}.forward(x) has no state argument, but {passing[0]!r} "
            f"({type(model.get_submodule(passing[0])).__name__}) keeps its state only in what it "
            "returns: forward either loops over time inside, or starts "
            f"{passing[0]!r} afresh at every call. {_wrap_hint('model')}"
        )
    if sequence:  # one call over [T, B, ...] from each module's own start: a whole, fresh run
        return NativePlan(model, "hidden", True, (), **common)
    unknown = [
        f"{path!r} ({type(m).__name__})" if path else f"the model itself ({name})"
        for path, m in model.named_modules()
        if not list(m.children())
        and not _known_stateless(m)
        and not (id(m) in owner and owner[id(m)].stateless(m))
    ]
    if unknown:
        more = " ..." if len(unknown) > 5 else ""
        raise NativeModelError(
            f"{name}: nirbridge.run cannot tell whether {', '.join(unknown[:5])}{more} "
            f"{'keeps' if len(unknown) == 1 else 'keep'} state between calls or "
            f"{'mixes' if len(unknown) == 1 else 'mix'} the rows of a batch. {_wrap_hint('model')}"
        )
    rows = all(_rowwise(m) for m in model.modules())
    return NativePlan(model, "stateless", False, (), rows=rows, **common)


def _modes(model: nn.Module, owner: Mapping[int, NativeSimulator]) -> set[bool]:
    """Whole sequence (True) or one step (False), over the modules that say; the
    modules inside one that takes whole sequences (a container) do not count."""
    modes: set[bool] = set()

    def visit(m: nn.Module) -> None:
        sim = owner.get(id(m))
        mode = sim.whole_sequence(m) if sim is not None else None
        if mode is not None:
            modes.add(mode)
            if mode:
                return
        for child in m.children():
            visit(child)

    visit(model)
    return modes


def _own_dt(
    model: nn.Module, owner: Mapping[int, NativeSimulator], simulators: list[NativeSimulator]
) -> tuple[float | None, str]:
    found: dict[float, str] = {}
    for path, m in model.named_modules():
        sim = owner.get(id(m))
        value = sim.dt(m) if sim is not None else None
        if value is not None:
            found.setdefault(float(value), f"{sim.name}'s {type(m).__name__} {path!r}")
    if len(found) == 1:
        ((value, where),) = found.items()
        return value, f"the dt of {where} (seconds)"
    if found:
        listed = ", ".join(f"{v:g} s ({w})" for v, w in found.items())
        return None, f"none: its modules step at different dt, {listed}"
    if simulators:
        return None, "none: " + "; ".join(sim.no_dt for sim in simulators)
    return None, "none: " + _TORCH.no_dt


# ----------------------------------------------------------------------------- names


def layer_names(
    native: NativePlan, example: torch.Tensor, given: Mapping[str, str] | None = None
) -> tuple[dict[str, list[str]], str | None]:
    """Module path -> the NIR node names its calls became, in call order, from the
    adapter's own export of the model (``given``: node name -> path, instead); and why
    there are none, if the export fails."""
    if given is not None:
        sources = dict(given)
        problem = None
    else:
        from .trace import node_sources

        simulator = native.simulators[0] if len(native.simulators) == 1 else _TORCH
        problem = None
        with node_sources() as sources, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                simulator.to_nir(native.model, example if native.sequence else example[0])
            except NirBridgeError as error:
                problem = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    names: dict[str, list[str]] = {}
    for node, path in sources.items():
        try:
            native.model.get_submodule(path)
        except AttributeError:
            raise ParameterError(
                f"layers: {path!r} (for node {node!r}) is not a module of the model"
            ) from None
        names.setdefault(path, []).append(node)
    return names, problem


class _Recorder:
    """Forward hooks that keep each named layer's output (its first item), per call."""

    def __init__(self, model: nn.Module, names: Mapping[str, list[str]], folded: frozenset[str]) -> None:
        self.names = names
        self.folded = folded
        self.calls: dict[str, list[torch.Tensor]] = {path: [] for path in names}
        self.handles = [model.get_submodule(path).register_forward_hook(self._hook(path)) for path in names]

    def _hook(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            out = _first(output)
            if isinstance(out, torch.Tensor):
                # a copy: a later in-place op (ReLU(inplace=True)) must not change what was recorded;
                # clone keeps autograd's graph, so records stay differentiable
                self.calls[path].append(out.clone())

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def result(
        self, steps: int, batch: int, stepped: bool, flat: bool
    ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """Records ``[T, B, ...]`` by node name, and why a layer could not be recorded:
        ``stepped``, one call per step; else one call per run, over ``[T·B, ...]`` for
        ``flat`` runs and the folded paths, over ``[T, B, ...]`` otherwise."""
        records: dict[str, torch.Tensor] = {}
        problems: dict[str, str] = {}
        for path, nodes in self.names.items():
            calls = self.calls[path]
            # one call per step (a stepped run, or inside spikingjelly's MultiStepContainer)
            # or one per run; the run's own form decides where the two counts coincide
            each_step = len(calls) == steps * len(nodes) and (stepped or len(calls) != len(nodes))
            if not each_step and len(calls) != len(nodes):
                expected = steps * len(nodes) if stepped else len(nodes)
                for node in nodes:
                    problems[node] = f"{path or 'the model'} was called {len(calls)} times, not {expected}"
                continue
            for i, node in enumerate(nodes):
                if each_step:
                    records[node] = torch.stack(calls[i :: len(nodes)])
                    continue
                value = calls[i]
                folded = flat or path in self.folded
                if not folded and tuple(value.shape[:2]) == (steps, batch):
                    records[node] = value
                elif value.dim() >= 1 and value.shape[0] == steps * batch:  # rows, or one step at T = 1
                    records[node] = value.reshape(steps, batch, *value.shape[1:])
                else:
                    problems[node] = (
                        f"{path} returned {list(value.shape)}, neither [T, B, ...] nor [T·B, ...]"
                    )
        return records, problems


def _first(output: Any) -> Any:
    """A call's output: snntorch's neurons return ``(spk, mem, ...)``, norse's ``(z, state)``."""
    return output[0] if isinstance(output, (tuple, list)) and output else output


# ----------------------------------------------------------------------------- run


@dataclasses.dataclass
class NativeResult:
    """What :func:`run_native` gives :func:`nirbridge.run` to assemble a ``Run`` from."""

    output: torch.Tensor
    state: Any
    records: dict[str, torch.Tensor]
    spiking: frozenset[str]
    spiking_output: bool
    dt: float | None
    dt_from: str
    unrecorded: dict[str, str]


def time_step(native: NativePlan, dt: float | None) -> tuple[float | None, str]:
    """The run's dt: the model's own, or ``dt`` where the model has none (checked
    against the model's own otherwise)."""
    if dt is None:
        return native.dt, native.dt_from
    if native.dt is not None and not math.isclose(dt, native.dt, rel_tol=1e-12):
        raise ParameterError(
            f"run(dt={dt:g}): {type(native.model).__name__} steps at its own dt = {native.dt:g} s "
            f"({native.dt_from}); drop dt=, or build the model with dt={dt:g}"
        )
    return dt, native.dt_from if native.dt is not None else "run(dt=...)"


def run_native(
    module: nn.Module,
    x: torch.Tensor,
    *,
    state: Any = None,
    record: Any = (),
    dt: float | None = None,
    layers: Mapping[str, str] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> NativeResult:
    """Run a native model over ``x`` ``[T, B, ...]`` (see the module's table); with
    ``record="outputs"`` (or ``"all"``), also every layer that became a NIR node, under
    that node's name (``layers``: node name -> module path, to name them yourself)."""
    native = plan(module)
    run_dt, dt_from = time_step(native, dt)
    steps, batch = x.shape[0], x.shape[1]
    names: dict[str, list[str]] = {}
    unrecorded: dict[str, str] = {}
    if record not in ((), [], None):
        names, problem = layer_names(native, x, layers)
        if problem is not None:
            unrecorded["*"] = f"its layers have no NIR names: the export failed ({problem})"
        names = _chosen(names, record, type(native.model).__name__)
    owners = {id(m): sim for m, sim in native.holders.values()}
    snapshots = [(m, owners.get(id(m), _TORCH)) for m in native.model.modules()]
    snapshots = [(m, sim, sim.snapshot(m)) for m, sim in snapshots]  # every module's attributes
    buffers = _buffers(native.model)  # neurons' state, batch norm's statistics
    recorder: _Recorder | None = None
    spike_hooks: list[Any] = []
    counters: list[Any] = []
    try:
        passed = _start(native, state, x, lambda: _put_back(snapshots, buffers))
        recorder = _Recorder(native.model, names, native.folded) if names else None
        spikes: list[Any] = []  # the neurons' outputs at the first step, kept (so no id is reused)
        spike_hooks = [
            m.register_forward_hook(lambda _m, _a, out: spikes.append(_first(out)))
            for m in native.neurons.values()
        ]
        calls: dict[str, int] = {}
        counters = [
            m.register_forward_hook(
                lambda _m, _a, _o, path=path: calls.__setitem__(path, calls.get(path, 0) + 1)
            )
            for path, (m, _) in native.holders.items()
        ]
        output, passed, spiking_output = _loop(
            native, x, passed, spikes, spike_hooks, calls, counters, on_step
        )
        flat = native.form == "stateless" and native.rows
        stepped = not native.sequence and not flat
        records, problems = recorder.result(steps, batch, stepped, flat) if recorder else ({}, {})
        unrecorded.update(problems)
        spiking = frozenset(
            node
            for path, nodes in names.items()
            if path in native.neurons
            for node in nodes
            if node in records
        )
        parts: dict[str, Any] = {}
        if native.form in ("state", "arguments"):
            parts[PASSED] = passed
        if native.holders:
            parts[HIDDEN] = {path: dict(sim.variables(m)) for path, (m, sim) in native.holders.items()}
        new_state = State(parts) if parts else None
    finally:
        for handle in (*spike_hooks, *counters):
            handle.remove()
        if recorder is not None:
            recorder.remove()
        _put_back(snapshots, buffers)
    return NativeResult(output, new_state, records, spiking, spiking_output, run_dt, dt_from, unrecorded)


def _chosen(names: dict[str, list[str]], record: Any, model: str) -> dict[str, list[str]]:
    """The layers ``record`` asks for: ``"all"``/``"outputs"``, or NIR node names."""
    if record in ("all", "outputs"):
        return names
    from .engine.schedule import RecordError

    wanted = [record] if isinstance(record, str) else record
    if not isinstance(wanted, (list, tuple, set, frozenset)) or not all(isinstance(k, str) for k in wanted):
        raise RecordError(f"run(record={record!r}): give 'outputs', or a list of NIR node names")
    known = {node for nodes in names.values() for node in nodes}
    unknown = [k for k in wanted if k not in known]
    if unknown:
        raise RecordError(
            f"record: {unknown} name no layer of the native {model} (its layers record as the outputs of "
            f"the NIR nodes they became: {sorted(known) or 'none'}); a native model has no state "
            "variables to record"
        )
    return {path: nodes for path, nodes in names.items() if any(n in wanted for n in nodes)}


def _reset(native: NativePlan) -> None:
    """The model back to its own initial state (the wrapper's reset, or the simulators')."""
    if native.reset is not None:
        native.reset(native.model)
    else:
        for module, sim in native.holders.values():
            sim.reset(module)


def _put_back(snapshots: list[tuple[nn.Module, NativeSimulator, Any]], buffers: Buffers) -> None:
    """Every module's attributes and buffers as they were before the run."""
    for m, sim, snap in snapshots:
        sim.restore(m, snap)
    _restore_buffers(buffers)


def _template(native: NativePlan, x: torch.Tensor) -> dict[str, Any]:
    """The state a fresh run of the model over ``x``'s batch holds after its first step
    (one call over ``x[:1]`` for a whole-sequence model): what a state passed in must
    match. Stepped without autograd, on forked random generators; the caller puts the
    model back after."""
    name = type(native.model).__name__
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        _reset(native)
        first = x[:1] if native.sequence else x[0]
        passed = None
        if native.form == "state":
            _, passed = _pair(native.model(first, state=None), name)
        elif native.form == "arguments":
            _, passed = _split(native.model(first), native.arguments, name)
        else:
            native.model(first)
        hidden = {path: dict(sim.variables(m)) for path, (m, sim) in native.holders.items()}
    return {PASSED: passed, HIDDEN: hidden}


def _start(native: NativePlan, state: Any, x: torch.Tensor, put_back: Callable[[], None]) -> Any:
    """Reset the model to its own initial state, or load the ``state`` of an earlier run,
    checked against the state a fresh run of the model over ``x``'s batch returns
    (:func:`_template`); the state its forward is passed at the first step."""
    batch = x.shape[1]
    if state is None:
        _reset(native)
        return None
    name = type(native.model).__name__
    expected = ({PASSED} if native.form in ("state", "arguments") else set()) | (
        {HIDDEN} if native.holders else set()
    )
    layout = {PASSED: "the state its forward returns", HIDDEN: "{module path: {variable: tensor}}"}
    if not expected:
        raise StateError(
            f"state: {name} starts afresh at every call (nothing of it keeps state between calls), so "
            "there is no state to continue from; pass state=None"
        )
    if not isinstance(state, Mapping) or set(state) != expected:
        given = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
        raise StateError(
            f"state: run continues {name} from the state an earlier run of it returned, a dict with "
            + ", ".join(f"{k!r}: {layout[k]}" for k in sorted(expected))
            + f"; got {given}. Pass state=None to start from the model's own initial state"
        )
    passed = state.get(PASSED)
    if native.form == "arguments" and passed is not None:
        if not isinstance(passed, tuple) or len(passed) != len(native.arguments):
            raise StateError(
                f"state[{PASSED!r}]: {name}.forward takes the state arguments {list(native.arguments)}; "
                f"give a tuple of {len(native.arguments)} (what an earlier run returned)"
            )
    if HIDDEN in state:
        hidden = state[HIDDEN]
        if not isinstance(hidden, Mapping) or set(hidden) != set(native.holders):
            given = sorted(map(str, hidden)) if isinstance(hidden, Mapping) else type(hidden).__name__
            raise StateError(
                f"state[{HIDDEN!r}]: {name} keeps state in {sorted(native.holders)}; got {given}. It comes "
                "from another model: pass state=None"
            )
    template = _template(native, x)
    put_back()  # the template's step undone: attributes, buffers, random state
    for key in sorted(expected):
        same_form(state[key], template[key], f"state[{key!r}]", name, batch)
    for path, (module, sim) in native.holders.items():
        sim.reset(module)
        sim.load(module, state[HIDDEN][path])
    # new containers, the same tensors: a forward that writes into the list it is given
    # (norse's SequentialState) must not change the state the caller passed in
    return pytree.tree_map(lambda leaf: leaf, state.get(PASSED))


Buffers = list[tuple[nn.Module, dict[str, Any], dict[str, torch.Tensor]]]


def _buffers(model: nn.Module) -> Buffers:
    """Every module's buffers, as tensors and as values."""
    return [
        (m, dict(m._buffers), {name: b.detach().clone() for name, b in m._buffers.items() if b is not None})
        for m in model.modules()
    ]


def _restore_buffers(saved: Buffers) -> None:
    """Every buffer back, the same tensor with the same values (forward may have
    replaced it, as snntorch's ``self.mem = ...``, or changed it in place, as batch
    norm's running statistics), and none that the run added."""
    with torch.no_grad():
        for module, tensors, values in saved:
            module._buffers.clear()
            module._buffers.update(tensors)
            for name, value in values.items():
                tensor = tensors[name]
                if tensor.shape == value.shape and not torch.equal(tensor, value):
                    tensor.copy_(value)


def _loop(
    native: NativePlan,
    x: torch.Tensor,
    state: Any,
    spikes: list[Any],
    spike_hooks: list[Any],
    calls: dict[str, int],
    counters: list[Any],
    on_step: Callable[[int], None] | None,
) -> tuple[torch.Tensor, Any, bool]:
    model, name = native.model, type(native.model).__name__
    steps, batch = x.shape[0], x.shape[1]
    if (native.form == "stateless" and native.rows) or native.sequence:
        flat = native.form == "stateless"
        given = x.reshape(steps * batch, *x.shape[2:]) if flat else x
        try:
            if native.form == "state":
                result = model(given, state=state)
                out, state = _pair(result, name)
            elif native.form == "arguments":
                result = model(given, *(state or ()))
                out, state = _split(result, native.arguments, name)
            else:
                out = _first(model(given))
        except RuntimeError as error:
            failure = allocation_failure(
                error, f"{name} over {steps} steps at once", "run fewer steps per call and pass the state on"
            )
            if failure is None:
                raise
            raise failure from error
        spiking = any(out is s for s in spikes)
        out = _as_sequence(out, steps, batch, name, folded=flat)
        if on_step is not None:
            on_step(steps)
        return out, state, spiking
    outputs: list[torch.Tensor] = []
    spiking = False
    for t in range(steps):
        try:
            if native.form == "state":
                out, state = _pair(model(x[t], state=state), name)
            elif native.form == "arguments":
                out, state = _split(model(x[t], *(state or ())), native.arguments, name)
            else:
                out = _first(model(x[t]))
        except Exception as error:
            failure = allocation_failure(error, f"{name} at step {t}", "run a smaller batch")
            if failure is not None:
                raise failure from error
            if not isinstance(error, NirBridgeError):
                error.add_note(f"nirbridge: at step {t}")
            raise
        if not isinstance(out, torch.Tensor):
            raise NativeModelError(
                f"{name} returned {type(out).__name__} at step {t}, not a tensor. {_wrap_hint('model')}"
            )
        if t == 0:
            spiking = any(out is s for s in spikes)
            spikes.clear()
            for handle in (*spike_hooks, *counters):
                handle.remove()
            again = {path: n for path, n in calls.items() if n > 1}
            if again and not native.several_calls:
                path, n = next(iter(again.items()))
                raise NativeModelError(
                    f"{name}: one call stepped {path!r} {n} times; that looks like a loop over time inside "
                    f"forward, and run calls forward once per step. If forward takes the whole sequence, "
                    f"wrap it: nirbridge.native.WholeSequence(model); if the neuron is meant to step "
                    f"{n} times per step, nirbridge.native.Steps(model)"
                )
            if out.dim() == 0 or out.shape[0] != batch:
                if x.dim() == 2:  # no batch axis per step: most likely the input lacks an axis
                    raise InputError(
                        f"the input has shape {list(x.shape)}, so each step of {name} got [{x.shape[1]}], "
                        f"without a batch axis, and returned {list(out.shape)}; run takes time first, then "
                        f"batch: [T, B, ...]. For one time step of a batch of {x.shape[0]}, pass "
                        f"x.unsqueeze(0); for the sequence of one sample, x.unsqueeze(1)"
                    )
                raise NativeModelError(
                    f"{name} returned {list(out.shape)} for one step of a batch of {batch}; run takes time "
                    f"first [T, B, ...] and calls forward once per step. {_wrap_hint('model')}"
                )
            check_memory(  # the steps' outputs, then stacked into one tensor
                2 * steps * out.numel() * out.element_size(),
                f"the output of {name} over {steps} steps ({list(out.shape)} per step)",
                "run fewer steps per call and pass the state on, or a smaller batch",
                out.device,
            )
        outputs.append(out)
        if on_step is not None:
            on_step(1)
    return torch.stack(outputs), state, spiking


def _pair(result: Any, name: str) -> tuple[Any, Any]:
    if not isinstance(result, tuple) or len(result) != 2:
        raise NativeModelError(
            f"{name}.forward takes state= but returned {type(result).__name__}"
            f"{f' of {len(result)}' if isinstance(result, tuple) else ''}, not (output, state)"
        )
    return _first(result[0]), result[1]


def _split(result: Any, arguments: tuple[str, ...], name: str) -> tuple[Any, tuple[Any, ...]]:
    """``(out, *state)``; or ``state`` itself where its first argument is the spikes
    (``spk``, snntorch's ``forward(x, spk=None, mem=None) -> (spk, mem)``)."""
    k = len(arguments)
    spikes_first = arguments[0].startswith("spk")
    if not isinstance(result, tuple) or len(result) not in ((k, k + 1) if spikes_first else (k + 1,)):
        got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise NativeModelError(
            f"{name}.forward takes the state arguments {list(arguments)} and returned {got}; run passes "
            f"the state back at the next step, so it needs (output, {', '.join(arguments)}), in that "
            "order (or the state alone when its first argument is the spikes, spk). " + _wrap_hint("model")
        )
    return _first(result[0]), tuple(result[-k:])


def _as_sequence(out: Any, steps: int, batch: int, name: str, folded: bool) -> torch.Tensor:
    """A whole-sequence call's output as ``[T, B, ...]``: given ``[T, B, ...]`` it must
    return that; given the rows folded (``[T*B, ...]``, a stateless model) it must
    return them folded. Anything else changed the time or batch axis: refused, never
    reinterpreted."""
    if not isinstance(out, torch.Tensor):
        raise NativeModelError(f"{name} returned {type(out).__name__}, not a tensor")
    if folded and out.dim() >= 1 and out.shape[0] == steps * batch:
        return out.reshape(steps, batch, *out.shape[1:])
    if not folded and out.dim() >= 2 and tuple(out.shape[:2]) == (steps, batch):
        return out
    given = f"[T*B={steps * batch}, ...]" if folded else f"[T={steps}, B={batch}, ...]"
    raise NativeModelError(
        f"{name} returned {list(out.shape)} for the sequence {given}; a call over the whole sequence "
        f"must keep its time and batch axes. {_wrap_hint('model')}"
    )

"""spikingjelly 2.0 ⇄ NIR, exactly where NIR can express the model.

spikingjelly's neurons are discrete, with ``τ`` in steps (``k``) and a firing test
``h ≥ θ``. At the step ``dt`` (spikingjelly has none; :func:`to_nir` records 1e-4 unless
told otherwise), forward Euler gives (checked spike for spike in float64):

==========================================================  ==================================
spikingjelly                                                NIR
==========================================================  ==================================
``LIFNode(tau=k, decay_input=True, v_reset=c)``               LIF(tau=k·dt, r=1, v_leak=c,
                                                            v_threshold=θ⁻, v_reset=c)
``LIFNode(tau=k, decay_input=False, v_reset=c)``              LIF(tau=k·dt, r=k, v_leak=c, ...)
``ParametricLIFNode``                                       LIF with k = 1/sigmoid(w), its
                                                            learned time constant
``IFNode(v_reset=c)``                                       IF(r=1/dt, v_threshold=(θ−c)⁻,
                                                            v_reset=0): the membrane minus
                                                            where it starts (c when made;
                                                            NIR's IF starts at 0)
``layer.LinearRecurrentContainer(neuron, I, O)``            a subgraph: input → Affine(W[:, :I],
                                                            b) → neuron ⇄ Linear(W[:, I:]), the
                                                            recurrent edge carrying the
                                                            previous step
==========================================================  ==================================

θ⁻ is the float64 number just below θ: spikingjelly fires at ``h ≥ θ``, NIR at
``v > θ⁻``, the same test in float64 (in float32, θ⁻ rounds back to θ, so a membrane
exactly at θ fires in spikingjelly only). ``layer.Linear``, ``Conv1d``, ``Conv2d``,
``AvgPool2d`` and ``Flatten`` export as torch's layers do. Models in multi-step mode
(``step_mode="m"``) export as one step: :func:`to_nir` traces a single-step copy,
``SeqToANNContainer`` and ``MultiStepContainer`` unwrapped, on the first time step of
``example_input``.

What NIR cannot express exports with a :class:`nirbridge.LossyConversionWarning`
naming the module: the soft reset (``v_reset=None``: ``v ← v − θ``, exported as a
reset to 0), and a LIF whose ``v_reset`` was changed after it was made (spikingjelly
still starts it at the first value). A surrogate with ``spiking=False`` (graded
outputs) is refused. spikingjelly's other neurons (CUBALIF, adaptive, PSN and more) and
``ElementWiseRecurrentContainer`` (an opaque function) have no converter.

:func:`from_nir` builds modules whose LIF and IF nodes run as spikingjelly's
``LIFNode``/``IFNode`` (:class:`SpikingjellyNeuron`, spikingjelly's own step and
surrogate gradient), with per-neuron parameters, the input scaled for ``r`` and shifted
for ``v_leak``, and the threshold just above NIR's in the module's dtype. Every other
node (LI, CubaLI, CubaLIF, I, Delay, ...) runs as nirbridge's own module, so every
graph runs, nested and recurrent ones included.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import nir
import numpy as np
import torch
from torch import nn

from .. import layers, trace
from ..conformance import own_import
from ..conformance import register as register_peer
from ..errors import LossyConversionWarning, NirBridgeError
from ..native import NativeSimulator, register
from ._common import SimulatorNeuron, broadcast, build, export, uniform
from ._optional import require

sjn = require("spikingjelly.activation_based.neuron", "spikingjelly")
sjl = require("spikingjelly.activation_based.layer", "spikingjelly")
sj_functional = require("spikingjelly.activation_based.functional", "spikingjelly")
sj_surrogate = require("spikingjelly.activation_based.surrogate", "spikingjelly")

__all__ = ["DEFAULT_DT", "FROM_NIR", "TO_NIR", "SpikingjellyNeuron", "from_nir", "to_nir"]

DEFAULT_DT = 1e-4
"""The time step spikingjelly's own exporter assumes, and :func:`to_nir`'s default."""


# ----------------------------------------------------------------------------- spikingjelly → NIR


def _lossy(name: str, message: str) -> None:
    # the tracer adds the layer's name and type, and points at the user's call
    warnings.warn(f"{name} {message}", LossyConversionWarning, stacklevel=3)


def _float64(value: Any) -> np.ndarray:
    return np.asarray(torch.as_tensor(value).detach().to(torch.float64).cpu())


def _below(value: np.ndarray) -> np.ndarray:
    """The float64 number just below each value: ``h ≥ θ`` is ``h > θ⁻``."""
    return np.nextafter(value, -np.inf)


def _reset(module: nn.Module) -> np.ndarray:
    """``v_reset``, 0 for a soft reset (which warns: NIR resets to a value)."""
    if module.v_reset is None:
        _lossy(
            "v_reset=None",
            "(a soft reset, v ← v − v_threshold) has no NIR form; NIR resets to v_reset, so the "
            "export resets to 0 and the membrane after a spike differs (give v_reset a value "
            "for an exact export)",
        )
        return np.zeros(())
    return _float64(module.v_reset)


def _exactly(module: nn.Module, kind: type) -> None:
    """spikingjelly's variants subclass its neurons and change their steps without a
    ``forward`` of their own (LIAFNode, ILIFNode, the online-learning LIFs), so the map
    would take them for their base: only the class itself has the NIR form here. A
    surrogate with ``spiking=False`` makes the neuron emit graded values, not spikes."""
    if type(module) is not kind:
        raise NirBridgeError(
            f"{type(module).__name__} is a {kind.__name__} that computes otherwise; NIR has no form "
            f"for it here (map it with module_map={{{type(module).__name__}: fn}} if it has one)"
        )
    if not getattr(module.surrogate_function, "spiking", True):
        raise NirBridgeError(
            "surrogate_function(spiking=False) makes it emit the surrogate's graded values instead "
            "of spikes, which NIR cannot express; export it with spiking=True"
        )


def _start(module: nn.Module) -> np.ndarray:
    """Where the membrane starts: the value spikingjelly registered when the neuron was
    made (``get_reset_value("v")``), which ``v_reset`` set later does not change."""
    return _float64(module.get_reset_value("v"))


def _lif(module: nn.Module, k: np.ndarray, dt: float) -> nir.LIF:
    reset = _reset(module)
    start = _start(module)
    if np.any(start != reset):
        _lossy(
            "v",
            f"starts at {start.tolist()}, not at v_reset (it was set after the neuron was made); NIR's "
            "LIF starts where it leaks to (v_leak = v_reset), so the first steps differ (make the "
            "neuron with its v_reset, or call set_reset_value('v', v_reset))",
        )
    return nir.LIF(
        **broadcast(
            tau=k * dt,
            r=np.ones(()) if module.decay_input else k,
            v_leak=reset,
            v_threshold=_below(_float64(module.v_threshold)),
            v_reset=reset,
        )
    )


def lif_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.LIF:
    """``neuron.LIFNode`` as LIF: τ = tau·dt, r = 1 (``decay_input=True``) or tau."""
    _exactly(module, sjn.LIFNode)
    return _lif(module, _float64(module.tau), dt)


def plif_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.LIF:
    """``neuron.ParametricLIFNode`` as LIF with its learned τ = dt / sigmoid(w)."""
    _exactly(module, sjn.ParametricLIFNode)
    return _lif(module, 1.0 / torch.sigmoid(torch.as_tensor(module.w).detach().double()).cpu().numpy(), dt)


def if_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.IF:
    """``neuron.IFNode`` as IF(r = 1/dt), its membrane shifted by where spikingjelly
    starts it (``v_reset`` when made; NIR's IF starts at 0): threshold θ − start, reset
    ``v_reset`` − start."""
    _exactly(module, sjn.IFNode)
    reset, start = _reset(module), _start(module)
    threshold = _below(_float64(module.v_threshold) - start)
    return nir.IF(**broadcast(r=1.0 / dt, v_threshold=threshold, v_reset=reset - start))


def linear_recurrent_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.NIRGraph:
    """``layer.LinearRecurrentContainer(neuron, I, O)`` as input → Affine(W[:, :I], b) →
    neuron ⇄ Linear(W[:, I:]) → output: the recurrent edge carries the previous step's
    spikes, zero at the first, as spikingjelly's container does."""
    inner = module.sub_module
    convert = next((fn for cls, fn in _NEURONS.items() if isinstance(inner, cls)), None)
    if convert is None:
        raise NirBridgeError(
            f"LinearRecurrentContainer around a {type(inner).__name__}: only an IFNode, LIFNode or "
            "ParametricLIFNode inside it has a NIR form; put the other layers outside the container"
        )
    weight = _float64(module.rc.weight)  # (I, I + O): the input x, then the previous output y
    features = weight.shape[0]
    bias = _float64(module.rc.bias) if module.rc.bias is not None else np.zeros(features)
    nodes = {
        "input": nir.Input(np.array([features])),
        "rc_in": nir.Affine(weight=weight[:, :features].copy(), bias=bias),
        "neuron": convert(inner, dt),
        "rc_rec": nir.Linear(weight=weight[:, features:].copy()),
        "output": nir.Output(np.array([weight.shape[1] - features])),
    }
    edges = [("input", "rc_in"), ("rc_in", "neuron"), ("neuron", "rc_rec"), ("rc_rec", "neuron")]
    edges.append(("neuron", "output"))
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


_NEURONS: dict[type, Callable[..., nir.NIRNode]] = {
    sjn.ParametricLIFNode: plif_to_nir,
    sjn.LIFNode: lif_to_nir,
    sjn.IFNode: if_to_nir,
}


def is_stateful(module: nn.Module) -> bool:
    """spikingjelly's neurons keep their state inside and return spikes; nirbridge's
    rule holds for everything else."""
    if isinstance(module, (sjn.BaseNode, sjl.LinearRecurrentContainer)):
        return False
    return trace._is_stateful(module)


_CONTAINERS = (sjl.SeqToANNContainer, sjl.MultiStepContainer)


def _single_step(module: nn.Module) -> tuple[nn.Module, bool]:
    """``module`` as one step, and whether anything in it was in multi-step mode: a
    single-step model as it is, else a copy in single-step mode with the multi-step
    containers replaced by ``nn.Sequential`` (the model itself is left alone)."""
    multi = isinstance(module, _CONTAINERS) or any(
        getattr(m, "step_mode", "s") == "m" or isinstance(m, _CONTAINERS) for m in module.modules()
    )
    if not multi:
        return module, False  # nothing to change: trace it as it is
    # a neuron's state after a training step is a non-leaf tensor, which deepcopy
    # refuses: the copy gets it detached (tracing never reads it)
    memo: dict[int, Any] = {}
    for m in module.modules():
        for value in (*vars(m).values(), *getattr(m, "_memories", {}).values()):
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                memo[id(value)] = value.detach()
    single = copy.deepcopy(module, memo)
    if isinstance(single, _CONTAINERS):
        single = nn.Sequential(*single)

    def unwrap(parent: nn.Module) -> None:
        for name, child in list(parent.named_children()):
            if isinstance(child, _CONTAINERS):
                child = nn.Sequential(*child)
                setattr(parent, name, child)
            unwrap(child)

    unwrap(single)
    sj_functional.set_step_mode(single, "s")
    return single, multi


TO_NIR: dict[Any, Any] = {
    sjn.LIFNode: lif_to_nir,
    sjn.ParametricLIFNode: plif_to_nir,
    sjn.IFNode: if_to_nir,
    sjl.LinearRecurrentContainer: linear_recurrent_to_nir,
    sjl.Linear: layers.linear_to_nir,
    sjl.Conv1d: layers.conv_to_nir,
    sjl.Conv2d: layers.conv_to_nir,
    sjl.AvgPool2d: layers.avgpool2d_to_nir,
    sjl.Flatten: layers.flatten_to_nir,
}
"""spikingjelly modules → NIR nodes; merged over :data:`nirbridge.trace.DEFAULT_MAP`."""


def to_nir(
    module: nn.Module,
    example_input: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
    *,
    dt: float | None = None,
    module_map: Mapping[Any, Any] | None = None,
    skip: Iterable[Any] = (),
) -> nir.NIRGraph:
    """Export a spikingjelly model to NIR, recording ``dt`` (seconds per step) in
    ``graph.metadata["dt"]``: the argument, else the ``dt`` of modules that have one
    (modules imported by :func:`from_nir`), else :data:`DEFAULT_DT` (1e-4).

    Single-step and multi-step models alike: a model with modules in
    ``step_mode="m"`` is traced as one step (a single-step copy), and its
    ``example_input`` is time first, ``[T, B, ...]`` (the first step gives the shapes).
    ``module_map`` entries win over :data:`TO_NIR` and nirbridge's defaults (``None``
    leaves a type out); ``skip`` leaves module types out, as for
    :func:`nirbridge.torch_to_nir`.
    """
    trace.require_module(module, "spikingjelly to_nir")
    single, multi = _single_step(module)
    if multi and example_input is not None:
        example_input = (
            tuple(x[0] for x in example_input)
            if isinstance(example_input, (tuple, list))
            else example_input[0]
        )
    return export(single, TO_NIR, module_map, example_input, dt, is_stateful, skip, "spikingjelly")


# ----------------------------------------------------------------------------- NIR → spikingjelly


class _Sigmoid(sj_surrogate.Sigmoid):
    """spikingjelly's default surrogate. As a class of its own, it makes spikingjelly
    run its plain torch step, which takes per-neuron tensors: its fused float32 step
    takes Python floats only."""


class SpikingjellyNeuron(SimulatorNeuron):
    """A NIR LIF or IF node run by spikingjelly's ``LIFNode``/``IFNode``.

    spikingjelly's LIF with ``decay_input=True`` computes ``h = v + (x' − (v − c))/k``,
    fires at ``h ≥ θ'`` and resets to ``c``. With ``k = τ/dt``, ``c = v_reset``,
    ``x' = r·x + v_leak − c`` and ``θ'`` the number just above ``v_threshold`` in the
    module's dtype, that is NIR's LIF; ``v`` starts at ``v_leak``. IF is spikingjelly's
    ``h = v + x'`` with ``x' = dt·r·x``, starting at 0. Each step is spikingjelly's own
    (``single_step_functional_forward``: the state is explicit, the module untouched),
    with its sigmoid surrogate gradient. Where a node's ``tau``, threshold and reset are
    one value for all its neurons, they are the floats spikingjelly's fused step takes;
    otherwise per-neuron tensors, on spikingjelly's plain torch step. The state is ``v``,
    as in NIR.
    """

    def __init__(self, node: nir.NIRNode, dt: float) -> None:
        super().__init__(node, dt)
        options = dict(v_threshold=1.0, v_reset=0.0, surrogate_function=_Sigmoid(), step_mode="s")
        if self.nir_type is nir.LIF:
            self.neuron = sjn.LIFNode(tau=2.0, decay_input=True, **options)
        else:
            self.neuron = sjn.IFNode(**options)
        self._sync()

    def _sync(self) -> None:
        neuron = self.__dict__["_modules"].get("neuron")
        if neuron is None:
            return
        above = torch.nextafter(self.v_threshold, torch.full_like(self.v_threshold, float("inf")))
        settings = {"v_threshold": above, "v_reset": self.v_reset}
        if self.nir_type is nir.LIF:
            settings["tau"] = self.tau / self.dt
        if all(uniform(value) for value in settings.values()):
            # one value per setting: spikingjelly's own floats and surrogate, so that it runs
            # its fused step, as a neuron made with these arguments does
            settings = {key: float(value.reshape(-1)[0]) for key, value in settings.items()}
            neuron.surrogate_function = sj_surrogate.Sigmoid()
        else:
            neuron.surrogate_function = _Sigmoid()
        for key, value in settings.items():
            setattr(neuron, key, value)
        if self.nir_type is nir.LIF:
            gain, offset, start = self.r, self.v_leak - self.v_reset, self.v_leak
        else:
            gain, offset, start = self.dt * self.r, torch.zeros_like(self.r), torch.zeros_like(self.r)
        # the drive x' = gain·x + offset, with the common cases (1, 0) skipped
        self._gain = None if bool((gain == 1).all()) else gain
        self._offset = None if bool((offset == 0).all()) else offset
        self._start = start

    def _step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        drive = x * self._gain if self._gain is not None else x
        if self._offset is not None:
            drive = drive + self._offset
        if state is None:
            state = self._start.expand(drive.shape).to(drive.dtype)
        (spikes,), (v,) = self.neuron.single_step_functional_forward((drive,), (state,))
        return spikes, v

    def nir_state(self, state: Any) -> dict[str, torch.Tensor]:
        """The state in NIR's variables: ``v`` itself."""
        return {} if state is None else {"v": state}


FROM_NIR: dict[type, Callable[..., nn.Module]] = {
    nir.LIF: SpikingjellyNeuron,
    nir.IF: SpikingjellyNeuron,
}
"""NIR nodes → spikingjelly neurons; other nodes use :data:`nirbridge.DEFAULT_MAP`."""


def from_nir(
    graph_or_path: Any,
    *,
    dt: float | None = None,
    node_map: Mapping[type, Callable[..., nn.Module]] | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    allow_negative_tau: bool = False,
) -> nn.Module:
    """Build a module running a NIR graph with spikingjelly neurons: ``out, state = m(x, state)``.

    ``dt`` defaults to ``graph.metadata["dt"]``, then 1e-4. ``node_map`` entries win
    over :data:`FROM_NIR`. ``allow_negative_tau`` as in :func:`nirbridge.nir_to_torch`.
    """
    return build(graph_or_path, FROM_NIR, node_map, dt, device, dtype, allow_negative_tau)


# ----------------------------------------------------------------------------- native runs

_base = require("spikingjelly.activation_based.base", "spikingjelly")


class SpikingjellyModels(NativeSimulator):
    """spikingjelly models in :func:`nirbridge.run` and :func:`nirbridge.verify`: its
    memory modules (neurons) keep their state in ``_memories`` (``v``), which
    ``reset()`` (what ``functional.reset_net`` calls) starts afresh; in
    ``step_mode="m"``, and inside ``SeqToANNContainer``/``MultiStepContainer``, a call
    takes the whole sequence ``[T, B, ...]``. spikingjelly counts tau in steps."""

    name = "spikingjelly"
    no_dt = "spikingjelly counts tau in steps"

    def owns(self, module: nn.Module) -> bool:
        return type(module).__module__.split(".")[0] == "spikingjelly"

    def keeps_state(self, module: nn.Module) -> bool:
        return isinstance(module, _base.MemoryModule) and bool(module._memories)

    def is_neuron(self, module: nn.Module) -> bool:
        return isinstance(module, sjn.BaseNode)

    def stateless(self, module: nn.Module) -> bool:
        return isinstance(module, _base.StepModule) and not self.keeps_state(module)

    def whole_sequence(self, module: nn.Module) -> bool | None:
        if isinstance(module, _CONTAINERS):
            return True
        mode = getattr(module, "step_mode", None)
        return {"m": True, "s": False}.get(mode) if isinstance(mode, str) else None

    def folds(self, module: nn.Module) -> bool:
        return isinstance(module, sjl.SeqToANNContainer)

    def reset(self, module: nn.Module) -> None:
        module.reset()

    def variables(self, module: nn.Module) -> dict[str, Any]:
        return dict(module._memories)

    def snapshot(self, module: nn.Module) -> Any:
        return super().snapshot(module), dict(module._memories)

    def restore(self, module: nn.Module, snapshot: Any) -> None:
        own, memories = snapshot
        super().restore(module, own)
        module._memories.clear()
        module._memories.update(memories)

    def to_nir(self, model: nn.Module, example_input: Any) -> nir.NIRGraph:
        return to_nir(model, example_input)


register(SpikingjellyModels())


def _own_import(graph: nir.NIRGraph, dt: float) -> tuple[Any, torch.dtype]:
    """spikingjelly's own NIR import, as its users call it:
    ``nir_exchange.import_from_nir(graph, dt=dt, dtype=..., step_mode="s")``, stepped
    with explicit state; float64 (it computes float32 alike on the example files)."""
    from spikingjelly.activation_based.nir_exchange import import_from_nir

    return import_from_nir(graph, dt=dt, dtype=torch.float64, step_mode="s"), torch.float64


register_peer(own_import("spikingjelly", "spikingjelly", f"{__name__}:_own_import"))

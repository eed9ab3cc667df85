"""snntorch 1.0 ⇄ NIR, exactly where NIR can express the model.

snntorch's neurons are discrete: ``mem ← β·mem + x``. With the step ``dt`` (snntorch has
none; :func:`to_nir` records 1e-4 unless told otherwise), forward Euler gives (checked
spike for spike):

=====================================================  ===============================
snntorch                                               NIR
=====================================================  ===============================
``Leaky(β, threshold, reset_mechanism="zero")``        LIF(tau=dt/(1−β), r=tau/dt,
                                                       v_leak=0, v_threshold, v_reset=0)
``Leaky`` with β = 1                                   IF(r=1/dt, v_threshold, v_reset=0)
``Synaptic(α, β, threshold, "zero", reset_delay=False)``  CubaLIF(tau_syn=dt/(1−α),
                                                       tau_mem=dt/(1−β), r=tau_mem/dt,
                                                       w_in=tau_syn/dt, v_leak=0, v_reset=0)
``RLeaky`` / ``RSynaptic``                             a subgraph: input → LIF/CubaLIF ⇄
                                                       w_rec (Affine, or Linear(diag V)
                                                       for one-to-one), the recurrent
                                                       edge carrying the previous step
=====================================================  ===============================

What NIR cannot express exports with a :class:`nirbridge.LossyConversionWarning` naming
the module, the parameter and what changes: the subtractive reset (snntorch's default)
and ``"none"``; ``reset_delay=True`` for Synaptic/RLeaky/RSynaptic (a one-step refractory
period; for Leaky it changes only the reported membrane, not the spikes); graded spikes;
inhibition; state quantisation; β or α of 1 among others below 1; a non-zero recurrent
bias (snntorch adds it from the first step, NIR's recurrent edge starts at zero); and
snntorch 1.0's RSynaptic, which applies its reset one step late whatever
``reset_delay`` says.

:func:`from_nir` builds modules whose LIF, IF and CubaLIF nodes run as snntorch
``Leaky``/``Synaptic`` (:class:`SnntorchNeuron`, snntorch's surrogate gradients), with
the input scaled and the membrane shifted so that ``r``, ``v_leak`` and ``v_reset``
come out exact. Nodes snntorch has no neuron for (LI, CubaLI, I, and parameters it
cannot hold, such as tau < dt or v_leak above threshold) use nirbridge's own modules.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import nir
import numpy as np
import torch
from torch import nn

from .. import trace
from ..conformance import own_import
from ..conformance import register as register_peer
from ..errors import LossyConversionWarning, NirBridgeError
from ..interpret import DEFAULT_MAP
from ..native import NativeSimulator, register
from ._common import SimulatorNeuron, broadcast, build, export
from ._optional import require

snn = require("snntorch", "snntorch")

__all__ = ["DEFAULT_DT", "FROM_NIR", "TO_NIR", "SnntorchNeuron", "from_nir", "to_nir"]

DEFAULT_DT = 1e-4
"""The time step snntorch's own exporter assumes, and :func:`to_nir`'s default."""


# ----------------------------------------------------------------------------- snntorch → NIR


def _lossy(module: nn.Module, name: str, message: str) -> None:
    # the tracer adds the layer's name and type, and points at the user's call
    warnings.warn(f"{name} {message}", LossyConversionWarning, stacklevel=3)


def _decay(module: nn.Module, name: str, all_ones_exact: bool) -> torch.Tensor:
    """β or α as snntorch uses it (clamped to [0, 1]), float64. A decay of 1 (no leak)
    has no finite NIR time constant: it becomes 1 - 1e-9 with a warning, unless every
    neuron has it and the caller has an exact form for that (Leaky as IF)."""
    raw = torch.as_tensor(getattr(module, name)).detach().to(torch.float64).cpu()
    value = raw.clamp(0, 1)
    if bool((value != raw).any()):
        _lossy(module, name, "has values outside [0, 1], which snntorch clamps; exported clamped")
    ones = value == 1
    if bool(ones.any()) and not (all_ones_exact and bool(ones.all())):
        _lossy(
            module,
            name,
            "is 1 (no decay) for some neurons; NIR time constants are finite, so those "
            "neurons get 1 - 1e-9 (a time constant of 1e9 steps)",
        )
        value = torch.where(ones, torch.full_like(value, 1 - 1e-9), value)
    return value


def _check_behaviour(module: nn.Module, refractory_delay: bool) -> None:
    mechanism = module.reset_mechanism
    if mechanism == "subtract":
        _lossy(
            module,
            "reset_mechanism='subtract'",
            "has no NIR form; NIR resets to v_reset, so the export resets to 0 and the "
            "membrane after a spike differs (use reset_mechanism='zero' for an exact export)",
        )
    elif mechanism == "none":
        _lossy(module, "reset_mechanism='none'", "has no NIR form; the export resets to 0 after a spike")
    if refractory_delay and getattr(module, "reset_delay", False) and mechanism == "zero":
        _lossy(
            module,
            "reset_delay=True",
            "zeroes the whole membrane one step after a spike (a one-step refractory period); "
            "NIR resets at once, so spikes right after a spike differ (use reset_delay=False)",
        )
    elif refractory_delay and getattr(module, "reset_delay", False) and mechanism == "subtract":
        # said with the reset, so that one export names every change an exact one needs
        _lossy(
            module,
            "reset_delay=True",
            "resets one step after a spike; NIR resets at once, so even with reset_mechanism='zero' "
            "spikes right after a spike would differ (use reset_delay=False as well)",
        )
    graded = torch.as_tensor(module.graded_spikes_factor)
    if bool((graded != 1).any()):
        _lossy(module, "graded_spikes_factor", "scales spikes, which NIR cannot express; exported as 1")
    if module.inhibition:
        _lossy(module, "inhibition=True", "lets only the strongest neuron spike; NIR has no inhibition")
    if module.state_quant:
        _lossy(module, "state_quant", "quantises the state; NIR computes it unquantised")


def _threshold(module: nn.Module) -> torch.Tensor:
    return torch.as_tensor(module.threshold).detach().to(torch.float64).cpu()


def _leaky_node(module: nn.Module, dt: float) -> nir.LIF | nir.IF:
    beta = _decay(module, "beta", all_ones_exact=True)
    threshold = _threshold(module)
    if bool((beta == 1).all()):
        return nir.IF(**broadcast(r=1.0 / dt, v_threshold=threshold, v_reset=0.0))
    tau = dt / (1 - beta)
    return nir.LIF(**broadcast(tau=tau, r=1 / (1 - beta), v_leak=0.0, v_threshold=threshold, v_reset=0.0))


def _synaptic_node(module: nn.Module, dt: float) -> nir.CubaLIF:
    alpha, beta = _decay(module, "alpha", False), _decay(module, "beta", False)
    return nir.CubaLIF(
        **broadcast(
            tau_syn=dt / (1 - alpha),
            tau_mem=dt / (1 - beta),
            r=1 / (1 - beta),
            v_leak=0.0,
            v_threshold=_threshold(module),
            v_reset=0.0,
            w_in=1 / (1 - alpha),
        )
    )


def leaky_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.LIF | nir.IF:
    """``snntorch.Leaky`` as LIF (IF when β = 1)."""
    _check_behaviour(module, refractory_delay=False)
    return _leaky_node(module, dt)


def synaptic_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.CubaLIF:
    """``snntorch.Synaptic`` as CubaLIF."""
    _check_behaviour(module, refractory_delay=True)
    return _synaptic_node(module, dt)


def _recurrent_graph(module: Any, neuron: nir.NIRNode) -> nir.NIRGraph:
    recurrent = module.recurrent
    if isinstance(recurrent, nn.Linear):
        weight = recurrent.weight.detach().to(torch.float64).cpu().numpy().copy()
        if recurrent.bias is None:
            w_rec: nir.NIRNode = nir.Linear(weight=weight)
        else:
            bias = recurrent.bias.detach().to(torch.float64).cpu().numpy().copy()
            if np.any(bias != 0):
                _lossy(
                    module,
                    "recurrent.bias",
                    "is added from the first step in snntorch (recurrent(0) = bias), but NIR's "
                    "recurrent edge carries zero at the first step; the first step differs",
                )
            w_rec = nir.Affine(weight=weight, bias=bias)
    elif hasattr(recurrent, "V"):  # one-to-one: V * spk
        w_rec = nir.Scale(scale=torch.as_tensor(recurrent.V).detach().to(torch.float64).cpu().numpy().copy())
    else:
        raise NirBridgeError(
            f"{type(module).__name__}: a {type(recurrent).__name__} recurrence (conv2d_channels) "
            "has no converter; use all_to_all with linear_features, or V"
        )
    size = np.shape(w_rec.weight)[:1] if hasattr(w_rec, "weight") else np.shape(w_rec.scale)
    shape = np.array(size) if size and size != (1,) else None  # else the tracer infers it
    nodes = {
        "input": nir.Input(shape),
        "lif": neuron,
        "w_rec": w_rec,
        "output": nir.Output(shape),
    }
    edges = [("input", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


def rleaky_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.NIRGraph:
    """``snntorch.RLeaky`` as input → LIF ⇄ w_rec → output."""
    _check_behaviour(module, refractory_delay=True)
    return _recurrent_graph(module, _leaky_node(module, dt))


def rsynaptic_to_nir(module: Any, dt: float = DEFAULT_DT) -> nir.NIRGraph:
    """``snntorch.RSynaptic`` as input → CubaLIF ⇄ w_rec → output."""
    _check_behaviour(module, refractory_delay=False)
    if module.reset_mechanism == "zero":
        _lossy(
            module,
            "reset",
            "is applied one step late by snntorch 1.0's RSynaptic whatever reset_delay says "
            "(its reset_delay=False branch discards its result); NIR resets at once, so "
            "spikes right after a spike differ",
        )
    return _recurrent_graph(module, _synaptic_node(module, dt))


def is_stateful(module: nn.Module) -> bool:
    """snntorch neurons return ``(spk, ...state)`` unless ``init_hidden=True`` (without
    ``output=True``); nirbridge's rule holds for everything else."""
    if isinstance(module, snn.SpikingNeuron):
        return not module.init_hidden or bool(module.output)
    return trace._is_stateful(module)


# ----------------------------------------------------------------------------- NIR → snntorch


class SnntorchNeuron(SimulatorNeuron):
    """A NIR LIF, IF or CubaLIF node run by ``snntorch.Leaky``/``Synaptic``.

    snntorch computes ``mem ← β·mem + x'`` (and ``syn ← α·syn + x'``) with a reset to
    zero. With ``c = v_reset`` and ``u = v − c``, NIR's LIF is ``u ← β·u + x'`` with
    ``β = 1 − dt/τ``, ``x' = (dt/τ)(r·x + v_leak − c)``, threshold ``v_threshold − c``
    and ``u₀ = v_leak − c``; IF has ``β = 1``, ``x' = dt·r·x``; CubaLIF has
    ``α = 1 − dt/τ_syn``, ``x' = (dt/τ_syn)(dt/τ_mem)(r·w_in·x + v_leak − c)``,
    ``syn₀ = (dt/τ_mem)(v_leak − c)``. The state is ``mem`` (and ``syn``) as snntorch
    keeps it. Each step is snntorch's update for ``reset_mechanism="zero",
    reset_delay=False`` with the neuron's own decays, threshold and ``fire()`` (its
    surrogate gradient), written out so that the state is explicit and snntorch's
    per-call bookkeeping is skipped; it gives bit-identical results.
    """

    def __init__(self, node: nir.NIRNode, dt: float) -> None:
        super().__init__(node, dt)
        settings = dict(reset_mechanism="zero", reset_delay=False)
        if self.nir_type is nir.CubaLIF:
            self.neuron = snn.Synaptic(alpha=0.5, beta=0.5, **settings)
        else:
            self.neuron = snn.Leaky(beta=0.5, **settings)
        # snntorch's settings are derived from the NIR buffers: keep them out of the state
        # dict, so it holds NIR's parameters (as nirbridge's and norse's imports do)
        self.neuron._non_persistent_buffers_set.update(self.neuron._buffers)
        self._sync()

    def _sync(self) -> None:
        neuron = self.__dict__["_modules"].get("neuron")
        if neuron is None:
            return
        c = self.v_reset
        if self.nir_type is nir.IF:
            neuron.beta = torch.ones_like(self.r)
            gain, offset, start = self.dt * self.r, torch.zeros_like(c), -c
        elif self.nir_type is nir.LIF:
            leak = self.dt / self.tau
            neuron.beta = 1 - leak
            gain, offset, start = leak * self.r, leak * (self.v_leak - c), self.v_leak - c
        else:
            syn, mem = self.dt / self.tau_syn, self.dt / self.tau_mem
            neuron.alpha, neuron.beta = 1 - syn, 1 - mem
            gain, offset, start = (
                syn * mem * self.r * self.w_in,
                syn * mem * (self.v_leak - c),
                self.v_leak - c,
            )
            self._syn_start = mem * (self.v_leak - c)
            self._alpha = neuron.alpha.clamp(0, 1)
        neuron.threshold = self.v_threshold - c
        self._beta = neuron.beta.clamp(0, 1)  # as snntorch uses them (a no-op here)
        # the drive x' = gain·x + offset, with the common cases (1, 0) skipped
        self._gain = None if bool((gain == 1).all()) else gain
        self._offset = None if bool((offset == 0).all()) else offset
        self._start = start

    def _step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        if self._offset is not None:
            drive = torch.addcmul(self._offset, x, self._gain) if self._gain is not None else x + self._offset
        else:
            drive = x * self._gain if self._gain is not None else x
        cuba = self.nir_type is nir.CubaLIF
        if state is None:
            mem = self._start.expand(drive.shape)
            state = (self._syn_start.expand(drive.shape), mem) if cuba else mem
        # snntorch's own update for reset="zero", reset_delay=False, with the step it
        # skips here left out: its pre-step reset, H(mem_prev - threshold), is always 0
        # (the threshold is positive and a membrane above it was reset at once), so
        # (1 - reset)·mem is mem. The spike is snntorch's fire(): its surrogate gradient.
        if cuba:
            syn = self._alpha * state[0] + drive
            mem = self._beta * state[1] + syn
        else:
            mem = self._beta * state + drive
        spk = self.neuron.fire(mem)
        mem = mem - spk * mem  # do_reset = spk / graded_spikes_factor (1) - reset (0)
        # snntorch's spikes are float32 whatever the input
        spk = spk if spk.dtype == x.dtype else spk.to(x.dtype)
        return spk, ((syn, mem) if cuba else mem)

    def nir_state(self, state: Any) -> dict[str, torch.Tensor]:
        """The state in NIR's variables: ``v = mem + v_reset`` and, for CubaLIF,
        ``i = (syn / (dt/τ_mem) − (v_leak − v_reset)) / r`` (equal up to rounding)."""
        if state is None:
            return {}
        if self.nir_type is not nir.CubaLIF:
            return {"v": state + self.v_reset}
        syn, mem = state
        current = (syn / (self.dt / self.tau_mem) - (self.v_leak - self.v_reset)) / self.r
        return {"i": current, "v": mem + self.v_reset}


def _fits_snntorch(node: Any, dt: float) -> bool:
    """Whether snntorch's neurons hold these parameters exactly: decays in [0, 1] and a
    threshold above both the reset and the resting potential."""
    threshold = np.asarray(node.v_threshold, np.float64)
    reset = np.asarray(node.v_reset, np.float64)
    if np.any(threshold <= reset):
        return False
    if isinstance(node, nir.IF):  # starts at v = 0, which must not be above threshold
        return not np.any(threshold < 0)
    if np.any(np.asarray(node.v_leak, np.float64) > threshold):
        return False
    taus = [node.tau] if isinstance(node, nir.LIF) else [node.tau_mem, node.tau_syn]
    return all(np.all(np.asarray(t, np.float64) >= dt) for t in taus)


def _neuron_from_nir(node: nir.NIRNode, dt: float) -> nn.Module:
    if _fits_snntorch(node, dt):
        return SnntorchNeuron(node, dt)
    return DEFAULT_MAP[type(node)](node, dt=dt)  # nirbridge's own module, exact


TO_NIR: dict[Any, Any] = {
    snn.Leaky: leaky_to_nir,
    snn.Synaptic: synaptic_to_nir,
    snn.RLeaky: rleaky_to_nir,
    snn.RSynaptic: rsynaptic_to_nir,
}
"""snntorch modules → NIR nodes; merged over :data:`nirbridge.trace.DEFAULT_MAP`."""

FROM_NIR: dict[type, Callable[..., nn.Module]] = {
    nir.LIF: _neuron_from_nir,
    nir.IF: _neuron_from_nir,
    nir.CubaLIF: _neuron_from_nir,
}
"""NIR nodes → snntorch neurons; other nodes use :data:`nirbridge.DEFAULT_MAP`."""


def to_nir(
    module: nn.Module,
    example_input: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
    *,
    dt: float | None = None,
    module_map: Mapping[Any, Any] | None = None,
    skip: Iterable[Any] = (),
) -> nir.NIRGraph:
    """Export an snntorch model to NIR, recording ``dt`` (seconds per step) in
    ``graph.metadata["dt"]``: the argument, else the ``dt`` of modules that have one
    (modules imported by :func:`from_nir`), else :data:`DEFAULT_DT` (1e-4, snntorch's).

    The model is written as snntorch users write one step: an ``nn.Sequential`` of
    layers and neurons with ``init_hidden=True``, or a module whose ``forward`` threads
    ``spk, mem = self.lif(x, mem)`` (state arguments with defaults are traced at them).
    ``module_map`` entries win over :data:`TO_NIR` and nirbridge's defaults (``None``
    leaves a type out); ``skip`` leaves module types out (``skip=(nn.Dropout,)``), as
    for :func:`nirbridge.torch_to_nir`.
    """
    trace.require_module(module, "snntorch to_nir")
    return export(module, TO_NIR, module_map, example_input, dt, is_stateful, skip, "snntorch")


def from_nir(
    graph_or_path: Any,
    *,
    dt: float | None = None,
    node_map: Mapping[type, Callable[..., nn.Module]] | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    allow_negative_tau: bool = False,
) -> nn.Module:
    """Build a module running a NIR graph with snntorch neurons: ``out, state = m(x, state)``.

    ``dt`` defaults to ``graph.metadata["dt"]``, then 1e-4. ``node_map`` entries win
    over :data:`FROM_NIR`. ``allow_negative_tau`` as in :func:`nirbridge.nir_to_torch`.
    """
    return build(graph_or_path, FROM_NIR, node_map, dt, device, dtype, allow_negative_tau)


# ----------------------------------------------------------------------------- native runs


class SnntorchModels(NativeSimulator):
    """snntorch models in :func:`nirbridge.run` and :func:`nirbridge.verify`: its neurons
    keep their state in non-persistent buffers (``mem``, ``syn``, ``spk``, ...) whether
    ``init_hidden`` is True or False (without ``mem=`` passed, a neuron uses and updates
    ``self.mem``); ``reset_mem()`` starts them afresh. snntorch counts time in steps."""

    name = "snntorch"
    no_dt = "snntorch steps in discrete time (beta per step)"

    def owns(self, module: nn.Module) -> bool:
        return type(module).__module__.split(".")[0] == "snntorch"

    def keeps_state(self, module: nn.Module) -> bool:
        return isinstance(module, snn.SpikingNeuron)

    def reset(self, module: nn.Module) -> None:
        if callable(getattr(module, "reset_mem", None)):
            module.reset_mem()
            return
        for name in self.variables(module):
            setattr(module, name, torch.zeros_like(getattr(module, name)))

    def variables(self, module: nn.Module) -> dict[str, Any]:
        return {
            name: value
            for name, value in module._buffers.items()
            if name in module._non_persistent_buffers_set and value is not None
        }

    def to_nir(self, model: nn.Module, example_input: Any) -> nir.NIRGraph:
        return to_nir(model, example_input)


register(SnntorchModels())


def _own_import(graph: nir.NIRGraph, dt: float) -> tuple[Any, torch.dtype]:
    """snntorch's own NIR import, as its users call it: ``snntorch.import_nir.
    import_from_nir(graph)``. It takes no dt (its LIF and CubaLIF assume 1e-4), keeps
    its neurons' state inside them (a fresh import starts fresh), rewrites the graph it
    is given and prints to stdout, which is silenced here."""
    import contextlib
    import io

    from snntorch.import_nir import import_from_nir

    with contextlib.redirect_stdout(io.StringIO()):
        return import_from_nir(graph), torch.float32


register_peer(own_import("snntorch", "snntorch", f"{__name__}:_own_import"))

"""norse 1.1 ⇄ NIR, exactly.

Each norse cell integrates with forward Euler at its own ``dt`` (default 1e-3). With
``τ = 1 / tau_inv``, the cells are these NIR nodes (checked spike for spike):

==============  =====================================================================
norse           NIR
==============  =====================================================================
``LIFBoxCell``  LIF(tau=1/tau_mem_inv, r=1, v_leak, v_threshold=v_th, v_reset)
``LIFCell``     CubaLIF(tau_syn=1/tau_syn_inv, tau_mem=1/tau_mem_inv, r=1, v_leak,
                v_threshold=v_th, v_reset, w_in=tau_syn/dt): norse adds the input to
                the synaptic current directly, NIR through (dt/tau_syn)·w_in
``LIBoxCell``   LI(tau=1/tau_mem_inv, r=1, v_leak)
``LICell``      CubaLI(tau_syn=1/tau_syn_inv, tau_mem=1/tau_mem_inv, r=1, v_leak,
                w_in=tau_syn/dt)
``IAFCell``     IF(r=1/dt, v_threshold=v_th, v_reset); norse's v starts at v_reset,
                NIR's at 0, so a non-zero v_reset warns
==============  =====================================================================

``LIFRecurrentCell`` adds ``input_weights·x + recurrent_weights·z`` to the synaptic
current, ``z`` being its spikes of the step before; it exports as a subgraph
``input → input_weights → lif ⇄ recurrent_weights → output`` (both weights Linear, the
neuron ``LIFCell``'s CubaLIF), whose edge back NIR delays by one step: exact.
``LILinearCell`` is ``input → input_weights → li → output`` (``LICell``'s CubaLI). The
sequence modules ``LIF``, ``LI``, ``IAF`` and ``LIFRecurrent``, which loop over a
time-first input ``[T, B, ...]`` inside, export as their cell's node (one step), with a
note under :data:`SEQUENCE_NOTE` in its metadata. The norse neurons NIR has no primitive
for (:data:`NO_NIR_FORM`: LSNN, AdEx, Ex, Izhikevich, refractory, multi-compartment,
conductance-based) are named, each with the reason, in one
:class:`nirbridge.UnsupportedModuleError`.

:func:`to_nir` traces a norse model (``SequentialState`` or a module calling cells as
``out, s = cell(x, s)``) with :func:`nirbridge.torch_to_nir`; the graph's dt is the
cells' (they must agree). :func:`from_nir` builds a module whose neurons are norse cells
(:class:`NorseNeuron`), so norse's step equations and surrogate gradients run, with the
NIR parameters that norse lacks (``r``, ``w_in``, a CubaLIF's scale) folded into the
cell's input. NIR nodes norse has no cell for use nirbridge's own modules.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, NamedTuple, NoReturn

import nir
import numpy as np
import torch
from torch import nn

from .. import trace
from ..conformance import own_import
from ..conformance import register as register_peer
from ..diagnose import _unsupported
from ..errors import (
    LossyConversionWarning,
    NirBridgeError,
    NodeConversionError,
    ParameterError,
    UnsupportedModuleError,
)
from ..maps import _key_name, _lookup_module
from ..native import NativeSimulator, register
from ..neurons.modules import check_dt
from ..validate import _where
from ._common import SimulatorNeuron, broadcast, build, export, uniform
from ._optional import require

nt = require("norse.torch", "norse")
threshold = require("norse.torch.functional.threshold", "norse").threshold

__all__ = [
    "FROM_NIR",
    "NO_NIR_FORM",
    "SEQUENCE_NOTE",
    "TO_NIR",
    "LIFNirCurrentState",
    "LINirCurrentState",
    "NoNirForm",
    "NorseNeuron",
    "from_nir",
    "to_nir",
]


def _inverse(value: Any) -> torch.Tensor:
    return 1.0 / torch.as_tensor(value, dtype=torch.float64)


def _cell_dt(cell: Any) -> float:
    """The cell's own time step, which the NIR parameters are derived from (``w_in =
    tau_syn/dt``, an IF's ``r = 1/dt``) and the graph records: a positive, finite number
    of seconds, else a :class:`nirbridge.ParameterError` naming the cell's ``dt``."""
    return check_dt(cell.dt, f"{type(cell).__name__}(dt={cell.dt!r})")


def lifbox_to_nir(cell: Any) -> nir.LIF:
    p = cell.p
    _cell_dt(cell)
    return nir.LIF(
        **broadcast(
            tau=_inverse(p.tau_mem_inv), r=1.0, v_leak=p.v_leak, v_threshold=p.v_th, v_reset=p.v_reset
        )
    )


def lif_to_nir(cell: Any) -> nir.CubaLIF:
    p = cell.p
    tau_syn = _inverse(p.tau_syn_inv)
    return nir.CubaLIF(
        **broadcast(
            tau_syn=tau_syn,
            tau_mem=_inverse(p.tau_mem_inv),
            r=1.0,
            v_leak=p.v_leak,
            v_threshold=p.v_th,
            v_reset=p.v_reset,
            w_in=tau_syn / _cell_dt(cell),
        )
    )


def libox_to_nir(cell: Any) -> nir.LI:
    p = cell.p
    _cell_dt(cell)
    return nir.LI(**broadcast(tau=_inverse(p.tau_mem_inv), r=1.0, v_leak=p.v_leak))


def li_to_nir(cell: Any) -> nir.CubaLI:
    p = cell.p
    tau_syn = _inverse(p.tau_syn_inv)
    return nir.CubaLI(
        **broadcast(
            tau_syn=tau_syn,
            tau_mem=_inverse(p.tau_mem_inv),
            r=1.0,
            v_leak=p.v_leak,
            w_in=tau_syn / _cell_dt(cell),
        )
    )


def iaf_to_nir(cell: Any) -> nir.IF:
    p = cell.p
    dt = _cell_dt(cell)
    if bool((torch.as_tensor(p.v_reset) != 0).any()):
        warnings.warn(
            "norse starts v at v_reset, NIR's IF at 0; with a non-zero v_reset the "
            "exported neurons start from 0 instead",
            LossyConversionWarning,
            stacklevel=2,
        )
    return nir.IF(**broadcast(r=1.0 / dt, v_threshold=p.v_th, v_reset=p.v_reset))


# norse's recurrent cells and LILinearCell weigh their input inside the step function:
# lif_step adds ``input_weights·x + recurrent_weights·z`` to the synaptic current, where
# ``z`` is the spike output of the step before (kept in the state, zero at the start),
# and then steps exactly as lif_feed_forward_step does with that sum as its input. So a
# recurrent cell is its feed-forward cell behind a Linear, with a Linear on the edge
# back, which NIR delays by one step: input → input_weights → lif ⇄ recurrent_weights.


def _weight(value: Any) -> np.ndarray:
    return torch.as_tensor(value).detach().to(torch.float64).cpu().numpy().copy()


def _weighted(
    neuron: nir.NIRNode, name: str, input_weights: Any, recurrent_weights: Any = None
) -> nir.NIRGraph:
    """``input → input_weights → neuron → output``, with ``neuron ⇄ recurrent_weights``
    when given (the edge back is the one NIR delays: it closes the cycle)."""
    w_in = _weight(input_weights)
    hidden, inputs = w_in.shape
    nodes: dict[str, nir.NIRNode] = {
        "input": nir.Input(np.array([inputs])),
        "input_weights": nir.Linear(weight=w_in),
        name: neuron,
    }
    edges = [("input", "input_weights"), ("input_weights", name)]
    if recurrent_weights is not None:
        nodes["recurrent_weights"] = nir.Linear(weight=_weight(recurrent_weights))
        edges += [(name, "recurrent_weights"), ("recurrent_weights", name)]
    nodes["output"] = nir.Output(np.array([hidden]))
    edges.append((name, "output"))
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


def lif_recurrent_to_nir(cell: Any) -> nir.NIRGraph:
    """``LIFRecurrentCell`` as input → input_weights → CubaLIF ⇄ recurrent_weights → output.

    The weights are exported as they are: with ``autapses=False`` norse zeroes the
    diagonal of ``recurrent_weights`` when the cell is built (and masks its gradient),
    so the exported matrix has the zero diagonal and runs exactly as the cell does."""
    return _weighted(lif_to_nir(cell), "lif", cell.input_weights, cell.recurrent_weights)


def li_linear_to_nir(cell: Any) -> nir.NIRGraph:
    """``LILinearCell`` as input → input_weights → CubaLI → output."""
    return _weighted(li_to_nir(cell), "li", cell.input_weights)


# norse's sequence modules loop the cell's step function over a time-first input
# [T, B, ...] inside forward; NIR graphs are one step, and every runner (nirbridge.run,
# a chip) supplies the loop. Their node is their cell's, with a note in its metadata.

SEQUENCE_NOTE = "nirbridge.norse"
"""The metadata key of the note on nodes exported from norse's sequence modules."""


def _sequence(node: Any, module: Any) -> Any:
    name = type(module).__name__
    node.metadata = {
        **(node.metadata or {}),
        SEQUENCE_NOTE: (
            f"norse.torch.{name} (a sequence module: time-first input [T, B, ...], looped "
            "inside) exported as one step of it; feed the graph one step at a time, as "
            "nirbridge.run does"
        ),
    }
    return node


def lif_sequence_to_nir(module: Any) -> nir.CubaLIF:
    """``LIF`` (sequence module) as one step: ``LIFCell``'s CubaLIF."""
    return _sequence(lif_to_nir(module), module)


def li_sequence_to_nir(module: Any) -> nir.CubaLI:
    """``LI`` (sequence module) as one step: ``LICell``'s CubaLI."""
    return _sequence(li_to_nir(module), module)


def iaf_sequence_to_nir(module: Any) -> nir.IF:
    """``IAF`` (sequence module) as one step: ``IAFCell``'s IF."""
    return _sequence(iaf_to_nir(module), module)


def lif_recurrent_sequence_to_nir(module: Any) -> nir.NIRGraph:
    """``LIFRecurrent`` (sequence module) as one step: ``LIFRecurrentCell``'s subgraph."""
    return _sequence(lif_recurrent_to_nir(module), module)


# norse neurons NIR has no primitive for. Their map value keeps them whole (the tracer
# would otherwise trace into norse's step functions and report what it finds there),
# and to_nir reports them all, with the reason, in one UnsupportedModuleError.

_ADEX = "its exponential spike initiation and adaptation current have no NIR primitive"
_EX = "its exponential spike initiation has no NIR primitive"
_IZHIKEVICH = "its quadratic membrane and recovery variable u have no NIR primitive"
_LSNN = "its adaptive threshold (b) has no NIR primitive"
_REFRAC = "its refractory period (rho) has no NIR primitive"
_ADEX_REFRAC = (
    "its exponential spike initiation, adaptation current and refractory period (rho) have no NIR primitive"
)
_MC = "its compartment coupling (g_coupling·v) acts on the membrane, which NIR cannot express"

NO_NIR_FORM: dict[Any, str] = {
    nt.LSNNCell: _LSNN,
    nt.LSNNRecurrentCell: _LSNN,
    nt.LSNN: _LSNN,
    nt.LSNNRecurrent: _LSNN,
    nt.LIFAdExCell: _ADEX,
    nt.LIFAdExRecurrentCell: _ADEX,
    nt.LIFAdEx: _ADEX,
    nt.LIFAdExRecurrent: _ADEX,
    nt.LIFExCell: _EX,
    nt.LIFExRecurrentCell: _EX,
    nt.LIFEx: _EX,
    nt.LIFExRecurrent: _EX,
    nt.IzhikevichCell: _IZHIKEVICH,
    nt.IzhikevichRecurrentCell: _IZHIKEVICH,
    nt.Izhikevich: _IZHIKEVICH,
    nt.IzhikevichRecurrent: _IZHIKEVICH,
    nt.LIFRefracCell: _REFRAC,
    nt.LIFRefracRecurrentCell: _REFRAC,
    nt.LIFRefracRecurrent: _REFRAC,
    nt.LIFAdExRefracCell: _ADEX_REFRAC,
    nt.LIFAdExRefracRecurrentCell: _ADEX_REFRAC,
    nt.LIFAdExRefracRecurrent: _ADEX_REFRAC,
    nt.LIFMCRecurrentCell: _MC,
    nt.LIFMCRefracRecurrentCell: f"{_MC}, and {_REFRAC}",
    nt.CobaLIFCell: "its conductance-based synapses (reversal potentials) have no NIR primitive",
    nt.LIFCorrelation: (
        "it takes its weights as forward arguments and keeps correlation traces for "
        "plasticity, which NIR cannot express"
    ),
}
"""norse 1.1 modules with no NIR form, and why; :func:`to_nir` names each one it meets."""


def _uniform_as_scalar(value: torch.Tensor) -> torch.Tensor:
    """A parameter equal for every neuron as a 0-d tensor, as norse's own defaults are:
    the same broadcast result, with cheaper arithmetic."""
    return value.reshape(-1)[0].clone() if value.numel() > 1 and uniform(value) else value


class LIFNirCurrentState(NamedTuple):
    """norse's ``LIFFeedForwardState`` (``v``, ``i``) with NIR's synaptic current
    ``i_nir`` beside it: the state of a CubaLIF :class:`NorseNeuron` whose norse
    current cannot give NIR's back (``r = 0`` or ``tau_syn`` near ``dt``; see
    :meth:`NorseNeuron.nir_state`). norse's step functions read ``v`` and ``i`` only."""

    v: torch.Tensor
    i: torch.Tensor
    i_nir: torch.Tensor


class LINirCurrentState(NamedTuple):
    """norse's ``LIState`` (``v``, ``i``) with NIR's synaptic current ``i_nir`` beside
    it, for a CubaLI :class:`NorseNeuron`, as :class:`LIFNirCurrentState`."""

    v: torch.Tensor
    i: torch.Tensor
    i_nir: torch.Tensor


_WEAK_DECAY = 1 / 16
"""Below this ``|1 − dt/tau_syn|``, NIR's current divided out of norse's (which holds it
times ``r·(1 − dt/tau_syn)``) loses more than 5 bits to cancellation; such neurons carry
NIR's current in their state instead."""


class NorseNeuron(SimulatorNeuron):
    """A norse cell running a NIR neuron node: ``out, state = m(x, state)``.

    norse keeps its parameters as plain attributes; here the NIR parameters are buffers
    and the cell's are derived from them. Input scaling covers what norse lacks: ``r``
    for LIF/LI, ``dt·r`` for IF (norse's IAF adds its input unscaled), and
    ``r·w_in·dt/tau_syn`` for CubaLIF/CubaLI, whose norse current is then ``r`` times
    NIR's ``i``. NIR's IF starts at v = 0, norse's at v_reset: the first state is given.

    Each step is the norse cell's own step function with norse's threshold and
    surrogate gradient, term for term, except that the constant ``dt·tau_inv`` is
    computed once rather than at every step and terms that add ``v_leak = 0`` or
    ``z·v_reset = 0`` are left out; outputs, states and gradients are those of
    ``cell.activation`` (tested bit for bit).

    norse's current holds NIR's ``i`` times ``r·(1 − dt/tau_syn)``. Where that factor is
    0 or near it for some neuron (``r = 0``, ``tau_syn = dt``), NIR's ``i`` cannot be
    read back from it, so the state also carries ``i`` stepped by NIR's own equation
    (:class:`LIFNirCurrentState`, :class:`LINirCurrentState`); outputs, ``v`` and norse's
    ``i`` are unchanged. Parameters whose norse form overflows the module's dtype
    (``1/tau`` for a tiny ``tau``, ``dt/tau``, the input scale) raise
    :class:`nirbridge.ParameterError` naming the field and the neurons.
    """

    _CELLS: ClassVar[dict[type, str]] = {
        nir.LIF: "LIFBoxCell",
        nir.LI: "LIBoxCell",
        nir.CubaLIF: "LIFCell",
        nir.CubaLI: "LICell",
        nir.IF: "IAFCell",
    }

    def __init__(self, node: nir.NIRNode, dt: float) -> None:
        super().__init__(node, dt)
        self.cell = getattr(nt, self._CELLS[self.nir_type])(p=self._parameters_for_norse(), dt=self.dt)
        self._sync()

    def _parameters_for_norse(self) -> Any:
        c = _uniform_as_scalar
        if self.nir_type is nir.LIF:
            return nt.LIFBoxParameters(
                tau_mem_inv=c(1.0 / self.tau),
                v_leak=c(self.v_leak),
                v_th=c(self.v_threshold),
                v_reset=c(self.v_reset),
            )
        if self.nir_type is nir.LI:
            return nt.LIBoxParameters(tau_mem_inv=c(1.0 / self.tau), v_leak=c(self.v_leak))
        if self.nir_type is nir.CubaLIF:
            return nt.LIFParameters(
                tau_syn_inv=c(1.0 / self.tau_syn),
                tau_mem_inv=c(1.0 / self.tau_mem),
                v_leak=c(self.v_leak),
                v_th=c(self.v_threshold),
                v_reset=c(self.v_reset),
            )
        if self.nir_type is nir.CubaLI:
            return nt.LIParameters(
                tau_syn_inv=c(1.0 / self.tau_syn), tau_mem_inv=c(1.0 / self.tau_mem), v_leak=c(self.v_leak)
            )
        return nt.IAFParameters(v_th=c(self.v_threshold), v_reset=c(self.v_reset))

    def _sync(self) -> None:
        cell = self.cell
        cell.p = p = self._parameters_for_norse()
        if self.nir_type in (nir.CubaLIF, nir.CubaLI):
            scale = self.r * self.w_in * (self.dt / self.tau_syn)
        elif self.nir_type is nir.IF:
            scale = self.r * self.dt
        else:
            scale = self.r
        self._scale = None if bool((scale == 1).all()) else scale  # norse's own graphs: 1
        # norse's step functions compute these products of constants at every step
        if self.nir_type is not nir.IF:
            self._dt_tau_mem_inv = cell.dt * p.tau_mem_inv
        if self.nir_type in (nir.CubaLIF, nir.CubaLI):
            self._minus_dt_tau_syn_inv = -cell.dt * p.tau_syn_inv
        self._v_leak = None if self.nir_type is nir.IF or _all_zero(p.v_leak) else p.v_leak
        self._v_reset = None if self.nir_type in (nir.LI, nir.CubaLI) or _all_zero(p.v_reset) else p.v_reset
        self._check_norse_form(p, scale)
        self._carries_i = False
        if self.nir_type in (nir.CubaLIF, nir.CubaLI):
            # norse stores its current after the decay: r·(1 − dt/tau_syn) times NIR's i
            decay = 1.0 + self._minus_dt_tau_syn_inv
            self._divisor = self.r * decay
            tiny = torch.finfo(self._divisor.dtype).tiny
            readable = (self._divisor.abs() >= tiny) & (decay.abs() >= _WEAK_DECAY)
            self._carries_i = not bool(readable.all())
            self._dt_tau_syn = self.dt / self.tau_syn  # NIR's factor, for the carried i

    def _check_norse_form(self, p: Any, scale: torch.Tensor) -> None:
        """Raise :class:`ParameterError` where a finite NIR parameter becomes infinite in
        the form norse computes with (its inverse time constants, ``dt·tau_inv``, the
        input scale) at this module's dtype: norse would step to NaN there."""
        cell = self._CELLS[self.nir_type]
        derived: list[tuple[tuple[str, ...], str, Any]] = [(("r",), "r·dt", scale)]
        if self.nir_type in (nir.CubaLIF, nir.CubaLI):
            derived = [
                (("tau_syn",), f"1/tau_syn ({cell}'s tau_syn_inv)", p.tau_syn_inv),
                (("tau_syn",), "dt/tau_syn", self._minus_dt_tau_syn_inv),
                (("tau_mem",), f"1/tau_mem ({cell}'s tau_mem_inv)", p.tau_mem_inv),
                (("tau_mem",), "dt/tau_mem", self._dt_tau_mem_inv),
                (("r", "w_in", "tau_syn"), "the input scale r·w_in·dt/tau_syn", scale),
            ]
        elif self.nir_type is not nir.IF:
            derived = [
                (("tau",), f"1/tau ({cell}'s tau_mem_inv)", p.tau_mem_inv),
                (("tau",), "dt/tau", self._dt_tau_mem_inv),
            ]
        for fields, what, value in derived:
            given = torch.stack(torch.broadcast_tensors(*(torch.isfinite(getattr(self, f)) for f in fields)))
            bad = given.all(0) & ~torch.isfinite(torch.as_tensor(value))
            if not bool(bad.any()):
                continue
            bad = bad.expand(self.r.shape).cpu().numpy()
            first = fields[0]
            example = float(getattr(self, first).expand(self.r.shape)[torch.from_numpy(bad)][0])
            dtype = self.r.dtype
            wider = "build with dtype=torch.float64 (from_nir(..., dtype=torch.float64)), or " * (
                dtype != torch.float64
            )
            raise ParameterError(
                f"{self.nir_type.__name__} run by norse's {cell}: {what} is infinite in {dtype} at "
                f"{_where(bad, bad.shape)} ({first} = {example:.4g}), so norse would step to NaN "
                f"there; {wider}give {', '.join(fields)} values whose {what} is finite (dt = {self.dt:g} s)"
            )

    def _current_from_norse(self, i: torch.Tensor) -> torch.Tensor:
        """NIR's ``i`` from norse's stored current (``r·(1 − dt/tau_syn)`` times it); 0
        where that factor is 0 (the current is then 0, and NIR's ``i`` cannot be known)."""
        if not self._carries_i:
            return i / self._divisor
        held = self._divisor != 0
        safe = torch.where(held, self._divisor, torch.ones_like(self._divisor))
        return torch.where(held, i / safe, torch.zeros_like(i))

    def nir_state(self, state: Any) -> dict[str, torch.Tensor]:
        """The state in NIR's variables: ``v`` as norse keeps it and, for CubaLIF and
        CubaLI, ``i``. norse adds the input to its current before the membrane update
        and stores it decayed, ``r·(1 − dt/τ_syn)`` times NIR's ``i``; this divides
        that out (equal up to rounding). Where that factor is 0 or near it, the state
        carries NIR's ``i`` itself (``i_nir``), which is given instead."""
        if state is None:
            return {}
        if self.nir_type in (nir.CubaLIF, nir.CubaLI):
            current = getattr(state, "i_nir", None)
            return {"i": self._current_from_norse(state.i) if current is None else current, "v": state.v}
        return {"v": state.v}

    def _step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        given = x
        if self._scale is not None:
            x = x * self._scale
        if state is None:
            if self.nir_type is nir.IF:
                state = nt.IAFFeedForwardState(v=x.new_zeros(torch.broadcast_shapes(x.shape, self.r.shape)))
            else:
                state = self.cell.state_fallback(x)
        out, new = self._UPDATES[self.nir_type](self, x, state)
        if self._carries_i:  # NIR's i, by NIR's equation: norse's current cannot give it back
            i = getattr(state, "i_nir", None)
            if i is None:  # a fresh state, or one without it (norse's own)
                i = self._current_from_norse(state.i)
            i = i + self._dt_tau_syn * (-i + self.w_in * given)
            kind = LIFNirCurrentState if self.nir_type is nir.CubaLIF else LINirCurrentState
            new = kind(new.v, new.i, i)
        return out, new

    # The updates below are norse 1.1's step functions for dense input
    # (lif_box_feed_forward_step, li_box_feed_forward_step, lif_feed_forward_step,
    # li_feed_forward_step, iaf_feed_forward_step) term for term, with norse's
    # threshold and surrogate, and with two changes that leave every value unchanged:
    # dt·tau_inv is computed once in _sync, and terms with v_leak = 0 or v_reset = 0
    # are left out (x + 0 and z·0 are exact).

    def _leak_minus(self, v: torch.Tensor) -> torch.Tensor | None:
        return None if self._v_leak is None else self._v_leak - v

    def _reset(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self._v_reset is None:
            return (1 - z) * v
        return (1 - z) * v + z * self._v_reset

    def _spike(self, v: torch.Tensor) -> torch.Tensor:
        p = self.cell.p
        return threshold(v - p.v_th, p.method, p.alpha)

    def _lif_box(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        v = state.v
        drive = x - v if self._v_leak is None else x + self._v_leak - v
        v_decayed = v + self._dt_tau_mem_inv * drive
        z = self._spike(v_decayed)
        return z, nt.LIFBoxFeedForwardState(v=self._reset(z, v_decayed))

    def _li_box(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        v = state.v
        leak = self._leak_minus(v)
        v_new = v + self._dt_tau_mem_inv * (x - v if leak is None else leak + x)
        return v_new, nt.LIBoxState(v_new)

    def _lif(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        v = state.v
        i = state.i + x
        leak = self._leak_minus(v)
        v_decayed = v + self._dt_tau_mem_inv * (i - v if leak is None else leak + i)
        i_decayed = i + self._minus_dt_tau_syn_inv * i
        z = self._spike(v_decayed)
        return z, nt.LIFFeedForwardState(v=self._reset(z, v_decayed), i=i_decayed)

    def _li(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        v = state.v
        i = state.i + x
        leak = self._leak_minus(v)
        v_new = v + self._dt_tau_mem_inv * (i - v if leak is None else leak + i)
        return v_new, nt.LIState(v_new, i + self._minus_dt_tau_syn_inv * i)

    def _iaf(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        v = state.v + x
        z = self._spike(v)
        return z, nt.IAFFeedForwardState(v=self._reset(z, v))

    _UPDATES: ClassVar[dict[type, Callable[..., tuple[torch.Tensor, Any]]]] = {
        nir.LIF: _lif_box,
        nir.LI: _li_box,
        nir.CubaLIF: _lif,
        nir.CubaLI: _li,
        nir.IF: _iaf,
    }


def _all_zero(value: torch.Tensor) -> bool:
    return not bool(torch.as_tensor(value).any())


def _neuron_from_nir(node: nir.NIRNode, dt: float) -> NorseNeuron:
    return NorseNeuron(node, dt)


class _NoNirFormError(NirBridgeError, ValueError):
    """Raised by the map value of a norse module with no NIR form."""


class NoNirForm:
    """:data:`TO_NIR`'s value for a norse module with no NIR form (:data:`NO_NIR_FORM`).

    As a map value it makes the tracer keep the module whole instead of tracing into
    norse's step function; called as a converter it raises, saying why. :func:`to_nir`
    turns that into one :class:`nirbridge.UnsupportedModuleError` naming every such
    module of the model, with its reason, beside any other unsupported module."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __call__(self, module: Any) -> NoReturn:
        raise _NoNirFormError(f"{type(module).__name__}: {self.reason}")

    def __repr__(self) -> str:
        return f"NoNirForm({self.reason!r})"


TO_NIR: dict[Any, Any] = {
    nt.LIFBoxCell: lifbox_to_nir,
    nt.LIFCell: lif_to_nir,
    nt.LIBoxCell: libox_to_nir,
    nt.LICell: li_to_nir,
    nt.IAFCell: iaf_to_nir,
    nt.LIFRecurrentCell: lif_recurrent_to_nir,
    nt.LILinearCell: li_linear_to_nir,
    nt.LIF: lif_sequence_to_nir,
    nt.LI: li_sequence_to_nir,
    nt.IAF: iaf_sequence_to_nir,
    nt.LIFRecurrent: lif_recurrent_sequence_to_nir,
    **{kind: NoNirForm(reason) for kind, reason in NO_NIR_FORM.items()},
}
"""norse modules → NIR nodes; merged over :data:`nirbridge.trace.DEFAULT_MAP`. The
modules of :data:`NO_NIR_FORM` map to :class:`NoNirForm`, which reports them."""

FROM_NIR: dict[type, Callable[..., nn.Module]] = {
    nir.LIF: _neuron_from_nir,
    nir.LI: _neuron_from_nir,
    nir.CubaLIF: _neuron_from_nir,
    nir.CubaLI: _neuron_from_nir,
    nir.IF: _neuron_from_nir,
}
"""NIR nodes → norse cells; other nodes use :data:`nirbridge.DEFAULT_MAP`."""


def to_nir(
    module: nn.Module,
    example_input: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
    *,
    dt: float | None = None,
    module_map: Mapping[Any, Any] | None = None,
    skip: Iterable[Any] = (),
) -> nir.NIRGraph:
    """Export a norse model to NIR.

    Args:
        module: a ``SequentialState``, a cell, or a module that calls cells as
            ``out, s = cell(x, s)`` in a ``forward(x, state=None)``.
        example_input: as for :func:`nirbridge.torch_to_nir` (needed for convolutions).
        dt: the time step recorded in ``graph.metadata["dt"]``; defaults to the cells'
            own ``dt``, which must agree (norse's default is 1e-3).
        module_map: entries that win over :data:`TO_NIR` and nirbridge's defaults
            (``None`` as a value leaves that module type out).
        skip: module types to leave out, their input connected to their consumers
            (``skip=(nn.Dropout,)``), as for :func:`nirbridge.torch_to_nir`.

    Raises:
        UnsupportedModuleError: naming every module the maps lack and every norse
            module with no NIR form (:data:`NO_NIR_FORM`, with the reason), with where
            each occurs.
        NodeConversionError: a cell whose ``dt`` is not a positive, finite number.

    Values :func:`nirbridge.nir_to_torch` would refuse (a NaN threshold, a time constant
    below 0, ``tau_inv = 0``'s infinite τ) are exported as they are, with one
    :class:`nirbridge.ParameterWarning` naming them, as :func:`nirbridge.torch_to_nir` does.
    """
    trace.require_module(module, "norse to_nir")
    try:
        graph = export(module, TO_NIR, module_map, example_input, dt, None, skip, "norse")
    except (UnsupportedModuleError, NodeConversionError) as error:
        if isinstance(error, NodeConversionError) and not isinstance(error.__cause__, _NoNirFormError):
            raise
        merged = trace.merge_maps({**TO_NIR, **(module_map or {})}, skip=skip)
        no_form = _no_nir_form_offenders(module, merged)
        if not no_form and isinstance(error, NodeConversionError):
            raise
        # the tracer reports what the maps lack; the norse modules with no NIR form are
        # converters that raise at the first one: report them all, with the others, and
        # leave them out of the list of supported modules
        others = error.offenders if isinstance(error, UnsupportedModuleError) else {}
        supported = {k: v for k, v in merged.items() if not isinstance(v, NoNirForm)}
        raise _unsupported({**others, **no_form}, supported) from None
    return graph


def _no_nir_form_offenders(module: nn.Module, the_map: Mapping[Any, Any]) -> dict[str, list[str]]:
    """``{"module <type> (<reason>)": [paths]}`` for the modules the tracer would reach
    (it does not look inside mapped modules) whose map value is :class:`NoNirForm`."""
    found: dict[str, list[str]] = {}

    def visit(sub: nn.Module, path: str) -> None:
        handler = _lookup_module(the_map, sub)
        if isinstance(handler, NoNirForm):
            kind = f"module {_key_name(type(sub))} ({handler.reason})"
            found.setdefault(kind, []).append(repr(path) if path else "the model itself")
        elif handler is None:
            for name, child in sub.named_children():
                visit(child, f"{path}.{name}" if path else name)

    visit(module, "")
    return found


def from_nir(
    graph_or_path: Any,
    *,
    dt: float | None = None,
    node_map: Mapping[type, Callable[..., nn.Module]] | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    allow_negative_tau: bool = False,
) -> nn.Module:
    """Build a module running a NIR graph with norse cells: ``out, state = m(x, state)``.

    ``dt`` defaults to ``graph.metadata["dt"]``, then 1e-4 (as :func:`nirbridge.nir_to_torch`).
    ``node_map`` entries win over :data:`FROM_NIR`. ``allow_negative_tau`` as in
    :func:`nirbridge.nir_to_torch`.

    Raises:
        NodeConversionError: naming the node, where a parameter's norse form is infinite
            in ``dtype`` (``1/tau`` of a tiny ``tau``, ``dt/tau``, the input scale); the
            message names the field and the neurons (see :class:`NorseNeuron`).
    """
    target = torch.get_default_dtype() if dtype is None else dtype
    the_map = dict(FROM_NIR)
    if isinstance(target, torch.dtype) and target.is_floating_point:  # else nir_to_torch says why

        def in_target_dtype(node: nir.NIRNode, dt: float) -> NorseNeuron:
            # built at the dtype it will run in, so that a parameter norse cannot hold
            # there is refused while nir_to_torch still knows the node's name
            return NorseNeuron(node, dt).to(target)

        the_map = {k: in_target_dtype if v is _neuron_from_nir else v for k, v in the_map.items()}
    return build(graph_or_path, the_map, node_map, dt, device, dtype, allow_negative_tau)


# ----------------------------------------------------------------------------- native runs

_snn = require("norse.torch.module.snn", "norse")
_CELLS = (_snn.SNNCell, _snn.SNNRecurrentCell, nt.LILinearCell)
_SEQUENCES = (_snn.SNN, _snn.SNNRecurrent, nt.Lift)


class NorseModels(NativeSimulator):
    """norse models in :func:`nirbridge.run` and :func:`nirbridge.verify`: its cells keep
    their state only in what they return (``z, s = cell(x, s)``), so a model passes it on
    (``SequentialState``, or ``forward(x, state)``); its sequence modules (``LIF``,
    ``LI``, ``Lift``, ...) take ``[T, B, ...]``. Each module integrates at its own ``dt``
    in seconds (norse's default 1e-3)."""

    name = "norse"
    no_dt = "norse's modules here have no dt"

    def owns(self, module: nn.Module) -> bool:
        return type(module).__module__.split(".")[0] == "norse"

    def is_neuron(self, module: nn.Module) -> bool:
        kind = type(module).__name__
        leaky_integrator = kind.startswith("LI") and not kind.startswith("LIF")
        return isinstance(module, (*_CELLS, *_SEQUENCES[:2])) and not leaky_integrator

    def takes_state(self, module: nn.Module) -> bool:
        return isinstance(module, (*_CELLS, *_SEQUENCES))

    def whole_sequence(self, module: nn.Module) -> bool | None:
        if isinstance(module, _SEQUENCES):
            return True
        return False if isinstance(module, _CELLS) else None

    def dt(self, module: nn.Module) -> float | None:
        value = getattr(module, "dt", None) if isinstance(module, (*_CELLS, *_SEQUENCES)) else None
        return float(value) if isinstance(value, (int, float)) else None

    def to_nir(self, model: nn.Module, example_input: Any) -> nir.NIRGraph:
        return to_nir(model, example_input)


register(NorseModels())


def _own_import(graph: nir.NIRGraph, dt: float) -> tuple[Any, torch.dtype]:
    """norse's own NIR import, as its users call it: ``norse.torch.from_nir(graph,
    dt=dt)`` (its default dt is 1e-3), a nirtorch GraphExecutor in float32."""
    import norse.torch as norse_torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nirtorch.load is deprecated; norse warns of what it ignores
        return norse_torch.from_nir(graph, dt=dt, ignore_warnings=True), torch.float32


register_peer(own_import("norse", "norse", f"{__name__}:_own_import"))

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
from typing import Any, ClassVar

import nir
import torch
from torch import nn

from ..errors import LossyConversionWarning
from ._common import SimulatorNeuron, broadcast, build, export
from ._optional import require

nt = require("norse.torch", "norse")
threshold = require("norse.torch.functional.threshold", "norse").threshold

__all__ = ["FROM_NIR", "TO_NIR", "NorseNeuron", "from_nir", "to_nir"]


def _inverse(value: Any) -> torch.Tensor:
    return 1.0 / torch.as_tensor(value, dtype=torch.float64)


def lifbox_to_nir(cell: Any) -> nir.LIF:
    p = cell.p
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
            w_in=tau_syn / cell.dt,
        )
    )


def libox_to_nir(cell: Any) -> nir.LI:
    p = cell.p
    return nir.LI(**broadcast(tau=_inverse(p.tau_mem_inv), r=1.0, v_leak=p.v_leak))


def li_to_nir(cell: Any) -> nir.CubaLI:
    p = cell.p
    tau_syn = _inverse(p.tau_syn_inv)
    return nir.CubaLI(
        **broadcast(
            tau_syn=tau_syn, tau_mem=_inverse(p.tau_mem_inv), r=1.0, v_leak=p.v_leak, w_in=tau_syn / cell.dt
        )
    )


def iaf_to_nir(cell: Any) -> nir.IF:
    p = cell.p
    if bool((torch.as_tensor(p.v_reset) != 0).any()):
        warnings.warn(
            "norse starts v at v_reset, NIR's IF at 0; with a non-zero v_reset the "
            "exported neurons start from 0 instead",
            LossyConversionWarning,
            stacklevel=2,
        )
    return nir.IF(**broadcast(r=1.0 / cell.dt, v_threshold=p.v_th, v_reset=p.v_reset))


def _uniform_as_scalar(value: torch.Tensor) -> torch.Tensor:
    """A parameter equal for every neuron as a 0-d tensor, as norse's own defaults are:
    the same broadcast result, with cheaper arithmetic."""
    flat = value.reshape(-1)
    return flat[0].clone() if flat.numel() > 1 and bool((flat == flat[0]).all()) else value


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

    def nir_state(self, state: Any) -> dict[str, torch.Tensor]:
        """The state in NIR's variables: ``v`` as norse keeps it and, for CubaLIF and
        CubaLI, ``i``. norse adds the input to its current before the membrane update
        and stores it decayed, ``r·(1 − dt/τ_syn)`` times NIR's ``i``; this divides
        that out (equal up to rounding)."""
        if state is None:
            return {}
        if self.nir_type in (nir.CubaLIF, nir.CubaLI):
            return {"i": state.i / (self.r * (1.0 + self._minus_dt_tau_syn_inv)), "v": state.v}
        return {"v": state.v}

    def _step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        if self._scale is not None:
            x = x * self._scale
        if state is None:
            if self.nir_type is nir.IF:
                state = nt.IAFFeedForwardState(v=x.new_zeros(torch.broadcast_shapes(x.shape, self.r.shape)))
            else:
                state = self.cell.state_fallback(x)
        return self._UPDATES[self.nir_type](self, x, state)

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


TO_NIR: dict[Any, Any] = {
    nt.LIFBoxCell: lifbox_to_nir,
    nt.LIFCell: lif_to_nir,
    nt.LIBoxCell: libox_to_nir,
    nt.LICell: li_to_nir,
    nt.IAFCell: iaf_to_nir,
}
"""norse modules → NIR nodes; merged over :data:`nirbridge.trace.DEFAULT_MAP`."""

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
    """
    return export(module, TO_NIR, module_map, example_input, dt, None, skip)


def from_nir(
    graph_or_path: Any,
    *,
    dt: float | None = None,
    node_map: Mapping[type, Callable[..., nn.Module]] | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """Build a module running a NIR graph with norse cells: ``out, state = m(x, state)``.

    ``dt`` defaults to ``graph.metadata["dt"]``, then 1e-4 (as :func:`nirbridge.nir_to_torch`).
    ``node_map`` entries win over :data:`FROM_NIR`.
    """
    return build(graph_or_path, FROM_NIR, node_map, dt, device, dtype)

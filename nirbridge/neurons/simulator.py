"""A NIR neuron run by another simulator's neuron module: the base class of the snntorch
and norse adapters' neurons. It lives in the core because it knows its NIR form
(:meth:`SimulatorNeuron.to_nir`): the tracer exports it like nirbridge's own neurons,
without importing any adapter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import nir
import numpy as np
import torch
from torch import nn

__all__ = ["SimulatorNeuron", "broadcast", "uniform"]


def broadcast(**values: Any) -> dict[str, np.ndarray]:
    """float64 copies of the values, broadcast to one shape."""
    arrays = {k: np.asarray(torch.as_tensor(v).detach().cpu(), dtype=np.float64) for k, v in values.items()}
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    return {k: np.broadcast_to(a, shape).copy() for k, a in arrays.items()}


def uniform(value: torch.Tensor) -> bool:
    """Whether a parameter holds one value for every neuron (and at least one neuron)."""
    flat = value.reshape(-1)
    return flat.numel() > 0 and bool((flat == flat[0]).all())


class SimulatorNeuron(nn.Module):
    """A NIR neuron node run by a simulator's module: ``out, state = m(x, state)``.

    The NIR parameters are buffers of this module, so ``state_dict``, ``.to()`` and
    ``.double()`` see them and :meth:`to_nir` gives the node back unchanged. Subclasses
    derive the simulator module's settings from them in :meth:`_sync`, which runs after
    construction, after ``.to()``/``.double()`` and after ``load_state_dict``.
    """

    FIELDS: ClassVar[dict[type, tuple[str, ...]]] = {
        nir.LIF: ("tau", "r", "v_leak", "v_threshold", "v_reset"),
        nir.LI: ("tau", "r", "v_leak"),
        nir.IF: ("r", "v_threshold", "v_reset"),
        nir.CubaLIF: ("tau_syn", "tau_mem", "r", "v_leak", "v_threshold", "v_reset", "w_in"),
        nir.CubaLI: ("tau_syn", "tau_mem", "r", "v_leak", "w_in"),
    }

    def __init__(self, node: nir.NIRNode, dt: float) -> None:
        super().__init__()
        self.nir_type = type(node)
        self.dt = float(dt)
        self._fields = self.FIELDS[self.nir_type]
        for field, value in broadcast(**{f: getattr(node, f) for f in self._fields}).items():
            self.register_buffer(field, torch.from_numpy(value))

    def _sync(self) -> None:
        raise NotImplementedError

    def _step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        """One time step: ``(output, new_state)``; ``state=None`` starts as NIR does."""
        return self._step(x, state)

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> SimulatorNeuron:
        super()._apply(fn, recurse)
        self._sync()
        return self

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._sync()

    def to_nir(self) -> nir.NIRNode:
        """The NIR node with this module's current parameters."""
        return self.nir_type(**{f: getattr(self, f).detach().cpu().numpy().copy() for f in self._fields})

    def extra_repr(self) -> str:
        return f"{self.nir_type.__name__}, shape={tuple(self.r.shape)}, dt={self.dt:g}"

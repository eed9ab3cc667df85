"""What the simulator adapters share: their ``to_nir`` and ``from_nir`` over nirbridge's
maps. Their neurons derive from :class:`nirbridge.neurons.simulator.SimulatorNeuron`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import nir
import torch
from torch import nn

from .. import trace, validate
from ..errors import ParameterError
from ..interpret import nir_to_torch
from ..neurons.simulator import SimulatorNeuron, broadcast, uniform

__all__ = ["SimulatorNeuron", "broadcast", "build", "export", "uniform"]


def export(
    module: nn.Module,
    to_nir_map: Mapping[Any, Any],
    module_map: Mapping[Any, Any] | None,
    example_input: Any,
    dt: float | None,
    stateful: Callable[[nn.Module], bool] | None = None,
    skip: Iterable[Any] | None = (),
    caller: str = "",
) -> nir.NIRGraph:
    """An adapter's ``to_nir``: its map over nirbridge's defaults, the user's on top,
    ``skip`` and ``None`` entries left out, and values that
    :func:`nirbridge.nir_to_torch` would refuse warned of (as
    :func:`nirbridge.torch_to_nir` does); ``caller`` names the simulator."""
    if module_map is not None and not isinstance(module_map, Mapping):
        trace.merge_maps(module_map)  # raises, saying what to pass instead
    merged = trace.merge_maps({**to_nir_map, **(module_map or {})}, skip=skip)
    graph = trace.export(module, merged, example_input=example_input, dt=dt, stateful=stateful)
    validate.warn_refused(graph, f"{caller} to_nir: the model", stacklevel=4)
    return graph


def build(
    graph_or_path: Any,
    from_nir_map: Mapping[type, Callable[..., nn.Module]],
    node_map: Mapping[type, Callable[..., nn.Module]] | None,
    dt: float | None,
    device: torch.device | str | None,
    dtype: torch.dtype | None,
    allow_negative_tau: bool = False,
) -> nn.Module:
    """An adapter's ``from_nir``: :func:`nirbridge.nir_to_torch` with its map, the user's on top."""
    if node_map is not None and not isinstance(node_map, Mapping):
        raise ParameterError(
            f"from_nir(node_map=...) takes a dict {{NIR node class: fn}}, got a {type(node_map).__name__}"
        )
    return nir_to_torch(
        graph_or_path,
        {**from_nir_map, **(node_map or {})},
        dt=dt,
        device=device,
        dtype=dtype,
        allow_negative_tau=allow_negative_tau,
    )

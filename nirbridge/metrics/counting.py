r"""Counting NeuroBench's workload and static metrics from a run's records.

Everything here follows NeuroBench 2.3.0's code (``neurobench/metrics``), applied to
the nodes of a NIR graph instead of an snnTorch model's hooked modules. One *sample*
is one batch row; workload counts are summed over the run's steps and divided by the
batch size, as NeuroBench divides by the samples it saw.

Connections (Affine, Linear, Conv1d, Conv2d, Scale). At each step, the node's input
``x`` (the sum of its incoming edges, as the step computes it) and its weight ``W``
are binarised (:math:`[x \ne 0]`, :math:`[W \ne 0]`), the bias dropped, and the node
run on them; the sum of what comes out is the step's *effective* synaptic operations,
the number of products of a non-zero input and a non-zero weight (a convolution
counts each weight once per output position it reaches, padding excluded). With all
inputs and all weights set to 1 it is the *dense* count. A step whose inputs are all
0, 1 or -1 counts as accumulates (``Effective_ACs``), any other as multiply-accumulates
(``Effective_MACs``). A connection whose every outgoing edge is delayed (a recurrent
weight), also through stateless nodes after it or out of the subgraph it sits in, is
counted at the step its result is used: its input one step late, as snnTorch's
``RLeaky`` multiplies the previous step's spikes.

Neurons (IF, LIF, CubaLIF, and LI, I, CubaLI). *Membrane updates*: every neuron at the
first step, then each neuron whose membrane ``v`` after the step differs from ``v``
after the step before. *Neuron operations*: membrane updates times the operations
one update costs (:data:`NEURON_OPS`); dense: every neuron at every step.

Activations: the outputs of the nodes that emit spikes (IF, LIF, CubaLIF,
Threshold); *activation sparsity* is the fraction of their values that are 0.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch

from ..engine.schedule import Level, node_input
from ..graph_module import add_delayed

CONNECTIONS = frozenset({"Affine", "Linear", "Conv1d", "Conv2d", "Scale"})
"""NIR types counted as synaptic connections."""

SPIKING = frozenset({"IF", "LIF", "CubaLIF", "Threshold"})
"""NIR types whose outputs are activations (spikes)."""

NEURON_OPS: dict[str, int] = {"LIF": 4, "IF": 4, "LI": 4, "I": 4, "CubaLIF": 8, "CubaLI": 8}
"""Operations per membrane update, from NeuroBench's table (``neuron_operations.py``):
an snnTorch ``Leaky`` costs 4 with either reset, a ``Synaptic`` 8 with its reset to
zero (6 when it subtracts; NIR's reset sets ``v_reset``, so 8). NIR's LIF is a
``Leaky`` and its CubaLIF a ``Synaptic``. IF is a ``Leaky`` with β = 1 (how snnTorch
writes it), LI and I are a ``Leaky`` and CubaLI a ``Synaptic`` that never spike."""


class MissingRecord(Exception):
    """A record the metrics need is not in the run (the caller says what to do)."""


def binary(value: torch.Tensor, all_ones: bool = False) -> torch.Tensor:
    """``[value != 0]`` as floats, or all ones (NeuroBench's ``binarize_tensor``)."""
    if all_ones:
        return torch.ones_like(value)
    return (value != 0).to(value.dtype)


def binary_copy(module: torch.nn.Module, all_ones: bool) -> torch.nn.Module:
    """The connection with its weight binarised and its bias zero
    (NeuroBench's ``make_binary_copy`` with the bias left out)."""
    copied = copy.deepcopy(module)
    with torch.no_grad():
        for name in ("weight", "scale"):
            value = getattr(copied, name, None)
            if isinstance(value, torch.Tensor):
                value.copy_(binary(value, all_ones))
        bias = getattr(copied, "bias", None)
        if isinstance(bias, torch.Tensor):
            bias.zero_()
    return copied


class Sources:
    """Each node's values over the run, ``[T, B, ...]``, from the records, the inputs
    and the graph's edges (the value of an Input or Output node is the sum of what
    feeds it)."""

    def __init__(
        self, records: Mapping[str, torch.Tensor], inputs: Mapping[str, torch.Tensor], device: torch.device
    ) -> None:
        self.records = records
        self.inputs = inputs
        self.device = device  # the records', where the inputs may have been given elsewhere

    def value(self, level: Level, name: str, parents: tuple[tuple[Level, str], ...]) -> torch.Tensor:
        if name in level.inputs:
            if not parents:
                return _numbers(self.inputs[name]).to(self.device)
            parent, subgraph = parents[-1]
            return self.input_of(parent, subgraph, parents[:-1])
        key = level.prefix + name
        if key not in self.records:
            raise MissingRecord(key)
        return _numbers(self.records[key])

    def input_of(self, level: Level, name: str, parents: tuple[tuple[Level, str], ...] = ()) -> torch.Tensor:
        """The summed input of node ``name`` at every step, added as a step adds it
        (:func:`nirbridge.engine.schedule.node_input`: direct edges in edge order, then
        the delayed ones, one step late and zero at the first step)."""
        incoming = level.incoming.get(name, [])
        direct = [self.value(level, source, parents) for source, delayed in incoming if not delayed]
        previous = [late(self.value(level, source, parents)) for source, delayed in incoming if delayed]
        if direct:
            return node_input(direct, previous)
        if not previous:
            raise MissingRecord(level.prefix + name)
        return add_delayed(previous[0], *previous[1:])


def _numbers(value: torch.Tensor) -> torch.Tensor:
    """Spikes stored as bool or integers, as floats (so that edges add up as numbers)."""
    return value if value.is_floating_point() else value.to(torch.get_default_dtype())


def late(value: torch.Tensor) -> torch.Tensor:
    """``value`` one step later along the first axis, zeros at the first step."""
    shifted = torch.zeros_like(value)
    shifted[1:] = value[:-1]
    return shifted


PASS_THROUGH = frozenset({*CONNECTIONS, "Flatten", "AvgPool2d", "SumPool2d", "Threshold"})
"""Stateless NIR types whose value at a step is used only where their own is: a value
that reaches the rest of the graph only through them is read when they are."""


def only_delayed_out(level: Level, name: str, parents: tuple[tuple[Level, str], ...] = ()) -> bool:
    """Whether every value leaving ``name`` is read one step late (a recurrent weight):
    each edge out of it is delayed, or feeds a stateless node (:data:`PASS_THROUGH`)
    whose own value is read late, or the level's Output node where every edge out of
    the enclosing subgraph is read late (recursively); so its result at the last step is
    never used."""
    edges = [
        (target, delayed)
        for target, incoming in level.incoming.items()
        for source, delayed in incoming
        if source == name
    ]

    def late(target: str, delayed: bool) -> bool:
        if delayed:
            return True
        if target in level.outputs:
            return bool(parents) and only_delayed_out(*parents[-1], parents[:-1])
        return level.types.get(target) in PASS_THROUGH and only_delayed_out(level, target, parents)

    return bool(edges) and all(late(target, delayed) for target, delayed in edges)


def synaptic_operations(module: torch.nn.Module, x: torch.Tensor, rows: int = 4096) -> tuple[int, int, int]:
    """``(effective MACs, effective ACs, dense)`` of one connection over ``x``
    (``[T, B, ...]``), summed over steps and samples; steps are counted a chunk at a
    time, with the time axis folded into the batch axis. The binary copies run in
    float64, whose sums of 0/1 products are exact to 2**53, whatever the module's dtype."""
    steps, batch = x.shape[0], x.shape[1]
    x = x.to(torch.float64)
    effective_copy = binary_copy(module, False).to(torch.float64)
    dense_copy = binary_copy(module, True).to(torch.float64)
    macs = acs = 0
    per = max(1, rows // max(batch, 1))
    with torch.no_grad():
        dense_step = int(dense_copy(torch.ones_like(x[0])).sum().item()) if steps else 0
        for start in range(0, steps, per):
            chunk = x[start : start + per]
            out = effective_copy(binary(chunk).reshape(-1, *chunk.shape[2:]))
            ops = out.reshape(chunk.shape[0], -1).sum(dim=1)
            spiking = ((chunk == 0) | (chunk == 1) | (chunk == -1)).reshape(chunk.shape[0], -1).all(dim=1)
            acs += int(ops[spiking].sum().item())
            macs += int(ops[~spiking].sum().item())
    return macs, acs, dense_step * steps


def membrane_updates(v: torch.Tensor) -> int:
    """Every neuron at the first step, then each whose ``v`` changed
    (NeuroBench's ``MembraneUpdates``)."""
    if v.shape[0] == 0:
        return 0
    changed = int(torch.count_nonzero(v[1:] - v[:-1]).item()) if v.shape[0] > 1 else 0
    return v[0].numel() + changed


def walk(level: Level, parents: tuple[tuple[Level, str], ...] = ()) -> list[tuple[Level, str, tuple]]:
    """Every node of ``level`` and the levels below it, in step order, with its parents."""
    found = []
    for name in level.modules:
        found.append((level, name, parents))
        if name in level.children:
            found += walk(level.children[name], (*parents, (level, name)))
    return found


def static_counts(module: torch.nn.Module, level: Level) -> tuple[int, int, float]:
    """``(parameter_count, footprint, connection_sparsity)``: NeuroBench's
    ``ParameterCount`` (every parameter's values), ``Footprint`` (bytes of parameters
    and buffers) and ``ConnectionSparsity`` (zero weights among the connections'
    weights, rounded to 4 places) over the module."""
    parameters = sum(p.numel() for p in module.parameters())
    footprint = sum(p.numel() * p.element_size() for p in module.parameters())
    footprint += sum(b.numel() * b.element_size() for b in module.buffers())
    zeros = total = 0
    for lv, name, _ in walk(level):
        if lv.types.get(name) in CONNECTIONS:
            sub = lv.modules[name]
            weight = getattr(sub, "weight", getattr(sub, "scale", None))
            if isinstance(weight, torch.Tensor):
                zeros += int((weight == 0).sum().item())
                total += weight.numel()
    return parameters, footprint, round(zeros / total, 4) if total else 0.0


def neuron_kind(type_name: str | None) -> str | None:
    """``"spiking"``, ``"neuron"`` (a membrane without spikes), ``"threshold"`` or None."""
    if type_name in ("IF", "LIF", "CubaLIF"):
        return "spiking"
    if type_name in ("LI", "I", "CubaLI"):
        return "neuron"
    if type_name == "Threshold":
        return "threshold"
    return None

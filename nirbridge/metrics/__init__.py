r"""What papers report: NeuroBench's metrics for any NIR graph, from a run.

``nirbridge.run(module, x, record="metrics").metrics()`` gives a :class:`Metrics`:

- static: ``parameter_count`` (values of every parameter), ``footprint`` (bytes of
  every parameter and buffer of the module), ``connection_sparsity`` (the fraction of
  the connections' weights that are 0);
- workload, per sample (one batch row), summed over the run's steps:
  ``synaptic_operations`` (``Effective_MACs``, ``Effective_ACs``, ``Dense``),
  ``membrane_updates``, ``neuron_operations`` (``Effective Neuron Ops``, ``Neuron
  Dense Ops``), and ``activation_sparsity`` (the fraction of the spiking nodes'
  outputs that are 0, overall and per node).

Each is defined as NeuroBench 2.3.0's code defines it; :mod:`.counting` states the
definitions, and ``docs/metrics.md`` the formulas and where a NIR node has no
NeuroBench counterpart. :meth:`Metrics.as_neurobench` gives NeuroBench's own keys and
nesting, so that the numbers sit in one table with NeuroBench's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import MetricsError
from . import counting

__all__ = ["LayerMetrics", "Metrics", "MetricsError", "compute"]


@dataclasses.dataclass(frozen=True)
class LayerMetrics:
    """One node's share of the workload, per sample.

    Attributes:
        name: the node's path (``"lif"``, ``"block.lif"``).
        type: its NIR type.
        activations: values its output held (spiking nodes), else 0.
        activation_sparsity: the fraction of them that are 0 (spiking nodes), else None.
        effective_macs, effective_acs, dense_synops: synaptic operations (connections).
        membrane_updates, neuron_ops, dense_neuron_ops: membrane work (neurons).
    """

    name: str
    type: str
    activations: float = 0.0
    activation_sparsity: float | None = None
    effective_macs: float = 0.0
    effective_acs: float = 0.0
    dense_synops: float = 0.0
    membrane_updates: float = 0.0
    neuron_ops: float = 0.0
    dense_neuron_ops: float = 0.0


@dataclasses.dataclass(frozen=True)
class Metrics:
    """NeuroBench's metrics of one run (see the module docs for each definition).

    Workload values are per sample: totals over the run's steps divided by its batch
    size. ``layers`` holds the per-node breakdown, in step order. The metrics of several
    runs of one module (the batches of a data set) add up as NeuroBench accumulates
    batches: ``sum(metrics_of_each_batch)``, or ``a + b``.
    """

    parameter_count: int
    footprint: int
    connection_sparsity: float
    activation_sparsity: float
    activation_sparsity_by_layer: dict[str, float]
    synaptic_operations: dict[str, float]
    membrane_updates: float
    neuron_operations: dict[str, float]
    samples: int
    steps: int
    layers: tuple[LayerMetrics, ...] = ()

    def __add__(self, other: Metrics) -> Metrics:
        """Both runs' metrics together, as NeuroBench's ``Benchmark`` accumulates
        batches: the per-sample counts and the activation sparsity as means weighted by
        each run's samples, the activation sparsity (overall and per node) from the zeros
        and values of both. ``steps`` is the longer run's. Runs of modules with other
        weights (another footprint or connection sparsity) are refused."""
        if not isinstance(other, Metrics):
            return NotImplemented
        names = [layer.name for layer in self.layers]
        if names != [layer.name for layer in other.layers] or self.parameter_count != other.parameter_count:
            raise MetricsError(
                "metrics add up over runs of one module (the batches of a data set); these count "
                f"different graphs (nodes {names[:4]} and {[la.name for la in other.layers][:4]})"
            )
        static = ("footprint", "connection_sparsity")  # what the weights give, the same for every batch
        differ = [f for f in static if getattr(self, f) != getattr(other, f)]
        if differ:
            pairs = ", ".join(f"{f} {getattr(self, f)} and {getattr(other, f)}" for f in differ)
            raise MetricsError(
                "metrics add up over runs of one module (the batches of a data set); these come from "
                f"modules with other weights ({pairs})"
            )
        a, b = self.samples, other.samples

        def mean(x: float, y: float) -> float:
            return (x * a + y * b) / (a + b)

        layers = tuple(_added(p, q, a, b) for p, q in zip(self.layers, other.layers))
        spiking = [la for la in layers if la.activation_sparsity is not None]
        values = sum(la.activations for la in spiking)  # per sample, over both runs
        if spiking:  # zeros over values of both runs, as each run's own figure and the nodes' are
            sparsity = (
                sum(la.activation_sparsity * la.activations for la in spiking) / values if values else 0.0
            )
        else:  # no per-node rows to pool (a Metrics built by hand): NeuroBench's mean by samples
            sparsity = mean(self.activation_sparsity, other.activation_sparsity)
        return Metrics(
            parameter_count=self.parameter_count,
            footprint=self.footprint,
            connection_sparsity=self.connection_sparsity,
            activation_sparsity=sparsity,
            activation_sparsity_by_layer={
                la.name: la.activation_sparsity for la in layers if la.activation_sparsity is not None
            },
            synaptic_operations={
                k: mean(v, other.synaptic_operations[k]) for k, v in self.synaptic_operations.items()
            },
            membrane_updates=mean(self.membrane_updates, other.membrane_updates),
            neuron_operations={
                k: mean(v, other.neuron_operations[k]) for k, v in self.neuron_operations.items()
            },
            samples=a + b,
            steps=max(self.steps, other.steps),
            layers=layers,
        )

    def __radd__(self, other: Any) -> Metrics:
        if isinstance(other, int) and other == 0:  # sum() starts from 0
            return self
        return NotImplemented

    def as_neurobench(self) -> dict[str, Any]:
        """The metrics under NeuroBench's own keys and nesting (the names its
        ``Benchmark.run()`` gives for metrics named as strings)::

            {"parameter_count": ..., "footprint": ..., "connection_sparsity": ...,
             "activation_sparsity": ..., "activation_sparsity_by_layer": {node: ...},
             "synaptic_operations": {"Effective_MACs": ..., "Effective_ACs": ..., "Dense": ...},
             "membrane_updates": ...,
             "neuron_operations": {"Effective Neuron Ops": ..., "Neuron Dense Ops": ...}}
        """
        return {
            "parameter_count": self.parameter_count,
            "footprint": self.footprint,
            "connection_sparsity": self.connection_sparsity,
            "activation_sparsity": self.activation_sparsity,
            "activation_sparsity_by_layer": dict(self.activation_sparsity_by_layer),
            "synaptic_operations": dict(self.synaptic_operations),
            "membrane_updates": self.membrane_updates,
            "neuron_operations": dict(self.neuron_operations),
        }

    def table(self) -> str:
        """The metrics as text: the totals, then one row per node."""
        syn, neu = self.synaptic_operations, self.neuron_operations
        lines = [
            f"NeuroBench metrics, per sample ({self.samples} sample(s), {self.steps} step(s))",
            f"  parameter_count       {self.parameter_count:,}",
            f"  footprint             {self.footprint:,} bytes",
            f"  connection_sparsity   {self.connection_sparsity:.4f}",
            f"  activation_sparsity   {self.activation_sparsity:.4f}",
            f"  synaptic_operations   Effective_MACs {syn['Effective_MACs']:,.1f}, "
            f"Effective_ACs {syn['Effective_ACs']:,.1f}, Dense {syn['Dense']:,.1f}",
            f"  membrane_updates      {self.membrane_updates:,.1f}",
            f"  neuron_operations     Effective {neu['Effective Neuron Ops']:,.1f}, "
            f"Dense {neu['Neuron Dense Ops']:,.1f}",
        ]
        if self.layers:
            width = max(len(layer.name) for layer in self.layers)
            lines.append("")
            lines.append(
                f"  {'node':<{width}}  {'type':<9} {'sparsity':>8} {'eff. ACs':>12} {'eff. MACs':>12} "
                f"{'dense syn':>12} {'mem. upd.':>10} {'neuron ops':>11}"
            )
            for layer in self.layers:
                sparsity = "" if layer.activation_sparsity is None else f"{layer.activation_sparsity:.4f}"
                lines.append(
                    f"  {layer.name:<{width}}  {layer.type:<9} {sparsity:>8} {layer.effective_acs:>12,.1f} "
                    f"{layer.effective_macs:>12,.1f} {layer.dense_synops:>12,.1f} "
                    f"{layer.membrane_updates:>10,.1f} {layer.neuron_ops:>11,.1f}"
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython shows the table
        printer.text(self.table())

    def plot(self, ax: Any = None) -> Any:
        """Per node: activation sparsity and synaptic and neuron operations (effective
        and dense, log scale); returns the matplotlib figure."""
        from .figure import plot

        return plot(self, ax)


def compute(
    module: torch.nn.Module,
    records: Mapping[str, torch.Tensor],
    inputs: Mapping[str, torch.Tensor],
) -> Metrics:
    """The metrics of a run of ``module`` (built by :func:`nirbridge.nir_to_torch`)
    over ``inputs`` (``[T, B, ...]`` by Input name) whose ``records`` hold every
    node's output and every neuron's ``v`` (what ``record="metrics"`` records)."""
    from ..engine.schedule import is_built, level_of

    if not is_built(module):
        raise MetricsError(
            "metrics() needs a run of a module nirbridge.nir_to_torch built: "
            "nirbridge.run(nirbridge.nir_to_torch(graph), x, record='metrics').metrics()"
        )
    level = level_of(module)
    first = next(iter(inputs.values()))
    steps, samples = int(first.shape[0]), int(first.shape[1])
    if samples == 0:
        raise MetricsError("metrics() counts per sample, and this run had none (batch size 0)")
    sources = counting.Sources(records, inputs, _device(module, first))
    layers: list[LayerMetrics] = []
    zeros = values = 0
    by_layer: dict[str, float] = {}
    macs = acs = dense = updates = ops = dense_ops = 0
    try:
        for lv, name, parents in counting.walk(level):
            kind = lv.types.get(name, type(lv.modules[name]).__name__)
            path = lv.prefix + name
            row: dict[str, float] = {}
            if kind in counting.CONNECTIONS:
                _check_weighted(lv.modules[name], path, kind)
                x = sources.input_of(lv, name, parents)
                if counting.only_delayed_out(lv, name, parents):
                    x = counting.late(x)
                m, a, d = counting.synaptic_operations(lv.modules[name], x)
                macs, acs, dense = macs + m, acs + a, dense + d
                row.update(effective_macs=m, effective_acs=a, dense_synops=d)
            if kind in counting.SPIKING:
                out = sources.value(lv, name, parents)
                n, z = out.numel(), out.numel() - int(torch.count_nonzero(out).item())
                zeros, values = zeros + z, values + n
                by_layer[path] = z / n if n else 0.0
                row.update(activations=n, activation_sparsity=by_layer[path])
            if kind in counting.NEURON_OPS:
                key = path + ".v"
                if key not in records:
                    raise counting.MissingRecord(key)
                v = records[key]
                u = counting.membrane_updates(v)
                cost = counting.NEURON_OPS[kind]
                full = v[0].numel() * v.shape[0] * cost
                updates, ops, dense_ops = updates + u, ops + u * cost, dense_ops + full
                row.update(membrane_updates=u, neuron_ops=u * cost, dense_neuron_ops=full)
            if row:
                per = {k: (v / samples if k != "activation_sparsity" else v) for k, v in row.items()}
                per["activations"] = row.get("activations", 0) / samples
                layers.append(LayerMetrics(path, kind, **per))
    except counting.MissingRecord as missing:
        raise MetricsError(
            f"metrics() needs the record {missing.args[0]!r}, which this run lacks: run with "
            "record='metrics' (every node's output and every neuron's v) or record='all'"
        ) from None
    parameters, footprint, sparsity = counting.static_counts(module, level)
    return Metrics(
        parameter_count=parameters,
        footprint=footprint,
        connection_sparsity=sparsity,
        activation_sparsity=(zeros / values) if values else 0.0,
        activation_sparsity_by_layer=by_layer,
        synaptic_operations={
            "Effective_MACs": macs / samples,
            "Effective_ACs": acs / samples,
            "Dense": dense / samples,
        },
        membrane_updates=updates / samples,
        neuron_operations={"Effective Neuron Ops": ops / samples, "Neuron Dense Ops": dense_ops / samples},
        samples=samples,
        steps=steps,
        layers=tuple(layers),
    )


def _added(p: LayerMetrics, q: LayerMetrics, a: int, b: int) -> LayerMetrics:
    """One node's metrics over two runs of ``a`` and ``b`` samples: per-sample values
    weighted by samples, the sparsity from both runs' zeros and values."""
    per_sample = {
        f.name: (getattr(p, f.name) * a + getattr(q, f.name) * b) / (a + b)
        for f in dataclasses.fields(LayerMetrics)
        if f.name not in ("name", "type", "activation_sparsity")
    }
    sparsity = None
    if p.activation_sparsity is not None and q.activation_sparsity is not None:
        values = p.activations * a + q.activations * b
        zeros = round(p.activation_sparsity * p.activations * a)
        zeros += round(q.activation_sparsity * q.activations * b)
        sparsity = zeros / values if values else 0.0
    return LayerMetrics(p.name, p.type, activation_sparsity=sparsity, **per_sample)


def _check_weighted(module: torch.nn.Module, path: str, kind: str) -> None:
    """A connection's synapses are counted from its ``weight`` (or a Scale's ``scale``)."""
    if not any(isinstance(getattr(module, attr, None), torch.Tensor) for attr in ("weight", "scale")):
        raise MetricsError(
            f"metrics(): node {path!r} ({kind}) runs as {type(module).__name__}, which holds no weight "
            "tensor to count its synapses from; count a module built with nirbridge's default map"
        )


def _device(module: torch.nn.Module, fallback: torch.Tensor) -> torch.device:
    """Where the module (and so the run's records) lives."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return fallback.device

"""The per-node figure of :meth:`nirbridge.metrics.Metrics.plot`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import Metrics


def plot(metrics: Metrics, ax: Any = None) -> Any:
    """Two panels over the nodes in step order: the activation sparsity of each
    spiking node, and each node's operations per sample (synaptic for connections,
    neuron operations for neurons; effective beside dense, log scale)."""
    from ..plot import _pyplot

    plt = _pyplot()
    layers = list(metrics.layers)
    if ax is None:
        figure, (top, bottom) = plt.subplots(
            2, 1, figsize=(max(5.0, 0.7 * len(layers) + 2.0), 6.0), layout="constrained", sharex=True
        )
    else:
        top, bottom = ax
        figure = top.figure
    names = [layer.name for layer in layers]
    positions = range(len(layers))
    sparsity = [
        layer.activation_sparsity if layer.activation_sparsity is not None else 0.0 for layer in layers
    ]
    top.bar(
        positions,
        sparsity,
        color=["#4c72b0" if layer.activation_sparsity is not None else "none" for layer in layers],
    )
    top.set_ylim(0, 1)
    top.set_ylabel("activation sparsity")
    top.set_title(
        f"activation sparsity {metrics.activation_sparsity:.3f} overall; "
        f"{metrics.samples} sample(s), {metrics.steps} step(s)",
        fontsize=9,
    )
    effective = [layer.effective_acs + layer.effective_macs + layer.neuron_ops for layer in layers]
    dense = [layer.dense_synops + layer.dense_neuron_ops for layer in layers]
    width = 0.4
    bottom.bar([p - width / 2 for p in positions], dense, width, label="dense", color="#c0c0c0")
    bottom.bar([p + width / 2 for p in positions], effective, width, label="effective", color="#dd8452")
    bottom.set_yscale("log")
    bottom.set_ylabel("operations per sample")
    bottom.legend(fontsize=8)
    bottom.set_xticks(list(positions), [f"{n}\n{layer.type}" for n, layer in zip(names, layers)], fontsize=8)
    return figure

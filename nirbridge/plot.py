"""Pictures of a :class:`nirbridge.Run`: spike rasters and value traces (matplotlib).

matplotlib is an optional dependency (``pip install nirbridge[plot]``); it is imported
when a picture is asked for. Time runs along the x axis in seconds (step · dt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .errors import NirBridgeError

if TYPE_CHECKING:
    from .run import Run

__all__ = ["plot", "raster"]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise NirBridgeError(
            "drawing needs matplotlib: pip install matplotlib (or nirbridge[plot])"
        ) from None
    return plt


def _series(result: Run, key: str, sample: int) -> np.ndarray:
    """One sample of a record (or ``"output"``) as ``(T, neurons)`` float64."""
    if key == "output" and isinstance(result.output, torch.Tensor):
        value = result.output
    elif key.startswith("output:") and isinstance(result.output, dict) and key[7:] in result.output:
        value = result.output[key[7:]]
    elif key in result.records:
        value = result.records[key]
    else:
        raise NirBridgeError(
            f"nothing recorded under {key!r}; recorded: {sorted(result.records) or 'nothing'} "
            f"(pass record=[{key!r}] or record='all' to nirbridge.run)"
        )
    if not 0 <= sample < value.shape[1]:
        raise NirBridgeError(f"sample {sample} is out of range: the run has a batch of {value.shape[1]}")
    return value[:, sample].detach().reshape(value.shape[0], -1).to("cpu", torch.float64).numpy()


def _is_spikes(result: Run, key: str) -> bool:
    if key in result.spiking:
        return True
    name = "output" if key == "output" else key[7:] if key.startswith("output:") else None
    if name is None:
        return False
    return name in result.spiking_outputs or (key == "output" and bool(result.spiking_outputs))


def raster(result: Run, key: str, *, sample: int = 0, ax: Any = None) -> Any:
    """Spike raster of ``key`` (a spiking record or ``"output"``) for one sample.

    One dot per spike at (time in seconds, neuron index); returns the figure.
    """
    plt = _pyplot()
    data = _series(result, key, sample)
    figure, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7, 3))
    steps, neurons = np.nonzero(data)
    ax.scatter(steps * result.dt, neurons, s=4, marker="|", color="black", linewidths=1)
    ax.set_xlim(0, data.shape[0] * result.dt)
    ax.set_ylim(-0.5, data.shape[1] - 0.5)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("neuron")
    ax.set_title(f"{key}: {len(steps)} spikes, sample {sample}")
    return figure


def plot(result: Run, *keys: str, sample: int = 0, neurons: Sequence[int] | int = 8) -> Any:
    """One panel per key, stacked on a shared time axis: rasters for spikes, traces of
    ``neurons`` (the first so many, or the listed indices) for continuous values.
    With no keys, every record; returns the figure."""
    plt = _pyplot()
    keys = keys or tuple(result.records) or ("output",)
    figure, axes = plt.subplots(len(keys), 1, figsize=(7, 1.2 + 1.8 * len(keys)), sharex=True, squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        if _is_spikes(result, key):
            raster(result, key, sample=sample, ax=ax)
            ax.set_xlabel("")
            continue
        data = _series(result, key, sample)
        chosen = list(range(min(neurons, data.shape[1]))) if isinstance(neurons, int) else list(neurons)
        bad = [n for n in chosen if not 0 <= n < data.shape[1]]
        if bad:
            raise NirBridgeError(f"neurons {bad} are out of range for {key!r}, which has {data.shape[1]}")
        time = np.arange(data.shape[0]) * result.dt
        for n in chosen:
            ax.plot(time, data[:, n], linewidth=0.8, label=str(n))
        ax.set_ylabel(key)
        ax.set_title(f"{key}: neurons {chosen if len(chosen) <= 8 else f'{chosen[:8]}...'}, sample {sample}")
    axes[-1, 0].set_xlabel("time (s)")
    figure.tight_layout()
    return figure

"""Pictures of a :class:`nirbridge.Run`: spike rasters and value traces (matplotlib).

matplotlib is an optional dependency, imported when a picture is asked for: install it
with ``pip install matplotlib`` (or ``pip install -e ".[plot]"`` from a checkout of
nirbridge). Time runs along the x axis in seconds (step · dt). The figures use
matplotlib's constrained layout, so a plain ``figure.savefig(path)`` keeps every label.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .engine.schedule import RecordError
from .errors import NirBridgeError, ParameterError
from .text import for_matplotlib

if TYPE_CHECKING:
    from .run import Run

__all__ = ["plot", "raster"]

LEGEND_MAX = 8  # traces get a legend of neuron indices up to this many lines
THRESHOLD_COLOUR = "#555555"


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise NirBridgeError(
            'drawing needs matplotlib: pip install matplotlib (or pip install -e ".[plot]" in a '
            "checkout of nirbridge)"
        ) from None
    return plt


def _value(result: Run, key: str) -> torch.Tensor:
    """The whole record (or output) ``key``, ``[T, B, ...]``."""
    if key == "output" and isinstance(result.output, torch.Tensor):
        return result.output
    if key.startswith("output:") and isinstance(result.output, dict) and key[7:] in result.output:
        return result.output[key[7:]]
    if key in result.records:
        return result.records[key]
    raise NirBridgeError(
        f"nothing recorded under {key!r}; recorded: {sorted(result.records) or 'nothing'} "
        f"(pass record=[{key!r}] or record='all' to nirbridge.run)"
    )


def _series(result: Run, key: str, sample: int) -> np.ndarray:
    """One sample of a record (or ``"output"``) as ``(T, neurons)`` float64."""
    value = _value(result, key)
    if not 0 <= sample < value.shape[1]:
        raise NirBridgeError(f"sample {sample} is out of range: the run has a batch of {value.shape[1]}")
    return value[:, sample].detach().reshape(value.shape[0], -1).to("cpu", torch.float64).numpy()


def _is_spikes(result: Run, key: str) -> bool:
    """Whether ``key`` is a record or output that :func:`nirbridge.run` knows holds spikes."""
    if key in result.spiking:
        return True
    name = "output" if key == "output" else key[7:] if key.startswith("output:") else None
    if name is None:
        return False
    return name in result.spiking_outputs or (key == "output" and bool(result.spiking_outputs))


def _rasterable(result: Run, key: str) -> bool:
    """Spikes, or a node's output (not a state variable) whose values are all 0 or 1:
    what a module not built by nirbridge gives, whose spikes are not typed."""
    if _is_spikes(result, key):
        return True
    value = _value(result, key)
    if key in result.layout and result.layout[key][1] != "output":
        return False  # a state variable: membrane potential, synaptic current
    data = value.detach()
    return data.dtype == torch.bool or bool(((data == 0) | (data == 1)).all())


def _spiking_keys(result: Run) -> list[str]:
    return [key for key, (_, spikes) in result.series().items() if spikes]


def _draw_raster(
    result: Run, key: str, sample: int, ax: Any, neurons: Sequence[int] | int | None = None
) -> None:
    """The raster of every neuron of ``key``, or of ``neurons`` (the first so many, or the
    listed indices, each on its own row labelled with its index)."""
    data = _series(result, key, sample)
    if neurons is None:
        chosen = None
    else:
        chosen = list(range(min(neurons, data.shape[1]))) if isinstance(neurons, int) else list(neurons)
        bad = [n for n in chosen if not -data.shape[1] <= n < data.shape[1]]
        if bad:
            raise ParameterError(
                f"plot: neurons {bad} are out of range for {key!r}, which has {data.shape[1]}"
            )
        data = data[:, chosen]
    steps, rows = np.nonzero(data)
    ax.scatter(steps * _step(result), rows, s=4, marker="|", color="black", linewidths=1)
    ax.set_xlim(0, data.shape[0] * _step(result))
    ax.set_ylim(-0.5, data.shape[1] - 0.5)
    ax.set_ylabel("neuron")
    if chosen is not None and len(chosen) <= 16:
        ax.set_yticks(range(len(chosen)), [str(n) for n in chosen])
    shown = (
        "" if chosen is None else f", neurons {chosen}" if len(chosen) <= 8 else f", {len(chosen)} neurons"
    )
    ax.set_title(f"{for_matplotlib(key)}: {len(steps)} spikes{shown}, sample {sample}")


def raster(result: Run, *keys: str, sample: int = 0, ax: Any = None) -> Any:
    """Spike rasters of ``keys`` for one sample, one panel per key stacked on a shared
    time axis; with no keys, every spiking record (and a spiking output not recorded
    under another key). Returns the figure.

    One dot per spike at (time in seconds, neuron index). A key must hold spikes: a
    spiking record or output, or a node output whose values are all 0 or 1. A record of
    continuous values (a membrane potential ``"lif.v"``, a weighted sum) raises
    :class:`~nirbridge.RecordError` pointing to ``result.plot(key)``, which draws it as
    traces. ``ax`` draws a single key into an existing matplotlib axes (its figure is
    returned, its layout left alone); with more keys it raises
    :class:`~nirbridge.ParameterError`.
    """
    odd = [key for key in keys if not isinstance(key, str)]
    if odd:
        raise ParameterError(f"raster: keys are record names or 'output' (strings), got {odd!r}")
    plt = _pyplot()
    keys = keys or tuple(_spiking_keys(result))
    if not keys:
        raise RecordError(
            f"raster: the run recorded no spikes; recorded: {sorted(result.records) or 'nothing'} "
            "(pass record='all' to nirbridge.run, or draw values with result.plot())"
        )
    if ax is not None and len(keys) > 1:
        raise ParameterError(
            f"raster: ax= draws one key, but {len(keys)} were given ({', '.join(map(repr, keys))}); "
            "leave ax out to get one panel per key, or call raster once per axes"
        )
    for key in keys:
        if not _rasterable(result, key):
            raise RecordError(
                f"raster: {key!r} holds continuous values, not spikes; draw it as traces with "
                f"result.plot({key!r}). Spiking records: {_spiking_keys(result) or 'none'}"
            )
        _series(result, key, sample)  # names a bad sample before a figure is made
    if ax is not None:
        _draw_raster(result, keys[0], sample, ax)
        ax.set_xlabel(_time_label(result))
        return ax.figure
    figure, axes = plt.subplots(
        len(keys), 1, figsize=(7, 1.2 + 1.8 * len(keys)), sharex=True, squeeze=False, layout="constrained"
    )
    for panel, key in zip(axes[:, 0], keys):
        _draw_raster(result, key, sample, panel)
    axes[-1, 0].set_xlabel(_time_label(result))
    return figure


def _threshold_lines(result: Run, key: str, chosen: list[int], ax: Any) -> str:
    """Dashed lines at the firing threshold of the ``chosen`` neurons of membrane record
    ``key``: one labelled ``threshold`` where they share it, else one per distinct value
    (up to :data:`LEGEND_MAX`) naming its neurons. Returns a note for the title where
    the values are too many to draw, else ''."""
    threshold = result.thresholds.get(key)
    if threshold is None or not chosen:
        return ""
    shape = tuple(_value(result, key).shape[2:])
    try:
        per_neuron = torch.broadcast_to(threshold.detach().cpu().double(), shape).reshape(-1).numpy()
    except RuntimeError:
        return ""  # a threshold that does not fit the record: nothing to draw
    values = per_neuron[chosen]
    distinct = list(dict.fromkeys(values.tolist()))
    if len(distinct) > LEGEND_MAX:
        return f"; thresholds {min(distinct):.3g} to {max(distinct):.3g}"
    for value in distinct:
        label = "threshold"
        if len(distinct) > 1:
            label += f" ({', '.join(str(n) for n, v in zip(chosen, values) if v == value)})"
        ax.axhline(value, linestyle="--", linewidth=1.0, color=THRESHOLD_COLOUR, label=label)
    return ""


def _neurons(neurons: Any) -> int | list[int]:
    """``neurons=`` as a count or a list of indices, or a :class:`ParameterError`."""
    whole = (int, np.integer)
    if isinstance(neurons, whole) and not isinstance(neurons, bool):
        if neurons < 1:
            raise ParameterError(f"plot(neurons={neurons!r}): draw at least 1 neuron")
        return int(neurons)
    if isinstance(neurons, (str, bytes)) or not isinstance(neurons, Iterable):
        raise ParameterError(
            f"plot(neurons={neurons!r}): give how many neurons to draw (8) or their indices ([0, 5, 9])"
        )
    chosen = list(neurons)
    if not chosen or not all(isinstance(n, whole) and not isinstance(n, bool) for n in chosen):
        raise ParameterError(f"plot(neurons={neurons!r}): give neuron indices as whole numbers, at least one")
    return [int(n) for n in chosen]


def _draw_traces(result: Run, key: str, sample: int, neurons: Sequence[int] | int, ax: Any) -> None:
    data = _series(result, key, sample)
    chosen = list(range(min(neurons, data.shape[1]))) if isinstance(neurons, int) else list(neurons)
    bad = [n for n in chosen if not 0 <= n < data.shape[1]]
    if bad:
        raise ParameterError(f"plot: neurons {bad} are out of range for {key!r}, which has {data.shape[1]}")
    time = np.arange(data.shape[0]) * _step(result)
    lines = [ax.plot(time, data[:, n], linewidth=0.8, label=str(n))[0] for n in chosen]
    before = len(ax.get_lines())
    note = _threshold_lines(result, key, chosen, ax)
    handles = (lines if len(lines) <= LEGEND_MAX else []) + ax.get_lines()[before:]
    if handles:
        ax.legend(
            handles=handles,
            title="neuron" if len(lines) <= LEGEND_MAX else None,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize="x-small",
            title_fontsize="x-small",
            ncol=1 if len(handles) <= 5 else 2,
            frameon=False,
        )
    ax.set_ylabel(for_matplotlib(key))
    shown = chosen if len(chosen) <= LEGEND_MAX else f"{chosen[:LEGEND_MAX]}..."
    ax.set_title(f"{for_matplotlib(key)}: neurons {shown}, sample {sample}{note}")


def plot(result: Run, *keys: str, sample: int = 0, neurons: Sequence[int] | int | None = None) -> Any:
    """One panel per key, stacked on a shared time axis; with no keys, every record.
    Returns the figure.

    Spikes are drawn as rasters (as :func:`raster`) of every neuron, continuous values
    as traces of the first 8; ``neurons`` (the first so many, or the listed indices)
    chooses the neurons of both. Traces have a legend of
    neuron indices (outside the panel, up to 8 lines) and, for a membrane potential
    whose node's threshold is in ``result.thresholds``, a dashed line labelled
    ``threshold`` at the threshold of the drawn neurons: one where they share it, else
    one per distinct value, labelled with its neurons (more than 8 distinct values are
    named in the title instead).
    """
    chosen = None if neurons is None else _neurons(neurons)
    odd = [key for key in keys if not isinstance(key, str)]
    if odd:
        raise ParameterError(f"plot: keys are record names or 'output' (strings), got {odd!r}")
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)):
        raise ParameterError(f"plot(sample={sample!r}): give the index of a sample of the batch")
    plt = _pyplot()
    keys = keys or tuple(result.records) or ("output",)
    figure, axes = plt.subplots(
        len(keys), 1, figsize=(7, 1.2 + 1.8 * len(keys)), sharex=True, squeeze=False, layout="constrained"
    )
    try:
        for ax, key in zip(axes[:, 0], keys):
            if _is_spikes(result, key):
                _draw_raster(result, key, sample, ax, chosen)
            else:
                _draw_traces(result, key, sample, 8 if chosen is None else chosen, ax)
    except BaseException:
        plt.close(figure)  # no half-drawn figure left open in pyplot
        raise
    axes[-1, 0].set_xlabel(_time_label(result))
    return figure


def _step(result: Any) -> float:
    """The x axis's unit per step: dt in seconds, or 1 (steps) for a model without dt."""
    return result.dt if result.dt is not None else 1.0


def _time_label(result: Any) -> str:
    return "time (s)" if result.dt is not None else "time (steps)"

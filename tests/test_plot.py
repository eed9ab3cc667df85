"""Run.raster and Run.plot draw what was recorded (matplotlib's Agg backend, real figures)."""

from __future__ import annotations

import inspect

import matplotlib
import matplotlib.pyplot as plt
import nir
import numpy as np
import pytest
import torch

import nirbridge
import nirbridge.plot
from tests.conftest import EXAMPLES

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def result():
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir")
    x = (torch.rand(200, 2, 12, generator=torch.Generator().manual_seed(1)) < 0.3).float()
    return nirbridge.run(gm, x, record="all", bool_spikes=True)


def test_raster_puts_one_dot_per_spike_in_seconds(result, tmp_path):
    figure = result.raster("lif1.lif", sample=1)
    dots = figure.axes[0].collections[0].get_offsets()
    spikes = result.records["lif1.lif"][:, 1]
    assert len(dots) == int(spikes.sum()) > 0
    steps, neurons = np.nonzero(spikes.numpy())
    np.testing.assert_allclose(np.asarray(dots)[:, 0], steps * result.dt)
    np.testing.assert_array_equal(np.asarray(dots)[:, 1], neurons)
    assert figure.axes[0].get_xlabel() == "time (s)"
    figure.savefig(tmp_path / "raster.png")
    assert (tmp_path / "raster.png").stat().st_size > 1000


def test_plot_stacks_rasters_and_traces(result, tmp_path):
    figure = result.plot("lif1.lif", "lif2.v", "output", neurons=[0, 3])
    assert len(figure.axes) == 3
    assert len(figure.axes[0].collections) == 1  # a raster
    lines = [line for line in figure.axes[1].get_lines() if line.get_label() != "threshold"]
    assert len(lines) == 2
    np.testing.assert_allclose(lines[1].get_ydata(), result.records["lif2.v"][:, 0, 3].detach().numpy())
    assert len(figure.axes[2].collections) == 1  # the output is spikes
    chosen = result.records["lif1.lif"][:, 0][:, [0, 3]].numpy()  # the raster shows neurons 0 and 3 only
    dots = np.asarray(figure.axes[0].collections[0].get_offsets())
    assert len(dots) == int(chosen.sum()) > 0 and set(dots[:, 1]) <= {0, 1}
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["0", "3"]
    figure.savefig(tmp_path / "plot.png")
    everything = result.plot()
    assert len(everything.axes) == len(result.records)


def test_plot_errors_name_what_is_missing(result):
    with pytest.raises(nirbridge.NirBridgeError, match="nothing recorded under 'nope'"):
        result.raster("nope")
    with pytest.raises(nirbridge.NirBridgeError, match="sample 5 is out of range"):
        result.raster("lif2", sample=5)
    with pytest.raises(nirbridge.NirBridgeError, match=r"neurons \[99\] are out of range"):
        result.plot("lif2.v", neurons=[99])


@pytest.fixture(autouse=True)
def close_figures():
    """pyplot keeps every figure it makes; close them so none leaks into later tests."""
    yield
    plt.close("all")


def extents_inside(figure) -> list[str]:
    """Axis labels, titles and legends that reach outside the figure once drawn."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    box = figure.bbox
    outside = []
    for ax in figure.axes:
        parts = [ax.xaxis.label, ax.yaxis.label, ax.title]
        parts += [ax.get_legend()] if ax.get_legend() is not None else []
        for part in parts:
            if hasattr(part, "get_text") and not part.get_text():
                continue
            e = part.get_window_extent(renderer)
            if e.x0 < box.x0 - 0.5 or e.y0 < box.y0 - 0.5 or e.x1 > box.x1 + 0.5 or e.y1 > box.y1 + 0.5:
                outside.append(f"{ax.get_title()!r}: {part} at {e.bounds} in {box.bounds}")
    return outside


def threshold_graph(thresholds) -> nir.NIRGraph:
    """input → linear (identity) → lif → output, with the given per-neuron thresholds."""
    n = len(thresholds)
    lif = nir.LIF(np.full(n, 1e-3), np.ones(n), np.zeros(n), np.array(thresholds), np.zeros(n))
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([n])),
            "lin": nir.Linear(np.eye(n)),
            "lif": lif,
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "lin"), ("lin", "lif"), ("lif", "output")],
    )


def membranes(thresholds) -> nirbridge.Run:
    gm = nirbridge.nir_to_torch(threshold_graph(thresholds), dt=1e-4)
    x = torch.linspace(1.0, 2.0, len(thresholds)).expand(100, 1, len(thresholds))
    return nirbridge.run(gm, x, record="lif.v")


def test_raster_of_several_keys_stacks_one_panel_per_key_on_a_shared_time_axis(result):
    figure = result.raster("lif1.lif", "lif2", "output", sample=1)
    assert [ax.get_title().split(":")[0] for ax in figure.axes] == ["lif1.lif", "lif2", "output"]
    for ax, key in zip(figure.axes, ["lif1.lif", "lif2"]):
        assert len(ax.collections[0].get_offsets()) == int(result.records[key][:, 1].sum()) > 0
    assert figure.axes[0].get_shared_x_axes().joined(figure.axes[0], figure.axes[2])
    assert [ax.get_xlabel() for ax in figure.axes] == ["", "", "time (s)"]
    everything = result.raster()  # every spiking record
    assert [ax.get_title().split(":")[0] for ax in everything.axes] == ["lif1.lif", "lif2"]
    figure, ax = plt.subplots()
    assert result.raster("lif2", ax=ax) is figure and len(ax.collections) == 1
    with pytest.raises(nirbridge.ParameterError, match=r"ax= draws one key, but 2 were given"):
        result.raster("lif1.lif", "lif2", ax=ax)


def test_raster_refuses_continuous_values_and_draws_bool_and_float_spikes_alike(result):
    for key in ("lif1.lif.v", "fc1"):
        with pytest.raises(
            nirbridge.RecordError, match=rf"'{key}' holds continuous values.*result\.plot\('{key}'\)"
        ):
            result.raster(key)
    with pytest.raises(nirbridge.RecordError, match="'lif2.v' holds continuous values"):
        result.raster("lif2", "lif2.v")
    assert result.records["lif1.lif"].dtype == torch.bool
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir")
    x = (torch.rand(200, 2, 12, generator=torch.Generator().manual_seed(1)) < 0.3).float()
    floats = nirbridge.run(gm, x, record="all")
    assert floats.records["lif1.lif"].dtype == torch.float32
    as_bool = result.raster("lif1.lif", "output").axes
    as_float = floats.raster("lif1.lif", "output").axes
    for a, b in zip(as_bool, as_float):
        np.testing.assert_array_equal(a.collections[0].get_offsets(), b.collections[0].get_offsets())


def test_saved_figures_keep_their_labels_titles_and_legends(result, tmp_path):
    figures = {
        "raster": result.raster("lif1.lif"),
        "rasters": result.raster("lif1.lif", "lif2"),
        "plot": result.plot("lif1.lif", "lif1.lif.v", "lif2.v", neurons=[0, 3]),
        "plot one": result.plot("lif2.v"),
    }
    for name, figure in figures.items():
        figure.savefig(tmp_path / f"{name}.png")
        assert extents_inside(figure) == [], name


def test_traces_have_a_legend_of_neurons_and_the_threshold_line():
    run = membranes([0.7, 0.7, 0.7])
    assert list(run.records) == ["lif.v"] and "lif.v" in run.thresholds
    ax = run.plot("lif.v").axes[0]
    (line,) = [line for line in ax.get_lines() if line.get_label() == "threshold"]
    np.testing.assert_allclose(line.get_ydata(), [0.7, 0.7])
    assert line.get_linestyle() == "--"
    assert ax.get_ylim()[1] >= 0.7
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["0", "1", "2", "threshold"]

    ax = membranes([0.5, 0.7, 0.9]).plot("lif.v", neurons=[0, 2]).axes[0]
    lines = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()}
    assert lines == pytest.approx(
        {"0": lines["0"], "2": lines["2"], "threshold (0)": 0.5, "threshold (2)": 0.9}
    )


def test_the_install_hint_names_an_index_that_has_the_package():
    source = inspect.getsource(nirbridge.plot)
    assert "nirbridge[plot]" not in source
    assert "pip install matplotlib" in nirbridge.plot.__doc__ and "pip install matplotlib" in source


@pytest.mark.parametrize(
    ("neurons", "says"),
    [
        ("abc", "how many neurons"),
        (0, "at least 1"),
        ([1.5], "whole numbers"),
        ([], "whole numbers"),
        (True, "how many"),
    ],
)
def test_neurons_that_name_no_neuron_are_refused(neurons, says):
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir", dt=1e-4)
    result = nirbridge.run(gm, (torch.rand(20, 1, 12) < 0.5).float(), record=["lif1.lif.v"])
    with pytest.raises(nirbridge.ParameterError, match=says):
        result.plot("lif1.lif.v", neurons=neurons)
    figure = result.plot("lif1.lif.v", neurons=np.int64(3))
    assert len(figure.axes[0].lines) >= 3


def test_keys_that_are_not_names_are_refused():
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir", dt=1e-4)
    result = nirbridge.run(gm, (torch.rand(20, 1, 12) < 0.5).float(), record="all")
    for draw in (result.plot, result.raster):
        for key in (None, 1):
            with pytest.raises(nirbridge.ParameterError, match="keys are record names"):
                draw(key)

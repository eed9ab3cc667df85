"""Run.raster and Run.plot draw what was recorded (matplotlib's Agg backend, real figures)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
import torch

import nirbridge
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
    lines = figure.axes[1].get_lines()
    assert len(lines) == 2
    np.testing.assert_allclose(lines[1].get_ydata(), result.records["lif2.v"][:, 0, 3].detach().numpy())
    assert len(figure.axes[2].collections) == 1  # the output is spikes
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

"""The demo runs end to end and its layers spike."""

from __future__ import annotations

from nirbridge import demo


def test_demo_round_trip(tmp_path, capsys):
    counts = demo.run(steps=50, batch=2, out=tmp_path / "demo.nir", plot=tmp_path / "plots" / "raster.png")
    assert (tmp_path / "demo.nir").exists()
    assert set(counts) == {"hidden.lif", "mid", "readout"}
    assert all(c > 0 for c in counts.values())
    out = capsys.readouterr().out
    assert "time per step: " in out and "us (batch 2, 1 torch thread, stepping gm(x, state)" in out
    assert "output spikes that differ from the original torch model: 0" in out
    picture = tmp_path / "plots" / "raster.png"
    assert f"raster plot of sample 0 (hidden.lif, mid, readout, output): {picture}" in out
    assert picture.read_bytes().startswith(b"\x89PNG") and picture.stat().st_size > 10_000

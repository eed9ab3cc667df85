"""The swap in conftest.py is in force: files written here are nirbridge's, not nir's."""

from __future__ import annotations

import h5py
import nir
import numpy as np

from tests.nir_upstream.conftest import _NIR_READ


def test_nir_write_and_read_are_nirbridges_here(tmp_path):
    graph = nir.NIRGraph.from_list(
        nir.Input(np.array([3])), nir.Scale(np.arange(3.0)), nir.Output(np.array([3]))
    )
    nir.write(tmp_path / "g.nir", graph)
    with h5py.File(tmp_path / "g.nir") as f:
        scale = f["node/nodes/scale/scale"]
        assert scale.compression is None  # nir.write would gzip it
        assert f["node/type"].dtype.kind == "S"  # nirbridge stores fixed-length UTF-8
    assert type(nir.read(tmp_path / "g.nir").nodes["scale"]) is nir.Scale
    assert type(_NIR_READ(tmp_path / "g.nir").nodes["scale"]) is nir.Scale

"""nirbridge.io: files written by nirbridge read in nir, and the reverse; atomic writes."""

from __future__ import annotations

import io
import os

import nir
import numpy as np
import pytest

import nirbridge
from tests.conftest import EXAMPLES


def sample_graph() -> nir.NIRGraph:
    rng = np.random.default_rng(0)
    sub = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "lif": nir.LIF(
                tau=np.ones(3), r=np.ones(3), v_leak=np.zeros(3), v_threshold=np.ones(3), v_reset=np.zeros(3)
            ),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "lif"), ("lif", "output")],
        type_check=False,
    )
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "fc": nir.Affine(rng.normal(size=(3, 2)), rng.normal(size=3)),
            "sub": sub,
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "fc"), ("fc", "sub"), ("sub", "output")],
        metadata={"dt": 1e-3, "author": "test"},
        type_check=False,
    )


def assert_same(a: nir.NIRGraph, b: nir.NIRGraph, node_order: bool = True) -> None:
    if node_order:
        assert list(a.nodes) == list(b.nodes)
    assert set(a.nodes) == set(b.nodes) and [tuple(e) for e in a.edges] == [tuple(e) for e in b.edges]
    for name, node in a.nodes.items():
        other = b.nodes[name]
        assert type(node) is type(other)
        if isinstance(node, nir.NIRGraph):
            assert_same(node, other, node_order)
        for field in ("weight", "bias", "tau", "r", "v_leak", "v_threshold", "v_reset"):
            if hasattr(node, field):
                np.testing.assert_array_equal(getattr(node, field), getattr(other, field))


def test_written_files_read_back_in_nir_and_nirbridge(tmp_path):
    graph = sample_graph()
    path = tmp_path / "g.nir"
    nirbridge.write(path, graph)
    assert_same(graph, nir.read(path))  # nirbridge keeps node order, and nir reads it
    back = nirbridge.read(path)
    assert_same(graph, back)
    assert back.metadata == {"dt": 1e-3, "author": "test"}


def test_nir_written_files_read_in_nirbridge(tmp_path):
    graph = sample_graph()
    nir.write(tmp_path / "n.nir", graph)
    # nir.write does not track creation order, so HDF5 lists its nodes alphabetically
    assert_same(graph, nirbridge.read(tmp_path / "n.nir"), node_order=False)


def test_file_objects(tmp_path):
    buffer = io.BytesIO()
    nirbridge.write(buffer, sample_graph())
    buffer.seek(0)
    assert_same(sample_graph(), nirbridge.read(buffer))


def test_failed_write_leaves_the_target_untouched(tmp_path):
    path = tmp_path / "g.nir"
    nirbridge.write(path, sample_graph())
    before = path.read_bytes()
    bad = sample_graph()
    bad.metadata = {"thing": object()}
    with pytest.raises(nirbridge.NirFileError):
        nirbridge.write(path, bad)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["g.nir"]


def test_unreadable_files_raise_nir_file_error(tmp_path):
    path = tmp_path / "junk.nir"
    path.write_bytes(b"not hdf5 at all")
    with pytest.raises(nirbridge.NirFileError, match="junk.nir"):
        nirbridge.read(path)
    with pytest.raises(nirbridge.NirFileError, match="missing.nir"):
        nirbridge.read(tmp_path / "missing.nir")


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.nir")), ids=lambda p: p.name[:40])
def test_every_real_file_reads(path):
    graph = nirbridge.read(path)
    assert any(isinstance(n, nir.Input) for n in graph.nodes.values())

"""The ``nirbridge info`` command: readable summaries, JSON, and one-line failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nir
import numpy as np
from click.testing import CliRunner

import nirbridge
from nirbridge.cli import main
from tests.conftest import EXAMPLES


def network() -> nir.NIRGraph:
    rng = np.random.default_rng(0)
    inner = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([5])),
            "lif": nir.LIF(np.full(5, 2e-3), np.ones(5), np.zeros(5), np.ones(5), np.zeros(5)),
            "out": nir.Output(np.array([5])),
        },
        edges=[("in", "lif"), ("lif", "out")],
        type_check=False,
    )
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(rng.normal(size=(5, 3)).astype(np.float32), np.zeros(5, np.float32)),
            "core": inner,
            "readout": nir.Linear(rng.normal(size=(2, 5))),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "fc"), ("fc", "core"), ("core", "readout"), ("readout", "output")],
        metadata={"dt": 5e-4},
        type_check=False,
    )


def test_info_summarises_a_file(tmp_path):
    path = tmp_path / "net.nir"
    nirbridge.write(path, network())
    result = CliRunner().invoke(main, ["info", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == str(path)
    expected = {
        "written by": f"nir {nir.version}, {os.path.getsize(path) / 1e3:.1f} kB",
        "graph": "8 nodes, 6 edges, 1 nested graph(s)",
        "node types": "2 Input, 2 Output, 1 Affine, 1 LIF, 1 Linear, 1 NIRGraph",
        "inputs": "input (3,)",
        "outputs": "output (2,)",
        # Affine 15 + 5 float32 (80 B), LIF 5 x 5 + Linear 10 float64 (280 B)
        "parameters": "55 values, 360 B (35 float64, 20 float32)",
        "dt": "0.0005 s (metadata)",
        "warnings": "none",
    }
    for line in lines[1:]:
        key, value = line.strip().split("  ", 1)
        assert value.strip() == expected.pop(key), line
    assert not expected


def test_info_json_and_warnings_of_a_real_file():
    path = EXAMPLES / "spyx_at_00e6ba49__research__paper__spyx_shd.nir"
    result = CliRunner().invoke(main, ["info", "--json", str(path)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    graph = nir.read(path, type_check=False)
    assert summary["version"] == "1.0.0"
    assert summary["nodes"] == len(graph.nodes) and summary["edges"] == len(graph.edges)
    assert summary["inputs"] == {"input": [128]} and summary["outputs"] == {"output": [20]}
    expected = sum(
        np.size(v)
        for node in graph.nodes.values()
        if not isinstance(node, (nir.Input, nir.Output))
        for k, v in vars(node).items()
        if k not in ("input_type", "output_type", "metadata")
    )
    assert summary["parameters"] == expected
    assert summary["dt"] is None
    assert len(summary["warnings"]) == 3 and "transposed" in summary["warnings"][0]
    human = CliRunner().invoke(main, ["info", str(path)])
    assert "warnings     3" in human.output and "stored transposed" in human.output


def test_info_fails_with_one_line_per_unreadable_file(tmp_path):
    junk = tmp_path / "junk.nir"
    junk.write_bytes(b"\x00" * 64)
    malformed = EXAMPLES / "NIR__paper__03_rnn__extras__braille_noDelay_bias_zero_subgraph.nir"
    good = EXAMPLES / "NIR__paper__01_lif__lif_norse.nir"
    result = CliRunner().invoke(
        main, ["info", str(junk), str(malformed), str(tmp_path / "none.nir"), str(good)]
    )
    assert result.exit_code == 1
    errors = result.stderr.splitlines()
    assert len(errors) == 3
    assert errors[0].startswith("nirbridge info: ") and "junk.nir: not an HDF5 file" in errors[0]
    assert "names node 'lif', which is not in the graph" in errors[1]
    assert errors[2].endswith("none.nir: no such file")
    assert result.stdout.startswith(str(good))  # the readable file is still summarised


def test_info_reports_shapes_and_dt_it_cannot_read_as_unknown(tmp_path):
    graph = network()
    graph.nodes["input"] = nir.Input({"input": np.array(["a", "b"])})
    graph.metadata = {"dt": float("nan")}
    nirbridge.write(tmp_path / "odd.nir", graph)
    result = CliRunner().invoke(main, ["info", "--json", str(tmp_path / "odd.nir")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["inputs"] == {"input": None} and summary["dt"] is None


def test_the_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "nirbridge")
    path = str(EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir")
    for command in ([script, "info", path], [sys.executable, "-m", "nirbridge", "info", path]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert (
            "node types   5 IF, 3 Conv2d, 2 Affine, 2 SumPool2d, 1 Flatten, 1 Input, 1 Output"
            in result.stdout
        )
    missing = subprocess.run([script, "info", "nowhere.nir"], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and missing.stderr.strip() == "nirbridge info: nowhere.nir: no such file"

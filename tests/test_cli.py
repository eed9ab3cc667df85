"""The ``nirbridge`` commands: info (readable summaries, JSON, one-line failures), and
convert, run, verify, support and draw through the installed console script."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys

import click
import h5py
import nir
import numpy as np
import pytest
import torch
from click.testing import CliRunner

import nirbridge
from nirbridge.adapters import elasticai
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
    assert len(summary["warnings"]) == 5 and "transposed" in summary["warnings"][0]
    # the 16 negative time constants in one message, in the command line's terms
    negative = summary["warnings"][3]
    assert negative.startswith("time constants below 0: node 'LIF' (LIF): tau is negative at neurons 0, ")
    assert (
        "(8 of 64), down to -3212 s; node 'LIF_1' (LIF)" in negative
        and "(8 of 64), down to -2307 s" in negative
    )
    assert "pass --allow-negative-tau" in negative and "nir_to_torch" not in negative
    assert summary["warnings"][4].startswith("no time step recorded") and "--dt" in summary["warnings"][4]
    human = CliRunner().invoke(main, ["info", str(path)])
    assert "warnings     5" in human.output and "stored transposed" in human.output


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
    with pytest.warns(nirbridge.ParameterWarning, match="metadata dt = nan"):
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


# ----------------------------------------------------------------------------- the other commands,
# through the installed console script as a user types them

SCRIPT = os.path.join(os.path.dirname(sys.executable), "nirbridge")
BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"


def nirbridge_cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd, check=False
    )


def many(commands: list[list]) -> list[subprocess.CompletedProcess]:
    """Run several invocations side by side (each starts Python and torch)."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda args: nirbridge_cli(*args), commands))


def test_every_command_has_help_with_an_example():
    commands = ["info", "convert", "run", "verify", "support", "draw", "export", "conformance"]
    results = many([[command, "--help"] for command in commands])
    for command, result in zip(commands, results):
        assert result.returncode == 0, result.stderr
        assert f"Usage: nirbridge {command}" in result.stdout
        assert "Example:" in result.stdout and f"nirbridge {command} " in result.stdout
    top = nirbridge_cli("--help")
    assert all(command in top.stdout for command in commands)


def test_every_command_fails_cleanly_on_a_folder_a_text_file_and_a_missing_path(tmp_path):
    folder = tmp_path / "folder.nir"
    folder.mkdir()
    text = tmp_path / "notes.nir"
    text.write_text("these are my notes, not a network\n")
    missing = tmp_path / "missing.nir"
    reasons = {folder: "is a folder", text: "not an HDF5 file", missing: "no such file"}
    commands = {
        "info": lambda p: ["info", p],
        "run": lambda p: ["run", p],
        "verify": lambda p: ["verify", p],
        "draw": lambda p: ["draw", p, "-o", tmp_path / "graph.svg"],
        "convert": lambda p: ["convert", p, tmp_path / "model.json"],
    }
    cases = [(name, path) for name in commands for path in reasons]
    results = many([commands[name](path) for name, path in cases])
    for (name, path), result in zip(cases, results):
        assert result.returncode == 1, (name, path, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, (name, path, result.stderr)
        assert lines[0].startswith(f"nirbridge {name}: {path}: {reasons[path]}"), lines[0]
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.nir", "notes.nir"]  # nothing written


def test_run_records_writes_nir_graph_data_and_a_plot(tmp_path):
    rng = np.random.default_rng(0)
    spikes = rng.random((60, 3, 12)) < 0.3
    with h5py.File(tmp_path / "spikes.h5", "w") as file:
        file["input"] = spikes
    result = nirbridge_cli(
        "run", BRAILLE, "--dt", "1e-4", "--input", tmp_path / "spikes.h5", "--record", "lif1.lif",
        "--record", "lif2.v", "--out", tmp_path / "record.h5", "--plot", tmp_path / "raster.png",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with torch.no_grad():
        expected = nirbridge.run(
            nirbridge.nir_to_torch(BRAILLE, dt=1e-4), torch.from_numpy(spikes), record=["lif1.lif", "lif2.v"]
        )
    count = int(expected.records["lif1.lif"].sum())
    assert count > 0
    assert f"60 steps of 0.0001 s, batch 3, input: {tmp_path / 'spikes.h5'}" in result.stdout
    table = {
        line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[3:] if line.startswith("  ")
    }
    # outputs and state variables, then the graph's output
    assert list(table) == ["lif1.lif", "lif1.lif.i", "lif1.lif.v", "lif2.v", "output"]
    assert table["lif1.lif"][:5] == ["spikes", "38", "neurons", str(count), "spikes,"]
    rate = count / (60 * 3 * 38)
    assert " ".join(table["lif1.lif"][5:]) == (
        f"{rate:.4f} per neuron per step ({rate / 1e-4:.4g} Hz); "
        f"{int((expected.records['lif1.lif'].sum((0, 1)) == 0).sum())} of 38 neurons silent"
    )
    assert table["lif2.v"][:3] == ["values", "7", "neurons"]
    data = nir.read_data(tmp_path / "record.h5")
    events = data.nodes["lif1.lif"].observables["output"]
    assert isinstance(events, nir.EventData) and events.t_max == pytest.approx(60 * 1e-4)
    assert int((np.asarray(events.idx) >= 0).sum()) == count  # padded with -1
    traces = data.nodes["lif2"].observables["v"]
    np.testing.assert_allclose(
        traces.data, expected.records["lif2.v"].transpose(0, 1).numpy(), rtol=0, atol=0
    )
    assert (tmp_path / "raster.png").read_bytes().startswith(b"\x89PNG")


def test_run_with_random_input_and_bad_input_files(tmp_path):
    result = nirbridge_cli(
        "run", BRAILLE, "--steps", "20", "--batch", "2", "--rate", "0.5", "--record", "lif2"
    )
    assert result.returncode == 0, result.stderr
    assert "20 steps of 0.0001 s, batch 2, input: random spikes, rate 0.5, seed 0" in result.stdout
    assert result.stderr.startswith("nirbridge run: warning: the graph records no time step")
    assert len(result.stderr.splitlines()) == 1
    assert any(line.split()[:4] == ["lif2", "spikes", "7", "neurons"] for line in result.stdout.splitlines())
    with h5py.File(tmp_path / "wrong.h5", "w") as file:
        file["input"] = np.zeros((5, 2, 13))
    with h5py.File(tmp_path / "scalar.h5", "w") as file:
        file["input"] = 1.0
    with h5py.File(tmp_path / "two.h5", "w") as file:
        file["a"] = np.zeros((5, 12))
        file["b"] = np.zeros((5, 12))
    with h5py.File(tmp_path / "empty.h5", "w") as file:
        file["input"] = np.zeros((5, 0, 12))
    results = many(
        [
            ["run", BRAILLE, "--dt", "1e-4", "--input", tmp_path / "empty.h5"],
            ["run", BRAILLE, "--dt", "1e-4", "--input", tmp_path / "wrong.h5"],
            ["run", BRAILLE, "--dt", "1e-4", "--input", tmp_path / "two.h5"],
            ["run", BRAILLE, "--dt", "1e-4", "--rate", "2"],
            ["run", BRAILLE, "--dt", "1e-4", "--record", "nowhere"],
            ["run", BRAILLE, "--dt", "1e-4", "--plot", tmp_path / "raster.bmp"],
            ["run", BRAILLE, "--dt", "1e-4", "--steps", "0"],
            ["run", BRAILLE, "--dt", "1e-4", "--input", tmp_path / "scalar.h5"],
            ["run", BRAILLE, "--dt", "1e-4", "--backend", "eager", "--compile"],
            ["run", BRAILLE, "--dt", "1e-4", "--backend", "eager", "--precision", "fast", "--steps", "5"],
        ]
    )
    expected = [
        "dataset 'input' has shape (5, 0, 12): a batch of 0 samples, so nothing would run",
        "dataset 'input' has shape (5, 2, 13); input 'input' takes [T, B, 12] or [T, 12]",
        "no dataset for input(s) ['input']; it holds ['a', 'b']",
        "--rate 2.0: a spike probability per step, between 0 and 1",
        "nowhere",
        "--plot",
        "--steps 0: run at least one step",
        "dataset 'input' holds a single value",
        "compile=True is backend='compile'",
    ]
    assert results[-1].returncode == 0, results[-1].stderr  # eager, TF32 allowed: runs
    assert "5 steps of 0.0001 s" in results[-1].stdout
    for result, text in zip(results, expected):
        assert result.returncode == 1 and text in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_verify_agrees_with_norse_and_snntorch_and_reports_a_changed_file(tmp_path):
    result = nirbridge_cli("verify", BRAILLE, "--steps", "40")
    assert result.returncode == 0, result.stderr
    assert f"{BRAILLE} vs norse: agree on" in result.stdout
    assert f"{BRAILLE} vs snntorch: agree on" in result.stdout
    graph = nirbridge.read(BRAILLE)
    graph.nodes["fc2"].weight[0] += 5.0  # a trained copy: the readout moves, the hidden layer does not
    nirbridge.write(tmp_path / "changed.nir", graph)
    result = nirbridge_cli("verify", BRAILLE, "--against", tmp_path / "changed.nir", "--steps", "40")
    assert result.returncode == 1
    assert f"vs {tmp_path / 'changed.nir'}: DIFFER, first at step 0 in 'fc2'" in result.stdout
    assert "lif1.lif" in result.stdout  # the table lists every comparison
    bad = nirbridge_cli("verify", BRAILLE, "--against", "brian2")
    assert bad.returncode == 1 and "--against 'brian2': give nirbridge, norse, snntorch" in bad.stderr


NATIVE_NET = """
import snntorch as snn
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 10)
        self.lif = snn.Leaky(beta=0.9, reset_mechanism="zero", reset_delay=False)

    def forward(self, x, mem=None):
        spk, mem = self.lif(self.fc(x), mem)
        return spk, mem
"""


def test_verify_of_two_files_pairs_their_inputs_by_position_as_the_api_does(tmp_path):
    """Two exports of one network whose Input nodes are named otherwise ("input", "x")
    agree, in the CLI as in ``nirbridge.verify``."""
    graph = nirbridge.read(BRAILLE)
    rename = {"input": "x"}
    renamed = nir.NIRGraph(
        nodes={rename.get(k, k): v for k, v in graph.nodes.items()},
        edges=[(rename.get(a, a), rename.get(b, b)) for a, b in graph.edges],
        metadata=graph.metadata,
        type_check=False,
    )
    nirbridge.write(tmp_path / "x.nir", renamed)
    result = CliRunner().invoke(
        main, ["verify", str(BRAILLE), "--against", str(tmp_path / "x.nir"), "--dt", "1e-4", "--steps", "30"]
    )
    assert result.exit_code == 0, result.output
    assert f"vs {tmp_path / 'x.nir'}: agree on 10 outputs" in result.stdout


def test_verify_takes_a_native_model_from_a_python_file(tmp_path):
    import importlib.util

    (tmp_path / "net.py").write_text(NATIVE_NET)
    spec = importlib.util.spec_from_file_location("native_net_for_test", tmp_path / "net.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(4)
    net = module.Net()
    with torch.no_grad():
        net.fc.weight.uniform_(0.2, 0.8)
    torch.save(net.state_dict(), tmp_path / "net.pt")
    from nirbridge.adapters import snntorch as snntorch_adapter

    nirbridge.write(tmp_path / "net.nir", snntorch_adapter.to_nir(net, torch.zeros(1, 6)))
    native = f"{tmp_path / 'net.py'}:Net"
    args = ("verify", tmp_path / "net.nir", "--against", native, "--steps", "50")
    result = nirbridge_cli(*args, "--weights", tmp_path / "net.pt")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"vs {native}: agree on 3 outputs and records over 50 steps (2 of them spiking)" in result.stdout
    untrained = nirbridge_cli(*args)  # the class's own initial weights: not the exported ones
    assert untrained.returncode == 1 and "DIFFER, first at step 0 in 'fc'" in untrained.stdout
    missing = nirbridge_cli("verify", tmp_path / "net.nir", "--against", f"{tmp_path / 'net.py'}:Nett")
    assert missing.returncode == 1 and "has no 'Nett'; its modules: Net" in missing.stderr
    stray = nirbridge_cli(
        "verify", tmp_path / "net.nir", "--against", "norse", "--weights", tmp_path / "net.pt"
    )
    assert stray.returncode == 1 and "--weights loads into a native model" in stray.stderr
    assert "agree" not in stray.stdout  # refused before anything ran


SCRIPTS = {
    "import_exit0.py": "import sys\nprint('training...')\nsys.exit(0)\n",
    "argparse_script.py": (
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--epochs', type=int)\n"
        "parser.parse_args()\nraise SystemExit(0)\n"
    ),
    "exit_in_net.py": "import sys\ndef Net():\n    sys.exit()\n",
    "exit_status.py": "raise SystemExit(3)\n",
    "exit_in_eval.py": (
        "import sys, torch\nclass Net(torch.nn.Module):\n    def eval(self):\n        sys.exit(0)\n"
    ),
    "generator_exit.py": "raise GeneratorExit\n",
}


def test_verify_refuses_a_python_file_that_exits_instead_of_giving_a_model(tmp_path):
    """A script without a main guard (``sys.exit(0)``, argparse reading nirbridge's own
    options, an exit inside NAME's call) verified nothing: an error naming the file and
    the guard to add, never status 0."""
    nirbridge.write(tmp_path / "m.nir", network())
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)
    results = many([["verify", tmp_path / "m.nir", "--against", f"{tmp_path / n}:Net"] for n in SCRIPTS])
    for name, result in zip(SCRIPTS, results):
        assert result.returncode == 1, (name, result.stdout, result.stderr)
        assert name in result.stderr, result.stderr
        if name != "generator_exit.py":
            assert 'if __name__ == "__main__":' in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "agree" not in result.stdout
        assert "training..." not in result.stdout  # what the file prints goes to stderr
    assert "exited with status 3" in results[3].stderr
    assert "calling Net()" in results[2].stderr


def test_verify_imports_a_python_file_beside_its_own_modules_as_python_would(tmp_path):
    """``train.py`` doing ``from model import Net`` loads under the console script, from
    any working folder, and leaves ``sys.path`` and ``sys.argv`` as they were."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(NATIVE_NET)
    (project / "train.py").write_text("import sys\nfrom model import Net\nassert sys.argv[1:] == []\n")
    torch.manual_seed(4)
    sys.path.insert(0, str(project))
    try:
        from model import Net
    finally:
        sys.path.remove(str(project))
        sys.modules.pop("model", None)
    net = Net()
    from nirbridge.adapters import snntorch as snntorch_adapter

    nirbridge.write(tmp_path / "net.nir", snntorch_adapter.to_nir(net, torch.zeros(1, 6)))
    torch.save(net.state_dict(), tmp_path / "net.pt")
    args = ["verify", str(tmp_path / "net.nir"), "--against", f"{project / 'train.py'}:Net"]
    result = nirbridge_cli(*args, "--weights", tmp_path / "net.pt", "--steps", "20")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "agree" in result.stdout
    path, argv = list(sys.path), list(sys.argv)
    CliRunner().invoke(main, [*args, "--steps", "3"])
    assert sys.path == path and sys.argv == argv
    sys.modules.pop("model", None)


def test_support_prints_the_maps_as_a_table():
    result = nirbridge_cli("support")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NIR",
        "type",
        "nirbridge",
        "torch",
        "(export)",
        "norse",
        "snntorch",
        "spikingjelly",
    ]
    lif = next(line for line in lines if line.startswith("LIF "))
    assert lif.split() == [
        *("LIF", "neurons.LIF", "⇄", "neurons.LIF", "LIFBoxCell", "⇄", "Leaky", "⇄"),
        *("LIFNode,", "ParametricLIFNode", "⇄"),
    ]
    as_json = json.loads(nirbridge_cli("support", "--json").stdout)
    assert {row["NIR type"] for row in as_json} >= {t.__name__ for t in nirbridge.DEFAULT_MAP}


def test_draw_shows_the_braille_srnn_recurrent_edge(tmp_path):
    results = many(
        [
            ["draw", BRAILLE, "-o", tmp_path / "braille.svg"],
            ["draw", BRAILLE, "-o", tmp_path / "braille.png", "--engine", "matplotlib"],
            ["draw", BRAILLE, "-o", tmp_path / "braille.mmd"],
            ["draw", BRAILLE, "-o", tmp_path / "braille.jpeg"],
        ]
    )
    assert [r.returncode for r in results] == [0, 0, 0, 1], [r.stderr for r in results]
    assert results[0].stdout.strip() == f"wrote {tmp_path / 'braille.svg'} (graphviz)"
    svg = (tmp_path / "braille.svg").read_text()
    assert "lif1.w_rec" in svg and "delayed" in svg and 'stroke="#c0392b"' in svg
    assert (tmp_path / "braille.png").read_bytes().startswith(b"\x89PNG")
    mermaid = (tmp_path / "braille.mmd").read_text()
    assert "-. delayed .->" in mermaid and "lif1.w_rec<br/>Affine (38,)" in mermaid
    assert "cannot tell the picture format from '.jpeg'" in results[3].stderr


def test_draw_lays_the_cnn_out_top_to_bottom_unless_asked_otherwise(tmp_path):
    results = many(
        [
            ["draw", CNN, "-o", tmp_path / "auto.dot"],
            ["draw", CNN, "-o", tmp_path / "lr.dot", "--rankdir", "LR"],
            ["draw", BRAILLE, "-o", tmp_path / "braille.dot", "--rankdir", "TB"],
            ["draw", CNN, "-o", tmp_path / "bad.dot", "--rankdir", "BT"],
        ]
    )
    assert [r.returncode for r in results] == [0, 0, 0, 2], [r.stderr for r in results]
    assert "rankdir=TB" in (tmp_path / "auto.dot").read_text()  # 15 nodes in one chain
    assert "rankdir=LR" in (tmp_path / "lr.dot").read_text()
    assert "rankdir=TB" in (tmp_path / "braille.dot").read_text()
    assert "'BT' is not one of 'TB', 'LR'" in results[3].stderr


def test_convert_between_nir_and_elasticai_json_and_recompress(tmp_path):
    results = many(
        [
            ["convert", BRAILLE, tmp_path / "braille.json"],
            ["convert", BRAILLE, tmp_path / "gzipped.nir", "--compression", "gzip"],
            ["convert", BRAILLE, tmp_path / "braille068.json", "--ir-version", "0.68"],
        ]
    )
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]
    assert results[0].stdout.startswith(f"wrote {tmp_path / 'braille.json'}: elasticai 0.66 IR with 6 ")
    assert results[2].stdout.startswith(f"wrote {tmp_path / 'braille068.json'}: elasticai 0.68 IR with 6 ")
    document = json.loads((tmp_path / "braille.json").read_text())
    ir, state_dict = elasticai.from_nir(BRAILLE)
    assert document["ir"] == json.loads(json.dumps(ir))  # tuples become lists
    assert document["ir_version"] == "0.66" and set(document["state_dict"]) == set(state_dict)
    document = json.loads((tmp_path / "braille068.json").read_text())
    root, registry = elasticai.from_nir(BRAILLE, ir_version="0.68", as_dicts=True)[0]
    assert document["ir"] == json.loads(json.dumps({"root": root, "registry": registry}))
    assert document["ir_version"] == "0.68" and set(document["state_dict"]) == set(state_dict)
    original = nirbridge.read(BRAILLE)
    for written in ("braille.json", "braille068.json"):
        back = nirbridge_cli("convert", tmp_path / written, tmp_path / "back.nir")
        assert back.returncode == 0, back.stderr
        again = nirbridge.read(tmp_path / "back.nir")
        assert list(again.nodes) == list(original.nodes) and again.edges == original.edges
        for name, node in original.nodes.items():
            for field, value in vars(node).items():
                if isinstance(value, np.ndarray):
                    np.testing.assert_array_equal(
                        getattr(again.nodes[name], field), value, err_msg=f"{written}: {name}.{field}"
                    )
    gzipped = nirbridge.read(tmp_path / "gzipped.nir")
    np.testing.assert_array_equal(gzipped.nodes["fc1"].weight, original.nodes["fc1"].weight)
    with h5py.File(tmp_path / "gzipped.nir") as file:
        assert file["node/nodes/fc1/weight"].compression == "gzip"
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"nodes": []}')
    results = many(
        [
            ["convert", tmp_path / "broken.json", tmp_path / "x.nir"],
            ["convert", tmp_path / "other.json", tmp_path / "x.nir"],
            ["convert", BRAILLE, tmp_path / "x.onnx"],
        ]
    )
    expected = [
        "broken.json: not a JSON file",
        "other.json: not an elasticai IR file",
        "cannot convert .nir to .onnx",
    ]
    for result, text in zip(results, expected):
        assert result.returncode == 1 and text in result.stderr, result.stderr
    assert not (tmp_path / "x.nir").exists()


# ----------------------------------------------------------------------------- info --nodes

SRNN_NESTED = EXAMPLES / "spyx__docs__examples__nir__rsnn__braille_noDelay_bias_zero_subgraph.nir"
CNN = EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir"
HYPERPARAMETERS = ("input_type", "output_type", "metadata", "input_shape", "stride", "padding", "dilation")


def node_table(stdout: str) -> list[list[str]]:
    """The rows of `info --nodes`'s table, split on runs of two or more spaces, each name
    keeping its indentation (the first 4 spaces indent the whole table)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  nodes        in evaluation order"))
    assert lines[start + 1].split() == ["name", "type", "input", "output", "parameters", "edges", "in"]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("    "):
            break
        body = line[4:]
        cells = re.split(r"\s{2,}", body.strip())
        rows.append([" " * (len(body) - len(body.lstrip())) + cells[0], *cells[1:]])
    return rows


def parameter_count(node: nir.NIRNode) -> int:
    """Parameter values of a node as read by nir itself: its array fields, less shapes,
    hyperparameters and integer scalars (groups, start_dim, end_dim)."""
    if isinstance(node, nir.NIRGraph):
        return sum(parameter_count(n) for n in node.nodes.values())
    if isinstance(node, (nir.Input, nir.Output, nir.SumPool2d, nir.Flatten)):
        return 0
    return sum(
        int(np.size(v))
        for k, v in vars(node).items()
        if k not in HYPERPARAMETERS and isinstance(v, np.ndarray)
    )


def test_info_nodes_lists_the_braille_srnn_with_its_delayed_edge():
    plain, listed, as_json = many(
        [["info", BRAILLE], ["info", "--nodes", BRAILLE], ["info", "--json", "--nodes", BRAILLE]]
    )
    assert [r.returncode for r in (plain, listed, as_json)] == [0, 0, 0], listed.stderr
    assert listed.stdout.startswith(plain.stdout.rstrip("\n") + "\n  nodes ")  # the summary, then the table
    graph = nir.read(BRAILLE)
    params = {name: parameter_count(node) for name, node in graph.nodes.items()}
    assert params == {"input": 0, "fc1": 494, "lif1.lif": 266, "lif1.w_rec": 1482, "fc2": 273, "lif2": 49,
                      "output": 0}  # fmt: skip
    assert node_table(listed.stdout) == [
        ["input", "Input", "(12,)", "(12,)", "-"],
        ["fc1", "Affine", "(12,)", "(38,)", "494", "← input"],
        ["lif1.lif", "CubaLIF", "(38,)", "(38,)", "266", "← lif1.w_rec (delayed), fc1"],
        ["fc2", "Affine", "(38,)", "(7,)", "273", "← lif1.lif"],
        ["lif2", "CubaLIF", "(7,)", "(7,)", "49", "← fc2"],
        ["output", "Output", "(7,)", "(7,)", "-", "← lif2"],
        ["lif1.w_rec", "Affine", "(38,)", "(38,)", "1,482", "← lif1.lif"],
    ]
    assert listed.stdout.count("(delayed)") == 2  # the legend and the one recurrent edge
    summary = json.loads(as_json.stdout)
    assert summary["nodes"] == 7 and summary["parameters"] == sum(params.values())  # unchanged keys
    rows = {row["name"]: row for row in summary["node_list"]}
    assert list(rows) == ["input", "fc1", "lif1.lif", "fc2", "lif2", "output", "lif1.w_rec"]
    assert rows["lif1.lif"] == {
        "name": "lif1.lif",
        "graph": "",  # a dotted name at the top level, not a nested graph
        "type": "CubaLIF",
        "input_shape": [38],
        "output_shape": [38],
        "parameters": 266,
        "inputs": [{"source": "lif1.w_rec", "delayed": True}, {"source": "fc1", "delayed": False}],
    }
    assert {name: row["parameters"] for name, row in rows.items()} == params
    assert [(e["source"], name) for name, row in rows.items() for e in row["inputs"] if e["delayed"]] == [
        ("lif1.w_rec", "lif1.lif")
    ]
    assert sorted((e["source"], name) for name, row in rows.items() for e in row["inputs"]) == sorted(
        map(tuple, graph.edges)
    )


def test_info_nodes_indents_a_nested_graph_and_marks_its_recurrent_edge():
    listed, as_json = many([["info", "--nodes", SRNN_NESTED], ["info", "--nodes", "--json", SRNN_NESTED]])
    assert listed.returncode == 0 and as_json.returncode == 0, listed.stderr + as_json.stderr
    assert node_table(listed.stdout) == [
        ["input", "Input", "(12,)", "(12,)", "-"],
        ["fc1", "Affine", "(12,)", "(38,)", "494", "← input"],
        ["lif1", "NIRGraph", "(38,)", "(38,)", "1,748", "← fc1"],
        ["  lif1.input", "Input", "(38,)", "(38,)", "-"],
        ["  lif1.lif1", "CubaLIF", "(38,)", "(38,)", "266", "← lif1.input, lif1.lin (delayed)"],
        ["  lif1.output", "Output", "(38,)", "(38,)", "-", "← lif1.lif1"],
        ["  lif1.lin", "Affine", "(38,)", "(38,)", "1,482", "← lif1.lif1"],
        ["fc2", "Affine", "(38,)", "(7,)", "273", "← lif1"],
        ["lif2", "CubaLIF", "(7,)", "(7,)", "49", "← fc2"],
        ["output", "Output", "(7,)", "(7,)", "-", "← lif2"],
    ]
    summary = json.loads(as_json.stdout)
    graph = nir.read(SRNN_NESTED)
    inner = graph.nodes["lif1"]
    rows = {row["name"]: row for row in summary["node_list"]}
    assert len(rows) == summary["nodes"] == 10
    assert {n: r["graph"] for n, r in rows.items() if r["graph"]} == dict.fromkeys(
        ["lif1.input", "lif1.lif1", "lif1.output", "lif1.lin"], "lif1"
    )
    expected = {f"lif1.{n}": parameter_count(v) for n, v in inner.nodes.items()}
    expected |= {n: parameter_count(v) for n, v in graph.nodes.items()}
    assert {n: r["parameters"] for n, r in rows.items()} == expected
    assert sum(r["parameters"] for r in rows.values() if r["type"] != "NIRGraph") == summary["parameters"]
    assert rows["lif1.lif1"]["inputs"] == [
        {"source": "lif1.input", "delayed": False},
        {"source": "lif1.lin", "delayed": True},
    ]


def test_info_nodes_counts_the_cnn_parameters_as_nir_reads_them():
    listed, as_json = many([["info", "--nodes", CNN], ["info", "--json", "--nodes", CNN]])
    assert listed.returncode == 0 and as_json.returncode == 0, listed.stderr + as_json.stderr
    graph = nir.read(CNN)
    rows = {row["name"]: row for row in json.loads(as_json.stdout)["node_list"]}
    chain = ["input", *map(str, range(13)), "output"]  # evaluation order, not the file's "0, 1, 10, ..."
    assert list(rows) == chain
    assert {n: r["parameters"] for n, r in rows.items()} == {
        n: parameter_count(v) for n, v in graph.nodes.items()
    }
    assert rows["0"]["parameters"] == 16 * 2 * 5 * 5 + 16 and rows["1"]["parameters"] == 3 * 16 * 16 * 16
    assert rows["0"]["input_shape"] == [2, 34, 34] and rows["0"]["output_shape"] == [16, 16, 16]
    assert rows["8"]["type"] == "Flatten" and rows["8"]["output_shape"] == [128]
    assert all(
        r["inputs"] == [{"source": a, "delayed": False}] for a, r in zip(chain, list(rows.values())[1:])
    )
    table = {row[0]: row for row in node_table(listed.stdout)}
    assert table["0"] == ["0", "Conv2d", "(2, 34, 34)", "(16, 16, 16)", "816", "← input"]
    assert table["9"][4] == "33,024" and table["4"][4] == "-"
    assert "(delayed)" not in listed.stdout.split("\n  nodes ")[1].split("\n", 1)[1]


def test_info_nodes_of_a_single_node_an_unreached_node_and_unknown_shapes(tmp_path):
    nirbridge.write(tmp_path / "single.nir", nir.LIF(*(np.ones(4) for _ in range(5))))
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "loop": nir.Linear(np.eye(2)),  # a self-loop: delayed
            "stray": nir.Scale(np.ones(3)),  # no Input reaches it
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "loop"), ("loop", "loop"), ("loop", "output"), ("stray", "output")],
        type_check=False,
    )
    graph.nodes["input"] = nir.Input({"input": np.array(["a", "b"])})  # a shape that is not integers
    nirbridge.write(tmp_path / "odd.nir", graph)
    single = CliRunner().invoke(main, ["info", "--nodes", str(tmp_path / "single.nir")])
    assert single.exit_code == 0, single.output
    assert node_table(single.output) == [["node", "LIF", "(4,)", "(4,)", "20"]]
    odd = CliRunner().invoke(main, ["info", "--json", "--nodes", str(tmp_path / "odd.nir")])
    assert odd.exit_code == 0, odd.output
    rows = {row["name"]: row for row in json.loads(odd.output)["node_list"]}
    assert list(rows) == ["input", "loop", "output", "stray"]  # the unreached node last
    assert rows["loop"]["inputs"] == [
        {"source": "input", "delayed": False},
        {"source": "loop", "delayed": True},
    ]
    assert rows["stray"]["inputs"] == [] and rows["stray"]["parameters"] == 3
    text = CliRunner().invoke(
        main, ["info", "--nodes", str(tmp_path / "odd.nir"), str(tmp_path / "none.nir")]
    )
    assert text.exit_code == 1 and text.stderr.strip().endswith("none.nir: no such file")
    assert node_table(text.stdout)[:2] == [
        ["input", "Input", "?", "?", "-"],
        ["loop", "Linear", "(2,)", "(2,)", "4", "← input, loop (delayed)"],
    ]
    assert rows["input"]["input_shape"] is None


# ----------------------------------------------------------------------------- hostile input


def _one_line_failure(result, says: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert says in result.output, result.output


def test_info_and_run_refuse_fifos_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.nir"
    os.mkfifo(fifo)
    for command in (["info", str(fifo)], ["run", str(fifo)]):
        result = subprocess.run(
            [sys.executable, "-m", "nirbridge", *command], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 1 and "is a FIFO (named pipe)" in result.stderr, result.stderr


def test_convert_refuses_json_it_cannot_parse_in_one_line(tmp_path):
    huge = tmp_path / "huge.json"
    huge.write_text('{"ir": {"a": ' + "9" * 100_000 + "}}")
    deep = tmp_path / "deep.json"
    deep.write_text('{"ir": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _one_line_failure(
        CliRunner().invoke(main, ["convert", str(huge), str(tmp_path / "a.nir")]), "holds a value"
    )
    _one_line_failure(
        CliRunner().invoke(main, ["convert", str(deep), str(tmp_path / "b.nir")]), "nests too deep"
    )


def test_run_refuses_seeds_sizes_and_inputs_it_cannot_use(tmp_path, monkeypatch):
    path = tmp_path / "net.nir"
    nirbridge.write(path, network())
    runner = CliRunner()
    _one_line_failure(
        runner.invoke(main, ["run", str(path), "--seed", str(2**70)]), "--seed 1180591620717411303424"
    )
    _one_line_failure(
        runner.invoke(main, ["run", str(path), "--steps", str(10**12)]),
        "random input spikes of 1000000000000 steps",
    )
    _one_line_failure(runner.invoke(main, ["verify", str(path), "--batch", str(10**12)]), "needs")
    linked = tmp_path / "linked.h5"
    with h5py.File(linked, "w") as f:
        f["input"] = h5py.SoftLink("/input")  # a link to itself
    _one_line_failure(
        runner.invoke(main, ["run", str(path), "--input", str(linked)]), "is a soft or external link"
    )
    big = tmp_path / "big.h5"
    with h5py.File(big, "w") as f:  # declared, never written: HDF5 stores nothing until it is
        f.create_dataset("input", shape=(10**12, 1, 3), dtype="f4", chunks=(1000, 1, 3))
    _one_line_failure(
        runner.invoke(main, ["run", str(path), "--input", str(big)]),
        "dataset 'input' of shape (1000000000000, 1, 3) needs",
    )
    graph = network()
    graph.nodes["fc"].weight = np.full((5, 3), np.nan, np.float32)
    with pytest.warns(nirbridge.ParameterWarning, match="'fc' \\(Affine\\): weight is NaN"):
        nirbridge.write(tmp_path / "nan.nir", graph)
    for command in ("run", "verify"):
        _one_line_failure(
            runner.invoke(main, [command, str(tmp_path / "nan.nir")]), "'fc' (Affine): weight is NaN"
        )
    info = runner.invoke(main, ["info", str(tmp_path / "nan.nir")])  # lists it, as a warning
    assert info.exit_code == 0 and "warnings     1" in info.output, info.output
    assert "- node 'fc' (Affine): weight is NaN at indices (0, 0)" in info.output


def test_negative_time_constants_are_loaded_only_when_asked_for():
    path = str(EXAMPLES / "spyx_at_00e6ba49__research__paper__spyx_shd.nir")
    runner = CliRunner()
    for command in ("run", "verify"):
        _one_line_failure(runner.invoke(main, [command, path, "--steps", "5"]), "--allow-negative-tau")
    ran = runner.invoke(main, ["run", path, "--steps", "5", "--dt", "1e-4", "--allow-negative-tau"])
    assert ran.exit_code == 0, ran.output
    checked = runner.invoke(main, ["verify", path, "--steps", "5", "--dt", "1e-4", "--allow-negative-tau"])
    # spyx's time constants are thousands of seconds: nothing spikes, which proves nothing
    assert checked.exit_code == 1, checked.output
    assert "but 2 spiking one(s) never spike on either side (LIF, LIF_1): not verified" in checked.output
    accepted = runner.invoke(
        main, ["verify", path, "--steps", "5", "--dt", "1e-4", "--allow-negative-tau", "--allow-silent"]
    )
    assert accepted.exit_code == 0 and "agree" in accepted.output.lower(), accepted.output


def test_version_lists_the_packages_nirbridge_runs_with():
    import importlib.metadata as metadata

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"nirbridge {nirbridge.__version__}"
    for package in ("torch", "nir", "norse", "snntorch"):
        assert f"{package} {metadata.version(package)}" in lines
    assert lines[-1] == ("torch build: CPU" if torch.version.cuda is None else lines[-1])
    assert lines[-1].startswith("torch build: ")


def test_a_silent_run_warns_in_the_command_lines_terms():
    result = nirbridge_cli("run", CNN, "--steps", "10", "--record", "12")
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert warned[0] == (
        "nirbridge run: warning: the graph records no time step (metadata['dt']), so it runs at "
        "dt = 0.0001 s, the NIR paper's and snntorch's; pass --dt to choose"
    )
    assert warned[1].startswith("nirbridge run: warning: nirbridge.run: no spike in '12' over 10 steps.")
    assert "build it with --dt. Otherwise" in warned[1] and "--record <node>.v" in warned[1]
    assert "nir_to_torch" not in result.stderr and "record=" not in result.stderr
    assert (
        "12      spikes  10 neurons  0 spikes, 0.0000 per neuron per step (0 Hz); 10 of 10 neurons silent"
        in (result.stdout)
    )


def test_an_output_that_is_an_input_of_the_same_command_is_refused(tmp_path):
    """`run m.nir --out m.nir` replaced the model with the recording and exited 0."""
    model = tmp_path / "m.nir"
    model.write_bytes(BRAILLE.read_bytes())
    before = model.read_bytes()
    link = tmp_path / "link.h5"
    link.symlink_to(model)
    hard = tmp_path / "hard.png"
    os.link(model, hard)
    spikes = tmp_path / "spikes.h5"
    with h5py.File(spikes, "w") as f:
        f["input"] = np.zeros((4, 1, 12), bool)
    runner = CliRunner()
    cases = [
        (["run", str(model), "--dt", "1e-4", "--steps", "3", "--out", str(model)], "--out"),
        (["run", str(model), "--dt", "1e-4", "--steps", "3", "--out", str(link)], "--out"),
        (["run", str(model), "--dt", "1e-4", "--steps", "3", "--plot", str(hard)], "--plot"),
        (["run", str(model), "--dt", "1e-4", "--input", str(spikes), "--out", str(spikes)], "--out"),
        (["convert", str(model), str(model)], "TARGET"),
        (["convert", str(model), str(link.with_name("link2.nir"))], None),
        (["draw", str(model), "-o", str(model)], "-o"),
    ]
    (tmp_path / "link2.nir").symlink_to(model)
    for arguments, option in cases:
        result = runner.invoke(main, arguments)
        assert result.exit_code == 1, (arguments, result.output)
        assert "which this command reads" in result.output, result.output
        if option is not None:
            assert f"{option} " in result.output
        assert model.read_bytes() == before
    result = runner.invoke(
        main,
        [
            "run",
            str(model),
            "--dt",
            "1e-4",
            "--steps",
            "3",
            "--out",
            str(tmp_path / "r.h5"),
            "--plot",
            str(tmp_path / "r.h5"),
        ],
    )
    assert result.exit_code == 1 and "give each output its own path" in result.output
    result = runner.invoke(main, ["draw", str(model), "-o", str(tmp_path / "g.dot")])
    assert result.exit_code == 0 and result.output.strip().endswith("g.dot (dot text)"), result.output


def test_input_spikes_are_cast_by_the_same_rule_as_everywhere(tmp_path):
    """The CLI rounded a float64 --input silently; integers and bools pass exactly."""
    runner = CliRunner()
    for name, data, ok in [
        ("double.h5", np.full((4, 1, 12), 0.1), False),
        ("ints.h5", np.ones((4, 1, 12), np.int64), True),
        ("big.h5", np.full((4, 1, 12), 2**24 + 1, np.int64), False),
        ("bools.h5", np.ones((4, 1, 12), bool), True),
    ]:
        with h5py.File(tmp_path / name, "w") as f:
            f["input"] = data
        result = runner.invoke(main, ["run", str(BRAILLE), "--dt", "1e-4", "--input", str(tmp_path / name)])
        assert (result.exit_code == 0) == ok, (name, result.output)
        if name == "double.h5":
            assert "holds float64, but the network computes in float32" in result.output
        if name == "big.h5":
            assert "holds integers exactly only up to 16777216" in result.output


def test_big_endian_input_spikes_run(tmp_path):
    with h5py.File(tmp_path / "be.h5", "w") as f:
        f["input"] = np.ones((3, 1, 12), ">f4")
    result = CliRunner().invoke(
        main, ["run", str(BRAILLE), "--dt", "1e-4", "--input", str(tmp_path / "be.h5")]
    )
    assert result.exit_code == 0, result.output


def test_run_takes_a_device_and_says_the_first_call_apart(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(main, ["run", str(BRAILLE), "--dt", "1e-4", "--steps", "20", "--device", "cpu"])
    assert ok.exit_code == 0, ok.output
    assert "ms per step); the first call took" in ok.stdout  # the steady time, then the first call's
    for device, says in [
        ("tpu", "--device tpu: not a torch device"),
        ("meta", "--device meta: nirbridge runs on cpu or cuda"),
        *([] if torch.cuda.is_available() else [("cuda", "--device cuda: torch sees no CUDA device here")]),
    ]:
        bad = runner.invoke(main, ["run", str(BRAILLE), "--dt", "1e-4", "--device", device])
        assert bad.exit_code == 1 and says in bad.output, bad.output


def test_a_default_verify_leaves_out_a_simulator_that_cannot_be_imported():
    """norse blocked from import (as where it is not installed, or installed without
    nirtorch): the default verify runs snntorch and says in one line what it left out."""
    code = (
        "import sys; sys.modules['norse'] = None\n"
        "from nirbridge.cli import main\n"
        f"main(['verify', {str(BRAILLE)!r}, '--dt', '1e-4', '--steps', '20'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "vs snntorch: agree" in done.stdout and "vs norse" not in done.stdout
    (said,) = [line for line in done.stderr.splitlines() if "left out" in line]
    assert said.startswith("nirbridge verify: norse left out:") and "pip install nirtorch" in said


def test_verify_takes_an_input_file_and_writes_json(tmp_path):
    """``--input`` as run takes it (the steps are the file's), ``--json PATH`` beside the
    table, ``--json -`` alone on stdout, and the JSON never over FILE."""
    with h5py.File(tmp_path / "spikes.h5", "w") as file:
        file["input"] = (np.random.default_rng(0).random((30, 2, 12)) < 0.3).astype(np.float32)
    runner = CliRunner()
    base = [
        "verify",
        str(BRAILLE),
        "--dt",
        "1e-4",
        "--against",
        "snntorch",
        "--input",
        str(tmp_path / "spikes.h5"),
    ]
    written = runner.invoke(main, [*base, "--json", str(tmp_path / "v.json")])
    assert written.exit_code == 0, written.output
    assert "over 30 steps" in written.stdout and f"wrote {tmp_path / 'v.json'}" in written.stdout
    (document,) = json.loads((tmp_path / "v.json").read_text())
    assert document["verified"] and document["steps"] == 30 and document["against"] == "snntorch"
    assert {c["key"] for c in document["comparisons"]} >= {"fc1", "lif1.lif", "output"}
    alone = runner.invoke(main, [*base, "--json", "-"])
    assert alone.exit_code == 0 and json.loads(alone.stdout)[0]["verified"] is True
    over = runner.invoke(main, [*base, "--json", str(BRAILLE)])
    assert over.exit_code == 1 and "which this command reads" in over.output


def test_help_lists_every_command_without_importing_torch():
    """``nirbridge --help`` imports click and the command list only: each listed line is
    the command's own first line, and torch, nir and numpy stay unimported."""
    from nirbridge.cli import COMMANDS

    code = (
        "import sys\n"
        "from nirbridge.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'nir', 'numpy', 'h5py') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout
    context = click.Context(main)
    for name, (_, _, short) in COMMANDS.items():
        command = main.get_command(context, name)
        assert command is not None and command.name == name
        assert short == command.get_short_help_str(limit=1000), name
        assert re.search(rf"^  {name} +\S", done.stdout, re.M), name
    assert sorted(COMMANDS) == sorted(main.list_commands(context))


def test_export_traces_a_model_file_through_its_simulator_s_adapter(tmp_path, monkeypatch):
    (tmp_path / "models.py").write_text(
        "import torch.nn as nn\n"
        "import snntorch as snn\n"
        "def leaky():\n"
        "    return nn.Sequential(nn.Linear(4, 3), snn.Leaky(beta=0.9, init_hidden=True, reset_mechanism='zero'))\n"
        "class Conv(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(2, 3, 3)\n"
        "        self.flat = nn.Flatten()\n"
        "    def forward(self, x):\n"
        "        return self.flat(self.conv(x))\n"
    )
    out = tmp_path / "leaky.nir"
    done = nirbridge_cli("export", "models.py:leaky", "-o", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "nirbridge.adapters.snntorch.to_nir" in done.stdout and "dt 0.0001 s" in done.stdout
    graph = nirbridge.read(out)
    lif = next(node for node in graph.nodes.values() if isinstance(node, nir.LIF))
    # snntorch's beta = 1 - dt / tau: tau = dt / (1 - beta) = 1e-3
    np.testing.assert_allclose(lif.tau, np.full(3, 1e-4 / (1 - 0.9)), rtol=1e-6)
    no_shape = nirbridge_cli("export", "models.py:Conv", "-o", tmp_path / "conv.nir", cwd=tmp_path)
    assert no_shape.returncode == 1 and "give --input-shape" in no_shape.stderr, no_shape.stderr
    shaped = nirbridge_cli(
        "export", "models.py:Conv", "-o", tmp_path / "conv.nir", "--input-shape", "2,8,8", cwd=tmp_path
    )
    assert shaped.returncode == 0 and "nirbridge.torch_to_nir" in shaped.stdout, shaped.stderr
    conv = nirbridge.read(tmp_path / "conv.nir")
    assert list(conv.nodes["flat"].output_type["output"]) == [3 * 6 * 6]
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    for args, says in [
        (["models.py", "-o", "x.nir"], "give the model as FILE.py:NAME"),
        (["models.py:Nope", "-o", "x.nir"], "models.py has no 'Nope'; its modules: Conv"),
        (["models.py:leaky", "-o", "models.py"], "which this command reads"),
        (["models.py:leaky", "-o", "x.nir", "--input-shape", "2,x"], "--input-shape '2,x'"),
    ]:
        bad = runner.invoke(main, ["export", *args])
        assert bad.exit_code == 1 and says in bad.output, (args, bad.output)
        assert not (tmp_path / "x.nir").exists()
    assert "def leaky" in (tmp_path / "models.py").read_text()  # not written over


def test_batch_first_input_files_run_as_their_time_first_transpose(tmp_path):
    spikes = (np.random.default_rng(1).random((25, 3, 12)) < 0.3).astype(np.float32)  # [T, B, N]
    with h5py.File(tmp_path / "time_first.h5", "w") as file:
        file["input"] = spikes
    with h5py.File(tmp_path / "batch_first.h5", "w") as file:
        file["input"] = spikes.transpose(1, 0, 2)
    runner = CliRunner()
    base = ["run", str(BRAILLE), "--dt", "1e-4", "--record", "lif1.lif"]
    time_first = runner.invoke(main, [*base, "--input", str(tmp_path / "time_first.h5")])
    batch_first = runner.invoke(main, [*base, "--input", str(tmp_path / "batch_first.h5"), "--batch-first"])
    assert time_first.exit_code == 0 and batch_first.exit_code == 0, batch_first.output
    table = [line for line in time_first.stdout.splitlines() if "lif1.lif" in line]
    assert table and table == [line for line in batch_first.stdout.splitlines() if "lif1.lif" in line]
    assert "25 steps" in batch_first.stdout and "batch 3" in batch_first.stdout
    cut = runner.invoke(
        main, [*base, "--input", str(tmp_path / "batch_first.h5"), "--batch-first", "--steps", "10"]
    )
    assert cut.exit_code == 0 and "10 steps" in cut.stdout and "batch 3" in cut.stdout, cut.output
    unmarked = runner.invoke(main, [*base, "--input", str(tmp_path / "batch_first.h5")])
    assert unmarked.exit_code == 0 and "3 steps" in unmarked.stdout  # [3, 25, 12] read as 3 steps of 25
    alone = runner.invoke(main, [*base, "--batch-first"])
    assert alone.exit_code == 1 and "--batch-first says how --input's datasets are laid out" in alone.output
    given = ["--input", str(tmp_path / "batch_first.h5"), "--batch-first", "--backend", "eager"]
    verified = runner.invoke(main, ["verify", str(BRAILLE), "--dt", "1e-4", "--against", "snntorch", *given])
    assert verified.exit_code == 0 and "over 25 steps" in verified.stdout, verified.output


def test_verify_runs_the_file_on_the_back_end_it_is_given(tmp_path):
    runner = CliRunner()
    base = ["verify", str(BRAILLE), "--dt", "1e-4", "--steps", "20", "--against", str(BRAILLE)]
    for backend in ("eager", "cpu"):
        done = runner.invoke(main, [*base, "--backend", backend])
        assert done.exit_code == 0 and "agree" in done.stdout, (backend, done.output)
    bad = runner.invoke(main, [*base, "--backend", "fast"])
    assert bad.exit_code == 2 and "'fast' is not one of" in bad.output


def test_export_takes_spikingjelly_s_multi_step_models_and_counts_the_inputs(tmp_path, monkeypatch):
    (tmp_path / "nets.py").write_text(
        "import torch.nn as nn\n"
        "from spikingjelly.activation_based import functional, layer, neuron\n"
        "def multi():\n"
        "    net = nn.Sequential(layer.Conv2d(2, 4, 3), neuron.LIFNode(), layer.Flatten(),\n"
        "                        layer.Linear(4 * 6 * 6, 5), neuron.LIFNode())\n"
        "    functional.set_step_mode(net, 'm')\n"
        "    return net\n"
        "class Two(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a, self.b = nn.Linear(3, 2), nn.Linear(4, 2)\n"
        "    def forward(self, x, y):\n"
        "        return self.a(x) + self.b(y)\n"
    )
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    multi = runner.invoke(main, ["export", "nets.py:multi", "--input-shape", "2,8,8", "-o", "multi.nir"])
    assert multi.exit_code == 0 and "spikingjelly.to_nir" in multi.output, multi.output
    assert list(nirbridge.read(tmp_path / "multi.nir").nodes["3"].input_type["input"]) == [4 * 6 * 6]
    for args, says in [
        (
            ["--input-shape", "3"],
            "its forward takes 2 input(s) (x, y), and --input-shape was given 1 time(s)",
        ),
        (["--input-shape", "100000,100000,100", "--input-shape", "4"], "needs 3.6 TiB"),
        (["--input-shape", "3x", "--input-shape", "4"], "--input-shape '3x': give sizes"),
    ]:
        bad = runner.invoke(main, ["export", "nets.py:Two", *args, "-o", "two.nir"])
        assert bad.exit_code == 1 and says in bad.output, (args, bad.output)
    both = runner.invoke(
        main, ["export", "nets.py:Two", "--input-shape", "3", "--input-shape", "4", "-o", "two.nir"]
    )
    assert both.exit_code == 0, both.output

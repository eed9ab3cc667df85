"""nirbridge.conformance: simulators' own NIR imports against NIR's equations, with the
real norse, snntorch and spikingjelly, and conventions checked against an independent
numpy run of the equations each one changes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import nir
import numpy as np
import pytest
from click.testing import CliRunner

import nirbridge
from nirbridge.cli import main
from nirbridge.conformance import _REGISTRY as REGISTRY
from nirbridge.conformance import (
    SILENT,
    ConformanceError,
    LoadFailure,
    Simulator,
    available,
    conformance,
    pack,
    peer,
)
from nirbridge.conformance.conventions import SINABS_IF
from nirbridge.data import write_data
from tests.conftest import EXAMPLES

DT = 1e-3


def sixty_fourths(weights: np.ndarray) -> np.ndarray:
    """Weights in steps of 1/64: their sums are exact in float32 in any order, so that a
    numpy run in float32 and torch's agree to the bit."""
    return np.round(weights * 64) / 64


def separating_graph(path, r: float, v_reset: float = 0.0, on_threshold: bool = False) -> str:
    """Affine 3 -> 4 -> LIF with r != 1 and dt = 1e-3 (not 1e-4): ignoring r and assuming
    dt = 1e-4 give different spikes, and both differ from the equations. With
    ``on_threshold``, tau = dt and weights of 1/4 and 1/2: the membrane is r W x each
    step, and often exactly the threshold."""
    rng = np.random.default_rng(0)
    if on_threshold:
        weight, tau = rng.choice([0.25, 0.5], (4, 3)), DT
    else:
        weight, tau = sixty_fourths(rng.normal(1.0, 0.5, (4, 3))), 5e-3
    graph = nir.NIRGraph.from_list(
        nir.Affine(weight, np.zeros(4)),
        nir.LIF(
            tau=np.full(4, tau),
            r=np.full(4, r),
            v_leak=np.zeros(4),
            v_threshold=np.ones(4),
            v_reset=np.full(4, v_reset),
        ),
    )
    graph.metadata = {"dt": DT}
    nirbridge.write(path, graph)
    return str(path)


def rows(report) -> dict[tuple[str, str], object]:
    return {(r.file.rsplit("/", 1)[-1], r.simulator): r for r in report.results}


def test_a_graph_with_r_not_1_and_dt_not_1e_4_tells_each_peer_s_convention(tmp_path):
    """norse's import ignores r; snntorch's assumes dt = 1e-4; spikingjelly's refuses r
    other than 1 and tau/dt and is exact with r = tau/dt; nirbridge's adapters are exact."""
    files = [separating_graph(tmp_path / "r2.nir", 2.0), separating_graph(tmp_path / "r5.nir", 5.0)]
    report = conformance(files, steps=60, rate=0.4)
    got = rows(report)
    for name in ("r2.nir", "r5.nir"):
        assert got[name, "norse"].diagnosis == "r ignored"
        assert got[name, "snntorch"].diagnosis == "dt=1e-4"
        assert got[name, "norse"].agreement < 0.9 and got[name, "snntorch"].agreement < 0.9
        assert got[name, "norse"].first_divergence["node"] == "output"
        for adapter in ("nirbridge+norse", "nirbridge+snntorch", "nirbridge+spikingjelly"):
            assert got[name, adapter].agreement == 1.0 and got[name, adapter].diagnosis is None
        assert got[name, "nirbridge"].reference_spikes > 0
    assert not got["r2.nir", "spikingjelly"].loads
    assert "r must equal 1 or tau / dt" in got["r2.nir", "spikingjelly"].error
    assert got["r5.nir", "spikingjelly"].agreement == 1.0


def lif_numpy(
    graph: nir.NIRGraph,
    x: np.ndarray,
    dt: float,
    *,
    ignore_r=False,
    subtract=False,
    lag=0,
    several=False,
    clamp=False,
    ignore_v_reset=False,
    at_threshold=False,
):
    """The separating graph's equations in numpy, written out again (DESIGN.md's LIF):
    v += dt/tau (v_leak - v + r W x); spike where v > v_th; then reset."""
    affine = next(n for n in graph.nodes.values() if isinstance(n, nir.Affine))
    lif = next(n for n in graph.nodes.values() if isinstance(n, nir.LIF))
    r = np.ones_like(lif.r) if ignore_r else lif.r
    v = np.broadcast_to(lif.v_leak, (x.shape[1], lif.tau.size)).astype(np.float64).copy()
    out = np.zeros((x.shape[0], x.shape[1], lif.tau.size))
    for t in range(x.shape[0]):
        v = v + dt / lif.tau * (lif.v_leak - v + r * (x[t] @ affine.weight.T + affine.bias))
        if several:  # as many spikes as thresholds the membrane holds (where it is above 0)
            z = (v > 0) * np.trunc(v / lif.v_threshold)
        elif at_threshold:
            z = (v >= lif.v_threshold).astype(np.float64)
        else:
            z = (v > lif.v_threshold).astype(np.float64)
        v_reset = 0.0 if ignore_v_reset else lif.v_reset
        v = v - z * lif.v_threshold if subtract else np.where(z > 0, v_reset, v)
        if clamp:
            v = np.maximum(v, -lif.v_threshold)
        out[t] = z
    if lag:
        out = np.concatenate([np.zeros_like(out[:lag]), out[:-lag]])
    return out


def spyx_numpy(graph: nir.NIRGraph, x: np.ndarray, dt: float) -> np.ndarray:
    """spyx 1.0's LIF (spyx/nn.py) after an Affine, in numpy, float32: the spike is
    that of the state the step starts with, s = V > v_th; V = beta V + W x + b - s v_th
    with beta = clip(1 - dt/tau, 0, 1); V starts at 0 (r and v_leak are not read)."""
    affine = next(n for n in graph.nodes.values() if isinstance(n, nir.Affine))
    lif = next(n for n in graph.nodes.values() if isinstance(n, nir.LIF))
    f32 = np.float32
    beta = np.clip((1 - dt / lif.tau).astype(f32), 0, 1)
    threshold = lif.v_threshold.astype(f32)
    v = np.zeros((x.shape[1], lif.tau.size), f32)
    out = np.zeros((x.shape[0], x.shape[1], lif.tau.size))
    for t in range(x.shape[0]):
        s = (v > threshold).astype(f32)
        v = (
            beta * v
            + (x[t].astype(f32) @ affine.weight.T.astype(f32) + affine.bias.astype(f32))
            - s * threshold
        )
        out[t] = s
    return out


def rockpool_numpy(graph: nir.NIRGraph, x: np.ndarray) -> np.ndarray:
    """rockpool 3.1's LIFTorch (lif_torch.py) for a CubaLIF after an Affine, in numpy,
    float32, at its own dt = min(tau_mem / (1 + r)): i = beta (i + W x + b);
    v = alpha v + i + v_leak; n = floor(v / v_th) where v >= v_th; v -= n v_th."""
    affine = next(n for n in graph.nodes.values() if isinstance(n, nir.Affine))
    cuba = next(n for n in graph.nodes.values() if isinstance(n, nir.CubaLIF))
    f32 = np.float32
    own = float(np.min(cuba.tau_mem / (1 + cuba.r)))
    alpha, beta = np.exp(-own / cuba.tau_mem).astype(f32), np.exp(-own / cuba.tau_syn).astype(f32)
    threshold, bias = cuba.v_threshold.astype(f32), cuba.v_leak.astype(f32)
    i = np.zeros((x.shape[1], cuba.tau_mem.size), f32)
    v = np.zeros_like(i)
    out = np.zeros((x.shape[0], x.shape[1], cuba.tau_mem.size))
    for t in range(x.shape[0]):
        i = (i + (x[t].astype(f32) @ affine.weight.T.astype(f32) + affine.bias.astype(f32))) * beta
        v = v * alpha + i + bias
        n = (v >= threshold) * np.floor(v / threshold)
        v = v - n * threshold
        out[t] = n
    return out


def norse_cuba_numpy(graph: nir.NIRGraph, x: np.ndarray, dt: float) -> np.ndarray:
    """norse 1.1's own import of a CubaLIF (norse/torch/utils/import_nir.py) after an
    Affine, in numpy: a LIBoxCell synapse given v_leak, i += dt/tau_syn (v_leak - i + w_in x)
    from i = v_leak, then a LIFBoxCell v += dt/tau_mem (v_leak - v + r i) from v = v_leak,
    reset to 0 (its default v_reset)."""
    affine = next(n for n in graph.nodes.values() if isinstance(n, nir.Affine))
    cuba = next(n for n in graph.nodes.values() if isinstance(n, nir.CubaLIF))
    i = np.broadcast_to(cuba.v_leak, (x.shape[1], cuba.tau_mem.size)).astype(np.float64).copy()
    v = i.copy()
    out = np.zeros((x.shape[0], x.shape[1], cuba.tau_mem.size))
    for t in range(x.shape[0]):
        i = i + dt / cuba.tau_syn * (cuba.v_leak - i + cuba.w_in * (x[t] @ affine.weight.T + affine.bias))
        v = v + dt / cuba.tau_mem * (cuba.v_leak - v + cuba.r * i)
        z = (v > cuba.v_threshold).astype(np.float64)
        v = np.where(z > 0, 0.0, v)
        out[t] = z
    return out


def cuba_separating_graph(path) -> str:
    """Affine 3 -> 4 -> CubaLIF with r = 2, w_in = 3, v_leak != 0 and v_reset != 0 at
    dt = 1e-3."""
    rng = np.random.default_rng(1)
    n = 4
    graph = nir.NIRGraph.from_list(
        nir.Affine(sixty_fourths(rng.normal(1.0, 0.5, (n, 3))), np.full(n, 1 / 16)),
        nir.CubaLIF(
            tau_syn=np.full(n, 4e-3),
            tau_mem=np.full(n, 1e-2),
            r=np.full(n, 2.0),
            v_leak=np.full(n, 0.125),
            v_threshold=np.ones(n),
            v_reset=np.full(n, -0.25),
            w_in=np.full(n, 3.0),
        ),
    )
    graph.metadata = {"dt": DT}
    nirbridge.write(path, graph)
    return str(path)


@pytest.mark.parametrize(
    ("make", "run", "diagnosis"),
    [
        (lambda p: separating_graph(p, 2.0), lambda g, x, dt: spyx_numpy(g, x, dt), "SPYX"),
        (cuba_separating_graph, lambda g, x, dt: rockpool_numpy(g, x), "ROCKPOOL"),
        (cuba_separating_graph, norse_cuba_numpy, "NORSE_CUBA"),
    ],
    ids=["spyx", "rockpool", "norse CubaLIF"],
)
def test_a_simulator_s_own_neurons_explain_it_when_it_follows_them(
    make, run, diagnosis, tmp_path, monkeypatch
):
    """spyx's and rockpool's neurons and norse's CubaLIF, written again in numpy from
    their source, are diagnosed as the composite convention named for them, and as
    nothing simpler."""
    from nirbridge.conformance import conventions

    path = make(tmp_path / "g.nir")

    def simulate(file, inputs, dt):
        return {"output": run(nir.read(file), inputs["input"], dt)}

    monkeypatch.setitem(REGISTRY, "numpy", Simulator("numpy", "numpy", simulate))
    result = rows(conformance([path], ["numpy"], steps=80, rate=0.5))["g.nir", "numpy"]
    assert result.loads and result.agreement < 0.95 and result.reference_spikes > 0
    assert result.diagnosis == getattr(conventions, diagnosis).name


@pytest.mark.parametrize(
    ("options", "diagnosis"),
    [
        ({"ignore_r": True}, "r ignored"),
        ({"subtract": True}, "subtractive reset"),
        ({"lag": 1}, "one-step lag"),
        ({"dt": 1.0}, "dt=1"),
        ({"ignore_r": True, "lag": 1}, "r ignored + one-step lag"),
        (
            {"several": True, "subtract": True, "clamp": True, "dt": 1.0},
            SINABS_IF.name,
        ),
        ({"ignore_v_reset": True, "v_reset": 0.25}, "v_reset ignored"),
        ({"at_threshold": True, "on_threshold": True}, "spikes at v = v_th"),
        ({}, None),
    ],
)
def test_each_convention_explains_a_simulator_that_follows_it(options, diagnosis, tmp_path, monkeypatch):
    options = dict(options)
    step = options.pop("dt", None)
    graph = {k: options.pop(k) for k in ("v_reset", "on_threshold") if k in options}
    path = separating_graph(tmp_path / "g.nir", 2.0, **graph)

    def run(file, inputs, dt):
        graph = nir.read(file)
        return {"output": lif_numpy(graph, inputs["input"], step or dt, **options)}

    monkeypatch.setitem(REGISTRY, "numpy", Simulator("numpy", "numpy", run))
    result = rows(conformance([path], ["numpy"], steps=80, rate=0.5))["g.nir", "numpy"]
    assert result.loads and result.diagnosis == diagnosis
    assert (result.agreement == 1.0) == (diagnosis is None)


def test_an_unexplained_difference_is_said_to_be(tmp_path, monkeypatch):
    path = separating_graph(tmp_path / "g.nir", 2.0)

    def run(file, inputs, dt):
        out = lif_numpy(nir.read(file), inputs["input"], dt)
        out[::7] = 1 - out[::7]  # no convention does this
        return {"output": out}

    monkeypatch.setitem(REGISTRY, "numpy", Simulator("numpy", "numpy", run))
    result = rows(conformance([path], ["numpy"], steps=40))["g.nir", "numpy"]
    assert result.diagnosis == "unexplained" and result.first_divergence == {"step": 0, "node": "output"}


def test_the_example_files_load_run_or_fail_each_in_its_row():
    """What the simulators' own imports do with the example files (measured here on
    2026-11-26: norse ignores r in rockpool's LIF, runs spyx's old CNN as if dt were 1
    and fails inside its Flatten on sinabs' CNN; snntorch's import of a recurrent graph
    fails in nirtorch 2.6; the malformed files fail in nirbridge's reader too)."""
    names = [
        "NIR__paper__01_lif__lif_rockpool.nir",
        "NIR__paper__02_cnn__cnn_sinabs.nir",
        "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir",
        "spyx_at_00e6ba49__research__paper__scnn_mnist.nir",
        "NIR__paper__03_rnn__extras__braille_noDelay_bias_zero_subgraph.nir",
    ]
    report = conformance([EXAMPLES / n for n in names], ["norse", "snntorch", "nirbridge+norse"], steps=40)
    got = rows(report)
    # norse gives no spike here; "r ignored" matched only because its reference is silent too
    assert got[names[0], "norse"].diagnosis == SILENT
    assert got[names[0], "snntorch"].agreement == 1.0
    assert got[names[1], "norse"].loads and got[names[1], "norse"].error.startswith("fails while running")
    assert (
        not got[names[2], "snntorch"].loads
        and "'GraphModule' object has no attribute 'items'" in got[names[2], "snntorch"].error
    )
    assert got[names[2], "norse"].agreement == 1.0 and got[names[2], "nirbridge+norse"].agreement == 1.0
    assert got[names[3], "norse"].diagnosis == "dt=1"
    assert not got[names[4], "nirbridge"].loads and (names[4], "norse") not in got  # no reference, no rows
    document = report.to_json()
    assert set(document) >= {"files", "simulators", "results"}
    assert set(document["simulators"]) == {"nirbridge", "norse", "snntorch", "nirbridge+norse"}
    assert set(document["results"][0]) >= {
        "file",
        "simulator",
        "loads",
        "error",
        "agreement",
        "first_divergence",
        "diagnosis",
    }
    assert "diagnosis: dt=1" in str(report)


def test_unknown_simulators_are_named_with_those_available(tmp_path):
    with pytest.raises(
        nirbridge.NirBridgeError, match=r"\['brian2'\] are not available here \(available: \["
    ):
        conformance([separating_graph(tmp_path / "g.nir", 2.0)], ["brian2"])


def test_the_command_line_prints_the_table_and_writes_the_json(tmp_path):
    path = separating_graph(tmp_path / "g.nir", 2.0)
    command = [
        sys.executable,
        "-m",
        "nirbridge",
        "conformance",
        path,
        "--simulators",
        "norse,nirbridge+norse",
    ]
    done = subprocess.run(
        [*command, "--steps", "50", "--json", str(tmp_path / "r.json")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "diagnosis: r ignored" in done.stdout and f"wrote {tmp_path / 'r.json'}" in done.stdout
    document = json.loads((tmp_path / "r.json").read_text())
    assert [r["simulator"] for r in document["results"]] == ["nirbridge", "norse", "nirbridge+norse"]
    second = separating_graph(tmp_path / "h.nir", 2.0)
    two = subprocess.run([*command, second, "--steps", "5"], capture_output=True, text=True)
    assert two.returncode == 0, two.stderr
    said = two.stderr.splitlines()  # a line per file as it goes (not a terminal: no bar), flushed
    assert (
        said[0].startswith("conformance: 1 of 2 files in ")
        and "s left; now h.nir on 2 simulator(s)" in said[0]
    )
    assert said[1].startswith("conformance: 2 files measured in ")
    missing = subprocess.run([*command[:4], str(tmp_path / "none.nir")], capture_output=True, text=True)
    assert missing.returncode == 1 and "none.nir" in missing.stderr and len(missing.stderr.splitlines()) == 1


# ----------------------------------------------------------------------------- the pack


def test_the_shipped_pack_is_what_its_builders_write(tmp_path):
    """The graphs, inputs and reference traces in nirbridge/conformance/pack are what
    `nirbridge.conformance.pack.write()` writes today (seeded, byte for byte)."""
    from nirbridge.conformance import pack

    written = pack.write(str(tmp_path))
    assert [p.rsplit("/", 1)[-1] for p in written] == [p.rsplit("/", 1)[-1] for p in pack.files()]
    for path in written:
        shipped = path.replace(str(tmp_path), pack.PACK_DIR)
        for suffix in ("", ".inputs.h5", ".reference.h5"):
            a = path if not suffix else path.removesuffix(".nir") + suffix
            b = shipped if not suffix else shipped.removesuffix(".nir") + suffix
            with open(a, "rb") as fresh, open(b, "rb") as kept:
                assert fresh.read() == kept.read(), f"{b} differs from what the pack's builders write"


@pytest.mark.parametrize("name", list(__import__("nirbridge.conformance.pack", fromlist=["GRAPHS"]).GRAPHS))
def test_each_pack_reference_is_the_equations_in_an_independent_numpy_run(name):
    """The pack's reference traces against tests/reference.py (numpy, written apart from
    nirbridge): spikes equal, values to 1e-12; every spiking output spikes, and not always."""
    from nirbridge.conformance import pack
    from nirbridge.data import read_data
    from tests.reference import Reference

    path = f"{pack.PACK_DIR}/{name}.nir"
    graph = nirbridge.read(path)
    inputs = pack.inputs_of(path, graph)
    dt = float(graph.metadata["dt"])
    ref = Reference(graph, dt)
    steps = [ref.step({k: v[t] for k, v in inputs.items()}) for t in range(pack.STEPS)]
    shipped = read_data(path.removesuffix(".nir") + ".reference.h5")
    assert list(shipped.nodes) == [n for n, node in graph.nodes.items() if isinstance(node, nir.Output)]
    for output, node in shipped.nodes.items():
        got = node.observables["output"].data.transpose(1, 0, 2)  # (T, B, n)
        expected = np.stack([s[output] for s in steps]).reshape(got.shape)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12, err_msg=f"{name}: {output}")
        if np.all((expected == 0) | (expected == 1)):
            assert 0 < expected.sum() < expected.size, f"{name}: {output} should spike, and not always"


def test_the_pack_tells_each_peer_s_conventions_apart():
    """On the pack's fixed inputs: norse's import ignores r, and v_reset, and lets a
    CubaLIF's synaptic current relax to v_leak; it builds nothing for an I, LI, CubaLI
    or Delay. snntorch's assumes dt = 1e-4 on the r/dt graph; spikingjelly's spikes on
    the threshold. Every divergence is explained; nirbridge's adapters agree on every
    graph."""
    from nirbridge.conformance.conventions import NORSE_CUBA

    report = conformance(
        [],
        ["norse", "snntorch", "spikingjelly", "nirbridge+norse", "nirbridge+spikingjelly"],
        with_pack=True,
    )
    got = rows(report)
    assert got["lif_r_and_dt.nir", "norse"].diagnosis == "r ignored"
    assert got["lif_r_and_dt.nir", "snntorch"].diagnosis == "dt=1e-4"
    for file in ("lif_per_neuron.nir", "recurrent.nir", "nested.nir"):
        assert got[file, "norse"].diagnosis == "r ignored + v_reset ignored", file
    assert got["cuba_lif.nir", "norse"].diagnosis == NORSE_CUBA.name
    assert got["cuba_lif_r_and_dt.nir", "norse"].agreement == 1.0
    assert got["if_on_threshold.nir", "spikingjelly"].diagnosis == "spikes at v = v_th"
    for file, node in (("integrator.nir", "I 'i2'"), ("delay.nir", "Delay 'delay2'")):
        assert f"its import builds nothing for {node}" in got[file, "norse"].error
    assert all(r.diagnosis != "unexplained" for r in got.values())
    for (file, simulator), result in got.items():
        if simulator.startswith("nirbridge"):
            assert result.loads and result.agreement == 1.0, (file, simulator, result.error)
    assert len({file for file, _ in got}) == 15


# ----------------------------------------------------------------------------- peers in their own Python
# make test builds them (make peers): sinabs 3.1.3 and rockpool 3.1.0 beside nir 1.0.4, spyx 1.0
# beside JAX; each file runs in a fresh process of the peer's Python, NIRGraphData both ways

PEER_PYTHONS = {
    name: str(EXAMPLES.parents[2] / ".venv-peers" / name / "bin" / "python")
    for name in ("sinabs", "rockpool", "spyx")
}


def test_the_pack_and_example_files_run_against_every_peer():
    """What each peer's own import does, measured (2026-11-26), each divergence explained
    by the peer's own neurons: sinabs and rockpool read the pack with nir 1.0.4, which
    has no v_reset (the report says so); sinabs runs LIFs as its LIFSqueeze does and
    builds nothing for a CubaLIF; rockpool reads no LIF, and runs the CubaLIF graphs
    and the Braille SRNN as its LIFTorch does; spyx runs every LIF and CubaLIF as its
    own neurons do, and builds nothing for an I."""
    from nirbridge.conformance.conventions import ROCKPOOL, SINABS_LIF, SPYX

    names = ["NIR__paper__01_lif__lif_norse.nir", "NIRTorch__tests__braille.nir"]
    report = conformance(
        [EXAMPLES / n for n in names], ["sinabs", "rockpool", "spyx"], with_pack=True, python=PEER_PYTHONS
    )
    got = rows(report)
    assert {report.simulators[n]["version"] for n in ("sinabs", "rockpool", "spyx")} == {
        "3.1.3",
        "3.1.0",
        "1.0.0",
    }
    assert len(got) == 17 * 4  # every file: the reference and three peers
    sinabs = got["lif_r_and_dt.nir", "sinabs"]
    assert sinabs.loads and sinabs.agreement < 0.9 and sinabs.diagnosis == SINABS_LIF.name
    assert sinabs.note == "read with nir 1.0.4, without v_reset of 'lif2'"
    assert got[names[0], "sinabs"].diagnosis == SINABS_LIF.name and got[names[0], "sinabs"].note is None
    assert "builds nothing for CubaLIF" in got["cuba_lif_r_and_dt.nir", "sinabs"].error
    for file in ("cuba_lif_r_and_dt.nir", "cuba_lif.nir", names[1]):
        assert got[file, "rockpool"].loads and got[file, "rockpool"].agreement < 1
        assert got[file, "rockpool"].diagnosis == ROCKPOOL.name, file
    assert not got[names[0], "rockpool"].loads and "tau_mem" in got[names[0], "rockpool"].error
    for file in ("lif_r_and_dt.nir", "cuba_lif_r_and_dt.nir", "recurrent.nir", names[0], names[1]):
        assert got[file, "spyx"].loads and got[file, "spyx"].agreement < 1
        assert got[file, "spyx"].diagnosis == SPYX.name, file
    assert "builds nothing for I 'i2'" in got["integrator.nir", "spyx"].error
    assert "nir.LI without a following nir.Threshold" in got["li_voltage.nir", "spyx"].error
    for (file, simulator), result in got.items():
        assert result.loads or result.error, (file, simulator)
        assert result.agreement in (None, 1.0) or result.diagnosis != "unexplained", (file, simulator)


def test_a_peer_that_is_not_installed_or_crashes_is_a_row(tmp_path):
    path = separating_graph(tmp_path / "g.nir", 2.0)
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'something broke' >&2\nexit 9\n")
    broken.chmod(0o755)
    result = rows(conformance([path], ["spyx"], python={"spyx": str(broken)}))["g.nir", "spyx"]
    assert not result.loads and "crashed (exit status 9): something broke" in result.error


@pytest.mark.parametrize("dt", [1.0, 1e-4])
def test_sinabs_runs_the_nir_paper_s_cnn_as_its_if_neurons_say(dt):
    """sinabs' IF takes no time step (dt = 1, the one its exporter meant), spikes
    several times a step, subtracts the threshold and keeps the membrane at -threshold
    or above. At dt = 1e-4 the equations never spike, and the same explains it."""

    path = EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir"
    result = rows(conformance([path], ["sinabs"], dt=dt, steps=30, python=PEER_PYTHONS))[path.name, "sinabs"]
    assert 0 < result.agreement < 1 and (result.reference_spikes > 0) == (dt == 1.0)
    assert result.diagnosis == SINABS_IF.name


def test_a_loop_wired_through_its_weight_and_a_diamond_are_explained_for_spyx_and_rockpool(tmp_path):
    """spyx and rockpool build one recurrent neuron from a four-node loop subgraph, so a
    loop whose input goes through its weight (as spyx 1.0 exports one) runs as if the
    input went to the neuron; nirtorch 2.0.2, under rockpool, runs a diamond in
    depth-first preorder and returns what ran last (here an Affine's values). Measured
    against the real peers."""
    from nirbridge.conformance.conventions import ROCKPOOL, SPYX

    rng = np.random.default_rng(3)

    def cuba(n):
        return nir.CubaLIF(
            tau_syn=np.full(n, 4e-3),
            tau_mem=np.full(n, 1e-2),
            r=np.full(n, 2.0),
            v_leak=np.zeros(n),
            v_threshold=np.ones(n),
            v_reset=np.zeros(n),
            w_in=np.full(n, 3.0),
        )

    loop = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([5])),
            "lif": cuba(5),
            "w_rec": nir.Linear(rng.normal(0, 0.6, (5, 5))),
            "output": nir.Output(np.array([5])),
        },
        edges=[("input", "w_rec"), ("w_rec", "lif"), ("lif", "w_rec"), ("lif", "output")],
        type_check=False,
    )
    wired = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(rng.normal(0.8, 0.4, (5, 3)), np.zeros(5)),
            "rnn": loop,
            "output": nir.Output(np.array([5])),
        },
        edges=[("input", "fc"), ("fc", "rnn"), ("rnn", "output")],
        metadata={"dt": DT},
        type_check=False,
    )
    diamond = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "a": nir.Affine(rng.normal(0.8, 0.4, (4, 3)), np.zeros(4)),
            "c": cuba(4),
            "b": nir.Affine(rng.normal(0.8, 0.4, (4, 3)), np.zeros(4)),
            "output": nir.Output(np.array([4])),
        },
        edges=[("input", "a"), ("a", "c"), ("c", "output"), ("input", "b"), ("b", "c")],
        metadata={"dt": DT},
        type_check=False,
    )
    nirbridge.write(tmp_path / "wired.nir", wired)
    nirbridge.write(tmp_path / "diamond.nir", diamond)
    files = [tmp_path / "wired.nir", tmp_path / "diamond.nir"]
    got = rows(conformance(files, ["spyx", "rockpool"], steps=80, rate=0.4, python=PEER_PYTHONS))
    assert got["wired.nir", "spyx"].agreement < 1 and got["wired.nir", "spyx"].diagnosis == SPYX.name
    assert (
        got["wired.nir", "rockpool"].agreement < 1 and got["wired.nir", "rockpool"].diagnosis == ROCKPOOL.name
    )
    assert (
        got["diamond.nir", "rockpool"].agreement < 1
        and got["diamond.nir", "rockpool"].diagnosis == "nirtorch's order"
    )
    assert "builds 2 modules for 3 nodes" in got["diamond.nir", "spyx"].error


def test_conformance_refuses_an_output_that_is_an_input(tmp_path):
    """`conformance m.nir --json m.nir` replaced the model with the report and exited 0."""
    model = separating_graph(tmp_path / "m.nir", 2.0)
    before = Path(model).read_bytes()
    (tmp_path / "link.json").symlink_to(model)
    beside = tmp_path / "m.inputs.h5"
    beside.write_bytes(b"")  # conformance reads NAME.inputs.h5 beside NAME.nir where it exists
    base = ["conformance", model, "--simulators", "nirbridge+norse", "--steps", "5"]
    for extra, option in [
        (["--json", model], "--json"),
        (["--html", model], "--html"),
        (["--json", str(tmp_path / "link.json")], "--json"),
        (["--html", str(beside)], "--html"),
    ]:
        result = CliRunner().invoke(main, [*base, *extra])
        assert result.exit_code == 1 and "which this command reads" in result.output, result.output
        assert f"{option} " in result.output
        assert Path(model).read_bytes() == before
    same = CliRunner().invoke(main, [*base, "--json", str(tmp_path / "r"), "--html", str(tmp_path / "r")])
    assert same.exit_code == 1 and "give each output its own path" in same.output


def test_peers_are_never_taken_from_the_current_folder(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    fake = tmp_path / ".venv-peers" / "spyx" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 9\n")
    fake.chmod(0o755)
    (tmp_path / "csv.py").write_text(f"open({str(marker)!r}, 'w')\n")  # what `python -c` would import
    monkeypatch.chdir(tmp_path)
    found = available().get("spyx")
    assert found is None or not found.python.startswith(str(tmp_path))
    peer("spyx", sys.executable).version()
    assert not marker.exists()


def test_an_infinite_reference_value_does_not_widen_the_tolerance(tmp_path, monkeypatch):
    graph = nir.NIRGraph.from_list(
        nir.Affine(np.diag([1.0, 1.0, 1e200]), np.zeros(3)), nir.I(r=np.array([1.0, 1.0, 1e200]))
    )
    graph.metadata = {"dt": 1.0}  # neuron 2: r x = inf at its first input spike
    nirbridge.write(tmp_path / "inf.nir", graph)

    def constant(path, inputs, dt):
        return {"output": np.full(inputs["input"].shape, 12345.0)}

    monkeypatch.setitem(REGISTRY, "constant", Simulator("constant", "numpy", constant))
    result = rows(conformance([tmp_path / "inf.nir"], ["constant"], steps=20))["inf.nir", "constant"]
    assert result.agreement == 0.0 and result.diagnosis == "unexplained"


def test_a_simulator_that_gives_only_zeros_is_said_to_be_silent(monkeypatch):
    from nirbridge.conformance import pack

    def zeros(path, inputs, dt):
        return {"output": np.zeros((*inputs["input"].shape[:2], 2))}

    monkeypatch.setitem(REGISTRY, "zeros", Simulator("zeros", "numpy", zeros))
    path = os.path.join(pack.PACK_DIR, "if_on_threshold.nir")  # its reference under "r ignored" is silent
    result = rows(conformance([path], ["zeros"]))["if_on_threshold.nir", "zeros"]
    assert result.agreement < 1 and result.diagnosis == SILENT


def test_what_a_peer_prints_is_not_held_in_memory(tmp_path):
    path = separating_graph(tmp_path / "g.nir", 2.0)
    loud = tmp_path / "python"
    loud.write_text(
        "#!/bin/sh\nhead -c 100000000 /dev/zero\nhead -c 100000000 /dev/zero >&2\n"
        "echo >&2\necho 'ValueError: refused' >&2\nexit 3\n"
    )
    loud.chmod(0o755)
    tracemalloc.start()
    try:
        result = rows(conformance([path], ["spyx"], python={"spyx": str(loud)}))["g.nir", "spyx"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not result.loads and result.error == "ValueError: refused"
    assert peak < 20e6, peak


@pytest.mark.parametrize("name", ["price_$5_$6.nir", "$\\frac{a}{$.nir", os.fsdecode(b"bad\xff.nir")])
def test_the_html_report_shows_any_file_name(name, tmp_path):
    path = separating_graph(tmp_path / name, 2.0)
    result = CliRunner().invoke(
        main,
        [
            "conformance",
            path,
            "--simulators",
            "nirbridge+norse",
            "--steps",
            "5",
            "--html",
            str(tmp_path / "r.html"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "<img" in (tmp_path / "r.html").read_text()


def test_files_of_one_base_name_and_odd_names_keep_their_rows(tmp_path):
    from nirbridge.conformance.report import _grid

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    files = [separating_graph(tmp_path / "a" / "m.nir", 2.0), separating_graph(tmp_path / "b" / "m.nir", 1.0)]
    files.append(separating_graph(tmp_path / "x\n  norse  forged.nir", 1.0))
    report = conformance(files, ["norse"], steps=30)
    labels, _, values, _ = _grid(report)
    assert len(set(labels)) == 3 and not np.isnan(values).any()
    assert len(str(report).splitlines()) == 1 + len(report.results)


@pytest.mark.parametrize(
    ("keywords", "text"),
    [
        ({"steps": 0}, "conformance(steps=0): give a whole number, 1 or more"),
        ({"steps": -3}, "conformance(steps=-3)"),
        ({"batch": 0}, "conformance(batch=0)"),
        ({"rate": 2.0}, "conformance(rate=2.0): a spike probability per step"),
        ({"rate": float("nan")}, "conformance(rate=nan)"),
        ({"seed": -1}, "conformance(seed=-1): give a seed from 0"),
        ({"dt": 0.0}, "conformance(dt=0.0): a time step in seconds, above 0 and finite"),
        ({"dt": float("nan")}, "conformance(dt=nan)"),
        ({"dt": float("inf")}, "conformance(dt=inf)"),
        ({"simulators": []}, "conformance(simulators=[]): name one or more"),
        ({"simulators": ["norse", "norse"]}, "['norse'] named twice"),
    ],
)
def test_settings_that_measure_nothing_are_refused_before_anything_runs(keywords, text, tmp_path):
    """Before: rows of IndexError, 100% agreement over 0 values, a raw ValueError."""
    path = separating_graph(tmp_path / "g.nir", 2.0)
    with pytest.raises(nirbridge.NirBridgeError) as caught:
        conformance([path], **{"simulators": ["norse"], **keywords})
    assert text in str(caught.value)


def test_a_single_node_file_and_inputs_of_another_graph_are_named_in_their_rows(tmp_path):
    nirbridge.write(
        tmp_path / "node.nir", nir.LIF(np.ones(2), np.ones(2), np.zeros(2), np.ones(2), np.zeros(2))
    )
    path = separating_graph(tmp_path / "g.nir", 2.0)
    other = {"other": np.zeros((5, 1, 3))}  # inputs of another graph, beside g.nir
    write_data(str(tmp_path / "g.inputs.h5"), pack.as_data(other, 1e-4))
    got = rows(conformance([tmp_path / "node.nir", path], ["norse"], steps=5))
    node, graph = got["node.nir", "nirbridge"], got["g.nir", "nirbridge"]
    assert not node.loads and "holds a single LIF node, not a graph" in node.error, node.error
    assert not graph.loads and "g.inputs.h5 holds no spikes [B >= 1, T >= 1, 3]" in graph.error, graph.error
    assert "'other': [1, 5, 3]" in graph.error


def test_cells_that_measure_nothing_are_marked_and_named_apart_from_load_failures():
    """A graph a peer's import cannot take is "not measured", not "does not load"; a file
    nirbridge's reference cannot run leaves its row marked, not blank."""
    from nirbridge.conformance import Report, Result
    from nirbridge.conformance.report import _grid

    two = "ValueError: not measured: this graph has 2 Input and 1 Output nodes, and the simulators'"
    results = [
        Result("a.nir", "nirbridge", True, None, 1.0, None, None, 3),
        Result("a.nir", "spyx", False, two),
        Result("a.nir", "norse", False, "KeyError: 'x'"),
        Result("b.nir", "nirbridge", False, "NirFileError: b.nir: not an HDF5 file"),
    ]
    report = Report(["a.nir", "b.nir"], {"nirbridge": {}, "spyx": {}, "norse": {}}, results, 10, 2)
    _, simulators, values, marks = _grid(report)
    assert simulators == ["spyx", "norse"] and np.isnan(values).all()
    assert marks == {(0, 0): "-", (0, 1): "x", (1, 0): "-", (1, 1): "-"}
    text = str(report)
    assert "not measured: this graph has 2 Input" in text and "does not load: not measured" not in text
    assert "does not load: KeyError" in text


def test_non_finite_and_near_zero_references_are_said_so(tmp_path, monkeypatch):
    """A simulator that reproduces an overflowing reference exactly agrees (the same inf,
    NaN on both sides), and nirbridge's row says the reference is not finite; a reference
    whose values all lie within the absolute tolerance of 0 is said to be silent, so a
    simulator of zeros "agreeing" with it proves nothing."""
    from nirbridge.conformance import conventions
    from nirbridge.io import read

    w = np.linspace(0.5, 2, 12).reshape(4, 3)
    li = nir.LI(np.full(4, 1e-3), np.full(4, 10.0), np.zeros(4))
    tiny = nir.LI(np.full(4, 1e-3), np.full(4, 1e-7), np.zeros(4))
    graphs = {
        "overflow": nir.NIRGraph.from_list(
            nir.Affine(w * 1e300, np.zeros(4)), nir.Affine(np.eye(4) * 1e300, np.zeros(4)), li
        ),
        "tiny": nir.NIRGraph.from_list(nir.Affine(w, np.zeros(4)), tiny),
    }
    for name, graph in graphs.items():
        graph.metadata = {"dt": 1e-4}
        nirbridge.write(tmp_path / f"{name}.nir", graph)

    def same(path, inputs, dt):
        return dict(conventions.reference(read(path), inputs, dt))

    def zeros(path, inputs, dt):
        return {k: np.zeros_like(v) for k, v in conventions.reference(read(path), inputs, dt).items()}

    monkeypatch.setitem(REGISTRY, "same", Simulator("same", "numpy", same))
    monkeypatch.setitem(REGISTRY, "zeros", Simulator("zeros", "numpy", zeros))
    report = conformance([tmp_path / "overflow.nir", tmp_path / "tiny.nir"], ["same", "zeros"], steps=20)
    got = rows(report)
    assert got["overflow.nir", "same"].agreement == 1.0
    assert "values that are not finite" in got["overflow.nir", "nirbridge"].note
    assert got["overflow.nir", "zeros"].diagnosis == SILENT
    assert (
        got["tiny.nir", "nirbridge"].reference_spikes == 0 and got["tiny.nir", "zeros"].reference_spikes == 0
    )
    assert "the reference is silent" in str(report)


FAKE_PEER = """#!{python}
# a peer's Python that speaks peer_runner's --serve protocol: counts its starts, refuses
# every file by name, dies on a file called crash.nir and hangs on one called slow.nir
import json, os, sys, time
if sys.argv[2:] != ["--serve", "spyx"]:  # the version query, python -I -c ...
    sys.exit(1)
with open({starts!r}, "a") as file:
    file.write("started\\n")
for line in sys.stdin:
    job = json.loads(line)
    name = os.path.basename(job["graph"])
    print("a line that is no answer")
    if name == "crash.nir":
        print("boom", file=sys.stderr, flush=True)
        os._exit(9)
    if name == "slow.nir":
        time.sleep(60)
    print("ValueError: refused " + name, file=sys.stderr, flush=True)
    print(json.dumps({{"status": 3, "message": "ValueError: refused " + name, "note": None}}), flush=True)
"""


def test_a_peer_runs_every_file_in_one_process_and_a_crash_costs_one_file(tmp_path):
    starts = tmp_path / "starts.txt"
    fake = tmp_path / "python"
    fake.write_text(FAKE_PEER.format(python=sys.executable, starts=str(starts)))
    fake.chmod(0o755)
    files = [separating_graph(tmp_path / f"{name}.nir", 2.0) for name in ("a", "b", "crash", "c")]
    got = rows(conformance(files, ["spyx"], python={"spyx": str(fake)}, jobs=1))
    assert [got[f"{name}.nir", "spyx"].error for name in ("a", "b", "c")] == [
        f"ValueError: refused {name}.nir" for name in ("a", "b", "c")
    ]
    assert got["crash.nir", "spyx"].error == f"{fake} crashed (exit status 9): boom"
    assert starts.read_text().splitlines() == ["started", "started"]  # once, and once after the crash
    # a file that takes longer than the timeout costs that file; the next one runs
    simulator = peer("spyx", str(fake), timeout=2)
    inputs = {"input": np.zeros((3, 1, 3))}
    with pytest.raises(LoadFailure, match="timed out after 2 s"):
        simulator.run(separating_graph(tmp_path / "slow.nir", 2.0), inputs, 1e-3)
    with pytest.raises(LoadFailure, match="refused a.nir"):
        simulator.run(files[0], inputs, 1e-3)
    simulator.close()
    with pytest.raises(ConformanceError, match=r"conformance\(jobs=0\)"):
        conformance(files, ["spyx"], python={"spyx": str(fake)}, jobs=0)


def test_a_simulator_that_cannot_be_imported_is_left_out_of_a_default_run_with_a_line(tmp_path):
    """norse installed without nirtorch (its import then fails inside nirbridge's adapter):
    the default run measures the others and says in one line what it left out; asking for
    norse by name says why it cannot run."""
    path = separating_graph(tmp_path / "g.nir", 2.0)
    code = (
        "import sys; sys.modules['nirtorch'] = None\n"
        "from nirbridge.conformance import ConformanceError, conformance\n"
        "from nirbridge.cli import main\n"
        "try:\n"
        f"    conformance([{path!r}], ['norse'], steps=10)\n"
        "except ConformanceError as error:\n"
        "    print('REFUSED', error)\n"
        f"main(['conformance', {path!r}, '--steps', '10'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REFUSED norse cannot be imported here: nirbridge.adapters.norse needs" in done.stdout
    (said,) = [line for line in done.stderr.splitlines() if "left out" in line]
    assert said.startswith("conformance: norse left out:") and "nirtorch" in said
    assert "snntorch" in done.stdout and not re.search(r"^\s*(nirbridge\+)?norse\s", done.stdout, re.M)

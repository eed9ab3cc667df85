"""run(compile=True): the same values as eager run and as stepping, no recompilation for
another T or batch size, and an eager fallback with a warning when compiling fails.

Each compilation takes 10-30 s on two cores, so these tests compile few graphs, each
covering much: recurrent loops, a subgraph inside a loop, delays, self-loops, two
inputs and two outputs, records of every node and variable."""

from __future__ import annotations

import warnings

import nir
import numpy as np
import pytest
import torch
import torch._dynamo

import nirbridge
from tests.conftest import EXAMPLES
from tests.test_interpret import neuron_params, recurrent_block
from tests.test_run import assert_same_tree, step_module

DT = 1e-4


def composite(rng) -> nir.NIRGraph:
    n = 5
    return nir.NIRGraph(
        nodes={
            "a": nir.Input(np.array([3])),
            "b": nir.Input(np.array([n])),
            "fc": nir.Affine(rng.normal(size=(n, 3)) * 3, rng.normal(size=n)),
            "block": recurrent_block(rng, n),
            "mix": nir.Linear(rng.normal(size=(n, n))),
            "delay": nir.Delay(rng.integers(0, 4, n) * DT),
            "cuba": neuron_params(rng, n, "CubaLIF"),
            "li": neuron_params(rng, n, "LI"),
            "spikes": nir.Output(np.array([n])),
            "trace": nir.Output(np.array([n])),
        },
        edges=[
            ("a", "fc"),
            ("fc", "block"),
            ("b", "block"),
            ("block", "mix"),
            ("mix", "delay"),
            ("delay", "block"),  # a loop through a subgraph and a delay
            ("block", "cuba"),
            ("cuba", "spikes"),
            ("cuba", "li"),
            ("li", "li"),  # a self-loop
            ("li", "trace"),
        ],
        type_check=False,
    )


def test_compiled_runs_equal_eager_runs_and_stepping(rng):
    gm = nirbridge.nir_to_torch(composite(rng), dt=DT).requires_grad_(False)
    xs = {
        "a": torch.from_numpy(rng.uniform(0, 3, (40, 8, 3))).float(),
        "b": torch.from_numpy(rng.uniform(0, 1, (40, 8, 5))).float(),
    }
    eager = nirbridge.run(gm, xs, record="all")
    compiled = nirbridge.run(gm, xs, record="all", compile=True, chunk=16)
    assert set(compiled.records) == set(eager.records)
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key
    for name in ("spikes", "trace"):
        assert torch.equal(compiled.output[name], eager.output[name]), name
    assert eager.output["spikes"].sum() > 0, "the test network should spike"
    assert_same_tree(compiled.state, eager.state)
    stepped, state = step_module(gm, xs)
    assert torch.equal(compiled.output["spikes"], stepped["spikes"])
    assert torch.equal(compiled.output["trace"], stepped["trace"])
    assert_same_tree(compiled.state, state)

    # continuing from a state, with another T and batch size: the same code, no recompile
    torch._dynamo.utils.counters.clear()
    half = {k: v[:, :3] for k, v in xs.items()}
    first = nirbridge.run(gm, {k: v[:13] for k, v in half.items()}, compile=True, record="all")
    part = {k: v[13:] for k, v in half.items()}
    second = nirbridge.run(gm, part, state=first.state, compile=True, record="all")
    whole = nirbridge.run(gm, half)
    assert torch.equal(torch.cat([first.output["trace"], second.output["trace"]]), whole.output["trace"])
    ragged = nirbridge.run(gm, half, compile=True, record="all", chunk=13)  # chunks of 13, 13, 13, 1
    assert torch.equal(ragged.output["trace"], whole.output["trace"])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 0, "recompiled"


def test_the_braille_file_compiled_equals_stepping():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir")
    x = (torch.rand(60, 8, 12, generator=torch.Generator().manual_seed(2)) < 0.3).float()
    with torch.no_grad():
        compiled = nirbridge.run(gm, x, compile=True, bool_spikes=True, record="outputs")
    stepped, state = step_module(gm, {"input": x})
    assert torch.equal(compiled.output, stepped != 0)
    assert compiled.records["lif1.lif"].dtype == torch.bool
    assert_same_tree(compiled.state, state)


class Breaks(torch.nn.Module):
    """A layer torch.compile cannot capture in one graph."""

    def forward(self, x):
        torch._dynamo.graph_break()
        return x * 2.0


def test_failing_compilation_falls_back_to_eager_with_a_warning(rng):
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "scale": nir.Scale(np.full(3, 2.0)),
            "lif": neuron_params(rng, 3, "LIF"),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "scale"), ("scale", "lif"), ("lif", "output")],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, {nir.Scale: lambda node: Breaks()}, dt=DT)
    x = torch.from_numpy(rng.uniform(0, 3, (20, 2, 3))).float()
    with torch.no_grad():
        with pytest.warns(nirbridge.CompileWarning, match="compilation failed, running eagerly instead"):
            compiled = nirbridge.run(gm, x, compile=True)
        assert torch.equal(compiled.output, nirbridge.run(gm, x).output)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the failure is remembered: no second attempt
            nirbridge.run(gm, x, compile=True)
    trainable = nirbridge.nir_to_torch(graph, dt=DT)
    with pytest.warns(nirbridge.CompileWarning, match=r"gradients are required.*torch.no_grad\(\)"):
        result = nirbridge.run(trainable, x, backend="compile")
    assert result.output.requires_grad
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, at the first call
        nirbridge.run(trainable, x, backend="compile")


def test_compiled_convolutions_equal_eager_ones(rng):
    """inductor's channels-last convolutions sum in another order: they are switched off."""
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2, 12, 12])),
            "c0": nir.Conv2d(
                (12, 12),
                rng.normal(size=(16, 2, 3, 3)).astype(np.float32),
                1,
                1,
                1,
                1,
                np.zeros(16, np.float32),
            ),
            "if0": nir.IF(
                r=np.ones((16, 12, 12)), v_threshold=np.ones((16, 12, 12)), v_reset=np.zeros((16, 12, 12))
            ),
            "c1": nir.Conv2d(
                (12, 12),
                rng.normal(size=(16, 16, 3, 3)).astype(np.float32),
                1,
                1,
                1,
                1,
                np.zeros(16, np.float32),
            ),
            "pool": nir.SumPool2d(np.array([2, 2]), np.array([2, 2]), np.array([0, 0])),
            "if1": nir.IF(
                r=np.ones((16, 6, 6)), v_threshold=np.ones((16, 6, 6)), v_reset=np.zeros((16, 6, 6))
            ),
            "output": nir.Output(np.array([16, 6, 6])),
        },
        edges=[
            ("input", "c0"),
            ("c0", "if0"),
            ("if0", "c1"),
            ("c1", "pool"),
            ("pool", "if1"),
            ("if1", "output"),
        ],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dt=1.0).requires_grad_(False)
    x = torch.from_numpy(rng.uniform(size=(30, 8, 2, 12, 12)) < 0.3).float()
    eager = nirbridge.run(gm, x, record="all")
    compiled = nirbridge.run(gm, x, record="all", compile=True)
    assert eager.records["if1"].sum() > 0
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key


def test_a_recurrent_subgraph_inside_a_loop_compiles_without_the_cpp_wrapper(rng):
    """torch 2.13's C++ wrapper cannot compile these nested scans (found by random graphs):
    the Python wrapper is tried next, silently, and gives the same values."""
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "block": recurrent_block(rng, 3),
            "integrator": nir.I(r=rng.uniform(0.5, 2, 3)),
            "readout": nir.Affine(rng.normal(size=(1, 3)), rng.normal(size=1)),
            "output": nir.Output(np.array([1])),
        },
        edges=[
            ("input", "block"),
            ("block", "integrator"),
            ("integrator", "readout"),
            ("integrator", "block"),
            ("readout", "output"),
        ],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT).requires_grad_(False)
    x = torch.from_numpy(rng.uniform(0, 3, (20, 4, 3))).float()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = nirbridge.run(gm, x, compile=True, record="all", chunk=7)
    eager = nirbridge.run(gm, x, record="all")
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key
    assert torch.equal(compiled.output, eager.output)


def test_an_exact_compiled_run_on_cuda_warns_that_it_may_differ_and_points_to_triton():
    """inductor's CUDA code differed from stepping on an H200 (docs/gpu.md); on the CPU,
    and under "fast", compiled runs say nothing."""
    from nirbridge.engine.compile import inexact_on

    why = inexact_on(torch.device("cuda", 0), "exact")
    assert why is not None and "backend='triton'" in why and "differ from stepping" in why
    assert inexact_on(torch.device("cuda"), "fast") is None
    assert inexact_on(torch.device("cpu"), "exact") is None


@pytest.mark.parametrize("device", ["cpu", *(["cuda"] if torch.cuda.is_available() else [])])
def test_the_warning_comes_once_per_module_and_only_on_cuda(device, rng):
    graph = nir.NIRGraph.from_list(
        nir.Affine(rng.normal(size=(3, 2)), np.zeros(3)), neuron_params(rng, 3, "LIF")
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT, device=device).requires_grad_(False)
    x = torch.from_numpy(rng.uniform(0, 3, (6, 2, 2))).float().to(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            nirbridge.run(gm, x, backend="compile")
    ours = [w for w in caught if issubclass(w.category, nirbridge.CompileWarning)]
    assert len(ours) == (1 if device == "cuda" else 0), [str(w.message) for w in ours]


SCAN_WITH_A_REPEATED_CARRY = r"""
import faulthandler, torch
from torch.utils._pytree import tree_leaves
from nirbridge.engine.compile import _scan, compile_options
faulthandler.enable()

def body(carry, x_t):
    v, delayed = carry
    v = v + delayed + x_t
    return (v, v), v  # a neuron's v that is also its delayed output: one tensor twice

def f(xs, c):
    return _scan(body, (c, c.clone()), xs)

compiled = torch.compile(f, fullgraph=True, dynamic=True, options=compile_options("exact"))
xs, c = torch.rand(15, 8, 5), torch.rand(8, 5)
with torch.no_grad():
    expected, got = f(xs, c), compiled(xs, c)
print("equal", all(torch.equal(a, b) for a, b in zip(tree_leaves(expected), tree_leaves(got))))
"""


def test_a_carry_holding_one_tensor_twice_compiles_without_crashing_the_process():
    """torch 2.14 folded _scan's exact copy (v * 1.0) of a repeated carry leaf into the leaf
    itself, and its C++ wrapper then freed one buffer twice: a segmentation fault that took
    the whole process down. In a process of its own, so that a regression fails this test
    and not the suite."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", SCAN_WITH_A_REPEATED_CARRY], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip().splitlines()[-1] == "equal True", done.stdout

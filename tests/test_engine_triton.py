"""nirbridge.engine.triton: neuron scans as Triton kernels, bit for bit like stepping.

Without a GPU the kernels run on CPU tensors through Triton's interpreter (conftest
turns it on); where torch sees a GPU they run on it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nirbridge
from nirbridge.engine import selfcheck
from nirbridge.engine import triton as T
from tests.conftest import EXAMPLES, input_names
from tests.test_engine_kernels import make, shared
from tests.test_interpret import USABLE, random_graphs

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
KINDS = ["I", "IF", "LI", "LIF", "CubaLI", "CubaLIF"]


def stepped(module, x, state):
    outs, history = [], []
    for t in range(x.shape[0]):
        out, state = module(x[t], state)
        outs.append(out)
        history.append(state)
    return torch.stack(outs), state, history


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_scans_equal_stepping_bit_for_bit(kind, dtype, device, rng):
    module = make(kind, rng).to(dtype=dtype, device=device)  # per-neuron parameters
    x = torch.from_numpy(rng.uniform(-1, 8, (40, 5, 6))).to(dtype=dtype, device=device)
    start = module.initial_state(x[0])
    start = type(start)(*(s + 0.1 for s in start))
    kept = [s.clone() for s in start]
    with torch.no_grad(), nirbridge.precision("exact"):
        out, state, traces = T.scan(module, x, start, True)
        expected, final, history = stepped(module, x, start)
    assert torch.equal(out, expected)
    assert all(torch.equal(a, b) for a, b in zip(state, final))
    for field in state._fields:
        assert torch.equal(traces[field], torch.stack([getattr(h, field) for h in history])), field
    assert all(torch.equal(a, b) for a, b in zip(start, kept)), "the state passed in was modified"
    if kind.endswith("IF"):
        assert 0 < out.sum() < out.numel()


@pytest.mark.parametrize("kind", KINDS)
def test_shared_parameters_and_a_fresh_state(kind, rng):
    module = shared(kind, -0.25).float()
    x = torch.from_numpy(rng.uniform(-1, 3, (30, 3, 6))).float()
    with torch.no_grad(), nirbridge.precision("exact"):
        out, state, traces = T.scan(module, x, None, False)
        expected, final, _ = stepped(module, x, None)
    assert torch.equal(out, expected) and traces == {}
    assert all(torch.equal(a, b) for a, b in zip(state, final))


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
@pytest.mark.parametrize("name", sorted(USABLE))
def test_every_example_file_runs_like_the_eager_back_end(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        graph = nirbridge.read(EXAMPLES / name)
        gm = nirbridge.nir_to_torch(graph, dt=USABLE[name], allow_negative_tau="spyx_shd" in name)
    shape = tuple(int(v) for v in graph.nodes[input_names(graph)[0]].input_type["input"])
    x = (torch.rand((6, 4, *shape), generator=torch.Generator().manual_seed(2)) < 0.3).float()
    with torch.no_grad():
        kernels = nirbridge.run(gm, x, backend="triton", record="all", chunk=3)
        eager = nirbridge.run(gm, x, record="all")
    assert torch.equal(kernels.output, eager.output)
    assert set(kernels.records) == set(eager.records)
    for key, value in eager.records.items():
        assert torch.equal(kernels.records[key], value), key
    assert all(torch.equal(a, b) for a, b in zip(*map(_leaves, (kernels.state, eager.state))))


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from([torch.float32, torch.float64]))
def test_random_graphs_run_like_the_eager_back_end(case, dtype):
    """Every neuron family, loops, delays, nesting, several inputs and outputs."""
    graph, seed = case
    rng = np.random.default_rng(seed)
    gm = nirbridge.nir_to_torch(graph, dt=1e-4, dtype=dtype)
    xs = {
        n: torch.from_numpy(rng.uniform(-1, 3, (8, 4, *graph.nodes[n].input_type["input"]))).to(dtype)
        for n in input_names(graph)
    }
    with torch.no_grad():
        kernels = nirbridge.run(gm, xs, backend="triton", record="all")
        eager = nirbridge.run(gm, xs, record="all")
    for a, b in zip(_leaves(kernels.output), _leaves(eager.output)):
        assert torch.equal(a, b)
    for key, value in eager.records.items():
        assert torch.equal(kernels.records[key], value), key


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, 1e-9)])
@pytest.mark.parametrize("kind", KINDS)
def test_reverse_time_kernels_give_eager_autograds_gradients(kind, dtype, tolerance, device, rng):
    """Gradients of outputs, the final state and the recorded state variables reach the
    input, every parameter and the initial state, as stepping's autograd gives them."""
    module = make(kind, rng).to(dtype=dtype, device=device)
    parameters = [getattr(module, name).requires_grad_(True) for name in module.params]
    x = torch.from_numpy(rng.uniform(-1, 8, (30, 3, 6))).to(dtype=dtype, device=device).requires_grad_(True)
    start = module.initial_state(x[0])
    start = type(start)(*(s.detach() + 0.1 for s in start))
    start = type(start)(*(s.requires_grad_(True) for s in start))
    weights = torch.from_numpy(rng.normal(size=(30, 3, 6))).to(dtype=dtype, device=device)

    def loss(out, state, traces):
        return (
            (out * weights).sum() + sum((s * 0.3).sum() for s in state) + sum(t.sum() * 0.1 for t in traces)
        )

    with nirbridge.precision("exact"):
        out, state, traces = T.scan(module, x, start, True)
    got = torch.autograd.grad(loss(out, state, traces.values()), [x, *parameters, *start])
    expected_out, final, history = stepped(module, x, start)
    history_traces = [torch.stack([getattr(h, f) for h in history]) for f in final._fields]
    want = torch.autograd.grad(loss(expected_out, final, history_traces), [x, *parameters, *start])
    assert torch.equal(out, expected_out)
    for name, g, w in zip(["x", *module.params, *final._fields], got, want):
        assert torch.allclose(g, w, rtol=tolerance, atol=tolerance * w.abs().max().item()), name
    if kind.endswith("IF"):
        assert 0 < out.sum() < out.numel()


def test_bptt_through_run_equals_the_eager_back_end(rng, monkeypatch):
    """A graph with a recurrent loop and trainable time constants: the neurons outside
    the loop use the kernels, the loop steps eagerly, and the gradients agree."""
    from tests.test_run import lif_graph

    reverse_launches = []
    real = T._neuron_scan_backward

    class Counting:
        def __getitem__(self, grid):
            reverse_launches.append(grid)
            return real[grid]

    monkeypatch.setattr(T, "_neuron_scan_backward", Counting())

    graph = lif_graph(rng, recurrent=True)  # LIF <-> Linear, then a CubaLI outside the loop
    grads = []
    for backend in ("triton", "eager"):
        gm = nirbridge.nir_to_torch(graph, dt=1e-4, dtype=torch.float64, trainable=True)
        x = torch.from_numpy(rng.uniform(0, 3, (12, 2, 3))) if not grads else grads[0][0]
        x = x.detach().requires_grad_(True)
        out = nirbridge.run(gm, x, backend=backend).output
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
        grads.append((x, x.grad, {n: p.grad for n, p in gm.named_parameters()}))
    (_, gx, gp), (_, ex, ep) = grads
    assert reverse_launches, "the CubaLI outside the loop should run its reverse-time kernel"
    assert torch.allclose(gx, ex, rtol=1e-9, atol=1e-12)
    assert set(gp) == set(ep) and any("li.tau_mem" in n for n in gp)
    for name in gp:
        assert torch.allclose(gp[name], ep[name], rtol=1e-9, atol=1e-12), name


def test_without_the_interpreter_the_cpu_is_refused_with_a_reason():
    code = (
        "import torch, nirbridge\n"
        "gm = nirbridge.neurons.LIF(tau=1e-3, r=1.0, v_leak=0.0, v_threshold=1.0, v_reset=0.0)\n"
        "try:\n"
        "    nirbridge.run(gm.float(), torch.zeros(3, 2, 1), backend='triton')\n"
        "except nirbridge.BackendUnavailableError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "kernels run on CUDA, and the module is on cpu" in done.stdout
    assert "TRITON_INTERPRET=1" in done.stdout and "backend='eager'" in done.stdout


def _leaves(tree):
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def test_kernels_launch_without_contraction_unless_fast(monkeypatch, rng):
    launches = []
    real = T._neuron_scan

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **options):
                launches.append(options["enable_fp_fusion"])
                return real[grid](*args, **options)

            return launch

    monkeypatch.setattr(T, "_neuron_scan", Recorder())
    module = make("LIF", rng).float()
    x = torch.from_numpy(rng.uniform(0, 8, (5, 2, 6))).float()
    with torch.no_grad():
        nirbridge.run(module, x, backend="triton")
        assert launches and not any(launches)
        launches.clear()
        nirbridge.run(module, x, backend="triton", precision="fast")
        assert launches and all(launches)


def test_a_kernel_triton_cannot_build_falls_back_to_eager_once(monkeypatch, rng):
    from triton.runtime.errors import OutOfResources

    class Refusing:
        def __getitem__(self, grid):
            def launch(*args, **options):
                raise OutOfResources(1 << 20, 1 << 16, "shared memory")

            return launch

    monkeypatch.setattr(T, "_neuron_scan", Refusing())
    monkeypatch.setattr(T, "_failed", [])
    module = make("CubaLIF", rng).float()
    x = torch.from_numpy(rng.uniform(0, 8, (6, 2, 6))).float()
    with torch.no_grad(), selfcheck.skipping():  # the self-check would meet the failure first
        with pytest.warns(nirbridge.CompileWarning, match="could not build its kernel.*OutOfResources"):
            out = nirbridge.run(module, x, backend="triton", chunk=3).output
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once
            nirbridge.run(module, x, backend="triton")
        assert torch.equal(out, nirbridge.run(module, x).output)

"""nirbridge.engine.cpu: neuron scans as numba-compiled loops, bit for bit against stepping."""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nirbridge
from nirbridge.engine import cpu as C
from tests.conftest import EXAMPLES, input_names
from tests.test_engine_kernels import make, shared
from tests.test_engine_triton import _leaves
from tests.test_interpret import USABLE, random_graphs
from tests.test_run import step_module

KINDS = ["I", "IF", "LI", "LIF", "CubaLI", "CubaLIF"]


def stepped(module, x, state):
    outs, history = [], []
    for x_t in x:
        out, state = module(x_t, state)
        outs.append(out)
        history.append(state)
    return torch.stack(outs), state, history


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_the_scan_equals_stepping_bit_for_bit(kind, dtype, rng):
    """Per-neuron parameters, a state that is not the initial one, over two chunks."""
    module = make(kind, rng).to(dtype)
    x = torch.from_numpy(rng.uniform(-1, 8, (40, 5, 6))).to(dtype)
    start = module.initial_state(x[0])
    start = type(start)(*(s + 0.1 for s in start))
    kept = copy.deepcopy(start)
    with torch.no_grad():
        first, middle, traces_a = C.scan(module, x[:17], start, True)
        second, final, traces_b = C.scan(module, x[17:], middle, True)
        expected, stepped_final, history = stepped(module, x, start)
    assert torch.equal(torch.cat([first, second]), expected)
    assert all(torch.equal(a, b) for a, b in zip(final, stepped_final))
    for field in final._fields:
        got = torch.cat([traces_a[field], traces_b[field]])
        assert torch.equal(got, torch.stack([getattr(h, field) for h in history])), field
    assert all(torch.equal(a, b) for a, b in zip(start, kept)), "the state passed in was modified"
    if kind.endswith("IF"):
        assert 0 < expected.sum() < expected.numel(), "the test should spike, and not always"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_shared_parameters_a_fresh_state_and_membranes_on_the_threshold(kind, dtype, rng):
    """Shared parameters with factors of exactly 1, inputs on a grid of eighths: many
    membranes land exactly on the threshold (no spike) or just past it; -0.0 resets."""
    module = shared(kind, -0.0).to(dtype)
    x = torch.from_numpy(rng.integers(-8, 24, (30, 3, 6)) / 8).to(dtype)
    with torch.no_grad():
        out, state, traces = C.scan(module, x, None, False)
        expected, final, _ = stepped(module, x, None)
    assert torch.equal(out, expected) and traces == {}
    assert all(torch.equal(a, b) and torch.equal(a.signbit(), b.signbit()) for a, b in zip(state, final))


def test_gradients_other_dtypes_and_delays_run_as_eager(rng):
    module = make("LIF", rng)
    x = torch.from_numpy(rng.uniform(-1, 8, (10, 2, 6))).float().requires_grad_()
    out, _, _ = C.scan(module, x, None, False)
    assert out.requires_grad  # the eager scan, with autograd
    half = make("LIF", rng).to(torch.bfloat16)
    with torch.no_grad():
        low, _, _ = C.scan(half, x.detach().to(torch.bfloat16), None, False)
        assert torch.equal(low, stepped(half, x.detach().to(torch.bfloat16), None)[0])


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
@pytest.mark.parametrize("name", sorted(USABLE))
def test_every_example_file_runs_like_stepping(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        graph = nirbridge.read(EXAMPLES / name)
        gm = nirbridge.nir_to_torch(graph, dt=USABLE[name], allow_negative_tau="spyx_shd" in name)
    shape = tuple(int(v) for v in graph.nodes[input_names(graph)[0]].input_type["input"])
    x = (torch.rand((6, 4, *shape), generator=torch.Generator().manual_seed(2)) < 0.3).float()
    with torch.no_grad():
        compiled = nirbridge.run(gm, x, backend="cpu", record="all", chunk=4)
        eager = nirbridge.run(gm, x, record="all")
        stepped_out, _ = step_module(gm, {input_names(graph)[0]: x})
    assert torch.equal(compiled.output, stepped_out)
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
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
        compiled = nirbridge.run(gm, xs, backend="cpu", record="all", chunk=3)
        eager = nirbridge.run(gm, xs, record="all")
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key


def test_the_kernel_contracts_no_multiply_add():
    """numba without fast-math emits no fused multiply-add; a later numba or LLVM that
    did would change results in the last bit, so the compiled code is looked at (a
    fresh compile with the back-end's options: numba does not inspect cached code)."""
    import numba

    fresh = numba.njit(**{**C.OPTIONS, "cache": False})(C._scan_loop)
    for dtype in (np.float32, np.float64):
        row, table = np.ones(4, dtype), np.ones((3, 4), dtype)
        arrays = [table, row, row, row, row, row, row, row, row, table, table, table]
        fresh(*arrays, 2, True, True, dtype(1), dtype(0))
    assembly = "".join(fresh.inspect_asm(signature) for signature in fresh.signatures).lower()
    assert "vmulss" in assembly or "mulss" in assembly or "fmul" in assembly  # the code is there
    assert "fmadd" not in assembly and "fmla" not in assembly and "fnmadd" not in assembly


def test_without_numba_the_back_end_says_so():
    """In a process where numba cannot be imported (the import is blocked), asking for
    the back-end names the package to install; everything else runs."""
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import torch, nirbridge\n"
        "from nirbridge.neurons import LIF\n"
        "try:\n"
        "    nirbridge.run(LIF(tau=1e-3), torch.zeros(2, 1, 3), backend='cpu')\n"
        "except nirbridge.BackendUnavailableError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert "run(backend='cpu'): numba is not installed (pip install numba" in done.stdout, done.stderr


@pytest.fixture
def loop_calls(monkeypatch):
    """The compiled loop's calls in this test (one list entry each)."""
    from nirbridge.engine import loops

    seen: list[int] = []
    real = C._loop_scan

    def counting(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(C, "run_loop", functools.partial(loops.run_loop, scan=counting))
    return seen


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["IF", "LIF", "CubaLIF"])
def test_small_loops_run_in_one_compiled_loop_and_equal_stepping(kind, bias, dtype, batch, rng, loop_calls):
    """Over chunks of 3 (the layer's output carried across), from a state a first run
    left: outputs, the recorded membrane and layer output, and the state, to the bit.
    Where the CPU's own product does not sum the layer in the kernel's order (the
    probe says so), the loop is stepped, with the same results."""
    from tests.test_engine_triton_loop import loop_graph

    gm = nirbridge.nir_to_torch(loop_graph(rng, kind, bias=bias), dt=1e-4, dtype=dtype)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (10, batch, 3))).to(dtype)
    with torch.no_grad():
        start = nirbridge.run(gm, x[:4]).state
        compiled = nirbridge.run(gm, x, state=start, backend="cpu", chunk=3, record=["neuron.v", "w_rec"])
        eager = nirbridge.run(gm, x, state=start, chunk=3, record=["neuron.v", "w_rec"])
        stepped_out, state = step_module(gm, {"input": x}, start)
    assert torch.equal(compiled.output, stepped_out)
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key
    assert all(torch.equal(a, b) for a, b in zip(_leaves(compiled.state), _leaves(state)))
    assert 0 < compiled.records["neuron.v"].numel()
    from nirbridge.engine import loops

    in_order = loops.sums_in_order(gm.w_rec, batch, x)
    assert (len(loop_calls) == 4) == in_order, (len(loop_calls), in_order)  # a call per chunk, or none


def test_with_gradients_the_loop_is_stepped(rng, loop_calls):
    from tests.test_engine_triton_loop import loop_graph

    gm = nirbridge.nir_to_torch(loop_graph(rng, "LIF"), dt=1e-4)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (6, 4, 3))).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        result = nirbridge.run(gm, x, backend="cpu")
    result.output.sum().backward()
    assert not loop_calls and gm.w_rec.weight.grad is not None


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
def test_a_trainable_loop_runs_compiled_without_gradients(rng, loop_calls):
    """Neuron parameters that are nn.Parameters (trainable=True) do not keep the loop
    out of the compiled kernel when no gradient is asked for."""
    from tests.test_engine_triton_loop import loop_graph

    gm = nirbridge.nir_to_torch(loop_graph(rng, "CubaLIF"), dt=1e-4, trainable=True)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (6, 4, 3))).float()
    with torch.no_grad():
        compiled = nirbridge.run(gm, x, backend="cpu", chunk=3)
        eager = nirbridge.run(gm, x, chunk=3)
    assert torch.equal(compiled.output, eager.output)
    assert len(loop_calls) == 2

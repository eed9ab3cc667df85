"""nirbridge.engine.cpu: neuron scans as numba-compiled loops, bit for bit against stepping."""

from __future__ import annotations

import copy
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
from nirbridge.engine import cpu_kernels as K
from tests.conftest import EXAMPLES, input_names
from tests.test_engine_kernels import make, shared
from tests.test_engine_triton import _leaves
from tests.test_engine_triton_loop import loop_graph
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


@pytest.mark.parametrize("tau_shape", [(6,), (1, 6), (3, 6), (3, 1), (1, 1, 6)])
def test_parameters_that_broadcast_over_the_batch_or_differ_per_row(tau_shape, rng):
    """Parameters the rows share (``[n]``, ``[1, n]``) are read once per neuron of a row;
    one with a row axis (``[B, n]``, ``[B, 1]``) gives every row its own: each equal to
    stepping, outputs and state."""
    from nirbridge.neurons import CubaLIF

    tau = torch.from_numpy(rng.uniform(2e-4, 1e-3, tau_shape))
    module = CubaLIF(tau_syn=tau, tau_mem=rng.uniform(2e-4, 2e-3, 6), r=2.0, v_leak=0.1, v_threshold=1.0)
    x = torch.from_numpy(rng.uniform(-1, 8, (25, 3, 6)))
    with torch.no_grad():
        out, state, _ = C.scan(module, x, None, False)
        expected, final, _ = stepped(module, x, None)
    assert torch.equal(out, expected) and 0 < out.sum() < out.numel()
    assert all(torch.equal(a, b) for a, b in zip(state, final))


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


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, 1e-9)])
@pytest.mark.parametrize("kind", KINDS)
def test_reverse_time_kernels_give_eager_autograds_gradients(kind, dtype, tolerance, rng, monkeypatch):
    """Gradients of outputs, the final state and the recorded state variables reach the
    input, every parameter and the initial state, as stepping's autograd gives them;
    the forward kernel and the reverse one run (counted)."""
    calls = _count_kernels(monkeypatch)
    module = make(kind, rng).to(dtype=dtype)
    parameters = [getattr(module, name).requires_grad_(True) for name in module.params]
    x = torch.from_numpy(rng.uniform(-1, 8, (30, 3, 6))).to(dtype=dtype).requires_grad_(True)
    start = module.initial_state(x[0])
    start = type(start)(*(s.detach() + 0.1 for s in start))
    start = type(start)(*(s.requires_grad_(True) for s in start))
    weights = torch.from_numpy(rng.normal(size=(30, 3, 6))).to(dtype=dtype)

    def loss(out, state, traces):
        return (
            (out * weights).sum() + sum((s * 0.3).sum() for s in state) + sum(t.sum() * 0.1 for t in traces)
        )

    out, state, traces = C.scan(module, x, start, True)
    got = torch.autograd.grad(loss(out, state, traces.values()), [x, *parameters, *start])
    expected_out, final, history = stepped(module, x, start)
    history_traces = [torch.stack([getattr(h, f) for h in history]) for f in final._fields]
    want = torch.autograd.grad(loss(expected_out, final, history_traces), [x, *parameters, *start])
    assert torch.equal(out, expected_out)
    for name, g, w in zip(["x", *module.params, *final._fields], got, want):
        assert torch.allclose(g, w, rtol=tolerance, atol=tolerance * w.abs().max().item()), name
    assert calls == ["scan", "scan backward"]
    if kind.endswith("IF"):
        assert 0 < out.sum() < out.numel()


def test_other_dtypes_and_delays_run_as_eager(rng, monkeypatch):
    calls = _count_kernels(monkeypatch)
    half = make("LIF", rng).to(torch.bfloat16)
    x = torch.from_numpy(rng.uniform(-1, 8, (10, 2, 6))).to(torch.bfloat16)
    with torch.no_grad():
        low, _, _ = C.scan(half, x, None, False)
        assert torch.equal(low, stepped(half, x, None)[0])
        delay = nirbridge.neurons.Delay(delay=torch.tensor(2.0), dt=1.0)
        delayed, _, _ = C.scan(delay, x.float(), None, False)
    assert torch.equal(delayed[2:], x[:-2].float()) and not calls


def _count_kernels(monkeypatch, prefix: str = "") -> list[str]:
    """The names of the compiled kernels (those starting with ``prefix``) called from
    now on in this test."""
    calls: list[str] = []
    real = K.kernel

    def counting(name):
        if name.startswith(prefix):
            calls.append(name)
        return real(name)

    monkeypatch.setattr(K, "kernel", counting)
    return calls


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
        eager = nirbridge.run(gm, x, record="all", backend="eager")
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
        eager = nirbridge.run(gm, xs, record="all", backend="eager")
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key


def test_no_kernel_contracts_a_multiply_add(rng, monkeypatch):
    """numba without fast-math emits no fused multiply-add; a later numba or LLVM that
    did would change results in the last bit, so the compiled code of every kernel is
    looked at (fresh compiles with the back-end's options, as numba does not inspect
    cached code), after a forward and a reverse scan and loop in both dtypes."""
    import numba

    from nirbridge.engine import cpu_kernels as K

    fresh = {name: numba.njit(**{**K.OPTIONS, "cache": False})(source) for name, source in K._SOURCES.items()}
    monkeypatch.setattr(K, "_COMPILED", dict(fresh))
    monkeypatch.setattr(K, "_linear_rows", fresh["linear"])
    monkeypatch.setattr(C, "_MODES", {})
    for dtype in (torch.float32, torch.float64):
        module = make("CubaLIF", rng).to(dtype)
        x = torch.from_numpy(rng.uniform(-1, 8, (5, 2, 6))).to(dtype).requires_grad_(True)
        C.scan(module, x, None, True)[0].sum().backward()
        gm = nirbridge.nir_to_torch(loop_graph(rng, "CubaLIF"), dt=1e-4, dtype=dtype)
        for batch in (1, 3):
            x = torch.from_numpy(rng.uniform(0, 2, (4, batch, 3))).to(dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
                nirbridge.run(gm, x, backend="cpu").output.sum().backward()
    assert all(kernel.signatures for kernel in fresh.values()), [
        n for n, k in fresh.items() if not k.signatures
    ]
    for name, kernel in fresh.items():
        assembly = "".join(kernel.inspect_asm(signature) for signature in kernel.signatures).lower()
        assert "mulss" in assembly or "mulsd" in assembly or "fmul" in assembly, name  # the code is there
        assert "fmadd" not in assembly and "fmla" not in assembly and "fnmadd" not in assembly, name
        assert "fmsub" not in assembly and "fnmsub" not in assembly, name


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
        "print(nirbridge.engine.backend_for('auto', 'cpu'))\n"
        "print(nirbridge.run(LIF(tau=1e-3), torch.ones(2, 1, 3)).output.shape)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert "run(backend='cpu'): numba is not installed (pip install numba" in done.stdout, done.stderr
    assert done.stdout.splitlines()[-2:] == ["eager", "torch.Size([2, 1, 3])"], done.stdout


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_layer_that_must_be_stepped_runs_as_one_compiled_loop(dtype, monkeypatch):
    """At batch 1 the Braille network's input and output layers give other bits over all
    of a chunk's rows than one step at a time (a matrix-vector product), so they are
    stepped: here as one compiled loop of the same BLAS calls, equal to stepping to the
    bit; with gradients too, which agree with the eager back-end's."""
    from tests.test_engine_triton_loop import BRAILLE, _read, assert_gradients_agree

    calls = _count_kernels(monkeypatch, "linear steps")
    x = (torch.rand((40, 1, 12), generator=torch.Generator().manual_seed(5)) < 0.4).to(dtype) * 30
    gm = nirbridge.nir_to_torch(_read(BRAILLE[0]), dt=1e-4, dtype=dtype)
    with torch.no_grad():
        compiled = nirbridge.run(gm, x, chunk=16, record="all")
        stepped_out, _ = step_module(gm, {"input": x})
        eager = nirbridge.run(gm, x, chunk=16, record="all", backend="eager")
    assert calls and len(calls) % 3 == 0, calls  # each stepped layer once a chunk (three chunks)
    assert torch.equal(compiled.output, stepped_out) and compiled.output.sum() > 0
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key
    grads = []
    for backend in ("cpu", "eager"):
        gm = nirbridge.nir_to_torch(_read(BRAILLE[0]), dt=1e-4, dtype=dtype)
        out = nirbridge.run(gm, x, chunk=16, backend=backend).output
        (out * torch.linspace(-1, 1, out.numel(), dtype=dtype).view_as(out)).sum().backward()
        grads.append({n: p.grad for n, p in gm.named_parameters()})
    assert calls and len(calls) % 6 == 0, calls
    assert_gradients_agree(*grads, dtype)


def test_a_layer_with_a_hook_is_stepped_through_it(monkeypatch):
    """A forward hook sees every call stepping makes: the compiled loop is not used."""
    from tests.test_engine_triton_loop import BRAILLE, _read

    calls = _count_kernels(monkeypatch, "linear steps")
    gm = nirbridge.nir_to_torch(_read(BRAILLE[0]), dt=1e-4)
    seen = []
    for layer in (gm.fc1, gm.fc2):
        layer.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    x = (torch.rand((5, 1, 12), generator=torch.Generator().manual_seed(5)) < 0.4).float() * 30
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        nirbridge.run(gm, x)
    assert not calls and len(seen) > 2, (calls, seen)  # a stepped layer's hook sees each step


@pytest.fixture
def loop_calls(monkeypatch):
    """The compiled loop's calls in this test (one list entry each, ``"loop"`` or
    ``"loop backward"``)."""
    return _count_kernels(monkeypatch, "loop")


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
    gm = nirbridge.nir_to_torch(loop_graph(rng, kind, bias=bias), dt=1e-4, dtype=dtype)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (10, batch, 3))).to(dtype)
    with torch.no_grad():
        start = nirbridge.run(gm, x[:4], backend="eager").state
        compiled = nirbridge.run(gm, x, state=start, backend="cpu", chunk=3, record=["neuron.v", "w_rec"])
        eager = nirbridge.run(gm, x, state=start, chunk=3, record=["neuron.v", "w_rec"], backend="eager")
        stepped_out, state = step_module(gm, {"input": x}, start)
    assert torch.equal(compiled.output, stepped_out)
    for key, value in eager.records.items():
        assert torch.equal(compiled.records[key], value), key
    assert all(torch.equal(a, b) for a, b in zip(_leaves(compiled.state), _leaves(state)))
    assert 0 < compiled.records["neuron.v"].numel()
    mode = C.summation(gm.w_rec, batch, x)
    assert (len(loop_calls) == 4) == (mode is not None), (loop_calls, mode)  # a call per chunk, or none
    if K.BLAS_LIBRARY is not None:
        assert mode is not None, "with torch's own BLAS at hand, some way of summing should equal it"


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(
    ("dtype", "precision"), [(torch.float32, "exact"), (torch.float64, "exact"), (torch.float64, "fast")]
)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["IF", "LIF", "CubaLIF"])
def test_with_gradients_the_loop_runs_compiled_and_gradients_agree(
    kind, bias, dtype, precision, batch, rng, loop_calls
):
    """BPTT through the loop kernel and its reverse: over three chunks (the layer's last
    output and the state carried from one to the next), from a state that a first run
    left, every gradient (input, W, b, initial state, every trainable neuron
    parameter, log-space time constants included) agrees with eager autograd's; the
    forward values are equal."""
    from tests.test_engine_triton_loop import assert_gradients_agree, loop_gradients

    graph = loop_graph(rng, kind, bias=bias)
    x = torch.from_numpy(rng.uniform(0, 1.5, (9, batch, 3))).to(dtype)
    build = lambda: nirbridge.nir_to_torch(graph, dt=1e-4, dtype=dtype, trainable=True)  # noqa: E731
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)  # CubaLIF is slow to fire
        state = nirbridge.run(build(), x[:4], backend="eager").state
    got, spikes = loop_gradients(build(), x, state, "cpu", precision, chunk=4)
    assert loop_calls == ["loop"] * 3 + ["loop backward"] * 3, loop_calls
    expected, stepped = loop_gradients(build(), x, state, "eager", precision, chunk=4)
    assert torch.equal(spikes, stepped) and 0 < spikes.sum() < spikes.numel()
    assert any("w_rec" in name for name in expected) and any(name.startswith("state") for name in expected)
    assert_gradients_agree(got, expected, dtype)


@pytest.mark.parametrize("batch", [1, 4])
def test_braille_training_gradients_agree_with_eager(batch, loop_calls):
    """``loss.backward()`` through the Braille SRNN with every neuron parameter trainable:
    the loop and the output population run compiled (two chunks), forward and
    reverse, and every gradient agrees with the eager back-end's."""
    from tests.test_engine_triton_loop import BRAILLE, _read, assert_gradients_agree

    x = (torch.rand((12, batch, 12), generator=torch.Generator().manual_seed(3)) < 0.5).float() * 30
    grads, outputs = [], []
    for backend in ("cpu", "eager"):
        gm = nirbridge.nir_to_torch(_read(BRAILLE[0]), dt=1e-4, trainable=True)
        out = nirbridge.run(gm, x, backend=backend, chunk=8).output
        loss = torch.nn.functional.cross_entropy(out.sum(0), torch.arange(out.shape[1]) % out.shape[-1])
        loss.backward()
        grads.append({n: p.grad for n, p in gm.named_parameters()})
        outputs.append(out.detach())
    assert loop_calls == ["loop"] * 2 + ["loop backward"] * 2, loop_calls
    assert torch.equal(*outputs)
    loop = [n for n in grads[1] if n.startswith("lif1.")]  # the loop's layer and neurons
    assert any(n.endswith("weight") for n in loop) and any(n.endswith("tau_mem_log") for n in loop)
    assert_gradients_agree(*grads, torch.float32)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 2, 32])
@pytest.mark.parametrize(("n", "bias"), [(7, True), (38, True), (38, False), (128, True)])
def test_the_probe_tells_the_truth(n, bias, batch, dtype, threads):
    """Where the probe picks a way of summing, the kernel's product equals the CPU's own
    ``linear`` on other weights and spikes than the probe's, one call per step as
    stepping calls it (each way, where both do); at batch 1 through torch's BLAS (this
    machine's x86 MKL), where summing in order does not equal it."""
    layer = torch.nn.Linear(n, n, bias=bias).to(dtype)
    generator = torch.Generator().manual_seed(11)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        like = torch.zeros((), dtype=dtype)
        mode = C.summation(layer, batch, like)
        assert mode is not None or K.BLAS_LIBRARY is None
        if mode is None:
            return
        weight = torch.randn(n, n, generator=generator, dtype=dtype) * 3
        layer.weight.data.copy_(weight)
        density = torch.linspace(0.01, 0.9, 20).view(20, 1, 1)  # EITHER picks by density
        z = (torch.rand(20, batch, n, generator=generator) < density).to(dtype)
        with torch.no_grad():
            expected = torch.stack([layer(pattern) for pattern in z])
        for way in [K.IN_ORDER, K.BLAS, K.EITHER] if mode == K.EITHER else [mode]:
            got = torch.empty(20, batch, n, dtype=dtype)
            for pattern, y in zip(z, got):
                C._product(pattern, layer.weight.detach(), layer.bias.detach() if bias else None, y, way)
            assert torch.equal(got, expected), way
    finally:
        torch.set_num_threads(previous)
    if batch == 1 and K.BLAS_LIBRARY is not None and n == 38:
        assert mode == K.BLAS


def test_non_finite_weights_sum_every_product(rng, loop_calls):
    """With an infinite weight the kernel multiplies every spike, 0 included (``0 · inf``
    is NaN), as the CPU's product does: equal to stepping, NaNs where stepping has them."""
    gm = nirbridge.nir_to_torch(loop_graph(rng, "LIF"), dt=1e-4)
    with torch.no_grad():
        gm.w_rec.weight[2, 5] = float("inf")
    x = torch.from_numpy(rng.uniform(0, 1.5, (6, 4, 3))).float()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # non-finite values, silent neurons
        compiled = nirbridge.run(gm, x, backend="cpu", record=["w_rec"])
        stepped_out, _ = step_module(gm, {"input": x})
        eager = nirbridge.run(gm, x, record=["w_rec"], backend="eager").records["w_rec"]
    assert torch.equal(compiled.output, stepped_out)
    assert torch.equal(compiled.records["w_rec"].isnan(), eager.isnan()) and eager.isnan().any()
    assert loop_calls == ["loop"]


def test_fast_precision_sums_in_order_without_a_probe(rng, monkeypatch, loop_calls):
    monkeypatch.setattr(C, "_MODES", {})
    gm = nirbridge.nir_to_torch(loop_graph(rng, "LIF"), dt=1e-4)
    x = torch.from_numpy(rng.uniform(0, 1.5, (6, 1, 3))).float()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        nirbridge.run(gm, x, backend="cpu", precision="fast")
    assert C._MODES == {} and loop_calls == ["loop"]


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
def test_a_trainable_loop_runs_compiled_without_gradients(rng, loop_calls):
    """Neuron parameters that are nn.Parameters (trainable=True) do not keep the loop
    out of the compiled kernel when no gradient is asked for."""
    gm = nirbridge.nir_to_torch(loop_graph(rng, "CubaLIF"), dt=1e-4, trainable=True)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (6, 4, 3))).float()
    with torch.no_grad():
        compiled = nirbridge.run(gm, x, backend="cpu", chunk=3)
        eager = nirbridge.run(gm, x, chunk=3, backend="eager")
    assert torch.equal(compiled.output, eager.output)
    assert len(loop_calls) == 2


def test_a_kernel_numba_cannot_build_falls_back_to_eager_once(monkeypatch, rng):
    """A numba that cannot build a kernel (here: told to fail) leaves the run exact and
    eager from then on, said once with a CompileWarning."""
    import numba

    def broken(name):
        def call(*args):
            raise numba.core.errors.LoweringError("no code for this machine")

        return call

    monkeypatch.setattr(K, "kernel", broken)
    monkeypatch.setattr(C, "_failed", [])
    gm = nirbridge.nir_to_torch(loop_graph(rng, "CubaLIF"), dt=1e-4)
    x = torch.from_numpy(rng.uniform(0, 1.5, (6, 1, 3))).float()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = nirbridge.run(gm, x, backend="cpu")
        second = nirbridge.run(gm, x, backend="cpu")
        eager = nirbridge.run(gm, x, backend="eager")
    said = [w for w in caught if issubclass(w.category, nirbridge.CompileWarning)]
    assert len(said) == 1 and "numba could not build" in str(said[0].message), [str(w.message) for w in said]
    assert torch.equal(first.output, eager.output) and torch.equal(second.output, eager.output)


def test_a_probe_or_reverse_kernel_numba_cannot_build_is_said_clearly(monkeypatch, rng):
    """A probe's kernel that cannot be built sends the loop to stepping (and the run
    eager, said once); a reverse-time kernel that cannot be built, inside backward,
    raises BackendUnavailableError saying what to do."""
    import numba

    real = K.kernel

    def broken(names):
        def kernel(name):
            if name not in names:
                return real(name)

            def call(*args):
                raise numba.core.errors.LoweringError("no code for this machine")

            return call

        return kernel

    gm = nirbridge.nir_to_torch(loop_graph(rng, "LIF"), dt=1e-4)
    x = torch.from_numpy(rng.uniform(0, 1.5, (6, 3, 3))).float()
    monkeypatch.setattr(C, "_MODES", {})
    monkeypatch.setattr(C, "_failed", [])
    monkeypatch.setattr(K, "kernel", broken({"linear"}))
    with torch.no_grad(), pytest.warns(nirbridge.CompileWarning, match="numba could not build"):
        got = nirbridge.run(gm, x, backend="cpu").output
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        assert torch.equal(got, nirbridge.run(gm, x, backend="eager").output)
    monkeypatch.setattr(C, "_failed", [])
    monkeypatch.setattr(K, "kernel", broken({"loop backward", "scan backward"}))
    out = nirbridge.run(gm, x, backend="cpu").output
    with (
        pytest.warns(nirbridge.CompileWarning),
        pytest.raises(nirbridge.BackendUnavailableError, match="backward"),
    ):
        out.sum().backward()
    assert C._failed


def test_without_torchs_blas_batch_one_is_stepped_exactly():
    """Where torch's library exports no sgemm_/dgemm_ (hidden here), the kernels still
    link (a stand-in under nirbridge's own names), the BLAS way is never chosen, and a
    batch of one equals the eager back-end."""
    code = (
        "import ctypes\n"
        "real = ctypes.CDLL\n"
        "class Hidden:\n"
        "    def __init__(self, path, *a, **k):\n"
        "        self.lib, self.torch = real(path, *a, **k), 'torch_cpu' in str(path)\n"
        "    def __getattr__(self, name):\n"
        "        if self.torch and name in ('sgemm_', 'dgemm_'):\n"
        "            raise AttributeError(name)\n"
        "        return getattr(self.lib, name)\n"
        "ctypes.CDLL = Hidden\n"
        "import torch, nirbridge\n"
        "from nirbridge.engine import cpu_kernels as K\n"
        "gm = nirbridge.nir_to_torch(nirbridge.read(sys.argv[1]), dt=1e-4)\n"
        "x = (torch.rand(40, 1, 12, generator=torch.Generator().manual_seed(0)) < 0.4).float() * 30\n"
        "with torch.no_grad():\n"
        "    same = torch.equal(nirbridge.run(gm, x).output, nirbridge.run(gm, x, backend='eager').output)\n"
        "print(K.BLAS_LIBRARY, K.SETUP_ERROR, same)\n"
    )
    from tests.test_engine_triton_loop import BRAILLE

    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code, str(EXAMPLES / BRAILLE[0])],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout.strip().splitlines()[-1:] == ["None None True"], done.stdout + done.stderr


def test_a_strided_input_to_a_stepped_layer_is_stepped_by_torch(rng, monkeypatch):
    """Stepping calls a layer on each step's view of a strided input, which BLAS sums
    another way than a contiguous copy: such a layer is not run by the compiled loop."""
    calls = _count_kernels(monkeypatch, "linear steps")
    layer = torch.nn.Linear(40, 3).double()
    x = torch.from_numpy(rng.normal(size=(2, 40, 9))).permute(2, 0, 1)  # [T, B, 40], strided
    assert C.layer_steps(layer, x) is None and not calls
    with torch.no_grad():
        got = C.layer_steps(layer, x.contiguous())
        assert torch.equal(got, torch.stack([layer(x_t) for x_t in x.contiguous()]))
    assert calls == ["linear steps"]

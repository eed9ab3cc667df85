"""nirbridge.engine.triton_loop: small recurrent loops as one Triton kernel per chunk.

Without a GPU the kernel runs on CPU tensors through Triton's interpreter (conftest
turns it on); where torch sees a GPU it runs there too.
"""

from __future__ import annotations

import warnings

import nir
import numpy as np
import pytest
import torch

import nirbridge
from nirbridge.engine import loops, selfcheck
from nirbridge.engine import triton as T
from nirbridge.engine import triton_loop as L
from tests.conftest import EXAMPLES
from tests.test_interpret import DT, neuron_params
from tests.test_run import reference_run, step_module

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
BRAILLE = [
    "NIRTorch__tests__braille.nir",
    "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir",
    "NIR__paper__03_rnn__braille_noDelay_noBias_subtract.nir",
    "spyx__docs__examples__nir__rsnn__braille_noDelay_bias_zero_subgraph.nir",
]


@pytest.fixture
def launches(monkeypatch):
    """The loop kernel's launches in this test (one list entry each), the run's own:
    the kernels' self-check at first use (tests/test_engine_selfcheck.py) is left out."""
    seen: list[int] = []
    real = L._launch

    def counting(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(L, "_launch", counting)
    with selfcheck.skipping():
        yield seen


def loop_graph(rng, kind: str, n: int = 16, bias: bool = True, extra_input: bool = False) -> nir.NIRGraph:
    """``input → fc → neuron ⇄ w_rec → output`` (and a second input into the neuron)."""
    nodes = {
        "input": nir.Input(np.array([3])),
        "fc": nir.Affine(rng.normal(size=(n, 3)) * 3, rng.normal(size=n)),
        "neuron": neuron_params(rng, n, kind),
        "w_rec": (
            nir.Affine(rng.normal(size=(n, n)), rng.normal(size=n))
            if bias
            else nir.Linear(rng.normal(size=(n, n)))
        ),
        "output": nir.Output(np.array([n])),
    }
    edges = [
        ("input", "fc"),
        ("fc", "neuron"),
        ("neuron", "w_rec"),
        ("w_rec", "neuron"),
        ("neuron", "output"),
    ]
    if extra_input:
        nodes["second"] = nir.Input(np.array([n]))
        edges.append(("second", "neuron"))
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


def _read(name: str) -> nir.NIRGraph:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        return nirbridge.read(EXAMPLES / name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", BRAILLE)
def test_braille_loops_run_in_the_kernel_and_equal_stepping(name, device, launches):
    """The Braille SRNN's ``lif ⇄ w_rec`` loop (also inside a subgraph), float32, over
    chunks that carry the loop's previous output and state from one to the next."""
    gm = nirbridge.nir_to_torch(_read(name), dt=1e-4).to(device)
    x = ((torch.rand((23, 4, 12), generator=torch.Generator().manual_seed(3)) < 0.5).float() * 30).to(device)
    with torch.no_grad():
        kernel = nirbridge.run(gm, x, backend="triton", record="all", chunk=8)
        stepped, state = step_module(gm, {"input": x})
        eager = nirbridge.run(gm, x, record="all", chunk=8)
    # the loop runs in the kernel where the device's products sum in the kernel's order
    # (this CPU's in-order sums: always; cuBLAS on an H200: not, so it is stepped there)
    layer = gm.get_submodule("lif1.lin" if "subgraph" in name else "lif1.w_rec")
    assert len(launches) == (3 if L.sums_in_order(layer, 4, x) else 0)
    if device == "cpu":
        assert len(launches) == 3
    assert torch.equal(kernel.output, stepped)
    assert set(kernel.records) == set(eager.records)
    for key, value in eager.records.items():
        assert torch.equal(kernel.records[key], value), key
    spikes = kernel.records["lif1.lif1" if "subgraph" in name else "lif1.lif"]
    assert 0 < spikes.sum() < spikes.numel(), "the loop should spike, and not always"
    leaves = [t for t in torch.utils._pytree.tree_leaves(kernel.state) if isinstance(t, torch.Tensor)]
    expected = [t for t in torch.utils._pytree.tree_leaves(state) if isinstance(t, torch.Tensor)]
    assert len(leaves) == len(expected) and all(torch.equal(a, b) for a, b in zip(leaves, expected))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["IF", "LIF", "CubaLIF"])
def test_the_kernel_follows_the_numpy_reference_in_float64(kind, bias, rng, launches):
    """Under ``precision="fast"`` (no probe) the kernel runs in float64 too; spikes and
    membranes follow the independent numpy reference of the equations, with a second
    input summed into the neuron before the loop's feedback."""
    graph = loop_graph(rng, kind, bias=bias, extra_input=True)
    arrays = {"input": rng.uniform(-0.5, 1.5, (30, 4, 3)), "second": rng.uniform(-0.5, 1.0, (30, 4, 16))}
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    with torch.no_grad():
        result = nirbridge.run(
            gm,
            {k: torch.from_numpy(a) for k, a in arrays.items()},
            backend="triton",
            precision="fast",
            record="all",
        )
    assert launches
    expected, values, states = reference_run(graph, arrays, DT)
    spikes = result.output.numpy()
    np.testing.assert_array_equal(spikes, np.stack([e["output"] for e in expected]))
    assert 0 < spikes.sum() < spikes.size
    np.testing.assert_allclose(
        result.records["w_rec"].numpy(), np.stack([v["w_rec"] for v in values]), rtol=1e-12, atol=1e-12
    )
    membrane = np.stack([s["neuron"][1] if kind == "CubaLIF" else s["neuron"] for s in states])
    np.testing.assert_allclose(result.records["neuron.v"].numpy(), membrane, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["IF", "LIF", "CubaLIF"])
def test_every_spiking_family_equals_stepping_in_float32(kind, rng, launches):
    graph = loop_graph(rng, kind)
    gm = nirbridge.nir_to_torch(graph, dt=DT)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (17, 5, 3))).float()
    with torch.no_grad():
        kernel = nirbridge.run(gm, x, backend="triton", record=["neuron", "neuron.v", "w_rec"], chunk=6)
        stepped, state = step_module(gm, {"input": x})
        eager = nirbridge.run(gm, x, record=["neuron", "neuron.v", "w_rec"], chunk=6)
    assert len(launches) == 3
    assert torch.equal(kernel.output, stepped) and 0 < stepped.sum() < stepped.numel()
    for key in ("neuron", "neuron.v", "w_rec"):
        assert torch.equal(kernel.records[key], eager.records[key]), key
    leaves = torch.utils._pytree.tree_leaves
    assert all(torch.equal(a, b) for a, b in zip(leaves(kernel.state), leaves(state), strict=True))


def test_where_the_device_sums_otherwise_the_loop_is_stepped(rng, launches):
    """A batch of one (matrix-vector products), and float64 on this CPU: the probe says
    the device's sums differ from the kernel's, so the loop steps, with equal results."""
    graph = loop_graph(rng, "LIF")
    for dtype, batch in ((torch.float32, 1), (torch.float64, 4)):
        gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=dtype)
        x = torch.from_numpy(rng.uniform(-0.5, 1.5, (12, batch, 3))).to(dtype)
        layer = gm.get_submodule("w_rec")
        agree = L.sums_in_order(layer, batch, x)
        with torch.no_grad():
            kernel = nirbridge.run(gm, x, backend="triton")
        assert torch.equal(kernel.output, step_module(gm, {"input": x})[0])
        assert bool(launches) == agree
        launches.clear()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 4, 32])
@pytest.mark.parametrize(("n", "bias"), [(7, True), (38, True), (38, False), (128, True)])
def test_the_probe_tells_the_truth(n, bias, batch, dtype, device):
    """Whatever the probe says about a shape holds on fresh weights and spikes: where it
    says the device sums in order, every draw agrees; where it says not, some draw
    differs."""
    layer = torch.nn.Linear(n, n, bias=bias).to(dtype=dtype, device=device)
    like = torch.zeros((), dtype=dtype, device=device)
    verdict = L.sums_in_order(layer, batch, like)
    generator = torch.Generator().manual_seed(n + batch)
    agreements = []
    with torch.no_grad():
        for _ in range(100):
            scales = torch.exp2(torch.randint(-6, 7, (n, n), generator=generator)).to(dtype)
            w = (torch.randn(n, n, dtype=dtype, generator=generator) * scales).to(device)
            b = torch.randn(n, dtype=dtype, generator=generator).to(device) if bias else None
            z = (torch.rand(batch, n, generator=generator) < torch.rand(1, generator=generator)).to(like)
            agreements.append(torch.equal(torch.nn.functional.linear(z, w, b), loops.in_order(z, w, b)))
    assert all(agreements) if verdict else not all(agreements)


def test_fast_precision_skips_the_probe(rng, monkeypatch, launches):
    asked = []
    monkeypatch.setattr(loops, "sums_in_order", lambda *args: asked.append(args) or False)
    gm = nirbridge.nir_to_torch(loop_graph(rng, "LIF"), dt=DT)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (6, 4, 3))).float()
    with torch.no_grad():
        nirbridge.run(gm, x, backend="triton")
        assert asked and not launches
        asked.clear()
        nirbridge.run(gm, x, backend="triton", precision="fast")
        assert not asked and launches


TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-9}


def assert_gradients_agree(got: dict, expected: dict, dtype: torch.dtype) -> None:
    """Every gradient within the dtype's relative tolerance, on the scale of its largest
    entry (sums over steps and batch rows add in another order than eager's)."""
    assert set(got) == set(expected)
    rtol = TOLERANCE[dtype]
    for name, grad in expected.items():
        assert grad is not None and got[name] is not None, name
        assert grad.abs().max() > 0, f"{name}: no gradient reaches it"
        torch.testing.assert_close(got[name], grad, rtol=rtol, atol=rtol * grad.abs().max(), msg=name)


def loop_gradients(gm, x, state, backend, precision, chunk):
    """Gradients of a loss on the spikes, the recorded membrane and layer outputs and the
    last state: of every parameter, the input (``"x"``) and the state's leaves."""
    x = x.clone().requires_grad_()
    leaves, spec = torch.utils._pytree.tree_flatten(state)
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    state = torch.utils._pytree.tree_unflatten(leaves, spec)
    result = nirbridge.run(
        gm, x, state=state, backend=backend, precision=precision, chunk=chunk, record=["neuron.v", "w_rec"]
    )
    out = result.output
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    loss = (out * weights).sum() + 0.3 * result.records["neuron.v"].sum()
    loss = loss + 0.01 * (result.records["w_rec"] ** 2).sum()
    loss = loss + sum(t.sum() for t in torch.utils._pytree.tree_leaves(result.state))
    loss.backward()
    grads = {name: p.grad for name, p in gm.named_parameters()}
    grads.update({f"state{k}": t.grad for k, t in enumerate(leaves)})
    return {"x": x.grad, **grads}, out.detach()


@pytest.mark.parametrize(("dtype", "precision"), [(torch.float32, "exact"), (torch.float64, "fast")])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["IF", "LIF", "CubaLIF"])
def test_with_gradients_the_loop_runs_in_the_kernel_and_gradients_agree(
    kind, bias, dtype, precision, rng, launches
):
    """BPTT through the loop kernel and its reverse: over three chunks (the layer's last
    output and the state carried from one to the next), from a state that a first run
    left (so the first chunk starts from the layer's previous output too), every
    gradient (input, W, b, initial state, every trainable neuron parameter, log-space
    time constants included) agrees with eager autograd's; the forward values are
    equal. float64 runs under ``precision="fast"``: this CPU's float64 products do not
    sum in the kernel's order."""
    graph = loop_graph(rng, kind, bias=bias)
    x = torch.from_numpy(rng.uniform(0, 1.5, (9, 3, 3))).to(dtype)
    build = lambda: nirbridge.nir_to_torch(graph, dt=DT, dtype=dtype, trainable=True)  # noqa: E731
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)  # CubaLIF is slow to fire
        state = nirbridge.run(build(), x[:4], backend="eager").state
    got, spikes = loop_gradients(build(), x, state, "triton", precision, chunk=4)
    assert len(launches) == 3, "each chunk's loop should run in the kernel"
    expected, stepped = loop_gradients(build(), x, state, "eager", precision, chunk=4)
    assert torch.equal(spikes, stepped) and 0 < spikes.sum() < spikes.numel()
    assert any("w_rec" in name for name in expected) and any(name.startswith("state") for name in expected)
    assert_gradients_agree(got, expected, dtype)


@pytest.mark.parametrize("name", BRAILLE)
def test_braille_training_gradients_agree_with_eager(name, launches):
    """``loss.backward()`` through the Braille SRNN with every neuron parameter trainable:
    the loop runs in the kernel (two chunks) and every gradient agrees with the eager
    back-end's."""
    x = (torch.rand((12, 4, 12), generator=torch.Generator().manual_seed(3)) < 0.5).float() * 30
    grads, outputs = [], []
    for backend in ("triton", "eager"):
        gm = nirbridge.nir_to_torch(_read(name), dt=1e-4, trainable=True)
        out = nirbridge.run(gm, x, backend=backend, chunk=8).output
        loss = torch.nn.functional.cross_entropy(out.sum(0), torch.arange(out.shape[1]) % out.shape[-1])
        loss.backward()
        grads.append({n: p.grad for n, p in gm.named_parameters()})
        outputs.append(out.detach())
        if backend == "triton":
            assert len(launches) == 2
    assert torch.equal(*outputs)
    loop = [n for n in grads[1] if n.startswith("lif1.")]  # the loop's layer and neurons
    assert any(n.endswith("weight") for n in loop) and any(n.endswith("tau_mem_log") for n in loop)
    assert_gradients_agree(*grads, torch.float32)


def test_records_of_a_fused_loop_name_unknown_variables(rng, launches):
    gm = nirbridge.nir_to_torch(loop_graph(rng, "LIF"), dt=DT)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (6, 4, 3))).float()
    with torch.no_grad(), pytest.raises(nirbridge.RecordError, match="no state variable 'i'"):
        nirbridge.run(gm, x, backend="triton", record=["neuron.i"])


def test_a_loop_kernel_triton_cannot_build_falls_back_to_stepping(monkeypatch, rng):
    from triton.runtime.errors import OutOfResources

    class Refusing:
        def __getitem__(self, grid):
            def launch(*args, **options):
                raise OutOfResources(1 << 20, 1 << 16, "shared memory")

            return launch

    monkeypatch.setattr(L, "_loop_scan", Refusing())
    monkeypatch.setattr(T, "_failed", [])
    monkeypatch.setattr(L, "failed", T._failed)
    gm = nirbridge.nir_to_torch(loop_graph(rng, "LIF"), dt=DT)
    x = torch.from_numpy(rng.uniform(-0.5, 1.5, (6, 4, 3))).float()
    expected = step_module(gm, {"input": x})[0]
    with torch.no_grad():
        with pytest.warns(nirbridge.CompileWarning, match="could not build its kernel.*OutOfResources"):
            out = nirbridge.run(gm, x, backend="triton", selfcheck=False).output
        assert torch.equal(out, expected)
        selfcheck.forget()  # the self-check at first use meets the same failure first
        try:
            with pytest.warns(
                nirbridge.CompileWarning, match="loop kernel .* could not run its case .OutOfRes"
            ):
                out = nirbridge.run(gm, x, backend="triton").output
        finally:
            selfcheck.forget()  # no failed verdict for later tests
    assert torch.equal(out, expected)

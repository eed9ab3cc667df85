"""nirtorch 2.6's own tests, ported: the cases of its suite (tag v2.06,
tests/test_nir_interpreter.py and tests/test_torch_tracer.py) that nirbridge once
failed, run through nirbridge's public API with one sample, as nirtorch calls its
modules, and with a batch.

Expected values come from numpy (or from the user's own module, applied directly),
never from nirbridge. Where nirbridge differs on purpose (docs/migration.md, "Deliberate
differences"), the port asserts nirbridge's behaviour and says which difference it is.
``benchmarks/compat_nirtorch.py`` runs nirtorch's suite itself with nirbridge substituted.
"""

from __future__ import annotations

import warnings

import nir
import numpy as np
import pytest
import torch

import nirbridge
from tests.conftest import EXAMPLES

LIF_NORSE = EXAMPLES / "NIRTorch__tests__lif_norse.nir"
BRAILLE = EXAMPLES / "NIRTorch__tests__braille.nir"


class LeakyNode(torch.nn.Module):
    """nirtorch's test module for LI: ``v + tau * (r x - v_leak)``, float64 attributes
    that ``.to(dtype)`` leaves alone, so it computes and returns float64."""

    def __init__(self, tau: torch.Tensor, r: torch.Tensor, v_leak: torch.Tensor) -> None:
        super().__init__()
        self.tau, self.r, self.v_leak = tau, r, v_leak

    def forward(self, x, state=None):
        if state is None:
            state = self.v_leak
        new_value = state + self.tau * (self.r * x - self.v_leak)
        return new_value, new_value


def map_li(li: nir.LI) -> torch.nn.Module:
    return LeakyNode(torch.from_numpy(li.tau), torch.from_numpy(li.r), torch.from_numpy(li.v_leak))


def map_linear(node: nir.Linear) -> torch.nn.Module:
    lin = torch.nn.Linear(*node.weight.shape[-2:], bias=False)
    lin.weight.data = torch.tensor(node.weight).float()
    return lin


def sample(rng, shape, batch):
    """One sample ``shape`` (nirtorch's calls), or a batch of ``batch`` of them."""
    return torch.from_numpy(rng.random(shape if batch is None else (batch, *shape)).astype(np.float32))


BATCHES = pytest.mark.parametrize("batch", [None, 4], ids=["one sample", "batch"])


@BATCHES
def test_a_single_stateful_module(rng, batch):
    """test_map_leaky_stateful_graph_single_module; the state is nirbridge's dict."""
    li = nir.LI(rng.random(1), rng.random(1), rng.random(1))
    module = nirbridge.nir_to_torch(nir.NIRGraph.from_list(li), {nir.LI: map_li})
    reference = map_li(li)
    data = sample(rng, (1,), batch)
    output = module(data)
    assert isinstance(output, tuple)
    expected = reference(data)
    assert output[0].shape == data.shape and torch.allclose(output[0], expected[0])
    state = output[1]["nodes"]["li"]  # nirtorch: output[1]["li"] (the state layout)
    assert torch.allclose(state.reshape(expected[1].shape), expected[1])
    # the module's own float64 output, fed back with its state (once refused as float64)
    output = module(output[0], output[1])
    expected = reference(*expected)
    assert output[0].dtype == torch.float64 and torch.allclose(output[0], expected[0])


@BATCHES
def test_two_chained_stateful_modules(rng, batch):
    """test_map_leaky_stateful_graph_sequential_modules"""
    li = nir.LI(rng.random(1), rng.random(1), rng.random(1))
    module = nirbridge.nir_to_torch(nir.NIRGraph.from_list(li, li), {nir.LI: map_li})
    data = sample(rng, (1,), batch)
    tau, r, v_leak = li.tau, li.r, li.v_leak
    first = v_leak + tau * (r * data.numpy() - v_leak)
    second = v_leak + tau * (r * first - v_leak)
    output = module(data)
    assert isinstance(output, tuple)
    np.testing.assert_allclose(output[0].numpy(), second, rtol=1e-6)


@BATCHES
def test_the_default_linear(rng, batch):
    """test_map_linear_graph_default, test_from_nir_fx"""
    w = rng.random((2, 3)).astype(np.float32)
    graph = nir.NIRGraph.from_list(nir.Linear(w))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = nirbridge.nir_to_torch(graph, {})
    assert torch.allclose(module.linear.weight, torch.from_numpy(w))
    data = sample(rng, (3,), batch)
    out = module(data)
    assert isinstance(out, tuple)
    assert out[0].shape == ((2,) if batch is None else (batch, 2))
    np.testing.assert_allclose(out[0].detach().numpy(), data.numpy() @ w.T, rtol=1e-6)


@BATCHES
def test_a_sequential_graph(rng, batch):
    """test_map_sequential_graph"""
    weights = [rng.random((2, 2)) for _ in range(4)]
    module = nirbridge.nir_to_torch(nir.NIRGraph.from_list(*map(nir.Linear, weights)), {})
    data = sample(rng, (2,), batch)
    expected = data.numpy().astype(np.float64)
    for w in weights:
        expected = expected @ w.T
    assert len(list(module.children())) == 4
    np.testing.assert_allclose(module(data)[0].detach().numpy(), expected, rtol=1e-6)


@BATCHES
@pytest.mark.parametrize("depth", [1, 2])
def test_nested_graphs(rng, batch, depth):
    """test_map_subgraph_default, test_map_nested_subgraph_default"""
    w = rng.random((2, 3)).astype(np.float32)
    graph: nir.NIRNode = nir.Linear(w)
    for _ in range(depth + 1):
        graph = nir.NIRGraph.from_list(graph)
    module = nirbridge.nir_to_torch(graph, {})
    inner = module.nirgraph if depth == 1 else module.nirgraph.nirgraph
    assert torch.allclose(inner.linear.weight, torch.from_numpy(w))
    data = sample(rng, (3,), batch)
    out = module(data)
    assert out[0].shape == ((2,) if batch is None else (batch, 2))
    np.testing.assert_allclose(out[0].detach().numpy(), data.numpy() @ w.T, rtol=1e-6)


@BATCHES
def test_a_nested_graph_with_state(rng, batch):
    """test_map_subgraph_with_state"""
    li = nir.LI(rng.random(1), rng.random(1), rng.random(1))
    graph = nir.NIRGraph.from_list(nir.NIRGraph.from_list(li))
    module = nirbridge.nir_to_torch(graph, {nir.LI: map_li})
    data = torch.ones(1) if batch is None else torch.ones(batch, 1)
    out = module(data)
    assert out[0].shape == data.shape
    np.testing.assert_allclose(out[0].numpy(), li.v_leak + li.tau * (li.r - li.v_leak) + 0 * data.numpy())


@BATCHES
def test_nodes_out_of_order(rng, batch):
    """test_map_out_of_order"""
    w = rng.random((3, 2)).astype(np.float32)
    nodes = {"linear": nir.Linear(w), "input": nir.Input(np.array([2])), "output": nir.Output(np.array([3]))}
    graph = nir.NIRGraph(nodes, [("input", "linear"), ("linear", "output")])
    module = nirbridge.nir_to_torch(graph, {nir.Linear: map_linear})
    data = sample(rng, (2,), batch)
    np.testing.assert_allclose(module(data)[0].detach().numpy(), data.numpy() @ w.T, rtol=1e-6)


def linears(w: np.ndarray, names: list[str], edges: list[tuple[str, str]]) -> nir.NIRGraph:
    nodes = {
        "input": nir.Input(np.array([2])),
        **{n: nir.Linear(w) for n in names},
        "output": nir.Output(np.array([2])),
    }
    return nir.NIRGraph(nodes, edges)


@BATCHES
def test_a_self_loop(rng, batch):
    """test_map_recursive_graph: the loop is delayed, its previous output kept in the
    state (nirbridge: state["delayed"]["linear"]; nirtorch: state["linear_prev_output"])."""
    w = rng.random((2, 2)).astype(np.float32)
    graph = linears(w, ["linear"], [("linear", "linear"), ("input", "linear"), ("linear", "output")])
    module = nirbridge.nir_to_torch(graph, {nir.Linear: map_linear})
    data = sample(rng, (2,), batch)
    x = data.numpy().astype(np.float64)
    actual, state = module(data)
    np.testing.assert_allclose(actual.detach().numpy(), x @ w.T, rtol=1e-6)
    assert "linear" in state["delayed"]
    actual2, _ = module(data, state)
    np.testing.assert_allclose(actual2.detach().numpy(), (x @ w.T + x) @ w.T, rtol=1e-6)


@BATCHES
def test_a_loop_of_two_nodes(rng, batch):
    """test_map_recursive_graph_two_nodes"""
    w = rng.random((2, 2)).astype(np.float32)
    edges = [("linear1", "linear2"), ("linear2", "linear1"), ("input", "linear1"), ("linear2", "output")]
    module = nirbridge.nir_to_torch(linears(w, ["linear1", "linear2"], edges), {nir.Linear: map_linear})
    data = sample(rng, (2,), batch)
    x = data.numpy().astype(np.float64)
    expected = x @ w.T @ w.T
    actual, state = module(data)
    np.testing.assert_allclose(actual.detach().numpy(), expected, rtol=1e-6)
    held = state["delayed"]["linear2"]  # nirtorch: state["linear2_prev_output"]
    np.testing.assert_allclose(held.reshape(expected.shape).detach().numpy(), expected, rtol=1e-6)
    actual2, _ = module(data, state)
    np.testing.assert_allclose(actual2.detach().numpy(), (expected + x) @ w.T @ w.T, rtol=1e-6)


@BATCHES
def test_loops_over_several_nodes(rng, batch):
    """test_map_recursive_graph_multiple_nodes, with nirbridge's delayed edges
    (DESIGN.md): linear1 takes the input now and, from the step before, linear2's and
    linear3's outputs; linear3 takes linear2 now and itself from the step before."""
    w = rng.random((2, 2)).astype(np.float32)
    edges = [
        ("linear1", "linear2"),
        ("linear2", "linear1"),
        ("linear2", "linear3"),
        ("linear3", "linear3"),
        ("linear3", "linear1"),
        ("input", "linear1"),
        ("linear2", "output"),
    ]
    module = nirbridge.nir_to_torch(
        linears(w, ["linear1", "linear2", "linear3"], edges), {nir.Linear: map_linear}
    )
    data = sample(rng, (2,), batch)
    x, wt = data.numpy().astype(np.float64), w.T.astype(np.float64)
    l2 = x @ wt @ wt
    l3 = l2 @ wt
    actual, state = module(data)
    np.testing.assert_allclose(actual.detach().numpy(), l2, rtol=1e-6)
    assert sorted(state["delayed"]) == ["linear2", "linear3"]
    actual2, state2 = module(data, state)
    new_l2 = (x + l2 + l3) @ wt @ wt
    np.testing.assert_allclose(actual2.detach().numpy(), new_l2, rtol=1e-6)
    held = state2["delayed"]["linear3"].detach().numpy()
    np.testing.assert_allclose(held.reshape(l3.shape), (new_l2 + l3) @ wt, rtol=1e-6)


@pytest.mark.parametrize("source", ["graph", "path"])
def test_nirtorchs_lif_file(source):
    """test_import_lif_new_api, test_import_lif_new_api_string: nirtorch's map makes LIF
    an identity; nirbridge's own LIF needs no map."""
    identity = {nir.LIF: lambda node: torch.nn.Identity(), nir.CubaLIF: lambda node: torch.nn.Identity()}
    given = nir.read(LIF_NORSE) if source == "graph" else str(LIF_NORSE)
    module = nirbridge.nir_to_torch(given, identity)
    assert module(torch.ones(1))[0].shape == (1,)
    assert torch.equal(module(torch.full((1,), 3.0))[0], torch.full((1,), 3.0))
    out, state = nirbridge.nir_to_torch(given)(torch.ones(1))
    assert out.shape == (1,) and state["nodes"]["1"].v.shape == (1, 1)  # node "1" is the LIF


def test_nirtorchs_braille_file_one_sample_and_a_batch(rng):
    """nirtorch's braille.nir (test_import_braille) with nirbridge's own neurons: a
    sample gives the batch's first row, spike for spike, over 40 steps."""
    module = nirbridge.nir_to_torch(BRAILLE, dtype=torch.float64)
    spikes = torch.from_numpy(rng.random((40, 3, 12)) < 0.3)
    state_one = state_batch = None
    for x in spikes:
        batch, state_batch = module(x, state_batch)
        one, state_one = module(x[0], state_one)
        assert one.shape == (7,) and torch.equal(one, batch[0])


@BATCHES
def test_a_fresh_state_every_call_without_one(batch):
    """test_default_state_initialization"""
    module = nirbridge.nir_to_torch(nir.NIRGraph.from_list(nir.LI(np.ones(1), np.ones(1), np.zeros(1))), {})
    data = torch.ones(1) if batch is None else torch.ones(batch, 1)
    first_out, first_state = module(data)
    second_out, second_state = module(data)
    assert torch.equal(first_out, second_out)
    assert torch.equal(first_state["nodes"]["li"].v, second_state["nodes"]["li"].v)


def test_a_keyword_node_is_named_as_nirtorch_names_it():
    """test_map_if_node"""
    v_th, r = np.array([0.3]), np.array([0.8])
    node = nir.IF(r=r, v_threshold=v_th, v_reset=np.zeros(1))

    class MyIF(torch.nn.Module):
        def __init__(self, r, v_th):
            super().__init__()
            self.r, self.v_th = r, v_th

        def forward(self, x, state):
            return x * self.r - self.v_th, state

    node_map = {nir.IF: lambda n: MyIF(torch.from_numpy(n.r), torch.from_numpy(n.v_threshold))}
    with pytest.warns(nirbridge.RepairWarning, match="'if' is a Python keyword.*'nir_node_if'"):
        module = nirbridge.nir_to_torch(nir.NIRGraph.from_list(node), node_map)
    assert isinstance(module.get_submodule("nir_node_if"), MyIF)
    out, _ = module(torch.tensor([0.5]))
    np.testing.assert_allclose(out.numpy(), 0.5 * r - v_th)


@pytest.mark.parametrize("bias", [True, False])
def test_a_lone_module_exports_as_a_graph(bias):
    """test_trace_default_linear(_no_bias): nirtorch returns the bare Affine or Linear
    node; nirbridge a graph Input -> node -> Output (a deliberate difference)."""
    graph = nirbridge.torch_to_nir(torch.nn.Linear(1, 1, bias=bias), {})
    assert isinstance(graph, nir.NIRGraph)
    kinds = [type(node) for node in graph.nodes.values()]
    assert kinds == [nir.Input, nir.Affine if bias else nir.Linear, nir.Output]


def test_adding_a_constant_is_refused_where_nirtorch_drops_it():
    """test_trace_mapped_module_stateful, test_recursive_stateful: nirtorch exports
    ``lin(x) + c`` as ``lin(x)``; NIR has no node adding a constant, so nirbridge
    refuses (a deliberate difference)."""

    class AddsConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.state = torch.tensor([1.0])

        def forward(self, x):
            return self.lin(x) + self.state

    with pytest.raises(nirbridge.UnsupportedModuleError, match=r"\+\) with a constant"):
        nirbridge.torch_to_nir(AddsConstant(), {})

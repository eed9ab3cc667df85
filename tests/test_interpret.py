"""nir_to_torch against the independent numpy reference in tests/reference.py."""

from __future__ import annotations

import copy
import pickle
import warnings

import nir
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch.utils import _pytree as pytree

import nirbridge
from nirbridge.neurons import LIF
from tests.conftest import EXAMPLES, compare_with_reference, input_names

DT = 1e-4
BATCH = 3


def chain(*nodes: nir.NIRNode, shape) -> nir.NIRGraph:
    names = [f"n{i}" for i in range(len(nodes))]
    graph_nodes = {"input": nir.Input(np.array(shape)), **dict(zip(names, nodes)), "output": nir.Output(None)}
    seq = ["input", *names, "output"]
    return nir.NIRGraph(nodes=graph_nodes, edges=list(zip(seq[:-1], seq[1:])), type_check=False)


def neuron_params(rng, n, kind):
    tau = rng.uniform(2 * DT, 20 * DT, n)
    common = dict(r=rng.uniform(0.5, 3.0, n), v_leak=rng.uniform(-0.2, 0.3, n))
    if kind == "I":
        return nir.I(r=common["r"])
    if kind == "LI":
        return nir.LI(tau=tau, **common)
    thr = dict(v_threshold=rng.uniform(0.5, 1.5, n), v_reset=rng.uniform(-0.3, 0.2, n))
    if kind == "IF":
        return nir.IF(r=common["r"] * 1000, **thr)
    if kind == "LIF":
        return nir.LIF(tau=tau, **common, **thr)
    syn = dict(tau_syn=rng.uniform(2 * DT, 10 * DT, n), tau_mem=tau, w_in=rng.uniform(0.5, 2, n))
    if kind == "CubaLI":
        return nir.CubaLI(**syn, **common)
    return nir.CubaLIF(**syn, **common, **thr)


def drive(rng, shape, scale=3.0):
    return lambda t, name: rng.uniform(-0.5, 1.0, (BATCH, *shape)) * scale


@pytest.mark.parametrize("kind", ["I", "LI", "IF", "LIF", "CubaLI", "CubaLIF"])
def test_neuron_primitives_match_reference(rng, kind):
    n = 7
    graph = chain(
        nir.Affine(rng.normal(size=(n, 4)), rng.normal(size=n)), neuron_params(rng, n, kind), shape=[4]
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (4,)), 80, DT)


def test_spiking_neurons_actually_spike_and_reset(rng):
    graph = chain(neuron_params(rng, 5, "LIF"), shape=[5])
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    state, total = None, 0.0
    for _ in range(50):
        out, state = gm(torch.full((2, 5), 5.0, dtype=torch.float64), state)
        total += float(out.sum())
    assert total > 10  # the comparison tests above mean something only if spikes happen


@pytest.mark.parametrize(
    "node",
    [
        lambda r: nir.Linear(r.normal(size=(3, 4))),
        lambda r: nir.Scale(r.normal(size=4)),
        lambda r: nir.Threshold(r.uniform(0, 1, size=4)),
        lambda r: nir.Delay(np.array([0.0, DT, 3 * DT, 2 * DT])),
    ],
    ids=["Linear", "Scale", "Threshold", "Delay"],
)
def test_stateless_and_delay_primitives(rng, node):
    graph = chain(node(rng), shape=[4])
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (4,)), 12, DT)


@pytest.mark.parametrize(
    "stride,padding,dilation,groups",
    [
        (1, 0, 1, 1),
        (2, 1, 1, 1),
        ((1, 2), (2, 0), (2, 1), 2),
        (1, "same", 2, 1),
        (2, "valid", 1, 2),
        (1, "same", 1, 4),
    ],
)
def test_conv2d(rng, stride, padding, dilation, groups):
    c_in, c_out = 4, 8
    weight = rng.normal(size=(c_out, c_in // groups, 3, 2))
    node = nir.Conv2d(
        input_shape=(9, 8),
        weight=weight,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        bias=rng.normal(size=c_out),
    )
    graph = chain(node, shape=[c_in, 9, 8])
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (c_in, 9, 8)), 2, DT)


@pytest.mark.parametrize(
    "stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 2, 1, 3), (1, "same", 3, 1), (3, "valid", 2, 1)]
)
def test_conv1d(rng, stride, padding, dilation, groups):
    weight = rng.normal(size=(6, 6 // groups, 3))
    node = nir.Conv1d(
        input_shape=11,
        weight=weight,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        bias=rng.normal(size=6),
    )
    graph = chain(node, shape=[6, 11])
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (6, 11)), 2, DT)


@pytest.mark.parametrize("cls", [nir.SumPool2d, nir.AvgPool2d])
@pytest.mark.parametrize(
    "kernel,stride,padding", [((2, 2), (2, 2), (0, 0)), ((3, 2), (1, 2), (1, 1)), ((2, 2), (1, 1), (1, 0))]
)
def test_pooling(rng, cls, kernel, stride, padding):
    node = cls(kernel_size=np.array(kernel), stride=np.array(stride), padding=np.array(padding))
    graph = chain(node, shape=[3, 7, 6])
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (3, 7, 6)), 2, DT)


@pytest.mark.parametrize("start,end", [(0, -1), (1, 2), (0, 1), (-2, -1)])
def test_flatten(rng, start, end):
    graph = chain(
        nir.Flatten(input_type={"input": np.array([2, 3, 4])}, start_dim=start, end_dim=end), shape=[2, 3, 4]
    )
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (2, 3, 4)), 2, DT)


def window_sums(x: np.ndarray, kernel, stride, padding) -> np.ndarray:
    """SumPool2d in numpy: zero padding, then the sum of each window."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    pad = [(0, 0)] * (x.ndim - 2) + [(ph, ph), (pw, pw)]
    x = np.pad(x, pad)
    rows, cols = (x.shape[-2] - kh) // sh + 1, (x.shape[-1] - kw) // sw + 1
    out = np.zeros((*x.shape[:-2], rows, cols))
    for i in range(rows):
        for j in range(cols):
            out[..., i, j] = x[..., i * sh : i * sh + kh, j * sw : j * sw + kw].sum(axis=(-2, -1))
    return out


def test_pooling_keeps_torchs_argument_form_and_sum_pooling_is_lp_pooling_of_norm_one(rng):
    """As nirtorch builds them: one integer stays one (torch's AvgPool2d(3) has
    kernel_size 3), and SumPool2d is an LPPool2d with norm_type 1, but an exact sum
    with NIR's padding, on a batch or one sample [C, H, W]."""
    avg = nirbridge.nir_to_torch(nir.AvgPool2d(3, 2, 1))
    assert type(avg) is torch.nn.AvgPool2d and (avg.kernel_size, avg.stride, avg.padding) == (3, 2, 1)
    avg = nirbridge.nir_to_torch(nir.AvgPool2d(np.array([3, 2]), np.array([2, 1]), np.array([1, 0])))
    assert (avg.kernel_size, avg.stride, avg.padding) == ((3, 2), (2, 1), (1, 0))
    pool = nirbridge.nir_to_torch(nir.SumPool2d(2, 1, 0))
    assert isinstance(pool, torch.nn.LPPool2d) and pool.norm_type == 1
    assert (pool.kernel_size, pool.stride, pool.padding) == (2, 1, 0)
    assert torch.equal(pool(torch.ones(3, 5, 5)), torch.full((3, 4, 4), 4.0))
    node = nir.SumPool2d(np.array([3, 2]), np.array([1, 2]), np.array([1, 1]))
    pool = nirbridge.nir_to_torch(node, dtype=torch.float64)
    assert (pool.kernel_size, pool.stride, pool.padding) == ((3, 2), (1, 2), (1, 1))
    x = rng.integers(-8, 9, size=(4, 3, 7, 6)).astype(np.float64)  # whole numbers: every sum exact
    expected = window_sums(x, (3, 2), (1, 2), (1, 1))
    assert torch.equal(pool(torch.from_numpy(x)), torch.from_numpy(expected))
    assert torch.equal(pool(torch.from_numpy(x[1])), torch.from_numpy(expected[1]))
    default = nirbridge.nir_to_torch(nir.SumPool2d(np.array([2, 2]), None, None))
    assert (default.stride, default.padding) == ((2, 2), 0)  # stride defaults to the kernel


def test_flatten_keeps_nirs_dims_and_takes_a_sample_or_a_batch(rng):
    """nirtorch's test: Flatten(start_dim=2, end_dim=3) of input [1, 2, 10, 10] is a
    torch Flatten with those dims; they count in one sample, so a batch [B, 1, 2, 10, 10]
    and a sample [1, 2, 10, 10] both become [..., 1, 2, 100]."""
    flat = nirbridge.nir_to_torch(nir.Flatten({"input": np.array([1, 2, 10, 10])}, 2, 3))
    assert isinstance(flat, torch.nn.Flatten) and (flat.start_dim, flat.end_dim) == (2, 3)
    x = rng.normal(size=(4, 1, 2, 10, 10))
    assert torch.equal(flat(torch.from_numpy(x)), torch.from_numpy(x.reshape(4, 1, 2, 100)))
    assert torch.equal(flat(torch.from_numpy(x[0])), torch.from_numpy(x[0].reshape(1, 2, 100)))
    steps = torch.from_numpy(x).expand(3, 4, 1, 2, 10, 10)  # time and batch in front
    assert flat(steps).shape == (3, 4, 1, 2, 100)
    unknown = nirbridge.layers.Flatten(0, -1)  # no rank: one batch axis in front
    assert unknown(torch.from_numpy(x)).shape == (4, 200)


def test_flatten_in_a_graph_takes_the_rank_that_flows_in_not_a_stale_input_type(rng):
    """A Flatten whose declared input_type ([1, 2, 3]) disagrees with what flows in
    ([2, 3]) flattens the samples that flow in: by batch and by one sample."""
    w = rng.normal(size=(1, 6))
    graph = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([2, 3])),
            "flat": nir.Flatten(input_type={"input": np.array([1, 2, 3])}, start_dim=0),
            "fc": nir.Linear(w),
            "out": nir.Output(np.array([1])),
        },
        edges=[("in", "flat"), ("flat", "fc"), ("fc", "out")],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    x = rng.normal(size=(4, 2, 3))
    out, _ = gm(torch.from_numpy(x))
    np.testing.assert_allclose(out.detach().numpy(), x.reshape(4, 6) @ w.T, rtol=1e-12)
    one, _ = gm(torch.from_numpy(x[0]))
    assert one.shape == (1,)
    np.testing.assert_allclose(one.detach().numpy(), x[0].reshape(6) @ w.T, rtol=1e-12)
    with pytest.raises(nirbridge.ShapeMismatchError, match=r"samples of 2 axes.*got shape \[6\]"):
        gm.flat(torch.zeros(6))


def test_an_old_pickled_flatten_keeps_working():
    """A layers.Flatten pickled before it kept NIR's dims held torch's (shifted past the
    batch axis) and no rank; it loads as NIR's dims again."""
    old = nirbridge.layers.Flatten(1, -1)
    state = dict(old.__dict__)
    del state["rank"]
    state["start_dim"] = 2  # the old constructor stored start_dim + 1
    loaded = nirbridge.layers.Flatten.__new__(nirbridge.layers.Flatten)
    loaded.__setstate__(state)
    assert (loaded.start_dim, loaded.end_dim, loaded.rank) == (1, -1, None)
    assert loaded(torch.zeros(5, 2, 3, 4)).shape == (5, 2, 12)


def recurrent_block(rng, n, with_bias=True):
    """Input -> Affine -> LIF <-> Linear -> Output, as a nested graph."""
    lif = neuron_params(rng, n, "LIF")
    rec = (
        nir.Affine(rng.normal(size=(n, n)) * 0.5, rng.normal(size=n))
        if with_bias
        else nir.Linear(rng.normal(size=(n, n)))
    )
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([n])),
            "lif": lif,
            "w_rec": rec,
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")],
        type_check=False,
    )


def test_recurrent_loop_delays_the_closing_edge(rng):
    n = 6
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(rng.normal(size=(n, 3)) * 3, rng.normal(size=n)),
            "lif": neuron_params(rng, n, "LIF"),
            "w_rec": nir.Affine(rng.normal(size=(n, n)), rng.normal(size=n)),
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "fc"), ("fc", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (3,)), 100, DT)
    _, state = gm(torch.zeros(1, 3, dtype=torch.float64))
    assert set(state["delayed"]) == {"w_rec"}
    assert set(state["nodes"]) == {"lif"}


def test_self_loop_and_nested_subgraph(rng):
    n = 5
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([n])),
            "block": recurrent_block(rng, n),
            "li": neuron_params(rng, n, "LI"),
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "block"), ("block", "li"), ("li", "li"), ("li", "output")],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    compare_with_reference(gm, graph, drive(rng, (n,)), 60, DT)
    _, state = gm(torch.ones(2, n, dtype=torch.float64))
    assert set(state["nodes"]["block"]["nodes"]) == {"lif"}
    assert set(state["nodes"]["block"]["delayed"]) == {"w_rec"}
    assert isinstance(gm.block, torch.fx.GraphModule)


def test_two_inputs_two_outputs_fan_in_and_fan_out(rng):
    graph = nir.NIRGraph(
        nodes={
            "a": nir.Input(np.array([3])),
            "b": nir.Input(np.array([2])),
            "fa": nir.Affine(rng.normal(size=(4, 3)), rng.normal(size=4)),
            "fb": nir.Linear(rng.normal(size=(4, 2))),
            "lif": neuron_params(rng, 4, "LIF"),
            "li": neuron_params(rng, 4, "LI"),
            "spikes": nir.Output(np.array([4])),
            "trace": nir.Output(np.array([4])),
        },
        edges=[
            ("a", "fa"),
            ("b", "fb"),
            ("fa", "lif"),
            ("fb", "lif"),
            ("lif", "spikes"),
            ("lif", "li"),
            ("fa", "li"),
            ("li", "trace"),
        ],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    compare_with_reference(
        gm, graph, lambda t, name: rng.uniform(0, 3, (BATCH, 3 if name == "a" else 2)), 40, DT
    )
    out, state = gm(torch.ones(1, 3, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64), state=None)
    assert set(out) == {"spikes", "trace"}
    out2, _ = gm(
        a=torch.ones(1, 3, dtype=torch.float64), b=torch.ones(1, 2, dtype=torch.float64), state=state
    )
    assert set(out2) == {"spikes", "trace"}


def test_dotted_names_nest_and_do_not_collide(rng):
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "a.b": nir.Linear(rng.normal(size=(3, 3))),
            "a_b": nir.Linear(rng.normal(size=(3, 3))),
            "c": nir.Scale(rng.normal(size=3)),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "a.b"), ("a.b", "a_b"), ("a_b", "c"), ("c", "output")],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    assert isinstance(gm.a.b, torch.nn.Linear)
    assert isinstance(gm.a_b, torch.nn.Linear)
    assert gm.a.b is not gm.a_b
    assert {"a.b.weight", "a_b.weight", "c.scale"} <= set(gm.state_dict())
    compare_with_reference(gm, graph, drive(rng, (3,)), 3, DT)


@pytest.mark.parametrize(
    ("names", "inner"),
    [(("lif", "lif.v"), False), (("a", "a.b"), False), (("a", "a.b"), True), (("x.y", "x.y.z"), False)],
)
def test_a_dotted_name_that_starts_with_another_nodes_name_is_refused(rng, names, inner):
    """'a.b' beside a node 'a' was installed inside a's module: beside a subgraph 'a'
    holding 'b', it replaced that node (wrong output, a weight gone from the state_dict,
    the wrong graph exported); 'lif.v' beside a LIF 'lif' made record=['lif.v'] pick one."""
    owner, dotted = names
    first = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "b": nir.Linear(np.eye(3)),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "b"), ("b", "output")],
    )
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            owner: first if inner else neuron_params(rng, 3, "LIF"),
            dotted: nir.Linear(rng.normal(size=(3, 3))),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", owner), (owner, dotted), (dotted, "output")],
        type_check=False,
    )
    with pytest.raises(nirbridge.GraphStructureError, match=f"node name {dotted!r} starts with {owner!r}"):
        nirbridge.nir_to_torch(graph, dt=DT)


ODD_NAMES = [
    "fi",
    "\ufb01",  # the ligature: Python reads it as "fi"
    "forward",
    "\uff46\uff4f\uff52\uff57\uff41\uff52\uff44",  # full-width "forward"
    "\uff54\uff52\uff41\uff49\uff4e\uff49\uff4e\uff47",  # full-width "training"
    "training",
    "a",
    "a.b",
    "lif.v",
    "v",
    "if",
    "0",
    "x.\u2460",
    "\x1b[2J",
    "\u202eevil",
    "\u2492",  # NFKC: "11." - a dot appears
    "self",
    "state",
]


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(
        st.one_of(st.sampled_from(ODD_NAMES), st.text(st.characters(), min_size=1, max_size=4)),
        min_size=3,
        max_size=3,
        unique=True,
    ).filter(lambda names: not {"input", "output"} & set(names)),
    seed=st.integers(0, 2**16),
)
def test_no_node_name_changes_which_module_runs(names, seed):
    """Names of every Unicode category: the graph is refused with a
    GraphStructureError, or stepping, run, state_dict and export all agree with NIR's
    equations (NFKC once sent 'fi' and its ligature to one module)."""
    rng = np.random.default_rng(seed)
    first, neuron, last = names
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            first: nir.Linear(rng.normal(size=(3, 3))),
            neuron: neuron_params(rng, 3, "LIF"),
            last: nir.Affine(rng.normal(size=(3, 3)), rng.normal(size=3)),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", first), (first, neuron), (neuron, last), (last, first), (last, "output")],
        type_check=False,
    )
    segments = {name: name.split(".") for name in names}
    clash = any(".".join(parts[:end]) in names for parts in segments.values() for end in range(1, len(parts)))
    if clash or any("" in parts for parts in segments.values()):
        with pytest.raises(nirbridge.GraphStructureError):
            nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
        event("refused")
        return
    event("built")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    assert all(issubclass(w.category, nirbridge.RepairWarning) for w in caught), [
        str(w.message) for w in caught
    ]
    paths = gm.meta["nirbridge"]["module_paths"]
    for name, kind in ((first, torch.nn.Linear), (last, torch.nn.Linear)):
        assert isinstance(gm.get_submodule(paths.get(name, name)), kind), name
    compare_with_reference(gm, graph, drive(rng, (3,)), 6, DT)
    x = torch.from_numpy(rng.uniform(-1, 3, (6, 2, 3)))
    stepped, state = [], None
    for t in range(6):
        out, state = gm(x[t], state)
        stepped.append(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        result = nirbridge.run(gm, x, record="all")
    torch.testing.assert_close(result.output, torch.stack(stepped), rtol=0, atol=1e-12)
    assert {first, neuron, last} <= set(result.records)
    weights = {k: v for k, v in gm.state_dict().items() if k.endswith("weight")}
    assert len(weights) == 2
    assert {paths.get(first, first) + ".weight", paths.get(last, last) + ".weight"} == set(weights)
    back = nirbridge.torch_to_nir(gm)
    assert {first, neuron, last} <= set(back.nodes)
    np.testing.assert_array_equal(back.nodes[first].weight, graph.nodes[first].weight)
    np.testing.assert_array_equal(back.nodes[last].weight, graph.nodes[last].weight)
    assert set(back.edges) == set(graph.edges)


def test_state_dict_round_trip_between_two_imports(rng):
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "block.fc": nir.Affine(rng.normal(size=(4, 3)), np.zeros(4)),
            "block.lif": neuron_params(rng, 4, "LIF"),
            "output": nir.Output(np.array([4])),
        },
        edges=[("input", "block.fc"), ("block.fc", "block.lif"), ("block.lif", "output")],
        type_check=False,
    )
    first, second = nirbridge.nir_to_torch(graph), nirbridge.nir_to_torch(graph)
    with torch.no_grad():
        first.block.fc.weight.mul_(2)
    second.load_state_dict(first.state_dict())
    assert torch.equal(second.block.fc.weight, first.block.fc.weight)


# ----------------------------------------------------------------------------- random graphs

ELEMENTWISE = ["I", "LI", "IF", "LIF", "CubaLI", "CubaLIF", "Scale", "Threshold", "Delay", "Subgraph"]


@st.composite
def random_graphs(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_inputs = draw(st.integers(1, 2))
    n_layers = draw(st.integers(1, 7))
    nodes: dict[str, nir.NIRNode] = {}
    out_dim: dict[str, int] = {}
    in_dim: dict[str, int] = {}
    edges: list[tuple[str, str]] = []
    first_dim = draw(st.integers(1, 4))
    nodes["in0"] = nir.Input(np.array([first_dim]))
    out_dim["in0"] = first_dim
    names: list[str] = ["in0"]
    for i in range(n_layers):
        kind = draw(st.sampled_from(["Affine", "Linear", *ELEMENTWISE]))
        source = draw(st.sampled_from(names))
        d = out_dim[source]
        name = f"{kind.lower()}{i}"
        if kind in ("Affine", "Linear"):
            d_out = draw(st.integers(1, 5))
            w = rng.normal(size=(d_out, d)) * 2
            node = nir.Affine(w, rng.normal(size=d_out)) if kind == "Affine" else nir.Linear(w)
        elif kind == "Scale":
            d_out, node = d, nir.Scale(rng.normal(size=d))
        elif kind == "Threshold":
            d_out, node = d, nir.Threshold(rng.uniform(-0.5, 0.5, d))
        elif kind == "Delay":
            d_out, node = d, nir.Delay(rng.integers(0, 4, d) * DT)
        elif kind == "Subgraph":
            d_out, node = d, recurrent_block(rng, d, with_bias=bool(rng.integers(2)))
        else:
            d_out, node = d, neuron_params(rng, d, kind)
        nodes[name], in_dim[name], out_dim[name] = node, d, d_out
        edges.append((source, name))
        for other in names:  # skips and fan-in
            if other != source and out_dim[other] == d and draw(st.booleans()) and draw(st.booleans()):
                edges.append((other, name))
        names.append(name)
    layers = names[1:]
    for target in layers:  # recurrent loops and self-loops
        for source in layers:
            if out_dim[source] == in_dim[target] and names.index(source) >= names.index(target):
                if draw(st.integers(0, 5)) == 0:
                    edges.append((source, target))
    if n_inputs == 2:
        target = draw(st.sampled_from(layers))
        nodes["in1"] = nir.Input(np.array([in_dim[target]]))
        edges.append(("in1", target))
    n_outputs = draw(st.integers(1, 2))
    for k in range(n_outputs):
        source = draw(st.sampled_from(layers))
        nodes[f"out{k}"] = nir.Output(np.array([out_dim[source]]))
        edges.append((source, f"out{k}"))
    order = draw(st.permutations(list(nodes)))
    shuffled = {k: nodes[k] for k in order}
    return nir.NIRGraph(nodes=shuffled, edges=edges, type_check=False), seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_random_graphs_match_reference(case):
    graph, seed = case
    rng = np.random.default_rng(seed + 1)
    shapes = {n: tuple(int(v) for v in graph.nodes[n].input_type["input"]) for n in input_names(graph)}
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    compare_with_reference(gm, graph, lambda t, name: rng.uniform(-1, 3, (2, *shapes[name])), 25, DT)


# ----------------------------------------------------------------------------- real files

USABLE = {
    "NIRTorch__tests__braille.nir": 1e-4,
    "NIRTorch__tests__lif_norse.nir": 1e-4,
    "NIR__paper__01_lif__debug_spike_representation__two_lif_neurons.nir": 1e-4,
    "NIR__paper__01_lif__lif_norse.nir": 1e-4,
    "NIR__paper__01_lif__lif_rockpool.nir": 1e-4,
    "NIR__paper__02_cnn__cnn_sinabs.nir": 1.0,
    "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir": 1e-4,
    "NIR__paper__03_rnn__braille_noDelay_noBias_subtract.nir": 1e-4,
    "spyx__docs__examples__nir__rsnn__braille_noDelay_bias_zero_subgraph.nir": 1e-4,
    "spyx__docs__examples__nir__rsnn__braille_noDelay_noBias_subtract_subgraph.nir": 1e-4,
    "spyx__docs__examples__nir__scnn__scnn_mnist.nir": 1.0,
    "spyx_at_00e6ba49__research__paper__scnn_mnist.nir": 1.0,
    "spyx_at_00e6ba49__research__paper__spyx_shd.nir": 1e-4,
    "spyx_at_6a2d735b__docs__examples__nir__rsnn__braille_subtract.nir": 1e-4,
}
MALFORMED = [
    "NIR__paper__03_rnn__extras__braille_noDelay_bias_zero_subgraph.nir",
    "NIR__paper__03_rnn__extras__braille_noDelay_noBias_subtract_subgraph.nir",
]


def test_every_example_file_is_classified():
    assert sorted(p.name for p in EXAMPLES.glob("*.nir")) == sorted([*USABLE, *MALFORMED])


@pytest.mark.parametrize("name", sorted(USABLE))
def test_real_files_match_reference(name):
    path = EXAMPLES / name
    dt = USABLE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)  # test_io checks what read reports
        graph = nirbridge.read(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = nirbridge.nir_to_torch(path, dt=dt, dtype=torch.float64, allow_negative_tau="spyx_shd" in name)
    repairs = [w for w in caught if issubclass(w.category, nirbridge.RepairWarning)]
    expect_repair = name in (
        "spyx_at_00e6ba49__research__paper__scnn_mnist.nir",
        "spyx_at_00e6ba49__research__paper__spyx_shd.nir",
        "NIR__paper__01_lif__lif_rockpool.nir",
    )
    assert bool(repairs) == expect_repair, [str(w.message) for w in caught]
    transpose = frozenset()
    if "spyx_shd" in name:
        transpose = frozenset({"linear", "linear_1", "linear_2"})
    if name == "spyx_at_00e6ba49__research__paper__scnn_mnist.nir":
        graph.nodes["8"] = nir.Flatten(input_type={"input": np.array([8, 4, 4])}, start_dim=0, end_dim=-1)
    rng = np.random.default_rng(7)
    shape = tuple(int(v) for v in graph.nodes[input_names(graph)[0]].input_type["input"])
    rate = 0.3 if len(shape) > 1 else 0.5
    scale = 1.0 if len(shape) > 1 else (5.0 if "lif" in name else 1.0)
    compared = compare_with_reference(
        gm, graph, lambda t, n: (rng.uniform(size=(2, *shape)) < rate) * scale, 60, dt, transpose=transpose
    )
    assert compared > 0


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_files_name_the_missing_node(name):
    with pytest.raises(nirbridge.MissingNodeError, match=r"'lif'") as info:
        nirbridge.nir_to_torch(EXAMPLES / name)
    assert info.value.missing == "lif"
    assert "lif1" in str(info.value)


def test_file_dt_from_metadata_is_used(tmp_path, rng):
    graph = chain(neuron_params(rng, 3, "LI"), shape=[3])
    graph.metadata = {"dt": 2e-4}
    path = tmp_path / "li.nir"
    nirbridge.write(path, graph)
    gm = nirbridge.nir_to_torch(path, dtype=torch.float64)
    assert gm.n0.dt == pytest.approx(2e-4)
    compare_with_reference(gm, graph, drive(rng, (3,)), 10, 2e-4)
    with pytest.warns(nirbridge.DtWarning, match="differs from the dt the graph records"):
        assert nirbridge.nir_to_torch(graph, dt=5e-4).n0.dt == pytest.approx(5e-4)
    graph.metadata = {}
    assert nirbridge.nir_to_torch(graph).n0.dt == pytest.approx(1e-4)


# ----------------------------------------------------------------------------- state contract


@pytest.fixture
def recurrent_gm(rng):
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(rng.normal(size=(4, 3)) * 4, np.zeros(4)),
            "block": recurrent_block(rng, 4),
            "output": nir.Output(np.array([4])),
        },
        edges=[("input", "fc"), ("fc", "block"), ("block", "output")],
        type_check=False,
    )
    return nirbridge.nir_to_torch(graph, dt=DT)


@torch.no_grad()
def test_state_passed_in_is_never_mutated(recurrent_gm):
    x = torch.rand(2, 3)
    _, state = recurrent_gm(x)
    _, state = recurrent_gm(x, state)
    snapshot = copy.deepcopy(state)
    out_a, new_state = recurrent_gm(x, state)
    leaves_before, spec_before = pytree.tree_flatten(snapshot)
    leaves_after, spec_after = pytree.tree_flatten(state)
    assert spec_before == spec_after
    assert all(torch.equal(a, b) for a, b in zip(leaves_before, leaves_after))
    assert new_state is not state
    out_b, _ = recurrent_gm(x, snapshot)
    assert torch.equal(out_a, out_b)


def test_fresh_call_starts_from_the_initial_state(recurrent_gm):
    x = torch.rand(2, 3)
    first, state = recurrent_gm(x)
    for _ in range(5):
        _, state = recurrent_gm(x, state)
    again, _ = recurrent_gm(x)
    assert torch.equal(first, again)


def test_state_works_with_pytree_deepcopy_pickle_and_batch_changes(recurrent_gm):
    _, state = recurrent_gm(torch.rand(2, 3, requires_grad=True))
    detached = pytree.tree_map(lambda t: t.detach(), state)
    assert all(not t.requires_grad for t in pytree.tree_leaves(detached))
    assert isinstance(detached["nodes"]["block"]["nodes"]["lif"], nirbridge.neurons.IState)
    doubled = pytree.tree_map(lambda t: t.double(), detached)
    assert all(t.dtype == torch.float64 for t in pytree.tree_leaves(doubled))
    restored = pickle.loads(pickle.dumps(detached))
    out1, _ = recurrent_gm(torch.ones(2, 3), detached)
    out2, _ = recurrent_gm(torch.ones(2, 3), restored)
    assert torch.equal(out1, out2)
    for batch in (1, 5, 2):
        out, state = recurrent_gm(torch.rand(batch, 3))
        out, state = recurrent_gm(torch.rand(batch, 3), state)
        assert out.shape == (batch, 4)


def test_bad_state_gets_a_clear_error(recurrent_gm):
    with pytest.raises(nirbridge.StateError, match="state=None"):
        recurrent_gm(torch.rand(2, 3), {"lif": 1})


def test_module_can_be_deep_copied_and_pickled(recurrent_gm):
    x = torch.rand(2, 3)
    expected, _ = recurrent_gm(x)
    clone = copy.deepcopy(recurrent_gm)
    assert torch.equal(clone(x)[0], expected)
    restored = pickle.loads(pickle.dumps(recurrent_gm))
    out, state = restored(x)
    assert torch.equal(out, expected)
    assert torch.equal(restored(x, state)[0], recurrent_gm(x, state)[0])
    # it comes back with its own checks, and pickles again
    assert isinstance(restored, nirbridge.interpret.NIRGraphModule)
    assert restored.state_dict().keys() == recurrent_gm.state_dict().keys()
    with pytest.raises(nirbridge.InputError, match="takes the arguments"):
        restored(x, state, x)
    again = pickle.loads(pickle.dumps(restored))
    assert torch.equal(again(x, state)[0], recurrent_gm(x, state)[0])


# ----------------------------------------------------------------------------- dtypes, devices, gradients


def test_float32_and_float64(rng):
    graph = chain(
        nir.Affine(rng.normal(size=(4, 3)), rng.normal(size=4)), neuron_params(rng, 4, "CubaLIF"), shape=[3]
    )
    for dtype in (torch.float32, torch.float64):
        gm = nirbridge.nir_to_torch(graph, dtype=dtype)
        assert {p.dtype for p in gm.parameters()} == {dtype}
        assert {b.dtype for b in gm.buffers() if b.is_floating_point()} == {dtype}
        out, state = gm(torch.rand(2, 3, dtype=dtype))
        assert out.dtype == dtype
        assert all(t.dtype == dtype for t in pytree.tree_leaves(state))
    gm32 = nirbridge.nir_to_torch(graph, dtype=torch.float32)
    compare_with_reference(gm32.double(), graph, drive(rng, (3,)), 20, DT, atol=1e-6)


def test_gradient_flows_through_an_imported_lif_network(rng):
    graph = chain(
        nir.Affine(rng.normal(size=(8, 4)), np.zeros(8)),
        neuron_params(rng, 8, "LIF"),
        nir.Affine(rng.normal(size=(3, 8)), np.zeros(3)),
        neuron_params(rng, 3, "LI"),
        shape=[4],
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT)
    state, loss = None, 0.0
    for _ in range(20):
        out, state = gm(torch.rand(2, 4) * 5, state)
        loss = loss + out.pow(2).sum()
    loss.backward()
    grad = gm.n0.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    optimiser = torch.optim.SGD(gm.parameters(), lr=0.1)
    before = gm.n0.weight.detach().clone()
    optimiser.step()
    assert not torch.equal(before, gm.n0.weight)


DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.mark.parametrize("device", DEVICES)
def test_runs_on_every_available_device(rng, device):
    graph = chain(
        nir.Affine(rng.normal(size=(4, 3)), rng.normal(size=4)), neuron_params(rng, 4, "LIF"), shape=[3]
    )
    gm = nirbridge.nir_to_torch(graph, device=device, dtype=torch.float64)
    assert {p.device.type for p in gm.parameters()} == {device}
    out, state = gm(torch.rand(2, 3, device=device, dtype=torch.float64))
    out, state = gm(torch.rand(2, 3, device=device, dtype=torch.float64), state)
    assert out.device.type == device
    assert {t.device.type for t in pytree.tree_leaves(state)} == {device}


# ----------------------------------------------------------------------------- maps and errors


def test_node_map_wins_and_default_map_empty_removes_defaults(rng):
    graph = chain(
        nir.Affine(rng.normal(size=(4, 3)), rng.normal(size=4)), neuron_params(rng, 4, "LIF"), shape=[3]
    )
    calls = []

    def my_lif(node):
        calls.append(node)
        return LIF(
            tau=node.tau, r=node.r, v_leak=node.v_leak, v_threshold=node.v_threshold * 2, v_reset=node.v_reset
        )

    gm = nirbridge.nir_to_torch(graph, node_map={nir.LIF: my_lif})
    assert len(calls) == 1 and torch.allclose(
        gm.n1.v_threshold, torch.tensor(graph.nodes["n1"].v_threshold * 2, dtype=torch.float32)
    )
    with pytest.raises(nirbridge.UnsupportedNodeError) as info:
        nirbridge.nir_to_torch(graph, node_map={nir.LIF: my_lif}, default_map={})
    assert "Affine: 'n0'" in str(info.value) and "node_map" in str(info.value)
    gm = nirbridge.nir_to_torch(
        graph, node_map={nir.LIF: my_lif, nir.Affine: lambda n: torch.nn.Identity()}, default_map={}
    )
    assert isinstance(gm.n0, torch.nn.Identity)


def test_unknown_node_types_are_all_listed_at_once(rng):
    class Mystery(nir.NIRNode):
        def __init__(self):
            self.metadata = {}

    sub = nir.NIRGraph(
        nodes={"input": nir.Input(np.array([2])), "inner": Mystery(), "output": nir.Output(np.array([2]))},
        edges=[("input", "inner"), ("inner", "output")],
        type_check=False,
    )
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "m1": Mystery(),
            "sub": sub,
            "m2": Mystery(),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "m1"), ("m1", "sub"), ("sub", "m2"), ("m2", "output")],
        type_check=False,
    )
    with pytest.raises(nirbridge.UnsupportedNodeError) as info:
        nirbridge.nir_to_torch(graph)
    message = str(info.value)
    for name in ("'m1'", "'m2'", "'sub.inner'", "Mystery", "node_map={nir.Mystery: fn}"):
        assert name in message
    assert info.value.offenders == {"Mystery": ["m1", "sub.inner", "m2"]}
    # nirtorch raises ValueError here; code written for it keeps catching nirbridge's error
    with pytest.raises(ValueError, match="no converter for these node types"):
        nirbridge.nir_to_torch(graph)


def test_missing_node_in_edge_and_missing_input(rng):
    lif = neuron_params(rng, 2, "LIF")
    graph = nir.NIRGraph(
        nodes={"input": nir.Input(np.array([2])), "lif": lif, "output": nir.Output(np.array([2]))},
        edges=[("input", "lif"), ("lif", "out")],
        type_check=False,
    )
    with pytest.raises(nirbridge.MissingNodeError, match="'out'"):
        nirbridge.nir_to_torch(graph)
    graph = nir.NIRGraph(
        nodes={"lif": lif, "output": nir.Output(np.array([2]))}, edges=[("lif", "output")], type_check=False
    )
    with pytest.raises(nirbridge.GraphStructureError, match="no Input"):
        nirbridge.nir_to_torch(graph)


def test_unreachable_and_unfed_nodes_are_errors(rng):
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "a": nir.Scale(np.ones(2)),
            "b": nir.Scale(np.ones(2)),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "a"), ("a", "output"), ("b", "b")],
        type_check=False,
    )
    with pytest.raises(nirbridge.GraphStructureError, match=r"\['b'\]"):
        nirbridge.nir_to_torch(graph)


def test_weight_shape_mismatch_names_the_node(rng):
    graph = chain(
        nir.Affine(rng.normal(size=(4, 3)), np.zeros(4)), nir.Linear(rng.normal(size=(2, 5))), shape=[3]
    )
    with pytest.raises(nirbridge.ShapeMismatchError, match="'n1'.*expects 5 input features"):
        nirbridge.nir_to_torch(graph)
    graph = chain(nir.Affine(rng.normal(size=(4, 3)), np.zeros(4)), neuron_params(rng, 5, "LIF"), shape=[3])
    with pytest.raises(nirbridge.ShapeMismatchError, match="'n1'"):
        nirbridge.nir_to_torch(graph)


def test_a_failing_converter_is_reraised_naming_the_node(rng):
    graph = chain(neuron_params(rng, 2, "LIF"), shape=[2])

    def broken(node):
        raise RuntimeError("boom")

    with pytest.raises(
        nirbridge.NodeConversionError, match=r"while converting node 'n0' \(LIF\): RuntimeError: boom"
    ):
        nirbridge.nir_to_torch(graph, node_map={nir.LIF: broken})


def test_bad_dt_and_dtype_are_rejected(rng):
    graph = chain(neuron_params(rng, 2, "LIF"), shape=[2])
    for bad in (0, -1e-4, float("nan"), "fast"):
        with pytest.raises(nirbridge.ParameterError, match="dt"):
            nirbridge.nir_to_torch(graph, dt=bad)
    with pytest.raises(nirbridge.ParameterError, match="dtype"):
        nirbridge.nir_to_torch(graph, dtype=torch.int32)


def test_single_node_returns_its_module(rng):
    module = nirbridge.nir_to_torch(neuron_params(rng, 3, "CubaLIF"), dt=2e-4)
    assert isinstance(module, nirbridge.neurons.CubaLIF) and module.dt == pytest.approx(2e-4)
    assert isinstance(nirbridge.nir_to_torch(nir.Affine(np.eye(2), np.zeros(2))), torch.nn.Linear)
    with pytest.raises(nirbridge.NirBridgeError, match="lone Input"):
        nirbridge.nir_to_torch(nir.Input(np.array([2])))


def test_generated_code_is_readable(recurrent_gm):
    code = recurrent_gm.code
    assert "def forward(self, input, state = None)" in code
    # submodules are called through torch's own dict, read at each call
    assert "self._modules['block'](" in code and "self._modules['fc'](" in code
    assert "'nodes'" in code and "'delayed'" in code
    inner = recurrent_gm.block.code
    assert "delayed_outputs.get('w_rec')" in inner


def test_odd_names_inputs_and_reserved_attributes(rng):
    graph = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([2])),
            "0": nir.Scale(np.ones(2) * 2),
            "type": nir.Scale(np.ones(2) * 3),
            "out": nir.Output(np.array([2])),
        },
        edges=[("in", "0"), ("0", "type"), ("type", "out")],
        type_check=False,
    )
    with pytest.warns(nirbridge.RepairWarning, match="'type'"):
        gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    out, _ = gm(torch.ones(1, 2, dtype=torch.float64))
    assert torch.equal(out, torch.full((1, 2), 6.0, dtype=torch.float64))


def test_names_python_cannot_write_become_safe_module_paths_and_arguments(rng):
    """Keywords, quotes, control characters and non-identifier letters once broke fx's
    generated code or looped forever; they get safe names and the graph runs."""
    odd = ["if", 'say "hi"', "\r", "a\\b", "²"]
    nodes = {"x²": nir.Input(np.array([2]))}
    nodes.update({name: nir.Scale(np.full(2, i + 2.0)) for i, name in enumerate(odd)})
    nodes["out"] = nir.Output(np.array([2]))
    chain_names = ["x²", *odd, "out"]
    graph = nir.NIRGraph(nodes=nodes, edges=list(zip(chain_names, chain_names[1:])), type_check=False)
    with pytest.warns(nirbridge.RepairWarning) as caught:
        gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    reasons = " ".join(str(w.message) for w in caught)
    assert "is a Python keyword" in reasons and "unprintable" in reasons
    out, _ = gm(torch.ones(1, 2, dtype=torch.float64))
    assert torch.equal(out, torch.full((1, 2), 2.0 * 3 * 4 * 5 * 6, dtype=torch.float64))
    assert len(set(gm.meta["nirbridge"]["module_paths"].values())) == len(odd)


def test_a_repaired_name_never_takes_another_nodes_name():
    """Node 'if' is repaired to nirtorch's 'nir_node_if'; a node really named so keeps
    its name (its state_dict keys), and the repaired one moves aside."""
    nodes = {"x": nir.Input(np.array([2])), "if": nir.Scale(np.full(2, 2.0))}
    nodes["nir_node_if"] = nir.Scale(np.full(2, 3.0))
    nodes["out"] = nir.Output(np.array([2]))
    graph = nir.NIRGraph(nodes=nodes, edges=[("x", "if"), ("if", "nir_node_if"), ("nir_node_if", "out")])
    with pytest.warns(nirbridge.RepairWarning, match="'if' is a Python keyword"):
        gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    assert gm.meta["nirbridge"]["module_paths"] == {"if": "nir_node_if_", "nir_node_if": "nir_node_if"}
    assert set(gm.state_dict()) == {"nir_node_if_.scale", "nir_node_if.scale"}
    assert torch.equal(gm.nir_node_if.scale, torch.full((2,), 3.0, dtype=torch.float64))


def test_replaced_submodules_are_used(rng):
    graph = chain(nir.Scale(np.full(2, 2.0)), shape=[2])
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    x = torch.ones(1, 2, dtype=torch.float64)
    assert torch.equal(gm(x)[0], 2 * x)
    gm.add_module("n0", nirbridge.layers.Scale(torch.full((2,), 3.0, dtype=torch.float64)))
    assert torch.equal(gm(x)[0], 3 * x)  # the fast submodule lookup reads _modules live
    gm.n0 = nirbridge.layers.Scale(torch.full((2,), 4.0, dtype=torch.float64))
    assert torch.equal(gm(x)[0], 4 * x)
    gm._modules["n0"] = nirbridge.layers.Scale(torch.full((2,), 5.0, dtype=torch.float64))  # as torch.ao does
    assert torch.equal(gm(x)[0], 5 * x)
    seen = []
    hook = gm.n0.register_forward_hook(lambda module, args, out: seen.append(out))
    gm(x)
    assert len(seen) == 1 and torch.equal(seen[0], 5 * x)
    hook.remove()
    copied = pickle.loads(pickle.dumps(gm))
    assert torch.equal(copied(x)[0], 5 * x)


def test_the_graph_keeps_call_module_nodes_for_fx_tools():
    """The generated forward calls ``self._modules[name]``; the graph, and what fx
    traces from the module, still hold ``call_module`` nodes that passes and tools read."""
    graph = chain(nir.Affine(np.eye(2), np.zeros(2)), nir.Linear(np.eye(2)), shape=[2])
    gm = nirbridge.nir_to_torch(graph)
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["n0", "n1"]
    checks = nirbridge.checks
    tracer = torch.fx.Tracer(autowrap_functions=(checks.check_step, checks.unbatch, checks.stamped))
    retraced = tracer.trace(gm)
    assert [n.target for n in retraced.nodes if n.op == "call_module"] == ["n0", "n1"]


def test_a_failing_call_prints_nothing(capsys):
    """fx's wrapper printed the generated code to stderr when a call raised; the
    module's own call raises the error and prints nothing."""
    gm = nirbridge.nir_to_torch(chain(nir.Scale(np.full(2, 2.0)), shape=[2]))
    gm.n0 = torch.nn.Linear(3, 3)  # a replacement that does not fit
    with pytest.raises(RuntimeError):
        gm(torch.ones(1, 2))
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- dt sanity, trainable


BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"


def test_a_dt_too_large_for_the_time_constants_warns_with_the_likely_dt():
    with pytest.warns(nirbridge.DtWarning) as caught:
        gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-3)  # the paper's file means 1e-4
    message = str(caught[0].message)
    assert "at dt = 0.001 s, forward Euler overshoots or blows up" in message
    assert "'lif1.lif' (CubaLIF): dt/tau_syn = 4.5, dt/tau_mem = 1" in message
    assert "'lif2' (CubaLIF): dt/tau_syn = 5, dt/tau_mem = 4.5" in message
    assert "its exporter likely meant dt = 0.0001 s" in message
    # what the warning is about: the membranes blow up
    _, state = gm(torch.ones(2, 12))
    for _ in range(200):
        _, state = gm(torch.ones(2, 12), state)
    assert not torch.isfinite(state["nodes"]["lif2"].v).all() or state["nodes"]["lif2"].v.abs().max() > 1e6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nirbridge.nir_to_torch(BRAILLE, dt=1e-4)  # fits: no warning


def test_an_assumed_dt_is_said_once_and_a_dt_other_than_the_recorded_one_warns():
    graph = nirbridge.read(BRAILLE)
    with pytest.warns(nirbridge.AssumedDtWarning, match=r"records no time step .* dt = 0.0001 s"):
        gm = nirbridge.nir_to_torch(graph)
    assert gm.meta["nirbridge"]["dt"] == 1e-4
    graph.metadata["dt"] = 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nirbridge.nir_to_torch(graph)
        nirbridge.nir_to_torch(graph, dt=1e-4)
    with pytest.warns(
        nirbridge.DtWarning,
        match=r"dt=5e-05\) differs from the dt the graph records \(metadata\['dt'\] = 0.0001 s\)",
    ):
        nirbridge.nir_to_torch(graph, dt=5e-5)
    assert issubclass(nirbridge.AssumedDtWarning, nirbridge.DtWarning)
    # the assumed-dt warning is a category of its own, so it can be filtered alone
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", nirbridge.AssumedDtWarning)
        graph.metadata = {}
        nirbridge.nir_to_torch(graph)


def test_trainable_neuron_parameters_train_and_export():
    graph = nirbridge.read(BRAILLE)
    gm = nirbridge.nir_to_torch(graph, dt=1e-4, trainable=("tau_mem", "v_threshold"))
    lif = gm.get_submodule("lif1.lif")
    names = dict(gm.named_parameters())
    # tau_mem trains in log space (tau_mem_log); the threshold as itself
    assert {"lif1.lif.tau_mem_log", "lif1.lif.v_threshold", "lif2.tau_mem_log", "lif2.v_threshold"} <= set(
        names
    )
    assert "lif1.lif.tau_syn" not in names and isinstance(lif.tau_syn, torch.Tensor)
    assert "lif1.lif.tau_mem" not in names and isinstance(lif.tau_mem, torch.Tensor)
    untrained = nirbridge.nir_to_torch(graph, dt=1e-4)
    assert list(gm.state_dict()) == list(untrained.state_dict())  # the same keys either way
    assert torch.equal(lif.tau_mem, untrained.get_submodule("lif1.lif").tau_mem)  # exactly, at first
    x = (torch.rand(40, 4, 12, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    optimiser = torch.optim.Adam(
        [p for n, p in names.items() if "tau_mem" in n or "v_threshold" in n], lr=1e-2
    )
    before = {name: getattr(lif, name).detach().clone() for name in ("tau_mem", "v_threshold")}
    loss = nirbridge.run(gm, x).output.mean()
    loss.backward()
    assert lif.tau_mem_log.grad is not None and lif.tau_mem_log.grad.abs().sum() > 0
    assert lif.v_threshold.grad is not None and lif.v_threshold.grad.abs().sum() > 0
    optimiser.step()
    exported = nirbridge.torch_to_nir(gm)
    for name in ("tau_mem", "v_threshold"):
        trained = getattr(lif, name).detach().numpy()
        assert not np.array_equal(trained, before[name].numpy())
        np.testing.assert_array_equal(getattr(exported.nodes["lif1.lif"], name), trained)
    assert (exported.nodes["lif1.lif"].tau_mem > 0).all()
    everything = nirbridge.nir_to_torch(graph, dt=1e-4, trainable=True)
    assert {"lif2.tau_syn_log", "lif2.w_in", "lif2.r", "lif2.v_leak", "lif2.v_reset"} <= dict(
        everything.named_parameters()
    ).keys()
    with pytest.raises(
        nirbridge.ParameterError, match=r"no parameter\(s\) \['beta'\]; they have \['r', 'tau_mem'"
    ):
        nirbridge.nir_to_torch(graph, dt=1e-4, trainable=("beta",))


def test_negative_time_constants_load_but_cannot_train():
    """A file with negative tau (the spyx SHD network) loads with allow_negative_tau=True,
    but its tau cannot train in log space: the error names the node."""
    shd = EXAMPLES / "spyx_at_00e6ba49__research__paper__spyx_shd.nir"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        with pytest.raises(
            nirbridge.ParameterError, match=r"node '[^']+' \(LIF\): tau holds values at or below 0 \(lowest -"
        ):
            nirbridge.nir_to_torch(shd, allow_negative_tau=True, trainable=("tau",))
        gm = nirbridge.nir_to_torch(shd, allow_negative_tau=True, trainable=("v_threshold",))
    assert any(n.endswith("v_threshold") for n, _ in gm.named_parameters())


def test_a_graph_of_stateless_layers_needs_no_dt():
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Linear(np.eye(3)),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "fc"), ("fc", "output")],
        type_check=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nirbridge.nir_to_torch(graph)


def test_the_dt_check_leaves_bad_parameters_to_the_conversion():
    lif = nir.LIF(np.full(4, 1e-4), np.ones(4), np.zeros(4), np.ones(4), np.zeros(4))
    lif.r = np.ones(3)  # does not fit tau's shape (nir's constructor refuses it; files can hold it)
    graph = nir.NIRGraph(
        nodes={"input": nir.Input(np.array([4])), "lif": lif, "output": nir.Output(np.array([4]))},
        edges=[("input", "lif"), ("lif", "output")],
        type_check=False,
    )
    with (
        pytest.raises(nirbridge.ShapeMismatchError, match=r"'lif'.*\(r\)"),
        pytest.warns(nirbridge.DtWarning),
    ):
        nirbridge.nir_to_torch(graph, dt=1e-3)  # the dt/tau warning, then the shapes' error, not numpy's
    graph.nodes["lif"].r = np.array(["a"] * 4)
    with pytest.raises(nirbridge.ParameterError, match=r"'lif' \(LIF\): r must be numbers"):
        nirbridge.nir_to_torch(graph, dt=1e-3)  # the parameter check, before the dt check
    graph.nodes["lif"] = nir.LIF(np.full(4, 1e-4), np.ones(4), np.zeros(4), np.ones(4), np.zeros(4))
    with pytest.warns(nirbridge.DtWarning, match="'lif' \\(LIF\\): dt/tau = 10"):
        nirbridge.nir_to_torch(graph, dt=1e-3)


# ----------------------------------------------------------------------------- hostile arguments


def _dense() -> nir.NIRGraph:
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(weight=np.ones((2, 3)), bias=np.zeros(2)),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "fc"), ("fc", "output")],
    )


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"dtype": "float32"}, r"dtype='float32'\) takes a torch.dtype; pass torch.float32"),
        ({"dtype": torch.int32}, r"must be a floating dtype"),
        ({"device": "bogus"}, r"device='bogus'\) is not a device torch knows"),
        ({"node_map": [1, 2]}, r"node_map=...\) takes a dict \{NIR node class: fn\}, got a list"),
        (
            {"node_map": {"Affine": lambda node: torch.nn.Identity()}},
            r"key 'Affine' is a string.*use nir.Affine",
        ),
        ({"node_map": {int: lambda node: None}}, r"key <class 'int'> is not a NIR node class"),
        ({"node_map": {nir.Affine: 3}}, r"the entry for nir.Affine is a int"),
        ({"default_map": {"LIF": None}}, r"default_map=...\): key 'LIF' is a string.*use nir.LIF"),
    ],
)
def test_bad_arguments_are_parameter_errors_saying_what_to_pass(kwargs, says):
    with pytest.raises(nirbridge.ParameterError, match=says):
        nirbridge.nir_to_torch(_dense(), **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a torch that sees no GPU")
def test_cuda_on_a_machine_without_one_says_so():
    with pytest.raises(nirbridge.ParameterError, match=r"device='cuda'\): this torch sees no CUDA GPU"):
        nirbridge.nir_to_torch(_dense(), device="cuda")


def test_cuda_devices_past_the_last_are_refused():
    index = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(nirbridge.ParameterError, match=r"device='cuda:\d+'"):
        nirbridge.nir_to_torch(_dense(), device=f"cuda:{index}")


def test_broken_graph_structures_are_named():
    graph = _dense()
    graph.edges = None
    with pytest.raises(nirbridge.GraphStructureError, match="has edges of type NoneType"):
        nirbridge.nir_to_torch(graph)
    graph = _dense()
    graph.nodes[3] = graph.nodes.pop("fc")
    with pytest.raises(
        nirbridge.GraphStructureError, match=r"node key 3 is a int; NIR node names are strings"
    ):
        nirbridge.nir_to_torch(graph)
    graph = _dense()
    graph.nodes["fc"] = "Affine"
    with pytest.raises(nirbridge.GraphStructureError, match=r"node 'fc' is a str, not a NIR node"):
        nirbridge.nir_to_torch(graph)


def test_graphs_nested_past_the_limit_are_refused_before_any_recursion():
    from nirbridge.limits import MAX_NESTING

    graph = _dense()
    for _ in range(1200):  # the old recursive build overflowed Python's stack here
        graph = nir.NIRGraph(
            nodes={"input": nir.Input(np.array([3])), "g": graph, "output": nir.Output(np.array([2]))},
            edges=[("input", "g"), ("g", "output")],
            type_check=False,
        )
    with pytest.raises(nirbridge.GraphStructureError, match=f"graphs nest more than {MAX_NESTING} deep"):
        nirbridge.nir_to_torch(graph)


def test_graphs_nested_to_the_limit_build_step_and_run():
    from nirbridge.limits import MAX_NESTING

    graph = _dense()
    for _ in range(MAX_NESTING):
        graph = nir.NIRGraph(
            nodes={"input": nir.Input(np.array([3])), "g": graph, "output": nir.Output(np.array([2]))},
            edges=[("input", "g"), ("g", "output")],
            type_check=False,
        )
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    out, _ = gm(x)
    torch.testing.assert_close(out, torch.tensor([[6.0, 6.0]], dtype=torch.float64), rtol=0, atol=0)
    result = nirbridge.run(gm, x.expand(4, 1, 3), record="all")
    torch.testing.assert_close(result.output, torch.full((4, 1, 2), 6.0, dtype=torch.float64), rtol=0, atol=0)


def test_duplicate_edges_count_once_with_a_repair_warning():
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "scale": nir.Scale(np.array([2.0, 3.0])),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "scale"), ("scale", "output")],
    )
    graph.edges.append(("input", "scale"))  # nir's constructor refuses it; files and code can hold it
    with pytest.warns(nirbridge.RepairWarning, match=r"edges listed more than once: 'input' -> 'scale'"):
        gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    out, _ = gm(torch.tensor([[1.0, 1.0]], dtype=torch.float64))
    assert out.tolist() == [[2.0, 3.0]]  # the input once, not twice


def test_a_user_module_of_the_wrong_shape_is_named_when_stepped_and_run():
    graph = _dense()
    gm = nirbridge.nir_to_torch(graph, node_map={nir.Affine: lambda node: torch.nn.Linear(3, 5)})
    with pytest.raises(
        nirbridge.ShapeMismatchError, match=r"node 'fc': its module \(from node_map\) returned"
    ):
        gm(torch.ones(1, 3))
    with pytest.raises(nirbridge.ShapeMismatchError, match=r"returned shape \[4, 1, 5\].*\[T, B, 2\]"):
        nirbridge.run(gm, torch.ones(4, 1, 3))
    fine = nirbridge.nir_to_torch(graph, node_map={nir.Affine: lambda node: torch.nn.Linear(3, 2)})
    assert fine(torch.ones(1, 3))[0].shape == (1, 2)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("groups", np.array([1, 1]), "groups must be one whole number"),
        ("groups", np.nan, "groups must be whole numbers"),
        ("groups", "one", "groups must be whole numbers, got text"),
        ("dilation", b"\xff\xfe", "dilation must be whole numbers, got text"),
        ("dilation", 0, r"dilation \[0\] must be 1 or more"),
        ("padding", -2, r"padding \[-2\] must be 0 or more"),
        ("stride", 1.5, "stride must be whole numbers"),
        ("padding", "full", "padding must be 'same', 'valid' or integers"),
    ],
)
def test_conv_fields_that_are_not_usable_whole_numbers_are_named(field, value, says):
    conv = nir.Conv2d(None, np.ones((2, 1, 3, 3)), 1, 1, 1, 1, np.zeros(2))
    setattr(conv, field, value)
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([1, 6, 6])),
            "conv": conv,
            "output": nir.Output(np.array([2, 6, 6])),
        },
        edges=[("input", "conv"), ("conv", "output")],
        type_check=False,
    )
    with pytest.raises(nirbridge.ParameterError, match=r"node 'conv' \(Conv2d\): " + says):
        nirbridge.nir_to_torch(graph)


@pytest.mark.parametrize(
    ("cls", "fields", "size", "says"),
    [
        (nir.SumPool2d, {"kernel_size": 0}, 6, r"kernel_size \[0\] must be 1 or more"),
        (nir.SumPool2d, {"padding": -1}, 6, r"padding \[-1\] must be 0 or more"),
        (nir.AvgPool2d, {"stride": 0}, 6, r"stride \[0\] must be 1 or more"),
        (nir.AvgPool2d, {"padding": 2}, 6, r"padding \[2, 2\] is more than half the kernel"),
        (nir.SumPool2d, {"kernel_size": 5}, 2, r"kernel \[5, 5\] is larger than its input \[2, 2\]"),
    ],
)
def test_pooling_fields_and_kernels_that_cannot_pool_are_named(cls, fields, size, says):
    pool = cls(kernel_size=np.array([2, 2]), stride=np.array([2, 2]), padding=np.array([0, 0]))
    for field, value in fields.items():
        setattr(pool, field, value)
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([1, size, size])),
            "pool": pool,
            "output": nir.Output(np.array([1, 1, 1])),
        },
        edges=[("input", "pool"), ("pool", "output")],
        type_check=False,
    )
    with pytest.raises(nirbridge.NirBridgeError, match=rf"node 'pool' \({cls.__name__}\): " + says):
        nirbridge.nir_to_torch(graph)


def test_a_conv_kernel_larger_than_its_padded_input_is_named():
    conv = nir.Conv2d(None, np.ones((2, 1, 5, 5)), 1, 0, 1, 1, np.zeros(2))
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([1, 2, 2])),
            "conv": conv,
            "output": nir.Output(np.array([2, 1, 1])),
        },
        edges=[("input", "conv"), ("conv", "output")],
        type_check=False,
    )
    with pytest.raises(
        nirbridge.ShapeMismatchError, match=r"kernel \[5, 5\] .* is larger than its input \[2, 2\]"
    ):
        nirbridge.nir_to_torch(graph)


@pytest.mark.parametrize(
    "shape", [np.array([np.nan]), np.array([np.inf]), np.array(["abc"]), b"\xff\xfe", np.array([0])]
)
def test_input_and_output_shapes_that_are_not_sizes_are_named(shape):
    for node in ("input", "output"):
        graph = _dense()
        kind = "Input" if node == "input" else "Output"
        key = "input_type" if node == "input" else "output_type"
        setattr(graph.nodes[node], key, {node: shape})
        with pytest.raises(nirbridge.ParameterError, match=rf"{kind} node '{node}': shape"):
            nirbridge.nir_to_torch(graph)


def test_user_modules_that_return_no_tensor_are_named():
    graph = _dense()
    gm = nirbridge.nir_to_torch(graph, node_map={nir.Affine: lambda node: _Pair()})
    with pytest.raises(nirbridge.ShapeMismatchError, match=r"node 'fc': .* returned a tuple, not a tensor"):
        gm(torch.ones(1, 3))
    with pytest.raises(nirbridge.ShapeMismatchError, match=r"returned a tuple, not a tensor"):
        nirbridge.run(gm, torch.ones(4, 1, 3))


class _Pair(torch.nn.Module):
    def forward(self, x):
        return x, x


def test_edges_out_of_output_nodes_and_odd_types_are_refused():
    graph = _dense()
    graph.edges.append(("output", "fc"))
    with pytest.raises(
        nirbridge.GraphStructureError, match=r"edge 'output' -> 'fc' leaves Output node 'output'"
    ):
        nirbridge.nir_to_torch(graph)
    graph = _dense()
    graph.nodes["output"].output_type = "shape"
    with pytest.raises(nirbridge.ParameterError, match=r"Output node 'output': output_type is 'shape'"):
        nirbridge.nir_to_torch(graph)
    graph = _dense()
    graph.nodes["input"].input_type = None  # no shape declared: inferred where the graph fixes one
    assert nirbridge.nir_to_torch(graph)(torch.ones(1, 3))[0].shape == (1, 2)


@pytest.mark.parametrize(
    ("layer", "cast", "becomes"),
    [
        (nir.Scale(np.array([1e-9, 1.0])), "half", "0"),
        (nir.Scale(np.array([1e5, 1.0])), "half", "infinity"),
        (nir.Scale(np.array([1e-46 * 1e8, 1.0])), "bfloat16", None),  # bfloat16 has float32's range
    ],
)
def test_a_dtype_change_that_turns_a_value_into_0_or_infinity_is_refused(layer, cast, becomes):
    """`m.half()` after the build turned a scale of 1e-9 into 0 and 1e5 into inf
    without a word; the build refuses both."""
    gm = nirbridge.nir_to_torch(chain(layer, shape=[2]), dtype=torch.float32)
    before = gm.n0.scale.clone()
    if becomes is None:
        getattr(gm, cast)()
        assert gm.n0.scale.dtype == getattr(torch, cast)
        return
    with pytest.raises(nirbridge.ParameterError, match=rf"n0.scale \(node 'n0'\) holds .* as {becomes}"):
        getattr(gm, cast)()
    assert gm.n0.scale.dtype == torch.float32 and torch.equal(gm.n0.scale, before)  # nothing changed
    with pytest.raises(nirbridge.ParameterError):
        gm.to(torch.float16)
    gm.double()  # wider: always allowed
    assert gm.n0.scale.dtype == torch.float64


def test_load_state_dict_refuses_what_the_build_refuses_before_loading_anything():
    """A wrong-shaped tau raised torch's RuntimeError; a negative tau loaded silently."""
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    good = copy.deepcopy(gm.state_dict())
    cases = [
        (
            {"lif2.tau_mem": torch.ones(3)},
            r"lif2.tau_mem \(node 'lif2'\) has shape \(3,\), but the module's is \(7,\)",
        ),
        (
            {"lif2.tau_mem": -good["lif2.tau_mem"]},
            r"lif2.tau_mem \(node 'lif2'\) is .* a time constant must be above 0",
        ),
        ({"lif2.tau_mem": torch.zeros(7)}, "must be above 0"),
        (
            {"fc2.weight": torch.full_like(good["fc2.weight"], float("nan"))},
            r"fc2.weight \(node 'fc2'\) holds NaN",
        ),
        (
            {"fc2.weight": torch.full(good["fc2.weight"].shape, 1e300, dtype=torch.float64)},
            "as 0 or infinity",
        ),
    ]
    for change, says in cases:
        with pytest.raises(nirbridge.ParameterError, match=says):
            gm.load_state_dict({**good, **change})
        assert all(torch.equal(v, good[k]) for k, v in gm.state_dict().items())  # nothing loaded
    negative = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, allow_negative_tau=True)
    negative.load_state_dict({**good, "lif2.tau_mem": -good["lif2.tau_mem"]})  # as it was built to
    assert bool((negative.lif2.tau_mem < 0).all())


def test_a_subgraph_that_records_another_dt_warns():
    inner = nir.NIRGraph(
        nodes={"i": nir.Input(np.array([2])), "s": nir.Scale(np.ones(2)), "o": nir.Output(np.array([2]))},
        edges=[("i", "s"), ("s", "o")],
        metadata={"dt": 1e-3},
    )
    graph = nir.NIRGraph(
        nodes={"x": nir.Input(np.array([2])), "sub": inner, "y": nir.Output(np.array([2]))},
        edges=[("x", "sub"), ("sub", "y")],
        metadata={"dt": 1e-4},
    )
    with pytest.warns(
        nirbridge.DtWarning,
        match=r"subgraph 'sub' records dt = 0.001, but the module steps every node at dt = 0.0001",
    ):
        nirbridge.nir_to_torch(graph)
    inner.metadata["dt"] = 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("error", nirbridge.DtWarning)
        nirbridge.nir_to_torch(graph)

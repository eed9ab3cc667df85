"""nirbridge.run against the independent numpy reference (tests/reference.py) and
against stepping the same module: outputs, states, records, chunking, gradients, errors."""

from __future__ import annotations

import copy
import warnings

import nir
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils import _pytree as pytree

import nirbridge
from tests.conftest import EXAMPLES, input_names
from tests.reference import Reference
from tests.test_interpret import USABLE, neuron_params, random_graphs, recurrent_block

DT = 1e-4


def output_names(graph):
    return [n for n, node in graph.nodes.items() if isinstance(node, nir.Output)]


def step_module(gm, xs: dict[str, torch.Tensor], state=None):
    """Stepping, the way users do it: outputs stacked over time, and the last state."""
    names = list(xs)
    outs = []
    for t in range(xs[names[0]].shape[0]):
        out, state = gm(*(xs[n][t] for n in names), state=state)
        outs.append(out)
    if isinstance(outs[0], dict):
        return {k: torch.stack([o[k] for o in outs]) for k in outs[0]}, state
    return torch.stack(outs), state


def reference_run(graph, xs: dict[str, np.ndarray], dt):
    """The numpy reference over all steps: outputs and every node's value per step."""
    ref = Reference(graph, dt)
    steps = next(iter(xs.values())).shape[0]
    outputs, values, states = [], [], []
    for t in range(steps):
        outputs.append(ref.step({n: x[t] for n, x in xs.items()}))
        nested = {f"{n}.{k}": v for n, sub in ref.sub.items() for k, v in sub.values.items()}
        values.append({**ref.values, **nested})
        states.append(copy.deepcopy(ref.state))
    return outputs, values, states


def assert_same_tree(a, b):
    leaves_a, spec_a = pytree.tree_flatten(a)
    leaves_b, spec_b = pytree.tree_flatten(b)
    assert spec_a == spec_b
    for x, y in zip(leaves_a, leaves_b):
        assert torch.equal(x, y)


def lif_graph(rng, n_in=3, n=6, recurrent=True):
    nodes = {
        "input": nir.Input(np.array([n_in])),
        "fc": nir.Affine(rng.normal(size=(n, n_in)) * 3, rng.normal(size=n)),
        "lif": neuron_params(rng, n, "LIF"),
        "w_rec": nir.Linear(rng.normal(size=(n, n))),
        "li": neuron_params(rng, n, "CubaLI"),
        "output": nir.Output(np.array([n])),
    }
    edges = [("input", "fc"), ("fc", "lif"), ("lif", "w_rec"), ("lif", "li"), ("li", "output")]
    edges += [("w_rec", "lif")] if recurrent else [("w_rec", "li")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


# ----------------------------------------------------------------------------- exactness


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from([None, 1, 3, 8]))
def test_random_graphs_run_like_the_reference_and_like_stepping(case, chunk):
    graph, seed = case
    rng = np.random.default_rng(seed + 2)
    shapes = {n: tuple(int(v) for v in graph.nodes[n].input_type["input"]) for n in input_names(graph)}
    steps, batch = 20, 2
    arrays = {n: rng.uniform(-1, 3, (steps, batch, *shape)) for n, shape in shapes.items()}
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    xs = {n: torch.from_numpy(a) for n, a in arrays.items()}
    result = nirbridge.run(gm, xs, chunk=chunk, record="all")

    expected, values, _ = reference_run(graph, arrays, DT)
    outputs = output_names(graph)
    got = {outputs[0]: result.output} if len(outputs) == 1 else result.output
    for name in outputs:
        want = np.stack([e[name] for e in expected])
        np.testing.assert_allclose(got[name].detach().numpy(), want, rtol=1e-12, atol=1e-12, err_msg=name)
    for key, record in result.records.items():  # node outputs at the top level
        if key in graph.nodes and not isinstance(graph.nodes[key], nir.NIRGraph):
            want = np.stack([v[key] for v in values])
            np.testing.assert_allclose(record.detach().numpy(), want, rtol=1e-12, atol=1e-12, err_msg=key)

    stepped, state = step_module(gm, xs)
    stepped = {outputs[0]: stepped} if len(outputs) == 1 else stepped
    for name in outputs:
        assert torch.equal(got[name], stepped[name]), name
    assert_same_tree(result.state, state)


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
@pytest.mark.parametrize("name", sorted(USABLE))
def test_real_files_run_like_the_reference_and_like_stepping(name):
    dt = USABLE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        graph = nirbridge.read(EXAMPLES / name)
        negative = "spyx_shd" in name  # trained with some negative time constants, loaded as they are
        gm64 = nirbridge.nir_to_torch(
            EXAMPLES / name, dt=dt, dtype=torch.float64, allow_negative_tau=negative
        )
        gm32 = nirbridge.nir_to_torch(EXAMPLES / name, dt=dt, allow_negative_tau=negative)
    inputs = input_names(graph)
    shape = tuple(int(v) for v in graph.nodes[inputs[0]].input_type["input"])
    rng = np.random.default_rng(3)
    steps, batch = 40, 8
    spikes = (rng.uniform(size=(steps, batch, *shape)) < 0.3) * (
        5.0 if "lif" in name and len(shape) == 1 else 1.0
    )

    # float64: the reference (spyx_shd and the repaired scnn file are checked in test_interpret)
    if "spyx_at_00e6ba49" not in name and "rockpool" not in name:
        expected, _, _ = reference_run(graph, {inputs[0]: spikes}, dt)
        result = nirbridge.run(gm64, torch.from_numpy(spikes), chunk=16)
        want = np.stack([e[output_names(graph)[0]] for e in expected])
        np.testing.assert_allclose(result.output.detach().numpy(), want, rtol=1e-12, atol=1e-12)

    # float32: bit for bit like stepping, in every layer
    x = torch.from_numpy(spikes).float()
    result = nirbridge.run(gm32, x, record="all")
    stepped, state = step_module(gm32, {inputs[0]: x})
    assert torch.equal(result.output, stepped)
    assert_same_tree(result.state, state)


def test_records_hold_every_node_and_neuron_variable_like_the_reference(rng):
    n = 4
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(rng.normal(size=(n, 3)) * 3, rng.normal(size=n)),
            "block": recurrent_block(rng, n),
            "cuba": neuron_params(rng, n, "CubaLIF"),
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "fc"), ("fc", "block"), ("block", "cuba"), ("cuba", "output")],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64).requires_grad_(False)
    x = rng.uniform(0, 3, (30, 2, 3))
    result = nirbridge.run(gm, torch.from_numpy(x), record="all", chunk=7)
    assert set(result.records) == {
        "fc",
        "block",
        "block.lif",
        "block.lif.v",
        "block.w_rec",
        "cuba",
        "cuba.i",
        "cuba.v",
    }
    _, values, states = reference_run(graph, {"input": x}, DT)
    for key in ("fc", "block", "block.lif", "block.w_rec", "cuba"):
        np.testing.assert_allclose(result.records[key], np.stack([v[key] for v in values]), atol=1e-12)
    np.testing.assert_allclose(result.records["cuba.i"], np.stack([s["cuba"][0] for s in states]), atol=1e-12)
    np.testing.assert_allclose(result.records["cuba.v"], np.stack([s["cuba"][1] for s in states]), atol=1e-12)
    assert result.records["cuba"].sum() > 0, "the test network should spike"
    assert result.spiking == {"block", "block.lif", "cuba"}  # a subgraph outputs its LIF's spikes

    # one variable at a time, and inside a subgraph
    only = nirbridge.run(gm, torch.from_numpy(x), record=["cuba.v", "block.lif"])
    assert set(only.records) == {"cuba.v", "block.lif", "block.lif.v"}
    assert torch.equal(only.records["cuba.v"], result.records["cuba.v"])
    assert torch.equal(only.records["block.lif.v"], result.records["block.lif.v"])
    outputs = nirbridge.run(gm, torch.from_numpy(x), record="outputs")
    assert set(outputs.records) == {"fc", "block", "block.lif", "block.w_rec", "cuba"}
    just = nirbridge.run(gm, torch.from_numpy(x), record=["cuba.output", "block.lif.output"])
    assert set(just.records) == {"cuba", "block.lif"}
    assert torch.equal(just.records["cuba"], result.records["cuba"])
    assert just.output.data_ptr() == just.records["cuba"].data_ptr()  # one buffer, not two


def test_chunking_and_continuing_from_a_state_change_nothing(rng):
    gm = nirbridge.nir_to_torch(lif_graph(rng), dt=DT).requires_grad_(False)
    x = torch.from_numpy(rng.uniform(0, 3, (50, 8, 3))).float()
    whole = nirbridge.run(gm, x, record="all")
    for chunk in (1, 7, 50, 1000):
        again = nirbridge.run(gm, x, record="all", chunk=chunk)
        assert torch.equal(again.output, whole.output)
        for key in whole.records:
            assert torch.equal(again.records[key], whole.records[key]), key
    first = nirbridge.run(gm, x[:20])
    kept = copy.deepcopy(first.state)
    second = nirbridge.run(gm, x[20:], state=first.state)
    assert_same_tree(first.state, kept)  # the state passed in is not mutated
    assert torch.equal(torch.cat([first.output, second.output]), whole.output)
    assert_same_tree(second.state, whole.state)
    # the state a run returns also continues stepping, and the other way round
    out, _ = gm(x[20], first.state)
    assert torch.equal(out, second.output[0])


def test_bool_spikes_and_spike_inputs(rng):
    gm = nirbridge.nir_to_torch(lif_graph(rng), dt=DT)
    spikes = torch.from_numpy(rng.uniform(size=(40, 8, 3)) < 0.5)
    as_float = nirbridge.run(gm, spikes.float(), record="all")
    as_bool = nirbridge.run(gm, spikes, record="all", bool_spikes=True)
    assert as_bool.records["lif"].dtype == torch.bool
    assert torch.equal(as_bool.records["lif"], as_float.records["lif"] != 0)
    assert as_bool.records["lif.v"].dtype == torch.float32
    assert torch.equal(as_bool.output, as_float.output)  # a CubaLI output is not spikes
    ints = nirbridge.run(gm, spikes.to(torch.int64))
    assert torch.equal(ints.output, as_float.output)


def test_single_neuron_module_and_adapter_modules(rng):
    lif = nirbridge.neurons.LIF(tau=np.full(5, 2e-3), r=np.full(5, 20.0), dt=DT)
    x = torch.from_numpy(rng.uniform(0, 3, (30, 2, 5)))  # the module holds float64 parameters
    result = nirbridge.run(lif, x)
    stepped, state = [], None
    for t in range(30):
        out, state = lif(x[t], state)
        stepped.append(out)
    assert torch.equal(result.output, torch.stack(stepped))
    assert torch.equal(result.state.v, state.v)


@pytest.mark.parametrize("backend", ["norse", "snntorch"])
def test_runs_modules_the_adapters_build(backend):
    from nirbridge.adapters import norse as norse_adapter
    from nirbridge.adapters import snntorch as snntorch_adapter

    adapter = norse_adapter if backend == "norse" else snntorch_adapter
    path = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        module = adapter.from_nir(path, dt=1e-4)
    x = (torch.rand(40, 8, 12, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    result = nirbridge.run(module, x, record="all")
    stepped, state = step_module(module, {"input": x})
    assert torch.equal(result.output, stepped)
    assert_same_tree(result.state, state)
    assert "lif1.lif.v" in result.records and "lif1.lif.i" in result.records
    if backend == "snntorch":  # snntorch's shifted, scaled state, converted back to NIR's v and i
        native = nirbridge.run(nirbridge.nir_to_torch(path, dt=1e-4), x, record="all").records
        for key in ("lif1.lif.v", "lif1.lif.i", "lif2.v"):
            torch.testing.assert_close(result.records[key], native[key], rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- training


def test_gradients_through_run_equal_stepping_gradients(rng):
    graph = lif_graph(rng)
    x = torch.from_numpy(rng.uniform(0, 3, (25, 4, 3)))
    grads = []
    for use_run in (True, False):
        gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
        out = nirbridge.run(gm, x).output if use_run else step_module(gm, {"input": x})[0]
        out.pow(2).sum().backward()
        grads.append({k: p.grad.clone() for k, p in gm.named_parameters()})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for key in grads[0]:
        torch.testing.assert_close(grads[0][key], grads[1][key], rtol=1e-12, atol=1e-12)
        assert grads[0][key].abs().sum() > 0, key


def test_gradients_reach_a_loop_whose_first_input_needs_none(rng):
    """The Input feeds the loop directly: only the delayed edge, from the second step on,
    carries gradients into the neuron; run must still step it with its surrogate."""
    n = 4
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([n])),
            "lif": neuron_params(rng, n, "LIF"),
            "w_rec": nir.Affine(rng.normal(size=(n, n)), rng.normal(size=n)),
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("w_rec", "output")],
        type_check=False,
    )
    x = torch.from_numpy(rng.uniform(0, 5, (25, 3, n)))
    grads = []
    for use_run in (True, False):
        gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
        out = nirbridge.run(gm, x).output if use_run else step_module(gm, {"input": x})[0]
        out.pow(2).sum().backward()
        grads.append({k: p.grad.clone() for k, p in gm.named_parameters()})
    for key in grads[0]:
        torch.testing.assert_close(grads[0][key], grads[1][key], rtol=1e-12, atol=1e-12)


def test_truncated_bptt_windows(rng):
    gm = nirbridge.nir_to_torch(lif_graph(rng), dt=DT)
    optimiser = torch.optim.SGD(gm.parameters(), lr=1e-3)
    x = torch.from_numpy(rng.uniform(0, 3, (60, 4, 3))).float()
    state = None
    for window in x.split(20):
        result = nirbridge.run(gm, window, state=state)
        loss = result.output.pow(2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        state = pytree.tree_map(lambda t: t.detach(), result.state)
        assert not any(t.requires_grad for t in pytree.tree_leaves(state))


# ----------------------------------------------------------------------------- conveniences


def test_paths_and_graphs_are_built_with_dt(tmp_path, rng):
    graph = lif_graph(rng)
    nirbridge.write(tmp_path / "g.nir", graph)
    x = torch.from_numpy(rng.uniform(0, 3, (10, 2, 3))).float()
    from_file = nirbridge.run(tmp_path / "g.nir", x, dt=DT)
    from_graph = nirbridge.run(graph, x, dt=DT)
    built = nirbridge.run(nirbridge.nir_to_torch(graph, dt=DT), x)
    assert torch.equal(from_file.output, built.output) and torch.equal(from_graph.output, built.output)
    assert from_file.dt == DT


def test_pickled_and_copied_modules_run_with_records(rng):
    import pickle

    gm = nirbridge.nir_to_torch(lif_graph(rng), dt=DT).requires_grad_(False)
    x = torch.from_numpy(rng.uniform(0, 3, (20, 2, 3))).float()
    original = nirbridge.run(gm, x, record="all")
    for other in (pickle.loads(pickle.dumps(gm)), copy.deepcopy(gm)):
        again = nirbridge.run(other, x, record="all")
        assert torch.equal(again.output, original.output)
        assert again.records.keys() == original.records.keys()


def test_progress_bar(rng, capsys):
    gm = nirbridge.nir_to_torch(lif_graph(rng), dt=DT)
    x = torch.zeros(30, 2, 3)
    nirbridge.run(gm, x, progress=True, chunk=10)
    assert "30/30" in capsys.readouterr().err
    nirbridge.run(gm, x, progress=False)
    nirbridge.run(gm, x)  # not a terminal: no bar
    assert capsys.readouterr().err == ""


def test_repr_lists_records(rng):
    gm = nirbridge.nir_to_torch(lif_graph(rng), dt=DT)
    text = repr(nirbridge.run(gm, torch.zeros(5, 2, 3), record="lif"))
    assert "lif.v: [5, 2, 6] float32" in text and "dt=0.0001" in text


# ----------------------------------------------------------------------------- bad input


@pytest.fixture
def gm(rng):
    return nirbridge.nir_to_torch(lif_graph(rng), dt=DT)


def test_input_shape_errors_name_the_input_and_the_expected_shape(gm):
    with pytest.raises(
        nirbridge.InputError, match=r"\[10, 2, 4\], but run takes.*\[T, B, 3\] \(\[3\] per sample"
    ):
        nirbridge.run(gm, torch.zeros(10, 2, 4))
    with pytest.raises(nirbridge.InputError) as info:  # one sample's sequence, or one step of a batch
        nirbridge.run(gm, torch.zeros(2, 3))
    assert "the sequence of one sample [T, 3]: pass x.unsqueeze(1)" in str(info.value)
    assert "one time step of a batch [B, 3]: pass x.unsqueeze(0)" in str(info.value)
    with pytest.raises(nirbridge.InputError, match=r"one sample at one time step: pass x.reshape\(1, 1, 3\)"):
        nirbridge.run(gm, torch.zeros(3))
    with pytest.raises(nirbridge.InputError, match="T = 0"):
        nirbridge.run(gm, torch.zeros(0, 2, 3))
    with pytest.raises(
        nirbridge.InputError, match="float64, but node 'fc' computes in torch.float32.*would round"
    ):
        nirbridge.run(gm, torch.zeros(4, 2, 3, dtype=torch.float64))
    x = torch.from_numpy(np.random.default_rng(2).random((6, 2, 3)) < 0.5)
    exact = nirbridge.run(gm, x.float()).output
    for dtype in (torch.bool, torch.int64, torch.float16, torch.bfloat16):  # cast exactly
        assert torch.equal(nirbridge.run(gm, x.to(dtype)).output, exact), dtype
    with pytest.raises(nirbridge.InputError, match="missing"):
        nirbridge.run(gm, {"other": torch.zeros(4, 2, 3)})


def test_a_wider_float_reaching_only_the_users_modules_runs_as_given():
    """run follows the call's dtype rule: float64 that only a user's map module takes
    is passed on as it is (that module's own float64 outputs run again)."""

    class Double(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    graph = nir.NIRGraph(
        nodes={"in": nir.Input(np.array([2])), "s": nir.Scale(np.ones(2)), "out": nir.Output(np.array([2]))},
        edges=[("in", "s"), ("s", "out")],
        type_check=False,
    )
    module = nirbridge.nir_to_torch(graph, {nir.Scale: lambda node: Double()})
    x = torch.from_numpy(np.random.default_rng(4).random((5, 3, 2)))
    out = nirbridge.run(module, x).output
    assert out.dtype == torch.float64 and torch.equal(out, 2 * x)
    assert torch.equal(nirbridge.run(module, out).output, 4 * x)
    own = nirbridge.nir_to_torch(graph)
    with pytest.raises(nirbridge.InputError, match=r"node 's' computes in torch.float32"):
        nirbridge.run(own, x)


def test_state_from_another_graph_is_rejected(gm, rng):
    other = nirbridge.nir_to_torch(lif_graph(rng, recurrent=False), dt=DT)
    foreign = nirbridge.run(other, torch.zeros(3, 2, 3)).state
    foreign["nodes"]["extra"] = foreign["nodes"]["lif"]
    with pytest.raises(nirbridge.StateError, match=r"unexpected node keys \['extra'\].*missing delayed keys"):
        nirbridge.run(gm, torch.zeros(3, 2, 3), state=foreign)
    with pytest.raises(nirbridge.StateError):
        nirbridge.run(gm, torch.zeros(3, 2, 3), state={"lif": None})


def test_unknown_records_and_bad_arguments(gm):
    with pytest.raises(nirbridge.RecordError, match="'nope' is not a node.*'fc'"):
        nirbridge.run(gm, torch.zeros(3, 2, 3), record=["nope"])
    with pytest.raises(nirbridge.RecordError, match="no state variable 'u'.*\\['v'\\]"):
        nirbridge.run(gm, torch.zeros(3, 2, 3), record=["lif.u"])
    with pytest.raises(nirbridge.ParameterError, match="chunk"):
        nirbridge.run(gm, torch.zeros(3, 2, 3), chunk=0)
    with pytest.raises(nirbridge.ParameterError, match="built for dt=0.0001"):
        nirbridge.run(gm, torch.zeros(3, 2, 3), dt=1e-3)
    with pytest.raises(nirbridge.InputError, match="run expects"):
        nirbridge.run(object(), torch.zeros(3, 2, 3))
    with pytest.raises(nirbridge.ParameterError, match="'auto', 'eager', 'compile', 'triton' or 'cpu'"):
        nirbridge.run(gm, torch.zeros(3, 2, 3), backend="jit")
    with pytest.raises(nirbridge.ParameterError, match="compile=True is backend='compile'"):
        nirbridge.run(gm, torch.zeros(3, 2, 3), compile=True, backend="eager")
    with pytest.raises(nirbridge.ParameterError, match="unknown run options \\['compiled'\\]"):
        nirbridge.SequenceModule(gm, compiled=True)


# ----------------------------------------------------------------------------- NIRGraphData


def test_records_become_nir_graph_data_that_nir_round_trips(rng, tmp_path):
    n = 4
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(rng.normal(size=(n, 3)) * 3, rng.normal(size=n)),
            "block": recurrent_block(rng, n),
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "fc"), ("fc", "block"), ("block", "output")],
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph, dt=DT).requires_grad_(False)
    result = nirbridge.run(gm, torch.from_numpy(rng.uniform(0, 3, (30, 2, 3))).float(), record="all")
    data = result.to_nir_data()
    assert isinstance(data, nir.NIRGraphData)
    assert set(data.nodes) == {"fc", "block"}
    block = data.nodes["block"]
    # a subgraph's output is its Output node's
    assert isinstance(block, nir.NIRGraphData) and set(block.nodes) == {"lif", "w_rec", "output"}
    spikes = block.nodes["lif"].observables["output"]
    assert isinstance(spikes, nir.EventData)
    assert spikes.n_neurons == n and spikes.t_max == pytest.approx(30 * DT)
    # the events give back the recorded raster, sample by sample
    gridded = spikes.to_time_gridded(DT).data  # (B, T, n), bool
    recorded = result.records["block.lif"].transpose(0, 1).numpy() != 0
    assert recorded.sum() > 0
    np.testing.assert_array_equal(gridded, recorded)
    v = block.nodes["lif"].observables["v"]
    assert isinstance(v, nir.TimeGriddedData) and v.dt == DT
    np.testing.assert_array_equal(v.data, result.records["block.lif.v"].transpose(0, 1).numpy())
    fc = data.nodes["fc"].observables["output"]
    assert fc.data.shape == (2, 30, n)

    # nir 1.0.8's write_data recurses forever on nested graph data (it iterates the
    # top level again); nirbridge.write_data writes it, nir's read_data reads it back
    nirbridge.write_data(tmp_path / "run.h5", data)
    back = nir.read_data(tmp_path / "run.h5")
    np.testing.assert_array_equal(back.nodes["block"].nodes["lif"].observables["v"].data, v.data)
    np.testing.assert_array_equal(back.nodes["block"].nodes["lif"].observables["output"].idx, spikes.idx)
    np.testing.assert_array_equal(back.nodes["block"].nodes["lif"].observables["output"].time, spikes.time)
    np.testing.assert_array_equal(back.nodes["fc"].observables["output"].data, fc.data)
    flat = nir.NIRGraphData(nodes={"fc": data.nodes["fc"]})  # what nir.write_data can write
    nir.write_data(tmp_path / "flat.h5", flat)
    np.testing.assert_array_equal(
        nirbridge.read_data(tmp_path / "flat.h5").nodes["fc"].observables["output"].data, fc.data
    )
    # nir's own check: the observables fit the graph's nodes
    data.nodes["block"].check_nodes(graph.nodes["block"])


def test_a_state_from_another_simulators_import_is_refused_by_run():
    from nirbridge.adapters import snntorch as snntorch_adapter

    path = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
    x = torch.zeros(5, 2, 12)
    other = nirbridge.run(snntorch_adapter.from_nir(path, dt=1e-4), x).state
    with pytest.raises(nirbridge.StateError, match="'lif1.lif' holds a tuple, this module's a CubaLIState"):
        nirbridge.run(nirbridge.nir_to_torch(path, dt=1e-4), x, state=other)


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")
def test_record_must_name_nodes(gm):
    for record in (123, None, b"lif", {"lif": 1}):
        with pytest.raises(nirbridge.RecordError, match=r"run\(record=.*\): give a node path"):
            nirbridge.run(gm, torch.zeros(3, 2, 3), record=record)
    assert nirbridge.run(gm, torch.zeros(3, 2, 3), record=("lif",)).records["lif"].shape[:2] == (3, 2)


def test_a_state_of_another_batch_is_a_state_error(gm):
    state = nirbridge.run(gm, torch.zeros(3, 4, 3)).state
    with pytest.raises(nirbridge.StateError, match="holds a batch of 4 but the input a batch of 8"):
        nirbridge.run(gm, torch.zeros(3, 8, 3), state=state)


def test_runs_that_cannot_fit_are_refused_before_they_start(gm, monkeypatch):
    from nirbridge import limits

    monkeypatch.setattr(limits, "available", lambda device=None: 64 << 20)  # 64 MiB free
    steps = 10**8  # a view: the input itself costs nothing
    x = torch.zeros(1, 32, 3).expand(steps, 32, 3)
    with pytest.raises(
        nirbridge.MemoryLimitError, match=r"run over T = 100000000 steps at batch 32 \(outputs, records"
    ):
        nirbridge.run(gm, x, record="all")
    gm.requires_grad_(True)
    with pytest.raises(nirbridge.MemoryLimitError, match=r"what autograd keeps.*under torch.no_grad\(\)"):
        nirbridge.run(gm, x[: 10**6])
    with torch.no_grad():
        assert nirbridge.run(gm, x[:1000]).output.shape[0] == 1000  # 1000 x 32 x 3 floats fit


def test_inputs_without_data_and_odd_options_are_refused(gm):
    with pytest.raises(nirbridge.InputError, match="is a meta tensor"):
        nirbridge.run(gm, torch.zeros(3, 2, 3, device="meta"))
    with pytest.raises(nirbridge.InputError, match="is a torch.sparse_coo tensor"):
        nirbridge.run(gm, torch.zeros(3, 2, 3).to_sparse())
    for option in ({"compile": "no"}, {"bool_spikes": "no"}, {"progress": "yes"}):
        with pytest.raises(nirbridge.ParameterError, match=r"give True or False"):
            nirbridge.run(gm, torch.zeros(3, 2, 3), **option)


# ----------------------------------------------------------------------------- silence and summaries


def two_layer_lif(threshold2: float = 1.0, dt_in_metadata: bool = True) -> nir.NIRGraph:
    """input -> fc1 -> lif1 -> fc2 -> lif2 -> output, with lif2's threshold chosen."""
    rng = np.random.default_rng(3)
    ones = np.ones(5)
    nodes = {
        "input": nir.Input(np.array([4])),
        "fc1": nir.Linear(rng.uniform(0.5, 1.5, size=(5, 4)) * 4),
        "lif1": nir.LIF(tau=ones * 2e-3, r=ones * 10, v_leak=0 * ones, v_threshold=ones, v_reset=0 * ones),
        "fc2": nir.Linear(np.eye(3, 5) * 2),
        "lif2": nir.LIF(
            tau=np.ones(3) * 2e-3,
            r=np.ones(3) * 10,
            v_leak=np.zeros(3),
            v_threshold=np.full(3, threshold2),
            v_reset=np.zeros(3),
        ),
        "output": nir.Output(np.array([3])),
    }
    edges = [("input", "fc1"), ("fc1", "lif1"), ("lif1", "fc2"), ("fc2", "lif2"), ("lif2", "output")]
    return nir.NIRGraph(nodes, edges, metadata={"dt": DT} if dt_in_metadata else {}, type_check=False)


def bernoulli(steps=80, batch=3, width=4, p=0.5, seed=0):
    return (torch.rand(steps, batch, width, generator=torch.Generator().manual_seed(seed)) < p).float()


def test_a_silent_layer_is_named_in_one_warning_with_the_dt_hint():
    gm = nirbridge.nir_to_torch(two_layer_lif(threshold2=1e6))
    x = bernoulli()
    with pytest.warns(nirbridge.SilentNetworkWarning) as caught:
        result = nirbridge.run(gm, x, record="all")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert result.records["lif1"].sum() > 0  # the first layer fires, the second never does
    assert "no spike in 'lif2' over 80 steps" in message and "'lif1'" not in message
    assert "output 'output'" not in message  # lif2's output: named once, as its node
    assert "runs at dt = 0.0001 s: check that this is the time step it was trained at" in message
    # without records, the output is named, with the way to find the layer that stops
    with pytest.warns(nirbridge.SilentNetworkWarning, match=r"no spike in output 'output'.*record='outputs'"):
        nirbridge.run(gm, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nirbridge.run(nirbridge.nir_to_torch(two_layer_lif()), x, record="all")  # it spikes: no warning


def test_a_silent_network_at_an_assumed_dt_says_to_pass_dt():
    with pytest.warns(nirbridge.AssumedDtWarning):
        gm = nirbridge.nir_to_torch(two_layer_lif(threshold2=1e6, dt_in_metadata=False))
    with pytest.warns(nirbridge.SilentNetworkWarning) as caught:
        nirbridge.run(gm, bernoulli(), record="lif2")
    message = str(caught[0].message)
    assert "records no time step, so it runs at the assumed dt = 0.0001 s" in message
    assert "nir_to_torch(..., dt=...) (--dt on the command line)" in message
    # the N-MNIST CNN at the assumed dt: silent from its first spiking layer on
    with pytest.warns(nirbridge.AssumedDtWarning):
        cnn = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir")
    x = (torch.rand(10, 1, 2, 34, 34, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    with pytest.warns(
        nirbridge.SilentNetworkWarning, match=r"no spike in '1', '3', '6', '10', '12' over 10 "
    ):
        nirbridge.run(cnn, x, record="outputs")


def test_summary_counts_spikes_and_rates_per_record():
    gm = nirbridge.nir_to_torch(two_layer_lif())
    x = bernoulli(steps=50, batch=2)
    with torch.no_grad():
        result = nirbridge.run(gm, x, record=["lif1", "lif2.v"])
    summary = result.summary()
    assert sorted(summary) == ["lif1", "lif1.v", "lif2.v", "output"]
    spikes = result.records["lif1"].numpy()
    expected_total = int(np.count_nonzero(spikes))
    lif1 = summary["lif1"]
    assert lif1.spikes and lif1.neurons == 5 and lif1.total == expected_total > 0
    assert lif1.per_step == pytest.approx(expected_total / (50 * 2 * 5))
    assert lif1.rate == pytest.approx(expected_total / (50 * 2 * 5 * DT))  # Hz
    assert lif1.silent == int(np.sum(spikes.sum(axis=(0, 1)) == 0))
    out = summary["output"]  # lif2's spikes: the output, not recorded
    assert out.spikes and out.total == int(np.count_nonzero(result.output.numpy()))
    v = summary["lif2.v"]
    values = result.records["lif2.v"].double().numpy()
    assert not v.spikes and v.total is None
    assert (v.minimum, v.mean, v.maximum) == pytest.approx((values.min(), values.mean(), values.max()))
    table = str(summary).splitlines()
    assert table[0].split() == ["record", "kind", "values", "summary"]
    row = next(line for line in table if line.startswith("lif1 "))
    assert row.split()[:5] == ["lif1", "spikes", "5", "neurons", str(expected_total)]
    assert f"{lif1.rate:.4g} Hz" in row and f"{lif1.silent} of 5 neurons silent" in row


def test_runs_know_the_thresholds_of_recorded_membranes():
    gm = nirbridge.nir_to_torch(two_layer_lif(threshold2=0.7))
    result = nirbridge.run(gm, bernoulli(), record=["lif2.v", "lif1.output"])
    assert list(result.thresholds) == ["lif2.v"]
    np.testing.assert_array_equal(result.thresholds["lif2.v"].numpy(), np.full(3, np.float32(0.7)))


def test_modules_that_keep_their_state_inside_run_step_by_step():
    import snntorch as snn
    from snntorch import utils as snn_utils

    torch.manual_seed(0)
    neuron = dict(beta=0.8, init_hidden=True, reset_mechanism="zero")
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 6), snn.Leaky(**neuron), torch.nn.Linear(6, 2), snn.Leaky(**neuron, output=True)
    )
    with torch.no_grad():
        for layer in (net[0], net[2]):
            layer.weight.uniform_(0.2, 1.0)
    x = bernoulli(steps=30, batch=3)
    snn_utils.reset(net)
    with torch.no_grad():
        expected = torch.stack([net(x_t)[0] for x_t in x])  # snntorch's own loop
        first = nirbridge.run(net, x[:20])  # resets the membranes first: the loop above left them set
        rest = nirbridge.run(net, x[20:], state=first.state)  # continues from them
    assert expected.sum() > 0
    assert torch.equal(torch.cat([first.output, rest.output]), expected)


def test_an_output_that_is_a_recorded_node_is_one_tensor_with_gradients_too():
    gm = nirbridge.nir_to_torch(two_layer_lif())
    x = bernoulli(steps=12, batch=2)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            result = nirbridge.run(gm, x, record="lif2", chunk=5)  # three chunks joined
        assert result.output is result.records["lif2"]  # joined once, not once per name
        assert "output" not in result.summary() and "lif2" in result.summary()


def test_nan_and_infinity_after_a_run_are_named_once():
    """Infinite inputs turned membranes into NaN with no word."""
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir", dt=1e-4)
    x = torch.zeros(6, 1, 12)
    x[2, 0, 3] = float("inf")
    with pytest.warns(nirbridge.NonFiniteWarning) as caught:
        nirbridge.run(gm, x, record=["lif1.lif.v", "fc1"])
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "'fc1' from step 2" in message and "'lif1.lif.v' from step 2" in message
    assert "the input 'input' from step 2 holds some" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", nirbridge.NonFiniteWarning)
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        nirbridge.run(gm, torch.zeros(6, 1, 12), record="all")  # finite: no word
    with pytest.warns(
        nirbridge.NonFiniteWarning, match=r"the input 'input' from step 2 holds NaN or infinity; no output"
    ):
        nirbridge.run(gm, x, record=())  # NaN in, none out: still named


def test_nan_in_a_state_passed_in_is_named_as_the_source():
    """A NaN membrane passed back as state made the outputs NaN, and the warning said
    that no input held any: it names the state's entry."""
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir", dt=1e-4)
    x = (torch.rand(6, 1, 12) < 0.5).float()
    state = nirbridge.run(gm, x, record=()).state
    entry = state["nodes"]["lif1.lif"]
    state["nodes"]["lif1.lif"] = entry._replace(v=torch.full_like(entry.v, float("nan")))
    with pytest.warns(nirbridge.NonFiniteWarning) as caught:
        nirbridge.run(gm, x, state=state, record=["lif1.lif.v"])
    message = str(caught[0].message)
    assert "'lif1.lif.v' from step 0" in message
    assert "the state passed in (at 'nodes.lif1.lif.v') holds some" in message
    lif = nirbridge.neurons.LIF(tau=torch.full((3,), 1e-3), v_threshold=torch.ones(3))
    infinite = lif.initial_state(torch.zeros(1, 3))._replace(v=torch.full((1, 3), float("inf")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)  # inf - inf: no spike
        with pytest.warns(nirbridge.NonFiniteWarning, match=r"the state passed in \(at 'v'\) holds NaN"):
            nirbridge.run(lif, torch.zeros(4, 1, 3), state=infinite)


def test_a_lone_module_checks_the_memory_of_its_output_before_allocating_it():
    """run() of a single neuron (no graph) skipped the estimate and asked for 40 GB."""
    lif = nirbridge.neurons.LIF(
        tau=torch.full((1000,), 1e-3),
        r=torch.ones(1000),
        v_leak=torch.zeros(1000),
        v_threshold=torch.ones(1000),
    )
    huge = torch.zeros(1, 1, 1000, dtype=torch.bool).expand(10**6, 1000, 1000)  # no memory of its own
    with pytest.raises(
        nirbridge.MemoryLimitError, match=r"the output over T = 1000000 steps \(\[1000, 1000\] per step\)"
    ):
        nirbridge.run(lif, huge)


def test_numpy_integers_and_an_empty_batch_are_taken():
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir", dt=1e-4)
    x = (torch.rand(8, 2, 12) < 0.3).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        torch.testing.assert_close(
            nirbridge.run(gm, x, chunk=np.int64(3)).output, nirbridge.run(gm, x).output
        )
        empty = nirbridge.run(gm, x[:, :0], record="all")
        data = empty.to_nir_data()
    assert isinstance(data, nir.NIRGraphData)
    summary = str(empty.summary())
    assert "nan" not in summary and "silent" not in summary, summary  # no sample: no range, no silence
    assert "no values: the run had a batch of 0 samples" in summary, summary


def test_batch_first_runs_the_transpose_and_gives_batch_first_results():
    """run(batch_first=True) on [B, T, ...] equals run on [T, B, ...] transposed, bit for
    bit; output and records come back [B, T, ...], and what reads time (summary, series,
    NIR data) is the same either way."""
    graph = nir.read(str(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"))
    gm = nirbridge.nir_to_torch(graph, dt=1e-4)
    x = (torch.rand(30, 3, 12, generator=torch.Generator().manual_seed(2)) < 0.3).float()  # [T, B, N]
    time_first = nirbridge.run(gm, x, record="all")
    batch_first = nirbridge.run(gm, x.transpose(0, 1).contiguous(), record="all", batch_first=True)
    assert batch_first.batch_first and not time_first.batch_first
    assert batch_first.output.shape[:2] == (3, 30)
    assert torch.equal(batch_first.output.transpose(0, 1), time_first.output)
    assert batch_first.records.keys() == time_first.records.keys()
    for key, value in time_first.records.items():
        assert batch_first.records[key].shape[:2] == (3, 30), key
        assert torch.equal(batch_first.records[key].transpose(0, 1), value), key
    assert str(batch_first.summary()) == str(time_first.summary())
    assert batch_first.series().keys() == time_first.series().keys()  # output named once, as before
    back = batch_first.time_first()
    assert not back.batch_first and torch.equal(back.output, time_first.output)
    np.testing.assert_array_equal(
        batch_first.to_nir_data().nodes["lif1.lif"].observables["v"].data,
        time_first.to_nir_data().nodes["lif1.lif"].observables["v"].data,
    )
    # a dict of inputs too; a tensor without a time axis is refused naming the layout
    named = nirbridge.run(gm, {"input": x.transpose(0, 1)}, batch_first=True)
    assert torch.equal(named.output.transpose(0, 1), time_first.output)
    with pytest.raises(nirbridge.InputError, match=r"with batch_first=True an input is \[B, T, \.\.\.\]"):
        nirbridge.run(gm, torch.zeros(12), batch_first=True)
    with pytest.raises(nirbridge.ParameterError, match="batch_first='yes'"):
        nirbridge.run(gm, x, batch_first="yes")


def test_run_s_warnings_point_at_the_caller_s_line_with_either_layout():
    gm = nirbridge.nir_to_torch(str(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"), dt=1e-4)
    for batch_first in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nirbridge.run(gm, torch.zeros(1, 1, 12), batch_first=batch_first)
        silent = [w for w in caught if issubclass(w.category, nirbridge.SilentNetworkWarning)]
        assert silent and all(w.filename == __file__ for w in silent), [
            (w.filename, w.lineno) for w in silent
        ]

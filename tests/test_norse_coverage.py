"""norse coverage beyond the feed-forward cells: the recurrent LIF cell and LILinearCell
as subgraphs (input weights before the neuron, recurrent weights on the delayed edge
back), the sequence modules as their cells' nodes, and one error naming every norse
neuron that has no NIR form, with the reason. Each export is checked against norse
itself, spike for spike, through both importers. Parameters at their boundaries
(``tau_syn = dt``, ``r = 0``, ``w_in = 0``, time constants tiny or huge, a cell's ``dt``
of 0) are checked against the numpy reference of DESIGN.md's equations, or refused
with an error naming the node and the field."""

from __future__ import annotations

import copy
import math
import warnings

import nir
import norse.torch as nt
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils import _pytree as pytree

import nirbridge
from nirbridge import validate
from nirbridge.adapters import norse as norse_adapter
from nirbridge.graph import plan
from tests.conftest import t
from tests.reference import Reference

BATCH = 4
STEPS = 300


pytestmark = pytest.mark.usefixtures("float64_default")


IMPORTERS = {
    "nirbridge": lambda g: nirbridge.nir_to_torch(g, dtype=torch.float64),
    "norse": lambda g: norse_adapter.from_nir(g, dtype=torch.float64),
}


def inputs(seed: int, shape: tuple[int, ...], steps: int = STEPS, scale: float = 2.0) -> torch.Tensor:
    """[T, B, ...]: sparse positive pulses of continuous height (nothing lands on a
    threshold by construction)."""
    rng = np.random.default_rng(seed)
    pulses = rng.uniform(0, 1, (steps, BATCH, *shape)) < 0.5
    return t(pulses * rng.uniform(0.25, 1.0, (steps, BATCH, *shape)) * scale)


def lif_parameters(rng, n: int, per_neuron_leak: bool = True) -> nt.LIFParameters:
    return nt.LIFParameters(
        tau_syn_inv=t(rng.uniform(100, 300, n)),
        tau_mem_inv=t(rng.uniform(50, 200, n)),
        v_leak=t(rng.uniform(-0.05, 0.05, n)) if per_neuron_leak else t(-0.0625),
        v_th=t(rng.uniform(0.05, 0.2, n)),
        v_reset=t(rng.uniform(-0.1, 0.0, n)),
    )


def node_state(state: dict, *path: str):
    for name in path:
        state = state["nodes"][name]
    return state


def equal_nodes(a: nir.NIRNode, b: nir.NIRNode) -> bool:
    """Same type and parameters (metadata and types aside)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, nir.NIRGraph):
        return (
            list(a.nodes) == list(b.nodes)
            and a.edges == b.edges
            and all(equal_nodes(a.nodes[k], b.nodes[k]) for k in a.nodes)
        )
    skip = {"input_type", "output_type", "metadata"}
    fields = [f for f in a.__dataclass_fields__ if f not in skip]
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields)


# ----------------------------------------------------------------------------- LIFRecurrentCell


def recurrent_cell(seed: int = 3, n_in: int = 5, n: int = 12) -> nt.LIFRecurrentCell:
    rng = np.random.default_rng(seed)
    cell = nt.LIFRecurrentCell(n_in, n, lif_parameters(rng, n), dt=1e-3)
    with torch.no_grad():  # strong enough that the recurrence changes the spikes
        cell.input_weights.copy_(t(rng.normal(0, 1.0, (n, n_in))))
        cell.recurrent_weights.copy_(t(rng.normal(0, 1.5, (n, n))).fill_diagonal_(0.0))
    return cell


def test_lif_recurrent_cell_exports_as_input_weights_then_cubalif_with_the_recurrence_delayed():
    cell = recurrent_cell()
    graph = norse_adapter.to_nir(cell)
    nir.NIRGraph(nodes=graph.nodes, edges=graph.edges, type_check=True)  # nir accepts it
    assert graph.metadata["dt"] == 1e-3
    assert list(graph.nodes) == ["input", "lifrecurrentcell", "output"]
    sub = graph.nodes["lifrecurrentcell"]
    assert {k: type(v).__name__ for k, v in sub.nodes.items()} == {
        "input": "Input",
        "input_weights": "Linear",
        "lif": "CubaLIF",
        "recurrent_weights": "Linear",
        "output": "Output",
    }
    assert sub.edges == [
        ("input", "input_weights"),
        ("input_weights", "lif"),
        ("lif", "recurrent_weights"),
        ("recurrent_weights", "lif"),
        ("lif", "output"),
    ]
    # the edge back is the delayed one: the neuron sees the previous step's spikes
    assert plan(sub).incoming["lif"] == [("input_weights", False), ("recurrent_weights", True)]
    np.testing.assert_array_equal(sub.nodes["input_weights"].weight, cell.input_weights.detach().numpy())
    np.testing.assert_array_equal(
        sub.nodes["recurrent_weights"].weight, cell.recurrent_weights.detach().numpy()
    )
    assert np.all(np.diag(sub.nodes["recurrent_weights"].weight) == 0)  # autapses=False, as built
    # the neuron is LIFCell's CubaLIF with the same parameters
    feed_forward = norse_adapter.lif_to_nir(nt.LIFCell(cell.p, dt=cell.dt))
    assert equal_nodes(sub.nodes["lif"], feed_forward)
    assert sub.nodes["lif"].input_type["input"].tolist() == [12]
    assert sub.nodes["input"].output_type["output"].tolist() == [5]


@pytest.mark.parametrize("target", sorted(IMPORTERS))
def test_lif_recurrent_cell_round_trips_spike_for_spike_against_norse(target):
    cell = recurrent_cell()
    module = IMPORTERS[target](norse_adapter.to_nir(cell))
    if target == "norse":
        assert any(isinstance(m, norse_adapter.NorseNeuron) for m in module.modules())
    xs = inputs(1, (5,))
    n = 12
    p = cell.p
    # norse's own fallback state fills v with a float32 scalar; start it as NIR does
    theirs = nt.LIFState(
        z=torch.zeros(BATCH, n), v=p.v_leak.expand(BATCH, n).clone(), i=torch.zeros(BATCH, n)
    )
    ours = None
    spikes, worst_v = 0, 0.0
    with torch.no_grad():
        for step, x in enumerate(xs):
            z, theirs = cell(x, theirs)
            out, ours = module(x, ours)
            np.testing.assert_array_equal(out.numpy(), z.numpy(), err_msg=f"spikes at step {step}")
            v = node_state(ours, "lifrecurrentcell", "lif").v
            worst_v = max(worst_v, float((v - theirs.v).abs().max()))
            spikes += int(z.sum())
    assert spikes > 1000, spikes  # of 3600 neuron-steps
    assert worst_v < 1e-12, worst_v


def test_the_recurrent_edge_carries_the_previous_steps_spikes():
    """The same graph without its recurrent weights spikes differently: the comparison
    above checks the recurrence, not only the input path."""
    cell = recurrent_cell()
    graph = norse_adapter.to_nir(cell)
    sub = graph.nodes["lifrecurrentcell"]
    sub.nodes["recurrent_weights"] = nir.Linear(weight=np.zeros_like(sub.nodes["recurrent_weights"].weight))
    xs = inputs(1, (5,))
    with_recurrence = nirbridge.run(nirbridge.nir_to_torch(norse_adapter.to_nir(cell)), xs).output
    with pytest.warns(
        nirbridge.ParameterWarning, match="'lifrecurrentcell.recurrent_weights' .*weight is 0 everywhere"
    ):
        without_recurrence = nirbridge.nir_to_torch(graph)
    without = nirbridge.run(without_recurrence, xs).output
    assert not torch.equal(with_recurrence, without)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_lif_recurrent_cell_with_norse_defaults_and_its_own_initial_state(dtype):
    """Scalar parameters, norse's default weights and its own (state=None) start; at
    float32 too, as norse users run it."""
    cell = nt.LIFRecurrentCell(6, 10, dt=1e-3).to(dtype)
    graph = norse_adapter.to_nir(cell)
    sub = graph.nodes["lifrecurrentcell"]
    assert sub.nodes["lif"].tau_syn.shape == (10,)  # scalars broadcast to the population
    module = norse_adapter.from_nir(graph, dtype=dtype)
    xs = inputs(2, (6,), steps=1000, scale=40.0).to(dtype)
    theirs = ours = None
    spikes = 0
    with torch.no_grad():
        for step, x in enumerate(xs):
            z, theirs = cell(x, theirs)
            out, ours = module(x, ours)
            np.testing.assert_array_equal(out.numpy(), z.numpy(), err_msg=f"spikes at step {step}")
            spikes += int(z.sum())
    assert out.dtype == dtype and spikes > 5000, spikes  # of 40000 neuron-steps


def test_an_imported_recurrent_cell_exports_back_unchanged():
    graph = norse_adapter.to_nir(recurrent_cell())
    back = norse_adapter.to_nir(norse_adapter.from_nir(graph))
    assert equal_nodes(back.nodes["lifrecurrentcell"], graph.nodes["lifrecurrentcell"])
    assert back.edges == graph.edges and back.metadata["dt"] == graph.metadata["dt"]


def test_lif_recurrent_cell_inside_a_model_with_other_layers():
    rng = np.random.default_rng(5)
    model = nt.SequentialState(
        nn.Linear(4, 6),
        nt.LIFRecurrentCell(6, 8, lif_parameters(rng, 8), dt=1e-3),
        nn.Linear(8, 3),
        nt.LIFBoxCell(nt.LIFBoxParameters(tau_mem_inv=t(rng.uniform(100, 200, 3)), v_th=t(0.1)), dt=1e-3),
    )
    with torch.no_grad():
        model[0].weight.mul_(4)
        model[2].weight.mul_(4)
    graph = norse_adapter.to_nir(model)
    assert [type(n).__name__ for n in graph.nodes.values()] == [
        "Input",
        "Affine",
        "NIRGraph",
        "Affine",
        "LIF",
        "Output",
    ]
    module = norse_adapter.from_nir(graph, dtype=torch.float64)
    xs = inputs(3, (4,))
    # norse's state for the model: its recurrent cell started as NIR starts it
    start = nt.LIFState(
        z=torch.zeros(BATCH, 8), v=model[1].p.v_leak.expand(BATCH, 8).clone(), i=torch.zeros(BATCH, 8)
    )
    theirs, ours, spikes = [None, start, None, None], None, 0
    with torch.no_grad():
        for step, x in enumerate(xs):
            z, theirs = model(x, theirs)
            out, ours = module(x, ours)
            np.testing.assert_array_equal(out.numpy(), z.numpy(), err_msg=f"spikes at step {step}")
            spikes += int(z.sum())
    assert spikes > 200, spikes


# ----------------------------------------------------------------------------- LILinearCell


@pytest.mark.parametrize("target", sorted(IMPORTERS))
def test_li_linear_cell_exports_as_input_weights_then_cubali(target):
    rng = np.random.default_rng(4)
    p = nt.LIParameters(
        tau_syn_inv=t(rng.uniform(100, 300, 7)),
        tau_mem_inv=t(rng.uniform(50, 200, 7)),
        v_leak=t(rng.uniform(-0.1, 0.1, 7)),
    )
    cell = nt.LILinearCell(5, 7, p, dt=1e-3)
    graph = norse_adapter.to_nir(cell)
    sub = graph.nodes["lilinearcell"]
    assert [type(n).__name__ for n in sub.nodes.values()] == ["Input", "Linear", "CubaLI", "Output"]
    assert equal_nodes(sub.nodes["li"], norse_adapter.li_to_nir(nt.LICell(p, dt=1e-3)))
    module = IMPORTERS[target](graph)
    theirs = ours = None
    worst = 0.0
    with torch.no_grad():
        for x in inputs(6, (5,), steps=120):
            v, theirs = cell(x, theirs)
            out, ours = module(x, ours)
            worst = max(worst, float((out - v).abs().max()))
    assert worst < 1e-12, worst


# ----------------------------------------------------------------------------- sequence modules


def sequence_modules(rng, n: int = 6):
    """(sequence module, its cell) pairs with the same parameters."""
    lif_p = lif_parameters(rng, n, per_neuron_leak=False)  # norse's LIF fills v with a scalar
    li_p = nt.LIParameters(
        tau_syn_inv=t(rng.uniform(100, 300, n)), tau_mem_inv=t(rng.uniform(50, 200, n)), v_leak=t(0.125)
    )
    iaf_p = nt.IAFParameters(v_th=t(rng.uniform(0.5, 1.5, n)), v_reset=t(np.zeros(n)))
    return {
        "LIF": (nt.LIF(lif_p, dt=1e-3), nt.LIFCell(lif_p, dt=1e-3)),
        "LI": (nt.LI(li_p, dt=1e-3), nt.LICell(li_p, dt=1e-3)),
        "IAF": (nt.IAF(iaf_p, dt=1e-3), nt.IAFCell(iaf_p, dt=1e-3)),
    }


@pytest.mark.parametrize("kind", ["LIF", "LI", "IAF"])
def test_sequence_modules_export_as_their_cells_node_with_a_note(kind):
    sequence, cell = sequence_modules(np.random.default_rng(8))[kind]
    example = torch.zeros(1, 6)
    node = norse_adapter.to_nir(sequence, example).nodes[kind.lower()]
    cell_node = norse_adapter.to_nir(cell, example).nodes[f"{kind.lower()}cell"]
    assert equal_nodes(node, cell_node)
    assert not cell_node.metadata
    note = node.metadata[norse_adapter.SEQUENCE_NOTE]
    assert f"norse.torch.{kind}" in note and "[T, B, ...]" in note and "one step" in note


def test_the_note_survives_writing_and_reading(tmp_path):
    sequence, _ = sequence_modules(np.random.default_rng(8))["LIF"]
    graph = norse_adapter.to_nir(nt.SequentialState(nn.Linear(3, 6), sequence))
    nirbridge.write(tmp_path / "lif.nir", graph)
    read = nirbridge.read(tmp_path / "lif.nir")
    assert read.nodes["1"].metadata == graph.nodes["1"].metadata
    assert norse_adapter.SEQUENCE_NOTE in read.nodes["1"].metadata


@pytest.mark.parametrize("target", sorted(IMPORTERS))
def test_a_model_of_sequence_modules_runs_like_the_import_over_the_same_steps(target):
    """norse runs [T, B, ...] inside its modules; nirbridge.run runs the graph over T."""
    modules = sequence_modules(np.random.default_rng(9))
    model = nt.SequentialState(
        nn.Linear(5, 6),
        modules["LIF"][0],
        nn.Linear(6, 6),
        modules["IAF"][0],
        nn.Linear(6, 6),
        modules["LI"][0],
    )
    with torch.no_grad():
        model[0].weight.mul_(8)
        model[2].weight.mul_(8)
    graph = norse_adapter.to_nir(model)
    assert [type(n).__name__ for n in graph.nodes.values()] == [
        "Input",
        "Affine",
        "CubaLIF",
        "Affine",
        "IF",
        "Affine",
        "CubaLI",
        "Output",
    ]
    xs = inputs(10, (5,))
    with torch.no_grad():
        expected, _ = model(xs)
        record = nirbridge.run(IMPORTERS[target](graph), xs, record=["1", "3"])
        spikes_lif, _ = modules["LIF"][0](model[0](xs))
    assert record.output.shape == expected.shape == (STEPS, BATCH, 6)
    assert torch.equal(record.records["1"], spikes_lif)
    assert int(record.records["1"].sum()) > 500 and int(record.records["3"].sum()) > 100
    np.testing.assert_allclose(record.output.numpy(), expected.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("target", sorted(IMPORTERS))
def test_lif_recurrent_sequence_module_exports_as_its_cells_subgraph(target):
    cell = recurrent_cell()
    sequence = nt.LIFRecurrent(
        5, 12, cell.p, input_weights=cell.input_weights, recurrent_weights=cell.recurrent_weights, dt=1e-3
    )
    graph = norse_adapter.to_nir(sequence)
    sub = graph.nodes["lifrecurrent"]
    assert equal_nodes(sub, norse_adapter.to_nir(cell).nodes["lifrecurrentcell"])
    assert "norse.torch.LIFRecurrent" in sub.metadata[norse_adapter.SEQUENCE_NOTE]
    xs = inputs(1, (5,))
    start = nt.LIFState(
        z=torch.zeros(BATCH, 12), v=cell.p.v_leak.expand(BATCH, 12).clone(), i=torch.zeros(BATCH, 12)
    )
    with torch.no_grad():
        expected, _ = sequence(xs, start)
        got = nirbridge.run(IMPORTERS[target](graph), xs).output
    assert torch.equal(got, expected) and int(expected.sum()) > 1000


def test_iaf_sequence_module_with_a_nonzero_reset_warns_as_its_cell_does():
    iaf = nt.IAF(nt.IAFParameters(v_th=t(1.0), v_reset=t(0.1)))
    with pytest.warns(nirbridge.LossyConversionWarning, match=r"\(IAF\): norse starts v at v_reset"):
        norse_adapter.to_nir(nt.SequentialState(nn.Linear(3, 3), iaf))


# ----------------------------------------------------------------------------- no NIR form


def test_norse_neurons_without_a_nir_form_are_named_with_the_reason_in_one_error():
    model = nt.SequentialState(
        nn.Linear(3, 3),
        nt.LSNNCell(),
        nn.ReLU(),
        nt.IzhikevichCell(nt.tonic_spiking),
        nt.LIFRefracCell(),
        nt.LSNNCell(),
        nt.LIFCell(),
    )
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        norse_adapter.to_nir(model)
    offenders = info.value.offenders
    assert offenders == {
        "module ReLU": ["'2'"],
        "module norse.torch.module.lsnn.LSNNCell (its adaptive threshold (b) has no NIR primitive)": [
            "'1'",
            "'5'",
        ],
        "module norse.torch.module.izhikevich.IzhikevichCell (its quadratic membrane and recovery "
        "variable u have no NIR primitive)": ["'3'"],
        "module norse.torch.module.lif_refrac.LIFRefracCell (its refractory period (rho) has no NIR "
        "primitive)": ["'4'"],
    }
    message = str(info.value)
    assert "LSNNCell (its adaptive threshold (b) has no NIR primitive): '1', '5'" in message
    supported = message.split("Supported: ")[1].split("\nFix: ")[0]
    assert "LIFCell" in supported and "LSNNCell" not in supported and "Izhikevich" not in supported
    assert isinstance(info.value, ValueError)


def test_with_only_norse_neurons_without_a_nir_form_the_error_names_them_all():
    model = nt.SequentialState(nn.Linear(3, 3), nt.LIFAdExCell(), nn.Linear(3, 3), nt.LIFExCell())
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        norse_adapter.to_nir(model)
    assert [k.split(" ")[1].rsplit(".", 1)[1] for k in info.value.offenders] == ["LIFAdExCell", "LIFExCell"]
    assert "exponential spike initiation" in str(info.value)
    with pytest.raises(nirbridge.UnsupportedModuleError, match=r"CobaLIFCell \(its conductance.*: the model"):
        norse_adapter.to_nir(nt.CobaLIFCell(3, 3))


def test_a_user_converter_or_skip_wins_over_no_nir_form():
    model = nt.SequentialState(nn.Linear(3, 3), nt.LSNNCell(dt=1e-3))

    def approximate(cell):  # the user's own approximation: the LIF part only
        return norse_adapter.lif_to_nir(nt.LIFCell(nt.LIFParameters(), dt=cell.dt))

    graph = norse_adapter.to_nir(model, module_map={nt.LSNNCell: approximate})
    assert type(graph.nodes["1"]).__name__ == "CubaLIF"
    graph = norse_adapter.to_nir(model, skip=(nt.LSNNCell,))
    assert list(graph.nodes) == ["input_tensor", "0", "output"]


def test_torch_to_nir_with_the_norse_map_names_the_first_with_its_reason():
    """Without norse's to_nir around it, the map value still says why (one at a time)."""
    model = nt.SequentialState(nn.Linear(3, 3), nt.LSNNRecurrentCell(3, 3))
    with pytest.raises(nirbridge.NodeConversionError, match="LSNNRecurrentCell: its adaptive threshold"):
        nirbridge.torch_to_nir(model, module_map=norse_adapter.TO_NIR)


def _norse_neuron_types() -> set[type]:
    from norse.torch.module.snn import SNN, SNNCell, SNNRecurrent, SNNRecurrentCell

    found = set()
    for name in dir(nt):
        kind = getattr(nt, name)
        if isinstance(kind, type) and issubclass(kind, (SNN, SNNCell, SNNRecurrent, SNNRecurrentCell)):
            found.add(kind)
    return found | {nt.CobaLIFCell, nt.LILinearCell, nt.LIFCorrelation}


def test_every_norse_neuron_module_is_converted_or_named_as_having_no_nir_form():
    assert _norse_neuron_types() <= set(norse_adapter.TO_NIR)
    for kind, reason in norse_adapter.NO_NIR_FORM.items():
        assert isinstance(norse_adapter.TO_NIR[kind], norse_adapter.NoNirForm)
        assert reason and "NIR" in reason, kind
    converted = {k for k, v in norse_adapter.TO_NIR.items() if not isinstance(v, norse_adapter.NoNirForm)}
    assert converted == {
        nt.LIFBoxCell,
        nt.LIFCell,
        nt.LIBoxCell,
        nt.LICell,
        nt.IAFCell,
        nt.LIFRecurrentCell,
        nt.LILinearCell,
        nt.LIF,
        nt.LI,
        nt.IAF,
        nt.LIFRecurrent,
    }


# ----------------------------------------------------------------------------- boundaries

DT = 1e-3
N = 4


def one_neuron_graph(node: nir.NIRNode) -> nir.NIRGraph:
    n = int(np.size(node.r))
    return nir.NIRGraph(
        nodes={"input": nir.Input(np.array([n])), "lif": node, "output": nir.Output(np.array([n]))},
        edges=[("input", "lif"), ("lif", "output")],
        type_check=False,
    )


def arrays(shape: tuple[int, ...] = (), **given: object) -> dict[str, np.ndarray]:
    """float64 arrays of one shape: ``shape`` broadcast with the values'."""
    values = {k: np.asarray(v, np.float64) for k, v in given.items()}
    shape = np.broadcast_shapes(shape, *(v.shape for v in values.values()))
    return {k: np.broadcast_to(v, shape).copy() for k, v in values.items()}


def cuba(kind: type, **given: object) -> nir.NIRNode:
    """A CubaLIF or CubaLI of N neurons: lively defaults, ``given`` fields broadcast."""
    fields = dict(
        tau_syn=3 * DT, tau_mem=5 * DT, r=1.5, v_leak=-0.05, w_in=2.0, v_threshold=0.6, v_reset=-0.1
    )
    fields.update(given)
    if kind is nir.CubaLI:
        del fields["v_threshold"], fields["v_reset"]
    return kind(**arrays((N,), **fields))


def pulses(seed: int, steps: int = 60, n: int = N) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return t((rng.uniform(0, 1, (steps, BATCH, n)) < 0.6) * rng.uniform(0.2, 1.5, (steps, BATCH, n)))


def reference_run(graph: nir.NIRGraph, xs: torch.Tensor) -> dict[str, np.ndarray]:
    """DESIGN.md's equations in numpy (tests/reference.py): output, ``i`` and ``v`` per step."""
    ref = Reference(graph, DT)
    found: dict[str, list[np.ndarray]] = {"output": [], "i": [], "v": []}
    for x in xs.numpy():
        found["output"].append(ref.step({"input": x})["output"])
        i, v = ref.state["lif"]
        found["i"].append(i)
        found["v"].append(v)
    return {k: np.stack(v) for k, v in found.items()}


def norse_run(graph: nir.NIRGraph, xs: torch.Tensor, dtype: torch.dtype) -> nirbridge.Run:
    with warnings.catch_warnings():  # dt/tau_syn = 1 overshoots, r = 0 is silent: meant here
        warnings.simplefilter("ignore", nirbridge.DtWarning)
        warnings.simplefilter("ignore", nirbridge.ParameterWarning)
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        module = norse_adapter.from_nir(graph, dt=DT, dtype=dtype)
        assert isinstance(module.get_submodule("lif"), norse_adapter.NorseNeuron)
        return nirbridge.run(module, xs.to(dtype), record="all")


def assert_matches_reference(graph: nir.NIRGraph, xs: torch.Tensor, dtype=torch.float64, tol=1e-9) -> None:
    run, ref = norse_run(graph, xs, dtype), reference_run(graph, xs)
    for key in ("i", "v"):
        got = run.records[f"lif.{key}"].detach().double().numpy()
        assert np.isfinite(got).all(), f"{key} is not finite at {np.argwhere(~np.isfinite(got))[:3].tolist()}"
        np.testing.assert_allclose(got, ref[key], rtol=tol, atol=tol, err_msg=key)
    if dtype == torch.float64 and isinstance(graph.nodes["lif"], nir.CubaLIF):  # spikes
        np.testing.assert_array_equal(run.output.detach().numpy(), ref["output"])
    else:
        np.testing.assert_allclose(run.output.detach().double().numpy(), ref["output"], rtol=tol, atol=tol)


BOUNDARIES = {
    "tau_syn = dt": dict(tau_syn=DT),
    "tau_syn = dt for some neurons": dict(tau_syn=[DT, 2 * DT, DT, 7 * DT]),
    "tau_syn a hair above dt": dict(tau_syn=DT * (1 + 1e-10)),
    "tau_syn a hair below dt": dict(tau_syn=DT * (1 - 1e-10)),
    "tau_syn = dt/2 (norse's decay -1)": dict(tau_syn=DT / 2),
    "r = 0": dict(r=0.0),
    "r = 0 for some neurons": dict(r=[0.0, 1.5, 0.0, 0.7]),
    "r = 0 and tau_syn = dt": dict(r=0.0, tau_syn=DT),
    "w_in = 0": dict(w_in=0.0),
    "w_in = 0 and tau_syn = dt": dict(w_in=0.0, tau_syn=DT),
    "tau huge": dict(tau_syn=1e30, tau_mem=1e30),
    "tau_syn huge, r tiny": dict(tau_syn=1e200, r=1e-200, w_in=1e100),
    "v_threshold = v_reset": dict(v_threshold=0.3, v_reset=0.3),
}


@pytest.mark.parametrize("kind", [nir.CubaLIF, nir.CubaLI], ids=lambda k: k.__name__)
@pytest.mark.parametrize("case", list(BOUNDARIES))
def test_cuba_current_and_membrane_at_boundaries_follow_the_equations(kind, case):
    """norse stores its current as r·(1 − dt/tau_syn) times NIR's i: at r = 0 or
    tau_syn = dt that is 0, and NIR's i was recorded as 0/0 = NaN."""
    assert_matches_reference(one_neuron_graph(cuba(kind, **BOUNDARIES[case])), pulses(1))


@pytest.mark.parametrize("kind", [nir.CubaLIF, nir.CubaLI], ids=lambda k: k.__name__)
@pytest.mark.parametrize(
    "tau_syn", [DT, DT * (1 + 1e-8), DT * (1 + 1e-3)], ids=["= dt", "dt(1+1e-8)", "dt(1+1e-3)"]
)
def test_cuba_current_in_float32_near_tau_syn_equal_dt(kind, tau_syn):
    """In float32, dt·(1/tau_syn) rounds to 1 for tau_syn within ~1e-7 of dt, and a
    decay of 1e-3 leaves the current divided out with 2000 times float32's rounding."""
    assert_matches_reference(
        one_neuron_graph(cuba(kind, tau_syn=tau_syn)), pulses(2), dtype=torch.float32, tol=2e-5
    )


TAUS = st.one_of(
    st.sampled_from([DT, DT * (1 + 1e-12), DT * (1 - 1e-12), DT / 2, 1e30]),
    st.floats(DT / 2, 50 * DT),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from([nir.CubaLIF, nir.CubaLI]),
    tau_syn=st.lists(TAUS, min_size=N, max_size=N),
    tau_mem=st.lists(st.one_of(st.just(1e30), st.floats(DT, 50 * DT)), min_size=N, max_size=N),
    r=st.lists(st.one_of(st.just(0.0), st.floats(0.05, 5.0)), min_size=N, max_size=N),
    # subnormal w_in: interpret._check_time_constants warns of a numpy overflow (reported)
    w_in=st.lists(
        st.one_of(st.just(0.0), st.floats(-3.0, 3.0, allow_subnormal=False)), min_size=N, max_size=N
    ),
    reset_at_threshold=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_cuba_nodes_with_parameters_at_their_boundaries_follow_the_equations(
    kind, tau_syn, tau_mem, r, w_in, reset_at_threshold, seed
):
    threshold = np.linspace(0.3, 0.9, N)
    node = cuba(
        kind,
        tau_syn=tau_syn,
        tau_mem=tau_mem,
        r=r,
        w_in=w_in,
        v_threshold=threshold,
        v_reset=threshold if reset_at_threshold else -0.1,
    )
    assert_matches_reference(one_neuron_graph(node), pulses(seed, steps=25))


def cuba_cell_node(kind: type) -> nir.NIRNode:
    return cuba(kind, tau_syn=[DT, 2 * DT, DT, DT], r=[1.5, 0.0, 0.7, 1.0])


@pytest.mark.parametrize("kind", [nir.CubaLIF, nir.CubaLI], ids=lambda k: k.__name__)
def test_a_neuron_carrying_nirs_current_still_steps_as_the_norse_cell_does(kind):
    """Where norse's current cannot give NIR's i back, the state carries i beside it;
    outputs, v and norse's own current stay those of the norse cell, bit for bit."""
    neuron = norse_adapter.NorseNeuron(cuba_cell_node(kind), DT)
    cell = neuron.cell
    xs = pulses(3, steps=30)
    ours, theirs = None, cell.state_fallback(xs[0])
    carried = norse_adapter.LIFNirCurrentState if kind is nir.CubaLIF else norse_adapter.LINirCurrentState
    for x in xs:
        out, ours_state = neuron(x, ours)
        norse_out, theirs = cell.activation(x * neuron._scale, theirs, cell.p, cell.dt)
        assert type(ours_state) is carried
        assert torch.equal(out, norse_out)
        assert torch.equal(ours_state.v, theirs.v) and torch.equal(ours_state.i, theirs.i)
        ours = ours_state
    # a plain state, as pytree and deepcopy see it, and norse's step function takes it
    detached = pytree.tree_map(torch.Tensor.detach, ours)
    assert type(detached) is carried and torch.equal(copy.deepcopy(detached).i_nir, ours.i_nir)
    cell.activation(xs[0], ours, cell.p, cell.dt)


def test_a_norse_state_without_nirs_current_starts_it_from_norses():
    """tau_syn = dt: NIR's i is w_in·x, whatever came before, so a state norse's own cell
    returned (no i_nir) still gives the exact i at the next step."""
    node = cuba(nir.CubaLIF, tau_syn=DT)
    neuron = norse_adapter.NorseNeuron(node, DT)
    x = pulses(4, steps=1)[0]
    start = nt.LIFFeedForwardState(v=torch.full((BATCH, N), 0.1), i=torch.full((BATCH, N), 2.0))
    _, state = neuron(x, start)
    assert torch.equal(neuron.nir_state(state)["i"], torch.from_numpy(node.w_in) * x)


def test_a_neuron_whose_current_norse_can_read_back_keeps_norses_state():
    _, state = norse_adapter.NorseNeuron(cuba(nir.CubaLIF), DT)(pulses(5, steps=1)[0])
    assert type(state) is nt.LIFFeedForwardState


OVERFLOWS = {
    "LIF tau": (nir.LIF(**arrays(tau=[DT, 1e-39], r=1.0, v_leak=0.0, v_threshold=1.0, v_reset=0.0)), DT),
    "CubaLIF tau_syn": (cuba(nir.CubaLIF, tau_syn=[DT, 1e-39, DT, DT]), DT),
    "CubaLI tau_mem": (cuba(nir.CubaLI, tau_mem=[DT, 1e-39, DT, DT]), DT),
    "IF r·dt": (nir.IF(**arrays(r=[1.0, 3e38], v_threshold=1.0, v_reset=0.0)), 10.0),
}


@pytest.mark.parametrize("case", list(OVERFLOWS))
def test_parameters_norse_cannot_hold_in_the_dtype_are_refused_naming_node_and_field(case):
    """norse takes 1/tau: a tau of 1e-39 is a legal float32, its inverse is not, and
    the cell stepped to inf·0 = NaN where nirbridge's own neurons stay finite."""
    node, dt = OVERFLOWS[case]
    words = {
        "LIF tau": ("tau", "1/tau", "LIFBoxCell"),
        "CubaLIF tau_syn": ("tau_syn", "1/tau_syn", "LIFCell"),
        "CubaLI tau_mem": ("tau_mem", "1/tau_mem", "LICell"),
        "IF r·dt": ("r", "r·dt", "IAFCell"),
    }[case]
    graph = one_neuron_graph(node)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.DtWarning)  # dt/tau = 1e36: the point here
        with pytest.raises(nirbridge.NodeConversionError) as info:
            norse_adapter.from_nir(graph, dt=dt, dtype=torch.float32)
        message = str(info.value)
        assert "node 'lif'" in message and "neuron 1" in message and "float32" in message
        assert "dtype=torch.float64" in message
        assert all(word in message for word in words), message
        # direct use: the same check when the module is cast, named by its field
        module = norse_adapter.from_nir(graph, dt=dt, dtype=torch.float64)
        with pytest.raises(nirbridge.ParameterError, match=words[0]):
            module.float()


@pytest.mark.parametrize("bad_dt", [0.0, -1e-3, math.nan, math.inf])
@pytest.mark.parametrize(
    "cell",
    [nt.LIFBoxCell, nt.LIFCell, nt.LIBoxCell, nt.LICell, nt.IAFCell],
    ids=lambda c: c.__name__,
)
def test_a_cell_whose_dt_is_not_a_time_step_is_refused_naming_it(cell, bad_dt):
    """The NIR parameters derive from the cell's dt (w_in = tau_syn/dt, an IF's
    r = 1/dt) and the graph records it: a ZeroDivisionError or w_in = inf before."""
    model = nt.SequentialState(nn.Linear(3, 3), cell(dt=bad_dt))
    with pytest.raises(nirbridge.NodeConversionError, match=rf"node '1' \({cell.__name__}\).*dt") as info:
        norse_adapter.to_nir(model)
    assert isinstance(info.value.__cause__, nirbridge.ParameterError)


REFUSED_CELLS = {
    "NaN threshold": lambda: nt.LIFBoxCell(nt.LIFBoxParameters(v_th=t(math.nan))),
    "NaN threshold (IAF)": lambda: nt.IAFCell(nt.IAFParameters(v_th=t([0.5, math.nan, 0.5]))),
    "negative tau_mem": lambda: nt.LIFCell(nt.LIFParameters(tau_mem_inv=t([100.0, -50.0, 100.0]))),
    "negative tau (LI)": lambda: nt.LIBoxCell(nt.LIBoxParameters(tau_mem_inv=t(-100.0))),
    "tau_syn_inv = 0: tau_syn infinite": lambda: nt.LICell(nt.LIParameters(tau_syn_inv=t(0.0))),
    "infinite leak": lambda: nt.LIFCell(nt.LIFParameters(v_leak=t(math.inf))),
}


@pytest.mark.parametrize("case", list(REFUSED_CELLS))
def test_to_nir_warns_of_what_nir_to_torch_refuses_as_torch_to_nir_does(case):
    model = nt.SequentialState(nn.Linear(3, 3), REFUSED_CELLS[case]())
    with pytest.warns(nirbridge.ParameterWarning, match="nir_to_torch refuses") as caught:
        graph = norse_adapter.to_nir(model)
    refused = validate.refused(graph)
    assert refused and all(problem in str(caught[0].message) for problem in refused)
    assert "node '1'" in refused[0] or "node '1'" in refused[-1]
    # torch_to_nir with the norse map gives the same list
    with pytest.warns(nirbridge.ParameterWarning) as direct:
        nirbridge.torch_to_nir(model, norse_adapter.TO_NIR)
    listed = str(direct[0].message).split("diverge?): ", 1)[1]
    assert listed == str(caught[0].message).split("diverge?): ", 1)[1]
    with pytest.raises(nirbridge.ParameterError):  # and the import does refuse them
        norse_adapter.from_nir(graph)

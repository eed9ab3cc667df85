"""nirbridge.adapters.spikingjelly against spikingjelly 2.0's own runs and the numpy
reference: exports reproduce spikingjelly spike for spike (float64), imports run
spikingjelly's own neurons and equal nirbridge's float64 run on every example file.
The 4 by 4 export/import matrix is in tests/test_adapters.py."""

from __future__ import annotations

import subprocess
import sys
import warnings

import nir
import numpy as np
import pytest
import torch
from spikingjelly.activation_based import functional, layer, neuron, surrogate
from torch import nn

import nirbridge
from nirbridge.adapters import spikingjelly as sj_adapter
from tests.conftest import EXAMPLES, compare_with_reference
from tests.test_interpret import USABLE

DT = 1e-4


def own_run(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """spikingjelly's own run of ``x`` [T, B, ...]: one call in multi-step mode, a loop
    of calls otherwise, from a reset state."""
    functional.reset_net(model)
    containers = (layer.SeqToANNContainer, layer.MultiStepContainer)
    with torch.no_grad():
        if any(getattr(m, "step_mode", "s") == "m" or isinstance(m, containers) for m in model.modules()):
            out = model(x)
        else:
            out = torch.stack([model(x_t) for x_t in x])
    functional.reset_net(model)
    return out


def imported_runs(graph: nir.NIRGraph, x: torch.Tensor) -> dict[str, torch.Tensor]:
    modules = {
        "nirbridge": nirbridge.nir_to_torch(graph, dtype=torch.float64),
        "spikingjelly": sj_adapter.from_nir(graph, dtype=torch.float64),
    }
    assert any(isinstance(m, sj_adapter.SpikingjellyNeuron) for m in modules["spikingjelly"].modules())
    return {name: nirbridge.run(module, x).output for name, module in modules.items()}


def spikes(rng, shape, rate=0.5, scale=2.0) -> torch.Tensor:
    return torch.from_numpy((rng.random(shape) < rate) * scale)


@pytest.mark.parametrize("mode", ["s", "m"])
def test_an_export_reproduces_spikingjellys_run_in_both_step_modes(rng, mode):
    torch.manual_seed(0)
    model = nn.Sequential(
        layer.Linear(5, 8),
        neuron.LIFNode(tau=3.0, v_threshold=0.8, v_reset=0.1),
        layer.Linear(8, 8),
        neuron.ParametricLIFNode(init_tau=2.5, decay_input=False),
        layer.Linear(8, 6),
        neuron.IFNode(v_threshold=0.7, v_reset=-0.2),
    ).double()
    functional.set_step_mode(model, mode)
    x = spikes(rng, (80, 4, 5))
    graph = sj_adapter.to_nir(model, x if mode == "m" else x[0])
    assert [type(n).__name__ for n in graph.nodes.values()] == [
        *("Input", "Affine", "LIF", "Affine", "LIF", "Affine", "IF", "Output")
    ]
    assert graph.metadata["dt"] == DT
    expected = own_run(model, x)
    assert expected.sum() > 50
    for name, out in imported_runs(graph, x).items():
        assert torch.equal(out, expected), name


def test_the_parameters_nir_gets():
    """τ in seconds, r for decay_input=False, the learned PLIF time constant, the IF
    membrane shifted by v_reset, and thresholds just below spikingjelly's (≥ is >)."""
    plif = neuron.ParametricLIFNode(init_tau=2.0)
    with torch.no_grad():
        plif.w.fill_(0.5)
    model = nn.Sequential(
        layer.Linear(2, 2),
        neuron.LIFNode(tau=4.0, decay_input=False, v_threshold=1.0, v_reset=0.25),
        layer.Linear(2, 2),
        plif,
        layer.Linear(2, 2),
        neuron.IFNode(v_threshold=1.0, v_reset=-0.5),
    )
    graph = sj_adapter.to_nir(model, dt=1e-3)
    lif, plif_node, if_node = graph.nodes["1"], graph.nodes["3"], graph.nodes["5"]

    def one(values):  # scalars come back broadcast over the population
        values = np.asarray(values)
        assert np.all(values == values.flat[0]), values
        return float(values.flat[0])

    assert one(lif.tau) == pytest.approx(4e-3, rel=1e-15)
    assert one(lif.r) == 4.0 and one(lif.v_leak) == 0.25 and one(lif.v_reset) == 0.25
    assert one(lif.v_threshold) == np.nextafter(1.0, 0.0)
    assert one(plif_node.tau) == pytest.approx(1e-3 * (1 + np.exp(-0.5)), rel=1e-15)
    assert one(plif_node.r) == 1.0
    assert one(if_node.r) == pytest.approx(1e3, rel=1e-15)
    assert one(if_node.v_threshold) == np.nextafter(1.5, 0.0) and one(if_node.v_reset) == 0.0


def test_a_membrane_exactly_at_the_threshold_fires_as_in_spikingjelly():
    """spikingjelly fires at v ≥ θ, NIR at v > θ; inputs of 0.25 reach θ = 1 exactly."""
    model = nn.Sequential(layer.Linear(1, 1, bias=False), neuron.IFNode(v_threshold=1.0)).double()
    with torch.no_grad():
        model[0].weight.fill_(1.0)
    x = torch.full((12, 1, 1), 0.25, dtype=torch.float64)
    expected = own_run(model, x)
    assert expected[3, 0, 0] == 1 and expected.sum() == 3  # fires at the 4th, 8th and 12th steps
    for name, out in imported_runs(sj_adapter.to_nir(model), x).items():
        assert torch.equal(out, expected), name


def test_where_spikingjelly_starts_the_membrane_is_where_the_export_starts(rng):
    """spikingjelly starts v where the neuron was made (get_reset_value), which v_reset
    set later (the way to give per-neuron values) does not move: IF shifts by the start
    and stays exact; a LIF started elsewhere than it leaks to warns."""
    torch.manual_seed(3)
    model = nn.Sequential(layer.Linear(4, 6), neuron.IFNode(v_threshold=0.6, v_reset=0.0)).double()
    model[1].v_reset = torch.linspace(-0.4, 0.1, 6, dtype=torch.float64)  # per neuron, after making it
    x = spikes(rng, (60, 3, 4))
    expected = own_run(model, x)
    assert expected.sum() > 20
    for name, out in imported_runs(sj_adapter.to_nir(model), x).items():
        assert torch.equal(out, expected), name
    lif = nn.Sequential(layer.Linear(4, 6), neuron.LIFNode(v_reset=0.0))
    lif[1].v_reset = 0.2
    with pytest.warns(
        nirbridge.LossyConversionWarning, match=r"'1' \(LIFNode\): v starts at 0.0, not at v_reset"
    ):
        sj_adapter.to_nir(lif)


def test_graded_outputs_are_refused_and_a_trained_model_exports(rng):
    graded = nn.Sequential(
        layer.Linear(2, 2), neuron.LIFNode(surrogate_function=surrogate.Sigmoid(spiking=False))
    )
    with pytest.raises(nirbridge.NodeConversionError, match=r"spiking=False"):
        sj_adapter.to_nir(graded)
    for mode in "sm":  # export right after a training step: the neurons hold non-leaf states
        model = nn.Sequential(layer.Linear(3, 4), neuron.LIFNode(tau=2.0, v_threshold=0.2)).double()
        functional.set_step_mode(model, mode)
        x = spikes(rng, (5, 2, 3))
        out = model(x) if mode == "m" else model(x[0])
        out.sum().backward()
        graph = sj_adapter.to_nir(model, [x] if mode == "m" else x[0])  # a list is several inputs
        assert graph.nodes["input"].input_type["input"].tolist() == [3]
        assert model[1].step_mode == mode and model[1].v.grad_fn is not None  # left as it was


def test_recurrent_containers_and_multi_step_convolutions(rng):
    torch.manual_seed(1)
    recurrent = nn.Sequential(
        layer.Linear(5, 6),
        layer.LinearRecurrentContainer(neuron.LIFNode(tau=2.0, v_threshold=0.5), 6, 6),
        layer.Linear(6, 3),
        neuron.IFNode(),
    ).double()
    x = spikes(rng, (80, 3, 5))
    graph = sj_adapter.to_nir(recurrent, x[0])
    block = graph.nodes["1"]
    assert isinstance(block, nir.NIRGraph) and ("rc_rec", "neuron") in block.edges
    expected = own_run(recurrent, x)
    assert expected.sum() > 20
    for name, out in imported_runs(graph, x).items():
        assert torch.equal(out, expected), name

    conv = nn.Sequential(
        layer.SeqToANNContainer(nn.Conv2d(2, 4, 3, padding=1), nn.AvgPool2d(2)),
        neuron.LIFNode(tau=2.0, step_mode="m"),
        layer.Flatten(step_mode="m"),
        layer.Linear(64, 5, step_mode="m"),
        neuron.IFNode(step_mode="m", v_threshold=0.3),
    ).double()
    xc = spikes(rng, (30, 2, 2, 8, 8), rate=0.4, scale=1.0)
    graph = sj_adapter.to_nir(conv, xc)
    kinds = [type(n).__name__ for n in graph.nodes.values()]
    assert kinds == ["Input", "Conv2d", "AvgPool2d", "LIF", "Flatten", "Affine", "IF", "Output"]
    expected = own_run(conv, xc)
    assert expected.sum() > 5
    for name, out in imported_runs(graph, xc).items():
        assert torch.equal(out, expected), name
    assert conv[1].step_mode == "m"  # the model itself is left as it was


def test_one_value_per_layer_runs_spikingjellys_fused_float32_step_as_its_own_neurons_do(rng):
    torch.manual_seed(5)
    model = nn.Sequential(
        layer.Linear(6, 16),
        neuron.LIFNode(tau=2.0, v_threshold=0.3),
        layer.Linear(16, 4),
        neuron.IFNode(v_threshold=0.2),
    )
    x = torch.from_numpy(rng.normal(0.4, 0.8, (100, 3, 6)).astype(np.float32))  # no membrane lands on θ
    expected = own_run(model, x)
    imported = sj_adapter.from_nir(sj_adapter.to_nir(model))
    lif = next(m for m in imported.modules() if isinstance(m, sj_adapter.SpikingjellyNeuron))
    assert isinstance(lif.neuron.tau, float) and type(lif.neuron.surrogate_function) is surrogate.Sigmoid
    out = nirbridge.run(imported, x).output
    assert expected.sum() > 20 and torch.equal(out, expected)


def test_what_nir_cannot_express_warns_or_is_refused():
    with pytest.warns(
        nirbridge.LossyConversionWarning, match=r"'1' \(LIFNode\): v_reset=None \(a soft reset"
    ):
        graph = sj_adapter.to_nir(nn.Sequential(layer.Linear(2, 2), neuron.LIFNode(v_reset=None)))
    assert np.all(graph.nodes["1"].v_reset == 0.0)
    # LIAFNode is a LIFNode without a forward of its own: the map would take it for one
    graded = nn.Sequential(layer.Linear(2, 2), neuron.LIAFNode(act=nn.ReLU(), threshold_related=True))
    with pytest.raises(nirbridge.NodeConversionError, match="LIAFNode is a LIFNode that computes otherwise"):
        sj_adapter.to_nir(graded)
    with pytest.raises(nirbridge.UnsupportedModuleError, match="CUBALIFNode"):
        sj_adapter.to_nir(nn.Sequential(layer.Linear(2, 2), neuron.CUBALIFNode()))
    wrapped = nn.Sequential(layer.Linear(2, 2), layer.LinearRecurrentContainer(nn.Linear(2, 2), 2, 2))
    with pytest.raises(nirbridge.NodeConversionError, match="only an IFNode, LIFNode or ParametricLIFNode"):
        sj_adapter.to_nir(wrapped)


def test_imported_neurons_follow_the_numpy_reference(rng):
    """Per-neuron parameters, v_leak ≠ v_reset, IF starting at 0: spikingjelly's own
    neurons run NIR's equations (float32 thresholds nudged in float32)."""
    n = 16
    lif = nir.LIF(
        tau=rng.uniform(2e-4, 8e-4, n),
        r=rng.uniform(0.5, 3.0, n),
        v_leak=rng.uniform(-0.3, 0.3, n),
        v_threshold=rng.uniform(0.5, 1.2, n),
        v_reset=rng.uniform(-0.5, 0.2, n),
    )
    if_node = nir.IF(r=np.full(n, 2500.0), v_threshold=np.full(n, 1.0), v_reset=np.full(n, -0.3))
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([n])),
            "lif": lif,
            "scale": nir.Scale(np.full(n, 0.5)),
            "integrate": if_node,
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "lif"), ("lif", "scale"), ("scale", "integrate"), ("integrate", "output")],
        metadata={"dt": DT},
    )
    module = sj_adapter.from_nir(graph, dtype=torch.float64)
    assert sum(isinstance(m, sj_adapter.SpikingjellyNeuron) for m in module.modules()) == 2
    compare_with_reference(module, graph, lambda t, name: rng.normal(0.3, 0.6, (3, n)), 200, DT)
    single = module.float()  # the thresholds are nudged in float32 now: spikes as nirbridge's float32
    own = nirbridge.nir_to_torch(graph, dtype=torch.float32)
    x = torch.from_numpy(rng.normal(0.3, 0.6, (200, 3, n)).astype(np.float32))
    out, expected = nirbridge.run(single, x).output, nirbridge.run(own, x).output
    assert out.dtype == torch.float32 and expected.sum() > 20
    assert (out != expected).float().mean() < 1e-3  # two float32 formulas: rounding may flip a rare spike
    with pytest.raises(nirbridge.InputError, match="node 'lif' computes in torch.float32"):
        single(torch.zeros(n, dtype=torch.float64))  # spikingjelly's neuron is nirbridge's here


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")
@pytest.mark.parametrize("name", sorted(USABLE))
def test_every_example_file_runs_and_equals_nirbridges_float64_spikes(name):
    dt = USABLE[name]
    negative = "spyx_shd" in name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        reference = nirbridge.nir_to_torch(
            EXAMPLES / name, dt=dt, dtype=torch.float64, allow_negative_tau=negative
        )
        module = sj_adapter.from_nir(EXAMPLES / name, dt=dt, dtype=torch.float64, allow_negative_tau=negative)
        leaves = list(_leaves(nirbridge.read(EXAMPLES / name)))
    meta = reference.meta["nirbridge"]
    shape = tuple(int(v) for v in meta["io"][meta["inputs"][0]].input_type["input"])
    rng = np.random.default_rng(0)
    x = spikes(rng, (60, 2, *shape), rate=0.3, scale=1.0 if len(shape) > 1 else 5.0)
    expected, out = nirbridge.run(reference, x).output, nirbridge.run(module, x).output
    assert torch.equal(out, expected)
    lif_or_if = [n for n in leaves if isinstance(n, (nir.LIF, nir.IF))]
    used = [m for m in module.modules() if isinstance(m, sj_adapter.SpikingjellyNeuron)]
    assert len(used) == len(lif_or_if)  # every LIF and IF runs as spikingjelly's


def _leaves(graph: nir.NIRGraph):
    for node in graph.nodes.values():
        if isinstance(node, nir.NIRGraph):
            yield from _leaves(node)
        else:
            yield node


def test_state_dicts_dtypes_and_verify(tmp_path):
    path = EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir"
    module = sj_adapter.from_nir(path, dt=1.0)
    reference = nirbridge.nir_to_torch(path, dt=1.0)
    assert set(module.state_dict()) == set(reference.state_dict())
    changed = {k: v + 0.25 if "v_threshold" in k else v for k, v in reference.state_dict().items()}
    module.load_state_dict(changed)
    first = next(m for m in module.modules() if isinstance(m, sj_adapter.SpikingjellyNeuron))

    def above(module):  # the threshold spikingjelly tests h >= against, in the module's dtype
        return torch.nextafter(module.v_threshold, torch.tensor(np.inf, dtype=module.v_threshold.dtype))

    # the file's thresholds are one value per layer: spikingjelly's own float and fused step
    assert isinstance(first.neuron.v_threshold, float)
    assert first.neuron.v_threshold == float(above(first).reshape(-1)[0])
    assert torch.equal(first.v_threshold, changed[next(k for k in changed if "v_threshold" in k)])
    module.load_state_dict(reference.state_dict())
    double = module.double()
    neuron_module = next(m for m in double.modules() if isinstance(m, sj_adapter.SpikingjellyNeuron))
    assert neuron_module.neuron.v_threshold == float(above(neuron_module).reshape(-1)[0])  # re-derived
    x = torch.from_numpy(np.random.default_rng(2).random((12, 2, 2, 34, 34)) < 0.3)
    report = nirbridge.verify(path, "spikingjelly", x, dt=1.0)
    assert report.ok, report
    cli = subprocess.run(
        [sys.executable, "-m", "nirbridge", "verify", str(path), "--against", "spikingjelly", "--dt", "1"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "spikingjelly" in cli.stdout

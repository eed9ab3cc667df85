"""The norse and snntorch adapters: every (export, import) pair reproduces the source
network spike for spike, checked against the source itself and against the independent
numpy reference; the real Braille and CNN files agree across the three backends."""

from __future__ import annotations

import copy
import warnings

import nir
import norse.torch as nt
import numpy as np
import pytest
import snntorch as snn
import snntorch.utils
import torch
from spikingjelly.activation_based import functional as sj_functional
from spikingjelly.activation_based import layer as sj_layer
from spikingjelly.activation_based import neuron as sj_neuron
from torch import nn
from torch.utils import _pytree as pytree

import nirbridge
from nirbridge import neurons
from nirbridge.adapters import norse as norse_adapter
from nirbridge.adapters import snntorch as snntorch_adapter
from nirbridge.adapters import spikingjelly as sj_adapter
from nirbridge.testing import assert_equivalent
from tests.conftest import EXAMPLES, input_names, t
from tests.reference import Reference

STEPS = 300
BATCH = 4


pytestmark = pytest.mark.usefixtures("float64_default")


# ----------------------------------------------------------------------------- source networks


class NirbridgeNet(nn.Module):
    """Written with nirbridge's neurons; per-neuron parameters everywhere."""

    def __init__(self, rng, dt=1e-4):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(5, 12), nn.Linear(12, 10), nn.Linear(10, 6)
        self.lif = neurons.LIF(
            tau=rng.uniform(3 * dt, 20 * dt, 12),
            r=rng.uniform(5, 15, 12),
            v_leak=rng.uniform(-0.1, 0.1, 12),
            v_threshold=rng.uniform(0.5, 1.0, 12),
            v_reset=rng.uniform(-0.2, 0.0, 12),
            dt=dt,
        )
        self.cuba = neurons.CubaLIF(
            tau_syn=rng.uniform(2 * dt, 8 * dt, 10),
            tau_mem=rng.uniform(3 * dt, 20 * dt, 10),
            r=rng.uniform(5, 15, 10),
            v_leak=rng.uniform(-0.1, 0.1, 10),
            v_threshold=rng.uniform(0.2, 0.5, 10),
            v_reset=np.zeros(10),
            w_in=rng.uniform(0.5, 2.0, 10),
            dt=dt,
        )
        self.out = neurons.LIF(
            tau=rng.uniform(3 * dt, 20 * dt, 6), r=rng.uniform(5, 15, 6), v_threshold=0.3, dt=dt
        )

    def forward(self, x, state=None):
        state = state or {}
        z, s1 = self.lif(self.fc1(x), state.get("lif"))
        z, s2 = self.cuba(self.fc2(z), state.get("cuba"))
        z, s3 = self.out(self.fc3(z), state.get("out"))
        return z, {"lif": s1, "cuba": s2, "out": s3}


def snntorch_net(rng):
    """As snntorch users write one step: nn.Sequential, init_hidden=True."""
    common = dict(reset_mechanism="zero", reset_delay=False, init_hidden=True)
    return nn.Sequential(
        nn.Linear(5, 12),
        snn.Leaky(beta=t(rng.uniform(0.5, 0.95, 12)), threshold=t(rng.uniform(0.5, 1.0, 12)), **common),
        nn.Linear(12, 10),
        snn.Synaptic(
            alpha=t(rng.uniform(0.5, 0.9, 10)), beta=t(rng.uniform(0.6, 0.95, 10)), threshold=0.4, **common
        ),
        nn.Linear(10, 6),
        snn.Leaky(beta=0.9, threshold=t(rng.uniform(0.3, 0.6, 6)), **common),
    )


def snntorch_recurrent_net(rng):
    """RLeaky, all-to-all (bias zero, so the first step is exact) and one-to-one."""
    common = dict(reset_mechanism="zero", reset_delay=False, init_hidden=True)
    rec = snn.RLeaky(beta=t(rng.uniform(0.6, 0.95, 12)), linear_features=12, threshold=0.6, **common)
    with torch.no_grad():
        rec.recurrent.bias.zero_()
    diag = snn.RLeaky(beta=0.85, all_to_all=False, V=t(rng.uniform(-0.5, 0.5, 6)), threshold=0.4, **common)
    return nn.Sequential(nn.Linear(5, 12), rec, nn.Linear(12, 6), diag)


def snntorch_conv_net(rng):
    """conv → Leaky → avg pool → flatten → linear → Leaky, on (2, 8, 8) inputs."""
    common = dict(reset_mechanism="zero", reset_delay=False, init_hidden=True)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        snn.Leaky(beta=0.8, threshold=0.5, **common),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(64, 6),
        snn.Leaky(beta=t(rng.uniform(0.5, 0.95, 6)), threshold=0.3, **common),
    )


def spikingjelly_net(rng):
    """layer.Linear → LIFNode → Linear → ParametricLIFNode → Linear → IFNode, in
    spikingjelly's own settings (τ in steps, v_reset ≠ 0, decay_input both ways)."""
    torch.manual_seed(int(rng.integers(1 << 30)))
    model = nn.Sequential(
        sj_layer.Linear(5, 12),
        sj_neuron.LIFNode(tau=3.0, v_threshold=0.6, v_reset=-0.1),
        sj_layer.Linear(12, 10),
        sj_neuron.ParametricLIFNode(init_tau=2.5, decay_input=False, v_threshold=0.8),
        sj_layer.Linear(10, 6),
        sj_neuron.IFNode(v_threshold=0.4, v_reset=-0.2),
    )
    with torch.no_grad():
        model[3].w.fill_(0.3)  # a learned time constant other than the initial one
    return model.double()


def spikingjelly_recurrent_net(rng):
    """Linear → LinearRecurrentContainer(LIFNode) → Linear → LIFNode, multi-step."""
    torch.manual_seed(int(rng.integers(1 << 30)))
    model = nn.Sequential(
        sj_layer.Linear(5, 8),
        sj_layer.LinearRecurrentContainer(sj_neuron.LIFNode(tau=2.0, v_threshold=0.2), 8, 8),
        sj_layer.Linear(8, 6),
        sj_neuron.LIFNode(tau=4.0, v_threshold=0.05, v_reset=0.01),
    ).double()
    sj_functional.set_step_mode(model, "m")
    return model


def norse_net(rng, dt=1e-3):
    return nt.SequentialState(
        nn.Linear(5, 12),
        nt.LIFBoxCell(
            nt.LIFBoxParameters(
                tau_mem_inv=t(rng.uniform(50, 300, 12)),
                v_leak=t(rng.uniform(-0.1, 0.1, 12)),
                v_th=t(rng.uniform(0.1, 0.3, 12)),
                v_reset=t(rng.uniform(-0.2, 0.0, 12)),
            ),
            dt=dt,
        ),
        nn.Linear(12, 10),
        nt.LICell(
            nt.LIParameters(
                tau_syn_inv=t(rng.uniform(100, 300, 10)),
                tau_mem_inv=t(rng.uniform(50, 200, 10)),
                v_leak=t(np.zeros(10)),
            ),
            dt=dt,
        ),
        nn.Linear(10, 6),
        nt.LIFCell(
            nt.LIFParameters(
                tau_syn_inv=t(rng.uniform(100, 300, 6)),
                tau_mem_inv=t(rng.uniform(50, 200, 6)),
                v_leak=t(np.zeros(6)),
                v_th=t(rng.uniform(0.02, 0.1, 6)),
                v_reset=t(np.zeros(6)),
            ),
            dt=dt,
        ),
        nn.Linear(6, 6),
        nt.LIBoxCell(
            nt.LIBoxParameters(tau_mem_inv=t(rng.uniform(100, 300, 6)), v_leak=t(np.zeros(6))), dt=dt
        ),
        nn.Linear(6, 6),
        nt.IAFCell(nt.IAFParameters(v_th=t(rng.uniform(0.01, 0.05, 6)), v_reset=t(np.zeros(6))), dt=dt),
    )


def export(source: str, rng):
    """(native step function, NIR graph) for a source simulator."""
    if source == "nirbridge":
        model = NirbridgeNet(rng)
        return _stateful(model), nirbridge.torch_to_nir(model)
    if source.startswith("snntorch"):
        model = {"snntorch": snntorch_net, "snntorch_recurrent": snntorch_recurrent_net}.get(
            source, snntorch_conv_net
        )(rng)
        example = torch.zeros(1, *SHAPES.get(source, (5,)))
        graph = snntorch_adapter.to_nir(model, example)
        model = model.float()  # snntorch's spikes are float32 whatever the input; it runs at float32
        snntorch.utils.reset(model)
        return (lambda x, _state: (model(x.float()), None)), graph
    if source.startswith("spikingjelly"):
        model = {"spikingjelly": spikingjelly_net, "spikingjelly_recurrent": spikingjelly_recurrent_net}[
            source
        ](rng)
        multi = source == "spikingjelly_recurrent"
        graph = sj_adapter.to_nir(model, torch.zeros(3, 1, 5) if multi else torch.zeros(1, 5))
        sj_functional.reset_net(model)
        if multi:  # its own multi-step run over a one-step sequence
            return (lambda x, _state: (model(x.unsqueeze(0))[0], None)), graph
        return (lambda x, _state: (model(x), None)), graph
    model = norse_net(rng)
    return _stateful(model), norse_adapter.to_nir(model)


def _stateful(model):
    return lambda x, state: model(x, state)


IMPORTERS = {
    "nirbridge": lambda g: nirbridge.nir_to_torch(g, dtype=torch.float64),
    "snntorch": lambda g: snntorch_adapter.from_nir(g, dtype=torch.float64),
    "norse": lambda g: norse_adapter.from_nir(g, dtype=torch.float64),
    "spikingjelly": lambda g: sj_adapter.from_nir(g, dtype=torch.float64),
}
SIMULATOR_MODULES = {
    "nirbridge": (neurons.LIF, neurons.CubaLIF, neurons.LI, neurons.CubaLI, neurons.IF),
    "snntorch": (snntorch_adapter.SnntorchNeuron,),
    "norse": (norse_adapter.NorseNeuron,),
    "spikingjelly": (sj_adapter.SpikingjellyNeuron,),
}


def run_side_by_side(graph, steps_fns, shape, steps=STEPS, seed=1, rate=0.6):
    """Step the reference and every function; assert identical outputs; return the
    number of output spikes."""
    ref = Reference(graph, graph.metadata["dt"])
    name = input_names(graph)[0]
    rng = np.random.default_rng(seed)
    states = dict.fromkeys(steps_fns)
    spikes = 0
    for step in range(steps):
        x = (rng.uniform(0, 1, (BATCH, *shape)) < rate) * rng.uniform(0.5, 2.0, (BATCH, *shape))
        expected = next(iter(ref.step({name: x}).values()))
        for label, fn in steps_fns.items():
            with torch.no_grad():
                out, states[label] = fn(torch.from_numpy(x), states[label])
            np.testing.assert_array_equal(
                out.detach().double().numpy(), expected, err_msg=f"{label} at step {step}"
            )
        spikes += int(expected.sum())
    return spikes


SHAPES = {"snntorch_conv": (2, 8, 8)}


@pytest.mark.parametrize("target", sorted(IMPORTERS))
@pytest.mark.parametrize(
    "source",
    [
        "nirbridge",
        "snntorch",
        "snntorch_recurrent",
        "snntorch_conv",
        "norse",
        "spikingjelly",
        "spikingjelly_recurrent",
    ],
)
def test_every_export_import_pair_reproduces_the_source_spike_for_spike(source, target):
    native, graph = export(source, np.random.default_rng(7))
    nir.NIRGraph(nodes=graph.nodes, edges=graph.edges, type_check=True)
    imported = IMPORTERS[target](graph)
    used = [m for m in imported.modules() if isinstance(m, SIMULATOR_MODULES[target])]
    assert used, f"no {target} neuron modules in the imported module"
    fns = {"source": native, "imported": lambda x, s: imported(x, s)}
    assert run_side_by_side(graph, fns, SHAPES.get(source, (5,))) > 100


# ----------------------------------------------------------------------------- real files


REAL = {  # file: (input shape, dt); the sinabs CNN means dt = 1 (its IF neurons have r = 1)
    "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir": ((12,), 1e-4),
    "NIR__paper__02_cnn__cnn_sinabs.nir": ((2, 34, 34), 1.0),
}
FROM_NIR = {
    "nirbridge": nirbridge.nir_to_torch,
    "snntorch": snntorch_adapter.from_nir,
    "norse": norse_adapter.from_nir,
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_files_give_identical_spikes_in_all_three_backends(name):
    shape, dt = REAL[name]
    graph = nirbridge.read(EXAMPLES / name)
    graph.metadata["dt"] = dt
    modules = {target: make(EXAMPLES / name, dt=dt, dtype=torch.float64) for target, make in FROM_NIR.items()}
    for target, module in modules.items():
        assert any(isinstance(m, SIMULATOR_MODULES[target]) for m in module.modules()), target
    fns = {target: (lambda x, s, m=m: m(x, s)) for target, m in modules.items()}
    steps = 100 if name.startswith("NIR__paper__03") else 12
    assert run_side_by_side(graph, fns, shape, steps=steps, rate=0.3) > 0


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.parametrize("target", sorted([*FROM_NIR, "spikingjelly"]))
def test_one_sample_without_a_batch_axis_runs_as_the_batchs_row(name, target, rng):
    """Every import takes one sample [*shape] as torch layers do: the output has no batch
    axis and equals the batch's first row, spike for spike, the state a batch of 1."""
    shape, dt = REAL[name]
    make = {**FROM_NIR, "spikingjelly": sj_adapter.from_nir}[target]
    module = make(EXAMPLES / name, dt=dt, dtype=torch.float64)
    spikes = torch.from_numpy(rng.random((12, 2, *shape)) < 0.3).double()
    state_one = state_batch = None
    for x in spikes:
        batch, state_batch = module(x, state_batch)
        one, state_one = module(x[0], state_one)
        assert one.shape == batch.shape[1:] and torch.equal(one, batch[0])
    leaves = [leaf for leaf in pytree.tree_leaves(state_one) if isinstance(leaf, torch.Tensor)]
    assert leaves and all(leaf.shape[0] == 1 for leaf in leaves)


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.parametrize("target", ["snntorch", "norse"])
def test_real_files_are_equivalent_in_every_layer_by_verify(name, target):
    """Every layer, not only the output: spikes identical, states in NIR's units close."""
    shape, dt = REAL[name]
    steps = 100 if name.startswith("NIR__paper__03") else 12
    x = (torch.rand(steps, 4, *shape, generator=torch.Generator().manual_seed(5)) < 0.3).double()
    reference = nirbridge.nir_to_torch(EXAMPLES / name, dt=dt, dtype=torch.float64)
    candidate = FROM_NIR[target](EXAMPLES / name, dt=dt, dtype=torch.float64)
    report = assert_equivalent(reference, candidate, x, atol=1e-9, rtol=1e-9)
    assert any(c.spikes and c.key != "output" for c in report.comparisons)
    assert not report.only_reference and not report.only_candidate


# ----------------------------------------------------------------------------- training


@pytest.mark.parametrize("target", sorted(IMPORTERS))
def test_bptt_through_50_steps_trains_an_imported_module(target):
    _, graph = export("nirbridge", np.random.default_rng(3))
    module = IMPORTERS[target](graph)
    weights = [p for p in module.parameters() if p.ndim == 2]
    before = [w.detach().clone() for w in weights]
    optimiser = torch.optim.Adam(module.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    state, loss = None, torch.zeros(())
    for _ in range(50):
        x = torch.from_numpy(rng.uniform(0, 2, (BATCH, 5)))
        out, state = module(x, state)
        loss = loss + ((out - 0.5) ** 2).mean()
    loss.backward()
    grads = [w.grad for w in weights]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(float(g.abs().sum()) > 0 for g in grads), "a surrogate gradient did not reach every layer"
    optimiser.step()
    assert all(not torch.equal(a, w) for a, w in zip(before, weights))


# ----------------------------------------------------------------------------- what NIR cannot express


def test_an_export_names_every_change_an_exact_one_needs_at_once():
    """RLeaky's defaults: the subtractive reset, the delayed reset and the recurrent bias,
    in one export (the delayed reset was said only once the reset was mended)."""
    model = nn.Sequential(nn.Linear(3, 4), snn.RLeaky(beta=0.9, linear_features=4, init_hidden=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snntorch_adapter.to_nir(model, torch.zeros(1, 3))
    said = [str(w.message) for w in caught if issubclass(w.category, nirbridge.LossyConversionWarning)]
    assert len(said) == 3, said
    assert "reset_mechanism='subtract'" in said[0] and "reset_delay=True" in said[1] and "bias" in said[2]


@pytest.mark.parametrize(
    "module, match",
    [
        (snn.Leaky(beta=0.9, init_hidden=True), r"'1' \(Leaky\): reset_mechanism='subtract' has no NIR form"),
        (
            snn.Synaptic(alpha=0.8, beta=0.9, reset_mechanism="zero", init_hidden=True),
            r"'1' \(Synaptic\): reset_delay=True zeroes the whole membrane one step after a spike",
        ),
        (
            snn.Leaky(beta=0.9, reset_mechanism="zero", graded_spikes_factor=2.0, init_hidden=True),
            r"'1' \(Leaky\): graded_spikes_factor scales spikes",
        ),
        (
            snn.RLeaky(
                beta=0.9, linear_features=4, reset_mechanism="zero", reset_delay=False, init_hidden=True
            ),
            r"'1' \(RLeaky\): recurrent.bias is added from the first step",
        ),
        (
            snn.Leaky(beta=t([0.5, 1.0, 0.9, 0.7]), reset_mechanism="zero", init_hidden=True),
            r"'1' \(Leaky\): beta is 1 \(no decay\) for some neurons",
        ),
    ],
)
def test_what_nir_cannot_express_warns_naming_module_and_parameter(module, match):
    model = nn.Sequential(nn.Linear(4, 4), module)
    with pytest.warns(nirbridge.LossyConversionWarning, match=match):
        snntorch_adapter.to_nir(model)


def test_rsynaptic_exports_its_nir_form_and_says_snntorch_resets_late():
    module = snn.RSynaptic(
        alpha=0.8, beta=0.9, all_to_all=False, V=t([0.5, -0.2, 0.1]), reset_mechanism="zero", init_hidden=True
    )
    with pytest.warns(
        nirbridge.LossyConversionWarning, match=r"'1' \(RSynaptic\): reset is applied one step late"
    ):
        graph = snntorch_adapter.to_nir(nn.Sequential(nn.Linear(3, 3), module))
    sub = graph.nodes["1"]
    assert isinstance(sub, nir.NIRGraph) and isinstance(sub.nodes["lif"], nir.CubaLIF)
    np.testing.assert_array_equal(sub.nodes["w_rec"].scale, [0.5, -0.2, 0.1])  # one-to-one
    assert ("w_rec", "lif") in sub.edges


def test_norse_iaf_with_a_nonzero_reset_warns_and_cells_must_agree_on_dt():
    iaf = nt.IAFCell(nt.IAFParameters(v_th=t(1.0), v_reset=t(-0.5)), dt=1e-3)
    with pytest.warns(nirbridge.LossyConversionWarning, match=r"'1' \(IAFCell\): norse starts v at v_reset"):
        norse_adapter.to_nir(nt.SequentialState(nn.Linear(3, 3), iaf))
    mixed = nt.SequentialState(
        nn.Linear(3, 3), nt.LIFBoxCell(dt=1e-3), nn.Linear(3, 3), nt.LIFBoxCell(dt=1e-4)
    )
    with pytest.raises(nirbridge.ParameterError, match="different dt"):
        norse_adapter.to_nir(mixed)


def test_dt_is_recorded():
    assert snntorch_adapter.to_nir(snntorch_net(np.random.default_rng(0))).metadata["dt"] == 1e-4
    assert snntorch_adapter.to_nir(snntorch_net(np.random.default_rng(0)), dt=1e-3).metadata["dt"] == 1e-3
    assert norse_adapter.to_nir(norse_net(np.random.default_rng(0))).metadata["dt"] == 1e-3


def test_imported_modules_export_back_unchanged():
    _, graph = export("nirbridge", np.random.default_rng(2))
    for target in ("snntorch", "norse"):
        module = IMPORTERS[target](graph)
        back = (snntorch_adapter if target == "snntorch" else norse_adapter).to_nir(module)
        for name in ("lif", "cuba", "out"):
            for field in ("v_threshold", "v_reset", "r"):
                np.testing.assert_array_equal(
                    getattr(back.nodes[name], field),
                    getattr(graph.nodes[name], field),
                    err_msg=f"{target} {name}",
                )


class ExplicitMem(nn.Module):
    """The other way snntorch users write a step: states passed and returned."""

    def __init__(self, rng):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(5, 12), nn.Linear(12, 6)
        self.lif1 = snn.Leaky(
            beta=t(rng.uniform(0.5, 0.95, 12)), threshold=0.7, reset_mechanism="zero", reset_delay=False
        )
        self.lif2 = snn.Synaptic(
            alpha=0.8,
            beta=t(rng.uniform(0.6, 0.9, 6)),
            threshold=0.4,
            reset_mechanism="zero",
            reset_delay=False,
        )

    def forward(self, x, mem1=None, syn2=None, mem2=None):
        spk1, mem1 = self.lif1(self.fc1(x), mem1)
        spk2, syn2, mem2 = self.lif2(self.fc2(spk1), syn2, mem2)
        return spk2, mem1, syn2, mem2


def test_snntorch_models_with_explicit_state_arguments():
    model = ExplicitMem(np.random.default_rng(4))
    graph = snntorch_adapter.to_nir(model)
    assert list(graph.nodes) == ["x", "fc1", "lif1", "fc2", "lif2", "output"]
    model = model.float()
    zeros = lambda n: torch.zeros(BATCH, n, dtype=torch.float32)  # noqa: E731

    def native(x, state):
        mem1, syn2, mem2 = state or (zeros(12), zeros(6), zeros(6))
        spk, mem1, syn2, mem2 = model(x.float(), mem1, syn2, mem2)
        return spk, (mem1, syn2, mem2)

    imported = snntorch_adapter.from_nir(graph, dtype=torch.float64)
    fns = {"source": native, "snntorch": lambda x, s: imported(x, s)}
    assert run_side_by_side(graph, fns, (5,)) > 50


# ----------------------------------------------------------------------------- found in review


def test_a_decay_of_one_in_synaptic_warns_and_stays_finite():
    layer = snn.Synaptic(alpha=1.0, beta=0.8, reset_mechanism="zero", reset_delay=False, init_hidden=True)
    with pytest.warns(nirbridge.LossyConversionWarning, match=r"'1' \(Synaptic\): alpha is 1 \(no decay\)"):
        graph = snntorch_adapter.to_nir(nn.Sequential(nn.Linear(3, 3), layer))
    assert np.all(np.isfinite(graph.nodes["1"].tau_syn)) and np.all(np.isfinite(graph.nodes["1"].w_in))


def test_lossy_warnings_name_the_layer_and_point_at_the_callers_line():
    model = nn.Sequential(
        nn.Linear(3, 3), snn.Leaky(beta=0.9, init_hidden=True), snn.Leaky(beta=0.8, init_hidden=True)
    )
    with pytest.warns(nirbridge.LossyConversionWarning) as caught:
        snntorch_adapter.to_nir(model)
    assert [str(w.message)[:12] for w in caught] == ["'1' (Leaky):", "'2' (Leaky):"]
    assert all(w.filename == __file__ for w in caught)


def test_snntorch_imports_fall_back_where_snntorch_would_differ():
    node = nir.IF(r=np.array([1e4]), v_threshold=np.array([-0.2]), v_reset=np.array([-0.5]))
    graph = nir.NIRGraph(
        nodes={"i": nir.Input(np.array([1])), "n": node, "o": nir.Output(np.array([1]))},
        edges=[("i", "n"), ("n", "o")],
        type_check=False,
    )
    module = snntorch_adapter.from_nir(graph, dt=1e-4, dtype=torch.float64)
    assert isinstance(module.n, neurons.IF)  # the start v = 0 is above threshold: snntorch would reset it
    out, _ = module(torch.zeros(1, 1))
    assert out.item() == 1.0


def test_imports_agree_on_state_dicts_states_and_copies():
    _, graph = export("nirbridge", np.random.default_rng(5))
    modules = {target: make(graph) for target, make in IMPORTERS.items()}
    keys = {target: sorted(m.state_dict()) for target, m in modules.items()}
    assert keys["snntorch"] == keys["norse"] == keys["nirbridge"]
    edited = {k: v * 1.7 if k.endswith("tau") else v for k, v in modules["nirbridge"].state_dict().items()}
    for module in modules.values():
        module.load_state_dict(edited)  # the simulators' own settings follow the loaded values
    x = torch.rand(1, 5) * 3
    first = {target: m(x) for target, m in modules.items()}
    batch = torch.rand(BATCH, 5) * 3  # a batch-1 state continues on a batch of 4
    outs = {target: m(batch, first[target][1])[0] for target, m in modules.items()}
    assert torch.equal(outs["snntorch"], outs["nirbridge"]) and torch.equal(outs["norse"], outs["nirbridge"])
    out, _ = modules["snntorch"](x)  # with autograd on
    out.sum().backward()
    copy_of = copy.deepcopy(modules["snntorch"])  # it holds no step's autograd graph
    assert torch.equal(copy_of(x)[0], modules["snntorch"](x)[0])


def test_one_to_one_recurrence_with_a_scalar_v_and_reset_state_inside_forward():
    layer = snn.RLeaky(
        beta=0.9, all_to_all=False, reset_mechanism="zero", reset_delay=False, init_hidden=True
    )
    graph = snntorch_adapter.to_nir(nn.Sequential(nn.Linear(4, 4), layer))
    assert graph.nodes["1"].nodes["w_rec"].scale.shape == (4,)

    class Restarting(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.lif = (
                nn.Linear(3, 3),
                snn.Leaky(beta=0.9, reset_mechanism="zero", reset_delay=False),
            )

        def forward(self, x):
            mem = self.lif.init_leaky()
            spk, mem = self.lif(self.fc(x), mem)
            return spk

    with pytest.warns(nirbridge.LossyConversionWarning, match="module 'lif' is given a fixed state"):
        snntorch_adapter.to_nir(Restarting())


def test_imported_modules_export_through_any_map_with_their_dt():
    _, graph = export("nirbridge", np.random.default_rng(6))
    graph.metadata["dt"] = 1e-3  # too large for these neurons' τ, which is not the point here
    with pytest.warns(nirbridge.DtWarning, match="forward Euler overshoots"):
        module = snntorch_adapter.from_nir(graph, dt=1e-3)
    assert snntorch_adapter.to_nir(module).metadata["dt"] == 1e-3
    with pytest.warns(nirbridge.DtWarning, match="forward Euler overshoots"):
        norse_module = norse_adapter.from_nir(graph)
    again = nirbridge.torch_to_nir(norse_module)
    assert [type(n).__name__ for n in again.nodes.values()] == [
        type(n).__name__ for n in graph.nodes.values()
    ]


NORSE_NODES = {
    nir.LIF: lambda n, leak, reset: nir.LIF(
        tau=np.full(n, 5e-3), r=np.ones(n), v_leak=leak, v_threshold=np.linspace(0.3, 0.6, n), v_reset=reset
    ),
    nir.LI: lambda n, leak, reset: nir.LI(tau=np.linspace(2e-3, 9e-3, n), r=np.ones(n), v_leak=leak),
    nir.CubaLIF: lambda n, leak, reset: nir.CubaLIF(
        tau_syn=np.linspace(2e-3, 4e-3, n),
        tau_mem=np.full(n, 6e-3),
        r=np.linspace(0.5, 2.0, n),
        v_leak=leak,
        v_threshold=np.full(n, 0.4),
        v_reset=reset,
        w_in=np.full(n, 3.0),
    ),
    nir.CubaLI: lambda n, leak, reset: nir.CubaLI(
        tau_syn=np.full(n, 3e-3),
        tau_mem=np.linspace(4e-3, 8e-3, n),
        r=np.ones(n),
        v_leak=leak,
        w_in=np.ones(n),
    ),
    nir.IF: lambda n, leak, reset: nir.IF(r=np.full(n, 1e3), v_threshold=np.full(n, 0.5), v_reset=reset),
}


@pytest.mark.parametrize("zero", [True, False], ids=["zero leak and reset", "per-neuron leak and reset"])
@pytest.mark.parametrize("node_type", list(NORSE_NODES), ids=lambda t: t.__name__)
def test_norse_neurons_step_as_the_norse_cells_do_bit_for_bit(node_type, zero):
    n, dt = 6, 1e-3
    leak, reset = (
        (np.zeros(n), np.zeros(n)) if zero else (np.linspace(-0.1, 0.1, n), np.linspace(-0.2, 0.1, n))
    )
    neuron = norse_adapter.NorseNeuron(NORSE_NODES[node_type](n, leak, reset), dt)
    cell = neuron.cell
    scale = 1.0 if neuron._scale is None else neuron._scale
    inputs = (torch.rand(40, BATCH, n) * 2).requires_grad_()
    _, start = neuron(torch.rand(BATCH, n))  # both continue from one state
    ours, theirs = (None, start), (None, start)
    outs, norse_outs = [], []
    for x in inputs:
        ours = neuron(x, ours[1])
        theirs = cell.activation(x * scale, theirs[1], cell.p, cell.dt)
        assert all(torch.equal(a, b) for a, b in zip(ours[1], theirs[1], strict=True))
        outs.append(ours[0])
        norse_outs.append(theirs[0])
    outs, norse_outs = torch.stack(outs), torch.stack(norse_outs)
    assert torch.equal(outs, norse_outs)
    if node_type not in (nir.LI, nir.CubaLI):
        assert 0 < outs.mean() < 1  # spikes, not silence
    weights = torch.rand_like(outs)
    grad = torch.autograd.grad((outs * weights).sum(), inputs)[0]
    norse_grad = torch.autograd.grad((norse_outs * weights).sum(), inputs)[0]
    assert grad.abs().sum() > 0 and torch.equal(grad, norse_grad)


def test_adapters_take_skip_and_module_map_like_torch_to_nir():
    """The Dropout error tells users to pass skip=; the adapters take it (and None entries)."""
    leaky = snn.Leaky(beta=0.9, reset_mechanism="zero", reset_delay=False, init_hidden=True)
    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.2), leaky).eval()
    with pytest.raises(nirbridge.UnsupportedModuleError, match=r"skip=\(nn.Dropout,\)"):
        snntorch_adapter.to_nir(model)
    for graph in (
        snntorch_adapter.to_nir(model, skip=(nn.Dropout,)),
        snntorch_adapter.to_nir(model, module_map={nn.Dropout: None}),
    ):
        assert list(graph.nodes) == ["input", "0", "2", "output"]
        assert graph.edges == [("input", "0"), ("0", "2"), ("2", "output")]
    cells = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.2))
    graph = norse_adapter.to_nir(cells.eval(), skip=(nn.Dropout,))
    assert list(graph.nodes) == ["input", "0", "output"]
    with pytest.raises(nirbridge.ParameterError, match="pass it by name: example_input=") as info:
        norse_adapter.to_nir(cells, None, module_map=torch.zeros(1, 4))
    assert isinstance(info.value, ValueError)

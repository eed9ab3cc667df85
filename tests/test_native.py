"""nirbridge.native: native snntorch, norse, spikingjelly and torch models in run and verify.

The truth for every form is the user's own loop over time, written as each simulator's
tutorials write it, never nirbridge: ``run`` must give exactly that loop's output, start
from the model's own initial state, leave the model as it found it, and continue from
the state it returns. ``verify`` against each form's exact export must be ``ok`` with
the hidden layers compared under their NIR node names, and a perturbed export must be
caught at the layer that was changed.
"""

from __future__ import annotations

import copy
import warnings

import nir
import norse.torch as norse
import numpy as np
import pytest
import snntorch as snn
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snntorch import utils as snn_utils
from spikingjelly.activation_based import functional as sj_functional
from spikingjelly.activation_based import layer as sj_layer
from spikingjelly.activation_based import neuron as sj_neuron
from torch import nn

import nirbridge
from nirbridge.adapters import norse as norse_adapter
from nirbridge.adapters import snntorch as snntorch_adapter
from nirbridge.adapters import spikingjelly as sj_adapter
from nirbridge.native import NativeModelError, Stateless, Steps, WholeSequence

pytestmark = pytest.mark.usefixtures("seeded")

ZERO = dict(reset_mechanism="zero", reset_delay=False)


@pytest.fixture
def seeded():
    """float32 models (snntorch's spikes are float32 whatever the model's dtype), seeded."""
    torch.manual_seed(0)


def spikes(steps=40, batch=3, width=5, seed=0, p=0.4):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(steps, batch, width, generator=generator) < p).float()


def state_loop(model, x):
    """The loop of models that pass their state on: ``out, state = model(x_t, state)``."""
    state, out = None, []
    for x_t in x:
        y, state = model(x_t, state)
        out.append(y)
    return torch.stack(out)


def strong(*layers, low=0.2, high=1.0):
    """Weights that make the neurons fire."""
    with torch.no_grad():
        for layer in layers:
            layer.weight.uniform_(low, high)
            if layer.bias is not None:
                layer.bias.zero_()


# ----------------------------------------------------------------------------- snntorch forms


class LeakyExplicit(nn.Module):
    """snntorch's tutorial form: the membrane passed in and returned."""

    def __init__(self, n=8, beta=0.9, threshold=1.0):
        super().__init__()
        self.fc = nn.Linear(5, n)
        self.lif = snn.Leaky(beta=beta, threshold=threshold, **ZERO)
        strong(self.fc)

    def forward(self, x, mem=None):
        spk, mem = self.lif(self.fc(x), mem)
        return spk, mem

    def own_loop(self, x):
        mem = self.lif.init_leaky()
        out = []
        for x_t in x:
            spk, mem = self(x_t, mem)
            out.append(spk)
        return torch.stack(out)


class LeakyInside(nn.Module):
    """init_hidden=False, but no membrane passed: snntorch keeps it in ``self.mem``."""

    def __init__(self, n=8, beta=0.9, threshold=1.0):
        super().__init__()
        self.fc = nn.Linear(5, n)
        self.lif = snn.Leaky(beta=beta, threshold=threshold, **ZERO)
        strong(self.fc)

    def forward(self, x):
        spk, _ = self.lif(self.fc(x))
        return spk

    def own_loop(self, x):
        self.lif.reset_mem()
        return torch.stack([self(x_t) for x_t in x])


class Hidden(nn.Sequential):
    """init_hidden=True in an nn.Sequential, the last neuron with output=True."""

    def __init__(self, n=8, beta=0.9, threshold=1.0):
        super().__init__(
            nn.Linear(5, n),
            snn.Leaky(beta=beta, threshold=threshold, init_hidden=True, **ZERO),
            nn.Linear(n, 4),
            snn.Leaky(beta=0.8, threshold=threshold, init_hidden=True, output=True, **ZERO),
        )
        strong(self[0], self[2])

    def own_loop(self, x):
        snn_utils.reset(self)
        return torch.stack([self(x_t)[0] for x_t in x])


class RLeakyIdiom(nn.Module):
    """``if mem is None: spk, mem = self.rlif.init_rleaky()``, as snntorch's tutorials write it."""

    def __init__(self, n=8, beta=0.9, threshold=1.0):
        super().__init__()
        self.fc = nn.Linear(5, n)
        self.rlif = snn.RLeaky(beta=beta, threshold=threshold, linear_features=n, **ZERO)
        strong(self.fc)
        with torch.no_grad():
            self.rlif.recurrent.weight.uniform_(-0.3, 0.3)
            self.rlif.recurrent.bias.zero_()

    def forward(self, x, spk=None, mem=None):
        if mem is None:
            spk, mem = self.rlif.init_rleaky()
        spk, mem = self.rlif(self.fc(x), spk, mem)
        return spk, mem

    def own_loop(self, x):
        spk, mem = self.rlif.init_rleaky()
        out = []
        for x_t in x:
            spk, mem = self(x_t, spk, mem)
            out.append(spk)
        return torch.stack(out)


class SynapticExplicit(nn.Module):
    def __init__(self, n=8, beta=0.9, threshold=1.0):
        super().__init__()
        self.fc = nn.Linear(5, n)
        self.syn = snn.Synaptic(alpha=0.7, beta=beta, threshold=threshold, **ZERO)
        strong(self.fc)

    def forward(self, x, syn=None, mem=None):
        spk, syn, mem = self.syn(self.fc(x), syn, mem)
        return spk, syn, mem

    def own_loop(self, x):
        syn, mem = self.syn.init_synaptic()
        out = []
        for x_t in x:
            spk, syn, mem = self(x_t, syn, mem)
            out.append(spk)
        return torch.stack(out)


class RSynapticHidden(nn.Sequential):
    """RSynaptic with init_hidden=True, run only: its reset_delay=False step fails in
    snntorch 1.0 itself (it reads the spk argument, None or empty), and the default
    reset_delay=True has no NIR form."""

    def __init__(self, n=8, beta=0.9, threshold=1.0):
        rsyn = snn.RSynaptic(
            alpha=0.7,
            beta=beta,
            threshold=threshold,
            linear_features=n,
            init_hidden=True,
            reset_mechanism="zero",
        )
        super().__init__(nn.Linear(5, n), rsyn)
        strong(self[0])
        with torch.no_grad():
            rsyn.recurrent.bias.zero_()

    def own_loop(self, x):
        snn_utils.reset(self)
        return torch.stack([self(x_t) for x_t in x])


class AlphaHidden(nn.Sequential):
    """snntorch's Alpha neuron (no NIR form): run steps it all the same."""

    def __init__(self, n=8, beta=0.8, threshold=1.0):
        super().__init__(
            nn.Linear(5, n),
            snn.Alpha(alpha=0.9, beta=beta, threshold=threshold, init_hidden=True, reset_mechanism="zero"),
        )
        strong(self[0])

    def own_loop(self, x):
        snn_utils.reset(self)
        return torch.stack([self(x_t) for x_t in x])


# ----------------------------------------------------------------------------- norse forms


class NorseSequential(norse.SequentialState):
    def __init__(self, n=8, dt=1e-3):
        fc = nn.Linear(5, n)
        strong(fc, low=1.0, high=3.0)
        super().__init__(fc, norse.LIFBoxCell(norse.LIFBoxParameters(tau_mem_inv=torch.tensor(200.0)), dt=dt))
        self.expected_dt = dt

    def own_loop(self, x):
        return state_loop(self, x)


class NorseCells(nn.Module):
    """Cells with explicit state in a user's forward(x, state)."""

    def __init__(self, n=8):
        super().__init__()
        self.fc = nn.Linear(5, n)
        self.lif = norse.LIFCell()
        self.out = nn.Linear(n, 3)
        self.li = norse.LIBoxCell()
        strong(self.fc, low=2.0, high=6.0)
        self.expected_dt = 1e-3

    def forward(self, x, state=None):
        s1, s2 = state if state is not None else (None, None)
        z, s1 = self.lif(self.fc(x), s1)
        v, s2 = self.li(self.out(z), s2)
        return v, (s1, s2)

    def own_loop(self, x):
        return state_loop(self, x)


class NorseWholeSequence(norse.SequentialState):
    """norse's sequence modules: one call over [T, B, ...]."""

    def __init__(self, n=8):
        fc = nn.Linear(5, n)
        strong(fc, low=2.0, high=6.0)
        super().__init__(fc, norse.LIF())
        self.expected_dt = 1e-3

    def own_loop(self, x):
        return self(x)[0]


# ----------------------------------------------------------------------------- spikingjelly forms


class JellySingle(nn.Sequential):
    def __init__(self, n=8, tau=2.0, threshold=1.0):
        super().__init__(sj_layer.Linear(5, n), sj_neuron.LIFNode(tau=tau, v_threshold=threshold))
        strong(self[0])

    def own_loop(self, x):
        sj_functional.reset_net(self)
        return torch.stack([self(x_t) for x_t in x])


class JellyMulti(nn.Sequential):
    def __init__(self, n=8, tau=2.0, threshold=1.0):
        super().__init__(
            sj_layer.SeqToANNContainer(nn.Linear(5, n)),
            sj_neuron.LIFNode(tau=tau, v_threshold=threshold, step_mode="m"),
            sj_layer.Linear(n, 4, step_mode="m"),
            sj_neuron.IFNode(v_threshold=threshold, step_mode="m"),
        )
        strong(self[0][0], self[2])

    def own_loop(self, x):
        sj_functional.reset_net(self)
        return self(x)


class JellyContainers(nn.Sequential):
    """Multi-step through containers: one folds time into the batch, one loops over it."""

    def __init__(self, n=8, tau=2.0, threshold=1.0):
        super().__init__(
            sj_layer.SeqToANNContainer(nn.Linear(5, n)),
            sj_layer.MultiStepContainer(sj_neuron.LIFNode(tau=tau, v_threshold=threshold)),
        )
        strong(self[0][0])

    def own_loop(self, x):
        sj_functional.reset_net(self)
        return self(x)


# ----------------------------------------------------------------------------- torch forms


class TorchStateful(nn.Module):
    """Any module forward(x, state) -> (out, state): an exponential average."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)

    def forward(self, x, state=None):
        h = self.fc(x) if state is None else 0.5 * state + self.fc(x)
        return torch.tanh(h), h

    def own_loop(self, x):
        return state_loop(self, x)


class TorchStateless(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Linear(5, 6), nn.Linear(6, 2))

    def own_loop(self, x):
        return torch.stack([self(x_t) for x_t in x])


class TorchNeurons(nn.Module):
    """Plain torch with nirbridge's neurons, state threaded as a dict: torch_to_nir's own form."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 8)
        self.lif = nirbridge.neurons.LIF(tau=2e-3, r=8.0, v_threshold=0.5, dt=1e-3)
        self.out = nn.Linear(8, 3)
        self.li = nirbridge.neurons.LI(tau=5e-3, r=1.0, dt=1e-3)
        strong(self.fc)

    def forward(self, x, state=None):
        state = state or {}
        z, s1 = self.lif(self.fc(x), state.get("lif"))
        v, s2 = self.li(self.out(z), state.get("li"))
        return v, {"lif": s1, "li": s2}

    def own_loop(self, x):
        return state_loop(self, x)


FORMS = {
    "snntorch explicit": LeakyExplicit,
    "snntorch inside": LeakyInside,
    "snntorch init_hidden": Hidden,
    "snntorch RLeaky init_rleaky": RLeakyIdiom,
    "snntorch Synaptic": SynapticExplicit,
    "snntorch RSynaptic": RSynapticHidden,
    "snntorch Alpha": AlphaHidden,
    "norse SequentialState": NorseSequential,
    "norse cells": NorseCells,
    "norse sequence": NorseWholeSequence,
    "spikingjelly step_mode s": JellySingle,
    "spikingjelly step_mode m": JellyMulti,
    "spikingjelly containers": JellyContainers,
    "torch forward(x, state)": TorchStateful,
    "torch stateless": TorchStateless,
    "torch with nirbridge neurons": TorchNeurons,
}
EXPORTED = {
    "snntorch explicit": snntorch_adapter,
    "snntorch inside": snntorch_adapter,
    "snntorch init_hidden": snntorch_adapter,
    "snntorch RLeaky init_rleaky": snntorch_adapter,
    "snntorch Synaptic": snntorch_adapter,
    "norse SequentialState": norse_adapter,
    "norse cells": norse_adapter,
    "spikingjelly step_mode s": sj_adapter,
    "spikingjelly step_mode m": sj_adapter,
    "spikingjelly containers": sj_adapter,
    "torch stateless": None,
    "torch with nirbridge neurons": None,
}


def own_loop(model, x):
    with torch.no_grad():
        return model.own_loop(x)


def hidden_variables(model):
    """Every tensor a neuron holds between calls, for 'left as it was found'."""
    found = {}
    for path, m in model.named_modules():
        for name, value in [*m._buffers.items(), *getattr(m, "_memories", {}).items()]:
            if isinstance(value, torch.Tensor):
                found[(path, name)] = value.clone()
    return found


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_runs_as_its_own_loop_and_leaves_the_model_as_found(form):
    torch.manual_seed(3)
    model = FORMS[form]()
    x = spikes()
    expected = own_loop(model, x)  # leaves the neurons mid-run: run must reset them first
    before = hidden_variables(model)
    with torch.no_grad():
        result = nirbridge.run(model, x)
    same = torch.equal
    if form == "torch stateless":  # one call over all T·B rows: a matrix product blocked otherwise
        same = lambda a, b: torch.allclose(a, b, rtol=1e-6, atol=1e-7)  # noqa: E731
    assert same(result.output, expected), form
    if form not in (
        "torch forward(x, state)",
        "torch stateless",
        "norse cells",
        "torch with nirbridge neurons",
    ):
        assert expected.sum() > 0, form  # the comparison sees spikes
    after = hidden_variables(model)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), form
    # the state run returns continues the run
    with torch.no_grad():
        first = nirbridge.run(model, x[:15])
        rest = nirbridge.run(model, x[15:], state=first.state)
    assert same(torch.cat([first.output, rest.output]), expected), form
    copy.deepcopy(first.state)


def test_dt_is_the_simulators_own():
    x = spikes(steps=5)
    with torch.no_grad():
        assert nirbridge.run(NorseSequential(dt=2e-3), x).dt == 2e-3
        assert nirbridge.run(NorseCells(), x).dt == 1e-3
        for model, why in [(Hidden(), "snntorch steps"), (JellySingle(), "spikingjelly counts tau in steps")]:
            result = nirbridge.run(model, x)
            assert result.dt is None and why in result.dt_from, result.dt_from
            assert result.summary()["output"].rate is None
            with pytest.raises(nirbridge.RecordError, match="has no dt"):
                result.to_nir_data()
        assert nirbridge.run(Hidden(), x, dt=1e-3).dt == 1e-3  # a model without dt takes one
        with pytest.raises(nirbridge.ParameterError, match="own dt = 0.001"):
            nirbridge.run(NorseCells(), x, dt=1e-4)
        assert nirbridge.run(TorchStateless(), x).dt is None
        assert nirbridge.run(TorchNeurons(), x).dt == 1e-3  # nirbridge's own neurons in a torch model


def test_the_silence_warning_names_the_native_dt():
    model = NorseSequential(dt=1e-3)
    with torch.no_grad():
        model[0].weight.zero_()
    with pytest.warns(nirbridge.SilentNetworkWarning) as caught:
        nirbridge.run(model, spikes(steps=5))
    assert "1e-4" not in str(caught[0].message) and "0.0001" not in str(caught[0].message)


@pytest.mark.parametrize("form", list(EXPORTED))
def test_each_form_verifies_against_its_exact_export_with_hidden_layers(form):
    torch.manual_seed(5)
    model = FORMS[form]()
    x = spikes()
    adapter = EXPORTED[form]
    with warnings.catch_warnings():
        warnings.simplefilter("error", nirbridge.LossyConversionWarning)  # exact exports, no false warning
        example = x if form in ("spikingjelly step_mode m", "spikingjelly containers") else x[0]
        graph = (
            adapter.to_nir(model, example) if adapter else nirbridge.torch_to_nir(model, example_input=x[0])
        )
    imported = nirbridge.nir_to_torch(graph)
    for reference, candidate in ((model, imported), (imported, model)):
        report = nirbridge.verify(reference, candidate, x)
        assert report.ok, (form, report)
        hidden = [c.key for c in report.comparisons if c.key != "output"]
        assert len(hidden) >= 2, (form, hidden)  # a layer and a neuron at least
        assert all(c.ok for c in report.comparisons)


@pytest.mark.parametrize(
    "form", ["snntorch init_hidden", "spikingjelly step_mode m", "norse SequentialState"]
)
def test_a_perturbed_export_is_caught_at_the_changed_layer(form):
    torch.manual_seed(7)
    model = FORMS[form]()
    x = spikes(steps=60)
    adapter = EXPORTED[form]
    graph = adapter.to_nir(model, x if form == "spikingjelly step_mode m" else x[0])
    layer = next(name for name, node in graph.nodes.items() if hasattr(node, "weight"))
    graph.nodes[layer].weight[0, 0] += 0.5
    report = nirbridge.verify(model, nirbridge.nir_to_torch(graph), x)
    assert not report.ok
    _, key = report.first_divergence
    assert key == layer, report
    order = [c.key for c in report.comparisons]
    assert all(c.ok for c in report.comparisons[: order.index(layer)]), report  # the layers before agree


def test_a_layer_without_counterpart_is_listed_on_one_side():
    model = Hidden()
    x = spikes()
    graph = snntorch_adapter.to_nir(model, x[0])
    imported = nirbridge.nir_to_torch(graph)
    report = nirbridge.verify(model, imported, x, layers={"0": "0", "1": "1"})  # two layers named
    assert report.ok, report
    assert {"2", "3"} <= set(report.only_candidate), report.only_candidate
    assert "recorded only in the candidate" in str(report)


def test_verify_does_not_call_an_extra_output_equivalent():
    graph = nirbridge.torch_to_nir(TorchStateless(), example_input=torch.zeros(1, 5))
    extra = copy.deepcopy(graph)
    extra.nodes["second"] = nir.Output(np.array([6]))
    extra.edges.append(("0", "second"))
    report = nirbridge.verify(graph, extra, spikes(steps=4))
    assert not report.ok
    assert "second" in report.table() and "only in the candidate" in report.table()
    report = nirbridge.verify(extra, graph, spikes(steps=4))
    assert not report.ok and "only in the reference" in report.table()


def test_forms_that_cannot_be_stepped_safely_are_refused_with_the_wrapper():
    class LoopsInside(nn.Module):  # snntorch's tutorial 5: the loop over time inside forward
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 4)
            self.lif = snn.Leaky(beta=0.9, **ZERO)

        def forward(self, x):
            mem = self.lif.init_leaky()
            out = []
            for x_t in x:
                spk, mem = self.lif(self.fc(x_t), mem)
                out.append(spk)
            return torch.stack(out)

    x = spikes(steps=10)
    model = LoopsInside()
    strong(model.fc)
    with pytest.raises(NativeModelError, match=r"WholeSequence\(model\)"):
        nirbridge.run(model, x)
    with torch.no_grad():
        assert torch.equal(nirbridge.run(WholeSequence(model), x).output, model(x))

    class Custom(nn.Module):  # a leaf nirbridge cannot vouch for
        def forward(self, x):
            return x * 2

    with pytest.raises(NativeModelError, match=r"Stateless\(model\)"):
        nirbridge.run(nn.Sequential(nn.Linear(5, 3), Custom()), x)
    assert nirbridge.run(Stateless(nn.Sequential(nn.Linear(5, 3), Custom())), x).output.shape == (10, 3, 3)

    class NorseRestarts(nn.Module):  # norse cells without a state argument
        def __init__(self):
            super().__init__()
            self.cell = norse.LIFBoxCell()

        def forward(self, x):
            return self.cell(x)[0]

    with pytest.raises(NativeModelError, match="keeps its state only in what it returns"):
        nirbridge.run(NorseRestarts(), x)
    lif = nirbridge.neurons.LIF(
        tau=1e-3, r=1.0, v_threshold=0.5
    )  # in an nn.Sequential, which passes no state
    with pytest.raises(NativeModelError, match=r"'1' \(LIF\) keeps its state only in what it returns"):
        nirbridge.run(nn.Sequential(nn.Linear(5, 5), lif), x)

    class TwoInputs(nn.Module):
        def forward(self, x, y):
            return x + y

    with pytest.raises(NativeModelError, match="without defaults"):
        nirbridge.run(TwoInputs(), x)

    class WrongReturn(nn.Module):
        def __init__(self):
            super().__init__()
            self.lif = snn.Leaky(beta=0.9)

        def forward(self, x, syn=None, mem=None):
            return self.lif(x, mem)[0]

    with pytest.raises(NativeModelError, match=r"\(output, syn, mem\)"):
        nirbridge.run(WrongReturn(), x)
    mixed = nn.Sequential(sj_neuron.LIFNode(step_mode="m"), sj_neuron.LIFNode(step_mode="s"))
    with pytest.raises(NativeModelError, match="mixes"):
        nirbridge.run(mixed, x)
    with pytest.raises(nirbridge.ParameterError, match="runs as its own code"):
        nirbridge.run(Hidden(), x, backend="compile")


@pytest.mark.parametrize(
    "neuron",
    [
        snn.Leaky(beta=0.9, threshold=0.5, **ZERO),
        snn.Leaky(beta=0.9, threshold=0.5, init_hidden=True, **ZERO),
        sj_neuron.LIFNode(tau=2.0, v_threshold=0.5),
        sj_neuron.LIFNode(tau=2.0, v_threshold=0.5, step_mode="m"),
        norse.LIFBoxCell(),
    ],
    ids=["snntorch", "snntorch init_hidden", "spikingjelly s", "spikingjelly m", "norse"],
)
def test_a_neuron_alone_runs_as_its_own_loop(neuron):
    scale = {norse.LIFBoxCell: 200.0, sj_neuron.LIFNode: 1.0}.get(type(neuron), 0.4)
    x = spikes(steps=30) * scale
    with torch.no_grad():
        if isinstance(neuron, norse.LIFBoxCell):
            state, outs = None, []
            for x_t in x:
                z, state = neuron(x_t, state)
                outs.append(z)
            expected = torch.stack(outs)
        elif isinstance(neuron, snn.Leaky):
            neuron.reset_mem()
            expected = torch.stack([neuron(x_t)[0] if not neuron.init_hidden else neuron(x_t) for x_t in x])
        else:
            sj_functional.reset_net(neuron)
            expected = neuron(x) if neuron.step_mode == "m" else torch.stack([neuron(x_t) for x_t in x])
        result = nirbridge.run(neuron, x)
    assert expected.sum() > 0
    assert torch.equal(result.output, expected)
    assert result.spiking_outputs == {"output"}


def test_steps_runs_a_neuron_called_twice_per_step():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lif = snn.Leaky(beta=0.9, init_hidden=True, **ZERO)

        def forward(self, x):
            self.lif(x)
            return self.lif(x)

    x = spikes(steps=10)
    with pytest.raises(NativeModelError, match="stepped 'lif' 2 times"):
        nirbridge.run(Twice(), x)
    model = Twice()
    with torch.no_grad():
        model.lif.reset_mem()
        expected = torch.stack([model(x_t) for x_t in x])
        assert torch.equal(nirbridge.run(Steps(model), x).output, expected)


def test_a_state_that_is_not_this_models_is_refused():
    x = spikes(steps=3)
    with torch.no_grad():
        first = nirbridge.run(Hidden(), x)
        explicit = nirbridge.run(LeakyExplicit(), x)
    assert set(first.state) == {"hidden"} and set(first.state["hidden"]) == {"1", "3"}
    assert set(first.state["hidden"]["1"]) == {"mem"}
    assert set(explicit.state) == {"passed", "hidden"} and len(explicit.state["passed"]) == 1
    with pytest.raises(nirbridge.StateError, match=r"keeps state in \['1'\]"):
        nirbridge.run(JellySingle(), x, state=first.state)
    with pytest.raises(nirbridge.StateError, match="'passed': the state its forward returns"):
        nirbridge.run(LeakyExplicit(), x, state=explicit.state["passed"][0])  # a bare membrane
    with pytest.raises(nirbridge.StateError, match="has batch 3, the input batch 2"):
        nirbridge.run(Hidden(), spikes(steps=3, batch=2), state=first.state)
    with pytest.raises(nirbridge.StateError, match="no state to continue from"):
        nirbridge.run(TorchStateless(), x, state=first.state)


def test_neurons_that_keep_their_own_state_beside_passed_state_continue_exactly():
    class Mixed(nn.Module):  # lif1's membrane is passed on, lif2 keeps its own
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(5, 8), nn.Linear(8, 4)
            self.lif1, self.lif2 = snn.Leaky(beta=0.9, **ZERO), snn.Leaky(beta=0.8, **ZERO)
            strong(self.fc1, self.fc2)

        def forward(self, x, mem1=None):
            spk1, mem1 = self.lif1(self.fc1(x), mem1)
            spk2, _ = self.lif2(self.fc2(spk1))
            return spk2, mem1

    model, x = Mixed(), spikes()
    with torch.no_grad():
        model.lif2.reset_mem()
        mem1, out = None, []
        for x_t in x:
            spk, mem1 = model(x_t, mem1)
            out.append(spk)
        first = nirbridge.run(model, x[:10])
        rest = nirbridge.run(model, x[10:], state=first.state)
    assert torch.stack(out).sum() > 0
    assert torch.equal(torch.cat([first.output, rest.output]), torch.stack(out))


def test_an_ambiguous_returned_state_is_refused():
    class SpikesAndMembrane(nn.Module):  # returns (spk, mem) for the arguments (syn, mem)
        def __init__(self):
            super().__init__()
            self.syn = snn.Synaptic(alpha=0.7, beta=0.9, **ZERO)

        def forward(self, x, syn=None, mem=None):
            spk, syn, mem = self.syn(x, syn, mem)
            return spk, mem

    with pytest.raises(NativeModelError, match=r"needs \(output, syn, mem\), in that order"):
        nirbridge.run(SpikesAndMembrane(), spikes(steps=3))


def test_torch_recurrent_layers_are_refused_unless_wrapped():
    lstm = nn.LSTM(5, 4)
    x = torch.randn(6, 3, 5)
    with pytest.raises(NativeModelError, match=r"torch's recurrent layers"):
        nirbridge.run(lstm, x)
    with torch.no_grad():
        assert torch.equal(nirbridge.run(WholeSequence(lstm), x).output, lstm(x)[0])


def test_batch_norm_in_training_mode_is_left_as_found():
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), snn.Leaky(beta=0.9, init_hidden=True, **ZERO))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        nirbridge.run(model, spikes(steps=20))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_native_states_deep_copy_while_autograd_records():
    x = spikes(steps=5)
    for model in (LeakyExplicit(), NorseSequential(), Hidden()):
        result = nirbridge.run(model, x)  # grad mode on: the states carry autograd history
        kept = copy.deepcopy(result.state)
        with torch.no_grad():
            whole = nirbridge.run(model, torch.cat([x, x]))
            rest = nirbridge.run(model, x, state=kept)
        assert torch.equal(rest.output, whole.output[5:]), type(model).__name__


def test_whole_sequence_modules_run_in_a_forward_without_state():
    class NorseLIF(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 8)
            self.lif = norse.LIF()
            strong(self.fc, low=2.0, high=6.0)

        def forward(self, x):
            z, _ = self.lif(self.fc(x))
            return z

    model, x = NorseLIF(), spikes()
    with torch.no_grad():
        result = nirbridge.run(model, x)
        assert torch.equal(result.output, model(x)) and result.output.sum() > 0
    assert result.state is None and result.dt == 1e-3


def test_a_native_model_takes_float64_input_as_its_own_loop_does():
    cell = norse.LIFBoxCell()  # no parameters: the model's dtype is the input's
    x = spikes(steps=10).double() * 300
    with torch.no_grad():
        expected = state_loop(cell, x)
        assert torch.equal(nirbridge.run(cell, x).output, expected)


def test_a_layer_stepped_inside_a_whole_sequence_call_records_at_one_step():
    model = JellyContainers()
    x = spikes(steps=1)
    with torch.no_grad():
        result = nirbridge.run(model, x, record="outputs")
    assert set(result.records) == {"0.0", "1.0"} and result.records["1.0"].shape == (1, 3, 8)


def test_the_states_deep_copy_works_while_autograd_records():
    graph = snntorch_adapter.to_nir(LeakyExplicit(), torch.zeros(1, 5))
    gm = nirbridge.nir_to_torch(graph)
    x = spikes(steps=3)
    _, state = gm(x[0])
    _, state = gm(x[1], state)
    assert state["nodes"]["lif"].v.requires_grad  # computed from parameters: not a leaf
    kept = copy.deepcopy(state)  # the README's state contract, grad mode on
    assert not kept["nodes"]["lif"].v.requires_grad
    assert torch.equal(kept["nodes"]["lif"].v, state["nodes"]["lif"].v.detach())
    assert type(torch.utils._pytree.tree_map(torch.Tensor.detach, state)) is type(state)
    assert isinstance(state, dict)
    # a run's state too, and it continues exactly
    result = nirbridge.run(gm, x)
    copy.deepcopy(result.state)
    with torch.no_grad():
        whole = nirbridge.run(gm, x).output
        first = nirbridge.run(gm, x[:2])
        rest = nirbridge.run(gm, x[2:], state=copy.deepcopy(first.state))
    assert torch.equal(torch.cat([first.output, rest.output]), whole)


def test_the_rleaky_idiom_exports_without_a_false_warning_but_a_fixed_start_still_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error", nirbridge.LossyConversionWarning)
        snntorch_adapter.to_nir(RLeakyIdiom(), torch.zeros(1, 5))

    class Restarts(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 4)
            self.lif = snn.Leaky(beta=0.9, **ZERO)

        def forward(self, x):
            mem = self.lif.init_leaky()  # every call starts afresh
            spk, mem = self.lif(self.fc(x), mem)
            return spk

    with pytest.warns(nirbridge.LossyConversionWarning, match="restarts from it at every call"):
        snntorch_adapter.to_nir(Restarts(), torch.zeros(1, 5))

    class IgnoresItsArgument(Restarts):  # takes mem=None, but never looks at it
        def forward(self, x, mem=None):
            mem = self.lif.init_leaky()
            spk, mem = self.lif(self.fc(x), mem)
            return spk, mem

    with pytest.warns(nirbridge.LossyConversionWarning, match="restarts from it at every call"):
        snntorch_adapter.to_nir(IgnoresItsArgument(), torch.zeros(1, 5))


def test_records_of_a_native_run_are_its_layers_under_node_names():
    model = JellyMulti()
    x = spikes(steps=12)
    with torch.no_grad():
        result = nirbridge.run(model, x, record="outputs")
        sj_functional.reset_net(model)
        hidden = model[1](model[0](x))
    assert set(result.records) == {"0.0", "1", "2", "3"}
    assert torch.equal(result.records["1"], hidden)
    assert result.spiking == {"1", "3"} and result.spiking_outputs == {"output"}
    assert result.records["0.0"].shape == (12, 3, 8)
    with torch.no_grad():
        assert set(nirbridge.run(model, x, record=["1"]).records) == {"1"}
    with pytest.raises(nirbridge.RecordError, match=r"\['1.v'\] name no layer"):
        nirbridge.run(model, x, record=["1.v"])


# derandomized: the same draws in every CI run, so a failure is reproducible where it shows
@settings(max_examples=16, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    form=st.sampled_from(
        [
            "snntorch explicit",
            "snntorch init_hidden",
            "snntorch RLeaky init_rleaky",
            "snntorch Synaptic",
            "spikingjelly step_mode s",
            "spikingjelly step_mode m",
        ]
    ),
    n=st.integers(1, 9),
    beta=st.floats(0.3, 0.95),
    threshold=st.floats(0.2, 1.5),
    batch=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_forms_verify_exactly_over_sizes_and_parameters(form, n, beta, threshold, batch, seed):
    torch.manual_seed(seed)
    if form.startswith("spikingjelly"):
        model = FORMS[form](n=n, tau=1.0 / (1.0 - beta), threshold=threshold)
    else:
        model = FORMS[form](n=n, beta=beta, threshold=threshold)
    x = spikes(steps=25, batch=batch, seed=seed)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)  # some draws never fire
        assert torch.equal(nirbridge.run(model, x).output, own_loop(model, x))
    graph = EXPORTED[form].to_nir(model, x if form.endswith(" m") else x[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        report = nirbridge.verify(model, nirbridge.nir_to_torch(graph), x, allow_silent=True)
    assert report.agree, report


def test_a_whole_sequence_call_that_changes_the_time_axis_is_refused_not_reinterpreted():
    """[T, B, ...] in, [2T, B, ...] out has T*B rows along its first axis; it used to be
    reshaped into [T, B, 2, ...] silently."""

    class Doubles(torch.nn.Module):
        def forward(self, x):
            return torch.cat([x, x])

    x = torch.rand(10, 2, 12)
    with pytest.raises(
        nirbridge.NirBridgeError, match=r"returned \[20, 2, 12\] for the sequence \[T=10, B=2"
    ):
        nirbridge.run(nirbridge.native.WholeSequence(Doubles()), x)
    with pytest.raises(nirbridge.NirBridgeError, match=r"returned \[40, 12\] for the sequence \[T\*B=20"):
        nirbridge.run(nirbridge.native.Stateless(Doubles()), x)


# ----------------------------------------------------------------------------- hostile states (proposed)


def _as_lists(value):
    """A state with every tuple, NamedTuple and dict turned into a list (a state rebuilt by hand)."""
    if isinstance(value, dict):
        return (
            {k: _as_lists(v) if k in ("passed", "hidden") else v for k, v in value.items()}
            if set(value) <= {"passed", "hidden"}
            else [_as_lists(v) for v in value.values()]
        )
    if isinstance(value, (tuple, list)):
        return [_as_lists(v) for v in value]
    return value


STATEFUL = [f for f in FORMS if f not in ("torch stateless",)]


@pytest.mark.parametrize("form", STATEFUL)
def test_a_state_of_another_batch_width_dtype_or_form_is_refused_and_the_model_left_as_found(form):
    from torch.utils import _pytree as pytree
    from torch.utils._pytree import tree_map

    x = spikes(steps=4)
    with torch.no_grad():
        model = FORMS[form]()
        own = nirbridge.run(model, x).state
        other_batch = nirbridge.run(model, spikes(steps=4, batch=2)).state
    bad = {
        "another batch": other_batch,
        "float64": tree_map(lambda t: t.double() if isinstance(t, torch.Tensor) else t, own),
    }
    if pytree.tree_structure(_as_lists(own)) != pytree.tree_structure(dict(own)):
        bad["lists"] = _as_lists(own)
    try:
        with torch.no_grad():
            bad["another width"] = nirbridge.run(FORMS[form](n=16), x).state
    except TypeError:
        pass  # the form has no width argument
    if "hidden" in own:
        path = next(iter(own["hidden"]))
        bad["an extra variable"] = {
            **own,
            "hidden": {**own["hidden"], path: {**own["hidden"][path], "extra": 1.0}},
        }
    before = hidden_variables(model)
    attributes = {p: dict(vars(m)) for p, m in model.named_modules()}
    for what, state in bad.items():
        with pytest.raises(nirbridge.StateError):
            with torch.no_grad():
                nirbridge.run(model, x, state=state)
        after = hidden_variables(model)
        assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before), what
        assert {p: dict(vars(m)) for p, m in model.named_modules()}.keys() == attributes.keys(), what
        for p, m in model.named_modules():
            assert vars(m).keys() == attributes[p].keys(), (what, p)
    with torch.no_grad():  # the state of its own run still continues it
        nirbridge.run(model, x, state=own)


def test_a_model_is_left_as_found_when_forward_raises():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 8)
            self.lif = snn.Leaky(beta=0.9, init_hidden=True, **ZERO)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 3:
                raise ValueError("boom")
            return self.lif(self.fc(x))

    model = Boom()
    with pytest.raises(ValueError, match="boom"), torch.no_grad():
        nirbridge.run(model, spikes(steps=5))
    assert model.calls == 0


def test_a_record_is_not_changed_by_a_later_in_place_op():
    from nirbridge.native import run_native

    x = torch.randn(4, 3, 5)
    for model in (
        nn.Sequential(nn.Linear(5, 6), nn.ReLU(inplace=True), nn.Linear(6, 2)),  # one call over T·B rows
        nn.Sequential(nn.Linear(5, 6), nn.ReLU(inplace=True), snn.Leaky(beta=0.9, init_hidden=True, **ZERO)),
    ):
        with torch.no_grad():
            result = run_native(model, x, record="outputs", layers={"fc": "0"})
            assert (model[0](x) < 0).any()
            torch.testing.assert_close(result.records["fc"], model[0](x))


class Centered(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)

    def forward(self, x):
        y = self.fc(x)
        return y - y.mean(0)


def hooked() -> nn.Module:
    model = nn.Sequential(nn.Linear(5, 6), nn.ReLU())
    model[0].register_forward_hook(lambda module, args, out: out - out.mean(0))
    return model


@pytest.mark.parametrize(
    "model, x",
    [
        (nn.Sequential(nn.Linear(5, 6), nn.Softmax(dim=0)), torch.randn(4, 3, 5)),
        (nn.Sequential(nn.Linear(5, 6), nn.LogSoftmax(dim=0)), torch.randn(4, 3, 5)),
        (nn.Sequential(nn.Linear(5, 6), nn.Softmax()), torch.randn(4, 3, 2, 5)),  # implicit dim 0 in 3-D
        (nn.Sequential(nn.Softmax(dim=-1)), torch.randn(4, 3)),  # -1 is the batch axis of [B]
        (
            nn.Sequential(
                nn.TransformerEncoder(
                    nn.TransformerEncoderLayer(8, 2, 16, 0.0), 1, enable_nested_tensor=False
                )
            ).eval(),
            torch.randn(4, 3, 8),
        ),  # [B, E] is one unbatched sequence: attention over the batch
        (Centered(), torch.randn(4, 3, 5)),  # a forward nirbridge cannot read
        (nn.Sequential(nn.Linear(5, 6), nn.Dropout(0.5)).train(), torch.randn(4, 3, 5)),
        (
            nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6, track_running_stats=False)).eval(),
            torch.randn(4, 3, 5),
        ),
        (hooked(), torch.randn(4, 3, 5)),  # a forward hook that centres the batch
    ],
    ids=[
        "softmax0",
        "logsoftmax0",
        "softmax-implicit",
        "softmax-1-on-1d",
        "transformer",
        "custom",
        "dropout",
        "batchnorm-without-running-statistics",
        "hook",
    ],
)
@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
def test_stateless_models_that_mix_rows_run_step_by_step_as_their_own_loop(model, x):
    from nirbridge.native import plan

    assert plan(model).form == "stateless" and not plan(model).rows
    with torch.no_grad():
        torch.manual_seed(1)
        expected = torch.stack([model(x_t) for x_t in x])
        torch.manual_seed(1)
        assert torch.equal(nirbridge.run(model, x).output, expected)


def test_row_wise_stateless_models_still_run_over_all_rows_at_once():
    from nirbridge.native import plan

    for model in (
        TorchStateless(),
        nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Softmax(dim=1), nn.Flatten()),
    ):
        assert plan(model).rows
    assert plan(Stateless(Centered())).rows  # the wrapper vouches for what nirbridge cannot read
    assert not plan(Stateless(nn.Softmax(dim=0))).rows  # but not for torch's layers that mix rows


def test_an_input_without_a_time_axis_is_said_to_lack_it_not_blamed_on_the_model():
    """``[B, C]`` is one step of a batch, or one sample's sequence: run says which axis to
    add, as it does for a module nirbridge built, instead of suggesting wrappers."""
    model = nn.Sequential(nn.Linear(6, 10), snn.Leaky(beta=0.9, init_hidden=True))
    with pytest.raises(nirbridge.InputError) as caught:
        nirbridge.run(model, torch.rand(4, 6))
    text = str(caught.value)
    assert "x.unsqueeze(0)" in text and "x.unsqueeze(1)" in text and "WholeSequence" not in text, text


def test_a_state_passed_in_is_never_changed_by_a_forward_that_writes_into_it():
    """norse's SequentialState writes each layer's new state into the list it is given:
    the caller's state stays as it was, so two runs from it give the same outputs."""
    torch.manual_seed(0)
    model = norse.SequentialState(nn.Linear(4, 5), norse.LIFCell())
    x = (torch.rand(6, 3, 4) < 0.6).float() * 3
    more = (torch.rand(5, 3, 4) < 0.6).float() * 3
    state = nirbridge.run(model, x).state
    kept = [s for s in state["passed"]]
    values = [t.clone() for t in state["passed"][1]]
    first = nirbridge.run(model, more, state=state).output
    assert all(a is b for a, b in zip(state["passed"], kept))
    assert all(torch.equal(a, b) for a, b in zip(state["passed"][1], values))
    assert torch.equal(nirbridge.run(model, more, state=state).output, first)
    assert torch.equal(nirbridge.run(model, torch.cat([x, more])).output[6:], first)

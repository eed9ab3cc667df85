"""torch_to_nir on models written as users write them, checked against the independent
numpy reference in tests/reference.py (the traced graph) and the model itself (torch),
step by step at float64."""

from __future__ import annotations

import copy
import operator
import warnings

import nir
import norse.torch as nt
import numpy as np
import pytest
import snntorch as snn
import torch
from hypothesis import HealthCheck, given, settings
from torch import nn

import nirbridge
from nirbridge import layers, neurons
from nirbridge.adapters import norse as norse_adapter
from nirbridge.adapters import snntorch as snntorch_adapter
from nirbridge.layers import Scale
from tests.conftest import input_names
from tests.graphs import assert_same, random_graphs
from tests.reference import Reference

DT = 1e-4
BATCH = 3


pytestmark = pytest.mark.usefixtures("float64_default")


def lif(n: int, rng: np.random.Generator, **extra) -> neurons.LIF:
    """A LIF population with per-neuron parameters that spikes under the drives below."""
    return neurons.LIF(
        tau=rng.uniform(3 * DT, 20 * DT, n),
        r=rng.uniform(5, 15, n),
        v_leak=rng.uniform(-0.1, 0.1, n),
        v_threshold=rng.uniform(0.5, 1.0, n),
        v_reset=rng.uniform(-0.2, 0.0, n),
        dt=DT,
        **extra,
    )


def check_against_reference(model, graph, shapes, steps=60, seed=0, stateful=True) -> float:
    """Run ``model`` and the reference on ``graph`` side by side. Returns how much the
    outputs moved between steps (summed absolute change), so a test can insist that
    spikes flowed: without them these models' outputs stay constant."""
    graph = nir.NIRGraph(nodes=graph.nodes, edges=graph.edges, metadata=graph.metadata, type_check=True)
    ref = Reference(graph, graph.metadata["dt"])
    names = input_names(graph)
    outputs = [n for n, node in graph.nodes.items() if isinstance(node, nir.Output)]
    rng = np.random.default_rng(seed)
    state, activity, previous = None, 0.0, None
    for t in range(steps):
        xs = [rng.uniform(-0.5, 1.5, (BATCH, *shape)) for shape in shapes]
        expected = ref.step(dict(zip(names, xs)))
        tensors = [torch.from_numpy(x) for x in xs]
        with torch.no_grad():
            if stateful:
                got, state = model(*tensors, state)
            else:
                got = model(*tensors)
        if isinstance(got, torch.Tensor):
            got = {outputs[0]: got}
        elif isinstance(got, (tuple, list)):
            got = dict(zip(outputs, got))
        assert sorted(got) == sorted(outputs)
        for name in outputs:
            np.testing.assert_allclose(
                got[name].numpy(), expected[name], rtol=1e-10, atol=1e-10, err_msg=f"{name!r} at step {t}"
            )
        if previous is not None:
            activity += sum(float(np.abs(expected[n] - previous[n]).sum()) for n in outputs)
        previous = expected
    return activity


def rebuilds_and_loads(model, graph) -> nn.Module:
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    result = gm.load_state_dict(model.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    return gm


# ----------------------------------------------------------------------------- models


class Stack(nn.Module):
    """fc → LIF → fc → LIF → fc → LI, the shape of most SNN papers' classifiers."""

    def __init__(self, rng):
        super().__init__()
        self.fc1, self.lif1 = nn.Linear(5, 12), lif(12, rng)
        self.fc2, self.lif2 = nn.Linear(12, 8), lif(8, rng)
        self.fc3 = nn.Linear(8, 3, bias=False)
        self.li = neurons.LI(tau=rng.uniform(5 * DT, 9 * DT, 3), r=2.0, dt=DT)

    def forward(self, x, state=None):
        state = state or {}
        z1, s1 = self.lif1(self.fc1(x), state.get("lif1"))
        z2, s2 = self.lif2(self.fc2(z1), state.get("lif2"))
        v, s3 = self.li(self.fc3(z2), state.get("li"))
        return v, {"lif1": s1, "lif2": s2, "li": s3}


class Residual(nn.Module):
    """A spiking block whose output rejoins a skip connection with ``+``."""

    def __init__(self, rng):
        super().__init__()
        self.fc_in = nn.Linear(6, 10)
        self.lif_in = lif(10, rng)
        self.fc_a = nn.Linear(10, 10)
        self.lif_a = neurons.LIF(tau=8 * DT, r=12.0, v_threshold=0.8, dt=DT)  # scalar parameters
        self.fc_b = nn.Linear(10, 10)
        self.lif_out = lif(10, rng)

    def forward(self, x, state=None):
        state = state or {}
        z, s_in = self.lif_in(self.fc_in(x), state.get("lif_in"))
        a, s_a = self.lif_a(self.fc_a(z), state.get("lif_a"))
        y = self.fc_b(a) + z  # residual rejoin
        out, s_out = self.lif_out(y, state.get("lif_out"))
        return out, {"lif_in": s_in, "lif_a": s_a, "lif_out": s_out}


class FanOutTwoInTwoOut(nn.Module):
    """Two inputs, a hidden layer read by two heads, outputs in a dict."""

    def __init__(self, rng):
        super().__init__()
        self.enc_a, self.enc_b = nn.Linear(4, 9), nn.Linear(3, 9, bias=False)
        self.hidden = lif(9, rng)
        self.head_spikes = nn.Linear(9, 2)
        self.spiking = lif(2, rng)
        self.head_value = nn.Linear(9, 5)
        self.synaptic = neurons.CubaLI(tau_syn=4 * DT, tau_mem=9 * DT, r=2.0, w_in=3.0, dt=DT)

    def forward(self, audio, video, state=None):
        state = state or {}
        h, s_h = self.hidden(self.enc_a(audio) + self.enc_b(video), state.get("hidden"))
        z, s_z = self.spiking(self.head_spikes(h), state.get("spikes"))
        v, s_v = self.synaptic(self.head_value(h), state.get("value"))
        return {"spikes": z, "value": v}, {"hidden": s_h, "spikes": s_z, "value": s_v}


class ConvNet(nn.Module):
    """conv → IF → avg pool → flatten → linear → LIF (the N-MNIST CNN's pattern)."""

    def __init__(self, rng, groups=2):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.spike1 = neurons.IF(r=1.0, v_threshold=0.3, dt=DT)
        self.pool = nn.AvgPool2d(2)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, groups=groups, bias=False)
        self.spike2 = neurons.IF(r=1.0, v_threshold=0.2, dt=DT)
        self.fc = nn.Linear(4, 6)
        self.out = lif(6, rng)

    def forward(self, x, state=None):
        state = state or {}
        z, s1 = self.spike1(self.conv(x), state.get("spike1"))
        z, s2 = self.spike2(self.conv2(self.pool(z)), state.get("spike2"))
        z, s3 = self.out(self.fc(torch.flatten(z, 1)), state.get("out"))
        return z, {"spike1": s1, "spike2": s2, "out": s3}


class Block(nn.Module):
    def __init__(self, n_in, n_out, rng):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
        self.lif = lif(n_out, rng)

    def forward(self, x, state=None):
        return self.lif(self.fc(x), state)


class Nested(nn.Module):
    """Blocks inside a ModuleList: node names are qualified (``blocks.0.fc``)."""

    def __init__(self, rng):
        super().__init__()
        self.blocks = nn.ModuleList([Block(4, 7, rng), Block(7, 7, rng)])
        self.readout = nn.Sequential(nn.Linear(7, 2), nn.Identity())

    def forward(self, x, state=None):
        state = state or {}
        new = {}
        for i, block in enumerate(self.blocks):
            x, new[i] = block(x, state.get(i))
        return self.readout(x), new


MODELS = {
    "stack": (Stack, [(5,)]),
    "residual": (Residual, [(6,)]),
    "fan_out_two_in_two_out": (FanOutTwoInTwoOut, [(4,), (3,)]),
    "nested": (Nested, [(4,)]),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hand_written_models_run_like_the_reference_and_load_their_state_dict(name):
    cls, shapes = MODELS[name]
    model = cls(np.random.default_rng(5))
    graph = nirbridge.torch_to_nir(model)
    assert check_against_reference(model, graph, shapes, steps=80) > 1
    gm = rebuilds_and_loads(model, graph)
    check_against_reference(gm, graph, shapes, steps=30)


def test_traced_graphs_are_what_the_models_say():
    rng = np.random.default_rng(0)
    g = nirbridge.torch_to_nir(FanOutTwoInTwoOut(rng))
    assert list(g.nodes) == [
        "audio", "video", "enc_a", "enc_b", "hidden", "head_spikes", "spiking", "head_value", "synaptic",
        "spikes", "value",
    ]  # fmt: skip
    assert ("enc_a", "hidden") in g.edges and ("enc_b", "hidden") in g.edges  # + is fan-in
    assert type(g.nodes["enc_a"]) is nir.Affine and type(g.nodes["enc_b"]) is nir.Linear
    assert g.metadata["dt"] == DT
    assert isinstance(g.nodes["spikes"], nir.Output) and isinstance(g.nodes["value"], nir.Output)

    g = nirbridge.torch_to_nir(Nested(rng))
    assert [n for n in g.nodes if not isinstance(g.nodes[n], (nir.Input, nir.Output))] == [
        "blocks.0.fc",
        "blocks.0.lif",
        "blocks.1.fc",
        "blocks.1.lif",
        "readout.0",
    ]  # fmt: skip  (nn.Identity is bridged)
    residual = nirbridge.torch_to_nir(Residual(rng))
    lif_a = residual.nodes["lif_a"]
    assert lif_a.tau.shape == (10,) and np.all(lif_a.v_threshold == 0.8)  # scalars broadcast


def test_conv_pipeline_with_example_input_type_checks_and_runs():
    model = ConvNet(np.random.default_rng(2))
    graph = nirbridge.torch_to_nir(model, example_input=torch.zeros(1, 2, 8, 8))
    conv, conv2 = graph.nodes["conv"], graph.nodes["conv2"]
    assert tuple(conv.input_shape) == (8, 8) and tuple(conv2.input_shape) == (4, 4)
    assert int(conv2.groups) == 2
    assert tuple(graph.nodes["flatten"].input_type["input"]) == (4, 1, 1)
    for name, node in graph.nodes.items():
        assert node.input_type["input"] is not None and node.output_type["output"] is not None, name
    assert check_against_reference(model, graph, [(2, 8, 8)], steps=40) > 5
    rebuilds_and_loads(model, graph)


def test_conv_model_without_example_input_asks_for_one():
    with pytest.raises(nirbridge.MissingShapeError, match=r"example_input=torch.zeros\(1, \*shape\)") as info:
        nirbridge.torch_to_nir(ConvNet(np.random.default_rng(0)))
    assert "Conv2d 'conv'" in str(info.value)


def test_shapes_from_weights_follow_neurons_with_scalar_parameters():
    model = nn.Sequential(Scale(torch.tensor(2.0)), nn.Linear(3, 2))
    graph = nirbridge.torch_to_nir(model)
    assert tuple(graph.nodes["input"].input_type["input"]) == (3,)
    assert graph.nodes["0"].scale.shape == (3,)
    check_against_reference(model, graph, [(3,)], stateful=False, steps=3)


def test_stateless_sequential_and_functions():
    model = nn.Sequential(nn.Conv1d(2, 3, 3, padding="same", dilation=2), nn.Flatten(), nn.Linear(30, 4))
    graph = nirbridge.torch_to_nir(model, example_input=torch.zeros(2, 2, 10))
    assert list(graph.nodes) == ["input", "0", "1", "2", "output"]
    assert np.array_equal(graph.nodes["0"].padding, 2)
    check_against_reference(model, graph, [(2, 10)], stateful=False, steps=3)


# ----------------------------------------------------------------------------- nested nir_to_torch modules


def recurrent_graph(rng, n_in=4, n=6) -> nir.NIRGraph:
    """input → fc → lif ⇄ w_rec → output, the Braille SRNN's shape."""
    params = lif(n, rng).to_nir()
    nodes = {
        "input": nir.Input(np.array([n_in])),
        "fc": nir.Affine(rng.normal(size=(n, n_in)), rng.normal(size=n)),
        "lif": params,
        "w_rec": nir.Linear(rng.normal(size=(n, n)) * 0.5),
        "output": nir.Output(np.array([n])),
    }
    edges = [("input", "fc"), ("fc", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, metadata={"dt": DT}, type_check=False)


class WithImported(nn.Module):
    def __init__(self, rng):
        super().__init__()
        self.encoder = nn.Linear(3, 4)
        self.srnn = nirbridge.nir_to_torch(recurrent_graph(rng), dtype=torch.float64)
        self.decoder = nn.Linear(6, 2)
        self.li = neurons.LI(tau=5 * DT, dt=DT)

    def forward(self, x, state=None):
        state = state or {}
        z, s = self.srnn(self.encoder(x), state=state.get("srnn"))
        v, s_li = self.li(self.decoder(z), state.get("li"))
        return v, {"srnn": s, "li": s_li}


def test_an_imported_recurrent_module_nests_as_a_subgraph():
    model = WithImported(np.random.default_rng(4))
    graph = nirbridge.torch_to_nir(model)
    srnn = graph.nodes["srnn"]
    assert isinstance(srnn, nir.NIRGraph)
    assert ("w_rec", "lif") in srnn.edges and ("lif", "w_rec") in srnn.edges
    assert check_against_reference(model, graph, [(3,)], steps=80) > 0.5
    gm = rebuilds_and_loads(model, graph)
    check_against_reference(gm, graph, [(3,)], steps=20)


def test_an_imported_module_alone_exports_its_graph_with_trained_parameters():
    graph = recurrent_graph(np.random.default_rng(1))
    gm = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    optimiser = torch.optim.SGD(gm.parameters(), lr=0.5)
    state, loss = None, 0.0
    for _ in range(20):
        out, state = gm(torch.rand(4, 4, dtype=torch.float64) * 3, state)
        loss = loss + out.sum()
    loss.backward()
    optimiser.step()
    with torch.no_grad():
        gm.lif.tau.mul_(1.5)  # a buffer edited by hand is carried too
    back = nirbridge.torch_to_nir(gm)
    assert not np.array_equal(back.nodes["fc"].weight, graph.nodes["fc"].weight)
    np.testing.assert_array_equal(back.nodes["fc"].weight, gm.fc.weight.detach().numpy())
    np.testing.assert_array_equal(back.nodes["w_rec"].weight, gm.w_rec.weight.detach().numpy())
    np.testing.assert_array_equal(back.nodes["lif"].tau, graph.nodes["lif"].tau * 1.5)
    assert back.edges == graph.edges and list(back.nodes) == list(graph.nodes)
    check_against_reference(gm, back, [(4,)], steps=40)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph=random_graphs())
def test_nir_to_torch_to_nir_is_the_identity_and_carries_edited_weights(graph):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)  # odd names get module paths
        warnings.simplefilter("ignore", nirbridge.DtWarning)  # built at DT whatever the graph records
        gm = nirbridge.nir_to_torch(graph, dt=DT, dtype=torch.float64)
    back = nirbridge.torch_to_nir(gm)
    graph.metadata = {**graph.metadata, "dt": DT}  # the dt the module was built at
    assert_same(graph, back, dtypes=False)
    nir.NIRGraph(nodes=back.nodes, edges=back.edges, type_check=True)
    # edit every parameter, as training would, and export again
    gm.load_state_dict({key: value * 1.5 for key, value in gm.state_dict().items()})
    assert_same(scaled(graph, 1.5), nirbridge.torch_to_nir(gm), dtypes=False)


def scaled(node, factor):
    """A copy of a graph with every floating parameter array multiplied by ``factor``."""
    if isinstance(node, nir.NIRGraph):
        nodes = {name: scaled(child, factor) for name, child in node.nodes.items()}
        return nir.NIRGraph(nodes=nodes, edges=node.edges, metadata=node.metadata, type_check=False)
    if isinstance(node, (nir.Input, nir.Output)):
        return node
    changes = {
        field: np.asarray(value, np.float64) * factor
        for field, value in vars(node).items()
        if field not in ("input_type", "output_type", "metadata")
        and isinstance(value, np.ndarray)
        and value.dtype.kind == "f"
    }
    copy = nirbridge.graph._replace(node, **changes)
    copy.metadata = node.metadata
    return copy


# ----------------------------------------------------------------------------- maps, skip, dt


def test_the_users_map_wins_and_default_map_empty_removes_the_defaults():
    model = nn.Sequential(nn.Linear(3, 4), neurons.LI(tau=1e-3, dt=DT))
    marker = nir.Scale(np.ones(4))
    graph = nirbridge.torch_to_nir(
        model, {nn.Linear: lambda m: nir.Affine(m.weight.detach().numpy() * 0, marker.scale)}
    )
    assert np.all(graph.nodes["0"].weight == 0) and type(graph.nodes["0"]) is nir.Affine
    with pytest.raises(
        nirbridge.UnsupportedModuleError, match=r"Supported: nirbridge\.neurons\.LI\."
    ) as info:
        nirbridge.torch_to_nir(model, default_map={neurons.LI: lambda m: m.to_nir()})
    assert "module Linear: '0'" in str(info.value)


def test_converters_may_take_dt_and_subclasses_use_their_base_entry():
    class MyLinear(nn.Linear):
        pass

    seen = {}

    def convert(module, dt):
        seen["dt"] = dt
        return nir.Linear(module.weight.detach().numpy())

    graph = nirbridge.torch_to_nir(nn.Sequential(MyLinear(2, 2, bias=False)), {MyLinear: convert}, dt=1e-3)
    assert seen["dt"] == 1e-3 and graph.metadata["dt"] == 1e-3
    graph = nirbridge.torch_to_nir(nn.Sequential(MyLinear(2, 2)))
    assert type(graph.nodes["0"]) is nir.Affine


def test_skip_bridges_the_edges_of_removed_modules():
    model = nn.Sequential(nn.Dropout(0.1), nn.Linear(3, 5), nn.Dropout(0.2), nn.Linear(5, 2)).eval()
    graph = nirbridge.torch_to_nir(model, skip=(nn.Dropout,))
    assert list(graph.nodes) == ["input", "1", "3", "output"]
    assert graph.edges == [("input", "1"), ("1", "3"), ("3", "output")]
    check_against_reference(model, graph, [(3,)], stateful=False, steps=2)
    with pytest.raises(nirbridge.UnsupportedModuleError, match=r"skip=\(nn.Dropout,\)"):
        nirbridge.torch_to_nir(model)


def test_max_pooling_and_batch_norm_say_what_to_use_instead_of_skip():
    # snntorch's CSNN tutorial network, which pools with nn.MaxPool2d
    csnn = nn.Sequential(
        nn.Conv2d(1, 12, 5),
        nn.MaxPool2d(2),
        snn.Leaky(beta=0.5, init_hidden=True),
        nn.Flatten(),
        nn.Linear(12 * 12 * 12, 10),
        snn.Leaky(beta=0.5, init_hidden=True, output=True),
    )
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        snntorch_adapter.to_nir(csnn, torch.zeros(1, 1, 28, 28))
    message = " ".join(str(info.value).split())
    assert "module MaxPool2d: '1'" in message
    assert "NIR has no max pooling" in message and "replace it with nn.AvgPool2d" in message
    assert "skip=(nn.MaxPool2d,)" not in message and "skip= would drop the pooling" in message
    mixed = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.GELU())
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        nirbridge.torch_to_nir(mixed, example_input=torch.zeros(2, 4))
    message = " ".join(str(info.value).split())
    assert "NIR has no batch normalisation: fold nn.BatchNorm1d into the layer before it" in message
    assert "fuse_linear_bn_eval" in message and "skip=(nn.GELU,)" in message  # the others: the usual advice


class EverythingWrong(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.act = nn.ReLU()
        self.inner = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.ReLU())
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x):
        y = self.act(self.fc(x))
        y = torch.sigmoid(self.inner(y)) * 2.0
        return self.norm(y.view(-1, 3) - x)


def test_every_unsupported_module_and_function_is_named_in_one_error():
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        nirbridge.torch_to_nir(EverythingWrong())
    message = str(info.value)
    for expected in [
        "module ReLU: 'act', 'inner.2'",
        "module Tanh: 'inner.1'",
        "module BatchNorm1d: 'norm'",
        "function torch.sigmoid: in EverythingWrong.forward (test_trace.py:",
        "function operator.mul (*)",
        "method torch.Tensor.view",
        "function operator.sub (-)",
        "module_map={nn.ReLU: fn}",
        "skip=(nn.ReLU,)",
        "Supported: AvgPool2d, Conv1d, Conv2d, Flatten",
    ]:
        assert expected in message, (expected, message)
    assert set(info.value.offenders) >= {"module ReLU", "module Tanh", "module BatchNorm1d"}


def test_functions_and_third_party_modules_can_be_mapped():
    class Spiky(nn.Module):  # a childless module from "another library"
        def forward(self, x):
            return (x > 0.5).float()

    model = nn.Sequential(nn.Linear(2, 3), Spiky())
    with pytest.raises(
        nirbridge.UnsupportedModuleError, match=r"function operator.gt: in '1' \(Spiky, test_trace"
    ):
        nirbridge.torch_to_nir(model)
    graph = nirbridge.torch_to_nir(model, {Spiky: lambda m: nir.Threshold(np.full(3, 0.5))})
    check_against_reference(model, graph, [(2,)], stateful=False, steps=3)

    class Halve(nn.Module):
        def forward(self, x):
            return torch.mul(x, 0.5)

    graph = nirbridge.torch_to_nir(
        nn.Sequential(nn.Linear(2, 3), Halve()), {torch.mul: lambda x, k: nir.Scale(np.full(3, k))}
    )
    assert list(graph.nodes) == ["input", "0", "1.mul", "output"]
    assert np.all(graph.nodes["1.mul"].scale == 0.5)


def test_dt_comes_from_the_neurons_and_disagreement_is_an_error():
    model = nn.Sequential(nn.Linear(2, 2), neurons.LI(tau=1e-2, dt=1e-3))
    assert nirbridge.torch_to_nir(model).metadata["dt"] == 1e-3
    with pytest.warns(nirbridge.LossyConversionWarning, match=r"\['1'\] step at dt=0.001"):
        assert nirbridge.torch_to_nir(model, dt=1e-4).metadata["dt"] == 1e-4

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.slow = neurons.LI(tau=1e-2, r=np.ones(2), dt=1e-3)
            self.fast = neurons.LI(tau=1e-2, dt=1e-4)

        def forward(self, x):
            return self.fast(self.slow(x)[0])[0]

    with pytest.raises(nirbridge.ParameterError, match=r"'slow': 0.001, 'fast': 0.0001"):
        nirbridge.torch_to_nir(Mixed())
    assert nirbridge.torch_to_nir(nn.Linear(2, 2)).metadata["dt"] == DT


# ----------------------------------------------------------------------------- edge cases


def test_a_lone_module_becomes_a_three_node_graph():
    graph = nirbridge.torch_to_nir(lif(3, np.random.default_rng(0)))
    assert list(graph.nodes) == ["input", "lif", "output"] and type(graph.nodes["lif"]) is nir.LIF
    graph = nirbridge.torch_to_nir(nn.Conv2d(1, 2, 3), example_input=torch.zeros(1, 1, 5, 5))
    assert tuple(graph.nodes["output"].output_type["output"]) == (2, 3, 3)


def test_a_module_called_twice_becomes_two_nodes_with_a_warning():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(self.fc(x))

    model = Twice()
    with pytest.warns(nirbridge.LossyConversionWarning, match="no longer share parameters"):
        graph = nirbridge.torch_to_nir(model)
    assert graph.edges == [("x", "fc"), ("fc", "fc_2"), ("fc_2", "output")]
    check_against_reference(model, graph, [(3,)], stateful=False, steps=2)


def test_output_names_that_are_module_names_get_a_suffix():
    class Named(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(2, 2)

        def forward(self, x):
            return {"out": self.out(x), "x": x}

    with pytest.warns(nirbridge.RepairWarning) as caught:
        graph = nirbridge.torch_to_nir(Named())
    assert [str(w.message).split(";")[1] for w in caught] == [
        " its Output node is called 'out_1'",
        " its Output node is called 'x_1'",
    ]
    assert list(graph.nodes) == ["x", "out", "out_1", "x_1"]
    assert ("x", "x_1") in graph.edges


def test_modules_that_reach_no_output_are_left_out_with_a_warning():
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.dead = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            self.dead(x)
            return self.fc(x)

    with pytest.warns(nirbridge.LossyConversionWarning, match=r"\['dead'\] do not contribute"):
        graph = nirbridge.torch_to_nir(Unused())
    assert "dead" not in graph.nodes


class StateMisuse(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.lif = nn.Linear(2, 2), neurons.LIF(tau=1e-3, dt=DT)

    def forward(self, x, state=None):
        _, s = self.lif(self.fc(x))
        return self.fc(s.v), s


class PairMisuse(StateMisuse):
    def forward(self, x):
        return self.fc(self.lif(x))


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return x


class Doubled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        y = self.fc(x)
        return y + y


@pytest.mark.parametrize(
    "model, error, match",
    [
        (StateMisuse(), nirbridge.GraphStructureError, r"uses the state returned by module 'lif'"),
        (PairMisuse(), nirbridge.GraphStructureError, r"\(output, state\) pair of module 'lif'"),
        (Branchy(), nirbridge.TraceError, r"could not trace Branchy.forward"),
        (Doubled(), nirbridge.GraphStructureError, r"adds the output of \['fc'\] to itself"),
        (nn.Sequential(nn.Flatten(0)), nirbridge.NodeConversionError, r"'0' \(Flatten\).*batch axis"),
        (nn.Sequential(nn.LPPool2d(2, 2)), nirbridge.NodeConversionError, r"norm_type=2 has no NIR form"),
        (nn.Sequential(nn.LPPool2d(1, 2, ceil_mode=True)), nirbridge.NodeConversionError, r"ceil_mode=True"),
    ],
)
def test_models_nir_cannot_express_get_errors_that_say_what_to_do(model, error, match):
    with pytest.raises(error, match=match):
        nirbridge.torch_to_nir(model, example_input=torch.zeros(1, 2))


def test_submodules_fx_cannot_trace_are_reported_with_the_rest():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(Branchy()), nn.ReLU())
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        nirbridge.torch_to_nir(model)
    message = str(info.value)
    assert (
        "module tests.test_trace.Branchy: '1.0' (fx cannot trace it: TraceError: symbolically traced"
        in message
    )
    assert "module ReLU: '2'" in message
    assert "module_map={tests.test_trace.Branchy: fn}" in message
    graph = nirbridge.torch_to_nir(
        model, {Branchy: lambda m: nir.Scale(np.ones(2)), nn.ReLU: lambda m: nir.Scale(np.ones(2))}
    )
    assert list(graph.nodes) == ["input", "0", "1.0", "2", "output"]


def test_the_traced_graph_writes_and_nir_reads_it_with_its_type_check(tmp_path):
    model = ConvNet(np.random.default_rng(3), groups=1)  # nir's type inference ignores groups
    graph = nirbridge.torch_to_nir(model, example_input=torch.zeros(1, 2, 8, 8))
    nirbridge.write(tmp_path / "convnet.nir", graph)
    again = nir.read(tmp_path / "convnet.nir")  # nir's type check runs here
    assert_same(graph, again, dtypes=False)
    gm = rebuilds_and_loads(model, nirbridge.read(tmp_path / "convnet.nir"))
    check_against_reference(gm, graph, [(2, 8, 8)], steps=10)


def test_operator_keys_are_functions_in_the_map():
    assert nirbridge.trace.DEFAULT_MAP[operator.add] is nirbridge.trace.FAN_IN
    assert nirbridge.trace.DEFAULT_MAP[nn.Identity] is nirbridge.trace.BRIDGE


def test_torch_options_nir_cannot_express_warn():
    with pytest.warns(nirbridge.LossyConversionWarning, match="count_include_pad=False.*ceil_mode=True"):
        nirbridge.torch_to_nir(
            nn.AvgPool2d(3, padding=1, count_include_pad=False, ceil_mode=True),
            example_input=torch.zeros(1, 1, 6, 6),
        )
    with pytest.warns(nirbridge.LossyConversionWarning, match="padding_mode='circular'"):
        nirbridge.torch_to_nir(
            nn.Conv1d(1, 1, 3, padding=1, padding_mode="circular"), example_input=torch.zeros(1, 1, 5)
        )


# ----------------------------------------------------------------------------- found in review


def test_an_input_named_like_a_module_keeps_both():
    class Clash(nn.Module):
        def __init__(self):
            super().__init__()
            self.fx, self.y = nn.Linear(4, 5), nn.Linear(5, 5)

        def forward(self, x, y):
            return self.y(self.fx(x) + y)

    model = Clash()
    with pytest.warns(
        nirbridge.RepairWarning, match="input 'y' has the name of a module; its Input node is called 'y_1'"
    ):
        graph = nirbridge.torch_to_nir(model)
    assert isinstance(graph.nodes["y_1"], nir.Input) and isinstance(graph.nodes["y"], nir.Affine)
    assert ("y_1", "y") in graph.edges and ("y", "y") not in graph.edges
    check_against_reference(model, graph, [(4,), (5,)], stateful=False, steps=2)
    rebuilds_and_loads(model, graph)


def test_arguments_with_defaults_are_traced_at_them():
    class Options(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.lif = nn.Linear(4, 5), lif(5, np.random.default_rng(0))

        def forward(self, x, scale: float = 1.0, record=False, state=None):
            z, s = self.lif(self.fc(x), state)
            return z, s

    model = Options()
    graph = nirbridge.torch_to_nir(model)
    assert list(graph.nodes) == ["x", "fc", "lif", "output"]
    check_against_reference(lambda x, s: model(x, state=s), graph, [(4,)], steps=40)


def test_a_model_that_returns_its_last_modules_pair():
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.lif = nn.Linear(3, 4), lif(4, np.random.default_rng(1))

        def forward(self, x, state):  # a state argument without a default is the state too
            return self.lif(self.fc(x), state)

    model = Wrapper()
    graph = nirbridge.torch_to_nir(model)
    assert list(graph.nodes) == ["x", "fc", "lif", "output"]
    assert check_against_reference(model, graph, [(3,)], steps=60) > 0


def test_a_subclass_with_its_own_forward_is_not_exported_as_its_base():
    class PositiveLinear(nn.Linear):
        def forward(self, x):
            return nn.functional.linear(x, self.weight.abs(), self.bias)

    with pytest.raises(nirbridge.UnsupportedModuleError, match="torch.nn.functional.linear: in '0'"):
        nirbridge.torch_to_nir(nn.Sequential(PositiveLinear(3, 3)))


def test_size_one_parameters_do_not_fix_the_input_shape():
    class Broadcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.li = neurons.LI(tau=np.array([8e-4]), r=np.array([10.0]), v_leak=np.array([0.0]), dt=DT)
            self.fc = nn.Linear(4, 5)

        def forward(self, x, state=None):
            v, s = self.li(x, state)
            return self.fc(v), s

    graph = nirbridge.torch_to_nir(Broadcast())
    assert tuple(graph.nodes["x"].input_type["input"]) == (4,) and graph.nodes["li"].tau.shape == (4,)


def test_skipping_a_stateful_module_passes_its_input_on():
    model = Stack(np.random.default_rng(0))
    graph = nirbridge.torch_to_nir(model, skip=(neurons.LIF,))
    assert graph.edges == [("x", "fc1"), ("fc1", "fc2"), ("fc2", "fc3"), ("fc3", "li"), ("li", "output")]


def test_sum_of_a_list_of_tensors_is_fan_in():
    class Summed(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleList(nn.Linear(3, 2) for _ in range(3))

        def forward(self, x):
            return sum(head(x) for head in self.heads)

    model = Summed()
    graph = nirbridge.torch_to_nir(model)
    assert [e for e in graph.edges if e[1] == "output"] == [
        ("heads.0", "output"),
        ("heads.1", "output"),
        ("heads.2", "output"),
    ]
    check_against_reference(model, graph, [(3,)], stateful=False, steps=2)


def test_a_nested_import_with_several_outputs_cannot_nest():
    two = nir.NIRGraph(
        nodes={
            "i": nir.Input(np.array([2])),
            "a": nir.Scale(np.ones(2)),
            "o1": nir.Output(np.array([2])),
            "o2": nir.Output(np.array([2])),
        },
        edges=[("i", "a"), ("a", "o1"), ("a", "o2")],
        type_check=False,
    )

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nirbridge.nir_to_torch(two)

        def forward(self, x):
            out, _ = self.inner(x)
            return out["o1"]

    with pytest.raises(nirbridge.GraphStructureError, match="1 Input and 2 Output nodes"):
        nirbridge.torch_to_nir(Holder())


def test_a_torch_layer_as_the_model_and_bad_arguments():
    with pytest.raises(nirbridge.UnsupportedModuleError, match="module ReLU: the model itself"):
        nirbridge.torch_to_nir(nn.ReLU())
    with pytest.raises(nirbridge.NirBridgeError, match="example_input must be a tensor"):
        nirbridge.torch_to_nir(nn.Linear(4, 2), example_input=3)
    graph = nirbridge.torch_to_nir(nn.Conv1d(1, 2, 3), example_input=np.zeros((1, 1, 6)), skip=None)
    assert tuple(graph.nodes["output"].output_type["output"]) == (2, 4)
    with pytest.raises(nirbridge.NirBridgeError, match="expects a torch.nn.Module"):
        nirbridge.torch_to_nir(lambda x: x)


# ----------------------------------------------------------------------------- nirtorch drop-in


def test_nirtorch_style_except_value_error_catches_export_errors():
    """nirtorch raises ValueError for modules its map lacks; code catching that keeps working."""
    for model, kwargs, error in [
        (EverythingWrong(), {}, nirbridge.UnsupportedModuleError),
        (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2)), {}, nirbridge.MissingShapeError),
        (nn.Sequential(nn.Linear(3, 4)), {"dt": -1.0}, nirbridge.ParameterError),
    ]:
        with pytest.raises(ValueError) as info:
            nirbridge.torch_to_nir(model, **kwargs)
        assert type(info.value) is error and isinstance(info.value, nirbridge.NirBridgeError)


def test_a_none_map_entry_leaves_the_module_out_like_nirtorch():
    model = nn.Sequential(nn.Dropout(0.1), nn.Linear(3, 5), nn.Dropout(0.2), nn.Linear(5, 2)).eval()
    graph = nirbridge.torch_to_nir(model, {nn.Dropout: None})
    assert list(graph.nodes) == ["input", "1", "3", "output"]
    assert graph.edges == [("input", "1"), ("1", "3"), ("3", "output")]
    check_against_reference(model, graph, [(3,)], stateful=False, steps=2)
    # a None default entry is left out too, and the user's entry wins over it
    graph = nirbridge.torch_to_nir(
        model,
        {nn.Dropout: None},
        default_map={**nirbridge.trace.DEFAULT_MAP, nn.Linear: None},
        example_input=torch.zeros(1, 3),
    )
    assert list(graph.nodes) == ["input", "output"] and graph.edges == [("input", "output")]


def test_nirtorch_keywords_default_dict_stateful_modules_concrete_args_type_check():
    model = nn.Sequential(nn.Linear(3, 4), neurons.LI(tau=1e-3, dt=DT))
    # default_dict= is nirtorch's name for default_map=
    with pytest.raises(nirbridge.UnsupportedModuleError, match="module Linear: '0'"):
        nirbridge.torch_to_nir(model, default_dict={neurons.LI: lambda m: m.to_nir()})
    with pytest.raises(nirbridge.ParameterError, match="both default_map= and default_dict="):
        nirbridge.torch_to_nir(model, default_map={}, default_dict={})

    class Pair(nn.Module):
        """A third-party neuron whose forward returns (output, state) without a state argument."""

        def __init__(self):
            super().__init__()
            self.gain = 2.0

        def forward(self, x):
            return x * self.gain, x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.pair, self.extra = nn.Linear(3, 4), Pair(), nn.Linear(4, 4)

        def forward(self, x, deep):
            out, _ = self.pair(self.fc(x))
            if deep:
                out = self.extra(out)
            return out

    to_scale = {Pair: lambda m: nir.Scale(np.full(4, m.gain))}
    with pytest.raises(nirbridge.TraceError):  # fx cannot branch on the input `deep`
        nirbridge.torch_to_nir(Net(), to_scale, stateful_modules={Pair})
    with pytest.raises(nirbridge.UnsupportedModuleError, match=r"operator.getitem"):  # not known as stateful
        nirbridge.torch_to_nir(Net(), to_scale, concrete_args={"deep": False})
    graph = nirbridge.torch_to_nir(Net(), to_scale, stateful_modules={Pair}, concrete_args={"deep": False})
    assert list(graph.nodes) == ["x", "fc", "pair", "output"]
    assert graph.edges == [("x", "fc"), ("fc", "pair"), ("pair", "output")]
    np.testing.assert_array_equal(graph.nodes["pair"].scale, np.full(4, 2.0))
    with pytest.raises(nirbridge.ParameterError, match=r"concrete_args names \['gain'\]"):
        nirbridge.torch_to_nir(Net(), to_scale, stateful_modules={Pair}, concrete_args={"gain": 1.0})
    deep = nirbridge.torch_to_nir(Net(), to_scale, stateful_modules={Pair}, concrete_args={"deep": True})
    assert list(deep.nodes) == ["x", "fc", "pair", "extra", "output"]
    with pytest.raises(nirbridge.ParameterError, match="stateful_modules=... takes module types"):
        nirbridge.torch_to_nir(Net(), to_scale, stateful_modules={"Pair"})

    # type_check=True runs nir's own check as well, which nirbridge's typed graphs pass
    plain = nirbridge.torch_to_nir(model, type_check=True)
    assert list(plain.nodes) == ["input", "0", "1", "output"]
    grouped = nn.Sequential(nn.Conv1d(4, 4, 3, groups=2), nn.Flatten(), nn.Linear(16, 2))
    graph = nirbridge.torch_to_nir(grouped, example_input=torch.zeros(1, 4, 6), type_check=True)
    assert tuple(graph.nodes["2"].input_type["input"]) == (16,)


def test_nirtorchs_pooling_and_nirbridges_flatten_export_as_nir_says():
    """nirtorch imports SumPool2d as torch's LPPool2d(norm_type=1): it exports as
    SumPool2d and runs alike; nirbridge's Flatten holds NIR's dims and exports them."""
    model = nn.Sequential(nn.LPPool2d(1, 2), layers.Flatten(0, -1, rank=3), nn.Linear(18, 2))
    x = torch.from_numpy(np.random.default_rng(3).integers(0, 5, size=(2, 2, 6, 6))).to(model[2].weight.dtype)
    graph = nirbridge.torch_to_nir(model, example_input=x)
    pool, flat = graph.nodes["0"], graph.nodes["1"]
    assert type(pool) is nir.SumPool2d
    assert (
        pool.kernel_size.tolist() == [2, 2]
        and pool.stride.tolist() == [2, 2]
        and pool.padding.tolist() == [0, 0]
    )
    assert type(flat) is nir.Flatten and (flat.start_dim, flat.end_dim) == (0, -1)
    out, _ = nirbridge.nir_to_torch(graph, dtype=x.dtype)(x)
    torch.testing.assert_close(out, model(x), rtol=1e-6, atol=1e-6)  # LPPool2d rounds its average


def test_a_forward_taking_state_may_return_its_output_alone():
    """nirtorch's concrete_args={"state": None} case: forward(x, state=None) that returns
    only its output exports that output."""

    class WithState(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)

        def forward(self, x, state=None):
            if state is None:
                state = [0.0]
            return self.linear(x)

    graph = nirbridge.torch_to_nir(WithState(), concrete_args={"state": None})
    assert [type(n).__name__ for n in graph.nodes.values()] == ["Input", "Affine", "Output"]
    with pytest.raises(nirbridge.TraceError, match=r"must return \(output, state\) or its output alone"):

        class Triple(WithState):
            def forward(self, x, state=None):
                y = self.linear(x)
                return y, y, y

        nirbridge.torch_to_nir(Triple(), concrete_args={"state": None})


def test_a_failing_converter_is_still_a_value_error():
    def broken(module):
        raise ValueError("cannot read this layer")

    with pytest.raises(ValueError, match="while converting node '0' \\(Linear\\): ValueError") as info:
        nirbridge.torch_to_nir(nn.Sequential(nn.Linear(2, 2)), {nn.Linear: broken})
    assert isinstance(info.value, nirbridge.NodeConversionError)
    assert str(info.value.__cause__) == "cannot read this layer"


def test_a_tensor_where_the_map_goes_says_to_pass_example_input():
    cnn = nn.Sequential(nn.Conv2d(2, 4, 3), nn.Flatten(), nn.Linear(4 * 32 * 32, 10))
    with pytest.raises(nirbridge.ParameterError, match=r"got a Tensor\. .*example_input=") as info:
        nirbridge.torch_to_nir(cnn, torch.zeros(1, 2, 34, 34))
    assert "module_map must be a dict" in str(info.value)
    graph = nirbridge.torch_to_nir(cnn, example_input=torch.zeros(1, 2, 34, 34))
    assert tuple(graph.nodes["2"].input_type["input"]) == (4 * 32 * 32,)


# ----------------------------------------------------------------------------- diagnoses

NUM_STEPS = 25


class TutorialNet(nn.Module):
    """snntorch's tutorial network: forward loops over the time steps itself."""

    def __init__(self, index_input=True, **leaky):
        super().__init__()
        self.index_input = index_input
        self.fc1 = nn.Linear(784, 100)
        self.lif1 = snn.Leaky(beta=0.9, **leaky)
        self.fc2 = nn.Linear(100, 10)
        self.lif2 = snn.Leaky(beta=0.9, **leaky)

    def forward(self, x):
        mem1 = self.lif1.init_leaky()
        mem2 = self.lif2.init_leaky()
        spk2_rec, mem2_rec = [], []
        for step in range(NUM_STEPS):
            cur1 = self.fc1(x[step] if self.index_input else x)
            spk1, mem1 = self.lif1(cur1, mem1)
            cur2 = self.fc2(spk1)
            spk2, mem2 = self.lif2(cur2, mem2)
            spk2_rec.append(spk2)
            mem2_rec.append(mem2)
        return torch.stack(spk2_rec, dim=0), torch.stack(mem2_rec, dim=0)


class NorseLoop(nn.Module):
    """The same loop as norse users write it, with cells."""

    def __init__(self):
        super().__init__()
        self.fc1, self.cell = nn.Linear(20, 16), nt.LIFBoxCell()
        self.fc2, self.out = nn.Linear(16, 4), nt.LIBoxCell()

    def forward(self, x):
        s1 = s2 = None
        voltages = []
        for t in range(NUM_STEPS):
            z, s1 = self.cell(self.fc1(x[t]), s1)
            v, s2 = self.out(self.fc2(z), s2)
            voltages.append(v)
        return torch.stack(voltages)


def one_step_code(message: str) -> str:
    """The forward the time-loop error shows, as source code."""
    lines = message.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("    def forward")))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("    "))
    return "\n".join(line[4:] for line in lines[start:end])


def with_forward(model: nn.Module, code: str) -> nn.Module:
    """``model`` with the forward ``code`` defines (same modules, same parameters)."""
    namespace: dict = {}
    exec(code, namespace)  # the code comes from nirbridge's own error message
    model.__class__ = type(type(model).__name__, (type(model),), {"forward": namespace["forward"]})
    return model


@pytest.mark.parametrize("index_input", [True, False], ids=["x[step]", "x"])
@pytest.mark.parametrize("export", ["torch_to_nir", "snntorch_adapter.to_nir"])
def test_the_snntorch_tutorials_time_loop_is_told_to_export_one_step(export, index_input):
    to_nir = nirbridge.torch_to_nir if export == "torch_to_nir" else snntorch_adapter.to_nir
    with pytest.raises(nirbridge.TraceError) as info:  # one error, and no warnings before it
        to_nir(TutorialNet(index_input))
    message = str(info.value)
    assert isinstance(info.value, nirbridge.NirBridgeError)
    expected = [
        "TutorialNet.forward loops over time: it calls 'fc1', 'lif1', 'fc2' and 'lif2' 25 times each; "
        "'lif1' and 'lif2' take the state their previous call returned; it stacks the outputs of "
        "'lif2' with torch.stack (test_trace.py:",
        "The model must compute one time step: a NIR graph is one step of a recurrence",
        "the time loop belongs to whoever runs the graph",
        '        h, s1 = self.lif1(h, state.get("lif1"))',
        "and export that model with nirbridge.adapters.snntorch.to_nir(model)",
        "with the neurons built with init_hidden=True (each then returns its spikes alone), export the "
        "layers directly: nirbridge.adapters.snntorch.to_nir(nn.Sequential(model.fc1, model.lif1, "
        "model.fc2, model.lif2))",
        "Then run the exported graph over time with nirbridge.run(graph, x), x time first",
    ]
    if index_input:
        expected.append("it indexes its input 'x' by step (x[0], x[1], ..., x[24])")
    if export == "torch_to_nir":
        expected.append("(torch_to_nir's default map has no snntorch neurons)")
    for text in expected:
        assert text in message, (text, message)
    assert "default map has no" not in message or export == "torch_to_nir"
    assert one_step_code(message) == "\n".join(
        [
            "def forward(self, x, state=None):",
            "    state = state or {}",
            "    h = self.fc1(x)",
            '    h, s1 = self.lif1(h, state.get("lif1"))',
            "    h = self.fc2(h)",
            '    h, s2 = self.lif2(h, state.get("lif2"))',
            '    return h, {"lif1": s1, "lif2": s2}',
        ]
    )


def test_the_one_step_forward_the_message_shows_exports_and_runs_like_the_loop():
    torch.manual_seed(1)
    net = TutorialNet(reset_mechanism="zero")
    with pytest.raises(nirbridge.TraceError) as info:
        snntorch_adapter.to_nir(net)
    graph = snntorch_adapter.to_nir(with_forward(copy.deepcopy(net), one_step_code(str(info.value))))
    assert list(graph.nodes) == ["x", "fc1", "lif1", "fc2", "lif2", "output"]
    x = (torch.rand(NUM_STEPS, BATCH, 784) < 0.3).float()
    with torch.no_grad():  # snntorch's spikes are float32 whatever the input: it runs at float32
        spikes, _ = net.float()(x)
    run = nirbridge.run(nirbridge.nir_to_torch(graph, dtype=torch.float32), x)
    assert spikes.sum() > 0
    torch.testing.assert_close(run.output, spikes, rtol=0, atol=0)


@pytest.mark.parametrize("export", ["torch_to_nir", "norse_adapter.to_nir"])
def test_a_norse_cell_loop_is_told_to_export_one_step(export):
    to_nir = nirbridge.torch_to_nir if export == "torch_to_nir" else norse_adapter.to_nir
    with pytest.raises(nirbridge.TraceError) as info:
        to_nir(NorseLoop())
    message = str(info.value)
    for text in [
        "NorseLoop.forward loops over time: it calls 'fc1', 'cell', 'fc2' and 'out' 25 times each; "
        "'cell' and 'out' take the state their previous call returned",
        '        h, s1 = self.cell(h, state.get("cell"))',
        "and export that model with nirbridge.adapters.norse.to_nir(model)",
        "or export the layers directly: nirbridge.adapters.norse.to_nir(norse.torch.SequentialState("
        "model.fc1, model.cell, model.fc2, model.out))",
        "nirbridge.run(graph, x)",
    ]:
        assert text in message, (text, message)
    assert ("default map has no norse neurons" in message) == (export == "torch_to_nir")
    # what the message suggests exports: the one-step forward, and the cells in SequentialState
    one_step = with_forward(NorseLoop(), one_step_code(message))
    graph = norse_adapter.to_nir(one_step)
    assert list(graph.nodes) == ["x", "fc1", "cell", "fc2", "out", "output"]
    model = NorseLoop()
    graph = norse_adapter.to_nir(nt.SequentialState(model.fc1, model.cell, model.fc2, model.out))
    assert [type(n).__name__ for n in graph.nodes.values()] == [
        "Input",
        "Affine",
        "LIF",
        "Affine",
        "LI",
        "Output",
    ]


class ThreadedLIF(nn.Module):
    """nirbridge's own neurons in a loop, the state passed from call to call."""

    def __init__(self):
        super().__init__()
        self.fc, self.lif = nn.Linear(4, 3), neurons.LIF(tau=1e-3, dt=DT)

    def forward(self, x):
        state = None
        for _ in range(NUM_STEPS):
            z, state = self.lif(self.fc(x), state)
        return z


class HiddenLoop(nn.Module):
    """snntorch neurons that keep their state themselves (init_hidden=True), in a loop."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.lif = snn.Leaky(beta=0.9, init_hidden=True, reset_mechanism="zero")

    def forward(self, x):
        return torch.stack([self.lif(self.fc(x[t])) for t in range(NUM_STEPS)])


class StepBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.lif = nn.Linear(4, 3), neurons.LIF(tau=1e-3, dt=DT)

    def forward(self, x, state=None):
        z, s = self.lif(self.fc(x), state)
        return z, s


class BlockLoop(nn.Module):
    """A loop over a block of the user's own, with a readout after each step."""

    def __init__(self):
        super().__init__()
        self.block, self.readout = StepBlock(), nn.Linear(3, 2)

    def forward(self, x):
        s, outs = None, []
        for t in range(NUM_STEPS):
            z, s = self.block(x[t], s)
            outs.append(self.readout(z))
        return torch.stack(outs)


@pytest.mark.parametrize(
    "model, found, code",
    [
        (
            ThreadedLIF(),
            "it calls 'fc' and 'lif' 25 times each; 'lif' takes the state its previous call returned.",
            '    h, s1 = self.lif(h, state.get("lif"))',
        ),
        (
            HiddenLoop(),
            "'lif' keeps its state inside the module (init_hidden=True), so each call is one more step; "
            "it stacks the outputs of 'lif' with torch.stack",
            "    h = self.lif(h)",
        ),
        (
            BlockLoop(),
            "it calls 'block' and 'readout' 25 times each; 'block' takes the state its previous call "
            "returned; it stacks the outputs of 'readout' with torch.stack",
            '    h, s1 = self.block(x, state.get("block"))',
        ),
    ],
    ids=["nirbridge-neurons", "snntorch-init-hidden", "own-block"],
)
def test_other_time_loops_are_told_to_export_one_step(model, found, code):
    to_nir = snntorch_adapter.to_nir if isinstance(model, HiddenLoop) else nirbridge.torch_to_nir
    with pytest.raises(nirbridge.TraceError) as info:
        to_nir(model)
    message = str(info.value)
    assert f"{type(model).__name__}.forward loops over time: " in message
    assert found in message and code in one_step_code(message), message
    graph = to_nir(with_forward(model, one_step_code(message)))  # and it exports
    assert sum(isinstance(n, nir.Output) for n in graph.nodes.values()) == 1


def test_a_neuron_used_for_two_populations_in_one_step_stays_a_warning():
    class TwoPopulations(nn.Module):
        def __init__(self):
            super().__init__()
            self.fa, self.fb, self.lif = nn.Linear(4, 3), nn.Linear(4, 3), neurons.LIF(tau=1e-3, dt=DT)

        def forward(self, a, b, state=None):
            state = state or {}
            za, sa = self.lif(self.fa(a), state.get("a"))
            zb, sb = self.lif(self.fb(b), state.get("b"))
            return za + zb, {"a": sa, "b": sb}

    with pytest.warns(nirbridge.LossyConversionWarning, match="'lif' is called 2 times"):
        graph = nirbridge.torch_to_nir(TwoPopulations())
    assert list(graph.nodes) == ["a", "b", "fa", "lif", "fb", "lif_2", "output"]


def test_a_loop_over_the_inputs_length_is_told_to_export_one_step():
    class RangeLoop(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return torch.stack([self.fc(x[t]) for t in range(x.shape[0])])

    with pytest.raises(nirbridge.TraceError) as info:
        nirbridge.torch_to_nir(RangeLoop())
    message = str(info.value)
    assert "torch.fx could not trace RangeLoop.forward: TypeError: " in message
    assert "If RangeLoop.forward loops over time steps (`for t in range(x.shape[0])`" in message
    assert "one time step of a recurrence" in message and "nirbridge.run(graph, x)" in message


class MyNeuron(nn.Module):
    """A neuron of the user's own: stateful, with no entry in the map."""

    def forward(self, x, state=None):
        v = x if state is None else state + x
        return (v > 1.0).double(), v


@pytest.mark.parametrize(
    "export, neuron, expected",
    [
        (
            "torch_to_nir",
            lambda: snn.Alpha(alpha=0.9, beta=0.8),
            [
                "module_map={snntorch.Alpha: fn}, where fn(module) returns the NIR neuron node it computes",
                "nirbridge.adapters.snntorch.to_nir has no converter for snntorch.Alpha either",
            ],
        ),
        ("snntorch_adapter", lambda: snn.Lapicque(beta=0.9), ["module_map={snntorch.Lapicque: fn}"]),
        (
            "torch_to_nir",
            lambda: snn.Leaky(beta=0.9),
            [
                "module_map={snntorch.Leaky: fn}",
                "snntorch models export with nirbridge.adapters.snntorch.to_nir(model), which converts "
                "snntorch.Leaky; torch_to_nir's default map has no snntorch neurons",
            ],
        ),
        (
            "torch_to_nir",
            lambda: nt.LSNNCell(),
            ["norse.torch.LSNNCell is a neuron (stateful", "module_map={norse.torch.LSNNCell: fn}"],
        ),
        (
            "torch_to_nir",
            lambda: nt.LIFBoxCell(),
            ["nirbridge.adapters.norse.to_nir(model), which converts norse.torch.LIFBoxCell"],
        ),
        ("torch_to_nir", MyNeuron, ["tests.test_trace.MyNeuron is a neuron (stateful"]),
    ],
    ids=["snn.Alpha", "snn.Lapicque-adapter", "snn.Leaky", "nt.LSNNCell", "nt.LIFBoxCell", "own"],
)
def test_a_neuron_the_map_lacks_is_never_told_to_use_skip(export, neuron, expected):
    to_nir = nirbridge.torch_to_nir if export == "torch_to_nir" else snntorch_adapter.to_nir
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        to_nir(nn.Sequential(nn.Linear(4, 3), neuron()))
    message = str(info.value)
    kind = next(iter(info.value.offenders))
    assert list(info.value.offenders) == [kind] and info.value.offenders[kind] == ["'1'"], message
    assert "skip=" not in message, message
    assert "no NIR converter in this map" in message
    for text in expected:
        assert text in message, (text, message)


def test_stateless_layers_are_still_told_skip_beside_neurons():
    leaky = snn.Leaky(beta=0.9, init_hidden=True, reset_mechanism="zero")
    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.1), leaky)
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        nirbridge.torch_to_nir(model)
    message = str(info.value)
    assert "leave out modules that do not change the output with skip=(nn.Dropout,)" in message
    assert "snntorch.Leaky is a neuron" in message
    assert message.count("skip=") == 1
    graph = snntorch_adapter.to_nir(model.eval(), skip=(nn.Dropout,))
    assert list(graph.nodes) == ["input", "0", "2", "output"]


def fx_message(model: nn.Module) -> str:
    """What torch.fx itself says when it cannot trace ``model``."""
    with pytest.raises(Exception) as info:
        torch.fx.symbolic_trace(model)
    return f"{type(info.value).__name__}: {info.value}"


def test_fx_reason_is_quoted_whole():
    with pytest.raises(nirbridge.TraceError) as info:
        nirbridge.torch_to_nir(Branchy())
    expected = fx_message(Branchy())
    assert "symbolically traced variables cannot be used as inputs to control flow" in expected
    assert str(info.value).startswith(f"torch.fx could not trace Branchy.forward: {expected}\n")

    class Rows(nn.Module):  # iterates over a tensor: fx's message is long
        def forward(self, x):
            return torch.stack([row for row in x])

    class Length(nn.Module):  # calls len(): fx's message has its torch.fx.wrap hint
        def forward(self, x):
            return x * len(x)

    class Explains(nn.Module):  # a message over several lines
        def forward(self, x):
            raise RuntimeError("cannot trace this\nbecause of that\nsee the docs")

    model = nn.Sequential(nn.Linear(2, 2), Rows(), Length(), Explains())
    with pytest.raises(nirbridge.UnsupportedModuleError) as info:
        nirbridge.torch_to_nir(model)
    message = str(info.value)
    rows = fx_message(Rows())
    assert len(rows) > 300 and "check out the Proxy docstring for help troubleshooting" in rows
    assert f"'1' (fx cannot trace it: {rows})" in message
    length = fx_message(Length())
    assert "please call torch.fx.wrap('len') at module scope" in length
    assert f"'2' (fx cannot trace it: {length})" in message
    assert (
        "'3' (fx cannot trace it: RuntimeError: cannot trace this\n      because of that\n      see the docs)"
        in message
    )


def test_odd_export_arguments_are_parameter_errors():
    model = nn.Sequential(nn.Linear(3, 2))
    x = torch.zeros(1, 3)
    for kwargs, says in [
        ({"skip": 5}, r"skip=\.\.\. takes a tuple of module types, got 5"),
        ({"stateful_modules": 5}, r"stateful_modules=\.\.\. takes a tuple of module types"),
        ({"concrete_args": 5}, r"concrete_args=\.\.\. takes a dict"),
        (
            {"module_map": {"Linear": lambda m: None}},
            r"key 'Linear' is a string; keys are module types \(torch.nn.Linear\)",
        ),
    ]:
        with pytest.raises(nirbridge.ParameterError, match=says):
            nirbridge.torch_to_nir(model, example_input=x, **kwargs)


def test_exporting_a_diverged_model_warns_naming_the_values():
    model = nn.Sequential(nn.Linear(3, 2), neurons.LIF(tau=np.full(2, 1e-3), v_threshold=np.ones(2)))
    with torch.no_grad():
        model[0].weight[1, 2] = float("nan")
    with pytest.warns(nirbridge.ParameterWarning) as caught:
        graph = nirbridge.torch_to_nir(model, example_input=torch.zeros(1, 3))
    message = str(caught[0].message)
    assert message.startswith("torch_to_nir: the model holds values nir_to_torch refuses")
    assert "node '0' (Affine): weight is NaN at index (1, 2)" in message
    assert np.isnan(graph.nodes["0"].weight[1, 2])  # exported as it is


def test_exporting_a_path_instead_of_a_model_says_to_load_it():
    from nirbridge.adapters import norse as norse_adapter
    from nirbridge.adapters import snntorch as snntorch_adapter
    from nirbridge.adapters import spikingjelly as sj_adapter

    for to_nir in (snntorch_adapter.to_nir, sj_adapter.to_nir, norse_adapter.to_nir):
        with pytest.raises(
            nirbridge.ParameterError, match=r"got str 'model.pt'; build the model and load its weights"
        ):
            to_nir("model.pt")

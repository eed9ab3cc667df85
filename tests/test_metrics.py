"""nirbridge.metrics: NeuroBench's metrics of a run, checked against NeuroBench 2.3.0
itself on snnTorch models, and against an independent numpy count of its definitions."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import nir
import numpy as np
import pytest
import snntorch as snn
import torch
from torch.utils.data import DataLoader, TensorDataset

import nirbridge
from nirbridge.adapters import snntorch as snntorch_adapter
from nirbridge.metrics import Metrics, MetricsError
from nirbridge.metrics.counting import NEURON_OPS
from tests.conftest import EXAMPLES
from tests.reference import Reference

# ----------------------------------------------------------------------------- NeuroBench itself

NEUROBENCH_KEYS = {  # NeuroBench's result keys for metric classes -> the names for metric strings
    "ParameterCount": "parameter_count",
    "Footprint": "footprint",
    "ConnectionSparsity": "connection_sparsity",
    "ActivationSparsity": "activation_sparsity",
    "ActivationSparsityByLayer": "activation_sparsity_by_layer",
    "SynapticOperations": "synaptic_operations",
    "MembraneUpdates": "membrane_updates",
    "NeuronOperations": "neuron_operations",
}


def neurobench(net: torch.nn.Module, x: torch.Tensor) -> dict:
    """NeuroBench's Benchmark on ``net`` (snnTorch, init_hidden=True) over ``x``
    ``[B, T, ...]`` in one batch, every metric here; its keys renamed to the strings'."""
    from neurobench.benchmarks import Benchmark
    from neurobench.metrics.static import ConnectionSparsity, Footprint, ParameterCount
    from neurobench.metrics.workload import (
        ActivationSparsity,
        ActivationSparsityByLayer,
        MembraneUpdates,
        NeuronOperations,
        SynapticOperations,
    )
    from neurobench.models import SNNTorchModel

    loader = DataLoader(TensorDataset(x, torch.zeros(x.shape[0])), batch_size=x.shape[0])
    metrics = [
        [ParameterCount, Footprint, ConnectionSparsity],
        [
            ActivationSparsity,
            ActivationSparsityByLayer,
            SynapticOperations,
            MembraneUpdates,
            NeuronOperations,
        ],
    ]
    results = Benchmark(SNNTorchModel(net), loader, [], [], metrics).run(quiet=True)
    return {NEUROBENCH_KEYS[k]: v for k, v in results.items()}


def ours(net: torch.nn.Module, x: torch.Tensor) -> Metrics:
    """Export ``net`` with nirbridge, import it, run it over ``x`` (time first) and count."""
    graph = snntorch_adapter.to_nir(net, example_input=x[:1, 0])
    return nirbridge.run(nirbridge.nir_to_torch(graph), x.transpose(0, 1), record="metrics").metrics()


ZERO = {"init_hidden": True, "reset_mechanism": "zero", "reset_delay": False}


def dense(**kw):
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8),
        snn.Leaky(beta=0.9, **kw),
        torch.nn.Linear(8, 4),
        snn.Leaky(beta=0.8, output=True, **kw),
    )


def synaptic():
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8),
        snn.Synaptic(alpha=0.7, beta=0.9, **ZERO),
        torch.nn.Linear(8, 4),
        snn.Leaky(beta=0.8, output=True, **ZERO),
    )


def conv():
    net = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1),
        snn.Leaky(beta=0.9, **ZERO),
        torch.nn.AvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 5),
        snn.Leaky(beta=0.8, output=True, **ZERO),
    )
    with torch.no_grad():  # strong enough that both layers spike
        net[0].weight.mul_(3.0)
        net[4].weight.abs_().mul_(4.0)
    return net


def recurrent():
    net = torch.nn.Sequential(
        torch.nn.Linear(6, 8),
        snn.RLeaky(beta=0.9, linear_features=8, **ZERO),
        torch.nn.Linear(8, 4),
        snn.Leaky(beta=0.8, output=True, **ZERO),
    )
    with torch.no_grad():
        net[1].recurrent.bias.zero_()  # NIR's recurrent edge starts at zero; snnTorch's bias would not
        net[2].weight.abs_().mul_(3.0)  # strong enough that the output spikes
    return net


ARCHITECTURES = {
    "Linear-Leaky": (lambda: dense(**ZERO), (5, 20, 6)),
    "Linear-Synaptic": (synaptic, (5, 20, 6)),
    "Conv2d-Leaky-AvgPool-Linear": (conv, (3, 12, 2, 8, 8)),
    "Linear-RLeaky": (recurrent, (5, 20, 6)),
}


def spikes(shape, seed: int, value: float = 1.0) -> torch.Tensor:
    """0/``value`` spikes at rate 0.3; ``value`` 2 makes NeuroBench count MACs, not ACs."""
    return (torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.3).float() * value


@pytest.mark.parametrize("name", list(ARCHITECTURES))
@pytest.mark.parametrize("value", [1.0, 2.0], ids=["spikes", "graded"])
def test_neurobench_and_nirbridge_agree_on_snntorch_models(name, value):
    """NeuroBench's Benchmark on the snnTorch model (init_hidden=True) and
    nirbridge.run(nir_to_torch(exported), x).metrics() give the same numbers, except
    where the definitions differ, which each assertion below names:

    - footprint: NeuroBench counts the bytes the model holds, and a NIR graph holds
      each neuron's parameters per neuron (tau, r, v_leak, v_threshold, v_reset, ...),
      where snnTorch holds a scalar beta and threshold and its own flags;
    - RLeaky: snnTorch's zero reset evaluates the state function twice a step, so
      NeuroBench counts the recurrent weight's products twice; and it has no neuron
      operations for an RLeaky (its table knows Leaky, Synaptic, Lapicque, Alpha), where
      nirbridge counts the LIF inside as a Leaky;
    - per-layer names: NeuroBench names the RLeaky module ("1"), nirbridge the LIF node
      inside the subgraph the RLeaky became ("1.lif").
    """
    make, shape = ARCHITECTURES[name]
    torch.manual_seed(0)
    net = make()
    x = spikes(shape, 1, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs = neurobench(net, x)
    mine = ours(net, x)
    got = mine.as_neurobench()
    assert got["parameter_count"] == theirs["parameter_count"]
    assert got["connection_sparsity"] == theirs["connection_sparsity"]
    assert got["activation_sparsity"] == pytest.approx(theirs["activation_sparsity"], rel=1e-12)
    assert got["membrane_updates"] == theirs["membrane_updates"]
    assert got["footprint"] > theirs["footprint"]  # per-neuron NIR parameters (see above)
    syn = got["synaptic_operations"]
    if name == "Linear-RLeaky":
        w_rec = next(layer for layer in mine.layers if layer.name == "1.w_rec")
        assert theirs["synaptic_operations"] == {
            "Effective_MACs": syn["Effective_MACs"] + w_rec.effective_macs,
            "Effective_ACs": syn["Effective_ACs"] + w_rec.effective_acs,
            "Dense": syn["Dense"] + w_rec.dense_synops,
        }
        assert w_rec.dense_synops == 8 * 8 * shape[1]
        assert theirs["neuron_operations"] == 0.0  # NeuroBench: no entry for RLeaky
        renamed = {("1.lif" if k == "1" else k): v for k, v in theirs["activation_sparsity_by_layer"].items()}
        assert got["activation_sparsity_by_layer"] == renamed
    else:
        assert syn == theirs["synaptic_operations"]
        assert got["neuron_operations"] == theirs["neuron_operations"]
        assert got["activation_sparsity_by_layer"] == theirs["activation_sparsity_by_layer"]
    counted = syn["Effective_MACs"] if value == 2.0 else syn["Effective_ACs"]
    assert 0 < counted < syn["Dense"]


def test_snntorch_s_delayed_reset_reports_more_membrane_updates():
    """With snnTorch's default reset_delay=True its membrane is reported before the
    reset, so a neuron that sits at 0 after a reset still "changes" the step after in
    NeuroBench's count; nirbridge counts NIR's membrane, after the reset. Everything
    else is the same."""
    torch.manual_seed(0)
    net = dense(init_hidden=True, reset_mechanism="zero")
    x = spikes((5, 20, 6), 1)
    theirs, mine = neurobench(net, x), ours(net, x).as_neurobench()
    assert mine["membrane_updates"] < theirs["membrane_updates"]
    assert mine["synaptic_operations"] == theirs["synaptic_operations"]
    assert mine["activation_sparsity_by_layer"] == theirs["activation_sparsity_by_layer"]


# ----------------------------------------------------------------------------- the definitions, in numpy


def numpy_metrics(graph: nir.NIRGraph, x: np.ndarray, dt: float) -> dict:
    """NeuroBench's definitions counted again in numpy over tests/reference.py's run of
    ``graph`` (Input -> Affine -> LIF -> Linear -> LIF -> Output): per step, the
    connections' products of a non-zero input and a non-zero weight (accumulates where
    the inputs are all 0 or +-1), the spiking nodes' zeros, and the neurons whose v
    changed; per sample."""
    ref = Reference(graph, dt)
    steps, batch = x.shape[:2]
    acs = macs = dense = zeros = values = updates = 0
    previous: dict[str, np.ndarray] = {}
    by_layer = {"lif1": [0, 0], "lif3": [0, 0]}
    for t in range(steps):
        inputs = {"fc0": x[t]}
        ref.step({"input": x[t]})
        inputs["fc2"] = ref.values["lif1"]
        for name, feed in inputs.items():
            weight = graph.nodes[name].weight
            ops = int(((feed != 0).astype(int) @ (weight != 0).astype(int).T).sum())
            if np.all(np.isin(feed, (0.0, 1.0, -1.0))):
                acs += ops
            else:
                macs += ops
            dense += batch * weight.size
        for name in ("lif1", "lif3"):
            out = ref.values[name]
            by_layer[name][0] += out.size - np.count_nonzero(out)
            by_layer[name][1] += out.size
            v = ref.state[name]
            updates += v.size if t == 0 else int(np.count_nonzero(v - previous[name]))
            previous[name] = v.copy()
    zeros = sum(z for z, _ in by_layer.values())
    values = sum(n for _, n in by_layer.values())
    neurons = graph.nodes["lif1"].tau.size + graph.nodes["lif3"].tau.size
    return {
        "synaptic_operations": {
            "Effective_MACs": macs / batch,
            "Effective_ACs": acs / batch,
            "Dense": dense / batch,
        },
        "activation_sparsity": zeros / values,
        "activation_sparsity_by_layer": {k: z / n for k, (z, n) in by_layer.items()},
        "membrane_updates": updates / batch,
        "neuron_operations": {
            "Effective Neuron Ops": updates * NEURON_OPS["LIF"] / batch,
            "Neuron Dense Ops": neurons * steps * NEURON_OPS["LIF"],
        },
        "parameter_count": sum(graph.nodes[n].weight.size for n in ("fc0", "fc2"))
        + graph.nodes["fc0"].bias.size,
        "connection_sparsity": round(
            sum(int((graph.nodes[n].weight == 0).sum()) for n in ("fc0", "fc2"))
            / sum(graph.nodes[n].weight.size for n in ("fc0", "fc2")),
            4,
        ),
    }


def small_graph() -> nir.NIRGraph:
    rng = np.random.default_rng(3)
    w0 = rng.normal(1.0, 0.6, (8, 5)) * (rng.random((8, 5)) > 0.3)  # about a third of the weights 0
    w2 = rng.normal(0.8, 0.5, (3, 8)) * (rng.random((3, 8)) > 0.2)

    def lif(n):
        return nir.LIF(
            tau=np.full(n, 5e-3),
            r=np.full(n, 5.0),
            v_leak=np.zeros(n),
            v_threshold=np.ones(n),
            v_reset=np.zeros(n),
        )

    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([5])),
            "fc0": nir.Affine(w0, rng.normal(0, 0.1, 8)),
            "lif1": lif(8),
            "fc2": nir.Linear(w2),
            "lif3": lif(3),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "fc0"), ("fc0", "lif1"), ("lif1", "fc2"), ("fc2", "lif3"), ("lif3", "output")],
    )


def test_the_counts_are_neurobench_s_definitions_in_an_independent_numpy_run():
    """On inputs with spike steps, graded steps (MACs) and silent steps."""
    graph = small_graph()
    rng = np.random.default_rng(4)
    x = (rng.random((30, 4, 5)) < 0.4).astype(np.float64)
    x[10:15] *= 0.5  # graded: multiply-accumulates
    x[20:23] = 0.0  # silent: no operations, and membranes that only decay
    dt = 1e-3
    got = nirbridge.run(
        nirbridge.nir_to_torch(graph, dt=dt, dtype=torch.float64), torch.from_numpy(x), record="metrics"
    )
    metrics = got.metrics().as_neurobench()
    expected = numpy_metrics(graph, x, dt)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-12), key
    assert (
        metrics["synaptic_operations"]["Effective_MACs"] > 0
        and metrics["synaptic_operations"]["Effective_ACs"] > 0
    )


# ----------------------------------------------------------------------------- any graph


READABLE = sorted(
    p.name
    for p in EXAMPLES.glob("*.nir")
    if "__extras__" not in p.name  # the extras are malformed
)


def consistent(metrics: Metrics) -> None:
    """What holds for any graph: the totals are the nodes' sums, effective counts stay
    within the dense ones, fractions within [0, 1]."""
    syn, neu = metrics.synaptic_operations, metrics.neuron_operations
    layers = metrics.layers
    assert syn["Effective_ACs"] == pytest.approx(sum(la.effective_acs for la in layers))
    assert syn["Effective_MACs"] == pytest.approx(sum(la.effective_macs for la in layers))
    assert syn["Dense"] == pytest.approx(sum(la.dense_synops for la in layers))
    assert syn["Effective_ACs"] + syn["Effective_MACs"] <= syn["Dense"]
    assert metrics.membrane_updates == pytest.approx(sum(la.membrane_updates for la in layers))
    assert neu["Effective Neuron Ops"] <= neu["Neuron Dense Ops"]
    assert 0 <= metrics.activation_sparsity <= 1 and 0 <= metrics.connection_sparsity <= 1
    assert metrics.parameter_count > 0 and metrics.footprint >= 4 * metrics.parameter_count


@pytest.mark.parametrize("name", READABLE)
def test_every_example_file_gives_its_metrics(name):
    """The metrics of each readable example file (recurrent, nested, convolutional, LI
    readouts), on random spikes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the files' repairs, and silent layers at a guessed dt
        graph = nirbridge.read(EXAMPLES / name)
        dt = 1.0 if "cnn" in name else None
        module = nirbridge.nir_to_torch(graph, dt=dt, allow_negative_tau=True)  # spyx_shd holds some
        level_inputs = [n for n, v in graph.nodes.items() if isinstance(v, nir.Input)]
        shape = tuple(
            int(s) for s in np.asarray(graph.nodes[level_inputs[0]].input_type["input"]).reshape(-1)
        )
        x = spikes((12, 2, *shape), 7)
        metrics = nirbridge.run(module, x, record="metrics").metrics()
    consistent(metrics)
    assert metrics.samples == 2 and metrics.steps == 12
    assert metrics.synaptic_operations["Dense"] > 0 and metrics.layers


def test_norse_and_spikingjelly_exports_give_their_metrics():
    """A norse model and a spikingjelly model, exported by nirbridge's adapters: their
    graphs' metrics, with the dense synaptic operations the layers' sizes say."""
    import norse.torch as norse
    from spikingjelly.activation_based import layer as sj_layer
    from spikingjelly.activation_based import neuron as sj_neuron

    from nirbridge.adapters import norse as norse_adapter
    from nirbridge.adapters import spikingjelly as sj_adapter

    torch.manual_seed(0)
    norse_model = norse.SequentialState(
        torch.nn.Linear(6, 10), norse.LIFBoxCell(), torch.nn.Linear(10, 3), norse.LIFBoxCell()
    )
    sj_model = torch.nn.Sequential(
        sj_layer.Linear(6, 10), sj_neuron.LIFNode(tau=2.0), sj_layer.Linear(10, 3), sj_neuron.LIFNode(tau=2.0)
    )
    with torch.no_grad():  # excitatory, so that both layers spike
        for model in (norse_model, sj_model):
            for linear in (model[0], model[2]):
                linear.weight.abs_().mul_(4.0)
    models = {"norse": norse_adapter.to_nir(norse_model), "spikingjelly": sj_adapter.to_nir(sj_model)}
    x = spikes((25, 3, 6), 2, value=8.0)  # strong enough that both layers spike
    for name, graph in models.items():
        metrics = nirbridge.run(nirbridge.nir_to_torch(graph), x, record="metrics").metrics()
        consistent(metrics)
        assert metrics.synaptic_operations["Dense"] == 25 * (6 * 10 + 10 * 3), name
        assert metrics.neuron_operations["Neuron Dense Ops"] == 25 * 13 * NEURON_OPS["LIF"], name


# ----------------------------------------------------------------------------- errors, CLI, figure


def test_a_run_that_recorded_too_little_says_what_to_record():
    module = nirbridge.nir_to_torch(small_graph(), dt=1e-3)
    x = spikes((5, 2, 5), 0)
    with pytest.raises(MetricsError, match=r"record='metrics'"):
        nirbridge.run(module, x).metrics()
    with pytest.raises(MetricsError, match=r"record='metrics'"):
        nirbridge.run(module, x, record="lif1").metrics()
    assert nirbridge.run(module, x, record="all").metrics().layers  # "all" holds what it needs
    native = dense(**ZERO)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        native_run = nirbridge.run(native, spikes((5, 2, 6), 0))
    with pytest.raises(MetricsError, match=r"nir_to_torch\(graph\)"):
        native_run.metrics()


def test_the_command_line_prints_the_metrics_and_writes_them_as_json(tmp_path):
    path = tmp_path / "g.nir"
    nirbridge.write(path, small_graph())
    base = [
        sys.executable,
        "-m",
        "nirbridge",
        "run",
        str(path),
        "--steps",
        "40",
        "--batch",
        "3",
        "--rate",
        "0.3",
    ]
    shown = subprocess.run([*base, "--metrics", "--dt", "1e-3"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "NeuroBench metrics, per sample (3 sample(s), 40 step(s))" in shown.stdout
    assert "synaptic_operations   Effective_MACs 0.0, Effective_ACs" in shown.stdout
    printed = subprocess.run([*base, "--json", "-", "--dt", "1e-3"], capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    document = json.loads(printed.stdout)
    assert document["samples"] == 3 and document["steps"] == 40
    assert set(document["metrics"]) == {
        "parameter_count",
        "footprint",
        "connection_sparsity",
        "activation_sparsity",
        "activation_sparsity_by_layer",
        "synaptic_operations",
        "membrane_updates",
        "neuron_operations",
    }
    assert document["metrics"]["synaptic_operations"]["Dense"] == 40 * (5 * 8 + 8 * 3)
    written = subprocess.run(
        [*base, "--json", str(tmp_path / "m.json"), "--dt", "1e-3"], capture_output=True, text=True
    )
    assert (
        written.returncode == 0
        and json.loads((tmp_path / "m.json").read_text())["metrics"] == document["metrics"]
    )
    refused = subprocess.run([*base, "--metrics", "--record", "lif1"], capture_output=True, text=True)
    assert refused.returncode == 1 and "leave out --record" in refused.stderr
    alone = subprocess.run(
        [*base, "--json", "-", "--out", str(tmp_path / "r.h5")], capture_output=True, text=True
    )
    assert alone.returncode == 1 and "--json - prints the metrics' JSON and nothing else" in alone.stderr
    assert not (tmp_path / "r.h5").exists()


def test_the_table_and_the_figure_show_each_node():
    module = nirbridge.nir_to_torch(small_graph(), dt=1e-3)
    metrics = nirbridge.run(module, spikes((20, 2, 5), 0), record="metrics").metrics()
    text = str(metrics)
    for name in ("fc0", "lif1", "fc2", "lif3"):
        assert f"\n  {name} " in text
    figure = metrics.plot()
    top, bottom = figure.axes
    assert [t.get_text().split("\n")[0] for t in bottom.get_xticklabels()] == ["fc0", "lif1", "fc2", "lif3"]
    assert top.get_ylabel() == "activation sparsity"


# ----------------------------------------------------------------------------- the docs


@pytest.mark.parametrize("name", ["metrics braille", "metrics cnn", "metrics neurobench"])
def test_the_metrics_page_s_examples_print_what_it_shows(name, tmp_path):
    """docs/metrics.md's examples, run as written: the Braille SRNN, the N-MNIST CNN,
    and an snnTorch model beside NeuroBench's own numbers."""
    import shutil

    from tests import examples

    shutil.copy(
        EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_noBias_subtract.nir", tmp_path / "braille.nir"
    )
    shutil.copy(EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir", tmp_path / "cnn.nir")
    examples.check("docs/metrics.md", name, tmp_path)


def test_a_connection_without_a_weight_tensor_is_named():
    """A node_map module that keeps its weight under another name cannot be counted:
    the error names the node and its module."""

    class Dense(torch.nn.Module):
        def __init__(self, node):
            super().__init__()
            self.w = torch.nn.Parameter(torch.as_tensor(node.weight, dtype=torch.float32))
            self.b = torch.nn.Parameter(torch.as_tensor(node.bias, dtype=torch.float32))

        def forward(self, x):
            return x @ self.w.T + self.b

    module = nirbridge.nir_to_torch(small_graph(), {nir.Affine: Dense}, dt=1e-3)
    result = nirbridge.run(module, spikes((5, 2, 5), 0), record="metrics")
    with pytest.raises(MetricsError, match=r"node 'fc0' \(Affine\) runs as Dense, which holds no weight"):
        result.metrics()


def test_the_metrics_of_batches_add_up_as_neurobench_accumulates_them():
    """NeuroBench's Benchmark over a DataLoader of 7 samples in batches of 3, and the sum
    of nirbridge's metrics of the same three batches."""
    torch.manual_seed(0)
    net = synaptic()
    x = spikes((7, 20, 6), 5)
    from neurobench.benchmarks import Benchmark
    from neurobench.metrics.workload import (
        ActivationSparsity,
        ActivationSparsityByLayer,
        MembraneUpdates,
        NeuronOperations,
        SynapticOperations,
    )
    from neurobench.models import SNNTorchModel

    loader = DataLoader(TensorDataset(x, torch.zeros(7)), batch_size=3)
    workload = [
        ActivationSparsity,
        ActivationSparsityByLayer,
        SynapticOperations,
        MembraneUpdates,
        NeuronOperations,
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs = Benchmark(SNNTorchModel(net), loader, [], [], [[], workload]).run(quiet=True)
    module = nirbridge.nir_to_torch(snntorch_adapter.to_nir(net))
    batches = [
        nirbridge.run(module, x[i : i + 3].transpose(0, 1), record="metrics").metrics() for i in (0, 3, 6)
    ]
    total = sum(batches)
    assert total.samples == 7 and [b.samples for b in batches] == [3, 3, 1]
    got = total.as_neurobench()
    for key in ("synaptic_operations", "membrane_updates", "neuron_operations"):
        expected = theirs[{v: k for k, v in NEUROBENCH_KEYS.items()}[key]]
        assert got[key] == pytest.approx(expected, rel=1e-12), key
    assert got["activation_sparsity"] == pytest.approx(theirs["ActivationSparsity"], rel=1e-12)
    assert got["activation_sparsity_by_layer"] == pytest.approx(
        theirs["ActivationSparsityByLayer"], rel=1e-12
    )
    other = nirbridge.run(
        nirbridge.nir_to_torch(small_graph(), dt=1e-3), spikes((5, 2, 5), 0), record="metrics"
    )
    with pytest.raises(MetricsError, match="different graphs"):
        total + other.metrics()


def test_counts_are_exact_whatever_the_module_s_dtype():
    """The binary copies count in float64: a bfloat16 module (8 bits of mantissa) with
    a fan-in of 300 counts what an integer product of the masks counts."""
    rng = np.random.default_rng(0)
    weight = rng.normal(0, 1, (20, 300)) * (rng.random((20, 300)) > 0.1)
    graph = nir.NIRGraph.from_list(
        nir.Linear(weight),
        nir.LIF(
            tau=np.full(20, 5e-3),
            r=np.full(20, 5.0),
            v_leak=np.zeros(20),
            v_threshold=np.ones(20),
            v_reset=np.zeros(20),
        ),
    )
    x = torch.rand(10, 2, 300, generator=torch.Generator().manual_seed(1)) < 0.9
    expected = int((x.numpy().astype(np.int64) @ (weight != 0).astype(np.int64).T).sum()) / 2
    for dtype in (torch.float32, torch.bfloat16):
        module = nirbridge.nir_to_torch(graph, dt=1e-3, dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
            metrics = nirbridge.run(module, x, record="metrics").metrics()
        assert metrics.synaptic_operations["Effective_ACs"] == expected, dtype


def test_a_run_that_went_on_from_a_state_or_had_no_sample_is_refused():
    module = nirbridge.nir_to_torch(small_graph(), dt=1e-3)
    first = nirbridge.run(module, spikes((10, 2, 5), 0), record="metrics")
    with pytest.raises(MetricsError, match=r"went on from state=\.\.\..*a \+ b"):
        nirbridge.run(module, spikes((10, 2, 5), 1), state=first.state, record="metrics").metrics()
    with pytest.raises(MetricsError, match=r"batch size 0"):
        nirbridge.run(module, torch.zeros(10, 0, 5), record="metrics").metrics()


def recurrent_forms(n: int = 11) -> tuple[dict[str, nir.NIRGraph], np.ndarray]:
    """One recurrent network, ``lif ⇄ w_rec``, with its recurrent weight at the top level,
    nested in a subgraph, and followed by a Scale of ones before the delayed edge."""
    rng = np.random.default_rng(0)
    w_in, w_rec = rng.normal(size=(n, 4)) * 2, rng.normal(size=(n, n)) * 0.5
    w_rec[rng.random((n, n)) < 0.3] = 0

    def lif():
        return nir.LIF(np.full(n, 2e-3), np.full(n, 10.0), np.zeros(n), np.ones(n), np.zeros(n))

    def outer(rec: nir.NIRNode, extra: dict | None = None, edges: list | None = None) -> nir.NIRGraph:
        nodes = {"input": nir.Input(np.array([4])), "fc": nir.Linear(w_in), "lif": lif(), "w_rec": rec}
        nodes.update({**(extra or {}), "output": nir.Output(np.array([n]))})
        links = [("input", "fc"), ("fc", "lif"), ("lif", "w_rec"), ("lif", "output")]
        return nir.NIRGraph(nodes=nodes, edges=links + (edges or [("w_rec", "lif")]), type_check=False)

    sub = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([n])),
            "w_rec": nir.Linear(w_rec),
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "w_rec"), ("w_rec", "output")],
        type_check=False,
    )
    return {
        "top": outer(nir.Linear(w_rec)),
        "nested": outer(sub),
        "chain": outer(nir.Linear(w_rec), {"s": nir.Scale(np.ones(n))}, [("w_rec", "s"), ("s", "lif")]),
    }, w_rec


def test_a_recurrent_weight_counts_the_products_that_are_used_wherever_it_sits():
    """The product of the last step is never used: not at the top level, not nested in a
    subgraph, not before a stateless node ahead of the delayed edge. Counted against
    numpy: the spikes of steps 0..T-2 times the non-zero weights they reach."""
    graphs, w_rec = recurrent_forms()
    x = (torch.rand(20, 3, 4, generator=torch.Generator().manual_seed(0)) < 0.5).double()
    counts, outputs = {}, {}
    for name, graph in graphs.items():
        result = nirbridge.run(
            nirbridge.nir_to_torch(graph, dt=1e-3, dtype=torch.float64), x, record="metrics"
        )
        rows = {row.name: row for row in result.metrics().layers}
        counts[name] = rows["w_rec" if name != "nested" else "w_rec.w_rec"].effective_acs
        outputs[name] = result.output
    spikes = outputs["top"].detach().numpy()[:-1] != 0  # [T-1, B, n]
    expected = float((spikes.astype(np.float64) @ (w_rec != 0).T.astype(np.float64)).sum()) / x.shape[1]
    assert 0 < expected and torch.equal(outputs["top"], outputs["nested"])
    assert counts == {"top": expected, "nested": expected, "chain": expected}


def test_metrics_of_runs_of_different_lengths_add_up_over_values():
    """``a + b`` of a T = 5 and a T = 100 run: the overall sparsity and the node's own are
    both zeros over values of the two runs together (equal T weights both as NeuroBench's
    batch mean does, checked in the DataLoader test above)."""
    rng = np.random.default_rng(0)
    graph = nir.NIRGraph.from_list(
        nir.Linear(rng.normal(size=(8, 5)) * 3),
        nir.LIF(np.full(8, 5e-3), np.full(8, 5.0), np.zeros(8), np.ones(8), np.zeros(8)),
    )
    gm = nirbridge.nir_to_torch(graph, dt=1e-3, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    runs = [
        nirbridge.run(gm, (torch.rand(steps, 2, 5, generator=generator) < 0.5).double(), record="metrics")
        for steps in (5, 100)
    ]
    total = runs[0].metrics() + runs[1].metrics()
    zeros = sum(int((r.output == 0).sum()) for r in runs)
    values = sum(r.output.numel() for r in runs)
    (node,) = total.activation_sparsity_by_layer.values()
    assert 0 < zeros < values
    assert total.activation_sparsity == pytest.approx(zeros / values, abs=1e-12)
    assert node == pytest.approx(zeros / values, abs=1e-12)


def test_metrics_of_modules_with_other_weights_do_not_add_up():
    """Same node names, other weights (a zero more): refused, not the first run's
    connection sparsity kept."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 5))
    thinner = w.copy()
    thinner[0, 0] = 0.0
    lif = nir.LIF(np.full(8, 5e-3), np.full(8, 5.0), np.zeros(8), np.ones(8), np.zeros(8))
    x = (torch.rand(10, 2, 5, generator=torch.Generator().manual_seed(0)) < 0.5).double()
    metrics = [
        nirbridge.run(
            nirbridge.nir_to_torch(
                nir.NIRGraph.from_list(nir.Linear(weights), lif), dt=1e-3, dtype=torch.float64
            ),
            x,
            record="metrics",
        ).metrics()
        for weights in (w, thinner)
    ]
    with pytest.raises(MetricsError, match="modules with other weights .connection_sparsity"):
        metrics[0] + metrics[1]

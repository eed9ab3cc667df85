"""The parameter check before a build (nirbridge.validate), and a bounded fuzz of hostile
graphs and files through read, nir_to_torch and run: every outcome is a result, a
NirBridgeError subclass naming what is wrong, or a NirBridgeWarning; nothing raw."""

from __future__ import annotations

import copy
import os
import warnings

import h5py
import nir
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nirbridge
from nirbridge import limits, validate


def lif(n: int = 2, **changes) -> nir.LIF:
    node = nir.LIF(
        tau=np.full(n, 1e-3), r=np.ones(n), v_leak=np.zeros(n), v_threshold=np.ones(n), v_reset=np.zeros(n)
    )
    for field, value in changes.items():
        setattr(node, field, value)  # as a file can hold it: nir's constructor is not asked
    return node


def cuba(n: int = 2, **changes) -> nir.CubaLIF:
    ones, zeros = np.ones(n), np.zeros(n)
    node = nir.CubaLIF(
        tau_syn=np.full(n, 2e-3),
        tau_mem=np.full(n, 1e-3),
        r=ones,
        v_leak=zeros,
        v_threshold=ones,
        v_reset=zeros,
        w_in=ones,
    )
    for field, value in changes.items():
        setattr(node, field, value)
    return node


def dense(neuron: nir.NIRNode | None = None, weight: np.ndarray | None = None) -> nir.NIRGraph:
    """input (3) -> fc (Linear 3 -> 2) -> neuron (2) -> output."""
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Linear(weight=np.full((2, 3), 0.5) if weight is None else weight),
            "neuron": lif() if neuron is None else neuron,
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "fc"), ("fc", "neuron"), ("neuron", "output")],
        type_check=False,
    )


def conv_net(conv: dict | None = None, pool: dict | None = None, size: int = 6) -> nir.NIRGraph:
    """input (1, size, size) -> conv (2 channels, 3x3) -> pool (2x2) -> output."""
    conv_args = dict(
        input_shape=None,
        weight=np.ones((2, 1, 3, 3)),
        stride=1,
        padding=1,
        dilation=1,
        groups=1,
        bias=np.zeros(2),
    )
    node = nir.Conv2d(**conv_args)
    for field, value in (conv or {}).items():
        setattr(node, field, value)
    pooling = nir.SumPool2d(kernel_size=np.array([2, 2]), stride=np.array([2, 2]), padding=np.array([0, 0]))
    for field, value in (pool or {}).items():
        setattr(pooling, field, value)
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([1, size, size])),
            "conv": node,
            "pool": pooling,
            "output": nir.Output(np.array([2, size // 2, size // 2])),
        },
        edges=[("input", "conv"), ("conv", "pool"), ("pool", "output")],
        type_check=False,
    )


def build(graph, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        return nirbridge.nir_to_torch(graph, dt=1e-4, **kwargs)


# ----------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("tau", np.array([1e-3, 0.0]), r"tau is 0 at neuron 1"),
        ("tau", np.array([1e-3, np.nan]), r"tau is NaN at neuron 1"),
        ("tau", np.array([np.inf, 1e-3]), r"tau is infinite at neuron 0"),
        ("v_threshold", np.array([np.nan, 1.0]), r"v_threshold is NaN at neuron 0"),
        ("v_reset", np.array([1.0, -np.inf]), r"v_reset is infinite at neuron 1"),
        ("r", np.array([np.inf, np.inf]), r"r is infinite at neurons 0, 1"),
        ("v_leak", np.array(["a", "b"]), r"v_leak must be numbers"),
        ("tau", b"\xff", r"tau must be numbers, got text"),
    ],
)
def test_meaningless_neuron_parameters_name_node_field_and_neurons(field, value, says):
    with pytest.raises(nirbridge.ParameterError, match=r"node 'neuron' \(LIF\): " + says):
        build(dense(lif(**{field: value})))


def test_time_constants_of_cuba_neurons_and_weights_are_checked_too():
    with pytest.raises(nirbridge.ParameterError, match=r"'neuron' \(CubaLIF\): tau_syn is 0 at neuron 0"):
        build(dense(cuba(tau_syn=np.array([0.0, 1e-3]))))
    with pytest.raises(nirbridge.ParameterError, match=r"'neuron' \(CubaLIF\): w_in is NaN"):
        build(dense(cuba(w_in=np.array([1.0, np.nan]))))
    weight = np.full((2, 3), 0.5)
    weight[1, 2] = np.nan
    with pytest.raises(nirbridge.ParameterError, match=r"'fc' \(Linear\): weight is NaN at index \(1, 2\)"):
        build(dense(weight=weight))
    with pytest.raises(nirbridge.ParameterError, match=r"'fc' \(Linear\): weight has shape \(0, 0\)"):
        build(dense(weight=np.zeros((0, 0))))


def test_negative_time_constants_are_refused_unless_asked_for():
    graph = dense(lif(tau=np.array([1e-3, -5.0])))
    with pytest.raises(
        nirbridge.ParameterError, match=r"tau is negative at neuron 1.*allow_negative_tau=True"
    ):
        build(graph)
    gm = build(graph, allow_negative_tau=True, dtype=torch.float64)
    # the membrane grows away from its leak: v <- v + dt/tau (v_leak - v + r x), numpy reference
    x = np.array([[1.0, 1.0, 1.0]])
    v = np.zeros(2)
    state = None
    for _ in range(3):
        v = v + 1e-4 / np.array([1e-3, -5.0]) * (0.0 - v + 1.0 * (x @ np.full((3, 2), 0.5))[0])
        _, state = gm(torch.as_tensor(x), state)
    np.testing.assert_allclose(state["nodes"]["neuron"].v.detach().numpy()[0], v, rtol=1e-12)


def test_a_real_file_with_negative_time_constants_names_them(tmp_path):
    from tests.conftest import EXAMPLES

    path = EXAMPLES / "spyx_at_00e6ba49__research__paper__spyx_shd.nir"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        with pytest.raises(nirbridge.ParameterError, match=r"node 'LIF' \(LIF\): tau is negative at neurons"):
            nirbridge.nir_to_torch(path, dt=1e-4)
        assert nirbridge.nir_to_torch(path, dt=1e-4, allow_negative_tau=True) is not None


def test_complex_parameters_lose_their_imaginary_part_with_a_lossy_warning():
    graph = dense(lif(tau=np.array([1e-3 + 0j, 1e-3 + 2e-4j])), weight=np.full((2, 3), 0.5 + 0.1j))
    with pytest.warns(nirbridge.LossyConversionWarning, match=r"is complex") as caught:
        gm = build(graph, dtype=torch.float64)
    messages = [str(w.message) for w in caught]
    assert any("'fc' (Linear): weight is complex" in m and "up to 0.1" in m for m in messages), messages
    assert any("'neuron' (LIF): tau is complex" in m for m in messages), messages
    assert not any(issubclass(w.category, np.exceptions.ComplexWarning) for w in caught)
    np.testing.assert_array_equal(gm.fc.weight.detach().numpy(), np.full((2, 3), 0.5))
    assert graph.nodes["fc"].weight.dtype.kind == "c"  # the caller's graph is left as it was


def test_delays_must_be_finite_non_negative_and_countable_in_steps():
    def delay_graph(delay, dt_meta=None):
        graph = nir.NIRGraph(
            nodes={
                "input": nir.Input(np.array([3])),
                "d": nir.Delay(delay),
                "output": nir.Output(np.array([3])),
            },
            edges=[("input", "d"), ("d", "output")],
            type_check=False,
        )
        return graph

    with pytest.raises(nirbridge.ParameterError, match=r"'d' \(Delay\): delay is negative at neuron 2"):
        build(delay_graph(np.array([0.0, 1e-4, -1e-4])))
    with pytest.raises(nirbridge.ParameterError, match=r"'d' \(Delay\): a delay of 1e\+30 s is"):
        build(delay_graph(np.array([0.0, 1e30, 0.0])))
    with pytest.raises(nirbridge.ParameterError, match=r"'d' \(Delay\): delay is missing"):
        graph = delay_graph(np.zeros(3))
        graph.nodes["d"].delay = None
        build(graph)
    with pytest.warns(
        nirbridge.LossyConversionWarning, match=r"not a whole number of time steps at neuron 1 "
    ):
        build(delay_graph(np.array([2e-4, 1.5e-4, 0.0])))  # 1.5 steps of 1e-4 s
    graph = delay_graph(np.array([1e-3, 1e-3, 1e-3]))
    with pytest.raises(nirbridge.ParameterError, match=r"'d' \(Delay\): .* steps of dt = 1e-300 s"):
        nirbridge.nir_to_torch(graph, dt=1e-300)
    with pytest.raises(nirbridge.ParameterError, match=r"delay has 32 axes"):
        build(delay_graph(np.zeros((1,) * 31 + (3,))))


def test_parameters_may_not_grow_the_input_they_broadcast_to():
    node = cuba(6)
    node.tau_mem = np.full((6, 6), 1e-3)  # after construction, as files can hold it
    graph = dense(node)
    graph.nodes["fc"] = nir.Linear(weight=np.ones((6, 3)))
    graph.nodes["output"] = nir.Output(np.array([6]))
    with pytest.raises(
        nirbridge.ShapeMismatchError, match=r"'neuron' \(CubaLIF\): tau_mem has shape \(6, 6\)"
    ):
        build(graph)


def test_check_parameters_returns_the_graph_itself_when_nothing_changes():
    graph = dense()
    assert validate.check_parameters(graph, 1e-4) is graph


# ----------------------------------------------------------------------------- memory


def test_a_single_sample_that_cannot_fit_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(limits, "available", lambda device=None: 1 << 30)  # a machine with 1 GiB free
    graph = conv_net({"padding": 20_000})  # 2 x 40k x 40k float32 feature maps: 12 GiB
    with pytest.raises(
        nirbridge.MemoryLimitError, match=r"node 'conv' \(Conv2d\).* needs 1\d\.\d GiB"
    ) as info:
        build(graph)
    assert info.value.free == 1 << 30 and info.value.requested > 10 << 30
    assert isinstance(info.value, MemoryError)
    delay = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "d": nir.Delay(np.full(3, 1e5)),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "d"), ("d", "output")],
    )  # 1e9 steps of 3 values
    with pytest.raises(nirbridge.MemoryLimitError, match=r"'d' \(Delay\): its history of 1000000000 steps"):
        build(delay)


def test_the_memory_check_lets_ordinary_graphs_through():
    gm = build(conv_net())
    out, _ = gm(torch.ones(2, 1, 6, 6))
    assert out.shape == (2, 2, 3, 3)


# ----------------------------------------------------------------------------- fuzz

HOSTILE_VALUES = [
    np.nan,
    np.inf,
    -1,
    0,
    1e300,
    -1e300,
    2**40,
    "text",
    b"\xff\xfe",
    np.zeros((6, 6)),
    np.zeros(0),
    np.full(2, 1 + 1j),
    np.array([True, False]),
    np.zeros((1,) * 20),
    np.array([[1, 2], [3, 4]]),
    None,
]


def _bases() -> dict[str, nir.NIRGraph]:
    nested = dense()
    return {
        "dense": dense(),
        "cuba": dense(cuba()),
        "conv": conv_net(),
        "avg": nir.NIRGraph(
            nodes={
                **conv_net().nodes,
                "pool": nir.AvgPool2d(
                    kernel_size=np.array([2, 2]), stride=np.array([2, 2]), padding=np.array([0, 0])
                ),
            },
            edges=conv_net().edges,
            type_check=False,
        ),
        "nested": nir.NIRGraph(
            nodes={"input": nir.Input(np.array([3])), "block": nested, "output": nir.Output(np.array([2]))},
            edges=[("input", "block"), ("block", "output")],
            type_check=False,
        ),
    }


BASES = _bases()


def _fields(node: nir.NIRNode) -> list[str]:
    if isinstance(node, nir.Input):
        return ["input_type"]
    if isinstance(node, nir.Output):
        return ["output_type"]
    return [f for f in vars(node) if f not in ("input_type", "output_type", "metadata")]


@st.composite
def mutated_graphs(draw) -> nir.NIRGraph:
    graph = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        level = graph
        while True:
            name = draw(st.sampled_from(sorted(level.nodes)))
            if isinstance(level.nodes[name], nir.NIRGraph):
                level = level.nodes[name]
                continue
            break
        node = level.nodes[name]
        field = draw(st.sampled_from(_fields(node)))
        value = draw(st.sampled_from(HOSTILE_VALUES))
        if field in ("input_type", "output_type"):
            value = {field.split("_")[0]: value if value is not None else np.array([np.nan])}
        setattr(node, field, value)
    if draw(st.booleans()):
        graph.edges = [*graph.edges, graph.edges[0]]  # a duplicate edge
    return graph


def _exercise(graph: nir.NIRGraph, path) -> None:
    """write, read, build and run two steps, as a user would; only nirbridge's errors and
    warnings may come out."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            try:
                nirbridge.write(path, graph)
                source = nirbridge.read(path)
            except nirbridge.NirFileError:
                source = graph  # what cannot be stored is still built directly
            gm = nirbridge.nir_to_torch(source, dt=1e-4)
            shape = tuple(int(n) for n in gm.meta["nirbridge"]["io"]["input"].input_type["input"])
            nirbridge.run(gm, torch.ones(2, 1, *shape))
        except nirbridge.NirBridgeError as error:
            assert str(error).strip(), "an error with no message"
    foreign = [
        w for w in caught if not issubclass(w.category, (nirbridge.NirBridgeWarning, DeprecationWarning))
    ]
    assert not foreign, [f"{w.category.__name__}: {w.message}" for w in foreign]


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(graph=mutated_graphs())
def test_mutated_graphs_only_ever_raise_nirbridge_errors(tmp_path, graph):
    _exercise(graph, tmp_path / "mutated.nir")


STORABLE = [  # what another tool could leave in a dataset
    np.array([np.nan]),
    np.array([np.inf, 1.0]),
    np.array([-3]),
    np.array([0]),
    np.array(1e300),
    np.array(2**62, dtype=np.int64),
    np.bytes_(b"\xff\xfe"),
    np.bytes_(b"same"),
    np.zeros((6, 6)),
    np.zeros(0),
    np.full(2, 1 + 1j),
    np.zeros((1,) * 20),
    np.array([[b"a", b"b"]]),
]


def _datasets(path) -> list[str]:
    found: list[str] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
    return sorted(n for n in found if n.startswith("node/") and not n.endswith("/type"))


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_files_mutated_with_h5py_only_ever_raise_nirbridge_errors(tmp_path, data):
    base = data.draw(st.sampled_from(sorted(BASES)))
    path = tmp_path / f"{base}.nir"
    if not path.exists():
        nirbridge.write(path, BASES[base])
    mutated = tmp_path / "mutated.nir"
    with open(path, "rb") as source, open(mutated, "wb") as target:
        target.write(source.read())
    names = _datasets(mutated)
    with h5py.File(mutated, "r+") as f:
        for _ in range(data.draw(st.integers(1, 2))):
            name = data.draw(st.sampled_from(names))
            if name in f:
                del f[name]
            f[name] = data.draw(st.sampled_from(STORABLE))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            graph = nirbridge.read(mutated)
            gm = nirbridge.nir_to_torch(graph, dt=1e-4)
            shape = tuple(int(n) for n in gm.meta["nirbridge"]["io"]["input"].input_type["input"])
            nirbridge.run(gm, torch.ones(2, 1, *shape))
        except nirbridge.NirBridgeError as error:
            assert str(error).strip()
    foreign = [
        w for w in caught if not issubclass(w.category, (nirbridge.NirBridgeWarning, DeprecationWarning))
    ]
    assert not foreign, [f"{w.category.__name__}: {w.message}" for w in foreign]
    os.unlink(mutated)


def test_values_beyond_the_dtype_are_refused_and_fine_in_float64():
    graph = dense(weight=np.full((2, 3), 1e39))  # finite in float64, infinite in float32
    with pytest.raises(
        nirbridge.ParameterError, match=r"'fc' \(Linear\): weight is 1e\+39 .* dtype=torch.float64"
    ):
        build(graph)
    assert build(graph, dtype=torch.float64).fc.weight.dtype == torch.float64


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"trainable": 1}, r"trainable=1: give True, False or NIR field names"),
        ({"trainable": ["tau", 1]}, r"trainable=\['tau', 1\]"),
        ({"allow_negative_tau": "no"}, r"allow_negative_tau='no'\): give True or False"),
        ({"dt": 10**400}, r"dt must be a positive, finite number"),
        ({"dt": True}, r"dt must be a positive, finite number"),
        ({"dt": "0.001"}, r"dt must be a positive, finite number"),
    ],
)
def test_odd_arguments_are_parameter_errors(kwargs, says):
    options = {"dt": 1e-4, **kwargs}
    with pytest.raises(nirbridge.ParameterError, match=says):
        nirbridge.nir_to_torch(dense(), **options)


# ----------------------------------------------------------------------------- health


def test_suspicious_parameters_warn_naming_node_field_and_neurons():
    cases = [
        (
            lif(v_threshold=np.array([1.0, -0.5])),
            r"'neuron' \(LIF\): v_threshold is at or below v_reset at neuron 1",
        ),
        (
            cuba(v_reset=np.array([0.0, 2.0])),
            r"'neuron' \(CubaLIF\): v_threshold is at or below v_reset at neuron 1",
        ),
        (
            lif(v_reset=None, v_threshold=np.zeros(2)),
            r"at or below v_reset at neurons 0, 1.*v_reset defaults to 0",
        ),
        (lif(r=np.zeros(2)), r"'neuron' \(LIF\): r is 0 for every neuron, so the neurons ignore their input"),
        (cuba(w_in=np.zeros(2)), r"'neuron' \(CubaLIF\): w_in is 0 for every neuron"),
    ]
    for neuron, message in cases:
        with pytest.warns(nirbridge.ParameterWarning, match=message):
            build(dense(neuron))
    with pytest.warns(nirbridge.ParameterWarning, match=r"'fc' \(Linear\): weight is 0 everywhere"):
        build(dense(weight=np.zeros((2, 3))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(dense(lif(r=np.array([0.0, 1.0]))))  # one neuron without input is a choice, not a slip


def test_every_meaningless_value_is_named_in_one_error():
    graph = dense(
        lif(tau=np.array([np.nan, 1e-3]), v_threshold=np.array([1.0, np.inf])), weight=np.full((2, 3), np.nan)
    )
    with pytest.raises(nirbridge.ParameterError) as info:
        build(graph)
    message = str(info.value)
    assert message.startswith("node 'fc' (Linear): weight is NaN at indices (0, 0), (0, 1)")
    assert "Also: node 'neuron' (LIF): tau is NaN at neuron 0" in message
    assert "node 'neuron' (LIF): v_threshold is infinite at neuron 1" in message


def test_review_lists_what_a_build_refuses_or_warns_about_without_raising():
    graph = dense(
        lif(tau=np.array([-2e-3, 1e-3]), v_threshold=np.array([1.0, -1.0])), weight=np.full((2, 3), np.nan)
    )
    found = validate.review(graph, 1e-4)
    assert found[0].startswith("node 'fc' (Linear): weight is NaN")
    assert found[1].startswith("time constants below 0: node 'neuron' (LIF): tau is negative at neuron 0")
    assert "allow_negative_tau=True" in found[1]
    assert found[2].startswith("node 'neuron' (LIF): v_threshold is at or below v_reset at neuron 1")
    assert len(found) == 3
    assert validate.review(dense(), 1e-4) == []


def test_negative_time_constants_of_several_nodes_are_one_message():
    from tests.conftest import EXAMPLES

    path = EXAMPLES / "spyx_at_00e6ba49__research__paper__spyx_shd.nir"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        with pytest.raises(nirbridge.ParameterError) as info:
            nirbridge.nir_to_torch(path, dt=1e-4)
    message = str(info.value)
    assert message.startswith(
        "time constants are below 0 in 2 places: node 'LIF' (LIF): tau is negative at neurons"
    )
    assert "(8 of 64), down to -3212 s; node 'LIF_1' (LIF)" in message
    assert (
        "pass nir_to_torch(..., allow_negative_tau=True), --allow-negative-tau on the command line" in message
    )


def test_every_export_and_write_warn_of_values_an_import_refuses(tmp_path):
    """norse's, snntorch's and spikingjelly's to_nir exported NaN thresholds silently,
    where torch_to_nir warned; write() stored a NaN dt without a word."""
    import snntorch
    from spikingjelly.activation_based import neuron as sj_neuron

    from nirbridge.adapters import norse as norse_adapter
    from nirbridge.adapters import snntorch as snntorch_adapter
    from nirbridge.adapters import spikingjelly as sj_adapter

    x = torch.zeros(1, 3)
    snn = torch.nn.Sequential(
        torch.nn.Linear(3, 3), snntorch.Leaky(beta=0.9, threshold=float("nan"), reset_mechanism="zero")
    )
    with pytest.warns(
        nirbridge.ParameterWarning, match=r"snntorch to_nir: the model holds values .*v_threshold is NaN"
    ):
        snntorch_adapter.to_nir(snn, x)
    sj = torch.nn.Sequential(torch.nn.Linear(3, 3), sj_neuron.LIFNode(tau=2.0, v_threshold=float("nan")))
    with pytest.warns(
        nirbridge.ParameterWarning, match=r"spikingjelly to_nir: the model holds values .*v_threshold is NaN"
    ):
        sj_adapter.to_nir(sj, x)
    import norse.torch as norse_torch

    cell = norse_torch.LIFBoxCell(norse_torch.LIFBoxParameters(v_th=torch.tensor(float("nan"))))
    with pytest.warns(
        nirbridge.ParameterWarning, match=r"norse to_nir: the model holds values .*v_threshold is NaN"
    ):
        norse_adapter.to_nir(torch.nn.Sequential(torch.nn.Linear(3, 3), cell), x)
    graph = nir.NIRGraph.from_list(nir.Input(np.array([3])), nir.Linear(np.eye(3)), nir.Output(np.array([3])))
    graph.metadata["dt"] = float("nan")
    with pytest.warns(
        nirbridge.ParameterWarning, match=r"metadata dt = nan is not a positive, finite time step"
    ):
        nirbridge.write(tmp_path / "nan-dt.nir", graph)


@pytest.mark.parametrize(
    ("field", "value", "dtype"),
    [("tau", 1e-8, torch.float16), ("r", 1e-46, torch.float32), ("v_threshold", 1e-46, torch.float32)],
)
def test_values_the_dtype_flushes_to_zero_are_refused_at_build(field, value, dtype):
    """Values above the dtype's range were refused, values below it passed and gave NaN
    membranes (tau -> 0) or dead neurons (r -> 0)."""
    fields = dict(tau=np.full(2, 1e-3), r=np.ones(2), v_leak=np.zeros(2), v_threshold=np.ones(2))
    fields[field] = np.array([value, 1.0])
    graph = nir.NIRGraph.from_list(nir.Input(np.array([2])), nir.LIF(**fields), nir.Output(np.array([2])))
    with pytest.raises(
        nirbridge.ParameterError, match=rf"{field} is {value:.4g} at neuron 0, below the smallest"
    ):
        nirbridge.nir_to_torch(graph, dt=1e-4, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        nirbridge.nir_to_torch(graph, dt=1e-4, dtype=torch.float64)  # float64 holds it

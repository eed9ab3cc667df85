"""Call-time checks of imported modules, written as users make the mistakes: every case
gets a NirBridgeError naming the input or state key and the fix, never a torch error from
deep inside or a silently different answer."""

from __future__ import annotations

import warnings

import nir
import numpy as np
import pytest
import torch

import nirbridge
from nirbridge.adapters import norse as norse_adapter
from nirbridge.adapters import snntorch as snntorch_adapter
from tests.conftest import EXAMPLES

BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"


@pytest.fixture(scope="module")
def gm():
    return nirbridge.nir_to_torch(BRAILLE, dt=1e-4)


def two_inputs() -> nir.NIRGraph:
    lif = nir.LIF(np.full(3, 1e-3), np.ones(3), np.zeros(3), np.ones(3), np.zeros(3))
    return nir.NIRGraph(
        nodes={
            "a": nir.Input(np.array([2])),
            "b": nir.Input(np.array([3])),
            "fc": nir.Linear(np.ones((3, 2))),
            "lif": lif,
            "out": nir.Output(np.array([3])),
        },
        edges=[("a", "fc"), ("fc", "lif"), ("b", "lif"), ("lif", "out")],
        metadata={"dt": 1e-4},
        type_check=False,
    )


def test_a_feature_shape_that_does_not_fit_names_the_input(gm):
    with pytest.raises(
        nirbridge.InputError,
        match=r"input 'input' has shape \[4, 13\], but Input node 'input' takes a batch \[B, 12\] or one "
        r"sample \[12\]",
    ):
        gm(torch.zeros(4, 13))  # today: mat1 and mat2 shapes cannot be multiplied
    with pytest.raises(nirbridge.InputError, match=r"has shape \[13\]"):
        gm(torch.zeros(13))
    with pytest.raises(ValueError, match="input 'b' has shape"):  # a ValueError, as nirtorch's
        nirbridge.nir_to_torch(two_inputs())(torch.zeros(1, 2), torch.zeros(1, 4))
    with pytest.raises(nirbridge.InputError, match="is a list; pass a tensor"):
        gm([[0.0] * 12])


def test_a_time_first_sequence_given_to_one_step_says_to_loop_or_run(gm):
    x = torch.zeros(50, 4, 12)  # today: silently one step over a batch of 200
    with pytest.raises(nirbridge.InputError) as info:
        gm(x)
    message = str(info.value)
    assert "It looks like a sequence [T, B, 12]" in message
    assert "for x_t in x: out, state = gm(x_t, state)" in message and "nirbridge.run(gm, x)" in message


def test_spikes_of_any_integer_or_bool_dtype_and_narrower_floats_are_cast_and_wider_floats_refused(gm):
    rng = np.random.default_rng(0)
    spikes = torch.from_numpy(rng.random((30, 3, 12)) < 0.3)
    expected, state = [], None
    for x in spikes:
        out, state = gm(x.float(), state)
        expected.append(out)
    for dtype in (torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16):
        state = None
        for t, x in enumerate(spikes):
            out, state = gm(x.to(dtype), state)
            assert out.dtype == torch.float32 and torch.equal(out, expected[t]), (dtype, t)
    with pytest.raises(nirbridge.InputError) as info:
        gm(spikes[0].double())
    message = str(info.value)
    assert "input 'input' is torch.float64, but node 'fc1' computes in torch.float32" in message
    assert "casting would round the input and change the results" in message
    assert "x.to(torch.float32)" in message and "dtype=torch.float64" in message
    half = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, dtype=torch.float16)
    with pytest.raises(
        nirbridge.InputError, match="torch.bfloat16, but node 'fc1' computes in torch.float16"
    ):
        half(spikes[0].bfloat16())  # neither holds the other's values
    double = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, dtype=torch.float64)
    assert double(spikes[0])[0].dtype == torch.float64  # bool cast to the module's dtype
    assert double(spikes[0].float())[0].dtype == torch.float64  # float32 widened exactly
    assert gm.double()(spikes[0])[0].dtype == torch.float64  # and it follows .to(dtype)
    gm.float()


class LeakyNode(torch.nn.Module):
    """A user's LI module as nirtorch's tests write it: float64 parameters kept as plain
    attributes (``.to(dtype)`` does not move them), so it returns float64."""

    def __init__(self, node: nir.LI) -> None:
        super().__init__()
        self.tau, self.r, self.v_leak = (
            torch.from_numpy(np.asarray(a)) for a in (node.tau, node.r, node.v_leak)
        )

    def forward(self, x, state=None):
        if state is None:
            state = self.v_leak
        new = state + self.tau * (self.r * x - self.v_leak)
        return new, new


def test_a_modules_own_outputs_are_valid_inputs():
    """A user's map module returns float64 from a float32 graph; fed back as the next
    input it reaches only that module, so it is passed on as it is, as nirtorch does."""
    tau, r, v_leak = np.array([0.3]), np.array([0.7]), np.array([0.2])
    graph = nir.NIRGraph.from_list(nir.LI(tau, r, v_leak))
    module = nirbridge.nir_to_torch(graph, {nir.LI: LeakyNode})
    data = torch.tensor([0.5])
    out, state = module(data)
    assert out.dtype == torch.float64 and out.shape == (1,)
    v1 = v_leak + tau * (r * 0.5 - v_leak)  # the user's equation in numpy
    np.testing.assert_allclose(out.numpy(), v1, rtol=1e-15)
    again, state = module(out, state)  # today: "input is torch.float64 but the module computes in float32"
    v2 = v1 + tau * (r * v1 - v_leak)
    np.testing.assert_allclose(again.numpy(), v2, rtol=1e-15)
    assert state["nodes"]["li"].shape == (1, 1)  # the batch axis of one sample stays in the state


def test_a_wider_float_is_refused_where_a_node_of_nirbridges_takes_it():
    """The same float64 input is passed on to the user's module but would be rounded for
    nirbridge's Linear beside it: refused, naming only the node that would round it."""
    graph = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([1])),
            "li": nir.LI(np.array([0.3]), np.array([0.7]), np.array([0.2])),
            "fc": nir.Linear(np.ones((1, 1))),
            "out": nir.Output(np.array([1])),
        },
        edges=[("in", "li"), ("in", "fc"), ("li", "out"), ("fc", "out")],
        type_check=False,
    )
    module = nirbridge.nir_to_torch(graph, {nir.LI: LeakyNode})
    with pytest.raises(nirbridge.InputError, match=r"but node 'fc' computes in torch.float32"):
        module(torch.tensor([0.5], dtype=torch.float64))
    out, _ = module(torch.tensor([0.5]))
    assert torch.allclose(out, torch.tensor([0.2 + 0.3 * (0.7 * 0.5 - 0.2) + 0.5], dtype=torch.float64))


def test_a_user_modules_wider_output_is_refused_where_nirbridges_node_takes_it():
    """A float64 input passes on to the user's Linear, but what it returns reaches
    nirbridge's LIF: refused at once, naming both (it used to give the LIF a float64
    state, then a StateError at the next step about that very state)."""
    graph = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([2])),
            "fc": nir.Linear(np.ones((2, 2))),
            "lif": nir.LIF(np.full(2, 1e-3), np.ones(2), np.zeros(2), np.ones(2), np.zeros(2)),
            "out": nir.Output(np.array([2])),
        },
        edges=[("in", "fc"), ("fc", "lif"), ("lif", "out")],
        metadata={"dt": 1e-4},
        type_check=False,
    )

    class Linear64(torch.nn.Module):
        """A weight kept as a plain attribute, so .to(dtype) leaves it float64."""

        def __init__(self, node):
            super().__init__()
            self.weight = torch.from_numpy(node.weight)

        def forward(self, x):
            return x @ self.weight.T

    module = nirbridge.nir_to_torch(graph, {nir.Linear: Linear64})
    with pytest.raises(nirbridge.ShapeMismatchError) as info:
        module(torch.ones(2, dtype=torch.float64))
    message = str(info.value)
    assert "node 'fc': its module (from node_map) returned torch.float64" in message
    assert "but node 'lif' computes in torch.float32" in message and "would round" in message


def test_one_sample_without_a_batch_axis_is_a_batch_of_one(gm):
    """As torch layers take unbatched inputs: the output comes back without the batch
    axis, the state keeps a batch axis of 1, so it can be passed back, or broadcast."""
    rng = np.random.default_rng(1)
    spikes = torch.from_numpy(rng.random((20, 12)) < 0.3).float()
    state_b = state_s = None
    for x in spikes:
        batched, state_b = gm(x.unsqueeze(0), state_b)
        single, state_s = gm(x, state_s)
        assert single.shape == (7,) and torch.equal(single, batched[0])
        assert state_s["nodes"]["lif2"].v.shape == (1, 7)
        assert torch.equal(state_s["delayed"]["lif1.w_rec"], state_b["delayed"]["lif1.w_rec"])
    out, _ = gm(spikes[:3], state_s)  # a one-sample state continues a batch (broadcast)
    assert out.shape == (3, 7)
    with pytest.raises(
        nirbridge.StateError, match="the state holds a batch of 3 but the input is one sample"
    ):
        gm(spikes[0], gm(spikes[:3])[1])


def test_the_rank_decides_between_one_sample_and_a_batch():
    """Input [3, 3]: a [3, 3] tensor is one sample, [3, 3, 3] a batch of three; shapes that
    fit neither are refused, and a [T, B, ...] sequence still gets its own message."""
    weight = np.arange(9.0).reshape(3, 3)
    graph = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([3, 3])),
            "s": nir.Scale(np.ones(3) * 2),
            "out": nir.Output(np.array([3, 3])),
        },
        edges=[("in", "s"), ("s", "out")],
        type_check=False,
    )
    module = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    x = torch.from_numpy(weight)
    assert module(x)[0].shape == (3, 3) and torch.equal(module(x)[0], 2 * x)
    batch = torch.stack([x, x + 1, x + 2])
    out, _ = module(batch)
    assert out.shape == (3, 3, 3) and torch.equal(out[2], 2 * (x + 2))
    with pytest.raises(nirbridge.InputError, match="It looks like a sequence"):
        module(batch.unsqueeze(0).expand(5, 3, 3, 3))
    with pytest.raises(nirbridge.InputError, match=r"has shape \[3\], but Input node 'in' takes"):
        module(torch.zeros(3, dtype=torch.float64))


def test_a_scalar_input_names_its_shapes_plainly():
    graph = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([], dtype=int)),
            "s": nir.Scale(np.array(2.0)),
            "out": nir.Output(None),
        },
        edges=[("in", "s"), ("s", "out")],
        type_check=False,
    )
    module = nirbridge.nir_to_torch(graph, dtype=torch.float64)
    assert module(torch.tensor(3.0, dtype=torch.float64))[0].item() == 6.0  # one sample: a number
    assert module(torch.ones(4, dtype=torch.float64))[0].shape == (4,)
    with pytest.raises(nirbridge.InputError) as info:
        module(torch.ones(4, 2, dtype=torch.float64))
    assert "takes a batch [B] or one sample []" in str(info.value)


def test_inputs_that_mix_samples_and_batches_are_refused():
    module = nirbridge.nir_to_torch(two_inputs())
    out, state = module(torch.ones(2), torch.ones(3))  # both single samples
    assert out.shape == (3,) and state["nodes"]["lif"].v.shape == (1, 3)
    with pytest.raises(nirbridge.InputError) as info:
        module(torch.ones(2), torch.ones(1, 3))
    message = str(info.value)
    assert "inputs mix single samples and batches" in message
    assert "'a' [2] is one sample; 'b' [1, 3] is a batch" in message


def test_several_outputs_of_one_sample_drop_the_batch_axis():
    graph = nir.NIRGraph(
        nodes={
            "in": nir.Input(np.array([2])),
            "s": nir.Scale(np.array([2.0, 3.0])),
            "o1": nir.Output(np.array([2])),
            "o2": nir.Output(np.array([2])),
        },
        edges=[("in", "s"), ("s", "o1"), ("in", "o2")],
        type_check=False,
    )
    out, _ = nirbridge.nir_to_torch(graph, dtype=torch.float64)(torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert out["o1"].tolist() == [2.0, 3.0] and out["o2"].tolist() == [1.0, 1.0]


def test_a_batch_size_that_differs_from_the_states(gm):
    _, state = gm(torch.zeros(4, 12))
    with pytest.raises(
        nirbridge.StateError, match="the state holds a batch of 4 but the input is a batch of 3"
    ):
        gm(torch.zeros(3, 12), state)
    _, one = gm(torch.zeros(1, 12))
    out, continued = gm(torch.zeros(3, 12), one)  # a batch-1 state is broadcast, as documented
    assert out.shape == (3, 7) and continued["nodes"]["lif2"].v.shape == (3, 7)
    with pytest.raises(nirbridge.InputError, match="inputs disagree on the batch size: 2 for 'b', 1 before"):
        nirbridge.nir_to_torch(two_inputs())(torch.zeros(1, 2), torch.zeros(2, 3))


def test_states_of_other_graphs_and_misspelled_keys_list_what_is_wrong(gm):
    _, state = gm(torch.zeros(2, 12))
    _, other = nirbridge.nir_to_torch(two_inputs())(torch.zeros(2, 2), torch.zeros(2, 3))
    with pytest.raises(nirbridge.StateError) as info:  # today: silently equal to gm(x)
        gm(torch.zeros(2, 12), other)
    message = str(info.value)
    assert "unexpected node keys ['lif']" in message and "missing node keys ['lif1.lif', 'lif2']" in message
    assert "missing delayed keys ['lif1.w_rec']" in message
    misspelled = {
        "nodes": {"lif1.lif": state["nodes"]["lif1.lif"], "lif_2": state["nodes"]["lif2"]},
        "delayed": state["delayed"],
    }
    with pytest.raises(
        nirbridge.StateError, match=r"unexpected node keys \['lif_2'\]; missing node keys \['lif2'\]"
    ):
        gm(torch.zeros(2, 12), misspelled)
    missing = {"nodes": {"lif1.lif": state["nodes"]["lif1.lif"]}, "delayed": state["delayed"]}
    with pytest.raises(nirbridge.StateError, match=r"missing node keys \['lif2'\]"):
        gm(torch.zeros(2, 12), missing)
    with pytest.raises(nirbridge.StateError, match="with keys 'nodes' and 'delayed'"):
        gm(torch.zeros(2, 12), {"lif2": state["nodes"]["lif2"]})
    out, _ = gm(torch.zeros(2, 12))  # no state still starts afresh
    assert torch.equal(out, gm(torch.zeros(2, 12), None)[0])


def test_a_state_from_another_simulators_import_is_refused(gm):
    _, snntorch_state = snntorch_adapter.from_nir(BRAILLE, dt=1e-4)(torch.zeros(2, 12))
    with pytest.raises(nirbridge.StateError) as info:
        gm(torch.zeros(2, 12), snntorch_state)  # today: AttributeError deep inside the neuron
    assert "'lif1.lif' holds a tuple, this module's a CubaLIState" in str(info.value)
    _, norse_state = norse_adapter.from_nir(BRAILLE, dt=1e-4)(torch.zeros(2, 12))
    with pytest.raises(nirbridge.StateError, match="'lif2' holds a LIFFeedForwardState"):
        gm(torch.zeros(2, 12), norse_state)


def test_nested_graph_states_are_checked_at_their_level():
    path = EXAMPLES / "spyx__docs__examples__nir__rsnn__braille_noDelay_bias_zero_subgraph.nir"
    gm = nirbridge.nir_to_torch(path, dt=1e-4)
    _, state = gm(torch.zeros(2, 12))
    broken = {"nodes": {**state["nodes"], "lif1": {"nodes": {}, "delayed": {}}}, "delayed": state["delayed"]}
    with pytest.raises(nirbridge.StateError, match=r"missing node keys \['lif1'\]"):
        gm(torch.zeros(2, 12), broken)


def test_the_checks_do_not_touch_the_data_or_the_state_passed_in(gm):
    x = torch.rand(2, 12)
    _, state = gm(x)
    before = {k: v.clone() for k, v in state["delayed"].items()}
    gm(x, state)
    assert all(torch.equal(state["delayed"][k], v) for k, v in before.items())


def test_a_nested_graph_under_autocast_and_odd_inputs():
    """A nested graph's input comes checked from its parent (under autocast it is bf16 there)."""
    inner = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([4])),
            "lif": nir.LIF(np.full(4, 1e-3), np.ones(4), np.zeros(4), np.ones(4), np.zeros(4)),
            "output": nir.Output(np.array([4])),
        },
        edges=[("input", "lif"), ("lif", "output")],
        type_check=False,
    )
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(np.ones((4, 3)), np.zeros(4)),
            "block": inner,
            "output": nir.Output(np.array([4])),
        },
        edges=[("input", "fc"), ("fc", "block"), ("block", "output")],
        metadata={"dt": 1e-4},
        type_check=False,
    )
    gm = nirbridge.nir_to_torch(graph)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, state = gm(torch.rand(2, 3))
        gm(torch.rand(2, 3), state)
    assert out.shape == (2, 4)
    with pytest.raises(nirbridge.InputError, match="is a number"):
        gm(torch.tensor(0.7))
    meta = gm.meta["nirbridge"]
    assert meta["inputs"] == ["input"]


def test_the_trainable_parameters_come_in_the_modules_order():
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, trainable=("v_threshold", "r", "tau_mem"))
    names = [n for n, _ in gm.named_parameters() if n.startswith("lif2.")]
    assert names == ["lif2.tau_mem_log", "lif2.r", "lif2.v_threshold"]  # CubaLIF's params order; τ as log τ


def test_an_input_on_another_device_names_both(gm):
    with pytest.raises(
        nirbridge.InputError, match=r"input 'input' is on meta but the module on cpu; pass x.to\('cpu'\)"
    ):
        gm(torch.zeros(2, 12, device="meta"))


def test_a_state_sliced_replaced_or_moved_before_it_is_passed_back(gm):
    x = torch.zeros(4, 12)
    _, state = gm(x)
    key = next(k for k, v in state["nodes"].items() if hasattr(v, "v"))
    width = state["nodes"][key].v.shape[1]
    for change, says in [
        (
            lambda s: s._replace(v=s.v[:, :1]),
            rf"\.v has shape \[4, 1\], but node '{key}' keeps \[B, {width}\]",
        ),
        (lambda s: s._replace(v=None), r"\.v is NoneType, not a tensor"),
        (lambda s: s._replace(v=s.v.to("meta")), r"\.v is on meta, the module on cpu"),
        (lambda s: s._replace(v=s.v.double()), r"\.v is torch.float64, the module computes in torch.float32"),
        (lambda s: s._replace(v=s.v[:2]), r"\.v holds a batch of 2 but the input a batch of 4"),
    ]:
        broken = {**state, "nodes": {**state["nodes"], key: change(state["nodes"][key])}}
        with pytest.raises(nirbridge.StateError, match=rf"state\['nodes'\]\['{key}'\]" + says):
            gm(x, broken)
        with pytest.raises(nirbridge.StateError, match=says):
            nirbridge.run(gm, x.expand(3, 4, 12), state=broken)
    one = {
        **state,
        "nodes": {**state["nodes"], key: state["nodes"][key]._replace(v=state["nodes"][key].v[:1])},
    }
    assert gm(x, one)[0].shape[0] == 4  # a batch-1 state broadcasts, as documented


def test_delayed_outputs_in_a_state_are_checked_like_node_states():
    n = 3
    lif = nir.LIF(np.full(n, 1e-2), np.ones(n), np.zeros(n), np.ones(n), np.zeros(n))
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([n])),
            "l": lif,
            "w": nir.Linear(np.eye(n)),
            "output": nir.Output(np.array([n])),
        },
        edges=[("input", "l"), ("l", "w"), ("w", "l"), ("l", "output")],
    )
    gm = nirbridge.nir_to_torch(graph, dt=1e-3)
    x = torch.ones(2, n)
    _, state = gm(x)
    for change, says in [
        (lambda v: v[:, :2], r"\['w'\] has shape \[2, 2\], but node 'w' keeps \[B, 3\]"),
        (lambda v: v[None], r"has shape \[1, 2, 3\]"),
        (lambda v: 5, r"is int, not a tensor"),
        (lambda v: v.double(), r"is torch.float64"),
        (lambda v: v.to("meta"), r"is on meta"),
    ]:
        broken = {**state, "delayed": {"w": change(state["delayed"]["w"])}}
        with pytest.raises(nirbridge.StateError, match=r"state\['delayed'\].*" + says):
            gm(x, broken)
        with pytest.raises(nirbridge.StateError, match=says):
            nirbridge.run(gm, x.expand(3, 2, n), state=broken)


def test_extra_arguments_to_a_module_call_are_named(gm):
    with pytest.raises(nirbridge.InputError, match=r"takes the arguments \(input, state\), got 3 positional"):
        gm(torch.zeros(1, 12), None, None)
    with pytest.raises(nirbridge.InputError, match=r"and spikes"):
        gm(torch.zeros(1, 12), spikes=1)


def test_integers_the_modules_float_would_round_are_refused_like_wider_floats():
    """int64 inputs above 2^24 were cast to float32 silently while float64 was refused:
    one rule now, a value is cast only where the module's dtype holds it exactly."""
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    exact = torch.full((2, 12), 2**24, dtype=torch.int64)
    assert gm(exact)[0].shape == (2, 7)  # 2^24 is a float32
    for dtype in (torch.int64, torch.int32):
        big = torch.full((2, 12), 2**24 + 1, dtype=dtype)
        with pytest.raises(
            nirbridge.InputError, match=r"holds 16777217, but node 'fc1' computes in torch.float32"
        ):
            gm(big)
        with pytest.raises(nirbridge.InputError, match="holds integers exactly only up to 16777216"):
            nirbridge.run(gm, big[None])
    double = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, dtype=torch.float64)
    assert double(torch.full((2, 12), 2**24 + 1))[0].dtype == torch.float64  # float64 holds it
    half = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, dtype=torch.float16)
    with pytest.raises(nirbridge.InputError, match="only up to 2048"):
        half(torch.full((2, 12), 4097, dtype=torch.int16))
    assert half(torch.ones(2, 12, dtype=torch.int8))[0].dtype == torch.float16  # int8 always fits
    for unsigned in (torch.uint16, torch.uint32, torch.uint64):  # torch has no max() for these
        assert nirbridge.run(gm, torch.ones(3, 2, 12, dtype=unsigned)).output.dtype == torch.float32


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda x: torch.nested.nested_tensor([x[0], x[1, :6]]), "nested tensor"),
        (lambda x: torch.quantize_per_tensor(x, 0.5, 0, torch.quint8), "quantized tensor"),
        (lambda x: x.to_sparse(), "sparse"),
    ],
)
def test_tensors_a_step_cannot_take_are_named(make, says):
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x, sequence = torch.rand(2, 12), torch.rand(4, 2, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: nested and quantized tensors are prototypes
        one, many = make(x), make(sequence) if says != "nested tensor" else make(sequence.transpose(0, 1))
    with pytest.raises(nirbridge.InputError, match=says):
        gm(one)
    with pytest.raises(nirbridge.InputError, match=says):
        nirbridge.run(gm, many)


def test_calls_that_do_not_fit_the_forwards_arguments_are_named():
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x = torch.rand(2, 12)
    with pytest.raises(nirbridge.InputError, match="no value for input"):
        gm()
    with pytest.raises(nirbridge.InputError, match="state given both by position and by name"):
        gm(x, None, state=None)
    with pytest.raises(nirbridge.InputError, match="3 positional"):
        gm(x, None, None)
    with pytest.raises(nirbridge.InputError, match="1 positional argument.s. and self"):
        gm(x, self=1)  # was Python's TypeError from the call's own parameter
    out, state = gm(x, state=None)  # by name is fine
    assert gm(input=x, state=state)[0].shape == out.shape


def test_a_returned_state_is_checked_once_and_any_change_to_it_is_checked_again():
    """check_step validates a state once per new state object: a state passed back as
    it was returned skips the checks, and one whose entries were replaced, or that
    belongs to another module, batch or dtype, is checked in full."""
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x = (torch.rand(4, 2, 12) < 0.5).float()
    out, state = gm(x[0])
    assert getattr(state, "_stamp", None) is not None
    stepped, again = [out], state
    for t in range(1, 4):
        o, again = gm(x[t], again)
        stepped.append(o)
    torch.testing.assert_close(torch.stack(stepped), nirbridge.run(gm, x).output, rtol=0, atol=0)
    nodes = state["nodes"]
    lif = next(k for k, v in nodes.items() if hasattr(v, "_fields"))
    wrong = nodes[lif]._replace(**{nodes[lif]._fields[0]: torch.zeros(2, 3)})
    nodes[lif] = wrong  # an entry replaced after the stamp: checked in full
    with pytest.raises(nirbridge.StateError):
        gm(x[1], state)
    _, state = gm(x[0])
    with pytest.raises(nirbridge.StateError):
        gm(torch.rand(5, 12), state)  # another batch
    other = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    assert torch.equal(other(x[1], state)[0], gm(x[1], state)[0])  # another module checks it itself
    with pytest.raises(nirbridge.StateError):
        gm.double()(x[1].double(), state)  # the stamp names the old dtype buffer
    gm.float()
    state["extra"] = 1
    with pytest.raises(nirbridge.StateError):
        gm(x[1], state)


def test_float8_inputs_are_cast_exactly():
    """torch will not promote float8, so the dtype check itself raised RuntimeError."""
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x = (torch.rand(3, 2, 12) < 0.5).float()
    eight = x.to(torch.float8_e4m3fn)
    torch.testing.assert_close(gm(eight[0])[0], gm(x[0])[0], rtol=0, atol=0)
    torch.testing.assert_close(nirbridge.run(gm, eight).output, nirbridge.run(gm, x).output, rtol=0, atol=0)

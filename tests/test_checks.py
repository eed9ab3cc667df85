"""Call-time checks of imported modules, written as users make the mistakes: every case
gets a NirBridgeError naming the input or state key and the fix, never a torch error from
deep inside or a silently different answer."""

from __future__ import annotations

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
        match=r"input 'input' has shape \[4, 13\], but Input node 'input' takes \[B, 12\]",
    ):
        gm(torch.zeros(4, 13))  # today: mat1 and mat2 shapes cannot be multiplied
    with pytest.raises(nirbridge.InputError, match=r"without its batch axis: pass x.unsqueeze\(0\)"):
        gm(torch.zeros(12))
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


def test_spikes_of_any_integer_or_bool_dtype_are_cast_and_other_floats_refused(gm):
    rng = np.random.default_rng(0)
    spikes = torch.from_numpy(rng.random((30, 3, 12)) < 0.3)
    expected, state = [], None
    for x in spikes:
        out, state = gm(x.float(), state)
        expected.append(out)
    for dtype in (torch.bool, torch.uint8, torch.int32, torch.int64):
        state = None
        for t, x in enumerate(spikes):
            out, state = gm(x.to(dtype), state)
            assert out.dtype == torch.float32 and torch.equal(out, expected[t]), (dtype, t)
    with pytest.raises(
        nirbridge.InputError, match=r"is torch.float64 but the module computes in torch.float32"
    ):
        gm(spikes[0].double())
    double = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, dtype=torch.float64)
    assert double(spikes[0])[0].dtype == torch.float64  # bool cast to the module's dtype
    assert gm.double()(spikes[0])[0].dtype == torch.float64  # and it follows .to(dtype)
    gm.float()


def test_a_batch_size_that_differs_from_the_states(gm):
    _, state = gm(torch.zeros(4, 12))
    with pytest.raises(nirbridge.StateError, match="the state holds a batch of 4 but the input a batch of 3"):
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

"""nirbridge.verify and nirbridge.testing.assert_equivalent: agreement, planted divergences."""

from __future__ import annotations

import copy
import warnings

import nir
import numpy as np
import pytest
import torch

import nirbridge
from nirbridge.adapters import norse as norse_adapter
from nirbridge.adapters import snntorch as snntorch_adapter
from nirbridge.testing import assert_equivalent
from tests.conftest import EXAMPLES

BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"


def spikes(steps=60, batch=4, width=12, seed=0):
    return (torch.rand(steps, batch, width, generator=torch.Generator().manual_seed(seed)) < 0.3).float()


def braille(adapter=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        if adapter is None:
            return nirbridge.nir_to_torch(BRAILLE)
        return adapter.from_nir(BRAILLE, dt=1e-4)


class FromStep(torch.nn.Module):
    """A neuron that behaves like ``inner`` until step ``k``, then adds ``offset`` to its
    membrane: a divergence planted at a known node and step."""

    def __init__(self, inner: torch.nn.Module, k: int, offset: float) -> None:
        super().__init__()
        self.inner, self.k, self.offset = inner, k, offset

    def forward(self, x, state=None):
        count, inner_state = (0, None) if state is None else state
        if count >= self.k:
            inner_state = type(inner_state)(*inner_state[:-1], inner_state[-1] + self.offset)
        out, inner_state = self.inner(x, inner_state)
        return out, (count + 1, inner_state)


def test_the_same_file_in_three_simulators_is_equivalent():
    x = spikes()
    report = nirbridge.verify(BRAILLE, braille(norse_adapter), x)
    assert report.ok, report
    assert report.first_divergence is None
    assert report["lif1.lif"].spike_agreement == 1.0
    assert report["output"].spikes and report["output"].max_abs == 0
    assert "lif1.lif.v" in [c.key for c in report.comparisons]
    assert_equivalent(braille(), braille(snntorch_adapter), x, atol=1e-5)
    # a simulator's name stands for the reference file imported with its neurons
    for backend in ("nirbridge", "norse", "snntorch"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
            assert nirbridge.verify(BRAILLE, backend, x, atol=1e-5).ok, backend
    with pytest.raises(nirbridge.VerifyError, match="must be a nir.NIRGraph or a .nir path"):
        nirbridge.verify(braille(), "norse", x)


def test_a_planted_divergence_is_found_at_its_node_and_step():
    x = spikes(steps=80)
    reference, candidate = braille(), braille()
    candidate.lif1.lif = FromStep(candidate.lif1.lif, k=13, offset=10.0)  # every neuron fires at step 13
    report = nirbridge.verify(
        reference, candidate, x, record=["fc1", "lif1.lif", "fc2", "lif2", "lif1.w_rec"]
    )
    assert not report.ok
    assert report.first_divergence == (13, "lif1.lif")
    assert report["fc1"].ok
    assert report["lif2"].first_step >= 13
    assert report["lif1.lif"].spike_agreement < 1.0
    counts = report["lif1.lif"].count_differences  # candidate minus reference, per neuron
    assert counts.shape == (4, 38) and counts.dtype == torch.int64
    assert float((counts != 0).double().mean()) == pytest.approx(1 - report["lif1.lif"].spike_agreement)

    # changed weights show at their layer, from the first step their input is non-zero
    changed = braille()
    with torch.no_grad():
        changed.fc2.weight += 0.5
    report = nirbridge.verify(reference, changed, x)
    first_input_spike = int(torch.nonzero(report.reference_run.records["lif1.lif"].sum((1, 2)))[0, 0])
    assert report.first_divergence == (first_input_spike, "fc2")
    assert report["lif1.lif"].ok and report["lif1.lif.v"].ok


def test_report_table_and_assert_equivalent():
    x = spikes(steps=30)
    changed = braille()
    with torch.no_grad():
        changed.fc1.bias += 1.0
    report = nirbridge.verify(braille(), changed, x)
    text = str(report)
    assert "NOT equivalent" in text and "first divergence at step 0 in 'fc1'" in text
    assert "DIFFERS" in text and "spike counts agree" in text
    with pytest.raises(AssertionError, match="NOT equivalent"):
        assert_equivalent(braille(), changed, x)
    assert assert_equivalent(braille(), braille(), x).ok


def test_incomparable_shapes_and_missing_records_are_reported(rng):
    def graph(n):
        return nir.NIRGraph(
            nodes={
                "input": nir.Input(np.array([3])),
                "fc": nir.Linear(rng.normal(size=(n, 3))),
                "output": nir.Output(np.array([n])),
            },
            edges=[("input", "fc"), ("fc", "output")],
            type_check=False,
        )

    report = nirbridge.verify(graph(2), graph(4), torch.zeros(5, 2, 3))
    assert not report.ok
    assert report["fc"].problem == "shapes [5, 2, 2] != [5, 2, 4]"
    other = graph(2)
    other.nodes["extra"] = nir.Scale(np.ones(2))
    other.edges = [("input", "fc"), ("fc", "extra"), ("extra", "output")]
    report = nirbridge.verify(graph(2), other, torch.zeros(5, 2, 3))
    assert report.only_candidate == ["extra"]


def test_files_with_negative_time_constants_verify_when_asked_to():
    path = EXAMPLES / "spyx_at_00e6ba49__research__paper__spyx_shd.nir"
    x = (torch.rand(10, 2, 128, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        with pytest.raises(nirbridge.ParameterError, match="allow_negative_tau=True"):
            nirbridge.verify(path, "snntorch", x, dt=1e-4)
        report = nirbridge.verify(path, "snntorch", x, dt=1e-4, allow_negative_tau=True)
    assert report.agree and report.silent == ["LIF", "LIF_1"]  # spyx's τ: thousands of seconds
    assert not report.ok, report


def test_tolerances_that_would_pass_anything_are_refused():
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "s": nir.Scale(np.ones(2)),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "s"), ("s", "output")],
    )
    x = torch.ones(3, 1, 2)
    for tolerances in ({"atol": float("nan")}, {"rtol": float("inf")}, {"atol": -1.0}):
        with pytest.raises(nirbridge.VerifyError, match="give a finite tolerance of 0 or more"):
            nirbridge.verify(graph, graph, x, **tolerances)


# ----------------------------------------------------------------------------- honest agreement


def lif_chain(threshold: float, weight: float = 3.0) -> nir.NIRGraph:
    n = 4
    nodes = {
        "input": nir.Input(np.array([n])),
        "fc": nir.Linear(np.eye(n) * weight),
        "lif": nir.LIF(
            tau=np.full(n, 2e-3), r=np.full(n, 10.0), v_leak=np.zeros(n), v_threshold=np.full(n, threshold)
        ),
        "output": nir.Output(np.array([n])),
    }
    edges = [("input", "fc"), ("fc", "lif"), ("lif", "output")]
    return nir.NIRGraph(nodes, edges, metadata={"dt": 1e-4}, type_check=False)


def test_a_comparison_where_neither_side_spikes_is_silent_not_ok():
    x = spikes(steps=40, width=4)
    silent = nirbridge.nir_to_torch(lif_chain(threshold=1e6))
    with pytest.warns(
        nirbridge.SilentNetworkWarning, match=r"neither side spikes in 'lif', 'output' over 40 steps"
    ):
        report = nirbridge.verify(silent, copy.deepcopy(silent), x)
    lif = report["lif"]
    assert lif.ok and lif.silent and lif.status == "silent"
    assert (lif.reference_spikes, lif.candidate_spikes) == (0, 0)
    assert report.agree and not report.ok and report.silent == ["lif", "output"]
    assert str(report).startswith("verify: agree, but 2 spike comparison(s) are silent on both sides")
    row = next(line for line in report.table().splitlines() if line.startswith("lif "))
    assert "0 / 0" in row and row.rstrip().endswith("silent")
    with pytest.warns(nirbridge.SilentNetworkWarning), pytest.raises(AssertionError, match="silent"):
        assert_equivalent(silent, copy.deepcopy(silent), x)
    with pytest.warns(nirbridge.SilentNetworkWarning):
        assert assert_equivalent(silent, copy.deepcopy(silent), x, allow_silent=True).ok
    # a network that spikes carries both sides' totals, counted independently here
    firing = nirbridge.nir_to_torch(lif_chain(threshold=1.0))
    report = nirbridge.verify(firing, copy.deepcopy(firing), x)
    with torch.no_grad():
        expected = int(nirbridge.run(firing, x).output.count_nonzero())
    assert report.ok and report["lif"].reference_spikes == report["lif"].candidate_spikes == expected > 0
    assert f"{expected} / {expected}" in report.table()


def test_nan_and_infinity_are_differences_even_on_both_sides():
    gm = nirbridge.nir_to_torch(lif_chain(threshold=1.0))
    x = spikes(steps=20, width=4)
    x[5, 0, 1] = float("nan")
    x[7, 1, 2] = float("inf")
    report = nirbridge.verify(gm, copy.deepcopy(gm), x)
    assert not report.ok and not report.agree
    assert report["fc"].status == "DIFFERS" and report["fc"].first_step == 5
    assert report["lif.v"].first_step == 5


class InFloat64(torch.nn.Module):
    """A float32 module's interface around a float64 computation of the same graph (held
    in a tuple, so that its float64 parameters are not this module's)."""

    def __init__(self, graph: nir.NIRGraph) -> None:
        super().__init__()
        self.inner = (nirbridge.nir_to_torch(graph, dtype=torch.float64),)

    def forward(self, x, state=None):
        out, state = self.inner[0](x.double(), state)
        return out.float(), state


def test_values_are_compared_relative_to_the_records_magnitude():
    # LI membranes of size ~1e3 that cross 0: float32 against float64 differs by float32's
    # rounding of 1e3, far above atol near the crossings, far below rtol·1e3
    rng = np.random.default_rng(0)
    n = 16
    nodes = {
        "input": nir.Input(np.array([n])),
        "fc": nir.Linear(rng.normal(size=(n, n)) * 3000),
        "li": nir.LI(tau=np.full(n, 1e-3), r=np.ones(n), v_leak=np.zeros(n)),
        "output": nir.Output(np.array([n])),
    }
    graph = nir.NIRGraph(
        nodes, [("input", "fc"), ("fc", "li"), ("li", "output")], metadata={"dt": 1e-4}, type_check=False
    )
    x = torch.from_numpy(rng.normal(size=(60, 3, n))).float()
    reference, candidate = InFloat64(graph), nirbridge.nir_to_torch(graph)
    report = nirbridge.verify(reference, candidate, x)
    a, b = report.candidate_run.output.double(), report.reference_run.output.double()
    assert b.abs().max() > 1000
    assert ((a - b).abs() > 1e-6 + 1e-5 * b.abs()).any()  # what an element-wise rtol would call a divergence
    assert report.ok, report
    with torch.no_grad():
        candidate.fc.weight[3, 5] *= 1.001  # a real divergence is still found
    assert not nirbridge.verify(reference, candidate, x).ok


def test_native_simulator_modules_verify_without_record():
    import snntorch as snn

    torch.manual_seed(2)
    native = torch.nn.Sequential(
        torch.nn.Linear(12, 8), snn.Leaky(beta=0.9, init_hidden=True, output=True, reset_mechanism="zero")
    )
    with torch.no_grad():
        native[0].weight.uniform_(0.1, 0.6)
    imported = nirbridge.nir_to_torch(snntorch_adapter.to_nir(native, torch.zeros(1, 12)))
    x = spikes(steps=50)
    report = nirbridge.verify(native, imported, x)  # no record=: every layer, under its node's name
    assert [c.key for c in report.comparisons] == ["0", "1", "output"]
    assert report.ok and report["output"].reference_spikes > 0, report
    report = nirbridge.verify(imported, native, x)
    assert report.ok and report["output"].candidate_spikes == report["output"].reference_spikes


def test_the_tolerance_follows_the_reference_neuron_by_neuron():
    from nirbridge.verify import _compare

    reference = torch.full((5, 1, 2), 1.0)
    candidate = reference.clone()
    candidate[4, 0, 0] = 1e6  # a candidate that blows up does not widen its own tolerance
    candidate[:, 0, 1] = 1.5
    assert _compare("v", reference, candidate, False, 1e-6, 1e-5).first_step == 0
    big_and_small = torch.tensor([[[1000.0, 0.001]]] * 5)
    off = big_and_small.clone()
    off[..., 1] = 0.006  # 6x off, next to a neuron of size 1000
    assert not _compare("v", big_and_small, off, False, 1e-6, 1e-5).ok


def test_bad_arguments_and_a_side_that_raises_are_named():
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x = (torch.rand(6, 2, 12) < 0.3).float()
    with pytest.raises(
        nirbridge.NirBridgeError, match=r"verify\(state=...\) takes \(reference_state, candidate_state\)"
    ):
        nirbridge.verify(gm, gm, x, state=5)
    with pytest.raises(nirbridge.NirBridgeError, match="unknown keyword.*nonsense"):
        assert_equivalent(gm, gm, x, nonsense=1)

    class Fails(torch.nn.Module):
        def forward(self, x, state=None):
            if bool((x == 7).any()):
                raise RuntimeError("the model broke")
            return x[..., :7], state

    x[3, 0, 0] = 7.0  # it breaks at step 3

    with pytest.raises(
        nirbridge.NirBridgeError, match=r"the candidate \(Fails\) raised RuntimeError at step 3"
    ):
        nirbridge.verify(gm, Fails(), x)
    report = nirbridge.verify(gm, gm, x, atol=np.float32(1e-6), rtol=np.float64(1e-5), allow_silent=True)
    assert report.ok and isinstance(report.atol, float)
    with pytest.raises(nirbridge.NirBridgeError, match="give the tolerance as a number"):
        nirbridge.verify(gm, gm, x, atol="tiny")


def test_an_empty_batch_and_fields_that_require_grad():
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    with pytest.raises(nirbridge.NirBridgeError, match="a batch of 0 samples"):
        nirbridge.verify(gm, gm, torch.zeros(5, 0, 12))
    weight = torch.nn.Parameter(torch.eye(3))  # a trained weight put into a graph as it is
    graph = nir.NIRGraph.from_list(
        nir.Input(np.array([3])), nir.Linear(weight=weight), nir.Output(np.array([3]))
    )
    assert torch.equal(nirbridge.nir_to_torch(graph)(torch.ones(1, 3))[0], torch.ones(1, 3))


def test_a_nested_input_to_verify_is_named():
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x = torch.rand(5, 2, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: nested tensors are a prototype
        nested = torch.nested.nested_tensor([x[:, 0], x[:3, 1]])
    with pytest.raises(nirbridge.InputError, match="nested tensor"):
        nirbridge.verify(gm, gm, nested)


def test_both_graph_sides_run_on_the_back_end_named(monkeypatch):
    """backend= reaches run: the CPU back-end's stepper is built for each side with
    "cpu", never with "eager"; a name run does not know is refused before anything runs."""
    import nirbridge.engine.cpu as cpu

    built = []
    real = cpu.cpu_stepper
    monkeypatch.setattr(cpu, "cpu_stepper", lambda *args: built.append(args) or real(*args))
    x = spikes(steps=20, batch=2)
    assert nirbridge.verify(BRAILLE, braille(), x, backend="eager").ok and built == []
    assert nirbridge.verify(BRAILLE, braille(), x, backend="cpu").ok and len(built) == 2
    with pytest.raises(nirbridge.VerifyError, match=r"verify\(backend='fast'\): give one of auto, eager"):
        nirbridge.verify(BRAILLE, braille(), x, backend="fast")

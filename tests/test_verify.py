"""nirbridge.verify and nirbridge.testing.assert_equivalent: agreement, planted divergences."""

from __future__ import annotations

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
    assert report.ok, report


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

"""nirbridge.engine.selfcheck: the Triton kernels check themselves against the eager
back-end before they are trusted on a device, through Triton's interpreter here."""

from __future__ import annotations

import warnings

import pytest
import torch

import nirbridge
from nirbridge.engine import selfcheck
from nirbridge.engine import triton as T
from tests.conftest import EXAMPLES

BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"


@pytest.fixture(autouse=True)
def fresh_verdicts():
    selfcheck.forget()
    yield
    selfcheck.forget()


def spikes(steps=8, batch=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(steps, batch, 12, generator=generator) < 0.4).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("family", selfcheck.FAMILIES)
def test_every_kernel_family_passes_its_check_through_the_interpreter(family, dtype):
    verdict = selfcheck.check(family, torch.device("cpu"), dtype)
    assert verdict.ok and verdict.differing == 0 and verdict.compared > 400, verdict
    assert verdict.exact == (not family.endswith("backward"))
    assert str(verdict).startswith(f"{family} on cpu ({str(dtype)[6:]}): ok, 0 of ")
    assert selfcheck.verdicts() == [verdict]


def test_a_run_checks_each_family_once_and_shows_the_verdicts():
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        first = nirbridge.run(gm, spikes(), backend="triton")
        second = nirbridge.run(gm, spikes(seed=1), backend="triton")
    assert [v.family for v in first.selfcheck] == ["loop", "scan"]  # what this graph uses, without gradients
    assert all(v.ok for v in first.selfcheck)
    assert second.selfcheck == first.selfcheck  # checked once per process
    assert "self-check: scan on cpu (float32): ok" in repr(first)
    assert nirbridge.run(gm, spikes(), backend="eager").selfcheck == ()


def test_a_kernel_made_to_differ_falls_back_says_so_once_and_equals_eager(monkeypatch):
    """The scan kernel's outputs one ulp off (as a miscompiled kernel could be): the
    check catches it, that family runs eagerly, and one CompileWarning says so."""
    launch = T._forward

    def off_by_one_ulp(*args, **kwargs):
        out, v, i, trace_v, trace_i, v_pre = launch(*args, **kwargs)
        return out, torch.nextafter(v, v + 1), i, trace_v, trace_i, v_pre

    monkeypatch.setattr(T, "_forward", off_by_one_ulp)
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x = spikes(steps=12)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        result = nirbridge.run(gm, x, backend="triton", record="all", chunk=5)
        again = nirbridge.run(gm, x, backend="triton", record="all")
        eager = nirbridge.run(gm, x, backend="eager", record="all")
    said = [str(w.message) for w in caught if issubclass(w.category, nirbridge.CompileWarning)]
    assert len(said) == 1, said
    assert "self-check of the scan kernel on cpu (float32)" in said[0]
    assert "runs eagerly for the rest of this process" in said[0] and "nirbridge selftest --json" in said[0]
    failed = [v for v in result.selfcheck if v.family == "scan"]
    assert failed and not failed[0].ok and failed[0].differing > 0
    for run in (result, again):
        assert torch.equal(run.output, eager.output)
        for key, value in eager.records.items():
            assert torch.equal(run.records[key], value), key


def test_the_check_is_skipped_when_asked(monkeypatch):
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        skipped = nirbridge.run(gm, spikes(), backend="triton", selfcheck=False)
        assert skipped.selfcheck == () and selfcheck.verdicts() == []
        monkeypatch.setenv("NIRBRIDGE_SELFCHECK", "0")
        assert nirbridge.run(gm, spikes(), backend="triton").selfcheck == ()
        monkeypatch.delenv("NIRBRIDGE_SELFCHECK")
        assert nirbridge.run(gm, spikes(), backend="triton").selfcheck != ()
    with pytest.raises(nirbridge.ParameterError, match="run.selfcheck='no'.: give True or False"):
        nirbridge.run(gm, spikes(), selfcheck="no")


def test_fast_precision_compares_within_a_tolerance():
    verdict = selfcheck.check("scan", torch.device("cpu"), torch.float32, exact=False)
    assert verdict.ok and not verdict.exact
    with nirbridge.precision("fast"):
        assert selfcheck.passed("scan", torch.device("cpu"), torch.float32)
    assert [v.exact for v in selfcheck.verdicts()] == [False]


def test_a_run_with_gradients_checks_the_reverse_kernels_it_uses():
    """An input that requires a gradient through the Braille SRNN: the loop's and the
    scans' reverse kernels are checked before they run, as the forward ones are."""
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4)
    x = spikes().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        result = nirbridge.run(gm, x, backend="triton")
    result.output.sum().backward()
    assert {v.family for v in result.selfcheck} == {"loop", "loop backward", "scan", "scan backward"}
    assert all(v.ok for v in result.selfcheck) and x.grad is not None

"""nirbridge.engine: which back-end a run uses."""

from __future__ import annotations

import pytest
import torch

import nirbridge
from nirbridge.engine import BACKENDS, backend_for


@pytest.mark.parametrize("backend", ["eager", "compile", "triton"])
def test_a_named_back_end_is_used_on_every_device(backend):
    for device in (None, "cpu", "cuda", torch.device("cuda", 1)):
        assert backend_for(backend, device) == backend


def test_auto_is_triton_on_cuda_cpu_on_the_cpu_and_eager_elsewhere():
    """Triton and numba are installed here, so CUDA devices (only their type is read)
    get Triton and the CPU gets the cpu back-end (without numba it is eager: the
    subprocess test in test_engine_cpu)."""
    assert backend_for("auto", "cuda") == "triton"
    assert backend_for("auto", torch.device("cuda", 0)) == "triton"
    for device in (None, "cpu", torch.device("cpu")):
        assert backend_for("auto", device) == "cpu"
    assert backend_for("auto", "meta") == "eager"


def test_an_unknown_back_end_is_refused_with_the_choices():
    with pytest.raises(nirbridge.ParameterError, match="use 'auto', 'eager', 'compile', 'triton' or 'cpu'"):
        backend_for("cuda")
    assert BACKENDS == ("auto", "eager", "compile", "triton", "cpu")


@pytest.mark.parametrize("device", ["cpu", *(["cuda"] if torch.cuda.is_available() else [])])
def test_a_run_picks_its_back_end_from_the_modules_device(device, monkeypatch):
    """``run(backend="auto")`` launches the Triton kernels on CUDA; on the CPU (even
    with Triton's interpreter on, as in these tests) it runs the cpu back-end."""
    from nirbridge.engine import triton as T

    launched = []
    real = T._scan
    monkeypatch.setattr(T, "_scan", lambda *args: launched.append(1) or real(*args))
    module = (
        nirbridge.neurons.LIF(tau=1e-3, r=1.0, v_leak=0.0, v_threshold=1.0, v_reset=0.0).float().to(device)
    )
    x = torch.rand(20, 3, 1, generator=torch.Generator().manual_seed(0)).to(device) * 40
    with torch.no_grad():
        out = nirbridge.run(module, x).output
        assert bool(launched) == (device == "cuda")
        assert torch.equal(out, nirbridge.run(module, x, backend="eager").output) and out.sum() > 0

"""nirbridge.engine.kernels: many steps at once, equal to stepping the modules bit for bit."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from nirbridge.neurons import IF, LI, LIF, CubaLI, CubaLIF, I

N = 6


def make(kind: str, rng: np.random.Generator):
    tau = rng.uniform(2e-4, 2e-3, N)
    common = dict(r=rng.uniform(0.5, 3.0, N), v_leak=rng.uniform(-0.2, 0.3, N))
    fire = dict(v_threshold=rng.uniform(0.5, 1.5, N), v_reset=rng.uniform(-0.3, 0.2, N))
    syn = dict(tau_syn=rng.uniform(2e-4, 1e-3, N), tau_mem=tau, w_in=rng.uniform(0.5, 2, N))
    return {
        "I": lambda: I(r=common["r"] * 100),
        "IF": lambda: IF(r=common["r"] * 1000, **fire),
        "LI": lambda: LI(tau=tau, **common),
        "LIF": lambda: LIF(tau=tau, **common, **fire),
        "CubaLI": lambda: CubaLI(**syn, **common),
        "CubaLIF": lambda: CubaLIF(**syn, **common, **fire),
    }[kind]()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["I", "IF", "LI", "LIF", "CubaLI", "CubaLIF"])
def test_scan_equals_stepping_bit_for_bit(kind, dtype, rng):
    module = make(kind, rng).to(dtype)
    x = torch.from_numpy(rng.uniform(-1, 8, (60, 5, N))).to(dtype)
    start = module.initial_state(x[0])
    start = type(start)(*(s + 0.1 for s in start))  # not the initial state
    kept = copy.deepcopy(start)
    with torch.no_grad():
        out, state, traces = module.scan(x, start, trace=True)
        expected, stepped, history = [], start, []
        for t in range(x.shape[0]):
            o, stepped = module(x[t], stepped)
            expected.append(o)
            history.append(stepped)
    assert torch.equal(out, torch.stack(expected))
    assert all(torch.equal(a, b) for a, b in zip(state, stepped))
    for field in state._fields:
        assert torch.equal(traces[field], torch.stack([getattr(h, field) for h in history])), field
    assert all(torch.equal(a, b) for a, b in zip(start, kept)), "the state passed in was modified"
    if kind.endswith("IF"):
        assert 0 < out.sum() < out.numel(), "the test should spike, and not always"


def test_scan_with_gradients_steps_and_lets_them_through(rng):
    module = make("LIF", rng)
    x = torch.from_numpy(rng.uniform(0, 8, (30, 2, N))).requires_grad_(True)
    out, _, traces = module.scan(x, trace=True)
    assert set(traces) == {"v"}
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def shared(kind: str, reset: float):
    """A population whose parameters are all equal (the kernels use numbers for them),
    with the factors r, w_in and dt * r exactly 1 where the model has them."""
    fire = dict(v_threshold=np.full(N, 0.75), v_reset=np.full(N, reset))
    return {
        "I": lambda: I(r=np.full(N, 1e4), dt=1e-4),
        "IF": lambda: IF(r=np.full(N, 1.0), **fire, dt=1.0),
        "LI": lambda: LI(tau=np.full(N, 1e-3), r=np.ones(N), v_leak=np.full(N, 0.1)),
        "LIF": lambda: LIF(tau=np.full(N, 1e-3), r=np.ones(N), v_leak=np.zeros(N), **fire),
        "CubaLI": lambda: CubaLI(
            tau_syn=np.full(N, 5e-4),
            tau_mem=np.full(N, 1e-3),
            r=np.ones(N),
            v_leak=np.zeros(N),
            w_in=np.ones(N),
        ),
        "CubaLIF": lambda: CubaLIF(
            tau_syn=np.full(N, 5e-4),
            tau_mem=np.full(N, 1e-3),
            r=np.full(N, 2.0),
            v_leak=np.full(N, -0.1),
            w_in=np.ones(N),
            **fire,
        ),
    }[kind]()


@pytest.mark.parametrize("reset", [0.0, -0.25])
@pytest.mark.parametrize("kind", ["I", "IF", "LI", "LIF", "CubaLI", "CubaLIF"])
def test_shared_parameters_scan_like_stepping(kind, reset, rng):
    module = shared(kind, reset).float()
    x = torch.from_numpy(rng.uniform(-1, 3, (50, 4, N))).float()
    with torch.no_grad():
        out, state, traces = module.scan(x, trace=True)
        expected, stepped = [], None
        for t in range(x.shape[0]):
            o, stepped = module(x[t], stepped)
            expected.append(o)
    assert torch.equal(out, torch.stack(expected))
    assert all(torch.equal(a, b) for a, b in zip(state, stepped))
    if kind.endswith("IF"):
        assert 0 < out.sum() < out.numel()
        assert (traces["v"] == reset).any(), "the reset value should appear after a spike"


def test_infinite_membranes_reset_as_stepping_does():
    """A membrane driven to infinity fires, and the reset (1 - z) v + z v_reset gives NaN
    there when stepping: the kernel gives the same values, not v_reset."""
    module = IF(r=np.ones(3), v_threshold=np.ones(3), v_reset=np.zeros(3), dt=1.0)
    x = torch.tensor([[[1.0, float("inf"), -float("inf")]], [[0.5, 1.0, 1.0]]], dtype=torch.float64)
    with torch.no_grad():
        out, state, _ = module.scan(x)
        o0, s = module(x[0])
        o1, s = module(x[1], s)
    assert torch.equal(out, torch.stack([o0, o1]))
    assert torch.allclose(state.v, s.v, rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(state.v[0, 1]) and torch.isnan(s.v[0, 1])

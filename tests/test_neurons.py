"""nirbridge.neurons: the modules' API and their equations, checked in plain numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nirbridge
from nirbridge.neurons import IF, LI, LIF, CubaLI, CubaLIF, Delay, I
from nirbridge.neurons.functional import SURROGATE_ALPHA, spike

DT = 1e-4


def run(module, xs):
    state, outs = None, []
    for x in xs:
        out, state = module(torch.from_numpy(x), state)
        outs.append(out.numpy())
    return np.stack(outs), state


def test_lif_by_hand():
    tau, r, v_leak, thr, reset = (
        np.array([2e-3, 5e-4]),
        np.array([1.0, 2.0]),
        np.array([0.1, -0.1]),
        np.array([0.5, 0.3]),
        np.array([0.0, -0.2]),
    )
    xs = np.random.default_rng(0).uniform(0, 20, (40, 1, 2))
    lif = LIF(tau=tau, r=r, v_leak=v_leak, v_threshold=thr, v_reset=reset, dt=DT).double()
    got, state = run(lif, xs)
    v = v_leak.copy()
    for t, x in enumerate(xs[:, 0]):
        v = v + DT / tau * (v_leak - v + r * x)
        z = v > thr
        v = np.where(z, reset, v)
        np.testing.assert_array_equal(got[t, 0], z.astype(float))
    np.testing.assert_allclose(state.v.numpy()[0], v, atol=1e-12)
    assert got.sum() > 0


@pytest.mark.parametrize("cls", [LI, CubaLI, LIF, CubaLIF])
def test_leaky_models_start_at_v_leak(cls):
    kwargs = {"tau": 1e-3} if cls in (LI, LIF) else {"tau_syn": 1e-3, "tau_mem": 2e-3}
    module = cls(**kwargs, v_leak=np.array([0.25, -0.5]), dt=DT).double()
    _, state = module(torch.zeros(3, 2, dtype=torch.float64))
    # with zero input the potential stays at the leak potential
    np.testing.assert_allclose(state.v.numpy(), np.tile([0.25, -0.5], (3, 1)), atol=1e-15)


def test_integrators_start_at_zero_and_integrate():
    out, state = I(r=np.array([2.0]), dt=0.5).double()(torch.ones(1, 1, dtype=torch.float64))
    assert out.item() == pytest.approx(1.0)
    z, state = IF(r=1.0, v_threshold=0.9, dt=1.0).double()(torch.ones(1, 1, dtype=torch.float64))
    assert z.item() == 1.0 and state.v.item() == 0.0


def test_cuba_lif_uses_the_new_current():
    m = CubaLIF(tau_syn=2 * DT, tau_mem=4 * DT, r=1.0, v_leak=0.0, v_threshold=10.0, w_in=3.0, dt=DT).double()
    _, s = m(torch.ones(1, 1, dtype=torch.float64))
    i = 0 + DT / (2 * DT) * (-0 + 3.0 * 1)
    v = 0 + DT / (4 * DT) * (0 - 0 + 1.0 * i)
    assert s.i.item() == pytest.approx(i) and s.v.item() == pytest.approx(v)


def test_threshold_is_strict():
    z, _ = IF(r=1.0, v_threshold=1.0, dt=1.0).double()(torch.ones(1, 1, dtype=torch.float64))
    assert z.item() == 0.0


def test_delay_per_element():
    d = Delay(np.array([0.0, 1e-3, 3e-3]), dt=1e-3).double()
    xs = np.arange(1, 7, dtype=np.float64)[:, None, None] * np.ones((1, 1, 3))
    got, _ = run(d, xs)
    np.testing.assert_array_equal(got[:, 0, 0], [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(got[:, 0, 1], [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(got[:, 0, 2], [0, 0, 0, 1, 2, 3])


def test_surrogate_gradient_value():
    v = torch.tensor([0.9, 1.0, 1.3], dtype=torch.float64, requires_grad=True)
    z = spike(v, torch.tensor(1.0, dtype=torch.float64))
    z.sum().backward()
    expected = 1 / (SURROGATE_ALPHA * np.abs(np.array([0.9, 1.0, 1.3]) - 1.0) + 1) ** 2
    np.testing.assert_allclose(v.grad.numpy(), expected)
    np.testing.assert_array_equal(z.detach().numpy(), [0, 0, 1])


def test_bad_parameters_raise_parameter_error():
    with pytest.raises(nirbridge.ParameterError, match="dt"):
        LIF(tau=1e-3, dt=0)
    with pytest.raises(nirbridge.ParameterError, match="'tau'.*numeric"):
        LIF(tau="slow")
    with pytest.raises(nirbridge.ParameterError, match="do not broadcast"):
        LIF(tau=np.ones(3), r=np.ones(2))
    with pytest.raises(nirbridge.ParameterError, match="non-negative"):
        Delay(np.array([-1e-3]))


def test_to_nir_round_trip():
    lif = LIF(tau=np.array([1e-3, 2e-3]), r=2.0, v_leak=0.0, v_threshold=1.0, v_reset=0.0)
    node = lif.to_nir()
    assert node.tau.tolist() == pytest.approx([1e-3, 2e-3])
    again = LIF.from_nir(node, dt=DT)
    assert torch.equal(again.tau, lif.tau)


def test_state_dicts_with_scalar_parameters_load_into_per_neuron_buffers():
    scalar = LIF(tau=2e-3, r=3.0, v_threshold=0.5, dt=DT)
    wide = LIF(tau=np.ones(4), r=np.ones(4), v_threshold=np.ones(4), dt=DT)
    wide.load_state_dict(scalar.state_dict())
    assert wide.tau.shape == (4,) and torch.all(wide.tau == 2e-3) and torch.all(wide.r == 3.0)
    with pytest.raises(RuntimeError, match="size mismatch"):
        LIF(tau=np.ones(3), dt=DT).load_state_dict(wide.state_dict())


def test_a_loaded_delay_updates_its_step_counts():
    d = Delay(np.zeros(3), dt=1e-3).double()
    d.load_state_dict(Delay(np.array([0.0, 1e-3, 3e-3]), dt=1e-3).state_dict())
    xs = np.arange(1, 7, dtype=np.float64)[:, None, None] * np.ones((1, 1, 3))
    got, _ = run(d, xs)
    np.testing.assert_array_equal(got[:, 0, 2], [0, 0, 0, 1, 2, 3])


@pytest.mark.parametrize(
    ("delays", "steps"),
    [([1e-4, 3e-4, 0.0], 7), ([5e-4, 2e-4, 1e-4], 2), ([0.0, 0.0, 0.0], 5)],
)
def test_delay_scan_is_an_index_shift_equal_to_stepping(delays, steps):
    """Chunks longer and shorter than the longest delay, and no delay at all."""
    delay = Delay(delay=delays, dt=1e-4)
    x = torch.rand((steps, 2, 3), dtype=torch.float64)
    start = delay.initial_state(x[0])
    start = type(start)(torch.rand_like(start.history))
    out, state, traces = delay.scan(x, start)
    expected, stepped = [], start
    for t in range(steps):
        o, stepped = delay(x[t], stepped)
        expected.append(o)
    assert torch.equal(out, torch.stack(expected)) and traces == {}
    assert torch.equal(state.history, stepped.history)
    traced_out, traced_state, traced = delay.scan(x, start, trace=True)
    assert torch.equal(traced_out, out) and torch.equal(traced_state.history, state.history)
    assert traced["history"].shape == (steps, *start.history.shape)


def test_a_delay_history_that_cannot_fit_is_refused_at_the_first_step(monkeypatch):
    from nirbridge import limits

    delay = nirbridge.neurons.Delay(np.full(3, 1.0), dt=1e-4)  # 10,000 steps of history
    monkeypatch.setattr(limits, "available", lambda device=None: 1 << 20)  # 1 MiB free
    with pytest.raises(
        nirbridge.MemoryLimitError, match=r"Delay: the history of 10000 steps .* needs 7.3 MiB"
    ):
        delay(torch.zeros(32, 3, dtype=torch.float64))
    out, _ = delay(torch.zeros(1, 3, dtype=torch.float32))  # 10000 x 1 x 3 float32: 117 KiB
    assert out.shape == (1, 3)


def test_state_dicts_with_meaningless_values_are_refused():
    lif = LIF(tau=np.full(3, 1e-3), r=1.0, v_leak=0.0, v_threshold=1.0, v_reset=0.0)
    state = lif.state_dict()
    with pytest.raises(nirbridge.ParameterError, match=r"LIF: state_dict entry 'tau' holds NaN"):
        lif.load_state_dict({**state, "tau": torch.full((3,), float("nan"), dtype=state["tau"].dtype)})
    with pytest.raises(nirbridge.ParameterError, match=r"'tau' holds time constants of 0"):
        lif.load_state_dict({**state, "tau": torch.zeros(3, dtype=state["tau"].dtype)})
    delay = Delay(np.full(3, 1e-3), dt=1e-4)
    with pytest.raises(
        nirbridge.ParameterError, match=r"Delay: state_dict entry 'delay' holds negative delays"
    ):
        delay.load_state_dict({"delay": torch.full((3,), -1.0, dtype=torch.float64)})

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
        outs.append(out.detach().numpy())
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


# ----------------------------------------------------------------------------- trainable time constants

TAUS = {LI: ("tau",), LIF: ("tau",), CubaLI: ("tau_syn", "tau_mem"), CubaLIF: ("tau_syn", "tau_mem")}


def _population(cls):
    taus = {name: np.array([2e-4, 5e-4, 1e-3]) * (i + 1) for i, name in enumerate(TAUS[cls])}
    extra = {"v_threshold": np.array([0.2, 0.3, 0.25])} if cls in (LIF, CubaLIF) else {}
    return cls(**taus, **extra, r=np.array([1.0, 2.0, 3.0]), dt=DT).double()


@pytest.mark.parametrize("cls", [LI, LIF, CubaLI, CubaLIF])
def test_trainable_time_constants_train_in_log_space_and_start_exactly_at_tau(cls):
    plain, trained = _population(cls), _population(cls)
    trained.make_trainable(True)
    names = [n for n, _ in trained.named_parameters()]
    assert names == [f"{n}_log" if n in TAUS[cls] else n for n in cls.params]  # NIR field order
    assert all(trained.get_parameter(f"{n}_log").eq(0).all() for n in TAUS[cls])
    for name in TAUS[cls]:
        assert torch.equal(getattr(trained, name), getattr(plain, name))  # ref * exp(0), exactly
    assert "log-space: " + ", ".join(TAUS[cls]) in repr(trained)
    xs = np.random.default_rng(1).uniform(0, 3, (30, 2, 3))
    np.testing.assert_array_equal(run(trained, xs)[0], run(plain, xs)[0])
    # state_dict: tau itself under its NIR name, the keys and order of an untrained module
    assert list(trained.state_dict()) == list(plain.state_dict()) == list(cls.params)
    for name in TAUS[cls]:
        assert torch.equal(trained.state_dict()[name], plain.state_dict()[name])
    # the gradient of log tau is tau times tau's (the chain rule), and reaches every tau
    by_hand = _population(cls)
    for name in TAUS[cls]:
        by_hand.register_parameter(name, torch.nn.Parameter(by_hand._buffers.pop(name)))
    x = torch.from_numpy(xs)
    for module in (trained, by_hand):
        out, state, _ = module.scan(x)
        (out.sum() + state.v.sum()).backward()  # spikes reach it through the surrogate
    for name in TAUS[cls]:
        tau, grad = getattr(by_hand, name), getattr(by_hand, name).grad
        assert grad.abs().sum() > 0
        torch.testing.assert_close(trained.get_parameter(f"{name}_log").grad, tau.detach() * grad)


@pytest.mark.parametrize("optimiser", ["adam", "sgd"])
def test_no_optimiser_step_makes_a_time_constant_zero_or_negative(optimiser):
    lif = CubaLIF(tau_syn=np.full(4, 2e-4), tau_mem=np.full(4, 2e-4), dt=DT)
    lif.make_trainable(("tau_syn", "tau_mem"))
    params = [lif.tau_syn_log, lif.tau_mem_log]
    opt = torch.optim.Adam(params, lr=1e-3) if optimiser == "adam" else torch.optim.SGD(params, lr=1.0)
    for _ in range(3):
        opt.zero_grad()
        (1e30 * (lif.tau_syn.sum() + lif.tau_mem.sum())).backward()  # huge: pushes tau down
        opt.step()
        for tau in (lif.tau_syn, lif.tau_mem):
            assert bool((tau > 0).all()) and bool(torch.isfinite(tau).all()), tau
    if optimiser == "adam":  # Adam moves log tau by about lr a step: tau by about 0.1 %
        torch.testing.assert_close(
            lif.tau_mem, torch.full((4,), 2e-4 * np.exp(-3e-3), dtype=torch.float64), rtol=1e-4, atol=0
        )
    node = lif.to_nir()
    assert (node.tau_mem > 0).all() and np.array_equal(node.tau_mem, lif.tau_mem.detach().numpy())


def test_trained_time_constants_load_save_and_set_as_tau():
    trained = _population(CubaLIF)
    trained.make_trainable(("tau_mem", "v_threshold"))
    with torch.no_grad():
        trained.tau_mem_log.add_(torch.tensor([0.5, -0.25, 0.125], dtype=torch.float64))
    tau = trained.tau_mem.detach().clone()
    saved = trained.state_dict()
    assert torch.equal(saved["tau_mem"], tau) and not saved["tau_mem"].requires_grad
    xs = np.random.default_rng(2).uniform(0, 3, (30, 2, 3))
    want = run(trained, xs)[0]
    # into an untrained module, then into a trainable one: tau = ref, log = 0, the same outputs
    into = _population(CubaLIF)
    into.load_state_dict(saved)
    assert torch.equal(into.tau_mem, tau)
    np.testing.assert_array_equal(run(into, xs)[0], want)
    into.make_trainable(("tau_mem",))
    into.load_state_dict(saved)
    assert torch.equal(into.tau_mem, tau) and torch.equal(into.tau_mem_ref, tau)
    assert into.tau_mem_log.eq(0).all()
    np.testing.assert_array_equal(run(into, xs)[0], want)
    # a scalar tau broadcasts as into a buffer; NaN, 0 and (in log space) negative refused
    trained.load_state_dict({**saved, "tau_mem": torch.tensor(3e-4, dtype=torch.float64)})
    assert torch.equal(trained.tau_mem, torch.full((3,), 3e-4, dtype=torch.float64))
    for bad, says in [
        (float("nan"), r"CubaLIF: state_dict entry 'tau_mem' holds NaN"),
        (0.0, r"'tau_mem' holds time constants of 0"),
        (-1e-3, r"'tau_mem' holds time constants below 0, and this module trains tau_mem as log"),
    ]:
        with pytest.raises(nirbridge.ParameterError, match=says):
            trained.load_state_dict({**saved, "tau_mem": torch.full((3,), bad, dtype=torch.float64)})
    assert torch.equal(trained.tau_mem, torch.full((3,), 3e-4, dtype=torch.float64))  # unchanged
    # a missing or misshapen tau is reported under its NIR name
    missing = trained.load_state_dict({k: v for k, v in saved.items() if k != "tau_mem"}, strict=False)
    assert missing.missing_keys == ["tau_mem"] and missing.unexpected_keys == []
    with pytest.raises(RuntimeError, match=r"size mismatch for tau_mem: .* shape torch.Size\(\[2\]\)"):
        trained.load_state_dict({**saved, "tau_mem": torch.ones(2, dtype=torch.float64)})
    # setting tau re-anchors it; 0 and negative values are refused
    trained.tau_mem = torch.full((3,), 7e-4, dtype=torch.float64)
    assert torch.equal(trained.tau_mem, torch.full((3,), 7e-4, dtype=torch.float64))
    assert trained.tau_mem_log.eq(0).all() and isinstance(trained.tau_mem_log, torch.nn.Parameter)
    with pytest.raises(nirbridge.ParameterError, match=r"CubaLIF.tau_mem = ...: tau_mem trains as log"):
        trained.tau_mem = torch.zeros(3, dtype=torch.float64)


def test_trainable_modules_copy_pickle_and_move():
    import copy
    import pickle

    lif = _population(LIF)
    lif.make_trainable(("tau", "v_threshold"))
    with torch.no_grad():
        lif.tau_log.fill_(0.3)
    for again in (copy.deepcopy(lif), pickle.loads(pickle.dumps(lif))):
        assert torch.equal(again.tau, lif.tau) and isinstance(again.tau_log, torch.nn.Parameter)
    single = copy.deepcopy(lif).float()
    assert single.tau.dtype == torch.float32 and single.tau_ref.dtype == torch.float32


def test_a_time_constant_at_or_below_zero_cannot_be_made_trainable():
    with (
        nirbridge.neurons.modules.values_checked()
    ):  # as nir_to_torch(..., allow_negative_tau=True) builds it
        lif = LIF(tau=np.array([1e-3, -2e-3]), dt=DT)
    with pytest.raises(
        nirbridge.ParameterError, match=r"LIF: tau holds values at or below 0 \(lowest -0.002\)"
    ):
        lif.make_trainable(("tau", "v_threshold"))
    assert list(dict(lif.named_parameters())) == []  # nothing changed
    lif.make_trainable(("v_threshold",))
    assert list(dict(lif.named_parameters())) == ["v_threshold"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("tau", 0.0), ("tau", float("nan")), ("tau", -1e-3), ("r", float("inf")), ("v_threshold", float("nan"))],
)
def test_a_neuron_built_by_hand_refuses_what_nir_to_torch_refuses(field, value):
    """nirbridge.neurons.LIF(tau=0.0) used to run and spike at every step with v = NaN."""
    fields = dict(tau=1e-3, r=1.0, v_leak=0.0, v_threshold=1.0, v_reset=0.0)
    fields[field] = value
    with pytest.raises(nirbridge.ParameterError, match=f"LIF: {field}"):
        nirbridge.neurons.LIF(**fields)


@pytest.mark.parametrize(
    ("neuron", "fields"),
    [
        (nirbridge.neurons.I(), "IState\\(v\\)"),
        (nirbridge.neurons.LIF(tau=1e-2), "IState\\(v\\)"),
        (nirbridge.neurons.CubaLIF(tau_syn=1e-2, tau_mem=1e-2), "CubaLIState\\(i, v\\)"),
        (nirbridge.neurons.Delay(delay=3e-4, dt=1e-4), "DelayState\\(history\\)"),
    ],
)
def test_a_state_of_another_form_is_named(neuron, fields):
    """A hand-built neuron given ``state=5`` raised Python's AttributeError."""
    x = torch.ones(2, 3)
    for wrong in (5, (torch.zeros(2, 3),), {"v": torch.zeros(2, 3)}):
        with pytest.raises(
            nirbridge.StateError, match=f"state is of type {type(wrong).__name__}; pass the {fields}"
        ):
            neuron(x, state=wrong)
    out, state = neuron(x)
    assert neuron(x, state)[0].shape == out.shape  # its own state still runs

"""Training imported networks as docs/training.md says: truncated BPTT with trainable
neuron parameters keeps time constants positive and finite, and what was trained
exports and reloads exactly."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map

import nirbridge
from nirbridge.neurons import functional
from nirbridge.neurons.modules import TIME_CONSTANTS, Neuron
from tests.conftest import EXAMPLES

BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"  # CubaLIF, tau about 2e-4 s
TRAINABLE = ("tau_mem", "tau_syn", "v_threshold")
WINDOWS, STEPS, BATCH = 40, 25, 8
DOCS = Path(__file__).resolve().parent.parent / "docs" / "training.md"


def neuron_values(gm: torch.nn.Module, names: tuple[str, ...] = TRAINABLE) -> dict[str, torch.Tensor]:
    """``{"lif1.lif.tau_mem": tensor, ...}`` of every nirbridge neuron, detached."""
    return {
        f"{path}.{name}": getattr(module, name).detach().clone()
        for path, module in gm.named_modules()
        if isinstance(module, Neuron)
        for name in names
        if name in module.params
    }


@pytest.fixture(scope="module")
def one_thread():
    # tiny matrix products: one thread is fastest, and steady when other work shares the cores
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(one_thread):
    """The Braille SRNN after docs/training.md's recipe: Adam at lr 1e-3, truncated BPTT
    over 40 windows of 25 steps, the state detached between windows."""
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, trainable=TRAINABLE)
    initial = neuron_values(gm)
    data = torch.Generator().manual_seed(0)
    x = (torch.rand(WINDOWS * STEPS, BATCH, 12, generator=data) < 0.3).float()
    target = torch.randint(0, 7, (BATCH,), generator=data)
    optimiser = torch.optim.Adam(gm.parameters(), lr=1e-3)
    state, windows = None, []
    for window in x.split(STEPS):
        result = nirbridge.run(gm, window, state=state)
        loss = torch.nn.functional.cross_entropy(result.output.sum(0), target)
        optimiser.zero_grad()
        loss.backward()
        tau_grads = [p.grad.abs().sum().item() for n, p in gm.named_parameters() if n.endswith("_log")]
        optimiser.step()
        state = tree_map(torch.Tensor.detach, result.state)
        windows.append(
            {
                "loss": loss.item(),
                "tau_grad": sum(tau_grads),
                "taus": neuron_values(gm, ("tau_mem", "tau_syn")),
                "finite": all(bool(torch.isfinite(p).all()) for p in gm.parameters()),
            }
        )
    return gm, initial, windows


def test_the_recipe_keeps_time_constants_finite_and_positive(trained):
    gm, initial, windows = trained
    assert len(windows) == WINDOWS
    for k, window in enumerate(windows):
        assert np.isfinite(window["loss"]) and window["finite"], f"window {k}: {window}"
        for name, tau in window["taus"].items():
            assert bool(torch.isfinite(tau).all()) and bool((tau > 0).all()), f"window {k}: {name} = {tau}"
    # the test means something: gradients reached the time constants, and they moved
    assert all(window["tau_grad"] > 0 for window in windows)
    final = neuron_values(gm)
    moved = max(float(((final[n] - initial[n]) / initial[n]).abs().max()) for n in initial if "tau" in n)
    assert 1e-3 < moved < 0.1  # Adam moves log tau by about lr a step: at most ~4 % over 40 steps
    assert any(not torch.equal(final[n], initial[n]) for n in initial if n.endswith("v_threshold"))


def test_a_trained_module_exports_its_positive_time_constants(trained, tmp_path, one_thread):
    gm, _, _ = trained
    graph = nirbridge.torch_to_nir(gm)
    values = neuron_values(gm)
    for key, value in values.items():
        path, name = key.rsplit(".", 1)
        exported = getattr(graph.nodes[path], name)
        np.testing.assert_array_equal(exported, value.numpy())
        if name in TIME_CONSTANTS:
            assert (exported > 0).all()
    # written and read back, it runs as the trained module does
    nirbridge.write(tmp_path / "trained.nir", graph)
    again = nirbridge.nir_to_torch(tmp_path / "trained.nir")
    x = (torch.rand(60, 3, 12, generator=torch.Generator().manual_seed(5)) < 0.3).float()
    with torch.no_grad():
        want = nirbridge.run(gm, x).output
        assert torch.equal(nirbridge.run(again, x).output, want)
    assert want.sum() > 0


@pytest.mark.parametrize("trainable", [(), TRAINABLE])
def test_a_trained_state_dict_loads_into_a_fresh_import(trained, trainable, one_thread):
    gm, _, _ = trained
    saved = gm.state_dict()
    assert "lif1.lif.tau_mem" in saved and not any(k.endswith(("_log", "_ref")) for k in saved)
    fresh = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, trainable=trainable)
    assert list(fresh.state_dict()) == list(saved)
    fresh.load_state_dict(saved)
    for key, value in neuron_values(gm).items():
        assert torch.equal(neuron_values(fresh)[key], value), key
    x = (torch.rand(60, 3, 12, generator=torch.Generator().manual_seed(6)) < 0.3).float()
    with torch.no_grad():
        want, got = nirbridge.run(gm, x), nirbridge.run(fresh, x)
    assert torch.equal(got.output, want.output) and want.output.sum() > 0
    assert all(
        torch.equal(a, b) for a, b in zip(tree_leaves(got.state), tree_leaves(want.state), strict=True)
    )


def test_the_docs_parameter_groups_select_the_time_constants_by_name():
    """The per-parameter-group block of docs/training.md, run as a reader would copy it."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    (block,) = [b for b in blocks if "time_constants = " in b]
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, trainable=TRAINABLE)
    scope = {"gm": gm, "torch": torch, "nirbridge": nirbridge}
    exec(block, scope)  # the documentation's own code
    groups = scope["optimiser"].param_groups
    names = {id(p): n for n, p in gm.named_parameters()}
    chosen = sorted(names[id(p)] for p in groups[1]["params"])
    assert chosen == ["lif1.lif.tau_mem_log", "lif1.lif.tau_syn_log", "lif2.tau_mem_log", "lif2.tau_syn_log"]
    assert groups[1]["lr"] == 1e-2 and groups[0]["lr"] == 1e-3
    assert len(groups[0]["params"]) + len(chosen) == len(names)


def test_a_surrogate_alpha_set_at_run_time_reaches_eager_and_triton(monkeypatch, one_thread):
    """``functional.SURROGATE_ALPHA`` is read when spikes are computed: the eager steps
    and the Triton kernels' reverse pass (lif2 runs as a kernel) both follow it."""
    data = torch.Generator().manual_seed(1)
    x = (torch.rand(30, 4, 12, generator=data) < 0.3).double()
    target = torch.randint(0, 7, (4,), generator=data)
    grads = {}
    for alpha in (functional.SURROGATE_ALPHA, 20.0):
        monkeypatch.setattr(functional, "SURROGATE_ALPHA", alpha)
        for backend in ("eager", "triton"):
            gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, dtype=torch.float64, trainable=TRAINABLE)
            out = nirbridge.run(gm, x, backend=backend).output
            torch.nn.functional.cross_entropy(out.sum(0), target).backward()
            grads[alpha, backend] = {n: p.grad for n, p in gm.named_parameters()}
    for alpha in (100.0, 20.0):
        for name, grad in grads[alpha, "eager"].items():
            assert torch.allclose(grads[alpha, "triton"][name], grad, rtol=1e-9, atol=1e-12), (alpha, name)
    changed = [n for n, g in grads[100.0, "eager"].items() if not torch.allclose(g, grads[20.0, "eager"][n])]
    assert "lif2.tau_mem_log" in changed and "lif2.v_threshold" in changed


def test_every_back_end_runs_trained_time_constants_exactly(one_thread):
    """tau = tau_ref * exp(tau_log) off its imported value: eager, compile and triton
    agree bit for bit (compiled code gets tau computed eagerly: inductor's exp rounds
    differently from torch's on 38 neurons)."""
    gm = nirbridge.nir_to_torch(BRAILLE, dt=1e-4, trainable=TRAINABLE)
    shifts = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, parameter in gm.named_parameters():
            if name.endswith("_log"):
                parameter.uniform_(-0.5, 0.5, generator=shifts)
    x = (torch.rand(60, 4, 12, generator=torch.Generator().manual_seed(5)) < 0.3).float()
    with torch.no_grad():
        runs = {backend: nirbridge.run(gm, x, backend=backend) for backend in ("eager", "compile", "triton")}
    want = runs["eager"]
    assert want.output.sum() > 0
    for backend, got in runs.items():
        assert torch.equal(got.output, want.output), backend
        assert all(
            torch.equal(a, b) for a, b in zip(tree_leaves(got.state), tree_leaves(want.state), strict=True)
        )

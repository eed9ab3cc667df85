"""nirbridge.engine.precision: full float32 inside every call, the user's flags kept."""

from __future__ import annotations

import threading
import warnings
from typing import ClassVar

import nir
import numpy as np
import pytest
import torch

import nirbridge
from nirbridge.engine import precision as P
from nirbridge.engine.compile import compile_options
from nirbridge.interpret import DEFAULT_MAP
from tests.graphs import affine_lif

OPS = [(b, o) for b in ("generic", "cuda", "mkldnn") for o in ("all", "matmul", "conv", "rnn")]
OPS.remove(("generic", "matmul"))
OPS.remove(("generic", "conv"))
OPS.remove(("generic", "rnn"))


def settings() -> dict:
    """Every float32 precision setting torch keeps, new API and legacy reads."""
    found = {op: torch._C._get_fp32_precision_getter(*op) for op in OPS}
    found["matmul_precision"] = torch.get_float32_matmul_precision()
    found["cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
    found["cuda.matmul.allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    return found


@pytest.fixture
def user_flags():
    """The user has asked for TF32 everywhere (torch's "medium": bf16 matmuls on oneDNN);
    torch's defaults come back afterwards."""
    before = settings()
    torch.set_float32_matmul_precision("medium")
    torch.backends.cudnn.allow_tf32 = True
    chosen = settings()
    assert chosen["mkldnn", "matmul"] == "bf16" and chosen["cuda", "matmul"] == "tf32"
    yield chosen
    torch.set_float32_matmul_precision(before["matmul_precision"])
    for op in OPS:
        torch._C._set_fp32_precision_setter(*op, before[op])
    assert settings() == before


class Probe(torch.nn.Module):
    """An Affine stand-in that notes the precision settings in force when it runs."""

    seen: ClassVar[list[dict]] = []

    def __init__(self, node: nir.Affine, fail: bool = False) -> None:
        super().__init__()
        self.inner = DEFAULT_MAP[nir.Affine](node)
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Probe.seen.append({**settings(), "policy": P.active()})
        if self.fail:
            raise RuntimeError("a failure inside the call")
        return self.inner(x)


def build(fail: bool = False) -> torch.nn.Module:
    return nirbridge.nir_to_torch(
        affine_lif(np.random.default_rng(0)), node_map={nir.Affine: lambda node: Probe(node, fail)}
    )


def test_a_module_call_computes_in_full_float32_and_restores_the_flags(user_flags):
    gm, Probe.seen[:] = build(), []
    gm(torch.rand(2, 3))
    (inside,) = Probe.seen
    assert inside["policy"] == "exact"
    assert inside["matmul_precision"] == "highest"
    assert inside["mkldnn", "matmul"] == "ieee" and inside["mkldnn", "conv"] == "ieee"
    assert settings() == user_flags


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
def test_run_computes_in_full_float32_on_every_device_kind_and_restores_the_flags(user_flags):
    gm, Probe.seen[:] = build(), []
    nirbridge.run(gm, torch.rand(10, 2, 3))
    assert Probe.seen and all(s["policy"] == "exact" for s in Probe.seen)
    assert all(s["mkldnn", "matmul"] == "ieee" for s in Probe.seen)
    with P.precision("exact"):  # no device named: CUDA's settings too
        inside = settings()
    assert inside["cuda", "conv"] == "ieee" and inside["cuda", "matmul"] == "ieee"
    assert inside["cudnn.allow_tf32"] is False and inside["cuda.matmul.allow_tf32"] is False
    assert settings() == user_flags


@pytest.mark.filterwarnings("ignore::nirbridge.SilentNetworkWarning")  # exactness, not activity
def test_fast_opts_into_tf32_and_contraction_and_inner_calls_keep_it(user_flags):
    gm, Probe.seen[:] = build(), []
    nirbridge.run(gm, torch.rand(5, 2, 3), precision="fast")
    assert all(s["policy"] == "fast" for s in Probe.seen)  # the module's own call kept run's policy
    with nirbridge.precision("fast"):
        inside = settings()
        assert P.contract()
        gm(torch.rand(2, 3))
    assert inside["cuda", "conv"] == "tf32" and inside["cuda", "matmul"] == "tf32"
    assert Probe.seen[-1]["policy"] == "fast"
    assert settings() == user_flags
    assert not P.contract() and P.active() is None


def test_a_policy_holds_in_its_own_thread_only():
    """The policy in force is per thread, as a context manager's scope is."""
    seen = {}
    with nirbridge.precision("fast"):
        worker = threading.Thread(target=lambda: seen.update(worker=P.active()))
        worker.start()
        worker.join()
        seen["here"] = P.active()
    assert seen == {"worker": None, "here": "fast"}
    assert P.active() is None


def test_interleaved_policies_of_two_tasks_leave_the_settings_as_they_were(user_flags):
    """torch's settings are the process's: task A enters "fast", task B "exact", A
    leaves first, then B. B's exit used to put back what it found (A's TF32), which
    then stayed on for everything after."""
    import asyncio

    async def hold(mode, entered, release):
        with nirbridge.precision(mode):
            entered.set()
            await release.wait()

    async def interleave():
        a_in, b_in, a_out, b_out = (asyncio.Event() for _ in range(4))
        a = asyncio.create_task(hold("fast", a_in, a_out))
        await a_in.wait()
        b = asyncio.create_task(hold("exact", b_in, b_out))
        await b_in.wait()
        a_out.set()
        await a
        assert P.active() is None  # this task entered nothing
        b_out.set()
        await b

    asyncio.run(interleave())
    assert settings() == user_flags


def test_the_flags_are_restored_when_the_call_raises(user_flags):
    gm = build(fail=True)
    with pytest.raises(RuntimeError, match="inside the call"):
        gm(torch.rand(2, 3))
    with pytest.raises(RuntimeError, match="inside the call"):
        nirbridge.run(gm, torch.rand(4, 2, 3))
    assert settings() == user_flags
    assert P.active() is None


def test_default_settings_are_left_untouched_on_the_cpu():
    before = settings()
    token = P.enter("exact", "cpu")
    try:
        assert settings() == before  # already full float32 there: nothing changed
    finally:
        P.leave(token)
    assert settings() == before


def test_the_legacy_flags_of_older_torch_are_set_and_restored(user_flags):
    saved = P._apply_legacy("exact", ("cpu", "cuda"))
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cudnn.allow_tf32 is False
    P._restore(saved)
    assert torch.get_float32_matmul_precision() == "medium"
    assert torch.backends.cudnn.allow_tf32 is True


def test_compiled_kernels_are_built_without_contraction_unless_fast():
    exact, fast = compile_options("exact"), compile_options("fast")
    assert exact["cpp.enable_floating_point_contract_flag"] == "off"
    assert exact["emulate_precision_casts"] is True  # Triton: enable_fp_fusion=False
    assert exact["cpp_wrapper"] is True and compile_options("exact", False)["cpp_wrapper"] is False
    assert fast["cpp.enable_floating_point_contract_flag"] == "fast"
    assert "emulate_precision_casts" not in fast


def test_an_unknown_policy_is_named():
    with pytest.raises(nirbridge.ParameterError, match=r"run\(precision='tf32'\).*'exact'.*'fast'"):
        nirbridge.run(build(), torch.rand(3, 2, 3), precision="tf32")
    with pytest.raises(nirbridge.ParameterError, match="nirbridge.precision"):
        with nirbridge.precision("half"):
            pass


DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
FILES = {
    "NIR__paper__02_cnn__cnn_sinabs.nir": 1.0,
    "spyx__docs__examples__nir__scnn__scnn_mnist.nir": 1.0,
    "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir": 1e-4,
}


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("device", DEVICES)
def test_example_files_run_exactly_like_stepping_with_tf32_asked_for(name, device, user_flags):
    """With the user's flags asking for TF32 (on CUDA, cuDNN's default), a time-batched
    run folds steps into the batch axis and would differ from stepping; under the
    policy both compute in full float32, on the CPU and where torch sees a GPU."""
    from tests.conftest import EXAMPLES, input_names

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.RepairWarning)
        graph = nirbridge.read(EXAMPLES / name)
        gm = nirbridge.nir_to_torch(graph, dt=FILES[name], device=device)
    shape = tuple(int(v) for v in graph.nodes[input_names(graph)[0]].input_type["input"])
    x = (torch.rand((12, 16, *shape), generator=torch.Generator().manual_seed(1)) < 0.3).float().to(device)
    with torch.no_grad():
        result = nirbridge.run(gm, x)
        state, outs = None, []
        for t in range(x.shape[0]):
            out, state = gm(x[t], state)
            outs.append(out)
    assert torch.equal(result.output, torch.stack(outs))
    assert settings() == user_flags

"""nirbridge.engine.schedule: the plan of a run and the length of its chunks."""

from __future__ import annotations

import warnings

import pytest
import torch

import nirbridge
from nirbridge.engine import schedule
from nirbridge.engine.schedule import (
    CACHE_BYTES,
    CHUNK_ROWS,
    CPU_CHUNK_ROWS,
    chunk_length,
    level_of,
    step_bytes,
)
from tests.conftest import EXAMPLES
from tests.graphs import affine_lif

CNN = EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir"
SRNN = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"


def test_chunk_length_follows_what_a_chunk_costs():
    # a convolution's 16x16x16 feature maps at batch 32: 512 KiB a step, so 8 steps
    assert chunk_length(32 * 16 * 16 * 16 * 4, 32, 300) == CACHE_BYTES // (512 << 10) == 8
    # small dense layers at batch 32: as many rows as one operation gains from
    assert chunk_length(32 * 128 * 4, 32, 500) == CHUNK_ROWS // 32 == 128
    # one sample: long chunks, never longer than the run
    assert chunk_length(128 * 4, 1, 500) == 500
    assert chunk_length(4, 1, 10**6) == CHUNK_ROWS == 4096
    # a step larger than the cache share still runs, one step at a time
    assert chunk_length(64 << 20, 256, 100) == 1
    # the CPU back-end: more rows a chunk while they fill half the cache share
    assert chunk_length(32 * 38 * 4, 32, 500, cpu=True) == CACHE_BYTES // (32 * 38 * 4) // 2 == 431
    assert chunk_length(256 * 38 * 4, 256, 500, cpu=True) == CACHE_BYTES // (256 * 38 * 4) // 2 == 53
    assert chunk_length(16 * 38 * 4, 16, 500, cpu=True) == 500
    assert chunk_length(4, 1, 10**6, cpu=True) == CPU_CHUNK_ROWS
    assert chunk_length(32 * 128 * 4, 32, 500, cpu=True) == 128  # the dense chain: as before
    assert chunk_length(32 * 16 * 16 * 16 * 4, 32, 300, cpu=True) == 8


def test_a_cpu_run_takes_the_cpu_chunk_length(monkeypatch):
    """run's chunks follow the back-end that runs them (seen by the chunk lengths the
    stepper gets), and on the CPU back-end a last chunk of at most a quarter of the
    length joins the one before it."""
    from nirbridge.engine import cpu

    lengths = []
    real = cpu.cpu_stepper

    def counting(*args):
        stepper = real(*args)
        return lambda xs, state: lengths.append(next(iter(xs.values())).shape[0]) or stepper(xs, state)

    monkeypatch.setattr(cpu, "cpu_stepper", counting)
    gm = nirbridge.nir_to_torch(nirbridge.read(SRNN), dt=1e-4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        for steps, expected in ((600, [431, 169]), (431 + 108, [431, 108]), (431 + 107, [538]), (500, [500])):
            lengths.clear()
            nirbridge.run(gm, torch.zeros(steps, 32, 12))
            assert lengths == expected
        nirbridge.run(gm, torch.zeros(600, 32, 12), backend="eager")
    assert lengths == [500]  # the eager back-end is not the cpu stepper


def test_step_bytes_come_from_the_declared_shapes():
    gm = nirbridge.nir_to_torch(CNN, dt=1.0)
    level = level_of(gm)
    assert level.widths["0"] == 16 * 16 * 16 and level.widths["12"] == 10
    assert step_bytes(level, 32, 4) == 32 * 16 * 16 * 16 * 4
    level.widths["0"] = None  # an undeclared shape: measured from the first chunk instead
    assert step_bytes(level, 32, 4) is None


def test_run_uses_the_chosen_chunk_and_measures_where_shapes_are_unknown(monkeypatch):
    gm = nirbridge.nir_to_torch(CNN, dt=1.0)
    calls = []
    gm.get_submodule("0").register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    x = (torch.rand(20, 2, 2, 34, 34) < 0.3).float()
    with torch.no_grad():
        reference = nirbridge.run(gm, x, chunk=1).output
        calls.clear()
        result = nirbridge.run(gm, x)  # batch 2: 32 KiB a step -> 128 steps, all 20 at once
    assert calls == [20 * 2]
    assert torch.equal(result.output, reference)

    monkeypatch.setattr(schedule, "CACHE_BYTES", 3 * 2 * 16 * 16 * 16 * 4)  # room for 3 steps
    calls.clear()
    with torch.no_grad():
        nirbridge.run(gm, x)
    assert calls == [6] * 6 + [4]  # 3 steps of batch 2 per call: 20 = 6 x 3 + 2

    del gm.meta["nirbridge"]["widths"]  # shapes not declared: 4 steps measure the largest value
    calls.clear()
    with torch.no_grad():
        assert torch.equal(nirbridge.run(gm, x).output, reference)
    assert calls == [8] + [6] * 5 + [2]


@pytest.mark.parametrize("backend", ["eager", "auto"])
def test_backends_give_the_same_values(backend, rng):
    graph = affine_lif(rng)
    gm = nirbridge.nir_to_torch(graph)
    x = torch.from_numpy(rng.uniform(0, 2, (30, 2, 3))).float()
    with torch.no_grad():
        assert torch.equal(nirbridge.run(gm, x, backend=backend).output, nirbridge.run(gm, x, chunk=1).output)

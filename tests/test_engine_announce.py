"""nirbridge.engine.announce: a compile longer than about a second says so once, on
stderr, with where it is cached; quick work and cached kernels say nothing."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

from nirbridge.engine import announce

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCRIPT = r"""
import numpy as np, torch, nirbridge
from tests.conftest import EXAMPLES
gm = nirbridge.nir_to_torch(str(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"), dt=1e-4)
x = (torch.rand(50, 2, 12, generator=torch.Generator().manual_seed(0)) < 0.3).float()
nirbridge.run(gm, x, backend="cpu")
nirbridge.run(gm, x, backend="cpu")
print("ran")
"""


def run_script(cache: pathlib.Path) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    environment.update(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0 and done.stdout.strip() == "ran", done.stderr[-3000:]
    return done.stderr


def test_the_cpu_back_end_says_once_that_it_compiles_and_then_loads_in_silence(tmp_path):
    first = run_script(tmp_path / "cache")
    said = [line for line in first.splitlines() if "compiling the CPU back-end's kernels" in line]
    assert len(said) == 1, first
    assert said[0].startswith("nirbridge: ") and str(tmp_path / "cache") in said[0]
    second = run_script(tmp_path / "cache")  # read from numba's cache: quick, so nothing is said
    assert "compiling" not in second, second


def test_a_slow_block_is_announced_once_and_a_quick_one_never(capsys):
    with announce.if_slow("test-quick", "quick work"):
        pass
    time.sleep(0.2)
    for _ in range(2):
        with announce.if_slow("test-slow", "slow work", after=0.05):
            time.sleep(0.3)
    err = capsys.readouterr().err
    assert err.splitlines() == ["nirbridge: slow work"]


def test_only_nirbridge_s_own_kernels_count_as_its_compiles():
    import numba

    from nirbridge.engine import cpu_kernels

    @numba.njit
    def users_own(x):
        return x + 1

    kernel = next(v for v in vars(cpu_kernels).values() if hasattr(v, "py_func"))

    class Event:
        def __init__(self, dispatcher):
            self.data = {"dispatcher": dispatcher}

    assert announce._NumbaCompiles.ours(Event(kernel))
    assert not announce._NumbaCompiles.ours(Event(users_own))
    assert not announce._NumbaCompiles.ours(Event(None))

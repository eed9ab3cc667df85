"""nirbridge.engine.jit: a damaged, foreign or unwritable numba cache never breaks a run.

Each case runs in a fresh process with ``NUMBA_CACHE_DIR`` in a temporary folder (numba's
own switch), so that the cache is really written, damaged on disk, and read back."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# a run with gradients (the scan and its reverse kernel) on the CPU back-end and eagerly;
# prints whether they agree and every CompileWarning, as JSON
SCRIPT = r"""
import json, warnings
import nir, numpy as np, torch, nirbridge
graph = nir.NIRGraph.from_list(
    nir.Affine(weight=np.linspace(-1, 2, 8).reshape(4, 2), bias=np.zeros(4)),
    nir.LIF(tau=np.full(4, 1e-3), r=np.full(4, 10.0), v_leak=np.zeros(4),
            v_threshold=np.ones(4), v_reset=np.zeros(4)),
)
gm = nirbridge.nir_to_torch(graph, dt=1e-4)
x = torch.from_numpy(np.random.default_rng(0).uniform(0, 3, (40, 3, 2))).float()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = nirbridge.run(gm, x.clone().requires_grad_(True), backend="cpu")
    got.output.sum().backward()
    expected = nirbridge.run(gm, x, backend="eager").output
print(json.dumps({
    "equal": bool(torch.equal(got.output.detach(), expected)),
    "spikes": float(expected.sum()),
    "warnings": [str(w.message) for w in caught if issubclass(w.category, nirbridge.CompileWarning)],
}))
"""


def run(cache: pathlib.Path, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    environment.update(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **env)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["equal"] and result["spikes"] > 0, result
    return result


def files(cache: pathlib.Path, kernel: str, suffix: str) -> list[pathlib.Path]:
    found = sorted(p for p in cache.rglob(f"cpu_kernels.{kernel}-*{suffix}"))
    assert found, f"numba cached no {kernel} {suffix} in {cache}: {sorted(cache.rglob('*'))}"
    return found


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> pathlib.Path:
    """A cache that a clean run wrote, without a word."""
    cache = tmp_path_factory.mktemp("warm")
    assert run(cache)["warnings"] == []
    return cache


def damaged(warm: pathlib.Path, tmp_path: pathlib.Path, damage) -> pathlib.Path:
    cache = tmp_path / "cache"
    subprocess.run(["cp", "-a", str(warm), str(cache)], check=True)
    damage(cache)
    return cache


def truncate(cache):
    for path in files(cache, "_scan", ".nbc"):
        path.write_bytes(path.read_bytes()[:100])


def garbage_index(cache):
    for path in files(cache, "_scan", ".nbi"):
        path.write_bytes(os.urandom(500))


def empty_files(cache):
    for path in [*files(cache, "_scan", ".nbi"), *files(cache, "_scan", ".nbc")]:
        path.write_bytes(b"")


def pipe(cache):
    """A named pipe in place of the index: numba's read of it would block for ever."""
    for path in files(cache, "_scan", ".nbi"):
        path.unlink()
        os.mkfifo(path)


def swapped(cache):
    """The scan's data file replaced by its reverse kernel's: numba loads it as the scan."""
    (forward,), (backward,) = files(cache, "_scan", ".nbc"), files(cache, "_scan_backward", ".nbc")
    forward.write_bytes(backward.read_bytes())


@pytest.mark.parametrize("damage", [truncate, garbage_index, empty_files, pipe, swapped])
def test_a_damaged_cache_is_rebuilt_with_one_warning_naming_it(damage, warm, tmp_path):
    cache = damaged(warm, tmp_path, damage)
    first = run(cache)
    assert len(first["warnings"]) == 1, first["warnings"]
    (text,) = first["warnings"]
    assert str(cache) in text and "rebuilt" in text and "NUMBA_CACHE_DIR" in text, text
    if damage in (truncate, pipe, swapped):  # the next process finds the rebuilt kernel
        assert run(cache)["warnings"] == [], "the rebuilt kernel should have replaced the damaged entry"


def test_a_damaged_cache_that_cannot_be_rewritten_still_runs(warm, tmp_path):
    """A damaged index that is a folder cannot be read or replaced: every process rebuilds,
    and says so."""

    def unreadable(cache):
        for path in files(cache, "_scan", ".nbi"):
            path.unlink()
            path.mkdir()

    cache = damaged(warm, tmp_path, unreadable)
    for _ in range(2):
        texts = run(cache)["warnings"]
        assert texts and any("could not be read" in t for t in texts), texts


def test_no_writable_cache_location_runs_uncached_with_one_warning(tmp_path):
    """``NUMBA_CACHE_LOCATOR_CLASSES`` names a locator that finds nothing for a file, as
    numba finds nothing in a read-only install run by a user whose home is read-only:
    ``njit(cache=True)`` then raises at definition. The run goes on, compiled in memory."""
    result = run(tmp_path / "unused", NUMBA_CACHE_LOCATOR_CLASSES="IPythonCacheLocator")
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "no writable cache location" in result["warnings"][0]
    assert not (tmp_path / "unused").exists()


def test_numba_s_jit_switched_off_runs_the_kernels_as_python(tmp_path):
    """``NUMBA_DISABLE_JIT=1`` (numba's debugging switch) gives plain functions, which have
    no cache to guard: the run goes on, equal to the eager back-end, without a word."""
    assert run(tmp_path / "unused", NUMBA_DISABLE_JIT="1")["warnings"] == []

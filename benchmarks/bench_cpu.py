"""The CPU table of the native-speed issue: nirbridge.run's default on the CPU (the cpu
back-end, numba) against stepping, the eager back-end, the matrix products alone and
spyx 1.0's jit (its own NIR import, JAX on the CPU, in its own virtualenv), on the NIR
paper's Braille SRNN, T=500, float32, random 0/1 spikes at 0.3, one thread.

    python benchmarks/bench_cpu.py                   # B = 1, 32, 256; 9 repeats
    python benchmarks/bench_cpu.py --quick           # 3 repeats
    SPYX_PYTHON=/path/to/venv/bin/python python benchmarks/bench_cpu.py

Figures are ms per sequence, median and min-max over the repeats, the variants taking
turns within every repeat. ``run`` is timed as a notebook calls it (the imported
module's weights are parameters, so autograd keeps what a backward pass needs) and
under ``torch.no_grad()``, as spyx's jitted inference runs. spyx runs in a subprocess
(benchmarks/peer_spyx.py, its docstring says how to make its virtualenv; by default
/work/spyx-venv, or SPYX_PYTHON), before nirbridge's variants, pinned to one thread by
XLA's flags; it is left out, and the table says so, where that Python is missing. The
floor is the graph's matrix products alone: the input layer over all rows, the recurrent
layer once per step on the recorded spikes, the output layer over all rows (500 torch
calls at batch 1, which is why it is slower than ``run`` there).

First call: ``run`` once in a fresh process (after ``import nirbridge`` and building
the module), with numba's disk cache in an empty folder (cold: every kernel compiled)
and then in the same folder again (warm: loaded from the cache).

Time only on a quiet machine; the 1-minute load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

import nirbridge

ROOT = Path(__file__).resolve().parent.parent
SRNN_FILE = ROOT / "tests" / "data" / "nir-examples" / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
STEPS, RATE, DT = 500, 0.3, 1e-4
SPYX_PYTHON = os.environ.get("SPYX_PYTHON", "/work/spyx-venv/bin/python")

FIRST_CALL = """
import sys, time, torch
torch.set_num_threads(1)
import nirbridge
gm = nirbridge.nir_to_torch(nirbridge.read(sys.argv[1]), dt={dt})
x = (torch.rand(({steps}, {batch}, 12), generator=torch.Generator().manual_seed(0)) < {rate}).float()
start = time.perf_counter()
nirbridge.run(gm, x)
print(time.perf_counter() - start)
"""


def load() -> float:
    return os.getloadavg()[0]


def inputs(batch: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return (torch.rand((STEPS, batch, 12), generator=generator) < RATE).float()


def stepping(gm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    state, outs = None, []
    for x_t in x:
        out, state = gm(x_t, state)
        outs.append(out)
    return torch.stack(outs)


def floor(gm: torch.nn.Module, x: torch.Tensor, spikes: torch.Tensor) -> Callable[[], None]:
    """The matrix products alone, on the recorded spikes of the recurrent population."""

    def products() -> None:
        gm.fc1(x.reshape(-1, x.shape[-1]))
        for z in spikes:
            gm.lif1.w_rec(z)
        gm.fc2(spikes.reshape(-1, spikes.shape[-1]))

    return products


def measure(variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    for fn in variants.values():
        fn()  # first calls (compiles, probes) are not timed here
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for repeat in range(repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            start = time.perf_counter()
            variants[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def spyx(batches: list[int], repeats: int) -> dict | None:
    if not Path(SPYX_PYTHON).exists():
        return None
    command = [SPYX_PYTHON, str(ROOT / "benchmarks" / "peer_spyx.py"), "--json", "--repeats", str(repeats)]
    command += ["--steps", str(STEPS), "--batches", *map(str, batches)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode:
        print(f"spyx failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout)


def first_call(batch: int) -> tuple[float, float]:
    """Seconds of the first ``run`` in a fresh process: cold (empty numba cache), warm."""
    code = FIRST_CALL.format(dt=DT, steps=STEPS, batch=batch, rate=RATE)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        found = []
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-c", code, str(SRNN_FILE)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            found.append(float(done.stdout.strip().splitlines()[-1]))
    return found[0], found[1]


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 9)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
    print(f"load before: {load():.2f}; torch {torch.__version__}, 1 thread, T={STEPS}, float32")
    peer = spyx(args.batches, repeats)
    if peer is None:
        print(f"spyx: not run ({SPYX_PYTHON} missing: see benchmarks/peer_spyx.py)")
    gm = nirbridge.nir_to_torch(nirbridge.read(SRNN_FILE), dt=DT)
    print(f"\nBraille SRNN, ms per sequence, median (min-max) of {repeats}")
    header = f"{'B':>4} {'run (default)':>22} {'run, no_grad':>22} {'run eager':>22} {'stepping':>22}"
    header += f" {'floor':>22} {'spyx':>10}"
    print(header + "  run/spyx (no_grad)  exact")
    for batch in args.batches:
        x = inputs(batch)
        with torch.no_grad():
            spikes = nirbridge.run(gm, x, record="lif1.lif").records["lif1.lif"]
            exact = torch.equal(nirbridge.run(gm, x).output, stepping(gm, x))

        def inference(x: torch.Tensor = x) -> None:
            with torch.no_grad():
                nirbridge.run(gm, x)

        times = measure(
            {
                "run": lambda x=x: nirbridge.run(gm, x),
                "no_grad": inference,
                "eager": lambda x=x: nirbridge.run(gm, x, backend="eager"),
                "stepping": lambda x=x: stepping(gm, x),
                "floor": floor(gm, x, spikes),
            },
            repeats,
        )
        theirs = peer["ms"][str(batch)]["median"] if peer else None
        ratio = f"{statistics.median(times['run']) / theirs:8.2f}x" if theirs else "       -"
        if theirs:
            ratio += f" {statistics.median(times['no_grad']) / theirs:5.2f}x"
        row = " ".join(fmt(times[name]) for name in ("run", "no_grad", "eager", "stepping", "floor"))
        shown = f"{theirs:10.2f}" if theirs else f"{'-':>10}"
        print(f"{batch:>4} {row} {shown}  {ratio}  {exact}")
    print("\nfirst call of run in a fresh process (s): cold (empty numba cache), warm")
    for batch in args.batches:
        cold, warm = first_call(batch)
        theirs = peer["first_call_s"].get(str(batch)) if peer else None
        print(f"  B={batch:<4} cold {cold:.2f}  warm {warm:.2f}" + (f"  spyx {theirs:.2f}" if theirs else ""))
    print(f"\nload after: {load():.2f}")


if __name__ == "__main__":
    main()

"""Peer benchmark: spyx 1.0 (JAX, CPU, one thread) on the NIR paper's Braille SRNN.

Measures how long spyx takes to run one whole sequence of the NIR paper's Braille SRNN
(tests/data/nir-examples/NIR__paper__03_rnn__braille_noDelay_bias_zero.nir: 12 -> Affine ->
38 recurrent CubaLIF -> Affine -> 7 CubaLIF), imported with spyx's own NIR reader, so that
benchmarks/bench_run.py can print spyx's figure beside nirbridge's. Runs in its own
virtualenv (spyx needs JAX and flax, not torch); the caller runs it in a subprocess:

    /work/spyx-venv/bin/python benchmarks/peer_spyx.py --batches 1 32 256 --steps 500 --repeats 9 --json

What is timed, per batch size B (float32, time-major input T x B x 12, random 0/1 spikes at
rate 0.3 from ``numpy.random.default_rng(seed)``: ``(rng.random((T, B, 12)) < 0.3)``):

* the first call of the jitted function (tracing + XLA compilation + one run), in seconds;
* then ``--repeats`` calls, each followed by ``jax.block_until_ready``: median, min and
  max in ms per sequence (one call = one sequence of B samples).

The model is built as spyx's docs say: ``spyx.nir.from_nir(graph, x, dt=1e-4)`` (spyx
1.0's importer builds a ``spyx.nn.Sequential`` of ``nnx.Linear`` / ``RCuBaLIF`` /
``nnx.Linear`` / ``CuBaLIF`` and runs it once, eagerly, on ``x``; a 1 x 1 x 12 input
here), and the whole-sequence function is the one ``spyx.bench.benchmark`` times:
``nnx.split(model, nnx.Param, ...)``, then ``jax.jit`` of ``nnx.merge`` +
``spyx.nn.run(model, x)[0]`` (a ``jax.lax.scan`` over the leading time axis).

Threads: XLA_FLAGS gets ``--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1`` before jax is imported (pinning the process to one core
with taskset is the caller's job). JAX_PLATFORMS is set to cpu.

``--outputs PATH`` saves spyx's output spikes (T x 32 x 7, float32, seed ``--seed``) for
B=32 to PATH (.npy) and the input spikes they came from to PATH with ``_inputs`` before
the suffix, so the caller can run nirbridge on the same input and compare. Note that spyx
1.0's importer does not carry the whole NIR CubaLIF: it ignores ``r``, ``w_in``,
``v_reset`` (its neurons reset by subtraction) and the recurrent Affine's bias, and its
neurons spike on the membrane of the previous step; its spikes are not expected to equal
nirbridge's.

Set-up of the virtualenv (CPU wheels only; spyx 1.0 needs Python >= 3.11; it does not pin
nir, and installs nir 1.0.8 beside flax 0.12.8, jax/jaxlib 0.10.2, optax 0.2.8)::

    python3.11 -m venv /work/spyx-venv
    /work/spyx-venv/bin/pip install -U pip
    /work/spyx-venv/bin/pip install "spyx==1.0.0" "jax[cpu]"
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_THREAD_FLAGS}".strip()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)

import flax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import nir  # noqa: E402
import numpy as np  # noqa: E402
import spyx  # noqa: E402
from flax import nnx  # noqa: E402

DEFAULT_GRAPH = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "data"
    / "nir-examples"
    / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
)
DT = 1e-4
N_INPUTS = 12
RATE = 0.3
OUTPUT_BATCH = 32


def make_inputs(steps: int, batch: int, seed: int) -> np.ndarray:
    """Random 0/1 spikes at rate 0.3, time-major (T, B, 12), float32."""
    rng = np.random.default_rng(seed)
    return (rng.random((steps, batch, N_INPUTS)) < RATE).astype(np.float32)


def build(graph_path: Path) -> Callable[[jax.Array], jax.Array]:
    """Import the graph with spyx.nir.from_nir and return the jitted whole-sequence function."""
    graph = nir.read(str(graph_path))
    probe = jnp.zeros((1, 1, N_INPUTS), jnp.float32)
    # from_nir prints "[INFO] found RNN subgraph ..."; keep stdout for the JSON
    with contextlib.redirect_stdout(sys.stderr):
        model, _ = spyx.nir.from_nir(graph, probe, dt=DT)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def forward(params: Any, x: jax.Array) -> jax.Array:
        return spyx.nn.run(nnx.merge(graphdef, params, rest), x)[0]

    jitted = jax.jit(forward)
    return lambda x: jitted(params, x)


def time_batch(
    fn: Callable[[jax.Array], jax.Array], x: np.ndarray, repeats: int
) -> tuple[float, list[float]]:
    """First call (compile + run) in s, then `repeats` calls in ms each."""
    xj = jax.block_until_ready(jax.device_put(x))
    start = time.perf_counter()
    jax.block_until_ready(fn(xj))
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(xj))
        times.append((time.perf_counter() - start) * 1e3)
    return first, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    parser.add_argument("--outputs", type=Path, help="save spyx's output spikes for B=32 here (.npy)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    jax.devices()  # start the CPU backend outside the timings
    fn = build(args.graph)

    first_call_s: dict[str, float] = {}
    ms: dict[str, dict[str, float]] = {}
    for batch in args.batches:
        first, times = time_batch(fn, make_inputs(args.steps, batch, args.seed), args.repeats)
        first_call_s[str(batch)] = first
        ms[str(batch)] = {"median": statistics.median(times), "min": min(times), "max": max(times)}

    if args.outputs is not None:
        x = make_inputs(args.steps, OUTPUT_BATCH, args.seed)
        out = np.asarray(jax.block_until_ready(fn(jnp.asarray(x))), dtype=np.float32)
        args.outputs.parent.mkdir(parents=True, exist_ok=True)
        np.save(args.outputs, out)
        np.save(args.outputs.with_name(f"{args.outputs.stem}_inputs{args.outputs.suffix or '.npy'}"), x)

    result = {
        "peer": "spyx",
        "version": spyx.__version__,
        "jax": jax.__version__,
        "flax": flax.__version__,
        "nir": nir.__version__ if hasattr(nir, "__version__") else None,
        "graph": args.graph.name,
        "steps": args.steps,
        "dt": DT,
        "xla_flags": os.environ["XLA_FLAGS"],
        "cpus": len(os.sched_getaffinity(0)),
        "first_call_s": first_call_s,
        "ms": ms,
        "load": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"spyx {result['version']} (jax {result['jax']}, flax {result['flax']}), {args.graph.name}, "
        f"T={args.steps}, dt={DT}, {result['cpus']} CPU(s) allowed"
    )
    print(f"{'batch':>6} {'first call s':>13} {'median ms':>10} {'min ms':>9} {'max ms':>9}")
    for batch in args.batches:
        row = ms[str(batch)]
        print(
            f"{batch:>6} {first_call_s[str(batch)]:>13.3f} {row['median']:>10.2f} "
            f"{row['min']:>9.2f} {row['max']:>9.2f}"
        )
    print(f"load average (1 min) after: {result['load']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""nir_to_torch against nirtorch 2.6, in one run: build time and per-step latency.

    python benchmarks/bench_interpret.py            # everything (nirtorch's 1602-node build takes ~70 s)
    python benchmarks/bench_interpret.py --quick    # skip nirtorch's 1602-node build

Build: Affine -> LIF chains of 802 and 1602 nodes (Input and Output included).
Step: a 4-layer, 128-wide Affine -> LIF network at batch 32. nirtorch wraps the very
same node modules (nirbridge's LIF and torch.nn.Linear), and a hand-written loop calls
those modules directly, so the figures compare only the glue around them.
Targets (issues 2 and 31): 802-node build >= 50x faster than nirtorch, 1602-node build
< 1 s, per-step latency <= 1.03x nirtorch's (every call-time check kept) and within 10% of
the hand-written loop. The load average is printed with every figure: time on a quiet
machine only.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import nir
import nirtorch
import numpy as np
import torch

import nirbridge
from nirbridge.checks import check_step
from nirbridge.interpret import DEFAULT_MAP
from nirbridge.state import unpack_state


def affine_lif_chain(
    pairs: int, width: int, seed: int = 0, gain: float = 1.0, r: float = 1.0, tau: tuple = (2e-3, 2e-3)
) -> nir.NIRGraph:
    """Input -> (Affine -> LIF) x pairs -> Output, weights N(0, gain^2 / width)."""
    rng = np.random.default_rng(seed)
    nodes: dict[str, nir.NIRNode] = {"input": nir.Input(np.array([width]))}
    edges, previous = [], "input"
    for i in range(pairs):
        weight = rng.normal(size=(width, width)) * gain / np.sqrt(width)
        nodes[f"fc{i}"] = nir.Affine(weight.astype(np.float32), np.zeros(width, np.float32))
        nodes[f"lif{i}"] = nir.LIF(
            tau=rng.uniform(*tau, width),
            r=np.full(width, r),
            v_leak=np.zeros(width),
            v_threshold=np.ones(width),
            v_reset=np.zeros(width),
        )
        edges += [(previous, f"fc{i}"), (f"fc{i}", f"lif{i}")]
        previous = f"lif{i}"
    nodes["output"] = nir.Output(np.array([width]))
    edges.append((previous, "output"))
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


def _load() -> str:
    """The 1, 5 and 15 minute load averages: a busy machine flatters nothing here."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


NIRTORCH_MAP = {
    nir.Affine: DEFAULT_MAP[nir.Affine],
    nir.LIF: lambda node: nirbridge.neurons.LIF.from_nir(node, dt=1e-4),
}


def bench_build(sizes: list[int], quick: bool) -> None:
    print("build time (s), Affine->LIF chain")
    print(f"{'nodes':>7} {'nirbridge':>10} {'nirtorch':>10} {'ratio':>8}")
    for pairs in sizes:
        graph = affine_lif_chain(pairs, width=8)
        n_nodes = len(graph.nodes)
        ours = best_of(lambda g=graph: nirbridge.nir_to_torch(g, dt=1e-4), 3)
        if quick and n_nodes > 1000:
            print(f"{n_nodes:>7} {ours:>10.3f} {'skipped':>10} {'':>8}")
            continue
        theirs = best_of(lambda g=graph: nirtorch.nir_to_torch(g, NIRTORCH_MAP), 1)
        print(
            f"{n_nodes:>7} {ours:>10.3f} {theirs:>10.3f} {theirs / ours:>7.0f}x   (target >= 50x)  {_load()}"
        )


def _unchecked(state, inputs, reference, spec):
    """What the generated forward did before the call-time checks: unpack the state
    (batched inputs, so no single sample to unbatch)."""
    return (*unpack_state(state), False, inputs[0].shape[0], *inputs)


def without_checks(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose forward skips nirbridge.checks.check_step, to price the checks."""
    copied = copy.deepcopy(gm)
    for node in copied.graph.nodes:
        if node.op == "call_function" and node.target is check_step:
            node.target = _unchecked
    copied.recompile()
    return copied


def bench_step(steps: int, repeats: int, device: str) -> None:
    graph = affine_lif_chain(4, width=128, seed=1, gain=4.0, r=10.0, tau=(1e-3, 5e-3))
    ours = nirbridge.nir_to_torch(graph, dt=1e-4, device=device)
    unchecked = without_checks(ours)
    theirs = nirtorch.nir_to_torch(graph, NIRTORCH_MAP, device=device)
    theirs.load_state_dict(ours.state_dict())
    modules = [getattr(ours, n) for n in ("fc0", "lif0", "fc1", "lif1", "fc2", "lif2", "fc3", "lif3")]
    stateful = [isinstance(m, nirbridge.neurons.LIF) for m in modules]
    inputs = (torch.rand(steps, 32, 128, device=device) < 0.2).float()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run_ours():
        state = None
        for x in inputs:
            out, state = ours(x, state)
        sync()
        return out

    def run_unchecked():
        state = None
        for x in inputs:
            out, state = unchecked(x, state)
        sync()
        return out

    def run_theirs():
        state = None
        for x in inputs:
            out, state = theirs(x, state)
        sync()
        return out

    def run_hand():
        states = [None] * len(modules)
        for x in inputs:
            for k, m in enumerate(modules):
                if stateful[k]:
                    x, states[k] = m(x, states[k])
                else:
                    x = m(x)
        sync()
        return x

    with torch.no_grad():
        hand_out = run_hand()
        assert torch.equal(run_ours(), hand_out), "nirbridge and the hand-written loop disagree"
        assert torch.equal(run_unchecked(), hand_out), "nirbridge without checks disagrees"
        variants = {
            "nirbridge": run_ours,
            "unchecked": run_unchecked,
            "nirtorch": run_theirs,
            "hand loop": run_hand,
        }
        for fn in variants.values():
            fn()
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(repeats):  # interleaved, so drift in the machine's speed hits all alike
            for name, fn in variants.items():
                samples[name].append(best_of(fn, 1) / steps * 1e6)
        results = {name: statistics.median(values) for name, values in samples.items()}
    print(
        f"\nper-step latency (us), 4 x 128 LIF, batch 32, {device}, median of {repeats} x {steps} steps, "
        + _load()
    )
    for name, value in results.items():
        print(f"  {name:<10} {value:8.1f}   ratio to nirbridge {value / results['nirbridge']:.2f}")
    print(f"  nirbridge / hand loop = {results['nirbridge'] / results['hand loop']:.3f} (target <= 1.10)")
    print(f"  nirbridge / nirtorch  = {results['nirbridge'] / results['nirtorch']:.3f} (target <= 1.03)")
    print(
        f"  nirbridge / unchecked = {results['nirbridge'] / results['unchecked']:.3f} "
        "(the call-time checks; target <= 1.05)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="skip nirtorch's 1602-node build (~70 s)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, nirtorch 2.6, nir {getattr(nir, 'version', '?')}, threads 1")
    bench_build([400, 800], args.quick)
    bench_step(args.steps, args.repeats, args.device)


if __name__ == "__main__":
    main()

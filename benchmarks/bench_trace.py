"""torch_to_nir against nirtorch 2.6's torch_to_nir, in one run: tracing time.

    python benchmarks/bench_trace.py            # 1000 layers (500 Linear -> LIF pairs)
    python benchmarks/bench_trace.py --layers 200 --repeats 3

The model is a stack of nn.Linear and nirbridge LIF modules written the way the tests
write models: ``forward(x, state=None)`` threads a dict of states and returns
``(output, state)``. Both tracers get the same model, the same LIF converter, and are
told that LIF returns ``(out, state)`` (nirtorch's ``stateful_modules``). Each figure is
the best of ``--repeats`` runs. Target (issue 4): report both; nirbridge should not be
slower, and its cost should grow linearly with the number of layers.
"""

from __future__ import annotations

import argparse
import time
import warnings

import nirtorch
import torch
from torch import nn

import nirbridge
from nirbridge import neurons
from nirbridge.trace import neuron_to_nir


class LinearLIFStack(nn.Module):
    """``layers`` modules: Linear -> LIF, repeated, all ``width`` wide."""

    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(width, width) for _ in range(layers // 2))
        # per-neuron parameters: nirtorch's graph then passes nir's type check too
        self.lifs = nn.ModuleList(
            neurons.LIF(tau=torch.full((width,), 2e-3), dt=1e-4) for _ in range(layers // 2)
        )

    def forward(self, x: torch.Tensor, state: dict | None = None):
        state = state or {}
        new = {}
        for i, (fc, lif) in enumerate(zip(self.fcs, self.lifs)):
            x, new[i] = lif(fc(x), state.get(i))
        return x, new


def best_of(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1000)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = LinearLIFStack(args.layers, args.width)

    def ours():
        return nirbridge.torch_to_nir(model)

    def theirs():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return nirtorch.torch_to_nir(
                model,
                {neurons.LIF: neuron_to_nir},
                stateful_modules={neurons.LIF},
                concrete_args={"state": None},
            )

    ours_s, ours_graph = best_of(ours, args.repeats)
    theirs_s, theirs_graph = best_of(theirs, args.repeats)
    print(f"tracing a {args.layers}-layer Linear/LIF stack ({args.width} wide), best of {args.repeats}:")
    print(
        f"  nirbridge.torch_to_nir : {ours_s:8.3f} s  "
        f"({len(ours_graph.nodes)} nodes, {len(ours_graph.edges)} edges)"
    )
    print(
        f"  nirtorch.torch_to_nir  : {theirs_s:8.3f} s  "
        f"({len(theirs_graph.nodes)} nodes, {len(theirs_graph.edges)} edges)"
    )
    print(f"  ratio nirtorch / nirbridge: {theirs_s / ours_s:.2f}x")
    per_layer = ours_s / args.layers * 1e6
    print(f"  nirbridge per layer: {per_layer:.0f} us")


if __name__ == "__main__":
    main()

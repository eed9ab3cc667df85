"""elasticai.creator IR ⇄ NIR: nirbridge's translation against elasticai's own lowering
and rebuilding of the same model, in one run.

    python benchmarks/bench_elasticai.py [--layers 250 500 1000] [--repeats 3]

The model: a stack of ``nn.Linear(16, 16)`` layers. elasticai: ``Torch2Ir.convert``
(torch → IR) and ``Ir2Torch.convert`` (IR → torch, with the state_dict). nirbridge:
``to_nir`` (IR + state_dict → NIR), ``from_nir`` (NIR → IR + state_dict) and
``nir_to_torch`` (NIR → torch). Figures are the best of ``--repeats``; the per-layer
cost shows whether a step grows linearly with the graph.
"""

from __future__ import annotations

import argparse
import timeit
import warnings

import torch
from elasticai.creator.graph import BaseGraph
from elasticai.creator.ir2torch import get_default_converter as ir2torch
from elasticai.creator.torch2ir import Implementation
from elasticai.creator.torch2ir import get_default_converter as torch2ir
from torch import nn

import nirbridge
from nirbridge.adapters import elasticai


def best(fn, repeats: int) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeats))


def measure(n: int, repeats: int) -> dict[str, float | None]:
    model = nn.Sequential(*(nn.Linear(16, 16) for _ in range(n)))
    state = model.state_dict()
    ir = list(torch2ir().convert(model))
    graph = elasticai.to_nir(ir, state)
    back, back_state = elasticai.from_nir(graph)

    def rebuild_elasticai() -> None:
        implementations = [Implementation(graph=BaseGraph()).load_from_dict(d) for d in back.values()]
        ir2torch().convert(implementations, state_dict=back_state)

    rows: dict[str, float | None] = {
        "elasticai Torch2Ir (torch -> IR)": best(lambda: list(torch2ir().convert(model)), repeats),
        "nirbridge to_nir (IR -> NIR)": best(lambda: elasticai.to_nir(ir, state), repeats),
        "nirbridge from_nir (NIR -> IR)": best(lambda: elasticai.from_nir(graph), repeats),
        "nirbridge nir_to_torch (NIR -> torch)": best(lambda: nirbridge.nir_to_torch(graph), repeats),
    }
    try:
        rows["elasticai Ir2Torch (IR -> torch)"] = best(rebuild_elasticai, repeats)
    except RecursionError:  # it visits the graph recursively, one frame per layer
        rows["elasticai Ir2Torch (IR -> torch)"] = None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[250, 500, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"seconds (best of {args.repeats}); per layer in us; ratio to elasticai's Torch2Ir")
    for n in args.layers:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = measure(n, args.repeats)
        print(f"{n} layers")
        peer = rows["elasticai Torch2Ir (torch -> IR)"] or 1.0
        for label, seconds in rows.items():
            if seconds is None:
                print(f"  {label:<38} fails: RecursionError")
                continue
            print(f"  {label:<38} {seconds:8.3f} s  {seconds / n * 1e6:7.0f} us/layer  {seconds / peer:5.2f}")


if __name__ == "__main__":
    main()

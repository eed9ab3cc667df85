"""The main job end to end: build a spiking network, write it to a .nir file, read it
back, import it as a torch module, run it on random spikes and report what happened.

    python -m nirbridge.demo [--steps 200] [--batch 8] [--out demo.nir] [--seed 0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import nir
import numpy as np
import torch

import nirbridge


def build_network(seed: int = 0, dt: float = 1e-4) -> nir.NIRGraph:
    """A small recurrent SNN: 32 inputs -> 64 recurrent LIF -> 32 CubaLIF -> 10 LIF."""
    rng = np.random.default_rng(seed)

    def affine(n_out: int, n_in: int, gain: float) -> nir.Affine:
        return nir.Affine(rng.normal(0, gain / np.sqrt(n_in), (n_out, n_in)), rng.normal(0, 0.1, n_out))

    def lif(n: int) -> nir.LIF:
        return nir.LIF(
            tau=rng.uniform(5e-3, 2e-2, n),
            r=np.full(n, 50.0),
            v_leak=np.zeros(n),
            v_threshold=np.ones(n),
            v_reset=np.zeros(n),
        )

    nodes = {
        "input": nir.Input(np.array([32])),
        "hidden.fc": affine(64, 32, 8.0),
        "hidden.lif": lif(64),
        "hidden.w_rec": nir.Linear(rng.normal(0, 0.5 / 8, (64, 64))),
        "mid.fc": affine(32, 64, 6.0),
        "mid.lif": nir.CubaLIF(
            tau_syn=np.full(32, 5e-3),
            tau_mem=np.full(32, 1e-2),
            r=np.full(32, 60.0),
            v_leak=np.zeros(32),
            v_threshold=np.ones(32),
            v_reset=np.zeros(32),
            w_in=np.ones(32),
        ),
        "readout.fc": affine(10, 32, 6.0),
        "readout.lif": lif(10),
        "output": nir.Output(np.array([10])),
    }
    edges = [
        ("input", "hidden.fc"),
        ("hidden.fc", "hidden.lif"),
        ("hidden.lif", "hidden.w_rec"),
        ("hidden.w_rec", "hidden.lif"),
        ("hidden.lif", "mid.fc"),
        ("mid.fc", "mid.lif"),
        ("mid.lif", "readout.fc"),
        ("readout.fc", "readout.lif"),
        ("readout.lif", "output"),
    ]
    return nir.NIRGraph(nodes=nodes, edges=edges, metadata={"dt": dt}, type_check=False)


def run(
    steps: int = 200, batch: int = 8, out: Path | None = None, seed: int = 0, rate: float = 0.1
) -> dict[str, int]:
    """Do the whole round trip and print a report; returns spike counts per layer."""
    torch.manual_seed(seed)
    graph = build_network(seed)
    with tempfile.TemporaryDirectory() as folder:
        path = out or Path(folder) / "demo.nir"
        nirbridge.write(path, graph)
        size = path.stat().st_size
        loaded = nirbridge.read(path)
        print(
            f"wrote and read {path} ({size / 1024:.1f} KiB): "
            f"{len(loaded.nodes)} nodes, {len(loaded.edges)} edges"
        )
        start = time.perf_counter()
        gm = nirbridge.nir_to_torch(loaded)
        build = time.perf_counter() - start
    print(f"imported as torch.fx.GraphModule in {build * 1e3:.1f} ms, dt = {gm.hidden.lif.dt:g} s")

    counts: dict[str, int] = {}
    neuron_types = (nirbridge.neurons.LIF, nirbridge.neurons.CubaLIF)
    for name, module in gm.named_modules():
        if isinstance(module, neuron_types):
            counts[name] = 0
            module.register_forward_hook(
                lambda m, args, result, name=name: counts.__setitem__(
                    name, counts[name] + int(result[0].sum())
                )
            )
    spikes = (torch.rand(steps, batch, 32) < rate).float()
    state = None
    with torch.no_grad():
        gm(spikes[0])  # warm-up, fresh state
        for key in counts:
            counts[key] = 0
        start = time.perf_counter()
        for x in spikes:
            out, state = gm(x, state)
        elapsed = time.perf_counter() - start
    print(f"ran {steps} steps at batch {batch} on {int(spikes.sum())} random input spikes (rate {rate})")
    for name, count in counts.items():
        size = gm.get_submodule(name).v_threshold.numel()
        print(f"  {name:<12} {count:>7} spikes  ({count / (steps * batch * size):.3f} per neuron per step)")
    print(f"time per step: {elapsed / steps * 1e6:.1f} us")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="keep the .nir file here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(args.steps, args.batch, args.out, args.seed)


if __name__ == "__main__":
    main()

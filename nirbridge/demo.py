"""The main job end to end: export a spiking torch model to NIR, write it to a .nir
file, read it back, import it as a torch module, run both on the same random spikes and
report what happened, with a raster plot of every spiking layer.

    python -m nirbridge.demo [--steps 200] [--batch 8] [--out build/demo/demo.nir] [--seed 0]
                             [--plot build/demo/raster.png]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import nir
import numpy as np
import torch
from torch import nn

import nirbridge
from nirbridge import neurons

DT = 1e-4
TIMING_THREADS = 1  # torch threads while the time per step is measured


def recurrent_block(rng: np.random.Generator, n_in: int, n: int) -> nir.NIRGraph:
    """input -> fc -> lif <-> w_rec -> output: a recurrent LIF layer as a NIR graph."""
    nodes = {
        "input": nir.Input(np.array([n_in])),
        "fc": nir.Affine(rng.normal(0, 8.0 / np.sqrt(n_in), (n, n_in)), rng.normal(0, 0.1, n)),
        "lif": nir.LIF(
            tau=rng.uniform(5e-3, 2e-2, n),
            r=np.full(n, 50.0),
            v_leak=np.zeros(n),
            v_threshold=np.ones(n),
            v_reset=np.zeros(n),
        ),
        "w_rec": nir.Linear(rng.normal(0, 0.5 / 8, (n, n))),
        "output": nir.Output(np.array([n])),
    }
    edges = [("input", "fc"), ("fc", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, metadata={"dt": DT}, type_check=False)


class DemoNet(nn.Module):
    """32 inputs -> 64 recurrent LIF -> 32 CubaLIF -> 10 LIF, written as a torch model.

    The recurrent layer is a module imported from NIR (recurrence cannot be traced from
    a single step); the rest are torch layers and nirbridge neurons.
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.hidden = nirbridge.nir_to_torch(recurrent_block(rng, 32, 64))
        self.mid_fc = nn.Linear(64, 32)
        self.mid = neurons.CubaLIF(tau_syn=5e-3, tau_mem=1e-2, r=60.0 * 6, dt=DT)
        self.readout_fc = nn.Linear(32, 10)
        self.readout = neurons.LIF(tau=torch.empty(10).uniform_(5e-3, 2e-2), r=50.0 * 6, dt=DT)

    def forward(self, x: torch.Tensor, state: dict | None = None):
        state = state or {}
        z, s_hidden = self.hidden(x, state=state.get("hidden"))
        z, s_mid = self.mid(self.mid_fc(z), state.get("mid"))
        z, s_readout = self.readout(self.readout_fc(z), state.get("readout"))
        return z, {"hidden": s_hidden, "mid": s_mid, "readout": s_readout}


def run(
    steps: int = 200,
    batch: int = 8,
    out: Path | None = None,
    seed: int = 0,
    rate: float = 0.1,
    plot: Path | None = None,
) -> dict[str, int]:
    """Do the whole round trip and print a report; returns spike counts per layer.
    With ``plot``, also draws the spike rasters of sample 0 there (needs matplotlib)."""
    model = DemoNet(seed)
    kept = out
    start = time.perf_counter()
    graph = nirbridge.torch_to_nir(model)
    export = time.perf_counter() - start
    kinds = ", ".join(f"{n}: {type(v).__name__}" for n, v in graph.nodes.items())
    print(
        f"exported DemoNet in {export * 1e3:.1f} ms: {len(graph.nodes)} nodes ({kinds}), "
        f"dt = {graph.metadata['dt']:g} s"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = out or Path(folder) / "demo.nir"
        path.parent.mkdir(parents=True, exist_ok=True)
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
    print(f"imported as torch.fx.GraphModule in {build * 1e3:.1f} ms")

    generator = torch.Generator().manual_seed(seed)
    spikes = (torch.rand(steps, batch, 32, generator=generator) < rate).float()
    state = original_state = None
    mismatches = 0
    threads = torch.get_num_threads()
    with torch.no_grad():
        torch.set_num_threads(TIMING_THREADS)  # a figure that does not depend on the machine's cores
        try:
            gm(spikes[0])  # warm-up: torch's first calls are slow
            start = time.perf_counter()
            for x in spikes:
                out, state = gm(x, state)
            elapsed = time.perf_counter() - start
        finally:
            torch.set_num_threads(threads)
        counts: dict[str, int] = {}
        for name, module in gm.named_modules():
            if isinstance(module, (nirbridge.neurons.LIF, nirbridge.neurons.CubaLIF)):
                counts[name] = 0
                module.register_forward_hook(
                    lambda m, args, result, name=name: counts.__setitem__(
                        name, counts[name] + int(result[0].sum())
                    )
                )
        state = None
        for x in spikes:
            out, state = gm(x, state)
            expected, original_state = model(x, original_state)
            mismatches += int((out != expected).sum())
    print(f"ran {steps} steps at batch {batch} on {int(spikes.sum())} random input spikes (rate {rate})")
    for name, count in counts.items():
        size = gm.get_submodule(name).v_threshold.numel()
        print(f"  {name:<12} {count:>7} spikes  ({count / (steps * batch * size):.3f} per neuron per step)")
    print(f"output spikes that differ from the original torch model: {mismatches}")
    print(
        f"time per step: {elapsed / steps * 1e6:.1f} us (batch {batch}, {TIMING_THREADS} torch thread, "
        f"stepping gm(x, state); see benchmarks/ for comparisons)"
    )
    if plot is not None:
        result = nirbridge.run(gm, spikes, record=list(counts), progress=False)
        figure = result.plot(*counts, "output")
        plot.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(plot, dpi=110)
        print(f"raster plot of sample 0 ({', '.join(counts)}, output): {plot}")
    if kept is not None:
        print(f"the file is kept: try `nirbridge info {kept}` or `nirbridge run {kept} --plot raster.png`")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--out", type=Path, default=Path("build/demo/demo.nir"), help="write the .nir file here (kept)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plot", type=Path, default=Path("build/demo/raster.png"), help="write the raster plot here"
    )
    args = parser.parse_args()
    run(args.steps, args.batch, args.out, args.seed, plot=args.plot)


if __name__ == "__main__":
    main()

"""Native snntorch, norse and spikingjelly against the same network imported by nirbridge, in one run.

    python benchmarks/bench_simulators.py [--steps 500] [--repeats 7] [--batch 32]

The network: 4 x (Linear 128 -> 128, spiking layer), batch 32, float32, CPU, one thread.
snntorch: ``nn.Sequential`` of Linear and ``snn.Leaky(init_hidden=True, reset zero,
no delay)``, stepped as snntorch users step it. norse: ``SequentialState`` of Linear and
``LIFBoxCell``. spikingjelly: ``nn.Sequential`` of ``layer.Linear`` and
``neuron.LIFNode`` in single-step mode, one step per call (its multi-step mode runs a
whole sequence: ``bench_run.py`` compares that). Each is exported with its adapter's
``to_nir`` and imported back into the same simulator with ``from_nir`` (the imported
module's neurons are that simulator's modules, threaded with explicit state), and into
nirbridge's own modules with
``nir_to_torch``. Figures are per-step latency, median of ``--repeats`` runs of
``--steps`` steps, the variants taking turns within each repeat. Target (issue 5): an
imported module is not slower than the native one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import norse.torch as nt
import snntorch as snn
import snntorch.utils
import torch
from spikingjelly.activation_based import functional as sj_functional
from spikingjelly.activation_based import layer as sj_layer
from spikingjelly.activation_based import neuron as sj_neuron
from torch import nn

import nirbridge
from nirbridge.adapters import norse as norse_adapter
from nirbridge.adapters import snntorch as snntorch_adapter
from nirbridge.adapters import spikingjelly as sj_adapter

WIDTH, LAYERS = 128, 4


def snntorch_model() -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(LAYERS):
        layers += [
            nn.Linear(WIDTH, WIDTH),
            snn.Leaky(beta=0.9, threshold=0.5, reset_mechanism="zero", reset_delay=False, init_hidden=True),
        ]
    return nn.Sequential(*layers)


def norse_model() -> nt.SequentialState:
    layers: list[nn.Module] = []
    for _ in range(LAYERS):
        p = nt.LIFBoxParameters(tau_mem_inv=torch.tensor(100.0), v_th=torch.tensor(0.5))
        layers += [nn.Linear(WIDTH, WIDTH), nt.LIFBoxCell(p, dt=1e-3)]
    return nt.SequentialState(*layers)


def spikingjelly_model() -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(LAYERS):
        layers += [sj_layer.Linear(WIDTH, WIDTH), sj_neuron.LIFNode(tau=2.0, v_threshold=0.5)]
    return nn.Sequential(*layers)


def native_step(model: nn.Module, reset):
    """One step of a model that keeps its state inside; ``reset(model)`` on a fresh state."""

    def step(x, state):
        if state is None:
            reset(model)
        return model(x)

    return step


def run_once(step, inputs: torch.Tensor) -> float:
    with torch.no_grad():
        step(inputs[0], None)  # warm-up, fresh state
        state = None
        start = time.perf_counter()
        for x in inputs:
            state = step(x, state)
    return (time.perf_counter() - start) / len(inputs) * 1e6


def per_step_us(steps: dict[str, object], inputs: torch.Tensor, repeats: int) -> dict[str, float]:
    """Median per-step latency of each variant; the variants take turns within every
    repeat, so that drift of the machine's speed affects them alike."""
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(repeats):
        for label, step in steps.items():
            times[label].append(run_once(step, inputs))
    return {label: statistics.median(values) for label, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    inputs = torch.rand(args.steps, args.batch, WIDTH) * 2

    snn_native = snntorch_model()
    snn_graph = snntorch_adapter.to_nir(snn_native)
    snn_imported = snntorch_adapter.from_nir(snn_graph)
    snn_nirbridge = nirbridge.nir_to_torch(snn_graph)

    norse_native = norse_model()
    norse_graph = norse_adapter.to_nir(norse_native)
    norse_imported = norse_adapter.from_nir(norse_graph)
    norse_nirbridge = nirbridge.nir_to_torch(norse_graph)

    sj_native = spikingjelly_model()
    sj_graph = sj_adapter.to_nir(sj_native)
    sj_imported = sj_adapter.from_nir(sj_graph)
    sj_nirbridge = nirbridge.nir_to_torch(sj_graph)

    def stateful(module):
        return lambda x, state: module(x, state)[1]

    steps = {
        "snntorch native": native_step(snn_native, snntorch.utils.reset),
        "snntorch imported (snntorch)": stateful(snn_imported),
        "snntorch imported (nirbridge)": stateful(snn_nirbridge),
        "norse native": stateful(norse_native),
        "norse imported (norse)": stateful(norse_imported),
        "norse imported (nirbridge)": stateful(norse_nirbridge),
        "spikingjelly native": native_step(sj_native, sj_functional.reset_net),
        "spikingjelly imported (spikingjelly)": stateful(sj_imported),
        "spikingjelly imported (nirbridge)": stateful(sj_nirbridge),
    }
    before = os.getloadavg()[0]
    rows = list(per_step_us(steps, inputs, args.repeats).items())
    print(
        f"per-step latency (us), {LAYERS} x {WIDTH} spiking layers, batch {args.batch}, float32, "
        f"cpu, 1 thread, median of {args.repeats} x {args.steps} steps "
        f"(load average {before:.2f} before, {os.getloadavg()[0]:.2f} after)"
    )
    natives = {"snntorch": rows[0][1], "norse": rows[3][1], "spikingjelly": rows[6][1]}
    for label, us in rows:
        native = natives[label.split()[0]]
        print(f"  {label:<38} {us:8.1f}   ratio to native {us / native:5.2f}")


if __name__ == "__main__":
    main()

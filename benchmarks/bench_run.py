"""nirbridge.run against stepping loops (nirbridge, nirtorch 2.6, snntorch, norse) and
spikingjelly's multi-step neurons, in one run.

    python benchmarks/bench_run.py              # everything (~4-7 min on 2 cores)
    python benchmarks/bench_run.py --quick      # fewer repeats, no per-network memory cases (~2 min)
    python benchmarks/bench_run.py --examples   # also every example file: eager and compile vs stepping
    python benchmarks/bench_run.py --device cuda --threads 1

Time only on a quiet machine: a Python stepping loop slows more under load than
batched code, which flatters the ratios. The 1-minute load average is printed before
and after; a run that started under load (above 0.5) or ended above the benchmark's
own threads + 0.75 is marked NOT A VERDICT.

Networks (float32, batch 32):
  dense  4 x (Affine 128x128 -> LIF 128), T=500, dt=1e-4 (bench_interpret's spiking chain)
  srnn   the NIR paper's Braille SRNN (12 -> 38 recurrent CubaLIF -> 7 CubaLIF), T=500, dt=1e-4
  cnn    the NIR paper's N-MNIST CNN (sinabs export, IF neurons), T=300, dt=1
and by default on CUDA only (choose them with --networks elsewhere):
  dense-long  dense at T=5000
  wide        4 x (Affine 1024x1024 -> LIF 1024), batch 256, T=500
Inputs are random 0/1 spikes. Variants: nirbridge stepping (``out, state = gm(x[t], state)``),
nirtorch 2.6 stepping (nirtorch's interpreter around the same nirbridge node modules),
``nirbridge.run`` eager, with ``backend="compile"`` and (on CUDA) ``backend="triton"``,
on dense the native snntorch and norse loops of an equivalent network and
spikingjelly 2.0's multi-step LIF
(``LIFNode(step_mode="m")``, scalar tau: not the same network, the speed to beat; also
for BPTT, forward and backward, outside --quick), and
on srnn (CPU) spyx 1.0's jit through its own NIR import, in its own process and
virtualenv (benchmarks/peer_spyx.py; a note where it is missing), and
the floor: the graph's stateless layers alone (matrix products, convolutions, pooling)
applied to their recorded inputs in run's chunks. Every stepping loop collects its outputs over time
(``torch.stack``), as ``run`` does. Figures are ms per sequence, median and min-max over
the repeats, the variants taking turns within every repeat (the starting variant rotates).
Speedup = reference ms / variant ms (ratio of medians; min-max over per-repeat ratios),
the reference being nirtorch stepping (nirbridge stepping where nirtorch cannot run a graph).

Memory: in a fresh subprocess per case, the peak RSS of one ``run`` call above the RSS
right before it (peak reset with /proc/self/clear_refs, then VmHWM after; ru_maxrss as a
cross-check where it was reset too: after fork it holds the parent's peak).
GPU targets (the Triton issue, on CUDA, each against this run): run triton no slower than
spikingjelly on dense and dense-long, <= 1.2x the floor on wide, <= 3 ms on srnn, <= 1.3x
the floor on cnn; BPTT <= 1.2x spikingjelly on dense, <= 10 ms on srnn; peak CUDA memory
in the memory section.
Targets (issues): run eager >= 1.0x nirtorch stepping on dense and srnn, 1.2x on cnn;
compile >= 3.5x on dense, 7x on srnn, 1.5x on cnn, never slower than eager, and >= 5x
snntorch native on dense; T=5000 dense recording every LIF layer as bool < 150 MiB above
the baseline. With --examples: on every example file, eager >= 1.0x stepping and
compile >= eager.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import nir
import nirtorch
import norse.torch as nt
import snntorch as snn
import torch
from bench_cpu import spyx as spyx_peer
from bench_interpret import affine_lif_chain
from spikingjelly.activation_based import neuron as sj_neuron
from torch import nn

import nirbridge
from nirbridge.engine.schedule import chunk_length, level_of, step_bytes
from nirbridge.interpret import DEFAULT_MAP

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "nir-examples"
SRNN_FILE = DATA / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
CNN_FILE = DATA / "NIR__paper__02_cnn__cnn_sinabs.nir"
BATCH = 32
MIB = 1 << 20
NEURON_TYPES = (nir.I, nir.IF, nir.LI, nir.LIF, nir.CubaLI, nir.CubaLIF)

STEP = "nirbridge stepping"
NIRTORCH = "nirtorch 2.6 stepping"
EAGER = "nirbridge.run eager"
COMPILED = "nirbridge.run compile"
TRITON = "nirbridge.run triton"
CPU = "nirbridge.run cpu (default)"
SNNTORCH = "snntorch native"
NORSE = "norse native"
SPIKINGJELLY = "spikingjelly multi-step"
FLOOR = "layers alone (floor)"
VARIANTS = (STEP, NIRTORCH, EAGER, COMPILED, TRITON, CPU, SNNTORCH, NORSE, SPIKINGJELLY, FLOOR)

# (network, variant, reference) -> minimum speedup; reference None = the network's reference
TARGETS = {
    ("dense", EAGER, None): 1.0,  # never slower than stepping (earlier targets were set under load)
    ("srnn", EAGER, None): 1.0,
    ("cnn", EAGER, None): 1.2,
    ("dense", COMPILED, None): 3.5,
    ("srnn", COMPILED, None): 7.0,
    ("cnn", COMPILED, None): 1.5,
    ("dense", COMPILED, SNNTORCH): 5.0,
    ("dense", CPU, None): 5.5,  # the native CPU engine (issue 33); cnn: no slower than compile
}
# on CUDA: (network, variant) -> (reference, at most this many times the reference's ms),
# or (None, at most this many ms)
GPU_TARGETS = {
    ("dense", TRITON): (SPIKINGJELLY, 1.0),
    ("dense-long", TRITON): (SPIKINGJELLY, 1.0),
    ("wide", TRITON): (FLOOR, 1.2),
    ("srnn", TRITON): (None, 3.0),
    ("cnn", TRITON): (FLOOR, 1.3),
    ("bptt-dense", TRITON): (SPIKINGJELLY, 1.2),
    ("bptt-srnn", TRITON): (None, 10.0),
}
MEMORY_TARGET_MIB = 150.0
QUIET_LOAD = 0.5  # the 1-minute load average a verdict may start at


# ----------------------------------------------------------------------------- networks


def dense_graph() -> nir.NIRGraph:
    return affine_lif_chain(4, width=128, seed=1, gain=4.0, r=10.0, tau=(1e-3, 5e-3))


NETWORKS = {
    # name: (description, graph factory, dt, T, input rate)
    "dense": ("4 x (Affine 128x128 -> LIF 128)", dense_graph, 1e-4, 500, 0.2),
    "srnn": (
        "Braille SRNN 12 -> 38 rec. CubaLIF -> 7 CubaLIF",
        lambda: nirbridge.read(SRNN_FILE),
        1e-4,
        500,
        0.25,
    ),
    "cnn": ("N-MNIST CNN (sinabs, IF)", lambda: nirbridge.read(CNN_FILE), 1.0, 300, 0.25),
    "dense-long": ("4 x (Affine 128x128 -> LIF 128)", dense_graph, 1e-4, 5000, 0.2),
    "wide": ("4 x (Affine 1024x1024 -> LIF 1024)", lambda: wide_graph(), 1e-4, 500, 0.2),
}
CPU_NETWORKS = ["dense", "srnn", "cnn"]  # the default on the CPU; CUDA runs all of NETWORKS
BATCHES = {"wide": 256}  # batch size where it is not BATCH


def wide_graph() -> nir.NIRGraph:
    return affine_lif_chain(4, width=1024, seed=1, gain=4.0, r=10.0, tau=(1e-3, 5e-3))


def input_shape(graph: nir.NIRGraph) -> tuple[int, ...]:
    inputs = [node for node in graph.nodes.values() if isinstance(node, nir.Input)]
    assert len(inputs) == 1, "one Input node expected"
    return tuple(int(s) for s in inputs[0].input_type["input"])


def make_inputs(graph: nir.NIRGraph, steps: int, rate: float, device: str, dtype=torch.float32, batch=BATCH):
    gen = torch.Generator().manual_seed(0)
    spikes = torch.rand((steps, batch, *input_shape(graph)), generator=gen) < rate
    return spikes.to(device=device, dtype=dtype)


def nirtorch_map(graph: nir.NIRGraph, dt: float) -> dict:
    """bench_interpret.NIRTORCH_MAP, extended to every node type of the graph."""
    node_map = {}
    for node_type in {type(n) for n in graph.nodes.values()} - {nir.Input, nir.Output}:
        if node_type in NEURON_TYPES:
            node_map[node_type] = lambda node, t=node_type: DEFAULT_MAP[t](node, dt=dt)
        else:
            node_map[node_type] = DEFAULT_MAP[node_type]
    return node_map


def dense_layers(graph: nir.NIRGraph, dt: float):
    """(W, b, tau, r) per layer of the dense chain, as float32 tensors."""
    for i in range(4):
        fc, lif = graph.nodes[f"fc{i}"], graph.nodes[f"lif{i}"]

        def t(a):
            return torch.as_tensor(a, dtype=torch.float32)

        yield t(fc.weight), t(fc.bias), t(lif.tau), t(lif.r)


def snntorch_dense(graph: nir.NIRGraph, dt: float, device: str):
    """The dense chain as snntorch layers: Leaky(beta = 1 - dt/tau, reset zero, no reset
    delay) with the input scaled by dt*r/tau, which is the same LIF (see DESIGN.md)."""
    linears, leakies = [], []
    for w, b, tau, r in dense_layers(graph, dt):
        gain = dt * r / tau
        linear = nn.Linear(w.shape[1], w.shape[0])
        linear.weight.data, linear.bias.data = w * gain[:, None], b * gain
        leaky = snn.Leaky(beta=1 - dt / tau, threshold=1.0, reset_mechanism="zero", reset_delay=False)
        linears.append(linear.to(device))
        leakies.append(leaky.to(device))
    return linears, leakies


def norse_dense(graph: nir.NIRGraph, dt: float, device: str):
    """The dense chain as norse layers: LIFBoxCell (LIF with r = 1) at dt, the Linear scaled by r."""
    linears, cells = [], []
    for w, b, tau, r in dense_layers(graph, dt):
        linear = nn.Linear(w.shape[1], w.shape[0])
        linear.weight.data, linear.bias.data = w * r[:, None], b * r
        p = nt.LIFBoxParameters(
            tau_mem_inv=(1 / tau).to(device),
            v_leak=torch.zeros((), device=device),
            v_th=torch.ones((), device=device),
            v_reset=torch.zeros((), device=device),
        )
        linears.append(linear.to(device))
        cells.append(nt.LIFBoxCell(p, dt=dt).to(device))
    return linears, cells


def spikingjelly_dense(graph: nir.NIRGraph, dt: float, device: str, inputs, sync):
    """The dense chain as spikingjelly 2.0 runs it: per layer, the Linear over all T*B rows
    (scaled by r), then ``LIFNode(step_mode="m", tau=mean(tau)/dt, decay_input=True)``
    over the whole sequence. spikingjelly takes one tau per layer and spikes at v >= 1,
    so its spikes differ: it is the speed to beat, not the same network."""
    linears, nodes = [], []
    for w, b, tau, r in dense_layers(graph, dt):
        linear = nn.Linear(w.shape[1], w.shape[0])
        linear.weight.data, linear.bias.data = w * r[:, None], b * r
        node = sj_neuron.LIFNode(
            tau=float(tau.mean()) / dt, decay_input=True, v_threshold=1.0, v_reset=0.0, step_mode="m"
        )
        linears.append(linear.to(device))
        nodes.append(node.to(device))

    def fn():
        x = inputs
        for linear, node in zip(linears, nodes):
            node.reset()
            x = node(linear(x.flatten(0, 1)).unflatten(0, x.shape[:2]))
        sync()
        return x

    fn.parameters = [p for linear in linears for p in linear.parameters()]
    return fn


def floor_variant(gm, inputs, sync):
    """The graph's stateless layers alone (Affine, Linear, conv, pooling, ...), each
    applied to its recorded input in run's chunks, steps x batch rows at a time: what
    the time-batched schedule cannot go below. Inputs are recorded from a run (sums of
    the incoming edges)."""
    records = nirbridge.run(gm, inputs, record="outputs", progress=False).records
    calls = []

    def visit(level, level_input):
        def value(source):
            return level_input if source in level.inputs else records.get(level.prefix + source)

        for name in level.modules:
            parts = [value(source) for source, _ in level.incoming[name]]
            if any(not isinstance(part, torch.Tensor) for part in parts) or not parts:
                continue
            total = parts[0]
            for other in parts[1:]:
                total = total + other
            if name in level.children:
                visit(level.children[name], total)
            elif not level.stateful[name]:
                calls.append((level.modules[name], total))

    level = level_of(gm)
    visit(level, inputs)
    steps, batch = inputs.shape[:2]
    length = chunk_length(step_bytes(level, batch, 4) or 0, batch, steps)  # run's chunks

    def fn():
        for module, x in calls:
            for start in range(0, steps, length):
                module(x[start : start + length].flatten(0, 1))
        sync()

    return fn


def load_average() -> float:
    return os.getloadavg()[0]


# ----------------------------------------------------------------------------- variants


def sync_fn(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def stepping(module, inputs, sync):
    def fn():
        state, outs = None, []
        for x in inputs:
            out, state = module(x, state)
            outs.append(out)
        out = torch.stack(outs)
        sync()
        return out

    return fn


def run_variant(module, inputs, sync, **kwargs):
    def fn():
        out = nirbridge.run(module, inputs, progress=False, **kwargs).output
        sync()
        return out

    return fn


def layered_stepping(linears, neurons, init, inputs, sync):
    """A hand-written native loop: per step, Linear then neuron, layer by layer."""

    def fn():
        states = [init(n) for n in neurons]
        outs = []
        for x in inputs:
            for k, (linear, neuron) in enumerate(zip(linears, neurons)):
                x, states[k] = neuron(linear(x), states[k])
            outs.append(x)
        out = torch.stack(outs)
        sync()
        return out

    return fn


class Unavailable(Exception):
    """A variant that cannot be measured; the message says why."""


def prepare_compiled(module, inputs, sync, reference) -> tuple[Callable, float, str]:
    """The compiled variant after its cold call, the cold call's seconds, and a note."""
    fn = run_variant(module, inputs, sync, backend="compile")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        try:
            out = fn()
        except Exception as e:  # any failure makes the column n/a
            raise Unavailable(f"{type(e).__name__}: {str(e).splitlines()[0][:100]}") from e
        cold = time.perf_counter() - start
    messages = [str(w.message).splitlines()[0][:120] for w in caught]
    fell_back = [m for m in messages if re.search(r"eager|fall", m, re.IGNORECASE)]
    if fell_back:
        raise Unavailable(f"fell back to eager: {fell_back[0]}")
    if not torch.equal(out, reference):
        diff = (out.float() - reference.float()).abs()
        raise Unavailable(
            f"MISMATCH: compiled output != stepping ({int((diff != 0).sum())} of {diff.numel()} "
            f"values differ, max {diff.max().item():.3g})"
        )
    note = f"; warnings: {messages[0]}" if messages else ""
    return fn, cold, note


# ----------------------------------------------------------------------------- timing


def measure(variants: dict[str, Callable], repeats: int) -> dict[str, list[float]]:
    """ms per sequence of every variant, the variants taking turns within every repeat."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            start = time.perf_counter()
            variants[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def speedup(times: dict[str, list[float]], variant: str, reference: str) -> tuple[float, float, float]:
    """Ratio of medians, and min/max of the per-repeat ratios."""
    ref, var = times[reference], times[variant]
    per_repeat = [r / v for r, v in zip(ref, var)]
    return statistics.median(ref) / statistics.median(var), min(per_repeat), max(per_repeat)


def spike_rates(module, inputs) -> str:
    """Mean spike rate of every spiking node over the first 100 steps."""
    rec = nirbridge.run(module, inputs[:100], record="all", bool_spikes=True, progress=False)
    rates = [f"{k} {v.float().mean().item():.3f}" for k, v in rec.records.items() if k in rec.spiking]
    return ", ".join(rates)


def bench_network(name: str, args, results: dict) -> None:
    description, factory, dt, steps, rate = NETWORKS[name]
    device, sync = args.device, sync_fn(args.device)
    graph = factory()
    shape = input_shape(graph)
    batch = BATCHES.get(name, BATCH)
    inputs = make_inputs(graph, steps, rate, device, batch=batch)
    print(f"\n== {name}: {description}, batch {batch}, T={steps}, dt={dt:g}, input {list(shape)} rate {rate}")
    gm = nirbridge.nir_to_torch(graph, dt=dt, device=device)
    notes: dict[str, str] = {}
    row: dict = {"times": {}, "notes": notes, "steps": steps, "cold": None}

    with torch.no_grad():
        print(f"   spike rates (first 100 steps): {spike_rates(gm, inputs)}")
        variants: dict[str, Callable] = {STEP: stepping(gm, inputs, sync)}
        reference_out = variants[STEP]()
        reference = NIRTORCH
        try:
            theirs = nirtorch.nir_to_torch(graph, nirtorch_map(graph, dt), device=device).to(device)
            out = stepping(theirs, inputs, sync)()
            if not torch.equal(out, reference_out):
                raise Unavailable("its outputs differ from nirbridge stepping")
            variants[NIRTORCH] = stepping(theirs, inputs, sync)
        except Exception as e:  # noqa: BLE001 - report and go on with nirbridge stepping
            reason = str(e) if isinstance(e, Unavailable) else f"{type(e).__name__}: {e}"
            notes[NIRTORCH] = f"nirtorch 2.6 cannot run this graph ({reason[:120]})"
            print(f"   {notes[NIRTORCH]}; reference = nirbridge stepping")
            reference = STEP

        variants[EAGER] = run_variant(gm, inputs, sync, backend="eager")
        assert torch.equal(variants[EAGER](), reference_out), f"{name}: run eager != stepping"
        if device.startswith("cuda"):  # the Triton kernels (on the CPU only its interpreter runs them)
            variants[TRITON] = run_variant(gm, inputs, sync, backend="triton")
            assert torch.equal(variants[TRITON](), reference_out), f"{name}: run triton != stepping"
        else:  # the CPU back-end, run's default on the CPU
            variants[CPU] = run_variant(gm, inputs, sync, backend="cpu")
            assert torch.equal(variants[CPU](), reference_out), f"{name}: run cpu != stepping"

        try:
            variants[COMPILED], cold, note = prepare_compiled(gm, inputs, sync, reference_out)
            row["cold"] = cold
            if note:
                notes[COMPILED] = note.lstrip("; ")
            print(f"   compile cold first call: {cold:.1f} s{note}")
        except Unavailable as e:
            notes[COMPILED] = str(e)
            print(f"   compile: n/a ({e})")
            if str(e).startswith("MISMATCH"):
                results["failed_checks"].append(f"{name}: {e}")

        if name in ("dense", "dense-long", "wide"):
            linears, leakies = snntorch_dense(graph, dt, device)
            variants[SNNTORCH] = layered_stepping(linears, leakies, lambda n: n.init_leaky(), inputs, sync)
            linears, cells = norse_dense(graph, dt, device)
            variants[NORSE] = layered_stepping(linears, cells, lambda n: None, inputs, sync)
            variants[SPIKINGJELLY] = spikingjelly_dense(graph, dt, device, inputs, sync)
            for label in (SNNTORCH, NORSE, SPIKINGJELLY):
                same = (variants[label]() == reference_out).float().mean().item()
                print(f"   {label}: {same:.4%} of output spikes equal nirbridge's (not bit-exact by design)")
        variants[FLOOR] = floor_variant(gm, inputs, sync)

        for fn in variants.values():  # warm-up
            fn()
        start = time.perf_counter()
        times = measure(variants, args.repeats)
        print(f"   timed {args.repeats} repeats in {time.perf_counter() - start:.0f} s")

    if name == "srnn" and device == "cpu":  # the peer of the CPU engine issue, in its own process
        peer = spyx_peer([batch], args.repeats)
        if peer is not None:
            found = peer["ms"][str(batch)]
            ours = statistics.median(times[CPU]) if CPU in times else None
            versus = f"; run cpu / spyx = {ours / found['median']:.2f}x" if ours else ""
            notes["spyx 1.0 jit"] = (
                f"{found['median']:.2f} ms ({found['min']:.2f}-{found['max']:.2f}), its own NIR import "
                f"(not NIR's equations), JAX on 1 thread in its own process{versus}"
            )
        else:
            notes["spyx 1.0 jit"] = (
                "not run: no spyx virtualenv (benchmarks/peer_spyx.py says how to make one)"
            )
    row["times"], row["reference"] = times, reference
    results["networks"][name] = row
    print_network(name, row)


def fmt_ms(values: list[float]) -> tuple[str, str]:
    return f"{statistics.median(values):9.1f}", f"{min(values):8.1f}-{max(values):<8.1f}"


def target_for(name: str, variant: str, reference: str | None) -> float | None:
    return TARGETS.get((name, variant, reference))


def print_network(name: str, row: dict) -> None:
    times, reference = row["times"], row["reference"]
    print(f"   ms per sequence; speedup = {reference} ms / variant ms")
    print(f"   {'variant':<28} {'median':>9} {'min-max':^17} {'speedup':>8} {'(min-max)':^13} target")
    for variant in VARIANTS:
        if variant not in times:
            if variant in row["notes"]:
                print(f"   {variant:<28} {'n/a':>9}")
            continue
        med, spread = fmt_ms(times[variant])
        ratio, lo, hi = speedup(times, variant, reference)
        target = target_for(name, variant, None)
        mark = "" if target is None else f">= {target:.1f}x {'PASS' if ratio >= target else 'FAIL'}"
        print(f"   {variant:<28} {med} {spread} {ratio:7.2f}x ({lo:4.2f}-{hi:<4.2f}x) {mark}")
    if COMPILED in times and SNNTORCH in times:
        ratio, lo, hi = speedup(times, COMPILED, SNNTORCH)
        target = TARGETS[(name, COMPILED, SNNTORCH)]
        print(
            f"   {COMPILED} vs {SNNTORCH}: {ratio:.2f}x ({lo:.2f}-{hi:.2f}x), "
            f"target >= {target:.1f}x {'PASS' if ratio >= target else 'FAIL'}"
        )
    for variant, note in row["notes"].items():
        print(f"   note, {variant}: {note}")


# ----------------------------------------------------------------------------- memory

MEMORY_CASES = {
    # name: (network, T, description)
    "dense-record": ("dense", 5000, "dense T=5000, bool input, record lif0..lif3 outputs, bool_spikes"),
    "dense-output": ("dense", 5000, "dense T=5000, bool input, no record, bool_spikes"),
    "dense": ("dense", 500, "dense eager run, T=500"),
    "srnn": ("srnn", 500, "srnn eager run, T=500"),
    "cnn": ("cnn", 300, "cnn eager run, T=300"),
}


def proc_status() -> dict[str, int]:
    """VmRSS and VmHWM in KiB."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                values[key] = int(value.split()[0])
    return values


def memory_child(case: str, args) -> None:
    """Runs in a fresh process: one run call, its peak RSS above the RSS right before it."""
    import resource

    network, steps, _ = MEMORY_CASES[case]
    _, factory, dt, _, rate = NETWORKS[network]
    graph = factory()
    gm = nirbridge.nir_to_torch(graph, dt=dt, device=args.device)
    big = case.startswith("dense-")
    inputs = make_inputs(graph, steps, rate, args.device, dtype=torch.bool if big else torch.float32)
    kwargs = {"bool_spikes": True} if big else {}
    if case == "dense-record":
        kwargs["record"] = ["lif0.output", "lif1.output", "lif2.output", "lif3.output"]
    with torch.no_grad():
        nirbridge.run(gm, inputs[:2], progress=False, **kwargs)  # one-time library initialisation
        gc.collect()
        reset = True
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM (and ru_maxrss) to the current RSS
        except OSError:
            reset = False
        before = proc_status()
        maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            cuda_before = torch.cuda.memory_allocated()
        result = nirbridge.run(gm, inputs, progress=False, **kwargs)
        sync_fn(args.device)()
        after = proc_status()
        maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss also holds the peak the parent had when it forked this process, which
    # clear_refs does not reset: it counts only where it starts at the baseline.
    maxrss_valid = maxrss_before <= before["VmRSS"] + 1024
    peak_kib = max(after["VmHWM"], maxrss_after if maxrss_valid else 0)
    report = {
        "case": case,
        "baseline_mib": before["VmRSS"] / 1024,
        "baseline_peak_mib": before["VmHWM"] / 1024,
        "peak_increase_mib": (peak_kib - before["VmRSS"]) / 1024,
        "maxrss_increase_mib": (maxrss_after - before["VmRSS"]) / 1024 if maxrss_valid else None,
        "hwm_reset": reset and before["VmHWM"] <= before["VmRSS"] + 1024,
        "records": {
            k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in result.records.items()
        },
        "result_mib": sum(t.numel() * t.element_size() for t in [result.output, *result.records.values()])
        / MIB,
        "input_mib": inputs.numel() * inputs.element_size() / MIB,
    }
    if args.device.startswith("cuda"):
        report["cuda_peak_increase_mib"] = (torch.cuda.max_memory_allocated() - cuda_before) / MIB
    print("MEMORY_RESULT " + json.dumps(report))


def bench_memory(cases: list[str], args, results: dict) -> None:
    print("\n== memory: peak RSS of one run call above the RSS right before it (fresh process per case)")
    for case in cases:
        command = [sys.executable, os.path.abspath(__file__), "--_memory", case, "--device", args.device]
        command += ["--threads", str(args.threads)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        except subprocess.TimeoutExpired:
            print(f"   {case}: n/a (timed out)")
            continue
        lines = [line for line in done.stdout.splitlines() if line.startswith("MEMORY_RESULT ")]
        if done.returncode != 0 or not lines:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
            print(f"   {case}: n/a (subprocess failed: {tail[0][:150]})")
            continue
        report = json.loads(lines[-1][len("MEMORY_RESULT ") :])
        results["memory"][case] = report
        description = MEMORY_CASES[case][2]
        line = (
            f"   {description:<58} +{report['peak_increase_mib']:7.1f} MiB "
            f"(baseline RSS {report['baseline_mib']:.0f} MiB; result tensors {report['result_mib']:.1f} MiB"
        )
        if report["maxrss_increase_mib"] is None:
            line += "; ru_maxrss n/a, inherited from the parent"
        else:
            line += f"; ru_maxrss +{report['maxrss_increase_mib']:.1f}"
        if "cuda_peak_increase_mib" in report:
            line += f"; CUDA peak +{report['cuda_peak_increase_mib']:.1f} MiB"
        print(line + ")")
        if not report["hwm_reset"]:
            print("     (the peak could not be reset before the call: the figure is a lower bound)")
        if case == "dense-record":
            records = report["records"]
            spikes = [k for k in ("lif0", "lif1", "lif2", "lif3") if records.get(k, [0, ""])[1] == "bool"]
            others = {k: v for k, v in records.items() if k not in spikes}
            print(f"     records: {', '.join(f'{k} {v[1]}' for k, v in records.items())}")
            if len(spikes) != 4:
                results["failed_checks"].append("memory: lif0..lif3 records are not all torch.bool")
                print("     CHECK FAILED: lif0..lif3 are not all recorded as torch.bool")
            if others:
                print(f"     note: other records held too: {', '.join(others)}")
            ok = report["peak_increase_mib"] < MEMORY_TARGET_MIB
            print(f"     target < {MEMORY_TARGET_MIB:.0f} MiB: {'PASS' if ok else 'FAIL'}")


# ----------------------------------------------------------------------------- summary


def print_summary(results: dict, args) -> None:
    print(
        f"\n== summary: {args.device}, {args.threads} thread(s), torch {torch.__version__}, "
        f"median of {args.repeats} repeats, ms per sequence, speedup vs reference (min-max per repeat)"
    )
    header = f"{'network':<7} {'variant':<28} {'median ms':>10} {'min-max ms':^19} {'speedup':>22}  target"
    print(header)
    print("-" * len(header))
    for name, row in results["networks"].items():
        times, reference = row["times"], row["reference"]
        for variant in VARIANTS:
            target = target_for(name, variant, None)
            if variant not in times:
                if variant in row["notes"]:
                    mark = f">= {target:.1f}x n/a" if target else ""
                    print(f"{name:<7} {variant:<28} {'n/a':>10} {'':^19} {'n/a':>22}  {mark}")
                continue
            med, spread = fmt_ms(times[variant])
            ratio, lo, hi = speedup(times, variant, reference)
            ratio_s = "ref" if variant == reference else f"{ratio:.2f}x ({lo:.2f}-{hi:.2f})"
            mark = "" if target is None else f">= {target:.1f}x {'PASS' if ratio >= target else 'FAIL'}"
            print(f"{name:<7} {variant:<28} {med:>10} {spread:^19} {ratio_s:>22}  {mark}")
        if COMPILED in times and EAGER in times:
            ratio, lo, hi = speedup(times, COMPILED, EAGER)
            mark = f">= 1.0x {'PASS' if ratio >= 1.0 else 'FAIL'}"
            label = "compile vs eager"
            print(
                f"{name:<7} {label:<28} {'':>10} {'':^19} {f'{ratio:.2f}x ({lo:.2f}-{hi:.2f})':>22}  {mark}"
            )
        if CPU in times and COMPILED in times:  # the CPU engine's target on cnn: no slower than compile
            ratio, lo, hi = speedup(times, CPU, COMPILED)
            mark = f">= 1.0x {'PASS' if ratio >= 1.0 else 'FAIL'}" if name == "cnn" else ""
            label = "cpu vs compile"
            print(
                f"{name:<7} {label:<28} {'':>10} {'':^19} {f'{ratio:.2f}x ({lo:.2f}-{hi:.2f})':>22}  {mark}"
            )
        if COMPILED in times and SPIKINGJELLY in times:
            ratio, lo, hi = speedup(times, COMPILED, SPIKINGJELLY)
            label = "compile vs spikingjelly"
            print(f"{name:<7} {label:<28} {'':>10} {'':^19} {f'{ratio:.2f}x ({lo:.2f}-{hi:.2f})':>22}")
        if (name, COMPILED, SNNTORCH) in TARGETS:
            target = TARGETS[(name, COMPILED, SNNTORCH)]
            label = "compile vs snntorch native"
            if COMPILED in times and SNNTORCH in times:
                ratio, lo, hi = speedup(times, COMPILED, SNNTORCH)
                ratio_s = f"{ratio:.2f}x ({lo:.2f}-{hi:.2f})"
                mark = f">= {target:.1f}x {'PASS' if ratio >= target else 'FAIL'}"
            else:
                ratio_s, mark = "n/a", f">= {target:.1f}x n/a"
            print(f"{name:<7} {label:<28} {'':>10} {'':^19} {ratio_s:>22}  {mark}")
        cold = row["cold"]
        cold_s = f"{cold:.1f} s" if cold is not None else "n/a"
        print(f"{name:<7} {'compile cold first call':<28} {cold_s:>10}")
    for case, report in results["memory"].items():
        mark = ""
        if case == "dense-record":
            ok = report["peak_increase_mib"] < MEMORY_TARGET_MIB
            mark = f"< {MEMORY_TARGET_MIB:.0f} MiB {'PASS' if ok else 'FAIL'}"
        label = f"peak RSS +MiB {case}"
        print(f"{'memory':<7} {label:<28} {report['peak_increase_mib']:>10.1f} {'':^19} {'':>22}  {mark}")
    if args.device == "cuda":
        print("\n== GPU targets (the Triton issue), against this run")
        for line in gpu_targets(results):
            print("   " + line)
    for row in results["examples"]:
        print(row)
    if results["failed_checks"]:
        print("\nFAILED CHECKS:\n  " + "\n  ".join(results["failed_checks"]))


# ----------------------------------------------------------------------------- BPTT


def bench_bptt(args, results: dict) -> None:
    """Forward and backward (BPTT), T=500, batch 32, ms per sequence: on the dense chain
    run eager, run triton (on CUDA) or cpu (on the CPU) and spikingjelly's multi-step LIF;
    on the Braille SRNN run eager and run triton or cpu."""
    device, sync = args.device, sync_fn(args.device)
    results["bptt"] = {}
    for case, factory, width in (("bptt-dense", dense_graph, 128), ("bptt-srnn", NETWORKS["srnn"][1], 7)):
        graph, dt, steps = factory(), 1e-4, 500
        inputs = make_inputs(graph, steps, 0.2 if case == "bptt-dense" else 0.25, device)
        weights = torch.randn((*inputs.shape[:2], width), generator=torch.Generator().manual_seed(1)).to(
            device
        )
        gm = nirbridge.nir_to_torch(graph, dt=dt, device=device)

        def through_run(backend, gm=gm, inputs=inputs, weights=weights):
            def sequence():
                gm.zero_grad(set_to_none=True)
                out = nirbridge.run(gm, inputs, backend=backend, progress=False).output
                (out * weights).sum().backward()
                sync()

            return sequence

        variants = {EAGER: through_run("eager")}
        if case == "bptt-dense":
            jelly = spikingjelly_dense(graph, dt, device, inputs, sync)

            def through_jelly(jelly=jelly, weights=weights):
                for p in jelly.parameters:
                    p.grad = None
                (jelly() * weights).sum().backward()
                sync()

            variants[SPIKINGJELLY] = through_jelly
        variants[TRITON if device.startswith("cuda") else CPU] = through_run(
            "triton" if device.startswith("cuda") else "cpu"
        )
        for fn in variants.values():
            fn()
        times = measure(variants, max(3, args.repeats // 3))
        results["bptt"][case] = times
        network = NETWORKS["dense" if case == "bptt-dense" else "srnn"][0]
        print(f"\n== {case}: {network}, T={steps}, batch {BATCH}:")
        print("   forward + backward, ms per sequence")
        reference = SPIKINGJELLY if SPIKINGJELLY in times else EAGER
        for name, values in times.items():
            ratio, lo, hi = speedup(times, name, reference)
            median = statistics.median(values)
            mark = ""
            if name == CPU and reference == SPIKINGJELLY:  # issue 33: 1.5x spikingjelly's BPTT on the CPU
                mark = f"  target >= 1.5x {'PASS' if ratio >= 1.5 else 'FAIL'}"
            print(f"   {name:<28} {median:9.1f}  {ratio:5.2f}x {reference} ({lo:.2f}-{hi:.2f}){mark}")


def gpu_targets(results: dict) -> list[str]:
    """The Triton issue's targets against what this run measured (CUDA runs only)."""
    lines = []
    tables = {name: row["times"] for name, row in results["networks"].items()}
    tables.update(results.get("bptt", {}))
    for (case, variant), (reference, limit) in GPU_TARGETS.items():
        times = tables.get(case)
        if times is None or variant not in times or (reference is not None and reference not in times):
            lines.append(f"{case:<11} {variant} n/a (not measured in this run)")
            continue
        ms = statistics.median(times[variant])
        if reference is None:
            ok, what = ms <= limit, f"{ms:.2f} ms, target <= {limit:g} ms"
        else:
            ratio = ms / statistics.median(times[reference])
            ok, what = ratio <= limit, f"{ms:.2f} ms = {ratio:.2f}x {reference}, target <= {limit:g}x"
        lines.append(f"{case:<11} {variant}: {what} {'PASS' if ok else 'FAIL'}")
    return lines


# ----------------------------------------------------------------------------- example files

EXAMPLE_DT = {"NIR__paper__02_cnn__cnn_sinabs.nir": 1.0}  # sinabs and spyx CNNs mean dt = 1


def bench_examples(args, results: dict) -> None:
    """Every readable example file: stepping, run eager and compile, T=200, batch 32,
    exactness checked; eager must not be slower than stepping, compile not slower than eager."""
    repeats = max(3, args.repeats // 3)
    print(f"\n== example files: T=200, batch {BATCH}, median of {repeats}, ms per sequence")
    print(f"   {'file':<70} {'step':>8} {'eager':>8} {'compile':>8} {'eager/step':>10} {'comp/eager':>10}")
    for path in sorted(DATA.glob("*.nir")):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph = nirbridge.read(path)
                dt = EXAMPLE_DT.get(path.name, 1.0 if "scnn" in path.name else 1e-4)
                gm = nirbridge.nir_to_torch(graph, dt=dt, device=args.device)
        except nirbridge.NirBridgeError as e:
            print(f"   {path.name:<70} unreadable ({type(e).__name__}), skipped")
            continue
        inputs = make_inputs(graph, 200, 0.25, args.device)
        sync = sync_fn(args.device)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", nirbridge.DtWarning)
            variants = {
                STEP: stepping(gm, inputs, sync),
                EAGER: run_variant(gm, inputs, sync, backend="eager"),
            }
            reference = variants[STEP]()
            assert torch.equal(variants[EAGER](), reference), f"{path.name}: eager != stepping"
            try:
                variants[COMPILED], _, _ = prepare_compiled(gm, inputs, sync, reference)
            except Unavailable as e:
                results["failed_checks"].append(f"{path.name}: compile {e}")
            for fn in variants.values():
                fn()
            times = measure(variants, repeats)
        med = {k: statistics.median(v) for k, v in times.items()}
        eager_ratio = med[STEP] / med[EAGER]
        comp_ratio = med[EAGER] / med[COMPILED] if COMPILED in med else float("nan")
        marks = ("" if eager_ratio >= 1.0 else " EAGER SLOWER") + (
            "" if comp_ratio >= 1.0 else " COMPILE SLOWER"
        )
        line = (
            f"   {path.name:<70} {med[STEP]:8.1f} {med[EAGER]:8.1f} {med.get(COMPILED, float('nan')):8.1f} "
            f"{eager_ratio:9.2f}x {comp_ratio:9.2f}x{marks}"
        )
        print(line)
        results["examples"].append("example" + line[2:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 repeats, no per-network memory cases")
    parser.add_argument("--repeats", type=int, default=None, help="default 9, or 3 with --quick")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--networks",
        nargs="+",
        default=None,
        choices=list(NETWORKS),
        help="default: dense srnn cnn; all on CUDA",
    )
    parser.add_argument("--examples", action="store_true", help="also time every example file")
    parser.add_argument("--_memory", choices=list(MEMORY_CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args._memory:
        memory_child(args._memory, args)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    args.repeats = args.repeats or (3 if args.quick else 9)
    args.networks = args.networks or (list(NETWORKS) if args.device == "cuda" else CPU_NETWORKS)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"torch {torch.__version__}, nirtorch 2.6, nir {getattr(nir, 'version', '?')}, "
        f"snntorch {snn.__version__}, threads {torch.get_num_threads()}, device {device_name}, "
        f"repeats {args.repeats}{' (quick)' if args.quick else ''}"
    )
    load_before = load_average()
    print(f"load average (1 min) before: {load_before:.2f}")
    results: dict = {"networks": {}, "memory": {}, "failed_checks": [], "examples": []}
    start = time.perf_counter()
    # memory first: a child inherits the parent's peak RSS in ru_maxrss, so keep it small
    memory_cases = ["dense-record", "dense-output"]
    if not args.quick:
        memory_cases += [name for name in args.networks if name in MEMORY_CASES]
    bench_memory(memory_cases, args, results)
    for name in args.networks:
        bench_network(name, args, results)
    if not args.quick:
        bench_bptt(args, results)
    if args.examples:
        bench_examples(args, results)
    print_summary(results, args)
    load_after = load_average()
    quiet = load_before <= QUIET_LOAD and load_after <= args.threads + 0.75
    print(
        f"\nload average (1 min): {load_before:.2f} before, {load_after:.2f} after "
        f"({os.cpu_count()} cores, {args.threads} thread(s) here): "
        + (
            "quiet, a verdict"
            if quiet
            else "NOT A VERDICT: other work shared the machine; time again when it is quiet"
        )
    )
    print(f"total {time.perf_counter() - start:.0f} s")
    if results["failed_checks"]:
        sys.exit(1)


if __name__ == "__main__":
    main()

"""``nirbridge run``: run a file, record, write and plot."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import click

from ..errors import ParameterError
from .common import (
    backend_option,
    check_layout,
    declared_inputs,
    echo,
    input_options,
    input_shapes,
    one_line_errors,
    outputs_apart,
    random_spikes,
    read_graph,
    spikes_file,
    torch_device,
)

AGAIN_UNDER = 5.0


def _picture_format(path: str) -> str:
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if suffix not in ("png", "svg", "pdf"):
        raise ParameterError(f"--plot {path}: end the name in .png, .svg or .pdf")
    return suffix


def _save_figure(figure: Any, path: str) -> None:
    from ..io import atomic_write

    suffix = _picture_format(path)
    try:
        atomic_write(path, lambda tmp: figure.savefig(tmp, format=suffix, dpi=120))
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)


@click.command(name="run")
@click.argument("file", type=click.Path(path_type=str))
@click.option("--steps", type=int, default=None, help="Time steps (default 100, or all of --input).")
@click.option("--dt", type=float, default=None, help="Time step in seconds (default: the file's, else 1e-4).")
@click.option("--batch", type=int, default=1, show_default=True, help="Samples of random input.")
@click.option(
    "--rate", type=float, default=0.1, show_default=True, help="Spike probability per input per step."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random input.")
@input_options("HDF5 file of input spikes: a dataset per Input node, [T, B, ...] or [T, ...].")
@click.option(
    "--record",
    "records",
    multiple=True,
    help="Node (or node.v) to record; repeat it, or give all or outputs. Default: all.",
)
@click.option(
    "--out", type=click.Path(path_type=str), default=None, help="Write the recording as NIRGraphData (.h5)."
)
@click.option(
    "--plot", type=click.Path(path_type=str), default=None, help="Draw rasters and traces (.png/.svg/.pdf)."
)
@backend_option("How run computes: compile is torch.compile (slow to start, fast to run).")
@click.option("--compile", "compiled", is_flag=True, help="The same as --backend compile.")
@click.option(
    "--precision",
    type=click.Choice(["exact", "fast"]),
    default="exact",
    show_default=True,
    help="exact: full float32, as stepping; fast: TF32 on GPUs that have it.",
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="Where to run: cpu, cuda, cuda:1, ... (a torch device).",
)
@click.option(
    "--allow-negative-tau",
    is_flag=True,
    help="Load time constants below 0 as they are (trained files sometimes hold them).",
)
@click.option(
    "--metrics",
    "show_metrics",
    is_flag=True,
    help="Print NeuroBench's metrics of the run (synaptic operations, sparsity, ...), per sample.",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=str),
    default=None,
    help="Write the metrics as JSON, under NeuroBench's keys ('-': print only the JSON).",
)
@one_line_errors("run")
def run_command(
    file: str,
    steps: int | None,
    dt: float | None,
    batch: int,
    rate: float,
    seed: int,
    input_file: str | None,
    records: tuple[str, ...],
    out: str | None,
    plot: str | None,
    backend: str,
    compiled: bool,
    precision: str,
    device: str,
    allow_negative_tau: bool,
    show_metrics: bool,
    json_out: str | None,
    batch_first: bool,
) -> None:
    """Run FILE on input spikes and print what each node did.

    Without --input the input is random spikes (each input spikes with probability
    --rate per step). Spiking nodes are summarised by spike counts and rates, others by
    their range. --metrics adds NeuroBench's metrics (see docs/metrics.md), --json
    writes them for scripts.

    \b
    Example:
      nirbridge run braille.nir --steps 256 --dt 1e-4 --rate 0.2 \\
          --record lif1.lif --out record.h5 --plot raster.png
      nirbridge run braille.nir --steps 256 --batch 8 --metrics --json metrics.json
    """
    import torch

    from .. import interpret
    from ..data import write_data
    from ..run import run

    outputs_apart(
        {"FILE": file, "--input": input_file},
        {"--out": out, "--plot": plot, **({"--json": json_out} if json_out not in (None, "-") else {})},
    )
    if plot is not None:
        _picture_format(plot)  # before the run, not after it
    if steps is not None and steps < 1:
        raise ParameterError(f"--steps {steps}: run at least one step")
    check_layout(batch_first, input_file)
    where = torch_device(device)
    counting = show_metrics or json_out is not None
    if json_out == "-" and (out is not None or plot is not None or show_metrics):
        raise ParameterError(
            "--json - prints the metrics' JSON and nothing else: give --json a file to write "
            "beside --out, --plot or --metrics"
        )
    if counting and records not in ((), ("all",)):
        raise ParameterError(
            "--metrics and --json count every node of the graph: leave out --record (or give --record all)"
        )
    graph = read_graph(file)
    shapes = input_shapes(graph, file) if input_file is None else declared_inputs(graph)
    if input_file is not None:
        inputs = spikes_file(input_file, shapes, steps, batch_first)
        source = input_file
    else:
        inputs = random_spikes(shapes, 100 if steps is None else steps, batch, rate, seed)
        source = f"random spikes, rate {rate:g}, seed {seed}"
    module = interpret.nir_to_torch(graph, dt=dt, allow_negative_tau=allow_negative_tau, device=where)
    inputs = {name: x.to(where) for name, x in inputs.items()}
    first = next(iter(inputs.values()))
    wanted: str | list[str] = records[0] if records in (("all",), ("outputs",)) else list(records) or "all"

    def timed(given: dict[str, Any]) -> tuple[Any, float]:
        start = time.perf_counter()
        with torch.no_grad():
            done = run(
                module,
                given,
                record=wanted,
                backend=backend,  # type: ignore[arg-type]
                compile=compiled,
                precision=precision,  # type: ignore[arg-type]
                progress=False,
            )
        return done, time.perf_counter() - start

    # the first call builds (or loads from the cache) what the back-end compiles for these
    # shapes; where it was short, a second call gives the steady time
    result, first_call = timed(inputs)
    elapsed = None
    if first_call < AGAIN_UNDER:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the first call said what there is to say
            result, elapsed = timed(inputs)
    total = first.shape[0]
    metrics = result.metrics() if counting else None
    if json_out == "-":
        assert metrics is not None
        click.echo(json.dumps(_metrics_json(file, metrics), indent=2))
        return
    echo(
        f"{file}: {total} steps of {result.dt:g} s, batch {first.shape[1]}, input: {source}\n"
        + (
            f"ran in {elapsed:.3f} s ({elapsed / total * 1e3:.3f} ms per step); the first call took "
            f"{first_call:.3f} s (building or loading compiled kernels, cached for later processes)"
            if elapsed is not None
            else f"ran in {first_call:.3f} s ({first_call / total * 1e3:.3f} ms per step), the first call: "
            "it includes building or loading compiled kernels"
        )
    )
    echo(_run_table(result))
    if metrics is not None and show_metrics:
        echo("\n".join(f"  {line}" for line in metrics.table().splitlines()))
    if metrics is not None and json_out is not None:
        document = json.dumps(_metrics_json(file, metrics), indent=2) + "\n"
        from ..io import atomic_write

        atomic_write(json_out, lambda temporary: Path(temporary).write_text(document, encoding="utf-8"))
        echo(f"wrote {json_out} (the metrics under NeuroBench's keys)")
    if out is not None:
        write_data(out, result.to_nir_data())
        echo(f"wrote {out} (NIRGraphData, {len(result.records)} record(s))")
    if plot is not None:
        keys = (
            (wanted if isinstance(wanted, list) else [])
            or [k for k in result.records if k in result.spiking][:6]
            or list(result.records)[:6]
        )
        _save_figure(result.plot(*keys) if keys else result.plot("output"), plot)
        echo(f"wrote {plot}")


def _metrics_json(file: str, metrics: Any) -> dict[str, Any]:
    """``--json``'s document: NeuroBench's keys (``Metrics.as_neurobench``), with the
    file, the samples and steps counted, and the per-node breakdown."""
    import dataclasses

    return {
        "file": file,
        "samples": metrics.samples,
        "steps": metrics.steps,
        "metrics": metrics.as_neurobench(),
        "layers": [dataclasses.asdict(layer) for layer in metrics.layers],
    }


def _run_table(result: Any) -> str:
    """:meth:`nirbridge.Run.summary` as an indented table."""
    return "\n".join(f"  {line}" for line in result.summary().table().splitlines())

"""``nirbridge verify``: a file against simulators or another file."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import NirBridgeError, ParameterError
from ..model_file import is_model_file, model_from_file
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
)


@click.command(name="verify")
@click.argument("file", type=click.Path(path_type=str))
@click.option(
    "--against",
    "candidates",
    multiple=True,
    help="norse, snntorch, spikingjelly, nirbridge, another .nir file, or a native model as "
    "FILE.py:NAME (a class built without arguments, a function returning a model, or a model); "
    "repeat it. Default: norse and snntorch.",
)
@click.option(
    "--weights",
    type=click.Path(exists=True, dir_okay=False, path_type=str),
    default=None,
    help="A state dict (torch.save) to load into the FILE.py:NAME model before verifying.",
)
@click.option("--steps", type=int, default=100, show_default=True, help="Time steps.")
@click.option("--batch", type=int, default=2, show_default=True, help="Samples.")
@click.option("--rate", type=float, default=0.2, show_default=True, help="Input spike probability per step.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random input.")
@click.option("--dt", type=float, default=None, help="Time step in seconds (default: the file's, else 1e-4).")
@input_options("HDF5 file of input spikes, as run --input takes it (instead of random spikes).")
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=str),
    default=None,
    help="Also write every comparison as JSON ('-': print only the JSON).",
)
@click.option("--atol", type=float, default=1e-6, show_default=True, help="Absolute tolerance for values.")
@click.option("--rtol", type=float, default=1e-5, show_default=True, help="Relative tolerance for values.")
@click.option(
    "--allow-negative-tau",
    is_flag=True,
    help="Load time constants below 0 as they are (trained files sometimes hold them).",
)
@click.option(
    "--allow-silent",
    is_flag=True,
    help="Accept spike comparisons in which neither side spikes (by default they fail: they prove nothing).",
)
@backend_option("How nirbridge runs FILE (and each .nir --against): as run's --backend.")
@one_line_errors("verify")
def verify_command(
    file: str,
    candidates: tuple[str, ...],
    steps: int,
    batch: int,
    rate: float,
    seed: int,
    dt: float | None,
    input_file: str | None,
    json_out: str | None,
    atol: float,
    rtol: float,
    allow_negative_tau: bool,
    allow_silent: bool,
    weights: str | None,
    batch_first: bool,
    backend: str,
) -> None:
    """Check FILE runs the same in nirbridge and elsewhere.

    Runs FILE in nirbridge and in each --against on the same random spikes and
    compares every node. Exit status 1, with the table, when they differ, or when a
    spiking node is silent on both sides (such agreement proves nothing; try --dt or
    a higher --rate, or pass --allow-silent).

    \b
    Example:
      nirbridge verify braille.nir --against norse --against snntorch --steps 200
      nirbridge verify model.nir --against model_retrained.nir
      nirbridge verify model.nir --against train.py:Net --weights net.pt
      nirbridge verify model.nir --input spikes.h5 --json report.json

    A native model (FILE.py:NAME) is run as its simulator runs it and compared layer
    by layer, under the names of the NIR nodes its layers became.
    """
    from ..verify import BACKENDS, verify

    if weights is not None and not any(is_model_file(c) for c in candidates):
        raise ParameterError("--weights loads into a native model: give one with --against FILE.py:NAME")
    outputs_apart(
        {"FILE": file, "--input": input_file, "--weights": weights},
        {"--json": None if json_out == "-" else json_out},
    )
    check_layout(batch_first, input_file)
    graph = read_graph(file)
    if input_file is None:
        inputs = random_spikes(input_shapes(graph, file), steps, batch, rate, seed)
    else:
        inputs = spikes_file(input_file, declared_inputs(graph), None, batch_first)
    quiet = json_out == "-"
    documents: list[dict[str, Any]] = []
    # by position, as nirbridge.verify takes a tensor or a list: two exports of one network
    # may name their Input nodes otherwise ("x" and "input")
    given = next(iter(inputs.values())) if len(inputs) == 1 else list(inputs.values())
    differ = False
    for candidate in candidates or _importable(("norse", "snntorch")):
        if candidate in BACKENDS:
            other: Any = candidate
        elif is_model_file(candidate):
            other = model_from_file(candidate, weights)
        elif candidate.endswith(".nir") or os.path.exists(candidate):
            other = read_graph(candidate)
        else:
            raise ParameterError(
                f"--against {candidate!r}: give {', '.join(BACKENDS)}, the path of a .nir file, or a native "
                "model as FILE.py:NAME"
            )
        report = verify(
            graph,
            other,
            given,
            atol=atol,
            rtol=rtol,
            dt=dt,
            allow_negative_tau=allow_negative_tau,
            allow_silent=allow_silent,
            backend=backend,
        )
        compared = len(report.comparisons)
        silent = report.silent
        spiked = sum(1 for c in report.comparisons if c.spikes and not c.silent)
        verified = report.agree and (allow_silent or not silent)
        documents.append(
            {
                "file": file,
                "against": candidate,
                "verified": verified,
                "agree": report.agree,
                "steps": report.steps,
                "first_divergence": list(report.first_divergence) if report.first_divergence else None,
                "silent": list(silent),
                "comparisons": [dataclasses.asdict(c) for c in report.comparisons],
            }
        )
        if quiet:
            differ = differ or not verified
        elif not report.agree:
            differ = True
            step, key = report.first_divergence or (None, None)
            what = f"first at step {step} in {key!r}" if step is not None else "cannot be compared"
            echo(f"{file} vs {candidate}: DIFFER, {what}")
            echo(report.table())
        elif silent:
            differ = differ or not allow_silent
            echo(
                f"{file} vs {candidate}: agree on {compared} outputs and records over {report.steps} steps, "
                f"but {len(silent)} spiking one(s) never spike on either side ({', '.join(silent)})"
                + ("" if allow_silent else ": not verified")
            )
            if not allow_silent:
                echo(report.table())
        else:
            echo(
                f"{file} vs {candidate}: agree on {compared} outputs and records over {report.steps} steps"
                + (f" ({spiked} of them spiking)" if spiked else "")
            )
    if json_out is not None:
        document = json.dumps(documents, indent=2, default=str) + "\n"
        if quiet:
            click.echo(document, nl=False)
        else:
            from ..io import atomic_write

            atomic_write(json_out, lambda temporary: Path(temporary).write_text(document, encoding="utf-8"))
            echo(f"wrote {json_out}")
    if differ:
        sys.exit(1)


def _importable(simulators: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``simulators`` whose package imports here; each other one is left out with a
    line on stderr saying how to install it (a default run is never aborted for one)."""
    from ..adapters._optional import require

    found = []
    for name in simulators:
        try:
            require({"norse": "norse.torch"}.get(name, name), name)
        except NirBridgeError as error:
            echo(f"nirbridge verify: {name} left out: {error}", err=True)
        else:
            found.append(name)
    if not found:
        raise ParameterError(
            f"none of {', '.join(simulators)} can be imported here: install one, or give --against "
            "nirbridge, a .nir file or FILE.py:NAME"
        )
    return tuple(found)

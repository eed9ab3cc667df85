"""``nirbridge selftest``: prove an install on a device."""

from __future__ import annotations

import json
import sys
import warnings

import click

from .common import (
    echo,
    fail,
)


@click.command(name="selftest", short_help="Prove this install on a device.")
@click.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default=None,
    help="Where to check (default: cuda where torch sees one, else cpu).",
)
@click.option("--quick", is_flag=True, help="Leave out the timings of benchmarks/bench_run.py.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON, for bug reports.")
def selftest(device: str | None, quick: bool, as_json: bool) -> None:
    """Prove this install on a device: every Triton kernel family against the eager
    back-end (float32, float64), three networks through every back-end against
    stepping, the loop probe, BPTT gradients, the precision policy and (without
    --quick) the timings of benchmarks/bench_run.py. Exit status 0 only when every
    check passes.

    \b
    Example:
      nirbridge selftest --device cuda
      nirbridge selftest --device cpu --quick --json > selftest.json
    """
    import torch

    from ..selftest import header, line, verdict
    from ..selftest import selftest as run_selftest

    chosen = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if chosen == "cuda" and not torch.cuda.is_available():
        fail("selftest", "--device cuda: torch sees no CUDA device here; use --device cpu")
    if as_json:  # the document on stdout at the end; each check on stderr as it ends
        click.echo(f"nirbridge selftest on {chosen}: each check as it ends, then the JSON", err=True)
    else:
        echo(header(chosen))
        echo("each check as it ends (about a minute; the timings another minute or two):")

    def said(check: dict) -> None:
        echo(line(check), err=as_json)  # click.echo flushes: a line shows as its check ends

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each check reports what it found
        report = run_selftest(chosen, quick=quick, on_check=said)
    if as_json:
        echo(json.dumps(report, indent=2))
    else:
        echo(verdict(report))
    if not report["ok"]:
        sys.exit(1)

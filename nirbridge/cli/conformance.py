"""``nirbridge conformance``: every simulator's NIR import against NIR's equations."""

from __future__ import annotations

import os
import shutil

import click

from ..errors import ParameterError
from .common import (
    echo,
    one_line_errors,
    outputs_apart,
)


@click.command(name="conformance")
@click.argument("files", nargs=-1, type=click.Path(path_type=str))
@click.option("--pack", "with_pack", is_flag=True, help="Also every graph of the conformance pack.")
@click.option(
    "--simulators",
    default=None,
    help="Comma-separated names: norse, snntorch, spikingjelly (their own NIR imports) and "
    "nirbridge+norse, ... (nirbridge's adapters). Default: every one available here.",
)
@click.option("--steps", type=int, default=100, show_default=True, help="Time steps.")
@click.option("--batch", type=int, default=2, show_default=True, help="Samples.")
@click.option("--rate", type=float, default=0.3, show_default=True, help="Input spike probability per step.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random input.")
@click.option(
    "--dt", type=float, default=None, help="Time step in seconds (default: each file's, else 1e-4)."
)
@click.option(
    "--json", "json_path", default=None, type=click.Path(path_type=str), help="Also write the report as JSON."
)
@click.option(
    "--html", "html_path", default=None, type=click.Path(path_type=str), help="Also write the report as HTML."
)
@click.option(
    "--python",
    "pythons",
    multiple=True,
    help="NAME=PATH: the Python in which peer NAME (sinabs, rockpool, spyx) imports; repeat it. "
    "Default: .venv-peers/NAME/bin/python in nirbridge's checkout where it exists (make peers builds them).",
)
@click.option(
    "--jobs",
    type=int,
    default=None,
    help="How many simulators' processes compute at once (default: one per processor).",
)
@one_line_errors("conformance")
def conformance_command(
    files: tuple[str, ...],
    with_pack: bool,
    simulators: str | None,
    steps: int,
    batch: int,
    rate: float,
    seed: int,
    dt: float | None,
    json_path: str | None,
    html_path: str | None,
    pythons: tuple[str, ...],
    jobs: int | None,
) -> None:
    """Measure each simulator's NIR import against NIR's equations on FILES.

    For each simulator and file: whether it loads, the fraction of output values equal
    to nirbridge's float64 reference, the first step at which they differ, and the
    known convention that explains the difference exactly (dt taken as 1, r ignored, a
    one-step lag, a subtractive reset, ...), or "unexplained".

    \b
    Example:
      nirbridge conformance model.nir
      nirbridge conformance --pack
      nirbridge conformance *.nir --simulators norse,snntorch --json report.json
      nirbridge conformance model.nir --python spyx=/path/to/spyx-venv/bin/python
    """
    from ..conformance import PEERS, conformance, pack, write_json
    from ..hdf5 import regular_file

    for path in files:
        regular_file(path, path, "a .nir file")  # a missing path or a folder; unreadable files are rows
    names = None if simulators is None else [n.strip() for n in simulators.split(",") if n.strip()]
    python = {}
    for entry in pythons:
        name, equals, path = entry.partition("=")
        if not (equals and name and path):
            raise ParameterError(f"--python {entry!r}: give NAME=PATH, e.g. spyx=.venv-peers/spyx/bin/python")
        if name not in PEERS:
            raise ParameterError(f"--python {entry}: {name!r} is no peer; give one of {', '.join(PEERS)}")
        if name in python:
            raise ParameterError(f"--python {entry}: {name} is given twice; give each peer one Python")
        found = shutil.which(path)  # a path, or a name on PATH
        if found is None:
            raise ParameterError(
                f"--python {entry}: {path} is not an executable file; give the Python of a virtualenv in "
                f"which {name} imports (make peers builds .venv-peers/{name} in nirbridge's checkout)"
            )
        python[name] = os.path.abspath(found)
    if jobs is not None and jobs < 1:
        raise ParameterError(f"--jobs {jobs}: give 1 or more processes")
    if not files and not with_pack:
        raise ParameterError("give .nir FILES, or --pack for the conformance pack (or both)")
    read: list[tuple[str, str | None]] = []
    for path in [*files, *(pack.files() if with_pack else [])]:
        beside = path.removesuffix(".nir") + ".inputs.h5"  # the inputs conformance reads where present
        read += [
            ("FILE", path),
            *([(f"the inputs beside {path}:", beside)] if os.path.exists(beside) else []),
        ]
    read += [(f"--python {name}", path) for name, path in python.items()]
    outputs_apart(read, {"--json": json_path, "--html": html_path})
    report = conformance(
        files,
        names,
        steps=steps,
        batch=batch,
        rate=rate,
        seed=seed,
        dt=dt,
        python=python,
        with_pack=with_pack,
        progress=True,
        jobs=jobs,
    )
    echo(report)
    if json_path is not None:
        write_json(report, json_path)
        echo(f"wrote {json_path}")
    if html_path is not None:
        from ..conformance.report import write_html

        write_html(report, html_path)
        echo(f"wrote {html_path}")

"""The ``nirbridge`` command line.

- ``nirbridge info FILE...``: what a ``.nir`` file holds, at a glance (``--json``);
  ``--nodes`` adds a table of every node: type, shapes, parameters, incoming edges
  with the delayed (recurrent) ones marked.
- ``nirbridge convert IN OUT``: ``.nir`` ⇄ elasticai.creator IR ``.json``, or a ``.nir``
  rewritten (``--compression``).
- ``nirbridge export FILE.py:NAME -o model.nir``: trace a torch model into a ``.nir`` file.
- ``nirbridge run FILE``: run a file on random or given spikes, record, write the
  recording as NIRGraphData and draw rasters.
- ``nirbridge verify FILE``: run a file in nirbridge and in norse, snntorch, spikingjelly or another
  file, and report where they differ (exit status 1 when they do).
- ``nirbridge conformance FILE...``: every simulator's own NIR import measured against NIR's
  equations, with a diagnosis of each difference (``--json``).
- ``nirbridge support``: the default conversion maps as a table.
- ``nirbridge draw FILE -o graph.svg``: a picture of the graph.
- ``nirbridge selftest [--device cuda|cpu] [--quick] [--json]``: prove the install on a
  device (:mod:`nirbridge.selftest`).

Bad input (a missing path, a folder, a file that is not what its name says) ends the
command with exit status 1 and one line on stderr naming the file and the problem;
warnings are printed as one line each.

Each command lives in a module of its own, imported only when that command runs, so that
``nirbridge --help`` needs neither torch nor nir.
"""

from __future__ import annotations

import importlib
import sys

import click

__all__ = ["COMMANDS", "main"]

#: name -> (module under nirbridge.cli, the click command in it, the line ``--help`` lists)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "conformance": (
        "conformance",
        "conformance_command",
        "Measure each simulator's NIR import against NIR's equations on FILES.",
    ),
    "convert": ("convert", "convert", "Convert SOURCE to TARGET, by their suffixes."),
    "draw": ("draw", "draw", "Draw FILE's graph, its recurrent edges marked."),
    "export": ("export", "export", "Trace the torch model NAME in FILE.py into a .nir file."),
    "info": ("info", "info", "Summarise each .nir FILE."),
    "run": ("run", "run_command", "Run FILE on input spikes and print what each node did."),
    "selftest": ("selftest", "selftest", "Prove this install on a device."),
    "support": ("support", "support", "Show what converts to what, as a table."),
    "verify": ("verify", "verify_command", "Check FILE runs the same in nirbridge and elsewhere."),
}


class _LazyGroup(click.Group):
    """A group whose commands are imported when one runs; ``--help`` lists them from
    :data:`COMMANDS` (tests/test_cli.py checks each line against its command's own)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute, _ = COMMANDS[cmd_name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in self.list_commands(ctx)])


def _versions() -> str:
    """nirbridge's version and those of the packages it runs with (``--version``)."""
    from importlib import metadata

    from .. import __version__

    lines = [f"nirbridge {__version__}", f"python {sys.version.split()[0]}"]
    for package in ("torch", "nir", "norse", "snntorch", "spikingjelly", "triton", "h5py", "numpy"):
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "not installed"
        lines.append(f"{package} {version}")
    try:
        import torch

        cuda = torch.version.cuda
        lines.append(
            f"torch build: {'CUDA ' + cuda if cuda else 'CPU'}"
            + (f", {torch.cuda.device_count()} GPU(s) visible" if cuda else "")
        )
    except ImportError:
        pass
    return "\n".join(lines)


def _print_versions(context: click.Context, _: click.Parameter, value: bool) -> None:
    if value and not context.resilient_parsing:
        click.echo(_versions())
        context.exit()


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_versions,
    help="Show the versions of nirbridge, python, torch, nir, norse, snntorch and the other "
    "packages it runs with, and exit.",
)
def main() -> None:
    """Inspect, convert, run, verify and draw NIR (.nir) files."""

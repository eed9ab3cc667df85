"""The ``nirbridge`` command line.

``nirbridge info FILE...`` prints what a ``.nir`` file holds, at a glance: the nir
version that wrote it, nodes by type, edges, input and output shapes, parameter count
and size, dt if recorded, and whatever did not fit NIR. ``--json`` prints the same as
JSON. The exit status is 1, with a one-line reason per file, when a file cannot be read.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import click
import nir
import numpy as np

from .errors import NirBridgeError
from .io import NirFile, load

__all__ = ["main", "summarize"]

# Fields that are hyperparameters, not parameters, in nir 1.0.8's node types.
_NOT_PARAMETERS = {
    "input_shape",
    "stride",
    "padding",
    "dilation",
    "groups",
    "kernel_size",
    "start_dim",
    "end_dim",
}


def _shape(types: Any) -> list[int] | None:
    """A node's declared shape, or None where it is unknown or not a list of integers."""
    value = next(iter(types.values()), None) if isinstance(types, dict) else None
    array = np.asarray(value) if value is not None else None
    if array is None or array.dtype.kind not in "iu":
        return None
    return [int(v) for v in array.reshape(-1)]


def _dt(metadata: Any) -> float | None:
    """metadata["dt"] as a float, None where absent, not one number, or not finite."""
    value = metadata.get("dt") if isinstance(metadata, dict) else None
    array = np.asarray(value) if value is not None else None
    if array is None or array.size != 1 or array.dtype.kind not in "iuf":
        return None
    dt = float(array.reshape(-1)[0])
    return dt if np.isfinite(dt) else None


def _walk(graph: nir.NIRGraph, prefix: str = ""):
    for name, node in graph.nodes.items():
        yield f"{prefix}{name}", node
        if isinstance(node, nir.NIRGraph):
            yield from _walk(node, f"{prefix}{name}.")


def summarize(loaded: NirFile) -> dict[str, Any]:
    """A JSON-ready summary of a loaded file (what ``nirbridge info`` prints)."""
    root = loaded.node
    if isinstance(root, nir.NIRGraph):
        graph = root
    else:
        graph = nir.NIRGraph(nodes={"node": root}, edges=[], type_check=False)
    types: Counter[str] = Counter()
    values: Counter[str] = Counter()
    size = 0
    edges = len(graph.edges)
    for _, node in _walk(graph):
        types[type(node).__name__] += 1
        if isinstance(node, nir.NIRGraph):
            edges += len(node.edges)
            continue
        if isinstance(node, (nir.Input, nir.Output, nir.Flatten)):
            continue
        for field, value in vars(node).items():
            if field in _NOT_PARAMETERS or field in ("input_type", "output_type", "metadata"):
                continue
            if isinstance(value, (np.ndarray, np.number)) and np.asarray(value).dtype.kind in "biufc":
                values[str(np.asarray(value).dtype)] += int(np.size(value))
                size += int(np.asarray(value).nbytes)
    return {
        "file": loaded.source,
        "version": loaded.version,
        "file_bytes": loaded.size,
        "nodes": sum(types.values()),
        "edges": edges,
        "subgraphs": types.get("NIRGraph", 0),
        "node_types": dict(sorted(types.items(), key=lambda item: (-item[1], item[0]))),
        "inputs": {n: _shape(v.input_type) for n, v in graph.nodes.items() if isinstance(v, nir.Input)},
        "outputs": {n: _shape(v.output_type) for n, v in graph.nodes.items() if isinstance(v, nir.Output)},
        "parameters": sum(values.values()),
        "parameter_bytes": size,
        "parameters_by_dtype": dict(sorted(values.items(), key=lambda item: (-item[1], item[0]))),
        "dt": _dt(getattr(root, "metadata", None)),
        "warnings": [message for _, message in loaded.warnings],
    }


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _shapes(entries: dict[str, list[int] | None]) -> str:
    if not entries:
        return "none"
    return ", ".join(f"{name} {tuple(s) if s is not None else '(unknown)'}" for name, s in entries.items())


def render(summary: dict[str, Any]) -> str:
    """The human-readable form of :func:`summarize`'s result."""
    types = ", ".join(f"{count} {name}" for name, count in summary["node_types"].items())
    by_dtype = ", ".join(f"{count:,} {dtype}" for dtype, count in summary["parameters_by_dtype"].items())
    dt = summary["dt"]
    lines = [
        summary["file"],
        f"  written by   nir {summary['version']}, {_bytes(summary['file_bytes'])}",
        f"  graph        {summary['nodes']} nodes, {summary['edges']} edges"
        + (f", {summary['subgraphs']} nested graph(s)" if summary["subgraphs"] else ""),
        f"  node types   {types}",
        f"  inputs       {_shapes(summary['inputs'])}",
        f"  outputs      {_shapes(summary['outputs'])}",
        f"  parameters   {summary['parameters']:,} values, {_bytes(summary['parameter_bytes'])}"
        + (f" ({by_dtype})" if by_dtype else ""),
        f"  dt           {dt:g} s (metadata)" if dt is not None else "  dt           not recorded",
    ]
    if summary["warnings"]:
        lines.append(f"  warnings     {len(summary['warnings'])}")
        lines += [f"    - {w}" for w in summary["warnings"]]
    else:
        lines.append("  warnings     none")
    return "\n".join(lines)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nirbridge")
def main() -> None:
    """Inspect and convert NIR (.nir) files."""


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True, allow_dash=False))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object per file (a list for several).")
def info(files: tuple[str, ...], as_json: bool) -> None:
    """Summarise each .nir FILE: version, nodes, edges, shapes, parameters, dt, warnings."""
    summaries = []
    failed = False
    for path in files:
        try:
            summaries.append(summarize(load(path)))
        except NirBridgeError as error:
            failed = True
            click.echo(f"nirbridge info: {' '.join(str(error).split())}", err=True)
    if as_json and summaries:
        click.echo(json.dumps(summaries[0] if len(files) == 1 else summaries, indent=2))
    elif summaries:
        click.echo("\n\n".join(render(s) for s in summaries))
    sys.exit(1 if failed else 0)

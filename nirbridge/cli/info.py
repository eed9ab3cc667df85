"""``nirbridge info``: what a .nir file holds."""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from typing import Any

import click
import nir
import numpy as np

from .. import graph as graph_utils
from ..errors import NirBridgeError
from ..io import NirFile, load
from ..text import printable
from .common import (
    cli_terms,
    echo,
)

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


def _root_graph(loaded: NirFile) -> nir.NIRGraph:
    """The file's graph; a file holding a single node is shown as a graph of one, ``node``."""
    root = loaded.node
    if isinstance(root, nir.NIRGraph):
        return root
    return nir.NIRGraph(nodes={"node": root}, edges=[], type_check=False)


def _parameter_arrays(node: nir.NIRNode) -> list[np.ndarray]:
    """A leaf node's parameters: its numeric array fields, less shapes and hyperparameters
    (``_NOT_PARAMETERS``); none for graphs, Input, Output and Flatten."""
    if isinstance(node, (nir.NIRGraph, nir.Input, nir.Output, nir.Flatten)):
        return []
    arrays = []
    for field, value in vars(node).items():
        if field in _NOT_PARAMETERS or field in ("input_type", "output_type", "metadata"):
            continue
        if isinstance(value, (np.ndarray, np.number)) and np.asarray(value).dtype.kind in "biufc":
            arrays.append(np.asarray(value))
    return arrays


def _parameters(node: nir.NIRNode) -> int:
    """How many parameter values a node holds; a nested graph, all those inside it."""
    if isinstance(node, nir.NIRGraph):
        return sum(_parameters(member) for member in node.nodes.values())
    return sum(int(array.size) for array in _parameter_arrays(node))


def summarize(loaded: NirFile) -> dict[str, Any]:
    """A JSON-ready summary of a loaded file (what ``nirbridge info`` prints)."""
    root = loaded.node
    graph = _root_graph(loaded)
    types: Counter[str] = Counter()
    values: Counter[str] = Counter()
    size = 0
    edges = len(graph.edges)
    for _, node in _walk(graph):
        types[type(node).__name__] += 1
        if isinstance(node, nir.NIRGraph):
            edges += len(node.edges)
        for array in _parameter_arrays(node):
            values[str(array.dtype)] += int(array.size)
            size += int(array.nbytes)
    return {
        "file": loaded.source,
        "version": loaded.version,
        "file_bytes": loaded.size,
        "nodes": sum(types.values()),
        "edges": edges,
        "subgraphs": types.get("NIRGraph", 0),
        "node_types": dict(sorted(types.items(), key=lambda item: (-item[1], item[0]))),
        "inputs": {
            n: graph_utils.declared_shape(v.input_type)
            for n, v in graph.nodes.items()
            if isinstance(v, nir.Input)
        },
        "outputs": {
            n: graph_utils.declared_shape(v.output_type)
            for n, v in graph.nodes.items()
            if isinstance(v, nir.Output)
        },
        "parameters": sum(values.values()),
        "parameter_bytes": size,
        "parameters_by_dtype": dict(sorted(values.items(), key=lambda item: (-item[1], item[0]))),
        "dt": _dt(getattr(root, "metadata", None)),
        "warnings": [message for _, message in loaded.warnings] + _health(root),
    }


def _health(root: Any) -> list[str]:
    """What importing the file would refuse or warn about, in the command line's terms:
    meaningless and suspicious parameters (:func:`nirbridge.validate.review`) and a dt
    too large for the neurons' time constants, at the file's dt (else the assumed one)."""
    from .. import interpret, validate

    recorded = _dt(getattr(root, "metadata", None))
    dt = recorded if recorded is not None else interpret.DEFAULT_DT
    found = validate.review(root, dt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            interpret._check_time_constants(root, dt)
        except (TypeError, ValueError, AttributeError):
            pass  # values the review already named
    found += [str(w.message) for w in caught]
    if recorded is None and interpret._uses_dt(root):
        found.append(
            f"no time step recorded (metadata['dt']): it runs at dt = {dt:g} s unless given --dt; "
            "a network trained at another dt may run silent or blow up"
        )
    return [cli_terms(message) for message in found]


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


def _node_rows(graph: nir.NIRGraph) -> list[tuple[int, dict[str, Any]]]:
    """Every node as ``(depth, row)``, each level in evaluation order (nodes no Input
    reaches after, in graph order) with its nested graph's nodes right below it.

    A row holds the dotted ``name``, the enclosing ``graph`` (dotted, "" at the top),
    ``type``, ``input_shape`` and ``output_shape`` (None where unknown), ``parameters``
    (for a nested graph: all the values inside it) and ``inputs``: the incoming edges
    as ``{"source", "delayed"}``, delayed as :func:`nirbridge.graph.plan` finds them.
    """
    rows: list[tuple[int, dict[str, Any]]] = []

    def level(g: nir.NIRGraph, path: str, depth: int) -> None:
        prefix = f"{path}." if path else ""
        the_plan = graph_utils.plan(g, path, strict=False)
        reached = set(the_plan.order)
        for name in [*the_plan.order, *(n for n in g.nodes if n not in reached)]:
            node = g.nodes[name]
            row = {
                "name": f"{prefix}{name}",
                "graph": path,
                "type": type(node).__name__,
                "input_shape": graph_utils.declared_shape(node.input_type),
                "output_shape": graph_utils.declared_shape(node.output_type),
                "parameters": _parameters(node),
                "inputs": [
                    {"source": f"{prefix}{source}", "delayed": delayed}
                    for source, delayed in the_plan.incoming[name]
                ],
            }
            rows.append((depth, row))
            if isinstance(node, nir.NIRGraph):
                level(node, f"{prefix}{name}", depth + 1)

    level(graph, "", 0)
    return rows


def _render_nodes(rows: list[tuple[int, dict[str, Any]]]) -> str:
    """The node table of ``info --nodes``: nested nodes indented under their graph,
    incoming edges after ``←`` with delayed ones marked ``(delayed)``."""

    def shape(value: list[int] | None) -> str:
        return str(tuple(value)) if value is not None else "?"

    def edges(inputs: list[dict[str, Any]]) -> str:
        text = ", ".join(printable(e["source"]) + (" (delayed)" if e["delayed"] else "") for e in inputs)
        return f"← {text}" if text else ""

    table = [("name", "type", "input", "output", "parameters", "edges in")]
    table += [
        (
            "  " * depth + printable(row["name"]),
            row["type"],
            shape(row["input_shape"]),
            shape(row["output_shape"]),
            f"{row['parameters']:,}" if row["parameters"] else "-",
            edges(row["inputs"]),
        )
        for depth, row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    legend = "in evaluation order; ← incoming edges; (delayed) ones carry the previous step's output"
    lines = [f"  nodes        {legend}"]
    for line in table:
        cells = [line[i].ljust(widths[i]) for i in range(4)] + [line[4].rjust(widths[4]), line[5]]
        lines.append(("    " + "  ".join(cells)).rstrip())
    return "\n".join(lines)


@click.command(name="info")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True, allow_dash=False))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object per file (a list for several).")
@click.option(
    "--nodes",
    "list_nodes",
    is_flag=True,
    help="List every node (nested ones indented under their graph): type, input and output shape, "
    "parameters, incoming edges with delayed (recurrent) ones marked. With --json: a 'node_list' entry.",
)
def info(files: tuple[str, ...], as_json: bool, list_nodes: bool) -> None:
    """Summarise each .nir FILE.

    Shows the nir version, nodes by type, edges, input and output shapes, parameters,
    dt and warnings; --nodes adds every node with its incoming edges.

    \b
    Example:
      nirbridge info model.nir
      nirbridge info --nodes --json model.nir other.nir
    """
    summaries = []
    tables = []
    failed = False
    for path in files:
        try:
            loaded = load(path)
            summary = summarize(loaded)
            if list_nodes:
                rows = _node_rows(_root_graph(loaded))
                summary["node_list"] = [row for _, row in rows]
                tables.append(_render_nodes(rows))
            summaries.append(summary)
        except NirBridgeError as error:
            failed = True
            echo(f"nirbridge info: {' '.join(str(error).split())}", err=True)
    if as_json and summaries:
        echo(json.dumps(summaries[0] if len(files) == 1 else summaries, indent=2))
    elif summaries:
        texts = [render(s) for s in summaries]
        if list_nodes:
            texts = [f"{text}\n{table}" for text, table in zip(texts, tables)]
        echo("\n\n".join(texts))
    sys.exit(1 if failed else 0)

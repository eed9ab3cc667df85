"""The ``nirbridge`` command line.

- ``nirbridge info FILE...``: what a ``.nir`` file holds, at a glance (``--json``);
  ``--nodes`` adds a table of every node: type, shapes, parameters, incoming edges
  with the delayed (recurrent) ones marked.
- ``nirbridge convert IN OUT``: ``.nir`` ⇄ elasticai.creator IR ``.json``, or a ``.nir``
  rewritten (``--compression``).
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
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import shutil
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import nir
import numpy as np

from . import graph as graph_utils
from .draw import ENGINES, RANKDIRS
from .errors import InputError, NirBridgeError, NirFileError, ParameterError
from .io import NirFile, load
from .limits import check_memory
from .model_file import is_model_file, model_from_file
from .text import printable, printable_lines

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


def _echo(message: Any = "", err: bool = False) -> None:
    """click.echo of text whose names may come from files: every character a terminal
    would act on (escape sequences, bidi overrides) is shown escaped; newlines and tabs
    that nirbridge's own layout uses are kept."""
    click.echo(printable_lines(str(message)), err=err)


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
    from . import interpret, validate

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
    return [_cli_terms(message) for message in found]


_CLI_TERMS = (
    # "nir_to_torch(..., x=True) (--x on the command line)" says the option already
    (re.compile(r"[\w.]+\((?:[^()]|\([^()]*\))*\),? \(?(--[\w-]+) on the command line\)?"), r"\1"),
    (re.compile(r"(nir_to_torch|nirbridge\.run|verify)\((\.\.\., )?dt=\.\.\.\)"), "--dt"),
    (re.compile(r" \(this warning is a nirbridge\.\w+, which can be filtered\)"), ""),
    (re.compile(r"record=\['([^']*)'\]"), r"--record \1"),
)


def _cli_terms(message: str) -> str:
    """A library message with the command line's options in place of keyword arguments
    (``--dt`` for ``nir_to_torch(..., dt=...)``)."""
    for pattern, option in _CLI_TERMS:
        message = pattern.sub(option, message)
    return message


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


def _versions() -> str:
    """nirbridge's version and those of the packages it runs with (``--version``)."""
    from importlib import metadata

    from . import __version__

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
        _echo(_versions())
        context.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


@main.command()
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
            _echo(f"nirbridge info: {' '.join(str(error).split())}", err=True)
    if as_json and summaries:
        _echo(json.dumps(summaries[0] if len(files) == 1 else summaries, indent=2))
    elif summaries:
        texts = [render(s) for s in summaries]
        if list_nodes:
            texts = [f"{text}\n{table}" for text, table in zip(texts, tables)]
        _echo("\n\n".join(texts))
    sys.exit(1 if failed else 0)


# ----------------------------------------------------------------------------- shared


def _fail(command: str, message: str) -> None:
    _echo(f"nirbridge {command}: {' '.join(str(message).split())}", err=True)
    sys.exit(1)


def _one_line_errors(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Print bad-input errors as one line and exit 1; print each warning as one line."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                warnings.filterwarnings("ignore", category=DeprecationWarning)
                try:
                    fn(*args, **kwargs)
                except NirBridgeError as error:
                    _report(command, caught)
                    _fail(command, str(error))
            _report(command, caught)

        return wrapper

    return decorate


def _report(command: str, caught: list[warnings.WarningMessage]) -> None:
    """Print each warning once (rebuilding a graph for another simulator repeats them)."""
    for text in dict.fromkeys(_cli_terms(" ".join(str(w.message).split())) for w in caught):
        _echo(f"nirbridge {command}: warning: {text}", err=True)
    caught.clear()


def _graph(path: str) -> nir.NIRGraph:
    """A .nir file's graph; a file holding a single node has nothing to run."""
    from .io import read

    node = read(path)
    if not isinstance(node, nir.NIRGraph):
        raise NirFileError(f"{path}: holds a single {type(node).__name__} node, not a graph to run")
    return node


def _input_shapes(graph: nir.NIRGraph, path: str) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for name, node in graph.nodes.items():
        if isinstance(node, nir.Input):
            shape = graph_utils.declared_shape(node.input_type)
            if shape is None:
                raise InputError(
                    f"{path}: input {name!r} has no declared shape, so random spikes cannot be made "
                    "for it; give the spikes with --input FILE.h5"
                )
            shapes[name] = tuple(shape)
    return shapes


def _random_spikes(shapes: dict[str, tuple[int, ...]], steps: int, batch: int, rate: float, seed: int) -> Any:
    import torch

    if not 0.0 <= rate <= 1.0:
        raise ParameterError(f"--rate {rate}: a spike probability per step, between 0 and 1")
    if steps < 1 or batch < 1:
        raise ParameterError(f"--steps {steps} --batch {batch}: both must be 1 or more")
    if not 0 <= seed < 2**63:
        raise ParameterError(f"--seed {seed}: give a seed from 0 to 2**63 - 1 (what torch's generator takes)")
    values = steps * batch * sum(math.prod(shape) for shape in shapes.values())
    check_memory(  # a bool per value, and torch.rand's float32 draws for the largest input
        values + 4 * steps * batch * max((math.prod(s) for s in shapes.values()), default=0),
        f"random input spikes of {steps} steps x batch {batch}",
        "give fewer --steps or a smaller --batch",
    )
    generator = torch.Generator().manual_seed(seed)
    spikes = {
        name: torch.rand((steps, batch, *shape), generator=generator) < rate for name, shape in shapes.items()
    }
    return spikes


def _declared_inputs(graph: nir.NIRGraph) -> dict[str, tuple[int, ...]]:
    """Each Input node's declared shape, ``()`` where it declares none (a spikes file's
    datasets then give it)."""
    return {
        n: tuple(graph_utils.declared_shape(v.input_type) or ())
        for n, v in graph.nodes.items()
        if isinstance(v, nir.Input)
    }


def _spikes_file(path: str, shapes: dict[str, tuple[int, ...]], steps: int | None) -> Any:
    """Input spikes from an HDF5 file: one dataset per Input node, named after it (a
    lone dataset serves a lone Input), time first: ``[T, B, *shape]`` or ``[T, *shape]``.
    The file is read through nirbridge's hardened reader, as a ``.nir`` file is."""
    import torch

    from .hdf5 import read_datasets

    def choose(found: dict[str, tuple[tuple[int, ...], np.dtype[Any]]]) -> dict[str, str]:
        if "version" in found and found["version"][1].kind in "OSU":
            raise InputError(
                f"{path}: is a .nir file (it holds a 'version' string), not input spikes; give an "
                "HDF5 file with one dataset of [T, B, ...] spikes per Input node, named after it"
            )
        if len(shapes) == 1 and len(found) == 1:
            chosen = {next(iter(shapes)): next(iter(found))}
        else:
            missing = [n for n in shapes if n not in found]
            if missing:
                raise InputError(
                    f"{path}: no dataset for input(s) {missing}; it holds {sorted(found) or 'none'}. "
                    "Store one dataset per Input node, named after it"
                )
            chosen = {n: n for n in shapes}
        for stored in chosen.values():
            shape, kind = found[stored]
            if kind.kind not in "biuf":
                raise InputError(f"{path}: dataset {stored!r} holds {kind}, not numbers or booleans")
            if not shape:
                raise InputError(f"{path}: dataset {stored!r} holds a single value; store [T, B, ...] spikes")
            rows = shape[0] if steps is None else min(steps, shape[0])
            converted = 0 if kind in (np.dtype(bool), np.dtype(np.float32)) else 4  # cast to float32
            check_memory(
                (kind.itemsize + converted) * rows * math.prod(shape[1:]),
                f"{path}: dataset {stored!r} of shape {shape}",
                "pass --steps to read fewer time steps, or store fewer",
            )
        return chosen

    arrays = read_datasets(path, "an HDF5 file of input spikes", rows=steps, choose=choose)
    inputs = {}
    for name, array in arrays.items():
        shape = shapes[name]
        if array.dtype.kind not in "biuf":
            raise InputError(f"{path}: dataset {name!r} holds {array.dtype}, not numbers or booleans")
        if tuple(array.shape[1:]) == shape:
            array = array[:, None]  # [T, *shape]: a batch of one
        if tuple(array.shape[2:]) == shape and array.shape[1] == 0:
            raise InputError(
                f"{path}: dataset {name!r} has shape {array.shape}: a batch of 0 samples, so nothing would "
                "run; store [T, B, ...] spikes with B >= 1 (as --batch takes 1 or more)"
            )
        if tuple(array.shape[2:]) != shape or array.shape[0] == 0:
            raise InputError(
                f"{path}: dataset {name!r} has shape {array.shape}; input {name!r} takes "
                f"[T, B, {', '.join(map(str, shape))}] or [T, {', '.join(map(str, shape))}] with T >= 1"
            )
        if array.dtype.kind == "f" and array.dtype.itemsize > 4:
            raise InputError(
                f"{path}: dataset {name!r} holds {array.dtype}, but the network computes in float32, "
                "which would round it; store the spikes as bool, integers or float32"
            )
        native = array.astype(array.dtype.newbyteorder("="), copy=False)  # a big-endian file's values
        inputs[name] = torch.from_numpy(np.ascontiguousarray(native))  # run casts what it holds exactly
    return inputs


AGAIN_UNDER = 5.0
"""Seconds under which ``run`` calls the module a second time, for the steady time."""


def _device(name: str) -> Any:
    """``--device NAME`` as a torch device that exists here, or a ParameterError."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as error:
        raise ParameterError(
            f"--device {name}: not a torch device ({error}); give cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ParameterError(f"--device {name}: torch sees no CUDA device here; use --device cpu")
        if device.index is not None and device.index >= count:
            raise ParameterError(
                f"--device {name}: torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    elif device.type != "cpu":
        raise ParameterError(f"--device {name}: nirbridge runs on cpu or cuda")
    return device


def _outputs_apart(
    inputs: dict[str, str | None] | list[tuple[str, str | None]], outputs: dict[str, str | None]
) -> None:
    """Refuse an output path that names an input of the same command or another output,
    also through a symbolic or hard link: writing it would replace what is read (``run
    m.nir --out m.nir`` replaced the model with the recording and exited 0)."""

    def identity(path: str) -> tuple[int, int] | str:
        try:
            status = os.stat(path)
        except (OSError, ValueError):
            return os.path.realpath(path)
        return (status.st_dev, status.st_ino)

    pairs = inputs.items() if isinstance(inputs, dict) else inputs  # a list where one option names many
    read = {identity(path): f"{what} {path}" for what, path in pairs if path is not None}
    written: dict[tuple[int, int] | str, str] = {}
    for what, path in outputs.items():
        if path is None:
            continue
        key = identity(path)
        if key in read:
            raise ParameterError(
                f"{what} {path}: is {read[key]}, which this command reads; writing it would replace it. "
                "Give another path"
            )
        if key in written:
            raise ParameterError(f"{what} {path}: is also {written[key]}; give each output its own path")
        written[key] = f"{what} {path}"


def _picture_format(path: str) -> str:
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if suffix not in ("png", "svg", "pdf"):
        raise ParameterError(f"--plot {path}: end the name in .png, .svg or .pdf")
    return suffix


def _save_figure(figure: Any, path: str) -> None:
    from .io import atomic_write

    suffix = _picture_format(path)
    try:
        atomic_write(path, lambda tmp: figure.savefig(tmp, format=suffix, dpi=120))
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)


# ----------------------------------------------------------------------------- convert


def _json_state(state_dict: dict[str, Any]) -> dict[str, Any]:
    return {
        key: {
            "dtype": str(value.dtype).replace("torch.", ""),
            "shape": list(value.shape),
            "data": value.reshape(-1).tolist(),
        }
        for key, value in state_dict.items()
    }


def _state_from_json(entries: Any, path: str) -> dict[str, Any]:
    import torch

    if not isinstance(entries, dict):
        raise NirFileError(f"{path}: 'state_dict' must be an object of tensors")
    state: dict[str, Any] = {}
    for key, entry in entries.items():
        try:
            dtype = getattr(torch, entry["dtype"])
            state[key] = torch.tensor(entry["data"], dtype=dtype).reshape(entry["shape"])
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as error:
            raise NirFileError(
                f"{path}: state_dict entry {key!r} is not {{dtype, shape, data}} "
                f"({type(error).__name__}: {error})"
            ) from None
    return state


def _read_ir_json(path: str) -> tuple[Any, dict[str, Any]]:
    from .hdf5 import regular_file

    regular_file(path, path, "an elasticai IR .json file")
    try:
        with open(path, encoding="utf-8") as file:
            document = json.load(file)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NirFileError(f"{path}: not a JSON file ({error})") from None
    except RecursionError:
        raise NirFileError(f"{path}: its JSON nests too deep to be an elasticai IR file") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise NirFileError(f"{path}: holds a value no IR file holds ({error})") from None
    if not isinstance(document, dict) or "ir" not in document:
        raise NirFileError(
            f"{path}: not an elasticai IR file: expected an object with 'ir' and 'state_dict' "
            "(as `nirbridge convert model.nir model.json` writes)"
        )
    ir = document["ir"]
    if isinstance(ir, dict) and set(ir) == {"root", "registry"}:  # 0.68: {"root", "registry"}
        ir = (ir["root"], ir["registry"])
    elif isinstance(ir, list) and len(ir) == 2 and all(isinstance(part, dict) for part in ir):
        ir = (ir[0], ir[1])  # 0.68: [root, registry]
    return ir, _state_from_json(document.get("state_dict", {}), path)


def _write_ir_json(path: str, ir: Any, state_dict: dict[str, Any], ir_version: str) -> None:
    from .io import atomic_write

    def default(value: Any) -> Any:
        if isinstance(value, (np.generic, np.ndarray)):
            return value.tolist()
        if isinstance(value, (tuple, set, frozenset)):
            return list(value)
        raise TypeError(f"cannot store a {type(value).__name__} in JSON")

    text = json.dumps(
        {
            "format": "elasticai.creator IR (nirbridge)",
            "ir_version": ir_version,
            "ir": {"root": ir[0], "registry": ir[1]} if ir_version == "0.68" else ir,
            "state_dict": _json_state(state_dict),
        },
        indent=1,
        default=default,
    )

    def fill(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)

    atomic_write(path, fill)


def _parse_shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        raise ParameterError(f"--input-shape {text!r}: give sizes separated by commas, e.g. 2,10") from None
    if not shape or any(n < 1 for n in shape):
        raise ParameterError(f"--input-shape {text!r}: give positive sizes separated by commas, e.g. 2,10")
    return shape


@main.command()
@click.argument("source", type=click.Path(path_type=str))
@click.argument("target", type=click.Path(path_type=str))
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "lzf"]),
    default="none",
    show_default=True,
    help="How a written .nir file stores its arrays.",
)
@click.option(
    "--input-shape", default=None, help="For .json → .nir: the input's shape without batch, e.g. 2,10."
)
@click.option(
    "--ir-version",
    type=click.Choice(["0.66", "0.68"]),
    default="0.66",
    show_default=True,
    help="For .nir → .json: the elasticai.creator IR form written (0.66: 0.63-0.67's as_dict() "
    "dicts; 0.68: IrSerializer's root and registry). .json → .nir reads either.",
)
@_one_line_errors("convert")
def convert(source: str, target: str, compression: str, input_shape: str | None, ir_version: str) -> None:
    """Convert SOURCE to TARGET, by their suffixes.

    \b
    .nir  → .json   the graph as an elasticai.creator IR, with its weights
    .json → .nir    an elasticai.creator IR file (as written above, either form) as NIR
    .nir  → .nir    the same graph rewritten (e.g. with --compression gzip)

    \b
    Example:
      nirbridge convert model.nir model.json
      nirbridge convert model.nir model.json --ir-version 0.68
      nirbridge convert model.json model.nir --compression gzip
    """
    from .adapters import elasticai
    from .io import write

    _outputs_apart({"SOURCE": source}, {"TARGET": target})
    kinds = (Path(source).suffix.lower(), Path(target).suffix.lower())
    level = None if compression == "none" else compression
    if kinds == (".nir", ".json"):
        ir, state_dict = elasticai.from_nir(source, ir_version=ir_version, as_dicts=True)
        _write_ir_json(target, ir, state_dict, ir_version)
        count = len(ir) if ir_version == "0.66" else 1 + len(ir[1])
        what = f"elasticai {ir_version} IR with {count} implementation(s), {len(state_dict)} tensor(s)"
    elif kinds == (".json", ".nir"):
        ir, state_dict = _read_ir_json(source)
        graph = elasticai.to_nir(ir, state_dict, input_shape=_parse_shape(input_shape))
        write(target, graph, compression=level)
        what = f"NIR graph with {len(graph.nodes)} nodes"
    elif kinds == (".nir", ".nir"):
        graph = load(source).node
        write(target, graph, compression=level)
        what = "NIR file" + (f", {compression}-compressed" if level else ", uncompressed")
    else:
        raise ParameterError(
            f"cannot convert {kinds[0] or 'no suffix'} to {kinds[1] or 'no suffix'}: convert takes "
            ".nir → .json, .json → .nir and .nir → .nir"
        )
    _echo(f"wrote {target}: {what}")


# ----------------------------------------------------------------------------- run


@main.command(name="run")
@click.argument("file", type=click.Path(path_type=str))
@click.option("--steps", type=int, default=None, help="Time steps (default 100, or all of --input).")
@click.option("--dt", type=float, default=None, help="Time step in seconds (default: the file's, else 1e-4).")
@click.option("--batch", type=int, default=1, show_default=True, help="Samples of random input.")
@click.option(
    "--rate", type=float, default=0.1, show_default=True, help="Spike probability per input per step."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random input.")
@click.option(
    "--input",
    "input_file",
    type=click.Path(path_type=str),
    default=None,
    help="HDF5 file of input spikes: a dataset per Input node, [T, B, ...] or [T, ...].",
)
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
@click.option(
    "--backend",
    type=click.Choice(["auto", "eager", "compile", "triton", "cpu"]),
    default="auto",
    show_default=True,
    help="How run computes: compile is torch.compile (slow to start, fast to run).",
)
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
@_one_line_errors("run")
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

    from . import interpret
    from .data import write_data
    from .run import run

    _outputs_apart(
        {"FILE": file, "--input": input_file},
        {"--out": out, "--plot": plot, **({"--json": json_out} if json_out not in (None, "-") else {})},
    )
    if plot is not None:
        _picture_format(plot)  # before the run, not after it
    if steps is not None and steps < 1:
        raise ParameterError(f"--steps {steps}: run at least one step")
    where = _device(device)
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
    graph = _graph(file)
    shapes = _input_shapes(graph, file) if input_file is None else _declared_inputs(graph)
    if input_file is not None:
        inputs = _spikes_file(input_file, shapes, steps)
        source = input_file
    else:
        inputs = _random_spikes(shapes, 100 if steps is None else steps, batch, rate, seed)
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
    _echo(
        f"{file}: {total} steps of {result.dt:g} s, batch {first.shape[1]}, input: {source}\n"
        + (
            f"ran in {elapsed:.3f} s ({elapsed / total * 1e3:.3f} ms per step); the first call took "
            f"{first_call:.3f} s (building or loading compiled kernels, cached for later processes)"
            if elapsed is not None
            else f"ran in {first_call:.3f} s ({first_call / total * 1e3:.3f} ms per step), the first call: "
            "it includes building or loading compiled kernels"
        )
    )
    _echo(_run_table(result))
    if metrics is not None and show_metrics:
        _echo("\n".join(f"  {line}" for line in metrics.table().splitlines()))
    if metrics is not None and json_out is not None:
        document = json.dumps(_metrics_json(file, metrics), indent=2) + "\n"
        from .io import atomic_write

        atomic_write(json_out, lambda temporary: Path(temporary).write_text(document, encoding="utf-8"))
        _echo(f"wrote {json_out} (the metrics under NeuroBench's keys)")
    if out is not None:
        write_data(out, result.to_nir_data())
        _echo(f"wrote {out} (NIRGraphData, {len(result.records)} record(s))")
    if plot is not None:
        keys = (
            (wanted if isinstance(wanted, list) else [])
            or [k for k in result.records if k in result.spiking][:6]
            or list(result.records)[:6]
        )
        _save_figure(result.plot(*keys) if keys else result.plot("output"), plot)
        _echo(f"wrote {plot}")


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


# ----------------------------------------------------------------------------- verify


@main.command(name="verify")
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
@click.option(
    "--input",
    "input_file",
    type=click.Path(path_type=str),
    default=None,
    help="HDF5 file of input spikes, as run --input takes it (instead of random spikes).",
)
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
@_one_line_errors("verify")
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
    from .verify import BACKENDS, verify

    if weights is not None and not any(is_model_file(c) for c in candidates):
        raise ParameterError("--weights loads into a native model: give one with --against FILE.py:NAME")
    _outputs_apart(
        {"FILE": file, "--input": input_file, "--weights": weights},
        {"--json": None if json_out == "-" else json_out},
    )
    graph = _graph(file)
    if input_file is None:
        inputs = _random_spikes(_input_shapes(graph, file), steps, batch, rate, seed)
    else:
        inputs = _spikes_file(input_file, _declared_inputs(graph), None)
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
            other = _graph(candidate)
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
            _echo(f"{file} vs {candidate}: DIFFER, {what}")
            _echo(report.table())
        elif silent:
            differ = differ or not allow_silent
            _echo(
                f"{file} vs {candidate}: agree on {compared} outputs and records over {report.steps} steps, "
                f"but {len(silent)} spiking one(s) never spike on either side ({', '.join(silent)})"
                + ("" if allow_silent else ": not verified")
            )
            if not allow_silent:
                _echo(report.table())
        else:
            _echo(
                f"{file} vs {candidate}: agree on {compared} outputs and records over {report.steps} steps"
                + (f" ({spiked} of them spiking)" if spiked else "")
            )
    if json_out is not None:
        document = json.dumps(documents, indent=2, default=str) + "\n"
        if quiet:
            click.echo(document, nl=False)
        else:
            from .io import atomic_write

            atomic_write(json_out, lambda temporary: Path(temporary).write_text(document, encoding="utf-8"))
            _echo(f"wrote {json_out}")
    if differ:
        sys.exit(1)


def _importable(simulators: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``simulators`` whose package imports here; each other one is left out with a
    line on stderr saying how to install it (a default run is never aborted for one)."""
    from .adapters._optional import require

    found = []
    for name in simulators:
        try:
            require({"norse": "norse.torch"}.get(name, name), name)
        except NirBridgeError as error:
            _echo(f"nirbridge verify: {name} left out: {error}", err=True)
        else:
            found.append(name)
    if not found:
        raise ParameterError(
            f"none of {', '.join(simulators)} can be imported here: install one, or give --against "
            "nirbridge, a .nir file or FILE.py:NAME"
        )
    return tuple(found)


# ----------------------------------------------------------------------------- conformance


@main.command(name="conformance")
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
@_one_line_errors("conformance")
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
    from .conformance import PEERS, conformance, pack, write_json
    from .hdf5 import regular_file

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
    _outputs_apart(read, {"--json": json_path, "--html": html_path})
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
    )
    _echo(report)
    if json_path is not None:
        write_json(report, json_path)
        _echo(f"wrote {json_path}")
    if html_path is not None:
        from .conformance.report import write_html

        write_html(report, html_path)
        _echo(f"wrote {html_path}")


# ----------------------------------------------------------------------------- support


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def support(as_json: bool) -> None:
    """Show what converts to what, as a table.

    For each NIR type: the module nirbridge builds for it, the torch modules exported
    as it, and the norse, snntorch and spikingjelly modules (⇄ both ways, → NIR export only, ← NIR
    import only).

    \b
    Example:
      nirbridge support
      nirbridge support --json
    """
    from .support import COLUMNS, support_table

    rows = support_table()
    if as_json:
        _echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in COLUMNS}
    _echo("  ".join(c.ljust(widths[c]) for c in COLUMNS).rstrip())
    _echo("  ".join("-" * widths[c] for c in COLUMNS))
    for row in rows:
        _echo("  ".join(row[c].ljust(widths[c]) for c in COLUMNS).rstrip())


@main.command()
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

    from .selftest import header, line, verdict
    from .selftest import selftest as run_selftest

    chosen = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if chosen == "cuda" and not torch.cuda.is_available():
        _fail("selftest", "--device cuda: torch sees no CUDA device here; use --device cpu")
    if as_json:  # the document on stdout at the end; each check on stderr as it ends
        click.echo(f"nirbridge selftest on {chosen}: each check as it ends, then the JSON", err=True)
    else:
        _echo(header(chosen))
        _echo("each check as it ends (about a minute; the timings another minute or two):")

    def said(check: dict) -> None:
        _echo(line(check), err=as_json)  # click.echo flushes: a line shows as its check ends

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each check reports what it found
        report = run_selftest(chosen, quick=quick, on_check=said)
    if as_json:
        _echo(json.dumps(report, indent=2))
    else:
        _echo(verdict(report))
    if not report["ok"]:
        sys.exit(1)


# ----------------------------------------------------------------------------- draw


@main.command()
@click.argument("file", type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=str),
    help="Picture (.svg, .png, .pdf) or text (.dot, .gv, .mmd) to write.",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_default=True,
    help="auto: Graphviz when installed, else matplotlib.",
)
@click.option(
    "--rankdir",
    type=click.Choice(RANKDIRS),
    default=None,
    help="TB: top to bottom; LR: left to right. Default: TB for graphs with a chain of more than "
    "8 nodes (a deep CNN), LR otherwise.",
)
@_one_line_errors("draw")
def draw(file: str, output: str, engine: str, rankdir: str | None) -> None:
    """Draw FILE's graph, its recurrent edges marked.

    Boxes show node names, types and shapes; delayed (recurrent) edges are dashed and
    red; nested graphs are boxes around their nodes.

    \b
    Example:
      nirbridge draw braille.nir -o braille.svg
      nirbridge draw braille.nir -o braille.mmd    # Mermaid text, for Markdown
      nirbridge draw cnn.nir -o cnn.svg --rankdir LR
    """
    from . import draw as drawing

    _outputs_apart({"FILE": file}, {"-o": output, "-o (DOT text when nothing draws)": output + ".dot"})
    node = load(file).node
    used = drawing.draw(node, output, engine=engine, rankdir=rankdir)
    if used == "dot text, no engine":
        _echo(
            f"neither Graphviz nor matplotlib is installed: wrote the DOT text to {output}.dot "
            f"(render it with `dot -T{Path(output).suffix.lstrip('.')}`)"
        )
    else:
        _echo(f"wrote {output} ({used})")

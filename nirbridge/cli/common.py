"""What the commands share: one-line errors and warnings, input spikes, outputs kept apart from inputs."""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

import click
import nir
import numpy as np

from .. import graph as graph_utils
from ..errors import InputError, NirBridgeError, NirFileError, ParameterError
from ..limits import check_memory
from ..text import printable_lines


def echo(message: Any = "", err: bool = False) -> None:
    """click.echo of text whose names may come from files: every character a terminal
    would act on (escape sequences, bidi overrides) is shown escaped; newlines and tabs
    that nirbridge's own layout uses are kept."""
    click.echo(printable_lines(str(message)), err=err)


CLI_TERMS = (
    # "nir_to_torch(..., x=True) (--x on the command line)" says the option already
    (re.compile(r"[\w.]+\((?:[^()]|\([^()]*\))*\),? \(?(--[\w-]+) on the command line\)?"), r"\1"),
    (re.compile(r"(nir_to_torch|nirbridge\.run|verify)\((\.\.\., )?dt=\.\.\.\)"), "--dt"),
    (re.compile(r" \(this warning is a nirbridge\.\w+, which can be filtered\)"), ""),
    (re.compile(r"record=\['([^']*)'\]"), r"--record \1"),
    (
        re.compile(
            r"pass example_input=torch\.zeros\(1, \*shape\) \(batch axis first; a tuple for several inputs\)"
        ),
        "give --input-shape (one step's shape without the batch axis, once per input)",
    ),
)


def cli_terms(message: str) -> str:
    """A library message with the command line's options in place of keyword arguments
    (``--dt`` for ``nir_to_torch(..., dt=...)``)."""
    for pattern, option in CLI_TERMS:
        message = pattern.sub(option, message)
    return message


def fail(command: str, message: str) -> None:
    echo(f"nirbridge {command}: {cli_terms(' '.join(str(message).split()))}", err=True)
    sys.exit(1)


def one_line_errors(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
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
                    report_warnings(command, caught)
                    fail(command, str(error))
            report_warnings(command, caught)

        return wrapper

    return decorate


def report_warnings(command: str, caught: list[warnings.WarningMessage]) -> None:
    """Print each warning once (rebuilding a graph for another simulator repeats them)."""
    for text in dict.fromkeys(cli_terms(" ".join(str(w.message).split())) for w in caught):
        echo(f"nirbridge {command}: warning: {text}", err=True)
    caught.clear()


def read_graph(path: str) -> nir.NIRGraph:
    """A .nir file's graph; a file holding a single node has nothing to run."""
    from ..io import read

    node = read(path)
    if not isinstance(node, nir.NIRGraph):
        raise NirFileError(f"{path}: holds a single {type(node).__name__} node, not a graph to run")
    return node


def input_shapes(graph: nir.NIRGraph, path: str) -> dict[str, tuple[int, ...]]:
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


def random_spikes(shapes: dict[str, tuple[int, ...]], steps: int, batch: int, rate: float, seed: int) -> Any:
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


def declared_inputs(graph: nir.NIRGraph) -> dict[str, tuple[int, ...]]:
    """Each Input node's declared shape, ``()`` where it declares none (a spikes file's
    datasets then give it)."""
    return {
        n: tuple(graph_utils.declared_shape(v.input_type) or ())
        for n, v in graph.nodes.items()
        if isinstance(v, nir.Input)
    }


def spikes_file(
    path: str, shapes: dict[str, tuple[int, ...]], steps: int | None, batch_first: bool = False
) -> Any:
    """Input spikes from an HDF5 file: one dataset per Input node, named after it (a
    lone dataset serves a lone Input), time first: ``[T, B, *shape]`` or ``[T, *shape]``
    (``batch_first``: ``[B, T, *shape]``, as NIR's own data are stored), returned time
    first. The file is read through nirbridge's hardened reader, as a ``.nir`` file is."""
    layout = "[B, T, ...]" if batch_first else "[T, B, ...]"
    import torch

    from ..hdf5 import read_datasets

    def choose(found: dict[str, tuple[tuple[int, ...], np.dtype[Any]]]) -> dict[str, str]:
        if "version" in found and found["version"][1].kind in "OSU":
            raise InputError(
                f"{path}: is a .nir file (it holds a 'version' string), not input spikes; give an "
                f"HDF5 file with one dataset of {layout} spikes per Input node, named after it"
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
                raise InputError(f"{path}: dataset {stored!r} holds a single value; store {layout} spikes")
            rows = shape[0] if steps is None or batch_first else min(steps, shape[0])
            converted = 0 if kind in (np.dtype(bool), np.dtype(np.float32)) else 4  # cast to float32
            check_memory(
                (kind.itemsize + converted) * rows * math.prod(shape[1:]),
                f"{path}: dataset {stored!r} of shape {shape}",
                "store fewer samples, or store the spikes time first ([T, B, ...], without "
                "--batch-first) so that --steps reads fewer steps"
                if batch_first
                else "pass --steps to read fewer time steps, or store fewer",
            )
        return chosen

    arrays = read_datasets(
        path, "an HDF5 file of input spikes", rows=None if batch_first else steps, choose=choose
    )
    inputs = {}
    for name, array in arrays.items():
        shape = shapes[name]
        if array.dtype.kind not in "biuf":
            raise InputError(f"{path}: dataset {name!r} holds {array.dtype}, not numbers or booleans")
        stored = array.shape
        if tuple(array.shape[1:]) == shape:
            array = array[:steps, None]  # [T, *shape]: a batch of one
        elif batch_first and array.ndim >= 2:
            array = np.swapaxes(array, 0, 1)[:steps]
        if tuple(array.shape[2:]) == shape and array.shape[1] == 0:
            raise InputError(
                f"{path}: dataset {name!r} has shape {stored}: a batch of 0 samples, so nothing would "
                f"run; store {layout} spikes with B >= 1 (as --batch takes 1 or more)"
            )
        if tuple(array.shape[2:]) != shape or array.shape[0] == 0:
            raise InputError(
                f"{path}: dataset {name!r} has shape {stored}; input {name!r} takes "
                f"{layout[:-4]}{', '.join(map(str, shape))}] or [T, {', '.join(map(str, shape))}] with T >= 1"
                + ("" if batch_first else " (a batch-first file, [B, T, ...]: pass --batch-first)")
            )
        if array.dtype.kind == "f" and array.dtype.itemsize > 4:
            raise InputError(
                f"{path}: dataset {name!r} holds {array.dtype}, but the network computes in float32, "
                "which would round it; store the spikes as bool, integers or float32"
            )
        native = array.astype(array.dtype.newbyteorder("="), copy=False)  # a big-endian file's values
        inputs[name] = torch.from_numpy(np.ascontiguousarray(native))  # run casts what it holds exactly
    return inputs


def torch_device(name: str) -> Any:
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


def outputs_apart(
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


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    parts = [part.strip() for part in re.split(r"[,x]", text.strip())]
    if len(parts) > 1 and parts[-1] == "" and text.rstrip().endswith(","):
        parts.pop()  # "2," as Python writes a one-element tuple
    try:
        if not all(re.fullmatch(r"[0-9]+", part) for part in parts):
            raise ValueError(text)
        shape = tuple(int(part) for part in parts)
    except ValueError:
        raise ParameterError(f"--input-shape {text!r}: give sizes separated by commas, e.g. 2,10") from None
    if not shape or any(n < 1 for n in shape):
        raise ParameterError(f"--input-shape {text!r}: give positive sizes separated by commas, e.g. 2,10")
    return shape


BACKEND_NAMES = ("auto", "eager", "compile", "triton", "cpu")
"""``--backend``'s choices: :func:`nirbridge.run`'s back-ends."""


def backend_option(help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--backend NAME``, as run and verify take it."""
    return click.option(
        "--backend", type=click.Choice(BACKEND_NAMES), default="auto", show_default=True, help=help
    )


def input_options(help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--input FILE.h5`` and ``--batch-first`` (how its datasets are laid out), as run
    and verify take them; :func:`spikes_file` reads the file."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        fn = click.option(
            "--batch-first",
            is_flag=True,
            help="--input's datasets are [B, T, ...] (batch first, as NIR's data are stored), "
            "not [T, B, ...].",
        )(fn)
        return click.option("--input", "input_file", type=click.Path(path_type=str), default=None, help=help)(
            fn
        )

    return decorate


def check_layout(batch_first: bool, input_file: str | None) -> None:
    """``--batch-first`` describes ``--input``: alone, it is a mistake."""
    if batch_first and input_file is None:
        raise ParameterError("--batch-first says how --input's datasets are laid out: give --input FILE.h5")


def compression_option(help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--compression none|gzip|lzf`` for a written .nir file, given to the command as
    :func:`nirbridge.write` takes it (``None`` for none)."""
    return click.option(
        "--compression",
        type=click.Choice(["none", "gzip", "lzf"]),
        default="none",
        show_default=True,
        callback=lambda _context, _parameter, value: None if value == "none" else value,
        help=help,
    )

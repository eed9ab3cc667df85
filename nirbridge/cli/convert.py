"""``nirbridge convert``: .nir to and from elasticai.creator IR JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

from ..errors import NirFileError, ParameterError
from ..io import load
from .common import (
    compression_option,
    echo,
    one_line_errors,
    outputs_apart,
    parse_shape,
)


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
    from ..hdf5 import regular_file

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
    from ..io import atomic_write

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


@click.command(name="convert")
@click.argument("source", type=click.Path(path_type=str))
@click.argument("target", type=click.Path(path_type=str))
@compression_option("How a written .nir file stores its arrays.")
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
@one_line_errors("convert")
def convert(
    source: str, target: str, compression: str | None, input_shape: str | None, ir_version: str
) -> None:
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
    from ..adapters import elasticai
    from ..io import write

    outputs_apart({"SOURCE": source}, {"TARGET": target})
    kinds = (Path(source).suffix.lower(), Path(target).suffix.lower())
    if kinds == (".nir", ".json"):
        ir, state_dict = elasticai.from_nir(source, ir_version=ir_version, as_dicts=True)
        _write_ir_json(target, ir, state_dict, ir_version)
        count = len(ir) if ir_version == "0.66" else 1 + len(ir[1])
        what = f"elasticai {ir_version} IR with {count} implementation(s), {len(state_dict)} tensor(s)"
    elif kinds == (".json", ".nir"):
        ir, state_dict = _read_ir_json(source)
        graph = elasticai.to_nir(ir, state_dict, input_shape=parse_shape(input_shape))
        write(target, graph, compression=compression)
        what = f"NIR graph with {len(graph.nodes)} nodes"
    elif kinds == (".nir", ".nir"):
        graph = load(source).node
        write(target, graph, compression=compression)
        what = "NIR file" + (f", {compression}-compressed" if compression else ", uncompressed")
    else:
        raise ParameterError(
            f"cannot convert {kinds[0] or 'no suffix'} to {kinds[1] or 'no suffix'}: convert takes "
            ".nir → .json, .json → .nir and .nir → .nir"
        )
    echo(f"wrote {target}: {what}")

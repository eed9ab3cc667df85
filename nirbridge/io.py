"""Read and write ``.nir`` files (HDF5, in the layout of ``nir.write``).

Layout: a string dataset ``version`` and a group ``node`` holding the graph: each node
is a group with a ``type`` string and one dataset per field; graphs hold ``nodes`` (a
group of node groups) and ``edges`` (an (n, 2) string array); ``metadata`` groups hold
one dataset per key.

Reading is lenient where a file has one sensible reading and honest always: every
failure is a :class:`~nirbridge.NirFileError` naming the file and the node. Writing
goes to a temporary file in the target's folder and is renamed into place, so a
failed write leaves any existing file untouched.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from typing import IO, Any

import h5py
import nir
import numpy as np

from .errors import NirFileError

__all__ = ["read", "write"]

PathOrFile = str | os.PathLike[str] | IO[bytes]

_NODE_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        nir.Affine,
        nir.AvgPool2d,
        nir.Conv1d,
        nir.Conv2d,
        nir.CubaLI,
        nir.CubaLIF,
        nir.Delay,
        nir.Flatten,
        nir.I,
        nir.IF,
        nir.Input,
        nir.LI,
        nir.LIF,
        nir.Linear,
        nir.NIRGraph,
        nir.Output,
        nir.Scale,
        nir.SumPool2d,
        nir.Threshold,
    )
}


def _describe(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return getattr(source, "name", None) or type(source).__name__


def _value(item: h5py.Dataset) -> Any:
    value = item[()]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


def _read_metadata(group: h5py.Group) -> dict[str, Any]:
    return _read_metadata_group(group["metadata"]) if "metadata" in group else {}


def _read_metadata_group(group: h5py.Group) -> dict[str, Any]:
    return {
        key: (_read_metadata_group(item) if isinstance(item, h5py.Group) else _value(item))
        for key, item in group.items()
    }


def _read_node(group: h5py.Group, path: str) -> nir.NIRNode:
    if "type" not in group:
        raise NirFileError(f"node {path!r} has no 'type' entry")
    type_name = _value(group["type"])
    cls = _NODE_TYPES.get(type_name)
    if cls is None:
        raise NirFileError(
            f"node {path!r} has type {type_name!r}, which is not a NIR primitive nirbridge knows "
            f"({', '.join(sorted(_NODE_TYPES))})"
        )
    fields = {
        key: _value(item)
        for key, item in group.items()
        if key not in ("type", "metadata", "nodes") and isinstance(item, h5py.Dataset)
    }
    metadata = _read_metadata(group)
    if cls is nir.NIRGraph:
        if "nodes" not in group:
            raise NirFileError(f"graph {path or '<root>'!r} has no 'nodes' group")
        nodes = {
            name: _read_node(child, f"{path}.{name}" if path else name)
            for name, child in group["nodes"].items()
        }
        raw_edges = fields.get("edges", np.empty((0, 2)))
        edges = (
            [
                tuple(e.decode("utf-8") if isinstance(e, bytes) else str(e) for e in edge)
                for edge in np.asarray(raw_edges).reshape(-1, 2)
            ]
            if np.size(raw_edges)
            else []
        )
        return nir.NIRGraph(nodes=nodes, edges=edges, metadata=metadata, type_check=False)
    kwargs: dict[str, Any] = {}
    if cls is nir.Input:
        kwargs["input_type"] = {"input": fields.pop("shape", None)}
    elif cls is nir.Output:
        kwargs["output_type"] = {"output": fields.pop("shape", None)}
    elif cls is nir.Flatten:
        kwargs["input_type"] = {"input": fields.pop("input_type", None)}
    if cls in (nir.LIF, nir.IF, nir.CubaLIF) and "v_reset" not in fields and "v_threshold" in fields:
        fields["v_reset"] = np.zeros_like(fields["v_threshold"])
    if cls in (nir.Conv1d, nir.Conv2d):
        fields.setdefault("input_shape", None)
    for key in ("groups", "start_dim", "end_dim"):
        if key in fields:
            fields[key] = int(np.asarray(fields[key]).reshape(-1)[0])
    kwargs.update(fields)
    try:
        return cls(**kwargs, metadata=metadata)
    except (TypeError, ValueError, AssertionError, IndexError) as error:
        raise NirFileError(f"node {path!r} ({type_name}) cannot be built: {error}") from error


def read(path_or_file: PathOrFile) -> nir.NIRGraph:
    """Read a NIR graph from a ``.nir`` (HDF5) file path or binary file object.

    Files of nir 0.1 to 1.0 are accepted; type checks are left to
    :func:`nirbridge.nir_to_torch`, which repairs what has one reading and warns.
    Raises :class:`~nirbridge.NirFileError` for unreadable files, naming the node.
    """
    where = _describe(path_or_file)
    try:
        with h5py.File(path_or_file, "r") as f:
            if "node" not in f:
                raise NirFileError(f"{where}: not a NIR file (no 'node' group)")
            node = _read_node(f["node"], "")
    except NirFileError as error:
        if str(error).startswith(where):
            raise
        raise NirFileError(f"{where}: {error}") from error
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise NirFileError(f"{where}: cannot read as a NIR file: {error}") from error
    if not isinstance(node, nir.NIRGraph):
        node = nir.NIRGraph(nodes={"node": node}, edges=[], type_check=False)
    return node


def _write_group(group: h5py.Group, data: Mapping[str, Any], compression: str | None) -> None:
    for key, value in data.items():
        key = str(key)
        if key == "metadata":
            if value:
                _write_group(group.create_group(key, track_order=True), value, compression)
        elif isinstance(value, Mapping):
            _write_group(group.create_group(key, track_order=True), value, compression)
        elif isinstance(value, str):
            group.create_dataset(key, data=value, dtype=h5py.string_dtype())
        elif key == "edges":
            edges = np.array([[str(a), str(b)] for a, b in value], dtype=h5py.string_dtype())
            group.create_dataset(key, data=edges.reshape(-1, 2))
        elif isinstance(value, np.ndarray) and value.ndim > 0 and compression:
            group.create_dataset(key, data=value, compression=compression)
        elif value is None:
            continue
        else:
            group.create_dataset(key, data=value)


def write(path_or_file: PathOrFile, graph: nir.NIRNode, *, compression: str | None = None) -> None:
    """Write a NIR graph (or node) to a ``.nir`` file, in ``nir.write``'s layout.

    Datasets are stored uncompressed unless ``compression`` names an h5py filter
    (``"gzip"``, ``"lzf"``). A path is written through a temporary file in the same
    folder and renamed into place.
    """
    if not isinstance(graph, nir.NIRNode):
        raise NirFileError(f"write expects a NIR graph or node, got {type(graph).__name__}")
    data = graph.to_dict()
    version = getattr(nir, "version", None) or "1.0.8"

    def dump(target: Any) -> None:
        with h5py.File(target, "w", track_order=True) as f:
            f.create_dataset("version", data=version, dtype=h5py.string_dtype())
            _write_group(f.create_group("node", track_order=True), data, compression)

    if isinstance(path_or_file, (str, os.PathLike)):
        target = os.fspath(path_or_file)
        folder = os.path.dirname(os.path.abspath(target))
        handle, temporary = tempfile.mkstemp(prefix=".nirbridge-", suffix=".nir.tmp", dir=folder)
        os.close(handle)
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
            dump(temporary)
            os.replace(temporary, target)
        except BaseException as error:
            if os.path.exists(temporary):
                os.unlink(temporary)
            if isinstance(error, (TypeError, ValueError, OSError)):
                raise NirFileError(f"{target}: cannot write: {error}") from error
            raise
        return
    buffer = io.BytesIO()
    try:
        dump(buffer)
    except (TypeError, ValueError, OSError) as error:
        raise NirFileError(f"{_describe(path_or_file)}: cannot write: {error}") from error
    path_or_file.write(buffer.getvalue())

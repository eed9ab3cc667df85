"""Read and write ``.nir`` files: HDF5 in the layout of ``nir.write`` (nir 1.0.8).

Layout: the root holds a string dataset ``version`` and a group ``node``. A node is a
group with a ``type`` string, one dataset per field and, when it has any, a
``metadata`` group (one dataset per key, a group per nested dict). A graph node also
holds ``nodes`` (a group of node groups) and ``edges`` (an ``(n, 2)`` array of names).
Input and Output nodes store their shape as ``shape``; Flatten stores ``input_type``.

Reading is lenient where a file has one sensible reading and honest always:

* files of nir 0.1 to 1.0 load (a missing ``v_reset`` is 0, a missing ``w_in`` is 1);
* fields a node type does not define are dropped with a :class:`NirFileWarning`;
* node types that are not NIR primitives are all listed in one
  :class:`UnknownNodeTypeError`; an edge naming a missing node raises
  :class:`MissingNodeError`;
* shapes are inferred as ``nir.read`` infers them, and what does not fit (a transposed
  weight, a Flatten counting the batch axis, a wrong Output shape) is reported with a
  :class:`RepairWarning` or :class:`NirFileWarning`; the graph is returned as stored;
* a truncated, corrupted or hostile file raises :class:`NirFileError`. Only hard
  links to plain groups and datasets are followed; external links, external or
  virtual storage and filters other than HDF5's built-in ones and LZF are refused; a
  dataset may not claim more memory than its stored bytes can hold (1100x for
  compressed data, above deflate's 1032:1 limit), and nesting is capped.

Writing keeps node and metadata order (HDF5 creation order), stores datasets
uncompressed by default (small ones inside their object header), strings as
fixed-length UTF-8, without timestamps, in the HDF5 1.8 file format, so the same graph
always gives the same bytes and every HDF5 1.8+ reader, ``nir.read`` included, reads it.
A path is written through a temporary file in the same folder, flushed to disk and
renamed over the target, so a failed write leaves any existing file untouched.
"""

from __future__ import annotations

import dataclasses
import errno
import inspect
import io
import os
import secrets
import socket
import stat
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, TypeVar

import h5py
import nir
import numpy as np
from h5py import h5d, h5f, h5g, h5p, h5s, h5t

from . import graph as graph_utils
from . import validate
from .errors import (
    GraphStructureError,
    LossyConversionWarning,
    MissingNodeError,
    NirBridgeError,
    NirFileError,
    NirFileWarning,
    RepairWarning,
    UnknownNodeTypeError,
)
from .hdf5 import Reader, Source, file_kind, os_reason, out_of_memory
from .limits import MAX_METADATA_NESTING, MAX_NESTING

__all__ = ["NirFile", "load", "read", "write"]

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

# Stored name -> constructor argument, and the arguments wrapped as {"input": ...}.
_ALIASES: dict[type, dict[str, str]] = {
    nir.Input: {"shape": "input_type"},
    nir.Output: {"shape": "output_type"},
}
_TYPE_ARGS = {"input_type": "input", "output_type": "output"}
_OPTIONAL = {"input_shape", "input_type", "output_type"}  # absent means unknown (None)
_INT_FIELDS = {"groups", "start_dim", "end_dim"}

_COMPACT = 16 << 10  # datasets up to this size are stored in their object header


def _params(cls: type) -> list[tuple[str, bool]]:
    """(argument, required) for a node class's constructor, metadata excluded."""
    return [
        (name, p.default is inspect.Parameter.empty and name not in _OPTIONAL)
        for name, p in inspect.signature(cls).parameters.items()
        if name != "metadata"
    ]


_PARAMS = {name: _params(cls) for name, cls in _NODE_TYPES.items() if cls is not nir.NIRGraph}


def _describe(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else f"<{type(source).__name__}>"


def _label(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ----------------------------------------------------------------------------- reading


@dataclasses.dataclass
class NirFile:
    """What :func:`load` found in a file."""

    source: str  # the path, or the file object's name
    node: nir.NIRNode  # the stored graph (or node), as stored apart from inferred types
    version: str  # the nir version that wrote the file, "unknown" if not recorded
    size: int  # file size in bytes
    warnings: list[tuple[type[Warning], str]]  # what did not fit, in the order found


class _Builder:
    """Turns the dict tree of a ``node`` group into NIR nodes."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.unknown: dict[str, list[str]] = {}
        self.notes: list[tuple[type[Warning], str]] = []
        self.depth = 0  # graphs open: the root graph is 1, a subgraph of it 2

    def fail(self, label: str, message: str) -> NirFileError:
        return NirFileError(f"{self.where}: node {label or '<root>'!r}: {message}")

    def node(self, tree: Any, label: str) -> nir.NIRNode | None:
        if not isinstance(tree, dict):
            raise self.fail(label, "is a dataset where a node group was expected")
        type_name = tree.get("type")
        if not isinstance(type_name, str):
            raise self.fail(label, "has no 'type' string")
        cls = _NODE_TYPES.get(type_name)
        if cls is None:
            self.unknown.setdefault(type_name, []).append(label or "<root>")
            return None
        metadata = tree.get("metadata", {})
        if isinstance(metadata, dict) and _nesting(metadata) > MAX_METADATA_NESTING:
            raise NirFileError(
                f"{self.where}: node {label or '<root>'!r}: metadata nests more than {MAX_METADATA_NESTING} "
                "dicts deep, which nirbridge neither writes nor reads; flatten it"
            )
        if not isinstance(metadata, dict):
            note = f"node {label or '<root>'!r}: 'metadata' is not a group; ignored"
            self.notes.append((NirFileWarning, note))
            metadata = {}
        if cls is nir.NIRGraph:
            return self.graph(tree, label, metadata)
        stored = {k: v for k, v in tree.items() if k not in ("type", "metadata")}
        for file_key, argument in _ALIASES.get(cls, {}).items():
            if file_key in stored:
                stored[argument] = stored.pop(file_key)
        kwargs: dict[str, Any] = {}
        missing = []
        for argument, required in _PARAMS[type_name]:
            if argument in stored:
                kwargs[argument] = self.value(argument, stored.pop(argument), label)
            elif required:
                missing.append(argument)
            elif argument in _TYPE_ARGS:
                kwargs[argument] = {_TYPE_ARGS[argument]: None}
            elif argument in _OPTIONAL:
                kwargs[argument] = None
        if missing:
            raise self.fail(label, f"({type_name}) lacks the field(s) {missing} that NIR requires")
        if stored:
            self.notes.append(
                (
                    NirFileWarning,
                    f"node {label!r} ({type_name}): field(s) {sorted(stored)} are not part of nir "
                    f"{nir.version}'s {type_name} and were ignored",
                )
            )
        try:
            return cls(**kwargs, metadata=metadata)
        except Exception as error:  # noqa: BLE001 - nir's own checks (asserts, numpy errors)
            problem = f"{type(error).__name__}: {error}".strip()
            self.notes.append(
                (
                    NirFileWarning,
                    f"node {label!r} ({type_name}) does not pass nir's own check ({problem}); it is "
                    "returned as stored, and nir_to_torch says what to fix",
                )
            )
            return _unchecked(cls, kwargs, metadata)

    def value(self, argument: str, value: Any, label: str) -> Any:
        if argument in _TYPE_ARGS:
            if isinstance(value, dict):
                return value
            return {_TYPE_ARGS[argument]: value}
        if argument in _INT_FIELDS and np.size(value) == 1 and np.asarray(value).dtype.kind in "biu":
            return int(np.asarray(value).reshape(-1)[0])
        if isinstance(value, dict):
            raise self.fail(label, f"field {argument!r} is a group where a dataset was expected")
        return value

    def graph(self, tree: dict[str, Any], label: str, metadata: dict[str, Any]) -> nir.NIRGraph:
        nodes_tree = tree.get("nodes")
        if not isinstance(nodes_tree, dict):
            raise self.fail(label, "(NIRGraph) has no 'nodes' group")
        self.depth += 1
        if self.depth > MAX_NESTING + 1:
            raise self.fail(
                label, f"graphs nest more than {MAX_NESTING} deep, which nirbridge neither writes nor runs"
            )
        nodes = {name: self.node(sub, _label(label, name)) for name, sub in nodes_tree.items()}
        self.depth -= 1
        edges = self.edges(tree.get("edges"), label)
        return nir.NIRGraph(nodes=nodes, edges=edges, metadata=metadata, type_check=False)

    def edges(self, value: Any, label: str) -> list[tuple[str, str]]:
        if value is None:
            return []
        array = np.asarray(value)
        if array.size == 0:
            return []
        if array.dtype.kind not in "OU" or array.ndim != 2 or array.shape[1] != 2:
            got = f"{array.dtype} {array.shape}"
            raise self.fail(label, f"'edges' must be an (n, 2) array of node names, got {got}")
        return [(str(a), str(b)) for a, b in array.tolist()]


def _nesting(values: dict[str, Any]) -> int:
    """How many dicts deep ``values`` nests (1 for a flat dict), without recursion."""
    deepest, stack = 0, [(values, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((v, depth + 1) for v in current.values() if isinstance(v, dict))
    return deepest


def _unchecked(cls: type, kwargs: dict[str, Any], metadata: dict[str, Any]) -> nir.NIRNode:
    """A NIR node holding ``kwargs`` as stored, without nir's constructor checks (which a
    file written by another tool, or by nirbridge from a graph built without them, may
    fail): what ``write`` writes, ``read`` reads back."""
    node = object.__new__(cls)
    for field in dataclasses.fields(cls):
        if field.name in kwargs:
            value = kwargs[field.name]
        elif field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            value = None
        object.__setattr__(node, field.name, value)
    if not isinstance(getattr(node, "input_type", None), dict):
        object.__setattr__(node, "input_type", {"input": None})
    if not isinstance(getattr(node, "output_type", None), dict):
        object.__setattr__(node, "output_type", {"output": None})
    object.__setattr__(node, "metadata", metadata)
    return node


def load(source: PathOrFile, *, check: bool = True) -> NirFile:
    """Read a ``.nir`` file without emitting warnings; see :func:`read`.

    With ``check=False`` the shape check is skipped (no types are inferred), for callers
    such as :func:`nirbridge.nir_to_torch` that check the graph themselves.
    """
    where = _describe(source)
    opened = Source(source, where)
    size = opened.size
    try:
        reader = Reader(where, opened)
        root = reader.group(h5g.open(opened.fid, b"/"), "", 0, only={"version", "node"})
        version = root.get("version")
        version = version if isinstance(version, str) else "unknown"
        if not isinstance(root.get("node"), dict):
            raise NirFileError(f"{where}: not a NIR file (no 'node' group)")
        tree = root["node"]
    except NirBridgeError:
        raise
    except MemoryError as error:
        raise out_of_memory(where) from error
    except Exception as error:
        problem = f"{type(error).__name__}: {error}"
        raise NirFileError(
            f"{where}: cannot read as a NIR file; it is corrupted or not one ({problem})"
        ) from error
    finally:
        opened.close()
    builder = _Builder(where)
    node = builder.node(tree, "")
    if builder.unknown:
        raise UnknownNodeTypeError(where, builder.unknown, _NODE_TYPES)
    notes = list(builder.notes)
    if isinstance(node, nir.NIRGraph):
        try:
            graph_utils.check_edges(node)
        except MissingNodeError as error:
            raise MissingNodeError(error.edge, error.missing, error.graph_path, file=where) from None
        except NirBridgeError as error:
            raise NirFileError(f"{where}: {error}") from None
        duplicates = graph_utils.duplicate_edges(node)
        if duplicates:
            notes.append((RepairWarning, graph_utils.describe_duplicates(duplicates)))
        if check:
            notes += _infer_types(node)
    return NirFile(where, node, version, size, notes)


def read(path_or_file: PathOrFile) -> nir.NIRNode:
    """Read a NIR graph from a ``.nir`` file path or binary file object.

    Returns the ``nir.NIRGraph`` stored (a file written from a single node returns that
    node, as ``nir.read`` does), with node order as stored: creation order for files
    nirbridge wrote, alphabetical for files ``nir.write`` wrote. Input and output types
    that a file leaves open are inferred, as ``nir.read`` infers them. Files of nir 0.1
    to 1.0 are accepted.

    Warns with :class:`RepairWarning` or :class:`NirFileWarning` about what does not fit
    NIR (the graph is returned as stored; :func:`nirbridge.nir_to_torch` repairs what
    has one reading). Raises :class:`NirFileError` for unreadable files,
    :class:`UnknownNodeTypeError` listing node types that are not NIR primitives, and
    :class:`MissingNodeError` for an edge naming a node that does not exist.
    """
    loaded = load(path_or_file)
    for category, message in loaded.warnings:
        warnings.warn(f"{loaded.source}: {message}", category, stacklevel=2)
    return loaded.node


def _infer_types(graph: nir.NIRGraph) -> list[tuple[type[Warning], str]]:
    """Fill the input and output types a graph leaves open; return what did not fit."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            shapes = graph_utils.infer_shapes(graph, graph_utils.plan(graph, strict=False), strict=False)
        except NirBridgeError as error:
            shapes = None
            problem = str(error)
        except Exception as error:  # noqa: BLE001 - the file was read; its check fails softly
            shapes = None
            problem = f"{type(error).__name__}: {error}"
    notes: list[tuple[type[Warning], str]] = [
        (w.category, f"{w.message} (nir_to_torch applies this repair; read returns the graph as stored)")
        for w in caught
        if issubclass(w.category, RepairWarning)
    ]
    if shapes is None:
        notes.append(
            (
                NirFileWarning,
                f"the graph does not type-check ({problem}); it is returned as stored, and "
                "nir_to_torch will refuse it until this is fixed",
            )
        )
    else:
        _fill_types(graph, shapes)
    return notes


def _open_type(types: Any) -> bool:
    return not isinstance(types, dict) or not types or any(v is None for v in types.values())


def _fill_types(graph: nir.NIRGraph, shapes: graph_utils.Shapes) -> None:
    for name, node in graph.nodes.items():
        if isinstance(node, nir.NIRGraph):
            if name in shapes.nested:
                _fill_types(node, shapes.nested[name])
            continue
        if isinstance(node, nir.Input):
            continue
        shape_in, shape_out = shapes.inputs.get(name), shapes.outputs.get(name)
        if shape_in is not None and _open_type(node.input_type):
            node.input_type = {"input": np.array(shape_in, dtype=np.int64)}
        if shape_out is not None and _open_type(node.output_type):
            node.output_type = {"output": np.array(shape_out, dtype=np.int64)}
        if isinstance(node, (nir.Conv1d, nir.Conv2d)) and node.input_shape is None and shape_in is not None:
            node.input_shape = int(shape_in[1]) if isinstance(node, nir.Conv1d) else tuple(shape_in[1:])
    graph.__post_init__()


# ----------------------------------------------------------------------------- writing


class _Writer:
    """Writes NIR nodes into an open HDF5 file with h5py's low-level API."""

    def __init__(self, compression: str | int | None) -> None:
        self.compression = compression
        self.ordered = h5p.create(h5p.GROUP_CREATE)
        self.ordered.set_link_creation_order(h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED)
        self.plain = h5p.create(h5p.GROUP_CREATE)
        for gcpl in (self.ordered, self.plain):
            gcpl.set_obj_track_times(False)
        self.compact = h5p.create(h5p.DATASET_CREATE)
        self.compact.set_layout(h5d.COMPACT)
        self.contiguous = h5p.create(h5p.DATASET_CREATE)
        for dcpl in (self.compact, self.contiguous):
            dcpl.set_obj_track_times(False)
        self.types: dict[tuple[np.dtype, Any], h5t.TypeID] = {}
        self.lossy: list[str] = []

    def group(self, parent: Any, name: str, ordered: bool) -> h5g.GroupID:
        return h5g.create(parent, name.encode("utf-8"), gcpl=self.ordered if ordered else self.plain)

    def dataset(self, parent: Any, name: str, array: np.ndarray) -> None:
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        key = (array.dtype, array.dtype.metadata and dict(array.dtype.metadata).get("h5py_encoding"))
        tid = self.types.get(key)
        if tid is None:
            tid = self.types[key] = h5t.py_create(array.dtype, logical=True)
        space = h5s.create_simple(array.shape) if array.ndim else h5s.create(h5s.SCALAR)
        if self.compression is not None and array.ndim and array.nbytes >= 1024:
            dcpl = self._compressed(array)
        else:
            dcpl = self.compact if array.nbytes <= _COMPACT else self.contiguous
        dsid = h5d.create(parent, name.encode("utf-8"), tid, space, dcpl=dcpl)
        if array.size:
            dsid.write(h5s.ALL, h5s.ALL, array)

    def _compressed(self, array: np.ndarray) -> h5p.PropDCID:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_obj_track_times(False)
        row = max(1, array[0].nbytes if array.ndim > 1 else array.itemsize)
        chunk = (max(1, min(array.shape[0], (1 << 20) // row)), *array.shape[1:])
        dcpl.set_chunk(chunk)
        if array.itemsize > 1:
            dcpl.set_shuffle()
        if self.compression == "lzf":
            dcpl.set_filter(32000, h5py.h5z.FLAG_OPTIONAL)
        else:
            dcpl.set_deflate(4 if self.compression == "gzip" else int(self.compression))
        return dcpl

    def node(self, parent: Any, name: str, node: nir.NIRNode, label: str) -> None:
        group = self.group(parent, name, ordered=False)
        self.dataset(group, "type", _text(_type_name(node, label)))
        if isinstance(node, nir.NIRGraph):
            nodes = self.group(group, "nodes", ordered=True)
            for child_name, child in node.nodes.items():
                _check_name(child_name, f"node {_label(label, child_name)!r}")
                self.node(nodes, child_name, child, _label(label, child_name))
            self.dataset(group, "edges", _edges(node.edges, label))
        else:
            for field, value in _fields(node):
                if value is not None:
                    what = f"field {field!r} of node {label or '<root>'!r}"
                    self.dataset(group, field, _array(value, what))
        if node.metadata:
            self.metadata(group, node.metadata, f"node {label or '<root>'!r}")

    def metadata(self, parent: Any, values: Mapping[Any, Any], owner: str) -> None:
        group = self.group(parent, "metadata", ordered=True)
        self._mapping(group, values, owner, 1)

    def _mapping(self, group: Any, values: Mapping[Any, Any], owner: str, depth: int) -> None:
        if depth > MAX_METADATA_NESTING:
            raise NirFileError(
                f"{owner}: dicts nest more than {MAX_METADATA_NESTING} deep (or a dict holds itself); "
                "nirbridge neither writes nor reads such metadata. Flatten it"
            )
        for key, value in values.items():
            if not isinstance(key, str):
                kind = type(key).__name__
                self.lossy.append(
                    f"metadata key {key!r} ({kind}) of {owner} is stored as the string {str(key)!r}"
                )
            name = str(key)
            what = f"metadata {name!r} of {owner}"
            _check_name(name, what)
            if isinstance(value, Mapping):
                self._mapping(self.group(group, name, ordered=True), value, what, depth + 1)
            elif value is None:
                raise NirFileError(f"{what} is None, which HDF5 cannot store; drop the key or store a value")
            else:
                self.dataset(group, name, _array(value, what, self.lossy))


def _type_name(node: nir.NIRNode, label: str) -> str:
    """The NIR type a node is stored as: its class, or the NIR primitive it subclasses
    (``class MyLIF(nir.LIF)`` is stored as ``LIF``, which every reader knows)."""
    for cls in type(node).__mro__:
        if _NODE_TYPES.get(cls.__name__) is cls:
            return cls.__name__
    raise NirFileError(
        f"node {label or '<root>'!r} is a {type(node).__name__}, which is no NIR primitive and subclasses "
        "none; readers cannot know it. Convert it to a NIR primitive first"
    )


def _text(value: str) -> np.ndarray:
    encoded = value.encode("utf-8")
    if b"\0" in encoded:
        raise NirFileError(f"string {value!r} holds a NUL character, which HDF5 strings cannot store")
    return np.array(encoded, dtype=h5py.string_dtype("utf-8", max(1, len(encoded))))


def _array(value: Any, what: str, lossy: list[str] | None = None) -> np.ndarray:
    if isinstance(value, (str, bytes)):
        if isinstance(value, bytes) and lossy is not None:
            lossy.append(f"{what} is bytes; it is stored as UTF-8 text and reads back as str")
        return _text(value if isinstance(value, str) else _from_bytes(value))
    try:
        array = np.asarray(value)
    except Exception as error:
        raise NirFileError(f"{what} cannot be stored: {type(error).__name__}: {error}") from error
    if array.dtype.kind in "US" or (
        array.dtype.kind == "O" and array.size and all(isinstance(v, (str, bytes)) for v in array.flat)
    ):
        if (
            lossy is not None
            and isinstance(value, (list, tuple))
            and not all(isinstance(v, str) for v in value)
        ):
            lossy.append(f"{what} mixes strings with other values; all are stored as strings")
        encoded = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in array.flat]
        if any(b"\0" in e for e in encoded):
            raise NirFileError(f"{what} holds a NUL character, which HDF5 strings cannot store")
        width = max([1, *map(len, encoded)])
        return np.array(encoded, dtype=h5py.string_dtype("utf-8", width)).reshape(array.shape)
    if array.dtype.kind not in "biufc":
        raise NirFileError(
            f"{what} has a value of type {type(value).__name__} ({array.dtype}), which HDF5 cannot "
            "store; use strings, numbers, arrays of them, or dicts of these"
        )
    return array


def _from_bytes(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise NirFileError(f"bytes {value[:20]!r} are not UTF-8 text, which NIR strings hold") from None


def _edges(edges: Any, label: str) -> np.ndarray:
    pairs = []
    for edge in edges:
        if len(edge) != 2:
            raise NirFileError(f"edge {edge!r} of graph {label or '<root>'!r} is not a (source, target) pair")
        pairs.append([str(edge[0]), str(edge[1])])
    if not pairs:
        return np.empty((0, 2), dtype=h5py.string_dtype("utf-8", 1))
    return _array(np.array(pairs, dtype=object).reshape(-1, 2), f"edges of graph {label or '<root>'!r}")


def _check_name(name: str, what: str) -> None:
    if not name or "/" in name or name == "." or "\0" in name:
        raise NirFileError(
            f"{what}: HDF5 names must be non-empty, not '.', and free of '/' and NUL; rename it"
        )


def _fields(node: nir.NIRNode) -> Iterator[tuple[str, Any]]:
    """The (name, value) pairs ``node.to_dict()`` stores, without copying arrays."""
    if isinstance(node, nir.Input):
        yield "shape", node.input_type["input"]
        return
    if isinstance(node, nir.Output):
        yield "shape", node.output_type["output"]
        return
    if type(node).to_dict is not nir.NIRNode.to_dict and not isinstance(node, nir.Flatten):
        for key, value in node.to_dict().items():
            if key not in ("type", "metadata"):
                yield key, value
        return
    for field in dataclasses.fields(node):
        if field.name in ("input_type", "output_type", "metadata"):
            continue
        yield field.name, getattr(node, field.name)
    if isinstance(node, nir.Flatten):
        yield "input_type", node.input_type["input"]


def _version() -> str:
    return str(getattr(nir, "version", None) or "1.0.8")


def _dump(fid: h5f.FileID, graph: nir.NIRNode, compression: str | int | None) -> list[str]:
    """Write ``graph`` into an open file; return the lossy conversions made."""
    writer = _Writer(compression)
    writer.dataset(fid, "version", _text(_version()))
    writer.node(fid, "node", graph, "")
    return writer.lossy


def _fcpl() -> h5p.PropFCID:
    fcpl = h5p.create(h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)  # no timestamps on the root group either
    return fcpl


def _fapl() -> h5p.PropFAID:
    fapl = h5p.create(h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5f.LIBVER_V18, h5f.LIBVER_V18)
    fapl.set_fclose_degree(h5f.CLOSE_STRONG)
    return fapl


def _check_compression(compression: Any) -> None:
    if compression is None or compression in ("gzip", "lzf"):
        return
    if isinstance(compression, int) and not isinstance(compression, bool) and 0 <= compression <= 9:
        return
    raise NirFileError(f"compression={compression!r}: use None, 'gzip', 'lzf' or a gzip level 0-9")


def write(path_or_file: PathOrFile, graph: nir.NIRNode, *, compression: str | int | None = None) -> None:
    """Write a NIR graph (or a single node) to a ``.nir`` file, in ``nir.write``'s layout.

    Datasets are stored uncompressed unless ``compression`` is ``"gzip"``, ``"lzf"`` or a
    gzip level 0-9 (applied with the shuffle filter to datasets of 1 KiB or more). A
    path is written to a temporary file in the same folder, flushed to disk and renamed
    over the target; on any failure the target is untouched and the temporary file is
    removed. A binary file object receives the whole file in one write (from position
    0 and truncated, when it can seek).

    Raises :class:`NirFileError` naming the node, field or metadata key that cannot be
    stored, or the file that cannot be written. Metadata lists and tuples are stored as
    arrays and read back as numpy arrays; non-string keys are stored as strings (with a
    :class:`LossyConversionWarning`). A graph holding values that
    :func:`nirbridge.nir_to_torch` refuses (NaN, infinity, time constants of 0 or below,
    as a diverged training run leaves them) is written as given, with a
    :class:`ParameterWarning` naming them.
    """
    if not isinstance(graph, nir.NIRNode):
        raise NirFileError(f"write expects a NIR graph or node, got {type(graph).__name__}")
    _check_compression(compression)
    try:
        graph_utils.check_nesting(graph, "write")
        if isinstance(graph, nir.NIRGraph):
            graph_utils.check_edges(graph)  # what read would refuse: no half-readable files
    except GraphStructureError as error:
        raise NirFileError(f"write: {error}") from None
    lossy = _write_to(path_or_file, lambda fid: _dump(fid, graph, compression), "write")
    for message in lossy:
        warnings.warn(message, LossyConversionWarning, stacklevel=2)
    validate.warn_refused(graph, f"write: {_describe(path_or_file)}", done="written as given")


_Dump = Callable[[h5f.FileID], list[str]]  # fills an open, empty HDF5 file; returns lossy conversions


def _write_to(path_or_file: PathOrFile, dump: _Dump, caller: str) -> list[str]:
    """Create an HDF5 file with ``dump`` at a path (through a temporary file renamed over
    the target) or in a binary file object (as one image); return what ``dump`` returns.
    ``caller`` names the public function in errors about the argument."""
    if isinstance(path_or_file, (str, os.PathLike)):
        return _write_path(os.fspath(path_or_file), dump)
    return _write_file(path_or_file, dump, caller)


def _write_file(path_or_file: Any, dump: _Dump, caller: str) -> list[str]:
    if not callable(getattr(path_or_file, "write", None)):
        raise NirFileError(
            f"{caller} expects a path or a binary file object, got {type(path_or_file).__name__}"
        )
    where = _describe(path_or_file)
    if isinstance(path_or_file, io.TextIOBase):
        raise NirFileError(f"{where}: is opened in text mode; open it in binary mode ('wb')")
    if _appends(path_or_file):
        raise NirFileError(
            f"{where}: is opened for appending, so the file would keep its old bytes before the new "
            "ones and no HDF5 reader could read it; open it with 'wb'"
        )
    fapl = _fapl()
    fapl.set_fapl_core(backing_store=False)
    try:
        fid = h5f.create(b"nirbridge-image", h5f.ACC_TRUNC, fcpl=_fcpl(), fapl=fapl)
        try:
            lossy = dump(fid)
            h5f.flush(fid)
            image = fid.get_file_image()
        finally:
            fid.close()
    except NirFileError as error:
        raise NirFileError(f"{where}: {error}") from error
    except Exception as error:
        raise NirFileError(f"{where}: cannot write: {_write_failure(error)}") from error
    try:
        if path_or_file.seekable() and path_or_file.tell():
            path_or_file.seek(0)
        path_or_file.write(image)
    except TypeError as error:
        raise NirFileError(f"{where}: is opened in text mode; open it in binary mode ('wb')") from error
    except (OSError, ValueError, AttributeError) as error:
        raise NirFileError(f"{where}: cannot write: {error}") from error
    try:  # drop what an older, longer file left behind; HDF5 ignores it where this fails
        path_or_file.truncate()
    except (OSError, ValueError, AttributeError):
        pass
    return lossy


def _appends(file: Any) -> bool:
    """Whether every write to ``file`` goes to its end (mode ``'ab'``, or ``O_APPEND``)."""
    if "a" in str(getattr(file, "mode", "")):
        return True
    try:
        import fcntl

        return bool(fcntl.fcntl(file.fileno(), fcntl.F_GETFL) & os.O_APPEND)
    except (ImportError, OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def _write_path(target: str, dump: _Dump) -> list[str]:
    def fill(temporary: str) -> list[str]:
        fid = h5f.create(os.fsencode(temporary), h5f.ACC_TRUNC, fcpl=_fcpl(), fapl=_fapl())
        try:
            return dump(fid)
        finally:
            fid.close()

    return atomic_write(target, fill)


_T = TypeVar("_T")


def atomic_write(target: str | os.PathLike[str], fill: Callable[[str], _T]) -> _T:
    """Write a file through a temporary one: ``fill(temporary_path)`` writes it in the
    target's folder, it is flushed to disk and renamed over ``target`` (keeping an old
    file's permissions); on any failure the target is untouched, the temporary file is
    removed and a :class:`NirFileError` names the target. Returns what ``fill`` returns.
    """
    target = os.fspath(target)
    if isinstance(target, bytes):
        target = os.fsdecode(target)
    if "\0" in target:
        raise NirFileError(f"{target!r}: a path holding a NUL character names no file; check how it was made")
    target = _through_links(target)
    if os.path.isdir(target):
        raise NirFileError(f"{target}: is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(target))
    try:
        status = os.stat(target)
    except FileNotFoundError:
        mode: int | None = None  # a new file gets 0o666 less the umask, as open() gives
    except OSError as error:
        raise NirFileError(f"{target}: {os_reason(error)}") from None
    else:
        if not stat.S_ISREG(status.st_mode):
            raise NirFileError(
                f"{target}: is a {file_kind(status.st_mode)}; nirbridge writes whole files and would "
                "replace it, so it refuses. Give the path of a regular file"
            )
        mode = status.st_mode & 0o7777
    _remove_stale(folder)
    suffix = os.path.splitext(target)[1] or ".out"
    temporary = os.path.join(folder, f"{_TEMPORARY}{_HOST}-{os.getpid()}-{secrets.token_hex(6)}{suffix}.tmp")
    try:
        os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except OSError as error:
        reason = error.strerror or error
        raise NirFileError(f"{target}: cannot write in folder {folder!r}: {reason}") from error
    try:
        result = fill(temporary)
        _fsync(temporary)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        if isinstance(error, NirFileError):
            raise NirFileError(f"{target}: {error}") from error
        if not isinstance(error, Exception):
            raise
        raise NirFileError(f"{target}: cannot write: {_write_failure(error)}") from error
    try:  # make the rename itself durable (POSIX; folders cannot be opened on Windows)
        _fsync(folder)
    except OSError:
        pass
    return result


def _through_links(target: str) -> str:
    """The file a write to ``target`` replaces: a symbolic link is written through, as
    ``open(target, "w")`` would, and stays a link. A link in a shared folder (sticky and
    world-writable, like /tmp) that neither this user nor the folder's owner made is
    refused, as Linux's ``fs.protected_symlinks`` refuses to follow it: its owner could
    aim it at any file of this user's. Folders on the way are left to the kernel."""
    for _ in range(40):  # the kernel's own limit on links in a row
        try:
            link = os.lstat(target)
        except OSError:
            return target
        if not stat.S_ISLNK(link.st_mode):
            return target
        folder = os.path.dirname(os.path.abspath(target))
        if not _followable(link, os.stat(folder)):
            raise NirFileError(
                f"{target}: is a symbolic link made by another user (uid {link.st_uid}) in the shared "
                f"folder {folder} (sticky and world-writable, like /tmp); writing through it would "
                "replace a file of your choosing for them. Remove the link or write elsewhere"
            )
        target = os.path.join(os.path.dirname(target), os.readlink(target))
    raise NirFileError(f"{target}: {os_reason(OSError(errno.ELOOP, 'too many links'))}")


def _followable(link: os.stat_result, folder: os.stat_result, uid: int | None = None) -> bool:
    """Linux's ``fs.protected_symlinks`` rule: a link in a sticky, world-writable folder
    is followed only when its owner is the user or the folder's owner."""
    uid = (os.geteuid() if hasattr(os, "geteuid") else None) if uid is None else uid
    shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
    return not shared or uid is None or link.st_uid in (uid, folder.st_uid)


_TEMPORARY = ".nirbridge-"  # temporary files: .nirbridge-HOST-PID-RANDOM.SUFFIX.tmp
_HOST = f"{zlib.crc32(socket.gethostname().encode()) & 0xFFFF:04x}"
_STALE = 60.0  # seconds after which a temporary file whose writer is gone is removed


def _write_failure(error: Exception) -> str:
    """Why a write failed, in one line: the OS's words for an errno (a full disk, a file
    size limit), without the multi-line, time-stamped detail HDF5 wraps them in."""
    number = getattr(error, "errno", None)
    if isinstance(number, int) and number > 0 and isinstance(error, OSError):
        hint = " (free some space, or write elsewhere)" if number in (errno.ENOSPC, errno.EFBIG) else ""
        return f"{os.strerror(number)}{hint}"
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first.split(' (file write failed')[0]}"


def _remove_stale(folder: str) -> None:
    """Remove temporary files a killed writer left in ``folder``: files of nirbridge's
    pattern, made on this host by a process that no longer runs, last changed more than
    a minute ago. Anything else is left alone, and failures are ignored."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(_TEMPORARY + _HOST + "-")]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        parts = entry.name[len(_TEMPORARY) :].split("-")
        try:
            pid = int(parts[1])
            if not entry.name.endswith(".tmp") or now - entry.stat(follow_symlinks=False).st_mtime < _STALE:
                continue
            if not entry.is_file(follow_symlinks=False) or pid == os.getpid() or _alive(pid):
                continue
            os.unlink(entry.path)
        except (ValueError, IndexError, OSError):
            continue


def _alive(pid: int) -> bool:
    if os.name != "posix":  # Windows' os.kill terminates the process: never ask there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # another user's process, or a platform that cannot tell: keep it
    return True


def _fsync(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)

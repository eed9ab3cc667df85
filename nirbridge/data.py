"""Read and write NIR data files (``nir.NIRGraphData``): HDF5 in the layout of
``nir.write_data`` (nir 1.0.8).

Layout (attributes after the group they belong to; the order of groups is kept)::

    /                          __type__ = "NIRGraphData"
      nodes/                   one group per node
        <node>/                __type__ = "NIRNodeData"
          observables/         one group per observable
            <name>/            __type__ = "TimeGriddedData", dt (float)
              data             (n_samples, n_time_steps, n_neurons), numbers or bool
            <name>/            __type__ = "EventData", n_neurons (int), t_max (float)
              idx              (n_samples, n_events) neuron indices, -1 where no event
              time             same shape: event times, inf where no event
            <name>/            __type__ = "ValuedEventData": as EventData, plus
              value            same shape: event values
        <subgraph>/            __type__ = "NIRGraphData", holding nodes/ as the root does

``__type__`` is a variable-length UTF-8 string (what h5py writes for a Python ``str``,
and what ``nir.read_data`` compares), ``dt`` and ``t_max`` are float64 and ``n_neurons``
int64 scalars.

Writing gives the guarantees of :func:`nirbridge.write`: node and observable order is
kept (HDF5 creation order; files ``nir.write_data`` wrote read back in name order, as
``nir.read_data`` reads them), datasets are uncompressed by default, nothing records a
timestamp, so the same data gives the same bytes, and a path is written through a
temporary file in the same folder that is renamed over the target only once complete.

Reading is as safe as :func:`nirbridge.read`: only hard links to groups and datasets
are followed; external or virtual storage and filter plugins are refused; no dataset
may claim more memory than its stored bytes can hold; nesting is capped; the
variable-length strings of attributes are checked against their global heap before
HDF5 reads them. Any file that is not NIR data, or is truncated, corrupted or hostile,
raises :class:`NirFileError` naming the file and the group at fault.

Both directions hold the data to what nir's classes mean, with the same rules, so what
one refuses the other refuses too: ``dt`` is a finite number of seconds > 0; ``data`` is
bools or real numbers of any value (a recording may hold inf or nan); ``idx`` is
integers, ``time`` real numbers and ``value`` bools or real numbers, all of one 2-D
shape (n_samples, n_events); ``n_neurons`` is a whole number from 0 to 2**63 - 1 and
``t_max`` a finite number of seconds >= 0. Each entry of an event array is an event
(0 <= idx < n_neurons, 0 <= time <= t_max, compared in the precision of ``time``) or
padding (idx -1; time anything but nan, nir writes inf). Complex numbers, bools where
numbers are meant, and ``NIRGraphData`` that holds itself or nests more than
:data:`nirbridge.limits.MAX_NESTING` deep are refused; so are node and observable names
HDF5 cannot hold (empty, ``"."``, with ``"/"``, NUL or a lone surrogate).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import h5py
import nir
import numpy as np
from h5py import h5a, h5f, h5g, h5o, h5s, h5t

from .errors import LossyConversionWarning, NirBridgeError, NirFileError, NirFileWarning
from .hdf5 import Reader, Source, out_of_memory
from .io import (
    PathOrFile,
    _check_compression,
    _check_name,
    _describe,
    _label,
    _write_to,
    _Writer,
)
from .limits import MAX_NESTING

__all__ = ["read_data", "write_data"]

_GRAPH, _NODE = "NIRGraphData", "NIRNodeData"
_GRIDDED, _EVENTS, _VALUED = "TimeGriddedData", "EventData", "ValuedEventData"
_ATTRIBUTES = ("__type__", "dt", "n_neurons", "t_max")  # the only attributes read
_ATTRIBUTE_BYTES = 1024  # most bytes one attribute may claim (they hold one short value)

# HDF5 object header message types, and the most continuation chunks followed
_ATTRIBUTE_MESSAGE, _CONTINUATION, _ATTRIBUTE_INFO = 0x0C, 0x10, 0x15
_MAX_CHUNKS = 64
_VLEN_CLASS = 9
_SHARED = 0x02  # message flag: the message lives in the shared message heap


# ----------------------------------------------------------------------------- writing


def write_data(
    path_or_file: PathOrFile, data: nir.NIRGraphData, *, compression: str | int | None = None
) -> None:
    """Write recorded data (``nir.NIRGraphData``) to an HDF5 file in ``nir.write_data``'s
    layout (see the module docstring), readable by :func:`read_data` and ``nir.read_data``.

    Datasets are stored uncompressed unless ``compression`` is ``"gzip"``, ``"lzf"`` or a
    gzip level 0-9 (applied with the shuffle filter to datasets of 1 KiB or more). A path
    is written to a temporary file in the same folder, flushed to disk and renamed over
    the target; on any failure the target is untouched and the temporary file removed. A
    binary file object receives the whole file in one write.

    Raises :class:`NirFileError` naming the node or observable that cannot be stored,
    with the field and what to do, before it is stored: not NIRNodeData/NIRGraphData, an
    observable type that is not one of nir's, and anything the rules of the module
    docstring refuse (a ``dt`` that is not > 0, indices beyond ``n_neurons``, nan or
    out-of-range times, complex or bool arrays where numbers are meant, cycles); or the
    file that cannot be written. An observable, node or subgraph of a subclass of nir's
    types is stored as nir's type, with a :class:`LossyConversionWarning`.
    """
    if not isinstance(data, nir.NIRGraphData):
        hint = (
            "; wrap it as nir.NIRGraphData(nodes={'<node name>': data})"
            if isinstance(data, nir.NIRNodeData)
            else ""
        )
        raise NirFileError(f"write_data expects a nir.NIRGraphData, got {type(data).__name__}{hint}")
    _check_compression(compression)
    lossy = _write_to(path_or_file, lambda fid: _dump(fid, data, compression), "write_data")
    for message in lossy:
        warnings.warn(message, LossyConversionWarning, stacklevel=2)


def _dump(fid: h5f.FileID, data: nir.NIRGraphData, compression: str | int | None) -> list[str]:
    writer = _Writer(compression)
    lossy: list[str] = []
    _write_graph(writer, h5g.open(fid, b"/"), data, "", lossy, [])
    return writer.lossy + lossy


def _write_graph(
    writer: _Writer, group: Any, data: nir.NIRGraphData, label: str, lossy: list[str], above: list[int]
) -> None:
    """Write one graph's nodes; ``above`` holds the ids of the graphs it is nested in."""
    owner = f"graph data {label!r}" if label else "the root NIRGraphData"
    if id(data) in above:
        raise NirFileError(
            f"{owner} holds itself (a cycle of NIRGraphData); data nests as a tree, as graphs do. "
            "Put a copy there, or remove the cycle"
        )
    if len(above) > MAX_NESTING:
        raise NirFileError(
            f"{owner}: graph data nests more than {MAX_NESTING} deep, which nirbridge neither "
            "writes nor reads (nor builds graphs for); flatten it"
        )
    if not isinstance(data.nodes, Mapping):
        raise NirFileError(f"{owner}: nodes is a {type(data.nodes).__name__}; make it a dict name -> data")
    _set_text(group, "__type__", _GRAPH)
    nodes = writer.group(group, "nodes", ordered=True)
    for name, node in data.nodes.items():
        where = _key(name, label, "node")
        if isinstance(node, (nir.NIRGraphData, nir.NIRNodeData)) and type(node) not in _CONTAINERS:
            kind = _GRAPH if isinstance(node, nir.NIRGraphData) else _NODE
            lossy.append(
                f"node {where!r} is a {type(node).__name__}; it is stored as {kind} and reads back as one"
            )
        if isinstance(node, nir.NIRGraphData):
            child = writer.group(nodes, name, ordered=False)
            _write_graph(writer, child, node, where, lossy, [*above, id(data)])
        elif isinstance(node, nir.NIRNodeData):
            _write_node(writer, writer.group(nodes, name, ordered=False), node, where, lossy)
        else:
            raise NirFileError(
                f"node {where!r} is a {type(node).__name__}; NIRGraphData.nodes holds "
                "nir.NIRNodeData (a node's observables) or nir.NIRGraphData (a subgraph's). "
                "Wrap it, e.g. nir.NIRNodeData(observables={'spikes': nir.TimeGriddedData(...)})"
            )


def _write_node(writer: _Writer, group: Any, data: nir.NIRNodeData, label: str, lossy: list[str]) -> None:
    if not isinstance(data.observables, Mapping):
        kind = type(data.observables).__name__
        raise NirFileError(f"node {label!r}: observables is a {kind}; make it a dict name -> observable")
    _set_text(group, "__type__", _NODE)
    observables = writer.group(group, "observables", ordered=True)
    for name, observable in data.observables.items():
        _key(name, label, "observable")
        _write_observable(
            writer, observables, name, observable, f"observable {name!r} of node {label!r}", lossy
        )


def _key(name: Any, label: str, kind: str) -> str:
    """Check a node or observable name; return its dotted label."""
    if not isinstance(name, str):
        owner = f"node {label!r}" if label else "the root"
        raise NirFileError(
            f"{kind} name {_show(name)} ({type(name).__name__}) in {owner} is not a string; "
            "HDF5 group names are strings"
        )
    where = _label(label, name) if kind == "node" else name
    _check_name(name, f"{kind} {where!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise NirFileError(
            f"{kind} {where!r}: the name holds a lone surrogate, which UTF-8 (HDF5's names) cannot "
            "store; rename it (a name decoded with errors='surrogateescape' needs decoding again)"
        ) from None
    return where


def _write_observable(
    writer: _Writer, parent: Any, name: str, observable: Any, what: str, lossy: list[str]
) -> None:
    if isinstance(observable, nir.TimeGriddedData):
        kind = _GRIDDED
    elif isinstance(observable, nir.ValuedEventData):
        kind = _VALUED
    elif isinstance(observable, nir.EventData):
        kind = _EVENTS
    else:
        raise NirFileError(
            f"{what} is a {type(observable).__name__}; observables are nir.TimeGriddedData, "
            "nir.EventData or nir.ValuedEventData. Convert it to one of these"
        )
    if type(observable).__name__ != kind:
        lossy.append(f"{what} is a {type(observable).__name__}; it is stored as {kind} and reads back as one")

    def fail(message: str) -> NirFileError:
        return NirFileError(f"{what}: {message}")

    if kind == _GRIDDED:
        data = _numbers(observable.data, f"{what}: data")
        dt = _real(observable.dt, f"{what}: dt")
        _check_gridded(data, float(dt), fail, str)
        group = writer.group(parent, name, ordered=False)
        _set_text(group, "__type__", kind)
        _set_number(group, "dt", dt)
        writer.dataset(group, "data", data)
        return
    fields = ("idx", "time", "value") if kind == _VALUED else ("idx", "time")
    arrays = {field: _numbers(getattr(observable, field), f"{what}: {field}") for field in fields}
    n_neurons = _integer(observable.n_neurons, f"{what}: n_neurons")
    t_max = _real(observable.t_max, f"{what}: t_max")
    _check_events(arrays, int(n_neurons), float(t_max), fail, str)
    group = writer.group(parent, name, ordered=False)
    _set_text(group, "__type__", kind)
    _set_number(group, "n_neurons", n_neurons)
    _set_number(group, "t_max", t_max)
    for field, array in arrays.items():
        writer.dataset(group, field, array)


def _numbers(value: Any, what: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except Exception as error:
        raise NirFileError(f"{what} cannot be stored: {type(error).__name__}: {error}") from error
    if array.dtype.kind not in "biufc":
        raise NirFileError(
            f"{what} is a {type(value).__name__} of dtype {array.dtype}; NIR data holds arrays of "
            "numbers or bools. Convert it, e.g. np.asarray(..., dtype=float)"
        )
    return array


def _scalar(value: Any, what: str, wanted: str) -> Any:
    """``value`` as a numpy scalar of a real dtype (bools are not numbers here)."""
    array = None
    if not isinstance(value, (str, bytes)):
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 - whatever numpy cannot take is not a number
            array = None
    if array is None or array.ndim or array.dtype.kind not in "iuf":
        raise NirFileError(f"{what} is {_show(value)} ({type(value).__name__}); store {wanted}")
    return array[()]


def _real(value: Any, what: str) -> np.float64:
    return np.float64(_float(_scalar(value, what, "a real number")))


def _integer(value: Any, what: str) -> np.int64:
    number = _whole(_scalar(value, what, "a whole number (64-bit)"))
    if number is None or not _INT64[0] <= number <= _INT64[1]:
        raise NirFileError(f"{what} is {_show(value)}; store a whole number (64-bit)")
    return np.int64(number)


def _set_text(obj: Any, name: str, text: str) -> None:
    """A scalar variable-length UTF-8 string attribute, as h5py writes a Python ``str``."""
    value = np.array(text, dtype=h5py.string_dtype("utf-8"))
    tid = h5t.py_create(value.dtype, logical=True)
    h5a.create(obj, name.encode("utf-8"), tid, h5s.create(h5s.SCALAR)).write(value)


def _set_number(obj: Any, name: str, value: np.generic) -> None:
    array = np.asarray(value)
    tid = h5t.py_create(array.dtype, logical=True)
    h5a.create(obj, name.encode("utf-8"), tid, h5s.create(h5s.SCALAR)).write(array)


# ----------------------------------------------------------------------------- the rules
# What NIR data means (nir/data_ir): both directions check the same rules, so what
# write_data refuses read_data refuses too, and the other way round.

_INT64 = (-(2**63), 2**63 - 1)
_N_NEURONS = (
    "it counts the neurons the events index: a whole number from 0 to 2**63 - 1. Set it to the "
    "size of the recorded layer"
)
_CONTAINERS = (nir.NIRGraphData, nir.NIRNodeData)
_ARRAY_KINDS = {  # field -> (numpy dtype kinds allowed, what it holds)
    "data": ("biuf", "bools (spikes) or real numbers"),
    "value": ("biuf", "bools or real numbers"),
    "idx": ("iu", "integers (neuron indices)"),
    "time": ("iuf", "real numbers (seconds)"),
}
_COMPLEX = " (record complex values as two observables, real and imaginary parts)"
_CONVERT = {
    "data": "data.astype(bool) or data.astype(float)" + _COMPLEX,
    "value": "value.astype(float)" + _COMPLEX,
    "idx": "idx.astype(np.int64), with -1 where a sample has no more events",
    "time": "time.astype(float), with inf where idx is -1",
}

_Fail = Callable[[str], NirBridgeError]  # the error for a message, naming file and observable
_Label = Callable[[str], str]  # how a message names a field ("dt" or "attribute 'dt'")


def _show(value: Any) -> str:
    """A short, safe ``repr`` for messages: huge integers and long reprs are cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails is no reason to hide the real error
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def _float(number: Any) -> float:
    """A real numpy or Python scalar as a float; out-of-range values become ±inf or 0
    without numpy's overflow warning (the rules then refuse them)."""
    with np.errstate(over="ignore", under="ignore"):
        return float(number)


def _whole(number: Any) -> int | None:
    """A real scalar as an int when it is a finite whole number, else None."""
    if isinstance(number, (np.integer, int)):
        return int(number)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if not np.isfinite(number) or number != np.trunc(number):
            return None
    return int(number)


def _at(array: np.ndarray, mask: np.ndarray) -> tuple[tuple[int, ...], Any] | None:
    """The first position where ``mask`` is true and the array's value there, or None."""
    if not mask.any():
        return None
    position = tuple(int(i) for i in np.unravel_index(int(mask.argmax()), mask.shape))
    return position, array[position].item()


def _dtype(field: str, array: np.ndarray, fail: _Fail, label: _Label) -> None:
    kinds, holds = _ARRAY_KINDS[field]
    if array.dtype.kind not in kinds:
        raise fail(
            f"{label(field)} has dtype {array.dtype}; {field} holds {holds}. Convert it, e.g. "
            f"{_CONVERT[field]}"
        )


def _check_gridded(data: np.ndarray, dt: float, fail: _Fail, label: _Label) -> None:
    """TimeGriddedData: bools or reals of shape (n_samples, n_time_steps, n_neurons), any
    values (a recording may hold inf or nan), and a time step dt > 0 seconds."""
    _dtype("data", data, fail, label)
    if data.ndim != 3:
        raise fail(
            f"{label('data')} has shape {data.shape}; TimeGriddedData holds a 3-D array "
            "(n_samples, n_time_steps, n_neurons). Reshape it, e.g. data[None] for one sample"
        )
    if not (math.isfinite(dt) and dt > 0):
        raise fail(
            f"{label('dt')} is {dt!r}; the time step is a finite number of seconds > 0. Set it to "
            "the step the data was recorded at"
        )


def _check_events(
    arrays: dict[str, np.ndarray], n_neurons: int, t_max: float, fail: _Fail, label: _Label
) -> None:
    """EventData / ValuedEventData: idx, time (and value) of one 2-D shape (n_samples,
    n_events); each entry an event (0 <= idx < n_neurons, 0 <= time <= t_max) or padding
    (idx -1, time anything but nan; nir writes inf); n_neurons >= 0; t_max finite >= 0."""
    for field, array in arrays.items():
        _dtype(field, array, fail, label)
    fields = ", ".join(arrays)
    shapes = {field: array.shape for field, array in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise fail(f"{fields} must have one shape (n_samples, n_events), got {shapes}")
    idx, time = arrays["idx"], arrays["time"]
    if idx.ndim != 2:
        raise fail(
            f"{fields} have shape {idx.shape}; EventData holds 2-D arrays (n_samples, n_events). "
            "Reshape them, e.g. idx[None] and time[None] for one sample"
        )
    if not 0 <= n_neurons <= _INT64[1]:
        raise fail(f"{label('n_neurons')} is {_show(n_neurons)}; {_N_NEURONS}")
    if not (math.isfinite(t_max) and t_max >= 0):
        raise fail(
            f"{label('t_max')} is {t_max!r}; it is the recording's length: a finite number of "
            "seconds >= 0, at least the last event's time"
        )
    if not idx.size:
        return
    low, high = int(idx.min()), int(idx.max())
    if low < -1 or high >= n_neurons:
        position = np.unravel_index(int(idx.argmin() if low < -1 else idx.argmax()), idx.shape)
        at = ", ".join(str(int(i)) for i in position)
        legal = f"0 to n_neurons - 1 ({n_neurons - 1})" if n_neurons else "none (n_neurons is 0)"
        raise fail(
            f"{label('idx')} at [{at}] is {low if low < -1 else high}; an event's index is {legal}, "
            "and -1 marks where a sample has no more events. Fix the index, or n_neurons if the "
            "layer is larger"
        )
    events = idx >= 0
    checks = (
        (
            lambda: np.isnan(time) if time.dtype.kind == "f" else events & False,
            "an event's time is in seconds (0 to t_max), padding's (idx -1) is inf",
        ),
        (
            lambda: events & (time < 0),
            "event times are seconds from the start of the recording, 0 to t_max",
        ),
        (
            lambda: events & (time > _limit(t_max, time.dtype)),
            f"after t_max ({t_max!r}); raise t_max to the recording's length or drop the event",
        ),
    )
    for mask, why in checks:
        found = _at(time, mask())
        if found is not None:
            position, value = found
            neuron = int(idx[position])
            of = f"neuron {neuron}" if neuron >= 0 else "padding, idx -1"
            at = ", ".join(map(str, position))
            raise fail(f"{label('time')} at [{at}] is {value!r} ({of}); {why}")


def _limit(t_max: float, dtype: np.dtype) -> Any:
    """t_max in the precision of the times it bounds (an event at float32(t_max) is in)."""
    if dtype.kind != "f":
        return np.float64(t_max)
    with np.errstate(over="ignore"):
        return dtype.type(t_max)


# ----------------------------------------------------------------------------- reading


def read_data(path_or_file: PathOrFile) -> nir.NIRGraphData:
    """Read recorded data (``nir.NIRGraphData``) from a file that :func:`write_data` or
    ``nir.write_data`` wrote (layout in the module docstring), from a path or a binary
    file object.

    Nodes and observables come back in the order stored: creation order for files
    nirbridge wrote, name order for files ``nir.write_data`` wrote. Arrays keep their
    dtype; ``dt`` and ``t_max`` are floats and ``n_neurons`` an int, as ``nir.read_data``
    returns them. Members a group holds beyond the layout are ignored with a
    :class:`NirFileWarning`.

    Raises :class:`NirFileError` naming the file and the group at fault (and the
    dataset or attribute) for anything else: a file that is not NIR data (a ``.nir``
    graph file says so), an unknown ``__type__``, a missing or malformed dataset or
    attribute, values the rules of the module docstring refuse (the same rules
    :func:`write_data` applies), and truncated, corrupted or hostile files.
    """
    where = _describe(path_or_file)
    opened = Source(path_or_file, where)
    try:
        reader = _DataReader(where, opened)
        root = h5g.open(opened.fid, b"/")
        tree = reader.group(root, "", 0, only={"nodes"})
        kind = reader.attributes[""].get("__type__")
        if kind != _GRAPH:
            if root.links.exists(b"node"):
                raise NirFileError(f"{where}: is a NIR graph file, not NIR data; read it with nirbridge.read")
            found = "has no __type__" if kind is None else f"has __type__ {kind!r}"
            raise NirFileError(f"{where}: not a NIR data file (its root {found}, not {_GRAPH!r})")
    except NirBridgeError:
        raise
    except MemoryError as error:
        raise out_of_memory(where) from error
    except Exception as error:
        problem = f"{type(error).__name__}: {error}"
        raise NirFileError(
            f"{where}: cannot read as a NIR data file; it is corrupted or not one ({problem})"
        ) from error
    finally:
        opened.close()
    builder = _Builder(where, reader.attributes)
    data = builder.graph(tree, "")
    for note in builder.notes:
        warnings.warn(f"{where}: {note}", NirFileWarning, stacklevel=2)
    return data


class _DataReader(Reader):
    """io's reader, also reading the attributes NIR data keeps on each group."""

    def __init__(self, where: str, source: Source) -> None:
        super().__init__(where, source)
        self.attributes: dict[str, dict[str, Any]] = {}  # group path -> the attributes read

    def group(self, gid: h5g.GroupID, path: str, depth: int, only: set[str] | None = None) -> dict[str, Any]:
        members = super().group(gid, path, depth, only)
        self.attributes[path] = {
            name: self.attribute(gid, name, path)
            for name in _ATTRIBUTES
            if h5a.exists(gid, name.encode("utf-8"))
        }
        return members

    def attribute(self, gid: h5g.GroupID, name: str, path: str) -> Any:
        """One scalar attribute: a number, or a string checked before HDF5 reads it."""
        what = f"attribute {name!r}"
        aid = h5a.open(gid, name.encode("utf-8"))
        space = aid.get_space()
        if space.get_simple_extent_type() == h5s.NULL:
            raise self.fail(path, f"{what} is empty where one value is expected")
        count = math.prod(space.shape)
        if count != 1:
            raise self.fail(path, f"{what} holds {count} values where one is expected")
        try:
            dtype = aid.dtype
        except (TypeError, ValueError) as error:  # a float or integer type numpy has no dtype for
            raise self.fail(path, f"{what} has an HDF5 type numpy cannot hold ({error})") from None
        string = h5py.check_string_dtype(dtype)
        if string is None and dtype.kind not in "biuf":
            raise self.fail(path, f"{what} has HDF5 type {dtype}; NIR data stores a string or a number")
        if dtype.itemsize > _ATTRIBUTE_BYTES:
            raise self.fail(path, f"{what} claims {dtype.itemsize} bytes; the file is corrupted or hostile")
        if string is not None and string.length is None:
            self.check_heap_ids(self.stored_value(gid, name, path), path)
        out = np.empty(space.shape, dtype)
        aid.read(out)
        value = out.reshape(-1)[0]
        if string is None:
            return value
        try:
            return value.decode("utf-8") if isinstance(value, bytes) else str(value)
        except UnicodeDecodeError:
            raise self.fail(path, f"{what} is not UTF-8 text") from None

    def stored_value(self, gid: h5g.GroupID, name: str, path: str) -> bytes:
        """The raw value of the group's variable-length string attribute ``name`` (its
        length, global heap address and index), read from the object header: HDF5 has
        no call that returns it without following it into the heap."""
        info = h5o.get_info(gid)
        found: list[bytes] = []
        attributes = 0
        for kind, flags, body in self.header_messages(info.addr, path):
            if kind == _ATTRIBUTE_INFO and self.dense_attributes(body):
                raise self.fail(path, "keeps its attributes in dense storage, which NIR data does not use")
            if kind != _ATTRIBUTE_MESSAGE:
                continue
            attributes += 1
            if flags & _SHARED:
                raise self.fail(path, "shares its attributes with other objects, which NIR data does not do")
            stored_name, datatype, value = self.attribute_message(body, path)
            if stored_name == name.encode("utf-8"):
                if not datatype or datatype[0] & 0x0F != _VLEN_CLASS:
                    raise self.fail(
                        path, f"attribute {name!r} does not match its header; the file is corrupted"
                    )
                found.append(value)
        width = 8 + self.sizeof_addr
        if attributes != info.num_attrs or len(found) != 1 or len(found[0]) < width:
            raise self.fail(path, f"attribute {name!r} does not match its header; the file is corrupted")
        return found[0][:width]

    def header_messages(self, address: int, path: str) -> list[tuple[int, int, bytes]]:
        """(type, flags, body) of every message in the object header at ``address``, all
        chunks (HDF5 file format, object header versions 1 and 2)."""
        bad = "has a corrupted object header"
        start = self.base + address
        prefix = self.source.raw(start, 32)
        if prefix[:4] == b"OHDR":
            if len(prefix) < 7 or prefix[4] != 2:
                raise self.fail(path, bad)
            flags = prefix[5]
            p = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
            width = 1 << (flags & 0x03)
            if len(prefix) < p + width:
                raise self.fail(path, bad)
            chunks = [(start + p + width, int.from_bytes(prefix[p : p + width], "little"))]
            version, head = 2, 6 if flags & 0x04 else 4  # creation order stored per message
        elif prefix[:1] == b"\x01" and len(prefix) >= 16:
            chunks = [(start + 16, int.from_bytes(prefix[8:12], "little"))]
            version, head = 1, 8
        else:
            raise self.fail(path, bad)
        messages: list[tuple[int, int, bytes]] = []
        visited: set[int] = set()
        while chunks:
            offset, length = chunks.pop()
            if (
                offset in visited
                or len(visited) >= _MAX_CHUNKS
                or length < 0
                or offset + length > self.file_size
            ):
                raise self.fail(path, bad)
            visited.add(offset)
            raw = self.source.raw(offset, length)
            p = 0
            while p + head <= len(raw):  # v1: type (2), size (2), flags; v2: type (1), size (2), flags
                if version == 1:
                    kind, flags = int.from_bytes(raw[p : p + 2], "little"), raw[p + 4]
                    size = int.from_bytes(raw[p + 2 : p + 4], "little")
                else:
                    kind, flags = raw[p], raw[p + 3]
                    size = int.from_bytes(raw[p + 1 : p + 3], "little")
                end = p + head + size
                if end > len(raw):
                    raise self.fail(path, bad)
                body = raw[p + head : end]
                p = end
                if kind == _CONTINUATION:
                    chunks.append(self.continuation(body, version, path))
                else:
                    messages.append((kind, flags, body))
        return messages

    def continuation(self, body: bytes, version: int, path: str) -> tuple[int, int]:
        """Where the messages of a continuation chunk lie: (file offset, size)."""
        a, s = self.sizeof_addr, self.sizeof_size
        if len(body) < a + s:
            raise self.fail(path, "has a corrupted object header")
        offset = self.base + int.from_bytes(body[:a], "little")
        size = int.from_bytes(body[a : a + s], "little")
        if version == 1:
            return offset, size
        if self.source.raw(offset, 4) != b"OCHK":
            raise self.fail(path, "has a corrupted object header")
        return offset + 4, size - 8  # after the signature, before the checksum

    def dense_attributes(self, body: bytes) -> bool:
        """Whether an attribute info message points to a fractal heap (dense storage)."""
        p = 2 + (2 if len(body) > 1 and body[1] & 0x01 else 0)
        heap = body[p : p + self.sizeof_addr]
        return heap != b"\xff" * self.sizeof_addr

    def attribute_message(self, body: bytes, path: str) -> tuple[bytes, bytes, bytes]:
        """(name, datatype, value) of an attribute message (versions 1 to 3)."""
        version = body[0] if body else 0
        if version not in (1, 2, 3) or len(body) < 9:
            raise self.fail(path, "has a corrupted attribute message")
        if version > 1 and body[1] & 0x03:
            raise self.fail(path, "shares an attribute's type or shape, which NIR data does not do")
        sizes = [int.from_bytes(body[i : i + 2], "little") for i in (2, 4, 6)]

        def padded(n: int) -> int:
            return -(-n // 8) * 8 if version == 1 else n

        p = 9 if version == 3 else 8
        name = body[p : p + sizes[0]].split(b"\0", 1)[0]
        p += padded(sizes[0])
        datatype = body[p : p + sizes[1]]
        p += padded(sizes[1]) + padded(sizes[2])
        return name, datatype, body[p:]


class _Builder:
    """Turns the group tree and attributes of a data file into nir's data classes."""

    def __init__(self, where: str, attributes: dict[str, dict[str, Any]]) -> None:
        self.where = where
        self.attributes = attributes
        self.notes: list[str] = []
        self.depth = 0  # graphs nested above the one being built

    def fail(self, path: str, message: str) -> NirFileError:
        return NirFileError(f"{self.where}: {path or '/'}: {message}")

    def kind(self, tree: Any, path: str, expected: str) -> str:
        if not isinstance(tree, dict):
            raise self.fail(path, f"is a dataset where {expected} group was expected")
        kind = self.attributes.get(path, {}).get("__type__")
        if not isinstance(kind, str):
            raise self.fail(path, f"has no __type__ string attribute; {expected} group has one")
        return kind

    def extra(self, tree: dict[str, Any], path: str, known: set[str]) -> None:
        unknown = [name for name in tree if name not in known]
        if unknown:
            self.notes.append(f"{path or '/'}: member(s) {unknown} are not part of NIR data and were ignored")

    def graph(self, tree: dict[str, Any], path: str) -> nir.NIRGraphData:
        nodes_tree = tree.get("nodes")
        if not isinstance(nodes_tree, dict):
            raise self.fail(path, "(NIRGraphData) has no 'nodes' group")
        self.extra(tree, path, {"nodes"})
        nodes: dict[str, nir.NIRGraphData | nir.NIRNodeData] = {}
        for name, sub in nodes_tree.items():
            sub_path = f"{path}/nodes/{name}".lstrip("/")
            kind = self.kind(sub, sub_path, "a node")
            if kind == _NODE:
                nodes[name] = self.node(sub, sub_path)
            elif kind == _GRAPH:
                self.depth += 1
                if self.depth > MAX_NESTING:
                    raise self.fail(
                        sub_path,
                        f"graph data nests more than {MAX_NESTING} deep, which nirbridge neither writes "
                        "nor reads",
                    )
                nodes[name] = self.graph(sub, sub_path)
                self.depth -= 1
            else:
                raise self.fail(sub_path, f"has __type__ {kind!r}; a node is {_NODE!r} or {_GRAPH!r}")
        return nir.NIRGraphData(nodes=nodes)

    def node(self, tree: dict[str, Any], path: str) -> nir.NIRNodeData:
        observables_tree = tree.get("observables")
        if not isinstance(observables_tree, dict):
            raise self.fail(path, "(NIRNodeData) has no 'observables' group")
        self.extra(tree, path, {"observables"})
        observables = {
            name: self.observable(sub, f"{path}/observables/{name}") for name, sub in observables_tree.items()
        }
        return nir.NIRNodeData(observables=observables)

    def observable(self, tree: Any, path: str) -> nir.TimeGriddedData | nir.EventData:
        kind = self.kind(tree, path, "an observable")

        def fail(message: str) -> NirFileError:
            return self.fail(path, message)

        if kind == _GRIDDED:
            data = self.array(tree, "data", path)
            dt = self.real(path, "dt")
            _check_gridded(data, dt, fail, _stored)
            self.extra(tree, path, {"data"})
            return nir.TimeGriddedData(data=data, dt=dt)
        if kind not in (_EVENTS, _VALUED):
            raise self.fail(
                path, f"has __type__ {kind!r}; an observable is one of {_GRIDDED}, {_EVENTS}, {_VALUED}"
            )
        fields = ("idx", "time", "value") if kind == _VALUED else ("idx", "time")
        arrays = {field: self.array(tree, field, path) for field in fields}
        n_neurons, t_max = self.integer(path, "n_neurons"), self.real(path, "t_max")
        _check_events(arrays, n_neurons, t_max, fail, _stored)
        self.extra(tree, path, set(fields))
        cls = nir.ValuedEventData if kind == _VALUED else nir.EventData
        return cls(**arrays, n_neurons=n_neurons, t_max=t_max)

    def array(self, tree: dict[str, Any], name: str, path: str) -> np.ndarray:
        value = tree.get(name)
        if value is None:
            raise self.fail(path, f"has no dataset {name!r}")
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biufc":
            raise self.fail(path, f"{name!r} is not an array of numbers")
        return value

    def number(self, path: str, name: str) -> Any:
        value = self.attributes.get(path, {}).get(name)
        if value is None:
            raise self.fail(path, f"has no attribute {name!r}")
        if isinstance(value, str) or np.asarray(value).dtype.kind not in "iuf":
            raise self.fail(path, f"attribute {name!r} is {value!r}, not a number")
        return value

    def real(self, path: str, name: str) -> float:
        return _float(self.number(path, name))

    def integer(self, path: str, name: str) -> int:
        value = self.number(path, name)
        number = _whole(value)
        if number is None:
            raise self.fail(path, f"attribute {name!r} is {value!r}, not a whole number")
        if not 0 <= number <= _INT64[1]:  # n_neurons, the only whole number NIR data stores
            raise self.fail(path, f"attribute {name!r} is {value!r}; {_N_NEURONS}")
        return number


def _stored(field: str) -> str:
    """How read_data's messages name a field: a dataset or an attribute of the observable."""
    return f"attribute {field!r}" if field in _ATTRIBUTES else f"dataset {field!r}"

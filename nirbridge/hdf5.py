"""The one hardened HDF5 reader: every path that opens an HDF5 file (``read``,
``read_data``, ``info``, the CLI's ``--input``) goes through it.

Before HDF5 parses anything, a path must name a regular file (a FIFO would block, a
device never ends) and a file object must be finite. Only hard links to plain groups
and datasets are followed: soft and external links, external raw storage, virtual
datasets and filters other than HDF5's built-in ones and LZF (plugins run code) are
refused. A dataset may not claim more memory than its stored bytes can hold (1100x for
compressed data, above deflate's 1032:1 limit), the whole file's data is bounded by
the same factor, variable-length strings are checked against the heaps they point
into, and nesting is capped. Everything refused raises :class:`NirFileError` naming
the file and the object's path.
"""

from __future__ import annotations

import errno
import io
import math
import os
import stat
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h5py
import numpy as np
from h5py import h5d, h5f, h5g, h5l, h5o, h5p, h5s

from .errors import MemoryLimitError, NirBridgeError, NirFileError
from .limits import MAX_METADATA_NESTING, MAX_NESTING, available, check_memory, human

_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset", 32000: "lzf"}
_EXPANSION = 1100  # most bytes a stored byte may decompress to (deflate's limit is 1032)
_SMALL = 1 << 16  # bytes any dataset may claim, whatever it stores (fill values)
# group nesting: a graph nested k deep puts its nodes' groups 2k + 1 deep, their metadata below
_MAX_DEPTH = 2 * MAX_NESTING + 2 + MAX_METADATA_NESTING
_STREAM_LIMIT = 1 << 30  # most bytes read from a file object whose size is not known
_CHUNK = 1 << 20  # h5py's largest automatic chunk: any chunk up to it is a writer's own choice
_STRING_OBJECT = 64  # bytes of a decoded string beside its text: a str object and its pointer
_PARALLEL = 1 << 20  # compressed datasets from this size are inflated on several threads
_DEFLATE, _SHUFFLE = 1, 2  # HDF5 filter ids


class Reader:
    """Walks an open HDF5 file into nested dicts of numpy values, refusing anything a
    NIR file does not hold and bounding time and memory by the file's size."""

    def __init__(self, where: str, source: Source) -> None:
        self.where = where
        self.source = source
        self.file_size = file_size = source.size
        self.budget = _EXPANSION * file_size + _SMALL
        self.objects_left = file_size // 16 + 64
        self.seen: set[int] = set()  # addresses of the groups and datasets read
        self.heaps: dict[int, dict[int, int]] = {}  # checked heap collections
        fcpl = source.fid.get_create_plist()
        self.base = fcpl.get_userblock()
        self.sizeof_addr, self.sizeof_size = fcpl.get_sizes()

    def fail(self, path: str, message: str) -> NirFileError:
        return NirFileError(f"{self.where}: {path}: {message}")

    def group(self, gid: h5g.GroupID, path: str, depth: int, only: set[str] | None = None) -> dict[str, Any]:
        """The group's members as a dict; with ``only``, just those names (and no
        complaint about the others)."""
        if depth > _MAX_DEPTH:
            raise self.fail(path, f"groups nested deeper than {_MAX_DEPTH} levels; not a NIR file")
        address = h5o.get_info(gid).addr
        if address in self.seen:
            raise self.fail(path or "/", "a group linked twice (a cycle or shared group); not a NIR file")
        self.seen.add(address)
        result: dict[str, Any] = {}
        for name, sub, obj in self.members(gid, path, only):
            if isinstance(obj, h5g.GroupID):
                result[name] = self.group(obj, sub, depth + 1)
            elif isinstance(obj, h5d.DatasetID):
                result[name] = self.dataset(obj, sub)
            else:
                raise self.fail(sub, "is neither a group nor a dataset")
        return result

    def members(
        self, gid: h5g.GroupID, path: str, only: set[str] | None = None
    ) -> Iterator[tuple[str, str, Any]]:
        """(name, path, opened object) for a group's members in creation order (name
        order where none is kept); only hard links are followed, and the count of
        objects is bounded by the file's size."""
        links: list[tuple[bytes, int]] = []
        order = h5p.CRT_ORDER_INDEXED & gid.get_create_plist().get_link_creation_order()
        gid.links.iterate(
            lambda name, info: links.append((name, info.type)),
            idx_type=h5py.h5.INDEX_CRT_ORDER if order else h5py.h5.INDEX_NAME,
            info=True,
        )
        for raw_name, link_type in links:
            self.objects_left -= 1
            if self.objects_left < 0:
                raise self.fail(path, "more objects than a file of this size can hold; the file is corrupted")
            name = raw_name.decode("utf-8")
            sub = f"{path}/{name}".lstrip("/")
            if only is not None and name not in only:
                continue
            if link_type != h5l.TYPE_HARD:
                raise self.fail(
                    sub,
                    "is a soft or external link; nirbridge follows only hard links to groups and datasets",
                )
            yield name, sub, h5o.open(gid, raw_name)

    def dataset(self, dsid: h5d.DatasetID, path: str, rows: int | None = None) -> Any:
        """The dataset's values once its storage has been checked: numbers as numpy
        values, strings as ``str`` (arrays of them as object arrays); with ``rows``, only
        the first ``rows`` entries along the first axis are read."""
        address = h5o.get_info(dsid).addr
        if address in self.seen:
            raise self.fail(path, "a dataset linked twice; not a NIR file")
        self.seen.add(address)
        dcpl = dsid.get_create_plist()
        if dcpl.get_layout() not in (h5d.COMPACT, h5d.CONTIGUOUS, h5d.CHUNKED):
            raise self.fail(path, "is a virtual dataset, which reads other files; refused")
        if dcpl.get_external_count():
            raise self.fail(path, "keeps its data in external files; refused")
        for index in range(dcpl.get_nfilters()):
            code = dcpl.get_filter(index)[0]
            if code not in _FILTERS:
                raise self.fail(
                    path,
                    f"uses HDF5 filter {code}, which nirbridge does not load (plugins run code); "
                    f"rewrite the file with one of {sorted(set(_FILTERS.values()))}",
                )
        dtype = dsid.dtype
        is_string = h5py.check_string_dtype(dtype) is not None
        if not is_string and dtype.kind not in "biufc":
            raise self.fail(path, f"has HDF5 type {dtype}, which no NIR field uses")
        space = dsid.get_space()
        if space.get_simple_extent_type() == h5s.NULL:
            return None
        shape = space.shape
        claimed = math.prod(shape) * dtype.itemsize
        if dcpl.get_layout() == h5d.CHUNKED:  # HDF5 inflates whole chunks, however small the extent
            chunk = dcpl.get_chunk()
            chunk_bytes = math.prod(chunk) * dtype.itemsize
            if chunk_bytes > max(_CHUNK, 16 * math.prod(shape) * dtype.itemsize):
                raise self.fail(
                    path,
                    f"stores {math.prod(shape) * dtype.itemsize} bytes in chunks of {chunk_bytes} bytes, "
                    "which HDF5 would allocate whole to read; no writer makes such chunks. Rewrite the file",
                )
            claimed = max(claimed, math.prod(-(-s // c) * c for s, c in zip(shape, chunk)) * dtype.itemsize)
        stored = dsid.get_storage_size()
        if stored > self.file_size or claimed > max(_SMALL, _EXPANSION * stored):
            raise self.fail(
                path,
                f"claims {claimed} bytes of data but stores {stored} in a file of {self.file_size} bytes; "
                "the file is corrupted or hostile",
            )
        part = rows is not None and len(shape) > 0 and rows < shape[0]
        if part:
            shape = (rows, *shape[1:])
            claimed = math.prod(shape) * dtype.itemsize
        # a decoded string costs a Python object beside its bytes: charged before it is made
        self.charge(claimed + (_STRING_OBJECT * math.prod(shape) if is_string else 0), stored, path)
        if dtype.kind == "O" and claimed:
            if not stored:  # HDF5 would copy the fill value into every element
                raise self.fail(
                    path, "holds variable-length strings it never wrote (only a fill value); refused"
                )
            self.check_heaps(dsid, dcpl, stored, path)
        out = np.empty(shape, dtype)
        if part:
            space.select_hyperslab((0,) * len(shape), shape)
            if out.size:
                dsid.read(h5s.create_simple(shape), space, out)
        elif out.size:
            parallel = not is_string and claimed >= _PARALLEL
            if not (
                parallel
                and (self.read_contiguous(dsid, dcpl, out) or self.read_chunks(dsid, dcpl, out, path))
            ):
                dsid.read(h5s.ALL, h5s.ALL, out)
        if is_string:
            return _decode(out)
        return out[()] if out.ndim == 0 else out

    def charge(self, nbytes: int, stored: int, path: str) -> None:
        """Take ``nbytes`` of memory from the file's budget, or refuse the dataset."""
        if nbytes > self.budget:
            raise self.fail(
                path,
                f"would take {nbytes} bytes of memory to read (it stores {stored}), more than a file of "
                f"{self.file_size} bytes can hold; the file is corrupted or hostile",
            )
        self.budget -= nbytes

    def read_contiguous(self, dsid: h5d.DatasetID, dcpl: h5p.PropDCID, out: np.ndarray) -> bool:
        """Read a large uncompressed contiguous dataset (what ``write`` produces) straight
        into ``out`` in parts on several threads. Returns False, reading nothing, where
        HDF5's reader is needed."""
        offset = dsid.get_offset()
        if (
            dcpl.get_layout() != h5d.CONTIGUOUS
            or dcpl.get_nfilters()
            or self.source.image is not None
            or not hasattr(os, "preadv")
            or offset is None
            or offset + out.nbytes > self.file_size
        ):
            return False
        buffer = memoryview(out.reshape(-1).view(np.uint8))
        workers = _workers()
        step = -(-out.nbytes // workers)

        def part(start: int) -> int:
            return os.preadv(self.source.descriptor, [buffer[start : start + step]], offset + start)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = sum(pool.map(part, range(0, out.nbytes, step)))
        return done == out.nbytes

    def read_chunks(self, dsid: h5d.DatasetID, dcpl: h5p.PropDCID, out: np.ndarray, path: str) -> bool:
        """Read a large chunked dataset stored with deflate and shuffle (what ``nir.write``
        and ``write(compression="gzip")`` produce) by inflating its chunks on several
        threads (zlib releases the GIL). Returns False, reading nothing, where HDF5's own
        reader is needed: other filters, missing chunks, a user block."""
        if dcpl.get_layout() != h5d.CHUNKED or self.base:
            return False
        pipeline = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
        if not set(pipeline) <= {_DEFLATE, _SHUFFLE}:
            return False
        chunk = tuple(dcpl.get_chunk())
        expected = math.prod(-(-size // edge) for size, edge in zip(out.shape, chunk))
        if not hasattr(dsid, "chunk_iter"):  # h5py built on HDF5 before 1.12.3
            return False
        infos: list[Any] = []
        dsid.chunk_iter(infos.append)
        if len(infos) != expected or len({info.chunk_offset for info in infos}) != expected:
            return False
        chunk_bytes = math.prod(chunk) * out.dtype.itemsize
        for info in infos:
            if info.byte_offset + info.size > self.file_size or any(
                o % c or o >= s for o, c, s in zip(info.chunk_offset, chunk, out.shape)
            ):
                raise self.fail(path, "a chunk lies outside the file or the dataset; the file is corrupted")

        def decode(info: Any) -> None:
            data = self.source.raw(info.byte_offset, info.size)
            for position in reversed(range(len(pipeline))):
                if info.filter_mask & (1 << position):
                    continue
                if pipeline[position] == _DEFLATE:
                    try:
                        data = zlib.decompressobj().decompress(data, chunk_bytes)
                    except zlib.error as error:
                        raise self.fail(path, f"a compressed chunk is corrupted ({error})") from None
                else:
                    items = np.frombuffer(data, np.uint8)[:chunk_bytes]
                    data = items.reshape(out.dtype.itemsize, -1).T.tobytes()
            if len(data) != chunk_bytes:
                raise self.fail(
                    path, "a compressed chunk does not inflate to its size; the file is corrupted"
                )
            block = np.frombuffer(data, out.dtype).reshape(chunk)
            window = tuple(slice(o, min(o + c, s)) for o, c, s in zip(info.chunk_offset, chunk, out.shape))
            out[window] = block[tuple(slice(0, w.stop - w.start) for w in window)]

        workers = _workers()

        def decode_all(batch: list[Any]) -> None:
            for info in batch:
                decode(info)

        batches = [infos[i :: 4 * workers] for i in range(4 * workers)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(decode_all, batches))
        return True

    def check_heaps(self, dsid: h5d.DatasetID, dcpl: h5p.PropDCID, stored: int, path: str) -> None:
        """Check a variable-length string dataset against the global heap collections it
        points into, before HDF5 reads it: HDF5 loops forever on some corrupted
        collections (an object of size 0 stops its parser) and allocates whatever length
        a corrupted string claims."""
        if not stored:
            return
        if dcpl.get_layout() != h5d.CONTIGUOUS or dcpl.get_nfilters():
            raise self.fail(path, "holds variable-length strings in a layout NIR files do not use; refused")
        offset = dsid.get_offset()
        if offset is None or offset + stored > self.file_size:
            raise self.fail(path, "points outside the file; the file is corrupted")
        self.check_heap_ids(self.source.raw(offset, stored), path)

    def check_heap_ids(self, raw: bytes, path: str) -> None:
        """Check the variable-length string references in ``raw`` (each a length, a
        global heap collection's address and an object index) against the collections
        they point into, and charge their lengths to the memory budget."""
        width = self.sizeof_addr
        for start in range(0, len(raw) - width - 7, width + 8):  # length (4), heap address, index (4)
            length = int.from_bytes(raw[start : start + 4], "little")
            if not length:
                continue
            address = int.from_bytes(raw[start + 4 : start + 4 + width], "little")
            index = int.from_bytes(raw[start + 4 + width : start + 8 + width], "little")
            objects = self.heaps.get(address)
            if objects is None:
                objects = self.heaps[address] = self.heap_objects(address, path)
            if objects.get(index) != length:
                raise self.fail(path, "a string points to a missing or mismatched global heap object")
            self.budget -= length
            if self.budget < 0:
                raise self.fail(path, "its strings add up to more than a file of this size can hold")

    def heap_objects(self, address: int, path: str) -> dict[int, int]:
        """Walk one global heap collection as HDF5's parser does and return its objects'
        sizes by index; refuse it if the walk would not advance or would leave it."""
        length = self.sizeof_size
        header = self.source.raw(self.base + address, 8 + length)
        if header[:4] != b"GCOL" or len(header) < 8 + length:
            raise self.fail(path, "a string points to something that is not a global heap; refused")
        size = int.from_bytes(header[8:], "little")
        if size < 8 + length or self.base + address + size > self.file_size:
            raise self.fail(path, "its strings live in a global heap that runs past the end of the file")
        chunk = self.source.raw(self.base + address, size)
        object_header = 8 + length
        objects: dict[int, int] = {}
        p = 8 + length
        while p + object_header <= size:
            index = int.from_bytes(chunk[p : p + 2], "little")
            object_size = int.from_bytes(chunk[p + 8 : p + 8 + length], "little")
            need = object_header + 8 * ((object_size + 7) // 8) if index else object_size
            if need <= 0 or p + need > size:
                raise self.fail(path, "its strings live in a corrupted global heap; refused")
            if index:
                objects[index] = object_size
            p += need
        return objects


def _workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cpus))


def _decode(array: np.ndarray) -> Any:
    """Strings as ``str``, arrays of them as object arrays of ``str`` (a fixed-width
    array would pad every string to the longest); bytes that are not UTF-8 stay bytes."""
    try:
        if array.ndim == 0:
            value = array[()]
            return value.decode("utf-8") if isinstance(value, bytes) else str(value)
        text = np.empty(array.shape, dtype=object)
        for index, value in np.ndenumerate(array):
            text[index] = value.decode("utf-8") if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError:
        return array[()] if array.ndim == 0 else array
    return text


def regular_file(source: str | os.PathLike[str], where: str, kind: str) -> str:
    """``source`` as a path, once it names a regular file (links followed); otherwise a
    :class:`NirFileError` saying what it is. Checked before opening: opening a FIFO
    blocks until a writer comes, and a device or ``/proc`` file is no NIR file."""
    try:
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if "\0" in path:
            raise NirFileError(
                f"{where!r}: a path holding a NUL character names no file; check how it was made"
            )
        status = os.stat(path)
    except OSError as error:
        raise NirFileError(f"{where}: {os_reason(error)}") from None
    except (TypeError, ValueError) as error:
        raise NirFileError(f"{where!r}: not a usable path ({error})") from None
    if stat.S_ISDIR(status.st_mode):
        raise NirFileError(f"{where}: is a folder, not {kind}")
    if not stat.S_ISREG(status.st_mode):
        raise NirFileError(f"{where}: is a {file_kind(status.st_mode)}, not {kind}; give a regular file")
    return path


def os_reason(error: OSError) -> str:
    """An OS error in words, without the path it repeats."""
    if error.errno == errno.ENOENT:
        return "no such file"
    if error.errno == errno.ELOOP:
        return "a loop of symbolic links (a link that points back to itself); fix or remove the link"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if error.errno == errno.ENAMETOOLONG:
        return "the path is too long"
    if error.errno == errno.ENOTDIR:
        return "a part of the path is not a folder"
    return error.strerror or str(error)


def file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return "special file"


def _empty(name: bytes) -> bool:
    """Whether a regular file holds no bytes (a ``/proc`` file reports size 0 and is not
    empty, so the first byte is read)."""
    try:
        with open(name, "rb") as file:
            return not file.read(1)
    except OSError:
        return False


class Source:
    """An opened file: the HDF5 handle, its size, and its raw bytes for the checks that
    must run before HDF5 parses them (read through HDF5's own file descriptor, so both
    see the same file)."""

    def __init__(self, source: Any, where: str, kind: str = "a .nir file") -> None:
        fapl = h5p.create(h5p.FILE_ACCESS)
        fapl.set_fclose_degree(h5f.CLOSE_STRONG)
        self.image: bytes | None = None
        self.lock = threading.Lock()
        if isinstance(source, (str, os.PathLike)):
            path = regular_file(source, where, kind)
            name = os.fsencode(path)
        elif callable(getattr(source, "read", None)):
            if isinstance(source, io.TextIOBase):
                raise NirFileError(f"{where}: is opened in text mode; open it in binary mode ('rb')")
            self.image = _read_image(source, where, kind)
            fapl.set_fapl_core(backing_store=False)
            fapl.set_file_image(self.image)
            name = b"nirbridge-image"
        else:
            raise NirFileError(f"expected a path or a binary file object, got {type(source).__name__}")
        try:
            self.fid = h5f.open(name, h5f.ACC_RDONLY, fapl)
        except OSError as error:
            empty = self.image is None and _empty(name)
            reason = "is empty" if empty else f"not an HDF5 file, or a truncated or corrupted one ({error})"
            raise NirFileError(f"{where}: {reason}") from None
        if self.image is None:
            self.descriptor = self.fid.get_vfd_handle()
            self.size = os.fstat(self.descriptor).st_size
        else:
            self.size = len(self.image)

    def raw(self, offset: int, count: int) -> bytes:
        if self.image is not None:
            return self.image[offset : offset + count]
        if hasattr(os, "pread"):
            return os.pread(self.descriptor, count, offset)
        with self.lock:  # no pread (Windows): seek and read as one step
            os.lseek(self.descriptor, offset, os.SEEK_SET)
            return os.read(self.descriptor, count)

    def close(self) -> None:
        self.fid.close()


def _read_image(source: Any, where: str, kind: str) -> bytes:
    """A binary file object's bytes, from its start, read no further than its size says:
    a device (``/dev/zero``) is refused, and a stream of unknown size (a pipe) is read
    up to 1 GiB."""
    try:
        descriptor = source.fileno()
        mode: int | None = os.fstat(descriptor).st_mode
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        mode = None
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode)):
        raise NirFileError(f"{where}: is a {file_kind(mode)}, not {kind}; give a regular file")
    try:
        size = None
        if mode is None or stat.S_ISREG(mode):
            if source.seekable():
                size = source.seek(0, os.SEEK_END)
                source.seek(0)
        limit = _STREAM_LIMIT if size is None else size
        check_memory(limit, f"reading {where}", "give the path of the file instead of a file object")
        pieces: list[bytes] = []
        total = 0
        while total <= limit:
            piece = source.read(min(1 << 24, limit + 1 - total))
            if not piece:
                break
            if not isinstance(piece, (bytes, bytearray, memoryview)):
                raise NirFileError(f"{where}: is opened in text mode; open it in binary mode ('rb')")
            pieces.append(bytes(piece))
            total += len(pieces[-1])
    except MemoryError as error:
        raise out_of_memory(where) from error
    except (OSError, ValueError, AttributeError) as error:
        raise NirFileError(f"{where}: cannot read: {error}") from error
    if total > limit:
        reason = (
            f"holds more bytes than its size ({size}) says; it is being written or is not a file"
            if size is not None
            else f"gave more than {_STREAM_LIMIT >> 30} GiB without ending; give the path of {kind}"
        )
        raise NirFileError(f"{where}: {reason}")
    if not total:
        raise NirFileError(f"{where}: is empty")
    return b"".join(pieces)


def out_of_memory(where: str) -> MemoryLimitError:
    """What a :class:`MemoryError` while reading ``where`` is: no sign of a corrupted
    file (the reader bounds what a file may claim), but of too little memory free."""
    free = available()
    return MemoryLimitError(
        f"{where}: ran out of memory while reading it"
        + (f" ({human(free)} free now)" if free is not None else "")
        + "; the file is readable, free memory (or read it on a larger machine)",
        free=free or 0,
    )


def read_datasets(
    path: str | os.PathLike[str],
    kind: str,
    *,
    rows: int | None = None,
    choose: Callable[[dict[str, tuple[tuple[int, ...], np.dtype[Any]]]], dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The datasets at the root of an HDF5 file that is not a ``.nir`` file (the CLI's
    input spikes), read through the same checks as :func:`nirbridge.read`.

    Groups are skipped; links other than hard links, external or virtual storage and
    filter plugins are refused. ``choose({name: (shape, dtype)})`` sees the datasets
    before any is read and returns ``{key: dataset name}`` of those to read, which come
    back under their keys (or raises, for what would not fit in memory); without it,
    every dataset comes back under its name. With ``rows``, only the first ``rows``
    entries along each dataset's first axis are read.
    """
    where = os.fspath(path)
    opened = Source(path, where, kind)
    try:
        reader = Reader(where, opened)
        root = h5g.open(opened.fid, b"/")
        members = {
            name: (sub, obj) for name, sub, obj in reader.members(root, "") if isinstance(obj, h5d.DatasetID)
        }
        chosen = {name: name for name in members}
        if choose is not None:
            chosen = choose({name: (tuple(obj.shape or ()), obj.dtype) for name, (_, obj) in members.items()})
        return {key: reader.dataset(members[name][1], members[name][0], rows) for key, name in chosen.items()}
    except NirBridgeError:
        raise
    except MemoryError as error:
        raise out_of_memory(where) from error
    except (OSError, RuntimeError, KeyError, ValueError) as error:
        raise NirFileError(
            f"{where}: cannot read as {kind}; it is corrupted ({type(error).__name__}: {error})"
        ) from None
    finally:
        opened.close()

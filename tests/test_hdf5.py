"""nirbridge.hdf5, the one hardened HDF5 reader: every path that opens HDF5 (read,
read_data, the CLI's info and --input) refuses what reads other files or runs code,
and bounds memory before it is spent."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import tracemalloc
import uuid

import h5py
import nir
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nirbridge
from nirbridge.cli import main
from nirbridge.hdf5 import read_datasets
from tests.conftest import EXAMPLES

BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
SECRET = b"root:x:0:0:the secret nobody asked nirbridge to read\n" * 8


def _external(group: h5py.Group, name: str, secret: str) -> None:
    group.create_dataset(name, shape=(len(SECRET),), dtype="u1", external=[(secret, 0, len(SECRET))])


def _virtual(group: h5py.Group, name: str, secret: str) -> None:
    other = secret + ".h5"
    with h5py.File(other, "w") as f:
        f["data"] = np.frombuffer(SECRET, np.uint8)
    layout = h5py.VirtualLayout(shape=(len(SECRET),), dtype="u1")
    layout[:] = h5py.VirtualSource(other, "data", shape=(len(SECRET),))
    group.create_virtual_dataset(name, layout)


def _external_link(group: h5py.Group, name: str, secret: str) -> None:
    other = secret + ".link.h5"
    with h5py.File(other, "w") as f:
        f["data"] = np.frombuffer(SECRET, np.uint8)
    group[name] = h5py.ExternalLink(other, "/data")


def _plugin(group: h5py.Group, name: str, secret: str) -> None:
    group.create_dataset(name, data=np.zeros(8), chunks=(8,), compression=307, allow_unknown_filter=True)


HOSTILE = {
    "external storage": (_external, "keeps its data in external files"),
    "virtual dataset": (_virtual, "virtual dataset"),
    "external link": (_external_link, "soft or external link"),
    "filter plugin": (_plugin, "filter 307"),
}


def _spikes_file(path: str, construct: str, secret: str, depth: int) -> str:
    """Input spikes for the Braille network with a hostile dataset as the 'input'."""
    with h5py.File(path, "w") as f:
        group = f
        for level in range(depth):  # hostile members below a group are skipped, not read
            group = group.create_group(f"g{level}")
        HOSTILE[construct][0](group, "input", secret)
    return path


def _nir_file(path: str, construct: str, secret: str, depth: int) -> str:
    """A valid .nir file with a hostile dataset planted ``depth`` groups into its node."""
    graph = nir.NIRGraph.from_list(
        nir.Input(np.array([3])), nir.LIF(*(np.ones(3),) * 4), nir.Output(np.array([3]))
    )
    nirbridge.write(path, graph)
    with h5py.File(path, "r+") as f:
        group = f["node/nodes"][sorted(f["node/nodes"])[0]]
        group = group.require_group("metadata")
        for level in range(depth):
            group = group.create_group(f"g{level}")
        HOSTILE[construct][0](group, "planted", secret)
    return path


def _data_file(path: str, construct: str, secret: str, depth: int) -> str:
    data = nir.NIRGraphData(
        {"lif": nir.NIRNodeData({"spikes": nir.TimeGriddedData(np.zeros((1, 4, 3), np.float32), 1e-3)})}
    )
    nirbridge.write_data(path, data)
    with h5py.File(path, "r+") as f:
        group = f["nodes/lif/observables/spikes"]
        for level in range(depth):
            group = group.create_group(f"g{level}")
        HOSTILE[construct][0](group, "planted", secret)
    return path


def _read(path: str) -> str:
    with pytest.raises(nirbridge.NirFileError) as info:
        nirbridge.read(path)
    return str(info.value)


def _read_object(path: str) -> str:
    with open(path, "rb") as file, pytest.raises(nirbridge.NirFileError) as info:
        nirbridge.read(file)
    return str(info.value)


def _read_data(path: str) -> str:
    with pytest.raises(nirbridge.NirFileError) as info:
        nirbridge.read_data(path)
    return str(info.value)


def _info(path: str) -> str:
    result = CliRunner().invoke(main, ["info", path])
    assert result.exit_code == 1, result.output
    return result.output


def _input(path: str) -> str:
    result = CliRunner().invoke(main, ["run", str(BRAILLE), "--dt", "1e-4", "--input", path, "--steps", "4"])
    assert result.exit_code == 1, result.output
    return result.output


PATHS = {
    "read": (_nir_file, _read),
    "read a file object": (_nir_file, _read_object),
    "read_data": (_data_file, _read_data),
    "info": (_nir_file, _info),
    "run --input": (_spikes_file, _input),
}


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    construct=st.sampled_from(sorted(HOSTILE)),
    entry=st.sampled_from(sorted(PATHS)),
    depth=st.integers(0, 3),
)
def test_every_path_that_opens_hdf5_refuses_what_reads_other_files_or_runs_code(
    tmp_path, construct, entry, depth
):
    """The CLI's --input used to open its file with plain h5py: external raw storage
    turned /etc/passwd into input spikes, and --out copied it into the recording."""
    folder = tmp_path / uuid.uuid4().hex
    folder.mkdir()
    secret = folder / "passwd"
    secret.write_bytes(SECRET)
    make, open_it = PATHS[entry]
    if entry == "run --input":
        depth = 0  # the spikes must be at the root, where the Input's dataset is looked for
    path = make(str(folder / "file.h5"), construct, str(secret), depth)
    message = open_it(path)
    assert HOSTILE[construct][1] in message, message
    assert "nobody asked" not in message, message


def test_spikes_from_a_hostile_file_never_reach_the_recording(tmp_path):
    secret = tmp_path / "passwd"
    secret.write_bytes(SECRET)
    spikes = _spikes_file(str(tmp_path / "spikes.h5"), "external storage", str(secret), 0)
    out = tmp_path / "out.h5"
    result = CliRunner().invoke(
        main, ["run", str(BRAILLE), "--dt", "1e-4", "--input", spikes, "--out", str(out)]
    )
    assert result.exit_code == 1 and "external files" in result.output
    assert not out.exists()


def test_a_nir_file_given_as_input_spikes_is_called_one(tmp_path):
    result = CliRunner().invoke(main, ["run", str(BRAILLE), "--dt", "1e-4", "--input", str(BRAILLE)])
    assert result.exit_code == 1
    assert "is a .nir file" in result.output and "not input spikes" in result.output


def test_input_spikes_read_only_the_rows_asked_for(tmp_path):
    rng = np.random.default_rng(0)
    spikes = rng.random((50, 2, 12)) < 0.3
    path = tmp_path / "spikes.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("input", data=spikes, chunks=(5, 2, 12), compression="gzip")
        f.create_group("notes")  # groups are skipped
    seen = {}

    def choose(found):
        seen.update(found)
        return {"spikes": "input"}

    got = read_datasets(path, "spikes", rows=7, choose=choose)
    assert seen == {"input": ((50, 2, 12), np.dtype(bool))}
    np.testing.assert_array_equal(got["spikes"], spikes[:7])
    np.testing.assert_array_equal(read_datasets(path, "spikes")["input"], spikes)


def test_devices_and_endless_file_objects_are_refused(tmp_path, monkeypatch):
    with open("/dev/zero", "rb") as zero, pytest.raises(nirbridge.NirFileError, match="character device"):
        nirbridge.read(zero)
    monkeypatch.setattr(nirbridge.hdf5, "_STREAM_LIMIT", 1 << 20)
    read_end, write_end = os.pipe()

    def flood() -> None:
        try:
            with os.fdopen(write_end, "wb") as sink:
                for _ in range(4):
                    sink.write(b"\0" * (1 << 20))
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=flood)
    writer.start()
    with os.fdopen(read_end, "rb") as pipe, pytest.raises(nirbridge.NirFileError, match="without ending"):
        nirbridge.read(pipe)
    writer.join()
    with open(BRAILLE, "rb") as file:  # a finite file object still reads
        assert isinstance(nirbridge.read(file), nir.NIRGraph)


def test_fixed_width_strings_are_charged_before_they_are_decoded(tmp_path):
    """A 35 KB file of one-byte strings used to cost 430 MB: one Python string per
    element, outside the reader's budget."""
    path = tmp_path / "strings.nir"
    nirbridge.write(path, nir.NIRGraph.from_list(nir.Input(np.array([3])), nir.Output(np.array([3]))))
    with h5py.File(path, "r+") as f:
        group = f["node/nodes/input"].require_group("metadata")
        group.create_dataset("names", shape=(8_000_000,), dtype="S1", chunks=(1 << 20,), compression="gzip")
        group["names"][:] = np.full(8_000_000, b"a", dtype="S1")
    assert os.path.getsize(path) < 100_000
    tracemalloc.start()
    try:
        with pytest.raises(nirbridge.NirFileError, match="would take .* bytes of memory"):
            nirbridge.read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, peak


def test_running_out_of_memory_while_reading_is_not_called_a_corrupted_file(tmp_path):
    """Any MemoryError while reading used to be reported as a corrupted file."""
    path = tmp_path / "big.nir"
    graph = nir.NIRGraph.from_list(
        nir.Input(np.array([4096])), nir.Linear(np.zeros((4096, 4096))), nir.Output(np.array([4096]))
    )
    nirbridge.write(path, graph)  # 128 MiB of float64 weights
    script = f"""
import resource, nirbridge
nirbridge.read  # nirbridge imports on first use: its modules (torch, numpy) are in before the limit
size = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (32 << 20), resource.RLIM_INFINITY))
try:
    nirbridge.read({str(path)!r})
except nirbridge.MemoryLimitError as error:
    print("MemoryLimitError", error)
except nirbridge.NirBridgeError as error:
    print("other", type(error).__name__, error)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.stdout.startswith("MemoryLimitError"), result.stdout + result.stderr
    assert "ran out of memory while reading it" in result.stdout and "corrupted" not in result.stdout


def test_fill_value_strings_and_oversized_chunks_are_refused_before_hdf5_allocates(tmp_path):
    """A 285 KB file of unwritten variable-length strings with a long fill value cost
    1.9 GiB; a chunk far larger than its dataset's extent, 1.2-1.9 GiB."""
    fill = tmp_path / "fill.nir"
    fill.write_bytes(BRAILLE.read_bytes())
    with h5py.File(fill, "a") as f:
        f["node/nodes/fc1"].create_dataset(
            "bomb", shape=(4000,), dtype=h5py.string_dtype(), fillvalue="A" * 250_000
        )
    with pytest.raises(nirbridge.NirFileError, match="variable-length strings it never wrote"):
        nirbridge.read(fill)
    chunks = tmp_path / "chunks.nir"
    chunks.write_bytes(BRAILLE.read_bytes())
    with h5py.File(chunks, "a") as f:
        del f["node/nodes/fc1/weight"]
        f.create_dataset(
            "node/nodes/fc1/weight",
            shape=(38, 12),
            maxshape=(None, None),
            dtype="f4",
            chunks=(16000, 16000),
            compression="gzip",
        )
        f["node/nodes/fc1/weight"][...] = 1
    with pytest.raises(nirbridge.NirFileError, match="in chunks of 1024000000 bytes"):
        nirbridge.read(chunks)


def test_metadata_nested_deeper_than_write_allows_is_refused_on_reading(tmp_path):
    """read accepted metadata 20 dicts deep that write refuses, so a file read could not be written back."""
    path = tmp_path / "deep.nir"
    path.write_bytes(BRAILLE.read_bytes())
    with h5py.File(path, "a") as f:
        f.create_group("node/metadata/" + "/".join(["m"] * 20))
    with pytest.raises(nirbridge.NirFileError, match="metadata nests more than 16 dicts deep"):
        nirbridge.read(path)
    complex_dt = tmp_path / "complex_dt.nir"
    complex_dt.write_bytes(BRAILLE.read_bytes())
    with h5py.File(complex_dt, "a") as f:
        f["node/metadata/dt"] = 1e-4 + 1j
    with pytest.raises(nirbridge.ParameterError, match="dt must be a positive, finite number of seconds"):
        nirbridge.nir_to_torch(complex_dt)  # was run at the real part, with numpy's ComplexWarning only

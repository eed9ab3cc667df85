"""nirbridge.data against the real nir package: both directions, real files, hostile files.

Equality is checked field by field on nir's data classes: arrays exactly with their
dtypes, ``dt``/``t_max`` as floats, ``n_neurons`` as an int, and node and observable
order (name order where ``nir.write_data`` wrote the file, as HDF5 then lists it).
"""

from __future__ import annotations

import faulthandler
import inspect
import io
import math
import os
import random
import sys
import warnings

import h5py
import nir
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nirbridge
from nirbridge.data import read_data, write_data
from tests.test_io import corrupt

Data = nir.NIRGraphData | nir.NIRNodeData | nir.TimeGriddedData | nir.EventData


def assert_same(expected: Data, got: Data, *, order: bool = True, path: str = "") -> None:
    assert type(got) is type(expected), (path, type(got), type(expected))
    if isinstance(expected, (nir.NIRGraphData, nir.NIRNodeData)):
        want = expected.nodes if isinstance(expected, nir.NIRGraphData) else expected.observables
        have = got.nodes if isinstance(got, nir.NIRGraphData) else got.observables
        assert list(have) == (list(want) if order else sorted(want)), path
        for name in want:
            assert_same(want[name], have[name], order=order, path=f"{path}/{name}")
        return
    if isinstance(expected, nir.TimeGriddedData):
        fields = {"data": (expected.data, got.data)}
        assert type(got.dt) is float and got.dt == expected.dt, path
    else:
        names = ("idx", "time", "value") if isinstance(expected, nir.ValuedEventData) else ("idx", "time")
        fields = {name: (getattr(expected, name), getattr(got, name)) for name in names}
        assert type(got.n_neurons) is int and got.n_neurons == expected.n_neurons, path
        assert type(got.t_max) is float and got.t_max == expected.t_max, path
    for name, (want, have) in fields.items():
        assert isinstance(have, np.ndarray), (path, name)
        assert have.dtype == np.asarray(want).dtype and have.shape == np.shape(want), (path, name)
        np.testing.assert_array_equal(have, want, err_msg=f"{path}: {name}")


def events(rng: np.random.Generator, samples: int, count: int, neurons: int, valued: bool = False):
    idx = rng.integers(-1, neurons, size=(samples, count))
    time = np.where(idx >= 0, rng.uniform(0, 1, size=idx.shape), np.inf)
    if valued:
        return nir.ValuedEventData(idx, time, neurons, 1.0, rng.normal(size=idx.shape).astype(np.float32))
    return nir.EventData(idx, time, neurons, 1.0)


def flat_data() -> nir.NIRGraphData:
    """Every observable type, bool and float data, empty nodes and arrays; not in name order."""
    rng = np.random.default_rng(7)
    return nir.NIRGraphData(
        nodes={
            "lif": nir.NIRNodeData(
                observables={
                    "spikes": nir.TimeGriddedData(rng.random((2, 5, 4)) > 0.5, dt=1e-3),
                    "v": nir.TimeGriddedData(rng.normal(size=(2, 5, 4)).astype(np.float32), dt=1e-3),
                    "events": events(rng, 2, 6, 4),
                }
            ),
            "fc": nir.NIRNodeData(observables={"valued": events(rng, 3, 2, 5, valued=True)}),
            "input": nir.NIRNodeData(observables={}),
            "empty": nir.NIRNodeData(
                observables={
                    "no_steps": nir.TimeGriddedData(np.zeros((1, 0, 3)), dt=0.5),
                    "no_events": nir.EventData(np.zeros((2, 0), np.int64), np.zeros((2, 0)), 3, 2.0),
                }
            ),
        }
    )


def nested_data() -> nir.NIRGraphData:
    rng = np.random.default_rng(8)
    inner = nir.NIRGraphData(
        nodes={
            "lif": nir.NIRNodeData({"spikes": nir.TimeGriddedData(rng.random((1, 4, 3)) > 0.3, dt=1e-4)}),
            "deeper": nir.NIRGraphData(nodes={"li": nir.NIRNodeData({"v": events(rng, 1, 3, 2, True)})}),
            "nothing": nir.NIRGraphData(nodes={}),
        }
    )
    return nir.NIRGraphData(nodes={"out": nir.NIRNodeData({"v": events(rng, 1, 2, 3)}), "block": inner})


def write_like_nir(path, data: nir.NIRGraphData) -> None:
    """nir 1.0.8's ``write_data`` with h5py as it does it, its nested-graph bug fixed:
    its ``_write_graph_data`` iterates the outermost graph's nodes at every level."""

    def graph(group: h5py.Group, graph_data: nir.NIRGraphData) -> None:
        group.attrs["__type__"] = "NIRGraphData"
        nodes = group.create_group("nodes")
        for name, node in graph_data.nodes.items():
            if isinstance(node, nir.NIRGraphData):
                graph(nodes.create_group(name), node)
                continue
            g = nodes.create_group(name)
            g.attrs["__type__"] = "NIRNodeData"
            observables = g.create_group("observables")
            for obs_name, obs in node.observables.items():
                o = observables.create_group(obs_name)
                o.attrs["__type__"] = type(obs).__name__
                if isinstance(obs, nir.TimeGriddedData):
                    o.create_dataset("data", data=obs.data, compression="gzip")
                    o.attrs["dt"] = obs.dt
                    continue
                for field in (
                    ("idx", "time", "value") if isinstance(obs, nir.ValuedEventData) else ("idx", "time")
                ):
                    o.create_dataset(field, data=getattr(obs, field), compression="gzip")
                o.attrs["n_neurons"] = obs.n_neurons
                o.attrs["t_max"] = obs.t_max

    with h5py.File(path, "w") as f:
        graph(f, data)


# ----------------------------------------------------------------------------- both directions


def test_flat_data_round_trips_both_ways_with_nir(tmp_path):
    data = flat_data()
    write_data(tmp_path / "ours.h5", data)
    assert_same(data, read_data(tmp_path / "ours.h5"))
    assert_same(data, nir.read_data(tmp_path / "ours.h5"))  # h5py lists tracked creation order
    nir.write_data(tmp_path / "theirs.h5", data)
    assert_same(data, read_data(tmp_path / "theirs.h5"), order=False)
    assert list(read_data(tmp_path / "theirs.h5").nodes) == ["empty", "fc", "input", "lif"]


def test_numbers_of_any_numeric_type_are_stored_as_nir_stores_python_numbers(tmp_path):
    data = nir.NIRGraphData(
        {
            "n": nir.NIRNodeData(
                {
                    "v": nir.TimeGriddedData(np.zeros((1, 2, 2)), dt=np.array(np.float32(0.1))),
                    "e": nir.EventData(np.zeros((1, 1), int), np.zeros((1, 1)), np.uint8(3), 2),
                }
            )
        }
    )
    write_data(tmp_path / "d.h5", data)
    for back in (read_data(tmp_path / "d.h5"), nir.read_data(tmp_path / "d.h5")):
        assert back.nodes["n"].observables["v"].dt == float(np.float32(0.1))
        assert (back.nodes["n"].observables["e"].n_neurons, back.nodes["n"].observables["e"].t_max) == (
            3,
            2.0,
        )
    with h5py.File(tmp_path / "d.h5") as f:
        assert f["nodes/n/observables/v"].attrs["dt"].dtype == np.float64
        assert f["nodes/n/observables/e"].attrs["n_neurons"].dtype == np.int64


def test_nested_graph_data_round_trips_both_ways_with_nir(tmp_path):
    data = nested_data()
    write_data(tmp_path / "ours.h5", data)
    assert_same(data, read_data(tmp_path / "ours.h5"))
    assert_same(data, nir.read_data(tmp_path / "ours.h5"))
    write_like_nir(tmp_path / "theirs.h5", data)
    assert_same(data, nir.read_data(tmp_path / "theirs.h5"), order=False)
    assert_same(data, read_data(tmp_path / "theirs.h5"), order=False)


def test_nir_write_data_cannot_write_nested_graph_data(tmp_path):
    # the trap write_like_nir works around: nir 1.0.8 recurses into the same nodes forever
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 200)  # fail fast; h5py's default is ~330 levels
    try:
        with pytest.raises(RecursionError):
            nir.write_data(tmp_path / "nested.h5", nested_data())
    finally:
        sys.setrecursionlimit(limit)


def test_large_arrays_read_back_whole_compressed_or_not(tmp_path):
    rng = np.random.default_rng(9)
    data = nir.NIRGraphData(
        nodes={
            "lif": nir.NIRNodeData(
                {
                    "v": nir.TimeGriddedData(rng.normal(size=(4, 1000, 100)), dt=1e-4),
                    "spikes": nir.TimeGriddedData(rng.random((4, 1000, 300)) > 0.9, dt=1e-4),
                }
            )
        }
    )
    for compression in (None, "gzip"):
        write_data(tmp_path / "big.h5", data, compression=compression)
        assert_same(data, read_data(tmp_path / "big.h5"))
    nir.write_data(tmp_path / "theirs.h5", data)
    assert_same(data, read_data(tmp_path / "theirs.h5"), order=False)


def test_a_user_block_before_the_data_is_allowed(tmp_path):
    # HDF5 addresses count from the end of the user block; the header and heap checks must too
    expected = nir.NIRGraphData(
        {"lif": nir.NIRNodeData({"spikes": nir.TimeGriddedData(np.eye(3, dtype=bool)[None], 0.25)})}
    )
    with h5py.File(tmp_path / "block.h5", "w", userblock_size=1024) as f:
        f.attrs["__type__"] = "NIRGraphData"
        node = f.create_group("nodes/lif")
        node.attrs["__type__"] = "NIRNodeData"
        spikes = node.create_group("observables/spikes")
        spikes.attrs["__type__"] = "TimeGriddedData"
        spikes.attrs["dt"] = 0.25
        spikes.create_dataset("data", data=np.eye(3, dtype=bool)[None])
    assert_same(expected, read_data(tmp_path / "block.h5"))


names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"), min_size=1, max_size=6
).filter(lambda name: name != ".")
dtypes = st.sampled_from([np.bool_, np.int8, np.int64, np.uint16, np.float32, np.float64])
reals = st.floats(min_value=1e-6, max_value=1e3)


@st.composite
def observables(draw) -> nir.TimeGriddedData | nir.EventData:
    kind = draw(st.sampled_from(["gridded", "events", "valued"]))
    if kind == "gridded":
        shape = draw(hnp.array_shapes(min_dims=3, max_dims=3, min_side=0, max_side=4))
        return nir.TimeGriddedData(draw(hnp.arrays(draw(dtypes), shape)), dt=draw(reals))
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=5))
    n_neurons, t_max = draw(st.integers(0, 10)), draw(reals)
    index_type = draw(st.sampled_from([np.int64, np.int8, np.uint16]))
    idx = draw(hnp.arrays(np.int64, shape, elements=st.integers(-1, n_neurons - 1)))
    if index_type is np.uint16:  # unsigned indices cannot pad with -1
        idx = np.abs(idx) % max(n_neurons, 1) if n_neurons else idx[:, :0]
        shape = idx.shape
    idx = idx.astype(index_type)
    fraction = draw(hnp.arrays(np.float64, shape, elements=st.floats(0, 1)))
    padding = draw(st.sampled_from([np.inf, -np.inf, 0.0, -1.0]))  # nir pads with inf; any but nan is padding
    time = np.where(idx >= 0, fraction * t_max, padding).astype(
        draw(st.sampled_from([np.float32, np.float64]))
    )
    if kind == "events":
        return nir.EventData(idx, time, n_neurons, t_max)
    return nir.ValuedEventData(idx, time, n_neurons, t_max, draw(hnp.arrays(draw(dtypes), shape)))


def graph_data(depth: int = 2) -> st.SearchStrategy[nir.NIRGraphData]:
    node = st.builds(nir.NIRNodeData, st.dictionaries(names, observables(), max_size=3))
    child = st.one_of(node, graph_data(depth - 1)) if depth else node
    return st.builds(nir.NIRGraphData, st.dictionaries(names, child, max_size=3))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=graph_data())
def test_random_data_round_trips_both_ways_with_nir(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("random")
    write_data(folder / "ours.h5", data)
    assert_same(data, read_data(folder / "ours.h5"))
    assert_same(data, nir.read_data(folder / "ours.h5"))
    write_like_nir(folder / "theirs.h5", data)
    assert_same(data, read_data(folder / "theirs.h5"), order=False)
    buffer = io.BytesIO()
    write_data(buffer, data, compression="lzf")
    assert_same(data, read_data(buffer))


# ----------------------------------------------------------------------------- writing


def test_same_data_same_bytes_and_compression_options(tmp_path):
    data = flat_data()
    write_data(tmp_path / "a.h5", data)
    write_data(tmp_path / "b.h5", nested_data())
    write_data(tmp_path / "b.h5", data)
    buffer = io.BytesIO()
    write_data(buffer, data)
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes() == buffer.getvalue()
    big = nir.NIRGraphData({"n": nir.NIRNodeData({"v": nir.TimeGriddedData(np.zeros((2, 64, 64)), dt=1.0)})})
    for compression, code in (("gzip", "gzip"), ("lzf", "lzf"), (1, "gzip"), (None, None)):
        write_data(tmp_path / "c.h5", big, compression=compression)
        with h5py.File(tmp_path / "c.h5") as f:
            assert f["nodes/n/observables/v/data"].compression == code
        assert_same(big, read_data(tmp_path / "c.h5"))
        assert_same(big, nir.read_data(tmp_path / "c.h5"))
    for bad in ("zip", 12, True):
        with pytest.raises(nirbridge.NirFileError, match="compression="):
            write_data(tmp_path / "d.h5", big, compression=bad)


def test_file_objects_both_ways(tmp_path):
    data = nested_data()
    with open(tmp_path / "f.h5", "w+b") as handle:
        handle.write(b"stale bytes that must not survive" * 1000)
        write_data(handle, data)
        assert_same(data, read_data(handle))
    assert_same(data, nir.read_data(tmp_path / "f.h5"))
    with open(tmp_path / "f.h5", "rb") as handle:
        assert_same(data, read_data(handle))
    with open(tmp_path / "f.h5") as handle, pytest.raises(nirbridge.NirFileError, match="binary mode"):
        read_data(handle)
    with pytest.raises(nirbridge.NirFileError, match="binary mode"):
        write_data(io.StringIO(), data)
    with pytest.raises(nirbridge.NirFileError, match="write_data expects a path or a binary file object"):
        write_data(42, data)
    with pytest.raises(nirbridge.NirFileError, match="path or a binary file object"):
        read_data(42)


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "d.h5"
    write_data(path, flat_data())
    before = path.read_bytes()
    bad = flat_data()  # fails at its last node, after the others were written
    bad.nodes["late"] = nir.NIRNodeData({"v": nir.TimeGriddedData(np.zeros((1, 2, 3)), dt=1.0)})
    bad.nodes["late"].observables["v"].data = np.array([[["a", "b"]]], dtype=object)
    with pytest.raises(nirbridge.NirFileError) as info:
        write_data(path, bad)
    message = str(info.value)
    assert str(path) in message and "observable 'v' of node 'late'" in message and "numbers" in message
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["d.h5"]
    with pytest.raises(nirbridge.NirFileError, match="cannot write in folder"):
        write_data(tmp_path / "no" / "such" / "folder.h5", flat_data())


def gridded(data) -> nir.TimeGriddedData:
    observable = nir.TimeGriddedData(np.zeros((1, 1, 1)), dt=1.0)
    observable.data = data  # nir checks the shape only when built
    return observable


def bad_data() -> list[tuple[object, str]]:
    def graph(observable) -> nir.NIRGraphData:
        return nir.NIRGraphData({"block": nir.NIRGraphData({"lif": nir.NIRNodeData({"v": observable})})})

    mismatched = events(np.random.default_rng(1), 2, 3, 4)
    mismatched.time = np.zeros((2, 4))
    return [
        ({"nodes": {}}, "write_data expects a nir.NIRGraphData, got dict"),
        (nir.NIRNodeData({}), r"got NIRNodeData; wrap it as nir.NIRGraphData\(nodes="),
        (
            nir.NIRGraphData({"x": np.zeros(3)}),
            r"node 'x' is a ndarray; NIRGraphData.nodes holds nir.NIRNodeData",
        ),
        (graph(np.zeros((1, 2, 3))), r"observable 'v' of node 'block.lif' is a ndarray; observables are"),
        (
            graph(gridded(np.zeros((2, 3)))),
            r"observable 'v' of node 'block.lif': data has shape \(2, 3\); .*3-D",
        ),
        (graph(mismatched), r"'v' of node 'block.lif': idx, time must have one shape"),
        (
            graph(nir.TimeGriddedData(np.zeros((1, 1, 1)), dt="1ms")),
            r"node 'block.lif': dt is '1ms'.*real number",
        ),
        (
            graph(nir.EventData(np.zeros((1, 1)), np.zeros((1, 1)), 2.5, 1.0)),
            "n_neurons is 2.5.*whole number",
        ),
        (graph(nir.EventData(np.zeros((1, 1)), np.zeros((1, 1)), 2**70, 1.0)), "n_neurons is .*64-bit"),
        (graph(nir.EventData(np.zeros((1, 1)), np.zeros((1, 1)), 2, True)), r"t_max is True \(bool\)"),
        (nir.NIRGraphData({"a/b": nir.NIRNodeData({})}), "node 'a/b': HDF5 names"),
        (nir.NIRGraphData({1: nir.NIRNodeData({})}), r"node name 1 \(int\) in the root is not a string"),
        (
            nir.NIRGraphData({"n": nir.NIRNodeData({"": gridded(np.zeros((1, 1, 1)))})}),
            "observable '': HDF5 names",
        ),
        (
            nir.NIRGraphData({"n": nir.NIRNodeData({"v": gridded(np.array([[[None]]]))})}),
            "holds arrays of numbers",
        ),
        *[(graph(observable), message) for observable, message in meaningless_observables()],
        (
            nir.NIRGraphData({"\ud800": nir.NIRNodeData({})}),
            r"node '\\ud800': the name holds a lone surrogate",
        ),
        (
            graph(nir.EventData(np.zeros((1, 1)), np.zeros((1, 1)), 10**5000, 1.0)),
            r"n_neurons is an integer of 16610 bits \(int\); store a whole number \(64-bit\)",
        ),
    ]


def event_data(idx, time, n_neurons=4, t_max=1.0, value=None) -> nir.EventData:
    """EventData holding whatever it is given (nir checks only that the shapes agree, when built)."""
    observable = nir.EventData(np.zeros((1, 1), int), np.zeros((1, 1)), 1, 1.0)
    if value is not None:
        observable = nir.ValuedEventData(np.zeros((1, 1), int), np.zeros((1, 1)), 1, 1.0, np.zeros((1, 1)))
        observable.value = np.asarray(value)
    observable.idx, observable.time = np.asarray(idx), np.asarray(time)
    observable.n_neurons, observable.t_max = n_neurons, t_max
    return observable


def meaningless_observables() -> list[tuple[object, str]]:
    """(observable, message) for values nir's data classes give no meaning to."""
    zeros = np.zeros((1, 2, 2))
    one = np.array([[1]])
    nan_dt = "dt is {}; the time step is a finite number of seconds > 0"
    index = r"idx at \[0, 0\] is {}; an event's index is {}, and -1 marks"
    return [
        *[
            (nir.TimeGriddedData(zeros, dt), nan_dt.format(text))
            for dt, text in ((np.nan, "nan"), (0, "0.0"), (-1e-3, "-0.001"), (np.inf, "inf"))
        ],
        (nir.TimeGriddedData(zeros, True), r"dt is True \(bool\); store a real number"),
        (
            gridded(zeros.astype(complex)),
            r"data has dtype complex128; data holds bools \(spikes\) or real numbers",
        ),
        (event_data([[-2]], [[0.5]]), index.format(-2, r"0 to n_neurons - 1 \(3\)")),
        (event_data([[4]], [[0.5]]), index.format(4, r"0 to n_neurons - 1 \(3\)")),
        (event_data([[0]], [[0.5]], n_neurons=0), index.format(0, r"none \(n_neurons is 0\)")),
        (event_data([[1.0]], [[0.5]]), "idx has dtype float64; idx holds integers .* idx.astype"),
        (event_data([[True]], [[0.5]]), "idx has dtype bool; idx holds integers"),
        (event_data(one, [[True]]), "time has dtype bool; time holds real numbers"),
        (event_data(one, [[0.5j]]), "time has dtype complex128; time holds real numbers"),
        (
            event_data(one, [[0.5]], value=[[1j]]),
            "value has dtype complex128; value holds bools or real numbers",
        ),
        (event_data(one, [["0.5"]]), "time is a ndarray of dtype <U3; NIR data holds arrays of numbers"),
        (
            event_data(one, [[0.5]], n_neurons=-1),
            "n_neurons is -1; it counts the neurons .* from 0 to 2\\*\\*63 - 1",
        ),
        (event_data(one, [[0.5]], n_neurons=1e300), r"n_neurons is 1e\+300; store a whole number \(64-bit\)"),
        (event_data(one, [[0.5]], n_neurons=True), r"n_neurons is True \(bool\)"),
        *[
            (
                event_data(one, [[0.5]], t_max=t_max),
                f"t_max is {text}; it is the recording's length: a finite number",
            )
            for t_max, text in ((np.nan, "nan"), (np.inf, "inf"), (-1, "-1.0"))
        ],
        (event_data(one, [[np.nan]]), r"time at \[0, 0\] is nan \(neuron 1\); an event's time is in seconds"),
        (event_data([[-1]], [[np.nan]]), r"time at \[0, 0\] is nan \(padding, idx -1\)"),
        (
            event_data(one, [[-0.5]]),
            r"time at \[0, 0\] is -0.5 \(neuron 1\); event times are seconds from the start",
        ),
        (
            event_data([[1, 2]], [[0.5, 2.0]]),
            r"time at \[0, 1\] is 2.0 \(neuron 2\); after t_max \(1.0\); raise t_max",
        ),
        (event_data(one, [[np.inf]]), r"time at \[0, 0\] is inf \(neuron 1\); after t_max"),
        (
            event_data([1], [0.5]),
            r"idx, time have shape \(1,\); EventData holds 2-D arrays \(n_samples, n_events\)",
        ),
        (event_data(1, 0.5), r"idx, time have shape \(\); EventData holds 2-D arrays"),
        (event_data([[[1]]], [[[0.5]]], value=[[[0.5]]]), r"idx, time, value have shape \(1, 1, 1\)"),
        (event_data(one, [[0.5]], value=[[0.5, 1.0]]), "idx, time, value must have one shape"),
    ]


def test_bad_data_objects_are_refused_naming_where_and_what_to_do(tmp_path):
    for data, message in bad_data():
        with pytest.raises(nirbridge.NirFileError, match=message) as info:
            write_data(tmp_path / "d.h5", data)
        assert "d.h5" in str(info.value) or "expects" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_observables_of_a_subclass_are_stored_as_nirs_type_with_a_warning(tmp_path):
    class Spikes(nir.EventData):
        pass

    data = nir.NIRGraphData(
        {"n": nir.NIRNodeData({"s": Spikes(np.zeros((1, 2), int), np.ones((1, 2)), 2, 1.0)})}
    )
    with pytest.warns(
        nirbridge.LossyConversionWarning, match="'s' of node 'n' is a Spikes; it is stored as EventData"
    ):
        write_data(tmp_path / "d.h5", data)
    assert type(read_data(tmp_path / "d.h5").nodes["n"].observables["s"]) is nir.EventData


# ----------------------------------------------------------------------------- reading


def hostile_files(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (path, text the error must hold: the group at fault, or why where no group is)."""
    valid = tmp_path / "valid.h5"
    write_data(valid, flat_data())
    spikes = "nodes/lif/observables/spikes"
    files = {}

    def variant(name, edit, group):
        path = tmp_path / f"{name}.h5"
        path.write_bytes(valid.read_bytes())
        with h5py.File(path, "r+") as f:
            edit(f)
        files[name] = (str(path), group)

    def replace_data(f, **kwargs):
        del f[spikes]["data"]
        f[spikes].create_dataset("data", **kwargs)

    def deep(f):
        group = f["nodes"]
        for i in range(50):
            group = group.create_group(f"g{i}")
            group.attrs["__type__"] = "NIRGraphData"
            group = group.create_group("nodes")

    def set_attr(name, value, where=spikes):
        def edit(f):
            f[where].attrs[name] = value

        return edit

    def delete(where, attribute=None):
        def edit(f):
            if attribute:
                del f[where].attrs[attribute]
            else:
                del f[where]

        return edit

    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.ones(10).tobytes())
    layout = h5py.VirtualLayout(shape=(1, 5, 2), dtype="f8")
    layout[:] = h5py.VirtualSource(str(valid), f"{spikes}/data", shape=(1, 5, 2))
    cases = [
        (
            "external_link",
            lambda f: f["nodes"].__setitem__("x", h5py.ExternalLink(str(valid), "/nodes/lif")),
            "nodes/x",
        ),
        (
            "soft_link",
            lambda f: f["nodes/lif"].__setitem__("loop", h5py.SoftLink("/nodes")),
            "nodes/lif/loop",
        ),
        ("cycle", lambda f: f["nodes/lif"].__setitem__("again", f["nodes"]), "nodes/lif/again"),
        (
            "huge",
            lambda f: replace_data(f, shape=(10**6, 10**3, 10**3), chunks=(1, 64, 64), dtype="f8"),
            spikes,
        ),
        (
            "external_storage",
            lambda f: replace_data(f, shape=(1, 5, 2), dtype="f8", external=[(str(raw), 0, 80)]),
            spikes,
        ),
        (
            "unknown_filter",
            lambda f: replace_data(
                f, data=np.ones((1, 2, 2)), chunks=(1, 2, 2), compression=307, allow_unknown_filter=True
            ),
            spikes,
        ),
        (
            "virtual",
            lambda f: f[spikes].__delitem__("data") or f[spikes].create_virtual_dataset("data", layout),
            spikes,
        ),
        ("deep", deep, "groups nested deeper than"),
        ("unknown_observable", set_attr("__type__", "SpikeTrain"), f"{spikes}: has __type__ 'SpikeTrain'"),
        ("unknown_node", set_attr("__type__", "NIRThing", "nodes/lif"), "nodes/lif: has __type__ 'NIRThing'"),
        ("no_type", delete("nodes/fc", "__type__"), "nodes/fc: has no __type__"),
        ("no_dt", delete(spikes, "dt"), f"{spikes}: has no attribute 'dt'"),
        ("text_dt", set_attr("dt", "fast"), f"{spikes}: attribute 'dt' is 'fast'"),
        ("array_dt", set_attr("dt", np.ones(3)), f"{spikes}: attribute 'dt' holds 3 values"),
        ("no_data", delete(f"{spikes}/data"), f"{spikes}: has no dataset 'data'"),
        (
            "flat_data",
            lambda f: replace_data(f, data=np.ones((2, 3))),
            f"{spikes}: dataset 'data' has shape (2, 3)",
        ),
        (
            "text_data",
            lambda f: replace_data(f, data="spikes"),
            f"{spikes}: 'data' is not an array of numbers",
        ),
        (
            "short_time",
            lambda f: (
                f["nodes/fc/observables/valued"].__delitem__("time")
                or f["nodes/fc/observables/valued"].create_dataset("time", data=np.ones((3, 1)))
            ),
            "nodes/fc/observables/valued: idx, time, value must have one shape",
        ),
        (
            "no_observables",
            delete("nodes/input/observables"),
            "nodes/input: (NIRNodeData) has no 'observables' group",
        ),
        ("no_nodes", delete("nodes"), "/: (NIRGraphData) has no 'nodes' group"),
        (
            "node_dataset",
            lambda f: f["nodes"].create_dataset("x", data=1),
            "nodes/x: is a dataset where a node group",
        ),
        ("root_type", set_attr("__type__", "NIRNodeData", "/"), "its root has __type__ 'NIRNodeData'"),
        *meaningless_values(spikes, set_attr),
    ]
    for name, edit, group in cases:
        variant(name, edit, group)

    deep_data = nir.NIRGraphData({"lif": nir.NIRNodeData({})})
    for _ in range(33):  # one more than nirbridge.limits.MAX_NESTING
        deep_data = nir.NIRGraphData({"g": deep_data})
    write_like_nir(tmp_path / "deep_data.h5", deep_data)
    files["deep_data"] = (
        str(tmp_path / "deep_data.h5"),
        "nodes/g" + "/nodes/g" * 32 + ": graph data nests more than 32 deep",
    )

    def dense(f):  # more attributes than an object header holds: HDF5 moves them to a heap
        for i in range(12):
            f["nodes/lif"].attrs[f"extra{i}"] = i

    path = tmp_path / "dense.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["__type__"] = "NIRGraphData"
        f.create_group("nodes/lif/observables").parent.attrs["__type__"] = "NIRNodeData"
        dense(f)
    files["dense"] = (str(path), "nodes/lif: keeps its attributes in dense storage")
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all" * 100)
    files["junk"] = (str(tmp_path / "junk.h5"), "not an HDF5 file")
    (tmp_path / "empty.h5").write_bytes(b"")
    files["empty"] = (str(tmp_path / "empty.h5"), "is empty")
    files["missing"] = (str(tmp_path / "missing.h5"), "no such file")
    nirbridge.write(
        tmp_path / "graph.nir", nir.NIRGraph.from_list(nir.Input(np.array([2])), nir.Output(np.array([2])))
    )
    files["graph"] = (
        str(tmp_path / "graph.nir"),
        "is a NIR graph file, not NIR data; read it with nirbridge.read",
    )
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["x"] = 1
    files["plain"] = (str(tmp_path / "plain.h5"), "not a NIR data file (its root has no __type__")
    return files


def meaningless_values(spikes: str, set_attr) -> list[tuple[str, object, str]]:
    """(name, edit, text) for files of flat_data() whose values nir's classes give no
    meaning to; the text names the observable's group and the dataset or attribute."""
    events = "nodes/lif/observables/events"

    def change(name, how):
        def edit(f):
            array = f[events][name][()]
            first = tuple(np.argwhere(f[events]["idx"][()] >= 0)[0])  # the first event
            changed = how(array.copy(), first)
            del f[events][name]
            f[events].create_dataset(name, data=changed)

        return edit

    def put(value):
        def how(array, first):
            array = array.astype(np.result_type(array, value))
            array[first] = value
            return array

        return how

    def float256_attribute(f):  # a 32-byte (256-bit) float, which numpy has no dtype for
        del f[events].attrs["n_neurons"]
        tid = h5py.h5t.IEEE_F64LE.copy()
        tid.set_size(32)
        tid.set_precision(256)
        tid.set_fields(255, 236, 19, 0, 236)
        tid.set_ebias(2**18 - 1)
        h5py.h5a.create(f[events].id, b"n_neurons", tid, h5py.h5s.create(h5py.h5s.SCALAR))

    step = "the time step is a finite number of seconds > 0"
    count = "it counts the neurons the events index: a whole number from 0 to 2**63 - 1"
    length = "it is the recording's length: a finite number of seconds >= 0"
    return [
        ("dt_nan", set_attr("dt", np.nan), f"{spikes}: attribute 'dt' is nan; {step}"),
        ("dt_zero", set_attr("dt", 0.0), f"{spikes}: attribute 'dt' is 0.0; {step}"),
        ("dt_negative", set_attr("dt", -1e-3), f"{spikes}: attribute 'dt' is -0.001; {step}"),
        ("dt_inf", set_attr("dt", np.inf), f"{spikes}: attribute 'dt' is inf; {step}"),
        ("dt_bool", set_attr("dt", True), f"{spikes}: attribute 'dt' is np.True_, not a number"),
        # a float of 300 digits must be refused, not turned into an int for nir to allocate
        (
            "n_neurons_1e300",
            set_attr("n_neurons", 1e300, events),
            f"{events}: attribute 'n_neurons' is np.float64(1e+300); {count}",
        ),
        (
            "n_neurons_negative",
            set_attr("n_neurons", -4, events),
            f"{events}: attribute 'n_neurons' is np.int64(-4)",
        ),
        (
            "n_neurons_uint64",
            set_attr("n_neurons", np.uint64(2**64 - 1), events),
            f"{events}: attribute 'n_neurons' is np.uint64(18446744073709551615); {count}",
        ),
        (
            "n_neurons_inf",
            set_attr("n_neurons", np.inf, events),
            "attribute 'n_neurons' is np.float64(inf), not a whole",
        ),
        (
            "n_neurons_float256",
            float256_attribute,
            f"{events}: attribute 'n_neurons' has an HDF5 type numpy cannot hold",
        ),
        (
            "n_neurons_small",
            set_attr("n_neurons", 1, events),
            f"{events}: dataset 'idx' at [",  # where depends on the seed; the index is above 0
        ),
        ("t_max_nan", set_attr("t_max", np.nan, events), f"{events}: attribute 't_max' is nan; {length}"),
        ("t_max_inf", set_attr("t_max", np.inf, events), f"{events}: attribute 't_max' is inf; {length}"),
        ("t_max_negative", set_attr("t_max", -1.0, events), f"{events}: attribute 't_max' is -1.0; {length}"),
        ("t_max_short", set_attr("t_max", 1e-9, events), "; after t_max (1e-09); raise t_max"),
        ("idx_below", change("idx", put(-2)), f"{events}: dataset 'idx' at ["),
        (
            "idx_float",
            change("idx", lambda a, _: a.astype(float)),
            f"{events}: dataset 'idx' has dtype float64",
        ),
        ("idx_bool", change("idx", lambda a, _: a > 0), f"{events}: dataset 'idx' has dtype bool"),
        ("time_nan", change("time", put(np.nan)), f"{events}: dataset 'time' at ["),
        ("time_negative", change("time", put(-0.25)), "] is -0.25 (neuron"),
        (
            "time_complex",
            change("time", lambda a, _: a + 0j),
            f"{events}: dataset 'time' has dtype complex128",
        ),
        ("idx_flat", change("idx", lambda a, _: a.ravel()), f"{events}: idx, time must have one shape"),
        (
            "data_complex",
            lambda f: (
                f[spikes].__delitem__("data")
                or f[spikes].create_dataset("data", data=np.ones((1, 2, 2), complex))
            ),
            f"{spikes}: dataset 'data' has dtype complex128",
        ),
    ]


HOSTILE_MESSAGES = {
    "external_link": "soft or external link",
    "soft_link": "soft or external link",
    "cycle": "linked twice",
    "huge": "claims 8388608000000 bytes of data but stores 0",
    "external_storage": "external files",
    "unknown_filter": "filter 307",
    "virtual": "virtual dataset",
    "n_neurons_small": "an event's index is 0 to n_neurons - 1 (0), and -1 marks",
    "idx_below": "is -2; an event's index is 0 to n_neurons - 1 (3)",
    "time_nan": "is nan (neuron",
    "time_negative": "nodes/lif/observables/events: dataset 'time' at [",
}


def test_hostile_and_malformed_files_raise_nir_file_errors_naming_file_and_group(tmp_path):
    for name, (path, expected) in hostile_files(tmp_path).items():
        with pytest.raises(nirbridge.NirFileError) as info:
            read_data(path)
        message = str(info.value)
        assert message.startswith(path), (name, message)
        assert expected in message, (name, message)
        assert HOSTILE_MESSAGES.get(name, "") in message, (name, message)


def test_a_corrupted_global_heap_is_refused_instead_of_hanging(tmp_path):
    # __type__ strings live in HDF5's global heap; an object of size 0 makes HDF5's heap
    # parser loop forever (h5py's own attrs["__type__"] never returns)
    buffer = io.BytesIO()
    write_data(buffer, flat_data())
    original = buffer.getvalue()
    first_object = original.index(b"GCOL") + 16
    assert int.from_bytes(original[first_object : first_object + 2], "little") == 1
    free_space_of_size_0 = bytearray(original)
    free_space_of_size_0[first_object : first_object + 16] = bytes(16)
    length_that_lies = bytearray(original)
    length_that_lies[first_object + 8 : first_object + 16] = (2**31).to_bytes(8, "little")
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        for data in (free_space_of_size_0, length_that_lies):
            with pytest.raises(nirbridge.NirFileError, match="corrupted global heap|mismatched global heap"):
                read_data(io.BytesIO(bytes(data)))
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_fuzzed_copies_only_raise_nirbridge_errors(tmp_path):
    sources = []
    for write in (write_data, nir.write_data):
        buffer = io.BytesIO()
        write(buffer, flat_data())
        sources.append(buffer.getvalue())
    rng = random.Random(20260514)
    outcomes = {"read": 0, "refused": 0}
    faulthandler.dump_traceback_later(300, exit=True)  # a hang fails the run instead of stalling it
    try:
        for _ in range(400):
            data = corrupt(rng.choice(sources), rng)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    read_data(io.BytesIO(data))
                    outcomes["read"] += 1
                except nirbridge.NirBridgeError:
                    outcomes["refused"] += 1
            assert all(issubclass(w.category, nirbridge.NirBridgeWarning) for w in caught), [
                str(w.message) for w in caught
            ]
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert outcomes["read"] > 20 and outcomes["refused"] > 200, outcomes


def test_members_beyond_the_layout_are_ignored_with_a_warning(tmp_path):
    path = tmp_path / "extra.h5"
    write_data(path, flat_data())
    with h5py.File(path, "r+") as f:
        f["nodes/lif/observables/spikes/notes"] = np.ones(2)
        f["nodes/lif"].attrs["colour"] = "red"  # attributes NIR data does not define are not read
    with pytest.warns(
        nirbridge.NirFileWarning, match=r"nodes/lif/observables/spikes: member\(s\) \['notes'\]"
    ):
        back = read_data(path)
    assert_same(flat_data(), back)


@pytest.mark.parametrize("libver", ["earliest", "v108"])
def test_attributes_spread_over_header_continuation_chunks_are_found(tmp_path, libver):
    # many attributes overflow the first object header chunk; __type__ comes last
    path = tmp_path / "many.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["__type__"] = "NIRGraphData"
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_attr_phase_change(200, 150)  # keep them all in the header (v1 headers always do)
        node = h5py.Group(h5py.h5g.create(f.create_group("nodes").id, b"n", gcpl=gcpl))
        for i in range(60):
            node.attrs[f"extra{i}"] = "x" * 100
        node.attrs["__type__"] = "NIRNodeData"
        node.create_group("observables")
    assert_same(nir.NIRGraphData({"n": nir.NIRNodeData({})}), read_data(path))


def test_a_fixed_length_type_string_is_read_too(tmp_path):
    path = tmp_path / "fixed.h5"
    write_like_nir(path, flat_data())
    with h5py.File(path, "r+") as f:
        f.attrs["__type__"] = np.bytes_(b"NIRGraphData")  # nir.read_data would not accept this
    assert_same(flat_data(), read_data(path), order=False)


# ----------------------------------------------------------------------------- the rules, both ways


def test_legal_edge_cases_round_trip_both_ways(tmp_path):
    float32_t_max = np.float32(0.1)  # above 0.1: an event at float32(t_max) is within t_max 0.1
    assert float(float32_t_max) > 0.1
    data = nir.NIRGraphData(
        {
            "n": nir.NIRNodeData(
                {
                    "no_neurons": nir.EventData(np.full((2, 3), -1), np.full((2, 3), np.inf), 0, 0.0),
                    "at_zero": nir.EventData(np.array([[0, -1]]), np.array([[0.0, np.inf]]), 1, 0.0),
                    "padding": nir.EventData(
                        np.array([[-1, -1, 0, -1]]), np.array([[-np.inf, -1.0, 0.5, 7.0]]), 1, 0.5
                    ),
                    "float32": nir.EventData(np.array([[0]]), np.array([[float32_t_max]]), 1, 0.1),
                    "float16": nir.EventData(np.array([[0]]), np.array([[2.0]], np.float16), 1, 1e9),
                    "unsigned": nir.EventData(
                        np.array([[0, 65534]], np.uint16), np.array([[1, 2]], np.int64), 65535, 2
                    ),
                    "valued": nir.ValuedEventData(
                        np.array([[0, 1, -1]]),
                        np.array([[0.1, 0.2, np.inf]]),
                        2,
                        0.2,
                        np.array([[np.nan, -np.inf, 5.0]], np.float32),
                    ),
                    "flags": nir.ValuedEventData(
                        np.array([[0]]), np.array([[0.0]]), 1, 1.0, np.array([[True]])
                    ),
                    "diverged": nir.TimeGriddedData(
                        np.array([[[np.nan, np.inf], [-np.inf, 1.0]]]), dt=5e-324
                    ),
                    "ints": nir.TimeGriddedData(np.arange(6, dtype=np.uint8).reshape(1, 3, 2), dt=2),
                }
            ),
            "a.b": nir.NIRNodeData({" ": nir.TimeGriddedData(np.zeros((0, 0, 0), bool), dt=1e3)}),
        }
    )
    deep = nir.NIRGraphData({"lif": nir.NIRNodeData({})})
    for _ in range(32):  # exactly nirbridge.limits.MAX_NESTING
        deep = nir.NIRGraphData({"g": deep})
    for expected in (data, deep):
        write_data(tmp_path / "ours.h5", expected)
        assert_same(expected, read_data(tmp_path / "ours.h5"))
        assert_same(expected, nir.read_data(tmp_path / "ours.h5"))
        write_like_nir(tmp_path / "theirs.h5", expected)
        assert_same(expected, read_data(tmp_path / "theirs.h5"), order=False)


def test_cycles_and_too_deep_data_are_refused_on_write(tmp_path):
    loop = nir.NIRGraphData({"lif": nir.NIRNodeData({})})
    loop.nodes["inner"] = nir.NIRGraphData({"back": loop})
    deep = nir.NIRGraphData({})
    for _ in range(33):
        deep = nir.NIRGraphData({"g": deep})
    cases = (
        (loop, r"graph data 'inner.back' holds itself \(a cycle of NIRGraphData\)"),
        (deep, "graph data 'g" + r"\.g" * 32 + "': graph data nests more than 32 deep"),
    )
    for data, message in cases:
        with pytest.raises(nirbridge.NirFileError, match=message):
            write_data(tmp_path / "d.h5", data)
    assert os.listdir(tmp_path) == []
    shared = nir.NIRNodeData({"v": nir.TimeGriddedData(np.ones((1, 1, 1)), 1.0)})
    twice = nir.NIRGraphData({"a": shared, "b": nir.NIRGraphData({"c": shared})})  # shared, not a cycle
    write_data(tmp_path / "d.h5", twice)
    assert_same(twice, read_data(tmp_path / "d.h5"))


def test_node_containers_of_a_subclass_are_stored_as_nirs_type_with_a_warning(tmp_path):
    class Recording(nir.NIRNodeData):
        pass

    class Block(nir.NIRGraphData):
        pass

    data = nir.NIRGraphData({"b": Block({"n": Recording({})})})
    with pytest.warns(nirbridge.LossyConversionWarning) as caught:
        write_data(tmp_path / "d.h5", data)
    assert [str(w.message) for w in caught] == [
        "node 'b' is a Block; it is stored as NIRGraphData and reads back as one",
        "node 'b.n' is a Recording; it is stored as NIRNodeData and reads back as one",
    ]
    back = read_data(tmp_path / "d.h5")
    assert type(back.nodes["b"]) is nir.NIRGraphData and type(back.nodes["b"].nodes["n"]) is nir.NIRNodeData


def real(value) -> float | None:
    """``value`` as a float if it is one real number (not a bool, a string or an array)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        return None
    array = np.asarray(value)
    if array.ndim or array.dtype.kind not in "iuf":
        return None
    with np.errstate(all="ignore"):
        return float(array)


def whole(value) -> int | None:
    number = real(value)
    if number is None or not number.is_integer():
        return None
    return int(value) if isinstance(value, (int, np.integer)) else int(number)


def good_name(name) -> bool:
    if not isinstance(name, str) or name in ("", ".") or "/" in name or "\0" in name:
        return False
    return not any("\ud800" <= c <= "\udfff" for c in name)


def meaningful_observable(observable) -> bool:
    """The rules of nirbridge.data, restated: what an observable must hold to be stored."""
    if isinstance(observable, nir.TimeGriddedData):
        data, dt = observable.data, real(observable.dt)
        return (
            data.dtype.kind in "biuf" and data.ndim == 3 and dt is not None and math.isfinite(dt) and dt > 0
        )
    valued = isinstance(observable, nir.ValuedEventData)
    arrays = [observable.idx, observable.time] + ([observable.value] if valued else [])
    idx, time = observable.idx, observable.time
    if idx.dtype.kind not in "iu" or time.dtype.kind not in "iuf" or arrays[-1].dtype.kind not in "biuf":
        return False
    if len({array.shape for array in arrays}) != 1 or idx.ndim != 2:
        return False
    n_neurons, t_max = whole(observable.n_neurons), real(observable.t_max)
    if n_neurons is None or not 0 <= n_neurons < 2**63 or t_max is None or not 0 <= t_max < math.inf:
        return False
    with np.errstate(over="ignore"):  # times are compared with t_max in their own precision
        limit = float(time.dtype.type(t_max)) if time.dtype.kind == "f" else t_max
    for i, t in zip(idx.ravel().tolist(), time.ravel().tolist()):
        if t != t:  # nan
            return False
        if i != -1 and not (0 <= i < n_neurons and 0 <= t <= limit):
            return False
    return True


def meaningful(data: nir.NIRGraphData, above: tuple = ()) -> bool:
    if any(data is graph for graph in above) or len(above) > 32:
        return False
    for name, node in data.nodes.items():
        if not good_name(name):
            return False
        if isinstance(node, nir.NIRGraphData):
            if not meaningful(node, (*above, data)):
                return False
        elif not isinstance(node, nir.NIRNodeData) or not all(
            good_name(key) and meaningful_observable(observable)
            for key, observable in node.observables.items()
        ):
            return False
    return True


def all_names(data: nir.NIRGraphData) -> list:
    """The names of the nodes and observables of acyclic graph data, at every depth."""
    found = list(data.nodes)
    for node in data.nodes.values():
        found += (
            all_names(node) if isinstance(node, nir.NIRGraphData) else list(getattr(node, "observables", ()))
        )
    return found


def cyclic(data: nir.NIRGraphData, above: tuple = ()) -> bool:
    return any(data is graph for graph in above) or any(
        cyclic(node, (*above, data)) for node in data.nodes.values() if isinstance(node, nir.NIRGraphData)
    )


SUSPECT_REALS = [
    np.nan,
    np.inf,
    -np.inf,
    0.0,
    -0.0,
    -1.0,
    5e-324,
    1e300,
    True,
    "1ms",
    np.float32(0.5),
    3,
    np.array([1.0, 2.0]),
    10**400,
]
SUSPECT_COUNTS = [
    -1,
    0,
    1,
    3,
    2**63 - 1,
    2**63,
    10**300,
    1e300,
    2.0,
    2.5,
    True,
    np.uint64(2**64 - 1),
    "3",
    np.int8(3),
    np.nan,
]
SUSPECT_ENTRIES = [np.nan, np.inf, -np.inf, -2, -1, 0, 1, 3, 10, 1e9, -1e-9, 0.5]
SUSPECT_DTYPES = [np.float16, np.float32, np.int8, np.uint8, np.int64, np.bool_, np.complex64, "U2", object]
SUSPECT_NAMES = ["", ".", "a/b", "a\0b", "\ud800", 1, "a.b", " "]


@st.composite
def suspect_arrays(draw, array: np.ndarray) -> np.ndarray:
    """``array`` with maybe one entry replaced, its dtype changed or its shape changed
    (unchanged where numpy cannot make the change, e.g. text to numbers)."""
    how = draw(st.sampled_from(["keep", "entry", "dtype", "shape"]))
    value = draw(st.sampled_from(SUSPECT_ENTRIES))
    dtype = draw(st.sampled_from(SUSPECT_DTYPES))
    position = draw(st.integers(0, 1 << 16))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # complex to real, on purpose
        try:
            if how == "entry" and array.size and array.dtype.kind in "biufc":
                array = array.astype(np.result_type(array, np.asarray(value)))
                array.flat[position % array.size] = value
            elif how == "dtype":
                array = array.astype(dtype)
            elif how == "shape":
                flat = array.ravel()
                scalar = flat[:1].reshape(()) if flat.size else flat
                shorter = array[..., :-1] if array.ndim else flat
                array = draw(st.sampled_from([flat, array[None], shorter, scalar]))
        except (ValueError, TypeError, OverflowError):
            pass
    return array


@st.composite
def suspect_observables(draw) -> nir.TimeGriddedData | nir.EventData:
    """Legal observables with zero to three fields replaced by suspect values."""
    observable = draw(observables())
    if isinstance(observable, nir.TimeGriddedData):
        fields = ["data", "dt"]
    else:
        fields = ["idx", "time", "n_neurons", "t_max"] + (
            ["value"] if isinstance(observable, nir.ValuedEventData) else []
        )
    for field in draw(st.lists(st.sampled_from(fields), max_size=3)):
        if field in ("dt", "t_max"):
            setattr(observable, field, draw(st.sampled_from(SUSPECT_REALS)))
        elif field == "n_neurons":
            observable.n_neurons = draw(st.sampled_from(SUSPECT_COUNTS))
        else:
            setattr(observable, field, draw(suspect_arrays(getattr(observable, field))))
    return observable


suspect_names = st.one_of(names, names, names, st.sampled_from(SUSPECT_NAMES))


def suspect_graph_data(depth: int = 2) -> st.SearchStrategy[nir.NIRGraphData]:
    node = st.builds(nir.NIRNodeData, st.dictionaries(suspect_names, suspect_observables(), max_size=3))
    child = st.one_of(node, suspect_graph_data(depth - 1)) if depth else node
    return st.builds(nir.NIRGraphData, st.dictionaries(suspect_names, child, max_size=3))


@st.composite
def suspect_trees(draw) -> nir.NIRGraphData:
    """Suspect graph data, maybe nested to near the limit or holding a cycle."""
    data = draw(suspect_graph_data())
    for _ in range(draw(st.sampled_from([0, 0, 0, 30, 31, 32]))):
        data = nir.NIRGraphData({"g": data})
    if draw(st.integers(0, 9)) == 0:
        graphs = [data]
        for graph in graphs:
            graphs += [node for node in graph.nodes.values() if isinstance(node, nir.NIRGraphData)]
        draw(st.sampled_from(graphs)).nodes["loop"] = draw(st.sampled_from(graphs))
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=suspect_trees())
def test_suspect_data_round_trips_exactly_or_is_refused_both_ways(data):
    legal = meaningful(data)
    event("legal" if legal else "meaningless")
    buffer = io.BytesIO()
    try:
        write_data(buffer, data)
    except nirbridge.NirBridgeError as error:
        assert not legal, f"write_data refused data the rules accept: {error}"
        assert buffer.getvalue() == b""  # nothing was written
    else:
        assert legal, "write_data stored data the rules refuse"
        assert_same(data, read_data(io.BytesIO(buffer.getvalue())))
    if cyclic(data) or any(isinstance(name, str) and "\0" in name for name in all_names(data)):
        return  # write_like_nir would recurse forever; h5py cuts names at NUL
    stored = io.BytesIO()
    try:  # the same data as a tool that checks nothing stores it
        write_like_nir(stored, data)
    except (TypeError, ValueError, OverflowError):
        return  # h5py cannot store it (strings, objects, huge integers, odd names)
    event("read back what h5py stored")
    try:
        back = read_data(io.BytesIO(stored.getvalue()))
    except nirbridge.NirFileError as error:
        assert not legal, f"read_data refused data the rules accept: {error}"
    else:
        assert legal, "read_data returned data the rules refuse"
        assert_same(data, back, order=False)

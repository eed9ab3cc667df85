"""Run a NIR file through one simulator's own NIR import, in that simulator's Python.

    PYTHON peer_runner.py SIMULATOR GRAPH.nir INPUTS.h5 OUTPUTS.h5

:mod:`nirbridge.conformance` runs this script in a subprocess of another Python, one in
which the simulator imports (sinabs and rockpool pin older nir releases, spyx needs
JAX), so it imports only the standard library, numpy, h5py, nir and the simulator,
never nirbridge. Inputs and outputs cross as NIR data files (``NIRGraphData``, the layout
``nir.write_data`` writes, read and written here with h5py so that nir releases without
``NIRGraphData`` work too): one node per Input (read) or Output (written) node of the
graph, each with a ``TimeGriddedData`` observable ``"output"``, ``data`` of shape
``(batch, steps, neurons)`` and ``dt`` the time step in seconds.

The graph is read with ``nir.read`` (without its type check where only that fails) and
imported as the simulator's users import it, then run over the whole sequence from a
fresh state. Exit status: 0 with the outputs written; 3 when the import fails, 4 when
the run fails, with one line on stderr saying why.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable

import h5py
import nir
import numpy as np

LOAD_FAILED, RUN_FAILED = 3, 4


class _Failure(Exception):
    def __init__(self, status: int, error: BaseException) -> None:
        text = str(error).strip().splitlines()
        super().__init__(f"{type(error).__name__}: {text[0] if text else ''}"[:300])
        self.status = status


def _read_graph(path: str) -> nir.NIRGraph:
    try:
        return nir.read(path)
    except ValueError as strict:
        try:
            return nir.read(path, type_check=False)
        except Exception:  # noqa: BLE001 - the strict reader's complaint is the one to show
            raise strict from None


def _shape(node: nir.Input) -> tuple[int, ...]:
    return tuple(int(s) for s in np.asarray(node.input_type["input"]).reshape(-1))


def read_inputs(path: str, graph: nir.NIRGraph) -> tuple[dict[str, np.ndarray], float]:
    """The inputs ``[T, B, *shape]`` by Input name, and ``dt``."""
    inputs, dt = {}, None
    with h5py.File(path, "r") as file:
        for name, node in graph.nodes.items():
            if isinstance(node, nir.Input):
                grid = file["nodes"][name]["observables"]["output"]
                data = np.asarray(grid["data"], dtype=np.float64)  # (B, T, neurons)
                dt = float(grid.attrs["dt"])
                inputs[name] = data.transpose(1, 0, 2).reshape(data.shape[1], data.shape[0], *_shape(node))
    return inputs, float(dt if dt is not None else 1e-4)


def write_outputs(path: str, outputs: dict[str, np.ndarray], dt: float) -> None:
    """``outputs`` ``[T, B, ...]`` as NIRGraphData (see the module docs), through a
    temporary file renamed over ``path``."""
    temporary = f"{path}.{os.getpid()}.tmp"
    text = h5py.string_dtype("utf-8")
    with h5py.File(temporary, "w", track_order=True) as file:
        file.attrs.create("__type__", "NIRGraphData", dtype=text)
        nodes = file.create_group("nodes", track_order=True)
        for name, value in outputs.items():
            node = nodes.create_group(name, track_order=True)
            node.attrs.create("__type__", "NIRNodeData", dtype=text)
            grid = node.create_group("observables", track_order=True).create_group("output")
            grid.attrs.create("__type__", "TimeGriddedData", dtype=text)
            grid.attrs["dt"] = np.float64(dt)
            value = np.asarray(value, dtype=np.float64)
            grid["data"] = value.reshape(value.shape[0], value.shape[1], -1).transpose(1, 0, 2)
    os.replace(temporary, path)


# ----------------------------------------------------------------------------- simulators
# each: run(graph, inputs, dt) -> outputs [T, B, ...] by Output name; import errors and
# run errors are told apart by _Failure's status


def _one_input(graph: nir.NIRGraph, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, str]:
    outputs = [n for n, node in graph.nodes.items() if isinstance(node, nir.Output)]
    if len(inputs) != 1 or len(outputs) != 1:
        raise _Failure(
            LOAD_FAILED,
            ValueError(
                f"not measured: the runner steps one Input and one Output node, and this graph has "
                f"{len(inputs)} and {len(outputs)}"
            ),
        )
    return next(iter(inputs.values())), outputs[0]


def run_spyx(graph: nir.NIRGraph, inputs: dict[str, np.ndarray], dt: float) -> dict[str, np.ndarray]:
    """spyx: ``spyx.nir.from_nir(graph, sample, dt=dt)`` (it runs the model once on
    ``sample``), then ``spyx.nn.run(model, x)``, time-major, float32 (JAX's default)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax.numpy as jnp
    import spyx

    x, output = _one_input(graph, inputs)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints what it finds
            model, _ = spyx.nir.from_nir(graph, jnp.zeros((1, 1, *x.shape[2:]), jnp.float32), dt=dt)
    except Exception as error:
        raise _Failure(LOAD_FAILED, error) from error
    try:
        out = spyx.nn.run(model, jnp.asarray(x, dtype=jnp.float32))[0]
    except Exception as error:
        raise _Failure(RUN_FAILED, error) from error
    return {output: np.asarray(out, dtype=np.float64)}


SIMULATORS: dict[str, Callable[[nir.NIRGraph, dict[str, np.ndarray], float], dict[str, np.ndarray]]] = {
    "spyx": run_spyx,
}


def main(argv: list[str]) -> int:
    simulator, graph_path, inputs_path, outputs_path = argv
    try:
        try:
            graph = _read_graph(graph_path)
        except Exception as error:
            raise _Failure(LOAD_FAILED, error) from error
        inputs, dt = read_inputs(inputs_path, graph)
        write_outputs(outputs_path, SIMULATORS[simulator](graph, inputs, dt), dt)
    except _Failure as failure:
        print(failure, file=sys.stderr)
        return failure.status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

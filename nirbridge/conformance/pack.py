"""The conformance pack: small NIR graphs, one or more per primitive and feature, each
with fixed inputs and the float64 reference outputs of NIR's equations.

The files ship in ``nirbridge/conformance/pack/`` (``PACK_DIR``), three per graph, so
that a simulator's own CI can use them without nirbridge:

- ``NAME.nir``: the graph (``nir.read`` opens it); ``metadata["dt"]`` is its time step
  in seconds, and ``metadata["conformance"]`` says what it checks;
- ``NAME.inputs.h5``: its inputs, a ``NIRGraphData`` (``nir.read_data`` opens it) with
  one node per Input node, whose ``TimeGriddedData`` observable ``"output"`` holds
  ``data`` of shape ``(batch, steps, neurons)`` (0/1 spikes, float64) and ``dt``;
- ``NAME.reference.h5``: the outputs NIR's equations give, the same layout with one
  node per Output node (neurons in C order of the Output's shape).

A simulator conforms on a graph when its outputs equal the reference: spikes exactly,
other values (an LI's voltage) to within 1e-6 + 1e-5 times the output's largest value.
``nirbridge conformance --pack`` runs the pack; ``nirbridge.conformance.pack.write()``
writes it again (the graphs and inputs are seeded, so the files come out the same).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping

import nir
import numpy as np

__all__ = ["GRAPHS", "PACK_DIR", "as_data", "build", "files", "inputs_of", "random_inputs", "write"]

PACK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pack")
STEPS, BATCH, RATE = 100, 2, 0.3


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(ord(c) * 31**i for i, c in enumerate(name)) % 2**32)


def _lif(rng: np.random.Generator, n: int, shared: bool, r: float = 1.0) -> nir.LIF:
    def values(low: float, high: float) -> np.ndarray:
        return np.full(n, (low + high) / 2) if shared else rng.uniform(low, high, n)

    return nir.LIF(
        tau=values(2e-3, 2e-2),
        r=values(r, r) if shared else rng.uniform(0.5, 2.0, n),
        v_leak=values(0.0, 0.0) if shared else rng.uniform(-0.1, 0.2, n),
        v_threshold=values(1.0, 1.0) if shared else rng.uniform(0.8, 1.2, n),
        v_reset=values(0.0, 0.0) if shared else rng.uniform(-0.2, 0.1, n),
    )


def _chain(name: str, *nodes: nir.NIRNode, dt: float = 1e-4, what: str = "") -> nir.NIRGraph:
    graph = nir.NIRGraph.from_list(*nodes)
    # from_list names nodes by type ("if", a Python keyword): name them by position
    names = {
        k: k if isinstance(v, (nir.Input, nir.Output)) else f"{k}{i}"
        for i, (k, v) in enumerate(graph.nodes.items())
    }
    return nir.NIRGraph(
        {names[k]: v for k, v in graph.nodes.items()},
        [(names[a], names[b]) for a, b in graph.edges],
        metadata={"dt": dt, "conformance": what},
        type_check=False,
    )


def _affine(rng: np.random.Generator, n_out: int, n_in: int, gain: float) -> nir.Affine:
    return nir.Affine(rng.normal(gain, gain / 2, (n_out, n_in)), rng.normal(0, gain / 10, n_out))


def lif_shared(rng: np.random.Generator) -> nir.NIRGraph:
    return _chain("lif_shared", _affine(rng, 4, 3, 60.0), _lif(rng, 4, True), what="LIF, shared parameters")


def lif_per_neuron(rng: np.random.Generator) -> nir.NIRGraph:
    return _chain(
        "lif_per_neuron",
        _affine(rng, 5, 3, 60.0),
        _lif(rng, 5, False),
        what="LIF, per-neuron tau, r != 1, v_leak != v_reset, thresholds",
    )


def lif_r_and_dt(rng: np.random.Generator) -> nir.NIRGraph:
    return _chain(
        "lif_r_and_dt",
        _affine(rng, 4, 3, 1.0),
        _lif(rng, 4, True, r=2.0),
        dt=1e-3,
        what="LIF with r = 2 at dt = 1e-3: ignoring r and assuming another dt differ",
    )


def if_on_threshold(rng: np.random.Generator) -> nir.NIRGraph:
    """Weights of 0.25 and a threshold of 1: the membrane lands exactly on it (no spike:
    the comparison is strict) before it crosses it."""
    return _chain(
        "if_on_threshold",
        nir.Linear(np.full((2, 2), 0.25)),
        nir.IF(r=np.full(2, 1e4), v_threshold=np.ones(2), v_reset=np.zeros(2)),
        what="IF, membrane exactly on the threshold (v > v_th spikes, v == v_th does not)",
    )


def li_voltage(rng: np.random.Generator) -> nir.NIRGraph:
    return _chain(
        "li_voltage",
        _affine(rng, 3, 3, 5.0),
        nir.LI(tau=rng.uniform(2e-3, 2e-2, 3), r=rng.uniform(0.5, 2.0, 3), v_leak=rng.uniform(-0.1, 0.1, 3)),
        what="LI, a voltage output",
    )


def integrator(rng: np.random.Generator) -> nir.NIRGraph:
    return _chain(
        "integrator", _affine(rng, 3, 3, 5.0), nir.I(r=rng.uniform(0.5, 2.0, 3)), what="I, a voltage output"
    )


def cuba_lif(rng: np.random.Generator) -> nir.NIRGraph:
    n = 4
    return _chain(
        "cuba_lif",
        _affine(rng, n, 3, 120.0),
        nir.CubaLIF(
            tau_syn=rng.uniform(2e-3, 1e-2, n),
            tau_mem=rng.uniform(5e-3, 2e-2, n),
            r=rng.uniform(0.5, 2.0, n),
            v_leak=rng.uniform(-0.1, 0.1, n),
            v_threshold=rng.uniform(0.8, 1.2, n),
            v_reset=rng.uniform(-0.1, 0.1, n),
            w_in=rng.uniform(0.5, 2.0, n),
        ),
        what="CubaLIF, per-neuron, w_in != 1",
    )


def cuba_lif_r_and_dt(rng: np.random.Generator) -> nir.NIRGraph:
    n = 4
    return _chain(
        "cuba_lif_r_and_dt",
        _affine(rng, n, 3, 0.7),
        nir.CubaLIF(
            tau_syn=np.full(n, 4e-3),
            tau_mem=np.full(n, 1e-2),
            r=np.full(n, 2.0),
            v_leak=np.zeros(n),
            v_threshold=np.ones(n),
            v_reset=np.zeros(n),
            w_in=np.full(n, 3.0),
        ),
        dt=1e-3,
        what="CubaLIF with r = 2 and w_in = 3 at dt = 1e-3: ignoring r or w_in, or another dt, differ",
    )


def cuba_li(rng: np.random.Generator) -> nir.NIRGraph:
    n = 3
    return _chain(
        "cuba_li",
        _affine(rng, n, 3, 20.0),
        nir.CubaLI(
            tau_syn=rng.uniform(2e-3, 1e-2, n),
            tau_mem=rng.uniform(5e-3, 2e-2, n),
            r=rng.uniform(0.5, 2.0, n),
            v_leak=rng.uniform(-0.1, 0.1, n),
            w_in=rng.uniform(0.5, 2.0, n),
        ),
        what="CubaLI, a voltage output",
    )


def delay(rng: np.random.Generator) -> nir.NIRGraph:
    return _chain(
        "delay",
        _affine(rng, 3, 3, 60.0),
        nir.Delay(np.array([0.0, 1e-4, 3e-4])),
        _lif(rng, 3, True),
        what="Delay of 0, 1 and 3 steps before a LIF",
    )


def scale_threshold(rng: np.random.Generator) -> nir.NIRGraph:
    return _chain(
        "scale_threshold",
        _affine(rng, 3, 3, 1.0),
        nir.Scale(np.array([0.5, 2.0, -1.0])),
        nir.Threshold(np.array([0.2, 0.5, -0.3])),
        what="Scale, then Threshold (stateless spikes)",
    )


def _recurrent(rng: np.random.Generator, n: int) -> tuple[dict[str, nir.NIRNode], list[tuple[str, str]]]:
    nodes = {
        "input": nir.Input(np.array([3])),
        "fc": _affine(rng, n, 3, 60.0),
        "lif": _lif(rng, n, False),
        "w_rec": nir.Linear(rng.normal(0, 20.0, (n, n))),
        "output": nir.Output(np.array([n])),
    }
    edges = [("input", "fc"), ("fc", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")]
    return nodes, edges


def recurrent(rng: np.random.Generator) -> nir.NIRGraph:
    nodes, edges = _recurrent(rng, 5)
    return nir.NIRGraph(
        nodes, edges, metadata={"dt": 1e-4, "conformance": "a recurrent edge LIF -> Linear -> LIF"}
    )


def nested(rng: np.random.Generator) -> nir.NIRGraph:
    inner, inner_edges = _recurrent(rng, 4)
    block = nir.NIRGraph(inner, inner_edges, type_check=False)
    nodes = {
        "input": nir.Input(np.array([3])),
        "block": block,
        "readout": _affine(rng, 2, 4, 60.0),
        "out_lif": _lif(rng, 2, True),
        "output": nir.Output(np.array([2])),
    }
    edges = [("input", "block"), ("block", "readout"), ("readout", "out_lif"), ("out_lif", "output")]
    return nir.NIRGraph(
        nodes, edges, metadata={"dt": 1e-4, "conformance": "a nested subgraph holding a recurrent loop"}
    )


def two_inputs_two_outputs(rng: np.random.Generator) -> nir.NIRGraph:
    nodes = {
        "a": nir.Input(np.array([2])),
        "b": nir.Input(np.array([3])),
        "fa": _affine(rng, 3, 2, 60.0),
        "fb": _affine(rng, 3, 3, 60.0),
        "lif": _lif(rng, 3, False),
        "li": nir.LI(tau=np.full(3, 1e-2), r=np.ones(3), v_leak=np.zeros(3)),
        "spikes": nir.Output(np.array([3])),
        "voltage": nir.Output(np.array([3])),
    }
    edges = [
        ("a", "fa"),
        ("b", "fb"),
        ("fa", "lif"),
        ("fb", "lif"),
        ("lif", "spikes"),
        ("fb", "li"),
        ("li", "voltage"),
    ]
    return nir.NIRGraph(
        nodes, edges, metadata={"dt": 1e-4, "conformance": "two inputs summed into a node; two outputs"}
    )


def conv_pool(rng: np.random.Generator) -> nir.NIRGraph:
    weight = rng.normal(0.3, 0.3, (2, 1, 3, 3))
    nodes = {
        "input": nir.Input(np.array([1, 8, 8])),
        "conv": nir.Conv2d((8, 8), weight, (2, 2), (1, 1), (1, 1), 1, np.zeros(2)),
        "if1": nir.IF(r=np.ones((2, 4, 4)), v_threshold=np.ones((2, 4, 4)), v_reset=np.zeros((2, 4, 4))),
        "pool": nir.SumPool2d(np.array([2, 2]), np.array([2, 2]), np.array([0, 0])),
        "flat": nir.Flatten({"input": np.array([2, 2, 2])}, start_dim=0, end_dim=-1),
        "fc": _affine(rng, 3, 8, 0.03),
        "if2": nir.IF(r=np.ones(3), v_threshold=np.ones(3), v_reset=np.zeros(3)),
        "output": nir.Output(np.array([3])),
    }
    edges = [
        ("input", "conv"),
        ("conv", "if1"),
        ("if1", "pool"),
        ("pool", "flat"),
        ("flat", "fc"),
        ("fc", "if2"),
        ("if2", "output"),
    ]
    return nir.NIRGraph(
        nodes,
        edges,
        metadata={
            "dt": 1.0,
            "conformance": "Conv2d with stride and padding, IF, SumPool2d, Flatten (dt = 1)",
        },
    )


GRAPHS: dict[str, Callable[[np.random.Generator], nir.NIRGraph]] = {
    f.__name__: f
    for f in (
        lif_shared,
        lif_per_neuron,
        lif_r_and_dt,
        if_on_threshold,
        li_voltage,
        integrator,
        cuba_lif,
        cuba_lif_r_and_dt,
        cuba_li,
        delay,
        scale_threshold,
        recurrent,
        nested,
        two_inputs_two_outputs,
        conv_pool,
    )
}
"""The pack's graphs by name: ``builder(rng)``, seeded by the name."""


def build(name: str) -> tuple[nir.NIRGraph, dict[str, np.ndarray]]:
    """Graph ``name`` and its fixed inputs ``[T, B, ...]`` (0/1 spikes, float64)."""
    rng = _rng(name)
    graph = GRAPHS[name](rng)
    return graph, random_inputs(graph, STEPS, BATCH, RATE, rng)


def random_inputs(
    graph: nir.NIRGraph, steps: int, batch: int, rate: float, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """0/1 spikes at ``rate`` ``[steps, batch, ...]`` (float64) for each Input node of
    ``graph``, in node order."""
    from ..limits import check_memory

    shapes = {
        key: tuple(int(s) for s in np.asarray(node.input_type["input"]).reshape(-1))
        for key, node in graph.nodes.items()
        if isinstance(node, nir.Input)
    }
    sizes = [steps * batch * math.prod(shape) for shape in shapes.values()]
    # float64 spikes for every input, and rng.random's float64 draw and bool mask for the largest
    check_memory(
        8 * sum(sizes) + 9 * max(sizes, default=0),
        f"random input spikes of {steps} steps x batch {batch} ({sum(sizes):,} values in float64)",
        "give fewer steps or a smaller batch (--steps, --batch)",
    )
    inputs = {}
    for key, shape in shapes.items():
        inputs[key] = (rng.random((steps, batch, *shape)) < rate).astype(np.float64)
    return inputs


def as_data(values: Mapping[str, np.ndarray], dt: float) -> nir.NIRGraphData:
    """Values ``[T, B, ...]`` by node name as NIRGraphData: a ``TimeGriddedData``
    observable ``"output"`` of shape ``(B, T, neurons)`` per node (the pack's layout)."""
    nodes = {}
    for key, value in values.items():
        grid = np.asarray(value, dtype=np.float64)
        grid = np.ascontiguousarray(grid.reshape(grid.shape[0], grid.shape[1], -1).transpose(1, 0, 2))
        nodes[key] = nir.NIRNodeData({"output": nir.TimeGriddedData(grid, dt)})
    return nir.NIRGraphData(nodes)


def write(folder: str = PACK_DIR) -> list[str]:
    """Write every graph of the pack with its inputs and reference outputs to ``folder``;
    the ``.nir`` paths."""
    from ..data import write_data
    from ..io import write as write_graph
    from .conventions import reference

    os.makedirs(folder, exist_ok=True)
    paths = []
    for name in GRAPHS:
        graph, inputs = build(name)
        dt = float(graph.metadata["dt"])
        path = os.path.join(folder, f"{name}.nir")
        write_graph(path, graph)
        write_data(os.path.join(folder, f"{name}.inputs.h5"), as_data(inputs, dt))
        write_data(os.path.join(folder, f"{name}.reference.h5"), as_data(reference(graph, inputs, dt), dt))
        paths.append(path)
    return paths


def files(folder: str = PACK_DIR) -> list[str]:
    """The pack's ``.nir`` files, in the order of :data:`GRAPHS`."""
    return [os.path.join(folder, f"{name}.nir") for name in GRAPHS]


def inputs_of(path: str, graph: nir.NIRGraph) -> dict[str, np.ndarray]:
    """The shipped inputs of pack file ``path``, ``[T, B, ...]`` by Input name."""
    from ..data import read_data

    beside = path.removesuffix(".nir") + ".inputs.h5"
    data = read_data(beside)
    inputs = {}
    for key, node in graph.nodes.items():
        if isinstance(node, nir.Input):
            shape = tuple(int(s) for s in np.asarray(node.input_type["input"]).reshape(-1))
            found = data.nodes.get(key)
            grid = None if found is None else found.observables.get("output")
            grid = None if grid is None else np.asarray(grid.data)  # (B, T, n)
            n = math.prod(shape)
            if grid is None or grid.ndim != 3 or min(grid.shape[:2]) < 1 or grid.shape[2] != n:
                held = {k: list(np.shape(v.observables["output"].data)) for k, v in data.nodes.items()}
                raise ValueError(
                    f"{beside} holds no spikes [B >= 1, T >= 1, {n}] for Input {key!r} (it holds {held}); "
                    "move it away to run on random inputs"
                )
            steps, batch = grid.shape[1], grid.shape[0]
            inputs[key] = grid.transpose(1, 0, 2).reshape(steps, batch, *shape).astype(np.float64)
    return inputs

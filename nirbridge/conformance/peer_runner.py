"""Run a NIR file through one simulator's own NIR import, in that simulator's Python.

    PYTHON peer_runner.py SIMULATOR GRAPH.nir INPUTS.h5 OUTPUTS.h5
    PYTHON peer_runner.py --serve SIMULATOR     (many files: see nirbridge.conformance.workers)

SIMULATOR is a peer of :data:`SIMULATORS` (spyx, sinabs, rockpool), or
``torch:package.module:function`` for a torch simulator's own import that nirbridge's
adapter describes (norse, snntorch, spikingjelly), run in nirbridge's own Python: each
simulator in a process of its own, since one simulator's import can change what another's
does in the same process (snntorch's changes what norse's gives on a Delay).

:mod:`nirbridge.conformance` runs this script in a subprocess of another Python, one in
which the simulator imports (sinabs and rockpool pin older nir releases, spyx needs
JAX), so it imports only the standard library, numpy, h5py, nir and the simulator,
never nirbridge. Inputs and outputs cross as NIR data files (``NIRGraphData``, the layout
``nir.write_data`` writes, read and written here with h5py so that nir releases without
``NIRGraphData`` work too): one node per Input (read) or Output (written) node of the
graph, each with a ``TimeGriddedData`` observable ``"output"``, ``data`` of shape
``(batch, steps, neurons)`` and ``dt`` the time step in seconds.

The graph is read with ``nir.read`` (without its type check where only that fails, and
without the fields the installed nir does not define, which a last line on stderr names) and
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
Run = Callable[[nir.NIRGraph, dict[str, np.ndarray], float], dict[str, np.ndarray]]


class _Failure(Exception):
    def __init__(self, status: int, error: BaseException) -> None:
        text = str(error).strip().splitlines()
        super().__init__(f"{type(error).__name__}: {text[0] if text else ''}"[:300])
        self.status = status


def _read_graph(path: str) -> tuple[nir.NIRGraph, list[str]]:
    """The graph, and the fields it was read without: a file a newer nir wrote can hold
    fields the installed nir does not define (nir 1.0.4, which sinabs and rockpool need,
    has no ``v_reset``); those are left out, and the report says so."""
    try:
        return nir.read(path), []
    except TypeError as unknown:
        if "unexpected keyword argument" not in str(unknown):
            raise
        return _read_known_fields(path)
    except ValueError as strict:
        try:
            return nir.read(path, type_check=False), []
        except Exception:  # noqa: BLE001 - the strict reader's complaint is the one to show
            raise strict from None


def _read_known_fields(path: str) -> tuple[nir.NIRGraph, list[str]]:
    import dataclasses

    from nir.serialization import hdf2dict

    dropped: list[str] = []

    def strip(node: dict, where: str) -> None:
        kind = nir.str2NIRNode(node["type"]) if hasattr(nir, "str2NIRNode") else getattr(nir, node["type"])
        if dataclasses.is_dataclass(kind):
            known = {f.name for f in dataclasses.fields(kind)} | {"type", "shape"}  # Input's, Output's
            for key in [k for k in node if k not in known]:
                del node[key]
                dropped.append(f"{key} of {where or 'the graph'!r}")
        for name, child in (node.get("nodes") or {}).items():
            strip(child, f"{where}.{name}" if where else name)

    with h5py.File(path, "r") as file:
        data = hdf2dict(file["node"])
    strip(data, "")
    return nir.dict2NIRNode(data), dropped


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
                f"not measured: this graph has {len(inputs)} Input and {len(outputs)} Output nodes, and the "
                "simulators' own imports take one input tensor and give one output"
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
            wanted = _spyx_nodes(graph)
            model, _ = spyx.nir.from_nir(graph, jnp.zeros((1, 1, *x.shape[2:]), jnp.float32), dt=dt)
    except Exception as error:
        raise _Failure(LOAD_FAILED, error) from error
    if len(model.layers) < len(wanted):
        unknown = [f"{type(v).__name__} {k!r}" for k, v in wanted if not _spyx_builds(v)]
        raise _Failure(
            LOAD_FAILED,
            ValueError(
                f"spyx's import builds nothing for {', '.join(unknown)}"
                if unknown
                else f"spyx's import builds {len(model.layers)} modules for {len(wanted)} nodes: "
                "it follows the edges from a node named 'input' and leaves the rest out"
            ),
        )
    try:
        out = spyx.nn.run(model, jnp.asarray(x, dtype=jnp.float32))[0]
    except Exception as error:
        raise _Failure(RUN_FAILED, error) from error
    return {output: np.asarray(out, dtype=np.float64)}


def _spyx_nodes(graph: nir.NIRGraph) -> list[tuple[str, nir.NIRNode]]:
    """The nodes spyx should build a module for: all but Input and Output, once its
    import has folded each LIF/CubaLIF ⇄ Affine loop into one node, and with each
    Threshold after an LI left to that LI (one ``PSU_LIF``)."""
    import copy

    import spyx

    folded = spyx.nir._replace_rnn_subgraph_with_nirgraph(copy.deepcopy(graph))
    after_li = {b for a, b in folded.edges if isinstance(folded.nodes.get(a), nir.LI)}
    return [
        (k, v)
        for k, v in folded.nodes.items()
        if not isinstance(v, (nir.Input, nir.Output)) and not (isinstance(v, nir.Threshold) and k in after_li)
    ]


def _spyx_builds(node: nir.NIRNode) -> bool:
    import spyx
    from flax import nnx

    if isinstance(node, nir.LI):
        return True
    try:
        return spyx.nir._nir_node_to_spyx_module(node, nnx.Rngs(0)) is not None
    except Exception:  # noqa: BLE001 - a node it refuses is a node it does not build
        return False


def _dropped(graph: nir.NIRGraph, executor: object) -> list[str]:
    """Nodes (not Input/Output) that a nirtorch GraphExecutor built no module for: it
    wires around them without a word (sinabs drops a Linear this way)."""
    from nirtorch.utils import sanitize_name

    present = {n.name for n in executor.graph.node_list if n.elem is not None}
    return [
        f"{type(v).__name__} {k!r}"
        for k, v in graph.nodes.items()
        if not isinstance(v, (nir.Input, nir.Output)) and sanitize_name(k) not in present
    ]


def _whole_sequence(name: str, load: Callable[[nir.NIRGraph, int], object], batch_time: bool) -> Run:
    """A peer whose import gives a nirtorch GraphExecutor run over the whole sequence in
    one call: ``[B*T, ...]`` (sinabs, ``batch_time=False``) or ``[B, T, ...]`` (rockpool),
    in the dtype of its parameters (float32)."""

    def run(graph: nir.NIRGraph, inputs: dict[str, np.ndarray], dt: float) -> dict[str, np.ndarray]:
        import torch

        x, output = _one_input(graph, inputs)
        steps, batch = x.shape[:2]
        try:
            model = load(graph, batch)
            dropped = _dropped(graph, model)
        except Exception as error:
            raise _Failure(LOAD_FAILED, error) from error
        if dropped:
            raise _Failure(
                LOAD_FAILED, ValueError(f"{name}'s import builds nothing for {', '.join(dropped)}")
            )
        try:
            parameters = [q for q in [*model.parameters(), *model.buffers()] if q.is_floating_point()]
            dtype = parameters[0].dtype if parameters else torch.float32
            xs = torch.as_tensor(np.ascontiguousarray(np.swapaxes(x, 0, 1)), dtype=dtype)  # [B, T, ...]
            with torch.no_grad():
                result = model(xs if batch_time else xs.reshape(batch * steps, *xs.shape[2:]))
            while isinstance(result, tuple):
                result = result[0]
            y = result.detach().to(torch.float64).numpy()
            y = y.reshape(batch, steps, *y.shape[(2 if batch_time else 1) :])
        except Exception as error:
            raise _Failure(RUN_FAILED, error) from error
        return {output: np.ascontiguousarray(np.swapaxes(y, 0, 1))}

    return run


def _sinabs(graph: nir.NIRGraph, batch: int) -> object:
    """sinabs: ``sinabs.from_nir(graph, batch_size=B)``; it takes no time step (tau in
    steps), its neurons reset by subtraction and may spike several times a step."""
    from sinabs import from_nir

    return from_nir(graph, batch_size=batch)


def _rockpool(graph: nir.NIRGraph, batch: int) -> object:
    """rockpool: ``rockpool.nn.modules.from_nir(graph)``; it takes no time step (its own
    per node: min(tau / (1 + r)))."""
    from rockpool.nn.modules import from_nir

    return from_nir(graph)


def run_torch_loader(spec: str) -> Run:
    """A torch simulator's own import, named ``"package.module:function"``: ``function(graph,
    dt) -> (module, dtype)`` imports the graph as the simulator's users do (nirbridge's
    adapters hold these), and the module is stepped ``out, state = module(x_t, state)``."""

    def run(graph: nir.NIRGraph, inputs: dict[str, np.ndarray], dt: float) -> dict[str, np.ndarray]:
        import importlib

        import torch

        x, output = _one_input(graph, inputs)
        module_name, _, function = spec.partition(":")
        try:
            module, dtype = getattr(importlib.import_module(module_name), function)(graph, dt)
            executor = hasattr(getattr(module, "graph", None), "node_list")  # nirtorch's GraphExecutor
            dropped = _dropped(graph, module) if executor else []
        except Exception as error:
            raise _Failure(LOAD_FAILED, error) from error
        if dropped:
            raise _Failure(LOAD_FAILED, ValueError(f"its import builds nothing for {', '.join(dropped)}"))
        xs = torch.as_tensor(x, dtype=dtype)
        outs, state = [], None
        try:
            with torch.no_grad():
                for t in range(xs.shape[0]):
                    out, state = module(xs[t], state)
                    outs.append(out.detach().to(torch.float64).clone())
        except Exception as error:
            raise _Failure(RUN_FAILED, error) from error
        return {output: torch.stack(outs).numpy()}

    return run


SIMULATORS: dict[str, Run] = {
    "spyx": run_spyx,
    "sinabs": _whole_sequence("sinabs", _sinabs, batch_time=False),
    "rockpool": _whole_sequence("rockpool", _rockpool, batch_time=True),
}


def _simulator(name: str) -> Run:
    """``name`` of :data:`SIMULATORS`, or ``torch:package.module:function`` (see
    :func:`run_torch_loader`)."""
    if name.startswith("torch:"):
        return run_torch_loader(name.removeprefix("torch:"))
    return SIMULATORS[name]


def _job(simulator: str, graph_path: str, inputs_path: str, outputs_path: str) -> str | None:
    """Run one file, writing its outputs; the note on fields it was read without, if any."""
    try:
        graph, dropped = _read_graph(graph_path)
    except Exception as error:
        raise _Failure(LOAD_FAILED, error) from error
    inputs, dt = read_inputs(inputs_path, graph)
    write_outputs(outputs_path, _simulator(simulator)(graph, inputs, dt), dt)
    return f"read with nir {nir.__version__}, without {', '.join(dropped)}" if dropped else None


def main(argv: list[str]) -> int:
    """One file: ``SIMULATOR GRAPH.nir INPUTS.h5 OUTPUTS.h5``; the status as the exit status."""
    simulator, graph_path, inputs_path, outputs_path = argv
    try:
        note = _job(simulator, graph_path, inputs_path, outputs_path)
        if note:
            print(note, file=sys.stderr)
    except _Failure as failure:
        print(failure, file=sys.stderr)
        return failure.status
    return 0


def serve(simulator: str) -> int:
    """Many files, one process (``--serve SIMULATOR``, see :mod:`nirbridge.conformance.workers`):
    a JSON job per line on stdin, a JSON answer per line on stdout. The simulator's own
    prints go to stderr, and it reads nothing from stdin: both pipes belong to the jobs."""
    import json

    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    jobs = os.fdopen(os.dup(0), "r", encoding="utf-8")
    os.dup2(2, 1)
    with open(os.devnull, "rb") as nothing:
        os.dup2(nothing.fileno(), 0)
    for line in jobs:
        job = json.loads(line)
        answer: dict[str, object] = {"status": 0, "message": "", "note": None}
        try:
            note = _job(simulator, job["graph"], job["inputs"], job["outputs"])
            answer["note"] = note if note is None or len(note) <= 300 else note[:297] + "..."
        except _Failure as failure:
            answer.update(status=failure.status, message=str(failure))
        except Exception as error:  # noqa: BLE001 - this file's failure; the next file may run
            text = str(error).strip().splitlines()
            answer.update(status=1, message=f"{type(error).__name__}: {text[0] if text else ''}"[:300])
        print(json.dumps(answer), file=answers, flush=True)
    return 0


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")  # the peers' own deprecation notices; results say what matters
    if sys.argv[1:2] == ["--serve"] and len(sys.argv) == 3:
        sys.exit(serve(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))

"""NIR conformance: every simulator's own NIR import measured against NIR's equations.

``nirbridge.conformance(files)`` runs each ``.nir`` file through nirbridge's float64
reference (:mod:`.conventions`) and through every simulator available here, on the
same random spike inputs, and reports for each simulator and file whether the file
loads (and the error where not), the fraction of output values equal to the
reference, the first step and output at which they differ, and a diagnosis: the known
convention (or pair of them) under which the reference gives the simulator's outputs
exactly, ``"unexplained"`` where none does.

Simulators, by name:

- ``norse``, ``snntorch``, ``spikingjelly``: the simulator's **own** NIR import, as
  its users call it; the adapter of that simulator registers how (:func:`register`,
  :func:`own_import`), and each file runs in a fresh process of this Python
  (:mod:`.peer_runner`), since one simulator's import can change what another's gives
  in the same process.
- ``sinabs``, ``rockpool``, ``spyx``: peers in a Python of their own (:func:`peer`),
  inputs and outputs crossing as NIRGraphData files.
- ``nirbridge+norse``, ``nirbridge+snntorch``, ``nirbridge+spikingjelly``: nirbridge's
  adapter (``nirbridge.adapters.NAME.from_nir``), its neurons that simulator's, in
  this process.

The conformance pack (:mod:`.pack`) and the report's pictures (:mod:`.report`) are
beside this module.

Spiking outputs must be equal; other outputs (an LI's voltage) agree where
``|a − b| ≤ 1e-6 + 1e-5·m``, ``m`` the largest ``|b|`` of that output.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import importlib.util
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import nir
import numpy as np

from ..errors import MemoryLimitError, NirBridgeError
from . import conventions, pack
from .conventions import Outputs
from .workers import Worker, WorkerFailure

__all__ = [
    "ConformanceError",
    "Report",
    "Result",
    "Simulator",
    "conformance",
    "own_import",
    "available",
    "register",
]

Runner = Callable[[str, Mapping[str, np.ndarray], float], Outputs]
"""``run(path, inputs, dt)``: the file loaded as the simulator loads it, run one step at
a time from a fresh state over ``inputs`` (``[T, B, ...]`` float64 by Input name);
its outputs ``[T, B, ...]`` by Output name."""


@dataclasses.dataclass
class Simulator:
    """A simulator whose NIR import conformance measures."""

    name: str
    package: str
    run: Runner
    version: Callable[[], str | None] = lambda: None
    python: str = sys.executable
    isolated: bool = False  # runs in a process of its own (several simulators may run at once)
    close: Callable[[], None] = lambda: None  # ends that process (after the last file)


class ConformanceError(NirBridgeError):
    """conformance() was asked for something it cannot measure."""


class RunFailure(Exception):
    """A simulator loaded a file and then failed while running it (``__cause__`` says how)."""


_REGISTRY: dict[str, Simulator] = {}
_OWN = {"norse": "norse", "snntorch": "snntorch", "spikingjelly": "spikingjelly"}
"""Simulator name -> the nirbridge adapter that registers its own import (imported lazily)."""
TOLERANCE = (1e-6, 1e-5)  # atol, rtol (relative to the output's largest |value|) for non-spiking outputs


def register(simulator: Simulator) -> None:
    """Make ``simulator`` known to :func:`conformance` (an adapter does this when imported)."""
    _REGISTRY[simulator.name] = simulator


def _adapter_runner(name: str) -> Runner:
    def run(path: str, inputs: Mapping[str, np.ndarray], dt: float) -> Outputs:
        import torch

        from ..io import read

        adapter = importlib.import_module(f"nirbridge.adapters.{name}")
        module = adapter.from_nir(path, dt=dt, dtype=torch.float64, allow_negative_tau=True)
        graph = read(path)
        try:
            return conventions.stepped(module, graph, inputs)
        except Exception as error:
            raise RunFailure(_one_line(error)) from error

    return run


def own_import(name: str, package: str, loader: str) -> Simulator:
    """A :class:`Simulator` for a torch simulator's own NIR import: ``loader`` names
    ``"package.module:function"``, ``function(graph, dt) -> (module, dtype)``, which
    :mod:`.peer_runner` calls in a fresh process of this Python for each file (one
    simulator's import can change what another's gives in the same process)."""
    simulator = peer(f"torch:{loader}", sys.executable)
    return Simulator(name, package, simulator.run, _version(package), isolated=True, close=simulator.close)


def _version(package: str) -> Callable[[], str | None]:
    def version() -> str | None:
        from importlib import metadata

        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    return version


PEERS = ("sinabs", "rockpool", "spyx")
"""Simulators that run in a Python of their own (:mod:`.peer_runner`): sinabs 3.1.3 and
rockpool 3.1.0 read files only with nir 1.0.4, spyx needs JAX."""
PEER_TIMEOUT = 300.0  # seconds one peer may take for one file


class PeerOutputs(dict):
    """A peer's outputs by Output name, with what the runner said of how it read the file
    (``"read with nir 1.0.4, without v_reset of 'lif'"``)."""

    note: str | None = None


class LoadFailure(Exception):
    """A peer's import refused a file (status 3 of :mod:`.peer_runner`), or the peer
    crashed or timed out."""


def _checkout() -> str | None:
    """nirbridge's own source checkout: the folder holding ``pyproject.toml`` beside the
    ``nirbridge`` package this module is part of; None for an installed (non-editable)
    package. Never the current folder: a downloaded model's repository could ship a
    ``.venv-peers`` of its own."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return root if os.path.isfile(os.path.join(root, "pyproject.toml")) else None


def _peer_python(name: str, python: Mapping[str, str] | None) -> str | None:
    """The interpreter of peer ``name``: as given, else ``.venv-peers/NAME`` in
    nirbridge's own checkout (what ``make peers`` builds there), else None."""
    if python and name in python:
        return python[name]
    root = _checkout()
    if root is None:
        return None
    for candidate in (
        os.path.join(root, ".venv-peers", name, "bin", "python"),
        os.path.join(root, ".venv-peers", name, "Scripts", "python.exe"),
    ):
        if os.path.isfile(candidate):
            return candidate
    return None


def peer(name: str, python: str, timeout: float = PEER_TIMEOUT) -> Simulator:
    """A :class:`Simulator` that runs :mod:`.peer_runner` for ``name`` in ``python``, one
    process for all files (:mod:`.workers`), inputs and outputs crossing as NIRGraphData
    files."""
    import subprocess
    import tempfile

    worker = Worker(name, python, timeout)

    def run(path: str, inputs: Mapping[str, np.ndarray], dt: float) -> Outputs:
        from ..data import read_data, write_data

        with tempfile.TemporaryDirectory() as folder:
            sent, received = os.path.join(folder, "inputs.h5"), os.path.join(folder, "outputs.h5")
            write_data(sent, pack.as_data(inputs, dt))
            try:
                answer, lines = worker.job(os.path.abspath(path), sent, received)
            except WorkerFailure as failure:
                raise LoadFailure(str(failure)) from None
            told = str(answer.get("message") or (lines or [""])[-1])[:300]
            if answer.get("status") == 3:
                raise LoadFailure(told)
            if answer.get("status") == 4:
                raise RunFailure(told)
            if answer.get("status") != 0:
                raise LoadFailure(f"{python} failed: {told}")
            if not os.path.exists(received):
                raise LoadFailure(
                    f"{python} answered but wrote no outputs: is it a Python in which {name} imports? "
                    f"({told or 'it printed nothing on stderr'})"
                )
            data = read_data(received)
        outputs = PeerOutputs(
            (key, node.observables["output"].data.transpose(1, 0, 2).astype(np.float64))
            for key, node in data.nodes.items()
        )
        if answer.get("note"):
            outputs.note = str(answer["note"])[:300]
        return outputs

    def version() -> str | None:
        with tempfile.TemporaryFile() as printed:
            try:
                subprocess.run(  # -I: the current folder is not on sys.path (a csv.py there would run)
                    [python, "-I", "-c", f"from importlib.metadata import version; print(version({name!r}))"],
                    stdout=printed,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                    timeout=60,
                )
            except (OSError, subprocess.TimeoutExpired):
                return None
            printed.seek(0)
            text = printed.read(200).decode("utf-8", "replace").strip()  # a version, not what a peer prints
        return text.splitlines()[0][:100] if text else None

    return Simulator(name, name, run, version, python, isolated=True, close=worker.close)


def available(
    python: Mapping[str, str] | None = None, left_out: dict[str, str] | None = None
) -> dict[str, Simulator]:
    """Every simulator available here, by name: those whose package imports beside
    nirbridge, and the peers (:data:`PEERS`) whose interpreter ``python`` names or
    ``.venv-peers/NAME`` holds. A simulator that is installed but cannot be imported is
    left out, and ``left_out`` (when given) gets its name and why."""
    found: dict[str, Simulator] = {}
    for name in PEERS:
        interpreter = _peer_python(name, python)
        if interpreter is not None:
            found[name] = peer(name, interpreter)
    for name, adapter in _OWN.items():
        if importlib.util.find_spec(name) is None:
            continue
        if name not in _REGISTRY:
            try:
                importlib.import_module(f"nirbridge.adapters.{adapter}")
            except (ImportError, NirBridgeError) as error:  # installed, but it does not import
                if left_out is not None:
                    left_out[name] = " ".join(str(error).split())
                continue
        if name in _REGISTRY:
            found[name] = _REGISTRY[name]
        found[f"nirbridge+{name}"] = Simulator(
            f"nirbridge+{name}", name, _adapter_runner(adapter), _version(name)
        )
    for name, simulator in _REGISTRY.items():  # others registered by name
        found.setdefault(name, simulator)
    return found


@dataclasses.dataclass
class Result:
    """One simulator on one file."""

    file: str
    simulator: str
    loads: bool
    error: str | None = None
    agreement: float | None = None
    first_divergence: dict[str, Any] | None = None
    diagnosis: str | None = None
    reference_spikes: int | None = None
    note: str | None = None  # how a peer read the file, where it left something out

    @property
    def not_measured(self) -> bool:
        """A graph this simulator's own import cannot be measured on (several Inputs or
        Outputs, where its import takes one tensor), not a failure to load."""
        return not self.loads and "not measured:" in (self.error or "")


@dataclasses.dataclass
class Report:
    """What :func:`conformance` measured; ``print(report)`` shows the table,
    :meth:`to_json` the document ``--json`` writes."""

    files: list[str]
    simulators: dict[str, dict[str, Any]]
    results: list[Result]
    steps: int
    batch: int

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "simulators": self.simulators,
            "steps": self.steps,
            "batch": self.batch,
            "results": [dataclasses.asdict(r) for r in self.results],
        }

    def __str__(self) -> str:
        from ..text import printable
        from .report import labels

        shown = {f: printable(name) for f, name in labels(self.files).items()}
        lines = [f"NIR conformance: {len(self.files)} file(s), T={self.steps}, batch {self.batch}"]
        width = max([len(name) for name in shown.values()] + [4])
        for result in self.results:
            name = shown[result.file]
            if result.not_measured:
                verdict = result.error[result.error.index("not measured") :]
            elif not result.loads:
                verdict = f"does not load: {result.error}"
            elif result.agreement is None:
                verdict = f"loads, {result.error}"
            else:
                verdict = f"{result.agreement:8.2%} agree"
                if result.first_divergence is not None:
                    d = result.first_divergence
                    verdict += f", first differs at step {d['step']} ({d['node']})"
                if result.diagnosis is not None:
                    verdict += f"; diagnosis: {result.diagnosis}"
                if result.reference_spikes == 0:
                    verdict += " (the reference is silent: no spike, or no value past the tolerance)"
            if result.note:
                verdict += f" [{result.note}]"
            lines.append(f"  {result.simulator:<24} {name:<{width}}  {verdict}")
        return "\n".join(lines)


def _spiking(values: np.ndarray) -> bool:
    return bool(np.all((values == 0) | (values == 1)))


def _agree(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per value: equal (spikes), or within :data:`TOLERANCE` of the reference."""
    if got.shape != expected.shape:
        raise ValueError(f"its output has shape {got.shape[1:]} per step, the graph's {expected.shape[1:]}")
    if _spiking(expected):
        return got == expected
    finite = np.abs(expected[np.isfinite(expected)])
    scale = float(finite.max()) if finite.size else 0.0  # as verify: an infinity scales nothing
    atol, rtol = TOLERANCE
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, which is no closeness
        close = np.abs(got - expected) <= atol + rtol * scale
    return close | (got == expected) | (np.isnan(got) & np.isnan(expected))  # the same inf, or NaN both


def _within_tolerance_of_zero(values: np.ndarray) -> bool:
    """Every finite value of a non-spiking output within the absolute tolerance of 0 (a
    simulator that gives zeros agrees with it, whatever it computes)."""
    finite = np.abs(values[np.isfinite(values)])
    return not _spiking(values) and finite.size > 0 and float(finite.max()) <= TOLERANCE[0]


def _compare(got: Outputs, expected: Outputs) -> tuple[float, dict[str, Any] | None]:
    """Agreement over every output value, and the first step (and output) that differs."""
    missing = [k for k in expected if k not in got]
    if missing and len(expected) == 1 and len(got) == 1:
        got = {missing[0]: next(iter(got.values()))}  # one output, named otherwise
    elif missing:
        raise ValueError(f"it gives no output named {missing} (it gives {sorted(got)})")
    equal = total = 0
    first: dict[str, Any] | None = None
    for name, reference in expected.items():
        value = np.asarray(got[name], dtype=np.float64)
        if value.shape != reference.shape and value.size == reference.size:
            value = value.reshape(reference.shape)  # a peer's [T, B, neurons]
        agree = _agree(value, reference)
        equal += int(agree.sum())
        total += agree.size
        bad = np.flatnonzero(~agree.reshape(agree.shape[0], -1).all(axis=1))
        if bad.size and (first is None or bad[0] < first["step"]):
            first = {"step": int(bad[0]), "node": name}
    return (equal / total if total else 1.0), first


SILENT = "silent: it gives only zeros, which no convention tells apart"
"""The diagnosis of a simulator whose every output is 0: a convention under which the
reference is silent too would "explain" it, and so would many others."""


def _silent(outputs: Mapping[str, np.ndarray]) -> bool:
    """Every value of every output 0 (no spike, no voltage)."""
    return not any(np.any(np.asarray(v) != 0) for v in outputs.values())


def _diagnose(
    graph: nir.NIRGraph, inputs: Mapping[str, np.ndarray], dt: float, got: Outputs, cache: dict
) -> str:
    if _silent(got):
        return SILENT
    for convention in conventions.candidates():
        if convention.name not in cache:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cache[convention.name] = conventions.reference(graph, inputs, dt, convention)
            except Exception:  # noqa: BLE001 - a convention this graph cannot take explains nothing
                cache[convention.name] = None
        expected = cache[convention.name]
        if expected is None or _silent(expected):  # agreeing with silence is no diagnosis
            continue
        try:
            agreement, _ = _compare(got, expected)
        except ValueError:
            continue
        if agreement == 1.0:
            return convention.name
    return "unexplained"


def conformance(
    files: Iterable[str | os.PathLike[str]] = (),
    simulators: Sequence[str] | None = None,
    *,
    steps: int = 100,
    batch: int = 2,
    rate: float = 0.3,
    seed: int = 0,
    dt: float | None = None,
    python: Mapping[str, str] | None = None,
    with_pack: bool = False,
    progress: bool = False,
    jobs: int | None = None,
) -> Report:
    """Measure every simulator's NIR import against NIR's equations on ``files``.

    Args:
        files: ``.nir`` files.
        simulators: names (see the module docs); by default every one available here.
        steps, batch: the length and batch size of the inputs, random 0/1 spikes at
            ``rate`` per value (seeded by ``seed``), the same for every simulator.
        dt: time step in seconds; by default the file's ``metadata["dt"]``, else 1e-4
            (as :func:`nirbridge.nir_to_torch` takes it).
        python: ``{peer: interpreter}`` for the peers of :data:`PEERS` that run in a
            Python of their own (default: ``.venv-peers/NAME/bin/python`` where it exists).
        with_pack: also every graph of the conformance pack (:mod:`.pack`).
        progress: say on stderr how far it is and about how long is left (a bar on a
            terminal, else a line per file, flushed).
        jobs: how many simulators' processes compute at once (default: one per
            processor). Each simulator whose import runs apart (the peers, and norse's,
            snntorch's and spikingjelly's own imports) has one process for all files.

    A file with ``NAME.inputs.h5`` beside it (as the pack's graphs have) runs on those
    inputs instead of random ones.

    Returns:
        A :class:`Report`: ``print(report)`` for the table, ``report.to_json()`` for
        the JSON document.
    """

    for label, value in (("steps", steps), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConformanceError(f"conformance({label}={value!r}): give a whole number, 1 or more")
    if not 0.0 <= rate <= 1.0:  # NaN fails too
        raise ConformanceError(f"conformance(rate={rate!r}): a spike probability per step, from 0 to 1")
    if not 0 <= seed < 2**63:
        raise ConformanceError(f"conformance(seed={seed!r}): give a seed from 0 to 2**63 - 1")
    if dt is not None and not (isinstance(dt, (int, float)) and 0 < dt < math.inf):  # NaN fails too
        raise ConformanceError(f"conformance(dt={dt!r}): a time step in seconds, above 0 and finite")
    missing: dict[str, str] = {}
    found = available(python, missing)
    chosen = list(found) if simulators is None else list(simulators)
    if simulators is None and progress:
        for name, why in missing.items():  # a default run measures what there is
            print(f"conformance: {name} left out: {why}", file=sys.stderr, flush=True)
    if simulators is not None and not chosen:
        raise ConformanceError(f"conformance(simulators=[]): name one or more of {sorted(found)}")
    twice = sorted({name for name in chosen if chosen.count(name) > 1})
    if twice:
        raise ConformanceError(f"simulator(s) {twice} named twice; name each once")
    unknown = [name for name in chosen if name not in found]
    unimportable = [
        f"{name} cannot be imported here: {why}" for name, why in missing.items() if name in chosen
    ]
    if unimportable:
        raise ConformanceError("; ".join(unimportable))
    if unknown:
        raise ConformanceError(
            f"simulator(s) {unknown} are not available here (available: {sorted(found)}); install the "
            "package, or leave them out"
        )
    paths = list(dict.fromkeys([*(os.fspath(f) for f in files), *(pack.files() if with_pack else [])]))
    if not paths:
        raise ConformanceError("conformance() needs files, or with_pack=True for the conformance pack")
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConformanceError(f"conformance(jobs={jobs!r}): give a whole number of processes, 1 or more")
    isolated = [name for name in chosen if found[name].isolated]
    results: list[Result] = []
    told = _Progress(len(paths), len(chosen), progress)
    # the simulators of processes of their own get the next files' jobs while this one is
    # compared (a few files ahead, so that memory stays that of a few files), and up to
    # `jobs` of them compute at once; the reference and the in-process simulators run here
    # meanwhile, a file at a time, collecting each file's rows in order
    pool = concurrent.futures.ThreadPoolExecutor(jobs)
    prepared: dict[int, Any] = {}
    pending: dict[int, dict[str, concurrent.futures.Future[Outputs]]] = {}

    def submit(index: int) -> None:
        if index >= len(paths) or index in prepared:
            return
        ready = prepared[index] = _prepare(paths[index], steps, batch, rate, seed, dt)
        pending[index] = (
            {name: pool.submit(found[name].run, paths[index], ready[1], ready[2]) for name in isolated}
            if not isinstance(ready, Exception)
            else {}
        )

    try:
        for index, path in enumerate(paths):
            for ahead in range(index, index + jobs + 2):
                submit(ahead)
            ready, submitted = prepared.pop(index), pending.pop(index)
            told.next(path)
            if isinstance(ready, MemoryLimitError):  # the command's size, not the file's fault
                raise ready
            if isinstance(ready, Exception):
                results.append(Result(path, "nirbridge", False, _one_line(ready)))
                continue
            graph, inputs, step = ready
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    expected = conventions.reference(graph, inputs, step)
            except MemoryLimitError:
                raise
            except Exception as error:  # noqa: BLE001 - a file the reference cannot run is a row
                for future in submitted.values():
                    future.cancel()
                results.append(Result(path, "nirbridge", False, _one_line(error)))
                continue
            spiking = [v for v in expected.values() if _spiking(v)]
            spikes = int(sum(v.sum() for v in spiking)) if spiking else None  # None: no spiking output
            if spikes is None and all(_within_tolerance_of_zero(v) for v in expected.values()):
                spikes = 0  # values no larger than the tolerance: as silent as a layer that never spikes
            bad = sum(int(np.size(v) - np.count_nonzero(np.isfinite(v))) for v in expected.values())
            note = (
                f"its outputs hold {bad} values that are not finite: check the file's parameters"
                if bad
                else None
            )
            results.append(Result(path, "nirbridge", True, None, 1.0, None, None, spikes, note))
            cache: dict[str, Outputs | None] = {}
            for name in chosen:
                results.append(
                    _measure(
                        name,
                        path,
                        found[name],
                        submitted.get(name),
                        inputs,
                        step,
                        expected,
                        spikes,
                        graph,
                        cache,
                    )
                )
    finally:
        for futures in pending.values():
            for future in futures.values():
                future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        for name in isolated:
            found[name].close()
    told.close()
    from .. import __version__

    versions = {"nirbridge": {"version": __version__, "python": sys.executable}}
    for name in chosen:
        versions[name] = {"version": found[name].version(), "python": found[name].python}
    return Report(paths, versions, results, steps, batch)


def _prepare(
    path: str, steps: int, batch: int, rate: float, seed: int, dt: float | None
) -> tuple[nir.NIRGraph, dict[str, np.ndarray], float] | Exception:
    """A file's graph, its inputs (``NAME.inputs.h5`` beside it, as the pack ships them,
    else random spikes) and its time step; the error where it cannot be read."""
    from ..io import read

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = read(path)
            if not isinstance(graph, nir.NIRGraph):
                raise ConformanceError(
                    f"it holds a single {type(graph).__name__} node, not a graph: conformance runs "
                    "graphs with Input and Output nodes (nir.NIRGraph.from_list(node) makes one)"
                )
            step = float(dt if dt is not None else (graph.metadata or {}).get("dt", 1e-4))
            fixed = path.removesuffix(".nir") + ".inputs.h5"
            if os.path.exists(fixed):
                inputs = pack.inputs_of(path, graph)
            else:
                inputs = pack.random_inputs(graph, steps, batch, rate, np.random.default_rng(seed))
    except Exception as error:  # noqa: BLE001 - a file that cannot be read is a row
        return error
    return graph, inputs, step


class _Progress:
    """How far :func:`conformance` is, on stderr: a tqdm bar over files x simulators on a
    terminal, else one line per file with an estimate of what is left (a log file of
    ``make conformance`` shows it as it goes)."""

    def __init__(self, files: int, simulators: int, enabled: bool) -> None:
        self.files, self.simulators, self.done = files, simulators, 0
        self.enabled, self.started = enabled, time.perf_counter()
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=files * simulators, unit="run", desc="conformance", file=sys.stderr)

    def next(self, path: str) -> None:
        """``path`` is about to be measured (the one before it is done)."""
        if self.done and self.bar is not None:
            self.bar.update(self.simulators)
        elif self.done and self.enabled:
            elapsed = time.perf_counter() - self.started
            left = elapsed / self.done * (self.files - self.done)
            print(
                f"conformance: {self.done} of {self.files} files in {elapsed:.0f} s, about {left:.0f} s "
                f"left; now {os.path.basename(path)} on {self.simulators} simulator(s)",
                file=sys.stderr,
                flush=True,
            )
        self.done += 1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.simulators)
            self.bar.close()
        elif self.enabled:
            elapsed = time.perf_counter() - self.started
            print(f"conformance: {self.files} files measured in {elapsed:.0f} s", file=sys.stderr, flush=True)


def _measure(
    name: str,
    path: str,
    simulator: Simulator,
    pending: concurrent.futures.Future[Outputs] | None,
    inputs: Mapping[str, np.ndarray],
    step: float,
    expected: Outputs,
    spikes: int | None,
    graph: nir.NIRGraph,
    cache: dict[str, Outputs | None],
) -> Result:
    """One simulator on one file: run (or collect its run from another process), compare
    and diagnose."""
    try:
        if pending is not None:
            got = pending.result()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = simulator.run(path, inputs, step)
        agreement, first = _compare(got, expected)
    except RunFailure as failure:
        return Result(path, name, True, f"fails while running: {failure}")
    except LoadFailure as failure:
        return Result(path, name, False, str(failure))
    except Exception as error:  # noqa: BLE001 - a simulator that fails is a row
        return Result(path, name, False, _one_line(error))
    diagnosis = None if agreement == 1.0 else _diagnose(graph, inputs, step, got, cache)
    return Result(path, name, True, None, agreement, first, diagnosis, spikes, getattr(got, "note", None))


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def write_json(report: Report, path: str | os.PathLike[str]) -> None:
    """``report.to_json()`` as a file, written to a temporary file and renamed."""
    from ..io import atomic_write

    text = json.dumps(report.to_json(), indent=1)

    def fill(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)

    atomic_write(path, fill)

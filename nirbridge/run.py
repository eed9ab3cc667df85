"""Run a whole input sequence through an imported graph in one call, with recordings.

``nirbridge.run(module, inputs)`` gives the values that stepping ``out, state =
module(x_t, state)`` over every time step gives, bit for bit where the operations are
the same, in fewer and larger operations (see :mod:`nirbridge.schedule`). The result,
a :class:`Run`, holds the outputs over time, the state after the last step (pass it
back as ``state=`` to continue), and the recorded node outputs and neuron state
variables; it converts to nir's ``NIRGraphData`` and draws rasters and traces.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import nir
import numpy as np
import torch

from .checks import (
    check_delayed,
    check_integers,
    check_keys,
    check_state_tensors,
    check_types,
    holds,
    rounding_problem,
    state_type_name,
    tensor_kind_problem,
)
from .engine import Backend, backend_for
from .engine import precision as _precision
from .engine import selfcheck as _selfcheck
from .engine.eager import eager_stepper
from .engine.schedule import (
    SPIKING,
    Level,
    RecordError,
    Request,
    chunk_length,
    is_built,
    level_of,
    run_bytes,
    step_bytes,
)
from .errors import InputError, NirBridgeError, NonFiniteWarning, ParameterError, SilentNetworkWarning
from .limits import check_memory
from .state import NODES, State, StateError, unpack_state
from .text import printable

if TYPE_CHECKING:
    from .metrics import Metrics

__all__ = ["RecordSummary", "Run", "RunSummary", "SequenceModule", "run", "silence_hint"]

_FIRST_CHUNK = 4  # steps run before the chunk length is chosen, where shapes are not declared
_PROGRESS_DELAY = 2.0  # seconds before an automatic progress bar appears


@dataclasses.dataclass(frozen=True)
class RecordSummary:
    """One record or output of a :class:`Run`, over all its steps and samples.

    Attributes:
        key: the record key, ``"output"`` or ``"output:<name>"``.
        spikes: whether the values are spikes.
        neurons: values per sample and step.
        total: the number of spikes (spikes only).
        per_step: spikes per neuron per step, averaged over samples (spikes only).
        rate: spikes per neuron per second (Hz): ``total / (neurons · B · T · dt)``;
            None for a run without ``dt`` (then ``per_step`` is the rate).
        silent: neurons that never fired in any sample (spikes only).
        minimum, mean, maximum: of the values (continuous values only).
    """

    key: str
    spikes: bool
    neurons: int
    total: int | None = None
    per_step: float | None = None
    rate: float | None = None
    silent: int | None = None
    minimum: float | None = None
    mean: float | None = None
    maximum: float | None = None

    def describe(self) -> str:
        """One line: spike totals and rates, or the range of the values."""
        if self.per_step is None and self.minimum is None:  # a batch of 0 samples: nothing to sum up
            return "no values: the run had a batch of 0 samples"
        if self.spikes:
            rate = f" ({self.rate:.4g} Hz)" if self.rate is not None else ""
            return (
                f"{self.total} spikes, {self.per_step:.4f} per neuron per step{rate}; "
                f"{self.silent} of {self.neurons} neurons silent"
            )
        return f"min {self.minimum:.4g}, mean {self.mean:.4g}, max {self.maximum:.4g}"


class RunSummary(dict[str, RecordSummary]):
    """:meth:`Run.summary`: a :class:`RecordSummary` per record and output, by key;
    prints as a table."""

    def table(self) -> str:
        """The summary as a text table, one row per record or output."""
        rows = [("record", "kind", "values", "summary")]
        rows += [
            (printable(key), "spikes" if s.spikes else "values", f"{s.neurons} neurons", s.describe())
            for key, s in self.items()
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join(
            "  ".join([*(cell.ljust(w) for cell, w in zip(row[:3], widths)), row[3]]).rstrip() for row in rows
        )

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython shows the table
        printer.text(self.table())


@dataclasses.dataclass
class Run:
    """The result of :func:`run`.

    Attributes:
        output: ``[T, B, ...]`` over time, or a dict of them by Output name.
        state: the state after the last step, in the module's layout; pass it as
            ``state=`` to :func:`run`, or to the module, to continue.
        records: recorded values over time, ``[T, B, ...]``, keyed by node path
            (``"lif"``, ``"block.lif"``) for node outputs and by path and variable
            (``"lif.v"``, ``"cuba.i"``) for neuron state variables after each step.
        dt: the time step of the module in seconds, or ``None`` for a native model
            that has none (snntorch and spikingjelly count time in steps; plain torch
            has no time): then rates are per step and plots count steps.
        dt_from: where ``dt`` comes from (the module's own, the cells' ``dt`` of a
            norse model, ``run(dt=...)``), or why there is none.
        spiking: the record keys that hold spikes.
        spiking_outputs: the names of Output nodes whose values are spikes.
        layout: record key -> (node names from the top graph down, observable), e.g.
            ``(("lif",), "output")``, ``(("block", "lif"), "v")``; a subgraph's output is
            its Output node's. For :meth:`to_nir_data`.
        thresholds: record key of a membrane potential (``"lif.v"``) -> the firing
            threshold of its node, per neuron (``[neurons...]`` or a scalar), float64 on
            the CPU; for the threshold lines of :meth:`plot`.
        unrecorded: for a native model, the layers that could not be recorded under
            a NIR node's name, and why.
        module, inputs, fresh: for :meth:`metrics`, with ``record="metrics"`` or ``"all"``:
            the module that ran, the input sequences it ran on (by Input name), and
            whether it started from a fresh state; ``None`` and empty otherwise.
        selfcheck: for the Triton back-end, the verdicts of its kernels' self-check
            on this run's device and dtype (:mod:`nirbridge.engine.selfcheck`): a
            family that failed ran eagerly.
        batch_first: ``run(..., batch_first=True)`` made this run: ``output`` and
            ``records`` are ``[B, T, ...]`` (views of time-first tensors);
            :meth:`time_first` gives them ``[T, B, ...]``.
    """

    output: torch.Tensor | dict[str, torch.Tensor]
    state: Any
    records: dict[str, torch.Tensor]
    dt: float | None
    spiking: frozenset[str] = frozenset()
    spiking_outputs: frozenset[str] = frozenset()
    layout: dict[str, tuple[tuple[str, ...], str]] = dataclasses.field(default_factory=dict, repr=False)
    thresholds: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, repr=False)
    dt_from: str = ""
    unrecorded: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)
    selfcheck: tuple[_selfcheck.Verdict, ...] = ()
    module: Any = dataclasses.field(default=None, repr=False)
    inputs: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, repr=False)
    fresh: bool = dataclasses.field(default=True, repr=False)
    batch_first: bool = False

    def __repr__(self) -> str:
        def shape(t: torch.Tensor) -> str:
            return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}"

        out = (
            shape(self.output)
            if isinstance(self.output, torch.Tensor)
            else "{" + ", ".join(f"{k!r}: {shape(v)}" for k, v in self.output.items()) + "}"
        )
        dt = f"{self.dt:g}" if self.dt is not None else f"None ({self.dt_from})"
        lines = [f"Run(dt={dt}, output={out}, records={len(self.records)})"]
        lines += [f"  {key}: {shape(value)}" for key, value in self.records.items()]
        lines += [f"  self-check: {verdict}" for verdict in self.selfcheck]
        return "\n".join(lines)

    def time_first(self) -> Run:
        """This run with ``output`` and ``records`` ``[T, B, ...]``: itself, unless
        ``batch_first`` (then views, no copy)."""
        if not self.batch_first:
            return self
        return _swap_time_batch(self, batch_first=False)

    def to_nir_data(self) -> nir.NIRGraphData:
        """The records as nir's ``NIRGraphData``.

        Spikes become ``EventData`` (each sample's events in time order, ``idx`` the
        flat neuron index, ``time`` = step · dt, padded with -1 / inf), continuous
        values ``TimeGriddedData`` of shape ``(B, T, neurons)`` with ``dt``. Node paths
        nest as in the graph: ``"block.lif"`` is ``nodes["block"].nodes["lif"]``; a
        node's output is the observable ``"output"`` and its state variables keep
        their names (``"v"``, ``"i"``). A run without ``dt`` needs ``run(..., dt=...)``.
        """
        if self.dt is None:
            raise RecordError(
                f"to_nir_data: this run has no dt ({self.dt_from}), and NIR's data count time in "
                "seconds; run it with nirbridge.run(..., dt=seconds_per_step)"
            )
        return records_to_graph_data(self.time_first().records, self.layout, self.spiking, self.dt)

    def metrics(self) -> Metrics:
        """NeuroBench's metrics of this run, per sample (:mod:`nirbridge.metrics`):
        synaptic operations, activation sparsity, membrane updates, neuron operations,
        parameter count, footprint and connection sparsity. They are counted from the
        records, so the run must record every node's output and every neuron's ``v``:
        ``run(module, x, record="metrics")`` (or ``"all"``).

        Raises:
            MetricsError: the run recorded too little, or is a native model's.
        """
        from .metrics import MetricsError, compute

        if self.module is None:
            raise MetricsError(
                "metrics() needs a run with record='metrics' (or 'all') of a graph module: "
                "nirbridge.run(nirbridge.nir_to_torch(graph), x, record='metrics'); a native model's "
                "run has no graph to count, so run its exported graph"
            )
        if not self.fresh:
            raise MetricsError(
                "metrics() counts a run from a fresh state, and this one went on from state=...: its "
                "first step's membranes and delayed edges belong to the run before. Run the whole "
                "sequence in one call; the metrics of separate batches of samples add up (a + b)"
            )
        return compute(self.module, self.time_first().records, self.inputs)

    def summary(self) -> RunSummary:
        """Spike totals and rates per spiking record and output (and the range of
        continuous ones): a dict of :class:`RecordSummary` by key that prints as a
        table."""
        return RunSummary(
            (key, _summarize(key, value, spikes, self.dt)) for key, (value, spikes) in self.series().items()
        )

    def series(self) -> dict[str, tuple[torch.Tensor, bool]]:
        """Every record, then every output not recorded under another key (``"output"``,
        or ``"output:<name>"`` for several), as key -> (values ``[T, B, ...]``, whether
        they are spikes), time first whatever ``batch_first``."""
        result = self.time_first()
        entries = {key: (value, key in result.spiking) for key, value in result.records.items()}
        outputs = {"output": result.output} if isinstance(result.output, torch.Tensor) else result.output
        recorded = {id(value) for value in result.records.values()}
        for name, value in outputs.items():
            if id(value) in recorded:
                continue  # the output of a recorded node: the same tensor, named once
            key = name if isinstance(result.output, torch.Tensor) else f"output:{name}"
            spikes = bool(result.spiking_outputs) if key == "output" else name in result.spiking_outputs
            entries[key] = (value, spikes)
        return entries

    def raster(self, *keys: str, sample: int = 0, ax: Any = None) -> Any:
        """Draw the spikes of the recorded nodes ``keys`` (one sample) as rasters, one
        panel per key on a shared time axis; returns the figure."""
        from .plot import raster

        return raster(self.time_first(), *keys, sample=sample, ax=ax)

    def plot(self, *keys: str, sample: int = 0, neurons: Sequence[int] | int | None = None) -> Any:
        """Draw recorded values over time: a raster for spikes (every neuron), traces for
        continuous values (the first 8), one panel per key (all records when none are
        given); ``neurons`` (the first so many, or those listed) chooses the neurons of
        both. Returns the figure."""
        from .plot import plot

        return plot(self.time_first(), *keys, sample=sample, neurons=neurons)


def run(
    module: Any,
    inputs: torch.Tensor | Mapping[str, torch.Tensor] | Sequence[torch.Tensor],
    *,
    state: Any = None,
    record: str | Iterable[str] = (),
    dt: float | None = None,
    chunk: int | None = None,
    backend: Backend = "auto",
    precision: _precision.Precision = "exact",
    compile: bool = False,
    progress: bool | None = None,
    bool_spikes: bool = False,
    selfcheck: bool = True,
    batch_first: bool = False,
) -> Run:
    """Run a whole time sequence through a module :func:`nirbridge.nir_to_torch` built.

    Layout: ``inputs`` are time first, ``[T, B, ...]`` (T steps of a batch of B
    samples), as the module steps them, and so are the run's ``output`` and
    ``records``. A batch-first tensor ``[B, T, ...]`` would run as B steps of T samples:
    pass ``batch_first=True`` for that layout, as for torch's ``nn.RNN``.

    The result equals stepping ``out, state = module(x[t], state)`` for ``t`` in
    ``range(T)``: spikes identical, every value equal to the last bit where the
    operations are the same (stateless layers run once over all steps of a chunk with
    the time axis folded into the batch axis; neurons are scanned over time; recurrent
    loops are stepped together). Gradients flow through it (BPTT with the surrogate
    spike gradients) on the eager path.

    Args:
        module: a module built by :func:`nirbridge.nir_to_torch` (or by an adapter's
            ``from_nir``), a ``nir.NIRGraph`` or a path to a ``.nir`` file (built with
            ``nir_to_torch(dt=dt)``), one of nirbridge's neuron or layer modules alone,
            or a native model (snntorch, norse, spikingjelly, plain torch), stepped as
            its simulator steps it: see :mod:`nirbridge.native` (it runs as its own
            code, ignoring ``chunk``; ``record="outputs"`` records its layers under
            the names of the NIR nodes they became; ``dt`` is its own, or ``None``).
        inputs: time first, ``[T, B, ...]``; several Input nodes take a dict by Input
            name (or a sequence in graph order). bool and integer spike tensors and
            narrower floats are cast to the module's floating dtype, chunk by chunk; a
            wider float raises :class:`InputError` where a node of nirbridge's takes it
            (casting would round it) and is passed on to the user's ``node_map``
            modules otherwise. Chunks are moved to the module's device.
        state: the state to start from (``None``: fresh), as the module returns it.
        record: node paths to record (``"lif"``: its output and state variables;
            ``"lif.output"``: only its output; ``"lif.v"``: one variable;
            ``"block.lif"``: inside a subgraph), or ``"all"`` for every node and
            variable, ``"outputs"`` for every node's output, ``"metrics"`` for what
            :meth:`Run.metrics` counts (every node's output, every neuron's ``v``).
        dt: for a graph or path, the time step to build it with; for a built
            module, it must match the module's own time step (rebuild otherwise); for
            a native model without one (snntorch, spikingjelly), the seconds per step.
        chunk: time steps per chunk; ``None`` picks one from the nodes' sizes (see
            :func:`nirbridge.engine.schedule.chunk_length`: short for large
            convolutions, long for small dense layers). Results do not depend on it.
        backend: ``"eager"`` (torch operations and in-place neuron kernels; every
            device; gradients), ``"compile"`` (each chunk as one ``torch.compile``'d
            function, time loops included, see :mod:`nirbridge.engine.compile`; falls
            back to eager with a warning if compilation fails, and runs eagerly when
            gradients are needed), ``"triton"`` (the neuron scans as Triton kernels, one
            launch per population and chunk, see :mod:`nirbridge.engine.triton`; CUDA),
            or ``"auto"``: the fastest exact one for a single run, ``"triton"`` on CUDA
            where Triton is installed and ``"eager"`` elsewhere (see
            :func:`nirbridge.engine.backend_for`).
        precision: ``"exact"``: float32 convolutions and matrix products in full
            float32 (no TF32) and no fused multiply-adds in compiled kernels, so results
            equal stepping on every device; ``"fast"``: TF32 and contraction where the
            hardware has them (see :mod:`nirbridge.engine.precision`). torch's own
            settings are as they were after the call.
        compile: ``True`` is ``backend="compile"``.
        progress: a tqdm progress bar; ``None`` shows one in a terminal or notebook
            once a run has taken two seconds.
        bool_spikes: store recorded spikes, and outputs that are spikes, as
            ``torch.bool`` (a quarter of float32's memory).
        selfcheck: with the Triton back-end, check each kernel family on this device
            and dtype against the eager back-end the first time it runs in the process
            (:mod:`nirbridge.engine.selfcheck`; ``False`` trusts them, for benchmarks,
            as ``NIRBRIDGE_SELFCHECK=0`` does).
        batch_first: the inputs are ``[B, T, ...]``, and the run's ``output`` and
            ``records`` are too (views: :meth:`Run.time_first` gives ``[T, B, ...]``);
            plots, summaries, metrics and NIR data are the same either way.

    Returns:
        A :class:`Run`.

    Raises:
        InputError: inputs that do not fit the graph's Input nodes, or ``T == 0``.
        StateError: a state that is not one this module returned.
        RecordError: ``record`` names a node or variable the module lacks.
    """
    if not isinstance(batch_first, (bool, np.bool_)):
        raise ParameterError(f"run(batch_first={batch_first!r}): give True or False")
    if batch_first:
        inputs = _time_first_inputs(inputs)
    if _native(module):
        _check_flags(selfcheck=selfcheck)  # native models run as their own code: no kernel to check
        result = _run_native(
            module, inputs, state, record, dt, backend, precision, compile, progress, bool_spikes
        )
        return _swap_time_batch(result, batch_first=True) if batch_first else result
    module, built_dt = _module(module, dt)
    level = level_of(module) if is_built(module) else None
    names = level.inputs if level is not None else ["input"]
    sequences = _inputs(inputs, names)
    dtype, device = _dtype_device(module)
    steps = _check_inputs(module, level, sequences, dtype)
    batch = next(iter(sequences.values())).shape[1]
    _check_state(level, state, "state", batch, torch.empty(0, dtype=dtype, device=device))
    request = _request(level, record)
    _check_flags(compile=compile, bool_spikes=bool_spikes, progress=progress, selfcheck=selfcheck)
    if chunk is not None:
        if isinstance(chunk, (bool, np.bool_)) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
            raise ParameterError(f"run(chunk={chunk!r}): give a whole number of time steps, at least 1")
        chunk = int(chunk)  # numpy integers too
    _precision.check(precision, "run")
    if compile and backend not in ("auto", "compile"):
        raise ParameterError(f"run(compile=True, backend={backend!r}): compile=True is backend='compile'")
    chosen = backend_for("compile" if compile else backend, device)

    if type(state) is State:  # the compiled back-end guards on the dict's type: no recompile
        state = dict(state)
    stepper = eager_stepper(module, level, request)
    if chosen == "compile":
        from .engine.compile import compiled_stepper

        stepper = compiled_stepper(module, level, request, stepper)
    elif chosen == "triton":
        from .engine.triton import triton_stepper

        stepper = triton_stepper(module, level, request)
    elif chosen == "cpu":
        from .engine.cpu import cpu_stepper

        stepper = cpu_stepper(module, level, request)

    need_grad = torch.is_grad_enabled() and (
        any(p.requires_grad for p in module.parameters())
        or any(s.requires_grad for s in sequences.values())
        or _any_grad(state)
    )
    spike_types = _spike_types(level, module)
    if level is not None:
        needed = run_bytes(level, request, steps, batch, dtype.itemsize, need_grad, spike_types, bool_spikes)
        check_memory(
            needed,
            f"run over T = {steps} steps at batch {batch} (outputs"
            + (", records" if record not in ((), []) else "")
            + (", and what autograd keeps for the backward pass" if need_grad else "")
            + ")",
            "record fewer nodes (record=... instead of 'all'), run fewer steps or a smaller batch per "
            "call and pass the state on, or run under torch.no_grad() when no gradient is needed",
            device,
        )
    passed = state  # as given, for the NaN check after the run
    collector = _Collector(steps, need_grad, bool_spikes, estimated=level is not None)
    known = step_bytes(level, batch, dtype.itemsize) if level is not None else None
    cpu = chosen == "cpu"
    length = chunk or (
        chunk_length(known, batch, steps, cpu) if known is not None else min(steps, _FIRST_CHUNK)
    )
    shortest = 2 if chosen == "compile" and chunk is None else 1  # compiled chunks take 2 steps or more
    length = max(shortest, length)
    bar = _progress(progress, steps)
    try:
        with _precision.precision(precision, device), _selfcheck.skipping(not selfcheck):
            start = 0
            while start < steps:
                stop = min(steps, start + length)
                if cpu and chunk is None and steps - stop <= length // 4:
                    stop = steps  # a short tail joins this chunk: one chunk's set-up fewer
                xs = {name: _cast(seq[start:stop], dtype, device) for name, seq in sequences.items()}
                try:
                    outputs, state, recorded, largest = stepper(xs, state)
                except Exception as error:
                    if not isinstance(error, NirBridgeError):
                        error.add_note(f"nirbridge: in steps {start} to {stop - 1}")
                    raise
                for (path, var), value in recorded.items():
                    spikes = var is None and spike_types.get(path) in SPIKING
                    collector.add((path, var), value, start, spikes)
                same = {id(value): key for key, value in recorded.items()}
                for name, value in outputs.items():  # an output that is also recorded shares its buffer
                    spikes = spike_types.get(name) in SPIKING
                    collector.add(("", name), value, start, spikes, alias=same.get(id(value)))
                if chunk is None and known is None and start == 0:  # from what the first chunk computed
                    length = max(shortest, chunk_length(largest, batch, steps, cpu))
                if bar is not None:
                    bar.update(stop - start)
                start = stop
    finally:
        if bar is not None:
            bar.close()
    result = _assemble(collector, level, spike_types, state, built_dt)
    result.thresholds = _thresholds(module, result)
    if record in ("all", "metrics"):  # what Run.metrics() counts from, kept only where it can
        result.module, result.inputs, result.fresh = module, sequences, passed is None
    if chosen == "triton":
        here = (str(device), _selfcheck.dtype_name(dtype))
        result.selfcheck = tuple(v for v in _selfcheck.verdicts() if (v.device, v.dtype) == here)
    _warn_silent(result, module, steps)
    _warn_nonfinite(result, sequences, passed)
    return _swap_time_batch(result, batch_first=True) if batch_first else result


def _assemble(
    collector: _Collector, level: Level | None, spike_types: Mapping[str, str], state: Any, dt: float
) -> Run:
    """The :class:`Run` from the whole-run buffers: outputs, records keyed by path."""
    output_names = level.outputs if level is not None else ["output"]
    outputs = {name: collector.result(("", name)) for name in output_names}
    records: dict[str, torch.Tensor] = {}
    layout: dict[str, tuple[tuple[str, ...], str]] = {}
    spiking: set[str] = set()
    nodes = _node_paths(level)
    for path, var in collector.keys():
        if path == "":
            continue
        key = path if var is None else f"{path}.{var}"
        if key in records:
            raise RecordError(
                f"record: {key!r} names both a node's output and a state variable of node "
                f"{key.rsplit('.', 1)[0]!r}; record them one at a time"
            )
        records[key] = collector.result((path, var))
        layout[key] = (nodes.get(path, tuple(path.split("."))), "output" if var is None else var)
        if var is None and spike_types.get(path) in SPIKING:
            spiking.add(key)
    return Run(
        output=outputs[output_names[0]] if len(output_names) == 1 else outputs,
        state=State(state) if type(state) is dict else state,
        records=records,
        dt=dt,
        spiking=frozenset(spiking),
        spiking_outputs=frozenset(n for n in output_names if spike_types.get(n) in SPIKING),
        layout=layout,
    )


def _check_flags(**flags: Any) -> None:
    """``run``'s switches are True or False (``progress`` also None, for automatic)."""
    for name, value in flags.items():
        if not (isinstance(value, (bool, np.bool_)) or (name == "progress" and value is None)):
            raise ParameterError(
                f"run({name}={value!r}): give True or False" + (" or None" if name == "progress" else "")
            )


def _native(module: Any) -> bool:
    """A model nirbridge did not build (snntorch, norse, spikingjelly, plain torch), or
    one of :mod:`nirbridge.native`'s wrappers; nirbridge's own lone modules are not."""
    if not isinstance(module, torch.nn.Module) or is_built(module):
        return False
    from .native import _WRAPPERS

    return isinstance(module, _WRAPPERS) or not type(module).__module__.startswith("nirbridge.")


def _run_native(
    module: torch.nn.Module,
    inputs: Any,
    state: Any = None,
    record: Any = (),
    dt: float | None = None,
    backend: Backend = "auto",
    precision: _precision.Precision = "exact",
    compile: bool = False,
    progress: bool | None = False,
    bool_spikes: bool = False,
    layers: Mapping[str, str] | None = None,
) -> Run:
    """:func:`run` for a native model, through :func:`nirbridge.native.run_native`
    (``layers``: NIR node name -> module path, for the records)."""
    from .native import run_native
    from .neurons.modules import check_dt

    if backend not in ("auto", "eager") or compile:
        raise ParameterError(
            f"run(backend={'compile' if compile else backend!r}): a native {type(module).__name__} runs as "
            "its own code (backend='auto' or 'eager'); import its NIR export to run it on nirbridge's engines"
        )
    _check_flags(bool_spikes=bool_spikes, progress=progress)
    _precision.check(precision, "run")
    if dt is not None:
        dt = check_dt(dt, "run(dt=...)")
    if isinstance(inputs, Mapping) and len(inputs) == 1:  # one input, whatever its Input node's name
        inputs = next(iter(inputs.values()))
    sequences = _inputs(inputs, ["input"])
    x = sequences["input"]
    floats = [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()]
    # the model's own dtype; one without floating tensors computes in the input's
    dtype = floats[0].dtype if floats else x.dtype if x.is_floating_point() else torch.get_default_dtype()
    device = floats[0].device if floats else x.device
    if x.is_floating_point() and not holds(dtype, x.dtype):
        raise InputError(
            f"input is {x.dtype}, but {type(module).__name__}'s parameters are {dtype}: its layers would "
            f"refuse or round it. Pass x.to({dtype}), or convert the model (model.to({x.dtype}))"
        )
    steps = _check_inputs(module, None, {"input": x}, dtype)
    if x.dtype != dtype or x.device != device:
        check_memory(
            x.numel() * torch.empty(0, dtype=dtype).element_size(),
            f"the input {list(x.shape)} as {dtype} on {device}",
            f"pass it as {dtype} on {device}, run fewer steps per call and pass the state on, "
            "or a smaller batch",
            device,
        )
    x = _cast(x, dtype, device)
    bar = _progress(progress, steps)
    try:
        with _precision.precision(precision, device):
            native = run_native(
                module,
                x,
                state=state,
                record=record,
                dt=dt,
                layers=layers,
                on_step=bar.update if bar is not None else None,
            )
    finally:
        if bar is not None:
            bar.close()
    output, records = native.output, native.records
    if bool_spikes:
        if native.spiking_output:
            output = output != 0
        records = {k: (v != 0 if k in native.spiking else v) for k, v in records.items()}
    result = Run(
        output=output,
        state=native.state,
        records=records,
        dt=native.dt,
        spiking=native.spiking,
        spiking_outputs=frozenset({"output"}) if native.spiking_output else frozenset(),
        layout={key: ((key,), "output") for key in records},
        dt_from=native.dt_from,
        unrecorded=native.unrecorded,
    )
    _warn_silent(result, module, steps)
    _warn_nonfinite(result, sequences, state)
    return result


class SequenceModule(torch.nn.Module):
    """A module that runs whole sequences: ``output, state = m(x, state=None)``, with
    ``x`` time first (``[T, B, ...]``) and :func:`run`'s options fixed at construction.

    It is what training wrappers need: ``DistributedDataParallel(SequenceModule(gm))``
    or a Lightning module calls ``forward`` once per sequence, so gradients are reduced
    across replicas once per backward pass. ``module`` stays a submodule, so parameters,
    ``state_dict`` and ``.to()`` reach it.
    """

    def __init__(self, module: torch.nn.Module, **options: Any) -> None:
        super().__init__()
        allowed = {"record", "chunk", "backend", "precision", "compile", "progress", "bool_spikes"}
        unknown = set(options) - allowed
        if unknown:
            raise ParameterError(
                f"SequenceModule: unknown run options {sorted(unknown)}; use {', '.join(sorted(allowed))}"
            )
        self.module = module
        self.options = {"progress": False, **options}

    def forward(self, x: Any, state: Any = None) -> tuple[Any, Any]:
        result = run(self.module, x, state=state, **self.options)
        return result.output, result.state


def records_to_graph_data(
    records: Mapping[str, torch.Tensor],
    layout: Mapping[str, tuple[tuple[str, ...], str]],
    spiking: frozenset[str],
    dt: float,
) -> nir.NIRGraphData:
    """Records ``[T, B, ...]`` as ``NIRGraphData``, nested by node path (see :meth:`Run.to_nir_data`)."""
    root = nir.NIRGraphData(nodes={})
    for key, value in records.items():
        path, observable = layout.get(key, (tuple(key.split(".")), "output"))
        *parents, leaf = path
        graph = root
        for part in parents:
            child = graph.nodes.get(part)
            if not isinstance(child, nir.NIRGraphData):
                child = graph.nodes[part] = nir.NIRGraphData(nodes={})
            graph = child
        node = graph.nodes.get(leaf)
        if not isinstance(node, nir.NIRNodeData):
            node = graph.nodes[leaf] = nir.NIRNodeData(observables={})
        array = value.detach().cpu()
        steps, batch = array.shape[0], array.shape[1]
        neurons = math.prod(array.shape[2:])  # not -1: a batch of 0 leaves it ambiguous
        grid = array.reshape(steps, batch, neurons).transpose(0, 1).numpy()  # (B, T, neurons)
        if key in spiking:
            node.observables[observable] = _events(grid != 0, dt)
        else:
            node.observables[observable] = nir.TimeGriddedData(np.ascontiguousarray(grid), dt)
    return root


def _events(spikes: np.ndarray, dt: float) -> nir.EventData:
    """Spikes ``(B, T, neurons)`` as EventData: events in time order (neuron order
    within a step), ``time = step * dt``, padded with index -1 and time inf."""
    samples, steps, neurons = spikes.shape
    counts = spikes.reshape(samples, steps * neurons).sum(axis=1)
    width = int(counts.max()) if samples else 0
    idx = np.full((samples, width), -1, dtype=np.int64)
    time = np.full((samples, width), np.inf)
    for sample in range(samples):
        step, neuron = np.nonzero(spikes[sample])  # row-major: sorted by step, then neuron
        idx[sample, : step.size] = neuron
        time[sample, : step.size] = step * dt
    return nir.EventData(idx=idx, time=time, n_neurons=neurons, t_max=steps * dt)


# ----------------------------------------------------------------------------- helpers


def _module(module: Any, dt: float | None) -> tuple[torch.nn.Module, float]:
    """The module to run and its time step."""
    from .interpret import nir_to_torch
    from .neurons.modules import DEFAULT_DT, check_dt

    if isinstance(module, (str, os.PathLike, nir.NIRGraph)):
        module = nir_to_torch(module, dt=dt)
    if not isinstance(module, torch.nn.Module):
        raise InputError(
            f"run expects a module built by nirbridge.nir_to_torch, a nir.NIRGraph or a path to a "
            f".nir file; got {type(module).__name__}"
        )
    own = module.meta.get("nirbridge", {}).get("dt") if hasattr(module, "meta") else None
    if own is None:
        own = getattr(module, "dt", None)
    if dt is not None:
        dt = check_dt(dt, "run(dt=...)")
        if own is not None and not math.isclose(dt, own, rel_tol=1e-12):
            raise ParameterError(
                f"run(dt={dt:g}): the module was built for dt={own:g}, and its neurons integrate "
                f"with that step. Rebuild it with nirbridge.nir_to_torch(graph, dt={dt:g}), or drop dt=."
            )
        return module, dt
    return module, float(own) if own is not None else DEFAULT_DT


def _time_first_inputs(inputs: Any) -> Any:
    """``run(batch_first=True)``'s inputs ``[B, T, ...]`` as ``[T, B, ...]`` views; what
    is not a tensor is left for :func:`_inputs` to refuse."""

    def swap(name: str, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if value.dim() < 2:
            raise InputError(
                f"input {name!r} has shape {list(value.shape)}; with batch_first=True an input is "
                "[B, T, ...]: a batch axis, then time"
            )
        return value.transpose(0, 1)

    if isinstance(inputs, Mapping):
        return {key: swap(str(key), value) for key, value in inputs.items()}
    if isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        return [swap(f"#{i}", value) for i, value in enumerate(inputs)]
    return swap("input", inputs)


def _swap_time_batch(result: Run, batch_first: bool) -> Run:
    """``result`` with its output and records' first two axes swapped (views); a tensor
    that is both an output and a record stays one tensor, as :meth:`Run.series` expects."""
    swapped: dict[int, torch.Tensor] = {}

    def swap(value: torch.Tensor) -> torch.Tensor:
        return swapped.setdefault(id(value), value.transpose(0, 1))

    output = (
        swap(result.output)
        if isinstance(result.output, torch.Tensor)
        else {key: swap(value) for key, value in result.output.items()}
    )
    records = {key: swap(value) for key, value in result.records.items()}
    return dataclasses.replace(result, output=output, records=records, batch_first=batch_first)


def _inputs(inputs: Any, names: list[str]) -> dict[str, torch.Tensor]:
    if isinstance(inputs, torch.Tensor):
        if len(names) != 1:
            raise InputError(
                f"the graph has {len(names)} Input nodes {names}; pass a dict {{name: [T, B, ...]}} "
                "or a sequence of tensors in that order"
            )
        chosen = {names[0]: inputs}
    elif isinstance(inputs, Mapping):
        unexpected = sorted(set(map(str, inputs)) - set(names))
        missing = [n for n in names if n not in inputs]
        if unexpected or missing:
            raise InputError(
                f"inputs: the graph's Input nodes are {names}; "
                + (f"unexpected {unexpected}" if unexpected else "")
                + ("; " if unexpected and missing else "")
                + (f"missing {missing}" if missing else "")
            )
        chosen = {n: inputs[n] for n in names}
    elif isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        if len(inputs) != len(names):
            raise InputError(f"inputs: {len(inputs)} tensors for the {len(names)} Input nodes {names}")
        chosen = dict(zip(names, inputs))
    else:
        raise InputError(
            f"inputs must be a tensor [T, B, ...] or a dict of them, got {type(inputs).__name__}"
        )
    for name, value in chosen.items():
        if not isinstance(value, torch.Tensor):
            raise InputError(f"input {name!r} must be a torch.Tensor [T, B, ...], got {type(value).__name__}")
        unusable = tensor_kind_problem(value)
        if unusable:
            raise InputError(f"input {name!r} is {unusable}")
    return chosen


def _dtype_device(module: torch.nn.Module) -> tuple[torch.dtype, torch.device]:
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype, tensor.device
    return torch.get_default_dtype(), torch.device("cpu")


def _check_inputs(
    module: torch.nn.Module, level: Level | None, sequences: Mapping[str, torch.Tensor], dtype: torch.dtype
) -> int:
    io_nodes = module.meta["nirbridge"].get("io", {}) if level is not None else {}
    steps = batch = None
    for name, x in sequences.items():
        shape = _declared_shape(io_nodes.get(name))
        if x.dim() < 2 or (shape is not None and tuple(x.shape[2:]) != shape):
            raise InputError(_sequence_problem(name, tuple(x.shape), shape))
        if not holds(dtype, x.dtype) and not x.is_complex():
            takers = _own_takers(module, level, name)
            if (takers is None or takers) and x.is_floating_point():
                raise InputError(rounding_problem(name, x.dtype, dtype, takers or ()))
            if not x.is_floating_point():
                check_integers(name, x, dtype, takers or ())
        if x.is_complex():
            raise InputError(f"input {name!r} is complex ({x.dtype}); pass real values")
        if x.layout != torch.strided or x.is_meta:
            kind = "a meta tensor (no data)" if x.is_meta else f"a {x.layout} tensor"
            raise InputError(f"input {name!r} is {kind}; pass a dense tensor with data (x.to_dense())")
        if steps is None:
            steps, batch = x.shape[0], x.shape[1]
        elif (x.shape[0], x.shape[1]) != (steps, batch):
            raise InputError(
                f"inputs disagree on [T, B]: {list(x.shape[:2])} for {name!r}, {[steps, batch]} before"
            )
    assert steps is not None and batch is not None
    if steps == 0:
        raise InputError("inputs hold no time steps (T = 0); pass at least one step")
    return steps


def _own_takers(module: torch.nn.Module, level: Level | None, name: str) -> tuple[str, ...] | None:
    """The nodes of nirbridge's own that take input ``name`` (in the module's dtype), and
    the nodes fed only by delayed edges, which start from zeros of the first input's
    dtype; None where unknown (a module not built by nirbridge)."""
    known = module.meta["nirbridge"].get("own_takers") if level is not None else None
    if known is None:
        return None
    return tuple(known.get(name, ())) + (tuple(level.late_shapes) if name == level.inputs[0] else ())


def _sequence_problem(name: str, got: tuple[int, ...], shape: tuple[int, ...] | None) -> str:
    """Why an input is not ``[T, B, *shape]``, and the axis to add where one is missing."""
    features = ", ".join(map(str, shape)) if shape else "..."
    message = (
        f"input {name!r} has shape {list(got)}, but run takes time first, then batch: [T, B, {features}]"
    )
    if shape is not None and got[1:] == shape:
        return (
            f"{message}. It looks like the sequence of one sample [T, {features}]: pass x.unsqueeze(1); "
            f"or one time step of a batch [B, {features}]: pass x.unsqueeze(0), or call the module "
            "for one step, out, state = gm(x, state)"
        )
    if shape is not None and got == shape:
        return f"{message}. It looks like one sample at one time step: pass x.reshape(1, 1, {features})"
    if shape is not None and got[-len(shape) :] == shape:
        return f"{message}. The features fit, so an axis is missing or one too many"
    return message + (f" ({list(shape)} per sample, as the Input node declares)" if shape else "")


def _declared_shape(node: Any) -> tuple[int, ...] | None:
    if node is None:
        return None
    try:
        shape = np.asarray(node.input_type["input"]).reshape(-1)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    if shape.dtype == object or (shape < 0).any():
        return None
    return tuple(int(s) for s in shape)


def _check_state(level: Level | None, state: Any, where: str, batch: int, reference: torch.Tensor) -> None:
    """A state must be the kind of dict this module returns: same node and delayed keys,
    entries of the same types, tensors on the module's device and dtype, shaped for
    this batch (or a batch of 1)."""
    if state is None or level is None:
        return
    try:
        nodes, delayed = unpack_state(state)
    except StateError as error:
        raise StateError(f"{where}: {error}") from None
    stateful = [n for n, s in level.stateful.items() if s]
    check_keys(nodes, delayed, stateful, level.delayed_sources, where)
    check_types(nodes, stateful, [state_type_name(level.modules[n]) for n in stateful], where)
    shapes = level.module.meta["nirbridge"].get("state_shapes", {})
    check_state_tensors(nodes, stateful, [shapes.get(n) for n in stateful], reference, batch, where)
    delayed_shapes = level.module.meta["nirbridge"].get("delayed_shapes", {})
    sources = list(level.delayed_sources)
    check_delayed(delayed, sources, [delayed_shapes.get(s) for s in sources], reference, batch, where)
    for name, child in level.children.items():
        _check_state(child, nodes[name], f"{where}[{NODES!r}][{name!r}]", batch, reference)


def _request(level: Level | None, record: str | Iterable[str]) -> Request:
    """What to record, per level, from ``record=`` (see :func:`run`)."""
    if record is None or isinstance(record, (bytes, Mapping)) or not isinstance(record, (str, Iterable)):
        raise RecordError(
            f"run(record={record!r}): give a node path ('lif'), a list of them, 'all', 'outputs' or "
            "'metrics', or () to record nothing"
        )
    if not isinstance(record, str):
        record = list(record)
    if level is None:
        if record != []:
            raise RecordError("record= needs a module built by nirbridge.nir_to_torch (a graph)")
        return Request()
    requests = {id(lv): Request() for lv in level.walk()}
    for lv in level.walk():
        for name in lv.children:
            requests[id(lv)].nested[name] = requests[id(lv.children[name])]

    def add(lv: Level, name: str, output: bool, variables: set[str] | bool | None) -> None:
        req = requests[id(lv)]
        if output:
            req.outputs.add(name)
        if variables is False or not lv.stateful[name] or name in lv.children:
            return
        if variables is None or req.variables.get(name, set()) is None:
            req.variables[name] = None
        else:
            req.variables.setdefault(name, set()).update(variables)  # type: ignore[union-attr]

    if record in ("all", "outputs"):
        for lv in level.walk():
            for name in lv.modules:
                add(lv, name, True, None if record == "all" else False)
        return requests[id(level)]
    if record == "metrics":  # what Run.metrics() counts from: every output, every neuron's v
        from .metrics.counting import NEURON_OPS

        for lv in level.walk():
            for name in lv.modules:
                add(lv, name, True, {"v"} if lv.types.get(name) in NEURON_OPS else False)
        return requests[id(level)]
    if isinstance(record, str):
        record = [record]
    nodes = {lv.prefix + name: (lv, name) for lv in level.walk() for name in lv.modules}
    for key in record:
        if not isinstance(key, str):
            raise RecordError(f"record: node paths are strings, got {key!r}")
        owner, _, var = key.rpartition(".")
        if key in nodes:
            add(*nodes[key], True, None)
        elif owner in nodes and var == "output":
            add(*nodes[owner], True, False)
        elif (
            owner in nodes
            and nodes[owner][0].stateful[nodes[owner][1]]
            and nodes[owner][1] not in nodes[owner][0].children
        ):
            add(*nodes[owner], False, {var})
        else:
            listed = f"{list(nodes)[:20]}{' ...' if len(nodes) > 20 else ''}"
            raise RecordError(
                f"record: {key!r} is not a node of this graph (nor 'node.output' or 'node.variable' of "
                f"a neuron); nodes: {listed}, or 'all' or 'outputs'"
            )
    return requests[id(level)]


def _node_paths(level: Level | None) -> dict[str, tuple[str, ...]]:
    """Record path -> node names from the top graph down; a subgraph's own output is
    its Output node's value, so it maps to that node."""
    if level is None:
        return {}
    paths: dict[str, tuple[str, ...]] = {}
    for lv in level.walk():
        for name in lv.modules:
            child = lv.children.get(name)
            if child is not None and len(child.outputs) == 1:
                paths[lv.prefix + name] = (*child.path, child.outputs[0])
            else:
                paths[lv.prefix + name] = (*lv.path, name)
    return paths


def _any_grad(state: Any) -> bool:
    from torch.utils._pytree import tree_leaves

    return any(isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in tree_leaves(state))


def _summarize(key: str, value: torch.Tensor, spikes: bool, dt: float | None) -> RecordSummary:
    steps, batch = value.shape[0], value.shape[1]
    neurons = math.prod(value.shape[2:])
    data = value.detach()
    if batch == 0:  # no sample: no rate, no silent neuron, no range (not NaN, not "all silent")
        return RecordSummary(key, spikes, neurons, total=0 if spikes else None)
    if spikes:
        total = int(torch.count_nonzero(data))
        per_step = total / max(1, steps * batch * neurons)
        return RecordSummary(
            key,
            True,
            neurons,
            total=total,
            per_step=per_step,
            rate=per_step / dt if dt is not None else None,
            silent=int((~data.reshape(steps * batch, neurons).any(dim=0)).sum()),
        )
    values = data.double()
    empty = values.numel() == 0
    return RecordSummary(
        key,
        False,
        neurons,
        minimum=math.nan if empty else float(values.min()),
        mean=math.nan if empty else float(values.mean()),
        maximum=math.nan if empty else float(values.max()),
    )


def silence_hint(dt: float | None, module: Any) -> str:
    """What commonly makes a spiking network silent, for this module's time step."""
    if dt is None:
        return (
            "Check that the inputs are strong enough for the thresholds (and that the weights are "
            "the trained ones)"
        )
    meta = getattr(module, "meta", None)
    info = meta.get("nirbridge", {}) if isinstance(meta, dict) else {}
    if isinstance(info, dict) and info.get("dt_assumed"):
        return (
            f"The graph records no time step, so it runs at the assumed dt = {dt:g} s; if it was "
            "trained at another, build it with nir_to_torch(..., dt=...) (--dt on the command line). "
            "Otherwise the inputs may be too weak for the thresholds: record the membranes "
            "(record=['<node>.v']) and plot them"
        )
    return (
        f"It runs at dt = {dt:g} s: check that this is the time step it was trained at, and that the "
        "inputs are strong enough for the thresholds (record the membranes, record=['<node>.v'], and "
        "plot them)"
    )


def _warn_silent(result: Run, module: Any, steps: int) -> None:
    """One :class:`SilentNetworkWarning` naming every spiking record and output in which
    no neuron of any sample fired (an output that is a recorded node's is named once)."""
    silent = [
        key
        for key, (value, spikes) in result.series().items()
        if spikes and value.numel() and not bool(value.detach().any())  # no full-size temporary
    ]
    if not silent:
        return
    named = [
        repr(key) if key in result.records else f"output {_output_name(result, key)!r}" for key in silent
    ]
    unrecorded = (
        ""
        if any(key in result.records for key in silent)
        else " (record='outputs' shows which of its nodes stop firing)"
    )
    warnings.warn(
        f"nirbridge.run: no spike in {', '.join(named)} over {steps} steps{unrecorded}. "
        + silence_hint(result.dt, module),
        SilentNetworkWarning,
        stacklevel=3,
    )


def _warn_nonfinite(result: Run, inputs: Mapping[str, torch.Tensor], state: Any = None) -> None:
    """One :class:`NonFiniteWarning` naming every output and record that holds NaN or
    infinity, with the first step where it does, and whether the inputs or the state
    passed in held any."""
    found = []
    for key, (value, _) in result.series().items():
        step = _first_nonfinite(value)
        if step is not None:
            name = repr(key) if key in result.records else f"output {_output_name(result, key)!r}"
            found.append(f"{name} from step {step}")
    fed = [f"{n!r} from step {step}" for n, x in inputs.items() if (step := _first_nonfinite(x)) is not None]
    sources = [f"the input {', '.join(fed)}"] if fed else []
    held = _nonfinite_entries(state, ())
    if held:
        sources.append(
            f"the state passed in (at {', '.join(map(repr, held[:5]))}{', ...' if len(held) > 5 else ''})"
        )
    if not found and not sources:
        return
    if not found:  # NaN in, none out: what the neurons did with it is in no record
        message = (
            f"{' and '.join(sources)} holds NaN or infinity; no output or record does, but the "
            "membranes that took it may (record='all' shows them)"
        )
    elif sources:
        message = (
            f"NaN or infinity in {', '.join(found)}; {' and '.join(sources)} holds some, which the "
            "neurons carry on"
        )
    else:
        message = (
            f"NaN or infinity in {', '.join(found)}; no input or state passed in held any: a parameter "
            "or the time step makes the equations diverge"
        )
    warnings.warn(f"nirbridge.run: {message}", NonFiniteWarning, stacklevel=3)


def _nonfinite_entries(state: Any, path: tuple[str, ...]) -> list[str]:
    """The dotted paths of the floating tensors in ``state`` (nested mappings, named
    tuples, tuples and lists) that hold NaN or infinity."""
    if isinstance(state, torch.Tensor):
        bad = state.is_floating_point() and state.numel() and not bool(torch.isfinite(state.detach().sum()))
        return [".".join(path) or "state"] if bad and not bool(torch.isfinite(state.detach()).all()) else []
    if isinstance(state, Mapping):
        items = [(str(k), v) for k, v in state.items()]
    elif isinstance(state, tuple) and hasattr(state, "_fields"):
        items = list(zip(state._fields, state))
    elif isinstance(state, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(state)]
    else:
        return []
    return [entry for key, value in items for entry in _nonfinite_entries(value, (*path, key))]


def _first_nonfinite(values: torch.Tensor) -> int | None:
    """The first step (along the first axis) holding NaN or infinity, or ``None``. One
    sum answers for nearly every run: a finite sum has no NaN or infinity in it (one that
    overflows only sends the check the long way)."""
    if not values.is_floating_point() or not values.numel():
        return None
    wide = values.detach()
    if wide.element_size() == 1:  # float8 has neither sum nor isfinite
        wide = wide.float()
    if bool(torch.isfinite(wide.sum())):
        return None
    bad = ~torch.isfinite(wide).reshape(wide.shape[0], -1).all(dim=1)
    return int(bad.nonzero()[0]) if bool(bad.any()) else None


def _output_name(result: Run, key: str) -> str:
    """The Output node's name behind a :meth:`Run.series` key (``"output"``, ``"output:<name>"``)."""
    if key.startswith("output:"):
        return key[len("output:") :]
    return next(iter(result.spiking_outputs), key)


def _thresholds(module: torch.nn.Module, result: Run) -> dict[str, torch.Tensor]:
    """Record key of each recorded membrane potential -> its node's ``v_threshold``."""
    thresholds: dict[str, torch.Tensor] = {}
    for key, (_, observable) in result.layout.items():
        if observable != "v":
            continue
        try:
            node = module.get_submodule(key[: -len(".v")])
        except AttributeError:
            continue
        value = getattr(node, "v_threshold", None)
        if isinstance(value, torch.Tensor):
            thresholds[key] = value.detach().to("cpu", torch.float64).clone()
    return thresholds


def _spike_types(level: Level | None, module: torch.nn.Module) -> dict[str, str]:
    """NIR type names by record path; Output nodes and subgraphs take their source's."""
    if level is None:
        nir_type = getattr(module, "nir_type", None)
        name = getattr(nir_type, "__name__", type(module).__name__)
        return {"output": name}
    types: dict[str, str] = {}

    def visit(lv: Level) -> str | None:
        for name, child in lv.children.items():
            types[lv.prefix + name] = visit(child) or "NIRGraph"
        for name in lv.types:
            types.setdefault(lv.prefix + name, lv.types[name])
        sources = [lv.incoming[o] for o in lv.outputs]
        if len(sources) == 1 and len(sources[0]) == 1:
            return types.get(lv.prefix + sources[0][0][0])
        return None

    visit(level)
    for name in level.outputs:
        if len(level.incoming[name]) == 1:
            types[name] = types.get(level.incoming[name][0][0], "")
    return types


class _Collector:
    """Whole-run buffers for chunk results: preallocated once and filled in place, or,
    when gradients must flow, kept as chunks and concatenated at the end."""

    def __init__(self, steps: int, need_grad: bool, bool_spikes: bool, estimated: bool = False) -> None:
        self.steps, self.need_grad, self.bool_spikes = steps, need_grad, bool_spikes
        self.estimated = estimated  # run checked the whole run's memory; else each buffer is
        self.buffers: dict[Any, torch.Tensor] = {}
        self.pieces: dict[Any, list[torch.Tensor]] = {}
        self.aliases: dict[Any, Any] = {}

    def add(self, key: Any, value: Any, start: int, spikes: bool, alias: Any = None) -> None:
        if not isinstance(value, torch.Tensor):
            return  # a subgraph with several outputs: its outputs are recorded inside
        if start == 0 and alias is not None:
            self.aliases[key] = alias
        if key in self.aliases:
            return
        if spikes and self.bool_spikes:
            value = value.detach() != 0 if not self.need_grad else value != 0
        if self.need_grad:
            self.pieces.setdefault(key, []).append(value)
            return
        buffer = self.buffers.get(key)
        if buffer is None:
            if not self.estimated:
                check_memory(
                    self.steps * value[:1].numel() * value.element_size(),
                    f"{'the output' if key == ('', 'output') else f'record {key[0] or key[1]!r}'} over "
                    f"T = {self.steps} steps ({list(value.shape[1:])} per step)",
                    "run fewer steps or a smaller batch per call and pass the state on, or record fewer "
                    "nodes",
                    value.device,
                )
            buffer = value.new_empty((self.steps, *value.shape[1:]))
            self.buffers[key] = buffer
        buffer[start : start + value.shape[0]] = value

    def keys(self) -> list[Any]:
        return [*(self.pieces if self.need_grad else self.buffers), *self.aliases]

    def result(self, key: Any) -> torch.Tensor:
        """The whole run of ``key``; an output that aliases a record is the record's
        tensor itself (with gradients, its chunks are joined once)."""
        key = self.aliases.get(key, key)
        if self.need_grad:
            pieces = self.pieces[key]
            if len(pieces) > 1:
                self.pieces[key] = pieces = [torch.cat(pieces)]
            return pieces[0]
        return self.buffers[key]


def _cast(x: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``x`` on ``device``, in ``dtype`` where that holds it: spikes (bool, integers) and
    narrower floats are cast; a wider float reaches only the user's modules (``_check_inputs``)."""
    if x.device != device:
        x = x.to(device, non_blocking=True)
    if x.dtype != dtype and (holds(dtype, x.dtype) or not (x.is_floating_point() or x.is_complex())):
        x = x.to(dtype)  # integers were checked against the float's exact range (_check_inputs)
    return x


def _interactive() -> bool:
    if "ipykernel" in sys.modules:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _progress(progress: bool | None, steps: int) -> Any:
    if progress is False or (progress is None and not _interactive()):
        return None
    if "ipykernel" in sys.modules and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm  # a notebook widget
    else:  # a text bar: tqdm.auto warns in notebooks without ipywidgets
        from tqdm.std import tqdm

    return tqdm(
        total=steps,
        unit="step",
        desc="nirbridge.run",
        delay=_PROGRESS_DELAY if progress is None else 0.0,
        leave=progress is True,
    )

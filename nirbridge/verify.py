"""Equivalence reports: run two modules on the same inputs and compare them node by node.

``nirbridge.verify(reference, candidate, inputs)`` runs both with :func:`nirbridge.run`,
recording every node both can record (a module nirbridge built records every node and
state variable; a native snntorch, norse, spikingjelly or torch model records each
layer's output under the name of the NIR node it became), and compares each output and
each record the two have in common: spikes by
count per neuron and step by step, continuous values by their largest and mean
absolute difference. The :class:`Report` names the first time step and node at which
the two diverge; a divergence shows first at the node that causes it, since the nodes
it feeds diverge at the same step or later and come after it in step order.

Agreement must mean something:

- NaN or infinity on either side is a difference (two NaNs do not agree).
- Spike comparisons carry both sides' spike totals. One in which neither side spikes is
  *silent*: it proves nothing, so it warns (:class:`nirbridge.SilentNetworkWarning`)
  and the report is not ``ok`` unless ``allow_silent=True``.
- Continuous values are compared relative to each neuron's magnitude: ``a`` and ``b``
  (the reference) diverge where ``|a − b| > atol + rtol·max(|b|, m)``, ``m`` the
  largest finite ``|b|`` of that neuron over all steps and samples, so float32 rounding
  in a membrane of size 1e3 is not taken for a divergence at the values near 0.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, get_args

import nir
import torch

from .engine import Backend
from .engine.schedule import is_built, level_of
from .errors import NirBridgeError, NonFiniteWarning, SilentNetworkWarning
from .run import Run, _module, _native, _run_native, run, silence_hint
from .text import printable

__all__ = ["BACKENDS", "Comparison", "Report", "VerifyError", "verify"]


@dataclasses.dataclass
class Comparison:
    """How one output or record of the two runs compares.

    Attributes:
        key: ``"output"`` (or ``"output:<name>"``), or a record key (``"lif"``, ``"lif.v"``).
        spikes: whether the values are spikes (compared exactly).
        max_abs, mean_abs: largest and mean absolute difference over all values.
        spike_agreement: for spikes, the fraction of neurons (per sample) whose spike
            counts agree; ``None`` for continuous values.
        max_count_difference: for spikes, the largest difference in spike counts.
        first_step: the first time step at which the values diverge (spikes differ, a
            difference exceeds ``atol + rtol·max(|reference|, m)`` with ``m`` that
            neuron's largest ``|reference|``, or either side is NaN or infinite);
            ``None`` if they never do.
        problem: set when the two cannot be compared (shapes differ).
        count_differences: for spikes, candidate minus reference spike count of each
            neuron, ``[B, ...]``; ``None`` for continuous values.
        reference_spikes, candidate_spikes: for spikes, each side's total spike count
            over all steps, samples and neurons; ``None`` for continuous values.
    """

    key: str
    spikes: bool
    max_abs: float
    mean_abs: float
    spike_agreement: float | None
    max_count_difference: int | None
    first_step: int | None
    problem: str | None = None
    count_differences: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    reference_spikes: int | None = None
    candidate_spikes: int | None = None

    @property
    def ok(self) -> bool:
        """The two agree (for spikes, also where neither side spikes: see :attr:`silent`)."""
        return self.problem is None and self.first_step is None

    @property
    def silent(self) -> bool:
        """Spikes that agree because neither side spikes at all: a vacuous agreement."""
        return self.spikes and self.ok and self.reference_spikes == 0 and self.candidate_spikes == 0

    @property
    def status(self) -> str:
        """``"ok"``, ``"silent"``, ``"DIFFERS"`` or why the two could not be compared."""
        if self.problem is not None:
            return self.problem
        return "DIFFERS" if not self.ok else "silent" if self.silent else "ok"


@dataclasses.dataclass
class Report:
    """The result of :func:`verify`: one :class:`Comparison` per output and common record.

    ``ok`` holds when every comparison agrees and, unless ``allow_silent``, none is
    silent (no spike on either side); ``agree`` only asks for agreement; ``silent``
    lists the silent comparisons' keys. ``first_divergence`` is ``(step, key)`` of the
    earliest divergence (ties broken by the order one step evaluates nodes), or
    ``None``. ``only_reference``/``only_candidate`` list records (layers, for a native
    model) the other run lacks: compared on one side only. ``unrecorded`` says which
    layers of a native model could not be recorded, and why.
    """

    comparisons: list[Comparison]
    atol: float
    rtol: float
    steps: int
    only_reference: list[str] = dataclasses.field(default_factory=list)
    only_candidate: list[str] = dataclasses.field(default_factory=list)
    reference_run: Run | None = dataclasses.field(default=None, repr=False)
    candidate_run: Run | None = dataclasses.field(default=None, repr=False)
    allow_silent: bool = False
    unrecorded: list[str] = dataclasses.field(default_factory=list)

    @property
    def agree(self) -> bool:
        """Every comparison agrees (silent ones included)."""
        return all(c.ok for c in self.comparisons)

    @property
    def silent(self) -> list[str]:
        """Keys of the spike comparisons in which neither side spikes."""
        return [c.key for c in self.comparisons if c.silent]

    @property
    def ok(self) -> bool:
        """Every comparison agrees, and none is silent unless ``allow_silent``."""
        return self.agree and (self.allow_silent or not self.silent)

    @property
    def first_divergence(self) -> tuple[int, str] | None:
        diverged = [
            (c.first_step, i, c.key) for i, c in enumerate(self.comparisons) if c.first_step is not None
        ]
        if not diverged:
            return None
        step, _, key = min(diverged)
        return step, key

    def __getitem__(self, key: str) -> Comparison:
        for comparison in self.comparisons:
            if comparison.key == key:
                return comparison
        raise KeyError(key)

    def table(self) -> str:
        """The comparisons as a text table, one row per output or record."""
        header = (
            "key",
            "kind",
            "spikes ref / cand",
            "max |diff|",
            "mean |diff|",
            "spike counts agree",
            "first step",
            "status",
        )
        rows = [header]
        for c in self.comparisons:
            agree = (
                f"{100 * c.spike_agreement:.1f}% (max diff {c.max_count_difference})"
                if c.spike_agreement is not None
                else "-"
            )
            rows.append(
                (
                    printable(c.key),
                    "spikes" if c.spikes else "values",
                    f"{c.reference_spikes} / {c.candidate_spikes}" if c.reference_spikes is not None else "-",
                    f"{c.max_abs:.3g}",
                    f"{c.mean_abs:.3g}",
                    agree,
                    "-" if c.first_step is None else str(c.first_step),
                    c.status,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __str__(self) -> str:
        silent = self.silent
        if not self.agree:
            verdict = "NOT equivalent"
        elif silent:
            verdict = (
                f"agree, but {len(silent)} spike comparison(s) are silent on both sides, which proves "
                f"nothing: {', '.join(silent)}"
                + ("" if self.allow_silent else " (not ok; allow_silent=True accepts it)")
            )
        else:
            verdict = "equivalent"
        first = self.first_divergence
        lines = [
            f"verify: {verdict} over {self.steps} steps (atol={self.atol:g}, rtol={self.rtol:g})"
            + (f"; first divergence at step {first[0]} in {first[1]!r}" if first else ""),
            self.table(),
        ]
        if self.only_reference:
            lines.append(f"recorded only in the reference: {', '.join(self.only_reference)}")
        if self.only_candidate:
            lines.append(f"recorded only in the candidate: {', '.join(self.only_candidate)}")
        lines += [f"not recorded in the {line}" for line in self.unrecorded]
        return "\n".join(lines)

    __repr__ = __str__


def verify(
    reference: Any,
    candidate: Any,
    inputs: torch.Tensor | Mapping[str, torch.Tensor] | Sequence[torch.Tensor],
    *,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    record: str | Iterable[str] | None = None,
    state: tuple[Any, Any] | None = None,
    dt: float | None = None,
    allow_negative_tau: bool = False,
    allow_silent: bool = False,
    layers: Mapping[str, str] | None = None,
    backend: Backend = "auto",
) -> Report:
    """Run ``reference`` and ``candidate`` on the same inputs and compare them.

    Args:
        reference: a module built by :func:`nirbridge.nir_to_torch` or an adapter's
            ``from_nir``, a ``nir.NIRGraph`` or a ``.nir`` path (built with
            ``nir_to_torch(dt=dt)``), or a native model (snntorch, norse,
            spikingjelly, plain torch), run as its simulator runs it (see
            :mod:`nirbridge.native`) with its layers recorded under the names of the
            NIR nodes they became.
        candidate: the same kinds as ``reference``, or the name of a simulator,
            ``"nirbridge"``, ``"norse"``, ``"snntorch"`` or ``"spikingjelly"``: the reference graph or file
            built with that simulator's neurons (``from_nir``); a file of that name
            is passed as a ``pathlib.Path``.
        inputs: time first, ``[T, B, ...]`` (a dict by Input name for several).
        atol: a continuous value diverges where ``|a − b| > atol + rtol·max(|b|, m)``
            (``b`` the reference, ``m`` the largest finite ``|b|`` of that neuron over
            all steps and samples), or
            where either is NaN or infinite; spikes must be identical.
        rtol: see ``atol``.
        record: what to compare besides the outputs: ``None`` (the default) records
            every node and state variable where both modules were built by nirbridge
            (``nir_to_torch`` or an adapter's ``from_nir``), and every node's output
            where one is a native model (whose layers have outputs, not NIR's state
            variables); ``"all"``, node paths as :func:`nirbridge.run` takes them, or
            ``()``.
        state: ``(reference_state, candidate_state)`` to start from; fresh by default.
        dt: time step for graphs and paths.
        allow_negative_tau: build graphs and paths whose time constants are below 0 as
            they are (see :func:`nirbridge.nir_to_torch`).
        allow_silent: let spike comparisons in which neither side spikes count as
            agreement in ``report.ok``; by default they make it ``False`` (and warn
            either way).
        layers: for a native model, NIR node name -> the module path whose output it
            is; by default the adapter's own export of the model says (node names are
            module paths, a second call of ``fc`` is ``fc_2``).
        backend: the back-end :func:`nirbridge.run` runs each side that is a graph
            module on (``"auto"``, ``"eager"``, ``"compile"``, ``"triton"``, ``"cpu"``);
            a native model runs as its own code whatever this says.

    Returns:
        A :class:`Report`; ``report.ok`` says whether the two agree on something,
        ``print(report)`` shows the table.

    Warns:
        SilentNetworkWarning: spike comparisons in which neither side spikes, named.
    """
    for name, value in (("atol", atol), ("rtol", rtol)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise VerifyError(f"verify({name}={value!r}): give the tolerance as a number, 0 or more")
        if not 0 <= float(value) < math.inf:
            raise VerifyError(
                f"verify({name}={value!r}): give a finite tolerance of 0 or more (NaN would let every "
                "value pass)"
            )
    atol, rtol = float(atol), float(rtol)
    if backend not in get_args(Backend):
        raise VerifyError(f"verify(backend={backend!r}): give one of {', '.join(get_args(Backend))}")
    if not isinstance(allow_silent, bool):
        raise VerifyError(f"verify(allow_silent={allow_silent!r}): give True or False")
    if state is not None and not (isinstance(state, (tuple, list)) and len(state) == 2):
        raise VerifyError(
            f"verify(state=...) takes (reference_state, candidate_state), got {type(state).__name__}; "
            "pass None to start both fresh"
        )
    states = state if state is not None else (None, None)
    given = (
        inputs.values()
        if isinstance(inputs, Mapping)
        else [inputs]
        if isinstance(inputs, torch.Tensor)
        else inputs
        if isinstance(inputs, (list, tuple))
        else []  # run names what it cannot take
    )
    if any(
        isinstance(x, torch.Tensor) and not x.is_nested and x.dim() >= 2 and x.shape[1] == 0 for x in given
    ):
        raise VerifyError(
            "verify: the inputs hold a batch of 0 samples, so nothing would be compared; give one or more"
        )
    if isinstance(candidate, str) and candidate in BACKENDS:  # a file called so: pass a Path
        candidate = _build_with(candidate, reference, dt, allow_negative_tau)
    sides = []
    for side in (reference, candidate):
        side = _built(side, dt, allow_negative_tau)
        sides.append(side if _native(side) else _module(side, dt)[0])
    reference, candidate = sides
    natives = [_native(side) for side in sides]
    if layers is not None and not any(natives):
        raise VerifyError("verify(layers=...) names the layers of a native model, but neither side is one")
    if record is None:
        record = "outputs" if any(natives) else "all"
    runs = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", SilentNetworkWarning)  # said once below, for both runs
        warnings.simplefilter("ignore", NonFiniteWarning)  # the comparison names NaN and inf itself
        for which, side, native, start in zip(("reference", "candidate"), sides, natives, states):
            try:
                if native:
                    wanted = "outputs" if record not in ((), []) else ()
                    result = _run_native(side, inputs, state=start, record=wanted, layers=layers)
                    if wanted and not isinstance(record, str):  # node paths: those of them it has
                        keep = set(record)
                        result.records = {k: v for k, v in result.records.items() if k in keep}
                else:
                    result = run(side, inputs, record=record, state=start, progress=False, backend=backend)
            except NirBridgeError as error:
                error.add_note(f"nirbridge.verify: while running the {which} ({type(side).__name__})")
                raise
            except (SystemExit, GeneratorExit) as error:  # a forward that calls sys.exit (a script's habit)
                what = (
                    f"called sys.exit({error.code!r})"
                    if isinstance(error, SystemExit)
                    else "raised GeneratorExit"
                )
                raise VerifyError(
                    f"the {which} ({type(side).__name__}) {what} while running; a model's forward must "
                    "return its outputs: move the exit out of the model"
                ) from error
            except Exception as error:
                if isinstance(error, Warning):  # a warning the caller turned into an error
                    raise
                notes = [n.removeprefix("nirbridge: ") for n in getattr(error, "__notes__", [])]
                where = " ".join(n for n in notes if n.startswith(("at step", "in steps")))
                raise VerifyError(
                    f"the {which} ({type(side).__name__}) raised {type(error).__name__}"
                    + (f" {where}" if where else "")
                    + f": {error}"
                ) from error
            runs.append(result)
    ref, cand = runs
    steps = _steps(ref)
    comparisons: list[Comparison] = []
    order = _order(reference if is_built(reference) else candidate, ref)
    common = [k for k in order if k in cand.records]
    for key in common:
        spikes = key in ref.spiking or key in cand.spiking
        comparisons.append(_compare(key, ref.records[key], cand.records[key], spikes, atol, rtol))
    for key, (name, a, b) in _outputs(ref, cand).items():
        spikes = name in ref.spiking_outputs or name in cand.spiking_outputs
        if a is None or b is None:  # an output one side lacks: never agreement
            where = "candidate" if a is None else "reference"
            problem = f"only in the {where}"
            comparisons.append(Comparison(key, spikes, math.nan, math.nan, None, None, None, problem))
            continue
        comparisons.append(_compare(key, a, b, spikes, atol, rtol))
    report = Report(
        comparisons=comparisons,
        atol=atol,
        rtol=rtol,
        steps=steps,
        only_reference=[k for k in ref.records if k not in cand.records],
        only_candidate=[k for k in cand.records if k not in ref.records],
        unrecorded=[
            f"{'reference' if side is ref else 'candidate'}: {key if key != '*' else 'layers'}: {why}"
            for side in (ref, cand)
            for key, why in side.unrecorded.items()
        ],
        reference_run=ref,
        candidate_run=cand,
        allow_silent=allow_silent,
    )
    silent = report.silent
    if silent:
        warnings.warn(
            f"verify: neither side spikes in {', '.join(repr(k) for k in silent)} over {steps} steps, so "
            "their agreement proves nothing. " + silence_hint(ref.dt, reference),
            SilentNetworkWarning,
            stacklevel=2,
        )
    return report


BACKENDS = ("nirbridge", "norse", "snntorch", "spikingjelly")
"""Simulator names :func:`verify` accepts as its candidate."""


def _built(graph: Any, dt: float | None, allow_negative_tau: bool) -> Any:
    """A graph or path built with nirbridge's neurons; anything else as it is."""
    if isinstance(graph, (str, os.PathLike, nir.NIRGraph)):
        from .interpret import nir_to_torch

        return nir_to_torch(graph, dt=dt, allow_negative_tau=allow_negative_tau)
    return graph


def _build_with(backend: str, reference: Any, dt: float | None, allow_negative_tau: bool) -> torch.nn.Module:
    """The reference graph or file imported with ``backend``'s neuron modules."""
    if isinstance(reference, torch.nn.Module):
        raise VerifyError(
            f"verify(candidate={backend!r}) builds the reference graph with {backend}'s neurons, "
            "so the reference must be a nir.NIRGraph or a .nir path, not a module"
        )
    if backend == "nirbridge":
        from .interpret import nir_to_torch

        return nir_to_torch(reference, dt=dt, allow_negative_tau=allow_negative_tau)
    from importlib import import_module

    adapter = import_module(f".adapters.{backend}", __package__)
    return adapter.from_nir(reference, dt=dt, allow_negative_tau=allow_negative_tau)


class VerifyError(NirBridgeError):
    """:func:`verify` was asked for something it cannot compare."""


def _steps(result: Run) -> int:
    out = result.output
    return int((out if isinstance(out, torch.Tensor) else next(iter(out.values()))).shape[0])


def _order(module: Any, result: Run) -> list[str]:
    """Record keys in the order one step evaluates their nodes (variables after their node)."""
    nodes = level_of(module).order if is_built(module) else []
    rank = {name: i for i, name in enumerate(nodes)}

    def position(key: str) -> tuple[float, int]:
        observable = result.layout.get(key, ((), "output"))[1]
        path = key if observable == "output" else key[: -len(observable) - 1]
        return (rank.get(path, math.inf), 0 if key == path else 1)

    return sorted(result.records, key=position)


def _outputs(ref: Run, cand: Run) -> dict[str, tuple[str, Any, Any]]:
    """Comparison key -> (Output name, reference value, candidate value), the value
    ``None`` on the side that lacks that output. One output on each side is compared
    whatever its name; a dict of one output counts as one."""
    a, b = _named(ref.output), _named(cand.output)
    if len(a) == 1 and len(b) == 1:
        name = next(iter(ref.spiking_outputs | cand.spiking_outputs), "output")
        return {"output": (name, next(iter(a.values())), next(iter(b.values())))}
    names = [*a, *(n for n in b if n not in a)]
    return {f"output:{name}": (name, a.get(name), b.get(name)) for name in names}


def _named(output: Any) -> dict[str, Any]:
    return dict(output) if isinstance(output, Mapping) else {"output": output}


def _compare(key: str, a: Any, b: Any, spikes: bool, atol: float, rtol: float) -> Comparison:
    if not isinstance(b, torch.Tensor) or not isinstance(a, torch.Tensor) or a.shape != b.shape:
        shape_b = list(b.shape) if isinstance(b, torch.Tensor) else type(b).__name__
        shape_a = list(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
        return Comparison(key, spikes, math.nan, math.nan, None, None, None, f"shapes {shape_a} != {shape_b}")
    a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    difference = (a64 - b64).abs()
    steps = a64.shape[0]
    per_step = difference.reshape(steps, -1)
    broken = (~a64.isfinite() | ~b64.isfinite()).reshape(steps, -1)  # NaN or inf: never agreement
    totals: tuple[int | None, int | None] = (None, None)
    if spikes:
        bad = (per_step.ne(0) | broken).any(dim=1)
        differences = (b64.sum(0) - a64.sum(0)).nan_to_num(0.0).to(torch.int64)  # candidate minus reference
        counts = differences.abs()
        agreement = float(counts.eq(0).double().mean()) if counts.numel() else 1.0
        max_count = int(counts.max()) if counts.numel() else 0
        totals = (_total(a64), _total(b64))
    else:
        # each neuron's magnitude: the largest finite |reference| it takes over the run
        size = a64.abs().where(a64.isfinite(), 0.0)
        magnitude = size.amax(dim=(0, 1), keepdim=True) if size.dim() > 1 else size.amax()
        limit = (atol + rtol * torch.maximum(size, magnitude)).reshape(steps, -1)
        bad = ((per_step > limit) | broken).any(dim=1)
        agreement, max_count, differences = None, None, None
    diverged = torch.nonzero(bad)
    return Comparison(
        key=key,
        spikes=spikes,
        max_abs=float(difference.max()) if difference.numel() else 0.0,
        mean_abs=float(difference.mean()) if difference.numel() else 0.0,
        spike_agreement=agreement,
        max_count_difference=max_count,
        first_step=int(diverged[0, 0]) if diverged.numel() else None,
        count_differences=differences,
        reference_spikes=totals[0],
        candidate_spikes=totals[1],
    )


def _total(spikes: torch.Tensor) -> int:
    """All spikes of a record (NaN counts as none; the comparison is broken anyway)."""
    return int(spikes.nan_to_num(0.0, posinf=0.0, neginf=0.0).ne(0).sum())

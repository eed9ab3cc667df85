"""The parameter check :func:`nirbridge.nir_to_torch` runs before it builds anything.

Every numeric field of every node (nested graphs included, walked iteratively) must
make the equations of :mod:`nirbridge.neurons.functional` meaningful:

- numbers, not text, with at most :data:`nirbridge.graph.MAX_DIMS` axes;
- finite: no NaN or infinity in a weight, bias, scale, threshold, resistance, leak,
  reset or input weight (a NaN spreads to every value it touches, and a NaN threshold
  never fires);
- time constants ``tau``, ``tau_mem`` and ``tau_syn`` above 0 (at 0 the membrane
  divides by zero; below 0 it grows away from its leak). Negative time constants do
  occur in trained files (the spyx SHD network has some); ``allow_negative_tau=True``
  loads them as they are;
- within the range of the module's dtype (1e39 is finite in float64, not in float32);
- delays finite, not negative, and at most :data:`MAX_DELAY_STEPS` time steps (a delay
  that is not a whole number of steps is rounded, with a :class:`LossyConversionWarning`);
- weights with at least one element.

Every field that breaks one of these is named in one :class:`ParameterError` (node,
field and the offending neurons' indices); time constants below 0 are listed together,
with the way to load them anyway. Complex values lose their imaginary part with a
:class:`LossyConversionWarning` naming the node and field.

Values that are legal but likely not meant warn with :class:`ParameterWarning`: a
threshold at or below the reset, a resistance or input weight of 0 for every neuron, a
weight of zeros. :func:`review` lists all of these without raising, for
``nirbridge info``.

After shapes are inferred, :func:`check_memory` estimates what one sample needs at
each node (its output, a convolution's padded input, a delay line's history) and
refuses, with :class:`MemoryLimitError`, what the device cannot hold.
"""

from __future__ import annotations

import copy
import functools
import math
import warnings
from typing import Any

import nir
import numpy as np
import torch

from . import graph as graph_utils
from . import limits
from .errors import LossyConversionWarning, ParameterError, ParameterWarning

__all__ = ["MAX_DELAY_STEPS", "TIME_CONSTANTS", "check_memory", "check_parameters", "refused", "review"]

TIME_CONSTANTS = ("tau", "tau_mem", "tau_syn")

MAX_DELAY_STEPS = 2**40
"""The longest delay, in time steps, a Delay node may have (far beyond memory anyway)."""

_FIELDS: dict[type, tuple[str, ...]] = {
    nir.Affine: ("weight", "bias"),
    nir.Linear: ("weight",),
    nir.Scale: ("scale",),
    nir.Threshold: ("threshold",),
    nir.Conv1d: ("weight", "bias"),
    nir.Conv2d: ("weight", "bias"),
    nir.Delay: ("delay",),
    nir.I: ("r",),
    nir.IF: ("r", "v_threshold", "v_reset"),
    nir.LI: ("tau", "r", "v_leak"),
    nir.LIF: ("tau", "r", "v_leak", "v_threshold", "v_reset"),
    nir.CubaLI: ("tau_syn", "tau_mem", "r", "v_leak", "w_in"),
    nir.CubaLIF: ("tau_syn", "tau_mem", "r", "v_leak", "w_in", "v_threshold", "v_reset"),
}


def _fields_of(node: Any) -> tuple[str, ...]:
    for cls in type(node).__mro__:
        if cls in _FIELDS:
            return _FIELDS[cls]
    return ()


def _where(indices: np.ndarray, shape: tuple[int, ...]) -> str:
    """The first few offending indices, as neurons (``[3, 17]``) or positions."""
    flat = np.flatnonzero(indices)
    shown = [
        int(i) if len(shape) <= 1 else tuple(int(v) for v in np.unravel_index(i, shape)) for i in flat[:5]
    ]
    more = f" and {flat.size - 5} more" if flat.size > 5 else ""
    if len(shape) <= 1:
        what = "neurons" if flat.size > 1 else "neuron"
    else:
        what = "indices" if flat.size > 1 else "index"
    return f"{what} {', '.join(map(str, shown))}{more}"


def _numbers(value: Any, owner: str, field: str) -> tuple[np.ndarray, Any]:
    """The field as a float64 array, and the value to build with (its real part where it
    was complex, else the value itself)."""
    if isinstance(value, (str, bytes)):
        raise ParameterError(f"{owner}: {field} must be numbers, got text {value!r}")
    if isinstance(value, torch.Tensor):  # a trained parameter (requires_grad), one on a GPU: numbers
        tensor = value.detach().cpu()
        value = (
            tensor.double() if tensor.is_floating_point() and tensor.element_size() < 4 else tensor
        ).numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        raise ParameterError(f"{owner}: {field} must be numbers, got {type(value).__name__}") from None
    if array.dtype.kind == "c":
        imaginary = np.abs(array.imag)
        if np.any(imaginary > 0):
            warnings.warn(
                f"{owner}: {field} is complex; nirbridge's equations are real, so its imaginary parts "
                f"(up to {float(np.nanmax(imaginary)):.3g}) are dropped",
                LossyConversionWarning,
                stacklevel=4,
            )
        real = np.ascontiguousarray(array.real)
        return real.astype(np.float64), real
    if array.dtype.kind not in "biuf":
        try:
            converted = array.astype(np.float64)
        except (TypeError, ValueError):
            raise ParameterError(
                f"{owner}: {field} must be numbers, got {array.dtype} values"
                + (f" such as {array.reshape(-1)[0]!r}" if array.size else "")
            ) from None
        return converted, value
    return array.astype(np.float64), value


def _optional(node: Any, field: str) -> bool:
    """Fields that may be None: nir defaults a missing reset to 0, and a conv may lack a bias."""
    return field == "v_reset" or (field == "bias" and isinstance(node, (nir.Conv1d, nir.Conv2d)))


class _Problems:
    """What one walk over a graph found: meaningless values (errors), time constants
    below 0, and suspicious values (warnings), as messages naming node and field."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.negative_tau: list[str] = []
        self.suspicious: list[str] = []


@functools.cache
def _range(dtype: Any) -> tuple[float, float]:
    """The largest finite value of ``dtype`` (inf where none is given) and the
    magnitude below which it may hold a value as 0 (twice half its smallest subnormal,
    so that values near the edge are cast to decide; 0 for float64 and none given)."""
    if dtype is None:
        return math.inf, 0.0
    info = torch.finfo(dtype)
    return float(info.max), 0.0 if dtype == torch.float64 else float(info.smallest_normal * info.eps)


def _check_field(
    node: Any,
    field: str,
    owner: str,
    dt: float,
    dtype: Any,
    problems: _Problems,
) -> tuple[np.ndarray, Any] | None:
    """The field's values and the value to build with, or ``None`` (missing and
    optional, or a problem was added to ``problems``)."""
    value = getattr(node, field, None)
    if value is None:
        if not _optional(node, field):
            problems.errors.append(f"{owner}: {field} is missing; give it a value (a number or an array)")
        return None
    try:
        array, usable = _numbers(value, owner, field)
    except ParameterError as error:
        problems.errors.append(str(error))
        return None
    if array.ndim > graph_utils.MAX_DIMS:
        problems.errors.append(
            f"{owner}: {field} has {array.ndim} axes; nirbridge takes at most {graph_utils.MAX_DIMS}"
        )
        return None
    if field == "weight" and array.size == 0:
        problems.errors.append(
            f"{owner}: {field} has shape {array.shape}, no elements: the layer connects nothing; "
            "remove the node or give it a weight"
        )
        return None
    magnitude = np.abs(array)
    top = float(magnitude.max()) if array.size else 0.0  # one pass answers most checks
    if not math.isfinite(top):
        bad = ~np.isfinite(array)
        kinds = sorted({"NaN" if np.isnan(v) else "infinite" for v in array[bad].reshape(-1)})
        problems.errors.append(
            f"{owner}: {field} is {' and '.join(kinds)} at {_where(bad, array.shape)}; the equations "
            "are meaningless there. Fix the value where the file was written"
        )
        return None
    largest, smallest = _range(dtype)
    if top > largest:
        huge = magnitude > largest
        problems.errors.append(
            f"{owner}: {field} is {float(array[huge].reshape(-1)[0]):.4g} at {_where(huge, array.shape)}, "
            f"beyond the largest number the module's dtype holds ({largest:.4g}), so it would compute with "
            "infinity; build with dtype=torch.float64, or fix the value"
        )
        return None
    if (
        smallest
        and 0 < top  # all zero: nothing to flush
        and float(magnitude.min()) <= smallest  # one cheap pass rules out most fields
        and float(np.min(magnitude, where=array != 0, initial=np.inf)) <= smallest
    ):
        near = (magnitude <= smallest) & (array != 0)  # near half the smallest subnormal: cast those
        flushed = near & (torch.from_numpy(np.ascontiguousarray(array, np.float64)).to(dtype) == 0).numpy()
        if np.any(flushed):
            problems.errors.append(
                f"{owner}: {field} is {float(array[flushed].reshape(-1)[0]):.4g} at "
                f"{_where(flushed, array.shape)}, below the smallest number {dtype} holds, so it would "
                "compute with 0 (a time constant of 0 divides by zero, a scale of 0 passes nothing); "
                "build with dtype=torch.float64, or fix the value"
            )
            return None
    if field in TIME_CONSTANTS and array.size and float(array.min()) <= 0:
        zero = array == 0
        if np.any(zero):
            problems.errors.append(
                f"{owner}: {field} is 0 at {_where(zero, array.shape)}; a time constant divides dt "
                "(dt/tau), so it must be above 0 seconds"
            )
            return None
        negative = array < 0
        problems.negative_tau.append(
            f"{owner}: {field} is negative at {_where(negative, array.shape)}"
            + (f" ({int(negative.sum())} of {negative.size})" if negative.size > 1 else "")
            + f", down to {float(array.min()):.4g} s"
        )
    if field in ("r", "w_in") and array.size and top == 0:
        problems.suspicious.append(
            f"{owner}: {field} is 0 for every neuron, so the neurons ignore their input"
        )
    if field == "weight" and top == 0:
        problems.suspicious.append(f"{owner}: weight is 0 everywhere, so the layer passes nothing on")
    if isinstance(node, nir.Delay):
        negative = array < 0
        if np.any(negative):
            problems.errors.append(
                f"{owner}: delay is negative at {_where(negative, array.shape)}; a delay looks back, "
                "so give 0 seconds or more"
            )
            return None
        steps = float(array.max(initial=0.0)) / dt
        if steps > MAX_DELAY_STEPS:
            problems.errors.append(
                f"{owner}: a delay of {float(array.max()):.4g} s is {steps:.4g} steps of dt = {dt:g} s, "
                f"more than the {MAX_DELAY_STEPS:.4g} nirbridge keeps; check the delay's unit "
                "(seconds) and dt"
            )
            return None
        exact = array / dt
        off = np.abs(exact - np.round(exact)) > 1e-6 * np.maximum(1.0, np.abs(exact))
        if np.any(off):
            first = float(array[off].reshape(-1)[0])
            warnings.warn(
                f"{owner}: delay is not a whole number of time steps at {_where(off, array.shape)} "
                f"({first:.4g} s is {first / dt:.4g} steps of dt = {dt:g} s); it is rounded to "
                f"{round(first / dt)} steps. Give delays in multiples of dt, or a dt that divides them",
                LossyConversionWarning,
                stacklevel=5,
            )
    return array, usable


def _check_reset(node: Any, owner: str, values: dict[str, np.ndarray], problems: _Problems) -> None:
    """A threshold at or below the reset: after a spike the membrane is put back at or
    above the threshold, so the neuron fires at every step until its input pulls it down."""
    threshold, reset = values.get("v_threshold"), values.get("v_reset")
    if threshold is None:
        return
    if reset is None:
        reset = np.zeros(())  # nir's default reset
    try:
        low = np.broadcast_to(threshold <= reset, np.broadcast_shapes(threshold.shape, reset.shape))
    except ValueError:
        return  # shapes that do not fit: the conversion names them
    if np.any(low):
        problems.suspicious.append(
            f"{owner}: v_threshold is at or below v_reset at {_where(low, low.shape)}, so after a "
            "spike the membrane is reset to where it fires again; check the two fields (nir's "
            "v_reset defaults to 0)"
        )


_NEGATIVE_TAU_FIX = (
    "such membranes grow away from their leak instead of decaying to it. Trained files sometimes "
    "hold them (an exporter that let τ train freely); to load the file as it is, pass "
    "nir_to_torch(..., allow_negative_tau=True), --allow-negative-tau on the command line "
    "(see 'Time constants below 0' in the docs' Files and safety page)"
)


def _walk(graph: Any, dt: float, dtype: Any) -> tuple[_Problems, dict[int, Any]]:
    """Check every node; return the problems and ``id(node) -> copy with real fields``."""
    problems = _Problems()
    fixes: dict[int, Any] = {}
    stack: list[tuple[Any, str]] = [(graph, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, nir.NIRGraph):
            for name, child in reversed(node.nodes.items()):  # popped in graph order
                stack.append((child, f"{path}.{name}" if path else str(name)))
            continue
        owner = f"node {path or '<root>'!r} ({type(node).__name__})"
        changes = {}
        values: dict[str, np.ndarray] = {}
        for field in _fields_of(node):
            checked = _check_field(node, field, owner, dt, dtype, problems)
            if checked is None:
                continue
            values[field] = checked[0]
            if checked[1] is not getattr(node, field):
                changes[field] = checked[1]
        _check_reset(node, owner, values, problems)
        if changes:  # a shallow copy: nir's constructors would check the other fields again
            fixed = copy.copy(node)
            for field, value in changes.items():
                setattr(fixed, field, value)
            fixes[id(node)] = fixed
    return problems, fixes


def _listed(messages: list[str], most: int = 4) -> str:
    shown = "; ".join(messages[:most])
    return shown + (f"; and {len(messages) - most} more" if len(messages) > most else "")


def check_parameters(graph: Any, dt: float, *, allow_negative_tau: bool = False, dtype: Any = None) -> Any:
    """Check every numeric field of ``graph`` (a NIR graph or a single node; see the
    module's docs); return it, or a copy where complex fields became real. ``dtype`` is
    the torch dtype the module will compute in: values beyond its range, and values it
    would flush to 0, are refused.

    Raises one :class:`ParameterError` naming every meaningless value (the first few),
    or, where only time constants are below 0 and ``allow_negative_tau`` is not set,
    one naming each such node and field. Suspicious values warn
    (:class:`ParameterWarning`)."""
    problems, fixes = _walk(graph, dt, dtype)
    if problems.errors:
        first, rest = problems.errors[0], problems.errors[1:]
        raise ParameterError(first + (f". Also: {_listed(rest, 3)}" if rest else ""))
    if problems.negative_tau and not allow_negative_tau:
        count = len(problems.negative_tau)
        where = (
            "a time constant is below 0" if count == 1 else f"time constants are below 0 in {count} places"
        )
        raise ParameterError(f"{where}: {_listed(problems.negative_tau, 6)}; {_NEGATIVE_TAU_FIX}")
    for message in problems.suspicious:
        warnings.warn(message, ParameterWarning, stacklevel=3)
    return _rebuilt(graph, fixes)


def review(graph: Any, dt: float, *, suspicious: bool = True) -> list[str]:
    """Everything :func:`check_parameters` would refuse or warn about, as messages (for
    ``nirbridge info``): meaningless values, time constants below 0 (with the way to
    load them anyway), and, unless ``suspicious=False``, suspicious values. Never
    raises for the values themselves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossyConversionWarning)
        problems, _ = _walk(graph, dt, None)
    found = [*problems.errors]
    if problems.negative_tau:
        found.append(
            "time constants below 0: " + _listed(problems.negative_tau, 6) + "; " + _NEGATIVE_TAU_FIX
        )
    return found + (problems.suspicious if suspicious else [])


def refused(graph: Any) -> list[str]:
    """What :func:`check_parameters` would refuse in ``graph`` (at its recorded dt, else
    the default): NaN or infinite values, time constants of 0 or below, as a diverged
    training run leaves them. For the warnings of export and :func:`nirbridge.write`."""
    from .neurons.modules import DEFAULT_DT, check_dt

    metadata = getattr(graph, "metadata", None)
    recorded = metadata.get("dt") if isinstance(metadata, dict) else None
    unusable = []
    try:
        dt = check_dt(recorded) if recorded is not None else DEFAULT_DT
    except ParameterError:
        dt = DEFAULT_DT  # the values are checked at the default
        unusable = [f"metadata dt = {recorded!r} is not a positive, finite time step in seconds"]
    return unusable + review(graph, dt, suspicious=False)


def warn_refused(graph: Any, caller: str, done: str = "exported as they are", stacklevel: int = 3) -> None:
    """Warn (:class:`ParameterWarning`) of what :func:`refused` finds, once, after
    ``caller`` ("torch_to_nir: the model"): what every export and
    :func:`nirbridge.write` say of values that :func:`nirbridge.nir_to_torch` would
    refuse."""
    found = refused(graph)
    if found:
        warnings.warn(
            f"{caller} holds values nir_to_torch refuses ({done}; did training diverge?): "
            + "; ".join(found),
            ParameterWarning,
            stacklevel=stacklevel,
        )


def _rebuilt(graph: Any, fixes: dict[int, Any]) -> Any:
    """``graph`` with the nodes in ``fixes`` replaced, levels copied only where they change."""
    if not fixes:
        return graph
    if not isinstance(graph, nir.NIRGraph):
        return fixes[id(graph)]
    order: list[nir.NIRGraph] = []
    stack = [graph]
    while stack:
        level = stack.pop()
        order.append(level)
        stack.extend(child for child in level.nodes.values() if isinstance(child, nir.NIRGraph))
    rebuilt: dict[int, nir.NIRGraph] = {}
    for level in reversed(order):  # children before their parents
        nodes = {
            name: rebuilt.get(id(child)) or fixes.get(id(child), child) for name, child in level.nodes.items()
        }
        if any(nodes[name] is not level.nodes[name] for name in nodes):
            copied = copy.copy(level)  # not nir's constructor: it would check the edges again
            copied.nodes = nodes
            rebuilt[id(level)] = copied
    return rebuilt.get(id(graph), graph)


def check_memory(
    graph: nir.NIRGraph, shapes: graph_utils.Shapes, dt: float, element_size: int, device: Any = None
) -> None:
    """Refuse (:class:`MemoryLimitError`) a graph where one sample already needs more
    memory at one node than ``device`` has free: the node's output, a convolution's
    padded input, or a delay line's history (``round(delay/dt)`` past inputs)."""
    free = limits.available(device)
    if free is None:
        return
    stack: list[tuple[nir.NIRGraph, graph_utils.Shapes, str]] = [(graph, shapes, "")]
    while stack:
        level, level_shapes, path = stack.pop()
        for name, node in level.nodes.items():
            label = f"{path}.{name}" if path else name
            if isinstance(node, nir.NIRGraph):
                nested = level_shapes.nested.get(name)
                if nested is not None:
                    stack.append((node, nested, label))
                continue
            need, what = _node_bytes(node, level_shapes, name, dt, element_size)
            if need > free:
                limits.check_memory(
                    need,
                    f"node {label!r} ({type(node).__name__}): {what} for a single sample",
                    "check its parameters (a padding or a delay far larger than meant?)",
                    device,
                )


def _node_bytes(
    node: Any, shapes: graph_utils.Shapes, name: str, dt: float, element_size: int
) -> tuple[float, str]:
    out = shapes.outputs.get(name)
    width = math.prod(out) if out is not None else 0
    need, what = float(width) * element_size, "its output"
    if isinstance(node, nir.Delay) and out is not None:
        delay = np.asarray(node.delay, dtype=np.float64)
        steps = round(float(delay.max(initial=0.0)) / dt)
        need, what = float(steps) * width * element_size, f"its history of {steps} steps"
    given = shapes.inputs.get(name)
    if isinstance(node, (nir.Conv1d, nir.Conv2d)) and given is not None and len(given) > 1:
        _, padding, _, _ = graph_utils.conv_args(node, len(given) - 1, f"node {name!r}")
        if isinstance(padding, tuple):
            padded = given[0] * math.prod(float(n) + 2 * p for n, p in zip(given[1:], padding))
            if padded * element_size > need:
                need, what = padded * element_size, f"its input padded by {list(padding)}"
    return need, what

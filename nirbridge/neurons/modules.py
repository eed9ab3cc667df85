"""``torch.nn.Module`` shells around the step functions in :mod:`.functional`.

Constructor arguments are NIR's field names plus ``dt`` (seconds, default
``DEFAULT_DT`` = 1e-4). Parameters are stored as buffers of their NIR shape and
broadcast against the input, whose first axis is the batch. Each module's
``forward(x, state=None)`` returns ``(output, state)``; with ``state=None`` it starts
from the initial state (``v = v_leak`` for leaky models, ``v = 0`` otherwise, ``i = 0``).

:meth:`Neuron.make_trainable` turns parameters into ``nn.Parameter``s. A time constant
(``tau``, ``tau_mem``, ``tau_syn``) then trains in log space, so that no optimiser step
can make it 0 or negative: the parameter ``<name>_log`` holds ``log(tau / tau_ref)``,
with ``tau_ref`` (the buffer ``<name>_ref``) the value it had when it was made
trainable or last loaded, and ``module.<name>`` reads ``tau_ref * exp(<name>_log)``,
positive, exactly ``tau_ref`` before training. ``state_dict`` holds ``tau`` itself
under its NIR name either way, so trained and untrained modules load each other's.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import nir
import numpy as np
import torch

from ..engine import kernels as S
from ..errors import ParameterError
from ..limits import check_memory
from ..state import StateError
from . import functional as F

__all__ = [
    "DEFAULT_DT",
    "IF",
    "LI",
    "LIF",
    "TIME_CONSTANTS",
    "CubaLI",
    "CubaLIF",
    "Delay",
    "I",
    "Neuron",
    "time_constants_fixed",
]

DEFAULT_DT = 1e-4
TIME_CONSTANTS = ("tau", "tau_mem", "tau_syn")  # trained in log space: positive whatever the step

ArrayLike = Any  # a number, numpy array or tensor


def _as_tensor(name: str, owner: str, value: ArrayLike) -> torch.Tensor:
    if value is None:
        raise ParameterError(f"{owner}: parameter {name!r} is missing; pass a number or an array")
    if isinstance(value, torch.Tensor):
        tensor = value.detach().clone()
    else:
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ParameterError(
                f"{owner}: parameter {name!r} must be numeric, got {type(value).__name__}"
            ) from None
        tensor = torch.from_numpy(array.copy())
    if not tensor.is_floating_point():
        tensor = tensor.to(torch.float64)
    return tensor


def _check_loaded(owner: str, key: str, value: torch.Tensor, time_constant: bool) -> None:
    """Refuse a state_dict entry that makes the equations meaningless: NaN or infinite
    values, or a time constant of 0 (negative ones load, as ``allow_negative_tau``)."""
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise ParameterError(f"{owner}: state_dict entry {key!r} holds NaN or infinite values; fix them")
    if time_constant and bool((value == 0).any()):
        raise ParameterError(f"{owner}: state_dict entry {key!r} holds time constants of 0; they divide dt")


def _time_constant(name: str, doc: str) -> property:
    """The attribute ``name`` of a neuron with the time constant ``name``: its buffer, or,
    once :meth:`Neuron.make_trainable` made it trainable, ``ref * exp(log)``, positive
    (clamped to the dtype's positive normal range)."""
    log, ref = f"{name}_log", f"{name}_ref"

    def get(self: Neuron) -> torch.Tensor:
        trained = self._parameters.get(log)
        if trained is not None:
            fixed = self.__dict__.get("_fixed_time_constants")
            if fixed is not None:  # inside time_constants_fixed: computed before, eagerly
                return fixed[name]
            # kept within the positive normal numbers: an absurd step (exp underflowing to
            # 0 or overflowing) leaves tau tiny or huge, never 0 or infinite
            limits = torch.finfo(trained.dtype)
            return torch.clamp(self._buffers[ref] * torch.exp(trained), limits.tiny, limits.max)
        value = self._buffers.get(name)
        if value is None:
            value = self._parameters.get(name)  # made an nn.Parameter by hand
        if value is None:
            raise AttributeError(name)  # not registered yet: nn.Module says so
        return value

    def set(self: Neuron, value: Any) -> None:
        if log not in self._parameters:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r} to set")
        self._anchor(name, torch.as_tensor(value), f"{type(self).__name__}.{name} = ...")

    return property(get, set, doc=doc)


@contextlib.contextmanager
def time_constants_fixed(module: torch.nn.Module) -> Iterator[None]:
    """Within the block, every log-space time constant of the neurons in ``module`` reads
    as a tensor computed on entry, eagerly and without gradient.

    For code that ``torch.compile`` traces: inductor's ``exp`` can round differently
    from eager torch's, so a tau computed inside compiled code could differ from the
    eager back-end's by a rounding; computed here it is the same tensor.
    """
    populations = [m for m in module.modules() if isinstance(m, Neuron) and m.log_space()]
    with torch.no_grad():
        values = [{name: getattr(m, name) for name in m.log_space()} for m in populations]
    for population, fixed in zip(populations, values):
        population.__dict__["_fixed_time_constants"] = fixed
    try:
        yield
    finally:
        for population in populations:
            population.__dict__.pop("_fixed_time_constants", None)


_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("checked", default=False)


@contextlib.contextmanager
def values_checked() -> Iterator[None]:
    """Within the block, neurons skip checking their values: the caller did
    (:func:`nirbridge.nir_to_torch` checks a whole graph first, and may allow what a
    neuron built by hand may not, such as negative time constants)."""
    token = _CHECKED.set(True)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def _check_value(owner: str, name: str, tensor: torch.Tensor) -> None:
    """What a neuron built by hand refuses, as :func:`nirbridge.nir_to_torch` does: NaN
    or infinity anywhere, a time constant of 0 or below."""
    if tensor.numel() and not bool(torch.isfinite(tensor).all()):
        raise ParameterError(f"{owner}: {name} holds NaN or infinity; the equations are meaningless there")
    if name in TIME_CONSTANTS and tensor.numel() and not bool((tensor > 0).all()):
        raise ParameterError(
            f"{owner}: {name} is {float(tensor.min()):g} s at its smallest; a time constant must be above "
            "0 s (nir_to_torch(..., allow_negative_tau=True) loads a graph that holds one below 0)"
        )


def check_dt(dt: Any, owner: str = "dt") -> float:
    """Validate a time step: a positive, finite number of seconds."""
    if isinstance(dt, (bool, str, bytes)):
        value = math.nan  # True is not 1 s, and text is not a number of seconds
    elif isinstance(dt, (int, float)):
        try:
            value = float(dt)
        except OverflowError:
            value = math.inf
    elif isinstance(dt, complex) or np.iscomplexobj(dt):
        value = math.nan  # a complex time step has no meaning; numpy would drop its imaginary part
    else:
        try:
            array = np.asarray(dt, dtype=np.float64).reshape(-1)
            value = float(array[0]) if array.size == 1 else math.nan
        except (TypeError, ValueError, OverflowError):
            value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ParameterError(f"{owner}: dt must be a positive, finite number of seconds, got {dt!r}")
    return value


def _refuse_state(module: torch.nn.Module, state: Any, error: Exception) -> None:
    """Raise :class:`StateError` where a step of ``module`` (a neuron or a Delay) failed
    on a ``state`` that is not its state type (a step's own failure is left as it is)."""
    kind = getattr(type(module), "state_type", None)
    if kind is not None and not isinstance(state, kind):
        raise StateError(
            f"{type(module).__name__}: the state is of type {type(state).__name__}; pass the "
            f"{kind.__name__}({', '.join(kind._fields)}) the previous call returned, or None "
            "to start from the initial state"
        ) from error


class Neuron(torch.nn.Module):
    """What nirbridge's neuron modules share: parameter buffers, dt, broadcast shapes,
    the initial state, and :meth:`scan` / :meth:`kernel` for running many steps."""

    params: ClassVar[tuple[str, ...]] = ()
    nir_type: ClassVar[type]
    state_type: ClassVar[type]  # the NamedTuple forward returns as its state

    def __init__(self, dt: float, **values: ArrayLike) -> None:
        super().__init__()
        owner = type(self).__name__
        self.dt = check_dt(dt, owner)
        checked = _CHECKED.get()  # nir_to_torch checked every value before it builds
        for name in self.params:
            tensor = _as_tensor(name, owner, values[name])
            if not checked:
                _check_value(owner, name, tensor)
            self.register_buffer(name, tensor)
        shapes = [tuple(getattr(self, n).shape) for n in self.params]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise ParameterError(
                f"{owner}: parameter shapes {dict(zip(self.params, shapes))} do not broadcast "
                "together; give every parameter the neuron population's shape"
            ) from None

    def make_trainable(self, names: Iterable[str] | bool = True, owner: str | None = None) -> None:
        """Make the parameters ``names`` (NIR field names; ``True``: all) ``nn.Parameter``s,
        as ``nir_to_torch(..., trainable=names)`` does for every neuron of a graph.

        A time constant (:data:`TIME_CONSTANTS`) trains in log space: the parameter
        ``<name>_log``, 0 at first, with ``<name> = <name>_ref * exp(<name>_log)``, so an
        optimiser step moves it by a factor, and it stays above 0. It must be above 0
        now (a :class:`ParameterError` otherwise, naming ``owner``). Names the module
        has not are ignored; ones already trainable stay as they are.
        """
        if names is False:
            return
        owner = owner or type(self).__name__
        chosen = set(self.params) if names is True else {names} if isinstance(names, str) else set(names)
        wanted = [n for n in self.params if n in chosen]
        wanted = [n for n in wanted if n in self._buffers]  # not trainable yet
        for name in wanted:
            value = self._buffers[name]
            if name in TIME_CONSTANTS and not bool((value > 0).all()):
                raise ParameterError(
                    f"{owner}: {name} holds values at or below 0 (lowest {float(value.min()):g}); a "
                    f"trainable time constant trains as log {name} and must be above 0: leave "
                    f"{name!r} out of trainable=, or fix the values"
                )
        for name in wanted:  # in the module's order: parameters list in NIR field order
            value = self._buffers.pop(name)
            if name in TIME_CONSTANTS:
                self.register_buffer(f"{name}_ref", value, persistent=False)
                self.register_parameter(f"{name}_log", torch.nn.Parameter(torch.zeros_like(value)))
            else:
                self.register_parameter(name, torch.nn.Parameter(value))

    def log_space(self) -> tuple[str, ...]:
        """The time constants this module trains in log space (see :meth:`make_trainable`)."""
        return tuple(n for n in self.params if n in TIME_CONSTANTS and f"{n}_log" in self._parameters)

    def _anchor(self, name: str, value: torch.Tensor, what: str) -> None:
        """Set the log-space time constant ``name`` to ``value``: ``ref = value``, ``log = 0``."""
        log, ref = self._parameters[f"{name}_log"], self._buffers[f"{name}_ref"]
        value = value.detach()
        if not bool(((value > 0) & torch.isfinite(value)).all()):
            raise ParameterError(
                f"{what}: {name} trains as log {name}, so its values must be finite and above 0"
            )
        with torch.no_grad():
            ref.copy_(value.expand(ref.shape))
            log.zero_()

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        # A log-space time constant is saved as the time constant under its NIR name, so
        # the keys are those of an untrained module; all in NIR field order.
        super()._save_to_state_dict(destination, prefix, keep_vars)
        trained = self.log_space()
        for name in self.params:
            key = prefix + name
            if name in trained:
                destination.pop(f"{key}_log", None)
                value = getattr(self, name)
                destination[key] = value if keep_vars else value.detach()
            elif key in destination:
                destination[key] = destination.pop(key)

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # Parameters saved with a broadcastable shape (a scalar tau from a hand-built
        # model) load into this module's per-neuron buffers, expanded.
        owner, trained, anchors = type(self).__name__, self.log_space(), {}
        for name in self.params:
            key = prefix + name
            value, own = state_dict.get(key), getattr(self, name)
            if isinstance(value, torch.Tensor) and value.shape != own.shape:
                try:
                    if torch.broadcast_shapes(value.shape, own.shape) == own.shape:
                        state_dict[key] = value = value.expand(own.shape)
                except RuntimeError:
                    pass  # left for torch to report as a size mismatch
            if isinstance(value, torch.Tensor):
                _check_loaded(owner, key, value, name in TIME_CONSTANTS)
            if name in trained and key in state_dict:
                # the time constant loads as ref = value, log = 0 (exactly the value)
                del state_dict[key]
                if not isinstance(value, torch.Tensor) or value.shape != own.shape:
                    shape = getattr(value, "shape", type(value).__name__)
                    error_msgs.append(
                        f"size mismatch for {key}: copying a param with shape {shape} from "
                        f"checkpoint, the shape in current model is {own.shape}."
                    )
                    continue
                if bool((value < 0).any()):
                    raise ParameterError(
                        f"{owner}: state_dict entry {key!r} holds time constants below 0, and this "
                        f"module trains {name} as log {name}; load it into a module built without "
                        f"{name!r} in trainable="
                    )
                anchors[name] = value
                log = self._parameters[f"{name}_log"]
                state_dict[f"{key}_log"] = torch.zeros(own.shape, dtype=value.dtype, device=log.device)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for name in trained:  # a missing time constant is missing under its NIR name
            if f"{prefix}{name}_log" in missing_keys:
                missing_keys[missing_keys.index(f"{prefix}{name}_log")] = prefix + name
        for name, value in anchors.items():
            ref = self._buffers[f"{name}_ref"]
            if local_metadata.get("assign_to_params_buffers", False):
                self._buffers[f"{name}_ref"] = value.detach().clone()
            else:
                with torch.no_grad():
                    ref.copy_(value)

    def scan(
        self, x: torch.Tensor, state: Any = None, trace: bool = False
    ) -> tuple[torch.Tensor, Any, dict[str, torch.Tensor]]:
        """Run ``x`` of shape ``[T, B, ...]`` through ``T`` steps: ``(outputs, state, traces)``.

        Equal to calling ``forward`` ``T`` times. ``traces`` holds the state variables
        after each step (``{"v": [T, B, ...]}``) when ``trace`` is true. Without
        gradients an in-place kernel of :mod:`nirbridge.engine.kernels` runs; with them, the steps.
        """
        if state is None:
            state = self.initial_state(x[0])
        if not self.needs_grad(x, state):
            kernel = self.kernel(state, x[0])
            out, traces = S.scan(kernel, x, trace)
            return out, kernel.state(), traces
        outs, traces = [], {}
        for t in range(x.shape[0]):
            out, state = self(x[t], state)
            outs.append(out)
            for name, value in state._asdict().items() if trace else ():
                traces.setdefault(name, []).append(value)
        return torch.stack(outs), state, {k: torch.stack(v) for k, v in traces.items()}

    def needs_grad(self, x: torch.Tensor, state: Any) -> bool:
        """Whether a gradient can flow back from running ``x`` from ``state``: gradients
        are enabled and the input, a parameter or the state requires one."""
        return torch.is_grad_enabled() and (
            x.requires_grad
            or any(getattr(self, n).requires_grad for n in self.params)
            or any(isinstance(s, torch.Tensor) and s.requires_grad for s in state)
        )

    def initial_state(self, x: torch.Tensor) -> Any:
        """The state before the first step, for one step's input ``x`` ``[B, ...]``."""
        raise NotImplementedError

    def kernel(self, state: Any, x: torch.Tensor) -> S.Kernel:
        """An in-place stepper (:mod:`nirbridge.engine.kernels`) starting from ``state``,
        for inputs like ``x`` ``[B, ...]``."""
        raise NotImplementedError

    def _shape(self, x: torch.Tensor) -> torch.Size:
        """The population's shape for one step's input ``x``: ``x``'s shape broadcast with
        every parameter's (as ``torch.broadcast_shapes``, without its tens of
        microseconds per call: a run asks once per population and chunk)."""
        shapes = [x.shape, *(getattr(self, n).shape for n in self.params)]
        size = [1] * max(len(shape) for shape in shapes)
        for shape in shapes:
            for k, length in enumerate(shape, len(size) - len(shape)):
                if length != 1:
                    if size[k] != 1 and size[k] != length:
                        shown = ", ".join(str(tuple(s)) for s in shapes)
                        raise RuntimeError(f"shape mismatch: {shown} do not broadcast together")
                    size[k] = length
        return torch.Size(size)

    def extra_repr(self) -> str:
        shape = tuple(np.broadcast_shapes(*(tuple(getattr(self, n).shape) for n in self.params)))
        trained = self.log_space()
        return f"shape={shape}, dt={self.dt:g}" + (f", log-space: {', '.join(trained)}" if trained else "")

    @classmethod
    def from_nir(cls, node: Any, dt: float = DEFAULT_DT) -> Neuron:
        """Build the module from a NIR node of the matching type."""
        values = {name: getattr(node, name) for name in cls.params}
        if "v_reset" in values and values["v_reset"] is None:  # nir's default reset is 0
            values["v_reset"] = np.zeros_like(node.v_threshold)
        return cls(dt=dt, **values)

    def to_nir(self) -> Any:
        """The NIR node with this module's current parameters."""
        arrays = [getattr(self, name).detach().cpu().numpy() for name in self.params]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        values = {n: np.broadcast_to(a, shape).copy() for n, a in zip(self.params, arrays)}
        return self.nir_type(**values)


class I(Neuron):  # noqa: E742
    r"""Integrator: :math:`v \leftarrow v + \Delta t\, r\, x`; outputs :math:`v`.

    Args:
        r: resistance (output units per input unit per second).
        dt: time step in seconds.
    """

    params = ("r",)
    nir_type = nir.I
    state_type = F.IState

    def __init__(self, r: ArrayLike = 1.0, *, dt: float = DEFAULT_DT) -> None:
        super().__init__(dt, r=r)

    def kernel(self, state: F.IState, x: torch.Tensor) -> S.Kernel:
        return S.IKernel(state, self._shape(x), self.r, self.dt)

    def initial_state(self, x: torch.Tensor) -> F.IState:
        return F.IState(x.new_zeros(self._shape(x)))

    def forward(self, x: torch.Tensor, state: F.IState | None = None) -> tuple[torch.Tensor, F.IState]:
        if state is None:
            state = self.initial_state(x)
        try:
            return F.i_step(x, state, self.r, self.dt)
        except (AttributeError, TypeError, ValueError) as error:
            _refuse_state(self, state, error)
            raise


class LI(Neuron):
    r"""Leaky integrator: :math:`v \leftarrow v + \frac{\Delta t}{\tau}(v_{leak} - v + r x)`.

    Args:
        tau: membrane time constant in seconds.
        r: resistance.
        v_leak: leak (resting) potential; also the initial potential.
        dt: time step in seconds.
    """

    params = ("tau", "r", "v_leak")
    tau = _time_constant("tau", "membrane time constant in seconds (positive once trainable)")
    nir_type = nir.LI
    state_type = F.IState

    def __init__(
        self, tau: ArrayLike, r: ArrayLike = 1.0, v_leak: ArrayLike = 0.0, *, dt: float = DEFAULT_DT
    ) -> None:
        super().__init__(dt, tau=tau, r=r, v_leak=v_leak)

    def kernel(self, state: F.IState, x: torch.Tensor) -> S.Kernel:
        return S.LIKernel(state, self._shape(x), self.tau, self.r, self.v_leak, self.dt)

    def initial_state(self, x: torch.Tensor) -> F.IState:
        return F.IState(x.new_zeros(self._shape(x)) + self.v_leak)

    def forward(self, x: torch.Tensor, state: F.IState | None = None) -> tuple[torch.Tensor, F.IState]:
        if state is None:
            state = self.initial_state(x)
        try:
            return F.li_step(x, state, self.tau, self.r, self.v_leak, self.dt)
        except (AttributeError, TypeError, ValueError) as error:
            _refuse_state(self, state, error)
            raise


class IF(Neuron):
    r"""Integrate-and-fire: :math:`v \leftarrow v + \Delta t\, r\, x`, spike where
    :math:`v > v_{threshold}`, then :math:`v \leftarrow v_{reset}` where it spiked.

    Args:
        r: resistance.
        v_threshold: firing threshold.
        v_reset: potential after a spike.
        dt: time step in seconds.
    """

    params = ("r", "v_threshold", "v_reset")
    nir_type = nir.IF
    state_type = F.IState

    def __init__(
        self,
        r: ArrayLike = 1.0,
        v_threshold: ArrayLike = 1.0,
        v_reset: ArrayLike = 0.0,
        *,
        dt: float = DEFAULT_DT,
    ) -> None:
        super().__init__(dt, r=r, v_threshold=v_threshold, v_reset=v_reset)

    def kernel(self, state: F.IState, x: torch.Tensor) -> S.Kernel:
        return S.IKernel(state, self._shape(x), self.r, self.dt, (self.v_threshold, self.v_reset))

    def initial_state(self, x: torch.Tensor) -> F.IState:
        return F.IState(x.new_zeros(self._shape(x)))

    def forward(self, x: torch.Tensor, state: F.IState | None = None) -> tuple[torch.Tensor, F.IState]:
        if state is None:
            state = self.initial_state(x)
        try:
            return F.if_step(x, state, self.r, self.v_threshold, self.v_reset, self.dt)
        except (AttributeError, TypeError, ValueError) as error:
            _refuse_state(self, state, error)
            raise


class LIF(Neuron):
    r"""Leaky integrate-and-fire:
    :math:`v \leftarrow v + \frac{\Delta t}{\tau}(v_{leak} - v + r x)`, spike where
    :math:`v > v_{threshold}`, then :math:`v \leftarrow v_{reset}` where it spiked.

    Args:
        tau: membrane time constant in seconds.
        r: resistance.
        v_leak: leak potential; also the initial potential.
        v_threshold: firing threshold.
        v_reset: potential after a spike.
        dt: time step in seconds.
    """

    params = ("tau", "r", "v_leak", "v_threshold", "v_reset")
    tau = _time_constant("tau", "membrane time constant in seconds (positive once trainable)")
    nir_type = nir.LIF
    state_type = F.IState

    def __init__(
        self,
        tau: ArrayLike,
        r: ArrayLike = 1.0,
        v_leak: ArrayLike = 0.0,
        v_threshold: ArrayLike = 1.0,
        v_reset: ArrayLike = 0.0,
        *,
        dt: float = DEFAULT_DT,
    ) -> None:
        super().__init__(dt, tau=tau, r=r, v_leak=v_leak, v_threshold=v_threshold, v_reset=v_reset)

    def kernel(self, state: F.IState, x: torch.Tensor) -> S.Kernel:
        fire = (self.v_threshold, self.v_reset)
        return S.LIKernel(state, self._shape(x), self.tau, self.r, self.v_leak, self.dt, fire)

    def initial_state(self, x: torch.Tensor) -> F.IState:
        return F.IState(x.new_zeros(self._shape(x)) + self.v_leak)

    def forward(self, x: torch.Tensor, state: F.IState | None = None) -> tuple[torch.Tensor, F.IState]:
        if state is None:
            state = self.initial_state(x)
        try:
            return F.lif_step(
                x, state, self.tau, self.r, self.v_leak, self.v_threshold, self.v_reset, self.dt
            )
        except (AttributeError, TypeError, ValueError) as error:
            _refuse_state(self, state, error)
            raise


class CubaLI(Neuron):
    r"""Current-based leaky integrator:
    :math:`i \leftarrow i + \frac{\Delta t}{\tau_{syn}}(-i + w_{in} x)`, then
    :math:`v \leftarrow v + \frac{\Delta t}{\tau_{mem}}(v_{leak} - v + r i)`; outputs :math:`v`.

    Args:
        tau_syn: synaptic time constant in seconds.
        tau_mem: membrane time constant in seconds.
        r: resistance.
        v_leak: leak potential; also the initial potential.
        w_in: input weight onto the synaptic current.
        dt: time step in seconds.
    """

    params = ("tau_syn", "tau_mem", "r", "v_leak", "w_in")
    tau_syn = _time_constant("tau_syn", "synaptic time constant in seconds (positive once trainable)")
    tau_mem = _time_constant("tau_mem", "membrane time constant in seconds (positive once trainable)")
    nir_type = nir.CubaLI
    state_type = F.CubaLIState

    def __init__(
        self,
        tau_syn: ArrayLike,
        tau_mem: ArrayLike,
        r: ArrayLike = 1.0,
        v_leak: ArrayLike = 0.0,
        w_in: ArrayLike = 1.0,
        *,
        dt: float = DEFAULT_DT,
    ) -> None:
        super().__init__(dt, tau_syn=tau_syn, tau_mem=tau_mem, r=r, v_leak=v_leak, w_in=w_in)

    def kernel(self, state: F.CubaLIState, x: torch.Tensor) -> S.Kernel:
        params = (self.tau_syn, self.tau_mem, self.r, self.v_leak, self.w_in)
        return S.CubaKernel(state, self._shape(x), *params, self.dt)

    def initial_state(self, x: torch.Tensor) -> F.CubaLIState:
        zeros = x.new_zeros(self._shape(x))
        return F.CubaLIState(zeros, zeros + self.v_leak)

    def forward(
        self, x: torch.Tensor, state: F.CubaLIState | None = None
    ) -> tuple[torch.Tensor, F.CubaLIState]:
        if state is None:
            state = self.initial_state(x)
        try:
            return F.cuba_li_step(
                x, state, self.tau_syn, self.tau_mem, self.r, self.v_leak, self.w_in, self.dt
            )
        except (AttributeError, TypeError, ValueError) as error:
            _refuse_state(self, state, error)
            raise


class CubaLIF(Neuron):
    r"""Current-based LIF: the :class:`CubaLI` updates, then spike where
    :math:`v > v_{threshold}` and :math:`v \leftarrow v_{reset}` where it spiked.

    Args:
        tau_syn: synaptic time constant in seconds.
        tau_mem: membrane time constant in seconds.
        r: resistance.
        v_leak: leak potential; also the initial potential.
        v_threshold: firing threshold.
        v_reset: potential after a spike.
        w_in: input weight onto the synaptic current.
        dt: time step in seconds.
    """

    params = ("tau_syn", "tau_mem", "r", "v_leak", "v_threshold", "v_reset", "w_in")
    tau_syn = _time_constant("tau_syn", "synaptic time constant in seconds (positive once trainable)")
    tau_mem = _time_constant("tau_mem", "membrane time constant in seconds (positive once trainable)")
    nir_type = nir.CubaLIF
    state_type = F.CubaLIState

    def __init__(
        self,
        tau_syn: ArrayLike,
        tau_mem: ArrayLike,
        r: ArrayLike = 1.0,
        v_leak: ArrayLike = 0.0,
        v_threshold: ArrayLike = 1.0,
        v_reset: ArrayLike = 0.0,
        w_in: ArrayLike = 1.0,
        *,
        dt: float = DEFAULT_DT,
    ) -> None:
        super().__init__(
            dt,
            tau_syn=tau_syn,
            tau_mem=tau_mem,
            r=r,
            v_leak=v_leak,
            v_threshold=v_threshold,
            v_reset=v_reset,
            w_in=w_in,
        )

    def kernel(self, state: F.CubaLIState, x: torch.Tensor) -> S.Kernel:
        params = (self.tau_syn, self.tau_mem, self.r, self.v_leak, self.w_in)
        return S.CubaKernel(state, self._shape(x), *params, self.dt, (self.v_threshold, self.v_reset))

    def initial_state(self, x: torch.Tensor) -> F.CubaLIState:
        zeros = x.new_zeros(self._shape(x))
        return F.CubaLIState(zeros, zeros + self.v_leak)

    def forward(
        self, x: torch.Tensor, state: F.CubaLIState | None = None
    ) -> tuple[torch.Tensor, F.CubaLIState]:
        if state is None:
            state = self.initial_state(x)
        try:
            return F.cuba_lif_step(
                x,
                state,
                self.tau_syn,
                self.tau_mem,
                self.r,
                self.v_leak,
                self.v_threshold,
                self.v_reset,
                self.w_in,
                self.dt,
            )
        except (AttributeError, TypeError, ValueError) as error:
            _refuse_state(self, state, error)
            raise


class Delay(torch.nn.Module):
    r"""Delay line: element :math:`j` outputs its input from
    :math:`\mathrm{round}(d_j / \Delta t)` steps ago, zeros before the first step.

    Args:
        delay: delay per element, in seconds (non-negative).
        dt: time step in seconds.
    """

    state_type = F.DelayState

    def __init__(self, delay: ArrayLike, *, dt: float = DEFAULT_DT) -> None:
        super().__init__()
        self.dt = check_dt(dt, "Delay")
        delay_tensor = _as_tensor("delay", "Delay", delay)
        if not bool(torch.isfinite(delay_tensor).all()) or bool((delay_tensor < 0).any()):
            raise ParameterError("Delay: parameter 'delay' must be finite and non-negative seconds")
        self.register_buffer("delay", delay_tensor)
        self.register_buffer("steps", torch.zeros(delay_tensor.shape, dtype=torch.int64), persistent=False)
        self._update_steps()

    def _update_steps(self) -> None:
        steps = torch.round(self.delay.detach().to(torch.float64) / self.dt).to(torch.int64)
        self.steps = steps.to(self.delay.device)
        self.max_steps = int(steps.max()) if steps.numel() else 0

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        value = state_dict.get(prefix + "delay")
        if isinstance(value, torch.Tensor):
            _check_loaded("Delay", prefix + "delay", value, False)
            if bool((value < 0).any()):
                raise ParameterError(f"Delay: state_dict entry {prefix + 'delay'!r} holds negative delays")
        super()._load_from_state_dict(state_dict, prefix, *args)
        self._update_steps()  # the step counts follow a loaded delay

    @classmethod
    def from_nir(cls, node: Any, dt: float = DEFAULT_DT) -> Delay:
        return cls(delay=node.delay, dt=dt)

    def to_nir(self) -> nir.Delay:
        return nir.Delay(delay=self.delay.detach().cpu().numpy())

    def extra_repr(self) -> str:
        return f"shape={tuple(self.delay.shape)}, max_steps={self.max_steps}, dt={self.dt:g}"

    def initial_state(self, x: torch.Tensor) -> F.DelayState:
        """Zeros: ``max_steps`` past inputs like ``x`` (one step, ``[B, ...]``); a
        :class:`MemoryLimitError` where they would not fit in the device's memory."""
        shape = torch.broadcast_shapes(x.shape, self.steps.shape)
        check_memory(
            self.max_steps * math.prod(shape) * x.element_size(),
            f"Delay: the history of {self.max_steps} steps (delay {float(self.delay.max()):g} s at "
            f"dt = {self.dt:g} s) for inputs of shape {list(shape)}",
            "check the delay's unit (seconds) and dt, or run a smaller batch",
            x.device,
        )
        return F.DelayState(x.new_zeros((self.max_steps, *shape)))

    def forward(
        self, x: torch.Tensor, state: F.DelayState | None = None
    ) -> tuple[torch.Tensor, F.DelayState]:
        if state is None:
            state = self.initial_state(x)
        try:
            return F.delay_step(x, state, self.steps)
        except (AttributeError, TypeError, ValueError) as error:
            _refuse_state(self, state, error)
            raise

    def scan(
        self, x: torch.Tensor, state: F.DelayState | None = None, trace: bool = False
    ) -> tuple[torch.Tensor, F.DelayState, dict[str, torch.Tensor]]:
        """Run ``x`` ``[T, B, ...]`` through ``T`` steps as one index shift:
        ``(outputs, state, traces)``, equal to calling ``forward`` ``T`` times.

        The past inputs and the chunk form one sequence ``s`` (oldest first); element
        ``j`` at step ``t`` outputs ``s[max_steps + t - steps_j]``, one gather. With
        ``trace`` (the history after every step) it steps.
        """
        if state is None:
            state = self.initial_state(x[0])
        if trace:
            outs, histories = [], []
            for t in range(x.shape[0]):
                out, state = self(x[t], state)
                outs.append(out)
                histories.append(state.history)
            return torch.stack(outs), state, {"history": torch.stack(histories)}
        history = state.history
        steps, depth = x.shape[0], history.shape[0]
        sequence = torch.cat((history.flip(0), x.expand(steps, *history.shape[1:])))
        times = torch.arange(steps, device=x.device).reshape(steps, *([1] * (sequence.dim() - 1)))
        index = (depth + times - self.steps).expand(steps, *history.shape[1:])
        out = sequence.gather(0, index)
        return out, F.DelayState(sequence[steps:].flip(0)), {}

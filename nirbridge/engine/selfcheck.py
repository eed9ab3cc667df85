r"""The Triton back-end checks itself on a device before it is trusted there.

A compiled kernel can differ from what Triton's interpreter ran in the tests:
instruction selection, contraction outside the flagged operations, block sizes,
reductions. So the first time a kernel family runs on a device and dtype in a process,
a small deterministic case goes through it and through the eager back-end:

* ``"scan"``: the neuron scan, every family (I, IF, LI, LIF, CubaLI, CubaLIF) with
  per-neuron and shared parameters, membranes that land exactly on and one ulp above
  their threshold, over two chunks (the state carried across the boundary);
* ``"scan backward"``: its reverse-time kernel (BPTT), the gradients to the input, the
  initial state and the thresholds against eager autograd's;
* ``"loop"``: the kernel of a small ``neuron ⇄ linear`` loop (:mod:`.triton_loop`),
  against the neuron's eager step and the layer summed in the kernel's order;
* ``"loop backward"``: its reverse-time kernel (:mod:`.triton_loop_grad`), the
  gradients to the input, the layer's weight and bias, the initial state and the
  neuron's parameters against eager autograd's through the same steps.

Under the ``"exact"`` policy the forward families must equal eager bit for bit; the
backward family, which eager autograd computes in another order, within 1e-5 (float32)
or 1e-9 (float64) of each gradient's largest value. A family that fails runs eagerly for the rest of the
process, and one :class:`~nirbridge.CompileWarning` says which, how many values
differed, and how to report it. Under ``"fast"`` the forward families get the backward
family's tolerance. The case costs a few milliseconds on a GPU (a few seconds under
the interpreter), once per family, device and dtype in a process.

``NIRBRIDGE_SELFCHECK=0`` in the environment, or ``run(..., selfcheck=False)``, skips
it (for benchmarks); :func:`verdicts` lists what was found, and ``nirbridge selftest``
runs every check on demand.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..errors import CompileWarning
from . import precision as _precision
from .announce import if_slow

__all__ = ["FAMILIES", "Verdict", "check", "dtype_name", "forget", "passed", "skipping", "verdicts"]

FAMILIES: tuple[str, ...] = ("scan", "scan backward", "loop", "loop backward")
ENV = "NIRBRIDGE_SELFCHECK"
_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-9}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the self-check of one kernel family found on one device and dtype.

    Attributes:
        family: ``"scan"``, ``"scan backward"``, ``"loop"`` or ``"loop backward"``.
        device: the device, as ``str(torch.device)``.
        dtype: ``"float32"`` or ``"float64"``.
        ok: whether the family may run there (it equals eager as asked).
        exact: whether the comparison asked for bit equality (forward families
            under ``"exact"``) rather than a tolerance.
        differing: values that differed (beyond the tolerance where there is one).
        compared: values compared.
        detail: the largest difference and where, or why the check could not run.
    """

    family: str
    device: str
    dtype: str
    ok: bool
    exact: bool
    differing: int
    compared: int
    detail: str = ""

    def __str__(self) -> str:
        how = "bit for bit" if self.exact else "within tolerance"
        state = "ok" if self.ok else "FAILED, runs eagerly"
        return (
            f"{self.family} on {self.device} ({self.dtype}): {state}, {self.differing} of "
            f"{self.compared} values differ ({how}){'; ' + self.detail if self.detail else ''}"
        )


_VERDICTS: dict[tuple[str, str, torch.dtype, bool], Verdict] = {}
_SKIP: contextvars.ContextVar[bool] = contextvars.ContextVar("nirbridge_selfcheck_skip", default=False)
_RUNNING: contextvars.ContextVar[bool] = contextvars.ContextVar("nirbridge_selfcheck_running", default=False)


@contextlib.contextmanager
def skipping(skip: bool = True) -> Iterator[None]:
    """Inside, families are trusted without the check (``run(selfcheck=False)``)."""
    token = _SKIP.set(skip or _SKIP.get())
    try:
        yield
    finally:
        _SKIP.reset(token)


_COMPILING = (
    "run(backend='triton'): compiling and self-checking the Triton kernels for this device and "
    "dtype (once per process; Triton caches the compiled kernels for later processes, in "
    "TRITON_CACHE_DIR or ~/.triton/cache)"
)


def passed(family: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``family`` may run on ``device`` in ``dtype``: checked the first time it
    is asked in this process (see the module's docstring), trusted where skipped."""
    if _RUNNING.get() or _SKIP.get() or os.environ.get(ENV, "1").strip() in ("0", "false", "no"):
        return True
    exact = _precision.active() != "fast"
    key = (family, str(device), dtype, exact)
    found = _VERDICTS.get(key)
    if found is None:
        with if_slow("triton", _COMPILING):  # the first launch compiles the family's kernel
            found = check(family, device, dtype, exact)
        if not found.ok:
            what = (
                f"found {found.differing} of {found.compared} values other than the eager back-end's "
                f"({found.detail})"
                if found.compared
                else f"could not run its case ({found.detail})"
            )
            warnings.warn(
                f"run(backend='triton'): the self-check of the {family} kernel on {found.device} "
                f"({found.dtype}) {what}, so that kernel runs eagerly for the rest of this process. "
                "Please report it, with the output of `nirbridge selftest --json`, at nirbridge's "
                "issue tracker",
                CompileWarning,
                stacklevel=2,
            )
    return found.ok


def check(family: str, device: torch.device, dtype: torch.dtype, exact: bool = True) -> Verdict:
    """Run ``family``'s case on ``device`` in ``dtype`` (bit equality where ``exact``
    and the family is a forward one) and remember the verdict."""
    case = _CASES[family]
    token = _RUNNING.set(True)
    try:
        with torch.random.fork_rng(devices=[]):  # a layer's initialisation draws: the user's stream is kept
            pairs = case(torch.device(device), dtype)
        bitwise = exact and not family.endswith("backward")
        verdict = _compare(family, device, dtype, pairs, bitwise)
    except Exception as error:  # noqa: BLE001 - a kernel that cannot run here fails its check
        verdict = Verdict(
            family, str(device), dtype_name(dtype), False, exact, 0, 0, f"{type(error).__name__}: {error}"
        )
    finally:
        _RUNNING.reset(token)
    _VERDICTS[(family, str(device), dtype, exact)] = verdict
    return verdict


def forget() -> None:
    """Forget every verdict, so that each family is checked again at its next use."""
    _VERDICTS.clear()


def verdicts() -> list[Verdict]:
    """Every verdict of this process so far, in the order they were reached."""
    return list(_VERDICTS.values())


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` as ``"float32"``, as :class:`Verdict` names it."""
    return str(dtype).removeprefix("torch.")


def _compare(
    family: str,
    device: torch.device,
    dtype: torch.dtype,
    pairs: list[tuple[str, torch.Tensor, torch.Tensor]],
    bitwise: bool,
) -> Verdict:
    """One verdict over ``(what, kernel's, eager's)`` pairs."""
    differing = compared = 0
    worst, where = 0.0, ""
    tolerance = _TOLERANCE.get(dtype, 1e-5)
    for what, got, want in pairs:
        got, want = got.detach().double(), want.detach().double()
        if got.shape != want.shape:
            shapes = f"{what}: shape {tuple(got.shape)}, eager's {tuple(want.shape)}"
            count = want.numel()
            return Verdict(family, str(device), dtype_name(dtype), False, bitwise, count, count, shapes)
        compared += want.numel()
        if bitwise:  # NaN equals NaN; -0.0 differs from +0.0
            bad = (got != want) & ~(torch.isnan(got) & torch.isnan(want))
            bad |= (got == 0) & (want == 0) & (got.signbit() != want.signbit())
        else:  # relative to the largest value of the tensor: gradients near 0 round freely
            scale = float(want.abs().max()) if want.numel() else 0.0
            bad = (got - want).abs() > tolerance * max(scale, 1e-30)
            bad |= torch.isnan(got) != torch.isnan(want)
        count = int(bad.sum())
        if count:
            differing += count
            gap = float((got - want).abs()[bad].max())
            if gap >= worst:
                worst, where = gap, what
    detail = f"largest difference {worst:.3g} in {where}" if differing else ""
    name = dtype_name(dtype)
    return Verdict(family, str(device), name, differing == 0, bitwise, differing, compared, detail)


def _neurons(device: torch.device, dtype: torch.dtype) -> Iterator[tuple[str, Any, torch.Tensor]]:
    """``(label, neuron, input [T, B, n])`` for every family, per-neuron and shared
    parameters; the input drives some membranes exactly onto, and one ulp above,
    their thresholds."""
    from ..neurons import modules as M

    n, steps, batch = 7, 6, 3
    generator = torch.Generator().manual_seed(20261124)

    def values(low: float, high: float) -> torch.Tensor:
        return (low + (high - low) * torch.rand(n, generator=generator, dtype=torch.float64)).to(dtype)

    kinds: dict[str, Callable[[bool], Any]] = {
        "I": lambda each: M.I(r=values(0.5, 2.0) if each else 1.5, dt=1.0),
        "IF": lambda each: M.IF(r=values(0.5, 2.0) if each else 1.0, v_threshold=1.0, v_reset=0.0, dt=1.0),
        "LI": lambda each: M.LI(tau=values(2.0, 9.0) if each else 4.0, r=1.0, v_leak=0.25, dt=1.0),
        "LIF": lambda each: M.LIF(
            tau=values(2.0, 9.0) if each else 3.0,
            r=values(0.5, 2.0) if each else 2.0,
            v_leak=0.0,
            v_threshold=values(0.5, 1.5) if each else 1.0,
            v_reset=values(-0.3, 0.2) if each else 0.0,
            dt=1.0,
        ),
        "CubaLI": lambda each: M.CubaLI(
            tau_syn=values(2.0, 9.0) if each else 3.0, tau_mem=values(2.0, 9.0) if each else 5.0, dt=1.0
        ),
        "CubaLIF": lambda each: M.CubaLIF(
            tau_syn=values(2.0, 9.0) if each else 2.0,
            tau_mem=values(2.0, 9.0) if each else 4.0,
            v_threshold=values(0.5, 1.5) if each else 1.0,
            v_reset=0.0,
            w_in=values(0.5, 2.0) if each else 1.0,
            dt=1.0,
        ),
    }
    for kind, make in kinds.items():
        for each in (True, False):
            neuron = make(each).to(device=device, dtype=dtype)
            x = (torch.randn(steps, batch, n, generator=generator, dtype=torch.float64) * 1.5).to(dtype)
            if kind == "IF" and not each:  # v = dt r x = x at the first step (dt = r = 1)
                one = torch.ones((), dtype=dtype)
                x[0, 0, 0] = one  # exactly on the threshold: no spike
                x[0, 0, 1] = torch.nextafter(one, one * 2)  # one ulp above it: a spike
            yield f"{kind} ({'per neuron' if each else 'shared'})", neuron, x.to(device)


def _scan_case(device: torch.device, dtype: torch.dtype) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The Triton scan against the eager scan, over two chunks."""
    from . import triton as T
    from .eager import scan_neuron

    pairs = []
    with torch.no_grad():
        for label, neuron, x in _neurons(device, dtype):
            mine = theirs = None
            for start, stop in ((0, 2), (2, x.shape[0])):  # a chunk boundary: the state carried on
                out, mine, traces = _kernel_scan(T.FAMILY_OF[type(neuron)], neuron, x[start:stop], mine, True)
                want, theirs, want_traces = scan_neuron(neuron, x[start:stop], theirs, True)
                pairs.append((f"{label} output, steps {start}-{stop - 1}", out, want))
                steps = f"steps {start}-{stop - 1}"
                pairs += [(f"{label} {k}, {steps}", traces[k], want_traces[k]) for k in want_traces]
            pairs += [(f"{label} final {k}", a, b) for k, a, b in zip(mine._fields, mine, theirs)]
    return pairs


def _kernel_scan(family: str, neuron: Any, x: torch.Tensor, state: Any, trace: bool) -> Any:
    """The Triton scan itself, never its eager fallbacks (:func:`.triton.scan` runs
    eagerly once a kernel could not be built)."""
    from . import triton as T

    return T._scan(neuron, family, x, state, trace)


def _scan_backward_case(
    device: torch.device, dtype: torch.dtype
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Gradients through the Triton scan's reverse kernel against eager autograd's."""
    from . import triton as T
    from .eager import scan_neuron

    pairs = []
    for label, neuron, x in _neurons(device, dtype):
        weights = torch.linspace(-1, 1, x.numel(), dtype=dtype, device=device).reshape(x.shape)
        grads = []
        kernel = functools.partial(_kernel_scan, T.FAMILY_OF[type(neuron)])
        for scan in (kernel, scan_neuron):
            inputs = x.clone().requires_grad_(True)
            start = neuron.initial_state(x[0])
            start = type(start)(*(s.detach().clone().requires_grad_(True) for s in start))
            with torch.enable_grad():
                out, state, traces = scan(neuron, inputs, start, True)
                loss = (out * weights).sum() + sum((t * weights).sum() for t in traces.values())
                loss = loss + sum(s.sum() for s in state)
                grads.append(torch.autograd.grad(loss, [inputs, *start], allow_unused=True))
        for name, a, b in zip(("input", *start._fields), *grads):
            if a is not None and b is not None:
                pairs.append((f"{label} gradient to the {name}", a, b))
    return pairs


def _loops(
    device: torch.device, dtype: torch.dtype
) -> Iterator[tuple[str, Any, torch.nn.Linear, torch.Tensor]]:
    """``(family, neuron, layer, external input [T, B, n])`` for IF, LIF and CubaLIF."""
    from ..neurons import modules as M

    n, steps, batch = 5, 6, 3
    generator = torch.Generator().manual_seed(20261125)
    families = (
        ("i", M.IF, {}),
        ("li", M.LIF, {"tau": 3.0}),
        ("cuba", M.CubaLIF, {"tau_syn": 2.0, "tau_mem": 4.0}),
    )
    for family, kind, times in families:
        neuron = kind(**times, v_threshold=1.0, dt=1.0).to(device=device, dtype=dtype)
        layer = torch.nn.Linear(n, n).to(device=device, dtype=dtype)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(n, n, generator=generator, dtype=torch.float64).to(dtype))
            layer.bias.copy_(torch.randn(n, generator=generator, dtype=torch.float64).to(dtype))
        ext = (torch.randn(steps, batch, n, generator=generator, dtype=torch.float64) * 1.5).to(dtype)
        yield family, neuron, layer, ext.to(device)


def _stepped_loop(neuron: Any, layer: torch.nn.Linear, ext: torch.Tensor, state: Any) -> tuple[Any, ...]:
    """The loop stepped in torch: ``x_t = e_t + y_{t-1}``, the neuron's step, ``y_t``
    summed as the kernel sums it (inputs in index order, the bias last)."""
    from .loops import in_order

    spikes, outputs, previous = [], [], None
    for t in range(ext.shape[0]):
        z, state = neuron(ext[t] + previous if previous is not None else ext[t], state)
        previous = in_order(z, layer.weight, layer.bias)
        spikes.append(z)
        outputs.append(previous)
    return torch.stack(spikes), torch.stack(outputs), state


def _loop_case(device: torch.device, dtype: torch.dtype) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The loop kernel against the loop stepped in torch."""
    from . import triton_loop as L

    pairs = []
    with torch.no_grad():
        for family, neuron, layer, ext in _loops(device, dtype):
            start = neuron.initial_state(ext[0])
            out, rec, v, i, _, _ = L._scan_loop(neuron, family, layer, ext, start, None, False)
            spikes, outputs, state = _stepped_loop(neuron, layer, ext, start)
            label = type(neuron).__name__
            pairs += [
                (f"{label} spikes", out, spikes),
                (f"{label} layer outputs", rec, outputs),
                (f"{label} final v", v, state.v),
            ]
            if family == "cuba":
                pairs.append((f"{label} final i", i, state.i))
    return pairs


def _loop_backward_case(
    device: torch.device, dtype: torch.dtype
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Gradients through the loop's reverse kernel against eager autograd's through
    the loop stepped in torch."""
    from .triton_loop_grad import scan_loop

    pairs = []
    for family, neuron, layer, ext in _loops(device, dtype):
        neuron.v_threshold.requires_grad_(True)
        weights = torch.linspace(-1, 1, ext.numel(), dtype=dtype, device=device).reshape(ext.shape)
        grads = []
        for kernel in (True, False):
            inputs = ext.clone().requires_grad_(True)
            start = neuron.initial_state(ext[0])
            start = type(start)(*(s.detach().clone().requires_grad_(True) for s in start))
            leaves = [inputs, layer.weight, layer.bias, neuron.v_threshold, *start]
            with torch.enable_grad():
                if kernel:
                    out, rec, *_ = scan_loop(neuron, family, layer, inputs, start, None, False)
                else:
                    out, rec, _ = _stepped_loop(neuron, layer, inputs, start)
                loss = (out * weights).sum() + (rec * weights.flip(0)).sum()
                grads.append(torch.autograd.grad(loss, leaves, allow_unused=True))
        names = ("input", "weight", "bias", "threshold", *start._fields)
        label = type(neuron).__name__
        for name, a, b in zip(names, *grads):
            if a is not None and b is not None:
                pairs.append((f"{label} gradient to the {name}", a, b))
    return pairs


_CASES: dict[str, Callable[[torch.device, torch.dtype], list[tuple[str, torch.Tensor, torch.Tensor]]]] = {
    "scan": _scan_case,
    "scan backward": _scan_backward_case,
    "loop": _loop_case,
    "loop backward": _loop_backward_case,
}

r"""``nirbridge selftest``: one command that proves an install on a device.

It runs, on ``device`` (``"cuda"`` or ``"cpu"``), each of these and reports it as a
check ``{"name", "ok", "detail"}``:

* ``kernel <family> <dtype>``: the Triton back-end's self-check of each kernel family
  (:mod:`nirbridge.engine.selfcheck`) in float32 and float64; on the CPU through
  Triton's interpreter (the command sets ``TRITON_INTERPRET=1`` before the back-end is
  imported);
* ``graph <name> <backend>``: three networks (dense LIF layers; the Braille SRNN's
  shape, a recurrent CubaLIF layer; a convolutional IF network) through every back-end
  that runs on the device (eager, compile, triton, cpu), against stepping the module:
  exact means every output and state value equal to the bit;
* ``loop probe``: whether the device's matrix product sums the SRNN's recurrent layer
  as the loop kernel does (then the loop runs in one kernel, else it is stepped); a
  verdict, not a failure;
* ``bptt <backend>``: the gradients of a loss through ``run`` against eager
  autograd's, within 1e-5 relative (float32);
* ``precision policy``: full float32 in force inside a run under ``"exact"``, TF32
  allowed under ``"fast"`` where the device has it, and torch's settings restored after;
* ``timings`` (the full form, from a checkout): ``benchmarks/bench_run.py --device
  cuda`` (on the CPU only its dense network, ``--quick``), its output as the detail;
  ok when the benchmark's own exactness checks pass (its figures are for reading,
  not for a verdict); skipped where the benchmark or its peers are not installed.

A check is ``ok``, ``failed`` or ``skipped`` (a back-end that does not run on the
device, or what it needs absent). ``ok`` overall (the exit status 0) when none failed.
"""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nir
import numpy as np
import torch

__all__ = ["selftest"]

Check = dict[str, Any]


def selftest(
    device: str = "cpu", quick: bool = False, on_check: Callable[[Check], None] | None = None
) -> dict[str, Any]:
    """The report: ``{"device", "versions", "checks": [{"name", "status", "ok", "detail",
    "seconds"}], "ok"}``. A check's ``status`` is ``"ok"``, ``"failed"`` or ``"skipped"``
    (its back-end does not run here, or what it needs is absent; ``ok`` is then true,
    as a skip is no failure). ``on_check(check)`` is called as each check ends (the
    command prints it then)."""
    _interpreter_on(device)
    import nirbridge
    from nirbridge.engine import selfcheck

    where = torch.device(device)
    checks: list[Check] = []

    def record(check: Check) -> None:
        checks.append(check)
        if on_check is not None:
            on_check(check)

    def add(name: str, test: Callable[[], tuple[bool | None, str]]) -> None:
        started = time.perf_counter()
        try:
            ok, detail = test()
        except Exception as error:  # noqa: BLE001 - a check that raises failed; the report goes on
            ok, detail = False, f"{type(error).__name__}: {error}"
        seconds = time.perf_counter() - started
        status = "skipped" if ok is None else "ok" if ok else "failed"
        record(
            {
                "name": name,
                "status": status,
                "ok": status != "failed",
                "detail": detail,
                "seconds": round(seconds, 3),
            }
        )

    backends = _backends(where)
    selfcheck.forget()
    for family in selfcheck.FAMILIES:
        for dtype in (torch.float32, torch.float64):
            if "triton" in backends:
                add(f"kernel {family} {str(dtype)[6:]}", lambda f=family, d=dtype: _kernel(f, where, d))
            else:
                record(_skipped(f"kernel {family} {str(dtype)[6:]}", backends))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.SilentNetworkWarning)
        for name, build in _GRAPHS.items():
            for backend in ("eager", "compile", "triton", "cpu"):
                if backend in backends:
                    add(f"graph {name} {backend}", lambda b=build, k=backend: _graph(b(), k, where))
                else:
                    record(_skipped(f"graph {name} {backend}", backends))
        add("loop probe", lambda: _probe(where))
        for backend in ("compile", "triton", "cpu"):
            if backend in backends:
                add(f"bptt {backend}", lambda k=backend: _bptt(k, where))
        add("precision policy", lambda: _policy(where))
    if not quick:
        add("timings", lambda: _timings(device))
    return {
        "device": _device_name(where),
        "versions": _versions(),
        "checks": checks,
        "ok": all(c["status"] != "failed" for c in checks),
    }


WIDTH = 26
"""The width of a check's name in the text (the longest: ``kernel cubalif_loop float32``)."""

MARKS = {"ok": "ok  ", "failed": "FAIL", "skipped": "skip"}


def _interpreter_on(device: str) -> None:
    """On the CPU, Triton's kernels run through its interpreter: ``TRITON_INTERPRET=1``,
    which triton and nirbridge's Triton back-end read as they are imported, so before
    anything imports them."""
    if device == "cpu" and "nirbridge.engine.triton" not in sys.modules and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def header(device: str, versions: dict[str, Any] | None = None) -> str:
    """The text's first lines: the device (a report's name of it, or ``"cpu"``/``"cuda"``)
    and the versions (by default this process's)."""
    _interpreter_on(device if device in ("cpu", "cuda") else "")
    if device in ("cpu", "cuda"):
        device = _device_name(torch.device(device))
    versions = _versions() if versions is None else versions
    return "\n".join([f"nirbridge selftest on {device}", *(f"  {k}: {v}" for k, v in versions.items())])


def line(check: Check) -> str:
    """One check as a line of text: ``ok``, ``FAIL`` or ``skip``, its name, its detail."""
    detail = check["detail"].replace("\n", "\n" + " " * (WIDTH + 8))
    return f"{MARKS[check['status']]}  {check['name']:<{WIDTH}}  {detail}"


def verdict(report: dict[str, Any]) -> str:
    """The text's last line."""
    failed = [c["name"] for c in report["checks"] if c["status"] == "failed"]
    skipped = sum(c["status"] == "skipped" for c in report["checks"])
    tail = f" ({skipped} skipped: not run here)" if skipped else ""
    if failed:
        return f"{len(failed)} check(s) failed: {', '.join(failed)}{tail}"
    return f"all checks passed{tail}"


def render(report: dict[str, Any]) -> str:
    """The report as text: versions, one line per check, the verdict."""
    lines = [header(report["device"], report["versions"]), *(line(c) for c in report["checks"])]
    return "\n".join([*lines, verdict(report)])


def _backends(device: torch.device) -> list[str]:
    """The back-ends that run on ``device``: eager always; compile where torch.compile
    does; triton on CUDA, and on the CPU under Triton's interpreter; cpu (numba) on the
    CPU where numba is installed."""
    from nirbridge.engine import triton as T

    found = ["eager"]
    if hasattr(torch, "compile") and importlib.util.find_spec("torch._inductor") is not None:
        found.append("compile")
    if T.unavailable(device) is None:
        found.append("triton")
    from nirbridge.engine import cpu

    if cpu.unavailable(device) is None:
        found.append("cpu")
    return found


def _skipped(name: str, backends: list[str]) -> Check:
    """A check whose back-end does not run here: not a failure, said as such."""
    return {
        "name": name,
        "status": "skipped",
        "ok": True,
        "detail": f"not run: only {', '.join(backends)} run here",
        "seconds": 0.0,
    }


def _kernel(family: str, device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    from nirbridge.engine import selfcheck

    verdict = selfcheck.check(family, device, dtype)
    how = "bit for bit" if verdict.exact else "within 1e-5/1e-9 relative"
    detail = f"{verdict.differing} of {verdict.compared} values differ from eager ({how})"
    return verdict.ok, detail + (f"; {verdict.detail}" if verdict.detail else "")


def _dense() -> nir.NIRGraph:
    """Input 16 -> (Affine -> LIF) x 2 -> Output."""
    rng = np.random.default_rng(1)
    nodes: dict[str, nir.NIRNode] = {"input": nir.Input(np.array([16]))}
    edges, previous = [], "input"
    for k in range(2):
        nodes[f"fc{k}"] = nir.Affine(rng.normal(size=(16, 16)) * 0.6, rng.normal(size=16) * 0.1)
        nodes[f"lif{k}"] = nir.LIF(
            tau=rng.uniform(2e-3, 8e-3, 16), r=np.full(16, 60.0), v_leak=np.zeros(16),
            v_threshold=np.ones(16), v_reset=np.zeros(16),
        )  # fmt: skip
        edges += [(previous, f"fc{k}"), (f"fc{k}", f"lif{k}")]
        previous = f"lif{k}"
    nodes["output"] = nir.Output(np.array([16]))
    return nir.NIRGraph(nodes=nodes, edges=[*edges, (previous, "output")], type_check=False)


def _srnn() -> nir.NIRGraph:
    """The Braille SRNN's shape: Affine 12 -> 38, a CubaLIF layer with a recurrent
    Linear 38 -> 38, Affine 38 -> 7, CubaLI."""
    rng = np.random.default_rng(2)

    def cuba(n: int, spiking: bool) -> nir.NIRNode:
        common = dict(
            tau_syn=rng.uniform(2e-3, 6e-3, n), tau_mem=rng.uniform(4e-3, 9e-3, n), r=np.full(n, 60.0),
            v_leak=np.zeros(n),
        )  # fmt: skip
        if not spiking:
            return nir.CubaLI(**common)
        return nir.CubaLIF(**common, v_threshold=np.ones(n), v_reset=np.zeros(n))

    nodes = {
        "input": nir.Input(np.array([12])),
        "fc1": nir.Affine(rng.normal(size=(38, 12)), rng.normal(size=38) * 0.1),
        "lif1": cuba(38, True),
        "w_rec": nir.Linear(rng.normal(size=(38, 38)) * 0.3),
        "fc2": nir.Affine(rng.normal(size=(7, 38)), np.zeros(7)),
        "li2": cuba(7, False),
        "output": nir.Output(np.array([7])),
    }
    edges = [("input", "fc1"), ("fc1", "lif1"), ("lif1", "w_rec"), ("w_rec", "lif1")]
    edges += [("lif1", "fc2"), ("fc2", "li2"), ("li2", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


def _cnn() -> nir.NIRGraph:
    """Conv2d 2 -> 4 (3x3) -> IF -> SumPool2d 2 -> Flatten -> Affine -> IF."""
    rng = np.random.default_rng(3)
    nodes = {
        "input": nir.Input(np.array([2, 8, 8])),
        "conv": nir.Conv2d((8, 8), rng.normal(size=(4, 2, 3, 3)), 1, 1, 1, 1, rng.normal(size=4) * 0.1),
        "if1": nir.IF(r=np.ones((4, 8, 8)), v_threshold=np.ones((4, 8, 8)), v_reset=np.zeros((4, 8, 8))),
        "pool": nir.SumPool2d(np.array([2, 2]), np.array([2, 2]), np.array([0, 0])),
        "flat": nir.Flatten(start_dim=0, end_dim=-1, input_type={"input": np.array([4, 4, 4])}),
        "fc": nir.Affine(rng.normal(size=(10, 64)) * 0.3, np.zeros(10)),
        "if2": nir.IF(r=np.ones(10), v_threshold=np.ones(10), v_reset=np.zeros(10)),
        "output": nir.Output(np.array([10])),
    }
    sequence = ["input", "conv", "if1", "pool", "flat", "fc", "if2", "output"]
    return nir.NIRGraph(nodes=nodes, edges=list(zip(sequence, sequence[1:])), type_check=False)


_GRAPHS: dict[str, Callable[[], nir.NIRGraph]] = {"dense": _dense, "srnn": _srnn, "cnn": _cnn}


def _spikes(graph: nir.NIRGraph, device: torch.device, steps: int = 24, batch: int = 4) -> torch.Tensor:
    shape = tuple(int(v) for v in graph.nodes["input"].input_type["input"])
    generator = torch.Generator().manual_seed(0)
    return (torch.rand(steps, batch, *shape, generator=generator) < 0.3).float().to(device)


def _graph(graph: nir.NIRGraph, backend: str, device: torch.device) -> tuple[bool, str]:
    """``run`` on ``backend`` against stepping: outputs and the final state, to the bit."""
    from torch.utils import _pytree as pytree

    import nirbridge

    dt = 1.0 if "conv" in graph.nodes else 1e-4
    gm = nirbridge.nir_to_torch(graph, dt=dt, device=device)
    x = _spikes(graph, device)
    with torch.no_grad():
        result = nirbridge.run(gm, x, backend=backend, chunk=10, record="outputs")
        state, outs = None, []
        for t in range(x.shape[0]):
            out, state = gm(x[t], state)
            outs.append(out)
    stepped = torch.stack(outs)
    pairs = [(result.output, stepped), *zip(pytree.tree_leaves(result.state), pytree.tree_leaves(state))]
    differing = sum(int((a != b).sum()) for a, b in pairs)
    compared = sum(b.numel() for _, b in pairs)
    spikes = sum(int(result.records[k].sum()) for k in result.spiking if k in result.records)
    detail = f"{differing} of {compared} values differ from stepping ({spikes} spikes in all layers)"
    given_up = _cpu_given_up() if backend == "cpu" else None
    if given_up is not None:  # eager ran in its place: equal to stepping, but not the back-end's check
        return False, f"{detail}; {given_up}"
    return differing == 0 and spikes > 0, detail + ("" if spikes else "; no spike: the check proves little")


def _cpu_given_up() -> str | None:
    """Why the cpu back-end runs eagerly in this process (numba could not build one of
    its kernels: :func:`nirbridge.engine.cpu.give_up`), or None."""
    from nirbridge.engine import cpu

    if not cpu._failed:
        return None
    error = cpu._failed[0]
    text = str(error).strip().splitlines()
    return (
        f"the cpu back-end gave up its numba kernels in this process ({type(error).__name__}: "
        f"{text[0] if text else ''}), so run(backend='cpu') runs eagerly"
    )


def _autograd_nodes(tensor: torch.Tensor) -> set[str]:
    """The class names of the autograd graph's nodes behind ``tensor``."""
    names, seen, stack = set(), set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack += [child for child, _ in node.next_functions]
    return names


def _probe(device: torch.device) -> tuple[bool, str]:
    """The loop probe's verdict for the SRNN's recurrent layer, batch 4, float32."""
    from nirbridge.engine import triton as T

    if T.unavailable(device) is not None:
        return True, "not run: the Triton back-end does not run here"
    from nirbridge.engine.triton_loop import sums_in_order

    layer = torch.nn.Linear(38, 38, bias=False).to(device)
    if sums_in_order(layer, 4, torch.empty(0, device=device)):
        return True, "the device sums the loop's layer as the kernel does: the loop runs in one kernel"
    return True, "the device sums the loop's layer in another order: the loop is stepped (exact, slower)"


def _bptt(backend: str, device: torch.device) -> tuple[bool, str]:
    """Gradients to every parameter of the SRNN through ``run(backend)`` against the
    eager back-end's autograd, within 1e-5 of each gradient's largest value."""
    import nirbridge

    graph = _srnn()
    grads, kernels = [], set()
    for which in (backend, "eager"):
        gm = nirbridge.nir_to_torch(graph, dt=1e-4, device=device, trainable=True)
        result = nirbridge.run(gm, _spikes(graph, device, steps=16), backend=which, chunk=5)
        if which == "cpu":
            kernels = _autograd_nodes(result.output) & {"_ScanBackward", "_LoopBackward"}
        weights = torch.linspace(-1, 1, result.output.numel(), device=device).reshape(result.output.shape)
        (result.output * weights).sum().backward()
        grads.append({n: p.grad for n, p in gm.named_parameters() if p.grad is not None})
    if backend == "cpu":  # the reverse-time kernels, not eager autograd in their place
        given_up = _cpu_given_up()
        if given_up is not None or "_ScanBackward" not in kernels:
            return (
                False,
                given_up or "the run's gradients did not go through the cpu back-end's scan backward kernel",
            )
    mine, theirs = grads
    if mine.keys() != theirs.keys():
        return False, f"gradients to {sorted(mine)} against eager's {sorted(theirs)}"
    gaps = {
        n: float((mine[n] - theirs[n]).abs().max()) / max(float(theirs[n].abs().max()), 1e-30) for n in theirs
    }
    worst = max(gaps, key=gaps.__getitem__)
    detail = (
        f"{len(theirs)} parameters; largest difference from eager {gaps[worst]:.2g} of the gradient ({worst})"
    )
    if backend == "cpu":
        detail += "; kernels: " + ", ".join(
            sorted(k.strip("_").replace("Backward", " backward") for k in kernels)
        )
    return gaps[worst] <= 1e-5, f"{detail}, allowed 1e-5"


def _policy(device: torch.device) -> tuple[bool, str]:
    """Inside a run under "exact", full float32; under "fast", TF32 where the device
    allows it; torch's settings as they were afterwards."""
    import nirbridge
    from nirbridge.engine import precision as P

    def settings() -> tuple[Any, ...]:
        return (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)

    seen: dict[str, bool] = {}

    class Probe(torch.nn.Module):  # a node_map module that looks at the settings inside the run
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen[P.active() or "none"] = torch.get_float32_matmul_precision() == "highest"
            return x

    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "p": nir.Scale(np.ones(3)),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "p"), ("p", "output")],
        type_check=False,
    )
    before = settings()
    gm = nirbridge.nir_to_torch(graph, node_map={nir.Scale: lambda node: Probe()}, device=device)
    x = torch.zeros(2, 1, 3, device=device)
    nirbridge.run(gm, x, precision="exact")
    nirbridge.run(gm, x, precision="fast")
    restored = settings() == before
    ok = seen.get("exact") is True and seen.get("fast") is False and restored
    said = {True: "yes", False: "NO"}
    return ok, (
        f"exact: full float32 inside {said[seen.get('exact') is True]}; fast: TF32 allowed inside "
        f"{said[seen.get('fast') is False]}; settings restored after {said[restored]}"
    )


BENCH_PEERS = ("nirtorch", "norse", "snntorch", "spikingjelly")
"""The simulators benchmarks/bench_run.py imports to measure nirbridge against."""


def _timings(device: str) -> tuple[bool | None, str]:
    """``benchmarks/bench_run.py`` on the device, from a checkout (see the module's docstring)."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_run.py"
    if not script.exists():
        return (
            None,
            "not run: benchmarks/bench_run.py comes with a checkout of nirbridge, not with the package",
        )
    missing = [name for name in BENCH_PEERS if importlib.util.find_spec(name) is None]
    if missing:  # bench_run compares with its peers in one run, and imports every one
        return (
            None,
            f"not run: benchmarks/bench_run.py measures against {', '.join(BENCH_PEERS)}, and "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed here "
            "(make test installs them; --quick leaves the timings out)",
        )
    command = [sys.executable, str(script), "--device", device]
    if device != "cuda":  # the CPU's figures are bench_run's own business: one network, briefly
        command += ["--quick", "--networks", "dense"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    text = (done.stdout + done.stderr).strip()
    return done.returncode == 0, text[-4000:]


def _device_name(device: torch.device) -> str:
    if device.type == "cuda" and torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"{device.type} ({platform.processor() or platform.machine()})"


def _versions() -> dict[str, str | None]:
    import nirbridge

    driver = None
    if torch.cuda.is_available():
        try:
            driver = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=False,
            ).stdout.strip() or None  # fmt: skip
        except OSError:
            driver = None
    return {
        "python": platform.python_version(),
        "nirbridge": nirbridge.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "driver": driver,
        "triton": _distribution("triton"),  # not imported: that would fix its interpreter setting
        "nir": getattr(nir, "version", None) or _distribution("nir"),
        "triton_interpreter": os.environ.get("TRITON_INTERPRET"),
    }


def _distribution(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

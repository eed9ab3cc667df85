"""nirbridge selftest: one command that proves an install, on the CPU through the
eager, compile and (Triton's interpreter) triton back-ends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import torch
from click.testing import CliRunner

from nirbridge.cli import main
from nirbridge.engine import selfcheck
from nirbridge.engine import triton as T

FAMILIES = [f"kernel {f} {d}" for f in selfcheck.FAMILIES for d in ("float32", "float64")]
GRAPHS = [f"graph {g} {b}" for g in ("dense", "srnn", "cnn") for b in ("eager", "compile", "triton", "cpu")]


def test_selftest_on_the_cpu_passes_and_its_json_names_every_check():
    """The command in its full form, as CI runs it, in a fresh process (it sets
    TRITON_INTERPRET itself); the timings come from benchmarks/bench_run.py."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "nirbridge", "selftest", "--device", "cpu", "--json"],
        capture_output=True, text=True, env=env, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["device"].startswith("cpu")
    assert (
        report["versions"]["torch"] == torch.__version__ and report["versions"]["triton_interpreter"] == "1"
    )
    assert {"python", "nirbridge", "torch", "cuda", "driver", "triton", "nir"} <= report["versions"].keys()
    names = [c["name"] for c in report["checks"]]
    assert names == [
        *FAMILIES,
        *GRAPHS,
        "loop probe",
        "bptt compile",
        "bptt triton",
        "bptt cpu",
        "precision policy",
        "timings",
    ]
    for check in report["checks"]:
        assert check.keys() == {"name", "status", "ok", "detail", "seconds"} and check["ok"], check
        assert check["status"] == "ok", check  # every back-end runs here: nothing skipped
    said = [
        line.split()[1:3] for line in done.stderr.splitlines() if line.startswith(("ok ", "FAIL", "skip"))
    ]
    assert len(said) == len(names), done.stderr  # each check on stderr as it ended
    graphs = {c["name"]: c["detail"] for c in report["checks"] if c["name"].startswith("graph")}
    assert all(d.startswith("0 of ") and "differ from stepping" in d for d in graphs.values()), graphs
    assert all(" 0 spikes" not in d for d in graphs.values())  # every network is active
    assert "dense" in report["checks"][-1]["detail"]  # bench_run's own report


def test_a_kernel_made_to_differ_fails_the_selftest_with_exit_status_1(monkeypatch):
    launch = T._forward

    def off_by_one_ulp(*args, **kwargs):
        out, v, *rest = launch(*args, **kwargs)
        return (out, torch.nextafter(v, v + 1), *rest)

    monkeypatch.setattr(T, "_forward", off_by_one_ulp)
    selfcheck.forget()
    try:
        result = CliRunner().invoke(main, ["selftest", "--device", "cpu", "--quick"])
    finally:
        selfcheck.forget()
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()  # stderr may hold the logs of an earlier test's settings
    lines = lines[next(k for k, line in enumerate(lines) if line.startswith("nirbridge selftest on cpu")) :]
    assert any(
        line.startswith("FAIL  kernel scan float32") and "values differ from eager" in line for line in lines
    )
    assert re.match(r"\d+ check\(s\) failed: .*kernel scan float32", lines[-1]), lines[-1]
    assert any(line.startswith("ok    graph dense triton") for line in lines)  # it fell back to eager: exact


def test_the_cpu_back_end_s_gradient_kernels_are_checked_and_a_given_up_back_end_fails(monkeypatch):
    """``bptt cpu`` runs the reverse-time kernels against eager autograd: ok where they
    ran and agree, failed where they give other gradients, and failed (with the reason)
    after the back-end gave its kernels up in this process, where every run is eager."""
    from nirbridge import selftest as S
    from nirbridge.engine import cpu as C
    from nirbridge.engine import cpu_kernels as K

    where = torch.device("cpu")
    ok, detail = S._bptt("cpu", where)
    assert ok and "Scan backward" in detail, detail
    reverse = K.kernel("scan backward")

    def doubled(*arguments):
        reverse(*arguments)
        arguments[-13][...] *= 2  # g_pre: the gradient of the input term, into every weight before

    monkeypatch.setitem(K._COMPILED, "scan backward", doubled)
    ok, detail = S._bptt("cpu", where)
    assert not ok and "largest difference from eager" in detail, detail
    monkeypatch.setitem(K._COMPILED, "scan backward", reverse)
    monkeypatch.setattr(C, "_failed", [RuntimeError("LLVM ERROR: no kernel for you")])
    for check in (lambda: S._bptt("cpu", where), lambda: S._graph(S._srnn(), "cpu", where)):
        ok, detail = check()
        assert not ok and "gave up its numba kernels" in detail and "no kernel for you" in detail, detail


def test_a_check_that_does_not_run_here_is_a_skip_and_said_as_one(monkeypatch):
    """A back-end that does not run on the device, and timings whose benchmark peers are
    absent, are ``"skipped"`` (ok: no failure), shown as ``skip``, counted in the verdict."""
    from nirbridge import selftest as S

    monkeypatch.setattr(S, "_backends", lambda device: ["eager"])
    monkeypatch.setattr(S, "BENCH_PEERS", ("nirtorch", "no_such_simulator_here"))
    seen = []
    report = S.selftest("cpu", on_check=seen.append)
    assert seen == report["checks"] and report["ok"]
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["graph dense eager"] == "ok" and statuses["graph dense cpu"] == "skipped"
    assert statuses["kernel scan float32"] == "skipped" and statuses["timings"] == "skipped"
    timings = report["checks"][-1]["detail"]
    assert "no_such_simulator_here is not installed here" in timings, timings
    text = S.render(report)
    assert "skip  graph dense cpu" in text and "ok    graph dense eager" in text
    skipped = sum(c["status"] == "skipped" for c in report["checks"])
    assert text.splitlines()[-1] == f"all checks passed ({skipped} skipped: not run here)"


def test_cuda_is_proved_where_torch_sees_it_and_refused_in_one_line_elsewhere():
    if torch.cuda.is_available():  # the GPU machine: the real proof (docs/gpu.md)
        result = CliRunner().invoke(main, ["selftest", "--device", "cuda", "--quick", "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["device"].startswith("cuda")
        return
    result = CliRunner().invoke(main, ["selftest", "--device", "cuda"])
    assert result.exit_code == 1
    assert "torch sees no CUDA device here; use --device cpu" in result.output


def test_the_text_report_on_the_cpu_passes_in_a_shell_without_triton_s_interpreter_set():
    """The text form prints a header first; it once imported triton before the command set
    TRITON_INTERPRET, and every loop kernel then failed in the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "nirbridge", "selftest", "--device", "cpu", "--quick"],
        capture_output=True, text=True, env=env, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "triton_interpreter: 1" in done.stdout and "all checks passed" in done.stdout
    assert "ok    kernel loop float32" in done.stdout

"""nirbridge.conformance.workers: one process per simulator for all files, that a crash,
a hang, or a child it forked costs one file and never the run."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from nirbridge.conformance.workers import Worker, WorkerFailure

# a Python that speaks peer_runner's --serve protocol: refuses each file by name, hangs on
# hang.nir, and on fork.nir forks a child that keeps the answers' pipe open, then hangs
FAKE = """#!{python}
import json, os, sys, time
if sys.argv[2:3] != ["--serve"]:
    sys.exit(1)
for line in sys.stdin:
    name = os.path.basename(json.loads(line)["graph"])
    if name == "fork.nir" and os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    if name in ("fork.nir", "hang.nir"):
        time.sleep(60)
    print(json.dumps({{"status": 3, "message": "refused " + name, "note": None}}), flush=True)
"""


@pytest.fixture
def worker(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    made = Worker("spyx", str(fake), timeout=3)
    yield made
    made.close()


def test_a_hang_costs_its_file_even_when_a_forked_child_holds_the_pipe(worker, tmp_path):
    for name in ("hang.nir", "fork.nir"):
        started = time.monotonic()
        with pytest.raises(WorkerFailure, match="timed out after 3 s"):
            worker.job(str(tmp_path / name), "in.h5", "out.h5")
        assert time.monotonic() - started < 20, name  # the child sleeps 60 s: it was killed too
        answer, _ = worker.job(str(tmp_path / "a.nir"), "in.h5", "out.h5")  # a fresh process
        assert answer == {"status": 3, "message": "refused a.nir", "note": None}


def test_a_process_that_died_between_files_is_replaced(worker, tmp_path):
    first, _ = worker.job(str(tmp_path / "a.nir"), "in.h5", "out.h5")
    pid = worker.process.pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    second, _ = worker.job(str(tmp_path / "b.nir"), "in.h5", "out.h5")
    assert first["message"] == "refused a.nir" and second["message"] == "refused b.nir"
    assert worker.process.pid != pid


def test_odd_file_names_cross_the_protocol_unchanged(worker, tmp_path):
    name = os.fsdecode(b"new\nline\xff.nir")
    answer, _ = worker.job(str(tmp_path / name), "in.h5", "out.h5")
    assert answer["message"] == "refused " + name
    assert json.loads(json.dumps(name)) == name

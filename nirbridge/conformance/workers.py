"""One process per simulator for :func:`nirbridge.conformance.conformance`.

A :class:`Worker` starts :mod:`.peer_runner` once, in the simulator's Python, with
``--serve``: it then reads one job per line on stdin (a JSON object naming the graph,
inputs and outputs files) and answers each with one JSON line, ``{"status": 0 | 3 | 4 | 1,
"message": ..., "note": ...}`` (0: outputs written; 3: the import failed; 4: the run
failed; 1: anything else). A simulator pays for its interpreter and its imports once,
not once per file, and simulators stay apart: each has a process of its own, so one
simulator's import cannot change what another's gives.

What the simulator prints goes to a file (stdout included: the runner answers on a
copy of its stdout and points file descriptor 1 at stderr), of which each job reads
only the tail it wrote. A worker that crashes or takes longer than its timeout on one
file is killed; that file's row says so, and the next file starts a fresh one.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from typing import Any

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_runner.py")
TAIL = 64 * 1024  # bytes of a job's stderr read: its last line, and the runner's note before it
ANSWER = 64 * 1024  # the longest answer line; longer lines (not the runner's) are skipped unread
EXITS = (3, 4)  # what a runner of one file exits with when the import or the run fails


class WorkerFailure(Exception):
    """The worker died, or did not answer in time, on one job (it is restarted for the next)."""


class Worker:
    """``python peer_runner.py --serve NAME``, started on the first job and kept for the
    next; jobs run one at a time (a lock), :meth:`close` ends it."""

    def __init__(self, name: str, python: str, timeout: float) -> None:
        self.name, self.python, self.timeout = name, python, timeout
        self.lock = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        self.answers: queue.Queue[bytes] = queue.Queue()
        self.folder: str | None = None  # holds stderr.txt while a process may write it

    @property
    def stderr_path(self) -> str:
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="nirbridge-conformance-")
        return os.path.join(self.folder, "stderr.txt")

    def _start(self) -> subprocess.Popen[bytes]:
        with open(self.stderr_path, "ab") as stderr:
            process = subprocess.Popen(
                [self.python, RUNNER, "--serve", self.name],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                # a group of its own, so that killing it kills what it forked too (a child
                # that kept the answers' pipe open would keep the reader waiting)
                start_new_session=hasattr(os, "killpg"),
            )
        answers: queue.Queue[bytes] = queue.Queue()

        def read() -> None:  # a thread, so that waiting for an answer can time out everywhere
            stdout = process.stdout
            assert stdout is not None
            try:
                while line := stdout.readline(ANSWER):
                    whole = line.endswith(b"\n")
                    while line and not line.endswith(b"\n"):  # longer than an answer: not one
                        line = stdout.readline(ANSWER)
                    if whole and line.startswith(b"{"):
                        answers.put(line)
            finally:
                answers.put(b"")  # end of file: the process is gone
                stdout.close()  # here: closing it elsewhere would wait for this readline

        threading.Thread(target=read, daemon=True).start()
        self.process, self.answers = process, answers
        return process

    def job(self, graph: str, inputs: str, outputs: str) -> tuple[dict[str, Any], list[str]]:
        """Run one file: the runner's answer, and the lines it wrote on stderr meanwhile."""
        with self.lock:
            if self.process is not None and self.process.poll() is not None:
                self._forget()  # it died between two jobs
            process = self.process
            start = os.path.getsize(self.stderr_path) if os.path.exists(self.stderr_path) else 0
            if process is None:  # what a process prints as it starts belongs to its first job
                process = self._start()
            request = json.dumps({"graph": graph, "inputs": inputs, "outputs": outputs}) + "\n"
            try:
                assert process.stdin is not None
                process.stdin.write(request.encode("utf-8"))
                process.stdin.flush()
                line = self.answers.get(timeout=self.timeout)
            except queue.Empty:
                self._kill()
                raise WorkerFailure(f"timed out after {self.timeout:g} s") from None
            except OSError:  # the pipe closed: it died before reading the job
                line = b""
            lines = tail(self.stderr_path, start)
            if not line:
                try:
                    status = process.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:  # it closed its answers but lives on
                    self._kill()
                    raise WorkerFailure(f"{self.python} stopped answering") from None
                self._forget()
                told = (lines or [""])[-1][:300]
                if status in EXITS:  # it ran the job as a runner of one file does, and said why it failed
                    return {"status": status, "message": told, "note": None}, lines
                raise WorkerFailure(f"{self.python} crashed (exit status {status}): {told}")
            try:
                answer = json.loads(line)
            except ValueError:
                self._kill()
                raise WorkerFailure(f"{self.python} answered {line[:200]!r}, not a job's status") from None
            return answer, lines

    def _kill(self) -> None:
        """Kill the process and what it forked (its process group, where there are groups)."""
        if self.process is not None:
            with contextlib.suppress(OSError):
                if hasattr(os, "killpg"):
                    os.killpg(self.process.pid, signal.SIGKILL)
                else:
                    self.process.kill()
            self.process.wait()
            self._forget()

    def _forget(self) -> None:
        """Let go of a process that has ended: its stdin closed here, its stdout by the
        thread that reads it (when the last writer is gone)."""
        if self.process is not None:
            if self.process.stdin is not None:
                with contextlib.suppress(OSError):
                    self.process.stdin.close()
            self.process = None

    def close(self) -> None:
        """End the process (closing its stdin ends its loop; killed if it lingers)."""
        with self.lock:
            process = self.process
            if process is not None:
                try:
                    assert process.stdin is not None
                    process.stdin.close()
                    process.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    self._kill()
                self._forget()
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None


def tail(path: str, start: int = 0, size: int = TAIL) -> list[str]:
    """The non-empty lines of the last ``size`` bytes written to ``path`` after byte ``start``."""
    with open(path, "rb") as file:
        file.seek(0, os.SEEK_END)
        end = file.tell()
        file.seek(max(start, end - size))
        text = file.read(size).decode("utf-8", "replace")
    return [line for line in text.splitlines() if line.strip()]

"""nirbridge.limits: the memory a device has free, and refusing what cannot fit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import nirbridge
from nirbridge import limits


def test_human_units():
    assert limits.human(512) == "512 B"
    assert limits.human(3 << 30) == "3.0 GiB"
    assert limits.human(1.5 * (1 << 40)) == "1.5 TiB"


def test_free_memory_is_found_and_bounded_by_what_linux_reports():
    free = limits.available()
    assert isinstance(free, int) and free > 0
    with open("/proc/meminfo", encoding="ascii") as file:
        total = next(int(line.split()[1]) * 1024 for line in file if line.startswith("MemTotal:"))
    assert free <= total
    assert limits.available(torch.device("cpu")) is not None
    assert limits.available("meta") is None  # nothing to measure: nothing is refused


def test_an_address_space_limit_counts_as_memory():
    script = textwrap.dedent(
        """
        import resource
        from nirbridge import limits
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))
        print(limits.available())
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 0 < int(result.stdout) < 6 << 30


def test_check_memory_names_what_asks_and_what_to_change(monkeypatch):
    monkeypatch.setattr(limits, "available", lambda device=None: 1 << 30)
    limits.check_memory(1 << 29, "half a GiB", "nothing")
    with pytest.raises(nirbridge.MemoryLimitError) as info:
        limits.check_memory(3 << 30, "the records", "record fewer nodes")
    assert (
        str(info.value) == "the records needs 3.0 GiB, but main memory has 1.0 GiB free; record fewer nodes"
    )
    assert (info.value.requested, info.value.free) == (3 << 30, 1 << 30)
    assert isinstance(info.value, MemoryError) and isinstance(info.value, nirbridge.NirBridgeError)
    monkeypatch.setattr(limits, "available", lambda device=None: None)
    limits.check_memory(1 << 60, "anything", "nothing")  # unknown free memory refuses nothing

"""Test helpers for users of nirbridge: assert that two implementations of a network agree."""

from __future__ import annotations

import inspect
from typing import Any

from .verify import Report, VerifyError, verify

__all__ = ["assert_equivalent"]


def assert_equivalent(reference: Any, candidate: Any, inputs: Any, **options: Any) -> Report:
    """:func:`nirbridge.verify` that raises ``AssertionError`` with the report's table
    when the two differ, or when a spike comparison is silent on both sides (which
    proves nothing) unless ``allow_silent=True``, and returns the report when they
    agree. ``options`` are :func:`nirbridge.verify`'s keywords (``atol``, ``rtol``,
    ``record``, ``state``, ``dt``, ``allow_negative_tau``, ``allow_silent``, ``layers``)."""
    known = set(inspect.signature(verify).parameters) - {"reference", "candidate", "inputs"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise VerifyError(
            f"assert_equivalent: unknown keyword(s) {', '.join(unknown)}; it takes verify's: "
            + ", ".join(sorted(known))
        )
    report = verify(reference, candidate, inputs, **options)
    if not report.ok:
        raise AssertionError(str(report))
    return report

"""The documentation's tested examples: a ```python block right after a line
``<!-- example: NAME -->``, and the ```text block after it, if any, holding what the
example prints. :func:`run` executes one in a fresh folder and gives what it printed."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent

_BLOCK = re.compile(
    r"<!-- example: (?P<name>[^>]+?) -->\n```python\n(?P<code>.*?)```\n(?:\n```text\n(?P<out>.*?)```\n)?",
    re.DOTALL,
)


def examples(path: pathlib.Path, name: str) -> list[tuple[str, str | None]]:
    """(code, printed output or None) of every example called ``name`` in ``path``."""
    return [
        (m["code"], m["out"]) for m in _BLOCK.finditer(path.read_text(encoding="utf-8")) if m["name"] == name
    ]


def run(code: str, folder: pathlib.Path) -> str:
    """Execute ``code`` as a script in ``folder``; what it printed."""
    printed = io.StringIO()
    here = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})
    finally:
        os.chdir(here)
    return printed.getvalue()


def check(page: str, name: str, folder: pathlib.Path) -> None:
    """Every example ``name`` on ``page`` (a path from the repository's root) runs and
    prints what the page shows after it."""
    found = examples(ROOT / page, name)
    assert found, f"{page} has no example {name!r}"
    for code, printed in found:
        assert run(code, folder) == printed, f"{page}: example {name!r}"

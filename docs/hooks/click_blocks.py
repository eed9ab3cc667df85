"""An mkdocs hook for the command-line page.

click's help texts mark blocks that must not be rewrapped (examples, tables) with a line
holding only ``\\b``. mkdocs-click drops those marker lines and passes the block on as a
Markdown paragraph, which joins its lines into one. This hook makes mkdocs-click write
each such block as a code block instead, as ``--help`` shows it. Should mkdocs-click's
internals change, the hook does nothing and the page is built as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def _code_blocks(lines: Iterator[str]) -> Iterator[str]:
    block = False
    for line in lines:
        if line.strip() == "\b":
            block = True
            yield ""
            continue
        if block and not line.strip():
            block = False
        yield f"    {line}" if block else line


def on_config(config: Any) -> Any:
    try:
        from mkdocs_click import _docs
    except ImportError:
        return config
    original = getattr(_docs, "_make_description", None)
    if original is None or getattr(original, "_nirbridge", False):
        return config

    def make_description(*args: Any, **kwargs: Any) -> Iterator[str]:
        return _code_blocks(original(*args, **kwargs))

    make_description._nirbridge = True  # type: ignore[attr-defined]
    _docs._make_description = make_description
    return config

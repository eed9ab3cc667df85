"""Names from files, shown safely: in a terminal, a plot, a DOT or Mermaid diagram.

A node name is any string a file holds. Printed raw, terminal escape sequences in it
can clear the screen or print a fake "all checks passed", a newline can forge a line
of a table, a bidi override can reverse what follows, and matplotlib reads ``$...$`` as
mathematics. Every place that shows a name shows :func:`printable` of it.
"""

from __future__ import annotations

__all__ = ["for_matplotlib", "printable", "printable_lines"]


def _escape(character: str) -> str:
    return character.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """``text`` with every character that :meth:`str.isprintable` rejects written as
    its Python escape (``\\x1b``, ``\\n``, ``\\u202e``): controls, format characters
    (bidi overrides, zero-width), line and paragraph separators, surrogates, private
    use and unassigned code points, and spaces other than ``" "``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_lines(text: str) -> str:
    """:func:`printable` for text of several lines: newlines and tabs are kept, every
    other character a terminal would act on is escaped. The CLI's last line of defence,
    for text that did not pass through :func:`printable` name by name."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else _escape(c) for c in text)


def for_matplotlib(text: str) -> str:
    """:func:`printable`, with ``$`` escaped so that matplotlib shows it instead of
    reading ``$...$`` as mathematics (a stray ``$\\frac{a}{$`` raises in mathtext)."""
    return printable(text).replace("$", r"\$")

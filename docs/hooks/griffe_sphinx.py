"""A griffe extension for the API reference: nirbridge's docstrings are Google style, with
a few reStructuredText constructs that Markdown does not know. This rewrites them before
mkdocstrings renders the docstrings:

- ``:func:`x```, ``:class:`x```, ``:mod:`x```, ``:data:`x```, ``:meth:`x```, ``:attr:`x```,
  ``:exc:`x```: a code span that links to ``x`` where the reference documents it (an
  optional autorefs cross-reference: no warning where it does not);
- ``:math:`...```: the formula in plain text (Unicode symbols, sub- and superscripts),
  as the site has no network for a math renderer;
- reStructuredText simple tables (``====  ====`` borders): Markdown tables.

The docstrings in nirbridge are left as they are.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(func|class|mod|data|meth|attr|exc|obj):`~?([^`]+)`")
_MATH = re.compile(r":math:`([^`]+)`")
_SYMBOLS = {
    r"\leftarrow": "←",
    r"\rightarrow": "→",
    r"\Delta": "Δ",
    r"\tau": "τ",
    r"\alpha": "α",
    r"\beta": "β",
    r"\theta": "θ",
    r"\odot": "⊙",
    r"\cdot": "·",
    r"\,": "\u2009",
}


def _braced(text: str, start: int) -> tuple[str, int]:
    """The content of the brace group opening at ``text[start]`` and the index after it."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : index], index + 1
    return text[start + 1 :], len(text)


def _math(latex: str) -> str:
    """A small LaTeX subset as HTML text: the symbols above, \\frac, \\mathrm, _ and ^."""
    out: list[str] = []
    index = 0
    while index < len(latex):
        char = latex[index]
        if latex.startswith(r"\frac", index):
            numerator, index = _braced(latex, index + 5)
            denominator, index = _braced(latex, index)
            out.append(f"({_math(numerator)}/{_math(denominator)})")
            continue
        if latex.startswith(r"\mathrm", index):
            upright, index = _braced(latex, index + 7)
            out.append(f'<span class="nb-upright">{html.escape(upright)}</span>')
            continue
        symbol = next((s for s in _SYMBOLS if latex.startswith(s, index)), None)
        if symbol is not None:
            out.append(_SYMBOLS[symbol])
            index += len(symbol)
            while symbol[-1].isalpha() and latex[index : index + 1] == " ":  # as TeX does
                index += 1
            continue
        if char in "_^":
            tag = "sub" if char == "_" else "sup"
            if index + 1 < len(latex) and latex[index + 1] == "{":
                inner, index = _braced(latex, index + 1)
            else:
                inner, index = latex[index + 1 : index + 2], index + 2
            out.append(f"<{tag}>{_math(inner)}</{tag}>")
            continue
        if char == "\\":  # an unknown command: keep its name
            match = re.match(r"\\([A-Za-z]+)", latex[index:])
            name = match.group(1) if match else latex[index + 1 : index + 2]
            out.append(html.escape(name))
            index += 1 + len(name)
            continue
        out.append("−" if char == "-" else html.escape(char))
        index += 1
    return "".join(out)


def _resolve(target: str, obj: griffe.Object) -> str:
    """The full path of a reference target written inside ``obj``'s docstring."""
    module = obj if obj.is_module else obj.module
    if target.startswith("."):
        base = module.path if module.is_init_module else module.path.rsplit(".", 1)[0]
        parts = target[1:].split(".")
        while parts and parts[0] == "":  # ..x: one level up per extra dot
            base = base.rsplit(".", 1)[0]
            parts.pop(0)
        return ".".join([base, *parts])
    head = target.split(".", 1)[0]
    scope: Any = obj
    while scope is not None:
        if head in getattr(scope, "members", {}):
            return _function_of_module(f"{scope.path}.{target}", obj)
        scope = scope.parent
    return _function_of_module(target, obj)


def _function_of_module(path: str, obj: griffe.Object) -> str:
    """``nirbridge.run`` names both a module and the function it holds (re-exported
    under that name): the reference means the function."""
    try:
        found = obj.modules_collection[path]
    except (KeyError, ValueError, AttributeError):
        return path
    if getattr(found, "is_module", False) and found.name in found.members:
        return f"{path}.{found.name}"
    return path


def _table(lines: list[str]) -> list[str]:
    """Rewrite reStructuredText simple tables in ``lines`` as Markdown tables."""
    border = re.compile(r"^(\s*)(=+)(\s+=+)+\s*$")
    out: list[str] = []
    index = 0
    while index < len(lines):
        match = border.match(lines[index])
        if not match:
            out.append(lines[index])
            index += 1
            continue
        starts = [m.start() for m in re.finditer(r"=+", lines[index])]
        rows: list[list[str]] = []
        borders = 1
        index += 1
        while index < len(lines) and borders < 3:
            line = lines[index]
            index += 1
            if border.match(line):
                borders += 1
                continue
            cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line)])]
            if rows and not cells[0] and borders == 2:  # a continuation line
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
            else:
                rows.append(cells)
        indent = match.group(1)
        header, *body = rows
        out.append(indent + "| " + " | ".join(header) + " |")
        out.append(indent + "|" + "---|" * len(header))
        out += [indent + "| " + " | ".join(cell.replace("|", r"\|") for cell in row) + " |" for row in body]
    return out


class SphinxRoles(griffe.Extension):
    """Rewrites the reStructuredText parts of docstrings as Markdown and HTML."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._visit(pkg, set())

    def _visit(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = self._rewrite(obj.docstring.value, obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._visit(member, seen)

    def _rewrite(self, text: str, obj: griffe.Object) -> str:
        text = "\n".join(_table(text.split("\n")))
        text = _MATH.sub(lambda m: f'<span class="nb-math">{_math(m.group(1))}</span>', text)

        def role(match: re.Match[str]) -> str:
            target = match.group(2)
            shown = html.escape(target.lstrip("."))
            return f'<autoref identifier="{_resolve(target, obj)}" optional><code>{shown}</code></autoref>'

        return _ROLE.sub(role, text)

"""Pictures of NIR graphs: node names, types and shapes, delayed (recurrent) edges
marked, nested graphs drawn as boxes around their nodes.

:func:`to_dot` and :func:`to_mermaid` give the graph as text (Graphviz DOT, Mermaid);
:func:`draw` writes a picture (``.svg``, ``.png``, ``.pdf``) with Graphviz when its
Python package and ``dot`` program are installed, else with matplotlib, and the text
forms for ``.dot``/``.gv`` and ``.mmd``. Delayed edges are the ones
:func:`nirbridge.graph.plan` finds: they carry the previous step's value.

Every form takes ``rankdir``: ``"LR"`` lays the graph out left to right, ``"TB"`` top
to bottom, and ``None`` (the default) picks ``"TB"`` for a graph whose longest chain of
undelayed edges has more than :data:`LONG_CHAIN` nodes (a deep CNN), so that it is not
drawn as a wide strip, and ``"LR"`` otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from typing import Any

import nir

from . import graph as graph_utils
from .errors import NirBridgeError, ParameterError
from .io import atomic_write
from .text import for_matplotlib, printable

__all__ = [
    "ENGINES",
    "LONG_CHAIN",
    "RANKDIRS",
    "Layout",
    "draw",
    "layout",
    "rankdir_for",
    "to_dot",
    "to_mermaid",
]

ENGINES = ("auto", "graphviz", "matplotlib")
RANKDIRS = ("TB", "LR")  # top to bottom, left to right
LONG_CHAIN = 8  # rankdir=None draws top to bottom when the longest chain has more nodes
PICTURES = (".svg", ".png", ".pdf")
TEXTS = {".dot": "dot", ".gv": "dot", ".mmd": "mermaid"}

_COLOURS = {  # fill colours by kind of node
    "io": "#e8e8e8",
    "neuron": "#fde3c8",
    "weights": "#d6e6f5",
    "other": "#e3f1dc",
}
_NEURONS = (nir.I, nir.IF, nir.LI, nir.LIF, nir.CubaLI, nir.CubaLIF, nir.Threshold, nir.Delay)
_WEIGHTS = (nir.Affine, nir.Linear, nir.Scale, nir.Conv1d, nir.Conv2d)
DELAYED_COLOUR = "#c0392b"


def _kind(node: nir.NIRNode) -> str:
    if isinstance(node, (nir.Input, nir.Output)):
        return "io"
    if isinstance(node, _NEURONS):
        return "neuron"
    return "weights" if isinstance(node, _WEIGHTS) else "other"


def _shape(node: nir.NIRNode) -> str:
    """A node's output shape as ``(3, 4)``, or '' where it is not known."""
    shape = graph_utils.declared_shape(getattr(node, "output_type", None))
    return str(tuple(shape)) if shape is not None else ""


@dataclasses.dataclass
class Box:
    """A drawn node: its dotted name, NIR type, output shape and fill colour."""

    name: str
    type: str
    shape: str
    colour: str


@dataclasses.dataclass
class Layout:
    """A graph flattened for drawing.

    ``boxes`` holds the leaf nodes by dotted name; ``members`` each graph's direct
    members in order (leaf names, and nested graph names, which are keys of
    ``members`` too), the top level under ``""``; ``edges`` are ``(source, target,
    delayed)`` between leaves: an edge into a nested graph goes to its Input nodes, an
    edge out of one leaves from its Output nodes.
    """

    boxes: dict[str, Box]
    members: dict[str, list[str]]
    edges: list[tuple[str, str, bool]]

    def leaves(self, group: str) -> Iterator[str]:
        """Every leaf inside ``group``, nested ones included."""
        for member in self.members[group]:
            if member in self.members:
                yield from self.leaves(member)
            else:
                yield member


def layout(graph: nir.NIRNode) -> Layout:
    """Flatten ``graph`` for drawing (see :class:`Layout`); a single node is drawn alone."""
    if not isinstance(graph, nir.NIRGraph):
        graph = nir.NIRGraph(nodes={type(graph).__name__.lower(): graph}, edges=[], type_check=False)
    result = Layout({}, {}, [])

    def level(g: nir.NIRGraph, path: str) -> tuple[list[str], list[str]]:
        """Lay out one level; return the leaves its Input and Output nodes became."""
        prefix = f"{path}." if path else ""
        result.members[path] = []
        entries: dict[str, list[str]] = {}
        exits: dict[str, list[str]] = {}
        for name, node in g.nodes.items():
            full = f"{prefix}{name}"
            result.members[path].append(full)
            if isinstance(node, nir.NIRGraph):
                entries[name], exits[name] = level(node, full)
            else:
                result.boxes[full] = Box(full, type(node).__name__, _shape(node), _COLOURS[_kind(node)])
                entries[name] = exits[name] = [full]
        the_plan = graph_utils.plan(g, path, strict=False)
        for target in g.nodes:
            for source, delayed in the_plan.incoming[target]:
                result.edges.extend((a, b, delayed) for a in exits[source] for b in entries[target])
        return [f"{prefix}{n}" for n in the_plan.inputs], [f"{prefix}{n}" for n in the_plan.outputs]

    level(graph, "")
    return result


def rankdir_for(drawn: Layout, rankdir: str | None = None) -> str:
    """The direction to draw ``drawn`` in: ``rankdir`` itself (``"TB"`` or ``"LR"``),
    or for ``None`` ``"TB"`` when its longest chain of undelayed edges has more than
    :data:`LONG_CHAIN` nodes, else ``"LR"``. Anything else raises
    :class:`~nirbridge.ParameterError` naming the value."""
    if rankdir is None:
        return "TB" if max(_columns(drawn).values(), default=0) + 1 > LONG_CHAIN else "LR"
    if not isinstance(rankdir, str) or rankdir not in RANKDIRS:
        raise ParameterError(
            f"rankdir={rankdir!r}: use 'TB' (top to bottom), 'LR' (left to right) or None (TB for "
            f"graphs whose longest chain has more than {LONG_CHAIN} nodes, else LR)"
        )
    return rankdir


def _label(box: Box) -> list[str]:
    return [box.name, f"{box.type} {box.shape}".strip()]


def _escaped(text: str) -> str:
    """A DOT string's inside: non-printable characters escaped, then backslashes and
    quotes (Graphviz reads ``\\N``, ``\\G`` and ``\\l`` in labels as its own escapes)."""
    return printable(text).replace("\\", "\\\\").replace('"', '\\"')


def _quoted(*lines: str) -> str:
    """A DOT string of one or more lines."""
    return '"' + "\\n".join(_escaped(line) for line in lines) + '"'


def to_dot(graph: nir.NIRNode | Layout, *, rankdir: str | None = None) -> str:
    """The graph as Graphviz DOT text: boxes with name, type and shape; delayed edges
    dashed, red and labelled ``delayed``; nested graphs as dashed clusters. ``rankdir``
    as in :func:`rankdir_for` (``"TB"``, ``"LR"``, or ``None`` to pick by depth).
    ``graph`` may be its :func:`layout` already."""
    drawn = graph if isinstance(graph, Layout) else layout(graph)
    ids: dict[str, str] = {}  # escaping may give two names one text: keep the ids apart
    for member in [*drawn.boxes, *drawn.members]:
        candidate = _quoted(("cluster_" if member in drawn.members else "") + member)
        while candidate in ids.values():
            candidate = candidate[:-1] + ' (again)"'
        ids[member] = candidate
    lines = [
        "digraph nir {",
        f'  rankdir={rankdir_for(drawn, rankdir)}; fontname="Helvetica"; fontsize=11;',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]

    def emit(group: str, indent: str) -> None:
        for member in drawn.members[group]:
            if member in drawn.members:
                lines.append(f"{indent}subgraph {ids[member]} {{")
                lines.append(f'{indent}  label={_quoted(member + " (NIRGraph)")}; style="rounded,dashed";')
                emit(member, indent + "  ")
                lines.append(f"{indent}}}")
            else:
                box = drawn.boxes[member]
                label = _quoted(*_label(box))
                lines.append(f'{indent}{ids[member]} [label={label}, fillcolor="{box.colour}"];')

    emit("", "  ")
    delayed_style = (
        f' [style=dashed, color="{DELAYED_COLOUR}", fontcolor="{DELAYED_COLOUR}", label="delayed"]'
    )
    for a, b, delayed in drawn.edges:
        lines.append(f"  {ids[a]} -> {ids[b]}{delayed_style if delayed else ''};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(graph: nir.NIRNode | Layout, *, rankdir: str | None = None) -> str:
    """The graph as a Mermaid flowchart: the same boxes, delayed edges dotted and
    labelled ``delayed``, nested graphs as subgraphs. ``rankdir`` as in
    :func:`rankdir_for` (``"TB"``, ``"LR"``, or ``None`` to pick by depth).
    ``graph`` may be its :func:`layout` already."""
    drawn = graph if isinstance(graph, Layout) else layout(graph)
    ids = {name: f"n{i}" for i, name in enumerate([*drawn.boxes, *drawn.members])}
    lines = [f"flowchart {rankdir_for(drawn, rankdir)}"]

    def text(*lines: str) -> str:
        # Mermaid reads labels as HTML and #...; as entity codes: show names as written
        def escaped(line: str) -> str:
            line = printable(line).replace("#", "#35;").replace('"', "#quot;")
            return line.replace("<", "#lt;").replace(">", "#gt;").replace("&", "#amp;")

        return '"' + "<br/>".join(escaped(line) for line in lines) + '"'

    def emit(group: str, indent: str) -> None:
        for member in drawn.members[group]:
            if member in drawn.members:
                lines.append(f"{indent}subgraph {ids[member]} [{text(member + ' (NIRGraph)')}]")
                emit(member, indent + "  ")
                lines.append(f"{indent}end")
            else:
                lines.append(f"{indent}{ids[member]}[{text(*_label(drawn.boxes[member]))}]")

    emit("", "  ")
    for a, b, delayed in drawn.edges:
        lines.append(f"  {ids[a]} -. delayed .-> {ids[b]}" if delayed else f"  {ids[a]} --> {ids[b]}")
    return "\n".join(lines) + "\n"


def draw(
    graph: nir.NIRNode, path: str | os.PathLike[str], *, engine: str = "auto", rankdir: str | None = None
) -> str:
    """Write a picture of ``graph`` to ``path`` and return what drew it.

    The file's suffix picks the form: ``.svg``, ``.png`` or ``.pdf`` for a picture,
    ``.dot``/``.gv`` (Graphviz DOT) or ``.mmd`` (Mermaid) for text. ``engine="auto"``
    draws with Graphviz (its Python package and the ``dot`` program) when both are
    installed, else with matplotlib; where neither is, it writes the DOT text to
    ``path`` with ``.dot`` added and returns ``"dot text, no engine"``. The file is written
    through a temporary file, so a failed drawing leaves no half-written picture.

    ``rankdir`` is the direction of the drawing, for every engine and text form:
    ``"TB"`` top to bottom, ``"LR"`` left to right, or ``None`` (the default) for
    ``"TB"`` when the longest chain of undelayed edges has more than
    :data:`LONG_CHAIN` nodes and ``"LR"`` otherwise; any other value raises
    :class:`~nirbridge.ParameterError`.
    """
    target = os.fspath(path)
    suffix = os.path.splitext(target)[1].lower()
    if engine not in ENGINES:
        raise NirBridgeError(f"engine={engine!r}: use one of {', '.join(ENGINES)}")
    drawn = layout(graph)
    rankdir = rankdir_for(drawn, rankdir)
    if suffix in TEXTS:
        text = (
            to_dot(drawn, rankdir=rankdir) if TEXTS[suffix] == "dot" else to_mermaid(drawn, rankdir=rankdir)
        )
        atomic_write(target, lambda tmp: _write_text(tmp, text))
        return f"{TEXTS[suffix]} text"
    if suffix not in PICTURES:
        raise NirBridgeError(
            f"{target}: cannot tell the picture format from {suffix or 'no suffix'!r}; end the name in "
            f"{', '.join(PICTURES)}, or {', '.join(TEXTS)} for text"
        )
    if engine == "auto":
        engine = "graphviz" if _has_graphviz() else "matplotlib" if _has_matplotlib() else "none"
    if engine == "graphviz":
        if not _has_graphviz():
            raise NirBridgeError(
                "engine='graphviz' needs the graphviz Python package and Graphviz's dot program "
                "(pip install graphviz; apt-get install graphviz), or use engine='matplotlib'"
            )
        import graphviz

        image = graphviz.Source(to_dot(drawn, rankdir=rankdir)).pipe(format=suffix[1:])
        atomic_write(target, lambda tmp: _write_bytes(tmp, image))
        return "graphviz"
    if engine == "matplotlib":
        if not _has_matplotlib():
            raise NirBridgeError("engine='matplotlib' needs matplotlib: pip install matplotlib")
        figure = _matplotlib_figure(drawn, rankdir)
        atomic_write(target, lambda tmp: figure.savefig(tmp, format=suffix[1:]))
        return "matplotlib"
    text_path = target + ".dot"
    atomic_write(text_path, lambda tmp: _write_text(tmp, to_dot(drawn, rankdir=rankdir)))
    return "dot text, no engine"


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)


def _has_graphviz() -> bool:
    try:
        import graphviz  # noqa: F401
    except ImportError:
        return False
    return shutil.which("dot") is not None


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _columns(drawn: Layout) -> dict[str, int]:
    """Each leaf's column: the longest path to it from a leaf with no undelayed input
    (Kahn's algorithm over the undelayed edges, linear in the edges)."""
    successors: dict[str, list[str]] = {name: [] for name in drawn.boxes}
    waiting = dict.fromkeys(drawn.boxes, 0)
    for a, b, delayed in drawn.edges:
        if not delayed:
            successors[a].append(b)
            waiting[b] += 1
    column = dict.fromkeys(drawn.boxes, 0)
    ready = [name for name, count in waiting.items() if count == 0]
    while ready:
        name = ready.pop()
        for target in successors[name]:
            column[target] = max(column[target], column[name] + 1)
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    return column


def _matplotlib_figure(drawn: Layout, rankdir: str = "LR") -> Any:
    """A layered drawing: ranks by longest undelayed path, left to right (``"LR"``) or
    top to bottom (``"TB"``); nested graphs as dashed boxes around their nodes, delayed
    edges as red dashed arcs labelled ``delayed``."""
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

    column = _columns(drawn)
    rows: dict[int, int] = {}
    position: dict[str, tuple[float, float]] = {}
    width, height = 2.2, 0.8
    across = rankdir == "LR"
    x_gap, y_gap = (3.0, 1.3) if across else (2.7, 1.5)  # between ranks and siblings
    row: dict[str, int] = {}
    for name in drawn.boxes:  # in graph order, so siblings keep their order
        c = column[name]
        r = rows.get(c, 0)
        rows[c], row[name] = r + 1, r
        position[name] = (c * x_gap, -r * y_gap) if across else (r * x_gap, -c * y_gap)

    def outer(a: str, b: str) -> bool:
        """Whether an edge back from ``a`` to ``b`` arcs on the first rows' side (over
        the top, or round the left): where both are first in their columns, or not both
        last (otherwise the arc would cross the boxes beside them)."""
        first = row[a] == 0 and row[b] == 0
        last = row[a] == rows[column[a]] - 1 and row[b] == rows[column[b]] - 1
        return first or not last

    xs = [p[0] for p in position.values()] or [0.0]
    ys = [p[1] for p in position.values()] or [0.0]
    x_limits = (min(xs) - width, max(xs) + width + (0.0 if across else 1.0))
    y_limits = (min(ys) - 1.2, max(ys) + 1.4)
    scale = 0.65  # inches per unit
    figure = Figure(
        figsize=(
            max(4.0, scale * (x_limits[1] - x_limits[0])),
            max(2.0, scale * (y_limits[1] - y_limits[0])),
        )
    )
    ax = figure.add_subplot()

    def boxes_of(group: str) -> list[tuple[float, float]]:
        return [position[leaf] for leaf in drawn.leaves(group)]

    depth = {group: group.count(".") + 1 for group in drawn.members if group}
    for group in sorted(depth, key=depth.get):
        points = boxes_of(group)
        if not points:
            continue
        pad = 0.45 - 0.08 * min(depth[group] - 1, 3)
        x0 = min(p[0] for p in points) - width / 2 - pad
        x1 = max(p[0] for p in points) + width / 2 + pad
        y0 = min(p[1] for p in points) - height / 2 - pad
        y1 = max(p[1] for p in points) + height / 2 + pad + 0.25
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, linestyle="--", edgecolor="#777777"))
        ax.text(
            x0 + 0.08, y1 - 0.08, f"{for_matplotlib(group)} (NIRGraph)", fontsize=8, va="top", color="#555555"
        )
    for name, box in drawn.boxes.items():
        x, y = position[name]
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2, y - height / 2),
                width,
                height,
                boxstyle="round,pad=0.02,rounding_size=0.12",
                facecolor=box.colour,
                edgecolor="#333333",
                linewidth=0.8,
                zorder=2,
            )
        )
        name = for_matplotlib(box.name)
        ax.text(x, y + 0.13, name, ha="center", va="center", fontsize=8, weight="bold", zorder=3)
        ax.text(
            x, y - 0.17, f"{box.type} {box.shape}".strip(), ha="center", va="center", fontsize=7, zorder=3
        )
    for a, b, delayed in drawn.edges:
        (xa, ya), (xb, yb) = position[a], position[b]
        over = outer(a, b)  # a backward edge's side: over the top or under (LR), left or right (TB)
        side = 1 if over else -1
        if across:  # forward edges go right, from side to side; others arc over the top or under
            forward = xb > xa
            start = (xa + width / 2, ya) if forward else (xa, ya + side * height / 2)
            end = (xb - width / 2, yb) if forward else (xb, yb + side * height / 2)
        else:  # forward edges go down, from bottom to top; others arc round the left or right
            forward = yb < ya
            side = -side  # the first rows are on the left
            start = (xa, ya - height / 2) if forward else (xa + side * width / 2, ya)
            end = (xb, yb + height / 2) if forward else (xb + side * width / 2, yb)
        arrow = FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=10,
            linewidth=1.0,
            color=DELAYED_COLOUR if delayed else "#333333",
            linestyle="--" if delayed else "-",
            connectionstyle="arc3,rad=0.0" if forward else f"arc3,rad={0.45 if over == across else -0.45}",
            zorder=1,
        )
        ax.add_patch(arrow)
        if delayed and forward:
            ax.text(
                (start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12, "delayed",
                color=DELAYED_COLOUR, fontsize=7, ha="center",
            )  # fmt: skip
        elif delayed:  # beside the middle of the arc (half way to arc3's control point)
            rad = 0.45 if over == across else -0.45
            dx, dy = end[0] - start[0], end[1] - start[1]
            where = ((start[0] + end[0]) / 2 + rad / 2 * dy, (start[1] + end[1]) / 2 - rad / 2 * dx)
            offset = (0.0, 0.15 * side) if across else (0.1 * side, 0.0)
            ax.text(
                where[0] + offset[0], where[1] + offset[1], "delayed", color=DELAYED_COLOUR, fontsize=7,
                ha="center" if across else ("right" if side < 0 else "left"), va="center",
            )  # fmt: skip
    ax.set_xlim(*x_limits)
    ax.set_ylim(*y_limits)
    ax.set_aspect("equal")
    ax.axis("off")
    figure.tight_layout()
    return figure

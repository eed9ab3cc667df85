"""The conformance report as pictures: a heat map of agreement (files by simulators,
matplotlib) and a self-contained HTML page holding it and the table.

Each cell is the fraction of output values a simulator's import gives equal to NIR's
equations on a file: 1 (dark) means it conforms, an x marks a file it does not load,
a dot one it loads and then fails to run, and a cell whose reference never spikes is
hatched (agreement there proves little).
"""

from __future__ import annotations

import base64
import html
import importlib.util
import io
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ..text import for_matplotlib, printable

if TYPE_CHECKING:
    from . import Report

__all__ = ["heatmap", "write_html"]


def labels(files: list[str]) -> dict[str, str]:
    """Each file's name as the report shows it: its base name, or the path as given where
    two files share a base name (a/m.nir, b/m.nir)."""
    names = [os.path.basename(f) for f in files]
    return {f: n if names.count(n) == 1 else f for f, n in zip(files, names)}


def _grid(report: Report) -> tuple[list[str], list[str], np.ndarray, dict[tuple[int, int], str]]:
    shown = labels(report.files)
    files = [shown[f] for f in report.files]
    simulators = [s for s in report.simulators if s != "nirbridge"]
    values = np.full((len(files), len(simulators)), np.nan)
    marks: dict[tuple[int, int], str] = {}
    for result in report.results:
        if result.simulator == "nirbridge":
            continue
        i, j = report.files.index(result.file), simulators.index(result.simulator)
        if result.not_measured:
            marks[i, j] = "-"
        elif not result.loads:
            marks[i, j] = "x"
        elif result.agreement is None:
            marks[i, j] = "•"
        else:
            values[i, j] = result.agreement
            if result.reference_spikes == 0:
                marks[i, j] = "silent"
    for i in range(len(files)):  # a file the reference cannot run measures no simulator
        for j in range(len(simulators)):
            if np.isnan(values[i, j]) and (i, j) not in marks:
                marks[i, j] = "-"
    return files, simulators, values, marks


def heatmap(report: Report, ax: Any = None) -> Any:
    """Agreement per file (rows) and simulator (columns); the matplotlib figure."""
    from ..plot import _pyplot

    plt = _pyplot()
    files, simulators, values, marks = _grid(report)
    if ax is None:
        figure, ax = plt.subplots(
            figsize=(1.2 + 1.1 * len(simulators), 1.0 + 0.32 * len(files)), layout="constrained"
        )
    else:
        figure = ax.figure
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for (i, j), mark in marks.items():
        if mark == "silent":
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="white"))
        else:
            ax.text(j, i, mark, ha="center", va="center", color="#b00000", fontsize=11)
    ax.set_xticks(range(len(simulators)), [for_matplotlib(s) for s in simulators], rotation=40, ha="right")
    ax.set_yticks(range(len(files)), [for_matplotlib(f.removesuffix(".nir")) for f in files], fontsize=7)
    figure.colorbar(image, ax=ax, label="agreement with NIR's equations")
    ax.set_title(
        "x does not load   • fails while running   /// reference silent   - not measured (a graph its "
        "import cannot take, or one nirbridge's reference cannot run)",
        fontsize=8,
        wrap=True,
    )
    return figure


def write_html(report: Report, path: str | os.PathLike[str]) -> None:
    """The report as one HTML file: the heat map (where matplotlib is installed) and the
    table, written to a temporary file and renamed."""
    from ..io import atomic_write

    picture = ""
    if importlib.util.find_spec("matplotlib") is not None:  # without it the page holds the table alone
        from ..plot import _pyplot

        figure = heatmap(report)
        buffer = io.BytesIO()
        try:
            figure.savefig(buffer, format="png", dpi=110)
        finally:
            _pyplot().close(figure)  # a long-lived process (a notebook) keeps no figure
        encoded = base64.b64encode(buffer.getvalue()).decode()
        picture = f'<img alt="agreement heat map" src="data:image/png;base64,{encoded}">'
    rows = []
    shown = labels(report.files)
    for r in report.results:
        if r.not_measured:
            verdict, colour = (r.error or "")[(r.error or "").index("not measured") :], "#e8eaed"
        elif not r.loads:
            verdict, colour = f"does not load: {r.error}", "#f4c7c3"
        elif r.agreement is None:
            verdict, colour = r.error or "", "#fce8b2"
        else:
            verdict = f"{r.agreement:.2%}"
            if r.first_divergence is not None:
                verdict += (
                    f", first differs at step {r.first_divergence['step']} ({r.first_divergence['node']})"
                )
            if r.diagnosis:
                verdict += f"; diagnosis: {r.diagnosis}"
            colour = "#b7e1cd" if r.agreement == 1.0 else "#fce8b2"
        if r.note:
            verdict += f" [{r.note}]"
        rows.append(
            f"<tr><td>{html.escape(printable(shown[r.file]))}</td><td>{html.escape(r.simulator)}</td>"
            f'<td style="background:{colour}">{html.escape(verdict)}</td></tr>'
        )
    versions = ", ".join(
        f"{html.escape(k)} {html.escape(str(v['version']))}" for k, v in report.simulators.items()
    )
    text = (
        "<!doctype html><html><head><meta charset='utf-8'><title>NIR conformance</title>"
        "<style>body{font-family:sans-serif}td{padding:2px 8px;border-bottom:1px solid #ddd}</style>"
        "</head><body>"
        f"<h1>NIR conformance</h1><p>{len(report.files)} file(s), T={report.steps}, batch {report.batch}; "
        f"{versions}</p>{picture}<table><tr><th>file</th><th>simulator</th><th>result</th></tr>"
        + "".join(rows)
        + "</table></body></html>\n"
    )

    def fill(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)

    atomic_write(path, fill)

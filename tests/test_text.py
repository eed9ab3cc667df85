"""nirbridge.text and every place that shows a name from a file: terminal, tables,
plots, DOT and Mermaid never act on what a name holds."""

from __future__ import annotations

import warnings

import matplotlib
import nir
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import nirbridge
from nirbridge.cli import main
from nirbridge.draw import draw, to_dot, to_mermaid
from nirbridge.text import for_matplotlib, printable, printable_lines

matplotlib.use("Agg")

HOSTILE = '\x1b[2J\x1b[H\nall checks passed\r\u202eevil $\\frac{a}{$ <b>&#35;"\\'


@given(st.text())
@settings(max_examples=300, derandomize=True)
def test_printable_text_holds_nothing_a_terminal_acts_on(text):
    shown = printable(text)
    assert shown.isprintable()
    assert shown == text or text != shown.encode().decode("unicode_escape", errors="ignore") or "\\" in shown
    lines = printable_lines(text)
    assert all(c.isprintable() or c in "\n\t" for c in lines)
    assert "$" not in for_matplotlib(text).replace(r"\$", "")


def test_printable_keeps_ordinary_names_as_they_are():
    for name in ("lif1.lif", "fc_2", "Ünïcödé", "名前", "a b"):
        assert printable(name) == name
    assert printable("\x1b[2J") == "\\x1b[2J"
    assert printable("a\nb") == "a\\nb"
    assert printable("\u202eevil") == "\\u202eevil"


def _graph() -> nir.NIRGraph:
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            HOSTILE: nir.LIF(*(np.full(2, v) for v in (1e-3, 1.0, 0.0, 0.5))),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", HOSTILE), (HOSTILE, "output")],
    )


def _clean(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    assert all(line.strip() != "all checks passed" for line in text.splitlines()), text


def test_the_cli_shows_hostile_names_escaped(tmp_path):
    path = tmp_path / "hostile.nir"
    nirbridge.write(path, _graph())
    result = CliRunner().invoke(main, ["info", "--nodes", str(path)])
    assert result.exit_code == 0, result.output
    _clean(result.output)
    assert printable(HOSTILE) in result.output
    result = CliRunner().invoke(main, ["run", str(path), "--dt", "1e-4", "--steps", "5", "--record", "all"])
    _clean(result.output)
    assert printable(HOSTILE) in result.output


def test_tables_plots_and_diagrams_show_hostile_names_escaped(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
        gm = nirbridge.nir_to_torch(_graph(), dt=1e-4)
        result = nirbridge.run(gm, torch.ones(20, 1, 2), record="all")
    _clean(result.summary().table())
    figure = result.plot()
    figure.canvas.draw()  # matplotlib's mathtext used to raise on "$\frac{a}{$"
    texts = [t.get_text() for ax in figure.axes for t in [ax.title, ax.yaxis.label]]
    assert any(for_matplotlib(HOSTILE) in t for t in texts), texts
    dot, mermaid = to_dot(_graph()), to_mermaid(_graph())
    for text in (dot, mermaid):
        _clean(text)
    assert "<b>" not in mermaid and "#lt;b#gt;" in mermaid
    for suffix in ("png", "dot", "mmd"):
        engine = "matplotlib" if suffix == "png" else "auto"
        draw(_graph(), tmp_path / f"hostile.{suffix}", engine=engine)
    assert (tmp_path / "hostile.png").stat().st_size > 0


def test_two_names_that_escape_alike_stay_two_boxes():
    graph = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "\x1b": nir.Scale(np.ones(2)),
            "\\x1b": nir.Scale(np.ones(2)),
            "output": nir.Output(np.array([2])),
        },
        edges=[("input", "\x1b"), ("\x1b", "\\x1b"), ("\\x1b", "output")],
    )
    dot = to_dot(graph)
    assert dot.count("[label=") == 4
    assert len({line.split(" [")[0].strip() for line in dot.splitlines() if "[label=" in line}) == 4


@pytest.mark.parametrize("name", ["$\\frac{a}{$", "$$", "a$b"])
def test_dollar_signs_in_names_are_shown_not_typeset(name):
    figure = matplotlib.figure.Figure()
    ax = figure.add_subplot()
    ax.set_title(for_matplotlib(name))
    figure.canvas.draw()
    assert ax.title.get_text() == for_matplotlib(name)

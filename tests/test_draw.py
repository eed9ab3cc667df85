"""Pictures of graphs: the DOT and Mermaid text, nested graphs, delayed edges, and the
Graphviz and matplotlib drawings of real files."""

from __future__ import annotations

import struct

import nir
import numpy as np
import pytest

import nirbridge
from nirbridge import draw
from tests.conftest import EXAMPLES

BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
NESTED = EXAMPLES / "spyx__docs__examples__nir__rsnn__braille_noDelay_bias_zero_subgraph.nir"


def nested_graph() -> nir.NIRGraph:
    """input → fc → block(input → lif ⇄ rec → output) → out, with a self-loop on fc."""
    lif = nir.LIF(np.full(3, 1e-3), np.ones(3), np.zeros(3), np.ones(3), np.zeros(3))
    block = nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "lif": lif,
            "rec": nir.Linear(np.eye(3)),
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "lif"), ("lif", "rec"), ("rec", "lif"), ("lif", "output")],
        type_check=False,
    )
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([2])),
            "fc": nir.Affine(np.ones((3, 2)), np.zeros(3)),
            "block": block,
            "output": nir.Output(np.array([3])),
        },
        edges=[("input", "fc"), ("fc", "fc"), ("fc", "block"), ("block", "output")],
        type_check=False,
    )


def test_layout_flattens_nested_graphs_and_finds_delayed_edges():
    drawn = draw.layout(nested_graph())
    assert list(drawn.boxes) == [
        "input",
        "fc",
        "block.input",
        "block.lif",
        "block.rec",
        "block.output",
        "output",
    ]
    assert drawn.members == {
        "": ["input", "fc", "block", "output"],
        "block": ["block.input", "block.lif", "block.rec", "block.output"],
    }
    assert sorted(drawn.edges) == sorted(
        [
            ("input", "fc", False),
            ("fc", "fc", True),  # a self-loop is delayed
            ("fc", "block.input", False),  # into the subgraph: its Input
            ("block.output", "output", False),  # out of it: its Output
            ("block.input", "block.lif", False),
            ("block.lif", "block.rec", False),
            ("block.rec", "block.lif", True),
            ("block.lif", "block.output", False),
        ]
    )
    assert drawn.boxes["block.lif"].type == "LIF" and drawn.boxes["block.lif"].shape == "(3,)"


def test_dot_and_mermaid_mark_delayed_edges_and_nest_clusters():
    dot = draw.to_dot(nested_graph())
    assert 'subgraph "cluster_block" {' in dot and 'label="block (NIRGraph)"' in dot
    assert '"block.rec" -> "block.lif" [style=dashed' in dot and 'label="delayed"' in dot
    assert '"fc" -> "fc" [style=dashed' in dot
    assert '"input" -> "fc";' in dot
    assert '"block.lif" [label="block.lif\\nLIF (3,)"' in dot
    mermaid = draw.to_mermaid(nested_graph())
    assert mermaid.startswith("flowchart LR\n")
    assert 'subgraph n8 ["block (NIRGraph)"]' in mermaid
    assert "n4 -. delayed .-> n3" in mermaid and "n0 --> n1" in mermaid


def test_names_with_quotes_are_escaped():
    graph = nested_graph()
    graph.nodes['f"c\\'] = graph.nodes.pop("fc")
    graph.edges = [tuple('f"c\\' if n == "fc" else n for n in e) for e in graph.edges]
    dot = draw.to_dot(graph)
    assert '"f\\"c\\\\" [label="f\\"c\\\\\\nAffine' in dot
    assert 'n6["f#quot;c\\<br/>Affine (3,)"]' in draw.to_mermaid(graph)


@pytest.mark.parametrize("engine", ["graphviz", "matplotlib"])
def test_both_engines_draw_the_braille_srnn_with_its_recurrent_edge(tmp_path, engine):
    graph = nirbridge.read(BRAILLE)
    svg = tmp_path / "braille.svg"
    assert draw.draw(graph, svg, engine=engine) == engine
    text = svg.read_text()
    assert text.lstrip().startswith(("<?xml", "<svg")) and "delayed" in text
    png = tmp_path / "braille.png"
    draw.draw(graph, png, engine=engine)
    assert png.read_bytes().startswith(b"\x89PNG")
    if engine == "graphviz":  # Graphviz keeps names as text; the red dashed edge is the delayed one
        assert "lif1.w_rec" in text and 'stroke="#c0392b"' in text and "stroke-dasharray" in text


def test_text_forms_and_bad_output_names(tmp_path):
    graph = nirbridge.read(NESTED)
    assert draw.draw(graph, tmp_path / "g.dot") == "dot text"
    assert 'subgraph "cluster_lif1"' in (tmp_path / "g.dot").read_text()
    assert draw.draw(graph, tmp_path / "g.mmd") == "mermaid text"
    assert "-. delayed .->" in (tmp_path / "g.mmd").read_text()
    with pytest.raises(nirbridge.NirBridgeError, match=r"g\.jpeg: cannot tell the picture format"):
        draw.draw(graph, tmp_path / "g.jpeg")
    with pytest.raises(nirbridge.NirBridgeError, match="engine='paint'"):
        draw.draw(graph, tmp_path / "g.svg", engine="paint")
    (tmp_path / "folder.svg").mkdir()
    with pytest.raises(nirbridge.NirFileError, match="folder.svg: is a folder"):
        draw.draw(graph, tmp_path / "folder.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "folder.svg",
        "g.dot",
        "g.mmd",
    ]  # nothing half-written


def test_a_single_node_is_drawn_alone(tmp_path):
    node = nir.LIF(np.full(2, 1e-3), np.ones(2), np.zeros(2), np.ones(2), np.zeros(2))
    assert '"lif" [label="lif\\nLIF' in draw.to_dot(node)


CNN = EXAMPLES / "NIR__paper__02_cnn__cnn_sinabs.nir"


def png_size(path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG header."""
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG")
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("engine", ["graphviz", "matplotlib"])
def test_rankdir_draws_the_deep_cnn_top_to_bottom_by_default_and_left_to_right_on_request(tmp_path, engine):
    cnn, braille = nirbridge.read(CNN), nirbridge.read(BRAILLE)
    sizes = {}
    for rankdir in (None, "TB", "LR"):
        draw.draw(cnn, tmp_path / f"cnn-{rankdir}.png", engine=engine, rankdir=rankdir)
        sizes[rankdir] = png_size(tmp_path / f"cnn-{rankdir}.png")
    (w, h) = sizes[None]
    assert sizes["TB"] == (w, h) and h > 3 * w  # 15 nodes in a chain: a column, not a strip
    (w, h) = sizes["LR"]
    assert w > 5 * h
    draw.draw(braille, tmp_path / "braille.png", engine=engine)  # a short chain stays left to right
    (w, h) = png_size(tmp_path / "braille.png")
    assert w > 2 * h
    draw.draw(braille, tmp_path / "braille-tb.png", engine=engine, rankdir="TB")
    (w, h) = png_size(tmp_path / "braille-tb.png")
    assert h > w


def test_rankdir_reaches_the_text_forms_and_is_checked(tmp_path):
    cnn, braille = nirbridge.read(CNN), nirbridge.read(BRAILLE)
    assert "  rankdir=TB;" in draw.to_dot(cnn) and "  rankdir=LR;" in draw.to_dot(braille)
    assert "  rankdir=LR;" in draw.to_dot(cnn, rankdir="LR")
    assert draw.to_mermaid(cnn).startswith("flowchart TB\n")
    assert draw.to_mermaid(braille, rankdir="TB").startswith("flowchart TB\n")
    draw.draw(braille, tmp_path / "b.mmd", rankdir="TB")
    assert (tmp_path / "b.mmd").read_text().startswith("flowchart TB\n")
    draw.draw(cnn, tmp_path / "c.dot", rankdir="LR")
    assert "  rankdir=LR;" in (tmp_path / "c.dot").read_text()
    for bad in ("BT", "tb", 1):
        with pytest.raises(nirbridge.ParameterError, match=rf"rankdir={bad!r}: use 'TB' \(top to bottom\)"):
            draw.draw(cnn, tmp_path / "bad.svg", rankdir=bad)
    with pytest.raises(nirbridge.ParameterError, match="rankdir='down'"):
        draw.to_dot(cnn, rankdir="down")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.mmd", "c.dot"]


@pytest.mark.parametrize("rankdir", ["LR", "TB"])
@pytest.mark.parametrize("path", [BRAILLE, NESTED])
def test_the_matplotlib_drawing_routes_no_edge_through_a_box(path, rankdir):
    """Each arrow, sampled along its curve, stays out of every box but its own two (the
    Braille SRNN's delayed edge went through fc2's box)."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    drawn = draw.layout(nirbridge.read(path))
    figure = draw._matplotlib_figure(drawn, rankdir)
    ax = figure.axes[0]
    boxes = dict(zip(drawn.boxes, (p.get_bbox() for p in ax.patches if isinstance(p, FancyBboxPatch))))
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == len(drawn.edges) > 0 and len(boxes) == len(drawn.boxes)
    for arrow, (a, b, _) in zip(arrows, drawn.edges):  # drawn in the layout's order
        points = np.concatenate([curve(np.linspace(0, 1, 60)) for curve, _ in arrow.get_path().iter_bezier()])
        crossed = {
            name for name, box in boxes.items() if name not in (a, b) for p in points if box.contains(*p)
        }
        assert not crossed, (path.name, rankdir, a, b, crossed)

"""Pictures of graphs: the DOT and Mermaid text, nested graphs, delayed edges, and the
Graphviz and matplotlib drawings of real files."""

from __future__ import annotations

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

"""nirbridge.graph: evaluation order, delayed edges, structure checks and shapes."""

from __future__ import annotations

import warnings

import nir
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nirbridge
from nirbridge import graph as graph_utils
from nirbridge.graph import check_edges, evaluation_order, infer_shapes, plan


def test_order_and_delayed_edges_follow_the_dfs():
    names = ["in", "fc", "lif", "rec", "out"]
    edges = [("in", "fc"), ("fc", "lif"), ("lif", "rec"), ("rec", "lif"), ("lif", "out")]
    order, delayed, unreached = evaluation_order(names, edges, ["in"])
    assert delayed == {3} and not unreached
    assert order.index("fc") < order.index("lif") < order.index("rec")


def test_self_loop_is_delayed_and_edge_order_decides_which_edge_closes_a_cycle():
    _, delayed, _ = evaluation_order(["i", "a"], [("i", "a"), ("a", "a")], ["i"])
    assert delayed == {1}
    # a <-> b both fed from the input: the edge met second in the search is delayed
    names = ["i", "a", "b"]
    _, d1, _ = evaluation_order(names, [("i", "a"), ("i", "b"), ("a", "b"), ("b", "a")], ["i"])
    _, d2, _ = evaluation_order(names, [("i", "b"), ("i", "a"), ("a", "b"), ("b", "a")], ["i"])
    assert d1 == {3} and d2 == {2}


def test_long_chains_need_no_recursion():
    n = 50_000
    names = [str(i) for i in range(n)]
    order, delayed, _ = evaluation_order(names, list(zip(names[:-1], names[1:])), ["0"])
    assert order == names and not delayed


def test_structure_errors():
    graph = nir.NIRGraph(
        nodes={"i": nir.Input(np.array([2])), "o": nir.Output(np.array([2]))},
        edges=[("i", "x")],
        type_check=False,
    )
    with pytest.raises(nirbridge.MissingNodeError):
        plan(graph)
    graph = nir.NIRGraph(
        nodes={"i": nir.Input(np.array([2])), "a..b": nir.Scale(np.ones(2)), "o": nir.Output(np.array([2]))},
        edges=[("i", "a..b"), ("a..b", "o")],
        type_check=False,
    )
    with pytest.raises(nirbridge.GraphStructureError, match="empty segment"):
        plan(graph)
    graph = nir.NIRGraph(
        nodes={"i": nir.Input(np.array([2])), "s": nir.Scale(np.ones(2)), "o": nir.Output(np.array([2]))},
        edges=[("i", "s"), ("s", "o"), ("s", "i")],
        type_check=False,
    )
    with pytest.raises(nirbridge.GraphStructureError, match="feeds Input"):
        plan(graph)
    graph.edges = [("i", "s"), ("s", "o"), ("o", "s")]
    with pytest.raises(nirbridge.GraphStructureError, match="leaves Output node 'o'"):
        plan(graph)


def test_lenient_plans_check_edges_only_and_leave_unreached_nodes_out():
    island = nir.NIRGraph(
        nodes={
            "a": nir.I(np.ones(2)),
            "b": nir.Scale(np.ones(2)),
            "i": nir.Input(np.array([2])),
            "o": nir.Output(None),
        },
        edges=[("a", "b"), ("b", "a"), ("i", "o")],
        type_check=False,
    )
    with pytest.raises(nirbridge.GraphStructureError, match="cannot be reached"):
        plan(island)
    lenient = plan(island, strict=False)
    assert lenient.order == ["i", "o"] and lenient.delayed_sources == []  # the island is never searched
    shapes = infer_shapes(island, lenient, strict=False)
    assert shapes.outputs == {"i": (2,), "o": (2,)}
    no_input = nir.NIRGraph(nodes={"a": nir.I(np.ones(2))}, edges=[("a", "a")], type_check=False)
    assert plan(no_input, strict=False).order == []
    nested = nir.NIRGraph(
        nodes={"i": nir.Input(np.array([2])), "sub": island, "o": nir.Output(None)},
        edges=[("i", "sub"), ("sub", "o")],
        type_check=False,
    )
    nested.nodes["sub"].edges.append(("b", "ghost"))
    with pytest.raises(nirbridge.MissingNodeError, match="in subgraph 'sub' names node 'ghost'"):
        check_edges(nested)
    with pytest.raises(nirbridge.MissingNodeError):
        plan(nested, strict=False)


def test_shapes_through_a_cnn():
    graph = nir.NIRGraph(
        nodes={
            "i": nir.Input(np.array([2, 10, 10])),
            "c": nir.Conv2d(None, np.ones((4, 2, 3, 3)), 2, 1, 1, 1, np.zeros(4)),
            "p": nir.SumPool2d(np.array([2, 2]), np.array([2, 2]), np.array([0, 0])),
            "f": nir.Flatten(input_type={"input": None}, start_dim=0),
            "l": nir.Linear(np.ones((3, 16))),
            "o": nir.Output(np.array([3])),
        },
        edges=[("i", "c"), ("c", "p"), ("p", "f"), ("f", "l"), ("l", "o")],
        type_check=False,
    )
    shapes = infer_shapes(graph, plan(graph))
    assert (
        shapes.outputs["c"] == (4, 5, 5) and shapes.outputs["p"] == (4, 2, 2) and shapes.outputs["f"] == (16,)
    )
    assert shapes.outputs["l"] == (3,) and shapes.output == (3,)


def test_transposed_weights_are_repaired_with_a_warning():
    graph = nir.NIRGraph(
        nodes={
            "i": nir.Input(np.array([4])),
            "a": nir.Linear(np.ones((4, 3))),
            "b": nir.Linear(np.ones((3, 3))),
            "o": nir.Output(np.array([3])),
        },
        edges=[("i", "a"), ("a", "b"), ("b", "o")],
        type_check=False,
    )
    with pytest.warns(nirbridge.RepairWarning) as record:
        shapes = infer_shapes(graph, plan(graph))
    assert shapes.fixes["a"].weight.shape == (3, 4)
    assert "b" in shapes.fixes  # the square one follows the graph's convention
    assert any("'a'" in str(w.message) for w in record)
    assert graph.nodes["a"].weight.shape == (4, 3)  # the caller's graph is untouched


def test_fan_in_shape_mismatch():
    graph = nir.NIRGraph(
        nodes={
            "i": nir.Input(np.array([4])),
            "a": nir.Linear(np.ones((3, 4))),
            "b": nir.Linear(np.ones((2, 4))),
            "s": nir.Scale(np.ones(3)),
            "o": nir.Output(np.array([3])),
        },
        edges=[("i", "a"), ("i", "b"), ("a", "s"), ("b", "s"), ("s", "o")],
        type_check=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(nirbridge.ShapeMismatchError, match="'s'.*summed"):
            infer_shapes(graph, plan(graph))


def test_cycles_group_loops_in_step_order():
    def affine():
        return nir.Affine(np.eye(2), np.zeros(2))

    graph = nir.NIRGraph(
        nodes={
            "i": nir.Input(np.array([2])),
            "a": affine(),
            "b": affine(),
            "c": affine(),
            "s": nir.Scale(np.ones(2)),
            "o": nir.Output(np.array([2])),
        },
        edges=[("i", "a"), ("a", "b"), ("b", "a"), ("a", "c"), ("c", "s"), ("s", "s"), ("s", "o")],
        type_check=False,
    )
    the_plan = graph_utils.plan(graph)
    assert the_plan.order == ["i", "a", "c", "s", "o", "b"]  # c sits between the loop's members
    assert graph_utils.cycles(the_plan) == [
        (["i"], False),
        (["a", "b"], True),
        (["c"], False),
        (["s"], True),  # a self-loop
        (["o"], False),
    ]


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30))
def test_cycles_hold_every_delayed_edge_and_come_after_their_sources(n, pairs):
    names = [f"n{k}" for k in range(n)]
    edges = [("in", names[0])] + [(names[a % n], names[b % n]) for a, b in pairs]
    edges += [(names[k - 1], names[k]) for k in range(1, n)]  # everything reachable
    nodes = {"in": nir.Input(np.array([1])), **{m: nir.Scale(np.ones(1)) for m in names}}
    the_plan = graph_utils.plan(nir.NIRGraph(nodes=nodes, edges=edges, type_check=False))
    units = graph_utils.cycles(the_plan)
    unit_of = {m: k for k, (members, _) in enumerate(units) for m in members}
    assert sorted(unit_of) == sorted(the_plan.order)
    for target, sources in the_plan.incoming.items():
        for source, delayed in sources:
            if delayed:  # inside one cyclic unit
                assert unit_of[source] == unit_of[target] and units[unit_of[target]][1]
            else:  # a source's unit comes first, or it is the same unit
                assert unit_of[source] <= unit_of[target]
    for members, cyclic in units:
        assert members == [m for m in the_plan.order if m in members]
        if not cyclic:
            assert len(members) == 1

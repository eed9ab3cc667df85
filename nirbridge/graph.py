"""Torch-free graph utilities: structure checks, evaluation order, delayed edges, shapes.

Everything here works on ``nir.NIRGraph`` objects and numpy only, and costs time
linear in the number of nodes and edges.

Evaluation order (DESIGN.md): a depth-first search starts from the Input nodes, in the
order they appear in ``graph.nodes``, and visits successors in the order their edges
appear in ``graph.edges``. An edge that reaches a node still on the search stack closes
a cycle; it is *delayed*: it carries its source's output from the previous time step
(zero at the first step). Self-loops are delayed. Nodes are evaluated in reverse
post-order of that search, a topological order of the graph without delayed edges.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import nir
import numpy as np

from .errors import (
    GraphStructureError,
    MissingNodeError,
    ParameterError,
    RepairWarning,
    ShapeMismatchError,
)
from .limits import MAX_NESTING

Shape = tuple[int, ...]

__all__ = [
    "Plan",
    "check_edges",
    "check_nesting",
    "describe_duplicates",
    "duplicate_edges",
    "check_dotted_names",
    "check_structure",
    "conv_args",
    "padding_arg",
    "pool_args",
    "cycles",
    "declared_shape",
    "evaluation_order",
    "given",
    "Shapes",
    "infer_shapes",
    "integer",
    "integers",
    "ints",
    "plan",
]


def _where(path: str) -> str:
    return f" in subgraph {path!r}" if path else ""


def check_nesting(graph: Any, where: str = "") -> int:
    """The depth of the graphs nested in ``graph`` (0: none), found iteratively; raises
    :class:`GraphStructureError` naming the deepest path where it exceeds
    :data:`nirbridge.limits.MAX_NESTING` (a graph that holds itself never ends).
    ``where`` (a file, a function) prefixes the message."""
    deepest = 0
    stack: list[tuple[Any, str, int]] = [(graph, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_NESTING:
            raise GraphStructureError(
                f"{where + ': ' if where else ''}graphs nest more than {MAX_NESTING} deep (at "
                f"{path[:200]!r}{'...' if len(path) > 200 else ''}); nirbridge reads, writes and runs "
                f"graphs nested up to {MAX_NESTING} deep. Flatten the inner graphs into their parents"
            )
        deepest = max(deepest, depth)
        nodes = getattr(node, "nodes", None) if isinstance(node, nir.NIRGraph) else None
        if isinstance(nodes, Mapping):
            for name, child in nodes.items():
                if isinstance(child, nir.NIRGraph):
                    stack.append((child, f"{path}.{name}" if path else str(name), depth + 1))
    return deepest


def check_edges(graph: nir.NIRGraph, path: str = "") -> None:
    """Check that ``graph.nodes`` is a dict and every edge is a pair of its node names.

    Recurses into nested graphs. ``path`` is the dotted name of ``graph`` inside its
    parent, used in messages. Raises :class:`MissingNodeError` naming the edge and the
    missing node, or :class:`GraphStructureError`.
    """
    check_nesting(graph)
    for level, where in _levels(graph, path):
        _check_level_edges(level, where)


def _levels(graph: nir.NIRGraph, path: str = "") -> Iterator[tuple[nir.NIRGraph, str]]:
    """``graph`` and every graph nested in it, with their dotted paths, iteratively
    (each level is yielded before its nested graphs are looked at, so a check of the
    level runs before its nodes are walked)."""
    stack = [(graph, path)]
    while stack:
        level, where = stack.pop()
        yield level, where
        for name, node in level.nodes.items():
            if isinstance(node, nir.NIRGraph):
                stack.append((node, f"{where}.{name}" if where else str(name)))


def _check_level_edges(graph: nir.NIRGraph, path: str) -> None:
    nodes = graph.nodes
    if not isinstance(nodes, Mapping):
        raise GraphStructureError(
            f"graph{_where(path)} has nodes of type {type(nodes).__name__}; "
            "NIRGraph.nodes must be a dict mapping names to NIR nodes"
        )
    for name, node in nodes.items():
        if not isinstance(name, str):
            raise GraphStructureError(
                f"node key {name!r}{_where(path)} is a {type(name).__name__}; NIR node names are "
                f"strings: use {str(name)!r}"
            )
        if not isinstance(node, nir.NIRNode):
            raise GraphStructureError(
                f"node {name!r}{_where(path)} is a {type(node).__name__}, not a NIR node; "
                "build it with one of nir's node classes"
            )
    edges = graph.edges
    if isinstance(edges, (str, bytes, Mapping)) or not isinstance(edges, (Sequence, np.ndarray)):
        raise GraphStructureError(
            f"graph{_where(path)} has edges of type {type(edges).__name__}; NIRGraph.edges must be a "
            "list of (source, target) pairs of node names (an empty list for none)"
        )
    for edge in edges:
        if isinstance(edge, (str, bytes)) or not isinstance(edge, (Sequence, np.ndarray)) or len(edge) != 2:
            raise GraphStructureError(
                f"edge {edge!r}{_where(path)} is not a (source, target) pair of node names"
            )
        src, dst = edge
        for end in (src, dst):
            if not isinstance(end, str):
                raise GraphStructureError(
                    f"edge {tuple(edge)!r}{_where(path)} names {end!r}, a {type(end).__name__}; "
                    "edges name nodes by their string names"
                )
            if end not in nodes:
                raise MissingNodeError((src, dst), end, path)


def duplicate_edges(graph: nir.NIRGraph) -> dict[str, list[tuple[str, str]]]:
    """Edges listed more than once, by the dotted path of their graph (``""``: the
    top level), nested graphs included. Each such connection counts once (see
    :func:`plan`)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for level, where in _levels(graph):
        seen: set[tuple[str, str]] = set()
        for edge in level.edges:
            key = (str(edge[0]), str(edge[1]))
            if key in seen and key not in found.get(where, []):
                found.setdefault(where, []).append(key)
            seen.add(key)
    return found


def describe_duplicates(found: Mapping[str, list[tuple[str, str]]]) -> str:
    """The message of a :class:`RepairWarning` about duplicate edges."""
    listed = "; ".join(
        ", ".join(f"{a!r} -> {b!r}" for a, b in edges) + _where(where) for where, edges in found.items()
    )
    return (
        f"edges listed more than once: {listed}. An edge connects two nodes once, so each counts "
        "once (a repeated edge would otherwise add its source twice); remove the repeats from the graph"
    )


def check_structure(graph: nir.NIRGraph, path: str = "") -> None:
    """Check that the graph can be evaluated: valid edges, an Input, nothing feeding an
    Input, and node names whose dotted parts are non-empty.

    Recurses into nested graphs. Raises :class:`MissingNodeError` or
    :class:`GraphStructureError`.
    """
    check_edges(graph, path)
    for level, where in _levels(graph, path):
        _check_level(level, where)


def check_dotted_names(graph: nir.NIRGraph, path: str = "") -> None:
    """Refuse (:class:`GraphStructureError`) a node name that starts with the name of
    another node of its graph and a dot (``lif.v`` beside a LIF ``lif``, ``a.b`` beside
    a subgraph ``a``): a built module's records, states and module paths use the dot to
    separate a node from what it holds, so the two would be confused. Legal NIR, so
    files with such names are read, written and bridged; only a build refuses them."""
    for level, where in _levels(graph, path):
        nodes = level.nodes
        for name in nodes:
            segments = name.split(".")
            for end in range(1, len(segments)):
                owner = ".".join(segments[:end])
                if owner in nodes:
                    kind = "subgraph" if isinstance(nodes[owner], nir.NIRGraph) else "node"
                    raise GraphStructureError(
                        f"node name {name!r} starts with {owner!r}, the name of another {kind} of the "
                        f"same graph{_where(where)}: a dot separates a node from what it holds in records, "
                        f"states and module paths, so {name!r} would be read as part of {owner!r}. "
                        f"Rename one of them (say {name.replace('.', '_')!r})"
                    )


def _check_level(graph: nir.NIRGraph, path: str) -> None:
    nodes = graph.nodes
    for src, dst in graph.edges:
        if isinstance(nodes[src], nir.Output):
            raise GraphStructureError(
                f"edge {src!r} -> {dst!r}{_where(path)} leaves Output node {src!r}; Output nodes end "
                "the graph. Take the edge from the node that feeds the Output instead"
            )
        if isinstance(nodes[dst], nir.Input):
            raise GraphStructureError(
                f"edge {src!r} -> {dst!r}{_where(path)} feeds Input node {dst!r}; Input nodes "
                "take data from the caller only. Remove the edge or point it elsewhere."
            )
    if not any(isinstance(n, nir.Input) for n in nodes.values()):
        raise GraphStructureError(
            f"graph{_where(path)} has no Input node, so nothing can drive it. "
            "Add a nir.Input node and an edge from it to the first layer."
        )
    for name in nodes:
        sub_path = f"{path}.{name}" if path else name
        segments = name.split(".")
        for segment in segments:
            if not segment:
                raise GraphStructureError(
                    f"node name {sub_path!r} has an empty segment between dots; "
                    "rename the node so that every dotted part is non-empty"
                )


def evaluation_order(
    names: Sequence[str], edges: Sequence[tuple[str, str]], roots: Sequence[str]
) -> tuple[list[str], set[int], list[str]]:
    """Order nodes for one time step and find the delayed edges.

    Args:
        names: all node names, in graph order.
        edges: (source, target) pairs, in graph order.
        roots: the names the search starts from (the Input nodes), in graph order.

    Returns:
        ``(order, delayed, unreached)``: the evaluation order of the reached nodes, the
        indices into ``edges`` of delayed edges, and the names never reached from a root.
    """
    successors: dict[str, list[tuple[str, int]]] = {n: [] for n in names}
    for index, (src, dst) in enumerate(edges):
        successors[src].append((dst, index))
    state: dict[str, int] = {}  # 1: on the search stack, 2: finished
    postorder: list[str] = []
    delayed: set[int] = set()
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, cursor = stack[-1]
            outgoing = successors[node]
            if cursor < len(outgoing):
                stack[-1] = (node, cursor + 1)
                target, index = outgoing[cursor]
                seen = state.get(target)
                if seen is None:
                    state[target] = 1
                    stack.append((target, 0))
                elif seen == 1:
                    delayed.add(index)
            else:
                stack.pop()
                state[node] = 2
                postorder.append(node)
    postorder.reverse()
    unreached = [n for n in names if n not in state]
    return postorder, delayed, unreached


@dataclasses.dataclass
class Plan:
    """How one graph level is evaluated: order, incoming edges and delayed sources."""

    order: list[str]
    incoming: dict[str, list[tuple[str, bool]]]  # target -> [(source, delayed)]
    delayed_sources: list[str]  # sources whose previous output is kept, in order
    inputs: list[str]
    outputs: list[str]


def plan(graph: nir.NIRGraph, path: str = "", strict: bool = True) -> Plan:
    """Check ``graph``'s structure and compute its evaluation plan (see module docs).

    With ``strict=False`` only the edges are checked (:func:`check_edges`), and nodes
    that no Input reaches are left out of ``order`` instead of raising: the plan then
    serves shape inference of whatever part of a graph can be evaluated.
    """
    if not strict:
        check_edges(graph, path)
    else:
        check_structure(graph, path)
    names = list(graph.nodes)
    edges = list(dict.fromkeys((str(a), str(b)) for a, b in graph.edges))  # repeats count once
    inputs = [n for n in names if isinstance(graph.nodes[n], nir.Input)]
    outputs = [n for n in names if isinstance(graph.nodes[n], nir.Output)]
    order, delayed, unreached = evaluation_order(names, edges, inputs)
    if unreached and strict:
        raise GraphStructureError(
            f"nodes {unreached}{_where(path)} cannot be reached from any Input node, so "
            "nothing drives them. Add edges from the Input to them, or remove them."
        )
    incoming: dict[str, list[tuple[str, bool]]] = {n: [] for n in names}
    delayed_sources: list[str] = []
    for index, (src, dst) in enumerate(edges):
        is_delayed = index in delayed
        incoming[dst].append((src, is_delayed))
        if is_delayed and src not in delayed_sources:
            delayed_sources.append(src)
    for name in names if strict else ():
        node = graph.nodes[name]
        if not isinstance(node, nir.Input) and not incoming[name]:
            raise GraphStructureError(
                f"node {name!r}{_where(path)} has no incoming edge. Connect it or remove it."
            )
    return Plan(order, incoming, delayed_sources, inputs, outputs)


def cycles(the_plan: Plan) -> list[tuple[list[str], bool]]:
    """Group a level's nodes into strongly connected components, for running whole
    sequences: ``[(members, cyclic), ...]``.

    Every delayed edge lies inside one component (it closes a cycle), so a component
    that is not ``cyclic`` (one node, no self-loop) can be evaluated over all time steps
    at once, while a cyclic one must be stepped, its members in plan order. Components
    come in the order of their first member in ``the_plan.order``: for a depth-first
    reverse post-order this is a topological order of the component graph, so each
    component comes after every component that feeds it. Linear time (Tarjan's
    algorithm, iterative).
    """
    order = the_plan.order
    position = {name: i for i, name in enumerate(order)}
    successors: dict[str, list[str]] = {name: [] for name in order}
    self_loops: set[str] = set()
    for target, sources in the_plan.incoming.items():
        if target not in position:
            continue
        for source, _ in sources:
            if source in position:
                successors[source].append(target)
                if source == target:
                    self_loops.add(source)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    component: dict[str, int] = {}
    count = 0
    for root in order:
        if root in index:
            continue
        work = [(root, 0)]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, cursor = work[-1]
            if cursor < len(successors[node]):
                work[-1] = (node, cursor + 1)
                nxt = successors[node][cursor]
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = count
                    if member == node:
                        break
                count += 1
    groups: dict[int, list[str]] = {}
    for name in order:  # members in plan order, groups by their first member
        groups.setdefault(component[name], []).append(name)
    return [(members, len(members) > 1 or members[0] in self_loops) for members in groups.values()]


# ----------------------------------------------------------------------------- shapes


def declared_shape(types: Any) -> list[int] | None:
    """The shape a node declares in its ``input_type`` or ``output_type`` dict (the first
    entry), or None where it is missing or not a list of integers."""
    value = next(iter(types.values()), None) if isinstance(types, dict) else None
    array = np.asarray(value) if value is not None else None
    if array is None or array.dtype.kind not in "iu":
        return None
    return [int(v) for v in array.reshape(-1)]


MAX_DIMS = 16
"""Most axes an Input shape or a parameter may have (batch axis excluded): far above any
network's (C, H, W), well below torch's limit once batch and time axes are added."""

_LARGEST = 2**31 - 1  # the largest size, stride or padding a field may hold


def _shape(value: Any, owner: str = "", field: str = "shape") -> Shape | None:
    """A node's declared shape as integers (None where it declares none); a shape that
    is not a list of positive whole numbers is a :class:`ParameterError` naming
    ``owner``."""
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype == object and array.size and all(v is None for v in array.reshape(-1)):
        return None  # nir's placeholder for an unknown shape
    if array.ndim > 1:
        raise ParameterError(f"{owner}: {field} {value!r} must be a flat list of sizes, got {array.ndim}-D")
    sizes = integers(array, field, owner, minimum=1)
    if len(sizes) > MAX_DIMS:
        raise ParameterError(
            f"{owner}: {field} has {len(sizes)} axes; nirbridge takes at most {MAX_DIMS} (batch excluded)"
        )
    return sizes


def _declared(node: Any, key: str, owner: str) -> Any:
    """The shape an Input (``key="input"``) or Output node declares, None where it declares
    none; a type that is not a dict is a :class:`ParameterError`."""
    types = getattr(node, f"{key}_type", None)
    if types is None:
        return None
    if not isinstance(types, Mapping):
        raise ParameterError(f"{owner}: {key}_type is {types!r}; NIR keeps it as {{{key!r}: shape}}")
    return types.get(key)


def integers(value: Any, what: str, owner: str, minimum: int | None = None) -> tuple[int, ...]:
    """The whole numbers ``value`` holds (an integer, an array of them, or floats with
    whole values), each at least ``minimum``; anything else (text, bytes, NaN,
    fractions, values beyond 2**31) is a :class:`ParameterError` naming ``owner`` and
    ``what``."""
    if isinstance(value, (str, bytes)):
        raise ParameterError(f"{owner}: {what} must be whole numbers, got text {value!r}")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):  # a ragged list and the like
        raise ParameterError(f"{owner}: {what} must be whole numbers, got {value!r}") from None
    if array.dtype.kind in "iu":
        values = array.reshape(-1).astype(object)
    elif array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
        values = array.reshape(-1)
    else:
        shown = repr(value) if np.size(value) <= 8 else f"an array of shape {np.shape(value)}"
        raise ParameterError(f"{owner}: {what} must be whole numbers, got {shown}")
    if any(abs(v) > _LARGEST for v in values):
        raise ParameterError(f"{owner}: {what} {value!r} holds values beyond {_LARGEST}; give sizes that fit")
    result = tuple(int(v) for v in values)
    if minimum is not None and any(v < minimum for v in result):
        raise ParameterError(
            f"{owner}: {what} {list(result)} must be {minimum} or more"
            + (" (a negative padding crops nothing in NIR)" if "padding" in what else "")
        )
    return result


def ints(value: Any, count: int, what: str, owner: str, minimum: int | None = None) -> tuple[int, ...]:
    """``count`` integers from one integer or ``count`` of them (NIR stores both), each at
    least ``minimum``; see :func:`integers` for what is refused."""
    values = integers(value, what, owner, minimum)
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise ParameterError(f"{owner}: {what} needs 1 or {count} integers, got {value!r}")
    return values


def integer(value: Any, what: str, owner: str, minimum: int | None = None) -> int:
    """One whole number (a scalar or a one-element array); see :func:`integers`."""
    values = integers(value, what, owner, minimum)
    if len(values) != 1:
        raise ParameterError(f"{owner}: {what} must be one whole number, got {value!r}")
    return values[0]


def pool_args(node: Any, owner: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(kernel, stride, padding) of a pooling node; stride defaults to the kernel, padding to
    0. Kernels and strides are 1 or more, paddings 0 or more and at most half the kernel
    (a window that lies wholly in the padding has nothing to pool)."""
    kernel = ints(node.kernel_size, 2, "kernel_size", owner, minimum=1)
    stride = ints(node.stride, 2, "stride", owner, minimum=1) if given(node.stride) else kernel
    padding = ints(node.padding, 2, "padding", owner, minimum=0) if given(node.padding) else (0, 0)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ParameterError(
            f"{owner}: padding {list(padding)} is more than half the kernel {list(kernel)}, so windows "
            "lie wholly in the padding; pad at most kernel_size // 2"
        )
    return kernel, stride, padding


def given(value: Any) -> bool:
    """Whether an optional field holds something (nir stores a missing one as None or [])."""
    if value is None or isinstance(value, (str, bytes)):
        return value is not None
    try:
        return bool(np.size(value))
    except (TypeError, ValueError):
        return True  # let the parse name it


_PARAMETER_FIELDS = (
    "v_threshold",
    "tau",
    "tau_mem",
    "tau_syn",
    "r",
    "v_leak",
    "v_reset",
    "w_in",
    "delay",
    "threshold",
    "scale",
)


def node_shape(node: Any) -> Shape | None:
    """The shape of a node's state or parameters, when its parameters fix one."""
    for field in ("v_threshold", "tau", "tau_mem", "r", "v_leak", "delay", "threshold", "scale"):
        value = getattr(node, field, None)
        if value is not None:
            return tuple(np.shape(value))
    return None


def _conv_out(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return math.floor((size + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1)


def _check_broadcast(name: str, a: Shape, b: Shape, what: str) -> Shape:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeMismatchError(
            f"node {name!r}: its {what} have shape {b} but its input has shape {a}. "
            "Make the parameters match the input shape (batch axis excluded)."
        ) from None


def _affine_shape(label: str, node: Any, shape: Shape) -> tuple[Shape, Any]:
    weight = np.asarray(node.weight)
    kind = type(node).__name__
    if weight.ndim != 2:
        raise ShapeMismatchError(
            f"node {label!r} ({kind}): weight must be 2-D (out, in), got shape {weight.shape}"
        )
    out_features, in_features = weight.shape
    if shape and shape[-1] == in_features:
        return (*shape[:-1], out_features), None
    bias = getattr(node, "bias", None)
    if (
        shape
        and shape[-1] == out_features
        and in_features != out_features
        and (bias is None or np.size(bias) in (1, in_features))
    ):
        warnings.warn(
            f"node {label!r} ({kind}): weight has shape {weight.shape} (out, in) but its "
            f"input has {shape[-1]} features; the weight was stored transposed (as older "
            f"spyx exports do), so it is used as {weight.T.shape}",
            RepairWarning,
            stacklevel=5,
        )
        return (*shape[:-1], in_features), _replace(node, weight=np.ascontiguousarray(weight.T))
    raise ShapeMismatchError(
        f"node {label!r} ({kind}): weight of shape {weight.shape} expects {in_features} "
        f"input features but receives shape {shape}. Check the weight (NIR stores it as "
        "(out, in)) or the edges into this node."
    )


def _replace(node: Any, **changes: Any) -> Any:
    """A copy of a NIR node with some fields changed (nir nodes are dataclasses)."""
    kwargs = {
        f.name: getattr(node, f.name)
        for f in dataclasses.fields(node)
        if f.init and f.name not in ("input_type", "output_type")
    }
    if isinstance(node, nir.Flatten):
        kwargs["input_type"] = node.input_type
    kwargs.update(changes)
    return type(node)(**kwargs)


def _flatten_shape(label: str, node: nir.Flatten, shape: Shape, expected: int | None) -> tuple[Shape, Any]:
    def flat(start: int, end: int) -> Shape | None:
        rank = len(shape)
        s = start + rank if start < 0 else start
        e = end + rank if end < 0 else end
        if not (0 <= s < rank and 0 <= e < rank and s <= e):
            return None
        return (*shape[:s], int(np.prod(shape[s : e + 1])), *shape[e + 1 :])

    owner = f"node {label!r} (Flatten)"
    start, end = integer(node.start_dim, "start_dim", owner), integer(node.end_dim, "end_dim", owner)
    result = flat(start, end)
    if expected is not None and start > 0 and (result is None or result[-1] != expected):
        new_end = end - 1 if end > 0 else end
        repaired = flat(start - 1, new_end)
        if repaired is not None and repaired[-1] == expected:
            warnings.warn(
                f"node {label!r} (Flatten): start_dim={start} counts the batch axis, but NIR "
                f"dims exclude it; flattening input {shape} from dim {start - 1} instead so "
                f"the next layer gets the {expected} features it expects",
                RepairWarning,
                stacklevel=5,
            )
            return repaired, _replace(node, start_dim=start - 1, end_dim=new_end)
    if result is None:
        raise ShapeMismatchError(
            f"node {label!r} (Flatten): start_dim={start}, end_dim={end} do not fit input "
            f"shape {shape} (dims count without the batch axis)"
        )
    return result, None


def _pool_shape(name: str, node: Any, shape: Shape) -> Shape:
    owner = f"node {name!r} ({type(node).__name__})"
    if len(shape) != 3:
        raise ShapeMismatchError(f"{owner}: expects input (C, H, W), got {shape}")
    kernel, stride, padding = pool_args(node, owner)
    hw = tuple(_conv_out(shape[1 + i], kernel[i], stride[i], padding[i], 1) for i in range(2))
    if any(n < 1 for n in hw):
        raise ShapeMismatchError(
            f"{owner}: kernel {list(kernel)} is larger than its input {list(shape[1:])} padded by "
            f"{list(padding)}, so there is no window to pool; use a smaller kernel or more padding"
        )
    return (shape[0], *hw)


def conv_args(
    node: Any, dims: int, owner: str
) -> tuple[tuple[int, ...], str | tuple[int, ...], tuple[int, ...], int]:
    """(stride, padding, dilation, groups) of a Conv1d/Conv2d node, checked: strides,
    dilations and groups 1 or more, paddings 0 or more or ``"same"``/``"valid"``."""
    stride = ints(node.stride, dims, "stride", owner, minimum=1)
    dilation = ints(node.dilation, dims, "dilation", owner, minimum=1)
    groups = integer(node.groups, "groups", owner, minimum=1)
    return stride, padding_arg(node.padding, dims, owner), dilation, groups


def padding_arg(value: Any, dims: int, owner: str) -> str | tuple[int, ...]:
    """A convolution's padding: ``"same"``, ``"valid"`` (as text, bytes or a one-element
    array of them) or ``dims`` integers of 0 or more."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "SUO" and value.size == 1:
        value = value.reshape(-1)[0]
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise ParameterError(
                f"{owner}: padding must be 'same', 'valid' or integers, got {value!r}"
            ) from None
    if isinstance(value, str):
        if value not in ("same", "valid"):
            raise ParameterError(f"{owner}: padding must be 'same', 'valid' or integers, got {value!r}")
        return value
    return ints(value, dims, "padding", owner, minimum=0)


def _conv_shape(name: str, node: Any, shape: Shape) -> Shape:
    weight = np.asarray(node.weight)
    dims = weight.ndim - 2
    owner = f"node {name!r} ({type(node).__name__})"
    if len(shape) != dims + 1:
        raise ShapeMismatchError(
            f"{owner}: expects input (C, {'L' if dims == 1 else 'H, W'}), got shape {shape}"
        )
    stride, padding, dilation, groups = conv_args(node, dims, owner)
    if shape[0] != weight.shape[1] * groups:
        raise ShapeMismatchError(
            f"{owner}: weight {weight.shape} with groups={groups} "
            f"expects {weight.shape[1] * groups} input channels but receives {shape[0]}"
        )
    if weight.shape[0] % groups:
        raise ParameterError(
            f"{owner}: groups={groups} does not divide the {weight.shape[0]} output channels; "
            "each group needs the same number of them"
        )
    kernel = weight.shape[2:]
    if padding == "same":
        return (weight.shape[0], *shape[1:])
    pad = (0,) * dims if padding == "valid" else padding
    out = [_conv_out(shape[1 + i], kernel[i], stride[i], pad[i], dilation[i]) for i in range(dims)]
    if any(n < 1 for n in out):
        spans = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
        raise ShapeMismatchError(
            f"{owner}: kernel {list(kernel)} (spanning {spans} with dilation {list(dilation)}) is larger "
            f"than its input {list(shape[1:])} padded by {list(pad)}; use a smaller kernel or dilation, "
            "or more padding"
        )
    return (weight.shape[0], *out)


def _expected_features(node: Any) -> int | None:
    if isinstance(node, (nir.Affine, nir.Linear)):
        weight = np.asarray(node.weight)
        return int(weight.shape[-1]) if weight.ndim == 2 else None
    return None


@dataclasses.dataclass
class Shapes:
    """Result of :func:`infer_shapes` for one graph level (batch axis excluded)."""

    outputs: dict[str, Shape | None]  # each node's output shape, None where unknown
    inputs: dict[str, Shape | None]  # each node's summed input shape, delayed edges included
    fixes: dict[str, Any]  # repaired copies of nodes, by name
    nested: dict[str, Shapes] = dataclasses.field(default_factory=dict)  # subgraph results
    output: Shape | None = None  # the single Output node's shape, None if several
    plan: Plan | None = None  # the plan the shapes were inferred along


_ELEMENTWISE = (nir.I, nir.IF, nir.LI, nir.LIF, nir.CubaLI, nir.CubaLIF, nir.Threshold, nir.Delay, nir.Scale)


def infer_shapes(
    graph: nir.NIRGraph,
    the_plan: Plan,
    input_shapes: Mapping[str, Shape | None] | None = None,
    path: str = "",
    strict: bool = True,
) -> Shapes:
    """Propagate shapes (batch axis excluded) through one graph level.

    Shapes are unknown (``None``) after a node of a type nirbridge does not know. Nodes
    whose stored parameters do not fit but have one unambiguous reading are repaired
    (a copy, with a :class:`RepairWarning`); otherwise :class:`ShapeMismatchError`
    names the node.
    """
    nodes = graph.nodes
    result = Shapes({}, {}, {}, {}, plan=the_plan)
    successors: dict[str, list[str]] = {}
    for target, sources in the_plan.incoming.items():
        for source, _ in sources:
            successors.setdefault(source, []).append(target)

    def summed(name: str, include_delayed: bool) -> Shape | None:
        total: Shape | None = None
        for source, is_delayed in the_plan.incoming[name]:
            if is_delayed and not include_delayed:
                continue
            src_shape = result.outputs.get(source)
            if src_shape is None:
                return None
            if total is None:
                total = src_shape
                continue
            try:
                total = tuple(np.broadcast_shapes(total, src_shape))
            except ValueError:
                raise ShapeMismatchError(
                    f"node {_label(path, name)!r}: inputs that cannot be summed arrive (the "
                    f"edge from {source!r} brings shape {src_shape}, the others {total}). "
                    "Fan-in sums its inputs, so their shapes must match."
                ) from None
        return total

    for name in the_plan.order:
        node = nodes[name]
        if isinstance(node, nir.Input):
            given = (input_shapes or {}).get(name)
            owner = f"Input node {_label(path, name)!r}"
            declared = _shape(_declared(node, "input", owner), owner)
            result.outputs[name] = given if given is not None else declared
            continue
        shape = summed(name, include_delayed=False)
        if shape is None:
            fallback = node_shape(node) if isinstance(node, _ELEMENTWISE) else None
            result.outputs[name] = fallback
            continue
        out, fixed = _node_out_shape(path, name, node, shape, successors.get(name, []), nodes, strict)
        if isinstance(out, Shapes):
            result.nested[name] = out
            out = out.output
        result.outputs[name] = out
        if fixed is not None:
            result.fixes[name] = fixed
    _transpose_square_weights(nodes, result.fixes, path)
    for name in the_plan.order:
        if not isinstance(nodes[name], nir.Input):
            result.inputs[name] = summed(name, include_delayed=True)
    if len(the_plan.outputs) == 1:
        result.output = result.outputs.get(the_plan.outputs[0])
    return result


def _transpose_square_weights(nodes: Mapping[str, Any], fixes: dict[str, Any], path: str) -> None:
    """Once one weight of a graph level was found stored as (in, out), read the square
    ones the same way: their shape cannot tell, the exporter's convention can."""
    transposed = [n for n, f in fixes.items() if isinstance(f, (nir.Affine, nir.Linear))]
    if not transposed:
        return
    square = [
        n
        for n, node in nodes.items()
        if isinstance(node, (nir.Affine, nir.Linear))
        and n not in fixes
        and np.ndim(node.weight) == 2
        and np.shape(node.weight)[0] == np.shape(node.weight)[1]
    ]
    for n in square:
        fixes[n] = _replace(nodes[n], weight=np.ascontiguousarray(np.asarray(nodes[n].weight).T))
    if square:
        warnings.warn(
            f"square weights of {[_label(path, n) for n in square]} are transposed too, since "
            f"{[_label(path, n) for n in transposed]} show that this graph stores weights as "
            "(in, out)",
            RepairWarning,
            stacklevel=3,
        )


def _label(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _elementwise_shape(label: str, node: Any, shape: Shape) -> Shape:
    """An element-wise node's output shape: its input's. Its parameters must broadcast
    to the input without growing it (parameters of shape (6, 6) on an input of (6,)
    would turn one sample into six, and read the batch axis as neurons)."""
    fields = [f for f in _PARAMETER_FIELDS if getattr(node, f, None) is not None]
    for field in fields:
        params = tuple(np.shape(getattr(node, field)))
        result = _check_broadcast(label, shape, params, f"parameters ({field})")
        if result != shape:
            raise ShapeMismatchError(
                f"node {label!r} ({type(node).__name__}): {field} has shape {params}, which would turn "
                f"its input of shape {shape} into {result}; give each parameter the shape of the "
                "population (or one that broadcasts to it)"
            )
    return shape


def _node_out_shape(
    path: str,
    name: str,
    node: Any,
    shape: Shape,
    successor_names: list[str],
    nodes: Mapping[str, Any],
    strict: bool,
) -> tuple[Shape | Shapes | None, Any]:
    label = _label(path, name)
    if isinstance(node, nir.Output):
        declared = _shape(_declared(node, "output", f"Output node {label!r}"), f"Output node {label!r}")
        if declared is not None and declared != shape:
            warnings.warn(
                f"Output node {label!r} declares shape {declared} but receives {shape}; "
                "the data it receives is passed through unchanged",
                RepairWarning,
                stacklevel=4,
            )
        return shape, None
    if isinstance(node, (nir.Affine, nir.Linear)):
        return _affine_shape(label, node, shape)
    if isinstance(node, (nir.Conv1d, nir.Conv2d)):
        return _conv_shape(label, node, shape), None
    if isinstance(node, (nir.AvgPool2d, nir.SumPool2d)):
        return _pool_shape(label, node, shape), None
    if isinstance(node, nir.Flatten):
        expected = {_expected_features(nodes[s]) for s in successor_names}
        target = expected.pop() if len(expected) == 1 else None
        return _flatten_shape(label, node, shape, target)
    if isinstance(node, nir.NIRGraph):
        sub_plan = plan(node, label, strict)
        if len(sub_plan.inputs) != 1:
            if not strict:
                return None, None
            raise GraphStructureError(
                f"subgraph {label!r} receives edges but has {len(sub_plan.inputs)} Input "
                "nodes; an edge into a subgraph feeds its single Input node"
            )
        sub = infer_shapes(node, sub_plan, {sub_plan.inputs[0]: shape}, label, strict)
        fixed = _replace_subgraph(node, sub.fixes) if sub.fixes else None
        return sub, fixed
    if isinstance(node, _ELEMENTWISE):
        return _elementwise_shape(label, node, shape), None
    return None, None


def _replace_subgraph(graph: nir.NIRGraph, fixes: Mapping[str, Any]) -> nir.NIRGraph:
    nodes = {k: fixes.get(k, v) for k, v in graph.nodes.items()}
    return nir.NIRGraph(nodes=nodes, edges=list(graph.edges), metadata=graph.metadata, type_check=False)

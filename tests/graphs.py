"""Shared test material: field-by-field equality of NIR graphs and hypothesis
strategies for random NIR graphs (recurrent blocks, nested subgraphs, conv prefixes,
random names and metadata, shuffled edges)."""

from __future__ import annotations

import nir
import numpy as np
from hypothesis import strategies as st

# ----------------------------------------------------------------------------- equality


def assert_values_equal(a, b, where: str, dtypes: bool, order: bool = True) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict), f"{where}: {b!r} is not a dict"
        keys_a, keys_b = (list(a), list(b)) if order else (sorted(a), sorted(b))
        assert keys_a == keys_b, f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            assert_values_equal(a[key], b[key], f"{where}.{key}", dtypes, order)
    elif isinstance(a, str):
        assert a == b, f"{where}: {a!r} != {b!r}"
    elif a is None:
        assert b is None, f"{where}: None != {b!r}"
    else:
        x, y = np.asarray(a), np.asarray(b)
        assert x.shape == y.shape and np.array_equal(x, y), f"{where}: {a!r} != {b!r}"
        if dtypes and x.dtype.kind not in "USO":
            assert x.dtype == y.dtype, f"{where}: dtype {x.dtype} != {y.dtype}"


def assert_same(
    a: nir.NIRNode, b: nir.NIRNode, *, order: bool = True, dtypes: bool = True, where: str = ""
) -> None:
    """``b`` holds what ``a`` holds. ``order``: node order too; ``dtypes``: array dtypes too."""
    label = where or "<root>"
    assert type(a) is type(b), f"{label}: {type(a).__name__} != {type(b).__name__}"
    assert_values_equal(dict(a.metadata or {}), dict(b.metadata or {}), f"{label} metadata", dtypes, order)
    if isinstance(a, nir.NIRGraph):
        names_a, names_b = list(a.nodes), list(b.nodes)
        assert (names_a == names_b) if order else (sorted(names_a) == sorted(names_b)), (
            f"{label}: nodes differ"
        )
        assert [tuple(map(str, e)) for e in a.edges] == [tuple(e) for e in b.edges], f"{label}: edges differ"
        for name in a.nodes:
            assert_same(
                a.nodes[name], b.nodes[name], order=order, dtypes=dtypes, where=f"{where}.{name}".lstrip(".")
            )
        return
    if isinstance(a, nir.Input):
        assert_values_equal(a.input_type["input"], b.input_type["input"], f"{label} shape", False)
        return
    if isinstance(a, nir.Output):
        assert_values_equal(a.output_type["output"], b.output_type["output"], f"{label} shape", False)
        return
    for field in vars(a):
        if field in ("input_type", "output_type", "metadata"):
            continue
        assert_values_equal(getattr(a, field), getattr(b, field), f"{label}.{field}", dtypes)
    if isinstance(a, nir.Flatten):
        assert_values_equal(a.input_type["input"], b.input_type["input"], f"{label}.input_type", False)


def lif(n: int, rng: np.random.Generator, dtype=np.float32) -> dict:
    return dict(
        tau=rng.uniform(1e-3, 1e-2, n).astype(dtype),
        r=rng.uniform(0.5, 2, n).astype(dtype),
        v_leak=rng.normal(size=n).astype(dtype),
        v_threshold=np.ones(n, dtype),
        v_reset=np.zeros(n, dtype),
    )


# ----------------------------------------------------------------------------- random graphs

NAMES = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\0."), min_size=1, max_size=8)
SCALARS = st.one_of(
    st.integers(-(2**62), 2**62),
    st.floats(allow_nan=False, width=64),
    st.booleans(),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\0"), max_size=12),
)


def affine_lif(rng: np.random.Generator) -> nir.NIRGraph:
    """input (3) -> Affine -> LIF (4) -> output, recording dt = 1e-4."""
    return nir.NIRGraph(
        nodes={
            "input": nir.Input(np.array([3])),
            "fc": nir.Affine(rng.normal(size=(4, 3)), rng.normal(size=4)),
            "lif": nir.LIF(
                tau=np.full(4, 1e-3), r=np.full(4, 5.0), v_leak=np.zeros(4), v_threshold=np.ones(4)
            ),
            "output": nir.Output(np.array([4])),
        },
        edges=[("input", "fc"), ("fc", "lif"), ("lif", "output")],
        metadata={"dt": 1e-4},
    )


@st.composite
def arrays(draw) -> np.ndarray:
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int8, np.int64, np.uint16, np.bool_]))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    seed = draw(st.integers(0, 2**32 - 1))
    values = np.random.default_rng(seed).normal(size=shape) * 50
    return values.astype(dtype)


def metadata_dicts(depth: int = 1):
    values = st.one_of(SCALARS, arrays())
    if depth:
        values = st.one_of(values, st.deferred(lambda: metadata_dicts(depth - 1)))
    keys = NAMES.filter(lambda k: k not in ("type_check",))
    return st.dictionaries(keys, values, max_size=4)


LAYERS = [
    "Affine",
    "Linear",
    "Scale",
    "Threshold",
    "Delay",
    "I",
    "IF",
    "LI",
    "LIF",
    "CubaLI",
    "CubaLIF",
    "rec",
    "sub",
]


@st.composite
def random_graphs(draw, depth: int = 0) -> nir.NIRGraph:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    width = draw(st.integers(1, 5))
    nodes: dict[str, nir.NIRNode] = {}
    edges: list[tuple[str, str]] = []
    used: set[str] = set()

    def name(kind: str) -> str:
        candidate = (
            draw(NAMES.filter(lambda n: n not in used))
            if draw(st.booleans())
            else f"{kind.lower()}_{len(used)}"
        )
        while candidate in used:
            candidate += "_"
        used.add(candidate)
        return candidate

    first = name("input")
    prefix = draw(st.sampled_from(["none", "none", "conv1d", "conv2d"])) if depth == 0 else "none"
    if prefix == "none":
        nodes[first] = nir.Input(np.array([width]))
        previous = first
    else:
        channels, size = draw(st.integers(1, 3)), draw(st.integers(4, 7))
        if prefix == "conv1d":
            nodes[first] = nir.Input(np.array([channels, size]))
            conv = nir.Conv1d(
                size, rng.normal(size=(2, channels, 3)).astype(dtype), 1, 1, 1, 1, np.zeros(2, dtype)
            )
            out = (2, size)
        else:
            nodes[first] = nir.Input(np.array([channels, size, size]))
            conv = nir.Conv2d(
                (size, size),
                rng.normal(size=(2, channels, 3, 3)).astype(dtype),
                1,
                0,
                1,
                1,
                np.zeros(2, dtype),
            )
            out = (2, size - 2, size - 2)
        conv_name, flat_name = name("conv"), name("flatten")
        nodes[conv_name] = conv
        nodes[flat_name] = nir.Flatten(input_type={"input": np.array(out)}, start_dim=0)
        edges += [(first, conv_name), (conv_name, flat_name)]
        previous, width = flat_name, int(np.prod(out))
    for kind in draw(
        st.lists(st.sampled_from(LAYERS if depth == 0 else LAYERS[:-1]), min_size=1, max_size=5)
    ):
        params = lif(width, rng, dtype)
        new_width = width
        if kind == "Affine":
            new_width = draw(st.integers(1, 5))
            node = nir.Affine(
                rng.normal(size=(new_width, width)).astype(dtype), rng.normal(size=new_width).astype(dtype)
            )
        elif kind == "Linear":
            new_width = draw(st.integers(1, 5))
            node = nir.Linear(rng.normal(size=(new_width, width)).astype(dtype))
        elif kind == "Scale":
            node = nir.Scale(rng.normal(size=width).astype(dtype))
        elif kind == "Threshold":
            node = nir.Threshold(params["v_threshold"])
        elif kind == "Delay":
            node = nir.Delay(rng.integers(0, 3, width).astype(dtype))
        elif kind == "I":
            node = nir.I(params["r"])
        elif kind == "IF":
            node = nir.IF(params["r"], params["v_threshold"], params["v_reset"])
        elif kind == "LI":
            node = nir.LI(params["tau"], params["r"], params["v_leak"])
        elif kind in ("LIF", "rec"):
            node = nir.LIF(**params)
        elif kind == "CubaLI":
            node = nir.CubaLI(
                params["tau"], params["tau"] * 2, params["r"], params["v_leak"], w_in=params["r"]
            )
        elif kind == "CubaLIF":
            node = nir.CubaLIF(
                params["tau"],
                params["tau"] * 2,
                params["r"],
                params["v_leak"],
                params["v_threshold"],
                params["v_reset"],
            )
        else:
            node = draw(random_graphs(depth=depth + 1).filter(lambda g, w=width: _in_width(g) == w))
            new_width = _out_width(node)
        current = name(kind)
        nodes[current] = node
        edges.append((previous, current))
        if kind == "rec":
            recurrent = name("w_rec")
            nodes[recurrent] = nir.Linear(rng.normal(size=(width, width)).astype(dtype))
            edges += [(current, recurrent), (recurrent, current)]
        if draw(st.booleans()):
            node.metadata = draw(metadata_dicts())
        previous, width = current, new_width
    last = name("output")
    nodes[last] = nir.Output(np.array([width]))
    edges.append((previous, last))
    order = draw(st.permutations(range(len(edges))))
    return nir.NIRGraph(
        nodes=nodes, edges=[edges[i] for i in order], metadata=draw(metadata_dicts()), type_check=False
    )


def _in_width(graph: nir.NIRGraph) -> int:
    return int(next(n for n in graph.nodes.values() if isinstance(n, nir.Input)).input_type["input"][0])


def _out_width(graph: nir.NIRGraph) -> int:
    return int(next(n for n in graph.nodes.values() if isinstance(n, nir.Output)).output_type["output"][0])

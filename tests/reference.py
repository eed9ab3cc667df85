"""An independent numpy implementation of DESIGN.md's discrete-time semantics.

It imports nothing from nirbridge: ordering, delayed edges, every primitive's update
and nested graphs are written out again here, as plainly as possible, so that tests
compare nirbridge against the equations rather than against itself.
"""

from __future__ import annotations

import itertools

import nir
import numpy as np


def _dfs(graph: nir.NIRGraph) -> tuple[list[str], set[int]]:
    succ: dict[str, list[tuple[str, int]]] = {n: [] for n in graph.nodes}
    for i, (a, b) in enumerate(graph.edges):
        succ[a].append((b, i))
    colour: dict[str, str] = {}
    post: list[str] = []
    delayed: set[int] = set()

    def visit(n: str) -> None:
        colour[n] = "grey"
        for m, i in succ[n]:
            if m not in colour:
                visit(m)
            elif colour[m] == "grey":
                delayed.add(i)
        colour[n] = "black"
        post.append(n)

    for name, node in graph.nodes.items():
        if isinstance(node, nir.Input) and name not in colour:
            visit(name)
    return post[::-1], delayed


def _ints(v, n):
    a = np.asarray(v).reshape(-1)
    return [int(a[0])] * n if a.size == 1 else [int(x) for x in a]


def _windows(x, kernel, stride, dilation):
    """Yield (offset, strided slice) for every kernel offset; x is (B, C, *S) padded."""
    spatial = x.shape[2:]
    out = [(spatial[d] - dilation[d] * (kernel[d] - 1) - 1) // stride[d] + 1 for d in range(len(kernel))]
    for offset in itertools.product(*[range(k) for k in kernel]):
        index = tuple(
            slice(offset[d] * dilation[d], offset[d] * dilation[d] + stride[d] * (out[d] - 1) + 1, stride[d])
            for d in range(len(kernel))
        )
        yield offset, x[(slice(None), slice(None), *index)]


def conv(x, w, b, stride, padding, dilation, groups):
    dims = w.ndim - 2
    stride, dilation = _ints(stride, dims), _ints(dilation, dims)
    kernel = list(w.shape[2:])
    if isinstance(padding, bytes):
        padding = padding.decode()
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * dims
        else:
            totals = [dilation[d] * (kernel[d] - 1) for d in range(dims)]
            pads = [(t // 2, t - t // 2) for t in totals]
    else:
        pads = [(p, p) for p in _ints(padding, dims)]
    x = np.pad(x, [(0, 0), (0, 0), *pads])
    batch, channels = x.shape[:2]
    out_channels = w.shape[0]
    total = None
    for offset, window in _windows(x, kernel, stride, dilation):
        xs = window.reshape(batch, groups, channels // groups, *window.shape[2:])
        wk = w[(slice(None), slice(None), *offset)].reshape(
            groups, out_channels // groups, channels // groups
        )
        term = np.einsum("bgc...,goc->bgo...", xs, wk)
        total = term if total is None else total + term
    total = total.reshape(batch, out_channels, *total.shape[3:])
    return total + np.asarray(b).reshape(-1, *([1] * dims))


def pool(x, kernel, stride, padding, average):
    kernel = _ints(kernel, 2)
    stride = _ints(stride, 2) if np.size(stride) else kernel
    padding = _ints(padding, 2) if np.size(padding) else [0, 0]
    x = np.pad(x, [(0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])])
    total = sum(w for _, w in _windows(x, kernel, stride, [1, 1]))
    return total / (kernel[0] * kernel[1]) if average else total


class Reference:
    """Step a NIR graph in numpy: ``outputs = ref.step({input_name: array})``."""

    def __init__(self, graph: nir.NIRGraph, dt: float, transpose: frozenset = frozenset()):
        self.graph, self.dt, self.transpose = graph, dt, transpose
        self.order, self.delayed = _dfs(graph)
        self.state: dict[str, object] = {}
        self.previous: dict[str, np.ndarray] = {}
        self.sub = {n: Reference(g, dt) for n, g in graph.nodes.items() if isinstance(g, nir.NIRGraph)}

    def step(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = {}
        batch = next(iter(inputs.values())).shape[0]
        for name in self.order:
            node = self.graph.nodes[name]
            if isinstance(node, nir.Input):
                values[name] = inputs[name]
                continue
            x = None
            for i, (a, b) in enumerate(self.graph.edges):
                if b != name:
                    continue
                v = self.previous.get(a) if i in self.delayed else values[a]
                if v is None:
                    continue
                x = v if x is None else x + v
            if x is None:  # only delayed inputs, first step
                shape = self._input_shape(name)
                x = np.zeros((batch, *shape))
            values[name] = self._node(name, node, x)
        for i in self.delayed:
            a = self.graph.edges[i][0]
            self.previous[a] = values[a]
        self.values = values  # every node's output at this step, for tests of recordings
        return {n: values[n] for n, node in self.graph.nodes.items() if isinstance(node, nir.Output)}

    def _input_shape(self, name):
        for a, b in self.graph.edges:
            if b == name:
                return np.shape(self.previous_shape(a))
        raise AssertionError(name)

    def previous_shape(self, a):
        node = self.graph.nodes[a]
        for f in ("v_threshold", "tau", "r", "scale", "delay", "threshold"):
            if hasattr(node, f):
                return np.zeros(np.shape(getattr(node, f)))
        if isinstance(node, (nir.Affine, nir.Linear)):
            return np.zeros(np.shape(node.weight)[0])
        raise AssertionError(a)

    def _node(self, name, node, x):
        dt = self.dt
        st = self.state.get(name)
        if isinstance(node, nir.Output):
            return x
        if isinstance(node, nir.NIRGraph):
            sub = self.sub[name]
            inp = next(n for n, m in node.nodes.items() if isinstance(m, nir.Input))
            out = sub.step({inp: x})
            return next(iter(out.values()))
        if isinstance(node, nir.Affine):
            w = node.weight.T if name in self.transpose else node.weight
            return x @ np.asarray(w, np.float64).T + np.asarray(node.bias, np.float64)
        if isinstance(node, nir.Linear):
            w = node.weight.T if name in self.transpose else node.weight
            return x @ np.asarray(w, np.float64).T
        if isinstance(node, nir.Scale):
            return node.scale * x
        if isinstance(node, nir.Threshold):
            return (x > node.threshold).astype(np.float64)
        if isinstance(node, nir.Flatten):
            rank = x.ndim - 1
            s = node.start_dim + rank if node.start_dim < 0 else node.start_dim
            e = node.end_dim + rank if node.end_dim < 0 else node.end_dim
            shape = x.shape[1:]
            return x.reshape(x.shape[0], *shape[:s], -1, *shape[e + 1 :])
        if isinstance(node, (nir.Conv1d, nir.Conv2d)):
            return conv(x, node.weight, node.bias, node.stride, node.padding, node.dilation, int(node.groups))
        if isinstance(node, nir.SumPool2d):
            return pool(x, node.kernel_size, node.stride, node.padding, False)
        if isinstance(node, nir.AvgPool2d):
            return pool(x, node.kernel_size, node.stride, node.padding, True)
        if isinstance(node, nir.Delay):
            steps = np.rint(np.asarray(node.delay) / dt).astype(int)
            history = st if st is not None else []
            history = [x, *history]
            out = np.zeros(np.broadcast_shapes(x.shape, steps.shape))
            for idx in np.ndindex(*out.shape):
                k = int(np.broadcast_to(steps, out.shape[1:])[idx[1:]])
                out[idx] = history[k][idx] if k < len(history) else 0.0
            self.state[name] = history[: int(steps.max()) if steps.size else 0]
            return out
        if isinstance(node, nir.I):
            v = (st if st is not None else 0.0) + dt * node.r * x
            self.state[name] = v
            return v
        if isinstance(node, nir.LI):
            v = st if st is not None else np.broadcast_to(node.v_leak, x.shape).astype(np.float64)
            v = v + (dt / node.tau) * (node.v_leak - v + node.r * x)
            self.state[name] = v
            return v
        if isinstance(node, nir.IF):
            v = (st if st is not None else np.zeros(x.shape)) + dt * node.r * x
            z = v > node.v_threshold
            self.state[name] = np.where(z, node.v_reset, v)
            return z.astype(np.float64)
        if isinstance(node, nir.LIF):
            v = st if st is not None else np.broadcast_to(node.v_leak, x.shape).astype(np.float64)
            v = v + (dt / node.tau) * (node.v_leak - v + node.r * x)
            z = v > node.v_threshold
            self.state[name] = np.where(z, node.v_reset, v)
            return z.astype(np.float64)
        if isinstance(node, (nir.CubaLI, nir.CubaLIF)):
            i, v = (
                st
                if st is not None
                else (np.zeros(x.shape), np.broadcast_to(node.v_leak, x.shape).astype(np.float64))
            )
            i = i + (dt / node.tau_syn) * (-i + node.w_in * x)
            v = v + (dt / node.tau_mem) * (node.v_leak - v + node.r * i)
            if isinstance(node, nir.CubaLI):
                self.state[name] = (i, v)
                return v
            z = v > node.v_threshold
            self.state[name] = (i, np.where(z, node.v_reset, v))
            return z.astype(np.float64)
        raise NotImplementedError(type(node).__name__)

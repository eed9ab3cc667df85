"""An IR in the form of :mod:`.records` → a NIR graph: weights, shapes, nested graphs."""

from __future__ import annotations

import difflib
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import nir
import numpy as np
import torch

from ... import graph as graph_utils
from ...errors import (
    GraphStructureError,
    LossyConversionWarning,
    MissingNodeError,
    MissingShapeError,
    NirBridgeError,
    NodeConversionError,
    ParameterError,
    ShapeMismatchError,
    UnsupportedImplementationError,
)
from ...limits import MAX_NESTING, check_memory
from .checks import (
    _IO,
    _SIDE_CHANNEL,
    _array,
    _check_state_dict,
    _field_disagreement,
    _metadata_dict,
    _nir_fields,
    _shape_value,
    _shown,
)
from .mapping import (
    _GRAPH_TYPES,
    _IO_FIELDS,
    _NODE_FIELDS,
    _WEIGHTS,
    INSTEAD,
    ToNir,
    _Attributes,
    _generic_to_nir,
    _MissingParameter,
    _nir_class,
    _Parameters,
)
from .records import _Impl

# ----------------------------------------------------------------------------- IR → NIR (raw)


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.nelement() * value.element_size()
    return value.nbytes if isinstance(value, np.ndarray) else 0


_NODE_BYTES = 4096  # a NIR node's objects besides its arrays, roughly


def _prefixed(error: NirBridgeError, where: str) -> NirBridgeError:
    """``error`` with ``where`` before its message, as the same class where that class
    takes a message alone (else ``error`` as it is: its message names what it is about)."""
    try:
        again = type(error)(f"{where}: {str(error).removeprefix(': ')}")
    except TypeError:
        return error
    return again


class _IrToNir:
    def __init__(
        self,
        impls: dict[str, _Impl],
        root: str,
        state_dict: Mapping[str, Any] | None,
        type_map: Mapping[str, ToNir],
    ) -> None:
        self.impls, self.root, self.type_map = impls, root, type_map
        self.parameters: dict[str, dict[str, Any]] = {}
        _check_state_dict(state_dict)
        nameless, of_graphs = [], []
        for key, value in (state_dict or {}).items():
            owner, dot, field = key.rpartition(".")
            if not (dot and field and owner in impls):
                nameless.append(key)
            elif impls[owner].type in _GRAPH_TYPES:
                of_graphs.append(key)
            else:
                self.parameters.setdefault(owner, {})[field] = value
        for impl in impls.values():  # weights the IR carries (0.68's Torch2IrWithParams)
            for field, value in impl.weights.items():
                given = self.parameters.setdefault(impl.name, {})
                if field in given and not np.array_equal(_array(f"{impl.name}.{field}", given[field]), value):
                    raise ParameterError(
                        f"implementation {impl.name!r}: its attributes carry a {field!r} "
                        f"(Torch2IrWithParams) that differs from the state_dict's "
                        f"'{impl.name}.{field}'; give one of them"
                    )
                given.setdefault(field, value)
        if nameless:
            raise ParameterError(_nameless_keys(nameless, impls))
        if of_graphs:
            raise ParameterError(
                f"state_dict entries {_listed(of_graphs)} belong to graph implementations, which hold "
                "no weights of their own (their nodes' implementations do: '<graph>.<node>.<field>'); "
                "correct the keys or remove them"
            )
        self.used: dict[str, set[str]] = {}
        self.fields: list[tuple[nir.NIRNode, dict[str, Any], str]] = []  # nir_fields, checked last
        self.declared: list[tuple[str, nir.Output, np.ndarray]] = []  # output shapes the IR gives

    def check_types(self) -> None:
        """Check, before anything is built, every implementation the root reaches: each
        type has a converter, no graph implementation holds itself, graphs nest at most
        :data:`MAX_NESTING` deep and the NIR graph (which copies an implementation for
        every node that uses it) fits in memory. Iterative, each implementation once."""
        offenders: dict[str, list[str]] = {}
        height: dict[str, int] = {}  # graphs nested inside a graph implementation (0: none)
        cost: dict[str, int] = {}  # bytes one use of an implementation builds, roughly
        count: dict[str, int] = {}  # NIR nodes one use of an implementation builds
        root = self.impls[self.root]
        stack: list[tuple[_Impl, str, Iterator[tuple[str, dict[str, Any]]]]] = [
            (root, "", iter(root.nodes.items()))
        ]
        while stack:
            impl, path, todo = stack[-1]
            for name, record in todo:
                if record["type"] in _IO:
                    continue
                label = f"{path}.{name}" if path else name
                target = self.implementation(record, label)
                sub = self.impls[target]
                if sub.type not in _GRAPH_TYPES:
                    if target not in cost:
                        given = self.parameters.get(target, {}).values()
                        cost[target] = _NODE_BYTES + sum(_nbytes(v) for v in given)
                        count[target] = 1
                    if sub.type not in self.type_map and _nir_class(sub.type) is None:
                        offenders.setdefault(sub.type, []).append(f"{label!r} (implementation {target!r})")
                    continue
                chain = [entry[0].name for entry in stack]
                if target in chain:
                    loop = " -> ".join(repr(n) for n in [*chain[chain.index(target) :], target])
                    raise GraphStructureError(
                        f"implementation {target!r} contains itself ({loop}, at node {label!r}); a graph "
                        "cannot hold itself. Point the node at another implementation"
                    )
                if len(stack) + height.get(target, 0) > MAX_NESTING:
                    shown = label if len(label) <= 200 else label[:200] + "..."
                    raise GraphStructureError(
                        f"graph implementations nest more than {MAX_NESTING} deep (at node {shown!r}, "
                        f"implementation {target!r}); nirbridge reads, writes and runs graphs nested up to "
                        f"{MAX_NESTING} deep. Flatten the inner graphs into their parents"
                    )
                if target not in height:
                    stack.append((sub, label, iter(sub.nodes.items())))
                    break
            else:
                stack.pop()
                used = [r["implementation"] for r in impl.nodes.values() if r["type"] not in _IO]
                graphs = [t for t in used if self.impls[t].type in _GRAPH_TYPES]
                height[impl.name] = max((height[t] + 1 for t in graphs), default=0)
                own = 1 + len(impl.nodes) - len(used)  # the graph and its Input and Output nodes
                cost[impl.name] = own * _NODE_BYTES + sum(cost[t] for t in used)
                count[impl.name] = own + sum(count[t] for t in used)
        if offenders:
            raise UnsupportedImplementationError(offenders, sorted(self.type_map), INSTEAD)
        check_memory(
            cost[self.root],
            f"the NIR graph of this IR ({count[self.root]} nodes: a node for every use of every "
            "implementation, through every graph implementation that uses it)",
            "use each graph implementation in fewer places, or flatten the inner graphs",
        )

    def implementation(self, record: Mapping[str, Any], label: str) -> str:
        target = record.get("implementation")
        if not isinstance(target, str) or target not in self.impls:
            raise GraphStructureError(
                f"IR node {label!r} ({record['type']}) names implementation {_shown(target)}, which is not "
                "in the IR; add it or correct the node"
            )
        return target

    def graph(self, impl: _Impl, path: str) -> nir.NIRGraph:
        where = f"implementation {impl.name!r}"
        original = impl.attributes.get("nir_output")  # the NIR name of the IR's "output"
        renamed = original is not None
        if renamed and (impl.nodes.get("output", {}).get("type") != "output" or original in impl.nodes):
            raise GraphStructureError(
                f"{where}: 'nir_output' gives node 'output' the NIR name {original!r}, but "
                + (
                    f"a node is named {original!r} already"
                    if original in impl.nodes
                    else "the graph has no output node named 'output'"
                )
                + "; correct or remove 'nir_output'"
            )
        ignored = [k for k in impl.attributes if k not in _SIDE_CHANNEL]
        if ignored:
            warnings.warn(
                f"{where} ({impl.type}, node {path or '<root>'!r}): attribute(s) {_listed(ignored)} have no "
                "place in a NIR graph, so the graph ignores them (its metadata keeps them for the IR "
                "read back)",
                LossyConversionWarning,
                stacklevel=4,
            )

        def nir_name(name: str) -> str:
            return original if renamed and name == "output" else name

        nodes: dict[str, nir.NIRNode] = {}
        for name, record in impl.nodes.items():
            label = f"{path}.{name}" if path else name
            kind = record["type"]
            ignored = [k for k in record if k not in (_IO_FIELDS if kind in _IO else _NODE_FIELDS)]
            if ignored:
                warnings.warn(
                    f"IR node {label!r} ({kind}): field(s) {_listed(ignored)} mean nothing to NIR (a node "
                    f"record holds {', '.join(_IO_FIELDS if kind in _IO else _NODE_FIELDS)}), so the NIR "
                    "graph ignores them; its metadata keeps them for the IR read back. Correct the name "
                    "if one is misspelt",
                    LossyConversionWarning,
                    stacklevel=4,
                )
            if kind in _IO:
                shape = record.get("shape")
                value = (
                    None
                    if shape is None
                    else np.array(_shape_value(shape, f"the shape of IR node {label!r}"), dtype=np.int64)
                )
                node = nir.Input(input_type={"input": value}) if kind == "input" else nir.Output(None)
                node.metadata = _metadata_dict(record.get("nir_metadata"), f"IR node {label!r}")
                if kind == "output" and value is not None:  # a declared shape wins over the inferred
                    self.declared.append((label, node, value))
            else:
                sub = self.impls[self.implementation(record, label)]
                node = self.graph(sub, label) if sub.type in _GRAPH_TYPES else self.node(sub, label)
                node.metadata = _metadata_dict(
                    sub.attributes.get("nir_metadata"), f"implementation {sub.name!r}"
                )
                if sub.attributes.get("nir_fields"):
                    at = f"implementation {sub.name!r} (node {label!r})"
                    self.fields.append((node, _nir_fields(node, sub.attributes["nir_fields"], at), at))
            nodes[nir_name(name)] = node
        for src, dst, _ in impl.edges:
            for end in (src, dst):
                if end not in impl.nodes:
                    raise MissingNodeError((src, dst), end, file=where)
        ir_edges = [(nir_name(src), nir_name(dst)) for src, dst, _ in impl.edges]
        edges = impl.attributes.get("nir_edges")  # NIR's names and order
        if edges is None:
            edges = ir_edges
        else:
            edges = [(src, dst) for src, dst in edges]
            for src, dst in edges:
                for end in (src, dst):
                    if end not in nodes:
                        raise MissingNodeError((src, dst), end, file=f"{where}, 'nir_edges'")
            counted, ir_counted = Counter(edges), Counter(ir_edges)  # an edge listed twice sums twice
            only_nir, only_ir = set(counted - ir_counted), set(ir_counted - counted)
            if only_nir or only_ir:
                raise GraphStructureError(
                    f"{where}: 'nir_edges' (the order NIR gave its edges) does not list the same edges as "
                    f"'edges', counting repeats: {_listed(sorted(only_nir))} only in 'nir_edges', "
                    f"{_listed(sorted(only_ir))} only in 'edges'. "
                    "Remove 'nir_edges' (the edges then keep the order of 'edges') or correct it"
                )
        return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)

    def node(self, impl: _Impl, label: str) -> nir.NIRNode:
        given = self.parameters.get(impl.name, {})
        parameters = _Parameters({k: _array(f"{impl.name}.{k}", v) for k, v in given.items()})
        attributes = _Attributes({k: v for k, v in impl.attributes.items() if k not in _SIDE_CHANNEL})
        where = f"implementation {impl.name!r} ({impl.type}, node {label!r})"
        convert = self.type_map.get(impl.type)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if convert is not None:
                    node = convert(attributes, parameters)
                else:
                    node = _generic_to_nir(_nir_class(impl.type), attributes, parameters)
            except _MissingParameter as missing:
                raise ParameterError(
                    f"{where} needs {missing.args[0]!r}, but the state_dict has no key "
                    f"'{impl.name}.{missing.args[0]}'; pass the model's state_dict(): "
                    "to_nir(ir, model.state_dict())"
                ) from None
            except NirBridgeError as error:
                raise _prefixed(error, where) from None
            except Exception as error:  # a converter from the user's type_map
                raise NodeConversionError(label, impl.type, error) from error
        for warning in caught:
            warnings.warn_explicit(
                f"{where}: {warning.message}", warning.category, warning.filename, warning.lineno
            )
        if not isinstance(node, nir.NIRNode):
            raise NodeConversionError(
                label, impl.type, TypeError(f"its converter returned {type(node).__name__}, not a NIR node")
            )
        weights = next((w for fn, w in _WEIGHTS.items() if fn is convert), None)  # converters may not hash
        if weights is not None:
            self.unread(impl, where, weights, parameters, attributes)
        used = self.used.setdefault(impl.name, set())
        used.update(parameters.read & set(given))
        return node

    def unread(
        self,
        impl: _Impl,
        where: str,
        weights: tuple[str, ...],
        parameters: _Parameters,
        attributes: _Attributes,
    ) -> None:
        """Name what a built-in converter did not read: state_dict entries are an error
        (their weights would be lost), attributes a warning (the NIR node ignores them;
        the IR read back keeps them)."""
        extra = [f"{impl.name}.{k}" for k in parameters if k not in parameters.read]
        if extra:
            raise ParameterError(
                f"{where}: the state_dict holds {_listed(extra)}, which {impl.type} has no field for (it "
                f"takes {', '.join(repr(w) for w in weights) or 'no weights'}); correct the key(s) or remove "
                "them. A type_map converter may take other fields"
            )
        ignored = [k for k in attributes if k not in attributes.read]
        if ignored:
            warnings.warn(
                f"{where}: attribute(s) {_listed(ignored)} mean nothing to {impl.type} (it reads "
                f"{', '.join(repr(k) for k in sorted(attributes.read)) or 'no attributes'}), so the NIR node "
                "ignores them; its metadata keeps them for the IR read back. Correct the name if one is "
                "misspelt",
                LossyConversionWarning,
                stacklevel=5,
            )

    def unused_parameters(self) -> list[str]:
        return [
            f"{owner}.{field}"
            for owner, fields in self.parameters.items()
            for field in fields
            if field not in self.used.get(owner, set())
        ]


def _listed(keys: list[str], most: int = 8) -> str:
    """Keys as a list for a message, at most ``most`` of them (and how many more)."""
    shown = ", ".join(_shown(k) for k in keys[:most])
    return f"[{shown}]" if len(keys) <= most else f"[{shown}, ... ({len(keys) - most} more)]"


def _nameless_keys(keys: list[str], impls: Mapping[str, _Impl]) -> str:
    """The message for state_dict keys that name no implementation of the IR."""
    names = sorted(impls)
    hints = []
    for key in keys[:8]:
        owner = key.rpartition(".")[0]
        cheap = len(owner) <= 200 and len(names) <= 2000  # difflib compares with every name
        close = difflib.get_close_matches(owner, names, n=1) if cheap else []
        if close:
            hints.append(f"{_shown(key)}: did you mean {_shown(close[0] + key[len(owner) :])}?")
    listed = ", ".join(_shown(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
    return (
        f"state_dict keys {_listed(keys)} name no implementation of the IR (keys are "
        f"'<implementation>.<field>'; its implementations: {listed})"
        + (f" ({'; '.join(hints)})" if hints else "")
        + ". Correct the keys or remove them: the IR would be converted without those weights"
    )


def _input_shapes(
    graph: nir.NIRGraph, the_plan: graph_utils.Plan, input_shape: Any, ir_nodes: Mapping[str, Any]
) -> dict[str, tuple[int, ...]]:
    from ...trace import _declared, _shape_from_consumers

    if input_shape is None:
        given: dict[str, Any] = {}
    elif isinstance(input_shape, Mapping):
        given = dict(input_shape)
        unknown = [k for k in given if k not in the_plan.inputs]
        if unknown:
            raise GraphStructureError(
                f"input_shape names {unknown}, but the IR's inputs are {the_plan.inputs}"
            )
    elif len(the_plan.inputs) == 1:
        given = {the_plan.inputs[0]: input_shape}
    else:
        raise GraphStructureError(
            f"the IR has inputs {the_plan.inputs}; give input_shape as a dict of shapes by input name"
        )
    shapes = {}
    for name in the_plan.inputs:
        declared = _declared(graph.nodes[name])
        shape = _shape_value(given[name], f"input_shape for {name!r}") if name in given else declared
        if declared is not None and shape != declared:
            raise ShapeMismatchError(
                f"input_shape gives input {name!r} the shape {shape}, but the IR node says {declared}"
            )
        if shape is None:
            shape = _shape_from_consumers(graph, name, the_plan)
        if shape is None:
            fed = [
                f"{t!r} ({ir_nodes[t].get('type')}, implementation {ir_nodes[t].get('implementation')!r})"
                for t, sources in the_plan.incoming.items()
                if any(s == name for s, _ in sources)
            ]
            raise MissingShapeError(
                f"the shape of input {name!r} cannot be found from what it feeds "
                f"({', '.join(fed) or 'nothing'}): the IR carries no shapes; pass input_shape=(...) "
                "without the batch axis (a dict by input name for several inputs)"
            )
        graph.nodes[name].input_type = {"input": np.array(shape, dtype=np.int64)}
        graph.nodes[name].output_type = {"output": np.array(shape, dtype=np.int64)}
        shapes[name] = shape
    return shapes


def _set_shapes(graph: nir.NIRGraph, shapes: graph_utils.Shapes, path: str) -> None:
    for name, node in graph.nodes.items():
        label = f"{path}.{name}" if path else name
        given, out = shapes.inputs.get(name), shapes.outputs.get(name)
        if isinstance(node, nir.Input):
            given = out
        if isinstance(node, nir.Output):
            out = given
        if given is None or out is None:
            raise MissingShapeError(
                f"node {label!r} ({type(node).__name__}): its shape cannot be inferred from the "
                "input shapes; pass input_shape=(...)"
            )
        if isinstance(node, nir.NIRGraph):
            _set_shapes(node, shapes.nested[name], label)
            node._update_input_output_types()
            continue
        if isinstance(node, nir.Conv1d):
            node.input_shape = int(given[1])
        elif isinstance(node, nir.Conv2d):
            node.input_shape = (int(given[1]), int(given[2]))
        elif isinstance(node, nir.Flatten):
            node.input_type = {"input": np.array(given, dtype=np.int64)}
            node.output_type = {"output": np.array(out, dtype=np.int64)}
            continue
        node.input_type = {"input": np.array(given, dtype=np.int64)}
        node.output_type = {"output": np.array(out, dtype=np.int64)}


def _ir_to_graph(
    impls: dict[str, _Impl],
    root: str,
    state_dict: Mapping[str, Any] | None,
    input_shape: Any,
    type_map: Mapping[str, ToNir],
) -> tuple[nir.NIRGraph, _IrToNir]:
    build = _IrToNir(impls, root, state_dict, type_map)
    build.check_types()
    root_impl = impls[root]
    graph = build.graph(root_impl, "")
    graph.metadata = _metadata_dict(root_impl.attributes.get("nir_metadata"), f"implementation {root!r}")
    the_plan = graph_utils.plan(graph)
    inputs = _input_shapes(graph, the_plan, input_shape, root_impl.nodes)
    # misfits with one reading (old spyx files) warn with RepairWarning and stay as stored,
    # as nirbridge.read keeps them; nir_to_torch repairs them
    shapes = graph_utils.infer_shapes(graph, the_plan, inputs)
    _set_shapes(graph, shapes, "")
    for label, output, shape in build.declared:
        inferred = np.asarray(output.output_type["output"])
        if int(np.prod(shape)) != int(np.prod(inferred)):
            raise ShapeMismatchError(
                f"IR output node {label!r} declares shape {tuple(int(s) for s in shape)}, but "
                f"{tuple(int(s) for s in inferred)} arrives; "
                "correct or remove its 'shape'"
            )
        output.input_type, output.output_type = {"input": shape}, {"output": shape}
    for node, fields, where in build.fields:  # NIR's spelling of what the IR holds, never other values
        for field, value in fields.items():
            built = getattr(node, field)
            problem = _field_disagreement(node, field, built, value)
            if problem is not None:
                raise ParameterError(
                    f"{where}: 'nir_fields' gives {type(node).__name__} field {field!r} {_shown(value)}, "
                    "but the implementation, its state_dict entries and the inferred shapes give "
                    f"{_shown(built)} ({problem}). 'nir_fields' only restores how NIR spelt a value, never "
                    "another value; correct or remove the entry"
                )
            setattr(node, field, value)
    if isinstance(graph, nir.NIRGraph):
        graph._update_input_output_types()
    return graph, build

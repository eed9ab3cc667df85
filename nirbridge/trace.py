"""torch module → NIR graph.

:func:`torch_to_nir` traces a module's ``forward`` with ``torch.fx``. Every module whose
type is in the merged map (``DEFAULT_MAP`` below is the support table) is a leaf: its
converter turns it into one NIR node named after the module's qualified name. Functions
and tensor methods are looked up in the same map: ``torch.flatten`` becomes a Flatten
node and ``+`` between tensors becomes fan-in, two edges into whatever consumes the sum
(NIR sums a node's incoming edges). Containers such as ``nn.Sequential`` and the user's
own modules are traced through.

Stateful leaves (a ``forward`` with a ``state`` parameter, and modules built by
:func:`nirbridge.nir_to_torch`) return ``(out, state)``; the tracer follows ``out`` and
drops the state. A model whose ``forward`` has a ``state`` parameter is traced with
``state=None`` and must return ``(output, state)``.

A ``forward`` that loops over time steps itself (snntorch's tutorial style) is reported
as that, with the one-step ``forward`` to write: a NIR graph is one step of a recurrence.
Those messages, and the one naming everything the map lacks, are written by
:mod:`nirbridge.diagnose`; the map's marker values and lookups are in :mod:`nirbridge.maps`.

Shapes (batch axis excluded) come from ``example_input`` when given, otherwise from the
weights of the layers an Input feeds; they are propagated through the graph with
:func:`nirbridge.graph.infer_shapes` and written into every node's ``input_type`` and
``output_type`` (and conv nodes' ``input_shape``). Neuron parameters given as scalars
are broadcast to their population's shape. The model itself is never run.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import contextvars
import copy
import dataclasses
import dis
import functools
import inspect
import math
import operator
import os
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import nir
import numpy as np
import torch
import torch.fx as fx
from torch import nn

from . import graph as graph_utils
from . import layers, neurons, validate
from .diagnose import _LOOP_SIGNS, _ONE_STEP, _Call, _is_neuron, _time_loop, _unsupported
from .errors import (
    GraphStructureError,
    LossyConversionWarning,
    MissingShapeError,
    NirBridgeError,
    NodeConversionError,
    ParameterError,
    RepairWarning,
    ShapeMismatchError,
    TraceError,
)
from .interpret import accepted_keywords, forward_takes_state
from .maps import (
    BRIDGE,
    FAN_IN,
    ModuleMap,
    _callable_name,
    _key_name,
    _lookup_callable,
    _lookup_module,
    _Marker,
    _nir_meta,
)
from .neurons.modules import DEFAULT_DT, check_dt
from .neurons.simulator import SimulatorNeuron

__all__ = [
    "BRIDGE",
    "DEFAULT_MAP",
    "FAN_IN",
    "ModuleMap",
    "export",
    "graph_module_to_nir",
    "merge_maps",
    "neuron_to_nir",
    "torch_to_nir",
]


def neuron_to_nir(module: Any) -> nir.NIRNode:
    """A :mod:`nirbridge.neurons` module as its NIR node, with its current parameters."""
    return module.to_nir()


def graph_module_to_nir(module: fx.GraphModule, *, module_map: ModuleMap | None = None) -> nir.NIRGraph:
    """A module built by :func:`nirbridge.nir_to_torch` as the NIR graph it runs.

    Node names, node order, edges (recurrent ones included) and metadata are those of
    the graph it was built from; parameters are the module's current ones, so training
    the imported module and exporting it carries the trained values. Each submodule is
    converted through ``module_map`` (default: :data:`DEFAULT_MAP`).
    """
    meta = _nir_meta(module)
    if meta is None:
        raise NirBridgeError(
            f"{type(module).__name__} was not built by nirbridge.nir_to_torch, so it holds no "
            "NIR graph; trace its parent instead, or map its type with module_map"
        )
    the_map = DEFAULT_MAP if module_map is None else module_map
    found_neurons: dict[str, type] = {}
    offenders = _graph_module_offenders(module, the_map, "", found_neurons)
    if offenders:
        raise _unsupported(offenders, the_map, found_neurons)
    nodes: dict[str, nir.NIRNode] = {}
    for name in meta["order"]:
        if name in meta["io"]:
            nodes[name] = copy.deepcopy(meta["io"][name])
        else:
            sub = module.get_submodule(meta["module_paths"][name])
            nodes[name] = _call_handler(_lookup_module(the_map, sub), sub, name, the_map, None)
        if name in meta["node_metadata"] and not nodes[name].metadata:
            nodes[name].metadata = copy.deepcopy(meta["node_metadata"][name])
    return nir.NIRGraph(
        nodes=nodes, edges=list(meta["edges"]), metadata=copy.deepcopy(meta["metadata"]), type_check=False
    )


DEFAULT_MAP: dict[Any, Any] = {
    nn.Linear: layers.linear_to_nir,  # Affine, or Linear when bias=False
    nn.Conv1d: layers.conv_to_nir,
    nn.Conv2d: layers.conv_to_nir,
    nn.AvgPool2d: layers.avgpool2d_to_nir,
    nn.Flatten: layers.flatten_to_nir,
    layers.Flatten: layers.nir_flatten_to_nir,  # NIR's dims, unlike nn.Flatten
    nn.LPPool2d: layers.lppool2d_to_nir,  # norm_type=1, as nirtorch imports SumPool2d
    nn.Identity: BRIDGE,
    layers.Scale: layers.scale_to_nir,
    layers.Threshold: layers.threshold_to_nir,
    layers.SumPool2d: layers.sumpool2d_to_nir,
    neurons.I: neuron_to_nir,
    neurons.IF: neuron_to_nir,
    neurons.LI: neuron_to_nir,
    neurons.LIF: neuron_to_nir,
    neurons.CubaLI: neuron_to_nir,
    neurons.CubaLIF: neuron_to_nir,
    neurons.Delay: neuron_to_nir,
    SimulatorNeuron: neuron_to_nir,  # neurons of the snntorch and norse adapters' imports
    fx.GraphModule: graph_module_to_nir,  # only those built by nir_to_torch
    torch.flatten: layers.flatten_function_to_nir,
    torch.Tensor.flatten: layers.flatten_function_to_nir,
    operator.add: FAN_IN,  # a + b
    torch.add: FAN_IN,
    torch.Tensor.add: FAN_IN,
}
"""Default converters, keyed by module type, function or tensor method. A converter
takes the module (or the function's arguments, tensors replaced by :class:`TensorArg`)
and returns a ``nir.NIRNode``; it may also accept ``dt=`` (the graph's time step) and
``module_map=`` (the merged map) as keywords."""


@dataclasses.dataclass(frozen=True)
class TensorArg:
    """Stands for a traced tensor when a function converter is called."""

    name: str


def torch_to_nir(
    module: nn.Module,
    module_map: ModuleMap | None = None,
    default_map: ModuleMap | None = None,
    *,
    example_input: torch.Tensor | Sequence[torch.Tensor] | None = None,
    skip: Iterable[Any] = (),
    dt: float | None = None,
    default_dict: ModuleMap | None = None,
    stateful_modules: Iterable[type] | None = None,
    concrete_args: Mapping[str, Any] | None = None,
    type_check: bool = False,
) -> nir.NIRGraph:
    """Trace a torch model into a ``nir.NIRGraph`` that runs exactly like it.

    Args:
        module: the model. Its ``forward`` arguments without a default become Input
            nodes named after them; arguments with a default are traced at that value.
            If ``forward`` has a ``state`` parameter, it is traced with ``state=None``
            and must return ``(output, state)``. The output (``output`` in that case,
            otherwise the return value) is a tensor (Output node ``"output"``), a tuple
            of tensors (``"output_0"``, ``"output_1"``, ...) or a dict of tensors (its
            keys name the Output nodes).
        module_map: ``{module type, function or tensor method: fn}``; ``fn(module)``
            returns a ``nir.NIRNode`` (for functions ``fn(*args, **kwargs)``). Entries
            win over the defaults. The value :data:`BRIDGE` (or ``None``, as in
            nirtorch) leaves a module out, its input connected to its consumers.
        default_map: the defaults to merge ``module_map`` into; ``None`` means
            :data:`DEFAULT_MAP`, ``{}`` means no defaults.
        example_input: a tensor, or a tuple with one tensor per Input, batch axis first.
            Only its shapes are used (the model is not run). Without it, Input shapes
            come from the weights of the layers they feed; models whose first layers
            do not fix the shape (convolutions, pooling, Flatten) need it.
        skip: module types to leave out, their input connected to their consumers
            (``skip=(nn.Dropout,)``).
        dt: the time step in seconds the graph is meant to run at, recorded in
            ``graph.metadata["dt"]``. Defaults to the ``dt`` of the model's neuron
            modules (which must agree), else 1e-4.
        default_dict: nirtorch's name for ``default_map``; give one or the other.
        stateful_modules: module types whose ``forward`` returns ``(output, state)``
            besides those nirbridge recognises (a ``state`` parameter, modules built by
            :func:`nirbridge.nir_to_torch`); the tracer follows ``output`` (nirtorch's
            keyword).
        concrete_args: values to trace ``forward`` arguments at, ``{name: value}``;
            those arguments do not become Input nodes (nirtorch's keyword).
        type_check: also run nir's own type check (``nir.NIRGraph.check_types``) on the
            result (nirtorch's keyword). nirbridge's shape inference fills and checks the
            types of every graph it exports either way, so it is off by default.

    Returns:
        A ``nir.NIRGraph`` whose nodes all carry input and output types, so that nir's
        type check accepts it. Node names are the modules' qualified names, so
        ``nir_to_torch(graph).load_state_dict(module.state_dict())`` works.

    Raises:
        UnsupportedModuleError: listing every module type and function the map lacks,
            where each occurs, and the fix.
        TraceError: when torch.fx cannot trace a ``forward``.
        MissingShapeError: when a shape cannot be found without ``example_input``.
    """
    require_module(module, "torch_to_nir")
    if default_dict is not None:
        if default_map is not None:
            raise ParameterError(
                "torch_to_nir got both default_map= and default_dict= (nirtorch's name for it); give one"
            )
        default_map = default_dict
    merged = merge_maps(module_map, default_map, skip)
    stateful = None
    if stateful_modules is not None and (
        isinstance(stateful_modules, (str, bytes)) or not isinstance(stateful_modules, Iterable)
    ):
        raise ParameterError(f"stateful_modules=... takes a tuple of module types, got {stateful_modules!r}")
    if concrete_args is not None and not isinstance(concrete_args, Mapping):
        raise ParameterError(
            f"concrete_args=... takes a dict {{forward argument name: value}}, got {concrete_args!r}"
        )
    if stateful_modules:
        extra = tuple(stateful_modules)
        if not all(isinstance(t, type) for t in extra):
            raise ParameterError(f"stateful_modules=... takes module types, got {extra!r}")

        def stateful(m: nn.Module) -> bool:
            return isinstance(m, extra) or _is_stateful(m)

    graph = export(
        module, merged, example_input=example_input, dt=dt, stateful=stateful, concrete_args=concrete_args
    )
    if type_check:
        try:
            graph.check_types()
        except (ValueError, NotImplementedError) as error:
            raise ShapeMismatchError(
                f"nir's type check rejects the exported graph: {error}. nirbridge's own shape "
                "inference accepted it; pass type_check=False to export without nir's check."
            ) from None
    validate.warn_refused(graph, "torch_to_nir: the model")
    return graph


def merge_maps(
    module_map: ModuleMap | None, default_map: ModuleMap | None = None, skip: Iterable[Any] | None = ()
) -> dict[Any, Any]:
    """``module_map`` over ``default_map`` (``None``: :data:`DEFAULT_MAP`), with the types
    in ``skip`` and entries whose value is ``None`` left out (:data:`BRIDGE`)."""
    for name, value in (("module_map", module_map), ("default_map", default_map)):
        if value is not None and not isinstance(value, Mapping):
            hint = (
                " To give an example input, pass it by name: example_input=..."
                if isinstance(value, (torch.Tensor, np.ndarray, tuple, list))
                else ""
            )
            raise ParameterError(
                f"{name} must be a dict {{module type: converter}}, got a {type(value).__name__}.{hint}"
            )
    for name, value in (("module_map", module_map), ("default_map", default_map)):
        for key in value or {}:
            if isinstance(key, str):
                raise ParameterError(
                    f"{name}: key {key!r} is a string; keys are module types "
                    f"(torch.nn.{key.rsplit('.', 1)[-1]}), functions or tensor methods themselves"
                )
    merged: dict[Any, Any] = dict(DEFAULT_MAP if default_map is None else default_map)
    merged.update(module_map or {})
    merged = {key: BRIDGE if value is None else value for key, value in merged.items()}
    if skip is None:
        skip = ()
    elif isinstance(skip, type):
        skip = (skip,)
    elif isinstance(skip, (str, bytes)) or not isinstance(skip, Iterable):
        raise ParameterError(f"skip=... takes a tuple of module types, got {skip!r}")
    for entry in skip:
        if not (isinstance(entry, type) or callable(entry)):
            raise ParameterError(f"skip=... takes module types, got {entry!r}")
        merged[entry] = BRIDGE
    return merged


def require_module(module: Any, caller: str) -> None:
    """Raise :class:`ParameterError` unless ``module`` is a ``torch.nn.Module``; a path
    is told to be loaded first."""
    if isinstance(module, nn.Module):
        return
    hint = (
        "; build the model and load its weights first (model.load_state_dict(torch.load(path)))"
        if isinstance(module, (str, os.PathLike))
        else ""
    )
    shown = f"{module!r:.80}"
    raise ParameterError(f"{caller} expects a torch.nn.Module, got {type(module).__name__} {shown}{hint}")


def export(
    module: nn.Module,
    the_map: ModuleMap,
    *,
    example_input: Any = None,
    dt: float | None = None,
    stateful: Callable[[nn.Module], bool] | None = None,
    concrete_args: Mapping[str, Any] | None = None,
) -> nir.NIRGraph:
    """:func:`torch_to_nir` with a map already merged, for the simulator adapters.

    ``stateful(module)`` says whether a leaf returns a tuple whose first item is its
    output and whose other items are state (snntorch's ``(spk, mem)``); by default,
    modules whose ``forward`` has a ``state`` parameter and modules built by
    :func:`nirbridge.nir_to_torch` do. ``concrete_args`` fixes ``forward`` arguments.
    """
    require_module(module, "export")
    if dt is not None:
        dt = check_dt(dt, "torch_to_nir(dt=...)")
    exporter = _Exporter(dict(the_map), stateful or _is_stateful, dict(concrete_args or {}))
    return exporter.export(module, example_input, dt)


_SOURCES: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("sources", default=None)


@contextlib.contextmanager
def node_sources() -> Iterator[dict[str, str]]:
    """Within the block, exports fill the dict yielded with NIR node name -> the
    qualified name (``model.get_submodule`` path, ``""`` for the model itself) of the
    module it was converted from; a module called twice gives two nodes (``"lif"``,
    ``"lif_2"``), in call order. A module exported as a subgraph (snntorch's ``RLeaky``)
    is one node. What :func:`nirbridge.verify` uses to find a native model's layers."""
    found: dict[str, str] = {}
    token = _SOURCES.set(found)
    try:
        yield found
    finally:
        _SOURCES.reset(token)


# ----------------------------------------------------------------------------- lookups


def _method(target: str) -> Any:
    return getattr(torch.Tensor, target, None)


def _call_handler(
    handler: Any, obj: Any, name: str, the_map: ModuleMap, dt: float | None, *args: Any, **kwargs: Any
) -> nir.NIRNode:
    keywords = accepted_keywords(handler)
    if "dt" in keywords and dt is not None:
        kwargs["dt"] = dt
    if "module_map" in keywords:
        kwargs["module_map"] = the_map
    kind = type(obj).__name__ if isinstance(obj, nn.Module) else _callable_name(obj)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            node = handler(obj, **kwargs) if isinstance(obj, nn.Module) else handler(*args, **kwargs)
    except Exception as error:
        raise NodeConversionError(name, kind, error) from error
    for warning in caught:  # name the layer, and point at the user's code
        warnings.warn_explicit(f"{name!r} ({kind}): {warning.message}", warning.category, *_user_location())
    if not isinstance(node, nir.NIRNode):
        raise NodeConversionError(
            name, kind, TypeError(f"the converter returned {type(node).__name__}, not a nir.NIRNode")
        )
    if isinstance(node, (nir.Input, nir.Output)):
        raise NodeConversionError(name, kind, TypeError("a converter may not return an Input or Output node"))
    return node


def _tested_against_none(module: nn.Module, names: list[str]) -> list[str]:
    """The ``names`` that ``forward``'s source compares with ``is None`` or ``is not None``
    (``if mem is None: mem = self.lif.init_leaky()``); none where the source is unknown."""
    if not names:
        return []
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(type(module).forward)))
    except (OSError, TypeError, SyntaxError):
        return []
    tested = {
        node.left.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Name)
        and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.Is, ast.IsNot))
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value is None
    }
    return [name for name in names if name in tested]


def _zero(root: nn.Module, target: Any) -> bool:
    """Whether the tensor a traced ``get_attr`` reads is all zeros (a fresh snntorch state)."""
    try:
        value = operator.attrgetter(str(target))(root)
    except AttributeError:
        return False
    return isinstance(value, torch.Tensor) and not bool(value.detach().any())


def _is_stateful(module: nn.Module) -> bool:
    return _nir_meta(module) is not None or forward_takes_state(type(module))


def _graph_module_offenders(
    module: fx.GraphModule, the_map: ModuleMap, prefix: str, found_neurons: dict[str, type] | None = None
) -> dict[str, list[str]]:
    """The submodules of an imported graph that the map lacks, by kind; the neurons
    among them go into ``found_neurons`` as well (kind: type)."""
    meta = _nir_meta(module)
    offenders: dict[str, list[str]] = {}
    if meta is None:
        return offenders
    for name, path in meta["module_paths"].items():
        sub = module.get_submodule(path)
        handler = _lookup_module(the_map, sub)
        where = f"{prefix}{name}"
        if handler is None or isinstance(handler, _Marker):
            kind = f"module {_key_name(type(sub))}"
            offenders.setdefault(kind, []).append(repr(where))
            if found_neurons is not None and _is_neuron(sub):
                found_neurons.setdefault(kind, type(sub))
        elif _nir_meta(sub) is not None:
            for kind, places in _graph_module_offenders(sub, the_map, f"{where}.", found_neurons).items():
                offenders.setdefault(kind, []).extend(places)
    return offenders


# ----------------------------------------------------------------------------- tracing


@functools.lru_cache(maxsize=512)
def _instructions(code: Any) -> tuple[list[int], list[dis.Instruction]]:
    instructions = list(dis.get_instructions(code))
    return [i.offset for i in instructions], instructions


class _Proxy(fx.Proxy):
    """fx's Proxy, but ``a, b = proxy`` disassembles each calling function once instead
    of at every unpacking (fx's cost grows with the size of ``forward`` per call)."""

    def __iter__(self) -> Any:
        frame = sys._getframe(1)
        offsets, instructions = _instructions(frame.f_code)
        if sys.version_info >= (3, 11):
            index = bisect.bisect_left(offsets, frame.f_lasti)
        else:
            index = frame.f_lasti // 2
        if index < len(instructions) and instructions[index].opname == "UNPACK_SEQUENCE":
            return (self[i] for i in range(instructions[index].argval))
        return self.tracer.iter(self)


def _is_torch_layer(module: nn.Module) -> bool:
    """One of torch's own layers (not a container): not traced into, and reported when
    the map lacks it."""
    return type(module).__module__.startswith("torch.nn") and not isinstance(
        module, (nn.Sequential, nn.ModuleList, nn.ModuleDict)
    )


def _fx_nodes(value: Any) -> list[fx.Node]:
    """The fx nodes in a value made of proxies, tuples, lists and dicts."""
    found: list[fx.Node] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, fx.Proxy):
            found.append(v.node)
        elif isinstance(v, fx.Node):
            found.append(v)
        elif isinstance(v, (tuple, list)):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
    return found


class _Tracer(fx.Tracer):
    """An fx tracer whose leaves are the mapped module types, torch's built-in layers and
    neurons without submodules. Other modules are traced through; one whose ``forward``
    cannot be traced becomes a leaf too (reported as unsupported, with fx's reason), so
    that every problem is found in one pass. Records where each call happens, and every
    submodule call's arguments and result (``calls``, for :func:`_time_loop`)."""

    def __init__(self, the_map: ModuleMap, stateful: Callable[[nn.Module], bool] | None = None) -> None:
        super().__init__()
        self.the_map = the_map
        self.stateful = stateful
        self.untraceable: dict[str, str] = {}  # module path -> why fx failed
        self.calls: list[_Call] = []  # every submodule call, for _time_loop
        self._order = 0

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if _lookup_module(self.the_map, m) is not None or module_qualified_name in self.untraceable:
            return True
        # a neuron the map lacks is reported as itself, not as the arithmetic inside it
        return _is_torch_layer(m) or (_is_neuron(m, self.stateful) and next(m.children(), None) is None)

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        path = self.path_of_module(m)
        order, self._order = self._order, self._order + 1
        if self.is_leaf_module(m, path):
            return self._record(path, args, kwargs, super().call_module(m, forward, args, kwargs), order)
        last = next(iter(reversed(self.graph.nodes)))
        depth = len(self.module_stack)
        recorded = len(self.calls)
        try:
            return self._record(path, args, kwargs, super().call_module(m, forward, args, kwargs), order)
        except Exception as error:
            if not path:
                raise
            while (node := next(iter(reversed(self.graph.nodes)))) is not last:
                self.graph.erase_node(node)  # undo the partial trace of this forward
            while len(self.module_stack) > depth:  # fx leaves failed calls on its stack
                self.module_stack.popitem()
            del self.calls[recorded:]  # and the calls made inside it
            reason = str(error).strip()  # fx's whole message: its hints are on later lines
            self.untraceable[path] = f"{type(error).__name__}: {reason}" if reason else type(error).__name__
            return self._record(path, args, kwargs, super().call_module(m, forward, args, kwargs), order)

    def _record(self, path: str, args: Any, kwargs: Any, result: Any, order: int) -> Any:
        if path:
            first, rest = (args[0], args[1:]) if args else (None, ())
            self.calls.append(
                _Call(path, order, _fx_nodes(first), _fx_nodes((rest, kwargs)), _fx_nodes(result), result)
            )
        return result

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _Proxy(node, self)

    def create_node(
        self, kind: str, target: Any, args: Any, kwargs: Any, name: str | None = None, type_expr: Any = None
    ) -> fx.Node:
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        node.meta["nirbridge_scope"] = self.scope.module_path
        if kind in ("call_function", "call_method"):
            filename, line = _user_location()
            node.meta["nirbridge_source"] = f"{os.path.basename(filename)}:{line}" if filename else ""
        return node


_LIBRARY_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (torch, sys.modules[__name__]) if m.__file__
)


def _user_location() -> tuple[str, int]:
    """File and line of the innermost caller outside torch, nirbridge and generated
    code; ``("", 0)`` when there is none."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_LIBRARY_DIRS) and not filename.startswith("<"):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "", 0


# ----------------------------------------------------------------------------- export


@dataclasses.dataclass
class _Sources:
    """A traced tensor: the sum of the outputs of these NIR nodes."""

    names: tuple[str, ...]


@dataclasses.dataclass
class _Stateful:
    """The ``(out, state)`` result of a stateful leaf; ``names`` are the sources of
    ``out`` (the leaf itself, or what a skipped leaf passes through)."""

    names: tuple[str, ...]
    where: str


@dataclasses.dataclass
class _StatePart:
    """The state half of a stateful leaf's result: only the returned state may use it."""

    where: str


class _Unsupported:
    """The result of something already reported as unsupported."""


_GUARD = object()  # an argument traced at its default, and fx's checks of it


@dataclasses.dataclass
class _Pending:
    name: str
    obj: Any  # module or function
    handler: Any
    sources: tuple[str, ...]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


class _Exporter:
    def __init__(
        self, the_map: dict[Any, Any], stateful: Callable[[nn.Module], bool], concrete: dict[str, Any]
    ) -> None:
        self.the_map = the_map
        self.is_stateful = stateful
        self.concrete = concrete
        self.untraceable: dict[str, str] = {}
        self.lone: str | None = None  # the name a lone mapped module has in its wrapper
        self.state_arguments: list[str] = []  # forward's arguments traced at a default of None

    # -- entry ---------------------------------------------------------------------
    def export(self, module: nn.Module, example_input: Any, dt: float | None) -> nir.NIRGraph:
        handler = _lookup_module(self.the_map, module)
        if handler is not None and not isinstance(handler, _Marker) and _nir_meta(module) is not None:
            dt = self._graph_dt({"": module}, dt)
            graph = _call_handler(handler, module, type(module).__name__, self.the_map, dt)
            if not isinstance(graph, nir.NIRGraph):
                return self._single(module, example_input, dt)
            return self._finish(graph, example_input, dt)
        if handler is not None:
            return self._single(module, example_input, dt)
        if _is_torch_layer(module):
            raise _unsupported({f"module {_key_name(type(module))}": ["the model itself"]}, self.the_map)
        return self._traced(module, example_input, dt)

    def _single(self, module: nn.Module, example_input: Any, dt: float | None) -> nir.NIRGraph:
        """A lone mapped module: Input → module → Output."""
        name = type(module).__name__.lower()
        root = nn.Module()
        root.add_module(name, module)
        self.lone = name
        g = fx.Graph()
        x = g.placeholder("input")
        result = g.call_module(name, (x,))
        result.meta["nirbridge_scope"] = name
        if self.is_stateful(module):
            result = g.call_function(operator.getitem, (result, 0))
        g.output(result)
        return self._convert(root, g, ["input"], False, example_input, dt)

    def _traced(self, module: nn.Module, example_input: Any, dt: float | None) -> nir.NIRGraph:
        try:
            signature = inspect.signature(module.forward)
        except (TypeError, ValueError) as error:
            raise TraceError(
                f"cannot read the signature of {type(module).__name__}.forward: {error}"
            ) from None
        unknown = sorted(set(self.concrete) - set(signature.parameters))
        if unknown:
            raise ParameterError(
                f"concrete_args names {unknown}, which {type(module).__name__}.forward does not take "
                f"(its arguments: {list(signature.parameters)})"
            )
        input_names, concrete = [], {}
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TraceError(
                    f"{type(module).__name__}.forward takes *{param.name}; torch_to_nir needs named "
                    "arguments to name the Input nodes. Wrap the model in a module whose forward "
                    "names each input."
                )
            if param.name in self.concrete:
                concrete[param.name] = self.concrete[param.name]
            elif param.name == "state":
                concrete["state"] = None  # traced at state=None, with or without a default
            elif param.default is param.empty:
                input_names.append(param.name)
            else:
                concrete[param.name] = param.default
                if param.default is None:
                    self.state_arguments.append(param.name)
        if not input_names:
            raise TraceError(f"{type(module).__name__}.forward takes no input argument")
        # only arguments that forward tests `is None` stand for "no state given"
        self.state_arguments = _tested_against_none(module, self.state_arguments)
        tracer = _Tracer(self.the_map, self.is_stateful)
        try:
            g = tracer.trace(module, concrete_args=concrete or None)
        except NirBridgeError:
            raise
        except Exception as error:
            name = type(module).__name__
            reason = str(error).strip()
            looping = any(sign in reason for sign in _LOOP_SIGNS)
            hint = (
                f"If {name}.forward loops over time steps (`for t in range(x.shape[0])`, "
                f"`for x_t in x`), that loop is the cause: {_ONE_STEP}"
                if looping
                else "It probably branches on tensor values or calls code fx cannot follow. Move that "
                "code into a submodule and map its type to a NIR node with module_map={Type: fn}."
            )
            raise TraceError(
                f"torch.fx could not trace {name}.forward: {type(error).__name__}: {reason}\n{hint}"
            ) from error
        loop = _time_loop(module, g, tracer.calls, input_names, self.the_map, self.is_stateful)
        if loop is not None:
            raise TraceError(loop)
        self.untraceable = tracer.untraceable
        return self._convert(module, g, input_names, "state" in concrete, example_input, dt)

    # -- fx graph → NIR nodes and edges --------------------------------------------
    def _convert(
        self,
        root: nn.Module,
        g: fx.Graph,
        input_names: list[str],
        returns_state: bool,
        example_input: Any,
        dt: float | None,
    ) -> nir.NIRGraph:
        self.root = root
        offenders: dict[str, list[str]] = {}
        self.found_neurons: dict[str, type] = {}
        values: dict[fx.Node, Any] = {}
        pending: list[_Pending] = []
        calls: dict[str, int] = {}
        taken = {name for name, _ in root.named_modules()}
        input_names = self._input_names(input_names, taken)
        placeholders = iter(input_names)
        result_value: Any = None

        def report(kind: str, where: str) -> _Unsupported:
            places = offenders.setdefault(kind, [])
            if where not in places:
                places.append(where)
            return _Unsupported()

        def tensor_args(node: fx.Node) -> list[Any]:
            found: list[Any] = []
            fx.node.map_arg((node.args, node.kwargs), lambda n: found.append(values[n]) or n)
            return found

        for node in g.nodes:
            if node.op == "placeholder":
                name = next(placeholders, None)
                values[node] = _Sources((name,)) if name is not None else _GUARD
            elif node.op == "get_attr":
                values[node] = None  # a parameter or constant used directly
            elif node.op == "call_module":
                values[node] = self._call_module(root, node, tensor_args(node), pending, calls, taken, report)
            elif node.op in ("call_function", "call_method"):
                if any(values.get(a) is _GUARD for a in node.all_input_nodes):
                    values[node] = _GUARD  # fx's checks that a traced-at-default argument is unchanged
                    continue
                values[node] = self._call_function(node, values, tensor_args(node), pending, taken, report)
            elif node.op == "output":
                result_value = node.args[0]
        if offenders:
            raise _unsupported(offenders, self.the_map, self.found_neurons)
        outputs = self._outputs(result_value, values, returns_state, taken)

        leaves = {p.name: p.obj for p in pending if isinstance(p.obj, nn.Module)}
        dt = self._graph_dt(leaves, dt)
        nodes: dict[str, nir.NIRNode] = {name: nir.Input(None) for name in input_names}
        edges: list[tuple[str, str]] = []
        for p in pending:
            if isinstance(p.obj, nn.Module):
                nodes[p.name] = _call_handler(p.handler, p.obj, p.name, self.the_map, dt)
            else:
                nodes[p.name] = _call_handler(p.handler, p.obj, p.name, self.the_map, dt, *p.args, **p.kwargs)
            edges.extend((source, p.name) for source in p.sources)
        for name, sources in outputs.items():
            nodes[name] = nir.Output(None)
            edges.extend((source, name) for source in sources)
        nodes, edges = _prune(nodes, edges)
        sources = _SOURCES.get()
        if sources is not None:
            paths = {id(m): path for path, m in root.named_modules()}
            for p in pending:
                path = paths.get(id(p.obj)) if isinstance(p.obj, nn.Module) else None
                if path is not None and p.name in nodes:
                    sources[p.name] = "" if path == self.lone else path
        graph = nir.NIRGraph(nodes=nodes, edges=edges, metadata={}, type_check=False)
        return self._finish(graph, example_input, dt)

    @staticmethod
    def _input_names(arguments: list[str], taken: set[str]) -> list[str]:
        """Input nodes are named after forward's arguments; module names win a clash,
        since they must match the state dict."""
        names = []
        for argument in arguments:
            name = _unique(argument, taken)
            if name != argument:
                warnings.warn(
                    f"input {argument!r} has the name of a module; its Input node is called {name!r}",
                    RepairWarning,
                    stacklevel=5,
                )
            taken.add(name)
            names.append(name)
        return names

    def _call_module(self, root, node, args, pending, calls, taken, report) -> Any:
        module = root.get_submodule(node.target)
        handler = _lookup_module(self.the_map, module)
        if handler is None or handler is FAN_IN:
            kind = f"module {_key_name(type(module))}"
            if _is_neuron(module, self.is_stateful):
                self.found_neurons.setdefault(kind, type(module))
            why = self.untraceable.get(node.target)
            if why:  # fx's message whole; its later lines indented under this entry
                why = why.replace("\n", "\n      ")
            return report(kind, repr(node.target) + (f" (fx cannot trace it: {why})" if why else ""))
        if _nir_meta(module) is not None:
            nested = _graph_module_offenders(module, self.the_map, f"{node.target}.", self.found_neurons)
            for kind, places in nested.items():
                for place in places:
                    report(kind, place)
        if any(isinstance(a, _Unsupported) for a in args):
            return _Unsupported()
        tensors = [a for a in args if a is not None and a is not _GUARD]
        where = repr(node.target)
        if handler is BRIDGE:
            if not tensors:
                return None
            passed = tensors[0]
            if self.is_stateful(module) and isinstance(passed, _Sources):
                return _Stateful(passed.names, f"module {where}")
            return passed
        self._check_tensors(tensors, f"module {where}")
        meta = _nir_meta(module)
        if meta is not None and (len(meta["inputs"]) != 1 or len(meta["outputs"]) != 1):
            raise GraphStructureError(
                f"module {where} was built by nir_to_torch from a graph with "
                f"{len(meta['inputs'])} Input and {len(meta['outputs'])} Output nodes; nested in "
                "another graph, an edge into a subgraph feeds its single Input and an edge out "
                "reads its single Output. Export it on its own, or split it."
            )
        if len(tensors) != 1:
            raise GraphStructureError(
                f"module {where} ({type(module).__name__}) receives {len(tensors)} tensors; a NIR "
                "node has one input (the sum of its incoming edges). Pass it one tensor, or "
                "add the tensors first (a + b)."
            )
        count = calls.get(node.target, 0) + 1
        calls[node.target] = count
        name = node.target
        if count > 1:
            name = _unique(f"{node.target}_{count}", taken)
            warnings.warn(
                f"module {where} is called {count} times; the graph holds a separate copy "
                f"{name!r} for this call, so the copies no longer share parameters or state",
                LossyConversionWarning,
                stacklevel=5,
            )
        taken.add(name)
        pending.append(_Pending(name, module, handler, tensors[0].names))
        if self.is_stateful(module):
            fixed = [
                a
                for a in (*node.args[1:], *node.kwargs.values())
                if isinstance(a, fx.Node) and a.op == "get_attr"
            ]
            if fixed and not (self.state_arguments and all(_zero(root, a.target) for a in fixed)):
                # with a state argument traced at None that forward tests (`if mem is None: spk,
                # mem = self.rlif.init_rleaky()`), zeros are the state the model starts from when
                # none is passed: the graph's own start
                warnings.warn(
                    f"module {where} is given a fixed state (a tensor made while tracing, as "
                    "`mem = self.lif.init_leaky()` inside forward makes), so the model restarts "
                    "from it at every call; the graph keeps the neuron's state from step to step",
                    LossyConversionWarning,
                    stacklevel=5,
                )
            return _Stateful((name,), f"module {where}")
        return _Sources((name,))

    def _call_function(self, node, values, args, pending, taken, report) -> Any:
        scope = node.meta.get("nirbridge_scope", "")
        source = node.meta.get("nirbridge_source", "")
        owner = type(self.root.get_submodule(scope)).__name__
        details = ", ".join(filter(None, [owner if scope else "", source]))
        where = f"in {scope!r}" if scope else f"in {owner}.forward"
        where += f" ({details})" if details else ""
        target = node.target if node.op == "call_function" else _method(node.target)
        if node.target is operator.getitem and node.args:
            first = values.get(node.args[0]) if isinstance(node.args[0], fx.Node) else None
            if isinstance(first, _Stateful):
                index = node.args[1]
                return _Sources(first.names) if index == 0 else _StatePart(first.where)
            if isinstance(first, (_Unsupported, _StatePart)):
                return first
        self._check_tensors(args, f"{_callable_name(target or node.target)} {where}")
        handler = _lookup_callable(self.the_map, target)
        if node.op == "call_method":
            kind = f"method {_callable_name(node.target)}"
        else:
            kind = f"function {_callable_name(target)}"
        if handler is None:
            return report(kind, where)
        if any(isinstance(a, _Unsupported) for a in args):
            return _Unsupported()
        self._check_tensors(args, f"{kind} {where}")
        tensors = [a for a in args if a is not None]
        if handler is FAN_IN:
            operands = [a for a in node.args]
            zero = [a for a in operands if type(a) in (int, float) and a == 0]
            if not node.kwargs and len(operands) == 2 and zero and len(tensors) == 1:
                return tensors[0]  # 0 + a, as Python's sum() starts
            if (
                node.kwargs
                or len(operands) != 2
                or len(tensors) != 2
                or any(not isinstance(a, fx.Node) for a in operands)
            ):
                return report(f"{kind} with a constant or a scaling argument", where)
            a, b = tensors
            twice = set(a.names) & set(b.names)
            if twice:
                raise GraphStructureError(
                    f"{kind} {where} adds the output of {sorted(twice)} to itself; NIR sums distinct "
                    "edges, so this cannot be expressed. Scale the value instead (a Scale node)."
                )
            return _Sources(a.names + b.names)
        if handler is BRIDGE:
            return tensors[0] if tensors else None
        if len(tensors) != 1:
            return report(f"{kind} on {len(tensors)} tensors", where)
        base = f"{scope}.{node.name}" if scope else node.name
        name = _unique(base, taken)
        taken.add(name)
        call_args = fx.node.map_arg(node.args, lambda n: TensorArg(n.name))
        call_kwargs = fx.node.map_arg(node.kwargs, lambda n: TensorArg(n.name))
        pending.append(_Pending(name, target, handler, tensors[0].names, tuple(call_args), dict(call_kwargs)))
        return _Sources((name,))

    @staticmethod
    def _check_tensors(args: list[Any], where: str) -> None:
        for a in args:
            if isinstance(a, _StatePart):
                raise GraphStructureError(
                    f"{where} uses the state returned by {a.where}; NIR nodes pass only their "
                    "output along an edge. Feed the output instead (out, state = m(x, state))."
                )
            if isinstance(a, _Stateful):
                raise GraphStructureError(
                    f"{where} receives the (output, state) pair of {a.where}; take its output "
                    "first: out, state = m(x, state)."
                )

    def _outputs(
        self, value: Any, values: dict[fx.Node, Any], returns_state: bool, taken: set[str]
    ) -> dict[str, tuple[str, ...]]:
        if isinstance(value, fx.Node) and isinstance(values.get(value), _Stateful):
            # the model returns a stateful module's (out, state), as nn.Sequential(..., LIF) does
            return {_unique("output", taken): values[value].names}
        alone = isinstance(value, fx.Node) and isinstance(values.get(value), _Sources)
        if returns_state and not alone:  # a forward taking a state returns (output, state) or its output
            if not (isinstance(value, (tuple, list)) and len(value) == 2):
                raise TraceError(
                    "forward takes a state argument, so it must return (output, state) or its "
                    f"output alone; it returned {type(value).__name__}"
                )
            value = value[0]

        def sources(v: Any, label: str) -> tuple[str, ...]:
            found = values.get(v) if isinstance(v, fx.Node) else None
            self._check_tensors([found], f"output {label!r}")
            if not isinstance(found, _Sources):
                raise TraceError(
                    f"output {label!r} is not a tensor computed from the inputs "
                    f"(got {type(v).__name__}); return tensors, a tuple or a dict of them"
                )
            return found.names

        named: dict[str, tuple[str, ...]] = {}
        if isinstance(value, dict):
            for key, v in value.items():
                label = str(key)
                name = _unique(label, taken)
                if name != label:
                    warnings.warn(
                        f"output {label!r} has the name of a module or input; its Output node "
                        f"is called {name!r}",
                        RepairWarning,
                        stacklevel=5,
                    )
                taken.add(name)
                named[name] = sources(v, label)
        elif isinstance(value, (tuple, list)):
            # states returned beside the outputs (snntorch's `return spk2, mem1, mem2`) are
            # the model's state, which the graph keeps itself
            kept = [
                v
                for v in value
                if not isinstance(values.get(v) if isinstance(v, fx.Node) else None, _StatePart)
            ]
            single = len(kept) == 1 and len(kept) < len(value)  # (spk, mem): one output
            if single:
                name = _unique("output", taken)
                taken.add(name)
                named[name] = sources(kept[0], name)
            for i, v in enumerate(() if single else kept):
                name = _unique(f"output_{i}", taken)
                taken.add(name)
                named[name] = sources(v, name)
        else:
            name = _unique("output", taken)
            taken.add(name)
            named[name] = sources(value, "output")
        if not named:
            raise TraceError("forward returns no tensor; return the model's output")
        return named

    # -- dt ------------------------------------------------------------------------
    @staticmethod
    def _graph_dt(leaves: Mapping[str, Any], dt: float | None) -> float:
        found: dict[str, float] = {}
        for path, leaf in leaves.items():
            if not isinstance(leaf, nn.Module):
                continue
            for sub_path, sub in leaf.named_modules(prefix=path):
                meta = _nir_meta(sub)
                value = meta.get("dt") if meta is not None else getattr(sub, "dt", None)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    found[sub_path or type(sub).__name__] = float(value)
        distinct = sorted(set(found.values()))
        if dt is None:
            if len(distinct) > 1:
                listed = ", ".join(f"{p!r}: {v:g}" for p, v in found.items())
                raise ParameterError(
                    f"the model's modules step at different dt ({listed}); a NIR graph has one "
                    "dt. Build them with the same dt, or pass torch_to_nir(dt=...)."
                )
            return distinct[0] if distinct else DEFAULT_DT
        differing = [p for p, v in found.items() if not math.isclose(v, dt, rel_tol=1e-12)]
        if differing:
            warnings.warn(
                f"modules {differing} step at dt={found[differing[0]]:g}, but the graph records "
                f"dt={dt:g}; run at that dt, the graph will not behave like the model",
                LossyConversionWarning,
                stacklevel=4,
            )
        return dt

    # -- shapes --------------------------------------------------------------------
    def _finish(self, graph: nir.NIRGraph, example_input: Any, dt: float) -> nir.NIRGraph:
        the_plan = graph_utils.plan(graph)
        given = _example_shapes(example_input, the_plan.inputs)
        input_shapes = {}
        for name in the_plan.inputs:
            shape = given[name] if given else _declared(graph.nodes[name])
            if shape is None:
                shape = _shape_from_consumers(graph, name, the_plan)
            if shape is None:
                consumers = [
                    t for t, sources in the_plan.incoming.items() if any(s == name for s, _ in sources)
                ]
                kinds = ", ".join(f"{type(graph.nodes[c]).__name__} {c!r}" for c in consumers) or "nothing"
                raise MissingShapeError(
                    f"the shape of input {name!r} cannot be found from the layers it feeds ({kinds}); "
                    "pass example_input=torch.zeros(1, *shape) (batch axis first; a tuple for "
                    "several inputs) so that every node gets its shape"
                )
            input_shapes[name] = shape
        with warnings.catch_warnings():
            warnings.simplefilter("error", RepairWarning)
            try:
                for name in the_plan.outputs:  # declared Output shapes are recomputed
                    metadata = graph.nodes[name].metadata
                    graph.nodes[name] = nir.Output(None)
                    graph.nodes[name].metadata = metadata
                shapes = graph_utils.infer_shapes(graph, the_plan, input_shapes)
            except RepairWarning as warning:
                raise ShapeMismatchError(f"the traced graph does not fit together: {warning}") from None
        _set_types(graph, shapes, "")
        graph.metadata = {**(graph.metadata or {}), "dt": dt}
        return graph


def _example_shapes(example_input: Any, inputs: list[str]) -> dict[str, tuple[int, ...]]:
    if example_input is None:
        return {}
    arrays = (torch.Tensor, np.ndarray)
    if isinstance(example_input, arrays):
        tensors: tuple[Any, ...] = (example_input,)
    elif isinstance(example_input, (tuple, list)):
        tensors = tuple(example_input)
    else:
        tensors = ()
    if len(tensors) != len(inputs) or not all(isinstance(t, arrays) for t in tensors):
        raise NirBridgeError(
            f"example_input must be a tensor (one input) or a tuple with one tensor per input "
            f"{inputs}, batch axis first; got {type(example_input).__name__}"
            + (f" with {len(tensors)} value(s)" if tensors else "")
        )
    shapes = {}
    for name, tensor in zip(inputs, tensors):
        if tensor.ndim < 1:
            raise NirBridgeError(f"example_input for {name!r} is a scalar; give it a batch axis first")
        shapes[name] = tuple(int(s) for s in tensor.shape[1:])
    return shapes


def _declared(node: nir.Input) -> tuple[int, ...] | None:
    value = node.input_type.get("input") if isinstance(node.input_type, dict) else None
    if value is None:
        return None
    array = np.asarray(value)
    return tuple(int(v) for v in array.reshape(-1)) if array.dtype != object else None


def _shape_from_consumers(
    graph: nir.NIRGraph, name: str, the_plan: graph_utils.Plan
) -> tuple[int, ...] | None:
    """An Input's shape from the weights or per-neuron parameters of what it feeds,
    following elementwise nodes with scalar parameters."""
    successors: dict[str, list[str]] = {}
    for target, sources in the_plan.incoming.items():
        for source, delayed in sources:
            if not delayed:
                successors.setdefault(source, []).append(target)
    seen, frontier = {name}, [name]
    while frontier:
        current = frontier.pop()
        for consumer in successors.get(current, []):
            if consumer in seen:
                continue
            seen.add(consumer)
            node = graph.nodes[consumer]
            if isinstance(node, (nir.Affine, nir.Linear)) and np.ndim(node.weight) == 2:
                return (int(np.shape(node.weight)[1]),)
            if isinstance(node, nir.NIRGraph):
                sub_inputs = [n for n in node.nodes.values() if isinstance(n, nir.Input)]
                if len(sub_inputs) == 1 and _declared(sub_inputs[0]) is not None:
                    return _declared(sub_inputs[0])
                continue
            if isinstance(node, graph_utils._ELEMENTWISE):
                params = graph_utils.node_shape(node)
                if params and all(d > 1 for d in params):
                    return params
                frontier.append(consumer)  # parameters that broadcast do not fix the shape
    return None


def _set_types(graph: nir.NIRGraph, shapes: graph_utils.Shapes, path: str) -> None:
    """Write every node's input and output types; broadcast scalar neuron parameters."""
    for name, node in list(graph.nodes.items()):
        label = f"{path}.{name}" if path else name
        if name in shapes.fixes and not isinstance(node, nir.NIRGraph):
            node = graph.nodes[name] = shapes.fixes[name]
        given = shapes.inputs.get(name)
        out = shapes.outputs.get(name)
        if isinstance(node, nir.Input):
            given = out
        if isinstance(node, nir.Output):
            out = given
        if given is None or out is None:
            raise MissingShapeError(
                f"node {label!r} ({type(node).__name__}): its shape cannot be inferred; pass "
                "example_input so that every node gets one"
            )
        for source, _ in shapes.plan.incoming.get(name, []) if shapes.plan else []:
            source_shape = shapes.outputs.get(source)
            if source_shape is not None and tuple(source_shape) != tuple(given):
                raise ShapeMismatchError(
                    f"edge {source!r} -> {name!r}{f' in {path!r}' if path else ''} carries shape "
                    f"{tuple(source_shape)} into a sum of shape {tuple(given)}; NIR edges into one "
                    "node must carry the same shape, so broadcasting adds cannot be exported"
                )
        if isinstance(node, nir.NIRGraph):
            _set_types(node, shapes.nested[name], label)
            node._update_input_output_types()
            continue
        if isinstance(node, graph_utils._ELEMENTWISE):
            node = graph.nodes[name] = _broadcast_params(node, tuple(out))
        if isinstance(node, nir.Conv1d):
            node.input_shape = int(given[1])
        elif isinstance(node, nir.Conv2d):
            node.input_shape = (int(given[1]), int(given[2]))
        node.input_type = {"input": np.array(given, dtype=np.int64)}
        node.output_type = {"output": np.array(out, dtype=np.int64)}


def _broadcast_params(node: Any, shape: tuple[int, ...]) -> Any:
    changes = {}
    for field in dataclasses.fields(node):
        if field.name in ("input_type", "output_type", "metadata") or not field.init:
            continue
        value = getattr(node, field.name)
        if isinstance(value, np.ndarray) and value.dtype.kind in "fiu" and value.shape != shape:
            changes[field.name] = np.broadcast_to(value, shape).copy()
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            changes[field.name] = np.full(shape, value, dtype=np.float64)
    if not changes:
        return node
    replaced = graph_utils._replace(node, **changes)
    replaced.metadata = node.metadata
    return replaced


def _prune(
    nodes: dict[str, nir.NIRNode], edges: list[tuple[str, str]]
) -> tuple[dict[str, nir.NIRNode], list[tuple[str, str]]]:
    """Leave out nodes from which no Output is reached, with a warning."""
    predecessors: dict[str, list[str]] = {}
    for a, b in edges:
        predecessors.setdefault(b, []).append(a)
    alive = {n for n, node in nodes.items() if isinstance(node, (nir.Output, nir.Input))}
    frontier = [n for n, node in nodes.items() if isinstance(node, nir.Output)]
    while frontier:
        for source in predecessors.get(frontier.pop(), []):
            if source not in alive:
                alive.add(source)
                frontier.append(source)
    dead = [n for n in nodes if n not in alive]
    if not dead:
        return nodes, edges
    warnings.warn(
        f"{dead} do not contribute to any output and are left out of the graph",
        LossyConversionWarning,
        stacklevel=5,
    )
    return {n: v for n, v in nodes.items() if n in alive}, [
        (a, b) for a, b in edges if a in alive and b in alive
    ]


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    i = 1
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"

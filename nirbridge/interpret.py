"""NIR graph → stateful ``torch.fx.GraphModule``.

:func:`nir_to_torch` converts each node through a type-keyed map (``DEFAULT_MAP``
below is the support table) and writes one ``fx.Graph`` that evaluates the graph for
one time step, in the order and with the delayed edges :mod:`nirbridge.graph` finds.
The generated ``forward(*inputs, state=None)`` returns ``(out, state)``; ``print(gm.code)``
shows the wiring and how the state is threaded (see :mod:`nirbridge.state`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import io
import keyword
import math
import operator
import os
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import nir
import numpy as np
import torch
import torch.fx as fx

from . import graph as graph_utils
from . import layers, neurons, validate
from .checks import check_output, check_step, stamped, state_type_name, unbatch
from .errors import (
    AssumedDtWarning,
    DtWarning,
    GraphStructureError,
    NirBridgeError,
    NodeConversionError,
    ParameterError,
    RepairWarning,
    UnsupportedNodeError,
)
from .graph_module import (
    _CASTING,
    _DTYPE,
    _SPEC,
    NIRGraphModule,
    _DirectCalls,
    _private_dtype_buffer,
    _Retracer,
    add_delayed,
    delayed_only,
)
from .neurons.modules import DEFAULT_DT, check_dt
from .neurons.simulator import SimulatorNeuron
from .state import DELAYED, NODES

__all__ = ["DEFAULT_MAP", "NodeMap", "nir_to_torch"]

NodeMap = Mapping[type, Callable[..., torch.nn.Module]]

DEFAULT_MAP: dict[type, Callable[..., torch.nn.Module]] = {
    nir.Affine: layers.affine_to_torch,
    nir.Linear: layers.linear_to_torch,
    nir.Scale: layers.scale_to_torch,
    nir.Conv1d: layers.conv1d_to_torch,
    nir.Conv2d: layers.conv2d_to_torch,
    nir.AvgPool2d: layers.avgpool2d_to_torch,
    nir.SumPool2d: layers.sumpool2d_to_torch,
    nir.Flatten: layers.flatten_to_torch,
    nir.Threshold: layers.threshold_to_torch,
    nir.Delay: neurons.Delay.from_nir,
    nir.I: neurons.I.from_nir,
    nir.IF: neurons.IF.from_nir,
    nir.LI: neurons.LI.from_nir,
    nir.LIF: neurons.LIF.from_nir,
    nir.CubaLI: neurons.CubaLI.from_nir,
    nir.CubaLIF: neurons.CubaLIF.from_nir,
}
"""Default converters, keyed by NIR node type. Input, Output and nested NIRGraph nodes
are structural and handled by the interpreter itself (map ``nir.NIRGraph`` to override
how subgraphs are built)."""

_STRUCTURAL = (nir.Input, nir.Output)


def nir_to_torch(
    graph_or_path: Any,
    node_map: NodeMap | None = None,
    default_map: NodeMap | None = None,
    *,
    dt: float | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    trainable: Iterable[str] | bool = (),
    allow_negative_tau: bool = False,
) -> torch.nn.Module:
    """Build a stateful torch module that runs a NIR graph one time step per call.

    Args:
        graph_or_path: a ``nir.NIRGraph``, a path or binary file object of a ``.nir``
            file (read with :func:`nirbridge.read`), or a single NIR node.
        node_map: ``{NIR node type: fn}``; ``fn(node)`` (or ``fn(node, dt=...)`` if it
            takes ``dt``) returns a ``torch.nn.Module``. Entries win over the defaults.
            A module whose ``forward`` has a ``state`` parameter is called as
            ``out, state = m(x, state=s)``; others as ``out = m(x)``.
        default_map: the defaults to merge ``node_map`` into; ``None`` means
            :data:`DEFAULT_MAP`, ``{}`` means no defaults.
        dt: time step in seconds for forward-Euler integration; defaults to
            ``graph.metadata["dt"]``, then to 1e-4.
        device: where the module's parameters live.
        dtype: floating dtype of parameters (default: torch's default dtype).
        trainable: neuron parameters to make ``torch.nn.Parameter``s, by NIR field name
            (``("tau", "v_threshold")``; ``True`` for all). Weights are always
            parameters; neuron parameters are buffers otherwise. Exporting after
            training (:func:`nirbridge.torch_to_nir`) carries the trained values.
        allow_negative_tau: load time constants below 0 as they are (a membrane that
            grows away from its leak; trained files sometimes hold them) instead of
            raising :class:`ParameterError`.

    Every node's parameters are checked before anything is built (see
    :mod:`nirbridge.validate`): NaN or infinite values, time constants of 0 or less,
    integer fields that are not whole numbers of the right sign, kernels larger than
    their input, graphs nested more than :data:`nirbridge.limits.MAX_NESTING` deep, and
    single samples that would not fit in the device's memory raise a
    :class:`NirBridgeError` naming the node and the field. Edges listed twice count once
    (:class:`RepairWarning`).

    Returns:
        A ``torch.fx.GraphModule`` with ``out, state = gm(*inputs, state=None)``, or for a
        single node its converted module. Inputs are positional, in the order the Input
        nodes appear in ``graph.nodes``; ``out`` is a tensor for one Output node and a
        dict keyed by Output name for several.
    """
    graph = graph_or_path
    if isinstance(graph_or_path, (str, os.PathLike, io.IOBase)):
        from .io import load

        loaded = load(graph_or_path, check=False)  # the shape check below warns once
        for category, message in loaded.warnings:
            warnings.warn(f"{loaded.source}: {message}", category, stacklevel=2)
        graph = loaded.node
    if not isinstance(graph, nir.NIRNode):
        raise NirBridgeError(
            f"nir_to_torch expects a nir.NIRGraph, a NIR node or a path to a .nir file, "
            f"got {type(graph).__name__}"
        )
    if not isinstance(allow_negative_tau, (bool, np.bool_)):
        raise ParameterError(f"nir_to_torch(allow_negative_tau={allow_negative_tau!r}): give True or False")
    merged: dict[type, Callable[..., torch.nn.Module]] = dict(
        DEFAULT_MAP if default_map is None else _check_map(default_map, "default_map")
    )
    merged.update(_check_map(node_map, "node_map") if node_map is not None else {})
    target_dtype = _check_dtype(dtype)
    target_device = _check_device(device)
    graph_utils.check_nesting(graph, "nir_to_torch")
    if isinstance(graph, nir.NIRGraph):
        graph_utils.check_edges(graph)
        graph_utils.check_dotted_names(graph)
        duplicates = graph_utils.duplicate_edges(graph)
        if duplicates:
            warnings.warn(graph_utils.describe_duplicates(duplicates), RepairWarning, stacklevel=2)
    assumed = dt is None and _metadata_dt(graph) is None and _uses_dt(graph)  # as _time_step decides
    dt = _time_step(graph, dt)
    graph = validate.check_parameters(
        graph, dt, allow_negative_tau=bool(allow_negative_tau), dtype=target_dtype
    )

    _check_time_constants(graph, dt)
    _check_nested_dt(graph, dt)
    if isinstance(graph, nir.NIRGraph) and nir.NIRGraph not in merged:
        _check_supported(graph, merged)
        the_plan = graph_utils.plan(graph)
        shapes = graph_utils.infer_shapes(graph, the_plan)
        element_size = torch.empty(0, dtype=target_dtype).element_size()
        validate.check_memory(graph, shapes, dt, element_size, target_device)
        with neurons.modules.values_checked():
            module: torch.nn.Module = _build(graph, the_plan, shapes, merged, dt, "")
        module.meta["nirbridge"]["dt"] = dt
        module.meta["nirbridge"]["dt_assumed"] = assumed  # for the hint of a SilentNetworkWarning
        module.meta["nirbridge"]["allow_negative_tau"] = bool(allow_negative_tau)  # for load_state_dict
    else:
        if isinstance(graph, _STRUCTURAL):
            raise NirBridgeError(
                f"a lone {type(graph).__name__} node has no module; pass the graph that holds it"
            )
        _check_supported(nir.NIRGraph(nodes={"node": graph}, edges=[], type_check=False), merged)
        with neurons.modules.values_checked():
            module = _convert("node", graph, merged, dt)
    _make_trainable(module, trainable)
    token = _CASTING.set(True)  # check_parameters checked the values for target_dtype
    try:
        module = module.to(dtype=target_dtype)
        if target_device is not None:
            module = module.to(target_device)
    finally:
        _CASTING.reset(token)
    return module


def _check_map(node_map: Any, argument: str) -> Mapping[type, Callable[..., torch.nn.Module]]:
    """``node_map``/``default_map`` as given, once every key is a NIR node class and
    every value callable; a string key names the class it probably meant."""
    if not isinstance(node_map, Mapping):
        raise ParameterError(
            f"nir_to_torch({argument}=...) takes a dict {{NIR node class: fn}}, got a "
            f"{type(node_map).__name__}; e.g. {argument}={{nir.LIF: my_lif}}"
        )
    for key, fn in node_map.items():
        if isinstance(key, str):
            meant = getattr(nir, key.rsplit(".", 1)[-1], None)
            hint = f"nir.{meant.__name__}" if isinstance(meant, type) else "the nir class itself"
            raise ParameterError(
                f"nir_to_torch({argument}=...): key {key!r} is a string, and keys are NIR node classes; "
                f"use {hint} as the key"
            )
        if not (isinstance(key, type) and issubclass(key, nir.NIRNode)):
            raise ParameterError(
                f"nir_to_torch({argument}=...): key {key!r} is not a NIR node class; use classes such "
                "as nir.LIF or nir.Affine"
            )
        if not callable(fn):
            raise ParameterError(
                f"nir_to_torch({argument}=...): the entry for nir.{key.__name__} is a "
                f"{type(fn).__name__}, not a function or class that returns a torch.nn.Module"
            )
    return node_map


def _check_dtype(dtype: Any) -> torch.dtype:
    if dtype is None:
        return torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype):
        named = getattr(torch, dtype, None) if isinstance(dtype, str) else None
        hint = f"torch.{dtype}" if isinstance(named, torch.dtype) else "torch.float32 or torch.float64"
        raise ParameterError(f"nir_to_torch(dtype={dtype!r}) takes a torch.dtype; pass {hint}")
    if not dtype.is_floating_point:
        raise ParameterError(f"nir_to_torch(dtype=...) must be a floating dtype, got {dtype}")
    return dtype


def _check_device(device: Any) -> torch.device | None:
    """The device as a ``torch.device``, once this torch can place tensors there."""
    if device is None:
        return None
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ParameterError(
            f"nir_to_torch(device={device!r}) is not a device torch knows; pass 'cpu', 'cuda', "
            "'cuda:1' or a torch.device"
        ) from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError(
                f"nir_to_torch(device={device!r}): this torch sees no CUDA GPU (a CPU-only build, or "
                "no driver); pass device='cpu', or install torch with CUDA on a machine with a GPU"
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ParameterError(
                f"nir_to_torch(device={device!r}): there are {torch.cuda.device_count()} CUDA devices, "
                f"numbered from 0"
            )
    elif parsed.type not in ("cpu", "meta"):
        try:
            torch.empty(0, device=parsed)
        except (RuntimeError, AssertionError) as error:
            raise ParameterError(
                f"nir_to_torch(device={device!r}): this torch cannot use it ({error}); pass device='cpu'"
            ) from None
    return parsed


def _make_trainable(module: torch.nn.Module, trainable: Iterable[str] | bool) -> None:
    """Turn the named parameter buffers of every nirbridge neuron into ``nn.Parameter``s;
    time constants train in log space, so they stay above 0
    (:meth:`nirbridge.neurons.modules.Neuron.make_trainable`)."""
    if trainable is False or trainable is None:
        return
    if isinstance(trainable, str):
        trainable = (trainable,)
    if trainable is not True and (
        not isinstance(trainable, Iterable) or not all(isinstance(n, str) for n in trainable)
    ):
        raise ParameterError(
            f"trainable={trainable!r}: give True, False or NIR field names such as ('tau', 'v_threshold')"
        )
    populations = [(p, m) for p, m in module.named_modules() if isinstance(m, neurons.modules.Neuron)]
    available = sorted({name for _, m in populations for name in m.params})
    names = set(available) if trainable is True else set(trainable)
    unknown = sorted(names - set(available))
    if unknown:
        raise ParameterError(
            f"trainable={sorted(names)}: the graph's neurons have no parameter(s) {unknown}; "
            f"they have {available or 'none (no nirbridge neurons in the graph)'}"
        )
    for path, population in populations:
        owner = f"node {path!r} ({type(population).__name__})" if path else None
        population.make_trainable(names, owner=owner)


def _time_step(graph: nir.NIRNode, dt: Any) -> float:
    """``dt`` if given (with a :class:`DtWarning` where the graph records another), else
    the graph's ``metadata["dt"]``, else :data:`DEFAULT_DT` with an :class:`AssumedDtWarning`."""
    recorded = _metadata_dt(graph)
    if dt is not None:
        dt = check_dt(dt, "nir_to_torch(dt=...)")
        stored = _valid_dt(recorded)
        if stored is not None and not math.isclose(stored, dt) and _uses_dt(graph):
            warnings.warn(
                f"nir_to_torch(dt={dt:g}) differs from the dt the graph records "
                f"(metadata['dt'] = {stored:g} s); the graph runs at dt = {dt:g} s",
                DtWarning,
                stacklevel=3,
            )
        return dt
    if recorded is not None:
        return check_dt(recorded, "graph.metadata['dt']")
    if not _uses_dt(graph):
        return DEFAULT_DT  # stateless layers compute the same at every dt
    warnings.warn(
        f"the graph records no time step (metadata['dt']), so it runs at dt = {DEFAULT_DT:g} s, "
        "the NIR paper's and snntorch's; pass nir_to_torch(..., dt=...) to choose (this warning "
        "is a nirbridge.AssumedDtWarning, which can be filtered)",
        AssumedDtWarning,
        stacklevel=3,
    )
    return DEFAULT_DT


def _metadata_dt(graph: nir.NIRNode) -> Any:
    """``graph.metadata["dt"]`` as stored, or None."""
    metadata = getattr(graph, "metadata", None)
    return metadata.get("dt") if isinstance(metadata, Mapping) else None


def _check_nested_dt(graph: nir.NIRNode, dt: float) -> None:
    """Warn (:class:`DtWarning`) of subgraphs that record another dt than the one the
    whole module steps at: a module has one time step, so theirs is not used."""
    other = []
    stack = [(node, name) for name, node in getattr(graph, "nodes", {}).items()]
    while stack:
        node, label = stack.pop()
        if not isinstance(node, nir.NIRGraph):
            continue
        recorded = _metadata_dt(node)
        if recorded is not None and (
            _valid_dt(recorded) is None or not math.isclose(_valid_dt(recorded), dt)
        ):
            other.append(f"{label!r} records dt = {recorded!r}")
        stack.extend((child, f"{label}.{name}") for name, child in node.nodes.items())
    if other:
        warnings.warn(
            f"subgraph {', '.join(sorted(other))}, but the module steps every node at dt = {dt:g} s; "
            "a module has one time step, so give the subgraphs the graph's dt (or pass dt=)",
            DtWarning,
            stacklevel=3,
        )


def _valid_dt(value: Any) -> float | None:
    """A recorded dt as seconds, or None where it is absent or unusable."""
    try:
        return check_dt(value) if value is not None else None
    except ParameterError:
        return None


_TIMELESS = (  # NIR primitives that compute the same at every dt
    nir.Input,
    nir.Output,
    nir.Affine,
    nir.Linear,
    nir.Scale,
    nir.Conv1d,
    nir.Conv2d,
    nir.AvgPool2d,
    nir.SumPool2d,
    nir.Flatten,
    nir.Threshold,
)


def _uses_dt(node: nir.NIRNode) -> bool:
    """Whether a node (or a node of a graph, nested ones included) may depend on dt."""
    if isinstance(node, nir.NIRGraph):
        return any(_uses_dt(child) for child in node.nodes.values())
    return not isinstance(node, _TIMELESS)


_TIME_CONSTANTS = {  # neuron type: (time constant, the factor an exporter scales by dt)
    nir.LI: (("tau", "r"),),
    nir.LIF: (("tau", "r"),),
    nir.CubaLI: (("tau_syn", "w_in"), ("tau_mem", "r")),
    nir.CubaLIF: (("tau_syn", "w_in"), ("tau_mem", "r")),
}


def _check_time_constants(graph: nir.NIRNode, dt: float) -> None:
    """Warn (:class:`DtWarning`) about neurons whose dt/τ is 1 or more, where forward
    Euler overshoots or blows up, saying which dt the file's exporter likely meant.
    (nirbridge's neurons and the snntorch and norse adapters' all step with forward
    Euler.) Parameters that do not fit are left to the conversion to report."""
    problems: dict[str, list[str]] = {}
    likely: set[float] = set()

    def check(node: Any, name: str, tau_field: str, scale_field: str) -> None:
        tau = np.asarray(getattr(node, tau_field, np.inf), dtype=np.float64)
        if tau.size == 0 or not np.all(np.isfinite(tau)) or np.any(tau <= 0):
            return
        ratio = dt / float(tau.min())
        if ratio < 1:
            return
        problems.setdefault(f"{name!r} ({type(node).__name__})", []).append(f"dt/{tau_field} = {ratio:.3g}")
        # exporters that scale by dt store tau/dt (snntorch: r = tau_mem/dt, w_in = tau_syn/dt)
        scale = np.asarray(getattr(node, scale_field, 1.0), dtype=np.float64)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # a subnormal r overflows
            unscaled = tau / np.where(scale == 0, np.nan, scale)
        meant = np.broadcast_to(unscaled, np.broadcast_shapes(tau.shape, scale.shape))
        if meant.size and np.all(np.isfinite(meant)) and np.ptp(meant) <= 1e-6 * abs(meant.flat[0]):
            if float(meant.flat[0]) < float(tau.min()) and not math.isclose(float(meant.flat[0]), dt):
                likely.add(float(np.float32(meant.flat[0])))

    def visit(node: Any, name: str) -> None:
        if isinstance(node, nir.NIRGraph):
            for child, sub in node.nodes.items():
                visit(sub, f"{name}.{child}" if name else child)
            return
        for tau_field, scale_field in next(
            (v for k, v in _TIME_CONSTANTS.items() if isinstance(node, k)), ()
        ):
            try:
                check(node, name, tau_field, scale_field)
            except (TypeError, ValueError):
                continue  # parameters that do not fit: the conversion names them

    visit(graph, "")
    if not problems:
        return
    hint = (
        f"its exporter likely meant dt = {', '.join(f'{v:g}' for v in sorted(likely))} s "
        "(its r and w_in are τ/dt, as snntorch writes them)"
        if len(likely) == 1
        else "choose a dt well below the smallest time constant"
    )
    warnings.warn(
        f"at dt = {dt:g} s, forward Euler overshoots or blows up in neurons whose dt/τ is 1 or "
        f"more: {'; '.join(f'{node}: ' + ', '.join(r) for node, r in problems.items())}. "
        f"Pass nir_to_torch(..., dt=...): {hint}",
        DtWarning,
        stacklevel=3,
    )


def _check_supported(graph: nir.NIRGraph, node_map: Mapping[type, Any]) -> None:
    offenders: dict[str, list[str]] = {}

    def visit(g: nir.NIRGraph, prefix: str) -> None:
        for name, node in g.nodes.items():
            path = f"{prefix}{name}"
            if isinstance(node, nir.NIRGraph) and nir.NIRGraph not in node_map:
                visit(node, f"{path}.")
            elif not isinstance(node, _STRUCTURAL) and _lookup(node_map, type(node)) is None:
                offenders.setdefault(type(node).__name__, []).append(path)

    visit(graph, "")
    if offenders:
        supported = [t.__name__ for t in node_map] + ["Input", "Output", "NIRGraph"]
        raise UnsupportedNodeError(offenders, supported)


def _lookup(node_map: Mapping[type, Any], node_type: type) -> Callable[..., Any] | None:
    for cls in node_type.__mro__:
        if cls in node_map:
            return node_map[cls]
    return None


@functools.lru_cache(maxsize=1024)
def accepted_keywords(fn: Callable[..., Any]) -> frozenset[str]:
    """The keyword arguments a converter can take; ``**kwargs`` counts as ``dt`` and
    ``module_map``, the extras nirbridge's converters are offered."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return frozenset({"dt", "module_map"})
    return frozenset(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))


def _convert(name: str, node: Any, node_map: Mapping[type, Any], dt: float) -> torch.nn.Module:
    fn = _lookup(node_map, type(node))
    assert fn is not None  # _check_supported ran first
    try:
        module = fn(node, dt=dt) if "dt" in accepted_keywords(fn) else fn(node)
    except Exception as error:
        raise NodeConversionError(name, type(node).__name__, error) from error
    if not isinstance(module, torch.nn.Module):
        raise NodeConversionError(
            name,
            type(node).__name__,
            TypeError(f"the converter returned {type(module).__name__}, not a torch.nn.Module"),
        )
    return module


@functools.lru_cache(maxsize=1024)
def forward_takes_state(cls: type) -> bool:
    """Whether a module type is stateful: its ``forward`` has a ``state`` parameter."""
    try:
        return "state" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


def _is_stateful(module: torch.nn.Module) -> bool:
    return isinstance(module, fx.GraphModule) or forward_takes_state(type(module))


_RESERVED = frozenset(dir(fx.GraphModule)) | {"graph", "code", "meta", "training"}


def _module_path(name: str) -> tuple[str, list[str]]:
    """The module path for node ``name`` (its dotted parts as submodule names) and why
    each part that could not be used as it is was changed."""
    segments = []
    reasons = []
    for segment in name.split("."):
        # fx writes non-identifier names into generated code as getattr(self, "...") and
        # identifiers as self.name, which Python reads in NFKC form: "\ufb01" as "fi", the
        # full-width "\uff46\uff4f\uff52..." as "forward"; such a segment is stored in the
        # form Python reads
        normal = unicodedata.normalize("NFKC", segment).replace(".", "_")  # "⒒" reads as "11."
        cleaned = "".join("_" if c in '"\\' or not c.isprintable() else c for c in normal)
        fixed = f"nir_node_{cleaned}" if keyword.iskeyword(cleaned) else cleaned  # nirtorch's name
        while fixed in _RESERVED or _private(fixed) or keyword.iskeyword(fixed):
            fixed = f"{fixed}_" if not fixed.startswith("_") else f"n{fixed}"
        if fixed != segment:
            why = (
                "holds quotes, backslashes or unprintable characters"
                if cleaned != normal
                else f"reads as {normal!r} in Python (NFKC)"
                if normal != segment
                else "is a Python keyword"
                if keyword.iskeyword(segment)
                else "is an attribute of torch modules"
            )
            reasons.append(f"{segment!r} {why}")
        segments.append(fixed)
    return ".".join(segments), reasons


def _prefixes(path: str) -> list[str]:
    """The module paths that hold ``path``: ``a`` and ``a.b`` for ``a.b.c``."""
    parts = path.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def _clashes(path: str, taken: set[str], containers: set[str]) -> bool:
    """Whether a module installed at ``path`` would replace another node's module, hold
    one, or be put inside one."""
    return path in taken or path in containers or any(p in taken for p in _prefixes(path))


def _private(name: str) -> bool:
    """A name torch modules may use for their own attributes: ``_`` then a letter.
    fx's names for numbered submodules (``_0``, the ``0`` of a Sequential) are safe."""
    return name.startswith("_") and not name.lstrip("_")[:1].isdigit()


def _install(root: torch.nn.Module, path: str, module: torch.nn.Module) -> None:
    *parents, leaf = path.split(".")
    owner = root
    for segment in parents:
        child = owner._modules.get(segment)
        if child is None:
            child = torch.nn.Module()
            owner.add_module(segment, child)
        owner = child
    owner.add_module(leaf, module)


def _placeholder_name(name: str, taken: set[str]) -> str:
    # keep only ASCII identifier characters: "²" is alphanumeric but no identifier, and
    # Python reads "ﬁ" as "fi" (NFKC), which would make two inputs one argument
    candidate = "".join(c if f"_{c}".isidentifier() and c.isascii() else "_" for c in name) or "input"
    if (
        not candidate.isidentifier()
        or candidate in ("state", "self")
        or candidate.startswith("_")
        or keyword.iskeyword(candidate)
    ):
        candidate = f"input_{candidate}".replace("__", "_")
    while candidate in taken:
        candidate += "_"
    taken.add(candidate)
    return candidate


def _build(
    graph: nir.NIRGraph,
    the_plan: graph_utils.Plan,
    shapes: graph_utils.Shapes,
    node_map: Mapping[type, Any],
    dt: float,
    path: str,
) -> fx.GraphModule:
    nodes = {name: shapes.fixes.get(name, node) for name, node in graph.nodes.items()}
    root = torch.nn.Module()
    module_paths: dict[str, str] = {}
    built: dict[str, torch.nn.Module] = {}
    stateful: dict[str, bool] = {}
    wanted = {n: _module_path(n) for n in the_plan.order if not isinstance(nodes[n], _STRUCTURAL)}
    used_paths = {p for n, (p, _) in wanted.items() if p == n}  # names kept as they are come first
    containers = {prefix for p in used_paths for prefix in _prefixes(p)}
    for name in the_plan.order:
        node = nodes[name]
        if isinstance(node, _STRUCTURAL):
            continue
        label = f"{path}.{name}" if path else name
        if isinstance(node, nir.NIRGraph) and nir.NIRGraph not in node_map:
            module = _build_subgraph(node, name, label, shapes, node_map, dt, the_plan)
        else:
            module = _convert(label, node, node_map, dt)
        if type(module) is layers.Flatten and shapes.inputs.get(name) is not None:
            module.rank = len(shapes.inputs[name])  # the shape flowing in, not a stale input_type
        built[name] = module
        module_path, reasons = wanted[name]
        if module_path != name:  # repaired: a path that neither is nor holds nor lies in another's
            if _clashes(module_path, used_paths, containers):
                module_path = module_path.replace(".", "_")
            while _clashes(module_path, used_paths, containers):
                module_path += "_"
            used_paths.add(module_path)
            containers.update(_prefixes(module_path))
            warnings.warn(
                f"node {label!r}: {'; '.join(reasons)}, so its submodule is {module_path!r}",
                RepairWarning,
                stacklevel=3,
            )
        module_paths[name] = module_path
        stateful[name] = _is_stateful(module)
    checked_outputs = _user_outputs(nodes, built, node_map, shapes)
    own_takers = _own_takers(the_plan, built, checked_outputs)
    for name in sorted(module_paths, key=lambda n: module_paths[n].count(".")):
        _install(root, module_paths[name], built[name])

    g = fx.Graph()
    taken: set[str] = set()
    values: dict[str, fx.Node] = {}
    for name in the_plan.inputs:
        values[name] = g.placeholder(_placeholder_name(name, taken))
        values[name].meta["nir_node"] = name
    state_in = g.placeholder("state", default_value=None)
    # the call-time checks (nirbridge.checks): shapes, dtypes and keys, never the data
    root.register_buffer(_DTYPE, torch.empty(0), persistent=False)
    dtype_of = g.get_attr(_DTYPE)
    stateful_names = tuple(n for n in the_plan.order if stateful.get(n))
    spec = (
        not path,  # a nested graph's input comes from its parent, checked there
        tuple(the_plan.inputs),
        tuple(_known(shapes.outputs.get(name)) for name in the_plan.inputs),
        stateful_names,
        tuple(state_type_name(built[n]) for n in stateful_names),
        tuple(the_plan.delayed_sources),
        tuple(_state_shape(built[n], shapes.outputs.get(n)) for n in stateful_names),
        tuple(_known(shapes.outputs.get(s)) for s in the_plan.delayed_sources),
        tuple(own_takers.get(name, ()) for name in the_plan.inputs),
    )
    # an attribute, not a constant in the graph: fx would walk and print its thousands of
    # names for each node that takes it (a fifth of an 800-node build)
    root.__dict__[_SPEC] = spec
    spec_of = g.get_attr(_SPEC)
    checked = g.create_node(
        "call_function",
        check_step,
        (state_in, tuple(values[n] for n in the_plan.inputs), dtype_of, spec_of),
        name="checked",
    )
    node_states = g.create_node("call_function", operator.getitem, (checked, 0), name="node_states")
    delayed_in = g.create_node("call_function", operator.getitem, (checked, 1), name="delayed_outputs")
    single = g.create_node("call_function", operator.getitem, (checked, 2), name="single_sample")
    batch_size = g.create_node("call_function", operator.getitem, (checked, 3), name="batch_size")
    for index, name in enumerate(the_plan.inputs):
        raw = values[name]
        values[name] = g.create_node(
            "call_function", operator.getitem, (checked, 4 + index), name=f"{raw.name}_"
        )
        values[name].meta["nir_node"] = name
    reference = values[the_plan.inputs[0]]
    previous = {
        source: g.create_node("call_method", "get", (delayed_in, source), name=f"{_safe(source)}_previous")
        for source in the_plan.delayed_sources
    }
    new_node_states: dict[str, fx.Node] = {}
    late_shapes: dict[str, tuple[int, ...]] = {}  # input shapes of nodes fed only by delayed edges
    for name in the_plan.order:
        node = nodes[name]
        if isinstance(node, nir.Input):
            continue
        direct = [values[s] for s, is_delayed in the_plan.incoming[name] if not is_delayed]
        late = [previous[s] for s, is_delayed in the_plan.incoming[name] if is_delayed]
        if direct:
            x = direct[0]
            for other in direct[1:]:
                x = g.create_node("call_function", operator.add, (x, other), name=f"{_safe(name)}_in")
            if late:
                x = g.create_node("call_function", add_delayed, (x, *late), name=f"{_safe(name)}_in")
        else:
            shape = shapes.inputs.get(name)
            if shape is None:
                raise GraphStructureError(
                    f"node {_label(path, name)!r} is fed only through delayed edges and the "
                    "shape of its input cannot be inferred; give its sources fixed shapes"
                )
            late_shapes[name] = tuple(shape)
            x = g.create_node(
                "call_function",
                delayed_only,
                (reference, tuple(shape), *late),
                {"like": dtype_of},
                name=f"{_safe(name)}_in",
            )
        if isinstance(node, nir.Output):
            values[name] = x
            continue
        target = module_paths[name]
        if stateful[name]:
            old = g.create_node("call_method", "get", (node_states, name), name=f"{_safe(name)}_state")
            result = g.create_node("call_module", target, (x,), {"state": old}, name=f"{_safe(name)}_step")
            out = g.create_node("call_function", operator.getitem, (result, 0), name=_safe(name))
            new_node_states[name] = g.create_node(
                "call_function", operator.getitem, (result, 1), name=f"{_safe(name)}_new_state"
            )
        else:
            out = g.create_node("call_module", target, (x,), name=_safe(name))
        if name in checked_outputs:
            expected = checked_outputs[name]
            takers = own_takers.get(name, ())
            out = g.create_node(
                "call_function",
                check_output,
                (out, _label(path, name), expected),
                {"reference": dtype_of, "takers": takers} if takers else {},
                name=f"{_safe(name)}_checked",
            )
        out.meta["nir_node"] = name
        out.meta["nir_type"] = type(node).__name__
        values[name] = out
    outputs = [values[o] for o in the_plan.outputs]
    if not outputs:
        raise GraphStructureError(
            f"graph{' ' + repr(path) if path else ''} has no Output node; add a nir.Output "
            "node and an edge into it"
        )
    out_value: Any = outputs[0] if len(outputs) == 1 else dict(zip(the_plan.outputs, outputs))
    if not path:  # single samples come back without the batch axis the call gave them
        out_value = g.create_node("call_function", unbatch, (out_value, single), name="outputs")
    new_state: Any = {
        NODES: new_node_states,
        DELAYED: {source: values[source] for source in the_plan.delayed_sources},
    }
    if not path:  # the state a user holds: a dict whose deep copy works while autograd records
        new_state = g.create_node(
            "call_function", stamped, (new_state, dtype_of, batch_size, spec_of), name="state"
        )
    g.output((out_value, new_state))
    g.lint()
    g._tracer_cls = _Retracer  # what pickle's reconstruction traces with
    g.set_codegen(_DirectCalls())
    gm = NIRGraphModule(root, g, class_name="NIRGraphModule")
    _private_dtype_buffer(gm)
    for child_name, child in root.named_children():
        setattr(gm, child_name, child)
    gm.meta["nirbridge"] = {
        "inputs": list(the_plan.inputs),
        # the forward's argument names (inputs, then state), for the call's argument check
        "arguments": tuple(n.target for n in g.nodes if n.op == "placeholder"),
        "outputs": list(the_plan.outputs),
        "module_paths": module_paths,
        # how one step is evaluated, for nirbridge.run's time-batched schedule
        "plan": the_plan,
        "late_shapes": late_shapes,
        # output shapes to check where a user's module computes a node
        "checked_outputs": checked_outputs,
        # the nodes of nirbridge's own that take each input directly, for run's dtype check
        "own_takers": dict(zip(the_plan.inputs, spec[8])),
        # the feature shapes of the nodes' state tensors, for run's state check
        "state_shapes": {n: s for n, s in zip(stateful_names, spec[6]) if s is not None},
        "delayed_shapes": dict(zip(the_plan.delayed_sources, spec[7])),
        # values per sample of each node's output, for the length of run's chunks
        "widths": {name: _width(shapes.outputs.get(name)) for name in module_paths},
        # what torch_to_nir needs to export the graph again with current parameters
        "order": list(nodes),
        "edges": [(str(a), str(b)) for a, b in graph.edges],
        "io": _io_nodes(nodes, shapes),
        "metadata": dict(graph.metadata) if isinstance(graph.metadata, Mapping) else {},
        "node_metadata": {
            name: copy.deepcopy(node.metadata)
            for name, node in nodes.items()
            if isinstance(getattr(node, "metadata", None), Mapping) and node.metadata
        },
    }
    return gm


def _user_outputs(
    nodes: Mapping[str, Any],
    built: Mapping[str, torch.nn.Module],
    node_map: Mapping[type, Any],
    shapes: graph_utils.Shapes,
) -> dict[str, tuple[int, ...] | None]:
    """The nodes whose module comes from a user's map (not nirbridge's converters), with
    the output shape to check at call time (None where the graph does not fix one)."""
    result = {}
    for name, module in built.items():
        node = nodes[name]
        if isinstance(module, fx.GraphModule) or _lookup(node_map, type(node)) is _lookup(
            DEFAULT_MAP, type(node)
        ):
            continue
        result[name] = _known(shapes.outputs.get(name))
    return result


def _own_takers(
    the_plan: graph_utils.Plan,
    built: Mapping[str, torch.nn.Module],
    user_modules: Mapping[str, Any],
) -> dict[str, tuple[str, ...]]:
    """For each node, the nodes built by nirbridge (not by a user's ``node_map``; a
    nested graph and an adapter's simulator neuron count as nirbridge's) that take its
    value directly: they compute in the module's dtype, so a value of a wider dtype would
    be rounded for them (see :func:`nirbridge.checks.check_step` and
    :func:`nirbridge.checks.check_output`). One pass over the edges."""
    takers: dict[str, list[str]] = {}
    for node, edges in the_plan.incoming.items():
        if node in built and (node not in user_modules or isinstance(built[node], SimulatorNeuron)):
            for source in dict.fromkeys(source for source, _ in edges):
                takers.setdefault(source, []).append(node)
    return {source: tuple(nodes) for source, nodes in takers.items()}


def _state_shape(module: torch.nn.Module, shape: Any) -> tuple[int, ...] | None:
    """The feature shape of a nirbridge neuron's or delay's state tensors (their output
    shape), for the call-time state check; None for other modules."""
    if not isinstance(module, (neurons.modules.Neuron, neurons.Delay)):
        return None
    return _known(shape)


def _width(shape: Any) -> int | None:
    try:
        known = _known(shape)
    except (TypeError, ValueError):
        return None
    return math.prod(known) if known is not None and all(n > 0 for n in known) else None


def _known(shape: Any) -> tuple[int, ...] | None:
    return tuple(int(n) for n in shape) if shape is not None else None


def _io_nodes(nodes: Mapping[str, Any], shapes: graph_utils.Shapes) -> dict[str, nir.NIRNode]:
    """Input and Output nodes with the shapes inferred for them (batch axis excluded)."""
    result: dict[str, nir.NIRNode] = {}
    for name, node in nodes.items():
        if isinstance(node, nir.Input):
            shape = shapes.outputs.get(name)
            result[name] = nir.Input(np.array(shape)) if shape is not None else copy.deepcopy(node)
        elif isinstance(node, nir.Output):
            shape = shapes.inputs.get(name)
            result[name] = nir.Output(np.array(shape)) if shape is not None else copy.deepcopy(node)
        else:
            continue
        result[name].metadata = {}  # kept apart in "node_metadata"
    return result


def _safe(name: str) -> str:
    """A node name as the name of a value in the generated forward: ASCII letters,
    digits and ``_`` (Python reads other letters in NFKC form), never ``self``."""
    if name.isascii() and name.isidentifier():  # most names: nothing to replace
        safe = name
    else:
        safe = "".join(c if c.isascii() and c.isalnum() else "_" for c in name)
    return f"{safe}_" if safe in ("self", "state") or keyword.iskeyword(safe) else safe


def _label(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _build_subgraph(
    node: nir.NIRGraph,
    name: str,
    label: str,
    shapes: graph_utils.Shapes,
    node_map: Mapping[type, Any],
    dt: float,
    parent_plan: graph_utils.Plan,
) -> fx.GraphModule:
    sub_shapes = shapes.nested.get(name)
    sub_plan = sub_shapes.plan if sub_shapes is not None else None
    if sub_plan is None:
        sub_plan = graph_utils.plan(node, label)
    if len(sub_plan.inputs) != 1:
        raise GraphStructureError(
            f"subgraph {label!r} has {len(sub_plan.inputs)} Input nodes; an edge into a "
            "subgraph feeds its single Input node, so give it exactly one"
        )
    feeds_out = any(name == s for edges in parent_plan.incoming.values() for s, _ in edges)
    if feeds_out and len(sub_plan.outputs) != 1:
        raise GraphStructureError(
            f"subgraph {label!r} has {len(sub_plan.outputs)} Output nodes but edges leave "
            "it; an edge out of a subgraph reads its single Output node"
        )
    if sub_shapes is None:
        sub_shapes = graph_utils.infer_shapes(node, sub_plan, None, label)
    return _build(node, sub_plan, sub_shapes, node_map, dt, label)

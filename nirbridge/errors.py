"""Errors and warnings raised by nirbridge.

Every error raised on bad input is a :class:`NirBridgeError`. Each subclass names the
node, edge, file or parameter at fault and says what to do about it, so a message can
be acted on without reading nirbridge's source.

Errors about what a graph or model holds (unsupported node types and modules, missing
shapes, broken wiring, shapes or parameters that do not fit, bad inputs, a converter
that failed) also subclass ``ValueError``, which is what nirtorch raises for them (or
lets through from a converter): code written for nirtorch that catches ``ValueError``
keeps catching them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class NirBridgeError(Exception):
    """Base class of every error nirbridge raises on bad input."""


class GraphStructureError(NirBridgeError, ValueError):
    """The graph's wiring is unusable: a missing node, no Input, a bad name."""


class MissingNodeError(GraphStructureError):
    """An edge names a node that does not exist in its graph."""

    def __init__(self, edge: tuple[str, str], missing: str, graph_path: str = "", file: str = "") -> None:
        where = f" in subgraph {graph_path!r}" if graph_path else ""
        super().__init__(
            f"{file + ': ' if file else ''}"
            f"edge {edge[0]!r} -> {edge[1]!r}{where} names node {missing!r}, which is not "
            f"in the graph. Add a node called {missing!r} or correct the edge."
        )
        self.edge = edge
        self.missing = missing
        self.graph_path = graph_path
        self.file = file


class UnsupportedNodeError(NirBridgeError, ValueError):
    """One or more node types have no entry in the node map."""

    def __init__(self, offenders: dict[str, list[str]], supported: Iterable[str]) -> None:
        lines = [
            f"  {type_name}: {', '.join(repr(n) for n in names)}"
            for type_name, names in sorted(offenders.items())
        ]
        first = sorted(offenders)[0]
        super().__init__(
            "no converter for these node types (type: nodes):\n"
            + "\n".join(lines)
            + f"\nSupported types: {', '.join(sorted(supported)) or 'none'}."
            + f"\nFix: pass node_map={{nir.{first}: fn}} where fn(node) returns a torch.nn.Module."
        )
        self.offenders = offenders


class UnsupportedModuleError(NirBridgeError, ValueError):
    """:func:`nirbridge.torch_to_nir` met module types or functions its map lacks.

    ``offenders`` maps each description (``"module ReLU"``, ``"function torch.sigmoid"``)
    to where it occurs (module paths, or the enclosing module and source line).
    """

    def __init__(self, offenders: dict[str, list[str]], supported: Iterable[str], fix: str) -> None:
        lines = [f"  {what}: {', '.join(places)}" for what, places in offenders.items()]
        super().__init__(
            f"torch_to_nir cannot convert {len(offenders)} kind(s) of module or function "
            "(kind: where):\n"
            + "\n".join(lines)
            + f"\nSupported: {', '.join(supported) or 'nothing (default_map={} and no module_map)'}."
            + f"\nFix: {fix}."
        )
        self.offenders = offenders


class UnsupportedImplementationError(NirBridgeError, ValueError):
    """The elasticai.creator IR holds implementation types with no NIR converter.

    ``offenders`` maps each type to the IR nodes that use it; ``advice`` gives, for the
    types it knows, what to use instead.
    """

    def __init__(
        self,
        offenders: dict[str, list[str]],
        supported: Iterable[str],
        advice: Mapping[str, str] | None = None,
    ) -> None:
        advice = advice or {}
        lines = [
            f"  {kind}: {', '.join(nodes)}" + (f"\n    ({advice[kind]})" if kind in advice else "")
            for kind, nodes in offenders.items()
        ]
        first = next(iter(offenders))
        super().__init__(
            f"the IR holds {len(offenders)} type(s) NIR cannot express (type: nodes):\n"
            + "\n".join(lines)
            + f"\nSupported: {', '.join(supported)}, and every NIR node type by its class name."
            + f"\nFix: pass type_map={{{first!r}: fn}} where fn(attributes, parameters) returns a "
            "nir.NIRNode, or remove these layers from the model."
        )
        self.offenders = offenders


class TraceError(NirBridgeError):
    """torch.fx could not trace a module's ``forward`` (data-dependent control flow,
    calls fx cannot follow); the message names the module and the cause."""


class MissingShapeError(NirBridgeError, ValueError):
    """A shape NIR needs cannot be found without an example input."""


class NodeConversionError(NirBridgeError, ValueError):
    """A converter failed on a node; the original exception is chained."""

    def __init__(self, node_name: str, node_type: str, cause: BaseException) -> None:
        super().__init__(
            f"while converting node {node_name!r} ({node_type}): {type(cause).__name__}: {cause}"
        )
        self.node_name = node_name
        self.node_type = node_type


class ShapeMismatchError(NirBridgeError, ValueError):
    """A node's parameters do not fit the shape of what flows into it."""


class InputError(NirBridgeError, ValueError):
    """Inputs given to a module or to :func:`nirbridge.run` do not fit the graph's Input nodes."""


class ParameterError(NirBridgeError, ValueError):
    """A parameter value is unusable (wrong shape, wrong kind, out of range)."""


class BackendUnavailableError(ParameterError):
    """``run(backend=...)`` names a back-end that cannot run here; the message says why
    and which back-end to use instead."""


class MemoryLimitError(NirBridgeError, MemoryError):
    """A build or a run would allocate more than the device has free; the message says
    how much was asked, how much is free and what to change (see :mod:`nirbridge.limits`).

    ``requested`` and ``free`` are the byte counts compared."""

    def __init__(self, message: str, requested: int = 0, free: int = 0) -> None:
        super().__init__(message)
        self.requested = requested
        self.free = free


class MetricsError(NirBridgeError):
    """:meth:`nirbridge.Run.metrics` cannot count this run: it recorded too little (run
    with ``record="metrics"``), or it is a native model's, which has no graph."""


class NirFileError(NirBridgeError):
    """A .nir file cannot be read or written; the message names the file."""


class UnknownNodeTypeError(NirFileError):
    """A .nir file holds node types that are not NIR primitives nirbridge knows.

    ``unknown`` maps each type name to the dotted names of the nodes that have it.
    """

    def __init__(self, file: str, unknown: dict[str, list[str]], known: Iterable[str]) -> None:
        listed = "; ".join(
            f"{type_name!r} ({', '.join(repr(n) for n in names)})"
            for type_name, names in sorted(unknown.items())
        )
        super().__init__(
            f"{file}: node types that are not NIR primitives: {listed}. nirbridge reads "
            f"{', '.join(sorted(known))}. The file may come from a newer NIR version or a "
            "tool's private extension; remove or replace those nodes where it was written."
        )
        self.file = file
        self.unknown = unknown


class NirBridgeWarning(UserWarning):
    """Base class of nirbridge's warnings."""


class LossyConversionWarning(NirBridgeWarning):
    """A conversion could not be exact; the message names what is lost."""


class NirFileWarning(NirBridgeWarning):
    """A .nir file was read, but part of it does not fit NIR; the message names what."""


class DtWarning(NirBridgeWarning):
    """The time step is doubtful: too large for a neuron's time constants (forward Euler
    overshoots where dt/τ ≥ 1), or other than the one the graph records."""


class AssumedDtWarning(DtWarning):
    """A graph that records no time step runs at the assumed default (1e-4 s); filter
    this category to silence it, or pass ``dt=``."""


class CompileWarning(NirBridgeWarning):
    """``run(compile=True)`` could not compile and ran in eager mode instead."""


class RepairWarning(NirBridgeWarning):
    """Input that did not fit the NIR specification was accepted after a repair.

    The message names the node, what did not fit and what nirbridge did instead.
    """


class ParameterWarning(NirBridgeWarning):
    """A parameter is legal but likely not what was meant: a threshold at or below the
    reset (the neuron fires at every step once it starts, or never resets below it), a
    resistance or input weight of 0 (the neuron ignores its input), a weight matrix of
    zeros. The message names the node, the field and the neurons."""


class SilentNetworkWarning(NirBridgeWarning):
    """A run ended in which spiking nodes never fired. The message names them and says
    what commonly causes it (a time step the file does not record, so one was assumed;
    inputs too weak for the thresholds)."""


class NonFiniteWarning(NirBridgeWarning):
    """A run ended with NaN or infinite values in outputs or records. The message names
    each one once, with the first step at which it appears, and the common causes
    (infinite or NaN inputs, a parameter that makes the equations diverge)."""

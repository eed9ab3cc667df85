"""elasticai.creator 0.63-0.67's IR (0.66.0 is the release tested), read and written.

0.66 describes a network as ``Implementation`` objects (``Torch2Ir().convert(model)``
yields them, a generator) whose ``as_dict()`` forms are ``{"name", "type", "nodes",
"edges", ...hyperparameters}``: the root, named ``""``, has type ``"module"``, nodes
``{name: {"type", "implementation"}}`` and edges ``{src: {dst: {}}}``. The dict
spellings of every version are read in :mod:`.records`; here are the objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...errors import GraphStructureError
from .checks import _record

if TYPE_CHECKING:
    from .records import _Impl

__all__ = ["as_dict", "entries", "to_objects"]


def entries(ir: Iterable[Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, record) pairs of ``Implementation`` objects (or their dicts), in order."""
    found = []
    once = iter(ir) is ir  # a generator, such as Torch2Ir().convert(model)
    for index, item in enumerate(ir):
        record = _record(item, f"item {index} of the IR")
        name = getattr(item, "name", record.get("name"))
        if not isinstance(name, str):
            raise GraphStructureError(f"item {index} of the IR has no name; give each implementation one")
        found.append((name, record))
    if once and not found:
        raise GraphStructureError(
            "the IR is an empty iterator: a generator (0.66's Torch2Ir().convert(model)) can be read "
            "once, and this one was read before; keep its items, ir = list(converter.convert(model)), "
            "and pass that list each time"
        )
    return found


def as_dict(impl: _Impl, root: bool) -> dict[str, Any]:
    """The 0.63-0.67 ``Implementation.as_dict()`` form of one implementation."""
    nodes = {name: dict(record) for name, record in impl.nodes.items()}
    edges: dict[str, dict[str, Any]] = {}
    for src, dst, data in impl.edges:
        edges.setdefault(src, {})[dst] = dict(data)
    if root:
        return {**impl.attributes, "nodes": nodes, "edges": edges, "type": impl.type, "name": impl.name}
    return {**impl.attributes, "nodes": nodes, "edges": edges, "name": impl.name, "type": impl.type}


def to_objects(ir: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """0.66's own ``Implementation`` objects from the dict form, loaded by its
    ``load_from_dict``; ``Ir2Torch().convert(implementations, state_dict)`` takes them."""
    from elasticai.creator.graph import BaseGraph
    from elasticai.creator.torch2ir import Implementation

    return [Implementation(graph=BaseGraph()).load_from_dict(dict(record)) for record in ir.values()]

"""elasticai.creator IR ⇄ NIR, stored as ``.nir`` HDF5.

elasticai.creator describes a network as *implementations*: one of type ``"module"``
(the root) holds ``nodes`` (``{name: {"type", "implementation"}}``) and ``edges``
(``{src: {dst: {}}}``); every other implementation holds one submodule's type and
hyperparameters. 0.63-0.67 spell them as ``Implementation`` objects and their
``as_dict()`` dicts, root named ``""`` (:mod:`.ir066`); 0.68 as a ``(root, registry)``
pair of ``DataGraph``s and their serialized dicts (:mod:`.ir068`). Every spelling is read
into one form (:mod:`.records`), converted by :mod:`.ir_to_nir` and :mod:`.nir_to_ir`
with the type mapping of :mod:`.mapping`; :mod:`.roundtrip` keeps both directions exact.
The IR carries no weights (except 0.68's ``Torch2IrWithParams``) and no shapes: the
weights are a ``state_dict`` keyed ``"<implementation>.<field>"`` and shapes follow from
the input shape.

==============================  ==========================================================
elasticai type                  NIR node
==============================  ==========================================================
``input`` / ``output``          Input / Output (the IR node's ``shape``, batch excluded)
``linear``                      Affine (``bias=True``) / Linear (``bias=False``)
``conv1d`` / ``conv2d``         Conv1d / Conv2d: padding, stride, dilation, groups kept
``flatten``                     Flatten (torch dims, batch axis 0; default 1 … -1)
the NIR type name (``LIF``,     that NIR node: array fields in the state_dict, the rest as
``CubaLIF``, ``Delay``, …)      hyperparameters
``NIRGraph`` (or ``module``)    a nested NIRGraph; its nodes' implementations are named
                                ``"<graph>.<node>"``
==============================  ==========================================================

Every other elasticai type (``relu``, ``sigmoid``, ``batchnorm2d``, ``maxpool2d``,
``add`` …) is an :class:`~nirbridge.UnsupportedImplementationError` listing its nodes
(with what to use instead, :data:`INSTEAD`), unless ``type_map`` maps it.

Both directions are exact. What one side holds and the other cannot express goes along
so that a round trip gives back what it started from:

* IR → NIR: an IR node record, implementation or set of parameters that the NIR node
  would not give back as they are (a node whose implementation has another name, a
  submodule called twice, ``bias=False`` in a convolution, a spelling such as
  ``padding="same"``) is stored in the NIR node's metadata as a Python literal under
  ``"elasticai.node"``, ``"elasticai.implementation"``, ``"elasticai.parameters"``; the
  root's under the graph's ``"elasticai.implementation"`` and ``"elasticai.edges"``.
* NIR → IR: node and graph metadata go to the implementation's ``"nir_metadata"``; a
  field the IR would not give back as it is (an array spelling of a stride, a shape
  that differs from the inferred one) to ``"nir_fields"``; an edge order that grouping
  by source changes to ``"nir_edges"``.

Nothing given is dropped unseen, and nothing stored for the round trip overrides what
the IR holds:

* A state_dict key that names no implementation, names a graph implementation, or names
  a field a built-in type does not take (``"fc.bais"`` of a ``linear``) is a
  :class:`~nirbridge.ParameterError` naming the key. Entries a ``type_map`` converter
  leaves, attributes and node fields NIR has no use for (kept for the way back) and
  implementations no node uses are named in a
  :class:`~nirbridge.LossyConversionWarning`. A ``nir_*`` field this adapter does not
  read there, and an ``elasticai.*`` metadata key it does not write there, are errors.
* ``nir_fields`` only restores how NIR spelt a value the IR holds too (another dtype or
  byte order of the same numbers, ``2`` for ``(2, 2)``, ``"same"`` for the padding it
  stands for, a shape with a leading batch axis of 1). One that gives other weights or
  contradicts the inferred shapes is a :class:`~nirbridge.ParameterError` naming the
  implementation, node and field; ``elasticai.*`` metadata that contradicts its node
  is one naming the node and the metadata key.
* ``elasticai.*`` metadata entries are Python literals of at most
  :data:`MAX_LITERAL_CHARS` characters, read by a parser whose cost follows the value
  it builds (``ast.literal_eval`` spends some 450 bytes a character): longer ones are
  left out on writing (with a warning) and refused before parsing on reading.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

import nir

from ... import graph as graph_utils
from ... import io
from ...errors import (
    LossyConversionWarning,
    MissingShapeError,
    NirBridgeError,
    ParameterError,
    RepairWarning,
    UnsupportedImplementationError,
)
from . import ir066, ir068
from .ir_to_nir import _ir_to_graph, _listed, _prefixed
from .literals import MAX_LITERAL_CHARS
from .mapping import (
    FROM_NIR,
    INSTEAD,
    IR,
    TO_NIR,
    FromNir,
    StateDict,
    ToNir,
    affine_from_nir,
    conv_from_nir,
    flatten_from_nir,
    flatten_to_nir,
    linear_from_nir,
    linear_to_nir,
)
from .nir_to_ir import _NirToIr
from .records import _normalize
from .roundtrip import _record_ir_in_metadata, _record_nir_in_ir

__all__ = [
    "FROM_NIR",
    "INSTEAD",
    "IR_VERSIONS",
    "MAX_LITERAL_CHARS",
    "TO_NIR",
    "affine_from_nir",
    "conv_from_nir",
    "flatten_from_nir",
    "flatten_to_nir",
    "from_nir",
    "installed_version",
    "linear_from_nir",
    "linear_to_nir",
    "read",
    "to_nir",
    "write",
]

# ----------------------------------------------------------------------------- public API


def to_nir(
    ir: Any,
    state_dict: Mapping[str, Any] | None = None,
    *,
    input_shape: Any = None,
    type_map: Mapping[str, ToNir] | None = None,
) -> nir.NIRGraph:
    """Translate an elasticai.creator IR into a NIR graph.

    Args:
        ir: any spelling of the IR: the ``Implementation`` objects (or the generator)
            from elasticai.creator's ``Torch2Ir``; a dict of their ``as_dict()`` forms
            keyed by name (0.63-0.67: root ``""``, edges ``{src: {dst: {}}}``); the 0.62
            form (node lists, edges ``{"src", "sink"}``); the documentation's form (root
            ``"root"``, edges keyed ``(src, dst)`` carrying ``dst`` or ``sink``); the 0.68
            form (an ``attributes`` block; a ``(root, registry)`` pair or one dict).
        state_dict: the weights, keyed ``"<implementation>.<field>"`` as
            ``model.state_dict()`` gives them (tensors or arrays).
        input_shape: the input's shape without the batch axis (a dict by input node for
            several inputs); optional where the first layers' weights fix it or the IR's
            input nodes carry a ``shape``.
        type_map: ``{elasticai type: fn(attributes, parameters) -> nir.NIRNode}`` entries
            that win over :data:`TO_NIR`.

    Edges keep the IR's order; a node fed by several edges sums them, as NIR does.
    Raises :class:`~nirbridge.UnsupportedImplementationError` listing every node whose
    type NIR cannot express, :class:`~nirbridge.ParameterError` naming the implementation
    whose weight is missing or does not fit, the state_dict keys that name no
    implementation or no field of a built-in type, and the ``nir_fields`` entry that
    contradicts the weights or shapes, and :class:`~nirbridge.MissingShapeError` when no
    shape is known. A malformed IR (a field of the wrong type, a name that is not
    a string, an edge to a node that does not exist, graph implementations nested more
    than :data:`nirbridge.limits.MAX_NESTING` deep or holding themselves) is a
    :class:`~nirbridge.GraphStructureError` (:class:`~nirbridge.MissingNodeError` for
    the edge) or :class:`~nirbridge.ParameterError` naming the implementation, node,
    edge or field.
    """
    impls, root = _normalize(ir)
    the_map = {**TO_NIR, **_checked_map(type_map, str, "an elasticai type name such as 'linear'")}
    graph, build = _ir_to_graph(impls, root, state_dict, input_shape, the_map)
    unused = build.unused_parameters()
    if unused:
        warnings.warn(
            f"state_dict entries {_listed(unused)} belong to implementations of the IR but no NIR field "
            "holds them; they are left out",
            LossyConversionWarning,
            stacklevel=2,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossyConversionWarning)  # the reverse only serves comparison
        back, back_state = _NirToIr(FROM_NIR).run(graph)
    _record_ir_in_metadata(graph, impls, root, build.used, back, back_state)
    return graph


IR_VERSIONS = ("0.66", "0.68")
"""The IR forms :func:`from_nir` writes: 0.66 (0.63-0.67) and 0.68."""


def installed_version() -> str | None:
    """The IR form of the elasticai.creator installed here: ``"0.66"`` for 0.63-0.67,
    ``"0.68"`` for 0.68 and later, None where none is installed (or an older one)."""
    from importlib import metadata

    try:
        text = metadata.version("elasticai.creator")
    except metadata.PackageNotFoundError:
        return None
    try:
        major, minor = (int(part) for part in text.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) >= (0, 68):
        return "0.68"
    return "0.66" if (major, minor) >= (0, 63) else None


def from_nir(
    graph: nir.NIRGraph | str | os.PathLike[str],
    *,
    type_map: Mapping[type, FromNir] | None = None,
    ir_version: str | None = None,
    as_dicts: bool = False,
) -> tuple[Any, StateDict]:
    """Translate a NIR graph (or a ``.nir`` file) into an elasticai.creator IR.

    Returns ``(ir, state_dict)``, the weights as tensors keyed
    ``"<implementation>.<field>"``, ready for elasticai's ``Ir2Torch``, and the IR in the
    form ``ir_version`` asks for:

    * ``None`` (the default): ``{name: Implementation.as_dict()}`` in the 0.63-0.67
      form (root ``""`` of type ``"module"``, edges ``{src: {dst: {}}}``);
    * ``"0.66"``: 0.66's ``Implementation`` objects (a list, root first) where
      elasticai.creator 0.63-0.67 is installed, for ``Ir2Torch().convert(ir, state_dict)``;
      else, or with ``as_dicts=True``, the dicts above;
    * ``"0.68"``: 0.68's ``(root, registry)`` pair of ``DataGraph``s where
      elasticai.creator 0.68 or later is installed, for ``Ir2Torch()(root, registry,
      state_dict)``; else, or with ``as_dicts=True``, the pair as ``IrSerializer``
      writes it (``{"nodes", "edges", "attributes"}``).

    ``type_map``: ``{nir type: fn(node) -> (type, attributes, parameters) | None}``
    entries that win over :data:`FROM_NIR`. See the module docs for the table and what
    is stored where. What :func:`to_nir` stored in metadata is checked to have the type
    it is written with; anything else is a :class:`~nirbridge.ParameterError` naming the
    file, the node and the metadata key.
    """
    if ir_version is not None and ir_version not in IR_VERSIONS:
        raise ParameterError(
            f"ir_version={ir_version!r}: give '0.66' (elasticai.creator 0.63-0.67), '0.68' (0.68 and "
            "later) or None (0.66's dicts)"
        )
    source = ""
    if not isinstance(graph, nir.NIRNode):
        source = str(os.fspath(graph)) if isinstance(graph, (str, os.PathLike)) else ""
        graph = io.read(graph)
    try:
        ir, state = _from_nir(graph, type_map)
    except NirBridgeError as error:
        raise (_prefixed(error, source) if source else error) from None
    objects = not as_dicts and ir_version == installed_version()
    if ir_version == "0.66" and objects:
        return ir066.to_objects(ir), state
    if ir_version == "0.68":
        root, registry = ir068.to_dicts(ir)
        return (ir068.to_objects(root, registry) if objects else (root, registry)), state
    return ir, state


def _checked_map(type_map: Any, kind: type, what: str) -> dict[Any, Any]:
    """``type_map`` as a dict, once it is one whose keys are of ``kind`` and values callable."""
    if type_map is None:
        return {}
    if not isinstance(type_map, Mapping):
        raise ParameterError(f"type_map must be a dict {{key: fn}}, got a {type(type_map).__name__}")
    for key, fn in type_map.items():
        if not isinstance(key, kind) or (kind is type and not issubclass(key, nir.NIRNode)):
            hint = (
                f" (nir.{key})" if isinstance(key, str) and isinstance(getattr(nir, key, None), type) else ""
            )
            raise ParameterError(f"type_map: key {key!r} is not {what}{hint}; use that as the key")
        if not callable(fn):
            raise ParameterError(f"type_map: the entry for {key!r} is a {type(fn).__name__}, not a function")
    return dict(type_map)


def _from_nir(graph: nir.NIRNode, type_map: Mapping[type, FromNir] | None) -> tuple[IR, StateDict]:
    if isinstance(graph, nir.NIRGraph):
        graph_utils.check_edges(graph)  # and how deep graphs nest
    else:
        types = (getattr(graph, "input_type", None), getattr(graph, "output_type", None))
        if not (isinstance(types[0], Mapping) and "input" in types[0]) or not (
            isinstance(types[1], Mapping) and "output" in types[1]
        ):
            raise ParameterError(
                f"the {type(graph).__name__} node given has no input_type {{'input': shape}} and "
                "output_type {'output': shape}; give a nir.NIRGraph with Input and Output nodes"
            )
        graph = nir.NIRGraph(
            nodes={
                "input": nir.Input(types[0]["input"]),
                "node": graph,
                "output": nir.Output(types[1]["output"]),
            },
            edges=[("input", "node"), ("node", "output")],
            type_check=False,
        )
    the_map = {**FROM_NIR, **_checked_map(type_map, type, "a NIR node class such as nir.LIF")}
    ir, state = _NirToIr(the_map).run(graph)
    impls, root = _normalize(ir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossyConversionWarning)
        warnings.simplefilter("ignore", RepairWarning)  # the graph's own, already reported
        inputs = {
            name: node.input_type["input"]
            for name, node in graph.nodes.items()
            if isinstance(node, nir.Input)
            and isinstance(node.input_type, Mapping)
            and node.input_type.get("input") is not None
        }
        try:
            rebuilt, _ = _ir_to_graph(impls, root, state, inputs or None, TO_NIR)
        except (UnsupportedImplementationError, MissingShapeError):
            return ir, state  # types from the user's map, or inputs of unknown shape: nothing to compare
    _record_nir_in_ir(graph, ir, rebuilt)
    return ir, state


def write(
    path: str | os.PathLike[str],
    ir: Any,
    state_dict: Mapping[str, Any] | None = None,
    *,
    input_shape: Any = None,
    type_map: Mapping[str, ToNir] | None = None,
) -> None:
    """Write an elasticai.creator IR and its weights as a ``.nir`` file (see :func:`to_nir`).

    The file is an ordinary NIR graph (``nir.read`` opens it); :func:`read` gives back
    the same IR and state_dict. Written to a temporary file and renamed, as
    :func:`nirbridge.write` does.
    """
    io.write(path, to_nir(ir, state_dict, input_shape=input_shape, type_map=type_map))


def read(
    path: str | os.PathLike[str],
    *,
    type_map: Mapping[type, FromNir] | None = None,
    ir_version: str | None = None,
    as_dicts: bool = False,
) -> tuple[Any, StateDict]:
    """Read a ``.nir`` file as ``(ir, state_dict)`` (see :func:`from_nir`, which takes
    the same ``ir_version`` and ``as_dicts``).

    An IR written without shapes (``input_shape=`` given to :func:`write`) comes back
    without them, as it was; give ``input_shape`` again to convert it.
    """
    return from_nir(path, type_map=type_map, ir_version=ir_version, as_dicts=as_dicts)

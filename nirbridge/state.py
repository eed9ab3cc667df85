"""The state contract of modules built by :func:`nirbridge.nir_to_torch`.

A state is a plain dict with two namespaces, so that no node name can collide with
anything else::

    {"nodes":   {node_name: node_state, ...},    # NamedTuples of tensors; nested
                                                 # subgraphs hold a state of this form
     "delayed": {source_name: tensor, ...}}      # previous outputs for delayed edges

``gm(x)`` starts from the initial state; ``gm(x, state)`` returns a *new* dict and never
modifies the one passed in. States work with ``torch.utils._pytree`` (``tree_map`` to
detach or move them), ``copy.deepcopy`` and pickling.

The outer dict a module or :func:`nirbridge.run` returns is a :class:`State`: a ``dict``
in every respect (``isinstance(state, dict)``, pickling, ``tree_map``, which rebuilds a
``State``), whose deep copy also works while autograd records: torch refuses to
deep-copy a tensor computed from parameters that require gradients (a non-leaf), so the
copy holds those values detached, as a snapshot must.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .errors import NirBridgeError

NODES = "nodes"
DELAYED = "delayed"

__all__ = ["DELAYED", "NODES", "State", "StateError", "unpack_state"]


class StateError(NirBridgeError):
    """A state passed to a module is not of the form the module returned."""


def unpack_state(state: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a state into its node and delayed-output namespaces (empty for ``None``)."""
    if state is None:
        return {}, {}
    if not isinstance(state, dict) or not set(state) <= {NODES, DELAYED}:
        keys = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise StateError(
            f"state must be None or the dict a previous call returned, with keys "
            f"{NODES!r} and {DELAYED!r}; got {keys}. Pass state=None to start afresh."
        )
    nodes, delayed = state.get(NODES) or {}, state.get(DELAYED) or {}
    for key, value in ((NODES, nodes), (DELAYED, delayed)):
        if not isinstance(value, dict):
            raise StateError(
                f"state[{key!r}] is a {type(value).__name__}; a state holds a dict there, as a previous "
                "call returned it. Pass state=None to start afresh."
            )
    return nodes, delayed


class State(dict):
    """The state a module or :func:`nirbridge.run` returns: a plain ``dict`` (keys
    ``"nodes"`` and ``"delayed"`` for a graph), with a deep copy that works while
    autograd records.

    ``copy.deepcopy(state)`` copies every tensor; a tensor that autograd computed (not
    a leaf, which torch itself refuses to deep-copy) is copied detached, with
    ``requires_grad=False``: the copy is a snapshot of the values, cut from the graph of
    the run that made them. Leaf tensors are deep-copied as torch does (keeping
    ``requires_grad``). ``torch.utils._pytree`` sees it as a dict, so ``tree_map``
    returns a ``State``.
    """

    __slots__ = ("_stamp",)  # see nirbridge.checks.stamped: no copy or rebuild carries it

    def __deepcopy__(self, memo: dict[int, Any]) -> State:
        for leaf in pytree.tree_leaves(dict(self)):
            if isinstance(leaf, torch.Tensor) and not leaf.is_leaf and id(leaf) not in memo:
                memo[id(leaf)] = leaf.detach().clone()
        return State({copy.deepcopy(key, memo): copy.deepcopy(value, memo) for key, value in self.items()})

    def __reduce__(self) -> Any:
        return (State, (dict(self),))


def _flatten(state: State) -> tuple[list[Any], Any]:
    return list(state.values()), list(state.keys())


def _unflatten(values: Any, keys: Any) -> State:
    return State(zip(keys, values))


def _flatten_with_keys(state: State) -> tuple[list[tuple[Any, Any]], Any]:
    return [(pytree.MappingKey(k), v) for k, v in state.items()], list(state.keys())


pytree.register_pytree_node(
    State,
    _flatten,
    _unflatten,
    serialized_type_name="nirbridge.state.State",
    flatten_with_keys_fn=_flatten_with_keys,
)


def same_form(given: Any, expected: Any, at: str, name: str, batch: int) -> None:
    """Raise :class:`StateError` where ``given`` (a state passed in, or a part of it at
    ``at``) is not of the form ``expected`` (what ``name`` keeps there for a batch of
    ``batch``): the same mapping keys, sequence types (NamedTuples by class) and
    lengths, and tensors of the same shape, dtype and device."""
    again = "pass the state an earlier run of this model returned, unchanged, or state=None to start afresh"
    if isinstance(expected, torch.Tensor):
        if not isinstance(given, torch.Tensor):
            raise StateError(f"{at} is {type(given).__name__}, {name} keeps a tensor there; {again}")
        if given.shape != expected.shape:
            if given.dim() == expected.dim() >= 1 and given.shape[1:] == expected.shape[1:]:
                raise StateError(
                    f"{at} has batch {given.shape[0]}, the input batch {batch}: a state continues the same "
                    "samples; pass state=None to start afresh"
                )
            raise StateError(
                f"{at} has shape {list(given.shape)}, {name} keeps {list(expected.shape)} there for a batch "
                f"of {batch}: the state comes from another model; {again}"
            )
        if given.dtype != expected.dtype:
            raise StateError(
                f"{at} is {given.dtype}, {name} keeps {expected.dtype} there; convert the state with the "
                f"model (tree_map(lambda t: t.to({expected.dtype}), state)), or {again}"
            )
        if given.device != expected.device:
            raise StateError(
                f"{at} is on {given.device}, {name} keeps it on {expected.device}; move the state with the "
                f"model (tree_map(lambda t: t.to('{expected.device}'), state)), or {again}"
            )
        return
    if isinstance(expected, Mapping):
        if not isinstance(given, Mapping) or set(given) != set(expected):
            got = sorted(map(str, given)) if isinstance(given, Mapping) else type(given).__name__
            raise StateError(f"{at}: {name} keeps {sorted(map(str, expected))} there, got {got}; {again}")
        for key in expected:
            same_form(given[key], expected[key], f"{at}[{key!r}]", name, batch)
        return
    if isinstance(expected, (tuple, list)):
        if type(given) is not type(expected) or len(given) != len(expected):
            what = type(given).__name__ + (f" of {len(given)}" if isinstance(given, (tuple, list)) else "")
            raise StateError(
                f"{at} is a {what}, {name} keeps a {type(expected).__name__} of {len(expected)} there; "
                + again
            )
        fields = getattr(expected, "_fields", None)
        for i, (g, e) in enumerate(zip(given, expected)):
            same_form(g, e, f"{at}.{fields[i]}" if fields else f"{at}[{i}]", name, batch)
        return
    if type(given) is not type(expected) or (expected is None and given is not None):
        raise StateError(
            f"{at} is {type(given).__name__}, {name} keeps {type(expected).__name__} there; {again}"
        )

"""The state contract of modules built by :func:`nirbridge.nir_to_torch`.

A state is a plain dict with two namespaces, so that no node name can collide with
anything else::

    {"nodes":   {node_name: node_state, ...},    # NamedTuples of tensors; nested
                                                 # subgraphs hold a state of this form
     "delayed": {source_name: tensor, ...}}      # previous outputs for delayed edges

``gm(x)`` starts from the initial state; ``gm(x, state)`` returns a *new* dict and never
modifies the one passed in. States work with ``torch.utils._pytree`` (``tree_map`` to
detach or move them), ``copy.deepcopy`` and pickling.
"""

from __future__ import annotations

from typing import Any

from .errors import NirBridgeError

NODES = "nodes"
DELAYED = "delayed"

__all__ = ["DELAYED", "NODES", "StateError", "unpack_state"]


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
    return state.get(NODES) or {}, state.get(DELAYED) or {}

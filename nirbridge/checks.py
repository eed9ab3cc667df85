"""Call-time checks of a module built by :func:`nirbridge.nir_to_torch`.

Every call ``gm(*inputs, state=...)`` first runs :func:`check_step`, which looks only at
shapes, dtypes and dictionary keys (never at the data), so a mistake gets an error
naming the Input node, the state key and the fix instead of a torch error from deep
inside, or worse, a different answer:

- an input whose shape fits its Input node's shape neither as a batch ``[B, *shape]``
  nor as one sample ``shape`` (the tensor's rank decides which reading applies; a
  sample is a batch of one, and the outputs come back without the batch axis, as torch
  layers take unbatched inputs), or a time-first sequence ``[T, B, ...]`` given to one
  step (:class:`InputError`);
- bool and integer tensors (spikes), and floats of a narrower type, are cast to the
  module's floating dtype; a float that the module's dtype cannot hold exactly is an
  :class:`InputError` where one of nirbridge's own modules takes it (casting would
  round it), and is passed on as it is where only modules of the user's ``node_map``
  take it (they decide how they compute, as in nirtorch); what such a module returns
  to nirbridge's modules is cast or refused alike (:func:`check_output`);
- a state from another graph or another simulator's import, with misspelled, missing or
  extra keys, entries of another type, or another batch size (:class:`StateError`; a
  batch-1 state is broadcast over the input's batch, as torch broadcasts).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx

from .errors import InputError, ShapeMismatchError
from .state import DELAYED, NODES, State, StateError, unpack_state

__all__ = [
    "check_delayed",
    "check_keys",
    "check_output",
    "check_state_tensors",
    "check_step",
    "check_types",
    "holds",
    "check_integers",
    "stamped",
    "tensor_kind_problem",
    "rounding_problem",
    "state_type_name",
    "unbatch",
]

# state types whose first field is batch first, for the batch-size check
_BATCH_FIRST = frozenset({"IState", "CubaLIState"})


def check_keys(
    nodes: dict[str, Any],
    delayed: dict[str, Any],
    expected_nodes: Any,
    expected_delayed: Any,
    where: str,
) -> None:
    """Raise :class:`StateError` unless a state's node and delayed keys are the expected ones."""
    problems = []
    for kind, got, want in (("node", nodes, expected_nodes), ("delayed", delayed, expected_delayed)):
        got, want = set(got), set(want)
        unexpected, missing = sorted(map(str, got - want)), sorted(want - got)
        if unexpected:
            problems.append(f"unexpected {kind} keys {unexpected}")
        if missing:
            problems.append(f"missing {kind} keys {missing}")
    if problems:
        raise StateError(
            f"{where} does not belong to this module ({'; '.join(problems)}); pass the state this "
            "module returned, or state=None to start afresh"
        )


def check_types(nodes: dict[str, Any], keys: Any, kinds: Any, where: str) -> None:
    """Raise :class:`StateError` where ``nodes[key]``'s type is not named ``kind``
    (``None``: any type)."""
    wrong = [
        f"{key!r} holds a {type(nodes[key]).__name__}, this module's a {kind}"
        for key, kind in zip(keys, kinds)
        if kind is not None and type(nodes[key]).__name__ != kind
    ]
    if wrong:
        raise StateError(
            f"{where}[{NODES!r}] entries of another type: {'; '.join(wrong)}. The state comes from "
            "another module (another simulator's import of the graph?); pass the state this module "
            "returned, or state=None to start afresh"
        )


def check_state_tensors(
    nodes: dict[str, Any],
    keys: Any,
    shapes: Any,
    reference: torch.Tensor,
    batch: int | None,
    where: str,
) -> None:
    """Raise :class:`StateError` where a state entry of a node whose layout is known
    (``shapes``: each node's feature shape, ``None`` where unknown) holds something other
    than tensors on ``reference``'s device and dtype, shaped ``[..., B, *features]`` with
    ``B`` the batch (or 1). A state sliced, replaced or moved before it is passed back
    would otherwise broadcast silently or fail deep inside a step."""
    dtype, index, meta = reference.dtype, reference.get_device(), reference.is_meta
    for key, feature in zip(keys, shapes):
        if feature is None:
            continue
        entry = nodes[key]
        for value in entry:  # the fast path: one pass of cheap tests, the words only on failure
            if not _like(value, dtype, index, meta):
                _state_problem(entry, key, feature, reference, batch, where)
            shape = value.shape
            if shape[1:] != feature or (batch is not None and shape[0] != batch and shape[0] != 1):
                if not _fits(shape, feature, batch):  # a delay's history has a leading axis
                    _state_problem(entry, key, feature, reference, batch, where)


def _like(value: Any, dtype: torch.dtype, index: int, meta: bool) -> bool:
    """Whether ``value`` is a tensor of ``dtype`` on the device ``index`` (``get_device()``:
    -1 for the CPU) and as meta (no data) as the module: the cheap test of the fast path."""
    return (
        isinstance(value, torch.Tensor)
        and value.dtype == dtype
        and value.get_device() == index
        and value.is_meta == meta
    )


def _fits(shape: torch.Size, feature: tuple[int, ...], batch: int | None) -> bool:
    """Whether ``shape`` is ``[..., B, *feature]`` with ``B`` the batch or 1."""
    size = len(feature)
    if len(shape) < size + 1 or (size and tuple(shape[-size:]) != feature):
        return False
    return batch is None or shape[-size - 1] in (batch, 1)


def _state_problem(
    entry: Any, key: str, feature: tuple[int, ...], reference: torch.Tensor, batch: int | None, where: str
) -> None:
    """Raise the :class:`StateError` saying what is wrong with one node's state entry."""
    for field, value in zip(getattr(entry, "_fields", ()), entry):
        _tensor_problem(value, f"{where}[{NODES!r}][{key!r}].{field}", key, feature, reference, batch, False)


def _tensor_problem(
    value: Any,
    at: str,
    key: str,
    feature: tuple[int, ...] | None,
    reference: torch.Tensor,
    batch: int | None,
    exact: bool,
) -> None:
    """Raise the :class:`StateError` saying what is wrong with one state tensor ``at``;
    ``exact``: no axes before the batch (a delayed output, not a delay's history)."""
    if not isinstance(value, torch.Tensor):
        raise StateError(
            f"{at} is {type(value).__name__}, not a tensor; pass the state this module returned "
            "unchanged, or state=None to start afresh"
        )
    if value.device != reference.device:
        raise StateError(
            f"{at} is on {value.device}, the module on {reference.device}; move the whole state "
            f"with the module, or pass state=None to start afresh"
        )
    if value.dtype != reference.dtype:
        raise StateError(
            f"{at} is {value.dtype}, the module computes in {reference.dtype}; pass the state this "
            "module returned, or state=None to start afresh"
        )
    if feature is None:
        return
    shape = tuple(value.shape)
    if len(shape) == len(feature) + 1 and shape[1:] == feature and batch is not None:
        if shape[0] not in (batch, 1):
            raise StateError(
                f"{at} holds a batch of {shape[0]} but the input a batch of {batch}; keep the batch "
                "size within a sequence (a batch-1 state is broadcast over any batch), or pass state=None"
            )
    if not _fits(value.shape, feature, batch) or (exact and len(shape) != len(feature) + 1):
        wanted = ", ".join(map(str, ("B", *feature)))
        raise StateError(
            f"{at} has shape {list(shape)}, but node {key!r} keeps [{wanted}]"
            + (f" with B = {batch}" if batch is not None else "")
            + "; pass the state this module returned unchanged (not sliced), or state=None"
        )


def check_delayed(
    delayed: dict[str, Any],
    keys: Any,
    shapes: Any,
    reference: torch.Tensor,
    batch: int | None,
    where: str,
) -> None:
    """Raise :class:`StateError` where a delayed output kept in a state (the previous
    output of a delayed edge's source) is not a tensor on ``reference``'s device and
    dtype shaped ``[B, *features]`` (``shapes``: each source's feature shape, ``None``
    where unknown): it is added to a node's input, so a wrong one would broadcast
    silently or fail deep inside a step."""
    dtype, index, meta = reference.dtype, reference.get_device(), reference.is_meta
    for key, feature in zip(keys, shapes):
        value = delayed[key]
        if not (
            _like(value, dtype, index, meta)
            and (
                feature is None
                or (
                    value.shape[1:] == feature
                    and value.dim() == len(feature) + 1
                    and (batch is None or value.shape[0] in (batch, 1))
                )
            )
        ):
            _tensor_problem(value, f"{where}[{DELAYED!r}][{key!r}]", key, feature, reference, batch, True)


def check_output(
    out: Any,
    node: str,
    shape: tuple[int, ...] | None,
    lead: int = 1,
    reference: torch.Tensor | None = None,
    takers: tuple[str, ...] = (),
) -> Any:
    """Return ``out`` once a user's module (from ``node_map``) returned a tensor, of the
    shape the graph expects after ``lead`` leading axes (batch; time and batch in
    :func:`nirbridge.run`) where the graph fixes one; otherwise a
    :class:`ShapeMismatchError` naming the node. Where nodes of nirbridge's own
    (``takers``) take the output, it is cast to ``reference``'s dtype if that holds it
    exactly and refused if not, as inputs are (:func:`check_step`)."""
    if not isinstance(out, torch.Tensor):
        raise ShapeMismatchError(
            f"node {node!r}: its module (from node_map) returned a {type(out).__name__}, not a tensor; "
            "a stateless module returns the node's output, a stateful one (forward(x, state)) returns "
            "(output, state)"
        )
    if shape is not None and tuple(out.shape[lead:]) != shape:
        axes = "B" if lead == 1 else "T, B"
        raise ShapeMismatchError(
            f"node {node!r}: its module (from node_map) returned shape {list(out.shape)}, but the graph "
            f"expects [{', '.join(map(str, (axes, *shape)))}] there; make the module return the NIR "
            "node's output shape (batch first)"
        )
    if reference is not None and out.dtype != reference.dtype:
        if out.is_floating_point() and not holds(reference.dtype, out.dtype):
            raise ShapeMismatchError(
                f"node {node!r}: its module (from node_map) returned {out.dtype}, but {_nodes(takers)} in "
                f"{reference.dtype}, which cannot hold every {out.dtype} value: casting would round it "
                f"and change the results. Make the module return {reference.dtype}, or build the module "
                f"with nir_to_torch(..., dtype={out.dtype})"
            )
        out = out.to(reference.dtype)
    return out


def state_type_name(module: torch.nn.Module) -> str | None:
    """The name of the type a stateful module's state has, where the module declares it
    (``state_type``); a nested graph's state is a dict."""
    if isinstance(module, fx.GraphModule):
        return "dict"
    kind = getattr(module, "state_type", None)
    return kind.__name__ if isinstance(kind, type) else None


def check_step(state: Any, inputs: tuple[torch.Tensor, ...], reference: torch.Tensor, spec: tuple) -> tuple:
    """Check one call's inputs and state; return ``(node_states, delayed, single, *inputs)``:
    ``single`` is True where the inputs are single samples (given batch axis 1 here, to
    be removed from the outputs by :func:`unbatch`), and the inputs are batch first and
    cast to ``reference``'s dtype where that is exact.

    ``spec`` is ``(top level?, input names, input shapes (None where unknown), stateful
    node names, their state type names (None where unknown), delayed sources, the
    feature shapes of their states and of the delayed sources' outputs (None where
    unknown), for each input the nodes of nirbridge's own that take it directly)``,
    fixed when the module is built; a nested graph's inputs come checked from its parent.
    """
    top, names, shapes, node_keys, state_types, delayed_keys, state_shapes, delayed_shapes, takers = spec
    batch = None
    single = None
    checked = []
    device, dtype = reference.device, reference.dtype  # read once: each read makes an object
    for name, x, shape, own in zip(names, inputs, shapes, takers):
        if not top:  # a nested graph: its parent checked and cast the input
            checked.append(x)
            batch = x.shape[0]
            continue
        if not isinstance(x, torch.Tensor):
            raise InputError(f"input {name!r} is a {type(x).__name__}; pass a tensor [B, ...]")
        if x.layout != _STRIDED or x.is_nested:  # a quantized tensor is caught by its dtype below
            raise InputError(f"input {name!r} is {tensor_kind_problem(x)}")
        if x.device != device:
            raise InputError(
                f"input {name!r} is on {x.device} but the module on {device}; pass x.to({str(device)!r})"
            )
        size = x.shape
        one = shape is not None and size == shape  # the rank decides: [*shape] or [B, *shape]
        if not one:
            if not size:
                raise InputError(f"input {name!r} is a number (0-d tensor); pass a batch of values [B, ...]")
            if shape is not None and size[1:] != shape:
                raise InputError(_shape_problem(name, tuple(size), shape))
        if single is None:
            single = one
        elif one != single:
            raise InputError(_mixed_batches(names, inputs, shapes))
        if one:
            x = x.unsqueeze(0)
        given = x.dtype
        if given != dtype:
            if x.is_quantized:
                raise InputError(f"input {name!r} is {tensor_kind_problem(x)}")
            if not x.is_floating_point():
                if x.is_complex():
                    raise InputError(f"input {name!r} is complex ({given}); pass real values")
                if not holds(dtype, given):
                    check_integers(name, x, dtype, own)
                x = x.to(dtype)
            elif holds(dtype, given):
                x = x.to(dtype)  # a narrower float: every value is kept exactly
            elif own:
                raise InputError(rounding_problem(name, given, dtype, own))
        if batch is None:
            batch = x.shape[0]
        elif x.shape[0] != batch:
            raise InputError(f"inputs disagree on the batch size: {x.shape[0]} for {name!r}, {batch} before")
        checked.append(x)
    single = bool(single)
    if state is None:
        return {}, {}, single, batch, *checked
    stamp = getattr(state, "_stamp", None)
    if stamp is not None and stamp[0] is reference and stamp[1] == batch and _untouched(state, stamp):
        return state[NODES], state[DELAYED], single, batch, *checked  # checked when it was made
    nodes, delayed = unpack_state(state)
    if (
        len(nodes) != len(node_keys)
        or len(delayed) != len(delayed_keys)
        or not all(key in nodes for key in node_keys)
        or not all(key in delayed for key in delayed_keys)
    ):
        check_keys(nodes, delayed, node_keys, delayed_keys, "state")  # raises, listing them
    state_batch = None  # from the first entry that is batch first
    for key, kind in zip(node_keys, state_types):  # one pass: types, and the state's batch
        if kind is not None:
            entry = nodes[key]
            if type(entry).__name__ != kind:
                check_types(nodes, node_keys, state_types, "state")  # raises, listing them all
            if state_batch is None and kind in _BATCH_FIRST and isinstance(entry[0], torch.Tensor):
                state_batch = entry[0].shape[0]
    if state_batch is None:
        for value in delayed.values():
            if isinstance(value, torch.Tensor):
                state_batch = value.shape[0]
                break
    if batch is not None and state_batch is not None and state_batch not in (batch, 1):
        given = "one sample (a batch of 1)" if single else f"a batch of {batch}"
        raise StateError(
            f"the state holds a batch of {state_batch} but the input is {given}; keep the "
            "batch size within a sequence (a batch-1 state is broadcast over any batch), or pass "
            "state=None to start a new one"
        )
    check_state_tensors(nodes, node_keys, state_shapes, reference, batch, "state")
    check_delayed(delayed, delayed_keys, delayed_shapes, reference, batch, "state")
    return nodes, delayed, single, batch, *checked


def stamped(new_state: dict[str, Any], reference: torch.Tensor, batch: int | None, spec: tuple) -> State:
    """The state a top-level forward returns, stamped as made by this module (its dtype
    buffer, replaced when the module changes dtype or device) for this batch, when every
    entry is one of nirbridge's own (a user's module may return any state). Passed back
    unchanged, :func:`check_step` skips validating it again: validating once per new
    state object, not once per step. Replacing an entry, or a namespace, voids it."""
    state = State(new_state)
    if batch is not None and None not in spec[4]:
        nodes, delayed = new_state[NODES], new_state[DELAYED]
        state._stamp = (reference, batch, nodes, delayed, tuple(nodes.values()), tuple(delayed.values()))
    return state


def _untouched(state: Any, stamp: tuple) -> bool:
    """Whether ``state`` still holds, by identity, what it held when stamped."""
    _, _, nodes, delayed, node_values, delayed_values = stamp
    return (
        len(state) == 2
        and state.get(NODES) is nodes
        and state.get(DELAYED) is delayed
        and len(nodes) == len(node_values)
        and len(delayed) == len(delayed_values)
        and all(map(operator.is_, nodes.values(), node_values))
        and all(map(operator.is_, delayed.values(), delayed_values))
    )


def unbatch(out: Any, single: bool) -> Any:
    """The outputs of one call: without their batch axis where the inputs were single
    samples (:func:`check_step` gave them a batch axis of 1), as given otherwise."""
    if not single:
        return out
    if isinstance(out, dict):
        return {key: value.squeeze(0) for key, value in out.items()}
    return out.squeeze(0)


def holds(dtype: torch.dtype, other: torch.dtype) -> bool:
    """Whether ``dtype`` holds every value of ``other`` exactly (bool, integers of at
    most its significand's bits, a narrower float), so that casting to it changes
    nothing whatever the values."""
    if other == torch.bool:
        return True
    if other.is_floating_point and other.itemsize == 1:  # float8: torch will not promote it
        return dtype.is_floating_point and dtype.itemsize >= 2  # every wider float holds its values
    if not other.is_floating_point and not other.is_complex:
        if not dtype.is_floating_point:
            return torch.promote_types(other, dtype) == dtype
        bits = torch.iinfo(other).bits - (1 if torch.iinfo(other).min < 0 else 0)
        return bits <= _significand(dtype)
    return torch.promote_types(other, dtype) == dtype


_STRIDED = torch.strided


def tensor_kind_problem(x: torch.Tensor) -> str | None:
    """What makes ``x`` no input a step can take, with the fix, or ``None``: a sparse,
    nested or quantized tensor (a meta tensor is named where its device is checked)."""
    if x.is_nested:
        return "a nested tensor (rows of different lengths); pad them to one length (x.to_padded_tensor(0))"
    if x.is_quantized:
        return f"a quantized tensor ({x.dtype}); pass x.dequantize()"
    if x.layout != torch.strided:
        return f"a {x.layout} tensor; pass a dense one (x.to_dense())"
    return None


def _significand(dtype: torch.dtype) -> int:
    """Bits of a float's significand, the hidden one included: 24 for float32."""
    return round(-math.log2(torch.finfo(dtype).eps)) + 1


def check_integers(name: str, x: torch.Tensor, dtype: torch.dtype, takers: tuple[str, ...]) -> None:
    """Raise :class:`InputError` where integer input ``x`` holds a value that float
    ``dtype`` would round: beyond 2^24 for float32 (2^11 for float16, 2^8 for bfloat16,
    2^53 for float64). One look at the data, made only for integer types wider than
    that (an int64 or int32 input into float32); bool and narrow integers need none."""
    limit = 2 ** _significand(dtype)
    if x.numel() == 0:
        return
    if x.dtype in (torch.uint16, torch.uint32, torch.uint64):  # torch has no max() for these
        largest = int(x.to(torch.float64).max())
    else:
        largest = int(x.abs().max())
    if largest > limit:
        where = _nodes(takers) if takers else "the module computes"
        raise InputError(
            f"input {name!r} ({x.dtype}) holds {largest}, but {where} in {dtype}, which holds integers "
            f"exactly only up to {limit}: casting would round the input and change the results. Pass "
            f"x.to({dtype}) to accept the rounding, or build the module with a wider dtype"
        )


def rounding_problem(name: str, got: torch.dtype, dtype: torch.dtype, takers: tuple[str, ...]) -> str:
    """Why input ``name`` of dtype ``got`` is refused: ``takers`` (nodes of nirbridge's;
    none: the whole module) compute in ``dtype``, which would round it."""
    where = _nodes(takers) if takers else "the module computes"
    return (
        f"input {name!r} is {got}, but {where} in {dtype}, which cannot hold every {got} value: "
        f"casting would round the input and change the results. Pass x.to({dtype}) to accept the "
        f"rounding, or build the module with nir_to_torch(..., dtype={got})"
    )


def _nodes(names: tuple[str, ...]) -> str:
    """``node 'a' computes`` or ``nodes 'a', 'b' compute``."""
    shown = ", ".join(map(repr, names[:3])) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"node {shown} computes" if len(names) == 1 else f"nodes {shown} compute"


def _mixed_batches(names: Any, inputs: Any, shapes: Any) -> str:
    """The message for inputs of which some are single samples and some batches."""
    readings = []
    for name, x, shape in zip(names, inputs, shapes):
        if isinstance(x, torch.Tensor):
            kind = "one sample" if shape is not None and x.shape == shape else "a batch"
            readings.append(f"{name!r} {list(x.shape)} is {kind}")
    return (
        f"inputs mix single samples and batches ({'; '.join(readings)}); give every input a batch "
        "axis (x.unsqueeze(0) for one sample), or none"
    )


def _shape_problem(name: str, got: tuple[int, ...], shape: tuple[int, ...]) -> str:
    def axes(*lead: str) -> str:
        return "[" + ", ".join(map(str, (*lead, *shape))) + "]"

    message = (
        f"input {name!r} has shape {list(got)}, but Input node {name!r} takes a batch {axes('B')} "
        f"or one sample {list(shape)}"
    )
    if got[2:] == shape:
        return (
            f"{message}. It looks like a sequence {axes('T', 'B')}: a module call computes one time step; "
            "loop over time (for x_t in x: out, state = gm(x_t, state)) or use nirbridge.run(gm, x)"
        )
    return f"{message} (the features the graph was built for, after the batch axis if there is one)"

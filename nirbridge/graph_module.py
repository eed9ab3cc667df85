"""The module :func:`nirbridge.nir_to_torch` returns: :class:`NIRGraphModule`, an fx
``GraphModule`` whose calls compute in full float32, whose dtype changes and
``load_state_dict`` refuse values that would turn into 0 or infinity, and whose
generated code calls its submodules directly; and the helpers that generated code calls
(:func:`add_delayed`, :func:`delayed_only`)."""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx

from . import validate
from .checks import check_output, check_step, stamped, unbatch
from .engine import precision as _precision
from .errors import InputError, ParameterError
from .limits import allocation_failure

__all__ = ["NIRGraphModule", "add_delayed", "delayed_only"]

_DTYPE = "_nirbridge_dtype"  # an empty buffer: the module's dtype, for casting spike inputs
_SPEC = "_nirbridge_spec"  # what the call-time checks check against (nirbridge.checks.check_step)


def add_delayed(x: torch.Tensor, *previous: torch.Tensor | None) -> torch.Tensor:
    """``x`` plus the previous outputs of delayed edges (``None`` at the first step)."""
    for p in previous:
        if p is not None:
            x = x + p
    return x


def delayed_only(
    reference: torch.Tensor,
    shape: tuple[int, ...],
    *previous: torch.Tensor | None,
    like: torch.Tensor | None = None,
) -> torch.Tensor:
    """Input of a node fed only by delayed edges: their sum, zeros at the first step
    (batch as ``reference``'s first axis, dtype and device as ``like``'s, else ``reference``'s)."""
    present = [p for p in previous if p is not None]
    if not present:
        return (reference if like is None else like).new_zeros((reference.shape[0], *shape))
    total = present[0]
    for p in present[1:]:
        total = total + p
    return total


_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)  # torch < 2.3 lacks it
_CALL = re.compile(r"\bself\.([A-Za-z_][A-Za-z0-9_]*)\(")


class _DirectCalls(fx.CodeGen):
    """fx's code generation, with each call ``self.<name>(`` of a submodule written
    ``self._modules[<name>](``: read at each call (so a replaced module is seen), but
    without the failed attribute lookup and ``__getattr__`` through which torch finds
    ``self.<name>``, ~0.7 µs per node and step inside a network's loop. ``self`` is
    never the name of a value in the generated code."""

    def _gen_python_code(self, nodes: Any, root_module: str, *args: Any, **kwargs: Any) -> Any:
        code = super()._gen_python_code(nodes, root_module, *args, **kwargs)
        names = {n.target for n in nodes if n.op == "call_module" and "." not in n.target}
        if root_module != "self" or not names:
            return code

        def direct(match: re.Match[str]) -> str:
            name = match.group(1)
            return f"self._modules[{name!r}](" if name in names else match.group(0)

        return dataclasses.replace(code, src=_CALL.sub(direct, code.src))


class NIRGraphModule(fx.GraphModule):
    """The GraphModule :func:`nir_to_torch` returns.

    Each call computes float32 convolutions and matrix products in full float32 (no
    TF32) unless a :func:`nirbridge.precision` policy is in force, and leaves torch's
    settings as they were (see :mod:`nirbridge.engine.precision`).

    Its generated ``forward`` reaches each submodule through ``self.<name>``; torch
    resolves that in ``__getattr__``, looking through parameters and buffers first.
    Submodules and buffers are looked up first here, saving ~1 µs per node and step (the
    lookup is live, so replaced modules are seen)."""

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # `self=` is an argument to check
        own = self.__dict__
        arity = own.get("_nirbridge_arity")  # (inputs, inputs + state), from the first good call
        if arity is None or kwargs or not arity[0] <= len(args) <= arity[1]:
            self._check_arguments(args, kwargs)
        kind = own.get("_nirbridge_kind")  # the device kind, forgotten when the module moves
        if kind is None:
            reference = own["_buffers"].get(_DTYPE)
            kind = own["_nirbridge_kind"] = reference.device.type if reference is not None else "none"
        try:
            # a policy in force, compiling, or full float32 already: "exact" has nothing to change
            if _precision.MODE.get() is not None or _is_compiling() or _precision.full(kind):
                return super().__call__(*args, **kwargs)
            token = _precision.enter("exact", kind if kind != "none" else None)
            try:
                return super().__call__(*args, **kwargs)
            finally:
                _precision.leave(token)
        except RuntimeError as error:
            failure = allocation_failure(error, "a step", "step a smaller batch")
            if failure is None:
                raise
            raise failure from error

    def recompile(self) -> Any:
        """fx's ``recompile``, with this class's ``__call__`` put back: fx installs a
        wrapper of its own on each instance's class that costs ~4 µs a step and prints
        the generated code to stderr when a call raises."""
        result = super().recompile()
        type(self).__call__ = NIRGraphModule.__call__
        return result

    def _check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise :class:`InputError` for a call that does not fit ``forward(*inputs, state)``."""
        names = self.meta.get("nirbridge", {}).get("arguments")
        if names is not None:
            given = set(names[: len(args)])
            extra = sorted(kwargs.keys() - set(names))
            twice = sorted(given & kwargs.keys())
            missing = [n for n in names if n != "state" and n not in given and n not in kwargs]
            if len(args) > len(names) or extra or twice or missing:
                problem = (
                    f"{', '.join(twice)} given both by position and by name"
                    if twice
                    else f"no value for input(s) {', '.join(missing)}"
                    if missing and not extra and len(args) <= len(names)
                    else f"{len(args)} positional argument(s)" + (f" and {', '.join(extra)}" if extra else "")
                )
                raise InputError(
                    f"this module takes the arguments ({', '.join(names)}), got {problem}; call it as "
                    "out, state = gm(*inputs, state)"
                )
            self.__dict__["_nirbridge_arity"] = (len(names) - 1, len(names))

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        """``.half()``, ``.to(dtype)`` and the like: refused, changing nothing, where the
        new dtype would turn a parameter or buffer into 0 or infinity (as the build
        refuses such values)."""
        self.__dict__.pop("_nirbridge_kind", None)  # the device may change
        if _CASTING.get():
            return super()._apply(fn, recurse)
        _check_cast(self, fn)
        token = _CASTING.set(True)
        try:
            return super()._apply(fn, recurse)
        finally:
            _CASTING.reset(token)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        """torch's ``load_state_dict``, once every tensor fits: a shape other than the
        parameter's, NaN or infinity, a value the module's dtype holds as 0 or infinity,
        or a time constant of 0 or below (unless built with ``allow_negative_tau=True``)
        is refused with a :class:`ParameterError` naming the key and its node, before
        anything is loaded."""
        if isinstance(state_dict, Mapping):
            _check_loaded(self, state_dict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def __getattr__(self, name: str) -> Any:
        own = self.__dict__
        for kind in ("_modules", "_buffers"):  # torch keeps the names of the kinds apart
            found = own.get(kind)
            if found is not None and name in found:
                return found[name]
        return super().__getattr__(name)

    def __deepcopy__(self, memo: dict[int, Any]) -> NIRGraphModule:
        copied = super().__deepcopy__(memo)
        _private_dtype_buffer(copied)  # fx copies it as a persistent buffer
        return copied

    def __reduce__(self) -> Any:
        # fx rebuilds a pickled GraphModule from its code and forgets ``meta``, which
        # holds what nirbridge.run and torch_to_nir need: restore it after rebuilding
        rebuild, arguments = super().__reduce__()
        return _with_meta, (rebuild, arguments, self.meta)


_CASTING: contextvars.ContextVar[bool] = contextvars.ContextVar("casting", default=False)


def _check_cast(module: fx.GraphModule, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Raise :class:`ParameterError`, before anything changes, where ``fn`` gives a
    floating tensor of ``module`` a dtype that holds one of its values as 0 or infinity
    (``m.half()`` of a tau of 1e-8 s, or of a weight of 1e5)."""
    targets: dict[tuple[torch.dtype, torch.device], torch.dtype] = {}
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        key = (tensor.dtype, tensor.device)
        if key not in targets:
            targets[key] = fn(torch.empty(0, dtype=tensor.dtype, device=tensor.device)).dtype
        target = targets[key]
        if not target.is_floating_point or torch.promote_types(tensor.dtype, target) == target:
            continue  # the same dtype, or a wider one: every value kept
        values = tensor.detach()
        lost, cast = _lost_in_cast(values, target)
        if bool(lost.any()):
            value = float(values[lost].reshape(-1)[0])
            becomes = "0" if float(cast[lost].reshape(-1)[0]) == 0 else "infinity"
            raise ParameterError(
                f"{_node_of(module, name)} holds {value:.4g}, which {target} holds as {becomes}: the module "
                f"would compute with it. Keep {tensor.dtype}, or fix the value first; nothing was changed"
            )


def _lost_in_cast(values: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Where casting finite, non-zero ``values`` to ``dtype`` gives 0 or infinity, and the cast."""
    cast = values.to(dtype)
    return (values != 0) & torch.isfinite(values) & ((cast == 0) | ~torch.isfinite(cast)), cast


def _node_of(module: fx.GraphModule, key: str) -> str:
    """``key`` (a parameter's or buffer's path) and the node whose module holds it: the
    longest module path that is the key's owner or one of its parents."""
    paths = module.meta.get("nirbridge", {}).get("module_paths", {})
    owner = key.rsplit(".", 1)[0]
    node = next(
        (
            n
            for n, p in sorted(paths.items(), key=lambda i: -len(i[1]))
            if owner == p or owner.startswith(p + ".")
        ),
        None,
    )
    return f"{key} (node {node!r})" if node is not None else key


def _check_loaded(module: fx.GraphModule, state_dict: Mapping[str, Any]) -> None:
    """What :meth:`NIRGraphModule.load_state_dict` refuses, checked before loading."""
    own = module.state_dict(keep_vars=True)
    negative_ok = module.meta.get("nirbridge", {}).get("allow_negative_tau", False)
    for key, value in state_dict.items():
        mine = own.get(key)
        if mine is None or not isinstance(value, torch.Tensor) or not isinstance(mine, torch.Tensor):
            continue  # torch reports unexpected keys and non-tensors itself
        where = _node_of(module, key)
        try:  # a neuron broadcasts a shared value (a scalar tau) over its neurons
            fits = torch.broadcast_shapes(value.shape, mine.shape) == mine.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ParameterError(
                f"load_state_dict: {where} has shape {tuple(value.shape)}, but the module's is "
                f"{tuple(mine.shape)}; give a tensor of that shape (or build the module from the graph "
                "the weights belong to)"
            )
        if not (value.is_floating_point() and mine.is_floating_point()) or value.numel() == 0:
            continue
        values = value.detach()
        if not bool(torch.isfinite(values).all()):
            raise ParameterError(
                f"load_state_dict: {where} holds NaN or infinity; the equations are meaningless there"
            )
        if bool(_lost_in_cast(values, mine.dtype)[0].any()):
            raise ParameterError(
                f"load_state_dict: {where} holds a value that the module's {mine.dtype} holds as 0 or "
                "infinity; fix the value, or convert the module to a wider dtype first"
            )
        if key.rsplit(".", 1)[-1] in validate.TIME_CONSTANTS:
            if bool((values == 0).any()) or (not negative_ok and bool((values < 0).any())):
                raise ParameterError(
                    f"load_state_dict: {where} is {float(values.min()):.4g} s at its smallest; a time "
                    "constant must be above 0 s"
                    + ("" if negative_ok else " (build with allow_negative_tau=True to load one below 0)")
                )


def _with_meta(rebuild: Callable[..., fx.GraphModule], arguments: tuple, meta: dict) -> fx.GraphModule:
    """fx's rebuild of a pickled module, made a :class:`NIRGraphModule` again (fx
    rebuilds a plain GraphModule, without this class's checks) with its ``meta``."""
    rebuilt = rebuild(*arguments)
    graph = copy.deepcopy(rebuilt.graph)
    graph._tracer_cls = _Retracer
    graph.set_codegen(_DirectCalls())
    module = NIRGraphModule(rebuilt, graph, class_name="NIRGraphModule")
    module.meta.update(meta)
    _private_dtype_buffer(module)  # fx's rebuild forgets that it is not persistent
    return module


def _private_dtype_buffer(module: fx.GraphModule) -> None:
    """Keep the dtype buffer out of ``state_dict`` (fx registers buffers it copies as
    persistent), so the state_dict holds the nodes' parameters only."""
    if _DTYPE in module._buffers:
        module.register_buffer(_DTYPE, module._buffers[_DTYPE], persistent=False)


class _Retracer(fx.Tracer):
    """The tracer fx uses to rebuild a pickled module from its code: nirbridge's state
    helpers are recorded as calls instead of being run on proxies."""

    def __init__(self) -> None:
        super().__init__(
            autowrap_functions=(check_step, check_output, add_delayed, delayed_only, unbatch, stamped)
        )

"""Whether a stateless layer may run over all ``T·B`` rows of a chunk at once and still
give, bit for bit, what stepping it ``B`` rows at a time gives.

Time batching assumes a layer computes each row of its input alone, the same way
whatever the other rows are. Matrix-product libraries do not promise it: on a CPU with
AVX-512, MKL's float32 ``sgemm`` sums a row of a 320-row product in another order than
the same row of an 8-row one (a 256 → 128 Linear differs by up to 6e-7), a product of
one row takes the matrix-vector kernel, and cuBLAS and oneDNN pick kernels by problem
size too. So, under ``precision("exact")``, :func:`time_batched` probes each layer once
per settings, input shape, chunk length, dtype, device and thread count, on random
rows (several draws for a small chunk) and on 0/1 rows, against the same rows ``B`` at
a time, and runs the chunk the fastest way that agrees to the bit:

* ``"flat"``: one call over the ``Tc·B`` rows;
* ``"batched"`` (a plain ``nn.Linear``): one batched product of ``Tc`` products of
  ``B`` rows (``baddbmm``), which libraries compute with the kernel of one such product;
* ``"steps"``: one call per step, as stepping does.

Under ``"fast"`` the chunk always runs as one call.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from . import precision as _precision

__all__ = ["rows_independent", "time_batched", "way"]

_WAYS: dict[tuple[Any, ...], str] = {}


def time_batched(
    module: torch.nn.Module,
    x: torch.Tensor,
    check: Callable[[Any], torch.Tensor] | None = None,
    layer_steps: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor | None] | None = None,
) -> torch.Tensor:
    """``module`` over a chunk ``x`` ``[Tc, B, ...]``, as ``[Tc, B, ...]``, the fastest
    way that equals stepping (see the module's docstring). ``check`` sees each call's
    result first (a user's module may return anything). Where the layer must be
    stepped, a back-end's ``layer_steps`` may run the steps itself (the CPU back-end's
    compiled loop of the same BLAS calls); ``None`` from it: stepped here."""
    steps, batch = x.shape[0], x.shape[1]
    exact = steps > 1 and _precision.active() != "fast"
    key = _key(module, x)
    known = _WAYS.get(key) if exact else "flat"
    if known == "batched" and _can_batch(module, x):
        return _batched(module, x)
    if known in ("batched", "steps"):  # batched, but a hook was added since: every call through it
        ours = known == "steps" and layer_steps is not None and check is None
        found = layer_steps(module, x) if ours else None
        return found if found is not None else _stepped(module, x, check)
    # the run's own call first: a user's module is checked before any probe calls it
    flat = module(x.reshape(-1, *x.shape[2:]))
    if check is not None:
        flat = check(flat)
    if known == "flat" or way(module, x, key) == "flat":
        return flat.reshape(steps, batch, *flat.shape[1:])
    return time_batched(module, x, check, layer_steps)  # probed now: batched or stepped


def way(module: torch.nn.Module, x: torch.Tensor, key: tuple[Any, ...] | None = None) -> str:
    """How a chunk ``x`` ``[Tc, B, ...]`` of ``module`` runs exactly: ``"flat"``,
    ``"batched"`` or ``"steps"``, probed once per key."""
    key = key or _key(module, x)
    found = _WAYS.get(key)
    if found is None:
        try:
            found = _probe(module, x)
        except Exception:  # noqa: BLE001 - a user's layer may refuse random rows: step it, as stepping does
            found = "steps"
        _WAYS[key] = found
    return found


_PROBE_VALUES = 4096  # input values a probe compares at least, over several draws


def _probe(module: torch.nn.Module, x: torch.Tensor) -> str:
    """The first way that gives stepping's bits on random rows, through copies of the
    layer with random weights (the verdict holds for every layer of the key: an
    identity matrix would agree whatever the summation order, and another layer of its
    shape would not): weights and values spread over 13 octaves, weights and values of
    one scale (where terms of like size make every order of summation show: with
    spread ones, one term dominates a short sum and hides it; a 3 → 1 layer in chunks
    of 4 passed the spread probe alone and then differed from stepping in more than
    half of its rows), and 0/1 spikes. Whether two kernels agree depends on the values
    (a fused multiply-add rounds once where a multiply and an add round twice), so a
    small chunk is probed with several draws, at least :data:`_PROBE_VALUES` values
    for each kind of weights (at most 16 draws): one draw of a 2-feature, 6-row chunk
    passed a layer that differed from stepping in the last bit on other values."""
    generator = torch.Generator(device=x.device).manual_seed(0)
    draws = max(1, min(16, -(-_PROBE_VALUES // max(1, x.numel()))))
    pairs = []
    with torch.no_grad():
        for spread in (True, False):
            copied = _with_random_weights(module, generator, spread)
            probes = []
            for _ in range(draws):
                normal = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
                if spread:
                    octaves = torch.randint(-6, 7, x.shape, generator=generator, device=x.device)
                    normal = normal * torch.exp2(octaves.to(x.dtype))
                probes.append(normal)
            probes.append((torch.rand(x.shape, generator=generator, device=x.device) < 0.3).to(x.dtype))
            for p in probes:
                pairs.append((copied, p, torch.stack([copied.forward(p[t]) for t in range(p.shape[0])])))
        if all(torch.equal(_flat(copied, p), s) for copied, p, s in pairs):
            return "flat"
        if _can_batch(module, x) and all(torch.equal(_batched(copied, p), s) for copied, p, s in pairs):
            return "batched"
    return "steps"


def _with_random_weights(
    module: torch.nn.Module, generator: torch.Generator, spread: bool
) -> torch.nn.Module:
    """A copy of ``module`` whose floating parameters are random normal values, spread
    over 13 octaves where ``spread`` (its buffers as they are); ``module`` itself where
    it cannot be copied."""
    try:
        copied = copy.deepcopy(module)
    except Exception:  # noqa: BLE001 - a layer that cannot be copied is probed as it is
        return module
    with torch.no_grad():
        for parameter in copied.parameters():
            if parameter.is_floating_point() and parameter.numel():
                shape, device = parameter.shape, parameter.device
                normal = torch.randn(shape, generator=generator, device=device, dtype=parameter.dtype)
                if spread:
                    octaves = torch.randint(-6, 7, shape, generator=generator, device=device)
                    normal = normal * torch.exp2(octaves.to(parameter.dtype))
                parameter.copy_(normal)
    return copied


def rows_independent(module: torch.nn.Module, x: torch.Tensor) -> bool:
    """Whether ``module`` gives each row of ``x`` ``[Tc, B, ...]`` the same bits over all
    ``Tc·B`` rows at once as over ``B`` at a time."""
    return way(module, x) == "flat"


def _key(module: torch.nn.Module, x: torch.Tensor) -> tuple[Any, ...]:
    parameters = tuple((tuple(p.shape), p.dtype) for p in module.parameters(recurse=True))
    settings = module.extra_repr()  # a convolution's stride, padding, dilation, groups
    return (type(module), settings, parameters, tuple(x.shape), x.dtype, x.device, torch.get_num_threads())


def _can_batch(module: torch.nn.Module, x: torch.Tensor) -> bool:
    """A plain ``nn.Linear`` on ``[Tc, B, features]`` with no hooks (a pre-hook may
    compute the weight, as pruning's does): what :func:`_batched` computes."""
    return (
        isinstance(module, torch.nn.Linear)
        and type(module).forward is torch.nn.Linear.forward
        and x.dim() == 3
        and not (module._forward_hooks or module._forward_pre_hooks)
    )


def _flat(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One probe call over all rows; through ``forward``, so the user's hooks see only
    the run's own calls."""
    flat = module.forward(x.reshape(-1, *x.shape[2:]))
    return flat.reshape(x.shape[0], x.shape[1], *flat.shape[1:])


def _batched(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A plain Linear as ``Tc`` products of ``B`` rows in one batched call."""
    steps = x.shape[0]
    weight = module.weight.t().expand(steps, *module.weight.t().shape)
    if module.bias is None:
        return torch.bmm(x, weight)
    return torch.baddbmm(module.bias.expand(steps, x.shape[1], module.out_features), x, weight)


def _stepped(
    module: torch.nn.Module, x: torch.Tensor, check: Callable[[Any], torch.Tensor] | None
) -> torch.Tensor:
    outs = [module(x[t]) for t in range(x.shape[0])]
    return torch.stack([check(o) for o in outs] if check is not None else outs)

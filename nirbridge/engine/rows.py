"""Whether a stateless layer may run over all ``T·B`` rows of a chunk at once and still
give, bit for bit, what stepping it ``B`` rows at a time gives.

Time batching assumes a layer computes each row of its input alone, the same way
whatever the other rows are. Matrix-product libraries do not promise it: on a CPU with
AVX-512, MKL's float32 ``sgemm`` sums a row of a 320-row product in another order than
the same row of an 8-row one (a 256 → 128 Linear differs by up to 6e-7), and cuBLAS
and oneDNN pick kernels by problem size too. So, under ``precision("exact")``,
:func:`time_batched` probes each layer once per input shape, chunk length, dtype,
device and thread count: the layer on random rows ``[Tc·B, ...]`` against the same rows
``B`` at a time. Where the two agree to the bit, the chunk runs as one call; where they
do not, it runs one call per step, as stepping does, with the same results. Under
``"fast"`` the chunk always runs as one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import precision as _precision

__all__ = ["rows_independent", "time_batched"]

_VERDICTS: dict[tuple[Any, ...], bool] = {}


def time_batched(
    module: torch.nn.Module, x: torch.Tensor, check: Callable[[Any], torch.Tensor] | None = None
) -> torch.Tensor:
    """``module`` over a chunk ``x`` ``[Tc, B, ...]``, as ``[Tc, B, ...]``: one call over
    the ``Tc·B`` rows where that is exact (see the module's docstring), else one per
    step. ``check`` sees each call's result first (a user's module may return anything)."""
    steps, batch = x.shape[0], x.shape[1]
    exact = steps > 1 and _precision.active() != "fast"
    key = _key(module, x)
    if exact and _VERDICTS.get(key) is False:
        return _stepped(module, x, check)
    flat = module(x.reshape(-1, *x.shape[2:]))
    if check is not None:
        flat = check(flat)
    if not exact or rows_independent(module, x, key):
        return flat.reshape(steps, batch, *flat.shape[1:])
    return _stepped(module, x, check)


def rows_independent(module: torch.nn.Module, x: torch.Tensor, key: tuple[Any, ...] | None = None) -> bool:
    """Whether ``module`` gives each row of ``x`` ``[Tc, B, ...]`` the same bits over all
    ``Tc·B`` rows as over ``B``, probed once per shape on random normal and on 0/1 rows."""
    key = key or _key(module, x)
    verdict = _VERDICTS.get(key)
    if verdict is None:
        generator = torch.Generator(device=x.device).manual_seed(0)
        with torch.no_grad():
            normal = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
            spikes = (torch.rand(x.shape, generator=generator, device=x.device) < 0.3).to(x.dtype)
            verdict = all(_same(module, probe) for probe in (normal, spikes))
        _VERDICTS[key] = verdict
    return verdict


def _key(module: torch.nn.Module, x: torch.Tensor) -> tuple[Any, ...]:
    parameters = tuple((tuple(p.shape), p.dtype) for p in module.parameters(recurse=True))
    settings = module.extra_repr()  # a convolution's stride, padding, dilation, groups
    return (type(module), settings, parameters, tuple(x.shape), x.dtype, x.device, torch.get_num_threads())


def _stepped(
    module: torch.nn.Module, x: torch.Tensor, check: Callable[[Any], torch.Tensor] | None
) -> torch.Tensor:
    outs = [module(x[t]) for t in range(x.shape[0])]
    return torch.stack([check(o) for o in outs] if check is not None else outs)


def _same(module: torch.nn.Module, x: torch.Tensor) -> bool:
    """One probe; through ``forward``, so the user's hooks see only the run's own calls."""
    flat = module.forward(x.reshape(-1, *x.shape[2:]))
    stepped = torch.stack([module.forward(x[t]) for t in range(x.shape[0])])
    return torch.equal(flat.reshape(stepped.shape), stepped)

"""The Triton back-end: neuron scans and recurrent loops as GPU kernels (planned).

It will run the schedule of :mod:`.schedule` on CUDA with Triton kernels launched once
per chunk rather than once per step and population, exactly (``enable_fp_fusion=False``
under the ``"exact"`` precision policy), and be tested on the CPU through Triton's
interpreter. Until then, asking for it raises :class:`~nirbridge.BackendUnavailableError`
naming the back-ends that run.
"""

from __future__ import annotations

from typing import Any

from ..errors import BackendUnavailableError

__all__ = ["triton_stepper"]


def triton_stepper(module: Any, level: Any, request: Any) -> Any:
    """Refuses: this version has no Triton kernels."""
    raise BackendUnavailableError(
        "run(backend='triton'): this version of nirbridge has no Triton kernels yet; use "
        "backend='compile' (torch.compile, exact) or backend='eager' (the default)"
    )

"""The run engine: the schedule of a run and the back-ends that carry it out.

* :mod:`.schedule`: the plan of components (stateless nodes over all ``T·B`` rows,
  neurons scanned over time, loops stepped together) and the chunk length;
* :mod:`.eager`: the plan in torch operations, with the in-place neuron kernels of
  :mod:`.kernels`; every device, gradients (BPTT);
* :mod:`.compile`: each chunk as one ``torch.compile``'d function, time loops included;
* :mod:`.triton`: the neuron scans as Triton kernels (CUDA; on the CPU under Triton's
  interpreter, for tests);
* :mod:`.cpu`: the neuron scans, small loops and their gradients as compiled CPU loops
  (numba, :mod:`.cpu_kernels`); ``"auto"`` on the CPU;
* :mod:`.precision`: full float32 inside every call unless ``"fast"`` is asked for.

:func:`nirbridge.run` is the public face; :func:`backend_for` picks a back-end.
Submodules are imported when used: the neuron modules import :mod:`.kernels`, and
the schedule imports the interpreter.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

import torch

from ..errors import ParameterError

__all__ = ["BACKENDS", "Backend", "backend_for"]

Backend = Literal["auto", "eager", "compile", "triton", "cpu"]
BACKENDS: tuple[str, ...] = ("auto", "eager", "compile", "triton", "cpu")


def backend_for(backend: str, device: torch.device | str | None = None) -> str:
    """The back-end a run on ``device`` uses: ``backend`` itself, or for ``"auto"`` the
    fastest exact one.

    ``"auto"`` is ``"triton"`` on CUDA where Triton is installed (one kernel launch per
    neuron population and chunk, and per small recurrent loop, where eager pays several
    per step; exact, and with gradients through its reverse-time kernels); ``"cpu"`` on
    the CPU where numba is installed (the same, as compiled CPU loops, each compiled
    once and cached on disk); ``"eager"`` everywhere else. ``"compile"`` is never
    picked: it spends 10-40 s compiling each module, which a single run does not win
    back.
    """
    if backend not in BACKENDS:
        raise ParameterError(f"run(backend={backend!r}): use 'auto', 'eager', 'compile', 'triton' or 'cpu'")
    if backend != "auto":
        return backend
    kind = torch.device(device).type if device is not None else "cpu"
    if kind == "cuda" and importlib.util.find_spec("triton"):
        return "triton"
    if kind == "cpu" and importlib.util.find_spec("numba"):
        from . import cpu_kernels  # numba may be there and still fail to import

        if cpu_kernels.numba is not None:
            return "cpu"
    return "eager"

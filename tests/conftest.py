from __future__ import annotations

import os
import pathlib
import sys

import nir
import numpy as np
import pytest
import torch

# without a GPU, nirbridge's Triton kernels run on CPU tensors through Triton's
# interpreter, which must be on before the kernels are defined (nirbridge imports them
# when the back-end is first asked for)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tests.reference import Reference

# elasticai.creator 0.68 cannot be imported before Python 3.12, nor 0.66 after 3.11: each
# version's tests run in the virtualenv that has it (.venv312 runs the rest of the suite too),
# which `make test` makes and runs them in (the Makefile's top says how)
collect_ignore = ["test_elasticai_068.py"] if sys.version_info < (3, 12) else ["test_elasticai.py"]

# real .nir files written by other projects, copied from the team's shared/nir-examples
# (sources in SOURCES.md there) so that a clone anywhere runs the same tests
EXAMPLES = pathlib.Path(__file__).resolve().parent / "data" / "nir-examples"


@pytest.fixture
def float64_default():
    """Models built at float64, as comparisons with the numpy reference need, and torch's
    layer initialisation seeded, so every run sees the same models. Modules use it with
    ``pytestmark = pytest.mark.usefixtures("float64_default")``."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(previous)


def t(values) -> torch.Tensor:
    """A float64 tensor of ``values``."""
    return torch.as_tensor(np.asarray(values, dtype=np.float64))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def input_names(graph: nir.NIRGraph) -> list[str]:
    return [n for n, node in graph.nodes.items() if isinstance(node, nir.Input)]


def compare_with_reference(
    gm: torch.nn.Module,
    graph: nir.NIRGraph,
    make_input,
    steps: int,
    dt: float,
    *,
    atol: float = 1e-6,
    transpose: frozenset = frozenset(),
) -> int:
    """Run gm and the numpy reference side by side; return the number of values compared."""
    ref = Reference(graph, dt, transpose)
    names = input_names(graph)
    outputs = [n for n, node in graph.nodes.items() if isinstance(node, nir.Output)]
    state = None
    compared = 0
    for t in range(steps):
        arrays = {n: make_input(t, n) for n in names}
        expected = ref.step(arrays)
        out, state = gm(*(torch.from_numpy(arrays[n]) for n in names), state=state)
        got = {outputs[0]: out} if len(outputs) == 1 else out
        for name in outputs:
            np.testing.assert_allclose(
                got[name].detach().numpy(),
                expected[name],
                atol=atol,
                rtol=1e-10,
                err_msg=f"output {name!r} at step {t}",
            )
            compared += expected[name].size
    return compared

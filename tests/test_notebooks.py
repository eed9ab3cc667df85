"""The notebooks in notebooks/ run from top to bottom in a fresh kernel of this interpreter,
draw their figures, print agreeing verify reports, and are committed without outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SHOWS = {  # notebook: (figures, verify reports it prints)
    "01_export_snntorch.ipynb": (2, 3),
    "02_braille_srnn.ipynb": (4, 3),
    "03_elasticai.ipynb": (1, 0),
}
EXPECTED = sorted(SHOWS)


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    """Older jupyter_core 5.x warns (DeprecationWarning, an error here) that it will move its
    paths to platformdirs unless asked to now; this asks, so no version warns. The kernel
    inherits the environment: an MPLBACKEND=Agg set for headless runs would keep its figures
    from being shown, so the kernel picks its own (inline) backend."""
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)


def kernel_manager() -> AsyncKernelManager:
    """The native python3 kernel of this interpreter: with no kernel directories to search,
    jupyter_client takes ipykernel's own spec, whose argv starts with sys.executable, so a
    python3 kernel spec elsewhere (in ~/.local/share/jupyter, say) or PATH cannot pick another."""
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))
    assert km.kernel_spec.argv[0] == sys.executable, km.kernel_spec.argv
    return km


def execute(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys\nprint(sys.executable, end='')"))
    client = NotebookClient(
        nb,
        km=kernel_manager(),
        kernel_name="python3",
        timeout=300,
        startup_timeout=120,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    # raises CellExecutionError at the first failing cell; the kernel and its client are shut
    # down either way (nbclient leaves a km it was given running unless told to clean up)
    client.execute(cleanup_kc=True)
    [executable] = nb.cells.pop(0).outputs
    assert executable.text == sys.executable, "the kernel ran another interpreter"
    return nb


def outputs(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [output for cell in nb.cells if cell.cell_type == "code" for output in cell.outputs]


def test_the_three_notebooks_are_there():
    assert sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_runs_and_shows_its_figures(name):
    nb = execute(name)
    everything = outputs(nb)
    figures, reports = SHOWS[name]
    assert sum(o.output_type == "display_data" and "image/png" in o.data for o in everything) == figures
    stdout = "".join(o.text for o in everything if o.output_type == "stream" and o.name == "stdout")
    assert stdout.count("verify: equivalent") == reports
    assert "NOT equivalent" not in stdout
    stderr = "".join(o.text for o in everything if o.output_type == "stream" and o.name == "stderr")
    assert not stderr.strip(), f"{name} printed to stderr:\n{stderr}"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_is_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]
            assert "execution" not in cell.metadata, cell.source[:80]

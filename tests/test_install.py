"""Each install recipe of the README and docs/index.md, as a user types it, in a fresh
virtualenv: the extra (and the ``--no-deps`` companion the docs name) installs what its
simulator imports, keeps the torch already there, and the adapter converts a network.

The virtualenvs share one folder of the packages every recipe starts from (torch and
what it needs, and nirbridge's core dependencies: nir, numpy, h5py, click, tqdm, numba),
named by a ``.pth`` file: links to this environment's own, so that torch is "the torch
already installed" and nothing large is downloaded. Everything else comes from pip's
index as it would for a user; a recipe that misses an import fails here.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASE = ["torch", "nir", "numpy", "h5py", "click", "tqdm", "numba", "llvmlite"]

GRAPH = """
import nir, numpy as np
graph = nir.NIRGraph.from_list(
    nir.Affine(weight=np.full((3, 2), 0.6), bias=np.zeros(3)),
    nir.LIF(tau=np.full(3, 1e-3), r=np.full(3, 10.0), v_leak=np.zeros(3),
            v_threshold=np.ones(3), v_reset=np.zeros(3)),
)
graph.metadata["dt"] = 1e-4
"""

STEP = """
import torch
module = adapter.from_nir(graph, dt=1e-4)
state, total = None, 0.0
for _ in range(20):
    out, state = module(torch.ones(1, 2), state)
    total += float(out.sum())
assert total > 0, "no spikes"
"""

# the recipe (pip arguments, one install each, in order) and the check it must pass
RECIPES: dict[str, tuple[list[list[str]], str]] = {
    "snntorch": (
        [["-e", ".[snntorch]"]],
        "from nirbridge.adapters import snntorch as adapter\n" + GRAPH + STEP,
    ),
    "norse": (
        [["-e", ".[norse]"], ["--no-deps", "norse==1.1.0"]],
        "from nirbridge.adapters import norse as adapter\n" + GRAPH + STEP,
    ),
    "spikingjelly": (
        [["-e", ".[spikingjelly]"], ["--no-deps", "spikingjelly==2.0.0"]],
        "from nirbridge.adapters import spikingjelly as adapter\n" + GRAPH + STEP,
    ),
    "elasticai": (
        [["-e", ".[elasticai]"]],
        "import sys, nir, numpy as np\nfrom nirbridge.adapters import elasticai\n"
        "graph = nir.NIRGraph.from_list(nir.Affine(weight=np.full((3, 2), 0.5), bias=np.zeros(3)))\n"
        "version = '0.66' if sys.version_info < (3, 12) else '0.68'\n"
        "ir, weights = elasticai.from_nir(graph, ir_version=version)  # elasticai.creator's own objects\n"
        "back = elasticai.to_nir(ir, weights)\n"
        "assert any(isinstance(n, nir.Affine) for n in back.nodes.values()), back.nodes\n",
    ),
    "plot": (
        [["-e", ".[plot]"]],
        "import matplotlib\nmatplotlib.use('Agg')\nimport torch, nirbridge\n"
        + GRAPH
        + "run = nirbridge.run(graph, torch.ones(20, 1, 2), record='all')\nrun.plot()\n",
    ),
    "conformance": (
        [["-e", ".[conformance]"], ["--no-deps", "norse==1.1.0", "spikingjelly==2.0.0"]],
        "import os, tempfile, nirbridge\nfrom nirbridge.conformance import conformance\n"
        + GRAPH
        + "path = os.path.join(tempfile.mkdtemp(), 'g.nir')\nnirbridge.write(path, graph)\n"
        + "report = conformance([path], ['norse', 'snntorch', 'spikingjelly'], steps=20)\n"
        + "assert all(r.loads for r in report.results), [(r.simulator, r.error) for r in report.results]\n",
    ),
}


def distributions(names: list[str]) -> dict[str, metadata.Distribution]:
    """``names`` and everything they require (what is installed of it), by name."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.split(r"[\s;<>=!~\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if not name or name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional requirement that is not installed
        found[name] = dist
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return found


def shared_base(folder: Path) -> Path:
    """A folder of links to this environment's files of :data:`BASE` and what they require."""
    folder.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for dist in distributions(BASE).values():
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = site / top
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


def install(recipe: str, base: Path, folder: Path) -> subprocess.CompletedProcess:
    """A fresh virtualenv, the recipe's installs, then its check; all output kept."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", MPLBACKEND="Agg")
    venv = folder / recipe
    log = []

    def call(*command: str, cwd: Path = ROOT) -> bool:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        log.append(f"$ {' '.join(command)}\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
        return done.returncode == 0

    source = folder / f"{recipe}-source"  # editable installs write egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "nirbridge", source / "nirbridge", ignore=shutil.ignore_patterns("__pycache__"))
    python = str(venv / "bin" / "python")
    ok = call(sys.executable, "-m", "venv", str(venv))
    if ok:
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        Path(site, "nirbridge-recipe-base.pth").write_text(f"{base}\n")
    steps, check = RECIPES[recipe]
    for arguments in steps:
        ok = ok and call(python, "-m", "pip", "install", "-q", *arguments, cwd=source)
    torch_at = "import torch; print(torch.__file__)"
    ok = ok and call(python, "-c", torch_at)
    ok = ok and call(python, "-c", check, cwd=folder)
    return subprocess.CompletedProcess(recipe, 0 if ok else 1, "\n".join(log), "")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("recipes")
    base = shared_base(folder / "base")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = pool.map(lambda recipe: install(recipe, base, folder), RECIPES)
        return dict(zip(RECIPES, done))


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_each_documented_recipe_installs_what_its_adapter_imports_and_keeps_torch(recipe, installed):
    result = installed[recipe]
    assert result.returncode == 0, result.stdout
    torch_file = [line for line in result.stdout.splitlines() if line.endswith("torch/__init__.py")]
    assert torch_file and "/base/torch/" in torch_file[-1], result.stdout  # the torch that was there


def test_the_docs_name_every_tested_recipe():
    """What this file installs is what docs/index.md tells users to type."""
    docs = (ROOT / "docs" / "index.md").read_text()
    for recipe, (steps, _) in RECIPES.items():
        assert f"`.[{recipe}]`" in docs, recipe
        for arguments in steps[1:]:
            for package in arguments[1:]:
                assert f"--no-deps {package}" in docs or package in docs, (recipe, package)

"""The package as a user installs it: ``python -m build`` makes an sdist and, from it, a wheel
that holds every module and the ``py.typed`` marker, and the wheel installs with
``pip install --no-deps --no-index`` into a clean virtualenv, where ``nirbridge --help``
and ``import nirbridge`` work from outside the checkout. And the Makefile's set-up keeps
a torch that its Python already has, whatever the build.

The virtualenv sees the suite's installed packages (torch, nir, ...) through a ``.pth``
file naming the suite's site-packages, so nothing is downloaded. Its own site-packages
comes first on ``sys.path``, and the suite's editable install of nirbridge is a ``.pth``
file that a directory named in a ``.pth`` file does not get processed for: what imports
is the installed wheel, which the test checks by where ``nirbridge.__file__`` lies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nirbridge"


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, f"{' '.join(command)} failed:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


def clean_environment() -> dict[str, str]:
    """This environment without what would put other code on the path."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"}}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def source_files() -> set[str]:
    """Every file of the package in the checkout, as the wheel names them."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_wheel_installs_into_a_clean_virtualenv(tmp_path: Path) -> None:
    env = clean_environment()

    # build from a copy of the sources: an in-tree build would write build/ and
    # nirbridge.egg-info into the checkout, and stale files in build/lib end up in wheels
    source = tmp_path / "source"
    source.mkdir()
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "nirbridge", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)], tmp_path, env)
    [wheel] = dist.glob("nirbridge-*.whl")
    [_sdist] = dist.glob("nirbridge-*.tar.gz")

    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ["nirbridge/py.typed", "nirbridge/__init__.py"] + [
        f"nirbridge/{sub}/__init__.py" for sub in ["cli", "engine", "neurons", "adapters"]
    ]:
        assert required in names, f"{required} is missing from {wheel.name}"
    missing = sorted(source_files() - names)
    assert not missing, f"files of the package missing from {wheel.name}: {missing}"
    assert any(name.endswith(".dist-info/entry_points.txt") for name in names)

    # a clean virtualenv on top of the suite's: its packages through a .pth file, no pip of its own
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    bindir = venv / "bin"
    python = bindir / "python"
    venv_site = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, env
        ).strip()
    )
    suite_site = dict.fromkeys(sysconfig.get_paths()[key] for key in ["purelib", "platlib"])
    (venv_site / "nirbridge-test-suite.pth").write_text("".join(f"{path}\n" for path in suite_site))

    run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            "-q",
            str(wheel),
        ],
        tmp_path,
        env,
    )

    outside = tmp_path / "elsewhere"  # not the checkout, so its nirbridge/ cannot be picked up
    outside.mkdir()
    help_text = run([str(bindir / "nirbridge"), "--help"], outside, env)
    assert "Usage: nirbridge" in help_text, help_text
    for command in ["info", "run", "verify", "convert"]:
        assert command in help_text, help_text

    probe = "import nirbridge, sys; print(nirbridge.__file__); print(sys.prefix)"
    where, prefix = run([str(python), "-c", probe], outside, env).split()
    imported = Path(where).resolve()
    assert Path(prefix).resolve() == venv.resolve(), prefix
    assert imported.is_relative_to(venv_site.resolve()), f"imported {imported}, not the installed wheel"
    assert not imported.is_relative_to(ROOT), f"imported the checkout: {imported}"
    assert (venv_site / "nirbridge" / "py.typed").is_file()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_makefile_keeps_the_torch_its_python_has(tmp_path: Path) -> None:
    """``make`` with a PYTHON that imports torch (here the suite's, in a virtualenv, which
    ``venv --system-site-packages`` would not see) gives .venv that torch, CPU or CUDA build:
    nothing is downloaded, and nothing asserts which build it is."""
    makefile = (ROOT / "Makefile").read_text()
    assert "version.cuda is None" not in makefile and "torch==" not in makefile
    env = {k: v for k, v in clean_environment().items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    venv = tmp_path / "venv"
    output = run(["make", "-s", f"VENV={venv}", f"PYTHON={sys.executable}", f"{venv}/.torch"], ROOT, env)
    assert "torch: " in output, output
    where = run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__file__)"], tmp_path, env)
    assert Path(where.strip()).resolve() == Path(torch.__file__).resolve(), output

"""nirbridge.model_file: a FILE.py:NAME model loaded as ``python FILE.py`` would see it, and
a file that exits instead of giving one refused (the CLI's side: tests/test_cli.py)."""

from __future__ import annotations

import sys

import pytest
import torch

from nirbridge.errors import ParameterError
from nirbridge.model_file import as_script, is_model_file, model_from_file


def test_a_file_runs_beside_its_own_modules_with_its_own_argv_and_everything_is_put_back(tmp_path, capsys):
    (tmp_path / "helper.py").write_text("WIDTH = 3\n")
    (tmp_path / "net.py").write_text(
        "import sys, torch\nfrom helper import WIDTH\nprint('loading', sys.argv)\n"
        "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(WIDTH, 2)\n"
    )
    path, argv = list(sys.path), list(sys.argv)
    try:
        model = model_from_file(f"{tmp_path / 'net.py'}:Net", None)
    finally:
        sys.modules.pop("helper", None)
    assert isinstance(model, torch.nn.Module) and not model.training and model.fc.in_features == 3
    assert sys.path == path and sys.argv == argv
    printed = capsys.readouterr()
    assert "loading" in printed.err and "loading" not in printed.out
    assert f"[{str(tmp_path / 'net.py')!r}]" in printed.err
    with as_script(str(tmp_path / "net.py")):
        assert sys.path[0] == str(tmp_path) and sys.argv == [str(tmp_path / "net.py")]
    assert sys.path == path and sys.argv == argv


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("import sys\nsys.exit(0)\n", "exited (sys.exit or argparse)"),
        ("raise SystemExit('usage: train.py')\n", "exited (usage: train.py)"),
        ("import sys\ndef Net():\n    sys.exit(2)\n", "calling Net() exited with status 2"),
        ("raise GeneratorExit\n", "raised GeneratorExit"),
    ],
)
def test_a_file_that_exits_instead_of_giving_a_model_is_refused(text, says, tmp_path):
    (tmp_path / "script.py").write_text(text)
    with pytest.raises(ParameterError, match=r".*") as caught:
        model_from_file(f"{tmp_path / 'script.py'}:Net", None)
    assert says in str(caught.value) and "script.py" in str(caught.value), caught.value


def test_only_a_python_file_and_a_name_are_a_model_file():
    assert is_model_file("train.py:Net") and is_model_file("a/b/train.py:make_model")
    assert not is_model_file("norse") and not is_model_file("model.nir") and not is_model_file("train.py:1x")

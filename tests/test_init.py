"""The package's own module: every public name resolves on first use, importing the
package itself imports no torch, and run, verify and conformance stay functions."""

from __future__ import annotations

import subprocess
import sys

import nirbridge


def test_every_public_name_resolves_and_is_listed():
    for name in nirbridge.__all__:
        assert getattr(nirbridge, name) is not None, name
    assert set(nirbridge.__all__) <= set(dir(nirbridge))
    assert callable(nirbridge.run) and callable(nirbridge.verify) and callable(nirbridge.conformance)
    assert issubclass(nirbridge.InputError, nirbridge.NirBridgeError)


def test_importing_the_package_imports_no_torch_and_modules_do_not_replace_functions():
    code = (
        "import sys\n"
        "import nirbridge\n"
        "assert 'torch' not in sys.modules, 'torch imported by import nirbridge'\n"
        "import nirbridge.run, nirbridge.verify, nirbridge.conformance.pack\n"
        "from nirbridge.run import Run\n"
        "import types\n"
        "for name in ('run', 'verify', 'conformance'):\n"
        "    value = getattr(nirbridge, name)\n"
        "    assert not isinstance(value, types.ModuleType) and callable(value), (name, value)\n"
        "assert nirbridge.Run is Run and nirbridge.run.__module__ == 'nirbridge.run'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_an_unknown_name_is_an_attribute_error():
    try:
        nirbridge.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no attribute 'no_such_name'" in str(error)
    else:
        raise AssertionError("nirbridge.no_such_name did not raise")


def test_submodules_are_attributes_as_they_were():
    assert nirbridge.errors.NirBridgeError is nirbridge.NirBridgeError
    assert callable(nirbridge.io.read) and nirbridge.engine.__name__ == "nirbridge.engine"

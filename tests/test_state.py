"""nirbridge.state: unpacking and its errors."""

from __future__ import annotations

import pytest

from nirbridge.state import StateError, unpack_state


def test_unpack():
    assert unpack_state(None) == ({}, {})
    assert unpack_state({"nodes": {"a": 1}, "delayed": {}}) == ({"a": 1}, {})


@pytest.mark.parametrize("bad", [{"lif": 1}, [1, 2], "state"])
def test_bad_states(bad):
    with pytest.raises(StateError, match="state=None"):
        unpack_state(bad)

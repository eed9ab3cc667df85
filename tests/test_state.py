"""nirbridge.state: unpacking and its errors."""

from __future__ import annotations

import pytest
import torch

import nirbridge
from nirbridge.state import StateError, unpack_state
from tests.conftest import EXAMPLES


def test_unpack():
    assert unpack_state(None) == ({}, {})
    assert unpack_state({"nodes": {"a": 1}, "delayed": {}}) == ({"a": 1}, {})


@pytest.mark.parametrize("bad", [{"lif": 1}, [1, 2], "state"])
def test_bad_states(bad):
    with pytest.raises(StateError, match="state=None"):
        unpack_state(bad)


def test_a_state_whose_namespaces_are_not_dicts_is_named():
    gm = nirbridge.nir_to_torch(EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir", dt=1e-4)
    x = torch.zeros(1, 12)
    for state in ({"nodes": 1}, {"nodes": {}, "delayed": 3}):
        with pytest.raises(nirbridge.StateError, match=r"state\['(nodes|delayed)'\] is a int"):
            gm(x, state)
        with pytest.raises(nirbridge.StateError, match=r"state\['(nodes|delayed)'\] is a int"):
            nirbridge.run(gm, x[None], state=state)

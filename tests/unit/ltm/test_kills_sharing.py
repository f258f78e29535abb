"""Mutation-kill tests for ``ltm/sharing.py`` (scripts/mutation.sh, docs/testing.md).

Each test checks behaviour against a value computed independently (a closed form written out
again, numpy/scipy in the clear, a second route through the code), never a recorded output.
"""
from __future__ import annotations

import math  # noqa: F401
import warnings  # noqa: F401
from dataclasses import replace as _replace  # noqa: F401

import numpy as np
import pytest

from tests.helpers.kill_helpers import exact as _exact, gate_spec as _gate_spec  # noqa: F401
from ltm import sharing  # noqa: F401
from ltm.randomness import Randomness  # noqa: F401

# --- ltm/sharing.py ------------------------------------------------------------------------------




def test_share_defaults_are_seed_mode_with_server_0_primary():
    x = np.arange(6, dtype=np.uint64).reshape(2, 3)
    shares = sharing.share(x, 3, Randomness.system())
    assert shares[0].data is not None and shares[0].seed is None
    assert all(s.seed is not None and s.data is None for s in shares[1:])
    assert np.array_equal(sharing.reconstruct(shares), x)


def test_share_and_reconstruct_accept_python_integers():
    # Python ints (e.g. from JSON) are ring elements too: the result is the uint64 residue.
    for values in ([1, 2], [1, 2**63, 2**64 - 1]):
        for mode in sharing.SHARE_MODES:
            shares = sharing.share(values, 2, Randomness.system(), mode=mode)
            assert sharing.reconstruct(shares).tolist() == values
    total = sharing.reconstruct([[1, 2], [3, 2**64 - 1]])
    assert total.dtype == np.uint64 and total.tolist() == [4, 1]


def test_sharing_error_messages_are_exact():
    stream = Randomness.system()
    with pytest.raises(ValueError, match=_exact("additive sharing needs at least 2 servers")):
        sharing.share(np.zeros(2, np.uint64), 1, stream)
    with pytest.raises(ValueError, match=_exact("nothing to reconstruct")):
        sharing.reconstruct([])
    with pytest.raises(ValueError, match=_exact("a share holds exactly one of data or seed")):
        sharing.Share(0, (1,))
    with pytest.raises(ValueError, match=_exact("share data does not match its declared shape")):
        sharing.Share(0, (2,), data=np.zeros(3, np.uint64))

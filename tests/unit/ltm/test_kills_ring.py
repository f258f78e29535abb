"""Mutation-kill tests for ``ltm/ring.py`` (scripts/mutation.sh, docs/testing.md).

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

from ltm import ring

# --- ltm/ring.py ---------------------------------------------------------------------------------


def test_encode_uses_float64_even_for_narrow_float_input():
    # float16 cannot hold 1.5 * 2^20; encoding must widen first, so the result equals the float64 one.
    half = np.array([1.5, -2.25], dtype=np.float16)
    assert np.array_equal(ring.encode(half, 20), ring.encode(half.astype(np.float64), 20))
    assert ring.decode(ring.encode(half, 20), 20).tolist() == [1.5, -2.25]


def test_encode_overflow_is_a_value_error_not_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError):  # 1e308·2^40 overflows float64 to inf inside encode
            ring.encode(np.array([1e308]), 40)
        with pytest.raises(ValueError, match="too large for fixed point"):
            ring.encode(np.array([2.0**70]), 0)
        with pytest.raises(ValueError, match="^cannot encode NaN or infinite values$"):
            ring.encode(np.array([np.inf, np.nan]), 16)


def test_decode_and_negate_accept_any_integer_ring_array():
    # Ring elements given as a narrower unsigned type or a Python list mean the same residues.
    narrow = np.array([5, 7], dtype=np.uint32)
    assert ring.decode(narrow, 0).tolist() == [5.0, 7.0]
    assert ring.decode(narrow, 0).dtype == np.float64
    neg = ring.negate([1, 2])
    assert neg.dtype == np.uint64
    assert neg.tolist() == [2**64 - 1, 2**64 - 2]
    assert ring.negate(narrow).tolist() == [2**64 - 5, 2**64 - 7]

"""Mutation-kill tests for ``ltm/sketch.py`` (scripts/mutation.sh, docs/testing.md).

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

# --- ltm/sketch.py --------------------------------------------------------------------------------

from ltm.sketch import CHUNK_CLIENTS, Sketch  # noqa: E402

_SEED = bytes(range(32))


def test_sketch_refusals_are_exact():
    cases = [
        (lambda: Sketch("round", 4, 10, 1, _SEED), "unknown sketch kind 'round'; choose one of "),
        (lambda: Sketch("sparse", 0, 10, 1, _SEED), "sketch needs m ≥ 1 and n ≥ 1"),
        (lambda: Sketch("sparse", 4, 0, 1, _SEED), "sketch needs m ≥ 1 and n ≥ 1"),
        (lambda: Sketch("sparse", 4, 10, 5, _SEED), "sparse sketch needs 1 ≤ s ≤ m (got s=5, m=4)"),
        (lambda: Sketch("sparse", 4, 10, 0, _SEED), "sparse sketch needs 1 ≤ s ≤ m (got s=0, m=4)"),
        (lambda: Sketch("sparse", 4, 10, 1, _SEED[:31]), "the sketch seed must be 32 bytes"),
        (lambda: Sketch("sparse", 4, 10, 1, _SEED).placement(3, 11), "client range [3, 11) outside [0, 10)"),
        (lambda: Sketch("sparse", 4, 10, 1, _SEED).placement(-1, 2), "client range [-1, 2) outside [0, 10)"),
        (lambda: Sketch("sparse", 4, 10, 2, _SEED).apply(0, np.zeros((1, 3, 2), np.uint64)),
         "expected 2 pieces, got 1"),
        (lambda: Sketch("sparse", 10_000, 6_000, 1, _SEED).to_dense(), "to_dense is for small sketches only"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as err:
            make()
        assert str(err.value).startswith(message), (message, str(err.value))
    assert Sketch("sparse", 4, 10, 4, _SEED).pieces == 4 and Sketch("sparse", 1, 1, 1, _SEED).m == 1
    assert Sketch("dense", 5, 10, 1, _SEED).pieces == 5
    assert Sketch("dense", 4, 10, 1, _SEED).scale == 0.5 and Sketch("sparse", 9, 10, 9, _SEED).scale == 1 / 3


def _piece_matrices(sk: Sketch) -> np.ndarray:
    """(pieces, m, n) int64: S_l built entry by entry from the placement (for small sketches)."""
    rows, negative = sk.placement(0, sk.n)
    S = np.zeros((sk.pieces, sk.m, sk.n), dtype=np.int64)
    for l in range(sk.pieces):
        S[l, rows[l], np.arange(sk.n)] = np.where(negative[l], -1, 1)
    return S


@pytest.mark.parametrize("kind, m, s", [("sparse", 7, 3), ("sparse", 70, 2), ("dense", 6, 6), ("sparse", 65, 65)])
def test_sketch_apply_equals_the_matrix_product(kind, m, s):
    sk = Sketch(kind, m, 90, s, _SEED)
    S = _piece_matrices(sk)
    assert np.array_equal(S.sum(axis=0), sk.to_dense())
    if kind == "sparse":  # s distinct rows per column, ±1 each
        assert np.all((S != 0).sum(axis=1) == 1) and np.all((sk.to_dense() != 0).sum(axis=0) == s)
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2**64, size=(sk.pieces, 40, 3), dtype=np.uint64)
    include = rng.random(40) < 0.6
    start = 25
    want = np.zeros((m, 3), dtype=np.uint64)
    for l in range(sk.pieces):  # Σ_l S_l[:, start:start+40] · (values[l] masked), in uint64 (mod 2^64)
        block = S[l, :, start:start + 40] * include[None, :]
        pos = (block == 1).astype(np.uint64) @ values[l]
        neg = (block == -1).astype(np.uint64) @ values[l]
        want += pos - neg
    assert np.array_equal(sk.apply(start, values, include=include), want)
    assert np.array_equal(sk.apply(start, values, include=include, slots=sk.slots()), want)
    base = rng.integers(0, 2**64, size=(m, 3), dtype=np.uint64)
    assert np.array_equal(sk.apply(start, values, out=base.copy(), include=include), base + want)
    # loads: (participant, piece) non-zeros per row
    mask = rng.random(90) < 0.5
    assert np.array_equal(sk.row_loads(mask), (S[:, :, mask] != 0).sum(axis=(0, 2)))
    assert np.array_equal(sk.row_loads(), (S != 0).sum(axis=(0, 2)))
    rows, negative = sk.placement(0, 90)
    assert np.array_equal(sk.slots(), 2 * rows + negative)


def test_sketch_chunks_cover_the_range_in_order():
    sk = Sketch("sparse", 5, 30, 2, _SEED)
    got = list(sk.chunks(3, 29, size=7))
    assert [(a, b) for a, b, _, _ in got] == [(3, 10), (10, 17), (17, 24), (24, 29)]
    rows, negative = sk.placement(3, 29)
    assert np.array_equal(np.concatenate([r for _, _, r, _ in got], axis=1), rows)
    assert np.array_equal(np.concatenate([g for _, _, _, g in got], axis=1), negative)
    assert CHUNK_CLIENTS == 1 << 16


def test_sum_map_is_a_masked_column_sum():
    with pytest.raises(ValueError, match=_exact("the sum map has m = 1 and s = 1 (got m=2, s=1)")):
        Sketch("sum", 2, 10, 1, _SEED)
    with pytest.raises(ValueError, match=_exact("the sum map has m = 1 and s = 1 (got m=1, s=2)")):
        Sketch("sum", 1, 10, 2, _SEED)
    sk = Sketch("sum", 1, 10, 1, _SEED)
    rows, negative = sk.placement(2, 9)
    assert rows.shape == (1, 7) and not rows.any() and not negative.any() and negative.dtype == bool
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2**64, size=(1, 7, 4), dtype=np.uint64)
    include = np.array([1, 0, 1, 1, 0, 1, 1], dtype=bool)
    want = values[0][include].sum(axis=0, dtype=np.uint64)
    assert np.array_equal(sk.apply(2, values, include=include), want[None, :])
    assert np.array_equal(sk.apply(2, values), values[0].sum(axis=0, dtype=np.uint64)[None, :])
    assert np.array_equal(sk.row_loads(), [10]) and sk.scale == 1.0


@pytest.mark.parametrize("kind, m, s", [("sparse", 6, 2), ("sum", 1, 1)])
def test_sketch_apply_over_several_chunks_equals_two_smaller_applies(kind, m, s):
    n = CHUNK_CLIENTS + 5000
    sk = Sketch(kind, m, n + 10, s, _SEED)
    rng = np.random.default_rng(9)
    values = rng.integers(0, 2**64, size=(sk.pieces, n, 2), dtype=np.uint64)
    include = rng.random(n) < 0.7
    got = sk.apply(10, values, include=include)
    cut = 40_000
    want = sk.apply(10, values[:, :cut], include=include[:cut])
    want = sk.apply(10 + cut, values[:, cut:], out=want, include=include[cut:])
    assert got.dtype == np.uint64 and np.array_equal(got, want)
    assert np.array_equal(sk.apply(10, values, include=include, slots=sk.slots()), want)
    rows, _ = sk.placement(0, sk.n)
    loads = sk.row_loads()
    assert loads.dtype == np.int64 and np.array_equal(loads, np.bincount(rows.ravel(), minlength=m))


def test_sketch_outputs_have_integer_types():
    sk = Sketch("sparse", 5, 20, 2, _SEED)
    values = np.ones((2, 20, 3), dtype=np.uint64)
    assert sk.apply(0, values).dtype == np.uint64
    assert sk.to_dense().dtype == np.int64
    assert sk.row_loads(np.ones(20, bool)).dtype == np.int64
    rows, negative = Sketch("sum", 1, 20, 1, _SEED).placement(0, 20)
    assert rows.shape == negative.shape == (1, 20) and rows.dtype == np.int64

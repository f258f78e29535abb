"""The public sketch (ltm.sketch): pinned golden vectors, an independent re-derivation, structural
properties and the uniformity of row choice, piece assignment and signs (docs/architecture.md §3).

Golden vectors and structure are arithmetic (fixed seeds, deterministic).  Uniformity tests use
χ² with rejection only at p < 1e-6: for a correct sketch and ANY seed each fails with probability
≤ 1e-6 (the χ² approximation is accurate: every expected cell count is in the thousands).
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import scipy.stats
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.helpers.optional import require

require("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from ltm.sketch import Sketch

P_THRESHOLD = 1e-6


def digits(*rows: str) -> list[list[int]]:
    """Rows of one-digit values written as strings ("0121" is [0, 1, 2, 1])."""
    return [[int(c) for c in row] for row in rows]


# ----------------------------------------------------------------------------------- golden vectors
# Every server, party and analyst derives S independently from the public seed; if any host derives
# a different matrix the release is garbage.  These vectors were generated once with this code.
# ANY change to the derivation (key schedule, word layout, Floyd/Fisher–Yates, sign bits, modulo
# reduction) breaks cross-host agreement with deployed versions: it must come with a new domain tag
# (bump "ltm/sketch/v1") and new golden vectors, never a silent edit of these.
GOLDEN_SPARSE_SEED = bytes(range(32))
GOLDEN_SPARSE_ROWS = [
    [5, 15, 3, 1, 4, 0, 12, 14, 8, 3, 7, 8, 8, 3, 1, 14, 11, 14, 14, 0, 9, 6, 12, 9, 3, 11, 1, 6, 9, 12, 14, 4,
     12, 0, 2, 15, 9, 10, 11, 15],
    [4, 10, 1, 11, 16, 14, 10, 8, 1, 1, 4, 1, 4, 14, 8, 8, 4, 7, 13, 12, 7, 7, 8, 12, 14, 0, 11, 8, 4, 3, 3, 7,
     0, 3, 11, 7, 2, 5, 1, 6],
    [8, 6, 0, 0, 1, 4, 15, 4, 13, 12, 13, 0, 9, 0, 5, 5, 7, 16, 4, 10, 11, 8, 9, 4, 10, 14, 8, 9, 13, 1, 8, 0,
     16, 8, 7, 5, 14, 9, 16, 4],
]
GOLDEN_SPARSE_NEGATIVE = digits(
    "1110111111001000101011101010010100111010",
    "1010100010101111100000110111100011110001",
    "1000111111011011100001000010010111111100",
)
GOLDEN_DENSE_ROWS = digits("012340123401", "123401234012", "234012340123", "340123401234", "401234012340")
GOLDEN_DENSE_NEGATIVE = digits("111011010110", "000101111111", "000011000001", "100110111111", "100100101010")


def test_golden_sparse_placement():
    rows, negative = Sketch("sparse", m=17, n=40, s=3, seed=GOLDEN_SPARSE_SEED).placement(0, 40)
    assert rows.dtype == np.int64 and negative.dtype == bool and rows.shape == (3, 40)
    assert rows.tolist() == GOLDEN_SPARSE_ROWS
    assert negative.astype(int).tolist() == GOLDEN_SPARSE_NEGATIVE


def test_golden_dense_placement():
    rows, negative = Sketch("dense", 5, 12, 5, bytes(32)).placement(0, 12)
    assert rows.shape == (5, 12)
    assert rows.tolist() == GOLDEN_DENSE_ROWS
    assert negative.astype(int).tolist() == GOLDEN_DENSE_NEGATIVE


# ---------------------------------------------------------------------------- independent derivation
def _kdf(*parts: bytes) -> bytes:
    h = hashlib.shake_256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little") + p)
    return h.digest(32)


def reference_placement(kind: str, m: int, s: int, seed: bytes, start: int, stop: int):
    """The documented derivation in plain Python ints (hashlib + AES only, no numpy arithmetic):
    key = SHAKE-256("ltm/sketch/v1" ‖ kind ‖ m ‖ s ‖ seed); client j owns keystream words
    [j·W, (j+1)·W); sparse: Floyd's s-subset, Fisher–Yates over the s positions, then sign bits;
    dense: piece l holds row (l + j) mod m with the sign bit of that row."""
    key = _kdf(b"ltm/sketch/v1", kind.encode(), str(m).encode(), str(s).encode(), seed)
    pieces = m if kind == "dense" else s
    sign_words = -(-pieces // 64)
    width = sign_words if kind == "dense" else 2 * s + sign_words
    nbytes = 8 * width * stop
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(nbytes))
    words = [int.from_bytes(stream[8 * i:8 * i + 8], "little") for i in range(width * stop)]
    rows = [[0] * (stop - start) for _ in range(pieces)]
    neg = [[False] * (stop - start) for _ in range(pieces)]
    for c, j in enumerate(range(start, stop)):
        w = words[j * width:(j + 1) * width]
        signs = w[width - sign_words:]
        bit = lambda i: bool((signs[i // 64] >> (i % 64)) & 1)  # noqa: E731
        if kind == "dense":
            for l in range(m):
                r = (l + j) % m
                rows[l][c], neg[l][c] = r, bit(r)
            continue
        chosen: list[int] = []
        for step, top in enumerate(range(m - s, m)):
            t = w[step] % (top + 1)
            chosen.append(top if t in chosen else t)
        for i in range(s - 1, 0, -1):
            jj = w[s + i] % (i + 1)
            chosen[i], chosen[jj] = chosen[jj], chosen[i]
        for l in range(s):
            rows[l][c], neg[l][c] = chosen[l], bit(l)
    return rows, neg


def test_golden_vectors_match_the_independent_derivation():
    assert reference_placement("sparse", 17, 3, GOLDEN_SPARSE_SEED, 0, 40) == (
        GOLDEN_SPARSE_ROWS, [[bool(v) for v in r] for r in GOLDEN_SPARSE_NEGATIVE])
    assert reference_placement("dense", 5, 5, bytes(32), 0, 12) == (
        GOLDEN_DENSE_ROWS, [[bool(v) for v in r] for r in GOLDEN_DENSE_NEGATIVE])


@pytest.mark.parametrize("kind,m,s", [("sparse", 1, 1), ("sparse", 9, 1), ("sparse", 130, 5), ("sparse", 70, 70),
                                      ("sparse", 64, 64), ("dense", 70, 70), ("dense", 1, 1), ("dense", 64, 64)])
def test_placement_matches_the_independent_derivation(kind, m, s):
    """Edge layouts: m > 64 (multi-word Floyd bitmask), s = m, and > 64 pieces (two sign words)."""
    seed = hashlib.sha256(f"{kind}{m}{s}".encode()).digest()
    n = 50
    rows, negative = Sketch(kind, m, n, s, seed).placement(7, 41)
    ref_rows, ref_neg = reference_placement(kind, m, s, seed, 7, 41)
    assert rows.tolist() == ref_rows
    assert negative.tolist() == ref_neg


def test_placement_depends_on_every_key_input():
    base = Sketch("sparse", 17, 40, 3, GOLDEN_SPARSE_SEED).placement(0, 40)
    variants = [Sketch("sparse", 18, 40, 3, GOLDEN_SPARSE_SEED), Sketch("sparse", 17, 40, 2, GOLDEN_SPARSE_SEED),
                Sketch("sparse", 17, 40, 3, bytes(32))]
    for v in variants:
        rows, neg = v.placement(0, 40)
        assert rows[:2].tolist() != base[0][:2].tolist() or neg[:2].tolist() != base[1][:2].tolist()
    # n is NOT a key input: extending the client set keeps every existing column
    longer = Sketch("sparse", 17, 100, 3, GOLDEN_SPARSE_SEED).placement(0, 40)
    assert longer[0].tolist() == GOLDEN_SPARSE_ROWS


# ------------------------------------------------------------------------------------ structure
SEEDS = [bytes(32), bytes(range(32)), hashlib.sha256(b"a").digest(), hashlib.sha256(b"b").digest()]
SPARSE_CASES = [(m, s) for m in (1, 5, 17, 70) for s in (1, 2, 3, 5) if s <= m] + [(8, 8)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("m,s", SPARSE_CASES)
def test_sparse_columns_have_s_distinct_signed_rows(seed, m, s):
    n = 300
    sk = Sketch("sparse", m, n, s, seed)
    rows, negative = sk.placement(0, n)
    assert sk.pieces == s and rows.shape == negative.shape == (s, n)
    assert rows.min() >= 0 and rows.max() < m
    assert all(len(set(rows[:, j])) == s for j in range(n))  # s DISTINCT rows per column
    dense = sk.to_dense()
    assert dense.shape == (m, n)
    assert set(np.unique(dense)) <= {-1, 0, 1}
    np.testing.assert_array_equal(np.count_nonzero(dense, axis=0), np.full(n, s))
    # to_dense agrees with the placement entry by entry
    for l in range(s):
        np.testing.assert_array_equal(dense[rows[l], np.arange(n)], np.where(negative[l], -1, 1))
    assert sk.scale == pytest.approx(1 / np.sqrt(s))


@pytest.mark.parametrize("seed", SEEDS[:2])
@pytest.mark.parametrize("kind,m,s", [("sparse", 11, 3), ("dense", 6, 6), ("dense", 70, 70)])
def test_each_piece_has_one_nonzero_per_column(seed, kind, m, s):
    n = 140
    sk = Sketch(kind, m, n, s, seed)
    rows, negative = sk.placement(0, n)
    for l in range(sk.pieces):
        piece = np.zeros((m, n), dtype=np.int64)
        piece[rows[l], np.arange(n)] = np.where(negative[l], -1, 1)
        np.testing.assert_array_equal(np.count_nonzero(piece, axis=0), np.ones(n))
    # the pieces sum to to_dense (no two pieces of a column share a row)
    total = np.zeros((m, n), dtype=np.int64)
    for l in range(sk.pieces):
        np.add.at(total, (rows[l], np.arange(n)), np.where(negative[l], -1, 1))
    np.testing.assert_array_equal(total, sk.to_dense())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("m,n", [(5, 40), (6, 6), (7, 700), (70, 140)])
def test_dense_pieces_have_n_over_m_per_row(seed, m, n):
    sk = Sketch("dense", m, n, m, seed)
    rows, _ = sk.placement(0, n)
    assert sk.pieces == m and rows.shape == (m, n)
    for l in range(m):
        np.testing.assert_array_equal(np.bincount(rows[l], minlength=m), np.full(m, n // m))
    dense = sk.to_dense()
    assert set(np.unique(dense)) == {-1, 1}  # Rademacher: every entry ±1
    np.testing.assert_array_equal(sk.row_loads(), np.full(m, n))
    assert sk.scale == pytest.approx(1 / np.sqrt(m))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["sparse", "dense"]), m=st.integers(1, 80), s_frac=st.floats(0, 1),
       n=st.integers(1, 200), data=st.data(), seed=st.binary(min_size=32, max_size=32))
def test_placement_random_access(kind, m, s_frac, n, data, seed):
    s = m if kind == "dense" else max(1, min(m, int(round(s_frac * m))))
    sk = Sketch(kind, m, n, s, seed)
    a = data.draw(st.integers(0, n))
    b = data.draw(st.integers(a, n))
    rows, negative = sk.placement(0, n)
    sub_rows, sub_negative = sk.placement(a, b)
    np.testing.assert_array_equal(sub_rows, rows[:, a:b])
    np.testing.assert_array_equal(sub_negative, negative[:, a:b])
    # chunked iteration reassembles the same placement
    chunk = data.draw(st.integers(1, n + 1))
    got = np.concatenate([r for _, _, r, _ in sk.chunks(0, n, chunk)], axis=1)
    np.testing.assert_array_equal(got, rows)


@pytest.mark.parametrize("kind,m,s", [("sparse", 13, 4), ("sparse", 70, 2), ("dense", 7, 7)])
def test_slots_and_row_loads_match_placement_and_to_dense(kind, m, s):
    n = 333
    sk = Sketch(kind, m, n, s, hashlib.sha256(kind.encode()).digest())
    rows, negative = sk.placement(0, n)
    slots = sk.slots()
    assert slots.dtype == np.int64 and slots.shape == (sk.pieces, n)
    np.testing.assert_array_equal(slots, 2 * rows + negative)
    dense = sk.to_dense()
    np.testing.assert_array_equal(sk.row_loads(), np.count_nonzero(dense, axis=1))
    mask = np.zeros(n, dtype=bool)
    mask[::3] = True
    mask[100:150] = True
    np.testing.assert_array_equal(sk.row_loads(mask), np.count_nonzero(dense[:, mask], axis=1))
    np.testing.assert_array_equal(sk.row_loads(np.zeros(n, dtype=bool)), np.zeros(m))


@pytest.mark.parametrize("kind,m,s", [("sparse", 9, 3), ("dense", 5, 5)])
@pytest.mark.parametrize("use_slots", [False, True])
def test_apply_equals_the_ring_matrix_product(kind, m, s, use_slots):
    n, width, start, batch = 90, 3, 17, 50
    sk = Sketch(kind, m, n, s, bytes(range(1, 33)))
    rng = np.random.default_rng(0)  # test data, not protocol randomness
    values = rng.integers(0, 2**64, size=(sk.pieces, batch, width), dtype=np.uint64)
    include = rng.random(batch) < 0.7
    out = sk.apply(start, values, include=include, slots=sk.slots() if use_slots else None)
    rows, negative = sk.placement(start, start + batch)
    expected = np.zeros((m, width), dtype=np.uint64)
    for l in range(sk.pieces):
        for j in np.flatnonzero(include):
            v = values[l, j]
            expected[rows[l, j]] += (np.uint64(0) - v) if negative[l, j] else v
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match="pieces"):
        sk.apply(start, values[:1] if sk.pieces > 1 else np.concatenate([values, values]))


def test_sketch_rejects_bad_parameters():
    for args in [("cauchy", 5, 10, 1, bytes(32)), ("sparse", 0, 10, 1, bytes(32)), ("sparse", 5, 0, 1, bytes(32)),
                 ("sparse", 5, 10, 6, bytes(32)), ("sparse", 5, 10, 0, bytes(32)), ("sparse", 5, 10, 1, bytes(31))]:
        with pytest.raises(ValueError):
            Sketch(*args)
    sk = Sketch("sparse", 5, 10, 2, bytes(32))
    for a, b in [(-1, 3), (3, 2), (0, 11)]:
        with pytest.raises(ValueError, match="outside"):
            sk.placement(a, b)


# ------------------------------------------------------------------------------------ uniformity
def _chi2_uniform(counts: np.ndarray) -> float:
    return scipy.stats.chisquare(np.asarray(counts).ravel()).pvalue


@pytest.mark.parametrize("m,s", [(8, 2), (6, 3)])
def test_ordered_row_tuples_are_uniform(m, s):
    """The ordered tuple (row of piece 0, …, row of piece s−1) is uniform over the m!/(m−s)! ordered
    s-tuples of distinct rows: this checks Floyd's subset AND the Fisher–Yates piece assignment (Floyd
    alone would put the large rows in the late pieces).  χ² at p > 1e-6; ≥ 1600 expected per cell."""
    n = 200_000
    rows, _ = Sketch("sparse", m, n, s, hashlib.sha256(b"tuples").digest()).placement(0, n)
    code = np.zeros(n, dtype=np.int64)
    for l in range(s):
        code = code * m + rows[l]
    counts = np.bincount(code, minlength=m**s)
    valid = np.array([len(set(np.unravel_index(c, (m,) * s))) == s for c in range(m**s)])
    assert counts[~valid].sum() == 0
    assert _chi2_uniform(counts[valid]) > P_THRESHOLD


def test_piece_assignment_is_uniform():
    """Which of a column's two rows lands in piece 0: over 200k columns the smaller row is in piece 0
    about half the time; χ² (1 dof) at p > 1e-6."""
    n = 200_000
    rows, _ = Sketch("sparse", 30, n, 2, hashlib.sha256(b"pieces").digest()).placement(0, n)
    first_smaller = int(np.sum(rows[0] < rows[1]))
    assert _chi2_uniform([first_smaller, n - first_smaller]) > P_THRESHOLD


@pytest.mark.parametrize("kind,m,s", [("sparse", 37, 1), ("sparse", 100, 4), ("dense", 16, 16)])
def test_rows_and_signs_are_uniform(kind, m, s):
    """Per piece, (row, sign) is uniform over 2m cells (rows uniform, signs fair and independent of
    the row).  One χ² per piece at p > 1e-6/pieces (Bonferroni: ≤ 1e-6 per case)."""
    n = 100_000
    rows, negative = Sketch(kind, m, n, s, hashlib.sha256(kind.encode() + bytes([m])).digest()).placement(0, n)
    pieces = rows.shape[0]
    for l in range(pieces):
        counts = np.bincount(2 * rows[l] + negative[l], minlength=2 * m)
        assert _chi2_uniform(counts) > P_THRESHOLD / pieces
    # dense: every entry's sign is a fair coin; pooled over the whole matrix
    if kind == "dense":
        assert _chi2_uniform(np.bincount(negative.ravel(), minlength=2)) > P_THRESHOLD


# ====== mutation-kill tests for ltm/sketch.py (scripts/mutation.sh), formerly test_kills_sketch.py
# Each test checks behaviour against a value computed independently (a closed form written out
# again, numpy/scipy in the clear, a second route through the code), never a recorded output.
from ltm.sketch import CHUNK_CLIENTS  # noqa: E402
from tests.helpers.messages import exact as _exact  # noqa: E402

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

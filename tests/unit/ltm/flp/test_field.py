"""Field64 and small-field arithmetic against Python integers; NTT against the definition; byte checks."""
from __future__ import annotations

import numpy as np
import pytest

from ltm.flp.field import FIELD64, Field, FieldError, small_field
from ltm.flp.ntt import intt, ntt

P64 = FIELD64.p
EDGES = [0, 1, 2, P64 - 1, P64 - 2, 2**32, 2**32 - 1, 2**32 + 1, 2**63, P64 - 2**32, 2**64 - 2**33 + 3]


def _operands(field, count=4000, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**64 - 1, count, dtype=np.uint64, endpoint=True) % np.uint64(field.p)
    b = rng.integers(0, 2**64 - 1, count, dtype=np.uint64, endpoint=True) % np.uint64(field.p)
    edges = np.array([e % field.p for e in EDGES], dtype=np.uint64)
    return np.concatenate([a, np.repeat(edges, len(edges))]), np.concatenate([b, np.tile(edges, len(edges))])


@pytest.mark.parametrize("field", [FIELD64, small_field(97), small_field(4294967291)])
def test_arithmetic_matches_python_integers(field):
    a, b = _operands(field)
    p = field.p
    ai, bi = [int(v) for v in a], [int(v) for v in b]
    assert [int(v) for v in field.mul(a, b)] == [x * y % p for x, y in zip(ai, bi)]
    assert [int(v) for v in field.add(a, b)] == [(x + y) % p for x, y in zip(ai, bi)]
    assert [int(v) for v in field.sub(a, b)] == [(x - y) % p for x, y in zip(ai, bi)]
    assert [int(v) for v in field.neg(a)] == [(-x) % p for x in ai]


@pytest.mark.parametrize("field", [FIELD64, small_field(97)])
def test_reduce128_and_matvec(field):
    rng = np.random.default_rng(1)
    lo, hi = (rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True) for _ in range(2))
    lo[:3], hi[:3] = 2**64 - 1, 2**64 - 1  # the largest 128-bit values
    got = field.reduce128(lo, hi)
    assert [int(v) for v in got] == [(int(h) << 64 | int(x)) % field.p for x, h in zip(lo, hi)]
    a, b = _operands(field, 300, seed=2)
    m = a[:300].reshape(3, 100)
    m[0] = field.p - 1  # all-maximal rows make the uint64 half-sums carry
    u = b[:100].copy()
    u[:] = field.p - 1
    want = [sum(int(x) * int(y) for x, y in zip(row, u)) % field.p for row in m]
    assert [int(v) for v in field.matvec(m, u)] == want


@pytest.mark.parametrize("field", [FIELD64, small_field(97)])
def test_ntt_is_evaluation_at_roots_and_inverts(field):
    n = 16
    rng = np.random.default_rng(3)
    c = rng.integers(0, 2**63, (2, n), dtype=np.uint64) % np.uint64(field.p)
    w = field.root_of_unity(n)
    want = [[sum(int(c[r, j]) * pow(w, i * j, field.p) for j in range(n)) % field.p for i in range(n)]
            for r in range(2)]
    assert ntt(field, c).tolist() == want
    assert (intt(field, ntt(field, c)) == c).all()


def test_roots_of_unity_and_generator():
    w = FIELD64.root_of_unity(1 << 32)
    assert pow(w, 1 << 32, P64) == 1 and pow(w, 1 << 31, P64) != 1
    with pytest.raises(FieldError, match="no root of unity of order 64"):
        small_field(97).root_of_unity(64)
    with pytest.raises(FieldError, match="power of two"):
        ntt(FIELD64, np.zeros((1, 12), dtype=np.uint64))


def test_encoding_refuses_bad_bytes_and_non_canonical_elements():
    x = np.array([0, 1, P64 - 1], dtype=np.uint64)
    assert (FIELD64.decode(FIELD64.encode(x), 3) == x).all()
    with pytest.raises(FieldError, match="expected 32 bytes"):
        FIELD64.decode(FIELD64.encode(x), 4)
    with pytest.raises(FieldError, match="multiple of 8"):
        FIELD64.decode(b"\x00" * 7)
    with pytest.raises(FieldError, match="element 1 is not canonical"):
        FIELD64.decode(np.array([5, P64], dtype="<u8").tobytes())
    with pytest.raises(FieldError, match="dtype int64"):
        FIELD64.check(np.array([1, 2]))
    with pytest.raises(FieldError, match="needs a prime"):
        small_field(91)  # 7 · 13
    with pytest.raises(FieldError, match="unsupported field modulus"):
        Field(2**61 - 1, 37, "M61")  # prime, but neither small nor Field64
    with pytest.raises(FieldError, match="no inverse"):
        FIELD64.inv(0)


def test_signed_round_trip():
    v = np.array([-5, 0, 7, -(2**40)], dtype=np.int64)
    assert (FIELD64.to_int(FIELD64.from_int(v)) == v).all()
    f = small_field(97)
    assert f.from_int(np.array([-1]))[0] == 96


def test_matmul_limbs_match_python_integers():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 2**64 - 1, (5, 300), dtype=np.uint64, endpoint=True) % np.uint64(P64)
    m = rng.integers(0, 2**64 - 1, (300, 3), dtype=np.uint64, endpoint=True) % np.uint64(P64)
    a[0], m[:, 0] = P64 - 1, P64 - 1  # the largest limbs everywhere: the partial sums are at their largest
    want = [[sum(int(a[r, i]) * int(m[i, c]) for i in range(300)) % P64 for c in range(3)] for r in range(5)]
    assert FIELD64.matmul(a, m, chunk=2).tolist() == want
    assert small_field(97).matmul(a % np.uint64(97), m % np.uint64(97)).tolist() == [
        [sum(int(a[r, i] % 97) * int(m[i, c] % 97) for i in range(300)) % 97 for c in range(3)] for r in range(5)]


@pytest.mark.parametrize("field", [FIELD64, small_field(97)])
def test_matmul_bits_matches_python_integers(field):
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2, (7, 200), dtype=np.uint64)
    bits[0] = 1
    m = rng.integers(0, 2**64 - 1, (200, 4), dtype=np.uint64, endpoint=True) % np.uint64(field.p)
    m[:, 0] = field.p - 1
    want = [[sum(int(bits[r, i]) * int(m[i, c]) for i in range(200)) % field.p for c in range(4)] for r in range(7)]
    assert field.matmul_bits(bits, m, chunk=3).tolist() == want
    bits[2, 5] = 2
    with pytest.raises(FieldError, match=r"^matmul_bits needs entries 0 or 1$"):
        field.matmul_bits(bits, m)


# ====== mutation-kill tests for ltm/flp/field.py (each value computed independently) ======

def test_inverse_and_its_refusals():
    for field in (FIELD64, small_field(97)):
        for a in (2, 5, field.p - 1):
            assert a * field.inv(a) % field.p == 1
        for zero in (0, field.p, 3 * field.p):  # every multiple of p is 0 in the field
            with pytest.raises(FieldError, match=r"^0 has no inverse$"):
                field.inv(zero)


def test_roots_of_unity_have_exactly_their_order():
    for field, orders in ((FIELD64, (1, 2, 4, 64, 1 << 20)), (small_field(97), (1, 2, 8, 32))):
        for order in orders:
            w = field.root_of_unity(order)
            assert pow(w, order, field.p) == 1
            assert order == 1 or pow(w, order // 2, field.p) == field.p - 1  # primitive: w^(order/2) = −1
        for bad in (0, 3, 6, 12):
            with pytest.raises(FieldError, match=f"no root of unity of order {bad}$"):
                field.root_of_unity(bad)


def test_decode_messages_are_exact():
    with pytest.raises(FieldError, match=r"^field vector of 7 bytes; expected a multiple of 8 bytes$"):
        FIELD64.decode(b"\x00" * 7)
    with pytest.raises(FieldError, match=r"^field vector of 8 bytes; expected 16 bytes \(2 elements\)$"):
        FIELD64.decode(b"\x00" * 8, 2)


def test_encode_and_signed_conversions_are_strict_and_exact():
    with pytest.raises(FieldError, match="dtype int64"):
        FIELD64.encode(np.array([1, 2]))
    with pytest.raises(FieldError, match="not canonical"):
        FIELD64.encode(np.array([P64], dtype=np.uint64))
    assert FIELD64.encode(np.array([1, P64 - 1], dtype=np.uint64)) == (1).to_bytes(8, "little") + (
        P64 - 1).to_bytes(8, "little")
    with pytest.raises(FieldError, match="signed integers, got dtype float64"):
        FIELD64.from_int(np.array([1.0]))
    assert FIELD64.from_int(np.array([0, -1, 1], dtype=np.int32)).tolist() == [0, P64 - 1, 1]
    half = (P64 - 1) // 2  # the largest value to_int reads as positive
    got = FIELD64.to_int(np.array([half, half + 1, 0, P64 - 1], dtype=np.uint64))
    assert got.dtype == np.int64 and got.tolist() == [half, half + 1 - P64, 0, -1]
    with pytest.raises(FieldError, match="dtype int64"):
        FIELD64.to_int(np.array([1]))


def test_primality_and_generators_against_a_sieve():
    from ltm.flp.field import _generator, _is_prime

    limit = 3000
    sieve = np.ones(limit, dtype=bool)
    sieve[:2] = False
    for i in range(2, int(limit**0.5) + 1):
        sieve[i * i::i] = False
    assert [n for n in range(limit) if _is_prime(n)] == np.flatnonzero(sieve).tolist()
    # strong pseudoprimes to the first bases, a Carmichael number, and large primes
    for composite in (561, 2047, 1373653, 25326001, 3215031751, 2152302898747, 3474749660383,
                      341550071728321, 3825123056546413051, (2**32 + 1), P64 + 2):
        assert not _is_prime(composite), composite
    for prime in (2**31 - 1, 4294967291, 4294967311, P64, 2**61 - 1):
        assert _is_prime(prime), prime
    for p in [n for n in range(3, 400) if sieve[n]]:
        g = _generator(p)
        orders = [next(k for k in range(1, p) if pow(c, k, p) == 1) for c in range(2, g + 1)]
        assert orders[-1] == p - 1 and all(o < p - 1 for o in orders[:-1]), p  # the smallest primitive root


def test_field_moduli_at_the_edges():
    assert Field(3, 2, "F3").p == 3 and small_field(3).generator == 2
    for bad in (2, 4294967311):  # too small; a prime just above 2^32
        with pytest.raises(FieldError, match="unsupported field modulus"):
            Field(bad, 1, "bad")
        with pytest.raises(FieldError, match=f"^small_field needs a prime 2 < p < 2\\^32, got {bad}$"):
            small_field(bad)


def test_operations_take_python_integers_exactly():
    """Mid-range Python integers (numpy would hold them as int64; mixing with uint64 would go to float)."""
    a, b = [2**62 + 1, 3, 2**62 + 2**40], [2**62 + 7, 2**61 + 5, 12345]
    for field in (FIELD64,):
        p = field.p
        assert field.add(a, b).tolist() == [(x + y) % p for x, y in zip(a, b)]
        assert field.sub(a, b).tolist() == [(x - y) % p for x, y in zip(a, b)]
        assert field.sub(b, a).tolist() == [(y - x) % p for x, y in zip(a, b)]
        assert field.neg(a).tolist() == [(-x) % p for x in a]
        assert field.mul(a, b).tolist() == [x * y % p for x, y in zip(a, b)]
        assert field.reduce128(a, b).tolist() == [(y << 64 | x) % p for x, y in zip(a, b)]
        assert int(field.matvec(np.array([a], np.uint64), b)[0]) == sum(x * y for x, y in zip(a, b)) % p
        assert field.matmul(np.array([a], np.uint64), np.array(b, np.uint64)[:, None]).tolist() == [
            [sum(x * y for x, y in zip(a, b)) % p]]


def test_scalar_arithmetic_raises_no_overflow_warnings():
    import warnings

    top = np.uint64(P64 - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert int(FIELD64.add(top, top)) == P64 - 2
        assert int(FIELD64.sub(np.uint64(0), top)) == 1
        assert int(FIELD64.mul(top, top)) == 1
        assert int(FIELD64.reduce128(np.uint64(2**64 - 1), np.uint64(2**64 - 1))) == (2**128 - 1) % P64


def test_reduction_edge_words():
    cases = [(P64, 0), (5, 5 << 32), (0, 1 << 32), (2**32 - 1, (2**32 - 1) << 32), (P64 - 1, 1), (0, 0)]
    lo = np.array([c[0] for c in cases], np.uint64)
    hi = np.array([c[1] for c in cases], np.uint64)
    assert FIELD64.reduce128(lo, hi).tolist() == [(h << 64 | x) % P64 for x, h in cases]


def test_from_uniform_words_pairs_low_then_high_word():
    words = np.array([[3, 0, 2**64 - 1, 2**64 - 1, 7, 1], [0, 5, P64, 0, 1, 2**63]], dtype=np.uint64)
    want = [[(int(r[2 * i + 1]) << 64 | int(r[2 * i])) % P64 for i in range(3)] for r in words]
    assert FIELD64.from_uniform_words(words).tolist() == want
    assert FIELD64.from_uniform_words(words[0].tolist()).tolist() == want[0]
    f = small_field(97)
    assert f.from_uniform_words(words).tolist() == [[(int(r[2 * i + 1]) << 64 | int(r[2 * i])) % 97 for i in range(3)]
                                                    for r in words]


def test_sums_whose_low_word_carries():
    """Inputs built so that the two-word assembly of a sum carries out of the low word."""
    m = np.array([[0xFFFFFFFF00000000], [0x00000000FFFFFFFF], [1]], dtype=np.uint64)
    want = (0xFFFFFFFF00000000 + 0xFFFFFFFF + 1) % P64
    assert FIELD64.matmul_bits(np.ones((1, 3), np.uint64), m).tolist() == [[want]]
    assert FIELD64.matvec(m[:, 0], np.ones(3, np.uint64)).tolist() == want
    assert FIELD64.matmul(np.ones((1, 3), np.uint64), m).tolist() == [[want]]


def test_shapes_tall_batched_and_broadcast():
    rng = np.random.default_rng(9)
    f = FIELD64
    a = rng.integers(0, 2**63, (10, 3), dtype=np.uint64)
    m = rng.integers(0, 2**63, (3, 2), dtype=np.uint64)
    want = [[sum(int(a[r, i]) * int(m[i, c]) for i in range(3)) % P64 for c in range(2)] for r in range(10)]
    assert f.matmul(a, m, chunk=2).tolist() == want  # more rows than columns, several chunks
    bits = (a & np.uint64(1))
    want_bits = [[sum(int(bits[r, i]) * int(m[i, c]) for i in range(3)) % P64 for c in range(2)] for r in range(10)]
    assert f.matmul_bits(bits, m, chunk=3).tolist() == want_bits
    cube = a[:6].reshape(2, 3, 3)
    u = m[:, 0]
    assert f.matvec(cube, u).tolist() == [[sum(int(cube[x, y, i]) * int(u[i]) for i in range(3)) % P64
                                           for y in range(3)] for x in range(2)]
    small, full = np.array([2, 3], np.uint64), a[:3, :2]
    for left, right in ((small, full), (full, small), (small[:, None], full[:1])):
        got = f.mul(left, right)
        lb, rb = np.broadcast_arrays(left, right)
        assert got.tolist() == [[int(x) * int(y) % P64 for x, y in zip(rx, ry)] for rx, ry in zip(lb, rb)]

"""ClientSet (ltm/client_set.py) against the plain bool-mask reference it replaces."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltm.client_set import ClientSet, ClientSetError


@st.composite
def masks(draw, n=None):
    n = draw(st.integers(1, 300)) if n is None else n
    # Runs of members and non-members, so sets have several ranges (as real coverage does).
    bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    runs = draw(st.integers(1, 8))
    return np.repeat(np.array(bits, dtype=bool), runs)[:n * runs]


@st.composite
def mask_pairs(draw):
    a = draw(masks())
    b = draw(st.lists(st.booleans(), min_size=len(a), max_size=len(a)))
    return a, np.array(b, dtype=bool)


@settings(max_examples=300, deadline=None)
@given(masks())
def test_round_trips_and_counts_match_the_mask(mask):
    cs = ClientSet.from_mask(mask)
    assert np.array_equal(cs.to_mask(), mask)
    assert cs.count == int(mask.sum())
    assert ClientSet.from_bytes(cs.n, cs.to_bytes()) == cs
    assert cs.digest() == hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()
    # Canonical: sorted, start < stop, separated by a non-member.
    r = cs.ranges
    assert (r[:, 0] < r[:, 1]).all() and (r[1:, 0] > r[:-1, 1]).all()
    n = len(mask)
    cuts = np.arange(n + 1)
    assert np.array_equal(cs.rank(cuts), np.concatenate(([0], np.cumsum(mask))))
    assert cs.complement() == ClientSet.from_mask(~mask)


@settings(max_examples=300, deadline=None)
@given(masks(), st.data())
def test_local_queries_match_the_mask(mask, data):
    n = len(mask)
    a = data.draw(st.integers(0, n))
    b = data.draw(st.integers(a, n))
    cs = ClientSet.from_mask(mask)
    assert np.array_equal(cs.mask(a, b), mask[a:b])
    assert cs.count_in(a, b) == int(mask[a:b].sum())
    assert cs.covers(a, b) == bool(mask[a:b].all())
    assert cs.intersects(a, b) == bool(mask[a:b].any())
    size = data.draw(st.integers(1, 50))
    pieces = list(cs.spans(size))
    assert all(0 < q - p <= size for p, q in pieces)
    covered = np.zeros(n, dtype=bool)
    for p, q in pieces:
        assert not covered[p:q].any()
        covered[p:q] = True
    assert np.array_equal(covered, mask)
    bounds = np.sort(data.draw(st.lists(st.integers(0, n), min_size=2, max_size=6)))
    assert np.array_equal(cs.counts_between(bounds), [int(mask[p:q].sum()) for p, q in zip(bounds[:-1], bounds[1:])])


@settings(max_examples=300, deadline=None)
@given(mask_pairs())
def test_algebra_matches_the_mask(pair):
    a, b = pair
    A, B = ClientSet.from_mask(a), ClientSet.from_mask(b)
    assert (A & B) == ClientSet.from_mask(a & b)
    assert (A | B) == ClientSet.from_mask(a | b)
    assert (A - B) == ClientSet.from_mask(a & ~b)
    assert A.issubset(B) == bool(not (a & ~b).any())
    assert ClientSet.intersection([A, B, A]) == ClientSet.from_mask(a & b)
    assert ClientSet.union([A, B]) == ClientSet.from_mask(a | b)


def test_from_ranges_merges_overlapping_and_adjacent_ranges():
    cs = ClientSet.from_ranges(20, [(5, 8), (0, 2), (2, 3), (7, 10), (12, 12), (15, 20)])
    assert cs.ranges.tolist() == [[0, 3], [5, 10], [15, 20]]
    assert cs.count == 13
    assert ClientSet.full(7).ranges.tolist() == [[0, 7]] and ClientSet.empty(7).count == 0
    assert not ClientSet.empty(3) and ClientSet.full(3)


def test_a_hundred_million_clients_cost_bytes_not_megabytes():
    n = 100_000_000
    held = ClientSet.from_ranges(n, [(i * 65_536, min((i + 1) * 65_536, n)) for i in range(0, n // 65_536 + 1)
                                     if i != 700])
    assert len(held.ranges) == 2 and held.count == n - 65_536
    both = held & ClientSet.span(n, 10, n)
    assert both.count == n - 65_536 - 10 and len(both.to_bytes()) == 32
    assert held.count_in(700 * 65_536, 701 * 65_536) == 0


@pytest.mark.parametrize("data, why", [
    (b"\x00" * 15, "16-byte"),
    (np.array([[3, 3]], dtype="<u8").tobytes(), "start < stop"),
    (np.array([[0, 11]], dtype="<u8").tobytes(), "past n"),
    (np.array([[5, 7], [0, 2]], dtype="<u8").tobytes(), "sorted"),
    (np.array([[0, 2], [2, 4]], dtype="<u8").tobytes(), "sorted and separated"),
    (np.array([[0, 4], [3, 6]], dtype="<u8").tobytes(), "sorted"),
    (np.array([[2**63 + 1, 2**63 + 2]], dtype="<u8").tobytes(), "past n"),
])
def test_from_bytes_refuses_non_canonical_input(data, why):
    with pytest.raises(ClientSetError, match=why):
        ClientSet.from_bytes(10, data)


def test_from_bytes_enforces_the_range_limit_and_coerce_checks_shapes():
    three = ClientSet.from_ranges(10, [(0, 1), (2, 3), (4, 5)])
    with pytest.raises(ClientSetError, match="limit of 2"):
        ClientSet.from_bytes(10, three.to_bytes(), max_ranges=2)
    with pytest.raises(ClientSetError, match="shape"):
        ClientSet.coerce(10, np.ones(9, dtype=bool))
    with pytest.raises(ClientSetError, match="different n|n = 11"):
        ClientSet.coerce(10, ClientSet.full(11))
    with pytest.raises(ClientSetError):
        ClientSet.from_ranges(10, [(0, 11)])
    assert ClientSet.coerce(10, None) == ClientSet.full(10)


@pytest.mark.parametrize("ranges", [[[0, None]], [[0, 1 << 23]], [[1, None]], [[0, (1 << 23) - 1], [1 << 23, None]],
                                    [[5, (1 << 24) + 2]]])
def test_digest_of_whole_member_chunks_equals_the_packed_mask(ranges):
    """Whole 2^23-client chunks of members hash as constant 0xFF bytes (no mask): the same digest."""
    from ltm import client_set
    n = 2 * client_set._MASK_CHUNK + 5
    cs = ClientSet.from_ranges(n, [[a, n if b is None else b] for a, b in ranges])
    assert cs.digest() == hashlib.sha256(np.packbits(cs.to_mask()).tobytes()).hexdigest()

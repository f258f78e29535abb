"""ClientSet (ltm/client_set.py) against the plain bool-mask reference it replaces."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tests.helpers.optional import require

require("hypothesis")
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


# Exact values and messages: each expectation is built independently of ClientSet (a bool mask,
# numpy's packbits, a hand-written range list), so a change to a bound, a message or a dtype fails here.
def _b(pairs) -> bytes:
    return np.array(pairs, dtype="<u8").reshape(-1, 2).tobytes()


def test_from_bytes_checks_each_range_against_its_neighbour_and_keeps_int64():
    # The third range overlaps the second but not the first: a check of each range against the
    # first one only would accept it.
    with pytest.raises(ClientSetError, match=r"^client ranges must be sorted and separated \(merge adjacent ranges\)$"):
        ClientSet.from_bytes(100, _b([(0, 5), (10, 20), (15, 30)]))
    with pytest.raises(ClientSetError, match=r"^every client range needs start < stop$"):
        ClientSet.from_bytes(100, _b([(0, 5), (9, 9)]))
    ok = ClientSet.from_bytes(100, _b([(0, 5), (10, 20), (25, 30)]), max_ranges=3)  # exactly the limit
    assert ok.ranges.dtype == np.int64 and ok.ranges.tolist() == [[0, 5], [10, 20], [25, 30]]
    assert ok.mask(0, 12).tolist() == [True] * 5 + [False] * 5 + [True] * 2


def test_from_ranges_refuses_reversed_ranges_instead_of_dropping_them():
    with pytest.raises(ClientSetError, match=r"^client ranges must satisfy 0 ≤ start ≤ stop ≤ n = 10$"):
        ClientSet.from_ranges(10, [(0, 2), (5, 3)])
    assert ClientSet.from_ranges(10, [(4, 4)]) == ClientSet.empty(10)  # empty ranges are fine
    assert ClientSet.from_ranges(10, np.array([[1, 2]], dtype=np.int32)).ranges.dtype == np.int64


def test_within_returns_only_non_empty_ranges_inside_the_window():
    cs = ClientSet.from_ranges(50, [(0, 10), (20, 30), (40, 50)])
    assert cs.within(10, 40).tolist() == [[20, 30]]  # ranges ending at 10 and starting at 40 touch, no more
    assert cs.within(5, 45).tolist() == [[5, 10], [20, 30], [40, 45]]
    assert cs.within(12, 18).tolist() == []
    assert cs.within(25, 26).tolist() == [[25, 26]]


def test_mask_defaults_cover_every_client_and_to_mask_agrees():
    cs = ClientSet.from_ranges(7, [(0, 1), (3, 5)])
    expect = np.array([1, 0, 0, 1, 1, 0, 0], dtype=bool)
    assert np.array_equal(cs.mask(), expect) and np.array_equal(cs.to_mask(), expect)
    assert np.array_equal(cs.mask(3), expect[3:])


def test_equality_needs_the_same_n_and_hash_follows_equality():
    assert ClientSet.full(5) != ClientSet.span(6, 0, 5)  # same ranges, other n
    assert ClientSet.full(3) != "not a set" and ClientSet.full(3) != None  # noqa: E711
    a = ClientSet.from_ranges(9, [(0, 2), (2, 4)])
    b = ClientSet.span(9, 0, 4)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1


@pytest.mark.parametrize("starts, shown", [
    ([0, 2], "count=2, ranges={[0, 1), [2, 3)}"),
    ([0, 2, 4, 6], "count=4, ranges={[0, 1), [2, 3), [4, 5), [6, 7)}"),
    ([0, 2, 4, 6, 8], "count=5, ranges={[0, 1), [2, 3), [4, 5), [6, 7), … 1 more}"),
    ([0, 2, 4, 6, 8, 10], "count=6, ranges={[0, 1), [2, 3), [4, 5), [6, 7), … 2 more}"),
])
def test_repr_shows_at_most_four_ranges_and_counts_the_rest(starts, shown):
    assert repr(ClientSet.from_ranges(20, [(i, i + 1) for i in starts])) == f"ClientSet(n=20, {shown})"


def test_mixing_a_set_with_another_type_or_n_names_the_problem():
    with pytest.raises(TypeError, match=r"^expected a ClientSet, got str$"):
        ClientSet.full(3) | "x"  # type: ignore[operator]
    with pytest.raises(ClientSetError, match=r"^client sets over different n \(3 and 4\)$"):
        ClientSet.full(3) & ClientSet.full(4)
    with pytest.raises(ValueError, match=r"^intersection of no client sets$"):
        ClientSet.intersection([])
    with pytest.raises(ValueError, match=r"^union of no client sets$"):
        ClientSet.union([])


def test_intersection_and_union_of_one_set_and_of_two_sets():
    a = ClientSet.span(10, 0, 6)
    b = ClientSet.span(10, 4, 10)
    assert ClientSet.intersection([a]) == a and ClientSet.union([a]) == a
    assert ClientSet.intersection([a, b]) == ClientSet.span(10, 4, 6)
    assert ClientSet.union([a, b]) == ClientSet.full(10)


def test_coerce_accepts_a_bool_mask_and_refuses_other_dtypes():
    mask = np.array([0, 1, 1, 0, 1], dtype=bool)
    assert ClientSet.coerce(5, mask) == ClientSet.from_ranges(5, [(1, 3), (4, 5)])
    with pytest.raises(ClientSetError, match=r"^participant mask must be bool of shape \(5,\), got int64 \(5,\)$"):
        ClientSet.coerce(5, mask.astype(np.int64))


def test_from_mask_reads_any_truthy_mask():
    assert ClientSet.from_mask(np.array([0, 1, 1, 0, 2])) == ClientSet.from_ranges(5, [(1, 3), (4, 5)])
    assert ClientSet.from_mask(np.array([0.0, 1.0])) == ClientSet.span(2, 1, 2)


def test_empty_is_a_canonical_int64_set_over_n():
    e = ClientSet.empty(7)
    assert e.n == 7 and e.ranges.shape == (0, 2) and e.ranges.dtype == np.int64
    assert e.to_bytes() == b"" and e.count == 0 and e.first() is None
    assert (e | ClientSet.span(7, 2, 3)).ranges.tolist() == [[2, 3]]


def test_first_is_the_smallest_member():
    assert ClientSet.from_ranges(30, [(12, 20), (5, 8)]).first() == 5


def test_digest_of_a_set_across_mask_chunks_equals_the_packed_mask():
    from ltm import client_set
    n = client_set._MASK_CHUNK + 13
    cs = ClientSet.from_ranges(n, [(3, 10), (client_set._MASK_CHUNK - 2, client_set._MASK_CHUNK + 4), (n - 5, n - 1)])
    mask = np.zeros(n, dtype=bool)
    for a, b in cs.ranges.tolist():
        mask[a:b] = True
    assert cs.digest() == hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()

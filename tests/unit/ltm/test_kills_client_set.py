"""Mutation-kill tests for ``ltm/client_set.py`` (scripts/mutation.sh, docs/testing.md).

ClientSet carries participant sets and coverage through the protocol and decodes them from
hostile peers, so each check is against a value built independently: a bool mask, numpy's packbits,
a hand-written range list.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ltm.client_set import ClientSet, ClientSetError


def _b(pairs) -> bytes:
    return np.array(pairs, dtype="<u8").reshape(-1, 2).tobytes()


def test_from_bytes_checks_every_neighbouring_pair_and_keeps_int64():
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


def test_repr_shows_four_ranges_and_counts_the_rest():
    assert repr(ClientSet.from_ranges(20, [(0, 1), (2, 3)])) == "ClientSet(n=20, count=2, ranges={[0, 1), [2, 3)})"
    four = ClientSet.from_ranges(20, [(0, 1), (2, 3), (4, 5), (6, 7)])
    assert repr(four) == "ClientSet(n=20, count=4, ranges={[0, 1), [2, 3), [4, 5), [6, 7)})"
    six = ClientSet.from_ranges(20, [(i, i + 1) for i in range(0, 12, 2)])
    assert repr(six) == "ClientSet(n=20, count=6, ranges={[0, 1), [2, 3), [4, 5), [6, 7), … 2 more})"


def test_mixing_sets_names_the_problem():
    with pytest.raises(TypeError, match=r"^expected a ClientSet, got str$"):
        ClientSet.full(3) | "x"  # type: ignore[operator]
    with pytest.raises(ClientSetError, match=r"^client sets over different n \(3 and 4\)$"):
        ClientSet.full(3) & ClientSet.full(4)
    with pytest.raises(ValueError, match=r"^intersection of no client sets$"):
        ClientSet.intersection([])
    with pytest.raises(ValueError, match=r"^union of no client sets$"):
        ClientSet.union([])


def test_intersection_and_union_of_one_and_two_sets():
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


def test_digest_spans_several_mask_chunks():
    from ltm import client_set
    n = client_set._MASK_CHUNK + 13
    cs = ClientSet.from_ranges(n, [(3, 10), (client_set._MASK_CHUNK - 2, client_set._MASK_CHUNK + 4), (n - 5, n - 1)])
    mask = np.zeros(n, dtype=bool)
    for a, b in cs.ranges.tolist():
        mask[a:b] = True
    assert cs.digest() == hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()


def test_repr_of_five_ranges_counts_the_fifth():
    five = ClientSet.from_ranges(20, [(i, i + 1) for i in range(0, 10, 2)])
    assert repr(five) == "ClientSet(n=20, count=5, ranges={[0, 1), [2, 3), [4, 5), [6, 7), … 1 more})"

"""``server/coverage.py``'s tests, written to kill its mutants (scripts/mutation.sh, docs/testing.md): checked
against the (n, W) bool table that Coverage replaces, built independently here."""
from __future__ import annotations

import numpy as np

from ltm.client_set import ClientSet
from ltm.server.coverage import Coverage


def test_empty_ranges_hold_nothing_and_keep_the_ranges_canonical():
    cov = Coverage(10, 2)
    cov.add(4, 4, [0, 1])
    cov.add(7, 3, [0])
    assert cov.column_sets() == {} and not cov.to_array().any()
    cov.add(-5, 3, [0, 1])  # clipped to [0, 3)
    assert cov.column_sets() == {(0, 1): ClientSet.span(10, 0, 3)}


def test_held_is_over_the_jobs_n_even_when_a_column_is_missing():
    cov = Coverage(12, 3)
    cov.add(0, 12, [0, 1])
    held = cov.held()
    assert held == ClientSet.empty(12) and held.n == 12
    cov.add(2, 5, [2])
    assert cov.held() == ClientSet.span(12, 2, 5)


def test_to_array_is_the_bool_table():
    cov = Coverage(6, 2)
    cov.add(1, 3, [1])
    table = np.zeros((6, 2), dtype=bool)
    table[1:3, 1] = True
    out = cov.to_array()
    assert out.dtype == bool and np.array_equal(out, table)


def test_equality_is_by_cells_held_however_the_column_sets_were_split():
    a, b = Coverage(8, 2), Coverage(8, 2)
    a.add(0, 4, [0, 1])
    b.add(0, 4, [0])
    b.add(0, 4, [1])
    assert a == b and b == a
    b.add(6, 7, [1])
    assert a != b and b != a
    assert Coverage(8, 2) != Coverage(9, 2) and Coverage(8, 2) != Coverage(8, 3)
    assert Coverage(8, 2) == Coverage(8, 2)
    assert a != "not a coverage"
    c = Coverage(8, 2)
    c.add(0, 4, [0, 1])
    c.add(5, 6, [0])
    assert a != c  # same column sets, different ranges in one column


def test_repr_names_the_shape_and_the_ranges_per_column_set():
    cov = Coverage(9, 2)
    cov.add(0, 2, [0, 1])
    cov.add(4, 6, [0, 1])
    assert repr(cov) == "Coverage(n=9, width=2, {[0, 1]: 2 ranges})"
    many = Coverage(20, 6)
    for c in range(6):
        many.add(c, c + 1, [c])
    assert repr(many) == ("Coverage(n=20, width=6, {[0]: 1 ranges, [1]: 1 ranges, [2]: 1 ranges, "
                          "[3]: 1 ranges})")


def test_a_job_with_no_columns_holds_no_client():
    held = Coverage(5, 0).held()
    assert held == ClientSet.empty(5) and held.n == 5

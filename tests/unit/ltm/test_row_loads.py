"""``honest_row_loads``' shortcuts (closed forms for the sum and dense maps, the cached per-party
table of a sparse sketch, the signless row derivation, the streaming top-c deduction) against a
direct count from the public placement, over every kind, both partitions, full, party-aligned and
ragged participant sets, cached and uncached."""
from __future__ import annotations

import numpy as np
import pytest

from ltm import jobspec
from ltm.client_set import ClientSet
from ltm.jobspec import ColumnSpec, JobSpec, PartySpec, PrivacySpec, ServerSpec, SketchSpec, honest_row_loads
from ltm.randomness import KeystreamBuffer
from ltm.sketch import Sketch


def _spec(kind: str, m: int, s: int, sizes: list[int], partition: str = "rows", t_prime: int = 0,
          corrupt: int = 1) -> JobSpec:
    n = sum(sizes) if partition == "rows" else sizes[0]
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    cols = (ColumnSpec("a", "feature", 0.0, 1.0), ColumnSpec("b", "feature", 0.0, 1.0))
    if partition == "rows":
        parties = tuple(PartySpec(f"party-{i}", int(bounds[i]), int(bounds[i + 1]), (), 1.0)
                        for i in range(len(sizes)))
    else:
        parties = (PartySpec("party-0", 0, n, ("a",), 0.7), PartySpec("party-1", 0, n, ("b",), 0.7))
    return JobSpec(job_id="loads", partition=partition, n=n, columns=cols, parties=parties, clip_bound=1.0,
                   frac_bits=16, sketch=SketchSpec(kind=kind, m=m, s=s if kind == "sparse" else m, seed="07" * 32),
                   privacy=PrivacySpec(epsilon=1.0, delta=1e-6, t_prime=t_prime,
                                       corrupt_parties=corrupt if partition == "rows" else 0),
                   servers=(ServerSpec("server-0", ""), ServerSpec("server-1", "")))


def _direct(spec: JobSpec, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The definition: count every participant's non-zeros from the placement, per party."""
    sketch = spec.make_sketch()
    rows, _ = sketch.placement(0, spec.n)
    m = sketch.m
    per_party = []
    for p in spec.parties:
        keep = np.zeros(spec.n, dtype=bool)
        keep[p.start:p.stop] = mask[p.start:p.stop]
        per_party.append(np.bincount(rows[:, keep].ravel(), minlength=m))
    loads = np.bincount(rows[:, mask].ravel(), minlength=m)
    if spec.partition == "columns":
        return loads, np.zeros(m, dtype=np.int64)
    deduction = np.full(m, spec.privacy.t_prime, dtype=np.int64)
    c = spec.privacy.corrupt_parties
    if c > 0:
        deduction += np.sort(np.stack(per_party), axis=0)[-c:].sum(axis=0)
    return loads, deduction


def _masks(spec: JobSpec, rng: np.random.Generator) -> list[np.ndarray]:
    n = spec.n
    full = np.ones(n, dtype=bool)
    aligned = full.copy()
    first = spec.parties[0]
    aligned[first.start:first.stop] = False  # a whole party absent (an aggregate that never arrived)
    ragged = rng.random(n) < 0.7  # per-client participation
    none_of_last = ragged.copy()
    none_of_last[spec.parties[-1].start:spec.parties[-1].stop] = False
    return [full, aligned, ragged, none_of_last]


CASES = [("sparse", 13, 1), ("sparse", 13, 3), ("dense", 5, 5), ("sum", 1, 1)]


@pytest.mark.parametrize("kind,m,s", CASES)
@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("corrupt,t_prime", [(1, 0), (2, 1), (3, 0), (0, 0)])
def test_rows_partition_matches_direct_count(kind, m, s, cached, corrupt, t_prime, monkeypatch):
    if not cached:  # no per-party table: every party's loads derived per use
        monkeypatch.setattr(jobspec, "_LOAD_TABLE_BYTES", 0)
    spec = _spec(kind, m, s, [150, 70, 200, 1, 90], t_prime=t_prime, corrupt=corrupt)
    rng = np.random.default_rng(3)
    for mask in _masks(spec, rng):
        got = honest_row_loads(spec, ClientSet.from_mask(mask))
        want = _direct(spec, mask)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (kind, mask.sum())
        # the mask form, and the server's cached slots, give the same answer
        slots = spec.make_sketch().slots()
        again = honest_row_loads(spec, mask, None, slots)
        assert np.array_equal(again[0], want[0]) and np.array_equal(again[1], want[1])


@pytest.mark.parametrize("kind,m,s", CASES)
def test_columns_partition_matches_direct_count(kind, m, s):
    spec = _spec(kind, m, s, [333], partition="columns")
    for mask in (np.ones(333, dtype=bool), np.random.default_rng(5).random(333) < 0.5):
        got = honest_row_loads(spec, mask)
        want = _direct(spec, mask)
        assert np.array_equal(got[0], want[0]) and not got[1].any()


def test_uncached_table_matches(monkeypatch):
    """Above the cache's size the per-party loads are derived per use: same answer."""
    spec = _spec("sparse", 13, 1, [150, 70, 200])
    want = honest_row_loads(spec)
    monkeypatch.setattr(jobspec, "_LOAD_TABLE_BYTES", 0)
    got = honest_row_loads(spec)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_cached_table_is_compact_and_read_only():
    """Each party's loads in the smallest unsigned type holding them (uint8 at ~n/m per row), frozen."""
    spec = _spec("sparse", 13, 1, [150, 70, 200])
    segments = jobspec._load_segments(spec)
    small = jobspec._segment_loads(spec.make_sketch(), segments)
    assert small.dtype == np.uint8 and not small.flags.writeable
    big = _spec("sparse", 2, 1, [700, 300])  # ~350 per row: uint16
    table = jobspec._segment_loads(big.make_sketch(), jobspec._load_segments(big))
    assert table.dtype == np.uint16 and table.sum() == 1000


@pytest.mark.parametrize("kind,m,s", [("sparse", 7, 1), ("sparse", 1000, 1), ("sparse", 9, 4), ("dense", 6, 6)])
def test_signless_rows_equal_the_placement(kind, m, s):
    sketch = Sketch(kind, m, 5000, s, bytes(range(32)))
    buffer = KeystreamBuffer(3 * 2000)
    for a, b in [(0, 5000), (17, 1033), (4999, 5000), (3, 3)]:
        expected = sketch.placement(a, b)[0]
        assert np.array_equal(sketch.rows(a, b), expected)
        if b - a <= 2000:
            assert np.array_equal(sketch.rows(a, b, buffer), expected)


def test_warm_validation_loads_the_accountant_in_the_background():
    """The analyst (its privacy report) and the bench harness call it while they start: the accountant's lazy import is then done
    before the first job's validation needs it."""
    import subprocess
    import sys

    code = ("import sys; from ltm.jobspec import warm_validation_in_background as warm; "
            "assert not any(m.startswith('dp_accounting') for m in sys.modules); warm().join(60); "
            "assert 'dp_accounting.rdp.rdp_privacy_accountant' in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]

"""The released noise matches the calibration (docs/architecture.md §4).

Many small in-process jobs (parties → 2 servers → analyst) on a table whose rows are all zero, so
the reconstructed UNSCALED release Y = Σ_l S_l (V + G_l) is pure noise.  Entry (r, c) is the signed
sum of the independent N(0, σ_c²) draws of the load_r (client, piece) pairs hashed to row r, so
Y[r, c] / (√load_r · σ_c) is N(0, 1), and different entries (rows: disjoint pairs; columns:
independent draws; jobs: independent seeds) are independent.

Flake rate: the jobs are seeded (deterministic CI).  For a correct implementation and ANY seeds the
pooled variance test fails with probability ≤ 1e-6 (an exact χ² interval with 5e-7 in each tail)
and the KS test with probability ≤ 1e-6 (reject only at p < 1e-6): ≤ 2e-6 for the file.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from ltm.datasets.tables import Table
from ltm.randomness import Randomness
from ltm.ring import decode
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables

N_CLIENTS, M, S, WIDTH, JOBS = 2000, 10, 2, 30, 40
P_THRESHOLD = 1e-6


def zero_table(n: int, width: int, label: bool = False) -> Table:
    cols = {f"x{j}": np.zeros(n) for j in range(width)}
    if label:
        cols["y"] = np.zeros(n)
    return Table(cols, "y" if label else None, "all zeros")


def run_zero_job(i: int, *, label: bool = False, width: int = WIDTH, **job):
    randomness = Randomness.seeded_insecure(f"release-noise-{i}")
    table = zero_table(N_CLIENTS, width, label)
    spec, _ = build_job(table, job_id=f"zeros-{i}", randomness=randomness, parties=2, k=2,
                        m=job.pop("m", M), s=job.pop("s", S), **job)
    run = run_inprocess(spec, party_tables(spec, table), randomness)
    total = run.result_shares[0].copy()
    for share in run.result_shares[1:]:
        total += share
    return spec, run, decode(total, spec.frac_bits)


@pytest.fixture(scope="module")
def standardized():
    """Pooled Y[r, c] / (√load_r σ_c) over JOBS jobs (JOBS·M·WIDTH = 12 000 values)."""
    values = []
    for i in range(JOBS):
        spec, run, Y = run_zero_job(i)
        assert run.participants.count == spec.n
        plan = spec.noise_plan()
        loads = spec.make_sketch().row_loads()
        assert loads.sum() == N_CLIENTS * S
        assert Y.shape == (M, WIDTH)
        values.append(Y / (np.sqrt(loads)[:, None] * plan.sigma_client))
    return np.concatenate([v.ravel() for v in values])


def test_pooled_variance_is_one(standardized):
    """Σ z² over N i.i.d. N(0,1) is exactly χ²_N: accept inside its central 1 − 1e-6 interval."""
    z = standardized
    n = z.size
    lo, hi = scipy.stats.chi2.ppf(5e-7, n), scipy.stats.chi2.ppf(1 - 5e-7, n)
    ss = float(np.sum(z * z))
    assert lo < ss < hi, f"Σz²/N = {ss / n:.4f} outside [{lo / n:.4f}, {hi / n:.4f}]"
    # the interval is narrow enough to catch a 10% error in σ_c (i.e. 21% in variance) or a
    # forgotten √s / √L factor
    assert hi / n < 1.1 and lo / n > 0.9


def test_pooled_values_are_standard_normal(standardized):
    assert scipy.stats.kstest(standardized, "norm").pvalue > P_THRESHOLD
    # mean 0: z̄ ~ N(0, 1/N); z = 6 band (two-sided 2e-9), independent of the variance test
    assert abs(standardized.mean()) < 6.0 / math.sqrt(standardized.size)


def test_release_matrix_is_the_scaled_unscaled_release():
    spec, run, Y = run_zero_job(1000)
    np.testing.assert_array_equal(run.release.matrix, Y * spec.make_sketch().scale)
    plan = spec.noise_plan()
    loads = spec.make_sketch().row_loads()
    # noise_variance_per_column = Σ_r Var(scaled entry) = Σ_r load_r σ_c² / s = n σ_c²
    assert run.release.noise_variance_per_column == pytest.approx(
        float(np.sum(loads)) * plan.sigma_client**2 / S, rel=1e-12)


@pytest.mark.parametrize("i", range(4))
def test_sigma_at_the_promised_load_is_sigma_release(i):
    """Arithmetic, no statistics: at exactly L honest pairs the entry std √L·σ_c is sigma_release
    (equal up to the float rounding of σ_Y/√L·√L: a few ulp)."""
    spec, run, _ = run_zero_job(2000 + i, label=True, width=4)  # a regression job (label column)
    plan = spec.noise_plan()
    L = spec.privacy.min_honest_load
    assert plan.min_honest_load == L >= 1
    assert plan.sigma_client * math.sqrt(L) == pytest.approx(plan.sigma_release, rel=1e-15, abs=0.0)
    report = run.release.privacy
    assert report["sigma_release"] == plan.sigma_release
    assert report["promised_min_honest_load"] == L
    assert report["min_honest_load"] >= L  # full participation keeps every row at or above L
    assert report["calibration_verified"] is True  # the noise buys (ε, δ) ...
    # ... but these runs are seeded (reproducible, NOT private): never reported as DP
    assert report["dp_verified"] is False and report["seeded_parties"] == ["party-0", "party-1"]


def test_noise_is_independent_across_rows_and_columns():
    """Entries of one release are independent: for a few entry pairs, the correlation over 120
    jobs is tested with scipy.stats.pearsonr, whose p-value is exact for independent normals;
    reject only at p < 1e-6/3 per pair (Bonferroni: ≤ 1e-6 in total)."""
    jobs = 120
    pairs = [((0, 0), (1, 0)), ((0, 0), (0, 1)), ((2, 3), (7, 3))]
    samples = {p: [] for pair in pairs for p in pair}
    for i in range(jobs):
        spec, _, Y = run_zero_job(3000 + i, width=4, m=8, s=2)
        loads = spec.make_sketch().row_loads()
        Z = Y / (np.sqrt(loads)[:, None] * spec.noise_plan().sigma_client)
        for p in samples:
            samples[p].append(Z[p])
    for a, b in pairs:
        assert scipy.stats.pearsonr(samples[a], samples[b]).pvalue > P_THRESHOLD / len(pairs)

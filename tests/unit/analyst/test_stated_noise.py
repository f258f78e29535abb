"""A release states the noise it carries (docs/architecture.md § 4, "What a release states about its noise").

Statistical half: the in-process path (parties → servers → analyst, seeded) is run many times on
all-zero data, so the release is its noise alone, and the empirical variance of each class of
released entries — the Gram's diagonal and its off-diagonal separately, a sketch's column sums
Σ_r Ñ_rc² — is compared with what the release states (:attr:`ReleasedSketch.gram_noise_variance`,
``noise_variance_per_column``).  One spec per configuration, fresh randomness per run: the runs'
noises are independent.

Flake rate.  Each check has a false-failure probability ≤ ``ALPHA`` = 1e-7 whatever the seeds, and
the file makes 10 checks: ≤ 1e-6 in all.
* Gaussian noise (a sum of independent discrete Gaussians with σ ≥ 8 grid steps, Gaussian to far
  below 1e-7 in distribution, as tests/unit/party/test_release_noise.py assumes): Σ z² of N
  standardised entries is χ²_N; accept inside its central 1 − ALPHA interval.
* Laplace noise (sums of k discrete Laplace draws: not Gaussian) — distribution-free, from the
  fourth moment only: a median of means.  The N = GROUPS·g values x²/stated are split into
  GROUPS = 31 groups of g; by Chebyshev a group mean misses [1 − TOL, 1 + TOL] with probability
  ≤ Var(x²/stated)/(g·TOL²) ≤ BAD = 0.12 (g is chosen so; Var = κ − 1 with κ the kurtosis of a sum of k
  DLap(t): 3 + (κ₁ − 3)/k, κ₁ = (1 + 10p + p²)/(2p), p = e^(−1/t)), and the median misses it only
  when 16 of the 31 groups do: P(Bin(31, 0.12) ≥ 16) ≤ 1e-7 (asserted below).
TOL = 0.45 still fails a statement off by 2 either way (the errors these tests were written for:
the replicated release's diagonal stated 2×, the Laplace gram's off-diagonal stated ½×, the
aggregate Laplace upload's variance stated n/P ×); each check was seen to fail with the old rule.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from ltm.datasets.tables import Table
from ltm.jobspec import range_row_loads
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sim.runtime.replicated_run import run_replicated

ALPHA = 1e-7
GROUPS, BAD, TOL = 31, 0.12, 0.45


def test_the_median_of_means_bound_is_what_the_docstring_says():
    assert scipy.stats.binom.sf(GROUPS // 2, GROUPS, BAD) <= ALPHA


def zero_spec(n: int, width: int, **job):
    cols = {f"x{j}": np.zeros(n) for j in range(width - 1)}
    cols["y"] = np.zeros(n)
    table = Table(cols, "y", "all zeros")
    spec, _ = build_job(table, job_id="stated-noise", randomness=Randomness.seeded_insecure("stated-noise-spec"),
                        **job)
    return spec, party_tables(spec, table)


def releases(spec, tables, runs: int, tag: str):
    """``runs`` releases of the same zero-data job, each with fresh seeded noise."""
    run = run_replicated if spec.replicated else run_inprocess
    for i in range(runs):
        yield run(spec, tables, Randomness.seeded_insecure(f"stated-noise-{tag}-{i}")).release


def gram_classes(rels):
    """(diagonal, off-diagonal) pairs (released noise, stated variance), concatenated over releases."""
    diag, off = ([], []), ([], [])
    for rel in rels:
        G, V = rel.gram, rel.gram_noise_variance
        iu = np.triu_indices(G.shape[0], 1)
        diag[0].append(np.diag(G)), diag[1].append(np.diag(V))
        off[0].append(G[iu]), off[1].append(V[iu])
    return tuple((np.concatenate(x), np.concatenate(v)) for x, v in (diag, off))


def check_gaussian(noise: np.ndarray, stated: np.ndarray, what: str) -> None:
    z2 = noise**2 / stated
    n = z2.size
    lo, hi = scipy.stats.chi2.ppf(ALPHA / 2, n), scipy.stats.chi2.ppf(1 - ALPHA / 2, n)
    assert hi / n < 1 + TOL and lo / n > 1 - TOL  # the interval is narrow enough to catch a factor 2
    assert lo < z2.sum() < hi, (f"{what}: empirical/stated variance {z2.mean():.3f}, "
                               f"accepted [{lo / n:.3f}, {hi / n:.3f}]")


def dlap_kurtosis(t: float, draws: int) -> float:
    """Kurtosis of a sum of ``draws`` i.i.d. DLap(t) (t in grid steps)."""
    p = math.exp(-1.0 / t)
    return 3.0 + ((1.0 + 10.0 * p + p * p) / (2.0 * p) - 3.0) / draws


def group_size(variance_bound: float) -> int:
    return math.ceil(variance_bound / (BAD * TOL**2))


def check_median_of_means(ratio: np.ndarray, variance_bound: float, what: str) -> None:
    """``ratio``: values of mean 1 when the statement is right, each of variance ≤ ``variance_bound``."""
    g = group_size(variance_bound)
    assert ratio.size >= GROUPS * g, f"{what}: {ratio.size} values, the bound needs {GROUPS * g}"
    means = ratio[: GROUPS * g].reshape(GROUPS, g).mean(axis=1)
    med = float(np.median(means))
    assert 1 - TOL < med < 1 + TOL, f"{what}: median of group means of empirical/stated variance {med:.3f}"


# --------------------------------------------------------------------------- rows gram, Gaussian
def test_rows_gram_gaussian_noise_is_as_stated():
    """Per-entry scales: v on the diagonal, v/2 off it (ltm/lifts.py) — stated and drawn."""
    D, runs = 24, 30  # χ²: 720 diagonal and 8 280 off-diagonal values
    spec, tables = zero_spec(8, D, kind="gram", parties=2, k=2)
    (dx, dv), (ox, ov) = gram_classes(releases(spec, tables, runs, "gauss"))
    check_gaussian(dx, dv, "rows gram (Gaussian) diagonal")
    check_gaussian(ox, ov, "rows gram (Gaussian) off-diagonal")
    assert np.allclose(ov, dv[0] / 2) and np.allclose(dv, dv[0])


# --------------------------------------------------------------------------- replicated gram
def test_replicated_gram_noise_is_as_stated():
    """Every party adds one draw to every entry: v = P·σ_c² on and off the diagonal."""
    D, runs = 24, 30
    spec, tables = zero_spec(8, D, kind="gram", partition="columns", parties=3, k=3, colluding_servers=1)
    assert spec.replicated
    (dx, dv), (ox, ov) = gram_classes(releases(spec, tables, runs, "replicated"))
    check_gaussian(dx, dv, "replicated gram diagonal")
    check_gaussian(ox, ov, "replicated gram off-diagonal")
    assert np.allclose(ov, dv[0]) and np.allclose(dv, dv[0])


# --------------------------------------------------------------------------- rows gram, Laplace
@pytest.mark.parametrize("upload_mode,draws", [("per-client", 8), ("aggregate", 2)])
def test_rows_gram_laplace_noise_is_as_stated(upload_mode, draws):
    """i.i.d. discrete Laplace per entry, diagonal and off-diagonal alike: one per client and entry
    per-client, one per party and entry in an aggregated upload (ltm.dp.noise.sample_noise)."""
    D = 24
    spec, tables = zero_spec(8, D, kind="gram", parties=2, k=2, mechanism="laplace", delta=0.0,
                             upload_mode=upload_mode)
    var = dlap_kurtosis(spec.noise_plan().grid_scale, draws) - 1.0
    runs = math.ceil(GROUPS * group_size(var) / D)  # enough diagonal values (and far more off it)
    (dx, dv), (ox, ov) = gram_classes(releases(spec, tables, runs, f"laplace-{upload_mode}"))
    check_median_of_means(dx**2 / dv, var, f"rows gram (Laplace, {upload_mode}) diagonal")
    check_median_of_means(ox**2 / ov, var, f"rows gram (Laplace, {upload_mode}) off-diagonal")
    assert np.allclose(ov, dv[0]) and np.allclose(dv, dv[0])


# --------------------------------------------------------------------------- a sketch
def column_checks(spec, tables, runs: int, tag: str, row_draws: np.ndarray, kurtosis) -> np.ndarray:
    """Σ_r Ñ_rc² / noise_variance_per_column for every column of every run, and the bound on the
    variance of one such value: Σ_r (κ_r − 1)σ_r⁴ / v² with σ_r² ∝ the draws in row r."""
    values = [np.sum(rel.matrix**2, axis=0) / rel.noise_variance_per_column
              for rel in releases(spec, tables, runs, tag)]
    share = row_draws / row_draws.sum()
    return np.concatenate(values), float(np.sum((kurtosis(row_draws) - 1.0) * share**2))


def test_sparse_sketch_noise_is_as_stated():
    """A sparse sketch's E[NᵀN]_cc = Σ_r Var(Ñ_rc), per-client Gaussian (load_r draws in row r)
    and aggregated Laplace (one draw per party that reaches row r: with m = 32 rows and 2·32
    non-zeros per party, some rows miss a party), as each release states it."""
    n, D, m = 64, 4, 32
    # corrupt_parties=0 (a seeded reproduction may): rows one party misses pass the release gate
    spec, tables = zero_spec(n, D, kind="sparse", m=m, s=2, parties=2, k=2, corrupt_parties=0)
    loads = spec.make_sketch().row_loads().astype(np.float64)
    x, var = column_checks(spec, tables, 40, "sparse-gauss", loads, lambda k: np.full(k.shape, 3.0))
    check_median_of_means(x, var, "sparse sketch (Gaussian) column sums")

    spec, tables = zero_spec(n, D, kind="sparse", m=m, s=2, parties=2, k=2, mechanism="laplace", delta=0.0,
                             upload_mode="aggregate", corrupt_parties=0)
    sketch = spec.make_sketch()
    reach = sum((range_row_loads(sketch, p.start, p.stop) > 0).astype(np.float64) for p in spec.parties)
    assert 0 < int((reach == 1).sum()) and int((reach == 2).sum()) > 0  # rows reached by one party, and by both
    t = spec.noise_plan().grid_scale
    x, var = column_checks(spec, tables, 40, "sparse-laplace-agg", reach,
                           lambda k: np.array([dlap_kurtosis(t, max(int(j), 1)) for j in k]))
    check_median_of_means(x, var, "sparse sketch (Laplace, aggregate) column sums")


# =========================================================================== the representation
import json  # noqa: E402
from dataclasses import replace  # noqa: E402

from ltm.analyst.estimators import release_lambda  # noqa: E402
from ltm.analyst.gram import adassp_lambda, noise_edge, wigner_variance  # noqa: E402
from ltm.analyst.reconstruct import draw_variance, release_noise_variance  # noqa: E402
from ltm.analyst.release import ReleasedSketch, stated_noise  # noqa: E402
from ltm.client_set import ClientSet  # noqa: E402
from ltm.jobspec import honest_row_loads  # noqa: E402
from ltm.lifts import gram_from_vector, gram_noise_factors, gram_width  # noqa: E402


def gram_release(entries, d: int = 4, **kw) -> ReleasedSketch:
    fields = dict(matrix=np.zeros((1, gram_width(d))), columns=tuple(f"c{j}" for j in range(d)), centers=np.zeros(d),
                  scales=np.ones(d), label=d - 1, intercept=None, n=10,
                  kind="gram", entry_noise_variance=entries)
    fields.update(kw)
    if "noise_variance_per_column" not in fields:
        fields["noise_variance_per_column"] = float(np.max(entries))
    return ReleasedSketch(**fields)


def test_gram_noise_variance_mirrors_the_stated_entries():
    entries = np.arange(1.0, 11.0)  # every triangle entry its own variance
    V = gram_release(entries).gram_noise_variance
    i, j = np.triu_indices(4)
    np.testing.assert_array_equal(V[i, j], entries)
    np.testing.assert_array_equal(V[j, i], entries)
    assert isinstance(gram_release(list(entries)).entry_noise_variance, np.ndarray)  # a JSON list is accepted


@pytest.mark.parametrize("bad", [None, np.ones(9), np.ones((1, 10)), np.r_[np.ones(9), -1.0],
                                 np.r_[np.ones(9), np.nan]])
def test_a_lifted_release_must_state_each_entry(bad):
    with pytest.raises(ValueError, match="entry_noise_variance"):
        gram_release(bad, noise_variance_per_column=1.0)


def test_the_per_column_number_of_a_lifted_release_is_its_largest_entry():
    with pytest.raises(ValueError, match="largest entry_noise_variance"):
        gram_release(np.ones(10), noise_variance_per_column=2.0)
    assert gram_release(np.r_[np.ones(9), 3.0]).noise_variance_per_column == 3.0


def test_a_sketch_states_its_noise_per_column_only():
    sketch = dict(matrix=np.zeros((5, 3)), columns=("a", "b", "y"), centers=np.zeros(3), scales=np.ones(3), label=2,
                  intercept=None, n=10, noise_variance_per_column=4.0)
    assert ReleasedSketch(**sketch).entry_noise_variance is None
    with pytest.raises(ValueError, match="not per entry"):
        ReleasedSketch(**sketch, entry_noise_variance=np.ones(3))
    with pytest.raises(ValueError, match="carries no Gram"):
        _ = ReleasedSketch(**sketch).gram_noise_variance


def test_a_release_rebuilt_from_its_privacy_report_states_the_same_noise():
    """What release_from_reply does with a release fetched over gRPC (analyst/release.py)."""
    for spec_kw in (dict(kind="gram", parties=2, k=2, mechanism="laplace", delta=0.0),
                    dict(kind="sparse", m=4, parties=2, k=2)):
        spec, tables = zero_spec(32, 3, **spec_kw)
        rel = next(releases(spec, tables, 1, "report"))
        again = replace(rel, **stated_noise(json.loads(json.dumps(rel.privacy))))
        assert again.noise_variance_per_column == rel.noise_variance_per_column
        if rel.lifted:
            np.testing.assert_array_equal(again.entry_noise_variance, rel.entry_noise_variance)
        else:
            assert again.entry_noise_variance is None and "entry_noise_variance" not in rel.privacy


def test_draw_variance_is_the_exact_variance_of_a_polya_piece():
    """Σ x² P(x) of DLap(t), P(x) ∝ e^(−|x|/t), summed directly (the tail beyond 60t is < e^-50),
    divided by the L pieces a tight plan splits it into (whole draws: L = 1)."""
    spec, _ = zero_spec(8, 3, kind="gram", parties=2, k=2, mechanism="laplace", delta=0.0)
    plan = spec.noise_plan()
    assert plan.laplace_pieces == spec.privacy.min_honest_load > 1
    for t in (0.7, 3.0, 41.5):
        x = np.arange(-int(60 * t) - 1, int(60 * t) + 2, dtype=np.float64)
        w = np.exp(-np.abs(x) / t)
        exact = float(np.sum(x * x * w) / np.sum(w))
        grid = 2.0 ** (-2 * plan.frac_bits)
        assert draw_variance(replace(plan, grid_scale=t)) == pytest.approx(exact * grid / plan.laplace_pieces,
                                                                          rel=1e-12)
        assert draw_variance(replace(plan, grid_scale=t, gamma_shape=1.0)) == pytest.approx(exact * grid, rel=1e-12)
    gauss, _ = zero_spec(8, 3, kind="gram", parties=2, k=2)
    assert draw_variance(gauss.noise_plan()) == gauss.noise_plan().sigma_client ** 2


def test_release_noise_variance_counts_who_drew():
    """Per-client: one draw per (client, piece); aggregated Laplace: the share of min(load, L) pieces
    per party and reached row (rows partition), per reached row from a column's owner (columns)."""
    spec, _ = zero_spec(8, 3, kind="gram", parties=2, k=2)
    plan, sketch, everyone = spec.noise_plan(), spec.make_sketch(), ClientSet.full(spec.n)
    column, entries = release_noise_variance(spec, plan, everyone, sketch)
    np.testing.assert_allclose(entries, 8 * plan.sigma_client**2 * gram_noise_factors(3), rtol=1e-15)
    assert column == entries.max()
    agg, _ = zero_spec(8, 3, kind="gram", parties=2, k=2, mechanism="laplace", delta=0.0, upload_mode="aggregate")
    plan = agg.noise_plan()
    column, entries = release_noise_variance(agg, plan, everyone, agg.make_sketch())
    pieces = 2 * min(4, plan.laplace_pieces)  # two parties of 4 clients each
    assert pieces < 8  # the cap at L pieces matters here
    np.testing.assert_allclose(entries, pieces * draw_variance(plan), rtol=1e-15)
    per_client, _ = zero_spec(8, 3, kind="gram", parties=2, k=2, mechanism="laplace", delta=0.0)
    _, entries = release_noise_variance(per_client, per_client.noise_plan(), everyone, per_client.make_sketch())
    np.testing.assert_allclose(entries, 8 * draw_variance(plan), rtol=1e-15)
    cols, _ = zero_spec(64, 4, kind="sparse", m=8, s=1, partition="columns", parties=2, k=2, mechanism="laplace",
                        delta=0.0, upload_mode="aggregate")
    plan = cols.noise_plan()
    loads = honest_row_loads(cols, ClientSet.full(64))[0]  # one owner per column: every client's row
    column, entries = release_noise_variance(cols, plan, ClientSet.full(64), cols.make_sketch())
    want = int(np.minimum(loads, plan.laplace_pieces).sum())
    assert entries is None and column == pytest.approx(want * draw_variance(plan), rel=1e-15)


def test_wigner_variance_is_the_dominating_profile():
    v = 3.0
    assert wigner_variance(np.where(np.eye(5, dtype=bool), v, v / 2)) == v  # the Gaussian rows gram
    assert wigner_variance(np.full((5, 5), v)) == 2 * v  # i.i.d. entries: Laplace, the replicated release
    assert wigner_variance(np.diag([1.0, 7.0])) == 7.0 and wigner_variance(np.array([[2.0]])) == 2.0
    for bad in (np.ones(3), np.ones((2, 3)), -np.ones((2, 2)), np.full((2, 2), np.inf)):
        with pytest.raises(ValueError, match="square matrix"):
            wigner_variance(bad)


def test_the_ridge_edge_reads_the_stated_profile():
    rng = np.random.default_rng(5)
    A = rng.normal(size=(6, 3))
    Gxx = A.T @ A
    profile = np.where(np.eye(3, dtype=bool), 4.0, 2.0)
    assert adassp_lambda(Gxx, profile) == adassp_lambda(Gxx, 4.0)
    assert adassp_lambda(Gxx, np.full((3, 3), 4.0)) == adassp_lambda(Gxx, 8.0)
    with pytest.raises(ValueError, match="Gxx's shape"):
        adassp_lambda(Gxx, np.ones((4, 4)))
    # a release with i.i.d. entry noise v: the edge 2√(pv), not the Gaussian profile's √(2pv)
    d, v = 4, 50.0
    G = np.diag([1.0, 2.0, 3.0, 9.0])
    rel = gram_release(np.full(gram_width(d), v), matrix=G[np.triu_indices(d)][None, :])
    np.testing.assert_array_equal(gram_from_vector(rel.matrix[0], d), G)
    lam, _ = release_lambda(rel)
    assert noise_edge(3, 2 * v) == pytest.approx(2 * math.sqrt(3 * v))
    assert lam == pytest.approx(2 * math.sqrt(3 * v) - 1.0)

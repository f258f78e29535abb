"""Mutation-kill tests for ``analyst/baselines.py`` (scripts/mutation.sh, docs/testing.md).

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

# --- analyst/baselines.py: each baseline re-derived from its documented algorithm ------------------

from analyst import baselines as bl  # noqa: E402
from ltm.dp.calibration import analytic_gaussian_sigma  # noqa: E402


def _clip(W: np.ndarray, C: float) -> np.ndarray:
    norms = np.linalg.norm(W, axis=1)
    return W * np.minimum(1.0, C / np.maximum(norms, 1e-300))[:, None]


def _sym(d: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    Z = sigma * rng.standard_normal((d, d))
    return np.triu(Z) + np.triu(Z, 1).T


def _regression_data(n=300, d=3, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d))
    b = A @ np.array([0.5, -1.0, 2.0][:d]) + 0.1 * rng.normal(size=n)
    return A * 0.3, b * 0.3  # most rows inside the clip ball, some outside


def test_gram_sensitivity_and_symmetric_noise():
    assert bl.gram_sensitivity(1.5) == 2 * 1.5**2
    assert bl.gram_sensitivity(1.5, tight=True) == pytest.approx(math.sqrt(2) * 1.5**2)
    with pytest.raises(ValueError, match=_exact("clip_norm must be finite and > 0, got 0.0")):
        bl.gram_sensitivity(0.0)
    E = bl.symmetric_gaussian(4, 2.0, np.random.default_rng(7))
    assert np.array_equal(E, _sym(4, 2.0, np.random.default_rng(7)))
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        bl.ssp_ridge(np.zeros((3, 1)), np.zeros(3), 1.0, 1.0, 1e-6, 1.0, rng=7)


@pytest.mark.parametrize("tight", [False, True])
def test_ssp_ridge_matches_its_definition(tight):
    A, b = _regression_data()
    eps, delta, C, lam = 2.0, 1e-5, 1.0, 3.0
    W = _clip(np.column_stack([A, b]), C)
    Ac, bc = W[:, :-1], W[:, -1]
    sigma = analytic_gaussian_sigma(eps, delta, (math.sqrt(2) if tight else 2.0) * C**2)
    E = _sym(4, sigma, np.random.default_rng(11))
    G, g = Ac.T @ Ac + E[:3, :3], Ac.T @ bc + E[:3, 3]
    fit = bl.ssp_ridge(A, b, lam, eps, delta, C, np.random.default_rng(11), tight=tight)
    assert np.allclose(fit.noisy_gram, G) and np.allclose(fit.noisy_moment, g)
    assert fit.sigmas == {"gram": pytest.approx(sigma)} and fit.lam == lam and fit.projected is False
    assert np.allclose(fit.coef, np.linalg.solve(G + lam * np.eye(3), g))
    with pytest.raises(ValueError, match=_exact("lam must be finite and >= 0, got -1.0")):
        bl.ssp_ridge(A, b, -1.0, eps, delta, C, np.random.default_rng(1))
    with pytest.raises(ValueError, match=_exact("shapes do not match: A (300, 3), b (299,)")):
        bl.ssp_ridge(A, b[:-1], lam, eps, delta, C, np.random.default_rng(1))


def test_the_baselines_solve_with_the_ltm_gram_solver():
    """SSP and AdaSSP solve their noisy statistics with analyst.gram.solve_gram (the LTM's own
    rule, tested in test_kills_gram.py): an indefinite noisy AᵀA is projected and reported."""
    from analyst.gram import solve_gram
    A, b = _regression_data(seed=5)
    for fit in (bl.ssp_ridge(A, b, 0.0, 0.05, 1e-6, 1.0, np.random.default_rng(2), tight=True),
                bl.adassp(A, b, 0.05, 1e-6, 1.0, np.random.default_rng(2))):
        w, solver = solve_gram(fit.noisy_gram, fit.noisy_moment, fit.lam)
        assert np.array_equal(fit.coef, w) and fit.projected == (solver != "eigh")
    indefinite = bl.ssp_ridge(A, b, 0.0, 0.01, 1e-6, 1.0, np.random.default_rng(0))
    assert np.linalg.eigvalsh(indefinite.noisy_gram)[0] < 0 and indefinite.projected is True


@pytest.mark.parametrize("tight, rho", [(False, 0.05), (True, 0.2)])
def test_adassp_matches_wang_algorithm_2(tight, rho):
    A, b = _regression_data(seed=3)
    eps, delta, C = 1.5, 1e-5, 1.0
    W = _clip(np.column_stack([A, b]), C)
    Ac, bc = W[:, :-1], W[:, -1]
    d = 3
    s_min = analytic_gaussian_sigma(eps / 3, delta / 3, C**2)
    s_gram = analytic_gaussian_sigma(eps / 3, delta / 3, (math.sqrt(2) if tight else 2.0) * C**2)
    rng = np.random.default_rng(5)
    G = Ac.T @ Ac
    lam_min_priv = max(np.linalg.eigvalsh(G)[0] + s_min * rng.standard_normal()
                       - s_min * math.sqrt(math.log(6 / delta)), 0.0)
    lam = max(0.0, s_gram * math.sqrt(d * math.log(2 * d * d / rho)) - lam_min_priv)
    noisy_G = G + _sym(d, s_gram, rng)
    noisy_g = Ac.T @ bc + s_min * rng.standard_normal(d)
    fit = bl.adassp(A, b, eps, delta, C, np.random.default_rng(5), rho=rho, tight=tight)
    assert fit.lam == pytest.approx(lam) and fit.details == {"lambda_min_private": pytest.approx(lam_min_priv)}
    assert fit.sigmas == {"lambda_min": pytest.approx(s_min), "gram": pytest.approx(s_gram),
                          "moment": pytest.approx(s_min)}
    assert np.allclose(fit.noisy_gram, noisy_G) and np.allclose(fit.noisy_moment, noisy_g)
    w, V = np.linalg.eigh(noisy_G + lam * np.eye(d))
    assert np.allclose(fit.coef, V @ ((V.T @ noisy_g) / np.maximum(w, lam) if w[0] <= 0 else (V.T @ noisy_g) / w))
    with pytest.raises(ValueError, match=_exact("rho must be in (0, 1), got 1.0")):
        bl.adassp(A, b, eps, delta, C, np.random.default_rng(5), rho=1.0)


def test_cv_ridge_lambda_picks_the_grid_point_with_the_least_validation_error():
    A, b = _regression_data(n=60, seed=9)
    grid = np.array([0.0, 1.0, 30.0, 1000.0])
    chosen = bl.cv_ridge_lambda(A, b, np.random.default_rng(2), folds=4, grid=grid)
    fold = np.random.default_rng(2).permutation(60) % 4
    errors = []
    for lam in grid:
        err = 0.0
        for f in range(4):
            tr, va = fold != f, fold == f
            x = np.linalg.lstsq(A[tr].T @ A[tr] + lam * np.eye(3), A[tr].T @ b[tr], rcond=None)[0]
            err += float(np.sum((A[va] @ x - b[va]) ** 2))
        errors.append(err)
    assert chosen == grid[int(np.argmin(errors))]
    # the default grid is {0} ∪ t·10^k, k = −8 … 1 in half decades, t = tr(AᵀA)/d
    t = float(np.sum(A * A)) / 3
    default = bl.cv_ridge_lambda(A, b, np.random.default_rng(2), folds=4)
    assert default == 0.0 or any(math.isclose(default, t * 10.0**k) for k in np.arange(-8.0, 1.01, 0.5))
    with pytest.raises(ValueError, match=_exact("need ≥ 5 ≥ 2 rows with matching A (3, 3) and b (3,)")):
        bl.cv_ridge_lambda(A[:3], b[:3], np.random.default_rng(2))


def test_mod_sulq_matches_its_definition():
    rng = np.random.default_rng(8)
    A = rng.normal(size=(200, 4)) * np.array([3.0, 1.0, 0.5, 0.1])
    n, D = A.shape
    beta = analytic_gaussian_sigma(1.0, 1e-5, 2.0 / n)
    assert bl.mod_sulq_noise_scale(n, D, 1.0, 1e-5) == pytest.approx(beta)
    assert bl.mod_sulq_noise_scale(n, D, 1.0, 1e-5, tight=True) == \
        pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, math.sqrt(2) / n))
    paper = (D + 1) / (n * 1.0) * math.sqrt(2 * math.log((D * D + D) / (1e-5 * 2 * math.sqrt(2 * math.pi)))) \
        + 1 / (n * math.sqrt(1.0))
    assert bl.mod_sulq_noise_scale(n, D, 1.0, 1e-5, calibration="paper") == pytest.approx(paper)
    for kwargs, message in ((dict(n=0, d=2), "n and d must be >= 1, got n=0, d=2"),
                            (dict(n=2, d=0), "n and d must be >= 1, got n=2, d=0")):
        with pytest.raises(ValueError, match=_exact(message)):
            bl.mod_sulq_noise_scale(epsilon=1.0, delta=1e-5, **kwargs)
    with pytest.raises(ValueError, match=_exact("delta must be in (0, 1), got 1.5")):
        bl.mod_sulq_noise_scale(10, 2, 1.0, 1.5, calibration="paper")
    with pytest.raises(ValueError, match=_exact("MOD-SULQ 'paper' noise needs (d²+d)/(2√(2π)δ) > 1; lower delta")):
        bl.mod_sulq_noise_scale(10, 1, 1.0, 0.9, calibration="paper")
    with pytest.raises(ValueError, match=_exact("unknown calibration 'x'; valid: 'analytic', 'paper'")):
        bl.mod_sulq_noise_scale(10, 2, 1.0, 1e-5, calibration="x")
    C = 2.0
    Ap = _clip(A, C) / C
    cov = Ap.T @ Ap / n
    noisy = cov + _sym(D, beta, np.random.default_rng(4))
    got, got_beta = bl.mod_sulq_covariance(A, 1.0, 1e-5, np.random.default_rng(4), clip_norm=C)
    assert got_beta == pytest.approx(beta) and np.allclose(got, noisy)
    evals, V = np.linalg.eigh(noisy)
    top = V[:, np.argsort(evals)[::-1][:2]]
    top = top * np.sign(top[np.abs(top).argmax(axis=0), [0, 1]])
    assert np.allclose(bl.mod_sulq(A, 2, 1.0, 1e-5, np.random.default_rng(4), clip_norm=C), top)
    with pytest.raises(ValueError, match=_exact("rank must be an integer in [1, 4], got 5")):
        bl.mod_sulq(A, 5, 1.0, 1e-5, np.random.default_rng(4))


def test_local_release_matches_its_definition():
    from analyst.release import ReleasedSketch

    rng = np.random.default_rng(6)
    V = rng.normal(size=(50, 3))
    C = 1.2
    sigma = analytic_gaussian_sigma(0.8, 1e-6, 2 * C)
    want = _clip(V, C) + sigma * np.random.default_rng(3).standard_normal(V.shape)
    rows, got_sigma = bl.local_noisy_rows(V, 0.8, 1e-6, C, np.random.default_rng(3))
    assert got_sigma == pytest.approx(sigma) and np.allclose(rows, want)
    template = ReleasedSketch(matrix=np.zeros((4, 3)), columns=("a", "b", "y"), centers=np.zeros(3),
                              scales=np.ones(3), label=2, intercept=None, n=10, noise_variance_per_column=0.0,
                              privacy={}, sha256="x")
    rel = bl.local_release(template, V, 0.8, 1e-6, C, np.random.default_rng(3))
    assert np.allclose(rel.matrix, want) and rel.n == 50 and rel.sha256 == "" and rel.kind == "local"
    assert rel.noise_variance_per_column == pytest.approx(50 * sigma**2)
    assert rel.privacy["sigma_client"] == pytest.approx(sigma) and rel.privacy["sensitivity"] == 2 * C
    assert (rel.privacy["epsilon"], rel.privacy["delta"], rel.privacy["baseline"]) == (0.8, 1e-6, "local")
    with pytest.raises(ValueError, match=_exact("V must have shape (n, 3), got (50, 2)")):
        bl.local_release(template, V[:, :2], 0.8, 1e-6, C, np.random.default_rng(3))


def _cv_choice(A, b, grid, seed, folds):
    """K-fold CV of ridge, written out directly: min-norm solutions, summed squared errors."""
    fold = np.random.default_rng(seed).permutation(len(b)) % folds
    errors = []
    for lam in grid:
        err = 0.0
        for f in range(folds):
            tr, va = fold != f, fold == f
            x = np.linalg.lstsq(A[tr].T @ A[tr] + lam * np.eye(A.shape[1]), A[tr].T @ b[tr], rcond=None)[0]
            err += float(np.sum((A[va] @ x - b[va]) ** 2))
        errors.append(err)
    return float(grid[int(np.argmin(errors))])


def test_cv_ridge_lambda_agrees_with_a_direct_cross_validation_on_many_problems():
    agree, nonzero = 0, 0
    for seed in range(30):
        rng = np.random.default_rng(100 + seed)
        n, d = 24 + seed % 7, 1 + seed % 3
        A = rng.normal(size=(n, d))
        b = A @ rng.normal(size=d) * rng.uniform(0, 1) + rng.normal(size=n) * rng.uniform(0.1, 3)
        grid = np.array([0.0, rng.uniform(0.1, 5), rng.uniform(5, 80)])
        folds = 2 + seed % 4
        chosen = bl.cv_ridge_lambda(A, b, np.random.default_rng(seed), folds=folds, grid=grid)
        assert chosen == _cv_choice(A, b, grid, seed, folds), seed
        nonzero += chosen != 0.0
        # the default grid: {0} ∪ t·10^k, k = −8, −7.5, …, 1, t = tr(AᵀA)/d
        t = float(np.sum(A * A)) / d
        default = np.concatenate([[0.0], t * 10.0 ** np.arange(-8.0, 1.01, 0.5)])
        got = bl.cv_ridge_lambda(A, b, np.random.default_rng(seed), folds=folds)
        assert got == pytest.approx(_cv_choice(A, b, default, seed, folds), rel=1e-12), seed
        agree += got != 0.0
    assert nonzero >= 5 and agree >= 5  # the data make λ matter, so the checks above can fail
    # a rank-deficient design at λ = 0 (duplicated column): the minimum-norm solution
    rng = np.random.default_rng(7)
    a = rng.normal(size=(20, 1))
    A = np.hstack([a, a])
    b = 2 * a[:, 0] + rng.normal(size=20)
    grid = np.array([0.0, 3.0])
    assert bl.cv_ridge_lambda(A, b, np.random.default_rng(1), folds=4, grid=grid) == _cv_choice(A, b, grid, 1, 4)
    # the smallest legal sizes: n = folds rows, 2 folds
    assert bl.cv_ridge_lambda(A[:5], b[:5], np.random.default_rng(1), folds=5, grid=grid) in grid
    assert bl.cv_ridge_lambda(A[:6], b[:6], np.random.default_rng(1), folds=2, grid=grid) in grid
    with pytest.raises(ValueError, match=_exact("need ≥ 1 ≥ 2 rows with matching A (6, 2) and b (6,)")):
        bl.cv_ridge_lambda(A[:6], b[:6], np.random.default_rng(1), folds=1, grid=grid)
    # a one-feature design uses t = tr(AᵀA)/1
    A1 = rng.normal(size=(30, 1))
    b1 = A1[:, 0] + 3 * rng.normal(size=30)
    t1 = float(np.sum(A1 * A1))
    grid1 = np.concatenate([[0.0], t1 * 10.0 ** np.arange(-8.0, 1.01, 0.5)])
    assert bl.cv_ridge_lambda(A1, b1, np.random.default_rng(3), folds=3) == pytest.approx(
        _cv_choice(A1, b1, grid1, 3, 3), rel=1e-12)


def test_local_release_accepts_integer_rows():
    from analyst.release import ReleasedSketch

    V = np.array([[1, 0, 0], [0, 2, 0], [3, 0, 1]])
    template = ReleasedSketch(matrix=np.zeros((3, 3)), columns=("a", "b", "y"), centers=np.zeros(3),
                              scales=np.ones(3), label=2, intercept=None, n=3, noise_variance_per_column=0.0,
                              privacy={}, sha256="x")
    as_int = bl.local_release(template, V, 1.0, 1e-6, 1.0, np.random.default_rng(2))
    as_float = bl.local_release(template, V.astype(float), 1.0, 1e-6, 1.0, np.random.default_rng(2))
    assert as_int.matrix.dtype == np.float64 and np.array_equal(as_int.matrix, as_float.matrix)


def test_adassp_with_a_well_conditioned_design_uses_the_private_lambda_min():
    rng = np.random.default_rng(12)
    A = rng.normal(size=(4000, 2)) * 0.4
    b = A @ np.array([1.0, -0.5]) * 0.5 + 0.05 * rng.normal(size=4000)
    eps, delta, C, rho = 60.0, 1e-5, 1.0, 0.05
    W = _clip(np.column_stack([A, b]), C)
    Ac = W[:, :-1]
    s_min = analytic_gaussian_sigma(eps / 3, delta / 3, C**2)
    z = np.random.default_rng(8).standard_normal()
    lam_min = np.linalg.eigvalsh(Ac.T @ Ac)[0]
    expected = lam_min + s_min * z - s_min * math.sqrt(math.log(6 / delta))
    assert expected > 0  # the private λ_min is not clipped to 0 here, so its formula is visible
    fit = bl.adassp(A, b, eps, delta, C, np.random.default_rng(8), rho=rho)
    assert fit.details["lambda_min_private"] == pytest.approx(expected, rel=1e-9)
    with pytest.raises(ValueError, match=_exact("rho must be in (0, 1), got 0.0")):
        bl.adassp(A, b, eps, delta, C, np.random.default_rng(8), rho=0.0)


def test_mod_sulq_edges_and_pass_through():
    assert bl.mod_sulq_noise_scale(1, 2, 1.0, 1e-5) == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5, 2.0))
    paper = (3 + 1) / (50 * 0.5) * math.sqrt(2 * math.log((9 + 3) / (1e-4 * 2 * math.sqrt(2 * math.pi)))) \
        + 1 / (50 * math.sqrt(0.5))
    assert bl.mod_sulq_noise_scale(50, 3, 0.5, 1e-4, calibration="paper") == pytest.approx(paper)
    arg = 2 / (0.3 * 2 * math.sqrt(2 * math.pi))  # d = 1, δ = 0.3: 1 < arg < 2
    assert bl.mod_sulq_noise_scale(10, 1, 1.0, 0.3, calibration="paper") == pytest.approx(
        2 / 10 * math.sqrt(2 * math.log(arg)) + 1 / 10)
    for delta in (0.0, 1.0):
        with pytest.raises(ValueError, match=_exact(f"delta must be in (0, 1), got {delta!r}")):
            bl.mod_sulq_noise_scale(10, 2, 1.0, delta, calibration="paper")
    with pytest.raises(ValueError, match=_exact("epsilon must be finite and > 0, got 0.0")):
        bl.mod_sulq_noise_scale(10, 2, 0.0, 1e-5, calibration="paper")
    rng = np.random.default_rng(3)
    A = rng.normal(size=(80, 3)) * 2.0  # rows well outside the unit ball
    default, beta = bl.mod_sulq_covariance(A, 1.0, 1e-5, np.random.default_rng(1))
    unit, _ = bl.mod_sulq_covariance(A, 1.0, 1e-5, np.random.default_rng(1), clip_norm=1.0)
    assert np.array_equal(default, unit)
    _, tight_beta = bl.mod_sulq_covariance(A, 1.0, 1e-5, np.random.default_rng(1), tight=True)
    assert tight_beta == pytest.approx(bl.mod_sulq_noise_scale(80, 3, 1.0, 1e-5, tight=True)) and tight_beta < beta
    _, paper_beta = bl.mod_sulq_covariance(A, 1.0, 1e-5, np.random.default_rng(1), calibration="paper")
    assert paper_beta == pytest.approx(bl.mod_sulq_noise_scale(80, 3, 1.0, 1e-5, calibration="paper"))
    for kwargs in (dict(tight=True), dict(calibration="paper")):
        noisy, _ = bl.mod_sulq_covariance(A, 1.0, 1e-5, np.random.default_rng(4), **kwargs)
        evals, V = np.linalg.eigh(noisy)
        top = V[:, np.argsort(evals)[::-1][:2]]
        top = top * np.sign(top[np.abs(top).argmax(axis=0), [0, 1]])
        assert np.allclose(bl.mod_sulq(A, 2, 1.0, 1e-5, np.random.default_rng(4), **kwargs), top)
    for seed in range(8):  # the sign convention: each column's largest-|·| entry is positive
        comps = bl.mod_sulq(rng.normal(size=(30, 4)), 3, 1.0, 1e-5, np.random.default_rng(seed))
        assert np.all(comps[np.abs(comps).argmax(axis=0), [0, 1, 2]] > 0)
    assert bl.mod_sulq(A, 1, 1.0, 1e-5, np.random.default_rng(1)).shape == (3, 1)
    assert bl.mod_sulq(A, 3, 1.0, 1e-5, np.random.default_rng(1)).shape == (3, 3)
    with pytest.raises(ValueError, match=_exact("rank must be an integer in [1, 3], got True")):
        bl.mod_sulq(A, True, 1.0, 1e-5, np.random.default_rng(1))
    with pytest.raises(ValueError, match=_exact("A must be 2-D, got shape (3,)")):
        bl.mod_sulq(np.ones(3), 1, 1.0, 1e-5, np.random.default_rng(1))


def test_local_release_privacy_record():
    from analyst.release import ReleasedSketch

    V = np.eye(3)
    template = ReleasedSketch(matrix=np.zeros((3, 3)), columns=("a", "b", "y"), centers=np.zeros(3),
                              scales=np.ones(3), label=2, intercept=None, n=3, noise_variance_per_column=0.0,
                              privacy={}, sha256="x")
    rel = bl.local_release(template, V, 1.0, 1e-6, 1.0, np.random.default_rng(2))
    sigma = analytic_gaussian_sigma(1.0, 1e-6, 2.0)
    assert rel.privacy == {"baseline": "local", "epsilon": 1.0, "delta": 1e-6, "sensitivity": 2.0,
                           "sigma_client": pytest.approx(sigma),
                           "note": "simulation baseline (seeded numpy RNG), not a production release"}

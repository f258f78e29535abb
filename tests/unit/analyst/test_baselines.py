"""Tests for ltm.analyst.baselines: SSP, AdaSSP, MOD-SULQ, the local model (fixed seeds)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ltm.analyst.baselines import (
    adassp,
    gram_sensitivity,
    local_noisy_rows,
    local_release,
    mod_sulq,
    mod_sulq_covariance,
    mod_sulq_noise_scale,
    ssp_ridge,
    ssp_statistics,
    symmetric_gaussian,
)
from ltm.analyst.estimators import DGMOLS, OLS
from ltm.analyst.metrics import ridge_optimum
from ltm.analyst.release import ReleasedSketch
from ltm.clipping import clip_rows
from ltm.dp.calibration import analytic_gaussian_sigma

EPS_HUGE = 1e8
DELTA = 1e-5


def _reg_data(seed: int, n: int, d: int, C: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows of [A b] with norm ≤ C (so clipping is a no-op)."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, size=(n, d))
    w = rng.uniform(-1, 1, size=d)
    b = A @ w / d + 0.05 * rng.standard_normal(n)
    W = clip_rows(np.column_stack([A, b]), C)
    return W[:, :-1], W[:, -1]


def _upper(M: np.ndarray) -> np.ndarray:
    return M[np.triu_indices(M.shape[0])]


# ------------------------------------------------------------------ helpers


def test_clip_rows_and_sensitivities() -> None:
    M = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = clip_rows(M, 1.0)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]])
    np.testing.assert_array_equal(clip_rows(out, 1.0), out)  # nothing left to clip
    assert gram_sensitivity(3.0) == pytest.approx(18.0)
    assert gram_sensitivity(3.0, tight=True) == pytest.approx(math.sqrt(2) * 9.0)
    # The tight bound is attained: orthogonal rows of norm C.
    C = 3.0
    x, xp = np.array([C, 0.0]), np.array([0.0, C])
    P = np.outer(xp, xp) - np.outer(x, x)
    assert np.linalg.norm(_upper(P)) == pytest.approx(gram_sensitivity(C, tight=True))


def test_symmetric_gaussian_entries_have_sigma_on_and_off_diagonal() -> None:
    rng = np.random.default_rng(0)
    sigma = 2.5
    E = symmetric_gaussian(300, sigma, rng)
    np.testing.assert_array_equal(E, E.T)
    off = E[np.triu_indices(300, 1)]
    assert np.std(off) == pytest.approx(sigma, rel=0.03)
    assert np.std(np.diag(E)) == pytest.approx(sigma, rel=0.15)  # not 2σ, not σ/√2


# ------------------------------------------------------------------ SSP


@pytest.mark.parametrize("tight", [False, True])
def test_ssp_statistics_noise_matches_calibration(tight: bool) -> None:
    C = 2.0
    A, b = _reg_data(1, n=500, d=60, C=C)
    G, g, sigma = ssp_statistics(A, b, 0.5, DELTA, C, np.random.default_rng(1), tight=tight)
    sens = (math.sqrt(2) if tight else 2.0) * C**2
    assert sigma == pytest.approx(analytic_gaussian_sigma(0.5, DELTA, sens), rel=1e-12)
    np.testing.assert_array_equal(G, G.T)
    resid = np.concatenate([_upper(G - A.T @ A), g - A.T @ b])
    assert np.mean(resid) == pytest.approx(0.0, abs=4 * sigma / math.sqrt(resid.size))
    assert np.std(resid) == pytest.approx(sigma, rel=0.06)


def test_ssp_ridge_huge_epsilon_is_nonprivate_ridge() -> None:
    A, b = _reg_data(2, n=2000, d=5, C=2.0)
    lam = 1.0
    out = ssp_ridge(A, b, lam, EPS_HUGE, DELTA, 2.0, np.random.default_rng(2))
    x_opt = ridge_optimum(A, b, lam)
    assert np.linalg.norm(out.coef - x_opt) < 1e-4 * np.linalg.norm(x_opt)
    assert not out.projected and out.lam == lam
    # ... while at a small ε the same call is visibly perturbed (the test can fail).
    noisy = ssp_ridge(A, b, lam, 0.1, DELTA, 2.0, np.random.default_rng(2))
    assert np.linalg.norm(noisy.coef - x_opt) > 1e-2 * np.linalg.norm(x_opt)


def test_ssp_ridge_coefficient_variance_matches_first_order_prediction() -> None:
    # δx ≈ H⁻¹(e − E x) with H = AᵀA + λI, Cov(e) = σ²I, Cov(Ex) = σ²(‖x‖²I + xxᵀ − diag(x²)).
    C, eps, lam, d = 1.5, 0.5, 2000.0, 3
    A, b = _reg_data(3, n=400, d=d, C=C)
    x = ridge_optimum(A, b, lam)
    Hinv = np.linalg.inv(A.T @ A + lam * np.eye(d))
    sigma = analytic_gaussian_sigma(eps, DELTA, 2 * C**2)
    cov_pred = sigma**2 * Hinv @ ((1 + x @ x) * np.eye(d) + np.outer(x, x) - np.diag(x**2)) @ Hinv
    rng = np.random.default_rng(3)
    coefs = np.array([ssp_ridge(A, b, lam, eps, DELTA, C, rng).coef for _ in range(600)])
    assert np.trace(np.cov(coefs.T)) == pytest.approx(np.trace(cov_pred), rel=0.15)
    tol = 4 * math.sqrt(np.max(np.diag(cov_pred)) / 600) + 1e-3 * np.abs(x).max()
    np.testing.assert_allclose(coefs.mean(axis=0), x, atol=tol)


def test_ssp_ridge_projects_indefinite_noisy_matrix() -> None:
    C, lam = 1.0, 1e-3
    A, b = _reg_data(4, n=10, d=4, C=C)
    out = ssp_ridge(A, b, lam, 0.05, DELTA, C, np.random.default_rng(4))
    assert out.projected
    w, V = np.linalg.eigh(out.noisy_gram + lam * np.eye(4))
    assert w[0] <= 0
    expected = V @ ((V.T @ out.noisy_moment) / np.maximum(w, lam))
    np.testing.assert_allclose(out.coef, expected, rtol=1e-10)
    assert np.all(np.isfinite(out.coef))


# ------------------------------------------------------------------ AdaSSP


def test_adassp_huge_epsilon_is_ols() -> None:
    A, b = _reg_data(5, n=3000, d=4, C=2.0)
    out = adassp(A, b, EPS_HUGE, DELTA, 2.0, np.random.default_rng(5))
    assert out.lam == 0.0
    x_ols = np.linalg.lstsq(A, b, rcond=None)[0]
    assert np.linalg.norm(out.coef - x_ols) < 1e-4 * np.linalg.norm(x_ols)


def test_adassp_budget_split_sigmas_and_lambda_rule() -> None:
    C, eps, d = 2.0, 1.0, 4
    A, b = _reg_data(6, n=200, d=d, C=C)
    out = adassp(A, b, eps, DELTA, C, np.random.default_rng(6))
    e3, d3 = eps / 3, DELTA / 3
    for key, sens in (("lambda_min", C**2), ("gram", 2 * C**2), ("moment", C**2)):
        assert out.sigmas[key] == pytest.approx(analytic_gaussian_sigma(e3, d3, sens), rel=1e-12)
    expected_lam = max(
        0.0,
        out.sigmas["gram"] * math.sqrt(d * math.log(2 * d * d / 0.05))
        - out.details["lambda_min_private"],
    )
    assert out.lam == pytest.approx(expected_lam, rel=1e-12)
    assert out.lam > 0  # at n = 200, ε = 1 the noise dominates λ_min: the ridge kicks in


def test_adassp_noise_and_private_lambda_min_distribution() -> None:
    C, eps, d = 2.0, 1.0, 3
    A, b = _reg_data(7, n=3000, d=d, C=C)
    G, g = A.T @ A, A.T @ b
    lam_min = np.linalg.eigvalsh(G)[0]
    rng = np.random.default_rng(7)
    runs = [adassp(A, b, eps, DELTA, C, rng) for _ in range(300)]
    s = runs[0].sigmas
    gram_res = np.concatenate([_upper(r.noisy_gram - G) for r in runs])
    mom_res = np.concatenate([r.noisy_moment - g for r in runs])
    assert np.std(gram_res) == pytest.approx(s["gram"], rel=0.06)
    assert np.std(mom_res) == pytest.approx(s["moment"], rel=0.08)
    # λ̃_min = λ_min + σ₁Z − σ₁√log(6/δ) (λ_min ≈ 1000 ≫ σ₁, so the max(·, 0) is inactive).
    lam_priv = np.array([r.details["lambda_min_private"] for r in runs])
    target = lam_min - s["lambda_min"] * math.sqrt(math.log(6 / DELTA))
    assert target > 5 * s["lambda_min"]
    assert lam_priv.mean() == pytest.approx(target, abs=4 * s["lambda_min"] / math.sqrt(300))
    assert lam_priv.std() == pytest.approx(s["lambda_min"], rel=0.15)


# ------------------------------------------------------------------ MOD-SULQ


def _planted_rows(seed: int, n: int, D: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    V, _ = np.linalg.qr(rng.standard_normal((D, k)))
    A = (rng.standard_normal((n, k)) * np.linspace(1.0, 0.5, k)) @ V.T
    A += 0.05 * rng.standard_normal((n, D))
    return clip_rows(A, 1.0), V


def test_mod_sulq_noise_scale_values() -> None:
    assert mod_sulq_noise_scale(1000, 10, 1.0, DELTA, calibration="paper") == pytest.approx(
        0.060443414, rel=1e-7
    )
    assert mod_sulq_noise_scale(1000, 10, 1.0, DELTA) == pytest.approx(
        analytic_gaussian_sigma(1.0, DELTA, 2e-3), rel=1e-12
    )
    assert mod_sulq_noise_scale(1000, 10, 1.0, DELTA, tight=True) == pytest.approx(
        analytic_gaussian_sigma(1.0, DELTA, math.sqrt(2) * 1e-3), rel=1e-12
    )
    with pytest.raises(ValueError, match="calibration"):
        mod_sulq_noise_scale(10, 3, 1.0, DELTA, calibration="nope")  # type: ignore[arg-type]


def test_mod_sulq_huge_epsilon_recovers_top_eigenvectors() -> None:
    A, _ = _planted_rows(8, 5000, 8, 3)
    X = mod_sulq(A, 3, EPS_HUGE, DELTA, np.random.default_rng(8))
    assert X.shape == (8, 3)
    np.testing.assert_allclose(X.T @ X, np.eye(3), atol=1e-12)
    _, _, vt = np.linalg.svd(A, full_matrices=False)
    Xo = vt[:3].T
    assert np.linalg.norm(X @ X.T - Xo @ Xo.T, 2) < 1e-5


def test_mod_sulq_small_epsilon_noise_dominates() -> None:
    A, V = _planted_rows(9, 50, 8, 2)
    X = mod_sulq(A, 2, 0.05, DELTA, np.random.default_rng(9))
    np.testing.assert_allclose(X.T @ X, np.eye(2), atol=1e-12)
    assert np.linalg.norm(X @ X.T - V @ V.T, 2) > 0.5


@pytest.mark.parametrize("calibration", ["analytic", "paper"])
def test_mod_sulq_covariance_noise_and_clip_scaling(calibration: str) -> None:
    C, n, D = 3.0, 400, 40
    rng = np.random.default_rng(10)
    A = rng.standard_normal((n, D))  # norms ≈ √40 > C: rows are clipped to C, then divided by C
    kind = calibration  # "analytic" | "paper"
    noisy, beta = mod_sulq_covariance(
        A, 0.5, DELTA, np.random.default_rng(10), clip_norm=C, calibration=kind  # type: ignore
    )
    expected = mod_sulq_noise_scale(n, D, 0.5, DELTA, calibration=kind)  # type: ignore
    assert beta == pytest.approx(expected, rel=1e-12)
    U = clip_rows(A, C) / C
    resid = _upper(noisy - U.T @ U / n)
    assert np.std(resid) == pytest.approx(beta, rel=0.08)
    np.testing.assert_array_equal(noisy, noisy.T)


# ------------------------------------------------------------------ local model


def test_local_noisy_rows_sigma_and_clipping() -> None:
    C, eps = 1.5, 2.0
    rng = np.random.default_rng(11)
    V = rng.standard_normal((20_000, 5))
    noisy, sigma = local_noisy_rows(V, eps, DELTA, C, np.random.default_rng(11))
    assert sigma == pytest.approx(analytic_gaussian_sigma(eps, DELTA, 2 * C), rel=1e-12)
    resid = noisy - clip_rows(V, C)
    assert np.std(resid) == pytest.approx(sigma, rel=0.02)
    assert abs(np.mean(resid)) < 4 * sigma / math.sqrt(resid.size)


def test_local_release_feeds_estimators_and_dgm_debiases() -> None:
    rng = np.random.default_rng(12)
    n, C = 200_000, 2.0
    X = rng.uniform(-1, 1, size=(n, 2))
    w_star = np.array([0.5, -0.3])
    V = np.column_stack([X, X @ w_star])
    template = ReleasedSketch(
        matrix=np.zeros((1, 3)), columns=("a", "b", "y"), centers=np.zeros(3),
        scales=np.ones(3), label=2, intercept=None, n=1, noise_variance_per_column=0.0,
    )
    rel = local_release(template, V, 30.0, DELTA, C, np.random.default_rng(12))
    sigma = analytic_gaussian_sigma(30.0, DELTA, 2 * C)
    assert rel.n == n and rel.matrix.shape == (n, 3)
    assert rel.noise_variance_per_column == pytest.approx(n * sigma**2)
    assert rel.columns == template.columns and rel.sha256 == ""
    assert rel.privacy["baseline"] == "local"
    naive = OLS().fit(rel)
    dgm = DGMOLS(1e-5).fit(rel)
    assert np.linalg.norm(naive.coef_ - w_star) > 0.5 * np.linalg.norm(w_star)
    assert np.linalg.norm(dgm.coef_ - w_star) < 0.1 * np.linalg.norm(w_star)


def test_baselines_require_a_generator() -> None:
    A, b = _reg_data(13, n=20, d=2, C=1.0)
    with pytest.raises(TypeError):
        ssp_ridge(A, b, 1.0, 1.0, DELTA, 1.0, 42)  # type: ignore[arg-type]


# ====== mutation-kill tests for analyst/baselines.py (scripts/mutation.sh), formerly test_kills_baselines.py
# Each test checks behaviour against a value computed independently (a closed form written out
# again, numpy/scipy in the clear, a second route through the code), never a recorded output.
from ltm.analyst import baselines as bl  # noqa: E402
from tests.helpers.messages import exact as _exact  # noqa: E402

# --- analyst/baselines.py: each baseline re-derived from its documented algorithm ------------------


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
    """SSP and AdaSSP solve their noisy statistics with ltm.analyst.gram.solve_gram (the LTM's own
    rule, tested in test_gram.py): an indefinite noisy AᵀA is projected and reported."""
    from ltm.analyst.gram import solve_gram
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
    from ltm.analyst.release import ReleasedSketch

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
    from ltm.analyst.release import ReleasedSketch

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
    from ltm.analyst.release import ReleasedSketch

    V = np.eye(3)
    template = ReleasedSketch(matrix=np.zeros((3, 3)), columns=("a", "b", "y"), centers=np.zeros(3),
                              scales=np.ones(3), label=2, intercept=None, n=3, noise_variance_per_column=0.0,
                              privacy={}, sha256="x")
    rel = bl.local_release(template, V, 1.0, 1e-6, 1.0, np.random.default_rng(2))
    sigma = analytic_gaussian_sigma(1.0, 1e-6, 2.0)
    assert rel.privacy == {"baseline": "local", "epsilon": 1.0, "delta": 1e-6, "sensitivity": 2.0,
                           "sigma_client": pytest.approx(sigma),
                           "note": "simulation baseline (seeded numpy RNG), not a production release"}

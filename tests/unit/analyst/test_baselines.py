"""Tests for analyst.baselines: SSP, AdaSSP, MOD-SULQ, the local model (fixed seeds)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ltm.clipping import clip_rows
from analyst.baselines import (
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
from analyst.estimators import DGMOLS, OLS
from analyst.metrics import ridge_optimum
from analyst.release import ReleasedSketch
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

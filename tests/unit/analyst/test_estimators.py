"""Tests for ltm.analyst.estimators: solvers, raw-unit mapping, OLS/Ridge/RMGM/DGM/LowRank."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.optional import require

require("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from ltm.analyst.estimators import (
    DGMOLS,
    ESTIMATOR_NAMES,
    OLS,
    RMGMOLS,
    LowRank,
    Ridge,
    linear_predictor,
    make_estimator,
    map_to_raw,
    solve_normal_equations,
    solve_ridge,
    to_scaled,
)
from ltm.analyst.release import ReleasedSketch
from ltm.lifts import gram_noise_factors


def _release(
    matrix: np.ndarray,
    *,
    centers: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    intercept: int | None = None,
    labelled: bool = True,
    n: int | None = None,
    noise_variance: float = 0.0,
) -> ReleasedSketch:
    D = matrix.shape[1]
    names = [f"x{j}" for j in range(D)]
    if intercept is not None:
        names[intercept] = "intercept"
    if labelled:
        names[-1] = "y"
    return ReleasedSketch(
        matrix=np.asarray(matrix, dtype=np.float64),
        columns=tuple(names),
        centers=np.zeros(D) if centers is None else np.asarray(centers, dtype=np.float64),
        scales=np.ones(D) if scales is None else np.asarray(scales, dtype=np.float64),
        label=D - 1 if labelled else None,
        intercept=intercept,
        n=matrix.shape[0] if n is None else n,
        noise_variance_per_column=noise_variance,
    )


def _regression(seed: int, n: int = 300, d: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.linspace(0.3, 2.0, d)
    y = X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n)
    return X, y


# ------------------------------------------------------------------ identity sketch = exact solvers


def test_ols_and_ridge_on_identity_sketch_equal_closed_forms() -> None:
    X, y = _regression(0)
    rel = _release(np.column_stack([X, y]))
    ols = OLS().fit(rel)
    np.testing.assert_allclose(ols.coef_scaled_, np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-10)
    np.testing.assert_allclose(ols.coef_, ols.coef_scaled_, rtol=1e-14)
    assert ols.intercept_ == 0.0
    lam = 4.0
    ridge = Ridge(lam).fit(rel)
    closed = np.linalg.inv(X.T @ X + lam * np.eye(X.shape[1])) @ X.T @ y
    np.testing.assert_allclose(ridge.coef_scaled_, closed, rtol=1e-10)
    assert ridge.solver_ == "cholesky"
    np.testing.assert_allclose(solve_ridge(X, y, lam), closed, rtol=1e-10)
    np.testing.assert_allclose(Ridge(lam).fit_matrix(X, y).coef_, closed, rtol=1e-10)
    np.testing.assert_allclose(Ridge(0.0).fit(rel).coef_, ols.coef_, rtol=1e-10)


def test_ridge_uses_same_lambda_and_does_not_debias() -> None:
    # A release that claims a large noise variance: Ridge must ignore it (Burkhardt et al.'s
    # Theorem 5.8: no de-biasing) and must not rescale λ by n or m.
    X, y = _regression(1, n=50)
    rel = _release(np.column_stack([X, y]), n=10_000, noise_variance=123.0)
    lam = 0.5
    closed = np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ y)
    np.testing.assert_allclose(Ridge(lam).fit(rel).coef_scaled_, closed, rtol=1e-10)


def test_ols_rank_deficient_is_min_norm() -> None:
    X, y = _regression(2, n=4, d=6)  # fewer sketch rows than regressors
    w = OLS().fit(_release(np.column_stack([X, y]))).coef_scaled_
    np.testing.assert_allclose(w, np.linalg.pinv(X) @ y, atol=1e-10)


def test_solver_fallback_paths() -> None:
    H = np.array([[1.0, 0.0], [0.0, -1.0]])
    g = np.array([1.0, 1.0])
    x, how = solve_normal_equations(H, g, assume_pd=True)
    assert how == "lstsq (not positive definite)"
    np.testing.assert_allclose(H @ x, g, atol=1e-12)
    x, how = solve_normal_equations(H, g, assume_pd=False)
    assert how == "lu"
    x, how = solve_normal_equations(np.zeros((2, 2)), g, assume_pd=False)
    assert how == "lstsq (singular)"
    np.testing.assert_allclose(x, 0.0)


# ------------------------------------------------------------------ raw-unit mapping


def test_raw_unit_round_trip_with_intercept() -> None:
    rng = np.random.default_rng(3)
    n, d = 500, 3
    X_raw = rng.uniform([0, 100, -5], [10, 300, 5], size=(n, d))
    beta = np.array([2.5, -0.03, 7.0])
    beta0 = 42.0
    y_raw = X_raw @ beta + beta0
    centers = np.array([5.0, 200.0, 0.0, 0.0, 60.0])  # features, intercept (0), label
    scales = np.array([10.0, 400.0, 8.0, 2.5, 90.0])
    Z = to_scaled(X_raw, centers[:d], scales[:d])
    icol = np.full(n, (1.0 - centers[d]) / scales[d])
    yz = (y_raw - centers[-1]) / scales[-1]
    rel = _release(np.column_stack([Z, icol, yz]), centers=centers, scales=scales, intercept=d)
    model = OLS().fit(rel)
    assert model.coef_.shape == (d,)
    assert model.coef_scaled_.shape == (d + 1,)
    np.testing.assert_allclose(model.coef_, beta, rtol=1e-8, atol=1e-10)
    assert model.intercept_ == pytest.approx(beta0, rel=1e-8)
    np.testing.assert_allclose(model.predict(X_raw), y_raw, rtol=1e-8)
    np.testing.assert_allclose(model.predict_scaled(rel.design), yz, atol=1e-8)
    assert model.feature_names_in_ == ("x0", "x1", "x2")


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    d=st.integers(1, 4),
    with_intercept=st.booleans(),
)
def test_map_to_raw_matches_scaled_prediction(seed: int, d: int, with_intercept: bool) -> None:
    rng = np.random.default_rng(seed)
    D = d + (1 if with_intercept else 0) + 1
    centers = rng.normal(0, 10, D)
    scales = rng.uniform(0.1, 50, D) * rng.choice([-1, 1], D)  # even negative scales map right
    intercept = d if with_intercept else None
    if with_intercept:
        centers[d] = 0.0
    rel = _release(np.zeros((2, D)), centers=centers, scales=scales, intercept=intercept)
    w = rng.normal(size=D - 1)
    model = linear_predictor(w, rel)
    X_raw = rng.normal(0, 20, size=(7, d))
    Z = to_scaled(X_raw, centers[:d], scales[:d])
    if with_intercept:
        Z = np.column_stack([Z, np.full(7, 1.0 / scales[d])])
    expected = centers[-1] + scales[-1] * (Z @ w)
    np.testing.assert_allclose(model.predict(X_raw), expected, rtol=1e-9, atol=1e-9)
    coef, b0 = map_to_raw(w, rel)
    np.testing.assert_allclose(coef, model.coef_)
    if not with_intercept and np.allclose(centers, 0):
        assert b0 == 0.0


def test_no_intercept_column_zero_centers_gives_zero_intercept() -> None:
    X, y = _regression(4)
    rel = _release(np.column_stack([X, y]), scales=np.array([2.0, 3, 4, 5, 6, 7]))
    model = Ridge(1.0).fit(rel)
    assert model.intercept_ == 0.0
    np.testing.assert_allclose(model.coef_, 7.0 * model.coef_scaled_ / np.array([2.0, 3, 4, 5, 6]))


def test_unlabelled_release_and_unfitted_errors() -> None:
    rel = _release(np.ones((5, 3)), labelled=False)
    with pytest.raises(ValueError, match="label"):
        OLS().fit(rel)
    with pytest.raises(RuntimeError):
        Ridge(1.0).predict(np.ones((2, 2)))
    model = OLS().fit(_release(np.column_stack(_regression(5))))
    with pytest.raises(ValueError):
        model.predict(np.ones((2, 3)))


# ------------------------------------------------------------------ RMGM-OLS


def test_rmgm_closed_form_normalises_by_release_n() -> None:
    X, y = _regression(6, n=40)
    n = 5000
    lam = 1e-3
    rel = _release(np.column_stack([X, y]), n=n)
    model = RMGMOLS(lam).fit(rel)
    expected = np.linalg.solve(X.T @ X / n + lam * np.eye(X.shape[1]), X.T @ y / n)
    np.testing.assert_allclose(model.coef_scaled_, expected, rtol=1e-10)
    # It is NOT Ridge(λ): the 1/n normalisation makes the effective ridge n·λ.
    assert not np.allclose(model.coef_scaled_, Ridge(lam).fit(rel).coef_scaled_, rtol=1e-3)
    np.testing.assert_allclose(
        model.coef_scaled_, Ridge(n * lam).fit(rel).coef_scaled_, rtol=1e-8
    )


def test_rmgm_consistent_on_rademacher_release() -> None:
    rng = np.random.default_rng(7)
    n, k, d = 10_000, 100, 3
    X = rng.uniform(-1, 1, size=(n, d))
    w_star = np.array([0.5, -0.8, 0.3])
    y = X @ w_star + 0.01 * rng.standard_normal(n)
    B = rng.choice([-1.0, 1.0], size=(k, n))
    tau = 1.0
    rel_mat = B @ np.column_stack([X, y]) / np.sqrt(k) + tau * rng.standard_normal((k, d + 1))
    model = RMGMOLS(1e-5).fit(_release(rel_mat, n=n, noise_variance=k * tau**2))
    assert np.linalg.norm(model.coef_ - w_star) < 0.1 * np.linalg.norm(w_star)


# ------------------------------------------------------------------ DGM-OLS


def test_dgm_debiases_where_naive_ols_shrinks() -> None:
    rng = np.random.default_rng(8)
    n, d = 200_000, 3
    X = rng.uniform(-1, 1, size=(n, d))  # E[xxᵀ] = I/3
    w_star = np.array([1.0, -2.0, 0.5])
    b0 = 0.7
    s0 = 2.0  # intercept column: raw 1, center 0, scale 2 → transformed value 0.5
    y = X @ w_star + b0
    tau2 = 0.5  # per-entry noise variance, comparable to the signal
    clean = np.column_stack([X, np.full(n, 1.0 / s0), y])
    noisy = clean + np.sqrt(tau2) * rng.standard_normal(clean.shape)
    scales = np.array([1.0, 1.0, 1.0, s0, 1.0])
    rel = _release(noisy, scales=scales, intercept=d, n=n, noise_variance=n * tau2)

    naive = OLS().fit(rel)
    dgm = DGMOLS(1e-5).fit(rel)
    truth = np.append(w_star, b0)
    err_naive = np.linalg.norm(np.append(naive.coef_, naive.intercept_) - truth)
    err_dgm = np.linalg.norm(np.append(dgm.coef_, dgm.intercept_) - truth)
    assert err_naive > 0.5 * np.linalg.norm(truth)  # shrunk towards 0
    assert err_dgm < 0.05 * np.linalg.norm(truth)
    assert abs(dgm.intercept_ - b0) < 0.05  # the intercept column is de-biased too
    assert dgm.min_eigenvalue_ > 0.2 and not dgm.indefinite_
    # The exact formula, with the noise subtracted on every regressor incl. the intercept.
    Xt, yt = rel.design, rel.target
    H = (Xt.T @ Xt - n * tau2 * np.eye(d + 1)) / n + 1e-5 * np.eye(d + 1)
    np.testing.assert_allclose(dgm.coef_scaled_, np.linalg.solve(H, Xt.T @ yt / n), rtol=1e-9)


def test_dgm_flags_small_eigenvalue_problem() -> None:
    X, y = _regression(9, n=30, d=3)
    over = 2.0 * float(np.max(np.diag(X.T @ X)))  # subtract more than the Gram diagonal
    model = DGMOLS(1e-5).fit_matrix(X, y, n=30, noise_variance=over)
    assert model.indefinite_
    assert model.min_eigenvalue_ < 0
    assert model.min_abs_eigenvalue_ >= 0
    assert model.solver_ == "lu"
    ok = DGMOLS(1e-5).fit_matrix(X, y, n=30, noise_variance=0.0)
    assert not ok.indefinite_
    np.testing.assert_allclose(ok.coef_, solve_ridge(X, y, 30 * 1e-5), rtol=1e-8)


# ------------------------------------------------------------------ LowRank


def _countsketch(M: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    rows = rng.integers(0, m, size=M.shape[0])
    signs = rng.choice([-1.0, 1.0], size=M.shape[0])
    out = np.zeros((m, M.shape[1]))
    np.add.at(out, rows, signs[:, None] * M)
    return out


def test_lowrank_recovers_planted_subspace_from_countsketch() -> None:
    rng = np.random.default_rng(10)
    n, D, k, m = 20_000, 8, 2, 60
    V_true, _ = np.linalg.qr(rng.standard_normal((D, k)))
    A = (rng.standard_normal((n, k)) * [3.0, 2.0]) @ V_true.T + 0.05 * rng.standard_normal((n, D))
    rel = _release(_countsketch(A, m, rng), labelled=False, n=n)
    model = LowRank(k).fit(rel)
    X = model.components_
    assert X.shape == (D, k)
    np.testing.assert_allclose(X.T @ X, np.eye(k), atol=1e-12)
    assert np.linalg.norm(X @ X.T - V_true @ V_true.T, 2) < 0.05
    assert model.singular_values_.shape == (k,)
    assert np.all(np.diff(model.singular_values_) <= 0)
    Z = A[:5]
    np.testing.assert_allclose(model.transform(Z), Z @ X)
    np.testing.assert_allclose(model.inverse_transform(model.transform(Z)), Z @ X @ X.T)
    # A random subspace is far from the planted one (the test can fail).
    R, _ = np.linalg.qr(rng.standard_normal((D, k)))
    assert np.linalg.norm(R @ R.T - V_true @ V_true.T, 2) > 0.3


def test_lowrank_rank_validation() -> None:
    with pytest.raises(ValueError):
        LowRank(0)
    with pytest.raises(ValueError, match="exceeds"):
        LowRank(4).fit_matrix(np.ones((3, 6)))


# ------------------------------------------------------------------ factory


def test_make_estimator_names() -> None:
    assert isinstance(make_estimator("ols", lam=1.0, rank=2), OLS)
    r = make_estimator("ridge", lam=2.0, rank=2)
    assert isinstance(r, Ridge) and r.lam == 2.0
    lr = make_estimator("lowrank", lam=1.0, rank=3)
    assert isinstance(lr, LowRank) and lr.rank == 3
    assert isinstance(make_estimator("rmgm_ols", lam=1e-4, rank=1), RMGMOLS)
    dgm = make_estimator("dgm_ols", lam=1e-4, rank=1)
    assert isinstance(dgm, DGMOLS) and dgm.lam == 1e-4
    assert make_estimator("dgm_ols").lam == 1e-5
    assert set(ESTIMATOR_NAMES) == {"ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols"}
    with pytest.raises(ValueError) as info:
        make_estimator("lasso", lam=1.0, rank=1)
    for name in ESTIMATOR_NAMES:
        assert name in str(info.value)
    with pytest.raises(ValueError):
        make_estimator("ridge")
    with pytest.raises(ValueError):
        Ridge(-1.0)


# ====== mutation-kill tests for analyst/estimators.py (scripts/mutation.sh), formerly test_kills_estimators.py
# Each test checks behaviour against a value computed independently (a closed form written out
# again, numpy/scipy in the clear, a second route through the code), never a recorded output.
import math  # noqa: E402
from dataclasses import replace as _replace  # noqa: E402

from ltm.analyst import estimators as est  # noqa: E402
from tests.helpers.messages import exact as _exact  # noqa: E402

# --- analyst/estimators.py: the de-biased ridge, its eigenvalue floor, LowRank's signs ---------


def _design(m: int, p: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, p)) * np.array([5.0, 3.0, 2.0, 1.0][:p])
    y = X @ rng.normal(size=p) + rng.normal(size=m)
    return X, y


def test_debiased_ridge_subtracts_the_noise_gram_when_above_the_floor():
    X, y = _design(400, 3, 1)
    v, lam = 50.0, 2.0
    # Independent: the closed form (XᵀX − v·I + λI)⁻¹ Xᵀy by a linear solve (no eigh), valid when
    # every eigenvalue of XᵀX − vI is above the floor v/m·(2√(mp) + p).
    floor = v / 400 * (2 * np.sqrt(400 * 3) + 3)
    assert np.linalg.eigvalsh(X.T @ X - v * np.eye(3)).min() > floor
    expected = np.linalg.solve(X.T @ X - v * np.eye(3) + lam * np.eye(3), X.T @ y)
    model = Ridge(lam, debias=True).fit_matrix(X, y, noise_variance=v)
    assert np.allclose(model.coef_, expected, rtol=1e-10, atol=0)
    assert model.eigen_floor_ == pytest.approx(floor, rel=1e-12)
    assert model.indefinite_ is False
    assert model.min_eigenvalue_ == pytest.approx(np.linalg.eigvalsh(X.T @ X).min() - v, rel=1e-10)
    # and it differs from the biased estimator by exactly the −v shift
    biased = np.linalg.solve(X.T @ X + lam * np.eye(3), X.T @ y)
    assert np.allclose(Ridge(lam).fit_matrix(X, y).coef_, biased, rtol=1e-10)
    assert not np.allclose(model.coef_, biased, rtol=1e-3)


def test_debiased_ridge_clamps_eigenvalues_to_the_noise_floor():
    X, y = _design(50, 3, 2)
    m, p = X.shape
    v, lam = 200.0, 0.5  # large noise: some eigenvalues of XᵀX − vI fall below the floor (or below 0)
    floor = v / m * (2 * np.sqrt(m * p) + p)
    # Independent route: the SVD of X gives the eigenpairs of XᵀX.
    _, s, vt = np.linalg.svd(X, full_matrices=False)
    shifted = s**2 - v
    assert shifted.min() < floor < shifted.max()
    expected = vt.T @ ((vt @ (X.T @ y)) / (np.maximum(shifted, floor) + lam))
    model = Ridge(lam, debias=True).fit_matrix(X, y, noise_variance=v)
    assert np.allclose(model.coef_, expected, rtol=1e-9, atol=1e-12)
    assert model.eigen_floor_ == pytest.approx(floor, rel=1e-12)
    assert model.indefinite_ is bool(shifted.min() <= 0)
    assert model.solver_ == "eigh-clamped"


def test_debiased_ridge_indefinite_flag_is_set_by_a_negative_eigenvalue():
    X = np.diag([10.0, 1.0])  # XᵀX = diag(100, 1)
    y = np.array([1.0, 1.0])
    model = Ridge(0.0, debias=True).fit_matrix(X, y, noise_variance=4.0)
    assert model.indefinite_ is True and model.min_eigenvalue_ == pytest.approx(-3.0)
    floor = 4.0 / 2 * (2 * np.sqrt(4.0) + 2)  # = 12
    assert model.eigen_floor_ == pytest.approx(floor)
    assert np.allclose(model.coef_, [10.0 / 96.0, 1.0 / floor])  # (100−4)⁻¹·10 and floor⁻¹·1
    zero = Ridge(0.0, debias=True).fit_matrix(X, y, noise_variance=0.0)
    assert zero.indefinite_ is False and np.allclose(zero.coef_, [0.1, 1.0])


def test_lowrank_signs_make_the_largest_entry_positive_and_are_deterministic():
    rng = np.random.default_rng(3)
    for trial in range(12):
        M = rng.normal(size=(40, 6)) @ np.diag([9.0, 7.0, 5.0, 1.0, 0.5, 0.1])
        fitted = LowRank(3).fit_matrix(M)
        C = fitted.components_
        pivots = np.abs(C).argmax(axis=0)
        assert np.all(C[pivots, np.arange(3)] > 0), trial
        # Independent: the same subspace as numpy's SVD, each column equal up to its sign.
        _, s, vt = np.linalg.svd(M, full_matrices=False)
        assert np.allclose(np.abs(C.T @ vt[:3].T), np.eye(3), atol=1e-8)
        assert np.allclose(fitted.singular_values_, s[:3])
        # Flipping the sign of rows of M leaves its right singular vectors — and the fit — unchanged.
        flips = np.where(rng.random(40) < 0.5, -1.0, 1.0)[:, None]
        assert np.allclose(LowRank(3).fit_matrix(flips * M).components_, C, atol=1e-10)


# --- the rest of analyst/estimators.py ------------------------------------------------------------


def _sketch_release(matrix: np.ndarray, n: int = 500, v: float = 0.0) -> ReleasedSketch:
    return ReleasedSketch(matrix=matrix, columns=("a", "b", "one", "y"), centers=np.array([1.0, -2.0, 0.5, 3.0]),
                          scales=np.array([2.0, 0.5, 4.0, 10.0]), label=3, intercept=2, n=n,
                          noise_variance_per_column=v, privacy={}, sha256="")


def test_raw_unit_predictions_equal_the_scaled_model_mapped_back():
    rng = np.random.default_rng(1)
    rel = _sketch_release(rng.normal(size=(40, 4)))
    model = est.Ridge(0.3).fit(rel)
    w = model.coef_scaled_
    assert np.allclose(w, np.linalg.solve(rel.design.T @ rel.design + 0.3 * np.eye(3), rel.design.T @ rel.target))
    X_raw = rng.normal(size=(7, 2)) * 5
    z = np.column_stack([(X_raw - rel.centers[:2]) / rel.scales[:2], np.full(7, (1 - 0.5) / 4.0)])
    expected = rel.centers[3] + rel.scales[3] * (z @ w)  # label units: y = c_y + s_y · ŷ_scaled
    assert np.allclose(model.predict(X_raw), expected)
    assert np.allclose(model.predict_scaled(z), z @ w)
    assert model.feature_names_in_ == ("a", "b")
    assert est.linear_predictor(w, rel).solver_ == "external"
    assert np.allclose(est.linear_predictor(w, rel).predict(X_raw), expected)
    with pytest.raises(ValueError, match=_exact("X_raw must have shape (n, 2), got (7, 3)")):
        model.predict(np.zeros((7, 3)))
    with pytest.raises(ValueError, match=_exact("Z must have shape (n, 3), got (7, 2)")):
        model.predict_scaled(np.zeros((7, 2)))
    with pytest.raises(RuntimeError, match=_exact("Ridge is not fitted; call fit() first")):
        est.Ridge(1.0).predict(X_raw)
    with pytest.raises(ValueError, match=_exact("coef_scaled has 2 entries, expected 3")):
        est.map_to_raw(np.zeros(2), rel)
    with pytest.raises(ValueError, match=_exact("every column scale must be finite and non-zero")):
        est.map_to_raw(np.zeros(3), _replace(rel, scales=np.array([2.0, 0.0, 4.0, 10.0])))
    assert np.allclose(est.to_scaled(X_raw, rel.centers[:2], rel.scales[:2]), z[:, :2])


def test_ols_rmgm_and_dgm_formulas():
    rng = np.random.default_rng(2)
    M = rng.normal(size=(60, 4))
    rel = _sketch_release(M, n=500, v=3.0)
    X, y = rel.design, rel.target
    assert np.allclose(est.OLS().fit(rel).coef_scaled_, np.linalg.lstsq(X, y, rcond=None)[0])
    n, lam = 500, 0.01
    rmgm = est.RMGMOLS(lam).fit(rel)
    assert np.allclose(rmgm.coef_scaled_, np.linalg.solve(X.T @ X / n + lam * np.eye(3), X.T @ y / n))
    assert rmgm.min_eigenvalue_ == pytest.approx(np.linalg.eigvalsh(X.T @ X / n + lam * np.eye(3))[0])
    dgm = est.DGMOLS(lam).fit(rel)
    H = (X.T @ X - 3.0 * np.eye(3)) / n + lam * np.eye(3)
    assert np.allclose(dgm.coef_scaled_, np.linalg.solve(H, X.T @ y / n))
    evals = np.linalg.eigvalsh(H)
    assert dgm.min_eigenvalue_ == pytest.approx(evals[0])
    assert dgm.min_abs_eigenvalue_ == pytest.approx(np.abs(evals).min())
    assert dgm.indefinite_ is bool(evals[0] <= 0)
    assert repr(est.RMGMOLS()) == "RMGMOLS(lam=1e-05)" and repr(est.DGMOLS(0.5)) == "DGMOLS(lam=0.5)"
    assert repr(est.OLS()) == "OLS()" and repr(est.Ridge(2.0, debias=True)) == "Ridge(lam=2.0, debias=True)"
    assert repr(est.LowRank(3)) == "LowRank(rank=3)"


def test_solve_normal_equations_paths():
    H = np.array([[4.0, 1.0], [1.0, 3.0]])
    g = np.array([1.0, 2.0])
    x, solver = est.solve_normal_equations(H, g)
    assert solver == "cholesky" and np.allclose(H @ x, g)
    x, solver = est.solve_normal_equations(np.array([[1.0, 0.0], [0.0, -1.0]]), g)
    assert solver == "lstsq (not positive definite)" and np.allclose(x, [1.0, -2.0])
    x, solver = est.solve_normal_equations(np.array([[1.0, 0.0], [0.0, -1.0]]), g, assume_pd=False)
    assert solver == "lu" and np.allclose(x, [1.0, -2.0])
    x, solver = est.solve_normal_equations(np.array([[1.0, 0.0], [0.0, 0.0]]), g, assume_pd=False)
    assert solver == "lstsq (singular)" and np.allclose(x, [1.0, 0.0])
    x, solver = est.solve_normal_equations(np.array([[2.0, 2.0], [0.0, 2.0]]), g)  # symmetrised first
    assert solver == "cholesky" and np.allclose(np.array([[2.0, 1.0], [1.0, 2.0]]) @ x, g)
    with pytest.raises(ValueError, match=_exact("incompatible shapes: H (2, 2), g (3,)")):
        est.solve_normal_equations(H, np.zeros(3))
    assert np.allclose(est.solve_ridge(np.eye(2), g, 0.0), g)
    assert np.allclose(est.solve_ridge(np.eye(2), g, 1.0), g / 2)


def test_estimator_factory_and_argument_checks():
    assert isinstance(est.make_estimator(" OLS "), est.OLS)
    ridge = est.make_estimator("ridge", lam=2.0, debias=True)
    assert isinstance(ridge, est.Ridge) and ridge.lam == 2.0 and ridge.debias is True
    assert est.make_estimator("lowrank", rank=2).rank == 2
    assert est.make_estimator("rmgm_ols").lam == 1e-5 and est.make_estimator("rmgm_ols", lam=0.5).lam == 0.5
    assert est.make_estimator("dgm_ols").lam == 1e-5 and est.make_estimator("dgm_ols", lam=0.5).lam == 0.5
    for kwargs, message in ((dict(model="ridge"), "model 'ridge' needs lam"),
                            (dict(model="lowrank"), "model 'lowrank' needs rank"),
                            (dict(model="lasso"), "unknown model 'lasso'; valid models are: "
                                                  + ", ".join(est.ESTIMATOR_NAMES))):
        with pytest.raises(ValueError, match=_exact(message)):
            est.make_estimator(**kwargs)
    with pytest.raises(ValueError, match=_exact("lam must be finite and >= 0, got -1")):
        est.Ridge(-1)
    with pytest.raises(ValueError, match=_exact("n must be >= 1, got 0")):
        est.RMGMOLS().fit_matrix(np.eye(2), np.ones(2), n=0)
    with pytest.raises(ValueError, match=_exact("X must be 2-D (m, p), got shape (3,)")):
        est.OLS().fit_matrix(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match=_exact("y has 2 entries, X has 3 rows")):
        est.OLS().fit_matrix(np.ones((3, 1)), np.ones(2))
    with pytest.raises(ValueError, match=_exact("rank must be an integer >= 1, got 0")):
        est.LowRank(0)
    with pytest.raises(ValueError, match=_exact("rank 3 exceeds min(m=2, D=4)")):
        est.LowRank(3).fit_matrix(np.ones((2, 4)))
    with pytest.raises(ValueError, match=_exact("M must be 2-D, got shape (4,)")):
        est.LowRank(1).fit_matrix(np.ones(4))
    assert est.default_ridge_lambda(2.0, 16) == pytest.approx(8.0)
    low = est.LowRank(2).fit_matrix(np.random.default_rng(0).normal(size=(10, 4)))
    Z = np.random.default_rng(1).normal(size=(5, 4))
    assert np.allclose(low.transform(Z), Z @ low.components_)
    assert np.allclose(low.inverse_transform(low.transform(Z)), Z @ low.components_ @ low.components_.T)
    with pytest.raises(ValueError, match=_exact("Z must have shape (n, 4), got (5, 3)")):
        low.transform(Z[:, :3])
    with pytest.raises(RuntimeError, match=_exact("LowRank is not fitted; call fit() first")):
        est.LowRank(1).transform(Z)


def _gram_release(seed=4, n=300, v=0.0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 4)) * np.array([2.0, 1.0, 0.5, 1.5])
    Z[:, 3] = Z[:, 0] - Z[:, 1] + 0.3 * rng.normal(size=n)
    G = Z.T @ Z
    i, j = np.triu_indices(4)
    vector = G[i, j]  # the lift's unweighted upper triangle (ltm/lifts.py)
    rel = ReleasedSketch(matrix=vector[None, :], columns=("a", "b", "one", "y"), centers=np.zeros(4),
                         scales=np.ones(4), label=3, intercept=2, n=n, noise_variance_per_column=v,
                         privacy={}, sha256="", kind="gram",
                         entry_noise_variance=v * gram_noise_factors(4))  # the Gaussian rows gram's profile
    return rel, Z, G


def test_estimators_on_a_gram_release_solve_the_released_normal_equations():
    rel, Z, G = _gram_release()
    Gxx, gxy = G[:3, :3], G[:3, 3]
    assert np.allclose(est.OLS().fit(rel).coef_scaled_, np.linalg.solve(Gxx, gxy))
    assert np.allclose(est.Ridge(2.0).fit(rel).coef_scaled_, np.linalg.solve(Gxx + 2.0 * np.eye(3), gxy))
    n = rel.n
    assert np.allclose(est.RMGMOLS(0.01).fit(rel).coef_scaled_, np.linalg.solve(Gxx + 0.01 * n * np.eye(3), gxy))
    assert np.allclose(est.DGMOLS(0.01).fit(rel).coef_scaled_, np.linalg.solve(Gxx + 0.01 * n * np.eye(3), gxy))
    low = est.LowRank(2).fit(rel)
    _, s, vt = np.linalg.svd(Z, full_matrices=False)  # ZᵀZ's eigenvectors are Z's right singular vectors
    assert np.allclose(low.singular_values_, s[:2])
    assert np.allclose(np.abs(low.components_.T @ vt[:2].T), np.eye(2), atol=1e-8)
    pivots = np.abs(low.components_).argmax(axis=0)
    assert np.all(low.components_[pivots, [0, 1]] > 0)


def test_release_lambda_rules():
    from ltm.analyst.gram import adassp_lambda

    rel, _, G = _gram_release(v=5.0)
    lam, rule = est.release_lambda(rel)
    assert lam == pytest.approx(adassp_lambda(G[:3, :3], 5.0))
    assert rule == ("adassp_lambda: max(0, √(2pv) − λ_min(noisy XᵀX)), √(2pv) the noise's spectral edge, v the "
                    "Wigner variance of the released noise (analyst/gram.py)")
    sk = _sketch_release(np.random.default_rng(0).normal(size=(16, 4)), v=32.0)
    lam, rule = est.release_lambda(sk)
    assert lam == pytest.approx(32.0 / 16 * math.sqrt(16))
    assert rule == "default_ridge_lambda: v·√m (v: noise variance per scaled entry)"


def test_lowrank_and_factory_edges():
    for bad in (2.5, True, "2"):
        with pytest.raises(ValueError, match="^rank must be an integer >= 1"):
            est.LowRank(bad)
    M = np.random.default_rng(5).normal(size=(10, 4))
    assert est.LowRank(4).fit_matrix(M).components_.shape == (4, 4)  # rank = min(m, D) is allowed
    assert est.make_estimator("ridge", lam=1.0).debias is False
    with pytest.raises(ValueError, match="^unknown model None; valid models are: "):
        est.make_estimator(None)


def test_plain_fits_solver_names_and_defaults():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(30, 3))
    y = X @ np.array([1.0, 2.0, -1.0]) + rng.normal(size=30)
    ols = est.OLS().fit_matrix(X, y)
    assert ols.solver_ == "lstsq" and ols.intercept_ == 0.0 and ols.feature_names_in_ == ("x0", "x1", "x2")
    assert est.Ridge(0.0).fit_matrix(X, y).solver_ == "lstsq"
    r = est.Ridge(1.0).fit_matrix(X, y)
    assert r.solver_ == "cholesky" and r.indefinite_ is False
    # de-biasing with the default noise_variance (0): the plain ridge solution
    d0 = est.Ridge(1.0, debias=True).fit_matrix(X, y)
    assert np.allclose(d0.coef_, np.linalg.solve(X.T @ X + np.eye(3), X.T @ y)) and d0.eigen_floor_ == 0.0
    rm = est.RMGMOLS(0.1).fit_matrix(X, y)  # n defaults to the number of rows
    assert rm.solver_ == "cholesky"
    assert np.allclose(rm.coef_, np.linalg.solve(X.T @ X / 30 + 0.1 * np.eye(3), X.T @ y / 30))
    assert np.allclose(est.RMGMOLS(0.1).fit_matrix(X, y, n=1).coef_,
                       np.linalg.solve(X.T @ X + 0.1 * np.eye(3), X.T @ y))  # n = 1 is legal
    for bad in (-1.0, float("inf")):
        with pytest.raises(ValueError, match=_exact(f"noise variance must be finite and >= 0, got {bad}")):
            est.DGMOLS().fit_matrix(X, y, noise_variance=bad)


def test_indefinite_flags_at_an_exactly_zero_eigenvalue():
    X = np.diag([2.0, 1.0])  # XᵀX = diag(4, 1)
    y = np.array([1.0, 1.0])
    ridge = est.Ridge(0.5, debias=True).fit_matrix(X, y, noise_variance=1.0)  # XᵀX − I = diag(3, 0)
    assert ridge.indefinite_ is True and ridge.min_eigenvalue_ == 0.0
    one_row = est.Ridge(0.5, debias=True).fit_matrix(np.array([[3.0, 4.0]]), np.array([1.0]), noise_variance=2.0)
    assert one_row.eigen_floor_ == pytest.approx(2.0 / 1 * (2 * math.sqrt(2) + 2))  # m = 1 row
    dgm = est.DGMOLS(0.0).fit_matrix(X, y, n=2, noise_variance=1.0)  # H = diag(3, 0) / 2
    assert dgm.indefinite_ is True and dgm.min_eigenvalue_ == 0.0 and dgm.solver_ == "lstsq (singular)"
    ok = est.DGMOLS(0.0).fit_matrix(np.diag([3.0, 2.0]), y, n=2, noise_variance=1.0)  # diag(8, 3) / 2
    assert ok.indefinite_ is False and ok.solver_ == "lu"


def test_ridge_on_gram_releases_flags_a_singular_design():
    rel, _, _ = _gram_release()
    assert est.Ridge(1.0).fit(rel).indefinite_ is False
    small, _, G = _gram_release(seed=5, n=3)  # 3 rows: XᵀX (3 × 3) is PD but its smallest eigenvalue < 1
    assert 0 < np.linalg.eigvalsh(G[:3, :3])[0] < 1
    assert est.Ridge(1.0).fit(small).indefinite_ is False
    # noise can make the released XᵀX indefinite: one negative eigenvalue, the others positive
    G = np.array([[5.0, 0.0, 0.0, 1.0], [0.0, -1.0, 0.0, 1.0], [0.0, 0.0, 3.0, 1.0], [1.0, 1.0, 1.0, 10.0]])
    i, j = np.triu_indices(4)
    vector = G[i, j]  # the unweighted upper triangle (ltm/lifts.py)
    singular = ReleasedSketch(matrix=vector[None, :], columns=("a", "b", "one", "y"), centers=np.zeros(4),
                              scales=np.ones(4), label=3, intercept=2, n=40, noise_variance_per_column=0.0,
                              privacy={}, sha256="", kind="gram", entry_noise_variance=np.zeros(10))
    ev = np.linalg.eigvalsh(singular.gram[:3, :3])
    assert ev[0] <= 0.0 < ev[1]
    assert est.Ridge(1.0).fit(singular).indefinite_ is True


def test_lowrank_on_a_small_gram_release_keeps_small_singular_values():
    rel, Z, _ = _gram_release(seed=2, n=50)
    tiny = _replace(rel, matrix=rel.matrix * 1e-4)  # ZᵀZ · 1e-4: every eigenvalue below 1
    low = est.LowRank(2).fit(tiny)
    s = np.linalg.svd(Z, compute_uv=False)
    assert np.allclose(low.singular_values_, s[:2] * 1e-2)

"""Tests for analyst.estimators: solvers, raw-unit mapping, OLS/Ridge/RMGM/DGM/LowRank."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyst.estimators import (
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
from analyst.release import ReleasedSketch


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
    # A release that claims a large noise variance: Ridge must ignore it (spec §5.2, no
    # de-biasing) and must not rescale λ by n or m.
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

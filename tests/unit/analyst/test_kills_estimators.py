"""Mutation-kill tests for ``analyst/estimators.py`` (scripts/mutation.sh, docs/testing.md).

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

# --- analyst/estimators.py: the de-biased ridge, its eigenvalue floor, LowRank's signs ---------

from analyst.estimators import LowRank, Ridge  # noqa: E402


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

from analyst import estimators as est  # noqa: E402
from analyst.release import ReleasedSketch  # noqa: E402


def _release(matrix: np.ndarray, n: int = 500, v: float = 0.0) -> ReleasedSketch:
    return ReleasedSketch(matrix=matrix, columns=("a", "b", "one", "y"), centers=np.array([1.0, -2.0, 0.5, 3.0]),
                          scales=np.array([2.0, 0.5, 4.0, 10.0]), label=3, intercept=2, n=n,
                          noise_variance_per_column=v, privacy={}, sha256="")


def test_raw_unit_predictions_equal_the_scaled_model_mapped_back():
    rng = np.random.default_rng(1)
    rel = _release(rng.normal(size=(40, 4)))
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
    rel = _release(M, n=500, v=3.0)
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
    vector = G[i, j] * np.where(i == j, 1.0, math.sqrt(2.0))  # the lift's √2 on off-diagonal entries
    rel = ReleasedSketch(matrix=vector[None, :], columns=("a", "b", "one", "y"), centers=np.zeros(4),
                         scales=np.ones(4), label=3, intercept=2, n=n, noise_variance_per_column=v,
                         privacy={}, sha256="", kind="gram")
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
    from analyst.gram import adassp_lambda

    rel, _, G = _gram_release(v=5.0)
    lam, rule = est.release_lambda(rel)
    assert lam == pytest.approx(adassp_lambda(G[:3, :3], 5.0))
    assert rule == ("adassp_lambda: max(0, √(2pv) − λ_min(noisy XᵀX)), √(2pv) the noise's spectral edge "
                    "(analyst/gram.py)")
    sk = _release(np.random.default_rng(0).normal(size=(16, 4)), v=32.0)
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
    vector = G[i, j] * np.where(i == j, 1.0, math.sqrt(2.0))
    singular = ReleasedSketch(matrix=vector[None, :], columns=("a", "b", "one", "y"), centers=np.zeros(4),
                              scales=np.ones(4), label=3, intercept=2, n=40, noise_variance_per_column=0.0,
                              privacy={}, sha256="", kind="gram")
    ev = np.linalg.eigvalsh(singular.gram[:3, :3])
    assert ev[0] <= 0.0 < ev[1]
    assert est.Ridge(1.0).fit(singular).indefinite_ is True


def test_lowrank_on_a_small_gram_release_keeps_small_singular_values():
    rel, Z, _ = _gram_release(seed=2, n=50)
    tiny = _replace(rel, matrix=rel.matrix * 1e-4)  # ZᵀZ · 1e-4: every eigenvalue below 1
    low = est.LowRank(2).fit(tiny)
    s = np.linalg.svd(Z, compute_uv=False)
    assert np.allclose(low.singular_values_, s[:2] * 1e-2)

"""Tests for ltm.analyst.metrics: φ, ψ, ridge objective, MSE, R²."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.optional import require

require("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from ltm.analyst.metrics import (
    gram_matrix,
    mse,
    phi,
    psi,
    psi_from_gram,
    r2,
    ridge_objective,
    ridge_optimum,
)


def _data(seed: int, n: int = 200, d: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, d)) @ np.diag(np.linspace(0.2, 3.0, d))
    b = A @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n)
    return A, b


def _random_orthonormal(rng: np.random.Generator, d: int, k: int) -> np.ndarray:
    Q, _ = np.linalg.qr(rng.standard_normal((d, k)))
    return Q


# ------------------------------------------------------------------ ridge objective / φ


def test_ridge_objective_matches_definition() -> None:
    A, b = _data(0)
    x = np.arange(A.shape[1], dtype=float) / 7
    lam = 2.5
    expected = np.sum((A @ x - b) ** 2) + lam * np.sum(x**2)
    assert ridge_objective(A, b, x, lam) == pytest.approx(expected, rel=1e-13)
    assert isinstance(ridge_objective(A, b, x, lam), float)


def test_ridge_optimum_closed_form_and_gradient_zero() -> None:
    A, b = _data(1)
    lam = 3.0
    x = ridge_optimum(A, b, lam)
    closed = np.linalg.inv(A.T @ A + lam * np.eye(A.shape[1])) @ A.T @ b
    np.testing.assert_allclose(x, closed, rtol=1e-10)
    grad = 2 * A.T @ (A @ x - b) + 2 * lam * x
    assert np.max(np.abs(grad)) < 1e-8


def test_ridge_optimum_lambda_zero_is_lstsq_even_when_rank_deficient() -> None:
    A, b = _data(2)
    A = np.column_stack([A, A[:, 0]])  # duplicate column: AᵀA singular
    x = ridge_optimum(A, b, 0.0)
    np.testing.assert_allclose(x, np.linalg.lstsq(A, b, rcond=None)[0], atol=1e-10)


def test_phi_is_one_at_optimum() -> None:
    A, b = _data(3)
    for lam in (0.0, 1e-3, 10.0):
        x_opt = ridge_optimum(A, b, lam)
        assert phi(A, b, x_opt, lam) == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), lam=st.floats(0.0, 100.0), scale=st.floats(1e-4, 10.0))
def test_phi_at_least_one_for_any_x(seed: int, lam: float, scale: float) -> None:
    A, b = _data(seed % 1000, n=60, d=4)
    rng = np.random.default_rng(seed)
    x = ridge_optimum(A, b, lam) + scale * rng.standard_normal(A.shape[1])
    assert phi(A, b, x, lam) >= 1.0 - 1e-12


def test_phi_exact_value_against_quadratic_form() -> None:
    # f(x) − f(x*) = (x − x*)ᵀ (AᵀA + λI) (x − x*) for the ridge quadratic.
    A, b = _data(4)
    lam = 0.7
    x_opt = ridge_optimum(A, b, lam)
    dx = np.full(A.shape[1], 0.1)
    excess = dx @ (A.T @ A + lam * np.eye(A.shape[1])) @ dx
    expected = 1.0 + excess / ridge_objective(A, b, x_opt, lam)
    assert phi(A, b, x_opt + dx, lam) == pytest.approx(expected, rel=1e-9)
    assert phi(A, b, x_opt + dx, lam, x_opt=x_opt) == pytest.approx(expected, rel=1e-9)


def test_phi_uses_ridge_optimum_not_generating_vector() -> None:
    rng = np.random.default_rng(5)
    A = rng.standard_normal((100, 3))
    x_gen = np.array([1.0, -2.0, 0.5])
    b = A @ x_gen
    lam = 50.0
    # With λ > 0 the generating vector is NOT the optimum: φ(x_gen) must be strictly > 1.
    assert phi(A, b, x_gen, lam) > 1.01


def test_phi_rejects_bad_shapes() -> None:
    A, b = _data(6)
    with pytest.raises(ValueError):
        ridge_objective(A, b, np.zeros(A.shape[1] + 1), 1.0)
    with pytest.raises(ValueError):
        ridge_objective(A, b[:-1], np.zeros(A.shape[1]), 1.0)


# ------------------------------------------------------------------ ψ


def _psi_direct(A: np.ndarray, X: np.ndarray, k: int) -> float:
    _, _, vt = np.linalg.svd(A, full_matrices=False)
    Xo = vt[:k].T
    err = np.linalg.norm(A - A @ X @ X.T) ** 2
    err_opt = np.linalg.norm(A - A @ Xo @ Xo.T) ** 2
    return (err - err_opt) / A.shape[0]


def test_psi_zero_at_optimum_and_matches_direct_definition() -> None:
    A, _ = _data(7, n=300, d=8)
    k = 3
    _, _, vt = np.linalg.svd(A, full_matrices=False)
    assert abs(psi(A, vt[:k].T)) < 1e-10
    rng = np.random.default_rng(7)
    X = _random_orthonormal(rng, 8, k)
    assert psi(A, X) == pytest.approx(_psi_direct(A, X, k), rel=1e-9)
    assert psi(A, X) > 0.01


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 5))
def test_psi_nonnegative(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((40, 5)) * rng.uniform(0.1, 5, size=5)
    X = _random_orthonormal(rng, 5, k)
    assert psi(A, X) >= -1e-10


def test_psi_streams_in_chunks_and_accepts_float32() -> None:
    A, _ = _data(8, n=1001, d=5)
    X = _random_orthonormal(np.random.default_rng(8), 5, 2)
    full = psi(A, X)
    assert psi(A, X, chunk_rows=97) == pytest.approx(full, rel=1e-10)
    np.testing.assert_allclose(gram_matrix(A, chunk_rows=10), A.T @ A, rtol=1e-12)
    A32 = A.astype(np.float32)
    np.testing.assert_allclose(
        gram_matrix(A32, chunk_rows=100), A32.astype(np.float64).T @ A32.astype(np.float64),
        rtol=1e-12,
    )
    assert psi_from_gram(A.T @ A, X, A.shape[0]) == pytest.approx(full, rel=1e-10)


def test_psi_rejects_non_orthonormal_and_bad_rank() -> None:
    A, _ = _data(10)
    with pytest.raises(ValueError, match="orthonormal"):
        psi(A, 2.0 * np.eye(A.shape[1])[:, :2])
    with pytest.raises(ValueError):
        psi(A, np.ones((A.shape[1] + 1, 1)) / np.sqrt(A.shape[1] + 1))


# ------------------------------------------------------------------ MSE / R²


def test_mse_and_r2_values() -> None:
    y = np.array([1.0, 2.0, 3.0, 4.0])
    p = np.array([1.0, 2.0, 3.0, 6.0])
    assert mse(y, p) == pytest.approx(1.0)
    assert r2(y, y) == 1.0
    assert r2(y, np.full(4, y.mean())) == pytest.approx(0.0)
    assert r2(y, p) == pytest.approx(1 - 4.0 / 5.0)
    assert r2(np.ones(3), np.ones(3)) == 1.0
    assert r2(np.ones(3), np.zeros(3)) == 0.0
    with pytest.raises(ValueError):
        mse(y, p[:3])

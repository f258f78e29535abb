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

from kill_helpers import exact as _exact, gate_spec as _gate_spec  # noqa: F401
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

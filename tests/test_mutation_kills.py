"""Tests written to kill mutants that survived the rest of the suite (scripts/mutation.sh).

Each test checks behaviour against a value computed independently (numpy/scipy in the clear, a
closed form, or a second route through the code), never against a recorded output.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from ltm import ring


# --- ltm/ring.py ---------------------------------------------------------------------------------


def test_encode_uses_float64_even_for_narrow_float_input():
    # float16 cannot hold 1.5 * 2^20; encoding must widen first, so the result equals the float64 one.
    half = np.array([1.5, -2.25], dtype=np.float16)
    assert np.array_equal(ring.encode(half, 20), ring.encode(half.astype(np.float64), 20))
    assert ring.decode(ring.encode(half, 20), 20).tolist() == [1.5, -2.25]


def test_encode_overflow_is_a_value_error_not_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError):  # 1e308·2^40 overflows float64 to inf inside encode
            ring.encode(np.array([1e308]), 40)
        with pytest.raises(ValueError, match="too large for fixed point"):
            ring.encode(np.array([2.0**70]), 0)
        with pytest.raises(ValueError, match="^cannot encode NaN or infinite values$"):
            ring.encode(np.array([np.inf, np.nan]), 16)


def test_decode_and_negate_accept_any_integer_ring_array():
    # Ring elements given as a narrower unsigned type or a Python list mean the same residues.
    narrow = np.array([5, 7], dtype=np.uint32)
    assert ring.decode(narrow, 0).tolist() == [5.0, 7.0]
    assert ring.decode(narrow, 0).dtype == np.float64
    neg = ring.negate([1, 2])
    assert neg.dtype == np.uint64
    assert neg.tolist() == [2**64 - 1, 2**64 - 2]
    assert ring.negate(narrow).tolist() == [2**64 - 5, 2**64 - 7]


# --- ltm/sharing.py ------------------------------------------------------------------------------

from ltm import sharing  # noqa: E402
from ltm.randomness import Randomness  # noqa: E402


def _exact(message: str) -> str:
    import re

    return "^" + re.escape(message) + "$"


def test_share_defaults_are_seed_mode_with_server_0_primary():
    x = np.arange(6, dtype=np.uint64).reshape(2, 3)
    shares = sharing.share(x, 3, Randomness.system())
    assert shares[0].data is not None and shares[0].seed is None
    assert all(s.seed is not None and s.data is None for s in shares[1:])
    assert np.array_equal(sharing.reconstruct(shares), x)


def test_share_and_reconstruct_accept_python_integers():
    # Python ints (e.g. from JSON) are ring elements too: the result is the uint64 residue.
    for values in ([1, 2], [1, 2**63, 2**64 - 1]):
        for mode in sharing.SHARE_MODES:
            shares = sharing.share(values, 2, Randomness.system(), mode=mode)
            assert sharing.reconstruct(shares).tolist() == values
    total = sharing.reconstruct([[1, 2], [3, 2**64 - 1]])
    assert total.dtype == np.uint64 and total.tolist() == [4, 1]


def test_sharing_error_messages_are_exact():
    stream = Randomness.system()
    with pytest.raises(ValueError, match=_exact("additive sharing needs at least 2 servers")):
        sharing.share(np.zeros(2, np.uint64), 1, stream)
    with pytest.raises(ValueError, match=_exact("nothing to reconstruct")):
        sharing.reconstruct([])
    with pytest.raises(ValueError, match=_exact("a share holds exactly one of data or seed")):
        sharing.Share(0, (1,))
    with pytest.raises(ValueError, match=_exact("share data does not match its declared shape")):
        sharing.Share(0, (2,), data=np.zeros(3, np.uint64))


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


# --- experiments/burkhardt.py: the ridge series' φ against independent values ------------------


def test_burkhardt_ridge_phi_of_each_series_against_an_independent_optimum():
    from experiments import burkhardt, ltmjobs

    params = {"n": 20000, "d": 4, "lam": 1.0, "epsilon": 1000.0, "delta": 1e-5, "scaling": "standardise",
              "m": 100, "series": ["tight", "debiased", "zero", "sketch", "ssp"], "path": "fast"}
    seed = 3
    rows = {r["key"]: r for r in burkhardt.ridge_synthetic(params, seed)}
    # Independent φ of the zero output: 1 + x*ᵀ(AᵀA + λI)x* / OPT from a direct solve on the same rows.
    table = burkhardt.synthetic_ridge_table(params["n"], params["d"], params["scaling"], seed)
    columns = burkhardt._ridge_scaling_columns(table, params["scaling"])
    V = ltmjobs.transform_columns(columns, table, 1.0, "l2")
    A, b, lam = V[:, :-1], V[:, -1], params["lam"]
    H = A.T @ A + lam * np.eye(A.shape[1])
    x_opt = np.linalg.solve(H, A.T @ b)
    opt = float(np.sum((A @ x_opt - b) ** 2) + lam * x_opt @ x_opt)
    assert rows["zero"]["opt_objective"] == pytest.approx(opt, rel=1e-9)
    phi_zero = 1 + float(x_opt @ H @ x_opt) / opt
    assert rows["zero"]["phi"] == pytest.approx(phi_zero, rel=1e-9)
    # At ε = 1000 the LTM releases are nearly noiseless: every private series must recover most of
    # the gap between the zero output and the optimum (a coefficient vector scaled by 0, negated
    # or left unfitted gives φ ≥ φ_zero).
    for key in ("tight", "debiased", "sketch", "ssp"):
        assert 1.0 <= rows[key]["phi"] < 1 + 0.01 * (phi_zero - 1), (key, rows[key]["phi"], phi_zero)

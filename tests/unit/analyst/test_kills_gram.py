"""analyst/gram.py: the one noisy-Gram solver against its definition (computed by an independent
route: the positive part of a symmetric matrix from its polar decomposition, scipy's sqrtm), and
the noise bounds and helpers against their closed forms."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.linalg

from analyst import gram


def psd_part(H: np.ndarray) -> np.ndarray:
    """H's projection onto the PSD cone (eigenvalues max(e, 0)), without an eigh: (H + |H|)/2
    with |H| = (H²)^{1/2} (the polar decomposition)."""
    return (H + np.real(scipy.linalg.sqrtm(H @ H))) / 2.0


def random_symmetric(p: int, seed: int, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((p, p))
    return (X + X.T) / 2.0 + shift * np.eye(p)


# ------------------------------------------------------------------------------------ solve_gram
@pytest.mark.parametrize("lam", [0.0, 0.3, 5.0])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_positive_definite_gram_is_solved_as_is(lam, seed):
    G = random_symmetric(5, seed, shift=6.0)
    g = np.random.default_rng(seed + 10).standard_normal(5)
    assert np.linalg.eigvalsh(G)[0] > 0
    w, solver = gram.solve_gram(G, g, lam)
    assert solver == "eigh"
    assert np.allclose(w, np.linalg.solve(G + lam * np.eye(5), g), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_a_ridge_that_keeps_the_problem_convex_solves_the_noisy_gram_as_is(seed):
    H = random_symmetric(6, seed)
    e_min = float(np.linalg.eigvalsh(H)[0])
    assert e_min < 0
    g = np.random.default_rng(seed).standard_normal(6)
    lam = -e_min + 0.3  # H + λI is positive definite although H is not
    w, solver = gram.solve_gram(H, g, lam)
    assert solver == "eigh"
    assert np.allclose(w, np.linalg.solve(H + lam * np.eye(6), g), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", [4, 5, 6])
@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_a_non_convex_problem_is_projected_onto_the_psd_cone_before_the_ridge(seed, fraction):
    H = random_symmetric(6, seed)
    lam = -float(np.linalg.eigvalsh(H)[0]) * fraction  # H + λI is not positive definite
    g = np.random.default_rng(seed).standard_normal(6)
    w, solver = gram.solve_gram(H, g, lam)
    assert solver == "eigh-clamped"
    if lam > 0:
        assert np.allclose(w, np.linalg.solve(psd_part(H) + lam * np.eye(6), g), rtol=1e-9, atol=1e-12)
    else:  # λ = 0: the minimum-norm solution, nothing in the dropped (non-positive) directions
        assert np.allclose(w, np.linalg.pinv(psd_part(H), rcond=1e-9, hermitian=True) @ g, rtol=1e-9, atol=1e-12)
        evals, V = np.linalg.eigh(H)
        assert np.allclose(V[:, evals <= 0].T @ w, 0.0, atol=1e-12)


def test_the_projection_is_never_farther_from_the_true_gram():
    rng = np.random.default_rng(9)
    for _ in range(20):
        X = rng.standard_normal((30, 5))
        true = X.T @ X
        E = rng.standard_normal((5, 5)) * 20.0
        noisy = true + (E + E.T) / 2.0
        assert np.linalg.norm(psd_part(noisy) - true) <= np.linalg.norm(noisy - true) + 1e-9


def test_the_switch_to_the_projection_happens_where_convexity_ends():
    H, g = np.diag([-0.5, 1.0]), np.array([1.0, 1.0])
    w, solver = gram.solve_gram(H, g, 0.5)  # e + λ = 0: not convex, projected: eigenvalues 0.5, 1.5
    assert solver == "eigh-clamped" and np.allclose(w, [2.0, 1.0 / 1.5])
    w, solver = gram.solve_gram(H, g, 0.5 + 1e-6)  # just convex: as is
    assert solver == "eigh" and w == pytest.approx([1e6, 1.0 / (1.5 + 1e-6)], rel=1e-6)


def test_a_zero_eigenvalue_without_a_ridge_is_dropped_and_one_at_the_tolerance_too():
    w, solver = gram.solve_gram(np.diag([0.0, 2.0]), np.array([1.0, 1.0]), 0.0)
    assert solver == "eigh-clamped" and np.array_equal(w, [0.0, 0.5])
    w, solver = gram.solve_gram(np.diag([1e-12, 1.0]), np.array([1.0, 1.0]), 0.0)  # = 10⁻¹²·max|e|: dropped
    assert solver == "eigh-clamped" and np.array_equal(w, [0.0, 1.0])
    w, solver = gram.solve_gram(np.diag([1e-11, 1.0]), np.array([1.0, 1.0]), 0.0)  # above it: kept
    assert solver == "eigh" and w == pytest.approx([1e11, 1.0], rel=1e-12)
    w, solver = gram.solve_gram(np.diag([-5.0, 2e-12, 1.0]), np.ones(3), 0.0)  # the largest |e| is negative
    assert solver == "eigh-clamped" and np.array_equal(w, [0.0, 0.0, 1.0])
    w, solver = gram.solve_gram(np.zeros((3, 3)), np.ones(3), 0.0)
    assert solver == "eigh-clamped" and np.array_equal(w, np.zeros(3))
    w, solver = gram.solve_gram(np.zeros((2, 2)), np.ones(2), 0.5)  # λ alone is a valid matrix
    assert solver == "eigh" and np.allclose(w, [2.0, 2.0])


@pytest.mark.parametrize("scale", [1e-20, 1e-6, 1e20])
def test_the_solver_is_scale_free(scale):
    """(cĜ, cĝ, cλ) gives the same w: the drop tolerance is relative to Ĝ's own eigenvalues."""
    H = np.diag([3.0, 1e-11, -2.0])
    g = np.array([3.0, 1.0, 1.0])
    w1, s1 = gram.solve_gram(H, g, 0.0)
    w2, s2 = gram.solve_gram(scale * H, scale * g, 0.0)
    assert s1 == s2 == "eigh-clamped" and np.allclose(w2, w1, rtol=1e-9) and w1 == pytest.approx([1.0, 1e11, 0.0])
    w3, _ = gram.solve_gram(scale * H, scale * g, scale * 0.5)
    assert np.allclose(w3, gram.solve_gram(H, g, 0.5)[0], rtol=1e-9)


def test_a_non_symmetric_gram_is_symmetrised_and_a_column_moment_flattened():
    G = np.array([[2.0, 1.0], [0.0, 2.0]])
    w, solver = gram.solve_gram(G, np.array([[1.0], [1.0]]), 1.0)
    assert solver == "eigh" and w.shape == (2,)
    assert np.allclose(w, np.linalg.solve([[3.0, 0.5], [0.5, 3.0]], [1.0, 1.0]))


@pytest.mark.parametrize("lam", [-1.0, math.nan, math.inf, -math.inf])
def test_a_bad_lambda_is_refused(lam):
    with pytest.raises(ValueError, match=re.escape(f"lam must be finite and >= 0, got {lam!r}")):
        gram.solve_gram(np.eye(2), np.ones(2), lam)


@pytest.mark.parametrize("G,g", [(np.eye(3), np.ones(2)), (np.ones(3), np.ones(3)), (np.ones((2, 3)), np.ones(2))])
def test_mismatched_shapes_are_refused(G, g):
    with pytest.raises(ValueError, match=re.escape(f"Gxx must be p × p and gxy of length p (got {G.shape} and "
                                                   f"{np.asarray(g).reshape(-1).shape})")):
        gram.solve_gram(G, g, 0.0)


# ------------------------------------------------------------------------------------ the other helpers
def test_gram_blocks_split_off_the_label():
    G = np.arange(16.0).reshape(4, 4)
    Gxx, gxy, reg = gram.gram_blocks(G, 1)
    assert reg == [0, 2, 3] and np.array_equal(Gxx, G[np.ix_([0, 2, 3], [0, 2, 3])]) and np.array_equal(gxy, G[[0, 2, 3], 1])
    with pytest.raises(ValueError, match="^the release has no label column; a regression needs one$"):
        gram.gram_blocks(G, None)
    with pytest.raises(ValueError, match=re.escape("a Gram matrix is square, got shape (3, 4)")):
        gram.gram_blocks(np.ones((3, 4)), 1)


@pytest.mark.parametrize("p,v,rho", [(1, 2.0, 0.05), (6, 35.7, 0.05), (10, 0.5, 0.2)])
def test_noise_bounds_match_their_closed_forms(p, v, rho):
    assert gram.noise_edge(p, v) == pytest.approx(math.sqrt(2 * p * v), rel=1e-15)
    assert gram.noise_spectral_bound(p, v, rho) == pytest.approx(
        math.sqrt(v) * math.sqrt(p * max(math.log(2 * p * p / rho), 1.0)), rel=1e-15)
    assert gram.noise_spectral_bound(p, v) == gram.noise_spectral_bound(p, v, gram.RHO)


def test_the_spectral_bound_covers_the_noise_and_the_edge_is_its_typical_size():
    rng = np.random.default_rng(4)
    p, v = 40, 3.0
    norms = []
    for _ in range(30):
        E = np.triu(rng.standard_normal((p, p)) * math.sqrt(v / 2.0), 1)
        E = E + E.T + np.diag(rng.standard_normal(p) * math.sqrt(v))
        norms.append(np.abs(np.linalg.eigvalsh(E)).max())
    assert max(norms) <= gram.noise_spectral_bound(p, v)
    assert 0.8 * gram.noise_edge(p, v) < np.median(norms) < 1.2 * gram.noise_edge(p, v)


def test_the_spectral_bound_log_is_at_least_one():
    # 2p²/ρ < e only for p = 1 and ρ > 2/e: the log is floored at 1
    assert gram.noise_spectral_bound(1, 4.0, 0.9) == pytest.approx(2.0)
    assert gram.noise_spectral_bound(1, 4.0, 0.7) == pytest.approx(2.0 * math.sqrt(math.log(2 / 0.7)))


@pytest.mark.parametrize("args", [(0, 1.0, 0.05), (2, -1.0, 0.05), (2, 1.0, 0.0), (2, 1.0, 1.0)])
def test_bad_noise_bound_arguments_are_refused(args):
    p, v, rho = args
    with pytest.raises(ValueError, match=re.escape(f"need p ≥ 1, v ≥ 0 and 0 < ρ < 1 (got p={p}, v={v}, ρ={rho})")):
        gram.noise_spectral_bound(p, v, rho)
    if rho == 0.05:
        with pytest.raises(ValueError, match=re.escape(f"need p ≥ 1 and v ≥ 0 (got p={p}, v={v})")):
            gram.noise_edge(p, v)


def test_adassp_lambda_is_the_bound_minus_the_smallest_eigenvalue():
    G = np.array([[5.0, 1.0], [0.0, 1.0]])  # symmetrised: [[5, .5], [.5, 1]]
    lam_min = float(np.linalg.eigvalsh([[5.0, 0.5], [0.5, 1.0]])[0])
    assert gram.adassp_lambda(G, 9.0) == pytest.approx(gram.noise_edge(2, 9.0) - lam_min)
    assert gram.adassp_lambda(G, 9.0, bound="adassp", rho=0.1) == pytest.approx(
        gram.noise_spectral_bound(2, 9.0, 0.1) - lam_min)
    assert gram.adassp_lambda(G, 9.0, bound="adassp") == pytest.approx(gram.noise_spectral_bound(2, 9.0) - lam_min)
    assert gram.adassp_lambda(100.0 * np.eye(2), 1.0) == 0.0  # λ_min above the bound: no ridge
    with pytest.raises(ValueError, match=r"^unknown bound 'x'; choose 'edge' or 'adassp'$"):
        gram.adassp_lambda(G, 1.0, bound="x")


def test_top_eigenvectors_are_ordered_signed_and_checked():
    V = np.linalg.qr(np.random.default_rng(2).standard_normal((4, 4)))[0]
    G = V @ np.diag([1.0, 4.0, -9.0, 2.0]) @ V.T
    G[0, 1] += 1e-3  # not exactly symmetric: the symmetric part is used
    top, vals = gram.top_eigenvectors(G, 2)
    sym = (G + G.T) / 2.0
    ref_vals, ref_vecs = np.linalg.eigh(sym)
    assert np.allclose(vals, ref_vals[::-1][:2])
    for k in range(2):
        assert np.allclose(sym @ top[:, k], vals[k] * top[:, k], atol=1e-9)
        assert top[np.argmax(np.abs(top[:, k])), k] > 0
    for rank in (0, 5):
        with pytest.raises(ValueError, match=re.escape(f"rank must be in [1, 4], got {rank}")):
            gram.top_eigenvectors(G, rank)
    assert gram.top_eigenvectors(G, 1)[0].shape == (4, 1) and gram.top_eigenvectors(G, 4)[0].shape == (4, 4)
    with pytest.raises(ValueError, match=re.escape("rank must be in [1, 3], got 4")):
        gram.top_eigenvectors(np.ones((3, 4)), 4)


# ------------------------------------------------------------------------------------ float64 throughout
def test_float32_and_integer_inputs_are_computed_in_float64():
    """A release is float64; a caller's float32 copy must not lose the solver's precision."""
    H = random_symmetric(5, 21, shift=0.5)
    H32, g32 = H.astype(np.float32), np.linspace(1.0, 2.0, 5).astype(np.float32)
    H64, g64 = H32.astype(np.float64), g32.astype(np.float64)
    for lam in (0.0, 0.1):
        w32, s32 = gram.solve_gram(H32, g32, lam)
        w64, s64 = gram.solve_gram(H64, g64, lam)
        assert w32.dtype == np.float64 and s32 == s64 and np.allclose(w32, w64, rtol=1e-13, atol=0)
    assert gram.adassp_lambda(H32, 2.0) == pytest.approx(gram.adassp_lambda(H64, 2.0), rel=1e-14)
    t32, v32 = gram.top_eigenvectors(H32, 3)
    t64, v64 = gram.top_eigenvectors(H64, 3)
    assert np.allclose(t32, t64, rtol=1e-13, atol=1e-15) and np.allclose(v32, v64, rtol=1e-13, atol=0)
    w, _ = gram.solve_gram([[2, 0], [0, 4]], [2, 2], 0)
    assert np.array_equal(w, [1.0, 0.5])


def test_an_empty_system_has_the_empty_solution():
    w, solver = gram.solve_gram(np.zeros((0, 0)), np.zeros(0), 0.0)
    assert w.shape == (0,) and solver == "eigh"


def test_zero_noise_has_zero_bounds():
    assert gram.noise_edge(3, 0.0) == 0.0 and gram.noise_spectral_bound(3, 0.0) == 0.0

"""Fitting on a ``gram`` release: the noisy sufficient statistics ZᵀZ = [[XᵀX, Xᵀy], [yᵀX, yᵀy]].

A ``gram`` release (:mod:`ltm.lifts`) is the noisy sum over clients of the upper triangle of
z zᵀ, z = [features, (intercept), label] clipped to ‖z‖ ≤ C.  In :attr:`ReleasedSketch.gram` the
noise ``E = Ĝ − ZᵀZ`` is symmetric with independent zero-mean entries whose variances the release
states (:attr:`ReleasedSketch.gram_noise_variance`, from the noise plan): with the Gaussian
mechanism ``Var E_ii = v`` and ``Var E_ij = v/2`` (the per-entry scales of ltm/lifts.py), with the
discrete Laplace, and in the replicated release (analyst/replicated.py), ``v`` everywhere —
so, unlike a sketch, there is no noise Gram ``E[NᵀN]`` to subtract and no cross term
``(SX)ᵀG`` whose size grows with √n: the error of XᵀX is O(√v) per entry whatever n is, while
the signal grows like n.

Estimators (all post-processing of the release):

* OLS: ``Ĝxx⁻¹ ĝxy`` (:func:`solve_gram`: an indefinite Ĝxx is projected onto the PSD cone and
  its null directions dropped);
* ridge with an AdaSSP-style λ (Wang 2018): ``λ = max(0, τ − λ_min(Ĝxx))``.  AdaSSP spends a
  third of its budget on a private λ_min; here λ_min is read off the released Ĝxx
  (post-processing, no budget).  τ is a bound on the noise's spectral norm ‖E_xx‖₂, stated for
  the variance profile of a Wigner matrix ``v`` on the diagonal and ``v/2`` off it, with ``v`` the
  smallest such profile that dominates the released one entry by entry (:func:`wigner_variance`:
  v itself for the Gaussian rows gram, 2v for i.i.d. entries of variance v): by default
  the semicircle edge ``τ = √(2pv)`` (off-diagonal variance v/2, whose
  spectrum ends at 2·√(v/2)·√p), or (``bound="adassp"``) AdaSSP's own high-probability bound
  ``√v·√(p·log(2p²/ρ))``, ρ = 0.05, about twice as large for p ≈ 10.  Measured on the three real
  datasets of docs/experiments/planner_grid.md (ε = 1, 6 seeds), the edge gave R² 0.5422 / 0.3798 / 0.6298
  (power / bike / housing) against 0.5363 / 0.3772 / 0.6275 with AdaSSP's bound;
* low rank: the top eigenvectors of Ĝ (the noisy second moment; MOD-SULQ's estimator).

The functions take plain arrays so the planner's predictions and the tests can use them too.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["gram_blocks", "wigner_variance", "noise_edge", "noise_spectral_bound", "adassp_lambda", "solve_gram",
           "top_eigenvectors"]

#: Failure probability of the λ rule's spectral bound (AdaSSP's ρ).
RHO = 0.05
#: Relative size below which a direction of the regularised Gram is dropped (pseudo-inverse).
_RCOND = 1e-12


def gram_blocks(G: np.ndarray, label: int | None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``(Gxx, gxy, regressors)`` of a D × D Gram matrix: regressors = every index but the label."""
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"a Gram matrix is square, got shape {G.shape}")
    D = G.shape[0]
    if label is None:
        raise ValueError("the release has no label column; a regression needs one")
    reg = [j for j in range(D) if j != label]
    return G[np.ix_(reg, reg)], G[reg, label], reg


def wigner_variance(entry_variance: np.ndarray) -> float:
    """v of the Wigner profile (v on the diagonal, v/2 off it) that dominates a symmetric noise
    matrix's per-entry variances (p, p), entry by entry: ``max(max_i Var E_ii, 2·max_{i≠j} Var E_ij)``.
    The Gaussian rows gram's own profile gives its v; i.i.d. entries of variance v give 2v."""
    var = np.asarray(entry_variance, dtype=np.float64)
    if var.ndim != 2 or var.shape[0] != var.shape[1] or not np.all(np.isfinite(var)) or bool((var < 0).any()):
        raise ValueError(f"need a square matrix of finite variances >= 0, got shape {var.shape}")
    off = var[~np.eye(var.shape[0], dtype=bool)]
    return max(float(np.diag(var).max(initial=0.0)), 2.0 * float(off.max(initial=0.0)))


def noise_spectral_bound(p: int, noise_variance: float, rho: float = RHO) -> float:
    """τ = √v·√(p·log(2p²/ρ)): AdaSSP's high-probability bound on ‖E‖₂ for a p × p symmetric noise
    matrix with diagonal variance v (off-diagonal v/2), as in Wang (2018) Algorithm 2."""
    if p < 1 or noise_variance < 0 or not 0 < rho < 1:
        raise ValueError(f"need p ≥ 1, v ≥ 0 and 0 < ρ < 1 (got p={p}, v={noise_variance}, ρ={rho})")
    return math.sqrt(noise_variance) * math.sqrt(p * math.log(max(2.0 * p * p / rho, math.e)))


def noise_edge(p: int, noise_variance: float) -> float:
    """√(2pv): the edge of the noise's spectrum (a p × p Wigner matrix, off-diagonal variance v/2)."""
    if p < 1 or noise_variance < 0:
        raise ValueError(f"need p ≥ 1 and v ≥ 0 (got p={p}, v={noise_variance})")
    return math.sqrt(2.0 * p * noise_variance)


def adassp_lambda(Gxx: np.ndarray, noise_variance: float | np.ndarray, *, bound: str = "edge",
                  rho: float = RHO) -> float:
    """AdaSSP-style ridge λ on a released Gxx: ``max(0, τ − λ_min(Ĝxx))`` with τ the noise edge
    (``bound="edge"``, default) or AdaSSP's bound (``bound="adassp"``); see the module docstring.

    ``noise_variance``: the (p, p) variance of each entry of Gxx's noise (a release's
    :attr:`~ltm.analyst.release.ReleasedSketch.gram_noise_variance` block), or the v of a Wigner profile
    (v on the diagonal, v/2 off it) as a number."""
    Gxx = np.asarray(Gxx, dtype=np.float64)
    p = Gxx.shape[0]
    if np.ndim(noise_variance):
        if np.shape(noise_variance) != Gxx.shape:
            raise ValueError(f"the noise variance must be a number or of Gxx's shape {Gxx.shape}, "
                             f"got {np.shape(noise_variance)}")
        noise_variance = wigner_variance(noise_variance)
    if bound == "edge":
        tau = noise_edge(p, noise_variance)
    elif bound == "adassp":
        tau = noise_spectral_bound(p, noise_variance, rho)
    else:
        raise ValueError(f"unknown bound {bound!r}; choose 'edge' or 'adassp'")
    lam_min = float(np.linalg.eigvalsh((Gxx + Gxx.T) / 2.0)[0])
    return max(0.0, tau - lam_min)


def solve_gram(Gxx: np.ndarray, gxy: np.ndarray, lam: float) -> tuple[np.ndarray, str]:
    """The noisy-Gram solver of every estimator on released sufficient statistics: the LTM's
    ``gram`` estimators (:mod:`ltm.analyst.estimators`) and the central SSP / AdaSSP baselines
    (:mod:`ltm.analyst.baselines`) alike.  Why this rule: "Solving a noisy Gram matrix" in
    docs/planner.md.

    With ``H = (Ĝxx + Ĝxxᵀ)/2 = Σ_k e_k v_k v_kᵀ`` and ``tol = 10⁻¹²·max_k |e_k|``:

    * if ``H + λI`` is positive definite (every ``e_k + λ > tol``) the ridge problem on the
      released statistics is convex and is solved as is: ``w = (H + λI)⁻¹ ĝxy``.  A negative
      e_k is kept: Ĝxx is unbiased for XᵀX, and an adaptive λ (:func:`adassp_lambda`) already
      lifts the smallest eigenvalue of ``H + λI`` to the noise bound τ;
    * otherwise the noise made the problem non-convex: H is replaced by its projection onto the
      positive semidefinite cone (``e_k → max(e_k, 0)``, the Frobenius-nearest PSD matrix, never
      farther from XᵀX than Ĝxx), λ is added, and directions with ``max(e_k, 0) + λ ≤ tol``
      (only when λ = 0) are dropped: the minimum-norm (pseudo-inverse) solution.  Noise cannot
      make the solve explode.

    Args:
        Gxx: (p, p) released (noisy) XᵀX; gxy: (p,) released Xᵀy; lam: λ ≥ 0.

    Returns:
        ``(w (p,), solver)``: solver is ``"eigh"``, or ``"eigh-clamped"`` when the projection was
        needed.
    """
    if not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
    G = np.asarray(Gxx, dtype=np.float64)
    g = np.asarray(gxy, dtype=np.float64).reshape(-1)
    if G.ndim != 2 or G.shape != (g.shape[0], g.shape[0]):
        raise ValueError(f"Gxx must be p × p and gxy of length p (got {G.shape} and {g.shape})")
    evals, evecs = np.linalg.eigh((G + G.T) / 2.0)
    tol = _RCOND * float(np.abs(evals).max(initial=0.0))
    shifted = evals + lam
    clamped = not bool((shifted > tol).all())
    if clamped:
        shifted = np.maximum(evals, 0.0) + lam
    keep = shifted > tol
    coords = np.zeros_like(g)
    coords[keep] = (evecs[:, keep].T @ g) / shifted[keep]
    return evecs @ coords, "eigh-clamped" if clamped else "eigh"


def top_eigenvectors(G: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``rank`` eigenvectors (D, rank) of a symmetric G (largest-|·| entry positive) and their
    eigenvalues, descending."""
    G = np.asarray(G, dtype=np.float64)
    if not 1 <= rank <= G.shape[0]:
        raise ValueError(f"rank must be in [1, {G.shape[0]}], got {rank}")
    evals, V = np.linalg.eigh((G + G.T) / 2.0)
    top, vals = V[:, ::-1][:, :rank], evals[::-1][:rank]
    pivot = np.argmax(np.abs(top), axis=0)
    signs = np.sign(top[pivot, np.arange(rank)])
    signs[signs == 0] = 1.0
    return top * signs, vals

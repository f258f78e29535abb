"""Central and local DP baselines for the experiments.

THESE ARE SIMULATION BASELINES, NOT PRODUCTION RELEASES.  They run on the plaintext data in one
process, draw their noise from the caller's seeded ``numpy.random.Generator`` (not a CSPRNG), and
exist only so that experiments can compare the LTM release against the central model (a trusted
curator: SSP / AdaSSP for regression, MOD-SULQ for low rank) and the local model (each client
noises its own row).  Never use them to publish anything about real people.

Conventions shared by every function here:

* Neighbouring datasets differ by REPLACING one row (the project's privacy unit).
* The input rows are the transformed client rows (features, optional intercept column, label):
  for regression the rows of ``[A b]`` are clipped to ℓ2 norm ≤ ``clip_norm`` = C (a no-op for
  rows the pipeline already clipped); the sensitivities below rely on that clip.
* Every Gaussian is calibrated with :func:`ltm.dp.calibration.analytic_gaussian_sigma` (Balle & Wang
  2018) for the stated replace-one ℓ2 sensitivity — except MOD-SULQ's optional ``"paper"`` mode,
  which reproduces Chaudhuri–Sarwate–Sinha's own noise formula.
* Symmetric noise matrices carry i.i.d. N(0, σ²) on and above the diagonal, mirrored below, so
  the mechanism releases the upper triangle (incl. diagonal) of a Gram matrix.  Replacing row
  ``x`` by ``x'`` changes the Gram matrix by ``P = x'x'ᵀ − xxᵀ``.  ``tight=False`` (default)
  uses the triangle-inequality bound ``‖P‖_F ≤ ‖x'‖² + ‖x‖² ≤ 2C²``; ``tight=True`` uses the
  exact bound ``‖upper(P)‖₂ ≤ ‖P‖_F = (‖x‖⁴ + ‖x'‖⁴ − 2(x·x')²)^{1/2} ≤ √2·C²`` (attained by
  orthogonal rows of norm C).  Both are valid; ``tight`` gives the central baselines less noise.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ltm.analyst.gram import solve_gram, top_eigenvectors
from ltm.analyst.release import ReleasedSketch
from ltm.clipping import clip_rows
from ltm.dp.calibration import analytic_gaussian_sigma
from ltm.dp.sensitivity import (
    gram_l2,
    gram_l2_triangle,
    joint_cross_moment_l2,
    min_eigenvalue_sensitivity,
    vector_sensitivity,
)

__all__ = [
    "PrivateRegression",
    "gram_sensitivity",
    "symmetric_gaussian",
    "ssp_statistics",
    "ssp_ridge",
    "adassp",
    "mod_sulq_noise_scale",
    "mod_sulq_covariance",
    "mod_sulq",
    "local_noisy_rows",
    "local_release",
    "cv_ridge_lambda",
]


@dataclass(frozen=True)
class PrivateRegression:
    """Output of a sufficient-statistics-perturbation baseline.

    Attributes:
        coef: (d,) coefficients in the space of A's columns (wrap with
            ``ltm.analyst.estimators.linear_predictor(coef, release)`` for raw units).
        lam: the ridge λ actually used (AdaSSP's is chosen adaptively and privately).
        sigmas: the noise standard deviation of each released statistic.
        projected: True when the noisy ``AᵀA`` was not positive definite and the solver projected
            it (:func:`ltm.analyst.gram.solve_gram`: eigenvalues raised to 0 before λ is added, and with
            λ = 0 zero directions dropped).
        noisy_gram: (d, d) the released ``AᵀA + E`` (without λ).
        noisy_moment: (d,) the released ``Aᵀb + e``.
        details: extra released scalars (e.g. AdaSSP's private λ_min).
    """

    coef: np.ndarray
    lam: float
    sigmas: dict[str, float]
    projected: bool
    noisy_gram: np.ndarray
    noisy_moment: np.ndarray
    details: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def gram_sensitivity(clip_norm: float, *, tight: bool = False) -> float:
    """Replace-one ℓ2 sensitivity of the upper triangle of a Gram matrix ``MᵀM`` whose rows have
    norm ≤ C: ``2C²`` (default, :func:`ltm.dp.sensitivity.gram_l2_triangle`) or the exact ``√2·C²``
    (``tight``, :func:`ltm.dp.sensitivity.gram_l2`).  See the module docstring."""
    return gram_l2(clip_norm) if tight else gram_l2_triangle(clip_norm)


def symmetric_gaussian(d: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """A (d, d) symmetric matrix with i.i.d. N(0, σ²) entries on and above the diagonal,
    mirrored below."""
    Z = sigma * rng.standard_normal((d, d))
    U = np.triu(Z)
    return U + np.triu(U, 1).T


def _check_positive(name: str, x: float) -> None:
    if not np.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")


def _check_rng(rng: np.random.Generator) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator (these are simulation baselines)")


def _clipped_regression_data(
    A: np.ndarray, b: np.ndarray, clip_norm: float
) -> tuple[np.ndarray, np.ndarray]:
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if A.ndim != 2 or b.shape[0] != A.shape[0]:
        raise ValueError(f"shapes do not match: A {A.shape}, b {b.shape}")
    W = clip_rows(np.column_stack([A, b]), clip_norm)
    return W[:, :-1], W[:, -1]


# --------------------------------------------------------------------------------------------
# SSP
# --------------------------------------------------------------------------------------------


def ssp_statistics(
    A: np.ndarray,
    b: np.ndarray,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
    *,
    tight: bool = False,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Release ``[A b]ᵀ[A b] + E`` once, (ε, δ)-DP, and return its ``AᵀA`` and ``Aᵀb`` blocks.

    E is symmetric Gaussian (:func:`symmetric_gaussian`) with σ =
    ``analytic_gaussian_sigma(ε, δ, Δ)``, Δ = :func:`gram_sensitivity` (C) (2C², or √2·C² with
    ``tight``), where the rows of ``[A b]`` are clipped to norm ≤ C.

    Args:
        A: (n, d); b: (n,); epsilon > 0; 0 < delta < 1; clip_norm: C; rng: simulation RNG.

    Returns:
        ``(noisy_AtA (d, d), noisy_Atb (d,), sigma)``.
    """
    _check_rng(rng)
    A, b = _clipped_regression_data(A, b, clip_norm)
    d = A.shape[1]
    sigma = analytic_gaussian_sigma(epsilon, delta, gram_sensitivity(clip_norm, tight=tight))
    E = symmetric_gaussian(d + 1, sigma, rng)
    return A.T @ A + E[:d, :d], A.T @ b + E[:d, d], float(sigma)


def ssp_ridge(
    A: np.ndarray,
    b: np.ndarray,
    lam: float,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
    *,
    tight: bool = False,
) -> PrivateRegression:
    """Central sufficient-statistics perturbation (SSP) ridge regression.

    ``x = (AᵀA + E_AA + λI)^{-1} (Aᵀb + e_Ab)`` from one (ε, δ)-DP release of
    ``[A b]ᵀ[A b] + E`` (:func:`ssp_statistics`), solved by :func:`ltm.analyst.gram.solve_gram` (the
    LTM's own noisy-Gram solver): a noisy ``AᵀA`` that is not positive semidefinite is projected
    onto the PSD cone before λ is added (λ = 0: pseudo-inverse on the positive part);
    ``projected`` reports it.  Post-processing, so the output stays (ε, δ)-DP.

    Args:
        A: (n, d) transformed design; b: (n,) transformed target; lam: λ ≥ 0 (the same λ as
            the problem ``‖Ax − b‖² + λ‖x‖²``); epsilon, delta; clip_norm: C bounding the rows
            of ``[A b]``; rng: simulation RNG; tight: use the √2·C² sensitivity.

    Returns:
        :class:`PrivateRegression` with ``coef`` of shape (d,).
    """
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
    G, g, sigma = ssp_statistics(A, b, epsilon, delta, clip_norm, rng, tight=tight)
    coef, solver = solve_gram(G, g, float(lam))
    return PrivateRegression(
        coef=coef, lam=float(lam), sigmas={"gram": sigma}, projected=solver != "eigh",
        noisy_gram=G, noisy_moment=g,
    )


# --------------------------------------------------------------------------------------------
# AdaSSP
# --------------------------------------------------------------------------------------------


def adassp(
    A: np.ndarray,
    b: np.ndarray,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
    *,
    rho: float = 0.05,
    tight: bool = False,
) -> PrivateRegression:
    """AdaSSP (Wang 2018, "Revisiting differentially private linear regression", Algorithm 2).

    The budget is split in three equal parts, each (ε/3, δ/3)-DP, composed to (ε, δ):

    1. ``λ̃_min = max(λ_min(AᵀA) + σ₁ Z − σ₁ √(log(6/δ)), 0)``, Z ~ N(0, 1): a private, high-
       probability lower bound of the smallest eigenvalue.
    2. ``λ = max(0, σ₂ √(d · log(2d²/ρ)) − λ̃_min)``: the adaptive ridge (the paper's
       ``√(d log(6/δ) log(2d²/ρ)) ‖𝒳‖² / (ε/3)`` is exactly its XᵀX noise scale times
       ``√(d log(2d²/ρ))``; here σ₂ is the analytic-Gaussian scale).
    3. ``AᵀA + σ₂ Z_sym`` (symmetric, upper triangle i.i.d.) and ``Aᵀb + σ₃ z``.

    Output ``θ = (noisy AᵀA + λI)^{-1} noisy Aᵀb`` by :func:`ltm.analyst.gram.solve_gram` (a noisy
    AᵀA that is not PSD is first projected onto the PSD cone — a safeguard the paper does not
    have; reported by ``projected``).

    Replace-one sensitivities for rows ``(a, b)`` of ``[A b]`` clipped to ‖(a, b)‖ ≤ C:

    * λ_min(AᵀA): ``C²`` — by Weyl, |Δλ_min| ≤ ‖a'a'ᵀ − aaᵀ‖₂ ≤ max(‖a‖², ‖a'‖²) ≤ C²;
    * AᵀA (upper triangle): ``2C²`` (``tight``: √2·C²), see the module docstring;
    * Aᵀb: ``C²`` — ‖a'b' − ab‖ ≤ ‖a'‖|b'| + ‖a‖|b| and ‖a‖|b| ≤ (‖a‖² + b²)/2 ≤ C²/2.

    σ_i = ``analytic_gaussian_sigma(ε/3, δ/3, Δ_i)``.  (The paper's own constants use
    add/remove neighbours and the classical Gaussian bound; the structure is the paper's.)

    Args:
        A: (n, d); b: (n,); epsilon > 0; 0 < delta < 1; clip_norm: C; rng: simulation RNG;
        rho: failure probability of the λ rule (paper 0.05); tight: √2·C² Gram sensitivity.

    Returns:
        :class:`PrivateRegression`; ``details`` holds the released ``lambda_min_private``.
    """
    _check_rng(rng)
    if not 0 < rho < 1:
        raise ValueError(f"rho must be in (0, 1), got {rho!r}")
    A, b = _clipped_regression_data(A, b, clip_norm)
    d = A.shape[1]
    eps3, delta3 = epsilon / 3.0, delta / 3.0
    s_min = analytic_gaussian_sigma(eps3, delta3, min_eigenvalue_sensitivity(clip_norm))
    s_gram = analytic_gaussian_sigma(eps3, delta3, gram_sensitivity(clip_norm, tight=tight))
    s_mom = analytic_gaussian_sigma(eps3, delta3, joint_cross_moment_l2(clip_norm))

    G = A.T @ A
    G = (G + G.T) / 2.0
    lam_min = float(np.linalg.eigvalsh(G)[0])
    lam_min_priv = max(
        lam_min + s_min * float(rng.standard_normal()) - s_min * math.sqrt(math.log(6.0 / delta)),
        0.0,
    )
    lam = max(0.0, s_gram * math.sqrt(d * math.log(2.0 * d * d / rho)) - lam_min_priv)

    noisy_G = G + symmetric_gaussian(d, s_gram, rng)
    noisy_g = A.T @ b + s_mom * rng.standard_normal(d)
    coef, solver = solve_gram(noisy_G, noisy_g, lam)
    return PrivateRegression(
        coef=coef, lam=float(lam),
        sigmas={"lambda_min": float(s_min), "gram": float(s_gram), "moment": float(s_mom)},
        projected=solver != "eigh", noisy_gram=noisy_G, noisy_moment=noisy_g,
        details={"lambda_min_private": float(lam_min_priv)},
    )


# --------------------------------------------------------------------------------------------
# non-private ridge with a cross-validated λ
# --------------------------------------------------------------------------------------------


def cv_ridge_lambda(
    A: np.ndarray, b: np.ndarray, rng: np.random.Generator, *, folds: int = 5,
    grid: np.ndarray | None = None,
) -> float:
    """λ of the NON-PRIVATE ridge baseline, chosen by ``folds``-fold cross-validation.

    The grid is ``{0} ∪ t·10^k`` for k = −8 … 1 in half decades, with ``t = tr(AᵀA)/d`` (the
    average eigenvalue of the design's Gram matrix, so the grid is scale free) unless ``grid`` is
    given.  The fold assignment is a random permutation from ``rng``.  Returns the λ with the
    smallest mean validation squared error (ties → the smaller λ).
    """
    _check_rng(rng)
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    n, d = A.shape
    if b.shape[0] != n or n < folds or folds < 2:
        raise ValueError(f"need ≥ {folds} ≥ 2 rows with matching A {A.shape} and b {b.shape}")
    if grid is None:
        t = float(np.einsum("ij,ij->", A, A)) / max(d, 1) or 1.0
        grid = np.concatenate([[0.0], t * 10.0 ** np.arange(-8.0, 1.01, 0.5)])
    fold = rng.permutation(n) % folds
    errors = np.zeros(len(grid))
    for f in range(folds):
        tr, va = fold != f, fold == f
        G, g = A[tr].T @ A[tr], A[tr].T @ b[tr]
        evals, V = np.linalg.eigh((G + G.T) / 2.0)
        proj = V.T @ g
        Av = A[va] @ V
        for i, lam in enumerate(grid):
            den = evals + lam
            coords = np.where(den > 1e-12 * max(evals.max(), 1e-300), proj / np.where(den > 0, den, 1.0), 0.0)
            r = Av @ coords - b[va]
            errors[i] += float(r @ r)
    return float(grid[int(np.argmin(errors))])


# --------------------------------------------------------------------------------------------
# MOD-SULQ
# --------------------------------------------------------------------------------------------


def mod_sulq_noise_scale(
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    *,
    calibration: Literal["analytic", "paper"] = "analytic",
    tight: bool = False,
) -> float:
    """Noise standard deviation β of MOD-SULQ on ``(1/n)AᵀA`` with rows ‖a_i‖ ≤ 1.

    * ``"analytic"`` (default): ``analytic_gaussian_sigma(ε, δ, Δ)`` with the replace-one
      sensitivity of the upper triangle of ``(1/n)AᵀA``: ``Δ = 2/n`` (``tight``: √2/n).
    * ``"paper"``: Chaudhuri–Sarwate–Sinha (2013), Algorithm MOD-SULQ, the central
      baseline of Burkhardt et al. §6.2 (which does not print it):
      ``β = (d+1)/(nε) · sqrt(2 ln((d² + d)/(δ · 2√(2π)))) + 1/(n√ε)``.
    """
    if n < 1 or d < 1:
        raise ValueError(f"n and d must be >= 1, got n={n}, d={d}")
    if calibration == "analytic":
        sens = gram_sensitivity(1.0, tight=tight) / n  # rows in the unit ball, statistic / n
        return float(analytic_gaussian_sigma(epsilon, delta, sens))
    if calibration == "paper":
        _check_positive("epsilon", epsilon)
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        arg = (d * d + d) / (delta * 2.0 * math.sqrt(2.0 * math.pi))
        if arg <= 1.0:
            raise ValueError("MOD-SULQ 'paper' noise needs (d²+d)/(2√(2π)δ) > 1; lower delta")
        return (d + 1) / (n * epsilon) * math.sqrt(2.0 * math.log(arg)) + 1.0 / (
            n * math.sqrt(epsilon)
        )
    raise ValueError(f"unknown calibration {calibration!r}; valid: 'analytic', 'paper'")


def mod_sulq_covariance(
    A: np.ndarray,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    *,
    clip_norm: float | None = None,
    calibration: Literal["analytic", "paper"] = "analytic",
    tight: bool = False,
) -> tuple[np.ndarray, float]:
    """MOD-SULQ's released matrix ``(1/n)A'ᵀA' + N`` and its noise scale β.

    ``A' = clip_rows(A, C) / C`` so that ‖a'_i‖ ≤ 1 (C = ``clip_norm``, default 1: the rows are
    then clipped to the unit ball, as the algorithm assumes).  N is symmetric Gaussian with
    i.i.d. N(0, β²) on and above the diagonal (β from :func:`mod_sulq_noise_scale`).

    Returns:
        ``(noisy (D, D), beta)``.
    """
    _check_rng(rng)
    C = 1.0 if clip_norm is None else float(clip_norm)
    A = clip_rows(A, C) / C
    n, D = A.shape
    beta = mod_sulq_noise_scale(n, D, epsilon, delta, calibration=calibration, tight=tight)
    cov = (A.T @ A) / n
    cov = (cov + cov.T) / 2.0
    return cov + symmetric_gaussian(D, beta, rng), float(beta)


def mod_sulq(A: np.ndarray, rank: int, epsilon: float, delta: float, rng: np.random.Generator,
             **options: Any) -> np.ndarray:
    """MOD-SULQ (Chaudhuri, Sarwate & Sinha 2013): the top-``rank`` eigenvectors of the noisy
    second-moment matrix of :func:`mod_sulq_covariance` — the central low-rank baseline.

    Args:
        A: (n, D) data rows; rank: k with 1 ≤ k ≤ D; epsilon, delta; rng: simulation RNG;
        options: :func:`mod_sulq_covariance`'s keywords — clip_norm: row bound C (rows are clipped
            to C and divided by C; default 1); calibration: ``"analytic"`` (default) or ``"paper"``
            (CSS's β); tight: √2/n sensitivity.

    Returns:
        (D, rank) with orthonormal columns, ordered by decreasing eigenvalue; each column's
        largest-|·| entry is positive.
    """
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"A must be 2-D, got shape {A.shape}")
    D = A.shape[1]
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 1 <= rank <= D:
        raise ValueError(f"rank must be an integer in [1, {D}], got {rank!r}")
    noisy, _ = mod_sulq_covariance(A, epsilon, delta, rng, **options)
    return top_eigenvectors(noisy, rank)[0]


# --------------------------------------------------------------------------------------------
# Local model
# --------------------------------------------------------------------------------------------


def local_noisy_rows(
    V: np.ndarray,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, float]:
    """The local model (p = 0): every client alone is (ε, δ)-DP.

    Each row is clipped to ℓ2 norm ≤ C and released as ``v + N(0, σ² I)`` with σ =
    ``analytic_gaussian_sigma(ε, δ, 2C)`` (replace-one, one row: ‖v − v'‖ ≤ 2C).  The caller fits
    the same estimator on the noisy rows, unsketched (see :func:`local_release`).

    Args:
        V: (n, D) transformed client rows; epsilon, delta; clip_norm: C; rng: simulation RNG.

    Returns:
        ``(noisy rows (n, D) float64, sigma)``.
    """
    _check_rng(rng)
    V = clip_rows(V, clip_norm)
    sigma = float(analytic_gaussian_sigma(epsilon, delta, vector_sensitivity(clip_norm)))
    return V + sigma * rng.standard_normal(V.shape), sigma


def local_release(
    template: ReleasedSketch,
    V: np.ndarray,
    epsilon: float,
    delta: float,
    clip_norm: float,
    rng: np.random.Generator,
) -> ReleasedSketch:
    """Local-model baseline packaged as a :class:`ReleasedSketch` so every estimator (and the
    raw-unit mapping) runs on it unchanged.

    The matrix is the n noisy rows of :func:`local_noisy_rows` (no sketch), with the column
    metadata of ``template``; ``n = V.shape[0]`` and ``noise_variance_per_column = n σ²`` (the
    expected noise Gram diagonal, which DGM-OLS subtracts).  ``sha256`` is empty: this is a
    simulation, not a reconstructed release.

    Args:
        template: a release of the same job (columns, centers, scales, label, intercept).
        V: (n, D) transformed client rows in the template's column order.
    """
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or V.shape[1] != len(template.columns):
        raise ValueError(f"V must have shape (n, {len(template.columns)}), got {V.shape}")
    noisy, sigma = local_noisy_rows(V, epsilon, delta, clip_norm, rng)
    n = V.shape[0]
    return dataclasses.replace(
        template,
        matrix=noisy,
        n=n,
        noise_variance_per_column=float(n * sigma**2),
        privacy={
            "baseline": "local",
            "epsilon": float(epsilon),
            "delta": float(delta),
            "sensitivity": vector_sensitivity(clip_norm),
            "sigma_client": sigma,
            "note": "simulation baseline (seeded numpy RNG), not a production release",
        },
        sha256="",
        kind="local",
        entry_noise_variance=None,  # the rows are a matrix (E[NᵀN]_cc above), whatever the template's kind
    )

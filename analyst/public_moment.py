"""Central DP-OLS with a public second moment (Cao & Zhang): DP-PMTOLSE and the paper's baseline.

THESE ARE CENTRAL-MODEL SIMULATION ESTIMATORS, NOT PRODUCTION RELEASES (like
:mod:`ltm.analyst.baselines`): they run on plaintext data in one process and draw their noise from the
caller's seeded ``numpy.random.Generator``.  They exist to reproduce the paper (Cao & Zhang,
*Enhancing Differentially Private Linear Regression via Public Second-Moment*, Alg. 1–4 of its
§3) and as central baselines for the LTM's whitening transform, where the parties whiten before
clipping and the analyst maps coefficients back.

* :func:`pmt` — Alg. 1 (PMT): whiten with the public ``M = Σ̂_B^{-1/2}``, then clip in ℓ2 at the
  data-independent radius ``sqrt(d(1 + log(2n/η)))``.
* :func:`dp_pmtse` — Alg. 2: the ρ-zCDP second moment of the PMT rows.
* :func:`dp_pmt_olse` — Alg. 3 (DP-PMTOLSE): PMT on features (radius R_x) and, separately, on the
  label divided by σ̂_B (radius R_y); Gaussian noise on ``ÃᵀÃ/n`` (σ₁ = Δ₁/√(2ρ), Δ₁ = 2R_x²/n)
  and on ``Ãᵀỹ/n`` (σ₂ = Δ₂/√(2ρ), Δ₂ = 2R_xR_y/n); solve; map back ``β = σ̂_B M β̃``.
  2ρ-zCDP in total (two releases at ρ each).
* :func:`dp_olse` — Alg. 4 (DP-OLSE), the paper's baseline: no whitening, radii
  ``R_A² = Tr(Σ) + d·log(2n/η)`` and ``R_y² = σ̂² + log(2n/η)``.  **The paper computes Tr(Σ̂_A)
  and σ̂_A from the PRIVATE data (``radius_source="private_oracle"``): that radius and the noise
  scale depend on the private data, so that variant is NOT differentially private.**  It exists
  only to reproduce the paper's figures and is labelled ``is_dp=False`` / "NOT DP" everywhere.
  The default ``radius_source="public"`` uses Tr(Σ̂_B) and σ̂_B², which is DP (both are public).

Corrections to the paper (its Lemma 7 and Alg. 2–4) applied here:

* "GUE(σ²)" is a REAL symmetric matrix: the upper triangle including the diagonal is i.i.d.
  N(0, σ²) and mirrored (:func:`ltm.analyst.baselines.symmetric_gaussian`); ``(Z+Zᵀ)/2`` would
  under-noise the off-diagonal (a privacy bug).
* ρ is the budget PER released statistic, so each algorithm is 2ρ-zCDP in total; ε is reported
  with ``ε = 2ρ + 2·sqrt(2ρ·log(1/δ))`` (not ``ρ + …``).
* The Gram sensitivity ``2R²/n`` is the paper's (valid) triangle-inequality bound; the exact
  replace-one bound is ``√2·R²/n`` (``gram_sensitivity="tight"``, less noise, also valid).
* A singular noisy Gram is recorded as a failure (``failed``, coefficients NaN), never silently
  regularised; an indefinite one is solved as the paper does and flagged by ``min_eig_noisy_gram``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ltm.analyst.baselines import symmetric_gaussian
from ltm.clipping import clip_rows
from ltm.dp.sensitivity import cross_moment_l2, gram_l2, gram_l2_triangle
from ltm.second_moment import PublicSecondMoment, pmt_radius, zcdp_gaussian_sigma, zcdp_to_epsilon

__all__ = [
    "NotPrivateWarning",
    "PublicMomentRegression",
    "pmt",
    "dp_pmtse",
    "dp_pmt_olse",
    "dp_olse",
    "pmt_olse_sigmas",
    "olse_sigmas",
]

DEFAULT_ETA_FAIL = 0.05
NOT_DP_LABEL = "NOT DP: clipping radius and noise scale computed from the private data (paper's Alg. 4 oracle)"


class NotPrivateWarning(UserWarning):
    """A paper-faithful reproduction mode that is not differentially private was used."""


@dataclass(frozen=True)
class PublicMomentRegression:
    """Result of :func:`dp_pmt_olse` / :func:`dp_olse`.

    Attributes:
        coef: (d,) coefficients in the ORIGINAL feature space (NaN when ``failed``).
        coef_whitened: (d,) the solution in the solver's coordinates (whitened for PMT).
        sigmas: noise std per released statistic: ``gram`` (σ₁), ``moment`` (σ₂).
        sensitivities: the replace-one ℓ2 sensitivities Δ₁, Δ₂ of the normalised statistics.
        radii: clipping radii ``features`` and ``label``.
        rho_per_statistic: the paper's input ρ.
        is_dp: False only for the private-oracle baseline.
        label: what the estimate is, including "NOT DP" where it applies.
        clipped_features, clipped_labels: how many rows the clipping changed (utility diagnostics).
        failed: the noisy Gram was singular (no solution).
        min_eig_noisy_gram: smallest eigenvalue of the noisy (normalised) Gram (< 0: indefinite).
        noisy_gram, noisy_moment: the two released statistics ``ÃᵀÃ/n + G`` and ``Ãᵀỹ/n + g``.
    """

    coef: np.ndarray
    coef_whitened: np.ndarray
    sigmas: dict[str, float]
    sensitivities: dict[str, float]
    radii: dict[str, float]
    rho_per_statistic: float
    is_dp: bool
    label: str
    clipped_features: int
    clipped_labels: int
    failed: bool
    min_eig_noisy_gram: float
    noisy_gram: np.ndarray
    noisy_moment: np.ndarray
    details: dict[str, float] = field(default_factory=dict)

    @property
    def rho_total(self) -> float:
        """Total zCDP of the two Gaussian releases (Lemma 2): 2ρ."""
        return 2.0 * self.rho_per_statistic

    def epsilon(self, delta: float) -> float:
        """The (ε, δ)-DP guarantee via Lemma 1 for the total 2ρ; ``inf`` when not DP."""
        return zcdp_to_epsilon(self.rho_total, delta) if self.is_dp else math.inf


# --------------------------------------------------------------------------------------------
# Alg. 1 and 2
# --------------------------------------------------------------------------------------------


def _clip_count(Z: np.ndarray, radius: float) -> tuple[np.ndarray, int]:
    norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    return clip_rows(Z, radius), int(np.count_nonzero(norms > radius))


def pmt(X: np.ndarray, whitening: np.ndarray, *, n: int | None = None, eta_fail: float = DEFAULT_ETA_FAIL
        ) -> tuple[np.ndarray, int, float]:
    """Alg. 1 (PMT): ``x̃ = clip_ℓ2(M x, sqrt(d(1 + log(2n/η))))`` for every row of X.

    Args:
        X: (n, d) private rows; whitening: (d, d) public symmetric ``M = Σ̂^{-1/2}``;
        n: the sample count in the radius (default ``len(X)``); eta_fail: the failure probability η.
    Returns:
        ``(X̃ (n, d), number of rows clipped, radius)``.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    M = np.atleast_2d(np.asarray(whitening, dtype=np.float64))
    if M.shape != (X.shape[1], X.shape[1]):
        raise ValueError(f"whitening matrix {M.shape} does not match {X.shape[1]} columns")
    radius = pmt_radius(X.shape[1], n if n is not None else X.shape[0], eta_fail)
    Xt, clipped = _clip_count(X @ M, radius)
    return Xt, clipped, radius


def dp_pmtse(X: np.ndarray, public: PublicSecondMoment, rho: float, rng: np.random.Generator, *,
             eta_fail: float = DEFAULT_ETA_FAIL, gram_sensitivity: Literal["paper", "tight"] = "paper"
             ) -> tuple[np.ndarray, float]:
    """Alg. 2 (DP-PMTSE): ``(1/n) Σ x̃ x̃ᵀ + G``, G symmetric Gaussian with σ = Δ/√(2ρ),
    Δ = 2d(1 + log(2n/η))/n (``tight``: √2·R²/n).  ρ-zCDP.  Returns ``(Σ̃, σ)``."""
    _check_rng(rng)
    Xt, _, radius = pmt(X, public.whitening, eta_fail=eta_fail)
    n, d = Xt.shape
    sigma = zcdp_gaussian_sigma(_gram_bound(gram_sensitivity, radius) / n, rho)
    return Xt.T @ Xt / n + symmetric_gaussian(d, sigma, rng), sigma


# --------------------------------------------------------------------------------------------
# Alg. 3 (DP-PMTOLSE)
# --------------------------------------------------------------------------------------------


def pmt_olse_sigmas(d: int, n: int, rho: float, *, eta_fail: float = DEFAULT_ETA_FAIL,
                    gram_sensitivity: Literal["paper", "tight"] = "paper") -> dict[str, float]:
    """Alg. 3's radii, sensitivities and noise scales (Theorem 3's proof), from public quantities only:
    ``R_x = sqrt(d(1+L))``, ``R_y = sqrt(1+L)``, L = log(2n/η); ``Δ₁ = 2R_x²/n``,
    ``Δ₂ = 2R_xR_y/n``; ``σ_k = Δ_k/√(2ρ)``."""
    rx, ry = pmt_radius(d, n, eta_fail), pmt_radius(1, n, eta_fail)
    d1 = _gram_bound(gram_sensitivity, rx) / n
    d2 = cross_moment_l2(rx, ry) / n
    return {"R_x": rx, "R_y": ry, "delta_gram": d1, "delta_moment": d2,
            "sigma_gram": zcdp_gaussian_sigma(d1, rho), "sigma_moment": zcdp_gaussian_sigma(d2, rho)}


def dp_pmt_olse(A: np.ndarray, y: np.ndarray, public: PublicSecondMoment, rho: float, rng: np.random.Generator,
                *, eta_fail: float = DEFAULT_ETA_FAIL, gram_sensitivity: Literal["paper", "tight"] = "paper"
                ) -> PublicMomentRegression:
    """Alg. 3 (DP-PMTOLSE), 2ρ-zCDP for a PUBLIC ``public`` (Σ̂_B, σ̂_B).

    Args:
        A: (n, d) private features; y: (n,) private labels; public: the public second moment
            (from public or synthetic data, never from A); rho: ρ per statistic (> 0);
        rng: simulation RNG (G and g are drawn from it in that order); eta_fail: η;
        gram_sensitivity: ``"paper"`` (2R²/n) or ``"tight"`` (√2·R²/n).
    """
    _check_rng(rng)
    A, y = _xy(A, y)
    n, d = A.shape
    if public.d != d:
        raise ValueError(f"the public second moment is {public.d}×{public.d}, the data have {d} features")
    cal = pmt_olse_sigmas(d, n, rho, eta_fail=eta_fail, gram_sensitivity=gram_sensitivity)
    At, cx, _ = pmt(A, public.whitening, n=n, eta_fail=eta_fail)
    yt, cy, _ = pmt(public.scale_label(y)[:, None], np.ones((1, 1)), n=n, eta_fail=eta_fail)
    yt = yt[:, 0]
    H = At.T @ At / n + symmetric_gaussian(d, cal["sigma_gram"], rng)
    h = At.T @ yt / n + cal["sigma_moment"] * rng.standard_normal(d)
    beta_t, failed, min_eig = _solve(H, h)
    coef = public.coef_back(beta_t) if not failed else np.full(d, np.nan)
    return PublicMomentRegression(
        coef=coef, coef_whitened=beta_t, sigmas={"gram": cal["sigma_gram"], "moment": cal["sigma_moment"]},
        sensitivities={"gram": cal["delta_gram"], "moment": cal["delta_moment"]},
        radii={"features": cal["R_x"], "label": cal["R_y"]}, rho_per_statistic=float(rho), is_dp=True,
        label="DP-PMTOLSE (Alg. 3, public second moment)", clipped_features=cx, clipped_labels=cy,
        failed=failed, min_eig_noisy_gram=min_eig, noisy_gram=H, noisy_moment=h)


# --------------------------------------------------------------------------------------------
# Alg. 4 (DP-OLSE), the paper's baseline
# --------------------------------------------------------------------------------------------


def olse_sigmas(d: int, n: int, rho: float, trace: float, label_ms: float, *, eta_fail: float = DEFAULT_ETA_FAIL,
                gram_sensitivity: Literal["paper", "tight"] = "paper") -> dict[str, float]:
    """Alg. 4's radii and noise scales: ``R_A² = trace + d·L``, ``R_y² = label_ms + L``,
    L = log(2n/η); ``σ₁ = 2R_A²/(√(2ρ) n)``, ``σ₂ = 2R_A R_y/(√(2ρ) n)``."""
    if not (trace >= 0 and label_ms >= 0):
        raise ValueError("trace and label mean square must be ≥ 0")
    L = math.log(2.0 * n / eta_fail)
    ra, ry = math.sqrt(trace + d * L), math.sqrt(label_ms + L)
    d1 = _gram_bound(gram_sensitivity, ra) / n
    d2 = cross_moment_l2(ra, ry) / n
    return {"R_x": ra, "R_y": ry, "delta_gram": d1, "delta_moment": d2,
            "sigma_gram": zcdp_gaussian_sigma(d1, rho), "sigma_moment": zcdp_gaussian_sigma(d2, rho)}


def dp_olse(A: np.ndarray, y: np.ndarray, rho: float, rng: np.random.Generator, *,
            radius_source: Literal["public", "private_oracle"] = "public",
            public: PublicSecondMoment | None = None, eta_fail: float = DEFAULT_ETA_FAIL,
            gram_sensitivity: Literal["paper", "tight"] = "paper") -> PublicMomentRegression:
    """Alg. 4 (DP-OLSE): SSP without whitening.

    ``radius_source="public"`` (default, DP): ``Tr(Σ̂_B)`` and ``σ̂_B²`` from ``public``.
    ``radius_source="private_oracle"``: **NOT DP** — the paper's verbatim baseline, whose radius and
    noise use ``Tr(AᵀA/n)`` and ``mean(y²)`` of the PRIVATE data; emits :class:`NotPrivateWarning`
    and returns ``is_dp=False``.  For reproducing the paper's figures only.
    """
    _check_rng(rng)
    A, y = _xy(A, y)
    n, d = A.shape
    if radius_source == "public":
        if public is None:
            raise ValueError("radius_source='public' needs the public second moment")
        if public.d != d:
            raise ValueError(f"the public second moment is {public.d}×{public.d}, the data have {d} features")
        trace, label_ms, is_dp, label = float(np.trace(public.sigma)), public.label_rms**2, True, \
            "DP-OLSE (Alg. 4, public radius)"
    elif radius_source == "private_oracle":
        warnings.warn("dp_olse(radius_source='private_oracle') is the paper's non-private baseline: " + NOT_DP_LABEL,
                      NotPrivateWarning, stacklevel=2)
        trace, label_ms, is_dp, label = float(np.einsum("ij,ij->", A, A) / n), float(np.mean(y**2)), False, \
            "DP-OLSE (Alg. 4, private-oracle radius) — " + NOT_DP_LABEL
    else:
        raise ValueError(f"radius_source must be 'public' or 'private_oracle', got {radius_source!r}")
    cal = olse_sigmas(d, n, rho, trace, label_ms, eta_fail=eta_fail, gram_sensitivity=gram_sensitivity)
    Ac, cx = _clip_count(A, cal["R_x"])
    yc, cy = _clip_count(y[:, None], cal["R_y"])
    yc = yc[:, 0]
    H = Ac.T @ Ac / n + symmetric_gaussian(d, cal["sigma_gram"], rng)
    h = Ac.T @ yc / n + cal["sigma_moment"] * rng.standard_normal(d)
    beta, failed, min_eig = _solve(H, h)
    return PublicMomentRegression(
        coef=beta if not failed else np.full(d, np.nan), coef_whitened=beta,
        sigmas={"gram": cal["sigma_gram"], "moment": cal["sigma_moment"]},
        sensitivities={"gram": cal["delta_gram"], "moment": cal["delta_moment"]},
        radii={"features": cal["R_x"], "label": cal["R_y"]}, rho_per_statistic=float(rho), is_dp=is_dp,
        label=label, clipped_features=cx, clipped_labels=cy, failed=failed, min_eig_noisy_gram=min_eig, noisy_gram=H, noisy_moment=h)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _gram_bound(mode: str, radius: float) -> float:
    """The Gram sensitivity for rows of norm ≤ ``radius``: the paper's 2R² or the exact √2·R²."""
    if mode == "paper":
        return gram_l2_triangle(radius)
    if mode == "tight":
        return gram_l2(radius)
    raise ValueError(f"gram_sensitivity must be 'paper' or 'tight', got {mode!r}")


def _check_rng(rng: np.random.Generator) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator (these are simulation estimators)")


def _xy(A: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    A = np.asarray(A, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if A.ndim != 2 or A.shape[0] != y.shape[0] or A.shape[0] == 0:
        raise ValueError(f"shapes do not match: A {A.shape}, y {y.shape}")
    return A, y


def _solve(H: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, bool, float]:
    """The paper's plain solve (no hidden ridge); a singular H is a failure (NaN coefficients)."""
    min_eig = float(np.linalg.eigvalsh(0.5 * (H + H.T))[0])
    try:
        return np.linalg.solve(H, h), False, min_eig
    except np.linalg.LinAlgError:
        return np.full(h.shape[0], np.nan), True, min_eig

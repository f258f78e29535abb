"""A public second moment and the whitening it defines (Cao & Zhang, *Enhancing Differentially
Private Linear Regression via Public Second-Moment*: the transform in its §2.3, Alg. 1–3 in §3).

Pure core: no I/O, no actor imports.  Everything here depends only on PUBLIC inputs — a second
moment ``Σ̂_B = BᵀB/n_B`` and a label RMS ``σ̂_B = sqrt(mean(y_B²))`` computed from public or
synthetic data (never from the private data), and public sizes — so the radii and the noise
scales derived from them are data-independent.

* ``Σ̂_B`` is the UNCENTRED second moment and ``σ̂_B`` the RMS (not the std), as §2.3.2 defines them.
* The whitening matrix is the symmetric ``M = Σ̂_B^{-1/2}`` (via ``eigh``), so the row
  convention ``Ã = A·M`` and the column convention ``x̃ = M·x`` agree (a Cholesky factor would not).
* Coefficients map back as ``β = σ̂_B · M · β̃`` (the paper's Eq. (1), §2.3.2).
* zCDP helpers (Bun & Steinke 2016, the paper's Lemma 1 and Lemma 3) convert the paper's ρ
  budgets; Alg. 3 and Alg. 4 release TWO statistics at ρ each, so they are 2ρ-zCDP in total.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PublicSecondMoment",
    "inv_sqrt_spd",
    "kappa_bar",
    "pmt_radius",
    "zcdp_gaussian_sigma",
    "zcdp_to_epsilon",
    "epsilon_to_zcdp",
]


def inv_sqrt_spd(S: np.ndarray, eig_floor: float | None = None) -> np.ndarray:
    """The symmetric inverse square root ``S^{-1/2}`` of a symmetric positive-definite matrix.

    Computed with ``eigh`` (never ``sqrtm``, which may return complex values).  A singular or
    indefinite ``S`` raises ValueError unless ``eig_floor`` is given; then eigen-directions with
    eigenvalue ≤ ``eig_floor`` are dropped (the pseudo-inverse
    root: our choice for n_B ≤ d, where the paper's method is undefined).
    """
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] == 0:
        raise ValueError(f"second moment must be a non-empty square matrix, got shape {S.shape}")
    if not np.all(np.isfinite(S)):
        raise ValueError("second moment has non-finite entries")
    S = 0.5 * (S + S.T)
    w, V = np.linalg.eigh(S)
    if eig_floor is None:
        if w[0] <= 0.0:
            raise ValueError(f"public second moment is not positive definite (smallest eigenvalue {w[0]:.3g}; "
                             f"a public sample needs more rows than columns)")
        wi = w ** -0.5
    else:
        keep = w > eig_floor
        wi = np.zeros_like(w)
        wi[keep] = w[keep] ** -0.5
    return (V * wi) @ V.T


def kappa_bar(S: np.ndarray) -> float:
    """The paper's "averaged condition number" mean(eig(S)) / min(eig(S)) (κ̄ of Theorem 4; not λ_max/λ_min)."""
    w = np.linalg.eigvalsh(0.5 * (np.asarray(S, dtype=np.float64) + np.asarray(S, dtype=np.float64).T))
    return float(w.mean() / w[0])


def pmt_radius(d: int, n: int, eta_fail: float = 0.05) -> float:
    """Alg. 1's clipping radius ``sqrt(d·(1 + log(2n/η)))`` for d whitened coordinates and n
    private samples (natural log; η is a failure PROBABILITY, not a bound — the paper's Lemma 4)."""
    if d < 1 or n < 1:
        raise ValueError(f"pmt_radius needs d ≥ 1 and n ≥ 1 (got d={d}, n={n})")
    if not 0.0 < eta_fail < 1.0:
        raise ValueError(f"eta_fail is a probability in (0, 1), got {eta_fail!r}")
    return math.sqrt(d * (1.0 + math.log(2.0 * n / eta_fail)))


def zcdp_gaussian_sigma(sensitivity: float, rho: float) -> float:
    """Lemma 3: adding N(0, σ²) per coordinate to a statistic of ℓ2 sensitivity Δ is ρ-zCDP for
    ``σ = Δ / sqrt(2ρ)``."""
    if not (math.isfinite(sensitivity) and sensitivity > 0 and math.isfinite(rho) and rho > 0):
        raise ValueError(f"sensitivity and rho must be finite and > 0 (got {sensitivity!r}, {rho!r})")
    return sensitivity / math.sqrt(2.0 * rho)


def zcdp_to_epsilon(rho: float, delta: float) -> float:
    """Lemma 1 (Bun & Steinke): ρ-zCDP implies (ρ + 2·sqrt(ρ·log(1/δ)), δ)-DP."""
    if not (rho >= 0 and 0 < delta < 1):
        raise ValueError(f"need rho ≥ 0 and 0 < δ < 1 (got {rho!r}, {delta!r})")
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def epsilon_to_zcdp(epsilon: float, delta: float) -> float:
    """The largest ρ that :func:`zcdp_to_epsilon` maps to at most ε: (sqrt(log(1/δ) + ε) − sqrt(log(1/δ)))²."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need ε > 0 and 0 < δ < 1 (got {epsilon!r}, {delta!r})")
    a = math.log(1.0 / delta)
    return (math.sqrt(a + epsilon) - math.sqrt(a)) ** 2


@dataclass(frozen=True, eq=False)  # ndarray fields: compare by identity, not elementwise
class PublicSecondMoment:
    """A public second moment of the features and the public RMS of the label.

    Attributes:
        sigma: (d, d) symmetric positive-definite ``Σ̂_B = BᵀB/n_B`` (uncentred).
        label_rms: ``σ̂_B = sqrt(mean(y_B²)) > 0``.
        n_public: how many public rows it came from (informational; 0 = unknown / synthetic).
        eig_floor: None (default: Σ̂_B must be positive definite) or a floor below which
            eigen-directions are dropped (the pseudo-inverse root, for the paper's n_B ≤ d points).
        feature_mean, label_mean: the public means subtracted before whitening, when the moment
            is a covariance (``from_public_data(..., center=True)``; not in the paper, whose
            model has no intercept); None / 0.0 for the paper's uncentred second moment.
    """

    sigma: np.ndarray
    label_rms: float
    n_public: int = 0
    eig_floor: float | None = None
    feature_mean: np.ndarray | None = None
    label_mean: float = 0.0

    def __post_init__(self) -> None:
        S = np.array(self.sigma, dtype=np.float64, copy=True)
        if S.ndim != 2 or S.shape[0] != S.shape[1]:
            raise ValueError(f"second moment must be square, got shape {S.shape}")
        if not np.allclose(S, S.T, rtol=1e-10, atol=1e-12 * max(1.0, float(np.abs(S).max(initial=0.0)))):
            raise ValueError("second moment must be symmetric")
        if not (math.isfinite(self.label_rms) and self.label_rms > 0):
            raise ValueError(f"label RMS must be finite and > 0, got {self.label_rms!r}")
        S.setflags(write=False)
        object.__setattr__(self, "sigma", S)
        if self.feature_mean is not None:
            mu = np.array(self.feature_mean, dtype=np.float64, copy=True).reshape(-1)
            if mu.shape != (S.shape[0],) or not np.all(np.isfinite(mu)) or not math.isfinite(self.label_mean):
                raise ValueError(f"feature_mean must be {S.shape[0]} finite numbers and label_mean finite")
            mu.setflags(write=False)
            object.__setattr__(self, "feature_mean", mu)
        object.__setattr__(self, "_M", inv_sqrt_spd(S, self.eig_floor))  # validates positive definiteness

    @classmethod
    def from_public_data(cls, B: np.ndarray, y_B: np.ndarray, *, eig_floor: float | None = None,
                         center: bool = False) -> "PublicSecondMoment":
        """Σ̂_B = BᵀB/n_B and σ̂_B = sqrt(mean(y_B²)) from PUBLIC rows (never the private data).

        ``center=True`` (not the paper's method): subtract the public means first, so Σ̂_B is the
        public covariance and σ̂_B the public std of y; the means are kept for the parties' centring.
        """
        B = np.asarray(B, dtype=np.float64)
        y_B = np.asarray(y_B, dtype=np.float64).reshape(-1)
        if B.ndim != 2 or B.shape[0] != y_B.shape[0] or B.shape[0] == 0:
            raise ValueError(f"public data shapes do not match: B {B.shape}, y_B {y_B.shape}")
        if center:
            mu, my = B.mean(axis=0), float(y_B.mean())
            B, y_B = B - mu, y_B - my
            return cls(B.T @ B / B.shape[0], float(np.sqrt(np.mean(y_B**2))), int(B.shape[0]), eig_floor, mu, my)
        return cls(B.T @ B / B.shape[0], float(np.sqrt(np.mean(y_B**2))), int(B.shape[0]), eig_floor)

    @property
    def d(self) -> int:
        return int(self.sigma.shape[0])

    @property
    def whitening(self) -> np.ndarray:
        """``M = Σ̂_B^{-1/2}`` (symmetric; read-only copy)."""
        return self._M.copy()  # type: ignore[attr-defined]

    def whiten(self, X: np.ndarray) -> np.ndarray:
        """Rows ``x̃ = M·x`` (as a matrix: ``X·M``; M is symmetric)."""
        X = np.asarray(X, dtype=np.float64)
        if X.shape[-1] != self.d:
            raise ValueError(f"rows have {X.shape[-1]} features, the public second moment has {self.d}")
        return X @ self._M  # type: ignore[attr-defined]

    def scale_label(self, y: np.ndarray) -> np.ndarray:
        """``ỹ = y / σ̂_B``."""
        return np.asarray(y, dtype=np.float64) / self.label_rms

    def coef_back(self, coef_whitened: np.ndarray) -> np.ndarray:
        """Map whitened-space coefficients to the original space: ``β = σ̂_B · M · β̃``."""
        b = np.asarray(coef_whitened, dtype=np.float64)
        if b.shape[0] != self.d:
            raise ValueError(f"coefficients have length {b.shape[0]}, expected {self.d}")
        return self.label_rms * (self._M @ b)  # type: ignore[attr-defined]

    def kappa_bar_transformed(self, private_second_moment: np.ndarray) -> float:
        """κ̄(M Σ̂_A M), the paper's diagnostic of how well the public moment whitens (§4.1)."""
        M = self._M  # type: ignore[attr-defined]
        return kappa_bar(M @ np.asarray(private_second_moment, dtype=np.float64) @ M)

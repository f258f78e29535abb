"""The released DP sketch: what the analyst reconstructs and every estimator fits on.

A release is the m × D matrix ``Ã = (1/√s) Σ_l S_l (V + G_l)`` (already scaled), where the D columns
are the job's *transformed* columns: features, then an optional intercept column, then the label,
each mapped by a public affine transform ``x' = (x − center) / scale`` so that client rows have
ℓ2 norm ≤ the clip bound.  Estimators work in that transformed space and map coefficients back
to original units with ``centers``/``scales``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ReleasedSketch:
    """A reconstructed, scaled DP sketch with what is needed to interpret it.

    Attributes:
        matrix: float64 array of shape (m, D), the scaled sketch Ã.
        columns: the D column names, in order (features..., optional intercept, label).
        centers, scales: float64 arrays of shape (D,): column j of a client row was
            ``(raw_j - centers[j]) / scales[j]`` before clipping.  The intercept column has
            raw value 1, center 0.
        label: index of the label column, or None for an unlabelled (low-rank) job.
        intercept: index of the intercept column, or None.
        n: number of participating clients (rows of the underlying data).
        noise_variance_per_column: Σ_r Var(noise in entry (r, c)) of the *scaled* matrix, i.e.
            the expected diagonal of the noise Gram matrix ``E[NᵀN]`` (same for every column).
            De-biasing estimators (DGM-OLS) subtract it.
        privacy: the privacy report (epsilon, delta, calibration, sigma_release, ...).
        sha256: hex SHA-256 of the reconstructed uint64 sketch bytes (before decoding).
    """

    matrix: np.ndarray
    columns: tuple[str, ...]
    centers: np.ndarray
    scales: np.ndarray
    label: int | None
    intercept: int | None
    n: int
    noise_variance_per_column: float
    privacy: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""

    @property
    def feature_indices(self) -> list[int]:
        """Indices of the regressors (features and intercept), label excluded."""
        return [j for j in range(len(self.columns)) if j != self.label]

    @property
    def design(self) -> np.ndarray:
        """The sketched design matrix X̃, shape (m, D − 1) when labelled, (m, D) otherwise."""
        return self.matrix[:, self.feature_indices]

    @property
    def target(self) -> np.ndarray:
        """The sketched label column ỹ, shape (m,)."""
        if self.label is None:
            raise ValueError("this release has no label column (a low-rank job)")
        return self.matrix[:, self.label]

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

from ltm.lifts import get_lift, gram_from_vector


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
            De-biasing estimators (DGM-OLS) subtract it.  For a lifted kind: the noise variance
            of each of the W entries of the released sum.
        privacy: the privacy report (epsilon, delta, calibration, sigma_release, ...).
        sha256: hex SHA-256 of the reconstructed uint64 sketch bytes (before decoding).
        kind: the job's release kind (``sparse``, ``dense``, or a lifted kind such as ``gram``).
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
    kind: str = "sparse"

    def __post_init__(self) -> None:
        shape = np.shape(self.matrix)
        width = len(self.columns) if get_lift(self.kind) is None else None
        if width is not None and (len(shape) != 2 or shape[1] != width):
            raise ValueError(f"a {self.kind!r} release matrix must have shape (m, {width}), got {shape} "
                             f"(a lifted release, e.g. 'gram', must say its kind)")

    @property
    def lifted(self) -> bool:
        """True for a lifted release kind (``gram``, …): ``matrix`` is then the 1 × W noisy
        sum of the clients' lifted vectors, not a sketch (see :mod:`ltm.lifts`)."""
        return get_lift(self.kind) is not None

    @property
    def gram(self) -> np.ndarray:
        """The noisy D × D Gram matrix ZᵀZ of a ``gram`` release (features, intercept, label)."""
        if self.kind != "gram":
            raise ValueError(f"a {self.kind!r} release carries no Gram matrix (only a 'gram' release does)")
        return gram_from_vector(self.matrix[0], len(self.columns))

    @property
    def gram_noise_variance(self) -> np.ndarray:
        """(D, D) variance of the noise in each entry of :attr:`gram` (diagonal v, off-diagonal v/2)."""
        d = len(self.columns)
        v = float(self.noise_variance_per_column)
        return np.where(np.eye(d, dtype=bool), v, v / 2.0)

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

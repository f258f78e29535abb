"""Estimators that fit on a released DP sketch (sklearn-like surface).

Every regression estimator works in the *transformed* space of the release: column j of a client
row was ``x'_j = (x_j − c_j) / s_j`` (centers ``c``, scales ``s``), the optional intercept column
has raw value 1 and center 0 (so its transformed value is the constant ``1 / s_0``), and the label
is last.  An estimator solves for ``w`` over ``release.feature_indices`` (features *and* the
intercept column, label excluded) — that is ``coef_scaled_`` — and then maps it back to raw units:

    y_raw = c_y + s_y · ( Σ_j w_j (x_j − c_j) / s_j  +  w_0 (1 − c_0) / s_0 )

so that ``coef_[j] = s_y w_j / s_j`` (one per FEATURE column, intercept and label excluded) and
``intercept_ = c_y + s_y (w_0 (1 − c_0) / s_0 − Σ_j w_j c_j / s_j)``.  Without an intercept
column the w_0 term is absent; ``intercept_`` is then exactly 0.0 when all centers are 0 and
otherwise the constant that the public centering implies (a through-the-origin model in the
transformed space is affine in raw units).

Estimators (Burkhardt et al. §5, Theorems 5.4 and 5.8; Wu et al. §4.1–§4.2, Algorithms 1 and 2):

* :class:`OLS` — ``lstsq(X̃, ỹ)`` (minimum norm).
* :class:`Ridge` — ``(X̃ᵀX̃ + λI)^{-1} X̃ᵀỹ`` with the *same* λ as the original problem: the
  sketch is normalised (``E‖S v‖² = ‖v‖²``), and there is NO de-biasing (the noise acts like
  extra regularisation).
* :class:`RMGMOLS` — Wu et al.: ``(X̃ᵀX̃/n + λI)^{-1} X̃ᵀỹ/n`` with ``n = release.n``.
* :class:`DGMOLS` — Wu et al.'s de-biased estimator:
  ``((X̃ᵀX̃ − v I)/n + λI)^{-1} X̃ᵀỹ/n`` with ``v = release.noise_variance_per_column``.
* :class:`LowRank` — the top-k right singular vectors of Ã.

On a ``gram`` release (noisy ZᵀZ, :mod:`ltm.analyst.gram`) the same classes solve the normal
equations directly: OLS ``Ĝxx⁻¹ĝxy``, ridge ``(Ĝxx + λI)⁻¹ĝxy`` (the noise is zero-mean, so
there is nothing to de-bias), RMGM/DGM with ``XᵀX/n`` read off Ĝ, low rank the top eigenvectors.

All solves are float64.  :func:`solve_ridge` is the shared solver for plain matrices (baselines).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ltm.analyst.gram import adassp_lambda, gram_blocks, solve_gram, top_eigenvectors
from ltm.analyst.release import ReleasedSketch

__all__ = [
    "ColumnTransform",
    "ColumnMeta",
    "solve_normal_equations",
    "solve_ridge",
    "map_to_raw",
    "to_scaled",
    "LinearPredictor",
    "linear_predictor",
    "intercept_only",
    "OLS",
    "Ridge",
    "RMGMOLS",
    "DGMOLS",
    "LowRank",
    "ESTIMATOR_NAMES",
    "default_ridge_lambda",
    "release_lambda",
    "make_estimator",
]


@dataclass(frozen=True)
class ColumnTransform:
    """What the raw-unit mapping needs: the column names, their public centres and scales
    (float64 (D,)), and the indices of the label and the intercept (None when absent).  A
    :class:`ReleasedSketch` has the same attributes and is accepted wherever this is
    (:data:`ColumnMeta`); :class:`ltm.analyst.mapback.RawColumns` is the job's raw columns."""

    columns: tuple[str, ...]
    centers: np.ndarray
    scales: np.ndarray
    label: int | None
    intercept: int | None

    @property
    def feature_indices(self) -> list[int]:
        """The indices of the regressor columns (every column but the label)."""
        return [j for j in range(len(self.columns)) if j != self.label]


#: What the raw-unit mapping reads: a release, or plain column metadata.
ColumnMeta = ColumnTransform | ReleasedSketch


# --------------------------------------------------------------------------------------------
# Solvers
# --------------------------------------------------------------------------------------------


def solve_normal_equations(
    H: np.ndarray, g: np.ndarray, *, assume_pd: bool = True
) -> tuple[np.ndarray, str]:
    """Solve ``H x = g`` for a symmetric (p, p) ``H`` and (p,) ``g`` in float64.

    With ``assume_pd`` the matrix is first checked by a Cholesky factorisation and then solved;
    if it is not (numerically) positive definite the solve falls back to ``lstsq`` (minimum-norm
    least squares of the system) and says so.  Without ``assume_pd`` (indefinite matrices such
    as DGM's de-biased Hessian) a general LU solve is used, falling back to ``lstsq`` if ``H``
    is singular.

    Returns:
        ``(x, solver)``: x of shape (p,), and which path ran: ``"cholesky"``, ``"lu"``,
        ``"lstsq (not positive definite)"`` or ``"lstsq (singular)"``.
    """
    H = np.asarray(H, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64).reshape(-1)
    if H.ndim != 2 or H.shape[0] != H.shape[1] or H.shape[0] != g.shape[0]:
        raise ValueError(f"incompatible shapes: H {H.shape}, g {g.shape}")
    H = (H + H.T) / 2.0
    if assume_pd:
        try:
            np.linalg.cholesky(H)
        except np.linalg.LinAlgError:
            return np.linalg.lstsq(H, g, rcond=None)[0], "lstsq (not positive definite)"
        return np.linalg.solve(H, g), "cholesky"
    try:
        return np.linalg.solve(H, g), "lu"
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(H, g, rcond=None)[0], "lstsq (singular)"


def _ridge_with_info(X: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, str]:
    X, y = _as_xy(X, y)
    _check_lam(lam)
    if lam == 0.0:
        return np.linalg.lstsq(X, y, rcond=None)[0], "lstsq"
    H = X.T @ X + lam * np.eye(X.shape[1])
    return solve_normal_equations(H, X.T @ y, assume_pd=True)


def solve_ridge(X: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """Ridge solution ``(XᵀX + λI)^{-1} Xᵀy`` on plain matrices.

    Args:
        X: (n, p) design; y: (n,) target; lam: λ ≥ 0.  λ = 0 is ordinary least squares, solved
            by ``lstsq`` on X itself (minimum-norm when X is rank deficient).

    Returns:
        float64 array of shape (p,).
    """
    return _ridge_with_info(X, y, lam)[0]


# --------------------------------------------------------------------------------------------
# Raw-unit mapping
# --------------------------------------------------------------------------------------------


def _feature_only(meta: ColumnMeta) -> list[int]:
    return [j for j in meta.feature_indices if j != meta.intercept]


def map_to_raw(coef_scaled: np.ndarray, meta: ColumnMeta) -> tuple[np.ndarray, float]:
    """Map coefficients over ``meta.feature_indices`` (transformed space) to raw units.

    Args:
        coef_scaled: (len(feature_indices),) solution in the transformed space, ordered as
            ``meta.feature_indices`` (features and intercept column).
        meta: the release (or anything with ``centers``, ``scales``, ``label``, ``intercept``,
            ``feature_indices``).

    Returns:
        ``(coef, intercept)``: coef of shape (number of feature columns,), in the order of the
        feature columns, and the raw intercept (see the module docstring for the formula).
    """
    if meta.label is None:
        raise ValueError("the release has no label column; there is no regression to map")
    w = np.asarray(coef_scaled, dtype=np.float64).reshape(-1)
    idx = list(meta.feature_indices)
    if w.shape[0] != len(idx):
        raise ValueError(f"coef_scaled has {w.shape[0]} entries, expected {len(idx)}")
    centers = np.asarray(meta.centers, dtype=np.float64)
    scales = np.asarray(meta.scales, dtype=np.float64)
    if np.any(scales == 0) or not np.all(np.isfinite(scales)):
        raise ValueError("every column scale must be finite and non-zero")
    pos = {j: p for p, j in enumerate(idx)}
    feats = _feature_only(meta)
    wf = w[[pos[j] for j in feats]]
    sy, cy = scales[meta.label], centers[meta.label]
    coef = sy * wf / scales[feats]
    inner = -float(np.sum(wf * centers[feats] / scales[feats]))
    if meta.intercept is not None:
        i0 = meta.intercept
        inner += float(w[pos[i0]] * (1.0 - centers[i0]) / scales[i0])
    return coef, float(cy + sy * inner)


def to_scaled(X_raw: np.ndarray, centers: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Apply the public column transform ``(x − center) / scale`` to raw columns.

    Args:
        X_raw: (n, q) raw values; centers, scales: (q,) for those same columns.

    Returns:
        float64 (n, q).  (It does not clip: clipping is the party's job before noising.)
    """
    X = np.asarray(X_raw, dtype=np.float64)
    return (X - np.asarray(centers, dtype=np.float64)) / np.asarray(scales, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Linear models
# --------------------------------------------------------------------------------------------


class LinearPredictor:
    """A fitted linear model with the transformed ↔ raw unit mapping.

    Attributes (after fitting):
        coef_scaled_: (len(feature_indices),) coefficients in the transformed space, ordered as
            ``release.feature_indices`` (features and the intercept column).
        coef_: (n_features,) raw-unit coefficients, one per feature column.
        intercept_: raw-unit intercept (see the module docstring).
        feature_names_in_: names of the feature columns, in ``coef_`` order.
        solver_: which linear-algebra path produced the solution.
    """

    coef_scaled_: np.ndarray
    coef_: np.ndarray
    intercept_: float
    feature_names_in_: tuple[str, ...]
    solver_: str

    def _set_from_release(self, w: np.ndarray, meta: ColumnMeta) -> None:
        self.coef_scaled_ = np.asarray(w, dtype=np.float64).reshape(-1)
        self.coef_, self.intercept_ = map_to_raw(self.coef_scaled_, meta)
        self.feature_names_in_ = tuple(meta.columns[j] for j in _feature_only(meta))

    def _set_plain(self, w: np.ndarray) -> None:
        self.coef_scaled_ = np.asarray(w, dtype=np.float64).reshape(-1)
        self.coef_ = self.coef_scaled_.copy()
        self.intercept_ = 0.0
        self.feature_names_in_ = tuple(f"x{j}" for j in range(self.coef_.shape[0]))

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_scaled_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() first")

    def predict(self, X_raw: np.ndarray) -> np.ndarray:
        """Predictions in raw label units.

        Args:
            X_raw: (n, n_features) raw feature values (no intercept column, no label).

        Returns:
            float64 (n,): ``X_raw @ coef_ + intercept_``.
        """
        self._check_fitted()
        X = np.asarray(X_raw, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.coef_.shape[0]:
            raise ValueError(f"X_raw must have shape (n, {self.coef_.shape[0]}), got {X.shape}")
        return X @ self.coef_ + self.intercept_

    def predict_scaled(self, Z: np.ndarray) -> np.ndarray:
        """Predictions in the transformed label units.

        Args:
            Z: (n, len(feature_indices)) transformed regressors, intercept column included
                (value ``1/s_0``), ordered as ``release.feature_indices``.

        Returns:
            float64 (n,): ``Z @ coef_scaled_``.
        """
        self._check_fitted()
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.coef_scaled_.shape[0]:
            raise ValueError(
                f"Z must have shape (n, {self.coef_scaled_.shape[0]}), got {Z.shape}"
            )
        return Z @ self.coef_scaled_


def linear_predictor(coef_scaled: np.ndarray, meta: ColumnMeta) -> LinearPredictor:
    """Wrap externally computed transformed-space coefficients (e.g. an SSP/AdaSSP baseline's)
    as a :class:`LinearPredictor` with the raw-unit mapping of ``meta``.

    Args:
        coef_scaled: (len(meta.feature_indices),) coefficients in the transformed space.
        meta: the release, or plain :class:`ColumnTransform` metadata.
    """
    model = LinearPredictor()
    model._set_from_release(coef_scaled, meta)
    model.solver_ = "external"
    return model


def intercept_only(meta: ColumnMeta) -> LinearPredictor:
    """The intercept-only model: w = 0 in the transformed space, so it predicts the label's public
    centre for every row — what an analyst releases instead of a regression the plan predicts to
    be worse than the mean (``solver_ = "intercept-only"``)."""
    model = linear_predictor(np.zeros(len(meta.feature_indices)), meta)
    model.solver_ = "intercept-only"
    return model


class _SketchRegressor(LinearPredictor):
    """Common ``fit`` / ``fit_matrix`` plumbing; subclasses implement ``_solve``."""

    def _solve(self, X: np.ndarray, y: np.ndarray, n: int, noise_variance: float) -> np.ndarray:
        raise NotImplementedError

    def _solve_gram(self, Gxx: np.ndarray, gxy: np.ndarray, n: int) -> np.ndarray:
        """Solve from released sufficient statistics XᵀX ≈ Gxx, Xᵀy ≈ gxy (a ``gram`` release)."""
        w, self.solver_ = solve_gram(Gxx, gxy, 0.0)
        return w

    def fit(self, release: ReleasedSketch) -> "_SketchRegressor":
        """Fit on a labelled release (uses ``release.design``, ``release.target``, ``n`` and
        ``noise_variance_per_column``; a ``gram`` release: its noisy XᵀX and Xᵀy), then map to
        raw units.  Returns self."""
        if release.label is None:
            raise ValueError("this release has no label column (a low-rank job); use LowRank")
        if release.kind == "gram":
            Gxx, gxy, _ = gram_blocks(release.gram, release.label)
            self._set_from_release(self._solve_gram(Gxx, gxy, int(release.n)), release)
            return self
        w = self._solve(release.design, release.target, int(release.n),
                        float(release.noise_variance_per_column))
        self._set_from_release(w, release)
        return self

    def fit_matrix(
        self,
        X: np.ndarray,
        y: np.ndarray,
        *,
        n: int | None = None,
        noise_variance: float = 0.0,
    ) -> "_SketchRegressor":
        """Fit on plain matrices with the same solver (baselines, tests).

        Args:
            X: (m, p) design (already in whatever units the caller wants the answer in).
            y: (m,) target.
            n: the number of underlying records for the 1/n-normalised estimators
                (RMGM, DGM); defaults to ``m``.
            noise_variance: per-column noise Gram diagonal (DGM only); default 0.

        No unit mapping is applied: ``coef_ = coef_scaled_`` and ``intercept_ = 0``.
        Returns self.
        """
        X, y = _as_xy(X, y)
        w = self._solve(X, y, X.shape[0] if n is None else int(n), float(noise_variance))
        self._set_plain(w)
        return self


class OLS(_SketchRegressor):
    """Ordinary least squares on the sketch: ``lstsq(X̃, ỹ)`` (minimum-norm if rank deficient)."""

    def _solve(self, X: np.ndarray, y: np.ndarray, n: int, noise_variance: float) -> np.ndarray:
        w, self.solver_ = _ridge_with_info(X, y, 0.0)
        return w

    def __repr__(self) -> str:
        return "OLS()"


class Ridge(_SketchRegressor):
    """Ridge on the sketch (Burkhardt et al. Theorem 5.8), optionally de-biased.

    ``debias=False`` (the paper's faithful analyst): ``x' = (X̃ᵀX̃ + λI)^{-1} X̃ᵀỹ`` with the SAME
    λ as the original problem ``‖Ax − b‖² + λ‖x‖²``; the release noise then acts as extra
    regularisation ``E[NᵀN] = v·I`` and shrinks the solution.

    ``debias=True``: ``x' = (X̃ᵀX̃ − v·I + λI)^{-1} X̃ᵀỹ`` with ``v = release.noise_variance_per_column``
    (known exactly from the public calibration and row loads, so this is post-processing and costs
    no privacy).  Eigenvalues of the de-biased Gram below the noise floor ``v_e(2√(m·p) + p)``
    are clamped to it (``eigen_floor_``), so small-n releases degrade gracefully instead of
    exploding; ``indefinite_`` records whether the raw de-biased Gram was indefinite.

    Args:
        lam: λ ≥ 0 (λ = 0 without de-biasing is :class:`OLS`).
        debias: subtract the expected noise Gram diagonal.
    """

    def __init__(self, lam: float, debias: bool = False) -> None:
        _check_lam(lam)
        self.lam = float(lam)
        self.debias = bool(debias)

    def _solve(self, X: np.ndarray, y: np.ndarray, n: int, noise_variance: float) -> np.ndarray:
        if not self.debias:
            w, self.solver_ = _ridge_with_info(X, y, self.lam)
            self.indefinite_ = False
            return w
        p, m = X.shape[1], X.shape[0]
        H = X.T @ X - noise_variance * np.eye(p)
        evals, evecs = np.linalg.eigh((H + H.T) / 2.0)
        self.min_eigenvalue_ = float(evals[0])
        # After subtracting E[NᵀN] = v·I the Gram still carries NᵀN − E[NᵀN], whose spectrum
        # reaches ≈ v_e·(2√(m·p) + p) (the Wishart edge; v_e = v/m per entry).  Eigenvalues below
        # that floor are noise, not signal: clamp them to it so the inverse cannot explode (the
        # small-eigenvalue problem of de-biased estimators), then add λ.
        floor = (noise_variance / max(m, 1)) * (2.0 * np.sqrt(m * p) + p)
        self.eigen_floor_ = float(floor)
        self.indefinite_ = bool(evals[0] <= 0.0)
        clamped = np.maximum(evals, floor) + self.lam
        w = evecs @ ((evecs.T @ (X.T @ y)) / clamped)
        self.solver_ = "eigh-clamped"
        return w

    def _solve_gram(self, Gxx: np.ndarray, gxy: np.ndarray, n: int) -> np.ndarray:
        w, self.solver_ = solve_gram(Gxx, gxy, self.lam)
        self.indefinite_ = bool(np.linalg.eigvalsh((Gxx + Gxx.T) / 2.0)[0] <= 0.0)
        return w

    def __repr__(self) -> str:
        return f"Ridge(lam={self.lam!r}, debias={self.debias})"


class _WuRegressor(_SketchRegressor):
    """Wu et al.'s estimators (RMGM-OLS, DGM-OLS): a λ normalised by n (paper 1e-5), and on a
    ``gram`` release, whose noise has zero mean, the same solve ``(Gxx/n + λI)⁻¹ gxy/n``.

    Args:
        lam: λ ≥ 0 (paper 1e-5).
    """

    def __init__(self, lam: float = 1e-5) -> None:
        _check_lam(lam)
        self.lam = float(lam)

    def _solve_gram(self, Gxx: np.ndarray, gxy: np.ndarray, n: int) -> np.ndarray:
        _check_n(n)  # nothing to de-bias on a gram release
        w, self.solver_ = solve_gram(Gxx, gxy, self.lam * n)  # (Gxx/n + λI)⁻¹ gxy/n
        return w

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lam={self.lam!r})"


class RMGMOLS(_WuRegressor):
    """Wu et al.'s RMGM-OLS training step: ``w = (X̃ᵀX̃/n + λI)^{-1} X̃ᵀỹ/n``, n = ``release.n``.

    The Hessian is normalised by 1/n (not by the number of sketch rows) before λ is added, as
    in the authors' code (Wu et al.'s Algorithm 2, §4.2).  No noise subtraction.

    Args:
        lam: λ ≥ 0 (paper 1e-5).
    """

    def _solve(self, X: np.ndarray, y: np.ndarray, n: int, noise_variance: float) -> np.ndarray:
        _check_n(n)
        H = (X.T @ X) / n + self.lam * np.eye(X.shape[1])
        w, self.solver_ = solve_normal_equations(H, (X.T @ y) / n, assume_pd=True)
        self.min_eigenvalue_ = float(np.linalg.eigvalsh((H + H.T) / 2.0)[0])
        return w


class DGMOLS(_WuRegressor):
    """Wu et al.'s de-biased DGM-OLS: ``w = ((X̃ᵀX̃ − v I)/n + λI)^{-1} X̃ᵀỹ/n``.

    ``v = release.noise_variance_per_column`` is ``E[NᵀN]_{cc}``, the expected noise Gram
    diagonal of the released matrix, and ``n = release.n``.  The subtraction applies to EVERY
    regressor column, including the intercept column: the constant column is noised like any
    other column by the randomizer, so its Gram diagonal carries the same ``+v`` bias.  The
    cross-moment X̃ᵀỹ needs no correction (label noise is independent of feature noise).

    The de-biased Hessian is a difference of two large quantities and can be indefinite or
    near-singular ("the small eigenvalue problem", Wu et al. §4.1), so it is
    solved by LU (not Cholesky) and exposed for inspection.

    Attributes (after fitting): ``min_eigenvalue_`` (smallest signed eigenvalue of the
    de-biased Hessian), ``min_abs_eigenvalue_`` (the paper's Fig. 3 quantity), and
    ``indefinite_`` (True when ``min_eigenvalue_ <= 0``: the estimate is then unreliable).

    Args:
        lam: λ ≥ 0 (paper 1e-5).
    """

    def _solve(self, X: np.ndarray, y: np.ndarray, n: int, noise_variance: float) -> np.ndarray:
        _check_n(n)
        if noise_variance < 0 or not np.isfinite(noise_variance):
            raise ValueError(f"noise variance must be finite and >= 0, got {noise_variance}")
        p = X.shape[1]
        H = (X.T @ X - noise_variance * np.eye(p)) / n + self.lam * np.eye(p)
        H = (H + H.T) / 2.0
        eig = np.linalg.eigvalsh(H)
        self.min_eigenvalue_ = float(eig[0])
        self.min_abs_eigenvalue_ = float(np.min(np.abs(eig)))
        self.indefinite_ = bool(eig[0] <= 0.0)
        w, self.solver_ = solve_normal_equations(H, (X.T @ y) / n, assume_pd=False)
        return w


class LowRank:
    """Low-rank approximation from the sketch: the top-``rank`` right singular vectors of Ã.

    Fits on ALL D columns of the release (Burkhardt et al. Theorems 5.4 and 5.7: plain SVD of Ã, no
    de-noising).  Signs are fixed deterministically (the largest-|·| entry of each component is
    positive).

    Attributes (after fitting):
        components_: (D, rank) orthonormal columns.
        singular_values_: (rank,) the corresponding singular values of Ã, descending.

    Args:
        rank: k ≥ 1; fitting needs k ≤ min(m, D).
    """

    def __init__(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
        self.rank = int(rank)

    def fit(self, release: ReleasedSketch) -> "LowRank":
        """Fit on ``release.matrix`` (m, D), or a ``gram`` release's noisy ZᵀZ (its top
        eigenvectors; ``singular_values_`` are then √max(eigenvalue, 0)).  Returns self."""
        if release.kind == "gram":
            self.components_, evals = top_eigenvectors(release.gram, self.rank)
            self.singular_values_ = np.sqrt(np.maximum(evals, 0.0))
            return self
        return self.fit_matrix(release.matrix)

    def fit_matrix(self, M: np.ndarray) -> "LowRank":
        """Fit on a plain (m, D) matrix.  Returns self."""
        M = np.asarray(M, dtype=np.float64)
        if M.ndim != 2:
            raise ValueError(f"M must be 2-D, got shape {M.shape}")
        m, D = M.shape
        if self.rank > min(m, D):
            raise ValueError(f"rank {self.rank} exceeds min(m={m}, D={D})")
        _, s, vt = np.linalg.svd(M, full_matrices=False)
        V = vt[: self.rank].T
        pivot = np.argmax(np.abs(V), axis=0)
        signs = np.sign(V[pivot, np.arange(self.rank)])
        signs[signs == 0] = 1.0
        self.components_ = V * signs
        self.singular_values_ = s[: self.rank]
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "components_"):
            raise RuntimeError("LowRank is not fitted; call fit() first")

    def transform(self, Z: np.ndarray) -> np.ndarray:
        """Project transformed rows onto the components: (n, D) → (n, rank)."""
        self._check_fitted()
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.components_.shape[0]:
            raise ValueError(f"Z must have shape (n, {self.components_.shape[0]}), got {Z.shape}")
        return Z @ self.components_

    def inverse_transform(self, T: np.ndarray) -> np.ndarray:
        """Map (n, rank) coordinates back to the D-dimensional transformed space."""
        self._check_fitted()
        return np.asarray(T, dtype=np.float64) @ self.components_.T

    def __repr__(self) -> str:
        return f"LowRank(rank={self.rank})"


ESTIMATOR_NAMES: tuple[str, ...] = ("ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols")


def default_ridge_lambda(noise_variance_per_entry: float, m: int) -> float:
    """Default ridge λ for the de-biased ridge on a release (documented rule): λ = v·√m.

    After de-biasing, the noise Gram's entries fluctuate around their mean with standard
    deviation ≈ v·√m (v: noise variance of one scaled release entry, m: sketch rows).  Adding
    one such standard deviation to the diagonal is a margin against an indefinite Hessian that
    biases the solution only by a relative ≈ v·√m·D/n, which vanishes as n grows.
    """
    return float(noise_variance_per_entry * np.sqrt(m))


def release_lambda(release: ReleasedSketch) -> tuple[float, str]:
    """The default ridge λ for a release, and the rule that gave it.

    A sketch: :func:`default_ridge_lambda` (v·√m, v the noise variance per scaled entry).  A
    ``gram`` release: the AdaSSP-style :func:`ltm.analyst.gram.adassp_lambda` on its noisy XᵀX, with the
    per-entry noise variances the release states (:attr:`ReleasedSketch.gram_noise_variance`).
    """
    if release.kind == "gram":
        Gxx, _, _ = gram_blocks(release.gram, release.label)
        Vxx, _, _ = gram_blocks(release.gram_noise_variance, release.label)  # the released noise's own profile
        return (adassp_lambda(Gxx, Vxx),
                "adassp_lambda: max(0, √(2pv) − λ_min(noisy XᵀX)), √(2pv) the noise's spectral edge, "
                "v the Wigner variance of the released noise (analyst/gram.py)")
    m = release.matrix.shape[0]
    return (default_ridge_lambda(release.noise_variance_per_column / m, m),
            "default_ridge_lambda: v·√m (v: noise variance per scaled entry)")


def make_estimator(
    model: str, *, lam: float | None = None, rank: int | None = None, debias: bool = False
) -> Any:
    """Build an estimator by name.

    Args:
        model: one of ``ESTIMATOR_NAMES``: "ols", "ridge" (needs ``lam``), "lowrank" (needs
            ``rank``), "rmgm_ols", "dgm_ols" (``lam`` defaults to the paper's 1e-5).
        lam: λ for the ridge-type estimators (ignored by "ols" and "lowrank").
        rank: k for "lowrank" (ignored otherwise).
        debias: for "ridge", subtract the release's known noise Gram diagonal.

    Raises:
        ValueError: unknown name (the message lists the valid ones) or a missing parameter.
    """
    name = model.strip().lower() if isinstance(model, str) else model
    if name == "ols":
        return OLS()
    if name == "ridge":
        if lam is None:
            raise ValueError("model 'ridge' needs lam")
        return Ridge(lam, debias=debias)
    if name == "lowrank":
        if rank is None:
            raise ValueError("model 'lowrank' needs rank")
        return LowRank(rank)
    if name == "rmgm_ols":
        return RMGMOLS() if lam is None else RMGMOLS(lam)
    if name == "dgm_ols":
        return DGMOLS() if lam is None else DGMOLS(lam)
    raise ValueError(f"unknown model {model!r}; valid models are: {', '.join(ESTIMATOR_NAMES)}")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _as_xy(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (m, p), got shape {X.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y has {y.shape[0]} entries, X has {X.shape[0]} rows")
    return X, y


def _check_lam(lam: float) -> None:
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")


def _check_n(n: int) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")


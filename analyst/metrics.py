"""Utility metrics of the papers: ψ (low-rank excess risk), φ (ridge objective ratio), MSE, R².

All metrics are evaluated on the *exact* data (the original, unsketched, noise-free matrix ``A``
in the same transformed space the estimators fit in), never on the release.  Everything is
computed in float64.

* ``ψ = (‖A − A X Xᵀ‖_F² − ‖A − A X_opt X_optᵀ‖_F²) / n`` (Burkhardt et al. §6.2), with
  ``X_opt`` the top-k right singular vectors of ``A``.  For an orthonormal ``X``,
  ``‖A − A X Xᵀ‖_F² = ‖A‖_F² − ‖A X‖_F²``, so ``ψ = (‖A X_opt‖_F² − ‖A X‖_F²) / n
  = (Σ top-k eigenvalues of AᵀA − tr(Xᵀ AᵀA X)) / n``; the ``‖A‖_F²`` terms cancel exactly and
  only the d × d Gram matrix ``AᵀA`` is needed, which :func:`gram_matrix` accumulates over row
  chunks (so ψ streams for large n).
* ``φ = (‖A x − b‖² + λ‖x‖²) / (‖A x_opt − b‖² + λ‖x_opt‖²)`` (the same §6.2), with
  ``x_opt`` the exact ridge optimum on the true ``(A, b, λ)`` — never the data-generating vector.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "gram_matrix",
    "ridge_objective",
    "ridge_optimum",
    "phi",
    "psi",
    "psi_from_gram",
    "mse",
    "r2",
]

_ORTHONORMAL_TOL = 1e-6


def gram_matrix(A: np.ndarray, chunk_rows: int = 65536) -> np.ndarray:
    """``AᵀA`` in float64, accumulated over row chunks.

    Args:
        A: array of shape (n, d) (any real dtype; each chunk is upcast to float64).
        chunk_rows: rows per chunk; bounds the float64 temporary at ``chunk_rows × d``.

    Returns:
        float64 array of shape (d, d), symmetric.
    """
    A = np.asarray(A)
    if A.ndim != 2:
        raise ValueError(f"A must be 2-D (n, d), got shape {A.shape}")
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1")
    n, d = A.shape
    if A.dtype == np.float64 and n <= chunk_rows:
        G = A.T @ A
    else:
        G = np.zeros((d, d), dtype=np.float64)
        for start in range(0, n, chunk_rows):  # loop over chunks, not rows
            block = np.asarray(A[start:start + chunk_rows], dtype=np.float64)
            G += block.T @ block
    return (G + G.T) / 2.0


def ridge_objective(A: np.ndarray, b: np.ndarray, x: np.ndarray, lam: float) -> float:
    """The ridge objective ``‖A x − b‖² + λ‖x‖²`` in float64.

    Args:
        A: (n, d) design matrix.
        b: (n,) target.
        x: (d,) coefficients.
        lam: λ ≥ 0.

    Returns:
        The objective as a Python float.
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    _check_ridge_shapes(A, b, x)
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    r = A @ x - b
    return float(r @ r + lam * (x @ x))


def ridge_optimum(A: np.ndarray, b: np.ndarray, lam: float) -> np.ndarray:
    """The exact minimiser of ``‖A x − b‖² + λ‖x‖²``.

    For λ > 0 it solves ``(AᵀA + λI) x = Aᵀb`` (Cholesky-checked; the matrix is PD).  For
    λ = 0 it is the minimum-norm least-squares solution ``lstsq(A, b)``.

    Args:
        A: (n, d); b: (n,); lam: λ ≥ 0.

    Returns:
        float64 array of shape (d,).
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if A.ndim != 2 or b.shape[0] != A.shape[0]:
        raise ValueError(f"shapes do not match: A {A.shape}, b {b.shape}")
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    if lam == 0:
        return np.linalg.lstsq(A, b, rcond=None)[0]
    d = A.shape[1]
    H = gram_matrix(A) + lam * np.eye(d)
    g = A.T @ b
    np.linalg.cholesky(H)  # AᵀA + λI with λ > 0 is PD; raises only on non-finite input
    return np.linalg.solve(H, g)


def phi(
    A: np.ndarray,
    b: np.ndarray,
    x: np.ndarray,
    lam: float,
    *,
    x_opt: np.ndarray | None = None,
) -> float:
    """Ridge approximation factor ``φ = objective(x) / objective(x_opt)`` (≥ 1).

    Args:
        A: (n, d) exact design (transformed space).
        b: (n,) exact target.
        x: (d,) the mechanism's coefficients (same space).
        lam: λ ≥ 0, the same λ the mechanism used.
        x_opt: optional precomputed :func:`ridge_optimum` ``(A, b, lam)`` (shape (d,)), to avoid
            re-solving when many mechanisms are scored on the same data.

    Returns:
        φ as a float.  ``inf`` if the optimum objective is 0 and ``x`` is not optimal, 1.0 if both
        are 0.
    """
    if x_opt is None:
        x_opt = ridge_optimum(A, b, lam)
    num = ridge_objective(A, b, x, lam)
    den = ridge_objective(A, b, x_opt, lam)
    if den == 0.0:
        return 1.0 if num == 0.0 else float("inf")
    return num / den


def psi_from_gram(gram: np.ndarray, X: np.ndarray, n: int) -> float:
    """ψ from the Gram matrix ``AᵀA`` (see :func:`psi`).

    Args:
        gram: (d, d) symmetric ``AᵀA`` (float64).
        X: (d, k) with orthonormal columns (the mechanism's projection), 1 ≤ k ≤ d.
        n: number of rows of ``A``.

    Returns:
        ``(Σ_{top k} eig(AᵀA) − tr(Xᵀ AᵀA X)) / n`` as a float; ≥ 0 up to rounding.
    """
    G = np.asarray(gram, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"gram must be square, got shape {G.shape}")
    d = G.shape[0]
    if X.ndim != 2 or X.shape[0] != d:
        raise ValueError(f"X must have shape (d={d}, k), got {X.shape}")
    k = X.shape[1]
    if not 1 <= k <= d:
        raise ValueError(f"rank k={k} must be in [1, d={d}]")
    if n < 1:
        raise ValueError("n must be >= 1")
    if not np.allclose(X.T @ X, np.eye(k), atol=_ORTHONORMAL_TOL, rtol=0.0):
        raise ValueError("X must have orthonormal columns (XᵀX = I)")
    G = (G + G.T) / 2.0
    top = np.linalg.eigvalsh(G)[d - k:]  # ascending order: the k largest
    captured_opt = float(np.sum(top))  # ‖A X_opt‖_F²
    captured = float(np.einsum("ij,ij->", X, G @ X))  # tr(Xᵀ G X) = ‖A X‖_F²
    return (captured_opt - captured) / n


def psi(A: np.ndarray, X: np.ndarray, *, chunk_rows: int = 65536) -> float:
    """Low-rank excess risk ``ψ = (‖A − A X Xᵀ‖_F² − ‖A − A X_opt X_optᵀ‖_F²) / n``.

    Computed as ``(‖A X_opt‖_F² − ‖A X‖_F²) / n`` from the float64 Gram matrix ``AᵀA``
    (streamed over ``chunk_rows`` rows), which equals the definition for orthonormal X because
    ``‖A − A X Xᵀ‖_F² = ‖A‖_F² − ‖A X‖_F²``.

    Args:
        A: (n, d) exact data matrix.
        X: (d, k) orthonormal columns (e.g. ``LowRank.components_``).
        chunk_rows: rows per Gram chunk.

    Returns:
        ψ as a float (≥ 0 up to rounding; 0 at ``X = X_opt``).
    """
    A = np.asarray(A)
    return psi_from_gram(gram_matrix(A, chunk_rows=chunk_rows), X, A.shape[0])


def mse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean squared error of (n,) predictions against (n,) targets, in float64."""
    y_true, y_pred = _pair(y_true, y_pred)
    r = y_true - y_pred
    return float(r @ r / r.shape[0])


def r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Coefficient of determination ``1 − SS_res / SS_tot`` for (n,) vectors.

    If ``y_true`` is constant (SS_tot = 0) it returns 1.0 for a perfect prediction and 0.0
    otherwise (scikit-learn's convention).
    """
    y_true, y_pred = _pair(y_true, y_pred)
    r = y_true - y_pred
    ss_res = float(r @ r)
    c = y_true - y_true.mean()
    ss_tot = float(c @ c)
    if ss_tot == 0.0:
        return 1.0 if ss_res == 0.0 else 0.0
    return 1.0 - ss_res / ss_tot


def _pair(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(y_true, dtype=np.float64).reshape(-1)
    p = np.asarray(y_pred, dtype=np.float64).reshape(-1)
    if t.shape != p.shape:
        raise ValueError(f"y_true has {t.shape[0]} values, y_pred {p.shape[0]}")
    if t.shape[0] == 0:
        raise ValueError("empty input")
    return t, p


def _check_ridge_shapes(A: np.ndarray, b: np.ndarray, x: np.ndarray) -> None:
    if A.ndim != 2:
        raise ValueError(f"A must be 2-D (n, d), got shape {A.shape}")
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} entries, A has {A.shape[0]} rows")
    if x.shape[0] != A.shape[1]:
        raise ValueError(f"x has {x.shape[0]} entries, A has {A.shape[1]} columns")

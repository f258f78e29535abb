"""Clipping client vectors to the job's norm bound: the one implementation every actor uses."""
from __future__ import annotations

import numpy as np


def clip_rows(vectors: np.ndarray, bound: float, norm: str = "l2") -> np.ndarray:
    """Scale every row whose ℓ2 (or ℓ1) norm exceeds ``bound`` down to norm ``bound``.

    Args:
        vectors: float64 (rows, cols).
        bound: the clip bound C > 0.
        norm: ``"l2"`` (Gaussian mechanism) or ``"l1"`` (Laplace).
    Returns:
        float64 (rows, cols); rows already inside the ball are unchanged.
    """
    if bound <= 0:
        raise ValueError(f"clip bound must be positive (got {bound})")
    v = np.asarray(vectors, dtype=np.float64)
    if norm == "l2":
        norms = np.sqrt(np.einsum("ij,ij->i", v, v))
    elif norm == "l1":
        norms = np.abs(v).sum(axis=1)
    else:
        raise ValueError(f"unknown clip norm {norm!r}; choose 'l2' or 'l1'")
    factor = np.minimum(1.0, bound / np.maximum(norms, np.finfo(np.float64).tiny))
    return v * factor[:, None]

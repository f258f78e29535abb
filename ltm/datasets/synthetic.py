"""Synthetic tables: the generators of Burkhardt et al. §6.2 and a non-linear task for random features.

Every generator draws from a :class:`ltm.randomness.Randomness` child stream, so a seed gives the
same table on any machine.
"""
from __future__ import annotations

import numpy as np

from ltm.datasets.tables import DataError, Table
from ltm.randomness import Randomness


def synthetic_ridge(n: int, d: int, randomness: Randomness, *, label_noise: float = 0.0) -> Table:
    """Burkhardt et al. §6.2 synthetic ridge data: A ~ N(0,1)^{n×d}, x_gen ~ N(0,1)^d,
    b = A·x_gen (+ N(0, label_noise²); the paper has none, so the non-private R² is 1 up to clipping)."""
    stream = randomness.child("synthetic-ridge").stream()
    A = stream.normal((n, d))
    x_gen = stream.normal(d)
    b = A @ x_gen + stream.normal(n, scale=label_noise)
    cols = {f"x{j}": A[:, j].copy() for j in range(d)}
    cols["y"] = b
    return Table(cols, "y", f"synthetic ridge (n={n}, d={d}, label noise {label_noise:g})")


def synthetic_nonlinear(n: int, d: int, randomness: Randomness, *, label_noise: float = 0.1) -> Table:
    """A non-linear regression task for random features: x ~ N(0, I_d) and
    y = Σ_j exp(−|x_j|) + x_0·x_1 + N(0, label_noise²) (Liao et al.'s test function 2 plus one
    interaction).  Every term is uncorrelated with x, so a linear model explains nothing."""
    if d < 2:
        raise DataError(f"the nonlinear generator needs d ≥ 2 (got {d})")
    stream = randomness.child("synthetic-nonlinear").stream()
    X = stream.normal((n, d))
    y = np.exp(-np.abs(X)).sum(axis=1) + X[:, 0] * X[:, 1] + stream.normal(n, scale=label_noise)
    cols = {f"x{j}": X[:, j].copy() for j in range(d)}
    cols["y"] = y
    return Table(cols, "y", f"synthetic nonlinear (n={n}, d={d}, label noise {label_noise:g})")


def synthetic_lowrank(n: int, d: int, rank: int, randomness: Randomness) -> Table:
    """Burkhardt et al. §6.2 synthetic low-rank data: A = U' Σ V'ᵀ with the SVD of a Gaussian A',
    the first ``rank`` singular values √(n/rank) and the rest 1/n (a large spectral gap)."""
    if not 1 <= rank < d:
        raise DataError(f"rank must satisfy 1 ≤ rank < d (got rank={rank}, d={d})")
    stream = randomness.child("synthetic-lowrank").stream()
    Ap = stream.normal((n, d))
    # Thin SVD through the d×d Gram matrix: streams for large n, float64 throughout.
    evals, V = np.linalg.eigh(Ap.T @ Ap)
    order = np.argsort(evals)[::-1]
    evals, V = evals[order], V[:, order]
    U = Ap @ V / np.sqrt(evals)
    sigma = np.full(d, 1.0 / n)
    sigma[:rank] = np.sqrt(n / rank)
    A = (U * sigma) @ V.T
    return Table({f"x{j}": A[:, j].copy() for j in range(d)}, None,
                 f"synthetic low-rank (n={n}, d={d}, rank={rank})")

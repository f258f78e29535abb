"""Per-column histograms on public bin grids: the client-side lifts of the bounds pre-job.

Two lifted release kinds (registered in :data:`ltm.lifts.LIFTS`) release, for every column of
the job, the noisy count of clients whose value falls in each bin of a public grid, as the sum
over clients of one-hot vectors, through the same shares, servers and release gate as any job
(docs/bounds.md).  The grid is applied to the column's transformed value
``z = (x − center) / scale`` (the job spec's public column transform):

* ``hist_log``: a signed, coarse log-scale grid, for when nothing is known: edges
  ``±10^(k/2)`` for k = −4 … 12 (|z| from 0.01 to 10⁶, two bins per decade) and 0, plus two
  overflow bins: :data:`LOG_EDGES`.  Used with center 0, scale 1 (raw values).
* ``hist_lin``: unit bins ``[0, 1), [1, 2), …, [B − 1, B)`` with B = :data:`LIN_BINS`, plus the
  two overflow bins.  Used with center = lo and scale = (hi − lo)/B to refine a range [lo, hi]
  found by a ``hist_log`` round.

Privacy.  Each client's lifted vector is one one-hot block per column, whatever z is, so
replacing one client changes at most two entries per column by 1: the ℓ2 sensitivity is
``√(2·D)`` and the ℓ1 sensitivity ``2·D`` for D columns (:mod:`ltm.dp.sensitivity`) — independent of the clip bound, and
every entry is in {0, 1}.  (The party still clips z to the job's clip bound before the lift, so a
histogram job sets a clip bound far above any plausible ‖z‖, :data:`HIST_CLIP_BOUND`; a clipped
row would merely land in other bins, and the guarantee does not depend on it.)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ltm.dp.sensitivity import histogram_sensitivity

#: The clip bound of a histogram job: clipping must not move values across bins.
HIST_CLIP_BOUND = 1e12
_MAGNITUDES = np.array([10.0 ** (k / 2.0) for k in range(-4, 13)])
#: hist_log bin edges (ascending); bins are (-inf, e0), [e0, e1), …, [e_last, inf).
LOG_EDGES = np.concatenate([-_MAGNITUDES[::-1], [0.0], _MAGNITUDES])
#: hist_lin: unit bins on [0, LIN_BINS) plus the two overflow bins.
LIN_BINS = 32
LIN_EDGES = np.arange(LIN_BINS + 1, dtype=np.float64)
HISTOGRAM_KINDS = ("hist_log", "hist_lin")


def edges_of(kind: str) -> np.ndarray:
    """The ascending bin edges of a histogram kind (in z units); len(edges) + 1 bins."""
    if kind == "hist_log":
        return LOG_EDGES
    if kind == "hist_lin":
        return LIN_EDGES
    raise ValueError(f"unknown histogram kind {kind!r}; choose one of {HISTOGRAM_KINDS}")


def bins_of(kind: str) -> int:
    return len(edges_of(kind)) + 1


def one_hot(kind: str, z: np.ndarray) -> np.ndarray:
    """(rows, D) values → (rows, D·bins) one-hot blocks, column by column (vectorised)."""
    z = np.asarray(z, dtype=np.float64)
    rows, d = z.shape
    nb = bins_of(kind)
    idx = np.searchsorted(edges_of(kind), z, side="right")  # bin b holds edges[b-1] ≤ z < edges[b]
    out = np.zeros((rows, d * nb), dtype=np.float64)
    out[np.arange(rows)[:, None], np.arange(d)[None, :] * nb + idx] = 1.0
    return out


def sensitivity(spec: Any) -> float:
    """√(2D) (Gaussian) or 2D (Laplace) for the job's D columns: :func:`ltm.dp.sensitivity.histogram_sensitivity`."""
    return histogram_sensitivity(spec.privacy.mechanism, spec.width)


def bin_names(kind: str, columns: tuple[str, ...]) -> tuple[str, ...]:
    e = edges_of(kind)
    lows = np.concatenate([[-np.inf], e])
    highs = np.concatenate([e, [np.inf]])
    return tuple(f"{c}[{lo:g},{hi:g})" for c in columns for lo, hi in zip(lows, highs))


def counts_matrix(kind: str, total: np.ndarray, d: int) -> np.ndarray:
    """The decoded noisy sum (D·bins,) as a (D, bins) matrix of noisy counts."""
    return np.asarray(total, dtype=np.float64).reshape(d, bins_of(kind))


# ---------------------------------------------------------------------------- from counts to bounds
def _mass_and_bins(kind: str, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts with negative noise clipped to 0, and each bin's (lo, hi) in z units; the open
    overflow bins get the width of their neighbour so every estimate stays finite."""
    c = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    if c.sum() <= 0:
        raise ValueError("the histogram has no positive count: too few clients for its noise")
    e = edges_of(kind)
    lo = np.concatenate([[e[0] - (e[1] - e[0])], e])
    hi = np.concatenate([e, [e[-1] + (e[-1] - e[-2])]])
    return c, lo, hi


def quantiles(kind: str, counts: np.ndarray, probs: np.ndarray, center: float = 0.0, scale: float = 1.0,
              ) -> np.ndarray:
    """Quantiles of one column, in raw units, from its noisy bin counts.

    Negative noisy counts are set to 0 (post-processing); within a bin the CDF is interpolated
    linearly in z.  The open overflow bins are given the width of their neighbour, so an estimate
    stays finite.  Raises ValueError when the counts carry no mass.
    """
    c, lo, hi = _mass_and_bins(kind, counts)
    cdf = np.concatenate([[0.0], np.cumsum(c)]) / c.sum()
    out = []
    for p in np.atleast_1d(probs):
        b = int(np.clip(np.searchsorted(cdf, p, side="left") - 1, 0, len(c) - 1))
        frac = 0.0 if c[b] == 0 else (p - cdf[b]) / (cdf[b + 1] - cdf[b])
        z = lo[b] + float(np.clip(frac, 0.0, 1.0)) * (hi[b] - lo[b])
        out.append(center + scale * z)
    return np.array(out)


def robust_centre_spread(kind: str, counts: np.ndarray, center: float = 0.0, scale: float = 1.0,
                         ) -> tuple[float, float, float, float]:
    """``(median, spread, q_lo, q_hi)`` of one column from its noisy histogram.

    spread: the largest of half the 16–84 % interquantile range (a standard deviation for a
    normal column), a quarter of the 2.5–97.5 % range (zero-inflated columns whose middle is a
    single value), and a tiny floor; [q_lo, q_hi] = the 0.5 % and 99.5 % quantiles.
    """
    q = quantiles(kind, counts, np.array([0.005, 0.025, 0.16, 0.5, 0.84, 0.975, 0.995]), center, scale)
    spread = max((q[4] - q[2]) / 2.0, (q[5] - q[1]) / 4.0, 1e-9 * max(abs(q[3]), 1.0))
    return float(q[3]), float(spread), float(q[0]), float(q[6])


def mean_and_std(kind: str, counts: np.ndarray, center: float = 0.0, scale: float = 1.0) -> tuple[float, float]:
    """Mean and standard deviation of one column, in raw units, from its noisy bin counts.

    Each client counts at its bin's midpoint (negative noisy counts set to 0; an open overflow bin
    gets the width of its neighbour).  With a fine grid over the column's range (``hist_lin``)
    this is close to the column's mean and standard deviation.
    """
    c, lo, hi = _mass_and_bins(kind, counts)
    mid = center + scale * (lo + hi) / 2.0
    mean = float((c * mid).sum() / c.sum())
    var = float((c * (mid - mean) ** 2).sum() / c.sum())
    return mean, math.sqrt(var)


def denoise(counts: np.ndarray, noise_sd: float, k: float = 4.5) -> np.ndarray:
    """Noisy counts with every bin below ``k`` noise standard deviations set to 0 (post-processing).

    Most bins of a coarse grid are empty; their noise alone would otherwise put mass far from the
    data (and drag a mean or an extreme quantile with it).  At k = 4.5 an empty bin survives with
    probability ≈ 3.4·10⁻⁶ (Gaussian noise; ≈ 2.4·10⁻⁴ for the 70 bins of two columns); the price
    is that a bin holding fewer than ≈ k·σ clients is dropped too (σ ≈ 35 on the bundled data).
    """
    c = np.asarray(counts, dtype=np.float64)
    return np.where(c >= k * noise_sd, c, 0.0)

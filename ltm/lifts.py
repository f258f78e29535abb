"""Client-side lifts for the "sum over clients" release kinds (docs/architecture.md §3, issue #11).

A *lifted* release kind replaces the sketch S by the public map "sum over clients" — a degenerate
sketch with one row in which every client has the entry +1 (``Sketch(kind="sum")``) — and has each
client upload a *lifted* vector ``u = lift(z)`` of its clipped client vector z instead of z itself.
Everything else is the sketch pipeline unchanged, because the job spec says which kind it is:
the party adds its share of the distributed noise to u, encodes and shares it; each server adds
up the shares of the agreed participant set (its result share is 1 × W); the single release row
has load = number of participants, so the release gate, t′ and the corrupt-party deduction,
the minimum honest load L, seed-compressed shares, headroom checks and durability all apply as
for a sketch with m = 1, s = 1.  The analyst decodes the noisy ``Σ_clients lift(z)``.

A lift is a :class:`Lift` of pure functions of the public job spec.  Adding one is local: write
its functions and add it to :data:`LIFTS` (its name becomes a valid ``sketch.kind``).  What a lift
must state, and what the rest of the system relies on:

* ``width(spec)`` W: the number of values a client uploads;
* ``apply(spec, z)``: clipped client vectors (rows, D) → lifted (rows, W), float64, vectorised;
* ``sensitivity(spec)``: a bound on ``‖lift(z) − lift(z')‖`` over clipped z, z' — ℓ2 for the
  Gaussian mechanism, ℓ1 for Laplace (replace-one neighbours) — the noise is calibrated for it;
* ``max_abs_entry(spec)``: a bound on ``|lift(z)_i|`` (the ring headroom check);
* ``names(spec)``: a label for each of the W values (reports);
* ``unlift(spec, total)``: the analyst's view of the decoded sum (W,) (the gram lift returns the
  symmetric D × D matrix).

Lifts are defined for the ``rows`` partition only: in the ``columns`` partition no party holds a
whole client vector, so products across parties' columns are not local.  There a ``gram`` job is
the replicated release instead (:mod:`ltm.replicated`: three servers compute the products from
replicated shares, under an honest-majority assumption the job must state).

The ``gram`` lift.  For z ∈ R^D it uploads the upper triangle of z zᵀ, row by row
(``numpy.triu_indices(D)`` order), with the off-diagonal entries multiplied by √2:

    u(z) = ( z_i z_j · w_ij )_{i ≤ j},   w_ii = 1,  w_ij = √2 (i < j).

This scaling makes u an isometry from symmetric matrices with the Frobenius norm to R^{D(D+1)/2}:
``‖u(z)‖₂ = ‖z zᵀ‖_F = ‖z‖₂²``.  Replace-one sensitivity (Gaussian, ‖z‖₂, ‖z'‖₂ ≤ C):

    ‖u(z) − u(z')‖₂² = ‖z zᵀ − z' z'ᵀ‖_F² = tr((z zᵀ − z' z'ᵀ)²) = ‖z‖⁴ + ‖z'‖⁴ − 2 (zᵀz')²
                     ≤ 2 C⁴,

so Δ₂ = √2 · C² (:func:`ltm.dp.sensitivity.gram_l2`; attained by orthogonal z, z' of norm C; for D = 1 the bound is C², and √2·C² is
kept as a safe upper bound).  Without the √2 scaling the same bound holds (the unscaled triangle
has a smaller norm), but the released noise would then be twice as large, relative to the
signal, on the off-diagonal entries.  The analyst divides the off-diagonal entries by √2, so the
noise on an off-diagonal Gram entry has variance σ²/2 and on a diagonal entry σ².
Laplace (ℓ1 clip ‖z‖₁ ≤ C₁): ``‖u(z)‖₁ = Σ_i z_i² + √2 Σ_{i<j} |z_i z_j|
= ‖z‖₂² + (‖z‖₁² − ‖z‖₂²)/√2 ≤ ‖z‖₁²``, so Δ₁ ≤ ‖u(z)‖₁ + ‖u(z')‖₁ ≤ 2 C₁²
(:func:`ltm.dp.sensitivity.gram_l1`).
Every entry satisfies ``|u_i| ≤ C²`` (diagonal z_i² ≤ ‖z‖²; off-diagonal √2|z_i z_j| ≤ ‖z‖²/√2).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from ltm import histograms as h
from ltm.dp.sensitivity import gram_sensitivity

__all__ = ["Lift", "LIFTS", "LIFTED_KINDS", "get_lift", "gram_width", "gram_indices", "gram_from_vector"]

_SQRT2 = math.sqrt(2.0)


@dataclass(frozen=True)
class Lift:
    """A client-side lift of a "sum over clients" release kind (see the module docstring).

    Every function takes the (public) job spec first; ``spec`` is a :class:`ltm.jobspec.JobSpec`
    (typed ``Any`` here because the job spec module imports this one).
    """

    name: str
    width: Callable[[Any], int]
    apply: Callable[[Any, np.ndarray], np.ndarray]
    sensitivity: Callable[[Any], float]
    max_abs_entry: Callable[[Any], float]
    names: Callable[[Any], tuple[str, ...]]
    unlift: Callable[[Any, np.ndarray], np.ndarray]
    partitions: tuple[str, ...] = ("rows",)
    mechanisms: tuple[str, ...] = ("gaussian", "laplace")


# -------------------------------------------------------------------- the gram lift
def gram_width(d: int) -> int:
    """D(D+1)/2: the values of the upper triangle of a D × D symmetric matrix."""
    return d * (d + 1) // 2


def gram_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each uploaded gram value (``numpy.triu_indices(d)`` order)."""
    return np.triu_indices(d)


def _gram_weights(d: int) -> np.ndarray:
    i, j = gram_indices(d)
    return np.where(i == j, 1.0, _SQRT2)


def _gram_apply(spec: Any, z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    rows, d = z.shape
    # Row i of the triangle is z_i · z[i:], written in place (3.5× faster than gathering z[:, i] and
    # z[:, j] for every pair; the same float operations, so the same bits).
    out = np.empty((rows, gram_width(d)))
    at = 0
    for i in range(d):
        np.multiply(z[:, i:i + 1], z[:, i:], out=out[:, at:at + d - i])
        at += d - i
    out *= _gram_weights(d)[None, :]
    return out


def gram_from_vector(vector: np.ndarray, d: int) -> np.ndarray:
    """The symmetric D × D matrix from a (D(D+1)/2,) gram vector (off-diagonals divided by √2)."""
    v = np.asarray(vector, dtype=np.float64).reshape(-1)
    if v.shape[0] != gram_width(d):
        raise ValueError(f"a gram vector for D={d} has {gram_width(d)} values, got {v.shape[0]}")
    i, j = gram_indices(d)
    G = np.zeros((d, d))
    G[i, j] = v / _gram_weights(d)
    G[j, i] = G[i, j]
    return G


def _gram_sensitivity(spec: Any) -> float:
    """√2·C² (Gaussian) or 2C² (Laplace): :func:`ltm.dp.sensitivity.gram_sensitivity`."""
    return gram_sensitivity(spec.privacy.mechanism, spec.clip_bound)


def _gram_names(spec: Any) -> tuple[str, ...]:
    names = spec.vector_names
    i, j = gram_indices(len(names))
    return tuple(f"{names[a]}*{names[b]}" for a, b in zip(i, j))


GRAM = Lift(
    name="gram",
    width=lambda spec: gram_width(spec.width),
    apply=_gram_apply,
    sensitivity=_gram_sensitivity,
    max_abs_entry=lambda spec: float(spec.clip_bound) ** 2,
    names=_gram_names,
    unlift=lambda spec, total: gram_from_vector(total, spec.width),
)

def _histogram_lift(kind: str) -> Lift:
    """A per-column histogram on a public grid (:mod:`ltm.histograms`, the bounds pre-job)."""
    return Lift(
        name=kind,
        width=lambda spec: spec.width * h.bins_of(kind),
        apply=lambda spec, z: h.one_hot(kind, z),
        sensitivity=h.sensitivity,
        max_abs_entry=lambda spec: 1.0,
        names=lambda spec: h.bin_names(kind, tuple(spec.vector_names)),
        unlift=lambda spec, total: h.counts_matrix(kind, total, spec.width),
    )


HIST_LOG = _histogram_lift("hist_log")
HIST_LIN = _histogram_lift("hist_lin")

#: Every lifted release kind by name (immutable).  To add one: define a :class:`Lift` and list it.
LIFTS: Mapping[str, Lift] = MappingProxyType({GRAM.name: GRAM, HIST_LOG.name: HIST_LOG, HIST_LIN.name: HIST_LIN})
LIFTED_KINDS: tuple[str, ...] = tuple(LIFTS)


def get_lift(kind: str) -> Lift | None:
    """The lift of a release kind, or None for a sketch kind (sparse, dense)."""
    return LIFTS.get(kind)

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
* ``noise_factors(spec)``: per-entry noise variance factors (W,) relative to the plan's σ², or
  None for i.i.d. noise (the gram lift's Gaussian noise: 1 on the diagonal, ½ off it);
* ``unlift(spec, total)``: the analyst's view of the decoded sum (W,) (the gram lift returns the
  symmetric D × D matrix).

Lifts are defined for the ``rows`` partition only: in the ``columns`` partition no party holds a
whole client vector, so products across parties' columns are not local.  There a ``gram`` job is
the replicated release instead (:mod:`ltm.replicated`: three servers compute the products from
replicated shares, under an honest-majority assumption the job must state).

The ``gram`` lift: round, then lift exactly.  A client's clipped z ∈ R^D is first rounded, coordinate
by coordinate, to the grid 2^-g (:func:`ltm.dp.grid.gram_input_frac_bits`: g = ⌊f/2⌋ unless the
products would exceed 2^52 grid units), ẑ = round(z); the client uploads the *unweighted* upper
triangle of ẑ ẑᵀ, row by row (``numpy.triu_indices(D)`` order):

    u(ẑ) = ( ẑ_a ẑ_b )_{a ≤ b}.

Every entry is an exact product of two grid values, an integer number of steps of 2^-2g ⊆ 2^-f, so
rounding it to the job's grid 2^-f moves nothing, and the sum over a party's clients is the
integer Gram block ẐᵀẐ that BLAS computes exactly in float64 chunks (party/aggregate.py).  The
replicated release does the same (ltm/replicated.py).

Gaussian noise: per-entry scales.  The change under replace-one is P = ẑ'ẑ'ᵀ − ẑẑᵀ, with
‖P‖_F² ≤ 2R⁴, R = C + √D·2^-g/2 (:func:`ltm.dp.sensitivity.rounded_gram_l2`).  The noise plan gives
the diagonal entries variance σ² and the off-diagonal ones σ²/2 (:func:`gram_noise_factors`).
Multiplying the off-diagonal entries by √2 (an invertible public map, so post-processing both
ways) turns this into the isotropic Gaussian mechanism N(0, σ²I) on the weighted triangle, whose
norm is ‖P‖_F: the same mechanism, the same ρ = ‖P‖_F²/(2σ²).  (The discrete Gaussian's account
per coordinate: docs/architecture.md, "Per-entry noise scales".)  The analyst reads the sum as the
Gram matrix directly; an off-diagonal Gram entry has noise variance σ²/2, a diagonal one σ².
Laplace (ℓ1 clip): the unweighted triangle has ‖u(ẑ)‖₁ ≤ ‖ẑ‖₁² ≤ R₁², so Δ₁ = 2R₁² with
R₁ = C + D·2^-g/2 (:func:`ltm.dp.sensitivity.rounded_gram_l1`), i.i.d. noise.
Every entry satisfies ``|u_a| ≤ R²`` (|ẑ_a ẑ_b| ≤ ‖ẑ‖²).  A continuous job (f = 0, the planner's
and the seeded simulations' float plans) lifts z unrounded with the unrounded sensitivities.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from ltm import histograms as h
from ltm.dp.grid import gram_input_frac_bits, rounded_radius
from ltm.dp.sensitivity import gram_sensitivity, rounded_gram_sensitivity

__all__ = ["Lift", "LIFTS", "LIFTED_KINDS", "get_lift", "gram_width", "gram_indices", "gram_from_vector",
           "gram_noise_factors", "gram_input_bits", "gram_round", "gram_triangle"]


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
    #: Per-entry noise variance factors (W,) for the job (None: i.i.d. noise), relative to the
    #: plan's σ²; the plan's sensitivity is stated in the norm these factors weigh.
    noise_factors: Callable[[Any], np.ndarray | None] = lambda spec: None


# -------------------------------------------------------------------- the gram lift
def gram_width(d: int) -> int:
    """D(D+1)/2: the values of the upper triangle of a D × D symmetric matrix."""
    return d * (d + 1) // 2


def gram_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each uploaded gram value (``numpy.triu_indices(d)`` order)."""
    return np.triu_indices(d)


def gram_noise_factors(d: int) -> np.ndarray:
    """Per-entry noise variance factors of the Gaussian gram release: 1 on the diagonal, ½ off it."""
    i, j = gram_indices(d)
    return np.where(i == j, 1.0, 0.5)


def gram_input_bits(spec: Any) -> int:
    """g: the grid 2^-g a gram client vector is rounded to before the exact lift (0: not rounded,
    a continuous job)."""
    if spec.frac_bits < 2:
        return 0
    return gram_input_frac_bits(spec.frac_bits, spec.clip_bound, spec.width)


def gram_round(spec: Any, z: np.ndarray) -> np.ndarray:
    """ẑ in grid units of 2^-g: the clipped vectors (rows, D) rounded to integers, as float64
    (exact: |ẑ| ≤ 2^26).  For a continuous job (g = 0) z itself."""
    g = gram_input_bits(spec)
    if g == 0:
        return np.asarray(z, dtype=np.float64)
    # Round to nearest, ties to even, as ltm.dp.grid.round_to_grid does; the clipped input is
    # finite and ≤ C in magnitude, so the units are exact integers far below 2^53 (no range check).
    units = np.ldexp(np.asarray(z, dtype=np.float64), g)
    return np.rint(units, out=units)


def gram_triangle(units: np.ndarray) -> np.ndarray:
    """The unweighted upper triangle of each row's outer product: (rows, D) → (rows, D(D+1)/2)."""
    rows, d = units.shape
    # Row a of the triangle is ẑ_a · ẑ[a:], written in place (3.5× faster than gathering every pair).
    out = np.empty((rows, gram_width(d)))
    at = 0
    for a in range(d):
        np.multiply(units[:, a:a + 1], units[:, a:], out=out[:, at:at + d - a])
        at += d - a
    return out


def _gram_apply(spec: Any, z: np.ndarray) -> np.ndarray:
    """Round z to 2^-g, lift exactly: every product of grid units is an integer < 2^52, so the
    float64 product and its scaling by 2^-2g are exact."""
    out = gram_triangle(gram_round(spec, z))
    g = gram_input_bits(spec)
    return np.ldexp(out, -2 * g) if g else out


def gram_from_vector(vector: np.ndarray, d: int) -> np.ndarray:
    """The symmetric D × D matrix from a (D(D+1)/2,) unweighted upper triangle (``triu_indices`` order)."""
    v = np.asarray(vector, dtype=np.float64).reshape(-1)
    if v.shape[0] != gram_width(d):
        raise ValueError(f"a gram vector for D={d} has {gram_width(d)} values, got {v.shape[0]}")
    i, j = gram_indices(d)
    G = np.zeros((d, d))
    G[i, j] = v
    G[j, i] = v
    return G


def _gram_sensitivity(spec: Any) -> float:
    """√2·R² (Gaussian, Frobenius) or 2R₁² (Laplace) of the rounded input: ltm.dp.sensitivity."""
    g = gram_input_bits(spec)
    if g == 0:
        return gram_sensitivity(spec.privacy.mechanism, spec.clip_bound)
    return rounded_gram_sensitivity(spec.privacy.mechanism, spec.clip_bound, spec.width, g)


def _gram_max_abs_entry(spec: Any) -> float:
    """R²: |ẑ_a ẑ_b| ≤ ‖ẑ‖₂² ≤ (C + √D·2^-g/2)² (an ℓ1 clip bounds the ℓ2 norm as well)."""
    g = gram_input_bits(spec)
    r = rounded_radius(spec.clip_bound, spec.width, g) if g else float(spec.clip_bound)
    return r * r


def _gram_noise_factors(spec: Any) -> np.ndarray | None:
    """Gaussian: :func:`gram_noise_factors`; Laplace: i.i.d. (None)."""
    return gram_noise_factors(spec.width) if getattr(spec.privacy.mechanism, "value", spec.privacy.mechanism) \
        == "gaussian" else None


def _gram_names(spec: Any) -> tuple[str, ...]:
    names = spec.vector_names
    i, j = gram_indices(len(names))
    return tuple(f"{names[a]}*{names[b]}" for a, b in zip(i, j))


GRAM = Lift(
    name="gram",
    width=lambda spec: gram_width(spec.width),
    apply=_gram_apply,
    sensitivity=_gram_sensitivity,
    max_abs_entry=_gram_max_abs_entry,
    names=_gram_names,
    unlift=lambda spec, total: gram_from_vector(total, spec.width),
    noise_factors=_gram_noise_factors,
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

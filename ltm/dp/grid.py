"""The fixed-point grid every party value lives on, its rounding, and the noise-width check.

A party rounds its clipped (and, for a lifted kind, lifted) vector to the grid 2^-f Z by
deterministic round-to-nearest (:func:`round_to_grid`): each of its W entries moves by at most
2^-f/2.  Under replace-one neighbours two clients' rounded vectors differ by at most their true
difference plus 2·√W·2^-f/2 = √W·2^-f in ℓ2 (W·2^-f in ℓ1) per copy, and a client's vector enters
``pieces`` copies of the release (s sketch rows; one for a lifted kind) in distinct rows.  So the
release's sensitivity, whatever formula the release kind states for unrounded vectors, is widened by

    ℓ2: √(pieces·W)·2^-f        ℓ1: pieces·W·2^-f          (:func:`rounding_widening`)

and calibration uses the widened value.  The noise then is an integer number of grid steps
(:mod:`ltm.dp.noise`), so what the servers sum is exactly the rounded data plus exact noise.

The ``gram`` kind rounds *before* its lift instead (:func:`gram_input_frac_bits`, ltm/lifts.py):
z to 2^-g, then exact products on 2^-2g ⊆ 2^-f, so its sensitivity is stated for the rounded
input (:func:`rounded_radius`; ``ltm.dp.sensitivity.rounded_gram_l2``/``rounded_gram_l1``) and the
second rounding to 2^-f moves nothing (the plan keeps its widening as slack).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["MIN_NOISE_GRID_STEPS", "grid_step", "rounding_widening", "round_to_grid", "noise_grid_problem",
           "rounded_radius", "gram_input_frac_bits"]

#: The least per-client noise standard deviation, in grid steps, a job may use.  The proof needs
#: none (rounding is inside the sensitivity and the noise is exact), but a noise within a few steps
#: of the grid is a job whose privacy rests on the rounding analysis alone; 8 steps also keeps the
#: discrete Gaussian's τ term below 1e-270 (ltm.dp.accounting).  Defence in depth.
MIN_NOISE_GRID_STEPS = 8.0


def grid_step(frac_bits: int) -> float:
    """The grid step 2^-f."""
    return math.ldexp(1.0, -int(frac_bits))


def rounding_widening(norm: str, width: int, pieces: int, frac_bits: int) -> float:
    """What deterministic rounding adds to a release's sensitivity (module docstring).

    ``norm``: ``"l2"`` (Gaussian) or ``"l1"`` (Laplace); ``width``: W, entries each client uploads
    per piece; ``pieces``: copies of a client's vector in the release.
    """
    if width < 1 or pieces < 1:
        raise ValueError(f"width and pieces must be >= 1, got {width}, {pieces}")
    if norm == "l2":
        return math.sqrt(pieces * width) * grid_step(frac_bits)
    if norm == "l1":
        return pieces * width * grid_step(frac_bits)
    raise ValueError(f"norm must be 'l2' or 'l1', got {norm!r}")


def round_to_grid(values: np.ndarray, frac_bits: int) -> np.ndarray:
    """Round float values to the nearest grid point, as int64 grid units (ties to even).

    Raises ValueError for non-finite values or values beyond ±2^62 grid steps.
    """
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.rint(np.ldexp(x, int(frac_bits)))
    if not np.all(np.isfinite(scaled)):
        raise ValueError("cannot encode NaN or infinite values")
    if scaled.size and np.max(np.abs(scaled)) >= 2.0**62:
        raise ValueError(f"value too large for fixed point with {frac_bits} fraction bits")
    return scaled.astype(np.int64)


#: A rounded client vector of the ``gram`` kind has ‖ẑ‖₂·2^g ≤ 2^26, so every product ẑ_a ẑ_b of its
#: integer grid units is below 2^52: exact in float64 (the lift) and in int64.
_GRAM_UNIT_PRODUCT_BITS = 52


def rounded_radius(clip_norm: float, width: int, frac_bits: int, norm: str = "l2") -> float:
    """A bound on the norm of a vector of norm ≤ C after rounding each of its D coordinates to the
    nearest point of 2^-g: each moves by ≤ 2^-g/2, so ‖ẑ‖₂ ≤ C + √D·2^-g/2 (ℓ1: C + D·2^-g/2)."""
    half = 0.5 * grid_step(frac_bits)
    if norm == "l2":
        return float(clip_norm) + math.sqrt(width) * half
    if norm == "l1":
        return float(clip_norm) + width * half
    raise ValueError(f"norm must be 'l2' or 'l1', got {norm!r}")


def gram_input_frac_bits(frac_bits: int, clip_norm: float, width: int) -> int:
    """g, the grid 2^-g the ``gram`` kind rounds a client vector to before lifting it exactly
    (ltm/lifts.py): the largest g ≤ ⌊f/2⌋ with (R_g·2^g)² ≤ 2^52, R_g = :func:`rounded_radius`
    (ℓ2; an ℓ1 clip bounds ℓ2 too).  The lifted entries ẑ_a ẑ_b are then integers on 2^-2g ⊆ 2^-f
    (times 2^(f−2g)), each below 2^52 grid units of 2^-2g: exact as float64 and as int64."""
    f = int(frac_bits)
    if f < 2 or width < 1 or not clip_norm > 0:
        raise ValueError(f"gram_input_frac_bits needs f >= 2, D >= 1, C > 0 (got {frac_bits}, {width}, {clip_norm})")
    for g in range(f // 2, 0, -1):
        if math.ldexp(rounded_radius(clip_norm, width, g), g) ** 2 <= 2.0**_GRAM_UNIT_PRODUCT_BITS:
            return g
    raise ValueError(f"clip bound {clip_norm:g} too large for an exact gram lift (products beyond 2^52 grid units)")


def noise_grid_problem(grid_noise_sd: float, frac_bits: int) -> str | None:
    """A one-line refusal when the per-client noise sd (grid steps) is below the minimum, else None."""
    if grid_noise_sd >= MIN_NOISE_GRID_STEPS:
        return None
    return (f"per-client noise sd is {grid_noise_sd:.3g} grid steps of 2^-{frac_bits}, below the "
            f"minimum {MIN_NOISE_GRID_STEPS:g}: raise frac_bits, the clip bound or the noise "
            f"(lower epsilon), or lower min_honest_load")

"""Every sensitivity of the project, with its derivation (issue #20, item 5).

A sensitivity bounds how far one release can move when ONE client is replaced by another (the
project's neighbouring relation, "replace-one"): ℓ2 for the Gaussian mechanism, ℓ1 for Laplace.
Each function here states the release it is for, its arguments and the derivation; the noise is
calibrated for the returned value, so a bound that is too small is a privacy bug and one that is
too large only costs utility.  ``tests/unit/ltm/dp/test_dp_sensitivity.py`` checks every bound against a
brute-force maximum over neighbouring clipped vectors run through the real maps, and greps the
source tree so that no module outside :mod:`ltm.dp` computes a sensitivity of its own.

Conventions: ``clip_norm`` C > 0 is the norm the client vector z is clipped to (ℓ2 for Gaussian
jobs, ℓ1 for Laplace jobs); ``pieces`` s ≥ 1 is the number of non-zeros of a client's sketch
column.  The sensitivity of a statistic divided by a public n is the sensitivity divided by n
(the simulation baselines release such normalised statistics and divide the value returned here).

Mechanism names: ``mechanism`` is ``"gaussian"`` (ℓ2) or ``"laplace"`` (ℓ1), or an enum member
whose ``value`` is one of them.
"""
from __future__ import annotations

import math
import operator
from typing import Any

from ltm.dp.grid import rounded_radius

__all__ = [
    "vector_sensitivity",
    "sketch_l2",
    "sketch_l1",
    "sketch_sensitivity",
    "gram_l2",
    "gram_l2_triangle",
    "gram_l1",
    "gram_sensitivity",
    "rounded_gram_l2",
    "rounded_gram_l1",
    "rounded_gram_sensitivity",
    "histogram_l2",
    "histogram_l1",
    "histogram_sensitivity",
    "cross_moment_l2",
    "joint_cross_moment_l2",
    "min_eigenvalue_sensitivity",
    "sgd_sensitivity",
    "reference_code_rf_sensitivity",
]


# ------------------------------------------------------------------------------------ checks
def _positive(name: str, value: float) -> float:
    """``value`` as a finite float > 0, else a one-line ValueError naming it."""
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if isinstance(value, bool) or not (math.isfinite(x) and x > 0.0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return x


def _count(name: str, value: int) -> int:
    """``value`` as an int ≥ 1 (bools and floats refused), else a one-line ValueError naming it."""
    try:
        k = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}") from None
    if isinstance(value, bool) or k < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return k


def _is_l2(mechanism: Any) -> bool:
    """True for the Gaussian mechanism (ℓ2), False for Laplace (ℓ1); strings or enum members."""
    name = getattr(mechanism, "value", mechanism)
    if name == "gaussian":
        return True
    if name == "laplace":
        return False
    raise ValueError(f"unknown mechanism {mechanism!r}; choose 'gaussian' (l2) or 'laplace' (l1)")


# ------------------------------------------------------------------------------------ one vector
def vector_sensitivity(clip_norm: float) -> float:
    """``2C``: the sensitivity of releasing one clipped vector itself, in the norm it is clipped in.

    Replacing z by z' with ‖z‖, ‖z'‖ ≤ C moves it by ‖z − z'‖ ≤ ‖z‖ + ‖z'‖ ≤ 2C (triangle
    inequality), attained by z' = −z with ‖z‖ = C.  The same holds for any vector confined to a
    ball of radius C (an ℓ2-clipped coefficient vector; a local-model client row).

    Args:
        clip_norm: C > 0, the radius of the ball.
    """
    return 2.0 * _positive("clip_norm", clip_norm)


# ------------------------------------------------------------------------------------ sketches
def sketch_l2(clip_norm: float, pieces: int) -> float:
    """``2C√s``: ℓ2 sensitivity of the sketched release S·Z (Gaussian mechanism).

    Client j's column of S has s non-zeros ±1 in s DISTINCT rows (sparse: OSNAP with distinct
    rows; dense: s = m; the lifted kinds' ``sum`` map: s = 1), and the analyst's 1/√s scaling is
    applied after the release.  Replacing z_j by z'_j changes row r of S·Z by ±(z_j − z'_j) in
    each of the s rows of the column and nowhere else, so

        ‖S·Z − S·Z'‖_F² = s·‖z_j − z'_j‖₂² ≤ s·(2C)²,   Δ₂ = 2C√s,

    attained by z'_j = −z_j with ‖z_j‖₂ = C.  (Were two non-zeros in one row, they could add up
    and the bound would be 2C·s: distinct rows are what this relies on.)

    Args:
        clip_norm: C > 0 (ℓ2 clip of the client vector).
        pieces: s ≥ 1, non-zeros per sketch column.
    """
    return vector_sensitivity(clip_norm) * math.sqrt(_count("pieces", pieces))


def sketch_l1(clip_norm: float, pieces: int) -> float:
    """``2sC``: ℓ1 sensitivity of the sketched release S·Z (Laplace mechanism).

    As for :func:`sketch_l2`, replacing one client changes s rows of S·Z by ±(z_j − z'_j), so
    ‖S·Z − S·Z'‖₁ = s·‖z_j − z'_j‖₁ ≤ s·2C for ℓ1-clipped vectors (‖z‖₁ ≤ C), attained by
    z'_j = −z_j.  The paper's dense Laplace sketch (Burkhardt et al. Cor 4.10) is s = m.

    Args:
        clip_norm: C > 0 (ℓ1 clip of the client vector).
        pieces: s ≥ 1, non-zeros per sketch column.
    """
    return vector_sensitivity(clip_norm) * _count("pieces", pieces)


def sketch_sensitivity(mechanism: Any, clip_norm: float, pieces: int) -> float:
    """The sketch's sensitivity for ``mechanism``: :func:`sketch_l2` (Gaussian, 2C√s) or
    :func:`sketch_l1` (Laplace, 2sC).

    Args:
        mechanism: ``"gaussian"`` or ``"laplace"`` (or an enum member with that value).
        clip_norm: C > 0, the clip bound in the mechanism's norm.
        pieces: s ≥ 1, non-zeros per sketch column.
    """
    if _is_l2(mechanism):
        return sketch_l2(clip_norm, pieces)
    return sketch_l1(clip_norm, pieces)


# ------------------------------------------------------------------------------------ Gram matrices
def gram_l2(clip_norm: float) -> float:
    """``√2·C²``: ℓ2 sensitivity of the upper triangle of a Gram matrix ZᵀZ, rows ‖z‖₂ ≤ C.

    Replacing z by z' changes ZᵀZ by P = z'z'ᵀ − zzᵀ.  The ``gram`` lift (:mod:`ltm.lifts`) uploads
    the upper triangle with off-diagonal entries times √2, an isometry for the Frobenius norm, and
    the central baselines release the plain upper triangle, whose norm is at most ‖P‖_F.  Either
    way the change is at most

        ‖P‖_F² = tr(P²) = ‖z‖⁴ + ‖z'‖⁴ − 2(zᵀz')² ≤ 2C⁴,   Δ₂ = √2·C²,

    attained by orthogonal z, z' of norm C (for D = 1 the exact value is C²; √2·C² is kept as a
    valid upper bound).

    Args:
        clip_norm: C > 0 (ℓ2 clip of the rows).
    """
    c = _positive("clip_norm", clip_norm)
    return math.sqrt(2.0) * c * c


def gram_l2_triangle(clip_norm: float) -> float:
    """``2C²``: the triangle-inequality ℓ2 bound on the same change as :func:`gram_l2`.

    ‖z'z'ᵀ − zzᵀ‖_F ≤ ‖z'‖² + ‖z‖² ≤ 2C².  Valid but loose by √2; the papers reproduced by the
    simulation baselines use it (SSP/AdaSSP and MOD-SULQ with ``tight=False``, Cao & Zhang's
    ``gram_sensitivity="paper"``).

    Args:
        clip_norm: C > 0 (ℓ2 clip of the rows).
    """
    c = _positive("clip_norm", clip_norm)
    return 2.0 * c * c


def gram_l1(clip_norm: float) -> float:
    """``2C²``: ℓ1 sensitivity of the ``gram`` lift (Laplace), rows clipped to ‖z‖₁ ≤ C.

    The lifted vector u(z) = (z_i z_j w_ij)_{i≤j} (w_ii = 1, w_ij = √2) has
    ‖u(z)‖₁ = Σ_i z_i² + √2 Σ_{i<j} |z_i z_j| = ‖z‖₂² + (‖z‖₁² − ‖z‖₂²)/√2 ≤ ‖z‖₁² ≤ C², so
    ‖u(z) − u(z')‖₁ ≤ ‖u(z)‖₁ + ‖u(z')‖₁ ≤ 2C², attained by z = C·e₁, z' = C·e₂.

    Args:
        clip_norm: C > 0 (ℓ1 clip of the rows).
    """
    c = _positive("clip_norm", clip_norm)
    return 2.0 * c * c


def gram_sensitivity(mechanism: Any, clip_norm: float) -> float:
    """The ``gram`` lift's sensitivity for ``mechanism``: :func:`gram_l2` (Gaussian, √2·C²) or
    :func:`gram_l1` (Laplace, 2C²).

    Args:
        mechanism: ``"gaussian"`` or ``"laplace"`` (or an enum member with that value).
        clip_norm: C > 0, the clip bound in the mechanism's norm.
    """
    if _is_l2(mechanism):
        return gram_l2(clip_norm)
    return gram_l1(clip_norm)


# ------------------------------------------------------------------------------------ histograms
def histogram_l2(columns: int) -> float:
    """``√(2D)``: ℓ2 sensitivity of the per-column histograms (:mod:`ltm.histograms`), D columns.

    A client's lifted vector is one one-hot block per column, whatever its values, so replacing
    it moves at most two entries per column, by 1 each: ‖h − h'‖₂² ≤ 2D.  Attained when every
    column changes bin.  Independent of the clip bound.

    Args:
        columns: D ≥ 1, the histogrammed columns.
    """
    return math.sqrt(2.0 * _count("columns", columns))


def histogram_l1(columns: int) -> float:
    """``2D``: ℓ1 sensitivity of the per-column histograms (two entries per column change by 1).

    Args:
        columns: D ≥ 1, the histogrammed columns.
    """
    return 2.0 * _count("columns", columns)


def histogram_sensitivity(mechanism: Any, columns: int) -> float:
    """The histograms' sensitivity for ``mechanism``: :func:`histogram_l2` (Gaussian, √(2D)) or
    :func:`histogram_l1` (Laplace, 2D).

    Args:
        mechanism: ``"gaussian"`` or ``"laplace"`` (or an enum member with that value).
        columns: D ≥ 1, the histogrammed columns.
    """
    if _is_l2(mechanism):
        return histogram_l2(columns)
    return histogram_l1(columns)


# ------------------------------------------------------------------------------------ moments
def cross_moment_l2(feature_radius: float, label_radius: float) -> float:
    """``2·R_x·R_y``: ℓ2 sensitivity of Aᵀy when features and label are clipped SEPARATELY
    (‖a‖₂ ≤ R_x, |y| ≤ R_y; Cao & Zhang's Alg. 3 and 4).

    Replacing (a, y) by (a', y') changes Aᵀy by a'y' − ay, and ‖a'y' − ay‖ ≤ ‖a'‖|y'| + ‖a‖|y|
    ≤ 2R_xR_y, attained by (a', y') = (a, −y) with ‖a‖ = R_x, |y| = R_y.

    Args:
        feature_radius: R_x > 0; label_radius: R_y > 0.
    """
    return 2.0 * _positive("feature_radius", feature_radius) * _positive("label_radius", label_radius)


def joint_cross_moment_l2(clip_norm: float) -> float:
    """``C²``: ℓ2 sensitivity of Aᵀb when each row (a, b) of [A b] is clipped JOINTLY to
    ‖(a, b)‖₂ ≤ C (SSP / AdaSSP).

    ‖a'b' − ab‖ ≤ ‖a'‖|b'| + ‖a‖|b|, and ‖a‖|b| ≤ (‖a‖² + b²)/2 ≤ C²/2 (AM–GM), so Δ₂ ≤ C²,
    attained by ‖a‖ = |b| = C/√2 and (a', b') = (a, −b).

    Args:
        clip_norm: C > 0.
    """
    c = _positive("clip_norm", clip_norm)
    return c * c


def min_eigenvalue_sensitivity(clip_norm: float) -> float:
    """``C²``: sensitivity of λ_min(AᵀA) for rows ‖a‖₂ ≤ C (a scalar: ℓ1 = ℓ2; AdaSSP step 1).

    Replacing a by a' changes AᵀA by P = a'a'ᵀ − aaᵀ, whose eigenvalues lie in [−‖a‖², ‖a'‖²];
    by Weyl's inequality |λ_min(AᵀA + P) − λ_min(AᵀA)| ≤ ‖P‖₂ ≤ max(‖a‖², ‖a'‖²) ≤ C².

    Args:
        clip_norm: C > 0.
    """
    c = _positive("clip_norm", clip_norm)
    return c * c


# ------------------------------------------------------------------------------------ reproductions
def sgd_sensitivity(m: int, iterations: int, lr: float, delta: float) -> float:
    """Δ_SGD of Wang & Guo, as the reference code of Liao, Needell & Xue computes it for the
    baseline of their §4.1 (taken as published, NOT re-derived here)::

        C_T = max(√(3m·log(2m/δ)/T), 3m·log(2m/δ)/T)
        Δ   = 4e·η²·(1 + √(ηT))²·T·(1 + C_T)·(1 + T(1 + C_T)/m) / m

    Args:
        m: training samples ≥ 1; iterations: T ≥ 1 SGD steps; lr: step size η > 0;
        delta: δ ∈ (0, 1).
    """
    m_, T = _count("m", m), _count("iterations", iterations)
    eta = _positive("lr", lr)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    log_term = 3 * m_ * math.log(2 * m_ / delta) / T
    C_T = max(math.sqrt(log_term), log_term)
    return 4 * math.e * eta**2 * (1 + math.sqrt(eta * T)) ** 2 * T * (1 + C_T) * (1 + T * (1 + C_T) / m_) / m_


def reference_code_rf_sensitivity(ref_delta_c: float, n_features: int) -> float:
    """``c/√N``: the sensitivity the random-feature paper's reference code claims for its
    √(2/N)·cos coefficients (``ref_delta_c`` c = 4: η = 3/8).  NOT a valid bound: it is √N too
    small (the paper's Lemma 6, §3.2, is for unnormalised e^{i⟨ω,x⟩} features); kept only to
    reproduce the paper's figures.

    Args:
        ref_delta_c: c > 0; n_features: N ≥ 1 random features.
    """
    return _positive("ref_delta_c", ref_delta_c) / math.sqrt(_count("n_features", n_features))


def rounded_gram_l2(clip_norm: float, width: int, frac_bits: int) -> float:
    """``√2·(C + √D·2^-f/2)²``: :func:`gram_l2` of vectors clipped to C and then rounded to the
    nearest point of the grid 2^-f, coordinate by coordinate (the replicated release rounds z, then
    multiplies exactly: ``ltm/replicated.py``).  Rounding moves each of the D coordinates by at most
    2^-f/2, so ‖ẑ‖ ≤ C + √D·2^-f/2, and two neighbours' rounded vectors are any two vectors of at most
    that norm."""
    return gram_l2(float(clip_norm) + 0.5 * math.sqrt(width) * math.ldexp(1.0, -int(frac_bits)))


def rounded_gram_l1(clip_norm: float, width: int, frac_bits: int) -> float:
    """``2·(C + D·2^-g/2)²``: ℓ1 sensitivity of the *unweighted* upper triangle
    T(ẑ) = (ẑ_a ẑ_b)_{a≤b} of vectors clipped to ‖z‖₁ ≤ C and then rounded coordinate by
    coordinate to the grid 2^-g (``frac_bits`` = g; the ``gram`` lift, ltm/lifts.py).

    Rounding moves each of the D coordinates by ≤ 2^-g/2, so ‖ẑ‖₁ ≤ R₁ = C + D·2^-g/2; and
    ‖T(ẑ)‖₁ = Σ_a ẑ_a² + Σ_{a<b} |ẑ_a ẑ_b| ≤ Σ_a ẑ_a² + 2Σ_{a<b} |ẑ_a ẑ_b| = ‖ẑ‖₁² ≤ R₁², so
    ‖T(ẑ) − T(ẑ')‖₁ ≤ 2R₁² (attained for g → ∞ by z = C·e₁, z' = C·e₂)."""
    r = rounded_radius(_positive("clip_norm", clip_norm), _count("width", width), frac_bits, "l1")
    return 2.0 * r * r


def rounded_gram_sensitivity(mechanism: Any, clip_norm: float, width: int, frac_bits: int) -> float:
    """The ``gram`` lift's sensitivity for ``mechanism`` with its input rounded to 2^-g
    (``frac_bits`` = g): :func:`rounded_gram_l2` (Gaussian, in the Frobenius norm of the change of
    ẑẑᵀ: the noise plan gives the unweighted off-diagonal entries variance ½, ltm/lifts.py) or
    :func:`rounded_gram_l1` (Laplace, ℓ1 of the unweighted triangle)."""
    if _is_l2(mechanism):
        return rounded_gram_l2(clip_norm, width, frac_bits)
    return rounded_gram_l1(clip_norm, width, frac_bits)

"""Exact integer noise in grid units, drawn from the CSPRNG (docs/architecture.md, "The noise").

Every noise value a party adds is an integer number of grid steps 2^-f:

* **discrete Gaussian** N_Z(0, σ²) (P(y) ∝ exp(−y²/(2σ²)), y ∈ Z) for the (ε, δ) mechanism, and
* **discrete Laplace** DLap(t) (P(y) ∝ exp(−|y|/t)) for the pure-ε mechanism, drawn by a party
  as L Pólya pieces NB(1/L, e^{−1/t}) − NB(1/L, e^{−1/t}) (:mod:`ltm.dp.polya`; L of them sum to
  exactly one DLap(t)),

all sampled *exactly*: the output distribution is the stated one, with no floating-point tail or
rounding, given uniform bits from :class:`ltm.randomness.RandomStream` (AES-256-CTR).

**The algorithms.**  Canonne, Kamath & Steinke 2020 (*The Discrete Gaussian for Differential
Privacy*, Algorithm 3): draw Y ~ DLap(t) and accept it with probability exp(−(|Y| − σ²/t)²/(2σ²));
the accepted Y is N_Z(0, σ²) for every t > 0 (the product of the two weights is
exp(−y²/(2σ²) − σ²/(2t²))); t = ⌊σ⌋ + 1 makes the acceptance ≈ 0.76.  DLap(t) is a sign and a
magnitude G with P(G ≥ k) = exp(−k/t), i.e. G = ⌊−t·ln V⌋ for V uniform on (0, 1], the pair
(negative sign, G = 0) rejected.

**Lazy exactness.**  Both steps compare a uniform V with exp(−r) for a rational r.  V is an
infinite binary fraction of which a 64-bit word U gives the first 64 bits (V ∈ [U, U+1)·2^-64).
The comparison is first decided in float64 with a *certified* error bound (every rounding of the
computation, generously over-counted: the ``_*_SLACK`` constants).  When the bound cannot decide it
(about one draw in 10^12 for the Gaussian acceptance, one in ~t·2^-46 for the geometric magnitude),
the draw is finished exactly: :class:`_LazyUniform` extends V by further 64-bit words from the same
stream and compares it with an interval ``exp_neg_bounds(r, bits)`` computed in Python integers
(a fixed-point Taylor series with its remainder, :func:`exp_neg_bounds`) until the two separate.  So
every decision is the exact one; floats only make the common case fast.

**Vectorised.**  Candidates are drawn in numpy rounds of at most 2^15 (≈ 1.3 candidates per
discrete Gaussian), small enough that a round's temporaries stay in the CPU cache; the rare words
too short for the float logarithm (U < 2^52) get their second word in the same vectorised round, and
the exact fallback is a Python loop over the ambiguous elements only (about 2 in 10^5 at σ = 10^9).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from ltm.dp.polya import polya_laplace
from ltm.randomness import RandomStream

__all__ = [
    "exp_neg_bounds",
    "discrete_gaussian",
    "discrete_laplace",
    "MAX_GRID_SCALE",
    "widest_noise_draw",
    "sample_noise",
    "noise_tail_bound",
    "laplace_element_pieces",
]

#: Largest σ or t (grid units) the samplers take: keeps every candidate magnitude, σ²/t and t in
#: the range where int64 and float64 hold integers exactly (|Y| < 2^53 barring a 2^-40 tail).
MAX_GRID_SCALE = 2.0**44
_TWO_M64 = 2.0**-64
_TWO_P52 = np.uint64(1 << 52)
_ONE = np.uint64(1)
#: Certified relative error allowances of the float decisions: each is ≥ 4× the worst case of the
#: roundings it covers even if numpy's log/exp were off by 4 ulps (they are within 1–2), plus the
#: int→float conversion of U and a handful of products.
_LOG_SLACK = 2.0**-48
_EXP_SLACK = 2.0**-46
#: The float error bound of the Gaussian acceptance's exponent is only used while it is small
#: (then e^E − 1 ≤ 2E); larger bounds go to the exact path.
_MAX_EXPONENT_ERR = 1e-3
#: Oversampling of one vectorised round (the discrete Gaussian accepts ≈ 0.76 of its candidates).
_ROUND_FACTOR = 1.4
#: Candidates per vectorised round at most: a round's float64 temporaries (256 KiB each) stay in
#: the CPU cache, and its numpy passes are memory-bound on larger arrays (≈ 2× slower per draw).
_CHUNK = 1 << 15


# -------------------------------------------------------------------------------------------------
# exact exp(−r) bounds in integers
# -------------------------------------------------------------------------------------------------


def _exp_neg_fixed(x: int, work: int) -> tuple[int, int]:
    """Integers lo ≤ 2^work·e^{−x/2^work} ≤ hi for an integer 0 ≤ x ≤ 2^work (so x/2^work ≤ 1).

    Taylor series in fixed point: the terms x^k/k! alternate in sign and decrease, so stopping
    when a term vanishes leaves an error below that term; each term is floored (≤ 2 units lost
    per step, ≤ 2k after k steps), so the sum is within 2K(K + 1) + 2 units of the value.
    """
    total = 0
    term = 1 << work
    k = 0
    while term:
        total += -term if k & 1 else term
        k += 1
        term = ((term * x) >> work) // k
    slack = 2 * k * (k + 1) + 2
    return max(total - slack, 0), total + slack


@functools.lru_cache(maxsize=64)
def _exp_neg_one(work: int) -> tuple[int, int]:
    return _exp_neg_fixed(1 << work, work)


def exp_neg_bounds(r: Fraction | int, bits: int) -> tuple[int, int]:
    """Integers ``lo ≤ 2^bits · exp(−r) ≤ hi`` for a rational ``r ≥ 0``, with ``hi − lo`` a few units.

    Exact integer arithmetic: r = n + x with n = ⌊r⌋, x ∈ [0, 1); e^{−r} = (e^{−1})^n · e^{−x}, each
    factor bracketed in fixed point (:func:`_exp_neg_fixed`) at a working precision with 32 guard
    bits plus what the n-fold power needs; x is bracketed by ⌊x·2^work⌋ and that plus one
    (e^{−x} decreases in x).
    """
    r = Fraction(r)
    if r < 0:
        raise ValueError(f"exp_neg_bounds needs r >= 0, got {r}")
    n = r.numerator // r.denominator
    if n > 2 * bits + 2:  # e^{−n} < 2^{−bits−2}: the value is below one unit
        return 0, 1
    work = bits + 32 + 2 * max(n, 1).bit_length()
    x_floor = ((r.numerator - n * r.denominator) << work) // r.denominator
    x_lo = _exp_neg_fixed(x_floor + 1, work)[0]
    x_hi = _exp_neg_fixed(x_floor, work)[1]
    e_lo, e_hi = _exp_neg_one(work)
    shift = work * (n + 1) - bits
    lo = (e_lo**n * x_lo) >> shift
    hi = -((-(e_hi**n * x_hi)) >> shift)  # ceiling division by 2^shift
    return lo, hi


class _LazyUniform:
    """A uniform V on (0, 1) of which only the first ``bits`` bits (the integer ``v``) are drawn so far."""

    def __init__(self, stream: RandomStream, first_word: int, bits: int = 64) -> None:
        self._stream = stream
        self.v = int(first_word)
        self.bits = bits

    def below_exp_neg(self, r: Fraction) -> bool:
        """Whether V < exp(−r), decided exactly (drawing more bits of V while it is ambiguous)."""
        while True:
            lo, hi = exp_neg_bounds(r, self.bits)
            if self.v + 1 <= lo:  # V < (v + 1)/2^bits ≤ e^{−r}
                return True
            if self.v >= hi:  # V ≥ v/2^bits ≥ e^{−r}  (V = e^{−r} has probability 0)
                return False
            self.v = (self.v << 64) | int(self._stream.uint64(1)[0])
            self.bits += 64


# -------------------------------------------------------------------------------------------------
# the vectorised samplers
# -------------------------------------------------------------------------------------------------


def _check_scale(name: str, value: float) -> float:
    x = float(value)
    if not (math.isfinite(x) and 0.0 < x <= MAX_GRID_SCALE):
        raise ValueError(f"{name} must be in (0, 2^44] grid steps, got {value!r}")
    return x


class _Scratch:
    """Warm work buffers for the rounds of one sampler call (at most ``n`` candidates each).

    Every vectorised step writes into these (``out=``) instead of fresh arrays: a fresh 256 KiB
    output costs its page faults again in every round, which made the samplers' passes ~4× slower.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.ints = np.empty(n, dtype=np.int64)
        self.f = [np.empty(n) for _ in range(7)]
        self.b = [np.empty(n, dtype=bool) for _ in range(3)]


def _word_floats(words: np.ndarray, ints: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` ≈ U for uint64 words U: 2·float(⌊U/2⌋), within U·2^-53 + 1 of U (⌊U/2⌋ < 2^63 converts
    as an int64, about 5× faster than numpy's uint64 cast)."""
    np.right_shift(words, _ONE, out=ints.view(np.uint64))
    out[...] = ints
    out *= 2.0
    return out


def _geometric_float(stream: RandomStream, t: float, count: int, scratch: _Scratch | None = None) -> np.ndarray:
    """``count`` i.i.d. G ≥ 0 with P(G ≥ k) = exp(−k/t), exactly: G = ⌊−t·ln V⌋, as float64 (exact
    integers < 2^53).  With ``scratch``, the result is a view into its buffers (valid until its next use)."""
    s = scratch if scratch is not None else _Scratch(count)
    x, g, err = s.f[0][:count], s.f[1][:count], s.f[2][:count]
    unsure, other = s.b[0][:count], s.b[1][:count]
    words = stream.uint64(count)
    _word_floats(words, s.ints[:count], x)
    # V ∈ [U, U+1)·2^-64 lies within a relative 2/U of x = 2·float(⌊U/2⌋) (|x − U| ≤ U·2^-53 + 1,
    # plus the cell), too loose below U = 2^52 (probability 2^-12; as a review found for the old 2^12
    # cut).  Those words get one more word W each, in one vectorised draw: V ∈ [U·2^64 + W,
    # U·2^64 + W + 1)·2^-128, within a relative 2^-64 of U + W·2^-64 for U ≥ 1, which float(U) +
    # float(W)·2^-64 (U exact, two roundings of 2^-53) gives to a relative 2^-52.  U = 0 (2^-64)
    # stays unsure.
    np.less(words, _TWO_P52, out=other)
    short = np.flatnonzero(other)
    extra = stream.uint64(short.size) if short.size else None
    if extra is not None:  # exactly when short.size
        x[short] = words[short].astype(np.float64) + extra.astype(np.float64) * _TWO_M64
    x *= _TWO_M64
    with np.errstate(divide="ignore"):
        np.log(x, out=x)
    x *= -t
    # With a = x·2^-64 within a relative 2^-53 + 2^-51 < 2^-50 of V (above), ln V is within 2^-50
    # of ln a, a 4-ulp log adds |ln a|·2^-50, the product |x̂|·2^-53: −t·ln V is within
    # (t·(|ln a| + 1) + x̂)·2^-50 = (2x̂ + t)·2^-50 of x̂ (x̂ = t·|ln a|), and _LOG_SLACK counts 4×
    # that.  Draws within that error of an integer boundary (and U = 0) go to the exact path.
    np.floor(x, out=g)
    np.multiply(x, 2.0 * _LOG_SLACK, out=err)
    err += t * _LOG_SLACK
    with np.errstate(invalid="ignore"):  # x = inf (U = W = 0) gives NaN here: U = 0 is unsure below
        x -= g  # the fractional part
    np.less(x, err, out=unsure)
    x += err
    np.greater_equal(x, 1.0, out=other)
    unsure |= other
    if short.size:
        unsure[short[words[short] == 0]] = True
    if unsure.any():
        tf = Fraction(t)
        where = {int(i): int(w) for i, w in zip(short, extra)} if extra is not None else {}
        for j in np.flatnonzero(unsure):
            i = int(j)
            lazy = (_LazyUniform(stream, (int(words[i]) << 64) | where[i], 128) if i in where
                    else _LazyUniform(stream, int(words[i])))
            g[i] = _geometric_exact(lazy, t, tf)
    return g


def _geometric_exact(lazy: _LazyUniform, t: float, tf: Fraction) -> int:
    """The G = max{k : V < e^{−k/t}} of one lazily drawn V, decided exactly.

    Starts from a float estimate (V widened to at least 128 bits so a tiny V still has a
    logarithm) and steps to the exact answer; the estimate is off by a few units at most.
    """
    while lazy.v.bit_length() < 64 and lazy.bits < 1024:
        lazy.v = (lazy.v << 64) | int(lazy._stream.uint64(1)[0])
        lazy.bits += 64
    k = max(0, math.floor(-t * (math.log(lazy.v + 0.5) - lazy.bits * math.log(2.0))))
    if k >= 1 << 52:  # V < e^{-2^52/t} ≤ e^{-256}: not representable; probability < 2^-369
        raise OverflowError("a discrete noise draw exceeded 2^52 grid steps")
    while k > 0 and not lazy.below_exp_neg(k / tf):  # G ≥ k ⇔ V < e^{−k/t}
        k -= 1
    while lazy.below_exp_neg((k + 1) / tf):
        k += 1
    return k


def _signs(stream: RandomStream, count: int) -> np.ndarray:
    """``count`` independent fair bits (bool)."""
    return np.unpackbits(stream.uint64((count + 63) // 64).view(np.uint8), count=count).astype(bool)


def _apply_signs(values: np.ndarray, negative: np.ndarray, work: np.ndarray) -> None:
    """``values[negative] *= −1`` in place (values are integers < 2^53 as floats: exact), as
    arithmetic: numpy's masked ``negative(where=)`` is ~30× slower than three plain passes."""
    np.multiply(negative, -2.0, out=work)
    work += 1.0
    values *= work


def _accept_exp_neg(stream: RandomStream, gamma: np.ndarray, gamma_err: np.ndarray,
                    exact_gamma, scratch: _Scratch | None = None) -> np.ndarray:
    """Bernoulli(exp(−γ)) per element, exactly; ``gamma``: float64 values within ``gamma_err`` of
    the exact rationals ``exact_gamma(i)`` (used only on the ambiguous elements).  With ``scratch``
    (whose ``f[3:]`` and ``b`` it uses), the result is a view into its buffers."""
    n = gamma.size
    s = scratch if scratch is not None else _Scratch(n)
    a, g, margin, tmp = s.f[3][:n], s.f[4][:n], s.f[5][:n], s.f[6][:n]
    accept, unsure = s.b[2][:n], s.b[0][:n]
    words = stream.uint64(n)
    _word_floats(words, s.ints[:n], a)
    a *= _TWO_M64
    np.negative(gamma, out=g)
    np.exp(g, out=g)
    # |g − e^{−γ}| ≤ g·(2·gamma_err + ulps) while gamma_err ≤ 1e-3; the cell of V is within
    # a·2^-52 + 2^-63 of a (U rounded, its halving's dropped bit, the cell).  The margin over-counts both.
    np.multiply(gamma_err, 2.0, out=margin)
    margin += _EXP_SLACK
    margin *= g
    np.multiply(a, _EXP_SLACK, out=tmp)
    margin += tmp
    margin += 2.0**-60
    np.add(a, margin, out=tmp)
    np.less(tmp, g, out=accept)
    np.subtract(a, margin, out=tmp)
    np.less(tmp, g, out=unsure)
    unsure &= ~accept
    unsure |= gamma_err > _MAX_EXPONENT_ERR
    if unsure.any():
        for i in np.flatnonzero(unsure):
            accept[i] = _LazyUniform(stream, int(words[i])).below_exp_neg(exact_gamma(int(i)))
    return accept


def discrete_laplace(stream: RandomStream, scale: float, count: int) -> np.ndarray:
    """``count`` i.i.d. draws of the discrete Laplace DLap(t): P(y) ∝ exp(−|y|/t), y ∈ Z (int64).

    ``scale`` t (grid steps, a float taken as the exact dyadic rational it is) must be in (0, 2^44].
    """
    t = _check_scale("the discrete Laplace scale", scale)
    out = np.empty(count, dtype=np.int64)
    scratch = _Scratch(min(max(8, count + count // 4), _CHUNK))
    filled = 0
    while filled < count:
        want = count - filled
        draws = min(max(8, want + want // 4), scratch.n)
        g = _geometric_float(stream, t, draws, scratch)
        negative = _signs(stream, draws)
        keep = ~(negative & (g == 0.0))  # (−, 0) is rejected so that 0 is not counted twice
        _apply_signs(g, negative, scratch.f[0][:draws])
        y = g[keep][:want]
        out[filled:filled + y.size] = y  # exact integers < 2^53: the int64 cast is exact
        filled += y.size
    return out


def discrete_gaussian(stream: RandomStream, sigma2: float, count: int) -> np.ndarray:
    """``count`` i.i.d. draws of the discrete Gaussian N_Z(0, σ²): P(y) ∝ exp(−y²/(2σ²)) (int64).

    ``sigma2`` σ² (grid steps², the exact dyadic rational of the float) with σ in (0, 2^44].
    Canonne, Kamath & Steinke 2020, Algorithm 3, vectorised with lazy exact decisions (module doc).
    """
    s2 = float(sigma2)
    sigma = _check_scale("the discrete Gaussian sigma", math.sqrt(s2) if s2 > 0 else 0.0)
    t = float(math.floor(sigma) + 1)
    c = s2 / t  # σ²/t, rounded once: relative error ≤ 2^-53
    s2_exact, t_exact = Fraction(s2), Fraction(t)
    inv_2s2 = 0.5 / s2
    # γ = (|y| − σ²/t)²/(2σ²).  c = σ²/t is rounded once and diff = |y| − c once, so
    # |diff − (|y| − σ²/t)| ≤ e = (c + |diff|)·2^-52 (|y| < 2^53 is exact); then
    # |γ̂ − γ| ≤ (2|diff|·e + e²)/(2σ²) + 3 ulps of γ̂ ≤ (c + |diff|)²/(2σ²)·2^-51 + 3·2^-53·γ̂, and
    # (c + |diff|)² ≤ 2c² + 2diff² makes that ≤ (γ̂ + c²/(2σ²))·2^-49.  The allowance counts 4× it.
    err_floor = c * c * inv_2s2 * 2.0**-47
    out = np.empty(count, dtype=np.int64)
    scratch = _Scratch(min(max(8, int(count * _ROUND_FACTOR)), _CHUNK))
    filled = 0
    while filled < count:
        want = count - filled
        draws = min(max(8, int(want * _ROUND_FACTOR)), scratch.n)
        mag = _geometric_float(stream, t, draws, scratch)  # in scratch.f[1]
        negative = _signs(stream, draws)
        gamma, gamma_err = scratch.f[0][:draws], scratch.f[2][:draws]
        np.subtract(mag, c, out=gamma)
        gamma *= gamma
        gamma *= inv_2s2
        np.multiply(gamma, 2.0**-47, out=gamma_err)
        gamma_err += err_floor

        def exact_gamma(i: int, _mag=mag) -> Fraction:
            d = int(_mag[i]) - s2_exact / t_exact
            return d * d / (2 * s2_exact)

        ok = _accept_exp_neg(stream, gamma, gamma_err, exact_gamma, scratch)
        ok &= ~(negative & (mag == 0.0))  # (−, 0) is rejected so that 0 is not counted twice
        _apply_signs(mag, negative, scratch.f[0][:draws])
        y = mag[ok][:want]
        out[filled:filled + y.size] = y  # exact integers < 2^53: the int64 cast is exact
        filled += y.size
    return out


# -------------------------------------------------------------------------------------------------
# the party's noise for a plan
# -------------------------------------------------------------------------------------------------

#: Per-draw magnitude bounds of the ring headroom check.  The discrete Gaussian N_Z(0, σ²) is
#: σ-subgaussian (Canonne, Kamath & Steinke 2020, Corollary 9): P(|X| ≥ 20σ) ≤ 2e^-200.  DLap(t):
#: P(|Y| ≥ 100t) ≤ e^-100; a Pólya piece of share r ≤ 1 too (NB(r, p) is stochastically below the
#: geometric NB(1, p), so P(|NB − NB'| ≥ 100t) ≤ 2e^-100).
GAUSSIAN_TAIL_SIGMAS = 20.0
LAPLACE_TAIL_SCALES = 100.0


def _multiplicities(multiplicity, shape: tuple[int, ...]) -> np.ndarray | None:
    """None when every multiplicity is 1, else an int64 array of ``shape`` (all ≥ 1)."""
    if isinstance(multiplicity, (int, np.integer)) and not isinstance(multiplicity, bool):
        if multiplicity < 1:
            raise ValueError(f"multiplicity must be >= 1, got {multiplicity}")
        return None if multiplicity == 1 else np.full(shape, int(multiplicity), dtype=np.int64)
    arr = np.asarray(multiplicity)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"multiplicity must be an integer or an integer array, got dtype {arr.dtype}")
    if arr.size and int(arr.min()) < 1:
        raise ValueError(f"multiplicity must be >= 1, got a minimum of {int(arr.min())}")
    return np.broadcast_to(arr, shape).astype(np.int64)


def sample_noise(stream: RandomStream, plan, shape: tuple[int, ...], *, multiplicity=1) -> np.ndarray:
    """Integer noise in grid steps (int64, ``shape``) for a grid :class:`~ltm.dp.calibration.NoisePlan`.

    Gaussian: each element is N_Z(0, M·σ_c²) with M its ``multiplicity`` (an int or an int array
    broadcastable to ``shape``; M = 1: one client's draw).  For M > 1 the element stands in for the
    M clients' draws of one party in one entry and has their variance; it is *not* distributed as
    their sum, and :func:`ltm.dp.accounting.job_event` accounts only M = 1 draws (the L-fold sum) —
    per-entry draws need their own accounting (the heterogeneous sum of discrete Gaussians).
    Laplace: each element is NB(r, p) − NB(r, p), p = e^{−1/t}, with r = min(M, P)/P for a plan
    split into P = ``plan.laplace_pieces`` pieces (:func:`laplace_element_pieces`): one (client,
    piece) pair's share 1/L, an aggregate of M pairs that of min(M, L) pairs (L honest pairs make
    one DLap(t), so more than L in one party's draw would only add noise; ltm/dp/polya.py).  A
    whole-draw plan (P = 1: paper) draws one DLap(t) per element.
    A plan with per-entry ``noise_factors`` (W,) scales element j of the last axis to
    N_Z(0, M·factor_j·σ_c²) (the gram release's ½ off the diagonal).
    """
    if not plan.on_grid:
        raise ValueError("a continuous noise plan (frac_bits = 0) cannot be sampled: a party needs a grid plan")
    shape = tuple(int(x) for x in shape)
    count = int(np.prod(shape, dtype=np.int64))
    mult = _multiplicities(multiplicity, shape)
    if plan.mechanism == "laplace":
        return _sample_laplace(stream, plan, count, mult).reshape(shape)
    factors = getattr(plan, "noise_factors", None)
    if factors is not None:  # per-entry scales along the last axis (the gram release: ltm/lifts.py)
        return _sample_scaled(stream, plan.grid_sigma2, np.asarray(factors, dtype=np.float64), shape, mult)
    if mult is None:
        return discrete_gaussian(stream, plan.grid_sigma2, count).reshape(shape)
    out = np.empty(count, dtype=np.int64)
    flat = mult.reshape(-1)
    for m in np.unique(flat):
        where = np.flatnonzero(flat == m)
        # rounded up: the product may round down by half an ulp, and more noise is post-processing
        out[where] = discrete_gaussian(stream, math.nextafter(plan.grid_sigma2 * float(m), math.inf), where.size)
    return out.reshape(shape)


def laplace_element_pieces(plan, multiplicity):
    """The (client, piece) shares one Laplace noise element of :func:`sample_noise` carries:
    min(M, P) for multiplicity M (an int or an int array) and P = ``plan.laplace_pieces``.  Its
    variance is that many times a pair's, ``2p/(P·(1 − p)²)`` grid steps² (p = e^{−1/t})."""
    return np.minimum(multiplicity, plan.laplace_pieces)


def _sample_laplace(stream: RandomStream, plan, count: int, mult: np.ndarray | None) -> np.ndarray:
    """:func:`sample_noise`'s Laplace elements (flat): one vectorised draw per distinct share."""
    t, pieces = plan.grid_scale, plan.laplace_pieces
    if pieces == 1:  # whole draws (paper, or L = 1): the discrete Laplace itself
        return discrete_laplace(stream, t, count)
    if mult is None:
        return polya_laplace(stream, t, Fraction(1, pieces), count)
    out = np.empty(count, dtype=np.int64)
    shares = laplace_element_pieces(plan, mult.reshape(-1))
    for share in np.unique(shares):
        where = np.flatnonzero(shares == share)
        out[where] = polya_laplace(stream, t, Fraction(int(share), pieces), where.size)
    return out


def _sample_scaled(stream: RandomStream, sigma2: float, factors: np.ndarray, shape: tuple[int, ...],
                   mult: np.ndarray | None) -> np.ndarray:
    """:func:`sample_noise` for a plan with per-entry variance ``factors`` (W,) on the last axis:
    one vectorised draw per factor class (the W columns sharing a factor) and multiplicity."""
    if not shape or shape[-1] != factors.size:
        raise ValueError(f"the plan has {factors.size} per-entry noise factors; the last axis of "
                         f"shape {shape} must match")
    out = np.empty(shape, dtype=np.int64)
    for factor in np.unique(factors):
        cols = np.flatnonzero(factors == factor)
        sub_shape = (*shape[:-1], cols.size)
        if mult is None:
            # σ²·factor: exact for a power of two (the gram's 1 and ½), else rounded up
            variance = sigma2 * float(factor)
            if math.frexp(float(factor))[0] != 0.5:
                variance = math.nextafter(variance, math.inf)
            out[..., cols] = discrete_gaussian(stream, variance, math.prod(sub_shape)).reshape(sub_shape)
            continue
        m_flat = mult[..., cols].reshape(-1)
        flat = np.empty(m_flat.size, dtype=np.int64)
        for m in np.unique(m_flat):
            where = np.flatnonzero(m_flat == m)
            flat[where] = discrete_gaussian(stream, math.nextafter(sigma2 * float(factor) * float(m), math.inf),
                                            where.size)
        out[..., cols] = flat.reshape(sub_shape)
    return out


def widest_noise_draw(plan, multiplicity: int = 1) -> float:
    """The largest scale (grid steps) one draw of ``plan`` has: σ_c·√multiplicity for the discrete
    Gaussian, t for the discrete Laplace (the parameter of its Pólya pieces whatever their share); 0 for a
    continuous plan.  :func:`sample_noise` refuses a scale above :data:`MAX_GRID_SCALE`."""
    if not plan.on_grid:
        return 0.0
    if plan.mechanism == "laplace":
        return plan.grid_scale
    return math.sqrt(plan.grid_sigma2 * multiplicity)


def noise_tail_bound(plan, multiplicity: int = 1) -> float:
    """A magnitude (data units) no single noise element exceeds except with probability < e^-100."""
    if plan.mechanism == "gaussian":
        return GAUSSIAN_TAIL_SIGMAS * plan.sigma_client * math.sqrt(multiplicity)
    return LAPLACE_TAIL_SCALES * plan.laplace_scale

"""Exact Pólya (negative binomial) noise: the pieces of a distributed discrete Laplace (docs/architecture.md §4).

DLap(t) = G₁ − G₂ for two independent geometrics with P(G ≥ k) = p^k, p = e^{−1/t}, and a geometric
is infinitely divisible: it is the sum of L independent negative binomials NB(1/L, p),

    P(K = k) = Γ(k + r)/(Γ(r)·k!) · (1 − p)^r · p^k,   r = 1/L  (pgf ((1 − p)/(1 − pz))^r),

so L contributors who each add NB(1/L, p) − NB(1/L, p) together add exactly one DLap(t), and any
number h of them adds NB(h/L, p) − NB(h/L, p) (:func:`polya_laplace` with shape h/L).  This module
samples NB(r, p) for a rational shape r exactly, given uniform bits from the CSPRNG.

**The construction** (compound Poisson, no Gamma function anywhere).  With λ₀ = −ln(1 − p), the pgf
is exp(r·λ₀·(ln(1 − pz)/ln(1 − p) − 1)): K is the sum, over the points s of a Poisson process of
rate r on (0, λ₀), of independent marks X(s) = 1 + Geo(1 − e^{−s}), where Geo(z) is the geometric
with P(Geo ≥ j) = z^j.  (Check: the mark of a point uniform on (0, λ₀) has
P(X = k) = (1/λ₀)∫₀^{λ₀} e^{−s}(1 − e^{−s})^{k−1} ds = p^k/(k·λ₀), the logarithmic law whose
compound Poisson is NB(r, p).)  The points are s_m = (E₁ + … + E_m)/r with E_i = −ln V_i for
uniforms V_i, so every decision is a comparison of uniforms with algebraic numbers:

* point m exists  ⇔  s_m < λ₀  ⇔  Π_m := (V₁⋯V_m)^{1/r} > 1 − p;
* its mark is 1 + max{j : W < (1 − Π_m)^j} for one more uniform W.

The integer part of r is drawn as ⌊r⌋ whole geometrics (:func:`ltm.dp.noise._geometric_float`), so the
process only runs for the fractional part and has r·λ₀ < ln(t) + 1 points on average: for r = 1/L
most draws are a single uniform that lands beyond λ₀ (K = 0).

**Lazy exactness**, as for the other samplers (:mod:`ltm.dp.noise`).  Each decision is first taken
in float64 on certified intervals: the 64-bit word U of a uniform brackets −ln V between
−ln((U + 1)·2^-64) and −ln(U·2^-64), and every later rounding widens the interval by a generous
relative allowance (``_REL``, ≥ 4× the roundings of numpy's log/exp/expm1/log1p at ≤ 4 ulps).  An
element whose interval straddles the decision goes to :func:`_finish_exactly`, which keeps its
uniforms as lazy bit strings (the same words, extended by further stream words) and decides with
dyadic interval arithmetic rounded outward (integers only, :class:`_Dyadic`), refining until the
interval separates.  A float decision holds for every extension of the words it saw, so the two
paths together sample exactly the stated distribution.

**Vectorised.**  The first point is decided for every element by one integer comparison of its
word with a certified cut (V₁ ≤ e^{−r·λ₀}: no point); then one numpy round per Poisson point over
the elements still running (a shrinking array: each round keeps an element with probability below
1 − (1 − p)^r); the exact path is a Python loop over the rare ambiguous elements only.  Measured at
t = 3·10^8 (1 CPU, loaded machine): ~120 ns per piece NB − NB' at r = 1/57000, ~180 ns at 1/1000,
~0.7 µs at 1/50 and ~20 µs at ½ (r·λ₀ ≈ 10 points per draw); DLap(t) itself ~230 ns.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ltm.randomness import RandomStream

__all__ = ["negative_binomial", "polya_laplace", "polya_variance"]

_TWO_M64 = 2.0**-64
#: Relative allowance per float step (log/exp/expm1/log1p within 4 ulps = 2^-50, conversions 2^-53).
_REL = 2.0**-46
#: Absolute allowance of −ln V near V = 1 (the rounded argument's half-ulp 2^-54, over-counted).
_ABS = 2.0**-50
#: Working precision (bits) the exact path starts from; it adds 64 bits per refinement.
_START_BITS = 128


# -------------------------------------------------------------------------------------------------
# dyadic interval arithmetic, rounded outward (the exact path)
# -------------------------------------------------------------------------------------------------


class _Dyadic:
    """A non-negative m·2^e; ``round(prec, up)`` keeps ``prec`` significant bits, rounding down or up."""

    __slots__ = ("e", "m")

    def __init__(self, m: int, e: int) -> None:
        self.m, self.e = m, e

    def round(self, prec: int, up: bool) -> _Dyadic:
        shift = self.m.bit_length() - prec
        if shift <= 0:
            return self
        return _Dyadic(-((-self.m) >> shift) if up else self.m >> shift, self.e + shift)

    def mul(self, other: _Dyadic, prec: int, up: bool) -> _Dyadic:
        return _Dyadic(self.m * other.m, self.e + other.e).round(prec, up)

    def pow(self, k: int, prec: int, up: bool) -> _Dyadic:
        """self^k with every product rounded the same way (so a bound stays a bound)."""
        out, base = _Dyadic(1, 0), self
        while k:
            if k & 1:
                out = out.mul(base, prec, up)
            k >>= 1
            if k:
                base = base.mul(base, prec, up)
        return out

    def root(self, a: int, prec: int, up: bool) -> _Dyadic:
        """self^(1/a), ``prec`` bits, rounded down or up (an integer a-th root of a shifted mantissa)."""
        if a == 1 or self.m == 0:
            return self
        shift = max(0, a * prec - self.m.bit_length())
        shift += (self.e - shift) % a  # the remaining exponent must divide by a
        big, e = self.m << shift, (self.e - shift) // a
        r = _iroot(big, a)
        return _Dyadic(r + 1 if up and r**a != big else r, e)

    def one_minus(self) -> _Dyadic:
        """1 − self, exactly (self ≤ 1)."""
        e = min(self.e, 0)
        return _Dyadic((1 << -e) - (self.m << (self.e - e)), e)

    def less(self, other: _Dyadic) -> bool:
        e = min(self.e, other.e)
        return (self.m << (self.e - e)) < (other.m << (other.e - e))


def _iroot(n: int, a: int) -> int:
    """⌊n^(1/a)⌋ for integers n ≥ 0, a ≥ 1 (Newton's method from above)."""
    if n < 2:
        return n
    x = 1 << -(-n.bit_length() // a)  # ≥ n^(1/a)
    while True:
        y = ((a - 1) * x + n // x ** (a - 1)) // a
        if y >= x:
            return x
        x = y


class _Lazy:
    """A uniform V on (0, 1) of which the first ``bits`` bits (the integer ``v``) are drawn so far."""

    __slots__ = ("bits", "v")

    def __init__(self, word: int) -> None:
        self.v, self.bits = int(word), 64

    def extend(self, stream: RandomStream) -> None:
        self.v = (self.v << 64) | int(stream.uint64(1)[0])
        self.bits += 64

    def lo(self) -> _Dyadic:
        return _Dyadic(self.v, -self.bits)

    def hi(self) -> _Dyadic:
        return _Dyadic(self.v + 1, -self.bits)

    def neg_log(self) -> float:
        """≈ −ln V (float, for estimates only)."""
        return self.bits * math.log(2.0) - math.log(self.v + 0.5)


class _Exact:
    """The exact decisions of one element: its lazy uniforms V₁…V_m, the shape a/b and p = e^{−1/t}."""

    def __init__(self, stream: RandomStream, t: float, a: int, b: int, words: list[int]) -> None:
        self.stream, self.t, self.a, self.b = stream, Fraction(t), a, b
        self.vs = [_Lazy(w) for w in words]
        self.prec = _START_BITS

    def _refine(self, extra: list[_Lazy]) -> None:
        for lazy in (*self.vs, *extra):
            lazy.extend(self.stream)
        self.prec += 64

    def _p_bounds(self) -> tuple[_Dyadic, _Dyadic]:
        from ltm.dp.noise import exp_neg_bounds  # noise imports this module

        lo, hi = exp_neg_bounds(1 / self.t, self.prec)
        return _Dyadic(lo, -self.prec), _Dyadic(hi, -self.prec)

    def _pi_bounds(self) -> tuple[_Dyadic, _Dyadic]:
        """Bounds on (V₁⋯V_m)^b (Π_m = that to the power 1/a)."""
        lo, hi = _Dyadic(1, 0), _Dyadic(1, 0)
        for lazy in self.vs:
            lo, hi = lo.mul(lazy.lo(), self.prec, False), hi.mul(lazy.hi(), self.prec, True)
        return lo.pow(self.b, self.prec, False), hi.pow(self.b, self.prec, True)

    def point_exists(self) -> bool:
        """Whether (V₁⋯V_m)^(b/a) > 1 − p, i.e. (V₁⋯V_m)^b > (1 − p)^a."""
        while True:
            p_lo, p_hi = self._p_bounds()
            q_lo = p_hi.one_minus().pow(self.a, self.prec, False)
            q_hi = p_lo.one_minus().pow(self.a, self.prec, True)
            pi_lo, pi_hi = self._pi_bounds()
            if q_hi.less(pi_lo):  # Π > 1 − p (to the power a): a point
                return True
            if pi_hi.less(q_lo):  # Π < 1 − p (equality has probability 0)
                return False
            self._refine([])

    def _z_bounds(self) -> tuple[_Dyadic, _Dyadic]:
        """Bounds on the mark's ratio Z = 1 − (V₁⋯V_m)^(b/a)."""
        pi_lo, pi_hi = self._pi_bounds()
        return pi_hi.root(self.a, self.prec, True).one_minus(), pi_lo.root(self.a, self.prec, False).one_minus()

    def _w_below_z_pow(self, w: _Lazy, j: int) -> bool:
        """Whether W < Z^j, decided exactly."""
        while True:
            z_lo, z_hi = self._z_bounds()
            if w.hi().less(z_lo.pow(j, self.prec, False)):
                return True
            if z_hi.pow(j, self.prec, True).less(w.lo()):
                return False
            self._refine([w])

    def mark(self, w: _Lazy) -> int:
        """The mark 1 + max{j : W < Z^j} of the current point, from a float estimate stepped exactly."""
        s = sum(v.neg_log() for v in self.vs) * self.b / self.a
        lam = -math.log(-math.expm1(-s)) if s <= math.log(2.0) else -math.log1p(-math.exp(-s))
        j = int(min(w.neg_log() / lam, 2.0**60)) if lam > 0 else 0
        while j > 0 and not self._w_below_z_pow(w, j):
            j -= 1
        while self._w_below_z_pow(w, j + 1):
            j += 1
        return 1 + j


def _finish_exactly(stream: RandomStream, t: float, a: int, b: int, words: list[int], w_word: int | None) -> int:
    """The rest of one element's count, exactly: its V words so far (the last one's point undecided
    when ``w_word`` is None; else that point exists and ``w_word`` starts its mark's uniform)."""
    ex = _Exact(stream, t, a, b, words)
    total = 0
    if w_word is None and not ex.point_exists():
        return 0
    w = _Lazy(w_word if w_word is not None else int(stream.uint64(1)[0]))
    while True:
        total += ex.mark(w)
        ex.vs.append(_Lazy(int(stream.uint64(1)[0])))
        if not ex.point_exists():
            return total
        w = _Lazy(int(stream.uint64(1)[0]))


# -------------------------------------------------------------------------------------------------
# the vectorised float path
# -------------------------------------------------------------------------------------------------


def _neg_log_bounds(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Certified bounds lo ≤ −ln V ≤ hi for V ∈ [U, U + 1]·2^-64 (hi = inf for U = 0)."""
    x = words.astype(np.float64)  # relative error ≤ 2^-53
    with np.errstate(divide="ignore"):
        hi = -np.log(x * _TWO_M64)
        lo = -np.log((x + 1.0) * _TWO_M64)
    hi = hi * (1.0 + _REL) + _ABS
    lo = np.maximum(lo * (1.0 - _REL) - _ABS, 0.0)
    return lo, hi


def _mark_rate(s: np.ndarray) -> np.ndarray:
    """≈ −ln(1 − e^{−s}) (the mark's −ln Z at point s ≥ 0), within a relative 2^-48 (expm1 below ln 2,
    where 1 − e^{−s} ≤ ½ keeps the log well conditioned; log1p above)."""
    small = s <= math.log(2.0)
    out = np.empty_like(s)
    with np.errstate(divide="ignore"):
        out[small] = -np.log(-np.expm1(-s[small]))
    out[~small] = -np.log1p(-np.exp(-s[~small]))
    return out


def _lambda0_bounds(t: float) -> tuple[float, float]:
    """Bounds on λ₀ = −ln(1 − e^{−1/t}) (float, widened by the allowance)."""
    lam = -math.log(-math.expm1(-1.0 / t))  # the log's absolute error ≤ 2^-50 (q to 4 ulps) + its own
    return lam * (1.0 - _REL) - 2.0**-44, lam * (1.0 + _REL) + 2.0**-44


class _Run:
    """The Poisson-process rounds of one :func:`_fractional` call: the running elements' state."""

    def __init__(self, stream: RandomStream, t: float, a: int, b: int, count: int) -> None:
        self.stream, self.t, self.a, self.b = stream, t, a, b
        self.out = np.zeros(count, dtype=np.int64)
        self.history: list[tuple[np.ndarray, np.ndarray]] = []  # (element indices, V words) per round
        lam_lo, lam_hi = _lambda0_bounds(t)
        r = a / b
        self.thr = (lam_lo * r * (1.0 - _REL), lam_hi * r * (1.0 + _REL))  # r·λ₀ (Y < r·λ₀: a point)
        # The first point exists iff V₁ > e^{−r·λ₀}: a word U with (U + 1)·2^-64 below a certified lower
        # bound of that has none (most of them for r = 1/L), decided by one integer comparison.
        self.cut = max(0, math.floor(math.exp(-self.thr[1]) * (1.0 - _REL) * 2.0**64) - 1)
        words = stream.uint64(count)
        self.idx = np.flatnonzero(words >= np.uint64(self.cut))
        self.first: np.ndarray | None = words[self.idx]
        self.y_lo = np.zeros(self.idx.size)
        self.y_hi = np.zeros(self.idx.size)

    def words_of(self, i: int) -> list[int]:
        """The V words element ``i`` has drawn, in order."""
        out = []
        for members, words in self.history:
            k = np.searchsorted(members, i)
            if k < members.size and members[k] == i:
                out.append(int(words[k]))
        return out

    def exact(self, where: np.ndarray, w_words: np.ndarray | None) -> None:
        for pos, i in enumerate(where):
            i = int(i)
            w = None if w_words is None else int(w_words[pos])
            self.out[i] += _finish_exactly(self.stream, self.t, self.a, self.b, self.words_of(i), w)

    def round(self) -> None:
        """One point per running element: does it exist, and its mark."""
        words, self.first = (self.first, None) if self.first is not None else (self.stream.uint64(self.idx.size), None)
        self.history.append((self.idx, words))
        lo, hi = _neg_log_bounds(words)
        self.y_lo = (self.y_lo + lo) * (1.0 - _REL)
        self.y_hi = (self.y_hi + hi) * (1.0 + _REL)
        inside = self.y_hi < self.thr[0]
        unsure = ~inside & ~(self.y_lo > self.thr[1])
        self.exact(self.idx[unsure], None)
        keep = np.flatnonzero(inside)
        self.idx, self.y_lo, self.y_hi = self.idx[keep], self.y_lo[keep], self.y_hi[keep]
        if not keep.size:
            return
        w_words = self.stream.uint64(keep.size)
        w_lo, w_hi = _neg_log_bounds(w_words)
        scale = self.b / self.a
        rate_lo = _mark_rate(self.y_hi * scale * (1.0 + _REL)) * (1.0 - _REL)  # −ln Z decreases in s
        rate_hi = _mark_rate(self.y_lo * scale * (1.0 - _REL)) * (1.0 + _REL)
        with np.errstate(divide="ignore", invalid="ignore"):
            g_lo = np.floor(w_lo / rate_hi * (1.0 - _REL))
            g_hi = np.floor(w_hi / rate_lo * (1.0 + _REL))
        sure = (g_lo == g_hi) & (g_hi < 2.0**53)
        self.out[self.idx[sure]] += 1 + g_lo[sure].astype(np.int64)
        self.exact(self.idx[~sure], w_words[~sure])
        self.idx, self.y_lo, self.y_hi = self.idx[sure], self.y_lo[sure], self.y_hi[sure]


def _fractional(stream: RandomStream, t: float, a: int, b: int, count: int) -> np.ndarray:
    """``count`` i.i.d. NB(a/b, e^{−1/t}) for 0 < a/b < 1 (the Poisson-process construction)."""
    run = _Run(stream, t, a, b, count)
    while run.idx.size:
        run.round()
    return run.out


def negative_binomial(stream: RandomStream, scale: float, shape: Fraction | int, count: int) -> np.ndarray:
    """``count`` i.i.d. draws (int64) of NB(r, p): P(k) = Γ(k + r)/(Γ(r)k!)·(1 − p)^r·p^k, p = e^{−1/t}.

    ``scale`` t (grid steps, the exact dyadic rational of the float) in (0, 2^44]; ``shape`` r a
    positive rational (a :class:`~fractions.Fraction` or an int).  r = 1 is the geometric magnitude
    of DLap(t); a sum of independent NB(r_i, p) is NB(Σ r_i, p).
    """
    from ltm.dp.noise import _check_scale, _geometric_float  # noise imports this module

    t = _check_scale("the negative binomial scale", scale)
    r = Fraction(shape)
    if r <= 0:
        raise ValueError(f"the negative binomial shape must be > 0, got {shape!r}")
    whole, frac = divmod(r, 1)
    out = np.zeros(count, dtype=np.int64)
    for _ in range(int(whole)):  # whole geometrics, one vectorised draw each
        out += _geometric_float(stream, t, count).astype(np.int64)
    if frac and count:
        out += _fractional(stream, t, frac.numerator, frac.denominator, count)
    return out


def polya_laplace(stream: RandomStream, scale: float, shape: Fraction | int, count: int) -> np.ndarray:
    """``count`` i.i.d. NB(r, p) − NB(r, p) (int64), p = e^{−1/t}: 1/r of them sum to one DLap(t)."""
    first = negative_binomial(stream, scale, shape, count)
    return first - negative_binomial(stream, scale, shape, count)


def polya_variance(scale: float, shape: float) -> float:
    """Var(NB(r, p) − NB(r, p)) = 2r·p/(1 − p)² (grid steps²), p = e^{−1/t}: r = 1 is DLap(t)'s."""
    return 2.0 * shape * math.exp(-1.0 / scale) / math.expm1(-1.0 / scale) ** 2

"""The exact Pólya (negative binomial) sampler of ltm.dp.polya: the pieces of the distributed discrete Laplace.

Goodness of fit: a chi-square test over the bins of the exact pmf (mpmath's Γ), at a significance of
1e-7 per test, so each test flakes with probability < 1e-6.  The exact path is forced by widening the
float allowances until most decisions are ambiguous: the distribution must not change.
"""
from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from ltm.dp import polya
from ltm.dp.polya import negative_binomial, polya_laplace, polya_variance
from ltm.randomness import Randomness
from tests.unit.ltm.dp.test_dp_noise import ALPHA, _chi_square_p, _dlap_pmf


def _stream(label: str):
    return Randomness.seeded_insecure(f"dp-polya-{label}").stream()


def _nb_pmf(t: float, r: Fraction):
    p = mpmath.exp(-1 / mpmath.mpf(t))
    rr = mpmath.mpf(r.numerator) / r.denominator

    def pmf(k: int):
        if k < 0:
            return mpmath.mpf(0)
        return mpmath.exp(mpmath.loggamma(k + rr) - mpmath.loggamma(rr) - mpmath.loggamma(k + 1)) \
            * (1 - p) ** rr * p**k
    return pmf


CASES = [(3.0, Fraction(1, 3)), (2.5, Fraction(2, 5)), (4.0, Fraction(1)), (1.5, Fraction(7, 4)),
         (0.7, Fraction(1, 2)), (12.0, Fraction(1, 20))]


@pytest.mark.parametrize("t,r", CASES)
def test_negative_binomial_has_the_exact_pmf(t, r):
    draws = negative_binomial(_stream(f"{t}-{r}"), t, r, 200_000)
    assert draws.dtype == np.int64 and draws.min() >= 0
    assert _chi_square_p(draws, _nb_pmf(t, r)) > ALPHA


@pytest.mark.parametrize("t,r", [(3.0, Fraction(1, 3)), (2.5, Fraction(3, 5)), (1.5, Fraction(5, 4))])
def test_the_exact_path_keeps_the_distribution(monkeypatch, t, r):
    """Allowances so wide that most float decisions are ambiguous: the exact path decides them."""
    monkeypatch.setattr(polya, "_REL", 0.05)
    monkeypatch.setattr(polya, "_ABS", 0.05)
    calls = []
    original = polya._finish_exactly
    monkeypatch.setattr(polya, "_finish_exactly", lambda *a: calls.append(a[-1]) or original(*a))
    draws = negative_binomial(_stream(f"exact-{t}-{r}"), t, r, 6_000)
    assert len(calls) > 600  # the exact path really ran, in both of its stages
    assert sum(w is None for w in calls) > 200 and sum(w is not None for w in calls) > 200
    assert _chi_square_p(draws, _nb_pmf(t, r)) > ALPHA


@pytest.mark.parametrize("L,t", [(1, 3.0), (3, 3.0), (8, 1.2)])
def test_L_pieces_sum_to_one_discrete_laplace(L, t):
    """Σ of L independent NB(1/L, p) − NB(1/L, p) is exactly DLap(t)."""
    n = 120_000
    pieces = polya_laplace(_stream(f"sum-{L}-{t}"), t, Fraction(1, L), n * L).reshape(L, n)
    assert _chi_square_p(pieces.sum(axis=0), _dlap_pmf(t)) > ALPHA


def test_large_scales_have_the_stated_moments():
    """t = 10^8 grid steps, r = 1/50: the mean r·p/(1 − p) within 6 standard errors."""
    n, t, r = 400_000, 1e8, Fraction(1, 50)
    x = negative_binomial(_stream("big"), t, r, n).astype(float)
    p = math.exp(-1 / t)
    mean, var = float(r) * p / (1 - p), float(r) * p / (1 - p) ** 2
    assert abs(x.mean() / mean - 1) < 6 * math.sqrt(var / n) / mean
    y = polya_laplace(_stream("bigd"), t, Fraction(50), 20_000).astype(float)  # 50 whole DLap each
    assert abs(np.mean(y * y) / polya_variance(t, 50.0) - 1) < 6 * math.sqrt(5.0 / 20_000)


def test_variance_formula():
    t, r = 3.7, 0.3
    p = math.exp(-1 / t)
    assert polya_variance(t, r) == pytest.approx(2 * r * p / (1 - p) ** 2, rel=1e-14)
    q = math.exp(-1 / t)  # r = 1: the discrete Laplace's 2q/(1 − q)²
    assert polya_variance(t, 1.0) == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-14)


def test_draws_are_reproducible_and_checked():
    a = negative_binomial(_stream("r"), 5.0, Fraction(2, 7), 1000)
    b = negative_binomial(_stream("r"), 5.0, Fraction(2, 7), 1000)
    assert np.array_equal(a, b)
    assert negative_binomial(_stream("r"), 5.0, Fraction(2, 7), 0).shape == (0,)
    with pytest.raises(ValueError, match="shape must be > 0"):
        negative_binomial(_stream("r"), 5.0, Fraction(0), 3)
    with pytest.raises(ValueError, match="negative binomial scale"):
        negative_binomial(_stream("r"), 0.0, Fraction(1, 2), 3)


@pytest.mark.parametrize("m,e,k", [(3, -2, 5), (12345, -20, 17), (2**70 + 1, -75, 3)])
def test_dyadic_powers_and_roots_bracket_the_value(m, e, k):
    x = polya._Dyadic(m, e)
    exact = Fraction(m) * Fraction(2) ** e
    lo, hi = x.pow(k, 40, False), x.pow(k, 40, True)
    assert Fraction(lo.m) * Fraction(2) ** lo.e <= exact**k <= Fraction(hi.m) * Fraction(2) ** hi.e
    assert Fraction(hi.m, lo.m) * Fraction(2) ** (hi.e - lo.e) < 1 + Fraction(k + 2, 2**36)
    r_lo, r_hi = x.root(k, 40, False), x.root(k, 40, True)
    assert (Fraction(r_lo.m) * Fraction(2) ** r_lo.e) ** k <= exact <= (Fraction(r_hi.m) * Fraction(2) ** r_hi.e) ** k
    assert r_hi.m - r_lo.m <= 1 and r_hi.e == r_lo.e
    assert polya._iroot(10**40 + 1, 4) == 10**10 and polya._iroot(10**40 - 1, 4) == 10**10 - 1


def test_exact_decisions_match_the_float_ones():
    """The exact path's point and mark agree with a direct float evaluation far from the boundaries."""
    t, stream = 3.0, _stream("decide")
    words = [3 << 62]  # V = 0.75: Π = 0.75^3 vs 1 − e^{−1/3} = 0.283 (r = 1/3): a point
    ex = polya._Exact(stream, t, 1, 3, words)
    assert ex.point_exists()
    ex2 = polya._Exact(stream, t, 1, 3, [1 << 62])  # V = 0.25: Π = 1/64 < 0.283: none
    assert not ex2.point_exists()
    z = 1 - 0.75**3
    w = polya._Lazy(1 << 60)  # W = 1/16: mark 1 + ⌊ln(1/16)/ln z⌋
    assert ex.mark(w) == 1 + math.floor(math.log(1 / 16) / math.log(z))


def test_iroot_is_the_floor_of_the_root():
    for a in range(1, 6):
        for n in range(400):
            r = polya._iroot(n, a)
            assert r**a <= n < (r + 1) ** a, (n, a)
    big = 3**200 + 5
    r = polya._iroot(big, 7)
    assert r**7 <= big < (r + 1) ** 7


def test_a_coarse_start_refines_and_keeps_the_distribution(monkeypatch):
    """A working precision of a few bits and wide float allowances: nearly every exact decision is
    ambiguous at first, so the exact path extends the uniforms from the stream and raises the
    precision until it separates, and the distribution is still the exact one."""
    monkeypatch.setattr(polya, "_START_BITS", 4)
    monkeypatch.setattr(polya, "_REL", 0.05)
    monkeypatch.setattr(polya, "_ABS", 0.05)
    refinements = []
    original = polya._Exact._refine
    monkeypatch.setattr(polya._Exact, "_refine", lambda self, extra: refinements.append(len(extra)) or
                        original(self, extra))
    t, r = 2.5, Fraction(2, 3)
    draws = negative_binomial(_stream("coarse"), t, r, 4_000)
    assert refinements.count(0) > 100 and sum(1 for k in refinements if k == 1) > 100  # both decisions refined
    assert _chi_square_p(draws, _nb_pmf(t, r)) > ALPHA


def test_refinement_extends_every_uniform_by_one_word():
    stream = _stream("extend")
    ex = polya._Exact(stream, 3.0, 1, 2, [5, 7])
    w = polya._Lazy(9)
    before = stream._word
    ex._refine([w])
    assert stream._word == before + 3 and ex.prec == polya._START_BITS + 64
    assert [v.bits for v in ex.vs] == [128, 128] and w.bits == 128
    assert ex.vs[0].v >> 64 == 5 and ex.vs[1].v >> 64 == 7 and w.v >> 64 == 9


@pytest.mark.parametrize("t,a,b", [(3.0, 1, 3), (1e8, 1, 1000), (0.4, 2, 5), (2.0**44, 1, 57_000)])
def test_the_first_round_cut_decides_only_certain_words(t, a, b):
    """A word U below the cut has (U + 1)·2^-64 ≤ e^{−(a/b)·λ₀} (no point, whatever V's later bits),
    and the cut is within a relative 2^-40 of that bound (so almost every such word is decided)."""
    mpmath.mp.prec = 200
    lam0 = -mpmath.log(1 - mpmath.exp(-1 / mpmath.mpf(t)))
    c = mpmath.exp(-mpmath.mpf(a) / b * lam0) * mpmath.mpf(2) ** 64
    run = polya._Run(_stream("cut"), t, a, b, 1000)
    assert run.cut + 1 <= c and run.cut >= c * (1 - mpmath.mpf(2) ** -40)
    assert run.idx.size == int((run.first >= np.uint64(run.cut)).sum())
    mpmath.mp.prec = 53


def test_lazy_uniform_and_dyadic_helpers_are_exact():
    lazy = polya._Lazy(5)
    assert (lazy.lo().m, lazy.lo().e, lazy.hi().m, lazy.hi().e) == (5, -64, 6, -64)
    assert lazy.neg_log() == pytest.approx(-math.log(5.5 * 2.0**-64), rel=1e-15)
    for m, e in ((3, -2), (1, 0), (0, 0), (0, 5), (7, -3)):
        one = polya._Dyadic(m, e).one_minus()
        assert Fraction(one.m) * Fraction(2) ** one.e == 1 - Fraction(m) * Fraction(2) ** e
    a, b = polya._Dyadic(3, -2), polya._Dyadic(6, -3)  # equal values: neither is less
    assert not a.less(b) and not b.less(a) and polya._Dyadic(5, -3).less(a)


def test_float_bounds_bracket_the_exact_values():
    """The certified float intervals contain mpmath's values (200 bits), and are not loose by more
    than a relative 2^-40: −ln V over a word's cell, λ₀ and the threshold r·λ₀."""
    mpmath.mp.prec = 200
    words = np.array([1, 2, 3, 2**52 - 1, 2**52, 2**63, 2**64 - 2**11, 2**64 - 1], dtype=np.uint64)
    lo, hi = polya._neg_log_bounds(words)
    for w, a, b in zip(words, lo, hi):
        v_lo, v_hi = mpmath.mpf(int(w)) / 2**64, mpmath.mpf(int(w) + 1) / 2**64
        assert a <= -mpmath.log(v_hi) and -mpmath.log(v_lo) <= b
        assert b - a <= -mpmath.log(v_lo) + mpmath.log(v_hi) + 2.0**-40 * (1 + b)
    for t in (0.3, 3.0, 1e8, 2.0**44):
        lam = -mpmath.log(1 - mpmath.exp(-1 / mpmath.mpf(t)))
        lam_lo, lam_hi = polya._lambda0_bounds(t)
        assert lam_lo <= lam <= lam_hi and lam_hi - lam_lo < 2.0**-40 * (1 + lam)
        run = polya._Run(_stream("thr"), t, 3, 7, 4)
        assert run.thr[0] <= lam * 3 / 7 <= run.thr[1] and run.thr[1] - run.thr[0] < 2.0**-40 * (1 + lam)
    mpmath.mp.prec = 53


def test_dyadic_roots_are_tight():
    x = polya._Dyadic(12345, -20)
    r_lo, r_hi = x.root(5, 60, False), x.root(5, 60, True)
    value = (Fraction(12345) / 2**20) ** Fraction(1, 5)
    assert Fraction(r_hi.m - r_lo.m) * Fraction(2) ** r_lo.e < 2 ** -50 * float(value)


class _Words:
    """A stream that returns ``words`` first, then the real stream's."""

    def __init__(self, words, label):
        self.queue, self.real = [int(w) for w in words], _stream(label)

    def uint64(self, n):
        head, self.queue = self.queue[:n], self.queue[n:]
        tail = self.real.uint64(n - len(head)) if n > len(head) else np.zeros(0, np.uint64)
        return np.concatenate([np.array(head, dtype=np.uint64), tail])


def _word_at(neg_log: float) -> int:
    """The 64-bit word U with U·2^-64 ≈ e^{−neg_log}."""
    return int(mpmath.floor(mpmath.exp(-mpmath.mpf(neg_log)) * 2**64))


def test_close_calls_go_to_the_exact_path(monkeypatch):
    """A first point within the certified error of r·λ₀, and a mark whose quotient is within it of
    an integer, are not decided in floats; the same cases a little farther away are."""
    t, a, b = 40.0, 1, 3
    calls = []
    monkeypatch.setattr(polya, "_finish_exactly", lambda *args: calls.append(args[-1]) or 0)
    lam_lo, lam_hi = polya._lambda0_bounds(t)
    r_lam = (lam_lo + lam_hi) / 2 * a / b
    # the point: −ln V just inside r·λ₀ (by 2^-47 relative: within the error) and well inside (by 1e-6)
    run = polya._Run(_Words([_word_at(r_lam * (1 - 2.0**-47)), _word_at(r_lam * (1 - 1e-6))], "close"), t, a, b, 2)
    run.round()
    assert calls == [None] and 1 in run.idx.tolist() + [int(i) for i in np.flatnonzero(run.out)]
    # the mark of a point at y: E_w/rate within 2^-43 (relative, inside the ~2^-42.5 the allowances
    # add up to here) of an integer k on either side, and 1e-6 away
    y = r_lam / 2
    rate = float(-mpmath.log(1 - mpmath.exp(-mpmath.mpf(y) * b / a)))
    k = 7
    for offset, exact in ((2.0**-43, True), (1e-6, False), (-(2.0**-43), True)):
        calls.clear()
        run = polya._Run(_Words([_word_at(y), _word_at(rate * k * (1 + offset))], f"mark{offset}"), t, a, b, 1)
        run.round()
        assert (calls == [_word_at(rate * k * (1 + offset))]) is exact, offset
        if not exact:
            assert run.out[0] == 1 + (k if offset > 0 else k - 1)

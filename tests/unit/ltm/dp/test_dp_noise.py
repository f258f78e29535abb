"""The exact integer samplers of ltm.dp.noise: their distributions, their exact fallback, their bounds.

Goodness of fit: a chi-square test over the bins of the exact pmf (mpmath), run at a significance
of 1e-7 per test, so each test flakes with probability < 1e-6.  The fallback path (ambiguous float
decisions finished in exact integers) is forced by widening the certified error allowances: the
distribution must stay exactly the same.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import scipy.stats

import ltm.dp.noise as noise
from ltm.dp.noise import discrete_gaussian, discrete_laplace, exp_neg_bounds
from ltm.randomness import Randomness

ALPHA = 1e-7


def _stream(label: str):
    return Randomness.seeded_insecure(f"dp-noise-{label}").stream()


def _chi_square_p(draws: np.ndarray, pmf) -> float:
    """p-value of a chi-square fit of integer draws to ``pmf(y)`` (bins with expectation ≥ 20, tails pooled)."""
    n = draws.size
    lo, hi = int(draws.min()), int(draws.max())
    ys = list(range(lo - 2, hi + 3))
    probs = np.array([float(pmf(y)) for y in ys])
    assert abs(sum(float(pmf(y)) for y in range(lo - 200, hi + 200)) - 1) < 1e-9
    counts = np.array([(draws == y).sum() for y in ys], dtype=float)
    # pool bins from the outside in until every pooled bin expects ≥ 20 draws
    keep = probs * n >= 20
    centre_p, centre_c = probs[keep], counts[keep]
    tail_p, tail_c = 1.0 - centre_p.sum(), n - centre_c.sum()
    exp = np.append(centre_p * n, tail_p * n)
    obs = np.append(centre_c, tail_c)
    if exp[-1] < 1e-9:
        exp, obs = exp[:-1], obs[:-1]
    return float(scipy.stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def _dgauss_pmf(sigma2: float):
    norm = mpmath.nsum(lambda k: mpmath.exp(-k * k / (2 * mpmath.mpf(sigma2))), [-mpmath.inf, mpmath.inf])
    return lambda y: mpmath.exp(-mpmath.mpf(y) ** 2 / (2 * mpmath.mpf(sigma2))) / norm


def _dlap_pmf(t: float):
    q = mpmath.exp(-1 / mpmath.mpf(t))
    return lambda y: (1 - q) / (1 + q) * q ** abs(y)


@pytest.mark.parametrize("sigma2", [0.3, 2.25, 17.0])
def test_discrete_gaussian_has_the_exact_pmf(sigma2):
    draws = discrete_gaussian(_stream(f"g{sigma2}"), sigma2, 200_000)
    assert draws.dtype == np.int64
    assert _chi_square_p(draws, _dgauss_pmf(sigma2)) > ALPHA


@pytest.mark.parametrize("t", [0.7, 3.0, 12.5])
def test_discrete_laplace_has_the_exact_pmf(t):
    draws = discrete_laplace(_stream(f"l{t}"), t, 200_000)
    assert draws.dtype == np.int64
    assert _chi_square_p(draws, _dlap_pmf(t)) > ALPHA


def test_the_exact_fallback_keeps_the_distribution(monkeypatch):
    """Allowances so wide that most float decisions are ambiguous: the exact path decides them."""
    monkeypatch.setattr(noise, "_LOG_SLACK", 2.0**-6)
    monkeypatch.setattr(noise, "_EXP_SLACK", 2.0**-4)
    calls = []
    original = noise._LazyUniform.below_exp_neg
    monkeypatch.setattr(noise._LazyUniform, "below_exp_neg", lambda self, r: calls.append(1) or original(self, r))
    g = discrete_gaussian(_stream("fallback-g"), 6.0, 8_000)
    assert len(calls) > 1_000  # the exact path really ran
    assert _chi_square_p(g, _dgauss_pmf(6.0)) > ALPHA
    lap = discrete_laplace(_stream("fallback-l"), 4.0, 8_000)
    assert _chi_square_p(lap, _dlap_pmf(4.0)) > ALPHA


def test_large_scales_have_the_stated_moments():
    """σ = 10^8 grid steps (today's default jobs): mean 0 and sd σ within 6 standard errors."""
    n = 400_000
    for sigma in (1e8, 1e11):
        x = discrete_gaussian(_stream(f"big{sigma}"), sigma * sigma, n).astype(float)
        assert abs(x.mean()) < 6 * sigma / math.sqrt(n)
        assert abs(x.std() / sigma - 1) < 6 * math.sqrt(0.5 / n)
    t = 2.5e9
    y = discrete_laplace(_stream("bigl"), t, n).astype(float)
    sd = math.sqrt(2.0) * t  # (the exact DLap variance 2q/(1−q)² is 2t² − 1/6 + O(1/t²))
    assert abs(y.std() / sd - 1) < 6 * math.sqrt(1.25 / n)  # Laplace kurtosis 6: var of s² is 5σ⁴/n


def test_tiny_uniform_words_take_the_exact_path():
    """A keystream word below 2^12 has too few bits for the float logarithm: the exact path draws
    more bits and finds the magnitude from them (checked against a direct computation)."""

    class Words:
        def __init__(self, words):
            self.words = list(words)

        def uint64(self, count):
            out, self.words = self.words[:count], self.words[count:]
            return np.array(out, dtype=np.uint64)

    t = 3.0
    extra = 0xDEADBEEF12345678
    g = noise._geometric_float(Words([5, extra]), t, 1)
    v = mpmath.mpf(5 * 2**64 + extra) / mpmath.mpf(2) ** 128  # V's first 128 bits (the rest can't move G)
    assert int(g[0]) == int(mpmath.floor(-t * mpmath.log(v)))


def test_exp_neg_bounds_bracket_the_value_tightly():
    mpmath.mp.prec = 400
    for r in [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(123456789, 1000),
              Fraction(2**61 - 1, 2**62), Fraction(40)]:
        for bits in (64, 128, 300):
            lo, hi = exp_neg_bounds(r, bits)
            exact = mpmath.exp(-mpmath.mpf(r.numerator) / r.denominator) * mpmath.mpf(2) ** bits
            assert lo <= exact <= hi, (r, bits)
            assert hi - lo <= 4, (r, bits, hi - lo)
    assert exp_neg_bounds(Fraction(10**6), 64) == (0, 1)
    with pytest.raises(ValueError, match="r >= 0"):
        exp_neg_bounds(Fraction(-1, 2), 64)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 2.0**45])
def test_scales_outside_the_exact_range_are_refused(bad):
    with pytest.raises(ValueError, match="grid steps"):
        discrete_laplace(_stream("bad"), bad, 3)
    with pytest.raises(ValueError, match="grid steps"):
        discrete_gaussian(_stream("bad"), bad * abs(bad) if math.isfinite(bad) else bad, 3)


def test_draws_are_reproducible_and_consume_the_stream():
    a = discrete_gaussian(_stream("rep"), 50.0, 1000)
    b = discrete_gaussian(_stream("rep"), 50.0, 1000)
    np.testing.assert_array_equal(a, b)
    s = _stream("rep")
    first, second = discrete_gaussian(s, 50.0, 1000), discrete_gaussian(s, 50.0, 1000)
    assert not np.array_equal(first, second)
    assert discrete_gaussian(_stream("rep"), 50.0, 0).shape == (0,)


class _Words:
    """A stand-in keystream: the given words first, then a real stream's (for lazy extensions)."""

    def __init__(self, words, rest):
        self.words, self.rest = [int(w) for w in words], rest

    def uint64(self, count):
        head, self.words = self.words[:count], self.words[count:]
        tail = self.rest.uint64(count - len(head)) if count > len(head) else np.empty(0, np.uint64)
        return np.concatenate([np.array(head, dtype=np.uint64), tail])


def _word_at(t: float, k: int, offset: float) -> int:
    """A 64-bit word whose float estimate x̂ = −t·ln(U·2^-64) lies ``offset`` above the integer k
    (to the resolution of one word), found by bisection on U."""
    def xhat(u):
        return float(-t * np.log(np.float64(u) * 2.0**-64))

    lo, hi = 1 << 12, (1 << 64) - 1  # x̂ decreases in U
    target = k + offset
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xhat(mid) > target:
            lo = mid
        else:
            hi = mid
    return lo


@pytest.mark.parametrize("t", [3.0, 1e8 + 1])
def test_geometric_sends_exactly_the_draws_within_the_certified_error_to_the_exact_path(monkeypatch, t):
    """The float path's error allowance is (2x̂ + t)·2^-48 (4× its worst-case rounding): a draw
    at 0.6× that allowance from an integer boundary must take the exact path, one at 1.6× must not,
    and both must return the exact ⌊−t·ln V⌋."""
    calls = []
    original = noise._geometric_exact
    monkeypatch.setattr(noise, "_geometric_exact", lambda *a: calls.append(1) or original(*a))
    k = 7 if t < 10 else 123_456_789
    allowance = (2 * k + t) * 2.0**-48
    for side in (1, -1):
        for multiple, routed in ((0.6, True), (1.6, False)):
            word = _word_at(t, k, side * multiple * allowance if side > 0 else 1 - multiple * allowance)
            calls.clear()
            g = noise._geometric_float(_Words([word], _stream("routing")), t, 1)
            assert bool(calls) is routed, (t, side, multiple)
            v = mpmath.mpf(word) / mpmath.mpf(2) ** 64  # the first 64 bits decide G here (far from e^{-k/t})
            if not routed:
                assert g[0] == int(mpmath.floor(-t * mpmath.log(v))) == k  # just above k, or just below k + 1


def test_acceptance_sends_exactly_the_close_calls_to_the_exact_path(monkeypatch):
    """Bernoulli(e^{−γ}): the margin is g·(2·err + 2^-46) + a·2^-46 + 2^-60 around g = e^{−γ̂}; a
    uniform at 0.6× the margin below g is decided exactly, one at 1.6× is accepted by the float
    test; an exponent error above 1e-3 always goes to the exact path."""
    calls = []
    original = noise._LazyUniform.below_exp_neg
    monkeypatch.setattr(noise._LazyUniform, "below_exp_neg", lambda self, r: calls.append(1) or original(self, r))
    gamma = 0.75
    g = math.exp(-gamma)
    margin = g * 2.0**-46 + g * 2.0**-46 + 2.0**-60
    for multiple, routed in ((0.6, True), (1.6, False)):
        word = int((g - multiple * margin) * 2.0**64)
        calls.clear()
        ok = noise._accept_exp_neg(_Words([word], _stream("acc")), np.array([gamma]), np.array([0.0]),
                                   lambda i: Fraction(3, 4))
        assert bool(calls) is routed and bool(ok[0]) is True
    far = int(0.1 * 2.0**64)  # far below e^{-0.75}: decided in float unless the exponent error is large
    for err, routed in ((2e-3, True), (0.5e-3, False)):
        calls.clear()
        ok = noise._accept_exp_neg(_Words([far], _stream("acc2")), np.array([gamma]), np.array([err]),
                                   lambda i: Fraction(3, 4))
        assert bool(calls) is routed and bool(ok[0]) is True


def test_the_largest_scale_is_accepted():
    assert discrete_laplace(_stream("max"), 2.0**44, 4).shape == (4,)
    assert discrete_gaussian(_stream("max"), 2.0**88, 4).shape == (4,)


def test_sample_noise_multiplicity_scales_the_variance_and_is_checked():
    from ltm.dp.calibration import plan_noise
    from ltm.dp.noise import sample_noise

    plan = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                      min_honest_load=4, frac_bits=8, width=2)
    one = sample_noise(_stream("m"), plan, (3, 4))
    np.testing.assert_array_equal(one, sample_noise(_stream("m"), plan, (3, 4), multiplicity=1))
    n = 200_000
    mult = np.array([1, 100])  # broadcast over the last axis
    x = sample_noise(_stream("m2"), plan, (n, 2), multiplicity=mult).astype(float)
    # N_Z(0, Mσ²) per element: variance Mσ² (to 1e-30 at σ ≥ 1), 6 standard errors of a mean of squares
    for j, m in enumerate(mult):
        assert abs(np.mean(x[:, j] ** 2) / (m * plan.grid_sigma2) - 1) < 6 * math.sqrt(2 / n)
    lap = plan_noise(mechanism="laplace", calibration="tight", epsilon=1.0, delta=0.0, clip_norm=1.0, s=1,
                     min_honest_load=4, frac_bits=8, width=2)
    assert sample_noise(_stream("l"), lap, (5,), multiplicity=7).shape == (5,)
    for bad, msg in ((0, "multiplicity must be >= 1, got 0"), (np.array([1, 0]), "a minimum of 0"),
                     (np.array([1.5]), "integer array")):
        with pytest.raises(ValueError, match=msg):
            sample_noise(_stream("b"), plan, (2,), multiplicity=bad)
    continuous = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0,
                            s=1, min_honest_load=4)
    with pytest.raises(ValueError, match="continuous noise plan"):
        sample_noise(_stream("c"), continuous, (2,))


class _Counting:
    """A keystream stand-in that serves the given words and counts how many were taken."""

    def __init__(self, words):
        self.words, self.taken = [int(w) for w in words], 0

    def uint64(self, count):
        head, self.words = self.words[:count], self.words[count:]
        self.taken += count
        assert len(head) == count, "the test stream ran out"
        return np.array(head, dtype=np.uint64)


@pytest.mark.parametrize("r", [Fraction(3, 4), Fraction(7, 3), Fraction(1, 10**9)])
def test_lazy_uniform_decides_exactly_and_draws_only_what_it_needs(r):
    """V's first 64 bits v: decided at once when v + 1 ≤ lo (V < e^{−r}) or v ≥ hi (V ≥ e^{−r});
    otherwise one more word at a time, each appended below the previous ones."""
    mpmath.mp.prec = 400
    lo, hi = exp_neg_bounds(r, 64)
    exact = mpmath.exp(-mpmath.mpf(r.numerator) / r.denominator)
    for v, answer in ((lo - 1, True), (hi, False), (hi + 5, False), (max(lo - 7, 0), True)):
        s = _Counting([])
        assert noise._LazyUniform(s, v).below_exp_neg(r) is answer and s.taken == 0
    for ext in (0, 1, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15):
        s = _Counting([ext, 0x0123456789ABCDEF, 0xFEDCBA9876543210])
        lazy = noise._LazyUniform(s, lo)  # ambiguous at 64 bits: lo ≤ 2^64·e^{−r} ≤ hi
        got = lazy.below_exp_neg(r)
        v = mpmath.mpf(lazy.v) / mpmath.mpf(2) ** lazy.bits
        assert got is bool(v < exact) and lazy.bits == 64 + 64 * s.taken and s.taken >= 1
        assert lazy.v >> (lazy.bits - 64) == lo  # the first word stays the top 64 bits


@pytest.mark.parametrize("t", [0.7, 3.0, 1e8 + 1, 2.0**40])
@pytest.mark.parametrize("shift", [-5.0, 0.0, 5.0])
def test_geometric_exact_finds_the_floor_from_any_estimate(monkeypatch, t, shift):
    """The exact magnitude ⌊−t·ln V⌋ from V's bits, whatever the float estimate it starts from
    (the estimate is pushed ``shift`` units off by a perturbed logarithm, so both stepping loops run)."""
    import types

    real = math
    fake = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("_")})
    fake.log = lambda x: real.log(x) - shift / t
    monkeypatch.setattr(noise, "math", fake)
    mpmath.mp.prec = 600
    rest = _stream(f"gx-{t}-{shift}")
    for first in [1, 5, 4095, 4096, 2**40 + 3, 2**63, 2**64 - 1, 0x243F6A8885A308D3]:
        extra = [int(w) for w in rest.uint64(8)]
        s = _Counting(extra)
        lazy = noise._LazyUniform(s, first)
        g = noise._geometric_exact(lazy, t, Fraction(t))
        assert lazy.bits == 64 + 64 * s.taken  # every word drawn is appended to V
        v = mpmath.mpf(lazy.v) / mpmath.mpf(2) ** lazy.bits
        top = mpmath.mpf(lazy.v + 1) / mpmath.mpf(2) ** lazy.bits
        lo_g, hi_g = mpmath.floor(-t * mpmath.log(top)), mpmath.floor(-t * mpmath.log(v))
        assert lo_g == hi_g == g, (t, shift, first)  # the drawn bits decide G, and G is their floor


def test_acceptance_margin_counts_the_exponent_error_and_the_absolute_floor(monkeypatch):
    """margin = g·(2·err + 2^-46) + a·2^-46 + 2^-60: with an exponent error of 1e-10 the close call
    is at 2e-10·g; for a vanishing g the absolute 2^-60 decides which words need the exact path."""
    calls = []
    original = noise._LazyUniform.below_exp_neg
    monkeypatch.setattr(noise._LazyUniform, "below_exp_neg", lambda self, r: calls.append(1) or original(self, r))
    gamma, err = 0.5, 1e-10
    g = math.exp(-gamma)
    margin = g * (2 * err + 2.0**-46) + g * 2.0**-46 + 2.0**-60
    for multiple, routed in ((0.6, True), (1.3, False)):
        for side, accepted in ((-1, True), (1, False)):
            word = int((g + side * multiple * margin) * 2.0**64)
            calls.clear()
            ok = noise._accept_exp_neg(_Words([word], _stream("m1")), np.array([gamma]), np.array([err]),
                                       lambda i: Fraction(1, 2))
            assert bool(calls) is routed and bool(ok[0]) is accepted, (multiple, side)
    tiny = 50.0  # e^-50 ≈ 2e-22 ≪ 2^-60
    for multiple, routed in ((0.6, True), (1.6, False)):
        word = int((math.exp(-tiny) + multiple * 2.0**-60) * 2.0**64)
        calls.clear()
        ok = noise._accept_exp_neg(_Words([word], _stream("m2")), np.array([tiny]), np.array([0.0]),
                                   lambda i: Fraction(50))
        assert bool(calls) is routed and not ok[0]


def test_noise_tail_bounds():
    from ltm.dp.calibration import plan_noise
    from ltm.dp.noise import GAUSSIAN_TAIL_SIGMAS, LAPLACE_TAIL_SCALES, noise_tail_bound

    g = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                   min_honest_load=4, frac_bits=8, width=2)
    assert noise_tail_bound(g) == 20.0 * g.sigma_client == GAUSSIAN_TAIL_SIGMAS * g.sigma_client
    assert noise_tail_bound(g, 9) == 20.0 * g.sigma_client * 3.0  # the sd of N_Z(0, 9σ²)
    lap = plan_noise(mechanism="laplace", calibration="tight", epsilon=1.0, delta=0.0, clip_norm=1.0, s=1,
                     min_honest_load=4, frac_bits=8, width=2)
    assert noise_tail_bound(lap) == noise_tail_bound(lap, 9) == 100.0 * lap.laplace_scale == \
        LAPLACE_TAIL_SCALES * lap.laplace_scale


@pytest.mark.parametrize("x_num, work", [(0, 80), (1, 80), (3, 100), (2**79, 80), (2**80, 80), (12345678901234567, 96)])
def test_exp_neg_fixed_is_the_floored_taylor_sum_within_its_stated_slack(x_num, work):
    """Second route: the same floored recurrence term_k = ⌊⌊term_{k−1}·x/2^w⌋/k⌋ in plain integers,
    K its number of non-zero terms; the bounds are that sum ∓ (2K(K+1) + 2) (lower clipped at 0),
    and they bracket 2^w·e^{−x/2^w} (mpmath)."""
    mpmath.mp.prec = work + 64
    total, term, k = 0, 1 << work, 0
    while term:
        total += -term if k % 2 else term
        k += 1
        term = (term * x_num >> work) // k
    slack = 2 * k * (k + 1) + 2
    lo, hi = noise._exp_neg_fixed(x_num, work)
    assert (lo, hi) == (max(total - slack, 0), total + slack)
    exact = mpmath.exp(-mpmath.mpf(x_num) / mpmath.mpf(2) ** work) * mpmath.mpf(2) ** work
    assert lo <= exact <= hi


def test_signs_draw_one_word_per_64_and_use_every_bit():
    s = _Counting([2**64 - 1])
    assert noise._signs(s, 64).all() and s.taken == 1
    s = _Counting([0, 2**64 - 1])
    bits = noise._signs(s, 65)
    assert s.taken == 2 and not bits[:64].any() and bits[64]
    many = noise._signs(_stream("signs"), 100_000)
    assert many[-1000:].any() and not many[-1000:].all()  # the last bits are drawn, not padding


def test_scale_errors_name_the_sampler():
    with pytest.raises(ValueError, match=r"^the discrete Gaussian sigma must be in \(0, 2\^44\] grid steps, got 0\.0$"):
        discrete_gaussian(_stream("e"), 0.0, 1)
    with pytest.raises(ValueError, match=r"^the discrete Laplace scale must be in \(0, 2\^44\] grid steps, got -2\.0$"):
        discrete_laplace(_stream("e"), -2.0, 1)


def test_the_exact_path_alone_gives_the_exact_distribution(monkeypatch):
    """Allowances so wide that every decision is ambiguous: the draws come from the exact path
    alone (exp_neg_bounds, _LazyUniform, the exact geometric and the exact γ) and must still fit.
    (A partial widening would not do: a float-accepted band a < g/3 is itself proportional to g,
    so the rejection sampler stays exact even if the exact path were wrong.)"""
    monkeypatch.setattr(noise, "_LOG_SLACK", 1.0)
    monkeypatch.setattr(noise, "_EXP_SLACK", 4.0)
    g = discrete_gaussian(_stream("exact-only-g"), 5.0, 4_000)
    assert _chi_square_p(g, _dgauss_pmf(5.0)) > ALPHA
    lap = discrete_laplace(_stream("exact-only-l"), 2.5, 4_000)
    assert _chi_square_p(lap, _dlap_pmf(2.5)) > ALPHA


def test_sample_noise_scalar_multiplicity_shapes_and_messages():
    from ltm.dp.calibration import plan_noise
    from ltm.dp.noise import sample_noise

    plan = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                      min_honest_load=4, frac_bits=8, width=2)
    assert sample_noise(_stream("sh"), plan, (3, 4)).shape == (3, 4)
    n = 100_000
    for m in (2, 100):
        x = sample_noise(_stream(f"sc{m}"), plan, (n, 2), multiplicity=m)
        assert x.dtype == np.int64 and x.shape == (n, 2)
        assert abs(np.mean(x.astype(float) ** 2) / (m * plan.grid_sigma2) - 1) < 6 * math.sqrt(2 / n)
    y = sample_noise(_stream("arr"), plan, (4, 3), multiplicity=np.array([[1], [2], [3], [4]]))
    assert y.dtype == np.int64 and y.shape == (4, 3)
    continuous = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0,
                            s=1, min_honest_load=4)
    with pytest.raises(ValueError, match=r"^a continuous noise plan \(frac_bits = 0\) cannot be sampled: a party "
                                         r"needs a grid plan$"):
        sample_noise(_stream("c"), continuous, (2,))


def test_an_acceptance_ambiguous_at_64_bits_draws_more_bits_from_the_stream():
    mpmath.mp.prec = 300
    r = Fraction(3, 4)
    lo, _ = exp_neg_bounds(r, 64)
    for ext in (0, 2**64 - 1, 0x5555555555555555):
        s = _Counting([lo, ext, 1, 2, 3])
        ok = noise._accept_exp_neg(s, np.array([0.75]), np.array([0.0]), lambda i: r)
        v = mpmath.mpf(lo * 2**64 + ext) / mpmath.mpf(2) ** 128
        assert bool(ok[0]) is bool(v < mpmath.exp(-mpmath.mpf(3) / 4)) and s.taken >= 2


class _ScriptedStream:
    """A stream whose first words are given and whose later words are all ``fill``: the exact path
    refines V with later words, the float path never reads them."""

    def __init__(self, first: list[int], fill: int) -> None:
        self.first, self.fill = list(first), fill

    def uint64(self, shape):
        count = int(np.prod(shape, dtype=np.int64))
        take, self.first = self.first[:count], self.first[count:]
        return np.array(take + [self.fill] * (count - len(take)), dtype=np.uint64).reshape(shape)


@pytest.mark.parametrize("word", [(1 << 12) + 1, 1 << 20, (1 << 20) + 3, (1 << 25) + 7])
def test_a_geometric_draw_from_a_small_word_is_finished_exactly(word):
    # V ∈ [U, U+1)·2^-64: for U < 2^52 the word alone does not pin ⌊−t·ln V⌋ when t is large (the
    # range of G it leaves is about t/U wide), so the draw must read further words; the float path
    # (the defect a review found with a 2^12 cut) answered the same value whatever came after.
    t = 2.0**30
    low = noise._geometric_float(_ScriptedStream([word], 0), t, 1)[0]
    high = noise._geometric_float(_ScriptedStream([word], (1 << 64) - 1), t, 1)[0]
    assert low != high
    # and both lie in G's range for V ∈ [U, U+1)·2^-64, computed here with mpmath
    mpmath.mp.prec = 200
    top = math.floor(-t * mpmath.log(mpmath.mpf(word) / 2**64))
    bottom = math.floor(-t * mpmath.log(mpmath.mpf(word + 1) / 2**64))
    assert bottom <= min(low, high) and max(low, high) <= top


def test_short_words_extended_in_bulk_keep_the_distribution(monkeypatch):
    """Words below the cut get one more word each in a vectorised draw (V to 128 bits); with the cut
    raised to 2^63 half of all candidates take that route, and both samplers must still fit exactly."""
    monkeypatch.setattr(noise, "_TWO_P52", np.uint64(1 << 63))
    g = discrete_gaussian(_stream("short-g"), 9.0, 100_000)
    assert _chi_square_p(g, _dgauss_pmf(9.0)) > ALPHA
    lap = discrete_laplace(_stream("short-l"), 2.0, 100_000)
    assert _chi_square_p(lap, _dlap_pmf(2.0)) > ALPHA


@pytest.mark.parametrize("t", [3.0, 2.0**30])
def test_extended_short_words_near_a_boundary_and_zero_words_are_finished_exactly(monkeypatch, t):
    """A short word's 128-bit V: decided in float when far from a boundary, by the exact path
    (starting from all 128 bits) when within the allowance; a zero word always goes exact."""
    calls = []
    original = noise._geometric_exact
    monkeypatch.setattr(noise, "_geometric_exact", lambda lazy, *a: calls.append(lazy.bits) or original(lazy, *a))
    mpmath.mp.prec = 400
    rest = _stream(f"short-{t}")
    for first in (0, 1, 77, (1 << 52) - 1):
        for second in (0, 1 << 63, (1 << 64) - 1, 0x243F6A8885A308D3):
            calls.clear()
            s = _Words([first, second], rest)
            g = noise._geometric_float(s, t, 1)[0]
            v = mpmath.mpf((first << 64) + second) / mpmath.mpf(2) ** 128
            x = -t * mpmath.log(v) if v > 0 else mpmath.inf
            near = first == 0 or min(x - mpmath.floor(x), mpmath.ceil(x) - x) < (2 * x + t) * 2.0**-48
            assert bool(calls) is bool(near), (first, second)
            if calls:
                assert calls == [128]  # the exact path starts from both words
            top = mpmath.mpf((first << 64) + second + 1) / mpmath.mpf(2) ** 128
            if not near:  # the two words alone decide G: it is their floor
                assert g == mpmath.floor(x) == mpmath.floor(-t * mpmath.log(top))


def test_word_floats_are_within_the_stated_error_of_the_words():
    """x = 2·float(⌊U/2⌋): |x − U| ≤ U·2^-53 + 1, the bound the geometric's and the acceptance's
    allowances count (checked in exact integers, at the extremes and on random words)."""
    words = np.array([0, 1, 2, 3, 2**52 - 1, 2**52 + 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1],
                     dtype=np.uint64)
    words = np.concatenate([words, _stream("wf").uint64(10_000)])
    out = noise._word_floats(words, np.empty(words.size, np.int64), np.empty(words.size))
    for u, x in zip(words.tolist(), out.tolist()):
        assert x == int(x) and abs(int(x) - u) <= u * 2.0**-53 + 1, (u, x)
    assert out[0] == 0.0 and out[1] == 0.0 and out[3] == 2.0  # the dropped low bit


def test_apply_signs_negates_exactly_the_marked_values():
    values = np.array([0.0, 1.0, 2.0**52, 7.0, 2.0**53 - 1])
    negative = np.array([True, False, True, True, False])
    noise._apply_signs(values, negative, np.empty(5))
    assert values.tolist() == [0.0, 1.0, -(2.0**52), -7.0, 2.0**53 - 1]


@pytest.mark.parametrize("sigma2", [2.25, 1e16 + 12345.0])
def test_the_gaussian_hands_the_acceptance_its_certified_exponent_error(monkeypatch, sigma2):
    """γ̂ = (|y| − c)²/(2σ²) with c = fl(σ²/t) is within (γ̂ + c²/(2σ²))·2^-49 of the exact γ (the
    derivation in discrete_gaussian); the allowance handed to the acceptance is 4× that, and every
    γ̂ really is within it of the exact rational γ (checked in Fractions)."""
    seen = []
    original = noise._accept_exp_neg

    def spy(stream, gamma, gamma_err, exact_gamma, scratch=None):
        seen.append((gamma.copy(), gamma_err.copy(), [exact_gamma(i) for i in range(min(64, gamma.size))]))
        return original(stream, gamma, gamma_err, exact_gamma, scratch)

    monkeypatch.setattr(noise, "_accept_exp_neg", spy)
    discrete_gaussian(_stream(f"err-{sigma2}"), sigma2, 500)
    t = math.floor(math.sqrt(sigma2)) + 1
    c = sigma2 / t
    gamma, err, exact = seen[0]
    np.testing.assert_allclose(err, (gamma + c * c * (0.5 / sigma2)) * 2.0**-47, rtol=1e-12, atol=0)
    for i, r in enumerate(exact):
        assert abs(Fraction(float(gamma[i])) - r) <= Fraction(float(err[i])) / 4  # the derived bound itself


@pytest.mark.parametrize("t, offset", [(3.0, 1e-14), (3.0, -1e-14), (2.0**30, 1e-7), (2.0**30, -1e-7)])
def test_a_short_word_routed_to_the_exact_path_keeps_both_words_as_the_top_of_v(monkeypatch, t, offset):
    """U = 1 with a second word W putting x̂ = −t·ln((U + W·2^-64)·2^-64) just off an integer k: the
    float certificate cannot decide, the exact path starts from V's first 128 bits (U, W) and the
    magnitude is the floor of −t·ln V for the bits it ends with (mpmath)."""
    mpmath.mp.prec = 600
    lazies = []
    original = noise._geometric_exact
    monkeypatch.setattr(noise, "_geometric_exact", lambda lazy, *a: lazies.append(lazy) or original(lazy, *a))
    top = -t * mpmath.log(mpmath.mpf(1) / 2**64)  # x̂ at W = 0; it falls as W grows
    k = int(mpmath.floor(top)) - 1
    lo, hi = 0, (1 << 64) - 1  # bisection on W for x̂ ≈ k + offset
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if -t * mpmath.log((1 + mpmath.mpf(mid) / 2**64) / 2**64) > k + offset:
            lo = mid
        else:
            hi = mid
    g = noise._geometric_float(_Words([1, lo], _stream(f"routed-{t}-{offset}")), t, 1)[0]
    assert len(lazies) == 1 and lazies[0].bits >= 128
    lazy = lazies[0]
    assert lazy.v >> (lazy.bits - 128) == (1 << 64) | lo  # U and W are V's first 128 bits
    v_lo = mpmath.mpf(lazy.v) / mpmath.mpf(2) ** lazy.bits
    v_hi = mpmath.mpf(lazy.v + 1) / mpmath.mpf(2) ** lazy.bits
    assert g == mpmath.floor(-t * mpmath.log(v_lo)) == mpmath.floor(-t * mpmath.log(v_hi))


def _grid_plan(mechanism: str = "gaussian", **kw):
    from ltm.dp.calibration import plan_noise

    return plan_noise(mechanism=mechanism, calibration="tight", epsilon=1.0, delta=1e-6 if mechanism == "gaussian"
                      else 0.0, clip_norm=1.0, s=1, min_honest_load=4, frac_bits=8, width=4, **kw)


def _spy_gaussian(monkeypatch):
    """Record every (variance, count, draws) the real discrete Gaussian sampler is asked for."""
    calls = []
    real = noise.discrete_gaussian

    def spy(stream, sigma2, n):
        out = real(stream, sigma2, n)
        calls.append((sigma2, n, out.copy()))
        return out

    monkeypatch.setattr(noise, "discrete_gaussian", spy)
    return calls


def test_per_entry_factors_draw_each_column_class_once_at_its_exact_variance(monkeypatch):
    """noise_factors (1, ½, ¾, ½): one draw per factor class, ascending; σ²·factor exactly for a
    power of two (½, 1) and rounded up one ulp otherwise (¾: the product may round down); each
    class's draws fill exactly its columns, row-major (the output is rebuilt from the calls)."""
    import dataclasses

    from ltm.dp.noise import sample_noise

    plan = dataclasses.replace(_grid_plan(), noise_factors=(1.0, 0.5, 0.75, 0.5))
    s2 = plan.grid_sigma2
    assert math.frexp(s2)[0] != 0.5  # σ² not a power of two: the ¾ product is a real rounding
    calls = _spy_gaussian(monkeypatch)
    y = sample_noise(_stream("factors"), plan, (5, 4))
    assert y.dtype == np.int64 and y.shape == (5, 4)
    assert [(c[0], c[1]) for c in calls] == [(s2 * 0.5, 10), (math.nextafter(s2 * 0.75, math.inf), 5), (s2, 5)]
    np.testing.assert_array_equal(y[:, [1, 3]], calls[0][2].reshape(5, 2))
    np.testing.assert_array_equal(y[:, 2], calls[1][2])
    np.testing.assert_array_equal(y[:, 0], calls[2][2])
    # the same stream, the same draws: reproducible, and the stream is really consumed
    np.testing.assert_array_equal(y, sample_noise(_stream("factors"), plan, (5, 4)))


def test_per_entry_factors_with_multiplicities_draw_per_class_and_multiplicity(monkeypatch):
    """With multiplicities M (rows 1, 3, 1): per factor class, one draw per distinct M at
    nextafter(σ²·factor·M) (rounded up), filling exactly the entries with that class and M."""
    import dataclasses

    from ltm.dp.noise import sample_noise

    plan = dataclasses.replace(_grid_plan(), noise_factors=(1.0, 0.5, 0.75, 0.5))
    s2 = plan.grid_sigma2
    mult = np.array([[1], [3], [1]])
    calls = _spy_gaussian(monkeypatch)
    y = sample_noise(_stream("factors-m"), plan, (3, 4), multiplicity=mult)
    assert y.dtype == np.int64 and y.shape == (3, 4)
    up = lambda v: math.nextafter(v, math.inf)  # noqa: E731
    assert [(c[0], c[1]) for c in calls] == [(up(s2 * 0.5 * 1.0), 4), (up(s2 * 0.5 * 3.0), 2),
                                             (up(s2 * 0.75 * 1.0), 2), (up(s2 * 0.75 * 3.0), 1),
                                             (up(s2 * 1.0 * 1.0), 2), (up(s2 * 1.0 * 3.0), 1)]
    want = np.empty((3, 4), dtype=np.int64)
    want[[0, 0, 2, 2], [1, 3, 1, 3]] = calls[0][2]
    want[1, [1, 3]] = calls[1][2]
    want[[0, 2], 2] = calls[2][2]
    want[1, 2] = calls[3][2][0]
    want[[0, 2], 0] = calls[4][2]
    want[1, 0] = calls[5][2][0]
    np.testing.assert_array_equal(y, want)


def test_per_entry_factors_need_a_matching_last_axis():
    import dataclasses

    from ltm.dp.noise import sample_noise

    plan = dataclasses.replace(_grid_plan(), noise_factors=(1.0, 0.5, 0.75, 0.5))
    for shape in ((3, 5), (4, 3), ()):
        with pytest.raises(ValueError, match=rf"^the plan has 4 per-entry noise factors; the last axis of shape "
                                             rf"{re.escape(str(shape))} must match$"):
            sample_noise(_stream("bad-shape"), plan, shape)
    assert sample_noise(_stream("ok-shape"), plan, (3, 4)).shape == (3, 4)


def test_widest_noise_draw_is_the_scale_of_one_draw():
    from ltm.dp.calibration import plan_noise
    from ltm.dp.noise import widest_noise_draw

    g = _grid_plan()
    assert widest_noise_draw(g) == math.sqrt(g.grid_sigma2) == widest_noise_draw(g, 1)
    assert widest_noise_draw(g, 9) == math.sqrt(g.grid_sigma2 * 9)
    lap = _grid_plan("laplace")
    assert widest_noise_draw(lap) == widest_noise_draw(lap, 9) == lap.grid_scale > 1.0
    continuous = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0,
                            s=1, min_honest_load=4)
    assert widest_noise_draw(continuous) == 0.0 and isinstance(widest_noise_draw(continuous), float)


def test_per_entry_factors_apply_along_the_last_axis_of_any_shape():
    """A (2, 3, 4) or (4,) draw is the (6, 4) one reshaped (same stream, same classes, same order),
    with or without multiplicities: the factors follow the last axis whatever the leading ones."""
    import dataclasses

    from ltm.dp.noise import sample_noise

    plan = dataclasses.replace(_grid_plan(), noise_factors=(1.0, 0.5, 0.75, 0.5))
    flat = sample_noise(_stream("nd"), plan, (6, 4))
    np.testing.assert_array_equal(sample_noise(_stream("nd"), plan, (2, 3, 4)).reshape(6, 4), flat)
    np.testing.assert_array_equal(sample_noise(_stream("nd"), plan, (4,)), sample_noise(_stream("nd"), plan, (1, 4))[0])
    mult = np.array([1, 2, 2, 1, 3, 1]).reshape(2, 3, 1)
    np.testing.assert_array_equal(sample_noise(_stream("nd-m"), plan, (2, 3, 4), multiplicity=mult).reshape(6, 4),
                                  sample_noise(_stream("nd-m"), plan, (6, 4), multiplicity=mult.reshape(6, 1)))


@pytest.mark.parametrize("bits, below", [(20, 1e-9), (64, 1e-9)])
def test_exp_neg_bounds_stay_below_a_value_just_under_an_integer(bits, below):
    """r chosen so 2^bits·e^{−r} = m − 10⁻⁹ units: lo must be m − 1, not m.  A lower bound built
    from e^{−x}'s *upper* Taylor bound (or one not floored far enough) lands on m, above the value."""
    mpmath.mp.prec = 600
    m = int(0.6 * 2**bits)
    value = mpmath.mpf(m) - below
    r_mp = -mpmath.log(value / mpmath.mpf(2) ** bits)
    r = Fraction(int(mpmath.floor(r_mp * mpmath.mpf(2) ** 400)), 2**400)
    exact = mpmath.exp(-mpmath.mpf(r.numerator) / r.denominator) * mpmath.mpf(2) ** bits
    assert mpmath.mpf(m) - 2 * below < exact < m  # the construction: just under the integer m
    lo, hi = exp_neg_bounds(r, bits)
    assert lo <= exact <= hi and lo == m - 1 and hi - lo <= 4

"""Γ-differences sum to Laplace (DESIGN §4, §8): with the tight Laplace plan for honest load L,
each (client, piece) adds Γ(1/L, b) − Γ(1/L, b); L such draws in one release entry are exactly
Lap(b) (infinite divisibility), and one draw has variance 2b²/L = sigma_client².

Flake rate: the sources are seeded (deterministic CI), and each statistical assertion is built so
that a correct sampler fails it with probability ≤ 1e-6 for ANY seed (details at each test).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from ltm.calibration import plan_noise
from ltm.noise import GAMMA_TAIL_SCALES, noise_tail_bound, sample_noise
from ltm.randomness import Randomness

P_THRESHOLD = 1e-6
LOADS = (1, 7, 50)
EPSILON, CLIP, S = 0.8, 1.5, 2
SUMS = 100_000


def laplace_plan(L: int):
    return plan_noise(mechanism="laplace", calibration="tight", epsilon=EPSILON, delta=0.0, clip_norm=CLIP,
                      s=S, min_honest_load=L)


@pytest.mark.parametrize("L", LOADS)
def test_plan_arithmetic(L):
    plan = laplace_plan(L)
    b = 2.0 * S * CLIP / EPSILON  # Δ₁ = 2sC₁, b = Δ₁/ε
    assert plan.mechanism == "laplace" and plan.delta == 0.0
    assert plan.laplace_scale == pytest.approx(b, rel=1e-15)
    assert plan.gamma_shape == pytest.approx(1.0 / L, rel=1e-15)
    assert plan.sigma_client**2 == pytest.approx(2.0 * b**2 / L, rel=1e-14)
    assert plan.sigma_release == pytest.approx(math.sqrt(2.0) * b, rel=1e-15)  # std of Lap(b)
    assert plan.sigma_client * math.sqrt(L) == pytest.approx(plan.sigma_release, rel=1e-14)
    assert noise_tail_bound(plan) == GAMMA_TAIL_SCALES * b


@pytest.mark.parametrize("L", LOADS)
def test_sum_of_L_gamma_differences_is_laplace(L):
    """KS of 10^5 sums of L draws against scipy.stats.laplace(scale=b); reject only at p < 1e-6.

    Under H0 the KS p-value is (asymptotically, at n = 10^5 essentially exactly) uniform, so a
    correct sampler fails with probability ≤ 1e-6 whatever the seed."""
    plan = laplace_plan(L)
    stream = Randomness.seeded_insecure(f"laplace-sum-{L}").stream()
    draws = sample_noise(stream, plan, (L, SUMS))
    assert draws.shape == (L, SUMS) and draws.dtype == np.float64 and np.all(np.isfinite(draws))
    sums = draws.sum(axis=0)
    b = plan.laplace_scale
    assert scipy.stats.kstest(sums, scipy.stats.laplace(scale=b).cdf).pvalue > P_THRESHOLD
    # and NOT Laplace with a 10% different scale (the test has power at this sample size)
    assert scipy.stats.kstest(sums, scipy.stats.laplace(scale=1.1 * b).cdf).pvalue < P_THRESHOLD


# The per-draw variance test.  X = G₁ − G₂, G ~ Γ(a, b), a = 1/L, mean 0.  We test the mean of X²
# over N draws (the mean is known, so no sample-variance correction):
#   E[X²]   = 2ab²                                  (= sigma_client²)
#   Var(X²) = μ₄ − σ⁴ = 12ab⁴ + 8a²b⁴  ⇒  Var(mean X²)/σ⁴ = (3/a + 2)/N = (3L + 2)/N.
# The mean of N = 2·10^6 i.i.d. terms is close to normal; the remaining non-normality is its
# skewness γ = skew(X²)/√N, which from the cumulants of X (κ_2j = 2a(2j−1)!b^2j) is 6.6, 15.7, 41.0
# for L = 1, 7, 50, i.e. γ ≤ 0.03 here.  By Cornish–Fisher the two-sided 1e-6 quantile (z ≈ 4.89)
# moves by at most (z² − 1)·γ/6 ≈ 0.12, so a band of z = 6 standard errors has false-failure
# probability well below 1e-6 (nominally 2e-9).
VAR_DRAWS = 2_000_000
Z = 6.0


@pytest.mark.parametrize("L", LOADS)
def test_per_draw_variance_is_sigma_client_squared(L):
    plan = laplace_plan(L)
    stream = Randomness.seeded_insecure(f"laplace-var-{L}").stream()
    x = sample_noise(stream, plan, (VAR_DRAWS,))
    target = 2.0 * plan.laplace_scale**2 / L
    assert plan.sigma_client**2 == pytest.approx(target, rel=1e-14)
    rel_se = math.sqrt((3.0 * L + 2.0) / VAR_DRAWS)
    assert abs(np.mean(x * x) / target - 1.0) < Z * rel_se
    # the draws are symmetric about 0: mean ~ N(0, σ²/N); odd moments vanish
    assert abs(x.mean()) < Z * plan.sigma_client / math.sqrt(VAR_DRAWS)


def test_more_honest_draws_only_add_noise():
    """A row with load 2L carries the sum of two independent Lap(b): variance 2·(2b²), not 2b²
    (more noise is post-processing).  Same z = 6 construction as above (Var(mean X²) for the sum
    of 2L draws: the sum of two Laplaces has excess kurtosis 3/2, so Var(Y²)/E[Y²]² = 3 + 3/2 − 1 = 3.5)."""
    L = 7
    plan = laplace_plan(L)
    stream = Randomness.seeded_insecure("laplace-2L").stream()
    n = 200_000
    y = sample_noise(stream, plan, (2 * L, n)).sum(axis=0)
    target = 2.0 * 2.0 * plan.laplace_scale**2
    assert abs(np.mean(y * y) / target - 1.0) < Z * math.sqrt(3.5 / n)


def test_laplace_noise_is_reproducible_and_shaped():
    plan = laplace_plan(7)
    a = sample_noise(Randomness.seeded_insecure("r").stream(), plan, (2, 3, 4))
    b = sample_noise(Randomness.seeded_insecure("r").stream(), plan, (2, 3, 4))
    assert a.shape == (2, 3, 4)
    np.testing.assert_array_equal(a, b)

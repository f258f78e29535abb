"""The pure-ε mechanism on the grid: every honest (client, piece) pair draws a whole discrete
Laplace DLap(t), t = ⌈Δ₁⌉/ε in grid steps, where Δ₁ includes the rounding widening.  One draw in an
entry already makes it ε-DP; more honest draws only add noise (post-processing).

Flake rate: seeded sources; each statistical assertion fails a correct sampler with probability
≤ 1e-6 for any seed (6-standard-error bands on means of 10^6 terms, see each test).
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from ltm.dp.calibration import plan_noise
from ltm.dp.noise import LAPLACE_TAIL_SCALES, noise_tail_bound, sample_noise
from ltm.randomness import Randomness

LOADS = (1, 7, 50)
EPSILON, CLIP, S, W, F = 0.8, 1.5, 2, 3, 12
Z = 6.0


def laplace_plan(L: int):
    return plan_noise(mechanism="laplace", calibration="tight", epsilon=EPSILON, delta=0.0, clip_norm=CLIP,
                      s=S, min_honest_load=L, frac_bits=F, width=W)


@pytest.mark.parametrize("L", LOADS)
def test_plan_arithmetic(L):
    plan = laplace_plan(L)
    step = mpmath.mpf(2) ** -F
    delta1 = 2 * S * mpmath.mpf(CLIP) + S * W * step  # Δ₁ = 2sC₁ widened by s·W·2^-f
    t = mpmath.ceil(delta1 / step) / mpmath.mpf(EPSILON)
    assert plan.mechanism == "laplace" and plan.delta == 0.0 and plan.gamma_shape == 1.0
    assert plan.sensitivity == pytest.approx(float(delta1), rel=1e-12)
    assert plan.rounding_widening == float(S * W * step)
    assert abs(plan.grid_scale / float(t) - 1) < 1e-9
    assert plan.laplace_scale == pytest.approx(float(t * step), rel=1e-12)
    assert plan.sigma_client == pytest.approx(math.sqrt(2.0) * plan.laplace_scale, rel=1e-12)
    assert plan.sigma_release == plan.sigma_client  # one whole DLap per pair
    assert noise_tail_bound(plan) == LAPLACE_TAIL_SCALES * plan.laplace_scale
    # the accounted ε of the event is the job's ε
    event = plan.dp_event()
    assert event.sensitivity == math.ceil(plan.grid_sensitivity)
    assert abs(event.sensitivity * event.noise_parameter / EPSILON - 1) < 1e-12


# X ~ DLap(t): E[X²] = 2q/(1−q)² with q = e^{−1/t}; the mean of N squares has relative standard
# error √((κ−1)/N) with κ = E[X⁴]/E[X²]² ≤ 6 (the continuous Laplace's, approached from below), so
# a 6-standard-error band on N = 10^6 terms fails a correct sampler with probability ≪ 1e-6.
VAR_DRAWS = 1_000_000


@pytest.mark.parametrize("L", LOADS)
def test_per_draw_variance_is_that_of_dlap(L):
    plan = laplace_plan(L)
    x = sample_noise(Randomness.seeded_insecure(f"laplace-var-{L}").stream(), plan, (VAR_DRAWS,)).astype(float)
    q = math.exp(-1.0 / plan.grid_scale)
    target = 2 * q / (1 - q) ** 2
    assert abs(np.mean(x * x) / target - 1.0) < Z * math.sqrt(5.0 / VAR_DRAWS)
    assert abs(x.mean()) < Z * math.sqrt(target / VAR_DRAWS)


def test_more_honest_draws_only_add_noise():
    """A row with load 2 carries two independent DLap(t): twice the variance."""
    plan = laplace_plan(7)
    n = 300_000
    y = sample_noise(Randomness.seeded_insecure("laplace-2").stream(), plan, (2, n)).sum(axis=0).astype(float)
    q = math.exp(-1.0 / plan.grid_scale)
    target = 2 * 2 * q / (1 - q) ** 2
    assert abs(np.mean(y * y) / target - 1.0) < Z * math.sqrt(5.0 / n)


def test_laplace_noise_is_reproducible_shaped_and_integer():
    plan = laplace_plan(7)
    a = sample_noise(Randomness.seeded_insecure("r").stream(), plan, (2, 3, 4))
    b = sample_noise(Randomness.seeded_insecure("r").stream(), plan, (2, 3, 4))
    assert a.shape == (2, 3, 4) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)

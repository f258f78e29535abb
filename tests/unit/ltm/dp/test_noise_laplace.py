"""The pure-ε mechanism on the grid: DLap(t), t = ⌈Δ₁⌉/ε in grid steps (Δ₁ includes the rounding
widening), split into L Pólya pieces NB(1/L, p) − NB(1/L, p): every honest (client, piece) pair draws
one, so the L honest pairs of an entry sum to exactly one DLap(t) (ε-DP); more honest draws only add
noise (post-processing).  An aggregate element of multiplicity M draws the share of min(M, L) pieces.

Flake rate: seeded sources; each statistical assertion fails a correct sampler with probability
≤ 1e-6 for any seed (6-standard-error bands on means of 2·10^5 or more terms, see each test).
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from ltm.dp.calibration import plan_noise
from ltm.dp.noise import (
    LAPLACE_TAIL_SCALES,
    discrete_laplace,
    laplace_element_pieces,
    noise_tail_bound,
    sample_noise,
)
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
    assert plan.mechanism == "laplace" and plan.delta == 0.0 and plan.gamma_shape == 1.0 / L
    assert plan.laplace_pieces == L
    assert plan.sensitivity == pytest.approx(float(delta1), rel=1e-12)
    assert plan.rounding_widening == float(S * W * step)
    assert abs(plan.grid_scale / float(t) - 1) < 1e-9
    assert plan.laplace_scale == pytest.approx(float(t * step), rel=1e-12)
    q = mpmath.exp(-1 / mpmath.mpf(plan.grid_scale))
    dlap_sd = mpmath.sqrt(2 * q) / (1 - q) * step  # DLap(t)'s exact sd
    assert plan.sigma_release == pytest.approx(float(dlap_sd), rel=1e-12)  # the L pieces' sum
    assert plan.sigma_client == pytest.approx(float(dlap_sd / mpmath.sqrt(L)), rel=1e-12)  # one piece
    assert noise_tail_bound(plan) == LAPLACE_TAIL_SCALES * plan.laplace_scale
    # the accounted ε of the event is the job's ε: L honest pieces are one DLap(t)
    event = plan.dp_event()
    assert event.sensitivity == math.ceil(plan.grid_sensitivity)
    assert abs(event.sensitivity * event.noise_parameter / EPSILON - 1) < 1e-12


# X ~ DLap(t): E[X²] = 2q/(1−q)² with q = e^{−1/t}; the mean of N squares has relative standard
# error √((κ−1)/N) with κ = E[X⁴]/E[X²]² ≤ 6 (the continuous Laplace's, approached from below), so
# a 6-standard-error band on N = 2·10^5 terms fails a correct sampler with probability ≪ 1e-6.
VAR_DRAWS = 200_000


def _dlap_second_moment(plan) -> float:
    q = math.exp(-1.0 / plan.grid_scale)
    return 2 * q / (1 - q) ** 2


@pytest.mark.parametrize("L", LOADS)
def test_L_pieces_sum_to_the_variance_of_one_dlap(L):
    plan = laplace_plan(L)
    x = sample_noise(Randomness.seeded_insecure(f"laplace-var-{L}").stream(), plan, (L, VAR_DRAWS))
    y = x.sum(axis=0).astype(float)
    target = _dlap_second_moment(plan)
    assert abs(np.mean(y * y) / target - 1.0) < Z * math.sqrt(5.0 / VAR_DRAWS)
    assert abs(y.mean()) < Z * math.sqrt(target / VAR_DRAWS)


def test_more_honest_draws_only_add_noise():
    """A row with load 2L carries two independent DLap(t): twice the variance."""
    plan = laplace_plan(7)
    n = VAR_DRAWS
    y = sample_noise(Randomness.seeded_insecure("laplace-2").stream(), plan, (14, n)).sum(axis=0).astype(float)
    target = 2 * _dlap_second_moment(plan)
    assert abs(np.mean(y * y) / target - 1.0) < Z * math.sqrt(5.0 / n)


def test_an_aggregate_element_carries_min_of_its_multiplicity_and_L_pieces():
    """Multiplicity M: the share of min(M, L) pairs (pieces beyond L would only add noise).  The sum
    of L/M elements of multiplicity M (M | L) is one DLap(t); an element of M ≥ L alone is one."""
    L, n = 6, VAR_DRAWS
    plan = laplace_plan(L)
    np.testing.assert_array_equal(laplace_element_pieces(plan, np.array([1, 3, 6, 9])), [1, 3, 6, 6])
    mult = np.array([[3], [6], [40]])  # rows of multiplicity 3, 6 and 40
    x = sample_noise(Randomness.seeded_insecure("laplace-agg").stream(), plan, (3, 2 * n), multiplicity=mult)
    target = _dlap_second_moment(plan)
    pairs = x[0].reshape(2, n).sum(axis=0).astype(float)  # two elements of M = 3: one DLap(t)
    for y in (pairs, x[1].astype(float), x[2].astype(float)):
        assert abs(np.mean(y * y) / target - 1.0) < Z * math.sqrt(5.0 / y.size)


def test_whole_draw_plans_draw_the_discrete_laplace_itself():
    """L = 1 (and the paper's whole draws): one DLap(t) per element, whatever its multiplicity."""
    plan = laplace_plan(1)
    a = sample_noise(Randomness.seeded_insecure("w").stream(), plan, (5, 4), multiplicity=np.full((5, 1), 9))
    b = discrete_laplace(Randomness.seeded_insecure("w").stream(), plan.grid_scale, 20).reshape(5, 4)
    np.testing.assert_array_equal(a, b)


def test_laplace_noise_is_reproducible_shaped_and_integer():
    plan = laplace_plan(7)
    a = sample_noise(Randomness.seeded_insecure("r").stream(), plan, (2, 3, 4))
    b = sample_noise(Randomness.seeded_insecure("r").stream(), plan, (2, 3, 4))
    assert a.shape == (2, 3, 4) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)

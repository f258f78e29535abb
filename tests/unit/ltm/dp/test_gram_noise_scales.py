"""Per-entry noise scales of the gram release (ltm/lifts.py, docs/architecture.md "Per-entry noise
scales"): the plan's factors, the per-coordinate discrete Gaussian account (τ at the smallest
scale) checked in mpmath, the sampler's per-entry variances (χ²), and the refusals."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy.stats import chi2

from ltm.dp import accounting
from ltm.dp.calibration import CalibrationError, plan_noise
from ltm.dp.noise import sample_noise
from ltm.lifts import gram_noise_factors, gram_width
from ltm.randomness import Randomness


def _gram_plan(d=4, load=3, frac_bits=12, **kw):
    w = gram_width(d)
    return plan_noise(mechanism="gaussian", calibration="tight", epsilon=kw.pop("epsilon", 1.0), delta=1e-6,
                      clip_norm=1.0, s=1, min_honest_load=load, sketch_kind="sum", m=1, d=d,
                      sensitivity=math.sqrt(2.0), frac_bits=frac_bits, width=w,
                      noise_factors=gram_noise_factors(d), **kw)


def _mp_eps_c(sigma, load, l2, l1, smallest):
    """ε_c of the heterogeneous L-fold discrete Gaussian sum, from the formula: Δ₂/(√L σ) + τ(σ_min)·Δ₁."""
    sigma, smallest = mpmath.mpf(sigma), mpmath.mpf(smallest)
    tau = 10 * mpmath.fsum(mpmath.exp(-2 * mpmath.pi**2 * smallest**2 * k / (k + 1)) for k in range(1, load))
    return mpmath.mpf(l2) / (mpmath.sqrt(load) * sigma) + tau * mpmath.mpf(l1)


@pytest.mark.parametrize("frac_bits,epsilon", [(1, 16.0), (12, 1.0)])
def test_the_account_evaluates_tau_at_the_smallest_scale(frac_bits, epsilon):
    """On a coarse grid (f = 1, ε = 16: σ_c ≈ 1.4 steps) τ matters; the plan's ρ is the mpmath value
    of ½(Δ₂/(√L σ) + τ(σ/√2)·Δ₁)² — not τ(σ), which is smaller (the check can fail)."""
    plan = _gram_plan(frac_bits=frac_bits, epsilon=epsilon)
    sigma = math.sqrt(plan.grid_sigma2)
    assert plan.min_noise_factor == 0.5 and plan.grid_noise_sd_min == pytest.approx(plan.grid_noise_sd / math.sqrt(2))
    want = _mp_eps_c(sigma, plan.min_honest_load, plan.grid_sensitivity, plan.grid_l1_sensitivity, sigma / math.sqrt(2))
    assert plan.zcdp_rho() == pytest.approx(float(want**2 / 2), rel=1e-12)
    assert plan.dp_event().rho == plan.zcdp_rho()
    iid = _mp_eps_c(sigma, plan.min_honest_load, plan.grid_sensitivity, plan.grid_l1_sensitivity, sigma)
    if frac_bits == 1:
        assert want > iid * (1 + 1e-6)  # τ at σ/√2 is larger: the coarse grid makes it count
    # calibration meets the target ε at δ by the accountant: ρ ≤ ρ*(ε, δ)
    assert plan.zcdp_rho() <= accounting.rho_for(epsilon, 1e-6) * (1 + 1e-12)


def test_the_weighted_sensitivity_is_the_isotropic_mechanism():
    """Σ_j μ_j²/factor_j of a gram change μ (unweighted triangle) is ‖P‖_F²: the Δ₂ term of the
    per-entry plan equals the isotropic plan's on the √2-weighted triangle."""
    rng = np.random.default_rng(5)
    d = 5
    i, j = np.triu_indices(d)
    for _ in range(50):
        z, zp = rng.normal(size=d), rng.normal(size=d)
        P = np.outer(zp, zp) - np.outer(z, z)
        mu = P[i, j]
        assert np.sum(mu**2 / gram_noise_factors(d)) == pytest.approx(np.sum(P * P), rel=1e-12)


def test_the_sampler_draws_each_entry_at_its_scale():
    """χ² per factor class: Σ y²/(M·factor·σ²) over N draws is χ²_N (two-sided 1e-7 per side and
    class: flake < 1e-6); a sampler that ignored the factors fails the off-diagonal class by far."""
    plan = _gram_plan(d=3, frac_bits=12)
    factors = np.asarray(plan.noise_factors)
    reps = 3000
    mult = np.array([[1], [4]], dtype=np.int64)
    stream = Randomness.seeded_insecure("scales").stream()
    y = sample_noise(stream, plan, (reps, 2, factors.size), multiplicity=mult[None, :, :]).astype(np.float64)
    scaled = y**2 / (mult[None, :, :] * factors[None, None, :] * plan.grid_sigma2)
    for cls in (factors == 1.0, factors == 0.5):
        stat, dof = float(scaled[:, :, cls].sum()), int(scaled[:, :, cls].size)
        assert chi2.ppf(1e-7, dof) < stat < chi2.isf(1e-7, dof), (cls, stat, dof)


def test_plan_refuses_bad_factors():
    with pytest.raises(CalibrationError, match="noise_factors"):
        plan_noise(mechanism="laplace", calibration="tight", epsilon=1.0, delta=0.0, clip_norm=1.0, s=1,
                   min_honest_load=3, sketch_kind="sum", m=1, d=3, sensitivity=2.0, frac_bits=12, width=6,
                   noise_factors=gram_noise_factors(3))
    for bad in (gram_noise_factors(4), [1.0, 0.5, 0.5, 1.0, 0.5, 1.5], [1.0, 0.0, 0.5, 1.0, 0.5, 1.0]):
        with pytest.raises(CalibrationError, match="noise_factors"):
            plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                       min_honest_load=3, sketch_kind="sum", m=1, d=3, sensitivity=2.0, frac_bits=12, width=6,
                       noise_factors=bad)
    with pytest.raises(ValueError, match="last axis"):
        sample_noise(Randomness.seeded_insecure("x").stream(), _gram_plan(d=3), (4, 5))


def test_plan_round_trips_its_factors_through_json():
    import json

    from ltm.dp.calibration import NoisePlan

    plan = _gram_plan()
    assert NoisePlan(**json.loads(json.dumps(plan.to_dict()))) == plan

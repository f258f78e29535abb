"""Mutation-kill tests for ``analyst/reconstruct.py`` (scripts/mutation.sh, docs/testing.md).

Each test checks behaviour against a value computed independently (a closed form written out
again, numpy/scipy in the clear, a second route through the code), never a recorded output.
"""
from __future__ import annotations

import math  # noqa: F401
import warnings  # noqa: F401
from dataclasses import replace as _replace  # noqa: F401

import numpy as np
import pytest

from kill_helpers import exact as _exact, gate_spec as _gate_spec  # noqa: F401
from ltm import sharing  # noqa: F401
from ltm.randomness import Randomness  # noqa: F401

# --- analyst/reconstruct.py -----------------------------------------------------------------------

from analyst.reconstruct import privacy_report, reconstruct_release, release_sha256  # noqa: E402
from ltm.jobspec import honest_row_loads  # noqa: E402
from ltm.calibration import gaussian_delta  # noqa: E402


def _phi_delta(sigma: float, eps: float, sens: float) -> float:
    """Balle & Wang's δ(ε) with scipy, independently of ltm.calibration."""
    from scipy.stats import norm

    return float(norm.cdf(sens / (2 * sigma) - eps * sigma / sens)
                 - math.exp(eps) * norm.cdf(-sens / (2 * sigma) - eps * sigma / sens))


def test_privacy_report_recomputes_the_achieved_delta_from_the_weakest_row():
    spec = _gate_spec(min_participants=1)
    plan = spec.noise_plan()
    mask = np.ones(spec.n, bool)
    loads, deduction = honest_row_loads(spec, mask)
    honest = int((loads - deduction).min())
    report = privacy_report(spec, plan, mask, randomness="csprng")
    expected = _phi_delta(plan.sigma_client * math.sqrt(honest), spec.privacy.epsilon, plan.sensitivity)
    assert report["achieved_delta"] == pytest.approx(expected, rel=1e-6)
    assert report["min_honest_load"] == honest and report["min_row_load"] == int(loads.min())
    assert report["participants"] == spec.n and report["servers"] == spec.k
    assert report["dp_verified"] is True
    p = spec.privacy
    assert report["guarantee"] == (f"({p.epsilon:g}, {expected:.3g})-DP per client (replace-one), against any "
                                   f"{spec.k - 1} of {spec.k} servers together with up to {p.t_prime} corrupt "
                                   f"clients and {p.corrupt_parties} corrupt parties")
    for key, value in (("mechanism", "gaussian"), ("epsilon", p.epsilon), ("delta", p.delta),
                       ("calibration", p.calibration), ("clip_norm", spec.clip_bound), ("clip_kind", spec.clip_norm),
                       ("sensitivity_l2", plan.sensitivity), ("sigma_client", plan.sigma_client),
                       ("sigma_release", plan.sigma_release), ("laplace_scale", plan.laplace_scale),
                       ("promised_min_honest_load", p.min_honest_load), ("t_prime", p.t_prime),
                       ("corrupt_parties", p.corrupt_parties), ("randomness", "csprng")):
        assert report[key] == value, key


def test_privacy_report_flags_a_set_that_buys_too_little_noise():
    spec = _gate_spec(min_participants=1)
    plan = spec.noise_plan()
    rng = np.random.default_rng(2)
    mask = rng.random(spec.n) < 0.25  # far fewer honest clients per row than L promised
    loads, deduction = honest_row_loads(spec, mask)
    honest = int((loads - deduction).min())
    assert 0 < honest < spec.privacy.min_honest_load
    report = privacy_report(spec, plan, mask, randomness="seeded (NOT private)")
    achieved = _phi_delta(plan.sigma_client * math.sqrt(honest), spec.privacy.epsilon, plan.sensitivity)
    assert achieved > spec.privacy.delta and report["dp_verified"] is False
    assert report["guarantee"] == (f"NOT ({spec.privacy.epsilon:g}, {spec.privacy.delta:g})-DP: the weakest release "
                                   f"entry's honest noise only gives δ = {achieved:.3g} at ε = "
                                   f"{spec.privacy.epsilon:g} — seeded randomness: NOT private, for experiments only")
    # no honest load at all: δ = 1
    empty = privacy_report(spec, plan, np.zeros(spec.n, bool), randomness="csprng")
    assert empty["achieved_delta"] == 1.0 and empty["dp_verified"] is False


def test_privacy_report_verifies_up_to_a_relative_tolerance_only():
    spec = _gate_spec(min_participants=1)
    plan = spec.noise_plan()
    mask = np.ones(spec.n, bool)
    loads, deduction = honest_row_loads(spec, mask)
    honest = int((loads - deduction).min())
    achieved = gaussian_delta(plan.sigma_client * math.sqrt(honest), spec.privacy.epsilon, plan.sensitivity)
    just_below = _replace(spec, privacy=_replace(spec.privacy, delta=achieved / (1 + 2e-9)))
    within = _replace(spec, privacy=_replace(spec.privacy, delta=achieved / (1 + 0.5e-9)))
    assert privacy_report(just_below, plan, mask, randomness="x")["dp_verified"] is False
    assert privacy_report(within, plan, mask, randomness="x")["dp_verified"] is True


def test_reconstruct_release_sums_decodes_and_scales():
    from ltm.ring import encode

    spec = _gate_spec(min_participants=1)
    plan = spec.noise_plan()
    rng = np.random.default_rng(4)
    m, D = spec.sketch.m, spec.width
    clear = rng.normal(size=(m, D)) * 100
    total = encode(clear, spec.frac_bits)
    shares = sharing.share(total, spec.k, Randomness.system(), mode="full")
    mask = np.ones(spec.n, bool)
    mask[:7] = False
    rel = reconstruct_release(spec, [s.values() for s in shares], mask, plan, randomness="csprng")
    assert np.allclose(rel.matrix, clear / math.sqrt(spec.make_sketch().pieces), atol=2.0**-spec.frac_bits)
    assert rel.n == spec.n - 7
    assert rel.noise_variance_per_column == pytest.approx((spec.n - 7) * plan.sigma_client**2, rel=1e-12)
    assert rel.sha256 == release_sha256(total)
    import hashlib
    assert rel.sha256 == hashlib.sha256(total.astype("<u8").tobytes()).hexdigest()
    assert rel.label == spec.label_index and rel.columns == spec.vector_names
    assert rel.privacy["participants"] == spec.n - 7
    with pytest.raises(ValueError, match=_exact(f"need all {spec.k} result shares, got 1")):
        reconstruct_release(spec, [total], mask, plan, randomness="csprng")


def _job(**kw):
    from sim.data import synthetic_ridge
    from sim.jobs import build_job

    randomness = Randomness.seeded_insecure("report-kills")
    spec, _ = build_job(synthetic_ridge(400, 3, randomness), job_id="report-kills", randomness=randomness,
                        parties=2, k=2, m=8, **kw)
    return spec


def test_privacy_report_laplace_and_other_labels():
    spec = _job(mechanism="laplace", delta=0.0, s=2)
    plan = spec.noise_plan()
    mask = np.ones(spec.n, bool)
    report = privacy_report(spec, plan, mask, randomness="csprng")
    assert report["achieved_delta"] == 0.0 and report["sensitivity_l1"] == plan.sensitivity
    assert report["dp_verified"] is True and report["guarantee"].startswith(f"({spec.privacy.epsilon:g}, 0)-DP")
    # too few honest clients for the Gamma split: not verified
    few = np.zeros(spec.n, bool)
    few[:20] = True
    assert privacy_report(spec, plan, few, randomness="csprng")["dp_verified"] is False
    cols = _job(partition="columns", s=2)
    text = privacy_report(cols, cols.noise_plan(), mask, randomness="csprng")["guarantee"]
    assert text.endswith(f"against any 1 of 2 servers together with up to {cols.privacy.corrupt_parties} corrupt "
                         f"parties (covering the honest parties' columns)")
    interp = _job(calibration="interpolate", interpolate_p=0.5, s=2)
    assert privacy_report(interp, interp.noise_plan(), mask, randomness="x")["calibration"] == "interpolate(0.5)"

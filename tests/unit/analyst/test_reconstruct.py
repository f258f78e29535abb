"""``analyst/reconstruct.py``'s tests, written to kill its mutants (scripts/mutation.sh, docs/testing.md).

Each test checks behaviour against a value computed independently (a closed form written out
again, numpy/scipy in the clear, a second route through the code), never a recorded output.
"""
from __future__ import annotations

import math  # noqa: F401
import warnings  # noqa: F401
from dataclasses import replace as _replace  # noqa: F401

import numpy as np
import pytest

from ltm import sharing  # noqa: F401

# --- analyst/reconstruct.py -----------------------------------------------------------------------
from ltm.analyst.reconstruct import privacy_report, reconstruct_release, release_sha256  # noqa: E402
from ltm.jobspec import honest_row_loads  # noqa: E402
from ltm.randomness import Randomness  # noqa: F401
from tests.helpers.jobs import gate_spec as _gate_spec
from tests.helpers.messages import exact as _exact  # noqa: F401


def _phi_delta(sigma: float, eps: float, sens: float) -> float:
    """Balle & Wang's δ(ε) with scipy, independently of ltm.dp.calibration."""
    from scipy.stats import norm

    return float(norm.cdf(sens / (2 * sigma) - eps * sigma / sens)
                 - math.exp(eps) * norm.cdf(-sens / (2 * sigma) - eps * sigma / sens))


def _grid_delta(plan, honest: int, eps: float) -> float:
    """δ at ε of the honest-fold discrete Gaussian sum, independently of ltm.dp.accounting: the
    Kairouz–Liu–Steinke ρ in mpmath, converted by dp_accounting's module-level compute_delta."""
    import mpmath
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS, compute_delta

    sigma = mpmath.sqrt(mpmath.mpf(plan.grid_sigma2))
    tau = 10 * mpmath.fsum(mpmath.exp(-2 * mpmath.pi**2 * sigma**2 * k / (k + 1)) for k in range(1, honest))
    eps_c = mpmath.mpf(plan.sensitivity) * 2**plan.frac_bits / (mpmath.sqrt(honest) * sigma) \
        + tau * plan.grid_l1_sensitivity
    rho = float(eps_c**2 / 2)
    return compute_delta(DEFAULT_RDP_ORDERS, [a * rho for a in DEFAULT_RDP_ORDERS], eps)[0]


def _weakest_honest_load(spec, mask) -> tuple[np.ndarray, int]:
    """The row loads of ``mask``'s clients and the smallest honest load of a row (its load less what
    the corrupt parties could take away)."""
    loads, deduction = honest_row_loads(spec, mask)
    return loads, int((loads - deduction).min())


def test_privacy_report_recomputes_the_achieved_delta_from_the_weakest_row():
    spec = _gate_spec(min_participants=1)
    plan = spec.noise_plan()
    mask = np.ones(spec.n, bool)
    loads, honest = _weakest_honest_load(spec, mask)
    report = privacy_report(spec, plan, mask, randomness="csprng")
    expected = _grid_delta(plan, honest, spec.privacy.epsilon)
    assert report["achieved_delta"] == pytest.approx(expected, rel=1e-6)
    assert (report["frac_bits"], report["grid_step"]) == (spec.frac_bits, 2.0**-spec.frac_bits)
    assert report["noise_grid_sd"] == pytest.approx(plan.sigma_client * 2.0**spec.frac_bits, rel=1e-15)
    assert report["min_honest_load"] == honest and report["min_row_load"] == int(loads.min())
    assert report["participants"] == spec.n and report["servers"] == spec.k
    assert report["dp_verified"] is True
    p = spec.privacy
    assert (p.t_prime, p.corrupt_parties) == (0, 1)  # a zero tolerance is not named as one
    assert report["guarantee"] == (f"({p.epsilon:g}, {expected:.3g})-DP per client (replace-one), against any "
                                   f"{spec.k - 1} of {spec.k} servers together with up to 1 corrupt party")
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
    _, honest = _weakest_honest_load(spec, mask)
    assert 0 < honest < spec.privacy.min_honest_load
    report = privacy_report(spec, plan, mask, randomness="seeded (NOT private)")
    achieved = _grid_delta(plan, honest, spec.privacy.epsilon)
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
    _, honest = _weakest_honest_load(spec, mask)
    achieved = _grid_delta(plan, honest, spec.privacy.epsilon)
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
    from tests.helpers.jobs import seeded_job

    # the report's arithmetic with the flat t′ deduction: no corrupt party (a reproduction job may ask)
    return seeded_job("report-kills", 400, 3, job_id="report-kills", parties=2, k=2, m=8,
                      **{"corrupt_parties": 0, **kw})[0]


def test_privacy_report_laplace_and_other_labels():
    spec = _job(mechanism="laplace", delta=0.0, s=2)
    plan = spec.noise_plan()
    mask = np.ones(spec.n, bool)
    report = privacy_report(spec, plan, mask, randomness="csprng")
    assert report["achieved_delta"] == 0.0 and report["sensitivity_l1"] == plan.sensitivity
    assert report["dp_verified"] is True and report["guarantee"].startswith(f"({spec.privacy.epsilon:g}, 0)-DP")
    # each honest pair draws a Pólya piece, 1/L of a DLap(t): L honest pairs per row suffice, fewer do not
    assert plan.laplace_pieces == spec.privacy.min_honest_load > 1
    for count in (20, 250, 400):
        few = np.zeros(spec.n, bool)
        few[:count] = True
        _, honest_few = _weakest_honest_load(spec, few)
        verified = privacy_report(spec, plan, few, randomness="csprng")["dp_verified"]
        assert verified is (honest_few >= plan.laplace_pieces) and verified is (count == 400)
    assert privacy_report(spec, plan, np.zeros(spec.n, bool), randomness="csprng")["dp_verified"] is False
    cols = _job(partition="columns", s=2)
    text = privacy_report(cols, cols.noise_plan(), mask, randomness="csprng")["guarantee"]
    assert cols.privacy.corrupt_parties == 0 and text.endswith("against any 1 of 2 servers")
    cols2 = _replace(cols, privacy=_replace(cols.privacy, corrupt_parties=2))
    text = privacy_report(cols2, cols2.noise_plan(), mask, randomness="csprng")["guarantee"]
    assert text.endswith("against any 1 of 2 servers together with up to 2 corrupt parties (covering the honest "
                         "parties' columns)")
    interp = _job(calibration="interpolate", interpolate_p=0.5, s=2)
    assert privacy_report(interp, interp.noise_plan(), mask, randomness="x")["calibration"] == "interpolate(0.5)"


def _boundary_delta(achieved: float) -> float | None:
    """A δ with δ·(1 + 1e-9) == achieved exactly, if one is near (to test the ≤ boundary)."""
    d = achieved / (1 + 1e-9)
    for _ in range(200):
        if d * (1 + 1e-9) == achieved:
            return d
        d = np.nextafter(d, 0.0 if d * (1 + 1e-9) > achieved else 1.0)
    return None


def test_privacy_report_deducts_corruption_and_handles_a_load_of_one():
    spec = _job(s=2, t_prime=2, min_honest_load=1)
    plan = spec.noise_plan()
    mask = np.ones(spec.n, bool)
    loads = spec.make_sketch().row_loads(mask)
    report = privacy_report(spec, plan, mask, randomness="x")
    assert report["min_honest_load"] == int(loads.min()) - 2 and report["min_row_load"] == int(loads.min())
    # a participant set whose weakest row holds exactly one honest (client, piece) pair
    spec0 = _job(s=2, min_honest_load=1)
    plan0 = spec0.noise_plan()
    rows, _ = spec0.make_sketch().placement(0, spec0.n)
    in_row0 = (rows == 0).any(axis=0)
    one = ~in_row0
    one[int(np.argmax(in_row0))] = True
    report = privacy_report(spec0, plan0, one, randomness="x")
    assert report["min_honest_load"] == 1
    assert report["achieved_delta"] == pytest.approx(_grid_delta(plan0, 1, spec0.privacy.epsilon), rel=1e-6)


def test_privacy_report_boundaries_are_inclusive():
    spec = _job(s=2)
    plan = spec.noise_plan()
    mask = np.ones(spec.n, bool)
    achieved = privacy_report(spec, plan, mask, randomness="x")["achieved_delta"]
    delta = _boundary_delta(achieved)
    assert delta is not None
    at = _replace(spec, privacy=_replace(spec.privacy, delta=delta))
    assert privacy_report(at, plan, mask, randomness="x")["dp_verified"] is True
    # Laplace: L Pólya pieces per entry make one DLap (the feasible L verifies); a scale below Δ₁/ε does not,
    # even by 1.5
    lap = _job(mechanism="laplace", delta=0.0, s=2)
    feasible = int(lap.make_sketch().row_loads().min())
    lap = _job(mechanism="laplace", delta=0.0, s=2, min_honest_load=feasible)
    lplan = lap.noise_plan()
    assert lplan.laplace_pieces == feasible
    assert privacy_report(lap, lplan, mask, randomness="x")["dp_verified"] is True
    weak = _replace(lplan, laplace_scale=lplan.laplace_scale / 1.5)
    assert privacy_report(lap, weak, mask, randomness="x")["dp_verified"] is False
    edge = _replace(lplan, laplace_scale=lplan.sensitivity / (lap.privacy.epsilon * (1 + 1e-9)))
    if edge.sensitivity / edge.laplace_scale == lap.privacy.epsilon * (1 + 1e-9):
        assert privacy_report(lap, edge, mask, randomness="x")["dp_verified"] is True


def test_privacy_report_labels_the_paper_calibration():
    spec = _job(s=2)
    plan = spec.noise_plan()
    paper = _replace(spec, privacy=_replace(spec.privacy, calibration="paper"))
    text = privacy_report(paper, plan, np.ones(spec.n, bool), randomness="csprng")["guarantee"]
    assert text.startswith(f"({spec.privacy.epsilon:g}, ")
    assert text.endswith("servers [calibration 'paper': Burkhardt et al. Cor 4.7/4.10 as printed, "
                         "reproduction mode]")


def test_reconstructed_release_carries_the_public_column_metadata():
    from ltm.ring import encode

    spec = _job(s=2, intercept=True)
    plan = spec.noise_plan()
    total = encode(np.ones((spec.sketch.m, spec.width)), spec.frac_bits)
    shares = sharing.share(total, spec.k, Randomness.system(), mode="full")
    rel = reconstruct_release(spec, [s.values() for s in shares], np.ones(spec.n, bool), plan, randomness="x")
    assert np.array_equal(rel.centers, [e.center for e in spec.layout])
    assert np.array_equal(rel.scales, [e.scale for e in spec.layout])
    assert rel.intercept == spec.intercept_index is not None
    assert rel.kind == spec.sketch.kind == "sparse"


def test_reconstructed_release_names_a_dense_kind():
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.ring import encode
    from ltm.sim.runtime.jobs import build_job

    randomness = Randomness.seeded_insecure("dense-kills")
    spec, _ = build_job(synthetic_ridge(400, 3, randomness), job_id="dense-kills", randomness=randomness,
                        parties=2, k=2, m=4, kind="dense")
    plan = spec.noise_plan()
    total = encode(np.ones((spec.sketch.m, spec.width)), spec.frac_bits)
    rel = reconstruct_release(spec, [total] + [np.zeros_like(total)] * (spec.k - 1), np.ones(spec.n, bool), plan,
                              randomness="x")
    assert rel.kind == "dense" and np.allclose(rel.matrix, 0.5)  # 1/√m with m = 4 pieces

"""Algorithm 1 of Liao, Needell & Xue (ltm.analyst.dprf): solvers, the corrected (certified) sensitivity
checked against an independent brute-force computation and dp_accounting, the paper's Lemma 6
sensitivity shown to fail, the NOT-DP labels of the reproduction modes, the noise laws, and the
RFRidge estimator on an LTM release (predict on raw inputs).

Arithmetic tests use fixed seeds.  Statistical checks use ≥ 6σ bounds (flake rate < 1e-8).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from ltm.analyst.dprf import (
    MODES,
    DPRandomFeatureRegressor,
    algorithm1_calibration,
    certified_radius,
    gamma_output_perturbation,
    gaussian_output_perturbation,
    kaczmarz,
    min_norm,
    sgd_sensitivity,
)
from ltm.analyst.random_features import RFRidge
from ltm.randomness import Randomness
from ltm.transforms import RandomFeatures, rff_spec


def test_min_norm_solvers_agree_and_kaczmarz_converges_from_zero():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 200))
    y = rng.normal(size=50)
    ref = np.linalg.pinv(A) @ y
    for solver in ("gram", "pinv"):
        c = min_norm(A, y, solver)
        np.testing.assert_allclose(c, ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(A @ min_norm(A, y, "gram"), y, atol=1e-9)
    kz = kaczmarz(A, y, 50 * 50 * 4, Randomness.seeded_insecure("kz"))
    assert np.linalg.norm(kz - ref) < 1e-6 * np.linalg.norm(ref)
    # under-parametrised (m > N): least squares
    B = rng.normal(size=(80, 10))
    z = rng.normal(size=80)
    np.testing.assert_allclose(min_norm(B, z, "gram"), np.linalg.lstsq(B, z, rcond=None)[0], rtol=1e-9)
    with pytest.raises(ValueError, match="unknown solver"):
        min_norm(A, y, "cg")


def _independent_c(X, y, Ncols, seed, bandwidth, B, R):
    """c̃ from scratch: features by ltm's public map, lstsq (not our solver), clip labels and norm."""
    t = RandomFeatures(rff_spec([f"x{j}" for j in range(X.shape[1])], n_features=Ncols, bandwidth=bandwidth,
                                seed=seed), X.shape[1])
    c = np.linalg.lstsq(t.apply(X), np.clip(y, -B, B), rcond=None)[0]
    return c * min(1.0, R / np.linalg.norm(c))


def test_certified_sensitivity_against_brute_force_neighbours_and_dp_accounting():
    """Replace-one sensitivity of the certified c̃, over adversarial neighbours (duplicated inputs
    with opposite labels make ΦΦᵀ singular; far points; extreme labels), never exceeds the claimed
    Δ = 2R, and σ buys (ε, δ) per dp_accounting's PLD for that Δ."""
    m, d, N, B = 12, 2, 30, 1.0
    rng = np.random.default_rng(5)
    X = rng.normal(size=(m, d))
    y = rng.uniform(-1, 1, size=m)
    seed, bw = bytes(range(32)), 0.3
    cal = algorithm1_calibration("certified", m=m, n_features=N, epsilon=1.0, delta=1e-5, label_bound=B)
    assert cal.dp and cal.radius == pytest.approx(B * math.sqrt(m) / math.sqrt(1 - 2 * 3 / 8))
    assert cal.sensitivity == 2 * cal.radius
    base = _independent_c(X, y, N, seed, bw, B, cal.radius)
    worst = 0.0
    candidates = [(X[(i + 1) % m], -y[(i + 1) % m] * 5) for i in range(m)]  # duplicate input, flipped label
    candidates += [(rng.normal(size=d) * s, lab) for s in (0.01, 1, 100) for lab in (-3, 3)]
    for i in range(m):
        for x_new, y_new in candidates:
            X2, y2 = X.copy(), y.copy()
            X2[i], y2[i] = x_new, y_new
            worst = max(worst, float(np.linalg.norm(_independent_c(X2, y2, N, seed, bw, B, cal.radius) - base)))
    assert cal.radius < worst <= cal.sensitivity * (1 + 1e-12)  # > R: a Δ of R would be wrong
    # the estimator computes the same c̃ (our solver vs lstsq)
    est = DPRandomFeatureRegressor(N, bw, epsilon=1.0, delta=1e-5, label_bound=B, seed=seed,
                                   randomness=Randomness.seeded_insecure("s"))
    est.fit(X, y)
    np.testing.assert_allclose(est.nonprivate_coef_, base, rtol=1e-6, atol=1e-9)
    # σ for Δ: independent accountant
    import dp_accounting  # a core dependency: a missing one fails, it does not skip
    from dp_accounting.pld import privacy_loss_distribution as pld
    dist = pld.from_gaussian_mechanism(standard_deviation=cal.sigma, sensitivity=cal.sensitivity,
                                       value_discretization_interval=1e-4, pessimistic_estimate=True,
                                       neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert dist.get_delta_for_epsilon(1.0) <= 1e-5 * 1.01


def test_paper_lemma6_sensitivity_fails_on_ordinary_data():
    """Lemma 6's Δ = 2‖y‖/√(1−2η) assumes λ_min(ΦΦᵀ) ≥ 1 − 2η; with N < 4m (as in every experiment of
    the paper) one replacement moves the unclipped min-norm solution by more than that."""
    m, d, N = 40, 3, 80
    rng = np.random.default_rng(7)
    X = rng.normal(size=(m, d))
    y = rng.uniform(-1, 1, size=m) / math.sqrt(m)  # ‖y‖ ≤ 1, as the lemma assumes
    cal = algorithm1_calibration("paper_lemma6_not_dp", m=m, n_features=N, epsilon=1.0, delta=1e-5,
                                 label_bound=1 / math.sqrt(m))
    t = RandomFeatures(rff_spec(["a", "b", "c"], n_features=N, bandwidth=0.5, seed=bytes(32)), d)
    base = np.linalg.lstsq(t.apply(X), y, rcond=None)[0]
    worst = 0.0
    for i in range(m):
        X2, y2 = X.copy(), y.copy()
        X2[i], y2[i] = X[(i + 1) % m] + 1e-3, -y[(i + 1) % m]  # a near-duplicate with another label
        worst = max(worst, float(np.linalg.norm(np.linalg.lstsq(t.apply(X2), y2, rcond=None)[0] - base)))
    assert worst > 10 * cal.sensitivity
    assert not cal.dp and cal.guarantee.startswith("NOT DP")


def test_reproduction_modes_are_labelled_not_dp():
    X = np.random.default_rng(1).normal(size=(20, 2))
    y = np.sin(X[:, 0])
    for mode in MODES:
        est = DPRandomFeatureRegressor(40, 1.0, epsilon=1.0, mode=mode, randomness=Randomness.seeded_insecure(mode))
        est.fit(X, y)
        if mode == "certified":
            assert est.privacy_["dp"] and "NOT DP" not in est.privacy_["guarantee"]
        else:
            assert mode.endswith("_not_dp")
            assert est.privacy_["dp"] is False and est.privacy_["guarantee"].startswith("NOT DP")
        assert "seeded" in est.privacy_["randomness"]
    ref = algorithm1_calibration("reference_code_not_dp", m=20, n_features=1600, epsilon=0.5, delta=1e-5)
    assert ref.sensitivity == pytest.approx(4 / 40)
    assert ref.sigma == pytest.approx(math.sqrt(2 * math.log(1.25 / 1e-5)) * 0.1 / 0.5)
    # by hand: the reference code's prediction noise 2·ln(1.25/δ)·16/(Nε²) = 375.6/(Nε²) at δ = 1e-5
    assert algorithm1_calibration("reference_code_not_dp", m=1000, n_features=1500, epsilon=1.0,
                                  delta=1e-5).sigma ** 2 == pytest.approx(375.6 / 1500, rel=1e-3)
    with pytest.raises(ValueError, match="eta"):
        certified_radius(10, 1.0, eta=0.5)


def test_noise_laws():
    sigma, N = 0.7, 200_000
    z = gaussian_output_perturbation(np.zeros(N), sigma, Randomness.seeded_insecure("g"))
    assert abs((z**2).mean() / sigma**2 - 1) < 6 * math.sqrt(2 / N)  # E‖z‖² = Nσ²
    # Gamma mechanism: ‖b‖ ~ Γ(N, Δ/ε): mean NΔ/ε, sd √N Δ/ε; direction uniform
    n, sens, eps = 400, 0.5, 2.0
    norms = np.array([np.linalg.norm(gamma_output_perturbation(np.zeros(n), sens, eps,
                                                               Randomness.seeded_insecure(f"gm{i}")))
                      for i in range(300)])
    assert abs(norms.mean() - n * sens / eps) < 6 * math.sqrt(n) * sens / eps / math.sqrt(300)
    # the paper's SGD baseline: Δ_SGD = 0.1504 for m = T = 1000, lr = 1/m (Wang & Guo's formula by hand)
    assert sgd_sensitivity(1000, 1000, 1e-3, 1e-5) == pytest.approx(0.1504, rel=2e-3)


def test_dprf_predict_fits_a_smooth_function_without_noise_budget_issues():
    """A large-ε certified model whose radius covers ‖c♯‖ (≈ 2.2 here) learns a smooth 1-D function."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(300, 1))
    y = np.sin(2 * X[:, 0])
    est = DPRandomFeatureRegressor(600, 0.5, epsilon=1e3, delta=1e-5, radius=3.0, label_bound=1.0,
                                   randomness=Randomness.seeded_insecure("fit"))
    est.fit(X, y)
    Xt = rng.uniform(-2, 2, size=(200, 1))
    assert np.mean((est.predict(Xt) - np.sin(2 * Xt[:, 0])) ** 2) < 0.05
    assert est.coef_.shape == (600,)


# ----------------------------------------------------------------------------------- LTM estimator
def test_rf_ridge_on_an_ltm_release_predicts_raw_inputs():
    from ltm.datasets.synthetic import synthetic_nonlinear
    from ltm.sim.runtime.inprocess import run_inprocess
    from ltm.sim.runtime.jobs import RFFOptions, build_job, party_tables
    from ltm.transforms import FeaturePipeline

    r = Randomness.seeded_insecure("rfridge")
    table = synthetic_nonlinear(3000, 3, r)
    spec, _ = build_job(table, job_id="rf", randomness=r, parties=2, k=2, m=60,
                        rff=RFFOptions(n_features=20), epsilon=1e4)
    from ltm.party.ledger import UNLIMITED  # a near-noiseless test job, far past any real budget
    run = run_inprocess(spec, party_tables(spec, table), r, budget=UNLIMITED)
    model = RFRidge(spec, lam=1.0).fit(run.release)
    X = np.column_stack([table.columns[f"x{j}"] for j in range(3)])[:50]
    lab = spec.layout[spec.label_index]
    F = FeaturePipeline.for_spec(spec).features(X)
    np.testing.assert_allclose(model.predict(X), lab.center + lab.scale * F @ model.coef_scaled_)
    assert model.coef_.shape == (spec.width - 1,) and model.feature_names_in_ == ("x0", "x1", "x2")
    yhat = model.predict(np.column_stack([table.columns[f"x{j}"] for j in range(3)]))
    y = table.columns["y"]
    assert np.mean((yhat - y) ** 2) < 0.8 * y.var()  # a near-noiseless release learns the non-linear target
    with pytest.raises(ValueError, match="not this job"):
        RFRidge(spec).fit(run.release.__class__(**{**run.release.__dict__, "columns": ("a",) * spec.width}))

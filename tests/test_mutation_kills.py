"""Tests written to kill mutants that survived the rest of the suite (scripts/mutation.sh).

Each test checks behaviour against a value computed independently (numpy/scipy in the clear, a
closed form, or a second route through the code), never against a recorded output.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from ltm import ring


# --- ltm/ring.py ---------------------------------------------------------------------------------


def test_encode_uses_float64_even_for_narrow_float_input():
    # float16 cannot hold 1.5 * 2^20; encoding must widen first, so the result equals the float64 one.
    half = np.array([1.5, -2.25], dtype=np.float16)
    assert np.array_equal(ring.encode(half, 20), ring.encode(half.astype(np.float64), 20))
    assert ring.decode(ring.encode(half, 20), 20).tolist() == [1.5, -2.25]


def test_encode_overflow_is_a_value_error_not_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError):  # 1e308·2^40 overflows float64 to inf inside encode
            ring.encode(np.array([1e308]), 40)
        with pytest.raises(ValueError, match="too large for fixed point"):
            ring.encode(np.array([2.0**70]), 0)
        with pytest.raises(ValueError, match="^cannot encode NaN or infinite values$"):
            ring.encode(np.array([np.inf, np.nan]), 16)


def test_decode_and_negate_accept_any_integer_ring_array():
    # Ring elements given as a narrower unsigned type or a Python list mean the same residues.
    narrow = np.array([5, 7], dtype=np.uint32)
    assert ring.decode(narrow, 0).tolist() == [5.0, 7.0]
    assert ring.decode(narrow, 0).dtype == np.float64
    neg = ring.negate([1, 2])
    assert neg.dtype == np.uint64
    assert neg.tolist() == [2**64 - 1, 2**64 - 2]
    assert ring.negate(narrow).tolist() == [2**64 - 5, 2**64 - 7]


# --- ltm/sharing.py ------------------------------------------------------------------------------

from ltm import sharing  # noqa: E402
from ltm.randomness import Randomness  # noqa: E402


def _exact(message: str) -> str:
    import re

    return "^" + re.escape(message) + "$"


def test_share_defaults_are_seed_mode_with_server_0_primary():
    x = np.arange(6, dtype=np.uint64).reshape(2, 3)
    shares = sharing.share(x, 3, Randomness.system())
    assert shares[0].data is not None and shares[0].seed is None
    assert all(s.seed is not None and s.data is None for s in shares[1:])
    assert np.array_equal(sharing.reconstruct(shares), x)


def test_share_and_reconstruct_accept_python_integers():
    # Python ints (e.g. from JSON) are ring elements too: the result is the uint64 residue.
    for values in ([1, 2], [1, 2**63, 2**64 - 1]):
        for mode in sharing.SHARE_MODES:
            shares = sharing.share(values, 2, Randomness.system(), mode=mode)
            assert sharing.reconstruct(shares).tolist() == values
    total = sharing.reconstruct([[1, 2], [3, 2**64 - 1]])
    assert total.dtype == np.uint64 and total.tolist() == [4, 1]


def test_sharing_error_messages_are_exact():
    stream = Randomness.system()
    with pytest.raises(ValueError, match=_exact("additive sharing needs at least 2 servers")):
        sharing.share(np.zeros(2, np.uint64), 1, stream)
    with pytest.raises(ValueError, match=_exact("nothing to reconstruct")):
        sharing.reconstruct([])
    with pytest.raises(ValueError, match=_exact("a share holds exactly one of data or seed")):
        sharing.Share(0, (1,))
    with pytest.raises(ValueError, match=_exact("share data does not match its declared shape")):
        sharing.Share(0, (2,), data=np.zeros(3, np.uint64))


# --- analyst/estimators.py: the de-biased ridge, its eigenvalue floor, LowRank's signs ---------

from analyst.estimators import LowRank, Ridge  # noqa: E402


def _design(m: int, p: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, p)) * np.array([5.0, 3.0, 2.0, 1.0][:p])
    y = X @ rng.normal(size=p) + rng.normal(size=m)
    return X, y


def test_debiased_ridge_subtracts_the_noise_gram_when_above_the_floor():
    X, y = _design(400, 3, 1)
    v, lam = 50.0, 2.0
    # Independent: the closed form (XᵀX − v·I + λI)⁻¹ Xᵀy by a linear solve (no eigh), valid when
    # every eigenvalue of XᵀX − vI is above the floor v/m·(2√(mp) + p).
    floor = v / 400 * (2 * np.sqrt(400 * 3) + 3)
    assert np.linalg.eigvalsh(X.T @ X - v * np.eye(3)).min() > floor
    expected = np.linalg.solve(X.T @ X - v * np.eye(3) + lam * np.eye(3), X.T @ y)
    model = Ridge(lam, debias=True).fit_matrix(X, y, noise_variance=v)
    assert np.allclose(model.coef_, expected, rtol=1e-10, atol=0)
    assert model.eigen_floor_ == pytest.approx(floor, rel=1e-12)
    assert model.indefinite_ is False
    assert model.min_eigenvalue_ == pytest.approx(np.linalg.eigvalsh(X.T @ X).min() - v, rel=1e-10)
    # and it differs from the biased estimator by exactly the −v shift
    biased = np.linalg.solve(X.T @ X + lam * np.eye(3), X.T @ y)
    assert np.allclose(Ridge(lam).fit_matrix(X, y).coef_, biased, rtol=1e-10)
    assert not np.allclose(model.coef_, biased, rtol=1e-3)


def test_debiased_ridge_clamps_eigenvalues_to_the_noise_floor():
    X, y = _design(50, 3, 2)
    m, p = X.shape
    v, lam = 200.0, 0.5  # large noise: some eigenvalues of XᵀX − vI fall below the floor (or below 0)
    floor = v / m * (2 * np.sqrt(m * p) + p)
    # Independent route: the SVD of X gives the eigenpairs of XᵀX.
    _, s, vt = np.linalg.svd(X, full_matrices=False)
    shifted = s**2 - v
    assert shifted.min() < floor < shifted.max()
    expected = vt.T @ ((vt @ (X.T @ y)) / (np.maximum(shifted, floor) + lam))
    model = Ridge(lam, debias=True).fit_matrix(X, y, noise_variance=v)
    assert np.allclose(model.coef_, expected, rtol=1e-9, atol=1e-12)
    assert model.eigen_floor_ == pytest.approx(floor, rel=1e-12)
    assert model.indefinite_ is bool(shifted.min() <= 0)
    assert model.solver_ == "eigh-clamped"


def test_debiased_ridge_indefinite_flag_is_set_by_a_negative_eigenvalue():
    X = np.diag([10.0, 1.0])  # XᵀX = diag(100, 1)
    y = np.array([1.0, 1.0])
    model = Ridge(0.0, debias=True).fit_matrix(X, y, noise_variance=4.0)
    assert model.indefinite_ is True and model.min_eigenvalue_ == pytest.approx(-3.0)
    floor = 4.0 / 2 * (2 * np.sqrt(4.0) + 2)  # = 12
    assert model.eigen_floor_ == pytest.approx(floor)
    assert np.allclose(model.coef_, [10.0 / 96.0, 1.0 / floor])  # (100−4)⁻¹·10 and floor⁻¹·1
    zero = Ridge(0.0, debias=True).fit_matrix(X, y, noise_variance=0.0)
    assert zero.indefinite_ is False and np.allclose(zero.coef_, [0.1, 1.0])


def test_lowrank_signs_make_the_largest_entry_positive_and_are_deterministic():
    rng = np.random.default_rng(3)
    for trial in range(12):
        M = rng.normal(size=(40, 6)) @ np.diag([9.0, 7.0, 5.0, 1.0, 0.5, 0.1])
        fitted = LowRank(3).fit_matrix(M)
        C = fitted.components_
        pivots = np.abs(C).argmax(axis=0)
        assert np.all(C[pivots, np.arange(3)] > 0), trial
        # Independent: the same subspace as numpy's SVD, each column equal up to its sign.
        _, s, vt = np.linalg.svd(M, full_matrices=False)
        assert np.allclose(np.abs(C.T @ vt[:3].T), np.eye(3), atol=1e-8)
        assert np.allclose(fitted.singular_values_, s[:3])
        # Flipping the sign of rows of M leaves its right singular vectors — and the fit — unchanged.
        flips = np.where(rng.random(40) < 0.5, -1.0, 1.0)[:, None]
        assert np.allclose(LowRank(3).fit_matrix(flips * M).components_, C, atol=1e-10)



# --- ltm/calibration.py ---------------------------------------------------------------------------

import math  # noqa: E402

from ltm import calibration as cal  # noqa: E402

_GOOD = {
    "gaussian_delta": dict(sigma=2.0, epsilon=1.0, sensitivity=1.0),
    "analytic_gaussian_sigma": dict(epsilon=1.0, delta=1e-6, sensitivity=1.0),
    "classical_gaussian_sigma": dict(epsilon=0.5, delta=1e-6, sensitivity=1.0),
    "paper_sparse_gaussian_sigma": dict(epsilon=1.0, delta=1e-3, eta=1.0, n=100_000, m=10, s=1, d=3, t_prime=0),
    "paper_dense_laplace_scale": dict(epsilon=1.0, eta=1.0, m=10, d=3),
    "plan_noise": dict(mechanism="gaussian", calibration="paper", epsilon=1.0, delta=1e-3, clip_norm=1.0, s=1,
                       min_honest_load=5, n=100_000, m=10, d=3, t_prime=0),
}
#: argument → (a bad value, the start of the message that must name that argument)
_BAD = {
    "sigma": ("x", "sigma must be a real number"), "epsilon": ("x", "epsilon must be a real number"),
    "sensitivity": (0.0, "sensitivity must be > 0"), "delta": (2.0, "delta must satisfy 0 < delta < 1"),
    "eta": (-1.0, "eta must be > 0"), "n": (1.5, "n must be an integer, got 1.5 (float)"),
    "m": ("10", "m must be an integer, got '10' (str)"), "s": (0, "s must be >= 1"),
    "d": (2.5, "d must be an integer, got 2.5 (float)"), "t_prime": (-1, "t_prime must be >= 0"),
    "clip_norm": (0, "clip_norm must be > 0"), "min_honest_load": (0, "min_honest_load must be >= 1"),
    "mechanism": ("gauss", "unknown mechanism 'gauss'"), "calibration": ("tite", "unknown calibration 'tite'"),
}


@pytest.mark.parametrize("func", sorted(_GOOD))
def test_calibration_errors_name_the_offending_argument(func):
    good = _GOOD[func]
    assert getattr(cal, func)(**good) is not None
    for arg in good:
        if arg not in _BAD:
            continue
        value, start = _BAD[arg]
        with pytest.raises(cal.CalibrationError) as err:
            getattr(cal, func)(**{**good, arg: value})
        assert str(err.value).startswith(start), (func, arg, str(err.value))


def test_plan_noise_messages_for_its_other_arguments():
    base = dict(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                min_honest_load=4)
    cases = [
        (dict(sketch_kind="round"), "unknown sketch_kind 'round'"),
        (dict(mechanism="laplace", delta="x"), "delta must be a real number"),
        (dict(calibration="interpolate"), "calibration='interpolate' needs the argument interpolate_p; "
                                          "pass interpolate_p=..."),
        (dict(calibration="interpolate", interpolate_p="x"), "interpolate_p must be a real number"),
        (dict(n=0), "n must be >= 1"), (dict(m=0), "m must be >= 1"), (dict(d=0), "d must be >= 1"),
        (dict(sensitivity=-2.0), "sensitivity must be > 0"),
    ]
    for extra, start in cases:
        with pytest.raises(cal.CalibrationError) as err:
            cal.plan_noise(**{**base, **extra})
        assert str(err.value).startswith(start), (extra, str(err.value))


def _cor47_sigma(eps, delta, eta, n, m, s, d, t):
    """Burkhardt et al. Cor 4.7 as printed, written out again from its docstring formula."""
    free = n - s - t
    inner = delta / d - m * math.exp(-free / (8 * m))
    return math.sqrt(4 * s**3 * eta**2 * math.log(1.25 * s / inner) * m * d**2 / (eps**2 * free))


@pytest.mark.parametrize("n, m, s, d, t", [(50_000, 1, 1, 1, 0), (200_000, 10, 3, 4, 2), (60, 1, 1, 1, 0)])
def test_paper_sparse_sigma_matches_the_printed_formula_at_the_smallest_sizes(n, m, s, d, t):
    got = cal.paper_sparse_gaussian_sigma(0.7, 1e-3, 1.5, n, m, s, d, t)
    assert got == pytest.approx(_cor47_sigma(0.7, 1e-3, 1.5, n, m, s, d, t), rel=1e-12)
    plan = cal.plan_noise(mechanism="gaussian", calibration="paper", epsilon=0.7, delta=1e-3, clip_norm=1.5,
                          s=s, min_honest_load=3, n=n, m=m, d=d, t_prime=t)
    assert plan.sigma_client == pytest.approx(got, rel=1e-12)
    assert plan.sigma_release == pytest.approx(got * math.sqrt(3), rel=1e-12)


def test_paper_sparse_sigma_refusals_and_their_numbers():
    # n − s − t′ = 0: the corollary does not apply at all.
    with pytest.raises(cal.CalibrationError, match="^Corollary 4.7 needs n - s - t_prime > 0, got n=2, s=1"):
        cal.paper_sparse_gaussian_sigma(1.0, 1e-3, 1.0, 2, 1, 1, 1, 1)
    # n − s − t′ = 1 > 0, but n is far too small: the zero-output branch, with the threshold spelled out.
    with pytest.raises(cal.CalibrationError) as err:
        cal.paper_sparse_gaussian_sigma(1.0, 1e-3, 1.0, 3, 2, 1, 4, 1)
    needed = 8.0 * 2 * math.log(4 * 2 / 1e-3) + 1 + 1
    assert str(err.value).startswith("n=3 is too small for Corollary 4.7: delta/d = 0.00025 <= ")
    assert f"= {needed:.6g} (or smaller m, larger delta)" in str(err.value)
    # δ/d exactly equal to m·exp(−(n−s−t′)/(8m)): the log argument is 0, still the zero-output branch.
    delta = 1 * math.exp(-8 / (8.0 * 1))
    with pytest.raises(cal.CalibrationError, match="too small for Corollary 4.7"):
        cal.paper_sparse_gaussian_sigma(1.0, delta, 1.0, 9, 1, 1, 1, 0)


def test_paper_dense_laplace_scale_at_the_smallest_sizes():
    assert cal.paper_dense_laplace_scale(0.5, 1.5, 1, 1) == pytest.approx(2 * 1.5 * 1 * 1 / 0.5)
    assert cal.paper_dense_laplace_scale(0.5, 1.5, 3, 2) == pytest.approx(2 * 1.5 * 9 * 2 / 0.5)


# --- server/release_gate.py -----------------------------------------------------------------------

from dataclasses import replace as _replace  # noqa: E402

from ltm.jobspec import honest_row_loads  # noqa: E402
from server.release_gate import GateRefusal, check_release  # noqa: E402


def _gate_spec(**privacy):
    from sim.data import synthetic_ridge
    from sim.jobs import build_job

    randomness = Randomness.seeded_insecure("gate-kills")
    # a private job (the seed only draws the data and the sketch): its reports are not reproduction ones
    spec, _ = build_job(synthetic_ridge(400, 3, randomness), job_id="gate-kills", randomness=randomness,
                        parties=2, k=2, m=8, s=2, reproduction=False)
    return _replace(spec, privacy=_replace(spec.privacy, **privacy)) if privacy else spec


def _refusal(spec, **kw) -> GateRefusal:
    args = dict(caller_role="analyst", job_digest=spec.digest, participants=np.ones(spec.n, bool),
                held=np.ones(spec.n, bool), already_released=False)
    with pytest.raises(GateRefusal) as err:
        check_release(spec, **{**args, **kw})
    return err.value


def test_gate_refusal_messages_are_exact():
    spec = _gate_spec()
    cases = [
        (dict(caller_role="party"), "PERMISSION_DENIED",
         "only the analyst may request a release (caller role 'party')"),
        (dict(job_digest="0" * 64), "FAILED_PRECONDITION", "the job digest in the request does not match this job's spec"),
        (dict(already_released=True), "FAILED_PRECONDITION",
         "job 'gate-kills' has already been released once; a second release would let differencing cancel the noise"),
        (dict(participants=np.ones(spec.n + 1, bool)), "INVALID_ARGUMENT",
         f"participant mask has shape ({spec.n + 1},), expected ({spec.n},)"),
        (dict(participants=np.arange(spec.n) < 10), "FAILED_PRECONDITION",
         f"participant set of 10 clients is below the job's minimum of {spec.privacy.min_participants}"),
    ]
    for kw, code, message in cases:
        refusal = _refusal(spec, **kw)
        assert (refusal.code, refusal.message) == (code, message)


def test_gate_load_refusal_names_the_weakest_row():
    spec = _gate_spec(min_participants=1)
    rng = np.random.default_rng(5)
    for _ in range(20):
        mask = rng.random(spec.n) < 0.3
        loads, deduction = honest_row_loads(spec, mask)
        honest = loads - deduction
        if int(np.argmin(honest)) != 0 and honest.min() < spec.privacy.min_honest_load:
            break
    else:
        pytest.fail("no participant set with its weakest row other than row 0")
    refusal = _refusal(spec, participants=mask)
    assert refusal.message.startswith(f"sketch row {int(np.argmin(honest))} would carry an honest load of "
                                      f"{int(honest.min())} < the promised L={spec.privacy.min_honest_load}")


def test_gate_allows_exactly_the_minimum_and_any_0_1_mask():
    spec = _gate_spec(min_participants=300, min_honest_load=1)
    mask = np.arange(spec.n) < 300
    decision = check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=mask,
                             held=np.ones(spec.n, bool), already_released=False)
    loads, deduction = honest_row_loads(spec, mask)
    assert (decision.participants, decision.min_honest_load, decision.min_row_load) == \
        (300, int((loads - deduction).min()), int(loads.min()))
    as_floats = check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=mask.astype(float),
                              held=np.ones(spec.n, bool), already_released=False)
    assert as_floats == decision


# --- analyst/reconstruct.py -----------------------------------------------------------------------

from analyst.reconstruct import privacy_report, reconstruct_release, release_sha256  # noqa: E402
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
                        parties=2, k=2, m=8, **{"reproduction": False, **kw})  # a private job
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


# --- ltm/sketch.py --------------------------------------------------------------------------------

from ltm.sketch import CHUNK_CLIENTS, Sketch  # noqa: E402

_SEED = bytes(range(32))


def test_sketch_refusals_are_exact():
    cases = [
        (lambda: Sketch("round", 4, 10, 1, _SEED), "unknown sketch kind 'round'; choose one of "),
        (lambda: Sketch("sparse", 0, 10, 1, _SEED), "sketch needs m ≥ 1 and n ≥ 1"),
        (lambda: Sketch("sparse", 4, 0, 1, _SEED), "sketch needs m ≥ 1 and n ≥ 1"),
        (lambda: Sketch("sparse", 4, 10, 5, _SEED), "sparse sketch needs 1 ≤ s ≤ m (got s=5, m=4)"),
        (lambda: Sketch("sparse", 4, 10, 0, _SEED), "sparse sketch needs 1 ≤ s ≤ m (got s=0, m=4)"),
        (lambda: Sketch("sparse", 4, 10, 1, _SEED[:31]), "the sketch seed must be 32 bytes"),
        (lambda: Sketch("sparse", 4, 10, 1, _SEED).placement(3, 11), "client range [3, 11) outside [0, 10)"),
        (lambda: Sketch("sparse", 4, 10, 1, _SEED).placement(-1, 2), "client range [-1, 2) outside [0, 10)"),
        (lambda: Sketch("sparse", 4, 10, 2, _SEED).apply(0, np.zeros((1, 3, 2), np.uint64)),
         "expected 2 pieces, got 1"),
        (lambda: Sketch("sparse", 10_000, 6_000, 1, _SEED).to_dense(), "to_dense is for small sketches only"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError) as err:
            make()
        assert str(err.value).startswith(message), (message, str(err.value))
    assert Sketch("sparse", 4, 10, 4, _SEED).pieces == 4 and Sketch("sparse", 1, 1, 1, _SEED).m == 1
    assert Sketch("dense", 5, 10, 1, _SEED).pieces == 5
    assert Sketch("dense", 4, 10, 1, _SEED).scale == 0.5 and Sketch("sparse", 9, 10, 9, _SEED).scale == 1 / 3


def _piece_matrices(sk: Sketch) -> np.ndarray:
    """(pieces, m, n) int64: S_l built entry by entry from the placement (for small sketches)."""
    rows, negative = sk.placement(0, sk.n)
    S = np.zeros((sk.pieces, sk.m, sk.n), dtype=np.int64)
    for l in range(sk.pieces):
        S[l, rows[l], np.arange(sk.n)] = np.where(negative[l], -1, 1)
    return S


@pytest.mark.parametrize("kind, m, s", [("sparse", 7, 3), ("sparse", 70, 2), ("dense", 6, 6), ("sparse", 65, 65)])
def test_sketch_apply_equals_the_matrix_product(kind, m, s):
    sk = Sketch(kind, m, 90, s, _SEED)
    S = _piece_matrices(sk)
    assert np.array_equal(S.sum(axis=0), sk.to_dense())
    if kind == "sparse":  # s distinct rows per column, ±1 each
        assert np.all((S != 0).sum(axis=1) == 1) and np.all((sk.to_dense() != 0).sum(axis=0) == s)
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2**64, size=(sk.pieces, 40, 3), dtype=np.uint64)
    include = rng.random(40) < 0.6
    start = 25
    want = np.zeros((m, 3), dtype=np.uint64)
    for l in range(sk.pieces):  # Σ_l S_l[:, start:start+40] · (values[l] masked), in uint64 (mod 2^64)
        block = S[l, :, start:start + 40] * include[None, :]
        pos = (block == 1).astype(np.uint64) @ values[l]
        neg = (block == -1).astype(np.uint64) @ values[l]
        want += pos - neg
    assert np.array_equal(sk.apply(start, values, include=include), want)
    assert np.array_equal(sk.apply(start, values, include=include, slots=sk.slots()), want)
    base = rng.integers(0, 2**64, size=(m, 3), dtype=np.uint64)
    assert np.array_equal(sk.apply(start, values, out=base.copy(), include=include), base + want)
    # loads: (participant, piece) non-zeros per row
    mask = rng.random(90) < 0.5
    assert np.array_equal(sk.row_loads(mask), (S[:, :, mask] != 0).sum(axis=(0, 2)))
    assert np.array_equal(sk.row_loads(), (S != 0).sum(axis=(0, 2)))
    rows, negative = sk.placement(0, 90)
    assert np.array_equal(sk.slots(), 2 * rows + negative)


def test_sketch_chunks_cover_the_range_in_order():
    sk = Sketch("sparse", 5, 30, 2, _SEED)
    got = list(sk.chunks(3, 29, size=7))
    assert [(a, b) for a, b, _, _ in got] == [(3, 10), (10, 17), (17, 24), (24, 29)]
    rows, negative = sk.placement(3, 29)
    assert np.array_equal(np.concatenate([r for _, _, r, _ in got], axis=1), rows)
    assert np.array_equal(np.concatenate([g for _, _, _, g in got], axis=1), negative)
    assert CHUNK_CLIENTS == 1 << 16


def test_sum_map_is_a_masked_column_sum():
    with pytest.raises(ValueError, match=_exact("the sum map has m = 1 and s = 1 (got m=2, s=1)")):
        Sketch("sum", 2, 10, 1, _SEED)
    with pytest.raises(ValueError, match=_exact("the sum map has m = 1 and s = 1 (got m=1, s=2)")):
        Sketch("sum", 1, 10, 2, _SEED)
    sk = Sketch("sum", 1, 10, 1, _SEED)
    rows, negative = sk.placement(2, 9)
    assert rows.shape == (1, 7) and not rows.any() and not negative.any() and negative.dtype == bool
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2**64, size=(1, 7, 4), dtype=np.uint64)
    include = np.array([1, 0, 1, 1, 0, 1, 1], dtype=bool)
    want = values[0][include].sum(axis=0, dtype=np.uint64)
    assert np.array_equal(sk.apply(2, values, include=include), want[None, :])
    assert np.array_equal(sk.apply(2, values), values[0].sum(axis=0, dtype=np.uint64)[None, :])
    assert np.array_equal(sk.row_loads(), [10]) and sk.scale == 1.0

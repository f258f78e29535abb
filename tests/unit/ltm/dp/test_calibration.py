"""Tests for ltm.dp.calibration: analytic Gaussian σ cross-checked against dp_accounting's PLD,
δ(σ) against scipy, the paper's formulas against hand computation, and plan_noise (docs/architecture.md §4)."""
from __future__ import annotations

import json
import math

import pytest
import scipy.special as scipy_special
import scipy.stats as scipy_stats

from ltm.dp.calibration import (
    CalibrationError,
    NoisePlan,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
    paper_dense_laplace_scale,
    paper_sparse_gaussian_sigma,
    plan_noise,
)

EPSILONS = (0.1, 0.5, 1.0, 3.0, 8.0)
DELTAS = (1e-5, 1e-6, 1e-9)
SENSITIVITIES = (1.0, 2.0 * math.sqrt(3.0))
GRID = [(e, d, s) for e in EPSILONS for d in DELTAS for s in SENSITIVITIES]


def approx(expected: float, rel: float = 1e-9):
    """Purely relative comparison.  pytest.approx's default abs=1e-12 would make every
    comparison of a δ ≲ 1e-12 vacuous, so it is switched off here."""
    return pytest.approx(expected, rel=rel, abs=0.0)


# dp_accounting's discretisation interval of the privacy loss.
PLD_H = 1e-4


# ------------------------------------------------------------------------------------------
# independent reference implementations (scipy only)
# ------------------------------------------------------------------------------------------


def scipy_delta(sigma: float, eps: float, sens: float) -> float:
    """Balle–Wang Thm 8 with scipy.stats.norm, straight from the formula (fine when δ ≳ 1e-10)."""
    a = sens / (2.0 * sigma)
    b = eps * sigma / sens
    return scipy_stats.norm.cdf(a - b) - math.exp(eps) * scipy_stats.norm.cdf(-a - b)


def scipy_delta_logspace(sigma: float, eps: float, sens: float) -> float:
    """Same formula, factored as Φ(a−b)·(1 − e^{ε + logΦ(−a−b) − logΦ(a−b)}) with scipy's
    log_ndtr, so neither term underflows (δ ≪ 1e-300 terms) nor does e^ε overflow (ε > 709)."""
    a = sens / (2.0 * sigma)
    b = eps * sigma / sens
    log_p = scipy_special.log_ndtr(a - b)
    log_q = scipy_special.log_ndtr(-a - b)
    return float(math.exp(log_p) * -math.expm1(eps + log_q - log_p))


def _pld():
    import dp_accounting  # a core dependency: a missing one fails, it does not skip
    from dp_accounting.pld import privacy_loss_distribution as pld
    return pld, dp_accounting.NeighboringRelation


def pld_delta(sigma: float, sens: float, eps: float, relation, pessimistic: bool = True) -> float:
    pld, _ = _pld()
    dist = pld.from_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivity=sens,
        value_discretization_interval=PLD_H,
        neighboring_relation=relation,
        pessimistic_estimate=pessimistic,
        # connect-the-dots only exists for pessimistic estimates; privacy buckets with
        # pessimistic_estimate=False rounds every privacy loss down => a lower bound on δ.
        use_connect_dots=pessimistic,
    )
    return float(dist.get_delta_for_epsilon(eps))


# ------------------------------------------------------------------------------------------
# 1. analytic σ vs dp_accounting
# ------------------------------------------------------------------------------------------


def test_dp_accounting_neighbouring_relation_convention():
    """Which dp_accounting relation is "the plain Gaussian mechanism with sensitivity Δ"?

    For q = 1, ADD_OR_REMOVE_ONE with sensitivity Δ compares N(0,σ²) with N(Δ,σ²): exactly the
    Balle–Wang δ for sensitivity Δ.  REPLACE_ONE compares N(−Δ,σ²) with N(+Δ,σ²), i.e. its
    `sensitivity` is the distance to a reference element and the mean shift is 2Δ.  So the two
    relations agree only when REPLACE_ONE is given Δ/2; given Δ it is the mechanism with 2Δ.
    Our Δ₂ = 2C√s is already the full replace-one shift of Y, so the right comparison is
    ADD_OR_REMOVE_ONE(Δ) (equivalently REPLACE_ONE(Δ/2)).
    """
    _, rel = _pld()
    for eps, delta, sens in [(0.5, 1e-6, 1.0), (1.0, 1e-9, 2.0 * math.sqrt(3.0))]:
        sigma = analytic_gaussian_sigma(eps, delta, sens)
        add_remove = pld_delta(sigma, sens, eps, rel.ADD_OR_REMOVE_ONE)
        replace_half = pld_delta(sigma, sens / 2.0, eps, rel.REPLACE_ONE)
        assert replace_half == approx(add_remove, rel=1e-6)
        replace_full = pld_delta(sigma, sens, eps, rel.REPLACE_ONE)
        assert replace_full > 100.0 * delta  # the 2Δ mechanism: far from private at this σ
        assert replace_full == approx(scipy_delta(sigma, eps, 2.0 * sens), rel=1e-3)


@pytest.mark.parametrize("eps,delta,sens", GRID)
def test_analytic_sigma_is_private_per_dp_accounting(eps, delta, sens):
    """Pessimistic (connect-the-dots) PLD δ is an upper bound on the true δ(σ).

    * Privacy: δ_PLD ≤ δ·(1 + 1e-9).  δ_PLD ≥ true δ, so this certifies δ(σ) ≤ δ by an
      implementation independent of ours; the 1e-9 only absorbs floating-point summation in
      dp_accounting (our σ is rounded up, leaving δ(σ) ≈ δ·(1 − 1e-10)).
    * Sanity band from the discretisation: rounding privacy losses up by at most h = 1e-4 gives
      true δ(ε) ≤ δ_PLD(ε) ≤ true δ(ε − h) (+ e^{−50} of truncated mass), so δ_PLD must lie in
      [δ·(1 − 1e-6), δ_scipy(σ, ε − h) + 1e-20].  The lower end catches an over-noised σ.
    """
    _, rel = _pld()
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    d_pld = pld_delta(sigma, sens, eps, rel.ADD_OR_REMOVE_ONE)
    assert d_pld <= delta * (1.0 + 1e-9)
    assert d_pld >= delta * (1.0 - 1e-6)
    assert d_pld <= scipy_delta(sigma, eps - PLD_H, sens) + 1e-20


@pytest.mark.parametrize("eps,delta", [(e, d) for e in EPSILONS for d in DELTAS])
def test_analytic_sigma_is_tight_per_dp_accounting(eps, delta):
    """Optimistic (privacy buckets, losses rounded down) PLD δ is a LOWER bound on the true δ:
    if it exceeds the target at 0.999·σ then no σ' ≤ 0.999·σ is private, i.e. our σ is within
    0.1% of optimal.  δ(σ) depends only on σ/Δ, so one Δ suffices for the PLD here; the Δ grid
    is covered by our own δ below and by the privacy test above."""
    _, rel = _pld()
    sigma = analytic_gaussian_sigma(eps, delta, 1.0)
    d_low = pld_delta(sigma * (1.0 - 1e-3), 1.0, eps, rel.ADD_OR_REMOVE_ONE, pessimistic=False)
    assert d_low > delta
    for sens in SENSITIVITIES:
        s = analytic_gaussian_sigma(eps, delta, sens)
        assert gaussian_delta(s * (1.0 - 1e-3), eps, sens) > delta
        assert gaussian_delta(s, eps, sens) <= delta


@pytest.mark.parametrize("eps,delta,sens", GRID)
def test_analytic_sigma_precision_and_scaling(eps, delta, sens):
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert gaussian_delta(sigma, eps, sens) <= delta
    # relative precision ~1e-12: shaving 1e-10 off σ already breaks the target
    assert gaussian_delta(sigma * (1.0 - 1e-10), eps, sens) > delta
    # δ depends on σ/Δ only
    assert sigma / sens == approx(analytic_gaussian_sigma(eps, delta, 1.0), rel=1e-11)


@pytest.mark.parametrize(
    "eps,delta", [(1e-3, 1e-5), (20.0, 1e-6), (100.0, 1e-12), (2.0, 0.5), (0.3, 1e-40), (0.3, 1e-300),
     (5.0, 1e-300)]
)
def test_analytic_sigma_extreme_parameters(eps, delta):
    sigma = analytic_gaussian_sigma(eps, delta, 1.0)
    assert math.isfinite(sigma) and sigma > 0
    assert gaussian_delta(sigma, eps, 1.0) <= delta
    assert gaussian_delta(sigma * (1.0 - 1e-9), eps, 1.0) > delta
    assert scipy_delta_logspace(sigma, eps, 1.0) == approx(delta, rel=1e-6)


# ------------------------------------------------------------------------------------------
# 2. gaussian_delta vs scipy, including δ ~ 1e-30
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sigma,eps,sens",
    [(1.0, 0.5, 1.0), (0.3, 1.0, 1.0), (5.0, 0.1, 2.0), (0.6, 8.0, 1.0), (2.0, 0.0, 1.0),
     (0.1, 0.2, 1.0), (30.0, 0.1, 1.0)],
)
def test_gaussian_delta_matches_scipy_formula(sigma, eps, sens):
    ref = scipy_delta(sigma, eps, sens)
    assert ref > 1e-8  # these points are in the regime where the direct formula is accurate
    assert gaussian_delta(sigma, eps, sens) == approx(ref, rel=1e-9)


@pytest.mark.parametrize(
    "sigma,eps,sens",
    [(11.0, 1.0, 1.0), (4.0, 3.0, 1.0), (0.32, 40.0, 1.0), (46.0, 0.25, 1.0), (3.5, 8.0, 2.0),
     (0.05, 520.0, 1.0), (0.031, 800.0, 1.0)],
)
def test_gaussian_delta_stable_for_tiny_delta(sigma, eps, sens):
    """δ from 1e-18 down to 1e-58; at ε = 800 the textbook formula's e^ε overflows."""
    ref = scipy_delta_logspace(sigma, eps, sens)
    assert 1e-60 < ref < 1e-17
    assert gaussian_delta(sigma, eps, sens) == approx(ref, rel=1e-7)


def test_gaussian_delta_shape():
    # decreasing in σ and in ε, in [0, 1], → 1 as σ → 0 and exact 0 only by underflow
    sigmas = [0.05 * 1.3**k for k in range(60)]
    values = [gaussian_delta(s, 1.0, 1.0) for s in sigmas]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(x >= y for x, y in zip(values, values[1:]))
    assert values[0] > 0.99
    assert gaussian_delta(1.0, 0.5, 1.0) > gaussian_delta(1.0, 1.0, 1.0)
    # ε = 0: total variation distance 2Φ(Δ/(2σ)) − 1
    assert gaussian_delta(2.0, 0.0, 1.0) == approx(
        2 * scipy_stats.norm.cdf(0.25) - 1, rel=1e-12
    )
    # huge ε must not overflow
    assert gaussian_delta(1.0, 1000.0, 1.0) == 0.0


@pytest.mark.parametrize(
    "kwargs,name",
    [({"sigma": 0.0, "epsilon": 1.0, "sensitivity": 1.0}, "sigma"),
     ({"sigma": 1.0, "epsilon": -0.1, "sensitivity": 1.0}, "epsilon"),
     ({"sigma": 1.0, "epsilon": 1.0, "sensitivity": float("nan")}, "sensitivity")],
)
def test_gaussian_delta_rejects_bad_input(kwargs, name):
    with pytest.raises(CalibrationError, match=name):
        gaussian_delta(**kwargs)


# ------------------------------------------------------------------------------------------
# 3. classical vs analytic
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 0.9, 0.999])
@pytest.mark.parametrize("delta", DELTAS + (1e-3,))
def test_classical_is_looser_than_analytic(eps, delta):
    classical = classical_gaussian_sigma(eps, delta, 2.0)
    assert classical == approx(math.sqrt(2 * math.log(1.25 / delta)) * 2.0 / eps)
    analytic = analytic_gaussian_sigma(eps, delta, 2.0)
    assert classical >= analytic
    assert gaussian_delta(classical, eps, 2.0) <= delta  # the classical bound is valid for ε < 1


@pytest.mark.parametrize("eps", [1.0, 3.0])
def test_classical_refuses_large_epsilon(eps):
    with pytest.raises(CalibrationError, match="epsilon < 1"):
        classical_gaussian_sigma(eps, 1e-6, 1.0)


@pytest.mark.parametrize(
    "args,name",
    [((0.0, 1e-5, 1.0), "epsilon"), ((1.0, 0.0, 1.0), "delta"), ((1.0, 1.0, 1.0), "delta"),
     ((1.0, 1e-5, -1.0), "sensitivity"), ((float("inf"), 1e-5, 1.0), "epsilon")],
)
def test_analytic_rejects_bad_input(args, name):
    with pytest.raises(CalibrationError, match=name):
        analytic_gaussian_sigma(*args)


# ------------------------------------------------------------------------------------------
# 4. the paper's formulas
# ------------------------------------------------------------------------------------------


def test_paper_sparse_gaussian_hand_computed():
    # ε=0.5, δ=1e-5, η=1, n=10^6, m=100, s=1, d=11, t'=0.
    # n−s−t' = 999999; m·exp(−999999/800) underflows to 0, so the log argument is
    # 1.25·1/(1e-5/11) = 1 375 000 and
    # σ² = 4·1·1·ln(1 375 000)·100·121 / (0.25·999999).
    expected = math.sqrt(4.0 * math.log(1_375_000.0) * 100.0 * 121.0 / (0.25 * 999_999.0))
    got = paper_sparse_gaussian_sigma(0.5, 1e-5, 1.0, 10**6, 100, 1, 11, 0)
    assert got == approx(expected, rel=1e-13)
    # ln(1 375 000) = 14.1339643, σ² = 2.7363382: a fixed number, in case both sides drift
    assert got == approx(1.654188, rel=1e-6)


def test_paper_sparse_gaussian_hand_computed_with_failure_term():
    # ε=0.25, δ=1e-6, η=0.5, n=20000, m=100, s=2, d=11, t'=10: n−s−t' = 19988 and
    # m·exp(−19988/800) ≈ 1.4e-9 is not negligible next to δ/d ≈ 9.1e-8.
    free = 20000 - 2 - 10
    denom = 1e-6 / 11 - 100 * math.exp(-free / 800.0)
    assert 0 < denom < 1e-6 / 11
    expected2 = 4 * 2**3 * 0.5**2 * math.log(1.25 * 2 / denom) * 100 * 11**2 / (0.25**2 * free)
    got = paper_sparse_gaussian_sigma(0.25, 1e-6, 0.5, 20000, 100, 2, 11, 10)
    assert got == approx(math.sqrt(expected2), rel=1e-13)


def test_paper_sparse_gaussian_is_below_derived_requirement():
    # Cor 4.7: the printed constant is 4, its proof (§4.2) gives 16 => σ is half the derived one
    eps, delta, eta, n, m, s, d = 0.5, 1e-5, 1.0, 10**6, 100, 1, 11
    paper = paper_sparse_gaussian_sigma(eps, delta, eta, n, m, s, d, 0)
    derived = math.sqrt(16 * s**3 * eta**2 * d**2 * m * math.log(1.25 / (delta / (s * d)))
                        / (eps**2 * (n - s)))
    assert paper == approx(derived / 2.0, rel=1e-12)


@pytest.mark.parametrize(
    "n,s,t_prime,match",
    [(10_000, 1, 0, "too small"),  # m·e^{−(n−s)/(8m)} ≈ 3.7e-4 > δ/d: zero-output branch
     (5, 3, 2, "n - s - t_prime"),
     (3, 2, 5, "n - s - t_prime")],
)
def test_paper_sparse_gaussian_refuses_small_n(n, s, t_prime, match):
    with pytest.raises(CalibrationError, match=match):
        paper_sparse_gaussian_sigma(0.5, 1e-5, 1.0, n, 100, s, 11, t_prime)


def test_paper_sparse_gaussian_threshold_is_where_the_spec_says():
    m, d, delta, s = 100, 11, 1e-5, 2
    threshold = 8 * m * math.log(d * m / delta) + s
    with pytest.raises(CalibrationError, match="zero-output"):
        paper_sparse_gaussian_sigma(0.5, delta, 1.0, math.floor(threshold), m, s, d, 0)
    assert paper_sparse_gaussian_sigma(0.5, delta, 1.0, math.ceil(threshold) + 1, m, s, d, 0) > 0


def test_paper_dense_laplace_scale():
    assert paper_dense_laplace_scale(0.5, 1.0, 10, 11) == approx(2 * 1 * 100 * 11 / 0.5)
    assert paper_dense_laplace_scale(2.0, 0.25, 3, 4) == approx(2 * 0.25 * 9 * 4 / 2.0)
    with pytest.raises(CalibrationError, match="m"):
        paper_dense_laplace_scale(1.0, 1.0, 0, 4)


# ------------------------------------------------------------------------------------------
# 5. plan_noise
# ------------------------------------------------------------------------------------------

BASE = dict(epsilon=1.0, delta=1e-6, clip_norm=1.5, s=4, min_honest_load=25)


def test_plan_tight_gaussian():
    plan = plan_noise(mechanism="gaussian", calibration="tight", **BASE)
    sens = 2 * 1.5 * math.sqrt(4)
    assert plan.sensitivity == approx(sens)
    assert plan.sigma_release == analytic_gaussian_sigma(1.0, 1e-6, sens)  # a continuous plan (no grid)
    assert plan.sigma_client * math.sqrt(25) == approx(plan.sigma_release, rel=1e-14)
    assert (plan.mechanism, plan.calibration, plan.delta) == ("gaussian", "tight", 1e-6)
    assert plan.laplace_scale == 0.0 and plan.gamma_shape == 0.0 and plan.interpolate_p is None
    assert plan.min_honest_load == 25
    # the honest noise of one entry of Y, N(0, L·σ_c²), meets the target at Δ₂
    assert gaussian_delta(math.sqrt(25) * plan.sigma_client, 1.0, sens) <= 1e-6 * (1 + 1e-9)


def test_plan_interpolate_endpoints():
    tight = plan_noise(mechanism="gaussian", calibration="tight", **BASE)
    p1 = plan_noise(mechanism="gaussian", calibration="interpolate", interpolate_p=1.0, **BASE)
    assert p1.sigma_client == approx(tight.sigma_client, rel=1e-14)
    assert p1.sigma_release == approx(tight.sigma_release, rel=1e-14)
    assert p1.interpolate_p == 1.0 and p1.calibration == "interpolate"
    p0 = plan_noise(mechanism="gaussian", calibration="interpolate", interpolate_p=0.0, **BASE)
    assert p0.sigma_client == approx(tight.sigma_release, rel=1e-14)  # local model
    assert p0.sigma_release == approx(p0.sigma_client * 5.0, rel=1e-14)
    half = plan_noise(mechanism="gaussian", calibration="interpolate", interpolate_p=0.5, **BASE)
    assert half.sigma_client**2 == approx(tight.sigma_release**2 * 25**-0.5, rel=1e-12)
    assert tight.sigma_client < half.sigma_client < p0.sigma_client


def test_plan_tight_laplace():
    plan = plan_noise(mechanism="laplace", calibration="tight", epsilon=0.5, delta=0.0,
                      clip_norm=2.0, s=3, min_honest_load=10)
    assert plan.sensitivity == approx(2 * 3 * 2.0)
    assert plan.laplace_scale == approx(12.0 / 0.5)
    assert plan.gamma_shape == approx(0.1)
    assert plan.sigma_client == approx(24.0 * math.sqrt(2 / 10))
    assert plan.sigma_release == approx(24.0 * math.sqrt(2))
    # L differences of Γ(1/L, b) sum to Lap(b): variances add up
    assert 10 * plan.sigma_client**2 == approx(plan.sigma_release**2)
    assert plan.delta == 0.0
    ignored = plan_noise(mechanism="laplace", calibration="tight", epsilon=0.5, delta=1e-5,
                         clip_norm=2.0, s=3, min_honest_load=10)
    assert ignored.delta == 0.0 and ignored.laplace_scale == plan.laplace_scale


def test_plan_paper_gaussian():
    plan = plan_noise(mechanism="gaussian", calibration="paper", epsilon=0.5, delta=1e-5,
                      clip_norm=1.0, s=1, min_honest_load=4000, n=10**6, m=100, d=11)
    assert plan.sigma_client == paper_sparse_gaussian_sigma(0.5, 1e-5, 1.0, 10**6, 100, 1, 11, 0)
    assert plan.sigma_release == approx(plan.sigma_client * math.sqrt(4000))
    assert plan.sensitivity == approx(2.0)
    for missing in ("n", "m", "d"):
        kwargs = dict(n=10**6, m=100, d=11)
        del kwargs[missing]
        with pytest.raises(CalibrationError, match=rf"\b{missing}\b"):
            plan_noise(mechanism="gaussian", calibration="paper", epsilon=0.5, delta=1e-5,
                       clip_norm=1.0, s=1, min_honest_load=4000, **kwargs)
    with pytest.raises(CalibrationError, match="too small"):
        plan_noise(mechanism="gaussian", calibration="paper", epsilon=0.5, delta=1e-5,
                   clip_norm=1.0, s=1, min_honest_load=40, n=10_000, m=100, d=11)


def test_plan_paper_laplace_dense():
    n, m, d, t = 1000, 10, 5, 4
    plan = plan_noise(mechanism="laplace", calibration="paper", epsilon=1.0, delta=0.0,
                      clip_norm=0.5, s=m, min_honest_load=90, n=n, m=m, d=d, t_prime=t,
                      sketch_kind="dense")
    b = 2 * 0.5 * m**2 * d / 1.0
    assert plan.laplace_scale == approx(b)
    assert plan.gamma_shape == approx(1 / (n / m - t))
    assert plan.sigma_client == approx(b * math.sqrt(2 / (n / m - t)))
    assert plan.sigma_release == approx(b * math.sqrt(2))
    assert plan.sensitivity == approx(2 * 0.5 * m)
    with pytest.raises(CalibrationError, match="t_prime"):
        plan_noise(mechanism="laplace", calibration="paper", epsilon=1.0, delta=0.0,
                   clip_norm=0.5, s=m, min_honest_load=1, n=n, m=m, d=d, t_prime=100,
                   sketch_kind="dense")
    with pytest.raises(CalibrationError, match="sketch_kind='dense'"):
        plan_noise(mechanism="laplace", calibration="paper", epsilon=1.0, delta=0.0,
                   clip_norm=0.5, s=m, min_honest_load=1, n=n, m=m, d=d)


def test_plan_to_dict_is_json_and_round_trips():
    plan = plan_noise(mechanism="gaussian", calibration="interpolate", interpolate_p=0.25, **BASE)
    data = json.loads(json.dumps(plan.to_dict()))
    assert NoisePlan(**data) == plan
    assert data["mechanism"] == "gaussian" and type(data["mechanism"]) is str
    assert set(data) == {
        "mechanism", "calibration", "epsilon", "delta", "sensitivity", "min_honest_load",
        "sigma_client", "sigma_release", "laplace_scale", "gamma_shape", "interpolate_p",
        "frac_bits", "base_sensitivity", "rounding_widening", "grid_sigma2", "grid_scale", "grid_l1_sensitivity",
    }


def _gauss(**overrides):
    kwargs = dict(mechanism="gaussian", calibration="tight", **BASE)
    kwargs.update(overrides)
    return plan_noise(**kwargs)


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"mechanism": "poisson"}, r"mechanism.*'gaussian', 'laplace'"),
        ({"calibration": "derived"}, r"calibration.*'tight', 'paper', 'interpolate'"),
        ({"sketch_kind": "block"}, r"sketch_kind.*'sparse', 'dense'"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"clip_norm": -2.0}, "clip_norm"),
        ({"s": 0}, r"\bs\b"),
        ({"s": 2.5}, r"\bs\b"),
        ({"min_honest_load": 0}, "min_honest_load"),
        ({"min_honest_load": True}, "min_honest_load"),
        ({"t_prime": -1}, "t_prime"),
        ({"m": 2}, r"s=4 exceeds m=2"),
        ({"m": 8, "sketch_kind": "dense"}, "s must equal m"),
        ({"calibration": "interpolate"}, "interpolate_p"),
        ({"calibration": "interpolate", "interpolate_p": 1.5}, "interpolate_p"),
        ({"calibration": "interpolate", "interpolate_p": -0.1}, "interpolate_p"),
        ({"interpolate_p": 0.5}, "interpolate_p"),
    ],
)
def test_plan_rejects_bad_input_naming_the_parameter(overrides, match):
    with pytest.raises(CalibrationError, match=match):
        _gauss(**overrides)


def test_plan_laplace_specific_rejections():
    lap = dict(mechanism="laplace", epsilon=1.0, clip_norm=1.0, s=2, min_honest_load=3)
    with pytest.raises(CalibrationError, match="delta"):
        plan_noise(calibration="tight", delta=-1e-9, **lap)
    with pytest.raises(CalibrationError, match="delta"):
        plan_noise(calibration="tight", delta=1.0, **lap)
    with pytest.raises(CalibrationError, match="only defined for mechanism='gaussian'"):
        plan_noise(calibration="interpolate", delta=0.0, interpolate_p=0.5, **lap)


def test_calibration_error_is_a_value_error():
    assert issubclass(CalibrationError, ValueError)


# ====== mutation-kill tests for ltm/dp/calibration.py (scripts/mutation.sh), formerly test_kills_calibration.py
# Each test checks behaviour against a value computed independently (a closed form written out
# again, numpy/scipy in the clear, a second route through the code), never a recorded output.
from tests.helpers.messages import exact as _exact  # noqa: E402
from ltm.dp import calibration as cal  # noqa: E402


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


def test_explicit_sensitivity_is_used_and_refused_for_paper():
    base = dict(epsilon=1.0, clip_norm=1.0, s=2, min_honest_load=4)
    g = cal.plan_noise(mechanism="gaussian", calibration="tight", delta=1e-6, sensitivity=3.5, **base)
    assert g.sensitivity == 3.5
    assert g.sigma_release == pytest.approx(cal.analytic_gaussian_sigma(1.0, 1e-6, 3.5))
    lap = cal.plan_noise(mechanism="laplace", calibration="tight", delta=0.0, sensitivity=3.5, **base)
    assert lap.sensitivity == 3.5 and lap.laplace_scale == pytest.approx(3.5)
    with pytest.raises(cal.CalibrationError, match=_exact(
            "calibration='paper' reproduces Burkhardt et al.'s sketch formulas and takes no explicit "
            "sensitivity; use calibration='tight' for a lifted release kind")):
        cal.plan_noise(mechanism="gaussian", calibration="paper", delta=1e-3, sensitivity=2.0, n=10**5, m=10,
                       d=3, **base)


@pytest.mark.parametrize("missing", ["n", "m", "d"])
def test_paper_calibration_names_the_missing_argument(missing):
    sizes = dict(n=100_000, m=10, d=3)
    del sizes[missing]
    base = dict(epsilon=1.0, clip_norm=1.0, min_honest_load=4)
    with pytest.raises(cal.CalibrationError, match=_exact(
            f"calibration='paper' (Corollary 4.7) needs the argument {missing}; pass {missing}=...")):
        cal.plan_noise(mechanism="gaussian", calibration="paper", delta=1e-3, s=1, **base, **sizes)
    dense = dict(n=1000, m=10, d=3)
    del dense[missing]
    with pytest.raises(cal.CalibrationError, match=_exact(
            f"calibration='paper' with mechanism='laplace' (Corollary 4.10) needs the argument {missing}; "
            f"pass {missing}=...")):
        cal.plan_noise(mechanism="laplace", calibration="paper", delta=0.0, s=10, sketch_kind="dense",
                       **base, **dense)


def test_plan_fields_for_each_mechanism():
    g = cal.plan_noise(mechanism="gaussian", calibration="tight", epsilon=0.7, delta=1e-6, clip_norm=1.5, s=2,
                       min_honest_load=9)
    assert (g.mechanism, g.calibration, g.epsilon, g.delta, g.min_honest_load) == ("gaussian", "tight", 0.7, 1e-6, 9)
    sigma_y = cal.analytic_gaussian_sigma(0.7, 1e-6, 2 * 1.5 * math.sqrt(2))
    assert g.sigma_release == pytest.approx(sigma_y) and g.sigma_client == pytest.approx(sigma_y / 3)
    assert (g.laplace_scale, g.gamma_shape, g.interpolate_p) == (0.0, 0.0, None)
    i = cal.plan_noise(mechanism="gaussian", calibration="interpolate", interpolate_p=0.5, epsilon=0.7, delta=1e-6,
                       clip_norm=1.5, s=2, min_honest_load=9)
    assert i.sigma_client == pytest.approx(sigma_y / 9**0.25) and i.sigma_release == pytest.approx(
        sigma_y / 9**0.25 * 3) and i.interpolate_p == 0.5 and i.calibration == "interpolate"
    lap = cal.plan_noise(mechanism="laplace", calibration="tight", epsilon=0.5, delta=1e-9, clip_norm=1.5, s=2,
                         min_honest_load=4)
    b = 2 * 2 * 1.5 / 0.5
    assert (lap.mechanism, lap.calibration, lap.epsilon, lap.delta, lap.min_honest_load) == ("laplace", "tight", 0.5,
                                                                                         0.0, 4)
    assert lap.laplace_scale == pytest.approx(b) and lap.gamma_shape == 0.25
    assert lap.sigma_client == pytest.approx(b * math.sqrt(2 * 0.25)) and lap.sigma_release == pytest.approx(
        b * math.sqrt(2))
    # paper Laplace (Cor 4.10): the split count n/m − t′ may be exactly 1
    one = cal.plan_noise(mechanism="laplace", calibration="paper", epsilon=1.0, delta=0.0, clip_norm=1.0, s=10,
                         min_honest_load=1, n=10, m=10, d=2, sketch_kind="dense")
    assert one.gamma_shape == 1.0 and one.laplace_scale == pytest.approx(2 * 1.0 * 100 * 2 / 1.0)


def test_gaussian_delta_of_a_huge_sigma_is_zero_and_n_of_one_is_legal():
    for sigma in (1e9, 1e12):
        assert cal.gaussian_delta(sigma, 1.0, 1.0) == 0.0
    assert cal.analytic_gaussian_sigma(1.0, 1e-300, 1.0) > 0
    with pytest.raises(cal.CalibrationError, match="^Corollary 4.7 needs n - s - t_prime > 0, got n=1, s=1"):
        cal.paper_sparse_gaussian_sigma(1.0, 1e-3, 1.0, 1, 1, 1, 1, 0)


# --- NoisePlan.zcdp_rho / dp_event: refusals and the Laplace grid event ------------------------------------

def _grid_plan(mechanism: str, frac_bits: int):
    # ε = 2: the Laplace grid scale is half the grid sensitivity, so swapping the two arguments shows
    delta = 1e-6 if mechanism == "gaussian" else 0.0
    return cal.plan_noise(mechanism=mechanism, calibration="tight", epsilon=2.0, delta=delta, clip_norm=1.0, s=1,
                          min_honest_load=4, frac_bits=frac_bits, width=2)


def test_zcdp_rho_refuses_every_plan_but_a_gaussian_grid_plan_with_its_message():
    # a Laplace grid plan and a continuous Gaussian plan each fail one half of the condition
    for plan in (_grid_plan("laplace", 8), _grid_plan("gaussian", 0)):
        with pytest.raises(ValueError) as err:
            plan.zcdp_rho()
        assert str(err.value) == "zcdp_rho is defined for Gaussian grid plans only"
    assert _grid_plan("gaussian", 8).zcdp_rho() > 0.0


def test_dp_event_of_a_laplace_grid_plan_is_the_laplace_event_of_its_grid_scale_and_sensitivity():
    from ltm.dp import accounting

    plan = _grid_plan("laplace", 8)
    assert plan.dp_event() == accounting.laplace_event(plan.grid_scale, plan.grid_sensitivity)
    with pytest.raises(ValueError) as err:
        _grid_plan("laplace", 0).dp_event()
    assert str(err.value) == "a continuous noise plan (frac_bits = 0) has no discrete dp event"

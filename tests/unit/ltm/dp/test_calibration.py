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
from ltm.dp import calibration as cal  # noqa: E402
from tests.helpers.messages import exact as _exact  # noqa: E402

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


# ====== property tests of the σ rule against mpmath (analytic_gaussian_sigma, _log_gaussian_delta) ======
# The reference is the analytic-Gaussian δ (Balle & Wang 2018, Thm 8) evaluated by mpmath at 80 digits, an
# implementation that shares nothing with the module's erfcx / log-space route.  The grids are seeded, so
# every run checks the same points (no flakes), and wide: ε from 1e-3 to 300, δ from 1e-300 to 0.9, Δ
# from 1e-4 to 1e4.
import random  # noqa: E402

import mpmath  # noqa: E402

_ULP = 2.0**-52


def _mp_delta(sigma: float, eps: float, sens: float) -> mpmath.mpf:
    """Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) at 80 significant digits (exact for our purposes)."""
    with mpmath.workdps(80):
        a = mpmath.mpf(sens) / (2 * mpmath.mpf(sigma))
        b = mpmath.mpf(eps) * mpmath.mpf(sigma) / mpmath.mpf(sens)
        return +(mpmath.ncdf(a - b) - mpmath.exp(mpmath.mpf(eps)) * mpmath.ncdf(-a - b))


def _mp_erfcx(u) -> mpmath.mpf:
    with mpmath.workdps(80):
        u = mpmath.mpf(u)
        return +(mpmath.exp(u * u) * mpmath.erfc(u))


def _grid(seed: int, count: int, log_eps: tuple[float, float], log_delta: tuple[float, float]):
    rng = random.Random(seed)
    return [(10 ** rng.uniform(*log_eps), 10 ** rng.uniform(*log_delta), 10 ** rng.uniform(-4.0, 4.0))
            for _ in range(count)]


#: ε ∈ [0.1, 20], δ ∈ [1e-15, 1e-2]: where δ(σ) is well conditioned and σ is the bisection's feasible end
#: (to 1e-13) rounded up by 4e-12, so within 5e-12 above the exact minimum.
_ORDINARY = _grid(20, 30, (-1.0, 1.3), (-15.0, -2.0))
#: the whole range, including tiny ε with tiny δ, where δ(σ) is ill-conditioned and large δ, where the
#: solution lies in the b ≤ a branch of _log_gaussian_delta (εσ²/Δ² ≤ ½).
_WIDE = _grid(21, 30, (-3.0, 2.5), (-300.0, -2.0)) + _grid(22, 15, (-2.0, 1.0), (-1.3, -0.05))


@pytest.mark.parametrize("eps, delta, sens", _ORDINARY)
def test_analytic_sigma_is_the_smallest_private_sigma_to_5e_12_per_mpmath(eps, delta, sens):
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert _mp_delta(sigma, eps, sens) <= delta  # private: the exact δ(σ) meets the target
    assert _mp_delta(sigma * (1.0 - 5e-12), eps, sens) > delta  # and 5e-12 less σ does not


@pytest.mark.parametrize("eps, delta, sens", _WIDE)
def test_analytic_sigma_is_private_and_near_minimal_everywhere_per_mpmath(eps, delta, sens):
    """Private per mpmath; private even by the module's own δ with its error bound counted against it
    (δ(σ)·(1 + err) ≤ δ, the docstring's promise, which is what costs up to ~1e-8 of extra σ where δ is
    ill-conditioned); and within 1e-7 of the exact minimum."""
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert _mp_delta(sigma, eps, sens) <= delta
    log_delta, rel_err = cal._log_gaussian_delta(sigma, eps, sens)
    assert log_delta + math.log1p(rel_err) <= math.log(delta)
    assert _mp_delta(sigma * (1.0 - 1e-7), eps, sens) > delta


def test_analytic_sigma_solution_in_the_b_le_a_branch_exists_in_the_wide_grid():
    """The large-δ half of _WIDE really exercises the b ≤ a branch at the solution (εσ²/Δ² ≤ ½)."""
    taus = [(eps, analytic_gaussian_sigma(eps, delta, 1.0)) for eps, delta, _ in _WIDE]
    assert sum(eps * tau * tau <= 0.5 for eps, tau in taus) >= 5
    assert sum(eps * tau * tau > 0.5 for eps, tau in taus) >= 20


def test_analytic_sigma_decreases_in_epsilon_and_delta_and_scales_with_sensitivity():
    epsilons = [10 ** (k / 4.0) for k in range(-12, 10)]  # 1e-3 … 178
    deltas = [10.0 ** -k for k in (300, 200, 100, 40, 20, 12, 9, 6, 3, 1)] + [0.3, 0.6, 0.9]
    for delta in (1e-300, 1e-9, 0.5):
        sigmas = [analytic_gaussian_sigma(eps, delta, 1.0) for eps in epsilons]
        assert all(x > y for x, y in zip(sigmas, sigmas[1:])), delta
    for eps in (1e-3, 0.5, 30.0):
        sigmas = [analytic_gaussian_sigma(eps, delta, 1.0) for delta in deltas]
        assert all(x > y for x, y in zip(sigmas, sigmas[1:])), eps
    for eps, delta, _ in _ORDINARY[:10] + _WIDE[-5:]:
        unit = analytic_gaussian_sigma(eps, delta, 1.0)
        for k in (-30, -3, 5, 40):  # δ depends on σ/Δ only, and a power-of-two Δ scales every step exactly
            assert analytic_gaussian_sigma(eps, delta, 2.0**k) == unit * 2.0**k
        for sens in (1e-4, 0.3, 7.0, 1e4):
            assert analytic_gaussian_sigma(eps, delta, sens) == approx(unit * sens, rel=1e-11)


def _delta_cases():
    """(σ, ε, Δ) in both branches of _log_gaussian_delta: b > a (tails, δ down to 1e-290) and b ≤ a."""
    rng = random.Random(23)
    cases = []
    for _ in range(40):
        eps, sens = 10 ** rng.uniform(-3.0, 2.0), 10 ** rng.uniform(-3.0, 3.0)
        tau = 10 ** rng.uniform(-0.5, 1.5) / math.sqrt(eps)  # εσ²/Δ² from 0.1 to 1000: either branch
        cases.append((tau * sens, eps, sens))
    return cases + [(1.0, 0.5, 1.0), (16.0, 0.125, 8.0)]  # b = a exactly: the boundary belongs to b ≤ a


@pytest.mark.parametrize("sigma, eps, sens", _delta_cases())
def test_log_gaussian_delta_and_its_error_bound_per_mpmath(sigma, eps, sens):
    """log δ is within its own stated relative error bound of the exact δ, and that bound is the
    documented first-order estimate: 32 ulp × (1 + u₊²) per erfcx term, amplified by the cancellation."""
    log_delta, rel_err = cal._log_gaussian_delta(sigma, eps, sens)
    exact = _mp_delta(sigma, eps, sens)
    assert exact > 0 and math.isfinite(log_delta)
    with mpmath.workdps(80):
        error = abs(log_delta - mpmath.log(exact))
        assert error <= rel_err + 4 * _ULP * abs(log_delta)  # + the rounding of log δ itself
        a, b = mpmath.mpf(sens) / (2 * mpmath.mpf(sigma)), mpmath.mpf(eps) * mpmath.mpf(sigma) / mpmath.mpf(sens)
        u_plus = (a + b) / mpmath.sqrt(2)
        if b > a:
            e_minus, e_plus = _mp_erfcx((b - a) / mpmath.sqrt(2)), _mp_erfcx(u_plus)
            stated = cal._ULP_SLACK * (1 + u_plus**2) * (e_minus + e_plus) / (e_minus - e_plus)
        else:  # δ = F − S with F = Φ(a − b) (error ~ulp) and S = e^ε Φ(−a − b) (error ~(1 + u₊²) ulp)
            first = mpmath.ncdf(a - b)
            second = mpmath.exp(mpmath.mpf(eps)) * mpmath.ncdf(-a - b)
            stated = cal._ULP_SLACK * (first + second * (1 + u_plus**2)) / (first - second)
        assert rel_err == approx(float(stated), rel=1e-6)


def test_delta_below_double_precision_is_zero_not_an_error():
    """ε = 0 and a σ so large that Φ(a − b) and e^ε Φ(−a − b) round to the same double: the b ≤ a branch
    returns δ = 0 (the true δ ≈ 0.8·Δ/(2σ) is below ½'s ulp), never log(0) or a δ of 1."""
    for sigma in (1e17, 1e18, 1e30):
        assert float(_mp_delta(sigma, 0.0, 1.0)) < 1e-16
        assert cal.gaussian_delta(sigma, 0.0, 1.0) == 0.0
        assert cal._log_gaussian_delta(sigma, 0.0, 1.0) == (-math.inf, math.inf)


# --- every NoisePlan field of every mechanism × calibration, on and off the grid ----------------------------
# Expected values are the formulas of plan_noise's docstring and docs/architecture.md written out again; the
# discrete-Gaussian σ comes from ltm.dp.accounting (a second route: plan_noise's arguments to it are what is
# under test) and is checked against kls_rho's privacy condition independently.
from ltm.dp import accounting as _accounting  # noqa: E402

_F, _W = 8, 3  # grid 2^-8, three values per client per piece
_STEP = 2.0**-_F


def _assert_fields(plan, **expected):
    """Every field of ``plan`` equals ``expected`` (floats to 1e-12 relative; none left unchecked)."""
    data = plan.to_dict()
    assert set(data) - {"noise_factors"} == set(expected)
    for key, want in expected.items():
        got = data[key]
        if isinstance(want, float) and want != 0.0:
            assert got == approx(want, rel=1e-12), key
        else:
            assert got == want and type(got) is type(want), (key, got, want)


def _grid_fields(sigma_c_grid: float, load: int) -> dict:
    """The σ fields of a grid Gaussian plan: the float parameter σ_c² (grid steps²) and what it draws."""
    sigma2 = sigma_c_grid**2
    return dict(grid_sigma2=sigma2, sigma_client=math.sqrt(sigma2) * _STEP,
                sigma_release=math.sqrt(sigma2) * _STEP * math.sqrt(load))


@pytest.mark.parametrize("calibration", ["tight", "interpolate"])
@pytest.mark.parametrize("factors", [None, (1.0, 0.5, 0.5)])
def test_grid_gaussian_plan_fields(calibration, factors):
    eps, delta, clip, s, load, p = 0.8, 1e-7, 0.75, 2, 9, 0.5
    sens_in = 2.5 if factors else None  # noise factors need an explicit sensitivity
    plan = plan_noise(mechanism="gaussian", calibration=calibration, epsilon=eps, delta=delta, clip_norm=clip, s=s,
                      min_honest_load=load, frac_bits=_F, width=_W, sensitivity=sens_in, noise_factors=factors,
                      interpolate_p=p if calibration == "interpolate" else None)
    base = 2.0 * clip * math.sqrt(s) if sens_in is None else sens_in
    widen = math.sqrt(s * _W) * _STEP
    sens_g = (base + widen) / _STEP
    l1_g = math.sqrt(2.0 * s * _W) * sens_g
    tau = math.sqrt(min(factors)) if factors else 1.0
    tight = _accounting.calibrate_discrete_gaussian(eps, delta, sens_g, load, l1_g, tau)
    # the tight σ_c (grid steps) makes the L-fold sum exactly as private as the accountant allows
    target = _accounting.rho_for(eps, delta)
    assert _accounting.kls_rho(tight, load, sens_g, l1_g, tau) <= target * (1 + 1e-9)
    assert _accounting.kls_rho(tight * (1 - 1e-6), load, sens_g, l1_g, tau) > target
    sigma_grid = tight if calibration == "tight" else tight * math.sqrt(load) ** (1 - p)
    _assert_fields(plan, mechanism="gaussian", calibration=calibration, epsilon=eps, delta=delta,
                   sensitivity=base + widen, min_honest_load=load, laplace_scale=0.0, gamma_shape=0.0,
                   interpolate_p=None if calibration == "tight" else p, frac_bits=_F, base_sensitivity=base,
                   rounding_widening=widen, grid_scale=0.0, grid_l1_sensitivity=l1_g,
                   **_grid_fields(sigma_grid, load))
    assert plan.noise_factors == factors


def test_grid_gaussian_paper_plan_fields():
    eps, delta, clip, s, load, n, m, d = 0.7, 1e-3, 1.5, 3, 7, 200_000, 10, 4
    plan = plan_noise(mechanism="gaussian", calibration="paper", epsilon=eps, delta=delta, clip_norm=clip, s=s,
                      min_honest_load=load, n=n, m=m, d=d, t_prime=2, frac_bits=_F, width=_W)
    base, widen = 2.0 * clip * math.sqrt(s), math.sqrt(s * _W) * _STEP
    sigma = paper_sparse_gaussian_sigma(eps, delta, clip, n, m, s, d, 2)
    _assert_fields(plan, mechanism="gaussian", calibration="paper", epsilon=eps, delta=delta,
                   sensitivity=base + widen, min_honest_load=load, laplace_scale=0.0, gamma_shape=0.0,
                   interpolate_p=None, frac_bits=_F, base_sensitivity=base, rounding_widening=widen, grid_scale=0.0,
                   grid_l1_sensitivity=math.sqrt(2.0 * s * _W) * (base + widen) / _STEP,
                   **_grid_fields(sigma / _STEP, load))


@pytest.mark.parametrize("calibration", ["tight", "interpolate", "paper"])
def test_continuous_gaussian_plan_fields(calibration):
    eps, delta, clip, s, load, p = 0.6, 1e-4, 1.25, 2, 16, 0.25
    extra = dict(n=300_000, m=10, d=3) if calibration == "paper" else {}
    plan = plan_noise(mechanism="gaussian", calibration=calibration, epsilon=eps, delta=delta, clip_norm=clip, s=s,
                      min_honest_load=load, interpolate_p=p if calibration == "interpolate" else None, **extra)
    sens = 2.0 * clip * math.sqrt(s)
    sigma_y = analytic_gaussian_sigma(eps, delta, sens)
    sigma_c = {"tight": sigma_y / 4.0, "interpolate": sigma_y / 4.0 * 4.0 ** 0.75,
               "paper": paper_sparse_gaussian_sigma(eps, delta, clip, 300_000, 10, s, 3, 0)}[calibration]
    _assert_fields(plan, mechanism="gaussian", calibration=calibration, epsilon=eps, delta=delta, sensitivity=sens,
                   min_honest_load=load, sigma_client=sigma_c, sigma_release=sigma_y if calibration == "tight"
                   else sigma_c * 4.0, laplace_scale=0.0, gamma_shape=0.0,
                   interpolate_p=p if calibration == "interpolate" else None, frac_bits=0, base_sensitivity=sens,
                   rounding_widening=0.0, grid_sigma2=0.0, grid_scale=0.0, grid_l1_sensitivity=0.0)


@pytest.mark.parametrize("frac_bits", [0, _F])
@pytest.mark.parametrize("calibration", ["tight", "paper"])
def test_laplace_plan_fields(calibration, frac_bits):
    eps, clip, load, n, m, d, t = 0.5, 0.75, 6, 400, 4, 3, 2
    s = m if calibration == "paper" else 2
    extra = dict(n=n, m=m, d=d, t_prime=t, sketch_kind="dense") if calibration == "paper" else {}
    plan = plan_noise(mechanism="laplace", calibration=calibration, epsilon=eps, delta=1e-9, clip_norm=clip, s=s,
                      min_honest_load=load, frac_bits=frac_bits, width=_W, **extra)
    base = 2.0 * s * clip
    b = base / eps if calibration == "tight" else 2.0 * clip * m**2 * d / eps
    common = dict(mechanism="laplace", calibration=calibration, epsilon=eps, delta=0.0, min_honest_load=load,
                  interpolate_p=None, frac_bits=frac_bits, base_sensitivity=base, grid_sigma2=0.0)
    if not frac_bits:  # L (or n/m − t′) differences of Γ(shape, b) add up to one Lap(b)
        shape = 1.0 / load if calibration == "tight" else 1.0 / (n / m - t)
        _assert_fields(plan, **common, sensitivity=base, sigma_client=b * math.sqrt(2.0 * shape),
                       sigma_release=b * math.sqrt(2.0), laplace_scale=b, gamma_shape=shape, rounding_widening=0.0,
                       grid_scale=0.0, grid_l1_sensitivity=0.0)
        return
    widen = s * _W * _STEP
    sens_g = (base + widen) / _STEP
    t_grid = math.ceil(sens_g) / eps if calibration == "tight" else b / _STEP  # DLap(t) is ε-DP for Δ₁ ≤ ⌈Δ₁⌉
    # tight: L Pólya pieces NB(1/L, p) − NB(1/L, p) of one DLap(t); paper: a whole DLap(t) per pair
    pieces = load if calibration == "tight" else 1
    p = math.exp(-1.0 / t_grid)
    dlap_sd = math.sqrt(2.0 * p) / -math.expm1(-1.0 / t_grid) * _STEP  # DLap(t)'s exact sd, ≈ √2·t
    _assert_fields(plan, **common, sensitivity=base + widen, sigma_client=dlap_sd / math.sqrt(pieces),
                   sigma_release=dlap_sd, laplace_scale=t_grid * _STEP, gamma_shape=1.0 / pieces,
                   rounding_widening=widen, grid_scale=t_grid, grid_l1_sensitivity=sens_g)
    assert plan.laplace_pieces == pieces


@pytest.mark.parametrize("factors", [None, (1.0, 0.25)])
def test_grid_gaussian_of_a_grid_step_or_two_counts_tau_at_the_smallest_scale(factors):
    """Near one grid step the discrete Gaussian's τ term matters (it is ≈ 0 at the usual hundreds of
    steps): σ_c is solved with τ at σ_c·√min(factors), or σ_c itself for i.i.d. noise."""
    eps, delta, load, f = 10.0, 1e-5, 8, 2
    sens = 1.0 if factors else None
    plan = plan_noise(mechanism="gaussian", calibration="tight", epsilon=eps, delta=delta, clip_norm=0.5, s=1,
                      min_honest_load=load, frac_bits=f, width=2, sensitivity=sens, noise_factors=factors)
    sens_g, l1_g = plan.grid_sensitivity, plan.grid_l1_sensitivity
    tau = math.sqrt(min(factors)) if factors else 1.0
    sigma = math.sqrt(plan.grid_sigma2)
    assert sigma < 2.0
    target = _accounting.rho_for(eps, delta)
    assert _accounting.kls_rho(sigma, load, sens_g, l1_g, tau) <= target * (1 + 1e-9)
    assert _accounting.kls_rho(sigma * (1 - 1e-6), load, sens_g, l1_g, tau) > target
    # and the τ term is what decides it here: without it σ would be visibly smaller
    assert _accounting.calibrate_discrete_gaussian(eps, delta, sens_g, load, l1_g, 2.0 * tau) < sigma * (1 - 1e-3)


def test_analytic_sigma_refuses_where_double_precision_cannot_resolve_delta():
    """ε = 1e-20 with δ ≤ 1e-15: the σ needed (~0.4Δ/δ) makes δ(σ) a difference of two terms equal to
    double precision, so δ(σ) cannot be verified and the solver refuses, naming its inputs."""
    for eps, delta in ((1e-20, 1e-100), (1e-16, 1e-15)):
        with pytest.raises(cal.CalibrationError, match=_exact(
                f"could not verify sigma for epsilon={eps!r}, delta={delta!r}, sensitivity=2.0")):
            analytic_gaussian_sigma(eps, delta, 2.0)
    assert analytic_gaussian_sigma(1e-20, 1e-10, 2.0) > 0  # a δ double precision resolves is solved


#: large ε, where σ/Δ is well below 1 (the bisection's tolerance is relative to σ/Δ, not absolute).
_LARGE_EPS = _grid(24, 12, (1.3, 2.5), (-12.0, -2.0))


@pytest.mark.parametrize("eps, delta, sens", _LARGE_EPS)
def test_analytic_sigma_at_large_epsilon_is_the_smallest_private_sigma_to_5e_12(eps, delta, sens):
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert sigma / sens < 0.5
    assert _mp_delta(sigma, eps, sens) <= delta
    assert _mp_delta(sigma * (1.0 - 5e-12), eps, sens) > delta


def test_plan_noise_messages_for_the_grid_and_rho_arguments():
    base = dict(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                min_honest_load=4)
    cases = [
        (dict(frac_bits=8), "a grid plan (frac_bits > 0) needs width= (values per client per piece)"),
        (dict(frac_bits=-1, width=2), "frac_bits must be >= 0, got -1"),
        (dict(frac_bits=8, width=0), "width must be >= 1, got 0"),
        (dict(mechanism="laplace", delta=0.0, noise_factors=(1.0,)),
         "noise_factors are for the Gaussian mechanism (Laplace draws are i.i.d.)"),
        (dict(zcdp_rho=0.0, frac_bits=8, width=2), "zcdp_rho must be > 0, got 0.0"),
        (dict(delta="x"), "delta must be a real number, got 'x'"),
        (dict(epsilon=True), "epsilon must be a real number, got the bool True"),
    ]
    for extra, message in cases:
        with pytest.raises(cal.CalibrationError, match=_exact(message)):
            cal.plan_noise(**{**base, **extra})


def _computed_root(eps: float, delta: float) -> float:
    """The σ/Δ where the module's own computed log δ crosses log δ, bisected to the last ulp (a second
    route to the point analytic_gaussian_sigma brackets)."""
    feasible = lambda tau: cal._log_gaussian_delta(tau, eps, 1.0)[0] <= math.log(delta)  # noqa: E731
    lo, hi = 1e-300, 1e300
    while True:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            return hi
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)


@pytest.mark.parametrize("eps, delta", [(1e-3, 1e-300), (1e-4, 1e-100), (1e-5, 1e-10), (1e-6, 1e-50), (1e-8, 1e-20)])
def test_ill_conditioned_sigma_is_the_root_bumped_by_the_first_doubling_of_4e_12_that_verifies(eps, delta):
    """Where δ is ill-conditioned the bump that covers δ's error bound is large enough to measure: σ is
    the root times (1 + 4e-12·2^k) (the docstring's rule: the bump doubles until δ(σ)·(1 + err) ≤ δ),
    and the bump before it, 4e-12·2^(k−1), does not verify."""
    root = _computed_root(eps, delta)
    sigma = analytic_gaussian_sigma(eps, delta, 1.0)
    # Where δ is ill-conditioned its computed value is noisy near the root, so the bisection's end can sit
    # ~1e-10 away from this root (not 1e-13): still well inside 2% of a bump of 4e-12·2^9 or more.
    bump = sigma / root - 1.0
    k = math.log2(bump / 4e-12)
    assert k > 8 and abs(k - round(k)) < 0.02, k
    log_delta, rel_err = cal._log_gaussian_delta(root * (1.0 + bump / 2.0), eps, 1.0)
    assert log_delta + math.log1p(rel_err) > math.log(delta)

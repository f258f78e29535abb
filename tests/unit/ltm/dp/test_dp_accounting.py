"""ltm.dp.accounting and the grid plans, each number checked against an independent computation.

Independent: mpmath at 60 digits for τ and the σ solves; dp_accounting used differently for ρ*
(the RDP conversion's own per-order formula, inverted in closed form: ε(ρ) ≤ ε ⇔ some order α has
αρ + log(1 − 1/α) − log(δα)/(α − 1) ≤ ε, so ρ* = max_α (ε − c_α)/α).  Agreement within 1e-9 relative.
"""
from __future__ import annotations

import math

import mpmath
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS, RdpAccountant

from ltm.dp import accounting
from ltm.dp.calibration import plan_noise
from ltm.dp.grid import MIN_NOISE_GRID_STEPS, noise_grid_problem, round_to_grid, rounding_widening

mpmath.mp.dps = 60
REL = 1e-9


def rho_star_closed_form(eps: float, delta: float) -> float:
    best = mpmath.mpf(-1)
    for a in DEFAULT_RDP_ORDERS:
        if a <= 1.01:
            continue
        a = mpmath.mpf(a)
        c = mpmath.log(1 - 1 / a) - mpmath.log(mpmath.mpf(delta) * a) / (a - 1)
        best = max(best, (mpmath.mpf(eps) - c) / a)
    return float(best)


def tau_exact(sigma, load: int):
    s2 = mpmath.mpf(sigma) ** 2
    return 10 * mpmath.fsum(mpmath.exp(-2 * mpmath.pi**2 * s2 * k / (k + 1)) for k in range(1, load))


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-6), (0.1, 1e-5), (4.0, 1e-9), (8.0, 1e-6)])
def test_rho_star_matches_the_conversion_inverted_in_closed_form(eps, delta):
    got = accounting.rho_for(eps, delta)
    assert abs(got / rho_star_closed_form(eps, delta) - 1) < REL
    assert accounting.zcdp_epsilon(got, delta) <= eps  # feasible by the accountant itself
    assert abs(accounting.zcdp_delta(got, eps) / delta - 1) < 1e-6  # and the inverse conversion agrees


@pytest.mark.parametrize("sigma, load", [(0.6, 2), (1.0, 7), (1.3, 65), (1.3, 66), (1.5, 10_000), (3.0, 10**8)])
def test_kls_tau_is_an_upper_bound_and_exact_for_short_sums(sigma, load):
    got = accounting.kls_tau(sigma, load)
    exact = tau_exact(sigma, min(load, 65))
    assert got >= float(tau_exact(sigma, min(load, 3000))) * (1 - 1e-12)  # an upper bound on the true τ
    if load > 65:  # the first 64 terms exactly, each of the other L − 65 bounded by the 65th (k = 65)
        a = 2 * mpmath.pi**2 * mpmath.mpf(sigma) ** 2
        exact += 10 * (load - 65) * mpmath.exp(-a * 65 / 66)
    if exact > mpmath.exp(-700):
        assert abs(got / float(exact) - 1) < REL
    assert accounting.kls_tau(sigma, 1) == 0.0
    assert accounting.kls_tau(40.0, 10**8) == math.exp(-700)  # below e^-700: reported as e^-700 (upper bound)


@pytest.mark.parametrize("eps, delta, d2, load, d1", [
    (1.0, 1e-6, 2.0**33, 9500, 2.0**36),   # today's default scale: τ negligible
    (1.0, 1e-6, 40.0, 3800, 400.0),         # the gram attack job: τ forces σ up
    (0.5, 1e-9, 9.0, 1, 20.0),
    (1.0, 1e-6, 10.0, 3800, 100.0),         # σ₀ ≈ 0.73 steps: τ dominates, the solve moves σ up
    (1.0, 1e-6, 3.0, 50, 20.0),
    (8.0, 1e-6, 9.0, 1, 20.0),              # √(2ρ*) > 1: the bracket's lower end is Δ₂/(√L·√(2ρ*))
])
def test_discrete_gaussian_sigma_matches_an_mpmath_solve(eps, delta, d2, load, d1):
    target = mpmath.sqrt(2 * mpmath.mpf(rho_star_closed_form(eps, delta)))

    def excess(sigma):
        return mpmath.mpf(d2) / (mpmath.sqrt(load) * sigma) + tau_exact(sigma, min(load, 200)) * d1 - target \
            if load <= 200 else \
            mpmath.mpf(d2) / (mpmath.sqrt(load) * sigma) + (tau_exact(sigma, 65) + 10 * (load - 65) * mpmath.exp(
                -2 * mpmath.pi**2 * sigma**2 * 65 / 66)) * d1 - target

    guess = mpmath.mpf(d2) / (mpmath.sqrt(load) * target)
    exact = mpmath.findroot(excess, (guess, guess * 4), solver="anderson") if excess(guess) > 0 else guess
    got = accounting.calibrate_discrete_gaussian(eps, delta, d2, load, d1)
    assert abs(got / float(exact) - 1) < REL
    assert accounting.kls_rho(got, load, d2, d1) <= accounting.rho_for(eps, delta)


def test_grid_gaussian_plan_fields_and_its_event():
    f, W, s, L, C = 20, 6, 2, 400, 1.5
    plan = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=C, s=s,
                      min_honest_load=L, frac_bits=f, width=W)
    widen = math.sqrt(s * W) * 2.0**-f
    assert plan.rounding_widening == widen == rounding_widening("l2", W, s, f)
    assert plan.base_sensitivity == 2 * C * math.sqrt(s) and plan.sensitivity == plan.base_sensitivity + widen
    d2 = plan.sensitivity * 2**f
    assert plan.grid_l1_sensitivity == pytest.approx(math.sqrt(2 * s * W) * d2, rel=1e-15)
    exact = float(mpmath.mpf(d2) / (mpmath.sqrt(L) * mpmath.sqrt(2 * mpmath.mpf(rho_star_closed_form(1.0, 1e-6)))))
    assert abs(math.sqrt(plan.grid_sigma2) / exact - 1) < REL
    assert plan.sigma_client == pytest.approx(math.sqrt(plan.grid_sigma2) * 2.0**-f, rel=1e-15)
    assert plan.sigma_release == pytest.approx(plan.sigma_client * math.sqrt(L), rel=1e-15)
    event = plan.dp_event()
    assert isinstance(event, dp_event.ZCDpEvent) and event.rho == plan.zcdp_rho()
    got = RdpAccountant().compose(event).get_epsilon(1e-6)
    assert 1.0 - 1e-9 <= got <= 1.0  # exactly the job's ε: calibrated, not over-noised
    assert noise_grid_problem(plan.grid_noise_sd, f) is None


def test_interpolate_and_paper_events_are_the_true_loss():
    base = dict(epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1, min_honest_load=100, frac_bits=16, width=3)
    tight = plan_noise(mechanism="gaussian", calibration="tight", **base)
    local = plan_noise(mechanism="gaussian", calibration="interpolate", interpolate_p=0.0, **base)
    assert local.sigma_client == pytest.approx(tight.sigma_client * 10, rel=1e-12)  # σ_c² = σ_Y²·L^-p
    assert local.zcdp_rho() == pytest.approx(tight.zcdp_rho() / 100, rel=1e-9)  # 10× the noise: ρ/100
    paper = plan_noise(mechanism="gaussian", calibration="paper", n=10**6, m=50, d=3,
                       **{**base, "min_honest_load": 100})
    assert paper.zcdp_rho() == accounting.kls_rho(math.sqrt(paper.grid_sigma2), 100, paper.grid_sensitivity,
                                                  paper.grid_l1_sensitivity)


def test_grid_laplace_event_is_exactly_epsilon():
    plan = plan_noise(mechanism="laplace", calibration="tight", epsilon=0.7, delta=0.0, clip_norm=0.25, s=3,
                      min_honest_load=9, frac_bits=10, width=4)
    event = plan.dp_event()
    assert isinstance(event, dp_event.DiscreteLaplaceDpEvent)
    d1 = (2 * 3 * 0.25 + 3 * 4 * 2.0**-10) * 2**10
    assert event.sensitivity == math.ceil(d1) and abs(event.noise_parameter * math.ceil(d1) / 0.7 - 1) < 1e-12
    assert accounting.discrete_laplace_scale(0.7, d1) == math.ceil(d1) / 0.7


def test_job_event_is_the_specs_plan_event():
    from tests.helpers.jobs import gate_spec

    spec = gate_spec(min_participants=1)
    assert accounting.job_event(spec) == spec.noise_plan().dp_event()


def test_continuous_plans_have_no_event_and_bad_inputs_are_refused():
    plan = plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                      min_honest_load=4)
    assert not plan.on_grid
    with pytest.raises(ValueError, match="continuous noise plan"):
        plan.dp_event()
    with pytest.raises(ValueError, match="Gaussian grid plans only"):
        plan.zcdp_rho()
    with pytest.raises(ValueError, match="rho_for needs"):
        accounting.rho_for(0.0, 1e-6)
    with pytest.raises(ValueError, match="rho_for needs"):
        accounting.rho_for(1.0, 1.0)
    from ltm.dp.calibration import CalibrationError
    with pytest.raises(CalibrationError, match="needs width="):
        plan_noise(mechanism="gaussian", calibration="tight", epsilon=1.0, delta=1e-6, clip_norm=1.0, s=1,
                   min_honest_load=4, frac_bits=8)


def test_grid_rounding_and_widening_helpers():
    import numpy as np

    x = np.array([[0.3, -1.25, 2.0**-9, 3 * 2.0**-9]])
    assert round_to_grid(x, 8).tolist() == [[77, -320, 0, 2]]  # nearest, ties to even
    assert rounding_widening("l1", 5, 2, 4) == 10 / 16 and rounding_widening("l2", 8, 2, 2) == 1.0
    for bad in [np.nan, np.inf]:
        with pytest.raises(ValueError, match="NaN or infinite"):
            round_to_grid(np.array([bad]), 8)
    with pytest.raises(ValueError, match="too large"):
        round_to_grid(np.array([2.0**62]), 1)
    with pytest.raises(ValueError, match="norm must be"):
        rounding_widening("linf", 1, 1, 8)
    with pytest.raises(ValueError, match="width and pieces"):
        rounding_widening("l2", 0, 1, 8)
    assert noise_grid_problem(MIN_NOISE_GRID_STEPS, 8) is None
    assert noise_grid_problem(7.99, 12) == (
        "per-client noise sd is 7.99 grid steps of 2^-12, below the minimum 8: raise frac_bits, the clip bound "
        "or the noise (lower epsilon), or lower min_honest_load")


def test_round_to_grid_limits_and_its_float64_arithmetic():
    import re
    import warnings

    import numpy as np

    # the magnitude limit is 2^62 grid steps, inclusive (the ring bound's margin)
    assert round_to_grid(np.array([2.0**62 - 512]), 0).tolist() == [2**62 - 512]
    with pytest.raises(ValueError, match=re.escape("value too large for fixed point with 1 fraction bits")):
        round_to_grid(np.array([2.0**61]), 1)
    # float32 input is computed in float64: 1e30·2^40 is finite there (too large), inf in float32
    with pytest.raises(ValueError, match="^value too large for fixed point with 40 fraction bits$"):
        round_to_grid(np.array([1e30], dtype=np.float32), 40)
    with pytest.raises(ValueError, match="^cannot encode NaN or infinite values$"):
        round_to_grid(np.array([1.0, np.nan]), 8)
    # overflow to inf is reported as the ValueError, never as a floating-point warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="^cannot encode NaN or infinite values$"):
            round_to_grid(np.array([1e300]), 60)


@pytest.mark.parametrize("sigma, load, d2, d1", [(1.0, 3800, 10.0, 100.0), (0.8, 20, 3.0, 7.0)])
def test_kls_rho_includes_the_tau_term(sigma, load, d2, d1):
    tau = tau_exact(sigma, min(load, 65))
    if load > 65:
        tau += 10 * (load - 65) * mpmath.exp(-2 * mpmath.pi**2 * mpmath.mpf(sigma) ** 2 * 65 / 66)
    exact = (mpmath.mpf(d2) / (mpmath.sqrt(load) * sigma) + tau * d1) ** 2 / 2
    assert abs(accounting.kls_rho(sigma, load, d2, d1) / float(exact) - 1) < REL
    assert tau * d1 > 1e-3 * d2 / (math.sqrt(load) * sigma)  # the τ term matters here


@pytest.mark.parametrize("ratio", [0.5 ** 0.5, 0.5])
def test_kls_rho_and_the_calibration_evaluate_tau_at_the_smallest_scale(ratio):
    """tau_ratio r: ½(Δ₂/(√L σ) + τ(rσ)·Δ₁)² (mpmath), larger than r = 1's; the calibrated σ is the
    smallest meeting ρ*(ε, δ) with that τ (a hair less fails), and a larger σ than r = 1 needs."""
    sigma, load, d2, d1 = 0.8, 20, 3.0, 7.0
    exact = (mpmath.mpf(d2) / (mpmath.sqrt(load) * sigma) + tau_exact(sigma * ratio, load) * d1) ** 2 / 2
    got = accounting.kls_rho(sigma, load, d2, d1, ratio)
    assert abs(got / float(exact) - 1) < REL
    assert got > accounting.kls_rho(sigma, load, d2, d1) * (1 + 1e-3) == accounting.kls_rho(sigma, load, d2, d1, 1.0) \
        * (1 + 1e-3)
    eps, delta = 16.0, 1e-6
    target = accounting.rho_for(eps, delta)
    s = accounting.calibrate_discrete_gaussian(eps, delta, d2, load, d1, ratio)
    assert accounting.kls_rho(s, load, d2, d1, ratio) <= target < accounting.kls_rho(s * (1 - 1e-9), load, d2, d1, ratio)
    assert s > accounting.calibrate_discrete_gaussian(eps, delta, d2, load, d1) * (1 + 1e-6)
    assert accounting.gaussian_event(s, load, d2, d1, ratio).rho == accounting.kls_rho(s, load, d2, d1, ratio)


def test_a_stated_rho_replaces_the_accountants_target_in_the_calibration():
    """rho = ρ*(ε, δ) gives the same σ bit for bit; another ρ is met as tightly (ε, δ ignored)."""
    d2, load, d1 = 3.0, 20, 7.0
    star = accounting.rho_for(1.0, 1e-6)
    base = accounting.calibrate_discrete_gaussian(1.0, 1e-6, d2, load, d1)
    assert accounting.calibrate_discrete_gaussian(1.0, 1e-6, d2, load, d1, rho=star) == base
    for rho in (star / 4, 0.02):
        s = accounting.calibrate_discrete_gaussian(1.0, 1e-6, d2, load, d1, rho=rho)
        assert accounting.kls_rho(s, load, d2, d1) <= rho < accounting.kls_rho(s * (1 - 1e-9), load, d2, d1)
    assert accounting.calibrate_discrete_gaussian(1.0, 1e-6, d2, load, d1, rho=star / 4) == pytest.approx(2 * base,
                                                                                                          rel=1e-9)


def test_zcdp_target_problem_accepts_exactly_the_targets_the_accountant_buys():
    eps, delta = 1.0, 1e-6
    star = accounting.rho_for(eps, delta)
    assert accounting.zcdp_target_problem(star, eps, delta) is None
    assert accounting.zcdp_target_problem(star / 2, eps, delta) is None
    # a ρ whose ε lands on the job's ε exactly is accepted (≤), the next float up refused (>)
    exact_eps = accounting.zcdp_epsilon(star, delta)
    assert accounting.zcdp_target_problem(star, exact_eps, delta) is None
    greedy = star * 1.001
    achieved = accounting.zcdp_epsilon(greedy, delta)
    assert achieved > eps
    assert accounting.zcdp_target_problem(greedy, eps, delta) == (
        f"the job's zCDP target rho = {greedy!r} gives epsilon = {achieved:.6g} at delta = 1e-06 by the "
        "accountant, more than the job's epsilon = 1")
    for bad in (0.0, -1.0, math.inf, math.nan, 1, None):
        assert accounting.zcdp_target_problem(bad, eps, delta) == \
            f"the job's zCDP target rho must be a positive finite number, got {bad!r}"
    assert accounting.zcdp_target_problem(5e-324, eps, delta) is None  # the smallest positive float is fine


def _forget_dp_accounting(monkeypatch):
    """Take every dp_accounting module out of sys.modules for one test (monkeypatch puts them back)."""
    import sys

    loaded = {m: mod for m, mod in sys.modules.items() if m == "dp_accounting" or m.startswith("dp_accounting.")}
    for name, module in loaded.items():
        parent, _, child = name.rpartition(".")
        if parent in loaded and getattr(loaded[parent], child, None) is module:
            # a re-import under a kept package rebinds its attribute (dp_accounting.dp_event): put it back too
            monkeypatch.setattr(loaded[parent], child, module)
        monkeypatch.delitem(sys.modules, name)


def test_load_accountant_returns_the_loaded_classes_and_imports_only_its_submodules(monkeypatch):
    import sys

    from dp_accounting.rdp import rdp_privacy_accountant as loaded_rdp

    R, ev = accounting.load_accountant()
    assert R is RdpAccountant is loaded_rdp.RdpAccountant and ev is dp_event  # already loaded: reused
    _forget_dp_accounting(monkeypatch)
    R, ev = accounting.load_accountant()
    assert R is not RdpAccountant and R.__name__ == "RdpAccountant" and ev.__name__ == "dp_accounting.dp_event"
    assert "dp_accounting" not in sys.modules  # the bare package object is gone again
    assert sys.modules["dp_accounting.dp_event"] is ev and sys.modules["dp_accounting.rdp.rdp_privacy_accountant"].RdpAccountant is R
    assert "dp_accounting.pld" not in sys.modules
    assert accounting.load_accountant() == (R, ev)  # and reused on the next call
    import dp_accounting  # the real package __init__ then runs, reusing the two submodules

    assert dp_accounting.ZCDpEvent is ev.ZCDpEvent and dp_accounting.rdp.RdpAccountant is R
    assert R().compose(ev.ZCDpEvent(0.5)).get_epsilon(1e-6) == RdpAccountant().compose(
        dp_event.ZCDpEvent(0.5)).get_epsilon(1e-6)


def test_load_accountant_with_the_package_loaded_imports_the_missing_submodules(monkeypatch):
    import sys

    import dp_accounting

    _forget_dp_accounting(monkeypatch)
    monkeypatch.setitem(sys.modules, "dp_accounting", dp_accounting)  # the package alone is loaded
    R, ev = accounting.load_accountant()
    assert sys.modules["dp_accounting"] is dp_accounting  # left in place (not the bare object's cleanup)
    assert sys.modules["dp_accounting.dp_event"] is ev and R.__name__ == "RdpAccountant"
    assert sys.modules["dp_accounting.rdp.rdp_privacy_accountant"].RdpAccountant is R


def test_load_accountant_refuses_a_missing_or_blocked_package(monkeypatch):
    import importlib.util
    import sys

    _forget_dp_accounting(monkeypatch)
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(ImportError, match=r"^import of dp_accounting halted; None in sys.modules$") as err:
        accounting.load_accountant()
    assert err.value.name == "dp_accounting"
    monkeypatch.delitem(sys.modules, "dp_accounting")
    real_find = importlib.util.find_spec
    for found in (None, real_find("textwrap")):  # absent, or a plain module rather than a package
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, _f=found: _f if name == "dp_accounting"
                            else real_find(name, *a))
        with pytest.raises(ImportError, match=r"^No module named 'dp_accounting'$") as err:
            accounting.load_accountant()
        assert err.value.name == "dp_accounting" and "dp_accounting" not in sys.modules


def test_load_accountant_reuses_loaded_submodules_without_the_import_system(monkeypatch):
    """Both submodules loaded: no import machinery is touched (the servers' and parties' hot path);
    only one of them loaded: the other is imported, never a None handed back."""
    import importlib
    import importlib.util
    import sys

    R, ev = accounting.load_accountant()

    def refuse(*args, **kwargs):
        raise AssertionError("load_accountant used the import system with both submodules loaded")

    with monkeypatch.context() as m:
        m.setattr(importlib.util, "find_spec", refuse)
        m.setattr(importlib, "import_module", refuse)
        assert accounting.load_accountant() == (R, ev)
    for keep in ("dp_accounting.dp_event", "dp_accounting.rdp.rdp_privacy_accountant"):
        with monkeypatch.context() as m:
            kept = sys.modules[keep]
            _forget_dp_accounting(m)
            m.setitem(sys.modules, keep, kept)
            R2, ev2 = accounting.load_accountant()
            assert R2.__name__ == "RdpAccountant" and ev2.__name__ == "dp_accounting.dp_event"
            assert (ev2 is kept) if keep.endswith("dp_event") else (R2 is kept.RdpAccountant)


def test_gaussian_event_defaults_to_tau_at_sigma_and_a_small_l1_is_verified():
    sigma, load, d2, d1 = 0.8, 20, 3.0, 7.0
    assert accounting.gaussian_event(sigma, load, d2, d1).rho == accounting.kls_rho(sigma, load, d2, d1, 1.0) \
        < accounting.gaussian_event(sigma, load, d2, d1, 0.5).rho
    # Δ₁ below one grid step (and below tau_ratio): the final check uses Δ₁ itself
    s = accounting.calibrate_discrete_gaussian(16.0, 1e-6, d2, load, 0.05)
    assert accounting.kls_rho(s, load, d2, 0.05) <= accounting.rho_for(16.0, 1e-6) < accounting.kls_rho(s, load, d2, 1.0)


def test_rounded_radius_is_the_clip_plus_half_a_step_per_coordinate():
    from fractions import Fraction

    from ltm.dp.grid import rounded_radius

    # exact in binary: C + √D·2^-g/2 (ℓ2) and C + D·2^-g/2 (ℓ1), evaluated in rationals
    for clip, width, g in [(1.0, 4, 3), (0.75, 9, 2), (2.5, 16, 5)]:
        half = Fraction(1, 2 ** (g + 1))
        root = Fraction(math.isqrt(width))
        assert Fraction(rounded_radius(clip, width, g)) == Fraction(clip) + root * half
        assert Fraction(rounded_radius(clip, width, g, "l1")) == Fraction(clip) + width * half
    with pytest.raises(ValueError, match="^norm must be 'l2' or 'l1', got 'linf'$"):
        rounded_radius(1.0, 4, 3, "linf")


def _largest_exact_gram_g(frac_bits: int, clip: float, width: int) -> int | None:
    """The definition of gram_input_frac_bits, in rationals (√D exact for square D)."""
    from fractions import Fraction

    root = Fraction(math.isqrt(width))
    assert root * root == width
    for g in range(frac_bits // 2, 0, -1):
        radius = Fraction(clip) + root / 2 ** (g + 1)
        if (radius * 2**g) ** 2 <= 2**52:
            return g
    return None


@pytest.mark.parametrize("frac_bits, clip, width", [
    (16, 1.0, 4),                    # small clip: g = ⌊f/2⌋
    (16, 2.0**24, 1),                # only g = 1 keeps the products below 2^52
    (40, 2.0**14, 9),                # an interior g
    (2, (2.0**26 - 1) / 2, 4),       # (R_g·2^g)² is exactly 2^52 at g = 1: allowed (≤)
])
def test_gram_input_frac_bits_is_the_largest_exact_g(frac_bits, clip, width):
    from ltm.dp.grid import gram_input_frac_bits

    expected = _largest_exact_gram_g(frac_bits, clip, width)
    assert expected is not None and gram_input_frac_bits(frac_bits, clip, width) == expected


def test_gram_input_frac_bits_refusals():
    from ltm.dp.grid import gram_input_frac_bits

    assert _largest_exact_gram_g(16, 2.0**25, 1) is None  # the case below has no exact g
    with pytest.raises(ValueError, match="^clip bound 3.35544e[+]07 too large for an exact gram lift"):
        gram_input_frac_bits(16, 2.0**25, 1)
    assert gram_input_frac_bits(2, 1.0, 1) == 1  # the least valid f and D
    for f, d, c in [(1, 5, 1.0), (8, 0, 1.0), (8, 5, 0.0), (8, 5, -1.0)]:
        with pytest.raises(ValueError, match=r"^gram_input_frac_bits needs f >= 2, D >= 1, C > 0 \(got "):
            gram_input_frac_bits(f, c, d)

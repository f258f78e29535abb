"""Mutation-kill tests for ``ltm/dp/calibration.py`` (scripts/mutation.sh, docs/testing.md).

Each test checks behaviour against a value computed independently (a closed form written out
again, numpy/scipy in the clear, a second route through the code), never a recorded output.
"""
from __future__ import annotations

import math  # noqa: F401
import warnings  # noqa: F401
from dataclasses import replace as _replace  # noqa: F401

import numpy as np
import pytest

from tests.helpers.kill_helpers import exact as _exact, gate_spec as _gate_spec  # noqa: F401
from ltm import sharing  # noqa: F401
from ltm.randomness import Randomness  # noqa: F401

# --- ltm/dp/calibration.py ---------------------------------------------------------------------------


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

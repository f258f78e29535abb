"""An empirical DP audit of the release (docs/testing.md): ε_lb stays below the claimed ε for the default
mechanism and exceeds it for an under-calibrated negative control (``ltm/sim/tools/audit.py``).

CI size: 5000 releases per neighbouring dataset for the default mechanism, 1000 for the control
(≈ 10 s).  The bigger run is ``ltm audit --runs 200000`` (see the module docstring of ltm.sim.tools.audit).

Flake rate.  The runs are seeded (deterministic in CI); for ANY seeds:
* the default-mechanism test fails only if some Clopper–Pearson bound fails, probability ≤ α = 1e-6
  (Bonferroni over the 2·241 one-sided bounds), or if its sanity checks on T's mean/variance fail
  (exact normal/χ² intervals, ≤ 1e-6 each);
* the negative control (σ_c / 10: Δ/σ of T ≈ 2.4, ε of the pair ≈ 13.5) is missed only if ε_lb ≤ 1;
  at 1000 runs per dataset ε_lb ≈ 2.5 on average, and in 300 simulated audits (exact Gaussian T,
  same grid and bounds) the smallest was 2.16, so a miss needs a far larger deviation than that.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import scipy.stats

from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.tools.audit import (
    AuditConfig,
    _tables,
    build_audit_job,
    clopper_pearson_upper,
    epsilon_lower_bound,
    pair_epsilon,
    release_once,
    run_audit,
    threshold_grid,
)

CI_RUNS, CONTROL_RUNS = 5000, 1000


@pytest.fixture(scope="module")
def default_audit():
    return run_audit(AuditConfig(runs=CI_RUNS, seed="ci-default"))


def test_default_mechanism_lower_bound_stays_below_the_claimed_epsilon(default_audit):
    r = default_audit
    assert r["claimed"] == {"epsilon": 1.0, "delta": 1e-6, "calibration": "tight", "mechanism": "gaussian"}
    assert not r["violation"]
    assert r["epsilon_lb"] < r["claimed"]["epsilon"]
    # the audited pair IS the calibrated worst case: the target's rows carry exactly the promised
    # load L, so T's Δ/σ equals Δ/σ_Y.  σ_Y comes from the discrete Gaussian's zCDP bound and its
    # (ε, δ) conversion, which is conservative: the pair's exact Gaussian ε is ≈ 0.93 of the claim
    # (an infinitely long audit would approach that, never more than the claim)
    assert r["audited"]["target_row_loads"] == [r["audited"]["min_honest_load"]]
    assert r["audited"]["tightness"] == pytest.approx(1.0, rel=1e-9)
    assert 0.9 < r["audited"]["epsilon_pair"] <= 1.0
    # the Bonferroni-corrected confidence of every bound is explicit
    assert r["per_bound_level"] == pytest.approx(r["alpha"] / (2 * r["thresholds"]))
    assert r["alpha"] == 1e-6


def test_every_run_drew_fresh_noise_and_the_statistic_has_the_calibrated_law(default_audit):
    s = default_audit["statistic"]
    n = CI_RUNS
    assert s["distinct_releases"] == 2 * n
    for which in ("D", "D_prime"):
        # mean: N(±C·s, sd²/n); a 5.3-sd band is two-sided 1e-7
        assert abs(s[f"mean_{which}"] - s[f"expected_mean_{which}"]) < 5.3 * s["expected_sd"] / math.sqrt(n)
        # variance: (n−1)·S²/σ² ~ χ²_{n−1}; accept inside its central 1 − 1e-6 interval
        q = (n - 1) * s[f"sd_{which}"] ** 2 / s["expected_sd"] ** 2
        assert scipy.stats.chi2.ppf(5e-7, n - 1) < q < scipy.stats.chi2.ppf(1 - 5e-7, n - 1)


def test_under_calibrated_negative_control_is_detected():
    r = run_audit(AuditConfig(runs=CONTROL_RUNS, sigma_factor=0.1, seed="ci-control"))
    assert r["audited"]["negative_control"]
    assert r["violation"], r
    assert r["epsilon_lb"] > r["claimed"]["epsilon"]
    assert r["epsilon_lb"] <= r["audited"]["epsilon_pair"]  # still a valid lower bound
    assert r["audited"]["sigma_client"] == pytest.approx(0.1 * r["audited"]["sigma_client_calibrated"])


def test_the_audit_runs_the_real_pipeline():
    """One audit release equals, bit for bit, the in-process runtime's release for the same seeds
    (the audit only bypasses nothing: party core, server cores with the gate, reconstruction)."""
    cfg = AuditConfig(seed="x")
    job = build_audit_job(cfg)
    for dataset in ("D", "D_prime"):
        randomness = Randomness.seeded_insecure(f"pipeline-{dataset}")
        tables = _tables(job, dataset)
        Y = release_once(job, tables, randomness)
        run = run_inprocess(job.spec, tables, randomness)
        np.testing.assert_array_equal(Y * job.spec.make_sketch().scale, run.release.matrix)
        # the data differ only in the target's first entry
        values = np.concatenate([t["x0"] for t in tables.values()])
        assert values[job.target] == (1.0 if dataset == "D" else -1.0) and np.count_nonzero(values) == 1


def test_clopper_pearson_and_the_bound_are_valid_on_known_laws():
    # zero failures: the exact one-sided bound is 1 − level^(1/n)
    assert clopper_pearson_upper(np.array([0]), 1000, 1e-3)[0] == pytest.approx(1 - 1e-3 ** (1 / 1000), rel=1e-9)
    assert clopper_pearson_upper(np.array([1000]), 1000, 1e-3)[0] == 1.0
    # on exact Gaussian samples with Δ/σ = 2, the bound is below the true ε and grows with the runs
    rng = np.random.default_rng(5)
    job = build_audit_job(AuditConfig())
    shift, sd = job.mean_shift, job.mean_shift / 2.0
    truth = pair_epsilon(shift, sd, 1e-6)
    grid = np.linspace(-shift / 2 - 6 * sd, shift / 2 + 6 * sd, 241)
    bounds = []
    for n in (200, 5000):
        d = rng.normal(shift / 2, sd, n)
        dp = rng.normal(-shift / 2, sd, n)
        bounds.append(epsilon_lower_bound(d, dp, grid, 1e-6, 1e-6)["epsilon_lb"])
    assert 0 < bounds[0] < bounds[1] < truth
    # the grid is a function of public parameters only
    np.testing.assert_array_equal(threshold_grid(job, 11), threshold_grid(build_audit_job(AuditConfig()), 11))


def test_ltm_audit_command_prints_json():
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "audit", "--runs", "40", "--controls", "0.1",
                          "--workers", "2", "--seed", "cli"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [r["sigma_factor"] for r in report["summary"]] == [1.0, 0.1]
    assert report["default"]["runs_per_dataset"] == 40 and report["default"]["statistic"]["distinct_releases"] == 80
    assert "seeded" in report["default"]["randomness"]


def test_a_gram_release_is_audited_with_the_generic_statistic():
    """CI size (the slow test below audits every kind and mode with a negative control): a gram job,
    its exact mean difference along C·e1 against C·e2, and a default mechanism below its claim."""
    cfg = AuditConfig(runs=150, seed="kind-ci", release="gram")
    job = build_audit_job(cfg)
    assert job.spec.sketch.kind == "gram" and job.shift == pytest.approx(math.sqrt(2) * cfg.clip**2, rel=1e-9)
    r = run_audit(cfg)
    assert r["job"]["release"] == "gram" and not r["violation"] and r["epsilon_lb"] < 1.0
    assert r["statistic"]["expected_from"] == "a pilot of 150 releases per dataset"
    # T's spread as the pilot estimated it (pooled over D and D′: 2·149 degrees of freedom) and as the
    # audit's D runs measured it agree: their variance ratio is F(149, 298), inside its central 1 − 1e-6
    f = r["statistic"]["sd_D"] ** 2 / r["statistic"]["expected_sd"] ** 2
    assert scipy.stats.f.ppf(5e-7, cfg.runs - 1, 2 * (cfg.runs - 1)) < f < scipy.stats.f.ppf(1 - 5e-7, cfg.runs - 1,
                                                                                               2 * (cfg.runs - 1))


@pytest.mark.slow
@pytest.mark.parametrize("release, upload_mode", [("sparse", "aggregate"), ("dense", "per-client"),
                                                  ("gram", "per-client"), ("gram", "aggregate")])
def test_any_release_kind_and_upload_mode_is_audited(release, upload_mode):
    """The generic statistic (module docstring): the job has the kind and mode asked for, T's shift
    is exactly the mean difference, the default mechanism stays below its claim, and a σ/10
    negative control is caught (its pair's Δ/σ ≈ 2.2: ε_lb > 1 needs far fewer runs than this)."""
    cfg = AuditConfig(runs=300, seed=f"kind-{release}-{upload_mode}", release=release, upload_mode=upload_mode)
    job = build_audit_job(cfg)
    assert (job.spec.sketch.kind, job.spec.upload_mode) == (release, upload_mode)
    # the direction comes from the exact mean difference: for gram, C·e1 against C·e2 moves two
    # diagonal entries of the triangle by C² each (√2·C², the kind's Δ₂)
    expected_shift = math.sqrt(2) * cfg.clip**2 if release == "gram" else 2 * cfg.clip * job.spec.make_sketch().pieces ** 0.5
    assert job.shift == pytest.approx(expected_shift, rel=1e-9)
    r = run_audit(cfg)
    assert r["job"]["release"] == release and r["job"]["upload_mode"] == upload_mode
    assert not r["violation"] and r["epsilon_lb"] < 1.0
    control = run_audit(replace(cfg, sigma_factor=0.1, runs=400))
    assert control["violation"] and control["epsilon_lb"] > 1.0, control["epsilon_lb"]


def test_ltm_audit_takes_a_release_kind_and_an_upload_mode():
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "audit", "--runs", "30", "--controls", "",
                          "--release", "gram", "--upload-mode", "aggregate", "--workers", "1", "--seed", "cli"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)["default"]["job"]
    assert (job["release"], job["upload_mode"]) == ("gram", "aggregate")

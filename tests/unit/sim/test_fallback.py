"""No model worse than the mean without saying so (issue #32, item 3).

When the plan predicts R² ≤ 0 it says so (``Plan.warning``, first in its reason), and the analyst
releases the intercept-only model instead of the regression unless the fit asks for it
(``--no-fallback``); the report says which model was released and why.
"""
from __future__ import annotations

import numpy as np
import pytest

from ltm.planner import PlanInputs, plan_release
from ltm.sim.runtime.simulate import SimulateConfig, simulate


def test_the_plan_warns_when_noise_beats_the_signal():
    """The default columns job at ε = 0.1 (the bundled data's n and D): its sketch's predicted loss
    exceeds the explained share; at ε = 1 in the rows partition the gram release does not."""
    bad = plan_release(PlanInputs(n=80_000, width=7, epsilon=0.1, delta=1e-6, partition="columns", parties=4))
    assert bad.predicted_r2 is not None and bad.predicted_r2 <= 0
    assert bad.warning and bad.reason.startswith("WARNING") and "intercept-only" in bad.warning
    good = plan_release(PlanInputs(n=80_000, width=7, epsilon=1.0, delta=1e-6, party_sizes=(20_000,) * 4,
                                   corrupt_parties=1))
    assert good.predicted_r2 is not None and good.predicted_r2 > 0.4 and not good.warning
    assert "WARNING" not in good.reason


def test_lowrank_plans_predict_no_r2():
    p = plan_release(PlanInputs(n=80_000, width=7, epsilon=0.1, delta=1e-6, task="lowrank", party_sizes=(20_000,) * 4))
    assert p.predicted_r2 is None and not p.warning


def run(**kw):
    return simulate(SimulateConfig(synthetic="ridge", n=20_000, d=4, partition="columns", epsilon=0.05, seed=5, **kw))


@pytest.fixture(scope="module")
def fell_back():
    return run()


def test_the_analyst_falls_back_to_the_intercept_only_model_and_says_why(fell_back):
    r = fell_back
    assert r["plan"]["warning"]
    assert r["released_model"] == "intercept-only" and r["fallback"]["used"]
    assert r["fallback"]["why"] == r["plan"]["warning"]
    assert np.allclose(r["coef"], 0.0)  # it predicts the label's public centre


def test_no_fallback_fits_the_regression_on_the_same_release(fell_back):
    r = run(fallback=False)
    assert r["release_sha256"] == fell_back["release_sha256"]  # the release is the same: only the fit differs
    assert r["released_model"] == "ridge" and not r["fallback"]["used"] and r["fallback"]["disabled"]
    assert not np.allclose(r["coef"], 0.0)


def test_a_job_the_plan_trusts_releases_the_regression():
    r = simulate(SimulateConfig(synthetic="ridge", n=20_000, d=4, epsilon=1.0, seed=5))
    assert not r["plan"]["warning"] and r["released_model"] == "ridge" and not r["fallback"]["used"]


def test_the_networked_analyst_falls_back_as_the_job_file_asks():
    """ltm.analyst.jobs: a real job's fit releases the intercept-only model when the plan for its release
    kind predicts R² ≤ 0, unless its [fit] says fallback = false; a job the plan trusts is fitted."""
    from ltm.analyst.jobs import fallback_reason, fit_model
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.jobfile import FitSpec
    from ltm.randomness import Randomness
    from ltm.sim.runtime.inprocess import run_inprocess
    from ltm.sim.runtime.jobs import build_job, party_tables

    table = synthetic_ridge(20_000, 4, Randomness.seeded_insecure("fallback-job"))
    spec, _ = build_job(table, job_id="bad", randomness=Randomness.seeded_insecure(1), partition="columns",
                        kind="auto", epsilon=0.05)
    why = fallback_reason(spec, FitSpec())
    assert why and "R²" in why and fallback_reason(spec, FitSpec(fallback=False)) == ""
    release = run_inprocess(spec, party_tables(spec, table), Randomness.seeded_insecure(2)).release
    fell = fit_model(release, "ridge", fallback=why)
    assert fell["released_model"] == "intercept-only" and fell["fallback"]["used"] and fell["fallback"]["why"] == why
    assert all(c == 0.0 for c in fell["coef"].values())
    fitted = fit_model(release, "ridge")
    assert fitted["released_model"] == "ridge" and any(c != 0.0 for c in fitted["coef"].values())
    good, _ = build_job(table, job_id="good", randomness=Randomness.seeded_insecure(1), kind="auto", epsilon=1.0)
    assert fallback_reason(good, FitSpec()) == ""

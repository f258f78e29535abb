"""Corruption-threshold scenarios (ltm/experiments/thresholds.py).

Servers: a coalition of t < k servers holds uniform, data-independent values; all k reconstruct the
clients' noisy rows and the release exactly.  Clients: the actual (ε, δ) equals the claim at
t′_actual = t′_assumed, exceeds it beyond, matches the analyst's own privacy report, and the
utility falls as t′_assumed grows.  Every run is seeded, so the assertions are deterministic.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ltm.analyst.reconstruct import privacy_report
from ltm.experiments import thresholds as thr
from ltm.jobspec import honest_row_loads, validate_job


# ------------------------------------------------------------------------------ servers
@pytest.mark.parametrize("share_mode", ["seed", "full"])
def test_coalitions_below_k_see_uniform_data_independent_values(share_mode):
    rows = thr.servers_cell({"servers": 3, "n": 4096, "m": 8, "d": 3, "parties": 2, "share_mode": share_mode,
                             "null_draws": 20}, seed=21)
    coal = {r["t"]: r for r in rows if r["series"] == "k=3 servers"}
    null = {r["t"]: r["tv_ab"] for r in rows if r["series"].startswith("uniform")}
    assert sorted(coal) == [0, 1, 2, 3]
    for t in (1, 2):
        r = coal[t]
        assert r["chi2_p"] > 1e-4  # bytes of every coalition sum look uniform (fixed seed)
        assert r["tv_ab"] <= 2 * null[t] + 1e-3  # A and B indistinguishable: at the uniform floor
        assert r["frac_exact"] == 0.0  # it holds none of the noisy values
        assert r["rmse_decoded"] > 1e6  # decoding it gives ring-sized garbage
        assert r["release_error"] > 1e6
        assert r["eps_vs_coalition"] == 1.0
    full = coal[3]
    assert full["chi2_p"] < 1e-12  # the sum of all k shares is the (non-uniform) encoded data
    assert full["frac_exact"] == 1.0  # every noisy entry, bit for bit
    assert full["release_error"] == 0.0  # and the released sketch exactly
    assert full["rmse_decoded"] == pytest.approx(full["sigma_client"], rel=0.05)  # only the client's own noise
    assert full["tv_ab"] > 20 * null[3]
    assert full["eps_vs_coalition"] > 10.0  # the local-level guarantee of σ_c alone


# ------------------------------------------------------------------------------ clients: privacy
def test_actual_epsilon_equals_claim_at_assumed_and_exceeds_beyond():
    rows = thr.clients_cell({"part": "privacy", "t_assumed_frac": 0.5, "n": 50_000, "d": 4,
                             "t_actual_points": 30}, seed=1)
    eps, delta = rows[0]["eps_claimed"], rows[0]["delta_claimed"]
    t_assumed = rows[0]["t_assumed"]
    at = [r for r in rows if r["t_actual"] == t_assumed]
    assert len(at) == 1
    assert at[0]["eps_actual"] == pytest.approx(eps, rel=1e-6)
    assert at[0]["delta_actual"] == pytest.approx(delta, rel=1e-6)
    for r in rows:
        if r["t_actual"] > t_assumed:
            assert r["eps_actual"] > eps * (1 + 1e-9) and r["delta_actual"] > delta
        elif r["t_actual"] < t_assumed:
            assert r["eps_actual"] < eps and r["delta_actual"] < delta
    series = [r["eps_actual"] for r in sorted(rows, key=lambda r: r["t_actual"])]
    assert all(a <= b for a, b in zip(series, series[1:]))  # monotone in t′_actual


def test_actual_privacy_matches_the_gate_and_the_analysts_report():
    """The exact curve agrees with the system's own machinery: honest_row_loads' flat deduction is
    the worst placement, and the analyst's privacy report gives the same δ at t′ = t′_actual."""
    from ltm.randomness import Randomness
    from ltm.sim.runtime.simulate import SimulateConfig

    cfg = SimulateConfig(synthetic="ridge", n=20_000, d=4, epsilon=1.0, delta=1e-6, seed=3, model="ridge",
                         sketch="sparse")
    spec0, _, _ = thr._clients_job(cfg, Randomness.seeded_insecure(3))
    loads = spec0.make_sketch().row_loads()
    min_load = int(loads.min())
    spec = thr.calibrated_for(spec0, min_load // 3, min_load)
    plan = validate_job(spec).noise_plan
    assert spec.privacy.min_honest_load == min_load - min_load // 3
    everyone = np.ones(spec.n, dtype=bool)
    for t_actual in (0, min_load // 3, min_load // 2, min_load - 1):
        assert thr.worst_placement_min_honest(loads, t_actual) == min_load - t_actual
        moved = dataclasses.replace(spec, privacy=dataclasses.replace(spec.privacy, t_prime=t_actual))
        l, ded = honest_row_loads(moved, everyone)
        assert int((l - ded).min()) == min_load - t_actual
        report = privacy_report(moved, plan, everyone, randomness="seeded test")
        ours = thr.actual_privacy(plan.sigma_client, min_load, t_actual, 1.0, 1e-6, plan.sensitivity, plan=plan)
        assert ours["delta_actual"] == pytest.approx(report["achieved_delta"], rel=1e-9)
        assert report["calibration_verified"] == (t_actual <= min_load // 3)
        assert report["dp_verified"] is False  # seeded: never reported as DP


def test_actual_privacy_edges():
    info = thr.actual_privacy(0.5, 100, 100, 1.0, 1e-6, 2.0)
    assert info["honest_load"] == 0 and info["delta_actual"] == 1.0 and math.isinf(info["eps_actual"])
    with pytest.raises(ValueError):
        thr.calibrated_for(None, 10, 10)  # t′ must stay below the smallest row load


# ------------------------------------------------------------------------------ clients: utility
def test_utility_falls_as_t_prime_assumed_grows():
    r2 = {}
    for frac in (0.0, 0.95):
        rows = thr.clients_cell({"part": "utility", "t_assumed_frac": frac, "n": 100_000, "d": 5}, seed=2)
        by = {r["series"]: r for r in rows}
        assert by["LTM ridge"]["calibration_verified"] is True and by["LTM ridge"]["dp_verified"] is False
        assert by["LTM ridge"]["noise_vs_t0"] == pytest.approx(math.sqrt(1 / (1 - frac)), rel=0.02)
        r2[frac] = by["LTM ridge"]["r2"]
        assert by["non-private"]["r2"] > 0.99  # same λ for every t′: the baseline does not move
    assert r2[0.95] < r2[0.0] - 0.05


# ------------------------------------------------------------------------------ servers of the replicated release
@pytest.mark.parametrize("share_mode", ["seed", "full"])
def test_replicated_one_server_learns_nothing_two_learn_everything(share_mode):
    """The replicated release's threshold is t = 2 of 3: one server's streams are uniform and the
    same under two very different datasets; any two hold the grid-rounded data bit for bit."""
    rows = thr.replicated_cell({"n": 2048, "d": 3, "share_mode": share_mode, "null_draws": 20}, seed=21)
    coal = {r["t"]: r for r in rows if r["series"] == "replicated k=3"}
    null = {r["t"]: r["tv_ab"] for r in rows if r["series"].startswith("uniform")}
    assert sorted(coal) == [0, 1, 2, 3]
    one = coal[1]
    assert one["coalitions"] == 3 and one["shares_held"] == 2
    assert one["chi2_p"] > 1e-4  # every stream one server holds, and their sum, look uniform (fixed seed)
    assert one["tv_ab"] <= 2 * null[1] + 1e-3  # A and B indistinguishable: at the uniform floor
    assert one["frac_exact"] == 0.0
    assert one["rmse_decoded"] > 1e6 and one["gram_error"] > 1e3  # ring-sized garbage
    assert one["eps_vs_coalition"] == 1.0
    for t in (2, 3):
        r = coal[t]
        assert r["shares_held"] == 3
        assert r["chi2_p"] < 1e-12  # the sum of all three shares is the (non-uniform) encoded data
        assert r["frac_exact"] == 1.0  # every client's grid-rounded entry, bit for bit, before any noise
        assert 0.0 < r["rmse_decoded"] <= r["grid_step"] / 2  # the clean rows up to the grid rounding
        assert r["gram_error"] == 0.0  # and the exact Gram
        assert r["tv_ab"] > 20 * null[t]
        assert math.isinf(r["eps_vs_coalition"])


def test_replicated_views_are_the_inprocess_release():
    """The scenario reads its views off the same cores, calls and randomness as the in-process
    transport: the release and every server's output share agree bit for bit."""
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.randomness import Randomness
    from ltm.sim.runtime.inprocess import run_inprocess
    from ltm.sim.runtime.jobs import party_tables

    table = synthetic_ridge(1024, 3, Randomness.seeded_insecure(5))
    spec = thr.replicated_job(table, parties=3, epsilon=1.0, delta=1e-6, share_mode="seed", seed=6)
    views = thr.replicated_views(spec, table, Randomness.seeded_insecure(7))
    run = run_inprocess(spec, party_tables(spec, table), Randomness.seeded_insecure(7))
    assert views.release_sha256 == run.release.sha256
    for ours, theirs in zip(views.outputs, run.result_shares):
        np.testing.assert_array_equal(ours, theirs)
    assert thr.held_shares((0,)) == [0, 1] and thr.held_shares((2,)) == [0, 2]
    assert thr.held_shares((0, 2)) == [0, 1, 2]

"""The bounds pre-job's core: histogram lifts (ltm/histograms.py) and the estimates drawn from them."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ltm.analyst.bounds import Draft, choose, next_grid, noise_sd, round_estimates
from ltm.histograms import LOG_EDGES, bins_of, one_hot, sensitivity
from ltm.jobfile import JobFileError, parse_job_file, render_job_file
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess

N = 4000


def draft_doc() -> dict:
    # a reproduction draft: the in-process rounds below run on seeded (reproducible) randomness
    return {"job": {"id": "b", "reproduction": True}, "release": {"kind": "sparse", "m": 16}, "privacy": {"epsilon": 1.0, "delta": 1e-6},
            "servers": [{"id": "server-0", "endpoint": "h:1"}, {"id": "server-1", "endpoint": "h:2"}],
            "parties": [{"id": "party-0", "clients": N // 2}, {"id": "party-1", "clients": N // 2}],
            "columns": [{"name": "a"}, {"name": "b", "range": [0.0, 1.0]}, {"name": "y", "role": "label"}]}


def test_one_hot_blocks_and_sensitivity():
    z = np.array([[0.0, -5.0], [1e9, 0.005], [-1e9, 2.0]])
    u = one_hot("hist_log", z)
    nb = bins_of("hist_log")
    assert u.shape == (3, 2 * nb) and (u.sum(axis=1) == 2).all()  # one bin per column
    assert u[1, nb - 1] == 1 and u[2, 0] == 1                       # the overflow bins
    assert u[0, int(np.searchsorted(LOG_EDGES, 0.0, side="right"))] == 1
    # two clients differ in ≤ 2 entries per column: ℓ2 distance ≤ √(2·D), what the noise is calibrated for
    spec = parse_job_file(render_job_file(Draft.parse(render_job_file(draft_doc())).prejob_doc(
        1, "hist_log", {"a": (0.0, 1.0), "y": (0.0, 1.0)}, 1.0, 1e-7))).spec
    assert math.isclose(sensitivity(spec), math.sqrt(2 * spec.width))
    assert spec.noise_plan().sensitivity == pytest.approx(math.sqrt(2 * 2))


def test_two_rounds_in_process_find_the_mean_and_spread():
    draft = Draft.parse(render_job_file(draft_doc()))
    assert draft.unknown == ("a", "y")
    rng = np.random.default_rng(5)
    cols = {"a": rng.normal(240.0, 3.0, N), "b": rng.uniform(0, 1, N), "y": rng.exponential(6.0, N)}
    transforms = {c: (0.0, 1.0) for c in draft.unknown}
    est = {}
    for r, kind in ((1, "hist_log"), (2, "hist_lin")):
        if r == 2:
            transforms = {c: next_grid(est[c]) for c in draft.unknown}
        spec = parse_job_file(render_job_file(draft.prejob_doc(r, kind, transforms, 1.0, 1e-7))).spec
        tables = {p.party_id: {c: v[p.start:p.stop] for c, v in cols.items()} for p in spec.parties}
        release = run_inprocess(spec, tables, Randomness.seeded_insecure(r)).release
        est = round_estimates(kind, release.matrix[0], draft.unknown, transforms, noise_sd(release.privacy))
        if r == 1:  # the log grid alone only finds the order of magnitude
            assert 100 < est["a"]["median"] < 320
    for c in draft.unknown:
        center, spread = choose(est[c])
        assert abs(center - cols[c].mean()) < 0.3 * cols[c].std()
        assert 0.5 * cols[c].std() < spread < 1.5 * cols[c].std()
    main = draft.main_doc({c: choose(e) for c, e in est.items()},
                          [{"kind": "bounds", "job_id": "b-bounds-1", "digest": "0" * 64, "epsilon": 0.5}])
    assert main.spec.prejobs[0].job_id == "b-bounds-1" and main.spec.columns[1].center == 0.5


def test_a_draft_needs_something_to_estimate_and_the_rows_partition():
    doc = draft_doc()
    doc["columns"] = [{"name": "a", "range": [0.0, 1.0]}, {"name": "y", "role": "label", "range": [0.0, 1.0]}]
    with pytest.raises(JobFileError, match="nothing for the bounds"):
        Draft.parse(render_job_file(doc))


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_noise_sd_is_the_released_counts_noise_not_the_minimum_honest_noise(mechanism):
    # Every participant adds noise to every count, so a count's noise has variance participants·σ_c²
    # (the release's noise_variance_per_column) — more than σ_Y² = L·σ_c² when L < participants.
    from ltm.analyst.reconstruct import privacy_report

    doc = draft_doc()
    doc["privacy"] = {"epsilon": 1.0, "mechanism": mechanism, **({"delta": 1e-6} if mechanism == "gaussian" else {})}
    spec = parse_job_file(render_job_file(Draft.parse(render_job_file(doc)).prejob_doc(
        1, "hist_log", {"a": (0.0, 1.0), "y": (0.0, 1.0)}, 1.0, 1e-7))).spec
    plan = spec.noise_plan()
    assert spec.privacy.min_honest_load < spec.n  # otherwise the two agree
    report = privacy_report(spec, plan, np.ones(spec.n, dtype=bool), randomness="system")
    assert noise_sd(report) == pytest.approx(math.sqrt(spec.n) * plan.sigma_client, rel=1e-12)

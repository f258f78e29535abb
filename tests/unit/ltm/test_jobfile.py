"""Job files (ltm/jobfile.py): parse, validate with one actionable line per problem, round-trip."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ltm.jobfile import JobFileError, budget_shares, derived_seed, parse_job_file, render_job_file
from ltm.party.uploader import PartyPolicy
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from tests.helpers.jobs import job_doc as doc

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "power-ridge.toml"


def test_the_example_job_file_is_valid():
    jf = parse_job_file(EXAMPLE.read_text())
    assert jf.spec.job_id == "power-ridge-1" and jf.spec.n == 100_000 and jf.spec.k == 3
    assert jf.spec.privacy.corrupt_parties == 1 and jf.spec.privacy.min_honest_load > 0
    assert jf.fit.model == "ridge"


def test_transforms_range_spread_and_scale():
    jf = parse_job_file(render_job_file(doc()))
    a, b, y = jf.spec.columns
    p, q = budget_shares(2, True)
    # range: the midpoint, and either end of the range uses exactly the column's share of C
    assert a.center == 5.0 and math.isclose((10.0 - a.center) / a.scale, math.sqrt(p))
    assert math.isclose(2.0 / b.scale, math.sqrt(p)) and b.center == 5.0   # one spread ↦ the share
    assert (y.center, y.scale) == (1.0, 3.0)                                # exactly as written
    # a row at the corners of the ranges is within the clip bound: nothing public is clipped
    assert p * 2 + q <= 1.0 + 1e-12
    assert jf.spec.sketch.seed == derived_seed("j1")
    again = parse_job_file(render_job_file(doc()))
    assert again.spec.digest == jf.spec.digest  # deterministic: check and submit agree


def test_every_problem_gets_its_own_line():
    bad = doc(privacy={"epsilom": 1.0, "delta": 1e-6})
    bad["columns"][0] = {"name": "a", "range": [3.0, 1.0]}
    bad["columns"][1] = {"name": "b", "center": 1.0}
    bad["release"]["kind"] = "gram2"
    bad["servers"] = bad["servers"][:1]
    with pytest.raises(JobFileError) as err:
        parse_job_file(render_job_file(bad), source="bad.toml")
    problems = err.value.problems
    assert "[privacy]: unknown key 'epsilom' (did you mean 'epsilon'?)" in problems
    assert "[privacy]: missing required key 'epsilon'" in problems
    assert any("range [lo, hi] needs finite lo < hi" in p for p in problems)
    assert any("('b'): give exactly one public transform" in p for p in problems)
    assert any(p.startswith("[release].kind must be auto or one of") for p in problems)
    assert any(p.startswith("at least 2 servers") for p in problems)
    assert all("\n" not in p for p in problems)


def test_a_column_without_bounds_points_to_the_bounds_prejob():
    draft = doc()
    draft["columns"][0] = {"name": "a"}  # nobody has public bounds for it: a draft for `ltm job bounds`
    draft["columns"][1] = {"name": "b", "center": 1.0}  # half a transform: a mistake, not a draft
    with pytest.raises(JobFileError) as err:
        parse_job_file(render_job_file(draft))
    [a] = [p for p in err.value.problems if "('a')" in p]
    [b] = [p for p in err.value.problems if "('b')" in p]
    assert "`ltm job bounds DRAFT" in a and "docs/bounds.md" in a
    assert "ltm job bounds" not in b


def test_job_validation_problems_come_through():
    with pytest.raises(JobFileError) as err:
        parse_job_file(render_job_file(doc(release={"kind": "sparse", "m": 2})))
    assert any("smaller than the client vector width" in p for p in err.value.problems)


def test_columns_partition_and_laplace_and_lowrank():
    d = doc(job={"id": "c1", "partition": "columns", "rows": 500},
            parties=[{"id": "party-0", "columns": ["a"]}, {"id": "party-1", "columns": ["b", "y"]}],
            privacy={"epsilon": 1.0, "mechanism": "laplace"})
    jf = parse_job_file(render_job_file(d))
    assert jf.spec.clip_norm == "l1" and jf.spec.privacy.delta == 0.0
    assert sum(p.clip_bound ** 2 for p in jf.spec.parties) <= jf.spec.clip_bound ** 2
    lr = doc(columns=[{"name": "a", "range": [0.0, 1.0]}, {"name": "b", "range": [0.0, 1.0]}],
             fit={"model": "lowrank", "rank": 1})
    assert parse_job_file(render_job_file(lr)).fit.model == "lowrank"
    with pytest.raises(JobFileError, match="is a regression"):
        parse_job_file(render_job_file(dict(lr, fit={"model": "ridge"})))


def test_party_policies_apply_in_process():
    # L and the minimum participant set leave room for one party of three to stay away (the job
    # tolerates one corrupt party by default, so two must come: one of them may be that party)
    three = [{"id": f"party-{i}", "clients": 400} for i in range(3)]
    jf = parse_job_file(render_job_file(doc(parties=three, privacy={"epsilon": 1.0, "delta": 1e-6,
                                                                    "min_honest_load": 20, "min_participants": 600})))
    assert jf.spec.privacy.corrupt_parties == 1
    rng = np.random.default_rng(0)
    tables = {p.party_id: {c: rng.normal(size=p.size) for c in ("a", "b", "y")} for p in jf.spec.parties}
    policies = {"party-1": PartyPolicy(max_epsilon=0.5)}
    # a job file's job is private (not a reproduction): its servers take CSPRNG batches only
    run = run_inprocess(jf.spec, tables, Randomness.system(), policies=policies)
    assert set(run.refused) == {"party-1"} and "ε = 1 exceeds" in run.refused["party-1"]
    assert run.participants.ranges.tolist() == [[0, 400], [800, jf.spec.n]]


def test_a_public_transform_from_the_job_file():
    d = doc(transforms=[{"kind": "rff", "columns": ["a", "b"], "name": "rff_", "n_features": 4, "bandwidth": 1.0,
                         "seed": "ab" * 32, "kernel": "gaussian", "feature_map": "cos"}])
    jf = parse_job_file(render_job_file(d))
    assert jf.spec.transforms[0].n_features == 4 and jf.spec.width == 5  # 4 random features and the label
    with pytest.raises(JobFileError, match="transforms"):
        parse_job_file(render_job_file(doc(transforms=[{"kind": "rff", "columns": "a"}])))


def test_release_kind_auto_asks_the_planner():
    d = doc(release={}, parties=[{"id": "party-0", "clients": 20000}, {"id": "party-1", "clients": 20000}])
    jf = parse_job_file(render_job_file(d))
    assert jf.plan_reason and jf.spec.sketch.kind in ("gram", "sparse")
    hist = parse_job_file(render_job_file(doc(release={"kind": "hist_log"}, fit={"model": "none"})))
    assert (hist.spec.sketch.kind, hist.spec.sketch.m, hist.spec.sketch.s) == ("hist_log", 1, 1)


def test_a_plan_predicting_r2_at_most_zero_warns_loudly(capsys):
    """Issue #32: a job whose planned release is predicted worse than the mean says so in the plan's
    reason and `ltm job check` prints the warning (stdout and stderr); a good one does not."""
    import argparse
    import tempfile

    from ltm.analyst.operator import run_check

    parties = [{"id": "party-0", "clients": 20000}, {"id": "party-1", "clients": 20000}]
    good = parse_job_file(render_job_file(doc(release={}, parties=parties)))
    assert not good.plan_warning and "WARNING" not in good.plan_reason
    bad_doc = doc(release={}, parties=parties, privacy={"epsilon": 0.0001, "delta": 1e-6})
    bad = parse_job_file(render_job_file(bad_doc))
    assert bad.plan_warning and bad.plan_reason.startswith("WARNING") and "intercept-only" in bad.plan_warning
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
        fh.write(render_job_file(bad_doc))
    assert run_check(argparse.Namespace(file=fh.name, json=False)) == 0
    out = capsys.readouterr()
    assert "WARNING" in out.out and "WARNING" in out.err


def test_upload_mode_key_default_rule_and_round_trip():
    auto = parse_job_file(render_job_file(doc()))
    assert auto.spec.upload_mode == "aggregate"  # every party holds many clients, t′ = 0
    per_client = parse_job_file(render_job_file(doc(job={"id": "j1", "upload_mode": "per-client"})))
    assert per_client.spec.upload_mode == "per-client" and per_client.spec.digest != auto.spec.digest
    t_prime = doc(privacy={"epsilon": 1.0, "delta": 1e-6, "t_prime": 1})
    assert parse_job_file(render_job_file(t_prime)).spec.upload_mode == "per-client"
    with pytest.raises(JobFileError, match="upload_mode must be one of"):
        parse_job_file(render_job_file(doc(job={"id": "j1", "upload_mode": "batched"})))


def test_a_job_file_bounds_the_bytes_a_party_uploads():
    bounded = doc(release={"kind": "auto"}, job={"id": "j1", "upload_mode": "per-client", "max_party_upload_bytes": 10_000})
    with pytest.raises(JobFileError, match="over the job's bound of 10000"):
        parse_job_file(render_job_file(bounded))
    loose = doc(release={"kind": "auto"}, job={"id": "j1", "upload_mode": "per-client", "max_party_upload_bytes": 10**6})
    assert parse_job_file(render_job_file(loose)).spec.sketch.kind == "gram"
    with pytest.raises(JobFileError, match="max_party_upload_bytes must be"):
        parse_job_file(render_job_file(doc(job={"id": "j1", "max_party_upload_bytes": -1})))

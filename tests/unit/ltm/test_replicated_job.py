"""The replicated release as a job (issue #21): its trust assumption in the spec and the job file,
the refusals, the parties' policy, the planner's choice and explanation, budget-share clipping, and
the in-process run against the clear Gram (bit for bit with the noise off)."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from ltm.clipping import clip_rows
from ltm.datasets.synthetic import synthetic_ridge
from ltm.jobfile import JobFileError, job_file_doc, parse_job_file, render_job_file
from ltm.jobspec import JobSpec, JobSpecError, validate_job
from ltm.party.randomizer import client_vectors
from ltm.party.uploader import PartyPolicy, PolicyViolation
from ltm.planner import PlanInputs, plan_release
from ltm.randomness import Randomness
from ltm.replicated import clear_triangle
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sim.runtime.replicated_run import run_replicated


@pytest.fixture(scope="module")
def table():
    return synthetic_ridge(3000, 5, Randomness.seeded_insecure(7).child("data"))


def _job(table, colluding=1, **kw):
    return build_job(table, job_id="rep", randomness=Randomness.seeded_insecure(8), partition="columns", parties=3,
                     kind="gram", colluding_servers=colluding, **kw)[0]


def test_trust_assumption_is_in_the_digest_and_absent_by_default(table):
    sketch, _ = build_job(table, job_id="sk", randomness=Randomness.seeded_insecure(8), partition="columns",
                          parties=3, kind="sparse")
    assert "colluding_servers" not in sketch.to_dict()  # older specs keep their digests
    assert sketch.tolerated_colluding_servers == sketch.k - 1
    spec = _job(table)
    assert spec.to_dict()["colluding_servers"] == 1
    assert spec.digest != replace(spec, colluding_servers=None).digest
    again = JobSpec.from_json(spec.canonical_json())
    assert again == spec and again.digest == spec.digest
    with pytest.raises(JobSpecError, match="must be an integer"):
        JobSpec.from_dict({**json.loads(spec.canonical_json()), "colluding_servers": "1"})


def test_replicated_release_needs_an_honest_majority(table):
    spec = _job(table)
    validate_job(spec)
    with pytest.raises(JobSpecError, match="honest majority"):
        validate_job(replace(spec, colluding_servers=None))
    with pytest.raises(JobSpecError, match="honest majority"):
        validate_job(replace(spec, colluding_servers=2))
    with pytest.raises(JobSpecError, match="colluding_servers must be in"):
        validate_job(replace(spec, colluding_servers=3))
    four = replace(spec, servers=spec.servers + (replace(spec.servers[0], server_id="server-3"),))
    with pytest.raises(JobSpecError, match="k = 3"):
        validate_job(four)
    with pytest.raises(JobSpecError, match="'tight' only"):
        validate_job(replace(spec, privacy=replace(spec.privacy, calibration="interpolate", interpolate_p=0.5)))
    with pytest.raises(JobSpecError, match="min_honest_load"):
        validate_job(replace(spec, privacy=replace(spec.privacy, min_honest_load=5)))


def test_defaults_no_deviating_party_one_curious_party_and_fraction_bits(table):
    # corrupt_parties counts deviating parties (0: the replicated release cannot tolerate one yet,
    # issue #30); the noise still discounts one curious party's own draws (L = P − 1).
    spec = _job(table)
    assert spec.privacy.corrupt_parties == 0 and spec.privacy.min_honest_load == 2
    plan = spec.noise_plan()
    assert plan.frac_bits == 2 * spec.frac_bits and plan.min_honest_load == 2
    assert plan.sensitivity >= math.sqrt(2) * spec.clip_bound**2


def test_budget_share_clipping(table):
    spec = _job(table)
    label = spec.label_index
    p = len(spec.columns) - 1
    q = 1.0 / (1.0 + math.sqrt(p))
    for party in spec.parties:
        idx = spec.party_column_indices(party)
        share = sum(q if j == label else (1 - q) / p for j in idx)
        assert party.clip_bound == pytest.approx(spec.clip_bound * math.sqrt(share), rel=1e-9)
    assert sum(x.clip_bound**2 for x in spec.parties) <= spec.clip_bound**2
    assert sum(x.clip_bound**2 for x in spec.parties) == pytest.approx(spec.clip_bound**2, rel=1e-9)


def test_inprocess_release_equals_the_clear_gram_bit_for_bit(table):
    spec = _job(table)
    data = party_tables(spec, table)
    Z = np.zeros((spec.n, spec.width))
    for party in spec.parties:
        idx = spec.party_column_indices(party)
        Z[:, idx] = clip_rows(client_vectors(spec, party, data[party.party_id]), party.clip_bound, spec.clip_norm)
    run = run_replicated(spec, data, Randomness.seeded_insecure(9), noise=False)
    total = run.result_shares[0] + run.result_shares[1] + run.result_shares[2]
    np.testing.assert_array_equal(total, clear_triangle(Z, spec.frac_bits))
    np.testing.assert_allclose(run.release.gram, Z.T @ Z, rtol=0, atol=spec.n * 2.0 ** -spec.frac_bits)
    assert np.all(np.linalg.norm(Z, axis=1) <= spec.clip_bound * (1 + 1e-12))


def test_seeded_runs_repeat_and_noise_is_there(table):
    spec = _job(table)
    data = party_tables(spec, table)
    a = run_inprocess(spec, data, Randomness.seeded_insecure(10))
    b = run_inprocess(spec, data, Randomness.seeded_insecure(10))
    clear = run_replicated(spec, data, Randomness.seeded_insecure(10), noise=False)
    assert a.release.sha256 == b.release.sha256 != clear.release.sha256
    assert a.release.kind == "gram" and a.release.privacy["colluding_servers"] == 1
    assert "honest majority" in a.release.privacy["guarantee"]
    assert not a.release.privacy["dp_verified"] and a.release.privacy["calibration_verified"]


def test_parties_refuse_a_weaker_assumption_than_their_policy(table):
    spec = _job(table)
    with pytest.raises(PolicyViolation, match="at most 1 of 3 servers collude"):
        PartyPolicy(max_epsilon=1.0, allow_reproduction=True).check(spec, seeded=True)
    PartyPolicy(max_epsilon=1.0, allow_reproduction=True, min_colluding_servers=1).check(spec, seeded=True)
    sketch = replace(spec, sketch=replace(spec.sketch, kind="sparse", m=64), colluding_servers=None)
    PartyPolicy(max_epsilon=1.0, allow_reproduction=True).check(sketch, seeded=True)
    with pytest.raises(ValueError, match="every party's block"):
        run_inprocess(spec, party_tables(spec, table), Randomness.seeded_insecure(11),
                      policies={"party-1": PartyPolicy(allow_reproduction=True)})


def test_planner_chooses_replicated_only_when_allowed_and_says_why():
    base = dict(n=80_000, width=7, epsilon=1.0, delta=1e-6, partition="columns", parties=3)
    default = plan_release(PlanInputs(**base))
    assert default.kind == "sparse"
    assert "up to 2 of 3 servers may collude" in default.reason
    assert "a replicated release would reach about" in default.reason and "1 of 3 servers" in default.reason
    allowed = plan_release(PlanInputs(**base, colluding_servers=1))
    assert allowed.kind == "gram"
    assert "honest majority" in allowed.reason and "the sparse sketch would reach" in allowed.reason
    assert not [c for c in default.candidates if c.kind == "gram"][0].feasible
    json.loads(json.dumps(default.to_dict(), allow_nan=False))


def test_job_file_carries_the_assumption(table):
    spec = _job(table)
    text = render_job_file(job_file_doc(spec))
    assert "colluding_servers = 1" in text
    assert parse_job_file(text).spec.digest == spec.digest


def test_job_file_auto_release_follows_the_trust_assumption(table):
    sketch, _ = build_job(table, job_id="auto", randomness=Randomness.seeded_insecure(8), partition="columns",
                          parties=3, kind="sparse", m=64)
    text = render_job_file(job_file_doc(sketch))
    text = text.replace('kind = "sparse"', 'kind = "auto"')
    # leave the sketch's resolved L and f to the defaults (they depend on the kind the planner picks)
    text = "\n".join(line for line in text.splitlines()
                     if not line.startswith(("min_honest_load", "frac_bits"))) + "\n"
    assert 'kind = "auto"' in text
    default = parse_job_file(text)
    assert default.spec.sketch.kind == "sparse" and "up to 2 of 3 servers may collude" in default.plan_reason
    allowed = parse_job_file(text.replace("[privacy]\n", "[privacy]\ncolluding_servers = 1\n"))
    assert allowed.spec.sketch.kind == "gram" and allowed.spec.replicated
    assert "honest majority" in allowed.plan_reason
    # c = 0 (no deviating party), L = P − 1: one curious party knows its own noise (noise_known_parties)
    assert allowed.spec.frac_bits <= 24 and allowed.spec.privacy.min_honest_load == 2


def test_a_server_core_holds_a_replicated_job_only_with_every_part(table):
    """The networked path (tests/integration/test_replicated_grpc.py runs it over gRPC): a server core takes the
    job, and counts its clients as held only once every party's three parts are stored."""
    from ltm.party.replicated import replicated_batches
    from ltm.server.core import ServerCore
    from ltm.server.release_gate import ANALYST_ROLE

    spec = _job(table)
    core = ServerCore("server-1")
    core.create_job(spec, caller_role=ANALYST_ROLE)
    data = party_tables(spec, table)
    for i, p in enumerate(spec.parties):
        assert core.held(spec.job_id).count == 0
        parts = replicated_batches(spec, p.party_id, data[p.party_id], Randomness.seeded_insecure(12).child(i))[1]
        for part in parts:
            core.accept(part, spec.job_id, caller_role="party", caller_id=p.party_id)
    assert core.held(spec.job_id).count == spec.n


def test_replicated_server_checks_every_upload(table):
    from ltm.party.replicated import replicated_uploads
    from ltm.server.replicated import ReplicatedServer

    spec = _job(table)
    data = party_tables(spec, table)
    ups = {p.party_id: replicated_uploads(spec, p.party_id, data[p.party_id], Randomness.seeded_insecure(12).child(i))
           for i, p in enumerate(spec.parties)}
    server = ReplicatedServer(spec, 1)
    with pytest.raises(ValueError, match="for server 0 reached server 1"):
        server.accept("party-0", ups["party-0"][0])
    with pytest.raises(ValueError, match="uploaded columns"):
        server.accept("party-0", ups["party-1"][1])
    with pytest.raises(KeyError):
        server.accept("party-9", ups["party-0"][1])
    server.accept("party-0", ups["party-0"][1])
    with pytest.raises(ValueError, match="already uploaded"):
        server.accept("party-0", ups["party-0"][1])
    with pytest.raises(ValueError, match="no upload yet"):
        server.output()
    server.accept("party-1", ups["party-1"][1])
    server.accept("party-2", ups["party-2"][1])
    assert server.output().shape == (spec.width * (spec.width + 1) // 2,)
    with pytest.raises(ValueError, match="not a replicated release"):
        ReplicatedServer(replace(spec, sketch=replace(spec.sketch, kind="sparse", m=64), colluding_servers=None), 0)


def test_wu_setting_replicated_release_beats_the_zero_predictor():
    """ltm/experiments/wu_replicated.py's cell on Insurance (n = 1070) at ε = 1: informative (the
    committed 20-split mean is 0.0405 against the zero predictor's 0.0773)."""
    from ltm.experiments.wu_replicated import cell

    row = cell("insurance", 1.0, 1)
    assert row["ols_mse"] < row["replicated_mse"] < 0.8 * row["zero_mse"]


def test_the_example_columns_job_file_is_a_replicated_release():
    """examples/jobs/power-columns-replicated.toml asks for the replicated release and states its
    trust assumption; a party with the default policy refuses it, one that accepts 1 of 3 joins."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "power-columns-replicated.toml"
    job = parse_job_file(path.read_text())
    spec = job.spec
    assert spec.partition == "columns" and spec.replicated and spec.tolerated_colluding_servers == 1
    assert [len(p.columns) for p in spec.parties] == [2, 2, 3]
    with pytest.raises(PolicyViolation, match="at most 1 of 3 servers"):
        PartyPolicy(max_epsilon=1.0, max_delta=1e-5).check(spec)
    PartyPolicy(max_epsilon=1.0, max_delta=1e-5, min_colluding_servers=1).check(spec)
    with pytest.raises(JobFileError, match="honest majority"):  # kind gram without the assumption
        parse_job_file(path.read_text().replace("colluding_servers = 1", ""))


def test_job_check_states_the_trust_assumption(capsys):
    from pathlib import Path

    from ltm.cli.app import main

    examples = Path(__file__).resolve().parents[3] / "examples" / "jobs"
    assert main(["job", "check", str(examples / "power-columns-replicated.toml")]) == 0
    assert "trust: private if at most 1 of 3 servers collude (an honest majority" in capsys.readouterr().out
    assert main(["job", "check", str(examples / "power-ridge.toml")]) == 0
    out = capsys.readouterr().out
    assert "trust: private if at most 2 of 3 servers collude\n" in out and "honest majority" not in out


def test_a_durable_server_keeps_a_replicated_job_across_a_restart(table, tmp_path):
    """The parts are stored like batches (SQLite + blobs): a server reopened on its directory still
    holds every client, releases the same output share as an in-memory server, and only once."""
    from ltm.client_set import ClientSet
    from ltm.errors import ProtocolError
    from ltm.party.replicated import replicated_batches
    from ltm.server.core import ServerCore
    from ltm.server.release_gate import ANALYST_ROLE
    from ltm.server.sqlite_store import SqliteStore

    spec = _job(table)
    data = party_tables(spec, table)
    parts = {p.party_id: replicated_batches(spec, p.party_id, data[p.party_id],
                                            Randomness.seeded_insecure(13).child(i))[2]
             for i, p in enumerate(spec.parties)}
    memory = ServerCore("server-2")
    with SqliteStore(tmp_path / "s2") as store:
        durable = ServerCore("server-2", store)
        for core in (memory, durable):
            core.create_job(spec, caller_role=ANALYST_ROLE)
            for pid, batches in parts.items():
                for b in batches:
                    core.accept(b, spec.job_id, caller_role="party", caller_id=pid)
            core.close(spec.job_id, caller_role=ANALYST_ROLE)
    with SqliteStore(tmp_path / "s2") as store:
        again = ServerCore("server-2", store)
        assert again.held(spec.job_id).count == spec.n
        everyone = ClientSet.full(spec.n)
        out = again.release(spec.job_id, everyone, caller_role=ANALYST_ROLE, job_digest=spec.digest)
        np.testing.assert_array_equal(
            out, memory.release(spec.job_id, everyone, caller_role=ANALYST_ROLE, job_digest=spec.digest))
    with SqliteStore(tmp_path / "s2") as store:
        with pytest.raises(ProtocolError, match="already been released"):
            ServerCore("server-2", store).release(spec.job_id, ClientSet.from_mask(np.arange(spec.n) > 0),
                                                  caller_role=ANALYST_ROLE, job_digest=spec.digest)


def test_a_deviating_party_is_refused_by_every_actor_until_clipping_is_verified(table):
    """Issue #30: a corrupt party uploading M·e_j reads other parties' values through the cross Gram,
    so a replicated job that tolerates a corrupt party is refused: by validation (servers, analyst,
    ``ltm job check``), by the party's policy, and the planner does not choose it."""
    spec = _job(table)
    bad = replace(spec, privacy=replace(spec.privacy, corrupt_parties=1))
    assert bad.noise_plan().min_honest_load == spec.noise_plan().min_honest_load == 2  # same noise
    with pytest.raises(JobSpecError, match="assumes every party follows the protocol") as err:
        validate_job(bad)
    assert "corrupt_parties = 1" in str(err.value) and "\n" not in err.value.problems[0]
    with pytest.raises(PolicyViolation, match="assumes every party follows the protocol"):
        PartyPolicy(max_epsilon=1.0, allow_reproduction=True, min_colluding_servers=1).check(bad, seeded=True)
    with pytest.raises(JobSpecError, match="assumes every party follows the protocol"):
        _job(table, corrupt_parties=1)
    inputs = dict(n=spec.n, width=spec.width, epsilon=1.0, delta=1e-6, partition="columns", task="regression",
                  mechanism="gaussian", clip_bound=spec.clip_bound, servers=3, colluding_servers=1, parties=3)
    assert plan_release(PlanInputs(**inputs, corrupt_parties=0)).kind == "gram"
    refused = plan_release(PlanInputs(**inputs, corrupt_parties=1))
    assert refused.kind != "gram"
    assert "follows the protocol" in next(c.note for c in refused.candidates if c.kind == "gram")

"""Release-gate attacks against real `ltm server` processes (docs/architecture.md §5): every server refuses on
its own, and a refusal changes nothing — in particular it does not use up the once-only release.

* before close, a tiny or empty participant set, a set that starves a sketch row below the
  promised honest load L, a wrong digest: FAILED_PRECONDITION from each of the three servers, and
  afterwards the honest release still works;
* a second release of the same job with a different set (the differencing attack): refused by
  each server; the original set still gets the original bytes;
* a participant set with clients a server does not hold (each server misses a different batch;
  the analyst asks for everyone): each server refuses naming its own first missing client;
* a job whose ε, δ, honest load L or calibration is outside a party's policy: the real
  `ltm party` process exits 3 before sending anything, and no server holds anything of it.

State is compared on each server's own disk (SQLite opened read-only, blob bytes) and through
the Status RPC.  The test process plays the analyst and the parties with real certificates.
"""
from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np
import pytest

from ltm.client_set import ClientSet
from ltm.party.randomizer import make_batches, party_randomness
from ltm.party.uploader import batch_header
from ltm.server.release_gate import check_release
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.sim.runtime.jobs import party_tables
from ltm.v1 import ltm_pb2
from tests.helpers import party_runs  # tests/helpers/party_runs.py
from tests.helpers.jobs import seeded_job
from tests.helpers.servers import create_job

K = 3
N = 1200
BATCH = 25
TIMEOUT = 20.0
FP = "FAILED_PRECONDITION"


# ------------------------------------------------------------------------------ deployment
@pytest.fixture(scope="module")
def deployment(start_servers):
    started = start_servers("gate", K, ["party-0", "party-1", "analyst", "operator"])
    yield {"work": started.work, "certs": started.certs, "servers": started.servers, "group": started.group,
           "analyst": started.stubs("analyst"), "party": {p: started.stubs(p) for p in ("party-0", "party-1")},
           "dirs": [started.work / f"server-{i}" for i in range(K)]}
    started.assert_running()


def make_job(dep, job_id: str, privacy: dict | None = None, **kw):
    """A job on the deployment.  Seeded randomness makes it a reproduction job (the tests upload
    seeded batches themselves) unless ``reproduction=False``; ``privacy`` overrides privacy fields
    after the defaults were resolved."""
    spec, table, randomness = seeded_job(f"gate-{job_id}", N, job_id=job_id, parties=2, k=K, m=8,
                                         endpoints=[s.endpoint for s in dep["servers"]], **kw)
    if privacy:
        spec = replace(spec, privacy=replace(spec.privacy, **privacy))
    return spec, party_tables(spec, table), randomness


def publish(dep, spec):
    create_job(dep["analyst"], spec, TIMEOUT)


def _chunks(batch, job_id):
    header, payload = batch_header(batch, job_id)  # the party's own header (randomness mode included)
    yield ltm_pb2.UploadChunk(header=header)
    if payload:
        yield ltm_pb2.UploadChunk(data=payload)


def upload_all(dep, spec, tables, randomness, skip=lambda server, party_id, index: False):
    """Every party's batches to every server, except those ``skip`` names."""
    for p in spec.parties:
        stubs = dep["party"][p.party_id]
        for per_server in make_batches(spec, p.party_id, tables[p.party_id], party_randomness(randomness, spec, p.party_id),
                                       batch_clients=BATCH):
            for i, b in enumerate(per_server):
                if not skip(i, p.party_id, b.batch_index):
                    stubs[i].Upload(_chunks(b, spec.job_id), timeout=TIMEOUT)


def close(dep, spec) -> list[np.ndarray]:
    masks = []
    for stub in dep["analyst"]:
        r = stub.Close(ltm_pb2.CloseRequest(job_id=spec.job_id, job_digest=spec.digest), timeout=TIMEOUT)
        held = ClientSet.from_bytes(spec.n, r.held_ranges)
        assert r.held == held.count
        masks.append(held.to_mask())
    return masks


def release(stub, spec, mask, digest=None) -> bytes:
    request = ltm_pb2.ReleaseRequest(job_id=spec.job_id, job_digest=spec.digest if digest is None else digest,
                                     participant_ranges=ClientSet.coerce(spec.n, mask).to_bytes())
    header, data = None, []
    for msg in stub.Release(request, timeout=TIMEOUT):
        if msg.HasField("header"):
            header = msg.header
        else:
            data.append(msg.data)
    payload = b"".join(data)
    assert header is not None and hashlib.sha256(payload).digest() == header.result_sha256
    assert len(payload) == 8 * header.rows * header.cols == 8 * spec.sketch.m * spec.width
    return payload


def server_state(data_dir: Path, stub, job_id: str):
    """What one server stores about a job: its rows on disk (read-only), blob bytes, and Status."""
    conn = sqlite3.connect(f"file:{data_dir / 'server.db'}?mode=ro", uri=True)
    try:
        job = conn.execute("SELECT digest, closed FROM jobs WHERE job_id = ?", (job_id,)).fetchall()
        batches = conn.execute("SELECT party_id, batch_index, content_digest, blob_path FROM batches "
                               "WHERE job_id = ? ORDER BY party_id, batch_index", (job_id,)).fetchall()
        releases = conn.execute("SELECT participants_digest, result FROM releases WHERE job_id = ?",
                                (job_id,)).fetchall()
    finally:
        conn.close()
    blobs = sorted(hashlib.sha256((data_dir / b[3]).read_bytes()).hexdigest() for b in batches if b[3])
    s = stub.Status(ltm_pb2.StatusRequest(job_id=job_id), timeout=TIMEOUT)
    return job, batches, releases, blobs, (s.closed, s.released, s.clients_held)


def states(dep, job_id):
    return [server_state(d, stub, job_id) for d, stub in zip(dep["dirs"], dep["analyst"])]


def refused_by_each(dep, spec, mask, phrase, *, digest=None, per_server_phrase=None):
    """Each server, asked on its own, refuses with FAILED_PRECONDITION; nothing changes anywhere."""
    before = states(dep, spec.job_id)
    for i, stub in enumerate(dep["analyst"]):
        with pytest.raises(grpc.RpcError) as err:
            release(stub, spec, mask, digest)
        assert err.value.code().name == FP, (i, err.value.code(), err.value.details())
        assert phrase in err.value.details(), (i, err.value.details())
        if per_server_phrase is not None:
            assert per_server_phrase[i] in err.value.details(), (i, err.value.details())
    assert states(dep, spec.job_id) == before


def starved_set(spec) -> np.ndarray:
    """More than the minimum number of participants, but sketch row 0 left with no client at all."""
    rows, _ = spec.make_sketch().placement(0, spec.n)
    mask = ~(rows == 0).any(axis=0)
    assert mask.sum() >= spec.privacy.min_participants
    return mask


# ------------------------------------------------------------------------------ attacks
def test_tiny_starved_and_repeated_releases_are_refused_by_every_server(deployment):
    dep = deployment
    spec, tables, randomness = make_job(dep, "tiny")
    publish(dep, spec)
    upload_all(dep, spec, tables, randomness)
    everyone = np.ones(spec.n, dtype=bool)

    refused_by_each(dep, spec, everyone, "must be closed before it is released")
    held = close(dep, spec)
    assert all(h.all() for h in held)
    for size in (0, 1, 5, spec.privacy.min_participants - 1):
        tiny = np.zeros(spec.n, dtype=bool)
        tiny[:size] = True
        refused_by_each(dep, spec, tiny, f"below the job's minimum of {spec.privacy.min_participants}")
    # a big set, but one sketch row has no honest noise: each server recomputes the row loads itself
    refused_by_each(dep, spec, starved_set(spec), "sketch row 0 would carry an honest load of 0")
    refused_by_each(dep, spec, everyone, "job digest", digest="0" * 64)
    for state in states(dep, spec.job_id):
        assert state[2] == [] and state[4][1] is False  # no release record anywhere

    # none of the refusals used up the once-only release
    first = [release(stub, spec, everyone) for stub in dep["analyst"]]
    after = states(dep, spec.job_id)
    assert all(s[4][1] for s in after)

    # the differencing attack: the same job over a slightly different (on its own acceptable) set
    fewer = everyone.copy()
    fewer[[3, 700]] = False
    check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=fewer,
                  held=everyone, already_released=False)
    refused_by_each(dep, spec, fewer, "already been released once")
    refused_by_each(dep, spec, ~everyone, "already been released once")
    # a retry of the original set (a lost response) gets the identical bytes, and changes nothing
    assert [release(stub, spec, everyone) for stub in dep["analyst"]] == first
    assert states(dep, spec.job_id) == after


def test_clients_a_server_does_not_hold_are_refused_by_that_server(deployment):
    dep = deployment
    # L a little below the default (95% of the full load), so that the honest intersection — 3 × 25
    # clients short — still passes the gate, as it would with more clients (no corrupt party deducted:
    # this test is about the held sets; a reproduction job may ask for that)
    spec, tables, randomness = make_job(dep, "held", min_honest_load=100, corrupt_parties=0)
    assert spec.privacy.min_honest_load == 100
    publish(dep, spec)
    # server i never received one batch, a different one for each server
    missing = {0: ("party-0", 2), 1: ("party-1", 3), 2: ("party-0", 5)}
    upload_all(dep, spec, tables, randomness, skip=lambda i, party_id, index: missing[i] == (party_id, index))
    held = close(dep, spec)
    first_missing = {}
    for i, (party_id, index) in missing.items():
        start = spec.party(party_id).start + index * BATCH
        expected = np.ones(spec.n, dtype=bool)
        expected[start:start + BATCH] = False
        np.testing.assert_array_equal(held[i], expected)
        first_missing[i] = f"does not hold (first: {start})"

    everyone = np.ones(spec.n, dtype=bool)
    refused_by_each(dep, spec, everyone, f"the participant set contains {BATCH} clients this server does not hold",
                    per_server_phrase=first_missing)
    # server 1's participant set offered to everyone: servers 0 and 2 lack their own batches
    before = states(dep, spec.job_id)
    for i in (0, 2):
        with pytest.raises(grpc.RpcError) as err:
            release(dep["analyst"][i], spec, held[1])
        assert err.value.code().name == FP and first_missing[i] in err.value.details()
    assert states(dep, spec.job_id) == before

    # the intersection (what an honest analyst asks for) passes every gate and is released
    common = np.logical_and.reduce(held)
    for h in held:
        check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=common, held=h,
                      already_released=False)
    shares = [np.frombuffer(release(stub, spec, common), dtype="<u8") for stub in dep["analyst"]]
    assert len({s.tobytes() for s in shares}) == K  # three different shares of one sketch


# ------------------------------------------------------------------------------ party policy
POLICY_CASES = {
    # job id: (job overrides, extra `ltm party` flags, phrase the party must log)
    "eps2": ({"epsilon": 2.0}, [], "ε = 2 exceeds this party's limit 1"),
    "eps-strict": ({}, ["--max-epsilon", "0.5"], "ε = 1 exceeds this party's limit 0.5"),
    "delta": ({"delta": 1e-3}, [], "δ = 0.001 exceeds this party's limit 1e-05"),
    "paper": ({"calibration": "paper"}, [], "calibration 'paper' is a reproduction mode"),
    # two parties of 200 clients each: the default tolerates one corrupt party; a job that does not is
    # refused by default, and a party may demand more than the job offers
    "corrupt0": ({"privacy": {"corrupt_parties": 0}}, [],
                 "the job tolerates 0 corrupt parties, this party requires at least 1"),
    "corrupt2": ({}, ["--min-corrupt-parties", "2"], "the job tolerates 1 corrupt parties, this party requires at least 2"),
    "tprime": ({}, ["--min-t-prime", "3"], "t′ = 0 corrupt clients, this party requires at least 3"),
    "participants": ({}, ["--min-participants", "100000"], "this party requires at least 100000"),
    "reproduction": ({"reproduction": True}, [], "the job is marked as a reproduction"),
    "seeded": ({}, ["--seed", "7"], "the job is not marked as a reproduction"),
}


#: the flag each refusal's plain error line names (what would accept the job)
POLICY_FLAGS = {"eps2": "--max-epsilon 2", "eps-strict": "--max-epsilon 1", "delta": "--max-delta 0.001",
                "paper": "--allow-paper-calibration", "corrupt0": "--min-corrupt-parties 0",
                "corrupt2": "--min-corrupt-parties 1", "tprime": "--min-t-prime 0", "participants": "--min-participants",
                "reproduction": "--allow-reproduction", "seeded": "drop --seed"}


@pytest.fixture(scope="module")
def policy_runs(deployment):
    """One `ltm party` process per policy case plus an acceptable control job, all at once."""
    dep = deployment
    runs = {}
    specs = {}
    for job_id, (overrides, flags, _) in [*POLICY_CASES.items(), ("accept", ({}, [], ""))]:
        spec, tables, _ = make_job(dep, job_id, **{"reproduction": False, **overrides})
        publish(dep, spec)
        specs[job_id] = spec
        work = dep["work"] / f"party-{job_id}"
        work.mkdir()
        data = work / "party-0.csv"
        t = tables["party-0"]
        names = list(t)
        data.write_text("\n".join([",".join(names)] + [",".join(repr(float(t[c][i])) for c in names)
                                                       for i in range(len(t[names[0]]))]) + "\n")
        group = ProcessGroup(work, dep["certs"])
        ap = group.start_task("party", "party-0", [
            "party", "--id", "party-0", "--job", job_id, "--data", str(data), "--wait", "20", "--no-progress",
            "--servers", ",".join(s.endpoint for s in dep["servers"]),
            "--server-ids", ",".join(s.actor for s in dep["servers"]), *flags])
        runs[job_id] = (group, ap)
    out = party_runs.collect(runs)
    return out, specs


@pytest.mark.parametrize("job_id", sorted(POLICY_CASES))
def test_party_refuses_a_job_outside_its_policy_before_sending(deployment, policy_runs, job_id):
    out, specs = policy_runs
    code, log = out[job_id]
    assert code == 3, f"exit {code}; log:\n{log[-2000:]}"
    assert "refusing the job" in log and POLICY_CASES[job_id][2] in log, log[-2000:]
    # besides the JSON log line, one plain line a person reads: the rule, the job's value, the flag
    plain = [line for line in log.splitlines() if line.startswith("ltm party: error: ")]
    assert len(plain) == 1, log[-2000:]
    assert POLICY_CASES[job_id][2] in plain[0] and POLICY_FLAGS[job_id] in plain[0], plain[0]
    for state in states(deployment, job_id):
        job, batches, releases, blobs, (closed, released, clients_held) = state
        assert job == [(specs[job_id].digest, 0)]
        assert (batches, releases, blobs, clients_held) == ([], [], [], 0)


def test_the_control_party_within_its_policy_uploads(deployment, policy_runs):
    out, specs = policy_runs
    code, log = out["accept"]
    assert code == 0, log[-2000:]
    party = specs["accept"].party("party-0")
    for state in states(deployment, "accept"):
        assert len(state[1]) == -(-party.size // 65536)  # one batch at the default batch size
        assert state[4][2] == party.size  # party-0's clients, complete; party-1 never came

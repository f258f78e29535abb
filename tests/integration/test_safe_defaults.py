"""Safe by default (issue #10), through real processes: server and party processes over mutual TLS.

* a job re-created under a new id is refused by a party once its privacy ledger's budget would be
  exceeded, with the spend in the message, and nothing reaches the servers;
* a seeded party's batches are refused by every server for a job that is not a reproduction; a
  reproduction job takes them, and the analyst's report names the seeded parties and is not DP;
* a party given no ``--server-ids`` pins the identities the job names: an endpoint presenting the
  analyst's or a party's certificate is refused before anything is sent;
* a default rows job with multi-client parties (``ltm demo``) tolerates a corrupt party, and its
  (ε, δ) holds with any one party's noise removed (computed here independently); ``ltm demo --json``
  reports every party ledger's spend.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np
import pytest

from ltm.analyst.coordinator import run_job
from ltm.datasets.synthetic import synthetic_ridge
from ltm.jobspec import JobSpec
from ltm.party.randomizer import make_batches, party_randomness
from ltm.party.uploader import batch_header
from ltm.randomness import Randomness
from ltm.sim.localnet.demo import write_party_csv
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.v1 import ltm_pb2
from tests.helpers import party_runs  # tests/helpers/party_runs.py
from tests.helpers.gaussian import gaussian_delta
from tests.helpers.servers import close_channels, create_job, held

K = 2
N = 1200
TIMEOUT = 20.0
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(start_servers):
    # The analyst serves on this same host (127.0.0.1): its certificate is valid there by host name,
    # so only pinning the server identity keeps a party from talking to it as a server.
    started = start_servers("safe", K, ["party-0", "party-1", "analyst", "operator"], analyst_hosts=["127.0.0.1"])
    work = started.work
    randomness = Randomness.seeded_insecure("safe-defaults-data")
    table = synthetic_ridge(N, 3, randomness)
    # A private job: system randomness for its sketch seed, so not a reproduction.
    spec, _ = build_job(table, job_id="base", randomness=Randomness.system(), parties=2, k=K, m=8,
                        endpoints=started.endpoints)
    assert not spec.reproduction and spec.privacy.corrupt_parties == 1
    tables = party_tables(spec, table)
    for pid, t in tables.items():
        write_party_csv(work / f"{pid}.csv", t)
    yield {"work": work, "certs": started.certs, "servers": started.servers, "deployment": started,
           "analyst": started.stubs("analyst"), "party-0": started.stubs("party-0"), "spec": spec, "tables": tables}
    started.assert_running()


def publish(world, spec):
    create_job(world["analyst"], spec, TIMEOUT)


def status(world, job_id):
    return held(world["analyst"], job_id, TIMEOUT)


def run_party(world, job_id, key, *flags, servers=None):
    """One `ltm party` process for party-0 (no --server-ids); returns (exit code, log, summary)."""
    work = world["work"] / f"run-{key}"
    work.mkdir()
    summary = work / "summary.json"
    group = ProcessGroup(work, world["certs"])
    ap = group.start_task("party", "party-0", [
        "party", "--id", "party-0", "--job", job_id, "--data", str(world["work"] / "party-0.csv"),
        "--servers", ",".join(servers or [s.endpoint for s in world["servers"]]), "--no-progress",
        "--summary-file", str(summary), *flags])
    code, log = party_runs.collect({key: (group, ap)})[key]
    return code, log, (json.loads(summary.read_text()) if summary.exists() else None)


# ------------------------------------------------------------------------------ the ledger
def test_a_job_recreated_under_a_new_id_is_refused_once_the_budget_would_be_exceeded(world):
    first = replace(world["spec"], job_id="ledger-1")
    again = replace(world["spec"], job_id="ledger-2")  # the same job, re-created under a new id
    publish(world, first)
    publish(world, again)
    ledger = ["--state-dir", str(world["work"] / "party-0-state"), "--budget-epsilon", "1.2",
              "--ledger-dir", str(world["work"] / "party-0-ledger")]
    code, log, summary = run_party(world, "ledger-1", "ledger-1", *ledger)
    assert code == 0, log[-3000:]
    spent = summary["ledger"]
    assert spent["charged"] and spent["before"]["epsilon"] == 0.0 and spent["budget"]["epsilon"] == 1.2
    assert spent["after"]["epsilon"] == pytest.approx(1.0, abs=1e-3)  # one (1, 1e-6) job at δ = 1e-6
    assert "zCDP" in spent["accountant"]
    assert status(world, "ledger-1") == [(world["spec"].party("party-0").size, 1)] * K

    code, log, summary = run_party(world, "ledger-2", "ledger-2", *ledger)
    assert code == 3, log[-3000:]
    assert summary is None
    assert "privacy budget exceeded" in log
    assert "has spent ε = 1 (δ = 1e-06) over 1 job(s)" in log, log[-2000:]
    assert "would reach ε = 1.45" in log and "budget ε = 1.2" in log
    assert status(world, "ledger-2") == [(0, 0)] * K  # nothing was sent
    # the ledger on disk holds the one accepted job, privately
    files = list((world["work"] / "party-0-ledger").glob("party-0.ledger.json"))
    assert len(files) == 1 and oct(files[0].stat().st_mode & 0o777) == "0o600"
    records = json.loads(files[0].read_text())["records"]
    assert [c["job_id"] for c in records if c["kind"] == "charge"] == ["ledger-1"]


# ------------------------------------------------------------------------------ seeded mode
def seeded_batches(spec, tables, party_id="party-0"):
    randomness = Randomness.seeded_insecure(7)
    return list(make_batches(spec, party_id, tables[party_id], party_randomness(randomness, spec, party_id)))


def upload(stub, batch, job_id, *, mode=None):
    header, payload = batch_header(batch, job_id)
    if mode is not None:
        header.randomness_mode = mode
    chunks = [ltm_pb2.UploadChunk(header=header)] + ([ltm_pb2.UploadChunk(data=payload)] if payload else [])
    return stub.Upload(iter(chunks), timeout=TIMEOUT)


def test_seeded_batches_are_refused_by_every_server_unless_the_job_is_a_reproduction(world):
    plain = replace(world["spec"], job_id="plain")
    publish(world, plain)
    (per_server,) = seeded_batches(plain, world["tables"])
    assert all(b.seeded for b in per_server)
    for i, b in enumerate(per_server):
        with pytest.raises(grpc.RpcError) as err:
            upload(world["party-0"][i], b, "plain")
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "is not a reproduction" in err.value.details() and "seeded" in err.value.details()
        # an upload that does not say how it drew its randomness is refused too
        with pytest.raises(grpc.RpcError) as err:
            upload(world["party-0"][i], replace(b, seeded=False), "plain", mode="")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "randomness_mode" in err.value.details()
    assert status(world, "plain") == [(0, 0)] * K

    # a reproduction job takes seeded batches; the analyst's report names the seeded parties, never DP
    repro = replace(world["spec"], job_id="repro", reproduction=True)
    publish(world, repro)
    for party_id in ("party-0", "party-1"):
        stubs = world["party-0"] if party_id == "party-0" else world["deployment"].stubs(party_id)
        for per_server in seeded_batches(repro, world["tables"], party_id):
            for stub, b in zip(stubs, per_server):
                upload(stub, b, "repro")

    async def release():
        channels, analyst = world["deployment"].aio_stubs("analyst")
        try:
            return await run_job(analyst, repro, deadline_s=10.0, randomness_label="declared by each party")
        finally:
            await close_channels(channels)

    privacy = asyncio.run(release()).release.privacy
    assert privacy["seeded_parties"] == ["party-0", "party-1"] and privacy["reproduction"] is True
    assert privacy["calibration_verified"] is True and privacy["dp_verified"] is False
    assert "NOT private" in privacy["guarantee"] and "party-0" in privacy["guarantee"]


# ------------------------------------------------------------------------------ identities pinned
def start_impostor(world, cert_of: str, spec: JobSpec) -> tuple[subprocess.Popen, str]:
    """A real process serving the Server service as server-0, but with ``cert_of``'s certificate."""
    d = world["work"] / f"impostor-{cert_of}"
    d.mkdir()
    (d / "job.json").write_bytes(spec.canonical_json())
    port_file = d / "port"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(d / "log", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "helpers" / "impostor_server.py"), "--certs",
                                 str(world["certs"]), "--cert-of", cert_of, "--pose-as", "server-0", "--spec",
                                 str(d / "job.json"), "--listen", "127.0.0.1:0", "--port-file", str(port_file)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    end = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < end, (d / "log").read_text()
        time.sleep(0.05)
    return proc, f"127.0.0.1:{port_file.read_text().strip()}"


def test_a_party_without_server_ids_refuses_an_endpoint_presenting_another_actors_certificate(world):
    spec = replace(world["spec"], job_id="pin")
    publish(world, spec)
    procs = []
    try:
        for cert_of in ("analyst", "party-1"):
            proc, endpoint = start_impostor(world, cert_of, spec)
            procs.append(proc)
            # the impostor stands at server-0's place; server-1 is the real one
            code, log, summary = run_party(world, "pin", f"pin-{cert_of}", "--wait", "4",
                                           servers=[endpoint, world["servers"][1].endpoint])
            assert code != 0 and summary is None, log[-3000:]
            if cert_of == "analyst":
                # its certificate is valid for 127.0.0.1 and signed by the CA: only the pin refuses it
                assert code == 3, log[-3000:]
                assert "did not all prove to be the servers ['server-0', 'server-1']" in log, log[-3000:]
            assert status(world, "pin") == [(0, 0)] * K  # nothing reached the real server either
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


# ------------------------------------------------------------------------------ corruption default
def test_default_demo_tolerates_a_corrupt_party_and_reports_the_ledgers(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "demo", "--json", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    privacy = r["privacy"]
    assert privacy["corrupt_parties"] >= 1 and privacy["dp_verified"] is True and r["reproduction"] is False
    # every party ledger's spend: one default (1, 1e-6) job at the default budget δ = 1e-6
    assert sorted(r["ledgers"]) == [f"party-{i}" for i in range(r["parties"])]
    for entry in r["ledgers"].values():
        assert entry["before"]["epsilon"] == 0.0 and entry["after"]["jobs"] == 1
        assert entry["after"]["epsilon"] == pytest.approx(1.0, abs=1e-3)

    # Check by computation: remove any one party's noise (it knows it) and what is left in every
    # release row must still buy (ε, δ).  The spec is the one the servers stored.
    db = sqlite3.connect(tmp_path / "server-0" / "server.db")
    spec = JobSpec.from_json(db.execute("SELECT spec_json FROM jobs WHERE job_id = 'demo'").fetchone()[0])
    db.close()
    assert spec.digest == r["job_digest"]
    sketch = spec.make_sketch()
    rows = sketch.slots() >> 1  # the sketch row of each (piece, client)
    per_party = np.array([np.bincount(rows[:, p.start:p.stop].ravel(), minlength=sketch.m) for p in spec.parties])
    assert (np.array([p.size for p in spec.parties]) > 1).all()
    total = per_party.sum(axis=0)
    honest = min(int((total - per_party[i]).min()) for i in range(len(spec.parties)))
    plan = spec.noise_plan()
    # Δ of the release kind the planner chose (2C√s for a sketch, the lift's bound for gram): the
    # calibration's own; what is checked here independently is the load left with a party removed
    sens = plan.sensitivity
    if spec.sketch.kind in ("sparse", "dense"):
        assert sens == pytest.approx(2.0 * spec.clip_bound * math.sqrt(sketch.pieces))
    p = spec.privacy
    assert gaussian_delta(sens / (plan.sigma_client * math.sqrt(honest)), p.epsilon) <= p.delta * (1 + 1e-9)
    # the old default (no corrupt party, L = 95% of the full load) fails this very check
    old_L = math.floor(0.95 * int(total.min()))
    old_sigma_c = plan.sigma_release / math.sqrt(old_L)
    assert gaussian_delta(sens / (old_sigma_c * math.sqrt(honest)), p.epsilon) > 2 * p.delta

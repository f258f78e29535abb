"""`ltm job cancel` with real processes: two servers and the analyst, over mutual TLS.

A submitted job (a party has uploaded to it) is cancelled by the operator: the analyst reports it
cancelled, every server drops its batches and refuses every request naming it, and its id cannot be
used again — not on the analyst (a resubmitted job file is refused) and not on any server (the
analyst's own identity cannot create it there) — also after every process has been restarted.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from ltm.jobfile import parse_job_file, render_job_file
from ltm.randomness import Randomness
from ltm.v1 import ltm_pb2
from tests.helpers.jobs import job_doc as doc
from tests.helpers.servers import create_job, upload_all

ROOT = Path(__file__).resolve().parents[2]


def ltm(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ltm.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def world(start_servers):
    started = start_servers("cancel", 2, ["party-0", "party-1", "analyst", "operator"])
    analyst = started.group.start_service("analyst", "analyst", ["analyst", "--out", str(started.work / "out")])
    d = doc(endpoints=started.endpoints)
    d["job"]["id"] = "oops-1"
    d["job"]["deadline_s"] = 600  # stays open: only the cancel ends it
    job_file = started.work / "oops.toml"
    job_file.write_text(render_job_file(d))
    yield {"started": started, "analyst": analyst, "job_file": job_file,
           "spec": parse_job_file(job_file.read_text()).spec, "op": ["--analyst", analyst.endpoint,
                                                                     "--certs", started.certs]}
    started.assert_running()


def _status(world) -> str:
    r = ltm("job", "status", "oops-1", *world["op"])
    assert r.returncode == 0, r.stderr
    return r.stdout


def _server_refusals(world) -> list[tuple[grpc.StatusCode, str]]:
    """What each server answers a party's GetJob for the job."""
    out = []
    for stub in world["started"].stubs("party-0"):
        with pytest.raises(grpc.RpcError) as err:
            stub.GetJob(ltm_pb2.GetJobRequest(job_id="oops-1"), timeout=20)
        out.append((err.value.code(), err.value.details()))
    return out


def test_a_cancelled_job_is_dropped_everywhere_and_its_id_is_retired_for_good(world):
    started, spec = world["started"], world["spec"]
    r = ltm("job", "submit", world["job_file"], *world["op"])
    assert r.returncode == 0, r.stderr
    end = time.monotonic() + 60
    while "waiting" not in _status(world):  # published on both servers, intake open
        assert time.monotonic() < end, _status(world)
        time.sleep(0.2)
    # a party uploads (the real party core over gRPC): its shares are on the servers
    rng = np.random.default_rng(0)
    tables = {p.party_id: {c.name: rng.uniform(0, 1, p.size) for c in spec.columns if c.role != "intercept"}
              for p in spec.parties}
    asyncio.run(upload_all(started, spec, tables, Randomness.system(), parties=["party-0"]))
    held = [st.clients_held for st in (s.Status(ltm_pb2.StatusRequest(job_id="oops-1"), timeout=20)
                                        for s in started.stubs("analyst"))]
    assert all(h > 0 for h in held), held
    blobs = [started.work / f"server-{i}" / "blobs" for i in range(2)]
    assert any(any(b.rglob("*.u64")) for b in blobs)  # explicit shares (the others are 32-byte seeds)

    r = ltm("job", "cancel", "oops-1", "--reason", "wrong columns", *world["op"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cancelled" in r.stdout and "wrong columns" in r.stdout and "not yet told" not in r.stdout
    assert "oops-1: cancelled" in _status(world)

    def retired_everywhere():
        for code, details in _server_refusals(world):
            assert code == grpc.StatusCode.FAILED_PRECONDITION and "was cancelled" in details, details
        assert not any(any(b.rglob("*.u64")) for b in blobs)  # the shares are gone
        again = ltm("job", "submit", world["job_file"], *world["op"])
        assert again.returncode != 0 and "was cancelled" in again.stderr and "new job id" in again.stderr, \
            again.stdout + again.stderr
        for stub in started.stubs("analyst"):  # the analyst's identity cannot recreate it on a server
            with pytest.raises(grpc.RpcError) as err:
                create_job([stub], spec)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "was cancelled" in err.value.details()

    retired_everywhere()
    # durable: restart every process (SIGKILL first: nothing is flushed on the way out)
    group = started.group
    for ap in [*started.servers, world["analyst"]]:
        group.restart(ap)
    assert "oops-1: cancelled" in _status(world)
    retired_everywhere()
    # cancelling again is harmless (idempotent), a job never submitted is not found
    assert ltm("job", "cancel", "oops-1", *world["op"]).returncode == 0
    r = ltm("job", "cancel", "never-1", *world["op"])
    assert r.returncode != 0 and "NOT_FOUND" in r.stderr and "never-1" in r.stderr

"""Load: many concurrent party streams against 3 real `ltm server` processes on loopback, mTLS
(``ltm/sim/tools/loadtest.py``).  CI size: 100 parties (one certificate and 3 channels each, 300 concurrent
uploads), then a 2-driver-process run in full share mode; the 1000-stream run is
``ltm loadtest --parties 1000`` (prints JSON).

Every run must stop by itself: it binds 127.0.0.1 only, has a deadline, and stops every process it
started (the report's ``stopped``).  Nothing here is timed against a threshold except the deadline.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ltm.sim.tools.loadtest import LoadConfig, ensure_certs, run_loadtest

CI_PARTIES = 100


@pytest.fixture(scope="module")
def certs_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("load-certs")


def _check(report: dict, parties: int, clients_per_party: int, k: int = 3) -> None:
    c = report["checks"]
    n = parties * clients_per_party
    assert report["ok"], json.dumps(c)
    assert report["tls"] and report["stopped"]
    assert all(s["endpoint"].startswith("127.0.0.1:") for s in report["servers"]) and len(report["servers"]) == k
    # every batch accepted exactly once, by every server
    assert c["clients_held_after_upload"] == [n] * k
    assert c["receipts"] == parties * k and c["receipts_unique"]
    # the identical re-upload returned the identical receipts and changed nothing
    assert c["duplicate_same_receipts"] and c["clients_held_after_duplicate"] == [n] * k
    # the release over everyone is S·(X + G) of what the parties sent, bit for bit
    assert c["participants"] == n and c["release_exact"] and c["dp_verified"]
    for phase in ("upload", "duplicate_upload"):
        r = report[phase]
        assert r["streams"] == parties and r["uploads"] == parties * k
        assert r["batches_per_s"] > 0 and r["mb_per_s"] > 0
        assert 0 < r["latency_s"]["p50"] <= r["latency_s"]["p99"] <= r["latency_s"]["max"]
        assert r["retries"] == 0


def test_100_concurrent_party_streams_via_the_command(certs_cache):
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "loadtest", "--parties", str(CI_PARTIES),
                          "--deadline", "90", "--certs-cache", str(certs_cache)],
                         capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    _check(report, CI_PARTIES, 4)
    assert report["certificates"]["actors"] == CI_PARTIES + 5
    assert report["connect_latency_s"]["p99"] > 0
    print(json.dumps({"upload": report["upload"], "timing_s": report["timing_s"]}, indent=1))


def test_several_driver_processes_and_full_shares(certs_cache):
    """Parties split over 2 driver processes; every share explicit (full mode); certificates reused."""
    report = run_loadtest(LoadConfig(parties=30, clients_per_party=8, drivers=2, share_mode="full",
                                     deadline_s=90, certs_cache=str(certs_cache)))
    _check(report, 30, 8)
    assert report["certificates"]["cached"] and report["certificates"]["leaves_made"] == 0
    # full mode: every server receives 8 bytes per entry of every batch
    assert report["upload"]["payload_bytes"] == 30 * 3 * 8 * 8 * 4


def test_certificate_cache_adds_only_missing_leaves(tmp_path):
    first = ensure_certs(tmp_path, ["server-0", "party-0"])
    assert first["leaves_made"] == 2 and not first["cached"]
    again = ensure_certs(tmp_path, ["server-0", "party-0", "party-1"])
    assert again["leaves_made"] == 1  # same CA, one new leaf
    assert ensure_certs(tmp_path, ["party-1"])["cached"]
    assert (tmp_path / "party-1.key").stat().st_mode & 0o777 == 0o600


def test_deadline_stops_the_run(tmp_path):
    """A deadline too short to finish: the run raises TimeoutError and leaves no process behind.

    300 parties cannot finish in 1.5 s even on an idle machine (certificates, 3 server starts and
    900 TLS uploads take several seconds), so the deadline fires whatever the load; where it fires
    depends on the load, so only "every process that was started is gone" is asserted."""
    report: dict = {}
    with pytest.raises(TimeoutError):
        run_loadtest(LoadConfig(parties=300, deadline_s=1.5, workdir=str(tmp_path)), report)
    assert report["stopped"]
    for pid in report.get("pids", []):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

"""What a person reads from `ltm server` and `ltm party`, through real processes over mutual TLS:
the server's startup line (address, TLS, store, jobs held) and shutdown line, and the party's
summary (job, clients, batches, bytes per server, time, ε spent and left) — on stdout, while
stderr carries only the JSON log lines (so a log collector still parses every line of it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ltm.datasets.synthetic import synthetic_ridge
from ltm.randomness import Randomness
from ltm.sim.localnet.demo import write_party_csv
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.transport.certs import write_certs
from ltm.transport.metering import human_bytes
from ltm.transport.tls import make_sync_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
K = 2


def _human_lines(log: str) -> list[str]:
    """The lines of an actor's combined log that are not JSON log lines."""
    out = []
    for line in log.splitlines():
        try:
            json.loads(line)
        except ValueError:
            out.append(line)
    return out


def test_server_and_party_say_what_they_did(tmp_path) -> None:
    certs = tmp_path / "certs"
    write_certs(certs, [f"server-{i}" for i in range(K)] + ["party-0", "party-1", "analyst", "operator"])
    group = ProcessGroup(tmp_path, certs)
    servers = []
    try:
        servers = group.start_servers(K)
        table = synthetic_ridge(600, 3, Randomness.seeded_insecure("summaries-data"))
        spec, _ = build_job(table, job_id="words", randomness=Randomness.system(), parties=2, k=K, m=8,
                            endpoints=[s.endpoint for s in servers])
        for s in servers:
            with make_sync_channel(s.endpoint, certs, "analyst",
                                   options=[("grpc.ssl_target_name_override", s.actor)]) as ch:
                ltm_pb2_grpc.ServerStub(ch).CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()),
                                                      timeout=20)
        data = tmp_path / "party-0.csv"
        write_party_csv(data, party_tables(spec, table)["party-0"])
        summary_file = tmp_path / "summary.json"
        proc = subprocess.run(
            [sys.executable, "-m", "ltm.cli", "party", "--id", "party-0", "--job", "words", "--data", str(data),
             "--servers", ",".join(s.endpoint for s in servers), "--certs", str(certs), "--no-progress",
             "--state-dir", str(tmp_path / "state"), "--summary-file", str(summary_file)],
            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for line in proc.stderr.splitlines():  # the log: JSON lines only
            json.loads(line)
        r = json.loads(summary_file.read_text())
        out = proc.stdout.splitlines()
        clients = spec.party("party-0").size
        assert out[0].startswith(f"ltm party party-0: job 'words' uploaded: {clients} clients in "
                                 f"{r['batches']} batch")
        sent = ", ".join(f"server-{i} ({s.endpoint}) {human_bytes(r['bytes_per_server'][i])}"
                         for i, s in enumerate(servers))
        assert any(line.strip().startswith(f"sent: {sent}") for line in out), out
        privacy = next(line for line in out if "privacy:" in line)
        assert "this job is (ε 1, δ 1e-06)-DP per client" in privacy
        assert "spent ε 0 → 1 of budget ε 4" in privacy and "ε 3 of the budget left" in privacy
    finally:
        group.stop_all()
    for i, s in enumerate(servers):
        lines = _human_lines(s.log_path.read_text())
        port = s.endpoint.rsplit(":", 1)[1]
        assert lines[0].startswith(f"ltm server server-{i}: listening on 127.0.0.1:{port} (mutual TLS, "
                                   f"certificates {certs}); store "), lines
        assert "0 jobs held" in lines[0]
        assert lines[-1].startswith(f"ltm server server-{i}: stopped after ") and "1 job held in" in lines[-1]


def test_the_analyst_says_where_it_listens_and_keeps_its_jobs(tmp_path) -> None:
    certs = tmp_path / "certs"
    write_certs(certs, ["server-0", "analyst", "operator"])
    group = ProcessGroup(tmp_path, certs)
    out = tmp_path / "analyst-out"
    try:
        analyst = group.start_service("analyst", "analyst", ["analyst", "--out", str(out)])
    finally:
        group.stop_all()
    lines = _human_lines(analyst.log_path.read_text())
    port = analyst.endpoint.rsplit(":", 1)[1]
    assert lines[0] == (f"ltm analyst: listening on 127.0.0.1:{port} (mutual TLS, certificates {certs}); jobs in "
                        f"{out.absolute()}, 0 jobs held, 0 resumed; results under {out.absolute()}/<job>/. Stop "
                        f"with SIGTERM (Ctrl-C)."), lines
    assert lines[-1].startswith("ltm analyst: stopped after ") and lines[-1].endswith(f"0 jobs held in {out.absolute()}")

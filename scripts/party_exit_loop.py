"""Run `ltm party` on bad data many times against real servers, under load, and count aborts.

A party that finds bad data exits 4 before it sends anything.  It once sometimes died of SIGABRT
instead (gRPC: "epoll_wait ... Bad file descriptor") under load: not the party at all, but the
child its launcher had forked, aborted by gRPC before it could exec (ltm.cli.app.no_grpc_fork_handlers
says why).  This script is the check: it starts 3 real ``ltm server`` processes (mutual TLS,
loopback), publishes a job, writes a CSV with a NaN, and runs ``--runs`` party processes,
``--concurrent`` at a time, while ``--burners`` processes spin on the CPU; every exit status other
than 4, and every log naming epoll/abort, is a failure.  ``--fork``: the launcher keeps its own gRPC
in use (a thread calling server-0's health service) and starts each party with a plain fork()
(``preexec_fn``, as a launcher with ``user=``/``group=`` or a fork-based pool would), the case
that aborted; ``--grpc-fork-support`` leaves gRPC's fork support on, as before the fix.

    PYTHONPATH=$PWD python3 scripts/party_exit_loop.py --runs 200 --concurrent 4 --burners 4 --fork

Prints one JSON object (exit statuses counted, failures with their log tails); exit status 0 when
every run exited 4 with its one "bad data" line, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

def _nothing() -> None:
    """A ``preexec_fn``: its presence makes Python fork() rather than vfork()."""


BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def _bad_csv(path: Path, table: dict) -> None:
    names = list(table)
    rows = [[repr(float(table[c][i])) for c in names] for i in range(len(table[names[0]]))]
    rows[5][1] = "nan"
    path.write_text("\n".join([",".join(names)] + [",".join(r) for r in rows]) + "\n")


def _busy_grpc(endpoint: str, certs: Path, actor: str, stop: threading.Event) -> None:
    """Call ``actor``'s health service at ``endpoint`` every 20 ms until ``stop``: a launcher's open,
    used channel (a call in flight at the moment of a fork makes gRPC skip its handlers)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from ltm.transport.tls import make_sync_channel

    channel = make_sync_channel(endpoint, certs, "operator", options=[("grpc.ssl_target_name_override", actor)])
    stub = health_pb2_grpc.HealthStub(channel)
    while not stop.is_set():
        stub.Check(health_pb2.HealthCheckRequest(), timeout=30)
        stop.wait(0.02)
    channel.close()


def run_loop(runs: int, concurrent: int, burners: int, work: Path, timeout: float = 120.0,
             fork: bool = False) -> dict:
    """The loop (see the module docstring); returns its report."""
    from ltm.sim.localnet import launcher
    from ltm.sim.localnet.launcher import ProcessGroup
    from ltm.sim.runtime.jobs import party_tables
    from ltm.transport.certs import write_certs
    from ltm.transport.tls import make_sync_channel
    from ltm.v1 import ltm_pb2, ltm_pb2_grpc
    from tests.helpers.jobs import seeded_job

    certs = work / "certs"
    write_certs(certs, ["server-0", "server-1", "server-2", "party-0", "party-1", "analyst", "operator"])
    group = ProcessGroup(work, certs)
    burn = [subprocess.Popen([sys.executable, "-c", BURN.format(s=3600)]) for _ in range(burners)]
    statuses: Counter = Counter()
    failures: list[dict] = []
    t0 = time.monotonic()
    try:
        servers = group.start_servers(3, ["--log-level", "warning"])
        spec, table, _ = seeded_job("party-exit-loop", 200, 3, job_id="loop", parties=2, k=3, m=8, s=2,
                                    endpoints=[s.endpoint for s in servers])
        spec = replace(spec, reproduction=False)
        for s in servers:
            ch = make_sync_channel(s.endpoint, certs, "analyst", options=[("grpc.ssl_target_name_override", s.actor)])
            ltm_pb2_grpc.ServerStub(ch).CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()), timeout=30)
            ch.close()
        stop = threading.Event()
        if fork:
            threading.Thread(target=_busy_grpc, args=(servers[0].endpoint, certs, "server-0", stop),
                             daemon=True).start()
            launcher.subprocess = SimpleNamespace(**{**vars(subprocess), "Popen": partial(
                subprocess.Popen, preexec_fn=_nothing)})  # fork(), not vfork()
        data = work / "party-0.csv"
        _bad_csv(data, party_tables(spec, table)["party-0"])
        argv = ["party", "--id", "party-0", "--job", "loop", "--data", str(data), "--wait", "30", "--no-progress",
                "--servers", ",".join(s.endpoint for s in servers)]
        done = 0
        while done < runs:
            batch = [group.start_task("party", f"run-{done + j}", argv) for j in range(min(concurrent, runs - done))]
            for ap in batch:
                code = ap.proc.wait(timeout=timeout)
                statuses[code] += 1
                group.processes.remove(ap)
                log = ap.log_path.read_text(errors="replace")
                if code != 4 or "bad data" not in log or "epoll" in log or "abort" in log.lower():
                    failures.append({"exit": code, "log": log[-1500:]})
                ap.log_path.unlink(missing_ok=True)
            done += len(batch)
        stop.set()
    finally:
        launcher.subprocess = subprocess
        for p in burn:
            p.kill()
            p.wait()
        group.stop_all()
    return {"runs": runs, "concurrent": concurrent, "burners": burners, "cpus": os.cpu_count(), "fork": fork,
            "grpc_fork_support": os.environ.get("GRPC_ENABLE_FORK_SUPPORT"),
            "exit_statuses": {str(k): v for k, v in sorted(statuses.items(), key=lambda kv: str(kv[0]))},
            "sigabrt": statuses.get(-6, 0), "failures": failures[:5], "failure_count": len(failures),
            "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200, help="party runs in all (default 200)")
    p.add_argument("--concurrent", type=int, default=4, help="party processes at a time (default 4)")
    p.add_argument("--burners", type=int, default=4, help="CPU-spinning processes beside them (default 4)")
    p.add_argument("--fork", action="store_true", help="busy launcher gRPC, parties started by fork() (see above)")
    p.add_argument("--grpc-fork-support", action="store_true", help="leave gRPC's fork support on (before the fix)")
    args = p.parse_args(argv)
    if not args.grpc_fork_support:
        from ltm.cli.app import no_grpc_fork_handlers

        no_grpc_fork_handlers()  # as `ltm` does, before grpc is imported
    with tempfile.TemporaryDirectory(prefix="ltm-exit-loop-") as work:
        report = run_loop(args.runs, args.concurrent, args.burners, Path(work), fork=args.fork)
    print(json.dumps(report, indent=2))
    return 0 if not report["failure_count"] else 1


if __name__ == "__main__":
    sys.exit(main())

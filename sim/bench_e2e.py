"""``ltm bench e2e``: a networked run over real processes on loopback with mTLS, timed and metered.

n synthetic clients (held by a few party processes) → k servers → the analyst, exactly as
``ltm demo`` but on synthetic ridge data of any size, with party data handed over as ``.npz``.
Reports wall time, time per phase and each process's peak RSS (``VmHWM`` from /proc, read just
before the process is stopped).  Numbers, not asserts.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ltm.randomness import Randomness
from sim.demo import _operate
from sim.jobs import build_job, party_tables
from sim.launcher import ActorProcess, ProcessGroup
from sim.data import synthetic_ridge
from transport.certs import write_certs


def add_parser(bench_sub: argparse._SubParsersAction) -> None:
    p = bench_sub.add_parser("e2e", help="networked end-to-end run on loopback: wall time, phases, peak RSS")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=10)
    p.add_argument("--m", type=int, default=100)
    p.add_argument("--s", type=int, default=1)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--release", "--kind", dest="kind", choices=["sparse", "dense", "gram", "auto"], default="sparse",
                   help="release kind (gram: clients upload D(D+1)/2 lifted values, the map is the sum; m, s unused)")
    p.add_argument("--parties", type=int, default=4)
    p.add_argument("--seed", type=int, default=1, help="seeded mode (benchmarks need no privacy)")
    p.add_argument("--workdir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def peak_rss_bytes(ap: ActorProcess) -> int | None:
    """Peak resident set size of a live process (Linux /proc), in bytes."""
    try:
        for line in Path(f"/proc/{ap.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def server_wire_bytes(group: ProcessGroup, ap: ActorProcess, job_id: str) -> dict[str, int]:
    """A server's gRPC-layer byte counts, from its Status RPC."""
    from ltm.v1 import ltm_pb2, ltm_pb2_grpc
    from transport.tls import make_sync_channel

    channel = make_sync_channel(ap.endpoint, group.certs, "operator",
                                options=[("grpc.ssl_target_name_override", ap.actor)])
    try:
        st = ltm_pb2_grpc.ServerStub(channel).Status(ltm_pb2.StatusRequest(job_id=job_id), timeout=10)
        return {"server": ap.actor, "received": int(st.bytes_received), "sent": int(st.bytes_sent),
                "store_s": st.store_seconds, "release_s": st.release_seconds}
    finally:
        channel.close()


def run_e2e(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.monotonic()
    phases: dict[str, float] = {}
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="ltm-e2e-"))
    randomness = Randomness.seeded_insecure(args.seed)
    t = time.monotonic()
    table = synthetic_ridge(args.n, args.d, randomness.child("data"))
    table = type(table)(table.columns, table.label, table.source)
    certs = workdir / "certs"
    write_certs(certs, [f"server-{i}" for i in range(args.k)] + [f"party-{i}" for i in range(args.parties)]
                + ["analyst", "operator"], force=True)
    phases["data_and_certs"] = time.monotonic() - t
    group = ProcessGroup(workdir, certs)
    rss: dict[str, int | None] = {}
    try:
        t = time.monotonic()
        servers = group.start_servers(args.k)
        analyst = group.start_service("analyst", "analyst", ["analyst", "--out", str(workdir / "out")])
        phases["start_services"] = time.monotonic() - t
        t = time.monotonic()
        spec, _ = build_job(table, job_id="e2e", randomness=randomness, parties=args.parties, k=args.k, m=args.m,
                            s=args.s, kind=getattr(args, "kind", "sparse"), endpoints=[s.endpoint for s in servers])
        data = workdir / "party-data"
        data.mkdir(parents=True, exist_ok=True)
        for pid, cols in party_tables(spec, table).items():
            np.savez(data / f"{pid}.npz", **cols)
        phases["job_spec_and_party_data"] = time.monotonic() - t
        parties: list[ActorProcess] = []
        endpoints = ",".join(s.endpoint for s in servers)

        def start_parties() -> None:
            for p in spec.parties:
                parties.append(group.start_task("party", p.party_id, [
                    "party", "--id", p.party_id, "--servers", endpoints, "--server-ids",
                    ",".join(s.actor for s in servers), "--job", spec.job_id, "--data", str(data / f"{p.party_id}.npz"),
                    "--seed", str(args.seed), "--no-progress",
                    "--summary-file", str(data / f"{p.party_id}.summary.json")]))

        report, release, op = asyncio.run(_operate(analyst.endpoint, certs, False, spec, start_parties,
                                                   randomness.label, 600.0))
        phases.update(op)
        exits = [p.proc.wait(timeout=120) for p in parties]
        if any(exits):
            raise RuntimeError("a party failed:\n" + "\n".join(p.log_tail() for p in parties if p.proc.returncode))
        for ap in servers + [analyst]:
            rss[ap.actor] = peak_rss_bytes(ap)
        wire = [server_wire_bytes(group, ap, spec.job_id) for ap in servers]
        summaries = [json.loads((data / f"{p.party_id}.summary.json").read_text()) for p in spec.parties]
    finally:
        group.stop_all()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return {
        "benchmark": "e2e", "n": args.n, "d": args.d, "kind": spec.sketch.kind, "m": spec.sketch.m,
        "s": spec.make_sketch().pieces, "k": args.k, "client_vector_width": spec.width,
        "upload_values_per_client": spec.make_sketch().pieces * spec.upload_width,
        "parties": args.parties, "tls": True, "release_sha256": release.sha256,
        "participants": report["participants"], "wall_s": time.monotonic() - t_start,
        "phases_s": phases, "analyst_phases_s": report["timing_s"],
        "party_upload_s": [s["seconds"] for s in summaries],
        "phases_per_actor_s": {
            "noise (parties)": [round(s["noise_s"], 4) for s in summaries],
            "sharing (parties)": [round(s["sharing_s"], 4) for s in summaries],
            "upload (parties, streaming to k servers)": [round(s["upload_s"], 4) for s in summaries],
            "store (servers, validate + durable write)": [round(w["store_s"], 4) for w in wire],
            "release (servers, gate + result share)": [round(w["release_s"], 4) for w in wire],
            "fit (analyst)": round(report["timing_s"].get("fit", 0.0), 4),
        },
        "bytes_party_to_server": [sum(s["bytes_per_server"][i] for s in summaries) for i in range(args.k)],
        "bytes_server_to_analyst": report["release_bytes_per_server"],
        "wire_bytes_per_server": wire,
        "wire_bytes_total": int(sum(w["received"] + w["sent"] for w in wire)),
        "wire_bytes_note": "gRPC payload bytes counted by each server's ByteMeter interceptor (all RPCs)",
        "peak_rss_bytes": rss,
    }


def run(args: argparse.Namespace) -> int:
    print(json.dumps(run_e2e(args), indent=2))
    return 0

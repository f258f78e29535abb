"""``ltm demo``: one whole networked job on loopback, every actor a separate OS process.

It creates certificates (a CA, one leaf per actor), starts k servers and the analyst, publishes a
job on the bundled real data, starts the parties (each uploads its rows' shares to every server
over mutual TLS), lets the analyst close, release, reconstruct and fit, prints a summary — private
vs non-private model quality, ε, δ, bytes moved, time per phase — and stops everything it started.

With ``--seed`` everything is seeded (reproducible, NOT private) and the release's SHA-256 equals
that of ``ltm simulate --seed`` with the same parameters: the same cores run behind both
paths (the in-process runtime and gRPC).

``--chaos`` kills servers with SIGKILL and restarts them (same port, same data directory) while
the job runs — once mid-upload, once while the analyst's Release to a server is in flight — and
reports what it did under ``"chaos"``; the release must come out exactly as without ``--chaos``.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from ltm.analyst.release import ReleasedSketch, release_from_reply
from ltm.errors import CommandError
from ltm.jobspec import JobSpec
from ltm.party.ledger import describe_admission
from ltm.randomness import Randomness
from ltm.sim.localnet.chaos import Chaos
from ltm.sim.localnet.launcher import ActorProcess, ProcessGroup, stop_on_termination
from ltm.sim.localnet.workdir import make_scratch_dir
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sim.runtime.simulate import SimulateConfig, exact_matrix, load_table, report_for_release, training_matrix
from ltm.transport.certs import write_certs
from ltm.transport.tls import check_certificates, make_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc

DEMO_JOB_ID = "demo"
#: Where the demo's column centres and scales come from (said in its summary).
SCALES_FROM = ("the training data's means and standard deviations, computed by the demo (a convenience: they "
               "are statistics of the private data and end up in the public job spec; a real job states "
               "public ranges in its job file or estimates them with the DP pre-job `ltm job bounds`)")


def write_party_csv(path: Path, table: dict[str, np.ndarray]) -> None:
    """Exact CSV (repr of float64 round-trips bit for bit)."""
    names = list(table)
    cols = [np.asarray(table[c], dtype=np.float64) for c in names]
    with path.open("w") as fh:
        fh.write(",".join(names) + "\n")
        for row in zip(*(c.tolist() for c in cols)):
            fh.write(",".join(map(repr, row)) + "\n")


def prepare_job(cfg: SimulateConfig, train, randomness: Randomness, endpoints: list[str], data_dir: Path,
                per_party_dirs: bool = False):
    """Build the job spec exactly as ``ltm simulate`` does and write each party's CSV to
    ``data_dir/<party>.csv`` (``per_party_dirs``: ``data_dir/<party>/<party>.csv``, one directory —
    one volume — per party)."""
    spec, choices = build_job(train, job_id=DEMO_JOB_ID, randomness=randomness, partition=cfg.partition,
                              parties=cfg.parties, k=cfg.k, kind=cfg.sketch, m=cfg.m, s=cfg.s,
                              epsilon=cfg.epsilon, delta=cfg.delta, clip_bound=cfg.clip,
                              share_mode=cfg.share_mode, endpoints=endpoints, colluding_servers=cfg.colluding_servers,
                              verified_clipping=cfg.verified_clipping)
    for pid, table in party_tables(spec, train).items():
        where = data_dir / pid if per_party_dirs else data_dir
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".{pid}.csv.tmp"
        write_party_csv(tmp, table)
        tmp.replace(where / f"{pid}.csv")  # parties poll for the file: make it appear whole
    return spec, choices


def party_data_argv(args: argparse.Namespace, data_dir: Path, party_id: str) -> list[str]:
    """The ``--data`` (and ``--query``) a demo party reads: its CSV, or the same rows written as
    Parquet, SQLite or a PostgreSQL table (``--party-format``, ``--party-postgres``)."""
    fmt, dsn = getattr(args, "party_format", "csv"), getattr(args, "party_postgres", None)
    csv_path = data_dir / f"{party_id}.csv"
    if fmt == "csv" and not dsn:
        return ["--data", str(csv_path)]
    from ltm.party.data_source import load_columns

    table = load_columns(csv_path)[0]
    table_name = party_id.replace("-", "_")
    if dsn:
        import psycopg

        cols = ", ".join(f'"{c}" double precision' for c in table)
        with psycopg.connect(dsn) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table_name}"')
            conn.execute(f'CREATE TABLE "{table_name}" ({cols})')
            with conn.cursor().copy(f'COPY "{table_name}" FROM STDIN') as copy:
                for row in zip(*(v.tolist() for v in table.values())):
                    copy.write_row(row)
        return ["--data", dsn, "--query", table_name]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table(table), data_dir / f"{party_id}.parquet")
        return ["--data", str(data_dir / f"{party_id}.parquet")]
    import sqlite3

    path = data_dir / f"{party_id}.sqlite"
    path.unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f'CREATE TABLE "{table_name}" ({", ".join(f"{chr(34)}{c}{chr(34)} REAL" for c in table)})')
        conn.executemany(f'INSERT INTO "{table_name}" VALUES ({", ".join("?" * len(table))})',
                         zip(*(v.tolist() for v in table.values())))
        conn.commit()
    return ["--data", str(path)]


async def _operate(analyst_endpoint: str, certs: Path | None, insecure: bool, spec: JobSpec,
                   start_parties, randomness_label: str, deadline: float,
                   chaos=None) -> tuple[dict, ReleasedSketch, dict]:
    """Submit the job, start the parties, run it; returns the analyst's report, the release
    (fetched over the Analyst service) and the phase times.  ``chaos``: a coroutine function run
    beside the job (it starts the parties it holds back and kills servers)."""
    phases: dict[str, float] = {}
    options = None if insecure else [("grpc.ssl_target_name_override", "analyst")]
    channel = make_channel(analyst_endpoint, certs, "operator", insecure=insecure, options=options)
    try:
        stub = ltm_pb2_grpc.AnalystStub(channel)
        t = time.monotonic()
        try:
            await stub.SubmitJob(ltm_pb2.SubmitJobRequest(spec_json=spec.canonical_json()), timeout=60.0)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE and (exc.details() or "").startswith("failed to connect"):
                raise CommandError(f"cannot reach the analyst at {analyst_endpoint} ({exc.details()}); check that "
                                   f"it is running and the address in --analyst", status=5) from None
            raise CommandError(f"the analyst at {analyst_endpoint} did not accept job {spec.job_id!r}: "
                               f"{exc.code().name}: {exc.details()}", status=5) from None
        phases["publish"] = time.monotonic() - t
        t = time.monotonic()
        start_parties()
        run_task = asyncio.ensure_future(stub.RunJob(ltm_pb2.RunJobRequest(
            job_id=spec.job_id, deadline_s=deadline, randomness=randomness_label), timeout=deadline + 300.0))
        if chaos is None:
            reply = await run_task
        else:
            chaos_task = asyncio.create_task(chaos())
            await asyncio.wait({run_task, chaos_task}, return_when=asyncio.FIRST_EXCEPTION)
            for task, other in ((chaos_task, run_task), (run_task, chaos_task)):
                if task.done() and task.exception() is not None:
                    other.cancel()  # a failed chaos step (e.g. a server lost acknowledged batches) fails the run
                    raise task.exception()
            reply = await run_task
            await asyncio.wait_for(chaos_task, timeout=60.0)
        phases["upload_close_release"] = time.monotonic() - t
        report = json.loads(reply.report_json)
        got = await stub.GetRelease(ltm_pb2.GetReleaseRequest(job_id=spec.job_id), timeout=60.0)
        release = release_from_reply(spec, got, report["participants"])
        return report, release, phases
    finally:
        await channel.close()


def _demo_config(args: argparse.Namespace) -> SimulateConfig:
    """The demo's job parameters, as ``ltm simulate`` takes them (a ridge model)."""
    return SimulateConfig(data=args.data, query=getattr(args, "query", None), label=args.label, partition=args.partition, parties=args.parties,
                          k=args.k, sketch=args.sketch, m=args.m, s=args.s, epsilon=args.epsilon,
                          delta=args.delta, share_mode=args.share_mode, seed=args.seed, model="ridge",
                          colluding_servers=args.colluding_servers,
                          verified_clipping=bool(getattr(args, "verified_clipping", False)))


def _start_demo_actors(args: argparse.Namespace, group: ProcessGroup, workdir: Path, certs: Path | None,
                       phases: dict[str, float]) -> tuple[list[ActorProcess], ActorProcess]:
    """Every actor's certificate (unless ``--insecure``), then the k servers and the analyst (both phases timed)."""
    t = time.monotonic()
    if certs is not None:
        actors = [f"server-{i}" for i in range(args.k)] + [f"party-{i}" for i in range(args.parties)]
        write_certs(certs, actors + ["analyst", "operator"], force=True)
    phases["certificates"] = time.monotonic() - t

    t = time.monotonic()
    servers = group.start_servers(args.k)
    analyst = group.start_service("analyst", "analyst", ["analyst", "--out", str(workdir / "analyst-out")])
    phases["start_services"] = time.monotonic() - t
    return servers, analyst


class _DemoParties:
    """Starts the demo's party processes (all at once, or as ``--chaos`` chooses) and collects
    their exits and summary files."""

    def __init__(self, args: argparse.Namespace, cfg: SimulateConfig, group: ProcessGroup, spec: JobSpec,
                 servers: list[ActorProcess], data_dir: Path) -> None:
        self.args, self.cfg, self.group, self.spec, self.data_dir = args, cfg, group, spec, data_dir
        self.server_endpoints = ",".join(s.endpoint for s in servers)
        self.parties: list[ActorProcess] = []

    def start_some(self, chosen) -> None:
        """Start a party process for each of ``chosen`` (the job's party specs)."""
        args, cfg, spec, data_dir = self.args, self.cfg, self.spec, self.data_dir
        for p in chosen:
            # No --server-ids: a party pins the server identities the job spec names by default.
            argv = ["party", "--id", p.party_id, "--servers", self.server_endpoints,
                    "--job", spec.job_id, *party_data_argv(args, data_dir, p.party_id),
                    "--max-epsilon", str(cfg.epsilon), "--max-delta", str(max(cfg.delta, 1e-12)),
                    "--summary-file", str(data_dir / f"{p.party_id}.summary.json"), "--no-progress"]
            if args.seed is not None:
                argv += ["--seed", str(args.seed)]
            if spec.colluding_servers is not None:  # these parties accept the job's trust assumption
                argv += ["--min-colluding-servers", str(spec.colluding_servers)]
            self.parties.append(self.group.start_task("party", p.party_id, argv))

    def summaries(self) -> list[dict[str, Any]]:
        """Wait for every party to exit (RuntimeError naming those that failed); their summary files."""
        parties = self.parties
        party_exit = {p.actor: p.proc.wait(timeout=60) for p in parties}
        failed = {k: v for k, v in party_exit.items() if v != 0}
        if failed:
            raise RuntimeError(f"parties failed {failed}:\n" + "\n".join(p.log_tail() for p in parties if p.proc.returncode))
        return [json.loads((self.data_dir / f"{p.party_id}.summary.json").read_text()) for p in self.spec.parties]


def _demo_report(args: argparse.Namespace, spec: JobSpec, choices: Any, train: Any, test: Any,  # noqa: PLR0913 - the demo's JSON fields, one argument each; a report type is the fix
                 processes: list[dict[str, Any]], report: dict, randomness: Randomness,
                 summaries: list[dict[str, Any]], model_report: dict[str, Any], phases: dict[str, float],
                 chaos: Chaos | None, t_start: float) -> dict[str, Any]:
    """The demo's JSON object: the job, its release and privacy, the models, bytes, timings (and chaos)."""
    upload_bytes = [sum(s["bytes_per_server"][i] for s in summaries) for i in range(spec.k)]
    phases["total"] = time.monotonic() - t_start
    return {
        "command": "demo",
        "tls": not args.insecure,
        "data": train.source,
        "n_train": train.n,
        "n_test": test.n if test is not None else 0,
        "processes": processes,
        "servers": spec.k,
        "parties": len(spec.parties),
        "partition": spec.partition,
        "sketch": {"kind": spec.sketch.kind, "m": spec.sketch.m, "s": spec.make_sketch().pieces,
                   "m_rule": choices.m_rule},
        "release_kind": spec.sketch.kind,
        "plan": choices.plan,
        "job_digest": spec.digest,
        "scales_from": SCALES_FROM,
        "release_sha256": report["release_sha256"],
        "participants": report["participants"],
        "held_per_server": report["held_per_server"],
        "coverage": report.get("coverage"),
        "privacy": report["privacy"],
        "randomness": randomness.label,
        "reproduction": spec.reproduction,
        "ledgers": {s["party_id"]: s["ledger"] for s in summaries},
        "analyst_model": report["model"],
        **model_report,
        "bytes": {"party_to_server": upload_bytes, "party_to_server_total": int(sum(upload_bytes)),
                  "server_to_analyst": report["release_bytes_per_server"],
                  "retries": int(sum(s["retries"] for s in summaries))},
        "timing_s": {**{k: round(v, 4) for k, v in phases.items()},
                     "analyst": {k: round(v, 4) for k, v in report["timing_s"].items()}},
        **({"chaos": chaos.report(report.get("server_retries"),
                                  {s["party_id"]: s["retries"] for s in summaries})} if chaos else {}),
    }


def run_demo(args: argparse.Namespace) -> dict[str, Any]:
    """One whole networked job (see the module docstring); returns the demo's report.  Every actor
    is stopped (and a temporary workdir removed) on every way out."""
    t_start = time.monotonic()
    phases: dict[str, float] = {}
    workdir = Path(args.workdir) if args.workdir else make_scratch_dir("ltm-demo-")
    workdir.mkdir(parents=True, exist_ok=True)
    certs = None if args.insecure else workdir / "certs"
    group = ProcessGroup(workdir, certs, insecure=args.insecure)
    try:  # from here on an interrupt (Ctrl-C, or SIGTERM: see run) stops every actor and removes workdir
        randomness = Randomness.seeded_insecure(args.seed) if args.seed is not None else Randomness.system()
        cfg = _demo_config(args)
        train, test = load_table(cfg, randomness)
        servers, analyst = _start_demo_actors(args, group, workdir, certs, phases)

        t = time.monotonic()
        data_dir = workdir / "party-data"
        spec, choices = prepare_job(cfg, train, randomness, [s.endpoint for s in servers], data_dir)
        phases["job_spec_and_party_data"] = time.monotonic() - t

        launcher = _DemoParties(args, cfg, group, spec, servers, data_dir)
        chaos = Chaos(group, servers, spec, certs, args.insecure, launcher.start_some) if args.chaos else None
        report, release, op_phases = asyncio.run(_operate(
            analyst.endpoint, certs, args.insecure, spec,
            (lambda: None) if chaos else (lambda: launcher.start_some(spec.parties)),  # chaos starts the parties itself
            randomness.label, args.deadline, chaos=chaos.run if chaos else None))
        phases.update(op_phases)
        summaries = launcher.summaries()

        t = time.monotonic()
        V = training_matrix(spec, train)
        rng = np.random.default_rng(np.frombuffer(randomness.child("baselines").bytes(16), dtype=np.uint64))
        model_report = report_for_release(cfg, spec, release, V, test, rng, plan=choices.plan,
                                          exact=exact_matrix(spec, train))
        phases["fit_and_baselines"] = time.monotonic() - t
        processes = [{"role": ap.role, "id": ap.actor, "pid": ap.pid,
                      **({"previous_pids": ap.previous_pids} if ap.previous_pids else {})} for ap in group.processes]
    finally:
        t = time.monotonic()
        group.stop_all()
        phases["stop"] = time.monotonic() - t
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return _demo_report(args, spec, choices, train, test, processes, report, randomness, summaries, model_report,
                        phases, chaos, t_start)


def print_summary(r: dict[str, Any]) -> None:
    """The demo's report for a person: every figure labelled, a verdict, what varies and why."""
    from ltm.sim.runtime.summary import byte_lines, model_table, privacy_lines, release_words, variation_note, verdict

    pr, m, b = r["privacy"], r["metrics"], r["baselines"]
    print(f"LTM demo — {r['data']}, {'mutual TLS' if r['tls'] else 'PLAINTEXT (--insecure)'}")
    roles: dict[str, list[str]] = {}
    for p in r["processes"]:
        roles.setdefault(p["role"], []).append(f"{p['id']} (pid {p['pid']})")
    for role, names in roles.items():
        print(f"  {role:8s} {', '.join(names)}")
    print(f"  job: {r['n_train']} training rows, {r['partition']} partition, {release_words(r['sketch'])}, "
          f"{r['participants']} participants; "
          f"{r.get('n_test', 0)} held-out rows for testing")
    if r.get("plan"):
        print(f"  release kind chosen by the planner: {r['plan']['reason']}")
    for line in privacy_lines(pr, str(r["sketch"]["kind"])):
        print(line)
    for party, entry in sorted(r.get("ledgers", {}).items()):
        print(f"  ledger {party}: {describe_admission(entry)}")
    if r.get("scales_from"):
        print(f"  column centres and scales: {r['scales_from']}")
    for line in model_table("LTM (private)", m, b, private_lam=r.get("lambda")):
        print(line)
    kind = (r.get("release") or {}).get("kind") if isinstance(r.get("release"), dict) else None
    print("  " + verdict(m, b, n=int(r["participants"]), epsilon=float(pr["epsilon"]),
                         release_kind=str(kind or r["sketch"]["kind"]), planned=bool(r.get("plan"))))
    print("  " + variation_note(r.get("randomness", ""), seeded=str(r.get("randomness", "")).startswith("seeded")))
    for line in byte_lines(r["bytes"]):
        print(line)
    t = r["timing_s"]
    print("  time: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items() if isinstance(v, float)))
    if "chaos" in r:
        c = r["chaos"]
        print(f"  chaos: {c['server_restarts']} server restart(s) survived")
        for e in c["events"]:
            print(f"    {e['phase']:8s} {e['signal']} {e['server']} (pid {e['pid']}) at {e['at_s']:.2f}s, "
                  f"back as pid {e.get('new_pid')} after {e.get('restart_s', 0):.2f}s; "
                  f"analyst calls retried against it: {e.get('analyst_retries') or 'none'}")
        print(f"    party upload retries: {c['party_retries']}")
    print(f"  release sha256 {r['release_sha256']}")


def run_operate(args: argparse.Namespace) -> int:
    servers = args.servers  # (server id, endpoint) pairs, in order: ltm.cli.options.server_map checked them
    randomness = Randomness.seeded_insecure(args.seed) if args.seed is not None else Randomness.system()
    cfg = SimulateConfig(data=args.data, query=getattr(args, "query", None), label=args.label, partition=args.partition, parties=args.parties,
                         k=len(servers), sketch=args.sketch, m=args.m, s=args.s, epsilon=args.epsilon,
                         delta=args.delta, share_mode=args.share_mode, seed=args.seed, model="ridge",
                         colluding_servers=args.colluding_servers)
    if args.write_job:
        return write_demo_job(args, cfg, randomness, [x[1] for x in servers])
    if not args.analyst:
        raise CommandError("--analyst is required (or --write-job FILE to only write the job and party files)")
    certs = None if args.insecure else Path(args.certs or "")
    if certs is not None:
        check_certificates(certs, "operator")  # before any party file is written
    train, test = load_table(cfg, randomness)
    spec, _ = prepare_job(cfg, train, randomness, [x[1] for x in servers], Path(args.party_data),
                          per_party_dirs=args.per_party_dirs)
    try:
        report, release, phases = asyncio.run(_operate(args.analyst, certs, args.insecure, spec, lambda: None,
                                                       randomness.label, args.deadline))
    except grpc.aio.AioRpcError as exc:  # the analyst refused or could not finish the job (e.g. a server is down)
        raise CommandError(f"job {spec.job_id!r} failed at the analyst {args.analyst}: {exc.code().name}: "
                           f"{exc.details()}", status=5) from None
    rng = np.random.default_rng(np.frombuffer(randomness.child("baselines").bytes(16), dtype=np.uint64))
    out = {"command": "operate", "tls": not args.insecure, "release_sha256": report["release_sha256"],
           "participants": report["participants"], "held_per_server": report["held_per_server"],
           "privacy": report["privacy"], "analyst_model": report["model"],
           **report_for_release(cfg, spec, release, training_matrix(spec, train), test, rng,
                                exact=exact_matrix(spec, train)),
           "timing_s": {**phases, "analyst": report["timing_s"]}}
    print(json.dumps(out, indent=2, allow_nan=False) if args.json else
          f"released {out['release_sha256']} over {out['participants']} clients; R² {out['metrics']['r2']:.4f} "
          f"(non-private {out['baselines']['nonprivate']['r2']:.4f}); {out['privacy']['guarantee']}")
    return 0


def write_demo_job(args: argparse.Namespace, cfg: SimulateConfig, randomness: Randomness, endpoints: list[str]) -> int:
    """The demo's job (the spec ``ltm demo`` builds with the same parameters) as a job file, and
    the party files — for the compose testbed's data-owner stand-in; then the real path runs it
    (``ltm job submit``; parties with ``ltm party``)."""
    from ltm.jobfile import job_file_doc, render_job_file

    train, _ = load_table(cfg, randomness)
    spec, _ = prepare_job(cfg, train, randomness, endpoints, Path(args.party_data), per_party_dirs=args.per_party_dirs)
    out = Path(args.write_job)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_job_file(job_file_doc(spec, deadline_s=args.deadline), header=(
        f"The demo's job on {train.source} (written by `ltm operate --write-job`).\n{SCALES_FROM}" +
        (f"\nSEEDED MODE (--seed {args.seed}): reproducible and NOT private" if args.seed is not None else ""))))
    tmp.replace(out)
    print(f"wrote {out} (job {spec.job_id!r}, digest {spec.digest}) and {len(spec.parties)} party files under "
          f"{args.party_data}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.data and not args.label:
        raise CommandError("--data needs --label")
    with stop_on_termination():  # SIGTERM/SIGHUP clean up like Ctrl-C: no actor or directory left behind
        report = run_demo(args)
    if args.json:
        # strict JSON: a non-finite number is a bug to fix where it arises, never a bare Infinity
        print(json.dumps(report, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o),
                         allow_nan=False))
    else:
        print_summary(report)
    return 0

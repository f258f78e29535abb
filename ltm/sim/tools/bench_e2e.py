"""``ltm bench e2e``: a networked run over real processes on loopback with mTLS, timed and metered.

n synthetic clients (held by a few party processes) → k servers → the analyst, exactly as
``ltm demo`` but on synthetic ridge data of any size.  No process holds the n rows: each party
*generates* its own rows chunk by chunk (``--data party-i.synth.json``, a
:class:`ltm.party.data_source.SyntheticRidgeSource`; the same model as ``ltm.datasets.synthetic.synthetic_ridge``),
the job's public column scales come from the generator's model, and the fit is checked against the
model's true coefficients and a small held-out test set generated separately.

Reports wall time, time per phase, each process's peak RSS (``VmHWM``: servers and analyst read
from /proc just before they are stopped, parties report their own) and CPU seconds, each server's
disk bytes after the upload, bytes on the wire and the upload throughput, and names the
bottleneck.  Numbers, not asserts.  ``--n 1e6,1e7`` runs a series; ``--plot PNG`` draws wall time
and peak RSS against n (matplotlib, optional; ``--from-json`` plots saved runs without running).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ltm.datasets.tables import ModelTable
from ltm.errors import CommandError
from ltm.jobconfig import parse_count, parse_counts  # noqa: F401  (the flag's type, re-exported)
from ltm.jobspec import JobSpec, warm_validation_in_background
from ltm.party.data_source import SyntheticRidge
from ltm.progress import bar_enabled, progress_bar
from ltm.randomness import Randomness
from ltm.sim.localnet.demo import _operate
from ltm.sim.localnet.launcher import ActorProcess, ProcessGroup, cpu_seconds, stop_on_termination
from ltm.sim.localnet.workdir import make_scratch_dir
from ltm.sim.runtime.jobs import build_job
from ltm.transport.certs import write_certs
from ltm.verified_clipping import proof_shape

#: Held-out rows generated (separately from the parties' rows) to report the fit's test R².
TEST_ROWS = 100_000


def default_parties(n: int) -> int:
    """Party processes for n clients: 4 up to 10⁷, then one per 6.25 M clients (16 at 10⁸), at most 64."""
    return 4 if n <= 10_000_000 else min(64, max(4, round(n / 6_250_000)))


# ------------------------------------------------------------------ process metrics
def peak_rss_bytes(ap: ActorProcess) -> int | None:
    """Peak resident set size of a live process (Linux /proc), in bytes."""
    try:
        for line in Path(f"/proc/{ap.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def disk_bytes(path: Path) -> int:
    """Sum of the sizes of the regular files under ``path`` (``du --apparent-size -b``)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            total += st.st_size
    return total


def server_wire_bytes(group: ProcessGroup, ap: ActorProcess, job_id: str) -> dict[str, int]:
    """A server's gRPC-layer byte counts, from its Status RPC."""
    from ltm.transport.tls import make_sync_channel
    from ltm.v1 import ltm_pb2, ltm_pb2_grpc

    channel = make_sync_channel(ap.endpoint, group.certs, "operator",
                                options=[("grpc.ssl_target_name_override", ap.actor)])
    try:
        st = ltm_pb2_grpc.ServerStub(channel).Status(ltm_pb2.StatusRequest(job_id=job_id), timeout=10)
        return {"server": ap.actor, "received": int(st.bytes_received), "sent": int(st.bytes_sent),
                "store_s": st.store_seconds, "release_s": st.release_seconds}
    finally:
        channel.close()


# ------------------------------------------------------------------ bounded party start
def default_max_running_parties() -> int:
    """Party processes the bench runs at once by default: two per core (one computes while the
    other starts up or waits on the network)."""
    return 2 * (os.cpu_count() or 1)


class PartyFeeder:
    """Starts party processes with at most ``limit`` running at once: the first ``limit`` at once,
    then the next each time one exits (a background thread polls every 20 ms).  Every party of
    the job still runs and uploads; the analyst waits for all of them (its deadline), and in an
    aggregated job a party's upload is one message, so running them in waves changes no figure
    but the wall time, and keeps 64 parties from holding 64 interpreters' memory at once."""

    def __init__(self, start_one, argvs: list[tuple[str, list[str]]], limit: int) -> None:
        self._start_one, self._pending = start_one, list(argvs)
        self.limit = limit if limit > 0 else len(argvs)
        self.started: list[ActorProcess] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, actor: str, argv: list[str]) -> None:
        """Queue a party (started by :meth:`start`, or as soon as a slot frees after it)."""
        self._pending.append((actor, argv))

    def _running(self) -> int:
        return sum(1 for ap in self.started if ap.proc.poll() is None)

    def _fill(self) -> None:
        while self._pending and self._running() < self.limit and not self._stop.is_set():
            actor, argv = self._pending.pop(0)
            self.started.append(self._start_one(actor, argv))

    def start(self) -> None:
        self._fill()
        if not self._pending:
            return

        def loop() -> None:
            while self._pending and not self._stop.wait(0.02):
                self._fill()

        self._thread = threading.Thread(target=loop, name="bench-party-feeder", daemon=True)
        self._thread.start()

    def stop(self) -> list[str]:
        """Stop starting parties; returns the ids of those never started."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return [actor for actor, _ in self._pending]


# ------------------------------------------------------------------ progress on stderr
class PhaseDisplay:
    """Phase lines on stderr with the elapsed time; during the upload, on a terminal a progress bar of
    the bytes the servers have received (:mod:`ltm.progress`), elsewhere (a log) a line every ``every`` s
    with the parties still running and those bytes (of about the expected)."""

    def __init__(self, enabled: bool, n: int, every: float = 10.0) -> None:
        self.enabled, self.n, self.every = enabled, n, every
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        if self.enabled:
            print(f"[bench e2e n={self.n:.3g} {time.monotonic() - self.t0:7.1f} s] {text}", file=sys.stderr, flush=True)

    def watch_upload(self, poll: Callable[[], tuple[int, int, str, str]]) -> None:
        """Until :meth:`stop`, follow ``poll()`` — (bytes received, bytes expected, a short state, a
        line for a log) — on a progress bar (a terminal), else as a line every ``every`` seconds."""
        if not self.enabled:
            return
        bar = progress_bar(None, "upload", unit="B") if bar_enabled() else None

        def loop() -> None:
            while not self._stop.wait(0.5 if bar is not None else self.every):
                try:
                    received, expected, state, line = poll()
                except Exception as exc:  # a progress line must never break the run
                    self.say(f"upload: (progress unavailable: {type(exc).__name__})")
                    continue
                if bar is None:
                    self.say(line)
                    continue
                bar.set_total(max(expected, received))
                bar.describe(state)
                bar.update(received - bar.n)
            if bar is not None:
                bar.close()

        self._thread = threading.Thread(target=loop, name="bench-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# ------------------------------------------------------------------ one run
def _fit_quality(release, model: SyntheticRidge) -> dict[str, Any]:
    """The private ridge fit against the generator's truth: relative coefficient error and the R²
    on :data:`TEST_ROWS` held-out rows generated separately (``split="test"``)."""
    from ltm.analyst.jobs import fit_model
    from ltm.analyst.metrics import r2

    fit = fit_model(release, "ridge")
    coef = np.array([fit["coef"][f"x{j}"] for j in range(model.d)])
    test = model.rows(0, TEST_ROWS, split="test")
    y_hat = test[:, :model.d] @ coef + fit["intercept"]
    beta = model.coefficients
    return {"test_r2": float(r2(test[:, model.d], y_hat)), "test_rows": TEST_ROWS,
            "coef_rel_error": float(np.linalg.norm(coef - beta) / np.linalg.norm(beta)), "lambda": fit["lambda"]}


def _rss_summary(values: list[int]) -> dict[str, Any]:
    """Peak RSS of one actor kind: max, min, mean over its processes, and how many reported."""
    if not values:
        return {"max": None, "min": None, "mean": None, "processes": 0}
    return {"max": max(values), "min": min(values), "mean": round(sum(values) / len(values)), "processes": len(values)}


def _bottleneck(cpu: dict[str, float], upload_s: float) -> dict[str, Any]:
    """Which role's CPU dominates the upload phase (``cpu``: CPU seconds per role within it), and
    whether the machine's cores were saturated over its ``upload_s`` seconds (parties' start to release)."""
    cores = os.cpu_count() or 1
    busy = sum(cpu.values())
    util = busy / (cores * upload_s) if upload_s > 0 else 0.0
    top = max(cpu, key=cpu.get) if cpu else None
    verdict = (f"CPU-bound ({util:.0%} of {cores} cores over the run's upload phase); the largest share is the "
               f"{top}' CPU ({cpu[top] / busy:.0%})" if util >= 0.8 and top else
               f"not CPU-bound ({util:.0%} of {cores} cores): waiting on I/O (fsync), the network stack or "
               f"between phases; the largest CPU share is the {top}'")
    return {"cpu_s_by_role": {k: round(v, 2) for k, v in cpu.items()}, "cores": cores,
            "cpu_utilisation_upload_phase": round(util, 3), "verdict": verdict}


@dataclass
class _Cluster:
    """One run's running actors: the process group, its directories, the servers and the analyst."""

    group: ProcessGroup
    workdir: Path
    certs: Path
    servers: list[ActorProcess]
    analyst: ActorProcess


def _witness_width(spec: JobSpec) -> int:
    """Σ_p T_b: the witness values per client of a job with verified clipping (0 without)."""
    if not spec.verified_clipping:
        return 0
    return sum(proof_shape(len(spec.party_column_indices(p)), spec.frac_bits, p.clip_bound).witness_width
               for p in spec.parties)


class _PartyLaunch:
    """The parties of one run: started (through a :class:`PartyFeeder`) when the analyst has
    published the job, with the servers' and analyst's CPU noted at that moment; :meth:`poll` is
    the upload's progress line."""

    def __init__(self, args: argparse.Namespace, cluster: _Cluster, spec: JobSpec, data: Path, n: int,
                 show: PhaseDisplay) -> None:
        self.args, self.cluster, self.spec, self.data, self.n, self.show = args, cluster, spec, data, n, show
        limit = getattr(args, "max_running_parties", None)
        limit = default_max_running_parties() if limit is None else limit
        self.feeder = PartyFeeder(lambda actor, argv: cluster.group.start_task("party", actor, argv), [], limit)
        self.parties = self.feeder.started
        self.endpoints = ",".join(s.endpoint for s in cluster.servers)
        self.started_unix: list[float] = []
        self.pieces = spec.make_sketch().pieces
        # the primary shares (the other servers get 32-byte seeds): per client and piece, or one (m, W) per party
        self.expected = (len(spec.parties) * spec.sketch.m * spec.upload_width * 8 if spec.aggregated
                         else 2 * n * (spec.width + _witness_width(spec)) * 8 if spec.replicated  # to 2 servers
                         else n * self.pieces * spec.upload_width * 8)
        self.cpu_at_start: dict[str, float | None] = {}

    def start_parties(self) -> None:
        """The analyst's callback once the job is published: queue every party, start the first ones."""
        spec, servers, feeder = self.spec, self.cluster.servers, self.feeder
        self.started_unix.append(time.time())
        self.cpu_at_start.update({ap.actor: cpu_seconds(ap.pid) for ap in servers + [self.cluster.analyst]})
        self.show.say(f"job published; {len(spec.parties)} parties generating and uploading {self.n:,} clients"
                      + (f" (at most {feeder.limit} running at once)" if feeder.limit < len(spec.parties) else ""))
        for p in spec.parties:
            argv = ["party", "--id", p.party_id, "--servers", self.endpoints, "--server-ids",
                    ",".join(s.actor for s in servers), "--job", spec.job_id,
                    "--data", str(self.data / f"{p.party_id}.synth.json"), "--seed", str(self.args.seed),
                    "--no-progress", "--summary-file", str(self.data / f"{p.party_id}.summary.json")]
            if spec.colluding_servers is not None:  # these parties accept the job's trust assumption
                argv += ["--min-colluding-servers", str(spec.colluding_servers)]
            if getattr(self.args, "batch_clients", None):
                argv += ["--batch-clients", str(self.args.batch_clients)]
            feeder.add(p.party_id, argv)
        feeder.start()
        self.show.watch_upload(self.poll)

    def poll(self) -> tuple[int, int, str, str]:
        """The upload's progress: bytes the servers received, those expected, the parties running and
        started (short), and all of it as a line for a log."""
        spec, parties, expected = self.spec, self.parties, self.expected
        received = sum(server_wire_bytes(self.cluster.group, s, spec.job_id)["received"] for s in self.cluster.servers)
        running = sum(1 for p in parties if p.proc.poll() is None)
        state = f"{running} parties running, {len(parties)}/{len(spec.parties)} started"
        return (received, expected, state,
                upload_progress(running, len(parties), len(spec.parties), received, expected))


def upload_progress(running: int, started: int, parties: int, received: int, expected: int) -> str:
    """The bench's upload progress line, each byte count in its own unit (``8.96 MB of ≈ 17.92 MB``)."""
    from ltm.transport.metering import human_bytes

    share = f" ({min(received / expected, 1):.0%})" if expected > 0 else ""
    return (f"upload: {running} parties running, {started}/{parties} started; servers received "
            f"{human_bytes(received)} of ≈ {human_bytes(expected)}{share}")


@dataclass
class _Measured:
    """What one run measured after the release: per process and per server, and the fit's quality."""

    summaries: list[dict[str, Any]]  # the parties' own summary files
    wire: list[dict[str, int]]
    rss: dict[str, int | None]
    cpu: dict[str, float | None]
    disk: dict[str, int]
    upload_cpu: dict[str, float | None]
    cpu_window_s: float
    quality: dict[str, Any]


def _start_cluster(args: argparse.Namespace, group: ProcessGroup, workdir: Path, certs: Path, parties_n: int,
                   show: PhaseDisplay, phases: dict[str, float]) -> _Cluster:
    """Write every actor's certificate and start the k servers and the analyst (both phases timed)."""
    show.say(f"certificates for {args.k} servers, {parties_n} parties")
    t = time.monotonic()
    write_certs(certs, [f"server-{i}" for i in range(args.k)] + [f"party-{i}" for i in range(parties_n)]
                + ["analyst", "operator"], force=True)
    phases["data_and_certs"] = time.monotonic() - t
    show.say("starting servers and the analyst")
    t = time.monotonic()
    limit = getattr(args, "max_batch_bytes", None)  # a verified job's witness part at 10^6 exceeds the default
    servers = group.start_servers(args.k, ["--max-batch-bytes", str(limit)] if limit else [])
    analyst = group.start_service("analyst", "analyst", ["analyst", "--out", str(workdir / "out")])
    phases["start_services"] = time.monotonic() - t
    return _Cluster(group, workdir, certs, servers, analyst)


def _job_and_party_data(args: argparse.Namespace, table: ModelTable, model: SyntheticRidge, randomness: Randomness,  # noqa: PLR0913 - one bench run's state (h30b added verified); a run config object is the fix
                        cluster: _Cluster, parties_n: int, upload_mode: str | None,
                        phases: dict[str, float], verified: bool | None = None) -> tuple[JobSpec, Any, Path]:
    """The job spec, the planner's choices and the folder of per-party data descriptors (each
    party generates its own rows [start, stop) from one).  ``verified`` (not None): the replicated
    release (kind gram) with or without verified clipping, for the proof's cost."""
    t = time.monotonic()
    kind = getattr(args, "kind", "sparse")
    if verified is not None and kind == "auto":
        kind = "gram"  # both runs of the comparison are the replicated release
    spec, choices = build_job(table, job_id="e2e", randomness=randomness, parties=parties_n, k=args.k,
                              m=getattr(args, "m", None), s=args.s, kind=kind, verified_clipping=bool(verified),
                              endpoints=[s.endpoint for s in cluster.servers],
                              corrupt_parties=getattr(args, "corrupt_parties", None),
                              upload_mode=upload_mode or getattr(args, "upload_mode", "auto"),
                              partition=getattr(args, "partition", "rows"),
                              colluding_servers=getattr(args, "colluding_servers", None))
    data = cluster.workdir / "party-data"
    data.mkdir(parents=True, exist_ok=True)
    for p in spec.parties:  # a descriptor per party: it generates rows [start, stop) itself
        (data / f"{p.party_id}.synth.json").write_text(json.dumps(
            {"generator": "ridge", "d": model.d, "seed": model.seed, "noise": model.noise,
             "offset": p.start, "n": p.size}))
    phases["job_spec_and_party_data"] = time.monotonic() - t
    return spec, choices, data


def _run_job(args: argparse.Namespace, cluster: _Cluster, launch: _PartyLaunch, randomness: Randomness, n: int,
             show: PhaseDisplay) -> tuple[dict, Any, dict]:
    """Submit the job, start the parties on publication and wait for the release; returns the
    analyst's report, the release and the operator's phase times."""
    deadline = args.deadline if getattr(args, "deadline", None) else 600.0 + 2e-5 * n
    try:
        report, release, op = asyncio.run(_operate(cluster.analyst.endpoint, cluster.certs, False, launch.spec,
                                                   launch.start_parties, randomness.label, deadline))
    finally:
        show.stop()
        never = launch.feeder.stop()
    if never:
        raise RuntimeError(f"the analyst released before parties {never} were started")
    return report, release, op


def _collect(cluster: _Cluster, launch: _PartyLaunch, data: Path, release: Any, model: SyntheticRidge,
             phases: dict[str, float]) -> _Measured:
    """After the release, while the actors still run: the parties' exits and summaries, each
    service's CPU, peak RSS, disk and wire bytes, and the fit's quality (timed as ``fit_check``)."""
    servers, analyst, parties, spec = cluster.servers, cluster.analyst, launch.parties, launch.spec
    exits = [p.proc.wait(timeout=120) for p in parties]
    if any(exits):
        raise RuntimeError("a party failed:\n" + "\n".join(p.log_tail() for p in parties if p.proc.returncode))
    # the servers' and analyst's CPU from the parties' start to now (upload, close, release)
    upload_cpu = {ap.actor: (cpu_seconds(ap.pid) or 0.0) - (launch.cpu_at_start.get(ap.actor) or 0.0)
                  for ap in servers + [analyst]}
    cpu_window_s = time.time() - launch.started_unix[0]
    rss: dict[str, int | None] = {}
    cpu: dict[str, float | None] = {}
    disk: dict[str, int] = {}
    for ap in servers + [analyst]:
        rss[ap.actor] = peak_rss_bytes(ap)
        cpu[ap.actor] = cpu_seconds(ap.pid)
    for ap in servers:
        disk[ap.actor] = disk_bytes(cluster.workdir / ap.actor)
    wire = [server_wire_bytes(cluster.group, ap, spec.job_id) for ap in servers]
    summaries = [json.loads((data / f"{p.party_id}.summary.json").read_text()) for p in spec.parties]
    t = time.monotonic()
    try:
        quality = _fit_quality(release, model)
    except Exception as exc:  # the numbers above stand on their own
        quality = {"error": f"{type(exc).__name__}: {exc}"}
    phases["fit_check"] = time.monotonic() - t
    return _Measured(summaries, wire, rss, cpu, disk, upload_cpu, cpu_window_s, quality)


def _by_role(prefix: str, values: dict[str, Any]) -> list:
    """The values of the actors whose id starts with ``prefix`` (``party-``, ``server-``, ``analyst``),
    Nones dropped."""
    return [v for k, v in values.items() if k.startswith(prefix) and v is not None]


def _phases_per_actor(summaries: list[dict[str, Any]], wire: list[dict[str, int]], report: dict) -> dict[str, Any]:
    """Seconds per phase of each party (their summaries), each server (its meter) and the analyst's fit."""
    return {
        "read (parties: generate the synthetic rows)": [round(s.get("read_s", 0.0), 4) for s in summaries],
        "noise (parties)": [round(s["noise_s"], 4) for s in summaries],
        "map (parties, aggregate: build, round, apply the map)": [round(s.get("map_s", 0.0), 4) for s in summaries],
        "sharing (parties)": [round(s["sharing_s"], 4) for s in summaries],
        "upload (parties, streaming to k servers)": [round(s["upload_s"], 4) for s in summaries],
        "store (servers, validate + durable write)": [round(w["store_s"], 4) for w in wire],
        "release (servers, gate + result share)": [round(w["release_s"], 4) for w in wire],
        "fit (analyst)": round(report["timing_s"].get("fit", 0.0), 4),
    }


def _e2e_report(args: argparse.Namespace, n: int, parties_n: int, t_start: float, phases: dict[str, float],  # noqa: PLR0913 - the bench's JSON fields, one argument each; a report type is the fix
                spec: JobSpec, choices: Any, table: ModelTable, release: Any, report: dict, launch: _PartyLaunch,
                m: _Measured) -> dict[str, Any]:
    """The run's JSON object (the parties' own figures merged in): sizes, times, bytes, memory, CPU, the fit."""
    summaries, wire, rss, cpu, upload_cpu, pieces = m.summaries, m.wire, m.rss, m.cpu, m.upload_cpu, launch.pieces
    for s in summaries:
        rss[s["party_id"]] = s.get("peak_rss_bytes")
        cpu[s["party_id"]] = s.get("cpu_s")
        upload_cpu[s["party_id"]] = s.get("upload_cpu_s")
    harness_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    upload_s = max(s["finished_unix"] for s in summaries) - min(s["started_unix"] for s in summaries)
    parties_s = max(s["finished_unix"] for s in summaries) - launch.started_unix[0]
    received = sum(w["received"] for w in wire)
    cpu_roles = {"parties": sum(_by_role("party-", upload_cpu)), "servers": sum(_by_role("server-", upload_cpu)),
                 "analyst": sum(_by_role("analyst", upload_cpu))}
    return {
        "benchmark": "e2e", "n": n, "d": args.d, "kind": spec.sketch.kind, "m": spec.sketch.m,
        "partition": spec.partition, "replicated": spec.replicated, "verified_clipping": spec.verified_clipping,
        "colluding_servers": spec.tolerated_colluding_servers,
        "upload_mode": spec.upload_mode, "planner": choices.m_rule,
        "bytes_per_party": [sum(s["bytes_per_server"]) for s in summaries],
        "s": pieces, "k": args.k, "client_vector_width": spec.width,
        "upload_values_per_client": pieces * spec.upload_width,
        "parties": parties_n, "tls": True, "data": table.source, "release_sha256": release.sha256,
        "participants": report["participants"], "wall_s": time.monotonic() - t_start,
        "phases_s": phases, "analyst_phases_s": report["timing_s"],
        "party_upload_s": [s["seconds"] for s in summaries],
        "upload_phase_s": upload_s,
        "upload_phase_note": "first party's upload start to last party's end (party summaries' started/finished_unix); "
                             "parties_start_to_done_s adds the party processes' start-up",
        "parties_start_to_done_s": parties_s,
        "phases_per_actor_s": _phases_per_actor(summaries, wire, report),
        "bytes_party_to_server": [sum(s["bytes_per_server"][i] for s in summaries) for i in range(args.k)],
        "bytes_server_to_analyst": report["release_bytes_per_server"],
        "wire_bytes_per_server": wire,
        "wire_bytes_total": int(sum(w["received"] + w["sent"] for w in wire)),
        "wire_bytes_note": "gRPC payload bytes counted by each server's ByteMeter interceptor (all RPCs)",
        "upload_throughput_bytes_per_s": received / upload_s if upload_s > 0 else None,
        "upload_throughput_note": "bytes the servers received (gRPC payload) / upload_phase_s",
        "disk_bytes_per_server": m.disk,
        "disk_bytes_note": "sum of file sizes under each server's --data-dir after the release (du --apparent-size)",
        "peak_rss_bytes": rss,
        "peak_rss_max_bytes": {"server": max(_by_role("server-", rss), default=None),
                               "analyst": rss.get("analyst"), "party": max(_by_role("party-", rss), default=None),
                               "harness": harness_rss},
        "peak_rss_by_kind": {kind: _rss_summary(_by_role(prefix, rss))
                             for kind, prefix in (("server", "server-"), ("analyst", "analyst"), ("party", "party-"))},
        "peak_rss_note": "VmHWM of each process (servers and analyst read from /proc before they stop, parties "
                         "report their own); harness: this bench process (it builds and validates the job spec), "
                         "ru_maxrss over its lifetime so far",
        "max_running_parties": launch.feeder.limit,
        "cpu_s": {k: (round(v, 3) if v is not None else None) for k, v in cpu.items()},
        "cpu_s_upload_phase": {k: (round(v, 3) if v is not None else None) for k, v in upload_cpu.items()},
        "cpu_note": "cpu_s: each process's lifetime user+system CPU; cpu_s_upload_phase: parties during their "
                    "upload (generate, randomize, share, send), servers and analyst from the parties' start to "
                    "the release",
        "bottleneck": _bottleneck(cpu_roles, m.cpu_window_s),
        "fit": m.quality,
    }


def run_e2e(args: argparse.Namespace, n: int | None = None, upload_mode: str | None = None,
            verified: bool | None = None) -> dict[str, Any]:
    """One networked run of ``n`` clients (default: the first of ``--n``) with ``upload_mode`` (default
    ``--upload-mode``): certificates, servers and analyst, the job, the parties, the release, the
    metrics; every actor is stopped (and a temporary workdir removed) on every way out.  ``verified``
    (not None): the replicated release with or without verified clipping (issue #30)."""
    n = n if n is not None else (args.n[0] if isinstance(args.n, list) else args.n)
    parties_n = args.parties or default_parties(n)
    show = PhaseDisplay(not getattr(args, "quiet", False), n)
    t_start = time.monotonic()
    phases: dict[str, float] = {}
    workdir = Path(args.workdir) if args.workdir else make_scratch_dir("ltm-e2e-")
    workdir.mkdir(parents=True, exist_ok=True)
    certs = workdir / "certs"
    group = ProcessGroup(workdir, certs)
    try:  # from here on an interrupt (Ctrl-C, or SIGTERM: see run) stops every actor and removes workdir
        warm_validation_in_background()  # the accountant's import overlaps the certificates and start-up
        randomness = Randomness.seeded_insecure(args.seed)
        model = SyntheticRidge(args.d, seed=args.seed)
        table = ModelTable.synthetic_ridge(n, model)
        cluster = _start_cluster(args, group, workdir, certs, parties_n, show, phases)
        spec, choices, data = _job_and_party_data(args, table, model, randomness, cluster, parties_n, upload_mode,
                                                  phases, verified)
        launch = _PartyLaunch(args, cluster, spec, data, n, show)
        report, release, op = _run_job(args, cluster, launch, randomness, n, show)
        phases.update(op)
        show.say("released; collecting metrics")
        measured = _collect(cluster, launch, data, release, model, phases)
    finally:
        show.say("stopping")
        group.stop_all()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    out = _e2e_report(args, n, parties_n, t_start, phases, spec, choices, table, release, report, launch, measured)
    show.say(f"done: wall {out['wall_s']:.1f} s")
    return out


# ------------------------------------------------------------------ series and plot
def plot_series(runs: list[dict[str, Any]], path: str | Path) -> None:
    """Wall time and peak RSS (max server, analyst, max party) against n, log–log, into ``path``."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CommandError("--plot needs matplotlib (pip install 'ltm[plot]'); the JSON was printed") from None
    runs = sorted(runs, key=lambda r: r["n"])
    ns = [r["n"] for r in runs]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    ax_t.plot(ns, [r["wall_s"] for r in runs], "o-", label="wall time, everything")
    if all("upload_phase_s" in r for r in runs):
        ax_t.plot(ns, [r["upload_phase_s"] for r in runs], "s--", label="upload phase")
    ax_t.set(xscale="log", yscale="log", xlabel="clients n", ylabel="seconds", title="time")
    for role, marker in (("server", "o-"), ("analyst", "s-"), ("party", "^-")):
        ys = [(r.get("peak_rss_max_bytes") or {}).get(role) for r in runs]
        if role != "party" and not any(ys):  # older outputs: servers and analyst under peak_rss_bytes
            ys = [max((v for k, v in r["peak_rss_bytes"].items() if k.startswith(role) and v), default=None)
                  for r in runs]
        pts = [(x, y / 2**20) for x, y in zip(ns, ys) if y]
        if pts:
            ax_m.plot(*zip(*pts), marker, label=f"{role} (max)")
    ax_m.set(xscale="log", xlabel="clients n", ylabel="peak RSS (MiB)", title="peak memory (VmHWM)")
    ax_m.set_ylim(bottom=0)
    for ax in (ax_t, ax_m):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"ltm bench e2e (d={runs[0]['d']}, m={runs[0]['m']}, s={runs[0]['s']}, k={runs[0]['k']})")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _runs_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["runs"]) if obj.get("benchmark") in ("e2e-series", "e2e-modes", "e2e-verified") else [obj]


def _side_by_side(per_client: dict[str, Any], aggregate: dict[str, Any]) -> dict[str, Any]:
    """The figures of one n in both upload modes, next to each other."""
    keys = ("wall_s", "upload_phase_s", "wire_bytes_total", "peak_rss_max_bytes", "fit")
    return {"n": per_client["n"], "kind": per_client["kind"],
            **{k: {"per-client": per_client.get(k), "aggregate": aggregate.get(k)} for k in keys},
            "bytes_per_party_max": {"per-client": max(per_client["bytes_per_party"]),
                                    "aggregate": max(aggregate["bytes_per_party"])},
            "cpu_s_total": {mode: round(sum(v for v in r["cpu_s"].values() if v is not None), 3)
                            for mode, r in (("per-client", per_client), ("aggregate", aggregate))}}


def proof_cost(plain: dict[str, Any], verified: dict[str, Any]) -> dict[str, Any]:
    """What verified clipping cost at one n: the verified run's figures against the unverified
    replicated run's, measured in the same session (bytes per party, party and server CPU, wall)."""
    def parties_cpu(r):
        return round(sum(v for k, v in r["cpu_s_upload_phase"].items() if k.startswith("party-") and v), 3)

    def servers_cpu(r):
        return round(sum(v for k, v in r["cpu_s_upload_phase"].items() if k.startswith("server-") and v), 3)

    figures = {
        "bytes_per_party": (plain["bytes_per_party"], verified["bytes_per_party"]),
        "party_cpu_s": (parties_cpu(plain), parties_cpu(verified)),
        "server_cpu_s": (servers_cpu(plain), servers_cpu(verified)),
        "wall_s": (round(plain["wall_s"], 3), round(verified["wall_s"], 3)),
        "upload_phase_s": (round(plain["upload_phase_s"], 3), round(verified["upload_phase_s"], 3)),
    }
    out: dict[str, Any] = {"n": plain["n"], "note": "unverified vs verified replicated release, same session; "
                           "CPU: user+system seconds of all parties / all servers from the parties' start to the "
                           "release (cpu_s_upload_phase)"}
    for key, (a, b) in figures.items():
        out[key] = {"unverified": a, "verified": b}
        if not isinstance(a, list):
            out[key]["ratio"] = round(b / a, 3) if a else None
    out["bytes_per_party"]["ratio_max"] = round(max(verified["bytes_per_party"]) / max(plain["bytes_per_party"]), 3)
    out["analyst_verify_clipping_s"] = verified["analyst_phases_s"].get("verify_clipping")
    return out


def _verified_mode(args: argparse.Namespace) -> str:
    """``--verified-clipping``: off, on or both (the default for a replicated job: the proof's cost)."""
    mode = getattr(args, "verified_clipping", None)
    replicated = getattr(args, "partition", "rows") == "columns" and getattr(args, "colluding_servers", None) == 1 \
        and getattr(args, "kind", "auto") in ("auto", "gram")
    if mode is None:
        return "both" if replicated else "off"
    if mode != "off" and not replicated:
        raise CommandError("--verified-clipping needs --partition columns --colluding-servers 1")
    return mode


def run(args: argparse.Namespace) -> int:
    if args.from_json:
        if not args.plot:
            raise CommandError("--from-json needs --plot")
        runs = [r for f in args.from_json for r in _runs_of(json.loads(Path(f).read_text()))]
        plot_series(runs, args.plot)
        print(json.dumps({"benchmark": "e2e-series", "plot": args.plot, "runs": runs}, indent=2))
        return 0
    ns = args.n if isinstance(args.n, list) else [args.n]
    if args.workdir and len(ns) > 1:
        raise CommandError("--workdir with a series would reuse one directory; run one n at a time")
    with stop_on_termination():  # SIGTERM/SIGHUP clean up like Ctrl-C: no actor or directory left behind
        verified = _verified_mode(args)
        if verified == "both":  # the unverified and the verified replicated release, per n (issue #30)
            runs = [run_e2e(args, n, verified=v) for n in ns for v in (False, True)]
            out: dict[str, Any] = {"benchmark": "e2e-verified", "runs": runs,
                                   "proof_cost": [proof_cost(runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]}
        elif verified == "on":
            runs = [run_e2e(args, n, verified=True) for n in ns]
            out = runs[0] if len(runs) == 1 else {"benchmark": "e2e-series", "runs": runs}
        elif getattr(args, "upload_mode", "auto") == "both":  # the two modes side by side, per n
            runs = [run_e2e(args, n, mode) for n in ns for mode in ("per-client", "aggregate")]
            out = {"benchmark": "e2e-modes", "runs": runs,
                   "side_by_side": [_side_by_side(runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]}
        else:
            runs = [run_e2e(args, n) for n in ns]
            out = runs[0] if len(runs) == 1 else {"benchmark": "e2e-series", "runs": runs}
    if args.plot:
        plot_series(runs, args.plot)
        out = {**out, "plot": args.plot}
    print(json.dumps(out, indent=2))
    return 0

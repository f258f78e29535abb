"""``ltm loadtest``: many concurrent party streams against k real ``ltm server`` processes (mTLS, loopback).

One job with P parties of a few clients each.  Every party has its own certificate (a server
authorises an upload only from the certificate whose identity is the party id), its own k mTLS
channels, and uploads its one batch to the k servers concurrently with the real uploader
(``ltm.party.uploader.upload_batch``: chunked client-streaming, retries with backoff).  Phases:

1. certificates: a CA and one EC P-256 leaf per actor (cached in ``--certs-cache`` if given);
2. k ``ltm server`` processes on 127.0.0.1 (``ltm.sim.localnet.launcher.ProcessGroup``), the job published;
3. every party randomizes and shares its rows (the party core) and opens its k channels — all
   parties at once, so all P·k TLS handshakes are concurrent (``connect`` latency);
4. **upload**: all P streams start together; a stream's latency is the time until all k servers
   have acknowledged (durably stored) its batch; throughput = batches (and payload bytes) / wall;
5. checks: every server holds all n clients (``Status.clients_held == n``), the P·k receipts are
   distinct and name the right party and batch;
6. **duplicate**: every party uploads its identical batch again: each server must return the
   identical receipt and hold exactly what it held before (idempotency, nothing double-counted);
7. the analyst closes intake, intersects the participant sets, requests the k result shares and
   reconstructs; the result must equal S·(X + G) computed in the clear from the shares the parties
   actually sent (bit for bit), and the privacy report must verify.

Bounded: everything binds 127.0.0.1 only, the whole run has a deadline (``--deadline``), and every
process started is stopped at the end (also on failure, and on SIGTERM or SIGHUP, which end the run
like Ctrl-C: ``ltm.sim.localnet.launcher.stop_on_termination``).  Driver processes (``--drivers``) split
the parties when one asyncio process cannot keep up; the default is one.

Prints one JSON object (``run_loadtest`` returns it): timings per phase, p50/p99/max latencies,
batches/s and MB/s for the upload and the duplicate rounds, server CPU seconds, and the checks.
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import resource
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ltm.client_set import ClientSet
from ltm.jobspec import (
    ColumnSpec,
    JobSpec,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    resolve_defaults,
    validate_job,
)
from ltm.randomness import Randomness
from ltm.sharing import reconstruct

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class LoadConfig:
    parties: int = 1000
    clients_per_party: int = 4
    width: int = 4
    m: int = 16
    s: int = 1
    k: int = 3
    share_mode: str = "seed"
    drivers: int = 1
    duplicate: bool = True
    deadline_s: float = 600.0
    workdir: str | None = None      # default: a temporary directory, removed afterwards
    certs_cache: str | None = None  # a directory to reuse certificates from (created if missing)
    seed: str | None = None         # None: production randomness for the parties


# ------------------------------------------------------------------------------------ certificates
def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def ensure_certs(directory: Path, actors: list[str]) -> dict[str, Any]:
    """A CA and a leaf per actor in ``directory``; reuses what is there if it covers every actor.

    Like ``ltm.transport.certs.write_certs`` (same CA and leaf builders) but without an fsync per file:
    a throwaway test CA, 2·(P + k + 2) files.  Returns how many leaves were made and how long it took.
    """
    from ltm.transport.certs import CA_CERT_FILE, CA_KEY_FILE, create_ca, issue_leaf

    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ca_pem, ca_key_pem = directory / CA_CERT_FILE, directory / CA_KEY_FILE
    missing = [a for a in actors if not (directory / f"{a}.pem").exists() or not (directory / f"{a}.key").exists()]
    if ca_pem.exists() and ca_key_pem.exists():
        if not missing:
            return {"leaves_made": 0, "cached": True, "seconds": time.perf_counter() - t0}
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
        ca_key = load_pem_private_key(ca_key_pem.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    else:
        ca_key, ca_cert = create_ca(common_name="LTM loadtest CA")
        missing = list(actors)
        ca_key_pem.write_bytes(_pem_key(ca_key))
        os.chmod(ca_key_pem, 0o600)
        ca_pem.write_bytes(_pem_cert(ca_cert))
    for actor in missing:
        key, cert = issue_leaf(ca_key, ca_cert, actor, [LOOPBACK, "localhost"])
        key_path = directory / f"{actor}.key"
        key_path.write_bytes(_pem_key(key))
        os.chmod(key_path, 0o600)
        (directory / f"{actor}.pem").write_bytes(_pem_cert(cert))
    return {"leaves_made": len(missing), "cached": False, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------ the job
def build_load_job(cfg: LoadConfig, endpoints: list[str]) -> JobSpec:
    c = cfg.clients_per_party
    n = cfg.parties * c
    spec = JobSpec(
        job_id="loadtest", partition="rows", n=n,
        columns=tuple(ColumnSpec(f"x{j}") for j in range(cfg.width)),
        parties=tuple(PartySpec(f"party-{i}", i * c, (i + 1) * c, (), 1.0) for i in range(cfg.parties)),
        clip_bound=1.0, frac_bits=0, sketch=SketchSpec("sparse", min(cfg.m, max(cfg.s, n // 8)), cfg.s, "1d" * 32),
        privacy=PrivacySpec(epsilon=1.0, delta=1e-6, min_participants=n),
        servers=tuple(ServerSpec(f"server-{i}", endpoints[i]) for i in range(cfg.k)), share_mode=cfg.share_mode,
        reproduction=cfg.seed is not None)  # seeded parties are accepted only by a reproduction job
    spec = resolve_defaults(spec)
    validate_job(spec)
    return spec


def _party_table(spec: JobSpec, party: PartySpec) -> dict[str, np.ndarray]:
    """Deterministic, structured rows (party i's clients: a ramp), norm ≤ 1 after clipping."""
    base = np.arange(party.start, party.stop, dtype=float)[:, None] + np.arange(spec.width)[None, :]
    values = np.sin(base) * 0.4
    return {f"x{j}": values[:, j] for j in range(spec.width)}


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    arr = np.asarray(values, dtype=float)
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99)), "max": float(arr.max())}


# ------------------------------------------------------------------------------------ driver
class Driver:
    """Plays a slice of the parties from one asyncio process: randomize, connect, upload."""

    def __init__(self, spec_json: bytes, certs: str, party_ids: list[str], seed: str | None) -> None:

        # One parsed spec shared by this process's parties (each real party parses its own once).
        self.spec = JobSpec.from_json(spec_json)
        self.certs = certs
        self.party_ids = party_ids
        self.seed = seed
        self.batches: dict[str, list] = {}
        self.channels: dict[str, list] = {}
        self.stubs: dict[str, list] = {}
        self.expected = np.zeros((self.spec.sketch.m, self.spec.width), dtype=np.uint64)

    def randomize(self) -> float:
        from ltm.party.randomizer import make_batches, party_randomness

        t0 = time.perf_counter()
        sketch = self.spec.make_sketch()
        base = Randomness.seeded_insecure(self.seed) if self.seed is not None else None
        for pid in self.party_ids:
            party = self.spec.party(pid)
            rand = party_randomness(base, self.spec, pid) if base is not None else Randomness.system()
            (per_server,) = list(make_batches(self.spec, pid, _party_table(self.spec, party), rand,
                                              batch_clients=party.size))
            self.batches[pid] = per_server
            # the clear release this party contributes: S · (Σ of its k shares) = S · enc(X + G)
            sketch.apply(party.start, reconstruct([b.share for b in per_server]), self.expected)
        return time.perf_counter() - t0

    async def connect(self, timeout: float) -> list[float]:
        from ltm.transport.tls import make_channel
        from ltm.v1 import ltm_pb2_grpc

        async def one(pid: str) -> float:
            t0 = time.perf_counter()
            chans = [make_channel(s.endpoint, self.certs, pid, options=[("grpc.ssl_target_name_override", s.server_id)])
                     for s in self.spec.servers]
            self.channels[pid] = chans
            self.stubs[pid] = [ltm_pb2_grpc.ServerStub(c) for c in chans]
            await asyncio.wait_for(asyncio.gather(*(c.channel_ready() for c in chans)), timeout)
            return time.perf_counter() - t0

        return list(await asyncio.gather(*(one(pid) for pid in self.party_ids)))

    async def upload(self) -> dict[str, Any]:
        from ltm.party.uploader import upload_batch

        async def stream(pid: str):
            t0 = time.perf_counter()
            results = await asyncio.gather(*(upload_batch(self.stubs[pid][b.server], b, self.spec.job_id)
                                             for b in self.batches[pid]))
            receipts = [(b.server, r.party_id, r.batch_index, r.content_digest, r.clients)
                        for b, (r, _) in zip(self.batches[pid], results)]
            return pid, time.perf_counter() - t0, receipts, sum(retries for _, retries in results)

        start = time.time()
        out = await asyncio.gather(*(stream(pid) for pid in self.party_ids))
        end = time.time()
        payload = sum(b.share.nbytes for pid in self.party_ids for b in self.batches[pid])
        return {"start": start, "end": end, "latencies": [o[1] for o in out],
                "receipts": {o[0]: o[2] for o in out}, "retries": sum(o[3] for o in out), "payload_bytes": payload}

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for chans in self.channels.values() for c in chans))


def _driver_process(conn, spec_json: bytes, certs: str, party_ids: list[str], seed: str | None,
                    connect_timeout: float, parent: int) -> None:
    """A driver in its own process: commands over a pipe (connect → upload* → close); it dies with
    the coordinator ``parent`` (which starts it from its main thread), however that dies."""
    from ltm.transport.lifeline import hold

    hold(parent)

    async def main() -> None:
        driver = Driver(spec_json, certs, party_ids, seed)
        randomize_s = driver.randomize()
        try:
            connect = await driver.connect(connect_timeout)
            conn.send(("ready", {"randomize_s": randomize_s, "connect_latencies": connect,
                                 "expected": driver.expected}))
            while True:
                cmd = await asyncio.to_thread(conn.recv)
                if cmd == "upload":
                    conn.send(("uploaded", await driver.upload()))
                else:
                    break
        finally:
            await driver.close()
            conn.send(("closed", None))

    try:
        asyncio.run(main())
    except BaseException as exc:  # report, do not hang the coordinator
        try:
            conn.send(("error", repr(exc)))
        except Exception:
            pass
        raise


class _Drivers:
    """The coordinator's handle on its drivers: in process (one) or in child processes (several)."""

    def __init__(self, cfg: LoadConfig, spec: JobSpec, certs: Path) -> None:
        self.cfg, self.spec, self.certs = cfg, spec, certs
        ids = [p.party_id for p in spec.parties]
        self.slices = [ids[i::cfg.drivers] for i in range(cfg.drivers)]
        self.local: Driver | None = None
        self.procs: list[tuple[Any, Any]] = []

    async def start(self, connect_timeout: float) -> dict[str, Any]:
        spec_json = self.spec.canonical_json()
        if self.cfg.drivers == 1:
            self.local = Driver(spec_json, str(self.certs), self.slices[0], self.cfg.seed)
            randomize_s = self.local.randomize()
            t0 = time.perf_counter()
            latencies = await self.local.connect(connect_timeout)
            return {"randomize_s": randomize_s, "connect_s": time.perf_counter() - t0,
                    "connect_latencies": latencies, "expected": self.local.expected.copy()}
        ctx = mp.get_context("spawn")  # no fork after gRPC has started threads
        t0 = time.perf_counter()
        for party_ids in self.slices:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_driver_process, daemon=True,
                               args=(child, spec_json, str(self.certs), party_ids, self.cfg.seed, connect_timeout,
                                     os.getpid()))
            proc.start()
            self.procs.append((proc, parent))
        replies = [await self._recv(parent) for _, parent in self.procs]
        expected = np.zeros_like(replies[0]["expected"])
        for r in replies:
            expected += r["expected"]
        return {"randomize_s": max(r["randomize_s"] for r in replies), "connect_s": time.perf_counter() - t0,
                "connect_latencies": [x for r in replies for x in r["connect_latencies"]], "expected": expected}

    @staticmethod
    async def _recv(parent) -> Any:
        kind, payload = await asyncio.to_thread(parent.recv)
        if kind == "error":
            raise RuntimeError(f"a driver process failed: {payload}")
        return payload

    async def upload(self) -> dict[str, Any]:
        if self.local is not None:
            parts = [await self.local.upload()]
        else:
            for _, parent in self.procs:
                parent.send("upload")
            parts = [await self._recv(parent) for _, parent in self.procs]
        receipts: dict[str, list] = {}
        for p in parts:
            receipts.update(p["receipts"])
        return {"start": min(p["start"] for p in parts), "end": max(p["end"] for p in parts),
                "latencies": [x for p in parts for x in p["latencies"]], "receipts": receipts,
                "retries": sum(p["retries"] for p in parts), "payload_bytes": sum(p["payload_bytes"] for p in parts)}

    async def close(self) -> None:
        if self.local is not None:
            await self.local.close()
        for proc, parent in self.procs:
            try:
                parent.send("close")
            except (BrokenPipeError, OSError):
                pass
        for proc, _ in self.procs:
            await asyncio.to_thread(proc.join, 10.0)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _round_report(result: dict[str, Any], parties: int, k: int) -> dict[str, Any]:
    wall = result["end"] - result["start"]
    return {
        "streams": parties, "uploads": parties * k, "wall_s": wall,
        "batches_per_s": parties / wall, "uploads_per_s": parties * k / wall,
        "payload_bytes": result["payload_bytes"], "mb_per_s": result["payload_bytes"] / wall / 1e6,
        "latency_s": percentiles(result["latencies"]), "retries": result["retries"],
    }


def _raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, needed)) if hard != resource.RLIM_INFINITY else max(soft, needed)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


# ------------------------------------------------------------------------------------ the run
@dataclass
class _LoadRun:
    """What a load run must stop on every way out: its server processes, its drivers and the
    analyst's channels to the servers."""

    group: Any  # ltm.sim.localnet.launcher.ProcessGroup
    drivers: _Drivers | None = None
    analyst_channels: list = field(default_factory=list)

    async def close(self, report: dict[str, Any]) -> None:
        """Stop the drivers, close the channels, stop every process; record their pids and that they stopped."""
        if self.drivers is not None:
            await self.drivers.close()
        for c in self.analyst_channels:
            await c.close()
        self.group.stop_all()
        report["pids"] = [ap.pid for ap in self.group.processes]
        report["stopped"] = all(ap.proc.poll() is not None for ap in self.group.processes)


def _load_certs(cfg: LoadConfig, work: Path, report: dict[str, Any]) -> Path:
    """Every actor's certificate (the servers', the analyst's, the operator's, each party's), timed."""
    t = time.perf_counter()
    certs = Path(cfg.certs_cache) if cfg.certs_cache else work / "certs"
    actors = [f"server-{i}" for i in range(cfg.k)] + ["analyst", "operator"] + [f"party-{i}" for i in range(cfg.parties)]
    report["certificates"] = {"actors": len(actors), **ensure_certs(certs, actors)}
    report["timing_s"]["certificates"] = time.perf_counter() - t
    return certs


def _start_load_servers(cfg: LoadConfig, run: _LoadRun, report: dict[str, Any]) -> list:
    """The k ``ltm server`` processes on loopback (timed)."""
    t = time.perf_counter()
    servers = run.group.start_servers(cfg.k, ["--log-level", "warning"])
    report["timing_s"]["start_servers"] = time.perf_counter() - t
    assert all(s.endpoint.startswith(LOOPBACK + ":") for s in servers)
    report["servers"] = [{"actor": s.actor, "pid": s.pid, "endpoint": s.endpoint} for s in servers]
    return servers


async def _publish_load_job(cfg: LoadConfig, run: _LoadRun, servers: list, certs: Path,
                            report: dict[str, Any]) -> tuple[JobSpec, list]:
    """Build the job, open the analyst's channels (kept on ``run``) and publish it (timed); returns
    the spec and the analyst's stubs."""
    from ltm.analyst.coordinator import publish
    from ltm.transport.tls import make_channel
    from ltm.v1 import ltm_pb2_grpc

    spec = build_load_job(cfg, [s.endpoint for s in servers])
    report["job"] = {"n": spec.n, "parties": len(spec.parties), "m": spec.sketch.m, "s": spec.sketch.s,
                     "width": spec.width, "k": spec.k, "share_mode": spec.share_mode,
                     "spec_json_bytes": len(spec.canonical_json()), "digest": spec.digest}
    run.analyst_channels = [make_channel(s.endpoint, certs, "analyst",
                                         options=[("grpc.ssl_target_name_override", s.actor)]) for s in servers]
    analyst = [ltm_pb2_grpc.ServerStub(c) for c in run.analyst_channels]
    t = time.perf_counter()
    await publish(analyst, spec)
    report["timing_s"]["publish"] = time.perf_counter() - t
    return spec, analyst


async def _clients_held(analyst: list, spec: JobSpec) -> list[int]:
    """How many clients each server holds for the job (its Status)."""
    from ltm.v1 import ltm_pb2

    replies = await asyncio.gather(*(s.Status(ltm_pb2.StatusRequest(job_id=spec.job_id), timeout=30)
                                     for s in analyst))
    return [int(r.clients_held) for r in replies]


async def _check_upload(cfg: LoadConfig, spec: JobSpec, analyst: list, receipts: dict[str, list],
                        checks: dict[str, Any]) -> None:
    """After the upload: every server holds all n clients; the P·k receipts are distinct and name
    the right party, batch and client count, one per server."""
    flat = [r for rs in receipts.values() for r in rs]
    checks["clients_held_after_upload"] = await _clients_held(analyst, spec)
    checks["all_clients_held"] = checks["clients_held_after_upload"] == [spec.n] * cfg.k
    checks["receipts"] = len(flat)
    checks["receipts_unique"] = (len({r[3] for r in flat}) == len(flat) == cfg.parties * cfg.k
                                 and all(r[1] == pid and r[2] == 0 and r[4] == cfg.clients_per_party
                                         for pid, rs in receipts.items() for r in rs)
                                 and all(sorted(r[0] for r in rs) == list(range(cfg.k)) for rs in receipts.values()))


async def _duplicate_round(cfg: LoadConfig, spec: JobSpec, analyst: list, drivers: _Drivers,
                           receipts: dict[str, list], report: dict[str, Any]) -> None:
    """Every party uploads its batch again: the same receipts, and nothing more held."""
    checks = report["checks"]
    second = await drivers.upload()
    report["timing_s"]["duplicate_upload"] = second["end"] - second["start"]
    report["duplicate_upload"] = _round_report(second, cfg.parties, cfg.k)
    checks["duplicate_same_receipts"] = second["receipts"] == receipts
    checks["clients_held_after_duplicate"] = await _clients_held(analyst, spec)
    checks["duplicate_changed_nothing"] = checks["clients_held_after_duplicate"] == checks["clients_held_after_upload"]


async def _release_and_check(cfg: LoadConfig, spec: JobSpec, analyst: list, expected: np.ndarray,
                             report: dict[str, Any]) -> None:
    """Close intake, fetch the k result shares (both timed), reconstruct: the release must equal
    what the parties sent, bit for bit, and its privacy report must verify."""
    from ltm.analyst.coordinator import close_all, fetch_result_share
    from ltm.analyst.reconstruct import reconstruct_release

    timing, checks = report["timing_s"], report["checks"]
    t = time.perf_counter()
    participants = ClientSet.intersection(await close_all(analyst, spec))
    timing["close"] = time.perf_counter() - t
    t = time.perf_counter()
    shares = [r[0] for r in await asyncio.gather(*(fetch_result_share(s, spec, participants) for s in analyst))]
    timing["release"] = time.perf_counter() - t
    release = reconstruct_release(spec, shares, participants, spec.noise_plan(), randomness=(
        Randomness.seeded_insecure(cfg.seed).label if cfg.seed is not None else Randomness.system().label))
    total = reconstruct(shares)
    checks["participants"] = participants.count
    checks["release_exact"] = bool(np.array_equal(total, expected))
    checks["dp_verified"] = bool(release.privacy["dp_verified"])  # never for a seeded run
    checks["calibration_verified"] = bool(release.privacy["calibration_verified"])


def _cpu_delta(a: list[float | None], b: list[float | None]) -> list[float | None]:
    """Per server, the CPU seconds between two readings (None where either is unknown)."""
    return [None if x is None or y is None else round(y - x, 3) for x, y in zip(a, b)]


async def _run(cfg: LoadConfig, work: Path, report: dict[str, Any], groups: list) -> None:
    """The load run's phases (see the module docstring), filling ``report``; every process and
    channel it started is stopped on every way out."""
    # Imported before the first phase is timed (the steps import from these modules again).
    from ltm.analyst.coordinator import close_all, fetch_result_share, publish  # noqa: F401
    from ltm.analyst.reconstruct import reconstruct_release  # noqa: F401
    from ltm.sim.localnet.launcher import ProcessGroup, cpu_seconds
    from ltm.transport.tls import make_channel  # noqa: F401
    from ltm.v1 import ltm_pb2, ltm_pb2_grpc  # noqa: F401

    timing = report["timing_s"]
    certs = _load_certs(cfg, work, report)
    run = _LoadRun(ProcessGroup(work, certs))
    groups.append(run.group)  # for run_loadtest, which stops it even if this finally is cut short
    try:
        servers = _start_load_servers(cfg, run, report)
        cpu0 = [cpu_seconds(s.pid) for s in servers]
        spec, analyst = await _publish_load_job(cfg, run, servers, certs, report)

        run.drivers = drivers = _Drivers(cfg, spec, certs)
        started = await drivers.start(connect_timeout=cfg.deadline_s)
        timing["randomize"] = started["randomize_s"]
        timing["connect"] = started["connect_s"]
        report["connect_latency_s"] = percentiles(started["connect_latencies"])
        expected = started["expected"]

        cpu1 = [cpu_seconds(s.pid) for s in servers]
        first = await drivers.upload()
        cpu2 = [cpu_seconds(s.pid) for s in servers]
        timing["upload"] = first["end"] - first["start"]
        report["upload"] = _round_report(first, cfg.parties, cfg.k)
        receipts = first["receipts"]
        await _check_upload(cfg, spec, analyst, receipts, report["checks"])
        if cfg.duplicate:
            await _duplicate_round(cfg, spec, analyst, drivers, receipts, report)
        cpu3 = [cpu_seconds(s.pid) for s in servers]

        await _release_and_check(cfg, spec, analyst, expected, report)
        cpu4 = [cpu_seconds(s.pid) for s in servers]
        report["server_cpu_s"] = {"upload": _cpu_delta(cpu1, cpu2), "duplicate_upload": _cpu_delta(cpu2, cpu3),
                                  "close_and_release": _cpu_delta(cpu3, cpu4), "total": _cpu_delta(cpu0, cpu4)}
    finally:
        await run.close(report)


async def _within(seconds: float, coro):
    """Await ``coro`` with a deadline (TimeoutError past it) in the calling task.  Not
    ``asyncio.wait_for``: on Python 3.11 it runs ``coro`` in a task of its own, and when a SIGTERM
    ends ``asyncio.run`` both tasks are cancelled, so the second cancellation lands inside the
    first one's cleanup (``_run``'s finally, in ``await drivers.close()``) and cuts it short."""
    async with asyncio.timeout(seconds):
        return await coro


def run_loadtest(cfg: LoadConfig, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the load test (see module docstring); returns the report (filled into ``report`` if
    given, so a caller still sees what was started when the run fails).  Raises TimeoutError past
    the deadline, after stopping every process it started."""
    if cfg.parties < 1 or cfg.k < 2 or cfg.drivers < 1 or cfg.clients_per_party < 1:
        raise ValueError("need parties ≥ 1, k ≥ 2, drivers ≥ 1, clients_per_party ≥ 1")
    fd_limit = _raise_fd_limit(cfg.parties * cfg.k + 4 * cfg.parties + 1024)
    report = {} if report is None else report
    report.update({"config": asdict(cfg), "tls": True, "fd_limit": fd_limit, "timing_s": {}, "checks": {}})
    own = cfg.workdir is None
    from ltm.sim.localnet.workdir import keep, make_scratch_dir

    work = make_scratch_dir("ltm-load-") if own else Path(cfg.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    from ltm.sim.localnet.launcher import stop_on_termination

    try:
        # SIGTERM/SIGHUP cancel the run like Ctrl-C: _run's finally stops the drivers and servers
        with stop_on_termination():
            groups: list = []
            try:
                asyncio.run(_within(cfg.deadline_s, _run(cfg, work, report, groups)))
            finally:  # again, synchronously: the servers must stop even if that async cleanup did not finish
                for group in groups:
                    group.stop_all()
    except KeyboardInterrupt:
        # stopped on request, not a failure: nothing to look into, so nothing of ours is left behind
        if own:
            shutil.rmtree(work, ignore_errors=True)
        raise
    except BaseException as exc:
        # keep the servers' logs and stores for a post-mortem
        report["workdir_kept"] = str(work)
        if own:
            keep(work)  # not reclaimed by the next run's start either
        exc.add_note(f"ltm loadtest: servers' logs and stores kept in {work}")
        raise
    else:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        report["timing_s"]["total"] = time.perf_counter() - t0
    checks = report["checks"]
    report["ok"] = bool(checks.get("all_clients_held") and checks.get("receipts_unique")
                        and checks.get("release_exact")
                        and checks.get("dp_verified" if cfg.seed is None else "calibration_verified")
                        and (not cfg.duplicate or (checks.get("duplicate_same_receipts")
                                                   and checks.get("duplicate_changed_nothing"))))
    return report

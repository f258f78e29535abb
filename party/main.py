"""``ltm party``: a party process that vets a job and uploads its clients' shares."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import grpc

from ltm.errors import CommandError
from ltm.jobspec import JobSpec
from ltm.party.data_source import DataSourceError, PartySource, is_database, is_synthetic, open_source
from ltm.party.journal import JournalError, UploadJournal
from ltm.party.ledger import (
    DEFAULT_BUDGET_DELTA,
    DEFAULT_BUDGET_EPSILON,
    DEFAULT_SOURCE,
    AccountantUnavailable,
    Budget,
    BudgetExceeded,
    LedgerError,
    PrivacyLedger,
    check_ledger_dir,
    source_fingerprint,
)
from ltm.party.randomizer import DEFAULT_BATCH_CLIENTS, PartyDataError, check_source, party_randomness
from ltm.party.replicated import run_replicated_upload
from ltm.party.sql_source import redact_dsn
from ltm.party.uploader import PartyPolicy, PolicyViolation, UploadIncomplete, UploadSummary, fetch_job, run_upload
from ltm.randomness import Randomness
from ltm.transport.serve import actor_settings, start_actor
from ltm.transport.tls import make_channel
from ltm.v1 import ltm_pb2_grpc

log = logging.getLogger("ltm.party")
#: While fetching the job spec these mean "not yet": the job is not published or a server is not up.
RETRY_FETCH = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
#: The refusals a party logs (one JSON line, then its exit status: 3 policy or budget, 5 upload
#: incomplete, 6 journal, 7 ledger); its other errors (bad data: 4) are the command's one line.
LOGGED_REFUSALS = (PolicyViolation, BudgetExceeded, AccountantUnavailable, LedgerError, UploadIncomplete,
                   JournalError)


def read_party_source(path: str, args: argparse.Namespace | None = None) -> PartySource:
    """The party's data as a streamed source (``party/data_source.py``): ``args`` gives ``--query``,
    the database password's source (``--password-env``, ``--password-file``) and ``--dask``."""
    from ltm.party.sql_source import read_password

    try:
        source = open_source(path, query=getattr(args, "query", None),
                             password=read_password(getattr(args, "password_env", None),
                                                    getattr(args, "password_file", None)))
    except DataSourceError as exc:
        raise PartyDataError(str(exc)) from None
    if getattr(args, "dask", None):
        from ltm.party.dask_aggregate import DaskAggregator

        if not hasattr(source, "partitions"):
            source.close()
            raise PartyDataError(f"--dask reduces a Parquet file or folder (one task per file); "
                                 f"{source.description} is not one")

        source.aggregator = DaskAggregator(args.dask)
    return source


def data_exists(path: str) -> bool:
    """Whether ``--data`` names something to read (a file, a directory, a database, a synthetic source)."""
    from ltm.party.sql_source import SQLITE_PREFIX, is_postgres

    if path.startswith(SQLITE_PREFIX):
        path = path[len(SQLITE_PREFIX) - 1:]
    return is_synthetic(path) or is_postgres(path) or Path(path).exists()


def process_usage() -> dict[str, float | int]:
    """This process's peak resident set size (bytes; ``VmHWM``) and CPU seconds (user + system), for
    the summary (``upload_cpu_s``: the CPU seconds of :func:`run_upload` alone)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak_rss_bytes": int(ru.ru_maxrss) * 1024, "cpu_s": ru.ru_utime + ru.ru_stime}


def default_state_dir(data: str) -> Path:
    """Where the upload journal lives without --state-dir: next to the data, or — if the data's
    directory is read-only (a read-only volume), or the data is generated (``synthetic:…``, no
    directory) — under $XDG_STATE_HOME (~/.local/state)."""
    fallback = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "ltm-party"
    if is_synthetic(data) or (is_database(data) and not Path(data).exists()):
        return fallback
    beside = Path(data).absolute().parent / ".ltm-party-state"
    if beside.is_dir() or os.access(beside.parent, os.W_OK):
        return beside
    log.warning("the data directory is read-only: keeping the upload journal elsewhere",
                extra={"state_dir": str(fallback)})
    return fallback


def _pinned_options(server_id: str) -> list[tuple[str, str]]:
    """Channel options that make the TLS handshake accept only ``server_id``'s certificate."""
    return [("grpc.ssl_target_name_override", server_id)]


async def _fetch_with_wait(stubs, job_id: str, deadline: float, pinned: list[str] | None,
                           endpoints: list[str], wait_s: float):
    """``fetch_job``, waiting through :data:`RETRY_FETCH` until ``deadline`` (monotonic).  With
    ``pinned`` identities, a server that stays unreachable may be an endpoint presenting another
    actor's certificate: refused as a :class:`PolicyViolation`."""
    while True:
        try:
            return await fetch_job(stubs, job_id)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in RETRY_FETCH:
                raise
            if time.monotonic() <= deadline:
                await asyncio.sleep(0.2)
                continue
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise CommandError(f"job {job_id!r} was not published on the servers within --wait "
                                   f"{wait_s:g} s; check --job and that the operator has submitted it",
                                   status=5) from None
            if pinned:
                raise PolicyViolation(
                    f"refusing to upload: the servers at {endpoints} did not all prove to be the servers "
                    f"{pinned} the job names (a TLS certificate of another actor, or a server down): "
                    f"{exc.details()}") from None
            raise CommandError(f"cannot reach the server(s) {', '.join(endpoints)} within --wait {wait_s:g} s "
                               f"({exc.details()}); check that they are running and the addresses in "
                               f"--servers", status=5) from None


def _endpoints(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The ``--servers`` endpoints and the ``--server-ids`` identities (empty: pin those the job names)."""
    endpoints = [e.strip() for e in args.servers.split(",") if e.strip()]
    server_ids = [s.strip() for s in (args.server_ids or "").split(",") if s.strip()]
    if server_ids and len(server_ids) != len(endpoints):
        raise CommandError("--server-ids must name one identity per --servers endpoint")
    return endpoints, server_ids


def _party_policy(args: argparse.Namespace, server_ids: list[str]) -> PartyPolicy:
    """What this party accepts of a job, from its flags (with the documented defaults)."""
    return PartyPolicy(max_epsilon=args.max_epsilon if args.max_epsilon is not None else 1.0,
                       max_delta=args.max_delta if args.max_delta is not None else 1e-5,
                       min_corrupt_parties=1 if args.min_corrupt_parties is None else args.min_corrupt_parties,
                       min_t_prime=args.min_t_prime or 0, min_participants=args.min_participants or 0,
                       expected_servers=tuple(server_ids),
                       allow_reproduction_calibration=bool(args.allow_paper_calibration),
                       allow_reproduction=bool(args.allow_reproduction),
                       upload_mode=args.upload_mode or "",
                       min_colluding_servers=args.min_colluding_servers)


async def _fetch_vetted_spec(args: argparse.Namespace, policy: PartyPolicy, channels: list[grpc.aio.Channel],  # noqa: PLR0913 - the party's fetch state; the one participate path is #34 item 3
                             connect: Callable[[list[str]], list[grpc.aio.Channel]],
                             server_ids: list[str], endpoints: list[str], deadline: float, wait_s: float,
                             seeded: bool, insecure: bool) -> JobSpec:
    """Fetch the job, vet it against ``policy`` and, without ``--server-ids``, reconnect with the
    identities the job names pinned and fetch it again over those channels.  ``channels`` is
    replaced in place, so the caller closes whichever channels are open on every way out."""
    spec = await _fetch_with_wait([ltm_pb2_grpc.ServerStub(c) for c in channels], args.job, deadline,
                                  server_ids or None, endpoints, wait_s)
    policy.check(spec, seeded=seeded)
    if len(spec.servers) != len(endpoints):
        raise PolicyViolation(f"the job names {spec.k} servers, --servers gives {len(endpoints)} endpoints")
    if not server_ids and not insecure:
        # Pin the identities the job names: the spec is public (fetched once from whoever answers),
        # but not one share leaves this process except over channels whose TLS handshake proved
        # endpoint i holds server i's certificate; the spec is fetched again over them.
        for c in channels:
            await c.close()
        pinned = [s.server_id for s in spec.servers]
        channels[:] = connect(pinned)
        again = await _fetch_with_wait([ltm_pb2_grpc.ServerStub(c) for c in channels], args.job,
                                       max(deadline, time.monotonic() + 5.0), pinned, endpoints, wait_s)
        if again.digest != spec.digest:
            raise PolicyViolation("the pinned servers serve a different job spec than was first fetched")
    elif insecure:
        log.warning("--insecure: server identities are not verified")
    return spec


async def _wait_for_data(path: str, deadline: float) -> None:
    """--wait-for-data: the operator may still be writing the data; wait for it until ``deadline``."""
    while not data_exists(path):
        if time.monotonic() > deadline:
            raise PartyDataError(f"data file {path} did not appear within --wait")
        await asyncio.sleep(0.2)


async def _upload(args: argparse.Namespace, stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec,
                  source: PartySource, randomness: Randomness, state_dir: Path, seeded: bool,
                  endpoints: list[str]) -> tuple[UploadSummary, float]:
    """Upload this party's shares (the replicated release's parts, or journaled batches); returns
    the uploader's summary and the CPU seconds it took."""
    batch_clients = args.batch_clients or DEFAULT_BATCH_CLIENTS
    cpu_before = process_usage()["cpu_s"]
    if spec.replicated:  # the columns partition's degree-2 release: three parts per server (party/replicated.py)
        summary = await run_replicated_upload(stubs, spec, args.id, source, randomness, endpoints=endpoints)
    else:
        journal = UploadJournal.open(state_dir, spec, args.id, batch_clients=batch_clients, seeded=seeded)
        summary = await run_upload(stubs, spec, args.id, source, randomness, batch_clients=batch_clients,
                                   progress=not args.quiet, journal=journal, endpoints=endpoints)
    return summary, process_usage()["cpu_s"] - cpu_before


async def participate(args: argparse.Namespace) -> dict:
    """Fetch the job from every server, vet it against the policy, check the data, charge the ledger
    and upload; returns the run's summary (clients, batches, bytes per server, seconds, the ledger
    entry, resource use).  Refusals raise (see :data:`LOGGED_REFUSALS`).
    """
    endpoints, server_ids = _endpoints(args)
    insecure = bool(args.insecure)
    seeded = args.seed is not None

    def connect(ids: list[str]):
        # With ids, the TLS handshake checks that endpoint i presents server i's certificate.
        return [make_channel(e, args.certs, args.id, insecure=insecure,
                             options=_pinned_options(ids[i]) if ids and not insecure else None)
                for i, e in enumerate(endpoints)]

    channels = connect(server_ids)
    source: PartySource | None = None
    policy = _party_policy(args, server_ids)

    budget = Budget(args.budget_epsilon if args.budget_epsilon is not None else DEFAULT_BUDGET_EPSILON,
                    args.budget_delta if args.budget_delta is not None else DEFAULT_BUDGET_DELTA)
    wait_s = args.wait if args.wait is not None else 30.0
    deadline = time.monotonic() + wait_s
    try:
        spec = await _fetch_vetted_spec(args, policy, channels, connect, server_ids, endpoints, deadline, wait_s,
                                        seeded, insecure)
        stubs = [ltm_pb2_grpc.ServerStub(c) for c in channels]
        await _wait_for_data(args.data, deadline)
        if args.id not in {p.party_id for p in spec.parties}:
            raise PolicyViolation(f"{args.id} is not a party of job {spec.job_id!r}")
        source = read_party_source(args.data, args)
        # One streamed pass finds bad values (nothing is sent) and fingerprints the data for the ledger's record.
        try:
            check_source(spec, args.id, source)
        except DataSourceError as exc:  # met while streaming (a ragged CSV row, bytes that are not UTF-8, …)
            raise PartyDataError(str(exc)) from None
        state_dir = Path(args.state_dir) if args.state_dir else default_state_dir(args.data)
        # One ledger per party id on this host, whatever the data; charged durably before anything
        # is sent (refusal: BudgetExceeded; a missing or corrupt ledger: LedgerError).
        ledger = PrivacyLedger.open(args.ledger_dir, args.id, budget, journal_dir=state_dir)
        admission = ledger.admit(spec, seeded=seeded, source=args.new_source or args.source or DEFAULT_SOURCE,
                                 data_fingerprint=source_fingerprint(source),
                                 new_source_reason=args.new_source_reason if args.new_source else None)
        base = Randomness.seeded_insecure(args.seed) if seeded else Randomness.system()
        randomness = party_randomness(base, spec, args.id)
        log.info("job accepted", extra={"job_id": spec.job_id, "digest": spec.digest, "epsilon": spec.privacy.epsilon,
                                        "randomness": randomness.label, "ledger_before": admission.before.to_json(),
                                        "ledger_after": admission.after.to_json()})
        summary, upload_cpu_s = await _upload(args, stubs, spec, source, randomness, state_dir, seeded, endpoints)
    finally:
        for c in channels:
            await c.close()
        if source is not None:
            source.close()
    log.info("upload complete", extra=asdict(summary))
    return {**asdict(summary), "job_id": spec.job_id, "job_digest": spec.digest, "randomness": randomness.label,
            "job_epsilon": spec.privacy.epsilon, "job_delta": spec.privacy.delta,
            "server_ids": [s.server_id for s in spec.servers], "endpoints": endpoints,
            "ledger": admission.to_json(), **process_usage(), "upload_cpu_s": upload_cpu_s}


def summary_lines(r: dict) -> list[str]:
    """The end of a party's run for a person (stdout; the JSON log lines go to stderr): the job,
    what was sent where, how long it took, and the privacy spent and left."""
    from ltm.party.ledger import describe_admission
    from ltm.transport.metering import human_bytes

    def count(n: int, word: str, plural: str) -> str:
        return f"{n} {word if n == 1 else plural}"

    lines = [f"ltm party {r['party_id']}: job {r['job_id']!r} uploaded: {count(r['clients'], 'client', 'clients')} "
             f"in {count(r['batches'], 'batch', 'batches')}, {r['seconds']:.2f} s"]
    if r.get("skipped_batches") or r.get("resumed_batches"):
        lines.append(f"  resumed from the upload journal: skipped {count(r.get('skipped_batches', 0), 'batch', 'batches')} "
                     f"an earlier run had delivered, re-sent {count(r.get('resumed_batches', 0), 'batch', 'batches')} "
                     f"it had started")
    ids = r.get("server_ids") or [f"server-{i}" for i in range(len(r["bytes_per_server"]))]
    ends = r.get("endpoints") or [""] * len(ids)
    lines.append("  sent: " + ", ".join(f"{sid}{f' ({e})' if e else ''} {human_bytes(b)}"
                                        for sid, e, b in zip(ids, ends, r["bytes_per_server"]))
                 + (f"; {count(r['retries'], 'call', 'calls')} retried" if r.get("retries") else ""))
    entry = r.get("ledger")
    if entry:
        left = ""
        after, budget = entry["after"].get("epsilon"), entry["budget"].get("epsilon")
        if isinstance(after, (int, float)) and isinstance(budget, (int, float)):
            left = f"; ε {max(budget - after, 0.0):.4g} of the budget left"
        lines.append(f"  privacy: this job is (ε {r['job_epsilon']:g}, δ {r['job_delta']:g})-DP per client; this source's "
                     f"ledger {describe_admission(entry)}{left}")
    lines.append(f"  randomness: {r['randomness']}")
    return lines


def run(args: argparse.Namespace) -> int:
    """``ltm party``: check the flags and certificates before contacting anyone, participate, print
    the summary; returns the exit status (refusals exit with their class's, ltm/errors.py).
    """
    # Checked before any server is contacted:
    args = actor_settings(args, required=("id", "servers", "job", "data"))
    if args.new_source and args.source:
        raise CommandError("give --new-source NAME (open a new budget) or --source NAME (an existing one), not both",
                           status=2)
    if args.new_source and not (args.new_source_reason or "").strip():
        raise CommandError("--new-source needs --new-source-reason: why is this data new (disjoint individuals, not "
                           "a copy, subset, re-sort or edit of data already charged)?", status=2)
    if args.ledger_dir:  # a shared directory is refused now, not after the servers were contacted
        check_ledger_dir(args.ledger_dir)
    if not args.wait_for_data and not data_exists(args.data):
        raise CommandError(f"data file {redact_dsn(args.data)} does not exist; nothing was sent (give the right --data, or "
                           f"--wait-for-data if another process is still writing it)", status=4)
    start_actor(args.id, args.log_level, one_arena=False)
    try:
        result = asyncio.run(participate(args))
    except LOGGED_REFUSALS as exc:
        # A party often runs unattended: its refusals are JSON log lines with the details (what
        # operators collect); a person reads the command's one plain error line on stderr
        # (ltm/cli/app.py), which names the rule, the job's value and the flag that would accept it.
        log.error(f"{exc.prefix}{exc}", extra={"refusal": type(exc).__name__,
                                               "reasons": getattr(exc, "reasons", [str(exc)])})
        raise
    except grpc.aio.AioRpcError as exc:
        log.error("upload refused", extra={"code": exc.code().name, "details": exc.details()})
        return 5
    if args.summary_file:
        Path(args.summary_file).write_text(json.dumps(result))
    print("\n".join(summary_lines(result)), flush=True)
    return 0

"""The party's network side: fetch and vet the job, then stream shares to the k servers.

A party trusts nothing it has not checked: it fetches the job spec from *every* server, requires
them to agree (same digest), checks the spec against its own :class:`PartyPolicy` (largest ε it
accepts, smallest honest load, expected server identities, no reproduction-only calibration)
and only then randomizes and uploads.  Each batch goes to the k servers concurrently; a failed
stream is retried with exponential backoff (uploads are idempotent per (job, party, batch)).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc
import numpy as np

from ltm.batch import CSPRNG_MODE, SEEDED_MODE, ShareBatch
from ltm.dp.grid import noise_grid_problem
from ltm.dp.noise import MAX_GRID_SCALE, widest_noise_draw
from ltm.errors import LtmError, ProtocolError
from ltm.identifiers import spec_id_problems
from ltm.jobspec import JobSpec, default_corrupt_parties
from ltm.limits import decode_spec
from ltm.party.data_source import PartySource
from ltm.party.journal import UploadJournal
from ltm.party.randomizer import DEFAULT_BATCH_CLIENTS, effective_batch_clients, make_batches, plan_batches
from ltm.progress import Bar, progress_bar
from ltm.randomness import Randomness
from ltm.replicated import unverified_party_problem
from ltm.transport.certs import role_of
from ltm.v1 import ltm_pb2, ltm_pb2_grpc

log = logging.getLogger("ltm.party")
UPLOAD_CHUNK_BYTES = 1 << 20
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
             grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


class PolicyViolation(LtmError):
    """The job asks for something this party's policy does not accept; nothing was sent.

    ``reasons``: each rule the job breaks, with the job's value and the flag that would accept it
    (the party's JSON log lists them; the command's one error line joins them).
    """

    exit_code = 3

    def __init__(self, message: str, reasons: list[str] | None = None):
        super().__init__(message)
        self.reasons = list(reasons or [message])


@dataclass(frozen=True)
class PartyPolicy:
    """What a party accepts before sending anything (its privacy budget is in its ledger,
    ``party/ledger.py``).

    ``min_corrupt_parties`` applies to rows jobs in which a party knows several clients' noise
    (:func:`ltm.jobspec.default_corrupt_parties` > 0): the job must tolerate at least that many
    corrupt parties.  ``min_t_prime`` (rows partition) and ``min_participants`` are lower bounds on
    the job's t′ and on the smallest participant set its servers may release.  A job marked as a
    reproduction (it may accept seeded, NOT private randomness) is refused unless
    ``allow_reproduction``; a seeded party (``seeded=True``) joins only reproduction jobs.
    ``min_colluding_servers``: the fewest colluding servers a job must tolerate (its trust
    assumption, ``JobSpec.colluding_servers``); None means k − 1, every server but one, so by
    default a party refuses the replicated release (private only against one server of three) and
    joins it only when its operator lowers this to 1.  A replicated job that tolerates a corrupt
    party is refused unless the job verifies every party's clipping on the shares
    (``verified_clipping``): without it a deviating party could read the others' values (issue #30).
    """

    max_epsilon: float = 1.0
    max_delta: float = 1e-5
    min_corrupt_parties: int = 1
    min_t_prime: int = 0
    min_participants: int = 0
    expected_servers: tuple[str, ...] = ()
    allow_reproduction_calibration: bool = False
    allow_reproduction: bool = False
    #: The upload mode this party runs (``per-client`` or ``aggregate``; empty: whatever the job says).
    upload_mode: str = ""
    min_colluding_servers: int | None = None

    def check(self, spec: JobSpec, *, seeded: bool = False) -> None:
        """Refuse the job (:class:`PolicyViolation`, every reason listed) unless it meets this policy:
        ε and δ limits, corruption tolerance, colluding servers, t′, participants, calibration, the
        expected servers, reproduction and seeded randomness, the upload mode.
        """
        p = spec.privacy
        problems = []
        if p.epsilon > self.max_epsilon:
            problems.append(f"ε = {p.epsilon:g} exceeds this party's limit {self.max_epsilon:g} (to accept it: "
                            f"--max-epsilon {p.epsilon:g})")
        if p.delta > self.max_delta:
            problems.append(f"δ = {p.delta:g} exceeds this party's limit {self.max_delta:g} (to accept it: "
                            f"--max-delta {p.delta:g})")
        if default_corrupt_parties(spec) and p.corrupt_parties < self.min_corrupt_parties:
            problems.append(f"the job tolerates {p.corrupt_parties} corrupt parties, this party requires at least "
                            f"{self.min_corrupt_parties} (every party knows its own clients' noise; to accept it: "
                            f"--min-corrupt-parties {p.corrupt_parties})")
        if spec.partition == "rows" and p.t_prime < self.min_t_prime:
            problems.append(f"the job tolerates t′ = {p.t_prime} corrupt clients, this party requires at least "
                            f"{self.min_t_prime} (to accept it: --min-t-prime {p.t_prime})")
        if (spec.replicated and not spec.verified_clipping
                and (trust := unverified_party_problem(p.corrupt_parties)) is not None):
            problems.append(trust)
        required = spec.k - 1 if self.min_colluding_servers is None else self.min_colluding_servers
        if spec.tolerated_colluding_servers < required:
            problems.append(f"the job is private only if at most {spec.tolerated_colluding_servers} of {spec.k} servers "
                            f"collude; this party requires tolerance of {required} (its policy's trust assumption; to accept "
                            f"it: --min-colluding-servers {spec.tolerated_colluding_servers})")
        if p.min_participants < self.min_participants:
            problems.append(f"the job may be released over as few as {p.min_participants} participants, this "
                            f"party requires at least {self.min_participants} (to accept it: --min-participants "
                            f"{p.min_participants})")
        # Defence in depth (validate_job checks it too, but a party trusts no analyst's tooling):
        # the per-client noise must be many grid steps wide (ltm.dp.grid).
        plan = spec.noise_plan()
        grid = noise_grid_problem(plan.grid_noise_sd_min, spec.frac_bits)
        if grid is not None:
            problems.append(grid)
        # The exact sampler's range, checked before the ledger is charged (else the sampler would
        # refuse after the charge: budget spent, nothing released).  An aggregated upload draws a
        # party's noise for up to all its clients at once.
        many = max(q.size for q in spec.parties) if spec.upload_mode == "aggregate" else 1
        widest = widest_noise_draw(plan, many)
        if widest > MAX_GRID_SCALE:
            problems.append(f"a noise draw would be {widest:.3g} grid steps wide, beyond the exact sampler's range "
                            f"2^44: the job needs fewer fraction bits (now {spec.frac_bits}) or a larger ε")
        if p.calibration == "paper" and not self.allow_reproduction_calibration:
            problems.append("calibration 'paper' is a reproduction mode; this party does not accept it (to accept it: "
                            "--allow-paper-calibration)")
        if seeded and not spec.reproduction:
            problems.append("this party draws seeded (reproducible, NOT private) randomness and the job is not "
                            "marked as a reproduction; the servers would refuse its batches (drop --seed)")
        elif spec.reproduction and not (seeded or self.allow_reproduction):
            problems.append("the job is marked as a reproduction: its servers accept seeded (NOT private) "
                            "randomness from parties, so it is not private; this party does not accept it (to accept it: "
                            "--allow-reproduction)")
        if self.upload_mode and self.upload_mode != spec.upload_mode:
            problems.append(f"the job takes {spec.upload_mode} uploads (upload_mode {spec.upload_mode!r}), this party "
                            f"was started to upload {self.upload_mode!r} (to accept it: --upload-mode {spec.upload_mode})")
        ids = tuple(s.server_id for s in spec.servers)
        # A served spec is not validated here (that walks all n clients): its ids at least must be in
        # the grammar every server checks (ltm.identifiers), since they name this party's files and pins.
        problems += spec_id_problems(spec.job_id, [q.party_id for q in spec.parties], ids,
                                     [c.name for c in spec.columns], [t.name for t in spec.transforms],
                                     [x.job_id for x in spec.prejobs], [s.endpoint for s in spec.servers])
        not_servers = [i for i in ids if not _is_server_actor(i)]
        if not_servers:
            problems.append(f"the job names {not_servers} as servers; server identities are server-<n>")
        if self.expected_servers and ids != self.expected_servers:
            problems.append(f"the job's servers {list(ids)} are not the expected {list(self.expected_servers)} "
                            f"(--server-ids)")
        if problems:
            raise PolicyViolation(f"refusing the job {spec.job_id[:80]!r}: " + "; ".join(problems), reasons=problems)


def _is_server_actor(actor: str) -> bool:
    try:
        return role_of(actor) == "server"
    except ValueError:
        return False


@dataclass
class UploadSummary:
    party_id: str
    batches: int = 0
    clients: int = 0
    bytes_per_server: list[int] = field(default_factory=list)
    retries: int = 0
    seconds: float = 0.0
    #: batches a previous run had already delivered to every server (skipped; from the journal)
    skipped_batches: int = 0
    skipped_clients: int = 0
    #: batches a previous run had started: re-derived from their journaled keys and re-sent
    resumed_batches: int = 0
    journal: str = ""
    #: seconds: randomizing (clip + noise), fixed point + sharing, and streaming to the servers
    #: (randomizing batch b+1 overlaps uploading batch b, so these can sum to more than ``seconds``)
    noise_s: float = 0.0
    sharing_s: float = 0.0
    upload_s: float = 0.0
    #: seconds reading the data source (a chunk per batch; generating it, for a synthetic source)
    read_s: float = 0.0
    #: seconds building, rounding and mapping the clients' vectors into an aggregate (upload mode aggregate)
    map_s: float = 0.0
    #: wall-clock (Unix) times the upload began and ended, to line parties up in a benchmark
    started_unix: float = 0.0
    finished_unix: float = 0.0


class UploadIncomplete(LtmError):
    """A batch could not be delivered to every server; the message says which servers have it."""

    exit_code = 5
    prefix = "upload incomplete: "


async def fetch_job(stubs: list[ltm_pb2_grpc.ServerStub], job_id: str, timeout: float = 10.0) -> JobSpec:
    """The job spec, fetched from every server; they must all serve the same digest."""
    replies = await asyncio.gather(*(s.GetJob(ltm_pb2.GetJobRequest(job_id=job_id), timeout=timeout) for s in stubs))
    digests = {r.job_digest for r in replies}
    if len(digests) != 1:
        raise PolicyViolation(f"servers disagree about job {job_id!r} (digests {sorted(d[:12] for d in digests)})")
    try:
        # Parsed strictly: the first fetch is from whoever answers at the endpoints (identities are
        # pinned only after it), and a hostile spec (nested 200 000 deep, a 10⁵-digit integer) must
        # end in this party's one-line refusal, not a traceback.
        spec = decode_spec(replies[0].spec_json)
    except ProtocolError as exc:
        raise PolicyViolation(f"refusing the job: the servers serve a job spec that is not valid: {exc.message}") \
            from None
    if spec.digest != replies[0].job_digest:
        raise PolicyViolation("the served job spec does not hash to the digest the server states")
    return spec


def batch_header(batch: ShareBatch, job_id: str) -> tuple[ltm_pb2.BatchHeader, bytes]:
    """The upload header and raw little-endian payload (empty for a seed share) of one batch."""
    share = batch.share
    payload = b"" if share.seed is not None else np.ascontiguousarray(share.data, dtype="<u8").tobytes()
    header = ltm_pb2.BatchHeader(
        job_id=job_id, job_digest=batch.job_digest, party_id=batch.party_id, batch_index=batch.batch_index,
        start=batch.start, stop=batch.stop, columns=list(batch.columns), shape=list(share.shape),
        server_index=share.server, seed=share.seed or b"",
        data_sha256=hashlib.sha256(payload).digest() if payload else b"",
        randomness_mode=SEEDED_MODE if batch.seeded else CSPRNG_MODE, aggregate=batch.aggregate)
    return header, payload


def _chunks(batch: ShareBatch, job_id: str):
    header, payload = batch_header(batch, job_id)
    yield ltm_pb2.UploadChunk(header=header)
    for i in range(0, len(payload), UPLOAD_CHUNK_BYTES):
        yield ltm_pb2.UploadChunk(data=payload[i:i + UPLOAD_CHUNK_BYTES])


async def upload_batch(stub: ltm_pb2_grpc.ServerStub, batch: ShareBatch, job_id: str, *, attempts: int | None = None,
                       deadline_s: float = 600.0, base_delay: float = 0.2, max_delay: float = 4.0,
                       timeout: float = 120.0) -> tuple[ltm_pb2.UploadReceipt, int]:
    """Stream one batch to one server, retrying transient failures with exponential backoff.

    A server that is down or restarting, or a connection dropped mid-stream, is retried (the call
    waits for the channel to be ready again) with delays from ``base_delay`` doubling up to
    ``max_delay``, until ``deadline_s`` has passed since the first attempt (or after ``attempts``
    attempts, if given).  Uploads are idempotent, so a retry of a batch the server stored before
    its answer was lost gets the same receipt.  Returns the receipt and the number of retries.
    Non-retryable refusals (a gate, policy or validation error) are raised at once: retrying would
    not change the answer.
    """
    t0 = time.monotonic()
    attempt = 0
    while True:
        remaining = deadline_s - (time.monotonic() - t0)
        try:
            receipt = await stub.Upload(_chunks(batch, job_id), timeout=max(min(timeout, remaining), 1.0),
                                        wait_for_ready=True)
            return receipt, attempt
        except grpc.aio.AioRpcError as exc:
            attempt += 1
            remaining = deadline_s - (time.monotonic() - t0)
            if exc.code() not in RETRYABLE or remaining <= 0 or (attempts is not None and attempt >= attempts):
                raise
            delay = min(base_delay * 2 ** (attempt - 1), max_delay, remaining)
            log.warning("upload failed, retrying", extra={"batch": batch.batch_index, "server": batch.server,
                                                          "code": exc.code().name, "delay_s": delay})
            await asyncio.sleep(delay)


async def run_upload(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, party_id: str,  # noqa: PLR0913 - keyword-only upload options; the one participate path is #34 item 3
                     table: Mapping[str, np.ndarray] | PartySource, randomness: Randomness, *,
                     batch_clients: int = DEFAULT_BATCH_CLIENTS, progress: bool = True,
                     journal: UploadJournal | None = None, endpoints: list[str] | None = None) -> UploadSummary:
    """Randomize, share and upload all of this party's clients; returns what was sent.

    With a ``journal`` (``party/journal.py``) the upload survives a crash of this process: each
    batch's randomness key is journaled durably before any of its shares is sent, batches that
    every server acknowledged in an earlier run are skipped, and a batch an earlier run started is
    re-derived bit for bit from its key and re-sent (idempotent on the servers).

    ``table``: the party's columns in memory, or a :class:`~ltm.party.data_source.PartySource` read
    one batch of rows at a time (batch b + 1 is read and randomized while batch b uploads), so
    the party holds at most two batches whatever its client count.
    """
    t0 = time.monotonic()
    started = time.time()
    summary = UploadSummary(party_id, bytes_per_server=[0] * spec.k, journal=str(journal.path) if journal else "")
    party = spec.party(party_id)
    # after 1 s: a short upload draws nothing (ltm.progress: stderr, a terminal only, not --quiet)
    bar = progress_bar(party.size, party_id, unit="clients", quiet=not progress, delay_s=1.0)
    skip: set[int] = journal.done_batches() if journal is not None else set()
    if skip:
        summary.skipped_batches = len(skip)
        summary.skipped_clients = sum(b - a for i, a, b in
                                      plan_batches(party, effective_batch_clients(spec, party, batch_clients)).ranges
                                      if i in skip)
        bar.update(summary.skipped_clients)
    timings: dict[str, float] = {}
    batches = make_batches(spec, party_id, table, randomness, batch_clients=batch_clients, skip=skip,
                           batch_randomness=(lambda b: journal.randomness_for(b, randomness)) if journal else None,
                           timings=timings)
    # One worker thread randomizes every batch: the large arrays are then all allocated in one
    # malloc arena, so the party's resident memory stays at about two batches instead of creeping
    # up as the default executor's threads each keep freed batches in arenas of their own.
    randomizer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ltm-randomize")
    loop = asyncio.get_running_loop()

    def randomize_next() -> asyncio.Future:
        return loop.run_in_executor(randomizer, next, batches, None)

    try:
        return await _stream_batches(stubs, spec, journal, endpoints, summary, bar, timings, randomize_next,
                                     t0, started)
    finally:
        bar.close()
        randomizer.shutdown(wait=False, cancel_futures=True)


async def _stream_batches(stubs, spec: JobSpec, journal: UploadJournal | None, endpoints: list[str] | None,  # noqa: PLR0913 - one upload loop's state; the one participate path is #34 item 3
                          summary: UploadSummary, bar: Bar, timings: dict[str, float], randomize_next,
                          t0: float, started: float) -> UploadSummary:
    """The loop of :func:`run_upload`: upload batch b while batch b + 1 is randomized."""
    pending = randomize_next()
    while True:
        per_server = await pending
        if per_server is None:
            break
        pending = randomize_next()  # randomize the next batch meanwhile
        index = per_server[0].batch_index
        digests: list[str] | None = None
        if journal is not None:  # durable before the first share leaves this process
            digests, resumed = await asyncio.to_thread(journal.begin, per_server)
            summary.resumed_batches += resumed
        t_up = time.monotonic()
        results = await asyncio.gather(*(upload_batch(stubs[b.server], b, spec.job_id) for b in per_server),
                                       return_exceptions=True)
        summary.upload_s += time.monotonic() - t_up
        failed = [(b.server, r) for b, r in zip(per_server, results) if isinstance(r, BaseException)]
        if failed:
            pending.cancel()
            reached = [b.server for b, r in zip(per_server, results) if not isinstance(r, BaseException)]
            server, exc = failed[0]
            where = spec.servers[server].server_id + (f" at {endpoints[server]}" if endpoints else "")
            code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            resume = (f"; batches done on every server: {summary.batches + summary.skipped_batches}; restart the "
                      f"party to resume from its journal {journal.path}" if journal is not None else "")
            raise UploadIncomplete(f"batch {index} (clients [{per_server[0].start}, {per_server[0].stop})) could not "
                                   f"be delivered to {where}: {code}: {detail}; it reached servers "
                                   f"{[spec.servers[i].server_id for i in reached]}{resume}") from exc
        for b, (receipt, retries) in zip(per_server, results):
            if digests is not None and receipt.content_digest != digests[b.server]:
                raise UploadIncomplete(f"server {spec.servers[b.server].server_id} acknowledged batch {index} with "
                                       f"content digest {receipt.content_digest[:12]}…, not the digest of the "
                                       f"share sent ({digests[b.server][:12]}…)")
            summary.bytes_per_server[b.server] += b.share.nbytes
            summary.retries += retries
        if journal is not None:
            await asyncio.to_thread(journal.done, index)
        summary.batches += 1
        summary.clients += per_server[0].count
        bar.update(per_server[0].count)
    summary.seconds = time.monotonic() - t0
    summary.noise_s, summary.sharing_s = timings.get("noise", 0.0), timings.get("sharing", 0.0)
    summary.read_s, summary.map_s = timings.get("read", 0.0), timings.get("map", 0.0)
    summary.started_unix, summary.finished_unix = started, time.time()
    return summary

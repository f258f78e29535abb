"""The analyst's coordination of one job over gRPC: publish → wait → close → intersect → release.

The analyst never sees data or shares, only result shares.  It publishes the job to all k
servers, waits until every server holds every client or a deadline passes, closes intake,
intersects the servers' participant sets (a client that reached some servers but not all is
dropped everywhere), and requests each server's result share over that set.  Every server
checks the release gate on its own; a refusal from any server is fatal for the release.

Servers may crash and restart at any point: every call is retried through transient failures
(UNAVAILABLE, DEADLINE_EXCEEDED, …) with backoff up to a deadline (:class:`RetryPolicy`).  A
server that stays unreachable makes the release impossible — with k-of-k additive sharing every
server's result share is needed — and the error says so, with which clients reached which servers
(:func:`coverage_report`).

Participant sets are :class:`~ltm.client_set.ClientSet` ranges end to end (Close replies with
``held_ranges``, Release sends ``participant_ranges``): the analyst's memory does not grow with n.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import grpc
import numpy as np

from ltm.analyst.release import ReleasedSketch
from ltm.analyst.replicated import clipping_verdict, release_from_shares
from ltm.client_set import ClientSet, ClientSetError
from ltm.errors import LtmError, ProtocolError
from ltm.jobspec import JobSpec
from ltm.transport.signing import Signed, from_signed_pb, to_signed_pb
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from ltm.verified_clipping import read_output_statement, read_seed_statement

log = logging.getLogger("ltm.analyst")
T = TypeVar("T")


class ReleaseFailed(LtmError):
    """A release that could not be completed; the message says which server refused and why.

    ``coverage`` (when known) says which clients reached which servers (see :func:`coverage_report`).
    """

    code = "FAILED_PRECONDITION"

    def __init__(self, message: str, coverage: dict | None = None) -> None:
        super().__init__(message)
        self.coverage = coverage


#: gRPC codes after which the analyst retries a call: the server may be restarting, the connection
#: may have dropped mid-call (a dying server resets its streams: INTERNAL), or the call timed out.
#: Every analyst RPC is safe to repeat: CreateJob and Close are idempotent, Status only reads, and a
#: Release retried with the same participant set returns the server's persisted once-only record
#: (or, if the server died before persisting it, computes the same bytes again).
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.ABORTED, grpc.StatusCode.INTERNAL})


@dataclass(frozen=True)
class RetryPolicy:
    """How long the analyst keeps retrying one call to one server through transient failures.

    ``deadline_s`` bounds the time from the first attempt to the last retry; attempts are spaced by
    an exponential backoff from ``base_delay_s`` up to ``max_delay_s``.
    """

    deadline_s: float = 30.0
    base_delay_s: float = 0.1
    max_delay_s: float = 2.0


DEFAULT_RETRY = RetryPolicy()


class ServerUnreachable(ReleaseFailed):
    """A server that kept failing transiently until the retry deadline."""

    def __init__(self, server_id: str, endpoint: str, what: str, code: str, details: str, seconds: float,
                 attempts: int) -> None:
        self.server_id, self.endpoint, self.what, self.code, self.details = server_id, endpoint, what, code, details
        self.seconds, self.attempts = seconds, attempts
        at = f" at {endpoint}" if endpoint else ""
        super().__init__(f"{server_id} unreachable{at}: {what} failed {attempts} time(s) over {seconds:.1f} s "
                         f"(last: {code}: {details})")


class NotPublished(ReleaseFailed):
    """A job that could not be published because a server stayed unreachable."""

    code = "UNAVAILABLE"


Retries = dict[str, dict[str, int]]  # server id → call name → transient failures retried


async def call_with_retry(fn: Callable[[], Awaitable[T]], *, server_id: str, endpoint: str = "", what: str,
                          policy: RetryPolicy = DEFAULT_RETRY, retries: Retries | None = None) -> T:
    """``await fn()``, retrying :data:`TRANSIENT` failures with backoff until ``policy.deadline_s``.

    Raises :class:`ServerUnreachable` when the deadline passes; any other gRPC error (a refusal)
    is raised at once: retrying would not change the answer.  Counts retries in ``retries``.
    """
    t0 = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await fn()
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in TRANSIENT:
                raise
            elapsed = time.monotonic() - t0
            if elapsed >= policy.deadline_s:
                raise ServerUnreachable(server_id, endpoint, what, exc.code().name, exc.details() or "", elapsed,
                                        attempt) from exc
            delay = min(policy.max_delay_s, policy.base_delay_s * 2 ** (attempt - 1), policy.deadline_s - elapsed)
            if retries is not None:
                per_call = retries.setdefault(server_id, {})
                per_call[what] = per_call.get(what, 0) + 1
            log.warning("server call failed, retrying", extra={"server": server_id, "call": what,
                                                               "code": exc.code().name, "delay_s": round(delay, 3)})
            await asyncio.sleep(delay)


@dataclass
class JobRun:
    """What happened to one job: per-server participation, the release, the time per phase."""

    release: ReleasedSketch
    #: the clients every server held, released over
    participants: ClientSet
    held_per_server: list[int]
    timing_s: dict[str, float] = field(default_factory=dict)
    release_bytes_per_server: list[int] = field(default_factory=list)
    #: which clients reached which servers (:func:`coverage_report`)
    coverage: dict = field(default_factory=dict)
    #: transient failures retried, per server id and call
    retries: Retries = field(default_factory=dict)
    #: each server's result share (uint64 (m, D)), in the job's server order
    result_shares: list[np.ndarray] = field(default_factory=list)


def _endpoint(spec: JobSpec, i: int) -> str:
    return spec.servers[i].endpoint if i < len(spec.servers) else ""


async def publish(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, timeout: float = 30.0,
                  policy: RetryPolicy = DEFAULT_RETRY, retries: Retries | None = None) -> str:
    """CreateJob on every server; returns the digest they all acknowledged."""
    return await publish_links(grpc_links(stubs, spec, policy, retries), spec)


async def publish_links(links: list["ServerLink"], spec: JobSpec) -> str:
    """Create the job on every server (idempotent); returns the digest they all acknowledged."""
    replies = await _gather_reachable(link.create(spec) for link in links)
    down = [r for r in replies if isinstance(r, ServerUnreachable)]
    if down:
        raise NotPublished(f"cannot publish job {spec.job_id!r}: {'; '.join(map(str, down))}. Every server must "
                            f"hold the job: with k-of-k additive sharing each client's data is split across all "
                            f"{spec.k} servers")
    if set(replies) != {spec.digest}:
        raise ReleaseFailed(f"servers acknowledged digests {sorted(set(replies))} for a spec with digest {spec.digest}")
    return spec.digest


def _held_set(spec: JobSpec, i: int, r: ltm_pb2.CloseResponse) -> ClientSet:
    """The clients a server holds, from its Close reply (``held_ranges``); a malformed reply is a
    :class:`ReleaseFailed`."""
    sid = spec.servers[i].server_id if i < len(spec.servers) else f"server {i}"
    if r.n != spec.n:
        raise ReleaseFailed(f"server {sid} reported a participant set over n = {r.n} clients; the job has {spec.n}")
    try:
        return ClientSet.from_bytes(spec.n, r.held_ranges)
    except ClientSetError as exc:
        raise ReleaseFailed(f"server {sid} reported a malformed participant set: {exc}") from None


async def close_each(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, policy: RetryPolicy = DEFAULT_RETRY,
                     retries: Retries | None = None) -> list[ClientSet | ServerUnreachable]:
    """Close intake on every server (retrying transient failures); per server its held set, or the
    :class:`ServerUnreachable` of a server that stayed down.  Refusals are raised."""
    return await _gather_reachable(link.close(spec) for link in grpc_links(stubs, spec, policy, retries))


async def close_all(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec,
                    policy: RetryPolicy = DEFAULT_RETRY) -> list[ClientSet]:
    """Close every server; raises :class:`ReleaseFailed` if one stays unreachable."""
    results = await close_each(stubs, spec, policy)
    down = [r for r in results if isinstance(r, ServerUnreachable)]
    if down:
        raise ReleaseFailed(no_release_message(spec, down, coverage_report(spec, results)),
                            coverage_report(spec, results))
    return results  # type: ignore[return-value]


def coverage_report(spec: JobSpec, held: list, last_seen: list[int | None] | None = None) -> dict:
    """Which clients reached which servers.

    ``held``: per server the :class:`ClientSet` it holds (from Close), or an exception for a server
    that could not be reached.  Returns per-server held counts (``None`` = unreachable, with the
    count last seen by Status), the clients held by every server (the participant set), by some but
    not all, and by none.  With an unreachable server, "every"/"some but not all" refer to the
    reachable servers.  Counts only: no n-sized list.
    """
    reachable = [h for h in held if isinstance(h, ClientSet)]
    servers = []
    for i, h in enumerate(held):
        ok = isinstance(h, ClientSet)
        entry = {"server_id": spec.servers[i].server_id, "reachable": ok, "held": h.count if ok else None}
        if not ok:
            entry["error"] = str(h)
            if last_seen is not None and last_seen[i] is not None:
                entry["last_seen_held"] = int(last_seen[i])
        servers.append(entry)
    if reachable:
        every = ClientSet.intersection(reachable).count
        some = ClientSet.union(reachable).count
        counts = {"reached_every_server": every, "reached_some_not_all": some - every, "reached_none": spec.n - some}
    else:
        counts = {"reached_every_server": None, "reached_some_not_all": None, "reached_none": None}
    return {"n": spec.n, "servers": servers,
            "held_per_server": {e["server_id"]: e["held"] for e in servers},
            "all_servers_reachable": len(reachable) == len(held), **counts}


def describe_coverage(cov: dict) -> str:
    """One human sentence for :func:`coverage_report`."""
    parts = []
    for e in cov["servers"]:
        if e["reachable"]:
            parts.append(f"{e['server_id']} holds {e['held']} of {cov['n']} clients")
        else:
            seen = f", last seen holding {e['last_seen_held']}" if "last_seen_held" in e else ""
            parts.append(f"{e['server_id']} unreachable (holds an unknown set{seen})")
    scope = "the servers" if cov["all_servers_reachable"] else "the reachable servers"
    if cov["reached_some_not_all"] is None:
        return "; ".join(parts)
    return (f"{'; '.join(parts)}; {cov['reached_every_server']} clients reached all of {scope}, "
            f"{cov['reached_some_not_all']} reached some but not all of them, {cov['reached_none']} reached none")


def no_release_message(spec: JobSpec, down: list[ServerUnreachable], cov: dict, *, phase: str = "close") -> str:
    """The one-line explanation that no release is possible because the servers ``down`` are
    unreachable (k-of-k sharing needs every result share), with what ``cov`` says each server held;
    ``phase`` "release" adds that a rerun returns the same bytes.
    """
    names = ", ".join(d.server_id for d in down)
    verb = "is" if len(down) == 1 else "are"
    after = ("" if phase == "close" else
             " The servers that answered have persisted their once-only release records, so running the job "
             "again once the server is back returns the same bytes.")
    return (f"{names} {verb} unreachable: no release is possible — with k-of-k additive sharing every server's "
            f"result share is needed: the released sketch is the sum of all {spec.k}, and the other servers cannot "
            f"make up a missing one. "
            f"{' '.join(str(d) + '.' for d in down)} Coverage: {describe_coverage(cov)}.{after}")


async def fetch_result_share(stub: ltm_pb2_grpc.ServerStub, spec: JobSpec, participants: ClientSet | np.ndarray,
                             timeout: float = 300.0, *, server_index: int | None = None,
                             policy: RetryPolicy | None = None,
                             retries: Retries | None = None) -> tuple[np.ndarray, int]:
    """One server's result share (uint64 (m, D)) and the bytes it streamed.

    ``participants``: the agreed set (a bool mask (n,) is accepted), sent as ``participant_ranges``.
    With a ``policy`` (and the server's index in the job) transient
    failures are retried: a retried Release with the same participant set returns the same bytes.
    """
    participants = ClientSet.coerce(spec.n, participants)
    request = ltm_pb2.ReleaseRequest(job_id=spec.job_id, job_digest=spec.digest,
                                     participant_ranges=participants.to_bytes())

    async def once() -> tuple[np.ndarray, int]:
        header, chunks = None, []
        async for msg in stub.Release(request, timeout=timeout):
            if msg.HasField("header"):
                header = msg.header
            else:
                chunks.append(msg.data)
        payload = b"".join(chunks)
        if header is None or len(payload) != 8 * header.rows * header.cols:
            raise ReleaseFailed("a server's release stream was incomplete")
        if hashlib.sha256(payload).digest() != header.result_sha256:
            raise ReleaseFailed("a server's result share failed its checksum")
        share = np.frombuffer(payload, dtype="<u8").astype(np.uint64).reshape(header.rows, header.cols)
        return share, len(payload)

    if policy is None:
        return await once()
    i = server_index if server_index is not None else 0
    return await call_with_retry(once, server_id=spec.servers[i].server_id, endpoint=_endpoint(spec, i),
                                 what="Release", policy=policy, retries=retries)


class ServerLink(Protocol):
    """One server as the coordinator sees it, whatever the transport (gRPC or in-process).

    Refusals raise (``grpc.aio.AioRpcError`` or :class:`~ltm.errors.ProtocolError`); a server that
    stays unreachable raises :class:`ServerUnreachable`.
    """

    server_id: str
    #: after ``close``: the parties this server holds seeded (reproducible, NOT private) batches of
    seeded_parties: list[str]

    async def create(self, spec: JobSpec) -> str:
        """Publish the job on the server; returns the job digest it stored."""

    async def held_count(self, spec: JobSpec) -> int | None:
        """How many clients the server holds complete, or None when it cannot be asked right now."""

    async def close(self, spec: JobSpec) -> ClientSet:
        """Stop the server's intake; returns the clients it holds (the coordinator intersects them)."""

    async def release(self, spec: JobSpec, participants: ClientSet) -> tuple[np.ndarray, int]:
        """The server's result share for ``participants``: uint64 (m, D), and the bytes it streamed."""

    async def check_seed(self, spec: JobSpec) -> Signed:
        """Verified clipping: the server's signed post-close check seed."""

    async def check_output(self, spec: JobSpec, seeds: list[Signed]) -> Signed:
        """Verified clipping: the server's signed check output under the relayed seed set."""

    async def check_verdict(self, spec: JobSpec, outputs: list[Signed]) -> list[str]:
        """Verified clipping: the parties the server itself found failing, from the relayed outputs."""


@dataclass
class GrpcServerLink:
    """A server reached over gRPC, every call retried through transient failures (``policy``)."""

    stub: ltm_pb2_grpc.ServerStub
    index: int
    server_id: str
    endpoint: str = ""
    policy: RetryPolicy = DEFAULT_RETRY
    retries: Retries | None = None
    seeded_parties: list[str] = field(default_factory=list)

    async def create(self, spec: JobSpec) -> str:
        """``CreateJob`` (retried under the policy); returns the job digest the server stored."""
        reply = await call_with_retry(
            lambda: self.stub.CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()), timeout=30.0),
            server_id=self.server_id, endpoint=self.endpoint, what="CreateJob", policy=self.policy,
            retries=self.retries)
        return reply.job_digest

    async def held_count(self, spec: JobSpec) -> int | None:
        """``Status``'s clients held; None on a transient failure (a server restarting is not an error here)."""
        try:
            reply = await self.stub.Status(ltm_pb2.StatusRequest(job_id=spec.job_id), timeout=5.0)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in TRANSIENT:
                raise
            return None
        return int(reply.clients_held)

    async def close(self, spec: JobSpec) -> ClientSet:
        """``Close`` (retried); remembers the server's seeded parties and returns the clients it holds."""
        request = ltm_pb2.CloseRequest(job_id=spec.job_id, job_digest=spec.digest)
        reply = await call_with_retry(lambda: self.stub.Close(request, timeout=30.0), server_id=self.server_id,
                                      endpoint=self.endpoint, what="Close", policy=self.policy, retries=self.retries)
        self.seeded_parties = list(reply.seeded_parties)
        return _held_set(spec, self.index, reply)

    async def release(self, spec: JobSpec, participants: ClientSet) -> tuple[np.ndarray, int]:
        """``Release`` (retried): the result share, uint64 (m, D), and the bytes streamed
        (:func:`fetch_result_share`).
        """
        return await fetch_result_share(self.stub, spec, participants, server_index=self.index, policy=self.policy,
                                        retries=self.retries)

    async def _retried(self, what: str, call):
        return await call_with_retry(lambda: call(timeout=600.0), server_id=self.server_id, endpoint=self.endpoint,
                                     what=what, policy=self.policy, retries=self.retries)

    async def check_seed(self, spec: JobSpec) -> Signed:
        """``GetCheckSeed`` (retried: the server draws its seed once and stores it)."""
        request = ltm_pb2.CheckSeedRequest(job_id=spec.job_id, job_digest=spec.digest)
        return from_signed_pb(await self._retried("GetCheckSeed", lambda **kw: self.stub.GetCheckSeed(request, **kw)))

    async def check_output(self, spec: JobSpec, seeds: list[Signed]) -> Signed:
        """``SubmitCheckSeeds`` (retried: the same seed set gives the same output)."""
        request = ltm_pb2.SubmitCheckSeedsRequest(job_id=spec.job_id, job_digest=spec.digest,
                                                  seeds=[to_signed_pb(s) for s in seeds])
        return from_signed_pb(await self._retried("SubmitCheckSeeds",
                                                  lambda **kw: self.stub.SubmitCheckSeeds(request, **kw)))

    async def check_verdict(self, spec: JobSpec, outputs: list[Signed]) -> list[str]:
        """``SubmitCheckOutputs`` (retried: the server records its verdict once)."""
        request = ltm_pb2.SubmitCheckOutputsRequest(job_id=spec.job_id, job_digest=spec.digest,
                                                    outputs=[to_signed_pb(s) for s in outputs])
        reply = await self._retried("SubmitCheckOutputs", lambda **kw: self.stub.SubmitCheckOutputs(request, **kw))
        return list(reply.failing_parties)


def grpc_links(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, policy: RetryPolicy = DEFAULT_RETRY,
               retries: Retries | None = None) -> list[GrpcServerLink]:
    """One :class:`GrpcServerLink` per server of the job, in the job's server order."""
    return [GrpcServerLink(stub, i, spec.servers[i].server_id, _endpoint(spec, i), policy, retries)
            for i, stub in enumerate(stubs)]


async def check_clipping(links: list[ServerLink], spec: JobSpec) -> None:
    """Verified clipping (issue #30), the analyst relaying: every server's signed post-close seed to
    every server, then every server's signed check output to every server, each of which decides
    and records its own verdict (its release gate refuses unless every party passed).  The analyst
    decides too, with the same function (:func:`ltm.analyst.replicated.clipping_verdict`): raises
    :class:`ltm.verified_clipping.ClippingProofFailed` naming every failing party, so nothing is
    released; :class:`ReleaseFailed` if a server refused a step."""
    try:
        seeds = await asyncio.gather(*(link.check_seed(spec) for link in links))
        outputs = await asyncio.gather(*(link.check_output(spec, list(seeds)) for link in links))
    except (grpc.aio.AioRpcError, ProtocolError) as exc:
        raise ReleaseFailed(f"the clipping checks could not run, nothing released: {_describe_error(exc)}") from exc
    verdicts = await asyncio.gather(*(link.check_verdict(spec, list(outputs)) for link in links),
                                    return_exceptions=True)
    values = [read_seed_statement(s.payload, spec.digest, j) for j, s in enumerate(seeds)]
    read = [read_output_statement(o.payload, spec.digest, j, values) for j, o in enumerate(outputs)]
    clipping_verdict(spec, read)  # ClippingProofFailed
    refused = [(spec.servers[i].server_id, v) for i, v in enumerate(verdicts) if isinstance(v, BaseException)]
    if refused:
        raise ReleaseFailed("a server did not take the clipping checks, nothing released: "
                            + "; ".join(f"{sid}: {_describe_error(e)}" for sid, e in refused))


async def _gather_reachable(calls) -> list:
    """Await the calls concurrently; a :class:`ServerUnreachable` is returned in place, any other
    exception raised."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, ServerUnreachable):
            raise r
    return results


async def coordinate(links: list[ServerLink], spec: JobSpec, *, deadline_s: float, randomness_label: str,
                     publish_first: bool = False, poll_s: float = 0.1, retries: Retries | None = None,
                     progress: Callable[[str, dict], None] | None = None) -> JobRun:
    """Publish (optionally) → wait for parties → close → intersect → release → reconstruct.

    The one coordinator of both paths (gRPC and in process): the gRPC analyst passes :class:`GrpcServerLink`
    objects, ``sim``'s in-process runtime links to server cores in the same process.  Every step
    is safe to repeat (create and close are idempotent, a release retried with the same
    participant set returns the server's persisted once-only record), so an analyst that crashed
    anywhere and runs this again releases the same bytes.

    Waits until every server holds all n clients or ``deadline_s`` passes (a server that is down
    does not end the wait early).  A server still unreachable makes the release impossible (k-of-k
    sharing needs every server's result share): :class:`ReleaseFailed` says which server, and which
    clients reached which servers.  ``progress(phase, info)`` is told each phase as it starts
    (``waiting`` with the held counts seen, ``closing``, ``releasing``, ``reconstructing``).
    """
    timing: dict[str, float] = {}
    retries = retries if retries is not None else {}
    report = progress or (lambda phase, info: None)
    t = time.monotonic()
    if publish_first:
        report("publishing", {})
        await publish_links(links, spec)
    end = time.monotonic() + deadline_s
    last_seen: list[int | None] = [None] * len(links)
    while True:
        counts = await asyncio.gather(*(link.held_count(spec) for link in links))
        last_seen = [c if c is not None else last_seen[i] for i, c in enumerate(counts)]
        report("waiting", {"held_per_server": dict(zip((link.server_id for link in links), last_seen))})
        if all(c is not None and c >= spec.n for c in counts) or time.monotonic() >= end:
            break
        await asyncio.sleep(min(poll_s, max(end - time.monotonic(), 0.0)))
    timing["wait_for_parties"] = time.monotonic() - t
    t = time.monotonic()
    report("closing", {})
    results = await _gather_reachable(link.close(spec) for link in links)
    coverage = coverage_report(spec, results, last_seen)
    down = [r for r in results if isinstance(r, ServerUnreachable)]
    if down:
        raise ReleaseFailed(no_release_message(spec, down, coverage), coverage)
    held: list[ClientSet] = results
    participants = ClientSet.intersection(held)
    if coverage["reached_some_not_all"]:
        log.warning("clients dropped: their shares did not reach every server",
                    extra={"job_id": spec.job_id, "dropped": coverage["reached_some_not_all"],
                           "held_per_server": coverage["held_per_server"]})
    timing["close"] = time.monotonic() - t
    if spec.verified_clipping:
        t = time.monotonic()
        report("checking", {})
        await check_clipping(links, spec)
        timing["verify_clipping"] = time.monotonic() - t
    t = time.monotonic()
    report("releasing", {"participants": participants.count})
    shares = await asyncio.gather(*(link.release(spec, participants) for link in links), return_exceptions=True)
    down = [r for r in shares if isinstance(r, ServerUnreachable)]
    if down:
        raise ReleaseFailed(no_release_message(spec, down, coverage, phase="release"), coverage)
    failures = [(spec.servers[i].server_id, r) for i, r in enumerate(shares) if isinstance(r, BaseException)]
    if failures:
        detail = "; ".join(f"{sid}: {_describe_error(e)}" for sid, e in failures)
        dropped = (f" ({coverage['reached_some_not_all']} clients that reached some but not all servers were "
                   f"dropped)" if coverage["reached_some_not_all"] else "")
        raise ReleaseFailed(f"release refused or failed ({detail}); the participant set was the "
                            f"{participants.count} clients every server holds{dropped}. Coverage: "
                            f"{describe_coverage(coverage)}", coverage)
    timing["release"] = time.monotonic() - t
    t = time.monotonic()
    report("reconstructing", {})
    # every party any server saw upload seeded (NOT private) batches: named in the report, never DP
    seeded = sorted({p for link in links for p in getattr(link, "seeded_parties", ())})
    release = release_from_shares(spec, [r[0] for r in shares], participants, randomness=randomness_label,
                                  seeded_parties=seeded)
    timing["reconstruct"] = time.monotonic() - t
    return JobRun(release, participants, [h.count for h in held], timing, [r[1] for r in shares],
                  coverage, retries, [r[0] for r in shares])


async def run_job(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, *, deadline_s: float,
                  randomness_label: str, publish_first: bool = False,
                  policy: RetryPolicy = DEFAULT_RETRY) -> JobRun:
    """:func:`coordinate` one job over gRPC stubs (``publish_first``: also CreateJob on every server).

    Transient failures of a server (down, restarting, a dropped connection) are retried up to
    ``policy.deadline_s`` per call.
    """
    retries: Retries = {}
    return await coordinate(grpc_links(stubs, spec, policy, retries), spec, deadline_s=deadline_s,
                            randomness_label=randomness_label, publish_first=publish_first, retries=retries)


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)  # a ProtocolError from an in-process server reads "CODE: message" already

"""The server's gRPC layer: a thin ``grpc.aio`` servicer over :class:`ltm.server.core.ServerCore`.

Every RPC authenticates the caller from its mTLS certificate (``ltm.transport.tls``), hands the
request to the pure core in a worker thread (numpy work must not block the event loop), and maps
each :class:`ltm.errors.LtmError` to the gRPC status its class names (a refused request's status;
damaged storage → ``DATA_LOSS``; anything unexpected → ``INTERNAL``, logged; messages cut to a
bounded length).  Requests that do
not decode as protobuf are refused with ``INVALID_ARGUMENT`` (:func:`add_to_server` installs
decoders that never raise).  Job specs are size-checked before they are parsed and parsed in a
worker thread, so one caller's spec cannot stall the others.  Uploads are validated from their
header before any data is read; their buffer grows with the bytes received, never with what the
header declares; a stream then waits until its batch fits the server's upload budget
(``max_inflight_bytes``: backpressure, so memory does not grow with how many parties upload at
once) and its party's share of it (the budget over the parties uploading, so one party cannot
crowd out the others); a stream must keep a minimum rate, a silent stream's reservation goes to
a party that waits for it, and a party over its share must finish its batches promptly while
another waits; each stream has an idle and a total deadline; concurrent streams are capped per
party and in total (:class:`ltm.limits.ServerLimits`, docs/servers.md).  A batch is acknowledged only after the
store has made it durable.
"""
from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import math
import shutil
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import numpy as np

from ltm.batch import RANDOMNESS_MODES, SEEDED_MODE, ShareBatch
from ltm.client_set import ClientSet, ClientSetError
from ltm.errors import LtmError, ProtocolError, bounded
from ltm.limits import ServerLimits, parse_spec
from ltm.server.core import ServerCore
from ltm.sharing import SEED_BYTES, Share
from ltm.transport.memory import return_free_memory
from ltm.transport.metering import ByteMeter
from ltm.transport.signing import from_signed_pb, to_signed_pb
from ltm.transport.tls import authenticate
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from ltm.verified_clipping import ClippingProofFailed

log = logging.getLogger("ltm.server")

#: Largest share payload accepted in one batch (a batch of 65 536 clients × 11 columns × 50
#: pieces is 288 MiB; bigger batches must be split by the party).
MAX_BATCH_BYTES = ServerLimits.max_batch_bytes
RELEASE_CHUNK_BYTES = 1 << 20
#: Batch indices are stored as SQLite INTEGER (signed 64-bit).
MAX_BATCH_INDEX = (1 << 63) - 1


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    """End the call with the status ``exc`` names (its message bounded in length)."""
    if isinstance(exc, (asyncio.CancelledError, grpc.aio.AbortError)):
        raise exc
    if isinstance(exc, LtmError) and exc.code != "INTERNAL":  # the status each error class names
        if exc.code == "DATA_LOSS":
            log.error("stored state damaged", extra={"reason": str(exc)})
        await context.abort(grpc.StatusCode[exc.code], bounded(exc.status_message()))
    log.exception("internal error", exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, bounded(f"internal server error ({type(exc).__name__}); "
                                                          f"the server logged the details"))


class BadRequest:
    """A request message that did not decode (see :func:`add_to_server`)."""

    def __init__(self, what: str, exc: Exception) -> None:
        self.message = bounded(f"undecodable {what} message: {exc}; send a valid ltm.v1 protobuf")


def _decoder(cls):
    def decode(data: bytes):
        try:
            return cls.FromString(data)
        except Exception as exc:  # DecodeError, invalid UTF-8 in a string field, …
            return BadRequest(cls.__name__, exc)
    return decode


def add_to_server(service: "ServerService", server) -> None:
    """Register ``service`` as ``ltm.v1.Server`` with request decoders that never raise: a message
    that does not decode reaches the handler as :class:`BadRequest` and is refused with
    INVALID_ARGUMENT (gRPC's own decoding failure would answer an imprecise status)."""
    pb = ltm_pb2
    handlers = {
        "CreateJob": grpc.unary_unary_rpc_method_handler(
            service.CreateJob, request_deserializer=_decoder(pb.CreateJobRequest),
            response_serializer=pb.CreateJobResponse.SerializeToString),
        "GetJob": grpc.unary_unary_rpc_method_handler(
            service.GetJob, request_deserializer=_decoder(pb.GetJobRequest),
            response_serializer=pb.GetJobResponse.SerializeToString),
        "Upload": grpc.stream_unary_rpc_method_handler(
            service.Upload, request_deserializer=_decoder(pb.UploadChunk),
            response_serializer=pb.UploadReceipt.SerializeToString),
        "Close": grpc.unary_unary_rpc_method_handler(
            service.Close, request_deserializer=_decoder(pb.CloseRequest),
            response_serializer=pb.CloseResponse.SerializeToString),
        "Release": grpc.unary_stream_rpc_method_handler(
            service.Release, request_deserializer=_decoder(pb.ReleaseRequest),
            response_serializer=pb.ReleaseChunk.SerializeToString),
        "Status": grpc.unary_unary_rpc_method_handler(
            service.Status, request_deserializer=_decoder(pb.StatusRequest),
            response_serializer=pb.StatusResponse.SerializeToString),
        "CancelJob": grpc.unary_unary_rpc_method_handler(
            service.CancelJob, request_deserializer=_decoder(pb.CancelJobRequest),
            response_serializer=pb.CancelJobResponse.SerializeToString),
        "GetCheckSeed": grpc.unary_unary_rpc_method_handler(
            service.GetCheckSeed, request_deserializer=_decoder(pb.CheckSeedRequest),
            response_serializer=pb.SignedStatement.SerializeToString),
        "SubmitCheckSeeds": grpc.unary_unary_rpc_method_handler(
            service.SubmitCheckSeeds, request_deserializer=_decoder(pb.SubmitCheckSeedsRequest),
            response_serializer=pb.SignedStatement.SerializeToString),
        "SubmitCheckOutputs": grpc.unary_unary_rpc_method_handler(
            service.SubmitCheckOutputs, request_deserializer=_decoder(pb.SubmitCheckOutputsRequest),
            response_serializer=pb.CheckVerdict.SerializeToString),
    }
    missing = set(ltm_pb2.DESCRIPTOR.services_by_name["Server"].methods_by_name) - set(handlers)
    if missing:  # a new RPC in the .proto must be added here too
        raise RuntimeError(f"add_to_server does not register {sorted(missing)}")
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("ltm.v1.Server", handlers),))


async def _check_decoded(context, request) -> None:
    if isinstance(request, BadRequest):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)


@dataclass(eq=False)
class UploadTicket:
    """One upload stream's claim on the server's upload budget (see :meth:`ServerService._admit`)."""

    party: str
    nbytes: int = 0              # bytes reserved now (0: nothing, or given back)
    admitted_at: float = 0.0     # event-loop time of the last admission
    receiving: bool = False      # admitted and still reading its batch (the rate rules apply)
    started: bool = False        # a data byte arrived since the last admission
    revoked: bool = False        # its reservation went to a waiting party before any data came
    window_start: float = 0.0    # the minimum-rate window: since when, and bytes received in it
    window_bytes: int = 0
    due: float | None = None     # set while another party waits on this party's excess share
    due_note: str = ""
    poke: asyncio.Future | None = None  # wakes the stream's reader when ``due`` is set


class ServerService(ltm_pb2_grpc.ServerServicer):
    """The ``ltm.v1.Server`` service of one LTM server."""

    def __init__(self, core: ServerCore, *, insecure: bool = False, max_batch_bytes: int | None = None,
                 meter: ByteMeter | None = None, limits: ServerLimits | None = None) -> None:
        self.core = core
        self.insecure = insecure
        self.limits = limits or ServerLimits()
        self.max_batch_bytes = max_batch_bytes if max_batch_bytes is not None else self.limits.max_batch_bytes
        self._streams: collections.Counter = collections.Counter()  # party → open upload streams
        self._inflight = 0  # upload bytes admitted (reserved) across all streams
        self._tickets: set[UploadTicket] = set()  # the streams holding a reservation
        self._party_bytes: collections.Counter = collections.Counter()  # party → bytes reserved
        self._waiting: collections.Counter = collections.Counter()  # party → streams waiting for budget
        self._budget_freed: asyncio.Condition | None = None  # created on the server's event loop
        self.meter = meter  # gRPC-layer byte counts, reported by Status
        self.seconds: dict[tuple[str, str], float] = {}  # (job, "store" | "release") → seconds, for Status
        # One writer at a time: accept/close/release read-check-write the store.
        self._lock = threading.Lock()

    async def _call(self, fn, *args, phase: tuple[str, str] | None = None, **kwargs):
        def locked():
            with self._lock:
                t = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    if phase is not None:
                        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t
        return await asyncio.to_thread(locked)

    # ------------------------------------------------------------------ jobs
    async def CreateJob(self, request, context):
        """Publish a job (analyst only): the spec is size-checked, parsed off the event loop and stored;
        re-creating the identical job is a no-op, another job under the same id is refused.
        """
        who = await authenticate(context, {"analyst"}, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            self.limits.check_spec_size(len(request.spec_json))  # before reading it
            spec = await asyncio.to_thread(parse_spec, request.spec_json, self.limits)  # off the event loop
            if self.core.store.get_job(spec.job_id) is None and self.core.store.job_count() >= self.limits.max_jobs:
                raise ProtocolError("RESOURCE_EXHAUSTED", f"this server stores {self.limits.max_jobs} jobs, its "
                                                          f"limit (max_jobs)")
            digest = await self._call(self.core.create_job, spec, caller_role=who.role)
        except Exception as exc:
            await _abort(context, exc)
        log.info("job created", extra={"job_id": spec.job_id, "digest": digest, "caller": who.actor})
        return ltm_pb2.CreateJobResponse(job_id=spec.job_id, job_digest=digest)

    async def CancelJob(self, request, context):
        """Drop a job and retire its id for good (analyst only; durable before the answer)."""
        who = await authenticate(context, {"analyst"}, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            fresh = await self._call(self.core.cancel_job, request.job_id, request.reason, caller_role=who.role)
        except Exception as exc:
            await _abort(context, exc)
        log.info("job cancelled", extra={"job_id": request.job_id, "already": not fresh, "caller": who.actor})
        return ltm_pb2.CancelJobResponse(job_id=request.job_id, already=not fresh)

    async def GetJob(self, request, context):
        """The published job spec (canonical JSON), its digest and whether intake is closed (any actor)."""
        await authenticate(context, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            spec = self.core.spec(request.job_id)
        except Exception as exc:
            await _abort(context, exc)
        return ltm_pb2.GetJobResponse(spec_json=spec.canonical_json(), job_digest=spec.digest,
                                      closed=self.core.store.is_closed(spec.job_id))

    async def Status(self, request, context):
        """A job's public progress: closed, released, clients held, batches stored, bytes received and sent
        (this process, all jobs) and seconds spent storing and releasing.
        """
        await authenticate(context, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            spec = self.core.spec(request.job_id)
            released = self.core.store.get_release(spec.job_id) is not None
            batches = self.core.store.batch_count(spec.job_id)
        except Exception as exc:
            await _abort(context, exc)
        held = self.core.held(spec.job_id).count
        return ltm_pb2.StatusResponse(
            job_id=spec.job_id, closed=self.core.store.is_closed(spec.job_id),
            released=released, clients_held=held, batches=batches,
            bytes_received=self.meter.total_received if self.meter else 0,
            bytes_sent=self.meter.total_sent if self.meter else 0,
            store_seconds=self.seconds.get((spec.job_id, "store"), 0.0),
            release_seconds=self.seconds.get((spec.job_id, "release"), 0.0),
            clipping_check=self.core.clipping_status(spec.job_id) if spec.verified_clipping else "")

    # ------------------------------------------------------------------ upload
    async def Upload(self, request_iterator: AsyncIterator[ltm_pb2.UploadChunk], context):
        """Receive one party's batch stream (parties only): a header, then share chunks; at most
        ``max_streams_per_party`` streams per party and ``max_streams`` in all, and the batch waits for
        room in ``max_inflight_bytes`` before its data is read (see the module docstring).
        """
        who = await authenticate(context, {"party"}, insecure=self.insecure)
        lim = self.limits
        if self._streams[who.actor] >= lim.max_streams_per_party:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{who.actor} already has {self._streams[who.actor]} upload streams open, this "
                                f"server's limit per party (max_streams_per_party); retry when one has finished")
        if sum(self._streams.values()) >= lim.max_streams:
            # UNAVAILABLE, not RESOURCE_EXHAUSTED: the server is busy with other parties, a party's
            # uploader retries with backoff (it gives up on RESOURCE_EXHAUSTED)
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"this server has {lim.max_streams} upload streams open, its limit (max_streams); "
                                f"retry later")
        self._streams[who.actor] += 1
        ticket = UploadTicket(who.actor)  # this stream's claim on max_inflight_bytes (set by _admit)
        try:
            return await self._upload(aiter(request_iterator), context, who, ticket)
        finally:
            self._streams[who.actor] -= 1
            if not self._streams[who.actor]:
                del self._streams[who.actor]
            await self._release_budget(ticket)

    async def _release_budget(self, ticket: UploadTicket) -> None:
        """Return a stream's reservation to the upload budget and wake the streams waiting for it."""
        ticket.receiving = False
        if ticket.nbytes:
            self._give_back(ticket)
            async with self._freed():
                self._freed().notify_all()
            # The batch's buffer is free now: hand its pages back (ltm/transport/memory.py)
            await asyncio.to_thread(return_free_memory)

    def _give_back(self, ticket: UploadTicket) -> None:
        self._inflight -= ticket.nbytes
        self._party_bytes[ticket.party] -= ticket.nbytes
        if not self._party_bytes[ticket.party]:
            del self._party_bytes[ticket.party]
        self._tickets.discard(ticket)
        ticket.nbytes = 0

    def _freed(self) -> asyncio.Condition:
        if self._budget_freed is None:
            self._budget_freed = asyncio.Condition()
        return self._budget_freed

    def _share(self) -> float:
        """A party's share of the upload budget: the budget over the parties holding or waiting for
        some of it (a lone party's share is the whole budget)."""
        active = {p for p, n in self._party_bytes.items() if n} | {p for p, n in self._waiting.items() if n}
        return self.limits.max_inflight_bytes / max(1, len(active))

    def _fits(self, party: str, nbytes: int) -> tuple[bool, bool]:
        """(within the party's share, within the whole budget) for ``nbytes`` more of ``party``.

        The floor: a party holding nothing may take one batch whatever its share, and a batch
        larger than the whole budget is admitted when nothing else is in flight — so every batch
        the job allows can be stored, and a lone party uses the whole budget."""
        held = self._party_bytes[party]
        share_ok = not held or held + nbytes <= self._share()
        total_ok = not self._inflight or self._inflight + nbytes <= self.limits.max_inflight_bytes
        return share_ok, total_ok

    def _revoke_silent(self, party: str, now: float) -> bool:
        """Take back the reservations of other parties' streams that have sent no data for
        ``stream_silent_seconds`` since they were admitted (they lose nothing: no byte was read;
        when their data comes they wait for the budget again).  True if any was taken."""
        silent = self.limits.stream_silent_seconds
        victims = [t for t in self._tickets
                   if t.party != party and not t.started and now - t.admitted_at >= silent]
        for t in victims:
            log.info("silent upload's reservation returned", extra={"party": t.party, "bytes": t.nbytes})
            self._give_back(t)
            t.revoked = True
        return bool(victims)

    def _next_silent(self, party: str) -> float | None:
        """When the next silent stream of another party becomes revocable (event-loop time)."""
        times = [t.admitted_at + self.limits.stream_silent_seconds for t in self._tickets
                 if t.party != party and not t.started]
        return min(times, default=None)

    def _set_due(self, party: str, now: float) -> None:
        """``party`` waits for the budget: every stream of another party that holds more than its
        share must now receive its batch within one rate window, or be cut (it is retried)."""
        share = self._share()
        window = self.limits.stream_rate_window_seconds
        for t in self._tickets:
            held = self._party_bytes[t.party]
            if t.party != party and t.receiving and t.due is None and held > share:
                t.due = now + window
                t.due_note = (f"upload cut: {t.party} held {held} bytes of this server's upload budget of "
                              f"{self.limits.max_inflight_bytes} (max_inflight_bytes), more than its share of "
                              f"{int(share)} with another party waiting, and this batch was not received within "
                              f"{window:g} s (stream_rate_window_seconds); retry it")
                if t.poke is not None and not t.poke.done():
                    t.poke.set_result(None)

    async def _admit(self, nbytes: int, context, ticket: UploadTicket) -> None:
        """Reserve ``nbytes`` of the upload budget (``max_inflight_bytes``) before reading any data.

        Backpressure, so a server's memory does not grow with how many parties upload at once: a
        stream whose batch does not fit waits (its party's data stays unread, so gRPC flow control
        holds the party back) until it fits — within the whole budget and within its party's share
        of it (:meth:`_fits`) — for at most ``stream_idle_seconds``, then gets UNAVAILABLE, which
        parties retry.  A stream reserves only after its header has passed every check against the
        job, so what it reserves is a batch the job allows.  While a stream waits only for the
        whole budget, it takes back other parties' reservations that have carried no data for
        ``stream_silent_seconds``, and streams of parties above their share must finish receiving
        within ``stream_rate_window_seconds`` (:meth:`_set_due`).  Admitted streams never wait for
        budget they need to finish (a stream whose reservation was taken back had read nothing),
        so waiting cannot deadlock: every reservation ends within the rate rules and deadlines.
        """
        loop = asyncio.get_running_loop()
        if nbytes:  # a helper-share seed (32 bytes) reserves nothing and never waits
            cond = self._freed()
            give_up = loop.time() + self.limits.stream_idle_seconds
            async with cond:
                self._waiting[ticket.party] += 1
                admitted = False
                try:
                    while True:
                        now = loop.time()
                        share_ok, total_ok = self._fits(ticket.party, nbytes)
                        if share_ok and total_ok:
                            break
                        wake = give_up
                        if share_ok:  # only the whole budget holds it back: claim what others owe
                            if self._revoke_silent(ticket.party, now):
                                continue
                            self._set_due(ticket.party, now)
                            nxt = self._next_silent(ticket.party)
                            if nxt is not None:
                                wake = min(wake, nxt)
                        if now >= give_up:
                            await context.abort(grpc.StatusCode.UNAVAILABLE,  # busy with other uploads: retryable
                                                f"this server has {self._inflight} bytes of uploads in flight, its "
                                                f"limit (max_inflight_bytes), or {ticket.party} holds its share of "
                                                f"them; retry the batch later")
                        try:
                            await asyncio.wait_for(cond.wait(), max(wake - now, 0.0))
                        except asyncio.TimeoutError:
                            pass
                    self._inflight += nbytes
                    self._party_bytes[ticket.party] += nbytes
                    self._tickets.add(ticket)
                    ticket.nbytes = nbytes
                    admitted = True
                finally:
                    self._waiting[ticket.party] -= 1
                    if not self._waiting[ticket.party]:
                        del self._waiting[ticket.party]
                    if not admitted:  # the shares of those still waiting grew
                        cond.notify_all()
        now = loop.time()
        ticket.admitted_at = ticket.window_start = now
        ticket.window_bytes = 0
        ticket.started = ticket.revoked = False
        ticket.receiving = True
        ticket.due, ticket.due_note = None, ""
        if ticket.poke is None or ticket.poke.done():
            ticket.poke = loop.create_future()

    def _received(self, ticket: UploadTicket, nbytes: int) -> None:
        """Count ``nbytes`` into the stream's minimum-rate window (a new window starts once the
        minimum has arrived)."""
        if nbytes:
            ticket.started = True
        ticket.window_bytes += nbytes
        if ticket.window_bytes >= self.limits.stream_min_bytes:
            ticket.window_start = asyncio.get_running_loop().time()
            ticket.window_bytes = 0

    async def _next_chunk(self, it, context, started: float, ticket: UploadTicket | None = None):
        """The next message of an upload stream, within the idle and total deadlines and, while the
        stream is receiving its batch, the minimum rate and any due time set by :meth:`_set_due`."""
        lim = self.limits
        loop = asyncio.get_running_loop()
        called = loop.time()
        read = asyncio.ensure_future(anext(it, None))
        try:
            while not read.done():
                now = loop.time()
                deadlines = [(called + lim.stream_idle_seconds, "idle"), (started + lim.stream_total_seconds, "total")]
                if ticket is not None and ticket.receiving:
                    deadlines.append((ticket.window_start + lim.stream_rate_window_seconds, "rate"))
                    if ticket.due is not None:
                        deadlines.append((ticket.due, "due"))
                deadline, why = min(deadlines)
                if deadline <= now:
                    log.warning("upload stream cut", extra={"reason": why, "party": ticket.party if ticket else None})
                    if why == "due":  # the server is busy with the waiting party's upload: retryable
                        await context.abort(grpc.StatusCode.UNAVAILABLE, ticket.due_note)
                    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, self._cut_message(why, ticket))
                waits = {read}
                if ticket is not None and ticket.poke is not None and not ticket.poke.done():
                    waits.add(ticket.poke)
                await asyncio.wait(waits, timeout=deadline - now, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not read.done():
                read.cancel()
        msg = read.result()
        await _check_decoded(context, msg)
        return msg

    def _cut_message(self, why: str, ticket: UploadTicket | None) -> str:
        lim = self.limits
        if why == "idle":
            return f"upload closed: no data for {lim.stream_idle_seconds:g} s (this server's stream_idle_seconds); " \
                   f"retry the batch"
        if why == "total":
            return f"upload closed: the stream took longer than {lim.stream_total_seconds:g} s " \
                   f"(stream_total_seconds); retry the batch"
        return f"upload cut: {ticket.window_bytes} bytes arrived in the last {lim.stream_rate_window_seconds:g} s, " \
               f"below this server's minimum of {lim.stream_min_bytes} bytes per " \
               f"{lim.stream_rate_window_seconds:g} s (stream_min_bytes per stream_rate_window_seconds); send " \
               f"faster or retry the batch"

    async def _upload(self, it, context, who, ticket: UploadTicket):
        started = asyncio.get_running_loop().time()
        first = await self._next_chunk(it, context, started)
        if first is None or not first.HasField("header"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an upload starts with a BatchHeader message")
        h = first.header
        try:
            batch_shape, expected = self._check_header(h, who.actor)
        except Exception as exc:
            await _abort(context, exc)
        await self._admit(0 if h.seed else expected, context, ticket)
        # One buffer of the admitted (header-declared) size, filled in place: no reallocation as it
        # grows, and np.empty leaves its pages untouched, so resident memory still follows the bytes
        # actually received.  A seed upload carries no share data and gets no buffer.
        buf = None if h.seed else np.empty(expected, dtype=np.uint8)
        received = 0
        hasher = hashlib.sha256()
        while (chunk := await self._next_chunk(it, context, started, ticket)) is not None:
            if chunk.HasField("header"):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "only the first message may carry a header")
            data = chunk.data
            if received + len(data) > expected:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"oversize upload: more than the {expected} bytes the header's shape declares")
            if ticket.revoked and data:  # its reservation went to a waiting party while it sent nothing
                await self._admit(expected, context, ticket)
            self._received(ticket, len(data))
            if received + len(data) == expected:
                ticket.receiving = False  # the whole batch is in: only the end of the stream is left
            if buf is not None:
                buf[received:received + len(data)] = np.frombuffer(data, dtype=np.uint8)
            received += len(data)
            hasher.update(data)
        if h.seed:
            share = Share(h.server_index, batch_shape, seed=bytes(h.seed))
        else:
            if received != expected:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"truncated upload: {received} of {expected} bytes; retry the batch")
            if hasher.digest() != bytes(h.data_sha256):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    "payload SHA-256 does not match the header (corrupted in transit?); retry the batch")
            data = buf.view("<u8").astype(np.uint64, copy=False).reshape(batch_shape)
            share = Share(h.server_index, batch_shape, data=data)
        batch = ShareBatch(h.job_digest, h.party_id, int(h.batch_index), int(h.start), int(h.stop),
                           tuple(int(c) for c in h.columns), share, seeded=h.randomness_mode == SEEDED_MODE,
                           aggregate=bool(h.aggregate))
        try:
            receipt = await self._call(self.core.accept, batch, h.job_id, phase=(h.job_id, "store"),
                                       caller_role=who.role, caller_id=who.actor)
        except Exception as exc:
            if isinstance(exc, ProtocolError):
                log.warning("upload refused", extra={"job_id": h.job_id, "party": who.actor, "code": exc.code,
                                                     "reason": bounded(exc.message)})
            await _abort(context, exc)
        return ltm_pb2.UploadReceipt(job_id=receipt.job_id, party_id=receipt.party_id,
                                     batch_index=receipt.batch_index, content_digest=receipt.content_digest,
                                     clients=receipt.clients, bytes_received=received or SEED_BYTES)

    def _check_header(self, h: ltm_pb2.BatchHeader, actor: str) -> tuple[tuple[int, ...], int]:
        """Refuse a bad upload from its header alone, before reading any data."""
        spec = self.core.spec(h.job_id)
        if h.party_id != actor:
            raise ProtocolError("PERMISSION_DENIED", f"{actor} may not upload as {h.party_id!r}")
        if h.job_digest != spec.digest:
            raise ProtocolError("FAILED_PRECONDITION", "the batch names a different job digest; fetch the job spec again")
        if h.randomness_mode not in RANDOMNESS_MODES:
            raise ProtocolError("INVALID_ARGUMENT", f"the upload header must declare its randomness_mode, one of "
                                                    f"{list(RANDOMNESS_MODES)} (got {h.randomness_mode!r})")
        self.core.check_randomness(spec, h.randomness_mode == SEEDED_MODE)
        if h.batch_index > MAX_BATCH_INDEX:
            raise ProtocolError("INVALID_ARGUMENT", f"batch_index {h.batch_index} is too large (at most "
                                                    f"{MAX_BATCH_INDEX}); number a party's batches 0, 1, 2, …")
        shape = tuple(int(x) for x in h.shape)
        if len(shape) != 3 or any(x <= 0 for x in shape):
            raise ProtocolError("INVALID_ARGUMENT", f"shape must be 3 positive integers (pieces, clients, columns), got {shape}")
        expected = 8 * math.prod(shape)  # exact: a giant declared shape must not wrap around in int64
        if expected > self.max_batch_bytes:
            raise ProtocolError("RESOURCE_EXHAUSTED", f"batch of {expected} bytes exceeds the server's limit of "
                                                      f"{self.max_batch_bytes}; send smaller batches")
        if h.seed and len(h.seed) != SEED_BYTES:
            raise ProtocolError("INVALID_ARGUMENT", f"a helper-share seed is {SEED_BYTES} bytes, got {len(h.seed)}")
        if not h.seed and len(h.data_sha256) != 32:
            raise ProtocolError("INVALID_ARGUMENT", "a data upload needs the payload's 32-byte SHA-256 in the header")
        directory = getattr(self.core.store, "directory", None)
        if directory is not None and not h.seed:
            free = shutil.disk_usage(directory).free
            if free - expected < self.limits.min_free_disk_bytes:
                raise ProtocolError("RESOURCE_EXHAUSTED", f"storing {expected} bytes would leave less than "
                                                          f"{self.limits.min_free_disk_bytes} bytes free under the "
                                                          f"server's data directory (min_free_disk_bytes)")
        # Range, columns, addressee and shape against the job — before reading up to 512 MiB of data.
        self.core.check_upload(spec, caller_id=actor, party_id=h.party_id, batch_index=int(h.batch_index),
                               start=int(h.start), stop=int(h.stop), columns=tuple(int(c) for c in h.columns),
                               server=int(h.server_index), shape=shape, aggregate=bool(h.aggregate))
        if self.core.store.is_closed(h.job_id) and \
                self.core.store.get_batch_digest(h.job_id, h.party_id, h.batch_index) is None:
            # A batch already stored may be retried after close (its ack may have been lost): the
            # core answers an identical retry with the same receipt and refuses anything else.
            raise ProtocolError("FAILED_PRECONDITION", f"job {h.job_id!r} is closed to uploads")
        return shape, (0 if h.seed else expected)

    # ------------------------------------------------------------------ close and release
    def _participants(self, spec, request: ltm_pb2.ReleaseRequest) -> ClientSet:
        """The request's participant set: ``participant_ranges`` decoded strictly (hostile input
        is INVALID_ARGUMENT; more ranges than ``max_participant_ranges`` RESOURCE_EXHAUSTED)."""
        data = request.participant_ranges
        limit = self.limits.max_participant_ranges
        if len(data) % 16 == 0 and len(data) // 16 > limit:
            raise ProtocolError("RESOURCE_EXHAUSTED", f"participant set of {len(data) // 16} ranges exceeds this "
                                                      f"server's limit of {limit} (max_participant_ranges)")
        try:
            return ClientSet.from_bytes(spec.n, data, max_ranges=limit)
        except ClientSetError as exc:
            raise ProtocolError("INVALID_ARGUMENT", f"participant_ranges: {exc}") from None

    async def Close(self, request, context):
        """Stop intake of a job (analyst only, the digest must match) and answer the clients this server
        holds (ranges) and the parties whose batches are seeded (reproducible, not private).
        """
        who = await authenticate(context, {"analyst"}, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            spec = self.core.spec(request.job_id)
            if request.job_digest != spec.digest:
                raise ProtocolError("FAILED_PRECONDITION", "the request names a different job digest")
            held = await self._call(self.core.close, request.job_id, caller_role=who.role)
        except Exception as exc:
            await _abort(context, exc)
        log.info("job closed", extra={"job_id": request.job_id, "held": held.count})
        return ltm_pb2.CloseResponse(n=spec.n, held_ranges=held.to_bytes(), held=held.count,
                                     seeded_parties=self.core.seeded_parties(request.job_id))

    async def Release(self, request, context):
        """The job's result share (analyst only): uint64 (m, D), little-endian, streamed in chunks of
        :data:`RELEASE_CHUNK_BYTES`; gated and once-only (:meth:`ltm.server.core.ServerCore.release`).
        """
        who = await authenticate(context, {"analyst"}, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            spec = self.core.spec(request.job_id)
            participants = self._participants(spec, request)
            result = await self._call(self.core.release, request.job_id, participants,
                                      phase=(request.job_id, "release"), caller_role=who.role,
                                      job_digest=request.job_digest)
        except Exception as exc:
            if isinstance(exc, ProtocolError):
                log.warning("release refused", extra={"job_id": request.job_id, "code": exc.code,
                                                      "reason": bounded(exc.message)})
            await _abort(context, exc)
        finally:
            await asyncio.to_thread(return_free_memory)  # the release pass's chunk-sized blocks
        payload = np.ascontiguousarray(result, dtype="<u8").tobytes()
        log.info("released", extra={"job_id": request.job_id, "participants": participants.count})
        yield ltm_pb2.ReleaseChunk(header=ltm_pb2.ReleaseHeader(rows=result.shape[0], cols=result.shape[1],
                                                                result_sha256=hashlib.sha256(payload).digest()))
        for i in range(0, len(payload), RELEASE_CHUNK_BYTES):
            yield ltm_pb2.ReleaseChunk(data=payload[i:i + RELEASE_CHUNK_BYTES])

    # ------------------------------------------------------------------ verified clipping (issue #30)
    async def _check_call(self, request, context, fn, *args):
        """One clipping-check RPC (analyst only, the job digest must match): ``fn`` off the event loop."""
        who = await authenticate(context, {"analyst"}, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            spec = self.core.spec(request.job_id)
            if request.job_digest != spec.digest:
                raise ProtocolError("FAILED_PRECONDITION", "the request names a different job digest")
            return await self._call(fn, request.job_id, *args, caller_role=who.role)
        except Exception as exc:
            log.warning("clipping check refused", extra={"job_id": request.job_id, "reason": bounded(str(exc))})
            await _abort(context, exc)

    async def GetCheckSeed(self, request, context):
        """This server's post-close check seed, signed (:meth:`ltm.server.core.ServerCore.check_seed`)."""
        return to_signed_pb(await self._check_call(request, context, self.core.check_seed))

    async def SubmitCheckSeeds(self, request, context):
        """The relayed signed seed set in, this server's signed check output back
        (:meth:`ltm.server.core.ServerCore.check_output`)."""
        seeds = [from_signed_pb(s) for s in request.seeds]
        return to_signed_pb(await self._check_call(request, context, self.core.check_output, seeds))

    async def SubmitCheckOutputs(self, request, context):
        """The three signed check outputs in; this server's own verdict, recorded once, back
        (:meth:`ltm.server.core.ServerCore.check_verdict`)."""
        outputs = [from_signed_pb(s) for s in request.outputs]
        failures = await self._check_call(request, context, self.core.check_verdict, outputs)
        log.info("clipping verdict", extra={"job_id": request.job_id, "failing": sorted(failures)})
        return ltm_pb2.CheckVerdict(passed=not failures, failing_parties=sorted(failures),
                                    reason=str(ClippingProofFailed(failures)) if failures else "")


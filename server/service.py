"""The server's gRPC layer: a thin ``grpc.aio`` servicer over :class:`server.core.ServerCore`.

Every RPC authenticates the caller from its mTLS certificate (``transport.tls``), hands the
request to the pure core in a worker thread (numpy work must not block the event loop), and maps
:class:`ltm.errors.ProtocolError` to the gRPC status it names (damaged storage → ``DATA_LOSS``;
anything unexpected → ``INTERNAL``, logged; messages cut to a bounded length).  Requests that do
not decode as protobuf are refused with ``INVALID_ARGUMENT`` (:func:`add_to_server` installs
decoders that never raise).  Job specs are size-checked before they are parsed and parsed in a
worker thread, so one caller's spec cannot stall the others.  Uploads are validated from their
header before any data is read; their buffer grows with the bytes received, never with what the
header declares; a stream then waits until its batch fits the server's upload budget
(``max_inflight_bytes``: backpressure, so memory does not grow with how many parties upload at
once); each stream has an idle and a total deadline; concurrent streams are capped per party and
in total (:class:`server.limits.ServerLimits`).  A batch is acknowledged only after the
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

import grpc
import numpy as np

from ltm.batch import RANDOMNESS_MODES, SEEDED_MODE, ShareBatch
from ltm.client_set import ClientSet, ClientSetError
from ltm.errors import DataLossError, ProtocolError, bounded
from ltm.jobspec import JobSpecError
from ltm.sharing import SEED_BYTES, Share
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from server.core import ServerCore
from server.limits import ServerLimits, parse_spec
from transport.memory import return_free_memory
from transport.metering import ByteMeter
from transport.tls import authenticate

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
    if isinstance(exc, ProtocolError):
        await context.abort(getattr(grpc.StatusCode, exc.code), bounded(exc.message))
    if isinstance(exc, JobSpecError):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded(str(exc)))
    if isinstance(exc, DataLossError):
        log.error("stored state damaged", extra={"reason": str(exc)})
        await context.abort(grpc.StatusCode.DATA_LOSS, bounded(str(exc)))
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
    }
    missing = set(ltm_pb2.DESCRIPTOR.services_by_name["Server"].methods_by_name) - set(handlers)
    if missing:  # a new RPC in the .proto must be added here too
        raise RuntimeError(f"add_to_server does not register {sorted(missing)}")
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("ltm.v1.Server", handlers),))


async def _check_decoded(context, request) -> None:
    if isinstance(request, BadRequest):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)


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

    async def GetJob(self, request, context):
        await authenticate(context, insecure=self.insecure)
        await _check_decoded(context, request)
        try:
            spec = self.core.spec(request.job_id)
        except Exception as exc:
            await _abort(context, exc)
        return ltm_pb2.GetJobResponse(spec_json=spec.canonical_json(), job_digest=spec.digest,
                                      closed=self.core.store.is_closed(spec.job_id))

    async def Status(self, request, context):
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
            release_seconds=self.seconds.get((spec.job_id, "release"), 0.0))

    # ------------------------------------------------------------------ upload
    async def Upload(self, request_iterator: AsyncIterator[ltm_pb2.UploadChunk], context):
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
        admitted = [0]  # bytes this stream reserved from max_inflight_bytes (set by _admit)
        try:
            return await self._upload(aiter(request_iterator), context, who, admitted)
        finally:
            self._streams[who.actor] -= 1
            if not self._streams[who.actor]:
                del self._streams[who.actor]
            await self._release_budget(admitted)

    async def _release_budget(self, admitted: list[int]) -> None:
        """Return a stream's reservation to the upload budget and wake the streams waiting for it."""
        if admitted[0]:
            self._inflight -= admitted[0]
            admitted[0] = 0
            async with self._freed():
                self._freed().notify_all()
            # The batch's buffer is free now: hand its pages back (transport/memory.py)
            await asyncio.to_thread(return_free_memory)

    def _freed(self) -> asyncio.Condition:
        if self._budget_freed is None:
            self._budget_freed = asyncio.Condition()
        return self._budget_freed

    async def _admit(self, nbytes: int, context, admitted: list[int]) -> None:
        """Reserve ``nbytes`` of the upload budget (``max_inflight_bytes``) before reading any data.

        Backpressure, so a server's memory does not grow with how many parties upload at once: a
        stream whose batch does not fit waits (its party's data stays unread, so gRPC flow control
        holds the party back) until admitted streams finish, for at most ``stream_idle_seconds``,
        then gets UNAVAILABLE, which parties retry.  A stream reserves only after its header has
        passed every check against the job, so what it reserves is a batch the job allows; a batch
        larger than the whole budget is admitted when nothing else is in flight.  Admitted streams
        never wait for the budget again, so waiting cannot deadlock.
        """
        if not nbytes:  # a helper-share seed: 32 bytes, nothing to hold back
            return
        limit = self.limits.max_inflight_bytes
        cond = self._freed()
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(lambda: not self._inflight or self._inflight + nbytes <= limit),
                                       self.limits.stream_idle_seconds)
            except asyncio.TimeoutError:
                await context.abort(grpc.StatusCode.UNAVAILABLE,  # busy with other uploads: retryable
                                    f"this server has {self._inflight} bytes of uploads in flight, its limit "
                                    f"(max_inflight_bytes); retry the batch later")
            self._inflight += nbytes
            admitted[0] = nbytes

    async def _next_chunk(self, it, context, started: float):
        """The next message of an upload stream, within the idle and total deadlines."""
        lim = self.limits
        loop = asyncio.get_running_loop()
        remaining = lim.stream_total_seconds - (loop.time() - started)
        timeout = min(lim.stream_idle_seconds, remaining)
        try:
            if timeout <= 0:
                raise asyncio.TimeoutError
            msg = await asyncio.wait_for(anext(it, None), timeout)
        except asyncio.TimeoutError:
            if timeout == lim.stream_idle_seconds:
                why = f"no data for {lim.stream_idle_seconds:g} s (this server's stream_idle_seconds)"
            else:
                why = f"the stream took longer than {lim.stream_total_seconds:g} s (stream_total_seconds)"
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"upload closed: {why}; retry the batch")
        await _check_decoded(context, msg)
        return msg

    async def _upload(self, it, context, who, admitted: list[int]):
        started = asyncio.get_running_loop().time()
        first = await self._next_chunk(it, context, started)
        if first is None or not first.HasField("header"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an upload starts with a BatchHeader message")
        h = first.header
        try:
            batch_shape, expected = self._check_header(h, who.actor)
        except Exception as exc:
            await _abort(context, exc)
        await self._admit(0 if h.seed else expected, context, admitted)
        # One buffer of the admitted (header-declared) size, filled in place: no reallocation as it
        # grows, and np.empty leaves its pages untouched, so resident memory still follows the bytes
        # actually received.  A seed upload carries no share data and gets no buffer.
        buf = None if h.seed else np.empty(expected, dtype=np.uint8)
        received = 0
        hasher = hashlib.sha256()
        while (chunk := await self._next_chunk(it, context, started)) is not None:
            if chunk.HasField("header"):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "only the first message may carry a header")
            data = chunk.data
            if received + len(data) > expected:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"oversize upload: more than the {expected} bytes the header's shape declares")
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

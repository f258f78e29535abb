"""The analyst's coordination of one job over gRPC: publish → wait → close → intersect → release.

The analyst never sees data or shares, only result shares.  It publishes the job to all k
servers, waits until every server holds every client or a deadline passes, closes intake,
intersects the servers' participant sets (a client that reached some servers but not all is
dropped everywhere), and requests each server's result share over that set.  Every server
checks the release gate on its own; a refusal from any server is fatal for the release.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from analyst.reconstruct import reconstruct_release
from analyst.release import ReleasedSketch
from ltm.jobspec import JobSpec
from ltm.v1 import ltm_pb2, ltm_pb2_grpc

log = logging.getLogger("ltm.analyst")


class ReleaseFailed(Exception):
    """A release that could not be completed; the message says which server refused and why."""


@dataclass
class JobRun:
    """What happened to one job: per-server participation, the release, the time per phase."""

    release: ReleasedSketch
    participants: np.ndarray
    held_per_server: list[int]
    timing_s: dict[str, float] = field(default_factory=dict)
    release_bytes_per_server: list[int] = field(default_factory=list)


async def publish(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, timeout: float = 30.0) -> str:
    """CreateJob on every server; returns the digest they all acknowledged."""
    body = spec.canonical_json()
    replies = await asyncio.gather(*(s.CreateJob(ltm_pb2.CreateJobRequest(spec_json=body), timeout=timeout,
                                                 wait_for_ready=True) for s in stubs))
    digests = {r.job_digest for r in replies}
    if digests != {spec.digest}:
        raise ReleaseFailed(f"servers acknowledged digests {sorted(digests)} for a spec with digest {spec.digest}")
    return spec.digest


async def wait_for_parties(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, deadline_s: float,
                           poll_s: float = 0.1) -> list[int]:
    """Poll every server until each holds all n clients or ``deadline_s`` passes; returns held counts."""
    end = time.monotonic() + deadline_s
    while True:
        replies = await asyncio.gather(*(s.Status(ltm_pb2.StatusRequest(job_id=spec.job_id), timeout=10.0)
                                         for s in stubs))
        held = [int(r.clients_held) for r in replies]
        if min(held) >= spec.n or time.monotonic() >= end:
            return held
        await asyncio.sleep(poll_s)


async def close_all(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec) -> list[np.ndarray]:
    replies = await asyncio.gather(*(s.Close(ltm_pb2.CloseRequest(job_id=spec.job_id, job_digest=spec.digest),
                                             timeout=30.0) for s in stubs))
    masks = []
    for i, r in enumerate(replies):
        bits = np.frombuffer(r.held_bits, dtype=np.uint8)
        if r.n != spec.n or bits.size != (spec.n + 7) // 8:
            raise ReleaseFailed(f"server {spec.servers[i].server_id} reported a malformed participant set")
        masks.append(np.unpackbits(bits, count=spec.n).astype(bool))
    return masks


async def fetch_result_share(stub: ltm_pb2_grpc.ServerStub, spec: JobSpec, participants: np.ndarray,
                             timeout: float = 300.0) -> tuple[np.ndarray, int]:
    """One server's result share (uint64 (m, D)) and the bytes it streamed."""
    request = ltm_pb2.ReleaseRequest(job_id=spec.job_id, job_digest=spec.digest,
                                     participant_bits=np.packbits(participants).tobytes())
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


async def run_job(stubs: list[ltm_pb2_grpc.ServerStub], spec: JobSpec, *, deadline_s: float,
                  randomness_label: str, publish_first: bool = False) -> JobRun:
    """Coordinate one job to its release (``publish_first``: also CreateJob on every server)."""
    timing: dict[str, float] = {}
    t = time.monotonic()
    if publish_first:
        await publish(stubs, spec)
    held_counts = await wait_for_parties(stubs, spec, deadline_s)
    timing["wait_for_parties"] = time.monotonic() - t
    t = time.monotonic()
    masks = await close_all(stubs, spec)
    participants = np.logical_and.reduce(masks)
    dropped = int(np.logical_or.reduce(masks).sum() - participants.sum())
    if dropped:
        log.warning("clients dropped: their shares did not reach every server",
                    extra={"job_id": spec.job_id, "dropped": dropped})
    timing["close"] = time.monotonic() - t
    t = time.monotonic()
    results = await asyncio.gather(*(fetch_result_share(s, spec, participants) for s in stubs), return_exceptions=True)
    failures = [(spec.servers[i].server_id, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if failures:
        detail = "; ".join(f"{sid}: {getattr(e, 'details', lambda: str(e))()}" for sid, e in failures)
        raise ReleaseFailed(f"release refused or failed ({detail})")
    timing["release"] = time.monotonic() - t
    t = time.monotonic()
    shares = [r[0] for r in results]
    release = reconstruct_release(spec, shares, participants, spec.noise_plan(), randomness=randomness_label)
    timing["reconstruct"] = time.monotonic() - t
    return JobRun(release, participants, [int(m.sum()) for m in masks], timing, [r[1] for r in results])

"""A party's side of the replicated degree-2 release (ltm/replicated.py; docs/architecture.md).

The party forms its block of the client vectors exactly as for a sketch job (public transforms,
then clipping to its budget share C_j), rounds it to the grid 2^-f, replicate-shares it to the
three servers and sends each server an additive share of its integer noise (one value per released
entry, on the product grid 2^-2f).  Which additive share travels explicitly (the others as seeds)
rotates with the party's position, so the servers' download is balanced.

Over gRPC (:func:`run_replicated_upload`) the same uploads travel as three ordinary ``Upload``
calls per server (``batch_index`` = the part: x_i, x_{i+1}, the noise share;
:func:`ltm.replicated.upload_parts`), each one share, a seed where the sharing allows; a job with
verified clipping adds three more (the witness shares w_i, w_{i+1} and the check mask).  The whole
block is one upload (the server needs every client's block to form its products), so a party's
block must fit the servers' ``max_batch_bytes`` (n·d_p·8 bytes: 512 MiB is 16·10⁶ clients of 4
columns).  No upload journal: a party that crashes mid-upload cannot resend different shares (the
servers refuse a changed part), so the job is run again under a new id.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import grpc
import numpy as np

from ltm.batch import ShareBatch
from ltm.clipping import clip_rows
from ltm.jobspec import JobSpec
from ltm.party.data_source import PartySource
from ltm.party.randomizer import client_vectors
from ltm.party.uploader import UploadIncomplete, UploadSummary, upload_batch
from ltm.randomness import Randomness
from ltm.replicated import REPLICATED_PARTS, BlockUpload, party_uploads, upload_parts
from ltm.verified_clipping import proof_shape


def replicated_uploads(spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray],
                       randomness: Randomness, *, noise: bool = True) -> list[BlockUpload]:
    """The party's three uploads (server order).  ``noise=False``: exactness checks only."""
    if not spec.replicated:
        raise ValueError(f"job {spec.job_id!r} is not a replicated release")
    party = spec.party(party_id)
    index = [p.party_id for p in spec.parties].index(party_id)
    block = clip_rows(client_vectors(spec, party, table), party.clip_bound, spec.clip_norm)
    cols = tuple(spec.party_column_indices(party))
    proof = proof_shape(len(cols), spec.frac_bits, party.clip_bound) if spec.verified_clipping else None
    return party_uploads(block, cols, width=spec.width,
                         frac_bits=spec.frac_bits, plan=spec.noise_plan() if noise else None,
                         randomness=randomness, mode=spec.share_mode, primary=index % 3, proof=proof)


def replicated_batches(spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray],
                       randomness: Randomness) -> list[list[ShareBatch]]:
    """Per server (job order), the three wire batches of :func:`replicated_uploads`
    (``batch_index`` = part)."""
    party = spec.party(party_id)
    out = []
    for up in replicated_uploads(spec, party_id, table, randomness):
        out.append([ShareBatch(spec.digest, party_id, part, party.start, party.stop, up.columns, share,
                               seeded=randomness.reproducible)
                    for part, share in enumerate(upload_parts(up))])
    return out


async def run_replicated_upload(stubs, spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray] | PartySource,
                                randomness: Randomness, *, endpoints: list[str] | None = None) -> UploadSummary:
    """Share this party's block and upload its parts to each server (three per server at once: the
    block shares and the noise share, and with verified clipping the witness shares and the mask);
    returns what was sent.  A part a server did not take raises :class:`UploadIncomplete` naming the
    server."""
    t0, started = time.monotonic(), time.time()
    party = spec.party(party_id)
    summary = UploadSummary(party_id, bytes_per_server=[0] * spec.k)
    t = time.monotonic()
    if isinstance(table, PartySource):
        table = await asyncio.to_thread(table.read, 0, party.size, spec.party_raw_columns(party))
    summary.read_s = time.monotonic() - t
    t = time.monotonic()
    per_server = await asyncio.to_thread(replicated_batches, spec, party_id, table, randomness)
    summary.sharing_s = time.monotonic() - t
    t = time.monotonic()
    flat = [b for batches in per_server for b in batches]
    # at most three streams per server at once (a verified job has six parts; servers limit a
    # party's open streams, max_streams_per_party, 4 by default)
    lanes = [asyncio.Semaphore(REPLICATED_PARTS) for _ in range(spec.k)]

    async def send(b: ShareBatch):
        async with lanes[b.server]:
            return await upload_batch(stubs[b.server], b, spec.job_id)

    results = await asyncio.gather(*(send(b) for b in flat), return_exceptions=True)
    summary.upload_s = time.monotonic() - t
    for b, r in zip(flat, results):
        if isinstance(r, BaseException):
            where = spec.servers[b.server].server_id + (f" at {endpoints[b.server]}" if endpoints else "")
            detail = f"{r.code().name}: {r.details()}" if isinstance(r, grpc.aio.AioRpcError) else str(r)
            raise UploadIncomplete(f"replicated part {b.batch_index} could not be delivered to {where}: {detail}") \
                from r
        summary.bytes_per_server[b.server] += b.share.nbytes
        summary.retries += r[1]
    summary.batches, summary.clients = 1, party.size
    summary.seconds = time.monotonic() - t0
    summary.started_unix, summary.finished_unix = started, time.time()
    return summary

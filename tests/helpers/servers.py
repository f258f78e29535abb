"""Real ``ltm server`` processes as the tests see them, and the test process's stubs on them.

:class:`Servers` is what ``tests/integration/conftest.py``'s ``start_servers`` fixture returns; the
test process plays the analyst and the parties through the same upload and coordination code the
``ltm party`` and ``ltm analyst`` processes run, over mutual TLS with the actor's certificate."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from ltm.analyst.coordinator import DEFAULT_RETRY, JobRun, RetryPolicy, publish, run_job
from ltm.party.randomizer import party_randomness
from ltm.party.uploader import fetch_job, run_upload
from ltm.sim.localnet.launcher import ActorProcess, ProcessGroup
from ltm.transport.tls import make_channel, make_sync_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc


def pinned(server: ActorProcess) -> list[tuple[str, str]]:
    """Channel options that check ``server``'s own certificate name, as a party given --server-ids does."""
    return [("grpc.ssl_target_name_override", server.actor)]


def aio_stubs(servers: Sequence[ActorProcess], certs: Path, actor: str) -> tuple[list[grpc.aio.Channel], list]:
    """``actor``'s asyncio channels (one per server, each pinned to its server's name) and their stubs.
    Call it inside the event loop that uses them, and close the channels with :func:`close_channels`."""
    channels = [make_channel(s.endpoint, certs, actor, options=pinned(s)) for s in servers]
    return channels, [ltm_pb2_grpc.ServerStub(c) for c in channels]


async def close_channels(channels: Sequence[grpc.aio.Channel]) -> None:
    """Close asyncio channels (from :func:`aio_stubs`) in the loop that opened them."""
    for c in channels:
        await c.close()


@dataclass
class Servers:
    """k running server processes: their work directory, the certificates of every actor, the group
    that started them (to start more actors) and the processes (``.endpoint``, ``.actor``)."""
    work: Path
    certs: Path
    group: ProcessGroup
    servers: list[ActorProcess]
    channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def endpoints(self) -> list[str]:
        return [s.endpoint for s in self.servers]

    def channel(self, process: ActorProcess, actor: str) -> grpc.Channel:
        """A blocking channel of ``actor`` to any process of the group (pinned to its name); closed with the
        servers."""
        self.channels.append(make_sync_channel(process.endpoint, self.certs, actor, options=pinned(process)))
        return self.channels[-1]

    def stubs(self, actor: str) -> list[ltm_pb2_grpc.ServerStub]:
        """``actor``'s blocking stubs, one per server (pinned to its name); closed with the servers."""
        return [ltm_pb2_grpc.ServerStub(self.channel(s, actor)) for s in self.servers]

    def aio_stubs(self, actor: str, certs: Path | None = None) -> tuple[list[grpc.aio.Channel], list]:
        """:func:`aio_stubs` on these servers, with this deployment's certificates unless ``certs``."""
        return aio_stubs(self.servers, certs or self.certs, actor)

    def assert_running(self) -> None:
        """Every server is still up (a test that crashed one fails with its log)."""
        for s in self.servers:
            assert s.proc.poll() is None, s.log_tail()

    def stop(self) -> None:
        """Close every blocking channel, then stop every process of the group."""
        for ch in self.channels:
            ch.close()
        self.group.stop_all()


async def upload_all(servers: Servers, spec, tables: dict, randomness, *, parties: Sequence[str] | None = None,
                     fetch: bool = False, upload: Callable[..., Any] = run_upload, **upload_options) -> None:
    """Every party of ``spec`` (or ``parties``) uploads its table with its own certificate, one after
    another, through ``upload`` (:func:`ltm.party.uploader.run_upload`, without progress bars, unless given;
    ``upload_options`` go to it).  With ``fetch`` each party first fetches the job from every server
    and checks its digest, as ``ltm party`` does."""
    if upload is run_upload:
        upload_options.setdefault("progress", False)  # no progress bars in the test log
    for pid in parties or [p.party_id for p in spec.parties]:
        channels, stubs = servers.aio_stubs(pid)
        try:
            job = spec
            if fetch:
                job = await fetch_job(stubs, spec.job_id)
                assert job.digest == spec.digest
            await upload(stubs, job, pid, tables[pid], party_randomness(randomness, spec, pid), **upload_options)
        finally:
            await close_channels(channels)


async def release_over_grpc(servers: Servers, spec, tables: dict, randomness, *, deadline_s: float = 10,
                            policy: RetryPolicy = DEFAULT_RETRY, **upload_options) -> JobRun:
    """The analyst publishes ``spec``, the parties upload (:func:`upload_all` with ``upload_options``) and
    the analyst runs the job to its release (:func:`ltm.analyst.coordinator.run_job` with ``deadline_s`` and
    ``policy``)."""
    channels, analyst = servers.aio_stubs("analyst")
    try:
        await publish(analyst, spec)
        await upload_all(servers, spec, tables, randomness, **upload_options)
        return await run_job(analyst, spec, deadline_s=deadline_s, randomness_label=randomness.label, policy=policy)
    finally:
        await close_channels(channels)


async def publish_over_grpc(servers: Servers, spec) -> None:
    """The analyst publishes ``spec`` on every server."""
    channels, analyst = servers.aio_stubs("analyst")
    try:
        await publish(analyst, spec)
    finally:
        await close_channels(channels)


def create_job(analyst: Sequence[ltm_pb2_grpc.ServerStub], spec, timeout: float = 20.0) -> str:
    """The analyst's blocking CreateJob of ``spec`` on every server (each must answer with its digest);
    returns the job id."""
    for stub in analyst:
        assert stub.CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()),
                              timeout=timeout).job_digest == spec.digest
    return spec.job_id


def held(analyst: Sequence[ltm_pb2_grpc.ServerStub], job_id: str, timeout: float = 20.0) -> list[tuple[int, int]]:
    """(clients held, batches stored) of ``job_id`` on each server, from its Status RPC."""
    return [(r.clients_held, r.batches) for r in
            (stub.Status(ltm_pb2.StatusRequest(job_id=job_id), timeout=timeout) for stub in analyst)]

"""Fault injection for ``ltm demo --chaos``: SIGKILL servers while a job runs, restart them, report.

Two kills, each followed by a restart on the same port with the same data directory
(:meth:`ltm.sim.localnet.launcher.ProcessGroup.restart`):

1. **mid-upload.**  Half of the parties are started; once every server has acknowledged their
   clients, server-1 is SIGKILLed and the other half of the parties is started against the dead
   server (they retry); after about a second server-1 is restarted.  It must come back holding at
   least every client it had acknowledged — otherwise the run fails.
2. **mid-release.**  As soon as every server reports the job closed (the analyst is about to
   request the result shares), the last server is frozen (SIGSTOP) so that the analyst's Release
   to it is in flight or being computed, then SIGKILLed once server-0 reports its release (or after
   3 s) and restarted.  The analyst retries and gets the same bytes.  This is a race with the
   analyst, so the event's ``phase`` says what the kill actually interrupted, judged from the
   analyst's retries: ``release``, ``close`` (the server had committed its close but not answered),
   or ``after-release`` (it had already answered; its persisted release record had to survive).

Nothing here changes what is computed: the release must equal the undisturbed run's.
"""
from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from ltm.errors import LtmError
from ltm.jobspec import JobSpec, PartySpec
from ltm.sim.localnet.launcher import ActorProcess, ProcessGroup
from ltm.transport.tls import make_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc


class ChaosFailure(LtmError, RuntimeError):
    """The system did not survive a fault (e.g. a restarted server lost acknowledged batches)."""


class Chaos:
    """Runs the kills described in the module docstring beside a job (see ``ltm/sim/localnet/demo.py``)."""

    def __init__(self, group: ProcessGroup, servers: Sequence[ActorProcess], spec: JobSpec, certs: Path | None,  # noqa: PLR0913 - the processes it kills and restarts, and three keyword-only timings
                 insecure: bool, start_parties: Callable[[Sequence[PartySpec]], None], *,
                 down_s: float = 1.0, poll_s: float = 0.005, timeout_s: float = 180.0) -> None:
        self.group, self.servers, self.spec = group, list(servers), spec
        self.certs, self.insecure = certs, insecure
        self.start_parties = start_parties
        self.down_s, self.poll_s, self.timeout_s = down_s, poll_s, timeout_s
        self.events: list[dict] = []
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ helpers
    def _stub(self, ap: ActorProcess) -> tuple[grpc.aio.Channel, ltm_pb2_grpc.ServerStub]:
        options = None if self.insecure else [("grpc.ssl_target_name_override", ap.actor)]
        channel = make_channel(ap.endpoint, self.certs, "operator", insecure=self.insecure, options=options)
        return channel, ltm_pb2_grpc.ServerStub(channel)

    async def _status(self, stub: ltm_pb2_grpc.ServerStub) -> ltm_pb2.StatusResponse | None:
        try:
            return await stub.Status(ltm_pb2.StatusRequest(job_id=self.spec.job_id), timeout=2.0)
        except grpc.aio.AioRpcError:
            return None

    async def _until(self, stub, predicate, what: str, timeout: float | None = None,
                     poll_s: float | None = None) -> ltm_pb2.StatusResponse | None:
        end = time.monotonic() + (timeout if timeout is not None else self.timeout_s)
        while True:
            st = await self._status(stub)
            if st is not None and predicate(st):
                return st
            if time.monotonic() > end:
                if timeout is not None:
                    return None
                raise ChaosFailure(f"chaos: gave up waiting until {what}")
            await asyncio.sleep(self.poll_s if poll_s is None else poll_s)

    def _now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    async def _restart(self, ap: ActorProcess, event: dict) -> None:
        t = time.monotonic()
        await asyncio.to_thread(self.group.restart, ap)
        event.update(restarted_at_s=self._now(), restart_s=round(time.monotonic() - t, 3), new_pid=ap.pid)

    # ------------------------------------------------------------------ the run
    async def run(self) -> None:
        parties = list(self.spec.parties)
        half = len(parties) // 2
        first, second = parties[:half], parties[half:]
        k = len(self.servers)
        links = [self._stub(ap) for ap in self.servers]
        stubs = [s for _, s in links]
        try:
            # 1. mid-upload: SIGKILL server-1 once the first half of the parties is acknowledged everywhere
            victim = self.servers[1 % k]
            acknowledged = sum(p.size for p in first)
            self.start_parties(first)
            for stub in stubs:
                await self._until(stub, lambda st: st.clients_held >= acknowledged,
                                  f"every server held the first {acknowledged} clients")
            event = {"phase": "upload", "server": victim.actor, "signal": "SIGKILL", "pid": victim.pid,
                     "at_s": self._now(), "clients_acknowledged_before_kill": acknowledged, "of": self.spec.n}
            await asyncio.to_thread(self.group.kill, victim)
            self.events.append(event)
            self.start_parties(second)  # they meet a dead server and retry
            event["parties_started_while_down"] = [p.party_id for p in second]
            await asyncio.sleep(self.down_s)
            await self._restart(victim, event)
            st = await self._until(stubs[1 % k], lambda st: True, f"{victim.actor} answered after its restart")
            event["held_after_restart"] = int(st.clients_held)
            if st.clients_held < acknowledged:
                raise ChaosFailure(f"{victim.actor} lost acknowledged batches: it held {acknowledged} clients before "
                                   f"SIGKILL and {st.clients_held} after its restart")

            # 2. mid-release: freeze the last server as soon as every server is closed (the analyst is
            #    about to request, or computing, the result shares), SIGKILL it once server-0 has released
            #    (the analyst's Release to the frozen server is then in flight)
            victim = self.servers[k - 1]
            await self._until(stubs[0], lambda st: st.closed, "server-0 reported the job closed")
            await self._until(stubs[k - 1], lambda st: st.closed, f"{victim.actor} reported the job closed",
                              poll_s=0.0)  # then freeze it at once: the analyst's Release follows within ms
            victim.proc.send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            released = await self._until(stubs[0], lambda st: st.released, "server-0 released", timeout=3.0)
            event = {"phase": "release" if released is not None else "close", "server": victim.actor,
                     "signal": "SIGKILL", "pid": victim.pid, "at_s": self._now(),
                     "frozen_s": round(time.monotonic() - frozen_at, 3)}
            await asyncio.to_thread(self.group.kill, victim)
            self.events.append(event)
            await self._restart(victim, event)
        finally:
            for channel, _ in links:
                await channel.close()

    def report(self, analyst_retries: dict | None = None, party_retries: dict | None = None) -> dict:
        """The ``"chaos"`` section of the demo's output.  Per event, ``analyst_retries`` are the
        analyst's retried calls to that server over the whole job, by call (``{"Release": 3}`` when
        the kill interrupted its Release; empty when the server had already answered)."""
        analyst_retries = analyst_retries or {}
        events = []
        for e in self.events:
            retried = analyst_retries.get(e["server"], {})
            e = {**e, "analyst_retries": retried}
            if e["phase"] != "upload":  # say what the kill actually interrupted, from the analyst's retries
                e["phase"] = "release" if "Release" in retried else "close" if "Close" in retried else "after-release"
            events.append(e)
        return {"server_restarts": sum(1 for e in self.events if "new_pid" in e), "events": events,
                "analyst_retries": analyst_retries, "party_retries": party_retries or {}}

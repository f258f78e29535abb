"""The in-process runtime: parties → k servers → analyst as direct calls in one process.

It wires the same pure cores the gRPC actors use (party randomizer, server core with an in-memory
store, analyst reconstruction), so a run here and a networked run with the same seeds release
bit-identical sketches.  Used by ``ltm simulate`` and experiment sweeps.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ltm.analyst.coordinator import coordinate
from ltm.analyst.release import ReleasedSketch
from ltm.client_set import ClientSet
from ltm.jobspec import JobSpec, validate_job
from ltm.party.ledger import Budget, PrivacyLedger, source_fingerprint
from ltm.party.randomizer import DEFAULT_BATCH_CLIENTS, make_batches, party_randomness
from ltm.party.uploader import PartyPolicy, PolicyViolation
from ltm.progress import progress_bar
from ltm.randomness import Randomness
from ltm.server.core import ServerCore
from ltm.server.release_gate import ANALYST_ROLE


@dataclass
class InProcessRun:
    """A finished in-process job: the release, the participant set and what it cost.

    ``ledgers``: per party, its privacy ledger's admission of the job (spend before and after,
    budget, accountant) — the same ledger a ``ltm party`` process keeps (``party/ledger.py``).
    """

    release: ReleasedSketch
    participants: ClientSet
    timing_s: dict[str, float] = field(default_factory=dict)
    bytes_to_server: list[int] = field(default_factory=list)
    result_shares: list[np.ndarray] = field(default_factory=list)
    #: party id → why its policy refused the job (it sent nothing)
    refused: dict[str, str] = field(default_factory=dict)
    #: party id → its privacy ledger's admission of the job (spend before and after, budget,
    #: accountant): the same ledger a ``ltm party`` process keeps (``party/ledger.py``)
    ledgers: dict[str, dict] = field(default_factory=dict)


@dataclass
class InProcessServerLink:
    """A :class:`~ltm.analyst.coordinator.ServerLink` to a server core in this process (the analyst's
    calls as direct method calls, with the analyst's role)."""

    core: ServerCore
    seeded_parties: list[str] = field(default_factory=list)

    @property
    def server_id(self) -> str:
        return self.core.server_id

    async def create(self, spec: JobSpec) -> str:
        return self.core.create_job(spec, caller_role=ANALYST_ROLE)

    async def held_count(self, spec: JobSpec) -> int | None:
        return self.core.held(spec.job_id).count

    async def close(self, spec: JobSpec) -> ClientSet:
        held = self.core.close(spec.job_id, caller_role=ANALYST_ROLE)
        self.seeded_parties = self.core.seeded_parties(spec.job_id)
        return held

    async def release(self, spec: JobSpec, participants: ClientSet) -> tuple[np.ndarray, int]:
        share = self.core.release(spec.job_id, participants, caller_role=ANALYST_ROLE, job_digest=spec.digest)
        return share, share.nbytes

    async def check_seed(self, spec: JobSpec):
        return self.core.check_seed(spec.job_id, caller_role=ANALYST_ROLE)

    async def check_output(self, spec: JobSpec, seeds):
        return self.core.check_output(spec.job_id, seeds, caller_role=ANALYST_ROLE)

    async def check_verdict(self, spec: JobSpec, outputs) -> list[str]:
        return sorted(self.core.check_verdict(spec.job_id, outputs, caller_role=ANALYST_ROLE))


def policy_refusal(spec: JobSpec, party_id: str, policies: Mapping[str, PartyPolicy] | None, *,
                   seeded: bool) -> str | None:
    """Why the party's policy (``policies[party_id]``, if it has one) refuses ``spec``, or None."""
    policy = (policies or {}).get(party_id)
    if policy is None:
        return None
    try:
        policy.check(spec, seeded=seeded)
    except PolicyViolation as exc:
        return str(exc)
    return None


def _send(spec: JobSpec, accepting: list, party_data: Mapping[str, Mapping[str, np.ndarray]],  # noqa: PLR0913 - one upload round's state; the one participate path is #34 item 3
          randomness: Randomness, servers: list[ServerCore], plan, batch_clients: int, timing: dict[str, float],
          progress: bool) -> list[int]:
    """Every accepting party randomizes, shares and sends its batches to the server cores; returns the
    bytes each server received and adds the seconds spent randomizing and sending to ``timing``."""
    sent = [0] * spec.k
    t_party = t_upload = 0.0
    bar = progress_bar(sum(p.size for p in accepting), spec.job_id, unit="clients", quiet=not progress)
    for party in accepting:
        t = time.perf_counter()
        batches = make_batches(spec, party.party_id, party_data[party.party_id],
                               party_randomness(randomness, spec, party.party_id), plan=plan,
                               batch_clients=batch_clients)
        for per_server in batches:
            t_party += time.perf_counter() - t
            t = time.perf_counter()
            for server, batch in zip(servers, per_server):
                server.accept(batch, spec.job_id, caller_role="party", caller_id=party.party_id)
                sent[batch.server] += batch.share.nbytes
            bar.update(per_server[0].count)
            t_upload += time.perf_counter() - t
            t = time.perf_counter()
        t_party += time.perf_counter() - t
    bar.close()
    timing["randomize_and_share"] = t_party
    timing["upload"] = t_upload
    return sent


def run_inprocess(spec: JobSpec, party_data: Mapping[str, Mapping[str, np.ndarray]], randomness: Randomness,  # noqa: PLR0913 - keyword-only runtime options; the one participate path is #34 item 3
                  *, batch_clients: int = DEFAULT_BATCH_CLIENTS,
                  servers: list[ServerCore] | None = None,
                  policies: Mapping[str, PartyPolicy] | None = None,
                  ledgers: Mapping[str, PrivacyLedger] | None = None, budget: Budget | None = None,
                  ledger_dir: str | os.PathLike[str] | None = None, progress: bool = False) -> InProcessRun:
    """Run one job end to end.

    Args:
        party_data: party id → its table (column name → values for the rows it holds).
        randomness: the run's randomness; party p draws from
            :func:`ltm.party.randomizer.party_randomness` of it (seeded: bound to the job digest).
        servers: server cores to use (fresh in-memory ones by default).
        policies: party id → the party's policy, checked against the spec before the party sends
            anything (as ``ltm party`` does); a refusing party sends nothing and is listed in
            ``refused``.  Parties without an entry accept the job.
        ledgers: party id → its privacy ledger (e.g. persistent ones, to charge a sequence of runs);
            a party without one gets its ledger in ``ledger_dir`` (``ltm party --ledger-dir``: one
            persistent ledger per party id, charged by every run whatever its data), or without
            ``ledger_dir`` a fresh in-memory ledger (each run a world of its own), with ``budget``
            (default :class:`ltm.party.ledger.Budget`).  Every accepting party's ledger admits the job
            before it sends anything, as ``ltm party`` does, recording its data's fingerprint; a
            party whose ledger cannot afford the job raises :class:`ltm.party.ledger.BudgetExceeded`
            (before any party has sent anything).
        progress: a progress bar of the clients randomized and sent (:mod:`ltm.progress`: on stderr, on
            a terminal only).
    """
    if spec.replicated:  # columns partition, degree-2: three servers on replicated shares
        from ltm.sim.runtime.replicated_run import run_replicated
        return run_replicated(spec, party_data, randomness, policies=policies, ledgers=ledgers, budget=budget)
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    analysis = validate_job(spec)
    servers = servers or [ServerCore(s.server_id) for s in spec.servers]
    for server in servers:
        server.create_job(spec, caller_role=ANALYST_ROLE)
    timing["create"] = time.perf_counter() - t0

    # Every party vets the job (its policy) and, if it accepts, charges its ledger, before any party
    # sends anything.
    refused: dict[str, str] = {}
    admissions: dict[str, dict] = {}
    accepting = []
    for party in spec.parties:
        if party.party_id not in party_data:
            continue  # a party that never shows up: its clients are simply not in the participant set
        if (why := policy_refusal(spec, party.party_id, policies, seeded=randomness.reproducible)) is not None:
            refused[party.party_id] = why
            continue
        ledger = (ledgers or {}).get(party.party_id) or (
            PrivacyLedger.open(ledger_dir, party.party_id, budget) if ledger_dir is not None
            else PrivacyLedger.in_memory(party.party_id, budget))
        admissions[party.party_id] = ledger.admit(spec, seeded=randomness.reproducible,
                                                  data_fingerprint=source_fingerprint(party_data[party.party_id])
                                                  ).to_json()
        accepting.append(party)
    timing["ledger"] = time.perf_counter() - t0 - timing["create"]

    sent = _send(spec, accepting, party_data, randomness, servers, analysis.noise_plan, batch_clients, timing,
                 progress)

    run = asyncio.run(coordinate([InProcessServerLink(server) for server in servers], spec, deadline_s=0.0,
                                 randomness_label=randomness.label))
    timing["release"] = run.timing_s["close"] + run.timing_s["release"]
    timing["reconstruct"] = run.timing_s["reconstruct"]
    return InProcessRun(run.release, run.participants, timing, sent, run.result_shares, refused, admissions)

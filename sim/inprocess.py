"""The in-process transport: parties → k servers → analyst as direct calls in one process.

It wires the same pure cores the gRPC actors use (party randomizer, server core with an in-memory
store, analyst reconstruction), so a run here and a networked run with the same seeds release
bit-identical sketches.  Used by ``ltm simulate`` and experiment sweeps.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from analyst.reconstruct import reconstruct_release
from analyst.release import ReleasedSketch
from ltm.jobspec import JobSpec, validate_job
from ltm.randomness import Randomness
from party.ledger import Budget, PrivacyLedger
from party.randomizer import DEFAULT_BATCH_CLIENTS, make_batches, party_randomness
from party.uploader import PartyPolicy
from server.core import ServerCore
from server.release_gate import ANALYST_ROLE


@dataclass
class InProcessRun:
    """A finished in-process job: the release, the participant set and what it cost.

    ``ledgers``: per party, its privacy ledger's admission of the job (spend before and after,
    budget, accountant) — the same ledger a ``ltm party`` process keeps (``party/ledger.py``).
    """

    release: ReleasedSketch
    participants: np.ndarray
    timing_s: dict[str, float] = field(default_factory=dict)
    bytes_to_server: list[int] = field(default_factory=list)
    result_shares: list[np.ndarray] = field(default_factory=list)
    ledgers: dict[str, dict] = field(default_factory=dict)


def run_inprocess(spec: JobSpec, party_data: Mapping[str, Mapping[str, np.ndarray]], randomness: Randomness,
                  *, batch_clients: int = DEFAULT_BATCH_CLIENTS,
                  servers: list[ServerCore] | None = None,
                  ledgers: Mapping[str, PrivacyLedger] | None = None, budget: Budget | None = None,
                  policy: PartyPolicy | None = None) -> InProcessRun:
    """Run one job end to end.

    Args:
        party_data: party id → its table (column name → values for the rows it holds).
        randomness: the run's randomness; party p draws from
            :func:`party.randomizer.party_randomness` of it (seeded: bound to the job digest).
        servers: server cores to use (fresh in-memory ones by default).
        ledgers: party id → its privacy ledger (e.g. persistent ones, to charge a sequence of runs);
            a party without one gets a fresh in-memory ledger with ``budget`` (default
            :class:`party.ledger.Budget`).  Every party's ledger admits the job before it sends
            anything, exactly as ``ltm party`` does: :class:`party.ledger.BudgetExceeded` otherwise.
        policy: if given, every party also checks the job against it (``PartyPolicy.check``).
    """
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    analysis = validate_job(spec)
    servers = servers or [ServerCore(s.server_id) for s in spec.servers]
    for server in servers:
        server.create_job(spec, caller_role=ANALYST_ROLE)
    timing["create"] = time.perf_counter() - t0

    admissions: dict[str, dict] = {}
    present = [p for p in spec.parties if p.party_id in party_data]
    for party in present:  # every party vets the job and charges its ledger before anything is sent
        if policy is not None:
            policy.check(spec, seeded=randomness.reproducible)
        ledger = (ledgers or {}).get(party.party_id) or PrivacyLedger.in_memory(
            party.party_id, party_data[party.party_id], budget)
        admissions[party.party_id] = ledger.admit(spec, seeded=randomness.reproducible).to_json()
    timing["ledger"] = time.perf_counter() - t0 - timing["create"]

    sent = [0] * spec.k
    t_party = t_upload = 0.0
    for party in present:  # a party that never shows up: its clients are simply not in the participant set
        t = time.perf_counter()
        batches = make_batches(spec, party.party_id, party_data[party.party_id],
                               party_randomness(randomness, spec, party.party_id), plan=analysis.noise_plan,
                               batch_clients=batch_clients)
        for per_server in batches:
            t_party += time.perf_counter() - t
            t = time.perf_counter()
            for server, batch in zip(servers, per_server):
                server.accept(batch, spec.job_id, caller_role="party", caller_id=party.party_id)
                sent[batch.server] += batch.share.nbytes
            t_upload += time.perf_counter() - t
            t = time.perf_counter()
        t_party += time.perf_counter() - t
    timing["randomize_and_share"] = t_party
    timing["upload"] = t_upload

    t = time.perf_counter()
    held = [server.close(spec.job_id, caller_role=ANALYST_ROLE) for server in servers]
    seeded = sorted({p for server in servers for p in server.seeded_parties(spec.job_id)})
    participants = np.logical_and.reduce(held)
    shares = [server.release(spec.job_id, participants, caller_role=ANALYST_ROLE, job_digest=spec.digest)
              for server in servers]
    timing["release"] = time.perf_counter() - t

    t = time.perf_counter()
    release = reconstruct_release(spec, shares, participants, analysis.noise_plan, randomness=randomness.label,
                                  seeded_parties=seeded)
    timing["reconstruct"] = time.perf_counter() - t
    return InProcessRun(release, participants, timing, sent, shares, admissions)

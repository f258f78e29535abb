"""The replicated degree-2 release in process: parties → three servers → analyst as direct calls.

The same pure cores a networked run would use (party/replicated.py, server/replicated.py,
analyst/replicated.py); :func:`ltm.sim.runtime.inprocess.run_inprocess` hands a replicated job (columns
partition, kind ``gram``) to :func:`run_replicated`.  Every party's policy and ledger vet the job
before any party sends anything, as for a sketch job.  Every party must take part: the servers
need every block of the joint vector (there is no partial participation in the columns partition).
"""
from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from ltm.analyst.replicated import clipping_verdict, replicated_release
from ltm.client_set import ClientSet
from ltm.jobspec import JobSpec, validate_job
from ltm.party.ledger import Budget, PrivacyLedger, source_fingerprint
from ltm.party.randomizer import party_randomness
from ltm.party.replicated import replicated_uploads
from ltm.party.uploader import PartyPolicy
from ltm.randomness import Randomness
from ltm.server.replicated import ReplicatedServer
from ltm.sim.runtime.inprocess import policy_refusal
from ltm.verified_clipping import mask_key_pairs


def verify_clipping(spec: JobSpec, servers: list[ReplicatedServer], seeds: list[bytes | None]) -> None:
    """The clipping checks (issue #30) as the analyst relays them: every server's post-close seed to
    every server, then every server's check shares to every server, whose own gate decides, once
    (:meth:`ReplicatedServer.accept_checks`).  Raises :class:`ClippingProofFailed` naming the
    failing parties (the analyst's verdict, :func:`ltm.analyst.replicated.clipping_verdict`, is the same
    sum; each server's gate refuses its output on its own)."""
    relayed = [s for s in seeds if s is not None]
    shares = [server.check_shares(relayed) for server in servers]
    for server in servers:
        server.accept_checks(shares)
    clipping_verdict(spec, shares)


def replicated_servers(spec: JobSpec) -> list[ReplicatedServer]:
    """The three servers of an in-process replicated job.  With verified clipping, each pair of
    servers (j, j + 1) shares a fresh key k_{j,j+1} from the system CSPRNG for the check's
    zero-sharing (:func:`ltm.verified_clipping.mask_key_pairs`); in process they are handed over
    directly; over gRPC each server derives its two from a signed X25519 exchange relayed by the
    analyst (:func:`ltm.verified_clipping.pairwise_mask_keys`, docs/architecture.md)."""
    if not spec.verified_clipping:
        return [ReplicatedServer(spec, i) for i in range(spec.k)]
    system = Randomness.system()
    pairs = mask_key_pairs([system.child("check-mask-key", j).bytes(32) for j in range(spec.k)])
    return [ReplicatedServer(spec, i, mask_keys=pairs[i]) for i in range(spec.k)]


def run_replicated(spec: JobSpec, party_data: Mapping[str, Mapping[str, np.ndarray]], randomness: Randomness, *,
                   policies: Mapping[str, PartyPolicy] | None = None,
                   ledgers: Mapping[str, PrivacyLedger] | None = None, budget: Budget | None = None,
                   noise: bool = True):
    """Run one replicated job end to end; returns a :class:`ltm.sim.runtime.inprocess.InProcessRun`.

    A refusing or absent party means no release (every block is needed): ValueError naming it.
    ``noise=False`` (exactness checks only) skips the parties' noise but keeps their masks.
    """
    from ltm.sim.runtime.inprocess import InProcessRun  # the run record lives with the sketch transport

    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    validate_job(spec)
    servers = replicated_servers(spec)
    timing["create"] = time.perf_counter() - t0
    refused: dict[str, str] = {}
    for party in spec.parties:
        if party.party_id not in party_data:
            refused[party.party_id] = "absent"
            continue
        if (why := policy_refusal(spec, party.party_id, policies, seeded=randomness.reproducible)) is not None:
            refused[party.party_id] = why
    if refused:
        raise ValueError(f"the replicated release needs every party's block; not sent by: {refused}")
    admissions = {}
    for party in spec.parties:
        ledger = (ledgers or {}).get(party.party_id) or PrivacyLedger.in_memory(party.party_id, budget)
        admissions[party.party_id] = ledger.admit(spec, seeded=randomness.reproducible,
                                                  data_fingerprint=source_fingerprint(party_data[party.party_id])
                                                  ).to_json()
    timing["ledger"] = time.perf_counter() - t0 - timing["create"]
    sent = [0] * spec.k
    t = time.perf_counter()
    for party in spec.parties:
        ups = replicated_uploads(spec, party.party_id, party_data[party.party_id],
                                 party_randomness(randomness, spec, party.party_id), noise=noise)
        for server, up in zip(servers, ups):
            server.accept(party.party_id, up)
            sent[up.server] += up.nbytes
    timing["randomize_and_share"] = time.perf_counter() - t
    t = time.perf_counter()
    seeds = [server.close() for server in servers]
    if spec.verified_clipping:
        verify_clipping(spec, servers, seeds)  # ClippingProofFailed: nothing released
        timing["verify_clipping"] = time.perf_counter() - t
        t = time.perf_counter()
    outputs = [server.output() for server in servers]
    timing["release"] = time.perf_counter() - t
    t = time.perf_counter()
    release = replicated_release(spec, outputs, randomness=randomness.label)
    timing["reconstruct"] = time.perf_counter() - t
    return InProcessRun(release, ClientSet.full(spec.n), timing, sent, outputs, {}, admissions)

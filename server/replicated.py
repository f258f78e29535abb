"""A server's side of the replicated degree-2 release (ltm/replicated.py; docs/architecture.md).

Server i of the three collects, from every party, the pair of additive shares (x_i, x_{i+1}) of the
party's grid-rounded block and the party's share of its noise, and computes its output share of
triu(ZᵀZ) + noise locally (:func:`ltm.replicated.server_output`): it never talks to the other
servers.  It refuses a job that is not a replicated release, and an upload for another server,
another job, or a party it already holds.

Over gRPC the same class computes the output share: :class:`ltm.server.core.ServerCore` stores each
party's three wire parts as ordinary batches (``BatchHeader.batch_index`` = the part,
:data:`ltm.replicated.PART_FIRST` …), checks each header with :func:`check_part`, counts a job's
clients as held only when every party's three parts are in (:func:`holds_every_part`), applies
:func:`check_replicated_release` (its own release gate) and then :func:`stored_output`, which
feeds the stored parts to :class:`ReplicatedServer` — one implementation for both paths.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

import numpy as np

from ltm.batch import ShareBatch
from ltm.client_set import ClientSet
from ltm.errors import ProtocolError
from ltm.jobspec import JobSpec, PartySpec, validate_job
from ltm.randomness import Randomness
from ltm.replicated import (
    PART_CHECK_MASK,
    PART_NOISE,
    PART_WITNESS_FIRST,
    PART_WITNESS_SECOND,
    REPLICATED_PARTS,
    BlockUpload,
    parts_per_upload,
    server_output,
    triangle_width,
    upload_from_parts,
)
from ltm.server.release_gate import GateRefusal, check_release_request
from ltm.verified_clipping import (
    CHECK_REPETITIONS,
    ClippingProofFailed,
    check_failures,
    coefficient_key,
    proof_shape,
    server_check,
)


class ReplicatedServer:
    """One server's state for one replicated job: the uploads it holds, by party."""

    def __init__(self, spec: JobSpec, server: int, randomness: Randomness | None = None, *,
                 mask_keys: tuple[bytes, bytes] | None = None) -> None:
        """``randomness`` is not used for the check seed, which always comes from the system CSPRNG
        (a seeded run's seeds would be known before the uploads); ``mask_keys`` = (k_{i,i+1},
        k_{i−1,i}), this server's two pairwise keys of the check's zero-sharing
        (:func:`ltm.verified_clipping.server_mask`): handed over in process
        (:func:`ltm.sim.runtime.replicated_run.replicated_servers`), over gRPC derived by the server core
        from the signed X25519 exchange (:func:`ltm.verified_clipping.pairwise_mask_keys`)."""
        validate_job(spec)
        if not spec.replicated:
            raise ValueError(f"job {spec.job_id!r} is not a replicated release (columns partition, kind gram)")
        if not 0 <= server < spec.k:
            raise ValueError(f"server index {server} out of range for k={spec.k}")
        self.spec = spec
        self.server = server
        self.uploads: dict[str, BlockUpload] = {}
        self.randomness = randomness or Randomness.system()
        self.closed = False
        self.check_seed: bytes | None = None
        self.check_failures: dict[str, str] | None = None  # None: checks not yet decided
        self.mask_keys = mask_keys
        self._checked: tuple[tuple[bytes, ...], dict[str, np.ndarray]] | None = None  # (seeds, shares), once
        self._accepted: list[dict[str, bytes]] | None = None  # the relayed check shares decided on, once

    def accept(self, party_id: str, upload: BlockUpload) -> None:
        """Hold one party's upload after checking it fits the job (party, columns, shapes, server)."""
        spec = self.spec
        if self.closed:
            raise ValueError(f"server {self.server}: job {spec.job_id!r} is closed; no more uploads")
        party = spec.party(party_id)  # KeyError: not a party of this job
        if party_id in self.uploads:
            raise ValueError(f"party {party_id!r} already uploaded to server {self.server}")
        if upload.server != self.server:
            raise ValueError(f"an upload for server {upload.server} reached server {self.server}")
        cols = tuple(spec.party_column_indices(party))
        if upload.columns != cols:
            raise ValueError(f"party {party_id!r} uploaded columns {upload.columns}, the job gives it {cols}")
        shape = (spec.n, len(cols))
        if upload.first.shape != shape or upload.second.shape != shape:
            raise ValueError(f"party {party_id!r}: block shares must be {shape}")
        if upload.noise.shape != (spec.width * (spec.width + 1) // 2,):
            raise ValueError(f"party {party_id!r}: the noise share must have one value per released entry")
        if spec.verified_clipping and upload.proof is None:
            raise ValueError(f"party {party_id!r}: job {spec.job_id!r} needs a clipping proof with the block")
        if upload.proof is not None:
            self._check_proof_shapes(party_id, party, upload)
        self.uploads[party_id] = upload

    def _check_proof_shapes(self, party_id: str, party: PartySpec, upload: BlockUpload) -> None:
        """A proof's server, witness (n × T_b) and mask (κ,) shapes, naming the party (ValueError)."""
        proof = upload.proof
        assert proof is not None
        if proof.server != self.server:
            raise ValueError(f"party {party_id!r}: a proof for server {proof.server} reached server {self.server}")
        shape = proof_shape(len(upload.columns), self.spec.frac_bits, party.clip_bound)
        want = (self.spec.n, shape.witness_width)
        if tuple(proof.first.shape) != want or tuple(proof.second.shape) != want:
            raise ValueError(f"party {party_id!r}: witness shares must be {want}, got "
                             f"{tuple(proof.first.shape)} and {tuple(proof.second.shape)}")
        if tuple(proof.mask.shape) != (CHECK_REPETITIONS,):
            raise ValueError(f"party {party_id!r}: the check mask must be ({CHECK_REPETITIONS},), "
                             f"got {tuple(proof.mask.shape)}")

    # ---------------------------------------------------------------- verified clipping (issue #30)
    def close(self) -> bytes | None:
        """Close the job to uploads.  With verified clipping, draw this server's check seed now, once,
        from the system CSPRNG (a fresh 32 bytes: no party can know it while its upload could still
        change, in a seeded run too) and return it; the analyst relays every server's seed to every
        server (:meth:`check_shares`)."""
        self.closed = True
        if self.spec.verified_clipping and self.check_seed is None:
            self.check_seed = Randomness.system().bytes(32)
        return self.check_seed

    def check_shares(self, seeds: list[bytes]) -> dict[str, np.ndarray]:
        """This server's re-randomised check share (κ,) of every party's clipping proof, with the
        coefficients of :func:`ltm.verified_clipping.coefficient_key` over ``seeds`` (one per server,
        in order; this server's own must be there).  Once per job: the same seeds again return the
        same bytes, other seeds are refused (two answers under two keys would let their masks be
        compared).  Copy consistency is inside the check: no digest of a copy is published (it
        would let a server test a guess of an honest party's data)."""
        if not self.spec.verified_clipping:
            raise ValueError(f"job {self.spec.job_id!r} has no verified clipping")
        if not self.closed or self.check_seed is None:
            raise ValueError(f"server {self.server}: the job must be closed before its checks")
        if len(seeds) != self.spec.k or seeds[self.server] != self.check_seed:
            raise ValueError(f"server {self.server}: the check seeds must be every server's, this one's included")
        if self.mask_keys is None:  # the party's mask alone does not survive an equivocating relay
            raise ValueError(f"server {self.server}: no pairwise mask keys for the checks of job "
                             f"{self.spec.job_id!r} (ReplicatedServer(mask_keys=…))")
        if self._checked is not None:
            if self._checked[0] != tuple(seeds):
                raise ValueError(f"server {self.server}: the checks of job {self.spec.job_id!r} were already "
                                 f"computed with other seeds; a server answers once per job")
            return {p: v.copy() for p, v in self._checked[1].items()}
        shares = {}
        for party in self.spec.parties:
            up = self.uploads.get(party.party_id)
            if up is None or up.proof is None:
                continue  # missing: every gate refuses (accept_checks)
            shape = proof_shape(len(up.columns), self.spec.frac_bits, party.clip_bound)
            key = coefficient_key(self.spec.digest, party.party_id, seeds)
            shares[party.party_id] = server_check(self.server, (up.first, up.second), up.proof, shape, key,
                                                  mask_keys=self.mask_keys)
        self._checked = (tuple(seeds), shares)
        return {p: v.copy() for p, v in shares.items()}

    def accept_checks(self, shares: list[dict[str, np.ndarray]]) -> dict[str, str]:
        """Record every server's check shares (as the analyst relays them) and decide, here, which
        parties fail: a missing share or a check that does not sum to zero.  Returns {party: reason};
        :meth:`output` refuses while any is there.  Once per job: the same relay again returns the
        same decision, another is refused, so a later relay can never reopen a closed gate; and the
        relayed share of this server must be the one it computed (:meth:`check_shares` first)."""
        relay = [{p: np.asarray(v, dtype=np.uint64).tobytes() for p, v in s.items()} for s in shares]
        if self._accepted is not None:
            if relay != self._accepted:
                raise ValueError(f"server {self.server}: the checks of job {self.spec.job_id!r} were already "
                                 f"decided on another relay; a server decides once per job")
            return dict(self.check_failures or {})
        if self._checked is None:
            raise ValueError(f"server {self.server}: compute this server's check shares before deciding")
        own = {p: v.tobytes() for p, v in self._checked[1].items()}
        if len(relay) != self.spec.k or relay[self.server] != own:
            raise ValueError(f"server {self.server}: the relayed check shares do not carry this server's own")
        self._accepted = relay
        self.check_failures = check_failures([p.party_id for p in self.spec.parties], shares)
        return dict(self.check_failures)

    def output(self) -> np.ndarray:
        """This server's output share (uint64, D(D+1)/2), once every party has uploaded (and, with
        verified clipping, every party's proof has passed here: else :class:`ClippingProofFailed`)."""
        missing = [p.party_id for p in self.spec.parties if p.party_id not in self.uploads]
        if missing:
            raise ValueError(f"server {self.server}: no upload yet from {missing}; every party's block is needed")
        if self.spec.verified_clipping:
            if self.check_failures is None:
                raise ClippingProofFailed({p.party_id: "its clipping check is missing" for p in self.spec.parties})
            if self.check_failures:
                raise ClippingProofFailed(self.check_failures)
        return server_output(self.server, list(self.uploads.values()), self.spec.n, self.spec.width)


# -------------------------------------------------------------------- the networked path
def part_shape(spec: JobSpec, part: int, party: PartySpec) -> tuple[int, int, int]:
    """The wire shape of part ``part`` of ``party``'s upload: (1, n, d_p) for a block share, (1, 1, W)
    for the noise share (W = D(D+1)/2 released entries), and with verified clipping (1, n, T_b) for
    a witness share and (1, 1, κ) for the check mask."""
    cols = len(spec.party_column_indices(party))
    if part == PART_NOISE:
        return (1, 1, triangle_width(spec.width))
    if part in (PART_WITNESS_FIRST, PART_WITNESS_SECOND):
        return (1, spec.n, proof_shape(cols, spec.frac_bits, party.clip_bound).witness_width)
    if part == PART_CHECK_MASK:
        return (1, 1, CHECK_REPETITIONS)
    return (1, spec.n, cols)


def check_part(spec: JobSpec, party: PartySpec, *, part: int, start: int, stop: int, columns: tuple[int, ...],
               shape: tuple[int, ...], aggregate: bool) -> None:
    """Everything one wire part's header must satisfy (:class:`ProtocolError` INVALID_ARGUMENT
    otherwise): a part index 0..2 (0..5 with verified clipping), the party's whole range [0, n),
    its column block, the part's shape."""
    parts = parts_per_upload(spec.verified_clipping)
    if not 0 <= part < parts:
        raise ProtocolError("INVALID_ARGUMENT", f"this replicated job takes parts {', '.join(map(str, range(parts)))} "
                                                f"per party (x_i, "
                                                f"x_(i+1), noise share" + (", w_i, w_(i+1), check mask" if
                                                                           parts > REPLICATED_PARTS else "")
                                                + f") as batch_index; got {part}")
    if aggregate:
        raise ProtocolError("INVALID_ARGUMENT", "a replicated job takes no aggregated uploads")
    if (start, stop) != (party.start, party.stop):
        raise ProtocolError("INVALID_ARGUMENT", f"a replicated part covers the party's whole range [{party.start}, "
                                                f"{party.stop}), not [{start}, {stop})")
    cols = tuple(spec.party_column_indices(party))
    if tuple(columns) != cols:
        raise ProtocolError("INVALID_ARGUMENT", f"party {party.party_id!r} uploaded columns {tuple(columns)}, "
                                                f"the job gives it {cols}")
    expected = part_shape(spec, part, party)
    if tuple(shape) != expected:
        raise ProtocolError("INVALID_ARGUMENT", f"replicated part {part} has shape {tuple(shape)}, expected {expected}")


def holds_every_part(spec: JobSpec, has_part: Callable[[str, int], bool]) -> ClientSet:
    """The clients a server holds in a replicated job: all n once every party's three parts are
    stored (``has_part(party_id, part)``), none before (every block of the joint vector is needed)."""
    parts = parts_per_upload(spec.verified_clipping)
    complete = all(has_part(p.party_id, part) for p in spec.parties for part in range(parts))
    return ClientSet.full(spec.n) if complete else ClientSet.empty(spec.n)


def check_replicated_release(spec: JobSpec, *, caller_role: str, job_digest: str, participants: ClientSet | None,
                             held: ClientSet, already_released: bool) -> None:
    """The release gate of a replicated job, checked by every server on its own (GateRefusal).

    As for a sketch job: only the analyst, this job's digest, once.  Then the participant set must
    be every client, held here: the release is one Gram over the joint vectors, and the parties'
    noise (L = parties − max(corrupt_parties, 1) honest draws per entry) is calibrated for all of them.
    """
    check_release_request(spec, caller_role=caller_role, job_digest=job_digest, already_released=already_released)
    if participants is None or participants.n != spec.n:
        raise GateRefusal("INVALID_ARGUMENT", f"the participant set must be over the job's n = {spec.n} clients")
    if held.count != spec.n:
        count = "six" if spec.verified_clipping else "three"
        raise GateRefusal("FAILED_PRECONDITION", f"job {spec.job_id!r} is a replicated release: every party's {count} "
                                                 f"parts are needed and this server does not hold them all")
    if participants.count != spec.n:
        raise GateRefusal("FAILED_PRECONDITION", f"a replicated release is over every client ({spec.n}); the "
                                                 f"participant set holds {participants.count}")
    if spec.n < spec.privacy.min_participants:
        raise GateRefusal("FAILED_PRECONDITION", f"participant set of {spec.n} clients is below the job's minimum of "
                                                 f"{spec.privacy.min_participants}")


def stored_server(spec: JobSpec, server: int, batches: Iterable[ShareBatch]) -> ReplicatedServer:
    """Server ``server``'s :class:`ReplicatedServer` (closed) over its stored wire parts, regrouped per
    party: the in-process path's class, so its checks, its clipping checks and its gate apply."""
    parts: dict[str, dict[int, ShareBatch]] = defaultdict(dict)
    for batch in batches:
        parts[batch.party_id][int(batch.batch_index)] = batch
    core = ReplicatedServer(spec, server)
    count = parts_per_upload(spec.verified_clipping)
    for party_id, got in parts.items():
        if sorted(got) != list(range(count)):
            raise ValueError(f"party {party_id!r}: parts {sorted(got)} stored, need 0..{count - 1}")
        core.accept(party_id, upload_from_parts(server, got[0].columns, [got[i].share for i in range(count)]))
    core.closed = True
    return core


def stored_output(spec: JobSpec, server: int, batches: Iterable[ShareBatch],
                  check_failures: dict[str, str] | None = None) -> np.ndarray:
    """Server ``server``'s output share (1, W) uint64 from its stored wire parts (:func:`stored_server`).
    With verified clipping ``check_failures`` is this server's recorded verdict ({party: reason},
    None while it has none): :meth:`ReplicatedServer.output` refuses unless it is empty."""
    core = stored_server(spec, server, batches)
    core.check_failures = check_failures
    return core.output()[None, :]


def check_output(spec: JobSpec, server: int, batches: Iterable[ShareBatch], own_seed: bytes,
                 seeds: list[bytes], mask_keys: tuple[bytes, bytes]) -> dict[str, np.ndarray]:
    """Server ``server``'s check shares over its stored parts, under ``seeds`` (every server's
    post-close seed in order, ``own_seed`` among them) with its pairwise ``mask_keys``
    (:meth:`ReplicatedServer.check_shares`)."""
    core = stored_server(spec, server, batches)
    core.check_seed, core.mask_keys = own_seed, mask_keys
    return core.check_shares(seeds)

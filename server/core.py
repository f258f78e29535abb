"""The server core: job intake, idempotent batch acceptance, close, and the gated, once-only release.

Transport- and storage-agnostic: the gRPC servicer and the in-process runtime call the same
methods, passing the caller's authenticated identity (role, id).  State lives in a
:class:`~ltm.server.store.ServerStore` (in memory for simulations, SQLite for real servers) and is
written *before* a request is acknowledged.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from ltm.batch import ShareBatch
from ltm.client_set import ClientSet
from ltm.errors import ProtocolError, bounded
from ltm.identifiers import id_problem
from ltm.jobspec import JobSpec, JobSpecError, validate_job
from ltm.limits import SLOT_CACHE_BYTES
from ltm.randomness import Randomness
from ltm.server import replicated
from ltm.server.release_gate import ANALYST_ROLE, check_release
from ltm.server.result_share import result_share
from ltm.server.store import MemoryStore, ReleaseRecord, ServerStore, StoredBatch, cancelled_message
from ltm.sketch import Sketch
from ltm.transport.signing import SignatureRefused, Signed, Signer, from_signed_pb, to_signed_pb
from ltm.v1 import ltm_pb2
from ltm.verified_clipping import (
    ClippingProofFailed,
    check_failures,
    mask_private_key,
    mask_public_key,
    output_statement,
    pairwise_mask_keys,
    read_mask_public,
    read_output_statement,
    read_seed_statement,
    seed_statement,
    statement_seeds,
)


@dataclass(frozen=True)
class Receipt:
    """The acknowledgement of one stored batch; a retried identical upload gets the same receipt."""

    job_id: str
    party_id: str
    batch_index: int
    content_digest: str
    clients: int


#: A job's sketch slots (8·pieces·n bytes) are cached when at most this large: a 10⁶-client job
#: (8 MB at s = 1) releases without re-deriving its placement; larger jobs derive it chunk by chunk,
#: so a server holds nothing n-sized.


def participants_digest(mask: np.ndarray) -> str:
    """SHA-256 of a participant mask (packed bits): names a participant set compactly.
    Equals :meth:`ClientSet.digest` of the same set (which is what the server records)."""
    return hashlib.sha256(np.packbits(np.asarray(mask, dtype=bool)).tobytes()).hexdigest()


def _as_client_set(n: int, participants: ClientSet | np.ndarray) -> ClientSet | None:
    """The participant set as a ClientSet; None when it is malformed (the gate then refuses it
    with a precise message)."""
    if isinstance(participants, ClientSet):
        return participants if participants.n == n else None
    mask = np.asarray(participants)
    return ClientSet.from_mask(mask.astype(bool)) if mask.shape == (n,) else None


class ServerCore:
    """One server's protocol logic over its store (see module docstring)."""

    def __init__(self, server_id: str, store: ServerStore | None = None, signer: Signer | None = None) -> None:
        self.server_id = server_id
        self.store = store if store is not None else MemoryStore()
        self.signer = signer  # signs this server's clipping-check statements (None: --insecure, no checks)
        self._sketches: dict[str, Sketch] = {}
        self._slots: dict[str, np.ndarray | None] = {}

    # ------------------------------------------------------------------ helpers
    def spec(self, job_id: str) -> JobSpec:
        """The spec of job ``job_id`` on this server.

        Every RPC naming a job comes here first: an id outside the grammar is INVALID_ARGUMENT, a job
        this server does not hold is NOT_FOUND (:class:`~ltm.errors.ProtocolError`).
        """
        problem = id_problem(job_id, "job id")  # every RPC naming a job comes here first
        if problem:
            raise ProtocolError("INVALID_ARGUMENT", problem)
        spec = self.store.get_job(job_id)
        if spec is None:
            why = self.store.cancelled(job_id)
            if why is not None:
                raise ProtocolError("FAILED_PRECONDITION", cancelled_message(job_id, why))
            raise ProtocolError("NOT_FOUND", f"unknown job {job_id!r} on server {self.server_id!r}")
        return spec

    def _sketch(self, spec: JobSpec) -> Sketch:
        if spec.job_id not in self._sketches:
            self._sketches[spec.job_id] = spec.make_sketch()
        return self._sketches[spec.job_id]

    def _slots_of(self, spec: JobSpec) -> np.ndarray | None:
        """The job's sketch slots if it is small enough to cache them (:data:`SLOT_CACHE_BYTES`),
        derived once (they are public) and reused; None otherwise (derived per chunk)."""
        if spec.job_id not in self._slots:
            sketch = self._sketch(spec)
            small = 8 * sketch.pieces * spec.n <= SLOT_CACHE_BYTES
            self._slots[spec.job_id] = sketch.slots() if small else None
        return self._slots[spec.job_id]

    def server_index(self, spec: JobSpec) -> int:
        """This server's index i (0 ≤ i < k) in the job's server list, which says which share it holds;
        FAILED_PRECONDITION if the job does not name this server.
        """
        ids = [s.server_id for s in spec.servers]
        if self.server_id not in ids:
            raise ProtocolError("FAILED_PRECONDITION", f"server {self.server_id!r} is not one of the job's servers {ids}")
        return ids.index(self.server_id)

    # ------------------------------------------------------------------ create
    def create_job(self, spec: JobSpec, *, caller_role: str) -> str:
        """Store a job published by the analyst; idempotent for an identical spec.  Returns the digest."""
        if caller_role != ANALYST_ROLE:
            raise ProtocolError("PERMISSION_DENIED", f"only the analyst may create jobs (caller role {caller_role!r})")
        try:
            validate_job(spec)
        except JobSpecError as exc:
            raise ProtocolError("INVALID_ARGUMENT", str(exc)) from exc
        if spec.verified_clipping and self.signer is None:  # its check statements are signed (issue #30)
            raise ProtocolError("FAILED_PRECONDITION", "a job with verified clipping needs servers with TLS "
                                                       "identities (its check statements are signed); this server "
                                                       "runs --insecure")
        self.server_index(spec)
        why = self.store.cancelled(spec.job_id)
        if why is not None:  # a cancelled id is retired: never a second job under it
            raise ProtocolError("FAILED_PRECONDITION", cancelled_message(spec.job_id, why))
        existing = self.store.get_job(spec.job_id)
        if existing is not None:
            if existing.digest != spec.digest:
                raise ProtocolError("ALREADY_EXISTS", f"job {spec.job_id!r} exists with a different spec "
                                                      f"(digest {existing.digest[:12]}…); choose a new job id")
            return spec.digest
        self.store.put_job(spec)
        return spec.digest

    def cancel_job(self, job_id: str, reason: str, *, caller_role: str) -> bool:
        """Drop a job (analyst only): its batches, release record and spec go, its id is retired for
        good on this server (also an id it never held).  False if it was cancelled already."""
        if caller_role != ANALYST_ROLE:
            raise ProtocolError("PERMISSION_DENIED", f"only the analyst may cancel jobs (caller role {caller_role!r})")
        problem = id_problem(job_id, "job id")
        if problem:
            raise ProtocolError("INVALID_ARGUMENT", problem)
        self._sketches.pop(job_id, None)
        self._slots.pop(job_id, None)
        return self.store.cancel_job(job_id, bounded(reason, 200))

    # ------------------------------------------------------------------ upload
    def check_upload(self, spec: JobSpec, *, caller_id: str, party_id: str, batch_index: int, start: int, stop: int,  # noqa: PLR0913 - an upload header's fields, keyword-only, each checked
                     columns: tuple[int, ...], server: int, shape: tuple[int, ...], aggregate: bool = False) -> None:
        """Everything an upload's header must satisfy, checkable before any share data is read.

        ``aggregate``: the upload declares itself a party's aggregate (``party/aggregate.py``); it
        must match the job's upload mode, cover the party's whole range as batch 0, and have the
        shape (1, m, columns)."""
        if party_id != caller_id:
            raise ProtocolError("PERMISSION_DENIED", f"party {caller_id!r} may not upload as {party_id!r}")
        try:
            party = spec.party(caller_id)
        except KeyError:
            raise ProtocolError("PERMISSION_DENIED", f"{caller_id} is not a party of job {spec.job_id!r}") from None
        if not (party.start <= start < stop <= party.stop):
            raise ProtocolError("PERMISSION_DENIED", f"party {caller_id!r} may upload clients [{party.start}, "
                                                     f"{party.stop}) only, not [{start}, {stop})")
        if spec.replicated:  # three wire parts per party, told apart by batch_index (server/replicated.py)
            if server != self.server_index(spec):
                raise ProtocolError("INVALID_ARGUMENT", f"this share is addressed to server index {server}, "
                                                        f"this is server {self.server_id!r}")
            replicated.check_part(spec, party, part=batch_index, start=start, stop=stop, columns=columns,
                                  shape=shape, aggregate=aggregate)
            return
        if not 0 <= batch_index < 1 << 63:  # stored as a signed 64-bit integer
            raise ProtocolError("INVALID_ARGUMENT", f"batch_index {batch_index} is outside [0, 2^63); "
                                                    f"number a party's batches 0, 1, 2, …")
        expected_cols = spec.upload_columns(party)
        if columns != expected_cols:
            raise ProtocolError("INVALID_ARGUMENT", f"batch columns {columns} do not match the party's "
                                                    f"columns {expected_cols} in the job spec")
        if server != self.server_index(spec):
            raise ProtocolError("INVALID_ARGUMENT", f"this share is addressed to server index {server}, "
                                                    f"this is server {self.server_id!r}")
        if aggregate != spec.aggregated:
            raise ProtocolError("FAILED_PRECONDITION",
                                f"job {spec.job_id!r} takes {spec.upload_mode} uploads (upload_mode {spec.upload_mode!r}) "
                                f"but this batch is {'an aggregate' if aggregate else 'per-client'}; "
                                f"run a party that matches the job spec")
        if aggregate:
            if (start, stop, batch_index) != (party.start, party.stop, 0):
                raise ProtocolError("INVALID_ARGUMENT", f"an aggregated upload is batch 0 over the party's whole range "
                                                        f"[{party.start}, {party.stop}), not batch {batch_index} "
                                                        f"over [{start}, {stop})")
            expected_shape = (1, self._sketch(spec).m, len(expected_cols))
        else:
            expected_shape = (self._sketch(spec).pieces, stop - start, len(expected_cols))
        if tuple(shape) != expected_shape:
            raise ProtocolError("INVALID_ARGUMENT", f"share shape {tuple(shape)} != expected {expected_shape} "
                                                    f"(pieces, clients, columns)")

    def check_randomness(self, spec: JobSpec, seeded: bool) -> None:
        """Seeded (reproducible, NOT private) batches only for jobs marked as reproductions."""
        if seeded and not spec.reproduction:
            raise ProtocolError("FAILED_PRECONDITION",
                                f"job {spec.job_id!r} is not a reproduction: this server refuses batches drawn with "
                                f"seeded (reproducible, NOT private) randomness; run the party without --seed")

    def seeded_parties(self, job_id: str) -> list[str]:
        """Parties that uploaded seeded batches to this job (only a reproduction job can have any)."""
        return self.store.seeded_parties(job_id)

    def accept(self, batch: ShareBatch, job_id: str, *, caller_role: str, caller_id: str) -> Receipt:
        """Validate and durably store one batch; idempotent per (job, party, batch_index)."""
        spec = self.spec(job_id)
        if caller_role != "party":
            raise ProtocolError("PERMISSION_DENIED", f"only parties may upload (caller role {caller_role!r})")
        if batch.job_digest != spec.digest:
            raise ProtocolError("FAILED_PRECONDITION", "the batch names a different job digest than this server's spec "
                                                       "of the job; fetch the job spec again")
        self.check_randomness(spec, batch.seeded)
        self.check_upload(spec, caller_id=caller_id, party_id=batch.party_id, batch_index=batch.batch_index,
                          start=batch.start, stop=batch.stop, columns=batch.columns, server=batch.server,
                          shape=tuple(batch.share.shape), aggregate=batch.aggregate)
        expected_cols = batch.columns
        if batch.share.data is not None and batch.share.data.dtype != np.uint64:
            raise ProtocolError("INVALID_ARGUMENT", f"share dtype {batch.share.data.dtype} != uint64")
        digest = batch.content_digest()
        receipt = Receipt(job_id, batch.party_id, batch.batch_index, digest, batch.count)
        existing = self.store.get_batch_digest(job_id, batch.party_id, batch.batch_index)
        if existing is not None:
            if existing == digest:
                return receipt
            raise ProtocolError("ALREADY_EXISTS", f"batch {batch.batch_index} of party {batch.party_id!r} was already "
                                                  f"stored with different content; a batch cannot be replaced")
        if self.store.is_closed(job_id):
            raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} is closed to uploads")
        # (a replicated job's three parts cover the same cells: the key (party, part) counts each once)
        if not spec.replicated and self.store.coverage(job_id).overlaps(batch.start, batch.stop, expected_cols):
            raise ProtocolError("ALREADY_EXISTS", f"clients [{batch.start}, {batch.stop}) of party {batch.party_id!r} "
                                                  f"were already uploaded in another batch; refusing to count them twice")
        self.store.put_batch(job_id, StoredBatch(batch, digest))
        return receipt

    # ------------------------------------------------------------------ close and release
    def held(self, job_id: str) -> ClientSet:
        """The clients whose complete vector (every column) this server holds (a replicated job:
        every client once every party's three parts are in, none before)."""
        spec = self.spec(job_id)
        if spec.replicated:
            return replicated.holds_every_part(
                spec, lambda party, part: self.store.get_batch_digest(job_id, party, part) is not None)
        return self.store.coverage(job_id).held()

    def close(self, job_id: str, *, caller_role: str) -> ClientSet:
        """Stop intake (persisted) and report the participant set this server holds."""
        if caller_role != ANALYST_ROLE:
            raise ProtocolError("PERMISSION_DENIED", f"only the analyst may close a job (caller role {caller_role!r})")
        self.spec(job_id)
        self.store.set_closed(job_id)
        return self.held(job_id)

    def release(self, job_id: str, participants: ClientSet | np.ndarray, *, caller_role: str,
                job_digest: str) -> np.ndarray:
        """The gated, once-only result share (uint64 (m, D)).

        ``participants`` is a ClientSet (a bool mask (n,) is accepted too).  A retry with the
        identical participant set returns the identical stored bytes (a lost response must not
        lose the release); any other set after a release is refused.
        """
        spec = self.spec(job_id)
        members = _as_client_set(spec.n, participants)
        record = self.store.get_release(job_id)
        pdigest = members.digest() if members is not None else ""
        if record is not None and caller_role == ANALYST_ROLE and job_digest == spec.digest \
                and record.participants_digest == pdigest:
            if record.result is not None:
                return record.result.copy()  # callers may sum in place; the stored record must not change
            # Only the durable release marker survived (a crash between marker and record): the same
            # participant set may complete this release (the store checks the result's SHA-256).
            record = None
        if not self.store.is_closed(job_id) and caller_role == ANALYST_ROLE:
            raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} must be closed before it is released")
        if spec.replicated:  # its own gate, then the local degree-2 output share (server/replicated.py)
            replicated.check_replicated_release(spec, caller_role=caller_role, job_digest=job_digest,
                                                participants=members, held=self.held(job_id),
                                                already_released=record is not None)
            result = replicated.stored_output(spec, self.server_index(spec), self.store.batches(job_id),
                                              self.clipping_failures(job_id) if spec.verified_clipping else None)
        else:
            check_release(spec, caller_role=caller_role, job_digest=job_digest,
                          participants=participants if members is None else members,
                          held=self.held(job_id), already_released=record is not None, sketch=self._sketch(spec),
                          slots=self._slots_of(spec))
            result = result_share(spec, self.store.batches(job_id), members, self._sketch(spec),
                                  self._slots_of(spec))
        self.store.put_release(job_id, ReleaseRecord(pdigest, result.copy()))
        return result

    # ------------------------------------------------------------------ verified clipping (issue #30)
    def _checking(self, job_id: str, caller_role: str) -> tuple[JobSpec, int, bytes, bytes]:
        """The job, this server's index, its post-close check seed and its X25519 mask private key
        (each drawn once, durably, on the first call: no party can know the seed while its upload
        could still change, and a restart answers with the same values)."""
        if caller_role != ANALYST_ROLE:
            raise ProtocolError("PERMISSION_DENIED", f"only the analyst relays clipping checks (caller role "
                                                     f"{caller_role!r})")
        spec = self.spec(job_id)
        if not spec.verified_clipping:
            raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} has no verified clipping")
        if self.signer is None:
            raise ProtocolError("FAILED_PRECONDITION", "this server has no signing key (--insecure): it cannot "
                                                       "take part in verified clipping")
        if not self.store.is_closed(job_id):
            raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} must be closed before its clipping checks")
        values = []
        for name, draw in (("seed", lambda: Randomness.system().bytes(32)), ("mask_private", mask_private_key)):
            value = self.store.get_check_value(job_id, name)
            values.append(value if value is not None else self.store.put_check_value(job_id, name, draw()))
        return spec, self.server_index(spec), values[0], values[1]

    def _verified(self, spec: JobSpec, statements: list[Signed], what: str) -> list[bytes]:
        """The payloads of one signed statement per server (job order), each verified against the CA
        and the job's identity of that server (PERMISSION_DENIED otherwise)."""
        if len(statements) != spec.k:
            raise ProtocolError("INVALID_ARGUMENT", f"{spec.k} signed {what}s are needed (one per server), got "
                                                    f"{len(statements)}")
        assert self.signer is not None
        try:
            return [self.signer.verify(s, spec.servers[j].server_id) for j, s in enumerate(statements)]
        except SignatureRefused as exc:
            raise ProtocolError("PERMISSION_DENIED", f"{what} refused: {exc}") from None

    def _once(self, job_id: str, name: str, value: bytes, what: str) -> None:
        """Record ``value`` as the job's ``name`` once; a different value later is refused (a server
        answers and decides once per job: two answers under two relays could be compared)."""
        if self.store.put_check_value(job_id, name, value) != value:
            raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r}: this server already took another {what}; "
                                                       f"it answers once per job")

    def check_seed(self, job_id: str, *, caller_role: str) -> Signed:
        """This server's post-close check seed and mask public key, signed (the analyst relays it to
        every server)."""
        spec, i, seed, private = self._checking(job_id, caller_role)
        return self.signer.sign(seed_statement(spec.digest, i, seed, mask_public_key(private)))  # type: ignore[union-attr]

    def check_output(self, job_id: str, seeds: list[Signed], *, caller_role: str) -> Signed:
        """This server's signed check output (check shares per party) under the relayed seed set,
        which must be every server's signed seed statement, this server's own included.  Once per job:
        the first set is recorded, an identical retry returns the same signed bytes, another set is
        refused.  The pairwise mask keys come from the signed public keys (X25519 with each neighbour)."""
        spec, i, own, private = self._checking(job_id, caller_role)
        try:
            payloads = self._verified(spec, seeds, "check seed")
            values = [read_seed_statement(p, spec.digest, j) for j, p in enumerate(payloads)]
            publics = [read_mask_public(p, spec.digest, j) for j, p in enumerate(payloads)]
            if values[i] != own:
                raise ValueError(f"the relayed seed set does not hold server {i}'s own check seed")
            mask_keys = pairwise_mask_keys(i, private, publics, spec.digest)
        except ValueError as exc:
            raise ProtocolError("PERMISSION_DENIED", f"check seed refused: {exc}") from None
        self._once(job_id, "seed_set", json.dumps([v.hex() + p.hex() for v, p in zip(values, publics)]).encode(),
                   "check seed set")
        stored = self.store.get_check_value(job_id, "output")
        if stored is None:
            try:
                shares = replicated.check_output(spec, i, self.store.batches(job_id), own, values, mask_keys)
            except ValueError as exc:  # a party's parts incomplete (it stopped mid-upload): no check can run
                raise ProtocolError("FAILED_PRECONDITION", f"the clipping checks cannot run: {exc}") from None
            signed = self.signer.sign(output_statement(spec.digest, i, values, shares))  # type: ignore[union-attr]
            stored = self.store.put_check_value(job_id, "output", to_signed_pb(signed).SerializeToString())
        return from_signed_pb(ltm_pb2.SignedStatement.FromString(stored))

    def check_verdict(self, job_id: str, outputs: list[Signed], *, caller_role: str) -> dict[str, str]:
        """Decide, here, every party's clipping check from the three servers' signed outputs (all under
        the seed set this server answered, its own output among them) and record the verdict once:
        {party: reason}, empty when every party passed.  Another relay of outputs later is refused; a
        recorded verdict is never overwritten.  The release gate refuses unless it is recorded and empty."""
        spec, i, _, _ = self._checking(job_id, caller_role)
        mine = self.store.get_check_value(job_id, "output")
        if mine is None:
            raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r}: this server has not computed its check "
                                                       f"output (SubmitCheckSeeds first)")
        payloads = self._verified(spec, outputs, "check output")
        try:
            if payloads[i] != ltm_pb2.SignedStatement.FromString(mine).payload:
                raise ValueError(f"the relayed outputs do not carry server {i}'s own")
            seeds = statement_seeds(payloads[i], spec.digest, i)
            read = [read_output_statement(p, spec.digest, j, seeds) for j, p in enumerate(payloads)]
        except ValueError as exc:
            raise ProtocolError("PERMISSION_DENIED", f"check output refused: {exc}") from None
        self._once(job_id, "output_set", b"\0".join(payloads), "set of check outputs")  # JSON: no NUL inside
        failures = check_failures([p.party_id for p in spec.parties], read)
        stored = self.store.put_check_value(job_id, "verdict", json.dumps(failures, sort_keys=True).encode())
        return json.loads(stored)

    def clipping_failures(self, job_id: str) -> dict[str, str] | None:
        """This server's recorded clipping verdict ({party: reason}; empty: passed), None before it."""
        stored = self.store.get_check_value(job_id, "verdict")
        return None if stored is None else json.loads(stored)

    def clipping_status(self, job_id: str) -> str:
        """The verdict in one line: "" before it, "passed", or the refusal naming every failing party."""
        failures = self.clipping_failures(job_id)
        if failures is None:
            return ""
        return str(ClippingProofFailed(failures)) if failures else "passed"

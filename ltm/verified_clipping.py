"""Verified clipping for the replicated release: each party proves, on its replicated shares, that
every client's rounded block x̂ (d grid units of 2^-f) is within its budget share (issue #30;
docs/architecture.md, "Verified clipping").

**Statement.**  For every client: each entry x̂_a is an integer in [−2^r, 2^r) (no wrap-around in
Z_2^64) and ‖x̂‖² ≤ B, where R = C_p·2^f + √d/2 is the party's radius in grid units (the clipped
block's norm plus the rounding, the radius the sensitivity :func:`ltm.dp.sensitivity.rounded_gram_l2`
is computed for: Σ_p R_p² ≤ (C·2^f + √D/2)² by Cauchy–Schwarz when Σ_p C_p² ≤ C²), B = ⌈R²(1 + 2^-45)⌉
(the factor absorbs the float rounding of R², far inside the 10⁻¹² the spec's Σ C_p² ≤ C² allows),
and r is the bit length of ⌊√B⌋.

**Witness.**  The party also replicate-shares, like its block, per client the E = r + 1 bits of
each offset u_a = x̂_a + 2^r and the L = bit length of B bits of the slack S = B − ‖x̂‖²
(:func:`witness`), one ring element per bit: T_b = d·E + L values per client.

**Constraints** (:func:`server_constraints`), all of degree ≤ 2, so server i computes its additive
share of each from its pairs alone (for a product ab its share is a_i b_i + a_i b_{i+1} + a_{i+1} b_i,
as for O_i; server 0 adds the constants):

* every bit: b² − b = b(b − 1) = 0.  In Z_2^64 one of b, b − 1 is odd, hence a unit, so the other
  is 0: b ∈ {0, 1}.
* every entry: Σ_k 2^k b_{a,k} − 2^r − x̂_a = 0, so x̂_a ≡ v_a, an integer in [−2^r, 2^r).
* the norm: Σ_a x̂_a² + Σ_k 2^k s_k − B = 0.  With the above, the left side minus the ring wrap is
  the integer Σ v_a² + S − B with Σ v_a² + S < d·2^{2r} + 2^L ≤ 2^64 (:func:`proof_shape` refuses
  otherwise) and −B > −2^64, so ≡ 0 mod 2^64 means = 0 over the integers: Σ v_a² = B − S ≤ B.

So the constraint vector c (T = T_b + d + 1 values per client) is zero exactly when the block is
valid, and depends only on the party's own data.

**Check** (:func:`combine`).  After every server has closed the job, each draws a fresh 32-byte
seed; the coefficient key is a hash of the job digest, the party and all k seeds
(:func:`coefficient_key`).  Its AES-CTR keystream gives one 64-bit word W_j per constraint value;
repetition t (t < κ) is the subset sum Σ_j bit_t(W_j)·c_j.  Server i sends its share of the κ sums
plus its share of the party's zero-sharing (re-randomisation: given their sum, the three shares are
uniform), and the party passes iff the three add up to 0 in every repetition (:func:`verdict`).

*Soundness:* c is fixed when the uploads are (before any seed exists).  If c ≠ 0, pick j* with
c_{j*} ≠ 0; for each t, conditioned on every other bit, S_t = a_t + bit_t(W_{j*})·c_{j*} is zero for
at most one of the two values of that bit, and the κ bits of W_{j*} are independent and uniform, so
Pr[all κ sums are zero] ≤ 2^-κ (κ = :data:`CHECK_REPETITIONS` = 40).  No ring argument is needed:
one repetition misses c = 2^63 with probability exactly ½, which is why there are κ of them.

*Cost:* the κ subset sums are 16 at a time: for each 16-bit slice of W, a scatter-add of c into
2^16 buckets by the slice's value (one pass), then the 16 sums are bucket sums weighted by the
bucket index's bits (:func:`combine`) — ⌈κ/16⌉ passes over c, not κ.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from ltm.errors import LtmError
from ltm.randomness import KeystreamBuffer, Randomness
from ltm.sharing import Share, share, share_rows

__all__ = [
    "CHECK_REPETITIONS",
    "ProofShape",
    "proof_shape",
    "witness",
    "server_constraints",
    "coefficient_key",
    "combine",
    "new_buckets",
    "add_to_buckets",
    "bucket_sums",
    "verdict",
    "share_digest",
    "ProofUpload",
    "party_proof",
    "server_check",
    "SERVERS",
    "ClippingProofFailed",
    "copy_problems",
    "check_failures",
    "seed_statement",
    "read_seed_statement",
    "output_statement",
    "read_output_statement",
    "statement_seeds",
]

#: κ: independent subset-sum repetitions; a party whose constraints are not all zero passes all of
#: them with probability ≤ 2^-κ (module docstring).
CHECK_REPETITIONS = 40
_SLICE = 16  # bits of W per scatter-add pass
_U64 = np.uint64
#: The replicated release's servers (ltm.replicated.REPLICATED_SERVERS; not imported: that module
#: builds on this one).
SERVERS = 3
#: Clients per chunk of a server's check (memory O(chunk · T)).
CHECK_CHUNK_CLIENTS = 1 << 14


class ClippingProofFailed(LtmError, ValueError):
    """A party's clipping proof failed (or is missing): nothing is released for the job.  The
    message names every failing party and why, on one line."""

    code = "FAILED_PRECONDITION"
    exit_code = 3

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = dict(sorted(failures.items()))
        super().__init__("verified clipping failed, nothing released: "
                         + "; ".join(f"party {p!r}: {why}" for p, why in self.failures.items()))


@dataclass(frozen=True)
class ProofShape:
    """The public shape of one party's proof (from the spec: d, f, C_p).

    Attributes:
        d: the block's columns.
        bound: B, the bound on ‖x̂‖² in grid units².
        r: entries must lie in [−2^r, 2^r).
        entry_bits: E = r + 1 bits per entry offset.
        slack_bits: L, bits of the slack.
    """

    d: int
    bound: int
    r: int
    entry_bits: int
    slack_bits: int

    @property
    def witness_width(self) -> int:
        """T_b = d·E + L witness values per client."""
        return self.d * self.entry_bits + self.slack_bits

    @property
    def constraint_width(self) -> int:
        """T = T_b + d + 1 constraint values per client (bits, entry identities, the norm)."""
        return self.witness_width + self.d + 1


def proof_shape(d: int, frac_bits: int, clip_bound: float) -> ProofShape:
    """The proof's shape for a block of ``d`` columns clipped to ``clip_bound`` on the grid 2^-f.
    ValueError when the norm identity could wrap (d·2^{2r} + 2^L > 2^64)."""
    if d < 1 or frac_bits < 0 or not clip_bound > 0:
        raise ValueError(f"a proof needs d ≥ 1, f ≥ 0 and C > 0 (got d={d}, f={frac_bits}, C={clip_bound})")
    radius = math.ldexp(float(clip_bound), int(frac_bits)) + 0.5 * math.sqrt(d)
    bound = int(math.ceil(radius * radius * (1.0 + 2.0**-45)))
    r = math.isqrt(bound).bit_length()
    slack_bits = bound.bit_length()
    if d * (1 << (2 * r)) + (1 << slack_bits) > 1 << 64:
        raise ValueError(f"verified clipping: the norm of {d} entries below 2^{r} could wrap Z_2^64; "
                         f"use fewer fraction bits (now {frac_bits}) or a smaller clip bound")
    return ProofShape(int(d), bound, r, r + 1, slack_bits)


def _bits(values: np.ndarray, count: int) -> np.ndarray:
    """(…, count) uint64 0/1: the low ``count`` bits of non-negative int64 ``values``, LSB first."""
    shifts = np.arange(count, dtype=np.int64)
    return ((values[..., None] >> shifts) & 1).astype(_U64)


def witness(block: np.ndarray, shape: ProofShape) -> np.ndarray:
    """The party's witness (n × T_b uint64 0/1) for its grid-rounded block (n × d int64): per
    client the E bits of every x̂_a + 2^r (entry-major), then the L bits of B − ‖x̂‖².
    ValueError if the block is not within its bound (the party's own clipping failed)."""
    x = np.asarray(block, dtype=np.int64)
    if x.ndim != 2 or x.shape[1] != shape.d:
        raise ValueError(f"the block must be n × {shape.d}")
    offset = x + (1 << shape.r)
    if np.any(offset < 0) or np.any(offset >= 1 << shape.entry_bits):
        raise ValueError(f"a block entry is outside [−2^{shape.r}, 2^{shape.r}): the block is not clipped")
    norms = np.einsum("na,na->n", x, x)  # ≤ B < 2^62 for a valid block; checked below
    if np.any(np.abs(x) > math.isqrt(shape.bound)) or np.any(norms > shape.bound):
        raise ValueError(f"a client's block has ‖x̂‖² above its bound {shape.bound}: the block is not clipped")
    entry = _bits(offset, shape.entry_bits).reshape(x.shape[0], shape.d * shape.entry_bits)
    return np.concatenate([entry, _bits(shape.bound - norms, shape.slack_bits)], axis=1)


def _powers(count: int) -> np.ndarray:
    return (np.ones(count, dtype=_U64) << np.arange(count, dtype=_U64))


def server_constraints(server: int, block: tuple[np.ndarray, np.ndarray], wit: tuple[np.ndarray, np.ndarray],
                       shape: ProofShape) -> np.ndarray:
    """Server ``server``'s additive share (n × T uint64) of the constraint vector, from its pairs of
    additive shares of the block (x_i, x_{i+1}; n × d) and of the witness (w_i, w_{i+1}; n × T_b).
    Columns: the T_b bit constraints, the d entry identities, the norm identity.  Sums over the
    three servers to 0 in every column exactly when the block is valid (module docstring)."""
    x, x1 = (np.asarray(a, dtype=_U64) for a in block)
    w, w1 = (np.asarray(a, dtype=_U64) for a in wit)
    n, d, E, Tb = x.shape[0], shape.d, shape.entry_bits, shape.witness_width
    const = _U64(1) if server == 0 else _U64(0)  # server 0 carries the public constants
    out = np.empty((n, shape.constraint_width), dtype=_U64)
    bitc, entry, norm = out[:, :Tb], out[:, Tb:Tb + d], out[:, Tb + d]
    with np.errstate(over="ignore"):
        # b² − b: the product's share is w_i(w_i + 2w_{i+1}); the linear term −b takes −w_i on every
        # server (the three w_i add up to b), so the share is w_i(w_i + 2w_{i+1} − 1) on each.
        np.add(w1, w1, out=bitc)
        bitc += w
        bitc -= _U64(1)
        bitc *= w
        np.einsum("nak,k->na", w[:, :d * E].reshape(n, d, E), _powers(E), out=entry)
        entry -= x
        entry -= const * _U64(1 << shape.r)
        norm[:] = np.einsum("na,na->n", x, x + x1 + x1) + w[:, d * E:] @ _powers(shape.slack_bits)
        norm -= const * _U64(shape.bound)
    return out


def coefficient_key(job_digest: str, party_id: str, seeds: list[bytes]) -> bytes:
    """The AES key of party ``party_id``'s check coefficients: SHA-256 of the job digest, the party
    and the servers' post-close seeds (in server order).  Unpredictable while any seed is unknown."""
    h = hashlib.sha256(b"ltm.verified-clipping.v1\0" + job_digest.encode() + b"\0" + party_id.encode() + b"\0")
    for seed in seeds:
        if len(seed) != 32:
            raise ValueError("a check seed is 32 bytes")
        h.update(seed)
    return h.digest()


_BUCKET_BITS = ((np.arange(1 << _SLICE, dtype=np.int64)[None, :] >> np.arange(_SLICE)[:, None]) & 1).astype(_U64)


def _slices(repetitions: int) -> int:
    if not 1 <= repetitions <= 64:
        raise ValueError(f"1 ≤ repetitions ≤ 64 (got {repetitions})")
    return -(-repetitions // _SLICE)


def add_to_buckets(buckets: np.ndarray, constraints: np.ndarray, key: bytes, *, start: int = 0,
                   buffer: KeystreamBuffer | None = None) -> None:
    """Scatter-add a chunk of constraint shares (any shape, C order; ``start``: the chunk's first
    value in the party's whole constraint vector) into ``buckets`` (slices × 2^16 uint64): bucket
    [g, v] sums the c_j whose coefficient word W_j has 16-bit slice g equal to v.  Linear in c, so
    chunks accumulate; :func:`bucket_sums` turns the buckets into the κ subset sums."""
    c = np.ascontiguousarray(constraints, dtype=_U64).reshape(-1)
    buffer = buffer or KeystreamBuffer(max(c.size, 1))
    pieces = buffer.words(key, c.size, start).view(np.uint16).reshape(c.size, 4)  # little-endian slices
    for g in range(buckets.shape[0]):
        np.add.at(buckets[g], pieces[:, g], c)


def bucket_sums(buckets: np.ndarray, repetitions: int = CHECK_REPETITIONS) -> np.ndarray:
    """The κ subset sums (κ,) uint64 from :func:`add_to_buckets`' buckets: repetition t = 16g + q is
    Σ_v bit_q(v)·buckets[g, v] = Σ_j bit_t(W_j)·c_j (mod 2^64)."""
    parts = []
    for g in range(buckets.shape[0]):
        used = np.flatnonzero(buckets[g])  # empty buckets add nothing (a small chunk fills few)
        with np.errstate(over="ignore"):
            parts.append(_BUCKET_BITS[:, used] @ buckets[g, used])
    return np.concatenate(parts)[:repetitions]


def new_buckets(repetitions: int = CHECK_REPETITIONS) -> np.ndarray:
    """Zeroed buckets for ``repetitions`` subset sums."""
    return np.zeros((_slices(repetitions), 1 << _SLICE), dtype=_U64)


def combine(constraints: np.ndarray, key: bytes, repetitions: int = CHECK_REPETITIONS, *,
            start: int = 0) -> np.ndarray:
    """The κ subset sums (κ,) uint64 Σ_j bit_t(W_j)·c_j of constraint shares (any shape, C order)
    whose first value is value ``start`` of the party's vector; W is the AES-CTR keystream of ``key``."""
    buckets = new_buckets(repetitions)
    add_to_buckets(buckets, constraints, key, start=start)
    return bucket_sums(buckets, repetitions)


def verdict(shares: list[np.ndarray]) -> bool:
    """Whether a party passes: its servers' re-randomised check shares add up to 0 in every repetition."""
    total = np.zeros_like(np.asarray(shares[0], dtype=_U64))
    for s in shares:
        total += np.asarray(s, dtype=_U64)
    return bool(np.all(total == 0))


def share_digest(seed: bytes | None, data: np.ndarray | None) -> str:
    """The digest two servers compare for the copy of one additive share they both hold: SHA-256 of
    its representation (a seed, or the explicit array with its shape).  An honest party sends both
    holders the same representation."""
    h = hashlib.sha256(b"ltm.share-copy.v1\0")
    if seed is not None:
        h.update(b"seed\0" + seed)
    else:
        arr = np.ascontiguousarray(data, dtype=_U64)
        h.update(b"data\0" + repr(arr.shape).encode() + b"\0")
        h.update(memoryview(arr).cast("B"))
    return h.hexdigest()


# -------------------------------------------------------------------- shares: the party and a server
@dataclass(frozen=True)
class ProofUpload:
    """What one party sends server i for its proof: the pair (w_i, w_{i+1}) of additive shares of its
    witness (n × T_b; seeds or data, replicated like the block) and server i's additive share of a
    zero vector (κ,) that re-randomises the check shares (a fresh 3-out-of-3 zero-sharing)."""

    server: int
    first: Share
    second: Share
    mask: Share

    @property
    def nbytes(self) -> int:
        """Payload bytes on the wire."""
        return self.first.nbytes + self.second.nbytes + self.mask.nbytes


def party_proof(block: np.ndarray, shape: ProofShape, randomness: Randomness, *, mode: str = "seed",
                primary: int = 0, repetitions: int = CHECK_REPETITIONS) -> list[ProofUpload]:
    """One party's three proof uploads (server order) for its grid-rounded block (n × d int64).
    Draws from ``randomness.child("witness")`` and ``.child("check-mask")`` only, so the block's and
    the noise's shares (ltm.replicated) are the same bytes with or without a proof."""
    adds = share(witness(block, shape), SERVERS, randomness.child("witness"), mode=mode, primary=primary)
    zero = share(np.zeros(repetitions, dtype=_U64), SERVERS, randomness.child("check-mask"), mode=mode,
                 primary=primary)
    return [ProofUpload(i, adds[i], adds[(i + 1) % SERVERS], zero[i]) for i in range(SERVERS)]


def server_check(server: int, block: tuple[Share, Share], proof: ProofUpload, shape: ProofShape, key: bytes,
                 repetitions: int = CHECK_REPETITIONS) -> np.ndarray:
    """Server ``server``'s re-randomised check share (κ,) uint64 for one party: the κ subset sums of
    its constraint shares (:func:`server_constraints`, :func:`combine`) plus its zero-sharing share.
    ``block``: its pair (x_i, x_{i+1}) of the party's block (n × d).  Streams the clients in chunks
    of :data:`CHECK_CHUNK_CLIENTS` (seeds expanded chunk by chunk): memory O(chunk · T)."""
    n, T, Tb = int(block[0].shape[0]), shape.constraint_width, shape.witness_width
    for s, width in ((block[0], shape.d), (block[1], shape.d), (proof.first, Tb), (proof.second, Tb)):
        if tuple(s.shape) != (n, width):
            raise ValueError(f"a proof share must be ({n}, {width}), got {tuple(s.shape)}")
    if tuple(proof.mask.shape) != (repetitions,):
        raise ValueError(f"the check mask must have {repetitions} values")
    chunk = min(CHECK_CHUNK_CLIENTS, max(n, 1))
    buffers = [KeystreamBuffer(chunk * Tb) for _ in range(4)]
    coefficients = KeystreamBuffer(chunk * T)
    buckets = new_buckets(repetitions)
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        x, x1, w, w1 = (share_rows(s, a, b, buf) for s, buf in
                        zip((block[0], block[1], proof.first, proof.second), buffers))
        c = server_constraints(server, (x, x1), (w, w1), shape)
        add_to_buckets(buckets, c, key, start=a * T, buffer=coefficients)
    return bucket_sums(buckets, repetitions) + proof.mask.values()


def copy_problems(digests: list[dict[tuple[str, str, int], str]]) -> dict[str, str]:
    """The parties whose copies of a replicated share differ between its two holders.

    ``digests[i]``: server i's :func:`share_digest` of every copy it holds, keyed (party, what, j)
    with j the additive share's index (server i holds j = i and i + 1 mod 3).  Returns
    {party: reason} for every share whose two holders report different digests, or that one of
    them does not report."""
    out: dict[str, str] = {}
    k = len(digests)
    keys = {key for d in digests for key in d}
    for party, what, j in sorted(keys):
        a, b = digests[j % k].get((party, what, j)), digests[(j - 1) % k].get((party, what, j))
        if a is None or b is None or a != b:
            out.setdefault(party, f"servers {(j - 1) % k} and {j % k} hold different copies of its {what} "
                                  f"share {j}")
    return out


def check_failures(party_ids: list[str], shares: list[dict[str, np.ndarray]],
                   digests: list[dict[tuple[str, str, int], str]]) -> dict[str, str]:
    """{party: reason} for every party whose proof fails: a server's check share missing, the three
    shares not adding up to 0 (:func:`verdict`), or two copies of a share differing
    (:func:`copy_problems`).  ``shares[i]``, ``digests[i]``: server i's.  The analyst and every
    server's gate decide with this one function."""
    failures = copy_problems(digests)
    for party in party_ids:
        got = [s.get(party) for s in shares]
        if len(got) != SERVERS or any(g is None for g in got):
            failures.setdefault(party, "its clipping check is missing")
        elif not verdict(got):  # type: ignore[arg-type]
            failures.setdefault(party, "its block is not proven clipped (the check does not sum to 0)")
    return failures


# -------------------------------------------------------------------- statements relayed over gRPC
# Servers never talk to each other: the analyst relays each server's seed and check output to the
# others, signed with the server's TLS key (transport/signing.py).  These are the signed payloads:
# canonical JSON naming the job's digest and the server, so a statement cannot be replayed for
# another job or place, and an output names the seed set it was computed for.
_SEED_KIND = "ltm.check-seed.v1"
_OUTPUT_KIND = "ltm.check-output.v1"


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _statement(payload: bytes, kind: str, job_digest: str, server: int) -> dict:
    """The decoded statement if it is a ``kind`` for this job from server ``server`` (ValueError)."""
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("a check statement is not JSON") from None
    if not isinstance(obj, dict) or obj.get("kind") != kind:
        raise ValueError(f"a check statement is not a {kind}")
    if obj.get("job_digest") != job_digest or obj.get("server") != server:
        raise ValueError(f"a check statement is for another job or server (expected server {server} of job "
                         f"{job_digest[:12]}…)")
    return obj


def seed_statement(job_digest: str, server: int, seed: bytes) -> bytes:
    """Server ``server``'s post-close check seed for the job, as the payload it signs."""
    return _canonical({"kind": _SEED_KIND, "job_digest": job_digest, "server": int(server), "seed": seed.hex()})


def read_seed_statement(payload: bytes, job_digest: str, server: int) -> bytes:
    """The 32-byte seed of server ``server``'s :func:`seed_statement` for this job (ValueError otherwise)."""
    seed = bytes.fromhex(str(_statement(payload, _SEED_KIND, job_digest, server).get("seed", "")))
    if len(seed) != 32:
        raise ValueError("a check seed is 32 bytes")
    return seed


def output_statement(job_digest: str, server: int, seeds: list[bytes], shares: dict[str, np.ndarray],
                     digests: dict[tuple[str, str, int], str]) -> bytes:
    """Server ``server``'s check output (its κ check shares per party and its copy digests),
    computed under ``seeds``, as the payload it signs."""
    return _canonical({"kind": _OUTPUT_KIND, "job_digest": job_digest, "server": int(server),
                       "seeds": [s.hex() for s in seeds],
                       "shares": {p: [int(v) for v in np.asarray(a, dtype=_U64)] for p, a in shares.items()},
                       "digests": sorted([p, w, int(j), h] for (p, w, j), h in digests.items())})


def statement_seeds(payload: bytes, job_digest: str, server: int) -> list[bytes]:
    """The seed set server ``server``'s :func:`output_statement` names (ValueError if malformed)."""
    try:
        return [bytes.fromhex(str(h)) for h in _statement(payload, _OUTPUT_KIND, job_digest, server)["seeds"]]
    except (KeyError, TypeError):
        raise ValueError(f"server {server}'s check output names no seed set") from None


def read_output_statement(payload: bytes, job_digest: str, server: int, seeds: list[bytes]
                          ) -> tuple[dict[str, np.ndarray], dict[tuple[str, str, int], str]]:
    """The check shares and copy digests of server ``server``'s :func:`output_statement`; ValueError
    unless it is for this job, from that server, and computed under exactly ``seeds``."""
    obj = _statement(payload, _OUTPUT_KIND, job_digest, server)
    if obj.get("seeds") != [s.hex() for s in seeds]:
        raise ValueError(f"server {server}'s check output was computed under another seed set")
    try:
        shares = {str(p): np.array([int(v) for v in vals], dtype=_U64) for p, vals in obj["shares"].items()}
        digests = {(str(p), str(w), int(j)): str(h) for p, w, j, h in obj["digests"]}
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ValueError(f"server {server}'s check output is malformed") from None
    return shares, digests

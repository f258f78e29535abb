"""Verified clipping for the replicated release: each party proves, on its replicated shares, that
every client's rounded block x̂ (d grid units of 2^-f) is within its budget share (issue #30;
docs/architecture.md, "Verified clipping").

**Statement.**  For every client: each entry x̂_a is an integer in [−2^r, 2^r) (no wrap-around in
Z_2^64) and ‖x̂‖² ≤ B, where R = C_p·2^f + √d/2 is the party's radius in grid units (the clipped
block's norm plus the rounding, the radius the sensitivity :func:`ltm.dp.sensitivity.rounded_gram_l2`
is computed for: Σ_p R_p² ≤ (C·2^f + √D/2)² by Cauchy–Schwarz when Σ_p C_p² ≤ C²), B = ⌊R²⌋
computed exactly in rationals (:func:`bound_squared`: ‖x̂‖² is an integer, so ‖x̂‖² ≤ R² ⇔ ‖x̂‖² ≤ ⌊R²⌋;
any larger B would admit a block outside R), and r is the bit length of ⌊√B⌋.

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

**Check vector.**  v = (c, δ): the constraint values c as the servers' shares add up (each from
its own copies), then per additive share j the differences δ_j between the copy of x_j, w_j held by
server j and the one held by server j − 1 (:func:`server_check` adds its first copy at region i and
subtracts its second at region i + 1, :func:`copy_offsets`).  v = 0 exactly when the two holders of
every share got the same values and the block so defined is valid.  No digests of copies are
published: the share a server lacks is a fixed function of the data once its own are fixed.

**Check** (:func:`combine`).  After every server has closed the job, each draws a fresh 32-byte
seed from the system CSPRNG; the coefficient key K is a hash of the job digest, the party and all k
seeds (:func:`coefficient_key`).  Its AES-CTR keystream gives one 64-bit word W_j per value of v;
repetition t (t < κ) is the subset sum S_t = Σ_j bit_t(W_j)·v_j.  Server i sends its share of the κ
sums plus two masks: its share of the party's zero-sharing and the servers' own zero-sharing
F(k_{i,i+1}, K) − F(k_{i−1,i}, K) from keys only two servers share (:func:`server_mask`), fresh for
every K; the party passes iff the three answers add up to 0 in every repetition (:func:`verdict`).

*Soundness, for any mask sum m fixed before the coefficients:* let m be the sum of the party's mask
shares (0 when honest; the servers' masks add up to exactly 0).  The party passes iff S_t = −m_t for every t < κ.  v and m are fixed
before the coefficients exist (at upload; no seed exists yet).  If v ≠ 0, pick j* with v_{j*} ≠ 0;
for each t, conditioned on every other bit, S_t + m_t = a_t + bit_t(W_{j*})·v_{j*} is zero for at
most one of the two values of that bit, and the κ bits of W_{j*} are independent and uniform, so
Pr[pass] ≤ 2^-κ (κ = :data:`CHECK_REPETITIONS` = 40).  No ring argument is needed: one repetition
misses v = 2^63 with probability exactly ½, which is why there are κ of them.

*Cost:* the κ subset sums are 16 at a time: for each 16-bit slice of W, a scatter-add of v into
2^16 buckets by the slice's value (one pass), then the 16 sums are bucket sums weighted by the
bucket index's bits (:func:`combine`) — ⌈κ/16⌉ passes over v, not κ.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from ltm.errors import LtmError
from ltm.randomness import KeystreamBuffer, Randomness, keystream_uint64
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
    "pair_mask",
    "server_mask",
    "mask_key_pairs",
    "copy_offsets",
    "ProofUpload",
    "party_proof",
    "server_check",
    "SERVERS",
    "ClippingProofFailed",
    "check_failures",
    "seed_statement",
    "read_seed_statement",
    "output_statement",
    "read_output_statement",
    "statement_seeds",
    "read_mask_public",
    "mask_private_key",
    "mask_public_key",
    "pairwise_mask_keys",
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


def bound_squared(d: int, frac_bits: int, clip_bound: float) -> int:
    """B = ⌊R²⌋ exactly, R = C_p·2^f + √d/2 (C_p the float as given, read exactly): the largest
    integer m with m ≤ A + √(Q), A = C_p²·4^f + d/4, Q = C_p²·4^f·d, decided in rationals (no float
    rounding can put B above R², which the sensitivity is computed for)."""
    from fractions import Fraction

    c = Fraction(float(clip_bound)) * (1 << int(frac_bits))
    a, q = c * c + Fraction(d, 4), c * c * d
    m = math.floor(a) + math.isqrt(q.numerator // q.denominator)  # ≤ ⌊A⌋ + ⌊√Q⌋ ≤ ⌊R²⌋ ≤ that + 2

    def within(m: int) -> bool:  # m ≤ A + √Q
        t = m - a
        return t <= 0 or t * t <= q

    while within(m + 1):
        m += 1
    return m


def proof_shape(d: int, frac_bits: int, clip_bound: float) -> ProofShape:
    """The proof's shape for a block of ``d`` columns clipped to ``clip_bound`` on the grid 2^-f.
    ValueError when the norm identity could wrap (d·2^{2r} + 2^L > 2^64)."""
    if d < 1 or frac_bits < 0 or not clip_bound > 0:
        raise ValueError(f"a proof needs d ≥ 1, f ≥ 0 and C > 0 (got d={d}, f={frac_bits}, C={clip_bound})")
    bound = bound_squared(int(d), int(frac_bits), clip_bound)
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


def pair_mask(pair_key: bytes, key: bytes, repetitions: int = CHECK_REPETITIONS) -> np.ndarray:
    """F(k, K): (κ,) uint64, the AES-CTR keystream of SHA-256(pair key k, coefficient key K).  A
    fresh pseudo-random vector for every coefficient key, so a server asked for two keys adds two
    independent masks (the re-randomisation cannot be cancelled between calls)."""
    if len(pair_key) != 32:
        raise ValueError("a pair mask key is 32 bytes")
    seed = hashlib.sha256(b"ltm.check-mask.v1\0" + pair_key + key).digest()
    return keystream_uint64(seed, repetitions)


def server_mask(mask_keys: tuple[bytes, bytes], key: bytes, repetitions: int = CHECK_REPETITIONS) -> np.ndarray:
    """Server i's share (κ,) of a zero-sharing made by the servers themselves: F(k_{i,i+1}, K) −
    F(k_{i−1,i}, K), ``mask_keys`` = (k_{i,i+1}, k_{i−1,i}), where k_{j,j+1} is a key only servers
    j and j + 1 know (:func:`mask_key_pairs`).  Sums to 0 over the three servers for any one K; a
    server lacking k_{j,j+1} sees servers j's and j + 1's masks as uniform given their sum."""
    with np.errstate(over="ignore"):
        return pair_mask(mask_keys[0], key, repetitions) - pair_mask(mask_keys[1], key, repetitions)


def mask_key_pairs(keys: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Each server's ``mask_keys`` from the three pairwise keys ``keys[j]`` = k_{j,j+1} (shared by
    servers j and j + 1 only): server i gets (k_{i,i+1}, k_{i−1,i})."""
    if len(keys) != SERVERS or any(len(k) != 32 for k in keys):
        raise ValueError(f"{SERVERS} pairwise mask keys of 32 bytes are needed")
    return [(keys[i], keys[(i - 1) % SERVERS]) for i in range(SERVERS)]


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


def copy_offsets(n: int, shape: ProofShape) -> list[int]:
    """Where the copy terms of additive share j (j = 0, 1, 2) start in a party's check vector: after
    its n·T constraint values, one region of n·(d + T_b) values per share, rows [x_j | w_j]."""
    width = shape.d + shape.witness_width
    return [n * shape.constraint_width + j * n * width for j in range(SERVERS)]


def server_check(server: int, block: tuple[Share, Share], proof: ProofUpload, shape: ProofShape, key: bytes,
                 repetitions: int = CHECK_REPETITIONS, *,
                 mask_keys: tuple[bytes, bytes] | None = None) -> np.ndarray:
    """Server ``server``'s re-randomised check share (κ,) uint64 for one party: the κ subset sums of
    the party's check vector as this server holds it, plus the masks.

    The check vector (module docstring): the n·T constraint values (:func:`server_constraints`),
    then per additive share j the copy differences x_j − x_j′, w_j − w_j′ between its two holders
    (:func:`copy_offsets`): server i adds its first copy (x_i | w_i) to region i and subtracts its
    second (x_{i+1} | w_{i+1}) from region i + 1, so the region sums to 0 exactly when the two
    holders got the same values.  Masks: the party's zero-sharing share ``proof.mask`` and, with
    ``mask_keys`` (:func:`server_mask`), the servers' own, fresh for every coefficient key — the one
    that keeps an honest party's check shares hiding its data when the analyst equivocates.
    ``block``: this server's pair (x_i, x_{i+1}) of the party's block (n × d).  Streams the clients
    in chunks of :data:`CHECK_CHUNK_CLIENTS`: memory O(chunk · T)."""
    n, T, Tb = int(block[0].shape[0]), shape.constraint_width, shape.witness_width
    for s, width in ((block[0], shape.d), (block[1], shape.d), (proof.first, Tb), (proof.second, Tb)):
        if tuple(s.shape) != (n, width):
            raise ValueError(f"a proof share must be ({n}, {width}), got {tuple(s.shape)}")
    if tuple(proof.mask.shape) != (repetitions,):
        raise ValueError(f"the check mask must have {repetitions} values")
    chunk = min(CHECK_CHUNK_CLIENTS, max(n, 1))
    buffers = [KeystreamBuffer(chunk * Tb) for _ in range(4)]
    coefficients = KeystreamBuffer(chunk * max(T, shape.d + Tb))
    buckets = new_buckets(repetitions)
    regions, width = copy_offsets(n, shape), shape.d + Tb
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        x, x1, w, w1 = (share_rows(s, a, b, buf) for s, buf in
                        zip((block[0], block[1], proof.first, proof.second), buffers))
        c = server_constraints(server, (x, x1), (w, w1), shape)
        add_to_buckets(buckets, c, key, start=a * T, buffer=coefficients)
        add_to_buckets(buckets, np.concatenate([x, w], axis=1), key, start=regions[server] + a * width,
                       buffer=coefficients)
        with np.errstate(over="ignore"):
            theirs = np.concatenate([x1, w1], axis=1)
            np.negative(theirs, out=theirs)
        add_to_buckets(buckets, theirs, key, start=regions[(server + 1) % SERVERS] + a * width,
                       buffer=coefficients)
    with np.errstate(over="ignore"):
        out = bucket_sums(buckets, repetitions) + proof.mask.values()
        if mask_keys is not None:
            out += server_mask(mask_keys, key, repetitions)
    return out


def check_failures(party_ids: list[str], shares: list[dict[str, np.ndarray]]) -> dict[str, str]:
    """{party: reason} for every party whose proof fails: a server's check share missing, or the
    three shares not adding up to 0 (:func:`verdict`: a block not proven clipped, or two holders of
    one share given different copies — both are in the one masked check).  ``shares[i]``: server
    i's.  The analyst and every server's gate decide with this one function."""
    failures: dict[str, str] = {}
    for party in party_ids:
        got = [s.get(party) for s in shares]
        if len(got) != SERVERS or any(g is None for g in got):
            failures[party] = "its clipping check is missing"
        elif not verdict(got):  # type: ignore[arg-type]
            failures[party] = ("its block is not proven clipped or its share copies differ "
                               "(the check does not sum to 0)")
    return failures


# -------------------------------------------------------------------- statements relayed over gRPC
# Servers never talk to each other: the analyst relays each server's seed and check output to the
# others, signed with the server's TLS key (ltm/transport/signing.py).  These are the signed payloads:
# canonical JSON naming the job's digest and the server, so a statement cannot be replayed for
# another job or place, and an output names the seed set it was computed for.  A seed statement also
# carries the server's X25519 public key for the job: neighbours j and j + 1 derive k_{j,j+1} from it
# (:func:`pairwise_mask_keys`), a key neither the analyst nor the third server can compute.
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


def seed_statement(job_digest: str, server: int, seed: bytes, mask_public: bytes) -> bytes:
    """Server ``server``'s post-close check seed and its X25519 public key for the pairwise mask keys
    (:func:`pairwise_mask_keys`) for the job, as the payload it signs."""
    return _canonical({"kind": _SEED_KIND, "job_digest": job_digest, "server": int(server), "seed": seed.hex(),
                       "mask_public": mask_public.hex()})


def _hex32(obj: dict, field: str, what: str) -> bytes:
    try:
        value = bytes.fromhex(str(obj.get(field, "")))
    except ValueError:
        raise ValueError(f"a check {what} is not hex") from None
    if len(value) != 32:
        raise ValueError(f"a check {what} is 32 bytes")
    return value


def read_seed_statement(payload: bytes, job_digest: str, server: int) -> bytes:
    """The 32-byte seed of server ``server``'s :func:`seed_statement` for this job (ValueError otherwise)."""
    return _hex32(_statement(payload, _SEED_KIND, job_digest, server), "seed", "seed")


def read_mask_public(payload: bytes, job_digest: str, server: int) -> bytes:
    """The 32-byte X25519 public key of server ``server``'s :func:`seed_statement` (ValueError otherwise)."""
    return _hex32(_statement(payload, _SEED_KIND, job_digest, server), "mask_public", "mask public key")


def mask_private_key() -> bytes:
    """A fresh X25519 private key (32 bytes, from the system CSPRNG) for one job's pairwise mask keys."""
    return Randomness.system().bytes(32)


def mask_public_key(private: bytes) -> bytes:
    """The X25519 public key (32 bytes) of ``private``."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _pair_key(private: bytes, peer_public: bytes, job_digest: str, low: int, high: int) -> bytes:
    """k_{low,high} = HKDF-SHA256(X25519(own private, peer public), salt = job digest, info = the pair)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    try:
        secret = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError:  # a low-order point: no shared secret
        raise ValueError(f"the mask public key for the pair ({low}, {high}) is not a usable X25519 key") from None
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=job_digest.encode(),
                info=f"ltm.check-mask-key.v1\0{low}\0{high}".encode()).derive(secret)


def pairwise_mask_keys(server: int, private: bytes, publics: list[bytes], job_digest: str) -> tuple[bytes, bytes]:
    """Server ``server``'s ``mask_keys`` (k_{i,i+1}, k_{i−1,i}) (:func:`server_mask`) from its own
    X25519 private key and every server's public key (``publics``, server order, as signed in the
    seed statements): k_{j,j+1} is X25519 between servers j and j + 1 only, so the relaying analyst
    and the third server cannot compute it."""
    if len(publics) != SERVERS or publics[server] != mask_public_key(private):
        raise ValueError(f"server {server}: the mask public keys must be every server's, this one's included")
    nxt, prev = (server + 1) % SERVERS, (server - 1) % SERVERS
    return (_pair_key(private, publics[nxt], job_digest, server, nxt),
            _pair_key(private, publics[prev], job_digest, prev, server))


def output_statement(job_digest: str, server: int, seeds: list[bytes], shares: dict[str, np.ndarray]) -> bytes:
    """Server ``server``'s check output (its κ check shares per party), computed under ``seeds``, as
    the payload it signs.  Nothing else: no digest of any share copy (docs/architecture.md)."""
    return _canonical({"kind": _OUTPUT_KIND, "job_digest": job_digest, "server": int(server),
                       "seeds": [s.hex() for s in seeds],
                       "shares": {p: [int(v) for v in np.asarray(a, dtype=_U64)] for p, a in shares.items()}})


def statement_seeds(payload: bytes, job_digest: str, server: int) -> list[bytes]:
    """The seed set server ``server``'s :func:`output_statement` names (ValueError if malformed)."""
    try:
        return [bytes.fromhex(str(h)) for h in _statement(payload, _OUTPUT_KIND, job_digest, server)["seeds"]]
    except (KeyError, TypeError):
        raise ValueError(f"server {server}'s check output names no seed set") from None


def read_output_statement(payload: bytes, job_digest: str, server: int, seeds: list[bytes]
                          ) -> dict[str, np.ndarray]:
    """The check shares of server ``server``'s :func:`output_statement`; ValueError unless it is for
    this job, from that server, and computed under exactly ``seeds``."""
    obj = _statement(payload, _OUTPUT_KIND, job_digest, server)
    if obj.get("seeds") != [s.hex() for s in seeds]:
        raise ValueError(f"server {server}'s check output was computed under another seed set")
    try:
        return {str(p): np.array([int(v) for v in vals], dtype=_U64) for p, vals in obj["shares"].items()}
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
        raise ValueError(f"server {server}'s check output is malformed") from None

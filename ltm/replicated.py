"""The degree-2 release of the columns partition from replicated secret shares (docs/architecture.md,
"The replicated release").

In the columns partition every party holds a column block z⁽ᵖ⁾ of the same n clients, so no party
can lift a whole client vector.  The Gram ``Σ_clients z zᵀ`` of the joint vector z = (z⁽¹⁾, …, z⁽ᴾ⁾)
needs the cross-party products z⁽ᵖ⁾ z⁽ᵠ⁾ᵀ.  With k = 3 servers and replicated secret sharing
(Araki, Furukawa, Lindell, Nof & Ohara 2016) the servers compute it without talking to each other:

* each party rounds its clipped block to the grid 2^-f (int64 grid units, :func:`ltm.dp.grid.round_to_grid`)
  and splits it additively, x = x₀ + x₁ + x₂ (mod 2^64); server i receives the pair (x_i, x_{i+1})
  (indices mod 3).  Seed-compressed as in :mod:`ltm.sharing`: two of the three additive shares are
  AES-CTR expansions of 32-byte seeds, so one server receives two seeds, the other two one seed and
  one explicit array each (the *primary* share, rotated over parties).
* server i concatenates the parties' blocks into its two n × D share matrices A_i, A_{i+1} and
  computes locally  ``O_i = A_iᵀA_i + A_iᵀA_{i+1} + A_{i+1}ᵀA_i``  (mod 2^64).  Over i = 0, 1, 2 the
  three terms cover every ordered pair (a, b) of additive shares exactly once, so
  ``Σ_i O_i = (Σ_a A_a)ᵀ(Σ_b A_b) = ZᵀZ`` in units of 2^-2f.  (The diagonal blocks, a party's own
  block, are computed the same way: a party could lift them itself, but the servers' local product
  costs no communication, so there is one code path.)
* the output shares are re-randomised: each party sends every server an additive share of its
  integer noise vector e_p (a fresh 3-out-of-3 sharing, i.e. a zero-sharing r₀ + r₁ + r₂ = 0 plus
  e_p on the primary share, one value per released entry).  Server i releases
  ``R_i = triu(O_i) + Σ_p share_i(e_p)``; the analyst adds the three and learns
  ``triu(ZᵀZ) + Σ_p e_p`` and nothing else: products of uniform shares are not uniform, but given
  their sum the R_i are uniform, because one honest party's masks are.

**Trust.**  One server alone sees two of three additive shares of every value (uniform, independent
of the data); any two servers hold all three and reconstruct every party's data.  The release is
private against at most one corrupt server of three (t < k/2, an honest majority), not the k − 1 of
the sketch.  The job spec says which assumption it accepts (``JobSpec.colluding_servers``).

**Fixed point.**  A product doubles the fractional bits: O_i is in units of 2^-2f.  Ring arithmetic
is exact mod 2^64 whatever the shares' magnitudes, so only the true result must fit: every released
entry satisfies |Σ_clients ẑ_a ẑ_b + Σ_p e_p| ≤ n·(C + √D·2^-f/2)² + P·20·σ_c (the noise tail,
:func:`ltm.dp.noise.noise_tail_bound`), and :func:`replicated_frac_bits` picks the largest f whose
bound times 2^2f is ≤ 2^62, so one 64-bit limb suffices (at the limits, n = 2^30 and C = 1, f = 15).

**Noise.**  The release is the unscaled upper triangle T(z) = (z_a z_b)_{a ≤ b} with i.i.d. noise per
entry (the same mechanism as AdaSSP's upper triangle); its replace-one ℓ2 sensitivity is √2·C²
(docs/planner.md), widened for the rounding to √2·(C + √D·2^-f/2)².  Each of the P parties adds
N_Z(0, σ_c²) per entry in units of 2^-2f, calibrated as the distributed discrete Gaussian with
L = P − max(corrupt_parties, 1) honest draws per entry when P ≥ 2 (:func:`noise_known_parties`: a
corrupt party knows its own noise, and so does a curious one that follows the protocol).

**A deviating party.**  Unless the job has ``verified_clipping`` (:mod:`ltm.verified_clipping`, in
process and over gRPC), nothing checks on the shares that a party's block is clipped: a party
uploading M·e_j instead of its block would read, in the released cross Gram, M times client j's
values held by the other parties.  So an unverified replicated job tolerates no deviating party:
``corrupt_parties`` must be 0 (:func:`unverified_party_problem`, asked by validation and by the
party's policy; issue #30).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ltm.dp.calibration import NoisePlan, plan_noise
from ltm.dp.grid import round_to_grid
from ltm.dp.noise import noise_tail_bound, sample_noise
from ltm.dp.sensitivity import rounded_gram_l2
from ltm.randomness import KeystreamBuffer, Randomness
from ltm.ring import HEADROOM_LIMIT
from ltm.sharing import Share, reconstruct, share, share_rows
from ltm.verified_clipping import ProofShape, ProofUpload, party_proof

__all__ = [
    "REPLICATED_SERVERS",
    "MAX_REPLICATED_FRAC_BITS",
    "honest_majority",
    "noise_known_parties",
    "UNVERIFIED_CORRUPT_PARTIES",
    "unverified_party_problem",
    "triangle_width",
    "replicated_noise_plan",
    "replicated_frac_bits",
    "entry_bound",
    "BlockUpload",
    "PART_FIRST",
    "PART_SECOND",
    "PART_NOISE",
    "REPLICATED_PARTS",
    "PART_WITNESS_FIRST",
    "PART_WITNESS_SECOND",
    "PART_CHECK_MASK",
    "VERIFIED_PARTS",
    "parts_per_upload",
    "upload_parts",
    "upload_from_parts",
    "share_block",
    "share_noise",
    "party_uploads",
    "server_output",
    "reconstruct_triangle",
    "triangle_to_gram",
    "clear_triangle",
]

#: Servers of the replicated release (Araki et al.'s 2-out-of-3 sharing).
REPLICATED_SERVERS = 3
#: The largest input grid the replicated release uses (products are on 2^-2f).
MAX_REPLICATED_FRAC_BITS = 24
_GAUSS_TAIL_SIGMAS = 20.0


def honest_majority(k: int, colluding: int) -> bool:
    """Whether a release may rest on at most ``colluding`` of ``k`` servers colluding with t < k/2."""
    return 0 <= colluding and 2 * colluding < k


def noise_known_parties(parties: int, corrupt_parties: int) -> int:
    """Parties whose noise draws the replicated release's calibration discounts: the corrupt ones, and
    at least one when P ≥ 2, because a party that follows the protocol still knows its own noise (a
    curious party subtracts it).  ``corrupt_parties`` counts the parties that may *deviate*."""
    return max(int(corrupt_parties), 1 if parties >= 2 else 0)


#: Why a replicated job must not tolerate a deviating party yet (issue #30): nobody checks on the
#: shares that a party's block is clipped, and an unclipped block M·e_j makes the cross Gram reveal
#: M times client j's values held by the other parties (ε = ∞).
UNVERIFIED_CORRUPT_PARTIES = (
    "the replicated release (columns partition, colluding_servers = 1) currently assumes every party follows the "
    "protocol: nothing checks that a party's shares encode a clipped block, so a corrupt party could read the "
    "other parties' values; set corrupt_parties = 0 to accept that (issue #30), or use a sketch kind")


def unverified_party_problem(corrupt_parties: int) -> str | None:
    """The one-line refusal of a replicated job that tolerates ``corrupt_parties`` ≥ 1 deviating
    parties (None when it tolerates none): every actor asks this (validation, the party's policy)."""
    if corrupt_parties >= 1:
        return f"{UNVERIFIED_CORRUPT_PARTIES} (got corrupt_parties = {corrupt_parties})"
    return None


def triangle_width(d: int) -> int:
    """D(D+1)/2 released entries: the upper triangle of Σ z zᵀ, ``numpy.triu_indices`` order."""
    return d * (d + 1) // 2


def replicated_noise_plan(*, epsilon: float, delta: float, clip_bound: float, d: int, parties: int,
                          corrupt_parties: int, frac_bits: int, zcdp_rho: float | None = None) -> NoisePlan:
    """The per-party noise of the replicated release, in units of 2^-2f (``plan.frac_bits = 2f``).

    L = parties − :func:`noise_known_parties` honest per-entry draws (a corrupt party, and at least one
    curious party, knows its own noise); the sensitivity is
    :func:`ltm.dp.sensitivity.rounded_gram_l2` (the plan adds √W·2^-2f more for its own rounding term: harmless).
    """
    honest = parties - noise_known_parties(parties, corrupt_parties)
    if honest < 1:
        raise ValueError(f"the replicated release needs at least one honest party "
                         f"(parties={parties}, corrupt_parties={corrupt_parties})")
    return plan_noise(mechanism="gaussian", calibration="tight", epsilon=epsilon, delta=delta,
                      clip_norm=clip_bound, s=1, min_honest_load=honest, sketch_kind="sum", m=1, d=d,
                      sensitivity=rounded_gram_l2(clip_bound, d, frac_bits), frac_bits=2 * frac_bits,
                      width=triangle_width(d), zcdp_rho=zcdp_rho)


def entry_bound(n: int, clip_bound: float, d: int, frac_bits: int, plan: NoisePlan, parties: int) -> float:
    """A bound (data units) on |released entry|: n·(C + √D·2^-f/2)² plus P noise tails (each
    exceeded with probability < e^-100)."""
    radius = float(clip_bound) + 0.5 * math.sqrt(d) * math.ldexp(1.0, -int(frac_bits))
    return n * radius * radius + parties * noise_tail_bound(plan)


def replicated_frac_bits(*, n: int, clip_bound: float, d: int, epsilon: float, delta: float, parties: int,
                         corrupt_parties: int) -> int:
    """The largest f ≤ 24 whose released entries fit the ring with the factor-2 margin:
    :func:`entry_bound` · 2^2f ≤ 2^62, and whose per-party noise stays samplable (σ_c ≤ 2^44 grid steps)."""
    for f in range(MAX_REPLICATED_FRAC_BITS, 3, -1):
        plan = replicated_noise_plan(epsilon=epsilon, delta=delta, clip_bound=clip_bound, d=d, parties=parties,
                                     corrupt_parties=corrupt_parties, frac_bits=f)
        if (entry_bound(n, clip_bound, d, f, plan, parties) * 2.0 ** (2 * f) <= HEADROOM_LIMIT
                and math.sqrt(plan.grid_sigma2) <= 2.0**43):
            return f
    raise ValueError(f"replicated release: no fraction bits fit n={n}, C={clip_bound} in one 64-bit limb")


# -------------------------------------------------------------------- the parties' side
@dataclass(frozen=True)
class BlockUpload:
    """What one party sends one server for the replicated release.

    Attributes:
        server: 0-based server index i.
        columns: indices of the block's entries in the joint client vector.
        first, second: the additive shares x_i and x_{i+1} of the block (n × d_p uint64; seeds or data).
        noise: the server's additive share of the party's noise vector (W,) (a zero-sharing plus the noise).
        proof: the party's clipping proof for this server (:mod:`ltm.verified_clipping`), or None.
    """

    server: int
    columns: tuple[int, ...]
    first: Share
    second: Share
    noise: Share
    #: The party's proof that its block is clipped (a job with ``verified_clipping``), else None.
    proof: ProofUpload | None = None

    @property
    def nbytes(self) -> int:
        """Payload bytes on the wire."""
        return (self.first.nbytes + self.second.nbytes + self.noise.nbytes
                + (self.proof.nbytes if self.proof is not None else 0))


#: Over gRPC (docs/architecture.md, "The replicated release") a party's upload to server i travels as
#: three uploads of the ordinary ``Upload`` RPC, told apart by ``BatchHeader.batch_index``: the
#: additive share x_i of its block, x_{i+1}, and its share of the noise vector.  Each is one Share
#: (an explicit array or a 32-byte seed), so seed compression works as for a sketch batch.  A job
#: with verified clipping (:mod:`ltm.verified_clipping`) takes three more: the witness shares w_i,
#: w_{i+1} (1, n, T_b) and the server's share of the check mask (1, 1, κ).
PART_FIRST, PART_SECOND, PART_NOISE = 0, 1, 2
PART_WITNESS_FIRST, PART_WITNESS_SECOND, PART_CHECK_MASK = 3, 4, 5
REPLICATED_PARTS = 3
VERIFIED_PARTS = 6


def parts_per_upload(verified_clipping: bool) -> int:
    """How many wire parts one party sends one server: 3, or 6 with verified clipping."""
    return VERIFIED_PARTS if verified_clipping else REPLICATED_PARTS


def _wire(s: Share, shape: tuple[int, ...], server: int) -> Share:
    """``s``'s values with another shape of the same size, addressed to ``server`` (a seed's
    expansion is in C order, so reshaping a seed share is reshaping its values)."""
    if s.seed is not None:
        return Share(server, shape, seed=s.seed)
    return Share(server, shape, data=np.ascontiguousarray(s.data).reshape(shape))


def upload_parts(upload: BlockUpload) -> list[Share]:
    """The wire shares of one upload (part order): blocks as (1, n, d_p), noise as (1, 1, W), and
    with a proof its witness shares as (1, n, T_b) and its check mask as (1, 1, κ); each is
    addressed to the upload's server (the second block share is x_{i+1}, held by server i)."""
    n, d = upload.first.shape
    block = (1, int(n), int(d))
    parts = [_wire(upload.first, block, upload.server), _wire(upload.second, block, upload.server),
             _wire(upload.noise, (1, 1, int(upload.noise.shape[0])), upload.server)]
    proof = upload.proof
    if proof is not None:
        wit = (1, int(n), int(proof.first.shape[1]))
        parts += [_wire(proof.first, wit, upload.server), _wire(proof.second, wit, upload.server),
                  _wire(proof.mask, (1, 1, int(proof.mask.shape[0])), upload.server)]
    return parts


def upload_from_parts(server: int, columns: tuple[int, ...], parts: list[Share]) -> BlockUpload:
    """A :class:`BlockUpload` from its wire shares (:func:`upload_parts`' inverse; 3 or 6 parts)."""
    if len(parts) not in (REPLICATED_PARTS, VERIFIED_PARTS):
        raise ValueError(f"a replicated upload is {REPLICATED_PARTS} or {VERIFIED_PARTS} parts, got {len(parts)}")
    first, second, noise = parts[:REPLICATED_PARTS]
    proof = None
    if len(parts) == VERIFIED_PARTS:
        w, w1, mask = parts[REPLICATED_PARTS:]
        proof = ProofUpload(server, _wire(w, tuple(w.shape[1:]), server), _wire(w1, tuple(w1.shape[1:]), server),
                            _wire(mask, (int(mask.shape[-1]),), server))
    return BlockUpload(server, tuple(columns), _wire(first, tuple(first.shape[1:]), server),
                       _wire(second, tuple(second.shape[1:]), server), _wire(noise, (int(noise.shape[-1]),), server),
                       proof)


def _ring(grid_units: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(grid_units, dtype=np.int64).view(np.uint64)


def share_block(block: np.ndarray, frac_bits: int, randomness: Randomness, *, mode: str = "seed",
                primary: int = 0) -> list[tuple[Share, Share]]:
    """Round a clipped block (n × d_p floats) to the grid and replicate-share it: entry i is server
    i's pair (x_i, x_{i+1}).  ``primary``: which additive share is explicit in seed mode."""
    x = _ring(round_to_grid(block, frac_bits))
    adds = share(x, REPLICATED_SERVERS, randomness, mode=mode, primary=primary)
    return [(adds[i], adds[(i + 1) % REPLICATED_SERVERS]) for i in range(REPLICATED_SERVERS)]


def share_noise(noise: np.ndarray, randomness: Randomness, *, mode: str = "seed", primary: int = 0) -> list[Share]:
    """A fresh additive sharing of the party's integer noise vector (int64 grid units of 2^-2f)."""
    return share(_ring(noise), REPLICATED_SERVERS, randomness, mode=mode, primary=primary)


def party_uploads(block: np.ndarray, columns: tuple[int, ...], *, width: int, frac_bits: int,  # noqa: PLR0913 - the replicated upload's keyword-only inputs (plan, randomness, share mode, proof shape)
                  plan: NoisePlan | None, randomness: Randomness, mode: str = "seed",
                  primary: int = 0, proof: ProofShape | None = None) -> list[BlockUpload]:
    """One party's three uploads: its replicated block and its noise shares.

    ``width``: D of the joint client vector.  ``plan`` None: no noise (the shares of a zero vector
    still re-randomise the outputs; exactness checks only).  ``proof``: the shape of the party's
    clipping proof (:func:`ltm.verified_clipping.proof_shape`) in a job with verified clipping; it
    draws from its own randomness children, so the block and noise shares are the same bytes.
    """
    W = triangle_width(int(width))
    noise = (sample_noise(randomness.child("noise").stream(), plan, (W,)) if plan is not None
             else np.zeros(W, dtype=np.int64))
    pairs = share_block(block, frac_bits, randomness.child("block"), mode=mode, primary=primary)
    masks = share_noise(noise, randomness.child("masks"), mode=mode, primary=primary)
    proofs: list[ProofUpload | None] = [None] * REPLICATED_SERVERS
    if proof is not None:
        proofs = list(party_proof(round_to_grid(block, frac_bits), proof, randomness.child("proof"), mode=mode,
                                  primary=primary))
    return [BlockUpload(i, tuple(columns), a, b, masks[i], proofs[i]) for i, (a, b) in enumerate(pairs)]


# -------------------------------------------------------------------- the servers' side
#: Clients per chunk of a server's products: the servers hold two chunk × D blocks, never n × D.
OUTPUT_CHUNK_CLIENTS = 1 << 16


def server_output(server: int, uploads: list[BlockUpload], n: int, d: int) -> np.ndarray:
    """Server ``server``'s output share (W,) uint64: triu(A_iᵀA_i + A_iᵀA_{i+1} + A_{i+1}ᵀA_i) plus
    every party's noise share.  ``uploads``: this server's upload from each party (blocks must tile
    the D columns).  Local: no other server's data is needed.  Streams the clients in chunks of
    :data:`OUTPUT_CHUNK_CLIENTS` (seeds expanded chunk by chunk), so memory is O(chunk · D) beyond
    the uploads; ring sums are exact in any order, so the bytes do not depend on the chunking."""
    seen = np.zeros(d, dtype=np.int64)
    W = triangle_width(d)
    noise = np.zeros(W, dtype=np.uint64)
    for up in uploads:
        if up.server != server:
            raise ValueError(f"an upload for server {up.server} was given to server {server}")
        if up.first.shape != (n, len(up.columns)) or up.second.shape != (n, len(up.columns)):
            raise ValueError(f"block shares must be ({n}, {len(up.columns)})")
        seen[list(up.columns)] += 1
        noise += up.noise.values()
    if not np.all(seen == 1):
        raise ValueError("the parties' blocks must cover every column of the joint vector exactly once")
    chunk = min(OUTPUT_CHUNK_CLIENTS, max(n, 1))
    buffer = KeystreamBuffer(chunk * max((len(up.columns) for up in uploads), default=1))
    first = np.empty((chunk, d), dtype=np.uint64)
    second = np.empty((chunk, d), dtype=np.uint64)
    prod = np.zeros((d, d), dtype=np.uint64)
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        x, y = first[:b - a], second[:b - a]
        for up in uploads:
            cols = list(up.columns)
            x[:, cols] = share_rows(up.first, a, b, buffer)
            y[:, cols] = share_rows(up.second, a, b, buffer)
        # A_iᵀ(A_i + A_{i+1}) + A_{i+1}ᵀA_i: two products.  einsum's integer loops wrap mod 2^64 (the
        # ring) and are ~15× faster than uint64 matmul.
        prod += np.einsum("na,nb->ab", x, x + y)
        prod += np.einsum("na,nb->ab", y, x)
    i, j = np.triu_indices(d)
    return prod[i, j] + noise


# -------------------------------------------------------------------- the analyst's side
def reconstruct_triangle(outputs: list[np.ndarray], frac_bits: int) -> tuple[np.ndarray, str]:
    """The released triangle (float64, data units) from the three output shares, and the SHA-256 of
    its ring bytes.  ``frac_bits``: the input f (the triangle is on 2^-2f)."""
    if len(outputs) != REPLICATED_SERVERS:
        raise ValueError(f"the replicated release needs {REPLICATED_SERVERS} output shares, got {len(outputs)}")
    total = reconstruct(list(outputs))
    digest = hashlib.sha256(np.ascontiguousarray(total).tobytes()).hexdigest()
    return total.view(np.int64).astype(np.float64) / 2.0 ** (2 * frac_bits), digest


def triangle_to_gram(triangle: np.ndarray, d: int) -> np.ndarray:
    """The symmetric D × D matrix from an unscaled upper triangle (``numpy.triu_indices`` order)."""
    t = np.asarray(triangle, dtype=np.float64).reshape(-1)
    if t.shape[0] != triangle_width(d):
        raise ValueError(f"a triangle for D={d} has {triangle_width(d)} values, got {t.shape[0]}")
    i, j = np.triu_indices(d)
    G = np.zeros((d, d))
    G[i, j] = t
    G[j, i] = t
    return G


def clear_triangle(Z: np.ndarray, frac_bits: int) -> np.ndarray:
    """The exact triu(ẐᵀẐ) in ring units of 2^-2f (uint64) of the grid-rounded Z, computed in the
    clear: what the three output shares must add up to when there is no noise."""
    x = _ring(round_to_grid(Z, frac_bits))
    i, j = np.triu_indices(Z.shape[1])
    return np.einsum("na,nb->ab", x, x)[i, j]

"""Seed-compressed shares of the bits and the proof, as Prio3 sends them.

For a batch of C clients and K servers, helpers 1..K−1 each receive one 32-byte seed; their shares
of the bits (C, L) and of the proofs (C, Π) are the expansion of that seed, and the leader (server
0) receives the full vectors minus the helpers' shares.  The expansion key binds the seed to a
``context`` (the job's digest, the party, the batch and its first client), so a share moved to
another job, party, batch or client position expands to different values and fails verification:
that is what stops a replayed proof.  Expansion is AES-256-CTR (``ltm.randomness``) and each field
element takes two uniform words, so a helper's share is within p/2^128 of uniform per element.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ltm.flp.circuit import BoundedL2
from ltm.flp.field import FieldError
from ltm.randomness import Randomness, keystream_uint64, xof

SEED_BYTES = 32
_HELPER_TAG = b"ltm/flp/helper-share/v1"


def expand_helper(circuit: BoundedL2, seed: bytes, context: bytes, clients: int,
                  server: int) -> tuple[np.ndarray, np.ndarray]:
    """Helper ``server``'s shares of the bits (C, L) and proofs (C, Π) of a batch, from its seed."""
    if len(seed) != SEED_BYTES:
        raise FieldError(f"helper seed of {len(seed)} bytes; expected {SEED_BYTES}")
    if clients < 0:
        raise FieldError("clients must be ≥ 0")
    f = circuit.field
    width = circuit.meas_len + circuit.proof_len
    key = xof(_HELPER_TAG, f.name.encode(), seed, context, server.to_bytes(4, "little"))
    flat = f.from_uniform_words(keystream_uint64(key, 2 * clients * width)).reshape(clients, width)
    return flat[:, : circuit.meas_len], flat[:, circuit.meas_len:]


@dataclass(frozen=True)
class ProofShares:
    """A batch's upload for K servers: the leader's full shares and one seed per helper.

    ``leader_meas`` (C, L), ``leader_proof`` (C, Π) go to server 0; ``helper_seeds[j − 1]`` to server j.
    """

    leader_meas: np.ndarray
    leader_proof: np.ndarray
    helper_seeds: tuple[bytes, ...]


def split(circuit: BoundedL2, meas: np.ndarray, proof: np.ndarray, num_shares: int,
          randomness: Randomness, context: bytes) -> ProofShares:
    """Share a batch's bits (C, L) and proofs (C, Π) among ``num_shares`` servers (seeds from ``randomness``)."""
    if num_shares < 2:
        raise FieldError("validity proofs need at least 2 servers")
    f = circuit.field
    leader_meas, leader_proof = np.asarray(meas, np.uint64), np.asarray(proof, np.uint64)
    seeds = []
    for j in range(1, num_shares):
        seed = randomness.child("flp-helper", j).bytes(SEED_BYTES)
        hm, hp = expand_helper(circuit, seed, context, len(leader_meas), j)
        leader_meas, leader_proof = f.sub(leader_meas, hm), f.sub(leader_proof, hp)
        seeds.append(seed)
    return ProofShares(leader_meas, leader_proof, tuple(seeds))


def prove_rand(circuit: BoundedL2, randomness: Randomness, clients: int) -> np.ndarray:
    """The prover's wire seeds (C, 2R): uniform field elements from the CSPRNG."""
    f = circuit.field
    return f.from_uniform_words(randomness.stream().uint64(2 * clients * 2 * circuit.reps)).reshape(
        clients, 2 * circuit.reps)

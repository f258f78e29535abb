"""Releases rebuilt in the clear from the same randomness the parties use: the references the exact
tests compare the protocol's output against, bit for bit (docs/architecture.md §3)."""
from __future__ import annotations

import numpy as np

from ltm.lifts import LIFTS
from ltm.party.randomizer import client_vectors, clip_rows, noisy_copies, party_randomness, plan_batches

#: The batch size the exact tests upload with (the noise of a batch is drawn per batch).
BATCH = 64


def clear_release(spec, tables, randomness, batch: int = BATCH) -> np.ndarray:
    """Σ_l S_l · enc(X + G_l) mod 2^64, rebuilding every party's noisy copies in the clear."""
    sketch = spec.make_sketch()
    pieces = sketch.pieces
    plan = spec.noise_plan()
    full = np.zeros((pieces, spec.n, spec.width), dtype=np.uint64)
    for party in spec.parties:
        cols = spec.party_column_indices(party)
        vectors = clip_rows(client_vectors(spec, party, tables[party.party_id]), party.clip_bound, spec.clip_norm)
        prand = party_randomness(randomness, spec, party.party_id)
        for batch_index, a, b in plan_batches(party, batch).ranges:
            rand = prand.child("batch", batch_index)
            noisy = noisy_copies(vectors[a - party.start:b - party.start], pieces, plan, rand.child("noise"))
            full[:, a:b, :][:, :, cols] = noisy  # ring elements already
    rows, negative = sketch.placement(0, spec.n)
    total = np.zeros((sketch.m, spec.width), dtype=np.uint64)
    for piece in range(pieces):
        S = np.zeros((sketch.m, spec.n), dtype=np.uint64)
        S[rows[piece], np.arange(spec.n)] = np.where(negative[piece], np.uint64(2**64 - 1), np.uint64(1))
        total += S @ full[piece]  # uint64 matmul wraps mod 2^64
    return total


def clear_gram_release(spec, tables, randomness, batch: int = BATCH) -> np.ndarray:
    """Σ_clients enc(lift(clip(z)) + noise) mod 2^64, rebuilt in the clear from the same randomness."""
    plan = spec.noise_plan()
    total = np.zeros((1, spec.upload_width), dtype=np.uint64)
    for party in spec.parties:
        vectors = clip_rows(client_vectors(spec, party, tables[party.party_id]), party.clip_bound, spec.clip_norm)
        lifted = LIFTS["gram"].apply(spec, vectors)
        prand = party_randomness(randomness, spec, party.party_id)
        for batch_index, a, b in plan_batches(party, batch).ranges:
            noisy = noisy_copies(lifted[a - party.start:b - party.start], 1, plan,
                                 prand.child("batch", batch_index).child("noise"))
            total[0] += noisy[0].sum(axis=0, dtype=np.uint64)
    return total


def shares_sum(run) -> np.ndarray:
    """Σ of a run's output shares mod 2^64 (each server's share of the release): what the analyst
    reconstructs before decoding."""
    return sum(run.result_shares[1:], run.result_shares[0].copy())


def assert_release_over_everyone_is(run, spec, expected: np.ndarray) -> None:
    """Every client took part in ``run`` and its output shares add up to ``expected`` bit for bit."""
    assert run.participants.count == spec.n
    np.testing.assert_array_equal(shares_sum(run), expected)

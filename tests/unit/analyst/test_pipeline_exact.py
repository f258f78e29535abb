"""Reconstruction equals S·(X + G) computed in the clear, bit for bit (docs/architecture.md §3)."""
import numpy as np
import pytest

from ltm.datasets.synthetic import synthetic_ridge
from ltm.party.randomizer import client_vectors, clip_rows, noisy_copies, party_randomness, plan_batches
from ltm.randomness import Randomness
from ltm.ring import decode
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.clear_releases import BATCH, assert_release_over_everyone_is, clear_release

N_CLIENTS = 300


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("share_mode", ["seed", "full"])
@pytest.mark.parametrize("partition", ["rows", "columns"])
@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_reconstruction_is_bit_exact(kind, partition, share_mode, k):
    randomness = Randomness.seeded_insecure(f"exact-{kind}-{partition}-{share_mode}-{k}")
    table = synthetic_ridge(N_CLIENTS, 4, randomness)
    spec, _ = build_job(table, job_id="exact", randomness=randomness, partition=partition, parties=3, k=k,
                        kind=kind, m=6 if kind == "dense" else 12, s=3, share_mode=share_mode)
    tables = party_tables(spec, table)
    run = run_inprocess(spec, tables, randomness, batch_clients=BATCH)
    expected = clear_release(spec, tables, randomness)
    assert_release_over_everyone_is(run, spec, expected)
    # and the decoded, scaled release is that sum
    decoded = expected.view(np.int64).astype(float) / 2.0**spec.frac_bits * spec.make_sketch().scale
    np.testing.assert_array_equal(run.release.matrix, decoded)


def test_clear_release_matches_the_float_sketch():
    """The ring path equals the floating-point S·(X+G) up to fixed-point rounding."""
    randomness = Randomness.seeded_insecure("float")
    table = synthetic_ridge(N_CLIENTS, 4, randomness)
    spec, _ = build_job(table, job_id="f", randomness=randomness, parties=2, m=12, s=2)
    tables = party_tables(spec, table)
    run = run_inprocess(spec, tables, randomness, batch_clients=BATCH)
    sketch = spec.make_sketch()
    plan = spec.noise_plan()
    S = sketch.to_dense().astype(float)
    rows, negative = sketch.placement(0, spec.n)
    acc = np.zeros((sketch.m, spec.width))
    for party in spec.parties:
        vectors = clip_rows(client_vectors(spec, party, tables[party.party_id]), party.clip_bound)
        prand = party_randomness(randomness, spec, party.party_id)
        for bi, a, b in plan_batches(party, BATCH).ranges:
            noisy = noisy_copies(vectors[a - party.start:b - party.start], sketch.pieces, plan,
                                 prand.child("batch", bi).child("noise"))
            for piece in range(sketch.pieces):
                sign = np.where(negative[piece, a:b], -1.0, 1.0)
                np.add.at(acc, rows[piece, a:b], sign[:, None] * decode(noisy[piece], spec.frac_bits))
    assert np.allclose(run.release.matrix, acc * sketch.scale, atol=spec.n * 2.0**-spec.frac_bits)
    assert S.shape == (sketch.m, spec.n)

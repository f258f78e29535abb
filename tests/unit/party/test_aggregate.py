"""Aggregated uploads (party/aggregate.py): exactly the per-client sum without noise, the same
per-entry noise variance with it, and mode mismatches refused."""
from dataclasses import replace

import numpy as np
import pytest

from ltm.datasets.synthetic import synthetic_ridge
from ltm.errors import ProtocolError
from ltm.party import aggregate, randomizer
from ltm.party.aggregate import aggregate_party
from ltm.randomness import Randomness
from ltm.server.core import ServerCore
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.clear_releases import shares_sum

N = 600


def _no_noise(stream, plan, shape, *, multiplicity=1):
    """Noise switched off (this test's sample_noise): zeros of the requested shape."""
    return np.zeros(shape, dtype=np.int64)


def _job(kind, partition="rows", mode="per-client", **kw):
    randomness = Randomness.seeded_insecure(f"agg-{kind}-{partition}")
    table = synthetic_ridge(N, 4, randomness)
    spec, _ = build_job(table, job_id=f"agg-{kind}", randomness=randomness, partition=partition, parties=3, k=3,
                        kind=kind, m={"dense": 6, "sparse": 16}.get(kind), s=3 if kind == "sparse" else 1,
                        upload_mode=mode, **kw)
    return spec, party_tables(spec, table), randomness


def _released_sum(spec, tables, randomness, batch_clients=64):
    return shares_sum(run_inprocess(spec, tables, randomness, batch_clients=batch_clients))


@pytest.mark.parametrize("kind,partition", [("gram", "rows"), ("sparse", "rows"), ("dense", "rows"),
                                            ("sparse", "columns")])
def test_aggregate_equals_the_per_client_sum_without_noise(monkeypatch, kind, partition):
    monkeypatch.setattr(randomizer, "sample_noise", _no_noise)
    monkeypatch.setattr(aggregate, "sample_noise", _no_noise)
    spec, tables, randomness = _job(kind, partition)
    per_client = _released_sum(spec, tables, randomness)
    agg_spec = replace(spec, upload_mode="aggregate")
    aggregated = _released_sum(agg_spec, tables, randomness)
    np.testing.assert_array_equal(aggregated, per_client)
    assert per_client.any()  # the data reached the release (not two zero arrays)


def test_aggregate_partial_equals_the_servers_map_of_per_client_copies(monkeypatch):
    """One party's partial (no noise) is S applied to its own rounded vectors, as the servers apply it."""
    monkeypatch.setattr(randomizer, "sample_noise", _no_noise)
    spec, tables, randomness = _job("sparse")
    party = spec.parties[1]
    agg = aggregate_party(spec, party.party_id, tables[party.party_id], None)
    (batches,) = [sum_ for sum_ in [list(randomizer.make_batches(
        spec, party.party_id, tables[party.party_id], randomness, batch_clients=party.size))]]
    sketch = spec.make_sketch()
    full = batches[0]
    values = sum((b.share.values() for b in full[1:]), full[0].share.values().copy())
    expected = sketch.apply(party.start, values)
    np.testing.assert_array_equal(agg.values, expected)
    rows, _ = sketch.placement(party.start, party.stop)
    np.testing.assert_array_equal(agg.loads, np.bincount(rows.ravel(), minlength=sketch.m))


def test_exact_chunk_bound_holds():
    from ltm.party.aggregate import _value_bound, exact_chunk_clients

    spec, _, _ = _job("sparse")
    c = exact_chunk_clients(spec)
    assert c * _value_bound(spec) <= 2**53
    assert c >= 1


@pytest.mark.parametrize("frac_bits", [16, 31, 32, 60])
def test_gram_block_is_exact_across_chunks_at_the_clip_boundary(monkeypatch, frac_bits):
    """The BLAS Gram block over chunks equals Σ_clients ẑ_aẑ_b·2^(f−2g) computed in Python integers
    (mod 2^64), for clients on the clip sphere (the largest products), with tiny chunks (many chunk
    boundaries) and with the largest exact chunk; and the chunk bound c·⌈R·2^g⌉² ≤ 2^53 holds."""
    import math

    from ltm.lifts import gram_input_bits

    spec, tables, _ = _job("gram", frac_bits=frac_bits)
    party = spec.parties[0]
    table = {k: v.copy() for k, v in tables[party.party_id].items()}
    g = gram_input_bits(spec)
    radius_units = math.ceil((spec.clip_bound + 0.5 * math.sqrt(spec.width) * 2.0**-g) * 2.0**g)
    c = aggregate.gram_chunk_clients(spec)
    assert c * radius_units**2 <= 2**53 and c >= 1
    for name in table:  # blow every row up far beyond the clip: all clipped vectors lie on the sphere
        table[name] = table[name] * 1e3
    vectors = randomizer.clip_rows(randomizer.client_vectors(spec, party, table), party.clip_bound, spec.clip_norm)
    units = [[int(round(math.ldexp(x, g))) for x in row] for row in vectors.tolist()]
    assert np.abs(np.ldexp(np.array(units, dtype=np.float64), -g) - vectors).max() <= 2.0 ** (-g - 1)
    i, j = np.triu_indices(spec.width)
    expected = np.array([sum(u[a] * u[b] for u in units) << (spec.frac_bits - 2 * g) for a, b in zip(i, j)])
    expected = np.array([int(x) % 2**64 for x in expected], dtype=np.uint64)
    for cap in (37, None):
        if cap is not None:
            monkeypatch.setattr(aggregate, "_MAX_CHUNK_CLIENTS", cap)
        got = aggregate_party(spec, party.party_id, table, None)
        np.testing.assert_array_equal(got.values[0], expected)
        assert got.loads.tolist() == [party.size]
    # and per-client mode rounds the same lift to the same integers
    lifted = randomizer.round_to_grid(spec.lift.apply(spec, vectors), spec.frac_bits)
    np.testing.assert_array_equal(lifted.sum(axis=0).view(np.uint64), expected)


def test_server_refuses_a_mode_mismatch():
    spec, tables, randomness = _job("sparse")
    agg_spec = replace(spec, upload_mode="aggregate")
    party = spec.parties[0]
    per_client_batch = next(randomizer.make_batches(spec, party.party_id, tables[party.party_id], randomness))[0]
    aggregate_batch = next(randomizer.make_batches(agg_spec, party.party_id, tables[party.party_id], randomness))[0]
    assert aggregate_batch.aggregate and aggregate_batch.share.shape == (1, spec.sketch.m, spec.width)
    for job, batch in ((spec, aggregate_batch), (agg_spec, per_client_batch)):
        core = ServerCore(job.servers[batch.server].server_id)
        core.create_job(job, caller_role="analyst")
        batch = replace(batch, job_digest=job.digest)
        with pytest.raises(ProtocolError, match="upload_mode") as info:
            core.accept(batch, job.job_id, caller_role="party", caller_id=party.party_id)
        assert info.value.code == "FAILED_PRECONDITION"


def _noise_of(with_noise: np.ndarray, without: np.ndarray) -> np.ndarray:
    """The noise in a ring array: the wrap-around difference, read as signed integers (grid steps)."""
    return (with_noise - without).view(np.int64).astype(np.float64)


@pytest.mark.parametrize("kind", ["sparse", "gram"])
def test_each_entry_has_the_per_client_noise_variance(monkeypatch, kind):
    """χ²: summed over R repetitions and every reached entry, noise²/(load·factor·σ_c²) is χ² with
    R·E degrees of freedom in both modes (the aggregate's one draw per entry, and the per-client
    mode's load draws per entry; gram: factor ½ off the diagonal).  Two-sided, 1e-7 per side: both
    modes of both kinds together flake < 1e-6."""
    from scipy.stats import chi2

    spec, tables, randomness = _job(kind)
    plan = spec.noise_plan()
    party = spec.parties[0]
    table = tables[party.party_id]
    sketch = spec.make_sketch()
    clean = aggregate_party(spec, party.party_id, table, None)
    reached = clean.loads > 0
    factors = np.ones(clean.values.shape[1]) if plan.noise_factors is None else np.asarray(plan.noise_factors)
    assert (kind == "gram") == (plan.noise_factors is not None)
    expected = clean.loads[reached][:, None] * plan.grid_sigma2 * factors[None, :]
    reps = 40

    def per_client_partial(rand):
        (per_server,) = list(randomizer.make_batches(spec, party.party_id, table, rand, batch_clients=party.size))
        values = sum((b.share.values() for b in per_server[1:]), per_server[0].share.values().copy())
        return sketch.apply(party.start, values)

    stats = {"aggregate": 0.0, "per-client": 0.0}
    for r in range(reps):
        rand = Randomness.seeded_insecure(f"chi2-{r}")
        agg = aggregate_party(spec, party.party_id, table, rand.child("noise"))
        stats["aggregate"] += float((_noise_of(agg.values, clean.values)[reached] ** 2 / expected).sum())
        stats["per-client"] += float((_noise_of(per_client_partial(rand), clean.values)[reached] ** 2
                                      / expected).sum())
    dof = reps * clean.values[reached].size
    lo, hi = chi2.ppf(1e-7, dof), chi2.isf(1e-7, dof)
    for mode, stat in stats.items():
        assert lo < stat < hi, f"{mode}: χ² = {stat:.1f} outside [{lo:.1f}, {hi:.1f}] ({dof} dof)"


def _aggregate_servers(spec, tables, randomness):
    """k in-memory server cores holding every party's aggregated upload, closed."""
    cores = [ServerCore(s.server_id) for s in spec.servers]
    for core in cores:
        core.create_job(spec, caller_role="analyst")
    for party in spec.parties:
        for batch in next(randomizer.make_batches(spec, party.party_id, tables[party.party_id], randomness)):
            cores[batch.server].accept(batch, spec.job_id, caller_role="party", caller_id=party.party_id)
    for core in cores:
        core.close(spec.job_id, caller_role="analyst")
    return cores


def test_the_gate_still_refuses_attacks_on_an_aggregate_job():
    from ltm.client_set import ClientSet

    spec, tables, randomness = _job("sparse", mode="aggregate")
    assert spec.aggregated
    cores = _aggregate_servers(spec, tables, randomness)
    core = cores[0]
    first = spec.parties[0]

    def refused(participants, code, match):
        with pytest.raises(ProtocolError, match=match) as info:
            core.release(spec.job_id, participants, caller_role="analyst", job_digest=spec.digest)
        assert info.value.code == code

    # Part of a party: its aggregate cannot be split (nor stand in for the part).
    refused(ClientSet.from_ranges(spec.n, [(0, spec.n - 1)]), "FAILED_PRECONDITION", "all of them or none")
    # Too few parties: the honest load (after the tolerated corrupt parties) falls below L.
    refused(ClientSet.from_ranges(spec.n, [(first.start, first.stop)]), "FAILED_PRECONDITION",
            "participant set|honest load")
    # Not the analyst, and a wrong digest.
    with pytest.raises(ProtocolError, match="only the analyst"):
        core.release(spec.job_id, ClientSet.full(spec.n), caller_role="party", job_digest=spec.digest)
    refused_digest = replace(spec, job_id="other").digest
    with pytest.raises(ProtocolError, match="digest"):
        core.release(spec.job_id, ClientSet.full(spec.n), caller_role="analyst", job_digest=refused_digest)
    # The full set is released once; a different set afterwards is refused (no differencing).
    core.release(spec.job_id, ClientSet.full(spec.n), caller_role="analyst", job_digest=spec.digest)
    second = spec.parties[0].stop
    refused(ClientSet.from_ranges(spec.n, [(second, spec.n)]), "FAILED_PRECONDITION", "already been released")


def test_servers_refuse_malformed_aggregates():
    spec, tables, randomness = _job("sparse", mode="aggregate")
    party, other = spec.parties[0], spec.parties[1]
    core = ServerCore(spec.servers[0].server_id)
    core.create_job(spec, caller_role="analyst")
    batch = next(b for b in next(randomizer.make_batches(spec, party.party_id, tables[party.party_id], randomness))
                 if b.server == 0)

    def refused(bad, code, match, caller=party.party_id):
        with pytest.raises(ProtocolError, match=match) as info:
            core.accept(bad, spec.job_id, caller_role="party", caller_id=caller)
        assert info.value.code == code

    refused(replace(batch, stop=party.stop - 1), "INVALID_ARGUMENT", "whole range")
    refused(replace(batch, batch_index=1), "INVALID_ARGUMENT", "whole range")
    refused(replace(batch, party_id=other.party_id), "PERMISSION_DENIED", "may upload clients", caller=other.party_id)
    from ltm.sharing import Share
    wide = Share(0, (1, spec.sketch.m + 1, spec.width), data=np.zeros((1, spec.sketch.m + 1, spec.width), np.uint64))
    refused(replace(batch, share=wide), "INVALID_ARGUMENT", "shape")
    core.accept(batch, spec.job_id, caller_role="party", caller_id=party.party_id)
    changed = Share(0, batch.share.shape, data=batch.share.values() + np.uint64(1))
    refused(replace(batch, share=changed), "ALREADY_EXISTS", "cannot be replaced")


def test_a_party_refuses_a_mode_mismatch():
    from ltm.party.aggregate import aggregate_batches
    from ltm.party.uploader import PartyPolicy, PolicyViolation

    spec, tables, randomness = _job("sparse")
    party = spec.parties[0]
    with pytest.raises(ValueError, match="may not send it an aggregate"):
        next(aggregate_batches(spec, party.party_id, tables[party.party_id], randomness))
    with pytest.raises(PolicyViolation, match="upload_mode"):
        PartyPolicy(allow_reproduction=True, upload_mode="aggregate").check(spec, seeded=True)
    PartyPolicy(allow_reproduction=True, upload_mode="per-client").check(spec, seeded=True)


def test_default_upload_mode_rule():
    from ltm.jobspec import default_upload_mode

    spec, _, _ = _job("sparse", mode="auto")
    assert spec.upload_mode == "aggregate"  # every party holds many clients, t′ = 0
    assert default_upload_mode(replace(spec, privacy=replace(spec.privacy, t_prime=1))) == "per-client"
    one = replace(spec.parties[0], stop=spec.parties[0].start + 1)
    assert default_upload_mode(replace(spec, parties=(one, *spec.parties[1:]))) == "per-client"
    # In the digest (absent for per-client, so older specs keep theirs).
    assert replace(spec, upload_mode="per-client").digest != spec.digest
    assert "upload_mode" not in replace(spec, upload_mode="per-client").canonical_json().decode()

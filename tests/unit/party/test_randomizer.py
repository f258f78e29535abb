"""``party/randomizer.py``'s tests, written to kill its mutants (scripts/mutation.sh, docs/testing.md)."""
from __future__ import annotations

import numpy as np
import pytest

from ltm.party.randomizer import plan_batches
from tests.helpers.messages import exact


def test_plan_batches_cuts_the_party_range_in_order():
    import dataclasses

    from ltm.jobspec import PartySpec

    fields = {f.name for f in dataclasses.fields(PartySpec)}
    party = PartySpec(**{k: v for k, v in dict(party_id="party-0", start=10, stop=35).items() if k in fields})
    assert plan_batches(party, 10).ranges == ((0, 10, 20), (1, 20, 30), (2, 30, 35))
    assert plan_batches(party, 100).ranges == ((0, 10, 35),)
    with pytest.raises(ValueError, match=exact("batch size must be ≥ 1")):
        plan_batches(party, 0)
    assert np.sum([b - a for _, a, b in plan_batches(party, 7).ranges]) == 25


def _world(**kw):
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.randomness import Randomness
    from ltm.sim.runtime.jobs import build_job, party_tables

    randomness = Randomness.seeded_insecure("randomizer-kills")
    table = synthetic_ridge(300, 3, randomness)
    spec, _ = build_job(table, job_id="rand-kills", randomness=randomness, parties=2, k=3, m=8, s=2, **kw)
    return spec, party_tables(spec, table)


def test_party_data_refusals_name_column_and_problem():
    from ltm.party.randomizer import PartyDataError, client_vectors

    spec, tables = _world()
    party = spec.parties[0]
    good = tables[party.party_id]
    name = next(c.name for c in spec.columns if c.role == "feature")
    rows = party.size
    cases = [
        ({k: v for k, v in good.items() if k != name},
         f"party {party.party_id!r}: column {name!r} required by the job is missing from the data (have: "),
        ({**good, name: good[name] + 1j}, f"column {name!r} holds complex numbers; the job needs real values"),
        ({**good, name: np.array(["x"] * rows)}, f"column {name!r} is not numeric: "),
        ({**good, name: np.zeros((rows, 2))}, f"column {name!r} must be one value per row (a 1-D array), got an "
                                              f"array of shape ({rows}, 2)"),
        ({**good, name: good[name][:-3]}, f"column {name!r} has {rows - 3} values but party {party.party_id!r} "
                                          f"holds {rows} rows"),
    ]
    for table, start in cases:
        with pytest.raises(PartyDataError) as err:
            client_vectors(spec, party, table)
        assert str(err.value).startswith(start), (start, str(err.value))
    bad = good[name].copy()
    bad[[4, 9]] = [np.nan, np.inf]
    with pytest.raises(PartyDataError, match=exact(f"column {name!r} has 2 NaN/infinite values (first at row 4); "
                                                   f"clean or impute them first")):
        client_vectors(spec, party, {**good, name: bad})


def test_client_vectors_apply_the_public_transform_to_the_selected_rows():
    from ltm.party.randomizer import client_vectors

    spec, tables = _world()
    party = spec.parties[1]
    table = tables[party.party_id]
    got = client_vectors(spec, party, table, 5, 17)
    want = np.column_stack([(np.asarray(table[c.name], float)[5:17] - c.center) / c.scale for c in spec.columns])
    assert got.shape == (12, spec.width) and np.allclose(got, want)
    assert np.allclose(client_vectors(spec, party, table), np.column_stack(
        [(np.asarray(table[c.name], float) - c.center) / c.scale for c in spec.columns]))


def test_noisy_copies_add_the_plan_noise_to_each_copy():
    from ltm.dp.noise import sample_noise
    from ltm.party.randomizer import noisy_copies
    from ltm.randomness import Randomness

    spec, _ = _world()
    plan = spec.noise_plan()
    vectors = np.arange(12, dtype=float).reshape(3, 4)
    got = noisy_copies(vectors, 2, plan, Randomness.seeded_insecure("nc"))
    noise = sample_noise(Randomness.seeded_insecure("nc").stream(), plan, (2, 3, 4))
    grid = np.rint(vectors * 2.0**plan.frac_bits).astype(np.int64)  # rounded to the grid, in grid steps
    assert got.shape == (2, 3, 4) and got.dtype == np.uint64
    np.testing.assert_array_equal(got.view(np.int64), noise + grid[None])


def test_batches_rotate_the_primary_share_and_honour_skip_and_timings():
    from ltm.party.randomizer import MAX_BATCH_ELEMENTS, effective_batch_clients, make_batches
    from ltm.randomness import Randomness

    spec, tables = _world()
    assert spec.share_mode == "seed" and spec.k == 3
    party = spec.parties[1]  # ordinal 1
    timings: dict = {}
    out = list(make_batches(spec, party.party_id, tables[party.party_id], Randomness.seeded_insecure("b"),
                            batch_clients=40, skip={1}, timings=timings))
    indices = [per_server[0].batch_index for per_server in out]
    assert indices == [i for i in range(-(-party.size // 40)) if i != 1]
    for per_server in out:
        b = per_server[0].batch_index
        primary = (1 + b) % 3
        assert [bs.share.data is not None for bs in per_server] == [s == primary for s in range(3)]
        assert all(bs.start == party.start + 40 * b and bs.stop == min(party.start + 40 * (b + 1), party.stop)
                   for bs in per_server)
        assert [bs.server for bs in per_server] == [0, 1, 2]
    assert set(timings) == {"read", "noise", "sharing"} and all(v > 0 for v in timings.values())
    per_client = spec.make_sketch().pieces * len(spec.upload_columns(party))
    assert effective_batch_clients(spec, party, 10**9) == MAX_BATCH_ELEMENTS // per_client
    assert effective_batch_clients(spec, party, 7) == 7
    assert effective_batch_clients(spec, party, 0) == 1


def _golden_batches(spec, party_id, table, randomness, batch_clients, batch_randomness=None):
    """The k server batches re-derived independently from the public pieces: client_vectors (the
    party-relative row range), clip_rows, the lift, noisy_copies from child "noise", and
    ltm.sharing.share from child "shares" with the spec's share mode and the rotated primary."""
    from ltm.clipping import clip_rows
    from ltm.party.randomizer import client_vectors, noisy_copies
    from ltm.sharing import share

    party = spec.party(party_id)
    ordinal = [p.party_id for p in spec.parties].index(party_id)
    pieces = spec.make_sketch().pieces
    out = []
    for b, a in enumerate(range(party.start, party.stop, batch_clients)):
        stop = min(a + batch_clients, party.stop)
        rand = batch_randomness(b) if batch_randomness else randomness.child("batch", b)
        z = clip_rows(client_vectors(spec, party, table, a - party.start, stop - party.start),
                      party.clip_bound, spec.clip_norm)
        if spec.lift is not None:
            z = spec.lift.apply(spec, z)
        noisy = noisy_copies(z, pieces, spec.noise_plan(), rand.child("noise"))
        out.append((a, stop, share(noisy, spec.k, rand.child("shares"),
                                   mode=spec.share_mode, primary=(ordinal + b) % spec.k)))
    return out


def _assert_same(got, want):
    assert len(got) == len(want)
    for per_server, (a, b, shares) in zip(got, want):
        assert [(bs.start, bs.stop) for bs in per_server] == [(a, b)] * len(shares)
        for bs, sh in zip(per_server, shares):
            assert (bs.share.seed is None) == (sh.seed is None) and bs.share.seed == sh.seed
            if sh.data is None:
                assert bs.share.data is None
            else:
                assert np.array_equal(bs.share.data, sh.data)


def _table(n=200, d=3):
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.randomness import Randomness

    return synthetic_ridge(n, d, Randomness.seeded_insecure("randomizer-golden"))


def test_full_share_mode_columns_partition_intercept_party_matches_golden():
    """Columns partition with an intercept: one party holds only the intercept (no data column, so
    the row count must come from the batch range); laplace → ℓ1 clipping; full shares: k arrays."""
    from ltm.party.randomizer import client_vectors, make_batches
    from ltm.randomness import Randomness
    from ltm.sim.runtime.jobs import build_job, party_tables

    table = _table()
    r = Randomness.seeded_insecure("golden-full")
    spec, _ = build_job(table, job_id="golden-full", randomness=r, partition="columns", parties=4, k=3, m=8, s=2,
                        intercept=True, share_mode="full", mechanism="laplace", delta=0.0, clip_bound=0.5)
    assert spec.share_mode == "full" and spec.clip_norm == "l1"
    tables = party_tables(spec, table)
    for party in spec.parties:
        t = {k: np.asarray(v, float) * 25.0 for k, v in tables[party.party_id].items()}  # rows exceed C
        got = list(make_batches(spec, party.party_id, t, r, batch_clients=70))
        for per_server in got:
            assert all(bs.share.data is not None and bs.share.seed is None for bs in per_server)
        _assert_same(got, _golden_batches(spec, party.party_id, t, r, 70))
    only_intercept = next(p for p in spec.parties if not party_tables(spec, table)[p.party_id])
    v = client_vectors(spec, only_intercept, {}, 3, 20)
    icol = next(c for c in spec.columns if c.role == "intercept")  # raw value 1, then the public map
    assert v.shape == (17, 1) and np.allclose(v, (1.0 - icol.center) / icol.scale)


def test_seed_mode_rows_intercept_and_journaled_randomness_match_golden():
    from ltm.party.randomizer import make_batches
    from ltm.randomness import Randomness
    from ltm.sim.runtime.jobs import build_job, party_tables

    table = _table()
    r = Randomness.seeded_insecure("golden-seed")
    spec, _ = build_job(table, job_id="golden-seed", randomness=r, parties=2, k=3, m=8, s=2, intercept=True)
    assert spec.share_mode == "seed"
    tables = party_tables(spec, table)  # no "(intercept)" column: the intercept needs no data
    party = spec.parties[1]
    t = tables[party.party_id]
    _assert_same(list(make_batches(spec, party.party_id, t, r, batch_clients=30)),
                 _golden_batches(spec, party.party_id, t, r, 30))
    journal = lambda b: Randomness.seeded_insecure("journal").child("b", b)  # noqa: E731
    _assert_same(list(make_batches(spec, party.party_id, t, r, batch_clients=30, batch_randomness=journal)),
                 _golden_batches(spec, party.party_id, t, r, 30, batch_randomness=journal))


def test_lifted_kind_uploads_the_lift_of_the_clipped_vectors():
    from ltm.party.randomizer import make_batches
    from ltm.randomness import Randomness
    from ltm.sim.runtime.jobs import build_job, party_tables

    table = _table()
    r = Randomness.seeded_insecure("golden-gram")
    spec, _ = build_job(table, job_id="golden-gram", randomness=r, parties=2, k=2, kind="gram")
    assert spec.lift is not None
    party = spec.parties[0]
    t = party_tables(spec, table)[party.party_id]
    got = list(make_batches(spec, party.party_id, t, r, batch_clients=64))
    assert got[0][0].share.shape[-1] == spec.lift.width(spec)
    _assert_same(got, _golden_batches(spec, party.party_id, t, r, 64))


def test_timings_accumulate_under_their_keys_within_the_elapsed_time():
    import time

    from ltm.party.randomizer import make_batches, plan_batches
    from ltm.randomness import Randomness

    spec, tables = _world()
    party = spec.parties[0]
    timings: dict = {}
    t0 = time.perf_counter()
    list(make_batches(spec, party.party_id, tables[party.party_id], Randomness.seeded_insecure("t"),
                      batch_clients=40, timings=timings))
    elapsed = time.perf_counter() - t0
    assert set(timings) == {"read", "noise", "sharing"} and min(timings.values()) > 0
    assert timings["read"] + timings["noise"] + timings["sharing"] <= elapsed  # each is a part of the wall time
    before = {"noise": 5.0, "sharing": 7.0}
    timings = dict(before)
    t0 = time.perf_counter()
    list(make_batches(spec, party.party_id, tables[party.party_id], Randomness.seeded_insecure("t"),
                      batch_clients=40, timings=timings))
    elapsed = time.perf_counter() - t0
    assert set(timings) == {"read", "noise", "sharing"}
    grew = {k: timings[k] - before[k] for k in before}  # accumulated onto the given totals
    assert min(grew.values()) > 0 and sum(grew.values()) <= elapsed
    assert plan_batches(party, 1).ranges[:2] == ((0, party.start, party.start + 1),
                                                  (1, party.start + 1, party.start + 2))


def test_effective_batch_clients_is_an_integer_count():
    from ltm.party.randomizer import MAX_BATCH_ELEMENTS, effective_batch_clients

    spec, _ = _world()
    party = spec.parties[0]
    per_client = spec.make_sketch().pieces * len(spec.upload_columns(party))
    got = effective_batch_clients(spec, party, 10**9)
    assert type(got) is int and got == MAX_BATCH_ELEMENTS // per_client


def test_party_randomness_binds_the_computation_and_the_party():
    """Seeded mode: the documented derivation child("job", computation_digest, "party", id); two
    parties or two computations never share a stream, a renamed job (same computation) does."""
    import dataclasses

    from ltm.party.randomizer import party_randomness
    from ltm.randomness import Randomness

    spec, _ = _world()
    base = Randomness.seeded_insecure("party-randomness")
    draw = lambda r: r.stream().uint64(8).tolist()  # noqa: E731
    a, b = (p.party_id for p in spec.parties[:2])
    got = draw(party_randomness(base, spec, a))
    assert got == draw(base.child("job", spec.computation_digest, "party", a))
    assert got != draw(party_randomness(base, spec, b))
    renamed = dataclasses.replace(spec, job_id="another-name")
    assert renamed.computation_digest == spec.computation_digest and got == draw(party_randomness(base, renamed, a))
    other, _ = _world(epsilon=0.5)
    assert other.computation_digest != spec.computation_digest
    assert got != draw(party_randomness(base, other, a))

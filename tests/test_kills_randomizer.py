"""Mutation-kill tests for ``party/randomizer.py`` (scripts/mutation.sh, docs/testing.md)."""
from __future__ import annotations

import numpy as np
import pytest

from kill_helpers import exact
from party.randomizer import plan_batches


def test_plan_batches_cuts_the_party_range_in_order():
    from ltm.jobspec import PartySpec
    import dataclasses

    fields = {f.name for f in dataclasses.fields(PartySpec)}
    party = PartySpec(**{k: v for k, v in dict(party_id="party-0", start=10, stop=35).items() if k in fields})
    assert plan_batches(party, 10).ranges == ((0, 10, 20), (1, 20, 30), (2, 30, 35))
    assert plan_batches(party, 100).ranges == ((0, 10, 35),)
    with pytest.raises(ValueError, match=exact("batch size must be ≥ 1")):
        plan_batches(party, 0)
    assert np.sum([b - a for _, a, b in plan_batches(party, 7).ranges]) == 25


def _world(**kw):
    from ltm.randomness import Randomness
    from sim.data import synthetic_ridge
    from sim.jobs import build_job, party_tables

    randomness = Randomness.seeded_insecure("randomizer-kills")
    table = synthetic_ridge(300, 3, randomness)
    spec, _ = build_job(table, job_id="rand-kills", randomness=randomness, parties=2, k=3, m=8, s=2, **kw)
    return spec, party_tables(spec, table)


def test_party_data_refusals_name_column_and_problem():
    from party.randomizer import PartyDataError, client_vectors

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
    from party.randomizer import client_vectors

    spec, tables = _world()
    party = spec.parties[1]
    table = tables[party.party_id]
    got = client_vectors(spec, party, table, 5, 17)
    want = np.column_stack([(np.asarray(table[c.name], float)[5:17] - c.center) / c.scale for c in spec.columns])
    assert got.shape == (12, spec.width) and np.allclose(got, want)
    assert np.allclose(client_vectors(spec, party, table), np.column_stack(
        [(np.asarray(table[c.name], float) - c.center) / c.scale for c in spec.columns]))


def test_noisy_copies_add_the_plan_noise_to_each_copy():
    from ltm.noise import sample_noise
    from ltm.randomness import Randomness
    from party.randomizer import noisy_copies

    spec, _ = _world()
    plan = spec.noise_plan()
    vectors = np.arange(12, dtype=float).reshape(3, 4)
    got = noisy_copies(vectors, 2, plan, Randomness.seeded_insecure("nc"))
    noise = sample_noise(Randomness.seeded_insecure("nc").stream(), plan, (2, 3, 4))
    assert got.shape == (2, 3, 4) and np.allclose(got, noise + vectors[None])


def test_batches_rotate_the_primary_share_and_honour_skip_and_timings():
    from ltm.randomness import Randomness
    from party.randomizer import MAX_BATCH_ELEMENTS, effective_batch_clients, make_batches

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
    assert set(timings) == {"noise", "sharing"} and all(v > 0 for v in timings.values())
    per_client = spec.make_sketch().pieces * len(spec.upload_columns(party))
    assert effective_batch_clients(spec, party, 10**9) == MAX_BATCH_ELEMENTS // per_client
    assert effective_batch_clients(spec, party, 7) == 7
    assert effective_batch_clients(spec, party, 0) == 1

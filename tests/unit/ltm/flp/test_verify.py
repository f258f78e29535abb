"""The verification round's pure steps: per-server shares from what each server holds, the analyst's
invalid set, and the participant set without it."""
from __future__ import annotations

import numpy as np
import pytest

from ltm.client_set import ClientSet
from ltm.flp.circuit import BoundedL2
from ltm.flp.field import FIELD64, FieldError
from ltm.flp.proof import prove, query_plan, query_randomness
from ltm.flp.shares import prove_rand, split
from ltm.flp.verify import (
    batch_context,
    drop_invalid,
    invalid_clients,
    server_verifier_share,
)
from ltm.randomness import Randomness

CIRCUIT = BoundedL2(FIELD64, n=3, bits=5, bound=200)


def _batch(x, k, poisoned=(), seed=0, context=b""):
    meas = CIRCUIT.encode(x)
    for i in poisoned:  # a client that skipped clipping: its entry 0 made 10^6 (its bits no longer binary)
        meas[i, 0] = 10**6
    proof = prove(CIRCUIT, meas, prove_rand(CIRCUIT, Randomness.seeded_insecure(seed), len(x)))
    return split(CIRCUIT, meas, proof, k, Randomness.seeded_insecure(seed + 1), context)


@pytest.mark.parametrize("k", [2, 3])
def test_poisoned_clients_are_found_and_dropped(k):
    n = 40
    rng = np.random.default_rng(3)
    plan = query_plan(CIRCUIT, query_randomness(CIRCUIT, b"s" * 16, b"digest"), k)
    invalid = []
    for batch_index, (start, stop, poisoned) in enumerate([(0, 16, (3,)), (16, 40, (0, 23))]):
        ctx = batch_context("digest", "party-0", batch_index, start)
        sh = _batch(rng.integers(-5, 6, (stop - start, 3)), k, poisoned, seed=batch_index, context=ctx)
        shares = [server_verifier_share(plan, 0, stop - start, ctx, leader=(sh.leader_meas, sh.leader_proof))]
        shares += [server_verifier_share(plan, j, stop - start, ctx, seed=s)
                   for j, s in enumerate(sh.helper_seeds, start=1)]
        invalid.append(invalid_clients(plan, n, start, shares))
    assert [np.flatnonzero(s.to_mask()).tolist() for s in invalid] == [[3], [16, 39]]
    participants = ClientSet.from_ranges(n, [(0, 30)])  # clients 30..39 never closed
    kept, dropped = drop_invalid(participants, invalid)
    assert dropped == ClientSet.from_ranges(n, [(3, 4), (16, 17)])
    assert kept == ClientSet.from_ranges(n, [(0, 3), (4, 16), (17, 30)])
    assert drop_invalid(participants, []) == (participants, ClientSet.empty(n))


def test_contexts_differ_per_field_and_do_not_collide():
    seen = {batch_context(d, p, b, s) for d, p, b, s in
            [("a", "b", 0, 0), ("ab", "", 0, 0), ("a", "b", 1, 0), ("a", "b", 0, 1), ("a", "b1", 0, 0)]}
    assert len(seen) == 5


def test_misuse_is_refused():
    plan = query_plan(CIRCUIT, query_randomness(CIRCUIT, b"s" * 16, b"digest"), 2)
    sh = _batch(np.zeros((2, 3), np.int64), 2)
    with pytest.raises(FieldError, match="server 2 is not one of the plan's 2 servers"):
        server_verifier_share(plan, 2, 2, b"", seed=sh.helper_seeds[0])
    with pytest.raises(FieldError, match="leader .* not a seed"):
        server_verifier_share(plan, 0, 2, b"", seed=sh.helper_seeds[0])
    with pytest.raises(FieldError, match="helper 1 verifies"):
        server_verifier_share(plan, 1, 2, b"", leader=(sh.leader_meas, sh.leader_proof))
    with pytest.raises(FieldError, match="leader shares of 2 clients for a batch of 3"):
        server_verifier_share(plan, 0, 3, b"", leader=(sh.leader_meas, sh.leader_proof))
    v = server_verifier_share(plan, 0, 2, b"", leader=(sh.leader_meas, sh.leader_proof))
    with pytest.raises(FieldError, match="1 verifier shares for 2 servers"):
        invalid_clients(plan, 10, 0, [v])
    with pytest.raises(FieldError, match=r"batch \[9, 11\) is outside the job's 10 clients"):
        invalid_clients(plan, 10, 9, [v, v])

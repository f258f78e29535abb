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

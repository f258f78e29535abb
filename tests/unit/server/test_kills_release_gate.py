"""Mutation-kill tests for ``server/release_gate.py`` (scripts/mutation.sh, docs/testing.md).

Each test checks behaviour against a value computed independently (a closed form written out
again, numpy/scipy in the clear, a second route through the code), never a recorded output.
"""
from __future__ import annotations

import math  # noqa: F401
import warnings  # noqa: F401
from dataclasses import replace as _replace  # noqa: F401

import numpy as np
import pytest

from tests.helpers.kill_helpers import exact as _exact, gate_spec as _gate_spec  # noqa: F401
from ltm import sharing  # noqa: F401
from ltm.randomness import Randomness  # noqa: F401

# --- server/release_gate.py -----------------------------------------------------------------------


from ltm.jobspec import honest_row_loads  # noqa: E402
from server.release_gate import GateRefusal, check_release  # noqa: E402




def _refusal(spec, **kw) -> GateRefusal:
    args = dict(caller_role="analyst", job_digest=spec.digest, participants=np.ones(spec.n, bool),
                held=np.ones(spec.n, bool), already_released=False)
    with pytest.raises(GateRefusal) as err:
        check_release(spec, **{**args, **kw})
    return err.value


def test_gate_refusal_messages_are_exact():
    spec = _gate_spec()
    cases = [
        (dict(caller_role="party"), "PERMISSION_DENIED",
         "only the analyst may request a release (caller role 'party')"),
        (dict(job_digest="0" * 64), "FAILED_PRECONDITION", "the job digest in the request does not match this job's spec"),
        (dict(already_released=True), "FAILED_PRECONDITION",
         "job 'gate-kills' has already been released once; a second release would let differencing cancel the noise"),
        (dict(participants=np.ones(spec.n + 1, bool)), "INVALID_ARGUMENT",
         f"participant mask has shape ({spec.n + 1},), expected ({spec.n},)"),
        (dict(participants=np.arange(spec.n) < 10), "FAILED_PRECONDITION",
         f"participant set of 10 clients is below the job's minimum of {spec.privacy.min_participants}"),
    ]
    for kw, code, message in cases:
        refusal = _refusal(spec, **kw)
        assert (refusal.code, refusal.message) == (code, message)


def test_gate_load_refusal_names_the_weakest_row():
    spec = _gate_spec(min_participants=1)
    rng = np.random.default_rng(5)
    for _ in range(20):
        mask = rng.random(spec.n) < 0.3
        loads, deduction = honest_row_loads(spec, mask)
        honest = loads - deduction
        if int(np.argmin(honest)) != 0 and honest.min() < spec.privacy.min_honest_load:
            break
    else:
        pytest.fail("no participant set with its weakest row other than row 0")
    refusal = _refusal(spec, participants=mask)
    assert refusal.message.startswith(f"sketch row {int(np.argmin(honest))} would carry an honest load of "
                                      f"{int(honest.min())} < the promised L={spec.privacy.min_honest_load}")


def test_gate_allows_exactly_the_minimum_and_any_0_1_mask():
    spec = _gate_spec(min_participants=300, min_honest_load=1)
    mask = np.arange(spec.n) < 300
    decision = check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=mask,
                             held=np.ones(spec.n, bool), already_released=False)
    loads, deduction = honest_row_loads(spec, mask)
    assert (decision.participants, decision.min_honest_load, decision.min_row_load) == \
        (300, int((loads - deduction).min()), int(loads.min()))
    as_floats = check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=mask.astype(float),
                              held=np.ones(spec.n, bool), already_released=False)
    assert as_floats == decision


def test_gate_refuses_client_sets_over_another_n_naming_which_set():
    """A ClientSet over a different number of clients is INVALID_ARGUMENT, and the message names
    whether the participant or the held set was wrong (the gate takes ClientSets since #15)."""
    from ltm.client_set import ClientSet
    spec = _gate_spec()
    n = spec.n
    err = _refusal(spec, participants=ClientSet.full(n + 1))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", f"participant set is over n = {n + 1} clients, expected {n}")
    err = _refusal(spec, held=ClientSet.full(n - 1))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", f"held set is over n = {n - 1} clients, expected {n}")
    err = _refusal(spec, held=np.ones(n + 2, bool))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", f"held mask has shape ({n + 2},), expected ({n},)")

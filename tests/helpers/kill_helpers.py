"""Helpers shared by the mutation-kill tests (scripts/mutation.sh), kept with the tests of the modules they
protect."""
from __future__ import annotations

import re
from dataclasses import replace

from ltm.randomness import Randomness


def exact(message: str) -> str:
    """A ``pytest.raises(match=...)`` pattern that matches ``message`` and nothing longer."""
    return "^" + re.escape(message) + "$"


def gate_spec(**privacy):
    """A small rows-partition job (400 clients, 2 parties, 2 servers, m=8, s=2), optionally with
    privacy fields replaced."""
    from ltm_datasets.synthetic import synthetic_ridge
    from sim.runtime.jobs import build_job

    randomness = Randomness.seeded_insecure("gate-kills")
    spec, _ = build_job(synthetic_ridge(400, 3, randomness), job_id="gate-kills", randomness=randomness,
                        parties=2, k=2, m=8, s=2)
    return replace(spec, privacy=replace(spec.privacy, **privacy)) if privacy else spec

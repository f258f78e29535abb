"""A party's policy refusal (party/uploader.py: PartyPolicy.check) names, for every rule the job
breaks, the job's value and the flag that would accept it, so its one error line is actionable."""
from __future__ import annotations

from pathlib import Path

import pytest

from ltm.jobfile import parse_job_file
from ltm.party.uploader import PartyPolicy, PolicyViolation

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "power-ridge.toml"

CASES = [
    # (policy, rule phrase, job's value, flag that would accept it)
    (PartyPolicy(max_epsilon=0.5), "exceeds this party's limit 0.5", "ε = 1", "--max-epsilon 1"),
    (PartyPolicy(max_delta=1e-7), "exceeds this party's limit 1e-07", "δ = 1e-06", "--max-delta 1e-06"),
    (PartyPolicy(min_corrupt_parties=2), "this party requires at least 2", "tolerates 1 corrupt parties",
     "--min-corrupt-parties 1"),
    (PartyPolicy(min_t_prime=3), "this party requires at least 3", "t′ = 0", "--min-t-prime 0"),
    (PartyPolicy(min_participants=10**6), "this party requires at least 1000000", "as few as",
     "--min-participants "),
    (PartyPolicy(upload_mode="per-client"), "was started to upload 'per-client'", "upload_mode 'aggregate'",
     "--upload-mode aggregate"),
    (PartyPolicy(min_colluding_servers=3), "requires tolerance of 3", "at most 2 of 3", "--min-colluding-servers 2"),
]


@pytest.mark.parametrize("policy, rule, value, flag", CASES)
def test_each_refusal_names_the_rule_the_value_and_the_flag(policy, rule, value, flag):
    spec = parse_job_file(EXAMPLE.read_text()).spec
    PartyPolicy().check(spec)  # the example passes the defaults: each case below breaks one rule
    with pytest.raises(PolicyViolation) as err:
        policy.check(spec)
    [reason] = err.value.reasons
    assert rule in reason and value in reason and flag in reason, reason
    assert "\n" not in str(err.value) and str(err.value).startswith("refusing the job 'power-ridge-1': ")

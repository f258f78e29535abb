"""The job spec (ltm.jobspec): canonical JSON and digest, validation messages, the ring headroom
refusal, resolve_defaults, and the corrupt-party deduction of the honest row loads (docs/architecture.md §2–5).

All arithmetic: fixed seeds, deterministic.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest

import ltm.jobspec as jobspec
from ltm.dp.noise import GAUSSIAN_TAIL_SIGMAS
from ltm.jobspec import (
    ColumnSpec,
    JobSpec,
    JobSpecError,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    honest_row_loads,
    resolve_defaults,
    validate_job,
    worst_entry_magnitude,
)
from ltm.ring import HEADROOM_LIMIT

SEED_HEX = hashlib.sha256(b"jobspec-tests").hexdigest()


def make_spec(n: int = 600, m: int = 10, s: int = 2, parties: tuple[tuple[int, int], ...] | None = None,
              frac_bits: int = 24, clip: float = 1.0, **privacy) -> JobSpec:
    """A rows-partition regression job (x0, x1, y) with L set to the largest feasible value unless given."""
    parties = parties or ((0, 200), (200, 450), (450, n))
    spec = JobSpec(
        job_id="job-1", partition="rows", n=n,
        columns=(ColumnSpec("x0", "feature", 0.5, 2.0), ColumnSpec("x1"), ColumnSpec("y", "label", -1.25, 3.0)),
        parties=tuple(PartySpec(f"p{i}", a, b, (), clip) for i, (a, b) in enumerate(parties)),
        clip_bound=clip, frac_bits=frac_bits,
        sketch=SketchSpec("sparse", m, s, SEED_HEX),
        privacy=PrivacySpec(**{"epsilon": 1.0, "delta": 1e-6, **privacy}),
        servers=(ServerSpec("server-0", "a:1"), ServerSpec("server-1", "b:2")),
    )
    if spec.privacy.min_honest_load == 0:
        loads, deduction = honest_row_loads(spec)
        spec = replace(spec, privacy=replace(spec.privacy, min_honest_load=int((loads - deduction).min())))
    return spec


def columns_spec(bounds=(0.6, 0.8), clip: float = 1.0) -> JobSpec:
    n = 500
    return JobSpec(
        job_id="cols", partition="columns", n=n,
        columns=(ColumnSpec("a"), ColumnSpec("b"), ColumnSpec("y", "label")),
        parties=(PartySpec("left", 0, n, ("a",), bounds[0]), PartySpec("right", 0, n, ("b", "y"), bounds[1])),
        clip_bound=clip, frac_bits=24, sketch=SketchSpec("sparse", 8, 2, SEED_HEX),
        privacy=PrivacySpec(epsilon=2.0, delta=1e-5, min_honest_load=50),
        servers=(ServerSpec("server-0"), ServerSpec("server-1"), ServerSpec("server-2")),
    )


def problems_of(spec: JobSpec) -> list[str]:
    with pytest.raises(JobSpecError) as info:
        validate_job(spec)
    assert info.value.problems and all(isinstance(p, str) for p in info.value.problems)
    assert isinstance(info.value, ValueError)
    return info.value.problems


def assert_names(spec: JobSpec, *needles: str) -> str:
    problems = problems_of(spec)
    hits = [p for p in problems if all(n in p for n in needles)]
    assert hits, f"no problem mentions {needles}: {problems}"
    return hits[0]


# ------------------------------------------------------------------------------ canonical JSON
SPECS = {
    "rows": make_spec(),
    "columns": columns_spec(),
    "laplace": replace(make_spec(), clip_norm="l1",
                       privacy=replace(make_spec().privacy, mechanism="laplace", delta=0.0)),
    "interpolate": make_spec(calibration="interpolate", interpolate_p=0.25, t_prime=3, corrupt_parties=1),
    "dense": replace(make_spec(m=6), sketch=SketchSpec("dense", 6, 6, SEED_HEX), share_mode="full"),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_canonical_json_round_trip(name):
    spec = SPECS[name]
    validate_job(spec)  # every fixture is a valid job
    raw = spec.canonical_json()
    assert isinstance(raw, bytes)
    text = raw.decode()
    assert " " not in text.replace("(intercept)", "") and "\n" not in text
    assert json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode() == raw  # sorted, compact
    back = JobSpec.from_json(raw)
    assert back == spec
    assert back.canonical_json() == raw
    assert back.digest == spec.digest == hashlib.sha256(raw).hexdigest()
    assert JobSpec.from_json(text) == spec  # str input too
    # key order in the input does not matter: the digest is over the canonical form
    shuffled = json.dumps(dict(reversed(list(json.loads(raw).items()))), indent=2)
    assert JobSpec.from_json(shuffled).digest == spec.digest


def test_digest_is_stable_across_constructions():
    assert make_spec().digest == make_spec().digest
    assert re.fullmatch(r"[0-9a-f]{64}", make_spec().digest)


def _leaf_paths(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaf_paths(v, path + (k,))
    elif isinstance(obj, (list, tuple)):
        if not obj:
            yield path
        for i, v in enumerate(obj):
            yield from _leaf_paths(v, path + (i,))
    else:
        yield path


def _perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 0.25
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return 0.5
    if isinstance(value, (list, tuple)):
        return [*value, "extra"]
    raise AssertionError(f"unexpected leaf {value!r}")


@pytest.mark.parametrize("name", ["rows", "columns", "interpolate"])
def test_digest_changes_when_any_field_changes(name):
    """Every leaf of the spec (found generically, so new fields are covered automatically)."""
    spec = SPECS[name]
    base = json.loads(spec.canonical_json())
    paths = list(_leaf_paths(base))
    assert len(paths) > 30
    seen = {spec.digest}
    for path in paths:
        d = copy.deepcopy(base)
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = _perturb(target[path[-1]])
        changed = JobSpec.from_dict(d)
        assert changed != spec, path
        assert changed.digest not in seen, f"changing {path} did not change the digest"
        seen.add(changed.digest)


def test_from_json_rejects_malformed_input():
    for bad in ("{", "[]", "null", json.dumps({"job_id": "x"})):
        with pytest.raises(JobSpecError):
            JobSpec.from_json(bad)
    d = make_spec().to_dict()
    d["privacy"]["surprise"] = 1
    with pytest.raises(JobSpecError, match="malformed"):
        JobSpec.from_dict(d)


# ------------------------------------------------------------------------------ validation messages
def test_regression_needs_m_at_least_D():
    msg = assert_names(make_spec(m=2, s=1, min_honest_load=1), "m=2", "D=3")
    assert "raise m" in msg
    # an unlabelled (low-rank) job may have m < D
    lowrank = replace(make_spec(m=2, s=1), columns=(ColumnSpec("a"), ColumnSpec("b"), ColumnSpec("c")))
    validate_job(lowrank)


@pytest.mark.parametrize("s", [5, 11])
def test_sparsity_above_m(s):
    assert_names(replace(make_spec(m=4, s=4), sketch=SketchSpec("sparse", 4, s, SEED_HEX)), f"s={s}", "m=4")


@pytest.mark.parametrize("eps", [0.0, -1.0, float("inf"), float("nan")])
def test_epsilon_must_be_positive(eps):
    assert_names(make_spec(min_honest_load=1, epsilon=eps), "epsilon")


@pytest.mark.parametrize("delta", [0.0, 1.0, 1.5, -1e-9])
def test_gaussian_delta_in_open_unit_interval(delta):
    assert_names(make_spec(min_honest_load=1, delta=delta), "delta", str(delta))


def test_t_prime_below_n():
    for t in (600, 601, 10**6, -1):
        assert_names(make_spec(min_honest_load=1, t_prime=t), "t_prime", "n=600")


def test_infeasible_L_names_the_feasible_load():
    spec = make_spec()
    sketch = spec.make_sketch()
    feasible = int(sketch.row_loads().min())  # independent: no corruption, everyone participates
    assert spec.privacy.min_honest_load == feasible
    validate_job(spec)  # L = feasible is fine
    for L in (feasible + 1, 10 * feasible, 0, -3):
        bad = replace(spec, privacy=replace(spec.privacy, min_honest_load=L))
        msg = assert_names(bad, "min_honest_load", f"L={L}")
        assert f"L ≤ {feasible}" in msg
    # t′ is deducted from the feasible load
    t_spec = replace(spec, privacy=replace(spec.privacy, t_prime=5))
    msg = assert_names(t_spec, "min_honest_load")
    assert f"L ≤ {feasible - 5}" in msg


@pytest.mark.parametrize("parties", [
    ((0, 200), (250, 600)),          # gap
    ((0, 300), (200, 600)),          # overlap
    ((0, 200), (200, 500)),          # does not reach n
    ((100, 200), (200, 600)),        # does not start at 0
    ((0, 300), (300, 300), (300, 600)),  # empty range
    ((300, 600), (0, 300)),          # out of order
])
def test_party_ranges_must_tile(parties):
    problems = problems_of(make_spec(parties=parties, min_honest_load=1))
    assert any("party" in p and ("tile" in p or "cover" in p) for p in problems), problems


def test_columns_partition_clip_bounds():
    validate_job(columns_spec((0.6, 0.8)))  # 0.36 + 0.64 = 1 = C²
    msg = assert_names(columns_spec((0.6, 0.81)), "Σ C_j² ≤ C²")
    assert "clip bound" in msg
    # every column exactly once
    spec = columns_spec()
    dup = replace(spec, parties=(spec.parties[0], replace(spec.parties[1], columns=("a", "y"))))
    assert_names(dup, "exactly once")


def test_laplace_needs_delta_zero():
    lap = SPECS["laplace"]
    validate_job(lap)
    for delta in (1e-6, 0.5):
        assert_names(replace(lap, privacy=replace(lap.privacy, delta=delta)), "laplace", "delta")
    # and an ℓ1 clip
    assert_names(replace(lap, clip_norm="l2"), "laplace", "clip_norm")


def test_unknown_kinds():
    spec = make_spec()
    assert_names(replace(spec, sketch=replace(spec.sketch, kind="cauchy")), "sketch kind", "cauchy")
    assert_names(replace(spec, privacy=replace(spec.privacy, mechanism="exponential")), "mechanism")
    assert_names(replace(spec, privacy=replace(spec.privacy, calibration="loose")), "calibration")
    assert_names(replace(spec, partition="diagonal"), "partition")
    assert_names(replace(spec, share_mode="shamir"), "share_mode")


def test_every_problem_is_listed():
    spec = make_spec(min_honest_load=1, epsilon=-1.0, delta=2.0, t_prime=10**6)
    problems = problems_of(replace(spec, sketch=replace(spec.sketch, kind="cauchy")))
    for needle in ("epsilon", "delta", "t_prime", "sketch kind"):
        assert any(needle in p for p in problems), (needle, problems)


def test_other_structural_problems():
    spec = make_spec()
    assert_names(replace(spec, servers=spec.servers[:1]), "2 servers")
    assert_names(replace(spec, servers=(spec.servers[0], spec.servers[0])), "server ids")
    assert_names(replace(spec, sketch=replace(spec.sketch, seed="ab")), "seed", "64 hex")
    assert_names(replace(spec, sketch=replace(spec.sketch, m=700)), "m=700", "n=600")
    assert_names(replace(spec, frac_bits=61), "frac_bits")
    assert_names(replace(spec, frac_bits=7), "frac_bits")
    assert_names(replace(spec, clip_bound=0.0), "clip_bound")
    assert_names(replace(spec, version="ltm.job.v0"), "version")


# ------------------------------------------------------------------------------ ring headroom
def _worst(spec: JobSpec) -> float:
    """max_row_load · (C + 20σ_c) · 2^f, computed independently of validate_job."""
    max_load = int(spec.make_sketch().row_loads().max())
    return max_load * (spec.clip_bound + 2.0**-(spec.frac_bits + 1)
                       + GAUSSIAN_TAIL_SIGMAS * spec.noise_plan().sigma_client) * 2.0**spec.frac_bits


def test_headroom_refusal_names_the_largest_workable_frac_bits():
    spec = make_spec(frac_bits=60)
    assert _worst(spec) >= 2.0**62
    with pytest.raises(JobSpecError) as info:
        validate_job(spec)
    msg = str(info.value)
    assert "ring headroom" in msg
    suggested = int(re.search(r"frac_bits ≤ (\d+)", msg).group(1))
    assert jobspec.MIN_FRAC_BITS <= suggested < 60
    ok = replace(spec, frac_bits=suggested)
    analysis = validate_job(ok)
    assert _worst(ok) < 2.0**62 and analysis.headroom_bits > 0
    assert analysis.headroom_bits == pytest.approx(math.log2(2.0**62 / _worst(ok)))
    # it is the LARGEST workable value: one more fraction bit is refused
    with pytest.raises(JobSpecError, match="ring headroom"):
        validate_job(replace(spec, frac_bits=suggested + 1))


@pytest.mark.parametrize("clip", [1.0, 2.0**20, 2.0**35])
def test_validate_refuses_exactly_when_the_headroom_bound_is_reached(clip):
    base = make_spec(clip=clip)
    for f in range(jobspec.MIN_FRAC_BITS, 61):
        spec = replace(base, frac_bits=f)
        refused = _worst(spec) >= 2.0**62
        if refused:
            with pytest.raises(JobSpecError, match="ring headroom"):
                validate_job(spec)
        else:
            validate_job(spec)


@pytest.mark.parametrize("clip", [1.0, 2.0**20, 2.0**35])
def test_resolve_defaults_picks_a_frac_bits_that_passes(clip):
    spec = make_spec(clip=clip, frac_bits=0, min_honest_load=0)
    spec = replace(spec, privacy=replace(spec.privacy, min_honest_load=0))
    resolved = resolve_defaults(spec)
    f = resolved.frac_bits
    assert jobspec.MIN_FRAC_BITS <= f <= jobspec.MAX_FRAC_BITS
    validate_job(resolved)
    assert _worst(resolved) < HEADROOM_LIMIT
    if f < jobspec.MAX_FRAC_BITS:  # capped by the headroom, so it is the largest that passes
        with pytest.raises(JobSpecError, match="ring headroom"):
            validate_job(replace(resolved, frac_bits=f + 1))
    if clip == 2.0**35:
        assert f < jobspec.MAX_FRAC_BITS  # the case really exercises the headroom path
    # L and min_participants defaults: the parties hold many clients each, so one corrupt party is
    # tolerated by default and L is a fraction of the load left once the largest party's is removed
    sketch = resolved.make_sketch()
    loads = sketch.row_loads()
    rows = sketch.slots() >> 1
    per_party = np.array([np.bincount(rows[:, p.start:p.stop].ravel(), minlength=sketch.m) for p in resolved.parties])
    assert resolved.privacy.corrupt_parties == 1
    honest = loads - per_party.max(axis=0)
    assert resolved.privacy.min_honest_load == math.floor(jobspec.DEFAULT_LOAD_FRACTION * honest.min())
    assert resolved.privacy.min_participants == math.ceil(resolved.n / 2)


def test_resolve_defaults_refuses_when_no_frac_bits_fits():
    spec = make_spec(clip=2.0**50, frac_bits=0)
    with pytest.raises(JobSpecError, match="ring headroom"):
        resolve_defaults(spec)


def test_worst_entry_magnitude_formula():
    plan = make_spec().noise_plan()
    half_step = 0.5 * 2.0**-plan.frac_bits  # deterministic rounding moves an entry by ≤ half a grid step
    assert worst_entry_magnitude(100.0, 2.0, plan) == 100.0 * (2.0 + half_step + GAUSSIAN_TAIL_SIGMAS * plan.sigma_client)


# ------------------------------------------------------------------------------ corrupt parties
def brute_force_deduction(spec: JobSpec, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = spec.sketch.m
    rows, _ = spec.make_sketch().placement(0, spec.n)
    loads = np.zeros(m, dtype=np.int64)
    party_loads = np.zeros((len(spec.parties), m), dtype=np.int64)
    for p_i, p in enumerate(spec.parties):
        for j in range(p.start, p.stop):
            if not mask[j]:
                continue
            for l in range(rows.shape[0]):
                loads[rows[l, j]] += 1
                party_loads[p_i, rows[l, j]] += 1
    c = spec.privacy.corrupt_parties
    deduction = np.full(m, spec.privacy.t_prime, dtype=np.int64)
    for r in range(m):
        deduction[r] += sum(sorted(party_loads[:, r], reverse=True)[:c])
    return loads, deduction


PARTIES = ((0, 5), (5, 60), (60, 61), (61, 150), (150, 152), (152, 230), (230, 300))


@pytest.mark.parametrize("c", [1, 2, 3, 6])
@pytest.mark.parametrize("t_prime", [0, 4])
@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_corrupt_party_deduction_matches_brute_force(c, t_prime, kind):
    spec = make_spec(n=300, m=7, s=3, parties=PARTIES, min_honest_load=1, corrupt_parties=c, t_prime=t_prime)
    if kind == "dense":
        spec = replace(spec, sketch=SketchSpec("dense", 7, 7, SEED_HEX))
    rng = np.random.default_rng(c * 10 + t_prime)  # the participant set is test input, not protocol randomness
    for mask in (np.ones(300, dtype=bool), rng.random(300) < 0.6, rng.random(300) < 0.1):
        loads, deduction = honest_row_loads(spec, mask)
        ref_loads, ref_deduction = brute_force_deduction(spec, mask)
        np.testing.assert_array_equal(loads, ref_loads)
        np.testing.assert_array_equal(deduction, ref_deduction)
        # the same through the precomputed slots and through an index array
        sk = spec.make_sketch()
        l2, d2 = honest_row_loads(spec, np.flatnonzero(mask), sk, sk.slots())
        np.testing.assert_array_equal(l2, ref_loads)
        np.testing.assert_array_equal(d2, ref_deduction)


def test_corrupt_parties_must_be_fewer_than_parties():
    assert_names(make_spec(min_honest_load=1, corrupt_parties=3), "corrupt_parties")
    assert_names(make_spec(min_honest_load=1, corrupt_parties=-1), "corrupt_parties")


def test_columns_partition_has_no_deduction():
    spec = columns_spec()
    spec = replace(spec, privacy=replace(spec.privacy, corrupt_parties=1))
    loads, deduction = honest_row_loads(spec)
    np.testing.assert_array_equal(deduction, np.zeros(spec.sketch.m))
    np.testing.assert_array_equal(loads, spec.make_sketch().row_loads())
    assert_names(replace(spec, privacy=replace(spec.privacy, t_prime=1)), "t_prime", "columns")


# ------------------------------------------------------------------------------ regressions (bugs found and fixed)
@pytest.mark.parametrize("path,value", [(("privacy", "epsilon"), "1.0"), (("n",), "abc"), (("sketch", "m"), "10"),
                                        (("privacy", "delta"), None)])
def test_type_confused_json_is_a_job_spec_error(path, value):
    d = json.loads(make_spec().canonical_json())
    target = d
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(JobSpecError):
        validate_job(JobSpec.from_json(json.dumps(d)))


def test_equal_specs_have_equal_digests():
    a = make_spec()
    b = replace(a, privacy=replace(a.privacy, epsilon=1), clip_bound=1)
    assert a == b
    assert a.digest == b.digest

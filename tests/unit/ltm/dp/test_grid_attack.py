"""The test that would have caught issue #20: lattice-aligned data under noise finer than the grid.

Before the fix a party added float noise and rounded each client's value to the grid 2^-f, so a job
whose per-client σ_c was below the grid step released the exact noiseless sum.  The attack jobs:
one-hot client vectors times C with C a power of two (C = 2^-16 at the default frac_bits; C = 1/16
with frac_bits = 8), so every value, and every lifted gram value C², lies on the grid.

(a) The party (``PartyPolicy.check``) and ``validate_job`` refuse such a job, saying why.
(b) With that check switched off inside the test, releases through the production path (the real
    party core and server cores, ``ltm.sim.tools.audit.release_once``) still carry noise of sd ≥ the claimed
    σ in every entry: the mean of the squared noise over all entries of a few releases is compared
    with the claimed per-entry variance at a one-sided 1e-7 chi-square quantile (flake < 1e-6).
(c) ``ltm audit`` on lattice-aligned data finds no ε above the claim.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import ltm.dp.grid
import ltm.party.randomizer
from ltm.client_set import ClientSet  # noqa: F401  (the audit's release path uses it)
from ltm.jobspec import (
    ColumnSpec,
    JobSpec,
    JobSpecError,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    resolve_defaults,
    validate_job,
)
from ltm.party.uploader import PartyPolicy, PolicyViolation
from ltm.randomness import Randomness
from ltm.sim.tools.audit import AuditConfig, AuditJob, release_once, run_audit

D = 4  # client vector width: one-hot rows


def attack_job(kind: str, mechanism: str, clip: float, frac_bits: int, n: int, m: int = 1,
               partition: str = "rows") -> JobSpec:
    laplace = mechanism == "laplace"
    if partition == "rows":
        parties = (PartySpec("party-0", 0, n, (), clip),)
    else:  # two parties, two columns each, Σ C_j² = C²
        half = clip / math.sqrt(2.0) * (1 - 1e-12) if not laplace else clip / 2.0
        parties = (PartySpec("party-0", 0, n, ("x0", "x1"), half), PartySpec("party-1", 0, n, ("x2", "x3"), half))
    draft = JobSpec(
        job_id=f"attack-{kind}-{mechanism}", partition=partition, n=n,
        columns=tuple(ColumnSpec(f"x{j}") for j in range(D)), parties=parties, clip_bound=clip,
        frac_bits=frac_bits, sketch=SketchSpec(kind, m, 1, "b1" * 32),
        privacy=PrivacySpec(epsilon=1.0, delta=0.0 if laplace else 1e-6, mechanism=mechanism, min_participants=n),
        servers=(ServerSpec("server-0"), ServerSpec("server-1")), clip_norm="l1" if laplace else "l2")
    return resolve_defaults(draft)


def one_hot_tables(spec: JobSpec) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray]:
    """Every client's vector is C·e_j (j = client mod D), within each party's own clip bound."""
    X = np.zeros((spec.n, D))
    X[np.arange(spec.n), np.arange(spec.n) % D] = spec.parties[0].clip_bound if spec.partition == "columns" \
        else spec.clip_bound
    if spec.partition == "columns":  # a power of two within each party's bound C/√2 (resp. C/2)
        X[X > 0] = 2.0 ** math.floor(math.log2(spec.parties[0].clip_bound))
    tables = {p.party_id: {f"x{j}": X[p.start:p.stop, j].copy() for j in range(D)
                           if spec.partition == "rows" or f"x{j}" in p.columns} for p in spec.parties}
    return tables, X


def exact_release(spec: JobSpec, X: np.ndarray) -> np.ndarray:
    """The noiseless unscaled release of X (the data are on the grid, so this is exact)."""
    if spec.lift is not None:
        return spec.lift.apply(spec, X).sum(axis=0)[None, :]
    sketch = spec.make_sketch()
    rows, negative = sketch.placement(0, spec.n)
    out = np.zeros((sketch.m, D))
    for piece in range(rows.shape[0]):
        np.add.at(out, rows[piece], np.where(negative[piece], -1.0, 1.0)[:, None] * X)
    return out


# kind, mechanism, clip, frac_bits (0: the default), n, m, partition
GAUSSIAN_ATTACKS = [
    ("gram", "gaussian", 2.0**-16, 0, 4000, 1, "rows"),
    ("gram", "gaussian", 1 / 16, 8, 4000, 1, "rows"),
    ("sparse", "gaussian", 1 / 16, 8, 16000, 16, "rows"),
    ("sparse", "gaussian", 1 / 16, 8, 16000, 16, "columns"),
]
LAPLACE_ATTACKS = [
    ("gram", "laplace", 2.0**-16, 0, 4000, 1, "rows"),
    ("sparse", "laplace", 1 / 16, 8, 16000, 16, "rows"),
]


@pytest.mark.parametrize("kind, mechanism, clip, frac_bits, n, m, partition", GAUSSIAN_ATTACKS)
def test_the_party_and_validate_job_refuse_noise_below_the_grid(kind, mechanism, clip, frac_bits, n, m, partition):
    spec = attack_job(kind, mechanism, clip, frac_bits, n, m, partition)
    plan = spec.noise_plan()
    assert plan.grid_noise_sd_min < ltm.dp.grid.MIN_NOISE_GRID_STEPS  # sub-grid (the smallest per-entry scale: the gram off-diagonals)
    reason = (f"per-client noise sd is {plan.grid_noise_sd_min:.3g} grid steps of 2^-{spec.frac_bits}, below the "
              f"minimum 8")
    with pytest.raises(PolicyViolation, match=reason.replace(".", r"\.").replace("^", r"\^")):
        PartyPolicy(max_epsilon=1.0, max_delta=1e-5).check(spec)
    with pytest.raises(JobSpecError) as err:
        validate_job(spec)
    assert err.value.problems[0].startswith(reason)


def _lower_band(count: int, kurtosis: float) -> float:
    """1 − a with P(mean of ``count`` squares ≤ (1 − a)·σ²) ≤ 1e-7 for i.i.d. zero-mean noise of
    variance σ² and kurtosis ≤ ``kurtosis``: the lower tail of a sum of nonnegative terms,
    P(S ≤ E S − t) ≤ exp(−t²/(2 Σ E[Y²])) (Y = X², E[Y²] = κσ⁴), solved for t = a·count·σ²."""
    return 1.0 - math.sqrt(2.0 * kurtosis * math.log(1e7) / count)


def _release_noise_check(kind, mechanism, clip, frac_bits, n, m, partition) -> tuple[float, float]:
    """(mean squared release noise, the least value 'sd ≥ claimed σ' allows) over several releases
    through the production path; asserts the noise is integer in grid steps."""
    spec = attack_job(kind, mechanism, clip, frac_bits, n, m, partition)
    validate_job(spec)
    plan = spec.noise_plan()
    tables, X = one_hot_tables(spec)
    job = AuditJob(spec, plan, plan, 0, (0,), (1,), (spec.privacy.min_honest_load,))
    exact = exact_release(spec, X)
    runs = 40 if kind == "gram" else 12  # ≥ 400 noisy entries in all
    noise = np.concatenate([(release_once(job, tables, Randomness.system()) - exact).ravel()  # production randomness
                            for _ in range(runs)])
    step = 2.0**-spec.frac_bits
    assert np.all(np.abs(noise / step - np.rint(noise / step)) < 1e-6)  # integer noise in grid steps
    claimed = plan.sigma_release  # per entry, at the gate's promised honest load
    # kurtosis: ≤ 3 + 1e-6 for sums of discrete Gaussians of ≥ 1.5 steps, ≤ 6 for DLap(t) (and its sums)
    band = _lower_band(noise.size, 3.01 if mechanism == "gaussian" else 6.0)
    assert band > 0.2  # the test has power: a noise far below the claim fails it
    return float(np.mean(noise**2)), claimed**2 * band


@pytest.mark.parametrize("kind, mechanism, clip, frac_bits, n, m, partition", GAUSSIAN_ATTACKS + LAPLACE_ATTACKS)
def test_with_the_check_off_the_release_still_carries_the_claimed_noise(monkeypatch, kind, mechanism, clip,
                                                                        frac_bits, n, m, partition):
    monkeypatch.setattr(ltm.dp.grid, "MIN_NOISE_GRID_STEPS", 0.0)
    got, least = _release_noise_check(kind, mechanism, clip, frac_bits, n, m, partition)
    assert got >= least


def test_negative_control_the_old_float_noise_rounded_per_client_fails_the_check(monkeypatch):
    """The pre-#20 party: float noise N(0, σ_c²) rounded to the grid per client.  With σ_c below
    half a step (a calibration that ignores the grid) the release carries no noise: caught."""
    monkeypatch.setattr(ltm.dp.grid, "MIN_NOISE_GRID_STEPS", 0.0)

    def float_then_round(stream, plan, shape, **kw):
        return np.rint(stream.normal(shape, scale=0.3)).astype(np.int64)  # σ_c = 0.3 grid steps

    monkeypatch.setattr(ltm.party.randomizer, "sample_noise", float_then_round)
    got, least = _release_noise_check(*GAUSSIAN_ATTACKS[0])
    assert got < least


def test_ltm_audit_on_lattice_aligned_data_finds_no_epsilon_above_the_claim():
    """The audit's target row is ±C·e1 with C = 1/16 on the grid 2^-8 (every value lattice-aligned)."""
    r = run_audit(AuditConfig(runs=300, clip=1 / 16, frac_bits=8, seed="ci-lattice"))
    assert r["job"]["frac_bits"] == 8 and r["job"]["clip"] == 1 / 16
    assert r["violation"] is False and r["epsilon_lb"] <= r["claimed"]["epsilon"]


def test_a_job_whose_noise_draw_exceeds_the_exact_sampler_is_refused_before_any_ledger_is_charged():
    # σ_c beyond 2^44 grid steps (ε = 0.001 at frac_bits = 60) passed the party's policy and made its
    # sampler raise after the ledger was charged: nothing released, budget spent.
    from dataclasses import replace as _replace

    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.dp.noise import MAX_GRID_SCALE, widest_noise_draw
    from ltm.party.uploader import PartyPolicy, PolicyViolation
    from ltm.randomness import Randomness
    from ltm.sim.runtime.jobs import build_job

    r = Randomness.seeded_insecure("sampler-range")
    spec, _ = build_job(synthetic_ridge(2000, 3, r), job_id="wide", randomness=r, parties=2, k=2, m=16)
    policy = PartyPolicy(max_epsilon=1.0, allow_reproduction=True)
    policy.check(spec, seeded=True)
    wide = _replace(spec, privacy=_replace(spec.privacy, epsilon=0.001), frac_bits=60)
    assert widest_noise_draw(wide.noise_plan()) > MAX_GRID_SCALE
    with pytest.raises(PolicyViolation, match=r"beyond the exact sampler's range 2\^44"):
        policy.check(wide, seeded=True)

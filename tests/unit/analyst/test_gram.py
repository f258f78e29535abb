"""The ``gram`` release kind (issue #11): the sum-over-clients map with the gram lift.

* the lift: isometry, the replace-one sensitivity √2·C² (and that it is attained), the analyst's
  inverse;
* bit-exactness: the reconstructed release equals Σ_clients enc(lift(clip(z)) + noise) computed
  in the clear (in-process here; the gRPC transport is compared in tests/integration/test_networked.py);
* the released noise variance matches the calibration (exact χ² interval, flake ≤ 1e-6);
* σ against dp_accounting (an independent implementation) for Δ₂ = √2·C²;
* the spec's refusals, the release gate and the corrupt-party deduction on a gram job;
* the estimators on a gram release.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import scipy.stats

from ltm.analyst.estimators import OLS, LowRank, Ridge
from ltm.analyst.gram import adassp_lambda, gram_blocks, solve_gram
from ltm.datasets.synthetic import synthetic_ridge
from ltm.datasets.tables import Table
from ltm.errors import ProtocolError
from ltm.jobspec import JobSpecError, honest_row_loads, validate_job
from ltm.lifts import LIFTS, gram_from_vector, gram_noise_factors, gram_width
from ltm.party.randomizer import client_vectors, clip_rows, noisy_copies, party_randomness, plan_batches
from ltm.randomness import Randomness
from ltm.ring import decode
from ltm.server.core import ServerCore
from ltm.server.release_gate import ANALYST_ROLE
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.clear_releases import assert_release_over_everyone_is, clear_gram_release, shares_sum

GRAM = LIFTS["gram"]
BATCH = 64


def gram_job(n=300, d=4, seed="gram", **kw):
    randomness = Randomness.seeded_insecure(seed)
    table = synthetic_ridge(n, d, randomness, label_noise=0.3)
    kw.setdefault("parties", 3)
    spec, _ = build_job(table, job_id="gram-job", randomness=randomness, kind="gram", **kw)
    return spec, table, randomness


# ------------------------------------------------------------------------------ the lift
def test_gram_lift_rounds_then_lifts_exactly_and_unlifts_to_the_gram_matrix():
    """Round z to 2^-g, then the unweighted triangle of ẑẑᵀ: every entry an exact product on the
    job's grid (rounding it to 2^-f moves nothing), the sum unlifts to ẐᵀẐ, bounded by R²."""
    from ltm.dp.grid import round_to_grid
    from ltm.lifts import gram_input_bits

    rng = np.random.default_rng(0)
    spec, _, _ = gram_job(d=5)
    g = gram_input_bits(spec)
    assert 2 <= g <= spec.frac_bits // 2
    Z = clip_rows(rng.normal(size=(200, spec.width)), spec.clip_bound)
    U = GRAM.apply(spec, Z)
    assert U.shape == (200, gram_width(spec.width)) == (200, spec.upload_width)
    Zh = np.ldexp(np.rint(np.ldexp(Z, g)), -g)  # rounded independently of the lift's helpers
    assert np.abs(Zh - Z).max() <= 2.0 ** (-g - 1)
    i, j = np.triu_indices(spec.width)
    np.testing.assert_array_equal(U, Zh[:, i] * Zh[:, j])
    grid = round_to_grid(U, spec.frac_bits)
    np.testing.assert_array_equal(np.ldexp(grid.astype(np.float64), -spec.frac_bits), U)  # already on 2^-f
    np.testing.assert_allclose(gram_from_vector(U.sum(axis=0), spec.width), Zh.T @ Zh, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gram_from_vector(U.sum(axis=0), spec.width), Z.T @ Z, atol=200 * 2.0 ** -g)
    assert np.abs(U).max() <= spec.entry_bound
    radius = spec.clip_bound + 0.5 * math.sqrt(spec.width) * 2.0**-g
    assert spec.entry_bound == pytest.approx(radius**2, rel=1e-15)


def test_gram_sensitivity_bound_holds_and_is_attained():
    """‖ẑẑᵀ − ẑ'ẑ'ᵀ‖_F (the noise's weighted norm: off-diagonal entries count twice, their noise
    variance is half) ≤ √2·(C + √D·2^-g/2)² for clipped and rounded z, z'; orthogonal z ⊥ z' of
    norm C on the grid attain √2·C²."""
    from ltm.lifts import gram_input_bits, gram_noise_factors

    spec, _, _ = gram_job(d=3)
    C, g = spec.clip_bound, gram_input_bits(spec)
    sens = GRAM.sensitivity(spec)
    radius = C + 0.5 * math.sqrt(spec.width) * 2.0**-g
    assert sens == pytest.approx(math.sqrt(2.0) * radius**2, rel=1e-15)
    weight = 1.0 / np.sqrt(gram_noise_factors(spec.width))  # 1 on the diagonal, √2 off it
    d = spec.width
    np.testing.assert_array_equal(gram_noise_factors(d), np.where(np.eye(d)[np.triu_indices(d)] == 1, 1.0, 0.5))
    rng = np.random.default_rng(1)
    Z = clip_rows(rng.normal(size=(20000, spec.width)) * rng.uniform(0.1, 3, size=(20000, 1)), C)
    Zp = clip_rows(rng.normal(size=(20000, spec.width)) * rng.uniform(0.1, 3, size=(20000, 1)), C)
    diff = np.linalg.norm((GRAM.apply(spec, Z) - GRAM.apply(spec, Zp)) * weight, axis=1)
    assert diff.max() <= sens
    # the weighted norm is the Frobenius norm of the change: ‖ẑ‖⁴ + ‖ẑ'‖⁴ − 2(ẑᵀẑ')²
    Zh, Zph = (np.ldexp(np.rint(np.ldexp(A, g)), -g) for A in (Z, Zp))
    closed = np.sqrt(np.sum(Zh * Zh, 1) ** 2 + np.sum(Zph * Zph, 1) ** 2 - 2 * np.sum(Zh * Zph, 1) ** 2)
    np.testing.assert_allclose(diff, closed, rtol=1e-9, atol=1e-12)
    e = np.eye(spec.width) * C
    attained = np.linalg.norm((GRAM.apply(spec, e[:1]) - GRAM.apply(spec, e[1:2])) * weight)
    assert attained == pytest.approx(math.sqrt(2.0) * C * C, rel=1e-12) and attained <= sens
    assert sens < 2 * C * C


# ------------------------------------------------------------------------------ bit-exactness
@pytest.mark.parametrize("share_mode", ["seed", "full"])
@pytest.mark.parametrize("k", [2, 3])
def test_gram_reconstruction_is_the_sum_of_noisy_lifted_vectors_bit_for_bit(share_mode, k):
    spec, table, randomness = gram_job(k=k, share_mode=share_mode, seed=f"exact-{share_mode}-{k}")
    tables = party_tables(spec, table)
    run = run_inprocess(spec, tables, randomness, batch_clients=BATCH)
    expected = clear_gram_release(spec, tables, randomness)
    assert_release_over_everyone_is(run, spec, expected)
    np.testing.assert_array_equal(run.release.matrix, decode(expected, spec.frac_bits))
    assert run.release.kind == "gram" and run.release.matrix.shape == (1, gram_width(spec.width))
    # the released Gram is ZᵀZ plus noise of the calibrated size
    from ltm.sim.runtime.simulate import training_matrix
    V = training_matrix(spec, table)
    err = run.release.gram - V.T @ V
    assert np.abs(err).max() < 7 * math.sqrt(run.release.noise_variance_per_column)


def test_gram_sum_covers_exactly_the_agreed_participants():
    """A party that never uploads, a batch that reached only one server, and clients the analyst
    leaves out of part of a batch: the released sum covers exactly the agreed participants."""
    from ltm.party.randomizer import make_batches

    spec, table, randomness = gram_job(n=600, parties=4, k=2, seed="dropout", min_honest_load=100)
    tables = party_tables(spec, table)
    servers = [ServerCore(s.server_id) for s in spec.servers]
    for server in servers:
        server.create_job(spec, caller_role=ANALYST_ROLE)
    for party in spec.parties[:-1]:
        prand = party_randomness(randomness, spec, party.party_id)
        for per_server in make_batches(spec, party.party_id, tables[party.party_id], prand, batch_clients=BATCH):
            stray = party is spec.parties[0] and per_server[0].batch_index == 1
            for server, batch in zip(servers, per_server):
                if stray and server is servers[1]:
                    continue
                server.accept(batch, spec.job_id, caller_role="party", caller_id=party.party_id)
    held = [server.close(spec.job_id, caller_role=ANALYST_ROLE).to_mask() for server in servers]
    participants = np.logical_and(*held)
    first = spec.parties[0]
    assert not participants[first.start + BATCH:first.start + 2 * BATCH].any() and held[0][first.start + BATCH]
    assert int(participants.sum()) == spec.parties[-1].start - BATCH
    participants[10:20] = False  # and the analyst may release any subset the gate accepts: part of a batch
    shares = [s.release(spec.job_id, participants, caller_role=ANALYST_ROLE, job_digest=spec.digest) for s in servers]
    # the clear sum over the participants
    plan = spec.noise_plan()
    expected = np.zeros(spec.upload_width, dtype=np.uint64)
    for party in spec.parties[:-1]:
        lifted = GRAM.apply(spec, clip_rows(client_vectors(spec, party, tables[party.party_id]), spec.clip_bound))
        prand = party_randomness(randomness, spec, party.party_id)
        for bi, a, b in plan_batches(party, BATCH).ranges:
            noisy = noisy_copies(lifted[a - party.start:b - party.start], 1, plan, prand.child("batch", bi).child("noise"))
            keep = participants[a:b]
            expected += noisy[0][keep].sum(axis=0, dtype=np.uint64)
    np.testing.assert_array_equal(shares[0][0] + shares[1][0], expected)


# ------------------------------------------------------------------------------ noise variance
N_ZERO, WIDTH_ZERO, JOBS = 1000, 20, 30


def test_gram_released_noise_variance_matches_the_calibration():
    """All-zero data: the release is pure noise; entry c is the sum of n independent
    N(0, σ_c²) draws, so Y_c / (√n σ_c) is N(0, 1) and independent across entries and jobs.
    Σz² over N = JOBS·W values is exactly χ²_N: accept in its central 1 − 1e-6 interval
    (flake ≤ 1e-6 for any seeds); KS at p < 1e-6."""
    values = []
    for i in range(JOBS):
        randomness = Randomness.seeded_insecure(f"gram-noise-{i}")
        cols = {f"x{j}": np.zeros(N_ZERO) for j in range(WIDTH_ZERO - 1)}
        cols["y"] = np.zeros(N_ZERO)
        table = Table(cols, "y", "zeros")
        spec, _ = build_job(table, job_id=f"z{i}", randomness=randomness, kind="gram", parties=2, k=2)
        run = run_inprocess(spec, party_tables(spec, table), randomness)
        Y = decode(shares_sum(run), spec.frac_bits)
        plan = spec.noise_plan()
        assert plan.sigma_client * math.sqrt(spec.privacy.min_honest_load) == pytest.approx(plan.sigma_release,
                                                                                            rel=1e-14)
        # per-entry scales: variance σ_c² on the diagonal, σ_c²/2 off it (ltm/lifts.py)
        np.testing.assert_array_equal(plan.noise_factors, gram_noise_factors(WIDTH_ZERO))
        values.append(Y.ravel() / (math.sqrt(N_ZERO) * plan.sigma_client * np.sqrt(plan.noise_factors)))
    z = np.concatenate(values)
    n = z.size
    assert n == JOBS * gram_width(WIDTH_ZERO)
    lo, hi = scipy.stats.chi2.ppf(5e-7, n), scipy.stats.chi2.ppf(1 - 5e-7, n)
    assert lo < float(z @ z) < hi
    assert hi / n < 1.1 and lo / n > 0.9  # catches a forgotten √2 (variance ×2 or ×½)
    assert scipy.stats.kstest(z, "norm").pvalue > 1e-6


# ------------------------------------------------------------------------------ calibration
@pytest.mark.parametrize("eps,delta", [(0.3, 1e-6), (1.0, 1e-6), (4.0, 1e-9)])
def test_gram_sigma_matches_dp_accounting(eps, delta):
    """The gram job's σ_c, checked independently: Δ₂ = √2·(C + √D·2^-g/2)² of the input rounded to
    2^-g (g = ⌊f/2⌋), plus the plan's own harmless √W·2^-f; the L-fold discrete Gaussian sum's zCDP
    ρ per coordinate (Kairouz–Liu–Steinke, in mpmath), τ at the smallest scale σ_c/√2; and
    dp_accounting's module-level RDP conversion: δ at ε is the target, neither above (not private)
    nor below by more than 1e-6 (not over-noised)."""
    import mpmath
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS, compute_delta

    spec, _, _ = gram_job(epsilon=eps, delta=delta, clip_bound=0.7)
    plan = spec.noise_plan()
    g = spec.frac_bits // 2
    base = float(mpmath.sqrt(2) * (mpmath.mpf("0.7") + mpmath.sqrt(spec.width) * mpmath.mpf(2) ** (-g) / 2) ** 2)
    W = spec.upload_width
    assert plan.base_sensitivity == pytest.approx(base, rel=1e-15)
    assert plan.sensitivity == pytest.approx(base + math.sqrt(W) * 2.0**-spec.frac_bits, rel=1e-15)
    L = spec.privacy.min_honest_load
    sigma = mpmath.sqrt(mpmath.mpf(plan.grid_sigma2))
    smallest = sigma / mpmath.sqrt(2)  # the off-diagonal entries' scale
    tau = 10 * mpmath.fsum(mpmath.exp(-2 * mpmath.pi**2 * smallest**2 * k / (k + 1)) for k in range(1, min(L, 200)))
    d2 = mpmath.mpf(plan.sensitivity) * 2**spec.frac_bits
    eps_c = d2 / (mpmath.sqrt(L) * sigma) + tau * mpmath.sqrt(2 * W) * d2
    rho = float(eps_c**2 / 2)
    got = compute_delta(DEFAULT_RDP_ORDERS, [a * rho for a in DEFAULT_RDP_ORDERS], eps)[0]
    assert delta * (1 - 1e-6) <= got <= delta * (1 + 1e-9)
    assert L * plan.sigma_client**2 == pytest.approx(plan.sigma_release**2, rel=1e-12)


def test_gram_laplace_uses_the_l1_sensitivity():
    spec, _, _ = gram_job(mechanism="laplace", delta=0.0, clip_bound=1.5)
    plan = spec.noise_plan()
    g = spec.frac_bits // 2
    radius = 1.5 + spec.width * 2.0 ** (-g) / 2  # ℓ1: each of the D coordinates moves ≤ 2^-g/2
    assert plan.noise_factors is None  # Laplace: i.i.d. draws
    assert plan.sensitivity == pytest.approx(2 * 1.5**2, rel=1e-3) and plan.laplace_scale == pytest.approx(2 * 1.5**2, rel=1e-3)
    assert plan.base_sensitivity == pytest.approx(2 * radius**2, rel=1e-15)  # ℓ1 of the unweighted triangle
    rng = np.random.default_rng(3)
    Z = clip_rows(rng.laplace(size=(5000, spec.width)), 1.5, "l1")
    assert np.abs(GRAM.apply(spec, Z)).sum(axis=1).max() <= radius**2


# ------------------------------------------------------------------------------ spec, gate, corruption
def test_gram_job_spec_refusals():
    spec, _, _ = gram_job()
    assert validate_job(spec).max_row_load == spec.n
    with pytest.raises(JobSpecError, match="m = 1 and s = 1"):
        validate_job(replace(spec, sketch=replace(spec.sketch, m=4)))
    with pytest.raises(JobSpecError, match="partition"):
        validate_job(replace(spec, partition="columns"))
    with pytest.raises(JobSpecError, match="'paper'"):
        validate_job(replace(spec, privacy=replace(spec.privacy, calibration="paper")))
    with pytest.raises(JobSpecError, match="sketch kind"):
        validate_job(replace(spec, sketch=replace(spec.sketch, kind="sum")))


def test_gram_corrupt_party_deduction_is_the_largest_party():
    spec, _, _ = gram_job(n=1000, parties=4, corrupt_parties=1)
    loads, deduction = honest_row_loads(spec)
    assert loads.tolist() == [1000] and deduction.tolist() == [250]
    assert spec.privacy.min_honest_load == int(0.95 * 750)
    spec2, _, _ = gram_job(n=1000, parties=4, corrupt_parties=2, t_prime=3)
    assert honest_row_loads(spec2)[1].tolist() == [503]


def test_gram_gate_refuses_a_tiny_participant_set():
    spec, table, randomness = gram_job(n=400, parties=2, k=2)
    tables = party_tables(spec, table)
    servers = [ServerCore(s.server_id) for s in spec.servers]
    run_inprocess(spec, tables, randomness, servers=servers)
    # run_inprocess released the full set; a fresh job id on the same data: close, then ask for 5 clients
    spec_b = replace(spec, job_id="gram-b")
    servers_b = [ServerCore(s.server_id) for s in spec_b.servers]
    from ltm.party.randomizer import make_batches
    for server in servers_b:
        server.create_job(spec_b, caller_role=ANALYST_ROLE)
    for party in spec_b.parties:
        for per_server in make_batches(spec_b, party.party_id, tables[party.party_id], randomness.child("b")):
            for server, batch in zip(servers_b, per_server):
                server.accept(batch, spec_b.job_id, caller_role="party", caller_id=party.party_id)
    for server in servers_b:
        server.close(spec_b.job_id, caller_role=ANALYST_ROLE)
    tiny = np.zeros(spec_b.n, dtype=bool)
    tiny[:5] = True
    with pytest.raises(ProtocolError) as err:
        servers_b[0].release(spec_b.job_id, tiny, caller_role=ANALYST_ROLE, job_digest=spec_b.digest)
    assert err.value.code == "FAILED_PRECONDITION"
    full = servers_b[0].release(spec_b.job_id, np.ones(spec_b.n, bool), caller_role=ANALYST_ROLE,
                                job_digest=spec_b.digest)
    assert full.shape == (1, spec_b.upload_width)


# ------------------------------------------------------------------------------ estimators
def test_estimators_on_a_gram_release_solve_the_normal_equations():
    spec, table, randomness = gram_job(n=3000, d=4, epsilon=1.0)
    run = run_inprocess(spec, party_tables(spec, table), randomness)
    rel = run.release
    G = rel.gram
    np.testing.assert_array_equal(G, G.T)
    Gxx, gxy, reg = gram_blocks(G, rel.label)
    assert reg == rel.feature_indices
    np.testing.assert_allclose(OLS().fit(rel).coef_scaled_, np.linalg.solve(Gxx, gxy), rtol=1e-9)
    lam = adassp_lambda(Gxx, rel.noise_variance_per_column)
    np.testing.assert_allclose(Ridge(lam).fit(rel).coef_scaled_,
                               np.linalg.solve(Gxx + lam * np.eye(len(reg)), gxy), rtol=1e-9)
    top = LowRank(2).fit(rel).components_
    evals, V = np.linalg.eigh(G)
    assert abs(abs(float(top[:, 0] @ V[:, -1])) - 1) < 1e-9
    # an indefinite noisy Gram is projected, not exploded: the negative direction is dropped
    w, solver = solve_gram(np.diag([1.0, -1.0]), np.ones(2), 0.0)
    assert solver == "eigh-clamped" and np.array_equal(w, [1.0, 0.0])


# ====== mutation-kill tests for analyst/gram.py (scripts/mutation.sh), formerly test_kills_gram.py
# analyst/gram.py: the one noisy-Gram solver against its definition (computed by an independent
# route: the positive part of a symmetric matrix from its polar decomposition, scipy's sqrtm), and
# the noise bounds and helpers against their closed forms.
import re  # noqa: E402

from ltm.analyst import gram  # noqa: E402


def psd_part(H: np.ndarray) -> np.ndarray:
    """H's projection onto the PSD cone (eigenvalues max(e, 0)), without an eigh: (H + |H|)/2
    with |H| = (H²)^{1/2} (the polar decomposition)."""
    return (H + np.real(scipy.linalg.sqrtm(H @ H))) / 2.0


def random_symmetric(p: int, seed: int, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((p, p))
    return (X + X.T) / 2.0 + shift * np.eye(p)


# ------------------------------------------------------------------------------------ solve_gram
@pytest.mark.parametrize("lam", [0.0, 0.3, 5.0])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_positive_definite_gram_is_solved_as_is(lam, seed):
    G = random_symmetric(5, seed, shift=6.0)
    g = np.random.default_rng(seed + 10).standard_normal(5)
    assert np.linalg.eigvalsh(G)[0] > 0
    w, solver = gram.solve_gram(G, g, lam)
    assert solver == "eigh"
    assert np.allclose(w, np.linalg.solve(G + lam * np.eye(5), g), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_a_ridge_that_keeps_the_problem_convex_solves_the_noisy_gram_as_is(seed):
    H = random_symmetric(6, seed)
    e_min = float(np.linalg.eigvalsh(H)[0])
    assert e_min < 0
    g = np.random.default_rng(seed).standard_normal(6)
    lam = -e_min + 0.3  # H + λI is positive definite although H is not
    w, solver = gram.solve_gram(H, g, lam)
    assert solver == "eigh"
    assert np.allclose(w, np.linalg.solve(H + lam * np.eye(6), g), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", [4, 5, 6])
@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_a_non_convex_problem_is_projected_onto_the_psd_cone_before_the_ridge(seed, fraction):
    H = random_symmetric(6, seed)
    lam = -float(np.linalg.eigvalsh(H)[0]) * fraction  # H + λI is not positive definite
    g = np.random.default_rng(seed).standard_normal(6)
    w, solver = gram.solve_gram(H, g, lam)
    assert solver == "eigh-clamped"
    if lam > 0:
        assert np.allclose(w, np.linalg.solve(psd_part(H) + lam * np.eye(6), g), rtol=1e-9, atol=1e-12)
    else:  # λ = 0: the minimum-norm solution, nothing in the dropped (non-positive) directions
        assert np.allclose(w, np.linalg.pinv(psd_part(H), rcond=1e-9, hermitian=True) @ g, rtol=1e-9, atol=1e-12)
        evals, V = np.linalg.eigh(H)
        assert np.allclose(V[:, evals <= 0].T @ w, 0.0, atol=1e-12)


def test_the_projection_is_never_farther_from_the_true_gram():
    rng = np.random.default_rng(9)
    for _ in range(20):
        X = rng.standard_normal((30, 5))
        true = X.T @ X
        E = rng.standard_normal((5, 5)) * 20.0
        noisy = true + (E + E.T) / 2.0
        assert np.linalg.norm(psd_part(noisy) - true) <= np.linalg.norm(noisy - true) + 1e-9


def test_the_switch_to_the_projection_happens_where_convexity_ends():
    H, g = np.diag([-0.5, 1.0]), np.array([1.0, 1.0])
    w, solver = gram.solve_gram(H, g, 0.5)  # e + λ = 0: not convex, projected: eigenvalues 0.5, 1.5
    assert solver == "eigh-clamped" and np.allclose(w, [2.0, 1.0 / 1.5])
    w, solver = gram.solve_gram(H, g, 0.5 + 1e-6)  # just convex: as is
    assert solver == "eigh" and w == pytest.approx([1e6, 1.0 / (1.5 + 1e-6)], rel=1e-6)


def test_a_zero_eigenvalue_without_a_ridge_is_dropped_and_one_at_the_tolerance_too():
    w, solver = gram.solve_gram(np.diag([0.0, 2.0]), np.array([1.0, 1.0]), 0.0)
    assert solver == "eigh-clamped" and np.array_equal(w, [0.0, 0.5])
    w, solver = gram.solve_gram(np.diag([1e-12, 1.0]), np.array([1.0, 1.0]), 0.0)  # = 10⁻¹²·max|e|: dropped
    assert solver == "eigh-clamped" and np.array_equal(w, [0.0, 1.0])
    w, solver = gram.solve_gram(np.diag([1e-11, 1.0]), np.array([1.0, 1.0]), 0.0)  # above it: kept
    assert solver == "eigh" and w == pytest.approx([1e11, 1.0], rel=1e-12)
    w, solver = gram.solve_gram(np.diag([-5.0, 2e-12, 1.0]), np.ones(3), 0.0)  # the largest |e| is negative
    assert solver == "eigh-clamped" and np.array_equal(w, [0.0, 0.0, 1.0])
    w, solver = gram.solve_gram(np.zeros((3, 3)), np.ones(3), 0.0)
    assert solver == "eigh-clamped" and np.array_equal(w, np.zeros(3))
    w, solver = gram.solve_gram(np.zeros((2, 2)), np.ones(2), 0.5)  # λ alone is a valid matrix
    assert solver == "eigh" and np.allclose(w, [2.0, 2.0])


@pytest.mark.parametrize("scale", [1e-20, 1e-6, 1e20])
def test_the_solver_is_scale_free(scale):
    """(cĜ, cĝ, cλ) gives the same w: the drop tolerance is relative to Ĝ's own eigenvalues."""
    H = np.diag([3.0, 1e-11, -2.0])
    g = np.array([3.0, 1.0, 1.0])
    w1, s1 = gram.solve_gram(H, g, 0.0)
    w2, s2 = gram.solve_gram(scale * H, scale * g, 0.0)
    assert s1 == s2 == "eigh-clamped" and np.allclose(w2, w1, rtol=1e-9) and w1 == pytest.approx([1.0, 1e11, 0.0])
    w3, _ = gram.solve_gram(scale * H, scale * g, scale * 0.5)
    assert np.allclose(w3, gram.solve_gram(H, g, 0.5)[0], rtol=1e-9)


def test_a_non_symmetric_gram_is_symmetrised_and_a_column_moment_flattened():
    G = np.array([[2.0, 1.0], [0.0, 2.0]])
    w, solver = gram.solve_gram(G, np.array([[1.0], [1.0]]), 1.0)
    assert solver == "eigh" and w.shape == (2,)
    assert np.allclose(w, np.linalg.solve([[3.0, 0.5], [0.5, 3.0]], [1.0, 1.0]))


@pytest.mark.parametrize("lam", [-1.0, math.nan, math.inf, -math.inf])
def test_a_bad_lambda_is_refused(lam):
    with pytest.raises(ValueError, match=re.escape(f"lam must be finite and >= 0, got {lam!r}")):
        gram.solve_gram(np.eye(2), np.ones(2), lam)


@pytest.mark.parametrize("G,g", [(np.eye(3), np.ones(2)), (np.ones(3), np.ones(3)), (np.ones((2, 3)), np.ones(2))])
def test_mismatched_shapes_are_refused(G, g):
    with pytest.raises(ValueError, match=re.escape(f"Gxx must be p × p and gxy of length p (got {G.shape} and "
                                                   f"{np.asarray(g).reshape(-1).shape})")):
        gram.solve_gram(G, g, 0.0)


# ------------------------------------------------------------------------------------ the other helpers
def test_gram_blocks_split_off_the_label():
    G = np.arange(16.0).reshape(4, 4)
    Gxx, gxy, reg = gram.gram_blocks(G, 1)
    assert reg == [0, 2, 3] and np.array_equal(Gxx, G[np.ix_([0, 2, 3], [0, 2, 3])]) and np.array_equal(gxy, G[[0, 2, 3], 1])
    with pytest.raises(ValueError, match="^the release has no label column; a regression needs one$"):
        gram.gram_blocks(G, None)
    with pytest.raises(ValueError, match=re.escape("a Gram matrix is square, got shape (3, 4)")):
        gram.gram_blocks(np.ones((3, 4)), 1)


@pytest.mark.parametrize("p,v,rho", [(1, 2.0, 0.05), (6, 35.7, 0.05), (10, 0.5, 0.2)])
def test_noise_bounds_match_their_closed_forms(p, v, rho):
    assert gram.noise_edge(p, v) == pytest.approx(math.sqrt(2 * p * v), rel=1e-15)
    assert gram.noise_spectral_bound(p, v, rho) == pytest.approx(
        math.sqrt(v) * math.sqrt(p * max(math.log(2 * p * p / rho), 1.0)), rel=1e-15)
    assert gram.noise_spectral_bound(p, v) == gram.noise_spectral_bound(p, v, gram.RHO)


def test_the_spectral_bound_covers_the_noise_and_the_edge_is_its_typical_size():
    rng = np.random.default_rng(4)
    p, v = 40, 3.0
    norms = []
    for _ in range(30):
        E = np.triu(rng.standard_normal((p, p)) * math.sqrt(v / 2.0), 1)
        E = E + E.T + np.diag(rng.standard_normal(p) * math.sqrt(v))
        norms.append(np.abs(np.linalg.eigvalsh(E)).max())
    assert max(norms) <= gram.noise_spectral_bound(p, v)
    assert 0.8 * gram.noise_edge(p, v) < np.median(norms) < 1.2 * gram.noise_edge(p, v)


def test_the_spectral_bound_log_is_at_least_one():
    # 2p²/ρ < e only for p = 1 and ρ > 2/e: the log is floored at 1
    assert gram.noise_spectral_bound(1, 4.0, 0.9) == pytest.approx(2.0)
    assert gram.noise_spectral_bound(1, 4.0, 0.7) == pytest.approx(2.0 * math.sqrt(math.log(2 / 0.7)))


@pytest.mark.parametrize("args", [(0, 1.0, 0.05), (2, -1.0, 0.05), (2, 1.0, 0.0), (2, 1.0, 1.0)])
def test_bad_noise_bound_arguments_are_refused(args):
    p, v, rho = args
    with pytest.raises(ValueError, match=re.escape(f"need p ≥ 1, v ≥ 0 and 0 < ρ < 1 (got p={p}, v={v}, ρ={rho})")):
        gram.noise_spectral_bound(p, v, rho)
    if rho == 0.05:
        with pytest.raises(ValueError, match=re.escape(f"need p ≥ 1 and v ≥ 0 (got p={p}, v={v})")):
            gram.noise_edge(p, v)


def test_adassp_lambda_is_the_bound_minus_the_smallest_eigenvalue():
    G = np.array([[5.0, 1.0], [0.0, 1.0]])  # symmetrised: [[5, .5], [.5, 1]]
    lam_min = float(np.linalg.eigvalsh([[5.0, 0.5], [0.5, 1.0]])[0])
    assert gram.adassp_lambda(G, 9.0) == pytest.approx(gram.noise_edge(2, 9.0) - lam_min)
    assert gram.adassp_lambda(G, 9.0, bound="adassp", rho=0.1) == pytest.approx(
        gram.noise_spectral_bound(2, 9.0, 0.1) - lam_min)
    assert gram.adassp_lambda(G, 9.0, bound="adassp") == pytest.approx(gram.noise_spectral_bound(2, 9.0) - lam_min)
    assert gram.adassp_lambda(100.0 * np.eye(2), 1.0) == 0.0  # λ_min above the bound: no ridge
    with pytest.raises(ValueError, match=r"^unknown bound 'x'; choose 'edge' or 'adassp'$"):
        gram.adassp_lambda(G, 1.0, bound="x")


def test_top_eigenvectors_are_ordered_signed_and_checked():
    V = np.linalg.qr(np.random.default_rng(2).standard_normal((4, 4)))[0]
    G = V @ np.diag([1.0, 4.0, -9.0, 2.0]) @ V.T
    G[0, 1] += 1e-3  # not exactly symmetric: the symmetric part is used
    top, vals = gram.top_eigenvectors(G, 2)
    sym = (G + G.T) / 2.0
    ref_vals, ref_vecs = np.linalg.eigh(sym)
    assert np.allclose(vals, ref_vals[::-1][:2])
    for k in range(2):
        assert np.allclose(sym @ top[:, k], vals[k] * top[:, k], atol=1e-9)
        assert top[np.argmax(np.abs(top[:, k])), k] > 0
    for rank in (0, 5):
        with pytest.raises(ValueError, match=re.escape(f"rank must be in [1, 4], got {rank}")):
            gram.top_eigenvectors(G, rank)
    assert gram.top_eigenvectors(G, 1)[0].shape == (4, 1) and gram.top_eigenvectors(G, 4)[0].shape == (4, 4)
    with pytest.raises(ValueError, match=re.escape("rank must be in [1, 3], got 4")):
        gram.top_eigenvectors(np.ones((3, 4)), 4)


# ------------------------------------------------------------------------------------ float64 throughout
def test_float32_and_integer_inputs_are_computed_in_float64():
    """A release is float64; a caller's float32 copy must not lose the solver's precision."""
    H = random_symmetric(5, 21, shift=0.5)
    H32, g32 = H.astype(np.float32), np.linspace(1.0, 2.0, 5).astype(np.float32)
    H64, g64 = H32.astype(np.float64), g32.astype(np.float64)
    for lam in (0.0, 0.1):
        w32, s32 = gram.solve_gram(H32, g32, lam)
        w64, s64 = gram.solve_gram(H64, g64, lam)
        assert w32.dtype == np.float64 and s32 == s64 and np.allclose(w32, w64, rtol=1e-13, atol=0)
    assert gram.adassp_lambda(H32, 2.0) == pytest.approx(gram.adassp_lambda(H64, 2.0), rel=1e-14)
    t32, v32 = gram.top_eigenvectors(H32, 3)
    t64, v64 = gram.top_eigenvectors(H64, 3)
    assert np.allclose(t32, t64, rtol=1e-13, atol=1e-15) and np.allclose(v32, v64, rtol=1e-13, atol=0)
    w, _ = gram.solve_gram([[2, 0], [0, 4]], [2, 2], 0)
    assert np.array_equal(w, [1.0, 0.5])


def test_an_empty_system_has_the_empty_solution():
    w, solver = gram.solve_gram(np.zeros((0, 0)), np.zeros(0), 0.0)
    assert w.shape == (0,) and solver == "eigh"


def test_zero_noise_has_zero_bounds():
    assert gram.noise_edge(3, 0.0) == 0.0 and gram.noise_spectral_bound(3, 0.0) == 0.0

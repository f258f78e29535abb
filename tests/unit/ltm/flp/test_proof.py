"""The FLP end to end on shares: valid uploads accepted, every kind of invalid one rejected,
soundness at the predicted rate in a small field, exact zero knowledge, test vectors, bad inputs."""
from __future__ import annotations

import hashlib
from math import comb

import numpy as np
import pytest
from scipy.stats import binomtest

from ltm.flp.circuit import BoundedL2
from ltm.flp.field import FIELD64, FieldError, small_field
from ltm.flp.ntt import intt, ntt
from ltm.flp.proof import (
    QueryRandomness,
    combine,
    decide,
    prove,
    query,
    query_plan,
    query_randomness,
)
from ltm.flp.shares import expand_helper, prove_rand, split
from ltm.randomness import Randomness

CIRCUIT = BoundedL2(FIELD64, n=5, bits=6, bound=1100)
CTX = b"job-digest|party-0|batch-0"


def _vectors(rng: np.random.Generator, clients: int) -> np.ndarray:
    """Valid vectors: entries in [-32, 32), squared norm ≤ 1100, including the extremes."""
    x = rng.integers(-10, 11, (clients, CIRCUIT.n))
    extremes = [[0] * 5, [-32, 0, 0, 0, 0],  # the lowest entry
                [31, 0, 0, 0, 0], [10, 10, 10, 10, 10],  # the highest entry; 500
                [30, -14, 2, 0, 0]]  # 1100: the norm exactly at the bound
    x[:min(clients, 5)] = extremes[:clients]
    return x


def _upload(meas, proof, k=2, seed=1, context=CTX):
    return split(CIRCUIT, meas, proof, k, Randomness.seeded_insecure(seed).child("split"), context)


def _verify(shares, k=2, context=CTX, query_seed=b"q" * 16, job=b"job", clients=None, leader=None, plans=None):
    """Every server's verifier share from what it holds; the analyst's decision."""
    leader_meas, leader_proof = leader if leader is not None else (shares.leader_meas, shares.leader_proof)
    clients = len(leader_meas) if clients is None else clients
    rand = query_randomness(CIRCUIT, query_seed, job)
    plans = plans or [query_plan(CIRCUIT, rand, k)] * k
    vs = [query(plans[0], leader_meas, leader_proof)]
    for j, seed in enumerate(shares.helper_seeds, start=1):
        ctx = context[j] if isinstance(context, list) else context
        vs.append(query(plans[j], *expand_helper(CIRCUIT, seed, ctx, clients, j)))
    return decide(CIRCUIT, combine(CIRCUIT, vs))


def _honest(clients=64, seed=0):
    x = _vectors(np.random.default_rng(seed), clients)
    meas = CIRCUIT.encode(x)
    proof = prove(CIRCUIT, meas, prove_rand(CIRCUIT, Randomness.seeded_insecure(seed).child("prove"), clients))
    return x, meas, proof


@pytest.mark.parametrize("k", [2, 3])
def test_valid_uploads_are_accepted_and_sum_to_the_vector(k):
    x, meas, proof = _honest()
    shares = _upload(meas, proof, k)
    assert _verify(shares, k).all()
    total = CIRCUIT.truncate(shares.leader_meas, k)
    for j, seed in enumerate(shares.helper_seeds, start=1):
        total = FIELD64.add(total, CIRCUIT.truncate(expand_helper(CIRCUIT, seed, CTX, len(x), j)[0], k))
    assert (CIRCUIT.decode_sum(total) == x).all()


def _cheat_rows(x_shifted, slack):
    """Bits for arbitrary shifted entries and slack (no validity check): what a cheater would encode."""
    return CIRCUIT.encode_unchecked(np.asarray(x_shifted, np.uint64), np.asarray(slack, np.uint64))


def test_invalid_inputs_of_every_kind_are_rejected():
    off = CIRCUIT.offset
    bad = []
    # Wrong norm: ‖x‖² = 1101 > 1100 with the slack wrapping to its largest value or to 0.
    bad.append(_cheat_rows([[off + 30, off + 14, off + 2, off + 1, off]], [2**CIRCUIT.slack_bits - 1]))
    bad.append(_cheat_rows([[off + 30, off + 14, off + 2, off + 1, off]], [0]))
    bad.append(_cheat_rows([[0, 0, 0, 0, 0]], [0]))  # every entry −32: 5120
    m = _cheat_rows([[off] * 5], [1100])
    m[0, 0] = 2  # a non-binary bit: the entry is out of its range
    bad.append(m)
    m = _cheat_rows([[off] * 5], [1100])
    m[0, 3] = FIELD64.p - 1  # a "bit" of −1 (an entry below the range)
    bad.append(m)
    m = _cheat_rows([[off] * 5], [1100])
    m[0, -1] = 2  # a non-binary slack bit (a slack beyond its bits: a norm above the bound)
    bad.append(m)
    meas = np.concatenate(bad)
    rng = Randomness.seeded_insecure(5)
    proof = prove(CIRCUIT, meas, prove_rand(CIRCUIT, rng.child("prove"), len(meas)))  # honest proof of a bad input
    assert not _verify(_upload(meas, proof)).any()
    with pytest.raises(FieldError, match="squared norm exceeds"):
        CIRCUIT.encode(np.array([[30, 14, 2, 1, 0]]))
    with pytest.raises(FieldError, match="outside"):
        CIRCUIT.encode(np.array([[32, 0, 0, 0, 0]]))


def test_every_tampered_proof_or_input_element_is_rejected():
    _, meas, proof = _honest(1)
    shares = _upload(meas, proof)
    width = CIRCUIT.proof_len + CIRCUIT.meas_len
    lm = np.repeat(shares.leader_meas, width, axis=0)
    lp = np.repeat(shares.leader_proof, width, axis=0)
    for i in range(width):  # client i has element i of its leader share (bits, then proof) changed
        target = lp if i >= CIRCUIT.meas_len else lm
        j = i - CIRCUIT.meas_len if i >= CIRCUIT.meas_len else i
        target[i, j] = FIELD64.add(target[i, j], np.uint64(1 + i))
    # Each tampered client sees the helper's share of the one honest client.
    helper = [np.repeat(a, width, axis=0) for a in expand_helper(CIRCUIT, shares.helper_seeds[0], CTX, 1, 1)]
    plan = query_plan(CIRCUIT, query_randomness(CIRCUIT, b"q" * 16, b"job"), 2)
    v = combine(CIRCUIT, [query(plan, lm, lp), query(plan, *helper)])
    assert not decide(CIRCUIT, v).any()
    assert _verify(shares).all()  # the untouched upload still verifies


def test_replayed_proofs_from_another_client_or_job_are_rejected():
    _, meas, proof = _honest(8)
    shares = _upload(meas, proof)
    swapped = (shares.leader_meas[[1, 0, 2, 3, 4, 5, 6, 7]], shares.leader_proof[[1, 0, 2, 3, 4, 5, 6, 7]])
    ok = _verify(shares, leader=swapped)
    assert not ok[:2].any() and ok[2:].all()  # clients 0 and 1 carry each other's leader shares
    # The whole upload replayed in another job (or party, or batch): the helper's expansion differs.
    assert not _verify(shares, context=b"job-digest-2|party-0|batch-0").any()
    assert not _verify(shares, context=b"job-digest|party-1|batch-0").any()
    # Replaying one batch's shares at another position: client c's leader share against client c+1's helper share.
    shifted = (shares.leader_meas[1:], shares.leader_proof[1:])
    assert not _verify(shares, leader=shifted, clients=7).any()


def test_servers_with_different_query_randomness_reject():
    """There is no joint randomness (see the module docs); the randomness the servers must agree on is
    the query randomness: a server using another seed, job or share count makes honest clients fail."""
    _, meas, proof = _honest(16)
    shares = _upload(meas, proof)
    good = query_plan(CIRCUIT, query_randomness(CIRCUIT, b"q" * 16, b"job"), 2)
    for other in (query_plan(CIRCUIT, query_randomness(CIRCUIT, b"r" * 16, b"job"), 2),
                  query_plan(CIRCUIT, query_randomness(CIRCUIT, b"q" * 16, b"job2"), 2),
                  query_plan(CIRCUIT, query_randomness(CIRCUIT, b"q" * 16, b"job"), 3)):
        assert not _verify(shares, plans=[good, other]).any()
        assert not _verify(shares, plans=[other, good]).any()
    assert _verify(shares, plans=[good, good]).all()


# -- soundness in a small field ---------------------------------------------------------------------

def _poly_mul(a, b, p):
    out = [0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] = (out[i + j] + x * y) % p
    return out


def _cheating_proof(circuit, meas, seeds, targets):
    """The best cheat for an input whose only fault is its norm: claim gadget output B − slack at the
    entry call (so every circuit output is 0) and add to the honest gadget polynomial
    D(x) = c·Π_{s ∈ targets}(x − s)·Π_{j ≠ j*}(x − α^j), which is 0 at every other root of unity and
    at the P − 1 chosen points: the gadget test passes iff every query point t_r is a target."""
    f, P, R, L = circuit.field, circuit.wire_len, circuit.reps, circuit.meas_len
    p = f.p
    honest = prove(circuit, meas, seeds)
    x = int(circuit.decode_sum(circuit.truncate(meas, 1))[0, 0])
    slack = int(meas[0, circuit.n * circuit.bits:] @ (1 << np.arange(circuit.slack_bits)))
    delta = (circuit.bound - slack - x * x) % p  # claimed − true at the entry call, position R + L
    alpha = f.root_of_unity(P)
    jstar = R + L
    roots = list(targets) + [pow(alpha, j, p) for j in range(P) if j != jstar]
    d = [1]
    for r in roots:
        d = _poly_mul(d, [(-r) % p, 1], p)
    at = sum(cf * pow(pow(alpha, jstar, p), e, p) for e, cf in enumerate(d)) % p
    c = delta * pow(at, p - 2, p) % p
    d = [cf * c % p for cf in d] + [0] * (circuit.gadget_len - len(d))
    out = honest.copy()  # the proof carries G at the 2P-th roots: add D's values there
    out[0, 2 * R:] = f.add(honest[0, 2 * R:], ntt(f, np.array([d], dtype=np.uint64))[0])
    return out


SMALL = BoundedL2(small_field(97), n=1, bits=2, bound=1, reps=1)  # L = 3, M = 4, P = 8


def _small_cheat():
    f, P = SMALL.field, SMALL.wire_len
    meas = SMALL.encode_unchecked(np.array([[0]], np.uint64), np.array([0], np.uint64))  # x = −2: 4 > 1
    roots = {pow(f.root_of_unity(P), j, f.p) for j in range(P)}
    targets = [t for t in range(f.p) if t not in roots][: P - 1]
    proof = _cheating_proof(SMALL, meas, np.array([[3, 5]], np.uint64), targets)
    return meas, proof, targets, roots


def test_cheating_prover_passes_exactly_at_its_target_points():
    """Exhaustive over every admissible query point: the cheat passes at exactly its P − 1 targets, so
    its success probability is (P − 1)/(p − P), the FLP's bound for this gadget (deg D − #cheated roots)."""
    meas, proof, targets, roots = _small_cheat()
    q = np.array([[11, 13, 17, 19]], np.uint64)  # any q: every circuit output of the cheat is 0
    passed = [t for t in range(SMALL.field.p) if t not in roots
              and decide(SMALL, query(query_plan(SMALL, QueryRandomness(np.array([t], np.uint64), q), 1),
                                      meas, proof))[0]]
    assert passed == targets
    honest = prove(SMALL, meas, np.array([[3, 5]], np.uint64))  # the honest proof of the same input always fails
    assert not any(decide(SMALL, query(query_plan(SMALL, QueryRandomness(np.array([t], np.uint64), q), 1),
                                       meas, honest))[0] for t in range(SMALL.field.p) if t not in roots)


def test_cheating_succeeds_at_the_predicted_rate_through_the_query_derivation():
    """Query randomness from fresh seeds: the cheat's acceptance rate matches (P − 1)/(p − P) = 7/89
    (two-sided binomial test at 1e-7, so the test flakes with probability < 1e-6)."""
    meas, proof, _, _ = _small_cheat()
    trials = 3000
    wins = sum(bool(decide(SMALL, query(query_plan(SMALL, query_randomness(SMALL, i.to_bytes(16, "little"), b"j"), 1),
                                        meas, proof))[0]) for i in range(trials))
    rate = (SMALL.wire_len - 1) / (SMALL.field.p - SMALL.wire_len)
    assert binomtest(wins, trials, rate).pvalue > 1e-7, (wins, trials * rate)
    assert binomtest(wins, trials, rate / 2).pvalue < 1e-7  # and the test can tell a wrong rate apart


def test_repeated_queries_multiply_the_soundness_error():
    """With R = 2 distinct points the cheat passes iff both are targets: C(P−1, 2)/C(p−P, 2)."""
    circuit = BoundedL2(small_field(97), n=1, bits=2, bound=1, reps=2)  # P = 8 still (M + R = 6)
    f, P = circuit.field, circuit.wire_len
    meas = circuit.encode_unchecked(np.array([[0]], np.uint64), np.array([0], np.uint64))
    roots = {pow(f.root_of_unity(P), j, f.p) for j in range(P)}
    targets = [t for t in range(f.p) if t not in roots][: P - 1]
    proof = _cheating_proof(circuit, meas, np.array([[3, 5, 7, 9]], np.uint64), targets)
    q = np.ones((2, circuit.meas_len + 1), np.uint64)
    admissible = [t for t in range(f.p) if t not in roots]
    passed = sum(bool(decide(circuit, query(query_plan(circuit, QueryRandomness(np.array([a, b], np.uint64), q), 1),
                                            meas, proof))[0])
                 for i, a in enumerate(admissible) for b in admissible[i + 1:] if a in targets)
    assert passed == comb(P - 1, 2)  # out of comb(p − P, 2) pairs


# -- zero knowledge ---------------------------------------------------------------------------------

TINY = BoundedL2(small_field(17), n=1, bits=2, bound=1, reps=2)  # P = 8, 16 | p − 1


def _simulate(field, values):
    """The simulator: what the analyst sees of an honest client, from uniform (a, b, c, d) alone:
    (0, a, b, a·b, 0, c, d, c·d)."""
    a, b, c, d = values.T
    z = np.zeros_like(a)
    return np.stack([z, a, b, field.mul(a, b), z, c, d, field.mul(c, d)], axis=1)


@pytest.mark.parametrize("x", [-1, 0, 1])
def test_summed_verifier_is_exactly_the_simulators_distribution(x):
    """Enumerate all p^4 prover seeds: the multiset of summed verifiers (over K = 2 shares) equals the
    simulator's over all p^4 uniform inputs, for every valid input: zero knowledge, exactly."""
    f = TINY.field
    grid = np.stack(np.meshgrid(*[np.arange(f.p, dtype=np.uint64)] * 4, indexing="ij"), axis=-1).reshape(-1, 4)
    meas = np.repeat(TINY.encode(np.array([[x]])), len(grid), axis=0)
    proof = prove(TINY, meas, grid)
    shares = split(TINY, meas, proof, 2, Randomness.seeded_insecure(x + 5), b"ctx")
    plan = query_plan(TINY, query_randomness(TINY, b"zk-query-seed-00", b"job"), 2)
    v = combine(TINY, [query(plan, shares.leader_meas, shares.leader_proof),
                       query(plan, *expand_helper(TINY, shares.helper_seeds[0], b"ctx", len(grid), 1))])
    real = v[np.lexsort(v.T[::-1])]
    sim = _simulate(f, grid)
    assert (real == sim[np.lexsort(sim.T[::-1])]).all()


# -- test vectors and bad inputs --------------------------------------------------------------------

def _digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(FIELD64.encode(a))
    return h.hexdigest()[:32]


def test_vectors():
    """Fixed seeds → fixed bytes: a change of encoding, layout, sharing or derivation changes these."""
    x = np.array([[3, -4, 0, 12, -30], [0, 0, 0, 0, 0]])
    meas = CIRCUIT.encode(x)
    rng = Randomness.seeded_insecure(31)
    proof = prove(CIRCUIT, meas, prove_rand(CIRCUIT, rng.child("prove"), 2))
    shares = split(CIRCUIT, meas, proof, 2, rng.child("split"), b"test-vector")
    rand = query_randomness(CIRCUIT, b"\x01" * 16, b"test-job")
    plan = query_plan(CIRCUIT, rand, 2)
    v0 = query(plan, shares.leader_meas, shares.leader_proof)
    v1 = query(plan, *expand_helper(CIRCUIT, shares.helper_seeds[0], b"test-vector", 2, 1))
    got = {"meas": _digest(meas), "proof": _digest(proof), "leader": _digest(shares.leader_meas, shares.leader_proof),
           "helper_seed": shares.helper_seeds[0].hex()[:32], "query": _digest(rand.t, rand.q),
           "verifier": _digest(v0, v1)}
    assert got == EXPECTED_VECTORS
    assert decide(CIRCUIT, combine(CIRCUIT, [v0, v1])).all()


#: Recorded from the first implementation (first 128 bits of SHA-256 of the little-endian elements).
EXPECTED_VECTORS = {
    "meas": "f544d99af80e428094d412f3cbb9adc2",
    "proof": "b107490d72c9dff98acb1d92c2bd3fce",
    "leader": "a004ae0a0246d4ed1a1fd9a18d9e46cc",
    "helper_seed": "a2843747a7b2c169e845abc758e3c111",
    "query": "82e0ed7348e0fe63caf5468dd42bc6f0",
    "verifier": "324923698d255236cfeb634aa43c2c86",
}


def test_bad_inputs_are_refused_with_clear_errors():
    _, meas, proof = _honest(2)
    plan = query_plan(CIRCUIT, query_randomness(CIRCUIT, b"q" * 16, b"job"), 2)
    with pytest.raises(FieldError, match=r"input share: expected shape \(clients, 41\)"):
        query(plan, meas[:, :-1], proof)
    with pytest.raises(FieldError, match=r"proof share: expected shape \(clients, 132\)"):
        query(plan, meas, proof[:, 1:])
    with pytest.raises(FieldError, match="2 input shares but 1 proof shares"):
        query(plan, meas, proof[:1])
    bad = proof.copy()
    bad[1, 7] = np.uint64(FIELD64.p)
    with pytest.raises(FieldError, match="proof share: element 139 is not canonical"):
        query(plan, meas, bad)
    with pytest.raises(FieldError, match="dtype int64"):
        query(plan, meas.astype(np.int64), proof)
    with pytest.raises(FieldError, match="prove randomness"):
        prove(CIRCUIT, meas, np.zeros((2, 3), np.uint64))
    with pytest.raises(FieldError, match="query seed of 4 bytes"):
        query_randomness(CIRCUIT, b"abcd", b"job")
    with pytest.raises(FieldError, match="helper seed of 5 bytes"):
        expand_helper(CIRCUIT, b"short", CTX, 2, 1)
    with pytest.raises(FieldError, match="verifier: expected shape"):
        decide(CIRCUIT, np.zeros((2, 5), np.uint64))
    with pytest.raises(FieldError, match="can wrap mod"):
        BoundedL2(FIELD64, n=4, bits=33, bound=10)
    with pytest.raises(FieldError, match="bad circuit parameters"):
        BoundedL2(FIELD64, n=0, bits=3, bound=10)
    with pytest.raises(FieldError, match="at least 2 servers"):
        split(CIRCUIT, meas, proof, 1, Randomness.seeded_insecure(1), CTX)
    with pytest.raises(FieldError, match=r"shape \(clients, 5\)"):
        CIRCUIT.encode(np.zeros((2, 4), np.int64))


def test_for_grid_accepts_every_clipped_rounded_vector_and_refuses_just_beyond():
    from ltm.clipping import clip_rows
    from ltm.dp.grid import round_to_grid

    width, clip, f = 11, 1.0, 20
    circuit = BoundedL2.for_grid(FIELD64, width, clip, f)
    rng = np.random.default_rng(7)
    raw = rng.normal(size=(2000, width)) * rng.choice([0.01, 1.0, 100.0], size=(2000, 1))
    raw[0] = 0.0
    raw[1] = 0.0
    raw[1, 0] = -5.0  # one entry at the clip bound
    raw[2] = (0.5 + 2.0**-22) * 2.0**-f  # every entry rounds up: the rounding adds √W/2 to the norm
    raw[2, 0] = clip
    x = round_to_grid(clip_rows(raw, clip), f)
    meas = circuit.encode(x)  # refuses if any vector were outside the circuit's bound
    proof = prove(circuit, meas, prove_rand(circuit, Randomness.seeded_insecure(2), len(x)))
    plan = query_plan(circuit, query_randomness(circuit, b"g" * 16, b"job"), 1)
    assert decide(circuit, query(plan, meas, proof)).all()
    assert circuit.bound < (clip * 2**f + np.sqrt(width) / 2 + 1) ** 2  # and not loose by more than a unit
    over = x[:1].copy()
    over[0, 0] = int(np.ceil(np.sqrt(circuit.bound + 1)))
    with pytest.raises(FieldError, match="squared norm exceeds"):
        circuit.encode(over)


def test_soundness_error_bounds_the_measured_cheat_and_meets_the_job_target():
    rate = (SMALL.wire_len - 1) / (SMALL.field.p - SMALL.wire_len)
    assert rate <= SMALL.soundness_error() < 2.5 * rate  # the general bound: deg 2P − 1, not P − 1 roots
    job = BoundedL2.for_grid(FIELD64, 11, 1.0, 20)
    assert job.soundness_error() * 1e8 < 2.0**-40  # 10^8 clients, every one cheating


# -- a second route to the verifier ------------------------------------------------------------------

def _horner(coeffs, t, p):
    acc = 0
    for c in reversed(coeffs):
        acc = (acc * t + c) % p
    return acc


def _direct_verifier(circuit, meas, proof, rand, k):
    """The verifier share of one client computed from the definitions in Python integers: rebuild
    the wires from the share, interpolate (inverse NTT) and evaluate at t by Horner, read the gadget
    outputs off the proof's even points, interpolate G from its 2P values."""
    f, R, L, n, b, P = circuit.field, circuit.reps, circuit.meas_len, circuit.n, circuit.bits, circuit.wire_len
    p = f.p
    inv_k = pow(k, p - 2, p)
    m = [int(v) for v in meas]
    x = [(sum(m[a * b + j] << j for j in range(b)) - (circuit.offset * inv_k)) % p for a in range(n)]
    slack = sum(m[n * b + j] << j for j in range(circuit.slack_bits)) % p
    seeds, gvals = [int(v) for v in proof[:2 * R]], np.asarray(proof[2 * R:], np.uint64)
    w0 = seeds[:R] + m + x + [0] * (P - R - L - n)
    w1 = seeds[R:] + [(v - inv_k) % p for v in m] + x + [0] * (P - R - L - n)
    c0, c1 = (intt(f, np.array([w], np.uint64))[0].tolist() for w in (w0, w1))
    gcoef = intt(f, gvals[None, :])[0].tolist()
    out = []
    for r in range(R):
        t, q = int(rand.t[r]), [int(v) for v in rand.q[r]]
        g_at = [int(gvals[2 * (R + i)]) for i in range(L + n)]  # G(α^{R+i}) = value at ω^{2(R+i)}
        v = (sum(qi * gi for qi, gi in zip(q[:L], g_at[:L])) + q[L] * (sum(g_at[L:]) + slack - circuit.bound * inv_k)) % p
        out += [v, _horner(c0, t, p), _horner(c1, t, p), _horner(gcoef, t, p)]
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_query_equals_the_verifier_computed_from_its_definition(k):
    """On arbitrary (random, invalid) shares, so every coefficient of the linear map is exercised."""
    f = CIRCUIT.field
    rng = np.random.default_rng(11 + k)
    meas = rng.integers(0, 2**64 - 1, (3, CIRCUIT.meas_len), dtype=np.uint64, endpoint=True) % np.uint64(f.p)
    proof = rng.integers(0, 2**64 - 1, (3, CIRCUIT.proof_len), dtype=np.uint64, endpoint=True) % np.uint64(f.p)
    meas[0] = CIRCUIT.encode(np.array([[3, -4, 0, 12, -30]]))[0]  # and one honest-looking share
    rand = query_randomness(CIRCUIT, b"direct-route-000", b"job")
    got = query(query_plan(CIRCUIT, rand, k), meas, proof)
    for c in range(3):
        assert got[c].tolist() == _direct_verifier(CIRCUIT, meas[c], proof[c], rand, k)


def test_prove_equals_the_product_of_the_interpolated_wires():
    """The proof's 2P values are W0·W1 at the 2P-th roots, W0, W1 interpolated from their P values
    (coefficients by inverse NTT, evaluated by Horner): the fast paths (bits by BLAS, one transform
    pair) agree with the definition for a valid input and for a non-bit one."""
    f, R, P = CIRCUIT.field, CIRCUIT.reps, CIRCUIT.wire_len
    p = f.p
    meas = CIRCUIT.encode(np.array([[3, -4, 0, 12, -30], [31, 0, 0, 0, -1]]))
    meas[1, 2] = 7  # not a bit: the cheat's path
    seeds = np.array([[1, 2, 3, 4], [p - 1, 0, 5, p - 2]], np.uint64)
    proof = prove(CIRCUIT, meas, seeds)
    w0, w1 = CIRCUIT.wires(meas, 1)
    omega = f.root_of_unity(2 * P)
    for c in range(2):
        pad = [0] * (P - R - CIRCUIT.calls)
        v0 = [int(s) for s in seeds[c, :R]] + w0[c].tolist() + pad
        v1 = [int(s) for s in seeds[c, R:]] + w1[c].tolist() + pad
        c0, c1 = (intt(f, np.array([v], np.uint64))[0].tolist() for v in (v0, v1))
        want = [_horner(c0, pow(omega, i, p), p) * _horner(c1, pow(omega, i, p), p) % p for i in range(2 * P)]
        assert proof[c, 2 * R:].tolist() == want
        assert proof[c, :2 * R].tolist() == seeds[c].tolist()


def _rank_mod_p(rows, p):
    rows = [list(r) for r in rows]
    rank, cols = 0, len(rows[0])
    for c in range(cols):
        pivot = next((i for i in range(rank, len(rows)) if rows[i][c] % p), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        inv = pow(rows[rank][c], p - 2, p)
        rows[rank] = [v * inv % p for v in rows[rank]]
        for i in range(len(rows)):
            if i != rank and rows[i][c] % p:
                factor = rows[i][c]
                rows[i] = [(v - factor * w) % p for v, w in zip(rows[i], rows[rank])]
        rank += 1
    return rank


@pytest.mark.parametrize("circuit", [CIRCUIT, TINY, BoundedL2(small_field(97), n=2, bits=2, bound=3)])
def test_each_servers_verifier_share_is_uniform_given_the_sum(circuit):
    """A helper's input and proof shares are uniform, so its verifier share is uniform over the image
    of the plan's linear map; the map has full rank 4R, so that image is everything: the analyst's
    view of the separate shares is the (simulatable) sum plus uniform noise."""
    plan = query_plan(circuit, query_randomness(circuit, b"rank-check-seed0", b"job"), 2)
    matrix = np.concatenate([plan.meas_map, plan.proof_map]).tolist()
    assert _rank_mod_p(matrix, circuit.field.p) == circuit.verifier_len

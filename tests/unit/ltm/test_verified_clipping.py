"""Verified clipping on the replicated shares (issue #30): the proof's shape and witness (test
vectors), the constraints' zero-sum exactly for valid blocks, the attacks of the acceptance (an
unclipped block M·e_j, an entry just over its range, a norm of 1.01·C_p, forged bits, bits that are
not 0/1, a wrapping slack, inconsistent copies, a missing proof) refused in process with the party
named and nothing released, the soundness rate with a weakened repetition count, and honest
verified jobs releasing the same bytes as unverified ones."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from ltm.clipping import clip_rows
from ltm.datasets.synthetic import synthetic_ridge
from ltm.dp.grid import round_to_grid
from ltm.jobspec import JobSpecError, validate_job
from ltm.party.randomizer import client_vectors, party_randomness
from ltm.party.replicated import replicated_uploads
from ltm.randomness import Randomness
from ltm.replicated import BlockUpload, party_uploads
from ltm.server.replicated import ReplicatedServer
from ltm.sharing import Share, share
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sim.runtime.replicated_run import replicated_servers, verify_clipping
from ltm.verified_clipping import (
    CHECK_REPETITIONS,
    ClippingProofFailed,
    ProofUpload,
    coefficient_key,
    combine,
    proof_shape,
    server_check,
    server_constraints,
    verdict,
    witness,
)

U64 = np.uint64
SEEDS = [bytes([i]) * 32 for i in range(3)]


# -------------------------------------------------------------------- the pure core
def test_shape_and_witness_test_vector():
    # d = 1, f = 2, C = 1: R = 4 + ½, B = ⌊20.25⌋ = 20, ⌊√20⌋ = 4 has 3 bits: r = 3, E = 4, L = 5.
    shape = proof_shape(1, 2, 1.0)
    assert (shape.bound, shape.r, shape.entry_bits, shape.slack_bits) == (20, 3, 4, 5)
    assert shape.witness_width == 9 and shape.constraint_width == 11
    w = witness(np.array([[-3], [4]]), shape)
    # x̂ = −3: u = 5 = 0b0101 (LSB first 1,0,1,0); slack 20 − 9 = 11 = 0b01011 → 1,1,0,1,0
    np.testing.assert_array_equal(w[0], [1, 0, 1, 0, 1, 1, 0, 1, 0])
    # x̂ = 4: u = 12 → 0,0,1,1; slack 20 − 16 = 4 → 0,0,1,0,0
    np.testing.assert_array_equal(w[1], [0, 0, 1, 1, 0, 0, 1, 0, 0])
    with pytest.raises(ValueError, match="not clipped"):
        witness(np.array([[5]]), shape)  # 25 > 20
    with pytest.raises(ValueError, match="outside"):
        witness(np.array([[8]]), shape)


def test_shape_refuses_a_norm_that_could_wrap():
    proof_shape(11, 24, 1.0)
    with pytest.raises(ValueError, match="could wrap"):
        proof_shape(64, 31, 1.0)


def _replicate(values: np.ndarray, label: str, mode: str = "seed") -> list[np.ndarray]:
    adds = share(np.ascontiguousarray(values).view(U64) if values.dtype == np.int64 else values, 3,
                 Randomness.seeded_insecure(label), mode=mode, primary=1)
    return [a.values() for a in adds]


def _constraint_total(x: np.ndarray, w: np.ndarray, shape, mode: str = "seed") -> np.ndarray:
    xs, ws = _replicate(x, "x" + mode, mode), _replicate(w, "w" + mode, mode)
    c = [server_constraints(i, (xs[i], xs[(i + 1) % 3]), (ws[i], ws[(i + 1) % 3]), shape) for i in range(3)]
    return c[0] + c[1] + c[2]


@pytest.mark.parametrize("mode", ["seed", "full"])
def test_honest_constraints_are_all_zero_even_at_the_bound(mode):
    rng = np.random.default_rng(1)
    d, f, C = 3, 20, 0.6
    X = clip_rows(rng.normal(size=(2000, d)) * 3, C, "l2")
    X[0] = np.full(d, C / math.sqrt(d))         # exactly on the sphere
    X[1] = np.array([C, 0.0, 0.0])              # one entry at the bound
    X[2] = np.array([-C, 0.0, 0.0])
    x = round_to_grid(X, f)
    shape = proof_shape(d, f, C)
    assert not _constraint_total(x, witness(x, shape), shape, mode).any()


def _forge(x: np.ndarray, shape, *, slack: np.ndarray | None = None) -> np.ndarray:
    """A cheater's witness for any block: the low bits of u = x + 2^r and of the slack (wrapped),
    without the checks :func:`witness` makes."""
    x = np.asarray(x, dtype=np.int64)
    u = (x + (1 << shape.r)).view(U64)
    e = ((u[..., None] >> np.arange(shape.entry_bits, dtype=U64)) & U64(1)).reshape(x.shape[0], -1)
    if slack is None:
        with np.errstate(over="ignore"):
            slack = U64(shape.bound) - np.einsum("na,na->n", x.view(U64), x.view(U64))
    s = (slack[:, None] >> np.arange(shape.slack_bits, dtype=U64)) & U64(1)
    return np.concatenate([e, s], axis=1).astype(U64)


def test_each_kind_of_invalid_block_leaves_a_non_zero_constraint():
    d, f, C = 2, 10, 0.5
    shape = proof_shape(d, f, C)
    base = round_to_grid(np.array([[0.3, -0.2]] * 4), f)
    # an entry just over its range, a norm of 1.01·C, an unclipped M·e_j (wrapping)
    over = base.copy()
    over[1, 0] = 1 << shape.r
    big = base.copy()
    big[2] = round_to_grid(np.array([1.01 * C, 0.0]), f)
    huge = base.copy()
    huge[3, 1] = 2_000_000 << f
    for bad, row in ((over, 1), (big, 2), (huge, 3)):
        total = _constraint_total(bad, _forge(bad, shape), shape)
        assert total[row].any() and not np.delete(total, row, axis=0).any()


def test_non_bits_and_a_wrapping_slack_are_caught_by_the_bit_constraints():
    d, f, C = 2, 10, 0.5
    shape = proof_shape(d, f, C)
    x = round_to_grid(np.array([[1.01 * C, 0.0]]), f)  # norm over the bound
    w = _forge(x, shape)
    # a slack that wraps, written with a non-bit in its top position so that the norm identity holds
    with np.errstate(over="ignore"):
        need = U64(shape.bound) - np.einsum("na,na->n", x.view(U64), x.view(U64))  # ≡ −(excess)
    low = need & U64((1 << (shape.slack_bits - 1)) - 1)
    w[:, -1] = (need - low) >> U64(shape.slack_bits - 1)
    w[:, shape.d * shape.entry_bits:-1] = ((low[:, None] >> np.arange(shape.slack_bits - 1, dtype=U64))
                                           & U64(1))
    total = _constraint_total(x, w, shape)
    T_b = shape.witness_width
    assert not total[:, T_b:].any()            # both identities hold …
    assert total[0, T_b - 1] != 0               # … but the slack's top "bit" is not 0/1
    assert np.count_nonzero(total) == 1


def test_combine_is_linear_chunked_and_rejects_a_bad_repetition_count():
    rng = np.random.default_rng(2)
    c = rng.integers(0, 2**63, size=(300, 7), dtype=np.int64).view(U64)
    key = coefficient_key("d", "p", SEEDS)
    whole = combine(c, key)
    parts = combine(c[:100], key) + combine(c[100:], key, start=700)
    np.testing.assert_array_equal(whole, parts)
    # repetition t is Σ_j bit_t(W_j)·c_j, computed directly
    from ltm.randomness import keystream_uint64
    w = keystream_uint64(key, c.size)
    flat = c.reshape(-1)
    with np.errstate(over="ignore"):
        direct = [int(np.sum(flat * ((w >> U64(t)) & U64(1)), dtype=U64)) for t in range(CHECK_REPETITIONS)]
    assert [int(v) for v in whole] == direct
    with pytest.raises(ValueError, match="repetitions"):
        combine(c, key, 65)


@pytest.mark.parametrize("kappa", [1, 2])
def test_soundness_rate_with_a_weakened_repetition_count(kappa):
    """One non-zero constraint (2^63: the value one repetition misses half the time, or an odd one)
    passes κ repetitions with probability exactly 2^-κ; 1500 trials stay within 6 σ (flake < 1e-8)."""
    trials = 1500
    p = 2.0 ** -kappa
    for value in (U64(1) << U64(63), U64(12345)):
        c = np.zeros(50, dtype=U64)
        c[17] = value
        passed = sum(not combine(c, coefficient_key("job", "p", [i.to_bytes(32, "big")] * 3), kappa).any()
                     for i in range(trials))
        sd = math.sqrt(trials * p * (1 - p))
        assert abs(passed - trials * p) <= 6 * sd, (value, passed)
    # the production κ: the bound 2^-40 (docs/architecture.md); 500 keys never miss
    c = np.zeros(50, dtype=U64)
    c[3] = U64(1) << U64(63)
    assert all(combine(c, coefficient_key("job", "p", [i.to_bytes(32, "big")] * 3)).any() for i in range(500))


def test_check_shares_are_rerandomised_and_a_single_share_says_nothing_alone():
    d, f, C = 2, 12, 0.7
    shape = proof_shape(d, f, C)
    X = clip_rows(np.random.default_rng(3).normal(size=(500, d)), C, "l2")
    key = coefficient_key("d", "p", SEEDS)
    outs = []
    for seed in (1, 2):
        R = Randomness.seeded_insecure(seed)
        ups = party_uploads(X, (0, 1), width=d, frac_bits=f, plan=None, randomness=R, proof=shape)
        z = [server_check(i, (u.first, u.second), u.proof, shape, key) for i, u in enumerate(ups)]
        assert verdict(z)
        outs.append(z)
    # the same data under fresh randomness: every server's share changes (masks), the sum stays 0
    assert all(not np.array_equal(a, b) for a, b in zip(*outs))


# -------------------------------------------------------------------- the job, in process
@pytest.fixture(scope="module")
def table():
    return synthetic_ridge(2000, 5, Randomness.seeded_insecure(7).child("data"))


@pytest.fixture(scope="module")
def job(table):
    spec = build_job(table, job_id="vc", randomness=Randomness.seeded_insecure(8), partition="columns", parties=3,
                     kind="gram", colluding_servers=1, verified_clipping=True)[0]
    return spec, party_tables(spec, table)


def test_verified_jobs_tolerate_a_corrupt_party_and_unverified_ones_do_not(job):
    spec, _ = job
    assert spec.verified_clipping and spec.privacy.corrupt_parties == 1
    validate_job(spec)
    with pytest.raises(JobSpecError, match="follows the protocol"):
        validate_job(replace(spec, verified_clipping=False))
    assert spec.computation_digest == replace(spec, verified_clipping=False).computation_digest
    assert spec.digest != replace(spec, verified_clipping=False).digest


def test_honest_verified_job_releases_the_same_bytes_as_the_unverified_one(job):
    spec, data = job
    plain = replace(spec, privacy=replace(spec.privacy, corrupt_parties=0), verified_clipping=False)
    verified0 = replace(plain, verified_clipping=True)
    a = run_inprocess(plain, data, Randomness.seeded_insecure(10))
    b = run_inprocess(verified0, data, Randomness.seeded_insecure(10))
    assert a.release.sha256 == b.release.sha256 and "verify_clipping" in b.timing_s
    np.testing.assert_array_equal(a.result_shares[0] + a.result_shares[1] + a.result_shares[2],
                                  b.result_shares[0] + b.result_shares[1] + b.result_shares[2])
    assert run_inprocess(spec, data, Randomness.seeded_insecure(10)).release.sha256  # corrupt_parties = 1 runs


def _servers_with(spec, data, cheat=None):
    """Three servers holding every party's honest uploads, except ``cheat(uploads) → uploads`` for
    party-1 (the corrupt party); then closed."""
    servers = replicated_servers(spec)
    for party in spec.parties:
        ups = replicated_uploads(spec, party.party_id, data[party.party_id],
                                 party_randomness(Randomness.seeded_insecure(11), spec, party.party_id))
        if cheat is not None and party.party_id == "party-1":
            ups = cheat(spec, party, data[party.party_id], ups)
        for server, up in zip(servers, ups):
            server.accept(party.party_id, up)
    return servers, [s.close() for s in servers]


def _refused(spec, servers, seeds, match):
    with pytest.raises(ClippingProofFailed, match=match) as err:
        verify_clipping(spec, servers, seeds)
    assert "party-1" in str(err.value) and "party-0" not in str(err.value) and "\n" not in str(err.value)
    for server in servers:  # every server's own gate refuses: nothing is released
        assert set(server.check_failures) == {"party-1"}
        with pytest.raises(ClippingProofFailed, match="party-1"):
            server.output()


def _with_block(block_grid: np.ndarray, forged_witness: np.ndarray | None = None):
    """A cheat: replace party-1's block (grid units) and its witness by the given arrays, shared
    like an honest party's (consistent copies)."""
    def cheat(spec, party, table, ups):
        shape = proof_shape(block_grid.shape[1], spec.frac_bits, party.clip_bound)
        wit = _forge(block_grid, shape) if forged_witness is None else forged_witness
        R = Randomness.seeded_insecure("cheat")
        xs = share(np.ascontiguousarray(block_grid, dtype=np.int64).view(U64), 3, R.child("x"), primary=1)
        ws = share(wit, 3, R.child("w"), primary=1)
        return [BlockUpload(i, u.columns, xs[i], xs[(i + 1) % 3], u.noise,
                            ProofUpload(i, ws[i], ws[(i + 1) % 3], u.proof.mask)) for i, u in enumerate(ups)]
    return cheat


def _honest_grid(spec, party, table):
    return round_to_grid(clip_rows(client_vectors(spec, party, table), party.clip_bound, spec.clip_norm),
                         spec.frac_bits)


def test_the_attack_an_unclipped_block_is_refused(job):
    """The issue's attack: party-1 uploads M·e_j (M = 2·10⁶, f grid) to read client j's other values."""
    spec, data = job
    party = spec.party("party-1")
    d = len(spec.party_column_indices(party))
    attack = np.zeros((spec.n, d), dtype=np.int64)
    attack[17, 0] = 2_000_000 << spec.frac_bits
    servers, seeds = _servers_with(spec, data, _with_block(attack))
    _refused(spec, servers, seeds, "not proven clipped")


@pytest.mark.parametrize("kind", ["entry_over_range", "norm_1.01", "forged_bits"])
def test_invalid_blocks_are_refused_naming_the_party(job, kind):
    spec, data = job
    party = spec.party("party-1")
    grid = _honest_grid(spec, party, data["party-1"])
    shape = proof_shape(grid.shape[1], spec.frac_bits, party.clip_bound)
    forged = None
    if kind == "entry_over_range":
        grid[5] = 0
        grid[5, 0] = 1 << shape.r
    elif kind == "norm_1.01":
        grid[5] = round_to_grid(np.eye(grid.shape[1])[0] * 1.01 * party.clip_bound, spec.frac_bits)
    else:  # the honest block, with the bits of another (valid) block
        forged = witness(np.roll(grid, 1, axis=0), shape)
    servers, seeds = _servers_with(spec, data, _with_block(grid, forged))
    _refused(spec, servers, seeds, "not proven clipped")


@pytest.mark.parametrize("what", ["block value", "block seed", "witness value"])
def test_inconsistent_copies_are_refused(job, what):
    """The two servers holding the same additive share get different values (or different seeds):
    the copy terms of the masked check no longer cancel, the party is named and nothing is released."""
    spec, data = job

    def cheat(spec, party, table, ups):
        # party-1's primary is index 1 % 3 = 1: share 1 is explicit, shares 0 and 2 are seeds.
        if what == "block seed":  # share 2, held by server 2 (first) and server 1 (second)
            other = Share(2, ups[1].second.shape, seed=bytes(32))
            return [ups[0], replace(ups[1], second=other), ups[2]]
        if what == "block value":  # share 1, held by servers 1 (first) and 0 (second)
            first = ups[1].first
            values = first.values().copy()
            values[3, 0] += U64(1) << U64(63)
            return [ups[0], replace(ups[1], first=Share(1, first.shape, data=values)), ups[2]]
        proof = ups[1].proof
        values = proof.first.values().copy()
        values[0, 0] += U64(1)
        return [ups[0], replace(ups[1], proof=replace(proof, first=Share(1, proof.first.shape, data=values))), ups[2]]

    servers, seeds = _servers_with(spec, data, cheat)
    _refused(spec, servers, seeds, "share copies differ")


def test_a_missing_proof_or_unrelayed_check_releases_nothing(job):
    spec, data = job
    servers, seeds = _servers_with(spec, data)
    with pytest.raises(ClippingProofFailed, match="missing"):
        servers[0].output()  # checks not decided yet: the gate refuses
    with pytest.raises(ValueError, match="every server's"):
        servers[0].check_shares([seeds[1], seeds[1], seeds[2]])  # its own seed is not in the set
    verify_clipping(spec, servers, seeds)
    assert all(server.check_failures == {} for server in servers)
    total = sum(server.output() for server in servers)
    assert total.shape == (spec.width * (spec.width + 1) // 2,)
    with pytest.raises(ValueError, match="needs a clipping proof"):
        fresh = ReplicatedServer(spec, 0)
        up = replicated_uploads(spec, "party-0", data["party-0"], Randomness.seeded_insecure(1))[0]
        fresh.accept("party-0", replace(up, proof=None))
    with pytest.raises(ValueError, match="closed"):
        servers[0].accept("party-0", up)


def test_parties_accept_a_verified_job_and_an_insecure_server_refuses_it(job):
    from ltm.errors import ProtocolError
    from ltm.party.uploader import PartyPolicy, PolicyViolation
    from ltm.server.core import ServerCore

    spec, _ = job
    policy = PartyPolicy(max_epsilon=1.0, allow_reproduction=True, min_colluding_servers=1)
    policy.check(spec, seeded=True)  # corrupt_parties = 1, verified: accepted
    with pytest.raises(PolicyViolation, match="follows the protocol"):
        policy.check(replace(spec, verified_clipping=False), seeded=True)
    with pytest.raises(ProtocolError, match="needs servers with TLS identities"):
        ServerCore("server-0").create_job(spec, caller_role="analyst")  # no signing key (--insecure)


def test_the_verdict_functions_directly():
    from ltm.verified_clipping import check_failures

    err = ClippingProofFailed({"b": "why b", "a": "why a"})
    assert str(err) == "verified clipping failed, nothing released: party 'a': why a; party 'b': why b"
    assert err.code == "FAILED_PRECONDITION" and err.exit_code == 3
    zero = [np.array([1, 2], dtype=U64), np.array([3, 4], dtype=U64), -np.array([4, 6], dtype=U64)]
    assert verdict(zero) and not verdict([zero[0], zero[1], zero[1]])
    shares = [{"p": z, "q": z} for z in zero]
    assert check_failures(["p", "q"], shares) == {}
    del shares[1]["q"]
    assert check_failures(["p", "q"], shares) == {"q": "its clipping check is missing"}
    shares[1]["q"] = zero[0]
    assert check_failures(["p", "q"], shares) == {
        "q": "its block is not proven clipped or its share copies differ (the check does not sum to 0)"}
    assert check_failures(["p"], shares[:2]) == {"p": "its clipping check is missing"}


def test_coefficient_key_binds_job_party_and_every_seed():
    base = coefficient_key("d", "p", SEEDS)
    assert len(base) == 32
    assert base != coefficient_key("e", "p", SEEDS) and base != coefficient_key("d", "q", SEEDS)
    for i in range(3):
        changed = list(SEEDS)
        changed[i] = bytes([9]) * 32
        assert coefficient_key("d", "p", changed) != base
    with pytest.raises(ValueError, match="32 bytes"):
        coefficient_key("d", "p", [b"x" * 31])



# -------------------------------------------------------------------- review fixes (F1–F6)
KEYS = [bytes([40 + j]) * 32 for j in range(3)]  # k_{j,j+1}


def _party0_uploads(spec, table, neighbour: bool):
    """party-0's uploads for its data (or a replace-one neighbour: client 17 moved), its additive
    shares 1 and 2 (block and witness: seeds) the same bytes in both worlds; share 0 is explicit."""
    party = spec.party("party-0")
    tbl = {k: v.copy() for k, v in table.items()}
    if neighbour:
        tbl[next(iter(tbl))][17] += 0.25
    grid = _honest_grid(spec, party, tbl)
    ups = replicated_uploads(spec, "party-0", table, Randomness.seeded_insecure(11))
    shape = proof_shape(grid.shape[1], spec.frac_bits, party.clip_bound)
    xs = share(np.ascontiguousarray(grid, dtype=np.int64).view(U64), 3, Randomness.seeded_insecure("x"), primary=0)
    ws = share(witness(grid, shape), 3, Randomness.seeded_insecure("w"), primary=0)
    return [BlockUpload(i, u.columns, xs[i], xs[(i + 1) % 3], u.noise,
                        ProofUpload(i, ws[i], ws[(i + 1) % 3], u.proof.mask)) for i, u in enumerate(ups)]


def _checked_servers(spec, data, party0_ups, keys, seeds=SEEDS):
    from ltm.verified_clipping import mask_key_pairs

    servers = [ReplicatedServer(spec, i, mask_keys=pair) for i, pair in enumerate(mask_key_pairs(keys))]
    for party in spec.parties:
        ups = (party0_ups if party.party_id == "party-0" else
               replicated_uploads(spec, party.party_id, data[party.party_id], Randomness.seeded_insecure(12)))
        for server, up in zip(servers, ups):
            server.accept(party.party_id, up)
    for server, seed in zip(servers, seeds):
        server.check_seed = seed  # fixed here so that the two worlds differ in the data alone
        server.close()
    return servers, [server.check_shares(list(seeds)) for server in servers]


def test_a_non_holders_view_does_not_depend_on_the_data(job, table):
    """F1: server 1 holds party-0's additive shares 1 and 2, not share 0 = x − s1 − s2.  With its own
    shares, keys and the seeds fixed, what it receives from the others is the same function of the
    data's complement in both worlds: no digest or other data-derived value, only masked κ-vectors
    that sum to minus its own (honest: 0), hidden by F(k_{2,0}, K), the key it lacks."""
    spec, data = job
    tables = party_tables(spec, table)["party-0"]
    views = []
    for neighbour, unknown in ((False, bytes([1]) * 32), (True, bytes([2]) * 32), (False, bytes([3]) * 32)):
        ups = _party0_uploads(spec, tables, neighbour)
        assert ups[1].first.seed is not None and ups[1].second.seed is not None
        _, out = _checked_servers(spec, data, ups, [KEYS[0], KEYS[1], unknown])
        views.append(out)
    for out in views:
        assert all(isinstance(shares, dict) for shares in out)  # nothing but the check shares is published
        assert verdict([out[i]["party-0"] for i in range(3)])
    own = [v[1]["party-0"] for v in views]
    assert all(np.array_equal(own[0], o) for o in own)  # its own answer: a function of its own shares
    # the others' answers change with the key server 1 lacks, for the same data (worlds 0 and 2)
    assert not np.array_equal(views[0][0]["party-0"], views[2][0]["party-0"])
    assert not np.array_equal(views[0][2]["party-0"], views[2][2]["party-0"])


def test_the_digest_attack_finds_nothing_to_test(job, table):
    """F1, the reviewer's attack: h30 published SHA-256(share 0) to server 1; now only the masked
    check shares are published, and nothing in them equals a function of the guessed share 0."""
    spec, data = job
    tables = party_tables(spec, table)["party-0"]
    ups = _party0_uploads(spec, tables, False)
    _, out = _checked_servers(spec, data, ups, KEYS)
    published = [value for shares in out for value in shares.values()]
    assert all(isinstance(v, np.ndarray) and v.shape == (CHECK_REPETITIONS,) for v in published)


def test_inconsistent_copies_fail_the_check_without_digests():
    """F1: copy consistency is inside the masked check: the two holders of one additive share given
    different values make the κ sums non-zero (and consistent copies sum to zero)."""
    from ltm.verified_clipping import mask_key_pairs

    d, f, C = 2, 10, 0.8
    shape = proof_shape(d, f, C)
    X = clip_rows(np.random.default_rng(5).normal(size=(300, d)), C, "l2")
    ups = party_uploads(X, (0, 1), width=d, frac_bits=f, plan=None, randomness=Randomness.seeded_insecure(1),
                        proof=shape)
    key, pairs = coefficient_key("d", "p", SEEDS), mask_key_pairs(KEYS)

    def run(ups):
        return [server_check(i, (u.first, u.second), u.proof, shape, key, mask_keys=pairs[i]) for i, u in
                enumerate(ups)]

    assert verdict(run(ups))
    for j in range(3):  # the second holder (server j − 1) of share j gets a changed copy
        holder = (j - 1) % 3
        for what in ("block", "witness"):
            src = ups[holder].second if what == "block" else ups[holder].proof.second
            vals = src.values().copy()
            vals[7, 0] ^= U64(1) << U64(63)
            bad = Share(src.server, src.shape, data=vals)
            up = (replace(ups[holder], second=bad) if what == "block" else
                  replace(ups[holder], proof=replace(ups[holder].proof, second=bad)))
            assert not verdict(run([up if i == holder else u for i, u in enumerate(ups)])), (j, what)


def test_check_shares_and_accept_checks_answer_once_per_job(job):
    """F2: a second check_shares with other seeds is refused (identical: the same bytes); a later
    relay never reopens a failed gate, and a relay must carry the server's own share."""
    spec, data = job
    attack = np.zeros((spec.n, len(spec.party_column_indices(spec.party("party-1")))), dtype=np.int64)
    attack[17, 0] = 2_000_000 << spec.frac_bits
    servers, seeds = _servers_with(spec, data, _with_block(attack))
    first = servers[1].check_shares(seeds)
    again = servers[1].check_shares(list(seeds))
    assert all(np.array_equal(first[p], again[p]) for p in first)
    other = [seeds[0], seeds[1], bytes(32)]
    with pytest.raises(ValueError, match="once per job"):
        servers[1].check_shares(other)
    _refused(spec, servers, seeds, "not proven clipped")
    forged = [{p: np.zeros(CHECK_REPETITIONS, dtype=U64) for p in first} for _ in range(3)]
    for server in servers:
        with pytest.raises(ValueError, match="once per job"):
            server.accept_checks(forged)
        assert set(server.check_failures) == {"party-1"}
        with pytest.raises(ClippingProofFailed, match="party-1"):
            server.output()
    fresh, seeds = _servers_with(spec, data)
    shares = [s.check_shares(seeds) for s in fresh]
    with pytest.raises(ValueError, match="own"):
        fresh[0].accept_checks(forged)  # its own share is not in the relay
    assert fresh[0].check_failures is None
    assert fresh[0].accept_checks(shares) == {} == fresh[0].accept_checks(shares)


def test_an_equivocating_relay_is_hidden_by_the_servers_mask(job, table):
    """F2 (the reviewer's e2): the analyst gives server 1 other seeds than servers 0 and 2.  The sum of
    the three answers is then everything server 0 can compute from its own shares, keys and a guess
    of the data, plus F(k_{1,2}, K′) − F(k_{1,2}, K): the key only servers 1 and 2 hold hides it."""
    from ltm.verified_clipping import mask_key_pairs, pair_mask

    spec, data = job
    tables = party_tables(spec, table)["party-0"]
    ups = _party0_uploads(spec, tables, False)
    servers, _ = _checked_servers(spec, data, ups, KEYS, seeds=SEEDS)  # (the honest answers, unused)
    evil = [SEEDS[0], SEEDS[1], bytes([9]) * 32]
    server1 = ReplicatedServer(spec, 1, mask_keys=mask_key_pairs(KEYS)[1])
    for party in spec.parties:
        server1.accept(party.party_id, servers[1].uploads[party.party_id])
    server1.check_seed = SEEDS[1]
    server1.close()
    obs = (servers[0].check_shares(SEEDS)["party-0"] + server1.check_shares(evil)["party-0"]
           + servers[2].check_shares(SEEDS)["party-0"])
    party = spec.party("party-0")
    shape = proof_shape(len(ups[0].columns), spec.frac_bits, party.clip_bound)
    K, K1 = (coefficient_key(spec.digest, "party-0", s) for s in (SEEDS, evil))
    zero = Share(0, (CHECK_REPETITIONS,), data=np.zeros(CHECK_REPETITIONS, dtype=U64))
    bare = [server_check(i, (u.first, u.second), replace(u.proof, mask=zero), shape, K1 if i == 1 else K)
            for i, u in enumerate(ups)]  # a guess of the data gives these to server 0 (h30: the whole sum)
    party_masks = sum(u.proof.mask.values() for u in ups)  # a zero-sharing: 0
    known = (pair_mask(KEYS[0], K) - pair_mask(KEYS[2], K) - pair_mask(KEYS[0], K1) + pair_mask(KEYS[2], K))
    hidden = pair_mask(KEYS[1], K1) - pair_mask(KEYS[1], K)
    np.testing.assert_array_equal(obs, bare[0] + bare[1] + bare[2] + party_masks + known + hidden)
    assert hidden.any() and not np.array_equal(obs, bare[0] + bare[1] + bare[2] + known)


def test_check_seeds_are_unpredictable_in_seeded_runs(job):
    """F3 (the reviewer's e5): a cheater who predicts the coefficient key cancels its constraints with
    its own mask.  Seeds now come from the system CSPRNG whatever randomness a server is given."""
    spec, data = job
    root = Randomness.seeded_insecure(20)
    a, b = (ReplicatedServer(spec, 0, root.child("server", 0), mask_keys=(KEYS[0], KEYS[2])) for _ in range(2))
    sa, sb = a.close(), b.close()
    assert len(sa) == 32 and sa != sb and sa != root.child("server", 0).child("check-seed", 0).bytes(32)
    predicted = [root.child("server", i).child("check-seed", i).bytes(32) for i in range(3)]
    party = spec.party("party-1")
    d = len(spec.party_column_indices(party))
    shape = proof_shape(d, spec.frac_bits, party.clip_bound)
    attack = np.zeros((spec.n, d), dtype=np.int64)
    attack[17, 0] = 2_000_000 << spec.frac_bits

    def cheat(spec, party, table, ups):
        R = Randomness.seeded_insecure("cheat")
        xs = share(attack.view(U64), 3, R.child("x"), mode="full")
        ws = share(np.zeros((spec.n, shape.witness_width), U64), 3, R.child("w"), mode="full")
        key = coefficient_key(spec.digest, "party-1", predicted)
        S = sum(server_check(i, (xs[i], xs[(i + 1) % 3]), ProofUpload(i, ws[i], ws[(i + 1) % 3], Share(
            i, (CHECK_REPETITIONS,), data=np.zeros(CHECK_REPETITIONS, U64))), shape, key) for i in range(3))
        masks = [-S, np.zeros_like(S), np.zeros_like(S)]  # not a zero-sharing: cancels the predicted sums
        return [BlockUpload(i, u.columns, xs[i], xs[(i + 1) % 3], u.noise,
                            ProofUpload(i, ws[i], ws[(i + 1) % 3], Share(i, S.shape, data=masks[i])))
                for i, u in enumerate(ups)]

    from ltm.verified_clipping import mask_key_pairs

    servers = [ReplicatedServer(spec, i, root.child("server", i), mask_keys=p)
               for i, p in enumerate(mask_key_pairs(KEYS))]
    for p in spec.parties:
        ups = replicated_uploads(spec, p.party_id, data[p.party_id], party_randomness(Randomness.seeded_insecure(11),
                                                                                        spec, p.party_id))
        if p.party_id == "party-1":
            ups = cheat(spec, p, data[p.party_id], ups)
        for server, up in zip(servers, ups):
            server.accept(p.party_id, up)
    seeds = [s.close() for s in servers]
    assert seeds != predicted
    _refused(spec, servers, seeds, "not proven clipped")


def test_the_soundness_statement_with_a_mask_is_written_down():
    """F4: the proof covers any mask sum m fixed before the coefficients (pass iff S_t = −m_t)."""
    from pathlib import Path

    import ltm.verified_clipping as vc

    doc = Path(__file__).resolve().parents[3].joinpath("docs", "architecture.md").read_text()
    for text in (vc.__doc__, doc):
        assert "S_t = −m_t" in text and "fixed before" in text


def test_the_bound_is_the_exact_floor_of_r_squared():
    """F5: B = ⌊R²⌋ exactly; h30's ⌈R²(1 + 2^-45)⌉ admitted ‖x̂‖² = 24 > R² = 23.68 (d = 3, f = 2, C = 1)."""
    from fractions import Fraction

    from mpmath import floor as mfloor
    from mpmath import mp, mpf
    from mpmath import sqrt as msqrt

    shape = proof_shape(3, 2, 1.0)
    assert shape.bound == 23
    with pytest.raises(ValueError, match="not clipped"):
        witness(np.array([[4, 2, 2]]), shape)  # 24 > R²
    mp.prec = 400
    rng = np.random.default_rng(30)
    for _ in range(300):
        d, f, C = int(rng.integers(1, 40)), int(rng.integers(0, 26)), float(rng.uniform(0.01, 4))
        if rng.random() < 0.3:
            C = float(rng.integers(1, 5)) / 2  # exact binary C: R² lands on or near integers
        try:
            B = proof_shape(d, f, C).bound
        except ValueError:
            continue
        R = mpf(Fraction(C).numerator) / Fraction(C).denominator * 2**f + msqrt(d) / 2
        assert B == int(mfloor(R * R)), (d, f, C)


def test_a_badly_shaped_proof_is_refused_on_accept_naming_the_party(job):
    """F6: witness shares must be n × T_b and the mask (κ,), checked when the upload arrives."""
    spec, data = job
    up = replicated_uploads(spec, "party-2", data["party-2"], Randomness.seeded_insecure(1))[0]
    w = up.proof.first
    short = Share(0, (spec.n, w.shape[1] - 1), data=np.zeros((spec.n, w.shape[1] - 1), dtype=U64))
    with pytest.raises(ValueError, match="party 'party-2': witness shares must be"):
        ReplicatedServer(spec, 0).accept("party-2", replace(up, proof=replace(up.proof, first=short)))
    mask = Share(0, (3,), data=np.zeros(3, dtype=U64))
    with pytest.raises(ValueError, match="party 'party-2': the check mask must be"):
        ReplicatedServer(spec, 0).accept("party-2", replace(up, proof=replace(up.proof, mask=mask)))


def test_the_servers_zero_sharing_sums_to_zero_and_is_fresh_per_key():
    from ltm.verified_clipping import mask_key_pairs, pair_mask, server_mask

    pairs = mask_key_pairs(KEYS)
    assert pairs == [(KEYS[0], KEYS[2]), (KEYS[1], KEYS[0]), (KEYS[2], KEYS[1])]
    K, K1 = coefficient_key("d", "p", SEEDS), coefficient_key("d", "q", SEEDS)
    for key in (K, K1):
        masks = [server_mask(p, key) for p in pairs]
        assert all(m.shape == (CHECK_REPETITIONS,) and m.dtype == U64 and m.any() for m in masks)
        assert not (masks[0] + masks[1] + masks[2]).any()
    assert not np.array_equal(server_mask(pairs[0], K), server_mask(pairs[0], K1))
    assert not np.array_equal(pair_mask(KEYS[0], K), pair_mask(KEYS[1], K))
    assert pair_mask(KEYS[0], K, 3).shape == (3,)
    with pytest.raises(ValueError, match="32 bytes"):
        pair_mask(b"k" * 31, K)
    with pytest.raises(ValueError, match="3 pairwise mask keys"):
        mask_key_pairs(KEYS[:2])
    with pytest.raises(ValueError, match="3 pairwise mask keys"):
        mask_key_pairs([KEYS[0], KEYS[1], b"x"])


def test_check_shares_needs_the_pairwise_mask_keys(job):
    spec, data = job
    servers, seeds = _servers_with(spec, data)
    bare = ReplicatedServer(spec, 0)
    for party in spec.parties:
        bare.accept(party.party_id, servers[0].uploads[party.party_id])
    seeds = [bare.close(), seeds[1], seeds[2]]
    with pytest.raises(ValueError, match="no pairwise mask keys"):
        bare.check_shares(seeds)
    with pytest.raises(ValueError, match="compute this server's check shares"):
        bare.accept_checks([{}, {}, {}])


def test_the_relayed_statements_round_trip_and_bind_job_server_and_seed_set():
    from ltm.verified_clipping import (
        output_statement,
        read_mask_public,
        read_output_statement,
        read_seed_statement,
        seed_statement,
        statement_seeds,
    )

    job, seeds = "ab" * 32, [bytes([i]) * 32 for i in range(3)]
    pub = bytes([7]) * 32
    payload = seed_statement(job, 1, seeds[1], pub)
    assert read_seed_statement(payload, job, 1) == seeds[1] and read_mask_public(payload, job, 1) == pub
    assert payload == seed_statement(job, 1, seeds[1], pub)  # canonical: the same bytes to sign
    for bad_job, bad_server in ((job[:-1] + "c", 1), (job, 0), (job, 2)):
        with pytest.raises(ValueError, match="another job or server"):
            read_seed_statement(payload, bad_job, bad_server)
    with pytest.raises(ValueError, match="32 bytes"):
        read_seed_statement(seed_statement(job, 1, b"\1" * 31, pub), job, 1)
    with pytest.raises(ValueError, match="mask public key is 32 bytes"):
        read_mask_public(seed_statement(job, 1, seeds[1], pub[:31]), job, 1)
    with pytest.raises(ValueError, match="not JSON"):
        read_seed_statement(b"\xff", job, 1)
    shares = {"party-0": np.array([0, 1, 2**64 - 1], dtype=U64), "party-1": np.arange(3, dtype=U64)}
    out = output_statement(job, 2, seeds, shares)
    assert b"digest" not in out.replace(b'"job_digest"', b"")  # no copy digests on the wire (F1)
    with pytest.raises(ValueError, match="not a ltm.check-seed.v1"):
        read_seed_statement(out, job, 2)  # an output is not a seed statement
    assert statement_seeds(out, job, 2) == seeds
    got_shares = read_output_statement(out, job, 2, seeds)
    assert set(got_shares) == set(shares)
    for p in shares:
        assert got_shares[p].dtype == U64
        np.testing.assert_array_equal(got_shares[p], shares[p])
    with pytest.raises(ValueError, match="another seed set"):
        read_output_statement(out, job, 2, [seeds[0], seeds[2], seeds[1]])
    with pytest.raises(ValueError, match="another job or server"):
        read_output_statement(out, job, 1, seeds)
    broken = out.replace(b'"shares":{', b'"shares":{"x":["y"],')
    with pytest.raises(ValueError, match="malformed"):
        read_output_statement(broken, job, 2, seeds)
    with pytest.raises(ValueError, match="no seed set"):
        statement_seeds(out.replace(b'"seeds"', b'"seedz"'), job, 2)


def test_pairwise_mask_keys_from_x25519_agree_between_neighbours_and_mask_to_zero():
    """Each pair of servers derives the same k_{j,j+1} from its own private key and the other's
    public key; the three servers' masks sum to 0; a fourth key pair (an analyst that swapped a
    public key) yields other keys; a set without this server's own public key is refused."""
    from ltm.verified_clipping import mask_private_key, mask_public_key, pairwise_mask_keys, server_mask

    digest = "ab" * 32
    privs = [mask_private_key() for _ in range(3)]
    pubs = [mask_public_key(k) for k in privs]
    keys = [pairwise_mask_keys(i, privs[i], pubs, digest) for i in range(3)]
    for i in range(3):
        assert keys[i][0] == keys[(i + 1) % 3][1]  # k_{i,i+1} at both its holders
        assert keys[i][0] not in keys[(i + 2) % 3]  # and not at the third server
    total = sum((server_mask(keys[i], b"K" * 32) for i in range(3)), start=np.zeros(40, dtype=U64))
    assert not total.any()
    assert pairwise_mask_keys(0, privs[0], pubs, "cd" * 32) != keys[0]  # bound to the job
    swapped = [pubs[0], mask_public_key(mask_private_key()), pubs[2]]
    assert pairwise_mask_keys(0, privs[0], swapped, digest)[0] != keys[0][0]
    with pytest.raises(ValueError, match="this one's included"):
        pairwise_mask_keys(0, privs[0], [pubs[1], pubs[1], pubs[2]], digest)

"""The replicated degree-2 release of the columns partition (ltm/replicated.py, issue #21).

Exactness (bit for bit against the clear triangle), what one server sees (uniform, whatever the
data), what each output share tells given the released sum (nothing: uniform), and what two
colluding servers learn (everything: the stated trust assumption is real).

Statistical tests: chi-square tests on byte histograms with a rejection threshold of p < 1e-9 per
test, so the suite's flake rate is below 1e-6 (at most a few hundred such tests would have to fail
by chance).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ltm.dp.grid import round_to_grid
from ltm.dp.sensitivity import rounded_gram_l2
from ltm.randomness import Randomness
from ltm.replicated import (
    REPLICATED_SERVERS,
    clear_triangle,
    entry_bound,
    honest_majority,
    party_uploads,
    reconstruct_triangle,
    replicated_frac_bits,
    replicated_noise_plan,
    server_output,
    share_block,
    triangle_to_gram,
)
from ltm.ring import HEADROOM_LIMIT

P_REJECT = 1e-9
BLOCKS = ((0, 1), (2,), (3, 4))


def _release(Z, frac_bits, randomness, *, plan=None, mode="seed"):
    n, d = Z.shape
    ups = [party_uploads(Z[:, list(b)], b, width=d, frac_bits=frac_bits, plan=plan,
                         randomness=randomness.child("party", p), mode=mode, primary=p % 3)
           for p, b in enumerate(BLOCKS)]
    outs = [server_output(s, [u[s] for u in ups], n, d) for s in range(REPLICATED_SERVERS)]
    return ups, outs


def _data(seed, n=400, d=5):
    Z = Randomness.seeded_insecure(seed).stream().normal((n, d), scale=0.4)
    return Z / np.maximum(1.0, np.linalg.norm(Z, axis=1, keepdims=True))


@pytest.mark.parametrize("mode", ["seed", "full"])
def test_release_equals_clear_triangle_bit_for_bit(mode):
    Z = _data(1)
    f = 18
    _, outs = _release(Z, f, Randomness.seeded_insecure(2), mode=mode)
    total = outs[0] + outs[1] + outs[2]
    np.testing.assert_array_equal(total, clear_triangle(Z, f))
    tri, _ = reconstruct_triangle(outs, f)
    Zr = round_to_grid(Z, f) / 2.0**f
    np.testing.assert_allclose(triangle_to_gram(tri, 5), Zr.T @ Zr, rtol=0, atol=1e-9)
    # and the rounded data's Gram is the data's Gram to the grid's precision
    np.testing.assert_allclose(triangle_to_gram(tri, 5), Z.T @ Z, rtol=0, atol=400 * 2.0**-f)


@pytest.mark.parametrize("mode", ["seed", "full"])
def test_chunked_output_shares_do_not_depend_on_the_chunk(mode, monkeypatch):
    """Servers stream the clients in chunks (seeds expanded per chunk, at an offset): with chunks
    of 64 and of 7 clients (400 is a multiple of neither) each server's share is the
    same bytes as in one chunk, and the sum is the clear triangle."""
    import ltm.replicated as rep

    Z = _data(11)
    f = 18
    monkeypatch.setattr(rep, "OUTPUT_CHUNK_CLIENTS", 1 << 20)
    _, whole = _release(Z, f, Randomness.seeded_insecure(12), mode=mode)
    for chunk in (64, 7):
        monkeypatch.setattr(rep, "OUTPUT_CHUNK_CLIENTS", chunk)
        _, outs = _release(Z, f, Randomness.seeded_insecure(12), mode=mode)
        for a, b in zip(outs, whole):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(outs[0] + outs[1] + outs[2], clear_triangle(Z, f))


def test_negative_and_extreme_values_decode():
    Z = np.array([[-1.0, 0.0, 0.0, 0.0, 0.0], [0.0, -0.5, 0.5, -0.5, 0.5]] * 50)
    _, outs = _release(Z, 24, Randomness.seeded_insecure(3))
    tri, _ = reconstruct_triangle(outs, 24)
    np.testing.assert_array_equal(triangle_to_gram(tri, 5), Z.T @ Z)


def test_blocks_must_tile_the_vector():
    Z = _data(4)
    ups = [party_uploads(Z[:, [0, 1]], (0, 1), width=5, frac_bits=16, plan=None,
                         randomness=Randomness.seeded_insecure(5))]
    with pytest.raises(ValueError, match="exactly once"):
        server_output(0, [u[0] for u in ups], Z.shape[0], 5)
    with pytest.raises(ValueError, match="server 1"):
        server_output(0, [ups[0][1]], Z.shape[0], 5)


def _chi2_uniform(words: np.ndarray, shift: int) -> float:
    """p-value of a chi-square test that byte ``shift/8`` of the words is uniform on 256 values."""
    byte = ((words.astype(np.uint64) >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.int64)
    return float(stats.chisquare(np.bincount(byte, minlength=256)).pvalue)


def _server_view(Z, server, seed):
    """Everything one server receives about the data: its two additive shares of every block."""
    views = []
    for p, b in enumerate(BLOCKS):
        pair = share_block(Z[:, list(b)], 16, Randomness.seeded_insecure(seed).child(p), primary=p % 3)[server]
        views += [pair[0].values().ravel(), pair[1].values().ravel()]
    return np.concatenate(views)


@pytest.mark.parametrize("server", range(REPLICATED_SERVERS))
def test_one_server_view_is_uniform_whatever_the_data(server):
    n = 4000
    zeros = np.zeros((n, 5))
    extreme = np.tile([[0.9, -0.2, 0.2, 0.2, -0.2]], (n, 1))
    for Z, seed in ((zeros, 10), (extreme, 11), (_data(12, n=n), 12)):
        view = _server_view(Z, server, seed)
        for shift in (0, 24, 56):  # low, middle and top byte: where small or signed data would show
            assert _chi2_uniform(view, shift) > P_REJECT, (server, shift)
    # independent of the data: the views of two datasets are indistinguishable (homogeneity test)
    a = (_server_view(zeros, server, 20) >> np.uint64(56)).astype(np.int64)
    b = (_server_view(extreme, server, 21) >> np.uint64(56)).astype(np.int64)
    table = np.vstack([np.bincount(a, minlength=256), np.bincount(b, minlength=256)])
    assert stats.chi2_contingency(table)[1] > P_REJECT


def test_view_test_can_fail():
    """The uniformity check rejects the grid-encoded data itself (what a single share must hide)."""
    raw = round_to_grid(np.tile([[0.9, -0.2, 0.2, 0.2, -0.2]], (4000, 1)), 16).view(np.uint64).ravel()
    assert _chi2_uniform(raw, 56) < P_REJECT


def test_output_shares_uniform_given_the_released_sum():
    """Fixed data (so a fixed released sum): over fresh randomness each server's output share, and
    any two of them jointly, are uniform."""
    Z = _data(30, n=1, d=5)  # one client: where unmasked product shares are most visibly non-uniform
    outs = np.stack([np.stack(_release(Z, 16, Randomness.seeded_insecure(1000 + t))[1]) for t in range(1500)])
    assert np.all(outs.sum(axis=1, dtype=np.uint64) == clear_triangle(Z, 16))  # the sum is fixed
    for s in range(3):
        for shift in (0, 56):
            assert _chi2_uniform(outs[:, s, :].ravel(), shift) > P_REJECT, (s, shift)
    # jointly: the low nibbles of servers 0 and 1 in the same entry are uniform on 256 pairs
    pair = ((outs[:, 0, :] & np.uint64(15)) << np.uint64(4)) | (outs[:, 1, :] & np.uint64(15))
    assert _chi2_uniform(pair.ravel(), 0) > P_REJECT


def test_unmasked_product_shares_leak():
    """Why the parties' masks are needed (and that the uniformity check can fail): for one client a
    server's diagonal product share a_i² + 2·a_i·a_{i+1} is never 2 mod 4, whatever the data."""
    Z = _data(31, n=1, d=5)
    diag = np.flatnonzero(np.equal(*np.triu_indices(5)))
    unmasked = []
    for t in range(1500):
        ups, outs = _release(Z, 16, Randomness.seeded_insecure(3000 + t))
        unmasked.append(outs[0][diag] - sum((u[0].noise.values()[diag] for u in ups), np.uint64(0)))
    low = np.concatenate(unmasked)
    assert not np.any((low & np.uint64(3)) == np.uint64(2))
    assert _chi2_uniform(low, 0) < P_REJECT


def test_two_colluding_servers_reconstruct_every_party_data():
    """The honest-majority assumption is real: servers 0 and 1 hold all three additive shares."""
    Z = _data(40)
    ups, _ = _release(Z, 16, Randomness.seeded_insecure(41))
    for p, b in enumerate(BLOCKS):
        x0, x1 = ups[p][0].first.values(), ups[p][0].second.values()
        x2 = ups[p][1].second.values()  # server 1 holds (x1, x2)
        recovered = (x0 + x1 + x2).view(np.int64)
        np.testing.assert_array_equal(recovered, round_to_grid(Z[:, list(b)], 16))
        # one server alone holds two shares whose sum is not the data
        assert not np.array_equal((x0 + x1).view(np.int64), round_to_grid(Z[:, list(b)], 16))


def test_noise_is_added_once_per_party_per_entry():
    Z = _data(50, n=200)
    f = 18
    plan = replicated_noise_plan(epsilon=1.0, delta=1e-6, clip_bound=1.0, d=5, parties=3, corrupt_parties=1,
                                 frac_bits=f)
    diffs = []
    for t in range(60):
        _, outs = _release(Z, f, Randomness.seeded_insecure(500 + t), plan=plan)
        diffs.append(((outs[0] + outs[1] + outs[2]) - clear_triangle(Z, f)).view(np.int64) / 2.0 ** (2 * f))
    diffs = np.concatenate(diffs)
    # 3 parties each add sd σ_c: the empirical variance of 900 draws is within ±40% except w.p. < 1e-9
    ratio = diffs.var() / (3 * plan.sigma_client**2)
    assert 0.6 < ratio < 1.4, ratio


def test_sensitivity_bound_is_attained_and_not_exceeded():
    rng = Randomness.seeded_insecure(60).stream()
    d = 4
    i, j = np.triu_indices(d)
    worst = 0.0
    for _ in range(200):
        z, w = rng.normal((2, d))
        z, w = z / np.linalg.norm(z), w / np.linalg.norm(w)
        worst = max(worst, float(np.linalg.norm(np.outer(z, z)[i, j] - np.outer(w, w)[i, j])))
    e1, e2 = np.eye(d)[0], np.eye(d)[1]
    attained = float(np.linalg.norm(np.outer(e1, e1)[i, j] - np.outer(e2, e2)[i, j]))
    assert worst <= math.sqrt(2) + 1e-12
    assert attained == pytest.approx(math.sqrt(2))
    assert rounded_gram_l2(1.0, d, 60) == pytest.approx(math.sqrt(2))


@pytest.mark.parametrize("n", [10**4, 10**6, 1 << 30])
def test_fraction_bits_fit_one_limb(n):
    f = replicated_frac_bits(n=n, clip_bound=1.0, d=10, epsilon=0.1, delta=1e-6, parties=3, corrupt_parties=1)
    plan = replicated_noise_plan(epsilon=0.1, delta=1e-6, clip_bound=1.0, d=10, parties=3, corrupt_parties=1,
                                 frac_bits=f)
    assert entry_bound(n, 1.0, 10, f, plan, 3) * 2.0 ** (2 * f) <= HEADROOM_LIMIT
    assert 15 <= f <= 24


def test_honest_majority():
    assert honest_majority(3, 1) and not honest_majority(3, 2)
    assert honest_majority(5, 2) and not honest_majority(4, 2)

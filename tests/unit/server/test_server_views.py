"""A coalition of up to k−1 servers sees uniform noise; all k together reconstruct (docs/architecture.md §3).

What is tested.  Real party batches (``ltm.party.randomizer.make_batches``: clip → noisy copies →
fixed point → k shares, primary rotating over servers) on data with the strongest structure we
can give it — every entry zero, or every row equal with NO noise at all (so the secret is one
repeated constant: any leak through the shares would show).  A server's *view* is the
concatenation, over every batch of every party, of the uint64 share it stores (a helper seed is
expanded to the array the server computes with).  For every single server and every coalition
of k−1 servers we test that what they hold is uniform and independent of the data:

* ``bytes``:     χ² of the 256 byte values of the view's words (8 bytes per word);
* ``bits``:      each of the 64 bit positions is 1 half of the time: Σ_b (2·ones_b − N)²/N ~ χ²_64;
* ``adjacent``:  w[2i+1] − w[2i] mod 2^64 (non-overlapping pairs, so i.i.d. under uniformity) is
                 uniform by bytes: catches a mask reused across entries (equal secrets → equal shares);
* ``sum``:       for a coalition, Σ of its shares mod 2^64 (the only linear combination that the
                 additive scheme could leak through) is uniform by bytes and by bits;
* ``pairs``:     for every two servers in a coalition, the joint distribution of the same nibble
                 (4-bit position j = 0..15) of their two words for the same entry is uniform on
                 16×16 cells: catches correlated masks (e.g. one mask reused for two servers).

In ``"full"`` mode the shares are information-theoretically uniform; in ``"seed"`` mode the helper
shares are AES-256-CTR expansions of 32-byte seeds and the primary share is x − Σ expansions, so
uniformity is computational (AES as a PRG) — statistically indistinguishable is what we can test.
The helper seeds themselves are tested too (uniform bytes, all distinct).  All k shares sum to the
encoded secret exactly, and the sum of all k is (as it must be) detected as NON-uniform.

Negative controls: the same view extraction and the same statistics applied to deliberately broken
sharings (swapped in for ``ltm.party.randomizer.share``) must FAIL — no mask at all, one mask word
reused for every entry, one mask reused for two servers, 63-bit masks — so these tests can fail.

Flake rate.  The view tests use the production CSPRNG (``Randomness.system()``: fresh entropy every
run), so they are genuine probabilistic tests.  The file has ``STAT_CASES`` statistical test cases;
each gets a false-failure budget of ``P_BUDGET / STAT_CASES`` and splits it over its p-values by
Bonferroni (reject a case only if some p-value < budget / #p-values).  For correct sharing every
p-value is (up to the χ² approximation, excellent here: ≥ 256 expected counts in every cell, ≥ 2048
in the view tests) uniform on [0, 1], so the whole file fails spuriously with probability
≤ P_BUDGET = 1e-6.  (The negative controls and the exactness test are not statistical: the former
are rejected with p-values below 1e-30, the latter are seeded arithmetic.)
"""
from __future__ import annotations

import itertools
import unittest.mock

import numpy as np
import pytest
import scipy.stats

import ltm.party.randomizer as randomizer
from ltm.dp.calibration import NoisePlan
from ltm.jobspec import ColumnSpec, JobSpec, PartySpec, PrivacySpec, ServerSpec, SketchSpec, resolve_defaults
from ltm.party.randomizer import clip_rows, make_batches, noisy_copies, party_randomness, plan_batches
from ltm.randomness import Randomness
from ltm.ring import encode
from ltm.sharing import SEED_BYTES, Share, share

N_CLIENTS, WIDTH, PIECES, M, PARTIES, BATCH = 8192, 8, 2, 16, 4, 512
#: 2^17 words per view: 2^20 bytes (4096 per byte value), 2^21 nibble pairs (8192 per cell),
#: 2^16 adjacent differences (2048 per byte value).
VIEW_WORDS = N_CLIENTS * WIDTH * PIECES
P_BUDGET = 1e-6
#: The statistical cases below: 2 modes × 2 values of k × 2 data sets, plus 2 seed cases.
STAT_CASES = 2 * 2 * 2 + 2
CASE_BUDGET = P_BUDGET / STAT_CASES
ROW_VALUE = 0.25  # every entry of every row (ℓ2 norm 0.25·√8 ≈ 0.71 < C = 1: not clipped)


# ----------------------------------------------------------------------------------- jobs and views
def view_job(k: int, share_mode: str, n: int = N_CLIENTS) -> JobSpec:
    """A rows job with public, identity column transforms (center 0, scale 1), so the structure of
    the data reaches the randomizer unchanged (``build_job`` would centre it away)."""
    edges = np.linspace(0, n, PARTIES + 1).astype(int)
    spec = JobSpec(
        job_id=f"views-{k}-{share_mode}", partition="rows", n=n,
        columns=tuple(ColumnSpec(f"x{j}") for j in range(WIDTH)),
        parties=tuple(PartySpec(f"party-{i}", int(a), int(b), (), 1.0)
                      for i, (a, b) in enumerate(zip(edges[:-1], edges[1:]))),
        clip_bound=1.0, frac_bits=0, sketch=SketchSpec("sparse", M, PIECES, "5a" * 32), privacy=PrivacySpec(),
        servers=tuple(ServerSpec(f"server-{i}") for i in range(k)), share_mode=share_mode)
    return resolve_defaults(spec)


def tables(spec: JobSpec, data: str) -> dict[str, dict[str, np.ndarray]]:
    value = 0.0 if data == "zeros" else ROW_VALUE
    return {p.party_id: {f"x{j}": np.full(p.size, value) for j in range(WIDTH)} for p in spec.parties}


#: ``collect(plan=NOISELESS)``: the job's plan with the noise draws replaced by zeros, so the shared
#: secret is exactly the (constant) data on the grid.  (No real plan has zero noise: the sampler
#: refuses σ = 0, so the test swaps the draw itself, for this one collection only.)
NOISELESS = "noiseless"


def noiseless(spec: JobSpec) -> str:
    return NOISELESS


def collect(spec: JobSpec, data: str, randomness: Randomness, *, plan: NoisePlan | None = None,
            batch_clients: int = BATCH):
    """Every server's view (uint64, one word per shared entry, aligned across servers) and every batch."""
    if plan == NOISELESS:
        with unittest.mock.patch.object(randomizer, "sample_noise",
                                        lambda stream, plan, shape, **kw: np.zeros(shape, np.int64)):
            return collect(spec, data, randomness, batch_clients=batch_clients)
    views: list[list[np.ndarray]] = [[] for _ in range(spec.k)]
    batches = []
    for party in spec.parties:
        for per_server in make_batches(spec, party.party_id, tables(spec, data)[party.party_id],
                                       party_randomness(randomness, spec, party.party_id), plan=plan,
                                       batch_clients=batch_clients):
            assert [b.server for b in per_server] == list(range(spec.k))
            batches.append(per_server)
            for b in per_server:
                views[b.server].append(b.share.values().ravel())
    return [np.concatenate(v) for v in views], batches


# ----------------------------------------------------------------------------------- statistics
def _chi2_uniform(values: np.ndarray, cells: int) -> float:
    counts = np.bincount(values.ravel(), minlength=cells)
    return float(scipy.stats.chisquare(counts).pvalue)


def p_bytes(words: np.ndarray) -> float:
    return _chi2_uniform(np.ascontiguousarray(words, dtype="<u8").view(np.uint8), 256)


def p_bits(words: np.ndarray) -> float:
    """64 bit positions, each Binomial(N, ½) and independent for uniform words: Σ z_b² ~ χ²_64."""
    n = words.size
    ones = np.array([np.count_nonzero((words >> np.uint64(b)) & np.uint64(1)) for b in range(64)], dtype=float)
    stat = float(np.sum((2.0 * ones - n) ** 2) / n)
    return float(scipy.stats.chi2.sf(stat, 64))


def p_adjacent(words: np.ndarray) -> float:
    even = words[: words.size // 2 * 2]
    return p_bytes(even[1::2] - even[0::2])


def p_pairs(a: np.ndarray, b: np.ndarray) -> float:
    """Joint uniformity of (nibble j of a_i, nibble j of b_i) over j = 0..15 and all entries i."""
    na = np.stack([(a >> np.uint64(4 * j)) & np.uint64(15) for j in range(16)])
    nb = np.stack([(b >> np.uint64(4 * j)) & np.uint64(15) for j in range(16)])
    return _chi2_uniform((na * np.uint64(16) + nb).astype(np.int64), 256)


def coalition_sum(views: list[np.ndarray], members) -> np.ndarray:
    total = np.zeros_like(views[0])
    for i in members:
        total += views[i]
    return total


def view_pvalues(views: list[np.ndarray]) -> dict[str, float]:
    """Every p-value of the single-server and (k−1)-coalition tests, by name."""
    k = len(views)
    out: dict[str, float] = {}
    for i, v in enumerate(views):
        out[f"server{i}.bytes"] = p_bytes(v)
        out[f"server{i}.bits"] = p_bits(v)
        out[f"server{i}.adjacent"] = p_adjacent(v)
    if k > 2:  # for k = 2 a coalition of k − 1 servers is a single server
        for members in itertools.combinations(range(k), k - 1):
            name = "coalition" + "".join(map(str, members))
            total = coalition_sum(views, members)
            out[f"{name}.sum.bytes"] = p_bytes(total)
            out[f"{name}.sum.bits"] = p_bits(total)
            for i, j in itertools.combinations(members, 2):
                out[f"{name}.pairs{i}{j}"] = p_pairs(views[i], views[j])
    return out


def rejected(pvalues: dict[str, float], budget: float = CASE_BUDGET) -> dict[str, float]:
    """The p-values below the case's Bonferroni threshold (empty: the case passes)."""
    threshold = budget / len(pvalues)
    return {name: p for name, p in pvalues.items() if p < threshold}


# ----------------------------------------------------------------------------------- the tests
CASES = [(mode, k, data) for mode in ("seed", "full") for k in (2, 3) for data in ("zeros", "constant")]


@pytest.mark.parametrize("share_mode, k, data", CASES)
def test_views_of_up_to_k_minus_1_servers_are_uniform_and_k_reconstruct(share_mode, k, data):
    """``zeros``: all-zero rows with the job's real noise (the default plan).  ``constant``: every
    entry 0.25 and NO noise, so the secret is one value repeated 2^17 times."""
    spec = view_job(k, share_mode)
    plan = None if data == "zeros" else noiseless(spec)
    views, batches = collect(spec, data, Randomness.system(), plan=plan)
    assert all(v.size == VIEW_WORDS for v in views)

    pvalues = view_pvalues(views)
    assert len(pvalues) == (3 * k if k == 2 else 3 * k + k * (2 + (k - 1) * (k - 2) // 2))
    assert not rejected(pvalues), f"non-uniform view(s): {rejected(pvalues)} (all: {pvalues})"

    if share_mode == "seed":  # the primary (explicit) share rotates, so every server is a helper too
        primaries = {next(b.server for b in per if b.share.seed is None) for per in batches}
        assert primaries == set(range(k))

    # all k together: the sum is the encoded secret, which is (necessarily) far from uniform
    total = coalition_sum(views, range(k))
    if data == "constant":
        np.testing.assert_array_equal(total, encode(np.full(VIEW_WORDS, ROW_VALUE), spec.frac_bits))
    # (by bytes: the per-bit test alone cannot see symmetric noise — a negative value sets all high
    # bits, a positive one clears them, so each bit is 1 half of the time — hence several tests)
    assert p_bytes(total) < 1e-300


@pytest.mark.parametrize("share_mode", ["seed", "full"])
@pytest.mark.parametrize("k", [2, 3])
def test_all_k_shares_reconstruct_the_noisy_encoding_bit_for_bit(share_mode, k):
    """Arithmetic, no statistics (seeded, deterministic): Σ of the k shares of each batch equals
    round(clip(x)) + G on the grid, with the integer noise G rebuilt in the clear from the same seeded randomness."""
    spec = view_job(k, share_mode, n=2048)
    randomness = Randomness.seeded_insecure(f"views-exact-{k}-{share_mode}")
    _, batches = collect(spec, "constant", randomness, batch_clients=300)
    plan = spec.noise_plan()
    for party in spec.parties:
        vectors = clip_rows(np.full((party.size, WIDTH), ROW_VALUE), 1.0)
        prand = party_randomness(randomness, spec, party.party_id)
        mine = [per for per in batches if per[0].party_id == party.party_id]
        ranges = plan_batches(party, 300).ranges
        assert len(mine) == len(ranges)
        for per_server, (index, a, b) in zip(mine, ranges):
            noisy = noisy_copies(vectors[a - party.start:b - party.start], PIECES, plan,
                                 prand.child("batch", index).child("noise"))
            expected = noisy  # noisy_copies returns ring elements
            got = coalition_sum([s.share.values() for s in per_server], range(k))
            np.testing.assert_array_equal(got, expected)
            # and no k − 1 of them do: dropping any one share leaves something else
            for missing in range(k):
                partial = coalition_sum([s.share.values() for s in per_server], [i for i in range(k) if i != missing])
                assert not np.array_equal(partial, expected)


@pytest.mark.parametrize("k", [2, 3])
def test_helper_seeds_are_uniform_and_distinct(k):
    """Seed mode: the 32-byte seeds a helper server receives (one per batch) are uniform bytes and
    never repeat.  Small batches (4 clients) give 2048 batches: (k−1)·64 KiB of seed bytes."""
    spec = view_job(k, "seed", n=8192)
    _, batches = collect(spec, "zeros", Randomness.system(), batch_clients=4)
    seeds = [b.share.seed for per in batches for b in per if b.share.seed is not None]
    assert len(seeds) == (k - 1) * len(batches) == (k - 1) * 2048
    assert all(len(s) == SEED_BYTES for s in seeds) and len(set(seeds)) == len(seeds)
    raw = np.frombuffer(b"".join(seeds), dtype=np.uint8)
    words = np.frombuffer(b"".join(seeds), dtype="<u8")
    pvalues = {"bytes": _chi2_uniform(raw, 256), "bits": p_bits(words)}
    assert not rejected(pvalues), pvalues


# ----------------------------------------------------------------------------------- negative controls
def _broken(kind: str):
    """A replacement for ``ltm.sharing.share`` with the same signature and a deliberate flaw."""

    def broken_share(x, k, randomness, *, mode="seed", primary=0):
        x = np.asarray(x, dtype=np.uint64)
        shape = tuple(x.shape)
        stream = randomness.stream()
        others = [s for s in range(k) if s != primary]
        if kind == "no_mask":
            masks = [np.zeros(shape, np.uint64) for _ in others]
        elif kind == "mask_reused_across_entries":
            masks = [np.full(shape, stream.uint64(1)[0], np.uint64) for _ in others]
        elif kind == "mask_reused_across_servers":
            one = stream.uint64(shape)
            masks = [one for _ in others]
        elif kind == "63_bit_masks":
            masks = [stream.uint64(shape) >> np.uint64(1) for _ in others]
        else:
            raise AssertionError(kind)
        shares: list[Share | None] = [None] * k
        rest = x.copy()
        for server, mask in zip(others, masks):
            shares[server] = Share(server, shape, data=mask)
            rest -= mask
        shares[primary] = Share(primary, shape, data=rest)
        return shares

    return broken_share


BROKEN = [("no_mask", 2), ("no_mask", 3), ("mask_reused_across_entries", 2), ("mask_reused_across_entries", 3),
          ("mask_reused_across_servers", 3),  # (with k = 2 there is only one mask to reuse)
          ("63_bit_masks", 2), ("63_bit_masks", 3)]


@pytest.mark.parametrize("kind, k", BROKEN)
def test_negative_control_broken_sharing_is_detected(monkeypatch, kind, k):
    """The identical pipeline (real make_batches, same views, same statistics, same thresholds) with
    a broken ``share`` swapped in: every case must be rejected — the tests above can fail.  The
    broken sharings still reconstruct correctly, which is exactly why only a view test sees them."""
    monkeypatch.setattr(randomizer, "share", _broken(kind))
    spec = view_job(k, "full")
    for data, plan in (("constant", noiseless(spec)), ("zeros", None)):
        views, _ = collect(spec, data, Randomness.system(), plan=plan)
        if data == "constant":
            np.testing.assert_array_equal(coalition_sum(views, range(k)),
                                          encode(np.full(VIEW_WORDS, ROW_VALUE), spec.frac_bits))
        bad = rejected(view_pvalues(views))
        assert bad, f"{kind} (k={k}, {data}) was not detected"
        # and not by a whisker: the smallest p-value is astronomically small
        assert min(bad.values()) < 1e-30, bad


def test_sanity_the_real_share_is_the_one_being_tested():
    """The monkeypatched name is the one make_batches calls (else the controls prove nothing)."""
    assert randomizer.share is share

"""Corruption thresholds: what t corrupt servers, and t′ corrupt clients, actually cost.

docs/architecture.md: the LTM promises (ε, δ)-DP against any k − 1 of
the k servers together with up to t′ corrupt clients (semi-honest).  These scenarios measure both
edges of that promise on the real cores.

``thresholds.servers`` (spec ``thresholds_servers.toml``)
    One job (rows partition) runs through the real party → k server → analyst cores in process,
    with server cores we keep, so that every server's *view* — the uint64 share of every batch it
    stores (helper seeds expanded) and its result share — can be read back.  For every coalition
    size t = 0..k and every coalition of that size we measure what the coalition can compute:

    * the coalition sum ``Σ_{i∈T} share_i mod 2^64`` (under additive sharing the only combination
      that could carry information): χ² of its 256 byte values against uniform (``chi2_p``, the
      smallest p-value over the coalitions of size t), and the total-variation distance between
      the histograms of its decoded values, on the data's scale ([−4C, 4C] in 64 bins plus
      under/overflow), for two very different datasets run with independent randomness (``tv_ab``,
      the largest over the coalitions; ``tv_null`` is the same statistic for two independent
      uniform samples of that size, i.e. what a perfectly hiding view shows);
    * ``frac_exact``: the fraction of the clients' noisy fixed-point entries the coalition sum
      equals exactly (2^-64 by chance; 1 when the coalition holds every share);
    * ``rmse_decoded``: RMSE of the decoded coalition sum against the clients' clean rows, and
      ``release_error``: the largest |difference| between the coalition's sum of result shares and
      the analyst's released sketch (0 exactly at t = k);
    * ``eps_vs_coalition``: the ε (at the job's δ) a single client still has against the
      coalition.  For t < k the coalition's view is uniform and independent of the data
      (simulatable), so it is the release's ε; at t = k the coalition reads each client's s noisy
      copies, each carrying only that client's own draw N(0, σ_c²): ε of the Gaussian mechanism
      with σ_c and sensitivity 2C√s.

``thresholds.replicated`` (spec ``thresholds_replicated.toml``)
    The same questions for the columns partition's replicated degree-2 release (ltm/replicated.py,
    k = 3): one job through the real party, server and analyst cores of the replicated release,
    twice (datasets A and B as above).  Server i's view is the two additive shares (x_i, x_{i+1})
    of every party's grid-rounded block it receives plus its shares of the parties' noise; a
    coalition T holds the additive shares H(T) = ∪_{i∈T} {i, i+1 mod 3} and its best combination is
    their sum.  Per coalition size t = 0..3: ``chi2_p`` (smallest p over every share stream the
    coalition holds and its sum), ``tv_ab``, ``frac_exact`` (fraction of the grid-rounded data
    entries the sum equals), ``rmse_decoded`` (against the clean clipped rows), ``gram_error``
    (largest |triu(ẐᵀẐ) − the clear triangle| over the entries, data units, Ẑ the coalition's
    decoded sum) and ``eps_vs_coalition`` (t = 1: the release's ε, the view being uniform and
    independent of the data; t ≥ 2: ∞, the coalition reads every client's rows with no noise at
    all: the replicated release adds its noise to the Gram, not to the data).  The threshold is
    t = 2 = ⌈k/2⌉ (an honest majority), where the sketch's is t = k.

``thresholds.clients`` (spec ``thresholds_clients.toml``), axis ``part``:

    * ``part = "privacy"`` — exact, no sampling.  A job calibrated for t′_assumed corrupt clients
      (gate: every row keeps honest load ≥ L = min_load − t′_assumed, each client adds
      σ_c = σ_Y/√L) meets t′_actual corrupt clients who subtract their own noise.  The adversary
      places them worst: all in the least-loaded row (a client has at most one non-zero per row),
      so the weakest entry keeps ``min_load − t′_actual`` honest draws, σ = σ_c·√(that), and the
      actual guarantee is the Gaussian mechanism's: ``delta_actual`` =
      :func:`ltm.dp.calibration.gaussian_delta` at the claimed ε, ``eps_actual`` at the claimed δ.
    * ``part = "utility"`` — the price of a larger t′_assumed: synthetic ridge data (Burkhardt
      et al. §6.2) released through the real pipeline at t′_assumed, ridge fitted on the release (the
      simulator's default de-biased analyst), R² and φ beside the non-private (OLS) and central (the better of AdaSSP and SSP, each with its own λ)
      baselines.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from ltm.analyst.estimators import default_ridge_lambda
from ltm.analyst.replicated import replicated_release
from ltm.datasets.synthetic import synthetic_ridge
from ltm.datasets.tables import Table
from ltm.dp import accounting
from ltm.dp.calibration import gaussian_delta
from ltm.dp.grid import round_to_grid
from ltm.dp.sensitivity import sketch_l2
from ltm.experiments.registry import register
from ltm.experiments.seeds import numpy_rng, subseed
from ltm.experiments.wu import gaussian_epsilon
from ltm.jobspec import JobSpec, resolve_defaults, validate_job
from ltm.party.randomizer import party_randomness
from ltm.party.replicated import replicated_uploads
from ltm.randomness import Randomness
from ltm.replicated import REPLICATED_SERVERS, clear_triangle
from ltm.ring import decode
from ltm.server.core import ServerCore
from ltm.server.replicated import ReplicatedServer
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sim.runtime.simulate import SimulateConfig, load_table, report_for_release, training_matrix

STYLES = {
    "k=2 servers": {"color": "tab:blue", "marker": "o"},
    "k=3 servers": {"color": "tab:green", "marker": "s"},
    "k=4 servers": {"color": "tab:purple", "marker": "^"},
    "k=5 servers": {"color": "tab:red", "marker": "v"},
    "replicated k=3": {"color": "tab:brown", "marker": "D"},
    "LTM ridge": {"color": "tab:green", "marker": "s"},
    "non-private": {"color": "black", "linestyle": "--", "marker": "."},
    "central (best of AdaSSP, SSP; own λ)": {"color": "tab:orange", "marker": "^"},
    "uniform views (null, 99% quantile)": {"color": "grey", "linestyle": ":", "marker": ""},
}
#: The privacy curves: one line per t′_assumed (dense x grid, so no markers).
for _i, _f in enumerate((0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)):
    STYLES[f"t′_assumed = {_f:g}·L₀"] = {"color": f"C{_i}", "marker": "", "linewidth": 1.6}


# --------------------------------------------------------------------------------------------
# small statistics helpers (no scipy at run time)
# --------------------------------------------------------------------------------------------


def chi2_sf(stat: float, dof: int) -> float:
    """Upper tail P[χ²_dof ≥ stat] (scipy if available, else Wilson–Hilferty; dof = 255 here)."""
    try:
        from scipy.stats import chi2

        return float(chi2.sf(stat, dof))
    except ImportError:  # pragma: no cover - scipy is in the dev extra
        z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
        return 0.5 * math.erfc(z / math.sqrt(2))


def byte_histogram(words: np.ndarray) -> np.ndarray:
    """Counts of the 256 byte values over every byte of a uint64 array."""
    return np.bincount(np.ascontiguousarray(words, dtype=np.uint64).view(np.uint8).ravel(), minlength=256)


def chi2_uniform_p(counts: np.ndarray) -> float:
    """p-value of the χ² test of byte counts against the uniform distribution."""
    total = counts.sum()
    expected = total / counts.size
    return chi2_sf(float(((counts - expected) ** 2 / expected).sum()), counts.size - 1)


def window_histogram(values: np.ndarray, bound: float, bins: int = 64) -> np.ndarray:
    """Counts of decoded values in ``bins`` equal bins over the data's range [−4C, 4C], plus one
    underflow and one overflow bin: a histogram on the scale the data live on."""
    edges = np.concatenate([[-np.inf], np.linspace(-4.0 * bound, 4.0 * bound, bins + 1), [np.inf]])
    return np.histogram(values, bins=edges)[0]


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    """½·Σ|p − q| between two histograms (each normalised)."""
    p, q = a / a.sum(), b / b.sum()
    return 0.5 * float(np.abs(p - q).sum())


# --------------------------------------------------------------------------------------------
# (a) servers
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ServerViews:
    """What each server of one in-process job saw, and what the analyst released."""

    spec: JobSpec
    views: list[np.ndarray]          # per server: uint64 (total words,), batches in a fixed order
    results: list[np.ndarray]        # per server: its uint64 (m, D) result share
    release: np.ndarray              # the analyst's reconstructed (unscaled, uint64) total
    clean: np.ndarray                # the clients' clean rows in the same word order, float64
    sigma_client: float
    sigma_release: float


def run_with_views(spec: JobSpec, table: Table, randomness: Randomness) -> ServerViews:
    """Run ``spec`` in process through the real cores and read back every server's view.

    A view lists, for every batch (ordered by party, then batch index), the uint64 share the
    server stores, shape (pieces, clients, columns), flattened.  ``clean`` holds the matching
    clean (clipped, transformed) client values, repeated over pieces.
    """
    servers = [ServerCore(s.server_id) for s in spec.servers]
    run = run_inprocess(spec, party_tables(spec, table), randomness, servers=servers)
    V = training_matrix(spec, table)
    order = {p.party_id: i for i, p in enumerate(spec.parties)}
    views, clean = [], []
    for si, server in enumerate(servers):
        batches = sorted(server.store.batches(spec.job_id), key=lambda b: (order[b.party_id], b.batch_index))
        views.append(np.concatenate([b.share.values().ravel() for b in batches]))
        if si == 0:
            for b in batches:
                block = V[b.start:b.stop][:, list(b.columns)]
                clean.append(np.broadcast_to(block, (b.share.shape[0], *block.shape)).ravel())
    total = np.zeros_like(run.result_shares[0])
    for r in run.result_shares:
        total += r
    plan = validate_job(spec).noise_plan
    return ServerViews(spec, views, list(run.result_shares), total, np.concatenate(clean),
                       plan.sigma_client, plan.sigma_release)


def _servers_job(table: Table, *, k: int, m: int, s: int, epsilon: float, delta: float, parties: int,  # noqa: PLR0913 - an experiment's job: keyword-only spec fields; the one job builder is #34 item 2
                 share_mode: str, seed: int) -> JobSpec:
    # The experiment's threat model is t′ corrupt clients only (no corrupt party deducted): a
    # reproduction job may keep it.
    spec, _ = build_job(table, job_id=f"thr-{seed:x}", randomness=Randomness.seeded_insecure(seed),
                        partition="rows", parties=parties, k=k, kind="sparse", m=m, s=s, epsilon=epsilon,
                        delta=delta, share_mode=share_mode, corrupt_parties=0)
    return spec


@register("thresholds.servers", styles=STYLES)
def servers_cell(params: dict, seed: int) -> list[dict]:
    """For t = 0..k corrupt servers: what the coalition's view reveals (see module docstring).

    Params: ``servers`` (k); optional ``n`` (16384), ``d`` (4), ``m`` (16), ``s`` (1), ``parties``
    (4), ``epsilon`` (1), ``delta`` (1e-6), ``share_mode`` ("seed" | "full"), ``null_draws`` (50).
    """
    k = int(params["servers"])
    n, d = int(params.get("n", 16384)), int(params.get("d", 4))
    m, s = int(params.get("m", 16)), int(params.get("s", 1))
    parties = int(params.get("parties", 4))
    eps, delta = float(params.get("epsilon", 1.0)), float(params.get("delta", 1e-6))
    share_mode = str(params.get("share_mode", "seed"))

    # Dataset A: synthetic ridge rows.  Dataset B: every client holds the same extreme row.
    table_a = synthetic_ridge(n, d, Randomness.seeded_insecure(subseed(seed, "data-a")))
    spec = _servers_job(table_a, k=k, m=m, s=s, epsilon=eps, delta=delta, parties=parties, share_mode=share_mode,
                        seed=subseed(seed, "job"))
    cols_b = {c: np.full(n, 3.0 * (1 + j)) for j, c in enumerate(table_a.columns)}
    table_b = Table(cols_b, table_a.label, "constant extreme rows")
    a = run_with_views(spec, table_a, Randomness.seeded_insecure(subseed(seed, "run-a")))
    b = run_with_views(spec, table_b, Randomness.seeded_insecure(subseed(seed, "run-b")))
    noisy_a = np.zeros_like(a.views[0])
    for v in a.views:
        noisy_a += v  # all k shares: the clients' encoded noisy copies
    words = a.views[0].size
    null = numpy_rng(seed, "tv-null")
    null_tvs = []
    for _ in range(int(params.get("null_draws", 50))):
        u = [decode(np.frombuffer(null.bytes(8 * words), dtype=np.uint64), spec.frac_bits) for _ in range(2)]
        null_tvs.append(total_variation(window_histogram(u[0], spec.clip_bound), window_histogram(u[1], spec.clip_bound)))
    tv_null, tv_null_q99 = float(np.mean(null_tvs)), float(np.quantile(null_tvs, 0.99))
    plan_sens = sketch_l2(spec.clip_bound, spec.make_sketch().pieces)
    eps_local = gaussian_epsilon(a.sigma_client, delta, plan_sens)
    scale = 2.0**-spec.frac_bits
    rows: list[dict] = []
    for t in range(0, k + 1):
        coalitions = list(itertools.combinations(range(k), t))
        ps, tvs, exact, rmse, rel_err = [], [], [], [], []
        for coalition in coalitions:
            if t == 0:
                continue
            sum_a = np.zeros_like(a.views[0])
            sum_b = np.zeros_like(b.views[0])
            res = np.zeros_like(a.results[0])
            for i in coalition:
                sum_a += a.views[i]
                sum_b += b.views[i]
                res += a.results[i]
            ps.append(chi2_uniform_p(byte_histogram(sum_a)))
            dec_a, dec_b = decode(sum_a, spec.frac_bits), decode(sum_b, spec.frac_bits)
            tvs.append(total_variation(window_histogram(dec_a, spec.clip_bound),
                                       window_histogram(dec_b, spec.clip_bound)))
            exact.append(float(np.mean(sum_a == noisy_a)))
            rmse.append(float(np.sqrt(np.mean((dec_a - a.clean) ** 2))))
            rel_err.append(float(np.max(np.abs(res.view(np.int64).astype(np.float64)
                                               - a.release.view(np.int64).astype(np.float64))) * scale))
        rows.append({
            "series": f"k={k} servers", "k": k, "t": t, "coalitions": len(coalitions) if t else 0,
            "share_mode": share_mode, "words": int(words),
            "chi2_p": min(ps) if ps else None,
            "log10_chi2_p": math.log10(max(min(ps), 1e-300)) if ps else None,
            "tv_ab": max(tvs) if tvs else 0.0,
            "tv_null": tv_null,
            "tv_null_q99": tv_null_q99,
            "frac_exact": max(exact) if exact else 0.0,
            "rmse_decoded": min(rmse) if rmse else None,
            "release_error": min(rel_err) if rel_err else None,
            "sigma_client": a.sigma_client,
            "sigma_release": a.sigma_release,
            "clip_bound": spec.clip_bound,
            "eps_vs_coalition": eps if t < k else eps_local,
            "epsilon": eps,
        })
        rows.append({"series": "uniform views (null, 99% quantile)", "k": k, "t": t, "tv_ab": tv_null_q99})
    return rows


# --------------------------------------------------------------------------------------------
# (a′) servers of the replicated release (columns partition, k = 3)
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ReplicatedViews:
    """What each server of one replicated job held, and what the analyst released.

    ``shares[a]``: additive share a of every party's grid-rounded block (uint64, the parties'
    blocks flattened in party order), as the two servers holding it received it; ``noise[i]``:
    server i's shares of the parties' noise vectors; ``grid``: the grid-rounded data in the same
    word order (uint64 ring units of 2^-f); ``clean``: the clipped rows (float64), same order.
    """

    spec: JobSpec
    shares: list[np.ndarray]
    noise: list[np.ndarray]
    outputs: list[np.ndarray]
    release_sha256: str
    grid: np.ndarray
    clean: np.ndarray
    blocks: list[tuple[int, ...]]


def replicated_views(spec: JobSpec, table: Table, randomness: Randomness) -> ReplicatedViews:
    """Run a replicated job (``spec.replicated``) through the real party, server and analyst cores
    with the servers kept, and read back every server's view.  The same calls, in the same order and
    with the same per-party randomness, as :func:`ltm.sim.runtime.replicated_run.run_replicated` (without the
    ledgers), so the release is the in-process run's bit for bit."""
    if not spec.replicated:
        raise ValueError(f"job {spec.job_id!r} is not a replicated release")
    servers = [ReplicatedServer(spec, i) for i in range(spec.k)]
    tables = party_tables(spec, table)
    for party in spec.parties:
        ups = replicated_uploads(spec, party.party_id, tables[party.party_id],
                                 party_randomness(randomness, spec, party.party_id))
        for server, up in zip(servers, ups):
            server.accept(party.party_id, up)
    outputs = [server.output() for server in servers]
    release = replicated_release(spec, outputs, randomness=randomness.label)
    # Additive share a reaches server a (as its first) and server a − 1 (as its second): read it from
    # server a, and check server a − 1 holds the same words (the replication is what the coalition uses).
    k = REPLICATED_SERVERS
    shares, noise = [], []
    for a in range(k):
        ups_a = [servers[a].uploads[p.party_id] for p in spec.parties]
        ups_prev = [servers[(a - 1) % k].uploads[p.party_id] for p in spec.parties]
        shares.append(np.concatenate([u.first.values().ravel() for u in ups_a]))
        again = np.concatenate([u.second.values().ravel() for u in ups_prev])
        if not np.array_equal(shares[a], again):
            raise AssertionError(f"servers {a} and {(a - 1) % k} hold different copies of additive share {a}")
        acc = np.zeros(ups_a[0].noise.shape, dtype=np.uint64)
        for u in ups_a:
            acc += u.noise.values()
        noise.append(acc)
    V = training_matrix(spec, table)
    blocks = [tuple(spec.party_column_indices(p)) for p in spec.parties]
    clean = np.concatenate([V[:, list(b)].ravel() for b in blocks])
    grid = np.concatenate([round_to_grid(V[:, list(b)], spec.frac_bits).ravel() for b in blocks])
    return ReplicatedViews(spec, shares, noise, outputs, release.sha256,
                           np.ascontiguousarray(grid, dtype=np.int64).view(np.uint64), clean, blocks)


def held_shares(coalition: tuple[int, ...], k: int = REPLICATED_SERVERS) -> list[int]:
    """The additive shares a coalition of replicated-release servers holds: server i has i and i + 1."""
    return sorted({a for i in coalition for a in (i, (i + 1) % k)})


def _unflatten(words: np.ndarray, n: int, blocks: list[tuple[int, ...]], width: int) -> np.ndarray:
    """The n × D matrix from the party-ordered flattened blocks (inverse of :class:`ReplicatedViews`' order)."""
    out = np.zeros((n, width), dtype=words.dtype)
    start = 0
    for b in blocks:
        size = n * len(b)
        out[:, list(b)] = words[start:start + size].reshape(n, len(b))
        start += size
    return out


def replicated_job(table: Table, *, parties: int, epsilon: float, delta: float, share_mode: str,
                   seed: int) -> JobSpec:
    """The columns partition's replicated release for ``table`` (3 servers, 1 of them may be corrupt)."""
    spec, _ = build_job(table, job_id=f"thr-rep-{seed:x}", randomness=Randomness.seeded_insecure(seed),
                        partition="columns", parties=parties, k=REPLICATED_SERVERS, kind="gram",
                        colluding_servers=1, epsilon=epsilon, delta=delta, share_mode=share_mode)
    if not spec.replicated:
        raise AssertionError("build_job did not give the replicated release for colluding_servers = 1")
    return spec


@register("thresholds.replicated", styles=STYLES)
def replicated_cell(params: dict, seed: int) -> list[dict]:
    """For t = 0..3 corrupt servers of the replicated release: what the coalition recovers.

    Params: optional ``n`` (16384), ``d`` (4), ``parties`` (3), ``epsilon`` (1), ``delta`` (1e-6),
    ``share_mode`` ("seed" | "full"), ``null_draws`` (50).  See the module docstring.
    """
    k = REPLICATED_SERVERS
    n, d = int(params.get("n", 16384)), int(params.get("d", 4))
    parties = int(params.get("parties", 3))
    eps, delta = float(params.get("epsilon", 1.0)), float(params.get("delta", 1e-6))
    share_mode = str(params.get("share_mode", "seed"))
    table_a = synthetic_ridge(n, d, Randomness.seeded_insecure(subseed(seed, "data-a")))
    spec = replicated_job(table_a, parties=parties, epsilon=eps, delta=delta, share_mode=share_mode,
                          seed=subseed(seed, "job"))
    table_b = Table({c: np.full(n, 3.0 * (1 + j)) for j, c in enumerate(table_a.columns)}, table_a.label,
                    "constant extreme rows")
    a = replicated_views(spec, table_a, Randomness.seeded_insecure(subseed(seed, "run-a")))
    b = replicated_views(spec, table_b, Randomness.seeded_insecure(subseed(seed, "run-b")))
    f = spec.frac_bits
    words = a.grid.size
    null = numpy_rng(seed, "tv-null")
    null_tvs = []
    for _ in range(int(params.get("null_draws", 50))):
        u = [decode(np.frombuffer(null.bytes(8 * words), dtype=np.uint64), f) for _ in range(2)]
        null_tvs.append(total_variation(window_histogram(u[0], spec.clip_bound), window_histogram(u[1], spec.clip_bound)))
    tv_null, tv_null_q99 = float(np.mean(null_tvs)), float(np.quantile(null_tvs, 0.99))
    clear = clear_triangle(_unflatten(a.clean, n, a.blocks, spec.width), f).view(np.int64).astype(np.float64)
    iu = np.triu_indices(spec.width)
    rows: list[dict] = []
    for t in range(0, k + 1):
        coalitions = list(itertools.combinations(range(k), t)) if t else []
        ps, tvs, exact, rmse, gram_err = [], [], [], [], []
        for coalition in coalitions:
            held = held_shares(coalition)
            sum_a = np.zeros_like(a.grid)
            sum_b = np.zeros_like(b.grid)
            for h in held:
                sum_a += a.shares[h]
                sum_b += b.shares[h]
            # every stream the coalition holds (block shares, its noise shares) and the block sum
            streams = [a.shares[h] for h in held] + [a.noise[i] for i in coalition] + [sum_a]
            ps.append(min(chi2_uniform_p(byte_histogram(w)) for w in streams))
            dec_a, dec_b = decode(sum_a, f), decode(sum_b, f)
            tvs.append(total_variation(window_histogram(dec_a, spec.clip_bound),
                                       window_histogram(dec_b, spec.clip_bound)))
            exact.append(float(np.mean(sum_a == a.grid)))
            rmse.append(float(np.sqrt(np.mean((dec_a - a.clean) ** 2))))
            Zc = _unflatten(sum_a, n, a.blocks, spec.width)
            tri = np.einsum("na,nb->ab", Zc, Zc)[iu].view(np.int64).astype(np.float64)
            gram_err.append(float(np.max(np.abs(tri - clear))) * 2.0 ** (-2 * f))
        rows.append({
            "series": "replicated k=3", "k": k, "t": t, "coalitions": len(coalitions),
            "shares_held": len(held_shares(coalitions[0])) if coalitions else 0,
            "share_mode": share_mode, "words": int(words), "frac_bits": f,
            "chi2_p": min(ps) if ps else None,
            "log10_chi2_p": math.log10(max(min(ps), 1e-300)) if ps else None,
            "tv_ab": max(tvs) if tvs else 0.0, "tv_null": tv_null, "tv_null_q99": tv_null_q99,
            "frac_exact": max(exact) if exact else 0.0,
            "rmse_decoded": min(rmse) if rmse else None,
            "gram_error": min(gram_err) if gram_err else None,
            "clip_bound": spec.clip_bound, "grid_step": 2.0**-f,
            "eps_vs_coalition": eps if 2 * t < k else math.inf,
            "epsilon": eps, "release_sha256": a.release_sha256,
        })
        rows.append({"series": "uniform views (null, 99% quantile)", "k": k, "t": t, "tv_ab": tv_null_q99,
                     "share_mode": share_mode})
    return rows


# --------------------------------------------------------------------------------------------
# (b) clients
# --------------------------------------------------------------------------------------------


def actual_privacy(sigma_client: float, min_load: int, t_actual: int, epsilon: float, delta: float,
                   sensitivity: float, plan=None) -> dict[str, float]:
    """The guarantee of the weakest release entry when ``t_actual`` corrupt clients sit in the
    least-loaded row (load ``min_load``) and subtract their own noise: honest draws
    ``h = min_load − t_actual``, σ = σ_c·√h; δ at the claimed ε and ε at the claimed δ.  With a grid
    ``plan`` (a job's), by the discrete Gaussian's accounting (ltm.dp.accounting, as the analyst's
    report); else by the continuous Gaussian's exact δ(ε)."""
    honest = max(min_load - t_actual, 0)
    sigma = sigma_client * math.sqrt(honest)
    if honest == 0:
        return {"honest_load": 0, "sigma_weakest": 0.0, "delta_actual": 1.0, "eps_actual": math.inf}
    if plan is not None and plan.on_grid:
        rho = accounting.kls_rho(math.sqrt(plan.grid_sigma2), honest, plan.grid_sensitivity, plan.grid_l1_sensitivity)
        return {"honest_load": honest, "sigma_weakest": sigma,
                "delta_actual": min(1.0, accounting.zcdp_delta(rho, epsilon)),
                "eps_actual": accounting.zcdp_epsilon(rho, delta)}
    return {"honest_load": honest, "sigma_weakest": sigma,
            "delta_actual": gaussian_delta(sigma, epsilon, sensitivity),
            "eps_actual": gaussian_epsilon(sigma, delta, sensitivity)}


def worst_placement_min_honest(loads: np.ndarray, t_actual: int) -> int:
    """Smallest honest load over rows when ``t_actual`` corrupt clients (one non-zero per row
    each) are placed to hurt most: all in the row of least load (capped at its load)."""
    loads = np.asarray(loads, dtype=np.int64)
    r = int(np.argmin(loads))
    honest = loads.copy()
    honest[r] -= min(t_actual, int(loads[r]))
    return int(honest.min())


def calibrated_for(spec: JobSpec, t_assumed: int, min_load: int) -> JobSpec:
    """``spec`` re-calibrated for ``t_assumed`` corrupt clients at the tightest promise
    L = min_load − t′ (so that the claim is exact at t′_actual = t′_assumed), fixed-point width
    re-derived for the larger per-client noise."""
    if not 0 <= t_assumed < min_load:
        raise ValueError(f"t′_assumed must be in [0, min row load {min_load}), got {t_assumed}")
    privacy = dataclasses.replace(spec.privacy, t_prime=t_assumed, min_honest_load=min_load - t_assumed)
    return resolve_defaults(dataclasses.replace(spec, privacy=privacy, frac_bits=0))


def _clients_job(cfg: SimulateConfig, randomness: Randomness) -> tuple[JobSpec, Table, Table]:
    train, test = load_table(cfg, randomness)
    spec, _ = build_job(train, job_id=cfg.job_id, randomness=randomness, partition="rows", parties=cfg.parties,
                        k=cfg.k, kind=cfg.sketch, m=cfg.m, s=cfg.s, epsilon=cfg.epsilon, delta=cfg.delta,
                        corrupt_parties=0)  # t′ only, as above
    return spec, train, test


@register("thresholds.clients", networked=False, styles=STYLES,
          cost=lambda p: 1.0 if p.get("part") == "privacy" else float(p.get("n", 200_000)) / 20_000)
def clients_cell(params: dict, seed: int) -> list[dict]:
    """t′ corrupt clients: the actual (ε, δ) beyond the assumed t′ (``part="privacy"``, exact) and
    the utility cost of assuming more (``part="utility"``, real pipeline).

    Params: ``part``, ``t_assumed_frac`` (t′_assumed as a fraction of the job's smallest row load);
    optional ``n`` (200 000), ``d`` (10), ``m`` (default rule), ``s`` (1), ``epsilon`` (1),
    ``delta`` (1e-6), ``t_actual_points`` (privacy: t′_actual/L₀ on linspace(0, 0.99, this), plus
    0.995 and 0.999; default 100), ``lam``
    (utility: ridge λ; default the simulator's rule v·√m evaluated at t′ = 0, the same for every t′).
    """
    part = str(params["part"])
    frac = float(params["t_assumed_frac"])
    cfg = SimulateConfig(synthetic="ridge", n=int(params.get("n", 200_000)), d=int(params.get("d", 10)),
                         m=params.get("m"), s=int(params.get("s", 1)), epsilon=float(params.get("epsilon", 1.0)),
                         delta=float(params.get("delta", 1e-6)), parties=int(params.get("parties", 4)),
                         k=int(params.get("servers", 3)), seed=subseed(seed, "clients"), model="ridge",
                         job_id=f"thr-clients-{seed:x}", sketch="sparse")
    randomness = Randomness.seeded_insecure(cfg.seed)
    spec0, train, test = _clients_job(cfg, randomness)
    loads = spec0.make_sketch().row_loads()
    min_load = int(loads.min())
    t_assumed = min(int(math.floor(frac * min_load)), min_load - 1)
    spec = calibrated_for(spec0, t_assumed, min_load)
    plan = validate_job(spec).noise_plan
    base = {"t_assumed": t_assumed, "t_assumed_frac": frac, "min_load": min_load, "m": spec.sketch.m,
            "n": spec.n, "sigma_client": plan.sigma_client, "sigma_release": plan.sigma_release,
            "eps_claimed": spec.privacy.epsilon, "delta_claimed": spec.privacy.delta,
            "series": f"t′_assumed = {frac:g}·L₀"}
    if part == "privacy":
        # Nominal fractions of the smallest row load (the same x values in every repetition);
        # t′_actual = ⌊f·min_load⌋, so f = t_assumed_frac gives exactly t′_assumed.
        points = int(params.get("t_actual_points", 100))
        fracs = np.unique(np.round(np.concatenate([np.linspace(0.0, 0.99, points), [0.995, 0.999, frac]]), 9))
        rows = []
        for f in fracs:
            t_actual = min(int(math.floor(f * min_load)), min_load - 1)
            info = actual_privacy(plan.sigma_client, min_load, t_actual, spec.privacy.epsilon,
                                  spec.privacy.delta, plan.sensitivity, plan=plan)
            rows.append({**base, "t_actual": t_actual, "t_actual_frac": float(f),
                         "at_or_past_assumed": bool(t_actual >= t_assumed), **info,
                         "log10_delta_actual": math.log10(max(info["delta_actual"], 1e-300))})
        return rows
    if part != "utility":
        raise ValueError(f"part must be 'privacy' or 'utility', got {part!r}")
    # One λ for every t′: the simulator's default rule (v·√m) at t′ = 0, so that only the noise changes.
    plan0 = calibrated_for(spec0, 0, min_load).noise_plan()
    cfg.lam = float(params["lam"]) if "lam" in params else \
        default_ridge_lambda(spec.n * plan0.sigma_client**2 / spec.sketch.m, spec.sketch.m)
    run = run_inprocess(spec, party_tables(spec, train), randomness.child("run"))
    V = training_matrix(spec, train)
    rng = numpy_rng(seed, "baselines")
    report = report_for_release(cfg, spec, run.release, V, test, rng)
    out = []
    for series, metrics in (("LTM ridge", report["metrics"]), ("non-private", report["baselines"]["nonprivate"]),
                            ("central (best of AdaSSP, SSP; own λ)", report["baselines"]["central"])):
        out.append({**base, "series": series, "r2": metrics["r2"], "phi": metrics["phi"],
                    "log10_phi_minus_1": math.log10(max(metrics["phi"] - 1.0, 1e-12)),
                    "lambda": report["lambda"], "dp_verified": bool(run.release.privacy["dp_verified"]),
                    "calibration_verified": bool(run.release.privacy["calibration_verified"]),
                    "release_noise_std": math.sqrt(run.release.noise_variance_per_column / spec.sketch.m),
                    "noise_vs_t0": math.sqrt(min_load / (min_load - t_assumed))})
    return out

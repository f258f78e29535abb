"""``ltm audit``: an empirical lower bound on the ε of the LTM release (docs/testing.md).

Standard black-box auditing (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021), on a small job run
through the real cores many times:

* **Neighbours.**  Replace-one: a job of ``n`` clients, every row zero except one *target* client
  whose row is ``v = C·e1`` in dataset D and ``v′ = −C·e1`` in D′ (``‖v − v′‖₂ = 2C``, the largest
  change a clipped row can make).
* **Runs.**  Each run is one whole release with fresh randomness: the party core randomizes, noises
  and shares every party's rows (``ltm.party.randomizer.make_batches``), k server cores
  (``ltm.server.core.ServerCore``, in-memory stores) validate the job, accept every batch, close, check
  the release gate and return their result shares, and the analyst sums them
  (``ltm.sharing.reconstruct``) and decodes the unscaled release Y = Σ_l S_l (V + G_l).
* **Statistic.**  ``T = Σ_l sign_l · Y[row_l, 0]``: the projection of Y onto the target's signed
  sketch column in the e1 direction.  For the Gaussian mechanism this is the likelihood-ratio
  (Neyman–Pearson optimal) test between D and D′: T ~ N(±C·s, Σ_l load_{row_l}·σ_c²).
* **Bound.**  For every threshold t of a grid fixed before any run, "guess D iff T ≥ t" has
  FPR = P_D′[T ≥ t] and FNR = P_D[T < t].  (ε, δ)-DP implies 1 − FNR ≤ e^ε·FPR + δ and (the same
  event, complemented, with the roles swapped) 1 − FPR ≤ e^ε·FNR + δ.  With one-sided
  Clopper–Pearson upper bounds on FPR and FNR at every threshold,

      ε_lb = max_t max( ln((1 − FNR_up − δ)/FPR_up), ln((1 − FPR_up − δ)/FNR_up) ).

  **Flake probability.**  Each of the 2·G bounds (G thresholds) has confidence 1 − α/(2G), so by
  Bonferroni all hold together with probability ≥ 1 − α; then ε_lb ≤ the mechanism's true ε on
  this pair.  If the release really is (ε, δ)-DP, the audit reports ``violation`` (ε_lb > ε) with
  probability ≤ α (default α = 1e-6).
* **Worst case, on purpose.**  The job uses the default ``tight`` calibration at its tightest
  admissible promise L = the smallest row load at full participation, and the target is a client
  whose rows carry exactly that load, so the target's entries hold exactly the promised noise
  σ_Y = √L·σ_c — the case the calibration must cover (``tightness`` reports Δ/σ of T relative to
  the calibrated Δ/σ_Y; 1.0 means the audited pair is exactly the calibrated worst case).
* **Negative control.**  ``sigma_factor < 1`` multiplies every client's σ_c (an under-calibrated
  mechanism, e.g. a forgotten factor): the audit must then report ε_lb > ε.

**Any release kind and upload mode** (``release``, ``upload_mode``).  The default audits the sparse
sketch with per-client uploads as above (its statistic and its grid follow from the job alone).  For
another kind (``dense``, ``gram``) or aggregated uploads the same runs go through the same cores, and:

* the neighbours: the target's row is ``C·e1`` in D; in D′ it is ``−C·e1`` for a sketch, ``C·e2``
  for ``gram`` (whose lift z zᵀ cannot tell ±v apart; e1 vs e2 moves the triangle by √2·C², the
  gram release's Δ₂);
* the statistic: ``T = ⟨u, Y⟩`` with u the unit vector along E_D[Y] − E_D′[Y], which is computed
  exactly before any run as the difference of one D and one D′ release drawn with the *same*
  seeded randomness (the noise and shares do not depend on the data, so they cancel); for the sparse
  per-client default it is the projection above up to scale;
* the grid: fixed before any audit run from a *pilot* of separate releases (their own randomness,
  never counted): midpoint of the pilot means ± (half their distance + 6 pilot standard deviations).
  ``epsilon_pair`` and ``tightness`` then use the pilot's estimates of T's shift and spread.

The ε an infinitely long audit would approach (``epsilon_pair``: the exact ε at δ of a Gaussian
mechanism with the measured pair's Δ/σ) is reported beside ε_lb; with finitely many runs the
Clopper–Pearson bounds keep ε_lb well below it (a black-box audit at δ = 1e-6 cannot observe the
tail events that determine ε without ~1/δ runs).

Randomness: the production CSPRNG by default (fresh entropy per run); ``seed`` derives each run's
randomness from a label (reproducible, NOT private — as everywhere in LTM).
"""
from __future__ import annotations

import hashlib
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ltm.client_set import ClientSet
from ltm.dp.calibration import NoisePlan, gaussian_delta
from ltm.dp.defaults import DEFAULT_CLIP_BOUND, DEFAULT_DELTA
from ltm.dp.sensitivity import sketch_l1
from ltm.errors import CommandError
from ltm.jobspec import (
    ColumnSpec,
    JobSpec,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    resolve_defaults,
    validate_job,
)
from ltm.party.randomizer import make_batches, party_randomness
from ltm.randomness import Randomness
from ltm.ring import decode
from ltm.server.core import ServerCore
from ltm.server.release_gate import ANALYST_ROLE
from ltm.sharing import reconstruct

DATASETS = ("D", "D_prime")  # target row +C·e1, resp. −C·e1


@dataclass(frozen=True)
class AuditConfig:
    """One audit: the job, the mechanism audited, the number of runs and the confidence.

    Attributes:
        runs: releases per neighbouring dataset (2·runs releases in all).
        sigma_factor: multiplies every client's σ_c; 1.0 audits the real mechanism, < 1 is an
            under-calibrated negative control.
        alpha: probability that the reported lower bound is not valid (Bonferroni over 2·thresholds
            one-sided Clopper–Pearson bounds).
        thresholds: size G of the fixed threshold grid.
        seed: None = production randomness; else a label from which every run's randomness derives.
        workers: processes to spread the runs over.
    """

    runs: int = 1000
    n: int = 48
    m: int = 4
    s: int = 1
    k: int = 2
    parties: int = 2
    width: int = 2
    epsilon: float = 1.0
    delta: float = DEFAULT_DELTA
    clip: float = DEFAULT_CLIP_BOUND
    frac_bits: int = 0
    share_mode: str = "seed"
    sigma_factor: float = 1.0
    alpha: float = 1e-6
    thresholds: int = 241
    seed: str | None = None
    workers: int = 1
    release: str = "sparse"          # sparse | dense | gram (the audited release kind)
    upload_mode: str = "per-client"  # per-client | aggregate

    @property
    def generic(self) -> bool:
        """Whether the general statistic and a pilot grid are used (anything but sparse, per-client)."""
        return self.release != "sparse" or self.upload_mode != "per-client"


@dataclass(frozen=True)
class AuditJob:
    """The audited job (one spec for D and D′: only the target's row differs) and its target."""

    spec: JobSpec
    plan: NoisePlan           # the plan the parties actually use (σ_c × sigma_factor)
    claimed: NoisePlan        # the job's calibrated plan
    target: int
    rows: tuple[int, ...]     # the target's sketch row per piece
    signs: tuple[int, ...]    # ±1 per piece
    target_loads: tuple[int, ...]
    #: the generic statistic's unit direction (shape of Y), None for the sparse per-client default
    direction: np.ndarray | None = None
    lifted: bool = False             # a gram job: D′ moves the target to C·e2 (module docstring)
    shift: float = 0.0               # generic: ‖E_D[Y] − E_D′[Y]‖, exactly E_D[T] − E_D′[T]

    @property
    def mean_shift(self) -> float:
        """|E_D[T] − E_D′[T]| = 2·C·s: the target moves by 2C in each of its s rows, and T adds
        them with their signs — the ℓ1 sketch sensitivity :func:`ltm.dp.sensitivity.sketch_l1`."""
        return sketch_l1(self.spec.clip_bound, len(self.rows))

    @property
    def sd(self) -> float:
        """The standard deviation of T under the plan the parties use."""
        return self.plan.sigma_client * math.sqrt(sum(self.target_loads))


AUDITED_KINDS = ("sparse", "dense", "gram")


def _audited_sketch(cfg: AuditConfig) -> SketchSpec:
    if cfg.release not in AUDITED_KINDS:
        raise ValueError(f"ltm audit audits the release kinds {', '.join(AUDITED_KINDS)}, not {cfg.release!r}")
    if cfg.release == "gram":  # the servers' map is the sum: one row
        return SketchSpec("gram", 1, 1, "a0" * 32)
    return SketchSpec(cfg.release, cfg.m, cfg.s if cfg.release == "sparse" else cfg.m, "a0" * 32)


def build_audit_job(cfg: AuditConfig) -> AuditJob:
    edges = np.linspace(0, cfg.n, cfg.parties + 1).astype(int)
    draft = JobSpec(
        job_id="dp-audit", partition="rows", n=cfg.n,
        columns=tuple(ColumnSpec(f"x{j}") for j in range(cfg.width)),
        parties=tuple(PartySpec(f"party-{i}", int(a), int(b), (), cfg.clip)
                      for i, (a, b) in enumerate(zip(edges[:-1], edges[1:]))),
        clip_bound=cfg.clip, frac_bits=cfg.frac_bits, sketch=_audited_sketch(cfg),
        privacy=PrivacySpec(epsilon=cfg.epsilon, delta=cfg.delta, min_participants=cfg.n),
        servers=tuple(ServerSpec(f"server-{i}") for i in range(cfg.k)), share_mode=cfg.share_mode,
        upload_mode=cfg.upload_mode,
        # An audit is an experiment on synthetic data: it measures the calibration with every client
        # honest (no corruption deducted) and may draw seeded randomness, so it is a reproduction job.
        reproduction=True)
    sketch = draft.make_sketch()
    loads = sketch.row_loads()
    tightest = int(loads.min())  # L = the smallest full-participation row load (t′ = 0)
    spec = resolve_defaults(replace(draft, privacy=replace(draft.privacy, min_honest_load=tightest)))
    validate_job(spec)
    claimed = spec.noise_plan()
    plan = replace(claimed, sigma_client=claimed.sigma_client * cfg.sigma_factor,
                   grid_sigma2=claimed.grid_sigma2 * cfg.sigma_factor**2)
    if cfg.release == "sparse":  # the target: a client whose rows carry the smallest load
        rows, negative = sketch.placement(0, cfg.n)
        burden = loads[rows].sum(axis=0)  # Σ_l load of each client's rows
        target = int(np.argmin(burden))
        job = AuditJob(spec, plan, claimed, target, tuple(int(r) for r in rows[:, target]),
                       tuple(-1 if x else 1 for x in negative[:, target]),
                       tuple(int(loads[r]) for r in rows[:, target]))
    else:  # every client is in every row (dense) or in the one sum (gram): equal loads
        job = AuditJob(spec, plan, claimed, 0, (), (), tuple(int(x) for x in loads), lifted=cfg.release == "gram")
    if not cfg.generic:
        return job
    diff = _mean_difference(job)
    return replace(job, direction=diff / float(np.linalg.norm(diff)), shift=float(np.linalg.norm(diff)))


def _mean_difference(job: AuditJob) -> np.ndarray:
    """E_D[Y] − E_D′[Y]: one D and one D′ release with the same seeded randomness differ by exactly
    that (the noise and the shares do not depend on the data)."""
    same = "ltm-audit/direction"
    diff = (release_once(job, _tables(job, "D"), Randomness.seeded_insecure(same))
            - release_once(job, _tables(job, "D_prime"), Randomness.seeded_insecure(same)))
    if not np.linalg.norm(diff) > 0:
        raise ValueError("the audited neighbours give the same release mean: nothing to audit")
    return diff


def _tables(job: AuditJob, dataset: str) -> dict[str, dict[str, np.ndarray]]:
    spec = job.spec
    sign = 1.0 if dataset == "D" else -1.0
    # a lifted (gram) release cannot tell ±v apart: its D′ moves the target to C·e2 instead
    column = "x1" if job.lifted and dataset != "D" else "x0"
    out = {}
    for p in spec.parties:
        cols = {f"x{j}": np.zeros(p.size) for j in range(spec.width)}
        if p.start <= job.target < p.stop:
            cols[column][job.target - p.start] = (1.0 if job.lifted else sign) * spec.clip_bound
        out[p.party_id] = cols
    return out


def release_once(job: AuditJob, tables: dict[str, dict[str, np.ndarray]], randomness: Randomness) -> np.ndarray:
    """One whole release through the real cores; returns the decoded unscaled Y (m, D)."""
    spec = job.spec
    servers = [ServerCore(s.server_id) for s in spec.servers]
    for server in servers:
        server.create_job(spec, caller_role=ANALYST_ROLE)
    for party in spec.parties:
        for per_server in make_batches(spec, party.party_id, tables[party.party_id],
                                       party_randomness(randomness, spec, party.party_id), plan=job.plan):
            for server, batch in zip(servers, per_server):
                server.accept(batch, spec.job_id, caller_role="party", caller_id=party.party_id)
    participants = ClientSet.intersection([s.close(spec.job_id, caller_role=ANALYST_ROLE) for s in servers])
    shares = [s.release(spec.job_id, participants, caller_role=ANALYST_ROLE, job_digest=spec.digest)
              for s in servers]
    return decode(reconstruct(shares), spec.frac_bits)


def statistic(job: AuditJob, Y: np.ndarray) -> float:
    """T = Σ_l sign_l · Y[row_l, 0]; generic: T = ⟨u, Y⟩ (module docstring)."""
    if job.direction is not None:
        return float(np.sum(job.direction * Y))
    return float(sum(sign * Y[row, 0] for row, sign in zip(job.rows, job.signs)))


def _fingerprint(Y: np.ndarray) -> int:
    """64 bits of SHA-256 of a whole release: equal only if two runs drew the same noise."""
    return int.from_bytes(hashlib.sha256(np.ascontiguousarray(Y).tobytes()).digest()[:8], "little")


def _run_chunk(cfg: AuditConfig, dataset: str, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    job = build_audit_job(cfg)
    tables = _tables(job, dataset)
    out = np.empty(count)
    prints = np.empty(count, dtype=np.uint64)
    for i in range(count):
        run = first + i
        rand = (Randomness.system() if cfg.seed is None
                else Randomness.seeded_insecure(f"ltm-audit/{cfg.seed}/{cfg.sigma_factor!r}/{dataset}/{run}"))
        Y = release_once(job, tables, rand)
        out[i] = statistic(job, Y)
        prints[i] = _fingerprint(Y)
    return out, prints


def collect_statistics(cfg: AuditConfig) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """T over ``cfg.runs`` independent releases of D and of D′ (spread over ``cfg.workers``
    processes), and a 64-bit fingerprint of every release (to show every run drew fresh noise)."""
    if cfg.workers <= 1:
        parts = {d: [_run_chunk(cfg, d, 0, cfg.runs)] for d in DATASETS}
    else:
        per = -(-cfg.runs // cfg.workers)
        pieces = [(d, a, min(per, cfg.runs - a)) for d in DATASETS for a in range(0, cfg.runs, per)]
        with ProcessPoolExecutor(cfg.workers) as pool:
            futures = [(d, pool.submit(_run_chunk, cfg, d, a, c)) for d, a, c in pieces]
            parts = {d: [] for d in DATASETS}
            for d, fut in futures:
                parts[d].append(fut.result())
    stats = {d: np.concatenate([t for t, _ in v]) for d, v in parts.items()}
    prints = np.concatenate([f for v in parts.values() for _, f in v])
    return stats, prints


# ------------------------------------------------------------------------------------ bounds
def clopper_pearson_upper(failures: np.ndarray, trials: int, level: float) -> np.ndarray:
    """One-sided upper confidence bound (confidence 1 − level) on a binomial rate."""
    try:
        from scipy.stats import beta
    except ImportError as exc:  # pragma: no cover - scipy is in the dev extras
        raise CommandError("ltm audit needs scipy (pip install -e '.[dev]')") from exc
    x = np.asarray(failures, dtype=float)
    upper = beta.ppf(1.0 - level, x + 1.0, trials - x)
    return np.where(x >= trials, 1.0, upper)


def threshold_grid(job: AuditJob, size: int) -> np.ndarray:
    """Fixed before any run: the midpoint ± (half the shift + 6 standard deviations of T)."""
    half = job.mean_shift / 2.0 + 6.0 * job.sd
    return np.linspace(-half, half, size)


def epsilon_lower_bound(t_d: np.ndarray, t_dprime: np.ndarray, grid: np.ndarray, delta: float,
                        alpha: float) -> dict[str, Any]:
    """ε_lb (see module docstring) with the threshold and rates that attain it."""
    level = alpha / (2 * len(grid))
    d_sorted, p_sorted = np.sort(t_d), np.sort(t_dprime)
    fp = len(p_sorted) - np.searchsorted(p_sorted, grid, side="left")  # D′ runs with T ≥ t
    fn = np.searchsorted(d_sorted, grid, side="left")                 # D runs with T < t
    fpr_up = clopper_pearson_upper(fp, len(p_sorted), level)
    fnr_up = clopper_pearson_upper(fn, len(d_sorted), level)
    with np.errstate(divide="ignore", invalid="ignore"):
        forward = np.log(np.maximum(1.0 - fnr_up - delta, 0.0) / fpr_up)
        backward = np.log(np.maximum(1.0 - fpr_up - delta, 0.0) / fnr_up)
    both = np.where(np.isnan(np.stack([forward, backward])), -np.inf, np.stack([forward, backward]))
    direction, i = np.unravel_index(int(np.argmax(both)), both.shape)
    best = float(both[direction, i])
    return {
        "epsilon_lb": max(best, 0.0),
        "threshold": float(grid[i]),
        "direction": "guess D iff T >= t" if direction == 0 else "guess D' iff T < t",
        "fpr": float(fp[i] / len(p_sorted)), "fnr": float(fn[i] / len(d_sorted)),
        "fpr_upper": float(fpr_up[i]), "fnr_upper": float(fnr_up[i]),
        "per_bound_level": level,
    }


def pair_epsilon(mean_shift: float, sd: float, delta: float) -> float:
    """The exact ε at δ of the Gaussian mechanism with shift ``mean_shift`` and noise ``sd``."""
    lo, hi = 0.0, 1.0
    while gaussian_delta(sd, hi, mean_shift) > delta:
        hi *= 2.0
        if hi > 1e4:
            return math.inf
    if gaussian_delta(sd, 0.0, mean_shift) <= delta:
        return 0.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if gaussian_delta(sd, mid, mean_shift) > delta:
            lo = mid
        else:
            hi = mid
    return hi


#: Most pilot releases per neighbouring dataset that fix a generic audit's grid (never counted in the
#: bound): min(PILOT_RUNS, max(50, runs)).
PILOT_RUNS = 200


def pilot(cfg: AuditConfig, job: AuditJob) -> dict[str, float]:
    """A generic audit's pilot (module docstring): T's mean under D and D′ and its spread, from
    up to :data:`PILOT_RUNS` releases each with randomness of their own, run before the audit's."""
    count = min(PILOT_RUNS, max(50, cfg.runs))
    t = {}
    for dataset in DATASETS:
        tables = _tables(job, dataset)
        t[dataset] = np.array([statistic(job, release_once(job, tables, Randomness.system() if cfg.seed is None else
                                                                 Randomness.seeded_insecure(
                                                                     f"ltm-audit-pilot/{cfg.seed}/{dataset}/{i}")))
                               for i in range(count)])
    sd = math.sqrt((t["D"].var(ddof=1) + t["D_prime"].var(ddof=1)) / 2.0)
    return {"mean_D": float(t["D"].mean()), "mean_D_prime": float(t["D_prime"].mean()), "sd": sd, "runs": count}


def _grid_and_pair(cfg: AuditConfig, job: AuditJob) -> tuple[np.ndarray, float, float, dict[str, float]]:
    """The threshold grid, T's shift and spread (the job's, or a generic audit's pilot estimates),
    and the expected statistic the report states."""
    if not cfg.generic:
        expected = {"expected_mean_D": job.mean_shift / 2.0, "expected_mean_D_prime": -job.mean_shift / 2.0,
                    "expected_sd": job.sd}
        return threshold_grid(job, cfg.thresholds), job.mean_shift, job.sd, expected
    p = pilot(cfg, job)
    shift = job.shift  # exact; the pilot estimates T's spread and centre
    half = shift / 2.0 + 6.0 * p["sd"]
    mid = (p["mean_D"] + p["mean_D_prime"]) / 2.0
    expected = {"expected_mean_D": p["mean_D"], "expected_mean_D_prime": p["mean_D_prime"], "expected_sd": p["sd"],
                "expected_from": f"a pilot of {p['runs']} releases per dataset"}
    return np.linspace(mid - half, mid + half, cfg.thresholds), shift, p["sd"], expected


def run_audit(cfg: AuditConfig) -> dict[str, Any]:
    """Run the audit; returns a JSON-friendly report (see module docstring)."""
    if cfg.runs < 1:
        raise ValueError("runs must be ≥ 1")
    t0 = time.perf_counter()
    job = build_audit_job(cfg)
    grid, shift, sd, expected = _grid_and_pair(cfg, job)  # fixed before any audit run
    stats, prints = collect_statistics(cfg)
    elapsed = time.perf_counter() - t0
    bound = epsilon_lower_bound(stats["D"], stats["D_prime"], grid, cfg.delta, cfg.alpha)
    calibrated_ratio = job.claimed.sensitivity / job.claimed.sigma_release  # Δ/σ_Y
    pair_ratio = shift / (sd / cfg.sigma_factor)  # T's Δ/σ under the calibrated (not the audited) plan
    distinct = len(np.unique(prints))
    return {
        "claimed": {"epsilon": cfg.epsilon, "delta": cfg.delta, "calibration": job.spec.privacy.calibration,
                    "mechanism": "gaussian"},
        "audited": {
            "sigma_factor": cfg.sigma_factor,
            "negative_control": cfg.sigma_factor != 1.0,
            "sigma_client": job.plan.sigma_client,
            "sigma_client_calibrated": job.claimed.sigma_client,
            "sigma_release_calibrated": job.claimed.sigma_release,
            "min_honest_load": job.spec.privacy.min_honest_load,
            "target_client": job.target, "target_rows": list(job.rows), "target_row_loads": list(job.target_loads),
            "tightness": pair_ratio / calibrated_ratio,
            "epsilon_pair": pair_epsilon(shift, sd, cfg.delta),
        },
        "job": {"release": cfg.release, "upload_mode": cfg.upload_mode, "n": cfg.n, "m": job.spec.sketch.m,
                "s": job.spec.sketch.s, "k": cfg.k, "parties": cfg.parties, "width": cfg.width,
                "clip": cfg.clip, "share_mode": cfg.share_mode, "frac_bits": job.spec.frac_bits},
        "runs_per_dataset": cfg.runs,
        "alpha": cfg.alpha,
        "thresholds": cfg.thresholds,
        **bound,
        "violation": bound["epsilon_lb"] > cfg.epsilon,
        "statistic": {
            **expected, "mean_D": float(stats["D"].mean()), "mean_D_prime": float(stats["D_prime"].mean()),
            "sd_D": float(stats["D"].std(ddof=1)) if cfg.runs > 1 else None,
            "sd_D_prime": float(stats["D_prime"].std(ddof=1)) if cfg.runs > 1 else None,
            # whole releases, not T: T is a fixed-point value, so two of 10^5 fresh draws may coincide
            "distinct_releases": distinct,
        },
        "randomness": SEED_LABEL if cfg.seed is not None else Randomness.system().label,
        "seconds": elapsed,
        "releases_per_second": 2 * cfg.runs / elapsed if elapsed > 0 else None,
    }


SEED_LABEL = Randomness.seeded_insecure(0).label

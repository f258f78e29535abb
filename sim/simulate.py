"""``ltm simulate``: one LTM job in process, the model it yields, and the baselines beside it.

Pipeline: load or generate data → split train/test → build a validated job spec (defaults for m
and λ, see :mod:`sim.jobs`) → parties randomize and share → k servers store and apply the sketch →
the analyst reconstructs the DP sketch and fits the model → metrics on held-out data, next to the
non-private, central (SSP / AdaSSP / MOD-SULQ) and local baselines on the same training data.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyst.baselines import adassp, local_release, mod_sulq, ssp_ridge
from analyst.estimators import LowRank, default_ridge_lambda, linear_predictor, make_estimator, solve_ridge
from analyst.metrics import phi, psi, r2, mse
from ltm.clipping import clip_rows
from ltm.jobspec import JobSpec
from ltm.randomness import Randomness
from party.ledger import Budget
from sim.data import DataError, Table, load_bundled, load_csv, synthetic_lowrank, synthetic_ridge
from sim.inprocess import run_inprocess
from sim.jobs import DEFAULT_CLIP_BOUND, build_job, party_tables

MODELS = ("ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols")
TEST_FRACTION = 0.2


@dataclass
class SimulateConfig:
    """Every knob of ``ltm simulate`` (the CLI flags map one to one)."""

    data: str | None = None
    label: str | None = None
    features: list[str] | None = None
    synthetic: str | None = None  # "ridge" | "lowrank"
    n: int = 10_000
    d: int = 10
    partition: str = "rows"
    parties: int = 4
    k: int = 3
    sketch: str = "sparse"
    m: int | None = None
    s: int = 1
    epsilon: float = 1.0
    delta: float = 1e-6
    mechanism: str = "gaussian"
    calibration: str = "tight"
    interpolate_p: float | None = None
    t_prime: int = 0
    corrupt_parties: int | None = None  # None: the default (1 when parties hold several clients each)
    model: str | None = None
    lam: float | None = None
    debias: bool = True
    rank: int = 5
    clip: float = DEFAULT_CLIP_BOUND
    intercept: bool = False
    share_mode: str = "seed"
    seed: int | None = None
    job_id: str = "simulate"
    #: each simulated party's privacy budget (None: the party's default, ``party.ledger.Budget``)
    budget_epsilon: float | None = None
    budget_delta: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def load_table(cfg: SimulateConfig, randomness: Randomness) -> tuple[Table, Table | None]:
    """(train, test) tables.  Synthetic data gets an independent test draw; CSV data a random split."""
    if cfg.synthetic == "ridge":
        # One draw (same generating coefficients), the last rows held out for testing.
        n_test = max(cfg.n // 4, 1000)
        full = synthetic_ridge(cfg.n + n_test, cfg.d, randomness.child("data"))
        head = Table({c: v[:cfg.n] for c, v in full.columns.items()}, full.label, full.source)
        tail = Table({c: v[cfg.n:] for c, v in full.columns.items()}, full.label, full.source + " (held out)")
        return head, tail
    if cfg.synthetic == "lowrank":
        return synthetic_lowrank(cfg.n, cfg.d, cfg.rank, randomness.child("train")), None
    if cfg.synthetic is not None:
        raise DataError(f"unknown synthetic generator {cfg.synthetic!r}; choose ridge or lowrank")
    table = load_csv(cfg.data, label=cfg.label, features=cfg.features) if cfg.data else load_bundled()
    if cfg.data is None and cfg.label is not None and cfg.label != table.label:
        raise DataError("--label needs --data (the bundled dataset has a fixed label)")
    order = np.argsort(randomness.child("split").stream().uniform(table.n))
    cut = int(round(table.n * (1 - TEST_FRACTION)))
    train_idx, test_idx = np.sort(order[:cut]), np.sort(order[cut:])
    pick = lambda idx: Table({c: v[idx] for c, v in table.columns.items()}, table.label, table.source)  # noqa: E731
    return pick(train_idx), pick(test_idx)


def budget_of(cfg: SimulateConfig) -> Budget:
    """The simulated parties' privacy budget: the configured one, else the party's default."""
    default = Budget()
    return Budget(cfg.budget_epsilon if cfg.budget_epsilon is not None else default.epsilon,
                  cfg.budget_delta if cfg.budget_delta is not None else default.delta)


def training_matrix(spec: JobSpec, table: Table) -> np.ndarray:
    """The clipped, transformed client rows V (n, D) exactly as the parties form them."""
    raw = np.column_stack([np.ones(table.n) if c.role == "intercept" else table.columns[c.name]
                           for c in spec.columns])
    centers = np.array([c.center for c in spec.columns])
    scales = np.array([c.scale for c in spec.columns])
    V = (raw - centers) / scales
    if spec.partition == "rows":
        return clip_rows(V, spec.clip_bound, spec.clip_norm)
    for p in spec.parties:
        idx = spec.party_column_indices(p)
        V[:, idx] = clip_rows(V[:, idx], p.clip_bound, spec.clip_norm)
    return V


def simulate(cfg: SimulateConfig) -> dict[str, Any]:
    """Run one simulated job; returns the JSON-ready report."""
    t_start = time.perf_counter()
    randomness = (Randomness.seeded_insecure(cfg.seed) if cfg.seed is not None else Randomness.system())
    if cfg.model is None:
        cfg.model = "lowrank" if cfg.synthetic == "lowrank" else "ridge"
    if cfg.model not in MODELS:
        raise ValueError(f"unknown model {cfg.model!r}; choose one of {MODELS}")
    train, test = load_table(cfg, randomness)
    if cfg.model != "lowrank" and train.label is None:
        raise DataError("a regression model needs a label column (--label)")
    if cfg.model == "lowrank" and train.label is not None:
        train = Table(dict(train.columns), None, train.source)  # low rank uses every column
    t = time.perf_counter()
    spec, choices = build_job(
        train, job_id=cfg.job_id, randomness=randomness, partition=cfg.partition, parties=cfg.parties, k=cfg.k,
        kind=cfg.sketch, m=cfg.m, s=cfg.s, epsilon=cfg.epsilon, delta=cfg.delta, mechanism=cfg.mechanism,
        calibration=cfg.calibration, interpolate_p=cfg.interpolate_p, t_prime=cfg.t_prime,
        corrupt_parties=cfg.corrupt_parties, intercept=cfg.intercept and cfg.model != "lowrank",
        clip_bound=cfg.clip, share_mode=cfg.share_mode)
    t_spec = time.perf_counter() - t
    run = run_inprocess(spec, party_tables(spec, train), randomness, budget=budget_of(cfg))
    release = run.release
    V = training_matrix(spec, train)
    report: dict[str, Any] = {
        "model": cfg.model,
        "data": train.source,
        "n_train": train.n,
        "n_test": test.n if test is not None else 0,
        "columns": list(spec.column_names),
        "partition": spec.partition,
        "parties": len(spec.parties),
        "servers": spec.k,
        "share_mode": spec.share_mode,
        "sketch": {"kind": spec.sketch.kind, "m": spec.sketch.m, "s": spec.make_sketch().pieces,
                   "m_rule": choices.m_rule},
        "privacy": release.privacy,
        "randomness": randomness.label,
        "baseline_delta": baseline_delta(cfg),
        "release_sha256": release.sha256,
        "job_digest": spec.digest,
        "reproduction": spec.reproduction,
        "ledgers": run.ledgers,
    }
    t = time.perf_counter()
    rng = np.random.default_rng(np.frombuffer(randomness.child("baselines").bytes(16), dtype=np.uint64))
    report.update(report_for_release(cfg, spec, release, V, test, rng))
    t_fit = time.perf_counter() - t
    timing = {"spec": t_spec, **run.timing_s, "fit_and_baselines": t_fit,
              "total": time.perf_counter() - t_start}
    report["bytes_to_servers"] = run.bytes_to_server
    report["timing_s"] = {k: round(v, 4) for k, v in timing.items()}
    return report


def report_for_release(cfg: SimulateConfig, spec: JobSpec, release, V: np.ndarray, test: Table | None,
                       rng: np.random.Generator) -> dict[str, Any]:
    """Fit the configured model on a release and set it beside the baselines on the same data.

    Shared by ``simulate`` (in-process release) and ``demo`` (networked release), so the same
    seed gives the same numbers on both transports.
    """
    if cfg.model == "lowrank":
        return _lowrank_report(cfg, spec, release, V, rng)
    return _regression_report(cfg, spec, release, V, test, rng)


def _regression_metrics(predictor, spec: JobSpec, V: np.ndarray, lam: float, test: Table) -> dict[str, float]:
    feats = [c.name for c in spec.columns if c.role == "feature"]
    X_test = test.matrix(feats)
    y_test = test.columns[test.label]
    y_hat = predictor.predict(X_test)
    label = spec.label_index
    A = V[:, [j for j in range(spec.width) if j != label]]
    b = V[:, label]
    return {"r2": r2(y_test, y_hat), "mse": mse(y_test, y_hat), "phi": phi(A, b, predictor.coef_scaled_, lam)}


def baseline_delta(cfg: SimulateConfig) -> float:
    """δ for the Gaussian central/local baselines (a pure-ε Laplace job compares against δ = 1e-6)."""
    return cfg.delta if cfg.delta > 0 else 1e-6


def _regression_report(cfg: SimulateConfig, spec: JobSpec, release, V, test: Table, rng) -> dict[str, Any]:
    m = spec.sketch.m
    entry_var = release.noise_variance_per_column / m
    lam = cfg.lam if cfg.lam is not None else default_ridge_lambda(entry_var, m)
    model = make_estimator(cfg.model, lam=lam, rank=cfg.rank, debias=cfg.debias).fit(release)
    label = spec.label_index
    A = V[:, [j for j in range(spec.width) if j != label]]
    b = V[:, label]
    nonprivate = linear_predictor(solve_ridge(A, b, lam), release)
    delta = baseline_delta(cfg)
    central_fit = (ssp_ridge(A, b, lam, cfg.epsilon, delta, spec.clip_bound, rng) if cfg.model == "ridge"
                   else adassp(A, b, cfg.epsilon, delta, spec.clip_bound, rng))
    central = linear_predictor(central_fit.coef, release)
    local_rel = local_release(release, V, cfg.epsilon, delta, spec.clip_bound, rng)
    local_model = make_estimator(cfg.model, lam=lam, rank=cfg.rank, debias=cfg.debias).fit(local_rel)
    return {
        "coef": [float(c) for c in model.coef_],
        "intercept": float(model.intercept_),
        "lambda": lam,
        "lambda_rule": "given" if cfg.lam is not None else "default_ridge_lambda: v·√m (v: noise variance per scaled entry)",
        "debias": bool(getattr(model, "debias", False)),
        "metrics": _regression_metrics(model, spec, V, lam, test),
        "baselines": {
            "nonprivate": _regression_metrics(nonprivate, spec, V, lam, test),
            "central": {**_regression_metrics(central, spec, V, lam, test),
                        "method": "SSP" if cfg.model == "ridge" else "AdaSSP"},
            "local": _regression_metrics(local_model, spec, V, lam, test),
        },
    }


def _lowrank_report(cfg: SimulateConfig, spec: JobSpec, release, V, rng) -> dict[str, Any]:
    model = LowRank(cfg.rank).fit(release)
    exact = LowRank(cfg.rank).fit_matrix(V)
    delta = baseline_delta(cfg)
    central = mod_sulq(V, cfg.rank, cfg.epsilon, delta, rng, clip_norm=spec.clip_bound)
    local = LowRank(cfg.rank).fit(local_release(release, V, cfg.epsilon, delta, spec.clip_bound, rng))
    return {
        "rank": cfg.rank,
        "coef": model.components_.tolist(),
        "metrics": {"psi": psi(V, model.components_)},
        "baselines": {
            "nonprivate": {"psi": psi(V, exact.components_)},
            "central": {"psi": psi(V, central), "method": "MOD-SULQ"},
            "local": {"psi": psi(V, local.components_)},
        },
    }

"""``ltm simulate``: one LTM job in process, the model it yields, and the baselines beside it.

Pipeline: load or generate data → split train/test → build a validated job spec (defaults for m
and λ, see :mod:`ltm.sim.runtime.jobs`) → parties randomize and share → k servers store and apply the sketch →
the analyst reconstructs the DP sketch and fits the model → metrics on held-out data, next to the
non-private, central (SSP / AdaSSP / MOD-SULQ) and local baselines on the same training data.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ltm.analyst.baselines import adassp, cv_ridge_lambda, local_release, mod_sulq, ssp_ridge
from ltm.analyst.estimators import (
    LowRank,
    default_ridge_lambda,
    intercept_only,
    linear_predictor,
    make_estimator,
    release_lambda,
    solve_ridge,
)
from ltm.analyst.metrics import mse, phi, psi, r2
from ltm.analyst.random_features import FeatureSpaceModel, RFRidge
from ltm.clipping import clip_rows
from ltm.datasets.real import load_bundled
from ltm.datasets.synthetic import synthetic_lowrank, synthetic_nonlinear, synthetic_ridge
from ltm.datasets.tables import DataError, Table, load_data
from ltm.dp.defaults import DEFAULT_DELTA
from ltm.jobconfig import default
from ltm.jobspec import JobSpec
from ltm.party.ledger import Budget
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import RFFOptions, build_job, party_tables
from ltm.transforms import FeaturePipeline

MODELS = ("ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols", "rf_ridge")
TEST_FRACTION = 0.2
#: Public seed of the train/test split of CSV and bundled data (the same split in every run).
SPLIT_SEED = 20240601


@dataclass
class SimulateConfig:
    """Every knob of ``ltm simulate``: the job parameters' defaults come from :mod:`ltm.jobconfig`, which
    also generates the command's flags (same names, one to one)."""

    data: str | None = default("data")
    label: str | None = default("label")
    features: list[str] | None = default("features")
    synthetic: str | None = default("synthetic")  # "ridge" | "lowrank" | "nonlinear"
    n: int = default("n")
    d: int = default("d")
    partition: str = default("partition")
    parties: int = default("parties")
    k: int = default("k")
    sketch: str = default("sketch")
    m: int | None = default("m")
    s: int = default("s")
    epsilon: float = default("epsilon")
    delta: float = default("delta")
    mechanism: str = default("mechanism")
    calibration: str = default("calibration")
    interpolate_p: float | None = None
    t_prime: int = default("t_prime")
    corrupt_parties: int | None = default("corrupt_parties")  # None: 1 when parties hold several clients each
    model: str | None = default("model")
    lam: float | None = default("lam")
    debias: bool = default("debias")
    rank: int = default("rank")
    fallback: bool = default("fallback")  # the intercept-only model when the plan predicts R² ≤ 0
    clip: float = default("clip")
    intercept: bool = default("intercept")
    share_mode: str = default("share_mode")
    upload_mode: str = default("upload_mode")  # "auto": what a real job does (ltm.jobspec.default_upload_mode)
    # rf_ridge: public random features applied by the parties (ltm.transforms)
    #: with a database ``data``: its table or SELECT (ltm.party.sql_source)
    query: str | None = default("query")
    features_n: int = 16
    bandwidth: float | None = default("bandwidth")
    feature_map: str = default("feature_map")
    kernel: str = default("kernel")
    label_share: float | None = None
    seed: int | None = default("seed")
    job_id: str = "simulate"
    #: each simulated party's privacy budget (None: the party's default, ``ltm.party.ledger.Budget``)
    budget_epsilon: float | None = default("budget_epsilon")
    budget_delta: float | None = default("budget_delta")
    #: the parties' persistent ledger directory (``ltm party --ledger-dir``); None: in memory, per run
    ledger_dir: str | None = default("ledger_dir")
    #: the trust assumption: colluding servers tolerated (None: k − 1); 1 of 3 admits the replicated release
    colluding_servers: int | None = default("colluding_servers")
    #: the replicated release with every party's clipping proven on the shares (issue #30)
    verified_clipping: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def load_table(cfg: SimulateConfig, randomness: Randomness) -> tuple[Table, Table | None]:
    """(train, test) tables.  Synthetic data gets an independent test draw; CSV data a random split."""
    generators = {"ridge": synthetic_ridge, "nonlinear": synthetic_nonlinear}
    if cfg.synthetic in generators:
        # One draw (same generating coefficients), the last rows held out for testing.
        full = generators[cfg.synthetic](cfg.n + max(cfg.n // 4, 1000), cfg.d, randomness.child("data"))
        head = Table({c: v[:cfg.n] for c, v in full.columns.items()}, full.label, full.source)
        tail = Table({c: v[cfg.n:] for c, v in full.columns.items()}, full.label, full.source + " (held out)")
        return head, tail
    if cfg.synthetic == "lowrank":
        return synthetic_lowrank(cfg.n, cfg.d, cfg.rank, randomness.child("train")), None
    if cfg.synthetic is not None:
        raise DataError(f"unknown synthetic generator {cfg.synthetic!r}; choose ridge, lowrank or nonlinear")
    table = load_data(cfg.data, label=cfg.label, features=cfg.features, query=cfg.query) if cfg.data else load_bundled()
    if cfg.data is None and cfg.label is not None and cfg.label != table.label:
        raise DataError("--label needs --data (the bundled dataset has a fixed label)")
    # The held-out rows are a public choice, not a privacy mechanism: a fixed public split, so the
    # non-private baseline is the same in every run and only the noisy numbers vary.
    order = np.argsort(Randomness.seeded_insecure(SPLIT_SEED).child("split").stream().uniform(table.n))
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
    V = FeaturePipeline.for_spec(spec).vectors(table.columns, rows=table.n)
    if spec.partition == "rows":
        return clip_rows(V, spec.clip_bound, spec.clip_norm)
    for p in spec.parties:
        idx = spec.party_column_indices(p)
        V[:, idx] = clip_rows(V[:, idx], p.clip_bound, spec.clip_norm)
    return V


def exact_matrix(spec: JobSpec, table: Table) -> np.ndarray:
    """The transformed client rows (n, D) before clipping: what the non-private baseline is fitted on
    (the exact training rows, in the model's own coordinates)."""
    return FeaturePipeline.for_spec(spec).vectors(table.columns, rows=table.n)


def simulate(cfg: SimulateConfig, *, progress: bool = False) -> dict[str, Any]:
    """Run one simulated job; returns the JSON-ready report.  ``progress``: a progress bar of the
    parties' clients on stderr (on a terminal only: :mod:`ltm.progress`)."""
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
        clip_bound=cfg.clip, share_mode=cfg.share_mode, upload_mode=cfg.upload_mode,
        colluding_servers=cfg.colluding_servers, verified_clipping=cfg.verified_clipping,
        rff=(RFFOptions(cfg.features_n, cfg.bandwidth, cfg.feature_map, cfg.kernel, cfg.label_share)
             if cfg.model == "rf_ridge" else None))
    t_spec = time.perf_counter() - t
    run = run_inprocess(spec, party_tables(spec, train), randomness, budget=budget_of(cfg),
                        ledger_dir=cfg.ledger_dir, progress=progress)
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
        "upload_mode": spec.upload_mode,  # the mode that ran ("auto" resolved by ltm.jobspec.default_upload_mode)
        "upload_mode_requested": cfg.upload_mode,
        "sketch": {"kind": spec.sketch.kind, "m": spec.sketch.m, "s": spec.make_sketch().pieces,
                   "m_rule": choices.m_rule},
        "release_kind": spec.sketch.kind,
        "plan": choices.plan,
        "upload_values_per_client": spec.make_sketch().pieces * spec.upload_width,
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
    report.update(report_for_release(cfg, spec, release, V, test, rng, plan=choices.plan,
                                     exact=exact_matrix(spec, train)))
    t_fit = time.perf_counter() - t
    timing = {"spec": t_spec, **run.timing_s, "fit_and_baselines": t_fit,
              "total": time.perf_counter() - t_start}
    report["bytes_to_servers"] = run.bytes_to_server
    report["timing_s"] = {k: round(v, 4) for k, v in timing.items()}
    return report


def report_for_release(cfg: SimulateConfig, spec: JobSpec, release, V: np.ndarray, test: Table | None,
                       rng: np.random.Generator, plan: dict | None = None, *,
                       exact: np.ndarray | None = None) -> dict[str, Any]:
    """Fit the configured model on a release and set it beside the baselines on the same data.

    ``V``: the clipped rows the parties release (:func:`training_matrix`; the central and local
    baselines and φ use them); ``exact``: the same rows unclipped (:func:`exact_matrix`), on which
    the non-private regression baselines are fitted (default: ``V``).  ``plan``: the planner's output
    (``Plan.to_dict()``); when it warns that the predicted R² is ≤ 0 the released model is the
    intercept-only one unless ``cfg.fallback`` is off (:func:`fallback_reason`).  Shared by ``simulate``
    (in-process release) and ``demo`` (networked release), so the same seed gives the same numbers
    in process and over gRPC.
    """
    if cfg.model == "lowrank":
        return _lowrank_report(cfg, spec, release, V, rng)
    report = _regression_report(cfg, spec, release, V, test, rng, V if exact is None else exact,
                                fallback_reason(cfg, plan))
    if spec.transforms:
        report["transforms"] = [asdict(t) for t in spec.transforms]
    return report


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
    return cfg.delta if cfg.delta > 0 else DEFAULT_DELTA


def central_baselines(A: np.ndarray, b: np.ndarray, epsilon: float, delta: float, clip_bound: float,
                      rng: np.random.Generator) -> dict[str, Any]:
    """The central (trusted-curator) regression baselines, each with ITS OWN λ rule and the
    tight √2·C² Gram sensitivity: AdaSSP (Wang 2018, adaptive private λ) and SSP (λ = 0: OLS on
    the noisy sufficient statistics), both solved by ltm.analyst.gram.solve_gram, the LTM estimators' solver."""
    return {"AdaSSP": adassp(A, b, epsilon, delta, clip_bound, rng, tight=True),
            "SSP": ssp_ridge(A, b, 0.0, epsilon, delta, clip_bound, rng, tight=True)}


def own_scale_lambda(model: str, release, ridge_lam: float, ridge_rule: str) -> tuple[float, str]:
    """λ for the model's own Hessian.  Ridge solves (XᵀX + λI)w = Xᵀy; Wu et al.'s RMGM-OLS and
    DGM-OLS solve (XᵀX/n + λI)w = Xᵀy/n, so the same regularisation is λ_ridge/n on their scale
    (passing λ_ridge itself, 166 to 45,000, shrank every coefficient to 0: R² = 0.000).  RMGM-OLS on
    a sketch does not subtract the noise Gram E[NᵀN] ≈ v·I, which already regularises like a ridge
    of v: it keeps the paper's λ = 1e-5."""
    if model not in ("rmgm_ols", "dgm_ols"):
        return ridge_lam, ridge_rule
    if model == "rmgm_ols" and not release.lifted:
        return 1e-5, "Wu et al.'s λ = 1e-5 (the un-subtracted noise Gram v·I/n regularises RMGM-OLS)"
    n = max(int(release.n), 1)
    if model == "dgm_ols" and not release.lifted:
        # De-biased: X̃ᵀX̃ − v·I keeps NᵀN − E[NᵀN], whose spectrum reaches the Wishart edge
        # v_e(2√(m·p) + p) (the floor ltm.analyst.estimators.Ridge clamps to): adding it keeps the
        # Hessian positive definite where the ridge's clamp would act.
        m, p = release.matrix.shape[0], len(release.feature_indices)
        edge = release.noise_variance_per_column / max(m, 1) * (2.0 * math.sqrt(m * p) + p)
        return (ridge_lam + edge) / n, (f"(λ_ridge + v_e(2√(mp) + p))/n on the XᵀX/n + λI scale (the de-biased "
                                        f"noise Gram's spectral edge added); λ_ridge from {ridge_rule}")
    return ridge_lam / n, f"λ_ridge/n on the XᵀX/n + λI scale; λ_ridge from {ridge_rule}"


def fallback_reason(cfg: SimulateConfig, plan: dict | None) -> str:
    """Why the intercept-only model is released instead of ``cfg.model`` (empty: it is not): the
    plan predicts R² ≤ 0 (``Plan.warning``) and the fit did not ask for the regression anyway."""
    warning = str((plan or {}).get("warning") or "")
    return warning if warning and cfg.fallback and cfg.model != "rf_ridge" else ""


def _regression_report(cfg: SimulateConfig, spec: JobSpec, release, V, test: Table, rng,
                       exact: np.ndarray, fallback: str = "") -> dict[str, Any]:
    lam, lam_rule = release_lambda(release)
    if cfg.lam is not None:
        lam, lam_rule = cfg.lam, "given"
    fit_lam, fit_rule = (own_scale_lambda(cfg.model, release, lam, lam_rule) if cfg.lam is None
                         else (lam, lam_rule))

    def estimator(lam_: float):
        if cfg.model == "rf_ridge":  # ridge on the mapped vectors; predicts on raw inputs
            return RFRidge(spec, lam_, debias=cfg.debias)
        return make_estimator(cfg.model, lam=lam_, rank=cfg.rank, debias=cfg.debias)

    # Coefficients over the release's regressors → a model that predicts raw rows.
    wrap = (lambda w: FeatureSpaceModel(w, spec)) if spec.transforms else (lambda w: linear_predictor(w, release))
    model = intercept_only(release) if fallback else estimator(fit_lam).fit(release)
    label = spec.label_index
    A = V[:, [j for j in range(spec.width) if j != label]]
    b = V[:, label]
    # the non-private fits: on the exact (unclipped) training rows, as the summary says
    A_exact, b_exact = exact[:, [j for j in range(spec.width) if j != label]], exact[:, label]
    ols = wrap(solve_ridge(A_exact, b_exact, 0.0))
    lam_cv = cv_ridge_lambda(A_exact, b_exact, rng)
    ridge_cv = wrap(solve_ridge(A_exact, b_exact, lam_cv))
    delta = baseline_delta(cfg)
    central = {name: {**_regression_metrics(wrap(fit.coef), spec, V, lam, test), "method": name, "lambda": fit.lam}
               for name, fit in central_baselines(A, b, cfg.epsilon, delta, spec.clip_bound, rng).items()}
    best = max(central, key=lambda k: central[k]["r2"])
    local_rel = local_release(release, V, cfg.epsilon, delta, spec.clip_bound, rng)
    local_model = estimator(default_ridge_lambda(local_rel.noise_variance_per_column / local_rel.n,
                                                 local_rel.n)).fit(local_rel)
    metrics = _regression_metrics(model, spec, V, lam, test)
    return {
        "released_model": "intercept-only" if fallback else cfg.model,
        "fallback": {"used": bool(fallback), "why": fallback or "the plan predicts R² > 0 (or no plan)",
                     "disabled": not cfg.fallback},
        "coef": [float(c) for c in model.coef_],
        "intercept": float(model.intercept_),
        "lambda": fit_lam,
        "lambda_rule": fit_rule,
        "debias": bool(getattr(model, "debias", False)),
        "metrics": metrics,
        "baselines": {
            "nonprivate": {**_regression_metrics(ols, spec, V, lam, test), "method": "OLS"},
            "nonprivate_ridge_cv": {**_regression_metrics(ridge_cv, spec, V, lam, test), "method": "ridge (5-fold CV λ)",
                                    "lambda": lam_cv},
            "central": {**central[best], "method": f"best central: {best}"},
            "central_adassp": central["AdaSSP"],
            "central_ssp": central["SSP"],
            "local": _regression_metrics(local_model, spec, V, lam, test),
        },
        "gap_to_best_central_r2": metrics["r2"] - central[best]["r2"],
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

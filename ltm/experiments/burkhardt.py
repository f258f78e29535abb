"""Burkhardt, Keller, Orlandi, Schwiegelshohn — the paper's utility experiments (its §6.2).

Scenarios (each returns one row per series):

* ``burkhardt.ridge_synthetic`` — Fig. 3 / Fig. 4: ridge φ vs n on the paper's synthetic data.
* ``burkhardt.ridge_real``      — Table 8: ridge φ on household power / road network (our subsets).
* ``burkhardt.lowrank_synthetic`` — Fig. 2: low-rank ψ vs n on the paper's spectral-gap data.
* ``burkhardt.lowrank_real``      — Table 7: low-rank ψ on household power / road network.

Series (``params["series"]``; ridge and low rank share the LTM keys):

==================  =========================================================================
``tight``           LTM Gaussian, the project's correct calibration (analytic Gaussian, L = the
                    smallest row load) — the paper's "ours", p = 1.  (Low rank: ``gauss_tight``.)
``paper``           LTM Gaussian, Cor 4.7 EXACTLY AS PRINTED (not private as printed:
                    see ``docs/experiments/burkhardt.md``);
                    below its threshold n ≤ 8m·ln(dm/δ)+s+t′ the paper's zero-output branch
                    applies (release = 0).  (Low rank: ``gauss_paper``.)
``p0.9`` … ``p0``   LTM Gaussian with ``interpolate(p)``: σ_c² = σ_Y²·L^(−p) (the paper's §6.2
                    σ² ∝ n^(−p) family, its constant unstated there; p = 1 is ``tight``,
                    p = 0 is every client fully noised but still sketched).
``debiased``        ridge only: the ``tight`` release with our de-biased ridge (an extra series,
                    not in the paper).
``local``           the local model: every client adds the full Gaussian noise (σ for Δ = 2C)
                    and the analyst fits on the n noisy rows, unsketched.
``ssp``             ridge only: central SSP with its own rule (Wang 2018's SSP: λ = 0, OLS on the noisy
                    sufficient statistics, tight √2·C² sensitivity; analyst/baselines.ssp_ridge).  Before
                    issue #11 it reused the problem's λ, which at small ε left it far below what SSP achieves.
``adassp``          ridge only: central AdaSSP (Wang 2018) with its own adaptive private λ, tight √2·C²
                    sensitivity (analyst/baselines.adassp).  φ is still measured on the problem's objective.
``modsulq_paper``   low rank only: central MOD-SULQ with Chaudhuri et al.'s own noise formula.
``modsulq_analytic``  low rank only: MOD-SULQ with the analytic Gaussian calibration.
``laplace_exp``     low rank only: the paper's EXPERIMENTAL "LTM Laplace": the sum of m Lap(1/ε)
                    draws added to every entry of SA (reproduction only; not a calibrated mechanism).
``laplace_tight``   low rank only: our pure-ε LTM (sparse sketch, ℓ1 clip, Γ-difference noise).
``laplace_paper``   low rank only: Cor 4.10 as printed (dense sketch, b = 2ηm²d/ε).
``sketch``          reference: the noiseless sketch, solved the same way (sketching error alone).
``zero``            ridge reference: x = 0 (φ of predicting nothing).
==================  =========================================================================

Our defaults where the paper's §6.2 is silent (it states neither δ, m, s, t′ nor the scaling; its
MPC runs use m = 100): δ = 1e-5, m = 100, s = 1, t′ = 0, η = C = 1 with the data divided by
its largest row norm (``scaling``), the faithful analyst (plain ridge with the original λ, plain
SVD; no de-biasing).  Every LTM job is a real job spec; ``path`` says whether it is released by
the real party/server/analyst cores or by the exact fast path (ltm/experiments/ltmjobs.py).
"""
from __future__ import annotations

import numpy as np

from ltm.analyst.baselines import adassp, local_release, mod_sulq_noise_scale, ssp_ridge, symmetric_gaussian
from ltm.analyst.estimators import LowRank, Ridge, solve_ridge
from ltm.analyst.metrics import gram_matrix, psi_from_gram, ridge_objective, ridge_optimum
from ltm.datasets.real import features_only, load_dataset
from ltm.datasets.synthetic import synthetic_lowrank, synthetic_ridge
from ltm.datasets.tables import Table, public_columns
from ltm.experiments import ltmjobs
from ltm.experiments.ltmjobs import Mechanism
from ltm.experiments.registry import register
from ltm.experiments.seeds import numpy_rng, subseed
from ltm.randomness import Randomness
from ltm.sketch import Sketch

P_VALUES = (0.9, 0.8, 0.7, 0.6, 0.5, 0.0)


def _p_key(p: float) -> str:
    return f"p{p:g}"


_P_COLORS = {0.9: "#1b9e77", 0.8: "#66a61e", 0.7: "#e6ab02", 0.6: "#a6761d", 0.5: "#e7298a", 0.0: "#3b0f70"}

#: key → (series label, paper label, matplotlib style)
SERIES: dict[str, tuple[str, str, dict]] = {
    "tight": ("LTM tight (p=1)", "Ours (LTM)", {"color": "#ff7f0e", "lw": 2.2, "marker": "o", "zorder": 5}),
    "paper": ("LTM Cor 4.7 as printed", "Ours (LTM)", {"color": "#d62728", "ls": "--", "marker": "s"}),
    "gauss_tight": ("LTM Gauss tight (p=1)", "LTM Gauss", {"color": "#ff7f0e", "lw": 2.2, "marker": "o", "zorder": 5}),
    "gauss_paper": ("LTM Gauss Cor 4.7 as printed", "LTM Gauss", {"color": "#d62728", "ls": "--", "marker": "s"}),
    "debiased": ("LTM tight, de-biased ridge", "", {"color": "#9467bd", "ls": "-.", "marker": "D"}),
    "local": ("local", "Local", {"color": "#7f7f7f", "lw": 2, "marker": "v"}),
    "ssp": ("central SSP (own λ = 0)", "Central (SSP)", {"color": "#1f77b4", "lw": 2, "marker": "^"}),
    "adassp": ("central AdaSSP (own λ)", "", {"color": "#17becf", "lw": 2, "marker": "<"}),
    "modsulq_paper": ("central MOD-SULQ (paper's formula)", "Central (MOD-SULQ)",
                      {"color": "#1f77b4", "lw": 2, "marker": "^"}),
    "modsulq_analytic": ("central MOD-SULQ (analytic)", "Central (MOD-SULQ)",
                         {"color": "#6baed6", "ls": "--", "marker": "^"}),
    "laplace_exp": ("LTM Laplace, paper's experiment", "LTM Laplace", {"color": "#bcbd22", "lw": 2, "marker": "P"}),
    "laplace_tight": ("LTM Laplace tight", "LTM Laplace", {"color": "#8c6d31", "ls": "-", "marker": "X"}),
    "laplace_paper": ("LTM Laplace Cor 4.10 (dense)", "LTM Laplace", {"color": "#e377c2", "ls": "--", "marker": "X"}),
    "sketch": ("sketch, no noise", "", {"color": "#8c564b", "ls": ":", "marker": "."}),
    "zero": ("x = 0", "", {"color": "#000000", "ls": ":", "lw": 1.4, "marker": ""}),
}
for _p in P_VALUES:
    SERIES[_p_key(_p)] = (f"LTM p={_p:g}", "", {"color": _P_COLORS[_p], "lw": 1.2, "marker": ".", "alpha": 0.9})
    SERIES["gauss_" + _p_key(_p)] = SERIES[_p_key(_p)]

STYLES = {label: style for label, _, style in SERIES.values()}


def _label(key: str) -> str:
    return SERIES[key][0]


def _paper_label(key: str) -> str:
    return SERIES[key][1]


# ---------------------------------------------------------------------------------- data
def _ridge_scaling_columns(table: Table, scaling: str):
    if scaling.startswith("maxnorm"):
        return ltmjobs.maxnorm_columns(table)
    if scaling == "minmax":
        return ltmjobs.minmax_columns(table)
    if scaling == "standardise":
        return public_columns(table, intercept=False, clip_bound=1.0)
    raise ValueError(f"unknown scaling {scaling!r}; choose maxnorm-mu2n, maxnorm-mu21, maxnorm, minmax or standardise")


def synthetic_ridge_table(n: int, d: int, scaling: str, seed: int) -> Table:
    """The paper's §6.2 synthetic ridge data: A ~ N(0,1), x_gen ~ N(0, μ²), b = A·x_gen (no label
    noise).  μ² = n for the paper's figures (``maxnorm-mu2n``; with ``standardise`` μ does not
    matter), μ² = 1 for ``maxnorm-mu21``."""
    table = synthetic_ridge(n, d, Randomness.seeded_insecure(subseed(seed, "data")))
    if scaling == "maxnorm-mu2n":
        table.columns["y"] = table.columns["y"] * np.sqrt(n)
    return table


def _mech(params: dict, **overrides) -> Mechanism:
    base = dict(m=int(params.get("m", 100)), s=int(params.get("s", 1)), epsilon=float(params["epsilon"]),
                delta=float(params.get("delta", 1e-5)), t_prime=int(params.get("t_prime", 0)),
                load_fraction=float(params.get("load_fraction", 1.0)))
    base.update(overrides)
    return Mechanism(**base)


def _ltm_mechanism(key: str, params: dict) -> Mechanism:
    k = key.removeprefix("gauss_")
    if k == "tight":
        return _mech(params, calibration="tight")
    if k == "paper":
        return _mech(params, calibration="paper")
    if k.startswith("p"):
        return _mech(params, calibration="interpolate", interpolate_p=float(k[1:]))
    if key == "laplace_tight":
        return _mech(params, mechanism="laplace", calibration="tight")
    if key == "laplace_paper":
        return _mech(params, mechanism="laplace", calibration="paper", kind="dense", s=int(params.get("m", 100)))
    raise ValueError(f"not an LTM series: {key!r}")


class _Jobs:
    """The LTM jobs of one cell: one public sketch seed for all of them, one release per series.

    The sketch placement, row loads, transformed rows V and the noiseless sketch are derived once
    per (sketch shape, column transform) and shared by every series of the cell.
    """

    def __init__(self, params: dict, seed: int, columns, table: Table) -> None:
        self.params, self.seed, self.columns, self.table = params, seed, columns, table
        self.path = params.get("path", "auto")
        self.k = int(params.get("servers", 3))
        self.parties = int(params.get("parties", 2))
        self.real_budget = int(params.get("real_budget", ltmjobs.DEFAULT_REAL_BUDGET))
        self.sketch_seed = subseed(seed, "sketch")
        self._cache: dict[tuple, object] = {}
        self.redraws = 0
        # The public sketch is drawn before (and independently of) the data.  At small n/m a row
        # can stay empty (n = 1000, m = 100: probability ≈ 0.4%), which the release gate refuses
        # (no honest load); like any operator, draw a fresh public seed then.
        base = Mechanism(m=int(params.get("m", 100)), s=int(params.get("s", 1)))
        while int(self.loads(base).min()) < 1 and self.redraws < 20:
            self.redraws += 1
            self.sketch_seed = subseed(seed, "sketch", self.redraws)
            self._cache.clear()

    def _cached(self, key: tuple, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def sketch(self, mech: Mechanism) -> Sketch:
        s = mech.m if mech.kind == "dense" else mech.s
        return self._cached(("sketch", mech.kind, mech.m, s), lambda: Sketch(
            mech.kind, mech.m, self.table.n, s, bytes.fromhex(ltmjobs.sketch_seed_hex(self.sketch_seed))))

    def loads(self, mech: Mechanism) -> np.ndarray:
        sk = self.sketch(mech)
        return self._cached(("loads", sk.kind, sk.m, sk.s), lambda: sk.row_loads())

    def V(self, columns, clip_norm: str) -> np.ndarray:
        key = ("V", tuple((c.name, c.center, c.scale) for c in columns), clip_norm)
        return self._cached(key, lambda: ltmjobs.transform_columns(columns, self.table, 1.0, clip_norm))

    def clean(self, mech: Mechanism, columns) -> tuple[np.ndarray, np.ndarray]:
        sk = self.sketch(mech)
        key = ("clean", sk.kind, sk.m, sk.s, tuple((c.name, c.center, c.scale) for c in columns), mech.clip_norm)
        return self._cached(key, lambda: ltmjobs.noiseless_sketch(sk, self.V(columns, mech.clip_norm)))

    def spec(self, key: str, mech: Mechanism, columns=None):
        return ltmjobs.try_make_spec(columns or self.columns, self.table.n, mech,
                                     job_id=f"c{self.seed:x}-{key}", sketch_seed=self.sketch_seed, k=self.k,
                                     parties=self.parties, endpoints=ltmjobs.endpoints(self.k),
                                     loads=self.loads(mech))

    def release(self, key: str, spec, mech: Mechanism):
        cols = spec.columns
        taken = ltmjobs.choose_path(self.path, spec, self.real_budget)
        clean = self.clean(mech, cols) if taken == "fast" else None
        return ltmjobs.release(spec, self.table, self.V(cols, spec.clip_norm), subseed(self.seed, "release", key),
                               taken, self.real_budget, clean)


def _ridge_scorer(A: np.ndarray, b: np.ndarray, lam: float):
    """φ(x) = 1 + (x − x_opt)ᵀ(AᵀA + λI)(x − x_opt) / OPT — the ridge objective is exactly quadratic
    around its minimiser, so after one pass over the data every φ costs O(d²) (and is more accurate
    than differencing two large objectives)."""
    x_opt = ridge_optimum(A, b, lam)
    opt = ridge_objective(A, b, x_opt, lam)
    H = gram_matrix(A) + lam * np.eye(A.shape[1])

    def score(x: np.ndarray) -> float:
        e = np.asarray(x, dtype=np.float64) - x_opt
        return float(1.0 + (e @ H @ e) / opt) if opt > 0 else (1.0 if not e.any() else float("inf"))

    return score, opt


def _why_zero(reason: str) -> str:
    if "too small for Corollary 4.7" in reason:
        return "n below Cor 4.7's threshold: zero-output branch"
    return reason[:100]


def _row(key: str, metric: str, value: float, **extra) -> dict:
    return {"series": _label(key), "key": key, "paper_label": _paper_label(key), metric: float(value), **extra}


def _mech_fields(mech: Mechanism | None) -> dict:
    if mech is None:
        return {"mechanism": "", "calibration": "", "p": None}
    cal = mech.calibration if mech.calibration != "interpolate" else f"interpolate({mech.interpolate_p:g})"
    return {"mechanism": mech.mechanism, "calibration": cal,
            "p": mech.interpolate_p if mech.interpolate_p is not None else (1.0 if mech.calibration == "tight" and mech.mechanism == "gaussian" else None)}


# ---------------------------------------------------------------------------------- ridge
def ridge_rows(table: Table, params: dict, seed: int) -> list[dict]:
    """One ridge cell on ``table`` (label last): one row per series, metric φ."""
    lam = float(params["lam"])
    eps, delta = float(params["epsilon"]), float(params.get("delta", 1e-5))
    columns = _ridge_scaling_columns(table, params.get("scaling", "maxnorm"))
    jobs = _Jobs(params, seed, columns, table)
    tight_mech = _ltm_mechanism("tight", params)
    tight_spec, why = jobs.spec("tight", tight_mech)
    if tight_spec is None:
        raise ValueError(f"the tight job cannot run: {why}")
    V = jobs.V(columns, "l2")
    A, b = V[:, :-1], V[:, -1]
    score, opt = _ridge_scorer(A, b, lam)
    rng = numpy_rng(seed, "baselines")
    rows: list[dict] = []
    releases: dict = {}
    common = {"n_used": table.n, "opt_objective": opt, **({"sketch_redraws": jobs.redraws} if jobs.redraws else {})}
    for key in params["series"]:
        if key in ("tight", "paper") or key.startswith("p"):
            mech = tight_mech if key == "tight" else _ltm_mechanism(key, params)
            spec, why = (tight_spec, "") if key == "tight" else jobs.spec(key, mech)
            if spec is None:  # the paper's zero-output branch: every client sends zeros
                rows.append(_row(key, "phi", score(np.zeros(A.shape[1])), **_mech_fields(mech), zero_output=True,
                                 path="zero-output", note=_why_zero(why), **common))
                continue
            rel, taken = jobs.release(key, spec, mech)
            releases[key] = rel
            coef = Ridge(lam, debias=False).fit(rel).coef_scaled_
            rows.append(_row(key, "phi", score(coef), **_mech_fields(mech), zero_output=False, path=taken,
                             release_sha256=rel.sha256, **ltmjobs.sigma_summary(rel), **common))
        elif key == "debiased":
            rel = releases.get("tight") or jobs.release("tight", tight_spec, tight_mech)[0]
            releases["tight"] = rel
            coef = Ridge(lam, debias=True).fit(rel).coef_scaled_
            rows.append(_row(key, "phi", score(coef), **_mech_fields(tight_mech), zero_output=False,
                             path="(tight release)", **common))
        elif key == "local":
            template = ltmjobs.zero_release(tight_spec.columns, tight_spec.sketch.m, table.n)
            local = local_release(template, V, eps, delta, tight_spec.clip_bound, rng)
            coef = Ridge(lam, debias=False).fit(local).coef_scaled_
            rows.append(_row(key, "phi", score(coef), mechanism="gaussian", calibration="local", path="direct",
                             sigma_client=local.privacy["sigma_client"], **common))
        elif key == "ssp":  # its own rule: λ = 0 (not the problem's λ)
            fit = ssp_ridge(A, b, 0.0, eps, delta, tight_spec.clip_bound, rng, tight=True)
            rows.append(_row(key, "phi", score(fit.coef), mechanism="gaussian", calibration="central",
                             path="direct", projected=fit.projected, central_lambda=fit.lam, **common))
        elif key == "adassp":
            fit = adassp(A, b, eps, delta, tight_spec.clip_bound, rng, tight=True)
            rows.append(_row(key, "phi", score(fit.coef), mechanism="gaussian", calibration="central",
                             path="direct", projected=fit.projected, central_lambda=fit.lam, **common))
        elif key == "zero":
            rows.append(_row(key, "phi", score(np.zeros(A.shape[1])), path="direct", **common))
        elif key == "sketch":
            clean, _ = jobs.clean(tight_mech, columns)
            M = clean * tight_spec.make_sketch().scale
            rows.append(_row(key, "phi", score(solve_ridge(M[:, :-1], M[:, -1], lam)), path="direct", **common))
        else:
            raise ValueError(f"unknown ridge series {key!r}")
    return rows


def _ridge_cost(p: dict) -> float:
    return float(p.get("n", 100_000)) * (1 + len(p.get("series", ())) / 4)


@register("burkhardt.ridge_synthetic", networked=True, cost=_ridge_cost, styles=STYLES)
def ridge_synthetic(params: dict, seed: int) -> list[dict]:
    """Fig. 3/4: ridge φ vs n; params n, d, lam, epsilon, scaling, series, path (+ delta, m, s)."""
    table = synthetic_ridge_table(int(params["n"]), int(params.get("d", 10)), params.get("scaling", "maxnorm-mu2n"),
                                  seed)
    return ridge_rows(table, params, seed)


@register("burkhardt.ridge_real", networked=True, cost=lambda p: 100_000.0 if p.get("dataset") == "power" else 5000.0,
          styles=STYLES)
def ridge_real(params: dict, seed: int) -> list[dict]:
    """Table 8: ridge φ on a bundled real dataset; params dataset, lam, epsilon, scaling, series."""
    table = load_dataset(params["dataset"])
    return ridge_rows(table, params, seed)


# ---------------------------------------------------------------------------------- low rank
def _lowrank_columns(table: Table, scaling: str, norm: str = "l2"):
    if scaling == "maxnorm":
        return ltmjobs.maxnorm_columns(table, norm=norm)
    if scaling == "minmax":
        return ltmjobs.minmax_columns(table, norm=norm)
    raise ValueError(f"unknown low-rank scaling {scaling!r}; choose maxnorm or minmax")


def _top_components(sym: np.ndarray, rank: int) -> np.ndarray:
    """Top-``rank`` eigenvectors of a symmetric (D, D) matrix — for a Gram matrix MᵀM these are the
    top right singular vectors of M, what :class:`LowRank` computes by SVD (same sign convention)."""
    w, U = np.linalg.eigh((sym + sym.T) / 2.0)
    X = U[:, np.argsort(w)[::-1][:rank]]
    pivot = np.argmax(np.abs(X), axis=0)
    signs = np.sign(X[pivot, np.arange(rank)])
    signs[signs == 0] = 1.0
    return X * signs


def lowrank_rows(table: Table, params: dict, seed: int) -> list[dict]:
    """One low-rank cell on ``table`` (no label): one row per series, metric ψ."""
    rank = int(params["rank"])
    eps, delta = float(params["epsilon"]), float(params.get("delta", 1e-5))
    scaling = params.get("scaling", "maxnorm")
    columns = _lowrank_columns(table, scaling)
    jobs = _Jobs(params, seed, columns, table)
    tight_mech = _ltm_mechanism("gauss_tight", params)
    tight_spec, why = jobs.spec("gauss_tight", tight_mech)
    if tight_spec is None:
        raise ValueError(f"the tight job cannot run: {why}")
    V = jobs.V(columns, "l2")
    G = gram_matrix(V)
    n = table.n
    score = lambda X: psi_from_gram(G, X, n)  # noqa: E731
    rng = numpy_rng(seed, "baselines")
    rows: list[dict] = []
    common = {"n_used": n, "rank": rank, **({"sketch_redraws": jobs.redraws} if jobs.redraws else {})}
    l1_columns = None
    for key in params["series"]:
        if key.startswith("gauss_") or key in ("laplace_tight", "laplace_paper"):
            mech = _ltm_mechanism(key, params)
            cols = columns
            if mech.mechanism == "laplace":
                l1_columns = l1_columns or _lowrank_columns(table, scaling, norm="l1")
                cols = l1_columns
            spec, why = (tight_spec, "") if key == "gauss_tight" else jobs.spec(key, mech, cols)
            if spec is None:
                zeros = np.zeros((mech.m, len(cols)))
                rows.append(_row(key, "psi", score(LowRank(rank).fit_matrix(zeros).components_),
                                 **_mech_fields(mech), zero_output=True, path="zero-output", note=_why_zero(why), **common))
                continue
            rel, taken = jobs.release(key, spec, mech)
            X = LowRank(rank).fit(rel).components_
            rows.append(_row(key, "psi", score(X), **_mech_fields(mech), zero_output=False, path=taken,
                             release_sha256=rel.sha256, **ltmjobs.sigma_summary(rel), **common))
        elif key == "laplace_exp":
            clean, _ = jobs.clean(tight_mech, columns)
            m = tight_spec.sketch.m
            noise = numpy_rng(seed, "laplace-exp").laplace(0.0, 1.0 / eps, size=(m, *clean.shape)).sum(axis=0)
            X = LowRank(rank).fit_matrix(clean * tight_spec.make_sketch().scale + noise).components_
            rows.append(_row(key, "psi", score(X), mechanism="laplace", calibration="paper experiment (Σ m Lap(1/ε))",
                             path="direct", **common))
        elif key == "local":
            template = ltmjobs.zero_release(tight_spec.columns, tight_spec.sketch.m, n)
            local = local_release(template, V, eps, delta, tight_spec.clip_bound, rng)
            rows.append(_row(key, "psi", score(_top_components(gram_matrix(local.matrix), rank)), mechanism="gaussian",
                             calibration="local", path="direct", sigma_client=local.privacy["sigma_client"], **common))
        elif key in ("modsulq_paper", "modsulq_analytic"):
            # ltm.analyst.baselines.mod_sulq, with the Gram of the (already norm ≤ 1) rows computed once per cell.
            cal = key.split("_", 1)[1]
            beta = mod_sulq_noise_scale(n, V.shape[1], eps, delta, calibration=cal)
            noisy = G / n + symmetric_gaussian(V.shape[1], beta, rng)
            rows.append(_row(key, "psi", score(_top_components(noisy, rank)), mechanism="gaussian",
                             calibration=f"central ({cal})", path="direct", beta=beta, **common))
        elif key == "sketch":
            clean, _ = jobs.clean(tight_mech, columns)
            rows.append(_row(key, "psi", score(LowRank(rank).fit_matrix(clean).components_), path="direct", **common))
        else:
            raise ValueError(f"unknown low-rank series {key!r}")
    return rows


@register("burkhardt.lowrank_synthetic", networked=True, cost=lambda p: float(p.get("n", 1e5)) * p.get("d", 50) / 10,
          styles=STYLES)
def lowrank_synthetic(params: dict, seed: int) -> list[dict]:
    """Fig. 2: low-rank ψ vs n; params n, d, rank, epsilon, series, path (+ delta, m, s)."""
    n, d, rank = int(params["n"]), int(params.get("d", 50)), int(params["rank"])
    table = synthetic_lowrank(n, d, rank, Randomness.seeded_insecure(subseed(seed, "data")))
    return lowrank_rows(table, params, seed)


@register("burkhardt.lowrank_real", networked=True, cost=lambda p: 100_000.0 if p.get("dataset") == "power" else 5000.0,
          styles=STYLES)
def lowrank_real(params: dict, seed: int) -> list[dict]:
    """Table 7: low-rank ψ on a bundled real dataset's feature columns; params dataset, rank, epsilon."""
    table = features_only(load_dataset(params["dataset"]))
    rank = params.get("rank")
    if rank is None or rank == "paper":
        params = {**params, "rank": {"power": 3, "elevation": 1}[params["dataset"]]}
    return lowrank_rows(table, params, seed)

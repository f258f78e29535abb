"""Liao, Needell & Xue, *Differentially private random feature model* — reproduced, with the
sensitivity corrected, and random features through the LTM (arXiv 2412.04785 v1; write-up
``docs/experiments/liao.md``).

Scenarios (one cell = one repetition; rows carry ``series`` and ``test_error`` = MSE on the
paper's normalised label scale unless stated):

``liao.synthetic_n`` (Figs 1, 2)      test error vs N; f₁ (d = 5) / f₂ (d = 100), ε ∈ {0.5, 1}.
``liao.synthetic_m`` (Fig 3)          test error vs m, N = 2m (the code; the paper says m + 200).
``liao.real_eps`` (Fig 4)             medical cost / red wine, test error vs N for ε ∈ {0.25, 0.5, 1}.
``liao.real_sgd`` (Figs 5, 6)         vs the SGD baseline of [25] at three step sizes, ε = 0.5.
``liao.table1`` (Table 1)             pinv vs randomised Kaczmarz: private test error and time.
``liao.fairness`` (Figs 7, 8)         excessive-risk gaps of the RF model vs private RLS per group.
``liao.ltm`` (ours, not in the paper) private random-feature ridge THROUGH THE LTM vs private
                                      linear ridge through the LTM at ε = 1 (the real pipeline).

Series of the paper's figures (same non-private solution c♯, independent noise streams):

* ``Ours (reference code, NOT DP)`` — Algorithm 1 as the authors' code runs it: √(2/N)·cos
  features, Δ = 4/√N (2/√N for Fig 5 medical), classical σ: √N too little noise,
  since Lemma 6's Δ is for the unnormalised features (``docs/experiments/liao.md``);
* ``Ours certified (DP)`` — the corrected Algorithm 1 (``ltm.analyst.dprf``, mode ``certified``): labels
  clipped to |y| ≤ B, c♯ clipped to R = B√m/√(1−2η), analytic Gaussian for Δ = 2R;
* ``Gamma [20] (ref. Δ)`` — Chaudhuri et al.'s noise with the code's Δ (pure ε-DP only if Δ were right);
* ``SGD [25] …`` — Wang & Guo's private SGD as the code computes it (§4.1);
* ``Non-private`` (the same c♯), ``predict zero`` and ``predict train mean``
  references (ours, not in the paper: on the real data the non-private RF model is sometimes no
  better than they are).

Features: the code's ``RF_Gaussian(gamma)`` draws ω with std 2γ; we use that std (``omega_std``),
i.e. ``bandwidth = 1/omega_std`` of :class:`ltm.transforms.RandomFeatures` (``cos`` map), with a
public seed per repetition.  Randomness is seeded: these runs are NOT private releases.
"""
from __future__ import annotations

import csv
import hashlib
import io
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ltm.analyst.dprf import (
    algorithm1_calibration,
    gamma_output_perturbation,
    gaussian_output_perturbation,
    min_norm,
    sgd_random_features,
)
from ltm.datasets.real import DATA_DIR
from ltm.experiments.registry import register
from ltm.experiments.seeds import numpy_rng, subseed
from ltm.randomness import Randomness
from ltm.transforms import RandomFeatures, rff_spec

WINE_RED_FILE = "winequality-red.csv"
WINE_RED_SHA256 = "4a402cf041b025d4566d954c3b9ba8635a3a8a01e039005d97d6a710278cf05e"
WINE_WHITE_FILE = "winequality-white.csv"
WINE_WHITE_SHA256 = "76c3f809815c17c07212622f776311faeb31e87610d52c26d87d6e361b169836"
DELTA = 1e-5

S_NP = "Non-private"
S_REF = "Ours (reference code, NOT DP)"
S_CERT = "Ours certified (DP)"
S_GAMMA = "Gamma [20] (ref. Δ)"
S_SGD = "SGD [25]"
S_ZERO = "predict zero"
S_MEAN = "predict train mean"
STYLES = {
    S_NP: {"color": "black", "marker": ".", "linestyle": ":"},
    S_REF: {"color": "tab:blue", "marker": "o"},
    S_CERT: {"color": "tab:green", "marker": "s"},
    S_GAMMA: {"color": "tab:red", "marker": "v"},
    S_SGD: {"color": "tab:orange", "marker": "^"},
    S_ZERO: {"color": "grey", "linestyle": "--"},
    S_MEAN: {"color": "grey", "linestyle": "-."},
    "LTM rf_ridge": {"color": "tab:green", "marker": "s"},
    "LTM ridge (linear)": {"color": "tab:blue", "marker": "o"},
    "non-private rf_ridge": {"color": "tab:green", "linestyle": ":"},
    "non-private ridge (linear)": {"color": "tab:blue", "linestyle": ":"},
}


# ------------------------------------------------------------------------------------------- data
def f1(X: np.ndarray) -> np.ndarray:
    """Test function 1: √(1 + ‖x‖₂)."""
    return np.sqrt(1.0 + np.linalg.norm(X, axis=1))


def f2(X: np.ndarray) -> np.ndarray:
    """Test function 2: Σ_i exp(−|x_i|)."""
    return np.exp(-np.abs(X)).sum(axis=1)


FUNCTIONS = {"f1": f1, "f2": f2}


def synthetic_data(n_total: int, d: int, fn: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The code's ``generate_data``: x ~ N(0, I_d), y = f(x), y /= ‖y‖₂ over ALL n_total labels
    (data-dependent normalisation: part of the reproduction, not DP)."""
    X = rng.standard_normal((n_total, d))
    y = FUNCTIONS[fn](X)
    return X, y / np.linalg.norm(y)


def _read(path: Path, sha256: str) -> str:
    raw = path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise ValueError(f"{path}: SHA-256 mismatch; the bundled file was modified (ltm/datasets/data/README.md)")
    return raw.decode("utf-8-sig")


def load_wine(color: str = "red") -> tuple[np.ndarray, np.ndarray, list[str]]:
    """UCI wine quality (red 1599 × 12 or white 4898 × 12), raw units: (X, quality, feature names)."""
    name, sha = (WINE_RED_FILE, WINE_RED_SHA256) if color == "red" else (WINE_WHITE_FILE, WINE_WHITE_SHA256)
    rows = [r for r in csv.reader(io.StringIO(_read(DATA_DIR / name, sha)), delimiter=";") if r]
    header = [h.strip().strip('"') for h in rows[0]]
    table = np.array([[float(v) for v in r] for r in rows[1:]])
    return table[:, :-1], table[:, -1], header[:-1]


def load_medical() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Medical cost (insurance.csv) with the code's ``get_dummies(drop_first=False)``: age, bmi,
    children, sex_female, sex_male, smoker_no, smoker_yes, 4 regions (11 features), raw units."""
    from ltm.experiments.wu import load_insurance

    X9, y, names = load_insurance()
    col = {n: i for i, n in enumerate(names)}
    sex, smoker = X9[:, col["sex_male"]], X9[:, col["smoker_yes"]]
    regions = [i for n, i in col.items() if n.startswith("region_")]
    X = np.column_stack([X9[:, col["age"]], X9[:, col["bmi"]], X9[:, col["children"]], 1 - sex, sex,
                         1 - smoker, smoker, X9[:, regions]])
    return X, y, ["age", "bmi", "children", "sex_female", "sex_male", "smoker_no", "smoker_yes"] + \
        [names[i] for i in regions]


def real_split(dataset: str, split_seed: int, test_fraction: float = 0.1):
    """The code's preprocessing: min-max scale every feature AND the label on the full data
    (before the split: not DP), then one seeded 90/10 split."""
    X, y, _ = load_medical() if dataset == "medical" else load_wine("red")
    Z = np.column_stack([X, y])
    lo, hi = Z.min(0), Z.max(0)
    Z = (Z - lo) / np.where(hi > lo, hi - lo, 1.0)
    order = np.random.default_rng(split_seed).permutation(len(Z))
    cut = int(round(len(Z) * (1 - test_fraction)))
    tr, te = order[:cut], order[cut:]
    return Z[tr, :-1], Z[tr, -1], Z[te, :-1], Z[te, -1]


# ------------------------------------------------------------------------------------- helpers
def features(d: int, N: int, omega_std: float, seed: int) -> RandomFeatures:
    """The √(2/N)·cos map with ω ~ N(0, omega_std² I): public, from a seed."""
    spec = rff_spec([f"x{j}" for j in range(d)], n_features=N, bandwidth=1.0 / omega_std,
                    seed=hashlib.sha256(f"liao-features-{seed}".encode()).digest())
    return RandomFeatures(spec, d)


def _mse(y: np.ndarray, yhat: np.ndarray) -> float:
    return float(np.mean((y - yhat) ** 2))


def _row(series: str, err: float, **extra: Any) -> dict[str, Any]:
    return {"series": series, "test_error": err, **extra}


def _certified(A: np.ndarray, c: np.ndarray, eps: float, label_bound: float, rand: Randomness) -> tuple[np.ndarray, float]:
    """Certified Algorithm 1 on an already computed c♯ (labels were clipped by the caller)."""
    cal = algorithm1_calibration("certified", m=A.shape[0], n_features=A.shape[1], epsilon=eps, delta=DELTA,
                                 label_bound=label_bound)
    norm = float(np.linalg.norm(c))
    c_clip = c * min(1.0, cal.radius / norm) if norm > 0 else c
    return gaussian_output_perturbation(c_clip, cal.sigma, rand), cal.sigma


def _figure_rows(A, y, At, yt, c, eps, seed, *, ref_delta_c=4.0, label_bound=None, with_gamma=True,  # noqa: PLR0913 - one paper cell's data and knobs (the paper's names)
                 sgd_lrs=(), sgd_iterations=None) -> list[dict]:
    """Every series of a Figs 1–6 cell, from one non-private c♯ (and SGD runs if asked)."""
    m, N = A.shape
    rows = [_row(S_NP, _mse(yt, At @ c), train_residual=float(np.linalg.norm(A @ c - y) / np.linalg.norm(y))),
            _row(S_ZERO, float(np.mean(yt**2))), _row(S_MEAN, _mse(yt, np.full_like(yt, y.mean())))]
    base = Randomness.seeded_insecure(seed)
    for eps in (eps,):
        r = base.child("eps", eps)
        ref = algorithm1_calibration("reference_code_not_dp", m=m, n_features=N, epsilon=eps, delta=DELTA,
                                     ref_delta_c=ref_delta_c)
        ref_c = gaussian_output_perturbation(c, ref.sigma, r.child("ref"))
        rows.append(_row(S_REF, _mse(yt, At @ ref_c), sigma=ref.sigma, dp=False))
        if with_gamma:
            g = gamma_output_perturbation(c, ref.sensitivity, eps, r.child("gamma"))
            rows.append(_row(S_GAMMA, _mse(yt, At @ g), dp=False))
        if label_bound is not None:
            yc = np.clip(y, -label_bound, label_bound)
            c_cert = c if np.array_equal(yc, y) else min_norm(A, yc, "gram")
            cert, sigma = _certified(A, c_cert, eps, label_bound, r.child("cert"))
            rows.append(_row(S_CERT, _mse(yt, At @ cert), sigma=sigma, dp=True))
        for lr_name, lr in sgd_lrs:
            c_np, c_priv, sigma = sgd_random_features(A, y, iterations=sgd_iterations or m, lr=lr, epsilon=eps,
                                                      delta=DELTA, randomness=r.child("sgd", lr_name))
            rows.append(_row(f"{S_SGD} lr={lr_name}", _mse(yt, At @ c_priv), sigma=sigma))
            rows.append(_row(f"{S_SGD} lr={lr_name} (non-private)", _mse(yt, At @ c_np)))
    return rows


# ------------------------------------------------------------------------------------- Figs 1–3
def _cost_n(p: dict) -> float:
    return p.get("N", 2 * p.get("m", 1000)) * p.get("d", 5) / 1000


@register("liao.synthetic_n", cost=_cost_n, styles=STYLES)
def synthetic_n(params: dict, seed: int) -> list[dict]:
    """Figs 1–2: m = 1000 train / 1000 test (one normalised draw of 2000), Kaczmarz with 1000
    iterations from 0, σ_w std 40, every ε of ``params['epsilons']`` on the same c♯."""
    m, d, N = params["m"], params["d"], params["N"]
    X, y = synthetic_data(2 * m, d, params["fn"], numpy_rng(seed, "data"))
    fmap = features(d, N, params["omega_std"], subseed(seed, "features"))
    A, At = fmap.apply(X[:m]), fmap.apply(X[m:])
    c = min_norm(A, y[:m], "kaczmarz", iterations=params["kaczmarz_iterations"],
                 randomness=Randomness.seeded_insecure(subseed(seed, "kaczmarz")))
    return _figure_rows(A, y[:m], At, y[m:], c, params["epsilon"], subseed(seed, "noise"),
                        label_bound=params["label_bound"], sgd_lrs=[("1/m", 1.0 / m)], sgd_iterations=m)


@register("liao.synthetic_m", cost=_cost_n, styles=STYLES)
def synthetic_m(params: dict, seed: int) -> list[dict]:
    """Fig 3: m training + 200 test points redrawn each repetition, N = ``n_factor``·m (code: 2m),
    Kaczmarz T = m, SGD lr = 1/m and T = m, ε = 1."""
    m, d = params["m"], params["d"]
    N = int(params["n_factor"] * m) + int(params.get("n_offset", 0))
    X, y = synthetic_data(m + params["m_test"], d, params["fn"], numpy_rng(seed, "data"))
    fmap = features(d, N, params["omega_std"], subseed(seed, "features"))
    A, At = fmap.apply(X[:m]), fmap.apply(X[m:])
    c = min_norm(A, y[:m], "kaczmarz", iterations=m, randomness=Randomness.seeded_insecure(subseed(seed, "kz")))
    return _figure_rows(A, y[:m], At, y[m:], c, params["epsilon"], subseed(seed, "noise"),
                        label_bound=params["label_bound"], sgd_lrs=[("1/m", 1.0 / m)], sgd_iterations=m)


# ------------------------------------------------------------------------------------- Figs 4–6
def _real_cost(p: dict) -> float:
    return p["N"] / 1000 * (4 if p.get("sgd") else 1)


@register("liao.real_eps", cost=_real_cost, styles=STYLES)
def real_eps(params: dict, seed: int) -> list[dict]:
    """Fig 4: one seeded 90/10 split per dataset (fixed across repetitions), σ_w std 40, Kaczmarz
    T = m_train, Δ = 4/√N; the features, row order and noise are redrawn each repetition."""
    Xtr, ytr, Xte, yte = real_split(params["dataset"], params["split_seed"])
    fmap = features(Xtr.shape[1], params["N"], params["omega_std"], subseed(seed, "features"))
    A, At = fmap.apply(Xtr), fmap.apply(Xte)
    c = min_norm(A, ytr, "kaczmarz", iterations=len(ytr), randomness=Randomness.seeded_insecure(subseed(seed, "kz")))
    return _figure_rows(A, ytr, At, yte, c, params["epsilon"], subseed(seed, "noise"), with_gamma=False,
                        label_bound=params["label_bound"])


@register("liao.real_sgd", cost=_real_cost, styles=STYLES)
def real_sgd(params: dict, seed: int) -> list[dict]:
    """Figs 5–6: σ_w std 4, N ∈ 10k..20k, ε = 0.5, Δ = ``ref_delta_c``/√N (code: 2 medical, 4 wine),
    SGD with lr ∈ {1/m, 1/(4m), 1/(16m)} (the code's values; its legends say 1/(2m), 1/(8m))."""
    Xtr, ytr, Xte, yte = real_split(params["dataset"], params["split_seed"])
    m = len(ytr)
    fmap = features(Xtr.shape[1], params["N"], params["omega_std"], subseed(seed, "features"))
    A, At = fmap.apply(Xtr), fmap.apply(Xte)
    c = min_norm(A, ytr, "kaczmarz", iterations=m, randomness=Randomness.seeded_insecure(subseed(seed, "kz")))
    delta_c = params["ref_delta_c"][params["dataset"]]
    lrs = [("1/m", 1.0 / m), ("1/(4m)", 1.0 / (4 * m)), ("1/(16m)", 1.0 / (16 * m))]
    return _figure_rows(A, ytr, At, yte, c, params["epsilon"], subseed(seed, "noise"), ref_delta_c=delta_c,
                        with_gamma=False, label_bound=params["label_bound"], sgd_lrs=lrs, sgd_iterations=m)


@register("liao.table1", cost=lambda p: p["N"] / 1000 * (30 if p["solver"] == "pinv" else 1), styles=STYLES)
def table1(params: dict, seed: int) -> list[dict]:
    """Table 1: private test error (reference-code noise, ε = 1, σ_w std 40) and solve time of
    pinv (numpy full SVD), randomised Kaczmarz (T = m) and our exact Gram solver.  Times are on a
    shared, loaded 2-core machine: compare them with each other, not with the paper's."""
    if params["solver"] == "pinv" and params["N"] > params.get("pinv_max_n", params["N"]):
        return []  # a full SVD per cell is minutes on the shared machine: pinv only up to pinv_max_n
    Xtr, ytr, Xte, yte = real_split(params["dataset"], params["split_seed"])
    fmap = features(Xtr.shape[1], params["N"], params["omega_std"], subseed(seed, "features"))
    A, At = fmap.apply(Xtr), fmap.apply(Xte)
    t0 = time.perf_counter()
    c = min_norm(A, ytr, params["solver"], iterations=len(ytr),
                 randomness=Randomness.seeded_insecure(subseed(seed, "kz")))
    seconds = time.perf_counter() - t0
    ref = algorithm1_calibration("reference_code_not_dp", m=len(ytr), n_features=params["N"], epsilon=1.0, delta=DELTA)
    priv = gaussian_output_perturbation(c, ref.sigma, Randomness.seeded_insecure(subseed(seed, "noise")))
    return [{"series": params["solver"], "test_error": _mse(yte, At @ priv), "nonprivate_error": _mse(yte, At @ c),
             "seconds": seconds, "train_residual": float(np.linalg.norm(A @ c - ytr) / np.linalg.norm(ytr))}]


# ------------------------------------------------------------------------------------- Figs 7–8
def _groups(params: dict, rng: np.random.Generator):
    """Per-group (train X, train y) as the fairness notebook: medical split 90/10 per group by sex or
    smoker; wine: 1500 rows sampled per colour, 1/3 train (the code; the paper says 1000/500).
    Labels min-max scaled per group (the code; the paper says ℓ2-normalised)."""
    if params["experiment"].startswith("medical"):
        X, y, names = load_medical()
        key = {"medical_sex": "sex_male", "medical_smoker": "smoker_yes"}[params["experiment"]]
        g = X[:, names.index(key)]
        parts = [(X[g == 1], y[g == 1]), (X[g == 0], y[g == 0])]
        train_fraction = 0.9
    else:
        parts = []
        for color in ("red", "white"):
            X, y, _ = load_wine(color)
            pick = rng.choice(len(y), params["wine_per_group"], replace=False)
            parts.append((X[pick], y[pick]))
        train_fraction = params["wine_train_fraction"]
    out = []
    for Xg, yg in parts:
        order = rng.permutation(len(yg))
        cut = int(round(len(yg) * train_fraction))
        tr = order[:cut]
        yy = yg[tr]
        yy = (yy - yy.min()) / (yy.max() - yy.min())
        out.append((Xg[tr], yy))
    return out


@register("liao.fairness", cost=lambda p: 10.0, styles=STYLES)
def fairness(params: dict, seed: int) -> list[dict]:
    """Figs 7–8: training excessive-risk gaps |R(D) − R(D_a)| of the private RF model (raw inputs,
    σ_w² as the paper, N = 4000, exact min-norm) and of private RLS (features min-max scaled per
    group, intercept, λ = √N/(2m)), both with the SAME Gaussian noise on the coefficients.  Two
    estimates: ``closed form`` σ²·mean‖φ‖² (exact expectation), and ``code MC`` — the notebook's
    100 independent noise draws per risk (whose Monte Carlo error dominates the RF gaps)."""
    rng = numpy_rng(seed, "groups")
    groups = _groups(params, rng)
    N = params["N"]
    X_all = np.vstack([g[0] for g in groups])
    y_all = np.concatenate([g[1] for g in groups])
    m = len(y_all)
    omega_var = params["omega_var"]["medical" if params["experiment"].startswith("medical") else "wine"]
    fmap = features(X_all.shape[1], N, math.sqrt(omega_var), subseed(seed, "features"))
    A_groups = [fmap.apply(g[0]) for g in groups]
    A = np.vstack(A_groups)
    c = min_norm(A, y_all, "gram")
    # RLS: features min-max scaled per group, plus an intercept column
    L_groups = []
    for Xg, _ in groups:
        lo, hi = Xg.min(0), Xg.max(0)
        L_groups.append(np.column_stack([(Xg - lo) / np.where(hi > lo, hi - lo, 1.0), np.ones(len(Xg))]))
    L = np.vstack(L_groups)
    lam = math.sqrt(N) / (2 * m)
    w = np.linalg.solve(L.T @ L + lam * np.eye(L.shape[1]), L.T @ y_all)
    delta_c = 4.0 / math.sqrt(N)
    rows: list[dict] = []
    base = Randomness.seeded_insecure(subseed(seed, "noise"))
    for eps in (params["epsilon"],):
        sigma = params["noise_factor"] * delta_c / math.sqrt(2 * eps)  # the notebook's 5Δ/√(2ε)
        for model, Ms, coef, fit_rows in (("RF", A_groups, c, A), ("RLS", L_groups, w, L)):
            def closed(Mx: np.ndarray) -> float:
                return sigma**2 * float(np.mean(np.einsum("ij,ij->i", Mx, Mx)))

            def mc(Mx: np.ndarray, yx: np.ndarray, label: str) -> float:
                Z = base.child(model, eps, label).stream().normal((Mx.shape[1], params["mc_draws"]), scale=sigma)
                resid = (Mx @ coef - yx)[:, None]
                return float(np.mean(np.mean((resid + Mx @ Z) ** 2, axis=0)) - np.mean(resid**2))

            ys = [g[1] for g in groups]
            r_all_cf = closed(fit_rows)
            r_all_mc = mc(fit_rows, y_all, "all")
            for a, (Ma, ya) in enumerate(zip(Ms, ys), start=1):
                rows.append({"series": f"{model} group {a} (closed form)", "gap": abs(r_all_cf - closed(Ma)),
                             "model": model, "group": a, "estimate": "closed form", "sigma": sigma})
                rows.append({"series": f"{model} group {a} (code MC)", "gap": abs(r_all_mc - mc(Ma, ya, f"g{a}")),
                             "model": model, "group": a, "estimate": "code MC", "sigma": sigma})
    return rows


# ------------------------------------------------------------------------------------- the LTM
@register("liao.ltm", cost=lambda p: 20.0 if p.get("kind") == "gram" else 5.0, styles=STYLES)
def ltm_compare(params: dict, seed: int) -> list[dict]:
    """Ours: private random-feature ridge THROUGH THE LTM (parties map their rows with public RFF
    before clipping; release kind ``params['kind']``: a sparse sketch or the gram kind; de-biased
    ridge in feature space; predict on raw inputs) vs private linear ridge through the LTM, same
    data, split, ε, release kind and pipeline (``ltm.sim.runtime.simulate``).  Also, from the same report, the
    non-private OLS of each model on the clear (mapped) rows and the best central baseline of each
    (SSP or AdaSSP, a trusted curator)."""
    from ltm.sim.runtime.simulate import SimulateConfig, simulate

    kind = params.get("kind", "sparse")
    features_n = params["features_n"]
    if isinstance(features_n, dict):
        features_n = features_n[kind]
    common: dict[str, Any] = {"epsilon": params["epsilon"], "delta": params.get("delta", 1e-6), "sketch": kind,
                              "seed": subseed(seed, "run") % (2**62)}
    if params["dataset"] == "nonlinear":
        n = params["n"][kind] if isinstance(params["n"], dict) else params["n"]
        common.update(synthetic="nonlinear", n=n, d=params["d"])
    elif params["dataset"] != "power":
        raise ValueError(f"unknown dataset {params['dataset']!r}")
    rows = []
    for model, label in (("rf_ridge", "rf_ridge"), ("ridge", "ridge (linear)")):
        cfg = SimulateConfig(model=model, features_n=features_n, bandwidth=params.get("bandwidth"), **common)
        r = simulate(cfg)
        extra = {"m": r["sketch"]["m"], "lambda": r["lambda"], "n_train": r["n_train"], "features_n": features_n}
        rows.append({"series": f"LTM {label}", "mse": r["metrics"]["mse"], "r2": r["metrics"]["r2"], **extra})
        rows.append({"series": f"non-private {label}", "mse": r["baselines"]["nonprivate"]["mse"],
                     "r2": r["baselines"]["nonprivate"]["r2"], **extra})
        rows.append({"series": f"central {label}", "mse": r["baselines"]["central"]["mse"],
                     "r2": r["baselines"]["central"]["r2"], "central_method": r["baselines"]["central"]["method"],
                     **extra})
    return rows

"""Model quality on the bundled data with column transforms from three sources (prints JSON).

``python -m sim.bounds_eval [--seeds 5]`` fits the same private ridge job (the demo's: bundled UCI
household power data, the demo's train/test split, 4 parties, 3 servers, ε = 1, δ = 1e-6, the
``sim/jobs.default_m`` sketch size) with each column's centre and scale taken from:

* ``data``: the training data's means and standard deviations (what ``ltm demo`` does — not
  private: these statistics end up in the public spec);
* ``bounds``: the DP bounds pre-job (``ltm job bounds``: two histogram rounds, total ε = 1,
  δ = 1e-7, run through the in-process transport) — the means and standard deviations of the
  released histograms;
* ``ranges``: the documented public ranges of ``examples/jobs/power-ridge.toml``.

and reports the held-out R² (mean and standard deviation over seeds) beside the non-private OLS.
A benchmark for docs/bounds.md, not a test.
"""
from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from analyst.bounds import Draft, next_grid, noise_sd, round_estimates
from analyst.estimators import make_estimator, release_lambda
from analyst.metrics import r2
from ltm.jobfile import parse_job_file, render_job_file
from ltm.randomness import Randomness
from sim.inprocess import run_inprocess
from sim.jobs import default_m
from sim.simulate import SimulateConfig, load_table

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "jobs" / "power-ridge.toml"
PARTIES, K = 4, 3


def _doc(train, label: str, columns: list[dict], m: int) -> dict[str, Any]:
    n = train.n
    sizes = [n // PARTIES + (1 if i < n % PARTIES else 0) for i in range(PARTIES)]
    return {"job": {"id": "eval", "partition": "rows"}, "release": {"kind": "sparse", "m": m},
            "privacy": {"epsilon": 1.0, "delta": 1e-6}, "fit": {"model": "ridge"},
            "servers": [{"id": f"server-{i}", "endpoint": f"h{i}:1"} for i in range(K)],
            "parties": [{"id": f"party-{i}", "clients": s} for i, s in enumerate(sizes)],
            "columns": columns}


def _tables(spec, table) -> dict[str, dict[str, np.ndarray]]:
    return {p.party_id: {c: v[p.start:p.stop] for c, v in table.columns.items()} for p in spec.parties}


def bounds_columns(train, label: str, seed: int, epsilon: float = 1.0, delta: float = 1e-7,
                   ) -> tuple[list[dict], dict]:
    """The main job's columns from the two-round bounds pre-job, run in process."""
    names = list(train.columns)
    draft = Draft.parse(render_job_file(_doc(train, label, [{"name": c, **({"role": "label"} if c == label else {})}
                                                            for c in names], 64)))
    transforms = {c: (0.0, 1.0) for c in draft.unknown}
    est: dict = {}
    for r, kind in ((1, "hist_log"), (2, "hist_lin")):
        if r == 2:
            transforms = {c: next_grid(est[c]) for c in draft.unknown}
        jf = parse_job_file(render_job_file(draft.prejob_doc(r, kind, transforms, epsilon / 2, delta / 2)))
        run = run_inprocess(jf.spec, _tables(jf.spec, train), Randomness.seeded_insecure(seed).child("bounds", r))
        est = round_estimates(kind, run.release.matrix[0], draft.unknown, transforms, noise_sd(run.release.privacy))
    cols = [{"name": c, "center": est[c]["mean"], "spread": est[c]["std"],
             **({"role": "label"} if c == label else {})} for c in names]
    return cols, est


def evaluate(seeds: int = 5) -> dict[str, Any]:
    cfg = SimulateConfig(model="ridge")
    train, test = load_table(cfg, Randomness.seeded_insecure(0))
    label = train.label
    features = [c for c in train.columns if c != label]
    X_test, y_test = test.matrix(features), test.columns[label]
    X, y = train.matrix(features), train.columns[label]
    A = np.column_stack([X, np.ones(train.n)])
    w = np.linalg.lstsq(A, y, rcond=None)[0]
    out: dict[str, Any] = {"data": train.source, "n_train": train.n, "n_test": test.n, "seeds": seeds,
                           "nonprivate_ols_r2": r2(y_test, np.column_stack([X_test, np.ones(test.n)]) @ w)}
    ranges = tomllib.loads(EXAMPLE.read_text())["columns"]
    sources = {
        "data": [{"name": c, "center": float(train.columns[c].mean()), "spread": float(train.columns[c].std()),
                  **({"role": "label"} if c == label else {})} for c in train.columns],
        "ranges": ranges,
    }
    results: dict[str, Any] = {}
    for seed in range(seeds):
        cols, est = bounds_columns(train, label, seed)
        per_seed = {**sources, "bounds": cols}
        for name, columns in per_seed.items():
            width = len(columns)
            m = default_m(train.n, width, epsilon=1.0, delta=1e-6, clip_bound=1.0)
            spec = parse_job_file(render_job_file(_doc(train, label, columns, m))).spec
            run = run_inprocess(spec, _tables(spec, train), Randomness.seeded_insecure(1000 + seed))
            est_model = make_estimator("ridge", lam=release_lambda(run.release)[0], debias=True).fit(run.release)
            entry = results.setdefault(name, {"r2": [], "m": m})
            entry["r2"].append(r2(y_test, est_model.predict(X_test)))
            if seed == 0:
                entry["columns"] = [{"name": c.name, "role": c.role, "center": c.center, "scale": c.scale}
                                    for c in spec.columns]
                if name == "bounds":
                    entry["prejob_estimates_seed0"] = est
    for name, entry in results.items():
        entry["r2_mean"] = float(np.mean(entry["r2"]))
        entry["r2_sd"] = float(np.std(entry["r2"]))
    out["transforms"] = results
    out["bounds_prejob"] = {"rounds": 2, "epsilon_total": 1.0, "delta_total": 1e-7}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    print(json.dumps(evaluate(p.parse_args().seeds), indent=2))


if __name__ == "__main__":
    main()

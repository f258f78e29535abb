"""Issue #32, item 2: the planner's predicted excess (``plan.predicted_excess``) against the measured
one, for every mechanism × upload mode × release kind (and the columns partition's sketch), on
synthetic ridge data with the data's own second moment given to the planner as the public one.

Measured excess, as the planner defines it: ``(ŵ − w)ᵀ Σ (ŵ − w) / E[y²]`` with w the least-squares
fit of the clipped rows, Σ = XᵀX/n, ŵ the default fit (de-biased ridge, ``release_lambda``), averaged
over R seeded runs (reproducible, not private).

    PYTHONPATH=$PWD python3 -m ltm.experiments.planner_excess [--runs 6] [--n 20000]
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from ltm.analyst.estimators import make_estimator, release_lambda, solve_ridge
from ltm.datasets.synthetic import synthetic_ridge
from ltm.planner import PlanInputs, plan_release
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables, split_parties
from ltm.sim.runtime.simulate import training_matrix

CASES = [(mech, mode, kind, part) for mech in ("gaussian", "laplace") for mode in ("per-client", "aggregate")
         for kind, part in (("gram", "rows"), ("sparse", "rows"), ("dense", "rows"), ("sparse", "columns"))]


def case(table, n: int, parties: int, runs: int, mech: str, mode: str, kind: str, part: str) -> dict:
    """One (mechanism, upload mode, kind, partition): the prediction and the measured mean excess."""
    eps, delta = 1.0, (1e-6 if mech == "gaussian" else 0.0)
    job = dict(partition=part, parties=parties, mechanism=mech, epsilon=eps, delta=delta, upload_mode=mode)
    probe, _ = build_job(table, job_id="probe", randomness=Randomness.seeded_insecure(1), kind="sparse", m=64, **job)
    V = training_matrix(probe, table)
    sizes = tuple(b - a for a, b in split_parties(n, parties)) if part == "rows" else ()
    cand = plan_release(PlanInputs(
        n=n, width=probe.width, epsilon=eps, delta=delta, partition=part, mechanism=mech, party_sizes=sizes,
        corrupt_parties=probe.privacy.corrupt_parties, kinds=(kind,), upload_mode=mode, parties=parties,
        clip_bound=probe.clip_bound, second_moment=V.T @ V / n)).candidates[0]
    spec, _ = build_job(table, job_id="job", randomness=Randomness.seeded_insecure(1), kind=kind,
                        m=None if kind == "gram" else cand.m, **job)
    V = training_matrix(spec, table)
    X, y = V[:, :-1], V[:, -1]
    w, S, y2 = solve_ridge(X, y, 0.0), X.T @ X / n, float(y @ y) / n
    tables, excess = party_tables(spec, table), []
    for r in range(runs):
        rel = run_inprocess(spec, tables, Randomness.seeded_insecure(f"excess-{r}")).release
        e = make_estimator("ridge", lam=release_lambda(rel)[0], debias=True).fit(rel).coef_scaled_ - w
        excess.append(float(e @ S @ e) / y2)
    return {"mechanism": mech, "upload_mode": mode, "kind": kind, "partition": part, "m": spec.sketch.m,
            "predicted": cand.predicted_excess, "measured": float(np.mean(excess)),
            "measured_se": float(np.std(excess) / np.sqrt(runs)), "ratio": cand.predicted_excess / float(np.mean(excess))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--n", type=int, default=20_000)
    args = ap.parse_args()
    table = synthetic_ridge(args.n, 4, Randomness.seeded_insecure("planner-excess"))
    for c in CASES:
        print(json.dumps(case(table, args.n, 4, args.runs, *c)), flush=True)


if __name__ == "__main__":
    main()

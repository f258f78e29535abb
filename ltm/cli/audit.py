"""``ltm audit``: an empirical DP audit, a Clopper–Pearson lower bound on ε (the role's code: ``ltm/sim/tools/audit.py``)."""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from typing import Any

from ltm.cli.options import seed
from ltm.jobconfig import add_options

DESCRIPTION = ("Run a small job many times on two neighbouring datasets through the real party/server/analyst cores "
               "and turn the likelihood-ratio test's error rates into a Clopper–Pearson lower bound on ε, for the "
               "default mechanism and for under-calibrated negative controls.")


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm audit`` flags: the runs, the negative controls and the audited job."""
    p.add_argument("--runs", type=int, default=20_000, help="releases per neighbouring dataset (default 20000)")
    p.add_argument("--controls", default="0.1",
                   help="comma-separated σ factors of negative controls to audit too (default 0.1; '' = none)")
    p.add_argument("--control-runs", type=int, help="runs per dataset for the controls (default: --runs)")
    add_options(p, "privacy", only=("epsilon", "delta", "clip"), helps={
        "clip": "clip bound C (default {default}; a power of two puts the data on the grid)"})
    p.add_argument("--n", type=int, default=48, help="clients in the audited job")
    p.add_argument("--frac-bits", type=int, default=0, help="fraction bits of the grid (0: the default)")
    add_options(p, "sketch", only=("m", "s", "k", "share_mode"), defaults={"m": 4, "k": 2},
                helps={"m": "sketch rows (default {default})"})
    add_options(p, "sketch", only=("sketch",), defaults={"sketch": "sparse"}, helps={
        "sketch": "the audited release kind: sparse (default), dense or gram (not auto; the last two use the "
                  "generic statistic, ltm/sim/tools/audit.py)"})
    p.add_argument("--upload-mode", choices=("per-client", "aggregate"), default="per-client",
                   help="how the audited job's parties upload (default per-client)")
    p.add_argument("--alpha", type=float, default=1e-6,
                   help="probability that a reported bound is invalid (Bonferroni over the thresholds)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="processes the runs are split over (default: one per core)")
    seed(p, text=True)  # any text seeds the runs
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``ltm audit``: audit the default mechanism and each negative control; prints JSON."""
    from ltm.sim.tools.audit import AuditConfig, run_audit

    base = AuditConfig(runs=args.runs, n=args.n, m=args.m, s=args.s, k=args.k, epsilon=args.epsilon,
                       delta=args.delta, clip=args.clip, frac_bits=args.frac_bits, share_mode=args.share_mode,
                       alpha=args.alpha, seed=args.seed, workers=max(1, args.workers), release=args.sketch,
                       upload_mode=args.upload_mode)
    factors = [float(x) for x in args.controls.split(",") if x.strip()]
    report: dict[str, Any] = {"default": run_audit(base)}
    report["controls"] = [run_audit(replace(base, sigma_factor=f, runs=args.control_runs or args.runs))
                          for f in factors]
    report["summary"] = [
        {"sigma_factor": r["audited"]["sigma_factor"], "runs_per_dataset": r["runs_per_dataset"],
         "epsilon_claimed": r["claimed"]["epsilon"], "epsilon_lb": r["epsilon_lb"],
         "epsilon_pair": r["audited"]["epsilon_pair"], "violation": r["violation"]}
        for r in [report["default"], *report["controls"]]]
    print(json.dumps(report, indent=2, allow_nan=True))
    return 0

"""The replicated degree-2 release of the columns partition on real data (issue #21).

For every bundled real dataset with ≥ 10⁴ rows (:data:`ltm.experiments.planner_grid.REAL_DATASETS`),
ε ∈ {1, 0.1}, δ = 1e-6, ``--runs`` seeds, exactly what

    ltm simulate [data args] --partition columns --parties 3 --release gram --colluding-servers 1 \
        --epsilon E --delta 1e-6 --seed r

computes (in process), beside the default columns release (the sketch, any
2 of 3 servers may collude: ``--release auto``) and the rows partition (``--release auto``, 4
parties).  Mean held-out R² against central AdaSSP (its own λ, the same public bounds).
By default run r uses ``--seed r`` (reproducible bit for bit, NOT private); ``--production`` runs
every job with the system CSPRNG instead (``seed=None``: what a real job draws; the numbers are
then a fresh sample each time).

    python -m ltm.experiments.replicated_real --out docs/results/replicated_real [--runs 5] [--production]
"""
from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from ltm.experiments.planner_grid import REAL_DATASETS
from ltm.sim.runtime.simulate import SimulateConfig, simulate

SETTINGS = {
    "columns, replicated (1 of 3 servers)": dict(partition="columns", parties=3, sketch="gram", colluding_servers=1),
    "columns, sketch (default trust)": dict(partition="columns", parties=3, sketch="auto"),
    "rows (auto)": dict(partition="rows", parties=4, sketch="auto"),
}
EPSILONS = (1.0, 0.1)


def _config(args: list[str]) -> dict:
    out: dict = {}
    it = iter(args)
    for flag in it:
        value = next(it)
        if flag == "--data":
            out["data"] = value
        elif flag == "--label":
            out["label"] = value
        elif flag == "--features":
            out["features"] = value.split(",")
    return out


def run(out: Path, runs: int, production: bool = False) -> list[dict]:
    """Run every (dataset, ε, setting) ``runs`` times; write ``runs.csv`` and ``summary.md`` to ``out``.

    ``production`` uses the system CSPRNG for every draw (``seed=None``) instead of ``--seed r``.
    """
    rows = []
    for name, (args, nrows, _) in REAL_DATASETS.items():
        for eps in EPSILONS:
            for setting, kw in SETTINGS.items():
                for r in range(1, runs + 1):
                    t = time.perf_counter()
                    rep = simulate(SimulateConfig(**_config(args), epsilon=eps, delta=1e-6,
                                                   seed=None if production else r, **kw))
                    b = rep["baselines"]
                    rows.append({"dataset": name, "epsilon": eps, "setting": setting, "run": r,
                                 "kind": rep["release_kind"], "ltm_r2": rep["metrics"]["r2"],
                                 "central_adassp_r2": b["central_adassp"]["r2"], "nonprivate_r2": b["nonprivate"]["r2"],
                                 "seconds": round(time.perf_counter() - t, 2)})
                    print(f"{name} ε={eps:g} {setting} run {r}: {rows[-1]['kind']} R² {rows[-1]['ltm_r2']:.4f} "
                          f"vs AdaSSP {rows[-1]['central_adassp_r2']:.4f}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runs.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = ["| dataset | ε | setting | kind | LTM R² | central AdaSSP R² | LTM ÷ AdaSSP | non-private R² |",
             "|---|---|---|---|---|---|---|---|"]
    for name in REAL_DATASETS:
        for eps in EPSILONS:
            for setting in SETTINGS:
                sel = [x for x in rows if (x["dataset"], x["epsilon"], x["setting"]) == (name, eps, setting)]
                mean = lambda k: float(np.mean([x[k] for x in sel]))  # noqa: E731
                lines.append(f"| {name} | {eps:g} | {setting} | {', '.join(sorted({x['kind'] for x in sel}))} "
                             f"| {mean('ltm_r2'):.4f} | {mean('central_adassp_r2'):.4f} "
                             f"| {mean('ltm_r2') / mean('central_adassp_r2'):.3f} | {mean('nonprivate_r2'):.4f} |")
    kind = ("runs each with production randomness (system CSPRNG)" if production
            else "seeded runs each; NOT private")
    (out / "summary.md").write_text(
        f"# The replicated release on real data ({runs} {kind}, δ = 1e-6)\n\n"
        + "\n".join(lines) + "\n\nReproduce: `python -m ltm.experiments.replicated_real --out " + str(out)
        + f" --runs {runs}" + (" --production" if production else "") + "`.\n")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("docs/results/replicated_real"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--production", action="store_true",
                   help="draw every job's randomness from the system CSPRNG (seed=None) instead of --seed r")
    a = p.parse_args()
    run(a.out, a.runs, a.production)


if __name__ == "__main__":
    main()

"""Issue #32, item 3: is the DP ridge ever worse than the intercept-only fallback, and does the plan's
warning catch it?  Three real tables at ε = 0.01, 0.1, 1 and 3, the default job (``--release auto``,
``--upload-mode auto``) in the rows and the columns partition, seeds 1..R (seeded: reproducible, not
private).  Each run fits the regression (``fallback=False``) so its R² is measured whether or not the
plan warns; the intercept-only model's R² (what the fallback releases) is the same for every run of
a table (a fixed public split and a public centre).

    PYTHONPATH=$PWD python3 -m ltm.experiments.fallback_lambda [--runs 3] [--out results.json]

Prints one JSON object and a markdown table (docs/experiments/fallback_lambda.md).
"""
from __future__ import annotations

import argparse
import json
import statistics

from ltm.sim.runtime.simulate import SimulateConfig, simulate

#: name → (CSV, label) ; None: the bundled power sample
TABLES = {
    "power": (None, None),
    "elevation": (None, "altitude"),  # ltm.datasets.real.load_road3d, written with a header
    "california": ("ltm/datasets/data/california_housing_complete.csv", "median_house_value"),
}
EPSILONS = (0.01, 0.1, 1.0, 3.0)


def _headed_road3d() -> str:
    """The bundled road network as a CSV with a header (the bundled file has none)."""
    import os
    import tempfile

    from ltm.datasets.real import load_road3d

    t = load_road3d()
    path = os.path.join(tempfile.gettempdir(), "ltm_road3d_headed.csv")
    with open(path, "w") as fh:
        fh.write(",".join(t.columns) + "\n")
        for row in zip(*(t.columns[c].tolist() for c in t.columns)):
            fh.write(",".join(map(repr, row)) + "\n")
    return path


def one(table: str, partition: str, epsilon: float, seed: int, fallback: bool) -> dict:
    data, label = TABLES[table]
    if table == "elevation":
        data, label = _headed_road3d(), "altitude"
    parties = 3 if table == "elevation" else 4  # the columns partition needs a column per party
    r = simulate(SimulateConfig(data=data, label=label, partition=partition, epsilon=epsilon, seed=seed,
                                fallback=fallback, model="ridge", parties=parties))
    return {"r2": r["metrics"]["r2"], "warned": bool((r.get("plan") or {}).get("warning")),
            "predicted_r2": (r.get("plan") or {}).get("predicted_r2"), "kind": r["release_kind"],
            "released": r["released_model"], "central": r["baselines"]["central"]["r2"],
            "nonprivate": r["baselines"]["nonprivate"]["r2"], "lambda": r["lambda"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--tables", default=",".join(TABLES), help="comma-separated subset of " + ", ".join(TABLES))
    ap.add_argument("--partitions", default="rows,columns")
    args = ap.parse_args()
    rows = []
    for table in args.tables.split(","):
        for partition in args.partitions.split(","):
            for eps in EPSILONS:
                runs = [one(table, partition, eps, seed, fallback=False) for seed in range(1, args.runs + 1)]
                # the release is the same with or without the fallback: only a warned plan changes the fit
                released = one(table, partition, eps, 1, fallback=True) if runs[0]["warned"] else runs[0]
                r2 = [x["r2"] for x in runs]
                rows.append({"table": table, "partition": partition, "epsilon": eps, "kind": runs[0]["kind"],
                             "ridge_r2_mean": statistics.fmean(r2), "ridge_r2_min": min(r2),
                             "warned": runs[0]["warned"], "predicted_r2": runs[0]["predicted_r2"],
                             "released": released["released"], "released_r2_seed1": released["r2"],
                             "central_r2_mean": statistics.fmean(x["central"] for x in runs),
                             "nonprivate_r2": runs[0]["nonprivate"], "lambda_seed1": runs[0]["lambda"]})
                print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    print("| table | partition | ε | kind | ridge R² mean (min) | plan warns (pred. R²) | released (R², seed 1) | central R² |")
    print("|---|---|---|---|---|---|---|---|")
    for x in rows:
        pred = "" if x["predicted_r2"] is None else f"{x['predicted_r2']:.3g}"
        print(f"| {x['table']} | {x['partition']} | {x['epsilon']:g} | {x['kind']} | {x['ridge_r2_mean']:.3f} "
              f"({x['ridge_r2_min']:.3f}) | {'yes' if x['warned'] else 'no'} ({pred}) | {x['released']} "
              f"({x['released_r2_seed1']:.3g}) | {x['central_r2_mean']:.3f} |")


if __name__ == "__main__":
    main()

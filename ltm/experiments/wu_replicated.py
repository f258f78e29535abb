"""Wu et al.'s Table 1 setting (Insurance and Bike sharing, five parties holding column blocks,
min–max scaled data, 80/20 splits, clipped test MSE) with the replicated release of the columns
partition (issue #21) beside the committed RMGM-OLS numbers (docs/results/wu_table1).

Per split: the same split and scaling as :func:`ltm.experiments.wu.table1_cell`; the LTM job is
:func:`ltm.sim.runtime.jobs.build_job`'s replicated release (``colluding_servers = 1``, 5 parties, 3 servers,
one corrupt party tolerated: every party's clipping is verified on the shares, ``verified_clipping``,
which changes no released byte) with Wu's identity transform and C = √width, each party's block clipped
at √d_j (no row is ever clipped, as in :func:`ltm.experiments.wu.ltm_columns_job`); run in process,
seeded (NOT private).  Fitted by the ridge with the AdaSSP-style λ read off the release (the gram
release's default, ``ltm.analyst.estimators.release_lambda``).  The guarantee is per individual (the
whole row), where Wu's is per party.

    python -m ltm.experiments.wu_replicated --out docs/results/wu_replicated [--splits 20]

Wu's Fig. 2 setting (synthetic, six parties, ‖ŵ − w*‖ against n) with the same release is the
scenario ``wu.synthetic_replicated`` (spec ``wu_fig2_replicated.toml``), run by ``ltm experiment run``.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import math
from pathlib import Path

import numpy as np

from ltm.analyst.estimators import make_estimator, release_lambda
from ltm.experiments.registry import register
from ltm.experiments.seeds import numpy_rng
from ltm.experiments.wu import DATASETS, WU_DELTA, _distance_row, _table_of, clipped_mse, synthetic_data, wu_split
from ltm.jobspec import ColumnSpec, JobSpec, validate_job
from ltm.randomness import Randomness
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sim.runtime.replicated_run import run_replicated

EPSILONS = (1.0, 0.3, 0.1)


def replicated_columns_job(D: np.ndarray, *, job_id: str, epsilon: float, delta: float, parties: int,
                           seed: int) -> JobSpec:
    """The replicated release (columns partition, 3 servers, 1 may be corrupt) for Wu's table ``D``
    (n, width), label last: Wu's identity transform and C = √width, each block clipped at √d_j, so
    no row is ever clipped (as :func:`ltm.experiments.wu.ltm_columns_job`)."""
    width = D.shape[1]
    C = math.sqrt(width)
    spec, _ = build_job(_table_of(D), job_id=job_id, randomness=Randomness.seeded_insecure(seed),
                        partition="columns", parties=parties, k=3, kind="gram", colluding_servers=1,
                        epsilon=epsilon, delta=delta, clip_bound=C, verified_clipping=True)
    identity = tuple(ColumnSpec(c.name, c.role, 0.0, 1.0) for c in spec.columns)
    blocks = tuple(dataclasses.replace(q, clip_bound=C * math.sqrt(len(q.columns) / width) * (1 - 1e-12))
                   for q in spec.parties)
    spec = dataclasses.replace(spec, columns=identity, parties=blocks)
    validate_job(spec)
    return spec


def _fit(spec: JobSpec, D: np.ndarray, randomness: Randomness):
    """Run the replicated job in process and fit the ridge with the λ read off the release."""
    release = run_replicated(spec, party_tables(spec, _table_of(D)), randomness).release
    lam, _ = release_lambda(release)
    return make_estimator("ridge", lam=lam).fit(release).coef_scaled_, lam, release


def cell(dataset: str, epsilon: float, seed: int, parties: int = 5) -> dict:
    """One split: the replicated release's clipped test MSE, OLS's and the zero predictor's."""
    D, D_test = wu_split(dataset, seed)
    n, width = D.shape
    d = width - 1
    spec = replicated_columns_job(D, job_id=f"wu-rep-{dataset}-{seed}", epsilon=epsilon, delta=WU_DELTA,
                                  parties=parties, seed=seed)
    w, lam, release = _fit(spec, D, Randomness.seeded_insecure(seed).child("run"))
    X, y = D[:, :d], D[:, d]
    w_ols = np.linalg.lstsq(X, y, rcond=None)[0]
    return {"dataset": dataset, "epsilon": epsilon, "split": seed, "n": n, "width": width,
            "replicated_mse": clipped_mse(D_test[:, :d], D_test[:, d], w),
            "ols_mse": clipped_mse(D_test[:, :d], D_test[:, d], w_ols),
            "zero_mse": clipped_mse(D_test[:, :d], D_test[:, d], np.zeros(d)), "lambda": lam,
            "noise_variance_per_entry": release.privacy["noise_variance_per_entry"]}


SERIES_REPLICATED = "replicated release (1 of 3 servers)"


@register("wu.synthetic_replicated", styles={SERIES_REPLICATED: {"color": "tab:brown", "marker": "D"}},
          cost=lambda p: float(p["n"]))
def synthetic_cell(params: dict, seed: int) -> list[dict]:
    """Wu Fig. 2's draw (:func:`ltm.experiments.wu.synthetic_data`, the same generator and stream as
    ``wu.synthetic``) released by the replicated release; ‖ŵ − w*‖ of the ridge with the release's λ.

    Params: ``n``, ``epsilon``; optional ``delta`` (1e-5), ``d`` (10), ``parties`` (6).
    """
    n, eps = int(params["n"]), float(params["epsilon"])
    delta = float(params.get("delta", WU_DELTA))
    d = int(params.get("d", 10))
    parties = int(params.get("parties", 6))
    X, y, w_star = synthetic_data(n, d, numpy_rng(seed, "wu-synthetic-data"))
    D = np.column_stack([X, y])
    spec = replicated_columns_job(D, job_id=f"wu-rep-syn-{seed:x}", epsilon=eps, delta=delta, parties=parties,
                                  seed=seed)
    w, lam, release = _fit(spec, D, Randomness.seeded_insecure(seed).child("run"))
    return [{"series": SERIES_REPLICATED, "n": n, "epsilon": eps, "w_norm": float(np.linalg.norm(w_star)),
             **_distance_row(w, w_star), "lambda": lam,
             "noise_std": math.sqrt(release.privacy["noise_variance_per_entry"]),
             "calibration_verified": bool(release.privacy.get("calibration_verified", False)),
             "release_sha256": release.sha256}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("docs/results/wu_replicated"))
    p.add_argument("--splits", type=int, default=20)
    a = p.parse_args()
    rows = [cell(ds, eps, s) for ds in DATASETS for eps in EPSILONS for s in range(1, a.splits + 1)]
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / "runs.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = ["| dataset | ε | replicated release (LTM) | OLS (non-private) | zero predictor |", "|---|---|---|---|---|"]
    for ds in DATASETS:
        for eps in EPSILONS:
            sel = [r for r in rows if (r["dataset"], r["epsilon"]) == (ds, eps)]
            m = lambda k: np.mean([r[k] for r in sel])  # noqa: E731
            sd = np.std([r["replicated_mse"] for r in sel]) / math.sqrt(len(sel))
            lines.append(f"| {ds} | {eps:g} | {m('replicated_mse'):.4f} ± {sd:.4f} | {m('ols_mse'):.4f} "
                         f"| {m('zero_mse'):.4f} |")
    (a.out / "summary.md").write_text(f"# Wu Table 1 setting, the replicated release ({a.splits} splits; seeded, "
                                      f"NOT private)\n\nClipped test MSE, mean ± standard error.\n\n"
                                      + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

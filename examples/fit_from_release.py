"""Fit models from a job's DP release in Python: open the directory ``ltm job result`` wrote, fit a ridge
model, score it, refit with other λ at no privacy cost, and draw the error bars of the DP noise.

    python examples/fit_from_release.py results/power-ridge-1     # a real job's result directory
    python examples/fit_from_release.py                           # makes one first (see below)

Without a directory it first makes one: a job on the bundled household-power data run in this process
(parties → servers → analyst, as ``ltm simulate`` does) with SEEDED randomness — reproducible and NOT
private, an example only — written as ``ltm job result`` writes a job's files, with its held-out rows to
score on.  docs/usage.md ("Models from a release in Python") walks through the same steps.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from ltm.analyst.models import ReleaseRidge
from ltm.analyst.result import open_result


def make_result(out: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """Run a seeded ``gram`` ridge job on the bundled data in process and write its result directory
    under ``out``; returns the directory and the held-out rows (X (n, d) raw features, y (n,))."""
    from ltm.analyst.jobs import fit_model, release_json
    from ltm.randomness import Randomness
    from ltm.sim.runtime.inprocess import run_inprocess
    from ltm.sim.runtime.jobs import build_job, party_tables
    from ltm.sim.runtime.simulate import SimulateConfig, load_table

    randomness = Randomness.seeded_insecure(7)  # NOT private: an example that gives the same numbers each run
    train, test = load_table(SimulateConfig(seed=7), randomness)
    spec, _ = build_job(train, job_id="power-ridge-example", randomness=randomness, parties=4, k=3, kind="gram",
                        intercept=True)
    run = run_inprocess(spec, party_tables(spec, train), randomness)
    d = out / spec.job_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "release.json").write_text(release_json(run.release))
    (d / "privacy_report.json").write_text(json.dumps(run.release.privacy, indent=2, default=str))
    (d / "model.json").write_text(json.dumps(fit_model(run.release, "ridge"), indent=2))
    (d / "report.json").write_text(json.dumps({"job_id": spec.job_id, "release_sha256": run.release.sha256,
                                               "participants": run.participants.count}, indent=2))
    X = np.column_stack([test.columns[f] for f in test.features])
    return d, X, test.columns[test.label]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("result", nargs="?", help="a job's result directory (default: make one from the bundled data)")
    p.add_argument("--out", help="where to make the example's result directory (default: a temporary one)")
    args = p.parse_args(argv)
    X = y = None
    if args.result:
        directory = Path(args.result)
    else:
        directory, X, y = make_result(Path(args.out or tempfile.mkdtemp(prefix="ltm-example-")))

    # 1. open the result: the release, its privacy report and its noise statement
    result = open_result(directory)
    print(f"job {result.job_id}: {result.release.kind} release of n = {result.release.n} rows, "
          f"ε = {result.epsilon:g}, δ = {result.delta:g}; noise: {result.noise['mechanism']}, "
          f"largest entry variance {result.noise['noise_variance_per_column']:.4g}")

    # 2. fit from the release (alpha=None: the release's own λ rule, the one `ltm job` used)
    model = ReleaseRidge().fit(result)
    print(f"ridge, λ = {model.alpha_:.4g} ({model.alpha_rule_.split(':')[0]}):")
    sd, sd0 = model.coef_errors(draws=200)
    for name, c, s in zip(model.feature_names_in_, model.coef_, sd):
        print(f"  {name:24s} {c:+.5g} ± {1.96 * s:.2g} (95 % of the DP noise)")
    print(f"  {'intercept':24s} {model.intercept_:+.5g} ± {1.96 * sd0:.2g}")

    # 3. predict and score on held-out rows (yours, in raw units; the example's own job brings some)
    if X is not None:
        print(f"held-out R² {model.score(X, y):.4f} on {len(y)} rows; first predictions {model.predict(X[:3]).round(3)}")

    # 4. refit with other λ: post-processing of the same release, no privacy cost, the release unchanged
    before = result.release.matrix.tobytes()
    for lam in (0.0, 10.0, 1000.0):
        other = model.refit(alpha=lam)
        quality = f", held-out R² {other.score(X, y):.4f}" if X is not None else ""
        print(f"refit λ = {lam:g}: coef {np.round(other.coef_, 4)}{quality}")
    assert result.release.matrix.tobytes() == before
    print("the release is unchanged: every refit was post-processing (no privacy spent)")

    # 5. the figure `ltm job result` writes (matplotlib: the plot extra)
    try:
        from ltm.analyst.figure import write_figure

        print(f"figure: {write_figure(result)}")
    except ImportError:
        print("no figure: matplotlib is not installed (pip install 'ltm[plot]')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

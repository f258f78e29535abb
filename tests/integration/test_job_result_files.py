"""``ltm job result ID --out DIR`` against a real analyst process (issue 33 item 4, issue 35): each job's
files go to ``DIR/<job id>/`` — two jobs fetched into one ``--out`` keep their own files — with the
job's figure beside them, and what is written opens with the analyst's Python surface
(analyst/result.py) and refits the job's own model.

The analyst serves from a state directory holding two finished jobs (their result shares from the real
in-process path, seeded): ``ltm job result`` reads them over gRPC as it would from a job the
parties ran, without running servers and parties again.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ltm.analyst.jobs import fit_model
from ltm.analyst.models import ReleaseLowRank, ReleaseRidge
from ltm.analyst.result import open_result
from ltm.analyst.store import AnalystStore
from ltm.datasets.synthetic import synthetic_ridge
from ltm.datasets.tables import Table
from ltm.jsonio import json_default
from ltm.randomness import Randomness
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables


def _finished_job(store: AnalystStore, table: Table, job_id: str, fit: dict) -> str:
    """Run ``job_id`` in process and commit it to ``store`` as done, as the analyst would; returns its sha256."""
    randomness = Randomness.seeded_insecure(7)
    spec, _ = build_job(table, job_id=job_id, randomness=randomness, parties=2, k=2, kind="gram",
                        intercept=table.label is not None)
    run = run_inprocess(spec, party_tables(spec, table), randomness)
    model = fit_model(run.release, fit["model"], rank=fit.get("rank", 5))
    outputs = {"privacy_report.json": json.dumps(run.release.privacy, indent=2, default=json_default),
               "model.json": json.dumps(model, indent=2),
               "report.json": json.dumps({"job_id": job_id, "release_sha256": run.release.sha256,
                                          "participants": run.participants.count}, indent=2)}
    store.add(spec, fit, "seeded 7", time.time() + 60, "published")
    store.finish(job_id, release_sha256=run.release.sha256, participants=run.participants,
                 shares=run.result_shares, outputs=outputs)
    return run.release.sha256


@pytest.fixture(scope="module")
def analyst(tmp_path_factory):
    work = tmp_path_factory.mktemp("jobresult")
    table = synthetic_ridge(3000, 3, Randomness.seeded_insecure(5), label_noise=0.2)
    unlabelled = Table({k: v for k, v in table.columns.items() if k != table.label}, None, "lowrank")
    store = AnalystStore(work / "state")
    try:
        shas = {"ridge-1": _finished_job(store, table, "ridge-1", {"model": "ridge", "lam": 0.0}),
                "lowrank-1": _finished_job(store, unlabelled, "lowrank-1", {"model": "lowrank", "rank": 2})}
    finally:
        store.close()
    group = ProcessGroup(work, None, insecure=True)
    try:
        ap = group.start_service("analyst", "analyst", ["analyst", "--out", str(work / "analyst-out"),
                                                        "--state-dir", str(work / "state")])
        yield {"work": work, "endpoint": ap.endpoint, "shas": shas}
    finally:
        group.stop_all()


def _result(analyst, job_id: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ltm.cli", "job", "result", job_id, "--analyst",
                           analyst["endpoint"], "--insecure", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)


def test_each_jobs_files_and_figure_go_under_out_job_id(analyst):
    out = analyst["work"] / "results"
    for job_id in ("ridge-1", "lowrank-1"):
        done = _result(analyst, job_id, out)
        assert done.returncode == 0, done.stderr
        assert f"to {out / job_id}" in done.stdout and f"figure: {out / job_id / 'figure.png'}" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["lowrank-1", "ridge-1"]  # nothing loose in --out
    for job_id, sha in analyst["shas"].items():
        names = sorted(p.name for p in (out / job_id).iterdir())
        assert names == ["figure.png", "model.json", "privacy_report.json", "release.json", "report.json"]
        assert (out / job_id / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert json.loads((out / job_id / "release.json").read_text())["sha256"] == sha

    ridge = open_result(out / "ridge-1")  # the files open, and the job's own fit is reproduced from them
    model = ReleaseRidge(alpha=ridge.model["lambda"]).fit(ridge)
    np.testing.assert_allclose(model.coef_, [ridge.model["coef"][f] for f in model.feature_names_in_], rtol=1e-12)
    low = open_result(out / "lowrank-1")
    comps = ReleaseLowRank(n_components=2).fit(low).components_
    np.testing.assert_allclose(comps, np.array(low.model["components"]).T, atol=1e-12)


def test_without_matplotlib_the_figure_is_a_one_line_note(analyst, tmp_path):
    """matplotlib is the plot extra: hidden from the command (a None entry in sys.modules makes its
    import fail), the files are still written and one line says why there is no figure."""
    code = ("import sys; sys.modules['matplotlib'] = None; sys.modules['matplotlib.figure'] = None; "
            "from ltm.cli.app import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "job", "result", "ridge-1", "--analyst", analyst["endpoint"],
                           "--insecure", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "no figure: matplotlib is not installed" in done.stdout and done.stderr == ""
    assert sorted(p.name for p in (tmp_path / "ridge-1").iterdir()) == [
        "model.json", "privacy_report.json", "release.json", "report.json"]

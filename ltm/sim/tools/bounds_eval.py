"""Model quality on the bundled data with column transforms from three sources (prints JSON).

``python -m ltm.sim.tools.bounds_eval [--seeds 5]`` fits the same private ridge job (the demo's: bundled UCI
household power data, the demo's train/test split, 4 parties, 3 servers, ε = 1, δ = 1e-6, the
``ltm.planner.default_m`` sketch size) with each column's centre and scale taken from:

* ``data``: the training data's means and standard deviations (what ``ltm demo`` does — not
  private: these statistics end up in the public spec);
* ``bounds``: the DP bounds pre-job (``ltm job bounds``: two histogram rounds, total ε = 1,
  δ = 1e-7, run through the in-process runtime) — the means and standard deviations of the
  released histograms;
* ``ranges``: the documented public ranges of ``examples/jobs/power-ridge.toml``.

and reports the held-out R² (mean and standard deviation over seeds — each seed its own noise and
its own public sketch seed: with m = 28 rows the sketch itself moves R² a lot) beside the
non-private OLS.
``--networked DIR`` instead runs the bounds pre-job and the main job end to end over separate
processes (servers, analyst, operator, four parties each with its own file; production
randomness).  SIGTERM or SIGHUP end it like Ctrl-C: every process it started is stopped.  A
benchmark for docs/bounds.md, not a test.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from ltm.analyst.bounds import Draft, next_grid, noise_sd, round_estimates
from ltm.analyst.estimators import make_estimator, release_lambda
from ltm.analyst.metrics import r2
from ltm.jobfile import parse_job_file, render_job_file
from ltm.planner import default_m
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.simulate import SimulateConfig, load_table

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "power-ridge.toml"
PARTIES, K = 4, 3


def _doc(train, label: str, columns: list[dict], m: int, kind: str = "sparse") -> dict[str, Any]:
    n = train.n
    sizes = [n // PARTIES + (1 if i < n % PARTIES else 0) for i in range(PARTIES)]
    return {"job": {"id": "eval", "partition": "rows"},
            "release": {"kind": "sparse", "m": m} if kind == "sparse" else {"kind": kind},
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


def evaluate(seeds: int = 5, kind: str = "sparse") -> dict[str, Any]:
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
            job = _doc(train, label, columns, m, kind)
            job["job"]["id"] = f"eval-{seed}"  # its own public sketch seed (derived from the id) per run
            spec = parse_job_file(render_job_file(job)).spec
            run = run_inprocess(spec, _tables(spec, train), Randomness.seeded_insecure(1000 + seed))
            est_model = make_estimator("ridge", lam=release_lambda(run.release)[0], debias=True).fit(run.release)
            entry = results.setdefault(name, {"r2": [], "kind": spec.sketch.kind, "m": spec.sketch.m})
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
    out["release"] = kind
    out["bounds_prejob"] = {"rounds": 2, "epsilon_total": 1.0, "delta_total": 1e-7}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--release", default="sparse", help="the main job's release kind: sparse (m by the demo's "
                                                        "rule, default) or auto (the planner) or gram")
    p.add_argument("--networked", metavar="WORKDIR",
                   help="instead: run the bounds pre-job and the main job over separate processes here")
    args = p.parse_args()
    from ltm.sim.localnet.launcher import stop_on_termination

    try:
        # SIGTERM/SIGHUP end the run like Ctrl-C: networked's finally stops every process it started
        with stop_on_termination():
            result = networked(Path(args.networked)) if args.networked else evaluate(args.seeds, args.release)
    except KeyboardInterrupt as exc:
        # one line and the shell's status for death by that signal (128 + signum), as `ltm` does
        print(f"bounds_eval: {exc or 'interrupted'}", file=sys.stderr)
        raise SystemExit(128 + int(getattr(exc, "signum", signal.SIGINT))) from None
    print(json.dumps(result, indent=2))


# ---------------------------------------------------------------------------- over networked actors
def _write_job_draft(workdir: Path, train, label: str, names: list[str], servers: list,
                     timeout: float) -> tuple[Path, Path, dict[str, Path]]:
    """The main job's draft (columns without transforms: the pre-job fills them in) naming the
    running servers, and each party's CSV of its rows; returns the draft's path, where the
    completed job file goes, and each party's data file."""
    from ltm.sim.localnet.demo import write_party_csv

    doc = _doc(train, label, [{"name": c, **({"role": "label"} if c == label else {})} for c in names],
               default_m(train.n, len(names), epsilon=1.0, delta=1e-6, clip_bound=1.0))
    doc["job"]["id"] = "power-bounded"
    doc["job"]["deadline_s"] = timeout
    doc["servers"] = [{"id": s.actor, "endpoint": s.endpoint} for s in servers]
    start = 0
    files = {}
    for q in doc["parties"]:
        d = workdir / "data" / q["id"]
        d.mkdir(parents=True, exist_ok=True)
        files[q["id"]] = d / "rows.csv"
        write_party_csv(files[q["id"]], {c: v[start:start + q["clients"]] for c, v in train.columns.items()})
        start += q["clients"]
    draft, main_path = workdir / "draft.toml", workdir / "main.toml"
    draft.write_text(render_job_file(doc))
    return draft, main_path, files


class _NetworkedActors:
    """The party and operator processes of a networked run (started in the run's process group);
    ``spent``: each party's ledger entry after every job it joined."""

    def __init__(self, group, servers: list, analyst, parties: list[str], files: dict[str, Path],
                 timeout: float) -> None:
        self.group, self.servers, self.analyst, self.parties = group, servers, analyst, parties
        self.files, self.timeout = files, timeout
        self.spent: dict[str, list[dict[str, Any]]] = {p: [] for p in parties}

    def run_parties(self, job_id: str) -> None:
        """Every party joins ``job_id``; waits for them (RuntimeError if one fails) and records their ledgers."""
        files, servers, timeout = self.files, self.servers, self.timeout
        # Each job's upload journal in a directory of its own; the privacy ledger is the party's
        # one ledger on this host ($XDG_STATE_HOME/ltm/ledger: the deployment's, ltm/sim/localnet/launcher.py),
        # charged by every round and the main job.
        procs = [self.group.start_task("party", f"{p}-{job_id}", [
            "party", "--id", p, "--job", job_id, "--data", str(files[p]), "--max-epsilon", "1",
            "--servers", ",".join(s.endpoint for s in servers), "--server-ids", ",".join(s.actor for s in servers),
            "--no-progress", "--wait", "120", "--state-dir", str(files[p].parent / f".state-{job_id}"),
            "--summary-file", str(files[p].parent / f"{job_id}.summary.json")])
            for p in self.parties]
        for p, ap in zip(self.parties, procs):
            if ap.proc.wait(timeout=timeout) != 0:
                raise RuntimeError(f"{ap.actor} failed:\n{ap.log_tail()}")
            entry = json.loads((files[p].parent / f"{job_id}.summary.json").read_text())["ledger"]
            self.spent[p].append({"job_id": job_id, "ledger": entry["ledger"], "charged": entry["charged"],
                                  "epsilon_before": entry["before"]["epsilon"],
                                  "epsilon_after": entry["after"]["epsilon"],
                                  "jobs": entry["after"]["jobs"], "budget": entry["budget"]})

    def operator(self, *argv: str, background: bool = False):
        """``ltm job ARGV --analyst ...`` as the operator; waited for (RuntimeError if it fails) unless
        ``background``."""
        ap = self.group.start_task("operator", f"operator-{len(self.group.processes)}",
                                   ["job", *argv, "--analyst", self.analyst.endpoint])
        if background:
            return ap
        if ap.proc.wait(timeout=self.timeout) != 0:
            raise RuntimeError(f"ltm job {argv[0]} failed:\n{ap.log_tail()}")
        return ap


def networked(workdir: Path, *, epsilon: float = 1.0, delta: float = 1e-7, timeout: float = 900.0) -> dict[str, Any]:
    """The bounds pre-job and the main job over separate processes on loopback, on the demo's
    training split (4 parties, each with its own CSV), production randomness; returns the
    pre-job's centres/scales and the main job's held-out R²."""
    import subprocess  # noqa: F401
    import time

    from ltm.sim.localnet.demo import write_party_csv  # noqa: F401  (loaded before the run is timed)
    from ltm.sim.localnet.launcher import ProcessGroup
    from ltm.transport.certs import write_certs

    cfg = SimulateConfig(model="ridge")
    train, test = load_table(cfg, Randomness.seeded_insecure(0))
    label = train.label
    names = list(train.columns)
    parties = [f"party-{i}" for i in range(PARTIES)]
    certs = workdir / "certs"
    write_certs(certs, [f"server-{i}" for i in range(K)] + parties + ["analyst", "operator"], force=True)
    group = ProcessGroup(workdir, certs)
    t0 = time.monotonic()
    try:
        servers = group.start_servers(K)
        analyst = group.start_service("analyst", "analyst", ["analyst", "--out", str(workdir / "analyst-out")])
        draft, main_path, files = _write_job_draft(workdir, train, label, names, servers, timeout)
        actors = _NetworkedActors(group, servers, analyst, parties, files, timeout)
        bounds = actors.operator("bounds", str(draft), "--epsilon", str(epsilon), "--delta", str(delta),
                                 "--out", str(main_path), "--json", background=True)
        actors.run_parties("power-bounded-bounds-1")
        actors.run_parties("power-bounded-bounds-2")
        if bounds.proc.wait(timeout=timeout) != 0:
            raise RuntimeError(f"ltm job bounds failed:\n{bounds.log_tail()}")
        info = json.loads(bounds.log_path.read_text())
        main = parse_job_file(main_path.read_text())
        actors.operator("submit", str(main_path))
        actors.run_parties("power-bounded")
        actors.operator("submit", str(main_path), "--wait")  # idempotent: waits until the job is done
        out = workdir / "result"
        actors.operator("result", "power-bounded", "--out", str(out))
        model = json.loads((out / "model.json").read_text())
        report = json.loads((out / "report.json").read_text())
    finally:
        group.stop_all()
    features = [c for c in names if c != label]
    pred = test.matrix(features) @ np.array([model["coef"][c] for c in features]) + model["intercept"]
    return {"data": train.source, "n_train": train.n, "n_test": test.n, "seconds": time.monotonic() - t0,
            "prejobs": info["prejobs"], "chosen": info["chosen"],
            "columns": [{"name": c.name, "role": c.role, "center": c.center, "scale": c.scale}
                        for c in main.spec.columns],
            "party_ledgers": actors.spent,
            "main_job": {"job_digest": main.spec.digest, "release_sha256": report["release_sha256"],
                         "sketch": {"kind": main.spec.sketch.kind, "m": main.spec.sketch.m},
                         "privacy": report["privacy"]["guarantee"], "r2": r2(test.columns[label], pred)}}


if __name__ == "__main__":
    main()

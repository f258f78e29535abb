"""``ltm experiment run SPEC``: run an experiment spec's grid, resumably, and report it.

For every (cell, repetition) of the spec's grid (repetition-major, so a partial run already
covers the whole grid), the runner derives the seed, has an executor (``ltm/experiments/executors.py``:
this process, ``--workers`` processes, or a Dask cluster with ``--executor dask``) call the
scenario's cell function, and appends the rows to ``DIR/results.csv``, flushed and fsync'd per
(cell, repetition), as they come back.  Rerunning the same command skips every pair already in the
CSV, so an interrupted run RESUMES where it stopped; once the grid is complete the file is rewritten
in grid order, so it does not depend on the executor.  At the end it writes ``summary.md`` (mean ± std
over repetitions, beside the paper's numbers), ``aggregate.csv`` (the same per grid point and
series, machine-readable), the spec's PNG plots and ``run.json`` (the exact command, spec hashes,
wall time, versions).

``--networked`` installs :class:`ltm.experiments.release_backends.NetworkedBackend`: every LTM job of a
cell goes through real ``ltm server`` / ``ltm analyst`` / ``ltm party`` processes with mutual TLS
(only for specs and scenarios that declare support; workers are then limited to 1).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ltm.experiments import release_backends
from ltm.experiments.executors import EXECUTORS, make_executor
from ltm.experiments.registry import Scenario, get_scenario
from ltm.experiments.results import ResultsCsv
from ltm.experiments.spec import SPEC_DIR, Cell, ExperimentSpec, SpecError, load_spec
from ltm.progress import Bar, progress_bar

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Task:
    cell: Cell
    rep: int
    seed: int
    weight: float


def _run_cell(scenario_name: str, module: str | None, params: dict, seed: int) -> tuple[list[dict], float]:
    """Worker entry point (top-level so process pools and Dask can send it by reference).

    The cell runs with ONE BLAS thread: a multi-threaded BLAS splits long reductions (AᵀA over
    n ≳ 5·10⁴ rows) by its thread count, which moves the last bits (≈ 1e-13 relative) of the
    results; pinned to one thread a seed gives the same bytes in this process, in a process pool
    or on a Dask worker, on any number of cores.  Parallelism comes from running cells side by side.
    """
    from threadpoolctl import threadpool_limits

    scenario = get_scenario(scenario_name, module)  # imports the scenario's module, so its BLAS is loaded
    t = time.perf_counter()
    with threadpool_limits(limits=1):
        rows = scenario.func(dict(params), seed)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"scenario {scenario_name!r} must return a list of dicts, got {type(rows).__name__}")
    return rows, time.perf_counter() - t


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for mod in ("numpy", "matplotlib", "grpc", "cryptography"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - report what is there
            out[mod] = "not installed"
    try:
        from importlib.metadata import version

        out["ltm"] = version("ltm")
    except Exception:  # noqa: BLE001
        out["ltm"] = "unknown"
    try:
        out["git_commit"] = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                                           text=True, timeout=5).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain"], capture_output=True, text=True,
                               timeout=5).stdout.strip()
        out["git_dirty"] = "yes" if dirty else "no"
    except Exception:  # noqa: BLE001
        out["git_commit"] = "unknown"
    return out


def _weight(scenario: Scenario, params: dict) -> float:
    if scenario.cost is None:
        return 1.0
    try:
        return max(float(scenario.cost(params)), 1e-9)
    except Exception:  # noqa: BLE001 - only the ETA depends on it
        return 1.0


@dataclass
class _Pairs:
    """The run's (cell, repetition) pairs: those still to compute, every pair's place in the grid,
    the cost weights of the whole grid and of what is already done, and the counts."""

    tasks: list[Task]
    grid_order: dict[tuple[str, int], int]
    total_weight: float
    done_weight: float
    pairs_total: int
    resumed: int


@dataclass
class _Run:
    """What the steps of one run share: its identity (for ``run.json``) and how it went so far."""

    spec: ExperimentSpec
    out_dir: Path
    command: str | None
    started: str
    t0: float
    history: list[dict]
    transport_name: str
    status: str = "complete"
    ran: int = 0

    @property
    def run_json(self) -> Path:
        return self.out_dir / "run.json"

    def record(self, csv: ResultsCsv, pairs: _Pairs, ex: Any, plots: list[str]) -> dict[str, Any]:
        """The run record as it stands (:func:`_record`)."""
        return _record(self.spec, self.out_dir, self.command, self.started, self.t0, self.status, pairs.pairs_total,
                       len(csv.done()), self.ran, pairs.resumed, self.transport_name, ex.describe(), self.history,
                       plots)


def _check_options(spec: ExperimentSpec, scenario: Scenario, *, networked: bool, workers: int | None,
                   executor: str) -> int | None:
    """Refuse option combinations the spec or the executor cannot run; returns ``workers`` (1 when
    ``networked`` forces one deployment), printing a note where an option is ignored."""
    if networked and not (spec.networked and scenario.networked):
        raise ValueError(f"spec {spec.name!r} does not support --networked "
                         f"(spec networked={spec.networked}, scenario networked={scenario.networked})")
    if workers is not None and workers < 1:
        raise ValueError("--workers must be ≥ 1")
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if networked and executor != "local":
        raise ValueError(f"--networked runs cells one at a time in this process (one deployment of servers, "
                         f"analyst and parties); it cannot use --executor {executor}")
    if networked and spec.params.get("path") == "fast":
        print(f"ltm experiment: note: spec {spec.name!r} releases by the exact fast path (path = \"fast\"); only "
              f"its real-path jobs would use the network — try --reduced, whose grid uses the real cores",
              file=sys.stderr)
    if networked and (workers or 1) > 1:
        print("ltm experiment: --networked runs cells one at a time (one deployment); ignoring --workers",
              file=sys.stderr)
        workers = 1
    return workers


def _previous_history(run_json: Path, out_dir: Path, spec: ExperimentSpec, reduced: bool) -> list[dict]:
    """The history of earlier runs into ``out_dir`` (empty for a new folder); refuses a folder that
    holds another scenario, base seed or grid size."""
    history: list[dict] = []
    if run_json.exists():
        previous = json.loads(run_json.read_text())
        if previous.get("identity_hash") not in (None, spec.identity_hash):
            raise ValueError(f"{out_dir} holds results of another scenario or base seed "
                             f"({previous.get('scenario')!r}, seed {previous.get('base_seed')}); use a new --out")
        if previous.get("reduced") is not None and previous.get("reduced") != reduced:
            raise ValueError(f"{out_dir} holds a {'reduced' if previous['reduced'] else 'full'} run; "
                             f"use another --out for the {'reduced' if reduced else 'full'} grid")
        history = previous.get("history", []) + [{k: previous.get(k) for k in
                                                  ("command", "started", "wall_time_s", "status", "pairs_run")}]
    return history


def _plan_pairs(spec: ExperimentSpec, scenario: Scenario, done: set[tuple[str, int]],
                max_pairs: int | None) -> _Pairs:
    """The grid's pairs in repetition-major order, those in ``done`` skipped, at most ``max_pairs`` to run."""
    cells = spec.cells()
    tasks: list[Task] = []
    grid_order: dict[tuple[str, int], int] = {}
    total_weight = done_weight = 0.0
    for rep in range(spec.repetitions):  # repetition-major: a partial run already covers the grid
        for cell in cells:
            grid_order[(cell.cell_id, rep)] = len(grid_order)
            w = _weight(scenario, cell.params)
            total_weight += w
            if (cell.cell_id, rep) in done:
                done_weight += w
            else:
                tasks.append(Task(cell, rep, spec.seed(cell, rep), w))
    pairs_total = len(cells) * spec.repetitions
    resumed = pairs_total - len(tasks)
    if max_pairs is not None:
        tasks = tasks[:max_pairs]
    return _Pairs(tasks, grid_order, total_weight, done_weight, pairs_total, resumed)


def _compute_pairs(run: _Run, ex: Any, csv: ResultsCsv, pairs: _Pairs, bar: Bar, *, networked: bool,
                   max_pairs: int | None) -> None:
    """Compute the pairs on ``ex``, appending each to ``results.csv`` as it comes back; on every way
    out, free the executor and the network and write ``run.json`` (:func:`_settle`)."""
    spec = run.spec
    previous_transport = None
    net = None
    if networked:
        net = release_backends.NetworkedBackend()
        previous_transport = release_backends.install(net)
    restore = _interrupt_on_sigterm()
    try:
        # THE cell loop, whatever the executor: each pair is appended (one write + fsync) as
        # soon as it is back, in whatever order the pairs finish
        finished = ex.imap_unordered(_run_cell, pairs.tasks, args=lambda t: (spec.scenario, spec.module,
                                                                             t.cell.params, t.seed),
                                     key=lambda t: f"{spec.name}-{t.cell.cell_id}-rep{t.rep}")
        with closing(finished):
            for task, (rows, _) in finished:
                csv.append(task.cell.cell_id, task.rep, task.seed, task.cell.axes, rows)
                run.ran += 1
                bar.update(100.0 * task.weight / max(pairs.total_weight, 1e-12))  # percent of the weighted work
                bar.describe(f"{pairs.resumed + run.ran}/{pairs.pairs_total} pairs")
    except KeyboardInterrupt:
        run.status = "interrupted"
        raise
    except BaseException:
        run.status = "failed"
        raise
    finally:
        restore()
        bar.close()
        ex.close()  # free the workers (a LocalCluster's processes) before the report
        if net is not None:
            net.close()
            release_backends.install(previous_transport)
        _settle(run, ex, csv, pairs, max_pairs)


def _settle(run: _Run, ex: Any, csv: ResultsCsv, pairs: _Pairs, max_pairs: int | None) -> None:
    """The run's final status; a complete grid's file in grid order; ``run.json``; how to resume."""
    if run.status != "complete" or (max_pairs is not None and len(csv.done()) < pairs.pairs_total):
        run.status = run.status if run.status != "complete" else "partial"
    if run.status == "complete":  # every pair is there: the file's order no longer depends on who ran them
        csv.canonicalize(pairs.grid_order)
    record = run.record(csv, pairs, ex, [])
    run.run_json.write_text(json.dumps(record, indent=2) + "\n")
    if run.status in ("interrupted", "failed"):
        print(f"\nltm experiment: {run.status}; {len(csv.done())}/{pairs.pairs_total} pairs are in "
              f"{run.out_dir / 'results.csv'} — rerun the same command to resume", file=sys.stderr)


def _write_report(run: _Run, ex: Any, csv: ResultsCsv, pairs: _Pairs, plots: bool) -> dict[str, Any]:
    """Plots, ``summary.md``, ``aggregate.csv`` and the final ``run.json``; a plot failure is recorded
    there and then raised."""
    spec, out_dir = run.spec, run.out_dir
    rows = csv.rows()
    plot_files: list[str] = []
    plot_error = None
    if plots:
        from ltm.experiments.report import PlotsUnavailable, write_plots

        try:
            plot_files = write_plots(spec, rows, out_dir)
        except PlotsUnavailable as exc:
            plot_error = str(exc)
    record = run.record(csv, pairs, ex, plot_files)
    from ltm.experiments.report import write_aggregate, write_summary

    write_summary(spec, rows, out_dir, record)
    write_aggregate(spec, rows, out_dir)
    if plot_error:
        record["plots_error"] = plot_error
    run.run_json.write_text(json.dumps(record, indent=2) + "\n")
    if plot_error:
        raise PlotsUnavailable(plot_error)
    return record


def run_experiment(spec_ref: str | Path, out: str | Path | None = None, *, reduced: bool = False,  # noqa: PLR0913 - `ltm experiment run`'s flags, keyword-only
                   networked: bool = False, workers: int | None = None, progress: bool = True, plots: bool = True,
                   command: str | None = None, max_pairs: int | None = None, executor: str = "local",
                   scheduler: str | None = None, connect_timeout: float | None = None) -> dict[str, Any]:
    """Run (or resume) a spec; returns the run record written to ``run.json``.

    ``executor`` computes the pairs (:mod:`ltm.experiments.executors`): ``"local"`` — this process for
    ``workers`` = 1 (the default), else a pool of ``workers`` processes — or ``"dask"`` — a
    ``LocalCluster`` of ``workers`` processes (default: one per core), or the running cluster at
    ``scheduler`` (reached within ``connect_timeout`` s, default 10).  Whatever computes them, this process
    appends each finished pair to ``results.csv`` at once and, when the grid is complete, rewrites
    the file in grid order (:meth:`ResultsCsv.canonicalize`): the same seeds give the same bytes
    on every executor.  ``max_pairs`` stops after that many newly computed (cell, rep) pairs
    (testing resumption).
    """
    t0 = time.monotonic()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    spec = load_spec(spec_ref, reduced=reduced)
    scenario = get_scenario(spec.scenario, spec.module)
    workers = _check_options(spec, scenario, networked=networked, workers=workers, executor=executor)
    out_dir = Path(out) if out else REPO_ROOT / "runs" / (spec.name + ("-reduced" if reduced else ""))
    history = _previous_history(out_dir / "run.json", out_dir, spec, reduced)
    run = _Run(spec, out_dir, command, started, t0, history, "networked" if networked else "inprocess")

    # Started before anything is written: a missing dask or an unreachable scheduler leaves no trace.
    ex = make_executor(executor, workers, scheduler, connect_timeout)
    with ex:  # closed on every way out (and earlier, in _compute_pairs, once the pairs are done)
        out_dir.mkdir(parents=True, exist_ok=True)
        csv = ResultsCsv(out_dir / "results.csv", spec.axes).open()
        pairs = _plan_pairs(spec, scenario, csv.done(), max_pairs)
        bar = progress_bar(100.0, spec.name, unit="%", quiet=not progress,
                           initial=100.0 * pairs.done_weight / max(pairs.total_weight, 1e-12))
        _compute_pairs(run, ex, csv, pairs, bar, networked=networked, max_pairs=max_pairs)
    return _write_report(run, ex, csv, pairs, plots)


def _interrupt_on_sigterm():
    """While a run is going, SIGTERM (and SIGINT, even when a background shell ignores it) raise
    KeyboardInterrupt, so run.json records the interruption; returns a function that restores the
    previous handlers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    return lambda: [signal.signal(sig, h) for sig, h in previous.items()]


def _record(spec: ExperimentSpec, out_dir: Path, command: str | None, started: str, t0: float, status: str,  # noqa: PLR0913 - run.json's fields, one argument each; a record type is the fix
            pairs_total: int, pairs_done: int, ran: int, resumed: int, transport: str, executor: dict[str, Any],
            history: list, plots: list[str]) -> dict[str, Any]:
    """The run record (``run.json``); ``executor`` is :meth:`Executor.describe` — ``executor``
    (``local`` or ``dask``), ``workers`` and, for Dask, ``scheduler`` (``None``: a LocalCluster)."""
    spec_bytes = spec.path.read_bytes() if spec.path else b""
    import hashlib

    return {
        "command": command or " ".join(shlex.quote(a) for a in sys.argv),
        "cwd": os.getcwd(),
        "spec": spec.name,
        "spec_path": recorded_spec_path(spec.path) if spec.path else None,
        "spec_file_sha256": hashlib.sha256(spec_bytes).hexdigest(),
        "spec_hash": spec.file_hash,
        "identity_hash": spec.identity_hash,
        "scenario": spec.scenario,
        "base_seed": spec.base_seed,
        "reduced": spec.reduced,
        "repetitions": spec.repetitions,
        "grid": spec.grid,
        "cells": pairs_total // max(spec.repetitions, 1),
        "pairs_total": pairs_total,
        "pairs_done": pairs_done,
        "pairs_run": ran,
        "pairs_resumed": resumed,
        "transport": transport,
        **executor,
        "status": status,
        "started": started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": round(time.monotonic() - t0, 3),
        "plots": plots,
        "versions": versions(),
        "randomness": "seeded numpy / AES-CTR streams: reproducible and NOT private",
        "history": history,
    }


#: The directory that holds the ``experiments`` package (the repository, or site-packages).
PROJECT_ROOT = SPEC_DIR.parents[2]


def recorded_spec_path(path: Path) -> str:
    """The spec's path as ``run.json`` records it: relative to :data:`PROJECT_ROOT` for a spec inside
    it, so a record committed from one checkout still finds its spec in another; else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(resolved)


def rebuild_report(out_dir: str | Path, *, plots: bool = True) -> dict[str, Any]:
    """Re-render summary.md and the plots of an output folder from its results.csv and run.json."""
    out_dir = Path(out_dir)
    record = json.loads((out_dir / "run.json").read_text())
    spec_path = Path(record["spec_path"])
    if not spec_path.is_absolute():
        spec_path = PROJECT_ROOT / spec_path
    spec = load_spec(spec_path, reduced=bool(record.get("reduced")))
    get_scenario(spec.scenario, spec.module)  # registers the series styles
    rows = ResultsCsv(out_dir / "results.csv", spec.axes).open().rows()
    if plots:
        from ltm.experiments.report import write_plots

        record["plots"] = write_plots(spec, rows, out_dir)
    from ltm.experiments.report import write_aggregate, write_summary

    write_summary(spec, rows, out_dir, record)
    write_aggregate(spec, rows, out_dir)
    (out_dir / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def list_specs(args: argparse.Namespace) -> int:
    """``ltm experiment list``: the bundled specs and the registered scenarios."""
    from ltm.experiments.registry import MISSING_MODULES, load_scenarios

    scenarios = load_scenarios(quiet=True)
    print("specs (ltm/experiments/specs):")
    for path in sorted(SPEC_DIR.glob("*.toml")):
        try:
            spec = load_spec(path)
            print(f"  {spec.name:28s} {spec.scenario:32s} {len(spec.cells())} cells × {spec.repetitions} reps"
                  f"{'  [networked]' if spec.networked else ''}")
        except (SpecError, ValueError) as exc:
            print(f"  {path.stem:28s} INVALID: {exc}")
    print("scenarios:")
    for name, sc in sorted(scenarios.items()):
        print(f"  {name:32s} {sc.module}{'  [networked]' if sc.networked else ''}")
    for module, why in sorted(MISSING_MODULES.items()):
        print(f"  (module {module} not present: {why})")
    return 0


def report_command(args: argparse.Namespace) -> int:
    """``ltm experiment report DIR``: re-render an output folder's summary and plots."""
    record = rebuild_report(args.dir, plots=not args.no_plots)
    print(f"re-rendered {args.dir}: summary.md{', ' + ', '.join(record.get('plots', [])) if record.get('plots') else ''}")
    return 0

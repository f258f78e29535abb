"""``ltm experiment``: reproduce the papers' figures and tables from experiment specs (the role's
code: ``ltm/experiments/runner.py``)."""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ltm.cli.app import lazy
from ltm.cli.options import quiet

DESCRIPTION = ("Run experiment specs (ltm/experiments/specs/*.toml): a scenario over a parameter grid, resumable, with "
               "results.csv, summary.md, plots and run.json.")


def configure(p: argparse.ArgumentParser) -> None:
    """``ltm experiment`` and its subcommands run, list and report."""
    from ltm.experiments.executors import EXECUTORS

    esub = p.add_subparsers(dest="experiment_command", required=True)
    run_p = esub.add_parser("run", help="run (or resume) a spec")
    run_p.add_argument("spec", help="a spec file, or the name of one in ltm/experiments/specs/")
    run_p.add_argument("--out", help="output folder (default runs/<spec name>); rerun to resume")
    run_p.add_argument("--reduced", action="store_true", help="the spec's reduced grid (CI-sized)")
    run_p.add_argument("--networked", action="store_true",
                       help="run LTM jobs through real gRPC server/analyst/party processes (mutual TLS)")
    run_p.add_argument("--workers", type=int, default=None,
                       help="cells computed in parallel processes (default 1; with --executor dask: the local "
                            "cluster's worker processes, default one per core)")
    run_p.add_argument("--executor", choices=EXECUTORS, default=None,
                       help="where the cells are computed: local (this process, or --workers processes; the "
                            "default) or dask (a dask.distributed cluster: pip install 'ltm[dask]')")
    run_p.add_argument("--scheduler", metavar="ADDRESS",
                       help="with --executor dask (implied): use the running Dask scheduler at ADDRESS "
                            "(e.g. tcp://host:8786) and its workers instead of a local cluster")
    quiet(run_p, "no progress bar on stderr (none either when stderr is not a terminal)")
    run_p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    run_p.set_defaults(func=run)
    lst = esub.add_parser("list", help="list the bundled specs and registered scenarios")
    lst.set_defaults(func=lazy("ltm.experiments.runner:list_specs"))
    rep = esub.add_parser("report", help="re-render summary.md and plots of an output folder")
    rep.add_argument("dir", help="an output folder of `ltm experiment run`")
    rep.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    rep.set_defaults(func=lazy("ltm.experiments.runner:report_command"))


def run(args: argparse.Namespace) -> int:
    """``ltm experiment run``: run (or resume) a spec and say where its outputs are.  A bad spec, a
    missing executor or plotting library ends it through the ``ltm`` command's one error mapping."""
    from ltm.experiments.runner import REPO_ROOT, run_experiment

    executor = args.executor or ("dask" if args.scheduler else "local")
    flags = [f"--out {shlex.quote(args.out)}" if args.out else "", "--reduced" if args.reduced else "",
             "--networked" if args.networked else "", f"--workers {args.workers}" if args.workers else "",
             f"--executor {executor}" if executor != "local" else "",
             f"--scheduler {shlex.quote(args.scheduler)}" if args.scheduler else "",
             "--no-progress" if args.quiet else "", "--no-plots" if args.no_plots else ""]
    command = " ".join(["ltm experiment run", shlex.quote(args.spec), *[f for f in flags if f]])
    record = run_experiment(args.spec, args.out, reduced=args.reduced, networked=args.networked,
                            workers=args.workers, progress=not args.quiet, plots=not args.no_plots,
                            command=command, executor=executor, scheduler=args.scheduler)
    out = Path(args.out) if args.out else REPO_ROOT / "runs" / (record["spec"] + ("-reduced" if args.reduced else ""))
    print(f"{record['spec']}: {record['pairs_done']}/{record['pairs_total']} (cell, rep) pairs, "
          f"{record['pairs_run']} run now in {record['wall_time_s']:.1f} s → {out}/"
          f"{{results.csv, summary.md, run.json{', ' + ', '.join(record['plots']) if record['plots'] else ''}}}")
    return 0

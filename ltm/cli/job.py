"""``ltm job``: the operator's commands, from a job file to the fitted model (the role's code:
``analyst/operator.py``, and ``analyst/bounds.py`` for the DP pre-job)."""
from __future__ import annotations

import argparse
import os

from ltm.cli.app import lazy
from ltm.cli.options import certificates, endpoint, output
from ltm.jobconfig import add_options

DESCRIPTION = ("The operator's side of a real job: a job file (TOML) written from public information only, checked "
               "locally, run by the analyst.")


def _connection(p: argparse.ArgumentParser) -> None:
    """How ``ltm job`` reaches the analyst: ``--analyst``, ``--certs`` (as 'operator'), ``--insecure``."""
    p.add_argument("--analyst", default=os.environ.get("LTM_ANALYST"), type=endpoint,
                   help="analyst endpoint host:port (default: $LTM_ANALYST)")
    certificates(p, "certificate directory holding operator.pem/.key and ca.pem", env="LTM_CERTS")


def configure(p: argparse.ArgumentParser) -> None:
    """``ltm job`` and its subcommands check, submit, status, cancel, result and bounds."""
    jsub = p.add_subparsers(dest="job_command", required=True)

    c = jsub.add_parser("check", help="validate a job file and print its digest and resolved choices")
    c.add_argument("file", help="job file (TOML)")
    output(c, "print the resolved job as JSON")
    c.set_defaults(func=lazy("ltm.analyst.operator:run_check"))

    s = jsub.add_parser("submit", help="submit a job file to the analyst, which publishes and runs it")
    s.add_argument("file", help="job file (TOML)")
    _connection(s)
    s.add_argument("--randomness", help="how the parties draw randomness, for the report (e.g. 'seeded 7')")
    s.add_argument("--wait", action="store_true", help="wait until the job is done or failed")
    s.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds "
                                                 "(default: the job's deadline + 300)")
    s.set_defaults(func=lazy("ltm.analyst.operator:run_submit"))

    st = jsub.add_parser("status", help="state and phase of a job (or of every job)")
    st.add_argument("job_id", nargs="?", default="", help="job id (default: every job)")
    _connection(st)
    output(st, "print the jobs as JSON")
    st.set_defaults(func=lazy("ltm.analyst.operator:run_status"))

    x = jsub.add_parser("cancel", help="cancel a job that is not done: the analyst and every server drop it, and "
                                       "its id is never taken again")
    x.add_argument("job_id", help="the job's id")
    x.add_argument("--reason", default="", help="why (kept with the retired id; at most 200 characters)")
    _connection(x)
    x.set_defaults(func=lazy("ltm.analyst.operator:run_cancel"))

    r = jsub.add_parser("result", help="write a finished job's files (release, privacy report, model, report) "
                                       "and its figure into --out/<job id>/")
    r.add_argument("job_id", help="the finished job's id")
    _connection(r)
    r.add_argument("--out", required=True, help="directory for the results: the job's files go into "
                                                "OUT/<job id>/ (created)")
    r.set_defaults(func=lazy("ltm.analyst.operator:run_result"))

    b = jsub.add_parser("bounds", help="DP pre-job: estimate the missing column centres/spreads of a draft job "
                                       "file from per-column histograms, and write the main job file")
    b.add_argument("draft", help="the main job file, with no transform for the columns nobody has bounds for")
    _connection(b)
    b.add_argument("--epsilon", type=float, required=True,
                   help="total ε of the pre-job (split between the rounds)")
    b.add_argument("--delta", type=float, default=1e-7, help="total δ of the pre-job (default 1e-7)")
    b.add_argument("--rounds", type=int, default=2, choices=(1, 2),
                   help="1: the log-scale grid only; 2 (default): then 32 bins over the range it found")
    b.add_argument("--out", required=True, help="where to write the main job file")
    b.add_argument("--randomness", help="how the parties draw randomness, for the report")
    b.add_argument("--timeout", type=float, help="seconds to wait for each round (default: its deadline + 300)")
    add_options(b, "model", only=("intercept",), helps={"intercept": "add an intercept column to the main job"})
    output(b, "print the rounds' estimates as JSON")
    b.set_defaults(func=lazy("ltm.analyst.bounds:run_bounds_command"))

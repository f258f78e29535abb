"""``ltm analyst``: the long-running analyst service (the role's code: ``analyst/main.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy
from ltm.cli.options import actor_options, listen_address

DESCRIPTION = ("The analyst service. The operator submits a job to it (`ltm job submit`); it publishes the job on "
               "every server, waits for the parties, closes the job, asks each server for its result share, "
               "reconstructs the DP release from them, fits the model and writes release.json, "
               "privacy_report.json, model.json and report.json under --out/<job id>. It receives one result share "
               "per server and nothing else of the data: never a party's shares or a raw row. SIGTERM stops it; a "
               "restart resumes running jobs from --state-dir.")


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm analyst`` flags (and the ``--config`` keys they mirror)."""
    p.set_defaults(func=lazy("ltm.analyst.main:run"))
    actor_options(p, {
        "--listen": ("address to bind, e.g. 127.0.0.1:50050 (port 0 = any free port)", listen_address),
        "--out": ("output directory (one sub-directory per job)", None),
    }, serves=True)
    p.add_argument("--state-dir", help="where the analyst's job database lives (default: --out); keep it on "
                                       "persistent storage: a restarted analyst resumes its running jobs from it")
    p.add_argument("--server-retry", type=float,
                   help="seconds to keep retrying a call to a server that is down or restarting (default 30)")

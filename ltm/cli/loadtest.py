"""``ltm loadtest``: P concurrent party streams against k real servers on loopback (the role's code:
``ltm/sim/tools/loadtest.py``)."""
from __future__ import annotations

import argparse
import json

from ltm.cli.options import seed
from ltm.jobconfig import add_options

DESCRIPTION = ("Start k `ltm server` processes on 127.0.0.1 with mTLS, give each of P parties its own certificate and "
               "channels, upload every party's batch to all servers concurrently, re-upload it (idempotency), release "
               "and check the result.")


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm loadtest`` flags."""
    p.add_argument("--parties", type=int, default=1000, help="concurrent parties P (default 1000)")
    p.add_argument("--clients-per-party", type=int, default=4, help="clients in each party's batch (default 4)")
    p.add_argument("--width", type=int, default=4, help="columns per client vector")
    add_options(p, "sketch", only=("m", "k", "share_mode"), defaults={"m": 16},
                helps={"m": "sketch rows (default {default})"})
    p.add_argument("--drivers", type=int, default=1, help="driver processes the parties are split over")
    p.add_argument("--no-duplicate", dest="duplicate", action="store_false", help="skip the re-upload round")
    p.add_argument("--deadline", type=float, default=600.0, help="stop (and fail) after this many seconds")
    p.add_argument("--workdir", help="keep servers' stores and logs here (default: a temporary directory)")
    p.add_argument("--certs-cache", help="reuse (or create) the certificates in this directory")
    seed(p, "SEEDED MODE for the parties' randomness (reproducible, NOT private)", text=True)  # any text seeds them
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``ltm loadtest``: run it and print the report as JSON; 1 unless every check passed."""
    from ltm.sim.tools.loadtest import LoadConfig, run_loadtest

    cfg = LoadConfig(parties=args.parties, clients_per_party=args.clients_per_party, width=args.width, m=args.m,
                     k=args.k, share_mode=args.share_mode, drivers=args.drivers, duplicate=args.duplicate,
                     deadline_s=args.deadline, workdir=args.workdir, certs_cache=args.certs_cache, seed=args.seed)
    report = run_loadtest(cfg)
    print(json.dumps(report, indent=2, allow_nan=True))
    return 0 if report["ok"] else 1

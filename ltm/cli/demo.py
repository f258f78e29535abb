"""``ltm demo``: a whole networked job on loopback (the role's code: ``ltm/sim/localnet/demo.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy
from ltm.cli.options import insecure
from ltm.jobconfig import add_options

#: The data flags the demo and ``ltm operate`` share: the bundled dataset unless --data/--label.
DATA_HELPS = {"data": "CSV instead of the bundled dataset (with --label)"}


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm demo`` flags: the job's shape and privacy, the data, and the run."""
    add_options(p, "sketch", only=("parties", "k", "sketch", "m", "s", "partition", "share_mode"),
                helps={"parties": "party processes (default {default})", "k": "server processes (default {default})"})
    add_options(p, "privacy", only=("epsilon", "delta", "colluding_servers", "verified_clipping"))
    add_options(p, "data", only=("data", "query", "label"), helps=DATA_HELPS)
    p.add_argument("--party-format", choices=("csv", "parquet", "sqlite"), default="csv",
                   help="the file each party process reads its rows from (default csv)")
    p.add_argument("--party-postgres", metavar="DSN",
                   help="instead: each party reads its rows from its own table of this PostgreSQL database "
                        "(the demo writes them; password from PGPASSWORD)")
    add_options(p, "run", only=("seed", "json"))
    p.add_argument("--workdir", help="keep certificates, stores, logs and outputs here (default: a temp dir, removed)")
    p.add_argument("--deadline", type=float, default=60.0, help="seconds the analyst waits for parties")
    insecure(p)
    p.add_argument("--chaos", action="store_true",
                   help="SIGKILL and restart a server mid-upload and another mid-release; the release must not change")
    p.set_defaults(func=lazy("ltm.sim.localnet.demo:run"))

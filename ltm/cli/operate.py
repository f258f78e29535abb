"""``ltm operate``: the demo's convenience for the compose testbed (the role's code: ``ltm/sim/localnet/demo.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy
from ltm.cli.demo import DATA_HELPS
from ltm.cli.options import certificates, endpoint, server_map
from ltm.jobconfig import add_options

DESCRIPTION = ("THE DEMO'S CONVENIENCE, NOT THE REAL PATH (that is `ltm job`: a job file from public information, "
               "parties keeping their own data). For the compose testbed: build the job spec on the data, write each "
               "party's CSV, submit the job to the analyst, wait for the release and report model quality beside "
               "the baselines.")


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm operate`` flags: where the analyst, servers and party files are, and the job."""
    p.add_argument("--analyst", type=endpoint, help="analyst endpoint host:port (not with --write-job)")
    p.add_argument("--servers", required=True, type=server_map,
                   help="server-0=host:port,server-1=host:port,… (endpoints as the analyst reaches them)")
    p.add_argument("--party-data", required=True, help="directory to write party-<i>.csv into")
    p.add_argument("--per-party-dirs", action="store_true",
                   help="write party-<i>/party-<i>.csv instead (one directory, e.g. one volume, per party)")
    p.add_argument("--write-job", metavar="FILE",
                   help="write the job as a job file here (for `ltm job submit`) with the party files, and stop")
    certificates(p, "certificate directory (the operator authenticates as 'operator')")
    add_options(p, "sketch", only=("parties", "sketch", "m", "s", "partition", "share_mode"))
    add_options(p, "privacy", only=("epsilon", "delta", "colluding_servers"))
    add_options(p, "data", only=("data", "label"), helps=DATA_HELPS)
    add_options(p, "run", only=("seed", "json"), helps={"seed": "SEEDED MODE (the parties must get the same --seed)"})
    p.add_argument("--deadline", type=float, default=120.0, help="seconds the analyst waits for parties (default 120)")
    p.set_defaults(func=lazy("ltm.sim.localnet.demo:run_operate"))

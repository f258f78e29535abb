"""``ltm party``: a party process that vets a job and uploads its clients' shares (the role's code:
``party/main.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy
from ltm.cli.options import actor_options, endpoints, privacy_number, quiet, seed
from ltm.jobconfig import add_options
from ltm.party.ledger import DEFAULT_BUDGET_DELTA, DEFAULT_BUDGET_EPSILON, DEFAULT_SOURCE
from ltm.party.randomizer import DEFAULT_BATCH_CLIENTS

DESCRIPTION = ("A data owner's process. It fetches the job a server publishes, refuses it unless it meets this "
               "party's policy (ε, δ, corruption tolerance, calibration) and its privacy budget, charges the "
               "ledger, then clips, noises and secret-shares its clients' rows and uploads one share to each server "
               "over mutual TLS. No raw row leaves the process. JSON log lines go to stderr; a summary for a person "
               "to stdout at the end.")


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm party`` flags (and the ``--config`` keys they mirror)."""
    actor_options(p, {
        "--id": ("this party's identity, e.g. party-3 (must match its certificate)", None),
        "--servers": ("server endpoints host:port, comma-separated, in the job's server order", endpoints),
        "--job": ("job id to join", None),
        "--data": ("this party's rows (rows partition) or columns (columns partition), read a batch at a "
                   "time: a CSV, a Parquet file or folder, a PostgreSQL DSN or an SQLite file (with --query), "
                   "an .npz or a directory of <column>.npy, or a generated benchmark source "
                   "(synthetic:ridge?d=10&n=1000000&seed=1, or a *.synth.json)", None),
    }, serves=False)
    add_options(p, "data", only=("query",), helps={
        "query": "with a database --data (postgresql://user@host/db, or an SQLite file): the table name, or a "
                 "SELECT giving one row per client (the party's rows in a fixed order: say ORDER BY if it "
                 "could change)"})
    p.add_argument("--password-env", metavar="NAME",
                   help="read the database password from the environment variable NAME (default: libpq's "
                        "PGPASSWORD or ~/.pgpass); a DSN may not carry one")
    p.add_argument("--password-file", metavar="PATH", help="read the database password from this file's first line")
    p.add_argument("--dask", metavar="SCHEDULER",
                   help="compute an aggregated upload from a Parquet folder on this Dask cluster "
                        "(tcp://host:8786; local:N for a local cluster of N workers): one task per file, "
                        "exact integer partials added here (docs/usage.md)")
    p.add_argument("--server-ids", help="expected server identities, comma-separated (default: the identities the "
                                        "job spec names, pinned in the TLS handshake either way)")
    p.add_argument("--max-epsilon", type=privacy_number, help="largest ε this party accepts (default 1)")
    p.add_argument("--max-delta", type=privacy_number, help="largest δ this party accepts (default 1e-5)")
    p.add_argument("--min-colluding-servers", type=int, default=None,
                   help="the fewest colluding servers a job must tolerate (default: k − 1); 1 lets this party "
                        "join the replicated release of the columns partition (private against 1 of 3 servers; "
                        "it assumes every party follows the protocol unless the job verifies clipping, so this "
                        "party refuses one that tolerates corrupt parties without that)")
    p.add_argument("--min-corrupt-parties", type=int,
                   help="fewest corrupt parties a rows job with multi-client parties must tolerate (default 1)")
    p.add_argument("--upload-mode", choices=("per-client", "aggregate"),
                   help="refuse a job whose upload mode differs (default: upload as the job says)")
    p.add_argument("--min-t-prime", type=int, help="fewest corrupt clients t′ a rows job must tolerate (default 0)")
    p.add_argument("--min-participants", type=int,
                   help="smallest participant set the job may be released over that this party accepts (default 0)")
    p.add_argument("--budget-epsilon", type=privacy_number,
                   help=f"lifetime privacy budget ε of this party (of its --source), composed over every job "
                        f"accepted (default {DEFAULT_BUDGET_EPSILON:g})")
    p.add_argument("--budget-delta", type=privacy_number,
                   help=f"the δ at which the budget is stated (default {DEFAULT_BUDGET_DELTA:g})")
    p.add_argument("--ledger-dir",
                   help="this host's privacy-ledger directory, one ledger per party id whatever data it reads "
                        "(default: $XDG_STATE_HOME/ltm/ledger, i.e. ~/.local/state/ltm/ledger); keep it on "
                        "persistent storage and back it up: a missing ledger is refused, never a fresh budget")
    p.add_argument("--new-source", metavar="NAME",
                   help="charge this job to a NEW, separate budget NAME, logged in the ledger with the time and "
                        "--new-source-reason; only for genuinely new data about disjoint individuals, never a "
                        "copy, subset, re-sort or edit of data already charged (docs/architecture.md §8)")
    p.add_argument("--new-source-reason", metavar="TEXT",
                   help="why the --new-source data is new (required with --new-source; kept in the ledger)")
    p.add_argument("--source", metavar="NAME",
                   help=f"charge this job to the budget NAME opened earlier with --new-source (default: the "
                        f"party's first budget, {DEFAULT_SOURCE!r})")
    p.add_argument("--allow-paper-calibration", action="store_true", default=None,
                   help="accept the reproduction-only 'paper' calibration")
    p.add_argument("--allow-reproduction", action="store_true", default=None,
                   help="accept jobs marked as reproductions (they may take seeded, NOT private randomness)")
    p.add_argument("--batch-clients", type=int, help=f"clients per upload batch (default {DEFAULT_BATCH_CLIENTS})")
    p.add_argument("--wait", type=float, help="seconds to wait for the job to be published (default 30)")
    p.add_argument("--wait-for-data", action="store_true", default=None,
                   help="wait (up to --wait) for --data to appear, e.g. while an operator is still writing it; "
                        "without it a missing data file is an error before any server is contacted")
    seed(p)
    p.add_argument("--state-dir", help="directory for the crash-recovery upload journal (default: "
                                       "<directory of --data>/.ltm-party-state); keep it on persistent storage")
    p.add_argument("--summary-file", help="write a JSON summary of the upload here")
    quiet(p, "no progress bar on stderr while reading and uploading (none either when stderr is not a "
             "terminal; the JSON log and the summary remain)", unset=True)
    p.set_defaults(func=lazy("ltm.party.main:run"))

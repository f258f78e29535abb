"""``ltm server``: a long-running LTM server (the role's code: ``server/main.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy
from ltm.cli.options import actor_options, listen_address, relax_required
from ltm.limits import ServerLimits

DESCRIPTION = ("One of the job's k non-colluding servers. It publishes the jobs the analyst creates, stores the "
               "shares parties upload (durably, in --data-dir), and at release applies the job's public linear map "
               "to its shares and returns one result share to the analyst, once per job and only if the release "
               "gate passes (the caller is the analyst, it holds every participant, every sketch row keeps its "
               "honest noise load; docs/architecture.md §5). It never sees a raw row. JSON log lines go to stderr; "
               "a readable startup and shutdown line to stdout. SIGTERM stops it gracefully. --check and --repair "
               "work on a stopped server's --data-dir and need neither --id nor --listen.")


class _OfflineAction(argparse.Action):
    """``--check``/``--repair``: a flag (default None, so a config file may set it) that works on a
    stopped server's data directory, so --id and --listen are not required with it."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=None, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, True)
        relax_required(parser, {"id", "listen"})


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm server`` flags (and the ``--config`` keys they mirror)."""
    actor_options(p, {
        "--id": ("this server's identity, e.g. server-0 (must match its certificate)", None),
        "--listen": ("address to bind, e.g. 127.0.0.1:50051 (port 0 = any free port)", listen_address),
        "--data-dir": ("directory for the durable store (SQLite WAL + share blobs), kept 0700", None),
    }, serves=True)
    p.add_argument("--max-batch-bytes", type=int,
                   help=f"largest accepted batch (default {ServerLimits.max_batch_bytes})")
    p.add_argument("--limit", action="append", metavar="NAME=VALUE",
                   help="a resource limit, repeatable (e.g. stream_idle_seconds=30); names and defaults: "
                        "see ltm/limits.py and docs")
    p.add_argument("--check", action=_OfflineAction,
                   help="verify --data-dir offline (every blob and release record against its digest) and exit")
    p.add_argument("--repair", action=_OfflineAction,
                   help="make a --data-dir the server refuses startable, deleting nothing: unknown blobs move "
                        "to quarantine/, jobs named by orphaned release markers are retired for good; then exit")
    p.set_defaults(func=lazy("ltm.server.main:run"))

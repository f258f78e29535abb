"""``ltm server``: a long-running LTM server process (grpc.aio, mTLS, health, graceful SIGTERM).

``ltm server --check --data-dir DIR`` verifies a (stopped) server's data directory offline and
exits 0 if it is intact, 3 if it found damage.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path

from server.core import ServerCore
from ltm.limits import ServerLimits
from server.service import MAX_BATCH_BYTES, ServerService, add_to_server
from transport.config import REQUIRED_TITLE, ConfigError, add_actor_arguments, load_config, merge, relax_required
from transport.logs import setup_logging
from transport.memory import share_one_malloc_arena
from transport.metering import ByteMeter
from transport.serve import serve_until_signal
from transport.tls import check_certificates, make_server

log = logging.getLogger("ltm.server")
SERVICE_NAME = "ltm.v1.Server"
#: Largest message a server receives (raised to max_spec_bytes + 1 MiB if that is larger).
MAX_RECEIVE_MESSAGE_BYTES = 8 << 20


class _OfflineAction(argparse.Action):
    """``--check``/``--repair``: a flag (default None, so a config file may set it) that works on a
    stopped server's data directory, so --id and --listen are not required with it."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=None, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, True)
        relax_required(parser, {"id", "listen"})


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``ltm server`` subcommand (its flags, and the ``--config`` keys they mirror) to ``sub``."""
    p = sub.add_parser("server", help="run an LTM server (stores shares, enforces the release gate)",
                       description="One of the job's k non-colluding servers. It publishes the jobs the analyst "
                                   "creates, stores the shares parties upload (durably, in --data-dir), and at "
                                   "release applies the job's public linear map to its shares and returns one "
                                   "result share to the analyst, once per job and only if the release gate passes "
                                   "(the caller is the analyst, it holds every participant, every sketch row "
                                   "keeps its honest noise load; docs/architecture.md §5). It never sees a raw "
                                   "row. JSON log lines go to stderr; a readable startup and shutdown line to "
                                   "stdout. SIGTERM stops it gracefully. --check and --repair work on a stopped "
                                   "server's --data-dir and need neither --id nor --listen.")
    req = p.add_argument_group(REQUIRED_TITLE)
    req.add_argument("--id", required=True,
                     help="this server's identity, e.g. server-0 (must match its certificate)")
    req.add_argument("--listen", required=True,
                     help="address to bind, e.g. 127.0.0.1:50051 (port 0 = any free port)")
    req.add_argument("--data-dir", required=True,
                     help="directory for the durable store (SQLite WAL + share blobs), kept 0700")
    p.add_argument("--max-batch-bytes", type=int, help=f"largest accepted batch (default {MAX_BATCH_BYTES})")
    p.add_argument("--limit", action="append", metavar="NAME=VALUE",
                   help="a resource limit, repeatable (e.g. stream_idle_seconds=30); names and defaults: "
                        "see ltm/limits.py and docs")
    p.add_argument("--check", action=_OfflineAction,
                   help="verify --data-dir offline (every blob and release record against its digest) and exit")
    p.add_argument("--repair", action=_OfflineAction,
                   help="make a --data-dir the server refuses startable, deleting nothing: unknown blobs move "
                        "to quarantine/, jobs named by orphaned release markers are retired for good; then exit")
    add_actor_arguments(p, serves=True)
    p.set_defaults(func=run)


async def serve(args: argparse.Namespace, limits: ServerLimits) -> None:
    """Serve until SIGTERM/SIGINT: open the store in ``--data-dir``, serve the gRPC service (mutual
    TLS unless ``--insecure``) on ``--listen`` (and a plaintext health probe on ``--health-listen``
    if given), and print a startup and a shutdown line for a person.
    """
    from server.sqlite_store import SqliteStore

    store = SqliteStore(Path(args.data_dir))
    core = ServerCore(args.id, store)
    meter = ByteMeter()
    service = ServerService(core, insecure=bool(args.insecure), limits=limits, meter=meter)
    # gRPC's own bound on one received message, well under the channel default of 64 MiB: a 60 MB
    # spec is then refused by the C core from its length prefix (RESOURCE_EXHAUSTED), before the
    # event loop spends time on it. Parties upload in 1 MiB chunks.
    receive = max(MAX_RECEIVE_MESSAGE_BYTES, limits.max_spec_bytes + (1 << 20))
    # A fixed per-stream receive window instead of gRPC's bandwidth-delay-product probing, which
    # grows every stream's window to about 4 MiB: 16 parties uploading at once then held ~60 MB of
    # unread data in the C core, beyond the upload budget (max_inflight_bytes). 1 MiB per stream
    # still fills 20 MB/s per stream at a 50 ms round trip (limit stream_window_bytes).
    server = make_server(interceptors=[meter], options=[("grpc.max_receive_message_length", receive),
                                                        ("grpc.http2.bdp_probe", 0),
                                                        ("grpc.http2.lookahead_bytes", limits.stream_window_bytes)])
    add_to_server(service, server)
    started = time.monotonic()
    await serve_until_signal(server, service_name=SERVICE_NAME, listen=args.listen, cert_dir=args.certs,
                             actor=args.id, insecure=bool(args.insecure), port_file=args.port_file,
                             health_listen=args.health_listen,
                             # no accountant warm-up: a job states its zCDP target (privacy.zcdp_rho),
                             # so a server plans the noise without dp_accounting
                             on_serving=lambda port: say(startup_line(args, port, store.job_count())))
    say(f"ltm server {args.id}: stopped after {time.monotonic() - started:.0f} s; {jobs(store.job_count())} "
        f"held in {Path(args.data_dir).absolute()}")


def say(line: str) -> None:
    """A line for a person on stdout (the JSON log lines go to stderr), flushed: under systemd or a
    launcher stdout is a pipe and would hold it until exit."""
    print(line, flush=True)


def startup_line(args: argparse.Namespace, port: int, held: int) -> str:
    """``ltm server server-0: listening on 127.0.0.1:50051 (mutual TLS, …); store …, N jobs held``."""
    host = args.listen.rsplit(":", 1)[0] if ":" in args.listen else args.listen
    tls = ("PLAINTEXT, unauthenticated: --insecure, for testing only" if args.insecure
           else f"mutual TLS, certificates {args.certs}")
    health = f"; health probe in plaintext on {args.health_listen}" if args.health_listen else ""
    return (f"ltm server {args.id}: listening on {host}:{port} ({tls}); store {Path(args.data_dir).absolute()}, "
            f"{jobs(held)} held{health}. Stop with SIGTERM (Ctrl-C).")


def jobs(n: int) -> str:
    """``n`` jobs in words for the startup line ("1 job", "3 jobs")."""
    return f"{n} job" if n == 1 else f"{n} jobs"


def check(data_dir: str) -> int:
    """``ltm server --check``: print what was verified and every problem; 0 = intact, 3 = damaged."""
    from server.fsck import check_directory

    problems, counts = check_directory(data_dir)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    for p in problems:
        print(f"PROBLEM: {p}")
    print(f"ltm server --check {data_dir}: {'OK' if not problems else f'{len(problems)} problem(s)'}"
          f"{f' ({summary} verified)' if summary else ''}")
    return 3 if problems else 0


def repair(data_dir: str) -> int:
    """``ltm server --repair``: print what was moved or retired; 0 = startable now, 3 = not repairable."""
    from server.fsck import repair_directory

    done = repair_directory(data_dir)  # not repairable: StoreError, which the ltm command exits 3 with
    for line in done:
        print(line)
    print(f"ltm server --repair {data_dir}: {len(done)} change(s); nothing was deleted")
    return 0


def run(args: argparse.Namespace) -> int:
    """``ltm server``: ``--check``/``--repair`` a stopped server's data directory, or serve; returns
    the exit status (3: the data directory cannot be opened, see docs/servers.md).
    """
    if args.check or args.repair:
        args = merge(args, load_config(args.config), required=("data_dir",))
        return check(args.data_dir) if args.check else repair(args.data_dir)
    args = merge(args, load_config(args.config), required=("id", "listen", "data_dir"))
    if not args.insecure and not args.certs:
        raise SystemExit("ltm server: --certs is required (or --insecure for a plaintext test run)")
    try:
        limits = ServerLimits.parse(args.limit, max_batch_bytes=args.max_batch_bytes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not args.insecure:
        check_certificates(args.certs, args.id)  # before the data directory is created
    setup_logging(args.id, args.log_level or "info")
    share_one_malloc_arena()  # before any worker thread allocates (transport/memory.py)
    from server.sqlite_store import StoreError
    try:
        asyncio.run(serve(args, limits))
    except StoreError as exc:
        log.error("cannot open the data directory", extra={"reason": str(exc)})
        raise  # the ltm command prints it as one line and exits with its status, 3
    return 0

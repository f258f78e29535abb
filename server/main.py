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

from ltm.limits import ServerLimits
from ltm.server.core import ServerCore
from ltm.server.service import ServerService, add_to_server
from ltm.transport.config import ConfigError, load_config, merge
from ltm.transport.metering import ByteMeter
from ltm.transport.serve import actor_settings, count_of, listening_phrase, say, serve_until_signal, start_actor
from ltm.transport.signing import Signer
from ltm.transport.tls import make_server

log = logging.getLogger("ltm.server")
SERVICE_NAME = "ltm.v1.Server"
#: Largest message a server receives (raised to max_spec_bytes + 1 MiB if that is larger).
MAX_RECEIVE_MESSAGE_BYTES = 8 << 20


async def serve(args: argparse.Namespace, limits: ServerLimits) -> None:
    """Serve until SIGTERM/SIGINT: open the store in ``--data-dir``, serve the gRPC service (mutual
    TLS unless ``--insecure``) on ``--listen`` (and a plaintext health probe on ``--health-listen``
    if given), and print a startup and a shutdown line for a person.
    """
    from ltm.server.sqlite_store import SqliteStore

    store = SqliteStore(Path(args.data_dir))
    # the server's TLS identity key also signs its clipping-check statements (ltm/transport/signing.py)
    signer = None if args.insecure else Signer.from_dir(args.certs, args.id)
    core = ServerCore(args.id, store, signer)
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


def startup_line(args: argparse.Namespace, port: int, held: int) -> str:
    """``ltm server server-0: listening on 127.0.0.1:50051 (mutual TLS, …); store …, N jobs held``."""
    health = f"; health probe in plaintext on {args.health_listen}" if args.health_listen else ""
    return (f"ltm server {args.id}: {listening_phrase(args, port)}; store {Path(args.data_dir).absolute()}, "
            f"{jobs(held)} held{health}. Stop with SIGTERM (Ctrl-C).")


def jobs(n: int) -> str:
    """``n`` jobs in words for the startup line ("1 job", "3 jobs")."""
    return count_of(n, "job")


def check(data_dir: str) -> int:
    """``ltm server --check``: print what was verified and every problem; 0 = intact, 3 = damaged."""
    from ltm.server.fsck import check_directory

    problems, counts = check_directory(data_dir)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    for p in problems:
        print(f"PROBLEM: {p}")
    print(f"ltm server --check {data_dir}: {'OK' if not problems else f'{len(problems)} problem(s)'}"
          f"{f' ({summary} verified)' if summary else ''}")
    return 3 if problems else 0


def repair(data_dir: str) -> int:
    """``ltm server --repair``: print what was moved or retired; 0 = startable now, 3 = not repairable."""
    from ltm.server.fsck import repair_directory

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
    args = actor_settings(args, required=("id", "listen", "data_dir"))  # before the data directory is created
    try:
        limits = ServerLimits.parse(args.limit, max_batch_bytes=args.max_batch_bytes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    start_actor(args.id, args.log_level, one_arena=True)
    from ltm.server.sqlite_store import StoreError
    try:
        asyncio.run(serve(args, limits))
    except StoreError as exc:
        log.error("cannot open the data directory", extra={"reason": str(exc)})
        raise  # the ltm command prints it as one line and exits with its status, 3
    return 0

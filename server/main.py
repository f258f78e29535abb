"""``ltm server``: a long-running LTM server process (grpc.aio, mTLS, health, graceful SIGTERM)."""
from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from ltm.v1 import ltm_pb2_grpc
from server.core import ServerCore
from server.service import MAX_BATCH_BYTES, ServerService
from transport.config import add_actor_arguments, load_config, merge
from transport.logs import setup_logging
from transport.metering import ByteMeter
from transport.serve import serve_until_signal
from transport.tls import check_certificates, make_server

log = logging.getLogger("ltm.server")
SERVICE_NAME = "ltm.v1.Server"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("server", help="run an LTM server (stores shares, enforces the release gate)")
    p.add_argument("--id", help="this server's identity, e.g. server-0 (must match its certificate)")
    p.add_argument("--listen", help="address to bind, e.g. 127.0.0.1:50051 (port 0 = any free port)")
    p.add_argument("--data-dir", help="directory for the durable store (SQLite WAL + share blobs)")
    p.add_argument("--max-batch-bytes", type=int, help=f"largest accepted batch (default {MAX_BATCH_BYTES})")
    add_actor_arguments(p, serves=True)
    p.set_defaults(func=run)


async def serve(args: argparse.Namespace) -> None:
    from server.sqlite_store import SqliteStore

    core = ServerCore(args.id, SqliteStore(Path(args.data_dir)))
    meter = ByteMeter()
    service = ServerService(core, insecure=bool(args.insecure),
                            max_batch_bytes=args.max_batch_bytes or MAX_BATCH_BYTES, meter=meter)
    server = make_server(interceptors=[meter])
    ltm_pb2_grpc.add_ServerServicer_to_server(service, server)
    await serve_until_signal(server, service_name=SERVICE_NAME, listen=args.listen, cert_dir=args.certs,
                             actor=args.id, insecure=bool(args.insecure), port_file=args.port_file,
                             health_listen=args.health_listen)


def run(args: argparse.Namespace) -> int:
    args = merge(args, load_config(args.config), required=("id", "listen", "data_dir"))
    if not args.insecure and not args.certs:
        raise SystemExit("ltm server: --certs is required (or --insecure for a plaintext test run)")
    if not args.insecure:
        check_certificates(args.certs, args.id)  # before the data directory is created
    setup_logging(args.id, args.log_level or "info")
    asyncio.run(serve(args))
    return 0

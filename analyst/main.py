"""``ltm analyst``: the long-running analyst process (grpc.aio, mTLS, health, graceful SIGTERM)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from analyst.service import AnalystService
from ltm.v1 import ltm_pb2_grpc
from transport.config import load_config, merge
from transport.logs import setup_logging
from transport.tls import add_secure_port, make_channel, make_server

log = logging.getLogger("ltm.analyst")
SERVICE_NAME = "ltm.v1.Analyst"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyst", help="run the analyst: coordinates jobs, reconstructs releases, fits models")
    p.add_argument("--config", help="TOML file with the settings below (flags win)")
    p.add_argument("--listen", help="address to bind, e.g. 127.0.0.1:50050 (port 0 = any free port)")
    p.add_argument("--out", help="output directory (one sub-directory per job)")
    p.add_argument("--certs", help="certificate directory made by `ltm certs`")
    p.add_argument("--insecure", action="store_true", default=None, help="plaintext transport (testing only)")
    p.add_argument("--port-file", help="write the bound port here once serving (for launchers)")
    p.add_argument("--log-level")
    p.set_defaults(func=run)


async def serve(args: argparse.Namespace) -> None:
    insecure = bool(args.insecure)

    def connect(endpoint: str, server_id: str):
        # The TLS handshake checks that the endpoint presents the named server's certificate.
        options = None if insecure else [("grpc.ssl_target_name_override", server_id)]
        return make_channel(endpoint, args.certs, "analyst", insecure=insecure, options=options)

    service = AnalystService(connect, Path(args.out), insecure=insecure)
    server = make_server()
    ltm_pb2_grpc.add_AnalystServicer_to_server(service, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = add_secure_port(server, args.listen, args.certs, "analyst", insecure=insecure)
    await server.start()
    await health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    if args.port_file:
        Path(args.port_file).write_text(str(port))
    log.info("serving", extra={"port": port, "tls": not insecure})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace=5.0)
    log.info("stopped")


def run(args: argparse.Namespace) -> int:
    args = merge(args, load_config(args.config), required=("listen", "out"))
    if not args.insecure and not args.certs:
        raise SystemExit("ltm analyst: --certs is required (or --insecure for a plaintext test run)")
    setup_logging("analyst", args.log_level or "info")
    asyncio.run(serve(args))
    return 0

"""``ltm analyst``: the long-running analyst process (grpc.aio, mTLS, health, graceful SIGTERM)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path

from ltm.analyst.coordinator import DEFAULT_RETRY, RetryPolicy
from ltm.analyst.service import AnalystService
from ltm.jobspec import warm_validation_in_background
from ltm.transport.serve import actor_settings, count_of, listening_phrase, say, serve_until_signal, start_actor
from ltm.transport.tls import make_channel, make_server
from ltm.v1 import ltm_pb2_grpc

log = logging.getLogger("ltm.analyst")
SERVICE_NAME = "ltm.v1.Analyst"


async def serve(args: argparse.Namespace) -> None:
    """Run the analyst service until SIGTERM/SIGINT: the job store under ``--out``, links to the
    servers (mTLS, each endpoint checked against the server it names) and the gRPC service on
    ``--listen``; running jobs resume after a restart.
    """
    insecure = bool(args.insecure)

    def connect(endpoint: str, server_id: str):
        # The TLS handshake checks that the endpoint presents the named server's certificate.
        options = None if insecure else [("grpc.ssl_target_name_override", server_id)]
        return make_channel(endpoint, args.certs, "analyst", insecure=insecure, options=options)

    retry = RetryPolicy(deadline_s=args.server_retry) if args.server_retry is not None else DEFAULT_RETRY
    service = AnalystService(connect, Path(args.out), insecure=insecure, retry=retry,
                             state_dir=Path(args.state_dir) if args.state_dir else None)
    server = make_server()
    ltm_pb2_grpc.add_AnalystServicer_to_server(service, server)
    resumed = await service.runner.resume()  # jobs a previous incarnation was running
    if resumed:
        log.info("resumed jobs", extra={"jobs": resumed})
    state = Path(args.state_dir or args.out).absolute()

    def serving(port: int) -> None:
        warm_validation_in_background()
        say(startup_line(args, port, len(service.store.job_ids()), len(resumed), state))

    started = time.monotonic()
    await serve_until_signal(server, service_name=SERVICE_NAME, listen=args.listen, cert_dir=args.certs,
                             actor="analyst", insecure=insecure, port_file=args.port_file,
                             health_listen=args.health_listen, on_serving=serving)
    say(f"ltm analyst: stopped after {time.monotonic() - started:.0f} s; {count_of(len(service.store.job_ids()), 'job')} "
        f"held in {state}")


def startup_line(args: argparse.Namespace, port: int, held: int, resumed: int, state: Path) -> str:
    """``ltm analyst: listening on 127.0.0.1:50050 (mutual TLS, …); jobs in …, N held, M resumed; …``."""
    health = f"; health probe in plaintext on {args.health_listen}" if args.health_listen else ""
    return (f"ltm analyst: {listening_phrase(args, port)}; jobs in {state}, {count_of(held, 'job')} held, "
            f"{resumed} resumed; results under {Path(args.out).absolute()}/<job>/{health}. Stop with SIGTERM "
            f"(Ctrl-C).")


def run(args: argparse.Namespace) -> int:
    """``ltm analyst``: check the certificates, set up JSON logging and serve; returns 0."""
    args = actor_settings(args, required=("listen", "out"), actor="analyst")  # before the output directory is created
    # One malloc arena: its worker threads (validation, reconstruction, outputs) then reuse each
    # other's freed blocks; a 10⁸-client sparse job's analyst peaked 41 MB lower in process.
    start_actor("analyst", args.log_level, one_arena=True)
    asyncio.run(serve(args))
    return 0

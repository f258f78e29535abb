"""``ltm analyst``: the long-running analyst process (grpc.aio, mTLS, health, graceful SIGTERM)."""
from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from analyst.coordinator import DEFAULT_RETRY, RetryPolicy
from analyst.service import AnalystService
from ltm.jobspec import warm_validation_in_background
from ltm.v1 import ltm_pb2_grpc
from transport.config import REQUIRED_TITLE, add_actor_arguments, load_config, merge
from transport.logs import setup_logging
from transport.memory import share_one_malloc_arena
from transport.serve import serve_until_signal
from transport.tls import check_certificates, make_channel, make_server

log = logging.getLogger("ltm.analyst")
SERVICE_NAME = "ltm.v1.Analyst"


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``ltm analyst`` subcommand (its flags, and the ``--config`` keys they mirror) to ``sub``."""
    p = sub.add_parser("analyst", help="run the analyst: coordinates jobs, reconstructs releases, fits models",
                       description="The analyst service. The operator submits a job to it (`ltm job submit`); it "
                                   "publishes the job on every server, waits for the parties, closes the job, "
                                   "asks each server for its result share, reconstructs the DP release from "
                                   "them, fits the model and writes release.json, privacy_report.json, "
                                   "model.json and report.json under --out/<job id>. It receives one result share "
                                   "per server and nothing else of the data: never a party's shares or a raw "
                                   "row. SIGTERM stops it; a restart "
                                   "resumes running jobs from --state-dir.")
    req = p.add_argument_group(REQUIRED_TITLE)
    req.add_argument("--listen", required=True,
                     help="address to bind, e.g. 127.0.0.1:50050 (port 0 = any free port)")
    req.add_argument("--out", required=True, help="output directory (one sub-directory per job)")
    p.add_argument("--state-dir", help="where the analyst's job database lives (default: --out); keep it on "
                                      "persistent storage: a restarted analyst resumes its running jobs from it")
    p.add_argument("--server-retry", type=float,
                   help="seconds to keep retrying a call to a server that is down or restarting (default 30)")
    add_actor_arguments(p, serves=True)
    p.set_defaults(func=run)


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
    await serve_until_signal(server, service_name=SERVICE_NAME, listen=args.listen, cert_dir=args.certs,
                             actor="analyst", insecure=insecure, port_file=args.port_file,
                             health_listen=args.health_listen, on_serving=lambda port: warm_validation_in_background())


def run(args: argparse.Namespace) -> int:
    """``ltm analyst``: check the certificates, set up JSON logging and serve; returns 0."""
    args = merge(args, load_config(args.config), required=("listen", "out"))
    if not args.insecure and not args.certs:
        raise SystemExit("ltm analyst: --certs is required (or --insecure for a plaintext test run)")
    if not args.insecure:
        check_certificates(args.certs, "analyst")  # before the output directory is created
    setup_logging("analyst", args.log_level or "info")
    # Its worker threads (validation, reconstruction, outputs) then reuse each other's freed blocks:
    # a 10⁸-client sparse job's analyst peaked 41 MB lower in process (transport/memory.py).
    share_one_malloc_arena()
    asyncio.run(serve(args))
    return 0

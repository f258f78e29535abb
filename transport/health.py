"""``ltm health``: probe an actor's standard gRPC health service (for compose health checks)."""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from transport.tls import make_sync_channel


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``ltm health`` subcommand to ``sub``."""
    p = sub.add_parser("health", help="exit 0 if an actor's gRPC health service answers SERVING")
    p.add_argument("--target", required=True, help="host:port")
    p.add_argument("--name", help="the actor expected at the target (e.g. server-0); verified by TLS")
    p.add_argument("--certs", help="certificate directory (the probe authenticates as --as)")
    p.add_argument("--as", dest="actor", default="operator",
                   help="identity the probe presents (default operator); a container or pod probing itself "
                        "uses its own, e.g. --as server-0, since it holds no other key")
    p.add_argument("--insecure", action="store_true", help="plaintext probe, no certificate (testing only)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``ltm health``: probe the target's gRPC health service; returns 0 if it answers SERVING, else 1."""
    options = [("grpc.ssl_target_name_override", args.name)] if args.name and not args.insecure else None
    channel = make_sync_channel(args.target, args.certs, args.actor, insecure=args.insecure, options=options)
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                          timeout=args.timeout)
    except grpc.RpcError as exc:
        print(f"unhealthy: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("SERVING" if serving else health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if serving else 1

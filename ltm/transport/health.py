"""``ltm health``: probe an actor's standard gRPC health service (for compose health checks; its
flags: ``ltm/cli/health.py``)."""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ltm.transport.tls import make_sync_channel


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

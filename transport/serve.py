"""Serving boilerplate shared by the long-running actors: health service, port file, SIGTERM."""
from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from transport.tls import add_secure_port

log = logging.getLogger("ltm.serve")


async def serve_until_signal(server: grpc.aio.Server, *, service_name: str, listen: str, cert_dir, actor: str,
                             insecure: bool, port_file: str | None = None, grace_s: float = 5.0,
                             health_listen: str | None = None, on_serving=None) -> None:
    """Add the standard health service, bind, start, report SERVING, and on SIGTERM/SIGINT
    report NOT_SERVING and stop gracefully (in-flight calls get ``grace_s`` to finish).

    ``health_listen``: also serve the health service alone, in plaintext, at this address — for
    probes that hold no client certificate (a container's own health check, the kubelet's gRPC
    probe).  It answers SERVING/NOT_SERVING and nothing else; bind it to loopback unless a probe
    must reach it from outside the container.

    ``on_serving``: called with the bound port once serving (an actor's line for a person)."""
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = add_secure_port(server, listen, cert_dir, actor, insecure=insecure)
    probe_server = None
    if health_listen:
        probe_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, probe_server)
        if probe_server.add_insecure_port(health_listen) == 0:
            raise OSError(f"cannot bind the health port {health_listen}")
        await probe_server.start()
    await server.start()
    for name in (service_name, ""):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    if port_file:
        tmp = Path(port_file + ".tmp")
        tmp.write_text(str(port))
        tmp.replace(port_file)  # launchers poll for the file: make it appear whole
    log.info("serving", extra={"port": port, "tls": not insecure, "service": service_name})
    if on_serving is not None:
        on_serving(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping (signal): finishing in-flight calls")
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace=grace_s)
    if probe_server is not None:
        await probe_server.stop(grace=None)
    log.info("stopped")

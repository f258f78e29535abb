"""Startup and serving shared by the actor processes (server, analyst, party): settings and
certificates checked before anything is created, JSON logging, and for services the health service,
port file and graceful SIGTERM."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ltm.transport.config import ConfigError, load_config, merge
from ltm.transport.logs import setup_logging
from ltm.transport.memory import share_one_malloc_arena
from ltm.transport.tls import add_secure_port, check_certificates

log = logging.getLogger("ltm.serve")


def actor_settings(args: argparse.Namespace, *, required: tuple[str, ...], actor: str | None = None
                   ) -> argparse.Namespace:
    """An actor command's settings, checked before the actor creates anything: the ``--config``
    file merged into the flags (flags win; ``required`` settings must be given one way or the
    other), ``--certs`` required unless ``--insecure``, and the certificate directory holding
    ``actor``'s (default: ``--id``'s) certificate.  A missing setting is a usage error
    (:class:`~ltm.transport.config.ConfigError`, exit status 2)."""
    args = merge(args, load_config(args.config), required=required)
    if not args.insecure and not args.certs:
        raise ConfigError("--certs is required (or --insecure for a plaintext test run)")
    if not args.insecure:
        check_certificates(args.certs, actor or args.id)
    return args


def start_actor(actor: str, log_level: str | None, *, one_arena: bool) -> None:
    """Set up an actor process once its settings are checked: JSON log lines tagged ``actor`` on
    stderr, and with ``one_arena`` a single malloc arena shared by the worker threads (call it
    before any thread allocates; ltm/transport/memory.py says why)."""
    setup_logging(actor, log_level or "info")
    if one_arena:
        share_one_malloc_arena()


async def serve_until_signal(server: grpc.aio.Server, *, service_name: str, listen: str, cert_dir, actor: str,  # noqa: PLR0913 - every actor's serving options, keyword-only
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


def say(line: str) -> None:
    """A line for a person on stdout (the JSON log lines go to stderr), flushed: under systemd or a
    launcher stdout is a pipe and would hold it until exit."""
    print(line, flush=True)


def listening_phrase(args: argparse.Namespace, port: int) -> str:
    """``listening on 127.0.0.1:50051 (mutual TLS, certificates certs)``: an actor's start-up line's core."""
    host = args.listen.rsplit(":", 1)[0] if ":" in args.listen else args.listen
    tls = ("PLAINTEXT, unauthenticated: --insecure, for testing only" if args.insecure
           else f"mutual TLS, certificates {args.certs}")
    return f"listening on {host}:{port} ({tls})"


def count_of(n: int, word: str) -> str:
    """``n`` things in words ("1 job", "3 jobs")."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


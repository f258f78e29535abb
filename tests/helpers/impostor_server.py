"""Tests only: a process that serves the ``ltm.v1.Server`` service under ANOTHER actor's certificate.

It poses as the server named by ``--pose-as`` (its core accepts uploads addressed to that server and
serves the job in ``--spec``) while its TLS handshake presents the certificate of ``--cert-of`` (the
analyst's, a party's): what a party must refuse to talk to.

    python tests/helpers/impostor_server.py --certs D --cert-of analyst --pose-as server-0 --spec job.json \
        --listen 127.0.0.1:0 --port-file F
"""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from ltm.jobspec import JobSpec
from ltm.server.core import ServerCore
from ltm.server.service import ServerService
from ltm.transport.serve import serve_until_signal
from ltm.transport.tls import make_server
from ltm.v1 import ltm_pb2_grpc


async def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("--certs", "--cert-of", "--pose-as", "--spec", "--listen", "--port-file"):
        p.add_argument(flag, required=True)
    args = p.parse_args()
    core = ServerCore(args.pose_as)
    core.create_job(JobSpec.from_json(Path(args.spec).read_bytes()), caller_role="analyst")
    server = make_server()
    ltm_pb2_grpc.add_ServerServicer_to_server(ServerService(core), server)
    await serve_until_signal(server, service_name="ltm.v1.Server", listen=args.listen, cert_dir=args.certs,
                             actor=args.cert_of, insecure=False, port_file=args.port_file)


if __name__ == "__main__":
    asyncio.run(main())

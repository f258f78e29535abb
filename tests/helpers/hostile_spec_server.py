"""Tests only: a process serving ``GetJob`` with hostile ``spec_json`` bytes (read from ``--body``)
under a CA-signed certificate valid for its host (``--cert-of``), i.e. a server a party reaches
before it pins any identity.

    python tests/helpers/hostile_spec_server.py --certs D --cert-of analyst --body F --port-file P
"""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from ltm.transport.serve import serve_until_signal
from ltm.transport.tls import make_server
from ltm.v1 import ltm_pb2, ltm_pb2_grpc


class HostileSpec(ltm_pb2_grpc.ServerServicer):
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def GetJob(self, request, context):
        return ltm_pb2.GetJobResponse(spec_json=self.body, job_digest="0" * 64)


async def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("--certs", "--cert-of", "--body", "--port-file"):
        p.add_argument(flag, required=True)
    args = p.parse_args()
    server = make_server()
    ltm_pb2_grpc.add_ServerServicer_to_server(HostileSpec(Path(args.body).read_bytes()), server)
    await serve_until_signal(server, service_name="ltm.v1.Server", listen="127.0.0.1:0", cert_dir=args.certs,
                             actor=args.cert_of, insecure=False, port_file=args.port_file)


if __name__ == "__main__":
    asyncio.run(main())

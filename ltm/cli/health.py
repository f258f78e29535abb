"""``ltm health``: probe an actor's gRPC health service (the role's code: ``ltm/transport/health.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy
from ltm.cli.options import certificates, endpoint


def configure(p: argparse.ArgumentParser) -> None:
    """The ``ltm health`` flags."""
    p.add_argument("--target", required=True, type=endpoint, help="host:port")
    p.add_argument("--name", help="the actor expected at the target (e.g. server-0); verified by TLS")
    certificates(p, "certificate directory (the probe authenticates as --as)")
    p.add_argument("--as", dest="actor", default="operator",
                   help="identity the probe presents (default operator); a container or pod probing itself "
                        "uses its own, e.g. --as server-0, since it holds no other key")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    p.set_defaults(func=lazy("ltm.transport.health:run"))

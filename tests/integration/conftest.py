"""Fixtures of the integration tests: real ``ltm server`` processes on loopback, over mutual TLS."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from ltm.sim.localnet.launcher import ProcessGroup
from ltm.transport.certs import write_certs
from tests.helpers.servers import Servers


@pytest.fixture(scope="module")
def start_servers(tmp_path_factory) -> Iterator[Callable[..., Servers]]:
    """``start_servers(name, k, actors, **cert_options)`` writes one CA's certificates for
    server-0..k-1 and ``actors`` (``cert_options`` go to :func:`ltm.transport.certs.write_certs`) in a
    fresh directory named after ``name`` and starts the k servers there.  Every group it started is
    stopped (and every stub channel closed) when the test module ends, after the fixtures that use it
    have torn down."""
    started: list[Servers] = []

    def start(name: str, k: int, actors: Sequence[str], **cert_options) -> Servers:
        work = tmp_path_factory.mktemp(name)
        certs = work / "certs"
        write_certs(certs, [f"server-{i}" for i in range(k)] + list(actors), **cert_options)
        servers = Servers(work, certs, ProcessGroup(work, certs), [])
        started.append(servers)  # before starting: a server that fails to start still gets stopped
        servers.servers = servers.group.start_servers(k)
        return servers

    try:
        yield start
    finally:
        for servers in started:
            servers.stop()


@pytest.fixture(scope="module")
def three_servers(start_servers) -> Servers:
    """Three ``ltm server`` processes for the module, with certificates for party-0, party-1, the
    analyst and the operator."""
    return start_servers("three", 3, ["party-0", "party-1", "analyst", "operator"])

"""Fixtures of the integration tests: real ``ltm server`` processes on loopback, over mutual TLS."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from sim.localnet.launcher import ActorProcess, ProcessGroup
from transport.certs import write_certs


@dataclass
class Servers:
    """k running server processes: their work directory, the certificates of every actor, the group
    that started them (to start more actors) and the processes (``.endpoint``, ``.actor``)."""
    work: Path
    certs: Path
    group: ProcessGroup
    servers: list[ActorProcess]

    @property
    def endpoints(self) -> list[str]:
        return [s.endpoint for s in self.servers]


@pytest.fixture(scope="module")
def start_servers(tmp_path_factory) -> Iterator[Callable[..., Servers]]:
    """``start_servers(name, k, actors, **cert_options)`` writes one CA's certificates for
    server-0..k-1 and ``actors`` (``cert_options`` go to :func:`transport.certs.write_certs`) in a
    fresh directory named after ``name`` and starts the k servers there.  Every group it started is
    stopped when the test module ends, after the fixtures that use it have torn down."""
    groups: list[ProcessGroup] = []

    def start(name: str, k: int, actors: Sequence[str], **cert_options) -> Servers:
        work = tmp_path_factory.mktemp(name)
        certs = work / "certs"
        write_certs(certs, [f"server-{i}" for i in range(k)] + list(actors), **cert_options)
        group = ProcessGroup(work, certs)
        groups.append(group)  # before starting: a server that fails to start still gets stopped
        return Servers(work, certs, group, group.start_servers(k))

    try:
        yield start
    finally:
        for group in groups:
            group.stop_all()

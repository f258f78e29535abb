"""Network namespaces for tests and local testbeds: every actor on its own address, as on separate hosts.

:class:`NetnsLab` creates, for each actor, a network namespace with one veth interface on a
private /24, all joined by a Linux bridge in a "hub" namespace of their own (so the host's firewall
never sees the forwarded traffic).  The calling namespace gets a leg on the bridge too, with an
address on the /24, so the test process can reach every actor (e.g. for health checks).  Processes are put in
their namespace with ``ip netns exec`` (:meth:`NetnsLab.command`).  Everything created is removed
by :meth:`NetnsLab.down` (also on ``with`` exit), whatever happened.

Needs root and iproute2; :func:`netns_available` says whether this host can do it (tests skip
otherwise).  Names are derived from the process id so that concurrent users do not collide::

    with NetnsLab(["server-0", "server-1", "analyst", "party-0"]) as lab:
        lab.address("server-0")                  # '10.213.7.2'
        subprocess.Popen(lab.command("server-0", ["ltm", "server", ...]))
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from ltm.errors import LtmError


class NetnsError(LtmError, RuntimeError):
    """A namespace, bridge or link that could not be set up (the ``ip`` command's error is included)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def netns_available() -> bool:
    """True when this process may create network namespaces, veth pairs and bridges (root + iproute2)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"ltmprobe{os.getpid() % 100000}"
    try:
        if _ip("netns", "add", probe, check=False).returncode != 0:
            return False
        ok = _ip("link", "add", f"{probe[:10]}a", "type", "veth", "peer", "name", f"{probe[:10]}b",
                 check=False).returncode == 0
        _ip("link", "del", f"{probe[:10]}a", check=False)
        return ok
    finally:
        _ip("netns", "del", probe, check=False)


@dataclass
class NetnsLab:
    """Namespaces, veth pairs and a bridge for ``actors`` (see module docstring)."""

    actors: list[str]
    #: short unique tag in every name (interface names are limited to 15 characters)
    tag: str = field(default_factory=lambda: f"l{os.getpid() % 100000}")
    #: the /24 used: 10.<a>.<b>.0/24 (derived from the tag unless given)
    subnet: tuple[int, int] | None = None
    #: also give every actor an IPv6 address (a ULA /64, fd00:<a>:<b>::<n>; :meth:`address6`)
    ipv6: bool = False
    created_ns: list[str] = field(default_factory=list)
    created_links: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.actors) > 250:
            raise ValueError("at most 250 actors per lab (one /24)")
        if self.subnet is None:
            h = os.getpid()
            self.subnet = (200 + h % 50, (h // 50) % 250 + 1)

    # ------------------------------------------------------------------ names and addresses
    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def gateway(self) -> str:
        """The calling namespace's address on the bridge."""
        return self._addr(1)

    def _addr(self, host: int) -> str:
        a, b = self.subnet  # type: ignore[misc]
        return f"10.{a}.{b}.{host}"

    def address6(self, actor: str) -> str:
        """The actor's IPv6 address (labs made with ``ipv6=True``)."""
        a, b = self.subnet  # type: ignore[misc]
        return f"fd00:{a}:{b}::{self.actors.index(actor) + 2}"

    def namespace(self, actor: str) -> str:
        return f"{self.tag}-{actor}"

    def address(self, actor: str) -> str:
        """The actor's address (its namespace's only non-loopback address)."""
        return self._addr(self.actors.index(actor) + 2)

    def command(self, actor: str, argv: list[str]) -> list[str]:
        """``argv`` run inside the actor's namespace."""
        return ["ip", "netns", "exec", self.namespace(actor), *argv]

    # ------------------------------------------------------------------ set up and tear down
    def up(self) -> "NetnsLab":
        # The bridge lives in a namespace of its own ("hub"): its forwarding is then subject to that
        # namespace's empty firewall, not to the host's (Docker hosts drop forwarded bridge traffic).
        hub = self.namespace("hub")
        try:
            _ip("netns", "add", hub)
            self.created_ns.append(hub)
            _ip("-n", hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", hub, "link", "set", "br0", "up")
            # the calling namespace's leg: gateway address here, the other end on the bridge
            self._leg(self.bridge, hub, None)
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, actor in enumerate(self.actors):
                ns = self.namespace(actor)
                _ip("netns", "add", ns)
                self.created_ns.append(ns)
                self._leg(f"{self.tag}n{i}", hub, ns)
                _ip("-n", ns, "addr", "add", f"{self.address(actor)}/24", "dev", f"{self.tag}n{i}")
                if self.ipv6:  # nodad: usable at once (no duplicate detection on a private bridge)
                    _ip("-n", ns, "addr", "add", f"{self.address6(actor)}/64", "dev", f"{self.tag}n{i}", "nodad")
                _ip("-n", ns, "link", "set", f"{self.tag}n{i}", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.down()
            raise
        return self

    def _leg(self, name: str, hub: str, ns: str | None) -> None:
        """A veth pair: ``name`` in ``ns`` (None: the calling namespace), its peer on the hub's bridge."""
        peer = f"{name}h"
        _ip("link", "add", name, "type", "veth", "peer", "name", peer)
        if ns is None:
            self.created_links.append(name)
        else:
            _ip("link", "set", name, "netns", ns)
        _ip("link", "set", peer, "netns", hub)
        _ip("-n", hub, "link", "set", peer, "master", "br0")
        _ip("-n", hub, "link", "set", peer, "up")

    def down(self) -> None:
        """Remove every namespace and link this lab created (deleting a namespace removes its veth end)."""
        for ns in reversed(self.created_ns):
            _ip("netns", "del", ns, check=False)
        for link in reversed(self.created_links):
            _ip("link", "del", link, check=False)
        self.created_ns.clear()
        self.created_links.clear()

    def __enter__(self) -> "NetnsLab":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

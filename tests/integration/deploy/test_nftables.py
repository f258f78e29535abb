"""deploy/nftables: the firewall rules, loaded as the guide loads them in network namespaces, over
IPv4 and IPv6: SSH and the allowed peers get through, everyone else is refused, and the host's own
outgoing connections keep working.

Hosts (ltm/sim/localnet/netns.py, each its own namespace with an IPv4 and an IPv6 address on a private bridge):
``server`` (ltm-server.nft, peers: ``analyst`` and ``party``), ``analyst`` (ltm-analyst.nft, peer:
``operator``), ``party`` (ltm-client.nft), ``operator`` and ``other`` (no rules: an outsider). Each
ruleset file is used as shipped, with the peers appended as deploy/README.md says. Listeners are
plain TCP sockets (dual-stack) on the ports the rules name; a probe is a TCP connect from another
namespace. Root, iproute2 and nft needed (CI installs nftables, .ci/run); skipped otherwise.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ltm.sim.localnet.netns import NetnsLab, netns_available

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "nftables"
NFT = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
HOSTS = ["server", "analyst", "party", "operator", "other"]
SSH, SERVER_PORT, ANALYST_PORT, UNLISTED = 22, 50051, 50050, 8080

pytestmark = [
    pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (network namespaces)"),
    pytest.mark.skipif(NFT is None, reason="nft is not installed (apt-get install nftables; .ci/run does as root)"),
]

LISTENER = """
import socket, sys, threading
def serve(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


@pytest.fixture(scope="module")
def lab():
    lab = NetnsLab(HOSTS, ipv6=True)
    lab.up()
    procs = []
    try:
        for host, ports in {"server": (SSH, SERVER_PORT, UNLISTED), "analyst": (SSH, ANALYST_PORT),
                            "party": (SSH, UNLISTED), "other": (UNLISTED,)}.items():
            p = subprocess.Popen(lab.command(host, [sys.executable, "-c", LISTENER, *map(str, ports)]),
                                 stdout=subprocess.PIPE, text=True)
            procs.append(p)
            assert p.stdout.readline().strip() == "ready"
        yield lab
    finally:
        for p in procs:
            p.kill()
            p.wait()
        lab.down()


def connects(lab: NetnsLab, src: str, dst: str, port: int, v6: bool) -> bool:
    addr = lab.address6(dst) if v6 else lab.address(dst)
    probe = f"import socket; socket.create_connection(({addr!r}, {port}), 2).close()"
    return subprocess.run(lab.command(src, [sys.executable, "-c", probe]), capture_output=True,
                          timeout=30).returncode == 0


def load(lab: NetnsLab, host: str, ruleset: str, peers: list[str], tmp: Path) -> Path:
    """The guide's steps: the shipped file, this host's peers appended, loaded with nft -f."""
    path = tmp / f"{host}-firewall.nft"
    shutil.copy(RULES / ruleset, path)
    with path.open("a") as fh:
        for peer in peers:
            fh.write(f"add element inet ltm peers4 {{ {lab.address(peer)} }}\n")
            fh.write(f"add element inet ltm peers6 {{ {lab.address6(peer)} }}\n")
    r = subprocess.run(lab.command(host, [NFT, "-f", str(path)]), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return path


def unload(lab: NetnsLab, host: str) -> None:
    subprocess.run(lab.command(host, [NFT, "delete", "table", "inet", "ltm"]), capture_output=True)


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_server_rules_admit_ssh_and_the_peers_only(lab, tmp_path, v6):
    # without the rules everyone reaches everything: what follows is the rules' doing
    assert connects(lab, "other", "server", SERVER_PORT, v6) and connects(lab, "other", "server", UNLISTED, v6)
    load(lab, "server", "ltm-server.nft", ["analyst", "party"], tmp_path)
    try:
        assert connects(lab, "analyst", "server", SERVER_PORT, v6)
        assert connects(lab, "party", "server", SERVER_PORT, v6)
        assert connects(lab, "other", "server", SSH, v6)  # SSH kept, from anywhere
        assert not connects(lab, "other", "server", SERVER_PORT, v6)  # not a peer
        assert not connects(lab, "operator", "server", SERVER_PORT, v6)
        assert not connects(lab, "analyst", "server", UNLISTED, v6)  # a peer, but not on another port
        # the server's own connections out, and their replies, still work; loopback too
        assert connects(lab, "server", "other", UNLISTED, v6)
        probe = f"import socket; socket.create_connection(('{'::1' if v6 else '127.0.0.1'}', {UNLISTED}), 2).close()"
        assert subprocess.run(lab.command("server", [sys.executable, "-c", probe])).returncode == 0
        # loading the same file again replaces the table (no duplicate rules, peers as written)
        load(lab, "server", "ltm-server.nft", ["analyst"], tmp_path)
        assert connects(lab, "analyst", "server", SERVER_PORT, v6)
        assert not connects(lab, "party", "server", SERVER_PORT, v6)
        tables = subprocess.run(lab.command("server", [NFT, "list", "tables"]), capture_output=True, text=True).stdout
        assert tables.split().count("ltm") == 1
    finally:
        unload(lab, "server")


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_analyst_rules_admit_the_operator_only(lab, tmp_path, v6):
    load(lab, "analyst", "ltm-analyst.nft", ["operator"], tmp_path)
    try:
        assert connects(lab, "operator", "analyst", ANALYST_PORT, v6)
        assert connects(lab, "party", "analyst", SSH, v6)
        assert not connects(lab, "party", "analyst", ANALYST_PORT, v6)
        assert not connects(lab, "server", "analyst", ANALYST_PORT, v6)
    finally:
        unload(lab, "analyst")


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_client_rules_admit_ssh_only_and_keep_outgoing_connections(lab, tmp_path, v6):
    load(lab, "party", "ltm-client.nft", [], tmp_path)
    try:
        assert connects(lab, "other", "party", SSH, v6)
        assert not connects(lab, "other", "party", UNLISTED, v6)
        assert connects(lab, "party", "server", SERVER_PORT, v6)  # the party's uploads go out
    finally:
        unload(lab, "party")


def test_refused_means_refused_quickly(lab, tmp_path):
    """A non-peer on the LTM port gets a reset (no waiting for a timeout); other ports are dropped."""
    load(lab, "server", "ltm-server.nft", ["analyst"], tmp_path)
    try:
        t = time.monotonic()
        assert not connects(lab, "other", "server", SERVER_PORT, False)
        assert time.monotonic() - t < 1.5
    finally:
        unload(lab, "server")

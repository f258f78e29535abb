"""deploy/README.md's guide to separate machines, run as written with every host in its own
network namespace (sim/netns.py: one namespace per host on its own address, on a bridge this test
creates; nothing else is connected; everything is removed afterwards).  Root only (CI runs as root).

Each ```sh block whose first line is `# on: HOST` runs on HOST: in HOST's namespace, in HOST's own
directory (its disk), with the guide's address variables set.  `# on: server-$i (i = 0, 1, 2)`
runs once per value.  `scp -r SRC HOST:DEST` copies between the hosts' directories; a command
ending in `&` is a service, started in the background and stopped at the end; `iptables` lines run
in the host's namespace when iptables is installed (skipped otherwise).  The one change to the
guide's inputs: fewer clients per party in the job file, to keep the test short.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.netns import NetnsLab, netns_available

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "deploy" / "README.md"
HOSTS = ["server-0", "server-1", "server-2", "analyst", "operator", "party-0", "party-1", "party-2", "party-3"]
CLIENTS_PER_PARTY = 1500

pytestmark = pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (network namespaces)")


def guide_blocks() -> list[tuple[str, list[str]]]:
    """[(host, [command, …])] in the guide's order, loops over hosts expanded, continuations joined."""
    text = GUIDE.read_text()
    section = text[text.index("## Separate machines"):text.index("## The compose testbed")]
    out = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines = block.replace("\\\n", " ").splitlines()
        m = re.fullmatch(r"# on: (\S+)(?: \((\w) = ([\d, …]+)\))?", lines[0].strip())
        assert m, f"a guide block must start with '# on: HOST': {lines[0]!r}"
        host, var, values = m.groups()
        cmds = [l.strip() for l in lines[1:] if l.strip() and not l.strip().startswith("#")]
        if var is None:
            out.append((host, cmds))
            continue
        nums = [int(v) for v in re.findall(r"\d+", values)]
        if "…" in values:
            nums = list(range(nums[0], nums[-1] + 1))
        for v in nums:
            out.append((host.replace(f"${var}", str(v)), [c.replace(f"${var}", str(v)) for c in cmds]))
    return out


def test_the_guide_names_every_host():
    hosts = {h for h, _ in guide_blocks()}
    assert hosts == set(HOSTS) | {"ca"}
    from ltm.cli import build_parser

    for _, cmds in guide_blocks():  # every ltm line parses (variables stand for addresses)
        for c in cmds:
            words = c.rstrip("&").split()
            if words[0] == "ltm":
                build_parser(words[1]).parse_args([w.replace("$", "") for w in words[1:]])


class Hosts:
    def __init__(self, root: Path, lab: NetnsLab | None):
        self.root, self.lab = root, lab
        self.services: list[tuple[str, subprocess.Popen]] = []
        self.iptables = shutil.which("iptables") is not None
        addr = {h: lab.address(h) for h in HOSTS}
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1",
                    "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                    "SERVER0": addr["server-0"], "SERVER1": addr["server-1"], "SERVER2": addr["server-2"],
                    "ANALYST": addr["analyst"], "OPERATOR": addr["operator"],
                    "PARTIES": " ".join(addr[f"party-{p}"] for p in range(4))}
        # `ltm` as the guide calls it: this checkout's code, whatever is installed
        self.bin = root / "bin"
        self.bin.mkdir()
        (self.bin / "ltm").write_text(f"#!/bin/sh\nexec {sys.executable} -m ltm.cli \"$@\"\n")
        (self.bin / "ltm").chmod(0o755)
        self.env["PATH"] = f"{self.bin}:{self.env['PATH']}"
        self.env["PYTHONPATH"] = str(ROOT) + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")

    def dir(self, host: str) -> Path:
        d = self.root / host
        d.mkdir(exist_ok=True)
        return d

    def argv(self, host: str, line: str) -> list[str]:
        cmd = ["bash", "-c", f"exec {line}" if not line.startswith(("for ", "if ")) else line]
        return self.lab.command(host, cmd) if host in HOSTS else cmd

    def run(self, host: str, line: str) -> str:
        if line.startswith("scp "):
            _, _, src, dest = line.split()
            target, _, path = dest.partition(":")
            shutil.copytree(self.dir(host) / src, self.dir(target) / path)
            return ""
        if "iptables" in line and not self.iptables:
            return ""
        log = self.dir(host) / "commands.log"
        if line.endswith("&"):
            with log.open("ab") as fh:
                proc = subprocess.Popen(self.argv(host, line[:-1].strip()), cwd=self.dir(host), env=self.env,
                                        stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            self.services.append((host, proc))
            return ""
        r = subprocess.run(self.argv(host, line), cwd=self.dir(host), env=self.env, capture_output=True, text=True,
                           timeout=300)
        with log.open("a") as fh:
            fh.write(f"$ {line}\n{r.stdout}{r.stderr}")
        assert r.returncode == 0, f"on {host}: {line}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
        return r.stdout

    def wait_listening(self, host: str, port: int, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1).close()"
        while subprocess.run(self.lab.command(host, [sys.executable, "-c", probe]), capture_output=True).returncode:
            procs = [p for h, p in self.services if h == host]
            assert all(p.poll() is None for p in procs) and time.monotonic() < end, \
                (self.dir(host) / "commands.log").read_text()[-2000:]
            time.sleep(0.2)

    def can_connect(self, src: str, dst_addr: str, port: int) -> bool:
        probe = f"import socket; socket.create_connection(('{dst_addr}', {port}), 2).close()"
        return subprocess.run(self.lab.command(src, [sys.executable, "-c", probe]), capture_output=True,
                              timeout=30).returncode == 0

    def stop(self) -> None:
        for _, p in self.services:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in self.services:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def party_files(hosts: Hosts) -> None:
    """Each party's own data, on its own host (the parties' business, before the guide's step 5)."""
    text = (ROOT / "sim" / "data" / "household_power_sample100k_part1of2.csv").read_text().splitlines()
    for p in range(4):
        rows = text[1 + p * CLIENTS_PER_PARTY:1 + (p + 1) * CLIENTS_PER_PARTY]
        (hosts.dir(f"party-{p}") / f"party-{p}.csv").write_text("\n".join([text[0], *rows]) + "\n")


def test_the_guide_runs_with_every_host_in_its_own_namespace(tmp_path):
    lab = NetnsLab(list(HOSTS))
    lab.up()
    hosts = Hosts(tmp_path, lab)
    try:
        (hosts.dir("operator") / "examples").symlink_to(ROOT / "examples")  # the operator's checkout
        party_files(hosts)
        for host, cmds in guide_blocks():
            if host.startswith("party-"):
                for s in ("server-0", "server-1", "server-2"):
                    hosts.wait_listening(s, 50051)
            for line in cmds:
                if line.startswith("ltm job check"):  # the smaller job (the one change to the guide's inputs)
                    job = hosts.dir("operator") / "job.toml"
                    job.write_text(re.sub(r"clients = \d+", f"clients = {CLIENTS_PER_PARTY}", job.read_text()))
                if host == "operator" and line.startswith("ltm job submit"):
                    hosts.wait_listening("analyst", 50050)
                out = hosts.run(host, line)
                if line.startswith("ltm job submit") and "--wait" in line:
                    assert "done" in out and "release sha256" in out, out
        result = hosts.dir("operator") / "result"
        assert (result / "release.json").is_file() and (result / "model.json").is_file()
        # every actor on its own address: the servers saw the parties and the analyst from theirs
        assert len({lab.address(h) for h in HOSTS}) == len(HOSTS)
        # the firewall rules hold: a server cannot open a connection to another server
        if hosts.iptables:
            assert not hosts.can_connect("server-1", lab.address("server-0"), 50051)
            assert not hosts.can_connect("party-0", lab.address("analyst"), 50050)
            assert hosts.can_connect("party-0", lab.address("server-0"), 50051)
    finally:
        hosts.stop()
        lab.down()

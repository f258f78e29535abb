"""deploy/README.md's guide to separate machines, run as written with every host in its own
network namespace (ltm/sim/localnet/netns.py: one namespace per host on its own address, on a bridge this test
creates; nothing else is connected; everything is removed afterwards).  Root only (CI runs as root).

Each ```sh block whose first line is `# on: HOST` runs on HOST: in HOST's namespace, in HOST's own
directory (its disk), with the guide's address variables set.  `# on: server-$i (i = 0, 1, 2)`
runs once per value; a here-document (`cat > F <<EOF` … `EOF`) is one command.  A host's paths
/etc/ltm, /etc/systemd/system and /var/lib/ltm are directories in its own directory, /opt/ltm/bin/ltm
is this checkout's `ltm`, and `ltm-src` (the unpacked release) is this checkout.  `scp SRC… HOST:DEST`
copies between the hosts' directories and records every file it copies.  `systemctl enable --now`
and `systemctl start` run the ExecStart of the unit file that the block installed into the host's
/etc/systemd/system (creating its StateDirectory): a oneshot unit (the firewall's `nft -f`, in the
host's namespace, when nft is installed) to its end, any other in the background, stopped at the
end.  Skipped, because they need the system user `ltm` that the test does not create (everything
runs as root): `systemd-sysusers`, `chgrp`; and `systemctl daemon-reload`.  The one change to the
guide's inputs: fewer clients per party in the job file, to keep the test short.

No private key crosses a host boundary: every file `scp` copied is checked to hold no private key,
and at the end each host's directory holds exactly one private key, the one it made for itself,
which is the key of the certificate it was given (the CA: only the CA key).
"""
from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ltm.sim.localnet.netns import NetnsLab, netns_available
from tests.helpers.processes import stop_processes

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "deploy" / "README.md"
HOSTS = ["server-0", "server-1", "server-2", "analyst", "operator", "party-0", "party-1", "party-2", "party-3"]
CLIENTS_PER_PARTY = 1500

pytestmark = pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (network namespaces)")


def guide_blocks() -> list[tuple[str, list[str]]]:
    """[(host, [command, …])] in the guide's order, loops over hosts expanded, continuations joined,
    a here-document kept with the line that opens it."""
    text = GUIDE.read_text()
    section = text[text.index("## Separate machines"):text.index("## The compose testbed")]
    out = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines = block.replace("\\\n", " ").splitlines()
        m = re.fullmatch(r"# on: (\S+)(?: \((\w) = ([\d, …]+)\))?", lines[0].strip())
        assert m, f"a guide block must start with '# on: HOST': {lines[0]!r}"
        host, var, values = m.groups()
        cmds: list[str] = []
        heredoc: str | None = None
        for line in lines[1:]:
            if heredoc is not None:  # inside a here-document: verbatim, part of the command that opened it
                cmds[-1] += "\n" + line
                if line.strip() == heredoc:
                    heredoc = None
                continue
            if line.strip() and not line.strip().startswith("#"):
                cmds.append(line.strip())
                opener = re.search(r"<<\s*'?(\w+)'?\s*$", line)
                heredoc = opener.group(1) if opener else None
        assert heredoc is None, f"an unterminated here-document in the guide block for {host}"
        if var is None:
            out.append((host, cmds))
            continue
        nums = [int(v) for v in re.findall(r"\d+", values)]
        if "…" in values:
            nums = list(range(nums[0], nums[-1] + 1))
        for v in nums:
            out.append((host.replace(f"${var}", str(v)), [c.replace(f"${var}", str(v)) for c in cmds]))
    return out


def _unit_file(unit: str) -> tuple[str, str | None]:
    """``ltm-server@server-0.service`` → (``ltm-server@.service``, ``server-0``)."""
    name = unit if unit.endswith(".service") else unit + ".service"
    if "@" not in name:
        return name, None
    prefix, rest = name.split("@", 1)
    return f"{prefix}@.service", rest[: -len(".service")]


def test_the_guide_names_every_host():
    hosts = {h for h, _ in guide_blocks()}
    assert hosts == set(HOSTS) | {"ca"}
    from ltm.cli.app import build_parser

    for _, cmds in guide_blocks():
        for c in cmds:
            words = c.split()
            if words[0] == "ltm":  # every ltm line parses (variables stand for addresses)
                build_parser(words[1]).parse_args([w.replace("$", "") for w in words[1:]])
            # every release file it names exists (the sdist ships deploy/ and examples/, see
            # tests/integration/test_wheel.py), and every unit it starts is one of deploy/systemd's
            for path in re.findall(r"ltm-src/(\S+)", c):
                assert (ROOT / path).is_file(), path
            if words[0] == "systemctl" and words[1] in ("enable", "start"):
                for unit in (w for w in words[2:] if not w.startswith("-")):
                    assert (ROOT / "deploy" / "systemd" / _unit_file(unit)[0]).is_file(), unit
    text = GUIDE.read_text()
    section = text[text.index("## Separate machines"):text.index("## The compose testbed")]
    assert "iptables" not in section and not re.search(r"&\s*$", section, re.M)  # units and nftables instead


#: `scp SRC… HOST:DEST` between the hosts' directories; logs "from, to, file, holds a private key"
SCP = r'''
import os, shutil, sys
from pathlib import Path
root, log, here = Path(os.environ["LTM_HOSTS_ROOT"]), os.environ["LTM_SCP_LOG"], os.environ["LTM_HOST"]
*sources, dest = [a for a in sys.argv[1:] if a != "-r"]
host, _, path = dest.partition(":")
if not host or not (root / host).is_dir():
    sys.exit(f"scp: unknown host {host!r}")
target = root / host / path.lstrip("/")
if dest.endswith("/") and not target.is_dir():
    sys.exit(f"scp: {dest}: No such file or directory")
for src in map(Path, sources):
    to = target / src.name if target.is_dir() else target
    files = [src] if src.is_file() else [f for f in src.rglob("*") if f.is_file()]
    with open(log, "a") as fh:
        for f in files:
            fh.write(f"{here}\t{host}\t{f.name}\t{int(b'PRIVATE KEY' in f.read_bytes())}\n")
    (shutil.copytree if src.is_dir() else shutil.copy2)(src, to)
'''


class Hosts:
    def __init__(self, root: Path, lab: NetnsLab):
        self.root, self.lab = root, lab
        self.services: list[tuple[str, str, subprocess.Popen]] = []
        self.nft = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
        self.skipped: list[str] = []
        addr = {h: lab.address(h) for h in HOSTS}
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1",
                    "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                    "SERVER0": addr["server-0"], "SERVER1": addr["server-1"], "SERVER2": addr["server-2"],
                    "ANALYST": addr["analyst"], "OPERATOR": addr["operator"],
                    "PARTIES": " ".join(addr[f"party-{p}"] for p in range(4))}
        # `ltm` as the guide calls it: this checkout's code, whatever is installed; `scp` between hosts
        self.bin = root / "bin"
        self.bin.mkdir()
        (self.bin / "ltm").write_text(f"#!/bin/sh\nexec {sys.executable} -m ltm.cli \"$@\"\n")
        (self.bin / "scp").write_text(f"#!{sys.executable}\n{SCP}")
        for shim in ("ltm", "scp"):
            (self.bin / shim).chmod(0o755)
        self.scp_log = root / "scp.log"
        self.scp_log.touch()
        self.env["PATH"] = f"{self.bin}:{self.env['PATH']}"
        self.env["PYTHONPATH"] = str(ROOT) + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
        self.env.update(LTM_HOSTS_ROOT=str(root), LTM_SCP_LOG=str(self.scp_log))
        for h in ["ca", *HOSTS]:
            (self.dir(h) / "etc" / "systemd" / "system").mkdir(parents=True)  # what every host has
            (self.dir(h) / "ltm-src").symlink_to(ROOT)  # the unpacked release

    def dir(self, host: str) -> Path:
        d = self.root / host
        d.mkdir(exist_ok=True)
        return d

    def map(self, host: str, text: str) -> str:
        """The host's absolute paths, in its own directory (not after ``HOST:``, scp's remote side)."""
        text = re.sub(r"(?<![\w:/.-])/opt/ltm/bin/ltm\b", str(self.bin / "ltm"), text)
        return re.sub(r"(?<![\w:/.-])(/etc/ltm|/etc/systemd/system|/var/lib/ltm)\b",
                      lambda m: f"{self.dir(host)}{m.group(1)}", text)

    def argv(self, host: str, line: str) -> list[str]:
        cmd = ["bash", "-c", f"exec {line}" if not line.startswith(("for ", "if ")) else line]
        return self.lab.command(host, cmd) if host in HOSTS else cmd

    def run(self, host: str, line: str) -> str:
        if line.startswith(("systemd-sysusers ", "chgrp ", "systemctl daemon-reload")):
            self.skipped.append(f"{host}: {line}")
            return ""
        if line.startswith("systemctl "):
            words = line.split()
            assert words[1] == "start" or words[1:3] == ["enable", "--now"], line
            for unit in (w for w in words[2:] if not w.startswith("-")):
                self.start_unit(host, unit)
            return ""
        r = subprocess.run(self.argv(host, self.map(host, line)), cwd=self.dir(host),
                           env={**self.env, "LTM_HOST": host}, capture_output=True, text=True, timeout=300)
        with (self.dir(host) / "commands.log").open("a") as fh:
            fh.write(f"$ {line}\n{r.stdout}{r.stderr}")
        assert r.returncode == 0, f"on {host}: {line}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
        return r.stdout

    def start_unit(self, host: str, unit: str) -> None:
        """What systemd would run: the installed unit file's ExecStart, with its instance name and
        state directory."""
        name, instance = _unit_file(unit)
        path = self.dir(host) / "etc" / "systemd" / "system" / name
        assert path.is_file(), f"on {host}: {unit} is not installed in /etc/systemd/system"
        cp = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
        cp.optionxform = str  # type: ignore[assignment,method-assign]
        cp.read_string(path.read_text())
        service = cp["Service"]
        if service.get("StateDirectory"):
            state = self.dir(host) / "var" / "lib" / service["StateDirectory"].replace("%i", instance or "")
            state.mkdir(parents=True, exist_ok=True)
            state.chmod(int(service.get("StateDirectoryMode", "0755"), 8))
        argv = shlex.split(self.map(host, service["ExecStart"].replace("%i", instance or "")))
        if argv[0] == "/usr/sbin/nft":
            if self.nft is None:
                self.skipped.append(f"{host}: {unit} (nft is not installed)")
                return
            argv[0] = self.nft
        log = self.dir(host) / "commands.log"
        if service.get("Type") == "oneshot":
            r = subprocess.run(self.lab.command(host, argv), cwd=self.dir(host), env=self.env, capture_output=True,
                               text=True, timeout=120)
            with log.open("a") as fh:
                fh.write(f"$ [{unit}] {shlex.join(argv)}\n{r.stdout}{r.stderr}")
            assert r.returncode == 0, f"on {host}: {unit}: {r.stderr}"
            return
        with log.open("ab") as fh:
            proc = subprocess.Popen(self.lab.command(host, argv), cwd=self.dir(host), env=self.env,
                                    stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        self.services.append((host, unit, proc))

    def wait_listening(self, host: str, port: int, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 1).close()"
        while subprocess.run(self.lab.command(host, [sys.executable, "-c", probe]), capture_output=True).returncode:
            procs = [p for h, _, p in self.services if h == host]
            assert all(p.poll() is None for p in procs) and time.monotonic() < end, \
                (self.dir(host) / "commands.log").read_text()[-2000:]
            time.sleep(0.2)

    def can_connect(self, src: str, dst_addr: str, port: int) -> bool:
        probe = f"import socket; socket.create_connection(('{dst_addr}', {port}), 2).close()"
        return subprocess.run(self.lab.command(src, [sys.executable, "-c", probe]), capture_output=True,
                              timeout=30).returncode == 0

    def private_keys(self, host: str) -> list[str]:
        """Every file on the host's disk that holds a private key (ltm-src, the release, not followed)."""
        found = []
        for dirpath, _, filenames in os.walk(self.dir(host)):  # os.walk does not follow symlinks
            for f in filenames:
                p = Path(dirpath) / f
                if not p.is_symlink() and b"PRIVATE KEY" in p.read_bytes():
                    found.append(p.relative_to(self.dir(host)).as_posix())
        return sorted(found)

    def stop(self) -> None:
        stop_processes(p for _, _, p in self.services)


def party_files(hosts: Hosts) -> None:
    """Each party's own data, on its own host (the parties' business, before the guide's step 7)."""
    text = (ROOT / "ltm" / "datasets" / "data" / "household_power_sample100k_part1of2.csv").read_text().splitlines()
    for p in range(4):
        rows = text[1 + p * CLIENTS_PER_PARTY:1 + (p + 1) * CLIENTS_PER_PARTY]
        (hosts.dir(f"party-{p}") / f"party-{p}.csv").write_text("\n".join([text[0], *rows]) + "\n")


def _certs_dir(host: str) -> str:
    return "certs" if host == "operator" else "etc/ltm/certs"


def test_the_guide_runs_with_every_host_in_its_own_namespace(tmp_path):
    lab = NetnsLab(list(HOSTS))
    lab.up()
    hosts = Hosts(tmp_path, lab)
    try:
        party_files(hosts)
        for host, cmds in guide_blocks():
            for line in cmds:
                if line.startswith("systemctl start ltm-party@"):
                    for s in ("server-0", "server-1", "server-2"):
                        hosts.wait_listening(s, 50051)
                if line.startswith("ltm job check"):  # the smaller job (the one change to the guide's inputs)
                    job = hosts.dir("operator") / "job.toml"
                    job.write_text(re.sub(r"clients = \d+", f"clients = {CLIENTS_PER_PARTY}", job.read_text()))
                if host == "operator" and line.startswith("ltm job submit"):
                    hosts.wait_listening("analyst", 50050)
                out = hosts.run(host, line)
                if line.startswith("ltm job submit") and "--wait" in line:
                    assert "done" in out and "release sha256" in out, out
        result = hosts.dir("operator") / "result" / "power-ridge-1"  # `ltm job result` writes --out/<job id>/
        assert (result / "release.json").is_file() and (result / "model.json").is_file()
        # the services ran from their units: three servers and the analyst still up; each party's
        # one-shot run ended successfully
        running = {(h, u) for h, u, p in hosts.services if p.poll() is None}
        assert {("analyst", "ltm-analyst.service")} | {(f"server-{i}", f"ltm-server@server-{i}.service")
                                                        for i in range(3)} <= running
        for h, u, p in hosts.services:
            if u.startswith("ltm-party@"):
                assert p.wait(timeout=60) == 0, (hosts.dir(h) / "commands.log").read_text()[-2000:]
        # every actor on its own address: the servers saw the parties and the analyst from theirs
        assert len({lab.address(h) for h in HOSTS}) == len(HOSTS)

        # no private key crossed a host boundary: what scp copied holds none (requests one way,
        # certificates and ca.pem the other) …
        copies = [l.split("\t") for l in hosts.scp_log.read_text().splitlines()]
        assert {(src, f) for src, _, f, _ in copies if src != "ca"} == {(h, f"{h}.csr") for h in HOSTS}
        assert {(dst, f) for src, dst, f, _ in copies if src == "ca"} == \
            {(h, n) for h in HOSTS for n in (f"{h}.pem", "ca.pem")}
        assert [c for c in copies if c[3] != "0"] == []
        # … and each host holds exactly one private key, made there, the key of its certificate
        assert hosts.private_keys("ca") == ["ca/ca.key"]
        ca_cert = x509.load_pem_x509_certificate((hosts.dir("ca") / "ca" / "ca.pem").read_bytes())
        for h in HOSTS:
            certs = hosts.dir(h) / _certs_dir(h)
            assert hosts.private_keys(h) == [f"{_certs_dir(h)}/{h}.key"]
            key = serialization.load_pem_private_key((certs / f"{h}.key").read_bytes(), password=None)
            cert = x509.load_pem_x509_certificate((certs / f"{h}.pem").read_bytes())
            assert cert.public_key().public_numbers() == key.public_key().public_numbers(), h
            assert cert.issuer == ca_cert.subject and (certs / "ca.pem").read_bytes() == (
                hosts.dir("ca") / "ca" / "ca.pem").read_bytes()

        # the firewall rules hold: a server cannot open a connection to another server, a party not
        # to the analyst; a party reaches the servers
        if hosts.nft is not None:
            assert not hosts.can_connect("server-1", lab.address("server-0"), 50051)
            assert not hosts.can_connect("party-0", lab.address("analyst"), 50050)
            assert hosts.can_connect("party-0", lab.address("server-0"), 50051)
            assert hosts.can_connect("operator", lab.address("analyst"), 50050)
        assert all(s.split(": ", 1)[1].startswith(("systemd-sysusers", "chgrp", "systemctl daemon-reload"))
                   for s in hosts.skipped) or hosts.nft is None, hosts.skipped
    finally:
        hosts.stop()
        lab.down()

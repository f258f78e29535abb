"""The compose testbed, checked without a Docker engine (deploy/testbed.sh runs it with one).

What is checked here, fast: the file (and the seeded and columns overlays merged over it) parses; the image is
built once, from deploy/Dockerfile, on a digest-pinned base; start-up order uses health and
completion conditions; every command and health check is an `ltm` invocation the real parser
accepts; every actor runs with its own certificates; certs-init is the only holder of the CA key.
Then the services run as written — no flag added — as local processes: each named volume is a
directory, each container path is mapped to the directory of the volume mounted there, container
names become loopback endpoints.  certs-init's own `ltm certs` command issues the bundles; then
no service can see a `ca.key` in any volume it mounts, and each sees exactly its own bundle at
/certs; and the job runs end to end with the compose commands.
"""
from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.optional import require

yaml = require("yaml")

from ltm.cli.app import build_parser  # noqa: E402
from tests.helpers.processes import stop_processes  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SEEDED = yaml.safe_load((ROOT / "deploy" / "compose.seeded.yml").read_text())
#: the overlays deploy/testbed.sh runs over docker-compose.yml (name → parsed file)
OVERLAYS = {"seeded": SEEDED, "columns": yaml.safe_load((ROOT / "deploy" / "compose.columns.yml").read_text())}
SERVICES = COMPOSE["services"]
DIGEST_REF = re.compile(r"^[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}$")


def merged_services(overlay: str = "seeded") -> dict[str, dict]:
    """docker-compose.yml with deploy/compose.<overlay>.yml over it (an overlay's command replaces)."""
    out = {name: dict(svc) for name, svc in SERVICES.items()}
    for name, svc in OVERLAYS[overlay]["services"].items():
        assert name in out, f"the {overlay} overlay names an unknown service {name}"
        out[name].update(svc)
    return out


def interpolate(word: str) -> str:
    """Compose's ``${VAR:-default}`` with no VAR set."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", word)


def ltm_argv(service: dict) -> list[list[str]]:
    """Every `ltm …` argument vector a service runs (its command and its health check)."""
    out = []
    cmd = service.get("command")
    if service.get("entrypoint", ["ltm"])[0] == "sh":
        for part in re.split(r"&&|\|\||;", cmd[0]):
            words = shlex.split(part)
            if words and words[0] == "ltm":
                out.append(words[1:])
    elif cmd:
        out.append(list(cmd))
    test = service.get("healthcheck", {}).get("test")
    if test:
        assert test[:2] == ["CMD", "ltm"]
        out.append(test[2:])
    return out


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def mounts(service: dict) -> dict[str, tuple[str, bool]]:
    """container path → (volume name, read-only)."""
    out = {}
    for spec in service.get("volumes", []):
        parts = spec.split(":")
        assert parts[0] in COMPOSE["volumes"], f"{spec}: only named volumes (no host paths) in the testbed"
        out[parts[1]] = (parts[0], len(parts) > 2 and "ro" in parts[2].split(","))
    return out


#: the services that run as an LTM actor (certs-init issues certificates; demo-data stands in for the
#: data owners, writing the demo's job file and each party's CSV, and holds no key)
ACTORS = sorted(n for n in SERVICES if n not in ("certs-init", "demo-data"))


def test_compose_structure():
    assert {"certs-init", "server-0", "server-1", "server-2", "analyst", "operator"} <= set(SERVICES)
    assert sum(name.startswith("party-") for name in SERVICES) >= 4
    built = [n for n, s in SERVICES.items() if "build" in s]
    assert built == ["certs-init"], "one service builds the image, the others run it"
    assert SERVICES["certs-init"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert all(s["image"] == "ltm:local" for s in SERVICES.values())
    for name in ("server-0", "server-1", "server-2", "analyst"):
        assert "healthcheck" in SERVICES[name]
    for s in ("server-0", "server-1", "server-2"):
        assert SERVICES[s]["depends_on"]["certs-init"]["condition"] == "service_completed_successfully"
        assert SERVICES["analyst"]["depends_on"][s]["condition"] == "service_healthy"
    assert SERVICES["operator"]["depends_on"]["analyst"]["condition"] == "service_healthy"
    assert SERVICES["operator"]["depends_on"]["demo-data"]["condition"] == "service_completed_successfully"
    assert SERVICES["operator"]["command"][:2] == ["job", "submit"], "the operator runs the real path: a job file"
    # `up operator` starts only what the operator depends on: every party must be among it
    for party in (n for n in SERVICES if n.startswith("party-")):
        assert party in SERVICES["operator"]["depends_on"], f"`up operator` would never start {party}"


def test_base_image_pinned_by_digest_in_one_place():
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    pinned = re.search(r"^ARG BASE=(\S+)$", dockerfile, re.M).group(1)
    assert DIGEST_REF.match(pinned), pinned
    default = re.fullmatch(r"\$\{LTM_BASE_IMAGE:-(\S+)\}", SERVICES["certs-init"]["build"]["args"]["BASE"]).group(1)
    assert default == pinned, "compose's default base must be the Dockerfile's pinned one"
    assert "--no-index" in dockerfile, "the image installs from the local wheelhouse only"


def test_dockerignore_sends_only_wheels():
    lines = [l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert lines[0] == "*" and all(l.startswith("!deploy/wheelhouse/") for l in lines[1:])
    assert "deploy/wheelhouse/" in (ROOT / ".gitignore").read_text().splitlines()


def test_servers_share_no_network():
    nets = {n: set(s.get("networks", [])) for n, s in SERVICES.items()}
    servers = [n for n in SERVICES if n.startswith("server-")]
    for a in servers:
        for b in servers:
            if a < b:
                assert not nets[a] & nets[b], f"{a} and {b} can reach each other"
    assert nets["certs-init"] == set() and SERVICES["certs-init"]["network_mode"] == "none"
    assert not nets["operator"] & set().union(*(nets[s] for s in servers)), "the operator talks to the analyst only"


# ---------------------------------------------------------------------------- hardening and networks
#: (manifest, container) whose resource limits a compose service must match (deploy/k8s)
K8S_LIMITS = {"server": ("components/server/statefulset.yaml", "server"),
              "party": ("components/party/job.yaml", "party"),
              "analyst": ("base/analyst/analyst.yaml", "analyst"),
              "operator": ("base/analyst/operator.yaml", "operator")}
#: what the two root init containers may add back (to chown what they wrote to uid 10001)
INIT_CAPS = {"certs-init": ["CHOWN"], "demo-data": ["CHOWN"]}
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}


def memory_bytes(value) -> int:
    """'2g' (compose), '2Gi' (Kubernetes) or a byte count (`docker compose config`) in bytes."""
    number, unit = re.fullmatch(r"(\d+)([a-zA-Z]*)", str(value).strip()).groups()
    return int(number) * UNITS[unit.lower().rstrip("b")]


def k8s_limits(role: str) -> tuple[float, int]:
    """(CPUs, memory bytes) of a role's container limits in deploy/k8s."""
    path, name = K8S_LIMITS[role]
    for doc in yaml.safe_load_all((ROOT / "deploy" / "k8s" / path).read_text()):
        if doc and doc.get("kind") in ("StatefulSet", "Job", "Deployment"):
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == name:
                    limits = c["resources"]["limits"]
                    return float(limits["cpu"]), memory_bytes(limits["memory"])
    raise AssertionError(f"no container {name} in deploy/k8s/{path}")


def role(name: str) -> str:
    return name.split("-")[0] if name.split("-")[0] in ("server", "party") else name


def hardening_problems(services: dict[str, dict]) -> list[str]:
    """What keeps each service from the k8s manifests' hardening (empty: none)."""
    bad = []
    for name, svc in services.items():
        if svc.get("read_only") is not True:
            bad.append(f"{name}: root file system not read_only")
        tmpfs = svc.get("tmpfs", [])
        if "/tmp" not in ([tmpfs] if isinstance(tmpfs, str) else [t.split(":")[0] for t in tmpfs]):
            bad.append(f"{name}: no tmpfs at /tmp")
        if svc.get("cap_drop") != ["ALL"]:
            bad.append(f"{name}: cap_drop is {svc.get('cap_drop')}, not [ALL]")
        if sorted(svc.get("cap_add", [])) != INIT_CAPS.get(name, []):
            bad.append(f"{name}: cap_add {svc.get('cap_add')}")
        if "no-new-privileges:true" not in svc.get("security_opt", []):
            bad.append(f"{name}: no no-new-privileges:true in security_opt")
        if svc.get("privileged") or svc.get("network_mode") == "host" or svc.get("ports") or svc.get("pid"):
            bad.append(f"{name}: privileged, host network, host pid or published ports")
        if svc.get("user", "10001") not in ("10001", "10001:10001") and name not in INIT_CAPS:
            bad.append(f"{name}: runs as {svc.get('user')}")
        if not svc.get("cpus") or not svc.get("mem_limit"):
            bad.append(f"{name}: no CPU or memory limit (cpus, mem_limit)")
        elif role(name) in K8S_LIMITS:
            cpus, memory = k8s_limits(role(name))
            if (float(svc["cpus"]), memory_bytes(svc["mem_limit"])) != (cpus, memory):
                bad.append(f"{name}: limits {svc['cpus']} CPUs, {svc['mem_limit']}; the manifests: {cpus}, {memory} B")
    return bad


def service_networks(svc: dict) -> set[str]:
    nets = svc.get("networks", [])
    return set(nets) if isinstance(nets, list) else set(nets or {})


def network_problems(services: dict[str, dict], networks: dict[str, dict]) -> list[str]:
    """Who could reach whom, from shared networks: parties only the servers (one network per
    server each), the operator only the analyst, the analyst each server, servers no other server;
    every network internal (no way out of the testbed)."""
    nets = {n: service_networks(s) for n, s in services.items()}
    bad = [f"network {n} is not internal" for n, spec in networks.items() if not (spec or {}).get("internal")]
    for name, svc in services.items():
        if not nets[name] and svc.get("network_mode") != "none":
            bad.append(f"{name} joins the default network")
    servers = sorted(n for n in services if n.startswith("server-"))
    parties = sorted(n for n in services if n.startswith("party-"))
    for a in services:
        for b in services:
            shared = nets[a] & nets[b]
            if a >= b or not shared:
                continue
            pair = {role(a), role(b)}
            if pair not in ({"party", "server"}, {"analyst", "server"}, {"analyst", "operator"}):
                bad.append(f"{a} and {b} share {sorted(shared)}")
    for p in parties:
        for s in servers:
            if len(nets[p] & nets[s]) != 1:
                bad.append(f"{p} and {s} share {sorted(nets[p] & nets[s])}, not exactly one network")
    for s in servers:
        if not nets["analyst"] & nets[s]:
            bad.append(f"the analyst cannot reach {s}")
    if not nets["operator"] & nets["analyst"]:
        bad.append("the operator cannot reach the analyst")
    return bad


@pytest.mark.parametrize("overlay", [None, "seeded", "columns"], ids=["plain", "seeded", "columns"])
def test_every_container_is_hardened_like_the_k8s_manifests(overlay):
    """read_only with a /tmp tmpfs, cap_drop ALL (the two root init containers add CHOWN alone),
    no-new-privileges, and the manifests' CPU and memory limits, on every service."""
    assert hardening_problems(merged_services(overlay) if overlay else SERVICES) == []


def test_per_role_networks():
    assert network_problems(SERVICES, COMPOSE["networks"]) == []


def test_the_checks_catch_what_they_check():
    """Each check fails on the file with one property taken away (they can fail)."""
    import copy
    for key, value in (("read_only", False), ("cap_drop", []), ("security_opt", []), ("tmpfs", []),
                       ("cap_add", ["NET_RAW"]), ("cpus", None), ("mem_limit", "8g")):
        broken = copy.deepcopy(SERVICES)
        broken["party-2"][key] = value
        assert any(p.startswith("party-2:") for p in hardening_problems(broken)), key
    broken = copy.deepcopy(SERVICES)
    broken["party-1"]["networks"] = [*broken["party-1"]["networks"], "p0-s0"]   # party-1 beside party-0
    assert any("party-0 and party-1" in p for p in network_problems(broken, COMPOSE["networks"]))
    broken = copy.deepcopy(SERVICES)
    broken["party-3"]["networks"] = [*broken["party-3"]["networks"], "a-s0"]    # party-3 beside the analyst
    assert any("analyst and party-3" in p for p in network_problems(broken, COMPOSE["networks"]))
    broken = copy.deepcopy(SERVICES)
    broken["server-1"]["networks"] = [*broken["server-1"]["networks"], "p0-s0"]  # server-1 beside server-0
    assert any("server-0 and server-1" in p for p in network_problems(broken, COMPOSE["networks"]))
    open_nets = {**COMPOSE["networks"], "control": {}}
    assert "network control is not internal" in network_problems(SERVICES, open_nets)


def compose_binary() -> list[str] | None:
    """The compose deploy/testbed.sh would use: the `docker compose` plugin, else docker-compose."""
    import shutil
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


@pytest.mark.skipif(compose_binary() is None, reason="neither `docker compose` nor docker-compose is installed "
                                                     "(the pure-YAML tests above check the same properties)")
@pytest.mark.parametrize("overlay", [None, "seeded", "columns"], ids=["plain", "seeded", "columns"])
def test_docker_compose_config_shows_the_hardening(overlay):
    """What Compose itself makes of the files (merge keys, the overlay), as the testbed runs them."""
    files = ["-f", "docker-compose.yml"] + (["-f", f"deploy/compose.{overlay}.yml"] if overlay else [])
    r = subprocess.run([*compose_binary(), "-p", "ltm-config-check", *files, "config"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load(r.stdout)
    assert sorted(config["services"]) == sorted(SERVICES)
    assert hardening_problems(config["services"]) == []
    assert network_problems(config["services"], config["networks"]) == []


@pytest.mark.parametrize("overlay", [None, "seeded", "columns"], ids=["plain", "seeded", "columns"])
@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_command_is_a_valid_ltm_invocation(service, overlay):
    svc = merged_services(overlay)[service] if overlay else SERVICES[service]
    argvs = ltm_argv(svc)
    assert argvs, f"{service} runs no ltm command"
    for argv in argvs:
        args = build_parser(argv[0]).parse_args([interpolate(w) for w in argv])  # SystemExit on a bad flag
        assert callable(args.func)
    if overlay and service in OVERLAYS[overlay]["services"]:
        seeded = flag(argvs[0], "--randomness") if service == "operator" else flag(argvs[0], "--seed")
        assert seeded is not None and "${LTM_SEED:-7}" in seeded


def actor_of(name: str, argv: list[str]) -> str:
    """The identity a service's command runs as: its --id, else its role (analyst, operator)."""
    return flag(argv, "--id") or {"analyst": "analyst", "operate": "operator", "job": "operator"}[argv[0]]


@pytest.mark.parametrize("service", ACTORS)
def test_every_actor_runs_with_its_own_certificates(service):
    """A party (or any actor) without --certs cannot start; with the wrong bundle it would be someone else."""
    svc = SERVICES[service]
    m = mounts(svc)
    assert "/certs" in m, f"{service} mounts no certificates"
    volume, read_only = m["/certs"]
    assert volume == f"certs-{service}" and read_only, f"{service} must mount its own bundle read-only"
    for argv in ltm_argv(svc):
        if argv[0] == "health":  # the plaintext health-only port, on the container's loopback
            host_port = flag(svc["command"], "--health-listen")
            assert host_port and host_port.startswith("127.0.0.1:") and flag(argv, "--target") == host_port
            continue
        assert flag(argv, "--certs") == "/certs", f"{service}: `ltm {' '.join(argv)}` runs without --certs /certs"
        assert "--insecure" not in argv
    assert actor_of(service, ltm_argv(svc)[0]) == service
    # certs-init writes this service's bundle into exactly that volume
    assert mounts(SERVICES["certs-init"])[f"/issue/{service}"] == (volume, False)
    for other in ACTORS:
        if other != service:
            assert volume not in {v for v, _ in mounts(SERVICES[other]).values()}, f"{other} mounts {service}'s key"


def test_only_certs_init_holds_the_ca_key():
    init = SERVICES["certs-init"]
    (argv,) = ltm_argv(init)
    out, key_dir = flag(argv, "--out"), flag(argv, "--ca-dir") or flag(argv, "--out").rstrip("/") + "-ca"
    init_mounts = mounts(init)
    for d in (out, key_dir):  # the CA key (--ca-dir) and the issued leaves (--out): no volume, deleted
        assert not any(d == m or d.startswith(m.rstrip("/") + "/") for m in init_mounts), f"{d} is on a volume"
        assert re.search(rf"rm -rf [^&;]*{re.escape(d)}( |$)", init["command"][0]), f"certs-init leaves {d} behind"
    assert flag(argv, "--bundles") == "/issue" and "--if-missing" in argv
    assert set(init_mounts) == {f"/issue/{a}" for a in ACTORS}
    assert all("certs-" not in v for v, _ in mounts(SERVICES["demo-data"]).values())


def test_each_party_alone_reads_its_data():
    for party in (n for n in SERVICES if n.startswith("party-")):
        argv = SERVICES[party]["command"]
        data = flag(argv, "--data")
        (dest, (volume, read_only)), = [(d, v) for d, v in mounts(SERVICES[party]).items() if data.startswith(d + "/")]
        assert read_only and volume == f"{party}-data"
        holders = {n for n, s in SERVICES.items() if volume in {v for v, _ in mounts(s).values()}}
        assert holders == {party, "demo-data"}, f"{volume} is mounted by {holders}"
    for name, svc in SERVICES.items():
        if name not in ("demo-data",) and not name.startswith("party-"):
            assert not any(v.endswith("-data") and v.startswith("party-") for v, _ in mounts(svc).values())


# ---------------------------------------------------------------------------- run it on loopback
class LoopbackTestbed:
    """Volumes as directories, container names as loopback endpoints, the commands as written."""

    def __init__(self, root: Path):
        self.root = root
        self.endpoints: dict[str, str] = {}   # "server-0:50051" → "127.0.0.1:<port>"
        self.health_ports: dict[str, str] = {}
        self.procs: list[subprocess.Popen] = []

    def volume(self, name: str) -> Path:
        d = self.root / "volumes" / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def rootfs(self, service: str) -> Path:
        """The service's container file system: a directory in which every mount point is a link
        to its volume's directory (shared with every other service mounting that volume)."""
        root = self.root / "rootfs" / service
        for dest, (vol, _) in mounts(SERVICES[service]).items():
            link = root / dest.lstrip("/")
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(self.volume(vol), target_is_directory=True)
        return root

    def health_port(self, service: str) -> str:
        """Each container has its own loopback: on one host, each service's health port gets its own."""
        if service not in self.health_ports:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.health_ports[service] = f"127.0.0.1:{sock.getsockname()[1]}"
        return self.health_ports[service]

    def local(self, service: str, argv: list[str], port_file: Path | None = None) -> list[str]:
        root = self.rootfs(service)
        out = []
        health = flag(SERVICES[service].get("command", []), "--health-listen")
        for i, word in enumerate(argv):
            if i and argv[i - 1] == "--listen":
                word = "127.0.0.1:0"
            elif health and word == health:
                word = self.health_port(service)
            elif word.startswith("/"):
                word = str(root) + word
            for name, ep in self.endpoints.items():
                word = word.replace(name, ep)
            out.append(interpolate(word))
        if port_file is not None:
            out += ["--port-file", str(port_file)]
        return out

    def start(self, service: str, argv: list[str], log: Path, port_file: Path | None = None) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "ltm.cli", *self.local(service, argv, port_file)],
                                    stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def serve(self, service: str) -> None:
        """Start a server or the analyst; wait for its port, then for its own health check to pass."""
        argv = SERVICES[service]["command"]
        port_file = self.root / "ports" / service
        port_file.parent.mkdir(exist_ok=True)
        proc = self.start(service, argv, self.root / "logs" / f"{service}.log", port_file)
        end = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < end, (self.root / "logs" / f"{service}.log").read_text()
            time.sleep(0.05)
        port = flag(argv, "--listen").rsplit(":", 1)[1]
        self.endpoints[f"{service}:{port}"] = f"127.0.0.1:{port_file.read_text().strip()}"
        health = SERVICES[service]["healthcheck"]["test"][2:]
        while True:
            r = subprocess.run([sys.executable, "-m", "ltm.cli", *self.local(service, health)],
                               capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                return
            assert time.monotonic() < end, r.stderr
            time.sleep(0.2)

    def stop(self) -> None:
        stop_processes(self.procs)


def issue_certificates(tb: LoopbackTestbed) -> None:
    """certs-init's `ltm certs` command, run as written (paths mapped to the volume directories)."""
    (argv,) = ltm_argv(SERVICES["certs-init"])
    r = subprocess.run([sys.executable, "-m", "ltm.cli", *tb.local("certs-init", argv)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def visible_files(tb: LoopbackTestbed, service: str) -> dict[str, list[str]]:
    return {dest: sorted(p.name for p in tb.volume(vol).rglob("*") if p.is_file())
            for dest, (vol, _) in mounts(SERVICES[service]).items()}


def test_certs_init_gives_each_actor_only_its_bundle(tmp_path):
    tb = LoopbackTestbed(tmp_path)
    issue_certificates(tb)
    for service in ACTORS:
        seen = visible_files(tb, service)
        assert seen["/certs"] == sorted(["ca.pem", f"{service}.pem", f"{service}.key"]), (service, seen)
        assert not any("ca.key" in names for names in seen.values()), f"{service} can read the CA key"
    # a second `up` keeps the certificates the running actors use
    before = (tb.volume("certs-server-0") / "ca.pem").read_bytes()
    issue_certificates(tb)
    assert (tb.volume("certs-server-0") / "ca.pem").read_bytes() == before


def run_on_loopback(tmp_path, services: dict[str, dict]) -> str:
    """Run the testbed's commands (``services``: the compose file, an overlay merged over it) as
    local processes; returns the operator's output (asserting every actor exited 0)."""
    tb = LoopbackTestbed(tmp_path)
    issue_certificates(tb)
    try:
        for service in sorted(n for n in services if n.startswith("server-")):
            tb.serve(service)
        tb.serve("analyst")
        (argv,) = ltm_argv(services["demo-data"])  # after the servers: their endpoints go into the job file
        r = subprocess.run([sys.executable, "-m", "ltm.cli", *tb.local("demo-data", [interpolate(w) for w in argv])],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        parties = {name: tb.start(name, [interpolate(w) for w in services[name]["command"]],
                                  tmp_path / "logs" / f"{name}.log")
                   for name in sorted(services) if name.startswith("party-")}
        operator = subprocess.run([sys.executable, "-m", "ltm.cli",
                                   *tb.local("operator", [interpolate(w) for w in services["operator"]["command"]])],
                                  capture_output=True, text=True, timeout=300)
        assert operator.returncode == 0, operator.stderr[-2000:]
        assert "done" in operator.stdout and "release sha256" in operator.stdout, operator.stdout
        for name, p in parties.items():
            assert p.wait(timeout=120) == 0, (tmp_path / "logs" / f"{name}.log").read_text()[-2000:]
        return operator.stdout
    finally:
        tb.stop()


def test_the_compose_commands_run_a_job_on_loopback(tmp_path):
    run_on_loopback(tmp_path, SERVICES)


def test_the_columns_overlay_asks_for_the_replicated_release_and_its_parties_accept_it():
    services = merged_services("columns")
    (write,) = ltm_argv(services["demo-data"])
    assert flag(write, "--partition") == "columns" and flag(write, "--colluding-servers") == "1"
    for name in (n for n in services if n.startswith("party-")):
        assert flag(services[name]["command"], "--min-colluding-servers") == "1", name


@pytest.mark.slow
def test_the_columns_overlay_releases_what_simulate_releases_on_loopback(tmp_path, capsys):
    """The columns overlay's commands, run as local processes: the replicated release over gRPC,
    the same bytes as `ltm simulate` with the same parameters (deploy/testbed.sh --columns runs it
    in containers against `ltm demo`)."""
    import json

    from ltm.cli.app import main

    out = run_on_loopback(tmp_path, merged_services("columns"))
    sha = re.search(r"release sha256 ([0-9a-f]{64})", out).group(1)
    assert main(["simulate", "--seed", "7", "--partition", "columns", "--colluding-servers", "1", "--parties", "4",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["release_sha256"] == sha


@pytest.mark.parametrize("release", ["auto", "sparse"])
def test_the_demo_job_file_is_the_demo_job(tmp_path, release):
    """`ltm operate --write-job` writes the very spec `ltm demo` runs (same digest), so the compose
    testbed can release the demo's bytes through `ltm job submit`."""
    from ltm.jobfile import job_file_doc, parse_job_file, render_job_file
    from ltm.randomness import Randomness
    from ltm.sim.localnet.demo import prepare_job
    from ltm.sim.runtime.simulate import SimulateConfig, load_table

    randomness = Randomness.seeded_insecure(7)
    cfg = SimulateConfig(parties=4, k=3, seed=7, model="ridge", sketch=release, m=8 if release == "dense" else None)
    train, _ = load_table(cfg, randomness)
    spec, _ = prepare_job(cfg, train, randomness, [f"server-{i}:50051" for i in range(3)], tmp_path,
                          per_party_dirs=True)
    again = parse_job_file(render_job_file(job_file_doc(spec, deadline_s=300.0))).spec
    assert again == spec and again.digest == spec.digest
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"party-{i}" for i in range(4)]

"""The compose testbed, checked without a Docker engine (none runs here or in CI).

What can be checked is checked: the file parses; every service is built from deploy/Dockerfile or
depends on one that is; start-up order is expressed with health/completion conditions; every
command a container runs is an `ltm` subcommand whose flags the real parser accepts; and the same
commands, with loopback addresses instead of container names, run a job end to end.
"""
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ltm.cli import build_parser
from sim.launcher import ProcessGroup
from transport.certs import write_certs

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def ltm_argv(service: dict) -> list[list[str]]:
    """Every `ltm …` argument vector a service runs (its command and its health check)."""
    out = []
    cmd = service.get("command")
    if service.get("entrypoint") == ["sh", "-c"]:
        for part in cmd[0].split("&&"):
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


def test_compose_structure():
    services = COMPOSE["services"]
    assert {"certs-init", "server-0", "server-1", "server-2", "analyst", "operator"} <= set(services)
    assert sum(name.startswith("party-") for name in services) >= 4
    for name, svc in services.items():
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (ROOT / "deploy" / "Dockerfile").exists()
    for name in ("server-0", "server-1", "server-2", "analyst"):
        assert "healthcheck" in services[name]
    assert services["server-0"]["depends_on"]["certs-init"]["condition"] == "service_completed_successfully"
    for s in ("server-0", "server-1", "server-2"):
        assert services["analyst"]["depends_on"][s]["condition"] == "service_healthy"
    assert services["operator"]["depends_on"]["analyst"]["condition"] == "service_healthy"


@pytest.mark.parametrize("service", sorted(COMPOSE["services"]))
def test_every_command_is_a_valid_ltm_invocation(service):
    argvs = ltm_argv(COMPOSE["services"][service])
    assert argvs, f"{service} runs no ltm command"
    for argv in argvs:
        args = build_parser(argv[0]).parse_args(argv)  # raises SystemExit on an unknown flag
        assert callable(args.func)


def test_dockerfile_copies_every_package():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    for package in ("ltm", "party", "server", "analyst", "sim", "transport", "experiments"):
        assert f"COPY {package} ./{package}" in text


def test_the_compose_commands_run_a_job_on_loopback(tmp_path):
    """Servers, analyst, parties and operator with the compose flags; addresses made local."""
    services = COMPOSE["services"]
    certs = tmp_path / "certs"
    write_certs(certs, ["server-0", "server-1", "server-2", "party-0", "party-1", "party-2", "party-3",
                        "analyst", "operator"])
    group = ProcessGroup(tmp_path, certs)

    def local(argv: list[str]) -> list[str]:
        out, skip = [], False
        for i, word in enumerate(argv):
            if skip:
                skip = False
                continue
            if word in ("--listen", "--data-dir", "--out"):
                skip = True  # replaced below
                continue
            out.append(str(certs) if i and argv[i - 1] == "--certs" else word)
        return out

    try:
        servers = []
        for i in range(3):
            argv = local(services[f"server-{i}"]["command"]) + ["--data-dir", str(tmp_path / f"s{i}")]
            servers.append(group.start_service("server", f"server-{i}", argv))
        analyst = group.start_service("analyst", "analyst", local(services["analyst"]["command"]) +
                                      ["--out", str(tmp_path / "out")])
        endpoints = {f"server-{i}:50051": s.endpoint for i, s in enumerate(servers)}
        pdata = tmp_path / "party-data"

        def place(argv):
            text = " ".join(argv)
            for name, ep in endpoints.items():
                text = text.replace(name, ep)
            return [w.replace("/party-data", str(pdata)).replace("analyst:50050", analyst.endpoint)
                    for w in text.split(" ")]

        parties = [group.start_task("party", name, place(local(services[name]["command"])) + ["--certs", str(certs)])
                   for name in sorted(services) if name.startswith("party-")]
        operator = subprocess.run([sys.executable, "-m", "ltm.cli", *place(local(services["operator"]["command"]))],
                                  capture_output=True, text=True, timeout=240)
        assert operator.returncode == 0, operator.stderr[-2000:]
        assert "released" in operator.stdout
        assert [p.proc.wait(timeout=60) for p in parties] == [0] * len(parties)
        for s in servers:  # the servers' health checks, pointed at their loopback ports
            argv = [w.replace("localhost:50051", s.endpoint) for w in local(services[s.actor]["healthcheck"]["test"][2:])]
            health = subprocess.run([sys.executable, "-m", "ltm.cli", *argv], capture_output=True, text=True, timeout=30)
            assert health.returncode == 0, health.stderr
    finally:
        group.stop_all()

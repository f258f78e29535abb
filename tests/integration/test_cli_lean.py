"""`ltm <command> --help` loads only that command's module and its role: no simulator, experiments
or other actor (docs/architecture.md §1), and `ltm --help` no command module at all.

The real command runs in a fresh interpreter, which then names every module it holds
(``sys.modules``); the test reads the loaded project modules from that list.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ltm.cli.app import COMMANDS

REPO = Path(__file__).resolve().parents[2]
#: The subpackages of the ``ltm`` namespace; any other ``ltm.*`` module is the core.
SUBPACKAGES = {"cli", "party", "server", "analyst", "sim", "datasets", "experiments", "transport"}


#: Runs the ``ltm`` command, then prints every module the interpreter holds, one per line.
PROBE = """
import sys
from ltm.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""


def loaded_modules(*argv: str) -> set[str]:
    """Every project module (dotted name) that ``ltm *argv`` imported, in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: ltm" in proc.stdout
    return {name for name in proc.stderr.splitlines() if name.split(".")[0] == "ltm"}


def packages(modules: set[str]) -> set[str]:
    """``ltm.server.core`` → ``ltm.server``; a core module (``ltm.jobspec``, ``ltm.dp.noise``) → ``ltm``."""
    return {"ltm." + m.split(".")[1] if m.count(".") and m.split(".")[1] in SUBPACKAGES else "ltm" for m in modules}


@pytest.mark.parametrize(
    "command, allowed",
    [
        ("server", {"ltm", "ltm.cli", "ltm.server", "ltm.transport"}),
        ("party", {"ltm", "ltm.cli", "ltm.party", "ltm.transport"}),
        ("analyst", {"ltm", "ltm.cli", "ltm.analyst", "ltm.transport"}),
        ("certs", {"ltm", "ltm.cli", "ltm.transport"}),
        ("job", {"ltm", "ltm.cli", "ltm.analyst", "ltm.transport"}),
        ("health", {"ltm", "ltm.cli", "ltm.transport"}),
    ],
)
def test_actor_command_loads_only_its_actor(command, allowed):
    loaded = loaded_modules(command, "--help")
    assert f"ltm.cli.{command}" in loaded  # the command's own module built its parser
    other_commands = {f"ltm.cli.{c}" for c in COMMANDS if c != command}
    assert not loaded & other_commands, f"`ltm {command} --help` loaded {sorted(loaded & other_commands)}"
    assert packages(loaded) <= allowed, f"`ltm {command} --help` loaded {sorted(packages(loaded) - allowed)}"


def test_top_level_help_loads_no_command():
    loaded = loaded_modules("--help")
    assert packages(loaded) <= {"ltm", "ltm.cli"}
    assert {m for m in loaded if m.startswith("ltm.cli.")} == {"ltm.cli.app"}, sorted(loaded)


#: What no `--help` of a tool command needs: the actors, the simulator, gRPC, numpy, the crypto and
#: accounting stacks (each costs a second or more of imports on a loaded machine).
HEAVY = ("sim", "party", "server", "analyst", "experiments", "grpc", "numpy", "scipy", "cryptography",
         "dp_accounting", "matplotlib")


@pytest.mark.parametrize("argv", [("bench", "--help"), ("bench", "e2e", "--help"), ("bench", "sketch", "--help")])
def test_bench_help_imports_nothing_heavy(argv):
    # a count of what is imported, not a time: robust under load
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "usage: ltm bench" in proc.stdout, proc.stderr[-2000:]
    heavy = sorted({m.split(".")[0] for m in proc.stderr.splitlines()} & set(HEAVY))
    assert not heavy, f"`ltm {' '.join(argv)}` imported {heavy}"

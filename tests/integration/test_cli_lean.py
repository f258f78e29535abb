"""`ltm <actor> --help` loads only that actor: no simulator, experiments or other actor (docs/architecture.md §1).

The real command runs in a subprocess under ``python -X importtime``, whose stderr names every
module the interpreter imported; the test reads the loaded top-level packages from it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = {"ltm", "party", "server", "analyst", "sim", "ltm_datasets", "experiments", "transport"}


def loaded_packages(*argv: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ltm.cli", *argv],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage: ltm" in proc.stdout
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize(
    "command, allowed",
    [
        ("server", {"ltm", "server", "transport"}),
        ("party", {"ltm", "party", "transport"}),
        ("analyst", {"ltm", "analyst", "transport"}),
        ("certs", {"ltm", "transport"}),
        ("job", {"ltm", "analyst", "transport"}),
    ],
)
def test_actor_command_loads_only_its_actor(command, allowed):
    loaded = loaded_packages(command, "--help") & PROJECT_PACKAGES
    assert command in loaded or command in ("certs", "job")
    assert loaded <= allowed, f"`ltm {command} --help` loaded {sorted(loaded - allowed)}"


def test_top_level_help_loads_no_actor():
    loaded = loaded_packages("--help") & PROJECT_PACKAGES
    assert loaded == {"ltm"}

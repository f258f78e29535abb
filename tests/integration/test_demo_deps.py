"""`pip install -e .` is enough for the demo (README): with every dev-only package unimportable (and
scipy unimportable from the project's own modules: only dp-accounting, a core dependency, uses it),
`ltm demo --help` builds its parser and `ltm simulate` — the cores the demo runs, its baselines and
its summary — runs to the end.  The full networked demo in such an environment is checked by hand
in a fresh venv (the report of issue #35); this test keeps the import closure honest in CI.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LEAN = REPO / "tests" / "helpers" / "lean_site"


def _lean(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LEAN), str(REPO)])}
    return subprocess.run([sys.executable, "-m", "ltm.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_blocker_blocks():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LEAN), str(REPO)])}
    r = subprocess.run([sys.executable, "-c", "import matplotlib"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "dev-only" in r.stderr
    r = subprocess.run([sys.executable, "-c", "import ltm.sim.tools.audit as a; a.clopper_pearson_upper([1], 2, 0.1)"],
                       env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "ltm audit needs scipy" in r.stderr  # its ImportError, caught


def test_the_demo_path_needs_no_dev_package():
    r = _lean("demo", "--help")
    assert r.returncode == 0 and "usage: ltm demo" in r.stdout, r.stderr[-3000:]
    r = _lean("simulate", "--n", "3000", "--seed", "7", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["baselines"]["nonprivate"]["r2"] > 0 and "central" in report["baselines"]

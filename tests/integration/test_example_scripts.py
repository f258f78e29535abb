"""The runnable examples under examples/ run as a user runs them (issue 33 item 3): a fresh process,
from the repository root, and print what their docstring promises."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fit_from_release_runs_and_refits_without_touching_the_release(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "fit_from_release.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "gram release of n = 80000 rows, ε = 1" in out and "refit λ = 1000" in out
    assert "the release is unchanged" in out
    r2 = float(re.search(r"held-out R² ([-0-9.]+)", out).group(1))
    assert 0.3 < r2 <= 1.0  # the private model predicts the held-out rows
    job = tmp_path / "power-ridge-example"
    assert {p.name for p in job.iterdir()} == {"release.json", "privacy_report.json", "model.json", "report.json",
                                               "figure.png"}
    # the same script on the directory it made: a real result directory is opened the same way
    again = subprocess.run([sys.executable, str(ROOT / "examples" / "fit_from_release.py"), str(job)],
                           capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert out.splitlines()[1:8] == again.stdout.splitlines()[1:8]  # the same fit, coefficients and error bars

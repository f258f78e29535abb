"""``ltm bench flp`` runs end to end on a few clients and reports what it promises (no timing asserts)."""
from __future__ import annotations

import json
import subprocess
import sys

from ltm.sim.tools.bench_flp import FlpBenchConfig, bench_flp


def test_bench_reports_costs_and_bytes():
    out = bench_flp(FlpBenchConfig(n=300, chunk=128, k=3))
    assert out["clients"] == 300 and out["servers"] == 3
    assert out["bytes_per_client"]["leader"] == 8 * (out["circuit"]["bits_per_client"] + out["circuit"]["proof_len"])
    assert set(out["cpu_us_per_client"]) == {"prove", "share", "leader_query", "helper_query", "decide"}
    assert out["circuit"]["log2_soundness_error_per_client"] < -100


def test_cli_prints_json():
    run = subprocess.run([sys.executable, "-m", "ltm.cli", "bench", "flp", "--n", "50", "--chunk", "32"],
                         capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(run.stdout)["benchmark"] == "flp"

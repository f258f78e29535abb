"""The demo explains itself: labelled figures, a verdict, requested vs achieved δ, bytes per server,
and a non-private baseline that does not change from run to run."""
from __future__ import annotations

import copy
import json

import numpy as np

from ltm.randomness import Randomness
from ltm.sim.localnet.demo import print_summary
from ltm.sim.runtime.simulate import SimulateConfig, load_table

REPORT = {
    "command": "demo", "tls": True, "data": "a table", "n_train": 800, "n_test": 200, "partition": "rows",
    "processes": [{"role": "server", "id": "server-0", "pid": 1}, {"role": "analyst", "id": "analyst", "pid": 2}],
    "sketch": {"kind": "sparse", "m": 28, "s": 1}, "participants": 800, "randomness": "csprng",
    "release_sha256": "ab" * 32, "analyst_model": {"model": "ridge"},
    "privacy": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "achieved_delta": 5.8e-7,
                "min_honest_load": 27, "promised_min_honest_load": 25, "sigma_client": 0.5, "sigma_release": 2.5,
                "guarantee": "(1, 5.8e-07)-DP per client"},
    "metrics": {"r2": 0.3, "mse": 40.0, "phi": 1.2},
    "baselines": {"nonprivate": {"r2": 0.5, "mse": 30.0, "phi": 1.0},
                  "central": {"r2": 0.4, "mse": 33.0, "phi": 1.0, "method": "SSP"},
                  "local": {"r2": 0.1, "mse": 60.0, "phi": 1.8}},
    "bytes": {"party_to_server": [2_240_064, 1_120_096, 1_120_096], "party_to_server_total": 4_480_256,
              "server_to_analyst": [1568, 1568, 1568], "retries": 0},
    "timing_s": {"total": 3.0},
}


def test_summary_labels_every_figure_and_gives_a_verdict(capsys):
    print_summary(copy.deepcopy(REPORT))
    out = capsys.readouterr().out
    for needle in ("nonprivate     OLS fitted on the exact training rows, no noise",
                   "central        a trusted curator adds DP noise once",
                   "local          each client adds enough noise to be DP on its own",
                   "φ = the ridge objective", "R² on the held-out rows",
                   "δ requested 1e-06, achieved 5.8e-07",
                   "verdict: the private model reaches 75% of the central model's R² (0.3 vs 0.4)",
                   "more clients", "a larger ε (now 1)", "letting the planner choose the release kind (--release auto",
                   "parties → servers: server-0 2.24 MB, server-1 1.12 MB, server-2 1.12 MB",
                   "servers → analyst: server-0 1.6 kB",
                   "the non-private row does not (the held-out rows are a fixed public split)"):
        assert needle in out, (needle, out)


def test_summary_tolerates_new_baselines_and_missing_metrics(capsys):
    report = copy.deepcopy(REPORT)
    report["baselines"]["adassp"] = {"r2": 0.35, "lambda": 2.5}  # a baseline this code does not know
    report["baselines"]["central"] = {"r2": -0.2}
    report["release"] = {"kind": "gram"}
    print_summary(report)
    out = capsys.readouterr().out
    assert "adassp" in out and "[λ = 2.5]" in out and "—" in out
    assert "no fraction is meaningful" in out


def test_seeded_summary_says_it_repeats(capsys):
    report = copy.deepcopy(REPORT)
    report["randomness"] = "seeded (NOT private)"
    print_summary(report)
    assert "seeded mode — every number repeats exactly" in capsys.readouterr().out


def test_the_held_out_split_is_the_same_in_every_run(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    path = tmp_path / "t.csv"
    path.write_text("a,b,y\n" + "\n".join(f"{a},{b},{a + b}" for a, b in x.tolist()) + "\n")
    cfg = SimulateConfig(data=str(path), label="y")
    first = load_table(cfg, Randomness.system())
    second = load_table(cfg, Randomness.system())
    for a, b in zip(first, second):
        assert json.dumps({k: v.tolist() for k, v in a.columns.items()}) == \
            json.dumps({k: v.tolist() for k, v in b.columns.items()})

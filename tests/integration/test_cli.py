"""The `ltm` command end to end: simulate, bench, demo (real processes), and their JSON."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from ltm.cli.app import main

REQUIRED_PRIVACY = {"epsilon", "delta", "calibration", "clip_norm", "sensitivity_l2", "sigma_client",
                    "sigma_release", "min_honest_load", "t_prime"}


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_json_has_every_documented_key(capsys):
    r = run_json(capsys, ["simulate", "--synthetic", "ridge", "--n", "20000", "--d", "5", "--seed", "1", "--json"])
    for key in ("model", "coef", "metrics", "baselines", "privacy", "sketch", "release_sha256", "timing_s"):
        assert key in r
    assert {"r2", "mse", "phi"} <= set(r["metrics"])
    for name in ("nonprivate", "central", "local"):
        assert {"r2", "mse", "phi"} <= set(r["baselines"][name])
    assert REQUIRED_PRIVACY <= set(r["privacy"])
    assert {"kind", "m", "s"} <= set(r["sketch"])
    assert "NOT private" in r["randomness"]  # seeded mode says so
    assert len(r["coef"]) == 5


def test_simulate_is_reproducible_under_a_seed_and_not_without(capsys):
    argv = ["simulate", "--synthetic", "ridge", "--n", "5000", "--d", "3", "--json"]
    a = run_json(capsys, argv + ["--seed", "3"])
    b = run_json(capsys, argv + ["--seed", "3"])
    c = run_json(capsys, argv)
    assert a["release_sha256"] == b["release_sha256"]
    assert c["release_sha256"] != a["release_sha256"]
    assert c["randomness"].startswith("csprng")


def test_simulate_lowrank_reports_psi(capsys):
    r = run_json(capsys, ["simulate", "--synthetic", "lowrank", "--n", "20000", "--d", "8", "--rank", "2",
                          "--seed", "2", "--json"])
    assert r["model"] == "lowrank"
    assert {"psi"} == set(r["metrics"])
    assert r["metrics"]["psi"] >= r["baselines"]["nonprivate"]["psi"] - 1e-12


def test_simulate_rejects_bad_input_with_a_message(capsys, tmp_path):
    assert main(["simulate", "--data", str(tmp_path / "missing.csv"), "--label", "y"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["simulate", "--synthetic", "ridge", "--n", "2000", "--epsilon", "-1"]) == 2
    assert "epsilon" in capsys.readouterr().err


def test_bench_sketch_prints_json(capsys):
    r = run_json(capsys, ["bench", "sketch", "--n", "20000", "--d", "4", "--m", "10", "--s", "2", "--k", "3",
                          "--runs", "2", "--json"])
    assert r["median_s"] > 0 and r["bytes_received"] > 0
    assert len(r["per_server"]) == 3


def _demo(*args):
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "demo", "--json", *args], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), time.monotonic() - t


def test_demo_runs_real_processes_with_tls():
    r, seconds = _demo()
    pids = [p["pid"] for p in r["processes"]]
    assert len(set(pids)) == len(pids)
    assert sum(p["role"] == "server" for p in r["processes"]) >= 3
    assert sum(p["role"] == "party" for p in r["processes"]) >= 4
    assert r["tls"] is True
    assert {"r2", "mse", "phi"} <= set(r["metrics"])
    assert r["participants"] == r["n_train"]
    assert seconds < 120


def test_demo_and_simulate_release_the_same_bytes_under_a_seed(capsys):
    r, _ = _demo("--seed", "7")
    # the demo's parties upload per client (a real job's auto mode would aggregate: `--upload-mode`)
    s = run_json(capsys, ["simulate", "--seed", "7", "--upload-mode", "per-client", "--json"])
    assert s["upload_mode"] == "per-client"
    assert r["release_sha256"] == s["release_sha256"]
    assert r["metrics"] == s["metrics"]


def test_demo_columns_runs_the_replicated_release_as_simulate_does(capsys):
    """`ltm demo --partition columns --colluding-servers 1`: the replicated degree-2 release with real
    server, analyst and party processes over TLS, the same bytes and model as in process (#21)."""
    args = ["--partition", "columns", "--colluding-servers", "1", "--parties", "3", "--seed", "7"]
    r, _ = _demo(*args)
    s = run_json(capsys, ["simulate", *args, "--json"])
    assert r["release_kind"] == "gram" and r["privacy"]["release"].startswith("replicated")
    assert r["privacy"]["colluding_servers"] == 1 and "1 of 3 servers" in r["plan"]["reason"]
    assert r["release_sha256"] == s["release_sha256"]
    assert r["metrics"] == s["metrics"]


@pytest.mark.slow
def test_demo_columns_with_verified_clipping_releases_what_simulate_does(capsys):
    """`ltm demo --partition columns --colluding-servers 1 --verified-clipping`: real server, analyst
    and party processes over TLS run the clipping checks (issue #30) and release the in-process bytes."""
    args = ["--partition", "columns", "--colluding-servers", "1", "--parties", "3", "--seed", "7",
            "--verified-clipping"]
    r, _ = _demo(*args)
    s = run_json(capsys, ["simulate", *args, "--json"])
    assert r["privacy"]["verified_clipping"] and r["privacy"]["corrupt_parties"] == 1
    assert r["release_sha256"] == s["release_sha256"]
    assert r["metrics"] == s["metrics"]


@pytest.mark.slow
def test_bench_e2e_states_the_cost_of_verified_clipping():
    """`ltm bench e2e --partition columns --colluding-servers 1`: the unverified and the verified
    replicated job in one session, and what the proof cost (issue #30)."""
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "bench", "e2e", "--partition", "columns",
                          "--colluding-servers", "1", "--n", "5000", "--parties", "3", "--json", "--no-progress"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    plain, verified = r["runs"]
    assert (plain["verified_clipping"], verified["verified_clipping"]) == (False, True)
    assert plain["kind"] == verified["kind"] == "gram" and plain["participants"] == verified["participants"] == 5000
    cost = r["proof_cost"][0]
    assert cost["bytes_per_party"]["unverified"] == plain["bytes_per_party"]
    assert all(v > u for u, v in zip(plain["bytes_per_party"], verified["bytes_per_party"]))
    assert cost["party_cpu_s"]["verified"] > 0 and cost["server_cpu_s"]["verified"] > 0
    assert verified["analyst_phases_s"]["verify_clipping"] > 0


def test_bench_e2e_smoke():
    """A small networked benchmark runs and reports phases, wire bytes and peak RSS (no timing asserts)."""
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "bench", "e2e", "--n", "20000", "--parties", "3",
                          "--max-running-parties", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["participants"] == 20000
    assert all(w["received"] > 0 and w["sent"] > 0 for w in r["wire_bytes_per_server"])
    assert all(v and v > 0 for v in r["peak_rss_bytes"].values())
    # parties generated their rows (no table in the bench) and report their own memory and CPU
    assert set(r["peak_rss_bytes"]) == {"server-0", "server-1", "server-2", "analyst", "party-0", "party-1", "party-2"}
    parties = [r["peak_rss_bytes"][f"party-{i}"] for i in range(3)]
    assert r["peak_rss_max_bytes"]["party"] == max(parties) and r["max_running_parties"] == 2
    assert r["peak_rss_by_kind"]["party"] == {"max": max(parties), "min": min(parties),
                                              "mean": round(sum(parties) / 3), "processes": 3}
    assert r["peak_rss_by_kind"]["server"]["processes"] == 3 and r["peak_rss_max_bytes"]["harness"] > 0
    assert all(v > 0 for v in r["cpu_s_upload_phase"].values())
    # every server stored at least its seed shares; the primary-share holders far more
    assert all(b > 0 for b in r["disk_bytes_per_server"].values())
    assert r["upload_throughput_bytes_per_s"] == pytest.approx(
        sum(w["received"] for w in r["wire_bytes_per_server"]) / r["upload_phase_s"])
    assert np.isfinite(r["fit"]["test_r2"]) and np.isfinite(r["fit"]["coef_rel_error"]) and r["bottleneck"]["verdict"]
    assert "synthetic ridge, generated by each party" in r["data"]


@pytest.mark.slow
def test_bench_e2e_runs_the_replicated_release():
    """`ltm bench e2e --partition columns --colluding-servers 1`: the replicated release with real
    processes (its parties accept the trust assumption), fitted close to the generating model."""
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "bench", "e2e", "--n", "20000", "--partition", "columns",
                          "--colluding-servers", "1", "--json", "--no-progress"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["replicated"] and r["partition"] == "columns" and r["colluding_servers"] == 1 and r["kind"] == "gram"
    assert r["participants"] == 20000 and r["fit"]["test_r2"] > 0.9
    # each party's explicit share reaches two servers (n·d_j·8 bytes each), seeds the third
    assert sum(r["bytes_party_to_server"]) >= 2 * 20000 * r["client_vector_width"] * 8


def test_bench_party_feeder_bounds_the_running_parties(tmp_path):
    """At most ``limit`` party processes run at once, and every queued one is started."""
    import time

    from ltm.sim.localnet.launcher import ActorProcess
    from ltm.sim.tools.bench_e2e import PartyFeeder

    running_max = []

    def start_one(actor, argv):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
        ap = ActorProcess("party", actor, proc, tmp_path / f"{actor}.log")
        running_max.append(sum(1 for x in feeder.started if x.proc.poll() is None) + 1)
        return ap

    feeder = PartyFeeder(start_one, [], 2)
    for i in range(5):
        feeder.add(f"party-{i}", [])
    feeder.start()
    end = time.monotonic() + 30
    while len(feeder.started) < 5 and time.monotonic() < end:
        time.sleep(0.05)
    assert feeder.stop() == [] and [ap.actor for ap in feeder.started] == [f"party-{i}" for i in range(5)]
    for ap in feeder.started:
        ap.proc.wait(timeout=10)
    assert max(running_max) == 2


def test_bench_e2e_counts_series_and_plot(tmp_path):
    import argparse

    from ltm.sim.tools.bench_e2e import default_parties, parse_count, parse_counts, plot_series

    assert [parse_count(t) for t in ("1000000", "1e6", "1_000_000", "2.5e7")] == [10**6, 10**6, 10**6, 25 * 10**6]
    assert parse_counts("1e6, 1e7,1e8") == [10**6, 10**7, 10**8]
    for bad in ("1.5", "0", "-3", "abc", "inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_count(bad)
    assert [default_parties(n) for n in (20_000, 10**6, 10**7, 10**8, 10**10)] == [4, 4, 4, 16, 64]
    runs = [{"n": n, "d": 10, "m": 100, "s": 1, "k": 3, "wall_s": w, "upload_phase_s": w / 2,
             "peak_rss_bytes": {"server-0": 1e8, "analyst": 9e7},
             "peak_rss_max_bytes": {"server": 1e8 * i, "analyst": 9e7, "party": 3e8}}
            for i, (n, w) in enumerate([(10**6, 8.0), (10**7, 40.0)], 1)]
    plot_series(runs, tmp_path / "scaling.png")
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_paper_grid_cells_are_the_papers():
    from ltm.sim.tools.bench import MP_SPDZ

    assert len(MP_SPDZ) == 16
    for (table, n, s, k), (t, c) in MP_SPDZ.items():
        # the paper's traffic formula C_MPC = k·(s·n·d + m·d)·8 B reproduces every transcribed entry
        assert abs(k * (s * n * 10 + 100 * 10) * 8 / 1e6 - c) < 1e-9

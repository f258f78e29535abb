"""A real job from a job file: servers, analyst, operator and parties as separate processes.

Only the parties are given data paths, each its own file; the operator's job file holds public
information only (ranges from the dataset's documentation).  When run as root with ``ip netns``,
every actor runs in its own network namespace on its own address (ltm/sim/localnet/netns.py); otherwise all
run on loopback (also with ``LTM_TEST_NETNS=0``).  Everything started here is stopped here, and every namespace removed.

Covers (issue 9): the whole job from a job file, releasing and fitting; two jobs one after the
other and two at the same time on the same servers (low rank + the Laplace mechanism, and the
columns partition); an analyst killed mid-job and restarted releasing the same bytes.  The seeded
parties make the releases reproducible, so each is checked bit for bit against the in-process
transport on the same files.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from ltm.datasets.tables import read_csv
from ltm.jobfile import parse_job_file, render_job_file
from ltm.party.data_source import load_columns
from ltm.randomness import Randomness
from ltm.sim.localnet.demo import write_party_csv
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.sim.localnet.netns import NetnsLab, netns_available
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.transport.certs import write_certs
from tests.helpers.party_runs import log_messages

K = 3
SEED = 7
PARTIES = ["party-0", "party-1"]
ROWS_PER_PARTY = 1500
#: Public ranges, from the UCI household power dataset's documentation (units, meter limits).
RANGES = {"Global_active_power": [0.0, 8.0], "Global_reactive_power": [0.0, 1.0], "Voltage": [200.0, 260.0],
          "Global_intensity": [0.0, 35.0], "Sub_metering_1": [0.0, 40.0], "Sub_metering_2": [0.0, 40.0],
          "Sub_metering_3": [0.0, 30.0]}
LABEL = "Sub_metering_3"


def _data() -> dict[str, np.ndarray]:
    text = resources.files("ltm.datasets").joinpath("data", "household_power_sample100k_part1of2.csv").read_text()
    lines = text.splitlines()[: len(PARTIES) * ROWS_PER_PARTY + 1]
    return read_csv("\n".join(lines) + "\n", source="bundled", label=LABEL).columns


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    work = tmp_path_factory.mktemp("realjob")
    certs = work / "certs"
    servers = [f"server-{i}" for i in range(K)]
    write_certs(certs, servers + PARTIES + ["analyst", "operator"])
    data = _data()
    files: dict[str, Path] = {}
    for i, pid in enumerate(PARTIES):  # each party's own file, in its own directory: the data owners' side
        d = work / "data" / pid
        d.mkdir(parents=True)
        rows = {c: v[i * ROWS_PER_PARTY:(i + 1) * ROWS_PER_PARTY] for c, v in data.items()}
        write_party_csv(d / "rows.csv", rows)
        cols = [c for c in data if c != LABEL][: 3] if i == 0 else [c for c in data if c != LABEL][3:] + [LABEL]
        write_party_csv(d / "columns.csv", {c: data[c][:ROWS_PER_PARTY] for c in cols})
        files[pid] = d
    use_netns = netns_available() and os.environ.get("LTM_TEST_NETNS", "1") != "0"  # LTM_TEST_NETNS=0: loopback
    lab = NetnsLab(servers + ["analyst", "operator"] + PARTIES) if use_netns else None
    if lab is not None:
        lab.up()
    group = ProcessGroup(work, certs, netns=lab)
    try:
        started = group.start_servers(K)
        analyst = group.start_service("analyst", "analyst", ["analyst", "--out", str(work / "analyst-out")])
        yield {"work": work, "group": group, "servers": started, "analyst": analyst, "files": files, "lab": lab,
               "certs": certs}
    finally:
        group.stop_all()
        if lab is not None:
            lab.down()


def job_doc(dep, job_id: str, *, partition: str = "rows", model: str = "ridge", mechanism: str = "gaussian",
            m: int = 12) -> dict:
    """A job file document from public information only."""
    privacy = {"epsilon": 2.0, "delta": 1e-6, "mechanism": mechanism}
    if mechanism == "laplace":
        privacy["delta"] = 0.0
    if partition == "rows":
        privacy["corrupt_parties"] = 1
        parties = [{"id": p, "clients": ROWS_PER_PARTY} for p in PARTIES]
    else:
        names = [c for c in RANGES if c != LABEL]
        parties = [{"id": PARTIES[0], "columns": names[:3]}, {"id": PARTIES[1], "columns": names[3:] + [LABEL]}]
    columns = [{"name": c, "range": r, **({"role": "label"} if c == LABEL else {})} for c, r in RANGES.items()]
    # a reproduction job: the parties draw seeded randomness so that each release is checked bit for
    # bit against the in-process runtime (servers refuse seeded batches for any other job)
    return {"job": {"id": job_id, "partition": partition, "deadline_s": 120.0, "reproduction": True,
                    **({"rows": ROWS_PER_PARTY} if partition == "columns" else {})},
            "release": {"kind": "sparse", "m": m}, "privacy": privacy, "fit": {"model": model},
            "servers": [{"id": s.actor, "endpoint": s.endpoint} for s in dep["servers"]],
            "parties": parties, "columns": columns}


def write_job(dep, doc: dict) -> Path:
    path = dep["work"] / "jobs" / f"{doc['job']['id']}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(render_job_file(doc, header="written by the operator from public information only"))
    return path


def operator(dep, *argv: str, timeout: float = 120) -> str:
    """Run an ``ltm job …`` command as the operator (in its own namespace under netns); its output."""
    group = dep["group"]
    ap = group.start_task("operator", "operator", ["job", *argv])
    try:
        code = ap.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        group.stop(ap)
        raise
    out = ap.log_path.read_text(errors="replace")
    ap.log_path.unlink()  # one log per command
    assert code == 0, f"ltm job {' '.join(argv)} exited {code}:\n{out}"
    return out


def check(path: Path) -> subprocess.CompletedProcess:
    """``ltm job check`` (no network, no certificates)."""
    return subprocess.run([sys.executable, "-m", "ltm.cli", "job", "check", str(path)], capture_output=True,
                          text=True, timeout=120)


def start_parties(dep, job_id: str, file: str, parties=PARTIES):
    servers = dep["servers"]
    out = []
    for pid in parties:
        data = dep["files"][pid] / file
        argv = ["party", "--id", pid, "--job", job_id, "--data", str(data),
                "--servers", ",".join(s.endpoint for s in servers), "--server-ids", ",".join(s.actor for s in servers),
                "--max-epsilon", "2", "--seed", str(SEED), "--no-progress", "--wait", "60",
                # every job of this module is charged to the party's one ledger on the (test) host
                "--budget-epsilon", "100",
                "--state-dir", str(dep["files"][pid] / f".state-{job_id}")]
        out.append(dep["group"].start_task("party", f"{pid}-{job_id}", argv, site=pid))
    return out


def finish_parties(procs, timeout: float = 120) -> None:
    for ap in procs:
        code = ap.proc.wait(timeout=timeout)
        assert code == 0, f"{ap.actor} exited {code}:\n{log_messages(ap.log_path.read_text())}"


def wait_done(dep, job_id: str, timeout: float = 120) -> dict:
    end = time.monotonic() + timeout
    while True:
        st = json.loads(operator(dep, "status", job_id, "--analyst", dep["analyst"].endpoint, "--json"))
        if st["state"] in ("done", "failed") or time.monotonic() > end:
            assert st["state"] == "done", st
            return st
        time.sleep(0.5)


def reference_sha(dep, path: Path, file: str) -> str:
    """The release the in-process runtime makes from the same job file and party files."""
    spec = parse_job_file(path.read_text()).spec
    tables = {pid: load_columns(dep["files"][pid] / file)[0] for pid in PARTIES}
    return run_inprocess(spec, tables, Randomness.seeded_insecure(SEED)).release.sha256


def result(dep, job_id: str) -> dict[str, dict]:
    out = dep["work"] / "results" / job_id  # `ltm job result` writes each job's files under --out/<job id>/
    operator(dep, "result", job_id, "--analyst", dep["analyst"].endpoint, "--out", str(out.parent))
    return {name: json.loads((out / name).read_text()) for name in ("report.json", "model.json", "release.json",
                                                                   "privacy_report.json")}


def test_a_job_from_a_job_file_releases_and_fits(dep):
    path = write_job(dep, job_doc(dep, "ridge-1"))
    checked = check(path)
    assert checked.returncode == 0 and "OK" in checked.stdout and "ridge-1" in checked.stdout, checked.stderr
    submitted = operator(dep, "submit", str(path), "--analyst", dep["analyst"].endpoint)
    assert "ridge-1" in submitted and "running" in submitted
    finish_parties(start_parties(dep, "ridge-1", "rows.csv"))
    st = wait_done(dep, "ridge-1")
    res = result(dep, "ridge-1")
    assert res["report.json"]["participants"] == len(PARTIES) * ROWS_PER_PARTY
    privacy = res["privacy_report.json"]
    assert privacy["calibration_verified"]  # the noise buys (ε, δ) ... but it was drawn from a seed:
    assert not privacy["dp_verified"] and privacy["seeded_parties"] == sorted(PARTIES)
    assert set(res["model.json"]["coef"]) == {c for c in RANGES if c != LABEL}
    assert st["release_sha256"] == res["report.json"]["release_sha256"] == reference_sha(dep, path, "rows.csv")
    # Nobody but a party was given a data path, and each party only its own file.
    data_root = str(dep["work"] / "data")
    for ap in dep["group"].processes:
        paths = [a for a in ap.argv if data_root in a]
        if ap.role == "party":
            assert paths and all(str(dep["files"][ap.site]) in a for a in paths), (ap.actor, paths)
        else:
            assert not paths, (ap.actor, ap.argv)
    if dep["lab"] is not None:  # every actor on its own address
        hosts = {ap.host for ap in dep["group"].processes}
        assert "127.0.0.1" not in hosts and len(hosts) == K + 2 + len(PARTIES)


def test_two_jobs_at_the_same_time_on_the_same_servers(dep):
    """Low rank with the Laplace mechanism (rows) and OLS in the columns partition, concurrently."""
    lowrank = write_job(dep, job_doc(dep, "lowrank-laplace", model="lowrank", mechanism="laplace"))
    columns = write_job(dep, job_doc(dep, "columns-ols", partition="columns", model="ols"))
    for path in (lowrank, columns):
        operator(dep, "submit", str(path), "--analyst", dep["analyst"].endpoint)
    procs = start_parties(dep, "lowrank-laplace", "rows.csv") + start_parties(dep, "columns-ols", "columns.csv")
    finish_parties(procs)
    a, b = wait_done(dep, "lowrank-laplace"), wait_done(dep, "columns-ols")
    assert a["release_sha256"] == reference_sha(dep, lowrank, "rows.csv")
    assert b["release_sha256"] == reference_sha(dep, columns, "columns.csv")
    ra, rb = result(dep, "lowrank-laplace"), result(dep, "columns-ols")
    assert ra["model.json"]["model"] == "lowrank" and ra["privacy_report.json"]["mechanism"] == "laplace"
    assert rb["model.json"]["model"] == "ols" and rb["report.json"]["participants"] == ROWS_PER_PARTY


def test_an_analyst_killed_mid_job_resumes_with_the_same_release(dep):
    path = write_job(dep, job_doc(dep, "resume-1"))
    group, analyst = dep["group"], dep["analyst"]
    operator(dep, "submit", str(path), "--analyst", analyst.endpoint)
    finish_parties(start_parties(dep, "resume-1", "rows.csv", parties=PARTIES[:1]))
    # The job waits for the other party: the analyst dies here (SIGKILL, no cleanup) ...
    st = json.loads(operator(dep, "status", "resume-1", "--analyst", analyst.endpoint, "--json"))
    assert st["state"] == "running" and st["phase"] == "waiting", st
    group.kill(analyst)
    # ... the other party uploads while no analyst runs, and the analyst comes back on its port.
    finish_parties(start_parties(dep, "resume-1", "rows.csv", parties=PARTIES[1:]))
    group.restart(analyst)
    st = wait_done(dep, "resume-1")
    assert st["release_sha256"] == reference_sha(dep, path, "rows.csv")
    assert "resuming job" in analyst.log_tail(200)


def test_a_bad_job_file_gets_one_line_per_problem(dep):
    doc = job_doc(dep, "bad")
    doc["privacy"]["epsilom"] = 1.0
    doc["columns"][0]["range"] = [5.0, 1.0]
    checked = check(write_job(dep, doc))
    assert checked.returncode == 2
    out = checked.stderr
    assert "unknown key 'epsilom' (did you mean 'epsilon'?)" in out
    assert "range [lo, hi] needs finite lo < hi" in out


def test_the_bounds_prejob_over_networked_actors(dep):
    """A draft with no column transforms: `ltm job bounds` runs two histogram pre-jobs over the same
    parties and servers, writes the main job (recording both pre-jobs), which then releases and fits."""
    doc = job_doc(dep, "bounded")
    for c in doc["columns"]:
        del c["range"]
    draft, main_path = write_job(dep, doc), dep["work"] / "jobs" / "bounded-main.toml"
    group = dep["group"]
    bounds = group.start_task("operator", "operator-bounds", ["job", "bounds", str(draft), "--analyst",
                                                               dep["analyst"].endpoint, "--epsilon", "2",
                                                               "--out", str(main_path), "--json"], site="operator")
    try:
        finish_parties(start_parties(dep, "bounded-bounds-1", "rows.csv"))
        finish_parties(start_parties(dep, "bounded-bounds-2", "rows.csv"))
        assert bounds.proc.wait(timeout=120) == 0, bounds.log_path.read_text()
    finally:
        group.stop(bounds)
    info = json.loads(bounds.log_path.read_text())
    main = parse_job_file(main_path.read_text())
    assert [(p.job_id, p.digest) for p in main.spec.prejobs] == [(x["job_id"], x["digest"]) for x in info["prejobs"]]
    assert sum(p.epsilon for p in main.spec.prejobs) == 2.0
    data = _data()
    for c in main.spec.columns:  # the DP estimates are near the columns' means and standard deviations
        v = data[c.name]
        chosen = info["chosen"][c.name]
        assert abs(chosen["center"] - v.mean()) < 0.5 * v.std() + 1e-9, (c.name, chosen, v.mean(), v.std())
        assert 0 < chosen["spread"] < 3 * v.std(), (c.name, chosen, v.std())
        # at least half a robust spread (half the 16-84 % range): with 3000 clients the rare large values of
        # a mostly-zero column fall in bins under the noise floor, so its spread is robust, not its std
        # (see docs/bounds.md)
        assert chosen["spread"] >= 0.25 * (np.quantile(v, 0.84) - np.quantile(v, 0.16)), (c.name, chosen)
    operator(dep, "submit", str(main_path), "--analyst", dep["analyst"].endpoint)
    finish_parties(start_parties(dep, "bounded", "rows.csv"))
    st = wait_done(dep, "bounded")
    assert st["release_sha256"] == reference_sha(dep, main_path, "rows.csv")
    res = result(dep, "bounded")
    assert res["report.json"]["prejobs"] == info["prejobs"] and "coef" in res["model.json"]

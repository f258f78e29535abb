"""The ledger through the real `ltm party` path: one ledger per party id on the host, whatever data it reads.

Two server processes over mutual TLS; each scenario is one party id, and every party runs with the
default directories (no --state-dir, no --ledger-dir: its upload journal beside its data, its
ledger in the host's $XDG_STATE_HOME/ltm/ledger, the local deployment's state directory) and a
budget of ε = 1.2, so a second default (1, 1e-6) job (composed ε ≈ 1.45) must be refused — unless
the party's ledger forgot the first.  Moving, copying, appending to, re-sorting or renaming a
column of the data once each opened a fresh budget (the ledger was keyed by the data's bytes and
kept beside them); now each is refused with nothing sent.  `--new-source` is the one logged way
to a second budget; a missing or corrupt ledger is a one-line refusal (exit 7), never a reset.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ltm.party.ledger as L
from ltm.jobfile import parse_job_file, render_job_file
from ltm.sim.localnet.demo import write_party_csv
from tests.helpers import party_runs  # tests/helpers/party_runs.py
from tests.helpers.servers import create_job
from tests.helpers.servers import held as servers_held

K = 2
SIZE = 40
SCENARIOS = ["move", "copy", "resort", "rename", "append", "new-source", "missing"]
PARTY = {name: f"party-{i}" for i, name in enumerate(SCENARIOS)}
TIMEOUT = 90.0


def spec_of(job_id: str, endpoints: list[str], *, sizes: dict[str, int] | None = None,
            columns: tuple[str, ...] = ("x0", "x1", "y")):
    """A default (1, 1e-6) rows job over every scenario's party, written as a job file."""
    sizes = sizes or {}
    doc = {"job": {"id": job_id, "partition": "rows"}, "release": {"kind": "sparse", "m": 8},
           "privacy": {"epsilon": 1.0, "delta": 1e-6}, "fit": {"model": "ridge"},
           "servers": [{"id": f"server-{i}", "endpoint": e} for i, e in enumerate(endpoints)],
           "parties": [{"id": p, "clients": sizes.get(p, SIZE)} for p in PARTY.values()],
           "columns": [{"name": c, "range": [-4.0, 4.0], **({"role": "label"} if c == "y" else {})}
                       for c in columns]}
    return parse_job_file(render_job_file(doc)).spec


def rows(seed: int, n: int = SIZE) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x0": rng.normal(size=n), "x1": rng.normal(size=n), "y": rng.normal(size=n)}


@pytest.fixture(scope="module")
def world(start_servers):
    """Every scenario's runs, in three waves of concurrent `ltm party` processes."""
    started = start_servers("ledger-party", K, list(PARTY.values()) + ["analyst", "operator"])
    work, group, endpoints = started.work, started.group, started.endpoints
    analyst = started.stubs("analyst")

    def publish(spec):
        return create_job(analyst, spec)

    def held(job_id: str) -> list[tuple[int, int]]:
        return servers_held(analyst, job_id)

    def wave(runs: dict[str, tuple[str, Path, list[str]]]) -> dict[str, tuple[int | None, str, dict | None]]:
        """scenario → (job id, data, extra flags): its party's exit code, log messages and summary."""
        launched = {}
        for name, (job_id, data, extra) in runs.items():
            summary = work / f"{name}-{job_id}.summary.json"
            launched[name] = (group.start_task("party", f"{PARTY[name]}-{job_id}", [
                "party", "--id", PARTY[name], "--job", job_id, "--data", str(data), "--servers", ",".join(endpoints),
                "--no-progress", "--wait", "30", "--budget-epsilon", "1.2", "--summary-file", str(summary),
                *extra]), summary)
        out = {}
        for name, (ap, summary) in launched.items():
            out[name] = (*party_runs.wait(group, ap, TIMEOUT),
                         json.loads(summary.read_text()) if summary.exists() else None)
        return out

    data = {}
    for i, (name, pid) in enumerate(PARTY.items()):
        data[name] = work / "data" / pid / "rows.csv"
        data[name].parent.mkdir(parents=True)
        write_party_csv(data[name], rows(i))
    first = publish(spec_of("first", endpoints))
    results = {"first": wave({name: (first, data[name], []) for name in SCENARIOS})}

    # Each scenario's second job: the first re-created under a new id, on the changed data.
    second = {}
    moved = work / "elsewhere" / "rows.csv"
    moved.parent.mkdir()
    shutil.move(data["move"], moved)
    second["move"] = (publish(spec_of("again-move", endpoints)), moved, [])
    copy = work / "copy" / "rows.csv"
    copy.parent.mkdir()
    shutil.copy(data["copy"], copy)
    second["copy"] = (publish(spec_of("again-copy", endpoints)), copy, [])
    t = rows(SCENARIOS.index("resort"))
    order = np.random.default_rng(99).permutation(SIZE)
    write_party_csv(data["resort"], {c: v[order] for c, v in t.items()})
    second["resort"] = (publish(spec_of("again-resort", endpoints)), data["resort"], [])
    t = rows(SCENARIOS.index("rename"))
    write_party_csv(data["rename"], {"x0": t["x0"], "x1_renamed": t["x1"], "y": t["y"]})
    second["rename"] = (publish(spec_of("again-rename", endpoints, columns=("x0", "x1_renamed", "y"))),
                        data["rename"], [])
    t = rows(SCENARIOS.index("append"))
    write_party_csv(data["append"], {c: np.append(v, 0.5) for c, v in t.items()})
    second["append"] = (publish(spec_of("again-append", endpoints, sizes={PARTY["append"]: SIZE + 1})),
                        data["append"], [])
    fresh = work / "cohort-2" / "rows.csv"
    fresh.parent.mkdir()
    write_party_csv(fresh, rows(1000))  # other individuals
    second["new-source"] = (publish(spec_of("cohort-2", endpoints)), fresh,
                            ["--new-source", "cohort-2", "--new-source-reason", "the 2026 cohort: new patients"])
    ledger_dir = work / "state" / "ltm" / "ledger"  # the deployment's $XDG_STATE_HOME (ltm/sim/localnet/launcher.py)
    (ledger_dir / f"{PARTY['missing']}.ledger.json").unlink(missing_ok=True)  # (missing_ok: so that the
    # tests fail on their assertions, not here, with a ledger kept elsewhere)
    second["missing"] = (publish(spec_of("again-missing", endpoints)), data["missing"], [])
    results["second"] = wave(second)

    # Third: the head gone too (only the upload journal remains); a tampered charge; a copy of
    # charged data claimed as a new source.
    (ledger_dir / f"{PARTY['missing']}.ledger.head").unlink(missing_ok=True)
    moved_ledger = ledger_dir / f"{PARTY['move']}.ledger.json"
    if moved_ledger.exists():
        obj = json.loads(moved_ledger.read_text())
        charge = next(r for r in obj["records"] if r["kind"] == "charge")
        charge.update(mechanism="laplace", noise_multiplier=0.0, pure_epsilon=-100.0)
        moved_ledger.write_text(json.dumps(obj))
    third = {"missing": (second["missing"][0], data["missing"], []), "move": (second["move"][0], moved, []),
             "new-source": (publish(spec_of("cohort-3", endpoints)), data["new-source"],
                            ["--new-source", "cohort-3", "--new-source-reason", "claimed new, but a copy"])}
    results["third"] = wave(third)
    yield {"results": results, "held": held, "ledger_dir": ledger_dir, "second": second}
    started.assert_running()


def refused_for_budget(world, name: str) -> None:
    code, log, summary = world["results"]["first"][name]
    assert code == 0, log[-2000:]
    assert summary["ledger"]["after"]["epsilon"] == pytest.approx(1.0, abs=1e-3)
    code, log, summary = world["results"]["second"][name]
    assert code == 3 and summary is None, log[-2000:]
    assert "privacy budget exceeded" in log and "has spent ε = 1 (δ = 1e-06) over 1 job(s)" in log, log[-2000:]
    assert "would reach ε = 1.45" in log
    assert world["held"](world["second"][name][0]) == [(0, 0)] * K  # nothing was sent
    # one ledger for the party, in the host's state directory, holding the one job and what data it read
    ledger = world["ledger_dir"] / f"{PARTY[name]}.ledger.json"
    charges = [r for r in json.loads(ledger.read_text())["records"] if r["kind"] == "charge"]
    assert [c["job_id"] for c in charges] == ["first"] and len(charges[0]["data_fingerprint"]) == 64


def test_moving_the_data_does_not_reset_the_budget(world):
    refused_for_budget(world, "move")


def test_copying_the_data_does_not_reset_the_budget(world):
    refused_for_budget(world, "copy")


def test_resorting_the_rows_does_not_reset_the_budget(world):
    refused_for_budget(world, "resort")


def test_renaming_a_column_does_not_reset_the_budget(world):
    refused_for_budget(world, "rename")


def test_appending_a_row_does_not_reset_the_budget(world):
    refused_for_budget(world, "append")


def test_a_new_source_is_a_separate_logged_budget_and_a_copy_is_not_new(world):
    code, log, summary = world["results"]["second"]["new-source"]
    assert code == 0, log[-2000:]
    entry = summary["ledger"]
    assert entry["charged"] and entry["source"] == "cohort-2" and entry["before"]["epsilon"] == 0.0
    assert "new data source opened: a separate privacy budget" in log
    assert world["held"]("cohort-2")[0][0] == SIZE
    records = json.loads((world["ledger_dir"] / f"{PARTY['new-source']}.ledger.json").read_text())["records"]
    (opened,) = [r for r in records if r["kind"] == "source" and r["source"] == "cohort-2"]
    assert opened["reason"] == "the 2026 cohort: new patients" and opened["at"]
    assert [(r["job_id"], r["source"]) for r in records if r["kind"] == "charge"] == \
        [("first", "default"), ("cohort-2", "cohort-2")]
    # the first job's data again, claimed as new: refused, nothing opened, nothing sent
    code, log, _ = world["results"]["third"]["new-source"]
    assert code == 7, log[-2000:]
    assert "this exact data was already charged to source 'default'" in log
    assert world["held"]("cohort-3") == [(0, 0)] * K
    assert "cohort-3" not in (world["ledger_dir"] / f"{PARTY['new-source']}.ledger.json").read_text()


def test_a_missing_ledger_is_refused_never_a_fresh_budget(world):
    code, log, _ = world["results"]["second"]["missing"]
    assert code == 7, log[-2000:]
    assert "is missing but its head" in log and "refusing to start a fresh budget" in log
    code, log, _ = world["results"]["third"]["missing"]
    assert code == 7, log[-2000:]
    assert "upload journal(s) of party-6" in log and "show earlier jobs" in log
    assert world["held"]("again-missing") == [(0, 0)] * K
    assert not (world["ledger_dir"] / "party-6.ledger.json").exists()


def test_a_tampered_charge_is_a_one_line_refusal(world):
    code, log, _ = world["results"]["third"]["move"]
    assert code == 7, log[-2000:]
    # the JSON log line (its message) and one plain line on stderr, each the whole refusal in one line
    logged, plain = [l for l in log.splitlines() if "privacy ledger" in l]
    assert plain.startswith("ltm party: error: privacy ledger: ") and logged == plain.removeprefix("ltm party: error: ")
    assert "is corrupt at record 1: pure_epsilon is -100.0, not positive" in plain
    assert "Traceback" not in log


@pytest.mark.parametrize("flags, message", [
    (["--new-source", "x"], "--new-source needs --new-source-reason"),
    (["--new-source", "x", "--new-source-reason", "r", "--source", "y"], "not both"),
])
def test_source_flags_are_checked_before_anything_is_contacted(tmp_path, flags, message):
    (tmp_path / "rows.csv").write_text("x0\n1\n")
    proc = subprocess.run([sys.executable, "-m", "ltm.cli", "party", "--id", "party-0", "--servers", "127.0.0.1:1",
                           "--job", "j", "--data", str(tmp_path / "rows.csv"), "--insecure", *flags],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_ltm_simulate_charges_persistent_ledgers_across_runs(tmp_path):
    from ltm.sim.runtime.simulate import SimulateConfig, simulate

    cfg = dict(synthetic="ridge", n=600, d=3, parties=2, k=2, m=8, seed=1, budget_epsilon=1.2,
               ledger_dir=str(tmp_path))
    first = simulate(SimulateConfig(**cfg))
    assert first["ledgers"]["party-0"]["ledger"] == str(tmp_path / "party-0.ledger.json")
    with pytest.raises(L.BudgetExceeded, match="has spent ε = 1"):
        simulate(SimulateConfig(**{**cfg, "seed": 2}))
    # without a ledger directory, each run is a world of its own
    assert simulate(SimulateConfig(**{**cfg, "seed": 2, "ledger_dir": None}))["ledgers"]["party-0"]["charged"]

"""The experiment runner: every spec's reduced grid, resumption, networked == in-process,
and the fast path against the real party/server/analyst cores."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ltm.datasets.tables import Table
from ltm.experiments import ltmjobs
from ltm.experiments.ltmjobs import Mechanism
from ltm.experiments.registry import SCENARIOS, get_scenario, load_scenarios, register
from ltm.experiments.results import ResultsCsv
from ltm.experiments.runner import run_experiment
from ltm.experiments.seeds import derive_seed, subseed
from ltm.experiments.spec import SPEC_DIR, SpecError, load_spec, spec_from_dict
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import party_tables

SPECS = sorted(SPEC_DIR.glob("*.toml"))


def _plots_unavailable() -> str | None:
    """Why plots cannot be drawn here (matplotlib is an optional extra), or None if they can."""
    from ltm.experiments.report import PlotsUnavailable, _import_matplotlib

    try:
        _import_matplotlib()
    except PlotsUnavailable as exc:
        return str(exc)
    return None


def _needs_plots() -> None:
    """Skip (with the reason) a test that checks written PNGs where matplotlib is not installed."""
    reason = _plots_unavailable()
    if reason is not None:
        pytest.skip(reason)


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------------- every spec, reduced
@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
def test_reduced_grid_runs_and_reports(spec_path, tmp_path):
    """CI runs every spec's reduced grid: results.csv, summary.md, run.json and its PNGs appear."""
    spec = load_spec(spec_path, reduced=True)
    if spec.plots:
        _needs_plots()
    out = tmp_path / spec.name
    record = run_experiment(spec_path, out, reduced=True, progress=False, command="pytest")
    rows = _csv_rows(out / "results.csv")
    assert rows, "no result rows"
    assert record["status"] == "complete"
    assert record["pairs_done"] == record["pairs_total"] == len(spec.cells()) * spec.repetitions
    done = {(r["cell_id"], r["rep"]) for r in rows}
    assert len(done) == record["pairs_total"]
    for metric in spec.metrics:
        assert any(r.get(metric) not in (None, "") for r in rows), f"metric {metric} never reported"
    summary = (out / "summary.md").read_text()
    assert spec.title in summary
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["command"] == "pytest" and run_json["spec_file_sha256"] and run_json["versions"]["numpy"]
    if spec.plots:
        assert record["plots"], "no plot was written"
        for name in record["plots"]:
            png = (out / name).read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


# ---------------------------------------------------------------------------------- resumption
_CALLS: list[tuple[int, int]] = []
_FAIL_AT: dict[str, int | None] = {"n": None}


@register("test.toy")
def _toy(params: dict, seed: int) -> list[dict]:
    _CALLS.append((params["x"], seed))
    if _FAIL_AT["n"] is not None and len(_CALLS) == _FAIL_AT["n"]:
        raise KeyboardInterrupt
    rng = np.random.default_rng(seed)
    rows = [{"series": "a", "y": float(params["x"] * 2 + rng.standard_normal())},
            {"series": "b", "y": float(rng.standard_normal())}]
    if params["x"] == 3:
        rows[1]["extra"] = "new column"  # a column first seen late: the header is widened
    return rows


def _toy_spec(tmp_path: Path, reps: int = 3) -> Path:
    path = tmp_path / "toy.toml"
    path.write_text(f"""
name = "toy"
scenario = "test.toy"
repetitions = {reps}
base_seed = 11
[params]
c = 1
[grid]
x = [1, 2, 3, 4]
[summary]
metrics = ["y"]
[[plot]]
file = "toy.png"
x = "x"
y = "y"
series = "series"
""")
    return path


def test_interrupted_run_resumes_to_the_same_results(tmp_path):
    spec = _toy_spec(tmp_path)
    fresh = tmp_path / "fresh"
    run_experiment(spec, fresh, progress=False, plots=False)
    expected = _csv_rows(fresh / "results.csv")
    assert len(expected) == 4 * 3 * 2

    out = tmp_path / "resumed"
    _CALLS.clear()
    _FAIL_AT["n"] = 6  # Ctrl-C while computing the 6th (cell, rep)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_experiment(spec, out, progress=False, plots=False)
    finally:
        _FAIL_AT["n"] = None
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    assert len(ResultsCsv(out / "results.csv", ["x"]).open().done()) == 5
    # An interruption in the middle of a write: a half line and an incomplete group at the end.
    text = (out / "results.csv").read_text()
    header = text.splitlines()[0].split(",")
    group = {h: "" for h in header}
    group.update(cell_id="deadbeef0000", rep="0", seed="1", row="0", rows="2", series="a", y="1.0")
    with (out / "results.csv").open("a") as fh:
        fh.write(",".join(group[h] for h in header) + "\n")
        fh.write("deadbeef0000,0,1,1,2,b,0.")  # cut mid-line

    _CALLS.clear()
    record = run_experiment(spec, out, progress=False, plots=False)
    assert len(_CALLS) == 12 - 5, "completed pairs must not be recomputed"
    assert record["pairs_resumed"] == 5 and record["pairs_run"] == 7 and record["status"] == "complete"
    got = _csv_rows(out / "results.csv")
    assert "deadbeef0000" not in {r["cell_id"] for r in got}
    key = lambda r: (r["cell_id"], r["rep"], r["row"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert json.loads((out / "run.json").read_text())["history"], "the earlier run is kept in run.json"

    # A completed run rerun computes nothing.
    _CALLS.clear()
    again = run_experiment(spec, out, progress=False, plots=False)
    assert _CALLS == [] and again["pairs_run"] == 0


def test_resume_refuses_another_scenario_or_seed(tmp_path):
    spec = _toy_spec(tmp_path, reps=1)
    out = tmp_path / "o"
    run_experiment(spec, out, progress=False, plots=False)
    spec.write_text(spec.read_text().replace("base_seed = 11", "base_seed = 12"))
    with pytest.raises(ValueError, match="another scenario or base seed"):
        run_experiment(spec, out, progress=False, plots=False)


def test_summary_puts_the_papers_numbers_beside_ours(tmp_path):
    _needs_plots()
    spec = _toy_spec(tmp_path, reps=2)
    spec.write_text(spec.read_text() + """
[[paper]]
where = { x = 2, series = "a" }
metric = "y"
mean = 4.25
std = 0.5
source = "Table 99"
""")
    run_experiment(spec, tmp_path / "o", progress=False)
    summary = (tmp_path / "o" / "summary.md").read_text()
    line = next(l for l in summary.splitlines() if l.startswith("| 2 | a |"))
    assert "4.250 ± 0.500 (Table 99)" in line and " ± " in line.split("|")[3]
    assert (tmp_path / "o" / "toy.png").exists()


def test_missing_plot_extra_is_a_clear_error_after_results(tmp_path, monkeypatch):
    from ltm.experiments import report

    def unavailable():
        raise report.PlotsUnavailable("plots need matplotlib, which is not installed: pip install -e '.[plot]'")

    monkeypatch.setattr(report, "_import_matplotlib", unavailable)
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[plot\]'"):
        run_experiment(_toy_spec(tmp_path, reps=1), tmp_path / "o", progress=False)
    assert (tmp_path / "o" / "results.csv").exists() and (tmp_path / "o" / "summary.md").exists()


def test_workers_give_the_same_rows_as_one_process(tmp_path):
    a = run_experiment("burkhardt_table8", tmp_path / "one", reduced=True, progress=False, plots=False)
    b = run_experiment("burkhardt_table8", tmp_path / "two", reduced=True, progress=False, plots=False, workers=2)
    assert a["pairs_done"] == b["pairs_done"]
    key = lambda r: (r["cell_id"], r["rep"], r["row"])  # noqa: E731
    assert sorted(_csv_rows(tmp_path / "one" / "results.csv"), key=key) == \
        sorted(_csv_rows(tmp_path / "two" / "results.csv"), key=key)


# ---------------------------------------------------------------------------------- networked == in-process
def test_networked_and_inprocess_give_identical_numbers(tmp_path):
    """The same reduced grid through real gRPC server/analyst/party processes (mutual TLS) and in
    process: the same seeds release bit-identical sketches, so every number matches exactly."""
    inproc = tmp_path / "inprocess"
    net = tmp_path / "networked"
    run_experiment("burkhardt_table8", inproc, reduced=True, progress=False, plots=False)
    record = run_experiment("burkhardt_table8", net, reduced=True, networked=True, progress=False, plots=False)
    assert record["transport"] == "networked"
    a, b = _csv_rows(inproc / "results.csv"), _csv_rows(net / "results.csv")
    assert len(a) == len(b) > 0
    networked_jobs = 0
    for ra, rb in zip(a, b):
        if ra["path"] == "inprocess":
            assert rb["path"] == "networked"
            assert ra["release_sha256"] and ra["release_sha256"] == rb["release_sha256"]
            networked_jobs += 1
        for col in ra:
            if col != "path":
                assert ra[col] == rb[col], (col, ra[col], rb[col])
    assert networked_jobs >= 2


def test_networked_is_refused_for_unsupported_specs(tmp_path):
    with pytest.raises(ValueError, match="does not support --networked"):
        run_experiment(_toy_spec(tmp_path, reps=1), tmp_path / "o", networked=True, progress=False)


# ---------------------------------------------------------------------------------- fast path == real path
def _job(n: int, mech: Mechanism, seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = X @ np.array([0.5, -1.0, 2.0]) + 0.3 * rng.standard_normal(n)
    raw = np.column_stack([X, y]) * scale
    table = Table({"a": raw[:, 0], "b": raw[:, 1], "c": raw[:, 2], "y": raw[:, 3]}, "y", "test")
    columns = ltmjobs.maxnorm_columns(table, norm=mech.clip_norm)
    if scale != 1.0:  # keep the transform of the unscaled table, so V is exactly scaled
        base = _job(n, mech, seed)[1]
        columns = base.columns
    spec = ltmjobs.make_spec(columns, n, mech, job_id="t", sketch_seed=seed)
    return table, spec


@pytest.mark.parametrize("mech", [
    Mechanism(m=20, s=2, epsilon=1.0, delta=1e-5),
    Mechanism(mechanism="laplace", m=20, s=1, epsilon=2.0),
    Mechanism(mechanism="laplace", calibration="paper", kind="dense", m=8, s=8, epsilon=50.0),
], ids=["gaussian-sparse-s2", "laplace-sparse", "laplace-dense-cor410"])
def test_fast_path_noiseless_part_equals_the_real_pipeline(mech):
    """The pipeline is linear and its noise does not depend on the data, so releasing V and V/2
    with the same seed differs by exactly S·(V/2)/√pieces (up to fixed-point rounding) — which
    must equal the fast path's noiseless sketch."""
    table, spec = _job(3000, mech, 5)
    half_table, half_spec = _job(3000, mech, 5, scale=0.5)
    assert half_spec.digest == spec.digest
    rand = lambda: Randomness.seeded_insecure(99)  # noqa: E731
    full = run_inprocess(spec, party_tables(spec, table), rand()).release.matrix
    half = run_inprocess(spec, party_tables(spec, half_table), rand()).release.matrix
    V_half = ltmjobs.transformed(spec, half_table)
    clean, loads = ltmjobs.noiseless_sketch(spec, V_half)
    sketch = spec.make_sketch()
    tol = 2.0 * (loads.max() + 1) * 2.0 ** -spec.frac_bits * sketch.scale
    np.testing.assert_allclose(full - half, clean * sketch.scale, rtol=0, atol=tol)
    assert np.array_equal(loads, sketch.row_loads())


@pytest.mark.parametrize("mech", [
    Mechanism(m=16, s=2, epsilon=1.0, delta=1e-5),
    Mechanism(calibration="interpolate", interpolate_p=0.5, m=16, s=1, epsilon=0.5, delta=1e-5),
    Mechanism(mechanism="laplace", m=16, s=1, epsilon=1.0),
], ids=["gaussian-tight", "gaussian-interpolate", "laplace-tight"])
def test_fast_path_noise_has_the_real_pipelines_distribution(mech):
    """Release noise (release − noiseless sketch), standardised per row by its exact std, from 40
    real-pipeline releases and 40 fast-path releases: both follow the same law (KS, α = 1e-6);
    for the Gaussian also N(0, 1) exactly."""
    table, spec = _job(1500, mech, 8)
    V = ltmjobs.transformed(spec, table)
    clean, loads = ltmjobs.noiseless_sketch(spec, V)
    sketch, plan = spec.make_sketch(), spec.noise_plan()
    sd = sketch.scale * plan.sigma_client * np.sqrt(loads)[:, None]
    real, fast = [], []
    for i in range(40):
        seed = subseed(123, i)
        rel = run_inprocess(spec, party_tables(spec, table), Randomness.seeded_insecure(seed)).release
        real.append(((rel.matrix - clean * sketch.scale) / sd).ravel())
        fast.append(((ltmjobs.fast_release(spec, V, seed).matrix - clean * sketch.scale) / sd).ravel())
    real_z, fast_z = np.concatenate(real), np.concatenate(fast)
    assert stats.ks_2samp(real_z, fast_z).pvalue > 1e-6
    for z in (real_z, fast_z):
        assert abs(z.var() - 1.0) < 0.1
        if mech.mechanism == "gaussian":
            assert stats.kstest(z, "norm").pvalue > 1e-6


def test_fast_release_reports_the_same_noise_accounting_as_the_pipeline():
    table, spec = _job(2000, Mechanism(m=20, s=1, epsilon=1.0, delta=1e-5), 3)
    real = run_inprocess(spec, party_tables(spec, table), Randomness.seeded_insecure(1)).release
    fast = ltmjobs.fast_release(spec, ltmjobs.transformed(spec, table), 1)
    assert fast.noise_variance_per_column == real.noise_variance_per_column
    for k in ("sigma_client", "sigma_release", "min_honest_load", "achieved_delta", "calibration_verified",
              "dp_verified"):
        assert fast.privacy[k] == real.privacy[k]


def test_paper_calibration_below_its_threshold_is_the_zero_output_branch():
    from ltm.experiments import burkhardt

    rows = burkhardt.ridge_real({"dataset": "elevation", "lam": 10.0, "epsilon": 0.03, "scaling": "maxnorm",
                                 "series": ["paper", "zero"], "path": "fast"}, 1)
    paper, zero = rows
    assert paper["zero_output"] is True and paper["path"] == "zero-output"
    assert paper["phi"] == zero["phi"]  # the analyst gets 0, so x' = 0


# ---------------------------------------------------------------------------------- small pieces
def test_spec_validation_messages(tmp_path):
    with pytest.raises(SpecError, match="unknown keys"):
        spec_from_dict({"name": "a", "scenario": "b", "gird": {}})
    with pytest.raises(SpecError, match="not an axis"):
        spec_from_dict({"name": "a", "scenario": "b", "grid": {"n": [1]}, "reduced": {"grid": {"m": [2]}}},
                       reduced=True)
    with pytest.raises(SpecError, match="both fixed params and grid axes"):
        spec_from_dict({"name": "a", "scenario": "b", "params": {"n": 1}, "grid": {"n": [1, 2]}})
    with pytest.raises(SpecError, match="no spec file"):
        load_spec("no_such_spec")


def test_seeds_are_deterministic_and_distinct():
    spec = load_spec(SPEC_DIR / "burkhardt_fig3.toml")
    cells = spec.cells()
    seeds = {spec.seed(c, r) for c in cells[:50] for r in range(3)}
    assert len(seeds) == 150
    assert spec.seed(cells[0], 0) == load_spec(SPEC_DIR / "burkhardt_fig3.toml").seed(cells[0], 0)
    assert derive_seed("a", 1) != derive_seed("a", 2) and 0 <= derive_seed("x") < 2**63


def test_missing_scenario_module_is_tolerated_and_named(capsys):
    load_scenarios(("ltm.experiments.no_such_module",))
    assert "ltm.experiments.no_such_module is not present" in capsys.readouterr().err
    with pytest.raises(ValueError, match="its module ltm.experiments.no_such_module is missing"):
        get_scenario("nope", "ltm.experiments.no_such_module")
    assert "burkhardt.ridge_synthetic" in SCENARIOS


def test_cli_lists_specs_and_runs_one(tmp_path, capsys):
    from ltm.cli.app import main

    assert main(["experiment", "list"]) == 0
    listed = capsys.readouterr().out
    assert "burkhardt_fig3" in listed and "burkhardt.lowrank_real" in listed
    out = tmp_path / "cli"
    assert main(["experiment", "run", "burkhardt_table8", "--reduced", "--out", str(out), "--no-progress",
                 "--no-plots"]) == 0
    assert (out / "results.csv").exists()
    assert json.loads((out / "run.json").read_text())["command"] == \
        f"ltm experiment run burkhardt_table8 --out {out} --reduced --no-progress --no-plots"


def test_a_sketch_with_an_empty_row_is_redrawn_before_the_data_is_used():
    """At small n/m a public sketch can leave a row empty (the gate refuses: no honest load); the
    scenario draws a fresh public seed instead of failing the cell."""
    from ltm.experiments import burkhardt
    from ltm.sketch import Sketch

    params = {"n": 300, "d": 3, "lam": 1.0, "epsilon": 1.0, "scaling": "standardise", "m": 50,
              "series": ["tight", "zero"], "path": "real"}
    for seed in range(200):
        first = Sketch("sparse", 50, 300, 1, bytes.fromhex(ltmjobs.sketch_seed_hex(subseed(seed, "sketch"))))
        if first.row_loads().min() == 0:
            break
    else:
        pytest.skip("no seed with an empty first sketch row found")
    rows = burkhardt.ridge_synthetic(params, seed)
    assert rows[0]["sketch_redraws"] >= 1 and rows[0]["min_honest_load"] >= 1


def test_run_json_records_a_bundled_spec_relative_to_the_project():
    from ltm.experiments.runner import recorded_spec_path

    assert recorded_spec_path(SPEC_DIR / "liao_table1.toml") == "ltm/experiments/specs/liao_table1.toml"


def test_run_json_records_a_spec_outside_the_project_absolute(tmp_path):
    from ltm.experiments.runner import recorded_spec_path

    spec = _toy_spec(tmp_path, reps=1)
    assert recorded_spec_path(spec) == str(spec.resolve())


def test_a_committed_record_rebuilds_from_another_working_directory(tmp_path, monkeypatch):
    """docs/results/<name>/run.json came from another checkout: its report still rebuilds."""
    import shutil

    from ltm.experiments.runner import rebuild_report

    out = tmp_path / "liao_table1"
    shutil.copytree(Path(__file__).resolve().parents[3] / "docs" / "results" / "liao_table1", out)
    monkeypatch.chdir(tmp_path)
    record = rebuild_report(out, plots=False)
    assert record["spec"] == "liao_table1" and (out / "summary.md").read_text()

"""Sweeps on Dask (``ltm experiment run SPEC --executor dask``): the same results.csv as the local
executor, resumption, a failing cell that loses nothing already written, and clear errors (no dask,
an unreachable scheduler, ``--networked``).  The tests that need dask.distributed are skipped only
where it is not installed; CI installs it (``.[dev]``)."""
from __future__ import annotations

import json
import logging
import multiprocessing
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ltm.experiments import executors
from ltm.experiments.executors import ExecutorUnavailable, make_executor
from ltm.experiments.results import ResultsCsv
from ltm.experiments.runner import run_experiment
from tests.helpers.optional import require

SPEC = "burkhardt_fig3"  # reduced: 4 cells × 2 repetitions of differing cost, ≈ 1 s in one process


def _run(out: Path, **kw) -> dict:
    return run_experiment(SPEC, out, reduced=True, progress=False, plots=False, **kw)


@pytest.fixture(scope="module")
def distributed():
    return require("distributed")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> bytes:
    """results.csv of the reduced grid computed in this process (the local executor's default)."""
    out = tmp_path_factory.mktemp("local")
    record = _run(out)
    assert record["executor"] == "local" and record["workers"] == 1 and record["status"] == "complete"
    return (out / "results.csv").read_bytes()


@pytest.fixture(scope="module")
def cluster(distributed):
    """An existing Dask cluster (2 single-threaded worker processes), as `dask scheduler` + `dask worker` give."""
    children = set(multiprocessing.active_children())
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.ERROR)
    try:
        yield cluster
    finally:
        with distributed.Client(cluster, set_as_default=False) as client:
            client.run(executors._silence_distributed_logs)
        cluster.close()
    assert set(multiprocessing.active_children()) <= children, "the cluster's worker processes were left running"


@pytest.fixture
def no_leaked_processes():
    before = set(multiprocessing.active_children())
    yield
    deadline = time.monotonic() + 10
    while set(multiprocessing.active_children()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(multiprocessing.active_children()) - before, "the LocalCluster's processes were left running"


def test_a_local_dask_cluster_writes_the_same_results_csv(distributed, reference, tmp_path, no_leaked_processes):
    """--executor dask --workers 2: a LocalCluster of its own, the same bytes as one process (the
    file is rewritten in grid order once complete, whatever order the pairs finished in), shut down
    at the end."""
    record = _run(tmp_path / "dask", executor="dask", workers=2)
    assert record["status"] == "complete" and record["pairs_run"] == record["pairs_total"] == 8
    assert (record["executor"], record["workers"], record["scheduler"]) == ("dask", 2, None)
    assert (tmp_path / "dask" / "results.csv").read_bytes() == reference
    run_json = json.loads((tmp_path / "dask" / "run.json").read_text())
    assert run_json["executor"] == "dask" and run_json["scheduler"] is None


def test_the_process_pool_writes_the_same_results_csv_without_dask(reference, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed: `import distributed` fails
    record = _run(tmp_path / "pool", workers=2)
    assert (record["executor"], record["workers"]) == ("local", 2)
    assert (tmp_path / "pool" / "results.csv").read_bytes() == reference


def test_dask_resumes_a_partial_run_computing_only_the_missing_pairs(distributed, cluster, reference, tmp_path):
    out = tmp_path / "o"
    partial = _run(out, max_pairs=3)  # an interrupted local run: 3 of 8 pairs
    assert partial["status"] == "partial"
    done_before = ResultsCsv(out / "results.csv", []).open().done()
    assert len(done_before) == 3
    with distributed.Client(cluster, set_as_default=False) as client, \
            distributed.get_task_stream(client=client) as stream:
        record = _run(out, scheduler=cluster.scheduler_address, executor="dask")
    assert record["pairs_resumed"] == 3 and record["pairs_run"] == 5 and record["status"] == "complete"
    assert (record["executor"], record["scheduler"], record["workers"]) == ("dask", cluster.scheduler_address, 2)
    # the workers computed exactly the 5 missing pairs (task keys name the cell and repetition)
    ran = sorted(t["key"].rsplit("-", 1)[0] for t in stream.data)
    assert len(ran) == 5
    assert not {f"{SPEC}-{cell}-rep{rep}" for cell, rep in done_before} & set(ran)
    assert (out / "results.csv").read_bytes() == reference
    history = json.loads((out / "run.json").read_text())["history"]
    assert history and history[-1]["status"] == "partial"


_TOY = '''
from pathlib import Path

from ltm.experiments.registry import register


@register("test.dasktoy")
def cell(params, seed):
    if params["x"] == 3 and Path(params["fail_flag"]).exists():
        raise RuntimeError("cell x=3 failed on purpose")
    return [{"series": "a", "y": params["x"] + (seed % 1000) / 1000}]
'''


def test_a_failing_cell_on_a_worker_loses_nothing_already_written(distributed, cluster, tmp_path, monkeypatch):
    module = tmp_path / "dasktoy_scenario.py"
    module.write_text(_TOY)
    monkeypatch.syspath_prepend(str(tmp_path))  # this process imports it by name…
    with distributed.Client(cluster, set_as_default=False) as client:
        client.upload_file(str(module))  # …and so do the workers (Dask ships the file)
    flag = tmp_path / "fail"
    flag.touch()
    spec = tmp_path / "toy.toml"
    spec.write_text(textwrap.dedent(f"""
        name = "dasktoy"
        scenario = "test.dasktoy"
        module = "dasktoy_scenario"
        repetitions = 1
        base_seed = 5
        [params]
        fail_flag = "{flag}"
        [grid]
        x = [1, 2, 3, 4, 5, 6]
        [summary]
        metrics = ["y"]
        """))
    out = tmp_path / "o"
    on_cluster = dict(progress=False, plots=False, executor="dask", scheduler=cluster.scheduler_address)
    with pytest.raises(RuntimeError, match="x=3 failed on purpose"):
        run_experiment(spec, out, **on_cluster)
    assert json.loads((out / "run.json").read_text())["status"] == "failed"
    written = ResultsCsv(out / "results.csv", ["x"]).open()
    assert {r["x"] for r in written.rows()} <= {1, 2, 4, 5, 6}
    kept = len(written.done())

    flag.unlink()
    record = run_experiment(spec, out, **on_cluster)
    assert record["status"] == "complete" and record["pairs_resumed"] == kept and record["pairs_run"] == 6 - kept
    local = run_experiment(spec, tmp_path / "local", progress=False, plots=False)
    assert local["pairs_run"] == 6
    assert (out / "results.csv").read_bytes() == (tmp_path / "local" / "results.csv").read_bytes()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_an_unreachable_scheduler_is_a_clear_error(distributed, tmp_path, monkeypatch, capsys):
    address = f"tcp://127.0.0.1:{_closed_port()}"
    t = time.monotonic()
    with pytest.raises(ExecutorUnavailable, match=f"cannot reach the Dask scheduler at {address} within 1 s"):
        _run(tmp_path / "o", executor="dask", scheduler=address, connect_timeout=1.0)
    assert time.monotonic() - t < 15
    assert not (tmp_path / "o").exists(), "nothing is written when the executor cannot start"

    from ltm.cli.app import main

    monkeypatch.setattr(executors, "DEFAULT_CONNECT_TIMEOUT", 1.0)
    assert main(["experiment", "run", SPEC, "--reduced", "--out", str(tmp_path / "cli"), "--scheduler", address,
                 "--no-progress", "--no-plots"]) == 2  # --scheduler implies --executor dask
    err = capsys.readouterr().err.strip()
    assert err.startswith("ltm experiment: error: cannot reach the Dask scheduler") and "\n" not in err


def test_without_dask_the_dask_executor_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed: `import distributed` fails
    with pytest.raises(ExecutorUnavailable, match=r"pip install 'ltm\[dask\]'"):
        make_executor("dask", 2)
    from ltm.cli.app import main

    assert main(["experiment", "run", SPEC, "--reduced", "--out", str(tmp_path / "o"), "--executor", "dask",
                 "--no-progress", "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'ltm[dask]'" in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_networked_refuses_the_dask_executor_and_local_refuses_a_scheduler(tmp_path):
    with pytest.raises(ValueError, match="--networked runs cells one at a time.*cannot use --executor dask"):
        run_experiment("burkhardt_table8", tmp_path / "n", reduced=True, networked=True, executor="dask",
                       progress=False, plots=False)
    with pytest.raises(ValueError, match="--scheduler needs --executor dask"):
        _run(tmp_path / "s", executor="local", scheduler="tcp://127.0.0.1:8786")
    assert not (tmp_path / "n").exists() and not (tmp_path / "s").exists()

"""200 bad-data party exits in a loop under load, none aborted (scripts/party_exit_loop.py).

The launcher keeps its own gRPC busy and starts every party with a plain fork(), the case in which
gRPC's fork handler used to abort the child before its exec (SIGABRT, "epoll_wait error: Bad file
descriptor"; ltm.cli.app.no_grpc_fork_handlers).  Slow (a few minutes on 2 cores); the CI version
is tests/unit/ltm_cli/test_grpc_fork.py."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_200_bad_data_party_exits_under_load_none_aborted(tmp_path):
    spec = importlib.util.spec_from_file_location("party_exit_loop", REPO / "scripts" / "party_exit_loop.py")
    loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loop)
    report = loop.run_loop(200, 4, 4, tmp_path, fork=True)
    assert report["exit_statuses"] == {"4": 200} and not report["failure_count"], report

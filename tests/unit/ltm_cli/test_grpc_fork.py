"""A launcher whose gRPC is busy can fork children that live to exec (ltm.cli.app.no_grpc_fork_handlers).

With grpcio's fork support on, a plain fork() runs gRPC's child handler, which restarts its poller
in the child; the child closes its inherited descriptors before exec, the epoll one among them, and
gRPC aborts it ("epoll_wait error: Bad file descriptor", SIGABRT: grpc/grpc#43055).  That is what a
party started by a busy launcher sometimes died of.  Real processes: a gRPC server and a thread
calling it without pause, and 300 children forked (preexec_fn forces fork over vfork) meanwhile;
about 2 % of them abort with fork support on, so 300 clean ones fail that case with p ≈ 0.1 %.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

LAUNCHER = """
import collections, subprocess, sys, threading
from ltm.cli.app import no_grpc_fork_handlers
no_grpc_fork_handlers()                     # what `ltm` does first, before grpc is imported
import grpc
from concurrent import futures
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(2))
health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
busy = True
def call():
    while busy:
        stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
threading.Thread(target=call, daemon=True).start()
codes = collections.Counter()
for _ in range(300):
    codes[subprocess.Popen(["/bin/true"], preexec_fn=lambda: None,
                           stderr=subprocess.DEVNULL).wait()] += 1
busy = False
print(dict(codes))
"""


def test_children_forked_while_grpc_is_busy_are_not_aborted():
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}  # as a user's shell has it
    proc = subprocess.run([sys.executable, "-c", LAUNCHER], env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "{0: 300}", proc.stdout  # a -6 is a child gRPC aborted before its exec


def test_ltm_turns_grpc_fork_support_off_unless_told_otherwise():
    probe = ("import os, sys\nfrom ltm.cli.app import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
             "print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'), 'grpc' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=120).stdout
    assert out.split()[-2:] == ["false", "False"], out  # set, and before grpc was imported
    kept = subprocess.run([sys.executable, "-c", probe], env={**env, "PYTHONPATH": str(REPO),
                                                              "GRPC_ENABLE_FORK_SUPPORT": "true"},
                          capture_output=True, text=True, timeout=120).stdout
    assert kept.split()[-2:] == ["true", "False"], kept  # a deliberate setting wins


def test_a_failed_command_with_pyarrow_loaded_keeps_its_status_and_its_line(tmp_path):
    """``ltm.cli.app.entry`` leaves a failed command with pyarrow loaded by os._exit (Arrow's threads
    aborted the normal exit): the exit status and the one-line error still come out, flushed."""
    import pytest

    pytest.importorskip("pyarrow")
    # an atexit hook that speaks shows which way the process left: os._exit skips it
    probe = ("import atexit, sys\natexit.register(lambda: print('normal exit', file=sys.stderr))\n"
             "if sys.argv[2] == 'pyarrow':\n    import pyarrow  # noqa: F401\n"
             "sys.argv = ['ltm', 'job', 'check', sys.argv[1]]\nfrom ltm.cli.app import entry\nentry()\n")
    missing = tmp_path / "missing.toml"
    r = subprocess.run([sys.executable, "-c", probe, str(missing), "pyarrow"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count("ltm job: error:") == 1 and "missing.toml" in r.stderr
    assert "normal exit" not in r.stderr  # left by os._exit, past the interpreter's exit
    # without pyarrow, the same failure exits normally (every atexit cleanup runs)
    r = subprocess.run([sys.executable, "-c", probe, str(missing), "none"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "normal exit" in r.stderr, r.stderr[-2000:]

"""A party's first fetch of a job spec is from whoever answers at ``--servers`` (identities are
pinned only after it): a hostile spec served there (JSON nested 200 000 deep, a 10⁵-digit integer,
not JSON at all) must end in the party's one-line refusal (exit 3), never a traceback.  Real
processes: a hostile server over real mutual TLS and an ``ltm party`` process."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ltm.transport.certs import write_certs

REPO = Path(__file__).resolve().parents[2]
BODIES = {
    "deep array": b"[" * 200_000 + b"]" * 200_000,
    "deep object": b'{"a":' * 200_000 + b"1" + b"}" * 200_000,
    "deep field": b'{"job_id": ' + b"[" * 990 + b"]" * 990 + b"}",
    "huge integer": b'{"job_id": ' + b"9" * 100_000 + b"}",
    "not UTF-8": b"\xff\xfe{}",
    "NaN": b'{"n": NaN}',
}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile-spec") / "certs"
    # The analyst's certificate is CA-signed and valid for 127.0.0.1: only a pin would refuse it.
    write_certs(d, ["server-0", "party-0", "analyst"], analyst_hosts=["127.0.0.1"])
    return d


@pytest.mark.parametrize("name", list(BODIES))
def test_a_hostile_spec_from_an_unpinned_server_is_refused_in_one_line(certs, tmp_path, name):
    (tmp_path / "body").write_bytes(BODIES[name])
    port_file = tmp_path / "port"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "helpers" / "hostile_spec_server.py"),
                               "--certs", str(certs), "--cert-of", "analyst", "--body", str(tmp_path / "body"),
                               "--port-file", str(port_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        end = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert server.poll() is None and time.monotonic() < end, server.stderr.read().decode()
            time.sleep(0.05)
        (tmp_path / "data.csv").write_text("x\n1\n")
        out = subprocess.run([sys.executable, "-m", "ltm.cli", "party", "--id", "party-0", "--job", "j",
                              "--data", str(tmp_path / "data.csv"), "--servers", f"127.0.0.1:{port_file.read_text().strip()}",
                              "--certs", str(certs), "--wait", "2", "--no-progress",
                              "--ledger-dir", str(tmp_path / "ledger"), "--state-dir", str(tmp_path / "state")],
                             capture_output=True, text=True, timeout=120, env={**env, "XDG_STATE_HOME": str(tmp_path)})
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert out.returncode == 3, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if '"level": "error"' in line]
    assert len(errors) == 1 and "refusing the job: the servers serve a job spec that is not valid" in errors[0], \
        out.stderr[-3000:]
    assert len(errors[0]) < 2000 and out.stdout == ""

"""Errors a person can act on: each case runs the real `ltm` command in a subprocess and must end
with one line on stderr (``ltm <command>: error: …``), a non-zero status and no traceback."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ltm.sim.localnet.launcher import ProcessGroup

REPO = Path(__file__).resolve().parents[2]


def ltm(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ltm.cli", *map(str, argv)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess, command: str, status: int, *needles: str) -> str:
    """Assert the shape of an actionable error and return its line."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == status, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"ltm {command}: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pki") / "certs"
    proc = ltm("certs", "--out", out, "--servers", "1", "--parties", "1", "--analyst")
    assert proc.returncode == 0, proc.stderr
    return out


def closed_port() -> int:
    """A loopback port with nobody listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_csv(path: Path, rows: int = 200) -> Path:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(rows, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=rows)
    lines = ["a,b,c,y"] + [",".join(repr(float(v)) for v in (*r, t)) for r, t in zip(x, y)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("command", ["server", "analyst"])
def test_missing_certificates_leave_no_state_behind(tmp_path, command):
    state = tmp_path / "state"
    flag = "--data-dir" if command == "server" else "--out"
    ident = ["--id", "server-0"] if command == "server" else []
    proc = ltm(command, *ident, "--listen", "127.0.0.1:0", flag, state, "--certs", tmp_path / "no-such-certs")
    one_line_error(proc, command, 2, "CA certificate not found", "ltm certs --out")
    assert not state.exists()  # the data directory is not created before the certificates are checked


def test_missing_leaf_certificate_is_named(tmp_path, certs):
    proc = ltm("server", "--id", "server-7", "--listen", "127.0.0.1:0", "--data-dir", tmp_path / "s",
               "--certs", certs)
    one_line_error(proc, "server", 2, "certificate of server-7 not found")
    assert not (tmp_path / "s").exists()


def test_port_already_in_use(tmp_path, certs):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = ltm("server", "--id", "server-0", "--listen", f"127.0.0.1:{port}", "--data-dir", tmp_path / "s",
                   "--certs", certs)
    one_line_error(proc, "server", 2, f"cannot listen on 127.0.0.1:{port}", "already in use")


def test_party_with_unreachable_server(tmp_path, certs):
    data = small_csv(tmp_path / "party-0.csv")
    port = closed_port()
    proc = ltm("party", "--id", "party-0", "--servers", f"127.0.0.1:{port}", "--job", "j", "--data", data,
               "--certs", certs, "--wait", "0.5", "--no-progress")
    one_line_error(proc, "party", 5, f"cannot reach the server(s) 127.0.0.1:{port}", "--servers")


def test_party_data_file_missing_is_checked_before_contacting_anyone(tmp_path, certs):
    with socket.socket() as listener:  # a "server" that records whether anybody connected
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        proc = ltm("party", "--id", "party-0", "--servers", f"127.0.0.1:{port}", "--job", "j",
                   "--data", tmp_path / "nope.csv", "--certs", certs, "--wait", "30", "--no-progress")
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    one_line_error(proc, "party", 4, "nope.csv does not exist", "nothing was sent")


def test_operator_with_unreachable_analyst(tmp_path, certs):
    data = small_csv(tmp_path / "table.csv")
    port = closed_port()
    servers = f"server-0=127.0.0.1:{closed_port()},server-1=127.0.0.1:{closed_port()}"
    proc = ltm("operate", "--analyst", f"127.0.0.1:{port}", "--servers", servers, "--party-data",
               tmp_path / "pd", "--certs", certs, "--parties", "2", "--data", data, "--label", "y", "--m", "16")
    one_line_error(proc, "operate", 5, f"cannot reach the analyst at 127.0.0.1:{port}", "--analyst")


def test_analyst_with_unreachable_servers(tmp_path, certs):
    """The analyst is up but the servers are not: the operator says which servers, in one line."""
    data = small_csv(tmp_path / "table.csv")
    group = ProcessGroup(tmp_path, certs)
    try:
        analyst = group.start_service("analyst", "analyst", ["analyst", "--out", str(tmp_path / "out"),
                                                             "--server-retry", "0.5"])
        ports = [closed_port(), closed_port()]
        servers = ",".join(f"server-{i}=127.0.0.1:{p}" for i, p in enumerate(ports))
        proc = ltm("operate", "--analyst", analyst.endpoint, "--servers", servers, "--party-data", tmp_path / "pd",
                   "--certs", certs, "--parties", "2", "--data", data, "--label", "y", "--m", "16")
    finally:
        group.stop_all()
    one_line_error(proc, "operate", 5, "did not accept job", f"server-0 unreachable at 127.0.0.1:{ports[0]}")


def test_non_numeric_cell_is_refused_with_row_and_column(tmp_path):
    data = small_csv(tmp_path / "table.csv")
    lines = data.read_text().splitlines()
    cells = lines[8].split(",")
    cells[1] = "12,5".replace(",", ";")  # a decimal comma typed as ';'-separated text: not a number
    lines[8] = ",".join(cells)
    data.write_text("\n".join(lines) + "\n")
    proc = ltm("simulate", "--data", data, "--label", "y", "--parties", "2", "--k", "2")
    one_line_error(proc, "simulate", 2, "data row 8 (line 9), column 'b': '12;5' is not a number")


def test_a_reader_that_has_gone_gets_no_traceback():
    """`ltm job check FILE | head`: the reader closes the pipe before `ltm` writes; `ltm` exits as a
    process killed by SIGPIPE would (141), with nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # `head` has read what it wanted and gone
    try:
        proc = subprocess.run([sys.executable, "-m", "ltm.cli", "job", "check", str(REPO / "examples/jobs/power-ridge.toml")],
                              env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == "", proc.stderr

"""A throwaway PostgreSQL server on loopback for tests: initdb + pg_ctl in a temp dir, a free port,
password authentication (scram), stopped at the end.  As root it runs as ``nobody`` (initdb refuses
root).  Tests skip, naming the reason, only when no PostgreSQL binaries exist (.ci/run installs
Debian's postgresql)."""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PASSWORD = "ltm-test-password"


def bin_dir() -> Path | None:
    """The directory of pg_ctl and initdb: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_server(tmp: Path) -> Iterator[str]:
    """A running server; yields its DSN (no password in it: the caller sets PGPASSWORD)."""
    where = bin_dir()
    if where is None:
        pytest.skip("no PostgreSQL binaries (pg_ctl, initdb): apt-get install postgresql (.ci/run does)")
    if os.geteuid() == 0:  # pytest's own temp dirs are root's (0700): nobody needs one it can enter
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="ltm-pg-"))
    tmp.mkdir(parents=True, exist_ok=True)
    pwfile = tmp / "pw"
    pwfile.write_text(PASSWORD + "\n")
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb and postgres refuse to run as root
        as_user = ["runuser", "-u", "nobody", "--"]
        os.chmod(tmp, 0o777)
        shutil.chown(pwfile, "nobody")
    data, port = tmp / "data", _free_port()

    def run(*argv: str) -> None:
        done = subprocess.run([*as_user, *argv], capture_output=True, text=True, timeout=120, cwd=tmp)
        if done.returncode:
            raise RuntimeError(f"{Path(argv[0]).name} failed ({done.returncode}): {done.stderr[-1500:]}")

    run(str(where / "initdb"), "-D", str(data), "-U", "ltm", f"--pwfile={pwfile}", "-A", "scram-sha-256",
        "--no-sync")
    run(str(where / "pg_ctl"), "-D", str(data), "-l", str(tmp / "log"), "-w", "-t", "60", "-o",
        f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        yield f"postgresql://ltm@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(subprocess.SubprocessError, RuntimeError):
            run(str(where / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        if as_user:
            shutil.rmtree(tmp, ignore_errors=True)

"""The same rows as CSV, Parquet, a PostgreSQL table (a real server on loopback) and SQLite give the
same release, bit for bit, in ``ltm simulate`` and in a networked ``ltm demo`` whose party
processes read each format themselves (issue 33); passwords never show."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.optional import require
from tests.helpers.postgres import PASSWORD, postgres_server

pa = require("pyarrow")
require("psycopg")
import pyarrow.parquet as pq

N, SEED = 1500, "7"


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    with postgres_server(tmp_path_factory.mktemp("pg")) as dsn:
        yield dsn


def _table() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(33)
    cols = {f"x{j}": rng.normal(size=N) * (j + 1) for j in range(3)}
    cols["y"] = cols["x0"] - 0.3 * cols["x2"] + rng.normal(size=N)
    return cols


def _write_all(where: Path, dsn: str) -> dict[str, list[str]]:
    cols = _table()
    rows = list(zip(*(v.tolist() for v in cols.values())))
    (where / "rows.csv").write_text(",".join(cols) + "\n" + "".join(",".join(map(repr, r)) + "\n" for r in rows))
    pq.write_table(pa.table(cols), where / "rows.parquet", row_group_size=400)  # several row groups
    with sqlite3.connect(where / "rows.sqlite") as conn:
        conn.execute(f"CREATE TABLE t ({', '.join(c + ' REAL' for c in cols)})")
        conn.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(cols))})", rows)
    import psycopg

    with psycopg.connect(dsn, password=PASSWORD) as conn:
        conn.execute(f"DROP TABLE IF EXISTS t; CREATE TABLE t ({', '.join(c + ' double precision' for c in cols)})")
        with conn.cursor().copy("COPY t FROM STDIN") as copy:
            for r in rows:
                copy.write_row(r)
    return {"csv": ["--data", str(where / "rows.csv")], "parquet": ["--data", str(where / "rows.parquet")],
            "sqlite": ["--data", str(where / "rows.sqlite")], "postgres": ["--data", dsn, "--query", "t"]}


def _ltm(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PGPASSWORD": PASSWORD}
    return subprocess.run([sys.executable, "-m", "ltm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_simulate_releases_the_same_bytes_from_every_format(pg, tmp_path):
    sources = _write_all(tmp_path, pg)
    shas = {}
    for name, data in sources.items():
        out = _ltm(["simulate", *data, "--label", "y", "--seed", SEED, "--json"])
        assert out.returncode == 0, (name, out.stderr[-2000:])
        assert PASSWORD not in out.stdout + out.stderr
        shas[name] = json.loads(out.stdout)["release_sha256"]
    assert len(set(shas.values())) == 1, shas


@pytest.mark.slow
def test_networked_parties_reading_each_format_release_the_same_bytes(pg, tmp_path):
    sources = _write_all(tmp_path, pg)
    reference = json.loads(_ltm(["simulate", *sources["csv"], "--label", "y", "--seed", SEED, "--json"]).stdout)
    for fmt in ("csv", "parquet", "sqlite", "postgres"):
        party = ["--party-postgres", pg] if fmt == "postgres" else ["--party-format", fmt]
        out = _ltm(["demo", *sources["csv"], "--label", "y", "--seed", SEED, *party, "--json"], timeout=600)
        assert out.returncode == 0, (fmt, out.stderr[-3000:])
        assert PASSWORD not in out.stdout + out.stderr
        assert json.loads(out.stdout)["release_sha256"] == reference["release_sha256"], fmt


def test_a_bad_cell_is_refused_alike_in_every_format(pg, tmp_path):
    """A text cell in a numeric column: one line naming column and data row, in every format."""
    import psycopg

    (tmp_path / "bad.csv").write_text("a,y\n1,2\n3,oops\n")
    pq.write_table(pa.table({"a": [1.0, 3.0], "y": ["2", "oops"]}), tmp_path / "bad.parquet")
    with sqlite3.connect(tmp_path / "bad.sqlite") as conn:
        conn.execute("CREATE TABLE t (a, y)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, 2), (3, "oops")])
    with psycopg.connect(pg, password=PASSWORD) as conn:
        conn.execute("DROP TABLE IF EXISTS bad; CREATE TABLE bad (a double precision, y text)")
        conn.execute("INSERT INTO bad VALUES (1, '2'), (3, 'oops')")
    for data in (["bad.csv"], ["bad.parquet"], ["bad.sqlite"], [pg, "--query", "bad"]):
        path = data[0] if data[0].startswith("postgresql") else str(tmp_path / data[0])
        out = _ltm(["simulate", "--data", path, *data[1:], "--label", "y", "--seed", SEED, "--json"])
        assert out.returncode == 2, out.stderr
        line = out.stderr.strip().splitlines()[-1]
        assert "data row 2" in line and "column 'y'" in line and "'oops' is not a number" in line, line


def test_a_password_in_the_dsn_is_refused_and_never_printed(pg):
    leaky = pg.replace("ltm@", f"ltm:{PASSWORD}@")
    out = _ltm(["simulate", "--data", leaky, "--query", "t", "--label", "y", "--seed", SEED])
    assert out.returncode == 2 and PASSWORD not in out.stdout + out.stderr
    assert "PGPASSWORD" in out.stderr and "***" in out.stderr

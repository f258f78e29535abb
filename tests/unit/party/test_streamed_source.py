"""Streamed sources (party/streamed_source.py, party/sql_source.py): CSV, Parquet and SQLite give the
whole-file CSV reader's values, fingerprint, refusals and batches; DSNs never show a password."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ltm.datasets.synthetic import synthetic_ridge
from ltm.party.data_source import DataSourceError, TableSource, open_source, parse_csv, read_text
from ltm.party.randomizer import PartyDataError, check_source, make_batches
from ltm.randomness import Randomness
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.optional import require

pa = require("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from ltm.party.sql_source import read_password, redact_dsn, relation  # noqa: E402
from ltm.party.streamed_source import NonNumericCell  # noqa: E402


def _write_csv(path: Path, table: dict[str, np.ndarray]) -> None:
    """Exact CSV: repr of each float (round-trips), text cells as they are."""
    cells = [[x if isinstance(x, str) else repr(float(x)) for x in v.tolist()] for v in table.values()]
    path.write_text(",".join(table) + "\n" + "".join(",".join(r) + "\n" for r in zip(*cells)))


def _formats(where: Path, table: dict[str, np.ndarray], name: str = "rows") -> dict[str, Path]:
    _write_csv(where / f"{name}.csv", table)
    pq.write_table(pa.table(table), where / f"{name}.parquet", row_group_size=97)
    folder = where / f"{name}-folder"
    folder.mkdir()
    n = len(next(iter(table.values())))
    for i, (a, b) in enumerate(zip((0, n // 3, n // 2), (n // 3, n // 2, n))):
        pq.write_table(pa.table({k: v[a:b] for k, v in table.items()}), folder / f"part-{i}.parquet")
    with sqlite3.connect(where / f"{name}.sqlite") as conn:
        conn.execute(f"CREATE TABLE t ({', '.join(table)})")
        conn.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(table))})",
                         zip(*(v.tolist() for v in table.values())))
    return {"csv": where / f"{name}.csv", "parquet": where / f"{name}.parquet", "folder": folder,
            "sqlite": where / f"{name}.sqlite"}


def _world():
    randomness = Randomness.seeded_insecure("streamed")
    table = synthetic_ridge(700, 3, randomness)
    spec, _ = build_job(table, job_id="streamed", randomness=randomness, parties=2, k=3, m=8, s=2)
    return spec, party_tables(spec, table), randomness


@pytest.mark.parametrize("fmt", ["csv", "parquet", "folder", "sqlite"])
def test_every_format_reads_the_same_values_in_any_order(tmp_path, fmt):
    rng = np.random.default_rng(4)
    table = {"a": rng.normal(size=1000), "b": rng.integers(-5, 5, 1000).astype(float)}
    source = open_source(_formats(tmp_path, table)[fmt])
    assert source.rows == 1000 and source.columns == ("a", "b")
    for a, b in [(0, 10), (10, 500), (400, 1000), (0, 1000), (999, 1000), (3, 3)]:  # forwards, back, whole
        got = source.read(a, b, ["b", "a"])
        for k in table:
            np.testing.assert_array_equal(got[k], table[k][a:b])
    assert source.fingerprint() == TableSource(table).fingerprint()
    source.close()


@pytest.mark.parametrize("fmt", ["csv", "parquet", "folder", "sqlite"])
def test_every_format_gives_the_same_batches_as_the_table(tmp_path, fmt):
    spec, tables, randomness = _world()
    pid = spec.parties[1].party_id
    source = open_source(_formats(tmp_path, tables[pid])[fmt])
    check_source(spec, pid, source)
    streamed = [[b.content_digest() for b in per] for per in make_batches(spec, pid, source, randomness,
                                                                          batch_clients=37)]
    whole = [[b.content_digest() for b in per] for per in make_batches(spec, pid, tables[pid], randomness,
                                                                       batch_clients=37)]
    assert streamed == whole


def test_csv_cells_follow_the_whole_file_rules(tmp_path):
    text = "a,b,c,name\n 1.5 ,NA,1_0,x\n?,2,inf,y\n,nan,-3e2,z\n"
    path = tmp_path / "cells.csv"
    path.write_text(text)
    whole, skipped = parse_csv(read_text(path), source=str(path))
    source = open_source(path)
    source.scan()
    assert set(source.non_numeric) == set(skipped) == {"name"}
    got = source.read(0, 3, list(whole))
    for k, v in whole.items():
        np.testing.assert_array_equal(got[k], v)
    assert source.fingerprint() == TableSource(whole).fingerprint()


def test_a_text_cell_is_refused_alike_in_csv_parquet_and_sqlite(tmp_path):
    spec, tables, _ = _world()
    pid = spec.parties[0].party_id
    table = {k: v.astype(object) for k, v in tables[pid].items()}
    name = next(iter(table))
    table[name][41] = "oops"
    messages = {}
    for fmt, path in _formats(tmp_path, {k: np.array([x if isinstance(x, str) else repr(float(x)) for x in v])
                                         for k, v in table.items()}).items():
        source = open_source(path)
        with pytest.raises(PartyDataError) as info:
            check_source(spec, pid, source)
        messages[fmt] = str(info.value).replace(source.description, "SRC")
        assert "data row 42" in messages[fmt] and f"column {name!r}" in messages[fmt] and "'oops'" in messages[fmt]
    assert messages["csv"].replace(" (line 43)", "") == messages["parquet"] == messages["sqlite"]


def test_a_missing_value_is_refused_naming_column_and_row_in_every_format(tmp_path):
    spec, tables, _ = _world()
    pid = spec.parties[0].party_id
    table = {k: v.copy() for k, v in tables[pid].items()}
    name = list(table)[1]
    table[name][17] = np.nan
    messages = set()
    for path in _formats(tmp_path, table).values():
        with pytest.raises(PartyDataError) as info:
            check_source(spec, pid, open_source(path))
        messages.add(str(info.value))
    assert messages == {f"column {name!r} has 1 NaN/infinite values (first at row 17); clean or impute them first"}


def test_a_ragged_csv_row_is_refused_as_the_whole_file_reader_does(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("a,b\n1,2\n3\n")
    with pytest.raises(DataSourceError, match=r"data row 2 has 1 fields, the header 2"):
        open_source(path)


def test_sqlite_takes_its_one_table_or_a_query(tmp_path):
    path = _formats(tmp_path, {"a": np.arange(5.0), "b": np.arange(5.0) * 2})["sqlite"]
    assert open_source(path).rows == 5
    q = open_source(path, query="SELECT b AS twice FROM t WHERE a >= 2 ORDER BY a")
    np.testing.assert_array_equal(q.read(0, 3)["twice"], [4.0, 6.0, 8.0])
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE other (x)")
    with pytest.raises(DataSourceError, match="name the table"):
        open_source(path)


def test_dsns_are_redacted_and_may_not_carry_a_password(monkeypatch, tmp_path):
    assert redact_dsn("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert "s3cret" not in redact_dsn("host=h password=s3cret dbname=db")
    assert redact_dsn("postgresql://u@h/db") == "postgresql://u@h/db"
    with pytest.raises(DataSourceError) as info:
        open_source("postgresql://u:s3cret@127.0.0.1:1/db", query="t")
    assert "s3cret" not in str(info.value) and "PGPASSWORD" in str(info.value)
    monkeypatch.setenv("LTM_TEST_PW", "from-env")
    (tmp_path / "pw").write_text("from-file\n")
    assert read_password("LTM_TEST_PW") == "from-env"
    assert read_password(password_file=str(tmp_path / "pw")) == "from-file"
    assert read_password() is None
    assert relation("visits") == ('SELECT * FROM "visits"', "table visits")
    assert relation("SELECT a FROM t;")[1] == "query"


def test_a_streamed_read_meeting_a_text_cell_names_it(tmp_path):
    path = tmp_path / "late.csv"
    path.write_text("a\n" + "1\n" * 70000 + "bad\n")
    with pytest.raises(NonNumericCell, match=r"data row 70001 \(line 70002\), column 'a': 'bad'"):
        open_source(path).read(0, 70001, ["a"])


def test_ltm_party_opens_each_source_with_its_flags(tmp_path, monkeypatch):
    """``ltm party``'s reader: --query and the password flags reach the source, --dask sets its aggregator."""
    import argparse

    from ltm.party.main import data_exists, read_party_source

    path = _formats(tmp_path, {"a": np.arange(4.0)})["sqlite"]
    args = argparse.Namespace(query="SELECT a FROM t WHERE a > 1", password_env=None, password_file=None,
                              dask="local:1")
    folder = _formats(tmp_path, {"a": np.arange(4.0)}, "p")["folder"]
    parquet = read_party_source(str(folder), argparse.Namespace(**{**vars(args), "query": None}))
    assert parquet.rows == 4 and parquet.aggregator.scheduler == "local:1"
    args.dask = None
    assert read_party_source(str(path), args).rows == 2
    args.dask = "local:1"
    assert data_exists(f"sqlite:///{path}") and data_exists("postgresql://u@h/db")
    assert not data_exists(f"sqlite:///{tmp_path}/none.sqlite")
    with pytest.raises(PartyDataError, match="--dask reduces a Parquet file or folder"):
        read_party_source(str(path), args)  # an SQLite source has no files to spread
    args.dask = None
    args.password_env = "LTM_NO_SUCH_VARIABLE"
    monkeypatch.delenv("LTM_NO_SUCH_VARIABLE", raising=False)
    with pytest.raises(PartyDataError, match="no such environment variable"):
        read_party_source(str(path), args)

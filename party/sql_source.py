"""SQL sources: a PostgreSQL query or table (psycopg 3, server-side cursor) and SQLite files (stdlib).

Both are :class:`ltm.party.streamed_source.StreamedSource`: rows come a batch at a time
(``fetchmany``; PostgreSQL through a named, server-side cursor, so the server holds the result
and the party's memory is one batch), projected to the columns asked
(``SELECT "a", "b" FROM (<query>) AS q``), and every batch goes through the one validation core
(:func:`ltm.party.streamed_source.cells_to_float`): NULL is a missing value, text that is not a number
is refused naming column and row, as in a CSV.

**Why psycopg 3 and not ADBC.**  psycopg's binary wheel is one package with libpq inside, its
named cursors stream a result of any size with bounded memory on the party, and it is the driver
most PostgreSQL sites already run; ADBC would hand over Arrow batches (less Python per cell) but
adds a native driver manager per database.  The party's SQL read is not its bottleneck at the
sizes a single database serves it (the upload is), and a party that outgrows one machine reads
Parquet (party/dask_aggregate.py).

**Credentials.**  A DSN may not carry a password (command lines and job logs are visible): the
password comes from ``PGPASSWORD`` (libpq reads it), from the environment variable named by
``--password-env``, or from the first line of ``--password-file``.  :func:`redact_dsn` is what a
DSN looks like in every message, log line and summary.

**Order.**  Every pass is one query in one read-only REPEATABLE READ transaction (the same
snapshot for the scan and the upload), with ``synchronize_seqscans`` off so that a table's rows
come in the same order each pass; a query should say ``ORDER BY`` if its order could change.
"""
from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ltm.party.data_source import DataSourceError
from ltm.party.streamed_source import BATCH_ROWS, NUMBER, TEXT, StreamedSource

POSTGRES_PREFIXES = ("postgresql://", "postgres://")
SQLITE_PREFIX = "sqlite:///"
SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
#: PostgreSQL type OIDs read as numbers: bool, int8, int2, int4, float4, float8, numeric, oid
_PG_NUMBER_OIDS = {16, 20, 21, 23, 700, 701, 1700, 26}
#: … and as text (a number per cell, or refused): text, varchar, bpchar, name
_PG_TEXT_OIDS = {25, 1043, 1042, 19}


def is_postgres(data: str) -> bool:
    """Whether ``--data`` is a PostgreSQL DSN."""
    return str(data).startswith(POSTGRES_PREFIXES)


def is_sqlite(data: str) -> bool:
    """Whether ``--data`` names an SQLite database (``sqlite:///path`` or a .sqlite/.sqlite3/.db file)."""
    return str(data).startswith(SQLITE_PREFIX) or str(data).endswith(SQLITE_SUFFIXES)


def redact_dsn(text: str) -> str:
    """``text`` with any DSN password replaced by ``***`` (URL ``user:pw@`` and ``password=`` forms)."""
    text = re.sub(r"(postgres(?:ql)?://[^:/@\s]*):[^@\s]*@", r"\1:***@", str(text))
    return re.sub(r"(password\s*=\s*)('[^']*'|[^\s&]+)", r"\1***", text, flags=re.IGNORECASE)


def _has_password(dsn: str) -> bool:
    parsed = urllib.parse.urlsplit(dsn)
    return parsed.password is not None or "password" in urllib.parse.parse_qs(parsed.query)


def read_password(password_env: str | None = None, password_file: str | None = None) -> str | None:
    """The database password from ``--password-env NAME`` or ``--password-file PATH`` (None: libpq
    reads ``PGPASSWORD`` or ~/.pgpass itself).  Never logged."""
    if password_env and password_file:
        raise DataSourceError("give --password-env or --password-file, not both")
    if password_env:
        if password_env not in os.environ:
            raise DataSourceError(f"--password-env {password_env}: no such environment variable")
        return os.environ[password_env]
    if password_file:
        try:
            return Path(password_file).read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError, UnicodeDecodeError) as exc:
            raise DataSourceError(f"--password-file {password_file}: cannot read a password "
                                  f"({type(exc).__name__})") from None
    return None


def _quote(name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def relation(query: str) -> tuple[str, str]:
    """(SQL of the rows, what to call it): a table name becomes ``SELECT * FROM "name"``."""
    query = query.strip().rstrip(";").strip()
    if not query:
        raise DataSourceError("--query is empty: give a table name or a SELECT statement")
    if _IDENTIFIER.match(query):
        return f"SELECT * FROM {_quote(query)}", f"table {query}"
    return query, "query"


class SqlSource(StreamedSource):
    """Rows of a SQL query (or table) read by ``fetchmany`` (the subclasses connect)."""

    _sql: str

    def _connect(self):
        raise NotImplementedError

    def _cursor_for(self, conn):
        return conn.cursor()

    def _execute(self, sql: str) -> Iterator[list[tuple]]:
        conn = self._connection()
        cur = self._cursor_for(conn)
        try:
            cur.execute(sql)
            while True:
                rows = cur.fetchmany(BATCH_ROWS)
                if not rows:
                    return
                yield rows
        except self._errors() as exc:
            raise DataSourceError(f"{self.description}: {redact_dsn(str(exc).splitlines()[0])}") from None
        finally:
            with contextlib.suppress(*self._errors()):  # the connection may be closed already
                cur.close()

    def _connection(self):
        if getattr(self, "_conn", None) is None:
            self._conn = self._connect()
        return self._conn

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def _projected(self, names: list[str]) -> str:
        columns = ", ".join('"' + n.replace('"', '""') + '"' for n in names)
        return f"SELECT {columns} FROM ({self._sql}) AS ltm_q"

    def _batches(self, names: list[str], start: int) -> Iterator[dict[str, Any]]:
        for rows in self._execute(self._projected(names)):
            yield {k: [r[j] for r in rows] for j, k in enumerate(names)}

    def _count_rows(self) -> int:
        for rows in self._execute(f"SELECT count(*) FROM ({self._sql}) AS ltm_q"):
            return int(rows[0][0])
        return 0

    def close(self) -> None:
        """Close the database connection (a PostgreSQL transaction ends with it)."""
        conn, self._conn = getattr(self, "_conn", None), None
        if conn is not None:
            conn.close()


class SqliteSource(SqlSource):
    """A table or query of an SQLite database file, opened read-only (SQLite's types are per cell:
    every column is a number until a cell says otherwise, as in a CSV)."""

    def __init__(self, path: str | Path, query: str | None = None) -> None:
        text = str(path)
        self.path = Path(text[len(SQLITE_PREFIX) - 1:] if text.startswith(SQLITE_PREFIX) else text)
        if not self.path.is_file():
            raise DataSourceError(f"no such file: {self.path}")
        self.unusable, self.non_numeric = {}, {}
        self.description = str(self.path)
        if query is None:
            tables = [r[0] for rows in self._execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                      "ORDER BY name") for r in rows]
            if len(tables) != 1:
                raise DataSourceError(f"{self.path}: name the table or give a SELECT with --query "
                                      f"(the database has tables {tables})")
            query = tables[0]
        self._sql, what = relation(query)
        self.description = f"{self.path} ({what})"
        names = self._names()
        if len(set(names)) != len(names):
            raise DataSourceError(f"{self.description}: duplicate column names {names}")
        self._kinds = {n: TEXT for n in names}

    def _connect(self):
        try:
            # The party reads from its upload thread after opening here; its reads never overlap.
            return sqlite3.connect(f"file:{urllib.parse.quote(str(self.path.absolute()))}?mode=ro", uri=True,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise DataSourceError(f"{self.path}: not a readable SQLite database ({exc})") from None

    def _names(self) -> list[str]:
        cur = self._connection().cursor()
        try:
            cur.execute(f"SELECT * FROM ({self._sql}) AS ltm_q LIMIT 0")
            return [d[0] for d in cur.description]
        except sqlite3.Error as exc:
            raise DataSourceError(f"{self.description}: {exc}") from None
        finally:
            cur.close()


class PostgresSource(SqlSource):
    """A table or query of a PostgreSQL database (psycopg 3), streamed by a server-side cursor in
    one read-only REPEATABLE READ transaction."""

    def __init__(self, dsn: str, query: str | None, *, password: str | None = None) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise DataSourceError("a PostgreSQL source needs psycopg: pip install 'ltm[postgres]'") from None
        if _has_password(dsn):
            raise DataSourceError(f"{redact_dsn(dsn)}: take the password out of the DSN (command lines and logs "
                                  f"show it); set PGPASSWORD, --password-env NAME or --password-file PATH")
        if not query:
            raise DataSourceError(f"{redact_dsn(dsn)}: name the table or give a SELECT with --query")
        self._dsn, self._password = dsn, password
        self._sql, what = relation(query)
        self.description = f"{redact_dsn(dsn)} ({what})"
        self.unusable, self.non_numeric = {}, {}
        self._kinds = {}
        for name, oid in self._described():
            if oid in _PG_NUMBER_OIDS:
                self._kinds[name] = NUMBER
            elif oid in _PG_TEXT_OIDS:
                self._kinds[name] = TEXT
            else:
                self.unusable[name] = f"column {name!r} has PostgreSQL type oid {oid}; the job needs real numbers"

    def _errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.Error,)

    def _connect(self):
        import psycopg

        kwargs = {"password": self._password} if self._password is not None else {}
        try:
            conn = psycopg.connect(self._dsn, **kwargs)
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            conn.execute("SET synchronize_seqscans = off")
        except psycopg.Error as exc:
            raise DataSourceError(f"{redact_dsn(self._dsn)}: cannot connect "
                                  f"({redact_dsn(str(exc).strip().splitlines()[0])})") from None
        return conn

    def _cursor_for(self, conn):
        self._cursors = getattr(self, "_cursors", 0) + 1
        return conn.cursor(name=f"ltm_read_{self._cursors}")  # a server-side cursor: fetchmany streams

    def _described(self) -> list[tuple[str, int]]:
        conn = self._connection()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM ({self._sql}) AS ltm_q LIMIT 0")
                names = [(d.name, d.type_code) for d in cur.description]
        except self._errors() as exc:
            raise DataSourceError(f"{self.description}: {redact_dsn(str(exc).strip().splitlines()[0])}") from None
        if len({n for n, _ in names}) != len(names):
            raise DataSourceError(f"{self.description}: duplicate column names {[n for n, _ in names]}")
        return names

"""``ltm server --check`` and ``--repair``: the offline fsck of a server data directory.

The server itself never runs this module: :class:`~ltm.server.sqlite_store.SqliteStore` makes the
checks it needs when it opens a directory (and refuses to open a damaged one).  With the server
stopped, :func:`check_directory` verifies everything (those open-time checks, every blob's content
digest, every release record against its marker, file modes) and :func:`repair_directory` makes a
directory the server refuses startable again without deleting anything (docs/servers.md).
"""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np

from ltm.server.sqlite_store import (
    _RETIRED,
    _SCHEMA,
    BLOB_DIR,
    DB_NAME,
    RELEASE_DIR,
    RELEASE_SUFFIX,
    SCHEMA_VERSION,
    SqliteStore,
    StoreCorruptError,
    StoreError,
    _database_lost,
    _files_under,
    _parse_marker,
    _refusal,
    _scan,
)
from ltm.transport.files import PRIVATE_FILE_MODE, private_dir, touch_private


def check_directory(directory: str | os.PathLike[str]) -> tuple[list[str], dict[str, int]]:
    """Verify a server data directory offline: the open-time checks plus every blob's content
    digest and every release record against its marker.  Returns (problems, counts).  The server
    must be stopped (the directory lock is taken)."""
    d = Path(directory)
    if not d.is_dir():
        return [f"{str(d)!r} is not a directory"], {}
    from ltm.transport.files import mode_problems
    modes = [f"readable by others: {m}" for m in mode_problems(d)]
    lost = _database_lost(d)
    if lost:
        return [lost, *modes], {}
    try:
        store = SqliteStore(d, recover=False)
    except StoreError as exc:
        return [str(exc), *modes], {}
    try:
        problems, counts = store.check()
    finally:
        store.close()
    return problems + modes, counts


def repair_directory(directory: str | os.PathLike[str]) -> list[str]:
    """``ltm server --repair``: make a directory the server refuses startable again, deleting nothing.

    Blobs no batch row names and stale temp files move to ``quarantine/<UTC time>/`` (same relative
    paths); release markers stay where they are and the jobs they name are recorded as retired in
    the database (creating an empty database if it is missing or empty), so their ids can never
    be released again.  Committed blobs that are missing or damaged cannot be repaired: the
    directory is left as it is and the problem is reported.  Returns what was done."""
    import datetime as _dt

    d = Path(directory)
    if not (d / BLOB_DIR).is_dir() and not (d / RELEASE_DIR).is_dir():
        raise StoreError(f"{str(d)!r} is not a server data directory")
    db = d / DB_NAME
    if _database_lost(d):
        for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
            p = d / name
            if p.exists():
                target = d / "quarantine" / f"{name}.{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%S}"
                private_dir(target.parent)
                os.replace(p, target)
                os.chmod(target, PRIVATE_FILE_MODE)
    touch_private(db)
    conn = sqlite3.connect(db)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "schema_version" not in tables:
            if tables:
                raise StoreError(f"{str(db)!r} is not a server database")
            conn.executescript(_SCHEMA + ";\n" + _RETIRED + ";")
            conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
        conn.execute(_RETIRED)
        jobs = {r[0] for r in conn.execute("SELECT job_id FROM jobs")} | \
            {r[0] for r in conn.execute("SELECT job_id FROM retired_jobs")}
        referenced = {r[0]: int(np.prod(json.loads(r[1]), dtype=np.int64)) * 8 for r in conn.execute(
            "SELECT blob_path, shape FROM batches WHERE blob_path IS NOT NULL")}
        released = {r[0] for r in conn.execute("SELECT job_id FROM releases")}
        done: list[str] = []
        for p in _files_under(d / RELEASE_DIR):
            marker = _parse_marker(p.read_bytes()) if p.name.endswith(RELEASE_SUFFIX) else None
            if marker is not None and marker["job_id"] not in jobs:
                conn.execute("INSERT INTO retired_jobs(job_id, marker) VALUES (?, ?)",
                             (marker["job_id"], json.dumps(marker, sort_keys=True)))
                jobs.add(marker["job_id"])
                done.append(f"retired job id {marker['job_id']!r} (its release marker stays)")
        conn.commit()
        pending, stale, problems = _scan(d, referenced, jobs, released)
        unknown = [d / p.split("'")[1] for p in problems if p.endswith("is not named by any stored batch")]
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        for p in unknown + stale:
            target = d / "quarantine" / stamp / p.relative_to(d)
            private_dir(target.parent)
            os.replace(p, target)
            os.chmod(target, PRIVATE_FILE_MODE)
            done.append(f"moved {p.relative_to(d).as_posix()} to {target.relative_to(d).as_posix()}")
        left = [p for p in problems if not p.endswith("is not named by any stored batch")]
        if left:
            raise StoreCorruptError(_refusal(d, left).replace("Refusing to start", "Cannot repair these"))
    finally:
        conn.close()
    os.chmod(db, PRIVATE_FILE_MODE)
    return done

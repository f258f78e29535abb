"""The analyst's durable job table: SQLite (WAL, ``synchronous=FULL``), one file ``analyst.db``.

Everything the analyst must not forget across a crash is committed here before it is relied on
(docs/architecture.md §6):

* a submitted job — its canonical spec, what to fit, the randomness label, and the *absolute*
  time at which intake closes — before it is published to any server;
* whether every server acknowledged the job, and its phase as it advances (``published`` →
  ``running`` → ``done`` | ``failed``; or ``cancelled`` by the operator: the row stays, without
  data, so the id is never taken again);
* the finished release: the servers' result shares and the participant set (its ClientSet ranges,
  16 bytes per range whatever n is; so the reconstructed
  sketch, its SHA-256 and every model fitted on it are re-derivable bit for bit) and the output
  files, before the job is reported done.

A job found ``running`` when the analyst starts is resumed from the beginning of its coordination:
every step is idempotent on the servers (create, close; a release repeated with the same
participant set returns the server's persisted once-only record), so the resumed job releases the
same bytes.  All methods block (fsync); asyncio code calls them through ``asyncio.to_thread``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ltm.client_set import ClientSet
from ltm.errors import CommandError, DataLossError
from ltm.jobspec import JobSpec, JobSpecError
from ltm.transport.files import private_dir, touch_private

DB_NAME = "analyst.db"
LOCK_NAME = "analyst.lock"
STATES = ("published", "running", "done", "failed", "cancelled")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id        TEXT PRIMARY KEY,
    digest        TEXT NOT NULL,
    spec_json     TEXT NOT NULL,
    fit_json      TEXT NOT NULL,
    randomness    TEXT NOT NULL,
    submitted_at  REAL NOT NULL,
    close_at      REAL NOT NULL,
    state         TEXT NOT NULL,
    published     INTEGER NOT NULL DEFAULT 0,
    phase         TEXT NOT NULL DEFAULT '',
    error         TEXT NOT NULL DEFAULT '',
    release_sha256 TEXT NOT NULL DEFAULT '',
    participants  BLOB,
    shares        BLOB,
    outputs_json  TEXT NOT NULL DEFAULT '{}',
    updated_at    REAL NOT NULL
);
"""


@dataclass(frozen=True)
class JobRecord:
    """One row of the job table."""

    job_id: str
    digest: str
    spec: JobSpec
    fit: dict
    randomness: str
    submitted_at: float
    close_at: float
    state: str
    published: bool = False
    phase: str = ""
    error: str = ""
    release_sha256: str = ""
    participants: ClientSet | None = None
    shares: list[np.ndarray] | None = None
    outputs: dict[str, str] | None = None


class AnalystStoreInUse(CommandError):
    """Another analyst process (or an unclosed store) holds the directory."""


class AnalystStoreDamaged(CommandError, DataLossError):
    """``analyst.db`` is not a readable SQLite database of jobs (truncated, overwritten, a row that
    no longer parses): one line naming the file, exit status 3 like a server's damaged store."""


@contextlib.contextmanager
def _damage_reported(path: Path) -> Iterator[None]:
    """SQLite's and the rows' parse errors as :class:`AnalystStoreDamaged` (never a traceback)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise
        raise AnalystStoreDamaged(f"analyst state {str(path)!r} cannot be used: {exc}; restore it from a "
                                  f"backup or move it aside to start empty", status=3) from None
    except (sqlite3.DatabaseError, ValueError, KeyError, TypeError, JobSpecError) as exc:
        raise AnalystStoreDamaged(f"analyst state {str(path)!r} is damaged ({type(exc).__name__}: "
                                  f"{' '.join(str(exc).split())[:200]}); restore it from a backup or move it "
                                  f"aside to start empty", status=3) from None


class AnalystStore:
    """The analyst's jobs in ``<directory>/analyst.db`` (see module docstring).  One process per
    directory (an exclusive flock on ``analyst.lock``): two analysts resuming the same jobs would
    race each other."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = private_dir(directory)  # 0700, like every actor's state
        self._lock_file = open(touch_private(self.directory / LOCK_NAME), "a+b")
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise AnalystStoreInUse(f"analyst state directory {str(self.directory)!r} is in use by another "
                                    f"analyst process; give each analyst its own --state-dir") from None
        touch_private(self.directory / DB_NAME)  # 0600; SQLite gives -wal/-shm the same mode
        self._path = self.directory / DB_NAME
        try:
            with _damage_reported(self._path):
                self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                # A truncated or overwritten file: found now, in one line, not by the first job read.
                problems = [r[0] for r in self._db.execute("PRAGMA quick_check(3)")]
                if problems != ["ok"]:
                    raise sqlite3.DatabaseError("; ".join(problems))
                self._db.executescript(_SCHEMA)
        except BaseException:
            self._lock_file.close()  # release the flock: the next start may find the file fixed
            raise
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the database and release the directory lock."""
        with self._lock:
            self._db.close()
        self._lock_file.close()  # releases the flock

    def _write(self, sql: str, args: tuple) -> None:
        with self._lock, _damage_reported(self._path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(sql, args)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add(self, spec: JobSpec, fit: dict, randomness: str, close_at: float, state: str) -> JobRecord:
        """Insert a new job; returns the existing record if the same spec is already here.

        Raises ``KeyError`` (message: what to do) for the same job id with a different spec.
        """
        existing = self.get(spec.job_id)
        if existing is not None and existing.state == "cancelled":
            raise KeyError(f"job {spec.job_id!r} was cancelled on this analyst; its id is retired: submit the job "
                           f"again under a new job id")
        if existing is not None:
            if existing.digest != spec.digest:
                raise KeyError(f"job {spec.job_id!r} already exists on this analyst with a different spec "
                               f"(digest {existing.digest[:12]}…); choose a new job id")
            return existing
        now = time.time()
        self._write("INSERT INTO jobs (job_id, digest, spec_json, fit_json, randomness, submitted_at, close_at, state, "
                    "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (spec.job_id, spec.digest, spec.canonical_json().decode(), json.dumps(fit), randomness, now,
                     close_at, state, now))
        return self.get(spec.job_id)  # type: ignore[return-value]

    def update(self, job_id: str, **fields) -> None:
        """Set columns of one job (state, phase, error, fit, close_at, randomness)."""
        allowed = {"state", "phase", "error", "close_at", "randomness", "fit_json", "published"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update {sorted(bad)}")
        if "state" in fields and fields["state"] not in STATES:
            raise ValueError(f"unknown state {fields['state']!r}")
        cols = ", ".join(f"{k} = ?" for k in fields)
        # a cancelled job stays cancelled (a task still finishing its last step cannot revive it)
        self._write(f"UPDATE jobs SET {cols}, updated_at = ? WHERE job_id = ? AND state != 'cancelled'",
                    (*fields.values(), time.time(), job_id))

    def finish(self, job_id: str, *, release_sha256: str, participants: ClientSet, shares: list[np.ndarray],
               outputs: dict[str, str]) -> None:
        """Commit a finished job: its result shares, participant set and output files, state ``done``."""
        k = len(shares)
        m, d = shares[0].shape
        blob = np.ascontiguousarray(np.stack(shares), dtype="<u8").tobytes()
        header = json.dumps({"k": k, "m": m, "d": d, "n": participants.n})
        self._write("UPDATE jobs SET state = 'done', phase = '', error = '', release_sha256 = ?, participants = ?, "
                    "shares = ?, outputs_json = ?, updated_at = ? WHERE job_id = ? AND state != 'cancelled'",
                    (release_sha256, _RANGES_TAG + participants.to_bytes(),
                     header.encode() + b"\n" + blob, json.dumps(outputs), time.time(), job_id))

    def cancel(self, job_id: str, reason: str) -> None:
        """Mark the job ``cancelled`` (durably) and drop what it holds (shares, participants, outputs);
        the row stays as the retired id's record."""
        self._write("UPDATE jobs SET state = 'cancelled', phase = '', error = ?, participants = NULL, shares = NULL, "
                    "outputs_json = '{}', release_sha256 = '', updated_at = ? WHERE job_id = ?",
                    (reason, time.time(), job_id))

    def get(self, job_id: str) -> JobRecord | None:
        """The stored record of ``job_id``, or None (a row that no longer parses is damage: exit 3)."""
        with _damage_reported(self._path):
            with self._lock:
                row = self._db.execute("SELECT job_id, digest, spec_json, fit_json, randomness, submitted_at, "
                                       "close_at, state, published, phase, error, release_sha256, participants, "
                                       "shares, outputs_json FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            return None if row is None else _record(row)

    def job_ids(self, state: str | None = None) -> list[str]:
        """The ids of the stored jobs (only those in ``state`` if given), oldest submission first."""
        with self._lock, _damage_reported(self._path):
            if state is None:
                rows = self._db.execute("SELECT job_id FROM jobs ORDER BY submitted_at").fetchall()
            else:
                rows = self._db.execute("SELECT job_id FROM jobs WHERE state = ? ORDER BY submitted_at",
                                        (state,)).fetchall()
        return [r[0] for r in rows]


#: Prefix of a stored participant set in ClientSet ranges.  A blob without it is the packed (n,)
#: mask an analyst from before the ranges stored, still read for its finished jobs (a mask would
#: have to spell this ASCII text bit by bit to be mistaken for ranges).
_RANGES_TAG = b"ranges1\n"


def _participants(n: int, blob: bytes) -> ClientSet:
    if blob.startswith(_RANGES_TAG):
        return ClientSet.from_bytes(n, blob[len(_RANGES_TAG):])
    return ClientSet.from_mask(np.unpackbits(np.frombuffer(blob, np.uint8), count=n).astype(bool))


def _record(row: tuple) -> JobRecord:
    (job_id, digest, spec_json, fit_json, randomness, submitted_at, close_at, state, published, phase, error, sha,
     participants, shares, outputs_json) = row
    spec = JobSpec.from_json(spec_json)
    members = None if participants is None else _participants(spec.n, bytes(participants))
    share_list = None
    if shares is not None:
        head, blob = bytes(shares).split(b"\n", 1)
        h = json.loads(head)
        arr = np.frombuffer(blob, dtype="<u8").astype(np.uint64).reshape(h["k"], h["m"], h["d"])
        share_list = [arr[i].copy() for i in range(h["k"])]
    return JobRecord(job_id, digest, spec, json.loads(fit_json), randomness, submitted_at, close_at, state,
                     bool(published), phase,
                     error, sha, members, share_list, json.loads(outputs_json))

"""A durable :class:`~ltm.server.store.ServerStore`: SQLite (WAL, ``synchronous=FULL``) plus share blobs.

Layout of a store directory::

    <dir>/LOCK                                   exclusive flock: one process per directory
    <dir>/server.db                              jobs, batch metadata, release records
    <dir>/blobs/<job>/<party>/<batch_index>.u64  explicit uint64 shares, raw little-endian
    <dir>/releases/<job>.release                 the once-only release marker (JSON, fsync'd)

(``<job>`` and ``<party>`` are the ids escaped into safe, injective file names; see
:func:`path_component`.)  Helper shares that are 32-byte seeds live inline in their row.

Everything is private by file mode (directories 0700, files 0600: the blobs and the database hold
shares and helper-share seeds).

Durability (docs/architecture.md §6): every mutating method returns only after its effect is committed to disk,
so a process killed at any point (``kill -9``, power loss) and reopened has every acknowledged item.

* ``put_batch`` writes the share data to a uniquely named temp file next to its final path
  (``<batch_index>.u64.<hex>.tmp``) and fsyncs it; then, under the store lock, inserts the row,
  commits, renames the temp file to ``<batch_index>.u64`` and fsyncs the directory.  A crash before
  the commit leaves a temp file no row names (never acknowledged: the next open removes it); a
  crash between commit and rename leaves a temp file a committed row names (the next open finishes
  the rename).  A *final* blob that no row names therefore never comes from a crash: it means the
  database lost state, and the store refuses to open (see below).
* The job spec (canonical JSON) and the closed flag are single committed transactions.
* The release record: first a marker file ``releases/<job>.release`` (job id and digest,
  participants digest, result shape and SHA-256) is created exclusively and fsync'd, then the row
  with the exact result bytes is committed.  The marker is the once-only record that losing the
  database cannot erase; a marker whose row is missing (a crash between the two) lets only the
  same participant set complete the release, and only with a result of the recorded SHA-256.

Integrity (never a wrong answer, never a deletion on a guess):

* every blob read is checked against its row's content digest, every release record against its
  marker; a mismatch raises :class:`StoreCorruptError` (gRPC ``DATA_LOSS``) naming the object;
* on open, a database that is missing or empty while ``blobs/`` or ``releases/`` hold files, a
  blob no row names, a release marker of a job the database does not know, or a committed blob
  that is missing or of the wrong size makes the store refuse to open (:class:`StoreCorruptError`,
  listing what it found); nothing is deleted.  :func:`ltm.server.fsck.check_directory` verifies a
  directory offline (``ltm server --check``), :func:`ltm.server.fsck.repair_directory` repairs it.
* If a COMMIT itself fails the store cannot know whether the transaction reached the disk; it then
  refuses every further write (:class:`StoreError`) until it is reopened, which re-derives the state
  from what is actually on disk.

Thread-safety: ONE SQLite connection (``check_same_thread=False``) guarded by one
``threading.Lock``; every database access holds it.  The expensive part of an upload — writing
and fsyncing the blob — runs outside the lock, so concurrent uploads overlap their data I/O and
serialise only rename + directory fsync + commit.  All methods block (fsync): from ``asyncio``
code call them through ``asyncio.to_thread`` / an executor.  Because the check-then-write of the
core is not atomic under concurrency, ``put_batch`` re-checks under the lock that the key is new,
the job is open and no cell is already held, and raises :class:`~ltm.errors.ProtocolError`
otherwise (the same codes the core uses), so a race can never double-count a client.

``batches(job_id)`` snapshots the job's batch metadata (ordered by ``(party_id, batch_index)``) and
then loads one blob at a time (``np.fromfile``), so share data in memory is O(one batch).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import sys
import threading
from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path

import numpy as np

from ltm.batch import ShareBatch
from ltm.errors import DataLossError, LtmError, ProtocolError
from ltm.jobspec import JobSpec
from ltm.server.coverage import Coverage
from ltm.server.replicated import part_shape
from ltm.server.store import ReleaseRecord, StoredBatch, cancelled_message
from ltm.sharing import SEED_BYTES, Share
from ltm.transport.files import PRIVATE_FILE_MODE, create_private, fsync_dir, private_dir, touch_private

try:  # POSIX advisory locks; without fcntl the single-process rule is not enforced
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

SCHEMA_VERSION = 1
DB_NAME = "server.db"
BLOB_DIR = "blobs"
RELEASE_DIR = "releases"
RELEASE_SUFFIX = ".release"
MARKER_VERSION = 1
LOCK_NAME = "LOCK"
BLOB_SUFFIX = ".u64"
TMP_SUFFIX = ".tmp"
_LE_U64 = np.dtype("<u8")

_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE jobs (
    job_id    TEXT PRIMARY KEY,
    spec_json TEXT NOT NULL,
    digest    TEXT NOT NULL,
    closed    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE batches (
    job_id         TEXT NOT NULL REFERENCES jobs(job_id),
    party_id       TEXT NOT NULL,
    batch_index    INTEGER NOT NULL,
    start          INTEGER NOT NULL,
    stop           INTEGER NOT NULL,
    columns        TEXT NOT NULL,
    server         INTEGER NOT NULL,
    shape          TEXT NOT NULL,
    content_digest TEXT NOT NULL,
    seed           BLOB NULL,
    blob_path      TEXT NULL,
    seeded         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, party_id, batch_index),
    CHECK ((seed IS NULL) <> (blob_path IS NULL))
);
CREATE UNIQUE INDEX batches_blob_path ON batches(blob_path);
CREATE TABLE releases (
    job_id              TEXT PRIMARY KEY REFERENCES jobs(job_id),
    participants_digest TEXT NOT NULL,
    shape               TEXT NOT NULL,
    result              BLOB NOT NULL
);
"""

#: Jobs whose release marker survived a lost database, recorded by ``ltm server --repair``: their
#: ids stay retired (a job id is released at most once, whatever happened to the database).
_RETIRED = """CREATE TABLE IF NOT EXISTS retired_jobs (job_id TEXT PRIMARY KEY, marker TEXT NOT NULL)"""
#: A verified replicated job's clipping checks (issue #30): this server's post-close seed, drawn once,
#: and its verdict, decided once (server/core.py).  Created on open, so older stores gain it.
_CHECKS = """CREATE TABLE IF NOT EXISTS check_values (job_id TEXT NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (job_id, name))"""

_BATCH_COLUMNS = ("party_id, batch_index, start, stop, columns, server, shape, content_digest, seed, blob_path, "
                  "seeded")


class StoreError(LtmError, RuntimeError):
    """The store cannot be used: bad directory, in use elsewhere, wrong schema, failed or closed."""

    exit_code = 3  # `ltm server` refuses to start (docs/servers.md)


class StoreCorruptError(StoreError, DataLossError):
    """Stored state is damaged or inconsistent (a blob or release record does not match its digest,
    a committed blob is missing, files the database does not know): refused, never served."""


_SAFE = re.compile(r"[A-Za-z0-9_-]")


def path_component(name: str) -> str:
    """An injective, file-system-safe directory name for an id.

    Characters outside ``[A-Za-z0-9_-]`` (including ``.``, ``/`` and ``%``) become ``%XX`` per
    UTF-8 byte, so distinct ids never share a directory and ``.``/``..`` cannot occur.  Names that
    would be longer than 120 characters become ``%h`` + SHA-256 (never the output of escaping).
    """
    out = "".join(c if _SAFE.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode()) for c in name)
    if not out or len(out) > 120:
        out = "%h" + sha256(name.encode()).hexdigest()
    return out


def _as_int_tuple(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


class SqliteStore:
    """Durable :class:`~ltm.server.store.ServerStore` in one directory (see module docstring).

    Use as a context manager or call :meth:`close`; only one open store per directory (also
    within one process) — a second open raises :class:`StoreError` until the first is closed.
    """

    def __init__(self, directory: str | os.PathLike[str], *, recover: bool = True) -> None:
        """Open (or create) the store in ``directory``.  ``recover=False`` (offline checks) leaves
        crash leftovers (temp files) as they are instead of finishing or removing them."""
        self.directory = Path(directory)
        self._recover = recover
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._lock_file = None
        self._failed: BaseException | None = None
        self._jobs: dict[str, JobSpec] = {}
        self._retired: set[str] = set()
        self._cancelled: dict[str, str] = {}  # job id → why the analyst cancelled it (retired too)
        self._closed_jobs: set[str] = set()
        self._coverage: dict[str, Coverage] = {}
        self._durable_dirs: set[Path] = set()
        try:
            self._open_directory()
            self._open_database()
            self._load_state()
        except BaseException:
            self._close_handles()
            raise

    # ------------------------------------------------------------------ opening
    def _open_directory(self) -> None:
        d = self.directory
        if d.exists() and not d.is_dir():
            raise StoreError(f"store path {str(d)!r} exists but is not a directory")
        try:
            private_dir(d)
        except OSError as exc:
            raise StoreError(f"cannot create store directory {str(d)!r} (0700): {exc.strerror or exc}") from exc
        if not os.access(d, os.R_OK | os.W_OK | os.X_OK):
            raise StoreError(f"store directory {str(d)!r} is not readable and writable by this process "
                             f"(uid {os.getuid() if hasattr(os, 'getuid') else '?'})")
        try:
            self._lock_file = open(touch_private(d / LOCK_NAME), "a+b")
        except OSError as exc:
            raise StoreError(f"cannot open lock file in store directory {str(d)!r}: {exc.strerror or exc}") from exc
        if fcntl is not None:
            try:
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreError(f"store directory {str(d)!r} is in use by another SqliteStore (another server "
                                 f"process, or a store in this process not yet closed)") from None
        lost = _database_lost(d)
        if lost:
            raise StoreCorruptError(lost)
        for sub in (BLOB_DIR, RELEASE_DIR):
            try:
                private_dir(d / sub)
            except OSError as exc:
                raise StoreError(f"cannot create directory {str(d / sub)!r}: {exc.strerror or exc}") from exc
            self._durable_dirs.add(d / sub)

    def _open_database(self) -> None:
        path = self.directory / DB_NAME
        try:
            touch_private(path)  # SQLite gives its -wal and -shm files the database file's mode
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
            self._conn = conn
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"SQLite refused WAL mode for {str(path)!r} (got {mode!r}); the file system "
                                 f"must support shared memory / mmap")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "schema_version" not in tables:
                if tables:
                    raise StoreError(f"{str(path)!r} is an SQLite database of something else "
                                     f"(tables {sorted(tables)}); point the server at its own directory")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                fsync_dir(self.directory)  # the new database file's directory entry
            else:
                rows = conn.execute("SELECT version FROM schema_version").fetchall()
                if [tuple(r) for r in rows] != [(SCHEMA_VERSION,)]:
                    raise StoreError(f"{str(path)!r} has schema version {[r[0] for r in rows]}, this server "
                                     f"understands version {SCHEMA_VERSION}")
                batch_columns = {r[1] for r in conn.execute("PRAGMA table_info(batches)")}
                if "seeded" not in batch_columns:  # a store made before uploads declared their randomness
                    conn.execute("ALTER TABLE batches ADD COLUMN seeded INTEGER NOT NULL DEFAULT 0")
            conn.execute(_RETIRED)
            conn.execute(_CHECKS)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open store database {str(path)!r}: {exc}") from exc

    def _load_state(self) -> None:
        conn = self._conn
        assert conn is not None
        for job_id, spec_json, digest, closed in conn.execute("SELECT job_id, spec_json, digest, closed FROM jobs"):
            try:
                spec = JobSpec.from_json(spec_json)
            except ValueError as exc:
                raise StoreCorruptError(f"stored spec of job {job_id!r} cannot be parsed: {exc}") from exc
            if spec.digest != digest or spec.job_id != job_id:
                raise StoreCorruptError(f"stored spec of job {job_id!r} does not match its digest {digest[:12]}…")
            self._jobs[job_id] = spec
            self._coverage[job_id] = Coverage(spec.n, spec.upload_width)
            if closed:
                self._closed_jobs.add(job_id)
        referenced: dict[str, int] = {}
        for job_id, start, stop, columns, shape, blob_path in conn.execute(
                "SELECT job_id, start, stop, columns, shape, blob_path FROM batches"):
            self._coverage[job_id].add(start, stop, json.loads(columns))
            if blob_path is not None:
                referenced[blob_path] = int(np.prod(json.loads(shape), dtype=np.int64)) * 8
        released = {r[0] for r in conn.execute("SELECT job_id FROM releases")}
        for job_id, marker in conn.execute("SELECT job_id, marker FROM retired_jobs"):
            self._retired.add(job_id)
            why = _cancel_reason(marker)
            if why is not None:
                self._cancelled[job_id] = why
        pending, stale, problems = _scan(self.directory, referenced, set(self._jobs) | self._retired, released,
                                         set(self._cancelled))
        if problems:
            raise StoreCorruptError(_refusal(self.directory, problems))
        if not self._recover:
            return
        for tmp, final in pending:  # committed, not yet renamed when the process stopped
            os.replace(tmp, final)
            fsync_dir(final.parent)
        for tmp in stale:  # never committed, so never acknowledged
            tmp.unlink(missing_ok=True)

    # ------------------------------------------------------------------ plumbing
    def _check_usable(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {str(self.directory)!r} is closed")
        if self._failed is not None:
            raise StoreError(f"store {str(self.directory)!r} stopped accepting writes after a failed commit "
                             f"({self._failed!r}); restart the server to recover from the on-disk state")
        return self._conn

    def _reader(self) -> sqlite3.Connection:
        """The connection for reads (allowed after a failed commit, not after close)."""
        if self._conn is None:
            raise StoreError(f"store {str(self.directory)!r} is closed")
        return self._conn

    def _commit(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            # Whether the transaction reached the disk is unknown: stop writing until a reopen.
            self._failed = exc
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise

    def _job(self, job_id: str) -> JobSpec:
        spec = self._jobs.get(job_id)
        if spec is None:
            raise KeyError(job_id)
        return spec

    def _ensure_dir(self, path: Path) -> None:
        """Create ``path`` (under blobs/) if needed; every new entry's parent directory is fsynced."""
        if path in self._durable_dirs:
            return
        self._ensure_dir(path.parent)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        os.chmod(path, 0o700)
        fsync_dir(path.parent)
        self._durable_dirs.add(path)

    # ------------------------------------------------------------------ jobs
    def put_job(self, spec: JobSpec) -> None:
        """Store a job spec (canonical JSON).  Re-putting the identical spec is a no-op."""
        canonical = spec.canonical_json()
        parsed = JobSpec.from_json(canonical)
        if parsed.digest != spec.digest:
            raise ValueError(f"job spec {spec.job_id!r} does not survive a JSON round trip; cannot store it")
        with self._lock:
            conn = self._check_usable()
            if spec.job_id in self._cancelled:
                raise ProtocolError("FAILED_PRECONDITION", cancelled_message(spec.job_id, self._cancelled[spec.job_id]))
            if spec.job_id in self._retired:
                raise ProtocolError("FAILED_PRECONDITION", f"job id {spec.job_id!r} was released on this server "
                                                           f"before its database was lost (release marker kept); "
                                                           f"a job id is released once: choose a new job id")
            existing = self._jobs.get(spec.job_id)
            if existing is not None:
                if existing.digest == spec.digest:
                    return
                raise ProtocolError("ALREADY_EXISTS", f"job {spec.job_id!r} exists with a different spec "
                                                      f"(digest {existing.digest[:12]}…); choose a new job id")
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT INTO jobs(job_id, spec_json, digest, closed) VALUES (?, ?, ?, 0)",
                             (spec.job_id, canonical.decode("utf-8"), spec.digest))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)
            self._jobs[spec.job_id] = parsed
            self._coverage[spec.job_id] = Coverage(parsed.n, parsed.upload_width)

    def get_job(self, job_id: str) -> JobSpec | None:
        """The stored spec of ``job_id`` (None if this store never held it)."""
        return self._jobs.get(job_id)

    def job_count(self) -> int:
        """How many jobs the store holds."""
        return len(self._jobs)

    def set_closed(self, job_id: str) -> None:
        """Record (durably, committed before returning) that the job's intake is closed; idempotent."""
        with self._lock:
            conn = self._check_usable()
            self._job(job_id)
            if job_id in self._closed_jobs:
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("UPDATE jobs SET closed = 1 WHERE job_id = ?", (job_id,))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)
            self._closed_jobs.add(job_id)

    def is_closed(self, job_id: str) -> bool:
        """Whether the job's intake is closed."""
        return job_id in self._closed_jobs

    def cancelled(self, job_id: str) -> str | None:
        """Why the analyst cancelled ``job_id`` (None: not cancelled)."""
        return self._cancelled.get(job_id)

    def cancel_job(self, job_id: str, reason: str) -> bool:
        """Drop the job (its batches, release row and spec) and retire its id for good, in one
        committed transaction; then delete its blobs (a crash before that leaves files the next open
        removes: the job is cancelled).  A release marker stays (the once-only record).  Works for an
        id this store never held too (it is retired).  Returns False if it was cancelled already."""
        with self._lock:
            conn = self._check_usable()
            if job_id in self._cancelled:
                return False
            marker = json.dumps({"cancelled": True, "reason": reason}, sort_keys=True)
            conn.execute("BEGIN IMMEDIATE")
            try:
                for table in ("batches", "releases", "jobs"):
                    conn.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
                conn.execute("INSERT OR REPLACE INTO retired_jobs(job_id, marker) VALUES (?, ?)", (job_id, marker))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)
            self._cancelled[job_id] = reason
            self._retired.add(job_id)
            self._jobs.pop(job_id, None)
            self._coverage.pop(job_id, None)
            self._closed_jobs.discard(job_id)
        _remove_tree(self.directory / BLOB_DIR / path_component(job_id))
        return True

    # ------------------------------------------------------------------ batches
    def get_batch_digest(self, job_id: str, party_id: str, batch_index: int) -> str | None:
        """The stored content digest (hex) of a party's batch, or None if that batch is not stored."""
        with self._lock:
            conn = self._reader()
            self._job(job_id)
            row = conn.execute("SELECT content_digest FROM batches WHERE job_id = ? AND party_id = ? AND "
                               "batch_index = ?", (job_id, party_id, int(batch_index))).fetchone()
        return row[0] if row else None

    def seeded_parties(self, job_id: str) -> list[str]:
        """Parties with seeded (NOT private) batches in the job, sorted."""
        with self._lock:
            conn = self._reader()
            self._job(job_id)
            rows = conn.execute("SELECT DISTINCT party_id FROM batches WHERE job_id = ? AND seeded = 1 "
                                "ORDER BY party_id", (job_id,)).fetchall()
        return [r[0] for r in rows]

    def batch_count(self, job_id: str) -> int:
        """Number of stored batches of a job (no share data is read)."""
        with self._lock:
            conn = self._reader()
            self._job(job_id)
            return int(conn.execute("SELECT COUNT(*) FROM batches WHERE job_id = ?", (job_id,)).fetchone()[0])

    def _validate_batch(self, spec: JobSpec, batch: ShareBatch) -> None:
        if batch.job_digest != spec.digest:
            raise ValueError(f"batch names job digest {batch.job_digest[:12]}…, the stored job "
                             f"{spec.job_id!r} has {spec.digest[:12]}…")
        if not 0 <= batch.start < batch.stop <= spec.n:
            raise ValueError(f"batch clients [{batch.start}, {batch.stop}) outside [0, {spec.n})")
        if not batch.columns or any(not 0 <= c < spec.upload_width for c in batch.columns):
            raise ValueError(f"batch columns {batch.columns} outside [0, {spec.upload_width})")
        shape = _as_int_tuple(batch.share.shape)
        if spec.replicated:  # one of a party's three wire parts (server/replicated.py)
            expected = part_shape(spec, int(batch.batch_index), spec.party(batch.party_id))
            if shape != expected:
                raise ValueError(f"replicated part {batch.batch_index} has shape {shape}, expected {expected}")
        elif spec.aggregated:  # one party's (1, m, columns) partial of the map (party/aggregate.py)
            if shape != (1, spec.sketch.m, len(batch.columns)):
                raise ValueError(f"aggregate share shape {shape} is not (1, m, {len(batch.columns)})")
        elif len(shape) != 3 or shape[1:] != (batch.count, len(batch.columns)):
            raise ValueError(f"share shape {shape} is not (pieces, {batch.count}, {len(batch.columns)})")
        if batch.share.data is not None and batch.share.data.dtype != np.uint64:
            raise ValueError(f"share dtype {batch.share.data.dtype} != uint64")
        if batch.share.seed is not None and len(batch.share.seed) != SEED_BYTES:
            raise ValueError(f"share seeds are {SEED_BYTES} bytes")

    def _write_temp_blob(self, final: Path, data: np.ndarray) -> Path:
        self._ensure_dir(final.parent)
        tmp = final.with_name(f"{final.name}.{secrets.token_hex(8)}{TMP_SUFFIX}")
        arr = np.ascontiguousarray(data, dtype=_LE_U64)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
        try:
            os.fchmod(fd, PRIVATE_FILE_MODE)
            with os.fdopen(fd, "wb", closefd=True) as f:
                if arr.size:
                    f.write(memoryview(arr.reshape(-1)).cast("B"))
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return tmp

    def put_batch(self, job_id: str, stored: StoredBatch) -> None:
        """Durably store one batch; returns only after the blob (if any) and the row are on disk.

        An identical re-put (same key, same content digest) is a no-op.  Raises ProtocolError
        ALREADY_EXISTS for a different batch under the same key or for clients already held, and
        FAILED_PRECONDITION if the job is closed; nothing is stored then.
        """
        batch = stored.batch
        with self._lock:
            self._check_usable()
            spec = self._job(job_id)
        self._validate_batch(spec, batch)
        shape = _as_int_tuple(batch.share.shape)
        columns = _as_int_tuple(batch.columns)
        seed: bytes | None = None
        rel: str | None = None
        final: Path | None = None
        tmp: Path | None = None
        if batch.share.seed is not None:
            seed = bytes(batch.share.seed)
        else:
            rel = (f"{BLOB_DIR}/{path_component(job_id)}/{path_component(batch.party_id)}/"
                   f"{int(batch.batch_index)}{BLOB_SUFFIX}")
            final = self.directory / rel
            tmp = self._write_temp_blob(final, batch.share.data)  # the slow part, outside the lock
        try:
            with self._lock:
                conn = self._check_usable()
                row = conn.execute("SELECT content_digest FROM batches WHERE job_id = ? AND party_id = ? AND "
                                   "batch_index = ?", (job_id, batch.party_id, int(batch.batch_index))).fetchone()
                if row is not None:
                    if row[0] == stored.content_digest:
                        return
                    raise ProtocolError("ALREADY_EXISTS", f"batch {batch.batch_index} of party {batch.party_id!r} "
                                                          f"was already stored with different content; a batch "
                                                          f"cannot be replaced")
                if job_id in self._closed_jobs:
                    raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} is closed to uploads")
                coverage = self._coverage[job_id]
                if not spec.replicated and coverage.overlaps(batch.start, batch.stop, columns):
                    raise ProtocolError("ALREADY_EXISTS", f"clients [{batch.start}, {batch.stop}) of party "
                                                          f"{batch.party_id!r} were already uploaded in another "
                                                          f"batch; refusing to count them twice")
                if rel is not None:
                    if conn.execute("SELECT 1 FROM batches WHERE blob_path = ?", (rel,)).fetchone():
                        raise StoreCorruptError(f"blob path {rel!r} is already used by another batch")
                    if final.exists():
                        raise StoreCorruptError(f"blob {rel!r} exists but no stored batch names it; "
                                                f"run `ltm server --check` on {str(self.directory)!r}")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(f"INSERT INTO batches(job_id, {_BATCH_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                                 (job_id, batch.party_id, int(batch.batch_index), int(batch.start), int(batch.stop),
                                  json.dumps(list(columns)), int(batch.server), json.dumps(list(shape)),
                                  stored.content_digest, seed, rel, int(batch.seeded)))
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                try:
                    self._commit(conn)
                except BaseException:
                    tmp = None  # the row may be on disk after all: keep its temp blob (a reopen decides)
                    raise
                if rel is not None:
                    try:
                        os.replace(tmp, final)
                        fsync_dir(final.parent)
                    except BaseException as exc:
                        self._failed = exc  # committed but not in place: a reopen finishes the rename
                        tmp = None
                        raise
                coverage.add(batch.start, batch.stop, columns)  # memory only after the commit
                tmp = None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def _load_batch(self, job_id: str, job_digest: str, row: tuple, aggregate: bool = False) -> ShareBatch:
        """One stored batch, checked against its content digest (DATA_LOSS on any mismatch)."""
        batch = self._read_batch(job_digest, row, aggregate)
        if batch.content_digest() != row[7]:
            what = f"blob {row[9]!r}" if row[9] is not None else "helper-share seed row"
            raise StoreCorruptError(f"batch {row[1]} of party {row[0]!r} in job {job_id!r} ({what}) does not match "
                                    f"its stored content digest {row[7][:16]}…: the stored share is damaged; "
                                    f"refusing to use it (run `ltm server --check`)")
        return batch

    def _read_batch(self, job_digest: str, row: tuple, aggregate: bool = False) -> ShareBatch:
        party_id, batch_index, start, stop, columns, server, shape, _digest, seed, blob_path, seeded = row
        shape = tuple(json.loads(shape))
        if seed is not None:
            share = Share(server, shape, seed=bytes(seed))
        else:
            path = self.directory / blob_path
            count = int(np.prod(shape, dtype=np.int64))
            try:
                data = np.fromfile(path, dtype=_LE_U64)
            except FileNotFoundError:
                raise StoreCorruptError(f"committed batch blob {blob_path!r} is missing") from None
            if data.size != count:
                raise StoreCorruptError(f"committed batch blob {blob_path!r} holds {data.size} values, "
                                        f"expected {count}")
            if sys.byteorder != "little":  # pragma: no cover
                data = data.astype(np.uint64)
            share = Share(server, shape, data=data.view(np.uint64).reshape(shape))
        # ``aggregate`` is the job's upload mode (the server accepted only batches that match it).
        return ShareBatch(job_digest, party_id, batch_index, start, stop, tuple(json.loads(columns)), share,
                          seeded=bool(seeded), aggregate=aggregate)

    def batches(self, job_id: str) -> Iterator[ShareBatch]:
        """The job's batches ordered by (party_id, batch_index); blobs are read one at a time."""
        for stored in self.stored_batches(job_id):
            yield stored.batch

    def stored_batches(self, job_id: str) -> Iterator[StoredBatch]:
        """Like :meth:`batches`, with each batch's stored content digest."""
        with self._lock:
            conn = self._reader()
            spec = self._job(job_id)
            rows = conn.execute(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE job_id = ? "
                                f"ORDER BY party_id, batch_index", (job_id,)).fetchall()
        for row in rows:
            yield StoredBatch(self._load_batch(job_id, spec.digest, row, spec.aggregated), row[7])

    def verify(self, job_id: str | None = None) -> int:
        """Recompute every stored batch's content digest (all jobs by default); returns the count checked."""
        checked = 0
        for jid in ([job_id] if job_id is not None else sorted(self._jobs)):
            for stored in self.stored_batches(jid):
                if stored.batch.content_digest() != stored.content_digest:
                    raise StoreCorruptError(f"batch {stored.batch.batch_index} of party {stored.batch.party_id!r} "
                                            f"in job {jid!r} does not match its stored content digest")
                checked += 1
        return checked

    def coverage(self, job_id: str) -> Coverage:
        """A snapshot of the job's held cells (rebuilt from the batches table on open)."""
        with self._lock:
            return self._coverage[job_id].copy()

    # ------------------------------------------------------------------ release
    def _marker_path(self, job_id: str) -> Path:
        return self.directory / RELEASE_DIR / f"{path_component(job_id)}{RELEASE_SUFFIX}"

    def _read_marker(self, job_id: str) -> dict | None:
        path = self._marker_path(job_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        marker = _parse_marker(raw)
        if marker is None or marker["job_id"] != job_id:
            raise StoreCorruptError(f"release marker {path.relative_to(self.directory).as_posix()!r} of job "
                                    f"{job_id!r} is damaged; refusing to release or serve the job")
        return marker

    def _marker_for(self, job_id: str, record_digest: str, shape: list[int], payload: bytes) -> dict:
        return {"version": MARKER_VERSION, "job_id": job_id, "job_digest": self._job(job_id).digest,
                "participants_digest": record_digest, "shape": shape,
                "result_sha256": sha256(payload).hexdigest()}

    def get_check_value(self, job_id: str, name: str) -> bytes | None:
        """A recorded value of the job's clipping checks, or None."""
        with self._lock:
            row = self._reader().execute("SELECT value FROM check_values WHERE job_id = ? AND name = ?",
                                         (job_id, name)).fetchone()
        return None if row is None else bytes(row[0])

    def put_check_value(self, job_id: str, name: str, value: bytes) -> bytes:
        """Record a check value once, committed before returning (the first write wins: a seed is drawn
        once, a verdict decided once); returns the stored value."""
        with self._lock:
            conn = self._check_usable()
            self._job(job_id)
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT OR IGNORE INTO check_values (job_id, name, value) VALUES (?, ?, ?)",
                             (job_id, name, bytes(value)))
                row = conn.execute("SELECT value FROM check_values WHERE job_id = ? AND name = ?",
                                   (job_id, name)).fetchone()
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)
        return bytes(row[0])

    def get_release(self, job_id: str) -> ReleaseRecord | None:
        """The release record, checked against its marker (:class:`StoreCorruptError` on any
        mismatch).  A marker without its row (a crash between the two) gives a record whose
        ``result`` is None: only the same participant set may complete that release."""
        with self._lock:
            conn = self._reader()
            row = conn.execute("SELECT participants_digest, shape, result FROM releases WHERE job_id = ?",
                               (job_id,)).fetchone()
            spec = self._jobs.get(job_id)
        marker = self._read_marker(job_id)
        if row is None:
            return None if marker is None else ReleaseRecord(marker["participants_digest"], None)
        pdigest, shape, result = row
        result = bytes(result)
        where = f"release record of job {job_id!r} in {DB_NAME}"
        if marker is None:
            raise StoreCorruptError(f"{where} has no release marker "
                                    f"{self._marker_path(job_id).relative_to(self.directory).as_posix()!r}; "
                                    f"refusing to serve it (run `ltm server --check`)")
        expected = {**marker, "participants_digest": pdigest, "shape": json.loads(shape),
                    "result_sha256": sha256(result).hexdigest(),
                    "job_digest": spec.digest if spec is not None else None}
        if marker != expected:
            bad = sorted(k for k in marker if marker[k] != expected[k])
            raise StoreCorruptError(f"{where} does not match its release marker ({', '.join(bad)} differ): the "
                                    f"stored release was altered; refusing to serve it")
        array = np.frombuffer(result, dtype=_LE_U64).astype(np.uint64).reshape(tuple(json.loads(shape)))
        return ReleaseRecord(pdigest, array)

    def put_release(self, job_id: str, record: ReleaseRecord) -> None:
        """Record the once-only release: the fsync'd marker first, then the row with the result bytes.

        Re-putting the identical record is a no-op; a different one raises ProtocolError
        FAILED_PRECONDITION (a release is never replaced).  Completing a marker left without its
        row requires the marker's participant set and result SHA-256 (else DATA_LOSS)."""
        result = np.asarray(record.result)
        if result.dtype != np.uint64 or result.ndim != 2:
            raise ValueError(f"a release result is a 2-D uint64 array, got {result.dtype} {result.shape}")
        payload = np.ascontiguousarray(result, dtype=_LE_U64).tobytes()
        shape_list = [int(s) for s in result.shape]
        shape = json.dumps(shape_list)
        with self._lock:
            conn = self._check_usable()
            self._job(job_id)
            row = conn.execute("SELECT participants_digest, shape, result FROM releases WHERE job_id = ?",
                               (job_id,)).fetchone()
            if row is not None:
                if (row[0], row[1], bytes(row[2])) == (record.participants_digest, shape, payload):
                    return
                raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} has already been released once; "
                                                           f"its release record cannot be replaced")
            marker = self._marker_for(job_id, record.participants_digest, shape_list, payload)
            existing = self._read_marker(job_id)
            if existing is None:
                create_private(self._marker_path(job_id), json.dumps(marker, sort_keys=True))
            elif existing["participants_digest"] != record.participants_digest:
                raise ProtocolError("FAILED_PRECONDITION", f"job {job_id!r} has already been released once "
                                                           f"(release marker); its release cannot be replaced")
            elif existing != marker:
                raise StoreCorruptError(f"the release of job {job_id!r} recomputed from the stored shares does not "
                                        f"match its release marker: stored state changed; refusing to release")
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT INTO releases(job_id, participants_digest, shape, result) VALUES (?, ?, ?, ?)",
                             (job_id, record.participants_digest, shape, payload))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)

    def check(self) -> tuple[list[str], dict[str, int]]:
        """Read and verify everything (every blob against its digest, every release record against
        its marker); returns (problems, counts).  Used by ``ltm server --check``."""
        problems: list[str] = []
        counts = {"jobs": len(self._jobs), "batches": 0, "releases": 0}
        for job_id in sorted(self._jobs):
            with self._lock:
                spec = self._job(job_id)
                rows = self._reader().execute(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE job_id = ? "
                                              f"ORDER BY party_id, batch_index", (job_id,)).fetchall()
            for row in rows:
                counts["batches"] += 1
                try:
                    self._load_batch(job_id, spec.digest, row, spec.aggregated)
                except StoreCorruptError as exc:
                    problems.append(str(exc))
            try:
                if self.get_release(job_id) is not None:
                    counts["releases"] += 1
            except StoreCorruptError as exc:
                problems.append(str(exc))
        return problems, counts

    # ------------------------------------------------------------------ lifecycle
    def _close_handles(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
        if self._lock_file is not None:
            try:
                if fcntl is not None:
                    fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
                self._lock_file.close()
            finally:
                self._lock_file = None

    def close(self) -> None:
        """Close the database and release the directory lock (idempotent)."""
        with self._lock:
            self._close_handles()

    def __enter__(self) -> "SqliteStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.directory)!r})"


# ---------------------------------------------------------------------- open-time checks
def _cancel_reason(marker: str) -> str | None:
    """The reason in a ``retired_jobs`` marker written by a cancel (None: a release marker)."""
    try:
        obj = json.loads(marker)
    except ValueError:
        return None
    return str(obj.get("reason", "")) if isinstance(obj, dict) and obj.get("cancelled") is True else None


def _remove_tree(root: Path) -> None:
    """Delete ``root`` and everything under it (a cancelled job's blobs), fsyncing its parent."""
    import shutil

    if root.exists():
        shutil.rmtree(root, ignore_errors=True)
        fsync_dir(root.parent)


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if not p.is_dir()) if root.is_dir() else []


def _database_lost(d: Path) -> str | None:
    """Why the directory must not be opened with a fresh database (None: it may)."""
    db, wal = d / DB_NAME, d / f"{DB_NAME}-wal"
    has = (lambda p: p.is_file() and p.stat().st_size > 0)
    if has(db) or has(wal):
        return None
    blobs, markers = _files_under(d / BLOB_DIR), _files_under(d / RELEASE_DIR)
    if not blobs and not markers:
        return None
    state = "empty" if db.exists() else "missing"
    return (f"store directory {str(d)!r} holds {len(blobs)} blob file(s) and {len(markers)} release marker(s) but "
            f"its database {DB_NAME} is {state}: refusing to start, because a fresh database would forget "
            f"acknowledged shares and the once-only release record. Restore {DB_NAME} (with its -wal file) or "
            f"move the directory aside; nothing was deleted")


def _parse_marker(raw: bytes) -> dict | None:
    try:
        marker = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    keys = {"version", "job_id", "job_digest", "participants_digest", "shape", "result_sha256"}
    if not isinstance(marker, dict) or set(marker) != keys or not isinstance(marker["job_id"], str):
        return None
    return marker


def _temp_target(name: str) -> str | None:
    """``7.u64.<hex>.tmp`` → ``7.u64`` (None if ``name`` is not a store temp file)."""
    if not name.endswith(TMP_SUFFIX):
        return None
    stem = name[:-len(TMP_SUFFIX)]
    base, dot, token = stem.rpartition(".")
    return base if dot and base.endswith(BLOB_SUFFIX) and re.fullmatch(r"[0-9a-f]+", token) else None


def _scan(d: Path, referenced: dict[str, int], jobs: set[str], released: set[str],
          cancelled: set[str] = frozenset()):
    """Compare the files under ``d`` with what the database names.

    Returns (pending renames [(tmp, final)], stale files, problems).  Problems (unknown blobs,
    missing or wrong-size committed blobs, markers of unknown jobs, damaged markers) refuse the open.
    Blobs of a ``cancelled`` job are stale (a crash between the cancel's commit and their removal)."""
    pending: list[tuple[Path, Path]] = []
    stale: list[Path] = []
    problems: list[str] = []
    present: set[str] = set()
    temps: list[tuple[Path, str]] = []
    dropped = {path_component(j) for j in cancelled}
    for p in _files_under(d / BLOB_DIR):
        rel = p.relative_to(d).as_posix()
        target = _temp_target(p.name)
        if p.relative_to(d / BLOB_DIR).parts[0] in dropped:
            stale.append(p)
        elif target is not None:
            temps.append((p, p.with_name(target).relative_to(d).as_posix()))
        elif rel in referenced:
            present.add(rel)
            size = p.stat().st_size
            if size != referenced[rel]:
                problems.append(f"committed batch blob {rel!r} has {size} bytes, expected {referenced[rel]}")
        else:
            problems.append(f"blob {rel!r} is not named by any stored batch")
    for p, rel in temps:
        if rel in referenced and rel not in present and p.stat().st_size == referenced[rel]:
            pending.append((p, d / rel))
            present.add(rel)
        else:
            stale.append(p)
    for rel in sorted(set(referenced) - present):
        problems.append(f"committed batch blob {rel!r} is missing from {str(d)!r}")
    marker_problems: list[str] = []  # listed first: they name the once-only records
    for p in _files_under(d / RELEASE_DIR):
        rel = p.relative_to(d).as_posix()
        if p.name.startswith(".") and p.name.endswith(TMP_SUFFIX):
            stale.append(p)  # create_private's temp file: the marker never appeared
            continue
        marker = _parse_marker(p.read_bytes()) if p.name.endswith(RELEASE_SUFFIX) else None
        if marker is None:
            marker_problems.append(f"release marker {rel!r} is damaged or not a release marker")
        elif marker["job_id"] not in jobs:
            marker_problems.append(f"release marker {rel!r} records a release of job {marker['job_id']!r}, which the "
                            f"database does not know")
        elif p.name != f"{path_component(marker['job_id'])}{RELEASE_SUFFIX}":
            marker_problems.append(f"release marker {rel!r} names job {marker['job_id']!r}, whose marker has another name")
    return pending, stale, marker_problems + problems


def _refusal(d: Path, problems: list[str]) -> str:
    shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    return (f"store directory {str(d)!r} does not match its database ({len(problems)} problem(s)): {shown}. "
            f"Refusing to start; nothing was deleted (see `ltm server --check --data-dir {d}`)")

"""Server state: jobs, accepted batches, coverage, the closed flag and the release record.

:class:`ServerStore` is the interface the server core needs; :class:`MemoryStore` keeps everything
in memory (simulations, tests).  A durable implementation writes each item before returning, so
the core acknowledges nothing that a crash could lose.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ltm.batch import ShareBatch
from ltm.jobspec import JobSpec
from ltm.server.coverage import Coverage


@dataclass(frozen=True)
class StoredBatch:
    batch: ShareBatch
    content_digest: str


@dataclass(frozen=True)
class ReleaseRecord:
    """The once-only release: which participant set it was for and the exact bytes returned."""

    participants_digest: str
    #: uint64 (m, D); None when only the durable release marker survives (a crash between the
    #: marker and the record): then only the same participant set may complete the release
    result: np.ndarray | None


def cancelled_message(job_id: str, reason: str) -> str:
    """What every request naming a cancelled job is told (FAILED_PRECONDITION)."""
    why = f" ({reason})" if reason else ""
    return (f"job {job_id!r} was cancelled by the analyst{why}; its id is retired: submit the job again "
            f"under a new job id")


class ServerStore(Protocol):
    def put_job(self, spec: JobSpec) -> None:
        """Store a job spec (durably in a durable store) before the core acknowledges it."""

    def get_job(self, job_id: str) -> JobSpec | None:
        """The spec of ``job_id``, or None if the store does not hold it."""

    def job_count(self) -> int:
        """How many jobs the store holds (``max_jobs`` is checked against it)."""

    def get_batch_digest(self, job_id: str, party_id: str, batch_index: int) -> str | None:
        """The content digest of a stored batch (None: not stored); a re-upload must match it."""

    def batch_count(self, job_id: str) -> int:
        """How many batches of the job are stored."""

    def put_batch(self, job_id: str, stored: StoredBatch) -> None:
        """Store an accepted batch and add its cells to the job's coverage."""

    def batches(self, job_id: str) -> Iterator[ShareBatch]:
        """The job's stored batches, one at a time (share data in memory: one batch)."""

    def coverage(self, job_id: str) -> Coverage:
        """The job's held cells (which clients' columns are stored)."""

    def set_closed(self, job_id: str) -> None:
        """Record that the job's intake is closed."""

    def is_closed(self, job_id: str) -> bool:
        """Whether the job's intake is closed."""

    def get_release(self, job_id: str) -> ReleaseRecord | None:
        """The once-only release record of the job, or None before its release."""

    def put_release(self, job_id: str, record: ReleaseRecord) -> None:
        """Record the job's release (once: the participant set's digest and the result bytes)."""

    def seeded_parties(self, job_id: str) -> list[str]:
        """The sorted ids of the parties that uploaded seeded (reproducible, NOT private) batches."""

    def cancelled(self, job_id: str) -> str | None:
        """Why the analyst cancelled ``job_id`` (None: not cancelled)."""

    def cancel_job(self, job_id: str, reason: str) -> bool:
        """Drop the job and everything stored for it, and retire its id for good (also an id never
        held); False if it was cancelled already."""

    def get_check_value(self, job_id: str, name: str) -> bytes | None:
        """A value of the job's clipping checks (``seed``, ``verdict``; server/core.py), or None."""

    def put_check_value(self, job_id: str, name: str, value: bytes) -> bytes:
        """Record a check value once (durably): the first write wins; returns the stored value."""


class MemoryStore:
    """In-memory :class:`ServerStore` for simulations and tests (nothing survives the process)."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobSpec] = {}
        self._batches: dict[str, dict[tuple[str, int], StoredBatch]] = {}
        self._coverage: dict[str, Coverage] = {}
        self._closed: set[str] = set()
        self._releases: dict[str, ReleaseRecord] = {}
        self._cancelled: dict[str, str] = {}
        self._checks: dict[tuple[str, str], bytes] = {}

    def put_job(self, spec: JobSpec) -> None:
        """Hold ``spec`` with no batches and an empty coverage."""
        self._jobs[spec.job_id] = spec
        self._batches[spec.job_id] = {}
        self._coverage[spec.job_id] = Coverage(spec.n, spec.upload_width)

    def get_job(self, job_id: str) -> JobSpec | None:
        """The spec of ``job_id``, or None."""
        return self._jobs.get(job_id)

    def job_count(self) -> int:
        """How many jobs are held."""
        return len(self._jobs)

    def get_batch_digest(self, job_id: str, party_id: str, batch_index: int) -> str | None:
        """The content digest of a held batch, or None."""
        stored = self._batches[job_id].get((party_id, batch_index))
        return stored.content_digest if stored else None

    def batch_count(self, job_id: str) -> int:
        """How many batches of the job are held."""
        return len(self._batches[job_id])

    def put_batch(self, job_id: str, stored: StoredBatch) -> None:
        """Hold the batch (a re-put of the same key replaces it) and add its cells to the coverage."""
        self._batches[job_id][(stored.batch.party_id, stored.batch.batch_index)] = stored
        batch = stored.batch
        self._coverage[job_id].add(batch.start, batch.stop, batch.columns)

    def batches(self, job_id: str) -> Iterator[ShareBatch]:
        """The job's batches in the order they were first put."""
        for stored in self._batches[job_id].values():
            yield stored.batch

    def coverage(self, job_id: str) -> Coverage:
        """A snapshot of the job's held cells (a copy: callers cannot change the store's)."""
        return self._coverage[job_id].copy()

    def set_closed(self, job_id: str) -> None:
        """Mark the job's intake closed."""
        self._closed.add(job_id)

    def is_closed(self, job_id: str) -> bool:
        """Whether the job's intake is closed."""
        return job_id in self._closed

    def get_release(self, job_id: str) -> ReleaseRecord | None:
        """The job's release record, or None."""
        return self._releases.get(job_id)

    def put_release(self, job_id: str, record: ReleaseRecord) -> None:
        """Hold the job's release record."""
        self._releases[job_id] = record

    def seeded_parties(self, job_id: str) -> list[str]:
        """The sorted ids of the parties with seeded (not private) batches in the job."""
        return sorted({s.batch.party_id for s in self._batches[job_id].values() if s.batch.seeded})

    def cancelled(self, job_id: str) -> str | None:
        """Why the job was cancelled (None: not cancelled)."""
        return self._cancelled.get(job_id)

    def cancel_job(self, job_id: str, reason: str) -> bool:
        """Drop the job's spec, batches and release record; its id stays retired."""
        if job_id in self._cancelled:
            return False
        for table in (self._jobs, self._batches, self._coverage, self._releases):
            table.pop(job_id, None)
        self._closed.discard(job_id)
        self._cancelled[job_id] = reason
        return True
    def get_check_value(self, job_id: str, name: str) -> bytes | None:
        """A held check value, or None."""
        return self._checks.get((job_id, name))

    def put_check_value(self, job_id: str, name: str, value: bytes) -> bytes:
        """Hold a check value once (the first write wins); returns the held value."""
        return self._checks.setdefault((job_id, name), bytes(value))

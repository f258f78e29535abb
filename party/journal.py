"""The party's upload journal: resume after a crash without double counting or inconsistent shares.

All k shares of a batch must come from ONE sharing.  A server that already holds its share of
batch b from one sharing cannot be combined with the other servers' shares from a second sharing
(the sum would be garbage; and the server refuses a conflicting re-upload anyway).  So a party
never re-randomizes a batch that may have left the process:

* Before the first share of batch b is sent, the party journals — durably, in a 0600 file in its
  state directory — the 32-byte key of the batch's randomness (the per-batch child
  :class:`~ltm.randomness.Randomness` that draws the batch's noise and shares) and the content
  digest of each of the k shares.
* After a crash it re-derives the batch from that key, bit for bit, checks the digests and
  re-uploads it to every server.  A server that already stored it returns the same receipt (uploads
  are idempotent per (job, party, batch)), so nothing is counted twice and every server ends up
  with a share of the same sharing.
* Once all k servers have acknowledged a batch, the journal marks it done and drops its key; a
  restarted party skips done batches.

In production the per-batch randomness is :meth:`Randomness.system_derived`: a fresh OS key whose
children (noise, shares) are derived from it, so the key alone re-creates the batch.  In seeded
mode it is the seeded child ``randomness.child("batch", b)`` — exactly what an undisturbed run
uses — so a resumed seeded run releases the same bytes as an undisturbed one.

File: ``<state_dir>/<party>--<job>.journal.json`` (ids escaped), one JSON object rewritten
atomically (temp file, fsync, rename, directory fsync): a crash leaves the old or the new journal,
never a torn one.  It is bound to the job digest, the party, the batch size and the randomness
mode; a journal that disagrees is refused with a message instead of being reused, because reusing
a key for other data or another job would reuse noise.

The keys are secrets: whoever reads an unfinished journal can recompute that batch's noise and so
its clients' data.  A state directory this module creates is 0700, the file is 0600, and a key is
dropped from the file as soon as its batch is done (the rewritten file no longer contains it; the
file system's old blocks are not scrubbed).
"""
from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from ltm.batch import ShareBatch
from ltm.errors import LtmError
from ltm.jobspec import JobSpec
from ltm.randomness import DERIVED_MODE, Randomness
from ltm.transport.files import fsync_dir

log = logging.getLogger("ltm.party")

JOURNAL_VERSION = 1
JOURNAL_SUFFIX = ".journal.json"
SEEDED = "seeded"


class JournalError(LtmError):
    """The journal cannot be used for this upload (another job, batch size or randomness mode, or
    data that changed since a batch was first sent); the message says what to do."""

    exit_code = 6
    prefix = "upload journal: "


_SAFE = re.compile(r"[A-Za-z0-9_.-]")


def _component(name: str) -> str:
    """An injective, file-name-safe rendering of an id (``%XX`` escapes; long names hashed)."""
    out = "".join(c if _SAFE.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode()) for c in name)
    if not out or len(out) > 100 or set(out) <= {"."}:
        out = "%h" + sha256(name.encode()).hexdigest()
    return out


def journal_path(state_dir: str | os.PathLike[str], job_id: str, party_id: str) -> Path:
    """The journal file of ``party_id``'s upload of ``job_id`` under ``state_dir``."""
    return Path(state_dir) / f"{_component(party_id)}--{_component(job_id)}{JOURNAL_SUFFIX}"


def party_journals(state_dir: str | os.PathLike[str], party_id: str) -> list[Path]:
    """Every upload journal of ``party_id`` in ``state_dir`` (one per job it began uploading): the
    ledger's evidence that the party ran jobs before (``party/ledger.py``)."""
    d = Path(state_dir)
    return sorted(d.glob(f"{_component(party_id)}--*{JOURNAL_SUFFIX}")) if d.is_dir() else []


@dataclass
class _Entry:
    start: int
    stop: int
    digests: list[str]          # content digest of the share addressed to server i
    mode: str | None = None     # randomness mode of the key (None once done)
    key: bytes | None = None    # the batch's 32-byte randomness key (None once done)
    done: bool = False

    def to_json(self) -> dict:
        out = {"start": self.start, "stop": self.stop, "digests": self.digests, "done": self.done}
        if self.key is not None:
            out["mode"] = self.mode
            out["key"] = self.key.hex()
        return out

    @classmethod
    def from_json(cls, obj: dict) -> "_Entry":
        key = obj.get("key")
        return cls(int(obj["start"]), int(obj["stop"]), [str(d) for d in obj["digests"]], obj.get("mode"),
                   bytes.fromhex(key) if key else None, bool(obj.get("done", False)))


class UploadJournal:
    """One party's journal for one job (see module docstring).  Thread-safe."""

    def __init__(self, path: Path, spec: JobSpec, party_id: str, batch_clients: int, randomness_mode: str,
                 entries: dict[int, _Entry]) -> None:
        self.path = path
        self.spec = spec
        self.party_id = party_id
        self.batch_clients = batch_clients
        self.randomness_mode = randomness_mode
        self._entries = entries
        self._fresh: dict[int, Randomness] = {}
        self._lock = threading.Lock()
        #: batches found started-but-unfinished when the journal was opened (re-uploaded this run)
        self.unfinished_at_open = sorted(b for b, e in entries.items() if not e.done)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, state_dir: str | os.PathLike[str], spec: JobSpec, party_id: str, *, batch_clients: int,
             seeded: bool) -> "UploadJournal":
        """Open (or create) the journal of ``party_id`` for ``spec`` in ``state_dir``."""
        d = Path(state_dir)
        try:
            if not d.is_dir():
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
                fsync_dir(d.parent)
        except OSError as exc:
            raise JournalError(f"cannot create the party state directory {str(d)!r}: {exc.strerror or exc}; "
                               f"give --state-dir a writable directory") from exc
        if not os.access(d, os.R_OK | os.W_OK | os.X_OK):
            raise JournalError(f"the party state directory {str(d)!r} is not writable; give --state-dir a "
                               f"writable directory")
        path = journal_path(d, spec.job_id, party_id)
        for stale in d.glob(path.name + ".*.tmp"):  # a crash between write and rename
            stale.unlink(missing_ok=True)
        mode = SEEDED if seeded else DERIVED_MODE
        if not path.exists():
            journal = cls(path, spec, party_id, batch_clients, mode, {})
            journal._write()
            return journal
        try:
            obj = json.loads(path.read_text())
            entries = {int(b): _Entry.from_json(e) for b, e in obj["batches"].items()}
            fields = (obj["version"], obj["job_id"], obj["job_digest"], obj["party_id"], int(obj["batch_clients"]),
                      obj["randomness"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise JournalError(f"the upload journal {str(path)!r} cannot be read ({exc}); if no batch of this "
                               f"job was ever sent, remove it") from exc
        version, job_id, digest, pid, journaled_batch, journaled_mode = fields
        if version != JOURNAL_VERSION:
            raise JournalError(f"the upload journal {str(path)!r} has version {version}; this party writes "
                               f"version {JOURNAL_VERSION}")
        if (job_id, pid) != (spec.job_id, party_id) or digest != spec.digest:
            raise JournalError(f"the upload journal {str(path)!r} belongs to job {job_id!r} with digest "
                               f"{str(digest)[:12]}… (party {pid!r}), not to this job's digest {spec.digest[:12]}…: "
                               f"the job was redefined under the same id; move the journal away only if that "
                               f"earlier job is abandoned")
        if journaled_batch != batch_clients:
            raise JournalError(f"the upload journal {str(path)!r} was written with --batch-clients "
                               f"{journaled_batch}; resume with the same batch size (now {batch_clients})")
        if journaled_mode != mode:
            raise JournalError(f"the upload journal {str(path)!r} was written with {journaled_mode} randomness, "
                               f"this run uses {mode}; resume in the same mode (with or without --seed as before)")
        journal = cls(path, spec, party_id, batch_clients, mode, entries)
        if journal.unfinished_at_open:
            log.info("resuming from the upload journal", extra={"journal": str(path),
                                                                "done_batches": len(journal.done_batches()),
                                                                "unfinished_batches": journal.unfinished_at_open})
        return journal

    # ------------------------------------------------------------------ state
    def done_batches(self) -> set[int]:
        """The indices of the batches every server has acknowledged."""
        with self._lock:
            return {b for b, e in self._entries.items() if e.done}

    def randomness_for(self, batch_index: int, base: Randomness) -> Randomness:
        """The randomness of batch ``batch_index``: the journaled key if the batch was started
        before, else a new one (journaled by :meth:`begin`, before anything is sent)."""
        with self._lock:
            entry = self._entries.get(batch_index)
            if entry is not None and entry.key is not None:
                return Randomness(entry.mode, entry.key)
            if entry is not None and entry.done:
                raise JournalError(f"batch {batch_index} is already done; it must not be randomized again")
            fresh = base.child("batch", batch_index) if self.randomness_mode == SEEDED else Randomness.system_derived()
            self._fresh[batch_index] = fresh
            return fresh

    def begin(self, per_server: list[ShareBatch]) -> tuple[list[str], bool]:
        """Journal the batch's key and share digests durably, before any share is sent.

        Returns the k content digests (in server order) and whether the batch was started before
        (a resumed batch: re-derived from its journaled key, which must give the same digests).
        """
        ordered = sorted(per_server, key=lambda sb: sb.server)
        b = ordered[0].batch_index
        digests = [sb.content_digest() for sb in ordered]
        with self._lock:
            entry = self._entries.get(b)
            if entry is not None:
                if entry.digests != digests:
                    raise JournalError(
                        f"batch {b} re-derived from its journaled key differs from the batch first sent "
                        f"(share digests {[d[:12] for d in digests]} vs journaled {[d[:12] for d in entry.digests]}): "
                        f"the party's data changed since the upload began; restore the original data file to "
                        f"resume job {self.spec.job_id!r}")
                return digests, True
            fresh = self._fresh.pop(b, None)
            if fresh is None:
                raise JournalError(f"batch {b} was not randomized through this journal")
            self._entries[b] = _Entry(ordered[0].start, ordered[0].stop, digests, fresh.mode, fresh.key)
            self._write()
        return digests, False

    def done(self, batch_index: int) -> None:
        """Every server acknowledged the batch: mark it done and drop its key (durably)."""
        with self._lock:
            entry = self._entries[batch_index]
            entry.done, entry.key, entry.mode = True, None, None
            self._write()

    # ------------------------------------------------------------------ file
    def _write(self) -> None:
        obj = {"version": JOURNAL_VERSION, "job_id": self.spec.job_id, "job_digest": self.spec.digest,
               "party_id": self.party_id, "batch_clients": self.batch_clients, "randomness": self.randomness_mode,
               "batches": {str(b): e.to_json() for b, e in sorted(self._entries.items())}}
        payload = json.dumps(obj, indent=1).encode()
        tmp = self.path.with_name(f"{self.path.name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.path.parent)

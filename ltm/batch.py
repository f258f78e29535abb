"""The unit of upload: one party's share of one batch of clients, addressed to one server."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ltm.sharing import Share

#: The randomness modes an upload declares (``BatchHeader.randomness_mode``).
CSPRNG_MODE = "csprng"
SEEDED_MODE = "seeded"
RANDOMNESS_MODES = (CSPRNG_MODE, SEEDED_MODE)


@dataclass(frozen=True)
class ShareBatch:
    """One server's share of a batch of client vectors.

    Attributes:
        job_digest: the job spec's hex SHA-256 (binds the batch to one job).
        party_id: the uploading party.
        batch_index: the party's batch counter (``(job, party, batch_index)`` is the idempotency key).
        start, stop: client indices ``start..stop−1`` covered by the batch.
        columns: indices into the job's client vector of the entries this batch carries (all columns
            in the rows partition; the party's block in the columns partition).
        share: this server's share, shape (pieces, stop − start, len(columns)).
        seeded: the batch was drawn with seeded (reproducible, NOT private) randomness; servers
            accept such batches only for jobs marked as reproductions.
    """

    job_digest: str
    party_id: str
    batch_index: int
    start: int
    stop: int
    columns: tuple[int, ...]
    share: Share
    seeded: bool = False
    #: An aggregated upload (``party/aggregate.py``): ``share`` is the party's (1, m, len(columns))
    #: partial of the public map over all its clients ``start..stop−1``, not per-client copies.
    aggregate: bool = False

    @property
    def server(self) -> int:
        return self.share.server

    @property
    def count(self) -> int:
        return self.stop - self.start

    def content_digest(self) -> str:
        """SHA-256 over everything the batch says: equal digests ⇔ an identical (idempotent) re-upload."""
        h = hashlib.sha256()
        h.update(f"{self.job_digest}|{self.party_id}|{self.batch_index}|{self.start}|{self.stop}|"
                 f"{','.join(map(str, self.columns))}|{self.share.shape}|".encode())
        if self.seeded:
            h.update(b"randomness:seeded|")
        if self.aggregate:
            h.update(b"upload:aggregate|")
        if self.share.seed is not None:
            h.update(b"seed:" + self.share.seed)
        else:
            h.update(b"data:")  # then the little-endian words, hashed in place (no copy of the batch)
            h.update(np.ascontiguousarray(self.share.data, dtype="<u8").data.cast("B"))
        return h.hexdigest()

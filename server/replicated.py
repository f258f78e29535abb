"""A server's side of the replicated degree-2 release (ltm/replicated.py; docs/architecture.md).

Server i of the three collects, from every party, the pair of additive shares (x_i, x_{i+1}) of the
party's grid-rounded block and the party's share of its noise, and computes its output share of
triu(ZᵀZ) + noise locally (:func:`ltm.replicated.server_output`): it never talks to the other
servers.  It refuses a job that is not a replicated release, and an upload for another server,
another job, or a party it already holds.
"""
from __future__ import annotations

import numpy as np

from ltm.jobspec import JobSpec, validate_job
from ltm.replicated import BlockUpload, server_output


class ReplicatedServer:
    """One server's state for one replicated job: the uploads it holds, by party."""

    def __init__(self, spec: JobSpec, server: int) -> None:
        validate_job(spec)
        if not spec.replicated:
            raise ValueError(f"job {spec.job_id!r} is not a replicated release (columns partition, kind gram)")
        if not 0 <= server < spec.k:
            raise ValueError(f"server index {server} out of range for k={spec.k}")
        self.spec = spec
        self.server = server
        self.uploads: dict[str, BlockUpload] = {}

    def accept(self, party_id: str, upload: BlockUpload) -> None:
        """Hold one party's upload after checking it fits the job (party, columns, shapes, server)."""
        spec = self.spec
        party = spec.party(party_id)  # KeyError: not a party of this job
        if party_id in self.uploads:
            raise ValueError(f"party {party_id!r} already uploaded to server {self.server}")
        if upload.server != self.server:
            raise ValueError(f"an upload for server {upload.server} reached server {self.server}")
        cols = tuple(spec.party_column_indices(party))
        if upload.columns != cols:
            raise ValueError(f"party {party_id!r} uploaded columns {upload.columns}, the job gives it {cols}")
        shape = (spec.n, len(cols))
        if upload.first.shape != shape or upload.second.shape != shape:
            raise ValueError(f"party {party_id!r}: block shares must be {shape}")
        if upload.noise.shape != (spec.width * (spec.width + 1) // 2,):
            raise ValueError(f"party {party_id!r}: the noise share must have one value per released entry")
        self.uploads[party_id] = upload

    def output(self) -> np.ndarray:
        """This server's output share (uint64, D(D+1)/2), once every party has uploaded."""
        missing = [p.party_id for p in self.spec.parties if p.party_id not in self.uploads]
        if missing:
            raise ValueError(f"server {self.server}: no upload yet from {missing}; every party's block is needed")
        return server_output(self.server, list(self.uploads.values()), self.spec.n, self.spec.width)

"""The upload targets of the bad-input tests (tests/integration/test_bad_input.py, test_hostile_storage.py):
two seeded jobs with every party's share batches computed up front, the messages an uploader sends,
and a server under test reachable over mutual TLS with a way to read what it stores (its SQLite
database opened read-only, its blobs, and its in-memory state or its Status RPC)."""
from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from ltm.party.randomizer import make_batches, party_randomness
from ltm.party.uploader import batch_header
from ltm.server.sqlite_store import SqliteStore
from ltm.sim.runtime.jobs import party_tables
from ltm.transport.tls import make_sync_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from tests.helpers.jobs import seeded_job

K = 2
N = 200
BATCH = 25                      # 4 batches per party
ACTORS = ["server-0", "server-1", "party-0", "party-1", "party-9", "analyst", "operator"]
TIMEOUT = 15.0


@dataclass
class World:
    spec: object          # the rows job (fuzz target), k=2 servers, s=2 pieces
    tables: dict
    batches: dict         # (party_id, batch_index) → [share batch per server]
    cols_spec: object     # a columns-partition job
    cols_tables: dict
    cols_batches: dict


def _job(job_id: str, partition: str, endpoints=None):
    spec, table, randomness = seeded_job(f"bad-input-{job_id}", N, 3, job_id=job_id, partition=partition, parties=2,
                                         k=K, m=8, s=2, endpoints=endpoints)
    tables = party_tables(spec, table)
    batches = {}
    for p in spec.parties:
        for per_server in make_batches(spec, p.party_id, tables[p.party_id], party_randomness(randomness, spec, p.party_id),
                                       batch_clients=BATCH):
            batches[(p.party_id, per_server[0].batch_index)] = per_server
    return spec, tables, batches


def make_world(endpoints=None) -> World:
    spec, tables, batches = _job("fuzz", "rows", endpoints)
    cspec, ctables, cbatches = _job("cols", "columns", endpoints)
    return World(spec, tables, batches, cspec, ctables, cbatches)


def encode(batch, job_id: str) -> tuple[ltm_pb2.BatchHeader, bytes]:
    """The header and payload the uploader would send for one share batch."""
    return batch_header(batch, job_id)


def stream(header, payload: bytes, sizes=None) -> list[ltm_pb2.UploadChunk]:
    msgs = [ltm_pb2.UploadChunk(header=header)] if header is not None else []
    if sizes is None:
        sizes = [1 << 20] * (len(payload) // (1 << 20) + 1) if payload else []
    at = 0
    for size in sizes:
        msgs.append(ltm_pb2.UploadChunk(data=payload[at:at + size]))
        at += size
    if at < len(payload):
        msgs.append(ltm_pb2.UploadChunk(data=payload[at:]))
    return msgs


def db_snapshot(data_dir: Path):
    """Everything a server has stored, read from disk: the SQLite rows (read-only) and the blobs."""
    conn = sqlite3.connect(f"file:{data_dir / 'server.db'}?mode=ro", uri=True)
    try:
        jobs = conn.execute("SELECT job_id, spec_json, digest, closed FROM jobs ORDER BY job_id").fetchall()
        batches = conn.execute("SELECT * FROM batches ORDER BY job_id, party_id, batch_index").fetchall()
        releases = conn.execute("SELECT * FROM releases ORDER BY job_id").fetchall()
    finally:
        conn.close()
    blobs = sorted((p.relative_to(data_dir).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
                   for p in (data_dir / "blobs").rglob("*") if p.is_file())
    return jobs, batches, releases, blobs


def status_snapshot(stub, job_ids):
    """What Status says about each job's stored state (not the traffic counters, which grow with
    every request, refused or not)."""
    out = []
    for job_id in job_ids:
        r = stub.Status(ltm_pb2.StatusRequest(job_id=job_id), timeout=TIMEOUT)
        out.append((job_id, r.closed, r.released, r.clients_held, r.batches))
    return out


@dataclass
class Target:
    """One server under test, reachable over mTLS, with a way to read what it stores."""

    kind: str
    server_id: str
    endpoint: str
    data_dir: Path
    certs: Path
    store: SqliteStore | None = None
    _channels: dict = field(default_factory=dict)

    @property
    def index(self) -> int:
        return int(self.server_id.split("-")[1])

    def stub(self, actor: str, certs: Path | None = None) -> ltm_pb2_grpc.ServerStub:
        key = (actor, certs)
        if key not in self._channels:
            self._channels[key] = make_sync_channel(self.endpoint, certs or self.certs, actor,
                                                    options=[("grpc.ssl_target_name_override", self.server_id)])
        return ltm_pb2_grpc.ServerStub(self._channels[key])

    def snapshot(self, job_ids=("fuzz", "cols")):
        disk = db_snapshot(self.data_dir)
        if self.store is not None:  # the in-process store's memory must agree with its disk
            memory = [(j, self.store.coverage(j).to_array().tobytes(), self.store.is_closed(j))
                      for j in job_ids if self.store.get_job(j) is not None]
        else:
            memory = status_snapshot(self.stub("analyst"), [j for j, *_ in disk[0]])
        return disk, memory

    def upload(self, messages, actor: str = "party-0"):
        """(code name, details, receipt or None) of one Upload stream."""
        try:
            receipt = self.stub(actor).Upload(iter(messages), timeout=TIMEOUT)
            return "OK", "", receipt
        except grpc.RpcError as err:
            return err.code().name, err.details() or "", None

    def close(self):
        for channel in self._channels.values():
            channel.close()

"""SqliteStore: same behaviour as MemoryStore, durable across restarts and kill -9 (docs/architecture.md §6)."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ltm.batch import ShareBatch
from ltm.datasets.synthetic import synthetic_ridge
from ltm.errors import ProtocolError
from ltm.party.randomizer import make_batches, party_randomness
from ltm.randomness import Randomness
from ltm.server.core import ServerCore, participants_digest
from ltm.server.release_gate import ANALYST_ROLE
from ltm.server.sqlite_store import BLOB_DIR, DB_NAME, SqliteStore, StoreCorruptError, StoreError, path_component
from ltm.server.store import MemoryStore, ReleaseRecord, StoredBatch
from ltm.sharing import Share
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.crash_batches import CRASH_CLIENTS, crash_batch

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- helpers
def small_job(job_id="job", *, n=200, k=3, share_mode="seed", partition="rows", parties=2, label="store"):
    randomness = Randomness.seeded_insecure(f"{label}-{job_id}-{share_mode}-{partition}-{k}")
    table = synthetic_ridge(n, 3, randomness)
    spec, _ = build_job(table, job_id=job_id, randomness=randomness, partition=partition, parties=parties, k=k,
                        m=8, share_mode=share_mode)
    return spec, party_tables(spec, table), randomness


def job_batches(spec, tables, randomness, batch_clients=32):
    """Every (party, batch) of the job as a list per server: {server index: [ShareBatch...]}."""
    out = {i: [] for i in range(spec.k)}
    for party in spec.parties:
        for per_server in make_batches(spec, party.party_id, tables[party.party_id],
                                       party_randomness(randomness, spec, party.party_id), batch_clients=batch_clients):
            for b in per_server:
                out[b.server].append(b)
    return out


def key(batch):
    return batch.party_id, batch.batch_index


def assert_batch_equal(a: ShareBatch, b: ShareBatch):
    assert (a.job_digest, a.party_id, a.batch_index, a.start, a.stop, a.columns) == \
           (b.job_digest, b.party_id, b.batch_index, b.start, b.stop, b.columns)
    assert a.share.server == b.share.server and tuple(a.share.shape) == tuple(b.share.shape)
    assert (a.share.seed is None) == (b.share.seed is None)
    if a.share.seed is not None:
        assert a.share.seed == b.share.seed
    else:
        assert a.share.data.dtype == b.share.data.dtype == np.uint64
        assert a.share.data.tobytes() == b.share.data.tobytes()
    assert a.content_digest() == b.content_digest()


def blob_files(directory: Path):
    return sorted(p.relative_to(directory).as_posix() for p in (directory / BLOB_DIR).rglob("*") if p.is_file())


# ---------------------------------------------------------------- same behaviour as MemoryStore
@pytest.mark.parametrize("share_mode", ["seed", "full"])
def test_same_results_as_memory_store(tmp_path, share_mode):
    spec, tables, randomness = small_job(share_mode=share_mode)
    batches = job_batches(spec, tables, randomness)[0]
    assert any(b.share.seed is not None for b in batches) == (share_mode == "seed")
    mem, sql = MemoryStore(), SqliteStore(tmp_path / "s")
    with sql:
        for store in (mem, sql):
            assert store.get_job(spec.job_id) is None
            store.put_job(spec)
        assert sql.get_job(spec.job_id).digest == mem.get_job(spec.job_id).digest == spec.digest
        assert sql.get_job(spec.job_id) == spec
        np.testing.assert_array_equal(sql.coverage(spec.job_id).to_array(), mem.coverage(spec.job_id).to_array())
        assert not sql.coverage(spec.job_id).any()
        for b in batches:
            for store in (mem, sql):
                assert store.get_batch_digest(spec.job_id, b.party_id, b.batch_index) is None
                store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
            assert sql.get_batch_digest(spec.job_id, b.party_id, b.batch_index) == \
                mem.get_batch_digest(spec.job_id, b.party_id, b.batch_index) == b.content_digest()
            np.testing.assert_array_equal(sql.coverage(spec.job_id).to_array(), mem.coverage(spec.job_id).to_array())
        # idempotent re-put of an identical batch changes nothing
        first = batches[0]
        sql.put_batch(spec.job_id, StoredBatch(first, first.content_digest()))
        assert sql.get_batch_digest(spec.job_id, first.party_id, first.batch_index) == first.content_digest()
        assert sql.coverage(spec.job_id).to_array().all() and mem.coverage(spec.job_id).to_array().all()
        assert sql.get_batch_digest(spec.job_id, "nobody", 0) is None
        # same batches (as a set), sqlite in deterministic (party_id, batch_index) order
        got = list(sql.batches(spec.job_id))
        assert [key(b) for b in got] == sorted(key(b) for b in mem.batches(spec.job_id))
        expected = {key(b): b for b in mem.batches(spec.job_id)}
        for b in got:
            assert_batch_equal(b, expected[key(b)])
        assert sql.verify() == len(batches)
        for store in (mem, sql):
            assert not store.is_closed(spec.job_id)
            store.set_closed(spec.job_id)
            assert store.is_closed(spec.job_id)
            assert store.get_release(spec.job_id) is None
        result = np.random.default_rng(1).integers(0, 2**64, size=(8, spec.width), dtype=np.uint64)
        result[0, 0] = np.uint64(2**64 - 1)
        record = ReleaseRecord("ab" * 32, result)
        for store in (mem, sql):
            store.put_release(spec.job_id, record)
        got_m, got_s = mem.get_release(spec.job_id), sql.get_release(spec.job_id)
        assert got_s.participants_digest == got_m.participants_digest
        assert got_s.result.dtype == np.uint64 and got_s.result.shape == got_m.result.shape
        assert got_s.result.tobytes() == got_m.result.tobytes()
        # unknown jobs behave like MemoryStore
        for store in (mem, sql):
            assert store.get_job("nope") is None and not store.is_closed("nope") and store.get_release("nope") is None
            with pytest.raises(KeyError):
                store.get_batch_digest("nope", "p", 0)
            with pytest.raises(KeyError):
                store.coverage("nope")
            with pytest.raises(KeyError):
                list(store.batches("nope"))


def test_store_refuses_conflicts_and_keeps_state(tmp_path):
    spec, tables, randomness = small_job()
    batches = job_batches(spec, tables, randomness)[0]
    with SqliteStore(tmp_path) as store:
        store.put_job(spec)
        store.put_job(spec)  # identical: no-op
        other = dataclasses.replace(spec, clip_bound=spec.clip_bound * 2)
        with pytest.raises(ProtocolError) as err:
            store.put_job(other)
        assert err.value.code == "ALREADY_EXISTS"
        a, b = batches[0], batches[1]
        store.put_batch(spec.job_id, StoredBatch(a, a.content_digest()))
        before = blob_files(tmp_path)
        # same key, different content
        changed = dataclasses.replace(a, share=Share(a.share.server, a.share.shape, seed=b"\x01" * 32))
        with pytest.raises(ProtocolError) as err:
            store.put_batch(spec.job_id, StoredBatch(changed, changed.content_digest()))
        assert err.value.code == "ALREADY_EXISTS"
        # a new key for clients already held (would double-count)
        dup = dataclasses.replace(a, batch_index=999)
        with pytest.raises(ProtocolError) as err:
            store.put_batch(spec.job_id, StoredBatch(dup, dup.content_digest()))
        assert err.value.code == "ALREADY_EXISTS"
        # out of range, wrong digest
        with pytest.raises(ValueError):
            bad = dataclasses.replace(b, job_digest="0" * 64)
            store.put_batch(spec.job_id, StoredBatch(bad, bad.content_digest()))
        assert blob_files(tmp_path) == before  # no temp files or blobs left by refused uploads
        assert store.get_batch_digest(spec.job_id, a.party_id, a.batch_index) == a.content_digest()
        assert store.get_batch_digest(spec.job_id, a.party_id, 999) is None
        assert_batch_equal(next(iter(store.batches(spec.job_id))), a)
        store.set_closed(spec.job_id)
        with pytest.raises(ProtocolError) as err:
            store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
        assert err.value.code == "FAILED_PRECONDITION"
        assert store.get_batch_digest(spec.job_id, b.party_id, b.batch_index) is None
        result = np.arange(8 * spec.width, dtype=np.uint64).reshape(8, spec.width)
        store.put_release(spec.job_id, ReleaseRecord("d1", result))
        store.put_release(spec.job_id, ReleaseRecord("d1", result.copy()))  # identical: no-op
        with pytest.raises(ProtocolError):
            store.put_release(spec.job_id, ReleaseRecord("d2", result))
        with pytest.raises(ProtocolError):
            store.put_release(spec.job_id, ReleaseRecord("d1", result + np.uint64(1)))
        assert store.get_release(spec.job_id).participants_digest == "d1"
        assert store.get_release(spec.job_id).result.tobytes() == result.tobytes()
        with pytest.raises(KeyError):
            store.put_batch("nope", StoredBatch(b, b.content_digest()))


# ---------------------------------------------------------------- durability across a clean restart
def test_everything_survives_reopen(tmp_path):
    odd, odd_tables, odd_randomness = small_job("job-b", share_mode="full", partition="columns")
    # An id outside the grammar (validation refuses it) stored anyway: the store's paths stay safe on their own
    jobs = [small_job("job-a", share_mode="seed"), (dataclasses.replace(odd, job_id="job/b .."), odd_tables,
                                                    odd_randomness)]
    expected = {}
    with SqliteStore(tmp_path) as store:
        for spec, tables, randomness in jobs:
            store.put_job(spec)
            for b in job_batches(spec, tables, randomness)[1]:
                store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
            expected[spec.job_id] = {key(b): b for b in store.batches(spec.job_id)}
        store.set_closed("job-a")
        result = np.random.default_rng(7).integers(0, 2**64, size=(8, jobs[0][0].width), dtype=np.uint64)
        store.put_release("job-a", ReleaseRecord("pd", result))
        coverage = {spec.job_id: store.coverage(spec.job_id).copy() for spec, _, _ in jobs}
    assert all(c.any() for c in coverage.values())
    with SqliteStore(tmp_path) as store:
        for spec, tables, randomness in jobs:
            assert store.get_job(spec.job_id) == spec and store.get_job(spec.job_id).digest == spec.digest
            got = list(store.batches(spec.job_id))
            assert [key(b) for b in got] == sorted(expected[spec.job_id])
            for b in got:
                assert_batch_equal(b, expected[spec.job_id][key(b)])
                assert store.get_batch_digest(spec.job_id, b.party_id, b.batch_index) == b.content_digest()
            assert store.coverage(spec.job_id) == coverage[spec.job_id]
        assert store.is_closed("job-a") and not store.is_closed("job/b ..")
        record = store.get_release("job-a")
        assert record.participants_digest == "pd" and record.result.tobytes() == result.tobytes()
        assert store.get_release("job/b ..") is None
        assert store.verify() == sum(len(v) for v in expected.values())
    # the odd job id stayed inside the blob directory
    assert all(f.startswith(f"{BLOB_DIR}/") for f in blob_files(tmp_path))
    assert any(path_component("job/b ..") in f for f in blob_files(tmp_path))


def test_coverage_partial_columns_survives_reopen(tmp_path):
    spec, tables, randomness = small_job(partition="columns", parties=3, share_mode="full")
    batches = [b for b in job_batches(spec, tables, randomness)[0] if b.party_id != "party-1"]
    with SqliteStore(tmp_path) as store:
        store.put_job(spec)
        mem = MemoryStore()
        mem.put_job(spec)
        for b in batches:
            store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
            mem.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
    with SqliteStore(tmp_path) as store:
        cov = store.coverage(spec.job_id)
        assert cov == mem.coverage(spec.job_id)
        np.testing.assert_array_equal(cov.to_array(), mem.coverage(spec.job_id).to_array())
        assert cov.any() and not cov.to_array().all() and not cov.held()
        cov.add(0, spec.n, range(spec.upload_width))  # callers cannot change the store's coverage
        assert store.coverage(spec.job_id) == mem.coverage(spec.job_id) != cov


def test_path_component_is_injective_and_safe():
    names = ["a", "A", ".", "..", "a/b", "a%2Fb", "a.b", "a%2Eb", "", "é", "x" * 300, "x" * 301, "%h00"]
    comps = [path_component(n) for n in names]
    assert len(set(comps)) == len(names)
    for c in comps:
        assert c and "/" not in c and "." not in c and len(c) <= 130


# ---------------------------------------------------------------- unusable directories, locking, corruption
def test_clear_errors_for_unusable_directories(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        SqliteStore(f)
    with pytest.raises(StoreError):
        SqliteStore(f / "sub")
    other = tmp_path / "other"
    other.mkdir()
    import sqlite3
    sqlite3.connect(other / DB_NAME).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(StoreError, match="something else"):
        SqliteStore(other)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            with pytest.raises(StoreError, match="not readable and writable"):
                SqliteStore(ro)
        finally:
            ro.chmod(0o700)


def test_one_open_store_per_directory(tmp_path):
    store = SqliteStore(tmp_path / "d")
    with pytest.raises(StoreError, match="in use"):
        SqliteStore(tmp_path / "d")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get_release("x")
    SqliteStore(tmp_path / "d").close()


def test_schema_version_mismatch_is_refused(tmp_path):
    SqliteStore(tmp_path).close()
    import sqlite3
    conn = sqlite3.connect(tmp_path / DB_NAME)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version"):
        SqliteStore(tmp_path)


def test_crash_leftovers_are_finished_unknown_blobs_refuse_and_damage_is_detected(tmp_path):
    spec, tables, randomness = small_job(share_mode="full")
    batches = job_batches(spec, tables, randomness)[0]
    with SqliteStore(tmp_path) as store:
        store.put_job(spec)
        for b in batches[:2]:
            store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
    kept = blob_files(tmp_path)
    assert len(kept) == 2
    party_dir = (tmp_path / kept[0]).parent
    # a crash between commit and rename: the committed row's blob is still a temp file
    committed = tmp_path / kept[1]
    moved = committed.with_name(committed.name + ".00ff00ff.tmp")
    committed.rename(moved)
    (party_dir / "8.u64.0123abcd.tmp").write_bytes(b"\0" * 5)      # crash before the commit
    with SqliteStore(tmp_path) as store:
        assert blob_files(tmp_path) == kept                           # renamed into place, stale temp gone
        assert store.verify() == 2
    # a final blob no row names is not a crash leftover: the database lost state; refuse, delete nothing
    (party_dir / "7.u64").write_bytes(b"\0" * 24)
    (tmp_path / BLOB_DIR / "stray" / "p").mkdir(parents=True)
    (tmp_path / BLOB_DIR / "stray" / "p" / "0.u64").write_bytes(b"\0" * 8)
    before = sorted(blob_files(tmp_path))
    with pytest.raises(StoreCorruptError, match="not named by any stored batch") as err:
        SqliteStore(tmp_path)
    assert "7.u64" in str(err.value) and "stray" in str(err.value)
    assert sorted(blob_files(tmp_path)) == before
    (party_dir / "7.u64").unlink()
    (tmp_path / BLOB_DIR / "stray" / "p" / "0.u64").unlink()
    # a damaged acknowledged blob is reported, not silently served
    victim = tmp_path / kept[1]
    victim.write_bytes(victim.read_bytes()[:-8])
    with pytest.raises(StoreCorruptError, match="bytes, expected"):
        SqliteStore(tmp_path)
    victim.unlink()
    with pytest.raises(StoreCorruptError, match="missing"):
        SqliteStore(tmp_path)


def test_flipped_bits_are_found_by_verify(tmp_path):
    spec, tables, randomness = small_job(share_mode="full")
    b = job_batches(spec, tables, randomness)[0][0]
    with SqliteStore(tmp_path) as store:
        store.put_job(spec)
        store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
    (blob,) = blob_files(tmp_path)
    raw = bytearray((tmp_path / blob).read_bytes())
    raw[3] ^= 0x10
    (tmp_path / blob).write_bytes(bytes(raw))
    with SqliteStore(tmp_path) as store, pytest.raises(StoreCorruptError, match="content digest"):
        store.verify()


# ---------------------------------------------------------------- threads
def test_concurrent_puts_from_threads(tmp_path):
    spec, tables, randomness = small_job(n=400, share_mode="full")
    batches = job_batches(spec, tables, randomness, batch_clients=16)[0]
    with SqliteStore(tmp_path) as store:
        store.put_job(spec)
        errors, barrier = [], threading.Barrier(4)

        def worker(offset):
            barrier.wait()
            try:
                for b in batches[offset::2]:  # two workers per half: every batch is put twice concurrently
                    store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i % 2,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert store.coverage(spec.job_id).to_array().all()
        assert store.verify() == len(batches)
        # racing different contents for the same key: exactly one wins
        extra = dataclasses.replace(batches[0], batch_index=10_000)  # would also double-count
        spec2, tables2, rand2 = small_job("job2", share_mode="full")
        store.put_job(spec2)
        b0 = job_batches(spec2, tables2, rand2)[0][0]
        variants = [dataclasses.replace(b0, share=Share(b0.share.server, b0.share.shape,
                                                        data=b0.share.data + np.uint64(i))) for i in range(6)]
        outcomes = []
        barrier = threading.Barrier(len(variants))

        def racer(v):
            barrier.wait()
            try:
                store.put_batch(spec2.job_id, StoredBatch(v, v.content_digest()))
                outcomes.append(v.content_digest())
            except ProtocolError as exc:
                outcomes.append(exc.code)

        threads = [threading.Thread(target=racer, args=(v,)) for v in variants]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [o for o in outcomes if o != "ALREADY_EXISTS"]
        assert len(winners) == 1 and len(outcomes) == len(variants)
        assert store.get_batch_digest(spec2.job_id, b0.party_id, b0.batch_index) == winners[0]
        assert store.verify(spec2.job_id) == 1
        with pytest.raises(ProtocolError):
            store.put_batch(spec.job_id, StoredBatch(extra, extra.content_digest()))
    assert not any(f.endswith(".tmp") for f in blob_files(tmp_path))


# ---------------------------------------------------------------- crash safety with a real kill -9
CRASH_JOB = "crash"


CHILD = f"""
import sys
sys.path[:0] = [{str(REPO)!r}]
from ltm.server.sqlite_store import SqliteStore
from ltm.server.store import StoredBatch
from tests.helpers.crash_batches import crash_batch
directory, start = sys.argv[1], int(sys.argv[2])
store = SqliteStore(directory)
spec = store.get_job({CRASH_JOB!r})
print("READY", flush=True)
i = start
while True:
    b = crash_batch(spec.digest, spec.width, i)
    store.put_batch(spec.job_id, StoredBatch(b, b.content_digest()))
    print(f"ACK {{i}}", flush=True)
    i += 1
"""


def test_acknowledged_batches_survive_kill_9(tmp_path):
    spec, _, _ = small_job(label="crash")
    spec = dataclasses.replace(spec, job_id=CRASH_JOB, n=CRASH_CLIENTS * 2000)
    directory = tmp_path / "store"
    with SqliteStore(directory) as store:
        store.put_job(spec)
    rnd = random.Random(20240521)
    deadline = time.monotonic() + 15
    next_index, kills = 0, 0
    for run in range(5):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(directory), str(next_index)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(max(deadline - time.monotonic(), 1), proc.kill)
        watchdog.start()
        try:
            assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
            acked = []
            for _ in range(rnd.randint(1, 12)):
                line = proc.stdout.readline()
                assert line.startswith("ACK"), (line, proc.stderr.read())
                acked.append(int(line.split()[1]))
            time.sleep(rnd.uniform(0, 0.03))  # land anywhere: in a blob write, an fsync, a commit
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += proc.returncode == -signal.SIGKILL
            acked += [int(line.split()[1]) for line in proc.stdout.read().splitlines() if line.startswith("ACK")]
        finally:
            watchdog.cancel()
            proc.stdout.close()
            proc.stderr.close()
        assert acked == list(range(next_index, next_index + len(acked)))

        with SqliteStore(directory) as store:  # cleans orphans, checks blob sizes
            got = list(store.batches(CRASH_JOB))
            indices = [b.batch_index for b in got]
            # every acknowledged batch, plus possibly one committed whose ACK line was lost; no gaps
            assert indices == list(range(len(indices)))
            assert set(acked) <= set(indices) and len(indices) <= acked[-1] + 2
            for b in got:
                assert_batch_equal(b, crash_batch(spec.digest, spec.width, b.batch_index))
            assert store.verify() == len(got)
            expected_cov = np.zeros((spec.n, spec.width), dtype=bool)
            expected_cov[:len(got) * CRASH_CLIENTS] = True
            np.testing.assert_array_equal(store.coverage(CRASH_JOB).to_array(), expected_cov)
            files = blob_files(directory)
            assert not any(f.endswith(".tmp") for f in files)
            assert len(files) == sum(b.share.seed is None for b in got)  # no orphan blobs
            next_index = len(got)
    assert kills == 5
    assert time.monotonic() < deadline + 5


# ---------------------------------------------------------------- the server core on SqliteStore
@pytest.mark.parametrize("share_mode", ["seed", "full"])
def test_server_core_on_sqlite_store_and_restart(tmp_path, share_mode):
    spec, tables, randomness = small_job("core", n=300, share_mode=share_mode, label="core")
    mem_run = run_inprocess(spec, tables, randomness, batch_clients=64)
    stores = [SqliteStore(tmp_path / str(i)) for i in range(spec.k)]
    servers = [ServerCore(f"server-{i}", stores[i]) for i in range(spec.k)]
    sql_run = run_inprocess(spec, tables, randomness, batch_clients=64, servers=servers)
    sha = [hashlib.sha256(s.tobytes()).hexdigest() for s in sql_run.result_shares]
    assert sha == [hashlib.sha256(s.tobytes()).hexdigest() for s in mem_run.result_shares]
    np.testing.assert_array_equal(sql_run.release.matrix, mem_run.release.matrix)
    participants = sql_run.participants.to_mask()  # the server core API under test takes masks
    assert participants.all()
    for store in stores:
        store.close()

    # restart: new cores over new stores on the same directories
    stores = [SqliteStore(tmp_path / str(i)) for i in range(spec.k)]
    try:
        servers = [ServerCore(f"server-{i}", stores[i]) for i in range(spec.k)]
        for server in servers:
            assert server.create_job(spec, caller_role=ANALYST_ROLE) == spec.digest  # idempotent
            np.testing.assert_array_equal(server.held(spec.job_id).to_mask(), participants)
            assert server.store.is_closed(spec.job_id)
        again = [s.release(spec.job_id, participants, caller_role=ANALYST_ROLE, job_digest=spec.digest)
                 for s in servers]
        assert [hashlib.sha256(s.tobytes()).hexdigest() for s in again] == sha
        assert all(s.store.get_release(spec.job_id).participants_digest == participants_digest(participants)
                   for s in servers)
        fewer = participants.copy()
        fewer[:10] = False
        for server in servers:
            with pytest.raises(ProtocolError) as err:
                server.release(spec.job_id, fewer, caller_role=ANALYST_ROLE, job_digest=spec.digest)
            assert err.value.code == "FAILED_PRECONDITION"
        # a retried upload after the restart gets the same receipt; the closed job takes no new batch
        per_server = job_batches(spec, tables, randomness, batch_clients=64)
        for i, server in enumerate(servers):
            b = per_server[i][0]
            receipt = server.accept(b, spec.job_id, caller_role="party", caller_id=b.party_id)
            assert receipt.content_digest == b.content_digest()
        assert [hashlib.sha256(s.release(spec.job_id, participants, caller_role=ANALYST_ROLE,
                                         job_digest=spec.digest).tobytes()).hexdigest() for s in servers] == sha
    finally:
        for store in stores:
            store.close()

"""Damaged storage against real ``ltm server`` processes (issue #16): a server never answers from
damaged state (DATA_LOSS naming the object), never starts over a data directory its database
does not explain, never deletes anything on a guess, and keeps everything private by file mode.

Every case compares the data directory (database rows, blob bytes, release markers) before and
after.  The number of damaged-storage cases is printed at the end of the module.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from ltm.client_set import ClientSet
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.transport.certs import write_certs
from ltm.transport.files import mode_problems
from ltm.v1 import ltm_pb2
from tests.helpers.upload_targets import ACTORS, Target, encode, make_world, stream

TIMEOUT = 15.0
CASES: collections.Counter = collections.Counter()


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    line = f"\ntest_hostile_storage: {sum(CASES.values())} damaged-storage cases " \
           f"({', '.join(f'{k}: {v}' for k, v in sorted(CASES.items()))})"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(line)


def disk_state(d: Path):
    """Everything under a data directory that matters: every file's bytes (the SQLite database
    through a read-only connection, so its -wal counts), except the lock file."""
    files = {}
    for p in sorted(d.rglob("*")):
        rel = p.relative_to(d).as_posix()
        if p.is_file() and not rel.startswith("server.db") and rel != "LOCK":
            files[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    rows = None
    if (d / "server.db").exists() and (d / "server.db").stat().st_size:
        rows = [read_rows(d, f"SELECT * FROM {t} ORDER BY 1") for t in ("jobs", "batches", "releases")]
    return files, rows


def ltm(*args, timeout=60.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "ltm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """Two servers that stored, closed and released the fuzz job; then stopped.  Yields the work
    directory, certs, the group, the server processes and the release bytes per server."""
    work = tmp_path_factory.mktemp("hostile")
    certs = work / "certs"
    write_certs(certs, ACTORS)
    group = ProcessGroup(work, certs)
    try:
        servers = group.start_servers(2)
        world = make_world([s.endpoint for s in servers])
        targets = [Target("processes", s.actor, s.endpoint, work / s.actor, certs) for s in servers]
        everyone = ClientSet.full(world.spec.n).to_bytes()
        results = []
        for t in targets:
            analyst = t.stub("analyst")
            analyst.CreateJob(ltm_pb2.CreateJobRequest(spec_json=world.spec.canonical_json()), timeout=TIMEOUT)
            for (party_id, _), per_server in sorted(world.batches.items()):
                code, details, _ = t.upload(stream(*encode(per_server[t.index], "fuzz")), actor=party_id)
                assert code == "OK", details
            analyst.Close(ltm_pb2.CloseRequest(job_id="fuzz", job_digest=world.spec.digest), timeout=TIMEOUT)
            results.append(release(t, world, everyone))
            t.close()
        for s in servers:
            group.stop(s)
        yield {"work": work, "certs": certs, "group": group, "servers": servers, "world": world,
               "targets": targets, "results": results, "everyone": everyone}
    finally:
        group.stop_all()


def release(target: Target, world, ranges: bytes) -> bytes:
    chunks = list(target.stub("analyst").Release(ltm_pb2.ReleaseRequest(
        job_id="fuzz", job_digest=world.spec.digest, participant_ranges=ranges), timeout=TIMEOUT))
    return b"".join(c.data for c in chunks[1:])


@contextlib.contextmanager
def running(env, index: int):
    """Server ``index`` restarted on its data directory, stopped again afterwards."""
    group, ap = env["group"], env["servers"][index]
    group.restart(ap)
    target = Target("processes", ap.actor, ap.endpoint, env["work"] / ap.actor, env["certs"])
    try:
        yield target
    finally:
        target.close()
        group.stop(ap)


@contextlib.contextmanager
def damaged(path: Path):
    """Keep a pristine copy of a data directory and put it back afterwards."""
    saved = path.with_name(path.name + ".pristine")
    shutil.copytree(path, saved)
    try:
        yield
    finally:
        shutil.rmtree(path)
        saved.rename(path)


def expect_data_loss(target: Target, env, phrase: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        release(target, env["world"], env["everyone"])
    assert err.value.code() == grpc.StatusCode.DATA_LOSS, (err.value.code(), err.value.details())
    assert phrase in err.value.details(), err.value.details()


def refused_with_data_loss(env, index: int, case: str, phrase: str) -> None:
    """Server ``index``, restarted on its damaged data directory, refuses the release with DATA_LOSS
    naming ``phrase``, and the refusal changes nothing on its disk."""
    d = env["work"] / f"server-{index}"
    before = disk_state(d)
    CASES[case] += 1
    with running(env, index) as t:
        expect_data_loss(t, env, phrase)
    assert disk_state(d) == before


def read_rows(data_dir: Path, sql: str) -> list[tuple]:
    """The rows of a query on a stopped server's database, opened read-only."""
    conn = sqlite3.connect(f"file:{data_dir / 'server.db'}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def edit_database(data_dir: Path, *statements: tuple[str, tuple]) -> None:
    """Run ``(sql, parameters)`` statements on a stopped server's database, as a disk fault or an
    attacker with the file would."""
    conn = sqlite3.connect(data_dir / "server.db")
    try:
        for sql, parameters in statements:
            conn.execute(sql, parameters)
        conn.commit()
    finally:
        conn.close()


def blob_server(env) -> int:
    return next(i for i in range(2) if list((env["work"] / f"server-{i}" / "blobs").rglob("*.u64")))


def test_release_is_repeatable_and_the_data_directory_is_private(released):
    for i, ap in enumerate(released["servers"]):
        d = released["work"] / ap.actor
        assert mode_problems(d) == [], mode_problems(d)
        with running(released, i) as t:
            assert release(t, released["world"], released["everyone"]) == released["results"][i]
        r = ltm("server", "--check", "--data-dir", str(d))
        assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_a_flipped_bit_in_a_blob_is_refused_with_data_loss(released):
    i = blob_server(released)
    d = released["work"] / f"server-{i}"
    with damaged(d):
        blob = sorted((d / "blobs").rglob("*.u64"))[1]
        raw = bytearray(blob.read_bytes())
        raw[len(raw) // 2] ^= 0x04
        blob.write_bytes(bytes(raw))
        # the release record is intact, so a retry of the release still gets the stored bytes;
        # a *new* release needs the shares: drop the record (as a lost DB row would) and ask again
        edit_database(d, ("DELETE FROM releases", ()))
        refused_with_data_loss(released, i, "flipped bit in a blob", blob.relative_to(d).as_posix())
        r = ltm("server", "--check", "--data-dir", str(d))
        assert r.returncode == 3 and blob.relative_to(d).as_posix() in r.stdout, r.stdout + r.stderr


def test_a_flipped_bit_in_a_helper_seed_is_refused_with_data_loss(released):
    i = 1 - blob_server(released)
    d = released["work"] / f"server-{i}"
    with damaged(d):
        (rowid, seed), *_ = read_rows(d, "SELECT rowid, seed FROM batches WHERE seed IS NOT NULL")
        edit_database(d, ("UPDATE batches SET seed = ? WHERE rowid = ?", (bytes([seed[0] ^ 1]) + seed[1:], rowid)),
                      ("DELETE FROM releases", ()))
        refused_with_data_loss(released, i, "flipped bit in a seed row", "content digest")


@pytest.mark.parametrize("edit", ["result bytes", "participants digest", "marker digest", "marker removed"])
def test_an_edited_release_record_is_refused_with_data_loss(released, edit):
    i = 0
    d = released["work"] / "server-0"
    with damaged(d):
        (marker,) = (d / "releases").iterdir()
        if edit == "result bytes":
            ((result,),) = read_rows(d, "SELECT result FROM releases")
            edit_database(d, ("UPDATE releases SET result = ?", (bytes([result[0] ^ 1]) + result[1:],)))
        elif edit == "participants digest":
            edit_database(d, ("UPDATE releases SET participants_digest = ?", ("0" * 64,)))
        elif edit == "marker digest":
            marker.write_text(marker.read_text().replace('"result_sha256": "', '"result_sha256": "0'))
        else:
            marker.unlink()
        refused_with_data_loss(released, i, f"edited release record ({edit})", "release")


@pytest.mark.parametrize("how", ["missing", "empty", "fresh"])
def test_blobs_without_their_database_refuse_to_start_and_nothing_is_deleted(released, how):
    i = blob_server(released)
    d = released["work"] / f"server-{i}"
    with damaged(d):
        for name in ("server.db", "server.db-wal", "server.db-shm"):
            (d / name).unlink(missing_ok=True)
        if how == "empty":
            (d / "server.db").write_bytes(b"")
        elif how == "fresh":  # a valid database that knows nothing (e.g. from another directory)
            fresh = released["work"] / "fresh-store"
            from ltm.server.sqlite_store import SqliteStore
            SqliteStore(fresh).close()
            shutil.copy(fresh / "server.db", d / "server.db")
        before = disk_state(d)
        CASES[f"database {how}"] += 1
        ap = released["servers"][i]
        r = ltm("server", "--id", ap.actor, "--listen", "127.0.0.1:0", "--data-dir", str(d),
                "--certs", str(released["certs"]))
        assert r.returncode == 3, r.stdout + r.stderr
        phrase = "not named by any stored batch" if how == "fresh" else f"database server.db is {how}"
        assert phrase in r.stderr and "nothing was deleted" in r.stderr, r.stderr
        if how == "fresh":
            assert "release marker" in r.stderr  # the once-only record is named too
        assert disk_state(d) == before
        assert ltm("server", "--check", "--data-dir", str(d)).returncode == 3
        assert disk_state(d) == before
        # the explicit repair deletes nothing: unknown blobs move to quarantine/, the release
        # marker stays and retires the job id, so the job can never be released again
        r = ltm("server", "--repair", "--data-dir", str(d))
        assert r.returncode == 0 and "retired job id 'fuzz'" in r.stdout, r.stdout + r.stderr
        after_files, _ = disk_state(d)
        assert not collections.Counter(before[0].values()) - collections.Counter(after_files.values()), \
            "a file was lost"
        assert {k for k in before[0] if k.startswith("releases/")} <= set(after_files)
        assert mode_problems(d) == []
        with running(released, i) as t:
            with pytest.raises(grpc.RpcError) as err:
                t.stub("analyst").CreateJob(ltm_pb2.CreateJobRequest(
                    spec_json=released["world"].spec.canonical_json()), timeout=TIMEOUT)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
            assert "before its database was lost" in err.value.details()

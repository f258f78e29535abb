"""Nothing lost, no one in: crashes of servers and parties, with real processes on loopback and mTLS.

Three `ltm server` processes are started for the module; parties are `ltm party` processes (or,
where a test needs to hand-craft a partial upload, the test plays a party with its certificate);
the test process plays the analyst with the coordinator's functions.  Faults are real: SIGKILL
(no cleanup), and SIGSTOP where a test must hold a process at a known point first (a frozen process
is then SIGKILLed or continued).  Servers come back on their old port with their old data
directory (`ProcessGroup.restart`).  Releases are compared bit for bit with an undisturbed
in-process run of the same seeded job and batch size.
"""
import asyncio
import json
import os
import random
import signal
import stat
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest

from ltm.analyst.coordinator import ReleaseFailed, RetryPolicy, close_all, fetch_result_share, publish, run_job
from ltm.analyst.reconstruct import reconstruct_release
from ltm.cli.app import main
from ltm.client_set import ClientSet
from ltm.datasets.synthetic import synthetic_ridge
from ltm.party.journal import JournalError, UploadJournal, journal_path
from ltm.party.randomizer import client_vectors, clip_rows, make_batches, party_randomness, plan_batches
from ltm.party.uploader import run_upload, upload_batch
from ltm.randomness import DERIVED_MODE, Randomness
from ltm.sim.localnet.demo import write_party_csv
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.transport.tls import make_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from tests.helpers.jobs import seeded_job
from tests.helpers.servers import close_channels, pinned, release_over_grpc

K = 3
BATCH = 100
KILLS = 5  # server kills during the upload in test (a)
PARTIES = ["party-0", "party-1", "party-2"]
FAST = RetryPolicy(deadline_s=20.0, base_delay_s=0.05, max_delay_s=0.5)


@pytest.fixture(scope="module")
def dep(start_servers):
    return start_servers("crash", K, PARTIES + ["analyst", "operator"])


# ---------------------------------------------------------------------------- helpers
def _job(dep, job_id, seed, n, parties=2, **kw):
    spec, table, randomness = seeded_job(seed, n, job_id=job_id, parties=parties, k=K, m=16,
                                         endpoints=[s.endpoint for s in dep.servers], **kw)
    tables = party_tables(spec, table)
    data_dir = dep.work / job_id
    data_dir.mkdir()
    for pid, t in tables.items():
        write_party_csv(data_dir / f"{pid}.csv", t)
    return spec, tables, randomness, data_dir


def _start_party(dep, spec, pid, data_dir, seed):
    argv = ["party", "--id", pid, "--servers", ",".join(s.endpoint for s in dep.servers),
            "--server-ids", ",".join(s.actor for s in dep.servers), "--job", spec.job_id,
            "--data", str(data_dir / f"{pid}.csv"), "--batch-clients", str(BATCH), "--no-progress",
            "--summary-file", str(data_dir / f"{pid}.summary.json")]
    if seed is not None:
        argv += ["--seed", str(seed)]
    return dep.group.start_task("party", pid, argv)


async def _held(stub, job_id):
    try:
        st = await stub.Status(ltm_pb2.StatusRequest(job_id=job_id), timeout=2.0)
    except grpc.aio.AioRpcError:
        return None
    return st


async def _wait_exit(procs, timeout=90.0):
    end = time.monotonic() + timeout
    while any(p.proc.poll() is None for p in procs):
        assert time.monotonic() < end, "parties did not finish:\n" + "\n".join(p.log_tail() for p in procs)
        await asyncio.sleep(0.05)
    for p in procs:
        assert p.proc.returncode == 0, p.log_tail()


def _freeze(ap):
    ap.proc.send_signal(signal.SIGSTOP)


def _thaw(ap):
    ap.proc.send_signal(signal.SIGCONT)


# ---------------------------------------------------------------------------- (a) servers
def test_servers_killed_during_upload_and_release(dep):
    """kill -9 servers at random points during the upload and once during the release; the
    release is bit-identical to an undisturbed in-process run, and survives a later restart."""
    spec, tables, randomness, data_dir = _job(dep, "server-crash", seed=21, n=6000)
    group, servers = dep.group, dep.servers
    rng = random.Random(2024)
    kill_points = []

    async def scenario():
        a_ch, analyst = dep.aio_stubs("analyst")
        try:
            await publish(analyst, spec)
            parties = [_start_party(dep, spec, p.party_id, data_dir, seed=21) for p in spec.parties]
            # kill a random server (up to KILLS times) 0.1–0.5 s apart while the parties upload
            while (await _held(analyst[0], spec.job_id)).clients_held == 0:
                assert all(p.proc.poll() is None for p in parties), [p.log_tail() for p in parties]
                await asyncio.sleep(0.01)
            while any(p.proc.poll() is None for p in parties) and len(kill_points) < KILLS:
                victim = rng.randrange(K)
                held = [getattr(await _held(s, spec.job_id), "clients_held", None) for s in analyst]
                await asyncio.to_thread(group.restart, servers[victim])  # SIGKILL, then back on its port
                kill_points.append({"server": victim, "held_at_kill": held})
                await asyncio.sleep(rng.uniform(0.1, 0.5))
            await _wait_exit(parties)

            # kill during the release: freeze server-1 so its Release is in flight, SIGKILL it once
            # the two others have released, restart it; the analyst's retry gets the same bytes
            participants = ClientSet.intersection(await close_all(analyst, spec, FAST))
            assert participants == ClientSet.full(spec.n)
            _freeze(servers[1])
            retries = {}
            fetch = asyncio.gather(*(fetch_result_share(s, spec, participants, server_index=i, policy=FAST,
                                                        retries=retries) for i, s in enumerate(analyst)))
            fetch_task = asyncio.ensure_future(fetch)
            for i in (0, 2):
                while not (await _held(analyst[i], spec.job_id)).released:
                    await asyncio.sleep(0.01)
            await asyncio.to_thread(group.restart, servers[1])
            shares = await fetch_task
            assert retries.get("server-1", {}).get("Release", 0) >= 1  # the kill interrupted that call

            # the analyst's whole run now: close and release are retried idempotently
            run = await run_job(analyst, spec, deadline_s=5, randomness_label=randomness.label, policy=FAST)
            direct = reconstruct_release(spec, [s[0] for s in shares], participants, spec.noise_plan(),
                                         randomness=randomness.label)

            # the once-only record survives another kill -9: an identical retry returns identical bytes,
            # any other participant set is still refused
            await asyncio.to_thread(group.restart, servers[0])
            again, _ = await fetch_result_share(analyst[0], spec, participants, server_index=0, policy=FAST)
            np.testing.assert_array_equal(again, shares[0][0])
            other = participants - ClientSet.span(spec.n, 0, 1)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await fetch_result_share(analyst[0], spec, other, server_index=0, policy=FAST)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            return run, direct, parties
        finally:
            await close_channels(a_ch)

    t0 = time.monotonic()
    run, direct, parties = asyncio.run(scenario())
    local = run_inprocess(spec, tables, randomness, batch_clients=BATCH)
    during_upload = [k for k in kill_points if None in k["held_at_kill"] or min(k["held_at_kill"]) < spec.n]
    print(f"\nserver restarts survived: {len(kill_points)} during upload ({len(during_upload)} with the upload "
          f"incomplete) + 1 during release + 1 after release; kill points (clients held by each server at the "
          f"kill): {[k['held_at_kill'] for k in kill_points]}; {time.monotonic() - t0:.1f} s")
    assert len(during_upload) >= 2
    assert run.participants.count == spec.n
    assert run.coverage["held_per_server"] == {f"server-{i}": spec.n for i in range(K)}
    assert run.release.sha256 == local.release.sha256 == direct.sha256
    np.testing.assert_array_equal(run.release.matrix, local.release.matrix)
    summaries = [json.loads((data_dir / f"{p.actor}.summary.json").read_text()) for p in parties]
    assert sum(s["clients"] for s in summaries) == spec.n  # nobody skipped or resumed: only servers died


# ---------------------------------------------------------------------------- (b) parties
def _clear_sketch(spec, tables):
    """S·X in floating point from the parties' clipped (noise-free) vectors, and the row loads."""
    sketch = spec.make_sketch()
    rows, negative = sketch.placement(0, spec.n)
    acc = np.zeros((sketch.m, spec.width))
    for party in spec.parties:
        x = clip_rows(client_vectors(spec, party, tables[party.party_id]), party.clip_bound, spec.clip_norm)
        for piece in range(sketch.pieces):
            sign = np.where(negative[piece, party.start:party.stop], -1.0, 1.0)
            np.add.at(acc, rows[piece, party.start:party.stop], sign[:, None] * x)
    loads = np.bincount(rows.ravel(), minlength=sketch.m)
    return acc * sketch.scale, loads


@pytest.mark.parametrize("mode", ["seeded", "system"])
def test_party_killed_mid_upload_resumes(dep, mode):
    """A party SIGKILLed while a batch has reached some servers but not all resumes from its
    journal: the in-flight batch is re-derived bit for bit from its journaled key (the servers
    that have it return the same receipt), finished batches are skipped, every client is counted
    once, and the release is the undisturbed one (seeded) or consistent noise around S·X (system)."""
    seed = 31 if mode == "seeded" else None
    # the data and sketch come from seed 31 either way; only a seeded party needs a reproduction job
    spec, tables, randomness, data_dir = _job(dep, f"party-crash-{mode}", seed=31, n=6000,
                                              reproduction=mode == "seeded")
    group, servers = dep.group, dep.servers
    jpath = journal_path(data_dir / ".ltm-party-state", spec.job_id, "party-0")

    async def scenario():
        a_ch, analyst = dep.aio_stubs("analyst")
        try:
            await publish(analyst, spec)
            parties = [_start_party(dep, spec, p.party_id, data_dir, seed) for p in spec.parties]
            def done_batches():
                try:
                    return sum(e["done"] for e in json.loads(jpath.read_text())["batches"].values())
                except FileNotFoundError:  # (replaced atomically: never torn)
                    return 0

            while done_batches() < 2:  # party-0 is well under way
                assert all(p.proc.poll() is None for p in parties), [p.log_tail() for p in parties]
                await asyncio.sleep(0.002)
            held2 = (await _held(analyst[2], spec.job_id)).clients_held
            _freeze(servers[2])  # the parties' next batches reach server-0 and server-1, not server-2
            try:
                await asyncio.sleep(0.5)
                journal = json.loads(jpath.read_text())
                group.kill(parties[0])  # SIGKILL, mid-upload
                killed = json.loads(jpath.read_text())
                assert killed == journal  # nothing was written while it waited for server-2
                held0 = (await _held(analyst[0], spec.job_id)).clients_held
            finally:
                _thaw(servers[2])
            unfinished = {int(b): e for b, e in killed["batches"].items() if not e["done"]}
            done = [int(b) for b, e in killed["batches"].items() if e["done"]]
            assert len(unfinished) == 1 and done, killed  # one batch in flight, some finished
            (in_flight, entry), = unfinished.items()
            assert entry["mode"] == ("seeded" if seed is not None else DERIVED_MODE) and len(entry["key"]) == 64
            held_at_kill = (held0, held2)
            group.restart(parties[0])  # same command line, same state directory
            await _wait_exit(parties)
            run = await run_job(analyst, spec, deadline_s=10, randomness_label=randomness.label, policy=FAST)

            # every server holds exactly the sharing the journaled key derives: an identical re-upload
            # of the re-derived in-flight batch is acknowledged (a different sharing would be refused)
            key_rand = Randomness(entry["mode"], bytes.fromhex(entry["key"]))
            skip = {i for i, _, _ in plan_batches(spec.party("party-0"), BATCH).ranges} - {in_flight}
            (rederived,) = list(make_batches(spec, "party-0", tables["party-0"], Randomness.system(),
                                             batch_clients=BATCH, batch_randomness=lambda i: key_rand, skip=skip))
            assert [b.content_digest() for b in rederived] == entry["digests"]
            p_ch, party0 = dep.aio_stubs("party-0")
            try:
                for b in rederived:
                    receipt, _ = await upload_batch(party0[b.server], b, spec.job_id)
                    assert receipt.content_digest == entry["digests"][b.server]
            finally:
                await close_channels(p_ch)
            return run, held_at_kill, in_flight, done, parties
        finally:
            await close_channels(a_ch)

    run, held_at_kill, in_flight, done, parties = asyncio.run(scenario())
    assert held_at_kill[0] > held_at_kill[1]  # the in-flight batches had reached server-0, not server-2
    summary = json.loads((data_dir / "party-0.summary.json").read_text())
    size = spec.party("party-0").size
    assert summary["resumed_batches"] == 1 and summary["skipped_batches"] == len(done)
    assert summary["clients"] + summary["skipped_clients"] == size
    final = json.loads(jpath.read_text())
    assert all(e["done"] and "key" not in e for e in final["batches"].values())  # keys dropped once done
    assert stat.S_IMODE(os.stat(jpath).st_mode) == 0o600
    # every client counted exactly once, on every server
    assert run.participants.count == spec.n and run.coverage["reached_some_not_all"] == 0
    assert run.coverage["held_per_server"] == {f"server-{i}": spec.n for i in range(K)}
    if seed is not None:
        local = run_inprocess(spec, tables, randomness, batch_clients=BATCH)
        assert run.release.sha256 == local.release.sha256
    else:
        # production randomness: the noise cannot be recomputed, but the release must be S·X plus
        # noise of the calibrated size — one batch with shares from two different sharings would
        # put uniformly random ring elements (~2^63 / 2^f) into its rows
        clear, loads = _clear_sketch(spec, tables)
        sigma = spec.noise_plan().sigma_client * spec.make_sketch().scale
        z = (run.release.matrix - clear) / (np.sqrt(loads)[:, None] * sigma)
        assert np.abs(z).max() < 8, np.abs(z).max()
        assert 0.3 < float(np.mean(z**2)) < 2.5


def test_journal_rederives_unfinished_batches_and_refuses_mismatches(tmp_path):
    """The journal in isolation (production randomness): a restarted party re-derives the batch it
    had started bit for bit, skips finished ones, forgets finished keys, and refuses to resume with
    another batch size, randomness mode, job digest or changed data."""
    randomness = Randomness.seeded_insecure(61)
    table = synthetic_ridge(500, 3, randomness)
    spec, _ = build_job(table, job_id="j", randomness=randomness, parties=2, k=3, m=8)
    data = party_tables(spec, table)["party-0"]
    base = Randomness.system()

    def batches(journal, table=data):
        return make_batches(spec, "party-0", table, base, batch_clients=100, skip=journal.done_batches(),
                            batch_randomness=lambda b: journal.randomness_for(b, base))

    j = UploadJournal.open(tmp_path, spec, "party-0", batch_clients=100, seeded=False)
    gen = batches(j)
    first, second = next(gen), next(gen)
    assert j.begin(first)[1] is False
    j.done(0)
    started, _ = j.begin(second)  # ... and the party dies with batch 1 in flight
    assert stat.S_IMODE(os.stat(j.path).st_mode) == 0o600
    on_disk = json.loads(j.path.read_text())["batches"]
    assert "key" not in on_disk["0"] and on_disk["1"]["mode"] == DERIVED_MODE

    j2 = UploadJournal.open(tmp_path, spec, "party-0", batch_clients=100, seeded=False)
    assert j2.done_batches() == {0} and j2.unfinished_at_open == [1]
    gen = batches(j2)
    redo = next(gen)
    assert redo[0].batch_index == 1 and j2.begin(redo) == (started, True)
    fresh = next(gen)  # batch 2 was never sent: a new key
    assert fresh[0].batch_index == 2 and j2.begin(fresh)[1] is False

    changed = {c: v.copy() for c, v in data.items()}
    first_col = next(iter(changed))
    changed[first_col][150] += 1.0  # a client of batch 1
    j3 = UploadJournal.open(tmp_path, spec, "party-0", batch_clients=100, seeded=False)
    with pytest.raises(JournalError, match="data changed"):
        j3.begin(next(batches(j3, changed)))
    with pytest.raises(JournalError, match="batch-clients"):
        UploadJournal.open(tmp_path, spec, "party-0", batch_clients=50, seeded=False)
    with pytest.raises(JournalError, match="randomness"):
        UploadJournal.open(tmp_path, spec, "party-0", batch_clients=100, seeded=True)
    other, _ = build_job(table, job_id="j", randomness=randomness, parties=2, k=3, m=8, epsilon=0.5)
    with pytest.raises(JournalError, match="digest"):
        UploadJournal.open(tmp_path, other, "party-0", batch_clients=100, seeded=False)


# ---------------------------------------------------------------------------- (c) a server down
def test_a_server_down_for_the_whole_job_means_no_release(dep):
    """Server-2 dies after one party uploaded and stays down: the analyst (in this process, and the
    `ltm analyst` process behind the operator's RunJob) says precisely that no release is possible."""
    spec, tables, randomness, data_dir = _job(dep, "server-down", seed=41, n=3000)
    group, servers = dep.group, dep.servers
    late = []
    analyst_proc = group.start_service("analyst", "analyst", ["analyst", "--out", str(dep.work / "analyst-out"),
                                                              "--server-retry", "2"])

    async def scenario():
        a_ch, analyst = dep.aio_stubs("analyst")
        p_ch, party0 = dep.aio_stubs("party-0")
        o_ch = make_channel(analyst_proc.endpoint, dep.certs, "operator", options=pinned(analyst_proc))
        operator = ltm_pb2_grpc.AnalystStub(o_ch)
        try:
            await operator.SubmitJob(ltm_pb2.SubmitJobRequest(spec_json=spec.canonical_json()), timeout=30)
            await run_upload(party0, spec, "party-0", tables["party-0"], party_randomness(randomness, spec, "party-0"),
                             batch_clients=BATCH, progress=False)
            group.kill(servers[2])  # and it never comes back during the job
            late.append(_start_party(dep, spec, "party-1", data_dir, seed=41))

            async def via_operator():
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await operator.RunJob(ltm_pb2.RunJobRequest(job_id=spec.job_id, deadline_s=1.0), timeout=60)
                return err.value

            async def in_process():
                with pytest.raises(ReleaseFailed) as err:
                    await run_job(analyst, spec, deadline_s=1.0, randomness_label=randomness.label,
                                  policy=RetryPolicy(deadline_s=2.0, base_delay_s=0.05, max_delay_s=0.5))
                return err.value

            return await asyncio.gather(via_operator(), in_process())
        finally:
            await close_channels(a_ch + p_ch + [o_ch])

    try:
        rpc_error, exc = asyncio.run(scenario())
        assert rpc_error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert rpc_error.details().startswith("server-2 is unreachable: no release is possible")
        message = str(exc)
        print("\n" + message)
        assert message.startswith("server-2 is unreachable: no release is possible")
        assert "k-of-k additive sharing" in message
        assert f"server-2 unreachable at {servers[2].endpoint}" in message
        assert "server-0 holds 1500 of 3000 clients" in message and "server-1 holds 1500 of 3000" in message
        assert "server-2 unreachable (holds an unknown set" in message
        cov = exc.coverage
        assert cov["held_per_server"] == {"server-0": 1500, "server-1": 1500, "server-2": None}
        assert cov["all_servers_reachable"] is False and cov["reached_some_not_all"] == 0
        # a party that joins now cannot even fetch the job: it needs every server's copy of the spec
        # (it keeps retrying until its --wait, 30 s by default; the test does not wait for that)
        assert late[0].proc.poll() is None
    finally:
        for p in late:
            group.kill(p)
        group.stop(analyst_proc)
        group.restart(servers[2])


def test_release_over_the_intersection_when_the_gate_allows_it(dep):
    """Clients that reached some servers but not all are dropped everywhere; the release is over
    the clients every server holds if the gate allows it — and a precise refusal if it does not."""

    async def upload(stubs, spec, pid, table, r):
        if pid != "party-2":
            return await run_upload(stubs, spec, pid, table, r, batch_clients=BATCH, progress=False)
        for per_server in make_batches(spec, pid, table, r, batch_clients=BATCH):
            for b in per_server[:2]:  # party-2's batches reach server-0 and server-1 only
                await upload_batch(stubs[b.server], b, spec.job_id)

    def scenario(spec, tables, randomness):
        return release_over_grpc(dep, spec, tables, randomness, deadline_s=0.5, policy=FAST, upload=upload)

    # an explicit, lower L: two thirds of the clients still carry enough honest load
    spec, tables, randomness, _ = _job(dep, "intersection", seed=51, n=3000, parties=3, min_honest_load=20)
    run = asyncio.run(scenario(spec, tables, randomness))
    assert run.coverage["reached_every_server"] == 2000 and run.coverage["reached_some_not_all"] == 1000
    assert run.coverage["held_per_server"] == {"server-0": 3000, "server-1": 3000, "server-2": 2000}
    assert run.participants.ranges.tolist() == [[0, 2000]]
    local = run_inprocess(spec, {k: v for k, v in tables.items() if k != "party-2"}, randomness,
                          batch_clients=BATCH)
    assert run.release.sha256 == local.release.sha256

    # the default L (95% of the full job's row load): without a third of the clients the gate refuses
    spec, tables, randomness, _ = _job(dep, "intersection-refused", seed=52, n=3000, parties=3)
    with pytest.raises(ReleaseFailed) as err:
        asyncio.run(scenario(spec, tables, randomness))
    message = str(err.value)
    assert "release refused" in message and "honest load" in message
    assert "the participant set was the 2000 clients every server holds (1000 clients that reached some but " \
           "not all servers were dropped)" in message
    assert "server-2 holds 2000 of 3000 clients" in message


# ---------------------------------------------------------------------------- (d) ltm demo --chaos
def test_demo_chaos_releases_the_undisturbed_bytes(capsys):
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ltm.cli", "demo", "--chaos", "--seed", "7", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    chaos = json.loads(out.stdout)
    seconds = time.monotonic() - t
    assert main(["simulate", "--seed", "7", "--upload-mode", "per-client", "--json"]) == 0  # == `ltm demo --seed 7` (tests/integration/test_cli.py)
    undisturbed = json.loads(capsys.readouterr().out)
    events = chaos["chaos"]["events"]
    print(f"\nltm demo --chaos: {chaos['chaos']['server_restarts']} restarts, "
          f"{[(e['phase'], e['server'], e['analyst_retries']) for e in events]}, {seconds:.1f} s")
    assert chaos["chaos"]["server_restarts"] >= 1
    assert events[0]["phase"] == "upload" and events[0]["held_after_restart"] >= events[0][
        "clients_acknowledged_before_kill"]
    assert chaos["release_sha256"] == undisturbed["release_sha256"]
    assert chaos["participants"] == chaos["n_train"]
    restarted = [p for p in chaos["processes"] if p.get("previous_pids")]
    assert restarted and all(p["role"] == "server" for p in restarted)

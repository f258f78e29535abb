"""The replicated degree-2 release of the columns partition over gRPC (issue #21, item 5): three real
`ltm server` processes with mutual TLS and SQLite stores; this process plays the analyst and the
parties through the same upload and coordination code the `ltm party` and `ltm analyst` processes
run.  Seeded, the release equals the in-process one bit for bit; with the noise off the three
output shares add up to the clear Gram; every server enforces its own gate; a server refuses a
malformed part.  (`ltm demo --partition columns` with real party and analyst processes is in
tests/integration/test_cli.py.)"""
import asyncio
import subprocess
import sys
from dataclasses import replace

import grpc
import numpy as np
import pytest

from ltm.analyst.coordinator import close_all, fetch_result_share, publish
from ltm.client_set import ClientSet
from ltm.clipping import clip_rows
from ltm.datasets.synthetic import synthetic_ridge
from ltm.party import replicated as party_replicated
from ltm.party.randomizer import client_vectors, party_randomness
from ltm.party.replicated import replicated_batches, run_replicated_upload
from ltm.party.uploader import upload_batch
from ltm.randomness import Randomness
from ltm.replicated import clear_triangle
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.servers import close_channels, held, publish_over_grpc, release_over_grpc, upload_all

K = 3
PARTIES = [f"party-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def deployment(start_servers):
    return start_servers("rep", K, PARTIES + ["analyst", "operator"])


def _job(dep, job_id, seed, n=1500):
    randomness = Randomness.seeded_insecure(seed)
    table = synthetic_ridge(n, 5, randomness.child("data"))
    spec, _ = build_job(table, job_id=job_id, randomness=randomness, partition="columns", parties=3, k=K,
                        kind="gram", colluding_servers=1, endpoints=dep.endpoints)
    assert spec.replicated and spec.reproduction
    return spec, party_tables(spec, table), randomness


def _networked(dep, spec, tables, randomness, parties=None):
    return asyncio.run(release_over_grpc(dep, spec, tables, randomness, deadline_s=5 if parties else 20,
                                         parties=parties, fetch=True, upload=run_replicated_upload))


def test_the_same_release_in_process_and_over_grpc(deployment):
    spec, tables, randomness = _job(deployment, "rep-equivalence", seed=21)
    run = _networked(deployment, spec, tables, randomness)
    local = run_inprocess(spec, tables, randomness)
    assert run.participants.count == spec.n
    assert run.release.kind == local.release.kind == "gram"
    assert run.release.sha256 == local.release.sha256
    np.testing.assert_array_equal(run.release.matrix, local.release.matrix)
    for wire, mine in zip(run.result_shares, local.result_shares):
        np.testing.assert_array_equal(wire.reshape(-1), mine)  # each server's own output share, too
    assert run.release.privacy["colluding_servers"] == 1 and not run.release.privacy["dp_verified"]


def test_output_shares_add_up_to_the_clear_gram_over_grpc(deployment, monkeypatch):
    """With the parties' noise off, Σ of the three servers' output shares is triu(ẐᵀẐ) exactly."""
    real = party_replicated.party_uploads
    monkeypatch.setattr(party_replicated, "party_uploads", lambda *a, **kw: real(*a, **{**kw, "plan": None}))
    spec, tables, randomness = _job(deployment, "rep-clear", seed=22, n=800)
    run = _networked(deployment, spec, tables, randomness)
    Z = np.zeros((spec.n, spec.width))
    for party in spec.parties:
        idx = spec.party_column_indices(party)
        Z[:, idx] = clip_rows(client_vectors(spec, party, tables[party.party_id]), party.clip_bound, spec.clip_norm)
    total = sum(s.reshape(-1) for s in run.result_shares[1:]) + run.result_shares[0].reshape(-1)
    np.testing.assert_array_equal(total, clear_triangle(Z, spec.frac_bits))
    # no server's share is the sum: each is masked by the parties' zero-sharing
    assert all(not np.array_equal(s.reshape(-1), total) for s in run.result_shares)


def test_each_server_gates_its_release(deployment):
    spec, tables, randomness = _job(deployment, "rep-gate-missing", seed=23, n=600)
    with pytest.raises(Exception, match="three parts are needed"):  # party-2 never uploads
        _networked(deployment, spec, tables, randomness, parties=PARTIES[:2])

    spec, tables, randomness = _job(deployment, "rep-gate", seed=23, n=600)

    async def go():
        a_ch, analyst = deployment.aio_stubs("analyst")
        try:
            await publish(analyst, spec)
            await upload_all(deployment, spec, tables, randomness, upload=run_replicated_upload)
            closed = await close_all(analyst, spec)
            assert all(h.count == spec.n for h in closed)
            with pytest.raises(grpc.aio.AioRpcError, match="over every client"):
                await fetch_result_share(analyst[0], spec, ClientSet.from_mask(np.arange(spec.n) < spec.n - 1))
            first, _ = await fetch_result_share(analyst[0], spec, ClientSet.full(spec.n))
            again, _ = await fetch_result_share(analyst[0], spec, ClientSet.full(spec.n))
            return first, again
        finally:
            await close_channels(a_ch)

    first, again = asyncio.run(go())
    np.testing.assert_array_equal(first, again)  # a retried release returns the stored bytes
    assert first.shape == (1, spec.width * (spec.width + 1) // 2)


def test_a_server_refuses_a_malformed_part(deployment):
    spec, tables, randomness = _job(deployment, "rep-parts", seed=24, n=400)
    per_server = replicated_batches(spec, "party-0", tables["party-0"], party_randomness(randomness, spec, "party-0"))
    part = next(b for b in per_server[0] if b.share.data is not None and b.batch_index == 0)

    async def send(batch, server=0):
        a_ch, analyst = deployment.aio_stubs("analyst")
        p_ch, stubs = deployment.aio_stubs("party-0")
        try:
            await publish(analyst, spec)
            return await upload_batch(stubs[server], batch, spec.job_id, attempts=1)
        finally:
            await close_channels(a_ch)
            await close_channels(p_ch)

    bad_part = replace(part, batch_index=3)
    with pytest.raises(grpc.aio.AioRpcError, match="parts 0, 1, 2"):
        asyncio.run(send(bad_part))
    short = replace(part, stop=part.stop - 1,
                    share=replace(part.share, shape=(1, part.count - 1, len(part.columns)),
                                  data=part.share.data[:, :-1]))
    with pytest.raises(grpc.aio.AioRpcError, match="whole range"):
        asyncio.run(send(short))
    with pytest.raises(grpc.aio.AioRpcError, match="addressed to server index 0"):
        asyncio.run(send(part, server=1))
    receipt, _ = asyncio.run(send(part))
    assert receipt.batch_index == 0
    # a changed part under the same key is refused: shares cannot be swapped after the fact
    changed = replace(part, share=replace(part.share, data=part.share.data + np.uint64(1)))
    with pytest.raises(grpc.aio.AioRpcError, match="already stored with different content"):
        asyncio.run(send(changed))


def test_a_party_process_refuses_a_weaker_trust_assumption_than_its_policy(deployment, tmp_path):
    """`ltm party` (a real process over TLS) refuses the replicated job by default (its policy asks
    for any k − 1 colluding servers), sends nothing, and joins it with --min-colluding-servers 1."""
    from ltm.sim.localnet.demo import write_party_csv

    spec, tables, randomness = _job(deployment, "rep-policy", seed=25, n=300)

    asyncio.run(publish_over_grpc(deployment, spec))
    data = tmp_path / "party-0.csv"
    write_party_csv(data, tables["party-0"])
    argv = [sys.executable, "-m", "ltm.cli", "party", "--id", "party-0", "--certs", str(deployment.certs),
            "--servers", ",".join(deployment.endpoints), "--job", spec.job_id,
            "--data", str(data), "--no-progress", "--seed", "25", "--allow-reproduction",
            "--ledger-dir", str(tmp_path / "ledger"), "--state-dir", str(tmp_path / "state")]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 3, refused.stderr[-2000:]
    assert "at most 1 of 3 servers" in refused.stderr

    analyst = deployment.stubs("analyst")

    def batches():
        return [stored for _, stored in held(analyst, spec.job_id)]

    assert batches() == [0, 0, 0]  # nothing was sent
    joined = subprocess.run(argv + ["--min-colluding-servers", "1"], capture_output=True, text=True, timeout=120)
    assert joined.returncode == 0, joined.stderr[-2000:]
    assert batches() == [3, 3, 3]  # its three parts on every server

"""Real server processes on loopback with mutual TLS: refusals and transport equivalence.

Three `ltm server` processes are started once for the module; the test process plays the
analyst and the parties with real certificates (and, for the refusal test, a certificate from
another CA).  Everything started here is stopped here.
"""
import asyncio

import grpc
import numpy as np
import pytest

from ltm.analyst.coordinator import close_all, fetch_result_share, publish
from ltm.datasets.synthetic import synthetic_ridge
from ltm.party.randomizer import make_batches
from ltm.party.uploader import upload_batch
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.transport.certs import write_certs
from ltm.v1 import ltm_pb2
from tests.helpers.clear_releases import clear_gram_release, shares_sum
from tests.helpers.jobs import seeded_job
from tests.helpers.servers import close_channels, release_over_grpc, upload_all

K = 3


def _job(servers, job_id, seed):
    return seeded_job(seed, 3000, job_id=job_id, parties=2, k=K, m=16, endpoints=servers.endpoints)


def test_both_transports_release_identical_bytes(three_servers):
    spec, table, randomness = _job(three_servers, "equivalence", seed=11)
    tables = party_tables(spec, table)

    run = asyncio.run(release_over_grpc(three_servers, spec, tables, randomness, fetch=True, batch_clients=700))
    local = run_inprocess(spec, tables, randomness, batch_clients=700)
    assert run.participants.count == spec.n
    assert run.release.sha256 == local.release.sha256
    np.testing.assert_array_equal(run.release.matrix, local.release.matrix)


def test_gram_release_is_identical_over_grpc_and_equals_the_clear_sum(three_servers):
    """The gram kind (sum over clients of lifted vectors) on real server processes: the same bytes
    as in process, and those equal Σ enc(lift(clip(z)) + noise) computed in the clear."""
    randomness = Randomness.seeded_insecure(13)
    table = synthetic_ridge(2000, 4, randomness)
    spec, _ = build_job(table, job_id="gram-equivalence", randomness=randomness, parties=2, k=K, kind="gram",
                        endpoints=three_servers.endpoints)
    tables = party_tables(spec, table)

    run = asyncio.run(release_over_grpc(three_servers, spec, tables, randomness, batch_clients=300))
    local = run_inprocess(spec, tables, randomness, batch_clients=300)
    assert run.participants.count == spec.n
    assert run.release.kind == local.release.kind == "gram"
    assert run.release.sha256 == local.release.sha256
    np.testing.assert_array_equal(run.release.matrix, local.release.matrix)
    np.testing.assert_array_equal(shares_sum(local), clear_gram_release(spec, tables, randomness, batch=300))


def test_refusals_carry_the_right_status(three_servers, tmp_path):
    spec, table, randomness = _job(three_servers, "refusals", seed=12)
    tables = party_tables(spec, table)
    write_certs(tmp_path / "foreign", ["party-0", "analyst"])  # same names, another CA

    async def scenario():
        a_ch, analyst = three_servers.aio_stubs("analyst")
        p_ch, party0 = three_servers.aio_stubs("party-0")
        f_ch, foreign = three_servers.aio_stubs("party-0", tmp_path / "foreign")
        try:
            await publish(analyst, spec)
            # 1. a certificate from another CA: the TLS handshake fails, no RPC runs
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await foreign[0].GetJob(ltm_pb2.GetJobRequest(job_id=spec.job_id), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE

            # 2. party-0 uploading client indices outside its range (party-1's clients)
            p0, p1 = spec.parties
            batch = next(make_batches(spec, "party-0", tables["party-0"], randomness.child("x"), batch_clients=100))[0]
            forged = type(batch)(batch.job_digest, "party-0", 99, p1.start, p1.start + batch.count, batch.columns,
                                 batch.share)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await upload_batch(party0[0], forged, spec.job_id)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "may upload clients" in err.value.details()

            await upload_all(three_servers, spec, tables, randomness)  # both parties upload everything for real

            # 3. a party calling Release
            everyone = np.ones(spec.n, dtype=bool)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await fetch_result_share(party0[0], spec, everyone)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED

            # 4. the analyst asking for a release that fails the gate (a tiny participant set)
            await close_all(analyst, spec)
            tiny = np.zeros(spec.n, dtype=bool)
            tiny[:5] = True
            for stub in analyst:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await fetch_result_share(stub, spec, tiny)
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            # the refused requests did not consume the once-only release: the real one still works
            shares = [await fetch_result_share(s, spec, everyone) for s in analyst]
            assert len(shares) == K
            # ... and now a second, different release is refused by every server on its own
            for stub in analyst:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await fetch_result_share(stub, spec, np.r_[np.zeros(1, bool), np.ones(spec.n - 1, bool)])
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        finally:
            await close_channels(a_ch + p_ch + f_ch)

    asyncio.run(scenario())


def test_status_reports_batches_and_bytes(three_servers):
    """Status counts stored batches and the gRPC-layer bytes each server moved."""
    spec, table, randomness = _job(three_servers, "status", seed=13)
    tables = party_tables(spec, table)

    async def scenario():
        a_ch, analyst = three_servers.aio_stubs("analyst")
        try:
            await publish(analyst, spec)
            await upload_all(three_servers, spec, tables, randomness, batch_clients=500)
            return await asyncio.gather(*(s.Status(ltm_pb2.StatusRequest(job_id=spec.job_id)) for s in analyst))
        finally:
            await close_channels(a_ch)

    replies = asyncio.run(scenario())
    batches_per_party = [-(-p.size // 500) for p in spec.parties]
    for r in replies:
        assert r.batches == sum(batches_per_party)
        assert r.clients_held == spec.n
        assert r.bytes_received > 0 and r.bytes_sent > 0
        assert r.store_seconds > 0

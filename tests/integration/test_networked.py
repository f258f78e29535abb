"""Real server processes on loopback with mutual TLS: refusals and transport equivalence.

Three `ltm server` processes are started once for the module; the test process plays the
analyst and the parties with real certificates (and, for the refusal test, a certificate from
another CA).  Everything started here is stopped here.
"""
import asyncio

import grpc
import numpy as np
import pytest

from analyst.coordinator import close_all, fetch_result_share, publish, run_job
from ltm.randomness import Randomness
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from party.randomizer import make_batches, party_randomness
from party.uploader import fetch_job, run_upload, upload_batch
from ltm_datasets.synthetic import synthetic_ridge
from sim.runtime.inprocess import run_inprocess
from sim.runtime.jobs import build_job, party_tables
from transport.certs import write_certs
from transport.tls import make_channel

from tests.helpers.jobs import seeded_job

K = 3


@pytest.fixture(scope="module")
def deployment(start_servers):
    started = start_servers("net", K, ["party-0", "party-1", "analyst", "operator"])
    foreign = started.work / "foreign"
    write_certs(foreign, ["party-0", "analyst"])  # same names, another CA
    return {"certs": started.certs, "foreign": foreign, "servers": started.servers, "group": started.group}


def _stubs(dep, actor, cert_dir=None):
    channels = [make_channel(s.endpoint, cert_dir or dep["certs"], actor,
                             options=[("grpc.ssl_target_name_override", s.actor)]) for s in dep["servers"]]
    return channels, [ltm_pb2_grpc.ServerStub(c) for c in channels]


def _job(dep, job_id, seed):
    return seeded_job(seed, 3000, job_id=job_id, parties=2, k=K, m=16, endpoints=[s.endpoint for s in dep["servers"]])


async def _close(channels):
    for c in channels:
        await c.close()


def test_both_transports_release_identical_bytes(deployment):
    spec, table, randomness = _job(deployment, "equivalence", seed=11)
    tables = party_tables(spec, table)

    async def networked():
        a_ch, analyst = _stubs(deployment, "analyst")
        try:
            await publish(analyst, spec)
            for p in spec.parties:
                p_ch, party = _stubs(deployment, p.party_id)
                try:
                    fetched = await fetch_job(party, spec.job_id)
                    assert fetched.digest == spec.digest
                    await run_upload(party, fetched, p.party_id, tables[p.party_id],
                                     party_randomness(randomness, spec, p.party_id), batch_clients=700, progress=False)
                finally:
                    await _close(p_ch)
            return await run_job(analyst, spec, deadline_s=10, randomness_label=randomness.label)
        finally:
            await _close(a_ch)

    run = asyncio.run(networked())
    local = run_inprocess(spec, tables, randomness, batch_clients=700)
    assert run.participants.count == spec.n
    assert run.release.sha256 == local.release.sha256
    np.testing.assert_array_equal(run.release.matrix, local.release.matrix)


def test_gram_release_is_identical_over_grpc_and_equals_the_clear_sum(deployment):
    """The gram kind (sum over clients of lifted vectors) on real server processes: the same bytes
    as in process, and those equal Σ enc(lift(clip(z)) + noise) computed in the clear."""
    from tests.unit.analyst.test_gram import clear_gram_release  # tests/unit/analyst/test_gram.py

    randomness = Randomness.seeded_insecure(13)
    table = synthetic_ridge(2000, 4, randomness)
    spec, _ = build_job(table, job_id="gram-equivalence", randomness=randomness, parties=2, k=K, kind="gram",
                        endpoints=[s.endpoint for s in deployment["servers"]])
    tables = party_tables(spec, table)

    async def networked():
        a_ch, analyst = _stubs(deployment, "analyst")
        try:
            await publish(analyst, spec)
            for p in spec.parties:
                p_ch, party = _stubs(deployment, p.party_id)
                try:
                    await run_upload(party, spec, p.party_id, tables[p.party_id],
                                     party_randomness(randomness, spec, p.party_id), batch_clients=300, progress=False)
                finally:
                    await _close(p_ch)
            return await run_job(analyst, spec, deadline_s=10, randomness_label=randomness.label)
        finally:
            await _close(a_ch)

    run = asyncio.run(networked())
    local = run_inprocess(spec, tables, randomness, batch_clients=300)
    assert run.participants.count == spec.n
    assert run.release.kind == local.release.kind == "gram"
    assert run.release.sha256 == local.release.sha256
    np.testing.assert_array_equal(run.release.matrix, local.release.matrix)
    total = sum(local.result_shares[1:], local.result_shares[0].copy())
    np.testing.assert_array_equal(total, clear_gram_release(spec, tables, randomness, batch=300))


def test_refusals_carry_the_right_status(deployment):
    spec, table, randomness = _job(deployment, "refusals", seed=12)
    tables = party_tables(spec, table)

    async def scenario():
        a_ch, analyst = _stubs(deployment, "analyst")
        p_ch, party0 = _stubs(deployment, "party-0")
        f_ch, foreign = _stubs(deployment, "party-0", deployment["foreign"])
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

            # let both parties upload everything for real
            for p in spec.parties:
                ch, stubs = _stubs(deployment, p.party_id)
                try:
                    await run_upload(stubs, spec, p.party_id, tables[p.party_id], party_randomness(randomness, spec, p.party_id),
                                     progress=False)
                finally:
                    await _close(ch)

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
            await _close(a_ch + p_ch + f_ch)

    asyncio.run(scenario())


def test_status_reports_batches_and_bytes(deployment):
    """Status counts stored batches and the gRPC-layer bytes each server moved."""
    spec, table, randomness = _job(deployment, "status", seed=13)
    tables = party_tables(spec, table)

    async def scenario():
        a_ch, analyst = _stubs(deployment, "analyst")
        try:
            await publish(analyst, spec)
            for p in spec.parties:
                ch, stubs = _stubs(deployment, p.party_id)
                try:
                    await run_upload(stubs, spec, p.party_id, tables[p.party_id], party_randomness(randomness, spec, p.party_id),
                                     batch_clients=500, progress=False)
                finally:
                    await _close(ch)
            return await asyncio.gather(*(s.Status(ltm_pb2.StatusRequest(job_id=spec.job_id)) for s in analyst))
        finally:
            await _close(a_ch)

    replies = asyncio.run(scenario())
    batches_per_party = [-(-p.size // 500) for p in spec.parties]
    for r in replies:
        assert r.batches == sum(batches_per_party)
        assert r.clients_held == spec.n
        assert r.bytes_received > 0 and r.bytes_sent > 0
        assert r.store_seconds > 0

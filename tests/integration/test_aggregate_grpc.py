"""Aggregated uploads over real gRPC server processes (mutual TLS on loopback): with noise switched
off in this (party) process, the aggregated release equals the per-client release bit for bit, for
the gram kind and a sparse sketch; a server refuses a batch of the wrong upload mode."""
import asyncio
from dataclasses import replace

import grpc
import numpy as np
import pytest

from ltm.analyst.coordinator import publish
from ltm.datasets.synthetic import synthetic_ridge
from ltm.party import aggregate, randomizer
from ltm.party.randomizer import make_batches
from ltm.party.uploader import upload_batch
from ltm.randomness import Randomness
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.servers import close_channels, release_over_grpc

K = 3


def _no_noise(stream, plan, shape, *, multiplicity=1):
    return np.zeros(shape, dtype=np.int64)


def _release(servers, spec, tables, randomness):
    return asyncio.run(release_over_grpc(servers, spec, tables, randomness, batch_clients=300))


@pytest.mark.parametrize("kind", ["gram", "sparse"])
def test_aggregated_release_equals_per_client_over_grpc(three_servers, monkeypatch, kind):
    monkeypatch.setattr(randomizer, "sample_noise", _no_noise)
    monkeypatch.setattr(aggregate, "sample_noise", _no_noise)
    randomness = Randomness.seeded_insecure(f"agg-grpc-{kind}")
    table = synthetic_ridge(2000, 4, randomness)
    spec, _ = build_job(table, job_id=f"agg-grpc-{kind}-pc", randomness=randomness, parties=2, k=K, kind=kind,
                        m=16 if kind == "sparse" else None, s=2 if kind == "sparse" else 1,
                        endpoints=three_servers.endpoints)
    agg = replace(spec, job_id=f"agg-grpc-{kind}-agg", upload_mode="aggregate")
    tables = party_tables(spec, table)
    per_client = _release(three_servers, spec, tables, randomness)
    aggregated = _release(three_servers, agg, tables, randomness)
    assert aggregated.participants.count == per_client.participants.count == spec.n
    np.testing.assert_array_equal(aggregated.release.matrix, per_client.release.matrix)
    assert np.abs(per_client.release.matrix).sum() > 0


def test_a_server_refuses_the_wrong_upload_mode_over_grpc(three_servers):
    randomness = Randomness.seeded_insecure("agg-grpc-mismatch")
    table = synthetic_ridge(600, 4, randomness)
    spec, _ = build_job(table, job_id="agg-grpc-mismatch", randomness=randomness, parties=2, k=K, m=16,
                        endpoints=three_servers.endpoints)
    agg = replace(spec, upload_mode="aggregate")
    p = spec.parties[0]
    (batch,) = [next(make_batches(agg, p.party_id, party_tables(spec, table)[p.party_id], randomness))[0]]
    batch = replace(batch, job_digest=spec.digest)  # an aggregate sent to the per-client job

    async def attempt():
        a_ch, analyst = three_servers.aio_stubs("analyst")
        p_ch, party = three_servers.aio_stubs(p.party_id)
        try:
            await publish(analyst, spec)
            await upload_batch(party[batch.server], batch, spec.job_id)
        finally:
            await close_channels(a_ch + p_ch)

    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(attempt())
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "upload_mode" in info.value.details()

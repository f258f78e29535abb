"""Aggregated uploads over real gRPC server processes (mutual TLS on loopback): with noise switched
off in this (party) process, the aggregated release equals the per-client release bit for bit, for
the gram kind and a sparse sketch; a server refuses a batch of the wrong upload mode."""
import asyncio
from dataclasses import replace

import grpc
import numpy as np
import pytest

from analyst.coordinator import publish, run_job
from ltm.randomness import Randomness
from party import aggregate, randomizer
from party.randomizer import make_batches, party_randomness
from party.uploader import run_upload, upload_batch
from ltm_datasets.synthetic import synthetic_ridge
from sim.runtime.jobs import build_job, party_tables
from tests.integration.test_networked import _close, _stubs, deployment  # noqa: F401  (the module's server processes)

K = 3


def _no_noise(stream, plan, shape, *, multiplicity=1):
    return np.zeros(shape, dtype=np.int64)


def _release(dep, spec, tables, randomness):
    async def networked():
        a_ch, analyst = _stubs(dep, "analyst")
        try:
            await publish(analyst, spec)
            for p in spec.parties:
                p_ch, party = _stubs(dep, p.party_id)
                try:
                    await run_upload(party, spec, p.party_id, tables[p.party_id],
                                     party_randomness(randomness, spec, p.party_id), batch_clients=300, progress=False)
                finally:
                    await _close(p_ch)
            return await run_job(analyst, spec, deadline_s=10, randomness_label=randomness.label)
        finally:
            await _close(a_ch)

    return asyncio.run(networked())


@pytest.mark.parametrize("kind", ["gram", "sparse"])
def test_aggregated_release_equals_per_client_over_grpc(deployment, monkeypatch, kind):  # noqa: F811
    monkeypatch.setattr(randomizer, "sample_noise", _no_noise)
    monkeypatch.setattr(aggregate, "sample_noise", _no_noise)
    randomness = Randomness.seeded_insecure(f"agg-grpc-{kind}")
    table = synthetic_ridge(2000, 4, randomness)
    spec, _ = build_job(table, job_id=f"agg-grpc-{kind}-pc", randomness=randomness, parties=2, k=K, kind=kind,
                        m=16 if kind == "sparse" else None, s=2 if kind == "sparse" else 1,
                        endpoints=[s.endpoint for s in deployment["servers"]])
    agg = replace(spec, job_id=f"agg-grpc-{kind}-agg", upload_mode="aggregate")
    tables = party_tables(spec, table)
    per_client = _release(deployment, spec, tables, randomness)
    aggregated = _release(deployment, agg, tables, randomness)
    assert aggregated.participants.count == per_client.participants.count == spec.n
    np.testing.assert_array_equal(aggregated.release.matrix, per_client.release.matrix)
    assert np.abs(per_client.release.matrix).sum() > 0


def test_a_server_refuses_the_wrong_upload_mode_over_grpc(deployment):  # noqa: F811
    randomness = Randomness.seeded_insecure("agg-grpc-mismatch")
    table = synthetic_ridge(600, 4, randomness)
    spec, _ = build_job(table, job_id="agg-grpc-mismatch", randomness=randomness, parties=2, k=K, m=16,
                        endpoints=[s.endpoint for s in deployment["servers"]])
    agg = replace(spec, upload_mode="aggregate")
    p = spec.parties[0]
    (batch,) = [next(make_batches(agg, p.party_id, party_tables(spec, table)[p.party_id], randomness))[0]]
    batch = replace(batch, job_digest=spec.digest)  # an aggregate sent to the per-client job

    async def attempt():
        a_ch, analyst = _stubs(deployment, "analyst")
        p_ch, party = _stubs(deployment, p.party_id)
        try:
            await publish(analyst, spec)
            await upload_batch(party[batch.server], batch, spec.job_id)
        finally:
            await _close(a_ch)
            await _close(p_ch)

    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(attempt())
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "upload_mode" in info.value.details()

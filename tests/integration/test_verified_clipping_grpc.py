"""Verified clipping over gRPC (issue #30): three real `ltm server` processes with mutual TLS and
SQLite stores; this process plays the analyst and the parties through the same upload and
coordination code the `ltm party` and `ltm analyst` processes run (a corrupt party is whoever holds
its certificate: here this process, uploading a block it did not clip).  An honest verified job
releases the same bytes as in process; a corrupt party is refused naming it, every server's gate
refusing the release; a relayed seed set with a bad signature, another signer or another server's
seed is refused by the server."""
import asyncio
from dataclasses import replace

import grpc
import numpy as np
import pytest

from ltm.analyst.coordinator import close_all, fetch_result_share, publish
from ltm.client_set import ClientSet
from ltm.datasets.synthetic import synthetic_ridge
from ltm.dp.grid import round_to_grid
from ltm.party import replicated as party_replicated
from ltm.party.replicated import run_replicated_upload
from ltm.randomness import Randomness
from ltm.replicated import BlockUpload
from ltm.sharing import share
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.transport.signing import Signer, from_signed_pb, to_signed_pb
from ltm.transport.tls import make_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from ltm.verified_clipping import ClippingProofFailed, ProofUpload, proof_shape, seed_statement
from tests.helpers.servers import close_channels, pinned, release_over_grpc, upload_all

K = 3
PARTIES = [f"party-{i}" for i in range(3)]
U64 = np.uint64


@pytest.fixture(scope="module")
def deployment(start_servers):
    return start_servers("vc", K, PARTIES + ["analyst", "operator"])


def _job(dep, job_id, seed, n=1200):
    randomness = Randomness.seeded_insecure(seed)
    table = synthetic_ridge(n, 5, randomness.child("data"))
    spec, _ = build_job(table, job_id=job_id, randomness=randomness, partition="columns", parties=3, k=K,
                        kind="gram", colluding_servers=1, endpoints=dep.endpoints, verified_clipping=True)
    assert spec.verified_clipping and spec.privacy.corrupt_parties == 1
    return spec, party_tables(spec, table), randomness


def _status(dep, spec):
    return [stub.Status(ltm_pb2.StatusRequest(job_id=spec.job_id), timeout=20) for stub in dep.stubs("analyst")]


def test_an_honest_verified_job_releases_the_in_process_bytes(deployment):
    spec, tables, randomness = _job(deployment, "vc-honest", seed=31)
    run = asyncio.run(release_over_grpc(deployment, spec, tables, randomness, deadline_s=20, fetch=True,
                                        upload=run_replicated_upload))
    local = run_inprocess(spec, tables, randomness)
    assert run.release.sha256 == local.release.sha256
    for wire, mine in zip(run.result_shares, local.result_shares):
        np.testing.assert_array_equal(wire.reshape(-1), mine)
    assert "verify_clipping" in run.timing_s
    assert [s.clipping_check for s in _status(deployment, spec)] == ["passed"] * K
    assert [s.batches for s in _status(deployment, spec)] == [6 * len(PARTIES)] * K  # 6 parts per party


def _cheating(monkeypatch, make_block):
    """party-1 uploads ``make_block(spec, party, honest_grid)`` (grid units) with a witness forged for
    it (bits of the offsets and of the slack, mod 2^64), shared consistently like an honest upload."""
    real = party_replicated.replicated_uploads

    def uploads(spec, party_id, table, randomness, **kw):
        ups = real(spec, party_id, table, randomness, **kw)
        if party_id != "party-1":
            return ups
        party = spec.party(party_id)
        x = make_block(spec, party)
        shape = proof_shape(x.shape[1], spec.frac_bits, party.clip_bound)
        offset = (x + (1 << shape.r)).astype(np.uint64)
        entry = ((offset[..., None] >> np.arange(shape.entry_bits, dtype=U64)) & U64(1)).reshape(x.shape[0], -1)
        with np.errstate(over="ignore"):
            slack = U64(shape.bound) - np.einsum("na,na->n", x.view(U64), x.view(U64))
        wit = np.concatenate([entry, (slack[:, None] >> np.arange(shape.slack_bits, dtype=U64)) & U64(1)], axis=1)
        R = Randomness.seeded_insecure("cheat")
        xs = share(x.view(U64), 3, R.child("x"), primary=1)
        ws = share(wit, 3, R.child("w"), primary=1)
        return [BlockUpload(i, u.columns, xs[i], xs[(i + 1) % 3], u.noise,
                            ProofUpload(i, ws[i], ws[(i + 1) % 3], u.proof.mask)) for i, u in enumerate(ups)]

    monkeypatch.setattr(party_replicated, "replicated_uploads", uploads)


def _unclipped(spec, party):
    """The issue's attack: M·e_j for client j = 17 (M = 2·10⁶ on the grid 2^-f), zero elsewhere."""
    x = np.zeros((spec.n, len(spec.party_column_indices(party))), dtype=np.int64)
    x[17, 0] = 2_000_000 << spec.frac_bits
    return x


def _norm_over(spec, party):
    """One client's block at 1.01·C_p (every other client zero)."""
    x = np.zeros((spec.n, len(spec.party_column_indices(party))), dtype=np.int64)
    x[5] = round_to_grid(np.eye(x.shape[1])[0] * 1.01 * party.clip_bound, spec.frac_bits)
    return x


@pytest.mark.parametrize("attack", [_unclipped, _norm_over])
def test_a_corrupt_party_is_refused_naming_it_with_nothing_released(deployment, monkeypatch, attack):
    spec, tables, randomness = _job(deployment, f"vc-{attack.__name__[1:]}", seed=32)
    _cheating(monkeypatch, attack)
    with pytest.raises(ClippingProofFailed, match="party 'party-1'.*not proven clipped") as err:
        asyncio.run(release_over_grpc(deployment, spec, tables, randomness, deadline_s=20, fetch=True,
                                      upload=run_replicated_upload))
    assert "party-0" not in str(err.value) and "party-2" not in str(err.value) and "\n" not in str(err.value)
    statuses = _status(deployment, spec)
    assert all("party-1" in s.clipping_check and "party-0" not in s.clipping_check for s in statuses)

    async def release_each():
        channels, analyst = deployment.aio_stubs("analyst")
        try:
            return await asyncio.gather(*(fetch_result_share(stub, spec, ClientSet.full(spec.n), server_index=i,
                                                             retries=None) for i, stub in enumerate(analyst)),
                                        return_exceptions=True)
        finally:
            await close_channels(channels)

    for refused in asyncio.run(release_each()):  # every server's own gate refuses
        assert isinstance(refused, grpc.aio.AioRpcError) and "party-1" in refused.details()
    assert not any(s.released for s in _status(deployment, spec))


def test_a_server_refuses_a_forged_or_foreign_seed_set(deployment, tmp_path):
    spec, tables, randomness = _job(deployment, "vc-seeds", seed=33, n=500)

    async def go():
        channels, analyst = deployment.aio_stubs("analyst")
        try:
            await publish(analyst, spec)
            await upload_all(deployment, spec, tables, randomness, upload=run_replicated_upload)
            with pytest.raises(grpc.aio.AioRpcError, match="must be closed"):
                await analyst[0].GetCheckSeed(ltm_pb2.CheckSeedRequest(job_id=spec.job_id, job_digest=spec.digest))
            await close_all(analyst, spec)
            request = ltm_pb2.CheckSeedRequest(job_id=spec.job_id, job_digest=spec.digest)
            seeds = [from_signed_pb(await stub.GetCheckSeed(request)) for stub in analyst]
            again = from_signed_pb(await analyst[0].GetCheckSeed(request))
            assert again.payload == seeds[0].payload  # drawn once, stored

            async def submit(statements, server=0):
                return await analyst[server].SubmitCheckSeeds(ltm_pb2.SubmitCheckSeedsRequest(
                    job_id=spec.job_id, job_digest=spec.digest, seeds=[to_signed_pb(s) for s in statements]))

            bad = replace(seeds[1], signature=bytes(reversed(seeds[1].signature)))
            with pytest.raises(grpc.aio.AioRpcError, match="valid signature") as err:
                await submit([seeds[0], bad, seeds[2]])
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            # the analyst signs a seed of its choosing with its own key: not server-1's statement
            forged = Signer.from_dir(deployment.certs, "analyst").sign(seed_statement(spec.digest, 1, bytes(32), bytes(32)))
            with pytest.raises(grpc.aio.AioRpcError, match="signed by 'analyst'"):
                await submit([seeds[0], forged, seeds[2]])
            # server-1's genuine statement in server-0's place: server-0's own seed is missing
            with pytest.raises(grpc.aio.AioRpcError, match="signed by 'server-1'"):
                await submit([seeds[1], seeds[1], seeds[2]])
            with pytest.raises(grpc.aio.AioRpcError, match="3 signed check seeds are needed"):
                await submit(seeds[:2])
            outputs = [from_signed_pb(await submit(seeds, i)) for i in range(K)]
            tampered = replace(outputs[2], payload=outputs[2].payload + b" ")
            with pytest.raises(grpc.aio.AioRpcError, match="valid signature"):
                await analyst[0].SubmitCheckOutputs(ltm_pb2.SubmitCheckOutputsRequest(
                    job_id=spec.job_id, job_digest=spec.digest,
                    outputs=[to_signed_pb(o) for o in (outputs[0], outputs[1], tampered)]))
            with pytest.raises(grpc.aio.AioRpcError, match="party-0.*missing"):  # no verdict yet: the gate refuses
                await fetch_result_share(analyst[0], spec, ClientSet.full(spec.n), retries=None)
            verdict = await analyst[0].SubmitCheckOutputs(ltm_pb2.SubmitCheckOutputsRequest(
                job_id=spec.job_id, job_digest=spec.digest, outputs=[to_signed_pb(o) for o in outputs]))
            assert verdict.passed and not verdict.failing_parties
            share0, _ = await fetch_result_share(analyst[0], spec, ClientSet.full(spec.n), retries=None)
            return share0
        finally:
            await close_channels(channels)

    share0 = asyncio.run(go())
    assert share0.shape == (1, spec.width * (spec.width + 1) // 2)


def test_the_ltm_analyst_process_fails_the_job_naming_the_corrupt_party(deployment, monkeypatch):
    """The same attack with the `ltm analyst` process running the job (the operator's RunJob): the job
    fails with the one-line reason naming party-1, and no server released."""
    spec, tables, randomness = _job(deployment, "vc-analyst-process", seed=34, n=600)
    _cheating(monkeypatch, _unclipped)
    group = deployment.group
    analyst_proc = group.start_service("analyst", "analyst", ["analyst", "--out", str(deployment.work / "vc-out")])

    async def scenario():
        o_ch = make_channel(analyst_proc.endpoint, deployment.certs, "operator", options=pinned(analyst_proc))
        operator = ltm_pb2_grpc.AnalystStub(o_ch)
        try:
            await operator.SubmitJob(ltm_pb2.SubmitJobRequest(spec_json=spec.canonical_json()), timeout=60)
            await upload_all(deployment, spec, tables, randomness, fetch=True, upload=run_replicated_upload)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await operator.RunJob(ltm_pb2.RunJobRequest(job_id=spec.job_id, deadline_s=30.0), timeout=300)
            return err.value
        finally:
            await o_ch.close()

    try:
        err = asyncio.run(scenario())
    finally:
        group.stop(analyst_proc)
    assert "verified clipping failed, nothing released: party 'party-1'" in err.details()
    assert "party-0" not in err.details() and "\n" not in err.details()
    assert not any(s.released for s in _status(deployment, spec))
    assert all("party-1" in s.clipping_check for s in _status(deployment, spec))


def test_a_replayed_seed_set_is_refused_answers_are_once_and_no_digest_travels(deployment):
    """A relay that sends server-1 another job's validly signed seed set (or one statement of it) is
    refused; an identical retry returns the same signed bytes; what the servers send is their seed,
    X25519 public key and masked check shares only — no digest of any share, on the wire or in the
    signed payloads."""
    import json

    jobs = [_job(deployment, f"vc-replay-{j}", seed=35 + j, n=400) for j in range(2)]

    async def go():
        channels, analyst = deployment.aio_stubs("analyst")
        try:
            sets = []
            for spec, tables, randomness in jobs:
                await publish(analyst, spec)
                await upload_all(deployment, spec, tables, randomness, upload=run_replicated_upload)
                await close_all(analyst, spec)
                request = ltm_pb2.CheckSeedRequest(job_id=spec.job_id, job_digest=spec.digest)
                sets.append([await stub.GetCheckSeed(request) for stub in analyst])
            spec = jobs[1][0]

            async def submit(statements, server=1):
                return await analyst[server].SubmitCheckSeeds(ltm_pb2.SubmitCheckSeedsRequest(
                    job_id=spec.job_id, job_digest=spec.digest, seeds=statements))

            for replayed in (sets[0], [sets[1][0], sets[1][1], sets[0][2]]):
                with pytest.raises(grpc.aio.AioRpcError, match="another job or server") as err:
                    await submit(replayed)
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            outputs = [await submit(sets[1], i) for i in range(K)]
            again = await submit(sets[1])
            assert again.SerializeToString() == outputs[1].SerializeToString()  # the same bytes, signature too
            with pytest.raises(grpc.aio.AioRpcError, match="another job or server"):
                await submit(sets[0])  # still refused after the answer
            verdicts = [await stub.SubmitCheckOutputs(ltm_pb2.SubmitCheckOutputsRequest(
                job_id=spec.job_id, job_digest=spec.digest, outputs=outputs)) for stub in analyst]
            return sets[1], outputs, verdicts
        finally:
            await close_channels(channels)

    seeds, outputs, verdicts = asyncio.run(go())
    assert all(v.passed for v in verdicts)
    for msg in (*seeds, *outputs):
        assert [f.name for f, _ in msg.ListFields()] == ["payload", "signature", "certificate"]
    assert [sorted(json.loads(s.payload)) for s in seeds] == [
        ["job_digest", "kind", "mask_public", "seed", "server"]] * K
    assert [sorted(json.loads(o.payload)) for o in outputs] == [["job_digest", "kind", "seeds", "server", "shares"]] * K
    publics = {json.loads(s.payload)["mask_public"] for s in seeds}
    assert len(publics) == K  # one fresh X25519 key per server
    for name in ("SignedStatement", "SubmitCheckSeedsRequest", "SubmitCheckOutputsRequest", "CheckVerdict"):
        fields = ltm_pb2.DESCRIPTOR.message_types_by_name[name].fields
        assert not [f.name for f in fields if "digest" in f.name and f.name != "job_digest"]

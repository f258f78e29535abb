"""``server/core.py``'s tests, written to kill its mutants (scripts/mutation.sh, docs/testing.md).

Each test checks behaviour against a value computed independently (a closed form written out
again, numpy/scipy in the clear, a second route through the code), never a recorded output.
"""
from __future__ import annotations

import math  # noqa: F401
import warnings  # noqa: F401
from dataclasses import replace as _replace  # noqa: F401

import numpy as np
import pytest

from ltm import sharing  # noqa: F401
from ltm.client_set import ClientSet

# --- server/core.py -------------------------------------------------------------------------------
from ltm.errors import ProtocolError  # noqa: E402
from ltm.randomness import Randomness  # noqa: F401
from ltm.server.core import ServerCore  # noqa: E402
from tests.helpers.messages import exact as _exact  # noqa: F401


def _core_world():
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.party.randomizer import make_batches
    from ltm.sim.runtime.jobs import build_job, party_tables

    randomness = Randomness.seeded_insecure("core-kills")
    table = synthetic_ridge(400, 3, randomness)
    spec, _ = build_job(table, job_id="core-kills", randomness=randomness, parties=2, k=2, m=8, s=2,
                        min_honest_load=10)
    tables = party_tables(spec, table)
    batches = {}
    for party in spec.parties:
        for per_server in make_batches(spec, party.party_id, tables[party.party_id],
                                       randomness.child("party", party.party_id), batch_clients=100):
            batches[(party.party_id, per_server[0].batch_index)] = per_server
    return spec, batches


def _protocol_error(call) -> tuple[str, str]:
    with pytest.raises(ProtocolError) as err:
        call()
    return err.value.code, err.value.message


def test_server_core_refusals_are_exact():
    spec, batches = _core_world()
    core = ServerCore("server-0")
    assert _protocol_error(lambda: core.spec("nope")) == ("NOT_FOUND", "unknown job 'nope' on server 'server-0'")
    assert _protocol_error(lambda: core.create_job(spec, caller_role="party")) == (
        "PERMISSION_DENIED", "only the analyst may create jobs (caller role 'party')")
    stranger = ServerCore("server-9")
    assert _protocol_error(lambda: stranger.create_job(spec, caller_role="analyst")) == (
        "FAILED_PRECONDITION", "server 'server-9' is not one of the job's servers ['server-0', 'server-1']")
    assert core.create_job(spec, caller_role="analyst") == spec.digest
    assert core.create_job(spec, caller_role="analyst") == spec.digest  # idempotent
    other = _replace(spec, privacy=_replace(spec.privacy, epsilon=spec.privacy.epsilon / 2))
    assert _protocol_error(lambda: core.create_job(other, caller_role="analyst")) == (
        "ALREADY_EXISTS", f"job 'core-kills' exists with a different spec (digest {spec.digest[:12]}…); "
                          f"choose a new job id")
    bad = _replace(spec, privacy=_replace(spec.privacy, min_honest_load=10**6))
    code, message = _protocol_error(lambda: ServerCore("server-0").create_job(bad, caller_role="analyst"))
    assert code == "INVALID_ARGUMENT" and "min_honest_load L=1000000 is not feasible" in message

    b0 = batches[("party-0", 0)][0]
    accept = lambda batch, role="party", caller=None: core.accept(  # noqa: E731
        batch, spec.job_id, caller_role=role, caller_id=caller or batch.party_id)
    assert _protocol_error(lambda: accept(b0, role="analyst")) == (
        "PERMISSION_DENIED", "only parties may upload (caller role 'analyst')")
    assert _protocol_error(lambda: accept(_replace(b0, job_digest="0" * 64))) == (
        "FAILED_PRECONDITION", "the batch names a different job digest than this server's spec of the job; "
                               "fetch the job spec again")
    assert _protocol_error(lambda: accept(b0, caller="party-1")) == (
        "PERMISSION_DENIED", "party 'party-1' may not upload as 'party-0'")
    assert _protocol_error(lambda: accept(_replace(b0, party_id="party-7"), caller="party-7")) == (
        "PERMISSION_DENIED", "party-7 is not a party of job 'core-kills'")
    p0 = spec.party("party-0")
    assert _protocol_error(lambda: accept(_replace(b0, start=p0.stop - 50, stop=p0.stop + 50))) == (
        "PERMISSION_DENIED", f"party 'party-0' may upload clients [{p0.start}, {p0.stop}) only, not "
                             f"[{p0.stop - 50}, {p0.stop + 50})")
    assert _protocol_error(lambda: accept(_replace(b0, batch_index=-1))) == (
        "INVALID_ARGUMENT", "batch_index -1 is outside [0, 2^63); number a party's batches 0, 1, 2, …")
    assert _protocol_error(lambda: accept(_replace(b0, batch_index=1 << 63)))[0] == "INVALID_ARGUMENT"
    assert accept(_replace(b0, batch_index=(1 << 63) - 1)).batch_index == (1 << 63) - 1  # the largest index
    cols = spec.upload_columns(p0)
    assert _protocol_error(lambda: accept(_replace(b0, columns=cols[:-1]))) == (
        "INVALID_ARGUMENT", f"batch columns {cols[:-1]} do not match the party's columns {cols} in the job spec")
    assert _protocol_error(lambda: accept(_replace(b0, share=_replace(b0.share, server=1)))) == (
        "INVALID_ARGUMENT", "this share is addressed to server index 1, this is server 'server-0'")
    assert _protocol_error(lambda: accept(_replace(b0, stop=b0.stop - 1))) == (
        "INVALID_ARGUMENT", f"share shape {tuple(b0.share.shape)} != expected "
                            f"({b0.share.shape[0]}, {b0.count - 1}, {len(cols)}) (pieces, clients, columns)")
    as_int = _replace(b0, share=sharing.Share(0, b0.share.shape, data=b0.share.values().astype(np.int64)))
    assert _protocol_error(lambda: accept(as_int)) == ("INVALID_ARGUMENT", "share dtype int64 != uint64")


def test_server_core_accept_close_release_cycle():
    spec, batches = _core_world()
    cores = [ServerCore(s.server_id) for s in spec.servers]
    for core in cores:
        core.create_job(spec, caller_role="analyst")
    first = [(key, per_server) for key, per_server in batches.items() if key != ("party-1", 1)]
    for key, per_server in first:
        for core, batch in zip(cores, per_server):
            receipt = core.accept(batch, spec.job_id, caller_role="party", caller_id=batch.party_id)
            assert (receipt.job_id, receipt.party_id, receipt.batch_index, receipt.clients) == \
                (spec.job_id, batch.party_id, batch.batch_index, batch.count)
            assert receipt.content_digest == batch.content_digest()
            assert core.accept(batch, spec.job_id, caller_role="party", caller_id=batch.party_id) == receipt
    b = batches[("party-0", 0)][0]
    other = batches[("party-0", 1)][0]
    conflicting = _replace(other, batch_index=0)
    assert _protocol_error(lambda: cores[0].accept(conflicting, spec.job_id, caller_role="party",
                                                   caller_id="party-0")) == (
        "ALREADY_EXISTS", "batch 0 of party 'party-0' was already stored with different content; "
                          "a batch cannot be replaced")
    overlapping = _replace(b, batch_index=9)
    assert _protocol_error(lambda: cores[0].accept(overlapping, spec.job_id, caller_role="party",
                                                   caller_id="party-0")) == (
        "ALREADY_EXISTS", f"clients [{b.start}, {b.stop}) of party 'party-0' were already uploaded in another "
                          f"batch; refusing to count them twice")
    mask = np.ones(spec.n, bool)
    assert _protocol_error(lambda: cores[0].release(spec.job_id, mask, caller_role="analyst",
                                                    job_digest=spec.digest)) == (
        "FAILED_PRECONDITION", "job 'core-kills' must be closed before it is released")
    assert _protocol_error(lambda: cores[0].close(spec.job_id, caller_role="party")) == (
        "PERMISSION_DENIED", "only the analyst may close a job (caller role 'party')")
    held = [core.close(spec.job_id, caller_role="analyst") for core in cores]
    missing = batches[("party-1", 1)][0]
    expected_held = np.ones(spec.n, bool)
    expected_held[missing.start:missing.stop] = False
    assert all(isinstance(h, ClientSet) and h == ClientSet.from_mask(expected_held) for h in held)
    late = batches[("party-1", 1)]
    assert _protocol_error(lambda: cores[0].accept(late[0], spec.job_id, caller_role="party",
                                                   caller_id="party-1")) == (
        "FAILED_PRECONDITION", "job 'core-kills' is closed to uploads")
    # release over the held set: the k result shares sum to S·(V + G) of the participants
    spec_small = spec
    results = [core.release(spec.job_id, expected_held, caller_role="analyst", job_digest=spec.digest)
               for core in cores]
    from ltm.server.result_share import result_share
    for core, res in zip(cores, results):
        assert np.array_equal(res, result_share(spec_small, core.store.batches(spec.job_id), expected_held,
                                                spec.make_sketch()))
        res += np.uint64(1)  # the caller may sum in place: the stored record must not change
        again = core.release(spec.job_id, expected_held, caller_role="analyst", job_digest=spec.digest)
        assert np.array_equal(again, res - np.uint64(1))
    fewer = expected_held.copy()
    fewer[:5] = False
    code, message = _protocol_error(lambda: cores[0].release(spec.job_id, fewer, caller_role="analyst",
                                                             job_digest=spec.digest))
    assert code == "FAILED_PRECONDITION" and "already been released once" in message
    code, _ = _protocol_error(lambda: cores[0].release(spec.job_id, expected_held, caller_role="party",
                                                       job_digest=spec.digest))
    assert code == "PERMISSION_DENIED"
    assert cores[1].server_index(spec) == 1


def test_server_core_uses_the_given_store_and_any_0_1_mask():
    from ltm.server.core import participants_digest
    from ltm.server.store import MemoryStore

    store = MemoryStore()
    assert ServerCore("server-0", store).store is store
    mask = np.random.default_rng(1).random(37) < 0.5
    for other in (mask.astype(np.int64), mask.astype(float), mask.tolist()):
        assert participants_digest(other) == participants_digest(mask)
    import hashlib
    assert participants_digest(mask) == hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()

    spec, batches = _core_world()
    cores = [ServerCore(s.server_id) for s in spec.servers]
    for core in cores:
        core.create_job(spec, caller_role="analyst")
    for per_server in batches.values():
        for core, batch in zip(cores, per_server):
            core.accept(batch, spec.job_id, caller_role="party", caller_id=batch.party_id)
    held = cores[0].close(spec.job_id, caller_role="analyst")
    participants = held.to_mask()
    participants[-1] = False  # the last client sits out
    as_ints = cores[0].release(spec.job_id, participants.astype(np.int64), caller_role="analyst",
                               job_digest=spec.digest)
    cores[1].close(spec.job_id, caller_role="analyst")
    cores[1].release(spec.job_id, participants, caller_role="analyst", job_digest=spec.digest)
    from ltm.server.result_share import result_share
    assert np.array_equal(as_ints, result_share(spec, cores[0].store.batches(spec.job_id), participants,
                                                spec.make_sketch()))
    # A malformed mask one entry short (its packed bits equal the full mask's) is not a retry.
    code, message = _protocol_error(lambda: cores[0].release(spec.job_id, participants[:-1], caller_role="analyst",
                                                             job_digest=spec.digest))
    assert code == "FAILED_PRECONDITION" and "already been released once" in message


def test_server_core_accepts_a_column_block_upload():
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.party.randomizer import make_batches
    from ltm.sim.runtime.jobs import build_job, party_tables

    randomness = Randomness.seeded_insecure("core-columns")
    table = synthetic_ridge(120, 3, randomness)
    spec, _ = build_job(table, job_id="core-cols", randomness=randomness, partition="columns", parties=2, k=2,
                        m=8, s=1)
    tables = party_tables(spec, table)
    core = ServerCore("server-0")
    core.create_job(spec, caller_role="analyst")
    for party in spec.parties:
        for per_server in make_batches(spec, party.party_id, tables[party.party_id],
                                       randomness.child("party", party.party_id), batch_clients=60):
            receipt = core.accept(per_server[0], spec.job_id, caller_role="party", caller_id=party.party_id)
            assert receipt.clients == per_server[0].count
    assert core.close(spec.job_id, caller_role="analyst") == ClientSet.full(spec.n)


def _closed_core(store=None):
    spec, batches = _core_world()
    core = ServerCore("server-0", store)
    core.create_job(spec, caller_role="analyst")
    for per_server in batches.values():
        core.accept(per_server[0], spec.job_id, caller_role="party", caller_id=per_server[0].party_id)
    held = core.close(spec.job_id, caller_role="analyst")
    return spec, batches, core, held


def test_a_retry_returns_the_stored_bytes_without_reading_the_batches_again():
    spec, _, core, held = _closed_core()
    first = core.release(spec.job_id, held, caller_role="analyst", job_digest=spec.digest)

    def gone(job_id):
        raise AssertionError("a retry must not recompute the release")
    core.store.batches = gone
    again = core.release(spec.job_id, held, caller_role="analyst", job_digest=spec.digest)
    assert np.array_equal(again, first)


def test_a_surviving_release_marker_lets_only_the_same_set_complete():
    from ltm.server.result_share import result_share
    from ltm.server.store import MemoryStore, ReleaseRecord

    spec, _, core, held = _closed_core(MemoryStore())
    core.store.put_release(spec.job_id, ReleaseRecord(held.digest(), None))  # marker only, no result
    fewer = held - ClientSet.span(spec.n, 0, 3)
    code, message = _protocol_error(lambda: core.release(spec.job_id, fewer, caller_role="analyst",
                                                         job_digest=spec.digest))
    assert code == "FAILED_PRECONDITION" and "already been released once" in message
    out = core.release(spec.job_id, held, caller_role="analyst", job_digest=spec.digest)
    assert np.array_equal(out, result_share(spec, core.store.batches(spec.job_id), held, spec.make_sketch()))


def test_seeded_batches_are_refused_unless_the_job_is_a_reproduction():
    seeded_world, batches = _core_world()
    assert seeded_world.reproduction  # built with seeded randomness
    spec = _replace(seeded_world, job_id="core-kills-real", reproduction=False)
    core = ServerCore("server-0")
    core.create_job(spec, caller_role="analyst")
    seeded = _replace(batches[("party-0", 0)][0], job_digest=spec.digest, seeded=True)
    assert _protocol_error(lambda: core.accept(seeded, spec.job_id, caller_role="party", caller_id="party-0")) == (
        "FAILED_PRECONDITION", "job 'core-kills-real' is not a reproduction: this server refuses batches drawn "
                               "with seeded (reproducible, NOT private) randomness; run the party without --seed")
    core.accept(_replace(seeded, seeded=False), spec.job_id, caller_role="party", caller_id="party-0")
    assert core.seeded_parties(spec.job_id) == []
    core.create_job(seeded_world, caller_role="analyst")
    core.accept(_replace(seeded, job_digest=seeded_world.digest), seeded_world.job_id, caller_role="party",
                caller_id="party-0")
    core.accept(_replace(batches[("party-1", 0)][0], seeded=False), seeded_world.job_id, caller_role="party",
                caller_id="party-1")
    assert core.seeded_parties(seeded_world.job_id) == ["party-0"] and core.seeded_parties(spec.job_id) == []


def test_the_slot_cache_is_kept_exactly_up_to_its_byte_limit(monkeypatch):
    import ltm.server.core as core_module

    spec, _ = _core_world()
    need = 8 * spec.make_sketch().pieces * spec.n
    monkeypatch.setattr(core_module, "SLOT_CACHE_BYTES", need)
    fits = ServerCore("server-0")
    slots = fits._slots_of(spec)
    assert isinstance(slots, np.ndarray) and np.array_equal(slots, spec.make_sketch().slots())
    monkeypatch.setattr(core_module, "SLOT_CACHE_BYTES", need - 1)
    assert ServerCore("server-0")._slots_of(spec) is None


def test_a_malformed_participant_set_reaches_the_gate_as_given():
    spec, _, core, held = _closed_core()
    n = spec.n
    assert _protocol_error(lambda: core.release(spec.job_id, held.to_mask()[:-1], caller_role="analyst",
                                                job_digest=spec.digest)) == (
        "INVALID_ARGUMENT", f"participant mask has shape ({n - 1},), expected ({n},)")
    assert _protocol_error(lambda: core.release(spec.job_id, ClientSet.full(n + 1), caller_role="analyst",
                                                job_digest=spec.digest)) == (
        "INVALID_ARGUMENT", f"participant set is over n = {n + 1} clients, expected {n}")

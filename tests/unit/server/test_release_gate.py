"""The release gate and the server core's refusals (docs/architecture.md §5): gate attacks (tiny
participant sets, double release, mismatched sets, clients not held, wrong role or digest, release
before close) and upload refusals (wrong party or range, conflicting and overlapping batches,
upload after close, wrong shape), each with its status code and with the stored state untouched.

All arithmetic: seeded randomness, deterministic.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ltm.batch import ShareBatch
from ltm.client_set import ClientSet
from ltm.datasets.synthetic import synthetic_ridge
from ltm.errors import ProtocolError
from ltm.jobspec import honest_row_loads
from ltm.party.randomizer import make_batches, party_randomness
from ltm.randomness import Randomness
from ltm.server.core import ServerCore
from ltm.server.release_gate import ANALYST_ROLE, GateRefusal, check_release
from ltm.sharing import Share
from ltm.sim.runtime.jobs import build_job, party_tables

N, BATCH = 400, 100


# ------------------------------------------------------------------------------ fixtures
def make_job(seed: str = "gate", **kw):
    randomness = Randomness.seeded_insecure(seed)
    table = synthetic_ridge(N, 3, randomness)
    spec, _ = build_job(table, job_id="gate-job", randomness=randomness, parties=2, k=2, m=8, s=2, **kw)
    return spec, party_tables(spec, table), randomness


def all_batches(spec, tables, randomness):
    """{(party_id, batch_index): [batch for server 0, batch for server 1]}"""
    out = {}
    for party in spec.parties:
        for per_server in make_batches(spec, party.party_id, tables[party.party_id],
                                       party_randomness(randomness, spec, party.party_id), batch_clients=BATCH):
            out[(party.party_id, per_server[0].batch_index)] = per_server
    return out


class Job:
    """A job created on k fresh in-memory servers, with every party's batches prepared."""

    def __init__(self, upload: bool = True, close: bool = True, skip: tuple = (), **kw):
        self.spec, self.tables, self.randomness = make_job(**kw)
        self.servers = [ServerCore(s.server_id) for s in self.spec.servers]
        for server in self.servers:
            assert server.create_job(self.spec, caller_role=ANALYST_ROLE) == self.spec.digest
        self.batches = all_batches(self.spec, self.tables, self.randomness)
        if upload:
            for key, per_server in self.batches.items():
                if key in skip:
                    continue
                for server, batch in zip(self.servers, per_server):
                    server.accept(batch, self.spec.job_id, caller_role="party", caller_id=batch.party_id)
        if close:
            self.held = [s.close(self.spec.job_id, caller_role=ANALYST_ROLE) for s in self.servers]

    @property
    def job_id(self):
        return self.spec.job_id

    def release(self, server: int, participants, *, role=ANALYST_ROLE, digest=None):
        return self.servers[server].release(self.job_id, participants, caller_role=role,
                                            job_digest=self.spec.digest if digest is None else digest)


def snapshot(server: ServerCore, job_id: str):
    store = server.store
    stored = sorted((b.party_id, b.batch_index, b.content_digest()) for b in store.batches(job_id))
    release = store.get_release(job_id)
    return (store.coverage(job_id), stored, store.is_closed(job_id),
            None if release is None else (release.participants_digest, release.result.tobytes()))


def assert_unchanged(before, after):
    assert before == after  # coverage compares by the cells held


def expect(code: str, fn, *args, match: str | None = None, **kw):
    with pytest.raises(ProtocolError) as info:
        fn(*args, **kw)
    assert info.value.code == code, info.value
    if match:
        assert match in info.value.message, info.value.message
    return info.value


def low_load_set(spec, size_at_least: int) -> np.ndarray:
    """A participant set with ≥ size_at_least clients but one sketch row starved below L:
    drop every client with a non-zero in row 0."""
    rows, _ = spec.make_sketch().placement(0, spec.n)
    mask = ~(rows == 0).any(axis=0)
    assert mask.sum() >= size_at_least
    return mask


# ------------------------------------------------------------------------------ the gate, pure
@pytest.fixture(scope="module")
def spec():
    return make_job()[0]


@pytest.fixture(scope="module")
def flat_spec():
    """No corrupt party deducted (explicit 0; a reproduction job may ask for it): the gate's
    deduction is the flat t′, so row loads can be steered exactly."""
    spec = make_job(corrupt_parties=0)[0]
    assert spec.privacy.corrupt_parties == 0 and spec.reproduction
    return spec


def gate(spec, participants, *, role=ANALYST_ROLE, digest=None, held=None, released=False):
    return check_release(spec, caller_role=role, job_digest=spec.digest if digest is None else digest,
                         participants=participants, held=np.ones(spec.n, dtype=bool) if held is None else held,
                         already_released=released)


def test_gate_allows_full_participation(spec):
    everyone = np.ones(spec.n, dtype=bool)
    decision = gate(spec, everyone)
    loads, deduction = honest_row_loads(spec, everyone)
    assert decision.participants == spec.n
    assert decision.min_honest_load == int((loads - deduction).min()) >= spec.privacy.min_honest_load
    assert decision.min_row_load == int(loads.min())


def test_gate_refuses_a_row_below_L(flat_spec):
    spec = flat_spec
    mask = low_load_set(spec, spec.privacy.min_participants)
    err = expect("FAILED_PRECONDITION", gate, spec, mask, match="sketch row 0")
    assert isinstance(err, GateRefusal) and "L=" in err.message
    # the boundary: exactly L honest pairs passes, L − 1 does not
    loads, _ = honest_row_loads(spec, None)
    L = spec.privacy.min_honest_load
    rows, _ = spec.make_sketch().placement(0, spec.n)
    in_row0 = np.flatnonzero((rows == 0).any(axis=0))
    keep = np.ones(spec.n, dtype=bool)
    keep[in_row0[: loads[0] - L]] = False  # row 0 left with exactly L (each client has ≤ 1 non-zero per row)
    assert honest_row_loads(spec, keep)[0][0] == L
    assert keep.sum() >= spec.privacy.min_participants and honest_row_loads(spec, keep)[0].min() == L
    gate(spec, keep)
    keep[in_row0[loads[0] - L]] = False
    expect("FAILED_PRECONDITION", gate, spec, keep, match="honest load")


def test_gate_refuses_a_tiny_participant_set(spec):
    for size in (0, 1, spec.privacy.min_participants - 1):
        mask = np.zeros(spec.n, dtype=bool)
        mask[:size] = True
        expect("FAILED_PRECONDITION", gate, spec, mask)


def test_gate_deducts_t_prime_and_corrupt_parties(spec):
    everyone = np.ones(spec.n, dtype=bool)
    # the default for two parties of 200 clients each: one corrupt party tolerated
    assert spec.privacy.corrupt_parties == 1
    loads, deduction = honest_row_loads(spec, everyone)
    L = spec.privacy.min_honest_load
    # without the party deduction the gate subtracts t′ alone
    no_party = replace(spec, privacy=replace(spec.privacy, corrupt_parties=0))
    slack = int(loads.min()) - L
    gate(replace(no_party, privacy=replace(no_party.privacy, t_prime=slack)), everyone)
    expect("FAILED_PRECONDITION", gate, replace(no_party, privacy=replace(no_party.privacy, t_prime=slack + 1)),
           everyone, match="honest load")
    # with it, the larger party's load is subtracted row by row first: t′ has only what is left
    rows = spec.make_sketch().slots() >> 1
    per_party = np.array([np.bincount(rows[:, p.start:p.stop].ravel(), minlength=spec.sketch.m)
                          for p in spec.parties])
    np.testing.assert_array_equal(deduction, per_party.max(axis=0))
    slack_c = int((loads - per_party.max(axis=0)).min()) - L
    assert 0 <= slack_c < slack
    gate(replace(spec, privacy=replace(spec.privacy, t_prime=slack_c)), everyone)
    expect("FAILED_PRECONDITION", gate, replace(spec, privacy=replace(spec.privacy, t_prime=slack_c + 1)),
           everyone, match="honest load")


def test_gate_role_digest_release_and_held_checks(spec):
    everyone = np.ones(spec.n, dtype=bool)
    for role in ("party", "server", "", "Analyst"):
        expect("PERMISSION_DENIED", gate, spec, everyone, role=role)
    expect("FAILED_PRECONDITION", gate, spec, everyone, digest="0" * 64, match="digest")
    expect("FAILED_PRECONDITION", gate, spec, everyone, released=True, match="already been released")
    held = everyone.copy()
    held[17] = False
    expect("FAILED_PRECONDITION", gate, spec, everyone, held=held, match="first: 17")
    expect("INVALID_ARGUMENT", gate, spec, everyone[:-1])


# ------------------------------------------------------------------------------ release through ServerCore
def test_release_then_identical_retry_returns_identical_bytes():
    job = Job()
    everyone = job.held[0] & job.held[1]
    assert isinstance(everyone, ClientSet) and everyone == ClientSet.full(job.spec.n)
    first = [job.release(i, everyone) for i in range(2)]
    snap = [snapshot(s, job.job_id) for s in job.servers]
    again = [job.release(i, ClientSet.from_ranges(job.spec.n, everyone.ranges)) for i in range(2)]
    # the same set given as a mask is the same participant set (same digest)
    again += [job.release(i, np.ones(job.spec.n, dtype=bool)) for i in range(2)]
    for a, b in zip(first + first, again):
        assert a.dtype == np.uint64 and a.tobytes() == b.tobytes()
    for server, before in zip(job.servers, snap):
        assert_unchanged(before, snapshot(server, job.job_id))


def test_second_release_with_a_different_set_is_refused():
    job = Job()
    everyone = np.ones(job.spec.n, dtype=bool)
    first = job.release(0, everyone)
    fewer = everyone.copy()
    fewer[:3] = False  # still a perfectly acceptable set on its own
    gate(job.spec, fewer)
    before = snapshot(job.servers[0], job.job_id)
    expect("FAILED_PRECONDITION", job.release, 0, fewer, match="already been released")
    assert_unchanged(before, snapshot(job.servers[0], job.job_id))
    # the other server has not released yet: it may release `fewer` (servers decide independently)
    job.release(1, fewer)
    # and the first server still answers the original set with the original bytes
    assert job.release(0, everyone).tobytes() == first.tobytes()


def test_refused_release_leaves_no_record_and_a_valid_release_still_works():
    job = Job()
    mask = low_load_set(job.spec, job.spec.privacy.min_participants)
    before = snapshot(job.servers[0], job.job_id)
    expect("FAILED_PRECONDITION", job.release, 0, mask, match="honest load")
    assert_unchanged(before, snapshot(job.servers[0], job.job_id))
    assert job.servers[0].store.get_release(job.job_id) is None
    job.release(0, np.ones(job.spec.n, dtype=bool))


def test_release_of_clients_the_server_does_not_hold():
    skipped = ("party-1", 1)  # party-1's second batch never reached the servers
    job = Job(skip=(skipped,), corrupt_parties=0)
    held = job.held[0]
    assert isinstance(held, ClientSet) and held.count == N - BATCH
    everyone = np.ones(job.spec.n, dtype=bool)
    before = snapshot(job.servers[0], job.job_id)
    expect("FAILED_PRECONDITION", job.release, 0, everyone, match="does not hold")
    assert_unchanged(before, snapshot(job.servers[0], job.job_id))
    # the held set itself passes the subset check but, a quarter of the clients missing, starves
    # the rows below the promised L (95% of the full load): refused by the load check instead
    assert honest_row_loads(job.spec, held)[0].min() < job.spec.privacy.min_honest_load
    expect("FAILED_PRECONDITION", job.release, 0, held, match="honest load")
    assert_unchanged(before, snapshot(job.servers[0], job.job_id))


def test_release_by_a_non_analyst_is_refused():
    job = Job()
    everyone = np.ones(job.spec.n, dtype=bool)
    for role in ("party", "server"):
        expect("PERMISSION_DENIED", job.release, 0, everyone, role=role)
    # even after a release, a non-analyst retry of the same set gets nothing
    job.release(0, everyone)
    expect("PERMISSION_DENIED", job.release, 0, everyone, role="party")


def test_release_with_a_wrong_digest_is_refused():
    job = Job()
    everyone = np.ones(job.spec.n, dtype=bool)
    expect("FAILED_PRECONDITION", job.release, 0, everyone, digest="f" * 64, match="digest")
    job.release(0, everyone)
    expect("FAILED_PRECONDITION", job.release, 0, everyone, digest="f" * 64)


def test_release_before_close_is_refused():
    job = Job(close=False)
    everyone = np.ones(job.spec.n, dtype=bool)
    before = snapshot(job.servers[0], job.job_id)
    expect("FAILED_PRECONDITION", job.release, 0, everyone, match="closed")
    assert_unchanged(before, snapshot(job.servers[0], job.job_id))
    job.servers[0].close(job.job_id, caller_role=ANALYST_ROLE)
    job.release(0, everyone)


def test_only_the_analyst_closes_and_unknown_jobs_are_not_found():
    job = Job(close=False)
    expect("PERMISSION_DENIED", job.servers[0].close, job.job_id, caller_role="party")
    assert not job.servers[0].store.is_closed(job.job_id)
    expect("NOT_FOUND", job.servers[0].close, "nope", caller_role=ANALYST_ROLE)
    expect("NOT_FOUND", job.servers[0].release, "nope", np.ones(N, dtype=bool), caller_role=ANALYST_ROLE,
           job_digest=job.spec.digest)


def test_retry_bytes_survive_a_caller_mutating_the_result():
    job = Job()
    everyone = np.ones(job.spec.n, dtype=bool)
    first = job.release(0, everyone)
    original = first.tobytes()
    first += np.uint64(1)  # e.g. an analyst doing `total = shares[0]; total += shares[1]`
    assert job.release(0, everyone).tobytes() == original


# ------------------------------------------------------------------------------ accept refusals
@pytest.fixture()
def open_job():
    return Job(upload=False, close=False)


def accept(job: Job, server: int, batch: ShareBatch, caller: str | None = None, role: str = "party"):
    return job.servers[server].accept(batch, job.job_id, caller_role=role,
                                      caller_id=batch.party_id if caller is None else caller)


def refused(job: Job, code: str, batch: ShareBatch, server: int = 0, caller: str | None = None,
            role: str = "party", match: str | None = None):
    before = snapshot(job.servers[server], job.job_id)
    err = expect(code, accept, job, server, batch, caller, role, match=match)
    assert_unchanged(before, snapshot(job.servers[server], job.job_id))
    return err


def test_upload_outside_the_partys_range(open_job):
    job = open_job
    b = job.batches[("party-0", 0)][0]
    p1 = job.spec.party("party-1")
    # party-0 claiming party-1's clients
    refused(job, "PERMISSION_DENIED", replace(b, start=p1.start, stop=p1.start + BATCH), match="may upload clients")
    # straddling the end of its range
    p0 = job.spec.party("party-0")
    refused(job, "PERMISSION_DENIED", replace(b, start=p0.stop - 50, stop=p0.stop + 50))
    refused(job, "PERMISSION_DENIED", replace(b, start=5, stop=5))  # empty range


def test_upload_as_another_party(open_job):
    job = open_job
    b = job.batches[("party-1", 0)][0]
    refused(job, "PERMISSION_DENIED", b, caller="party-0", match="may not upload as")
    refused(job, "PERMISSION_DENIED", replace(b, party_id="party-9"), caller="party-9", match="is not a party of job")
    refused(job, "PERMISSION_DENIED", b, role="analyst", match="only parties")


def test_identical_reupload_gets_the_same_receipt(open_job):
    job = open_job
    b = job.batches[("party-0", 1)][0]
    receipt = accept(job, 0, b)
    assert receipt.clients == BATCH and receipt.batch_index == 1 and receipt.party_id == "party-0"
    before = snapshot(job.servers[0], job.job_id)
    assert accept(job, 0, b) == receipt
    # an equal batch rebuilt from scratch (a retry after a crash) is the same upload
    rebuilt = all_batches(job.spec, job.tables, job.randomness)[("party-0", 1)][0]
    assert rebuilt is not b and accept(job, 0, rebuilt) == receipt
    assert_unchanged(before, snapshot(job.servers[0], job.job_id))
    # even after close an identical retry is answered (the ack may have been lost)
    job.servers[0].close(job.job_id, caller_role=ANALYST_ROLE)
    assert accept(job, 0, b) == receipt


def test_conflicting_reupload_of_the_same_batch_index(open_job):
    job = open_job
    b = job.batches[("party-0", 0)][0]  # batch 0 → primary server 0: an explicit array
    assert b.share.data is not None
    accept(job, 0, b)
    tampered = b.share.data.copy()
    tampered[0, 0, 0] += np.uint64(1)
    refused(job, "ALREADY_EXISTS", replace(b, share=Share(0, b.share.shape, data=tampered)), match="different content")
    # a different client range under the same index is a conflict too
    refused(job, "ALREADY_EXISTS", replace(b, start=b.start + BATCH, stop=b.stop + BATCH))
    # seed shares (server 1 gets a seed for batch 0)
    s = job.batches[("party-0", 0)][1]
    assert s.share.seed is not None
    accept(job, 1, s)
    refused(job, "ALREADY_EXISTS", replace(s, share=Share(1, s.share.shape, seed=bytes(32))), server=1)


def test_overlapping_clients_under_a_new_batch_index(open_job):
    job = open_job
    b = job.batches[("party-0", 0)][0]
    accept(job, 0, b)
    refused(job, "ALREADY_EXISTS", replace(b, batch_index=7), match="already uploaded")
    # a partial overlap, too
    other = job.batches[("party-0", 1)][0]
    partial = replace(other, batch_index=8, start=b.stop - 10, stop=other.stop - 10)
    refused(job, "ALREADY_EXISTS", partial)


def test_upload_after_close(open_job):
    job = open_job
    job.servers[0].close(job.job_id, caller_role=ANALYST_ROLE)
    refused(job, "FAILED_PRECONDITION", job.batches[("party-0", 0)][0], match="closed")


def test_wrong_shape_dtype_columns_and_server(open_job):
    job = open_job
    b = job.batches[("party-0", 0)][0]
    pieces, count, width = b.share.shape
    for shape in ((pieces + 1, count, width), (pieces, count, width - 1), (pieces, count - 1, width)):
        bad = replace(b, share=Share(0, shape, data=np.zeros(shape, dtype=np.uint64)))
        refused(job, "INVALID_ARGUMENT", bad, match="shape")
    refused(job, "INVALID_ARGUMENT", replace(b, share=Share(0, b.share.shape, data=b.share.data.astype(np.int64))),
            match="dtype")
    refused(job, "INVALID_ARGUMENT", replace(b, columns=b.columns[:-1]), match="columns")
    # a share addressed to server 1 sent to server 0
    refused(job, "INVALID_ARGUMENT", job.batches[("party-0", 0)][1], match="server index")
    # a batch bound to another job digest
    refused(job, "FAILED_PRECONDITION", replace(b, job_digest="0" * 64), match="digest")


def test_refusals_do_not_block_the_valid_upload(open_job):
    job = open_job
    b = job.batches[("party-0", 0)][0]
    expect("PERMISSION_DENIED", accept, job, 0, b, "party-1")
    expect("INVALID_ARGUMENT", accept, job, 0, replace(b, columns=()))
    receipt = accept(job, 0, b)
    assert receipt.content_digest == b.content_digest()
    cov = job.servers[0].store.coverage(job.job_id)
    cov = cov.to_array()
    assert cov[b.start:b.stop].all() and not cov[b.stop:].any()


# ====== mutation-kill tests for server/release_gate.py (scripts/mutation.sh), formerly test_kills_release_gate.py
# Each test checks behaviour against a value computed independently (a closed form written out
# again, numpy/scipy in the clear, a second route through the code), never a recorded output.
from tests.helpers.jobs import gate_spec as _gate_spec  # noqa: E402


def _refusal(spec, **kw) -> GateRefusal:
    args = dict(caller_role="analyst", job_digest=spec.digest, participants=np.ones(spec.n, bool),
                held=np.ones(spec.n, bool), already_released=False)
    with pytest.raises(GateRefusal) as err:
        check_release(spec, **{**args, **kw})
    return err.value


def test_gate_refusal_messages_are_exact():
    spec = _gate_spec()
    cases = [
        (dict(caller_role="party"), "PERMISSION_DENIED",
         "only the analyst may request a release (caller role 'party')"),
        (dict(job_digest="0" * 64), "FAILED_PRECONDITION", "the job digest in the request does not match this job's spec"),
        (dict(already_released=True), "FAILED_PRECONDITION",
         "job 'gate-kills' has already been released once; a second release would let differencing cancel the noise"),
        (dict(participants=np.ones(spec.n + 1, bool)), "INVALID_ARGUMENT",
         f"participant mask has shape ({spec.n + 1},), expected ({spec.n},)"),
        (dict(participants=np.arange(spec.n) < 10), "FAILED_PRECONDITION",
         f"participant set of 10 clients is below the job's minimum of {spec.privacy.min_participants}"),
    ]
    for kw, code, message in cases:
        refusal = _refusal(spec, **kw)
        assert (refusal.code, refusal.message) == (code, message)


def test_gate_load_refusal_names_the_weakest_row():
    spec = _gate_spec(min_participants=1)
    rng = np.random.default_rng(5)
    for _ in range(20):
        mask = rng.random(spec.n) < 0.3
        loads, deduction = honest_row_loads(spec, mask)
        honest = loads - deduction
        if int(np.argmin(honest)) != 0 and honest.min() < spec.privacy.min_honest_load:
            break
    else:
        pytest.fail("no participant set with its weakest row other than row 0")
    refusal = _refusal(spec, participants=mask)
    assert refusal.message.startswith(f"sketch row {int(np.argmin(honest))} would carry an honest load of "
                                      f"{int(honest.min())} < the promised L={spec.privacy.min_honest_load}")


def test_gate_allows_exactly_the_minimum_and_any_0_1_mask():
    spec = _gate_spec(min_participants=300, min_honest_load=1)
    mask = np.arange(spec.n) < 300
    decision = check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=mask,
                             held=np.ones(spec.n, bool), already_released=False)
    loads, deduction = honest_row_loads(spec, mask)
    assert (decision.participants, decision.min_honest_load, decision.min_row_load) == \
        (300, int((loads - deduction).min()), int(loads.min()))
    as_floats = check_release(spec, caller_role="analyst", job_digest=spec.digest, participants=mask.astype(float),
                              held=np.ones(spec.n, bool), already_released=False)
    assert as_floats == decision


def test_gate_refuses_client_sets_over_another_n_naming_which_set():
    """A ClientSet over a different number of clients is INVALID_ARGUMENT, and the message names
    whether the participant or the held set was wrong (the gate takes ClientSets since #15)."""
    from ltm.client_set import ClientSet
    spec = _gate_spec()
    n = spec.n
    err = _refusal(spec, participants=ClientSet.full(n + 1))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", f"participant set is over n = {n + 1} clients, expected {n}")
    err = _refusal(spec, held=ClientSet.full(n - 1))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", f"held set is over n = {n - 1} clients, expected {n}")
    err = _refusal(spec, held=np.ones(n + 2, bool))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", f"held mask has shape ({n + 2},), expected ({n},)")

"""A server's memory does not grow with n (#15): coverage as ranges, the gate and the result share
streamed chunk by chunk, the sketch placement derived per chunk for large jobs.

A job of n = 10⁸ clients with a few small batches is accepted, closed and released under
tracemalloc; any n-sized array (a 10⁸ bool mask is 100 MB, the int64 slots 800 MB, an (n, W) bool
coverage table 400 MB) would push the peak far beyond the bound.  The result share is checked
against :meth:`Sketch.apply` (its own placement of each batch's range).
"""
from __future__ import annotations

import sys
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

from ltm.batch import ShareBatch
from ltm.client_set import ClientSet
from ltm.errors import ProtocolError
from ltm.jobspec import PartySpec, honest_row_loads
from ltm.randomness import Randomness
from ltm.server.core import SLOT_CACHE_BYTES, ServerCore
from ltm.server.coverage import Coverage
from ltm.server.release_gate import ANALYST_ROLE
from ltm.server.sqlite_store import SqliteStore
from ltm.sharing import Share

BIG_N = 10 ** 8
#: far below any n-sized array at n = 10⁸ (the smallest, a bool mask, is 100 MB)
PEAK_BYTES = 40 << 20


def big_spec():
    """A small job's spec stretched to n = 10⁸ clients (two parties of 5·10⁷).  It is put into the
    store directly: validation's full-participation loads (a pass over all 10⁸ placements, a few
    seconds) are tested elsewhere."""
    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.sim.runtime.jobs import build_job

    randomness = Randomness.seeded_insecure("streaming")
    spec, _ = build_job(synthetic_ridge(400, 3, randomness), job_id="big", randomness=randomness,
                        parties=2, k=2, m=8, s=1)
    half = BIG_N // 2
    parties = (replace(spec.parties[0], start=0, stop=half), replace(spec.parties[1], start=half, stop=BIG_N))
    privacy = replace(spec.privacy, min_participants=1000, min_honest_load=10)
    return replace(spec, n=BIG_N, parties=parties, privacy=privacy)


def batch(spec, party: PartySpec, index: int, start: int, stop: int, rng) -> ShareBatch:
    width = spec.upload_width
    data = rng.integers(0, 2 ** 63, size=(1, stop - start, width), dtype=np.uint64)
    return ShareBatch(spec.digest, party.party_id, index, start, stop, tuple(range(width)),
                      Share(0, data.shape, data=data))


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_hundred_million_client_job_closes_and_releases_without_n_sized_arrays(tmp_path, store):
    spec = big_spec()
    assert 8 * spec.n > SLOT_CACHE_BYTES  # no slot cache: the placement is derived per chunk
    rng = np.random.default_rng(15)
    p0, p1 = spec.parties
    batches = [batch(spec, p0, 0, 0, 1500, rng), batch(spec, p0, 1, 1500, 3000, rng),
               batch(spec, p1, 0, p1.start, p1.start + 2000, rng), batch(spec, p1, 7, BIG_N - 1000, BIG_N, rng)]
    tracemalloc.start()
    try:
        core = ServerCore("server-0", SqliteStore(tmp_path) if store == "sqlite" else None)
        core.store.put_job(spec)
        for b in batches:
            core.accept(b, spec.job_id, caller_role="party", caller_id=b.party_id)
        if store == "sqlite":  # coverage is rebuilt from the batch rows on open
            core.store.close()
            core = ServerCore("server-0", SqliteStore(tmp_path))
        held = core.close(spec.job_id, caller_role=ANALYST_ROLE)
        expected = ClientSet.from_ranges(spec.n, [(0, 3000), (p1.start, p1.start + 2000), (BIG_N - 1000, BIG_N)])
        assert held == expected and held.count == 6000
        participants = held - ClientSet.span(spec.n, 100, 200)  # the analyst may drop some clients
        result = core.release(spec.job_id, participants, caller_role=ANALYST_ROLE, job_digest=spec.digest)
        again = core.release(spec.job_id, participants, caller_role=ANALYST_ROLE, job_digest=spec.digest)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"peak traced memory {peak / 2**20:.1f} MiB"
    sketch = spec.make_sketch()
    want = np.zeros((sketch.m, spec.upload_width), dtype=np.uint64)
    for b in batches:
        sketch.apply(b.start, b.share.data, want, include=participants.mask(b.start, b.stop))
    np.testing.assert_array_equal(result, want)
    assert again.tobytes() == result.tobytes()
    assert core.store.get_release(spec.job_id).participants_digest == participants.digest()
    if store == "sqlite":
        core.store.close()


def test_a_set_the_server_does_not_hold_is_refused_at_any_n():
    spec = big_spec()
    rng = np.random.default_rng(3)
    core = ServerCore("server-0")
    core.store.put_job(spec)
    p0, p1 = spec.parties
    for b in (batch(spec, p0, 0, 0, 2000, rng), batch(spec, p1, 0, p1.start, p1.start + 2000, rng)):
        core.accept(b, spec.job_id, caller_role="party", caller_id=b.party_id)
    core.close(spec.job_id, caller_role=ANALYST_ROLE)
    beyond = ClientSet.from_ranges(spec.n, [(0, 2000), (p1.start, p1.start + 2001)])
    with pytest.raises(ProtocolError) as err:
        core.release(spec.job_id, beyond, caller_role=ANALYST_ROLE, job_digest=spec.digest)
    assert (err.value.code, err.value.message) == (
        "FAILED_PRECONDITION", f"the participant set contains 1 clients this server does not hold "
                               f"(first: {p1.start + 2000})")
    with pytest.raises(ProtocolError) as err:
        core.release(spec.job_id, ClientSet.full(10), caller_role=ANALYST_ROLE, job_digest=spec.digest)
    assert (err.value.code, err.value.message) == (
        "INVALID_ARGUMENT", f"participant set is over n = 10 clients, expected {BIG_N}")


@pytest.mark.parametrize("chunk", [None, 7])  # 7: many chunks, sets that start and stop inside them
def test_row_loads_of_a_client_set_equal_those_of_its_mask_with_and_without_slots(chunk, monkeypatch):
    """The chunked pass over a ClientSet (placement derived per chunk, or taken from the slot
    cache) gives exactly the loads and deductions of the same set as a mask."""
    import ltm.jobspec as jobspec
    from tests.helpers.jobs import gate_spec

    if chunk is not None:
        monkeypatch.setattr(jobspec, "CHUNK_CLIENTS", chunk)
    spec = gate_spec()
    sketch = spec.make_sketch()
    rng = np.random.default_rng(7)
    c = spec.privacy.corrupt_parties
    assert c == 1
    for density in (0.0, 0.3, 0.97, 1.0):
        mask = rng.random(spec.n) < density
        want_loads = np.bincount(sketch.placement(0, spec.n)[0][:, mask].ravel(), minlength=sketch.m)
        # the deduction: t′ plus the biggest party's load in each row (one corrupt party)
        per_party = [np.bincount(sketch.placement(p.start, p.stop)[0][:, mask[p.start:p.stop]].ravel(),
                                 minlength=sketch.m) for p in spec.parties]
        want_deduction = spec.privacy.t_prime + np.sort(per_party, axis=0)[-c:].sum(axis=0)
        for members in (mask, ClientSet.from_mask(mask)):
            for slots in (None, sketch.slots()):
                loads, deduction = honest_row_loads(spec, members, sketch, slots)
                np.testing.assert_array_equal(loads, want_loads)
                np.testing.assert_array_equal(deduction, want_deduction)


def test_coverage_ranges_answer_like_the_cell_table():
    """Coverage (ranges per column set) against the (n, W) bool table it replaces, on random
    uploads in both partitions: overlap checks, held clients, and merging of adjacent ranges."""
    rng = np.random.default_rng(11)
    n, width = 200, 5
    for blocks in ([(0, 1, 2, 3, 4)], [(0, 1), (2,), (3, 4)], [(0, 1, 2, 3, 4), (0, 1), (1, 2), (4,), (3,)]):
        cov, table = Coverage(n, width), np.zeros((n, width), dtype=bool)
        for _ in range(60):
            cols = blocks[rng.integers(len(blocks))]
            a = int(rng.integers(0, n))
            b = int(rng.integers(a + 1, min(n, a + 30) + 1))
            overlaps = bool(table[a:b][:, list(cols)].any())
            assert cov.overlaps(a, b, cols) == overlaps
            assert cov.overlaps(a, b, cols[:1]) == bool(table[a:b, cols[0]].any())
            if not overlaps:
                cov.add(a, b, cols)
                table[a:b, list(cols)] = True
            np.testing.assert_array_equal(cov.to_array(), table)
            assert cov.held() == ClientSet.from_mask(table.all(axis=1))
            assert cov.any() == table.any()
        if sum(map(len, blocks)) == width:  # a partition of the columns: each set alone explains its cells
            for key, members in cov.column_sets().items():  # canonical: adjacent uploads merged
                assert members == ClientSet.from_mask(table[:, list(key)].all(axis=1))
    assert Coverage(n, width).held() == ClientSet.empty(n)
    cov = Coverage(n, width)
    cov.add(0, 10, (4,))
    assert cov.overlaps(5, 6, (0, 1, 2, 3, 4)) and cov.overlaps(9, 12, (3, 4)) and not cov.overlaps(10, 12, (4,))
    assert not cov.overlaps(5, 6, (0, 1)) and not cov.held()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_servers_share_one_malloc_arena_so_threads_reuse_freed_batches():
    """By default a new thread's first allocation creates its own arena (an mmapped heap away from
    the brk heap); with one arena it comes from the main heap, where every thread reuses what the
    others freed."""
    import subprocess

    probe = """
import ctypes, sys, threading
from ltm.transport.memory import share_one_malloc_arena
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.sbrk.restype = ctypes.c_void_p
if sys.argv[1] == "shared":
    assert share_one_malloc_arena()
got = []
thread = threading.Thread(target=lambda: got.append(libc.malloc(1000)))
thread.start()
thread.join()
print(int(got[0] <= libc.sbrk(0)))  # inside the main (brk) heap
"""
    run = lambda mode: int(subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True,
                                          check=True).stdout)  # noqa: E731
    assert run("default") == 0  # the premise: a thread arena
    assert run("shared") == 1


def test_content_digest_hashes_the_share_in_place_with_the_same_value():
    """A batch's content digest is SHA-256 over its header fields and its little-endian words,
    computed without copying the share (a server hashes every batch it stores and releases)."""
    import hashlib

    def by_copy(b: ShareBatch, data: np.ndarray) -> str:  # the definition, written out again
        h = hashlib.sha256()
        h.update(f"{b.job_digest}|{b.party_id}|{b.batch_index}|{b.start}|{b.stop}|"
                 f"{','.join(map(str, b.columns))}|{b.share.shape}|".encode())
        h.update(b"data:" + data.astype("<u8").tobytes())
        return h.hexdigest()

    base = np.random.default_rng(4).integers(0, 2 ** 64, size=(2, 6, 3), dtype=np.uint64)
    for data in (base, base[:, ::2], base.astype(">u8")):  # contiguous, strided, big-endian
        b = ShareBatch("ab" * 32, "party-0", 3, 10, 10 + data.shape[1], (0, 1, 2), Share(0, data.shape, data=data))
        assert b.content_digest() == by_copy(b, data)
    big = np.ones((1, 1 << 16, 11), dtype=np.uint64)  # one default batch: 5.8 MB
    b = ShareBatch("ab" * 32, "party-0", 0, 0, 1 << 16, tuple(range(11)), Share(0, big.shape, data=big))
    tracemalloc.start()
    try:
        b.content_digest()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < big.nbytes // 100

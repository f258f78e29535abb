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
from ltm.sharing import Share
from server.core import SLOT_CACHE_BYTES, ServerCore
from server.coverage import Coverage
from server.release_gate import ANALYST_ROLE
from server.sqlite_store import SqliteStore

BIG_N = 10 ** 8
#: far below any n-sized array at n = 10⁸ (the smallest, a bool mask, is 100 MB)
PEAK_BYTES = 40 << 20


def big_spec():
    """A small job's spec stretched to n = 10⁸ clients (two parties of 5·10⁷).  It is put into the
    store directly: validation's full-participation loads (a pass over all 10⁸ placements, a few
    seconds) are tested elsewhere."""
    from sim.data import synthetic_ridge
    from sim.jobs import build_job

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
    from kill_helpers import gate_spec

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
def test_servers_pin_the_mmap_threshold_so_freed_batches_leave_the_rss():
    """Once glibc's threshold is above a block's size (it raises it as large blocks are freed), a
    2 MiB block comes from the heap (and stays resident when freed); with the threshold pinned it
    is mmapped (mallinfo2)."""
    import subprocess

    probe = """
import ctypes, sys
from transport.memory import return_large_blocks_to_the_os
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
assert libc.mallopt(-3, 16 << 20)  # a threshold as glibc raises it after freeing a 16 MiB block
if sys.argv[1] == "pinned":
    assert return_large_blocks_to_the_os()
before = libc.mallinfo2().hblkhd
block = libc.malloc(2 << 20)
print(libc.mallinfo2().hblkhd - before)
"""
    run = lambda mode: int(subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True,
                                          check=True).stdout)  # noqa: E731
    assert run("default") == 0  # the premise: from the heap
    assert run("pinned") >= 2 << 20


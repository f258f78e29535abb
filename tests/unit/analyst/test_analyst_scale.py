"""The analyst at scale (#15): participant sets as ranges, so its memory does not grow with n.

The coordinator, the job runner, the store and the report run a job of 10⁸ declared clients
against fake server links that hold a few ranges each; tracemalloc's peak must stay far below one
n-sized mask (10⁸ bools = 100 MB; the code before ClientSet held k + 1 of them, and their packed
copies).  The Close reply a server sends is hostile input: a malformed ``held_ranges`` is a clear
:class:`ReleaseFailed`, never a crash.
"""
from __future__ import annotations

import asyncio
import json
import tracemalloc

import numpy as np
import pytest

from ltm.analyst.coordinator import GrpcServerLink, ReleaseFailed, coordinate, coverage_report
from ltm.analyst.jobs import JobRunner, result_files
from ltm.analyst.store import AnalystStore
from ltm.client_set import ClientSet
from ltm.jobfile import FitSpec
from ltm.jobspec import (
    ColumnSpec,
    JobSpec,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    warm_validation_in_background,
)
from ltm.randomness import Randomness
from ltm.v1 import ltm_pb2

BIG_N = 10**8
#: far below one n-sized bool mask (100 MB at 10⁸); the analyst needs a few MB of placement chunks
PEAK_LIMIT = 24 * 2**20


def make_spec(n: int, parties: int = 16, k: int = 3, m: int = 100) -> JobSpec:
    """The lead's benchmark shape (d = 10, m = 100, s = 1), n clients over ``parties`` parties."""
    edges = np.linspace(0, n, parties + 1).round().astype(int)
    return JobSpec(
        job_id=f"scale-{n}", partition="rows", n=n, columns=tuple(ColumnSpec(f"x{j}") for j in range(10)),
        parties=tuple(PartySpec(f"party-{i}", int(a), int(b)) for i, (a, b) in enumerate(zip(edges[:-1], edges[1:]))),
        clip_bound=1.0, frac_bits=24,
        sketch=SketchSpec("sparse", m, 1, Randomness.seeded_insecure("scale").bytes(32).hex()),
        privacy=PrivacySpec(min_honest_load=1, min_participants=1, corrupt_parties=1),
        servers=tuple(ServerSpec(f"server-{i}") for i in range(k)))


class FakeLink:
    """A server that holds ``held`` and answers Release with a canned share (records the set asked for)."""

    def __init__(self, server_id: str, held: ClientSet, share: np.ndarray) -> None:
        self.server_id, self.held, self.share = server_id, held, share
        self.seeded_parties: list[str] = []
        self.released_over: ClientSet | None = None

    async def create(self, spec: JobSpec) -> str:
        return spec.digest

    async def held_count(self, spec: JobSpec) -> int | None:
        return self.held.count

    async def close(self, spec: JobSpec) -> ClientSet:
        return self.held

    async def release(self, spec: JobSpec, participants: ClientSet) -> tuple[np.ndarray, int]:
        self.released_over = participants
        return self.share, self.share.nbytes


def fake_servers(spec: JobSpec) -> tuple[list[FakeLink], ClientSet]:
    """Three servers holding all, all but one party's tail, and all but two gaps; and their intersection."""
    n = spec.n
    p = spec.parties[7]
    holes = [ClientSet.empty(n), ClientSet.span(n, p.stop - 1000, p.stop),
             ClientSet.from_ranges(n, [(12_345, 12_400), (n - 7, n)])]
    rng = np.random.default_rng(0)
    links = [FakeLink(s.server_id, ClientSet.full(n) - hole,
                      rng.integers(0, 2**63, size=(spec.sketch.m, spec.width), dtype=np.uint64))
             for s, hole in zip(spec.servers, holes)]
    return links, ClientSet.full(n) - ClientSet.union(holes)


def test_a_job_of_1e8_clients_runs_through_the_runner_and_store_without_an_n_sized_array(tmp_path):
    spec = make_spec(BIG_N)
    links, expected = fake_servers(spec)
    store = AnalystStore(tmp_path / "state")

    async def run() -> None:
        runner = JobRunner(store, lambda spec, retries: links, tmp_path / "out", poll_s=0.0)
        await runner.submit(spec, FitSpec(model="none"), deadline_s=0.0, randomness="seeded (test)")
        await runner.tasks[spec.job_id]

    warm_validation_in_background().join()  # the accountant's one-time import is not the job's memory
    tracemalloc.start()
    try:
        asyncio.run(run())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    record = store.get(spec.job_id)
    assert record.state == "done", record.error
    assert peak < PEAK_LIMIT, f"analyst peak {peak / 2**20:.1f} MiB at n = 10^8"
    assert record.participants == expected and all(link.released_over == expected for link in links)
    report = json.loads((tmp_path / "out" / spec.job_id / "report.json").read_text())
    assert report["participants"] == expected.count == BIG_N - 1000 - 55 - 7
    assert report["participant_ranges"] == expected.ranges.tolist() and report["participant_range_count"] == 3
    assert report["held_per_server"] == [BIG_N, BIG_N - 1000, BIG_N - 62]
    cov = report["coverage"]
    assert (cov["reached_every_server"], cov["reached_some_not_all"], cov["reached_none"]) == (expected.count, 1062, 0)
    assert report["privacy"]["participants"] == expected.count
    written = (tmp_path / "out" / spec.job_id / "release.json").read_text()
    assert json.loads(written)["n"] == expected.count and "release.json" not in record.outputs
    assert result_files(record)["release.json"] == written  # re-derived from the stored shares, byte for byte
    store.close()


def test_coverage_counts_come_from_the_range_algebra():
    spec = make_spec(1000, parties=2)
    a = ClientSet.from_ranges(1000, [(0, 600)])
    b = ClientSet.from_ranges(1000, [(100, 700)])
    cov = coverage_report(spec, [a, b, RuntimeError("down")], last_seen=[None, None, 5])
    assert (cov["reached_every_server"], cov["reached_some_not_all"], cov["reached_none"]) == (500, 200, 300)
    assert cov["held_per_server"] == {"server-0": 600, "server-1": 600, "server-2": None}
    assert not cov["all_servers_reachable"] and cov["servers"][2]["last_seen_held"] == 5


# ---------------------------------------------------------------------------- the Close reply over gRPC
class FakeStub:
    """A server's gRPC stub: Close answers ``reply``; Release streams a zero share and keeps the request."""

    def __init__(self, reply: ltm_pb2.CloseResponse, m: int, width: int) -> None:
        self.reply, self.m, self.width = reply, m, width
        self.requests: list[ltm_pb2.ReleaseRequest] = []

    async def Status(self, request, timeout=None):
        return ltm_pb2.StatusResponse(job_id=request.job_id, clients_held=self.reply.held)

    async def Close(self, request, timeout=None):
        return self.reply

    async def Release(self, request, timeout=None):
        import hashlib

        self.requests.append(request)
        payload = bytes(8 * self.m * self.width)
        yield ltm_pb2.ReleaseChunk(header=ltm_pb2.ReleaseHeader(rows=self.m, cols=self.width,
                                                                result_sha256=hashlib.sha256(payload).digest()))
        yield ltm_pb2.ReleaseChunk(data=payload)


def grpc_run(spec: JobSpec, replies: list[ltm_pb2.CloseResponse]):
    stubs = [FakeStub(r, spec.sketch.m, spec.width) for r in replies]
    links = [GrpcServerLink(stub, i, s.server_id) for i, (stub, s) in enumerate(zip(stubs, spec.servers))]
    return asyncio.run(coordinate(links, spec, deadline_s=0.0, randomness_label="seeded (test)")), stubs


def reply_of(held: ClientSet, **fields) -> ltm_pb2.CloseResponse:
    return ltm_pb2.CloseResponse(**{"n": held.n, "held": held.count, "held_ranges": held.to_bytes(), **fields})


def test_held_ranges_are_read_and_the_participant_ranges_sent():
    spec = make_spec(1000, parties=2)
    held = [ClientSet.full(1000), ClientSet.from_ranges(1000, [(0, 400), (410, 1000)]),
            ClientSet.from_ranges(1000, [(5, 1000)])]
    run, stubs = grpc_run(spec, [reply_of(h) for h in held])
    expected = ClientSet.from_ranges(1000, [(5, 400), (410, 1000)])
    assert run.participants == expected and run.held_per_server == [1000, 990, 995]
    for stub in stubs:
        (request,) = stub.requests
        assert ClientSet.from_bytes(1000, request.participant_ranges) == expected


def _pairs(*pairs: int) -> bytes:
    return np.asarray(pairs, dtype="<u8").tobytes()


@pytest.mark.parametrize("bad, why", [
    (dict(held_ranges=b"\x00" * 17), "16-byte"),                           # not whole pairs
    (dict(held_ranges=_pairs(0, 1001)), "past n"),                         # beyond the job's clients
    (dict(held_ranges=_pairs(500, 600, 0, 100)), "sorted"),                # unsorted
    (dict(held_ranges=_pairs(0, 100, 100, 200)), "sorted and separated"),  # adjacent, not merged
    (dict(held_ranges=_pairs(7, 7)), "start < stop"),                      # empty range
    (dict(held_ranges=_pairs(2**64 - 1, 3)), "past n"),                    # wraps when read as signed
    (dict(n=999), "over n = 999"),                                         # the wrong job size
])
def test_a_malformed_held_set_is_a_clear_release_failure(bad, why):
    spec = make_spec(1000, parties=2)
    good = reply_of(ClientSet.full(1000))
    broken = reply_of(ClientSet.full(1000))
    for name, value in bad.items():
        setattr(broken, name, value)
    with pytest.raises(ReleaseFailed, match="server-1") as err:
        grpc_run(spec, [good, broken, good])
    assert why in str(err.value)


@pytest.mark.parametrize("rows", [1, 4095, 4096, 4097, 9000])
def test_release_json_is_json_dumps_byte_for_byte(rows, monkeypatch):
    """The block-wise encoding of the release matrix (bounded memory) writes exactly the bytes of
    ``json.dumps(release_to_json(release))``, including non-finite values and awkward column names."""
    from dataclasses import replace as dc_replace

    from ltm.analyst import jobs
    from ltm.analyst.release import ReleasedSketch

    monkeypatch.setattr(jobs, "_JSON_ROW_BLOCK", 1000)
    matrix = np.random.default_rng(rows).standard_normal((rows, 3)) * 1e5
    matrix[0, 0] = 1e-300
    release = ReleasedSketch(matrix=matrix, columns=('a"matrix": null', "b", "y"), centers=np.zeros(3),
                             scales=np.ones(3), label=2, intercept=None, n=10, noise_variance_per_column=0.5,
                             privacy={}, sha256="00", kind="sparse")
    assert jobs.release_json(release) == json.dumps(jobs.release_to_json(release))
    inf = dc_replace(release, matrix=np.where(matrix > 1e5, np.inf, matrix))
    assert jobs.release_json(inf) == json.dumps(jobs.release_to_json(inf))

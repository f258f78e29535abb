"""Fair uploads against a real server process over mutual TLS: one party's slow or silent streams
cannot hold the upload budget another party needs (#23).

The server runs with a 3 s minimum-rate window (``--limit stream_rate_window_seconds=3``; the
default is 10 s) so the tests take seconds; every other limit is the default: a 16 MiB upload
budget, 64 KiB per window, 1 s before a silent stream's reservation can be taken back.  Party-1's
batch is a real one (100 clients, made by the party's own code); its time alone is measured on
the same server first, and with party-0 misbehaving it must get through within 2× that time plus
the rate window — the acceptance bound of the issue.
"""
from __future__ import annotations

import threading
import time

import grpc
import pytest

from ltm.datasets.synthetic import synthetic_ridge
from ltm.limits import ServerLimits
from ltm.party.randomizer import make_batches, party_randomness
from ltm.party.uploader import batch_header
from ltm.randomness import Randomness
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.transport.certs import write_certs
from ltm.transport.tls import make_sync_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc

WINDOW = 3.0                      # stream_rate_window_seconds on the test server
LIMITS = ServerLimits(stream_rate_window_seconds=WINDOW)
PIECES, FEATURES = 32, 32         # 8 · 32 · 33 = 8 448 bytes per client: 100 MiB is ~12 400 clients
CLIENTS = 2 * 12_500              # two parties, rows partition
MiB = 1 << 20


class World:
    def __init__(self, workdir, certs) -> None:
        self.group = ProcessGroup(workdir, certs)
        (self.server,) = self.group.start_servers(1, ["--limit", f"stream_rate_window_seconds={WINDOW:g}"])
        self.certs = certs
        randomness = Randomness.seeded_insecure("fair-uploads")
        table = synthetic_ridge(CLIENTS, FEATURES, randomness)
        self.spec, _ = build_job(table, job_id="fair", randomness=randomness, parties=2, k=2, m=64, s=PIECES,
                                 share_mode="full", endpoints=[self.server.endpoint, "127.0.0.1:9"])
        self.width = self.spec.width
        self.channels: dict[str, grpc.Channel] = {}
        self.stub("analyst").CreateJob(ltm_pb2.CreateJobRequest(spec_json=self.spec.canonical_json()), timeout=60)
        tables = party_tables(self.spec, table)
        # party-1's honest batches of 100 clients, as its uploader would send them to server-0
        p1 = "party-1"
        self.honest = [per_server[0] for per_server in
                       make_batches(self.spec, p1, tables[p1], party_randomness(randomness, self.spec, p1),
                                    batch_clients=100)]

    def stub(self, actor: str) -> ltm_pb2_grpc.ServerStub:
        if actor not in self.channels:
            self.channels[actor] = make_sync_channel(self.server.endpoint, self.certs, actor,
                                                     options=[("grpc.ssl_target_name_override", "server-0")])
        return ltm_pb2_grpc.ServerStub(self.channels[actor])

    def upload(self, messages, actor: str):
        """(code name, details) of one Upload stream."""
        try:
            self.stub(actor).Upload(messages, timeout=60)
            return "OK", ""
        except grpc.RpcError as err:
            return err.code().name, err.details() or ""

    def honest_upload(self, i: int) -> float:
        """Seconds party-1 takes to upload its i-th batch (100 clients) to the server."""
        header, payload = batch_header(self.honest[i], self.spec.job_id)
        msgs = [ltm_pb2.UploadChunk(header=header)] + [ltm_pb2.UploadChunk(data=payload[j:j + MiB])
                                                        for j in range(0, len(payload), MiB)]
        t = time.monotonic()
        code, details = self.upload(iter(msgs), "party-1")
        elapsed = time.monotonic() - t
        assert code == "OK", details
        return elapsed

    def header(self, batch_index: int, clients: int, start_offset: int = 0) -> ltm_pb2.BatchHeader:
        """A party-0 header that passes every check, declaring a batch of ``clients`` clients."""
        p = self.spec.party("party-0")
        start = p.start + start_offset
        assert start + clients <= p.stop
        return ltm_pb2.BatchHeader(job_id=self.spec.job_id, job_digest=self.spec.digest, party_id="party-0",
                                   batch_index=batch_index, start=start, stop=start + clients,
                                   columns=list(range(self.width)), shape=[PIECES, clients, self.width],
                                   server_index=0, data_sha256=b"\0" * 32,
                                   randomness_mode=batch_header(self.honest[0], self.spec.job_id)[0].randomness_mode)

    def close(self) -> None:
        for c in self.channels.values():
            c.close()
        self.group.stop_all()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    certs = tmp_path_factory.mktemp("certs")
    write_certs(certs, ["server-0", "server-1", "party-0", "party-1", "analyst", "operator"])
    w = World(tmp_path_factory.mktemp("work"), certs)
    try:
        yield w
        assert w.server.proc.poll() is None, w.server.log_tail()
    finally:
        w.close()


def solo_time(world: World, i: int) -> float:
    """Party-1's upload time with nothing else going on (the best of two batches)."""
    return min(world.honest_upload(i), world.honest_upload(i + 1))


def in_background(world: World, messages, outcomes: list) -> threading.Thread:
    def run():
        t = time.monotonic()
        outcomes.append((*world.upload(messages, "party-0"), time.monotonic() - t))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def upload_beside(world: World, streams, batch: int, settle: float, stop: threading.Event | None = None,
                  join_s: float = 30) -> tuple[float, list]:
    """Party-1 uploads batch ``batch`` (``settle`` seconds after party-0's ``streams`` started in the
    background); then waits up to ``join_s`` for party-0's streams and sets ``stop``.  Returns party-1's
    upload time and party-0's outcomes (status, details, seconds each stream lasted)."""
    outcomes: list = []
    threads = [in_background(world, messages, outcomes) for messages in streams]
    time.sleep(settle)
    during = world.honest_upload(batch)
    for t in threads:
        t.join(join_s)
    if stop is not None:
        stop.set()
    return during, outcomes


def bytes_per_client() -> int:
    return 8 * PIECES * (FEATURES + 1)


def test_a_trickling_party_does_not_hold_up_another_partys_batch(world):
    """Party-0 declares a ~100 MiB batch (above the whole budget: admitted alone) and trickles
    1 KiB every 2 s; party-1's 100-client batch gets through within 2× its solo time + the window,
    and the trickle is cut for its rate with its reservation returned."""
    solo = solo_time(world, 0)
    clients = (100 * MiB) // bytes_per_client()
    header = world.header(0, clients)
    assert 8 * PIECES * clients * world.width > 99 * MiB

    def trickle():
        yield ltm_pb2.UploadChunk(header=header)
        for _ in range(30):
            yield ltm_pb2.UploadChunk(data=b"\1" * 1024)
            time.sleep(2.0)
    during, outcomes = upload_beside(world, [trickle()], 2, settle=1.0)  # the trickle is admitted, its first KiB sent
    print(f"\ntrickle: party-1 alone {solo:.3f} s, beside the trickle {during:.3f} s "
          f"(bound {2 * solo + WINDOW:.3f} s); trickle {outcomes}")
    assert during <= 2 * solo + WINDOW
    ((code, details, lasted),) = outcomes
    assert code == "DEADLINE_EXCEEDED" and "stream_min_bytes" in details, details
    assert f"arrived in the last {WINDOW:g} s" in details, details
    assert lasted < WINDOW + 4.0  # cut at the window, not at stream_idle_seconds (60 s) or later


def test_four_silent_streams_do_not_hold_the_budget(world):
    """Party-0 opens four streams (its limit) each declaring 8 MiB and sends nothing after the
    header: two fill the 16 MiB budget, two wait.  Party-1's batch takes the silent reservations
    after stream_silent_seconds and gets through within 2× its solo time + the window; every
    silent stream is cut for its rate."""
    solo = solo_time(world, 3)
    clients = (8 * MiB) // bytes_per_client()
    stop = threading.Event()

    def silent(i):
        yield ltm_pb2.UploadChunk(header=world.header(10 + i, clients, start_offset=i * clients))
        stop.wait(30)  # the stream stays open, sending nothing
    during, outcomes = upload_beside(world, [silent(i) for i in range(4)], 5, settle=0.5, stop=stop)
    print(f"\nsilent: party-1 alone {solo:.3f} s, beside 4 silent streams {during:.3f} s "
          f"(bound {2 * solo + WINDOW:.3f} s); silent streams {outcomes}")
    assert during <= 2 * solo + WINDOW
    assert during < LIMITS.stream_silent_seconds + 2 * solo + 1.0  # taken back after 1 s, not after the window
    assert len(outcomes) == 4
    for code, details, lasted in outcomes:
        assert code == "DEADLINE_EXCEEDED" and "stream_min_bytes" in details and "0 bytes" in details, details
        assert lasted < 2 * WINDOW + 4.0


def test_one_byte_every_half_second_is_cut_at_the_window(world):
    """A stream that sends a byte every 0.5 s never goes silent for stream_idle_seconds, but it
    is cut once a window passes with less than stream_min_bytes — and the budget is free again."""
    header = world.header(20, 100)
    outcomes: list = []

    def drip():
        yield ltm_pb2.UploadChunk(header=header)
        for _ in range(80):
            yield ltm_pb2.UploadChunk(data=b"\1")
            time.sleep(0.5)
    in_background(world, drip(), outcomes).join(30)
    ((code, details, lasted),) = outcomes
    print(f"\ndrip: {code} after {lasted:.2f} s: {details}")
    assert code == "DEADLINE_EXCEEDED" and "stream_min_bytes" in details, details
    assert WINDOW - 0.5 < lasted < WINDOW + 4.0  # margins for a loaded machine
    world.honest_upload(6)  # nothing left holding the budget


def test_a_party_over_its_share_must_finish_while_another_waits(world):
    """Party-0 alone takes the whole budget with two 8 MiB streams and keeps them above the
    minimum rate (64 KiB every 0.5 s); when party-1 waits, party-0's streams must finish within
    one window (UNAVAILABLE, retried) — the minimum rate alone would let them hold the budget for
    minutes — and party-1 gets through within 2× its solo time + the window."""
    solo = solo_time(world, 7)
    clients = (8 * MiB) // bytes_per_client()
    stop = threading.Event()

    def steady(i):
        yield ltm_pb2.UploadChunk(header=world.header(30 + i, clients, start_offset=i * clients))
        while not stop.is_set():
            yield ltm_pb2.UploadChunk(data=b"\1" * (64 << 10))
            time.sleep(0.5)
    during, outcomes = upload_beside(world, [steady(i) for i in range(2)], 9, settle=1.0, stop=stop)
    print(f"\nover share: party-1 alone {solo:.3f} s, beside party-0's steady streams {during:.3f} s "
          f"(bound {2 * solo + WINDOW:.3f} s); party-0 {outcomes}")
    # party-1 waits one window from when it starts waiting (not from party-0's admission, as
    # with the rate cut above), so the bound gets a second of slack for a loaded machine
    assert during <= 2 * solo + WINDOW + 1.0
    assert len(outcomes) == 2
    for code, details, lasted in outcomes:
        assert code == "UNAVAILABLE" and "more than its share" in details and "party-0" in details, details


def test_a_fast_upload_is_never_cut_by_the_rate_rules(world):
    """An honest party sending at full speed never meets the minimum rate or its share rules: a
    batch of ~12 MiB (most of the budget) goes through alone and beside another party's."""
    clients = (12 * MiB) // bytes_per_client()
    header = world.header(40, clients)
    payload = b"\7" * (8 * PIECES * clients * world.width)
    import hashlib
    header.data_sha256 = hashlib.sha256(payload).digest()
    msgs = [ltm_pb2.UploadChunk(header=header)] + [ltm_pb2.UploadChunk(data=payload[j:j + MiB])
                                                    for j in range(0, len(payload), MiB)]
    _, outcomes = upload_beside(world, [iter(msgs)], 10, settle=0.0, join_s=60)
    ((code, details, lasted),) = outcomes
    assert code == "OK", details

"""Bad input against running servers (docs/servers.md; docs/testing.md): every malformed, hostile or misaddressed
request gets a specific gRPC status and a message a person can act on, the server keeps serving,
and its stored state is untouched.

Two kinds of target, both with real mutual TLS:

* an in-process ``grpc.aio`` server (on its own event-loop thread) hosting
  :class:`ltm.server.service.ServerService` over a :class:`ltm.server.sqlite_store.SqliteStore` — fast
  enough for hundreds of hypothesis-generated uploads;
* real ``ltm server`` processes (``ltm.sim.localnet.launcher.ProcessGroup``) for a smaller hypothesis run, a
  table of named cases, unauthenticated and wrong-role callers, the other RPCs, uploads after
  close, and ``ltm party`` refusing bad CSV data before it sends anything.

"State unchanged" is checked on the store itself: the SQLite database opened read-only (jobs,
batch rows with their content digests, release records), every blob file's bytes, and for the
in-process server the store's in-memory coverage and closed flags, for the processes the Status
RPC.  The fuzz job is fully uploaded before fuzzing, so every mutated upload is either an
identical retry (same receipt) or must be refused.

The number of cases tried is printed at the end of the module and stored in the pytest cache
(``ltm/bad_input_cases``).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import math
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
import numpy as np
import pytest

from tests.helpers.optional import require

require("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ltm.client_set import ClientSet
from ltm.datasets.synthetic import synthetic_ridge
from ltm.identifiers import id_problem
from ltm.limits import ServerLimits
from ltm.party.randomizer import PartyDataError, client_vectors, make_batches
from ltm.randomness import Randomness
from ltm.server.core import ServerCore
from ltm.server.service import MAX_BATCH_BYTES, ServerService
from ltm.server.sqlite_store import SqliteStore
from ltm.sim.localnet.launcher import ProcessGroup
from ltm.sim.runtime.jobs import build_job
from ltm.transport.certs import write_certs
from ltm.transport.tls import add_secure_port, make_server, make_sync_channel
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from tests.helpers import party_runs  # tests/helpers/party_runs.py
from tests.helpers.upload_targets import ACTORS, BATCH, TIMEOUT, K, Target, World, encode, make_world, stream  # noqa: E402

MAX_INDEX = (1 << 63) - 1
U64 = (1 << 64) - 1
LATER_JOBS = ("after-close", "csv")  # created on the process servers by later tests

# ------------------------------------------------------------------------------ case accounting
CASES: collections.Counter = collections.Counter()     # target kind → cases tried
SEEN: collections.Counter = collections.Counter()      # (code, phrase) → times observed


@pytest.fixture(scope="module", autouse=True)
def _report_case_count(request):
    yield
    total = sum(CASES.values())
    by_kind = ", ".join(f"{k}: {v}" for k, v in sorted(CASES.items()))
    pairs = "; ".join(f"{c} '{p}' ×{n}" for (c, p), n in sorted(SEEN.items()))
    line = f"\ntest_bad_input: {total} bad-input cases tried ({by_kind})\n  statuses seen: {pairs}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(line)
    if request.config.cache is not None:
        request.config.cache.set("ltm/bad_input_cases", {"total": total, **CASES,
                                                         "statuses": {f"{c} {p}": n for (c, p), n in SEEN.items()}})


# ------------------------------------------------------------------------------ expected refusals
UNKNOWN_JOB = ("NOT_FOUND", "unknown job")
BAD_JOB_ID = ("INVALID_ARGUMENT", "not a valid id")  # outside the id grammar (ltm.identifiers)
DIGEST = ("FAILED_PRECONDITION", "different job digest")
UPLOAD_AS = ("PERMISSION_DENIED", "may not upload as")
RANGE = ("PERMISSION_DENIED", "may upload clients")
NOT_A_PARTY = ("PERMISSION_DENIED", "is not a party of job")
INDEX = ("INVALID_ARGUMENT", "batch_index")
CONFLICT = ("ALREADY_EXISTS", "different content")
OVERLAP = ("ALREADY_EXISTS", "already uploaded")
SHAPE3 = ("INVALID_ARGUMENT", "shape must be 3 positive integers")
TOO_BIG = ("RESOURCE_EXHAUSTED", "exceeds the server's limit")
TRUNCATED = ("INVALID_ARGUMENT", "truncated upload")
OVERSIZE = ("INVALID_ARGUMENT", "oversize upload")
CHECKSUM = ("INVALID_ARGUMENT", "SHA-256 does not match")
NO_CHECKSUM = ("INVALID_ARGUMENT", "32-byte SHA-256")
SEED_LEN = ("INVALID_ARGUMENT", "helper-share seed is 32 bytes")
SHAPE = ("INVALID_ARGUMENT", "share shape")
COLUMNS = ("INVALID_ARGUMENT", "batch columns")
SERVER = ("INVALID_ARGUMENT", "addressed to server index")
NO_HEADER = ("INVALID_ARGUMENT", "starts with a BatchHeader")
REPEATED_HEADER = ("INVALID_ARGUMENT", "only the first message may carry a header")
CLOSED = ("FAILED_PRECONDITION", "closed to uploads")
ANALYST_ONLY = ("PERMISSION_DENIED", "allowed roles: analyst")
PARTY_ONLY = ("PERMISSION_DENIED", "allowed roles: party")


def matches(code: str, details: str, allowed) -> bool:
    return any(code == c and p in details for c, p in allowed)


def record(code: str, details: str, allowed) -> None:
    for c, p in allowed:
        if code == c and p in details:
            SEEN[(c, p)] += 1
            return


def expect_rpc(code_phrase, fn, *args, **kwargs):
    """Call a unary RPC that must fail with (code, phrase); returns the error."""
    code, phrase = code_phrase
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, timeout=TIMEOUT, **kwargs)
    err = info.value
    assert err.code().name == code, (err.code(), err.details())
    assert phrase in (err.details() or ""), err.details()
    SEEN[(code, phrase)] += 1
    return err


# ------------------------------------------------------------------------------ jobs and batches
def copy_header(h, **changes) -> ltm_pb2.BatchHeader:
    out = ltm_pb2.BatchHeader()
    out.CopyFrom(h)
    for name, value in changes.items():
        if name in ("columns", "shape"):
            del getattr(out, name)[:]
            getattr(out, name).extend(value)
        else:
            setattr(out, name, value)
    return out


# ------------------------------------------------------------------------------ targets
class InProcessServer:
    """ServerService over a SqliteStore on a grpc.aio server in a background event-loop thread."""

    def __init__(self, data_dir: Path, certs: Path, server_id: str) -> None:
        self.store = SqliteStore(data_dir)
        self.core = ServerCore(server_id, self.store)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"aio-{server_id}", daemon=True)
        self.thread.start()

        async def start():
            server = make_server()
            ltm_pb2_grpc.add_ServerServicer_to_server(ServerService(self.core), server)
            port = add_secure_port(server, "127.0.0.1:0", certs, server_id)
            await server.start()
            return server, port

        self.server, self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
        self.store.close()


def publish_and_upload(target: Target, world: World) -> None:
    """Create both jobs on the target and upload every party's share for it (the fuzz baseline)."""
    analyst = target.stub("analyst")
    for spec, batches in ((world.spec, world.batches), (world.cols_spec, world.cols_batches)):
        reply = analyst.CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()), timeout=TIMEOUT)
        assert reply.job_digest == spec.digest
        for (party_id, _), per_server in sorted(batches.items()):
            header, payload = encode(per_server[target.index], spec.job_id)
            code, details, receipt = target.upload(stream(header, payload), actor=party_id)
            assert code == "OK", details
            assert receipt.content_digest == per_server[target.index].content_digest()


def _ca_key_dir(certs: Path) -> Path:
    """Where the fixture keeps the CA key: beside the actors' directory, never in it."""
    return certs.parent / f"{certs.name}-ca"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    write_certs(d, ACTORS, ca_dir=_ca_key_dir(d))  # the CA key is kept apart (the intermediate-CA attack uses it)
    foreign = tmp_path_factory.mktemp("foreign")
    write_certs(foreign, ["party-0", "analyst"])  # the same names under another CA
    return d, foreign


@pytest.fixture(scope="module")
def inprocess(tmp_path_factory, certs):
    d, _ = certs
    data_dir = tmp_path_factory.mktemp("inproc") / "s0"
    server = InProcessServer(data_dir, d, "server-0")
    target = Target("in-process", "server-0", f"127.0.0.1:{server.port}", data_dir, d, store=server.store)
    try:
        world = make_world()
        publish_and_upload(target, world)
        yield target, world
    finally:
        target.close()
        server.stop()


@pytest.fixture(scope="module")
def processes(tmp_path_factory, certs):
    d, foreign = certs
    work = tmp_path_factory.mktemp("procs")
    group = ProcessGroup(work, d)
    try:
        servers = group.start_servers(K)
        targets = [Target("processes", s.actor, s.endpoint, work / s.actor, d) for i, s in enumerate(servers)]
        world = make_world([s.endpoint for s in servers])
        for t in targets:
            publish_and_upload(t, world)
        yield {"targets": targets, "world": world, "group": group, "work": work, "certs": d, "foreign": foreign,
               "servers": servers}
        for s in servers:  # the servers survived everything thrown at them
            assert s.proc.poll() is None, s.log_tail()
    finally:
        for t in locals().get("targets", []):
            t.close()
        group.stop_all()


# ------------------------------------------------------------------------------ the fuzzer
@dataclass(frozen=True)
class Base:
    """A stored batch of party-0 on the target: what an identical retry would send."""

    header: ltm_pb2.BatchHeader = field(repr=False)
    payload: bytes = field(repr=False)
    digest: str
    shape: tuple[int, ...]

    @property
    def seed_share(self) -> bool:
        return bool(self.header.seed)


@dataclass(frozen=True)
class FuzzContext:
    bases: tuple[Base, ...]
    job_ids: frozenset[str]
    digest: str
    party_start: int
    party_stop: int
    stored_indices: frozenset[int]
    max_batch_bytes: int = MAX_BATCH_BYTES


def fuzz_context(target: Target, world: World) -> FuzzContext:
    spec = world.spec
    bases = []
    for (party_id, index), per_server in sorted(world.batches.items()):
        if party_id == "party-0":
            b = per_server[target.index]
            header, payload = encode(b, spec.job_id)
            bases.append(Base(header, payload, b.content_digest(), tuple(b.share.shape)))
    assert {b.seed_share for b in bases} == {True, False}  # both kinds of share are fuzzed
    p0 = spec.party("party-0")
    return FuzzContext(tuple(bases), frozenset({spec.job_id, world.cols_spec.job_id, *LATER_JOBS}), spec.digest, p0.start,
                       p0.stop, frozenset(i for (p, i) in world.batches if p == "party-0"))


@dataclass
class Case:
    kinds: list[str]
    base: Base
    messages: list = field(repr=False)
    allowed: set               # (code, phrase) pairs a correct server may answer
    ok_allowed: bool           # every mutation was neutral: the upload is an identical retry


NEUTRAL = {"rechunk"}
U64S = st.one_of(st.integers(0, 300), st.integers(0, U64), st.sampled_from([MAX_INDEX, MAX_INDEX + 1, U64]))


def _shape_outcome(ctx: FuzzContext, base: Base, shape: list[int], payload_len: int) -> tuple:
    if len(shape) != 3 or any(x <= 0 for x in shape):
        return SHAPE3
    if 8 * math.prod(shape) > ctx.max_batch_bytes:
        return TOO_BIG
    # Any other wrong shape is refused from the header, before the server reads the payload.
    return SHAPE


@st.composite
def upload_cases(draw, ctx: FuzzContext) -> Case:
    """A valid (already stored) upload with 1–3 random mutations and what a server may answer.

    A single mutation has one exact expected (code, phrase).  With several, the server must
    name one of the problems introduced (the union of each mutation's possible answers), or —
    if it finds nothing else wrong — the conflict with the stored batch (ALREADY_EXISTS)."""
    base = draw(st.sampled_from(ctx.bases))
    kinds = ["job_id", "job_digest", "party_id", "batch_index", "start", "stop", "columns", "shape",
             "server_index", "seed", "data_sha256", "extend", "rechunk", "repeat_header", "no_header"]
    if not base.seed_share:
        kinds += ["truncate", "flip"]
    chosen = draw(st.lists(st.sampled_from(sorted(kinds)), min_size=1, max_size=3, unique=True))
    h = copy_header(base.header)
    payload = base.payload
    sizes = None
    exact: list[tuple] = []
    loose: set = set()
    neutral = True
    single = len(chosen) == 1
    for kind in chosen:
        if kind == "job_id":
            h.job_id = draw(st.text(max_size=40).filter(lambda s: s not in ctx.job_ids))
            exact.append(UNKNOWN_JOB if id_problem(h.job_id) is None else BAD_JOB_ID)
            loose |= {UNKNOWN_JOB, BAD_JOB_ID}
        elif kind == "job_digest":
            h.job_digest = draw(st.one_of(st.text(max_size=70), st.binary(min_size=32, max_size=32).map(bytes.hex))
                                .filter(lambda s: s != ctx.digest))
            exact.append(DIGEST)
            loose |= {DIGEST}
        elif kind == "party_id":
            h.party_id = draw(st.one_of(st.sampled_from(["party-1", "party-9", "analyst", "", "PARTY-0"]),
                                        st.text(max_size=20)).filter(lambda s: s != "party-0"))
            exact.append(UPLOAD_AS)
            loose |= {UPLOAD_AS}
        elif kind == "batch_index":
            v = draw(U64S.filter(lambda v: v != base.header.batch_index))
            h.batch_index = v
            exact.append(INDEX if v > MAX_INDEX else CONFLICT if v in ctx.stored_indices else OVERLAP)
            loose |= {INDEX, CONFLICT, OVERLAP}
        elif kind in ("start", "stop"):
            v = draw(U64S.filter(lambda v: v != getattr(base.header, kind)))
            setattr(h, kind, v)
            start, stop = (v, base.header.stop) if kind == "start" else (base.header.start, v)
            exact.append(RANGE if not ctx.party_start <= start < stop <= ctx.party_stop else SHAPE)
            loose |= {RANGE, SHAPE}
        elif kind == "columns":
            cols = draw(st.lists(st.one_of(st.integers(0, 6), st.integers(0, 2**32 - 1)), max_size=6)
                        .filter(lambda c: c != list(base.header.columns)))
            h = copy_header(h, columns=cols)
            exact.append(COLUMNS)
            loose |= {COLUMNS}
        elif kind == "shape":
            shape = draw(st.one_of(
                st.lists(st.integers(0, 60), max_size=5),
                st.lists(st.integers(0, U64), max_size=4),
                st.permutations(list(base.shape)),
                st.tuples(st.integers(1, U64), st.integers(1 << 20, U64), st.integers(1, 64)).map(list),
            ).filter(lambda s: list(s) != list(base.shape)))
            h = copy_header(h, shape=list(shape))
            exact.append(_shape_outcome(ctx, base, list(shape), len(payload)))
            loose |= {SHAPE3, TOO_BIG, TRUNCATED, OVERSIZE, CHECKSUM, SHAPE}
        elif kind == "server_index":
            h.server_index = draw(st.integers(0, 2**32 - 1).filter(lambda v: v != base.header.server_index))
            exact.append(SERVER)
            loose |= {SERVER}
        elif kind == "seed":
            seed = draw(st.binary(max_size=64).filter(lambda s: s != base.header.seed))
            h.seed = seed
            if base.seed_share:
                exact.append(NO_CHECKSUM if not seed else CONFLICT if len(seed) == 32 else SEED_LEN)
            else:
                exact.append(OVERSIZE if len(seed) == 32 else SEED_LEN)
            loose |= {SEED_LEN, NO_CHECKSUM, OVERSIZE, TRUNCATED, CHECKSUM, CONFLICT}
        elif kind == "data_sha256":
            sha = draw(st.binary(max_size=40).filter(lambda s: s != base.header.data_sha256))
            h.data_sha256 = sha
            if base.seed_share:
                kind = "neutral"  # a seed share carries no payload: its checksum field is not used
            else:
                exact.append(NO_CHECKSUM if len(sha) != 32 else CHECKSUM)
                loose |= {NO_CHECKSUM, CHECKSUM}
        elif kind in ("truncate", "flip") and not payload:
            kind = "neutral"  # an earlier mutation left nothing to cut or flip
        elif kind == "truncate":
            payload = payload[:draw(st.integers(0, len(payload) - 1))]
            exact.append(TRUNCATED)
            loose |= {TRUNCATED, OVERSIZE, CHECKSUM}
        elif kind == "extend":
            payload = payload + draw(st.binary(min_size=1, max_size=64))
            exact.append(OVERSIZE)
            loose |= {TRUNCATED, OVERSIZE, CHECKSUM}
        elif kind == "flip":
            at = draw(st.integers(0, len(payload) - 1))
            payload = payload[:at] + bytes([payload[at] ^ draw(st.integers(1, 255))]) + payload[at + 1:]
            exact.append(CHECKSUM)
            loose |= {TRUNCATED, OVERSIZE, CHECKSUM}
        elif kind == "rechunk":
            sizes = draw(st.lists(st.integers(0, 700), max_size=8))
        if kind not in NEUTRAL and kind != "neutral":
            neutral = False
    messages = stream(h, payload, sizes)
    if "repeat_header" in chosen:
        again = draw(st.sampled_from([h, base.header]))
        messages.insert(draw(st.integers(1, len(messages))), ltm_pb2.UploadChunk(header=again))
        exact.append(REPEATED_HEADER)
        loose |= {REPEATED_HEADER}
    if "no_header" in chosen:  # exclusive: without a header nothing else can be checked
        variant = draw(st.sampled_from(["drop", "data-first", "empty"]))
        data = [m for m in messages if not m.HasField("header")]
        messages = {"drop": data, "data-first": data + messages[:1], "empty": []}[variant]
        if variant == "data-first" and not data:
            messages = [ltm_pb2.UploadChunk(data=b"")] + messages
        return Case(chosen, base, messages, {NO_HEADER}, False)
    if single:
        allowed = set(exact)
    else:
        allowed = loose | {CONFLICT, OVERLAP}
    return Case(chosen, base, messages, allowed, neutral)


def run_case(target: Target, case: Case, before) -> None:
    CASES[target.kind] += 1
    code, details, receipt = target.upload(case.messages)
    if code == "OK":
        assert case.ok_allowed, f"{case.kinds}: a mutated upload was accepted: {receipt}"
        assert receipt.content_digest == case.base.digest and receipt.batch_index == case.base.header.batch_index
    else:
        assert matches(code, details, case.allowed), \
            f"{case.kinds}: got {code} {details!r}, expected one of {sorted(case.allowed)}"
        record(code, details, case.allowed)
    assert target.snapshot() == before, f"{case.kinds}: the stored state changed"


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                print_blob=True)


@pytest.fixture(scope="module")
def fuzz_inprocess(inprocess):
    target, world = inprocess
    return target, fuzz_context(target, world), target.snapshot()


@pytest.fixture(scope="module")
def fuzz_process(processes):
    target = processes["targets"][0]
    return target, fuzz_context(target, processes["world"]), target.snapshot()


@settings(FUZZ, max_examples=500)
@given(data=st.data())
def test_fuzzed_uploads_in_process(fuzz_inprocess, data):
    target, ctx, before = fuzz_inprocess
    run_case(target, data.draw(upload_cases(ctx)), before)


@pytest.mark.slow
@settings(FUZZ, max_examples=5000)
@given(data=st.data())
def test_many_more_fuzzed_uploads_in_process(fuzz_inprocess, data):
    target, ctx, before = fuzz_inprocess
    run_case(target, data.draw(upload_cases(ctx)), before)


@settings(FUZZ, max_examples=120)
@given(data=st.data())
def test_fuzzed_uploads_against_a_server_process(fuzz_process, data):
    target, ctx, before = fuzz_process
    run_case(target, data.draw(upload_cases(ctx)), before)


# ------------------------------------------------------------------------------ named cases, real processes
def _named_cases(world: World, server_index: int):
    """(name, messages, actor, (code, phrase)) for every bad-upload category, built from valid batches."""
    spec, cspec = world.spec, world.cols_spec
    data_b = next(b[server_index] for (p, i), b in sorted(world.batches.items())
                  if p == "party-0" and b[server_index].share.seed is None)
    seed_b = next(b[server_index] for (p, i), b in sorted(world.batches.items())
                  if p == "party-0" and b[server_index].share.seed is not None)
    h, payload = encode(data_b, spec.job_id)
    sh, _ = encode(seed_b, spec.job_id)
    pieces, count, width = data_b.share.shape
    sha = lambda b: hashlib.sha256(b).digest()  # noqa: E731
    p1 = spec.party("party-1")
    fresh_index = max(i for (p, i) in world.batches) + 10
    conflicting = bytearray(payload)
    conflicting[0] ^= 1
    # a columns-job batch of party-0 and its neighbour's columns
    cb = next(b[server_index] for (p, i), b in sorted(world.cols_batches.items())
              if p == "party-0" and b[server_index].share.seed is None)
    ch, cpayload = encode(cb, cspec.job_id)
    other_cols = list(cspec.party_column_indices(cspec.party("party-1")))
    c_pieces, c_count, c_width = cb.share.shape
    cases = [
        ("unknown job", stream(copy_header(h, job_id="no-such-job"), payload), "party-0", UNKNOWN_JOB),
        ("wrong job digest", stream(copy_header(h, job_digest="0" * 64), payload), "party-0", DIGEST),
        ("digest of another job", stream(copy_header(h, job_digest=cspec.digest), payload), "party-0", DIGEST),
        ("truncated chunk", stream(h, payload[:-8]), "party-0", TRUNCATED),
        ("oversize chunk", stream(h, payload + b"\0" * 8), "party-0", OVERSIZE),
        ("payload not a multiple of 8 (short)", stream(h, payload[:-3]), "party-0", TRUNCATED),
        ("payload not a multiple of 8 (long)", stream(h, payload + b"\1\2\3"), "party-0", OVERSIZE),
        ("shape with more pieces than the job's sketch",
         stream(copy_header(h, shape=[pieces + 1, count, width], data_sha256=sha(payload + bytes(8 * count * width))),
                payload + bytes(8 * count * width)), "party-0", SHAPE),
        ("shape with fewer columns than the job",
         stream(copy_header(h, shape=[pieces, count, width - 1], data_sha256=sha(payload[:8 * pieces * count * (width - 1)])),
                payload[:8 * pieces * count * (width - 1)]), "party-0", SHAPE),
        ("shape transposed (same byte count)", stream(copy_header(h, shape=[pieces, width, count]), payload),
         "party-0", SHAPE),
        ("shape with 2 dimensions", stream(copy_header(h, shape=[pieces * count, width]), payload), "party-0", SHAPE3),
        ("shape with a zero", stream(copy_header(h, shape=[pieces, 0, width]), payload), "party-0", SHAPE3),
        ("giant declared shape", stream(copy_header(h, shape=[pieces, 1 << 40, width]), b""), "party-0", TOO_BIG),
        ("declared shape whose product wraps int64",
         stream(copy_header(h, shape=[1 << 33, 1 << 31, 1], data_sha256=sha(b"")), b""), "party-0", TOO_BIG),
        ("giant declared seed-share shape", stream(copy_header(sh, shape=[U64, U64, U64]), b""), "party-0", TOO_BIG),
        ("duplicate batch index, different content",
         stream(copy_header(h, data_sha256=sha(bytes(conflicting))), bytes(conflicting)), "party-0", CONFLICT),
        ("duplicate batch index, different seed", stream(copy_header(sh, seed=bytes(32)), b""), "party-0", CONFLICT),
        ("same clients under a new batch index", stream(copy_header(h, batch_index=fresh_index), payload), "party-0",
         OVERLAP),
        ("batch index beyond 2^63", stream(copy_header(h, batch_index=MAX_INDEX + 1), payload), "party-0", INDEX),
        ("clients of another party", stream(copy_header(h, start=p1.start, stop=p1.start + count), payload),
         "party-0", RANGE),
        ("clients beyond n", stream(copy_header(h, start=spec.n - 5, stop=spec.n + count - 5), payload), "party-0",
         RANGE),
        ("empty client range", stream(copy_header(h, stop=h.start), payload), "party-0", RANGE),
        ("uploading as another party", stream(copy_header(h, party_id="party-1"), payload), "party-0", UPLOAD_AS),
        ("a party that is not in the job", stream(copy_header(h, party_id="party-9"), payload), "party-9",
         NOT_A_PARTY),
        ("a share addressed to another server", stream(copy_header(h, server_index=1 - server_index), payload),
         "party-0", SERVER),
        ("columns of the wrong length", stream(copy_header(h, columns=list(h.columns)[:-1]), payload), "party-0",
         COLUMNS),
        ("seed of 31 bytes", stream(copy_header(sh, seed=bytes(31)), b""), "party-0", SEED_LEN),
        ("seed of 33 bytes", stream(copy_header(sh, seed=bytes(33)), b""), "party-0", SEED_LEN),
        ("seed share followed by data", stream(sh, b"\0" * 8), "party-0", OVERSIZE),
        ("checksum mismatch", stream(copy_header(h, data_sha256=sha(b"something else")), payload), "party-0",
         CHECKSUM),
        ("checksum missing", stream(copy_header(h, data_sha256=b""), payload), "party-0", NO_CHECKSUM),
        ("checksum of the wrong length", stream(copy_header(h, data_sha256=b"\0" * 16), payload), "party-0",
         NO_CHECKSUM),
        ("header missing (data first)", stream(None, payload), "party-0", NO_HEADER),
        ("empty stream", [], "party-0", NO_HEADER),
        ("header repeated", stream(h, payload)[:1] + stream(h, payload), "party-0", REPEATED_HEADER),
        ("header repeated after the data", stream(h, payload) + stream(h, b""), "party-0", REPEATED_HEADER),
        ("columns job: the other party's columns",
         stream(copy_header(ch, columns=other_cols), cpayload), "party-0", COLUMNS),
        ("columns job: shape with the other block's width",
         stream(copy_header(ch, shape=[c_pieces, c_count, c_width + 1],
                            data_sha256=sha(cpayload + bytes(8 * c_pieces * c_count))),
                cpayload + bytes(8 * c_pieces * c_count)), "party-0", SHAPE),
        ("the analyst uploading", stream(h, payload), "analyst", PARTY_ONLY),
        ("the operator uploading", stream(h, payload), "operator", PARTY_ONLY),
        ("another server uploading", stream(h, payload), f"server-{1 - server_index}", PARTY_ONLY),
    ]
    assert c_width + 1 <= cspec.width
    return cases


NAMED = [c[0] for c in _named_cases(make_world(), 0)]


@pytest.mark.parametrize("name", NAMED)
def test_named_bad_uploads_against_server_processes(processes, name):
    for target in processes["targets"]:
        cases = {c[0]: c[1:] for c in _named_cases(processes["world"], target.index)}
        messages, actor, (code, phrase) = cases[name]
        before = target.snapshot()
        CASES[target.kind] += 1
        got, details, receipt = target.upload(messages, actor=actor)
        assert (got, phrase in details) == (code, True), f"{name} on {target.server_id}: {got} {details!r}"
        SEEN[(code, phrase)] += 1
        assert target.snapshot() == before, f"{name}: the stored state changed on {target.server_id}"


def test_identical_retry_gets_the_same_receipt_from_every_process(processes):
    world = processes["world"]
    for target in processes["targets"]:
        before = target.snapshot()
        for (party_id, index), per_server in sorted(world.batches.items()):
            batch = per_server[target.index]
            header, payload = encode(batch, world.spec.job_id)
            # cut differently from the first upload: chunking does not change what was sent
            code, details, receipt = target.upload(stream(header, payload, [7] * 5), actor=party_id)
            CASES[target.kind] += 1
            assert code == "OK", details
            assert (receipt.content_digest, receipt.batch_index, receipt.clients) == \
                (batch.content_digest(), index, batch.count)
        assert target.snapshot() == before


# ------------------------------------------------------------------------------ authentication and roles
def test_unauthenticated_callers_fail_the_handshake(processes):
    d, foreign = processes["certs"], processes["foreign"]
    target = processes["targets"][0]
    header, payload = encode(processes["world"].batches[("party-0", 0)][0], "fuzz")
    before = target.snapshot()
    override = [("grpc.ssl_target_name_override", target.server_id)]
    no_client_cert = grpc.secure_channel(
        target.endpoint, grpc.ssl_channel_credentials(root_certificates=(d / "ca.pem").read_bytes()), options=override)
    plaintext = grpc.insecure_channel(target.endpoint)
    other_ca = make_sync_channel(target.endpoint, foreign, "party-0", options=override)
    try:
        for channel in (no_client_cert, plaintext, other_ca):
            stub = ltm_pb2_grpc.ServerStub(channel)
            for call in (lambda: stub.Upload(iter(stream(header, payload)), timeout=5),
                         lambda: stub.GetJob(ltm_pb2.GetJobRequest(job_id="fuzz"), timeout=5),
                         lambda: stub.CreateJob(ltm_pb2.CreateJobRequest(spec_json=b"{}"), timeout=5)):
                CASES[target.kind] += 1
                with pytest.raises(grpc.RpcError) as err:
                    call()
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value
                SEEN[("UNAVAILABLE", "(TLS handshake)")] += 1
    finally:
        for channel in (no_client_cert, plaintext, other_ca):
            channel.close()
    assert target.snapshot() == before
    # ... and the server still serves authenticated callers
    assert target.stub("party-0").GetJob(ltm_pb2.GetJobRequest(job_id="fuzz"), timeout=5).job_digest


def test_wrong_role_callers_are_refused(processes):
    world = processes["world"]
    spec = world.spec
    everyone = ClientSet.full(spec.n).to_bytes()
    for target in processes["targets"]:
        before = target.snapshot()
        for actor in ("party-0", "party-9", "operator", f"server-{1 - target.index}"):
            stub = target.stub(actor)
            CASES[target.kind] += 3
            expect_rpc(ANALYST_ONLY, stub.CreateJob,
                       ltm_pb2.CreateJobRequest(spec_json=replace(spec, job_id="rogue").canonical_json()))
            expect_rpc(ANALYST_ONLY, stub.Close, ltm_pb2.CloseRequest(job_id=spec.job_id, job_digest=spec.digest))
            err = expect_rpc(ANALYST_ONLY, lambda req, timeout: list(stub.Release(req, timeout=timeout)),
                             ltm_pb2.ReleaseRequest(job_id=spec.job_id, job_digest=spec.digest,
                                                    participant_ranges=everyone))
            assert actor in err.details()
        assert target.snapshot() == before
        assert target.stub("analyst").Status(ltm_pb2.StatusRequest(job_id=spec.job_id), timeout=5).closed is False


def pairs(ranges) -> bytes:
    """Client ranges as the wire's little-endian uint64 (start, stop) pairs, whatever they are."""
    return np.array(ranges, dtype="<u8").tobytes()


def test_bad_requests_to_the_other_rpcs(processes):
    world = processes["world"]
    spec = world.spec
    everyone = ClientSet.full(spec.n).to_bytes()
    bad_spec = replace(spec, job_id="bad", privacy=replace(spec.privacy, epsilon=-1.0))
    other_servers = replace(spec, job_id="elsewhere",
                            servers=tuple(replace(s, server_id=f"server-{i + 7}") for i, s in enumerate(spec.servers)))
    changed = replace(spec, privacy=replace(spec.privacy, epsilon=2.0))  # same id "fuzz", another spec
    for target in processes["targets"]:
        analyst, party = target.stub("analyst"), target.stub("party-0")
        before = target.snapshot()
        table = [
            (("INVALID_ARGUMENT", "not valid JSON"), analyst.CreateJob, ltm_pb2.CreateJobRequest(spec_json=b"{nope")),
            (("INVALID_ARGUMENT", "must be a JSON object"), analyst.CreateJob, ltm_pb2.CreateJobRequest(spec_json=b"[]")),
            (("INVALID_ARGUMENT", "not valid JSON"), analyst.CreateJob, ltm_pb2.CreateJobRequest(spec_json=b"\xff\xfe")),
            (("INVALID_ARGUMENT", "missing field"), analyst.CreateJob, ltm_pb2.CreateJobRequest(spec_json=b"{}")),
            (("INVALID_ARGUMENT", "epsilon must be > 0"), analyst.CreateJob,
             ltm_pb2.CreateJobRequest(spec_json=bad_spec.canonical_json())),
            (("FAILED_PRECONDITION", "is not one of the job's servers"), analyst.CreateJob,
             ltm_pb2.CreateJobRequest(spec_json=other_servers.canonical_json())),
            (("ALREADY_EXISTS", "exists with a different spec"), analyst.CreateJob,
             ltm_pb2.CreateJobRequest(spec_json=changed.canonical_json())),
            (("NOT_FOUND", "unknown job"), party.GetJob, ltm_pb2.GetJobRequest(job_id="nope")),
            (("INVALID_ARGUMENT", "not a valid id"), party.Status, ltm_pb2.StatusRequest(job_id="")),
            (("NOT_FOUND", "unknown job"), analyst.Close, ltm_pb2.CloseRequest(job_id="nope", job_digest=spec.digest)),
            (("FAILED_PRECONDITION", "different job digest"), analyst.Close,
             ltm_pb2.CloseRequest(job_id=spec.job_id, job_digest="0" * 64)),
            (("FAILED_PRECONDITION", "must be closed before it is released"),
             lambda r, timeout: list(analyst.Release(r, timeout=timeout)),
             ltm_pb2.ReleaseRequest(job_id=spec.job_id, job_digest=spec.digest, participant_ranges=everyone)),
            (("NOT_FOUND", "unknown job"), lambda r, timeout: list(analyst.Release(r, timeout=timeout)),
             ltm_pb2.ReleaseRequest(job_id="nope", job_digest=spec.digest, participant_ranges=everyone)),
        ]
        release = lambda r, timeout: list(analyst.Release(r, timeout=timeout))  # noqa: E731
        for expected, ranges in (
                (("INVALID_ARGUMENT", "participant_ranges: client ranges are 16-byte"), pairs([(0, spec.n)])[:-1]),
                (("INVALID_ARGUMENT", "participant_ranges: client range ends past n"), pairs([(0, spec.n + 1)])),
                (("INVALID_ARGUMENT", "participant_ranges: client range ends past n"), pairs([(2 ** 64 - 1, 3)])),
                (("INVALID_ARGUMENT", "participant_ranges: every client range needs start < stop"), pairs([(5, 5)])),
                (("INVALID_ARGUMENT", "participant_ranges: client ranges must be sorted and separated"),
                 pairs([(0, 10), (10, 20)])),
                (("INVALID_ARGUMENT", "participant_ranges: client ranges must be sorted and separated"),
                 pairs([(20, 30), (0, 10)])),
                (("RESOURCE_EXHAUSTED", "(max_participant_ranges)"),
                 bytes(16 * (ServerLimits().max_participant_ranges + 1))),
                (("FAILED_PRECONDITION", "must be closed before it is released"), pairs([(0, 10), (20, spec.n)])),
                (("FAILED_PRECONDITION", "must be closed before it is released"), b"")):  # the empty set
            table.append((expected, release, ltm_pb2.ReleaseRequest(job_id=spec.job_id, job_digest=spec.digest,
                                                                    participant_ranges=ranges)))
        for expected, fn, request in table:
            CASES[target.kind] += 1
            expect_rpc(expected, fn, request)
        assert target.snapshot() == before


def test_uploads_after_close(processes):
    """After close: a new batch is refused; an identical retry of a stored batch (its ack may have
    been lost) gets the same receipt; a conflicting one is still a conflict."""
    world = processes["world"]
    spec = replace(world.spec, job_id="after-close")
    randomness = Randomness.seeded_insecure("after-close")
    per_batch = list(make_batches(spec, "party-0", world.tables["party-0"], randomness, batch_clients=BATCH))
    for target in processes["targets"]:
        analyst = target.stub("analyst")
        analyst.CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()), timeout=TIMEOUT)
        first = per_batch[0][target.index]
        header, payload = encode(first, spec.job_id)
        code, details, receipt = target.upload(stream(header, payload))
        assert code == "OK", details
        analyst.Close(ltm_pb2.CloseRequest(job_id=spec.job_id, job_digest=spec.digest), timeout=TIMEOUT)
        before = target.snapshot()
        nh, npayload = encode(per_batch[1][target.index], spec.job_id)
        CASES[target.kind] += 3
        code, details, _ = target.upload(stream(nh, npayload))
        assert (code, CLOSED[1] in details) == (CLOSED[0], True), details
        SEEN[CLOSED] += 1
        code, details, again = target.upload(stream(header, payload, [5] * 3))
        assert code == "OK", details
        assert again.content_digest == receipt.content_digest == first.content_digest()
        if first.share.seed is not None:
            bad_h, bad_payload = copy_header(header, seed=b"\1" * 32), payload
        else:
            bad_payload = bytes([payload[0] ^ 1]) + payload[1:]
            bad_h = copy_header(header, data_sha256=hashlib.sha256(bad_payload).digest())
        code, details, _ = target.upload(stream(bad_h, bad_payload))
        assert (code, CONFLICT[1] in details) == (CONFLICT[0], True), details
        SEEN[CONFLICT] += 1
        assert target.snapshot(("after-close",)) == before


# ------------------------------------------------------------------------------ the party side
def _bad_tables(spec, tables):
    t = tables["party-0"]
    rows = len(next(iter(t.values())))
    with_nan = {**t, "x1": np.where(np.arange(rows) == 7, np.nan, t["x1"])}
    with_inf = {**t, "y": np.where(np.arange(rows) == 3, -np.inf, t["y"])}
    return [
        ("NaN", with_nan, "NaN/infinite values (first at row 7)"),
        ("inf", with_inf, "NaN/infinite values (first at row 3)"),
        ("strings", {**t, "x0": np.array(["abc"] * rows)}, "'x0' is not numeric"),
        ("objects", {**t, "x0": np.array([{}] * rows, dtype=object)}, "'x0' is not numeric"),
        ("complex", {**t, "x2": t["x2"] + 1j}, "complex"),
        ("missing column", {k: v for k, v in t.items() if k != "x2"}, "'x2' required by the job is missing"),
        ("renamed column", {**{k: v for k, v in t.items() if k != "y"}, "label": t["y"]}, "'y' required"),
        ("too few rows", {k: v[:-1] for k, v in t.items()}, f"has {rows - 1} values but party 'party-0' holds {rows}"),
        ("too many rows", {k: np.r_[v, v[:1]] for k, v in t.items()}, f"holds {rows} rows"),
        ("2-D column", {**t, "x0": np.ones((rows, 2))}, "1-D array"),
        ("scalar column", {**t, "x0": np.float64(1.0)}, "1-D array"),
    ]


def test_party_refuses_bad_data_before_producing_any_share():
    world = make_world()
    spec = world.spec
    for name, table, phrase in _bad_tables(spec, world.tables):
        CASES["party core"] += 1
        with pytest.raises(PartyDataError) as err:
            client_vectors(spec, spec.party("party-0"), table)
        assert phrase in str(err.value), (name, str(err.value))
        # make_batches raises before yielding its first batch: nothing could be sent
        with pytest.raises(PartyDataError):
            next(make_batches(spec, "party-0", table, Randomness.seeded_insecure(1), batch_clients=BATCH))


CSV_VARIANTS = ["nan", "inf", "empty-cell", "text", "stray-text", "missing-column", "too-few-rows", "ragged-row", "empty-file",
                "non-utf8"]

#: what the party's log must say for each bad CSV (the column, and what is wrong with it)
CSV_MESSAGES = {
    "nan": "'x1' has 1 NaN/infinite values (first at row 5)",
    "inf": "'x0' has 1 NaN/infinite values (first at row 2)",
    "empty-cell": "'x2' has 1 NaN/infinite values (first at row 9)",
    "text": "data row 1 (line 2), column 'x1': 'high' is not a number",
    "stray-text": "data row 7 (line 8), column 'x1': '12a' is not a number",
    "missing-column": "'y' required by the job is missing",
    "too-few-rows": "has 90 values but party 'party-0' holds 100 rows",
    "ragged-row": "data row 4 has",
    "empty-file": "empty file",
    "non-utf8": "not UTF-8 text: byte 0xff at offset",  # a raw UnicodeDecodeError and exit 2 at 59676f2
}


def _write_csv(path: Path, table: dict, variant: str) -> None:
    names = list(table)
    rows = [[repr(float(table[c][i])) for c in names] for i in range(len(table[names[0]]))]
    if variant == "nan":
        rows[5][1] = "nan"
    elif variant == "inf":
        rows[2][0] = "inf"
    elif variant == "empty-cell":
        rows[9][2] = ""
    elif variant == "text":
        rows = [[("high" if j == 1 else v) for j, v in enumerate(r)] for r in rows]
    elif variant == "stray-text":
        rows[6][1] = "12a"
    elif variant == "missing-column":
        names, rows = names[:-1], [r[:-1] for r in rows]
    elif variant == "too-few-rows":
        rows = rows[:-10]
    elif variant == "ragged-row":
        rows[3] = rows[3][:-1]
    elif variant == "empty-file":
        path.write_text("")
        return
    elif variant == "non-utf8":  # a Latin-1 'ÿ' in a cell
        rows[3][0] = "\xff" + rows[3][0]
        path.write_bytes(("\n".join([",".join(names)] + [",".join(r) for r in rows]) + "\n").encode("latin-1"))
        return
    path.write_text("\n".join([",".join(names)] + [",".join(r) for r in rows]) + "\n")


@pytest.fixture(scope="module")
def bad_csv_runs(processes):
    """`ltm party` once per bad CSV, all at once, against the real servers, for a fresh job."""
    world, targets = processes["world"], processes["targets"]
    spec = replace(world.spec, job_id="csv", reproduction=False)  # the party draws private randomness
    for t in targets:
        t.stub("analyst").CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()), timeout=TIMEOUT)
    before = [t.snapshot(("csv",)) for t in targets]
    runs = {}
    for variant in CSV_VARIANTS:
        work = processes["work"] / f"csv-{variant}"
        work.mkdir()
        data = work / "party-0.csv"
        _write_csv(data, world.tables["party-0"], variant)
        group = ProcessGroup(work, processes["certs"])
        ap = group.start_task("party", "party-0", [
            "party", "--id", "party-0", "--job", "csv", "--data", str(data), "--wait", "20", "--no-progress",
            "--servers", ",".join(t.endpoint for t in targets), "--server-ids", ",".join(t.server_id for t in targets)])
        runs[variant] = (group, ap)
    out = party_runs.collect(runs)
    CASES["party process"] += len(out)
    return out, before, spec


@pytest.mark.parametrize("variant", CSV_VARIANTS)
def test_ltm_party_with_bad_csv_exits_4_and_sends_nothing(processes, bad_csv_runs, variant):
    out, before, spec = bad_csv_runs
    targets = processes["targets"]
    for t, snap in zip(targets, before):
        assert t.snapshot(("csv",)) == snap  # nothing from any bad CSV reached any server
        status = t.stub("analyst").Status(ltm_pb2.StatusRequest(job_id="csv"), timeout=5)
        assert status.clients_held == 0
    code, log = out[variant]
    assert code == 4, f"exit {code}; log:\n{log[-2000:]}"
    assert "bad data" in log and CSV_MESSAGES[variant] in log, log[-2000:]


# ------------------------------------------------------------------------------ the core, in-process runtime
@pytest.mark.parametrize("index", [-1, MAX_INDEX + 1, U64])
def test_core_refuses_batch_indices_a_store_cannot_hold(tmp_path, index):
    """The in-process runtime hands batches to the core directly (no protobuf uint64 bound):
    the core refuses indices outside [0, 2^63) itself, on either store, and stores nothing."""
    from ltm.errors import ProtocolError
    from ltm.server.store import MemoryStore

    world = make_world()
    batch = world.batches[("party-0", 0)][0]
    for store in (MemoryStore(), SqliteStore(tmp_path / f"s{index}")):
        core = ServerCore("server-0", store)
        core.create_job(world.spec, caller_role="analyst")
        CASES["core"] += 1
        with pytest.raises(ProtocolError) as err:
            core.accept(replace(batch, batch_index=index), "fuzz", caller_role="party", caller_id="party-0")
        assert (err.value.code, "batch_index" in err.value.message) == ("INVALID_ARGUMENT", True)
        assert not store.coverage("fuzz").any() and list(store.batches("fuzz")) == []
        if isinstance(store, SqliteStore):
            store.close()


# ------------------------------------------------------------------------------ malformed bytes and hostile specs
def _raw(target: Target, method: str, actor: str = "analyst"):
    """A unary RPC that sends raw bytes as the request (no client-side protobuf encoding)."""
    target.stub(actor)  # opens the channel
    channel = target._channels[(actor, None)]
    return channel.unary_unary(f"/ltm.v1.Server/{method}", request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)


def _spec_dict(spec) -> dict:
    import json
    return json.loads(spec.canonical_json())


def _spec_bytes(d: dict) -> bytes:
    import json
    return json.dumps(d).encode()


def test_malformed_bytes_and_hostile_specs_get_precise_statuses(processes):
    """Every malformed input the attack runs found answered UNKNOWN now has a precise status, with a
    bounded message; the server's stored state is untouched."""
    world = processes["world"]
    d = _spec_dict(world.spec)
    unknown_keys = {**d, **{f"k{i}": 0 for i in range(200_000)}}
    surrogate = world.spec.canonical_json().replace(b'"job_id":"fuzz"', b'"job_id":"f\\ud800z"')
    assert surrogate != world.spec.canonical_json()
    bad_utf8_id = b"\x0a\x03\xed\xa0\x80"           # GetJobRequest.job_id = a UTF-8-encoded lone surrogate
    invalid_utf8 = b"\x0a\x02\xff\xfe"               # GetJobRequest.job_id = invalid UTF-8
    oversize_prefix = b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 8  # job_id claims 4 GiB, 8 bytes follow
    garbage = b"\xff\xff\xff\xff"
    cases = [
        (("INVALID_ARGUMENT", "lone UTF-16 surrogate"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=surrogate)),
        (("INVALID_ARGUMENT", "64-bit integer range"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=_spec_bytes({**d, "n": 2**64 + 5}))),
        (("RESOURCE_EXHAUSTED", "n = 1099511627776 exceeds"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=_spec_bytes({**d, "n": 2**40}))),
        (("INVALID_ARGUMENT", "sketch.m = 1000000000 exceeds the number of clients"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=_spec_bytes({**d, "sketch": {**d["sketch"], "m": 10**9}}))),
        (("RESOURCE_EXHAUSTED", "sketch.m = "), "CreateJob",  # possible with n ≥ m, but over the limit
         ltm_pb2.CreateJobRequest(spec_json=_spec_bytes({**d, "n": 1 << 22, "sketch": {**d["sketch"], "m": 1 << 21}}))),
        (("INVALID_ARGUMENT", "nested too deeply"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=b"[" * 100_000 + b"]" * 100_000)),
        (("INVALID_ARGUMENT", "not a finite number"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=_spec_bytes({**d, "clip_bound": 12345.5}).replace(b"12345.5", b"1e999"))),
        (("INVALID_ARGUMENT", "Infinity is not a JSON number"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=_spec_bytes({**d, "clip_bound": float("inf")}))),
        (("INVALID_ARGUMENT", "unknown fields"), "CreateJob",
         ltm_pb2.CreateJobRequest(spec_json=_spec_bytes(unknown_keys))),
        (("INVALID_ARGUMENT", "invalid UTF-8"), "CreateJob", ltm_pb2.CreateJobRequest(spec_json=b'{"a": "\xc3\x28"}')),
    ]
    raw_cases = [
        (("INVALID_ARGUMENT", "undecodable GetJobRequest"), "GetJob", bad_utf8_id),
        (("INVALID_ARGUMENT", "undecodable GetJobRequest"), "GetJob", invalid_utf8),
        (("INVALID_ARGUMENT", "undecodable GetJobRequest"), "GetJob", oversize_prefix),
        (("INVALID_ARGUMENT", "undecodable StatusRequest"), "Status", garbage),
        (("INVALID_ARGUMENT", "undecodable CreateJobRequest"), "CreateJob", garbage),
        (("INVALID_ARGUMENT", "undecodable CloseRequest"), "Close", oversize_prefix),
    ]
    for target in processes["targets"]:
        before = target.snapshot()
        analyst = target.stub("analyst")
        for expected, method, request in cases:
            CASES[target.kind] += 1
            err = expect_rpc(expected, getattr(analyst, method), request)
            assert len(err.details()) <= 1000
        for expected, method, payload in raw_cases:
            CASES[target.kind] += 1
            expect_rpc(expected, _raw(target, method), payload)
        # an undecodable chunk inside an upload stream
        channel = target._channels[("party-0", None)] if ("party-0", None) in target._channels else None
        if channel is None:
            target.stub("party-0")
            channel = target._channels[("party-0", None)]
        upload = channel.stream_unary("/ltm.v1.Server/Upload", request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        header, payload = encode(world.batches[("party-0", 0)][target.index], "fuzz")
        CASES[target.kind] += 1
        expect_rpc(("INVALID_ARGUMENT", "undecodable UploadChunk"), upload,
                   iter([ltm_pb2.UploadChunk(header=header).SerializeToString(), garbage]))
        assert target.snapshot() == before


def test_huge_specs_are_refused_fast_while_getjob_keeps_answering(processes):
    """A D = 10⁶ spec (61 MB of JSON, or 17 MB compact: refused by the server's gRPC message bound
    from its length prefix; a 5 MB one is refused by max_spec_bytes unparsed) and an n = 2⁴⁰ spec are refused within a second with a
    precise status, while another client — a separate process, so it shares no GIL with the
    sender — keeps calling GetJob.  The latencies are printed; the asserted bounds are generous
    because the CI machine's CPU is shared (on a 2-core machine at load ~16 the worst GetJob
    was 38–173 ms, against 31 ms with no spec being sent)."""
    import json
    import subprocess
    import sys
    import time
    world = processes["world"]
    target = processes["targets"][0]
    d = _spec_dict(world.spec)
    columns = [{"name": f"c{i}", "role": "feature", "center": 0.0, "scale": 1.0} for i in range(10**6)]
    wide = json.dumps(dict(d, job_id="wide", columns=columns), separators=(",", ":")).encode()  # ~61 MB
    compact = json.dumps(dict(d, job_id="wide", columns=[{"name": c["name"]} for c in columns]),
                         separators=(",", ":")).encode()  # ~17 MB
    five_mb = json.dumps(dict(d, job_id="wide", columns=[{"name": c["name"]} for c in columns[:300_000]]),
                         separators=(",", ":")).encode()  # D = 3·10⁵, ~5 MB: over max_spec_bytes, under gRPC's bound
    del columns
    big_n = _spec_bytes(dict(d, job_id="big-n", n=2**40))
    before = target.snapshot()
    poller = subprocess.Popen([sys.executable, "-c", POLLER, target.endpoint, str(processes["certs"]), "8"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert poller.stdout.readline().strip() == "go"
        time.sleep(0.5)
        took = {}
        analyst = target.stub("analyst")
        for name, payload, expected in (("D=10^6 (61 MB)", wide, ("RESOURCE_EXHAUSTED", "larger than max")),
                                        ("D=10^6 (17 MB)", compact, ("RESOURCE_EXHAUSTED", "larger than max")),
                                        ("D=3*10^5 (5 MB)", five_mb, ("RESOURCE_EXHAUSTED", "max_spec_bytes")),
                                        ("n=2^40", big_n, ("RESOURCE_EXHAUSTED", "exceeds this server's limit"))):
            t = time.perf_counter()
            expect_rpc(expected, analyst.CreateJob, ltm_pb2.CreateJobRequest(spec_json=payload))
            took[name] = round(time.perf_counter() - t, 3)
            CASES[target.kind] += 1
        median, worst, count = (float(x) for x in poller.stdout.readline().split())
    finally:
        poller.wait(30)
        poller.stdout.close()
    print(f"\nhuge specs: refused in {took} s; GetJob from another process meanwhile: {count:.0f} calls, "
          f"median {median * 1e3:.1f} ms, max {worst * 1e3:.1f} ms")
    assert max(took.values()) < 5.0, took  # < 1 s on a quiet machine; generous for a shared CI CPU
    assert worst < 1.0, worst              # < 100 ms here at load ~17; generous for CI
    assert target.snapshot() == before


POLLER = """
import sys, time
from pathlib import Path
from ltm.v1 import ltm_pb2, ltm_pb2_grpc
from ltm.transport.tls import make_sync_channel
endpoint, certs, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
stub = ltm_pb2_grpc.ServerStub(make_sync_channel(endpoint, certs, "party-1",
                                                 options=[("grpc.ssl_target_name_override", "server-0")]))
stub.GetJob(ltm_pb2.GetJobRequest(job_id="fuzz"), timeout=30)
print("go", flush=True)
lat = []
end = time.time() + seconds
while time.time() < end:
    t = time.perf_counter()
    stub.GetJob(ltm_pb2.GetJobRequest(job_id="fuzz"), timeout=30)
    lat.append(time.perf_counter() - t)
    time.sleep(0.01)
lat.sort()
print(lat[len(lat) // 2], lat[-1], len(lat), flush=True)
"""


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_slow_streams_declaring_122_mib_do_not_grow_memory_and_hit_the_idle_deadline(tmp_path, certs):
    """8 upload streams (4 per party, the default per-party cap; a 5th is refused) each declare a
    122 MiB batch and then trickle a byte every 5 s: the server's RSS stays within 100 MB of idle (memory follows the
    bytes received, not the header), and every stream is closed by the idle deadline (3 s here,
    via --limit) — while streaming, or while waiting for the upload budget.  Timing-based by nature: the margins are wide (5 s gaps vs a 3 s deadline)."""
    import json
    import time
    d, _ = certs
    group = ProcessGroup(tmp_path, d)
    try:
        (server,) = group.start_servers(1, ["--limit", "stream_idle_seconds=3"])
        target = Target("processes", "server-0", server.endpoint, tmp_path / "server-0", d)
        randomness = Randomness.seeded_insecure("slow-streams")
        pieces, width = 2, 5
        clients = (122 << 20) // (8 * pieces * width)
        table = synthetic_ridge(2 * clients, width - 1, randomness)
        spec, _ = build_job(table, job_id="wide-batches", randomness=randomness, parties=2, k=K, m=64, s=pieces,
                            share_mode="full", endpoints=[server.endpoint, "127.0.0.1:9"])
        assert spec.width == width
        target.stub("analyst").CreateJob(ltm_pb2.CreateJobRequest(spec_json=spec.canonical_json()), timeout=60)
        time.sleep(1.0)
        idle = _rss_bytes(server.pid)
        outcomes: list = []

        def slow(party):
            p = spec.party(party)
            header = ltm_pb2.BatchHeader(job_id=spec.job_id, job_digest=spec.digest, party_id=party, batch_index=0,
                                         start=p.start, stop=p.start + clients, columns=list(range(width)),
                                         shape=[pieces, clients, width], server_index=0, data_sha256=b"\0" * 32,
                                         randomness_mode="csprng")
            assert 8 * pieces * clients * width > 121 << 20

            def messages():
                yield ltm_pb2.UploadChunk(header=header)
                for _ in range(6):
                    yield ltm_pb2.UploadChunk(data=b"\1")
                    time.sleep(5.0)
            outcomes.append(target.upload(messages(), actor=party)[:2])

        threads = [threading.Thread(target=slow, args=(f"party-{i % 2}",)) for i in range(8)]
        start = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(1.0)  # all 8 open (4 per party, the default cap): a 5th of party-0 is refused at once
        header = ltm_pb2.BatchHeader(job_id=spec.job_id, job_digest=spec.digest, party_id="party-0",
                                     randomness_mode="csprng")
        fifth = target.upload([ltm_pb2.UploadChunk(header=header)], actor="party-0")[:2]
        CASES["processes"] += 1
        assert fifth[0] == "RESOURCE_EXHAUSTED" and "max_streams_per_party" in fifth[1], fifth
        SEEN[("RESOURCE_EXHAUSTED", "max_streams_per_party")] += 1
        peak = idle
        while any(t.is_alive() for t in threads) and time.monotonic() - start < 60:
            peak = max(peak, _rss_bytes(server.pid))
            time.sleep(0.1)
        for t in threads:
            t.join(30)
        elapsed = time.monotonic() - start
        after = _rss_bytes(server.pid)
        print(f"\nslow streams: idle RSS {idle / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB, after "
              f"{after / 2**20:.1f} MiB; 8 streams ended after {elapsed:.1f} s: {json.dumps(outcomes)[:300]}")
        CASES["processes"] += 8
        assert len(outcomes) == 8
        # The first stream is admitted alone (its batch exceeds the 16 MiB upload budget); the others
        # wait for the budget and, within the same 3 s, get UNAVAILABLE — or are admitted when a
        # stream ends and then hit the idle deadline themselves.
        for code, details in outcomes:
            if code == "UNAVAILABLE":
                assert "max_inflight_bytes" in details, details
                SEEN[("UNAVAILABLE", "max_inflight_bytes")] += 1
            else:
                assert code == "DEADLINE_EXCEEDED" and "no data for 3 s" in details, (code, details)
                SEEN[("DEADLINE_EXCEEDED", "no data for")] += 1
        assert sum(code == "DEADLINE_EXCEEDED" for code, _ in outcomes) >= 1, outcomes
        assert elapsed < 30
        assert peak - idle < 100 * 2**20 and after - idle < 100 * 2**20, (idle, peak, after)
        assert target.stub("analyst").Status(ltm_pb2.StatusRequest(job_id=spec.job_id), timeout=10).batches == 0
        target.close()
    finally:
        group.stop_all()


def _intermediate_cert_dir(certs: Path, out: Path, actor: str) -> None:
    """A cert dir for ``actor`` whose leaf is issued by a sub-CA that the real CA key signed (the CA
    says path length 0, so no such chain is valid)."""
    import datetime as dt
    import shutil

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    from ltm.transport.certs import _new_key, issue_leaf

    ca_key = serialization.load_pem_private_key((_ca_key_dir(certs) / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    sub_key = _new_key()
    now = dt.datetime.now(dt.timezone.utc)
    sub = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sub CA")]))
           .issuer_name(ca_cert.subject).public_key(sub_key.public_key()).serial_number(x509.random_serial_number())
           .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
           .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
           .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                        data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                        crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
           .add_extension(x509.SubjectKeyIdentifier.from_public_key(sub_key.public_key()), critical=False)
           .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
               ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value), critical=False)
           .sign(ca_key, hashes.SHA256()))
    key, leaf = issue_leaf(sub_key, sub, actor)
    out.mkdir()
    shutil.copy(certs / "ca.pem", out / "ca.pem")
    pem = (lambda c: c.public_bytes(serialization.Encoding.PEM))
    (out / f"{actor}.pem").write_bytes(pem(leaf) + pem(sub))
    (out / f"{actor}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))


def test_a_leaf_under_an_intermediate_ca_is_refused(processes, tmp_path):
    """Chains as issued: a leaf under a sub-CA signed by the CA key is refused (UNAUTHENTICATED) as
    any role, although the TLS library accepts the chain."""
    for actor in ("party-0", "analyst"):
        evil = tmp_path / actor
        _intermediate_cert_dir(processes["certs"], evil, actor)
        for target in processes["targets"]:
            before = target.snapshot()
            CASES[target.kind] += 1
            expect_rpc(("UNAUTHENTICATED", "intermediate CA"), target.stub(actor, evil).GetJob,
                       ltm_pb2.GetJobRequest(job_id="fuzz"))
            assert target.snapshot() == before


def test_server_limits_parse_and_refuse_unknown_names():
    from ltm.limits import ServerLimits

    lim = ServerLimits.parse(["stream_idle_seconds=2.5", "max-jobs=7", "max_spec_bytes=0x100000"], max_batch_bytes=99)
    assert (lim.stream_idle_seconds, lim.max_jobs, lim.max_spec_bytes, lim.max_batch_bytes) == (2.5, 7, 1 << 20, 99)
    assert ServerLimits.parse(None) == ServerLimits()
    for bad in (["nope=1"], ["max_jobs"], ["max_jobs=many"], ["max_jobs=-1"]):
        with pytest.raises(ValueError):
            ServerLimits.parse(bad)

"""The server's upload budget (``max_inflight_bytes``): backpressure instead of memory growth.

A stream reserves its batch's size before reading data; while the budget is taken it waits, and
gets UNAVAILABLE (retryable) only after ``stream_idle_seconds``.  Driven directly on the servicer
with a stand-in gRPC context, so the waiting is observed exactly rather than through timing of
real uploads.
"""
from __future__ import annotations

import asyncio
import functools
from contextlib import asynccontextmanager

import grpc
import pytest

from ltm.limits import ServerLimits
from ltm.server.core import ServerCore
from ltm.server.service import ServerService, UploadTicket


class Aborted(Exception):
    pass


class Context:
    """The part of a grpc.aio context that _admit uses: abort raises, as grpc's does."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code, details):
        self.code, self.details = code, details
        raise Aborted(details)


def in_loop(test):
    """Run the ``async def`` test in a fresh event loop of its own."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))
    return run


def service(budget: int, idle: float = 5.0, **limits) -> ServerService:
    return ServerService(ServerCore("server-0"), insecure=True,
                         limits=ServerLimits(max_inflight_bytes=budget, stream_idle_seconds=idle, **limits))


def tickets(n: int, party: str = "party-0") -> list[UploadTicket]:
    return [UploadTicket(party) for _ in range(n)]


@asynccontextmanager
async def waiting(svc: ServerService, nbytes: int, ticket: UploadTicket, settle: float = 0.1):
    """``ticket`` asks for ``nbytes`` of the budget in the background; the body runs ``settle`` seconds
    later, while the request waits, and must free the budget it waits for: the request must then be
    admitted within 2 s."""
    request = asyncio.create_task(svc._admit(nbytes, Context(), ticket))
    await asyncio.sleep(settle)
    yield request
    await asyncio.wait_for(request, 2)


@in_loop
async def test_a_batch_that_does_not_fit_waits_until_an_admitted_one_finishes():
    svc = service(100)
    first, second, third = tickets(3)
    await svc._admit(60, Context(), first)
    assert first.nbytes == 60 and svc._inflight == 60
    second_waits = asyncio.create_task(svc._admit(60, Context(), second))
    small = asyncio.create_task(svc._admit(40, Context(), third))  # fits beside the first: no wait
    await asyncio.sleep(0.2)
    assert not second_waits.done() and second.nbytes == 0
    assert small.done() and third.nbytes == 40 and svc._inflight == 100
    await svc._release_budget(first)
    await asyncio.wait_for(second_waits, 2)  # 40 + 60 fits the budget exactly
    assert second.nbytes == 60 and svc._inflight == 100 and first.nbytes == 0
    await svc._release_budget(second)
    await svc._release_budget(third)
    await svc._release_budget(third)  # releasing twice gives nothing back twice
    assert svc._inflight == 0


@in_loop
async def test_a_batch_above_the_whole_budget_is_admitted_alone():
    svc = service(100)
    big, other = tickets(2)
    await svc._admit(500, Context(), big)  # nothing in flight: admitted, or it could never be stored
    assert big.nbytes == 500
    async with waiting(svc, 1, other, settle=0.2) as request:
        assert not request.done()
        await svc._release_budget(big)
    assert other.nbytes == 1 and svc._inflight == 1


@in_loop
async def test_waiting_longer_than_the_idle_deadline_is_unavailable_and_reserves_nothing():
    svc = service(100, idle=0.3)
    held, late = tickets(2)
    await svc._admit(80, Context(), held)
    ctx = Context()
    with pytest.raises(Aborted):
        await svc._admit(30, ctx, late)
    assert ctx.code == grpc.StatusCode.UNAVAILABLE and "max_inflight_bytes" in ctx.details
    assert late.nbytes == 0 and svc._inflight == 80
    await svc._release_budget(held)
    await svc._admit(100, Context(), late)  # the budget is whole again
    assert svc._inflight == 100


@in_loop
async def test_seed_uploads_reserve_nothing_and_never_wait():
    svc = service(10)
    held, seed = tickets(2)
    await svc._admit(25, Context(), held)  # above the budget, admitted alone
    await asyncio.wait_for(svc._admit(0, Context(), seed), 1)
    assert seed.nbytes == 0 and svc._inflight == 25


# ------------------------------------------------------------------ fairness between parties (#23)
@in_loop
async def test_a_party_that_took_the_whole_budget_alone_yields_to_another_party():
    """Alone, party-0 uses the whole budget; once party-1 waits, party-0's next stream waits for
    its share (budget / 2) while party-1's batch is admitted as soon as it fits."""
    svc = service(100, idle=5.0)
    a1, a2, a3 = tickets(3, "party-0")
    b1, = tickets(1, "party-1")
    await svc._admit(60, Context(), a1)
    await svc._admit(40, Context(), a2)  # a lone party: its share is the whole budget
    assert svc._inflight == 100
    b = asyncio.create_task(svc._admit(30, Context(), b1))
    await asyncio.sleep(0.05)
    a = asyncio.create_task(svc._admit(30, Context(), a3))  # party-0 would hold 70 > its share of 50
    await asyncio.sleep(0.05)
    assert not b.done() and not a.done()
    await svc._release_budget(a1)  # 60 free: party-1 fits, party-0 (40 held + 30) is over its share
    await asyncio.wait_for(b, 2)
    await asyncio.sleep(0.05)
    assert b1.nbytes == 30 and not a.done() and svc._party_bytes == {"party-0": 40, "party-1": 30}
    await svc._release_budget(a2)  # party-0 holds nothing: its floor admits one batch
    await asyncio.wait_for(a, 2)
    assert a3.nbytes == 30 and svc._inflight == 60


@in_loop
async def test_a_silent_reservation_goes_to_a_waiting_party_after_stream_silent_seconds():
    svc = service(100, idle=5.0, stream_silent_seconds=0.3)
    silent, = tickets(1, "party-0")
    busy, = tickets(1, "party-0")
    waiter, = tickets(1, "party-1")
    await svc._admit(50, Context(), silent)
    await svc._admit(50, Context(), busy)
    svc._received(busy, 10)  # data arrived: never taken back
    loop = asyncio.get_running_loop()
    t = loop.time()
    await asyncio.wait_for(svc._admit(40, Context(), waiter), 3)
    waited = loop.time() - t
    assert 0.25 <= waited < 1.5, waited
    assert silent.revoked and silent.nbytes == 0 and busy.nbytes == 50 and not busy.revoked
    assert waiter.nbytes == 40 and svc._inflight == 90
    # the revoked stream's data comes: it waits for the budget again, then holds it
    async with waiting(svc, 50, silent) as again:
        assert not again.done()
        await svc._release_budget(waiter)
    assert silent.nbytes == 50 and not silent.revoked and svc._inflight == 100


@in_loop
async def test_a_waiting_party_sets_a_due_time_on_streams_over_their_share_only():
    svc = service(100, idle=5.0, stream_rate_window_seconds=7.0)
    over, = tickets(1, "party-0")
    fair, = tickets(1, "party-2")
    await svc._admit(70, Context(), over)
    await svc._admit(30, Context(), fair)
    svc._received(over, 1)
    svc._received(fair, 1)
    async with waiting(svc, 20, UploadTicket("party-1")):
        now = asyncio.get_running_loop().time()
        # three parties: a share is 33; party-0 holds 70 (over), party-2 holds 30 (within)
        assert over.due is not None and 6.5 < over.due - now <= 7.0 and over.poke.done()
        assert "more than its share of 33" in over.due_note and "party-0" in over.due_note
        assert fair.due is None and not fair.poke.done()
        await svc._release_budget(over)


@in_loop
async def test_a_stream_in_the_store_phase_gets_no_due_time():
    """Only streams still receiving must hurry: one whose batch is in is being stored."""
    svc = service(100, idle=5.0)
    stored, = tickets(1, "party-0")
    await svc._admit(100, Context(), stored)
    svc._received(stored, 100)
    stored.receiving = False
    async with waiting(svc, 20, UploadTicket("party-1")):
        assert stored.due is None
        await svc._release_budget(stored)


@in_loop
async def test_the_minimum_rate_window_restarts_once_the_minimum_has_arrived():
    svc = service(100, stream_min_bytes=1000)
    t, = tickets(1)
    await svc._admit(0, Context(), t)
    start = t.window_start
    svc._received(t, 600)
    assert (t.window_start, t.window_bytes) == (start, 600)
    await asyncio.sleep(0.01)
    svc._received(t, 400)
    assert t.window_start > start and t.window_bytes == 0 and t.started


def test_default_rate_limits_are_far_below_an_honest_upload():
    """64 KiB per 10 s (6.4 KiB/s): a loopback TLS upload of a default batch runs at MB/s; the
    silent grace is shorter than the window, the window shorter than the idle deadline."""
    lim = ServerLimits()
    assert lim.stream_min_bytes / lim.stream_rate_window_seconds <= 8 * 1024
    assert lim.stream_silent_seconds < lim.stream_rate_window_seconds < lim.stream_idle_seconds

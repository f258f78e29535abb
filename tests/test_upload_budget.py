"""The server's upload budget (``max_inflight_bytes``): backpressure instead of memory growth.

A stream reserves its batch's size before reading data; while the budget is taken it waits, and
gets UNAVAILABLE (retryable) only after ``stream_idle_seconds``.  Driven directly on the servicer
with a stand-in gRPC context, so the waiting is observed exactly rather than through timing of
real uploads.
"""
from __future__ import annotations

import asyncio

import grpc
import pytest

from server.core import ServerCore
from server.limits import ServerLimits
from server.service import ServerService, UploadTicket


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


def service(budget: int, idle: float = 5.0, **limits) -> ServerService:
    return ServerService(ServerCore("server-0"), insecure=True,
                         limits=ServerLimits(max_inflight_bytes=budget, stream_idle_seconds=idle, **limits))


def tickets(n: int, party: str = "party-0") -> list[UploadTicket]:
    return [UploadTicket(party) for _ in range(n)]


def test_a_batch_that_does_not_fit_waits_until_an_admitted_one_finishes():
    async def main():
        svc = service(100)
        first, second, third = tickets(3)
        await svc._admit(60, Context(), first)
        assert first.nbytes == 60 and svc._inflight == 60
        waiting = asyncio.create_task(svc._admit(60, Context(), second))
        small = asyncio.create_task(svc._admit(40, Context(), third))  # fits beside the first: no wait
        await asyncio.sleep(0.2)
        assert not waiting.done() and second.nbytes == 0
        assert small.done() and third.nbytes == 40 and svc._inflight == 100
        await svc._release_budget(first)
        await asyncio.wait_for(waiting, 2)  # 40 + 60 fits the budget exactly
        assert second.nbytes == 60 and svc._inflight == 100 and first.nbytes == 0
        await svc._release_budget(second)
        await svc._release_budget(third)
        await svc._release_budget(third)  # releasing twice gives nothing back twice
        assert svc._inflight == 0
    asyncio.run(main())


def test_a_batch_above_the_whole_budget_is_admitted_alone():
    async def main():
        svc = service(100)
        big, other = tickets(2)
        await svc._admit(500, Context(), big)  # nothing in flight: admitted, or it could never be stored
        assert big.nbytes == 500
        waiting = asyncio.create_task(svc._admit(1, Context(), other))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await svc._release_budget(big)
        await asyncio.wait_for(waiting, 2)
        assert other.nbytes == 1 and svc._inflight == 1
    asyncio.run(main())


def test_waiting_longer_than_the_idle_deadline_is_unavailable_and_reserves_nothing():
    async def main():
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
    asyncio.run(main())


def test_seed_uploads_reserve_nothing_and_never_wait():
    async def main():
        svc = service(10)
        held, seed = tickets(2)
        await svc._admit(25, Context(), held)  # above the budget, admitted alone
        await asyncio.wait_for(svc._admit(0, Context(), seed), 1)
        assert seed.nbytes == 0 and svc._inflight == 25
    asyncio.run(main())

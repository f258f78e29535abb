"""Bytes on the wire, counted at the gRPC layer: every serialized message in and out.

:class:`ByteMeter` is a ``grpc.aio`` server interceptor that wraps each method's request
deserializer and response serializer, so it counts the exact protobuf payload bytes gRPC moves
(not estimates from array sizes).  HTTP/2 framing and TLS record overhead — a few percent for
megabyte messages — are below this layer and not included.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import grpc


class ByteMeter(grpc.aio.ServerInterceptor):
    """Counts request and response payload bytes per method (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received: dict[str, int] = defaultdict(int)
        self.sent: dict[str, int] = defaultdict(int)

    def _count(self, table: dict[str, int], method: str, n: int) -> None:
        with self._lock:
            table[method] += n

    @property
    def total_received(self) -> int:
        """Bytes received by every metered method (request messages, serialized)."""
        with self._lock:
            return sum(self.received.values())

    @property
    def total_sent(self) -> int:
        """Bytes sent by every metered method (response messages, serialized)."""
        with self._lock:
            return sum(self.sent.values())

    def snapshot(self) -> dict[str, Any]:
        """Bytes received and sent per method, and their totals."""
        with self._lock:
            return {"received": dict(self.received), "sent": dict(self.sent),
                    "total_received": sum(self.received.values()), "total_sent": sum(self.sent.values())}

    async def intercept_service(self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails):
        """The gRPC server interceptor: wrap each handler's (de)serializers to count its bytes per method."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        deserialize = handler.request_deserializer
        serialize = handler.response_serializer

        def counted_deserialize(data: bytes):
            self._count(self.received, method, len(data))
            return deserialize(data) if deserialize else data

        def counted_serialize(message) -> bytes:
            data = serialize(message) if serialize else message
            self._count(self.sent, method, len(data))
            return data

        return handler._replace(request_deserializer=counted_deserialize, response_serializer=counted_serialize)


def human_bytes(x: Any) -> str:
    """A byte count for a person: ``1.25 GB``, ``8.96 MB``, ``224 B``; "—" for a missing count."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return "—"
    if x >= 1e9:
        return f"{x / 1e9:.2f} GB"
    return f"{x / 1e6:.2f} MB" if x >= 1e6 else f"{x / 1e3:.1f} kB" if x >= 1e3 else f"{int(x)} B"

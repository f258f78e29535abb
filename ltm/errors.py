"""Protocol errors with a status code that every transport maps the same way.

``code`` is a gRPC status name (``INVALID_ARGUMENT``, ``FAILED_PRECONDITION``, ``PERMISSION_DENIED``,
``ALREADY_EXISTS``, ``NOT_FOUND``, ``RESOURCE_EXHAUSTED``); the in-process transport raises the
exception as is, the gRPC layer aborts the call with that status and the message.
"""
from __future__ import annotations

STATUS_CODES = ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED", "ALREADY_EXISTS",
                "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "INTERNAL", "DATA_LOSS",
                "DEADLINE_EXCEEDED")

#: Longest status message sent to a caller: gRPC carries it in a metadata header (8 KiB limit by
#: default), and a message quoting hostile input (200 000 unknown keys) must not overflow it.
MAX_MESSAGE_CHARS = 1000


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` cut to at most ``limit`` characters (saying how much was left out)."""
    message = str(message)
    if len(message) <= limit:
        return message
    tail = f" … [{len(message) - limit} more characters]"
    return message[:max(0, limit - len(tail))] + tail


class DataLossError(Exception):
    """Stored state is damaged (a blob or record no longer matches its digest); the operation is
    refused (gRPC ``DATA_LOSS``) with a message naming the damaged object, never answered wrongly."""


class ProtocolError(Exception):
    """A refused request: a status code and a message a person can act on."""

    def __init__(self, code: str, message: str) -> None:
        if code not in STATUS_CODES:
            raise ValueError(f"unknown status code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class CommandError(Exception):
    """A command cannot go on because of something the person running it can fix: a missing
    certificate or data file, a port already in use, an unreachable peer.

    The ``ltm`` command prints the message as one line (``ltm <command>: error: …``), without a
    traceback, and exits with ``status``.
    """

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status

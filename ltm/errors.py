"""Protocol errors with a status code that every transport maps the same way.

``code`` is a gRPC status name (``INVALID_ARGUMENT``, ``FAILED_PRECONDITION``, ``PERMISSION_DENIED``,
``ALREADY_EXISTS``, ``NOT_FOUND``, ``RESOURCE_EXHAUSTED``); the in-process transport raises the
exception as is, the gRPC layer aborts the call with that status and the message.
"""
from __future__ import annotations

STATUS_CODES = ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED", "ALREADY_EXISTS",
                "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "INTERNAL")


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

"""The one error base of the project, :class:`LtmError`, and the errors every actor shares.

Every exception class the project defines derives from :class:`LtmError` (``tests/unit/ltm/test_errors.py``
walks the packages to check it), which carries two things:

* ``code``: the gRPC status name a service answers with when the error ends a call
  (``INVALID_ARGUMENT``, ``FAILED_PRECONDITION``, ``DATA_LOSS``, …).  ``INTERNAL`` (the default)
  means the error is not the caller's to act on: a server answers it with a generic message and logs
  the details.  The in-process runtime raises the exception as is.
* ``exit_code``: the ``ltm`` command's exit status when the error ends a command.  ``ltm/cli/app.py``
  maps it in one place: one line ``ltm <command>: error: <prefix><message>`` on stderr (unless the
  actor already logged it, ``reported``) and ``exit_code``.  The statuses (README, deploy/README.md):
  2 a usage or input error, 3 a refusal (a party's policy or budget; damaged server or analyst state),
  4 a party's bad data, 5 a peer unreachable or an upload refused, 6 a party's upload journal,
  7 a party's privacy ledger, 1 anything else.

A subclass sets ``code``, ``exit_code`` and ``prefix`` as class attributes; a ``ValueError``
subclass lists :class:`LtmError` first (``class XError(LtmError, ValueError)``), which keeps
``except ValueError`` working where it is used.
"""
from __future__ import annotations

STATUS_CODES = ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED", "ALREADY_EXISTS",
                "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "INTERNAL", "DATA_LOSS",
                "DEADLINE_EXCEEDED", "UNAVAILABLE")

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


class LtmError(Exception):
    """The base of every error the project defines: a gRPC status name and an exit status.

    ``code``: the status a service answers with (``INTERNAL``: a generic answer, details logged);
    ``exit_code``: the ``ltm`` command's exit status; ``prefix``: what the command's error line puts
    before the message (``"privacy ledger: "``); ``reported``: set by an actor that has already
    logged the error, so the command only exits with ``exit_code``.
    """

    code: str = "INTERNAL"
    exit_code: int = 1
    prefix: str = ""
    reported: bool = False

    def status_message(self) -> str:
        """The message a service sends with ``code`` (the exception's text)."""
        return str(self)


class DataLossError(LtmError):
    """Stored state is damaged (a blob or record no longer matches its digest); the operation is
    refused (gRPC ``DATA_LOSS``) with a message naming the damaged object, never answered wrongly."""

    code = "DATA_LOSS"


class ProtocolError(LtmError):
    """A refused request: a status code and a message a person can act on."""

    def __init__(self, code: str, message: str) -> None:
        if code not in STATUS_CODES:
            raise ValueError(f"unknown status code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def status_message(self) -> str:
        """The message without the status name (the status travels beside it)."""
        return self.message


class CommandError(LtmError):
    """A command cannot go on because of something the person running it can fix: a missing
    certificate or data file, a port already in use, an unreachable peer.

    The ``ltm`` command prints the message as one line (``ltm <command>: error: …``), without a
    traceback, and exits with ``status``.
    """

    exit_code = 2

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = status

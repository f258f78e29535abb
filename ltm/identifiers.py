"""One grammar for the identifiers a job names: job, party, server and column ids.

Ids travel into file names (a server's blob directory and release marker, a party's journal and
ledger, the analyst's ``<out>/<job_id>/``, a ``<column>.npy`` file of a party's column
directory), TLS names (a server id is pinned as the certificate name a party expects), log lines
and TOML.  So every id is checked against one small grammar wherever it enters — when a job file
is parsed (:mod:`ltm.jobfile`), when a spec is validated (:func:`ltm.jobspec.validate_job`, which
every server and the analyst run on a spec received over gRPC), at every RPC that names a job —
instead of each file-name builder escaping whatever it was given:

* **job and party ids**: ``[A-Za-z0-9][A-Za-z0-9._-]*``, at most :data:`MAX_ID_CHARS` characters,
  never containing ``..``: one path component on every file system, one TLS/DNS-safe label,
  nothing to quote in TOML or a log line (no ``/``, ``\\``, spaces, control characters, newlines).
* **server ids**: a server identity as ``ltm certs`` issues it, ``server-<n>``
  (:data:`ltm.transport.certs.ACTOR_RE`), with ASCII digits: a party pins it in the TLS handshake, so a
  job naming ``party-3`` or ``analyst`` as a server would have parties send shares to whoever
  holds that certificate.
* **server endpoints** (when given): ``host:port`` with a DNS name, an IPv4 address or a
  bracketed IPv6 address and a port in 1–65535 — never a gRPC target scheme (``unix:``,
  ``dns:///``) that would make the analyst or a party open something else.
* **column names** (and a transform's output-name prefix): a little wider, since they are the
  header of a party's CSV — letters, digits, ``_ . - ( ) [ ]`` and single inner spaces, starting
  with a letter, digit, ``_`` or ``(`` (the intercept is ``(intercept)``), at most
  :data:`MAX_COLUMN_CHARS` characters, never ``..``.

All checks are ASCII only (``re.ASCII``): a Unicode digit or a look-alike letter is refused.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ltm.errors import LtmError

#: Longest job or party id (a DNS label is at most 63 characters; a file name has room to spare).
MAX_ID_CHARS = 64
#: Longest column name (or transform name prefix).
MAX_COLUMN_CHARS = 128

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)
_SERVER = re.compile(r"server-(0|[1-9][0-9]{0,8})", re.ASCII)
_ENDPOINT = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]{1,5})",
                       re.ASCII)
_COLUMN = re.compile(r"[A-Za-z0-9_(][A-Za-z0-9_.()\[\] -]*", re.ASCII)

ID_RULE = (f"1–{MAX_ID_CHARS} characters of letters, digits, '.', '_' or '-', starting with a letter or digit, "
           f"without '..'")
SERVER_RULE = "a server identity as `ltm certs` issues it: 'server-<n>' (e.g. 'server-0')"
COLUMN_RULE = (f"1–{MAX_COLUMN_CHARS} characters of letters, digits, spaces and '_ . - ( ) [ ]', starting with a "
               f"letter, digit, '_' or '(', without '..', double or trailing spaces")


class IdentifierError(LtmError, ValueError):
    """An id outside the grammar (the message says which id, where, and the rule)."""

    exit_code = 2


def shown(value: Any) -> str:
    """``value`` quoted for a message, cut short (a hostile id may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:70] + f"…' ({len(value) if isinstance(value, str) else '?'} chars)"


def id_problem(value: Any, what: str = "id") -> str | None:
    """Why ``value`` is not a valid job or party id (one line), or None if it is."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__}"
    if not (0 < len(value) <= MAX_ID_CHARS and _ID.fullmatch(value) and ".." not in value):
        return f"{what} {shown(value)} is not a valid id: use {ID_RULE}"
    return None


#: identities of the other roles (ltm.transport.certs): a party named so could never upload as itself
_OTHER_ROLES = ("analyst", "operator")


def party_id_problem(value: Any, what: str = "party id") -> str | None:
    """Why ``value`` is not a valid party id (one line), or None: an id that is not another role's
    identity (``server-<n>``, ``analyst``, ``operator``)."""
    problem = id_problem(value, what)
    if problem is None and (value in _OTHER_ROLES or _SERVER.fullmatch(value)):
        problem = f"{what} {shown(value)} is the identity of a server, the analyst or the operator, not a party"
    return problem


def server_id_problem(value: Any, what: str = "server id") -> str | None:
    """Why ``value`` is not a server identity (one line), or None if it is."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__}"
    if not _SERVER.fullmatch(value):
        return f"{what} {shown(value)} is not {SERVER_RULE}"
    return None


def column_problem(value: Any, what: str = "column name") -> str | None:
    """Why ``value`` is not a valid column name (one line), or None if it is."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__}"
    if not (0 < len(value) <= MAX_COLUMN_CHARS and _COLUMN.fullmatch(value) and ".." not in value
            and "  " not in value and not value.endswith(" ")):
        return f"{what} {shown(value)} is not a valid column name: use {COLUMN_RULE}"
    return None


def endpoint_problem(value: Any, what: str = "endpoint", *, any_port: bool = False) -> str | None:
    """Why ``value`` is not a ``host:port`` endpoint (one line), or None if it is.  ``any_port``: port 0
    is allowed too (an address to bind, where 0 asks for any free port; a peer is never at port 0)."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__}"
    low = 0 if any_port else 1
    m = _ENDPOINT.fullmatch(value)
    if not m or ".." in value or not low <= int(m.group(1)) <= 65535:
        return f"{what} {shown(value)} must be host:port (a DNS name, an IPv4 address or [IPv6], port {low}–65535)"
    return None


def check_id(value: Any, what: str = "id") -> str:
    """``value`` if it is a valid job or party id, else :class:`IdentifierError`."""
    problem = id_problem(value, what)
    if problem:
        raise IdentifierError(problem)
    return value


def check_server_id(value: Any, what: str = "server id") -> str:
    """``value`` if it is a server identity, else :class:`IdentifierError`."""
    problem = server_id_problem(value, what)
    if problem:
        raise IdentifierError(problem)
    return value


def spec_id_problems(job_id: Any, party_ids: Iterable[Any], server_ids: Iterable[Any],
                     column_names: Iterable[Any], transform_names: Iterable[Any] = (),
                     prejob_ids: Iterable[Any] = (), endpoints: Iterable[Any] = ()) -> list[str]:
    """Every id of a job that breaks the grammar, one line each (at most one line per kind of id
    past the first few, so a spec with 100 000 bad party ids gives a short answer)."""
    problems: list[str] = []

    def each(values: Iterable[Any], check, what: str) -> None:
        bad = [p for p in (check(v, what) for v in values) if p]
        problems.extend(bad[:3])
        if len(bad) > 3:
            problems.append(f"… and {len(bad) - 3} more invalid {what}s")

    each([job_id], id_problem, "job id")
    each(party_ids, party_id_problem, "party id")
    each(server_ids, server_id_problem, "server id")
    each(column_names, column_problem, "column name")
    each([t for t in transform_names if t], column_problem, "transform name")
    each(prejob_ids, id_problem, "pre-job id")
    each([e for e in endpoints if e], endpoint_problem, "server endpoint")  # "" = not given (in-process runs)
    return problems

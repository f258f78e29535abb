"""Shared gRPC plumbing for every LTM actor (servers, parties, the analyst).

* :mod:`ltm.transport.certs` — a private CA and per-actor leaf certificates (``ltm certs``).
  A leaf names its actor (``server-2``, ``analyst``, ``party-17``) both as the subject CN and
  as a SAN URI ``ltm://actor/<actor>``.
* :mod:`ltm.transport.tls` — mutual-TLS credentials, ports and channels (64 MiB messages,
  keepalive), and :func:`ltm.transport.tls.peer_identity`, which turns the peer's *verified*
  certificate into an :class:`ltm.transport.tls.Identity` (actor + role) inside a servicer.

Plaintext transport exists only behind an explicit ``--insecure`` flag; see
:func:`ltm.transport.tls.identity_from_metadata`.

This package must not import ``party``, ``server``, ``analyst`` or ``sim``.
"""

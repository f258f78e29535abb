"""Mutual-TLS credentials, ports, channels and caller identity for LTM actors.

Layout of a certificate directory (made by ``ltm certs``, see :mod:`ltm.transport.certs`)::

    ca.pem  ca.key  server-0.pem  server-0.key  party-3.pem  party-3.key  analyst.pem ...

Server side (``grpc.aio``)::

    server = make_server()                                  # 64 MiB messages, keepalive policy
    port = add_secure_port(server, "0.0.0.0:50051", cert_dir, "server-0")
    ...
    async def Upload(self, request_iterator, context):
        who = await authenticate(context, roles={"party"})  # aborts UNAUTHENTICATED / PERMISSION_DENIED
        ...                                                 # who.actor == "party-3", who.role == "party"

Client side::

    channel = make_channel("localhost:50051", cert_dir, "party-3")   # grpc.aio.Channel

The server requires a client certificate signed by ``ca.pem``; the TLS handshake fails for any
other client, before a handler runs.  Inside a handler the *verified* peer certificate is read
from ``context.auth_context()`` — the SAN URI ``ltm://actor/<actor>`` is preferred, the subject
CN is the fall-back.  Nothing the client sends in metadata is trusted in TLS mode.

``--insecure`` (plaintext) mode exists for local debugging only: no encryption and *no*
authentication — the caller's actor name is whatever the client claims in the ``ltm-actor``
metadata header (see :func:`identity_from_metadata`).
"""
from __future__ import annotations

import collections
import errno
import functools
import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import grpc
import grpc.aio
from cryptography import x509

from ltm.errors import CommandError, LtmError
from ltm.transport.certs import ACTOR_RE, ACTOR_URI_PREFIX, CA_CERT_FILE, role_of

__all__ = [
    "ACTOR_METADATA_KEY",
    "CHANNEL_OPTIONS",
    "MAX_MESSAGE_BYTES",
    "SERVER_OPTIONS",
    "AuthenticationError",
    "Identity",
    "InsecureIdentity",
    "add_secure_port",
    "authenticate",
    "channel_credentials",
    "identify",
    "identity_from_auth_context",
    "identity_from_metadata",
    "make_channel",
    "make_server",
    "make_sync_channel",
    "peer_identity",
    "server_credentials",
]

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
ACTOR_METADATA_KEY = "ltm-actor"  # --insecure only; ignored (never read) in TLS mode

#: Client channel options: 64 MiB messages; a keepalive ping every 30 s (also while idle) that
#: must be answered within 10 s, so a dead server is noticed instead of hanging a call; and
#: reconnect attempts after a lost connection every 0.25 s growing to at most 4 s (gRPC's default
#: grows to 120 s), so a server restarted on its old port is reached again within seconds.
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 4_000),
)

#: Server options: 64 MiB messages; accept client pings as often as every 10 s (clients ping
#: every 30 s; a server that refuses them answers GOAWAY "too_many_pings"); ping idle clients
#: every 60 s; and no SO_REUSEPORT, so two servers can't silently share one port.
SERVER_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.so_reuseport", 0),
)


def _merge_options(defaults: Iterable[tuple[str, Any]],
                   extra: Iterable[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
    merged = dict(defaults)
    merged.update(dict(extra or ()))
    return list(merged.items())


# ---------------------------------------------------------------------------- credentials
class CertificateMissing(CommandError, FileNotFoundError):
    """A certificate or key file an actor needs is not there (one line; the ``ltm`` command exits 2)."""


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise CertificateMissing(
            f"{what} not found: {path} (create the certificate directory with `ltm certs --out {path.parent} ...`)"
        ) from None


def check_certificates(cert_dir, actor: str) -> None:
    """Fail early, with one actionable line, unless ``cert_dir`` holds ca.pem and ``actor``'s
    certificate and key (and the certificate names ``actor``).  Actors call it before creating
    any state, so a typo in ``--certs`` leaves nothing behind."""
    _load(cert_dir, actor)


def _actor_of_cert(pem: bytes) -> str | None:
    cert = x509.load_pem_x509_certificate(pem)
    uris = _actor_uris(cert)
    if uris:
        return uris[0]
    cns = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    return str(cns[0].value) if cns else None


def _load(cert_dir, actor: str) -> tuple[bytes, bytes, bytes]:
    """``(ca_pem, key_pem, cert_pem)`` for ``actor``; checks the leaf really names ``actor``."""
    role_of(actor)  # validates the name
    d = Path(cert_dir)
    ca = _read(d / CA_CERT_FILE, "CA certificate")
    cert = _read(d / f"{actor}.pem", f"certificate of {actor}")
    key = _read(d / f"{actor}.key", f"private key of {actor}")
    named = _actor_of_cert(cert)
    if named != actor:
        raise ValueError(f"{d / f'{actor}.pem'} is a certificate for {named!r}, not {actor!r}")
    return ca, key, cert


def server_credentials(cert_dir, actor: str) -> grpc.ServerCredentials:
    """TLS server credentials for ``actor`` that require a client certificate signed by ca.pem."""
    ca, key, cert = _load(cert_dir, actor)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


def channel_credentials(cert_dir, actor: str) -> grpc.ChannelCredentials:
    """TLS channel credentials: trust only ca.pem; present ``actor``'s certificate."""
    ca, key, cert = _load(cert_dir, actor)
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


# ---------------------------------------------------------------------------- identity
@dataclass(frozen=True)
class Identity:
    """Who is calling: ``actor`` (``"party-3"``) and its ``role`` (``"party"``).

    ``verified`` is True when the name comes from a certificate the TLS handshake verified.
    """

    actor: str
    role: str
    verified: bool = True

    @classmethod
    def of(cls, actor: str) -> "Identity":
        """The identity of ``actor`` with the role its name gives (``server-0`` → server)."""
        return cls(actor, role_of(actor))


@dataclass(frozen=True)
class InsecureIdentity(Identity):
    """An identity the client merely *claimed* (``ltm-actor`` metadata, ``--insecure`` runs only)."""

    verified: bool = False


class AuthenticationError(LtmError):
    """No usable, verified peer identity; maps to ``grpc.StatusCode.UNAUTHENTICATED``."""

    code = "UNAUTHENTICATED"


def _actor_uris(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [u[len(ACTOR_URI_PREFIX):] for u in san.get_values_for_type(x509.UniformResourceIdentifier)
            if u.startswith(ACTOR_URI_PREFIX)]


@functools.lru_cache(maxsize=256)
def _actors_from_pem(pem: bytes) -> tuple[tuple[str, ...], str | None]:
    cert = x509.load_pem_x509_certificate(pem)
    cns = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    return tuple(_actor_uris(cert)), (str(cns[0].value) if cns else None)


def _decode_all(values: Iterable[Any]) -> list[str]:
    return [v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v) for v in values]


def _check_chain_as_issued(auth: Mapping[str, Sequence[bytes]]) -> None:
    """Refuse a peer whose certificate is a CA, or whose presented chain holds an intermediate CA.

    ``ltm certs`` issues every leaf directly from a CA with path length 0, so a verified peer
    never needs an intermediate; the TLS library (BoringSSL in gRPC) accepts a leaf under a sub-CA
    signed by the CA key anyway, which would let whoever made such a sub-CA mint any role."""
    blobs = [bytes(v) for key in ("x509_pem_cert", "x509_pem_cert_chain") for v in auth.get(key, ())]
    for blob in blobs:
        try:
            certs = x509.load_pem_x509_certificates(blob)
        except ValueError as exc:
            raise AuthenticationError(f"unreadable peer certificate chain: {exc}") from None
        for cert in certs:
            try:
                ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
            except x509.ExtensionNotFound:
                ca = False
            if ca and cert.issuer != cert.subject:
                raise AuthenticationError(f"peer certificate chain holds an intermediate CA "
                                          f"({cert.subject.rfc4514_string()}); LTM leaves are issued "
                                          f"directly by the CA (path length 0)")
            if ca and cert is certs[0] and blob is blobs[0]:
                raise AuthenticationError("the peer presented a CA certificate as its own identity")


def identity_from_auth_context(auth: Mapping[str, Sequence[bytes]]) -> Identity:
    """The caller's :class:`Identity` from a gRPC auth context (a verified TLS peer).

    Order of preference: the ``ltm://actor/`` SAN URI of ``x509_pem_cert`` (parsed), the
    ``peer_uri`` / ``x509_subject_alternative_name`` properties, then ``x509_common_name``.
    Raises :class:`AuthenticationError` if the connection is not TLS, carries no client
    certificate, names more than one actor, or names a malformed actor.
    """
    security = _decode_all(auth.get("transport_security_type", ()))
    if security != ["ssl"]:
        raise AuthenticationError(
            "no TLS peer identity (connection is not mutual TLS; is this server running --insecure?)"
        )
    _check_chain_as_issued(auth)
    uris: list[str] = []
    cn: str | None = None
    pems = auth.get("x509_pem_cert") or ()
    if pems:
        pem = pems[0]
        try:
            parsed_uris, cn = _actors_from_pem(bytes(pem) if not isinstance(pem, bytes) else pem)
            uris = list(parsed_uris)
        except ValueError as exc:
            raise AuthenticationError(f"unreadable peer certificate: {exc}") from None
    else:
        for key in ("peer_uri", "x509_subject_alternative_name"):
            found = [v[len(ACTOR_URI_PREFIX):] for v in _decode_all(auth.get(key, ()))
                     if v.startswith(ACTOR_URI_PREFIX)]
            if found:
                uris = found
                break
        cns = _decode_all(auth.get("x509_common_name", ()))
        cn = cns[0] if cns else None

    uris = list(dict.fromkeys(uris))
    if len(uris) > 1:
        raise AuthenticationError(f"peer certificate names several actors: {', '.join(uris)}")
    if uris:
        actor = uris[0]
        if cn is not None and cn != actor:
            raise AuthenticationError(f"peer certificate is inconsistent: SAN names {actor!r}, CN {cn!r}")
    elif cn is not None:
        actor = cn
    else:
        raise AuthenticationError("no client certificate: the peer presented no verified certificate")
    if not ACTOR_RE.fullmatch(actor):
        raise AuthenticationError(f"peer certificate names a malformed actor {actor!r}")
    return Identity(actor, role_of(actor))


def _is_sync_context(context: Any) -> bool:
    return isinstance(context, grpc.ServicerContext)


def _fail(context: Any, exc: AuthenticationError) -> None:
    """Abort a sync RPC (``context.abort`` raises); for a ``grpc.aio`` context, set the status
    and raise — ``grpc.aio`` keeps the code (UNAUTHENTICATED) but replaces the details text with
    ``Unexpected <class ...AuthenticationError>: ...`` and logs a traceback.  In ``grpc.aio``
    handlers prefer ``await authenticate(context)``, which aborts cleanly."""
    if _is_sync_context(context):
        context.abort(grpc.StatusCode[exc.code], str(exc))  # raises
    try:
        context.set_code(grpc.StatusCode[exc.code])
        context.set_details(str(exc))
    except Exception:  # pragma: no cover - contexts without set_code (tests' fakes)
        pass
    raise exc


def peer_identity(context: Any) -> Identity:
    """The caller's verified :class:`Identity`, from a sync or ``grpc.aio`` servicer context.

    Reads ``context.auth_context()`` (see :func:`identity_from_auth_context`).  If there is no
    verified certificate the RPC fails with ``UNAUTHENTICATED``: a sync context is aborted;
    with a ``grpc.aio`` context :class:`AuthenticationError` is raised after ``set_code`` (the
    client still sees UNAUTHENTICATED).  Usable in both; ``grpc.aio`` handlers should prefer
    ``await authenticate(context)``.
    """
    try:
        return identity_from_auth_context(context.auth_context())
    except AuthenticationError as exc:
        _fail(context, exc)
        raise  # unreachable: _fail always raises


def _claimed_identity(metadata: Iterable[tuple[str, Any]] | None) -> InsecureIdentity:
    claimed = [v for k, v in (metadata or ()) if k == ACTOR_METADATA_KEY]
    if len(claimed) != 1:
        raise AuthenticationError(
            f"--insecure mode: expected exactly one '{ACTOR_METADATA_KEY}' metadata header, got {len(claimed)}"
        )
    actor = claimed[0].decode("utf-8", "replace") if isinstance(claimed[0], bytes) else str(claimed[0])
    if not ACTOR_RE.fullmatch(actor):
        raise AuthenticationError(f"--insecure mode: malformed actor name {actor!r} in '{ACTOR_METADATA_KEY}'")
    return InsecureIdentity(actor, role_of(actor))


def identity_from_metadata(context: Any) -> InsecureIdentity:
    """**INSECURE — for explicit ``--insecure`` (plaintext) runs only.**

    Returns the actor the *client claims* in its ``ltm-actor`` metadata header.  Nothing is
    verified: any process that can reach the port can claim to be any party, any server or the
    analyst.  Never call this on a TLS server — use :func:`peer_identity` (or
    :func:`identify` with ``insecure=False``).  Channels made by :func:`make_channel` /
    :func:`make_sync_channel` with ``insecure=True`` send the header automatically.
    Fails like :func:`peer_identity` (``UNAUTHENTICATED``) if the header is missing/malformed.
    """
    try:
        return _claimed_identity(context.invocation_metadata())
    except AuthenticationError as exc:
        _fail(context, exc)
        raise


def identify(context: Any, insecure: bool = False) -> Identity:
    """:func:`peer_identity`, or :func:`identity_from_metadata` when the server runs ``--insecure``."""
    return identity_from_metadata(context) if insecure else peer_identity(context)


async def authenticate(context: Any, roles: Iterable[str] | None = None, *,
                       insecure: bool = False) -> Identity:
    """For ``grpc.aio`` handlers: the caller's :class:`Identity`, or a clean abort.

    Aborts with ``UNAUTHENTICATED`` if there is no (verified) identity and with
    ``PERMISSION_DENIED`` if ``roles`` is given and the caller's role is not in it.
    (``await context.abort`` raises, so code after a failed ``authenticate`` never runs.)
    """
    try:
        if insecure:
            who: Identity = _claimed_identity(context.invocation_metadata())
        else:
            who = identity_from_auth_context(context.auth_context())
    except AuthenticationError as exc:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        raise  # unreachable: abort raises
    if roles is not None:
        allowed = set(roles)
        if who.role not in allowed:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{who.actor} (role {who.role}) may not call this method; allowed roles: {', '.join(sorted(allowed))}",
            )
    return who


# ---------------------------------------------------------------------------- ports and servers
def make_server(options: Iterable[tuple[str, Any]] | None = None, **kwargs: Any) -> grpc.aio.Server:
    """``grpc.aio.server`` with :data:`SERVER_OPTIONS` (``options`` override them)."""
    return grpc.aio.server(options=_merge_options(SERVER_OPTIONS, options), **kwargs)


def _check_bindable(address: str) -> None:
    """Refuse, with one actionable line, an address that cannot be bound (before gRPC tries and
    logs its own multi-line error).  Port 0 and unparsable addresses are left to gRPC."""
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    if not port_text.isdigit() or int(port_text) == 0:
        return
    try:
        infos = socket.getaddrinfo(host, int(port_text), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CommandError(f"cannot listen on {address}: unknown host {host!r} ({exc.strerror})") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's own listener does
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(f"cannot listen on {address}: the port is already in use; choose another "
                                   f"--listen port or stop the process holding it") from None
            raise CommandError(f"cannot listen on {address}: {exc.strerror}; choose an address of this "
                               f"machine in --listen") from None


def add_secure_port(server: Any, address: str, cert_dir, actor: str, insecure: bool = False) -> int:
    """Bind ``address`` on a (sync or aio) server with mTLS as ``actor``; return the port.

    ``insecure=True`` binds plaintext — only for an explicit ``--insecure`` flag.  Create the
    server with :func:`make_server` (or ``options=SERVER_OPTIONS``) so message limits and the
    keepalive policy match the channels.
    """
    if insecure:
        log.warning("%s listening on %s WITHOUT TLS (--insecure): traffic is plaintext and callers "
                    "are not authenticated", actor, address)
    credentials = None if insecure else server_credentials(cert_dir, actor)
    _check_bindable(address)
    try:
        port = server.add_insecure_port(address) if insecure else server.add_secure_port(address, credentials)
    except RuntimeError:  # grpc's "Failed to bind to address …"
        port = 0
    if not port:
        raise CommandError(f"cannot listen on {address}: the port is already in use or the address is not "
                           f"this machine's; choose another --listen address or stop the process holding it")
    return port


# ---------------------------------------------------------------------------- channels
def _with_metadata(metadata: Any, actor: str) -> list[tuple[str, str]]:
    items = [(k, v) for k, v in (metadata or ()) if k != ACTOR_METADATA_KEY]
    items.append((ACTOR_METADATA_KEY, actor))
    return items


class _AioActorHeaderBase:
    """Adds ``ltm-actor: <actor>`` to every call (``--insecure`` channels only).

    One class per call kind: ``grpc.aio.Channel`` files each interceptor under the *first*
    interceptor kind it is an instance of (an ``if/elif`` chain), so a single class deriving
    from all four kinds would only ever see unary-unary calls.
    """

    def __init__(self, actor: str) -> None:
        self._actor = actor

    def _details(self, d: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return grpc.aio.ClientCallDetails(d.method, d.timeout, grpc.aio.Metadata(*_with_metadata(d.metadata, self._actor)),
                                          d.credentials, d.wait_for_ready)


class _AioActorHeaderUU(_AioActorHeaderBase, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _AioActorHeaderUS(_AioActorHeaderBase, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _AioActorHeaderSU(_AioActorHeaderBase, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


class _AioActorHeaderSS(_AioActorHeaderBase, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


def _aio_actor_headers(actor: str) -> list[Any]:
    return [cls(actor) for cls in (_AioActorHeaderUU, _AioActorHeaderUS, _AioActorHeaderSU, _AioActorHeaderSS)]


class _SyncCallDetails(
    collections.namedtuple("_SyncCallDetails", ("method", "timeout", "metadata", "credentials",
                                                "wait_for_ready", "compression")),
    grpc.ClientCallDetails,
):
    pass


class _SyncActorHeader(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                       grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, actor: str) -> None:
        self._actor = actor

    def _details(self, d: grpc.ClientCallDetails) -> _SyncCallDetails:
        return _SyncCallDetails(d.method, d.timeout, _with_metadata(d.metadata, self._actor), d.credentials,
                                getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


def make_channel(target: str, cert_dir, actor: str, insecure: bool = False,
                 options: Iterable[tuple[str, Any]] | None = None,
                 interceptors: Sequence[Any] | None = None) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel to ``target`` authenticated as ``actor`` (mTLS).

    Targets such as ``localhost:50051`` / ``127.0.0.1:50051`` verify against the server
    certificate's DNS/IP SANs; no ``grpc.ssl_target_name_override`` is needed.  ``options``
    override :data:`CHANNEL_OPTIONS`.  ``insecure=True`` (``--insecure`` only): plaintext, and
    every call carries the unauthenticated ``ltm-actor`` header; ``cert_dir`` may be None.
    Must be created (and used) inside the running event loop.
    """
    opts = _merge_options(CHANNEL_OPTIONS, options)
    if insecure:
        role_of(actor)
        return grpc.aio.insecure_channel(target, options=opts,
                                         interceptors=[*_aio_actor_headers(actor), *(interceptors or ())])
    return grpc.aio.secure_channel(target, channel_credentials(cert_dir, actor), options=opts,
                                   interceptors=list(interceptors) if interceptors else None)


def make_sync_channel(target: str, cert_dir, actor: str, insecure: bool = False,
                      options: Iterable[tuple[str, Any]] | None = None) -> grpc.Channel:
    """Blocking-API twin of :func:`make_channel` (returns a ``grpc.Channel``)."""
    opts = _merge_options(CHANNEL_OPTIONS, options)
    if insecure:
        role_of(actor)
        return grpc.intercept_channel(grpc.insecure_channel(target, options=opts), _SyncActorHeader(actor))
    return grpc.secure_channel(target, channel_credentials(cert_dir, actor), options=opts)

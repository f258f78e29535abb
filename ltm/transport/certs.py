"""A private certificate authority and per-actor leaf certificates for mutual TLS.

Every actor gets one EC P-256 key and one certificate signed by the deployment's CA.  The
certificate names the actor twice: subject ``CN=<actor>`` and a SAN URI ``ltm://actor/<actor>``
(the SAN is what :func:`ltm.transport.tls.peer_identity` prefers).  What else it carries depends on
the role, so that a certificate is good only for what its actor does:

* ``server-<n>``: EKU serverAuth (and clientAuth, for ``ltm health --as server-<n>`` probes); DNS
  SAN ``server-<n>`` (clients pin the server's identity with ``grpc.ssl_target_name_override``)
  and a DNS/IP SAN per host it listens on (``hosts``, default ``localhost`` and ``127.0.0.1``;
  ``server-<n>=HOST`` for one server only).  A certificate names one actor identity, its own:
  a host name that is an identity goes into that actor's certificate only (:func:`hosts_by_actor`),
  and one that is another actor's is refused (:func:`host_problem`).
* ``analyst``: EKU clientAuth (it calls the servers) and serverAuth for its own service only:
  DNS SAN ``analyst`` plus the analyst's own hosts (``analyst_hosts``, default none) — never the
  servers' hosts, so its certificate is not valid where a server serves.
* ``party-<id>``, ``operator``: EKU clientAuth only, no DNS or IP names: they never serve.

Parties and the analyst pin the server identity the job spec names for each endpoint, so a
certificate of another actor of the same CA (the analyst's, a party's) at a server's address
fails the handshake.

**The CA key never goes to an actor.**  The actors' directory (``--out``) receives ``ca.pem`` and
the leaves only.  The CA key lives in its own directory, the same everywhere: ``--ca-dir``
(``ca.key`` 0600 and ``ca.pem``, directory 0700), on the CA host (offline if possible), never on a
server, party or analyst host — whoever holds it can mint a server identity.  The library call
:func:`write_certs` discards the key unless given ``ca_dir`` (no further leaves can be issued:
make a new CA and re-issue every leaf instead).

**Across machines, no private key travels either** (:func:`make_request`, :func:`check_request`,
:func:`sign_request`): each actor's host makes its own key and a certificate signing request
(``ltm certs request``); the CA host checks the request against the role's policy — subject
``O=LTM, OU=<role>, CN=<actor>``, the role's usages exactly, the URI ``ltm://actor/<actor>``, host
names for serving roles only and never another actor's identity — and signs it (``ltm certs
sign``). Only requests and certificates are copied.

Actor names: ``analyst``, ``operator``, ``server-<n>``, ``party-<id>``, with the job grammar's rules
(:mod:`ltm.identifiers`: ASCII, no leading zero, at most 64 characters, no ``..``).  ``ltm certs sign``
never writes over an existing file without ``--force``, nor ever over the CA's own files.

Command line (its flags: ``ltm/cli/certs.py``, which calls the ``run_*`` functions here)::

    # one machine (tests, the demo, compose and Kubernetes bundles):
    ltm certs --out certs/ --servers 3 --parties 4 --analyst [--hosts h1,server-1=10.0.0.5] [--analyst-hosts a1]
              [--ca-dir ca/] [--force]
    ltm certs --out certs/ --actors server-0,server-1,analyst
    # across machines:
    ltm certs ca --ca-dir ca/                                                   # CA host
    ltm certs request --role server --id server-2 --out certs/ --hosts 10.0.0.12   # server-2's host
    ltm certs sign --ca-dir ca/ server-2.csr --expect server-2 --out issued/       # CA host
"""
from __future__ import annotations

import argparse
import datetime as _dt
import ipaddress
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import NamedTuple, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ltm.errors import LtmError
from ltm.identifiers import party_id_problem, server_id_problem, shown
from ltm.transport.files import private_dir, write_private

__all__ = [
    "ACTOR_RE",
    "ACTOR_URI_PREFIX",
    "DEFAULT_HOSTS",
    "CSRPolicyError",
    "CertPaths",
    "check_request",
    "create_ca_dir",
    "host_problem",
    "hosts_by_actor",
    "load_ca",
    "make_request",
    "role_sans",
    "role_usages",
    "sign_request",
    "sign_request_file",
    "write_request",
    "run_ca",
    "run_certs",
    "run_request",
    "run_sign",
    "create_ca",
    "issue_leaf",
    "role_of",
    "validate_actor",
    "bundles_complete",
    "write_bundles",
    "write_certs",
]

#: An actor identity, the grammar of ``ltm.identifiers`` (ASCII only): ``server-<n>`` without leading
#: zeros, ``party-<id>`` of at most 64 characters without ``..``.
ACTOR_RE = re.compile(r"^(analyst|operator|server-(0|[1-9][0-9]{0,8})|party-(?!.*\.\.)[A-Za-z0-9_.-]{1,58})$",
                      re.ASCII)
ACTOR_URI_PREFIX = "ltm://actor/"
DEFAULT_HOSTS: tuple[str, ...] = ("localhost", "127.0.0.1")
CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"

_BACKDATE = _dt.timedelta(minutes=5)  # tolerate small clock skew between machines


class CertPaths(NamedTuple):
    cert: Path
    key: Path | None


# ---------------------------------------------------------------------------- names
def validate_actor(actor: str) -> str:
    """Return ``actor`` if it is a well-formed actor name (the job grammar's, :mod:`ltm.identifiers`:
    a server id ``server-<n>``, a party id ``party-<id>``, or ``analyst``/``operator``), else raise
    ``ValueError`` (the name cut short in the message)."""
    if isinstance(actor, str) and ACTOR_RE.fullmatch(actor):
        return actor
    problem = (server_id_problem(actor, "the name") if isinstance(actor, str) and actor.startswith("server-") else
               party_id_problem(actor, "the name") if isinstance(actor, str) and actor.startswith("party-") else None)
    raise ValueError(f"bad actor name: {problem}" if problem else
                     f"bad actor name {shown(actor)}: expected 'analyst', 'operator', 'server-<n>' or 'party-<id>' "
                     f"(id of letters, digits, '_', '.', '-')")


def role_of(actor: str) -> str:
    """``"server-2"`` → ``"server"``, ``"party-17"`` → ``"party"``, ``"analyst"`` → ``"analyst"``,
    ``"operator"`` (who drives the analyst service) → ``"operator"``."""
    validate_actor(actor)
    if actor in ("analyst", "operator"):
        return actor
    return actor.split("-", 1)[0]


# ---------------------------------------------------------------------------- certificates
def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _validity(days: int) -> tuple[_dt.datetime, _dt.datetime]:
    if days < 1:
        raise ValueError(f"days must be ≥ 1, got {days}")
    now = _dt.datetime.now(_dt.timezone.utc)
    return now - _BACKDATE, now + _dt.timedelta(days=days)


def create_ca(common_name: str = "LTM test CA", days: int = 365):
    """A self-signed CA: ``(private_key, certificate)``; it may sign leaves only (pathlen 0)."""
    key = _new_key()
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "LTM"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])
    not_before, not_after = _validity(days)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$",
                          re.ASCII)
#: What looks like an actor identity as a DNS name (case-insensitive, as DNS compares; wider than
#: :data:`ACTOR_RE`, so that ``server-01`` or ``SERVER-1`` cannot stand beside another identity either)
_IDENTITY_RE = re.compile(r"^(analyst|operator|server-[0-9]+|party-[A-Za-z0-9_.-]+)$", re.IGNORECASE | re.ASCII)


def host_problem(actor: str, host: str) -> str | None:
    """Why the DNS name ``host`` may not be in ``actor``'s certificate (one line), or None.

    A host name is an LDH name (letters, digits, '-', dots; no wildcard) and never another actor's
    identity: a party pins a server, and the operator the analyst, by its identity as a DNS name,
    so a certificate naming ``server-0`` passes for server-0 whoever holds it."""
    if host.lower() == actor.lower():
        return None
    if not _HOSTNAME_RE.fullmatch(host):
        return f"DNS name {shown(host)} is not a host name (letters, digits, '-' and dots; no wildcard)"
    if _IDENTITY_RE.fullmatch(host):
        return (f"DNS name {shown(host)} is an actor identity that is not {actor!r}: a certificate with it "
                f"could pass for that actor")
    return None


def _host_san(host: str, actor: str) -> x509.GeneralName:
    """The SAN for ``host`` in ``actor``'s certificate: an IP address, or a DNS name that passes
    :func:`host_problem` for it (``ValueError`` otherwise)."""
    host = host.strip()
    if not host:
        raise ValueError("empty host name")
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        pass
    problem = host_problem(actor, host)
    if problem:
        raise ValueError(problem)
    return x509.DNSName(host)


#: Roles whose certificates may serve TLS (carry serverAuth and host names).
SERVING_ROLES = ("server", "analyst")


def role_usages(role: str) -> list[x509.ObjectIdentifier]:
    """The extended key usages a certificate of ``role`` gets: serverAuth for serving roles (server,
    analyst), and clientAuth for every role (a server too: it probes its own health as itself)."""
    return ([ExtendedKeyUsageOID.SERVER_AUTH] if role in SERVING_ROLES else []) + [ExtendedKeyUsageOID.CLIENT_AUTH]


def role_sans(actor: str, hosts: Sequence[str] | None = None) -> list[x509.GeneralName]:
    """The subject alternative names a certificate of ``actor`` gets: the URI ``ltm://actor/<actor>``;
    for serving roles also DNS ``<actor>`` and a DNS or IP name per entry of ``hosts`` (default for a
    server: ``localhost``, ``127.0.0.1``; for the analyst: none). Non-serving roles name no host."""
    role = role_of(actor)
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(ACTOR_URI_PREFIX + actor)]
    if role in SERVING_ROLES:
        sans.append(x509.DNSName(actor))
        default_hosts = DEFAULT_HOSTS if role == "server" else ()
        for host in (default_hosts if hosts is None else hosts):
            san = _host_san(host, actor)
            if san not in sans:
                sans.append(san)
    return sans


def _subject(actor: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "LTM"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role_of(actor)),
        x509.NameAttribute(NameOID.COMMON_NAME, actor),
    ])


def _sign_leaf(ca_key, ca_cert: x509.Certificate, actor: str, public_key, sans: list[x509.GeneralName],
               days: int) -> x509.Certificate:
    """The leaf for ``actor``'s ``public_key``: subject, usages and key usage from the actor's role
    (never from a request), the given (already checked) SANs, signed by the CA."""
    not_before, not_after = _validity(days)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(_subject(actor))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(min(not_after, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(role_usages(role_of(actor))), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def issue_leaf(ca_key, ca_cert: x509.Certificate, actor: str, hosts: Sequence[str] | None = None,
               days: int = 365):
    """A leaf for ``actor`` signed by the CA: ``(private_key, certificate)``.

    Subject ``CN=<actor>``, SAN URI ``ltm://actor/<actor>``.  Serving roles (server, analyst) also
    get DNS ``<actor>`` (so a client can require that identity with
    ``grpc.ssl_target_name_override``) and a DNS or IP SAN per entry of ``hosts`` (default for a
    server: ``localhost``, ``127.0.0.1``; for the analyst: none) and EKU serverAuth; every role gets
    clientAuth.  ``hosts`` is ignored for
    non-serving roles: their certificates name no host at all.
    """
    validate_actor(actor)
    key = _new_key()
    return key, _sign_leaf(ca_key, ca_cert, actor, key.public_key(), role_sans(actor, hosts), days)


# ---------------------------------------------------------------------------- signing requests
class CSRPolicyError(LtmError, ValueError):
    """A certificate signing request the CA refuses: the message says which rule it breaks."""

    exit_code = 2




_RDN = {NameOID.ORGANIZATION_NAME: "O", NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.COMMON_NAME: "CN"}


def _usage_names(usages) -> list[str]:
    known = {ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth", ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth"}
    return [known.get(u, u.dotted_string) for u in usages]


def make_request(actor: str, hosts: Sequence[str] | None = None):
    """A new key for ``actor`` and its signing request: ``(private_key, csr)``. The request asks for
    exactly what the CA grants the role (subject, usages, SANs of :func:`role_sans`); the key stays
    with the caller."""
    validate_actor(actor)
    key = _new_key()
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_subject(actor))
        .add_extension(x509.SubjectAlternativeName(role_sans(actor, hosts)), critical=False)
        .add_extension(x509.ExtendedKeyUsage(role_usages(role_of(actor))), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, csr


def check_request(csr: x509.CertificateSigningRequest, expect: str | None = None) -> tuple[str, list[x509.GeneralName]]:
    """The actor a signing request is for and the SANs its certificate may carry, or
    :class:`CSRPolicyError` naming what is not allowed.

    Allowed: a valid self-signature by an EC P-256 key; subject exactly ``O=LTM, OU=<role>,
    CN=<actor>`` with a well-formed actor name of that role (and, given ``expect``, that actor); no
    extension but SubjectAlternativeName and ExtendedKeyUsage; usages, if requested, exactly the
    role's (:func:`role_usages`); SANs: the URI ``ltm://actor/<actor>`` once and no other URI, and
    for serving roles DNS ``<actor>`` plus host names (LDH names, no wildcard, none that is another
    actor's identity, compared case-insensitively: a client pins a server by that DNS name) and IP
    addresses; for other roles no DNS or IP name at all.
    """
    if not csr.is_signature_valid:
        raise CSRPolicyError("the request's signature does not verify (damaged or not made with its key)")
    key = csr.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise CSRPolicyError("the request's key is not an EC P-256 key (make it with `ltm certs request`)")
    with warnings.catch_warnings():  # cryptography warns of a CN over 64 characters: refused below, in one line
        warnings.simplefilter("ignore")
        attrs = [(a.oid, a.value if isinstance(a.value, str) else a.value.decode("latin-1")) for a in csr.subject]
    names = {oid: value for oid, value in attrs}
    if len(attrs) != 3 or set(names) != {NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME,
                                          NameOID.COMMON_NAME} or names[NameOID.ORGANIZATION_NAME] != "LTM":
        raise CSRPolicyError(f"subject {shown(', '.join(f'{_RDN.get(o, o.dotted_string)}={v}' for o, v in attrs))}: expected exactly "
                             f"O=LTM, OU=<role>, CN=<actor>")
    actor, role = str(names[NameOID.COMMON_NAME]), str(names[NameOID.ORGANIZATIONAL_UNIT_NAME])
    try:
        validate_actor(actor)
    except ValueError as exc:
        raise CSRPolicyError(str(exc)) from None
    if role_of(actor) != role:
        raise CSRPolicyError(f"the request names role {shown(role)} for actor {actor!r}, whose role is {role_of(actor)!r}")
    if expect is not None and actor != expect:
        raise CSRPolicyError(f"the request is for {actor!r}, not the expected {shown(expect)}")
    allowed = {x509.SubjectAlternativeName, x509.ExtendedKeyUsage}
    for ext in csr.extensions:
        if type(ext.value) not in allowed:
            raise CSRPolicyError(f"the request asks for extension {type(ext.value).__name__} "
                                 f"({ext.oid.dotted_string}); only subjectAltName and extendedKeyUsage are allowed")
    try:
        eku = csr.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        eku = None
    want = role_usages(role)
    if eku is not None and sorted(u.dotted_string for u in eku) != sorted(u.dotted_string for u in want):
        raise CSRPolicyError(f"a {role} certificate has usages {_usage_names(want)}, "
                             f"the request asks for {_usage_names(eku)}")
    try:
        sans = list(csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        raise CSRPolicyError("the request names no subjectAltName (it needs at least ltm://actor/<actor>)") from None
    uris = [s.value for s in sans if isinstance(s, x509.UniformResourceIdentifier)]
    if uris != [ACTOR_URI_PREFIX + actor]:
        raise CSRPolicyError(f"the request's URI names {uris} must be exactly [{ACTOR_URI_PREFIX + actor!r}]")
    serving = role in SERVING_ROLES
    for san in sans:
        if isinstance(san, x509.UniformResourceIdentifier):
            continue
        if not serving and isinstance(san, (x509.DNSName, x509.IPAddress)):
            raise CSRPolicyError(f"a {role} certificate names no host (it never serves); the request asks for {san.value}")
        if isinstance(san, x509.IPAddress):
            continue
        if not isinstance(san, x509.DNSName):
            raise CSRPolicyError(f"the request asks for a {type(san).__name__} name; only URI, DNS and IP names are allowed")
        problem = host_problem(actor, san.value)
        if problem:
            raise CSRPolicyError(problem)
    if serving and x509.DNSName(actor) not in sans:
        raise CSRPolicyError(f"a {role} certificate names its identity as DNS {actor!r}; the request does not")
    return actor, sans


def sign_request(ca_key, ca_cert: x509.Certificate, csr: x509.CertificateSigningRequest, *,
                 expect: str | None = None, days: int = 365) -> tuple[str, x509.Certificate]:
    """Check ``csr`` (:func:`check_request`) and sign it: ``(actor, certificate)``. Subject, usages
    and key usage come from the role, the SANs from the checked request."""
    actor, sans = check_request(csr, expect)
    return actor, _sign_leaf(ca_key, ca_cert, actor, csr.public_key(), sans, days)


# ---------------------------------------------------------------------------- files
def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,  # "BEGIN PRIVATE KEY": what gRPC/BoringSSL reads
        serialization.NoEncryption(),
    )


def _write_atomic(path: Path, data: bytes, mode: int, *, replace: bool = True) -> None:
    """Write via a same-directory temp file created with ``mode``, then rename over ``path``; with
    ``replace=False`` link it to ``path`` instead, which fails (``FileExistsError``) if anything is
    there, a dangling link included — no window between a check and the write."""
    if not replace and os.path.lexists(path):  # before the work, for a plain message
        raise FileExistsError(f"{path} already exists; refusing to replace it (use --force)")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileExistsError(f"{path} already exists; refusing to replace it (use --force)") from None
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def hosts_by_actor(actors: Sequence[str], hosts: Sequence[str] | None = None,
                   analyst_hosts: Sequence[str] = ()) -> dict[str, list[str]]:
    """Which host names go into which serving actor's certificate (the one-machine ``ltm certs``).

    ``hosts`` (default ``localhost``, ``127.0.0.1``) are the servers': a plain host name or IP goes
    to every server; ``server-<n>=HOST`` to that server only; a name that is an actor identity
    (``server-1``, as compose names its containers) to that actor's own certificate only — never to
    another's, where it would let that certificate pass for it.  ``analyst_hosts`` are the analyst's.
    Refused (``ValueError``): an identity or ``server-<n>=`` naming a server not issued here, and any
    name :func:`host_problem` refuses for its certificate (e.g. ``--analyst-hosts server-0``)."""
    servers = [a for a in actors if role_of(a) == "server"]
    out: dict[str, list[str]] = {a: [] for a in actors if role_of(a) in SERVING_ROLES}
    for entry in (DEFAULT_HOSTS if hosts is None else hosts):
        entry = entry.strip()
        owner, _, name = entry.rpartition("=") if "=" in entry else ("", "", entry)
        if not owner and _IDENTITY_RE.fullmatch(entry):
            owner = entry.lower()
        if owner and owner not in servers:
            raise ValueError(f"--hosts {shown(entry)}: {shown(owner)} is not a server issued here "
                             f"({', '.join(servers) or 'none'}); a host name that is an actor identity goes into "
                             f"that actor's certificate only")
        for server in ([owner] if owner else servers):
            out[server].append(name)
    if "analyst" in out:
        out["analyst"] = [h.strip() for h in analyst_hosts]
    for actor, names in out.items():
        role_sans(actor, names)  # every name checked for its certificate (ValueError naming the first refused)
    return out


def write_certs(directory, actors: Sequence[str], hosts: Sequence[str] | None = None, *,
                analyst_hosts: Sequence[str] = (), ca_dir=None, force: bool = False,
                days: int = 365) -> dict[str, CertPaths]:
    """Create a fresh CA and a leaf per actor in ``directory``; return the paths written.

    ``directory`` (what the actors get): ``ca.pem``, ``<actor>.pem``, ``<actor>.key`` (0600).
    ``hosts``: the servers' host names/IPs; ``analyst_hosts``: the analyst's own (which certificate
    gets which: :func:`hosts_by_actor`).  The CA key is written to ``ca_dir/ca.key`` (directory 0700, key 0600;
    ``ca.pem`` beside it, so ``ltm certs sign --ca-dir`` can sign more leaves later) if
    ``ca_dir`` is given — it must not be ``directory`` — and discarded otherwise; it is never put
    where the actors' files are (a stale ``ca.key`` there from an older layout is removed).
    Refuses (``FileExistsError``) if ``ca.pem`` (or ``ca_dir/ca.key``) already exists unless
    ``force``: a new CA silently invalidates every certificate already handed out.
    The result maps ``"ca"`` (key: None when discarded) and each actor to ``CertPaths(cert, key)``.
    """
    actors = list(actors)
    for actor in actors:
        validate_actor(actor)
    dupes = sorted({a for a in actors if actors.count(a) > 1})
    if dupes:
        raise ValueError(f"duplicate actor names: {', '.join(dupes)}")
    if not actors:
        raise ValueError("no actors to issue certificates for")
    names = hosts_by_actor(actors, hosts, analyst_hosts)  # checked before touching the disk

    out = Path(directory)
    key_dir = Path(ca_dir) if ca_dir is not None else None
    if key_dir is not None and (key_dir.resolve() == out.resolve() or out.resolve() in key_dir.resolve().parents):
        raise ValueError(f"the CA key directory must not be the actors' certificate directory {str(out)!r}: "
                         f"the CA key never goes to an actor")
    out.mkdir(parents=True, exist_ok=True)
    ca_paths = CertPaths(out / CA_CERT_FILE, key_dir / CA_KEY_FILE if key_dir is not None else None)
    existing = [p for p in ca_paths if p is not None and p.exists()]
    if existing and not force:
        raise FileExistsError(
            f"{', '.join(str(p) for p in existing)} already exists; refusing to replace the CA "
            f"(every certificate it signed would stop working). Use force=True / --force."
        )

    ca_key, ca_cert = create_ca(days=days)
    result: dict[str, CertPaths] = {"ca": ca_paths}
    leaves = {actor: issue_leaf(ca_key, ca_cert, actor, names.get(actor), days=days) for actor in actors}
    (out / CA_KEY_FILE).unlink(missing_ok=True)  # never beside the actors' files
    if ca_paths.key is not None:
        private_dir(ca_paths.key.parent)
        write_private(ca_paths.key, _key_pem(ca_key))
        # the CA's certificate beside its key: the CA directory is what `ltm certs sign --ca-dir` reads
        _write_atomic(ca_paths.key.parent / CA_CERT_FILE, _cert_pem(ca_cert), 0o644)
    _write_atomic(ca_paths.cert, _cert_pem(ca_cert), 0o644)
    for actor, (key, cert) in leaves.items():
        paths = CertPaths(out / f"{actor}.pem", out / f"{actor}.key")
        _write_atomic(paths.key, _key_pem(key), 0o600)
        _write_atomic(paths.cert, _cert_pem(cert), 0o644)
        result[actor] = paths
    return result


def create_ca_dir(ca_dir, *, days: int = 365, force: bool = False) -> CertPaths:
    """A new CA in ``ca_dir``: ``ca.key`` (0600, directory 0700) and ``ca.pem``; refuses
    (``FileExistsError``) to replace an existing one unless ``force``."""
    d = Path(ca_dir)
    paths = CertPaths(d / CA_CERT_FILE, d / CA_KEY_FILE)
    existing = [q for q in paths if q is not None and q.exists()]
    if existing and not force:
        raise FileExistsError(f"{', '.join(map(str, existing))} already exists; refusing to replace the CA "
                              f"(every certificate it signed would stop working). Use --force.")
    key, cert = create_ca(days=days)
    private_dir(d)
    write_private(paths.key, _key_pem(key))
    _write_atomic(paths.cert, _cert_pem(cert), 0o644)
    return paths


def load_ca(ca_dir):
    """``(ca_key, ca_cert)`` from a CA directory made by ``ltm certs ca`` or ``ltm certs --ca-dir``."""
    d = Path(ca_dir)
    missing = [str(d / f) for f in (CA_KEY_FILE, CA_CERT_FILE) if not (d / f).is_file()]
    if missing:
        raise FileNotFoundError(f"no CA in {str(d)!r}: {', '.join(missing)} missing "
                                f"(create one with `ltm certs ca --ca-dir {d}`)")
    key = serialization.load_pem_private_key((d / CA_KEY_FILE).read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate((d / CA_CERT_FILE).read_bytes())
    if cert.public_key().public_numbers() != key.public_key().public_numbers():
        raise ValueError(f"{d / CA_KEY_FILE} is not the key of {d / CA_CERT_FILE}")
    return key, cert


def write_request(directory, actor: str, hosts: Sequence[str] | None = None, *,
                  force: bool = False) -> CertPaths:
    """On the actor's own host: a new key ``<actor>.key`` (0600, directory 0700) and its signing
    request ``<actor>.csr`` in ``directory`` — the request goes to the CA, the key never leaves.
    Refuses (``FileExistsError``) to replace a key already there unless ``force`` (it may be the key
    of a certificate in use). Returns ``CertPaths(csr, key)``."""
    validate_actor(actor)
    for host in hosts or ():
        _host_san(host, actor)  # validate before touching the disk
    d = private_dir(directory)
    key_path, csr_path = d / f"{actor}.key", d / f"{actor}.csr"
    if key_path.exists() and not force:
        raise FileExistsError(f"{key_path} already exists; refusing to replace a key that may be in use. Use --force.")
    key, csr = make_request(actor, hosts)
    write_private(key_path, _key_pem(key))
    _write_atomic(csr_path, csr.public_bytes(serialization.Encoding.PEM), 0o644)
    return CertPaths(csr_path, key_path)


def sign_request_file(ca_dir, csr_path, out, *, expect: str | None = None, days: int = 365,
                      force: bool = False) -> tuple[str, Path]:
    """On the CA host: check and sign the request in ``csr_path`` with the CA in ``ca_dir``; write the
    certificate to ``out`` (a file, or ``<actor>.pem`` in ``out`` when it is a directory or ends in
    ``/``). Returns ``(actor, certificate path)``; :class:`CSRPolicyError` if the request is refused.

    An existing file is never replaced unless ``force`` (``FileExistsError``), and the CA's own
    files (``ca_dir/ca.key``, ``ca_dir/ca.pem``) never, not even with ``force``: a certificate
    written over the CA key would end the CA."""
    try:
        csr = x509.load_pem_x509_csr(Path(csr_path).read_bytes())
    except ValueError:
        raise CSRPolicyError(f"{csr_path} is not a PEM certificate signing request") from None
    ca_key, ca_cert = load_ca(ca_dir)
    actor, cert = sign_request(ca_key, ca_cert, csr, expect=expect, days=days)
    target = Path(out)
    if target.is_dir() or str(out).endswith("/"):
        target.mkdir(parents=True, exist_ok=True)
        target = target / f"{actor}.pem"
    ca_files = {(Path(ca_dir) / f).resolve() for f in (CA_KEY_FILE, CA_CERT_FILE)}
    if target.resolve() in ca_files:
        raise ValueError(f"--out {str(target)!r} is the CA's own file: write the certificate elsewhere")
    _write_atomic(target, _cert_pem(cert), 0o644, replace=force)
    return actor, target


def bundles_complete(bundles_dir, actors: Sequence[str]) -> bool:
    """True when every actor's bundle under ``bundles_dir`` holds its three files and all bundles
    carry the same ``ca.pem`` (so the actors, already running or not, trust one another)."""
    out = Path(bundles_dir)
    cas = set()
    for actor in actors:
        files = [out / actor / CA_CERT_FILE, out / actor / f"{actor}.pem", out / actor / f"{actor}.key"]
        if not all(f.is_file() and f.stat().st_size > 0 for f in files):
            return False
        cas.add(files[0].read_bytes())
    return len(cas) == 1


def write_bundles(ca_dir, bundles_dir, actors: Sequence[str]) -> dict[str, Path]:
    """Copy, for each actor, only what it may hold into ``bundles_dir/<actor>/``: ``ca.pem``,
    ``<actor>.pem`` and ``<actor>.key`` (0600) — never ``ca.key`` and never another actor's key.
    Each bundle is a certificate directory an actor can be given as ``--certs`` on its own host,
    in its own container volume or Kubernetes Secret.  Returns actor → bundle directory.
    """
    src = Path(ca_dir)
    out = Path(bundles_dir)
    ca_pem = (src / CA_CERT_FILE).read_bytes()
    result: dict[str, Path] = {}
    for actor in actors:
        validate_actor(actor)
        bundle = out / actor
        bundle.mkdir(parents=True, exist_ok=True)
        os.chmod(bundle, 0o700)
        for stale in bundle.iterdir():  # a bundle holds exactly three files (a re-issue replaces them)
            if stale.is_file() and stale.name not in (CA_CERT_FILE, f"{actor}.pem", f"{actor}.key"):
                stale.unlink()
        _write_atomic(bundle / CA_CERT_FILE, ca_pem, 0o644)
        _write_atomic(bundle / f"{actor}.pem", (src / f"{actor}.pem").read_bytes(), 0o644)
        _write_atomic(bundle / f"{actor}.key", (src / f"{actor}.key").read_bytes(), 0o600)
        result[actor] = bundle
    return result


# ---------------------------------------------------------------------------- CLI
def _actors_from_args(args: argparse.Namespace) -> list[str]:
    actors = [f"server-{i}" for i in range(args.servers)]
    actors += [f"party-{i}" for i in range(args.parties)]
    if args.analyst:
        actors += ["analyst", "operator"]
    for actor in args.actors:
        if actor not in actors:
            actors.append(actor)
    return actors


def run_certs(args: argparse.Namespace) -> int:
    """``ltm certs --out DIR …``: the CA and every named actor's certificate on this machine; returns 0."""
    if not args.out:
        raise ValueError("--out is required: `ltm certs --out DIR --servers K ...` (the one-machine shortcut), "
                         "or a subcommand: ca, request, sign")
    actors = _actors_from_args(args)
    if not actors:
        raise ValueError("nothing to issue: give --servers, --parties, --analyst or --actors")
    if args.if_missing and not args.bundles:
        raise ValueError("--if-missing needs --bundles")
    if args.if_missing and bundles_complete(args.bundles, actors):
        print(f"every bundle in {args.bundles} is present and from one CA: nothing issued")
        return 0
    ca_dir = Path(args.ca_dir) if args.ca_dir else Path(str(Path(args.out)).rstrip("/") + "-ca")
    try:
        paths = write_certs(args.out, actors, args.hosts, analyst_hosts=args.analyst_hosts, ca_dir=ca_dir,
                            force=args.force, days=args.days)
    except FileExistsError as exc:
        raise ValueError(str(exc)) from None  # `ltm` reports ValueError as a one-line error
    names = hosts_by_actor(actors, args.hosts, args.analyst_hosts)
    print(f"CA       {paths['ca'].cert}  (public: give it to every actor)")
    for actor in actors:
        p = paths[actor]
        where = (f"DNS {actor}" + "".join(f", {h}" for h in names[actor] if h.lower() != actor)
                 if actor in names else "client only")
        print(f"{actor:<8} {p.cert}  (key {p.key}, mode 0600; SAN {ACTOR_URI_PREFIX}{actor}, {where})")
    if args.bundles:
        for actor, bundle in write_bundles(args.out, args.bundles, actors).items():
            print(f"bundle   {bundle}/  (ca.pem, {actor}.pem, {actor}.key: give this directory to {actor} only)")
    print(f"CA KEY   {paths['ca'].key}  (mode 0600) — keep it on this machine (the CA host), offline if you can; "
          f"NEVER copy it to a server, party or analyst host: whoever holds it can mint a server identity. "
          f"{args.out} holds only what the actors need (ca.pem and each actor's own .pem/.key).")
    return 0


def run_ca(args: argparse.Namespace) -> int:
    """``ltm certs ca``: create the CA in ``--ca-dir``; returns 0."""
    try:
        paths = create_ca_dir(args.ca_dir, days=args.days, force=args.force)
    except FileExistsError as exc:
        raise ValueError(str(exc)) from None
    print(f"CA       {paths.cert}  (public: give it to every actor with its certificate)")
    print(f"CA KEY   {paths.key}  (mode 0600) — keep it on this machine, offline if you can; NEVER copy it "
          f"to a server, party or analyst host: whoever holds it can mint a server identity.")
    return 0


def run_request(args: argparse.Namespace) -> int:
    """``ltm certs request``: this host's key and a signing request for the CA; returns 0."""
    if args.id is None and args.role in ("server", "party"):
        raise ValueError(f"--id is required for a {args.role} (e.g. --id {args.role}-0)")
    actor = args.id or args.role
    validate_actor(actor)
    if role_of(actor) != args.role:
        raise ValueError(f"--id {actor!r} is not a {args.role} identity (expected "
                         f"{'server-<n>' if args.role == 'server' else 'party-<id>' if args.role == 'party' else args.role})")
    if args.hosts and args.role not in SERVING_ROLES:
        raise ValueError(f"--hosts is for serving roles (server, analyst): a {args.role} certificate names no host")
    try:
        paths = write_request(args.out, actor, args.hosts, force=args.force)
    except FileExistsError as exc:
        raise ValueError(str(exc)) from None
    names = ", ".join(str(getattr(s, "value", s)) for s in role_sans(actor, args.hosts))
    print(f"KEY      {paths.key}  (mode 0600) — stays on this host; it is never sent anywhere")
    print(f"REQUEST  {paths.cert}  (public) — send it to the CA host; it asks for {actor}: {names}")
    print(f"then put the signed {actor}.pem and the CA's ca.pem into {args.out}/ (the --certs directory)")
    return 0


def run_sign(args: argparse.Namespace) -> int:
    """``ltm certs sign``: check a signing request against its role and sign it; returns 0."""
    try:
        actor, path = sign_request_file(args.ca_dir, args.csr, args.out, expect=args.expect, days=args.days,
                                        force=args.force)
    except (FileNotFoundError, FileExistsError) as exc:
        raise ValueError(str(exc)) from None
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    print(f"SIGNED   {path}  for {actor} ({role_of(actor)}): {', '.join(_usage_names(usages))}; "
          f"names {', '.join(str(s.value) for s in sans)}; valid until {cert.not_valid_after_utc:%Y-%m-%d}")
    print(f"send it with {Path(args.ca_dir) / CA_CERT_FILE} to {actor}'s host (both public); the CA key stays here")
    return 0

"""A private certificate authority and per-actor leaf certificates for mutual TLS.

Every actor gets one EC P-256 key and one certificate signed by the deployment's CA.  The
certificate names the actor twice: subject ``CN=<actor>`` and a SAN URI ``ltm://actor/<actor>``
(the SAN is what :func:`transport.tls.peer_identity` prefers).  What else it carries depends on
the role, so that a certificate is good only for what its actor does:

* ``server-<n>``: EKU serverAuth (and clientAuth, for ``ltm health --as server-<n>`` probes); DNS
  SAN ``server-<n>`` (clients pin the server's identity with ``grpc.ssl_target_name_override``)
  and a DNS/IP SAN per host it listens on (``hosts``, default ``localhost`` and ``127.0.0.1``).
* ``analyst``: EKU clientAuth (it calls the servers) and serverAuth for its own service only:
  DNS SAN ``analyst`` plus the analyst's own hosts (``analyst_hosts``, default none) — never the
  servers' hosts, so its certificate is not valid where a server serves.
* ``party-<id>``, ``operator``: EKU clientAuth only, no DNS or IP names: they never serve.

Parties and the analyst pin the server identity the job spec names for each endpoint, so a
certificate of another actor of the same CA (the analyst's, a party's) at a server's address
fails the handshake.

**The CA key never goes to an actor.**  The actors' directory (``--out``) receives ``ca.pem`` and
the leaves only.  ``ltm certs`` writes the CA key to a separate directory (``--ca-dir``, default
``<out>-ca``, mode 0700/0600): keep it on the operator's machine (offline), never copy it to a
server, party or analyst host — whoever holds it can mint a server identity.  The library call
:func:`write_certs` discards the key unless given ``ca_dir`` (no further leaves can be issued:
make a new CA and re-issue every leaf instead).

Actor names: ``analyst``, ``operator``, ``server-<int>``, ``party-<id>`` (id: letters, digits,
``_ . -``).

Command line (wired into ``ltm`` by :func:`add_certs_parser`)::

    ltm certs --out certs/ --servers 3 --parties 4 --analyst [--hosts h1,10.0.0.5] [--analyst-hosts a1]
              [--ca-dir ca/] [--force]
    ltm certs --out certs/ --actors server-0,server-1,analyst
"""
from __future__ import annotations

import argparse
import datetime as _dt
import ipaddress
import os
import re
import tempfile
from pathlib import Path
from typing import NamedTuple, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from transport.files import private_dir, write_private

__all__ = [
    "ACTOR_RE",
    "ACTOR_URI_PREFIX",
    "DEFAULT_HOSTS",
    "CertPaths",
    "add_certs_parser",
    "certs_main",
    "create_ca",
    "issue_leaf",
    "role_of",
    "validate_actor",
    "bundles_complete",
    "write_bundles",
    "write_certs",
]

ACTOR_RE = re.compile(r"^(analyst|operator|server-\d+|party-[A-Za-z0-9_.-]+)$")
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
    """Return ``actor`` if it is a well-formed actor name, else raise ``ValueError``."""
    if not isinstance(actor, str) or not ACTOR_RE.fullmatch(actor):
        raise ValueError(
            f"bad actor name {actor!r}: expected 'analyst', 'operator', 'server-<n>' or 'party-<id>' "
            f"(id of letters, digits, '_', '.', '-')"
        )
    return actor


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


def _host_san(host: str) -> x509.GeneralName:
    host = host.strip()
    if not host:
        raise ValueError("empty host name")
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


#: Roles whose certificates may serve TLS (carry serverAuth and host names).
SERVING_ROLES = ("server", "analyst")


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
    role = role_of(actor)
    key = _new_key()
    not_before, not_after = _validity(days)
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(ACTOR_URI_PREFIX + actor)]
    usages = []
    if role in SERVING_ROLES:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        sans.append(x509.DNSName(actor))
        default_hosts = DEFAULT_HOSTS if role == "server" else ()
        for host in (default_hosts if hosts is None else hosts):
            san = _host_san(host)
            if san not in sans:
                sans.append(san)
    usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)  # a server too: it probes its own health as itself
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "LTM"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
            x509.NameAttribute(NameOID.COMMON_NAME, actor),
        ]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
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
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


# ---------------------------------------------------------------------------- files
def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,  # "BEGIN PRIVATE KEY": what gRPC/BoringSSL reads
        serialization.NoEncryption(),
    )


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write via a same-directory temp file created with ``mode``, then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_certs(directory, actors: Sequence[str], hosts: Sequence[str] | None = None, *,
                analyst_hosts: Sequence[str] = (), ca_dir=None, force: bool = False,
                days: int = 365) -> dict[str, CertPaths]:
    """Create a fresh CA and a leaf per actor in ``directory``; return the paths written.

    ``directory`` (what the actors get): ``ca.pem``, ``<actor>.pem``, ``<actor>.key`` (0600).
    ``hosts``: the servers' host names/IPs; ``analyst_hosts``: the analyst's own (see
    :func:`issue_leaf`).  The CA key is written to ``ca_dir/ca.key`` (directory 0700, key 0600) if
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
    hosts = list(DEFAULT_HOSTS) if hosts is None else list(hosts)
    analyst_hosts = list(analyst_hosts)
    for host in hosts + analyst_hosts:
        _host_san(host)  # validate before touching the disk

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
    leaves = {actor: issue_leaf(ca_key, ca_cert, actor, analyst_hosts if actor == "analyst" else hosts, days=days)
              for actor in actors}
    (out / CA_KEY_FILE).unlink(missing_ok=True)  # never beside the actors' files
    if ca_paths.key is not None:
        private_dir(ca_paths.key.parent)
        write_private(ca_paths.key, _key_pem(ca_key))
    _write_atomic(ca_paths.cert, _cert_pem(ca_cert), 0o644)
    for actor, (key, cert) in leaves.items():
        paths = CertPaths(out / f"{actor}.pem", out / f"{actor}.key")
        _write_atomic(paths.key, _key_pem(key), 0o600)
        _write_atomic(paths.cert, _cert_pem(cert), 0o644)
        result[actor] = paths
    return result


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
def _nonneg_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--out", required=True, help="directory to write ca.pem and <actor>.pem/.key into (never the CA key)")
    p.add_argument("--servers", type=_nonneg_int, default=0, help="issue server-0 … server-(K-1)")
    p.add_argument("--parties", type=_nonneg_int, default=0, help="issue party-0 … party-(P-1)")
    p.add_argument("--analyst", action="store_true", help="issue the analyst and operator certificates")
    p.add_argument("--actors", type=_csv, default=[],
                   help="explicit comma-separated actor names (in addition to the above)")
    p.add_argument("--hosts", type=_csv, default=None,
                   help="comma-separated DNS names / IPs the servers listen on, for their certificates' SANs "
                        "(default: localhost,127.0.0.1)")
    p.add_argument("--analyst-hosts", type=_csv, default=[],
                   help="DNS names / IPs the analyst's own service listens on (default: none; clients reach it "
                        "by its identity 'analyst'); never the servers' hosts")
    p.add_argument("--ca-dir", default=None,
                   help="where the CA private key goes (default: <out>-ca); keep it on the operator's machine, "
                        "never on an actor's host")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--force", action="store_true", help="replace an existing CA in --out")
    p.add_argument("--bundles", help="also write one directory per actor here (<actor>/ca.pem, <actor>.pem, "
                                     "<actor>.key): what that actor's host gets; the CA key is in none of them (see --ca-dir)")
    p.add_argument("--if-missing", action="store_true",
                   help="with --bundles: do nothing when every bundle is already there from one CA "
                        "(an init container run again keeps the certificates running actors use)")
    return p


def _actors_from_args(args: argparse.Namespace) -> list[str]:
    actors = [f"server-{i}" for i in range(args.servers)]
    actors += [f"party-{i}" for i in range(args.parties)]
    if args.analyst:
        actors += ["analyst", "operator"]
    for actor in args.actors:
        if actor not in actors:
            actors.append(actor)
    return actors


def _run_certs(args: argparse.Namespace) -> int:
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
    hosts = ",".join(args.hosts if args.hosts is not None else DEFAULT_HOSTS)
    print(f"CA       {paths['ca'].cert}  (public: give it to every actor)")
    for actor in actors:
        p = paths[actor]
        role = role_of(actor)
        where = (f"hosts {hosts}" if role == "server" else
                 f"hosts {','.join(args.analyst_hosts) or '(none)'}" if role == "analyst" else "client only")
        print(f"{actor:<8} {p.cert}  (key {p.key}, mode 0600; SAN {ACTOR_URI_PREFIX}{actor}, {where})")
    if args.bundles:
        for actor, bundle in write_bundles(args.out, args.bundles, actors).items():
            print(f"bundle   {bundle}/  (ca.pem, {actor}.pem, {actor}.key: give this directory to {actor} only)")
    print(f"CA KEY   {paths['ca'].key}  (mode 0600) — keep it on this (operator's) machine, offline if you can; "
          f"NEVER copy it to a server, party or analyst host: whoever holds it can mint a server identity. "
          f"{args.out} holds only what the actors need (ca.pem and each actor's own .pem/.key).")
    return 0


def add_certs_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``certs`` on an ``ltm`` subparsers object; sets ``func=<runner(args)>``."""
    p = subparsers.add_parser(
        "certs", help="create a CA and per-actor mTLS certificates",
        description="Create a private CA and EC P-256 leaf certificates (CN and SAN URI "
                    "ltm://actor/<name>) for servers, parties and the analyst.",
    )
    _configure(p)
    p.set_defaults(func=_run_certs)
    return p


def certs_main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: ``certs_main(["--out", "certs", "--servers", "3", ...])``."""
    parser = _configure(argparse.ArgumentParser(prog="ltm certs"))
    args = parser.parse_args(argv)
    try:
        return _run_certs(args)
    except ValueError as exc:
        parser.exit(2, f"ltm certs: error: {exc}\n")


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(certs_main(sys.argv[1:]))

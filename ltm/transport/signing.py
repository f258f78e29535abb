"""Statements signed with an actor's TLS identity key (verified clipping over gRPC, issue #30).

Servers never talk to each other: the analyst relays each server's check seed and check output
to the others (docs/architecture.md, "Verified clipping").  So that the relay cannot forge a
server's statement, or show two servers different seed sets, each statement travels signed with
the server's own TLS key (ECDSA P-256 with SHA-256, the keys ``ltm certs`` issues) together with
its certificate; a receiver accepts it only if that certificate was issued directly by the CA it
trusts (ca.pem), is valid now, and names the actor the job says holds that place.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from ltm.errors import LtmError
from ltm.transport.tls import _actor_of_cert, _load
from ltm.v1 import ltm_pb2

__all__ = ["Signed", "Signer", "SignatureRefused", "verify_signed", "to_signed_pb", "from_signed_pb"]

#: Domain separation: a check statement's signature cannot be replayed as anything else.
_CONTEXT = b"ltm.signed-statement.v1\0"


class SignatureRefused(LtmError, ValueError):
    """A relayed statement's signature or certificate does not verify (one line)."""

    code = "PERMISSION_DENIED"


@dataclass(frozen=True)
class Signed:
    """A statement (``payload`` bytes), its ``signature`` and the signer's ``certificate`` (PEM)."""

    payload: bytes
    signature: bytes
    certificate: bytes


def _sign(key, data: bytes) -> bytes:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    raise ValueError(f"cannot sign with a {type(key).__name__} key (LTM certificates use ECDSA P-256 or Ed25519)")


class Signer:
    """One actor's signing key and certificate, and the CA it verifies others against."""

    def __init__(self, key_pem: bytes, cert_pem: bytes, ca_pem: bytes) -> None:
        self._key = serialization.load_pem_private_key(key_pem, password=None)
        self.certificate = cert_pem
        self.ca_pem = ca_pem

    @classmethod
    def from_dir(cls, cert_dir: str | Path, actor: str) -> Signer:
        """The signer of ``actor`` from an ``ltm certs`` directory (ca.pem, <actor>.pem, <actor>.key)."""
        ca, key, cert = _load(cert_dir, actor)
        return cls(key, cert, ca)

    def sign(self, payload: bytes) -> Signed:
        """``payload`` signed with this actor's key."""
        return Signed(bytes(payload), _sign(self._key, _CONTEXT + payload), self.certificate)

    def verify(self, signed: Signed, actor: str) -> bytes:
        """The payload of ``signed`` if ``actor`` signed it (:func:`verify_signed` against this CA)."""
        return verify_signed(signed, actor, self.ca_pem)


def verify_signed(signed: Signed, actor: str, ca_pem: bytes) -> bytes:
    """The payload of ``signed`` if its certificate was issued directly by the CA ``ca_pem``, is
    valid now, names ``actor``, and its key signed the payload; :class:`SignatureRefused` otherwise."""
    try:
        cert = x509.load_pem_x509_certificate(signed.certificate)
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError as exc:
        raise SignatureRefused(f"a statement said to be {actor}'s carries an unreadable certificate: {exc}") from None
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise SignatureRefused(f"a statement said to be {actor}'s carries a certificate the CA did not issue") from None
    now = _dt.datetime.now(_dt.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise SignatureRefused(f"a statement said to be {actor}'s carries a certificate that is not valid now")
    named = _actor_of_cert(signed.certificate)
    if named != actor:
        raise SignatureRefused(f"a statement expected from {actor} is signed by {named!r}")
    key = cert.public_key()
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signed.signature, _CONTEXT + signed.payload, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signed.signature, _CONTEXT + signed.payload)
        else:
            raise SignatureRefused(f"{actor}'s certificate holds a {type(key).__name__} key, not ECDSA or Ed25519")
    except InvalidSignature:
        raise SignatureRefused(f"the statement said to be {actor}'s does not carry {actor}'s valid signature") from None
    return signed.payload


def to_signed_pb(signed: Signed) -> ltm_pb2.SignedStatement:
    """A :class:`Signed` on the wire."""
    return ltm_pb2.SignedStatement(payload=signed.payload, signature=signed.signature, certificate=signed.certificate)


def from_signed_pb(msg: ltm_pb2.SignedStatement) -> Signed:
    """A wire ``SignedStatement`` as a :class:`Signed`."""
    return Signed(bytes(msg.payload), bytes(msg.signature), bytes(msg.certificate))

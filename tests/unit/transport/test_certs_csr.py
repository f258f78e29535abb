"""Certificate signing requests (ltm/transport/certs.py): each actor's host makes its own key and CSR,
the CA host checks the CSR against the role's policy and signs it; no private key travels.

The certificates are checked by a real X.509 path validation (cryptography's verifier: chain,
usages, names), the refusals with requests crafted the way an attacker would (another actor's DNS
identity, serverAuth for a party, a CA extension, a wrong role, a forged signature, ...).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from ltm.cli.app import main
from ltm.transport.certs import (
    ACTOR_URI_PREFIX,
    CSRPolicyError,
    check_request,
    create_ca,
    create_ca_dir,
    issue_leaf,
    make_request,
    sign_request,
    sign_request_file,
    write_certs,
    write_request,
)

SERVER_AUTH, CLIENT_AUTH = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH


@pytest.fixture(scope="module")
def ca():
    return create_ca(days=30)


def _verifier(ca_cert):
    return PolicyBuilder().store(Store([ca_cert])).time(dt.datetime.now(dt.timezone.utc))


def _eku(cert) -> set:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _sans(cert) -> list:
    return list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)


def _csr(key=None, *, cn="party-1", ou="party", sans=("uri",), eku=(CLIENT_AUTH,), extra_ext=None, extra_attr=False):
    """A request crafted field by field (what `ltm certs request` would never make)."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "LTM"),
             x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
             x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if extra_attr:
        attrs.append(x509.NameAttribute(NameOID.COUNTRY_NAME, "XX"))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    names = [x509.UniformResourceIdentifier(ACTOR_URI_PREFIX + cn) if s == "uri" else s for s in sans]
    if names:
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if eku is not None:
        b = b.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    if extra_ext is not None:
        b = b.add_extension(extra_ext, critical=True)
    return b.sign(key, hashes.SHA256())


# ---------------------------------------------------------------------------- what is granted
def test_a_signed_server_request_verifies_as_that_server_and_equals_a_shortcut_leaf(ca):
    ca_key, ca_cert = ca
    key, csr = make_request("server-2", ["10.0.0.12", "srv2.example.org"])
    actor, cert = sign_request(ca_key, ca_cert, csr, expect="server-2")
    assert actor == "server-2"
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()  # the host's own key
    # a client pinning server-2 (its DNS identity) or dialing its address accepts it; as a client too
    for name in (x509.DNSName("server-2"), x509.DNSName("srv2.example.org"),
                 x509.IPAddress(ipaddress.ip_address("10.0.0.12"))):
        _verifier(ca_cert).build_server_verifier(name).verify(cert, [])
    _verifier(ca_cert).build_client_verifier().verify(cert, [])
    with pytest.raises(VerificationError):
        _verifier(ca_cert).build_server_verifier(x509.DNSName("server-1")).verify(cert, [])
    # exactly what the one-machine shortcut issues for the same actor and hosts
    _, shortcut = issue_leaf(ca_key, ca_cert, "server-2", ["10.0.0.12", "srv2.example.org"])
    assert cert.subject == shortcut.subject and _sans(cert) == _sans(shortcut) and _eku(cert) == _eku(shortcut)
    for ext in (x509.KeyUsage, x509.BasicConstraints):
        assert cert.extensions.get_extension_for_class(ext) == shortcut.extensions.get_extension_for_class(ext)


@pytest.mark.parametrize("actor", ["party-7", "operator"])
def test_a_client_role_gets_client_auth_only_and_no_host(ca, actor):
    ca_key, ca_cert = ca
    _, csr = make_request(actor, None)
    _, cert = sign_request(ca_key, ca_cert, csr)
    assert _eku(cert) == {CLIENT_AUTH}
    assert _sans(cert) == [x509.UniformResourceIdentifier(ACTOR_URI_PREFIX + actor)]
    _verifier(ca_cert).build_client_verifier().verify(cert, [])
    with pytest.raises(VerificationError):
        _verifier(ca_cert).build_server_verifier(x509.DNSName(actor)).verify(cert, [])


def test_the_analyst_serves_under_its_identity_and_own_hosts(ca):
    ca_key, ca_cert = ca
    _, csr = make_request("analyst", ["10.0.0.30"])
    _, cert = sign_request(ca_key, ca_cert, csr)
    assert _eku(cert) == {SERVER_AUTH, CLIENT_AUTH}
    assert set(_sans(cert)) == {x509.UniformResourceIdentifier(ACTOR_URI_PREFIX + "analyst"),
                                x509.DNSName("analyst"), x509.IPAddress(ipaddress.ip_address("10.0.0.30"))}


def test_a_request_without_usages_gets_the_roles(ca):
    ca_key, ca_cert = ca
    _, cert = sign_request(ca_key, ca_cert, _csr(eku=None))
    assert _eku(cert) == {CLIENT_AUTH}


# ---------------------------------------------------------------------------- what is refused
def _other_key_signed():
    """A request for server-0 whose signature is by another key than the one it carries."""
    good = _csr(cn="server-0", ou="server", sans=("uri", x509.DNSName("server-0")), eku=(SERVER_AUTH, CLIENT_AUTH))
    der = bytearray(good.public_bytes(serialization.Encoding.DER))
    der[-5] ^= 0x01  # damage the signature
    return x509.load_der_x509_csr(bytes(der))


REFUSED = {
    "party asks serverAuth": (lambda: _csr(eku=(SERVER_AUTH, CLIENT_AUTH)), "usages"),
    "party names a host": (lambda: _csr(sans=("uri", x509.DNSName("p1.example.org"))), "names no host"),
    "party names an IP": (lambda: _csr(sans=("uri", x509.IPAddress(ipaddress.ip_address("10.0.0.9")))), "names no host"),
    "server claims another server's identity": (
        lambda: _csr(cn="server-0", ou="server", sans=("uri", x509.DNSName("server-0"), x509.DNSName("server-1")),
                     eku=(SERVER_AUTH, CLIENT_AUTH)), "server-1"),
    "server claims it in capitals": (
        lambda: _csr(cn="server-0", ou="server", sans=("uri", x509.DNSName("server-0"), x509.DNSName("SERVER-1")),
                     eku=(SERVER_AUTH, CLIENT_AUTH)), "SERVER-1"),
    "analyst claims the analyst's and a server's": (
        lambda: _csr(cn="analyst", ou="analyst", sans=("uri", x509.DNSName("analyst"), x509.DNSName("server-0")),
                     eku=(SERVER_AUTH, CLIENT_AUTH)), "server-0"),
    "wildcard": (lambda: _csr(cn="server-0", ou="server", sans=("uri", x509.DNSName("server-0"), x509.DNSName("*.example.org")),
                              eku=(SERVER_AUTH, CLIENT_AUTH)), "host name"),
    "server without its DNS identity": (lambda: _csr(cn="server-0", ou="server", sans=("uri",),
                                                      eku=(SERVER_AUTH, CLIENT_AUTH)), "DNS 'server-0'"),
    "role does not match the name": (lambda: _csr(cn="party-1", ou="server"), "role"),
    "a bad actor name": (lambda: _csr(cn="server-x", ou="server"), "bad actor name"),
    "an extra subject attribute": (lambda: _csr(extra_attr=True), "subject"),
    "another actor's URI": (lambda: _csr(sans=(x509.UniformResourceIdentifier(ACTOR_URI_PREFIX + "server-0"),)), "URI"),
    "two URIs": (lambda: _csr(sans=("uri", x509.UniformResourceIdentifier("https://example.org"))), "URI"),
    "an e-mail name": (lambda: _csr(sans=("uri", x509.RFC822Name("a@example.org"))), "RFC822Name"),
    "no names at all": (lambda: _csr(sans=()), "subjectAltName"),
    "a CA certificate": (lambda: _csr(extra_ext=x509.BasicConstraints(ca=True, path_length=None)), "BasicConstraints"),
    "an RSA key": (lambda: _csr(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)), "P-256"),
    "a P-384 key": (lambda: _csr(key=ec.generate_private_key(ec.SECP384R1())), "P-256"),
    "a damaged signature": (_other_key_signed, "signature"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_ca_refuses(ca, case):
    make, words = REFUSED[case]
    ca_key, ca_cert = ca
    with pytest.raises(CSRPolicyError, match=None) as info:
        sign_request(ca_key, ca_cert, make())
    assert words in str(info.value), str(info.value)


def test_the_expected_identity_is_enforced(ca):
    _, csr = make_request("party-3")
    with pytest.raises(CSRPolicyError, match="not the expected 'party-2'"):
        check_request(csr, expect="party-2")
    assert check_request(csr, expect="party-3")[0] == "party-3"


# ---------------------------------------------------------------------------- files and the command line
def test_request_files_keep_the_key_private_and_refuse_to_replace_it(tmp_path):
    paths = write_request(tmp_path / "certs", "server-1", ["10.0.0.11"])
    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.key.parent.stat().st_mode) == 0o700
    assert b"PRIVATE KEY" not in paths.cert.read_bytes() and b"CERTIFICATE REQUEST" in paths.cert.read_bytes()
    key = paths.key.read_bytes()
    with pytest.raises(FileExistsError):
        write_request(tmp_path / "certs", "server-1")
    assert paths.key.read_bytes() == key
    assert write_request(tmp_path / "certs", "server-1", force=True).key.read_bytes() != key


def test_sign_uses_the_same_ca_dir_as_the_shortcut(tmp_path):
    """`ltm certs --ca-dir D` (one machine) and `ltm certs ca --ca-dir D` leave the CA where
    `ltm certs sign --ca-dir D` finds it: a leaf signed later chains to the shortcut's ca.pem."""
    issued = write_certs(tmp_path / "issued", ["server-0"], ca_dir=tmp_path / "ca")
    req = write_request(tmp_path / "party-9", "party-9")
    actor, pem = sign_request_file(tmp_path / "ca", req.cert, str(tmp_path / "party-9") + "/")
    assert (actor, pem) == ("party-9", tmp_path / "party-9" / "party-9.pem")
    cert = x509.load_pem_x509_certificate(pem.read_bytes())
    ca_cert = x509.load_pem_x509_certificate(issued["ca"].cert.read_bytes())
    _verifier(ca_cert).build_client_verifier().verify(cert, [])
    fresh = create_ca_dir(tmp_path / "ca2")
    assert {p.name for p in (tmp_path / "ca2").iterdir()} == {"ca.key", "ca.pem"} and fresh.key.stat().st_mode & 0o077 == 0
    with pytest.raises(FileExistsError):
        create_ca_dir(tmp_path / "ca2")


def test_the_commands_end_to_end_and_a_refusal_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["certs", "ca", "--ca-dir", "ca"]) == 0
    assert main(["certs", "request", "--role", "server", "--id", "server-2", "--out", "s2", "--hosts", "10.0.0.12"]) == 0
    assert main(["certs", "request", "--role", "party", "--id", "party-0", "--out", "p0"]) == 0
    assert main(["certs", "sign", "--ca-dir", "ca", "s2/server-2.csr", "--expect", "server-2", "--out", "s2/"]) == 0
    assert sorted(p.name for p in Path("s2").iterdir()) == ["server-2.csr", "server-2.key", "server-2.pem"]
    capsys.readouterr()
    # a party's request presented as server-2's is refused, and nothing is written
    assert main(["certs", "sign", "--ca-dir", "ca", "p0/party-0.csr", "--expect", "server-2", "--out", "x.pem"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltm certs: error:") and err.count("\n") == 1 and not Path("x.pem").exists()
    # request: the id must be of the role; hosts only for serving roles
    assert main(["certs", "request", "--role", "server", "--id", "party-1", "--out", "x"]) == 2
    assert main(["certs", "request", "--role", "party", "--id", "party-1", "--out", "x", "--hosts", "h"]) == 2
    assert main(["certs", "sign", "--ca-dir", "nope", "s2/server-2.csr", "--out", "y.pem"]) == 2
    assert "no CA in 'nope'" in capsys.readouterr().err

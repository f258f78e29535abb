"""One actor identity per certificate (ltm/transport/certs.py): the one-machine `ltm certs` gives each
server its own identity and the host names given for it, refuses a host name that is another
actor's identity, and `ltm certs sign` applies the job grammar's identity rules (ltm.identifiers),
never writes over a file without --force (the CA's own files never) and echoes hostile input cut
short, in one line.  Certificates are checked by real X.509 path validation (cryptography's
verifier), the way a party pins a server: by its identity as a DNS name."""
from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from ltm.cli.app import main
from ltm.transport.certs import ACTOR_URI_PREFIX

REPO = Path(__file__).resolve().parents[3]
IDENTITY = re.compile(r"^(analyst|operator|server-[0-9]+|party-.+)$", re.IGNORECASE)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _names(cert: x509.Certificate) -> list[str]:
    return [str(n.value) for n in cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value]


def _passes_pin(ca: x509.Certificate, cert: x509.Certificate, name: str) -> bool:
    """Whether a client pinning DNS ``name`` (grpc.ssl_target_name_override) accepts ``cert``."""
    verifier = PolicyBuilder().store(Store([ca])).time(dt.datetime.now(dt.timezone.utc)).build_server_verifier(
        x509.DNSName(name))
    try:
        verifier.verify(cert, [])
        return True
    except VerificationError:
        return False


def test_compose_hosts_give_each_server_only_its_own_identity(tmp_path, capsys):
    """certs-init's command (docker-compose.yml): `--hosts server-0,server-1,server-2`."""
    out = tmp_path / "certs"
    assert main(["certs", "--out", str(out), "--servers", "3", "--parties", "1", "--analyst",
                 "--hosts", "server-0,server-1,server-2", "--analyst-hosts", "analyst"]) == 0
    ca = _cert(out / "ca.pem")
    actors = ["server-0", "server-1", "server-2", "party-0", "analyst", "operator"]
    for actor in actors:
        cert = _cert(out / f"{actor}.pem")
        identities = {n.removeprefix(ACTOR_URI_PREFIX).lower() for n in _names(cert)
                      if IDENTITY.fullmatch(n.removeprefix(ACTOR_URI_PREFIX))}
        assert identities == {actor}, (actor, _names(cert))  # one actor identity per certificate
        for other in actors:
            assert _passes_pin(ca, cert, other) == (other == actor and actor.startswith(("server", "analyst"))), \
                (actor, other)


def test_a_host_for_one_server_goes_into_that_servers_certificate_only(tmp_path, capsys):
    out = tmp_path / "certs"
    assert main(["certs", "--out", str(out), "--servers", "2",
                 "--hosts", "server-0=s0.example.org,server-1=10.0.0.11,shared.example.org"]) == 0
    assert _names(_cert(out / "server-0.pem"))[1:] == ["server-0", "s0.example.org", "shared.example.org"]
    assert _names(_cert(out / "server-1.pem"))[1:] == ["server-1", "10.0.0.11", "shared.example.org"]


@pytest.mark.parametrize("flags, words", [
    (["--analyst-hosts", "server-0"], "'server-0' is an actor identity that is not 'analyst'"),
    (["--analyst-hosts", "SERVER-0"], "is an actor identity that is not 'analyst'"),
    (["--hosts", "analyst"], "'analyst' is not a server issued here"),
    (["--hosts", "server-3"], "'server-3' is not a server issued here"),
    (["--hosts", "server-9=h.example"], "'server-9' is not a server issued here"),
    (["--hosts", "*.example.org"], "no wildcard"),
    (["--actors", "server-01"], "'server-01' is not a server identity"),
])
def test_one_machine_certs_refuse_a_second_identity(tmp_path, capsys, flags, words):
    out = tmp_path / "certs"
    assert main(["certs", "--out", str(out), "--servers", "3", "--analyst", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltm certs: error:") and err.count("\n") == 1 and words in err, err
    assert not out.exists()  # refused before anything is written


# ---------------------------------------------------------------------------- ltm certs sign
def _csr_file(path: Path, cn: str, ou: str) -> Path:
    """A request for ``cn`` crafted field by field (the name unchecked, as an attacker would)."""
    key = ec.generate_private_key(ec.SECP256R1())
    with warnings.catch_warnings():  # cryptography warns of a CN over 64 characters: the point here
        warnings.simplefilter("ignore")
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "LTM"),
                             x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
                             x509.NameAttribute(NameOID.COMMON_NAME, cn, _validate=False)])
    sans = [x509.UniformResourceIdentifier(ACTOR_URI_PREFIX + cn.encode("ascii", "replace").decode())]
    csr = (x509.CertificateSigningRequestBuilder().subject_name(subject)
           .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(key, hashes.SHA256()))
    path.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    return path


def _ltm(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ltm.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.mark.parametrize("cn, ou, words", [
    ("server-01", "server", "'server-01' is not a server identity"),
    ("server-\u0661", "server", "is not a server identity"),          # an Arabic-Indic digit one
    ("party-a..b", "party", "without '..'"),
    ("party-" + "x" * 4994, "party", "(5000 chars)"),
], ids=["leading-zero", "non-ascii-digit", "dot-dot", "5000-chars"])
def test_sign_refuses_what_the_id_grammar_refuses_in_one_short_line(tmp_path, cn, ou, words):
    assert _ltm("certs", "ca", "--ca-dir", "ca", cwd=tmp_path).returncode == 0
    _csr_file(tmp_path / "x.csr", cn, ou)
    proc = _ltm("certs", "sign", "--ca-dir", "ca", "x.csr", "--out", "issued/", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("ltm certs: error:") and proc.stderr.count("\n") == 1, proc.stderr[:2000]
    assert len(proc.stderr) < 400 and words in proc.stderr, proc.stderr[:2000]  # no library warning either
    assert not (tmp_path / "issued").exists() or not any((tmp_path / "issued").iterdir())


def test_sign_never_writes_over_a_file_without_force_and_never_over_the_ca(tmp_path, capsys):
    ca = tmp_path / "ca"
    assert main(["certs", "ca", "--ca-dir", str(ca)]) == 0
    assert main(["certs", "request", "--role", "party", "--id", "party-1", "--out", str(tmp_path / "p")]) == 0
    csr = str(tmp_path / "p" / "party-1.csr")
    capsys.readouterr()
    key_before, pem_before = (ca / "ca.key").read_bytes(), (ca / "ca.pem").read_bytes()
    for target, force in ((ca / "ca.key", []), (ca / "ca.key", ["--force"]), (ca / "ca.pem", ["--force"])):
        assert main(["certs", "sign", "--ca-dir", str(ca), csr, "--out", str(target), *force]) == 2
        assert "the CA's own file" in capsys.readouterr().err
    assert (ca / "ca.key").read_bytes() == key_before and (ca / "ca.pem").read_bytes() == pem_before
    other = tmp_path / "party-1.pem"
    other.write_text("something else\n")
    assert main(["certs", "sign", "--ca-dir", str(ca), csr, "--out", str(other)]) == 2
    assert "already exists" in capsys.readouterr().err and other.read_text() == "something else\n"
    assert main(["certs", "sign", "--ca-dir", str(ca), csr, "--out", str(other), "--force"]) == 0
    assert _cert(other).subject.rfc4514_string().startswith("CN=party-1")  # replaced by the certificate
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

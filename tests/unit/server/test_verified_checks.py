"""A server's side of verified clipping (issue #30) on its core, in process with real certificates:
the signed statements (ltm/transport/signing.py), the seed drawn once and stored, the relayed sets
verified, the verdict recorded once and the gate.  Over gRPC: tests/integration/test_verified_clipping_grpc.py."""
from dataclasses import replace

import numpy as np
import pytest

from ltm.datasets.synthetic import synthetic_ridge
from ltm.errors import ProtocolError
from ltm.party.randomizer import party_randomness
from ltm.party.replicated import replicated_batches
from ltm.randomness import Randomness
from ltm.server.core import ServerCore
from ltm.server.sqlite_store import SqliteStore
from ltm.server.store import MemoryStore
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.transport.certs import write_certs
from ltm.transport.signing import SignatureRefused, Signer, verify_signed
from ltm.verified_clipping import ClippingProofFailed, seed_statement

A = "analyst"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    write_certs(d, ["server-0", "server-1", "server-2", "analyst"])
    other = tmp_path_factory.mktemp("other-ca")
    write_certs(other, ["server-1"])
    return d, other


@pytest.fixture(scope="module")
def job():
    randomness = Randomness.seeded_insecure(41)
    table = synthetic_ridge(300, 4, randomness.child("data"))
    spec, _ = build_job(table, job_id="vcs", randomness=randomness, partition="columns", parties=3, k=3,
                        kind="gram", colluding_servers=1, verified_clipping=True)
    batches = {p.party_id: replicated_batches(spec, p.party_id, t, party_randomness(randomness, spec, p.party_id))
               for p, t in zip(spec.parties, party_tables(spec, table).values())}
    return spec, batches


def _cores(spec, batches, certs, stores=None):
    cores = []
    for i in range(3):
        core = ServerCore(f"server-{i}", (stores or {}).get(i, MemoryStore()), Signer.from_dir(certs, f"server-{i}"))
        core.create_job(spec, caller_role=A)
        for pid, per_server in batches.items():
            for b in per_server[i]:
                core.accept(b, spec.job_id, caller_role="party", caller_id=pid)
        core.close(spec.job_id, caller_role=A)
        cores.append(core)
    return cores


def test_signatures_bind_the_signer_the_ca_and_the_payload(certs):
    mine, other = certs
    signed = Signer.from_dir(mine, "server-1").sign(b"statement")
    ca = (mine / "ca.pem").read_bytes()
    assert verify_signed(signed, "server-1", ca) == b"statement"
    with pytest.raises(SignatureRefused, match="signed by 'server-1'"):
        verify_signed(signed, "server-0", ca)
    with pytest.raises(SignatureRefused, match="valid signature"):
        verify_signed(replace(signed, payload=b"statemenT"), "server-1", ca)
    foreign = Signer.from_dir(other, "server-1").sign(b"statement")  # same name, another CA
    with pytest.raises(SignatureRefused, match="CA did not issue"):
        verify_signed(foreign, "server-1", ca)


def test_the_check_round_on_the_cores_and_the_gate(job, certs):
    spec, batches = job
    cores = _cores(spec, batches, certs[0])
    with pytest.raises(ProtocolError, match="only the analyst"):
        cores[0].check_seed(spec.job_id, caller_role="party")
    seeds = [c.check_seed(spec.job_id, caller_role=A) for c in cores]
    assert cores[0].check_seed(spec.job_id, caller_role=A).payload == seeds[0].payload  # drawn once
    outputs = [c.check_output(spec.job_id, seeds, caller_role=A) for c in cores]
    with pytest.raises(ClippingProofFailed, match="missing"):  # no verdict yet: the gate refuses
        cores[0].release(spec.job_id, np.ones(spec.n, bool), caller_role=A, job_digest=spec.digest)
    assert cores[0].clipping_status(spec.job_id) == ""
    # outputs computed under another seed set (server-2's output replaced by server-0's) are refused
    with pytest.raises(ProtocolError, match="signed by 'server-0'"):
        cores[1].check_verdict(spec.job_id, [outputs[0], outputs[1], outputs[0]], caller_role=A)
    assert all(c.check_verdict(spec.job_id, outputs, caller_role=A) == {} for c in cores)
    assert cores[2].clipping_status(spec.job_id) == "passed"
    total = sum(c.release(spec.job_id, np.ones(spec.n, bool), caller_role=A, job_digest=spec.digest)
                for c in cores)
    assert total.shape == (1, spec.width * (spec.width + 1) // 2)


def test_a_party_that_stopped_mid_upload_is_named_and_nothing_is_released(job, certs):
    spec, batches = job
    partial = {**batches, "party-2": [[b for b in per if b.batch_index < 3] for per in batches["party-2"]]}
    cores = _cores(spec, partial, certs[0])
    seeds = [c.check_seed(spec.job_id, caller_role=A) for c in cores]
    with pytest.raises(ProtocolError, match=r"cannot run: party 'party-2': parts \[0, 1, 2\] stored, need 0..5"):
        cores[0].check_output(spec.job_id, seeds, caller_role=A)
    with pytest.raises(ProtocolError, match="six parts are needed"):  # its gate: not every part is held
        cores[0].release(spec.job_id, np.ones(spec.n, bool), caller_role=A, job_digest=spec.digest)


def test_a_seed_set_without_the_servers_own_seed_is_refused(job, certs):
    """A validly signed seed of server-0 that is not the one this server-0 drew (a second store, as
    after a lost database) is refused: a seed set must hold the server's own seed."""
    spec, batches = job
    cores = _cores(spec, batches, certs[0])
    twin = _cores(spec, batches, certs[0])[0]
    seeds = [c.check_seed(spec.job_id, caller_role=A) for c in cores]
    other = twin.check_seed(spec.job_id, caller_role=A)
    assert other.payload != seeds[0].payload
    with pytest.raises(ProtocolError, match="does not hold server 0's own check seed"):
        cores[0].check_output(spec.job_id, [other, seeds[1], seeds[2]], caller_role=A)
    cores[1].check_output(spec.job_id, [other, seeds[1], seeds[2]], caller_role=A)  # server-1 cannot tell
    forged = Signer.from_dir(certs[0], "analyst").sign(seed_statement(spec.digest, 0, bytes(32), bytes(32)))
    with pytest.raises(ProtocolError, match="signed by 'analyst'"):
        cores[1].check_output(spec.job_id, [forged, seeds[1], seeds[2]], caller_role=A)
    # server-0's outputs under the split set never agree with its own: the verdict is refused
    split = [cores[0].check_output(spec.job_id, seeds, caller_role=A),
             cores[1].check_output(spec.job_id, [other, seeds[1], seeds[2]], caller_role=A),
             cores[2].check_output(spec.job_id, seeds, caller_role=A)]
    with pytest.raises(ProtocolError, match="another seed set"):
        cores[0].check_verdict(spec.job_id, split, caller_role=A)


def test_the_seed_and_verdict_are_stored_once_and_survive_a_restart(job, certs, tmp_path):
    spec, batches = job
    stores = {i: SqliteStore(tmp_path / f"s{i}") for i in range(3)}
    cores = _cores(spec, batches, certs[0], stores)
    seeds = [c.check_seed(spec.job_id, caller_role=A) for c in cores]
    outputs = [c.check_output(spec.job_id, seeds, caller_role=A) for c in cores]
    cores[0].check_verdict(spec.job_id, outputs, caller_role=A)
    assert stores[0].put_check_value(spec.job_id, "seed", b"x" * 32) != b"x" * 32  # first write wins
    for store in stores.values():
        store.close()
    reopened = ServerCore("server-0", SqliteStore(tmp_path / "s0"), Signer.from_dir(certs[0], "server-0"))
    try:
        assert reopened.check_seed(spec.job_id, caller_role=A).payload == seeds[0].payload
        assert reopened.clipping_status(spec.job_id) == "passed"
    finally:
        reopened.store.close()


def _pem_pair(key, cert):
    from cryptography.hazmat.primitives import serialization
    return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()), cert.public_bytes(serialization.Encoding.PEM))


def _issue(ca_key, ca_name, key, actor, *, days=(-1, 1)):
    """A leaf for ``actor`` with ``key``, issued by ``ca_key`` (valid from days[0] to days[1] from now)."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, actor)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now + dt.timedelta(days=days[0])).not_valid_after(now + dt.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"ltm://actor/{actor}")]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))


def test_ed25519_keys_expired_or_unreadable_certificates_and_the_wire_form():
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.x509.oid import NameOID

    from ltm.transport.signing import from_signed_pb, to_signed_pb

    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    now = dt.datetime.now(dt.UTC)
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    ca_pem = _pem_pair(ca_key, ca)[1]
    ed = ed25519.Ed25519PrivateKey.generate()
    signer = Signer(*_pem_pair(ed, _issue(ca_key, name, ed, "server-2")), ca_pem)
    signed = signer.sign(b"seed")
    assert signer.verify(signed, "server-2") == b"seed"
    assert from_signed_pb(to_signed_pb(signed)) == signed
    with pytest.raises(SignatureRefused, match="valid signature"):
        signer.verify(replace(signed, payload=b"seeD"), "server-2")
    with pytest.raises(SignatureRefused, match="valid signature"):  # the context prefix is part of what is signed
        verify_signed(replace(signed, signature=ed.sign(b"seed")), "server-2", ca_pem)
    expired = Signer(*_pem_pair(ed, _issue(ca_key, name, ed, "server-2", days=(-3, -2))), ca_pem).sign(b"seed")
    with pytest.raises(SignatureRefused, match="server-2's carries a certificate that is not valid now"):
        verify_signed(expired, "server-2", ca_pem)
    with pytest.raises(SignatureRefused, match="server-2's carries an unreadable certificate"):
        verify_signed(replace(signed, certificate=b"not a certificate"), "server-2", ca_pem)
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(ValueError, match="cannot sign with a RSAPrivateKey key"):
        Signer(*_pem_pair(weak, _issue(ca_key, name, weak, "server-1")), ca_pem).sign(b"x")
    rsa_signed = replace(signed, certificate=_pem_pair(weak, _issue(ca_key, name, weak, "server-1"))[1])
    with pytest.raises(SignatureRefused, match="server-1's certificate holds a RSAPublicKey key"):
        verify_signed(rsa_signed, "server-1", ca_pem)


def seeds_of(signed):
    """The seed in a signed seed statement (its payload, unverified)."""
    import json
    return bytes.fromhex(json.loads(signed.payload)["seed"])


def test_a_server_answers_once_per_job_and_never_overwrites_a_verdict(job, certs, tmp_path):
    """Once per job on the core (docs/architecture.md, "Over gRPC"): an identical seed set again gives
    the same signed bytes; another validly signed set (server-2's key signing a second seed, as a
    server that equivocates would) is refused; so is another set of outputs after the verdict; the
    mask keys come from the signed X25519 public keys (a key substituted by the relay is refused as
    unsigned); a restart on the same SQLite store answers with the same output."""
    spec, batches = job
    stores = {1: SqliteStore(tmp_path / "s1")}
    cores = _cores(spec, batches, certs[0], stores)
    seeds = [c.check_seed(spec.job_id, caller_role=A) for c in cores]
    first = cores[1].check_output(spec.job_id, seeds, caller_role=A)
    assert cores[1].check_output(spec.job_id, list(seeds), caller_role=A) == first  # same bytes, signature too
    from ltm.verified_clipping import mask_private_key, mask_public_key
    low = Signer.from_dir(certs[0], "server-2").sign(seed_statement(spec.digest, 2, seeds_of(seeds[2]), bytes(32)))
    with pytest.raises(ProtocolError, match="not a usable X25519 key"):  # refused before anything is recorded
        cores[1].check_output(spec.job_id, [seeds[0], seeds[1], low], caller_role=A)
    other = Signer.from_dir(certs[0], "server-2").sign(
        seed_statement(spec.digest, 2, bytes([5]) * 32, mask_public_key(mask_private_key())))
    with pytest.raises(ProtocolError, match="already took another check seed set"):
        cores[1].check_output(spec.job_id, [seeds[0], seeds[1], other], caller_role=A)
    swapped = replace(seeds[2], payload=seeds[2].payload.replace(b'"mask_public":"', b'"mask_public":"00', 1))
    with pytest.raises(ProtocolError, match="valid signature"):
        cores[1].check_output(spec.job_id, [seeds[0], seeds[1], swapped], caller_role=A)
    stores[1].close()
    cores[1] = ServerCore("server-1", SqliteStore(tmp_path / "s1"), Signer.from_dir(certs[0], "server-1"))
    assert cores[1].check_output(spec.job_id, seeds, caller_role=A) == first  # durable: seed, key, output
    outputs = [cores[0].check_output(spec.job_id, seeds, caller_role=A), first,
               cores[2].check_output(spec.job_id, seeds, caller_role=A)]
    zero = np.zeros(40, dtype=np.uint64)
    from ltm.verified_clipping import output_statement, statement_seeds
    values = [bytes.fromhex(h.hex()) for h in statement_seeds(first.payload, spec.digest, 1)]
    forged = Signer.from_dir(certs[0], "server-2").sign(output_statement(
        spec.digest, 2, values, {p.party_id: zero for p in spec.parties}))
    failed = cores[1].check_verdict(spec.job_id, [outputs[0], outputs[1], forged], caller_role=A)
    assert set(failed) == {p.party_id for p in spec.parties}  # the all-zero answer does not cancel the masks
    with pytest.raises(ProtocolError, match="already took another set of check outputs"):
        cores[1].check_verdict(spec.job_id, outputs, caller_role=A)  # a recorded failure stays
    assert cores[1].clipping_failures(spec.job_id) == failed
    with pytest.raises(ProtocolError, match="do not carry server 0's own"):
        not_mine = Signer.from_dir(certs[0], "server-0").sign(output_statement(
            spec.digest, 0, values, {p.party_id: zero for p in spec.parties}))
        cores[0].check_verdict(spec.job_id, [not_mine, outputs[1], outputs[2]], caller_role=A)
    assert cores[0].clipping_failures(spec.job_id) is None  # nothing recorded by a refused relay
    cores[1].store.close()

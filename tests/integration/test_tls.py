"""ltm.transport.certs / ltm.transport.tls against real gRPC servers on 127.0.0.1 (no project protos)."""
from __future__ import annotations

import asyncio
import contextlib
import stat
from concurrent import futures

import grpc
import grpc.aio
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ltm.cli.app import main
from ltm.transport.certs import role_of, write_certs
from ltm.transport.tls import (
    AuthenticationError,
    Identity,
    InsecureIdentity,
    add_secure_port,
    authenticate,
    identity_from_auth_context,
    identity_from_metadata,
    make_channel,
    make_server,
    make_sync_channel,
    peer_identity,
    server_credentials,
)

METHOD = "/Echo/WhoAmI"
CALL_TIMEOUT = 5.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    write_certs(d, ["server-0", "party-3", "analyst"])
    return d


@pytest.fixture(scope="module")
def rogue(tmp_path_factory):
    """Same actor names, but a different CA."""
    d = tmp_path_factory.mktemp("rogue")
    write_certs(d, ["server-0", "party-3"])
    return d


def _read(path) -> bytes:
    return path.read_bytes()


# ---------------------------------------------------------------------------- aio harness
def _aio_handler(calls: list, mode: str = "authenticate", roles=None):
    async def who_am_i(request: bytes, context) -> bytes:
        calls.append(dict(context.auth_context()))
        if mode == "authenticate":
            who = await authenticate(context, roles)
        elif mode == "insecure":
            who = await authenticate(context, roles, insecure=True)
        elif mode == "peer_identity":
            who = peer_identity(context)
        elif mode == "from_metadata":
            who = identity_from_metadata(context)
        else:  # pragma: no cover
            raise AssertionError(mode)
        return f"{who.actor}|{who.role}|{int(who.verified)}".encode()

    return grpc.method_handlers_generic_handler(
        "Echo", {"WhoAmI": grpc.unary_unary_rpc_method_handler(who_am_i)})


@contextlib.asynccontextmanager
async def aio_server(cert_dir, actor="server-0", *, insecure=False, **handler_kw):
    calls: list = []
    server = make_server(handlers=[_aio_handler(calls, **handler_kw)])
    port = add_secure_port(server, "127.0.0.1:0", cert_dir, actor, insecure=insecure)
    await server.start()
    try:
        yield port, calls
    finally:
        await server.stop(None)


async def _call(channel) -> bytes:
    async with channel:
        return await channel.unary_unary(METHOD)(b"", timeout=CALL_TIMEOUT)


def _run(coro):
    return asyncio.run(coro)


# ---------------------------------------------------------------------------- mutual TLS
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_mutual_tls_identity(certs, host):
    async def main():
        async with aio_server(certs) as (port, calls):
            party = await _call(make_channel(f"{host}:{port}", certs, "party-3"))
            analyst = await _call(make_channel(f"{host}:{port}", certs, "analyst"))
            return party, analyst, calls

    party, analyst, calls = _run(main())
    assert party == b"party-3|party|1"
    assert analyst == b"analyst|analyst|1"
    auth = calls[0]
    assert auth["transport_security_type"] == [b"ssl"]
    assert auth["x509_common_name"] == [b"party-3"]
    assert b"-----BEGIN CERTIFICATE-----" in auth["x509_pem_cert"][0]


def test_peer_identity_sync_function_in_aio_handler(certs):
    async def main():
        async with aio_server(certs, mode="peer_identity") as (port, _):
            return await _call(make_channel(f"127.0.0.1:{port}", certs, "party-3"))

    assert _run(main()) == b"party-3|party|1"


def test_certificates_work_only_for_what_their_actor_does(certs):
    """A party's certificate has no serverAuth and no host name: the TLS handshake itself refuses
    a party serving, whatever name the client asks for."""
    async def main():
        async with aio_server(certs, actor="party-3") as (port, _):
            for target in (f"127.0.0.1:{port}", f"localhost:{port}"):
                with pytest.raises(grpc.aio.AioRpcError) as as_server:
                    await _call(make_channel(target, certs, "analyst"))
                assert as_server.value.code() == grpc.StatusCode.UNAVAILABLE
            # not even when the client asks for that very identity
            with pytest.raises(grpc.aio.AioRpcError):
                await _call(make_channel(f"127.0.0.1:{port}", certs, "analyst",
                                         options=[("grpc.ssl_target_name_override", "party-3")]))

    _run(main())


def test_role_check_permission_denied(certs):
    async def main():
        async with aio_server(certs, roles={"server", "analyst"}) as (port, calls):
            ok = await _call(make_channel(f"127.0.0.1:{port}", certs, "analyst"))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _call(make_channel(f"127.0.0.1:{port}", certs, "party-3"))
            return ok, err.value

    ok, err = _run(main())
    assert ok == b"analyst|analyst|1"
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "party-3" in err.details() and "party" in err.details()


def _rogue_leaf(certs, rogue, port):
    # The client trusts the right CA (so *it* accepts the server) but presents a rogue leaf.
    creds = grpc.ssl_channel_credentials(root_certificates=_read(certs / "ca.pem"),
                                         private_key=_read(rogue / "party-3.key"),
                                         certificate_chain=_read(rogue / "party-3.pem"))
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", creds)


def _no_client_certificate(certs, rogue, port):
    return grpc.aio.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(root_certificates=_read(certs / "ca.pem")))


@pytest.mark.parametrize("server_ca, channel", [
    ("certs", _rogue_leaf),
    ("certs", _no_client_certificate),
    ("rogue", lambda certs, rogue, port: make_channel(f"127.0.0.1:{port}", certs, "party-3")),
    ("certs", lambda certs, rogue, port: make_channel(f"127.0.0.1:{port}", None, "party-3", insecure=True)),
], ids=["client certificate from another CA", "client without a certificate", "server from another CA",
        "plaintext client to a TLS server"])
def test_a_refused_handshake_is_unavailable_and_runs_no_handler(certs, rogue, server_ca, channel):
    async def main():
        async with aio_server({"certs": certs, "rogue": rogue}[server_ca]) as (port, calls):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _call(channel(certs, rogue, port))
            return err.value, calls

    err, calls = _run(main())
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert calls == []  # the handler never ran


# ---------------------------------------------------------------------------- all call kinds
def _streaming_handlers(insecure: bool):
    async def up(request_iterator, context):  # client-streaming, like an upload
        who = await authenticate(context, {"party"}, insecure=insecure)
        total = 0
        async for chunk in request_iterator:
            total += len(chunk)
        return f"{who.actor}:{total}".encode()

    async def down(request, context):
        who = await authenticate(context, insecure=insecure)
        for _ in range(2):
            yield who.actor.encode()

    async def both(request_iterator, context):
        who = await authenticate(context, insecure=insecure)
        async for _ in request_iterator:
            yield who.actor.encode()

    return grpc.method_handlers_generic_handler("Echo", {
        "Up": grpc.stream_unary_rpc_method_handler(up),
        "Down": grpc.unary_stream_rpc_method_handler(down),
        "Both": grpc.stream_stream_rpc_method_handler(both),
    })


@pytest.mark.parametrize("insecure", [False, True], ids=["mtls", "insecure"])
def test_streaming_calls_carry_identity_and_large_messages(certs, insecure):
    big = 9 * 1024 * 1024  # above gRPC's default 4 MiB receive limit, below our 64 MiB

    async def chunks(n):
        for _ in range(n):
            yield b"\0" * big

    async def main():
        server = make_server(handlers=[_streaming_handlers(insecure)])
        port = add_secure_port(server, "127.0.0.1:0", certs, "server-0", insecure=insecure)
        await server.start()
        try:
            async with make_channel(f"127.0.0.1:{port}", certs, "party-3", insecure=insecure) as ch:
                up = await ch.stream_unary("/Echo/Up")(chunks(2), timeout=CALL_TIMEOUT)
                down = [m async for m in ch.unary_stream("/Echo/Down")(b"", timeout=CALL_TIMEOUT)]
                both = [m async for m in ch.stream_stream("/Echo/Both")(chunks(1), timeout=CALL_TIMEOUT)]
            async with make_channel(f"127.0.0.1:{port}", certs, "analyst", insecure=insecure) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as denied:
                    await ch.stream_unary("/Echo/Up")(chunks(0), timeout=CALL_TIMEOUT)
        finally:
            await server.stop(None)
        return up, down, both, denied.value

    up, down, both, denied = _run(main())
    assert up == f"party-3:{2 * big}".encode()
    assert down == [b"party-3", b"party-3"]
    assert both == [b"party-3"]
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED


# ---------------------------------------------------------------------------- --insecure
def test_insecure_mode_uses_claimed_actor_header():
    async def main():
        async with aio_server(None, insecure=True, mode="insecure") as (port, _):
            claimed = await _call(make_channel(f"127.0.0.1:{port}", None, "party-9", insecure=True))
            with pytest.raises(grpc.aio.AioRpcError) as missing:  # plain channel: no header
                await _call(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
        async with aio_server(None, insecure=True, mode="from_metadata") as (port, _):
            claimed2 = await _call(make_channel(f"127.0.0.1:{port}", None, "analyst", insecure=True))
        return claimed, claimed2, missing.value

    claimed, claimed2, missing = _run(main())
    assert claimed == b"party-9|party|0"
    assert claimed2 == b"analyst|analyst|0"
    assert missing.code() == grpc.StatusCode.UNAUTHENTICATED


def test_tls_identity_on_insecure_server_is_unauthenticated():
    """A handler that asks for a TLS identity on a plaintext server gets none, header or not."""
    async def main():
        errors = []
        for mode in ("authenticate", "peer_identity"):
            async with aio_server(None, insecure=True, mode=mode) as (port, _):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await _call(make_channel(f"127.0.0.1:{port}", None, "server-0", insecure=True))
                errors.append(err.value)
        return errors

    for err in _run(main()):
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED


# ---------------------------------------------------------------------------- sync API
@contextlib.contextmanager
def sync_server(cert_dir, *, insecure=False, mode="peer_identity"):
    calls: list = []

    def who_am_i(request, context):
        calls.append(1)
        who = peer_identity(context) if mode == "peer_identity" else identity_from_metadata(context)
        return f"{who.actor}|{who.role}|{int(who.verified)}".encode()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "Echo", {"WhoAmI": grpc.unary_unary_rpc_method_handler(who_am_i)})])
    port = add_secure_port(server, "127.0.0.1:0", cert_dir, "server-0", insecure=insecure)
    server.start()
    try:
        yield port, calls
    finally:
        server.stop(None)


def test_sync_server_and_channel(certs, rogue):
    with sync_server(certs) as (port, calls):
        with make_sync_channel(f"localhost:{port}", certs, "party-3") as ch:
            assert ch.unary_unary(METHOD)(b"", timeout=CALL_TIMEOUT) == b"party-3|party|1"
        assert calls == [1]
        with make_sync_channel(f"127.0.0.1:{port}", rogue, "party-3") as ch:
            with pytest.raises(grpc.RpcError) as err:
                ch.unary_unary(METHOD)(b"", timeout=CALL_TIMEOUT)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert calls == [1]
    with sync_server(None, insecure=True) as (port, _):  # sync context: abort path
        with make_sync_channel(f"127.0.0.1:{port}", None, "party-3", insecure=True) as ch:
            with pytest.raises(grpc.RpcError) as err:
                ch.unary_unary(METHOD)(b"", timeout=CALL_TIMEOUT)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "not mutual TLS" in err.value.details()
    with sync_server(None, insecure=True, mode="from_metadata") as (port, _):
        with make_sync_channel(f"127.0.0.1:{port}", None, "party-3", insecure=True) as ch:
            assert ch.unary_unary(METHOD)(b"", timeout=CALL_TIMEOUT) == b"party-3|party|0"


# ---------------------------------------------------------------------------- identity parsing
def test_identity_from_auth_context_rules(certs):
    pem = _read(certs / "party-3.pem")
    base = {"transport_security_type": [b"ssl"]}
    assert identity_from_auth_context({**base, "x509_pem_cert": [pem]}) == Identity("party-3", "party")
    # CN-only fall-back (no PEM, no URI SAN)
    assert identity_from_auth_context({**base, "x509_common_name": [b"server-1"]}) == Identity.of("server-1")
    # SAN from properties preferred over the CN; disagreement is refused
    assert identity_from_auth_context({**base, "peer_uri": [b"ltm://actor/analyst"]}).actor == "analyst"
    with pytest.raises(AuthenticationError, match="inconsistent"):
        identity_from_auth_context({**base, "peer_uri": [b"ltm://actor/analyst"],
                                    "x509_common_name": [b"party-1"]})
    with pytest.raises(AuthenticationError, match="no client certificate"):
        identity_from_auth_context(base)
    with pytest.raises(AuthenticationError, match="not mutual TLS"):
        identity_from_auth_context({})
    with pytest.raises(AuthenticationError, match="malformed"):
        identity_from_auth_context({**base, "x509_common_name": [b"root"]})
    assert isinstance(InsecureIdentity("party-1", "party"), Identity)
    assert InsecureIdentity("party-1", "party").verified is False


def test_role_of():
    assert role_of("server-2") == "server"
    assert role_of("server-0") == "server"
    assert role_of("party-17") == "party"
    assert role_of("party-east_1.a-b") == "party"
    assert role_of("analyst") == "analyst"
    for bad in ["server", "server-", "server-x", "party-", "party-a/b", "analyst-1", "admin", "", "Server-1",
                "server-1\n", "party-ä"]:
        with pytest.raises(ValueError):
            role_of(bad)


# ---------------------------------------------------------------------------- files
def _names(cert):
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (san.get_values_for_type(x509.UniformResourceIdentifier), san.get_values_for_type(x509.DNSName),
            [str(ip) for ip in san.get_values_for_type(x509.IPAddress)],
            set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value))


def test_write_certs_files_modes_and_contents(tmp_path):
    d = tmp_path / "c"
    paths = write_certs(d, ["server-0", "party-17", "analyst", "operator"],
                        hosts=["localhost", "10.1.2.3", "ltm.example"], analyst_hosts=["analyst.example"],
                        ca_dir=tmp_path / "ca-key")
    assert set(paths) == {"ca", "server-0", "party-17", "analyst", "operator"}
    for name, (cert, key) in paths.items():
        assert cert.exists() and key.exists()
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
        assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert paths["ca"].cert == d / "ca.pem" and paths["party-17"].key == d / "party-17.key"
    # the CA key is never where the actors' files are
    assert paths["ca"].key == tmp_path / "ca-key" / "ca.key" and not (d / "ca.key").exists()
    assert stat.S_IMODE((tmp_path / "ca-key").stat().st_mode) == 0o700
    assert not list(d.glob(".*tmp"))

    load = lambda actor: x509.load_pem_x509_certificate(paths[actor].cert.read_bytes())  # noqa: E731
    ca = x509.load_pem_x509_certificate(paths["ca"].cert.read_bytes())
    leaf = load("party-17")
    leaf.verify_directly_issued_by(ca)
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "party-17"
    assert leaf.public_key().curve.name == "secp256r1"
    SA, CA_ = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    # only a server certificate names the servers' hosts
    assert _names(load("server-0")) == (["ltm://actor/server-0"], ["server-0", "localhost", "ltm.example"],
                                        ["10.1.2.3"], {SA, CA_})
    # the analyst's certificate is valid only where the analyst serves
    assert _names(load("analyst")) == (["ltm://actor/analyst"], ["analyst", "analyst.example"], [], {SA, CA_})
    # parties and the operator never serve: no host names, no serverAuth
    assert _names(leaf) == (["ltm://actor/party-17"], [], [], {CA_})
    assert _names(load("operator")) == (["ltm://actor/operator"], [], [], {CA_})
    server_credentials(d, "server-0")  # gRPC accepts the PEM files
    with pytest.raises(ValueError, match="never goes to an actor"):
        write_certs(d, ["server-0"], ca_dir=d, force=True)


def test_write_certs_refuses_to_replace_ca(tmp_path):
    first = write_certs(tmp_path, ["server-0"])
    assert first["ca"].key is None  # without ca_dir the CA key is discarded
    ca_before = first["ca"].cert.read_bytes()
    with pytest.raises(FileExistsError, match="force"):
        write_certs(tmp_path, ["server-0", "party-1"])
    assert first["ca"].cert.read_bytes() == ca_before
    assert not (tmp_path / "party-1.pem").exists()
    (tmp_path / "ca.key").write_bytes(b"a CA key an older layout left beside the actors' files")
    second = write_certs(tmp_path, ["server-0"], force=True, ca_dir=tmp_path.parent / "keys")
    assert second["ca"].cert.read_bytes() != ca_before
    assert stat.S_IMODE(second["ca"].key.stat().st_mode) == 0o600
    assert not (tmp_path / "ca.key").exists()
    with pytest.raises(ValueError, match="duplicate"):
        write_certs(tmp_path / "x", ["party-1", "party-1"])
    with pytest.raises(ValueError, match="bad actor"):
        write_certs(tmp_path / "y", ["admin"])
    assert not (tmp_path / "y" / "ca.pem").exists()


def test_load_checks_the_certificate_names_the_actor(tmp_path):
    write_certs(tmp_path, ["party-1", "party-2"])
    (tmp_path / "party-2.pem").write_bytes((tmp_path / "party-1.pem").read_bytes())
    with pytest.raises(ValueError, match="party-1"):
        server_credentials(tmp_path, "party-2")
    with pytest.raises(FileNotFoundError, match="ltm certs"):
        server_credentials(tmp_path, "party-3")


def test_certs_cli(tmp_path, capsys):
    out = tmp_path / "certs"
    rc = main(["certs", "--out", str(out), "--servers", "2", "--parties", "3", "--analyst",
                     "--actors", "party-x,server-0", "--hosts", "localhost,127.0.0.1,node1"])
    assert rc == 0
    names = {p.name for p in out.iterdir()}
    expected = {"server-0", "server-1", "party-0", "party-1", "party-2", "party-x", "analyst", "operator"}
    # what the actors get: no CA key among it; that goes to <out>-ca, and the output says where it must stay
    assert names == {"ca.pem"} | {f"{a}.pem" for a in expected} | {f"{a}.key" for a in expected}
    assert {p.name for p in (tmp_path / "certs-ca").iterdir()} == {"ca.key", "ca.pem"}  # ca.pem: for `ltm certs sign`
    printed = capsys.readouterr().out
    assert "ca.pem" in printed and "party-x" in printed
    assert f"{tmp_path / 'certs-ca' / 'ca.key'}" in printed and "NEVER copy it to a server, party or analyst host" in printed
    assert main(["certs", "--out", str(out), "--servers", "1"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["certs", "--out", str(out), "--servers", "1", "--force"]) == 0

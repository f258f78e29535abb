"""The ``ltm`` app as a whole: every registered command is listed with its one-line help and
answers ``--help``; the usage errors of the flags the option groups declare (ltm/cli/options.py) are
one line and exit status 2."""
from __future__ import annotations

import pytest

from ltm.cli.app import COMMANDS, main


def test_top_level_help_lists_every_command_with_its_help(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help lines
    for name, (_, help_text) in COMMANDS.items():
        assert f" {name} {help_text}" in out, name


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_answers_help(command, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ltm {command}")
    assert len(out.splitlines()) > 3  # the command's own parser, not the top-level stub


def _error(capsys) -> str:
    """The stderr of a refused command: its last line is the one-line error."""
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv", [
    ["server", "--id", "server-0", "--listen", "127.0.0.1:0", "--data-dir", "{tmp}/store"],
    ["party", "--id", "party-0", "--servers", "127.0.0.1:1", "--job", "j", "--data", "{tmp}/d.csv"],
    ["analyst", "--listen", "127.0.0.1:0", "--out", "{tmp}/out"],
], ids=lambda a: a[0])
def test_an_actor_without_certs_is_a_usage_error(argv, tmp_path, capsys) -> None:
    status = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert status == 2
    err = capsys.readouterr().err
    assert err == f"ltm {argv[0]}: error: --certs is required (or --insecure for a plaintext test run)\n"
    assert list(tmp_path.iterdir()) == []  # refused before anything was created


@pytest.mark.parametrize("flag", ["--max-epsilon", "--max-delta", "--budget-epsilon", "--budget-delta"])
@pytest.mark.parametrize("value", ["nan", "NaN", "-1"])
def test_a_party_refuses_a_privacy_bound_that_is_not_a_number(flag, value, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["party", "--id", "party-0", "--servers", "127.0.0.1:1", "--job", "j", "--data", "d.csv",
              "--insecure", f"{flag}={value}"])
    assert exc.value.code == 2
    assert _error(capsys) == f"ltm party: error: argument {flag}: must be a number ≥ 0, got {value!r}"


#: the one endpoint rule's wording (ltm.identifiers.endpoint_problem), for a peer and for an address to bind
_PEER = "(a DNS name, an IPv4 address or [IPv6], port 1–65535)"
_BIND = "(a DNS name, an IPv4 address or [IPv6], port 0–65535)"


@pytest.mark.parametrize("argv, flag, text", [
    (["server", "--id", "s", "--data-dir", "d", "--listen", "127.0.0.1:65536"], "--listen",
     f"listen address '127.0.0.1:65536' must be host:port {_BIND}"),
    (["analyst", "--out", "o", "--listen", "localhost"], "--listen", f"listen address 'localhost' must be host:port {_BIND}"),
    (["analyst", "--out", "o", "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:-1"], "--health-listen",
     f"listen address '127.0.0.1:-1' must be host:port {_BIND}"),
    (["party", "--id", "p", "--job", "j", "--data", "d", "--servers", "127.0.0.1:5001,127.0.0.1:0"], "--servers",
     f"endpoint '127.0.0.1:0' must be host:port {_PEER}"),
    (["health", "--target", "127.0.0.1:99999"], "--target", f"endpoint '127.0.0.1:99999' must be host:port {_PEER}"),
    (["job", "status", "--analyst", "127.0.0.1:0"], "--analyst", f"endpoint '127.0.0.1:0' must be host:port {_PEER}"),
], ids=lambda x: x if isinstance(x, str) and x.startswith("--") else None)
def test_an_endpoint_port_out_of_range_is_a_one_line_usage_error(argv, flag, text, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    command = " ".join(argv[:2]) if argv[0] == "job" else argv[0]
    assert _error(capsys) == f"ltm {command}: error: argument {flag}: {text}"


#: not host:port, though a host:port split on the last ':' would accept them: a gRPC target scheme
#: (the analyst or a party would open a socket file or use another resolver), a space, a bare IPv6 address
_NOT_ENDPOINTS = ["unix:/var/run/docker.sock:1", "dns:///h:1", "a b:1", "::1:5"]


@pytest.mark.parametrize("value", _NOT_ENDPOINTS)
@pytest.mark.parametrize("argv, flag, what, rule", [
    (["health", "--target", "{v}"], "--target", "endpoint", _PEER),
    (["job", "status", "--analyst", "{v}"], "--analyst", "endpoint", _PEER),
    (["party", "--id", "p", "--job", "j", "--data", "d", "--servers", "127.0.0.1:5001,{v}"], "--servers", "endpoint",
     _PEER),
    (["server", "--id", "s", "--data-dir", "d", "--listen", "{v}"], "--listen", "listen address", _BIND),
    (["analyst", "--out", "o", "--listen", "{v}"], "--listen", "listen address", _BIND),
], ids=lambda x: x if isinstance(x, str) and x.startswith("--") else None)
def test_a_target_scheme_or_malformed_endpoint_is_refused_in_one_line(value, argv, flag, what, rule, capsys) -> None:
    argv = [a.replace("{v}", value) for a in argv]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    command = " ".join(argv[:2]) if argv[0] == "job" else argv[0]
    assert _error(capsys) == f"ltm {command}: error: argument {flag}: {what} {value!r} must be host:port {rule}"


@pytest.mark.parametrize("key, value, text", [
    ("max_epsilon", "nan", "max_epsilon: must be a number ≥ 0, got 'nan'"),
    ("servers", '"127.0.0.1:70000"', f"servers: endpoint '127.0.0.1:70000' must be host:port {_PEER}"),
    ("servers", '"unix:/var/run/docker.sock:1"', f"servers: endpoint 'unix:/var/run/docker.sock:1' must be host:port {_PEER}"),
])
def test_a_config_file_value_passes_the_flags_check(key, value, text, tmp_path, capsys) -> None:
    settings = {"id": '"party-0"', "job": '"j"', "data": '"d.csv"', "servers": '"127.0.0.1:1"', "insecure": "true",
                key: value}
    cfg = tmp_path / "party.toml"
    cfg.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    with pytest.raises(SystemExit) as exc:
        main(["party", "--config", str(cfg)])
    assert exc.value.code == 2
    assert _error(capsys) == f"ltm party: error: --config {cfg}: {text}"


def test_endpoints_in_range_are_accepted() -> None:
    from ltm.cli.app import build_parser

    args = build_parser("party").parse_args(["party", "--id", "p", "--job", "j", "--data", "d",
                                             "--servers", "127.0.0.1:1,[::1]:65535,server-2.ltm:50051"])
    assert args.servers == "127.0.0.1:1,[::1]:65535,server-2.ltm:50051"
    for listen in ("0.0.0.0:0", "[::]:50051", "localhost:65535", "127.0.0.1:1"):
        args = build_parser("server").parse_args(["server", "--id", "s", "--data-dir", "d", "--listen", listen])
        assert args.listen == listen
    for target in ("server-0.example.org:443", "[2001:db8::1]:1", "10.0.0.1:50051"):
        assert build_parser("health").parse_args(["health", "--target", target]).target == target


def test_an_experiment_error_is_mapped_by_the_app_once(tmp_path, capsys) -> None:
    """A bad spec ends ``ltm experiment run`` through the app's one handler: its status, one line."""
    spec = tmp_path / "bad.toml"
    spec.write_text('name = "bad"\n')
    assert main(["experiment", "run", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltm experiment: error: ") and err.count("\n") == 1, err


_OPERATE = ["operate", "--party-data", "p", "--insecure", "--servers"]


@pytest.mark.parametrize("servers, text", [
    ("server-0=server-0:50051,server-1=127.0.0.1:70000",
     "endpoint '127.0.0.1:70000' must be host:port (a DNS name, an IPv4 address or [IPv6], port 1–65535)"),
    ("server-0=unix:/x:1,server-1=h:1", "endpoint 'unix:/x:1' must be host:port"),
    ("server-1=h:1,server-0=h:2", "list the servers as server-0, server-1, in that order"),
    ("server-0:h:1", "write server-0=host:port,server-1=host:port,…"),
    ("", "write server-0=host:port,server-1=host:port,…"),
])
def test_operate_checks_its_server_map_like_every_endpoint(servers, text, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*_OPERATE, servers])
    assert exc.value.code == 2
    error = _error(capsys)
    assert error.startswith("ltm operate: error: argument --servers: ") and text in error, error


def test_operate_reads_its_server_map_as_id_endpoint_pairs() -> None:
    from ltm.cli.app import build_parser

    args = build_parser("operate").parse_args([*_OPERATE, "server-0=server-0:50051, server-1=[::1]:7"])
    assert args.servers == [("server-0", "server-0:50051"), ("server-1", "[::1]:7")]

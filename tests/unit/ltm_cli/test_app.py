"""The ``ltm`` app as a whole: every registered command is listed with its one-line help and
answers ``--help``; the usage errors of the flags the option groups declare (ltm_cli/options.py) are
one line and exit status 2."""
from __future__ import annotations

import pytest

from ltm_cli.app import COMMANDS, main


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


@pytest.mark.parametrize("argv, flag, text", [
    (["server", "--id", "s", "--data-dir", "d", "--listen", "127.0.0.1:65536"], "--listen",
     "'127.0.0.1:65536': port 65536 is out of range (0–65535)"),
    (["analyst", "--out", "o", "--listen", "localhost"], "--listen", "'localhost': write host:port"),
    (["analyst", "--out", "o", "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:-1"], "--health-listen",
     "'127.0.0.1:-1': write host:port"),
    (["party", "--id", "p", "--job", "j", "--data", "d", "--servers", "127.0.0.1:5001,127.0.0.1:0"], "--servers",
     "'127.0.0.1:0': port 0 is out of range (1–65535)"),
    (["health", "--target", "127.0.0.1:99999"], "--target", "'127.0.0.1:99999': port 99999 is out of range (1–65535)"),
    (["job", "status", "--analyst", "127.0.0.1:0"], "--analyst", "'127.0.0.1:0': port 0 is out of range (1–65535)"),
], ids=lambda x: x if isinstance(x, str) and x.startswith("--") else None)
def test_an_endpoint_port_out_of_range_is_a_one_line_usage_error(argv, flag, text, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    command = " ".join(argv[:2]) if argv[0] == "job" else argv[0]
    assert _error(capsys) == f"ltm {command}: error: argument {flag}: {text}"


@pytest.mark.parametrize("key, value, text", [
    ("max_epsilon", "nan", "max_epsilon: must be a number ≥ 0, got 'nan'"),
    ("servers", '"127.0.0.1:70000"', "servers: '127.0.0.1:70000': port 70000 is out of range (1–65535)"),
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
    from ltm_cli.app import build_parser

    args = build_parser("party").parse_args(["party", "--id", "p", "--job", "j", "--data", "d",
                                             "--servers", "127.0.0.1:1,[::1]:65535,server-2.ltm:50051"])
    assert args.servers == "127.0.0.1:1,[::1]:65535,server-2.ltm:50051"
    args = build_parser("server").parse_args(["server", "--id", "s", "--data-dir", "d", "--listen", "0.0.0.0:0"])
    assert args.listen == "0.0.0.0:0"


def test_an_experiment_error_is_mapped_by_the_app_once(tmp_path, capsys) -> None:
    """A bad spec ends ``ltm experiment run`` through the app's one handler: its status, one line."""
    spec = tmp_path / "bad.toml"
    spec.write_text('name = "bad"\n')
    assert main(["experiment", "run", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltm experiment: error: ") and err.count("\n") == 1, err

"""The ``ltm`` parser tree as a person meets it: help on every flag, a description on every
subcommand, required flags marked required, and a typo answered by the subcommand that got it.

Every test walks the whole tree built by :func:`ltm.cli.app.build_parser` (each command's own module
adds its parser), so flags added later are covered without touching this file.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from ltm.cli.app import COMMANDS, build_parser, main

SKIP = (argparse._HelpAction, argparse._VersionAction)


def _children(p: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            yield from a.choices.items()


def _walk(p: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    yield path, p
    for name, child in _children(p):
        yield from _walk(child, path + [name])


def tree() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """(path, parser) for every command and nested subcommand, each built as `ltm <command>` builds it."""
    out = []
    for name in COMMANDS:
        command = dict(_children(build_parser(name)))[name]
        out.extend(_walk(command, [name]))
    return out


TREE = tree()


def usage_error(argv: list[str], capsys) -> str:
    """What ``ltm argv`` writes to stderr when it refuses the command line (exit status 2, argparse's)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_the_tree_is_walked_whole() -> None:
    names = {" ".join(path) for path, _ in TREE}
    assert set(COMMANDS) <= names
    assert {"job submit", "job bounds", "bench e2e", "experiment run"} <= names  # nested ones too


@pytest.mark.parametrize("path,parser", TREE, ids=[" ".join(p) for p, _ in TREE])
def test_every_argument_has_help_and_every_command_a_description(path, parser) -> None:
    assert (parser.description or "").strip(), f"ltm {' '.join(path)} has no description"
    for a in parser._actions:
        if isinstance(a, SKIP) or isinstance(a, argparse._SubParsersAction):
            continue
        assert a.help and a.help != argparse.SUPPRESS and a.help.strip(), \
            f"ltm {' '.join(path)} {'/'.join(a.option_strings) or a.dest} has no help"


def test_actors_required_flags_are_required_and_listed_so(capsys) -> None:
    wanted = {"server": {"--id", "--listen", "--data-dir"}, "party": {"--id", "--servers", "--job", "--data"},
              "analyst": {"--listen", "--out"}}
    for path, parser in TREE:
        if path[0] not in wanted or len(path) > 1:
            continue
        required = {o for a in parser._actions if a.required for o in a.option_strings if o.startswith("--")}
        assert required == wanted[path[0]]
        usage = parser.format_usage()
        for flag in required:
            assert f" {flag} " in usage and f"[{flag} " not in usage  # not shown as optional
        err = usage_error([path[0]], capsys)
        assert f"usage: ltm {path[0]}" in err and "the following arguments are required" in err


def test_config_file_and_offline_server_checks_make_required_flags_optional(tmp_path) -> None:
    cfg = tmp_path / "party.toml"
    cfg.write_text('id = "party-0"\nservers = "127.0.0.1:1"\njob = "j"\ndata = "d.csv"\n')
    args = build_parser("party").parse_args(["party", "--config", str(cfg)])
    assert args.id is None and args.config == str(cfg)  # filled from the file by ltm.transport.config.merge
    partial = tmp_path / "partial.toml"
    partial.write_text('id = "party-0"\n')
    with pytest.raises(SystemExit):  # the keys the file does not set stay required
        build_parser("party").parse_args(["party", "--config", str(partial)])
    args = build_parser("server").parse_args(["server", "--data-dir", str(tmp_path), "--check"])
    assert args.check is True and args.id is None


def _typo(flag: str, flags: set[str]) -> str:
    """``flag`` with one letter changed, so that it is neither a flag nor the start of one."""
    for i in range(len(flag) - 1, 1, -1):
        if flag[i] == "-":
            continue
        for c in "qzxjkvw":
            cand = flag[:i] + c + flag[i + 1:]
            if cand != flag and not any(f.startswith(cand) for f in flags):
                return cand
    raise AssertionError(f"no typo for {flag}")


@pytest.mark.parametrize("path,parser", TREE, ids=[" ".join(p) for p, _ in TREE])
def test_a_mistyped_flag_names_the_subcommand_usage_and_the_closest_flag(path, parser, capsys) -> None:
    flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    flags = flags - {"--help"} or flags  # a command with no flag of its own still has --help
    flag = max(sorted(flags), key=len)  # the longest: one changed letter leaves it the closest by far
    typo = _typo(flag, flags)
    err = usage_error(path + [typo, "1"], capsys)
    assert err.startswith(f"usage: ltm {' '.join(path)} "), err[:200]
    assert f"ltm {' '.join(path)}: error: unrecognized arguments: {typo}" in err
    assert f"did you mean {flag}?" in err


@pytest.mark.parametrize("argv,usage,suggestion", [
    (["party", "--idd", "party-0"], "usage: ltm party ", "--id"),      # --id, --servers, ... missing too
    (["job", "--hlep"], "usage: ltm job ", "--help"),                  # the subcommand is missing too
    (["job", "status", "--jsno"], "usage: ltm job status ", "--json"),
])
def test_a_mistyped_flag_wins_over_missing_required_ones(argv, usage, suggestion, capsys) -> None:
    err = usage_error(argv, capsys)
    assert err.startswith(usage) and f"did you mean {suggestion}?" in err and "required" not in err


@pytest.mark.parametrize("argv,usage,suggestion", [
    (["sever"], "usage: ltm ", "did you mean 'server'?"),
    (["job", "statsu"], "usage: ltm job ", "did you mean 'status'?"),
    (["demo", "--sketch", "sprase"], "usage: ltm demo ", "did you mean 'sparse'?"),
])
def test_a_mistyped_command_or_choice_names_the_closest(argv, usage, suggestion, capsys) -> None:
    err = usage_error(argv, capsys)
    assert err.startswith(usage) and suggestion in err


def test_no_suggestion_for_a_flag_like_nothing(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["health", "--zzzzzzzzzzzzzzzzz"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzzzzzzzzzzzzz" in err and "did you mean" not in err

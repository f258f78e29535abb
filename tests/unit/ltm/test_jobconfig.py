"""The job-configuration model (ltm/jobconfig.py): each job parameter declared once.

Checks that every field's flag and job-file key are the field's only declarations, that the command
line and the job-file parser use the field's default and help, and that the simulator's configuration
takes its defaults from the same place.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import MISSING, fields

import pytest

from ltm import jobconfig, jobfile
from ltm.cli.app import build_parser
from ltm.cli.simulate import simulate_config
from ltm.dp.mechanisms import CALIBRATIONS, MECHANISMS
from ltm.jobconfig import FIELDS, SAME, add_options, default, field, file_default, flag_fields, toml_fields
from ltm.jobfile import JobFileError, parse_job_file, render_job_file
from ltm.jobspec import PARTITIONS, RELEASE_KINDS, UPLOAD_MODES
from ltm.sharing import SHARE_MODES
from ltm.sim.runtime.simulate import SimulateConfig


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings}


def _subparser(command: str, *path: str) -> argparse.ArgumentParser:
    parser = build_parser(command)
    for name in (command, *path):
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def _minimal_doc() -> dict:
    """A valid job file that states only what a job file must: every optional key absent."""
    return {"job": {"id": "j1"}, "privacy": {"epsilon": 1.0, "delta": 1e-6},
            "servers": [{"id": "server-0", "endpoint": "h0:1"}, {"id": "server-1", "endpoint": "h1:1"}],
            "parties": [{"id": "party-0", "clients": 400}, {"id": "party-1", "clients": 400}],
            "columns": [{"name": "a", "range": [0.0, 10.0]}, {"name": "y", "role": "label", "range": [0.0, 1.0]}]}


def _lookups(monkeypatch: pytest.MonkeyPatch, doc: dict) -> dict[tuple[str, str], tuple]:
    """(section, key) → (default, required) of every key the job-file parser looks up in ``doc``."""
    seen: dict[tuple[str, str], tuple] = {}
    original = jobfile._Problems.get

    def spy(self, table, key, kind, where, default=None, required=False):
        if where.startswith("[") and not where.startswith("[["):
            seen.setdefault((where.strip("[]"), key), (default, required))
        return original(self, table, key, kind, where, default, required)

    monkeypatch.setattr(jobfile._Problems, "get", spy)
    parse_job_file(render_job_file(doc), resolve=False)
    return seen


# ------------------------------------------------------------------------------- one declaration
def test_each_flag_and_each_key_is_declared_by_one_field():
    names = [f.name for f in FIELDS]
    flags = [flag for f in FIELDS for flag in f.flags]
    keys = [f.toml for f in FIELDS if f.toml]
    assert len(set(names)) == len(names)
    assert len(set(flags)) == len(flags), sorted({x for x in flags if flags.count(x) > 1})
    assert len(set(keys)) == len(keys), sorted({x for x in keys if keys.count(x) > 1})
    for f in FIELDS:
        assert f.flags or f.toml, f"{f.name}: neither a flag nor a job-file key"
        assert f.group in jobconfig.GROUPS and f.help, f.name
        assert all(flag.startswith("--") for flag in f.flags), f.name
        assert (f.group == "file") == (not f.flags), f"{f.name}: the group 'file' holds exactly the keys without a flag"


def test_every_job_file_key_the_parser_accepts_is_a_field(monkeypatch):
    """The parser's key table is the model's, and the parser reads each of those keys (and no other)."""
    assert jobfile._SECTIONS == jobconfig.toml_sections()
    read = set(_lookups(monkeypatch, _minimal_doc()))
    declared = {f.toml for f in toml_fields()}
    # [[privacy.prejob]] is an array of tables, read by its own step (_prejobs), not a value lookup
    assert read == declared - {("privacy", "prejob")}


def test_every_key_absent_from_a_job_file_takes_the_fields_file_default(monkeypatch):
    seen = _lookups(monkeypatch, _minimal_doc())
    for f in toml_fields():
        if f.toml == ("privacy", "prejob"):
            continue
        got_default, required = seen[f.toml]
        assert required == f.file_required, f"{f.key}: required {required}, the model says {f.file_required}"
        if f.name == "model":  # None in the model: the data decide (ridge with a label column, else lowrank)
            assert f.default is None and got_default == "ridge" and "label" in f.help
        elif f.name == "m":  # None in the model: the planner (kind auto) or a lift (1) decides
            assert f.default is None and got_default is None
        elif not f.file_required:
            assert got_default == file_default(f.name), f"{f.key}: the parser's default {got_default!r}"
    # the required keys are refused when absent, one line each
    for f in toml_fields():
        if f.file_required:
            section, key = f.toml
            doc = _minimal_doc()
            doc[section] = {k: v for k, v in doc[section].items() if k != key}
            with pytest.raises(JobFileError, match=f"missing required key {key!r}"):
                parse_job_file(render_job_file(doc), resolve=False)


def test_a_field_with_a_flag_and_a_key_has_one_default_and_one_help():
    both = [f for f in FIELDS if f.flags and f.toml]
    assert {"epsilon", "delta", "partition", "sketch", "m", "s", "share_mode", "clip", "mechanism", "calibration",
            "t_prime", "corrupt_parties", "colluding_servers", "model", "lam", "rank",
            "debias"} <= {f.name for f in both}
    for f in both:
        # a flag and a key may differ only where the field says why (and never silently)
        if f.file_default is SAME and not f.file_required:
            assert file_default(f.name) == f.default
        else:
            assert f.file_note, f"{f.name}: the job file's default differs from the flag's without a reason"


def test_the_flags_take_the_fields_default_and_help():
    """`ltm simulate` takes every field with a flag, each from the model, with its default and help."""
    actions = _actions(_subparser("simulate"))
    for f in flag_fields():
        a = actions[f.name]
        assert tuple(a.option_strings) == f.flags, f.name
        assert a.default == f.default, f"--{f.name}: default {a.default!r}, the model says {f.default!r}"
        assert a.help == f.help_text() and "{default}" not in a.help, f.name
        if f.choices:
            assert tuple(a.choices) == f.choices, f.name
    assert set(actions) - {"help"} == {f.name for f in flag_fields()}


def test_the_simulate_configuration_takes_the_fields_defaults():
    flagged = {f.name for f in flag_fields()}
    for f in fields(SimulateConfig):
        if f.name in flagged and f.name != "features_n":  # features_n: None on the command line = not given
            assert f.default is not MISSING and f.default == default(f.name), f.name
    # every flag of `ltm simulate` reaches the configuration, except the output format and the progress bar's
    assert flagged - {f.name for f in fields(SimulateConfig)} == {"json", "quiet"}


def test_every_simulate_flag_reaches_the_simulate_configuration():
    """Each flag set to a value other than its default arrives in SimulateConfig's field of that name."""
    argv, expect = ["simulate"], {}
    for f in flag_fields():
        if f.action:
            argv.append(f.flag)
            expect[f.name] = f.action == "store_true"
            continue
        if f.name == "model":
            value = "rf_ridge"  # --features-n and --bandwidth need it
        elif f.name == "calibration":
            value = "paper"
        elif f.choices:
            value = next(c for c in f.choices if c != f.default)
        elif f.type is float:
            value = 0.375
        elif f.type is not None:
            value = 7
        else:
            value = "x7"
        argv += [f.flag, str(value)]
        expect[f.name] = value
    expect["features"] = ["x7"]
    cfg = simulate_config(build_parser("simulate").parse_args(argv))
    for name, value in expect.items():
        if name not in ("json", "quiet"):  # display options: ltm/cli/simulate.py reads them itself
            assert getattr(cfg, name) == value, f"--{name}: {getattr(cfg, name)!r}, given {value!r}"


def test_choices_agree_with_the_core():
    assert field("partition").choices == PARTITIONS
    assert field("share_mode").choices == SHARE_MODES
    assert field("mechanism").choices == MECHANISMS
    assert field("upload_mode").choices == ("auto", *UPLOAD_MODES)
    assert set(field("sketch").choices) <= {"auto", *RELEASE_KINDS}
    assert default("calibration") in CALIBRATIONS


# ------------------------------------------------------------------------------- the generator
def test_add_options_overrides_fill_the_help_and_refuse_unknown_fields():
    p = argparse.ArgumentParser()
    add_options(p, "sketch", only=("m", "k"), defaults={"k": 2}, helps={"m": "rows (default {default})"})
    add_options(p, "run", only=("seed",), types={"seed": str})
    a = _actions(p)
    assert a["k"].default == 2 and a["k"].help.endswith("default 2)")
    assert a["m"].help == "rows (default None)" and a["seed"].type is str
    assert p.parse_args(["--seed", "x"]).seed == "x"
    with pytest.raises(KeyError, match="no field"):
        add_options(argparse.ArgumentParser(), "sketch", only=("epsilon",))
    with pytest.raises(KeyError, match="no option group"):
        add_options(argparse.ArgumentParser(), "nope")


#: Flags a command declares itself because they mean something else there (never a job parameter
#: restated): (command, flag) → why.
OWN_FLAGS = {
    ("bench e2e", "--n"): "clients of the benchmark, or a series of them, not synthetic rows",
    ("bench e2e", "--d"): "the client vector's width",
    ("bench e2e", "--parties"): "party processes, default by n (4 up to 10^7, then n / 6.25e6)",
    ("bench e2e", "--upload-mode"): "adds 'both': per-client and aggregate side by side",
    ("audit", "--upload-mode"): "an audit audits one concrete mode: per-client (default) or aggregate, no 'auto'",
    ("bench e2e", "--verified-clipping"): "off, on or both: the unverified and the verified job side by side",
    ("bench sketch", "--n"): "clients of the benchmark, not synthetic rows",
    ("bench sketch", "--d"): "the client vector's width",
    ("audit", "--n"): "clients of the audited job",
    ("loadtest", "--parties"): "concurrent party streams P (default 1000), not a job's parties",
    ("party", "--data"): "the party's own data: a CSV, a column directory or a synthetic source",
    ("party", "--upload-mode"): "the party's policy: refuse a job whose upload mode differs",
    ("job bounds", "--epsilon"): "the DP pre-job's total ε, required, split between its rounds",
    ("job bounds", "--delta"): "the DP pre-job's total δ (default 1e-7)",
    # the party's own budget and ledger; `ltm simulate`'s flags of the same names stand in for them
    ("party", "--budget-epsilon"): "the party's lifetime budget ε (default: ltm.party.ledger's)",
    ("party", "--budget-delta"): "the δ of the party's budget",
    ("party", "--ledger-dir"): "the party host's ledger directory (default: under $XDG_STATE_HOME)",
}
#: Defaults a command sets for a reason of its own, through add_options(defaults=...).
OWN_DEFAULTS = {("bench e2e", "seed"): 1, ("bench sketch", "m"): 100, ("audit", "m"): 4, ("audit", "k"): 2,
                ("audit", "sketch"): "sparse",  # an audit audits one kind: "auto" is no mechanism
                ("loadtest", "m"): 16,
                ("party", "quiet"): None}  # None: a party's --config file may set it


@pytest.mark.parametrize("command, path", [("simulate", ()), ("demo", ()), ("operate", ()), ("bench", ("e2e",)),
                                           ("bench", ("sketch",)), ("bench", ("paper",)), ("audit", ()),
                                           ("loadtest", ()), ("party", ()), ("job", ("check",)),
                                           ("job", ("status",)), ("job", ("bounds",))])
def test_every_command_takes_the_job_flags_from_the_model(command, path):
    """A command that takes a job parameter's flag gets it from the model (add_options), spelt as
    the field spells it, with the field's default unless the command says otherwise."""
    by_flag = {flag: f for f in flag_fields() for flag in f.flags}
    command = " ".join((command, *path))
    actions = _actions(_subparser(*command.split()))
    generated = [a for a in actions.values() if getattr(a, "job_field", None)]
    assert generated, f"ltm {command}: no flag from the model"
    for a in actions.values():
        own = [o for o in a.option_strings if o in by_flag and (command, o) not in OWN_FLAGS]
        if not own or (command == "bench e2e" and a.dest == "kind"):  # e2e's --release/--kind: its own dest, kept
            continue
        f = by_flag[own[0]]
        assert getattr(a, "job_field", None) == f.name, f"ltm {command} {own[0]} is declared by hand, not by the model"
        assert tuple(a.option_strings) == f.flags, (command, f.name)
        assert a.default == OWN_DEFAULTS.get((command, f.name), f.default), (command, f.name)


def test_the_model_imports_nothing_above_the_core():
    code = ("import sys, ltm.jobconfig; print(' '.join(sorted(m for m in sys.modules "
            "if m.split('.')[0] in {'ltm', 'party', 'server', 'analyst', 'sim', 'ltm.datasets', 'transport', 'experiments'})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert set(out) <= {"ltm", "ltm.jobconfig", "ltm.dp", "ltm.dp.defaults"}, out

"""One error base (ltm/errors.py): every exception class the project defines derives from
:class:`~ltm.errors.LtmError`, names a gRPC status and an exit status, and the ``ltm`` command maps
each one in its single handler (ltm/cli/app.py) to that status with one line on stderr."""
from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil

import pytest

from ltm.cli import app as cli
from ltm.errors import STATUS_CODES, LtmError

#: Walked one by one: the actor folders sit outside ltm/ (pyproject's package-dir), so a walk of ``ltm`` misses them.
PACKAGES = ("ltm", "ltm.server", "ltm.analyst", "ltm.party")
#: Each exception's package, as the last test below expects to find them all.
EXPECTED_HOMES = {"ltm", "ltm.server", "ltm.analyst", "ltm.party", "ltm.transport", "ltm.sim", "ltm.datasets",
                  "ltm.experiments"}

#: Exception classes that are deliberately not errors of the project, and why.
NOT_ERRORS = {
    # a signal turned into Ctrl-C: `except Exception` (and so LtmError) must never catch it
    "ltm.sim.localnet.launcher.Terminated": KeyboardInterrupt,
}

#: The exit statuses the README and deploy/README.md document (2 usage, 3 refusal or damaged state,
#: 4 bad data, 5 unreachable or incomplete upload, 6 upload journal, 7 privacy ledger); 1 otherwise.
EXIT_CODES = {
    "ltm.errors.CommandError": 2, "ltm.transport.tls.CertificateMissing": 2, "ltm.analyst.store.AnalystStoreInUse": 2,
    "ltm.analyst.store.AnalystStoreDamaged": 2,  # a CommandError: the instance says 3 (analyst/store.py)
    "ltm.client_set.ClientSetError": 2, "ltm.dp.calibration.CalibrationError": 2, "ltm.identifiers.IdentifierError": 2,
    "ltm.jobfile.JobFileError": 2, "ltm.jobspec.JobSpecError": 2, "ltm.flp.field.FieldError": 2, "ltm.transforms.TransformError": 2,
    "ltm.party.data_source.DataSourceError": 2, "ltm.transport.certs.CSRPolicyError": 2, "ltm.transport.config.ConfigError": 2,
    "ltm.datasets.tables.DataError": 2, "ltm.experiments.spec.SpecError": 2, "ltm.experiments.executors.ExecutorUnavailable": 2,
    "ltm.experiments.report.PlotsUnavailable": 2, "ltm.experiments.release_backends.NetworkedJobFailed": 2,
    "ltm.party.uploader.PolicyViolation": 3, "ltm.verified_clipping.ClippingProofFailed": 3, "ltm.party.ledger.BudgetExceeded": 3, "ltm.party.ledger.AccountantUnavailable": 3,
    "ltm.server.sqlite_store.StoreError": 3, "ltm.server.sqlite_store.StoreCorruptError": 3,
    "ltm.party.streamed_source.NonNumericCell": 2,  # a DataSourceError, as its parent
    "ltm.party.randomizer.PartyDataError": 4,
    "ltm.party.uploader.UploadIncomplete": 5,
    "ltm.party.journal.JournalError": 6,
    "ltm.party.ledger.LedgerError": 7, "ltm.party.ledger.LedgerCorrupt": 7, "ltm.party.ledger.LedgerMissing": 7,
}

#: The gRPC status a service answers with; every other class is INTERNAL (a generic answer, details logged).
STATUSES = {
    "ltm.jobspec.JobSpecError": "INVALID_ARGUMENT", "ltm.errors.DataLossError": "DATA_LOSS",
    "ltm.flp.field.FieldError": "INVALID_ARGUMENT",
    "ltm.server.sqlite_store.StoreCorruptError": "DATA_LOSS", "ltm.analyst.store.AnalystStoreDamaged": "DATA_LOSS",
    "ltm.analyst.coordinator.ReleaseFailed": "FAILED_PRECONDITION",
    "ltm.verified_clipping.ClippingProofFailed": "FAILED_PRECONDITION",
    "ltm.analyst.coordinator.ServerUnreachable": "FAILED_PRECONDITION", "ltm.analyst.coordinator.NotPublished": "UNAVAILABLE",
    "ltm.transport.tls.AuthenticationError": "UNAUTHENTICATED", "ltm.transport.signing.SignatureRefused": "PERMISSION_DENIED",
}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def project_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a module of the project's packages (each module imported)."""
    found: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name.endswith(".__main__"):  # `python -m ltm.cli`: importing it runs the command
                continue
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name \
                        and not issubclass(obj, Warning):  # a warning is advice, not an error
                    found[_name(obj)] = obj
    return [found[k] for k in sorted(found)]


ERRORS = [cls for cls in project_exceptions() if _name(cls) not in NOT_ERRORS]


def test_the_walk_finds_the_project_errors():
    # The walk must see every package (a broken walk would pass the tests below vacuously).
    names = {_name(cls) for cls in ERRORS}
    assert set(EXIT_CODES) <= names and set(STATUSES) <= names
    homes = {".".join(cls.__module__.split(".")[:2]) for cls in ERRORS}
    homes = {h if h.split(".")[-1] in {e.split(".")[-1] for e in EXPECTED_HOMES} else "ltm" for h in homes}
    assert homes == EXPECTED_HOMES


@pytest.mark.parametrize("cls", ERRORS, ids=_name)
def test_every_project_error_derives_from_the_base(cls):
    assert issubclass(cls, LtmError), f"{_name(cls)} does not derive from ltm.errors.LtmError"
    assert cls.code in STATUS_CODES, (_name(cls), cls.code)
    assert cls.code == STATUSES.get(_name(cls), "INTERNAL"), _name(cls)
    assert cls.exit_code == EXIT_CODES.get(_name(cls), 1), _name(cls)


def test_the_exceptions_that_are_not_errors_stay_what_they_are():
    walked = {_name(cls): cls for cls in project_exceptions()}
    for name, base in NOT_ERRORS.items():
        assert issubclass(walked[name], base) and not issubclass(walked[name], Exception), name


def _instance(cls: type[LtmError], message: str) -> LtmError:
    """An instance with ``message`` as its text, whatever the class's own constructor takes."""
    exc = cls.__new__(cls)
    BaseException.__init__(exc, message)
    return exc


def _run_cli_raising(monkeypatch, exc: BaseException) -> int:
    """``ltm probe`` whose command raises ``exc``: the exit status of ltm.cli.app.main's one handler."""
    def fail(args):
        raise exc

    parser = argparse.ArgumentParser(prog="ltm")
    parser.set_defaults(func=fail, command="probe")
    monkeypatch.setattr(cli, "build_parser", lambda command=None: parser)
    return cli.main([])


@pytest.mark.parametrize("cls", ERRORS, ids=_name)
def test_the_cli_maps_every_error_once(monkeypatch, capsys, cls):
    status = _run_cli_raising(monkeypatch, _instance(cls, "the reason\nin two lines"))
    assert status == EXIT_CODES.get(_name(cls), 1)
    text = "the reason\nin two lines" if hasattr(cls, "problems") else "the reason in two lines"
    assert capsys.readouterr().err == f"ltm probe: error: {cls.prefix}{text}\n"


def test_the_cli_keeps_a_command_errors_status_and_says_nothing_more_for_a_logged_refusal(monkeypatch, capsys):
    from ltm.errors import CommandError
    from ltm.party.ledger import LedgerCorrupt

    assert _run_cli_raising(monkeypatch, CommandError("port in use", status=5)) == 5
    assert capsys.readouterr().err == "ltm probe: error: port in use\n"
    logged = LedgerCorrupt("record 1 is damaged")
    logged.reported = True  # the party logged it as a JSON line
    assert _run_cli_raising(monkeypatch, logged) == 7
    assert capsys.readouterr().err == ""
    # anything else is a bug, not a usage error: its traceback and a request to report it, status 1
    assert _run_cli_raising(monkeypatch, ValueError("could not convert 'x' to float")) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ValueError: could not convert 'x' to float" in err
    assert err.endswith("ltm probe: unexpected error (a bug in ltm, not in how it was run): please report it with "
                        "the traceback above\n") and "error: could not convert" not in err

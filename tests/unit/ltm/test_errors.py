"""One error base (ltm/errors.py): every exception class the project defines derives from
:class:`~ltm.errors.LtmError`, names a gRPC status and an exit status, and the ``ltm`` command maps
each one in its single handler (ltm_cli/app.py) to that status with one line on stderr."""
from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil

import pytest

from ltm_cli import app as cli
from ltm.errors import STATUS_CODES, LtmError

PACKAGES = ("ltm", "server", "analyst", "party", "transport", "sim", "ltm_datasets", "experiments")

#: Exception classes that are deliberately not errors of the project, and why.
NOT_ERRORS = {
    # a signal turned into Ctrl-C: `except Exception` (and so LtmError) must never catch it
    "sim.localnet.launcher.Terminated": KeyboardInterrupt,
}

#: The exit statuses the README and deploy/README.md document (2 usage, 3 refusal or damaged state,
#: 4 bad data, 5 unreachable or incomplete upload, 6 upload journal, 7 privacy ledger); 1 otherwise.
EXIT_CODES = {
    "ltm.errors.CommandError": 2, "transport.tls.CertificateMissing": 2, "analyst.store.AnalystStoreInUse": 2,
    "analyst.store.AnalystStoreDamaged": 2,  # a CommandError: the instance says 3 (analyst/store.py)
    "ltm.client_set.ClientSetError": 2, "ltm.dp.calibration.CalibrationError": 2, "ltm.identifiers.IdentifierError": 2,
    "ltm.jobfile.JobFileError": 2, "ltm.jobspec.JobSpecError": 2, "ltm.transforms.TransformError": 2,
    "party.data_source.DataSourceError": 2, "transport.certs.CSRPolicyError": 2, "transport.config.ConfigError": 2,
    "ltm_datasets.tables.DataError": 2, "experiments.spec.SpecError": 2, "experiments.executors.ExecutorUnavailable": 2,
    "experiments.report.PlotsUnavailable": 2, "experiments.release_backends.NetworkedJobFailed": 2,
    "party.uploader.PolicyViolation": 3, "ltm.verified_clipping.ClippingProofFailed": 3, "party.ledger.BudgetExceeded": 3, "party.ledger.AccountantUnavailable": 3,
    "server.sqlite_store.StoreError": 3, "server.sqlite_store.StoreCorruptError": 3,
    "party.randomizer.PartyDataError": 4,
    "party.uploader.UploadIncomplete": 5,
    "party.journal.JournalError": 6,
    "party.ledger.LedgerError": 7, "party.ledger.LedgerCorrupt": 7, "party.ledger.LedgerMissing": 7,
}

#: The gRPC status a service answers with; every other class is INTERNAL (a generic answer, details logged).
STATUSES = {
    "ltm.jobspec.JobSpecError": "INVALID_ARGUMENT", "ltm.errors.DataLossError": "DATA_LOSS",
    "server.sqlite_store.StoreCorruptError": "DATA_LOSS", "analyst.store.AnalystStoreDamaged": "DATA_LOSS",
    "analyst.coordinator.ReleaseFailed": "FAILED_PRECONDITION",
    "ltm.verified_clipping.ClippingProofFailed": "FAILED_PRECONDITION",
    "analyst.coordinator.ServerUnreachable": "FAILED_PRECONDITION", "analyst.coordinator.NotPublished": "UNAVAILABLE",
    "transport.tls.AuthenticationError": "UNAUTHENTICATED", "transport.signing.SignatureRefused": "PERMISSION_DENIED",
}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def project_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a module of the project's packages (each module imported)."""
    found: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
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
    assert {cls.__module__.split(".")[0] for cls in ERRORS} == set(PACKAGES)


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
    """``ltm probe`` whose command raises ``exc``: the exit status of ltm_cli.app.main's one handler."""
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
    from party.ledger import LedgerCorrupt

    assert _run_cli_raising(monkeypatch, CommandError("port in use", status=5)) == 5
    assert capsys.readouterr().err == "ltm probe: error: port in use\n"
    logged = LedgerCorrupt("record 1 is damaged")
    logged.reported = True  # the party logged it as a JSON line
    assert _run_cli_raising(monkeypatch, logged) == 7
    assert capsys.readouterr().err == ""
    assert _run_cli_raising(monkeypatch, ValueError("could not convert 'x' to float")) == 2  # a library's
    assert capsys.readouterr().err == "ltm probe: error: could not convert 'x' to float\n"

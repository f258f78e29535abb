"""The ``ltm`` command: one parser, one registry of subcommands, one place an error becomes an exit status.

Each subcommand is a module of this package (``ltm/cli/<command>.py``) that declares its flags and
calls into the role's code (``ltm.server.main.run``, ``ltm.sim.runtime.simulate.simulate``, …); the role modules
hold no argument parsing.  Only the module of the command being run is imported, and only then is
its parser built (``ltm server`` must not load the simulator, the other actors or the experiments:
docs/architecture.md §1; ``tests/integration/test_cli_lean.py`` checks what is loaded).  Flags shared by
several commands are declared once in :mod:`ltm.cli.options` (and the job's parameters once in
:mod:`ltm.jobconfig`).
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from typing import Any, Callable


class LtmParser(argparse.ArgumentParser):
    """The ``ltm`` parser and every subcommand's (``add_subparsers`` reuses this class).

    Two changes to argparse's errors, so a typo is answered where it was made: an unknown flag is
    reported by the (sub)command that received it, with that subcommand's usage (argparse would
    pass it up and print the top-level usage of every command) and the closest flag it has; a
    mistyped choice or subcommand names the closest valid one.  The exit status stays argparse's 2.
    A subcommand without a description gets its one-line help as description.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _SubcommandsAction)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if args is not None:
            # Before argparse's own checks: a mistyped flag is the cause of a "required" error too.
            # This parser's own words end at "--" or at its subcommand (the rest is the subcommand's).
            commands = {name for a in self._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}
            own = next((i for i, a in enumerate(args) if a == "--" or a in commands), len(args))
            unknown = [a for a in args[:own] if a.startswith("--") and not self._known_flag(a.split("=", 1)[0])]
            if unknown:
                self.error(f"unrecognized arguments: {' '.join(unknown)}{self._suggest_flag(unknown)}")
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggest_flag(extras)}")
        return namespace, extras

    def _known_flag(self, flag: str) -> bool:
        """A flag of this parser, or (as argparse allows) the start of one: argparse itself then
        accepts it, or names the flags an ambiguous start could mean."""
        return flag in self._option_string_actions or (
            self.allow_abbrev and any(o.startswith(flag) for o in self._option_string_actions))

    def _suggest_flag(self, extras: list[str]) -> str:
        """'; did you mean --x?' for the first unknown flag that resembles one of this parser's."""
        flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        for word in extras:
            if word.startswith("--"):
                match = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.6)
                if match:
                    return f"; did you mean {match[0]}?"
        return ""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices and isinstance(value, str):
            match = difflib.get_close_matches(value, [str(c) for c in action.choices], n=1, cutoff=0.6)
            if match:
                what = "command" if isinstance(action, argparse._SubParsersAction) else "choice"
                raise argparse.ArgumentError(action, f"invalid {what}: {value!r}; did you mean {match[0]!r}? "
                                                     f"(choose from {', '.join(map(repr, action.choices))})")
        super()._check_value(action, value)


class _SubcommandsAction(argparse._SubParsersAction):
    """``add_subparsers`` of :class:`LtmParser`: a subcommand's help is its description unless it
    has its own, so ``ltm <command> --help`` always opens with what the command does."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if kwargs.get("description") is None and kwargs.get("help"):
            kwargs["description"] = kwargs["help"][:1].upper() + kwargs["help"][1:] + "."
        return super().add_parser(name, **kwargs)


#: Every subcommand: name → (its module, its one-line help, which ``ltm --help`` lists).  The module
#: has ``configure(parser)`` (adds its flags and ``func``) and may have ``DESCRIPTION`` (the opening
#: of ``ltm <command> --help``; default: the one-line help).  To add a subcommand, add one entry here
#: and a module that keeps the heavy imports of its role inside the functions.
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("ltm.cli.simulate", "run one LTM job in process and compare it with baselines"),
    "bench": ("ltm.cli.bench", "benchmarks that print JSON"),
    "certs": ("ltm.cli.certs", "create a CA and per-actor mTLS certificates"),
    "server": ("ltm.cli.server", "run an LTM server (stores shares, enforces the release gate)"),
    "party": ("ltm.cli.party", "run a party: fetch and vet a job, upload shares to every server"),
    "analyst": ("ltm.cli.analyst", "run the analyst: coordinates jobs, reconstructs releases, fits models"),
    "demo": ("ltm.cli.demo", "run a whole networked job on loopback: certs, servers, analyst, parties"),
    "operate": ("ltm.cli.operate", "the demo's convenience: build a job from a dataset, write party files, run it"),
    "job": ("ltm.cli.job", "check, submit and follow jobs written as job files (public information only)"),
    "health": ("ltm.cli.health", "exit 0 if an actor's gRPC health service answers SERVING"),
    "audit": ("ltm.cli.audit", "empirical DP audit: a lower bound on ε from many releases (prints JSON)"),
    "loadtest": ("ltm.cli.loadtest", "P concurrent party streams against k real servers on loopback (prints JSON)"),
    "experiment": ("ltm.cli.experiment", "reproduce the papers' figures and tables (experiment specs)"),
}


def lazy(target: str) -> Callable[[argparse.Namespace], int]:
    """``func`` for ``set_defaults``: the role's ``"module:function"``, imported only when the
    command runs (so ``ltm <command> --help`` does not load the role's network stack)."""
    module, name = target.split(":")

    def call(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)

    call.__qualname__ = call.__name__ = name
    call.target = target  # type: ignore[attr-defined]
    return call


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``ltm`` parser with ``command``'s subparser built in full and every other command as a
    stub (name and one-line help only, its module not imported)."""
    parser = LtmParser(prog="ltm", description="LTM: distributed differential privacy by secure sketching")
    parser.add_argument("--version", action="version", version="ltm 0.1.0")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        if name == command:
            module = importlib.import_module(module_name)
            module.configure(sub.add_parser(name, help=help_text, description=getattr(module, "DESCRIPTION", None)))
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def no_grpc_fork_handlers() -> None:
    """Turn gRPC's fork support off for this process (and what it starts), unless the environment
    says otherwise; call it before gRPC is imported (it reads the setting once, at import).

    With it on (grpcio's default), a plain ``fork()`` of a process whose gRPC is busy — a launcher
    with an open channel starting a party through ``preexec_fn``, ``user=``/``group=``, a fork-based
    pool, or any Python that does not use ``vfork`` — runs gRPC's child handler, which restarts its
    poller thread in the child; the child then closes the descriptors it inherited before ``exec``,
    the epoll one among them, and gRPC aborts it: "epoll_wait error: Bad file descriptor", SIGABRT,
    in the log of the process that never started (grpc/grpc#43055; 7 of 300 such forks here).  No
    LTM process uses gRPC in a forked child (``multiprocessing`` uses "spawn"), so nothing needs it."""
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def main(argv: list[str] | None = None) -> int:
    """``ltm``: parse ``argv`` (default: the process's), run the command, return its exit status."""
    no_grpc_fork_handlers()  # before any command imports grpc
    if "LTM_LIFELINE" in os.environ:  # ltm.transport.lifeline.ENV: imported only in a launcher's children
        from ltm.transport.lifeline import hold_from_env

        hold_from_env()  # started by a launcher (ltm demo, bench, loadtest): die with it, however it dies
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    from ltm.errors import LtmError

    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader that is gone (`| head`) is answered below
        return status
    except BrokenPipeError:
        # The reader of our output has gone (`ltm job check … | head`): nothing more to say to anyone.
        # Point stdout at /dev/null so the interpreter's last flush cannot raise again, and exit as a
        # process killed by SIGPIPE would (128 + 13), without a traceback.  (Another pipe broken is a bug.)
        if not _stdout_gone():
            raise
        _silence_stdout()
        return 141
    except LtmError as exc:
        # The one place an error becomes an exit status (ltm/errors.py lists them): the class's
        # exit_code, and one line unless the actor has logged it already.  A list of problems (a job
        # spec's, a job file's) keeps one per line.
        if not getattr(exc, "reported", False):
            text = str(exc) if hasattr(exc, "problems") else _one_line(exc)
            print(f"ltm {args.command}: error: {exc.prefix}{text}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt as exc:
        # Ctrl-C, or SIGTERM/SIGHUP where a command maps them to it (ltm.sim.localnet.launcher.stop_on_termination):
        # its cleanup has run; one line and the shell's status for death by that signal (128 + signum).
        import signal

        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"ltm {args.command}: {str(exc) or 'interrupted'}", file=sys.stderr)  # Ctrl-C: an empty exception
        return 128 + int(signum)
    except ValueError as exc:
        if not _raised_by_ltm(exc):
            return _report_bug(args.command)
        # A refusal the project raised as a plain ValueError (a value it checked and refused; most have an
        # LtmError of their own): one line, a usage error, 2.
        print(f"ltm {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception:
        return _report_bug(args.command)


def entry() -> None:
    """The ``ltm`` process (the console script and ``python -m ltm.cli``): :func:`main`, then exit.

    A command that failed after pyarrow was loaded (a party refusing bad data from a streamed CSV or
    Parquet source) leaves by ``os._exit`` once its output is flushed: at the interpreter's normal
    exit, Arrow's C++ worker threads were seen to abort the process ("terminate called without an
    active exception", SIGABRT) after the one-line refusal, replacing its exit status.  Only failures
    leave this way, so a successful run keeps every cleanup registered with ``atexit``."""
    status = main()
    if status != 0 and "pyarrow" in sys.modules:
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed or vanished stream: nothing left to say
                pass
        os._exit(status)
    sys.exit(status)


def _raised_by_ltm(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is the project's own code (``ltm.*``): a check
    of ours refusing a value, not a library tripping over one we passed it unchecked."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith("ltm.")


def _report_bug(command: str) -> int:
    """An exception the project does not know (no LtmError, not one of its own checks): a bug, or a
    library refusing something we passed it unchecked.  Show where and ask for a report, rather than
    dress it up as a usage error; status 1."""
    import traceback

    traceback.print_exc()
    print(f"ltm {command}: unexpected error (a bug in ltm, not in how it was run): please report it with the "
          "traceback above", file=sys.stderr)
    return 1


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout, or no poll on this platform
        return False


def _silence_stdout() -> None:
    """Send whatever is still buffered for stdout (and anything written later) to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to silence
        pass


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())

"""The ``ltm`` command.  The one module of the core that imports actors — lazily, per subcommand."""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import TYPE_CHECKING, Any

from ltm.dp.defaults import DEFAULT_DELTA
from ltm.jobconfig import add_options, config_values, positive_int

if TYPE_CHECKING:
    from sim.runtime.simulate import SimulateConfig


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




def _print_json(obj: Any) -> None:
    from ltm.jsonio import json_default

    print(json.dumps(obj, indent=2, default=json_default, allow_nan=False))


# ---------------------------------------------------------------------------- simulate
def _add_simulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help=COMMANDS["simulate"][1],
                       description="Parties → k servers → analyst in one process, on a CSV, a synthetic "
                                   "generator, or (default) the bundled real dataset.")
    for group in ("data", "sketch", "privacy", "model", "features", "run"):
        add_options(p, group)  # every flag, help and default from the job-configuration model
    p.set_defaults(func=_run_simulate)


def _parse_calibration(text: str) -> tuple[str, float | None]:
    text = text.strip()
    if text.startswith("interpolate"):
        inner = text[len("interpolate"):].strip("() =:")
        try:
            return "interpolate", float(inner)
        except ValueError:
            raise SystemExit(f"ltm: error: calibration {text!r}: write interpolate(p) with 0 ≤ p ≤ 1") from None
    if text not in ("tight", "paper"):
        raise SystemExit(f"ltm: error: unknown calibration {text!r}; choose tight, paper or interpolate(p)")
    return text, None


def simulate_config(args: argparse.Namespace) -> "SimulateConfig":
    """The simulator's configuration from ``ltm simulate``'s parsed flags: each flag of the job
    model (:mod:`ltm.jobconfig`) sets the configuration's field of the same name."""
    from dataclasses import fields as dataclass_fields

    from sim.runtime.simulate import SimulateConfig

    calibration, p = _parse_calibration(args.calibration)
    values = config_values(args, (f.name for f in dataclass_fields(SimulateConfig)))
    cfg = SimulateConfig(**{**values, "features": [f.strip() for f in args.features.split(",")] if args.features
                            else None, "calibration": calibration, "interpolate_p": p,
                            "features_n": args.features_n or 16})
    if args.model != "rf_ridge" and (args.bandwidth is not None or args.features_n is not None):
        raise SystemExit("ltm: error: --features-n/--bandwidth need --model rf_ridge")
    if args.mechanism == "laplace" and args.delta == DEFAULT_DELTA:
        cfg.delta = 0.0
    return cfg


def _run_simulate(args: argparse.Namespace) -> int:
    from sim.runtime.simulate import simulate

    report = simulate(simulate_config(args))
    if args.json:
        _print_json(report)
    else:
        _print_simulate_summary(report)
    return 0


def _print_simulate_summary(r: dict[str, Any]) -> None:
    from sim.runtime.summary import model_table, privacy_lines, release_words, variation_note, verdict

    pr = r["privacy"]
    print(f"LTM simulate — {r['data']}")
    print(f"  {r['n_train']} training rows, {r['parties']} parties ({r['partition']}), {r['servers']} servers, "
          f"{release_words(r['sketch'])}")
    if r.get("plan"):
        print(f"  release kind chosen by the planner: {r['plan']['reason']}")
    for line in privacy_lines(pr, str(r["sketch"]["kind"])):
        print(line)
    print(f"  randomness: {r['randomness']}")
    for line in model_table("LTM " + r["model"], r["metrics"], r["baselines"], private_lam=r.get("lambda")):
        print(line)
    if "r2" in r["metrics"]:
        print("  " + verdict(r["metrics"], r["baselines"], n=int(r["n_train"]), epsilon=float(pr["epsilon"]),
                             release_kind=str(r["sketch"]["kind"]), planned=bool(r.get("plan"))))
    seeded = str(r.get("randomness", "")).startswith("seeded")
    note = variation_note(r.get("randomness", ""), seeded)
    if r.get("synthetic") or str(r.get("data", "")).startswith("synthetic"):
        note += "; synthetic data are drawn afresh each run, so every row varies" if not seeded else ""
    print("  " + note)
    from party.ledger import describe_admission  # lazily: ltm/cli.py imports actors per subcommand

    for party, entry in sorted(r.get("ledgers", {}).items()):
        print(f"  ledger {party}: {describe_admission(entry)}")
    print(f"  release sha256 {r['release_sha256']}")
    print(f"  time {r['timing_s']['total']:.2f} s")


# ---------------------------------------------------------------------------- bench
_JSON_ANYWAY = "print JSON (the default output is JSON too)"


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help=COMMANDS["bench"][1])
    bsub = p.add_subparsers(dest="bench", required=True)
    sk = bsub.add_parser("sketch", help="one server's result-share computation and the bytes it receives")
    sk.add_argument("--n", type=positive_int, default=1_000_000, help="clients (default 1000000)")
    sk.add_argument("--d", type=positive_int, default=10, help="entries per client vector (default 10)")
    sk.add_argument("--runs", type=positive_int, default=5, help="timed repetitions (default 5)")
    sk.add_argument("--kind", choices=["sparse", "dense"], default="sparse", help="sketch kind (default sparse)")
    add_options(sk, "sketch", only=("m", "s", "k", "share_mode"), defaults={"m": 100},
                helps={"m": "sketch rows (default {default})"})
    add_options(sk, "run", only=("json",), helps={"json": _JSON_ANYWAY})
    sk.set_defaults(func=_run_bench_sketch)
    grid = bsub.add_parser("paper", help="every cell of Burkhardt et al. Tables 3-5 vs MP-SPDZ (JSON)")
    grid.add_argument("--runs", type=positive_int, default=5, help="timed repetitions per cell (default 5)")
    add_options(grid, "run", only=("json",), helps={"json": _JSON_ANYWAY})
    grid.set_defaults(func=_run_bench_paper)
    from sim.tools.bench_e2e import add_parser as add_e2e  # imports grpc; only when `bench` is the command

    add_e2e(bsub)


def _run_bench_sketch(args: argparse.Namespace) -> int:
    from sim.tools.bench import SketchBenchConfig, bench_sketch

    if args.k < 2:
        raise SystemExit("ltm: error: --k must be ≥ 2")
    cfg = SketchBenchConfig(n=args.n, d=args.d, m=args.m, s=args.s, k=args.k, runs=args.runs,
                            share_mode=args.share_mode, kind=args.kind)
    _print_json(bench_sketch(cfg))
    return 0


def _run_bench_paper(args: argparse.Namespace) -> int:
    from sim.tools.bench import bench_paper_grid

    _print_json(bench_paper_grid(runs=args.runs))
    return 0


# ---------------------------------------------------------------------------- main
#: Every subcommand: name → ("module:function" that adds its parser, one-line help).  Only the
#: module of the subcommand being run is imported, and only then is its parser built; the others
#: appear in ``ltm --help`` as stubs (docs/architecture.md §1: ``ltm server`` must not load the simulator, the
#: other actors or the experiments).  To add a subcommand, add one entry here and keep the heavy
#: imports of its module inside the functions (``tests/integration/test_cli_lean.py`` checks what is loaded).
COMMANDS = {
    "simulate": ("ltm.cli:_add_simulate", "run one LTM job in process and compare it with baselines"),
    "bench": ("ltm.cli:_add_bench", "benchmarks that print JSON"),
    "certs": ("transport.certs:add_certs_parser", "create a CA and one mTLS certificate per actor"),
    "server": ("server.main:add_parser", "run an LTM server"),
    "party": ("party.main:add_parser", "run a party: vet a job, upload shares"),
    "analyst": ("analyst.main:add_parser", "run the analyst service"),
    "demo": ("sim.localnet.demo:add_parser", "run a whole networked job on loopback: certs, 3 servers, analyst, parties"),
    "operate": ("sim.localnet.demo:add_operate_parser",
                "the demo's convenience: build a job from a dataset, write party files, run it (not private)"),
    "job": ("analyst.operator:add_parser", "check, submit and follow a job file (public information only)"),
    "health": ("transport.health:add_parser", "probe an actor's gRPC health service"),
    "audit": ("sim.tools.audit:add_parser", "empirical DP audit: a Clopper–Pearson lower bound on ε (prints JSON)"),
    "loadtest": ("sim.tools.loadtest:add_parser", "many concurrent party streams against real servers on loopback (JSON)"),
    "experiment": ("experiments.runner:add_parser", "reproduce the papers' figures and tables (experiment specs)"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    import importlib

    parser = LtmParser(prog="ltm", description="LTM: distributed differential privacy by secure sketching")
    parser.add_argument("--version", action="version", version="ltm 0.1.0")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (target, help_text) in COMMANDS.items():
        if name == command:
            module, func = target.split(":")
            getattr(importlib.import_module(module), func)(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    from ltm.errors import LtmError

    try:
        return int(args.func(args) or 0)
    except (LtmError, ValueError) as exc:
        # The one place an error becomes an exit status (ltm/errors.py lists them): the class's
        # exit_code, and one line unless the actor has logged it already.  A ValueError from outside
        # the project (a value a library refused) is a usage error, 2.  A list of problems (a job
        # spec's, a job file's) keeps one per line.
        if not getattr(exc, "reported", False):
            text = str(exc) if hasattr(exc, "problems") or not isinstance(exc, LtmError) else _one_line(exc)
            print(f"ltm {args.command}: error: {getattr(exc, 'prefix', '')}{text}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt as exc:
        # Ctrl-C, or SIGTERM/SIGHUP where a command maps them to it (sim.localnet.launcher.stop_on_termination):
        # its cleanup has run; one line and the shell's status for death by that signal (128 + signum).
        import signal

        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"ltm {args.command}: {exc or 'interrupted'}", file=sys.stderr)
        return 128 + int(signum)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())

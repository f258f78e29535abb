"""The ``ltm`` command.  The one module of the core that imports actors — lazily, per subcommand."""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any

from ltm.dp.defaults import DEFAULT_CLIP_BOUND, DEFAULT_DELTA


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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def _print_json(obj: Any) -> None:
    from ltm.jsonio import json_default

    print(json.dumps(obj, indent=2, default=json_default, allow_nan=False))


# ---------------------------------------------------------------------------- simulate
def _add_simulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help=COMMANDS["simulate"][1],
                       description="Parties → k servers → analyst in one process, on a CSV, a synthetic "
                                   "generator, or (default) the bundled real dataset.")
    src = p.add_argument_group("data")
    src.add_argument("--data", help="CSV file (header row; ',' ';' or tab separated)")
    src.add_argument("--label", help="label column of --data")
    src.add_argument("--features", help="comma-separated feature columns (default: every numeric column)")
    src.add_argument("--synthetic", choices=["ridge", "lowrank", "nonlinear"],
                     help="generate data instead (ridge/lowrank: Burkhardt et al. §6.3; nonlinear: for rf_ridge)")
    src.add_argument("--n", type=_positive_int, default=10_000, help="synthetic rows (default 10000)")
    src.add_argument("--d", type=_positive_int, default=10, help="synthetic features (default 10)")
    job = p.add_argument_group("job")
    job.add_argument("--partition", choices=["rows", "columns"], default="rows",
                     help="rows: each party holds whole rows (default); columns: each holds some columns of every row")
    job.add_argument("--parties", type=_positive_int, default=4, help="simulated parties (default 4)")
    job.add_argument("--k", type=int, default=3, help="number of servers (≥ 2)")
    job.add_argument("--sketch", "--release", dest="sketch", choices=["auto", "sparse", "dense", "gram"], default="auto",
                     help="release kind: auto (default: the planner chooses from public quantities, ltm/planner.py), "
                          "a sparse or dense sketch, or gram (noisy sufficient statistics ZᵀZ; rows partition only)")
    job.add_argument("--m", type=_positive_int, help="sketch rows (default: a rule from n, D and ε; see sim/jobs.py)")
    job.add_argument("--s", type=_positive_int, default=1, help="non-zeros per column of a sparse sketch")
    job.add_argument("--share-mode", choices=["seed", "full"], default="seed",
                     help="seed: helper shares travel as 32-byte seeds (default); full: every share explicit")
    priv = p.add_argument_group("privacy")
    priv.add_argument("--epsilon", type=float, default=1.0, help="the job's ε per client (default 1)")
    priv.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                      help="the job's δ (default 1e-6; with --mechanism laplace the default is 0)")
    priv.add_argument("--mechanism", choices=["gaussian", "laplace"], default="gaussian",
                      help="the clients' noise: gaussian (ε, δ)-DP (default) or laplace (pure ε-DP)")
    priv.add_argument("--calibration", default="tight",
                      help="tight (default), paper (Cor 4.7/4.10 as printed), or interpolate(p)")
    priv.add_argument("--t-prime", type=int, default=0, help="corrupt clients tolerated")
    priv.add_argument("--corrupt-parties", type=int, default=None,
                      help="corrupt parties tolerated (default: 1 when parties hold several clients each; "
                           "a private job never tolerates fewer, only a --seed reproduction may)")
    priv.add_argument("--colluding-servers", type=int, default=None,
                      help="colluding servers the job tolerates (default: k − 1); 1 of 3 (an honest majority) "
                           "admits the replicated degree-2 release of the columns partition (--release gram)")
    priv.add_argument("--budget-epsilon", type=float, default=None,
                      help="each simulated party's privacy budget ε (default: the party's, 4)")
    priv.add_argument("--budget-delta", type=float, default=None,
                      help="the δ of that budget (default: the party's, 1e-6)")
    priv.add_argument("--ledger-dir", default=None,
                      help="charge the simulated parties' persistent ledgers here, one per party id, across runs "
                           "(as `ltm party --ledger-dir`); default: a fresh in-memory ledger per run")
    priv.add_argument("--clip", type=float, default=None, help="ℓ2 clip bound C on the transformed rows (default 1.0)")
    mdl = p.add_argument_group("model")
    mdl.add_argument("--model", choices=["ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols", "rf_ridge"],
                     help="default: ridge, or lowrank for --synthetic lowrank; rf_ridge: parties map their rows "
                          "with public random features, the analyst fits ridge in feature space")
    mdl.add_argument("--lambda", dest="lam", type=float,
                     help="ridge λ (default: the release's rule, release_lambda in analyst/estimators.py: v·√m for "
                          "a sketch, AdaSSP-style for gram)")
    mdl.add_argument("--no-debias", dest="debias", action="store_false",
                     help="ridge: do not subtract the known noise Gram (the paper's faithful analyst)")
    mdl.add_argument("--rank", type=_positive_int, default=5, help="components of --model lowrank (default 5)")
    mdl.add_argument("--intercept", action="store_true",
                     help="add an explicit intercept column (the public centering already makes the model affine)")
    rf = p.add_argument_group("random features (--model rf_ridge)")
    rf.add_argument("--features-n", type=_positive_int,
                    help="random frequencies N (default 16: a sketch's noise grows with the vector width, "
                         "so keep N ≪ n; see docs/experiments/liao.md)")
    rf.add_argument("--bandwidth", type=float, help="kernel bandwidth in standardised input units (default √d)")
    rf.add_argument("--feature-map", choices=["cos", "sincos"], default="cos",
                    help="cos: √(2/N)cos(ωx+b), N entries; sincos: [cos ωx, sin ωx]/√N, 2N entries, norm 1")
    rf.add_argument("--kernel", choices=["gaussian", "laplacian"], default="gaussian",
                    help="the shift-invariant kernel the random features approximate (default gaussian)")
    p.add_argument("--seed", type=int, help="SEEDED MODE: reproducible and NOT private (experiments only)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
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


def _run_simulate(args: argparse.Namespace) -> int:
    from sim.simulate import SimulateConfig, simulate

    calibration, p = _parse_calibration(args.calibration)
    cfg = SimulateConfig(
        data=args.data, label=args.label,
        features=[f.strip() for f in args.features.split(",")] if args.features else None,
        synthetic=args.synthetic, n=args.n, d=args.d, partition=args.partition, parties=args.parties, k=args.k,
        sketch=args.sketch, m=args.m, s=args.s, epsilon=args.epsilon, delta=args.delta,
        mechanism=args.mechanism, calibration=calibration, interpolate_p=p, t_prime=args.t_prime,
        corrupt_parties=args.corrupt_parties, model=args.model, lam=args.lam, debias=args.debias, rank=args.rank,
        clip=args.clip if args.clip is not None else DEFAULT_CLIP_BOUND, intercept=args.intercept,
        share_mode=args.share_mode, seed=args.seed, features_n=args.features_n or 16, bandwidth=args.bandwidth,
        feature_map=args.feature_map, kernel=args.kernel, budget_epsilon=args.budget_epsilon,
        budget_delta=args.budget_delta, ledger_dir=args.ledger_dir,
        colluding_servers=args.colluding_servers,
    )
    if args.model != "rf_ridge" and (args.bandwidth is not None or args.features_n is not None):
        raise SystemExit("ltm: error: --features-n/--bandwidth need --model rf_ridge")
    if args.mechanism == "laplace" and args.delta == DEFAULT_DELTA:
        cfg.delta = 0.0
    report = simulate(cfg)
    if args.json:
        _print_json(report)
    else:
        _print_simulate_summary(report)
    return 0


def _print_simulate_summary(r: dict[str, Any]) -> None:
    from sim.summary import model_table, privacy_lines, release_words, variation_note, verdict

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
def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help=COMMANDS["bench"][1])
    bsub = p.add_subparsers(dest="bench", required=True)
    sk = bsub.add_parser("sketch", help="one server's result-share computation and the bytes it receives")
    sk.add_argument("--n", type=_positive_int, default=1_000_000, help="clients (default 1000000)")
    sk.add_argument("--d", type=_positive_int, default=10, help="entries per client vector (default 10)")
    sk.add_argument("--m", type=_positive_int, default=100, help="sketch rows (default 100)")
    sk.add_argument("--s", type=_positive_int, default=1,
                    help="non-zeros per column of a sparse sketch (default 1)")
    sk.add_argument("--k", type=int, default=3, help="servers the shares are split over (≥ 2, default 3)")
    sk.add_argument("--runs", type=_positive_int, default=5, help="timed repetitions (default 5)")
    sk.add_argument("--kind", choices=["sparse", "dense"], default="sparse", help="sketch kind (default sparse)")
    sk.add_argument("--share-mode", choices=["seed", "full"], default="seed",
                    help="seed: helper shares travel as 32-byte seeds (default); full: every share explicit")
    sk.add_argument("--json", action="store_true", help="print JSON (the default output is JSON too)")
    sk.set_defaults(func=_run_bench_sketch)
    grid = bsub.add_parser("paper", help="every cell of Burkhardt et al. Tables 3-5 vs MP-SPDZ (JSON)")
    grid.add_argument("--runs", type=_positive_int, default=5, help="timed repetitions per cell (default 5)")
    grid.add_argument("--json", action="store_true", help="print JSON (the default output is JSON too)")
    grid.set_defaults(func=_run_bench_paper)
    from sim.bench_e2e import add_parser as add_e2e  # imports grpc; only when `bench` is the command

    add_e2e(bsub)


def _run_bench_sketch(args: argparse.Namespace) -> int:
    from sim.bench import SketchBenchConfig, bench_sketch

    if args.k < 2:
        raise SystemExit("ltm: error: --k must be ≥ 2")
    cfg = SketchBenchConfig(n=args.n, d=args.d, m=args.m, s=args.s, k=args.k, runs=args.runs,
                            share_mode=args.share_mode, kind=args.kind)
    _print_json(bench_sketch(cfg))
    return 0


def _run_bench_paper(args: argparse.Namespace) -> int:
    from sim.bench import bench_paper_grid

    _print_json(bench_paper_grid(runs=args.runs))
    return 0


# ---------------------------------------------------------------------------- main
#: Every subcommand: name → ("module:function" that adds its parser, one-line help).  Only the
#: module of the subcommand being run is imported, and only then is its parser built; the others
#: appear in ``ltm --help`` as stubs (DESIGN §2: ``ltm server`` must not load the simulator, the
#: other actors or the experiments).  To add a subcommand, add one entry here and keep the heavy
#: imports of its module inside the functions (``tests/test_cli_lean.py`` checks what is loaded).
COMMANDS = {
    "simulate": ("ltm.cli:_add_simulate", "run one LTM job in process and compare it with baselines"),
    "bench": ("ltm.cli:_add_bench", "benchmarks that print JSON"),
    "certs": ("transport.certs:add_certs_parser", "create a CA and one mTLS certificate per actor"),
    "server": ("server.main:add_parser", "run an LTM server"),
    "party": ("party.main:add_parser", "run a party: vet a job, upload shares"),
    "analyst": ("analyst.main:add_parser", "run the analyst service"),
    "demo": ("sim.demo:add_parser", "run a whole networked job on loopback: certs, 3 servers, analyst, parties"),
    "operate": ("sim.demo:add_operate_parser",
                "the demo's convenience: build a job from a dataset, write party files, run it (not private)"),
    "job": ("analyst.operator:add_parser", "check, submit and follow a job file (public information only)"),
    "health": ("transport.health:add_parser", "probe an actor's gRPC health service"),
    "audit": ("sim.audit:add_parser", "empirical DP audit: a Clopper–Pearson lower bound on ε (prints JSON)"),
    "loadtest": ("sim.loadtest:add_parser", "many concurrent party streams against real servers on loopback (JSON)"),
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
    from ltm.dp.calibration import CalibrationError
    from ltm.errors import CommandError
    from ltm.jobspec import JobSpecError

    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        print(f"ltm {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return exc.status
    except (JobSpecError, CalibrationError, ValueError) as exc:
        print(f"ltm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # Ctrl-C, or SIGTERM/SIGHUP where a command maps them to it (sim.launcher.stop_on_termination):
        # its cleanup has run; one line and the shell's status for death by that signal (128 + signum).
        import signal

        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"ltm {args.command}: {exc or 'interrupted'}", file=sys.stderr)
        return 128 + int(signum)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())

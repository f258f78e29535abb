"""The ``ltm`` command.  The one module of the core that imports actors — lazily, per subcommand."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=_json_default, allow_nan=False))


# ---------------------------------------------------------------------------- simulate
def _add_simulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run one LTM job in process and compare it with baselines",
                       description="Parties → k servers → analyst in one process, on a CSV, a synthetic "
                                   "generator, or (default) the bundled real dataset.")
    src = p.add_argument_group("data")
    src.add_argument("--data", help="CSV file (header row; ',' ';' or tab separated)")
    src.add_argument("--label", help="label column of --data")
    src.add_argument("--features", help="comma-separated feature columns (default: every numeric column)")
    src.add_argument("--synthetic", choices=["ridge", "lowrank"], help="generate data instead (Burkhardt et al. §6.3)")
    src.add_argument("--n", type=_positive_int, default=10_000, help="synthetic rows (default 10000)")
    src.add_argument("--d", type=_positive_int, default=10, help="synthetic features (default 10)")
    job = p.add_argument_group("job")
    job.add_argument("--partition", choices=["rows", "columns"], default="rows")
    job.add_argument("--parties", type=_positive_int, default=4)
    job.add_argument("--k", type=int, default=3, help="number of servers (≥ 2)")
    job.add_argument("--sketch", choices=["sparse", "dense"], default="sparse")
    job.add_argument("--m", type=_positive_int, help="sketch rows (default: a rule from n, D and ε; see sim/jobs.py)")
    job.add_argument("--s", type=_positive_int, default=1, help="non-zeros per column of a sparse sketch")
    job.add_argument("--share-mode", choices=["seed", "full"], default="seed",
                     help="seed: helper shares travel as 32-byte seeds (default); full: every share explicit")
    priv = p.add_argument_group("privacy")
    priv.add_argument("--epsilon", type=float, default=1.0)
    priv.add_argument("--delta", type=float, default=1e-6)
    priv.add_argument("--mechanism", choices=["gaussian", "laplace"], default="gaussian")
    priv.add_argument("--calibration", default="tight",
                      help="tight (default), paper (Cor 4.7/4.10 as printed), or interpolate(p)")
    priv.add_argument("--t-prime", type=int, default=0, help="corrupt clients tolerated")
    priv.add_argument("--corrupt-parties", type=int, default=None,
                      help="corrupt parties tolerated (default: 1 when parties hold several clients each; "
                           "a private job never tolerates fewer, only a --seed reproduction may)")
    priv.add_argument("--budget-epsilon", type=float, default=None,
                      help="each simulated party's privacy budget ε (default: the party's, 4)")
    priv.add_argument("--budget-delta", type=float, default=None,
                      help="the δ of that budget (default: the party's, 1e-6)")
    priv.add_argument("--clip", type=float, default=None, help="ℓ2 clip bound C on the transformed rows (default 1.0)")
    mdl = p.add_argument_group("model")
    mdl.add_argument("--model", choices=["ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols"],
                     help="default: ridge, or lowrank for --synthetic lowrank")
    mdl.add_argument("--lambda", dest="lam", type=float, help="ridge λ (default: v·√m, see sim/jobs.py)")
    mdl.add_argument("--no-debias", dest="debias", action="store_false",
                     help="ridge: do not subtract the known noise Gram (the paper's faithful analyst)")
    mdl.add_argument("--rank", type=_positive_int, default=5)
    mdl.add_argument("--intercept", action="store_true",
                     help="add an explicit intercept column (the public centering already makes the model affine)")
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
    from sim.jobs import DEFAULT_CLIP_BOUND
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
        share_mode=args.share_mode, seed=args.seed, budget_epsilon=args.budget_epsilon,
        budget_delta=args.budget_delta,
    )
    if args.mechanism == "laplace" and args.delta == 1e-6:
        cfg.delta = 0.0
    report = simulate(cfg)
    if args.json:
        _print_json(report)
    else:
        _print_simulate_summary(report)
    return 0


def _print_simulate_summary(r: dict[str, Any]) -> None:
    pr = r["privacy"]
    print(f"LTM simulate — {r['data']}")
    print(f"  {r['n_train']} training rows, {r['parties']} parties ({r['partition']}), {r['servers']} servers, "
          f"{r['sketch']['kind']} sketch m={r['sketch']['m']} s={r['sketch']['s']}")
    print(f"  privacy: {pr['guarantee']}")
    print(f"  σ_client={pr['sigma_client']:.4g}  σ_release={pr['sigma_release']:.4g}  "
          f"min honest load={pr['min_honest_load']}  randomness: {r['randomness']}")
    metric_names = [k for k in ("r2", "mse", "phi", "psi") if k in r["metrics"]]
    header = f"  {'':12s}" + "".join(f"{k:>14s}" for k in metric_names)
    print(header)
    rows = [("LTM " + r["model"], r["metrics"])] + [(k, v) for k, v in r["baselines"].items()]
    for name, metrics in rows:
        print(f"  {name:12s}" + "".join(f"{metrics[k]:>14.6g}" for k in metric_names))
    for party, entry in sorted(r.get("ledgers", {}).items()):
        print(f"  ledger {party}: spent ε {entry['before']['epsilon']:.4g} → {entry['after']['epsilon']:.4g} "
              f"of budget {entry['budget']['epsilon']:g} (δ {entry['budget']['delta']:g})")
    print(f"  release sha256 {r['release_sha256']}")
    print(f"  time {r['timing_s']['total']:.2f} s")


# ---------------------------------------------------------------------------- bench
def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks that print JSON")
    bsub = p.add_subparsers(dest="bench", required=True)
    sk = bsub.add_parser("sketch", help="one server's result-share computation and the bytes it receives")
    sk.add_argument("--n", type=_positive_int, default=1_000_000)
    sk.add_argument("--d", type=_positive_int, default=10)
    sk.add_argument("--m", type=_positive_int, default=100)
    sk.add_argument("--s", type=_positive_int, default=1)
    sk.add_argument("--k", type=int, default=3)
    sk.add_argument("--runs", type=_positive_int, default=5)
    sk.add_argument("--kind", choices=["sparse", "dense"], default="sparse")
    sk.add_argument("--share-mode", choices=["seed", "full"], default="seed")
    sk.add_argument("--json", action="store_true", help="print JSON (the default output is JSON too)")
    sk.set_defaults(func=_run_bench_sketch)
    grid = bsub.add_parser("paper", help="every cell of Burkhardt et al. Tables 3-5 vs MP-SPDZ (JSON)")
    grid.add_argument("--runs", type=_positive_int, default=5)
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
#: Networked subcommands: name → (module:function that adds the parser, one-line help).  Only the
#: module of the subcommand being run is imported (actors stay lazily loaded, DESIGN §2).
ACTOR_COMMANDS = {
    "certs": ("transport.certs:add_certs_parser", "create a CA and one mTLS certificate per actor"),
    "server": ("server.main:add_parser", "run an LTM server"),
    "party": ("party.main:add_parser", "run a party: vet a job, upload shares"),
    "analyst": ("analyst.main:add_parser", "run the analyst service"),
    "demo": ("sim.demo:add_parser", "run a whole networked job on loopback: certs, 3 servers, analyst, parties"),
    "operate": ("sim.demo:add_operate_parser", "prepare a job on a dataset, submit it to a running analyst, run it"),
    "health": ("transport.health:add_parser", "probe an actor's gRPC health service"),
    "audit": ("sim.audit:add_parser", "empirical DP audit: a Clopper–Pearson lower bound on ε (prints JSON)"),
    "loadtest": ("sim.loadtest:add_parser", "many concurrent party streams against real servers on loopback (JSON)"),
    "experiment": ("experiments.runner:add_parser", "reproduce the papers' figures and tables (experiment specs)"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="ltm", description="LTM: distributed differential privacy by secure sketching")
    parser.add_argument("--version", action="version", version="ltm 0.1.0")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_simulate(sub)
    _add_bench(sub)
    for name, (target, help_text) in ACTOR_COMMANDS.items():
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
    from ltm.calibration import CalibrationError
    from ltm.jobspec import JobSpecError

    try:
        return int(args.func(args) or 0)
    except (JobSpecError, CalibrationError, ValueError) as exc:
        print(f"ltm: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

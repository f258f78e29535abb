"""``ltm simulate``: one LTM job in process, compared with baselines (the role's code: ``ltm/sim/runtime/simulate.py``)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ltm.cli.options import print_json
from ltm.dp.defaults import DEFAULT_DELTA
from ltm.errors import CommandError
from ltm.jobconfig import add_options, config_values

if TYPE_CHECKING:
    from ltm.sim.runtime.simulate import SimulateConfig

DESCRIPTION = ("Parties → k servers → analyst in one process, on a CSV, a synthetic generator, or (default) the "
               "bundled real dataset.")


def configure(p: argparse.ArgumentParser) -> None:
    """Every flag of the job model's data, sketch, privacy, model, features and run groups."""
    for group in ("data", "sketch", "privacy", "model", "features", "run"):
        add_options(p, group)  # every flag, help and default from the job-configuration model
    p.set_defaults(func=run)


def _parse_calibration(text: str) -> tuple[str, float | None]:
    text = text.strip()
    if text.startswith("interpolate"):
        inner = text[len("interpolate"):].strip("() =:")
        try:
            return "interpolate", float(inner)
        except ValueError:
            raise CommandError(f"calibration {text!r}: write interpolate(p) with 0 ≤ p ≤ 1") from None
    if text not in ("tight", "paper"):
        raise CommandError(f"unknown calibration {text!r}; choose tight, paper or interpolate(p)")
    return text, None


def simulate_config(args: argparse.Namespace) -> "SimulateConfig":
    """The simulator's configuration from ``ltm simulate``'s parsed flags: each flag of the job
    model (:mod:`ltm.jobconfig`) sets the configuration's field of the same name."""
    from dataclasses import fields as dataclass_fields

    from ltm.sim.runtime.simulate import SimulateConfig

    calibration, p = _parse_calibration(args.calibration)
    values = config_values(args, (f.name for f in dataclass_fields(SimulateConfig)))
    cfg = SimulateConfig(**{**values, "features": [f.strip() for f in args.features.split(",")] if args.features
                            else None, "calibration": calibration, "interpolate_p": p,
                            "features_n": args.features_n or 16,
                            "verified_clipping": bool(getattr(args, "verified_clipping", False))})
    if args.model != "rf_ridge" and (args.bandwidth is not None or args.features_n is not None):
        raise CommandError("--features-n/--bandwidth need --model rf_ridge")
    if args.mechanism == "laplace" and args.delta == DEFAULT_DELTA:
        cfg.delta = 0.0
    return cfg


def run(args: argparse.Namespace) -> int:
    """``ltm simulate``: run the job, print the report (``--json``) or its summary for a person."""
    from ltm.sim.runtime.simulate import simulate

    report = simulate(simulate_config(args), progress=not args.quiet)
    if args.json:
        print_json(report)
    else:
        print_summary(report)
    return 0


def print_summary(r: dict[str, Any]) -> None:
    """The simulate report for a person: data, job, privacy, model quality beside the baselines."""
    from ltm.party.ledger import describe_admission
    from ltm.sim.runtime.summary import model_table, privacy_lines, release_words, variation_note, verdict

    pr = r["privacy"]
    print(f"LTM simulate — {r['data']}")
    print(f"  {r['n_train']} training rows, {r['parties']} parties ({r['partition']}, {r['upload_mode']} uploads), "
          f"{r['servers']} servers, {release_words(r['sketch'])}")
    if r.get("plan"):
        print(f"  release kind chosen by the planner: {r['plan']['reason']}")
    for line in privacy_lines(pr, str(r["sketch"]["kind"])):
        print(line)
    print(f"  randomness: {r['randomness']}")
    fallback = r.get("fallback") or {}
    if fallback.get("used"):
        print(f"  released model: intercept-only, not {r['model']} (fallback; --no-fallback fits it anyway): "
              f"{fallback['why']}")
    name = "LTM intercept-only" if fallback.get("used") else "LTM " + r["model"]
    for line in model_table(name, r["metrics"], r["baselines"], private_lam=r.get("lambda")):
        print(line)
    if "r2" in r["metrics"]:
        print("  " + verdict(r["metrics"], r["baselines"], n=int(r["n_train"]), epsilon=float(pr["epsilon"]),
                             release_kind=str(r["sketch"]["kind"]), planned=bool(r.get("plan"))))
    seeded = str(r.get("randomness", "")).startswith("seeded")
    note = variation_note(r.get("randomness", ""), seeded)
    if r.get("synthetic") or str(r.get("data", "")).startswith("synthetic"):
        note += "; synthetic data are drawn afresh each run, so every row varies" if not seeded else ""
    print("  " + note)
    for party, entry in sorted(r.get("ledgers", {}).items()):
        print(f"  ledger {party}: {describe_admission(entry)}")
    print(f"  release sha256 {r['release_sha256']}")
    print(f"  time {r['timing_s']['total']:.2f} s")

"""Mutation testing for the modules where a silent bug costs privacy or correctness.

Runs mutmut (a dev extra) on one module at a time, each against a targeted, fast selection of
tests, in a scratch copy of the repository (``.mutation/<module>/``, git-ignored), so the
worktree is never touched.  For every module it prints the score

    killed / (mutants − equivalent mutants)

and every surviving mutant that is not listed as equivalent in
``scripts/mutation_equivalents.toml`` (one line of reason each).  Usage::

    scripts/mutation.sh                      # every module, in the order below
    scripts/mutation.sh ltm/ring.py          # one module
    scripts/mutation.sh --json out.json ...  # also write the scores as JSON

A mutant counts as killed when a test fails, errors or times out on it.  "No tests" (no selected
test reaches the mutated function) counts as a survivor.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRATCH = REPO / ".mutation"
EQUIVALENTS = REPO / "scripts" / "mutation_equivalents.toml"
PACKAGES = ["ltm"]
#: The actor folders sit at the top of the repository and install as ltm.party, ltm.server, ltm.analyst
#: (pyproject's package-dir); the scratch copy moves them into ltm/ so that mutmut's copy imports them by the
#: same names without the editable install (which would import the unmutated checkout).
ACTOR_FOLDERS = ("party", "server", "analyst")


def scratch_path(module: str) -> str:
    """``party/ledger.py`` → ``ltm/party/ledger.py`` (where the scratch copy holds it); core paths unchanged."""
    return f"ltm/{module}" if module.split("/")[0] in ACTOR_FOLDERS else module

#: module → the tests that exercise it (fast, in-process; no subprocesses, since a subprocess
#: would import the unmutated code).  Ordered from the most stable module to the most changed.
MODULES: dict[str, list[str]] = {
    "ltm/ring.py": ["tests/unit/ltm/test_ring_sharing.py"],
    "ltm/sharing.py": ["tests/unit/ltm/test_ring_sharing.py"],
    "ltm/dp/calibration.py": ["tests/unit/ltm/dp/test_calibration.py", "tests/unit/ltm/dp/test_dp_stated_rho.py",
                              "tests/unit/ltm/dp/test_gram_noise_scales.py"],
    "server/release_gate.py": ["tests/unit/server/test_release_gate.py"],
    "analyst/reconstruct.py": ["tests/unit/analyst/test_pipeline_exact.py", "tests/unit/analyst/test_reconstruct.py"],
    "ltm/sketch.py": ["tests/unit/ltm/test_sketch_golden.py"],
    "party/randomizer.py": ["tests/unit/analyst/test_pipeline_exact.py", "tests/unit/party/test_release_noise.py",
                            "tests/unit/party/test_randomizer.py"],
    "server/core.py": ["tests/unit/server/test_release_gate.py", "tests/unit/server/test_core.py",
                       "tests/unit/server/test_verified_checks.py"],
    "analyst/estimators.py": ["tests/unit/analyst/test_estimators.py"],
    "analyst/baselines.py": ["tests/unit/analyst/test_baselines.py"],
    "ltm/client_set.py": ["tests/unit/ltm/test_client_set.py"],
    "server/coverage.py": ["tests/unit/server/test_streaming_server.py", "tests/unit/server/test_coverage.py"],
    "ltm/dp/sensitivity.py": ["tests/unit/ltm/dp/test_dp_sensitivity.py"],
    "analyst/gram.py": ["tests/unit/analyst/test_gram.py"],
    "party/ledger.py": ["tests/unit/party/test_ledger.py", "tests/unit/party/test_ledger_file.py"],
    "ltm/dp/noise.py": ["tests/unit/ltm/dp/test_dp_noise.py", "tests/unit/ltm/dp/test_noise_laplace.py"],
    "ltm/dp/polya.py": ["tests/unit/ltm/dp/test_polya.py", "tests/unit/ltm/dp/test_noise_laplace.py"],
    "ltm/dp/grid.py": ["tests/unit/ltm/dp/test_dp_accounting.py", "tests/unit/ltm/dp/test_dp_sensitivity.py",
                       "tests/unit/party/test_randomizer.py"],
    "ltm/dp/accounting.py": ["tests/unit/ltm/dp/test_dp_accounting.py"],
    "ltm/verified_clipping.py": ["tests/unit/ltm/test_verified_clipping.py"],
    "ltm/flp/field.py": ["tests/unit/ltm/flp/test_field.py"],
    "ltm/flp/ntt.py": ["tests/unit/ltm/flp/test_field.py"],
    "ltm/flp/circuit.py": ["tests/unit/ltm/flp/test_proof.py"],
    "ltm/flp/proof.py": ["tests/unit/ltm/flp/test_proof.py"],
    "ltm/flp/shares.py": ["tests/unit/ltm/flp/test_proof.py"],
    "ltm/flp/verify.py": ["tests/unit/ltm/flp/test_verify.py"],
    "ltm/transport/signing.py": ["tests/unit/server/test_verified_checks.py"],
}

STATUS_KILLED = {"killed", "timeout", "segfault", "caught by type check"}


@dataclass
class ModuleScore:
    module: str
    total: int = 0
    killed: int = 0
    equivalent: list[dict] = field(default_factory=list)
    survivors: list[dict] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def score(self) -> float:
        denominator = self.total - len(self.equivalent)
        return self.killed / denominator if denominator else 1.0


def copy_repo(dest: Path, commit: str) -> None:
    """Extract the committed tree of ``commit`` to ``dest`` (uncommitted edits are not measured)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for folder in ACTOR_FOLDERS:
        shutil.move(str(dest / folder), str(dest / "ltm" / folder))


def write_config(dest: Path, module: str, tests: list[str]) -> None:
    config = (
        "\n[tool.mutmut]\n"
        f"source_paths = {json.dumps(PACKAGES)}\n"
        f"only_mutate = {json.dumps([scratch_path(module)])}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-x", "-q"]\n'
        # mutmut's default fork isolation crashes with a KeyError on these suites; forkserver does not,
        # and the loaded shared machine needs a longer per-mutant timeout than mutmut's default
        'process_isolation = "forkserver"\n'
        "timeout_multiplier = 5\n"
    )
    with open(dest / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write(config)


def load_equivalents() -> dict[str, list[dict]]:
    """module → [{function, mutant, reason}] from the equivalents file."""
    if not EQUIVALENTS.exists():
        return {}
    data = tomllib.loads(EQUIVALENTS.read_text(encoding="utf-8"))
    out: dict[str, list[dict]] = {}
    for entry in data.get("equivalent", []):
        out.setdefault(entry["module"], []).append(entry)
    return out


_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant
out = {}
for name in json.loads(sys.stdin.read()):
    out[name] = get_diff_for_mutant(name, path=find_mutant(name).path)
print(json.dumps(out))
"""


def mutant_diffs(cwd: Path, env: dict, names: list[str]) -> dict[str, tuple[str, str]]:
    """name → (the original line(s), the mutated line(s)), whitespace-normalised (one process for all)."""
    if not names:
        return {}
    proc = subprocess.run([sys.executable, "-c", _DIFFS], cwd=cwd, env=env, input=json.dumps(names),
                          capture_output=True, text=True, check=True)
    out = {}
    for name, shown in json.loads(proc.stdout).items():
        minus = [ln[1:].strip() for ln in shown.splitlines() if ln.startswith("-") and not ln.startswith("---")]
        plus = [ln[1:].strip() for ln in shown.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        out[name] = (" / ".join(minus), " / ".join(plus))
    return out


def function_of(name: str) -> str:
    """``ltm.ring.x_encode__mutmut_3`` → ``encode``; methods ``xǁClassǁm__mutmut_1`` → ``Class.m``."""
    tail = name.rsplit("__mutmut_", 1)[0]
    tail = tail.split(".")[-1]
    if "ǁ" in tail:
        parts = [p for p in tail.split("ǁ") if p]
        return ".".join(parts[1:]) if parts and parts[0] == "x" else ".".join(parts)
    return tail[2:] if tail.startswith("x_") else tail


def is_equivalent(entries: list[dict], function: str, original: str, mutated: str) -> dict | None:
    for entry in entries:
        if entry["function"] != function:
            continue
        if entry["mutant"].strip() == mutated and entry.get("original", original).strip() == original:
            return entry
    return None


def source_digest(module: str, commit: str = "HEAD") -> str:
    """SHA-256 of the module as committed at ``commit``."""
    blob = subprocess.run(["git", "show", f"{commit}:{module}"], cwd=REPO, capture_output=True, check=True).stdout
    return hashlib.sha256(blob).hexdigest()


def state_path(module: str) -> Path:
    return SCRATCH / (module.replace("/", "_").removesuffix(".py") + ".json")


def load_state(module: str, commit: str = "HEAD") -> dict[str, str] | None:
    """Statuses of the last run on this module, if its source at ``commit`` is the one measured."""
    path = state_path(module)
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    return state["statuses"] if state.get("source_sha256") == source_digest(module, commit) else None


def run_module(module: str, tests: list[str], children: int, equivalents: list[dict],
               survivors_only: bool = False, commit: str = "HEAD") -> ModuleScore:
    dest = SCRATCH / module.replace("/", "_").removesuffix(".py")
    previous = load_state(module, commit) if survivors_only else None
    rerun = sorted(n for n, st in (previous or {}).items() if st not in STATUS_KILLED)
    copy_repo(dest, commit)
    write_config(dest, module, tests)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    what = f"the {len(rerun)} survivors of the last run" if previous is not None else "every mutant"
    print(f"== {module} at {commit}: mutmut run ({what}) against {' '.join(tests)}", flush=True)
    statuses: dict[str, str] = dict(previous or {})
    if previous is None or rerun:
        proc = subprocess.run(["mutmut", "run", "--max-children", str(children), *rerun], cwd=dest, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise RuntimeError(f"mutmut failed on {module} (exit {proc.returncode}); scratch copy left in {dest}")
        listed = subprocess.run(["mutmut", "results", "--all", "true"], cwd=dest, env=env, capture_output=True,
                                text=True, check=True).stdout
        for line in listed.splitlines():
            match = re.match(r"\s*(\S+__mutmut_\d+): (.+)$", line)
            if match and (previous is None or match.group(1) in rerun):
                statuses[match.group(1)] = match.group(2).strip()
    result = ModuleScore(module)
    diffs = mutant_diffs(dest, env, sorted(n for n, st in statuses.items() if st not in STATUS_KILLED))
    for name, status in sorted(statuses.items()):
        result.total += 1
        result.statuses[status] = result.statuses.get(status, 0) + 1
        if status in STATUS_KILLED:
            result.killed += 1
            continue
        function = function_of(name)
        original, mutated = diffs[name]
        row = {"name": name, "status": status, "function": function, "original": original, "mutant": mutated}
        entry = is_equivalent(equivalents, function, original, mutated)
        if entry is not None:
            row["reason"] = entry["reason"]
            result.equivalent.append(row)
        else:
            result.survivors.append(row)
    state_path(module).write_text(json.dumps({
        "source_sha256": source_digest(module, commit), "statuses": statuses, "commit": commit, "tests": tests,
        "killed": result.killed, "total": result.total, "equivalent": result.equivalent, "survivors": result.survivors,
    }, ensure_ascii=False, indent=1))
    return result


def markdown_summary() -> str:
    """The per-module scores of the last runs (from the saved states), as a Markdown table and lists."""
    lines = ["| module | mutants | equivalent | killed | score (killed / non-equivalent) | commit | tests |",
             "|---|---:|---:|---:|---:|---|---|"]
    details: list[str] = []
    for module in MODULES:
        path = state_path(module)
        if not path.exists():
            lines.append(f"| `{module}` | not run | | | | | |")
            continue
        st = json.loads(path.read_text())
        if "total" not in st:
            lines.append(f"| `{module}` | (re-run to record) | | | | | |")
            continue
        # Re-match the recorded survivors against the current list of equivalent mutants.
        entries = load_equivalents().get(module, [])
        still = []
        for row in st["survivors"]:
            entry = is_equivalent(entries, row["function"], row["original"], row["mutant"])
            if entry is not None:
                st["equivalent"].append({**row, "reason": entry["reason"]})
            else:
                still.append(row)
        st["survivors"] = still
        fresh = st["source_sha256"] == source_digest(module)
        non_eq = st["total"] - len(st["equivalent"])
        score = st["killed"] / non_eq if non_eq else 1.0
        tests = ", ".join(f"`{t.removeprefix('tests/')}`" for t in st["tests"])
        lines.append(f"| `{module}` | {st['total']} | {len(st['equivalent'])} | {st['killed']} | "
                     f"{100 * score:.1f}%{'' if fresh else ' (module changed since)'} | {st['commit']} | {tests} |")
        for row in st["survivors"]:
            details.append(f"- `{module}` SURVIVED `{row['name']}` ({row['status']}): `{row['original']}` → `{row['mutant']}`")
        for row in st["equivalent"]:
            details.append(f"- `{module}` equivalent `{row['name']}`: `{row['mutant']}` — {row['reason']}")
    return "\n".join(lines) + "\n\nSurviving and equivalent mutants:\n\n" + ("\n".join(details) or "- none") + "\n"


def report(result: ModuleScore) -> None:
    non_eq = result.total - len(result.equivalent)
    print(
        f"{result.module}: {result.killed}/{non_eq} killed of non-equivalent mutants "
        f"({100 * result.score:.1f}%); {result.total} mutants, {len(result.equivalent)} equivalent; "
        f"statuses {result.statuses}"
    )
    for row in result.survivors:
        print(f"  SURVIVED {row['name']} [{row['status']}] in {row['function']}: {row['original']!r} -> {row['mutant']!r}")
    for row in result.equivalent:
        print(f"  equivalent {row['name']} in {row['function']}: {row['mutant']!r} ({row['reason']})")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all, in order)")
    parser.add_argument("--children", type=int, default=1, help="parallel mutant workers (default 1)")
    parser.add_argument("--json", type=Path, help="also write the per-module scores here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies")
    parser.add_argument("--survivors-only", action="store_true",
                        help="re-run only the mutants that survived the last run (if the module is unchanged)")
    parser.add_argument("--tests", nargs="+", help="override the module's test selection for this run "
                                                     "(e.g. only its kill tests, to re-check survivors quickly)")
    parser.add_argument("--summary", action="store_true",
                        help="print the scores of the last runs as Markdown (runs nothing)")
    args = parser.parse_args(argv)
    if args.summary:
        print(markdown_summary(), end="")
        return 0
    modules = args.modules or list(MODULES)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        parser.error(f"no test selection for {unknown}; known: {', '.join(MODULES)}")
    equivalents = load_equivalents()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *modules, "tests"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    print(f"HEAD is {commit}{' (uncommitted changes are not measured)' if dirty else ''}", flush=True)
    results = []
    failed = []
    for module in modules:
        # Each module measures the commit checked out when its turn comes (tests committed while
        # an earlier module ran are included).
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip()
        try:
            result = run_module(module, args.tests or MODULES[module], args.children, equivalents.get(module, []),
                                survivors_only=args.survivors_only, commit=commit)
        except RuntimeError as exc:
            print(f"{module}: NOT MEASURED: {exc}", flush=True)
            failed.append(module)
            continue
        report(result)
        results.append(result)
        if not args.keep:
            shutil.rmtree(SCRATCH / module.replace("/", "_").removesuffix(".py"), ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "commit": commit,
                    "modules": [
                        {
                            "module": r.module,
                            "mutants": r.total,
                            "killed": r.killed,
                            "equivalent": r.equivalent,
                            "survivors": r.survivors,
                            "score": r.score,
                        }
                        for r in results
                    ],
                },
                indent=1,
                ensure_ascii=False,
            )
        )
    return 0 if not failed and all(r.score >= 0.9 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The words of ``ltm simulate``/``ltm demo`` and of the README say what the numbers are.

Each summary here is printed from a real in-process run (the same cores and report as ``ltm demo``,
``ltm/sim/runtime/simulate.py``), not from a hand-written report, so a label that stops matching what was
computed fails here: the release named for its kind, φ with the λ it is scored at, a verdict that
suggests only what would help, the corruption a guarantee tolerates, the λ a fit used.
"""
from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import pytest

from ltm.analyst.estimators import release_lambda
from ltm.analyst.jobs import fit_model
from ltm.analyst.reconstruct import tolerated
from ltm.cli.simulate import print_summary as print_simulate_summary
from ltm.datasets.synthetic import synthetic_ridge
from ltm.randomness import Randomness
from ltm.sim.localnet.demo import print_summary
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sim.runtime.simulate import SimulateConfig, simulate

ROOT = Path(__file__).resolve().parents[3]


def _run(**kw) -> dict:
    """One private (CSPRNG) in-process job on synthetic ridge data: seconds, not the demo's 100k rows."""
    return simulate(SimulateConfig(synthetic="ridge", n=20_000, d=5, **kw))


@pytest.fixture(scope="module")
def planned() -> dict:
    return _run()


@pytest.fixture(scope="module")
def by_hand() -> dict:
    return _run(sketch="sparse")


def _simulate_text(report: dict, capsys) -> str:
    print_simulate_summary(copy.deepcopy(report))
    return capsys.readouterr().out


def _demo_text(report: dict, capsys) -> str:
    """``ltm demo``'s summary of the same report (plus the fields only the networked run has)."""
    r = copy.deepcopy(report)
    r.update(tls=True, processes=[{"role": "server", "id": "server-0", "pid": 1}], participants=r["n_train"],
             bytes={"party_to_server": r["bytes_to_servers"], "server_to_analyst": []})
    print_summary(r)
    return capsys.readouterr().out


@pytest.mark.parametrize("text", [_simulate_text, _demo_text], ids=["simulate", "demo"])
def test_a_gram_release_is_not_called_a_sketch(planned, text, capsys) -> None:
    assert planned["sketch"]["kind"] == "gram" and planned["plan"]  # the planner's choice at this n
    out = text(planned, capsys)
    assert "gram release" in out
    assert not re.search(r"gram sketch|gram\S* \(?m=\d", out), out  # the planner's reason too
    assert "sketch row" not in out and "the weakest released entry carries" in out


@pytest.mark.parametrize("text", [_simulate_text, _demo_text], ids=["simulate", "demo"])
def test_a_sketch_is_named_with_its_shape(by_hand, text, capsys) -> None:
    s = by_hand["sketch"]
    out = text(by_hand, capsys)
    assert f"sparse sketch m={s['m']} s={s['s']}" in out and "the weakest sketch row carries" in out


@pytest.mark.parametrize("text", [_simulate_text, _demo_text], ids=["simulate", "demo"])
def test_the_verdict_suggests_another_kind_only_when_the_kind_was_given(planned, by_hand, text, capsys) -> None:
    chosen = next(line for line in text(planned, capsys).splitlines() if "verdict:" in line)
    assert "release kind" not in chosen and "another" not in chosen, chosen
    given = next(line for line in text(by_hand, capsys).splitlines() if "verdict:" in line)
    assert "letting the planner choose the release kind (--release auto; this run used 'sparse'" in given


@pytest.mark.parametrize("text", [_simulate_text, _demo_text], ids=["simulate", "demo"])
def test_phi_names_the_lambda_it_is_scored_at_and_explains_ols_above_it(planned, by_hand, text, capsys) -> None:
    for report in (planned, by_hand):
        out = text(report, capsys)
        phi_line = next(line for line in out.splitlines() if line.strip().startswith("φ ="))
        assert f"every row scored at the private model's λ = {report['lambda']:.3g}" in phi_line
        ols_above = report["baselines"]["nonprivate"]["phi"] > report["metrics"]["phi"]
        assert ("nonprivate" in phi_line and "fitted with another λ" in phi_line) == ols_above, phi_line
        assert "the ceiling" not in out


def test_the_guarantee_names_only_the_corruption_tolerated(planned, capsys) -> None:
    p = planned["privacy"]
    assert (p["t_prime"], p["corrupt_parties"]) == (0, 1)
    out = _simulate_text(planned, capsys)
    assert "against any 2 of 3 servers together with up to 1 corrupt party" in out
    assert "up to 0" not in out and "1 corrupt parties" not in out
    assert tolerated(0, 0) == ""
    assert tolerated(1, 0) == "up to 1 corrupt client"
    assert tolerated(3, 2) == "up to 3 corrupt clients and 2 corrupt parties"
    assert tolerated(0, 2) == "up to 2 corrupt parties"


def test_model_json_reports_the_lambda_used_and_its_rule() -> None:
    randomness = Randomness.system()
    table = synthetic_ridge(4000, 3, randomness)
    spec, _ = build_job(table, job_id="words", randomness=randomness, parties=2, k=2, kind="sparse", m=16)
    release = run_inprocess(spec, party_tables(spec, table), randomness).release
    lam, rule = release_lambda(release)
    assert lam > 0
    model = fit_model(release, "ridge")  # [fit] lambda = 0: the default rule
    assert (model["lambda"], model["lambda_rule"]) == (lam, rule)
    given = fit_model(release, "ridge", lam=2.5)
    assert (given["lambda"], given["lambda_rule"]) == (2.5, "given in the job's [fit]")


# ------------------------------------------------------------------------------------ README
README = (ROOT / "README.md").read_text()


def test_the_two_commands_are_two() -> None:
    section = README.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
    assert len(commands) == 2, commands


def test_compose_commands_name_debians_docker_compose_too() -> None:
    # The compose commands live in deploy/README.md (#25: deployment only there).  Debian ships the
    # v1 `docker-compose`, so every `docker compose VERB` a shell block shows is named that way too.
    docs = [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    shown: dict[str, set[str]] = {}
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        blocks = "\n".join(re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, flags=re.S))
        verbs = set(re.findall(r"^docker compose (?:-\S+ \S+ )*([a-z]+)\b", blocks, flags=re.M))
        missing = sorted(v for v in verbs if f"docker-compose {v}" not in text)
        assert not missing, f"{doc.relative_to(ROOT)}: `docker compose` {missing} without Debian's docker-compose"
        shown[str(doc.relative_to(ROOT))] = verbs
    deploy = shown["deploy/README.md"]
    assert {"up", "down"} <= deploy, f"deploy/README.md no longer shows `docker compose up`/`down` (only {sorted(deploy)})"


def test_the_inline_job_file_agrees_with_the_example_it_points_to() -> None:
    usage = (ROOT / "docs" / "usage.md").read_text()  # the job file's walk-through moved out of the README
    where = usage.index("`examples/jobs/power-ridge.toml`; the keys")
    inline = usage[where:].split("```toml", 1)[1].split("```", 1)[0]
    example = tomllib.loads((ROOT / "examples" / "jobs" / "power-ridge.toml").read_text())
    shown = tomllib.loads(inline)
    for table in ("job", "release", "privacy", "fit"):
        for key, value in shown[table].items():
            assert example[table].get(key, value) == value, (table, key, value, example[table].get(key))
    assert shown["release"] == example["release"]

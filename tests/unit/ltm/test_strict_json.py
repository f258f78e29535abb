"""Strict JSON from every report (issue #21): NaN and Infinity are not JSON, and a parser that
refuses them must read what ``ltm simulate --json`` prints; an infeasible planner candidate is
reported as infeasible (prediction null), never as inf; rmgm/dgm get a λ on their own scale."""
from __future__ import annotations

import json
import math

import pytest

from ltm.cli.app import main
from ltm.planner import PlanInputs, plan_release


def _refuse(token: str):
    raise ValueError(f"non-standard JSON constant {token}")


def strict_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out, parse_constant=_refuse)


def test_the_strict_parser_refuses_nan_and_infinity():
    for bad in ('{"a": Infinity}', '{"a": NaN}', '{"a": -Infinity}'):
        with pytest.raises(ValueError, match="non-standard"):
            json.loads(bad, parse_constant=_refuse)


@pytest.mark.parametrize("argv", [
    ["--synthetic", "ridge", "--n", "200", "--d", "2"],
    ["--synthetic", "ridge", "--n", "3000", "--d", "4", "--partition", "columns", "--parties", "3"],
    ["--synthetic", "ridge", "--n", "3000", "--d", "4", "--partition", "columns", "--parties", "3",
     "--release", "gram", "--colluding-servers", "1"],
])
def test_simulate_json_is_strict(capsys, argv):
    report = strict_json(capsys, ["simulate", *argv, "--seed", "1", "--json"])
    assert report["metrics"]["r2"] is not None
    if "--colluding-servers" in argv:
        assert report["release_kind"] == "gram" and report["privacy"]["colluding_servers"] == 1


def test_infeasible_candidates_are_null_not_inf():
    plan = plan_release(PlanInputs(n=200, width=3, epsilon=1.0, delta=1e-6))
    bad = [c for c in plan.candidates if not c.feasible]
    assert bad and not math.isfinite(bad[0].predicted_excess)  # internally inf: never chosen
    d = plan.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert [c["predicted_excess"] for c in json.loads(text)["candidates"] if not c["feasible"]] == [None] * len(bad)


@pytest.mark.parametrize("model", ["rmgm_ols", "dgm_ols"])
def test_wu_estimators_get_a_lambda_on_their_own_scale(capsys, model):
    """Their Hessian is XᵀX/n + λI: the sketch ridge's λ (hundreds) zeroed every coefficient (R² 0.000)."""
    r = strict_json(capsys, ["simulate", "--synthetic", "ridge", "--n", "20000", "--d", "4", "--model", model,
                             "--release", "sparse", "--seed", "3", "--json"])
    assert r["lambda"] < 1.0 and ("XᵀX/n" in r["lambda_rule"] or "1e-5" in r["lambda_rule"])
    # the defect zeroed every coefficient (R² exactly 0.000); the paper's estimators are noisy (this
    # seeded run: 0.088; seeds 1, 2, 4, 5: 0.52–0.81), so the test asks for a fit, not a good one
    assert r["metrics"]["r2"] > 0.01

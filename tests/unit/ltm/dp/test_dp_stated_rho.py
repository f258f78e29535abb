"""The job states its zCDP target ρ (``privacy.zcdp_rho``): servers and the analyst plan the noise from
it without the accountant, the parties check it with the accountant before their ledgers charge."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import ltm.party.ledger as ledger_mod
from ltm.dp import accounting
from ltm.dp.calibration import CalibrationError, plan_noise
from ltm.jobspec import (
    ColumnSpec,
    JobSpec,
    JobSpecError,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    resolve_defaults,
    validate_job,
)

N = 2000


def job(epsilon: float = 1.0, delta: float = 1e-6, *, mechanism: str = "gaussian", **privacy) -> JobSpec:
    edges = np.linspace(0, N, 5).astype(int)
    spec = JobSpec(
        job_id="rho", partition="rows", n=N, columns=tuple(ColumnSpec(f"x{j}") for j in range(3)),
        parties=tuple(PartySpec(f"party-{i}", int(a), int(b), (), 1.0) for i, (a, b) in enumerate(zip(edges, edges[1:]))),
        clip_bound=1.0, frac_bits=0, sketch=SketchSpec("sparse", 20, 1, "5a" * 32),
        privacy=PrivacySpec(epsilon=epsilon, delta=delta, mechanism=mechanism, **privacy),
        servers=(ServerSpec("server-0"), ServerSpec("server-1")), clip_norm="l1" if mechanism == "laplace" else "l2")
    return resolve_defaults(spec)


def test_resolved_gaussian_jobs_state_the_accountants_rho_and_plan_exactly_as_without_it():
    for epsilon, delta in ((1.0, 1e-6), (0.3, 1e-9), (8.0, 1e-5)):
        spec = job(epsilon, delta)
        assert spec.privacy.zcdp_rho == accounting.rho_for(epsilon, delta)
        assert accounting.zcdp_epsilon(spec.privacy.zcdp_rho, delta) <= epsilon
        bare = replace(spec, privacy=replace(spec.privacy, zcdp_rho=None))
        assert spec.noise_plan() == bare.noise_plan()  # the same σ², bit for bit
        assert "zcdp_rho" in spec.to_dict()["privacy"] and "zcdp_rho" not in bare.to_dict()["privacy"]
        assert JobSpec.from_json(spec.canonical_json()).digest == spec.digest
    assert job(mechanism="laplace", delta=0.0).privacy.zcdp_rho is None
    assert job(delta=1e-3, calibration="paper").privacy.zcdp_rho is None


def test_a_stated_rho_drives_the_plan_and_bad_ones_are_refused():
    spec = job()
    rho = spec.privacy.zcdp_rho
    half = replace(spec, privacy=replace(spec.privacy, zcdp_rho=rho / 4))
    assert half.noise_plan().grid_sigma2 == pytest.approx(4 * spec.noise_plan().grid_sigma2, rel=1e-9)  # σ ∝ 1/√ρ
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(JobSpecError, match="zcdp_rho must be a positive finite number"):
            validate_job(replace(spec, privacy=replace(spec.privacy, zcdp_rho=bad)))
    lap = job(mechanism="laplace", delta=0.0)
    with pytest.raises(JobSpecError, match="zcdp_rho is the zCDP target of a tight or interpolated gaussian job"):
        validate_job(replace(lap, privacy=replace(lap.privacy, zcdp_rho=0.1)))
    with pytest.raises(CalibrationError, match="zcdp_rho"):
        plan_noise(mechanism="laplace", calibration="tight", epsilon=1.0, delta=0.0, clip_norm=1.0, s=1,
                   min_honest_load=4, frac_bits=8, width=2, zcdp_rho=0.1)


def test_the_party_checks_the_stated_rho_with_the_accountant_before_charging(tmp_path):
    spec = job()
    rho = spec.privacy.zcdp_rho
    assert accounting.zcdp_target_problem(rho, 1.0, 1e-6) is None
    assert ledger_mod.job_loss(spec).noise_multiplier > 0
    greedy = replace(spec, privacy=replace(spec.privacy, zcdp_rho=rho * 1.001))  # less noise than (1, 1e-6) needs
    why = accounting.zcdp_target_problem(greedy.privacy.zcdp_rho, 1.0, 1e-6)
    assert why is not None and "more than the job's epsilon = 1" in why and "\n" not in why
    with pytest.raises(ledger_mod.LedgerError, match=r"^refusing job 'rho': the job's zCDP target rho"):
        ledger_mod.job_loss(greedy)
    ledger = ledger_mod.PrivacyLedger.open(tmp_path, "party-0", ledger_mod.Budget(4.0, 1e-6))
    with pytest.raises(ledger_mod.LedgerError):
        ledger.admit(greedy)
    assert ledger.spend().jobs == 0  # nothing was charged
    admission = ledger.admit(spec)
    assert admission.charged and admission.after.epsilon == pytest.approx(1.0, abs=1e-9)
    assert accounting.zcdp_target_problem(float("nan"), 1.0, 1e-6).startswith("the job's zCDP target rho must be")


def test_servers_and_the_analyst_validate_a_job_without_the_accountant():
    """What a server and the analyst do with a served spec (decode, validate, plan) loads neither
    dp_accounting nor scipy: the accountant's 0.4-1.4 s import is the parties' and the builder's."""
    spec = job()
    code = ("import sys, json; from ltm.jobspec import JobSpec, validate_job; "
            "spec = JobSpec.from_json(sys.stdin.read()); a = validate_job(spec); "
            "print(json.dumps([a.noise_plan.grid_sigma2, sorted(m for m in sys.modules if m.split('.')[0] in "
            "('dp_accounting', 'scipy'))]))")
    out = subprocess.run([sys.executable, "-c", code], input=spec.canonical_json().decode(), capture_output=True,
                         text=True, check=True).stdout
    sigma2, loaded = json.loads(out)
    assert sigma2 == validate_job(spec).noise_plan.grid_sigma2 and loaded == []
    # without the stated ρ the same validation needs the accountant (what the test above guards against)
    bare = replace(spec, privacy=replace(spec.privacy, zcdp_rho=None))
    out = subprocess.run([sys.executable, "-c", code], input=bare.canonical_json().decode(), capture_output=True,
                         text=True, check=True).stdout
    assert "dp_accounting.rdp.rdp_privacy_accountant" in json.loads(out)[1]


def test_the_accountant_loads_only_its_submodules_and_the_package_still_imports_whole():
    code = ("import sys; from ltm.dp import accounting; R, ev = accounting.load_accountant(); "
            "assert 'dp_accounting.pld' not in sys.modules and 'scipy.stats' not in sys.modules, 'whole package'; "
            "assert 'dp_accounting' not in sys.modules; "
            "e = accounting.gaussian_event(10.0, 3, 1.0, 1.0); import dp_accounting; "
            "assert dp_accounting.ZCDpEvent is ev.ZCDpEvent and isinstance(e, dp_accounting.DpEvent); "
            "assert dp_accounting.rdp.RdpAccountant is R; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "ok"

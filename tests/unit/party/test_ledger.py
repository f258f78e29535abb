"""The party's privacy ledger (party/ledger.py): composition checked against independent computations,
persistence, idempotence, refusal before anything is sent, and no accountant → no upload."""
from __future__ import annotations

import math
import os
import stat
import sys
from dataclasses import replace

import numpy as np
import pytest

import ltm.party.ledger as ledger_mod
from ltm.datasets.synthetic import synthetic_ridge
from ltm.party.ledger import Budget, BudgetExceeded, PrivacyLedger, source_fingerprint
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.gaussian import exact_epsilon
from tests.helpers.jobs import bare_spec as job


# ------------------------------------------------------------------ independent computations
def _independent_rho(spec) -> float:
    """ρ of the job's distributed discrete Gaussian from its grid plan, recomputed here: ½(Δ₂/(√L·σ_c))²
    (Kairouz et al.'s τ term is below 1e-200 at these σ_c, so it cannot show at rel=1e-9)."""
    plan = spec.noise_plan()
    load = max(spec.privacy.min_honest_load, 1)
    return 0.5 * (plan.grid_sensitivity / (math.sqrt(load) * math.sqrt(plan.grid_sigma2))) ** 2


def _independent_zcdp_epsilon(rho: float, delta: float) -> float:
    """ε at δ of ρ-zCDP, by dp_accounting's RDP accountant driven directly with one event."""
    from dp_accounting import dp_event
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant
    return RdpAccountant().compose(dp_event.ZCDpEvent(rho)).get_epsilon(delta)


def test_one_gaussian_job_costs_its_calibration():
    spec = job("one")
    loss = ledger_mod.job_loss(spec)
    # the job's noise multiplier is the continuous Gaussian's with the same ρ as its discrete sum
    assert loss.noise_multiplier == pytest.approx(1.0 / math.sqrt(2.0 * _independent_rho(spec)), rel=1e-9)
    ledger = PrivacyLedger("party-0", Budget(4.0, 1e-6))
    admission = ledger.admit(spec)
    assert admission.charged and admission.before.epsilon == 0.0
    # calibrated on the same accountant: at the job's own δ the spend is the job's ε
    assert admission.after.epsilon == pytest.approx(1.0, abs=1e-9)


def test_composed_epsilon_matches_the_accountant_and_is_never_below_the_exact_bound():
    from dp_accounting import dp_event
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    jobs = [job("a", 1.0), job("b", 0.5), job("c", 1.0, 1e-7), job("d", 0.3, s=2), job("e", 1.0)]
    delta = 1e-6
    ledger = PrivacyLedger("party-0", Budget(100.0, delta))
    rhos = []
    for spec in jobs:
        admission = ledger.admit(spec)
        rhos.append(_independent_rho(spec))
        # the same accountant, driven independently: one ZCDpEvent per job, composed by it
        acc = RdpAccountant()
        for rho in rhos:
            acc.compose(dp_event.ZCDpEvent(rho))
        assert admission.after.epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-6)
        # a continuous Gaussian with the same total ρ has exactly this ε: zCDP's conversion is an
        # upper bound of it, so the ledger's ε is never below it
        exact = exact_epsilon(math.sqrt(2.0 * sum(rhos)), delta)
        assert exact - 1e-9 <= admission.after.epsilon <= exact * 1.25
    assert ledger.spend().jobs == 5
    # two identical default jobs: ρ doubles
    pair = PrivacyLedger("party-0", Budget(100.0, 1e-6))
    pair.admit(job("p1"))
    assert pair.admit(job("p2")).after.epsilon == pytest.approx(
        _independent_zcdp_epsilon(2 * _independent_rho(job("p1")), 1e-6), rel=1e-6)


def test_laplace_jobs_compose_by_adding_epsilon_and_the_paper_split_is_charged_its_true_epsilon():
    lap = job("lap", 0.5, 0.0, mechanism="laplace")
    assert ledger_mod.job_loss(lap).pure_epsilon == pytest.approx(0.5, rel=1e-12)
    ledger = PrivacyLedger("party-0", Budget(10.0, 1e-6))
    ledger.admit(lap)
    g = job("g", 1.0)
    after = ledger.admit(g).after.epsilon
    assert after == pytest.approx(0.5 + ledger_mod.gaussian_epsilon([ledger_mod.job_loss(g).noise_multiplier], 1e-6), abs=1e-12)
    # the paper's Laplace split on the grid: every honest draw is a whole DLap(t), so the job costs
    # ⌈Δ₁⌉/t in grid steps whatever the paper's formula claimed
    paper = job("paper", 0.5, 0.0, mechanism="laplace", kind="dense", calibration="paper")
    paper = replace(paper, privacy=replace(paper.privacy, min_honest_load=5))
    plan = paper.noise_plan()
    assert ledger_mod.job_loss(paper).pure_epsilon == pytest.approx(
        math.ceil(plan.grid_l1_sensitivity) / plan.grid_scale, rel=1e-12)
    ledger.admit(paper)
    assert ledger.spend().jobs == 3


def test_refusal_names_the_spend_and_changes_nothing(tmp_path):
    d = tmp_path / "ledger"
    ledger = PrivacyLedger.open(d, "party-0", Budget(1.2, 1e-6))
    first = ledger.admit(job("first"))
    assert first.charged
    before = ledger.path.read_bytes()
    again = job("first")  # the same job again (a restarted party): no second charge
    assert not ledger.admit(again).charged and ledger.spend().jobs == 1
    with pytest.raises(BudgetExceeded) as err:
        ledger.admit(replace(job("first"), job_id="first-again"))  # re-created under a new id
    msg = str(err.value)
    assert "has spent ε = 1" in msg and "would reach ε = 1.45" in msg and "budget ε = 1.2" in msg
    assert "nothing was sent" in msg
    assert ledger.path.read_bytes() == before
    # persistent: a new process (a new object) sees the same spend; private file modes
    reopened = PrivacyLedger.open(d, "party-0", Budget(1.2, 1e-6))
    assert reopened.spend() == ledger.spend()
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ledger.path).st_mode) == 0o600
    # another party id has its own ledger
    other = PrivacyLedger.open(d, "party-1", Budget(1.2, 1e-6))
    assert other.path != ledger.path and other.spend().jobs == 0


def test_source_fingerprint_is_the_data():
    a = {"x": np.arange(5.0), "y": np.ones(5)}
    assert source_fingerprint(a) == source_fingerprint({"y": np.ones(5), "x": np.arange(5.0)})
    assert source_fingerprint(a) != source_fingerprint({"x": np.arange(5.0), "y": np.array([1, 1, 1, 1, 2.0])})
    assert source_fingerprint(a) != source_fingerprint({"x": np.arange(5.0), "z": np.ones(5)})


def test_without_an_accountant_the_party_refuses(monkeypatch):
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # `import dp_accounting` now fails
    ledger_mod._gaussian_epsilon.cache_clear()
    ledger = PrivacyLedger("party-0")
    with pytest.raises(ledger_mod.AccountantUnavailable,
                       match=r"^the privacy accountant \(the dp-accounting package\) is not installed: this party "
                             r"cannot account for its privacy loss and refuses every job \(pip install dp-accounting\)$"):
        ledger.admit(job("no-accountant"))
    assert ledger.losses() == []


def test_the_in_process_transport_charges_the_same_ledger(tmp_path):
    randomness = Randomness.seeded_insecure("ledger-inprocess")
    table = synthetic_ridge(2000, 3, randomness)
    spec, _ = build_job(table, job_id="in-1", randomness=randomness, parties=2, k=2, m=16)
    tables = party_tables(spec, table)
    budget = Budget(1.2, 1e-6)
    ledgers = {p: PrivacyLedger.open(tmp_path, p, budget) for p in tables}
    run = run_inprocess(spec, tables, randomness, ledgers=ledgers)
    assert {p: e["after"]["jobs"] for p, e in run.ledgers.items()} == {"party-0": 1, "party-1": 1}
    assert run.ledgers["party-0"]["after"]["epsilon"] == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(BudgetExceeded, match="has spent ε = 1"):
        run_inprocess(replace(spec, job_id="in-2"), tables, randomness, ledgers=ledgers)


def test_a_near_noiseless_job_is_accounted_in_bounded_memory_and_never_understated():
    # ε = 10⁴-scale jobs (z = σ/Δ ≈ 5e-4) once made the PLD grid allocate gigabytes.
    import resource

    from scipy.stats import norm

    from ltm.party.ledger import gaussian_epsilon

    z = 5e-4
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    eps = gaussian_epsilon([z], 1e-6)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 500
    # exact δ(ε) of one Gaussian mechanism at ε: the pessimistic estimate must not undercut it
    delta_at = lambda e: (np.exp(norm.logcdf(1 / (2 * z) - e * z))
                          - np.exp(e + norm.logcdf(-1 / (2 * z) - e * z)))  # log space: e^ε overflows
    assert delta_at(eps) <= 1e-6 * (1 + 1e-6)

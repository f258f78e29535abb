"""The party's ledger file (party/ledger.py): one ledger per party id, every record validated when read,
the digest chain and the head, the missing-ledger refusal, data sources, and the budget comparison's
tolerance.  In process (fast; the mutation run's selection): the `ltm party` path is in
tests/integration/test_ledger_party.py."""
from __future__ import annotations

import json
import logging
import math
import os
import stat
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import ltm.party.ledger as L
from ltm.datasets.synthetic import synthetic_ridge
from ltm.party.journal import UploadJournal, party_journals
from ltm.party.ledger import (
    ADMISSION_RTOL,
    DEFAULT_SOURCE,
    Budget,
    BudgetExceeded,
    LedgerCorrupt,
    LedgerError,
    LedgerMissing,
    PrivacyLedger,
    source_fingerprint,
)
from ltm.randomness import Randomness
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables
from tests.helpers.gaussian import exact_epsilon, gaussian_delta, independent_sigma
from tests.helpers.jobs import bare_spec as job

FP = "ab" * 32


def charged(tmp_path: Path, budget: Budget = Budget(10.0, 1e-6), jobs: tuple = ("a",), **kw) -> PrivacyLedger:
    ledger = PrivacyLedger.open(tmp_path, "party-0", budget)
    for j in jobs:
        ledger.admit(job(j, **kw), data_fingerprint=FP)
    return ledger


def records(ledger: PrivacyLedger) -> list[dict]:
    return json.loads(ledger.path.read_text())["records"]


def rewrite(ledger: PrivacyLedger, recs: list[dict], *, rechain: bool = True, head: bool = True) -> None:
    """Write ``recs`` as the ledger (re-chained: a tamperer who knows the format), and its head."""
    recs = L._chain(recs) if rechain else recs
    obj = json.loads(ledger.path.read_text())
    ledger.path.write_text(json.dumps({**obj, "records": recs}))
    if head:
        ledger.head_path.write_text(json.dumps({"party_id": "party-0", "records": len(recs),
                                                "digest": recs[-1]["digest"]}))


# ------------------------------------------------------------------ the budget comparison
def test_a_job_whose_epsilon_is_the_whole_budget_is_admitted():
    # once refused (the old PLD bound read a hair above 8); the RDP reading may round an ulp either way
    ledger = PrivacyLedger("party-0", Budget(8.0, 1e-6))
    admission = ledger.admit(job("eight", 8.0))
    assert admission.charged and 8.0 * (1 - 1e-9) <= admission.after.epsilon <= 8.0 * (1 + ADMISSION_RTOL)
    # the same at the job's own δ for other (ε, δ)
    for eps, delta in ((1.0, 1e-6), (4.0, 1e-9), (0.3, 1e-7)):
        assert PrivacyLedger("party-0", Budget(eps, delta)).admit(job(f"e{eps}", eps, delta)).charged
    # a Laplace job at exactly the budget: Δ/(Δ/ε) may round by an ulp
    assert PrivacyLedger("party-0", Budget(0.7, 1e-6)).admit(job("lap", 0.7, 0.0, mechanism="laplace")).charged


def test_a_job_just_past_the_tolerance_is_refused():
    eight = job("eight", 8.0)
    with pytest.raises(BudgetExceeded, match=rf"^refusing job 'eight' \(digest {eight.digest[:12]}…\): privacy "
                                             rf"budget exceeded — this party's ledger \(source 'default'\) has spent "
                                             rf"ε = 0 \(δ = 1e-06\) over 0 job\(s\); with this job \(ε = 8, δ = 1e-06\) "
                                             rf"it would reach ε = 8 > the budget ε = 7.99992 at δ = 1e-06 \(zCDP"):
        PrivacyLedger("party-0", Budget(8.0 * (1 - 1e-5), 1e-6)).admit(eight)
    with pytest.raises(BudgetExceeded):
        PrivacyLedger("party-0", Budget(0.7 * (1 - 1e-5), 1e-6)).admit(job("lap", 0.7, 0.0, mechanism="laplace"))
    assert L.within_budget(2.0 * (1 + ADMISSION_RTOL), Budget(2.0))
    assert not L.within_budget(2.0 * (1 + 2 * ADMISSION_RTOL), Budget(2.0))


@pytest.mark.parametrize("epsilons", [(1.0,), (8.0,), (1.0, 0.5), (1.0, 1.0, 0.3, 2.0), (0.2,) * 6])
def test_never_admits_a_composition_whose_true_epsilon_exceeds_the_budget_by_more_than_the_tolerance(epsilons):
    delta = 1e-6
    specs = [job(f"j{i}", e, delta) for i, e in enumerate(epsilons)]
    mus = [1.0 / L.job_loss(s).noise_multiplier for s in specs]
    # the exact composition of Gaussians is a Gaussian with μ² = Σ μᵢ² (independently, with scipy)
    true = exact_epsilon(math.sqrt(sum(m * m for m in mus)), delta)
    ledger = PrivacyLedger("party-0", Budget(100.0, delta))
    for s in specs:
        ledger.admit(s)
    composed = ledger.spend().epsilon
    assert true - 1e-9 <= composed  # the accountant never understates
    assert gaussian_delta(math.sqrt(sum(m * m for m in mus)), composed) <= delta * (1 + 1e-6)
    # any budget the true ε exceeds by more than the tolerance refuses the last job
    strict = PrivacyLedger("party-0", Budget(100.0, delta))
    for s in specs[:-1]:
        strict.admit(s)
    strict.budget = Budget(true / (1 + ADMISSION_RTOL) * (1 - 1e-9), delta)
    with pytest.raises(BudgetExceeded):
        strict.admit(specs[-1])


# ------------------------------------------------------------------ one ledger per party id
def test_one_ledger_per_party_whatever_the_data(tmp_path):
    ledger = PrivacyLedger.open(tmp_path, "party-0", Budget(1.2, 1e-6))
    ledger.admit(job("a"), data_fingerprint="11" * 32)
    # another job on other data (an appended row, a renamed column: another fingerprint) is the same budget
    with pytest.raises(BudgetExceeded, match=r"source 'default'\) has spent ε = 1"):
        PrivacyLedger.open(tmp_path, "party-0", Budget(1.2, 1e-6)).admit(job("b"), data_fingerprint="22" * 32)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["party-0.ledger.head", "party-0.ledger.json",
                                                          "party-0.ledger.json.lock"]
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700
    for p in tmp_path.iterdir():
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
    (charge,) = L.PrivacyLedger.open(tmp_path, "party-0").losses()
    assert (charge.job_id, charge.source, charge.data_fingerprint) == ("a", DEFAULT_SOURCE, "11" * 32)
    assert charge.charged_at.endswith("+00:00")
    # another party id: its own ledger
    assert PrivacyLedger.open(tmp_path, "party-1", Budget(1.2, 1e-6)).admit(job("b")).charged


def test_the_ledger_directory_is_the_hosts_state_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert L.default_ledger_dir() == tmp_path / "xdg" / "ltm" / "ledger"
    assert PrivacyLedger.open(None, "party-0").path == tmp_path / "xdg" / "ltm" / "ledger" / "party-0.ledger.json"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert L.default_ledger_dir() == tmp_path / "home" / ".local" / "state" / "ltm" / "ledger"


def test_a_directory_that_cannot_be_created_is_a_one_line_ledger_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(LedgerError, match=f"cannot create the ledger directory '{tmp_path}/file/ledger': Not a "
                                          f"directory; give --ledger-dir a writable directory"):
        PrivacyLedger.open(tmp_path / "file" / "ledger", "party-0")


def test_party_ids_become_safe_distinct_file_names(tmp_path):
    a = PrivacyLedger.open(tmp_path, "party/1")
    b = PrivacyLedger.open(tmp_path, "party_1")
    assert a.path.parent == tmp_path and a.path != b.path


def test_a_restarted_party_is_not_charged_twice_and_keeps_its_source(tmp_path):
    ledger = charged(tmp_path, Budget(1.2, 1e-6))
    again = ledger.admit(job("a"), source="other", new_source_reason="irrelevant: already charged")
    assert again.charged is False and again.source == DEFAULT_SOURCE and again.after.jobs == 1
    assert again.before == again.after and again.job_id == "a" and again.budget == Budget(1.2, 1e-6)
    assert again.path == str(ledger.path) and again.to_json()["ledger"] == str(ledger.path)
    assert len(records(ledger)) == 2  # the default source and the one charge: nothing written


def test_the_in_process_transport_charges_one_ledger_per_party_across_runs(tmp_path):
    randomness = Randomness.seeded_insecure("ledger-dir-inprocess")
    table = synthetic_ridge(800, 3, randomness)
    spec, _ = build_job(table, job_id="run-1", randomness=randomness, parties=2, k=2, m=8)
    tables = party_tables(spec, table)
    run = run_inprocess(spec, tables, randomness, ledger_dir=tmp_path, budget=Budget(1.2, 1e-6))
    assert run.ledgers["party-0"]["ledger"] == str(tmp_path / "party-0.ledger.json")
    (charge,) = PrivacyLedger.open(tmp_path, "party-1").losses()
    assert charge.data_fingerprint == source_fingerprint(tables["party-1"])
    # the same parties on re-sorted data: the same budgets
    order = np.random.default_rng(1).permutation(spec.party("party-0").size)
    resorted = {p: {c: v[order] if p == "party-0" else v for c, v in t.items()} for p, t in tables.items()}
    with pytest.raises(BudgetExceeded, match="has spent ε = 1"):
        run_inprocess(replace(spec, job_id="run-2"), resorted, randomness, ledger_dir=tmp_path,
                      budget=Budget(1.2, 1e-6))
    # without a ledger directory each run is a world of its own (simulations)
    assert run_inprocess(replace(spec, job_id="run-3"), tables, randomness).ledgers["party-0"]["ledger"] == \
        "(in memory)"


# ------------------------------------------------------------------ data sources
def test_a_new_source_is_a_separate_budget_logged_with_time_and_reason(tmp_path, caplog):
    ledger = charged(tmp_path, Budget(1.2, 1e-6))
    with caplog.at_level(logging.WARNING, logger="ltm.party"):
        admission = PrivacyLedger.open(tmp_path, "party-0", Budget(1.2, 1e-6)).admit(
            job("b"), source="cohort-2", new_source_reason="the 2026 cohort: new, disjoint patients",
            data_fingerprint="cd" * 32)
    assert admission.charged and admission.source == "cohort-2" and admission.before.jobs == 0
    assert admission.to_json()["source"] == "cohort-2"
    (entry,) = [r for r in caplog.records if r.getMessage() == "new data source opened: a separate privacy budget"]
    assert entry.source == "cohort-2" and entry.reason.startswith("the 2026 cohort")
    assert entry.party == "party-0" and entry.ledger == str(ledger.path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ltm.party"):
        PrivacyLedger("party-1").admit(job("b"), source="s", new_source_reason="new people")
    assert [r.ledger for r in caplog.records] == ["(in memory)"]
    log = ledger.sources()
    assert list(log) == [DEFAULT_SOURCE, "cohort-2"]
    assert log["cohort-2"]["reason"] == "the 2026 cohort: new, disjoint patients"
    assert log["cohort-2"]["at"].endswith("+00:00") and log[DEFAULT_SOURCE]["reason"]
    assert [c.job_id for c in ledger.losses("cohort-2")] == ["b"] and ledger.spend("cohort-2").jobs == 1
    resumed = ledger.admit(job("b"))  # a restart: the source it was charged to, whatever --source says now
    assert (resumed.charged, resumed.source, resumed.after.jobs) == (False, "cohort-2", 1)
    assert ledger.spend().jobs == 1 and len(ledger.losses()) == 2
    # later jobs on it name it; its budget is its own
    with pytest.raises(BudgetExceeded, match="source 'cohort-2'"):
        ledger.admit(job("c"), source="cohort-2", data_fingerprint="cd" * 32)
    with pytest.raises(BudgetExceeded, match="source 'default'"):
        ledger.admit(job("c"), data_fingerprint=FP)


def test_a_source_cannot_be_opened_twice_nor_charged_unopened(tmp_path):
    ledger = charged(tmp_path)
    before = ledger.path.read_bytes()
    with pytest.raises(LedgerError, match=r"source 'default' of party-0 already exists \(opened .*: the first job"):
        ledger.admit(job("b"), source=DEFAULT_SOURCE, new_source_reason="again")
    with pytest.raises(LedgerError, match="has no data source 'nope' .*--new-source nope"):
        ledger.admit(job("b"), source="nope")
    for name, reason in (("x", ""), ("x", "  "), ("", "why")):
        with pytest.raises(LedgerError, match=r"^--new-source needs a source name and a reason "
                                              r"\(--new-source-reason\): why is this data new, disjoint individuals\?$"):
            ledger.admit(job("b"), source=name, new_source_reason=reason)
    assert ledger.path.read_bytes() == before
    ledger.admit(job("b"), source="x", new_source_reason="new people")
    with pytest.raises(LedgerError, match=r"source 'x' of party-0 already exists \(opened .*: new people\)"):
        ledger.admit(job("c"), source="x", new_source_reason="more new people")
    with pytest.raises(LedgerError, match=r"has no data source 'nope' \(sources: default, x\); open it with "
                                          r"--new-source nope only if this is genuinely new data$"):
        ledger.admit(job("c"), source="nope")
    # a new ledger opens its default source with its first job; an unknown source still is refused
    with pytest.raises(LedgerError, match=r"sources: default\)"):
        PrivacyLedger("party-9").admit(job("a"), source="x")
    with pytest.raises(LedgerError, match=r"source 'default' of party-9 already exists \(opened 20\d\d-.*\+00:00: "
                                          r"the first job of party party-9\); charge it with --source default"):
        PrivacyLedger("party-9").admit(job("a"), new_source_reason="why")


def test_data_already_charged_cannot_have_a_second_budget(tmp_path):
    ledger = charged(tmp_path)
    with pytest.raises(LedgerError, match="exact data was already charged to source 'default' \\(job 'a'\\)"):
        ledger.admit(job("b"), source="copy", new_source_reason="a copy, claimed new", data_fingerprint=FP)
    assert list(ledger.sources()) == [DEFAULT_SOURCE]  # nothing was opened either
    # the same data on its own source is fine (the normal case), and no fingerprint matches nothing
    assert ledger.admit(job("b"), data_fingerprint=FP).charged
    assert ledger.admit(job("c"), source="y", new_source_reason="new people").charged
    # no fingerprint given (an in-process caller): nothing to compare, no refusal
    bare = PrivacyLedger("party-0")
    assert bare.admit(job("a")).after.seeded_jobs == 0
    assert bare.admit(job("b"), source="z", new_source_reason="new people").charged


# ------------------------------------------------------------------ a missing ledger
def test_a_missing_ledger_with_its_head_left_is_refused(tmp_path):
    ledger = charged(tmp_path)
    ledger.path.unlink()
    with pytest.raises(LedgerMissing, match=rf"is missing but its head '{ledger.head_path}' records 2 record\(s\)"):
        PrivacyLedger.open(tmp_path, "party-0")
    with pytest.raises(LedgerMissing):
        ledger.admit(job("b"))
    assert not ledger.path.exists()  # never a silent reset


def test_a_missing_ledger_with_upload_journals_left_is_refused(tmp_path):
    ledger_dir, state = tmp_path / "ledger", tmp_path / "state"
    spec = job("a")
    PrivacyLedger.open(ledger_dir, "party-0", journal_dir=state).admit(spec)
    UploadJournal.open(state, spec, "party-0", batch_clients=100, seeded=False)
    assert party_journals(state, "party-0") and not party_journals(state, "party-1")
    assert party_journals(tmp_path / "absent", "party-0") == []
    for f in ledger_dir.iterdir():  # the whole ledger directory's content is lost
        f.unlink()
    with pytest.raises(LedgerMissing, match=r"1 upload journal\(s\) of party-0 in .*state.* show earlier jobs"):
        PrivacyLedger.open(ledger_dir, "party-0", journal_dir=state)
    # another party on the same host, with no history, starts normally
    assert PrivacyLedger.open(ledger_dir, "party-1", journal_dir=state).admit(job("b")).charged
    # and the party's own ledger, where it was (--ledger-dir), is found again
    assert PrivacyLedger.open(ledger_dir, "party-0").losses() == []


def test_an_older_copy_put_back_is_refused(tmp_path):
    ledger = charged(tmp_path, jobs=("a",))
    old = ledger.path.read_bytes()
    ledger.admit(job("b"))
    ledger.path.write_bytes(old)  # a backup from before job b
    with pytest.raises(LedgerMissing, match=rf"has 2 record\(s\) but its head '{ledger.head_path}' records 3: an older"):
        PrivacyLedger.open(tmp_path, "party-0")
    # a ledger one write ahead of its head (a crash between the two writes) is fine
    ledger2 = charged(tmp_path / "2", jobs=("a", "b"))
    head = json.loads(ledger2.head_path.read_text())
    ledger2.head_path.write_text(json.dumps({**head, "records": 2, "digest": records(ledger2)[1]["digest"]}))
    assert len(PrivacyLedger.open(tmp_path / "2", "party-0").losses()) == 2
    # a head whose digest is not the record's: another ledger put in place
    ledger2.head_path.write_text(json.dumps({**head, "digest": "00" * 32}))
    with pytest.raises(LedgerMissing):
        PrivacyLedger.open(tmp_path / "2", "party-0")


@pytest.mark.parametrize("head, why", [
    ("{", "Expecting"), ("[]", "list indices"), ('{"records": 0, "digest": "x"}', "bad fields\\)"),
    ('{"records": true, "digest": "x"}', "bad fields\\)"), ('{"records": 1.0, "digest": "x"}', "bad fields\\)"),
    ('{"records": 1, "digest": 5}', "bad fields\\)"), ('{"records": 1}', "'digest'\\)")])
def test_an_unreadable_head_is_refused(tmp_path, head, why):
    ledger = charged(tmp_path)
    ledger.head_path.write_text(head)
    with pytest.raises(LedgerCorrupt, match=f"the ledger head '{ledger.head_path}' is unreadable \\({why}"):
        PrivacyLedger.open(tmp_path, "party-0")
    # a head of one record (the first of the chain) is a valid, if old, head
    ledger.head_path.write_text(json.dumps({"records": 1, "digest": records(ledger)[0]["digest"]}))
    assert PrivacyLedger.open(tmp_path, "party-0").losses() == ledger.losses()


# ------------------------------------------------------------------ every record validated when read
def _charge(recs):
    return next(r for r in recs if r["kind"] == "charge")


BAD_CHARGES = {
    # the audit's: a charge of pure ε = −100 that admitted the next job
    "negative pure ε": (dict(mechanism="laplace", pure_epsilon=-100.0, noise_multiplier=0.0),
                        "pure_epsilon is -100.0, not positive"),
    "non-numeric multiplier": (dict(noise_multiplier="lots"), "noise_multiplier is 'lots', not a finite number"),
    "infinite multiplier": (dict(noise_multiplier=math.inf), "noise_multiplier is inf, not a finite number"),
    "NaN multiplier": (dict(noise_multiplier=math.nan), "noise_multiplier is nan"),
    "zero multiplier": (dict(noise_multiplier=0.0), "noise_multiplier is 0.0, not positive"),
    "negative multiplier": (dict(noise_multiplier=-3.0), "noise_multiplier is -3.0, not positive"),
    "bool multiplier": (dict(noise_multiplier=True), "noise_multiplier is True"),
    "missing multiplier": (dict(noise_multiplier=None), "noise_multiplier is None"),
    "Gaussian with a pure ε": (dict(pure_epsilon=0.5), "a gaussian charge has pure_epsilon 0.5, not 0"),
    "Laplace with a multiplier": (dict(mechanism="laplace", pure_epsilon=1.0),
                                  "a laplace charge has noise_multiplier"),
    "unknown mechanism": (dict(mechanism="gauss"), "mechanism 'gauss' is not one of"),
    "negative ε": (dict(job_epsilon=-1.0), r"job \(ε, δ\) = \(-1.0, 1e-06\)"),
    "infinite ε": (dict(job_epsilon=math.inf), "job_epsilon is inf"),
    "string ε": (dict(job_epsilon="1"), "job_epsilon is '1'"),
    "negative δ": (dict(job_delta=-1e-6), r"job \(ε, δ\) = \(1.0, -1e-06\)"),
    "δ = 1": (dict(job_delta=1.0), r"job \(ε, δ\) = \(1.0, 1.0\) is not ε ≥ 0, 0 ≤ δ < 1"),
    "NaN δ": (dict(job_delta=math.nan), "job_delta is nan"),
    "seeded not a bool": (dict(seeded="no"), "seeded is 'no', not a bool"),
    "fingerprint not a string": (dict(data_fingerprint=7), "data_fingerprint is 7, not a string"),
    "no job id": (dict(job_id=""), "job_id is '', not a non-empty string"),
    "no digest": (dict(job_digest=None), "job_digest is None"),
    "no calibration": (dict(calibration=3), "calibration is 3"),
    "no time": (dict(at=""), "at is ''"),
    "unopened source": (dict(source="elsewhere"), "it charges source 'elsewhere', which was never opened"),
}


@pytest.mark.parametrize("case", sorted(BAD_CHARGES))
def test_a_bad_charge_is_a_one_line_refusal_never_a_reset(tmp_path, case):
    change, message = BAD_CHARGES[case]
    ledger = charged(tmp_path)
    recs = records(ledger)
    _charge(recs).update(change)
    # written as a tamperer would (Infinity/NaN as JSON allows them), the chain and head recomputed
    body = [{k: v for k, v in r.items() if k not in ("prev", "digest")} for r in recs]
    prev = L._GENESIS
    for r, b in zip(recs, body):
        r["prev"] = prev
        r["digest"] = prev = L.hashlib.sha256(f"{prev}\n{json.dumps(b, sort_keys=True, separators=(',', ':'), ensure_ascii=False)}".encode()).hexdigest()
    rewrite(ledger, recs, rechain=False)
    before = ledger.path.read_bytes()
    for attempt in (lambda: PrivacyLedger.open(tmp_path, "party-0"), lambda: ledger.admit(job("next")),
                    ledger.spend, ledger.losses):
        with pytest.raises(LedgerCorrupt, match=rf"privacy ledger '{ledger.path}' is corrupt at record 1: {message}") as err:
            attempt()
        assert "\n" not in str(err.value) and "restore it from a backup" in str(err.value)
    assert ledger.path.read_bytes() == before


BAD_FILES = {
    "edited without re-chaining": (lambda recs: _charge(recs).update(noise_multiplier=99.0), False,
                                   "record 1: its digest does not chain"),
    "a record removed": (lambda recs: recs.pop(1), False, "record 1: its digest does not chain"),
    "records reordered": (lambda recs: recs.reverse(), False, "record 0: it charges source 'default', which was"),
    "a source opened twice": (lambda recs: recs.insert(1, dict(recs[0])), True,
                              "record 1: source 'default' is opened twice"),
    "a source without a reason": (lambda recs: recs[0].update(reason=""), True, "record 0: reason is ''"),
    "an unknown kind": (lambda recs: recs[0].update(kind="refund"), True,
                        "record 0: kind 'refund' is neither 'source' nor 'charge'"),
    "a record that is not an object": (lambda recs: recs.insert(0, 5), False, "record 0: not an object"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_broken_chain_or_record_is_refused(tmp_path, case):
    edit, rechain, message = BAD_FILES[case]
    ledger = charged(tmp_path, jobs=("a", "b"))
    recs = records(ledger)
    edit(recs)
    rewrite(ledger, recs, rechain=rechain, head=False)
    with pytest.raises(LedgerCorrupt, match=message):
        PrivacyLedger.open(tmp_path, "party-0")


@pytest.mark.parametrize("content, message", [
    ("{ truncated", "is unreadable"), ("[]", "is not a ltm.ledger.v2 ledger of party 'party-0'"),
    ('{"format": "ltm.ledger.v1", "party_id": "party-0", "charges": []}', "is not a ltm.ledger.v2 ledger"),
    ('{"format": "ltm.ledger.v2", "party_id": "party-1", "records": []}', "ledger of party 'party-0'"),
    ('{"format": "ltm.ledger.v2", "party_id": "party-0", "records": {}}', "its records are not a list"),
    ('{"format": "ltm.ledger.v2", "party_id": "party-0"}', "its records are not a list"),
])
def test_an_unreadable_or_foreign_file_is_refused(tmp_path, content, message):
    ledger = charged(tmp_path)
    ledger.head_path.unlink()
    ledger.path.write_text(content)
    with pytest.raises(LedgerError, match=message) as err:
        PrivacyLedger.open(tmp_path, "party-0")
    assert "\n" not in str(err.value)


def test_an_in_memory_ledger_is_validated_like_a_file():
    ledger = PrivacyLedger("party-0")
    ledger.admit(job("a"))
    assert ledger._memory[-1]["digest"] == L._chain(ledger._memory)[-1]["digest"]
    ledger._memory[1]["pure_epsilon"] = -100.0
    with pytest.raises(LedgerCorrupt, match=r"\(in memory, party-0\) is corrupt at record 1"):
        ledger.admit(job("b"))


# ------------------------------------------------------------------ the small parts, pinned
def test_budget_spend_and_admission_render_as_documented():
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="budget ε must be a positive number"):
            Budget(bad)
    for bad in (0.0, 1.0, -1e-6, math.nan):
        with pytest.raises(ValueError, match=r"budget δ must be in \(0, 1\)"):
            Budget(1.0, bad)
    assert Budget() == Budget(4.0, 1e-6) and L.UNLIMITED == Budget(math.inf, 1e-6)
    spend = L.Spend(math.inf, 1e-6, 3, 1)
    assert spend.to_json() == {"epsilon": None, "delta": 1e-6, "jobs": 3, "seeded_jobs": 1}
    assert str(L.Spend(1.23456, 1e-6, 2)) == "ε = 1.235 (δ = 1e-06) over 2 job(s)"
    admission = PrivacyLedger("party-0", L.UNLIMITED).admit(job("a"), seeded=True)
    entry = admission.to_json()
    assert entry["budget"] == {"epsilon": None, "delta": 1e-6} and entry["ledger"] == "(in memory)"
    assert entry["accountant"] == L.ACCOUNTANT and entry["after"]["seeded_jobs"] == 1
    assert entry["job_id"] == "a" and entry["charged"] is True and entry["source"] == DEFAULT_SOURCE
    assert L.describe_admission(entry) == \
        f"spent ε 0 → {entry['after']['epsilon']:.4g} of budget ε ∞ at δ 1e-06"
    again = {**entry, "charged": False, "budget": {"epsilon": 4.0, "delta": 1e-6},
             "before": {**entry["before"], "epsilon": None}}
    assert L.describe_admission(again).endswith("of budget ε 4 at δ 1e-06 (job already charged)")
    assert L.describe_admission(again).startswith("spent ε ∞ → ")
    assert L.describe_admission({k: v for k, v in again.items() if k != "charged"}).endswith("at δ 1e-06")
    finite = L.Admission("a", True, spend, spend, Budget(4.0, 1e-6), "p").to_json()
    assert finite["budget"] == {"epsilon": 4.0, "delta": 1e-6} and finite["ledger"] == "p"
    memory = PrivacyLedger.in_memory("party-3", Budget(2.0, 1e-7))
    assert (memory.party_id, memory.budget, memory.path) == ("party-3", Budget(2.0, 1e-7), None)
    assert L.gaussian_epsilon([], 1e-6) == 0.0
    assert L.compose([], 1e-6) == L.Spend(0.0, 1e-6, 0, 0)


def test_the_digest_is_sha256_of_the_previous_digest_and_the_canonical_record():
    body = {"kind": "source", "source": "é-cohort", "at": "t", "reason": "nouveaux patients, disjoints"}
    canonical = '{"at":"t","kind":"source","reason":"nouveaux patients, disjoints","source":"é-cohort"}'
    assert L._digest("p", body) == L.hashlib.sha256(f"p\n{canonical}".encode()).hexdigest()
    assert L._GENESIS == L.hashlib.sha256(b"ltm.ledger.v2").hexdigest()
    (record,) = L._chain([{**body, "prev": "junk", "digest": "junk"}])
    assert record["prev"] == L._GENESIS and record["digest"] == L._digest(L._GENESIS, body)
    with pytest.raises(ValueError):
        L._digest("p", {"x": math.nan})


def test_two_processes_cannot_both_spend_the_last_of_a_budget(tmp_path):
    import threading

    ledger = PrivacyLedger.open(tmp_path, "party-0", Budget(1.2, 1e-6))
    other = PrivacyLedger.open(tmp_path, "party-0", Budget(1.2, 1e-6))
    outcome = []

    def second():
        try:
            outcome.append(other.admit(job("b")).charged)
        except BudgetExceeded:
            outcome.append("refused")

    with ledger._locked():
        thread = threading.Thread(target=second)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive() and outcome == []  # waits for the lock
        ledger._save(L._chain([ledger._source_record(DEFAULT_SOURCE, "first"),
                               {"kind": "charge", **L.asdict(L.job_loss(job("a"))), "at": "t", "source": DEFAULT_SOURCE,
                                "data_fingerprint": ""}]))
    thread.join(30)
    assert outcome == ["refused"]  # it read the spend written while it waited




# ------------------------------------------------------------------ the old format, imported
def v1_ledger(directory: Path, party: str, fingerprint: str, specs, when: str = "2026-01-0{}T00:00:00+00:00") -> Path:
    """A ledger as the old party/ledger.py wrote it: keyed by the data's fingerprint."""
    charges = []
    for i, spec in enumerate(specs):
        c = L.asdict(L.job_loss(spec))
        del c["source"], c["data_fingerprint"]
        charges.append({**c, "charged_at": when.format(i + 1)})
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{party}-{fingerprint[:16]}.json"
    path.write_text(json.dumps({"format": "ltm.ledger.v1", "party_id": party, "source": fingerprint,
                                "accountant": "x", "charges": charges}))
    return path


def test_old_format_ledgers_are_imported_whole_into_the_partys_budget(tmp_path):
    state, ledger_dir = tmp_path / "state", tmp_path / "ledger"
    UploadJournal.open(state, job("a"), "party-0", batch_clients=100, seeded=False)
    v1_ledger(state / "ledger", "party-0", "11" * 32, [job("a")])                  # beside the old data
    v1_ledger(ledger_dir, "party-0", "22" * 32, [job("b", 0.5)], "2026-02-0{}T00:00:00+00:00")  # an old --ledger-dir
    v1_ledger(ledger_dir, "party-0-x", "33" * 32, [job("c")])                     # another party's: ignored
    (ledger_dir / "party-0-notes.json").write_text('{"format": "other"}')         # not a ledger: ignored
    (ledger_dir / "party-0-list.json").write_text('[]')                             # nor this
    ledger = PrivacyLedger.open(ledger_dir, "party-0", Budget(1.3, 1e-6), journal_dir=state)
    losses = ledger.losses()
    assert [(c.job_id, c.data_fingerprint) for c in losses] == [("a", "11" * 32), ("b", "22" * 32)]  # by time
    assert ledger.sources()[DEFAULT_SOURCE]["reason"] == (
        f"imported from the old-format ledger(s) {ledger_dir}/party-0-2222222222222222.json, "
        f"{state}/ledger/party-0-1111111111111111.json: every charge, whatever data it was for")
    assert not ledger.path.exists()  # written with the next charge
    with pytest.raises(BudgetExceeded, match="over 2 job"):
        ledger.admit(job("d"))
    assert ledger.admit(job("a")).charged is False  # an imported job is already charged
    ledger.budget = Budget(10.0, 1e-6)
    ledger.admit(job("d"))
    assert [c.job_id for c in PrivacyLedger.open(ledger_dir, "party-0").losses()] == ["a", "b", "d"]


@pytest.mark.parametrize("content, message", [
    ("{", "is unreadable"),
    ('{"format": "ltm.ledger.v1", "party_id": "party-0", "source": "f", "charges": 3}', "corrupt at charge 0"),
    ('{"format": "ltm.ledger.v1", "party_id": "party-0", "source": "f", "charges": [{"mechanism": "gaussian"}]}',
     "corrupt at charge 0: job_epsilon is None"),
])
def test_a_bad_old_format_ledger_is_refused(tmp_path, content, message):
    (tmp_path / "party-0-0123456789abcdef.json").write_text(content)
    with pytest.raises(LedgerCorrupt, match=f"old-format ledger .*party-0-0123456789abcdef.json.* {message}"):
        PrivacyLedger.open(tmp_path, "party-0")


def test_the_fingerprint_hashes_float64_values_whatever_their_input_type():
    ints = {"x": np.arange(5), "y": np.array([1, 0, 1])}
    assert source_fingerprint(ints) == source_fingerprint({k: v.astype(np.float64) for k, v in ints.items()})
    assert source_fingerprint(ints) == source_fingerprint({k: v.astype(">f8") for k, v in ints.items()})


def test_the_file_and_its_head_hold_what_the_docstring_says(tmp_path):
    ledger = charged(tmp_path, jobs=("a",))
    ledger.admit(job("b", 0.5, 1e-7), seeded=True)
    text = ledger.path.read_text()
    assert text.startswith('{\n "format": "ltm.ledger.v2",\n "party_id": "party-0",\n "accountant": ')  # readable
    obj = json.loads(text)
    assert obj["accountant"] == L.ACCOUNTANT and len(obj["records"]) == 3
    assert json.loads(ledger.head_path.read_text()) == {"party_id": "party-0", "records": 3,
                                                        "digest": obj["records"][-1]["digest"]}
    a, b = ledger.losses()
    assert (a.job_epsilon, a.job_delta, a.seeded, a.mechanism) == (1.0, 1e-6, False, "gaussian")
    assert (b.job_epsilon, b.job_delta, b.seeded, b.calibration) == (0.5, 1e-7, True, "tight")
    assert b.noise_multiplier == L.job_loss(job("b", 0.5, 1e-7)).noise_multiplier and b.pure_epsilon == 0.0
    assert L.job_loss(job("b")).seeded is False and L.job_loss(job("b"), seeded=True).seeded is True


def test_a_charge_of_epsilon_zero_is_valid(tmp_path):
    ledger = charged(tmp_path)
    recs = records(ledger)
    _charge(recs).update(job_epsilon=0.0, job_delta=0.0)
    rewrite(ledger, recs)
    (loss,) = PrivacyLedger.open(tmp_path, "party-0").losses()
    assert (loss.job_epsilon, loss.job_delta) == (0.0, 0.0)


def test_a_job_without_an_honest_load_is_charged_at_load_one():
    spec = job("a")
    bare = replace(spec, privacy=replace(spec.privacy, min_honest_load=0))
    plan = bare.noise_plan()
    assert L.job_loss(bare).noise_multiplier == pytest.approx(plan.sigma_client / plan.sensitivity, rel=1e-12)


def test_an_old_format_ledger_is_found_under_the_old_file_name_of_a_party_id(tmp_path):
    v1_ledger(tmp_path, "p_0", "44" * 32, [job("a")])  # the old name of party "p/0"
    obj = json.loads((tmp_path / f"p_0-{'4' * 16}.json").read_text())
    (tmp_path / f"p_0-{'4' * 16}.json").write_text(json.dumps({**obj, "party_id": "p/0"}))
    assert [c.job_id for c in PrivacyLedger.open(tmp_path, "p/0").losses()] == ["a"]
    assert L._v1_name("a b/c.d-e_f") == "a_b_c.d-e_f"


def test_an_old_format_charge_is_imported_by_its_known_fields_only(tmp_path):
    path = v1_ledger(tmp_path, "party-0", "55" * 32, [job("a")])
    obj = json.loads(path.read_text())
    obj["charges"][0]["note"] = math.nan  # a field the ledger does not read (and no canonical JSON holds)
    path.write_text(json.dumps(obj))
    ledger = PrivacyLedger.open(tmp_path, "party-0")
    (loss,) = ledger.losses()
    assert loss.job_id == "a" and loss.charged_at == "2026-01-01T00:00:00+00:00"
    ledger.admit(job("b"))
    assert "note" not in ledger.path.read_text()


def test_a_stated_zcdp_target_that_does_not_buy_the_jobs_epsilon_is_refused_before_any_charge(tmp_path):
    # servers and the analyst plan the noise from the job's stated ρ (privacy.zcdp_rho) without the
    # accountant: the party is the one that checks it, in job_loss, before its ledger charges
    from ltm.dp import accounting
    fair = job("fair", 1.0, 1e-6)
    rho = fair.privacy.zcdp_rho
    assert rho is not None and L.job_loss(fair).noise_multiplier == pytest.approx(1 / math.sqrt(2 * rho), rel=1e-9)  # σ rounded up
    greedy = replace(fair, job_id="greedy", privacy=replace(fair.privacy, zcdp_rho=rho * 1.001))
    why = accounting.zcdp_target_problem(rho * 1.001, 1.0, 1e-6)
    assert why is not None  # 0.1% more ρ than (1, 1e-6) allows: less noise than the job's ε needs
    ledger = PrivacyLedger.open(tmp_path, "party-0", Budget(4.0, 1e-6))
    with pytest.raises(LedgerError) as refused:
        ledger.admit(greedy)
    assert str(refused.value) == f"refusing job 'greedy': {why}"  # one line, the job named, the accountant's reason
    assert ledger.spend().jobs == 0 and ledger.losses() == []  # nothing was charged
    assert ledger.admit(fair).charged and ledger.spend().jobs == 1


def test_a_continuous_plan_is_charged_by_its_own_noise():
    # frac_bits = 0 (the papers' float mechanisms, seeded reproductions only): the Gaussian by σ/Δ₂ of
    # the L-fold sum, the Laplace by Δ₁/b, and a paper split over fewer honest clients than L refused (ε = ∞)
    for load in (1, 54):
        gauss = replace(job("cg", 1.0, 1e-6, min_honest_load=load), frac_bits=0)
        plan = gauss.noise_plan()
        assert not plan.on_grid and plan.sensitivity > 0
        loss = L.job_loss(gauss)
        assert loss.mechanism == "gaussian" and loss.pure_epsilon == 0.0
        # the tight continuous calibration is the analytic Gaussian of the sum: σ_c·√L = σ(ε, δ, Δ₂)
        assert loss.noise_multiplier == pytest.approx(independent_sigma(1.0, 1e-6, 1.0), rel=1e-6)
        assert loss.noise_multiplier == pytest.approx(plan.sigma_client * math.sqrt(load) / plan.sensitivity, rel=1e-12)
    lap = L.job_loss(replace(job("cl", 0.7, 0.0, mechanism="laplace"), frac_bits=0))
    assert lap.mechanism == "laplace" and lap.noise_multiplier == 0.0
    assert lap.pure_epsilon == pytest.approx(0.7, rel=1e-12)  # Δ₁/b with b = Δ₁/ε
    # the paper's dense Laplace splits Lap(b) over n/m − t′ = 100 clients a row: L = 100 honest ones sum
    # to one Lap(b); L = 99 would not, and the ledger charges ε = ∞ (the budget refuses it)
    for load in (100, 99):
        paper = replace(job("cp", 0.7, 0.0, mechanism="laplace", kind="dense", calibration="paper",
                            min_honest_load=load), frac_bits=0)
        plan = paper.noise_plan()
        assert plan.gamma_shape == pytest.approx(1 / 100, rel=1e-12)
        expected = plan.sensitivity / plan.laplace_scale if load == 100 else math.inf
        assert 0 < expected and L.job_loss(paper).pure_epsilon == pytest.approx(expected, rel=1e-12)
    ledger = PrivacyLedger("party-0", Budget(10.0, 1e-6))
    with pytest.raises(BudgetExceeded, match=r"^refusing job 'cp': its \S*laplace noise is not a Laplace at the promised "
                       r"honest load \(L·shape < 1, calibration 'paper'\), so it has no finite ε; this party's ledger "
                       r"has spent ε = 0 \(δ = 1e-06\) over 0 job\(s\)$"):
        ledger.admit(paper)
    assert ledger.losses() == []

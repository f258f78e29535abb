"""The party's privacy ledger: every job the party has accepted, composed, against a budget.

One release is (ε, δ)-DP; two releases over the same data are not.  A job re-created under a new
id with the same spec is a new job the servers release again, and averaging the two releases
turns (1, 1e-6) into ε ≈ 1.455 (at δ = 1e-6).  So each party keeps a persistent ledger of the jobs
it accepted, and refuses — before it sends anything — a job that would take the composed loss past
its budget.

**Keyed by the party, not by the bytes.**  There is ONE ledger per party id, in a fixed per-host
state directory (:func:`default_ledger_dir`: ``$XDG_STATE_HOME/ltm/ledger``, default
``~/.local/state/ltm/ledger``, or an explicit ``--ledger-dir``), never derived from where the data
file is.  Every job the party accepts is charged to it whatever data the job reads: appending a
row, re-sorting, renaming a column, an ulp's change, a copy in another directory — none of these
is a new budget.  Each charge records the fingerprint of the data it read (:func:`source_fingerprint`)
only as a record of what was released.  A party whose data is *genuinely new* — disjoint
individuals, not a copy, subset, re-sort or edit of data already charged — starts a separate
budget with an explicit, logged ``--new-source NAME`` (:meth:`PrivacyLedger.new_source`: a
``source`` record with time and reason), and later jobs on it name it with ``--source NAME``.
Every other job is charged to the party's first source, :data:`DEFAULT_SOURCE`.  A source cannot
be opened twice, and a job whose data fingerprint was already charged to another source is refused
(an exact copy under a new name).

**What a job costs** (:func:`job_loss`, the one place a job's privacy event is derived).  The
servers' gate guarantees every release row an honest load ≥ L (after the tolerated corrupt
clients and parties are subtracted), so the release is

* ``gaussian``: a party's grid plan adds the distributed discrete Gaussian, which is ρ-zCDP
  (:func:`ltm.dp.accounting.job_event`: Kairouz, Liu & Steinke 2021) — recorded as the noise
  multiplier z = 1/√(2ρ) of the continuous Gaussian with the same ρ (for a continuous plan, a
  seeded reproduction's float Gaussian, z = σ_c·√L/Δ₂ itself); the true loss under the gate,
  whatever the calibration claimed;
* ``laplace``: a grid plan's L honest draws in an entry (Pólya pieces, :mod:`ltm.dp.polya`) sum to
  at least one discrete Laplace DLap(t), so an entry is pure ⌈Δ₁⌉/t-DP; a continuous plan adds at least Lap(b) per entry (L honest Γ(shape, b)
  differences with L·shape ≥ 1) — pure ε = Δ₁/b; with L·shape < 1 (the paper's Laplace split as
  printed) the noise is not a Laplace at all and the job has no finite ε: it is refused.

**How jobs compose** (:func:`compose`, the one place charges are composed).  Gaussian jobs compose
in zCDP: their ρ = 1/(2z²) add up (Bun & Steinke 2016) and dp_accounting's RDP accountant turns the
sum into ε at the budget's δ (:func:`ltm.dp.accounting.zcdp_epsilon`; a continuous Gaussian is
exactly ρ-zCDP, so the same rule is sound, if a little pessimistic, for it).  Pure-ε Laplace jobs
are composed by basic composition (their ε add up), and added to the Gaussian part's ε at the
budget's δ (basic composition between the two groups).  The spend is stated as ε at the budget's δ.

**The budget comparison and rounding.**  A job is admitted when the composed ε with it is at most
``B·(1 + ADMISSION_RTOL)`` (:func:`within_budget`; ``ADMISSION_RTOL`` = 1e-6).  A job calibrated
to exactly ε reads at most ε by construction (the calibration bisects on the same accountant), but
a bisection's last bit and a Laplace scale's Δ/(Δ/ε) may round by an ulp either way: without the
tolerance a job whose ε is exactly the remaining budget could be refused.  The RDP conversion is an
upper bound on the true ε, so an admitted composition's true ε is never more than ``B·(1 + 1e-6)``:
that is the stated tolerance (tests/unit/party/test_ledger_file.py checks both directions).

**The file and its integrity.**  ``<dir>/<party>.ledger.json`` holds a list of records — ``source``
(a budget opened: name, time, reason) and ``charge`` (a job: its cost, source, data fingerprint,
time) — each carrying the SHA-256 of the previous record's digest and its own canonical JSON, so a
record edited, removed or reordered breaks the chain.  Every record is validated when read (a known
kind and mechanism; finite, non-negative ε and δ with δ < 1; a finite positive noise parameter);
anything wrong is a one-line :class:`LedgerCorrupt`, never a reset and never a traceback.  It is
written with :func:`ltm.transport.files.write_private` (temp file, fsync, rename, directory fsync; mode
0600 in a 0700 directory) *before* the first share is sent, under an exclusive ``flock`` so that two
party processes cannot both spend the last of a budget.  Beside it ``<party>.ledger.head`` records
the number of records and the last digest: a ledger that is missing while its head (or the party's
upload journals, :func:`ltm.party.journal.party_journals`) shows earlier jobs is refused
(:class:`LedgerMissing`), and one shorter than its head (an old copy put back) is refused too.

**It detects accidents, not tampering.**  The digests are unkeyed and the head sits beside the
ledger, so whoever can write the directory can delete the ledger and its head together (with no
upload journals left: a fresh budget), put back an older ledger *with its own head*, or remove
charges and recompute every digest — each passes.  The chain catches a truncated, hand-edited or
half-restored file and a lost ledger whose head survived; it cannot protect a party's budget from
its own host, which the threat model leaves to the party (docs/architecture.md §8).

**Upgrading.**  A party whose ledger file does not exist yet but which has ledgers of the old
format (``ltm.ledger.v1``, one per data fingerprint, in ``<state dir>/ledger`` or the ledger
directory) starts from ALL their charges, on its default source, whatever data each was for: the
conservative import (:meth:`PrivacyLedger._legacy_records`), written with its next charge.

A job is charged once: a party restarted on the same job (same digest) resumes without a second
charge.  A job that fails after being charged stays charged (shares may have reached servers).
Without ``dp_accounting`` installed the party cannot account, and :class:`AccountantUnavailable`
makes it refuse every job (it never skips accounting).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ltm.errors import LtmError
from ltm.jobspec import JobSpec
from ltm.party.data_source import FINGERPRINT_TAG, PartySource, fingerprint_column_header
from ltm.party.journal import _component, party_journals
from ltm.transport.files import private_dir, shared_dir_problem, write_private

try:  # POSIX advisory locks; without fcntl two processes on one ledger are not serialised
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("ltm.party")

LEDGER_FORMAT = "ltm.ledger.v2"
#: The budget every party starts with; ``--new-source NAME`` opens another (see the module docstring).
DEFAULT_SOURCE = "default"
#: Default lifetime budget of one source.  ε = 4 admits about 12 default (1, 1e-6) Gaussian
#: jobs (they compose sub-linearly in zCDP: two cost 1.45, eight 3.09, twelve 3.86) or 4 pure-ε Laplace jobs at ε = 1;
#: lifetime budgets in the low single digits are what is generally considered a meaningful
#: guarantee.  δ = 1e-6 is the default job δ, so one default job spends exactly its advertised ε,
#: and it stays far below 1/n for the data sizes LTM is meant for.
DEFAULT_BUDGET_EPSILON = 4.0
DEFAULT_BUDGET_DELTA = 1e-6
#: A composition is admitted while its accountant ε ≤ budget·(1 + this) (see the module docstring).
ADMISSION_RTOL = 1e-6
#: The mechanisms a charge may name, and the noise parameter each is recorded by.
MECHANISMS = {"gaussian": "noise_multiplier", "laplace": "pure_epsilon"}
ACCOUNTANT = ("zCDP (ρ add up; dp_accounting's RDP accountant converts the sum) for Gaussian jobs; basic "
              "composition (ε add up) for pure-ε Laplace jobs, added to the Gaussian part's ε; admitted up to "
              f"budget·(1 + {ADMISSION_RTOL:g})")
_GENESIS = hashlib.sha256(LEDGER_FORMAT.encode()).hexdigest()


class BudgetExceeded(LtmError):
    """The job would take the ledger past its budget; nothing was sent."""

    exit_code = 3


class AccountantUnavailable(LtmError):
    """``dp_accounting`` is not installed: the party cannot account and must not upload."""

    exit_code = 3


class LedgerError(LtmError):
    """The ledger cannot be used (unreadable, another party's, a source misused); nothing was sent."""

    exit_code = 7  # never a reset: the party refuses until a person restores or explains the ledger
    prefix = "privacy ledger: "


class LedgerCorrupt(LedgerError):
    """A record of the ledger fails validation or its digest chain is broken."""


class LedgerMissing(LedgerError):
    """The ledger file is gone (or rolled back) while the party's other state shows earlier jobs."""


def check_ledger_dir(directory: str | os.PathLike[str]) -> None:
    """Refuse (:class:`LedgerError`) an existing ledger directory that is not the party's own — a
    shared one such as ``/tmp`` (mode 1777), or a link to one, or another user's: the ledger makes
    its directory 0700, which would lock everyone else out of it (and others could delete the
    ledger).  A directory that does not exist yet is created 0700."""
    shared = shared_dir_problem(directory)
    if shared is not None:
        raise LedgerError(f"refusing the ledger directory: {shared}; give --ledger-dir a directory of this "
                          f"party's own (a new one is created 0700), e.g. a new subdirectory of it")


def default_ledger_dir() -> Path:
    """The per-host ledger directory: ``$XDG_STATE_HOME/ltm/ledger`` (default ``~/.local/state``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ltm" / "ledger"


@dataclass(frozen=True)
class Budget:
    """A source's lifetime budget: the composed loss must stay (ε, δ)-DP."""

    epsilon: float = DEFAULT_BUDGET_EPSILON
    delta: float = DEFAULT_BUDGET_DELTA

    def __post_init__(self) -> None:
        if not self.epsilon > 0:  # inf: no limit (paper reproductions re-running hypothetical jobs)
            raise ValueError(f"budget ε must be a positive number (got {self.epsilon})")
        if not 0 < self.delta < 1:
            raise ValueError(f"budget δ must be in (0, 1) (got {self.delta})")


#: No limit: every job is still charged and its spend reported, none is refused for the budget.  For
#: experiment sweeps only, where each simulated run is a world of its own (ltm/experiments/release_backends.py).
UNLIMITED = Budget(math.inf, DEFAULT_BUDGET_DELTA)


@dataclass(frozen=True)
class JobLoss:
    """What one accepted job costs (see the module docstring).

    ``noise_multiplier``: Gaussian σ/Δ₂ of the release under the gate's guarantee (0 for Laplace);
    ``pure_epsilon``: Laplace Δ₁/b (``inf`` when the job's noise is not a Laplace; 0 for Gaussian).
    ``source`` and ``data_fingerprint`` say which budget paid and what data was released.
    """

    job_id: str
    job_digest: str
    mechanism: str
    noise_multiplier: float
    pure_epsilon: float
    job_epsilon: float
    job_delta: float
    calibration: str
    seeded: bool = False
    charged_at: str = ""
    source: str = DEFAULT_SOURCE
    data_fingerprint: str = ""



def job_loss(spec: JobSpec, *, seeded: bool = False) -> JobLoss:
    """What ``spec`` costs a party: its mechanism and true noise under the gate's guarantee.

    The one place a job's privacy event is derived from its spec (see the module docstring).  A
    party's plan is on the grid: its event is :func:`ltm.dp.accounting.job_event`'s — a ρ-zCDP
    distributed discrete Gaussian, recorded as the noise multiplier z = 1/√(2ρ) of the continuous
    Gaussian with the same ρ, or a discrete Laplace, recorded as its pure ε = ⌈Δ₁⌉/t.  A continuous
    plan (frac_bits = 0: the papers' float mechanisms, seeded reproductions only) is recorded by its
    own σ/Δ₂ or Δ₁/b, which are exact for those mechanisms.
    """
    p = spec.privacy
    if p.zcdp_rho is not None:  # servers and the analyst plan from the job's stated ρ: the party checks it
        problem = _dp_accounting().zcdp_target_problem(p.zcdp_rho, p.epsilon, p.delta)
        if problem is not None:
            raise LedgerError(f"refusing job {spec.job_id!r}: {problem}")
    plan = spec.noise_plan()
    load = max(spec.privacy.min_honest_load, 1)
    if plan.on_grid:
        event = plan.dp_event()
        if plan.mechanism == "gaussian":
            z, pure = 1.0 / math.sqrt(2.0 * event.rho), 0.0
        else:
            z, pure = 0.0, event.sensitivity * event.noise_parameter
    elif plan.mechanism == "gaussian":
        z = plan.sigma_client * math.sqrt(load) / plan.sensitivity
        pure = 0.0
    else:
        z = 0.0
        pure = plan.sensitivity / plan.laplace_scale if load * plan.gamma_shape >= 1 - 1e-9 else math.inf
    return JobLoss(spec.job_id, spec.digest, plan.mechanism, z, pure, spec.privacy.epsilon, spec.privacy.delta,
                   spec.privacy.calibration, seeded)


@dataclass(frozen=True)
class Spend:
    """The composed loss of a set of jobs: (ε, δ)-DP with δ the budget's."""

    epsilon: float
    delta: float
    jobs: int
    seeded_jobs: int = 0

    def to_json(self) -> dict[str, Any]:
        """The spend as JSON (an infinite ε as null)."""
        return {"epsilon": self.epsilon if math.isfinite(self.epsilon) else None, "delta": self.delta,
                "jobs": self.jobs, "seeded_jobs": self.seeded_jobs}

    def __str__(self) -> str:
        return f"ε = {self.epsilon:.4g} (δ = {self.delta:g}) over {self.jobs} job(s)"


def _dp_accounting():
    try:
        from ltm.dp import accounting
        accounting.load_accountant()  # only the submodules it drives; a party without them must refuse
    except ImportError as exc:  # the party refuses rather than skip accounting
        raise AccountantUnavailable(
            "the privacy accountant (the dp-accounting package) is not installed: this party cannot "
            "account for its privacy loss and refuses every job (pip install dp-accounting)") from exc
    return accounting


def gaussian_epsilon(noise_multipliers: Sequence[float], delta: float) -> float:
    """ε at ``delta`` of the composition of Gaussian-type jobs with these noise multipliers z: each
    is ρ = 1/(2z²)-zCDP (exactly so for a continuous Gaussian; by its definition for a discrete
    one), ρ adds up under composition, and dp_accounting's RDP accountant converts the sum."""
    if not noise_multipliers:
        return 0.0
    return _gaussian_epsilon(tuple(sorted(noise_multipliers)), delta)


@functools.lru_cache(maxsize=1024)
def _gaussian_epsilon(noise_multipliers: tuple[float, ...], delta: float) -> float:
    # Cached: a sweep of in-process runs charges the same jobs to fresh ledgers again and again.
    accounting = _dp_accounting()
    rho = math.fsum(0.5 / (z * z) for z in noise_multipliers)
    return float(accounting.zcdp_epsilon(rho, delta))


def compose(losses: Sequence[JobLoss], delta: float) -> Spend:
    """The composed spend of ``losses`` at ``delta`` (see the module docstring for the accountant)."""
    gauss = [l.noise_multiplier for l in losses if l.mechanism == "gaussian"]
    pure = sum(l.pure_epsilon for l in losses)  # 0 for a Gaussian job (checked when read)
    epsilon = gaussian_epsilon(gauss, delta) + pure
    return Spend(epsilon, delta, len(losses), sum(1 for l in losses if l.seeded))


def within_budget(epsilon: float, budget: Budget) -> bool:
    """Whether a composed ε fits ``budget`` (up to the stated tolerance, see the module docstring)."""
    return epsilon <= budget.epsilon * (1.0 + ADMISSION_RTOL)


def source_fingerprint(table: Mapping[str, np.ndarray] | PartySource) -> str:
    """SHA-256 of a party's data (its columns by name, as float64): recorded with each charge.

    A streamed :class:`~ltm.party.data_source.PartySource` is hashed chunk by chunk
    (:meth:`PartySource.scan`: the same value for the same columns, in O(chunk) memory), except a
    generated synthetic source, whose fingerprint is the hash of its descriptor (the data are a
    function of it; docs: party/data_source.py).  It does not key the ledger (the party id does).
    """
    if isinstance(table, PartySource):
        return table.fingerprint()
    h = hashlib.sha256(FINGERPRINT_TAG)
    for name in sorted(table):
        values = np.ascontiguousarray(table[name], dtype="<f8")  # float64, little-endian: the scan's bytes
        h.update(fingerprint_column_header(name, values.size) + values.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Admission:
    """A job the ledger accepted: the spend of its source before and after it (``charged`` False
    for a job already in the ledger, which costs nothing more)."""

    job_id: str
    charged: bool
    before: Spend
    after: Spend
    budget: Budget
    path: str
    source: str = DEFAULT_SOURCE

    def to_json(self) -> dict[str, Any]:
        """The admission as JSON: the job, whether it was charged, the spend before and after, the
        budget, the accountant, the ledger file and the source.
        """
        budget = {"epsilon": self.budget.epsilon if math.isfinite(self.budget.epsilon) else None,
                  "delta": self.budget.delta}
        return {"job_id": self.job_id, "charged": self.charged, "before": self.before.to_json(),
                "after": self.after.to_json(), "budget": budget, "accountant": ACCOUNTANT,
                "ledger": self.path or "(in memory)", "source": self.source}


def describe_admission(entry: Mapping[str, Any]) -> str:
    """One line for an :meth:`Admission.to_json` entry (party summaries, simulate and demo output)."""
    eps = lambda v: "∞" if v is None else f"{v:.4g}"  # noqa: E731
    budget = entry["budget"]
    return (f"spent ε {eps(entry['before']['epsilon'])} → {eps(entry['after']['epsilon'])} of budget "
            f"ε {eps(budget['epsilon'])} at δ {budget['delta']:g}"
            + ("" if entry.get("charged", True) else " (job already charged)"))


# ---------------------------------------------------------------------------- records
def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def _digest(prev: str, body: Mapping[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return hashlib.sha256(f"{prev}\n{canonical}".encode()).hexdigest()


def _chain(bodies: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``bodies`` as chained records: each with ``prev`` (the previous digest) and its ``digest``."""
    out: list[dict[str, Any]] = []
    prev = _GENESIS
    for body in bodies:
        body = {k: v for k, v in body.items() if k not in ("prev", "digest")}
        digest = _digest(prev, body)
        out.append({**body, "prev": prev, "digest": digest})
        prev = digest
    return out


def _real(record: Mapping[str, Any], name: str) -> float:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} is {value!r}, not a finite number")
    return float(value)


def _text(record: Mapping[str, Any], name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} is {value!r}, not a non-empty string")
    return value


def _charge_of(record: Mapping[str, Any]) -> JobLoss:
    """A ``charge`` record as a :class:`JobLoss`, validated (``ValueError`` says what is wrong)."""
    mechanism = record.get("mechanism")
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism {mechanism!r} is not one of {sorted(MECHANISMS)}")
    epsilon, delta = _real(record, "job_epsilon"), _real(record, "job_delta")
    if epsilon < 0 or delta < 0 or delta >= 1:
        raise ValueError(f"job (ε, δ) = ({epsilon!r}, {delta!r}) is not ε ≥ 0, 0 ≤ δ < 1")
    noise = _real(record, MECHANISMS[mechanism])
    if noise <= 0:
        raise ValueError(f"{MECHANISMS[mechanism]} is {noise!r}, not positive")
    other = "pure_epsilon" if mechanism == "gaussian" else "noise_multiplier"
    if _real(record, other) != 0:
        raise ValueError(f"a {mechanism} charge has {other} {record[other]!r}, not 0")
    if not isinstance(record.get("seeded"), bool):
        raise ValueError(f"seeded is {record.get('seeded')!r}, not a bool")
    if not isinstance(record.get("data_fingerprint"), str):
        raise ValueError(f"data_fingerprint is {record.get('data_fingerprint')!r}, not a string")
    return JobLoss(_text(record, "job_id"), _text(record, "job_digest"), mechanism,
                   _real(record, "noise_multiplier"), _real(record, "pure_epsilon"), epsilon, delta,
                   _text(record, "calibration"), record["seeded"], _text(record, "at"), _text(record, "source"),
                   record["data_fingerprint"])


@dataclass
class _State:
    """A ledger's validated records: the charges and the sources with when and why each was opened."""

    records: list[dict[str, Any]] = field(default_factory=list)
    charges: list[JobLoss] = field(default_factory=list)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)

    def of(self, source: str) -> list[JobLoss]:
        return [c for c in self.charges if c.source == source]


def _validate(records: Any, where: str) -> _State:
    """Check every record and the digest chain; one-line :class:`LedgerCorrupt` on the first fault."""
    if not isinstance(records, list):
        raise LedgerCorrupt(f"privacy ledger {where} is malformed: its records are not a list; refusing to "
                            f"guess what this party has spent (restore it from a backup)")
    state = _State()
    prev = _GENESIS
    for i, record in enumerate(records):
        try:
            if not isinstance(record, dict):
                raise ValueError("not an object")
            kind = record.get("kind")
            if kind == "source":
                name = _text(record, "source")
                if name in state.sources:
                    raise ValueError(f"source {name!r} is opened twice")
                state.sources[name] = {"at": _text(record, "at"), "reason": _text(record, "reason")}
            elif kind == "charge":
                charge = _charge_of(record)
                if charge.source not in state.sources:
                    raise ValueError(f"it charges source {charge.source!r}, which was never opened")
                state.charges.append(charge)
            else:
                raise ValueError(f"kind {kind!r} is neither 'source' nor 'charge'")
            body = {k: v for k, v in record.items() if k not in ("prev", "digest")}
            if record.get("prev") != prev or record.get("digest") != _digest(prev, body):
                raise ValueError("its digest does not chain (edited, removed or reordered records)")
        except (ValueError, TypeError) as exc:
            raise LedgerCorrupt(f"privacy ledger {where} is corrupt at record {i}: {exc}; refusing to guess what "
                                f"this party has spent (restore it from a backup)") from None
        prev = record["digest"]
        state.records.append(record)
    return state


class PrivacyLedger:
    """One party's ledger (see the module docstring).  ``path`` None keeps it in memory
    (simulations: one ledger per simulated party and run)."""

    def __init__(self, party_id: str, budget: Budget | None = None, path: Path | None = None,
                 evidence_dirs: Sequence[Path] = ()) -> None:
        self.party_id = party_id
        self.budget = budget or Budget()
        self.path = path
        self.evidence_dirs = tuple(Path(d) for d in evidence_dirs)
        self._memory: list[dict[str, Any]] = []

    @classmethod
    def open(cls, directory: str | os.PathLike[str] | None, party_id: str, budget: Budget | None = None, *,
             journal_dir: str | os.PathLike[str] | None = None) -> "PrivacyLedger":
        """The persistent ledger of ``party_id`` under ``directory`` (default :func:`default_ledger_dir`;
        created 0700).  ``journal_dir``: the party's upload-journal directory, whose journals count
        as evidence of earlier jobs when the ledger file is missing."""
        d = Path(directory) if directory is not None else default_ledger_dir()
        check_ledger_dir(d)
        try:
            private_dir(d)
        except OSError as exc:
            raise LedgerError(f"cannot create the ledger directory {str(d)!r}: {exc.strerror or exc}; give "
                              f"--ledger-dir a writable directory on persistent storage") from None
        name = _component(party_id)
        ledger = cls(party_id, budget, d / f"{name}.ledger.json", [Path(journal_dir)] if journal_dir else [])
        ledger._read()  # fail now on a missing, unreadable or corrupt ledger
        return ledger

    @classmethod
    def in_memory(cls, party_id: str, budget: Budget | None = None) -> "PrivacyLedger":
        """A ledger that is never written (simulations and tests: nothing survives the process)."""
        return cls(party_id, budget)

    # ------------------------------------------------------------------ state
    @property
    def head_path(self) -> Path | None:
        """The ledger's head marker: record count and last digest (see the module docstring)."""
        return None if self.path is None else self.path.with_name(self.path.name[:-len(".json")] + ".head")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.path is None or fcntl is None:
            yield
            return
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _where(self) -> str:
        return repr(str(self.path)) if self.path is not None else f"(in memory, {self.party_id})"

    def _read(self) -> _State:
        if self.path is None:
            return _validate(list(self._memory), self._where())
        head = self._read_head()
        try:
            obj = json.loads(self.path.read_text())
        except FileNotFoundError:
            if head is None:
                legacy = self._legacy_records()
                if legacy:
                    return _validate(_chain(legacy), self._where())
            self._refuse_if_forgotten(head)
            return _State()
        except (OSError, ValueError) as exc:
            raise LedgerCorrupt(f"privacy ledger {self._where()} is unreadable ({exc}); refusing to guess what "
                                f"this party has spent (restore it from a backup)") from None
        if not isinstance(obj, dict) or obj.get("format") != LEDGER_FORMAT or obj.get("party_id") != self.party_id:
            raise LedgerError(f"{self._where()} is not a {LEDGER_FORMAT} ledger of party {self.party_id!r}")
        state = _validate(obj.get("records"), self._where())
        if head is not None:
            count, digest = head
            if len(state.records) < count or state.records[count - 1]["digest"] != digest:
                raise LedgerMissing(f"privacy ledger {self._where()} has {len(state.records)} record(s) but its head "
                                    f"{str(self.head_path)!r} records {count}: an older or another copy was put "
                                    f"back; refusing to forget spent budget (restore the latest ledger)")
        return state

    def _read_head(self) -> tuple[int, str] | None:
        try:
            obj = json.loads(self.head_path.read_text())
            count, digest = obj["records"], obj["digest"]
            if isinstance(count, bool) or not isinstance(count, int) or count < 1 or not isinstance(digest, str):
                raise ValueError("bad fields")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LedgerCorrupt(f"the ledger head {str(self.head_path)!r} is unreadable ({exc}); refusing to guess "
                                f"what this party has spent") from None
        return count, digest

    def _legacy_records(self) -> list[dict[str, Any]]:
        """The charges of this party's ledgers in the old format (``ltm.ledger.v1``: one file per data
        fingerprint, ``<party>-<fingerprint[:16]>.json``, in the ledger directory or in
        ``<state dir>/ledger`` beside the upload journals), ALL as charges of its default source —
        whatever data each was for: the conservative import, written with the next charge."""
        files = []
        for d in [self.path.parent] + [e / "ledger" for e in self.evidence_dirs]:
            files += sorted(d.glob(f"{_v1_name(self.party_id)}-*.json"))  # none where d is absent or a file
        charges: list[dict[str, Any]] = []
        imported = []
        for f in files:
            try:
                obj = json.loads(f.read_text())
            except (OSError, ValueError) as exc:
                raise LedgerCorrupt(f"the old-format ledger {str(f)!r} is unreadable ({exc}); refusing to guess what "
                                    f"this party has spent") from None
            if not isinstance(obj, dict) or obj.get("format") != _V1_FORMAT or obj.get("party_id") != self.party_id:
                continue  # another party's, or not a ledger
            for i, c in enumerate(obj.get("charges") if isinstance(obj.get("charges"), list) else [None]):
                fields = c if isinstance(c, dict) else {}
                record = {"kind": "charge", **{k: fields.get(k) for k in _V1_FIELDS}, "at": fields.get("charged_at"),
                          "source": DEFAULT_SOURCE, "data_fingerprint": obj.get("source")}
                try:
                    _charge_of(record)
                except ValueError as exc:
                    raise LedgerCorrupt(f"the old-format ledger {str(f)!r} is corrupt at charge {i}: {exc}; "
                                        f"refusing to guess what this party has spent") from None
                charges.append(record)
            imported.append(str(f))
        if not imported:
            return []
        opened = self._source_record(DEFAULT_SOURCE, f"imported from the old-format ledger(s) {', '.join(imported)}: "
                                                     f"every charge, whatever data it was for")
        return [opened, *sorted(charges, key=lambda r: r["at"])]

    def _refuse_if_forgotten(self, head: tuple[int, str] | None) -> None:
        """No ledger file: refuse if anything shows this party ran jobs before (never a silent reset)."""
        if head is not None:
            raise LedgerMissing(f"privacy ledger {self._where()} is missing but its head {str(self.head_path)!r} "
                                f"records {head[0]} record(s): refusing to start a fresh budget (restore the "
                                f"ledger from a backup)")
        for d in self.evidence_dirs:
            journals = party_journals(d, self.party_id)
            if journals:
                raise LedgerMissing(f"privacy ledger {self._where()} is missing but {len(journals)} upload "
                                    f"journal(s) of {self.party_id} in {str(d)!r} show earlier jobs: refusing to "
                                    f"start a fresh budget (restore the ledger, or give the --ledger-dir it is in)")

    def _save(self, records: list[dict[str, Any]]) -> None:
        if self.path is None:
            self._memory = list(records)
            return
        write_private(self.path, json.dumps({"format": LEDGER_FORMAT, "party_id": self.party_id,
                                             "accountant": ACCOUNTANT, "records": records}, indent=1))
        write_private(self.head_path, json.dumps({"party_id": self.party_id, "records": len(records),
                                                  "digest": records[-1]["digest"]}))

    def losses(self, source: str | None = None) -> list[JobLoss]:
        """Every job charged so far (to ``source``, or to any source), oldest first."""
        state = self._read()
        return list(state.charges) if source is None else state.of(source)

    def sources(self) -> dict[str, dict[str, Any]]:
        """Every source opened: name → when and why (the ledger's log)."""
        return dict(self._read().sources)

    def spend(self, source: str = DEFAULT_SOURCE) -> Spend:
        """The composed loss of every job charged to ``source`` so far, at the budget's δ."""
        return compose(self._read().of(source), self.budget.delta)

    # ------------------------------------------------------------------ the check
    def admit(self, spec: JobSpec, *, seeded: bool = False, source: str = DEFAULT_SOURCE,
              data_fingerprint: str = "", new_source_reason: str | None = None) -> Admission:
        """Charge ``spec`` to ``source`` if its budget allows, durably, before anything is sent; else
        raise :class:`BudgetExceeded` (the message states the spend).  Idempotent per job digest.

        ``data_fingerprint``: what the job reads (:func:`source_fingerprint`), recorded with the
        charge; data already charged to another source is refused.  ``new_source_reason``: open
        ``source`` as a new budget first (``--new-source``; refused if it exists), logged with the
        time and the reason, in the same durable write as the charge.
        """
        _dp_accounting()  # no accountant: refuse before anything else
        if new_source_reason is not None and not (source.strip() and new_source_reason.strip()):
            raise LedgerError("--new-source needs a source name and a reason (--new-source-reason): why is "
                              "this data new, disjoint individuals?")
        with self._locked():
            state = self._read()
            where = str(self.path) if self.path else ""
            done = [c for c in state.charges if c.job_digest == spec.digest]
            if done:  # a restarted party: the job costs nothing more, on the source it was charged to
                paid = done[0].source
                spent = compose(state.of(paid), self.budget.delta)
                return Admission(spec.job_id, False, spent, spent, self.budget, where, paid)
            records = list(state.records) or [
                self._source_record(DEFAULT_SOURCE, f"the first job of party {self.party_id}")]
            known = {r["source"] for r in records if r["kind"] == "source"}
            if new_source_reason is not None:
                if source in known:
                    opened = next(r for r in records if r["kind"] == "source" and r["source"] == source)
                    raise LedgerError(f"source {source!r} of {self.party_id} already exists (opened {opened['at']}: "
                                      f"{opened['reason']}); charge it with --source {source}, or name a new source")
                records.append(self._source_record(source, new_source_reason))
            elif source not in known:
                raise LedgerError(f"{self.party_id} has no data source {source!r} (sources: "
                                  f"{', '.join(sorted(known))}); open it with --new-source {source} only if this "
                                  f"is genuinely new data")
            copied = [c for c in state.charges if data_fingerprint and c.data_fingerprint == data_fingerprint
                      and c.source != source]
            if copied:
                raise LedgerError(f"refusing job {spec.job_id!r}: this exact data was already charged to source "
                                  f"{copied[0].source!r} (job {copied[0].job_id!r}); the same data cannot have "
                                  f"a second budget — run it with --source {copied[0].source}")
            losses = state.of(source)
            before = compose(losses, self.budget.delta)
            loss = job_loss(spec, seeded=seeded)
            if not math.isfinite(loss.pure_epsilon):
                raise BudgetExceeded(
                    f"refusing job {spec.job_id!r}: its {loss.mechanism} noise is not a Laplace at the promised "
                    f"honest load (L·shape < 1, calibration {loss.calibration!r}), so it has no finite ε; "
                    f"this party's ledger has spent {before}")
            after = compose(losses + [loss], self.budget.delta)
            if not within_budget(after.epsilon, self.budget):
                raise BudgetExceeded(
                    f"refusing job {spec.job_id!r} (digest {spec.digest[:12]}…): privacy budget exceeded — this "
                    f"party's ledger (source {source!r}) has spent {before}; with this job (ε = "
                    f"{spec.privacy.epsilon:g}, δ = {spec.privacy.delta:g}) it would reach ε = {after.epsilon:.4g} "
                    f"> the budget ε = {self.budget.epsilon:g} at δ = {self.budget.delta:g} ({ACCOUNTANT}, this "
                    f"party's --budget-epsilon and --budget-delta); nothing was sent")
            charge = {"kind": "charge", **asdict(loss), "at": _now(), "source": source,
                      "data_fingerprint": data_fingerprint}
            del charge["charged_at"]
            self._save(_chain(records + [charge]))
        if new_source_reason is not None:
            log.warning("new data source opened: a separate privacy budget",
                        extra={"party": self.party_id, "source": source, "reason": new_source_reason,
                               "ledger": where or "(in memory)"})
        return Admission(spec.job_id, True, before, after, self.budget, where, source)

    @staticmethod
    def _source_record(name: str, reason: str) -> dict[str, Any]:
        return {"kind": "source", "source": name, "at": _now(), "reason": reason}


_V1_FORMAT = "ltm.ledger.v1"
#: The fields of an old-format charge the import reads (``charged_at`` becomes ``at``); others are dropped.
_V1_FIELDS = ("job_id", "job_digest", "mechanism", "noise_multiplier", "pure_epsilon", "job_epsilon", "job_delta",
              "calibration", "seeded")


def _v1_name(party_id: str) -> str:
    """The old format's file-name rendering of a party id."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in party_id)

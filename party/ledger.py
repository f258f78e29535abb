"""The party's privacy ledger: every job it has accepted for a data source, composed, against a budget.

One release is (ε, δ)-DP; two releases over the same data are not.  A job re-created under a new
id with the same spec is a new job the servers release again, and averaging the two releases
turns (1, 1e-6) into ε ≈ 1.455 (at δ = 1e-6).  So each party keeps, per data source, a persistent
ledger of the jobs it accepted, and refuses — before it sends anything — a job that would take the
composed loss past its budget.

**What a job costs.**  The servers' gate guarantees every release row an honest load ≥ L (after
the tolerated corrupt clients and parties are subtracted), so the release is

* ``gaussian``: the Gaussian mechanism with noise σ = σ_c·√L per entry and ℓ2 sensitivity Δ₂ —
  recorded as its noise multiplier z = σ/Δ₂ (the true one, whatever the calibration claimed);
* ``laplace``: at least Lap(b) per entry (L honest Γ(shape, b) differences with L·shape ≥ 1) and
  ℓ1 sensitivity Δ₁ — pure ε = Δ₁/b; with L·shape < 1 (the paper's Laplace split as printed) the
  noise is not a Laplace at all and the job has no finite ε: it is refused.

**How jobs compose (the accountant).**  Gaussian jobs are composed with the privacy-loss-
distribution accountant of Google's ``dp_accounting`` (:class:`dp_accounting.pld.PLDAccountant`,
pessimistic discretisation 1e-4: its ε is an upper bound, within ~1e-3 of the exact composition of
Gaussians).  Pure-ε Laplace jobs are composed by basic composition (their ε add up), and added to
the Gaussian part's ε at the budget's δ (basic composition between the two groups): nothing
tighter is used where its correctness would need an argument the accountant does not make.  The
spend is stated as ε at the budget's δ.

**The data source.**  A ledger is keyed by the party id and a fingerprint of the party's data (its
numeric columns, :func:`source_fingerprint`): the same data under the same id is the same source
whatever the job.  Changed data is a new source with a fresh ledger — the operator must keep one
ledger directory per party and not edit data to escape it (README, "Privacy").

**Durability.**  The ledger file (``<dir>/<party>-<fingerprint[:16]>.json``) is written with
:func:`transport.files.write_private` (temp file, fsync, rename, directory fsync; mode 0600 in a
0700 directory) *before* the first share is sent, under an exclusive ``flock`` so that two party
processes on the same source cannot both spend the last of a budget.  A job is charged once: a
party restarted on the same job (same digest) resumes without a second charge.  A job that fails
after being charged stays charged (shares may have reached servers).

Without ``dp_accounting`` installed the party cannot account, and :class:`AccountantUnavailable`
makes it refuse every job (it never skips accounting).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ltm.jobspec import JobSpec
from party.data_source import FINGERPRINT_TAG, PartySource, fingerprint_column_header
from transport.files import private_dir, write_private

try:  # POSIX advisory locks; without fcntl two processes on one ledger are not serialised
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

LEDGER_FORMAT = "ltm.ledger.v1"
#: Default lifetime budget of one data source.  ε = 4 admits about 12 default (1, 1e-6) Gaussian
#: jobs (they compose sub-linearly: two cost 1.45, eight 3.11) or 4 pure-ε Laplace jobs at ε = 1;
#: lifetime budgets in the low single digits are what is generally considered a meaningful
#: guarantee.  δ = 1e-6 is the default job δ, so one default job spends exactly its advertised ε,
#: and it stays far below 1/n for the data sizes LTM is meant for.
DEFAULT_BUDGET_EPSILON = 4.0
DEFAULT_BUDGET_DELTA = 1e-6
#: The PLD accountant's value discretisation (dp_accounting's default): pessimistic, so ε is an
#: upper bound.
PLD_DISCRETIZATION = 1e-4
ACCOUNTANT = (f"PLD (dp_accounting.pld.PLDAccountant, pessimistic discretisation {PLD_DISCRETIZATION:g}) "
              f"for Gaussian jobs; basic composition (ε add up) for pure-ε Laplace jobs, added to the "
              f"Gaussian part's ε")


class BudgetExceeded(Exception):
    """The job would take the ledger past its budget; nothing was sent."""


class AccountantUnavailable(Exception):
    """``dp_accounting`` is not installed: the party cannot account and must not upload."""


class LedgerError(Exception):
    """The ledger file cannot be used (unreadable, another source's, malformed)."""


@dataclass(frozen=True)
class Budget:
    """A data source's lifetime budget: the composed loss must stay (ε, δ)-DP."""

    epsilon: float = DEFAULT_BUDGET_EPSILON
    delta: float = DEFAULT_BUDGET_DELTA

    def __post_init__(self) -> None:
        if not self.epsilon > 0:  # inf: no limit (paper reproductions re-running hypothetical jobs)
            raise ValueError(f"budget ε must be a positive number (got {self.epsilon})")
        if not 0 < self.delta < 1:
            raise ValueError(f"budget δ must be in (0, 1) (got {self.delta})")


#: No limit: every job is still charged and its spend reported, none is refused for the budget.  For
#: experiment sweeps only, where each simulated run is a world of its own (experiments/transport.py).
UNLIMITED = Budget(math.inf, DEFAULT_BUDGET_DELTA)


@dataclass(frozen=True)
class JobLoss:
    """What one accepted job costs (see the module docstring).

    ``noise_multiplier``: Gaussian σ/Δ₂ of the release under the gate's guarantee (0 for Laplace);
    ``pure_epsilon``: Laplace Δ₁/b (``inf`` when the job's noise is not a Laplace; 0 for Gaussian).
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

    @staticmethod
    def of(spec: JobSpec, *, seeded: bool = False) -> "JobLoss":
        plan = spec.noise_plan()
        load = max(spec.privacy.min_honest_load, 1)
        if plan.mechanism == "gaussian":
            z = plan.sigma_client * math.sqrt(load) / plan.sensitivity
            pure = 0.0
        else:
            z = 0.0
            pure = plan.sensitivity / plan.laplace_scale if load * plan.gamma_shape >= 1 - 1e-9 else math.inf
        return JobLoss(spec.job_id, spec.digest, plan.mechanism, z, pure, spec.privacy.epsilon, spec.privacy.delta,
                       spec.privacy.calibration, seeded)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["pure_epsilon"] = None if math.isinf(self.pure_epsilon) else self.pure_epsilon
        return out

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> "JobLoss":
        fields = dict(obj)
        if fields.get("pure_epsilon") is None:
            fields["pure_epsilon"] = math.inf
        return JobLoss(**fields)


@dataclass(frozen=True)
class Spend:
    """The composed loss of a set of jobs: (ε, δ)-DP with δ the budget's."""

    epsilon: float
    delta: float
    jobs: int
    seeded_jobs: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon if math.isfinite(self.epsilon) else None, "delta": self.delta,
                "jobs": self.jobs, "seeded_jobs": self.seeded_jobs}

    def __str__(self) -> str:
        return f"ε = {self.epsilon:.4g} (δ = {self.delta:g}) over {self.jobs} job(s)"


def _dp_accounting():
    try:
        import dp_accounting
        from dp_accounting.pld import PLDAccountant
    except ImportError as exc:  # the party refuses rather than skip accounting
        raise AccountantUnavailable(
            "the privacy accountant (the dp-accounting package) is not installed: this party cannot "
            "account for its privacy loss and refuses every job (pip install dp-accounting)") from exc
    return dp_accounting, PLDAccountant


def gaussian_epsilon(noise_multipliers: Sequence[float], delta: float) -> float:
    """ε at ``delta`` of the composition of Gaussian mechanisms with these σ/Δ (PLD accountant)."""
    if not noise_multipliers:
        return 0.0
    return _gaussian_epsilon(tuple(sorted(noise_multipliers)), delta)


@functools.lru_cache(maxsize=1024)
def _gaussian_epsilon(noise_multipliers: tuple[float, ...], delta: float) -> float:
    # Cached: a sweep of in-process runs charges the same jobs to fresh ledgers again and again.
    dp_accounting, PLDAccountant = _dp_accounting()
    # The loss grid spans about 1/z² (z = σ/Δ), so a near-noiseless job (ε = 10⁴) would need ~10⁸
    # points and gigabytes; widening the interval as 1/z_min² keeps ~the same number of points.  The
    # discretisation is pessimistic, so a coarser grid only ever overstates ε, never understates it.
    interval = PLD_DISCRETIZATION * max(1.0, 1.0 / min(noise_multipliers) ** 2)
    accountant = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                               value_discretization_interval=interval)
    counts: dict[float, int] = {}
    for z in noise_multipliers:
        counts[z] = counts.get(z, 0) + 1
    for z, count in sorted(counts.items()):
        # σ/Δ normalised to sensitivity 1: the Gaussian's loss distribution is symmetric, so the
        # add/remove relation at sensitivity 1 is exactly a shift by Δ, replace-one included (Δ₂ is
        # the replace-one sensitivity of the release).
        accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), count))
    return float(accountant.get_epsilon(delta))


def compose(losses: Sequence[JobLoss], delta: float) -> Spend:
    """The composed spend of ``losses`` at ``delta`` (see the module docstring for the accountant)."""
    gauss = [l.noise_multiplier for l in losses if l.mechanism == "gaussian"]
    pure = sum(l.pure_epsilon for l in losses if l.mechanism != "gaussian")
    epsilon = gaussian_epsilon(gauss, delta) + pure
    return Spend(epsilon, delta, len(losses), sum(1 for l in losses if l.seeded))


def source_fingerprint(table: Mapping[str, np.ndarray] | PartySource) -> str:
    """SHA-256 of a party's data (its columns by name, as float64): the key of its ledger.

    A streamed :class:`~party.data_source.PartySource` is hashed chunk by chunk
    (:meth:`PartySource.scan`: the same value for the same columns, in O(chunk) memory), except a
    generated synthetic source, whose fingerprint is the hash of its descriptor (the data are a
    function of it; docs: party/data_source.py).
    """
    if isinstance(table, PartySource):
        return table.fingerprint()
    h = hashlib.sha256(FINGERPRINT_TAG)
    for name in sorted(table):
        values = np.ascontiguousarray(np.asarray(table[name], dtype=np.float64), dtype="<f8")
        h.update(fingerprint_column_header(name, values.size) + values.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Admission:
    """A job the ledger accepted: the spend before and after it (``charged`` False for a job
    already in the ledger, which costs nothing more)."""

    job_id: str
    charged: bool
    before: Spend
    after: Spend
    budget: Budget
    path: str

    def to_json(self) -> dict[str, Any]:
        budget = {"epsilon": self.budget.epsilon if math.isfinite(self.budget.epsilon) else None,
                  "delta": self.budget.delta}
        return {"job_id": self.job_id, "charged": self.charged, "before": self.before.to_json(),
                "after": self.after.to_json(), "budget": budget, "accountant": ACCOUNTANT,
                "ledger": self.path or "(in memory)"}


def describe_admission(entry: Mapping[str, Any]) -> str:
    """One line for an :meth:`Admission.to_json` entry (party summaries, simulate and demo output)."""
    eps = lambda v: "∞" if v is None else f"{v:.4g}"  # noqa: E731
    budget = entry["budget"]
    return (f"spent ε {eps(entry['before']['epsilon'])} → {eps(entry['after']['epsilon'])} of budget "
            f"ε {eps(budget['epsilon'])} at δ {budget['delta']:g}"
            + ("" if entry.get("charged", True) else " (job already charged)"))


class PrivacyLedger:
    """One data source's ledger (see the module docstring).  ``path`` None keeps it in memory
    (simulations: one ledger per simulated party and run)."""

    def __init__(self, party_id: str, source: str, budget: Budget | None = None, path: Path | None = None) -> None:
        self.party_id = party_id
        self.source = source
        self.budget = budget or Budget()
        self.path = path
        self._memory: list[JobLoss] = []

    @classmethod
    def open(cls, directory: str | os.PathLike[str], party_id: str, source: str,
             budget: Budget | None = None) -> "PrivacyLedger":
        """The persistent ledger of (party, source) under ``directory`` (created 0700)."""
        private_dir(directory)
        ledger = cls(party_id, source, budget, Path(directory) / f"{_safe(party_id)}-{source[:16]}.json")
        ledger.losses()  # fail now on an unreadable file
        return ledger

    @classmethod
    def in_memory(cls, party_id: str, table: Mapping[str, np.ndarray], budget: Budget | None = None) -> "PrivacyLedger":
        return cls(party_id, source_fingerprint(table), budget)

    # ------------------------------------------------------------------ state
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.path is None or fcntl is None:
            yield
            return
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def losses(self) -> list[JobLoss]:
        """Every job charged so far, oldest first."""
        if self.path is None:
            return list(self._memory)
        try:
            obj = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise LedgerError(f"privacy ledger {str(self.path)!r} is unreadable ({exc}); refusing to guess "
                              f"what this data source has spent") from exc
        if obj.get("format") != LEDGER_FORMAT or obj.get("party_id") != self.party_id or \
                obj.get("source") != self.source:
            raise LedgerError(f"{str(self.path)!r} is not the ledger of {self.party_id} on source "
                              f"{self.source[:16]}…")
        try:
            return [JobLoss.from_json(c) for c in obj["charges"]]
        except (KeyError, TypeError) as exc:
            raise LedgerError(f"privacy ledger {str(self.path)!r} is malformed: {exc}") from exc

    def _save(self, losses: list[JobLoss]) -> None:
        if self.path is None:
            self._memory = list(losses)
            return
        write_private(self.path, json.dumps({"format": LEDGER_FORMAT, "party_id": self.party_id,
                                             "source": self.source, "accountant": ACCOUNTANT,
                                             "charges": [l.to_json() for l in losses]}, indent=1))

    def spend(self) -> Spend:
        """The composed loss of every job charged so far, at the budget's δ."""
        return compose(self.losses(), self.budget.delta)

    # ------------------------------------------------------------------ the check
    def admit(self, spec: JobSpec, *, seeded: bool = False) -> Admission:
        """Charge ``spec`` if the budget allows, durably, before anything is sent; else raise
        :class:`BudgetExceeded` (the message states the spend).  Idempotent per job digest."""
        _dp_accounting()  # no accountant: refuse before anything else
        with self._locked():
            losses = self.losses()
            before = compose(losses, self.budget.delta)
            where = str(self.path) if self.path else ""
            if any(l.job_digest == spec.digest for l in losses):
                return Admission(spec.job_id, False, before, before, self.budget, where)
            loss = JobLoss.of(spec, seeded=seeded)
            if not math.isfinite(loss.pure_epsilon) and loss.mechanism != "gaussian":
                raise BudgetExceeded(
                    f"refusing job {spec.job_id!r}: its {loss.mechanism} noise is not a Laplace at the promised "
                    f"honest load (L·shape < 1, calibration {loss.calibration!r}), so it has no finite ε; "
                    f"this source's ledger has spent {before}")
            after = compose(losses + [loss], self.budget.delta)
            if not after.epsilon <= self.budget.epsilon:
                raise BudgetExceeded(
                    f"refusing job {spec.job_id!r} (digest {spec.digest[:12]}…): privacy budget exceeded — this "
                    f"data source's ledger has spent {before}; with this job (ε = {spec.privacy.epsilon:g}, "
                    f"δ = {spec.privacy.delta:g}) it would reach ε = {after.epsilon:.4g} > the budget "
                    f"ε = {self.budget.epsilon:g} at δ = {self.budget.delta:g} ({ACCOUNTANT}); nothing was sent")
            stamped = JobLoss(**{**asdict(loss), "charged_at": _dt.datetime.now(_dt.timezone.utc).isoformat()})
            self._save(losses + [stamped])
            return Admission(spec.job_id, True, before, after, self.budget, where)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)

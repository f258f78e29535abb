"""The privacy of one release in grid units, and its dp-accounting event (docs/architecture.md, "Accounting").

**Gaussian (distributed discrete Gaussian).**  Every release entry holds the sum of at least L
honest per-client draws N_Z(0, σ_c²) (σ_c in grid steps; more honest draws are post-processing).
Kairouz, Liu & Steinke 2021 (*The Distributed Discrete Gaussian Mechanism for Federated Learning
with Secure Aggregation*, Theorem 1 via their Proposition 14) bound such a sum, for an integer
input shift of ℓ2 norm ≤ Δ₂ and ℓ1 norm ≤ Δ₁ (grid steps), as ½ε_c²-concentrated DP with

    ε_c = Δ₂/(√L·σ_c) + τ·Δ₁,    τ = 10·Σ_{k=1}^{L−1} exp(−2π²σ_c²·k/(k+1)),

i.e. ρ-zCDP with ρ = ε_c²/2 (Bun & Steinke 2016).  ``dp_accounting``'s RDP accountant turns ρ into
(ε, δ) (:class:`dp_accounting.ZCDpEvent`, Canonne, Kamath & Steinke 2020's conversion), and the
job's event *is* that ``ZCDpEvent`` (:func:`job_event`).  Calibration (``tight``) inverts it: the
largest ρ* whose ε at δ is the job's ε (a bisection on the accountant's own answer), then the
smallest σ_c with ε_c ≤ √(2ρ*).  For σ_c of a few grid steps τ is below 1e-30 and ε_c is the
continuous Gaussian's Δ₂/(√L·σ_c); below ~1.5 steps τ dominates and forces σ_c up.

**Laplace (discrete Laplace).**  Every draw is a whole DLap(t), P(y) ∝ exp(−|y|/t): one honest draw
in an entry already makes it (Δ₁/t)-DP for an integer shift of ℓ1 norm ≤ Δ₁ (|y| − |y − μ| ≤ |μ|),
and adding further independent draws is post-processing.  t = ⌈Δ₁⌉/ε; the event is
``DiscreteLaplaceDpEvent(1/t, ⌈Δ₁⌉)``.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # dp_accounting costs 0.4-1.4 s to import: only the functions that use it load it (load_accountant())
    from dp_accounting import dp_event

_LOAD_LOCK = threading.Lock()


def load_accountant():
    """``(RdpAccountant, dp_event)`` from dp_accounting, importing only what the zCDP conversion needs.

    The package's ``__init__`` imports every accountant it has (the PLD one with scipy.signal and
    scipy.stats: ~1.4 s of CPU); this module needs two submodules (~0.4 s, scipy.special).  When
    nothing has imported the package yet, its module object is created without running the
    ``__init__`` while the two load, and then removed, so a later ``import dp_accounting`` runs the
    real ``__init__`` (which reuses the submodules already loaded: one ``dp_event``, one class per
    event).  Raises ImportError when dp-accounting is not installed (or is blocked in sys.modules).
    """
    with _LOAD_LOCK:
        if "dp_accounting" in sys.modules and sys.modules["dp_accounting"] is None:
            raise ImportError("import of dp_accounting halted; None in sys.modules", name="dp_accounting")
        events = sys.modules.get("dp_accounting.dp_event")
        rdp = sys.modules.get("dp_accounting.rdp.rdp_privacy_accountant")
        if events is not None and rdp is not None:
            return rdp.RdpAccountant, events
        if "dp_accounting" not in sys.modules:
            found = importlib.util.find_spec("dp_accounting")
            if found is None or found.submodule_search_locations is None:
                raise ImportError("No module named 'dp_accounting'", name="dp_accounting")
            bare = importlib.util.module_from_spec(found)
            sys.modules["dp_accounting"] = bare
            try:
                events = importlib.import_module("dp_accounting.dp_event")
                rdp = importlib.import_module("dp_accounting.rdp.rdp_privacy_accountant")
            finally:
                if sys.modules.get("dp_accounting") is bare:
                    del sys.modules["dp_accounting"]
        else:
            events = importlib.import_module("dp_accounting.dp_event")
            rdp = importlib.import_module("dp_accounting.rdp.rdp_privacy_accountant")
        return rdp.RdpAccountant, events


def _rdp_accountant():
    return load_accountant()[0]()


def _dp_event():
    return load_accountant()[1]

__all__ = [
    "zcdp_epsilon",
    "zcdp_delta",
    "rho_for",
    "kls_tau",
    "kls_rho",
    "calibrate_discrete_gaussian",
    "zcdp_target_problem",
    "load_accountant",
    "discrete_laplace_scale",
    "gaussian_event",
    "laplace_event",
    "job_event",
]

#: Terms of τ's sum evaluated one by one; the rest are bounded by the largest remaining term.
_TAU_EXACT_TERMS = 64
#: exp(−700) ≈ 1e-304 stands in for any smaller τ (an upper bound, so no underflow to 0 rounds down).
_LOG_TAU_FLOOR = -700.0
_RHO_REL_TOL = 1e-13
#: Relative bump of the calibrated σ_c before its final verification (float rounding of the solve).
_SIGMA_BUMP = 1e-12


def zcdp_epsilon(rho: float, delta: float) -> float:
    """ε at δ of a ρ-zCDP mechanism, by dp_accounting's RDP accountant."""
    return _rdp_accountant().compose(_dp_event().ZCDpEvent(rho)).get_epsilon(delta)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """δ at ε of a ρ-zCDP mechanism, by dp_accounting's RDP accountant."""
    return _rdp_accountant().compose(_dp_event().ZCDpEvent(rho)).get_delta(epsilon)


@functools.lru_cache(maxsize=256)
def rho_for(epsilon: float, delta: float) -> float:
    """The largest ρ (to a relative 1e-13) whose :func:`zcdp_epsilon` at ``delta`` is ≤ ``epsilon``.

    ε(ρ) is increasing in ρ; the bisection keeps ``lo`` feasible, so the returned ρ is feasible
    by the accountant's own evaluation.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)) or not 0 < delta < 1:
        raise ValueError(f"rho_for needs epsilon > 0 and 0 < delta < 1, got {epsilon!r}, {delta!r}")
    lo, hi = 0.0, 1.0
    while zcdp_epsilon(hi, delta) <= epsilon:
        lo, hi = hi, 2.0 * hi
    while hi - lo > _RHO_REL_TOL * hi:
        mid = 0.5 * (lo + hi)
        if zcdp_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    if lo <= 0.0:
        raise ValueError(f"no positive rho reaches epsilon={epsilon!r} at delta={delta!r}")
    return lo


def kls_tau(sigma: float, load: int) -> float:
    """An upper bound on τ = 10·Σ_{k=1}^{L−1} exp(−2π²σ²·k/(k+1)) (0 for L = 1).

    The first 64 terms are summed one by one; each of the remaining L − 65 is at most the 64th's
    successor exp(−2π²σ²·64/65).  A result below exp(−700) is reported as exp(−700).
    """
    if load <= 1:
        return 0.0
    a = 2.0 * math.pi**2 * sigma * sigma
    logs = [-a * k / (k + 1) for k in range(1, min(load, _TAU_EXACT_TERMS + 1))]
    rest = load - 1 - len(logs)
    if rest > 0:
        logs.append(math.log(rest) - a * (_TAU_EXACT_TERMS + 1) / (_TAU_EXACT_TERMS + 2))
    top = max(logs)
    log_tau = math.log(10.0) + top + math.log(sum(math.exp(x - top) for x in logs))
    return math.exp(max(log_tau, _LOG_TAU_FLOOR))


def kls_rho(sigma: float, load: int, l2_sensitivity: float, l1_sensitivity: float,
            tau_ratio: float = 1.0) -> float:
    """ρ of the sum of ``load`` i.i.d. N_Z(0, σ²) (σ in grid steps) for shifts bounded by the given
    sensitivities (grid steps): ½(Δ₂/(√L·σ) + τ·Δ₁)².

    ``tau_ratio`` r ≤ 1: per-entry scales σ_j ∈ [rσ, σ] (the gram release, docs/architecture.md
    "Per-entry noise scales"): Δ₂ is then the bound on √(Σ_j μ_j²·σ²/σ_j²) and τ is evaluated at
    the smallest scale rσ (τ decreases in σ, so that term bounds every coordinate's)."""
    eps_c = l2_sensitivity / (math.sqrt(load) * sigma) + kls_tau(sigma * tau_ratio, load) * l1_sensitivity
    return 0.5 * eps_c * eps_c


def zcdp_target_problem(rho: float, epsilon: float, delta: float) -> str | None:
    """Why a job's stated zCDP target ρ (``privacy.zcdp_rho``) does not buy its (ε, δ), or None.

    The job builder sets ρ = :func:`rho_for` (ε, δ) so that servers and the analyst plan the noise
    without the accountant; a party, which owns the privacy, checks it here by the accountant
    before its ledger charges: ``zcdp_epsilon(ρ, δ) ≤ ε``, the very test :func:`rho_for` keeps.
    """
    if not (isinstance(rho, float) and math.isfinite(rho) and rho > 0.0):
        return f"the job's zCDP target rho must be a positive finite number, got {rho!r}"
    achieved = zcdp_epsilon(rho, delta)
    if achieved > epsilon:
        return (f"the job's zCDP target rho = {rho!r} gives epsilon = {achieved:.6g} at delta = {delta:g} by the "
                f"accountant, more than the job's epsilon = {epsilon:g}")
    return None


def calibrate_discrete_gaussian(epsilon: float, delta: float, l2_sensitivity: float, load: int,
                                l1_sensitivity: float, tau_ratio: float = 1.0, rho: float | None = None) -> float:
    """The smallest σ_c (grid steps, to a relative ~1e-12, rounded up) whose L-fold sum is
    (ε, δ)-DP by :func:`kls_rho` and the accountant: ``kls_rho(σ_c, …, tau_ratio) ≤ rho_for(ε, δ)``.

    ``tau_ratio``: τ is evaluated at ``σ_c·tau_ratio`` (the smallest of per-entry noise scales).
    ``rho``: the zCDP target when the job states it (``privacy.zcdp_rho``, checked by the parties
    with :func:`zcdp_target_problem`); then no accountant is needed here.
    """
    target = math.sqrt(2.0 * (rho_for(epsilon, delta) if rho is None else rho))

    def eps_c(sigma: float) -> float:
        return l2_sensitivity / (math.sqrt(load) * sigma) + kls_tau(sigma * tau_ratio, load) * l1_sensitivity

    lo = l2_sensitivity / (math.sqrt(load) * target)  # τ ≥ 0: no smaller σ can do
    hi = lo
    while eps_c(hi) > target:
        hi *= 2.0
    while hi - lo > 1e-14 * hi:
        mid = 0.5 * (lo + hi)
        if eps_c(mid) <= target:
            hi = mid
        else:
            lo = mid
    sigma = hi * (1.0 + _SIGMA_BUMP)
    if kls_rho(sigma, load, l2_sensitivity, l1_sensitivity, tau_ratio) > 0.5 * target * target:  # pragma: no cover
        raise ValueError(f"could not verify the discrete Gaussian sigma for epsilon={epsilon!r}, delta={delta!r}")
    return sigma


def discrete_laplace_scale(epsilon: float, l1_sensitivity: float) -> float:
    """t = ⌈Δ₁⌉/ε (grid steps): DLap(t) is exactly ε-DP for integer shifts of ℓ1 norm ≤ Δ₁."""
    return math.ceil(l1_sensitivity) / epsilon


def gaussian_event(sigma: float, load: int, l2_sensitivity: float, l1_sensitivity: float,
                   tau_ratio: float = 1.0) -> dp_event.DpEvent:
    """The release's ``ZCDpEvent``: the L-fold discrete Gaussian sum at σ (grid steps; per-entry
    scales down to ``tau_ratio``·σ, :func:`kls_rho`)."""
    return _dp_event().ZCDpEvent(kls_rho(sigma, load, l2_sensitivity, l1_sensitivity, tau_ratio))


def laplace_event(scale: float, l1_sensitivity: float) -> dp_event.DpEvent:
    """The release's ``DiscreteLaplaceDpEvent``: one DLap(t) per entry, integer sensitivity ⌈Δ₁⌉."""
    return _dp_event().DiscreteLaplaceDpEvent(1.0 / scale, math.ceil(l1_sensitivity))


def job_event(spec) -> dp_event.DpEvent:  # spec: ltm.jobspec.JobSpec (imported lazily: no cycle)
    """The dp-accounting event of a job's release, from its noise plan (what the ledger charges).

    The true loss of the noise the parties add under the servers' gate (honest load ≥ L), whatever
    the calibration claimed: ``paper`` and ``interpolate`` jobs get the event of the σ they use.
    """
    return spec.noise_plan().dp_event()

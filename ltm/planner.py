"""The release-kind planner: choose the kind and its parameters from PUBLIC quantities only.

Given n, the client-vector width D, (ε, δ), the mechanism, the partition, the corruption tolerance
and the clip bound — and optionally a PUBLIC second moment of the transformed client vectors —
:func:`plan_release` predicts, for each candidate release kind with its parameters, the excess
error of the model the analyst fits, chooses the smallest, and says why.  It never sees data.

What is predicted (regression).  The excess risk of the fitted coefficients over the clipped data's
least-squares fit, per client and relative to the label's second moment, i.e. the predicted loss
of R² in the transformed space (the quantity the planner grid in docs/experiments/planner_grid.md measures):

    excess = E[(ŵ − w)ᵀ Σ (ŵ − w)] / E[y²],     Σ = E[x xᵀ] (regressors), w = Σ⁻¹ E[x y].

First-order formulas (derivations in docs/planner.md):

* ``gram`` (rows only): Ĝ = ZᵀZ + E, E symmetric, Var E_ii = v, Var E_ij = v/2 with v the
  released per-entry noise variance (``n·σ_c²``, σ_c for Δ₂ = √2·C²; Laplace: Var E_ij = v, and
  v = P·Var DLap for an aggregated upload).  In the eigenbasis (μ_k, w_k)
  of Σ, with ridge λ (the AdaSSP-style rule, ≈ max(0, τ − n·μ_min), τ = 2√(p·Var E_ij) = √(2pv)):
  ``excess·E[y²] = Σ_k μ_k (c + λ² w_k²) / (n μ_k + λ)²``,  c = Var E_ij·(1 + ‖w‖²).
  It falls like 1/n².
* ``sparse``/``dense`` (sketch, m rows, de-biased ridge): Ã = SZ + N with per-entry noise
  variance v_e (≈ σ₁²/0.95·(expected load / L), σ₁ for Δ₂ = 2C), so
  ``excess·E[y²] ≈ p/(m − p − 1)·r                       (sketch-and-solve distortion)
                 + v_e (1 + ‖w‖²)·p / n                     (cross term (SX)ᵀN: input perturbation)
                 + v_e·r·tr(Σ⁻¹) / n                        (N_xᵀ S r)
                 + v_e² m (1 + ‖w‖²)·tr(Σ⁻¹) / n²           (NᵀN − E[NᵀN])``
  with r = E[y²] − wᵀΣw the residual second moment.  The cross term falls like 1/n, whatever m:
  the reason a sketch cannot reach the central SSP/AdaSSP error in the rows partition.  m is
  chosen by minimising the sum over the feasible range (≥ max(4D, 16), ≤ n/64, every row's honest
  load ≥ 1).

What is assumed without a public second moment: the job's public column transforms give every
client vector norm ≈ C (``ltm_datasets.tables.public_columns``: E‖z‖² ≈ C², the label's share
q = 1/(1 + √p), each regressor p-th of the rest), regressors uncorrelated (Σ = (1 − q)C²/p · I),
and an assumed R² (default 0.5).  Real data are correlated (Σ has small eigenvalues) and that
moves absolute predictions, but not the ranking of the kinds in the rows partition: the gram
kind's error is smaller by a factor ≈ n/(tr(Σ⁻¹)·…) that grows with n.  Lifting is also limited
by traffic: a client uploads D(D+1)/2 values for ``gram`` against s·D for a sparse sketch; kinds
whose upload exceeds ``max_upload_values`` are not candidates (random features make D large).

Columns partition: no party holds a whole client vector, so nothing can be lifted by a party; the
planner tunes the sparse sketch's m by the formula above.  The ``gram`` candidate there is the
replicated degree-2 release (:mod:`ltm.replicated`): the same noisy Gram, computed by k = 3 servers
from replicated shares, with per-party noise (v = P·σ_c², L = P − corrupt parties honest draws per
entry) on the unscaled triangle (off-diagonal noise variance v, not v/2).  It is private only
against an honest majority of servers (one of three), so it is *feasible* only when the job allows
that (``colluding_servers``); either way the plan's reason states the assumption its choice rests
on and what the other assumption would give (:func:`_trust_note`).

Low rank (no label): predicted is the spectral-norm error of the second-moment estimate relative
to its top eigenvalue (gram: ‖E‖ ≈ √(2Dv); sketch: cross term ≈ √(2 v_e n λ₁) + NᵀN fluctuation
v_e(√m + √D)² + sketching ≈ λ₁·n·√(D/m)).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ltm.dp.calibration import analytic_gaussian_sigma, plan_noise
from ltm.dp.defaults import DEFAULT_CLIP_BOUND, DEFAULT_LOAD_FRACTION
from ltm.dp.sensitivity import gram_sensitivity, sketch_l2
from ltm.lifts import gram_width

__all__ = ["PlanInputs", "Candidate", "Plan", "plan_release", "default_m", "KINDS", "DEFAULT_ASSUMED_R2",
           "DEFAULT_MAX_UPLOAD_VALUES"]

KINDS = ("gram", "sparse", "dense")
DEFAULT_ASSUMED_R2 = 0.5
#: Largest number of values one client may upload per job (gram: D(D+1)/2; sketch: pieces·D).
DEFAULT_MAX_UPLOAD_VALUES = 4096
#: Dense sketches cost m pieces per client: only small m are candidates.
DENSE_MAX_M = 64


@dataclass(frozen=True)
class PlanInputs:
    """The public quantities the planner may use.

    Attributes:
        n: clients (rows).
        width: D, entries of the client vector (regressors incl. an intercept column, and the label).
        epsilon, delta: the privacy parameters (delta 0 for the Laplace mechanism).
        partition: ``rows`` or ``columns``.
        task: ``regression`` (the last entry is the label) or ``lowrank``.
        mechanism: ``gaussian`` or ``laplace``.
        clip_bound: C.
        party_sizes: clients per party (rows partition; for the corrupt-party deduction).
        corrupt_parties, t_prime: the corruption tolerance.
        second_moment: optional PUBLIC D × D second moment E[z zᵀ] of the transformed client
            vectors (label last), e.g. from public or synthetic data; never from the private data.
        assumed_r2: R² assumed when no second moment is given.
        max_upload_values: traffic cap per client.
        kinds: the candidate kinds (default gram and sparse; a dense sketch has the same error as a
            sparse one of the same m at m times the upload, so it is a candidate only on request).
        upload_mode: ``per-client`` or ``aggregate`` (the job's upload mode: it decides the costs).
        servers: k (seed-compressed shares cost the k − 1 helper servers 32 bytes per batch).
        max_party_upload_bytes: candidates whose predicted upload per party exceeds this are not
            feasible (0: no bound; a job file's ``[job].max_party_upload_bytes``).
        utility_tolerance: the cheapest candidate whose predicted utility is within this fraction
            of the best candidate's is chosen (:func:`choose_by_cost`; default 1%).
    """

    n: int
    width: int
    epsilon: float
    delta: float
    partition: str = "rows"
    task: str = "regression"
    mechanism: str = "gaussian"
    clip_bound: float = DEFAULT_CLIP_BOUND
    party_sizes: tuple[int, ...] = ()
    corrupt_parties: int = 0
    t_prime: int = 0
    second_moment: Any = None
    assumed_r2: float = DEFAULT_ASSUMED_R2
    max_upload_values: int = DEFAULT_MAX_UPLOAD_VALUES
    kinds: tuple[str, ...] = ("gram", "sparse")
    upload_mode: str = "per-client"
    servers: int = 3
    max_party_upload_bytes: int = 0
    utility_tolerance: float = 0.01
    #: columns partition, the replicated release: servers k, the colluding servers the job tolerates
    #: (None: k − 1), parties P and the corrupt parties its noise tolerates.
    colluding_servers: int | None = None
    parties: int = 0
    replicated_corrupt_parties: int = 1
    #: the job verifies every party's clipping on the shares (:mod:`ltm.verified_clipping`), so the
    #: replicated release may tolerate deviating parties (``corrupt_parties`` ≥ 1).
    verified_clipping: bool = False


@dataclass(frozen=True)
class Candidate:
    """One release kind with its parameters and the predicted excess error."""

    kind: str
    m: int
    s: int
    predicted_excess: float
    terms: dict[str, float] = field(default_factory=dict)
    estimator: str = ""
    upload_values: int = 0
    feasible: bool = True
    note: str = ""
    cost: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """The planner's choice, every candidate, the reason and the assumptions."""

    kind: str
    m: int
    s: int
    estimator: str
    predicted_excess: float
    candidates: tuple[Candidate, ...]
    reason: str
    assumptions: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON dict: an infeasible candidate's prediction is None (it says ``feasible: false``
        and why in ``note``), never an infinite float."""
        return _finite_or_none(asdict(self))


def _finite_or_none(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (recursively through dicts, lists, tuples)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj


# -------------------------------------------------------------------- the model's moments
@dataclass(frozen=True)
class _Moments:
    mu: np.ndarray  # eigenvalues of Σ (regressors), per client
    w2: np.ndarray  # squared coefficients in Σ's eigenbasis
    y2: float       # E[y²]
    resid: float    # E[y²] − wᵀΣw
    top: float      # largest eigenvalue of the full second moment (low rank)
    source: str


def _moments(inp: PlanInputs) -> _Moments:
    C2 = inp.clip_bound**2
    D = inp.width
    if inp.second_moment is not None:
        M = np.asarray(inp.second_moment, dtype=np.float64)
        if M.shape != (D, D) or not np.all(np.isfinite(M)):
            raise ValueError(f"the public second moment must be a finite {D} × {D} matrix, got shape {M.shape}")
        M = (M + M.T) / 2.0
        top = float(np.linalg.eigvalsh(M)[-1])
        if inp.task == "lowrank":
            return _Moments(np.linalg.eigvalsh(M), np.zeros(D), 0.0, 0.0, top, "public second moment")
        Sxx, sxy, yy = M[:-1, :-1], M[:-1, -1], float(M[-1, -1])
        mu, U = np.linalg.eigh(Sxx)
        mu = np.maximum(mu, 1e-12 * max(mu.max(), 1e-300))
        w = U.T @ np.linalg.lstsq(Sxx, sxy, rcond=None)[0]
        resid = max(yy - float(np.sum(mu * w * w)), 1e-12 * yy)
        return _Moments(mu, w * w, yy, resid, top, "public second moment")
    if inp.task == "lowrank":
        mu = np.full(D, C2 / D)
        return _Moments(mu, np.zeros(D), 0.0, 0.0, C2 / D, f"isotropic, E‖z‖² = C² (no public second moment)")
    p = D - 1
    q = 1.0 / (1.0 + math.sqrt(p))
    sx = (1.0 - q) * C2 / p
    y2 = q * C2
    r2 = inp.assumed_r2
    w2 = np.full(p, r2 * y2 / (sx * p))
    return _Moments(np.full(p, sx), w2, y2, (1.0 - r2) * y2, max(sx, y2),
                    f"isotropic regressors, label share q = 1/(1+√p), assumed R² = {r2:g} (no public second moment)")


# -------------------------------------------------------------------- noise of each kind
def _deduction(inp: PlanInputs, share: float) -> float:
    """Expected corrupt load in one row when a row receives ``share`` of each party's clients."""
    sizes = sorted(inp.party_sizes or (inp.n,), reverse=True)
    c = inp.corrupt_parties if inp.partition == "rows" else 0
    return inp.t_prime * (1 if inp.partition == "rows" else 0) + share * sum(sizes[:c])


def _release_variance(inp: PlanInputs, *, sensitivity_scale: float, load: float, deduction: float,
                      pieces: int) -> float | None:
    """Variance of one released (scaled) entry: load honest-or-not draws of σ_c² = σ_Y²/L, /pieces."""
    L = math.floor(DEFAULT_LOAD_FRACTION * (load - deduction))
    if L < 1:
        return None
    C = inp.clip_bound
    if sensitivity_scale > 0:  # lifted: Δ given
        sens = sensitivity_scale
        plan = plan_noise(mechanism=inp.mechanism, calibration="tight", epsilon=inp.epsilon,
                          delta=inp.delta if inp.mechanism == "gaussian" else 0.0, clip_norm=C, s=1,
                          min_honest_load=L, sensitivity=sens, sketch_kind="sum")
    else:
        plan = plan_noise(mechanism=inp.mechanism, calibration="tight", epsilon=inp.epsilon,
                          delta=inp.delta if inp.mechanism == "gaussian" else 0.0, clip_norm=C, s=pieces,
                          min_honest_load=L)
    return load * plan.sigma_client**2 / pieces


def _gram_candidate(inp: PlanInputs, mom: _Moments) -> Candidate:
    D, n = inp.width, inp.n
    W = gram_width(D)
    sens = gram_sensitivity(inp.mechanism, inp.clip_bound)
    if inp.partition != "rows":
        return _replicated_candidate(inp, mom)
    if W > inp.max_upload_values:
        return Candidate("gram", 1, 1, math.inf, upload_values=W, feasible=False,
                         note=f"upload D(D+1)/2 = {W} values per client exceeds the cap {inp.max_upload_values}")
    v = _release_variance(inp, sensitivity_scale=sens, load=n, deduction=_deduction(inp, 1.0), pieces=1)
    if v is None:
        return Candidate("gram", 1, 1, math.inf, upload_values=W, feasible=False,
                         note="no honest load left after the corruption deduction")
    off = v / 2.0  # the Gaussian's per-entry scales: v/2 off the diagonal (ltm/lifts.py)
    if inp.mechanism == "laplace":  # i.i.d. DLap: v off it too, and one draw per party when aggregated
        v = off = v * min(max(inp.parties, 1), n) / n if inp.upload_mode == "aggregate" else v
    if inp.task == "lowrank":
        err = 2.0 * math.sqrt(D * off) / (n * mom.top)
        return Candidate("gram", 1, 1, err, {"noise_spectral": err}, "top eigenvectors of the noisy ZᵀZ",
                         W, note=f"released per-entry noise variance v = {v:.4g}")
    p = D - 1
    mu, w2 = mom.mu, mom.w2
    c = off * (1.0 + float(w2.sum()))
    tau = 2.0 * math.sqrt(p * off)  # the noise's spectral edge (analyst.gram.noise_edge of the Wigner v = 2·off)
    lam = max(0.0, tau - n * float(mu.min()))
    var = float(np.sum(mu * c / (n * mu + lam) ** 2))
    bias = float(np.sum(mu * lam**2 * w2 / (n * mu + lam) ** 2))
    ex = min((var + bias) / mom.y2, float(np.sum(mu * w2)) / mom.y2)
    return Candidate("gram", 1, 1, ex, {"noise": var / mom.y2, "ridge_bias": bias / mom.y2},
                     f"ridge, AdaSSP-style λ = max(0, τ − λ_min(noisy XᵀX)), τ = 2√(p·Var E_ij) ≈ "
                     f"{tau:.4g} (predicted λ ≈ {lam:.4g})", W, note=f"released per-entry noise variance v = {v:.4g}")


def _sketch_terms(inp: PlanInputs, mom: _Moments, kind: str, m: int, s: int) -> tuple[float, dict[str, float]] | None:
    n, D = inp.n, inp.width
    pieces = m if kind == "dense" else s
    load = n * pieces / m
    # a sparse row's load is binomial: keep 3 standard deviations below the mean for the minimum
    min_load = load if kind == "dense" else load - 3.0 * math.sqrt(load)
    v_e = _release_variance(inp, sensitivity_scale=0.0, load=min_load, deduction=_deduction(inp, pieces / m),
                            pieces=pieces)
    if v_e is None:
        return None
    v_e *= load / max(min_load, 1.0)  # the average row carries `load` draws of the min-row σ_c
    if inp.task == "lowrank":
        lam1 = mom.top
        sketch = lam1 * math.sqrt(D / m)
        cross = math.sqrt(2.0 * v_e * lam1 / n)
        nn = v_e * (math.sqrt(m) + math.sqrt(D)) ** 2 / n
        # NᵀN's mean v_e·m·I is not removed by the SVD: it adds to every direction equally
        total = (sketch + cross + nn) / lam1
        return total, {"sketching": sketch / lam1, "cross_term": cross / lam1, "noise_gram": nn / lam1}
    p = D - 1
    if m <= p + 1:
        return None
    mu, w2 = mom.mu, mom.w2
    trinv = float(np.sum(1.0 / mu))
    ww = 1.0 + float(w2.sum())
    terms = {
        "sketching": p / (m - p - 1) * mom.resid,
        "cross_term": v_e * ww * p / n,
        "residual_cross": v_e * mom.resid * trinv / n,
        "noise_gram": v_e**2 * m * ww * trinv / n**2,
    }
    # First order overshoots once the noise dominates; the de-biased ridge then shrinks towards
    # w = 0, whose excess is the explained share wᵀΣw/E[y²]: the prediction is capped there.
    zero = float(np.sum(mu * w2)) / mom.y2
    return min(sum(terms.values()) / mom.y2, zero), {k: t / mom.y2 for k, t in terms.items()}


def _sketch_candidate(inp: PlanInputs, mom: _Moments, kind: str) -> Candidate:
    n, D = inp.n, inp.width
    lo = max(4 * D, 16)
    hi = max(n // 64, 1) if kind == "sparse" else min(max(n // 64, 1), DENSE_MAX_M)
    s = 1
    best: tuple[float, int, dict] | None = None
    if hi >= lo:
        for m in np.unique(np.round(np.geomspace(lo, hi, 60)).astype(int)):
            got = _sketch_terms(inp, mom, kind, int(m), s)
            if got is not None and (best is None or got[0] < best[0]):
                best = (got[0], int(m), got[1])
    pieces_values = lambda m: (m if kind == "dense" else s) * D  # noqa: E731
    if best is None:
        return Candidate(kind, lo, s, math.inf, feasible=False, upload_values=pieces_values(lo),
                         note=f"no feasible m in [{lo}, {hi}] (too few clients for this D and corruption tolerance)")
    ex, m, terms = best
    if pieces_values(m) > inp.max_upload_values:
        return Candidate(kind, m, m if kind == "dense" else s, math.inf, terms, upload_values=pieces_values(m),
                         feasible=False, note=f"upload {pieces_values(m)} values per client exceeds the cap")
    est = "de-biased ridge, λ = v·√m" if inp.task == "regression" else "top right singular vectors of Ã"
    return Candidate(kind, m, m if kind == "dense" else s, ex, terms, est, pieces_values(m),
                     note=f"m minimises the predicted error over [{lo}, {hi}]")


def _tolerated(inp: PlanInputs) -> int:
    return inp.servers - 1 if inp.colluding_servers is None else inp.colluding_servers


def _replicated_candidate(inp: PlanInputs, mom: _Moments) -> Candidate:
    """The columns partition's ``gram`` kind: the replicated degree-2 release (ltm/replicated.py).

    Predicted like the rows gram (:func:`_gram_candidate`) with the replicated release's noise:
    P parties each add σ_c² per entry of the unscaled triangle, σ_c for L = P − c honest draws and
    the sensitivity √2·C²; off-diagonal noise variance v (not v/2), so c = v(1 + ‖w‖²) and the
    ridge edge τ = 2√(pv).  Always predicted (the plan's explanation quotes it); feasible only when
    the job allows an honest majority of k = 3 servers.
    """
    from ltm.replicated import REPLICATED_SERVERS, honest_majority, replicated_noise_plan, unverified_party_problem

    D, n = inp.width, inp.n
    W = gram_width(D)
    P = max(inp.parties, 1)
    c_par = min(inp.replicated_corrupt_parties, P - 1)
    if inp.mechanism != "gaussian":
        return Candidate("gram", 1, 1, math.inf, upload_values=D, feasible=False,
                         note="the replicated release supports the gaussian mechanism only")
    plan = replicated_noise_plan(epsilon=inp.epsilon, delta=inp.delta, clip_bound=inp.clip_bound, d=D, parties=P,
                                 corrupt_parties=c_par, frac_bits=20)
    v = P * plan.sigma_client**2
    if inp.task == "lowrank":
        ex = 2.0 * math.sqrt(D * v) / (n * mom.top)
        terms = {"noise_spectral": ex}
        est = "top eigenvectors of the noisy ZᵀZ"
    else:
        p = D - 1
        mu, w2 = mom.mu, mom.w2
        c = v * (1.0 + float(w2.sum()))
        tau = 2.0 * math.sqrt(p * v)
        lam = max(0.0, tau - n * float(mu.min()))
        var = float(np.sum(mu * c / (n * mu + lam) ** 2))
        bias = float(np.sum(mu * lam**2 * w2 / (n * mu + lam) ** 2))
        ex = min((var + bias) / mom.y2, float(np.sum(mu * w2)) / mom.y2)
        terms = {"noise": var / mom.y2, "ridge_bias": bias / mom.y2}
        est = f"ridge, AdaSSP-style λ on the noisy XᵀX (predicted λ ≈ {lam:.4g})"
    t, k = _tolerated(inp), inp.servers
    trust = None if inp.verified_clipping else unverified_party_problem(inp.corrupt_parties)
    ok = k == REPLICATED_SERVERS and honest_majority(k, t) and trust is None
    note = (f"replicated release (columns partition): {P} parties each add noise, {c_par} may know theirs; "
            f"released per-entry noise variance v = {v:.4g}; private if at most 1 of {REPLICATED_SERVERS} "
            f"servers is corrupt")
    if k != REPLICATED_SERVERS:
        note += f"; needs k = {REPLICATED_SERVERS} servers (got {k})"
    elif not honest_majority(k, t):
        note += f"; not allowed: the job tolerates {t} colluding servers of {k}"
    elif trust is not None:
        note += f"; not allowed: {trust}"
    return Candidate("gram", 1, 1, ex, terms, est, D, feasible=ok, note=note)


def _trust_note(inp: PlanInputs, mom: _Moments, cands: list[Candidate], best: Candidate) -> str:
    """Columns partition: which trust assumption the choice rests on, and what the other would give
    (predicted R² in the transformed space = explained share wᵀΣw/E[y²] minus the predicted loss)."""
    if inp.partition != "columns" or inp.task != "regression":
        return ""
    explained = float(np.sum(mom.mu * mom.w2)) / mom.y2
    rep = next((c for c in cands if c.kind == "gram"), None)
    sketch = next((c for c in cands if c.kind != "gram" and math.isfinite(c.predicted_excess)), None)
    t, k = _tolerated(inp), inp.servers
    if best.kind == "gram":
        other = (f"; if any {k - 1} of {k} servers may collude (the default), the sparse sketch would reach "
                 f"about {explained - sketch.predicted_excess:.3g} R²" if sketch else "")
        parties = ("every party's clipping being proven on the shares (verified clipping: a deviating party is "
                   "named and nothing is released)" if inp.verified_clipping else
                   "every party following the protocol (nothing checks that a party's shares are clipped unless "
                   "the job sets verified_clipping)")
        return (f" Trust: this choice rests on an honest majority (at most {t} of {k} servers corrupt; two "
                f"colluding servers would reconstruct every party's data) and on {parties}; it should reach "
                f"about {explained - best.predicted_excess:.3g} R²{other}.")
    if rep is None or not math.isfinite(rep.predicted_excess):
        return f" Trust: this choice rests on any {t} of {k} servers possibly colluding."
    return (f" Trust: this choice rests on the job's assumption that up to {t} of {k} servers may collude "
            f"(about {explained - best.predicted_excess:.3g} R²); a replicated release would reach about "
            f"{explained - rep.predicted_excess:.3g} R² if 1 of 3 servers may be corrupt "
            f"(set colluding_servers = 1 to allow it).")


# -------------------------------------------------------------------- the fixed rule
def default_m(n: int, width: int, *, epsilon: float, delta: float, clip_bound: float, kind: str = "sparse") -> int:
    """Default sketch size m from n, the vector width D, ε and δ (documented rule), for a sketch job
    whose kind and m are given by hand (``kind="auto"`` asks :func:`plan_release` instead).

    For a regression the release error has two parts that pull m in opposite directions (the
    analyst de-biases the known noise Gram, so the noise does not shrink the model):

    * sketch-and-solve distortion: relative excess loss ≈ D·(1 − R²)/m, falling with m;
    * the de-biased noise Gram ÃᵀÃ − E[NᵀN] keeps fluctuations of size v·√m per entry
      (v ≈ 1.1·σ₁² per scaled entry, σ₁ the analytic Gaussian σ for Δ = 2C), against a signal of
      ≈ n/D per diagonal entry: an excess loss ≈ D³·v²·m/n², growing with m.

    Balancing the two with a residual share 1 − R² ≈ 0.05 gives ``m ≈ 0.15·n/(D·v)``, clamped to
    [max(4D, 16), n/64] (at least 64 expected clients per row keeps every row's honest load high
    and the gate robust to dropouts).  Dense sketches cost O(m) per client upload: capped at 256.
    Low rank uses the same rule (m only needs to exceed the rank by a margin).
    """
    sigma_1 = analytic_gaussian_sigma(epsilon, delta, sketch_l2(clip_bound, 1))
    v = 1.1 * sigma_1**2
    m = 0.15 * n / (width * v)
    lo, hi = max(4 * width, 16), max(n // 64, 1)
    if kind == "dense":
        hi = min(hi, 256)
    return int(round(max(min(m, hi), min(lo, hi))))


# -------------------------------------------------------------------- the planner
def _check(inp: PlanInputs) -> None:
    problems = []
    if inp.n < 2 or inp.width < (2 if inp.task == "regression" else 1):
        problems.append(f"need n ≥ 2 and a client vector wide enough for the task (n={inp.n}, D={inp.width})")
    if not (inp.epsilon > 0 and math.isfinite(inp.epsilon)):
        problems.append(f"epsilon must be > 0 (got {inp.epsilon})")
    if inp.partition not in ("rows", "columns"):
        problems.append(f"partition must be rows or columns (got {inp.partition!r})")
    if inp.task not in ("regression", "lowrank"):
        problems.append(f"task must be regression or lowrank (got {inp.task!r})")
    unknown = [k for k in inp.kinds if k not in KINDS]
    if unknown or not inp.kinds:
        problems.append(f"candidate kinds must be a non-empty subset of {KINDS} (got {inp.kinds})")
    if problems:
        raise ValueError("planner: " + "; ".join(problems))


def plan_release(inp: PlanInputs) -> Plan:
    """Predict each candidate kind's excess error, choose the smallest, explain (module docstring)."""
    _check(inp)
    mom = _moments(inp)
    cands: list[Candidate] = []
    for kind in inp.kinds:
        cands.append(_gram_candidate(inp, mom) if kind == "gram" else _sketch_candidate(inp, mom, kind))
    cands = with_costs(inp, cands)
    feasible = [c for c in cands if c.feasible and math.isfinite(c.predicted_excess)]
    if not feasible:
        raise ValueError("planner: no release kind is feasible: " + "; ".join(f"{c.kind}: {c.note}" for c in cands))
    best, trade = choose_by_cost(inp, mom, feasible)
    what = "predicted R² loss" if inp.task == "regression" else "predicted relative spectral error"
    def shape(c) -> str:  # a gram release has no sketch rows m or non-zeros s to name
        return "gram" if c.kind == "gram" else f"{c.kind}(m={c.m})" if c.kind == "dense" else \
            f"{c.kind}(m={c.m}, s={c.s})"

    others = ", ".join(f"{shape(c)} {c.predicted_excess:.3g}" if c.feasible else f"{c.kind}: {c.note}"
                       for c in cands if c is not best)
    reason = (f"{shape(best)}: {what} {best.predicted_excess:.3g}; "
              f"{others or 'no other candidate'}. {trade}")
    if best.kind == "gram":
        reason += (" A gram release's error does not grow with n (noisy ZᵀZ), a sketch's cross term (SX)ᵀN "
                   "grows like √n.")
    elif inp.partition == "columns":
        reason += " Columns partition: no party holds a whole client vector, so the sketch is tuned."
    reason += _trust_note(inp, mom, cands, best)
    assumptions = (
        f"second moment: {mom.source}",
        f"ε = {inp.epsilon:g}, δ = {inp.delta:g}, {inp.mechanism}, C = {inp.clip_bound:g}, "
        f"corruption: {inp.corrupt_parties} parties, t′ = {inp.t_prime}; min honest load L = "
        f"{DEFAULT_LOAD_FRACTION:g}·(load − deduction) as resolve_defaults sets it",
        "first-order error formulas (docs/planner.md); clipping bias and the label's clipping are ignored",
        f"traffic cap {inp.max_upload_values} values per client",
        f"{inp.upload_mode} uploads; costs from per-operation rates measured on a 2-core machine "
        f"(ltm/planner.py COST_RATES), utility tolerance {inp.utility_tolerance:g}",
    )
    return Plan(best.kind, best.m, best.s, best.estimator, best.predicted_excess, tuple(cands), reason, assumptions)


# -------------------------------------------------------------------- cost (issue #22)
#: Per-operation rates (CPU seconds) measured on the 2-core development machine while it was shared
#: (docs/performance.md, docs/planner.md "Cost"): what the cost model multiplies.  Only their ratios
#: matter for the choice.  Measured as process CPU time (the machine's load inflates wall times).
COST_RATES: dict[str, float] = {
    "client_vector": 0.2e-6,   # read (the bench generates its rows) + public transforms + clip, per client
    "round_value": 0.005e-6,   # rounding one value to the grid
    "lift_value": 0.04e-6,     # per-client mode: one lifted (gram) value of one client, rounded
    "gram_block_value": 0.001e-6,  # aggregate mode: one gram value of one client in the BLAS block ẐᵀẐ
    "noise_share_value": 0.1e-6,  # per-client mode: one exact noise draw + secret sharing, per value
    "map_value": 0.018e-6,     # aggregate mode: one value scattered into the party's sketch partial
    "server_value": 0.09e-6,   # per-client mode: TLS, hashing, durable write and map, per value per server set
    # A sketch's row loads, outside the parties and O(n·s) in either mode: the job spec's and the
    # publication's row loads, each server's release gate, the analyst's reconstruction (10^8
    # clients, s = 1: 80 s, docs/performance.md).  The gram release's one row needs none.
    "row_load_piece": 0.8e-6,
}
#: Bytes per second the cost model charges for the wire (loopback TLS on the same machine).
WIRE_BYTES_PER_S = 400e6
_SEED_BYTES = 32


def _party_sizes(inp: PlanInputs) -> tuple[int, ...]:
    return inp.party_sizes or (inp.n,)


def candidate_cost(inp: PlanInputs, c: Candidate) -> dict[str, float]:
    """Predicted bytes a (largest) party uploads, party CPU seconds (the largest party), server CPU
    seconds (all servers together) and the resulting seconds (CPU of every actor plus the wire) of
    a candidate under the job's upload mode.

    Per-client: each client uploads ``upload_values`` values (8 bytes each to the primary server,
    a 32-byte seed to each helper per batch of 2^16 clients); a server stores and maps each value.
    Aggregate: a party uploads its (rows × W) partial once — independent of its client count — and
    pays only for building, rounding and mapping its clients' values (gram: rounding D values and
    the exact BLAS Gram block, party/aggregate.py).  A sketch also costs its O(n·s) row loads
    outside the parties (``server_cpu_s`` counts them).
    """
    gram = c.kind == "gram"
    width = c.upload_values // max(c.s, 1) if not gram else c.upload_values
    rows = 1 if gram else c.m
    aggregate = inp.upload_mode == "aggregate"
    if gram:  # round z (D values), then the lift: the BLAS block (aggregate) or per-client products
        d = inp.width
        per_client = COST_RATES["client_vector"] + d * COST_RATES["round_value"] + c.upload_values * (
            COST_RATES["gram_block_value"] if aggregate else COST_RATES["lift_value"] + COST_RATES["round_value"])
    else:
        per_client = COST_RATES["client_vector"] + c.upload_values * COST_RATES["round_value"]
    row_loads = 0.0 if gram else inp.n * c.s * COST_RATES["row_load_piece"]
    sizes = _party_sizes(inp)
    largest = max(sizes)
    helpers = max(inp.servers - 1, 0)
    if aggregate:
        mapped = 0.0 if gram else c.upload_values * COST_RATES["map_value"]  # the gram block is in per_client
        party_bytes = rows * width * 8 + helpers * _SEED_BYTES
        party_cpu = largest * (per_client + mapped)
        server_cpu = len(sizes) * rows * width * COST_RATES["map_value"] * inp.servers + row_loads
        all_party_cpu = inp.n * (per_client + mapped)
    else:
        batches = -(-largest // (1 << 16))
        party_bytes = largest * c.upload_values * 8 + batches * helpers * _SEED_BYTES
        party_cpu = largest * (per_client + c.upload_values * COST_RATES["noise_share_value"])
        server_cpu = inp.n * c.upload_values * COST_RATES["server_value"] + row_loads
        all_party_cpu = inp.n * (per_client + c.upload_values * COST_RATES["noise_share_value"])
    wire = party_bytes * len(sizes) / WIRE_BYTES_PER_S
    return {"party_upload_bytes": float(party_bytes), "party_cpu_s": party_cpu, "server_cpu_s": server_cpu,
            "total_s": all_party_cpu + server_cpu + wire}


def with_costs(inp: PlanInputs, cands: list[Candidate]) -> list[Candidate]:
    """Each candidate with its :func:`candidate_cost`; over the job's upload bound → not feasible."""
    from dataclasses import replace  # noqa: PLC0415

    out = []
    for c in cands:
        cost = candidate_cost(inp, c)
        if inp.max_party_upload_bytes and c.feasible and cost["party_upload_bytes"] > inp.max_party_upload_bytes:
            c = replace(c, feasible=False, note=f"a party would upload {cost['party_upload_bytes']:.3g} bytes, over "
                                                f"the job's bound of {inp.max_party_upload_bytes}")
        out.append(replace(c, cost=cost))
    return out


def _utility_scale(inp: PlanInputs, mom: _Moments) -> float:
    """What the tolerance is a fraction of: the clipped data's R² (regression: the predicted R² of the
    noiseless fit; assumed when no second moment is given), 1 for the relative spectral error."""
    if inp.task != "regression":
        return 1.0
    r2 = 1.0 - mom.resid / mom.y2 if mom.y2 > 0 else float("nan")
    return float(r2) if math.isfinite(r2) and r2 > 0 else float(inp.assumed_r2)


def choose_by_cost(inp: PlanInputs, mom: _Moments, feasible: list[Candidate]) -> tuple[Candidate, str]:
    """The cheapest candidate (predicted seconds, then bytes) among those whose predicted utility
    is within ``utility_tolerance`` of the best: excess ≤ best excess + tolerance × utility scale
    (regression: predicted R² within that fraction of the best predicted R²).  Returns it and a
    sentence explaining the trade."""
    top = min(feasible, key=lambda c: c.predicted_excess)
    slack = inp.utility_tolerance * _utility_scale(inp, mom)
    near = [c for c in feasible if c.predicted_excess <= top.predicted_excess + slack]
    best = min(near, key=lambda c: (c.cost["total_s"], c.cost["party_upload_bytes"], c.predicted_excess))

    def costs(c: Candidate) -> str:
        k = c.cost
        return (f"{c.kind}: {k['party_upload_bytes']:.3g} B/party, party {k['party_cpu_s']:.3g} CPU-s, "
                f"servers {k['server_cpu_s']:.3g} CPU-s")

    if best is top:
        trade = f"It is also the most accurate ({'; '.join(costs(c) for c in feasible)})."
    else:
        trade = (f"Cheapest within the utility tolerance ({inp.utility_tolerance:g} of the predicted utility, "
                 f"{slack:.3g}): {best.kind} costs {best.cost['total_s']:.3g} s against {top.kind}'s "
                 f"{top.cost['total_s']:.3g} s for {best.predicted_excess - top.predicted_excess:.3g} more predicted "
                 f"error ({'; '.join(costs(c) for c in feasible)}).")
    return best, trade

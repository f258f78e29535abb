"""Liao, Needell & Xue's DP random feature model (Algorithm 1) as a CENTRAL baseline, with the
sensitivity corrected, and the paper's other baselines (Gamma output perturbation, SGD of [25],
private RLS).  Paper: Liao, Needell & Xue, *Differentially Private Random Feature Model*, arXiv
2412.04785, 2024 (Algorithm 1 in §3.1, Lemma 6 in §3.2, the experiments in §4).

Algorithm 1 is output perturbation of the min-norm interpolant ``c♯ = Φ⁺y``: ``ĉ = c♯ + z``.  A
trusted curator holds all the data; this module is for comparison with the LTM release
(``ltm.analyst.random_features.RFRidge``), not a distributed protocol.

Modes (``mode=``):

``certified`` (default, (ε, δ)-DP under replace-one neighbours)
    Labels are clipped to ``|y_j| ≤ B`` (``label_bound``, public), the solution is clipped to a
    public radius ``R``: ``c̃ = c♯·min(1, R/‖c♯‖)``, so ``‖c̃(D) − c̃(D')‖ ≤ 2R`` for EVERY pair of
    datasets, and ``ĉ = c̃ + N(0, σ²I)`` with σ from the analytic Gaussian mechanism for Δ = 2R
    (valid for every ε).  Default ``R = B√m/√(1−2η)``: Lemma 6's radius ‖y‖/√λ_min(ΦΦᵀ) with
    ‖y‖ ≤ B√m and the paper's event λ_min ≥ 1 − 2η, which clipping enforces instead of assuming.
``paper_lemma6_not_dp`` (NOT DP — reproduction of the paper's theory)
    Δ = 2B_y/√(1−2η) in our normalised parametrisation (= the paper's 2/√(N(1−2η)) for the
    unnormalised e^{i⟨ω,x⟩} with ‖y‖ ≤ 1), no clipping, the classical σ = √(2 ln(1.25/δ))Δ/ε.  The
    bound holds only on the random-matrix event λ_min((1/N)AA*) ≥ 1 − 2η, which fails for N < 4m
    and for data with duplicate rows (Lemma 6 holds on Theorem 5's event, §3.2): not a worst-case guarantee.
``reference_code_not_dp`` (NOT DP — how the paper's figures were produced)
    The authors' code: Δ = ``ref_delta_c``/√N (4/√N, i.e. η = 3/8) applied to coefficients of the
    normalised √(2/N)·cos map, classical σ, no clipping: the noise is √N times too small in standard
    deviation (Lemma 6's Δ is for the unnormalised e^{i⟨ω,x⟩}).  Reproduces Figs 1–6.

Every fitted model carries ``privacy_`` with ``dp`` (bool) and a ``guarantee`` string that says
"NOT DP" for the two reproduction modes.

Features: :class:`ltm.transforms.RandomFeatures` (the same public, seeded map the LTM uses), on
inputs the caller has already put on a public scale.  The paper's ω ~ N(0, σ_w²I) is
``bandwidth = 1/σ_w``; its code's ``RF_Gaussian(gamma)`` draws ω with std 2γ, i.e. bandwidth
1/(2γ).  Noise comes from :class:`ltm.randomness.Randomness` (CSPRNG unless the caller passes a
seeded source for experiments).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ltm.dp.calibration import analytic_gaussian_sigma
from ltm.dp.sensitivity import reference_code_rf_sensitivity, sgd_sensitivity, vector_sensitivity
from ltm.randomness import Randomness
from ltm.transforms import RandomFeatures, rff_spec

__all__ = [
    "MODES",
    "SOLVERS",
    "min_norm",
    "kaczmarz",
    "certified_radius",
    "algorithm1_calibration",
    "Algorithm1Calibration",
    "gaussian_output_perturbation",
    "gamma_output_perturbation",
    "sgd_random_features",
    "sgd_sensitivity",
    "rls_output_perturbation",
    "DPRandomFeatureRegressor",
]

MODES = ("certified", "paper_lemma6_not_dp", "reference_code_not_dp")
SOLVERS = ("gram", "pinv", "kaczmarz")


# ------------------------------------------------------------------------------------ solvers
def kaczmarz(A: np.ndarray, y: np.ndarray, iterations: int, randomness: Randomness) -> np.ndarray:
    """Randomised Kaczmarz from x0 = 0 (so iterates stay in the row space and the limit is the
    min-norm solution), rows drawn uniformly as the authors' code does (the paper's §4.1).

    Each step: ``x ← x + (y_i − ⟨A_i, x⟩)/‖A_i‖² · A_i``.  Sequential by nature: one numpy
    dot/axpy per step (``iterations`` = m in the paper: about one pass, far from interpolating).
    """
    A = np.asarray(A, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = A.shape[0]
    norms = np.einsum("ij,ij->i", A, A)
    rows = (randomness.stream().uint64(iterations) % np.uint64(m)).astype(np.int64)  # bias ≤ m/2^64
    x = np.zeros(A.shape[1])
    for i in rows:
        if norms[i] > 0:
            x += ((y[i] - A[i] @ x) / norms[i]) * A[i]
    return x


def min_norm(A: np.ndarray, y: np.ndarray, solver: str = "gram", *, iterations: int | None = None,
             randomness: Randomness | None = None) -> np.ndarray:
    """The minimum-norm least-squares solution ``A⁺y`` (the paper's Eq. (3); its solvers in §4.1).

    ``gram``: ``Aᵀ (AAᵀ)⁺ y`` through an eigendecomposition of the m × m Gram matrix (singular when
    rows repeat; eigenvalues below 1e-12·λ_max are treated as zero, like pinv's rcond) — cheap for
    m ≪ N.  ``pinv``: ``np.linalg.pinv(A) @ y`` (full SVD, as the paper's Table 1).  ``kaczmarz``:
    :func:`kaczmarz` with ``iterations`` (default m).
    """
    A = np.asarray(A, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if solver == "pinv":
        return np.linalg.pinv(A) @ y
    if solver == "kaczmarz":
        return kaczmarz(A, y, iterations or A.shape[0], randomness or Randomness.system())
    if solver != "gram":
        raise ValueError(f"unknown solver {solver!r}; choose one of {SOLVERS}")
    if A.shape[0] > A.shape[1]:  # under-parametrised: the normal equations are the smaller system
        evals, evecs = np.linalg.eigh(A.T @ A)
        keep = evals > 1e-12 * max(evals[-1], 1e-300)
        return evecs[:, keep] @ ((evecs[:, keep].T @ (A.T @ y)) / evals[keep])
    evals, evecs = np.linalg.eigh(A @ A.T)
    keep = evals > 1e-12 * max(evals[-1], 1e-300)
    return A.T @ (evecs[:, keep] @ ((evecs[:, keep].T @ y) / evals[keep]))


# ------------------------------------------------------------------------------------ calibration
def certified_radius(m: int, label_bound: float, eta: float = 3 / 8) -> float:
    """Lemma 6's coefficient radius in the normalised parametrisation: ``B√m/√(1−2η)``."""
    if not 0 < eta < 0.5:
        raise ValueError(f"eta must be in (0, 1/2), got {eta}")
    return label_bound * math.sqrt(m) / math.sqrt(1 - 2 * eta)


@dataclass(frozen=True)
class Algorithm1Calibration:
    """What Algorithm 1 adds: the claimed ℓ2 sensitivity, the noise σ, the clip radius (or None)
    and whether the result is really (ε, δ)-DP."""

    mode: str
    sensitivity: float
    sigma: float
    radius: float | None
    dp: bool
    guarantee: str
    details: dict[str, Any] = field(default_factory=dict)


def algorithm1_calibration(mode: str, *, m: int, n_features: int, epsilon: float, delta: float,  # noqa: PLR0913 - Algorithm 1's parameters as the paper names them, keyword-only
                           label_bound: float = 1.0, eta: float = 3 / 8, radius: float | None = None,
                           ref_delta_c: float = 4.0) -> Algorithm1Calibration:
    """Sensitivity and σ of Algorithm 1 in ``mode`` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    classical = math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    if mode == "certified":
        R = float(radius) if radius is not None else certified_radius(m, label_bound, eta)
        if not R > 0:
            raise ValueError(f"radius must be > 0, got {R}")
        sens = vector_sensitivity(R)
        sigma = analytic_gaussian_sigma(epsilon, delta, sens)
        return Algorithm1Calibration(
            mode, sens, sigma, R, True,
            f"({epsilon:g}, {delta:g})-DP (replace-one; labels clipped to |y| ≤ {label_bound:g}, coefficients "
            f"clipped to norm {R:.4g}, analytic Gaussian σ = {sigma:.4g} for Δ = 2R = {sens:.4g})",
            {"label_bound": label_bound, "eta": eta})
    if mode == "paper_lemma6_not_dp":
        sens = vector_sensitivity(certified_radius(m, label_bound, eta))  # Lemma 6's 2‖y‖/√(1−2η)
        sigma = classical * sens
        return Algorithm1Calibration(
            mode, sens, sigma, None, False,
            f"NOT DP: Lemma 6's Δ = {sens:.4g} (= 2‖y‖/√(1−2η), η = {eta:g}) holds only if λ_min(ΦΦᵀ) ≥ 1−2η, which "
            f"fails for N < 4m or repeated rows; no clipping enforces it (reproduction mode)",
            {"label_bound": label_bound, "eta": eta})
    sens = reference_code_rf_sensitivity(ref_delta_c, n_features)
    sigma = classical * sens
    return Algorithm1Calibration(
        mode, sens, sigma, None, False,
        f"NOT DP: the reference code's Δ = {ref_delta_c:g}/√N = {sens:.4g} on √(2/N)·cos coefficients is √N too "
        f"small (Lemma 6 is for unnormalised features); reproduction of the paper's figures only",
        {"ref_delta_c": ref_delta_c})


def gaussian_output_perturbation(c: np.ndarray, sigma: float, randomness: Randomness) -> np.ndarray:
    """``c + N(0, σ² I)``."""
    return c + randomness.stream().normal(c.shape[0], scale=sigma)


def gamma_output_perturbation(c: np.ndarray, sensitivity: float, epsilon: float,
                              randomness: Randomness) -> np.ndarray:
    """Chaudhuri et al.'s [20] noise: ``c + R·u``, ``R ~ Γ(shape N, scale Δ/ε)``, u uniform on the
    sphere (density ∝ exp(−ε‖b‖/Δ): pure ε-DP for ℓ2 sensitivity Δ; the paper's §3.3)."""
    N = c.shape[0]
    g = randomness.child("direction").stream().normal(N)
    R = randomness.child("radius").stream().gamma(float(N), sensitivity / epsilon, 1)[0]
    return c + R * g / np.linalg.norm(g)


def sgd_random_features(A: np.ndarray, y: np.ndarray, *, iterations: int, lr: float, epsilon: float,
                        delta: float, randomness: Randomness) -> tuple[np.ndarray, np.ndarray, float]:
    """The SGD baseline [25] (Wang & Guo, as the paper's §4.1 runs it): plain single-sample SGD from 0
    on ½(A_i c − y_i)², then one Gaussian draw with σ = √(2 ln(2.5/δ))·Δ_SGD/ε.  Returns
    ``(c_nonprivate, c_private, σ)``.

    Not clipped DP-SGD: its guarantee is [25]'s theorem, taken as the paper used it.
    """
    A = np.asarray(A, dtype=np.float64)
    m = A.shape[0]
    rows = (randomness.child("rows").stream().uint64(iterations) % np.uint64(m)).astype(np.int64)
    c = np.zeros(A.shape[1])
    for i in rows:
        c -= (lr * (A[i] @ c - y[i])) * A[i]
    sigma = math.sqrt(2 * math.log(2.5 / delta)) * sgd_sensitivity(m, iterations, lr, delta) / epsilon
    return c, gaussian_output_perturbation(c, sigma, randomness.child("noise")), sigma


def rls_output_perturbation(X: np.ndarray, y: np.ndarray, lam: float, sigma: float,
                            randomness: Randomness) -> tuple[np.ndarray, np.ndarray]:
    """Private regularised least squares as the paper's fairness section: ``w = (XᵀX + λI)⁻¹Xᵀy``
    plus the same Gaussian noise as the RF model ("equal noise", not a calibrated guarantee for
    this objective: §4.2's 2/(mλ) assumes a normalised one).  Returns ``(w, w + z)``."""
    X = np.asarray(X, dtype=np.float64)
    w = np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ y)
    return w, gaussian_output_perturbation(w, sigma, randomness)


# ------------------------------------------------------------------------------------ estimator
class DPRandomFeatureRegressor:
    """Algorithm 1 with an sklearn-style surface: ``fit(X, y)``, ``predict(X)``, ``coef_``.

    ``X`` are inputs on a public scale (the caller standardises with public constants); the map
    is ``RandomFeatures`` with ``n_features``, ``bandwidth``, ``kernel``, ``feature_map`` and a
    public 32-byte ``seed`` (fresh random when None; it is public, part of the model).  ``predict``
    takes the same raw inputs.  Attributes after fit: ``coef_`` (private coefficients, one per
    feature entry), ``nonprivate_coef_`` (kept only for experiments: not private), ``privacy_``
    (the calibration and the guarantee), ``clipped_`` (whether the radius clip was active —
    a non-private diagnostic).
    """

    def __init__(self, n_features: int, bandwidth: float, *, epsilon: float, delta: float = 1e-5,  # noqa: PLR0913 - the estimator's hyper-parameters, scikit-learn style (keyword-only, get_params)
                 mode: str = "certified", eta: float = 3 / 8, label_bound: float = 1.0,
                 radius: float | None = None, solver: str = "gram", iterations: int | None = None,
                 kernel: str = "gaussian", feature_map: str = "cos", seed: bytes | None = None,
                 ref_delta_c: float = 4.0, randomness: Randomness | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        if solver not in SOLVERS:
            raise ValueError(f"unknown solver {solver!r}; choose one of {SOLVERS}")
        self.n_features, self.bandwidth = int(n_features), float(bandwidth)
        self.epsilon, self.delta, self.mode, self.eta = float(epsilon), float(delta), mode, float(eta)
        self.label_bound, self.radius, self.solver, self.iterations = float(label_bound), radius, solver, iterations
        self.kernel, self.feature_map, self.ref_delta_c = kernel, feature_map, float(ref_delta_c)
        self.randomness = randomness or Randomness.system()
        self.seed = seed if seed is not None else self.randomness.child("feature-seed").bytes(32)

    def _map(self, d: int) -> RandomFeatures:
        spec = rff_spec([f"x{j}" for j in range(d)], n_features=self.n_features, bandwidth=self.bandwidth,
                        seed=self.seed, kernel=self.kernel, feature_map=self.feature_map)
        return RandomFeatures(spec, d)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """The random-feature map of ``X`` (rows, d): float64 (rows, feature entries)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (rows, d), got shape {X.shape}")
        return self._map(X.shape[1]).apply(X)

    def fit(self, X: np.ndarray, y: np.ndarray) -> "DPRandomFeatureRegressor":
        """Fit Algorithm 1 on ``X`` (rows, d) and ``y`` (rows,): minimum-norm coefficients in feature
        space, clipped to the calibrated radius, then Gaussian output perturbation (``coef_``);
        ``certified`` mode clips ``y`` to ±``label_bound`` first.  Returns self.
        """
        A = self.transform(X)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != A.shape[0]:
            raise ValueError(f"y has {y.shape[0]} entries, X has {A.shape[0]} rows")
        self.n_features_in_ = int(np.asarray(X).shape[1])
        if self.mode == "certified":
            y = np.clip(y, -self.label_bound, self.label_bound)
        c = min_norm(A, y, self.solver, iterations=self.iterations, randomness=self.randomness.child("solver"))
        cal = algorithm1_calibration(self.mode, m=A.shape[0], n_features=A.shape[1], epsilon=self.epsilon,
                                     delta=self.delta, label_bound=self.label_bound, eta=self.eta,
                                     radius=self.radius, ref_delta_c=self.ref_delta_c)
        self.clipped_ = False
        if cal.radius is not None:
            norm = float(np.linalg.norm(c))
            self.clipped_ = norm > cal.radius
            if self.clipped_:
                c = c * (cal.radius / norm)
        self.nonprivate_coef_ = c
        self.coef_ = gaussian_output_perturbation(c, cal.sigma, self.randomness.child("noise"))
        self.privacy_ = {"mode": cal.mode, "dp": cal.dp, "guarantee": cal.guarantee, "sensitivity": cal.sensitivity,
                         "sigma": cal.sigma, "radius": cal.radius, "epsilon": self.epsilon, "delta": self.delta,
                         "randomness": self.randomness.label, **cal.details}
        return self

    def predict(self, X: np.ndarray, *, nonprivate: bool = False) -> np.ndarray:
        """Predictions (rows,) for raw ``X`` (rows, d) from the private ``coef_`` (``nonprivate``: from the
        unperturbed coefficients, for experiments only).
        """
        if not hasattr(self, "coef_"):
            raise RuntimeError("DPRandomFeatureRegressor is not fitted; call fit() first")
        return self.transform(X) @ (self.nonprivate_coef_ if nonprivate else self.coef_)

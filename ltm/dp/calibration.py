"""Noise calibration for the LTM release (docs/architecture.md §4).

Pure functions, no I/O, no global state.  Everything here is closed-form or a one-dimensional root
search in float64 using only :mod:`math` (no scipy at runtime).

Modes (``plan_noise(calibration=...)``):

``tight`` (default, correct DP)
    Replace-one neighbours, rows clipped to norm ``C``.  The unscaled release
    ``Y = Σ_l S_l (V + G_l)`` moves by at most ``Δ₂ = 2C√s`` (Gaussian, ℓ2 clip) or
    ``Δ₁ = 2sC`` (Laplace, ℓ1 clip).  With at least ``L`` honest (client, piece) pairs in every
    row of ``Y``, the honest noise of one entry is ``N(0, σ_Y²)`` with ``σ_Y`` from the analytic
    Gaussian mechanism (Balle & Wang 2018), resp. ``Lap(b)`` with ``b = Δ₁/ε``; each pair adds
    ``N(0, σ_Y²/L)`` resp. ``Γ(1/L, b) − Γ(1/L, b)``; on the grid the discrete counterparts, the
    distributed discrete Gaussian and NB(1/L, e^{−1/t}) − NB(1/L, e^{−1/t}) (L of which are exactly
    one DLap(t), t = ⌈Δ₁⌉/ε).  Extra honest noise is post-processing.

``paper`` (NOT PRIVATE AS PRINTED — reproductions only)
    Burkhardt et al. Corollary 4.7 (sparse, Gaussian) and Corollary 4.10 (dense, Laplace/Gamma)
    exactly as printed.  Cor 4.7's constant is 4 where its own proof (§4.2, via Lemma 3.3)
    gives 16, so for ``s < 4`` its σ² is below even the per-piece requirement.

``interpolate(p)`` (Gaussian only)
    ``σ_c² = σ_Y² · L^(−p)``: ``p = 1`` is ``tight`` (distributed model), ``p = 0`` the local
    model where each client's noise alone makes its contribution (ε, δ)-DP.
"""
from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass
from enum import Enum
from typing import TypeVar

from ltm.dp import accounting
from ltm.dp.grid import rounding_widening
from ltm.dp.mechanisms import CALIBRATIONS, MECHANISMS, Calibration, Mechanism
from ltm.dp.polya import polya_variance
from ltm.dp.sensitivity import sketch_l1, sketch_l2
from ltm.errors import LtmError

__all__ = [
    "CalibrationError",
    "gaussian_delta",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
    "paper_sparse_gaussian_sigma",
    "paper_dense_laplace_scale",
    "NoisePlan",
    "plan_noise",
    "MECHANISMS",
    "CALIBRATIONS",
    "SKETCH_KINDS",
]

SKETCH_KINDS: tuple[str, ...] = ("sparse", "dense", "sum")
_E = TypeVar("_E", bound=Enum)

_SQRT2 = math.sqrt(2.0)
_SQRT_PI = math.sqrt(math.pi)
_LOG2 = math.log(2.0)
# Below this argument exp(u²)·erfc(u) is computed directly (erfc(25) ≈ 8e-274 is still a normal
# float and exp(625) does not overflow); above it the Laplace continued fraction converges in a
# handful of terms.
_ERFCX_SWITCH = 25.0
# Relative safety margin added to the bisection's feasible end before the final verification.
_SIGMA_ROUND_UP = 4e-12
_SIGMA_REL_TOL = 1e-13
# Generous multiple of the unit roundoff used in the error bound of the δ evaluation.
_ULP_SLACK = 32.0 * 2.0**-52


class CalibrationError(LtmError, ValueError):
    """A calibration request that cannot be honoured; the message says which input to change."""

    exit_code = 2


# --------------------------------------------------------------------------------------------
# input validation helpers
# --------------------------------------------------------------------------------------------


def _real(name: str, value: object) -> float:
    if isinstance(value, bool):
        raise CalibrationError(f"{name} must be a real number, got the bool {value!r}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CalibrationError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(x):
        raise CalibrationError(f"{name} must be finite, got {value!r}")
    return x


def _positive(name: str, value: object) -> float:
    x = _real(name, value)
    if x <= 0.0:
        raise CalibrationError(f"{name} must be > 0, got {value!r}")
    return x


def _delta_open(name: str, value: object) -> float:
    x = _real(name, value)
    if not 0.0 < x < 1.0:
        raise CalibrationError(f"{name} must satisfy 0 < {name} < 1, got {value!r}")
    return x


def _integer(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool):
        raise CalibrationError(f"{name} must be an integer, got the bool {value!r}")
    try:
        k = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise CalibrationError(
            f"{name} must be an integer, got {value!r} ({type(value).__name__})"
        ) from None
    if k < minimum:
        raise CalibrationError(f"{name} must be >= {minimum}, got {k}")
    return int(k)


# --------------------------------------------------------------------------------------------
# Gaussian mechanism
# --------------------------------------------------------------------------------------------


def _erfcx(u: float) -> float:
    """Scaled complementary error function exp(u²)·erfc(u) for u ≥ 0 (relative error ~1e-14)."""
    if u < _ERFCX_SWITCH:
        return math.exp(u * u) * math.erfc(u)
    # Laplace continued fraction: erfc(u) = e^{-u²}/√π · 1/(u + (1/2)/(u + 1/(u + (3/2)/(u + …)))).
    # For u ≥ 25 forty terms are far past double precision.
    tail = u
    for k in range(40, 0, -1):
        tail = u + (k / 2.0) / tail
    return 1.0 / (_SQRT_PI * tail)


def _log_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> tuple[float, float]:
    """(log δ, bound on the relative floating-point error of δ) for N(0, σ²) with sensitivity Δ.

    log δ is −inf when δ = 0 to double precision.  With a = Δ/(2σ), b = εσ/Δ (so 2ab = ε):
        δ = Φ(a − b) − e^ε Φ(−a − b).
    For b > a both terms are Gaussian tails; writing Φ(−x) = ½ e^{−x²/2} erfcx(x/√2) and using
    e^ε e^{−(a+b)²/2} = e^{−(b−a)²/2} gives
        δ = ½ e^{−(b−a)²/2} [erfcx((b−a)/√2) − erfcx((a+b)/√2)],
    evaluated in log space so it neither underflows nor overflows (large ε, tiny δ).

    The error bound is a deliberately generous first-order estimate (32 ulp per unit of error):
    for b > a each erfcx carries a relative error ≲ (1 + u₊²)·ulp (the exp(u²) factor), amplified
    by the cancellation (erfcx(u₋) + erfcx(u₊)) / (erfcx(u₋) − erfcx(u₊)), which is of the order
    of 1 + 2ε·σ²/Δ² and so matters for large ε·σ²/Δ² (tiny ε with tiny δ).  For b ≤ a,
    δ = F − S with F = Φ(a − b) (error ~ulp) and S = e^ε Φ(−a − b) (error ~(1 + u₊²)·ulp), so the
    bound is (F + S·(1 + u₊²)) / (F − S) in the same unit.
    """
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    u_plus = (a + b) / _SQRT2
    if b > a:
        u_minus = (b - a) / _SQRT2
        e_minus = _erfcx(u_minus)
        e_plus = _erfcx(u_plus)
        diff = e_minus - e_plus
        if diff <= 0.0:
            return -math.inf, math.inf
        cancel = (e_minus + e_plus) / diff
        rel_err = _ULP_SLACK * (1.0 + u_plus * u_plus) * cancel
        return -u_minus * u_minus - _LOG2 + math.log(diff), rel_err
    # b ≤ a: Φ(a − b) ≥ ½, δ is not small and the subtraction loses little.
    first = 1.0 - 0.5 * math.erfc((a - b) / _SQRT2)
    second = 0.5 * math.exp(-((b - a) ** 2) / 2.0) * _erfcx(u_plus)
    value = first - second
    if value <= 0.0:
        return -math.inf, math.inf
    rel_err = _ULP_SLACK * (first + second * (1.0 + u_plus * u_plus)) / value
    return math.log(value), rel_err


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """δ(ε) of the Gaussian mechanism N(0, σ²) with ℓ2 sensitivity Δ (Balle & Wang 2018, Thm 8).

    δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ).

    Evaluated through the scaled complementary error function in log space, so it keeps full
    relative precision down to δ ≈ 1e-300 and does not overflow for large ε.  ε = 0 is allowed
    (total-variation distance).  Raises :class:`CalibrationError` for σ ≤ 0, Δ ≤ 0, ε < 0 or
    non-finite inputs.
    """
    sigma_ = _positive("sigma", sigma)
    sens = _positive("sensitivity", sensitivity)
    eps = _real("epsilon", epsilon)
    if eps < 0.0:
        raise CalibrationError(f"epsilon must be >= 0, got {epsilon!r}")
    log_delta, _ = _log_gaussian_delta(sigma_, eps, sens)
    return min(1.0, max(0.0, math.exp(log_delta)))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest σ with gaussian_delta(σ, ε, Δ) ≤ δ (Balle & Wang 2018, analytic Gaussian mechanism).

    Works for any ε > 0 (including ε ≥ 1) and 0 < δ < 1, except where double precision cannot
    resolve δ(σ) near the solution (ε ≤ 1e-14 with δ ≤ 1e-15 or so, e.g. ε = 1e-20, δ = 1e-100):
    there it raises :class:`CalibrationError` rather than return an unverified σ.  δ depends on σ
    only through σ/Δ and is strictly decreasing in it, so the root is bracketed by doubling/halving and then bisected
    in log σ to relative precision ~1e-13.  The feasible end is then rounded up by 4e-12
    (relative) and re-verified with the caller's Δ, counting the δ evaluation's own rounding-error
    bound against the result (δ(σ)·(1 + err) ≤ δ; the bump doubles until that holds).  So the
    returned σ satisfies the inequality even allowing for float error, and exceeds the exact
    minimum by ~4e-12 relatively where δ(σ) is well conditioned.  Where it is not (ε·σ²/Δ² ≫ 1:
    small ε with small δ) the error bound of δ, and so the bump, grow roughly like 1/ε: ~2e-8 at
    ε = 1e-3, ~1e-6 at ε = 1e-5, up to tens of per cent (several times just before the refusal)
    for ε ≲ 1e-10; always on the safe side.
    """
    eps = _positive("epsilon", epsilon)
    dlt = _delta_open("delta", delta)
    sens = _positive("sensitivity", sensitivity)
    log_target = math.log(dlt)

    def feasible(tau: float) -> bool:  # tau = σ/Δ
        return _log_gaussian_delta(tau, eps, 1.0)[0] <= log_target

    hi = 1.0
    for _ in range(2100):
        if feasible(hi):
            break
        hi *= 2.0
    else:  # pragma: no cover - δ(σ) → 0 as σ → ∞, unreachable for finite inputs
        raise CalibrationError(f"no finite sigma reaches delta={dlt!r} at epsilon={eps!r}")
    lo = hi / 2.0
    for _ in range(2100):
        if not feasible(lo):
            break
        lo /= 2.0
    else:  # pragma: no cover - δ(σ) → 1 as σ → 0
        raise CalibrationError(f"could not bracket sigma for epsilon={eps!r}, delta={dlt!r}")

    # Invariant: feasible(hi), not feasible(lo).
    while hi - lo > _SIGMA_REL_TOL * hi:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        if feasible(mid):
            hi = mid
        else:
            lo = mid

    # Final verification with the caller's Δ, counting the evaluation's own rounding error
    # against us: accept σ only if δ(σ)·(1 + err) ≤ δ.  Each retry doubles the bump.
    bump = _SIGMA_ROUND_UP
    sigma = hi * sens * (1.0 + bump)
    for _ in range(200):
        log_delta, rel_err = _log_gaussian_delta(sigma, eps, sens)
        if log_delta + math.log1p(rel_err) <= log_target:
            return sigma
        bump *= 2.0
        sigma = hi * sens * (1.0 + bump)
    # Reached when δ at the bracket end underflowed (log δ = −inf with an infinite error bound): tiny ε
    # with tiny δ, where the two terms of δ agree to double precision.
    raise CalibrationError(
        f"could not verify sigma for epsilon={eps!r}, delta={dlt!r}, sensitivity={sens!r}"
    )


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sqrt(2 ln(1.25/δ)) Δ / ε (Dwork & Roth Thm A.1; spec Lemma 3.3).

    Valid only for ε < 1: raises :class:`CalibrationError` otherwise (use
    :func:`analytic_gaussian_sigma`, which is valid for every ε and always at least as tight).
    """
    eps = _positive("epsilon", epsilon)
    dlt = _delta_open("delta", delta)
    sens = _positive("sensitivity", sensitivity)
    if eps >= 1.0:
        raise CalibrationError(
            f"the classical Gaussian bound sqrt(2 ln(1.25/delta))*sensitivity/epsilon is only "
            f"valid for epsilon < 1, got epsilon={eps!r}; use analytic_gaussian_sigma instead"
        )
    return math.sqrt(2.0 * math.log(1.25 / dlt)) * sens / eps


# --------------------------------------------------------------------------------------------
# the paper's formulas (reproduction only)
# --------------------------------------------------------------------------------------------


def paper_sparse_gaussian_sigma(
    epsilon: float, delta: float, eta: float, n: int, m: int, s: int, d: int, t_prime: int
) -> float:
    """Per-client σ of Burkhardt et al. Corollary 4.7 EXACTLY AS PRINTED.

    σ² = 4 s³ η² · ln(1.25 s / (δ/d − m·exp(−(n − s − t')/(8m)))) · m d² / (ε² (n − s − t')).

    NOT PRIVATE AS PRINTED: its own proof (§4.2, via Lemma 3.3) gives the constant 16, not 4.
    Use only to reproduce the paper.  Raises :class:`CalibrationError` if
    n − s − t' ≤ 0 or δ/d ≤ m·exp(−(n − s − t')/(8m)) (n too small: the paper's zero-output
    branch applies, the clients must send zeros instead of noised rows).
    """
    eps = _positive("epsilon", epsilon)
    dlt = _delta_open("delta", delta)
    eta_ = _positive("eta", eta)
    n_ = _integer("n", n, 1)
    m_ = _integer("m", m, 1)
    s_ = _integer("s", s, 1)
    d_ = _integer("d", d, 1)
    t_ = _integer("t_prime", t_prime, 0)
    free = n_ - s_ - t_
    if free <= 0:
        raise CalibrationError(
            f"Corollary 4.7 needs n - s - t_prime > 0, got n={n_}, s={s_}, t_prime={t_} "
            f"(n - s - t_prime = {free}); increase n or lower s / t_prime"
        )
    failure = m_ * math.exp(-free / (8.0 * m_))
    denom = dlt / d_ - failure
    if denom <= 0.0:
        needed = 8.0 * m_ * math.log(d_ * m_ / dlt) + s_ + t_
        raise CalibrationError(
            f"n={n_} is too small for Corollary 4.7: delta/d = {dlt / d_:.3g} <= "
            f"m*exp(-(n-s-t_prime)/(8m)) = {failure:.3g}, so the log argument is undefined and the "
            f"paper's zero-output branch applies; need n > 8 m ln(d m / delta) + s + t_prime "
            f"= {needed:.6g} (or smaller m, larger delta)"
        )
    sigma2 = (
        4.0 * s_**3 * eta_**2 * math.log(1.25 * s_ / denom) * m_ * d_**2 / (eps**2 * free)
    )
    return math.sqrt(sigma2)


def paper_dense_laplace_scale(epsilon: float, eta: float, m: int, d: int) -> float:
    """Laplace scale b = 2 η m² d / ε of Burkhardt et al. Corollary 4.10 (dense sketch), as printed."""
    eps = _positive("epsilon", epsilon)
    eta_ = _positive("eta", eta)
    m_ = _integer("m", m, 1)
    d_ = _integer("d", d, 1)
    return 2.0 * eta_ * m_**2 * d_ / eps


# --------------------------------------------------------------------------------------------
# the plan the randomizer, the gate and the privacy report share
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoisePlan:
    """Everything the randomizer, the release gate and the privacy report need about the noise.

    Real-valued fields are in data units; ``grid_*`` fields in grid steps 2^-f.  A plan with
    ``frac_bits = 0`` is *continuous* (no grid): the papers' float mechanisms, for planning and the
    seeded simulations of ``ltm/experiments/``; a party only samples from a grid plan.

    Attributes:
        mechanism: :class:`~ltm.dp.mechanisms.Mechanism` (a ``str``).
        calibration: :class:`~ltm.dp.mechanisms.Calibration` (a ``str``).
        epsilon: the ε the release is calibrated for.
        delta: the δ (``0.0`` for Laplace, which is pure ε-DP).
        sensitivity: Δ₂ (Gaussian) or Δ₁ (Laplace) of the unscaled release ``Y = Σ_l S_l (V + G_l)``
            under replace-one neighbours, *including* the rounding widening.
        min_honest_load: L, the honest (client, piece) pairs every release row must hold (the
            gate enforces ``min_r load_r − t′ ≥ L``).  For continuous ``paper`` Laplace the Gamma
            split count is the paper's ``n/m − t′`` instead (see ``gamma_shape``).
        sigma_client: std of each (client, piece, column) noise draw (data units).
        sigma_release: std of the noise in one unscaled release entry when exactly the split count
            of honest pairs lands in it (L draws for Gaussian; one DLap(t) for grid Laplace).
        laplace_scale: Laplace: the scale of each draw (data units; grid: t·2^-f); Gaussian ``0.0``.
        gamma_shape: Laplace: the share of one release's noise each pair draws: continuous plans
            split Lap(b) into Γ(shape, b) differences, tight grid plans DLap(t) into
            NB(shape, e^{−1/t}) differences (shape 1/L), paper grid plans draw a whole DLap(t)
            (``1.0``); :attr:`laplace_pieces` is 1/shape.  Gaussian: ``0.0``.
        interpolate_p: the exponent p of ``interpolate``, else ``None``.
        frac_bits: f of the grid (0: a continuous plan).
        base_sensitivity: the release kind's stated Δ for unrounded vectors.
        rounding_widening: what rounding to the grid adds to it (:func:`ltm.dp.grid.rounding_widening`).
        grid_sigma2: Gaussian: σ_c² in grid steps² (the discrete Gaussian's parameter); else 0.
        grid_scale: Laplace: t in grid steps (the discrete Laplace's parameter); else 0.
        grid_l1_sensitivity: Δ₁ of the release in grid steps (Gaussian: ≤ √(2·pieces·W)·Δ₂).
        noise_factors: Gaussian per-entry variance factors (W,) in (0, 1]: entry j of a draw has
            variance factor_j·σ_c² (the gram release: 1 on the diagonal, ½ off it,
            docs/architecture.md "Per-entry noise scales"); ``sensitivity`` is then the bound on
            √(Σ_j μ_j²/factor_j).  None: i.i.d. noise (every factor 1).
    """

    mechanism: Mechanism
    calibration: Calibration
    epsilon: float
    delta: float
    sensitivity: float
    min_honest_load: int
    sigma_client: float
    sigma_release: float
    laplace_scale: float
    gamma_shape: float
    interpolate_p: float | None
    frac_bits: int = 0
    base_sensitivity: float = 0.0
    rounding_widening: float = 0.0
    grid_sigma2: float = 0.0
    grid_scale: float = 0.0
    grid_l1_sensitivity: float = 0.0
    noise_factors: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.noise_factors is not None and not isinstance(self.noise_factors, tuple):  # from JSON: a list
            object.__setattr__(self, "noise_factors", tuple(float(x) for x in self.noise_factors))

    def to_dict(self) -> dict:
        """JSON-friendly dict (plain str/int/float/None values; ``noise_factors`` a list, absent when None)."""
        out = asdict(self)
        out["mechanism"], out["calibration"] = str(self.mechanism), str(self.calibration)
        if self.noise_factors is None:  # i.i.d. plans keep the dict they always had
            del out["noise_factors"]
        else:
            out["noise_factors"] = list(self.noise_factors)
        return out

    @property
    def on_grid(self) -> bool:
        """Whether this plan is for the grid (integer noise), i.e. samplable by a party."""
        return self.frac_bits > 0

    @property
    def grid_noise_sd(self) -> float:
        """Per-client noise sd in grid steps (Gaussian ≤ σ_c; DLap(t): ≈ √2·t)."""
        return math.ldexp(self.sigma_client, self.frac_bits)

    @property
    def laplace_pieces(self) -> int:
        """Laplace: the pieces one release's noise is split into, 1/``gamma_shape`` (L for a tight
        grid plan: NB(1/L, p) − NB(1/L, p) per pair; 1 for whole DLap(t) draws)."""
        if self.mechanism != Mechanism.LAPLACE:
            raise ValueError("laplace_pieces is defined for Laplace plans only")
        return max(1, round(1.0 / self.gamma_shape))

    @property
    def min_noise_factor(self) -> float:
        """The smallest per-entry variance factor (1.0 for i.i.d. noise)."""
        return min(self.noise_factors) if self.noise_factors else 1.0

    @property
    def grid_noise_sd_min(self) -> float:
        """The smallest per-entry noise sd in grid steps (what :func:`ltm.dp.grid.noise_grid_problem` checks)."""
        return self.grid_noise_sd * math.sqrt(self.min_noise_factor)

    @property
    def grid_sensitivity(self) -> float:
        """The release's Δ₂ (Gaussian) or Δ₁ (Laplace) in grid steps."""
        return math.ldexp(self.sensitivity, self.frac_bits)

    def zcdp_rho(self) -> float:
        """Gaussian grid plans: ρ of the L-fold discrete Gaussian sum (:func:`ltm.dp.accounting.kls_rho`)."""
        if self.mechanism != Mechanism.GAUSSIAN or not self.on_grid:
            raise ValueError("zcdp_rho is defined for Gaussian grid plans only")
        return accounting.kls_rho(math.sqrt(self.grid_sigma2), self.min_honest_load, self.grid_sensitivity,
                                  self.grid_l1_sensitivity, math.sqrt(self.min_noise_factor))

    def dp_event(self):
        """The dp-accounting ``DpEvent`` of the release under the gate's guarantee (grid plans only)."""
        if not self.on_grid:
            raise ValueError("a continuous noise plan (frac_bits = 0) has no discrete dp event")
        if self.mechanism == Mechanism.GAUSSIAN:
            return accounting.gaussian_event(math.sqrt(self.grid_sigma2), self.min_honest_load,
                                             self.grid_sensitivity, self.grid_l1_sensitivity,
                                             math.sqrt(self.min_noise_factor))
        return accounting.laplace_event(self.grid_scale, self.grid_sensitivity)


def _choice(name: str, value: object, enum_type: type[_E]) -> _E:
    try:
        return enum_type(value)
    except ValueError:
        listed = ", ".join(repr(v.value) for v in enum_type)
        raise CalibrationError(f"unknown {name} {value!r}; valid values are {listed}") from None


def _require(name: str, value: object, why: str) -> object:
    if value is None:
        raise CalibrationError(f"{why} needs the argument {name}; pass {name}=...")
    return value


# --------------------------------------------------------------------------------------------
# plan_noise's steps: check the arguments, solve the mechanism's scale, build the NoisePlan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PlanArgs:
    """:func:`plan_noise`'s arguments once checked (the names are its local ones)."""

    mech: Mechanism
    calib: Calibration
    kind: str
    eps: float
    delta: float  # Gaussian: 0 < δ < 1; Laplace: 0.0 (pure ε-DP)
    clip: float
    s: int
    load: int
    t_prime: int
    n: int | None
    m: int | None
    d: int | None
    frac_bits: int
    width: int | None
    factors: tuple[float, ...] | None
    rho: float | None
    sensitivity: float | None  # the caller's Δ; None: the sketch's own
    p: float | None  # interpolate's exponent

    @property
    def scale(self) -> float:
        """Grid steps per data unit (1 for a continuous plan)."""
        return math.ldexp(1.0, self.frac_bits)

    def common(self) -> dict:
        """The NoisePlan fields every mechanism fills the same way."""
        return dict(mechanism=self.mech, calibration=self.calib, epsilon=self.eps, min_honest_load=self.load,
                    interpolate_p=self.p, frac_bits=self.frac_bits)


def _sketch_kind(value: object) -> str:
    if not isinstance(value, str) or value not in SKETCH_KINDS:
        listed = ", ".join(repr(v) for v in SKETCH_KINDS)
        raise CalibrationError(f"unknown sketch_kind {value!r}; valid values are {listed}")
    return value


def _plan_delta(mech: Mechanism, delta: object) -> float:
    """Gaussian: 0 < δ < 1.  Laplace: any 0 ≤ δ < 1 is accepted and recorded as 0 (pure ε-DP)."""
    if mech == Mechanism.GAUSSIAN:
        return _delta_open("delta", delta)
    if not 0.0 <= _real("delta", delta) < 1.0:
        raise CalibrationError(
            f"delta must satisfy 0 <= delta < 1 (it is ignored for the pure-epsilon Laplace "
            f"mechanism and recorded as 0), got {delta!r}"
        )
    return 0.0


def _optional_count(name: str, value: object) -> int | None:
    return None if value is None else _integer(name, value, 1)


def _check_grid_and_rows(kind: str, s: int, m: int | None, frac_bits: int, width: int | None) -> None:
    """A grid plan needs W; a given m must hold s distinct rows (all of them for a dense sketch)."""
    if frac_bits and width is None:
        raise CalibrationError("a grid plan (frac_bits > 0) needs width= (values per client per piece)")
    if m is None:
        return
    if kind == "dense" and s != m:
        raise CalibrationError(
            f"a dense sketch puts every client in all m rows, so s must equal m; got s={s}, m={m}"
        )
    if s > m:
        raise CalibrationError(
            f"s={s} exceeds m={m}: a sparse sketch needs s distinct rows per column; lower s or raise m"
        )


def _plan_noise_factors(noise_factors, mech: Mechanism, sensitivity: object,
                        width: int | None) -> tuple[float, ...] | None:
    """Per-entry variance factors: Gaussian only, W values in (0, 1], with an explicit sensitivity."""
    if noise_factors is None:
        return None
    factors = tuple(float(x) for x in noise_factors)
    if mech != Mechanism.GAUSSIAN:
        raise CalibrationError("noise_factors are for the Gaussian mechanism (Laplace draws are i.i.d.)")
    if sensitivity is None or (width is not None and len(factors) != width) \
            or not all(0.0 < x <= 1.0 for x in factors):
        raise CalibrationError(f"noise_factors must be {width} values in (0, 1] with an explicit sensitivity, "
                               f"got {len(factors)} values")
    return factors


def _plan_zcdp_rho(zcdp_rho: object, mech: Mechanism, calib: Calibration) -> float | None:
    if zcdp_rho is None:
        return None
    rho = _positive("zcdp_rho", zcdp_rho)
    if mech != Mechanism.GAUSSIAN or calib == Calibration.PAPER:
        raise CalibrationError(
            f"zcdp_rho is the zCDP target of the tight or interpolated Gaussian; drop it for "
            f"mechanism={mech.value!r} with calibration={calib.value!r}"
        )
    return rho


def _plan_sensitivity(sensitivity: object, calib: Calibration) -> float | None:
    if sensitivity is None:
        return None
    sens = _positive("sensitivity", sensitivity)
    if calib == Calibration.PAPER:
        raise CalibrationError(
            "calibration='paper' reproduces Burkhardt et al.'s sketch formulas and takes no explicit "
            "sensitivity; use calibration='tight' for a lifted release kind"
        )
    return sens


def _plan_interpolate_p(interpolate_p: object, mech: Mechanism, calib: Calibration) -> float | None:
    """interpolate's exponent p ∈ [0, 1]: required there (Gaussian only), refused elsewhere."""
    if calib != Calibration.INTERPOLATE:
        if interpolate_p is not None:
            raise CalibrationError(
                f"interpolate_p={interpolate_p!r} is only used with calibration='interpolate', "
                f"got calibration={calib.value!r}; drop interpolate_p or switch calibration"
            )
        return None
    if mech != Mechanism.GAUSSIAN:
        raise CalibrationError(
            f"calibration='interpolate' is only defined for mechanism='gaussian', got "
            f"mechanism={mech.value!r}; use calibration='tight' or 'paper' for laplace"
        )
    p = _real("interpolate_p", _require("interpolate_p", interpolate_p, "calibration='interpolate'"))
    if not 0.0 <= p <= 1.0:
        raise CalibrationError(f"interpolate_p must lie in [0, 1], got {interpolate_p!r}")
    return p


def _paper_sizes(a: _PlanArgs, why: str) -> tuple[int, int, int]:
    """(n, m, d), which the paper's formulas need; a missing one is refused, named."""
    n, m, d = (_require(name, value, why) for name, value in (("n", a.n), ("m", a.m), ("d", a.d)))
    assert isinstance(n, int) and isinstance(m, int) and isinstance(d, int)
    return n, m, d


def _sigma_client(a: _PlanArgs, sens: float, grid_sens: float, grid_l1: float) -> float:
    """σ_c of the calibration (data units), before a grid plan's float parameter rounds it.

    Tight: σ_c from the distributed discrete Gaussian's zCDP (Kairouz, Liu & Steinke 2021) and
    dp_accounting's conversion (:func:`ltm.dp.accounting.calibrate_discrete_gaussian`); a continuous
    plan (the float Gaussian of the seeded simulations and the planner's estimates) uses the analytic
    Gaussian mechanism (Balle & Wang 2018), exact for a sum of float Gaussians.  Interpolate scales
    the tight σ_c by L^((1−p)/2); paper is Corollary 4.7.
    """
    if a.calib == Calibration.PAPER:
        n, m, d = _paper_sizes(a, "calibration='paper' (Corollary 4.7)")
        return paper_sparse_gaussian_sigma(a.eps, a.delta, a.clip, n, m, a.s, d, a.t_prime)
    if a.frac_bits:
        tau_ratio = math.sqrt(min(a.factors)) if a.factors else 1.0
        tight = accounting.calibrate_discrete_gaussian(a.eps, a.delta, grid_sens, a.load, grid_l1, tau_ratio,
                                                       a.rho) / a.scale
    else:
        tight = analytic_gaussian_sigma(a.eps, a.delta, sens) / math.sqrt(a.load)
    return tight if a.calib == Calibration.TIGHT else tight * math.sqrt(a.load) ** (1 - a.p)  # type: ignore[operator]


def _gaussian_plan(a: _PlanArgs) -> NoisePlan:
    """The Gaussian plan: Δ₂ (widened by the rounding on a grid), σ_c and σ_Y."""
    base = sketch_l2(a.clip, a.s) if a.sensitivity is None else a.sensitivity
    widen = rounding_widening("l2", a.width, a.s, a.frac_bits) if a.frac_bits else 0.0  # type: ignore[arg-type]
    sens = base + widen
    grid_sens = sens * a.scale
    grid_l1 = math.sqrt(2.0 * a.s * a.width) * grid_sens if a.frac_bits else 0.0  # type: ignore[operator]
    sigma_c = _sigma_client(a, sens, grid_sens, grid_l1)
    if a.frac_bits:  # the sampler's parameter is σ_c² as a float; report the σ_c it really draws with
        grid_sigma2 = (sigma_c * a.scale) ** 2
        sigma_c = math.sqrt(grid_sigma2) / a.scale
        sigma_r = sigma_c * math.sqrt(a.load)
    else:  # tight: σ_Y itself, unrounded
        grid_sigma2 = 0.0
        sigma_r = analytic_gaussian_sigma(a.eps, a.delta, sens) if a.calib == Calibration.TIGHT \
            else sigma_c * math.sqrt(a.load)
    return NoisePlan(
        **a.common(), delta=a.delta, sensitivity=float(sens), sigma_client=float(sigma_c),
        sigma_release=float(sigma_r), laplace_scale=0.0, gamma_shape=0.0,
        base_sensitivity=float(base), rounding_widening=float(widen), grid_sigma2=float(grid_sigma2),
        grid_l1_sensitivity=float(grid_l1), noise_factors=a.factors,
    )


def _laplace_scale(a: _PlanArgs) -> tuple[float, float, float]:
    """(Δ₁ of the unrounded release, the Laplace scale b, the Gamma shape) of the calibration.

    Tight: b = Δ₁/ε split over the L honest pairs.  Paper (Corollary 4.10, dense sketch only):
    b = 2ηm²d/ε split over the n/m − t′ honest clients of each piece row.
    """
    if a.calib == Calibration.TIGHT:
        base = sketch_l1(a.clip, a.s) if a.sensitivity is None else a.sensitivity
        return base, base / a.eps, 1.0 / a.load
    why = "calibration='paper' with mechanism='laplace' (Corollary 4.10)"
    if a.kind != "dense":
        raise CalibrationError(
            f"{why} is defined for the dense sketch only (deterministic n/m load per piece "
            f"row); pass sketch_kind='dense' with s=m"
        )
    n, m, d = _paper_sizes(a, why)
    split = n / m - a.t_prime
    if split <= 0.0:
        raise CalibrationError(
            f"{why} splits the noise over n/m - t_prime honest clients per piece row, got "
            f"n={n}, m={m}, t_prime={a.t_prime} (n/m - t_prime = {split:.6g} <= 0); "
            f"increase n or lower m / t_prime"
        )
    return sketch_l1(a.clip, m), paper_dense_laplace_scale(a.eps, a.clip, m, d), 1.0 / split  # dense: s = m


def _laplace_plan(a: _PlanArgs) -> NoisePlan:
    """The Laplace plan: continuous, Γ(shape, b) differences; on the grid Pólya pieces of one DLap(t).

    On the grid t = ⌈Δ₁⌉/ε in grid steps (tight, :func:`ltm.dp.accounting.discrete_laplace_scale`)
    or the paper's b as printed.  Tight splits DLap(t) into L pieces: each honest (client, piece)
    pair draws NB(1/L, p) − NB(1/L, p), p = e^{−1/t} (:func:`ltm.dp.polya.polya_laplace`), so the
    L honest pairs the gate guarantees in an entry sum to exactly one DLap(t) (more are
    post-processing; docs/architecture.md §4).  Paper keeps a whole DLap(t) per pair.
    """
    base, b, shape = _laplace_scale(a)
    if not a.frac_bits:
        return NoisePlan(
            **a.common(), delta=a.delta, sensitivity=float(base), sigma_client=float(b * math.sqrt(2.0 * shape)),
            sigma_release=float(b * math.sqrt(2.0)), laplace_scale=float(b), gamma_shape=float(shape),
            base_sensitivity=float(base),
        )
    widen = rounding_widening("l1", a.width, a.s, a.frac_bits)  # type: ignore[arg-type]
    sens = base + widen
    grid_sens = sens * a.scale
    if a.calib == Calibration.TIGHT:
        t_grid, pieces = accounting.discrete_laplace_scale(a.eps, grid_sens), a.load
    else:
        t_grid, pieces = b * a.scale, 1
    release_var = polya_variance(t_grid, 1.0)  # DLap(t)'s exact variance 2p/(1 − p)², grid steps²
    return NoisePlan(
        **a.common(), delta=a.delta, sensitivity=float(sens),
        sigma_client=float(math.sqrt(release_var / pieces) / a.scale),
        sigma_release=float(math.sqrt(release_var) / a.scale), laplace_scale=float(t_grid / a.scale),
        gamma_shape=1.0 / pieces, base_sensitivity=float(base), rounding_widening=float(widen),
        grid_scale=float(t_grid), grid_l1_sensitivity=float(grid_sens),
    )


def plan_noise(  # noqa: PLR0913 - the noise plan's public inputs, all keyword-only; Gaussian/Laplace plan types are #34 item 4
    *, mechanism: str, calibration: str, epsilon: float, delta: float, clip_norm: float, s: int,
    min_honest_load: int, interpolate_p: float | None = None, n: int | None = None, m: int | None = None,
    d: int | None = None, t_prime: int = 0, sketch_kind: str = "sparse", sensitivity: float | None = None,
    frac_bits: int = 0, width: int | None = None, noise_factors=None, zcdp_rho: float | None = None,
) -> NoisePlan:
    """Calibrate the per-(client, piece) noise of one release (docs/architecture.md, "The noise").

    Args:
        mechanism: ``"gaussian"`` ((ε, δ)-DP, rows clipped in ℓ2) or ``"laplace"`` (pure ε-DP,
            rows clipped in ℓ1); a :class:`~ltm.dp.mechanisms.Mechanism` or its value.
        calibration: ``"tight"`` (default, correct DP), ``"paper"`` (Cor 4.7 / 4.10 as printed;
            not private, reproductions only) or ``"interpolate"`` (Gaussian only, needs
            ``interpolate_p``).
        epsilon: ε > 0.
        delta: Gaussian: 0 < δ < 1.  Laplace: 0 ≤ δ < 1 is accepted and recorded as 0.0.
        clip_norm: C > 0, the norm each client row is clipped to (also the paper's η).
        s: pieces per client (non-zeros per sketch column; ``s = m`` for a dense sketch).
        min_honest_load: L ≥ 1, the honest (client, piece) pairs the gate guarantees per row.
        interpolate_p: p ∈ [0, 1] for ``interpolate`` (only there).
        n, m, d: clients, sketch rows, columns of the client vector (``d+1`` for ridge); needed
            by ``paper``; when ``m`` is given it is checked against ``s``.
        t_prime: corrupt clients t′ ≥ 0 (used by ``paper``).
        sketch_kind: ``"sparse"``, ``"dense"`` or ``"sum"`` (the lifted kinds' map);
            ``paper`` Laplace (Cor 4.10) needs ``"dense"``.
        sensitivity: the release's Δ₂ (Gaussian) or Δ₁ (Laplace) when it is not the sketch's
            ``2C√s`` / ``2sC``: a lifted release kind states its own (:mod:`ltm.lifts`).  Not
            allowed with ``paper`` (the paper's formulas are for its sketches).
        frac_bits: f of the grid the parties round to and draw integer noise on (> 0 for every
            job a party runs); 0 gives a continuous plan (no rounding, float mechanisms).
        width: W, the values each client uploads per piece (needed with ``frac_bits``: the
            rounding widening is √(s·W)·2^-f in ℓ2, s·W·2^-f in ℓ1).
        noise_factors: Gaussian only: per-entry variance factors (W values in (0, 1]) of each draw;
            ``sensitivity`` must then bound √(Σ_j μ_j²/factor_j) of a change μ (the gram lift's
            Frobenius bound).  τ is evaluated at the smallest scale (:func:`ltm.dp.accounting.kls_rho`).
        zcdp_rho: the zCDP target ρ of a Gaussian grid plan when the job states it (the job spec's
            ``privacy.zcdp_rho``, :func:`ltm.dp.accounting.rho_for` of (ε, δ), which the parties
            check with the accountant): σ_c is then solved from it without the accountant.  None:
            the accountant computes it here.

    How each mechanism is calibrated: :func:`_sigma_client` and :func:`_laplace_plan`.

    Raises:
        CalibrationError: naming the offending argument.
    """
    mech = _choice("mechanism", mechanism, Mechanism)
    calib = _choice("calibration", calibration, Calibration)
    kind = _sketch_kind(sketch_kind)
    eps = _positive("epsilon", epsilon)
    dlt = _plan_delta(mech, delta)
    clip = _positive("clip_norm", clip_norm)
    s_ = _integer("s", s, 1)
    load = _integer("min_honest_load", min_honest_load, 1)
    t_ = _integer("t_prime", t_prime, 0)
    n_, m_, d_ = _optional_count("n", n), _optional_count("m", m), _optional_count("d", d)
    f_ = _integer("frac_bits", frac_bits, 0)
    w_ = _optional_count("width", width)
    _check_grid_and_rows(kind, s_, m_, f_, w_)
    args = _PlanArgs(
        mech=mech, calib=calib, kind=kind, eps=eps, delta=dlt, clip=clip, s=s_, load=load, t_prime=t_,
        n=n_, m=m_, d=d_, frac_bits=f_, width=w_, factors=_plan_noise_factors(noise_factors, mech, sensitivity, w_),
        rho=_plan_zcdp_rho(zcdp_rho, mech, calib), sensitivity=_plan_sensitivity(sensitivity, calib),
        p=_plan_interpolate_p(interpolate_p, mech, calib),
    )
    return _gaussian_plan(args) if mech == Mechanism.GAUSSIAN else _laplace_plan(args)

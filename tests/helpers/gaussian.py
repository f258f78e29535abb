"""The Gaussian mechanism's privacy computed independently of ``ltm/dp``, with scipy only: the
references the ledger and calibration tests check the project's accounting against."""
from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm


def gaussian_delta(mu: float, eps: float) -> float:
    """δ(ε) of the Gaussian mechanism with Δ/σ = μ (Balle & Wang 2018, Thm 8)."""
    return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)


def exact_epsilon(mu: float, delta: float) -> float:
    """The exact ε at δ of a Gaussian mechanism with Δ/σ = μ: the tightest correct bound."""
    return brentq(lambda e: gaussian_delta(mu, e) - delta, 0.0, 200.0, xtol=1e-12)


def independent_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The analytic-Gaussian σ for (ε, δ) and Δ, by bisection on scipy's δ(ε)."""
    return sensitivity / brentq(lambda mu: gaussian_delta(mu, epsilon) - delta, 1e-6, 50.0, xtol=1e-14)

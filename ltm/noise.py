"""Client noise: one independent draw per (client, piece, column), as calibrated by a NoisePlan.

Gaussian: N(0, σ_c²).  Laplace (pure ε): Γ(1/L, b) − Γ(1/L, b); L such draws landing in one release
entry sum to exactly Lap(b) (infinite divisibility), more is post-processing.  Each piece gets its
own draw so that the noise in different release rows is independent (DESIGN §3).
"""
from __future__ import annotations

import numpy as np

from ltm.calibration import NoisePlan
from ltm.randomness import RandomStream

#: Per-draw magnitude bound used by the ring headroom check: a Gaussian draw exceeds 20σ with
#: probability < 1e-88; a Γ(a ≤ 1, b) draw exceeds 100·b with probability < e^-100.
GAUSSIAN_TAIL_SIGMAS = 20.0
GAMMA_TAIL_SCALES = 100.0


def sample_noise(stream: RandomStream, plan: NoisePlan, shape: tuple[int, ...]) -> np.ndarray:
    """Noise array of ``shape`` (typically (pieces, clients, D)) for honest clients, float64."""
    if plan.mechanism == "gaussian":
        return stream.normal(shape, scale=plan.sigma_client)
    if plan.mechanism == "laplace":
        pos = stream.gamma(plan.gamma_shape, plan.laplace_scale, shape)
        neg = stream.gamma(plan.gamma_shape, plan.laplace_scale, shape)
        return pos - neg
    raise ValueError(f"unknown mechanism {plan.mechanism!r}")


def noise_tail_bound(plan: NoisePlan) -> float:
    """A magnitude no single noise draw exceeds except with negligible probability."""
    if plan.mechanism == "gaussian":
        return GAUSSIAN_TAIL_SIGMAS * plan.sigma_client
    return GAMMA_TAIL_SCALES * plan.laplace_scale

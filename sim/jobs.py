"""Building job specs for simulations: partitions, parties, defaults for m and λ."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ltm.calibration import analytic_gaussian_sigma
from ltm.jobspec import (INTERCEPT_NAME, JobSpec, PartySpec, PrivacySpec, ServerSpec, SketchSpec,
                         resolve_defaults)
from ltm.randomness import Randomness
from sim.data import Table, public_columns

DEFAULT_CLIP_BOUND = 1.5


def default_m(n: int, width: int, *, epsilon: float, delta: float, clip_bound: float, s: int = 1,
              kind: str = "sparse") -> int:
    """Default sketch size m from n, the vector width D and ε (documented rule).

    The release's error has two parts that pull m in opposite directions: the sketch's own
    distortion (≈ D/m relative excess loss for sketch-and-solve) shrinks with m, while the noise
    Gram matrix E[NᵀN] = m·v·I grows with m (v ≈ σ_Y²·1.25 per scaled entry at the default
    honest-load fraction; after de-biasing its fluctuation still grows like √m·v).  With rows of
    squared norm ≈ C²/2 and a residual share of ~10%, balancing the two gives

        m ≈ n·C² / (2.5·σ_Y²·√(10·D)),     σ_Y = analytic Gaussian σ for Δ = 2C√s,

    which we clamp to [max(4D, 16), n/64] (at least 64 expected clients per row keeps every row's
    honest load, and so the gate, robust to dropouts).  Dense sketches cost O(n·m) per client
    upload, so they are additionally capped at 256.
    """
    sigma_y = analytic_gaussian_sigma(epsilon, delta, 2.0 * clip_bound * math.sqrt(s))
    m = n * clip_bound**2 / (2.5 * sigma_y**2 * math.sqrt(10.0 * width))
    lo, hi = max(4 * width, 16), max(n // 64, 1)
    if kind == "dense":
        hi = min(hi, 256)
    return int(max(min(m, hi), min(lo, hi)))


def default_lambda(n: int, m: int, width: int, noise_variance_per_entry: float) -> float:
    """Default ridge λ for the de-biased ridge on the release (documented rule).

    The de-biased Gram matrix ÃᵀÃ − E[NᵀN] has noise whose off-diagonal entries fluctuate with
    standard deviation ≈ v·√m (v: noise variance of one scaled entry).  λ = 3·v·√m keeps the
    de-biased Hessian positive definite with high probability while biasing the solution by a
    relative amount ≈ λ/(n·E[x²]) that vanishes as n grows.
    """
    return 3.0 * noise_variance_per_entry * math.sqrt(m)


@dataclass(frozen=True)
class JobChoices:
    """What ``build_job`` decided and why (reported in the simulate output)."""

    m: int
    m_rule: str


def split_parties(n: int, parties: int) -> list[tuple[int, int]]:
    """Contiguous, near-equal client ranges for ``parties`` parties."""
    if not 1 <= parties <= n:
        raise ValueError(f"need 1 ≤ parties ≤ n (got parties={parties}, n={n})")
    edges = np.linspace(0, n, parties + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def build_job(table: Table, *, job_id: str, randomness: Randomness, partition: str = "rows", parties: int = 4,
              k: int = 3, kind: str = "sparse", m: int | None = None, s: int = 1, epsilon: float = 1.0,
              delta: float = 1e-6, mechanism: str = "gaussian", calibration: str = "tight",
              interpolate_p: float | None = None, t_prime: int = 0, corrupt_parties: int = 0,
              intercept: bool = True, clip_bound: float = DEFAULT_CLIP_BOUND, share_mode: str = "seed",
              frac_bits: int = 0, min_honest_load: int = 0, endpoints: list[str] | None = None,
              ) -> tuple[JobSpec, JobChoices]:
    """A resolved, validated job spec for a table, and the choices made."""
    columns = public_columns(table, intercept=intercept, clip_bound=clip_bound)
    width = len(columns)
    n = table.n
    if m is None:
        sens_s = s if kind == "sparse" else 1
        m = default_m(n, width, epsilon=epsilon, delta=delta if delta > 0 else 1e-6, clip_bound=clip_bound,
                      s=sens_s, kind=kind)
        rule = "default_m: n·C²/(2.5·σ_Y²·√(10·D)) clamped to [max(4D,16), n/64]"
    else:
        rule = "given"
    if partition == "rows":
        party_specs = tuple(PartySpec(f"party-{i}", a, b, (), clip_bound)
                            for i, (a, b) in enumerate(split_parties(n, parties)))
    elif partition == "columns":
        names = [c.name for c in columns]
        if parties > len(names):
            raise ValueError(f"columns partition: {parties} parties but only {len(names)} columns")
        blocks = np.array_split(np.arange(len(names)), parties)
        party_specs = tuple(
            PartySpec(f"party-{i}", 0, n, tuple(names[j] for j in block),
                      clip_bound * math.sqrt(len(block) / len(names)) * (1 - 1e-12))
            for i, block in enumerate(blocks))
    else:
        raise ValueError(f"unknown partition {partition!r}; choose rows or columns")
    seed = randomness.child("sketch-seed").bytes(32).hex()
    spec = JobSpec(
        job_id=job_id, partition=partition, n=n, columns=columns, parties=party_specs,
        clip_bound=clip_bound, frac_bits=frac_bits,
        sketch=SketchSpec(kind=kind, m=m, s=s if kind == "sparse" else m, seed=seed),
        privacy=PrivacySpec(epsilon=epsilon, delta=delta, mechanism=mechanism, calibration=calibration,
                            interpolate_p=interpolate_p, t_prime=t_prime, corrupt_parties=corrupt_parties,
                            min_honest_load=min_honest_load),
        servers=tuple(ServerSpec(f"server-{i}", (endpoints or [""] * k)[i]) for i in range(k)),
        clip_norm="l1" if mechanism == "laplace" else "l2", share_mode=share_mode,
    )
    return resolve_defaults(spec), JobChoices(m, rule)


def party_tables(spec: JobSpec, table: Table) -> dict[str, dict[str, np.ndarray]]:
    """Each party's view of the table: its row range (rows) or its column block (columns)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for p in spec.parties:
        if spec.partition == "rows":
            out[p.party_id] = table.rows(p.start, p.stop)
        else:
            out[p.party_id] = {c: table.columns[c] for c in p.columns if c != INTERCEPT_NAME}
    return out

"""Building job specs for simulations: partitions, parties, defaults for m and λ."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ltm.calibration import analytic_gaussian_sigma
from ltm.jobspec import (INTERCEPT_NAME, JobSpec, PartySpec, PrivacySpec, ServerSpec, SketchSpec,
                         default_corrupt_parties, resolve_defaults)
from ltm.randomness import Randomness
from sim.data import Table, public_columns

DEFAULT_CLIP_BOUND = 1.0


def default_m(n: int, width: int, *, epsilon: float, delta: float, clip_bound: float, kind: str = "sparse") -> int:
    """Default sketch size m from n, the vector width D, ε and δ (documented rule).

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
    sigma_1 = analytic_gaussian_sigma(epsilon, delta, 2.0 * clip_bound)
    v = 1.1 * sigma_1**2
    m = 0.15 * n / (width * v)
    lo, hi = max(4 * width, 16), max(n // 64, 1)
    if kind == "dense":
        hi = min(hi, 256)
    return int(round(max(min(m, hi), min(lo, hi))))


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
              interpolate_p: float | None = None, t_prime: int = 0, corrupt_parties: int | None = None,
              intercept: bool = False, clip_bound: float = DEFAULT_CLIP_BOUND, share_mode: str = "seed",
              frac_bits: int = 0, min_honest_load: int = 0, endpoints: list[str] | None = None,
              reproduction: bool | None = None) -> tuple[JobSpec, JobChoices]:
    """A resolved, validated job spec for a table, and the choices made.

    ``corrupt_parties`` None: :func:`ltm.jobspec.default_corrupt_parties` (one, when parties hold
    several clients each).  ``reproduction`` None: the job is a reproduction exactly when
    ``randomness`` is seeded (then its servers accept seeded, NOT private batches).
    """
    if reproduction is None:
        reproduction = randomness.reproducible
    columns = public_columns(table, intercept=intercept, clip_bound=clip_bound)
    width = len(columns)
    n = table.n
    if m is None:
        m = default_m(n, width, epsilon=epsilon, delta=delta if delta > 0 else 1e-6, clip_bound=clip_bound,
                      kind=kind)
        rule = "default_m: 0.15·n/(D·1.1·σ₁²), σ₁ = analytic σ for Δ=2C; clamped to [max(4D,16), n/64]"
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
                            interpolate_p=interpolate_p, t_prime=t_prime, corrupt_parties=corrupt_parties or 0,
                            min_honest_load=min_honest_load),
        servers=tuple(ServerSpec(f"server-{i}", (endpoints or [""] * k)[i]) for i in range(k)),
        clip_norm="l1" if mechanism == "laplace" else "l2", share_mode=share_mode, reproduction=reproduction,
    )
    if corrupt_parties is None:
        spec = replace(spec, privacy=replace(spec.privacy, corrupt_parties=default_corrupt_parties(spec)))
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

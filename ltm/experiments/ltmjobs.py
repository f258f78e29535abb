"""LTM releases for experiments: job specs with explicit column transforms, and two ways to release.

* the **real path** (``path="real"``): the job goes through the actual party → server → analyst
  cores via :func:`ltm.experiments.release_backends.current` (in process, or the gRPC actors under
  ``--networked``);
* the **fast path** (``path="fast"``, simulation only): the exact distributional shortcut of the
  Gaussian release (Burkhardt et al. §4.2, Cor 4.7: the noise is added before the linear sketch).
  The noiseless part ``Σ_l S_l V`` is computed in float64 from the
  same public sketch, and the noise of release entry (r, c) is drawn directly:

  - Gaussian: the honest noise landing in row r is a sum of ``load_r`` independent
    ``N(0, σ_c²)`` draws with Rademacher signs, i.e. exactly ``N(0, load_r·σ_c²)``;
  - Laplace/Gamma: a sum of ``load_r`` independent symmetric ``Γ(a, b) − Γ(a, b)`` draws is
    exactly ``Γ(load_r·a, b) − Γ(load_r·a, b)``;

  then the analyst's ``1/√pieces`` scaling.  The only difference from the real path is the
  fixed-point rounding of the ring encoding (≤ load·2^-f per entry) and that noise comes from
  numpy instead of the AES-CTR stream.  ``tests/unit/experiments/test_experiments.py`` checks that both paths agree
  exactly in the noiseless part and in distribution in the noise.

``path="auto"`` takes the real path unless the noisy copies the parties must draw,
``pieces × n × D``, exceed ``real_budget`` (dense sketches, large n), where it takes the fast path.
Every result row records the path it took.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ltm.analyst.reconstruct import privacy_report
from ltm.analyst.release import ReleasedSketch
from ltm.client_set import ClientSet
from ltm.datasets.tables import Table
from ltm.dp.calibration import CalibrationError
from ltm.experiments import release_backends
from ltm.experiments.seeds import numpy_rng, subseed
from ltm.jobspec import (
    MAX_FRAC_BITS,
    MIN_FRAC_BITS,
    ColumnSpec,
    JobSpec,
    JobSpecError,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    resolve_defaults,
    worst_entry_magnitude,
)
from ltm.ring import HEADROOM_LIMIT
from ltm.sim.runtime.jobs import party_tables, split_parties
from ltm.sim.runtime.simulate import training_matrix
from ltm.sketch import Sketch

PATHS = ("real", "fast", "auto")
#: ``auto`` takes the real path while pieces × n × D stays below this (≈ a second of party work).
DEFAULT_REAL_BUDGET = 2_000_000


@dataclass(frozen=True)
class Mechanism:
    """What to release: the LTM noise mechanism and its calibration."""

    mechanism: str = "gaussian"          # gaussian | laplace
    calibration: str = "tight"           # tight | paper | interpolate
    interpolate_p: float | None = None
    kind: str = "sparse"                 # sparse | dense
    m: int = 100
    s: int = 1
    epsilon: float = 1.0
    delta: float = 1e-5                  # ignored (0) for laplace
    t_prime: int = 0
    load_fraction: float = 1.0           # L = load_fraction × the smallest row load (no dropouts here)

    @property
    def clip_norm(self) -> str:
        return "l1" if self.mechanism == "laplace" else "l2"


# ---------------------------------------------------------------------------------- columns
def maxnorm_columns(table: Table, *, norm: str = "l2", names: Sequence[str] | None = None) -> tuple[ColumnSpec, ...]:
    """Our default normalisation where Burkhardt et al. §6.2 states none: every column divided
    by the largest row norm (ℓ2 or ℓ1) of the whole client vector, no centring, so every row has
    norm ≤ 1 (= the clip bound C, η)."""
    names = list(names or table.columns)
    X = np.column_stack([table.columns[c] for c in names])
    row = np.sqrt(np.einsum("ij,ij->i", X, X)) if norm == "l2" else np.abs(X).sum(axis=1)
    scale = float(row.max()) * (1 + 1e-12) or 1.0
    return tuple(ColumnSpec(c, "label" if c == table.label else "feature", 0.0, scale) for c in names)


def minmax_columns(table: Table, *, norm: str = "l2") -> tuple[ColumnSpec, ...]:
    """The alternative normalisation: each column min–max mapped to [−1, 1], then every column
    divided by the largest row norm of the mapped rows (so rows have norm ≤ 1)."""
    names = list(table.columns)
    X = np.column_stack([table.columns[c] for c in names])
    lo, hi = X.min(axis=0), X.max(axis=0)
    half = np.where(hi > lo, (hi - lo) / 2.0, 1.0)
    center = (hi + lo) / 2.0
    Z = (X - center) / half
    row = np.sqrt(np.einsum("ij,ij->i", Z, Z)) if norm == "l2" else np.abs(Z).sum(axis=1)
    M = float(row.max()) * (1 + 1e-12) or 1.0
    return tuple(ColumnSpec(c, "label" if c == table.label else "feature", float(center[j]), float(half[j] * M))
                 for j, c in enumerate(names))


# ---------------------------------------------------------------------------------- specs
def sketch_seed_hex(sketch_seed: int) -> str:
    """The public 32-byte sketch seed (hex) of a job, from an experiment seed."""
    return np.random.default_rng(subseed(sketch_seed, "sketch")).bytes(32).hex()


def make_spec(columns: tuple[ColumnSpec, ...], n: int, mech: Mechanism, *, job_id: str, sketch_seed: int,  # noqa: PLR0913 - an experiment's job: keyword-only spec fields; the one job builder is #34 item 2
              k: int = 3, parties: int = 2, clip_bound: float = 1.0,
              endpoints: list[str] | None = None, loads: np.ndarray | None = None) -> JobSpec:
    """A resolved, validated rows-partition job spec.

    ``loads``: the sketch's row loads (everyone participating) if already known — then L, the
    minimum participant count and the fraction bits are set here exactly as
    :func:`ltm.jobspec.resolve_defaults` would, without re-deriving the sketch.

    Raises ``JobSpecError`` / ``CalibrationError`` when the job cannot run (e.g. the paper's
    Cor 4.7 at n below its threshold: the caller applies the paper's zero-output branch).
    """
    seed_hex = sketch_seed_hex(sketch_seed)
    party_specs = tuple(PartySpec(f"party-{i}", a, b, (), clip_bound)
                        for i, (a, b) in enumerate(split_parties(n, parties)))
    s = mech.m if mech.kind == "dense" else mech.s
    spec = JobSpec(
        job_id=job_id, partition="rows", n=n, columns=columns, parties=party_specs, clip_bound=clip_bound,
        frac_bits=0, sketch=SketchSpec(kind=mech.kind, m=mech.m, s=s, seed=seed_hex),
        privacy=PrivacySpec(epsilon=mech.epsilon, delta=0.0 if mech.mechanism == "laplace" else mech.delta,
                            mechanism=mech.mechanism, calibration=mech.calibration,
                            interpolate_p=mech.interpolate_p, t_prime=mech.t_prime),
        servers=tuple(ServerSpec(f"server-{i}", (endpoints or [""] * k)[i]) for i in range(k)),
        clip_norm=mech.clip_norm, share_mode="seed",
        # Paper reproductions on seeded randomness: the paper's threat model (t′ corrupt clients, no
        # corrupt party deducted) is kept, and the servers accept the seeded batches.
        reproduction=True,
    )
    if loads is not None:
        feasible = int(loads.min()) - mech.t_prime
        if feasible < 1:
            raise JobSpecError([f"no sketch row keeps an honest load ≥ 1 (min load {int(loads.min())})"])
        privacy = replace(spec.privacy, min_honest_load=max(1, int(math.floor(mech.load_fraction * feasible))),
                          min_participants=max(1, math.ceil(n / 2)))
        spec = replace(spec, privacy=privacy)
        magnitude = worst_entry_magnitude(float(loads.max()), clip_bound, spec.noise_plan())
        largest = math.floor(math.log2(HEADROOM_LIMIT / magnitude) - 1e-9)
        if largest < MIN_FRAC_BITS:
            raise JobSpecError([f"ring headroom: even {MIN_FRAC_BITS} fraction bits could overflow"])
        spec = replace(spec, frac_bits=min(MAX_FRAC_BITS, largest))
    return resolve_defaults(spec, load_fraction=mech.load_fraction)


def try_make_spec(*args, **kwargs) -> tuple[JobSpec | None, str]:
    """``make_spec`` or ``(None, reason)`` when the calibration/validation refuses the job."""
    try:
        return make_spec(*args, **kwargs), ""
    except (JobSpecError, CalibrationError) as exc:
        return None, str(exc).replace("\n", " ")


# ---------------------------------------------------------------------------------- the fast path
def noiseless_sketch(spec: JobSpec | Sketch, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Σ_l S_l V, row loads)``: the unscaled noiseless sketch (m, D) in float64 and the
    (participant, piece) load of every row (m,), everyone participating."""
    sketch = spec if isinstance(spec, Sketch) else spec.make_sketch()
    m, D = sketch.m, V.shape[1]
    out = np.zeros((m, D))
    loads = np.zeros(m, dtype=np.int64)
    for a, b, rows, negative in sketch.chunks(0, sketch.n):
        sign = np.where(negative, -1.0, 1.0)
        block = V[a:b]
        if sketch.kind == "dense":
            S = np.zeros((m, b - a))
            np.put_along_axis(S, rows, sign, axis=0)
            out += S @ block
        else:
            cols = np.arange(D)
            for l in range(rows.shape[0]):
                flat = (rows[l][:, None] * D + cols).ravel()
                out += np.bincount(flat, weights=(sign[l][:, None] * block).ravel(), minlength=m * D).reshape(m, D)
        loads += np.bincount(rows.ravel(), minlength=m)
    return out, loads


def fast_release(spec: JobSpec, V: np.ndarray, seed: int,
                 clean_and_loads: tuple[np.ndarray, np.ndarray] | None = None) -> ReleasedSketch:
    """The release by the exact distributional shortcut (module docstring).  Simulation only.

    ``clean_and_loads``: :func:`noiseless_sketch` (spec, V), if already computed."""
    plan = spec.noise_plan()
    sketch = spec.make_sketch()
    clean, loads = clean_and_loads if clean_and_loads is not None else noiseless_sketch(spec, V)
    rng = numpy_rng(seed, "fast-path-noise")
    shape = clean.shape
    if plan.mechanism == "gaussian":
        noise = rng.standard_normal(shape) * (plan.sigma_client * np.sqrt(loads))[:, None]
    else:
        a = (plan.gamma_shape * loads)[:, None] * np.ones(shape)
        noise = rng.gamma(a, plan.laplace_scale) - rng.gamma(a, plan.laplace_scale)
    return ReleasedSketch(
        matrix=(clean + noise) * sketch.scale, columns=spec.column_names,
        centers=np.array([c.center for c in spec.columns]), scales=np.array([c.scale for c in spec.columns]),
        label=spec.label_index, intercept=spec.intercept_index, n=spec.n,
        noise_variance_per_column=spec.n * plan.sigma_client ** 2,
        privacy=privacy_report(spec, plan, ClientSet.full(spec.n), randomness="seeded fast path (numpy; simulation only, NOT private)",
                               sketch=sketch),
        sha256="")


def zero_release(spec_like_columns: tuple[ColumnSpec, ...], m: int, n: int) -> ReleasedSketch:
    """The paper's zero-output branch (eq. (2)): every client sends zeros, the release is 0."""
    cols = spec_like_columns
    label = next((i for i, c in enumerate(cols) if c.role == "label"), None)
    return ReleasedSketch(matrix=np.zeros((m, len(cols))), columns=tuple(c.name for c in cols),
                          centers=np.array([c.center for c in cols]), scales=np.array([c.scale for c in cols]),
                          label=label, intercept=None, n=n, noise_variance_per_column=0.0,
                          privacy={"zero_output": True}, sha256="")


def choose_path(path: str, spec: JobSpec, real_budget: int = DEFAULT_REAL_BUDGET) -> str:
    if path not in PATHS:
        raise ValueError(f"unknown path {path!r}; choose one of {PATHS}")
    if path == "auto":
        return "real" if spec.make_sketch().pieces * spec.n * spec.width <= real_budget else "fast"
    return path


def release(spec: JobSpec, table: Table, V: np.ndarray, seed: int, path: str,
            real_budget: int = DEFAULT_REAL_BUDGET,
            clean_and_loads: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[ReleasedSketch, str]:
    """Release ``table`` under ``spec``; returns ``(release, path taken)``.

    ``V`` is :func:`transformed` (spec, table) (needed by the fast path)."""
    taken = choose_path(path, spec, real_budget)
    if taken == "fast":
        return fast_release(spec, V, seed, clean_and_loads), "fast"
    return release_backends.current().release(spec, party_tables(spec, table), seed), release_backends.current().name


def transformed(spec: JobSpec, table: Table) -> np.ndarray:
    """The clipped, transformed client rows (n, D) exactly as the parties form them."""
    return training_matrix(spec, table)


def transform_columns(columns: tuple[ColumnSpec, ...], table: Table, clip_bound: float, clip_norm: str) -> np.ndarray:
    """Rows-partition equivalent of :func:`transformed` without a job spec (no intercept column)."""
    from ltm.clipping import clip_rows

    raw = np.column_stack([table.columns[c.name] for c in columns])
    V = (raw - np.array([c.center for c in columns])) / np.array([c.scale for c in columns])
    return clip_rows(V, clip_bound, clip_norm)


def endpoints(k: int) -> list[str] | None:
    return release_backends.current().endpoints(k)


def sigma_summary(rel: ReleasedSketch) -> dict[str, float | int | None]:
    """Diagnostics for a result row: per-client σ, release σ, noise Gram diagonal, honest load."""
    p = rel.privacy or {}
    return {"sigma_client": p.get("sigma_client"), "sigma_release": p.get("sigma_release"),
            "noise_gram": float(rel.noise_variance_per_column), "min_honest_load": p.get("min_honest_load"),
            "dp_verified": p.get("dp_verified")}


def finite(x: float) -> float:
    return float(x) if math.isfinite(x) else float("nan")

"""Wu et al. (UAI 2022), *DP multi-party data release for linear regression*, reproduced through LTM.

Paper sections: §4.1 DGM-OLS (and its BGM baseline), §4.2 RMGM-OLS (Algorithm 2), §5 experiments.
Two scenarios (specs ``ltm/experiments/specs/wu_fig2.toml`` and ``wu_table1.toml``):

``wu.synthetic`` (Fig. 2)
    d = 10 features x ~ U(−1, 1)^d, w* ~ U(−1/d, 1/d)^d, y = w*ᵀx (no label noise), six parties
    holding the column blocks (2, 2, 2, 2, 2, 1) — the last one holds the label — so d_max = 2.
``wu.table1`` (Table 1)
    insurance and bike sharing (``ltm/datasets/data/``), categorical columns one-hot encoded,
    every column min–max scaled to [0, 1], a random 80/20 split per seed, five parties.

Every cell compares, on the SAME data:

* ``OLS`` — non-private, ``(XᵀX/n + λI)⁻¹XᵀY/n``;
* ``DGM-OLS`` / ``BGM-OLS`` — Wu's per-party Gaussian mechanism on the raw rows (every party adds
  N(0, 4·d_max·σ²_{ε,δ}) to its own block), de-biased resp. plain OLS (fresh noise for BGM);
* ``RMGM-OLS Wu`` — **Wu's calibration, reproduction path**: each party releases
  ``B·D^j/√k + R^j`` with ``R^j ~ N(0, 4·d_max·σ²_{ε,δ})`` (Algorithm 2, §4.2), computed here in numpy
  (Wu's protocol has no servers: each party publishes its block).  ``B`` is the LTM job's own
  seeded dense ±1 sketch, so this path and the next see the identical ``B·D``;
* ``RMGM-OLS LTM`` — **the LTM release**: a job spec from :func:`ltm.sim.runtime.jobs.build_job` with
  ``partition="columns"``, a dense Rademacher sketch of ``m = k`` rows and the default ``tight``
  calibration; ``RMGMOLS`` (:mod:`ltm.analyst.estimators`) fits on the release.  Our dense sketch is
  ``Σ_l S_l`` with entries ±1, scaled by ``1/√m`` after reconstruction — exactly Wu's ``B/√k``
  (checked bit for bit in ``tests/unit/experiments/test_experiments_wu.py``).  Where the work ``n·m`` is at most
  ``pipeline_max_work`` the release runs through the REAL party → k servers → analyst cores
  (``ltm.experiments.release_backends.current()``: in process, or the gRPC actors under ``--networked``),
  series ``RMGM-OLS LTM pipeline``; every cell also computes the series ``RMGM-OLS LTM`` by the
  exact shortcut below, so the two can be compared wherever both exist.

The exact shortcut.  In the columns partition with a dense sketch every client sits in every row,
so release entry (r, c) carries the independent noise of all n honest (client, piece) draws of the
party owning column c: ``Ã = B·V/√m + N``, ``N`` i.i.d. ``N(0, n·σ_c²/m)`` exactly (signs do not
change a centred Gaussian; Burkhardt et al. §4.2, Cor 4.7).  The shortcut computes ``B·V`` with the
job's own sketch (:func:`dense_sketch_product`) and draws N with σ_c from the job's noise plan.  It
differs from the pipeline only by the fixed-point rounding (2^-f per entry) and by which random
numbers are drawn.  The pipeline itself costs O(n·m·D) noise draws and scatter-adds (about 90 s at
n = 10⁵, m = 653 on this machine), so it cannot cover n = 3·10⁶, m = 3575.

What differs from Wu et al. (the write-up in ``docs/experiments/wu.md`` says it too):

* **privacy unit.**  Wu: (ε, δ)-DP per party w.r.t. that party's columns (replace one row of one
  block), classical Gaussian σ_{ε,δ} = √(2 ln(1.25/δ))/ε, sensitivity 2√d_max.  LTM: (ε, δ)-DP per
  *individual* (the whole row across all parties: Σ_j C_j² ≤ C², C = √(d+1) so that rows with
  entries in [−1, 1] are never clipped), on the grid the distributed discrete Gaussian's zCDP
  calibration for Δ = 2C·√m on the unscaled release (≈ 7% above the analytic Gaussian's σ;
  docs/architecture.md §4).  Per released entry the LTM noise std is 1.6–2.0× Wu's, for a guarantee
  Wu's release only gives at a larger per-individual ε — ε·√((d+1)/d_max) by the classical formula
  (our conversion of Wu's per-party guarantee, §3 "Privacy constraint"),
  1.92 / 0.51 / 0.15 exactly for ε = 1 / 0.3 / 0.1 (:func:`wu_individual_epsilon`).
* **who adds the noise.**  Wu: each party adds one noise matrix to its own k × d_j block.  LTM:
  each party adds one small draw per (client, piece), secret-shares, and k servers sum; the
  release has the same Gaussian form but only the sum is ever seen.
* **k < D.**  Wu allow k < d (λ keeps the Hessian invertible); an LTM regression job refuses
  m < D, so the LTM series use m = max(k, D) (the ``m`` column says which).  Likewise m ≤ n.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ltm.analyst.estimators import DGMOLS, RMGMOLS
from ltm.datasets.real import DATA_DIR
from ltm.datasets.tables import DataError, Table
from ltm.dp.calibration import gaussian_delta, plan_noise
from ltm.experiments.registry import register
from ltm.experiments.seeds import numpy_rng, subseed
from ltm.jobspec import MAX_FRAC_BITS, ColumnSpec, JobSpec, worst_entry_magnitude
from ltm.randomness import Randomness, keystream_uint64
from ltm.ring import HEADROOM_LIMIT
from ltm.sim.runtime.jobs import build_job, party_tables
from ltm.sketch import Sketch

WU_DELTA = 1e-5
#: Column-chunk size for streaming the dense sketch (bounds memory at chunk·m·4 bytes).
SKETCH_CHUNK = 8192

SERIES_OLS = "OLS (non-private)"
SERIES_DGM = "DGM-OLS"
SERIES_BGM = "BGM-OLS"
SERIES_WU = "RMGM-OLS Wu"
SERIES_LTM = "RMGM-OLS LTM"
SERIES_LTM_PIPE = "RMGM-OLS LTM pipeline"
SERIES_ZERO = "zero predictor"

STYLES = {
    SERIES_OLS: {"color": "black", "linestyle": "--", "marker": "."},
    SERIES_DGM: {"color": "tab:red", "marker": "v"},
    SERIES_BGM: {"color": "tab:orange", "marker": "^"},
    SERIES_ZERO: {"color": "grey", "linestyle": ":"},
    f"{SERIES_WU} k=√n/σ": {"color": "tab:blue", "marker": "o", "linestyle": ":"},
    f"{SERIES_WU} k=10√n/σ": {"color": "tab:blue", "marker": "o"},
    f"{SERIES_LTM} k=√n/σ": {"color": "tab:green", "marker": "s", "linestyle": ":"},
    f"{SERIES_LTM} k=10√n/σ": {"color": "tab:green", "marker": "s"},
    f"{SERIES_LTM_PIPE} k=√n/σ": {"color": "tab:purple", "marker": "x", "linestyle": ":"},
    f"{SERIES_LTM_PIPE} k=10√n/σ": {"color": "tab:purple", "marker": "x"},
    SERIES_WU: {"color": "tab:blue", "marker": "o"},
    SERIES_LTM: {"color": "tab:green", "marker": "s"},
    SERIES_LTM_PIPE: {"color": "tab:purple", "marker": "x"},
}


# --------------------------------------------------------------------------------------------
# Wu's calibration
# --------------------------------------------------------------------------------------------


def sigma_eps_delta(epsilon: float, delta: float) -> float:
    """Wu's Gaussian multiplier σ_{ε,δ} = √(2 ln(1.25/δ))/ε (classical; valid for 0 < ε ≤ 1)."""
    if not 0 < epsilon <= 1:
        raise ValueError(f"Wu et al.'s classical Gaussian mechanism needs 0 < ε ≤ 1, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"δ must be in (0, 1), got {delta}")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def wu_noise_std(epsilon: float, delta: float, d_max: int) -> float:
    """Std of every noise entry Wu's parties add (DGM, BGM and RMGM alike): 2·√d_max·σ_{ε,δ}."""
    return 2.0 * math.sqrt(d_max) * sigma_eps_delta(epsilon, delta)


def k_rule(n: int, epsilon: float, delta: float, multiplier: float) -> int:
    """Wu's number of released rows ⌊multiplier·√n/σ_{ε,δ}⌋ (the authors' code truncates), ≥ 1."""
    return max(1, int(multiplier * math.sqrt(n) / sigma_eps_delta(epsilon, delta)))


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float) -> float:
    """The smallest ε for which N(0, σ²) with ℓ2 sensitivity Δ is (ε, δ)-DP (exact, by bisection
    on :func:`ltm.dp.calibration.gaussian_delta`, which is decreasing in ε).  ``inf`` if σ = 0."""
    if sigma <= 0:
        return math.inf
    if gaussian_delta(sigma, 1e-12, sensitivity) <= delta:
        return 0.0
    lo, hi = 1e-12, 1.0
    while gaussian_delta(sigma, hi, sensitivity) > delta:
        lo, hi = hi, hi * 2.0
        if hi > 1e9:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gaussian_delta(sigma, mid, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def wu_individual_epsilon(epsilon: float, delta: float, d_max: int, width: int) -> float:
    """The per-individual ε (at the same δ) of Wu's joint release, from the exact Gaussian
    mechanism: per-entry noise 2√d_max·σ_{ε,δ}, whole-row sensitivity 2√width (entries in [−1,1])."""
    return gaussian_epsilon(wu_noise_std(epsilon, delta, d_max), delta, 2.0 * math.sqrt(width))


# --------------------------------------------------------------------------------------------
# The dense sketch as a matrix product
# --------------------------------------------------------------------------------------------


def dense_sketch_product(sketch: Sketch, M: np.ndarray, *, chunk: int = SKETCH_CHUNK) -> np.ndarray:
    """``(Σ_l S_l) · M`` for a dense sketch — Wu's ``B·M`` with B the job's m × n ±1 matrix.

    Streams the sketch in column chunks straight from its public keystream (sign of entry (r, j) is
    bit r of client j's words, see :mod:`ltm.sketch`); never materialises B.  ``M``: (n, D).
    Signs are exact; each chunk's product is float32 (relative error ~1e-6 of the entry, far below
    any DP noise) and chunks are accumulated in float64.  Returns float64 (m, D), unscaled.

    Uses the sketch's keystream layout (``Sketch._key``, ``Sketch._words_per_client``); the tests
    check the result against :meth:`Sketch.to_dense`, so a layout change cannot go unnoticed.
    """
    if sketch.kind != "dense":
        raise ValueError("dense_sketch_product needs a dense sketch")
    M = np.asarray(M)
    if M.ndim != 2 or M.shape[0] != sketch.n:
        raise ValueError(f"M must have shape (n={sketch.n}, D), got {M.shape}")
    m, width = sketch.m, sketch._words_per_client
    key = sketch._key
    out = np.zeros((m, M.shape[1]), dtype=np.float64)
    for a in range(0, sketch.n, chunk):
        b = min(a + chunk, sketch.n)
        words = keystream_uint64(key, (b - a) * width, a * width).reshape(b - a, width)
        bits = np.unpackbits(words.view(np.uint8).reshape(b - a, 8 * width), axis=1, bitorder="little", count=m)
        block = M[a:b].astype(np.float32)
        # B = 1 − 2·bits  ⇒  B·M = colsum(M) − 2·bitsᵀM
        out += block.sum(axis=0, dtype=np.float64)[None, :] - 2.0 * (bits.astype(np.float32).T @ block)
    return out


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def synthetic_data(n: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wu §5.2: X ~ U(−1,1)^{n×d}, w* ~ U(−1/d, 1/d)^d, y = Xw* (noiseless).  Returns (X, y, w*)."""
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    w = rng.uniform(-1.0, 1.0, size=d) / d
    return X, X @ w, w


INSURANCE_FILE, INSURANCE_SHA256 = "insurance.csv", "388eff679557d08ac19f463d025de5e0b4adc482537c8456d19934d78621fd47"
BIKE_FILE, BIKE_SHA256 = "bike_sharing_hour.csv", "681bc2e64d2fbc7b00dbdb2e3470a511a7c9e944318b8298894a49b5b13ef875"


def _read_csv(path: Path, sha256: str | None = None) -> tuple[list[str], list[list[str]]]:
    raw = path.read_bytes()
    if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
        raise DataError(f"{path}: SHA-256 mismatch; the bundled file was modified (ltm/datasets/data/README.md)")
    rows = [r for r in csv.reader(io.StringIO(raw.decode("utf-8-sig"))) if r]
    return [h.strip() for h in rows[0]], rows[1:]


def load_insurance(path: Path | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Insurance (Kaggle, 1338 rows): 9 features — age, sex (male=1), bmi, children, smoker
    (yes=1), region one-hot (4) — and the label ``charges``.  Raw units (not yet scaled)."""
    header, rows = _read_csv(path or DATA_DIR / INSURANCE_FILE, None if path else INSURANCE_SHA256)
    col = {h: i for i, h in enumerate(header)}
    regions = sorted({r[col["region"]] for r in rows})
    names = ["age", "sex_male", "bmi", "children", "smoker_yes"] + [f"region_{g}" for g in regions]
    X = np.array([[float(r[col["age"]]), float(r[col["sex"]] == "male"), float(r[col["bmi"]]),
                   float(r[col["children"]]), float(r[col["smoker"]] == "yes")]
                  + [float(r[col["region"]] == g) for g in regions] for r in rows])
    y = np.array([float(r[col["charges"]]) for r in rows])
    return X, y, names


BIKE_FEATURES = ("instant", "season", "yr", "mnth", "hr", "holiday", "weekday", "workingday", "weathersit",
                 "temp", "atemp", "hum", "windspeed")


def load_bike(path: Path | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Bike sharing ``hour.csv`` (UCI, 17379 rows; bundled as ``bike_sharing_hour.csv``): the 13 features of :data:`BIKE_FEATURES` (the 12
    usual predictors plus ``instant``: Wu et al. §5.3 counts 13 features without naming the 13th)
    and the label ``cnt``; ``casual``/``registered`` (which sum to ``cnt``) and the date string are
    left out."""
    header, rows = _read_csv(path or DATA_DIR / BIKE_FILE, None if path else BIKE_SHA256)
    col = {h: i for i, h in enumerate(header)}
    X = np.array([[_bike_float(r[col[f]], f, i) for f in BIKE_FEATURES] for i, r in enumerate(rows)])
    instant = X[:, 0]
    if not np.array_equal(instant, np.arange(1, len(rows) + 1)):
        raise DataError("bike sharing: `instant` is not the row number 1..n; the file is not the UCI hour.csv")
    y = np.array([float(r[col["cnt"]]) for r in rows])
    return X, y, list(BIKE_FEATURES)


def _bike_float(text: str, name: str, index: int) -> float:
    """A bike-sharing field as float.  The bundled copy has ONE corrupted byte: on the row with
    ``instant`` 160 the leading '1' (0x31) reads 0x11 — a single flipped bit, present in the
    shared copy we took it from (ltm/datasets/data/README.md).  ``instant`` is the 1-based row number
    on every other row, so that one field is restored from the row's position; any other
    unparsable field is an error."""
    try:
        return float(text)
    except ValueError:
        if name == "instant" and not text.isprintable():
            return float(index + 1)
        raise DataError(f"bike sharing: row {index + 1}, column {name!r}: {text!r} is not a number") from None


DATASETS = {"insurance": load_insurance, "bike": load_bike}


def minmax_01(M: np.ndarray) -> np.ndarray:
    """Scale every column to [0, 1] with its min and max over the whole table (Wu §5.3; the
    statistics are treated as public, as a deployment would state them from domain knowledge)."""
    lo, hi = M.min(axis=0), M.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (M - lo) / span


# --------------------------------------------------------------------------------------------
# Releases and fits
# --------------------------------------------------------------------------------------------


def wu_split(dataset: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Wu et al.'s split of a dataset: features and label min-max scaled to [0, 1] together, then a
    seeded 80/20 train/test permutation; returns (train, test), the label last."""
    X_raw, y_raw, _ = DATASETS[dataset]()
    D_all = minmax_01(np.column_stack([X_raw, y_raw]))
    N = D_all.shape[0]
    order = numpy_rng(seed, "wu-split").permutation(N)
    n = int(math.floor(0.8 * N))
    return D_all[order[:n]], D_all[order[n:]]


def column_blocks(width: int, parties: int) -> list[np.ndarray]:
    """The parties' column blocks, as :func:`ltm.sim.runtime.jobs.build_job` splits them (label last)."""
    return np.array_split(np.arange(width), parties)


def ltm_columns_job(D: np.ndarray, *, epsilon: float, delta: float, m: int, parties: int, servers: int,
                    job_seed: int, endpoints: list[str] | None = None) -> JobSpec:
    """The LTM job for a column-partitioned table ``D`` (n, width), label last, entries already in
    Wu's public range.  Built by :func:`ltm.sim.runtime.jobs.build_job` (columns partition, dense sketch of m
    rows, tight calibration); then the public column transform is set to the identity (center 0,
    scale 1: Wu's data need no rescaling) and C = √width so that no row is ever clipped (each
    party's block clip is C·√(d_j/width) = √d_j ≥ its block norm).  Every client participates, so
    the promised honest load is n (no dropout margin).

    A dense sketch puts every client in every row, so every row load is exactly n; the fixed-point
    width is computed from that here (the same rule as :func:`ltm.jobspec.resolve_defaults`) rather
    than by deriving all n·m sketch entries, which at n = 3·10⁶, m = 3575 would take minutes.  The
    pipeline path validates the job in full (every server does, on ``create``)."""
    n, width = D.shape
    C = math.sqrt(width)
    plan = plan_noise(mechanism="gaussian", calibration="tight", epsilon=epsilon, delta=delta, clip_norm=C,
                      s=m, min_honest_load=n, n=n, m=m, d=width, sketch_kind="dense")
    magnitude = worst_entry_magnitude(float(n), C, plan)
    frac_bits = min(MAX_FRAC_BITS, math.floor(math.log2(HEADROOM_LIMIT / magnitude) - 1e-9))
    spec, _ = build_job(_table_of(D), job_id=f"wu-{job_seed:x}", randomness=Randomness.seeded_insecure(job_seed),
                        partition="columns", parties=parties, k=servers, kind="dense", m=m, epsilon=epsilon,
                        delta=delta, clip_bound=C, min_honest_load=n, frac_bits=frac_bits, endpoints=endpoints)
    identity = tuple(ColumnSpec(c.name, c.role, 0.0, 1.0) for c in spec.columns)
    # Wu's data have no public transform's budget shares (build_job clips blocks by them): with the
    # identity transform each block's clip is by column count, √d_j, which no row exceeds.
    blocks = tuple(dataclasses.replace(q, clip_bound=C * math.sqrt(len(q.columns) / width) * (1 - 1e-12))
                   for q in spec.parties)
    return dataclasses.replace(spec, columns=identity, parties=blocks)


def ltm_entry_variance(spec: JobSpec) -> float:
    """Noise variance of one entry of the scaled release Ã when all n clients are honest:
    n·σ_c²/m (every client is in every row of a dense sketch)."""
    return spec.n * spec.noise_plan().sigma_client**2 / spec.sketch.m


def _ridge_1n(X: np.ndarray, y: np.ndarray, n: int, lam: float) -> tuple[np.ndarray, float]:
    est = RMGMOLS(lam).fit_matrix(X, y, n=n)
    return est.coef_, est.min_eigenvalue_


def _distance_row(w_hat: np.ndarray, w_star: np.ndarray) -> dict[str, float]:
    dist = float(np.linalg.norm(w_hat - w_star))
    if not np.isfinite(dist):
        dist = float("inf")
    return {"dist": dist, "exceed_05": float(dist > 0.5), "exceed_02": float(dist > 0.2),
            "exceed_01": float(dist > 0.1), "log10_dist": math.log10(dist) if dist > 0 else -300.0}


def _label(series: str, mult: float) -> str:
    rule = "√n/σ" if mult == 1 else f"{mult:g}√n/σ"
    return f"{series} k={rule}"


# --------------------------------------------------------------------------------------------
# Scenario: synthetic (Fig. 2)
# --------------------------------------------------------------------------------------------


def _synthetic_cost(p: dict) -> float:
    n, eps = float(p["n"]), float(p["epsilon"])
    mults = p.get("k_multipliers", [1, 10])
    return n * (20.0 + sum(mults) * math.sqrt(n) / sigma_eps_delta(eps, float(p.get("delta", WU_DELTA))) / 20.0)


@dataclasses.dataclass
class _SyntheticDraw:
    """One draw of the synthetic cell: the data, the parties' column blocks, Wu's noise std and the
    rows emitted so far (every series of the cell appends to ``rows`` through :meth:`emit`)."""

    seed: int
    n: int
    d: int
    lam: float
    X: np.ndarray
    y: np.ndarray
    w_star: np.ndarray
    D: np.ndarray
    blocks: list[np.ndarray]
    std_wu: float
    base: dict[str, Any]
    rows: list[dict] = dataclasses.field(default_factory=list)

    @property
    def width(self) -> int:
        return self.d + 1

    def emit(self, series: str, w_hat: np.ndarray, **extra: Any) -> None:
        """Append one series' row: the cell's identity, the distances of ``w_hat`` to w*, ``extra``."""
        self.rows.append({"series": series, **self.base, **_distance_row(w_hat, self.w_star), **extra})

    def per_party_noise(self, shape_rows: int, label: str) -> np.ndarray:
        """Each party's own N(0, 4·d_max·σ²) draws for its own columns (independent streams)."""
        out = np.empty((shape_rows, self.width))
        for j, block in enumerate(self.blocks):
            out[:, block] = numpy_rng(self.seed, label, j).normal(0.0, self.std_wu, size=(shape_rows, len(block)))
        return out


def _synthetic_draw(n: int, d: int, eps: float, delta: float, parties: int, lam: float, seed: int) -> _SyntheticDraw:
    """Draw the synthetic data of ``seed`` and split its ``d + 1`` columns over ``parties``."""
    X, y, w_star = synthetic_data(n, d, numpy_rng(seed, "wu-synthetic-data"))
    D = np.column_stack([X, y])
    blocks = column_blocks(d + 1, parties)
    d_max = max(len(b) for b in blocks)
    base = {"n": n, "epsilon": eps, "d_max": d_max, "w_norm": float(np.linalg.norm(w_star))}
    return _SyntheticDraw(seed, n, d, lam, X, y, w_star, D, blocks, wu_noise_std(eps, delta, d_max), base)


def _synthetic_baselines(draw: _SyntheticDraw, methods: set[str]) -> None:
    """The series without a sketch: OLS on the exact rows, DGM-OLS and BGM-OLS on per-party noisy rows."""
    n, d, lam = draw.n, draw.d, draw.lam
    if "ols" in methods:
        t = time.perf_counter()
        w, ev = _ridge_1n(draw.X, draw.y, n, lam)
        draw.emit(SERIES_OLS, w, min_abs_eig=abs(ev), noise_std=0.0, time_s=time.perf_counter() - t)
    if "dgm" in methods:
        t = time.perf_counter()
        Dn = draw.D + draw.per_party_noise(n, "dgm-noise")
        est = DGMOLS(lam).fit_matrix(Dn[:, :d], Dn[:, d], n=n, noise_variance=n * draw.std_wu**2)
        draw.emit(SERIES_DGM, est.coef_, min_abs_eig=est.min_abs_eigenvalue_, indefinite=bool(est.indefinite_),
                  noise_std=draw.std_wu, time_s=time.perf_counter() - t)
        del Dn
    if "bgm" in methods:
        t = time.perf_counter()
        Db = draw.D + draw.per_party_noise(n, "bgm-noise")
        w, ev = _ridge_1n(Db[:, :d], Db[:, d], n, lam)
        draw.emit(SERIES_BGM, w, min_abs_eig=abs(ev), noise_std=draw.std_wu, time_s=time.perf_counter() - t)
        del Db


def _synthetic_k_rule(draw: _SyntheticDraw, mult: float, methods: set[str], *, eps: float, delta: float,  # noqa: PLR0913 - one paper cell's knobs (the paper's names), keyword-only
                      parties: int, servers: int, max_work: float, max_n: float) -> None:
    """The sketched series of one k multiplier: RMGM-OLS with Wu's noise, LTM's release by the exact
    shortcut and, where the work allows, by the real pipeline."""
    from ltm.experiments.release_backends import current

    n, d, lam, D, width = draw.n, draw.d, draw.lam, draw.D, draw.width
    k = k_rule(n, eps, delta, mult)
    m = min(max(k, width), n)
    rule = {"k_rule": f"{mult:g}x", "k": k, "m": m}
    job_seed = subseed(draw.seed, "wu-job", mult)
    need_ltm = bool(methods & {"ltm", "pipeline"})
    spec = (ltm_columns_job(D, epsilon=eps, delta=delta, m=m, parties=parties, servers=servers,
                            job_seed=job_seed, endpoints=current().endpoints(servers))
            if need_ltm else None)
    BD_m = None
    t = time.perf_counter()
    if spec is not None and ("ltm" in methods or ("wu" in methods and m == k)):
        BD_m = dense_sketch_product(spec.make_sketch(), D)
    t_sketch = time.perf_counter() - t
    if "wu" in methods:
        t = time.perf_counter()
        if BD_m is not None and m == k:
            BD = BD_m  # the very same B as the LTM job
        else:
            BD = dense_sketch_product(Sketch("dense", k, n, k, _seed_bytes(job_seed)), D)
        Z = BD / math.sqrt(k) + draw.per_party_noise(k, f"rmgm-noise-{mult:g}")
        w, ev = _ridge_1n(Z[:, :d], Z[:, d], n, lam)
        draw.emit(_label(SERIES_WU, mult), w, **rule, min_abs_eig=abs(ev), noise_std=draw.std_wu,
                  same_b_as_ltm=bool(m == k), time_s=time.perf_counter() - t, sketch_s=t_sketch)
    if "ltm" in methods and spec is not None:
        t = time.perf_counter()
        var = ltm_entry_variance(spec)
        A = BD_m / math.sqrt(m) + numpy_rng(draw.seed, "ltm-shortcut-noise", mult).normal(0.0, math.sqrt(var),
                                                                                          (m, width))
        w, ev = _ridge_1n(A[:, :d], A[:, d], n, lam)
        draw.emit(_label(SERIES_LTM, mult), w, **rule, path="fast", min_abs_eig=abs(ev),
                  noise_std=math.sqrt(var), time_s=time.perf_counter() - t, sketch_s=t_sketch)
    if "pipeline" in methods and spec is not None and n * m <= max_work and n <= max_n:
        t = time.perf_counter()
        release = current().release(spec, party_tables(spec, _table_of(D)), subseed(draw.seed, "ltm-pipeline", mult))
        est = RMGMOLS(lam).fit(release)
        draw.emit(_label(SERIES_LTM_PIPE, mult), est.coef_, **rule, path=f"real ({current().name})",
                  min_abs_eig=abs(est.min_eigenvalue_),
                  noise_std=math.sqrt(release.noise_variance_per_column / m),
                  dp_verified=bool(release.privacy.get("dp_verified", False)),
                  calibration_verified=bool(release.privacy.get("calibration_verified", False)),
                  time_s=time.perf_counter() - t)


@register("wu.synthetic", networked=True, cost=_synthetic_cost, styles=STYLES)
def synthetic_cell(params: dict, seed: int) -> list[dict]:
    """Wu Fig. 2: ‖ŵ − w*‖ of OLS, DGM, BGM and RMGM (Wu's noise and LTM's release) on one draw.

    Params: ``n``, ``epsilon``; optional ``delta`` (1e-5), ``d`` (10), ``parties`` (6), ``servers``
    (3), ``lam`` (1e-4, the authors' synthetic code), ``k_multipliers`` ([1, 10]),
    ``pipeline_max_work`` and ``pipeline_max_n`` (run the real pipeline where n·m ≤ max_work and
    n ≤ max_n; default never), ``methods`` (subset of ols, dgm, bgm, wu, ltm, pipeline).
    """
    n, eps = int(params["n"]), float(params["epsilon"])
    delta = float(params.get("delta", WU_DELTA))
    d = int(params.get("d", 10))
    parties = int(params.get("parties", 6))
    servers = int(params.get("servers", 3))
    lam = float(params.get("lam", 1e-4))
    mults = [float(x) for x in params.get("k_multipliers", [1, 10])]
    max_work = float(params.get("pipeline_max_work", 0))
    max_n = float(params.get("pipeline_max_n", math.inf))
    methods = set(params.get("methods", ["ols", "dgm", "bgm", "wu", "ltm", "pipeline"]))

    draw = _synthetic_draw(n, d, eps, delta, parties, lam, seed)
    _synthetic_baselines(draw, methods)
    for mult in mults:
        _synthetic_k_rule(draw, mult, methods, eps=eps, delta=delta, parties=parties, servers=servers,
                          max_work=max_work, max_n=max_n)
    return draw.rows


def _seed_bytes(job_seed: int) -> bytes:
    return Randomness.seeded_insecure(job_seed).child("wu-b").bytes(32)


def _table_of(D: np.ndarray) -> Table:
    width = D.shape[1]
    return Table({f"x{j}": D[:, j] for j in range(width - 1)} | {"y": D[:, -1]}, "y", "wu")


# --------------------------------------------------------------------------------------------
# Scenario: real data (Table 1)
# --------------------------------------------------------------------------------------------


def clipped_mse(X_test: np.ndarray, y_test: np.ndarray, w: np.ndarray) -> float:
    """Wu's reported metric (authors' code): mean((clip(X·w, −1, 1) − y)²)."""
    pred = np.clip(X_test @ w, -1.0, 1.0)
    return float(np.mean((pred - y_test) ** 2))


def _table1_cost(p: dict) -> float:
    return {"insurance": 1.0, "bike": 8.0}.get(p.get("dataset"), 1.0)


@register("wu.table1", networked=True, cost=_table1_cost, styles=STYLES)
def table1_cell(params: dict, seed: int) -> list[dict]:
    """Wu Table 1: clipped test MSE of OLS, DGM, BGM and RMGM (Wu's noise, LTM's release) for every
    k of the grid, on one random 80/20 split.  Params: ``dataset`` (insurance | bike), ``epsilon``;
    optional ``delta`` (1e-5), ``parties`` (5), ``servers`` (3), ``lam`` (1e-5),
    ``k_grid`` ([100, 300, 1000, 3000, 10000]), ``pipeline_max_work`` (0)."""
    from ltm.experiments.release_backends import current

    dataset, eps = str(params["dataset"]), float(params["epsilon"])
    delta = float(params.get("delta", WU_DELTA))
    parties = int(params.get("parties", 5))
    servers = int(params.get("servers", 3))
    lam = float(params.get("lam", 1e-5))
    k_grid = [int(k) for k in params.get("k_grid", [100, 300, 1000, 3000, 10000])]
    max_work = float(params.get("pipeline_max_work", 0))
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(DATASETS)}")
    D, D_test = wu_split(dataset, seed)
    n, width = D.shape
    d = width - 1
    X, y = D[:, :d], D[:, d]
    X_test, y_test = D_test[:, :d], D_test[:, d]
    blocks = column_blocks(width, parties)
    d_max = max(len(b) for b in blocks)
    std_wu = wu_noise_std(eps, delta, d_max)
    base = {"n": n, "d": d, "d_max": d_max}
    rows: list[dict] = []

    def emit(series: str, w: np.ndarray, **extra: Any) -> None:
        rows.append({"series": series, **base, "mse": clipped_mse(X_test, y_test, w),
                     "dist_ols": float(np.linalg.norm(w - w_ols)), **extra})

    def per_party_noise(rows_: int, label: str) -> np.ndarray:
        out = np.empty((rows_, width))
        for j, block in enumerate(blocks):
            out[:, block] = numpy_rng(seed, label, j).normal(0.0, std_wu, size=(rows_, len(block)))
        return out

    w_ols, _ = _ridge_1n(X, y, n, lam)
    emit(SERIES_OLS, w_ols)
    emit(SERIES_ZERO, np.zeros(d))
    Dn = D + per_party_noise(n, "dgm-noise")
    est = DGMOLS(lam).fit_matrix(Dn[:, :d], Dn[:, d], n=n, noise_variance=n * std_wu**2)
    emit(SERIES_DGM, est.coef_, min_abs_eig=est.min_abs_eigenvalue_)
    Db = D + per_party_noise(n, "bgm-noise")
    emit(SERIES_BGM, _ridge_1n(Db[:, :d], Db[:, d], n, lam)[0])

    for k in k_grid:
        job_seed = subseed(seed, "wu-job", k)
        spec = None
        if width <= k <= n:
            spec = ltm_columns_job(D, epsilon=eps, delta=delta, m=k, parties=parties, servers=servers,
                                   job_seed=job_seed, endpoints=current().endpoints(servers))
            BD = dense_sketch_product(spec.make_sketch(), D)
        else:  # LTM refuses m > n (and m < D); Wu's path still runs with its own B
            BD = dense_sketch_product(Sketch("dense", k, n, k, _seed_bytes(job_seed)), D)
        Z = BD / math.sqrt(k) + per_party_noise(k, f"rmgm-noise-{k}")
        emit(SERIES_WU, _ridge_1n(Z[:, :d], Z[:, d], n, lam)[0], k=k, noise_std=std_wu)
        if spec is None:
            continue
        var = ltm_entry_variance(spec)
        A = BD / math.sqrt(k) + numpy_rng(seed, "ltm-shortcut-noise", k).normal(0.0, math.sqrt(var), (k, width))
        emit(SERIES_LTM, _ridge_1n(A[:, :d], A[:, d], n, lam)[0], k=k, path="fast",
             noise_std=math.sqrt(var))
        if n * k <= max_work:
            release = current().release(spec, party_tables(spec, _table_of(D)), subseed(seed, "ltm-pipeline", k))
            est = RMGMOLS(lam).fit(release)
            emit(SERIES_LTM_PIPE, est.coef_, k=k, path=f"real ({current().name})",
                 noise_std=math.sqrt(release.noise_variance_per_column / k),
                 dp_verified=bool(release.privacy.get("dp_verified", False)),
                 calibration_verified=bool(release.privacy.get("calibration_verified", False)))
    return rows


# --------------------------------------------------------------------------------------------
# Summaries for the write-up
# --------------------------------------------------------------------------------------------


def best_k_table(results_csv: str | Path, metric: str = "mse") -> list[dict]:
    """Table 1 as the paper reports it: per (dataset, ε, series) the mean ``metric`` over seeds,
    with RMGM at the k of lowest mean (selected on the TEST split, as the authors did — optimistic
    and not privacy-accounted; Wu et al. §5.3).  Rows: dataset, epsilon, series, k, mean, std, reps."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    with open(results_csv, newline="") as fh:
        for r in csv.DictReader(fh):
            if r.get("error"):
                continue
            k = r.get("k") or ""
            groups[(r["dataset"], float(r["epsilon"]), r["series"], k)].append(float(r[metric]))
    best: dict[tuple, dict] = {}
    for (ds, eps, series, k), vals in groups.items():
        mean = float(np.mean(vals))
        key = (ds, eps, series)
        if key not in best or mean < best[key]["mean"]:
            best[key] = {"dataset": ds, "epsilon": eps, "series": series, "k": k, "mean": mean,
                         "std": float(np.std(vals)), "reps": len(vals)}
    return sorted(best.values(), key=lambda r: (r["dataset"], -r["epsilon"], r["series"]))


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Wu et al. summaries from a results.csv")
    ap.add_argument("results_csv")
    ap.add_argument("--metric", default="mse")
    args = ap.parse_args(argv)
    for row in best_k_table(args.results_csv, args.metric):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())

"""Data for simulations: CSV tables, synthetic generators, the bundled dataset, public transforms.

A :class:`Table` is a set of named float64 columns of equal length.  Parties receive slices of it
(rows partition) or column blocks (columns partition).
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ltm.jobspec import INTERCEPT_NAME, ColumnSpec
from ltm.randomness import Randomness
from party.data_source import DataSourceError, parse_csv

BUNDLED_FILES = ("household_power_sample100k_part1of2.csv", "household_power_sample100k_part2of2.csv")
BUNDLED_LABEL = "Sub_metering_3"


class DataError(ValueError):
    """A data file or flag that cannot be used; the message says what to change."""


@dataclass(frozen=True)
class Table:
    """Named float64 columns (each shape (n,)), a label column name (or None) and a description."""

    columns: dict[str, np.ndarray]
    label: str | None
    source: str

    @property
    def n(self) -> int:
        return len(next(iter(self.columns.values())))

    @property
    def features(self) -> list[str]:
        return [c for c in self.columns if c != self.label]

    def matrix(self, names: list[str]) -> np.ndarray:
        """float64 (n, len(names))."""
        return np.column_stack([self.columns[c] for c in names])

    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {k: v[start:stop] for k, v in self.columns.items()}


def read_csv(text: str, *, source: str, label: str | None, features: list[str] | None = None) -> Table:
    """Parse CSV text; keep the numeric columns (or exactly ``features`` + ``label``).

    Stricter than a party's own reader: a simulation needs complete rows, so missing or
    non-finite values are refused here.
    """
    try:
        parsed, skipped = parse_csv(text, source=source)
    except DataSourceError as exc:
        raise DataError(str(exc)) from None
    wanted = (features or []) + ([label] if label else [])
    for name in wanted:
        if name in skipped:
            raise DataError(skipped[name].describe(source))
        if name not in parsed:
            raise DataError(f"{source}: no column(s) {[c for c in wanted if c not in parsed]}; "
                            f"the file has {list(parsed) + list(skipped)}")
    if features is None:
        # Every numeric column is a feature: a column of numbers with a stray text cell is a typo to
        # fix, not a text column to drop without a word.
        mixed = [bad for bad in skipped.values() if bad.numeric_cells > 0]
        if mixed:
            raise DataError(mixed[0].describe(source))
    columns = {k: v for k, v in parsed.items() if features is None or k in wanted}
    if not columns:
        raise DataError(f"{source}: no numeric columns")
    finite = np.all(np.isfinite(np.column_stack(list(columns.values()))), axis=1)
    if not finite.all():
        raise DataError(f"{source}: {int((~finite).sum())} rows have missing or non-finite values; clean them first")
    # Put the label last, features in file order.
    ordered = {k: v for k, v in columns.items() if k != label}
    if label is not None:
        ordered[label] = columns[label]
    note = f" (skipped non-numeric: {', '.join(skipped)})" if skipped and features is None else ""
    return Table(ordered, label, f"{source}{note}")


def load_csv(path: str | Path, *, label: str | None, features: list[str] | None = None) -> Table:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"no such file: {p}")
    return read_csv(p.read_text(encoding="utf-8-sig"), source=str(p), label=label, features=features)


def load_bundled() -> Table:
    """The bundled real dataset (see sim/data/README.md for provenance and licence)."""
    parts = [resources.files("sim").joinpath("data", f).read_text(encoding="utf-8") for f in BUNDLED_FILES]
    # The second part repeats the header line; drop it before parsing the concatenation.
    text = parts[0] + "".join(p.split("\n", 1)[1] for p in parts[1:])
    return read_csv(text, source="bundled: UCI household power, 100k-row sample", label=BUNDLED_LABEL)


def synthetic_ridge(n: int, d: int, randomness: Randomness, *, label_noise: float = 0.0) -> Table:
    """Burkhardt et al. §6.3 synthetic ridge data: A ~ N(0,1)^{n×d}, x_gen ~ N(0,1)^d,
    b = A·x_gen (+ N(0, label_noise²); the paper has none, so the non-private R² is 1 up to clipping)."""
    stream = randomness.child("synthetic-ridge").stream()
    A = stream.normal((n, d))
    x_gen = stream.normal(d)
    b = A @ x_gen + stream.normal(n, scale=label_noise)
    cols = {f"x{j}": A[:, j].copy() for j in range(d)}
    cols["y"] = b
    return Table(cols, "y", f"synthetic ridge (n={n}, d={d}, label noise {label_noise:g})")


def synthetic_nonlinear(n: int, d: int, randomness: Randomness, *, label_noise: float = 0.1) -> Table:
    """A non-linear regression task for random features: x ~ N(0, I_d) and
    y = Σ_j exp(−|x_j|) + x_0·x_1 + N(0, label_noise²) (Liao et al.'s test function 2 plus one
    interaction).  Every term is uncorrelated with x, so a linear model explains nothing."""
    if d < 2:
        raise DataError(f"the nonlinear generator needs d ≥ 2 (got {d})")
    stream = randomness.child("synthetic-nonlinear").stream()
    X = stream.normal((n, d))
    y = np.exp(-np.abs(X)).sum(axis=1) + X[:, 0] * X[:, 1] + stream.normal(n, scale=label_noise)
    cols = {f"x{j}": X[:, j].copy() for j in range(d)}
    cols["y"] = y
    return Table(cols, "y", f"synthetic nonlinear (n={n}, d={d}, label noise {label_noise:g})")


def synthetic_lowrank(n: int, d: int, rank: int, randomness: Randomness) -> Table:
    """Burkhardt et al. §6.3 synthetic low-rank data: A = U' Σ V'ᵀ with the SVD of a Gaussian A',
    the first ``rank`` singular values √(n/rank) and the rest 1/n (a large spectral gap)."""
    if not 1 <= rank < d:
        raise DataError(f"rank must satisfy 1 ≤ rank < d (got rank={rank}, d={d})")
    stream = randomness.child("synthetic-lowrank").stream()
    Ap = stream.normal((n, d))
    # Thin SVD through the d×d Gram matrix: streams for large n, float64 throughout.
    evals, V = np.linalg.eigh(Ap.T @ Ap)
    order = np.argsort(evals)[::-1]
    evals, V = evals[order], V[:, order]
    U = Ap @ V / np.sqrt(evals)
    sigma = np.full(d, 1.0 / n)
    sigma[:rank] = np.sqrt(n / rank)
    A = (U * sigma) @ V.T
    return Table({f"x{j}": A[:, j].copy() for j in range(d)}, None,
                 f"synthetic low-rank (n={n}, d={d}, rank={rank})")


def public_columns(table: Table, *, intercept: bool, clip_bound: float) -> tuple[ColumnSpec, ...]:
    """Column transforms for the job spec: ``x' = (x − center)/scale``, so rows have ℓ2 norm ≈ C.

    **Assumed public.** A real deployment states centers and scales from domain knowledge
    (units, plausible ranges); simulations take them from the data, which is not itself private.

    Centers are the column means (the model is then affine in raw units without an intercept
    column; ``intercept`` adds an explicit one).  Scales split the row's squared-norm budget C²:
    with isotropic release noise of variance v per entry, the de-biased regression's excess
    loss is ∝ v·(1/q + R²/p) where q is the label's share and p each regressor's share, subject
    to (#regressors)·p + q = 1.  At R² ≈ 1 the minimum is q = 1/(1 + √d), p = (1 − q)/d, so the
    label gets a larger share than an even split would give it.  Low-rank jobs (no label) split
    the budget evenly.
    """
    names = table.features
    regressors = len(names) + (1 if intercept else 0)
    if table.label:
        q = 1.0 / (1.0 + float(np.sqrt(regressors)))
        p = (1.0 - q) / regressors
    else:
        q, p = 0.0, 1.0 / max(regressors, 1)
    specs: list[ColumnSpec] = []
    for name in names:
        col = table.columns[name]
        std = float(col.std()) or 1.0
        specs.append(ColumnSpec(name, "feature", float(col.mean()), std / (np.sqrt(p) * clip_bound)))
    if intercept:
        specs.append(ColumnSpec(INTERCEPT_NAME, "intercept", 0.0, 1.0 / (np.sqrt(p) * clip_bound)))
    if table.label:
        col = table.columns[table.label]
        std = float(col.std()) or 1.0
        specs.append(ColumnSpec(table.label, "label", float(col.mean()), std / (np.sqrt(q) * clip_bound)))
    return tuple(specs)

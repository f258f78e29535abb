"""The party's data source: its rows (or column block) as named float64 columns.

CSV (header row; ``,`` ``;`` or tab separated, sniffed) for people, ``.npz`` (one array per
column) for large data.  Non-numeric columns are kept out and named; missing or non-finite
values stay NaN here so that :func:`party.randomizer.client_vectors` can say exactly which
column and row are bad.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class DataSourceError(ValueError):
    """A data file a party cannot read; the message names the file and the problem."""


def _sniff_delimiter(sample: str) -> str:
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t").delimiter
    except csv.Error:
        return ","


def _to_float(values: np.ndarray) -> np.ndarray:
    """Strings → float64; empty fields and '?' / 'NA' / 'nan' become NaN; other text raises ValueError."""
    cleaned = np.where(np.isin(values, ["", "?", "NA", "nan", "NaN"]), "nan", values)
    return cleaned.astype(np.float64)


@dataclass(frozen=True)
class NonNumeric:
    """Where a column that is not numeric first fails: 1-based data row (the header is row 0),
    the cell's text, and how many of the column's cells are numbers (0 for a text column)."""

    column: str
    row: int
    value: str
    numeric_cells: int

    def describe(self, source: str) -> str:
        return (f"{source}: data row {self.row} (line {self.row + 1}), column {self.column!r}: "
                f"{self.value!r} is not a number "
                f"(fix the cell, or leave it empty or NA to mark it missing)")


def _first_non_numeric(name: str, values: np.ndarray) -> NonNumeric:
    """The first cell of ``values`` that :func:`_to_float` cannot read (error path only)."""
    first: tuple[int, str] | None = None
    numeric = 0
    for i, v in enumerate(values.tolist()):
        try:
            _to_float(np.array([v]))
            numeric += 1
        except ValueError:
            if first is None:
                first = (i + 1, v)
    assert first is not None
    return NonNumeric(name, first[0], first[1], numeric)


def parse_csv(text: str, *, source: str) -> tuple[dict[str, np.ndarray], dict[str, NonNumeric]]:
    """Parse CSV text into ``(numeric columns, non-numeric columns by name)``; each non-numeric
    column records its first bad cell so a caller that needs the column can name row and column."""
    reader = csv.reader(io.StringIO(text), delimiter=_sniff_delimiter(text[:4096]))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise DataSourceError(f"{source}: empty file") from None
    if len(set(header)) != len(header):
        raise DataSourceError(f"{source}: duplicate column names in the header")
    rows = [r for r in reader if r]
    if not rows:
        raise DataSourceError(f"{source}: no data rows")
    bad = next((i for i, r in enumerate(rows) if len(r) != len(header)), None)
    if bad is not None:
        raise DataSourceError(f"{source}: data row {bad + 1} has {len(rows[bad])} fields, the header {len(header)}")
    raw = np.array(rows, dtype=str)
    columns: dict[str, np.ndarray] = {}
    skipped: dict[str, NonNumeric] = {}
    for j, name in enumerate(header):
        cells = np.char.strip(raw[:, j])
        try:
            columns[name] = _to_float(cells)
        except ValueError:
            skipped[name] = _first_non_numeric(name, cells)
    return columns, skipped


def load_columns(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, NonNumeric]]:
    """Read a party's data file (``.csv`` or ``.npz``) into named float64 columns."""
    p = Path(path)
    if not p.is_file():
        raise DataSourceError(f"no such file: {p}")
    if p.suffix == ".npz":
        with np.load(p, allow_pickle=False) as z:
            return {k: np.asarray(z[k], dtype=np.float64) for k in z.files}, {}
    return parse_csv(p.read_text(encoding="utf-8-sig"), source=str(p))

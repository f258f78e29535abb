"""``results.csv``: one row per result row of a (cell, repetition), appended as cells finish.

Columns: ``cell_id, rep, seed, row, rows`` (the row's index within its (cell, rep) and how many
rows that (cell, rep) produced), then the grid axes, then the scenario's result columns in
first-seen order.  Every (cell, rep) is written with ONE write + flush + fsync, so an interrupted
run leaves at most one incomplete group at the end; :meth:`ResultsCsv.open` drops it (and a
partial last line) and :meth:`done` tells the runner which (cell, rep) pairs to skip.  When a
later cell returns a column not yet in the header, the file is rewritten atomically with the
wider header.
"""
from __future__ import annotations

import csv
import io
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

PREFIX = ["cell_id", "rep", "seed", "row", "rows"]
_INT = re.compile(r"^-?\d+$")


def format_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (int, str)):
        return str(v)
    if hasattr(v, "item"):  # numpy scalar
        return format_value(v.item())
    return str(v)


def parse_value(text: str) -> Any:
    if text == "":
        return None
    if _INT.match(text):
        return int(text)
    if text in ("True", "False"):
        return text == "True"
    try:
        return float(text)
    except ValueError:
        return text


class ResultsCsv:
    """An append-only results file with resumable groups."""

    def __init__(self, path: Path, axes: list[str]) -> None:
        self.path = Path(path)
        self.axes = list(axes)
        self.header: list[str] = []
        self.records: list[dict[str, str]] = []

    # ------------------------------------------------------------------ reading
    def open(self) -> "ResultsCsv":
        """Load an existing file (dropping incomplete trailing data) or start a new one."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.header = PREFIX + [a for a in self.axes]
            self.records = []
            self._rewrite()
            return self
        text = self.path.read_text(encoding="utf-8")
        lines = text.split("\n")
        partial = not text.endswith("\n")
        if partial:
            lines = lines[:-1]  # a line cut by an interruption
        reader = csv.reader(io.StringIO("\n".join(lines) + ("\n" if lines else "")))
        rows = list(reader)
        if not rows:
            self.header, self.records = PREFIX + self.axes, []
            self._rewrite()
            return self
        self.header = rows[0]
        if self.header[:len(PREFIX)] != PREFIX:
            raise ValueError(f"{self.path}: not an experiment results file (header {self.header[:5]})")
        missing_axes = [a for a in self.axes if a not in self.header]
        self.header += missing_axes  # a grid axis added since the file was written: empty for old rows
        self.records = [dict(zip(self.header, r)) for r in rows[1:] if len(r) == len(rows[0])]
        bad = len(rows) - 1 - len(self.records)
        complete = self._complete_keys()
        kept = [r for r in self.records if (r["cell_id"], r["rep"]) in complete]
        if partial or bad or len(kept) != len(self.records) or missing_axes:
            self.records = kept
            self._rewrite()
        return self

    def _complete_keys(self) -> set[tuple[str, str]]:
        counts = Counter((r["cell_id"], r["rep"]) for r in self.records)
        expected = {(r["cell_id"], r["rep"]): int(r["rows"] or 0) for r in self.records}
        return {k for k, c in counts.items() if c == max(expected[k], 1)}

    def done(self) -> set[tuple[str, int]]:
        """(cell_id, rep) pairs already complete in the file."""
        return {(c, int(r)) for c, r in self._complete_keys()}

    def rows(self) -> list[dict[str, Any]]:
        """Every record with values parsed back to numbers/bools/None."""
        return [{k: parse_value(v) for k, v in r.items()} for r in self.records]

    # ------------------------------------------------------------------ writing
    def append(self, cell_id: str, rep: int, seed: int, axes: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """Append one (cell, rep)'s rows in a single write; rewrites the file if new columns appear."""
        group: list[dict[str, str]] = []
        results = rows or [{}]
        for i, row in enumerate(results):
            rec = {"cell_id": cell_id, "rep": str(rep), "seed": str(seed), "row": str(i),
                   "rows": str(len(rows))}
            for k, v in row.items():
                if k in PREFIX:
                    raise ValueError(f"a scenario row may not use the reserved column {k!r}")
                rec[k] = format_value(v)
            for k, v in axes.items():  # the grid point wins over a result column of the same name
                rec[k] = format_value(v)
            group.append(rec)
        new = [k for rec in group for k in rec if k not in self.header]
        if new:
            self.header += list(dict.fromkeys(new))
            self.records += group
            self._rewrite()
            return
        self.records += group
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for rec in group:
            writer.writerow([rec.get(h, "") for h in self.header])
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())

    def canonicalize(self, order: dict[tuple[str, int], int]) -> bool:
        """Rewrite the file in a fixed order that does not depend on which pair finished first.

        Groups are sorted by ``order[(cell_id, rep)]`` (the runner's grid order; pairs not in it —
        cells since removed from the grid — after them, by cell id and repetition), rows within a
        group by ``row``.  Result columns (after the prefix and the grid axes) are put in
        first-seen order over the sorted rows, a column counting as seen where it has a value;
        columns that never have one go last, by name.  So a complete grid gives the same bytes
        from one process, a process pool or a Dask cluster.  Atomic; returns whether anything
        changed (a single-process run is usually in this order already).
        """
        last = len(order)

        def rank(rec: dict[str, str]) -> tuple:
            rep = int(rec["rep"])
            return (order.get((rec["cell_id"], rep), last), rec["cell_id"], rep, int(rec["row"]))
        records = sorted(self.records, key=rank)
        fixed = PREFIX + [a for a in self.axes if a in self.header]
        seen: dict[str, None] = {}
        for rec in records:
            for h in self.header:
                if h not in seen and h not in fixed and rec.get(h, "") != "":
                    seen[h] = None
        never = sorted(h for h in self.header if h not in fixed and h not in seen)
        header = [*dict.fromkeys(fixed + list(seen) + never)]
        if header == self.header and records == self.records:
            return False
        self.header, self.records = header, records
        self._rewrite()
        return True

    def _rewrite(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(self.header)
            for rec in self.records:
                writer.writerow([rec.get(h, "") for h in self.header])
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

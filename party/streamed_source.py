"""Sources read as a stream of row batches: Parquet, CSV (pyarrow's streaming reader), SQL.

Each format gives raw batches (a column's cells as an Arrow array, a numpy array or a list of
Python values); one validation core, :func:`cells_to_float`, turns every batch of every format
into float64 with the same rules and the same one-line refusals as today's whole-file CSV
(:func:`ltm.party.data_source.parse_csv`): empty cells, ``?``, ``NA``, ``nan`` and SQL NULL are
missing (NaN, refused later by :func:`ltm.party.randomizer.client_vectors` naming column and row),
and a cell that is not a number is refused naming its column and data row.

:class:`StreamedSource` serves :meth:`PartySource.read` from a forward cursor: the aggregate and
the per-client batches read the party's rows in order, so each format is read once per pass, a
batch at a time (memory O(batch), never the file), projected to the columns asked.  A read that
goes backwards restarts the stream (Parquet skips whole row groups by their footer counts).
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ltm.party.data_source import (
    FINGERPRINT_TAG,
    SCAN_CHUNK_ROWS,
    DataSourceError,
    NonNumeric,
    PartySource,
    SourceScan,
    _first_non_numeric,
    _sniff_delimiter,
    _to_float,
    fingerprint_column_header,
)

#: Rows per batch a format is asked for (the aggregate's chunk is at most this: no concatenation).
BATCH_ROWS = 1 << 16
#: Cells that mean "missing", as in the whole-file CSV reader (``_to_float``).
MISSING_TOKENS = ("", "?", "NA", "nan", "NaN")

NUMBER, TEXT = "number", "text"


class NonNumericCell(DataSourceError):
    """A cell of a needed column that is not a number: the one-line refusal names column and row."""

    def __init__(self, bad: NonNumeric, source: str) -> None:
        super().__init__(bad.describe(source))
        self.bad = bad


def _arrow_text_to_float(values) -> np.ndarray | None:
    """An Arrow string array → float64 by Arrow's (C++) parser, or None when a cell does not parse
    (the caller then takes the numpy path, which is authoritative and names the cell)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    trimmed = pc.utf8_trim_whitespace(values)
    missing = pc.or_kleene(pc.is_null(trimmed), pc.is_in(trimmed, value_set=pa.array(MISSING_TOKENS)))
    try:
        cast = pc.cast(pc.if_else(missing, pa.scalar(None, pa.string()), trimmed), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return cast.to_numpy(zero_copy_only=False)


def _arrow_to_float(values) -> np.ndarray | None:
    """An Arrow array → float64 (nulls → NaN), or None for a text array that does not parse."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return _arrow_text_to_float(values)
    if pa.types.is_dictionary(values.type):
        return _arrow_to_float(values.dictionary_decode())
    cast = values.cast(pa.float64(), safe=False)  # int64 beyond 2^53 rounds, as numpy's astype does
    return cast.to_numpy(zero_copy_only=False)


def _python_cells_to_float(cells: list) -> np.ndarray:
    """Python values (SQL rows) → float64: numbers and NULL fast, text by the CSV rules."""
    try:
        return np.array(cells, dtype=np.float64)  # int, float, Decimal, bool, None (→ NaN)
    except (TypeError, ValueError):
        pass
    text = np.array(["" if v is None else v.decode() if isinstance(v, bytes) else str(v) for v in cells], dtype=str)
    return _to_float(np.char.strip(text))


def cells_to_float(values, *, column: str, first_row: int, source: str, lines: bool = False) -> np.ndarray:
    """The validation core every streamed format feeds its batches through: one column's cells →
    float64 (rows,), missing cells NaN.  ``first_row``: the 0-based party row of ``values[0]``.

    A cell that is not a number raises :class:`NonNumericCell` (``data row r``, 1-based, and
    ``lines``: the CSV's file line too), the same refusal as the whole-file CSV reader's.
    """
    try:
        if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
            return values.astype(np.float64, copy=False)
        if isinstance(values, list):
            return _python_cells_to_float(values)
        out = _arrow_to_float(values)
        if out is not None:
            return out
        cells = values.to_pylist()
        return _python_cells_to_float(cells)
    except (TypeError, ValueError):
        cells = values if isinstance(values, list) else values.to_pylist()
        text = np.array(["" if v is None else str(v) for v in cells], dtype=str)
        bad = _first_non_numeric(column, np.char.strip(text))
        raise NonNumericCell(NonNumeric(column, first_row + bad.row, bad.value, -1, lines), source) from None


class StreamedSource(PartySource):
    """A source read as a forward stream of batches (subclasses: :class:`ParquetSource`,
    :class:`CsvStreamSource`, :class:`ltm.party.sql_source.SqlSource`).

    A subclass sets ``description``, ``_kinds`` (column → :data:`NUMBER` / :data:`TEXT`, in the
    source's order; anything else goes to ``unusable`` with its message), and implements
    :meth:`_count_rows` and :meth:`_batches`.  A :data:`TEXT` column is a numeric column until a
    cell says otherwise: :meth:`scan` (run by the party before anything is sent) moves it to
    ``non_numeric`` with its first bad cell, and a read that meets one raises :class:`NonNumericCell`.
    """

    _kinds: dict[str, str]
    #: whether refusals name the file's line (CSV) besides the data row
    _lines = False

    def _count_rows(self) -> int:
        raise NotImplementedError

    def _batches(self, names: list[str], start: int) -> Iterator[dict[str, Any]]:
        """Raw batches of the columns ``names`` from row ``start`` on (a subclass may start earlier
        and say so by returning rows before it: see :meth:`_restart`)."""
        raise NotImplementedError

    def _skip_to(self, names: list[str], start: int) -> tuple[int, Iterator[dict[str, Any]]]:
        """(first row of the stream, the stream) for reading from ``start``; default: from row 0."""
        return 0, self._batches(names, 0)

    @property
    def rows(self) -> int:
        """The number of data rows (counted once: a Parquet footer, a CSV pass, a SQL count)."""
        if getattr(self, "_rows", None) is None:
            self._rows = self._count_rows()
        return self._rows

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns that may hold numbers (those found to hold text left out), in the source's order."""
        return tuple(k for k in self._kinds if k not in self.non_numeric)

    def _converted(self, batch: dict[str, Any], first_row: int) -> dict[str, np.ndarray]:
        return {k: cells_to_float(v, column=k, first_row=first_row, source=self.description, lines=self._lines)
                for k, v in batch.items()}

    _cursor: dict[str, Any] | None = None

    def _restart(self, names: list[str], start: int) -> None:
        first, stream = self._skip_to(names, start)
        self._cursor = {"names": names, "stream": stream, "pos": first, "buffer": []}

    def read(self, start: int, stop: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)`` of the named columns: name → float64 (stop − start,), read on from
        the cursor (restarted when the columns change or the read goes backwards)."""
        names = self._check_range(start, stop, names)
        if not names:
            return {}
        if start == stop:
            return {k: np.empty(0) for k in names}
        cur = self._cursor
        if cur is None or cur["names"] != names or start < cur["pos"]:
            self._restart(names, start)
            cur = self._cursor
        assert cur is not None
        parts: list[dict[str, np.ndarray]] = []
        while cur["pos"] < stop:
            if not cur["buffer"]:
                raw = next(cur["stream"], None)
                if raw is None:
                    raise DataSourceError(f"{self.description}: ended at row {cur['pos']}, before row {stop}")
                cur["buffer"] = [self._converted(raw, cur["pos"]), 0]
            block, offset = cur["buffer"]
            remaining = len(block[names[0]]) - offset
            lo = max(start - cur["pos"], 0)
            used = min(stop - cur["pos"], remaining)
            if lo < used:
                parts.append({k: v[offset + lo:offset + used] for k, v in block.items()})
            cur["pos"] += used
            cur["buffer"] = [block, offset + used] if used < remaining else []
        return {k: parts[0][k] if len(parts) == 1 else np.concatenate([p[k] for p in parts]) for k in names}

    def _column_pass(self, name: str, chunk_rows: int, h) -> tuple[int, int] | NonNumeric:
        """One column's fingerprint bytes into ``h`` and its (NaN count, first NaN row), or its
        first non-numeric cell."""
        count, first = 0, -1
        try:
            for a in range(0, self.rows, chunk_rows):
                values = np.ascontiguousarray(self.read(a, min(a + chunk_rows, self.rows), [name])[name], dtype="<f8")
                h.update(values.data)
                bad = ~np.isfinite(values)
                if bad.any():
                    first = a + int(np.argmax(bad)) if first < 0 else first
                    count += int(bad.sum())
        except NonNumericCell as exc:
            return exc.bad
        return count, first

    def scan(self, chunk_rows: int = SCAN_CHUNK_ROWS) -> SourceScan:
        """As :meth:`PartySource.scan` (the same fingerprint for the same numeric columns), and it
        finds the text columns: a column with a cell that is not a number joins ``non_numeric``
        (first bad cell) and is left out of the fingerprint, as the whole-file CSV reader leaves it."""
        if getattr(self, "_scan", None) is not None:
            return self._scan
        self.non_numeric = dict(self.non_numeric)
        h = hashlib.sha256(FINGERPRINT_TAG)
        nonfinite: dict[str, tuple[int, int]] = {}
        for name in sorted(self.columns):
            trial = h.copy()  # a column found to be text mid-way leaves the fingerprint as it was
            trial.update(fingerprint_column_header(name, self.rows))
            result = self._column_pass(name, chunk_rows, trial)
            if isinstance(result, NonNumeric):
                self.non_numeric[name] = result
                continue
            h = trial
            if result[0]:
                nonfinite[name] = result
        self._cursor = None
        self._scan = SourceScan(h.hexdigest(), nonfinite)
        return self._scan

    def read_all(self) -> tuple[dict[str, np.ndarray], dict[str, NonNumeric]]:
        """Every column whole (``ltm simulate`` holds its table in memory), with the non-numeric
        columns and their first bad cell and count of numeric cells, as :func:`parse_csv` gives."""
        columns: dict[str, np.ndarray] = {}
        for name in self.columns:
            try:
                columns[name] = self.read(0, self.rows, [name])[name]
            except NonNumericCell as exc:
                numeric = self._numeric_cells(name)
                self.non_numeric = {**self.non_numeric, name: NonNumeric(name, exc.bad.row, exc.bad.value,
                                                                         numeric, self._lines)}
        return columns, dict(self.non_numeric)

    def _numeric_cells(self, name: str) -> int:
        """How many cells of a text column are numbers (error path: cell by cell)."""
        numeric = 0
        for raw in self._batches([name], 0):
            cells = raw[name] if isinstance(raw[name], list) else raw[name].to_pylist()
            for v in cells:
                try:
                    _python_cells_to_float([v])
                    numeric += 1
                except (TypeError, ValueError):
                    pass
        self._cursor = None
        return numeric


# ------------------------------------------------------------------------------------ Parquet
def _arrow_kind(dtype) -> str | None:
    import pyarrow as pa

    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype) \
            or pa.types.is_boolean(dtype):
        return NUMBER
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return TEXT
    if pa.types.is_dictionary(dtype):
        return _arrow_kind(dtype.value_type)
    return None


def _require_pyarrow(what: str):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise DataSourceError(f"{what} needs pyarrow: pip install 'ltm[parquet]'") from None


class ParquetSource(StreamedSource):
    """A Parquet file, or a directory of ``*.parquet`` files (read in name order, one table), read
    by row group and batch, projected to the columns asked: memory O(row group), never the file."""

    def __init__(self, path: str | Path) -> None:
        _require_pyarrow("a Parquet source")
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.description = str(path)
        files = sorted(self.path.glob("*.parquet")) if self.path.is_dir() else [self.path]
        if not files:
            raise DataSourceError(f"{path}: a Parquet directory needs *.parquet files; found none")
        try:
            self._files = [pq.ParquetFile(f) for f in files]
        except Exception as exc:  # pyarrow's ArrowInvalid, OSError: one line naming the file
            raise DataSourceError(f"{path}: not a readable Parquet file ({exc})") from None
        schema = self._files[0].schema_arrow
        for f, pf in zip(files, self._files):
            if pf.schema_arrow.names != schema.names:
                raise DataSourceError(f"{f}: columns {pf.schema_arrow.names} differ from {files[0]}'s {schema.names}")
        self.paths = files
        kinds = {field.name: _arrow_kind(field.type) for field in schema}
        self._kinds = {k: v for k, v in kinds.items() if v is not None}
        self.unusable = {field.name: f"column {field.name!r} holds {field.type} values; the job needs real numbers "
                                     f"(float64)" for field in schema if kinds[field.name] is None}
        self.non_numeric = {}

    def _count_rows(self) -> int:
        return sum(pf.metadata.num_rows for pf in self._files)

    def partitions(self) -> list[tuple[Path, int, int]]:
        """(file, first party row, rows) per file: the units a Dask cluster reduces (party/dask_aggregate.py)."""
        out, offset = [], 0
        for path, pf in zip(self.paths, self._files):
            out.append((path, offset, pf.metadata.num_rows))
            offset += pf.metadata.num_rows
        return out

    def _skip_to(self, names: list[str], start: int) -> tuple[int, Iterator[dict[str, Any]]]:
        groups: list[tuple[int, int, int]] = []
        offset = 0
        for i, pf in enumerate(self._files):
            for g in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                if offset + n > start or groups:
                    groups.append((i, g, offset))
                offset += n
        first = groups[0][2] if groups else offset
        return first, self._group_batches(names, groups)

    def _batches(self, names: list[str], start: int) -> Iterator[dict[str, Any]]:
        return self._skip_to(names, start)[1]

    def _group_batches(self, names: list[str], groups: list[tuple[int, int, int]]) -> Iterator[dict[str, Any]]:
        for i, g, offset in groups:
            for batch in self._files[i].iter_batches(batch_size=BATCH_ROWS, row_groups=[g], columns=names,
                                                     use_threads=False):
                yield {k: batch.column(k) for k in names}

    def close(self) -> None:
        """Close the Parquet files."""
        for pf in getattr(self, "_files", []):
            pf.close()


# ------------------------------------------------------------------------------------ CSV, streamed
class CsvStreamSource(StreamedSource):
    """A CSV file read in a stream by pyarrow's CSV reader (blocks of a few MB), every cell
    converted by :func:`cells_to_float`: the same columns, values and refusals as the whole-file
    reader (:func:`ltm.party.data_source.parse_csv`), in memory O(block) whatever the file's size."""

    _lines = True

    def __init__(self, path: str | Path) -> None:
        _require_pyarrow("a streamed CSV source")
        self.path = Path(path)
        self.description = str(path)
        head = self._head()
        self._delimiter = _sniff_delimiter(head)
        import csv
        import io

        try:
            header = [h.strip() for h in next(csv.reader(io.StringIO(head), delimiter=self._delimiter))]
        except StopIteration:
            raise DataSourceError(f"{path}: empty file") from None
        if len(set(header)) != len(header):
            raise DataSourceError(f"{path}: duplicate column names in the header")
        self._header = header
        self._kinds = {h: TEXT for h in header}
        self.unusable, self.non_numeric = {}, {}
        self._rows = self._count_rows()  # the refusals of opening a CSV, at open

    def _head(self) -> str:
        with open(self.path, "rb") as fh:
            raw = fh.read(4096)
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            if exc.start < len(raw) - 3:  # not a multi-byte character cut at the sample's end
                raise self._utf8_error() from None
            text = raw[:exc.start].decode("utf-8-sig")
        return text

    def _reader(self, names: list[str]):
        import pyarrow as pa
        import pyarrow.csv as pcsv

        read = pcsv.ReadOptions(column_names=self._header, skip_rows=1, block_size=1 << 22, use_threads=False)
        parse = pcsv.ParseOptions(delimiter=self._delimiter, invalid_row_handler=self._bad_row)
        convert = pcsv.ConvertOptions(column_types={h: pa.string() for h in self._header},
                                      include_columns=names or self._header[:1], strings_can_be_null=False,
                                      null_values=[])
        try:
            return pcsv.open_csv(self.path, read_options=read, parse_options=parse, convert_options=convert)
        except pa.ArrowInvalid as exc:
            raise self._error(exc) from None

    def _bad_row(self, row) -> str:
        """pyarrow's hook for a row with the wrong number of fields: remembered for the refusal."""
        self._invalid = row
        return "error"

    def _error(self, exc: Exception) -> DataSourceError:
        text = str(exc).splitlines()[0]
        row = getattr(self, "_invalid", None)
        if row is not None:  # row.number counts the header as row 1, as the whole-file reader's data rows do not
            return DataSourceError(f"{self.path}: data row {row.number - 1} has {row.actual_columns} fields, "
                                   f"the header {row.expected_columns}")
        if "utf8" in text.lower():
            return self._utf8_error()
        return DataSourceError(f"{self.path}: not readable as CSV ({text})")

    def _batches(self, names: list[str], start: int) -> Iterator[dict[str, Any]]:
        import pyarrow as pa

        reader = self._reader(names)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as exc:
                raise self._error(exc) from None
            yield {k: batch.column(k) for k in names}

    def _count_rows(self) -> int:
        """One pass over every cell as text: the row count, and the refusals the whole-file reader
        gives on opening (ragged rows, bytes that are not UTF-8, a field over the csv module's limit)."""
        import csv

        import pyarrow as pa
        import pyarrow.compute as pc

        limit, rows = csv.field_size_limit(), 0
        for batch in self._batches(self._header, 0):
            for cells in batch.values():
                longest = pc.max(pc.utf8_length(cells)).as_py() or 0
                if longest > limit:
                    row = rows + int(np.argmax(pc.utf8_length(cells).to_numpy(zero_copy_only=False) > limit)) + 1
                    raise DataSourceError(f"{self.path}: line {row + 1}: not readable as CSV (field larger than "
                                          f"field limit ({limit}))")
            rows += len(next(iter(batch.values()))) if batch else 0
        if rows == 0:
            raise DataSourceError(f"{self.path}: no data rows")
        del pa
        return rows

    def _utf8_error(self) -> DataSourceError:
        """Where the file stops being UTF-8 (streamed: byte offset and line), as the whole-file reader says."""
        import codecs

        decoder, offset, line = codecs.getincrementaldecoder("utf-8")(), 0, 1
        with open(self.path, "rb") as fh:
            while block := fh.read(1 << 20):
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as exc:
                    at = offset + exc.start - len(decoder.getstate()[0]) if exc.start >= 0 else offset
                    at = max(at, offset)
                    raw = block[at - offset] if at - offset < len(block) else 0
                    line += block.count(b"\n", 0, at - offset)
                    return DataSourceError(f"{self.path}: not UTF-8 text: byte 0x{raw:02x} at offset {at} "
                                           f"(line {line}); save the file as UTF-8")
                line += block.count(b"\n")
                offset += len(block)
        return DataSourceError(f"{self.path}: not UTF-8 text; save the file as UTF-8")


"""The party's data source: its rows (or column block) as named float64 columns.

CSV (header row; ``,`` ``;`` or tab separated, sniffed) for people, Parquet and SQL
(:mod:`ltm.party.streamed_source`, :mod:`ltm.party.sql_source`), ``.npz`` (one array per column) or a
directory of ``<column>.npy`` files for large data, and a generated synthetic source for
benchmarks.  :func:`open_source` gives a :class:`PartySource` that the party reads a chunk of
clients at a time, so its memory does not grow with its client count (a CSV is streamed by
pyarrow; parsed whole only without it).  Non-numeric columns are kept out and named; missing or non-finite
values stay NaN here so that :func:`ltm.party.randomizer.client_vectors` can say exactly which
column and row are bad.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import urllib.parse
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ltm.errors import LtmError
from ltm.randomness import Randomness


class DataSourceError(LtmError, ValueError):
    """A data file a party cannot read; the message names the file and the problem."""

    exit_code = 2


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
    #: whether the source has text lines (CSV) to name besides the data row (not Parquet or SQL)
    lines: bool = True

    def describe(self, source: str) -> str:
        """The one-line refusal naming the cell: data row, file line (CSV), column and value."""
        line = f" (line {self.row + 1})" if self.lines else ""
        return (f"{source}: data row {self.row}{line}, column {self.column!r}: "
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


def read_text(path: Path) -> str:
    """A data file's text as UTF-8 (a leading byte-order mark dropped); bytes that are not UTF-8
    are a :class:`DataSourceError` naming the line and byte, not a ``UnicodeDecodeError``."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataSourceError(f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                              f"(line {line}); save the file as UTF-8") from None


def parse_csv(text: str, *, source: str) -> tuple[dict[str, np.ndarray], dict[str, NonNumeric]]:
    """Parse CSV text into ``(numeric columns, non-numeric columns by name)``; each non-numeric
    column records its first bad cell so a caller that needs the column can name row and column."""
    reader = csv.reader(io.StringIO(text), delimiter=_sniff_delimiter(text[:4096]))
    try:
        header = [h.strip() for h in next(reader)]
        if len(set(header)) != len(header):
            raise DataSourceError(f"{source}: duplicate column names in the header")
        rows = [r for r in reader if r]
    except StopIteration:
        raise DataSourceError(f"{source}: empty file") from None
    except csv.Error as exc:  # a field over csv.field_size_limit(), …: one line, not a traceback
        raise DataSourceError(f"{source}: line {reader.line_num}: not readable as CSV ({exc})") from None
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
    return parse_csv(read_text(p), source=str(p))


# ---------------------------------------------------------------------------------------------------
# Streaming sources: a party's rows in chunks of clients [a, b), memory O(chunk) whatever its size.
# ---------------------------------------------------------------------------------------------------

#: Rows per read when a source is scanned column by column (fingerprint, finiteness): 1 Mi rows =
#: 8 MiB per float64 column, whatever the party's size.
SCAN_CHUNK_ROWS = 1 << 20
#: Domain tag of the ledger's data fingerprint (``ltm.party.ledger.source_fingerprint``).
FINGERPRINT_TAG = b"ltm.source.v1"


def fingerprint_column_header(name: str, rows: int) -> bytes:
    """What the ledger fingerprint hashes before a column's float64 values: its name and length."""
    return len(name.encode()).to_bytes(8, "little") + name.encode() + rows.to_bytes(8, "little")


@dataclass(frozen=True)
class SourceScan:
    """One streamed pass over a source: the ledger's fingerprint of its numeric columns and, per
    column with any, ``(count, first row)`` of its NaN/infinite values (0-based party rows)."""

    fingerprint: str
    nonfinite: dict[str, tuple[int, int]]


def _not_one_per_row(name: str, shape: tuple[int, ...]) -> str:
    return f"column {name!r} must be one value per row (a 1-D array), got an array of shape {tuple(shape)}"


class PartySource:
    """A party's data as named columns, read in chunks of rows ``[start, stop)`` (0-based rows of
    this party: row 0 is its first client).

    Implementations: :class:`TableSource` (in memory: CSV, tests, the in-process runtime),
    :class:`NpzSource` and :class:`NpyDirSource` (read per chunk from the file, never whole), and
    :class:`SyntheticRidgeSource` (generated chunk by chunk: benchmarks).  ``read`` returns each
    column as a 1-D array of ``stop − start`` values — float64 for real data; any other dtype is
    returned as stored so that :mod:`ltm.party.randomizer` can name the problem.  A source never
    builds an array of the party's size unless it already holds one (:class:`TableSource`).
    """

    #: what the data is (a path, or a generator's descriptor), for messages
    description: str = ""
    #: columns that are not one real number per row: name → the message that says so
    unusable: dict[str, str] = {}
    #: non-numeric columns (CSV), with their first bad cell
    non_numeric: dict[str, NonNumeric] = {}

    @property
    def rows(self) -> int:
        """The number of data rows."""
        raise NotImplementedError

    #: the numeric 1-D columns, set by each source (see :attr:`columns`)
    _columns: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        """The numeric 1-D columns, in the source's order."""
        return self._columns

    def read(self, start: int, stop: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)`` of the columns ``names`` (default: all): name → array (stop − start,)."""
        raise NotImplementedError

    def _check_range(self, start: int, stop: int, names: Sequence[str] | None) -> list[str]:
        if not 0 <= start <= stop <= self.rows:
            raise DataSourceError(f"{self.description}: rows [{start}, {stop}) outside the source's {self.rows} rows")
        names = list(self.columns if names is None else names)
        missing = [c for c in names if c not in self.columns]
        if missing:
            raise DataSourceError(f"{self.description}: no column(s) {missing}; it has {list(self.columns)}")
        return names

    def scan(self, chunk_rows: int = SCAN_CHUNK_ROWS) -> SourceScan:
        """Fingerprint and finiteness of every numeric column, in one streamed pass (cached).

        The fingerprint is SHA-256 over the columns sorted by name, each as its name, its length
        and its values as little-endian float64 — the same value :func:`ltm.party.ledger.source_fingerprint`
        gives for the same columns held in memory — so it is computed column by column, a chunk at a
        time (one pass per column; each column's reads are sequential).  Columns that are not one
        real number per row (:attr:`unusable`: an ``.npz``'s 2-D or text arrays) are left out of it.
        """
        if getattr(self, "_scan", None) is not None:
            return self._scan
        h = hashlib.sha256(FINGERPRINT_TAG)
        nonfinite: dict[str, tuple[int, int]] = {}
        for name in sorted(self.columns):
            h.update(fingerprint_column_header(name, self.rows))
            count, first = 0, -1
            for a in range(0, self.rows, chunk_rows):
                values = self.read(a, min(a + chunk_rows, self.rows), [name])[name]
                values = np.ascontiguousarray(np.asarray(values, dtype=np.float64), dtype="<f8")
                h.update(values.data)
                bad = ~np.isfinite(values)
                if bad.any():
                    if first < 0:
                        first = a + int(np.argmax(bad))
                    count += int(bad.sum())
            if count:
                nonfinite[name] = (count, first)
        self._scan = SourceScan(h.hexdigest(), nonfinite)
        return self._scan

    def fingerprint(self) -> str:
        """The fingerprint the ledger records with each charge on this data (see :meth:`scan`)."""
        return self.scan().fingerprint

    def close(self) -> None:
        """Release open files (a no-op for sources that hold none)."""


class TableSource(PartySource):
    """Columns already in memory (a parsed CSV; tests; the in-process runtime): ``read`` slices."""

    def __init__(self, table: Mapping[str, np.ndarray], *, description: str = "in-memory table",
                 non_numeric: Mapping[str, NonNumeric] | None = None, rows: int | None = None) -> None:
        self.table = dict(table)
        self.description = description
        self.non_numeric = dict(non_numeric or {})
        self.unusable = {k: _not_one_per_row(k, np.shape(v)) for k, v in self.table.items() if np.ndim(v) != 1}
        self._columns = tuple(k for k in self.table if k not in self.unusable)
        lengths = {len(self.table[k]) for k in self._columns}
        self._rows = lengths.pop() if len(lengths) == 1 else (rows or 0 if not lengths else -1)

    @property
    def rows(self) -> int:
        """The number of rows (every column must have it)."""
        if self._rows < 0:
            raise DataSourceError(f"{self.description}: columns of different lengths")
        return self._rows

    def read(self, start: int, stop: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)`` of the named columns (all by default): name → float64 (stop − start,)."""
        names = self._check_range(start, stop, names)
        return {k: self.table[k][start:stop] for k in names}


class _NpyColumn:
    """One ``.npy`` array inside a file (a plain ``.npy`` or an uncompressed ``.npz`` member) read by
    ``os.pread`` at its data offset — no mmap, so a party's resident memory is its chunk, not the
    file's pages — or, for a compressed ``.npz`` member, by seeking forward in its decompressed
    stream (sequential reads cost one decompression in total)."""

    def __init__(self, path: Path, name: str, *, offset: int | None = None, member=None) -> None:
        self.path, self.name, self.member = path, name, member
        if member is None:
            self._fh = open(path, "rb")  # noqa: SIM115 - closed by close()
            self._fh.seek(offset or 0)
            stream = self._fh
        else:
            self._fh = None
            stream = member
        try:
            version = np.lib.format.read_magic(stream)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(stream) if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(stream))
        except ValueError as exc:
            raise DataSourceError(f"{path}: array {name!r} is not a valid .npy array ({exc})") from None
        if dtype.hasobject:
            raise DataSourceError(f"{path}: array {name!r} holds Python objects; store numbers (float64)")
        self.shape, self.fortran, self.dtype = tuple(shape), fortran, dtype
        self.data_offset = stream.tell()

    def read(self, start: int, stop: int) -> np.ndarray:
        size = self.dtype.itemsize
        count = stop - start
        if self.member is None:
            raw = os.pread(self._fh.fileno(), count * size, self.data_offset + start * size)
        else:
            if self.member.tell() != self.data_offset + start * size:
                self.member.seek(self.data_offset + start * size)
            raw = self.member.read(count * size)
        if len(raw) != count * size:
            raise DataSourceError(f"{self.path}: array {self.name!r} is truncated")
        values = np.frombuffer(raw, dtype=self.dtype, count=count)
        return values.astype(np.float64) if values.dtype.kind in "biuf" else values.copy()

    def close(self) -> None:
        for f in (self._fh, self.member):
            if f is not None:
                f.close()


class _ColumnFileSource(PartySource):
    """Shared by the ``.npz`` and ``.npy``-directory sources: one :class:`_NpyColumn` per array."""

    def _init_columns(self, arrays: dict[str, _NpyColumn]) -> None:
        self._arrays = arrays
        self.unusable = {k: _not_one_per_row(k, a.shape) for k, a in arrays.items() if len(a.shape) != 1}
        self.unusable.update({k: f"column {k!r} holds {a.dtype} values; the job needs real numbers (float64)"
                              for k, a in arrays.items() if a.dtype.kind not in "biuf" and k not in self.unusable})
        self._columns = tuple(k for k in arrays if k not in self.unusable)
        lengths = {arrays[k].shape[0] for k in self._columns}
        if len(lengths) > 1:
            self.close()
            raise DataSourceError(f"{self.description}: columns of different lengths "
                                  f"{ {k: arrays[k].shape[0] for k in self._columns} }")
        self._rows = lengths.pop() if lengths else 0

    @property
    def rows(self) -> int:
        return self._rows

    def read(self, start: int, stop: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = self._check_range(start, stop, names)
        return {k: self._arrays[k].read(start, stop) for k in names}

    def close(self) -> None:
        for a in getattr(self, "_arrays", {}).values():
            a.close()


class NpzSource(_ColumnFileSource):
    """An ``.npz`` with one 1-D array per column (``np.savez``), read a chunk at a time.

    Uncompressed members (``np.savez``) are read in place at their offset in the zip file;
    compressed ones (``np.savez_compressed``) are decompressed as a stream (forward seeks).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.description = str(path)
        arrays: dict[str, _NpyColumn] = {}
        try:
            with zipfile.ZipFile(self.path) as zf:
                infos = [i for i in zf.infolist() if i.filename.endswith(".npy")]
            for info in infos:
                name = info.filename[:-4]
                if info.compress_type == zipfile.ZIP_STORED:
                    with open(self.path, "rb") as fh:  # the local header's extra field may differ from the directory's
                        fh.seek(info.header_offset)
                        local = fh.read(30)
                    if local[:4] != b"PK\x03\x04":
                        raise DataSourceError(f"{path}: corrupt zip member {info.filename!r}")
                    offset = info.header_offset + 30 + int.from_bytes(local[26:28], "little") \
                        + int.from_bytes(local[28:30], "little")
                    arrays[name] = _NpyColumn(self.path, name, offset=offset)
                else:
                    arrays[name] = _NpyColumn(self.path, name, member=zipfile.ZipFile(self.path).open(info))
        except (zipfile.BadZipFile, OSError) as exc:
            for a in arrays.values():
                a.close()
            raise DataSourceError(f"{path}: not a readable .npz file ({exc})") from None
        self._init_columns(arrays)


class NpyDirSource(_ColumnFileSource):
    """A directory of ``<column>.npy`` files (one 1-D array each), read a chunk at a time."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.description = str(path)
        files = sorted(self.path.glob("*.npy"))
        if not files:
            raise DataSourceError(f"{path}: a column directory needs <column>.npy files; found none")
        self._init_columns({f.stem: _NpyColumn(f, f.stem, offset=0) for f in files})


# ------------------------------------------------------------------ synthetic (benchmark) data
SYNTHETIC_PREFIX = "synthetic:"
SYNTHETIC_SUFFIX = ".synth.json"
#: Rows per generated block: block j of a synthetic dataset is drawn from its own seeded child
#: stream, so any row range is generated without the rows before it.
SYNTHETIC_BLOCK_ROWS = 1 << 16


@dataclass(frozen=True)
class SyntheticRidge:
    """A deterministic, random-access synthetic ridge dataset (Burkhardt et al. §6.2, the model of
    :func:`ltm.datasets.synthetic.synthetic_ridge`): rows ``x ~ N(0, I_d)``, label ``y = x·β + N(0, noise²)``
    with true coefficients ``β ~ N(0, I_d)``; columns ``x0 … x{d-1}, y``.

    Global row i lives in block ``i // block``, drawn from numpy's SFC64 generator seeded with the
    key of ``Randomness.seeded_insecure(seed).child("synthetic-ridge-blocks", d, split, "block", j)``
    (ziggurat normals: 3× faster than the CSPRNG's Box–Muller, and generating the rows was a
    party's largest cost at 10⁸–10⁹ clients), so rows [a, b) are the same whichever range they are
    read in, and no read builds more than the blocks it touches.  ``split`` names independent
    datasets of the same model ("train", "test").  This is *data* (a benchmark's stand-in for a
    party's table), not the party's randomness: the party still clips, noises with its own CSPRNG
    (:mod:`ltm.randomness`) and charges its ledger; nothing private is drawn from this generator.
    """

    d: int
    seed: int = 0
    noise: float = 0.0
    block: int = SYNTHETIC_BLOCK_ROWS

    def __post_init__(self) -> None:
        if self.d < 1 or self.block < 1 or self.seed < 0 or not self.noise >= 0:
            raise DataSourceError(f"synthetic ridge: need d ≥ 1, block ≥ 1, seed ≥ 0, noise ≥ 0 (got {self})")

    @property
    def names(self) -> tuple[str, ...]:
        """The column names: ``x0`` … ``x{d-1}``, then ``y``."""
        return (*(f"x{j}" for j in range(self.d)), "y")

    def _root(self) -> Randomness:
        return Randomness.seeded_insecure(self.seed).child("synthetic-ridge-blocks", self.d)

    @functools.cached_property
    def coefficients(self) -> np.ndarray:
        """The true β: float64 (d,)."""
        return self._root().child("coefficients").stream().normal(self.d)

    def moments(self) -> dict[str, tuple[float, float]]:
        """Population mean and standard deviation of every column (public: the model's)."""
        out = {f"x{j}": (0.0, 1.0) for j in range(self.d)}
        out["y"] = (0.0, float(np.sqrt(self.coefficients @ self.coefficients + self.noise ** 2)))
        return out

    def block_rows(self, j: int, split: str = "train") -> np.ndarray:
        """Block ``j``: float64 (block, d + 1), columns x0 … x{d-1}, y."""
        key = self._root().child(split, "block", j).key
        gen = np.random.Generator(np.random.SFC64(np.random.SeedSequence(int.from_bytes(key, "little"))))
        out = np.empty((self.block, self.d + 1))
        out[:, :self.d] = gen.standard_normal((self.block, self.d))
        # y = x·β without BLAS: a threaded gemv on 2 cores spins its idle threads, and every party
        # process would burn CPU the servers need (einsum without optimize never calls BLAS).
        np.einsum("ij,j->i", out[:, :self.d], self.coefficients, out=out[:, self.d])
        if self.noise:
            out[:, self.d] += gen.normal(0.0, self.noise, self.block)
        return out

    def rows(self, start: int, stop: int, split: str = "train") -> np.ndarray:
        """Global rows ``[start, stop)``: float64 (stop − start, d + 1) (for small ranges: test data)."""
        parts = [self.block_rows(j, split)[max(start - j * self.block, 0):min(stop - j * self.block, self.block)]
                 for j in range(start // self.block, -(-stop // self.block))]
        return np.concatenate(parts) if parts else np.empty((0, self.d + 1))


class SyntheticRidgeSource(PartySource):
    """A party holding rows ``[offset, offset + n)`` of a :class:`SyntheticRidge` dataset,
    generated block by block as they are read (one block cached: sequential reads generate each
    block once).  Its fingerprint is the hash of its descriptor: the data are a function of it."""

    def __init__(self, model: SyntheticRidge, n: int, offset: int = 0, split: str = "train") -> None:
        if n < 1 or offset < 0:
            raise DataSourceError(f"synthetic ridge: need n ≥ 1 and offset ≥ 0 (got n={n}, offset={offset})")
        self.model, self.n, self.offset, self.split = model, n, offset, split
        self.description = (f"synthetic:ridge?d={model.d}&seed={model.seed}&noise={model.noise:g}"
                            f"&block={model.block}&offset={offset}&n={n}&split={split}")
        self._cache: tuple[int, np.ndarray] | None = None

    @property
    def rows(self) -> int:
        """The number of rows this party holds (n)."""
        return self.n

    @property
    def columns(self) -> tuple[str, ...]:
        """The column names (the model's)."""
        return self.model.names

    def _block(self, j: int) -> np.ndarray:
        if self._cache is None or self._cache[0] != j:
            self._cache = (j, self.model.block_rows(j, self.split))
        return self._cache[1]

    def read(self, start: int, stop: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)`` of the named columns, generated block by block from the model's seed
        (the same rows whatever the range asked): name → float64 (stop − start,).
        """
        names = self._check_range(start, stop, names)
        a, b = self.offset + start, self.offset + stop
        out = {k: np.empty(stop - start) for k in names}
        idx = [self.model.names.index(k) for k in names]
        g = self.model.block
        for j in range(a // g, -(-b // g)):
            lo, hi = max(a, j * g), min(b, (j + 1) * g)
            block = self._block(j)
            for k, c in zip(names, idx):
                out[k][lo - a:hi - a] = block[lo - j * g:hi - j * g, c]
        return out

    def scan(self, chunk_rows: int = SCAN_CHUNK_ROWS) -> SourceScan:
        """Generated data are finite; the fingerprint hashes the descriptor (regenerating the whole
        dataset to hash it would cost as much as the upload)."""
        digest = hashlib.sha256(b"ltm.source.synthetic.v1\0" + self.description.encode()).hexdigest()
        return SourceScan(digest, {})


def parse_synthetic(spec: str | Mapping[str, object]) -> SyntheticRidgeSource:
    """A :class:`SyntheticRidgeSource` from ``synthetic:ridge?d=10&seed=1&n=1000000&offset=0`` (keys:
    ``d``, ``n`` required; ``seed``, ``offset``, ``noise``, ``block``, ``split`` optional) or from
    the same keys as a mapping (a ``*.synth.json`` file, with ``"generator": "ridge"``)."""
    if isinstance(spec, str):
        body = spec[len(SYNTHETIC_PREFIX):] if spec.startswith(SYNTHETIC_PREFIX) else spec
        generator, _, query = body.partition("?")
        fields: dict[str, object] = {k: v[-1] for k, v in urllib.parse.parse_qs(query, strict_parsing=bool(query)).items()}
        fields["generator"] = generator
    else:
        fields = dict(spec)
    where = spec if isinstance(spec, str) else "synthetic descriptor"
    if fields.get("generator") != "ridge":
        raise DataSourceError(f"{where}: unknown generator {fields.get('generator')!r}; the synthetic source "
                              f"knows 'ridge' (synthetic:ridge?d=10&n=1000000&seed=1)")
    known = {"generator", "d", "n", "seed", "offset", "noise", "block", "split"}
    unknown = sorted(set(fields) - known)
    if unknown or "d" not in fields or "n" not in fields:
        raise DataSourceError(f"{where}: needs d and n (optional seed, offset, noise, block, split)"
                              + (f"; unknown key(s) {unknown}" if unknown else ""))
    try:
        model = SyntheticRidge(int(fields["d"]), int(fields.get("seed", 0)), float(fields.get("noise", 0.0)),
                               int(fields.get("block", SYNTHETIC_BLOCK_ROWS)))
        return SyntheticRidgeSource(model, int(fields["n"]), int(fields.get("offset", 0)),
                                    str(fields.get("split", "train")))
    except (TypeError, ValueError) as exc:
        raise DataSourceError(f"{where}: {exc}") from None


def is_synthetic(path: str | Path) -> bool:
    """Whether ``--data`` names a generated source (``synthetic:…``), not a file."""
    return str(path).startswith(SYNTHETIC_PREFIX)


def open_source(path: str | Path, *, query: str | None = None, password: str | None = None,
                stream_csv: bool = True) -> PartySource:
    """The party's data as a :class:`PartySource`, read a chunk at a time whatever its format:

    * ``.csv``: streamed by pyarrow's CSV reader (:class:`ltm.party.streamed_source.CsvStreamSource`;
      parsed whole when pyarrow is not installed, or with ``stream_csv=False``);
    * ``.parquet`` or a directory of ``*.parquet`` (:class:`ltm.party.streamed_source.ParquetSource`);
    * ``postgresql://…`` with ``query`` (a table name or a SELECT) and ``password`` (None: libpq's
      ``PGPASSWORD``), or an SQLite file (``sqlite:///path``, ``.sqlite``, ``.sqlite3``, ``.db``)
      (:mod:`ltm.party.sql_source`);
    * ``.npz`` and a directory of ``<column>.npy``; ``*.synth.json`` or ``synthetic:ridge?…``
      (generated per chunk: benchmarks).
    """
    from ltm.party import sql_source  # (these import this module)
    from ltm.party.streamed_source import CsvStreamSource, ParquetSource

    if is_synthetic(path):
        return parse_synthetic(str(path))
    if sql_source.is_postgres(str(path)):
        return sql_source.PostgresSource(str(path), query, password=password)
    if query is not None and not sql_source.is_sqlite(str(path)):
        raise DataSourceError(f"{path}: --query reads a SQL source (postgresql://… or an SQLite file), not this")
    if sql_source.is_sqlite(str(path)):
        return sql_source.SqliteSource(path, query)
    p = Path(path)
    if p.is_dir():
        return ParquetSource(p) if any(p.glob("*.parquet")) else NpyDirSource(p)
    if not p.is_file():
        raise DataSourceError(f"no such file: {p}")
    if p.name.endswith(SYNTHETIC_SUFFIX):
        try:
            return parse_synthetic(json.loads(read_text(p)))
        except DataSourceError:
            raise
        except (ValueError, TypeError, RecursionError) as exc:
            raise DataSourceError(f"{p}: not a synthetic descriptor ({exc})") from None
    if p.suffix == ".npz":
        return NpzSource(p)
    if p.suffix in (".parquet", ".pq"):
        return ParquetSource(p)
    if stream_csv and _have_pyarrow():
        return CsvStreamSource(p)
    columns, non_numeric = parse_csv(read_text(p), source=str(p))
    return TableSource(columns, description=str(p), non_numeric=non_numeric)


def _have_pyarrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def is_database(path: str | Path) -> bool:
    """Whether ``--data`` names a database (a PostgreSQL DSN or an SQLite file)."""
    from ltm.party import sql_source

    return sql_source.is_postgres(str(path)) or sql_source.is_sqlite(str(path))


def as_source(data: Mapping[str, np.ndarray] | PartySource) -> PartySource:
    """``data`` as a :class:`PartySource` (a mapping of columns becomes a :class:`TableSource`)."""
    return data if isinstance(data, PartySource) else TableSource(data)

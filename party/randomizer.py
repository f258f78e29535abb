"""The party core: client vectors → clip → (lift) → round to the grid → one noisy copy per piece → k shares.

Pure (no I/O, no network): the gRPC uploader and the in-process runtime both call
:func:`make_batches` and ship the resulting :class:`~ltm.batch.ShareBatch` objects.
All work is vectorised over the clients of a batch.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from ltm.batch import ShareBatch
from ltm.clipping import clip_rows
from ltm.dp.calibration import NoisePlan
from ltm.dp.grid import round_to_grid
from ltm.dp.noise import sample_noise
from ltm.errors import LtmError
from ltm.jobspec import JobSpec, PartySpec
from ltm.party.data_source import PartySource, TableSource
from ltm.randomness import Randomness
from ltm.sharing import share
from ltm.transforms import FeaturePipeline

#: Clients per upload batch: 65 536 × 11 columns × 8 B ≈ 5.8 MB per piece, well under gRPC limits
#: once chunked, and small enough to keep a party's memory flat.
DEFAULT_BATCH_CLIENTS = 1 << 16
#: Largest share array (pieces × clients × columns) one batch may hold: 4 Mi elements = 32 MiB.
#: Dense sketches (m pieces) and wide data get proportionally fewer clients per batch, so a
#: party's memory stays flat and no batch approaches a server's size limit.
MAX_BATCH_ELEMENTS = 1 << 22


class PartyDataError(LtmError, ValueError):
    """The party's data does not fit the job spec (missing columns, NaN, wrong length, …)."""

    exit_code = 4
    prefix = "bad data: "


def _needed_raw_columns(spec: JobSpec, indices: list[int]) -> list[str]:
    """The raw data columns the party's entries are built from (the intercept needs none), in spec order."""
    need = {s for i in indices for s in spec.layout[i].sources}
    return [col.name for col in spec.columns if col.name in need and col.role != "intercept"]


def _checked_column(name: str, column: object, rows: int, party_id: str, row_offset: int = 0) -> np.ndarray:
    """One raw column as float64 (rows,), checked with a precise error; ``row_offset``: the party
    row of ``column[0]`` (a chunk of a streamed source), so the error names the party's row."""
    if np.iscomplexobj(column):  # a cast to float64 would silently drop the imaginary part
        raise PartyDataError(f"column {name!r} holds complex numbers; the job needs real values")
    try:
        values = np.asarray(column, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PartyDataError(f"column {name!r} is not numeric: {exc}") from exc
    if values.ndim != 1:
        raise PartyDataError(f"column {name!r} must be one value per row (a 1-D array), "
                             f"got an array of shape {values.shape}")
    if values.shape != (rows,):
        raise PartyDataError(f"column {name!r} has {values.shape[0]} values but "
                             f"party {party_id!r} holds {rows} rows")
    bad = ~np.isfinite(values)
    if bad.any():
        raise PartyDataError(f"column {name!r} has {int(bad.sum())} NaN/infinite values "
                             f"(first at row {row_offset + int(np.argmax(bad))}); clean or impute them first")
    return values


def _missing_column(party: PartySpec, name: str, have: Iterable[str]) -> PartyDataError:
    return PartyDataError(f"party {party.party_id!r}: column {name!r} required by the job is "
                          f"missing from the data (have: {sorted(have)})")


def _checked_raw_columns(spec: JobSpec, party: PartySpec, table: Mapping[str, np.ndarray],
                         indices: list[int]) -> dict[str, np.ndarray]:
    """The raw columns the party's entries need, as float64 (rows,), each checked with a precise error."""
    raw: dict[str, np.ndarray] = {}
    for name in _needed_raw_columns(spec, indices):
        if name not in table:
            raise _missing_column(party, name, table)
        raw[name] = _checked_column(name, table[name], party.size, party.party_id)
    return raw


def _checked_source(spec: JobSpec, party: PartySpec, source: PartySource, indices: list[int]) -> list[str]:
    """The raw columns the party's entries need from a streamed ``source``, checked before any
    chunk is read: present, numeric, one value per row, the party's row count.  (Values are
    checked chunk by chunk as they are read; ``ltm party`` scans the file for NaN/∞ before
    anything is sent, :meth:`PartySource.scan`.)"""
    names = _needed_raw_columns(spec, indices)
    for name in names:
        if name in source.non_numeric:
            raise PartyDataError(source.non_numeric[name].describe(source.description))
        if name in source.unusable:
            raise PartyDataError(source.unusable[name])
        if name not in source.columns:
            raise _missing_column(party, name, source.columns)
    if names and source.rows != party.size:
        raise PartyDataError(f"column {names[0]!r} has {source.rows} values but "
                             f"party {party.party_id!r} holds {party.size} rows")
    return names


def check_source(spec: JobSpec, party_id: str, source: PartySource) -> None:
    """Refuse, before anything is sent, every problem :func:`make_batches` would meet in a streamed
    ``source``: missing, non-numeric or ill-shaped columns, a wrong row count, and NaN/∞ values
    (found by one streamed pass, :meth:`PartySource.scan`, which also gives the ledger's fingerprint)."""
    party = spec.party(party_id)
    names = _checked_source(spec, party, source, spec.party_column_indices(party))
    nonfinite = source.scan().nonfinite
    # A streamed text source (CSV, SQL) learns which columns are not numbers in the scan: ask again.
    names = _checked_source(spec, party, source, spec.party_column_indices(party))
    for name in names:
        if name in nonfinite:
            count, first = nonfinite[name]
            raise PartyDataError(f"column {name!r} has {count} NaN/infinite values (first at row {first}); "
                                 f"clean or impute them first")


def client_vectors(spec: JobSpec, party: PartySpec, table: Mapping[str, np.ndarray],
                   start: int = 0, stop: int | None = None) -> np.ndarray:
    """Client vectors of the party's entries, before clipping: float64 (rows, len(party entries)).

    ``table`` maps raw column names to 1-D arrays (one value per client/row the party holds).
    Each raw column is mapped by its public ``(x − center) / scale``, then the job's public
    transforms (``ltm.transforms``: e.g. random features) build the client-vector entries.  The
    intercept column needs no data (its raw value is 1).  ``start``/``stop`` select the party's
    rows ``start..stop−1`` (the transforms run only on those: random features are wide).
    """
    indices = spec.party_column_indices(party)
    raw = _checked_raw_columns(spec, party, table, indices)
    stop = party.size if stop is None else stop
    raw = {k: v[start:stop] for k, v in raw.items()}
    return FeaturePipeline.for_spec(spec).vectors(raw, indices, rows=stop - start)


def noisy_copies(vectors: np.ndarray, pieces: int, plan: NoisePlan, randomness: Randomness) -> np.ndarray:
    """One independently noised copy per piece, as ring elements: uint64 (pieces, rows, cols).

    The clipped vectors are rounded to the grid 2^-f (``ltm.dp.grid``; the plan's sensitivity
    includes the rounding's widening) and each copy gets its own exact integer noise in grid steps
    (``ltm.dp.noise``), added in Z_2^64 (wrap-around uint64 arithmetic is the ring's).
    """
    grid = round_to_grid(vectors, plan.frac_bits).view(np.uint64)
    noisy = sample_noise(randomness.stream(), plan, (pieces, *vectors.shape)).view(np.uint64)
    noisy += grid[None, :, :]
    return noisy


def party_randomness(base: Randomness, spec: JobSpec, party_id: str) -> Randomness:
    """The randomness a party draws its noise and shares from for one job.

    Production (``system``) randomness is fresh OS entropy whatever the labels.  In seeded mode the
    key derivation binds the job (:attr:`JobSpec.computation_digest`: the job digest without the
    job's name and the servers' endpoints) and the party, so one ``--seed`` never gives two
    different jobs (or two parties) the same noise.  gRPC and the in-process runtime call this, so a seeded run
    releases the same bytes in process and over gRPC.
    """
    return base.child("job", spec.computation_digest, "party", party_id)


@dataclass(frozen=True)
class BatchPlan:
    """How a party cuts its clients into batches: ``(batch_index, start, stop)`` triples."""

    ranges: tuple[tuple[int, int, int], ...]


def effective_batch_clients(spec: JobSpec, party: PartySpec, requested: int = DEFAULT_BATCH_CLIENTS) -> int:
    """Clients per batch for this job and party: ``requested``, capped so that one batch's share
    array has at most :data:`MAX_BATCH_ELEMENTS` elements (a deterministic function of the public
    spec, so a resumed party cuts its batches exactly as before)."""
    if spec.upload_mode == "aggregate":  # the party's one aggregated upload covers all its clients
        return party.size
    per_client = spec.make_sketch().pieces * len(spec.upload_columns(party))
    return max(1, min(requested, MAX_BATCH_ELEMENTS // per_client))


def plan_batches(party: PartySpec, batch_clients: int = DEFAULT_BATCH_CLIENTS) -> BatchPlan:
    """The party's clients cut into batches of at most ``batch_clients``: (index, start, stop) each."""
    if batch_clients < 1:
        raise ValueError("batch size must be ≥ 1")
    ranges = tuple((i, a, min(a + batch_clients, party.stop))
                   for i, a in enumerate(range(party.start, party.stop, batch_clients)))
    return BatchPlan(ranges)


def open_source(spec: JobSpec, party: PartySpec, table: Mapping[str, np.ndarray] | PartySource):
    """``(source, streamed, needed, pipeline, columns)`` for reading a party's data chunk by chunk:
    a streamed source is checked before any chunk is read, an in-memory table is checked whole."""
    columns = tuple(spec.party_column_indices(party))
    if isinstance(table, PartySource):
        source, streamed = table, True
        needed = _checked_source(spec, party, source, list(columns))
    else:
        raw = _checked_raw_columns(spec, party, table, list(columns))
        source, streamed, needed = TableSource(raw, rows=party.size), False, list(raw)
    return source, streamed, needed, FeaturePipeline.for_spec(spec), columns


def release_vectors(spec: JobSpec, party: PartySpec, pipeline: FeaturePipeline, chunk: Mapping[str, np.ndarray],  # noqa: PLR0913 - the lift's keyword-only inputs (rows, streaming, offset, lift)
                    columns: tuple[int, ...], *, rows: int, streamed: bool, row_offset: int,
                    lifted: bool = True) -> np.ndarray:
    """The vectors a chunk of the party's clients release (before rounding and noise): float64
    (rows, W).  Built by the public transforms, clipped, and lifted for a lifted release kind;
    one implementation for per-client batches and aggregated uploads.  ``row_offset``: the party
    row of the chunk's first row (a streamed chunk's values are checked here, naming that row).
    ``lifted=False``: the clipped vectors before the lift (party/aggregate.py lifts a gram chunk itself)."""
    if streamed:
        chunk = {k: _checked_column(k, v, rows, party.party_id, row_offset) for k, v in chunk.items()}
    # Transform and clip per chunk: random-feature vectors are wide, the raw columns are not.
    vectors = pipeline.vectors(chunk, columns, rows=rows)
    vectors = clip_rows(vectors, party.clip_bound, spec.clip_norm)
    if lifted and spec.lift is not None:  # a lifted release kind uploads lift(z) of the clipped z (ltm/lifts.py)
        vectors = spec.lift.apply(spec, vectors)
    return vectors


def make_batches(spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray] | PartySource,  # noqa: PLR0913 - keyword-only batching options; the one participate path is #34 item 3
                 randomness: Randomness,
                 *, plan: NoisePlan | None = None, batch_clients: int = DEFAULT_BATCH_CLIENTS,
                 batch_randomness: Callable[[int], Randomness] | None = None,
                 skip: Container[int] = (), timings: dict[str, float] | None = None,
                 ) -> Iterator[list[ShareBatch]]:
    """Randomize and share a party's data; yields, per batch, the list of k server batches.

    The primary (full-array) share rotates over servers by party and batch index so that, in
    seed mode, download and compute are balanced across servers.

    Batch ``b`` draws its noise and shares from ``randomness.child("batch", b)``, or from
    ``batch_randomness(b)`` when given: the uploader passes the randomness it journaled for the
    batch, so that a restarted party re-derives bit-identical shares (``party/journal.py``).
    Batches whose index is in ``skip`` are not produced (already acknowledged by every server).
    ``timings``, if given, accumulates seconds spent in ``"noise"`` (clip + rounding to the grid +
    noisy copies) and ``"sharing"`` (secret sharing) and ``"read"`` (reading the source).

    ``table`` is the party's columns in memory (checked whole before the first batch) or a
    :class:`~ltm.party.data_source.PartySource`, read lazily one batch of rows at a time (checked chunk
    by chunk), so a party's memory is O(batch) whatever its client count.  Both give bit-identical
    batches for the same data.
    """
    if spec.replicated:
        raise ValueError("a replicated job (columns partition, kind gram) is shared by party/replicated.py, "
                         "not in sketch batches")
    if spec.upload_mode == "aggregate":  # one aggregated upload per party (party/aggregate.py)
        from ltm.party.aggregate import aggregate_batches
        yield from aggregate_batches(spec, party_id, table, randomness, plan=plan,
                                     batch_randomness=batch_randomness, skip=skip, timings=timings)
        return
    party = spec.party(party_id)
    plan = plan or spec.noise_plan()
    pieces = spec.make_sketch().pieces
    batch_clients = effective_batch_clients(spec, party, batch_clients)
    source, streamed, needed, pipeline, columns = open_source(spec, party, table)
    uploaded = spec.upload_columns(party)
    digest = spec.digest
    party_ordinal = [p.party_id for p in spec.parties].index(party_id)
    for batch_index, a, b in plan_batches(party, batch_clients).ranges:
        if batch_index in skip:
            continue
        rand = batch_randomness(batch_index) if batch_randomness is not None else randomness.child("batch", batch_index)
        lo, hi = a - party.start, b - party.start
        tr = time.perf_counter()
        chunk = source.read(lo, hi, needed)
        t0 = time.perf_counter()
        vectors = release_vectors(spec, party, pipeline, chunk, columns, rows=hi - lo, streamed=streamed, row_offset=lo)
        ring = noisy_copies(vectors, pieces, plan, rand.child("noise"))
        t1 = time.perf_counter()
        shares = share(ring, spec.k, rand.child("shares"), mode=spec.share_mode, primary=(party_ordinal + batch_index) % spec.k)
        if timings is not None:
            timings["read"] = timings.get("read", 0.0) + (t0 - tr)
            timings["noise"] = timings.get("noise", 0.0) + (t1 - t0)
            timings["sharing"] = timings.get("sharing", 0.0) + (time.perf_counter() - t1)
        yield [ShareBatch(digest, party_id, batch_index, a, b, uploaded, sh, seeded=rand.reproducible) for sh in shares]

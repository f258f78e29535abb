"""Party aggregation (upload mode ``aggregate``, docs/architecture.md "Aggregated uploads").

A party that holds many clients applies its own block of the job's public linear map to them and
uploads k shares of that one (m, W) partial instead of one noisy copy per client and piece:

* a sketch kind (``sparse``, ``dense``): its columns of the sketch, ``Σ_l S_l[:, own] · Ṽ_own``;
* the ``gram`` kind: the integer Gram block ``ẐᵀẐ`` of the party's rounded client vectors (BLAS);
* the histogram kinds (the one-row ``sum`` map): ``Σ_own lift(z)`` rounded per client.

**Exactly the servers' map.**  Every client's vector is built, clipped, lifted and rounded to the
grid 2^-f by the same functions as in per-client mode (:func:`ltm.party.randomizer.release_vectors`,
:func:`ltm.dp.grid.round_to_grid`), and the placement of its non-zeros is the public
:meth:`ltm.sketch.Sketch.placement`.  So without noise the aggregate is, bit for bit, the sum in
Z_2^64 of what the servers would compute from the party's per-client uploads
(``tests/unit/party/test_aggregate.py``).

**BLAS speed, integer exactness.**  A client's rounded entries are integers with
``|ṽ| ≤ B = ⌈entry_bound·2^f⌉ + 1`` (clipping bounds the value by the release kind's entry bound,
rounding moves it by ≤ ½; the +1 is slack).  They are held as float64 and reduced with
``np.bincount`` (sparse: one weighted scatter per piece into the servers' slot layout) or a ±1 matrix product (dense).  One
chunk of ``c`` clients contributes, in one piece, at most one term per client to any output entry,
so every partial sum any summation order forms is an integer of magnitude ≤ c·B.  float64
represents every integer of magnitude ≤ 2^53 exactly, and the sum of two such integers whose
exact sum is ≤ 2^53 in magnitude is computed exactly (no rounding occurs), so with
``c·B ≤ 2^53`` (:func:`exact_chunk_clients`) the float result *is* the integer result; it is then
converted to int64 and added into the uint64 accumulator with wrap-around (the ring's addition).
The histogram kinds are summed in int64 directly (a column sum of one-hot rows).

**The gram kind at BLAS speed.**  The gram lift rounds z first (to 2^-g) and lifts exactly
(ltm/lifts.py), so a client's uploaded entry (a, b) is ẑ_a ẑ_b·2^(f−2g) grid steps, ẑ in integer
units of 2^-g with |ẑ_a ẑ_b| ≤ ‖ẑ‖² ≤ B_g = ⌈R·2^g⌉² (R = C + √D·2^-g/2).  The party's sum is
``2^(f−2g)·ẐᵀẐ``: one float64 matrix product per chunk of c clients with c·B_g ≤ 2^53 (every
partial sum, in whatever order BLAS adds, is an integer ≤ c·B_g in magnitude, so exact), its upper
triangle converted to int64, shifted and added in uint64.  Per-client mode uploads
``round_to_grid(lift(z), f)`` = the same integers per client, so the aggregate is their ring sum bit
for bit.

**Noise once per released entry.**  In per-client mode each (client, piece) of the party adds one
draw of variance σ_c² to its row.  The aggregate adds, to each entry of a row r that the party's
clients reach ``load_r`` times, one draw from :func:`ltm.dp.noise.sample_noise` with
``multiplicity = load_r``: the same variance ``load_r·σ_c²`` (Gaussian; Laplace: the share of
min(load_r, L) Pólya pieces of one DLap(t), as that function states — L honest pieces already make
the DLap(t), so the Laplace variance is at most the per-client one).  Rows the party does not reach
get nothing, as in per-client mode.  So the release gate's honest-load check means the same.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ltm.batch import ShareBatch
from ltm.dp.calibration import NoisePlan
from ltm.dp.grid import round_to_grid, rounded_radius
from ltm.dp.noise import sample_noise
from ltm.jobspec import JobSpec, PartySpec
from ltm.lifts import gram_indices, gram_input_bits, gram_round, gram_width
from ltm.randomness import Randomness
from ltm.sharing import share
from ltm.sketch import Sketch

__all__ = ["AGGREGATE_BATCH_INDEX", "PartyAggregate", "exact_chunk_clients", "aggregate_party", "aggregate_batches",
           "reduce_rows"]

#: An aggregated upload is the party's only batch: index 0 over its whole client range.
AGGREGATE_BATCH_INDEX = 0
#: float64 holds every integer of magnitude ≤ 2^53 exactly.
_EXACT_FLOAT = 1 << 53
#: Upper bound on clients per chunk (memory: a chunk's vectors and, for a lifted kind, its lift).
_MAX_CHUNK_CLIENTS = 1 << 16
#: Dense sketches build an (m × chunk) ±1 matrix per chunk: at most this many elements (32 MiB).
_DENSE_MATRIX_ELEMENTS = 1 << 22


def _value_bound(spec: JobSpec) -> int:
    """B: a bound on |rounded entry| (grid steps) of one client's noise-free uploaded vector."""
    return math.ceil(spec.entry_bound * 2.0**spec.frac_bits) + 1


def exact_chunk_clients(spec: JobSpec, sketch: Sketch | None = None) -> int:
    """Clients per chunk whose float64 reduction is exact: the largest c with c·B ≤ 2^53 (module
    docstring), capped for memory (and, for a dense sketch, so its ±1 matrix stays small)."""
    sketch = sketch or spec.make_sketch()
    cap = _MAX_CHUNK_CLIENTS
    if sketch.kind == "dense":
        cap = max(1, min(cap, _DENSE_MATRIX_ELEMENTS // sketch.m))
    return max(1, min(cap, _EXACT_FLOAT // _value_bound(spec)))


def gram_chunk_clients(spec: JobSpec) -> int:
    """Clients per chunk of the gram kind's exact float64 Gram block: the largest c with
    c·⌈R·2^g⌉² ≤ 2^53 (module docstring), capped for memory."""
    g = gram_input_bits(spec)
    radius_units = math.ceil(math.ldexp(rounded_radius(spec.clip_bound, spec.width, g), g))
    return max(1, min(_MAX_CHUNK_CLIENTS, _EXACT_FLOAT // (radius_units * radius_units)))


def _gram_chunk(spec: JobSpec, vectors: np.ndarray, out: np.ndarray, upper: tuple[np.ndarray, np.ndarray]) -> None:
    """Add 2^(f−2g)·ẐᵀẐ's upper triangle (mod 2^64) into ``out`` (uint64 (1, W)) for one chunk of
    clipped vectors (c, D), c ≤ :func:`gram_chunk_clients` (module docstring)."""
    units = gram_round(spec, vectors)
    block = units.T @ units  # integer-valued and exact: every partial sum ≤ c·B_g ≤ 2^53
    if not np.isfinite(block).all():  # NaN/∞ would propagate here (the per-client path refuses them too)
        raise ValueError("cannot encode NaN or infinite values")
    tri = block[upper].astype(np.int64)
    tri <<= spec.frac_bits - 2 * gram_input_bits(spec)
    out[0] += tri.view(np.uint64)


def _chunk_partial(sketch: Sketch, a: int, ring: np.ndarray, out: np.ndarray, loads: np.ndarray,
                   bound: int) -> None:
    """Add S[:, a:a+c] · ring (mod 2^64) into ``out`` (uint64 (m, W)) and each row's (client,
    piece) count into ``loads``.  ``ring``: int64 (c, W) rounded entries of clients a..a+c−1, with
    c·B ≤ 2^53 for the float paths (see the module docstring); ``bound``: B.  When even one client
    exceeds the float range the chunk goes through the servers' integer scatter-add instead."""
    count, width = ring.shape
    if count * bound > _EXACT_FLOAT:  # (a job with f near the ring's limit) the servers' own integer path
        acc = sketch.accumulator(width)
        slots = sketch.slots_of(a, a + count)
        for piece in range(sketch.pieces):
            sketch.add_piece(acc, piece, 0, ring.view(np.uint64), slots)
        out += sketch.finish(acc, width)
        loads += np.bincount((slots >> 1).ravel(), minlength=sketch.m)
        return
    if sketch.kind == "sum":  # one row, every client +1: an int64 column sum (wraps like the ring)
        out[0] += ring.sum(axis=0).view(np.uint64)
        loads[0] += count
        return
    values = ring.astype(np.float64)
    if sketch.kind == "dense":
        # Every client has one non-zero ±1 in every row (piece l holds row (l + j) mod m).
        rows, negative = sketch.placement(a, a + count)
        matrix = np.zeros((sketch.m, count))
        matrix[rows, np.broadcast_to(np.arange(count), rows.shape)] = np.where(negative, -1.0, 1.0)
        out += (matrix @ values).astype(np.int64).view(np.uint64)
        loads += count
        return
    # Sparse: the servers' accumulator layout (slot 2r + negative per piece, Sketch.slots_of) filled
    # by one weighted bincount per piece, then Sketch.finish subtracts the negative slots.
    slots = sketch.slots_of(a, a + count)
    cols = np.arange(width, dtype=np.int64)
    acc = np.zeros(2 * sketch.m * width)
    for piece in range(sketch.pieces):
        acc += np.bincount((slots[piece][:, None] * width + cols).ravel(), weights=values.ravel(),
                           minlength=acc.size)
    out += sketch.finish(acc.astype(np.int64).view(np.uint64), width)
    loads += np.bincount((slots >> 1).ravel(), minlength=sketch.m)


def _one_blas_thread(gram: bool):
    """One BLAS thread for the gram block: an (11 × 2^16) product gains nothing from a second
    thread, and OpenBLAS's spinning idle threads burned as much CPU again (measured loaded: 0.56
    against 0.31 CPU-µs per client) that the servers and other parties on the machine need."""
    if not gram:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits  # a core dependency (pyproject.toml)
    return threadpool_limits(limits=1, user_api="blas")


class PartyAggregate:
    """A party's partial of the public map over its clients: ``values`` uint64 (m, W), the ring sum
    (noise included unless built without), and ``loads`` int64 (m,), the (client, piece) pairs of
    the party in each row (the multiplicity of each row's noise)."""

    def __init__(self, values: np.ndarray, loads: np.ndarray) -> None:
        self.values = values
        self.loads = loads


def aggregate_party(spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray] | object,
                    noise: Randomness | None, *, plan: NoisePlan | None = None,
                    timings: dict[str, float] | None = None) -> PartyAggregate:
    """The party's partial of the public map over all its clients, streamed chunk by chunk.

    ``table``: the party's columns in memory or a :class:`~ltm.party.data_source.PartySource` (read one
    chunk at a time, so memory is O(chunk + m·W) whatever the party's size); a source with an
    ``aggregator`` (``ltm party --dask``: :class:`ltm.party.dask_aggregate.DaskAggregator`) has its
    partitions reduced there instead, to the same integers.  ``noise``: the randomness the noise
    is drawn from, or None for no noise (tests that compare with per-client sums bit for bit).
    ``timings`` accumulates ``"read"``, ``"map"`` and ``"noise"`` seconds.
    """
    from ltm.party.randomizer import open_source  # the per-client path's own checks

    party = spec.party(party_id)
    plan = plan or spec.noise_plan()
    tally = timings if timings is not None else {}
    aggregator = getattr(table, "aggregator", None)
    if aggregator is not None:
        open_source(spec, party, table)  # the same column checks before any task is sent
        out, loads = aggregator.reduce(spec, party_id, table)
    else:
        out, loads = reduce_rows(spec, party_id, table, 0, party.size, tally=tally)
    if noise is not None:
        t0 = time.perf_counter()
        reached = np.flatnonzero(loads)
        drawn = sample_noise(noise.stream(), plan, (reached.size, out.shape[1]), multiplicity=loads[reached][:, None])
        out[reached] += drawn.view(np.uint64)
        tally["noise"] = tally.get("noise", 0.0) + (time.perf_counter() - t0)
    return PartyAggregate(out, loads)


def reduce_rows(spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray] | object, lo: int, hi: int,
                *, row_offset: int = 0, tally: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The noise-free partial of rows ``[lo, hi)`` of ``table``, which hold the party's rows
    ``row_offset + lo …`` (a Dask partition is one file of the party's folder): ``(values`` uint64
    (m, W), ``loads`` int64 (m,)).  Exact integers in Z_2^64, so partials over any split of the
    party's rows add up, in any order, to the same bytes (module docstring)."""
    from ltm.party.randomizer import open_source, release_vectors  # the per-client path's own functions

    party = spec.party(party_id)
    sketch = spec.make_sketch()
    width = len(spec.upload_columns(party))
    source, streamed, needed, pipeline, columns = open_source(spec, party, table) if row_offset == 0 and \
        (lo, hi) == (0, party.size) else _partition_source(spec, party, table)
    out = np.zeros((sketch.m, width), dtype=np.uint64)
    loads = np.zeros(sketch.m, dtype=np.int64)
    # The gram kind of a grid job: the exact BLAS Gram block (module docstring).
    gram = sketch.kind == "sum" and spec.sketch.kind == "gram" and gram_input_bits(spec) > 0
    step = gram_chunk_clients(spec) if gram else exact_chunk_clients(spec, sketch)
    bound = _value_bound(spec)
    upper = gram_indices(spec.width) if gram else None
    if gram and width != gram_width(spec.width):  # pragma: no cover - a gram party uploads the whole triangle
        raise ValueError(f"a gram upload has {gram_width(spec.width)} values, the party's columns give {width}")
    tally = tally if tally is not None else {}
    with _one_blas_thread(gram):
        for a in range(lo, hi, step):
            b = min(a + step, hi)
            t0 = time.perf_counter()
            chunk = source.read(a, b, needed)
            t1 = time.perf_counter()
            vectors = release_vectors(spec, party, pipeline, chunk, columns, rows=b - a,
                                      streamed=streamed, row_offset=row_offset + a, lifted=not gram)
            if gram:
                _gram_chunk(spec, vectors, out, upper)
                loads[0] += b - a
            else:
                _chunk_partial(sketch, party.start + row_offset + a, round_to_grid(vectors, spec.frac_bits), out,
                               loads, bound)
            tally["read"] = tally.get("read", 0.0) + (t1 - t0)
            tally["map"] = tally.get("map", 0.0) + (time.perf_counter() - t1)
    return out, loads


def _partition_source(spec: JobSpec, party: PartySpec, source: object):
    """``open_source``'s tuple for one partition (a file holding part of the party's rows): the
    party's row count is checked on the whole folder, not here."""
    from ltm.party.randomizer import _needed_raw_columns
    from ltm.transforms import FeaturePipeline

    columns = tuple(spec.party_column_indices(party))
    return source, True, _needed_raw_columns(spec, list(columns)), FeaturePipeline.for_spec(spec), columns


def aggregate_batches(spec: JobSpec, party_id: str, table: Mapping[str, np.ndarray] | object,
                      randomness: Randomness, *, plan: NoisePlan | None = None,
                      batch_randomness: Callable[[int], Randomness] | None = None,
                      skip=(), timings: dict[str, float] | None = None) -> Iterator[list[ShareBatch]]:
    """The party's one aggregated upload: k :class:`ShareBatch` (``aggregate=True``) of shape
    (1, m, W) over its whole client range, seed-compressed as per-client batches are.

    Randomness as in :func:`ltm.party.randomizer.make_batches` for batch 0 (``batch_randomness(0)``
    when given: the journaled key, so a restarted party re-sends identical shares)."""
    if not spec.aggregated:
        raise ValueError(f"job {spec.job_id!r} takes {spec.upload_mode} uploads (upload_mode {spec.upload_mode!r}); "
                         f"a party may not send it an aggregate")
    if AGGREGATE_BATCH_INDEX in skip:
        return
    party = spec.party(party_id)
    rand = batch_randomness(AGGREGATE_BATCH_INDEX) if batch_randomness is not None \
        else randomness.child("batch", AGGREGATE_BATCH_INDEX)
    agg = aggregate_party(spec, party_id, table, rand.child("noise"), plan=plan, timings=timings)
    t0 = time.perf_counter()
    ordinal = [p.party_id for p in spec.parties].index(party_id)
    shares = share(agg.values[None], spec.k, rand.child("shares"), mode=spec.share_mode, primary=ordinal % spec.k)
    if timings is not None:
        timings["sharing"] = timings.get("sharing", 0.0) + (time.perf_counter() - t0)
    uploaded = spec.upload_columns(party)
    yield [ShareBatch(spec.digest, party_id, AGGREGATE_BATCH_INDEX, party.start, party.stop, uploaded, sh,
                      seeded=rand.reproducible, aggregate=True) for sh in shares]

"""A server's result share: Σ over its stored batches of S·share, mod 2^64, over a participant set."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ltm.batch import ShareBatch
from ltm.client_set import ClientSet
from ltm.jobspec import JobSpec, participant_set
from ltm.randomness import KeystreamBuffer
from ltm.sketch import CHUNK_CLIENTS, Sketch


def result_share(spec: JobSpec, batches: Iterable[ShareBatch], participants: ClientSet | np.ndarray,
                 sketch: Sketch | None = None, slots: np.ndarray | None = None) -> np.ndarray:
    """uint64 (m, W): this server's share of the unscaled release Σ_l S_l (V + G_l).

    Streams batch by batch and chunk by chunk: each chunk's sketch slots are taken from ``slots``
    (the job's precomputed :meth:`Sketch.slots`, a cache servers keep for small jobs) or derived
    from the public placement of just that chunk, its participant mask comes from the
    :class:`~ltm.client_set.ClientSet` (none when every client of the chunk participates), and
    helper-share seeds are expanded one chunk at a time into a reusable buffer.  So memory is
    O(m·W + one chunk) beyond the batch being read, whatever n is.  ``participants`` may also be a
    bool mask (n,) (tests).  In an ``aggregate`` job each stored batch is one party's (1, m, W)
    partial of the map (``party/aggregate.py``) and the servers' map is their sum.
    """
    sketch = sketch or spec.make_sketch()
    members = participant_set(spec.n, participants)
    width = spec.upload_width
    acc_full = sketch.accumulator(width)
    partial: dict[tuple[int, ...], np.ndarray] = {}
    buffer: KeystreamBuffer | None = None
    all_columns = tuple(range(width))
    aggregated = np.zeros((sketch.m, width), dtype=np.uint64)
    for batch in batches:
        if not members.intersects(batch.start, batch.stop):
            continue
        if spec.aggregated:  # a party's partial of the map: summed whole (the gate admits whole parties only)
            if not members.covers(batch.start, batch.stop):
                raise ValueError(f"an aggregated upload of clients [{batch.start}, {batch.stop}) cannot be split "
                                 f"by a participant set that holds only some of them")
            aggregated[:, list(batch.columns)] += batch.share.values().reshape(sketch.m, len(batch.columns))
            continue
        cols = batch.columns
        acc = acc_full if cols == all_columns else partial.setdefault(cols, sketch.accumulator(len(cols)))
        pieces, count, ncols = batch.share.shape
        seed = batch.share.seed
        if seed is not None and buffer is None:
            buffer = KeystreamBuffer(CHUNK_CLIENTS * max(width, ncols))
        for a in range(0, count, CHUNK_CLIENTS):
            b = min(a + CHUNK_CLIENTS, count)
            lo, hi = batch.start + a, batch.start + b
            if not members.intersects(lo, hi):
                continue
            include = None if members.covers(lo, hi) else members.mask(lo, hi)
            chunk_slots = sketch.slots_of(lo, hi, slots)
            for piece in range(pieces):
                if seed is None:
                    values = batch.share.data[piece, a:b]
                else:  # the seed's expansion is the (pieces, count, ncols) array in C order
                    values = buffer.words(seed, (b - a) * ncols, (piece * count + a) * ncols).reshape(b - a, ncols)
                sketch.add_piece(acc, piece, 0, values, chunk_slots, include)
    out = sketch.finish(acc_full, width)
    out += aggregated
    for cols, acc in partial.items():
        out[:, list(cols)] += sketch.finish(acc, len(cols))
    return out

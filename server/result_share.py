"""A server's result share: Σ over its stored batches of S·share, mod 2^64, over a participant set."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ltm.batch import ShareBatch
from ltm.jobspec import JobSpec
from ltm.randomness import KeystreamBuffer
from ltm.sketch import CHUNK_CLIENTS, Sketch


def result_share(spec: JobSpec, batches: Iterable[ShareBatch], participants: np.ndarray,
                 sketch: Sketch | None = None, slots: np.ndarray | None = None) -> np.ndarray:
    """uint64 (m, W): this server's share of the unscaled release Σ_l S_l (V + G_l).

    Streams piece by piece and chunk by chunk: helper-share seeds are expanded one chunk at a time
    into a reusable buffer, so memory stays O(m·D + one chunk) beyond the stored shares, and a
    batch whose clients all participate needs no masking.  ``slots`` is the job's precomputed
    :meth:`Sketch.slots` (derived here if None).
    """
    sketch = sketch or spec.make_sketch()
    slots = sketch.slots() if slots is None else slots
    width = spec.upload_width
    acc_full = sketch.accumulator(width)
    partial: dict[tuple[int, ...], np.ndarray] = {}
    buffer: KeystreamBuffer | None = None
    all_columns = tuple(range(width))
    for batch in batches:
        include = participants[batch.start:batch.stop]
        if not include.any():
            continue
        mask = None if include.all() else include
        cols = batch.columns
        acc = acc_full if cols == all_columns else partial.setdefault(cols, sketch.accumulator(len(cols)))
        pieces, count, ncols = batch.share.shape
        seed = batch.share.seed
        if seed is not None and buffer is None:
            buffer = KeystreamBuffer(CHUNK_CLIENTS * max(width, ncols))
        for piece in range(pieces):
            for a in range(0, count, CHUNK_CLIENTS):
                b = min(a + CHUNK_CLIENTS, count)
                if seed is None:
                    values = batch.share.data[piece, a:b]
                else:  # the seed's expansion is the (pieces, count, ncols) array in C order
                    values = buffer.words(seed, (b - a) * ncols, (piece * count + a) * ncols).reshape(b - a, ncols)
                sketch.add_piece(acc, piece, batch.start + a, values, slots, None if mask is None else mask[a:b])
    out = sketch.finish(acc_full, width)
    for cols, acc in partial.items():
        out[:, list(cols)] += sketch.finish(acc, len(cols))
    return out

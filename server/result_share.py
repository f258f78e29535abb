"""A server's result share: Σ over its stored batches of S·share, mod 2^64, over a participant set."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ltm.batch import ShareBatch
from ltm.jobspec import JobSpec
from ltm.sketch import Sketch


def result_share(spec: JobSpec, batches: Iterable[ShareBatch], participants: np.ndarray,
                 sketch: Sketch | None = None, slots: np.ndarray | None = None) -> np.ndarray:
    """uint64 (m, D): this server's share of the unscaled release Σ_l S_l (V + G_l).

    Memory stays O(m·D + one batch): batches are expanded (helper seeds) and applied one at a time.
    ``slots`` is the job's precomputed :meth:`Sketch.slots` (derived per batch if None).
    """
    sketch = sketch or spec.make_sketch()
    out = np.zeros((sketch.m, spec.width), dtype=np.uint64)
    all_columns = tuple(range(spec.width))
    for batch in batches:
        include = participants[batch.start:batch.stop]
        if not include.any():
            continue
        values = batch.share.values()
        if batch.columns == all_columns:
            sketch.apply(batch.start, values, out, include=None if include.all() else include, slots=slots)
        else:
            part = sketch.apply(batch.start, values, include=None if include.all() else include, slots=slots)
            out[:, list(batch.columns)] += part
    return out

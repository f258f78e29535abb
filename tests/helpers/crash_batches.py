"""The batches of test_sqlite_store's crash test (a writer process killed with SIGKILL mid-write): a pure
function of the batch index, so the test and the writer it starts compute the same bytes."""
from __future__ import annotations

import hashlib

import numpy as np

from ltm.batch import ShareBatch
from ltm.sharing import Share

CRASH_CLIENTS = 2048


def crash_batch(job_digest: str, width: int, i: int) -> ShareBatch:
    """Batch i of the crash test, a pure function of i: every third a seed, else 1–2 pieces of data."""
    start, stop = i * CRASH_CLIENTS, (i + 1) * CRASH_CLIENTS
    columns = tuple(range(width))
    if i % 3 == 2:
        share = Share(0, (1, CRASH_CLIENTS, width), seed=hashlib.sha256(f"seed-{i}".encode()).digest())
    else:
        shape = (1 + i % 2, CRASH_CLIENTS, width)
        data = np.random.default_rng(i).integers(0, 2**64, size=shape, dtype=np.uint64, endpoint=False)
        share = Share(0, shape, data=data)
    return ShareBatch(job_digest, "party-crash", i, start, stop, columns, share)

"""A party's exact integer aggregate computed on a Dask cluster (``ltm party --dask SCHEDULER``).

A party whose rows outgrow one machine keeps them as a folder of Parquet files (a data lake's
usual layout).  Each file is one task: a worker opens it, reduces its rows with the party's own
code (:func:`ltm.party.aggregate.reduce_rows`: built, clipped, rounded and lifted exactly as in one
process) to an exact partial in Z_2^64 — uint64 (m, W) values and int64 (m,) loads — and the party
adds the partials.  Addition mod 2^64 is associative and commutative, and each partial is the
exact integer sum of its rows, so the result is the single-process aggregate byte for byte
whatever the files, the workers or the order they finish in (tests/integration/test_dask_aggregate.py).

No noise and no randomness leave the party: workers see the public job spec and the data they
already read from the shared storage, and return noise-free partials; the party adds the noise
(:func:`ltm.party.aggregate.aggregate_party`) before it secret-shares the upload.  A worker therefore
handles the party's raw rows and their partial sums: run it on the party's own machines.

``SCHEDULER``: ``tcp://host:8786`` (an existing cluster: every worker needs LTM and the
``parquet`` extra installed, and read access to the folder at the same path), or ``local:N`` (a
``LocalCluster`` of N worker processes on this host).  docs/usage.md shows both.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ltm.jobspec import JobSpec


def reduce_partition(spec: JobSpec, party_id: str, path: str, row_offset: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """On a worker: the exact noise-free partial of one Parquet file that holds the party's rows
    ``[row_offset, row_offset + rows)``: ``(values`` uint64 (m, W), ``loads`` int64 (m,))."""
    from ltm.party.aggregate import reduce_rows
    from ltm.party.streamed_source import ParquetSource

    source = ParquetSource(path)
    try:
        if source.rows != rows:
            raise ValueError(f"{path}: {source.rows} rows on the worker, {rows} when the party planned the tasks")
        return reduce_rows(spec, party_id, source, 0, rows, row_offset=row_offset)
    finally:
        source.close()


class DaskAggregator:
    """Reduces a :class:`~ltm.party.streamed_source.ParquetSource`'s files on a Dask cluster."""

    def __init__(self, scheduler: str) -> None:
        self.scheduler = scheduler
        self._cluster = None

    def _client(self):
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise RuntimeError("ltm party --dask needs dask.distributed: pip install 'ltm[dask,parquet]'") from None
        if self.scheduler.startswith("local:"):
            workers = int(self.scheduler.split(":", 1)[1] or 1)
            self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                         dashboard_address=None)
            return Client(self._cluster)
        return Client(self.scheduler)

    def reduce(self, spec: JobSpec, party_id: str, source: object) -> tuple[np.ndarray, np.ndarray]:
        """The party's noise-free aggregate: the sum in Z_2^64 of every file's partial."""
        partitions = getattr(source, "partitions", None)
        if partitions is None:
            raise ValueError(f"{getattr(source, 'description', source)}: --dask reduces a Parquet file or folder "
                             f"(one task per file), not this source")
        client = self._client()
        try:
            futures = [client.submit(reduce_partition, spec, party_id, str(Path(path).absolute()), offset, rows,
                                     pure=False) for path, offset, rows in partitions()]
            out: np.ndarray | None = None
            loads: np.ndarray | None = None
            for values, count in client.gather(futures):
                if out is None:
                    out, loads = values.copy(), count.copy()
                else:
                    out += values  # uint64: wraps mod 2^64, the ring's addition
                    loads += count
            assert out is not None and loads is not None
            return out, loads
        finally:
            client.close()
            if self._cluster is not None:
                self._cluster.close()
                self._cluster = None

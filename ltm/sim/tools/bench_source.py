"""``ltm bench source``: a party's aggregated gram upload from a Parquet file, against a bare pass.

Writes (unless ``--path`` names an existing file) an n-row Parquet file of the synthetic ridge model
(d features and the label: d + 1 float64 columns, row groups of 2^20 rows), then times, each in its
own fresh process so that each peak RSS is its pass's own:

* ``bare``: a pyarrow scan of the columns plus a float64 numpy ``XᵀX`` in chunks (numpy's BLAS as
  configured: the fastest plain pass this machine does);
* ``aggregate``: the party's whole pass, :func:`ltm.party.aggregate.aggregate_party` on a
  :class:`ltm.party.streamed_source.ParquetSource` for a one-party gram job (read, check, centre and
  scale, clip, round, lift, exact integer sum: the upload's values without the noise).

Prints one JSON object: both times, their ratio, each pass's peak RSS (``VmHWM`` of its process)
and the file's size.  Numbers, not asserts (a benchmark is not a timed test).
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

ROW_GROUP = 1 << 20


def write_parquet(path: Path, n: int, d: int, seed: int = 1) -> float:
    """n rows of the synthetic ridge model as Parquet; returns seconds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ltm.party.data_source import SyntheticRidge, SyntheticRidgeSource

    t0 = time.perf_counter()
    src = SyntheticRidgeSource(SyntheticRidge(d, seed), n)
    names = list(src.columns)
    schema = pa.schema([(c, pa.float64()) for c in names])
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for a in range(0, n, ROW_GROUP):
            cols = src.read(a, min(a + ROW_GROUP, n))
            writer.write_table(pa.table(cols, schema=schema), row_group_size=ROW_GROUP)
    return time.perf_counter() - t0


def _peak_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def bare_pass(path: str) -> dict[str, Any]:
    """A pyarrow scan of every column and a float64 XᵀX in chunks of 2^16 rows."""
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    gram = np.zeros((len(names), len(names)))
    for batch in pf.iter_batches(batch_size=1 << 16, columns=names, use_threads=False):
        X = np.column_stack([batch.column(i).to_numpy() for i in range(len(names))])
        gram += X.T @ X
    return {"seconds": time.perf_counter() - t0, "peak_rss_bytes": _peak_rss(), "trace": float(np.trace(gram))}


def aggregate_pass(path: str, n: int, d: int) -> dict[str, Any]:
    """The party's aggregated gram upload (noise-free) from the Parquet file, one process."""
    from ltm.datasets.tables import ModelTable
    from ltm.party.aggregate import aggregate_party
    from ltm.party.data_source import SyntheticRidge
    from ltm.party.streamed_source import ParquetSource
    from ltm.randomness import Randomness
    from ltm.sim.runtime.jobs import build_job

    table = ModelTable.synthetic_ridge(n, SyntheticRidge(d, 1))
    spec, _ = build_job(table, job_id="bench-source", randomness=Randomness.seeded_insecure(1), parties=1,
                        corrupt_parties=0, kind="gram", upload_mode="aggregate", reproduction=True)
    source = ParquetSource(path)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    agg = aggregate_party(spec, spec.parties[0].party_id, source, None, timings=timings)
    seconds = time.perf_counter() - t0
    source.close()
    return {"seconds": seconds, "peak_rss_bytes": _peak_rss(), "phases_s": timings,
            "clients": int(agg.loads.sum()), "values_sha256": __import__("hashlib").sha256(agg.values).hexdigest()}


def _child(queue, fn, args) -> None:
    queue.put(fn(*args))


def _in_child(fn, *args) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")  # a fresh process: its peak RSS is this pass's alone
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, fn, args))
    proc.start()
    out = queue.get()
    proc.join()
    return out


def bench(n: int, d: int, path: str | None = None, keep: bool = False) -> dict[str, Any]:
    """Write the file (or use ``path``), run both passes in fresh processes, delete it unless ``keep``."""
    import tempfile

    made = path is None or not Path(path).exists()
    file = Path(path) if path else Path(tempfile.mkdtemp(prefix="ltm-bench-source-")) / "rows.parquet"
    out: dict[str, Any] = {"n": n, "columns": d + 1, "path": str(file), "cpus": os.cpu_count(),
                           "loadavg_before": os.getloadavg()}
    try:
        if made:
            out["write_s"] = _in_child(write_parquet, file, n, d)
        out["file_bytes"] = file.stat().st_size
        out["bare"] = _in_child(bare_pass, str(file))
        out["aggregate"] = _in_child(aggregate_pass, str(file), n, d)
        out["ratio"] = out["aggregate"]["seconds"] / out["bare"]["seconds"]
        out["aggregate_peak_rss_mb"] = out["aggregate"]["peak_rss_bytes"] / 2**20
        out["loadavg_after"] = os.getloadavg()
    finally:
        if made and not keep:
            file.unlink(missing_ok=True)
            if not path:
                file.parent.rmdir()
    return out

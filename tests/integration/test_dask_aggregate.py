"""A party's aggregate computed on a Dask cluster (one task per Parquet file, exact integer partials
added on the party) equals the single-process aggregate byte for byte (issue 33)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.optional import require

pa = require("pyarrow")
require("distributed")
import pyarrow.parquet as pq

from ltm.datasets.tables import ModelTable
from ltm.party.aggregate import aggregate_party
from ltm.party.dask_aggregate import DaskAggregator
from ltm.party.data_source import SyntheticRidge, SyntheticRidgeSource
from ltm.party.streamed_source import ParquetSource
from ltm.randomness import Randomness
from ltm.sim.runtime.jobs import build_job

FILES = 16


def _folder(where: Path, n: int, d: int = 9) -> SyntheticRidge:
    model = SyntheticRidge(d, 5)
    src = SyntheticRidgeSource(model, n)
    cuts = np.linspace(0, n, FILES + 1).astype(int)
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        pq.write_table(pa.table(src.read(a, b)), where / f"part-{i:02d}.parquet", row_group_size=1 << 18)
    return model


def _check(where: Path, n: int, kind: str, workers: int) -> None:
    model = _folder(where, n)
    spec, _ = build_job(ModelTable.synthetic_ridge(n, model), job_id=f"dask-{kind}",
                        randomness=Randomness.seeded_insecure(2), parties=1, corrupt_parties=0, kind=kind,
                        m=64 if kind == "sparse" else None, upload_mode="aggregate", reproduction=True)
    pid = spec.parties[0].party_id
    single = aggregate_party(spec, pid, ParquetSource(where), None)
    source = ParquetSource(where)
    source.aggregator = DaskAggregator(f"local:{workers}")
    spread = aggregate_party(spec, pid, source, None)
    assert spread.values.tobytes() == single.values.tobytes()
    assert spread.loads.tobytes() == single.loads.tobytes()
    assert single.values.any() and int(single.loads.sum()) == n * (1 if kind == "gram" else spec.sketch.s)


@pytest.mark.parametrize("kind", ["gram", "sparse"])
def test_dask_aggregate_equals_the_single_process_one(tmp_path, kind):
    _check(tmp_path, 40_000, kind, workers=2)


@pytest.mark.slow
def test_dask_aggregate_at_ten_million_rows(tmp_path):
    _check(tmp_path, 10_000_000, "gram", workers=2)


def test_parties_reducing_on_dask_release_the_same_bytes_over_grpc(three_servers, tmp_path):
    """Real server processes (mutual TLS): an aggregate gram job whose parties reduce their Parquet
    folders on a local Dask cluster releases what the same parties release from memory, noise included."""
    import asyncio
    from dataclasses import replace

    from ltm.datasets.synthetic import synthetic_ridge
    from ltm.sim.runtime.jobs import party_tables
    from tests.helpers.servers import release_over_grpc

    randomness = Randomness.seeded_insecure("dask-grpc")
    table = synthetic_ridge(6000, 4, randomness)
    spec, _ = build_job(table, job_id="dask-grpc-memory", randomness=randomness, parties=2, k=3, kind="gram",
                        upload_mode="aggregate", endpoints=three_servers.endpoints)
    tables = party_tables(spec, table)
    sources = {}
    for pid, cols in tables.items():
        folder = tmp_path / pid
        folder.mkdir()
        n = len(next(iter(cols.values())))
        for i, (a, b) in enumerate(zip((0, n // 4, n // 2), (n // 4, n // 2, n))):
            pq.write_table(pa.table({k: v[a:b] for k, v in cols.items()}), folder / f"part-{i}.parquet")
        sources[pid] = ParquetSource(folder)
        sources[pid].aggregator = _Counted("local:2")
    memory = asyncio.run(release_over_grpc(three_servers, spec, tables, randomness))
    spread = asyncio.run(release_over_grpc(three_servers, replace(spec, job_id="dask-grpc-dask"), sources,
                                           randomness))
    assert spread.participants.count == memory.participants.count == spec.n
    assert spread.release.sha256 == memory.release.sha256
    assert [s.aggregator.calls for s in sources.values()] == [1, 1]  # each party's aggregate went to Dask


class _Counted(DaskAggregator):
    calls = 0

    def reduce(self, *args):
        self.calls += 1
        return super().reduce(*args)

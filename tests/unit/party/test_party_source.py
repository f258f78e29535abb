"""A party's data streamed in chunks (party/data_source.py): the same batches as the whole table,
bounded reads, a deterministic random-access synthetic source, the ledger's fingerprint and the
journal's resume over a streamed source."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ltm.datasets.synthetic import synthetic_ridge
from ltm.datasets.tables import ModelTable
from ltm.party.data_source import (
    DataSourceError,
    NpyDirSource,
    NpzSource,
    PartySource,
    SyntheticRidge,
    SyntheticRidgeSource,
    TableSource,
    open_source,
    parse_synthetic,
)
from ltm.party.journal import UploadJournal
from ltm.party.ledger import source_fingerprint
from ltm.party.randomizer import PartyDataError, check_source, make_batches, party_randomness
from ltm.randomness import Randomness
from ltm.sim.localnet.demo import write_party_csv
from ltm.sim.runtime.jobs import build_job, party_tables

BATCH = 37  # not a divisor of anything below: batches straddle every boundary


def _world(n=600, d=3, seed="party-source"):
    randomness = Randomness.seeded_insecure(seed)
    table = synthetic_ridge(n, d, randomness)
    spec, _ = build_job(table, job_id="stream", randomness=randomness, parties=2, k=3, m=8, s=2)
    return spec, party_tables(spec, table), randomness


def _flat(batches) -> list[tuple]:
    """Everything a batch says, per server: comparable bit for bit."""
    out = []
    for per_server in batches:
        for b in per_server:
            out.append((b.batch_index, b.start, b.stop, b.server, b.share.seed,
                        None if b.share.data is None else b.share.data.tobytes(), b.content_digest()))
    return out


class Guarded(PartySource):
    """Wraps a source; refuses any read of more than ``limit`` rows and records every read."""

    def __init__(self, inner: PartySource, limit: int) -> None:
        self.inner, self.limit, self.reads = inner, limit, []
        self.description = inner.description
        self.unusable, self.non_numeric = inner.unusable, inner.non_numeric

    @property
    def rows(self) -> int:
        return self.inner.rows

    @property
    def columns(self):
        return self.inner.columns

    def read(self, start, stop, names=None):
        if stop - start > self.limit:
            raise AssertionError(f"read of {stop - start} rows, more than one chunk ({self.limit})")
        self.reads.append((start, stop))
        return self.inner.read(start, stop, names)


def _files(tmp_path, table: dict[str, np.ndarray]) -> dict[str, PartySource]:
    np.savez(tmp_path / "p.npz", **table)
    np.savez_compressed(tmp_path / "pc.npz", **{k: v.astype(">f8") for k, v in table.items()})
    (tmp_path / "cols").mkdir()
    for k, v in table.items():
        np.save(tmp_path / "cols" / f"{k}.npy", v)
    write_party_csv(tmp_path / "p.csv", table)
    return {"npz": open_source(tmp_path / "p.npz"), "npz-compressed": open_source(tmp_path / "pc.npz"),
            "npy-dir": open_source(tmp_path / "cols"), "csv": open_source(tmp_path / "p.csv")}


def test_streamed_sources_give_bit_identical_batches_to_the_whole_table(tmp_path):
    """Seeded: every file format, read a batch at a time (never more), gives exactly the batches of
    the in-memory table — shares, seeds and content digests."""
    spec, tables, randomness = _world()
    pid = "party-1"
    rand = party_randomness(randomness, spec, pid)
    want = _flat(make_batches(spec, pid, tables[pid], rand, batch_clients=BATCH))
    sources = _files(tmp_path, tables[pid])
    assert isinstance(sources["npz"], NpzSource) and isinstance(sources["npy-dir"], NpyDirSource)
    for kind, source in sources.items():
        guarded = Guarded(source, BATCH)
        got = _flat(make_batches(spec, pid, guarded, rand, batch_clients=BATCH))
        assert got == want, kind
        size = spec.party(pid).size
        assert guarded.reads == [(a, min(a + BATCH, size)) for a in range(0, size, BATCH)], kind
        source.close()


def test_a_streamed_source_is_read_one_batch_at_a_time_and_lazily():
    """No n-sized read: make_batches asks the source for one batch's rows when that batch is
    produced (the uploader randomizes batch b+1 while b uploads), and skipped batches are not read."""
    spec, tables, randomness = _world()
    pid = "party-0"
    guarded = Guarded(TableSource(tables[pid]), BATCH)
    gen = make_batches(spec, pid, guarded, randomness, batch_clients=BATCH, skip={1, 2})
    assert guarded.reads == []  # nothing before the first batch is asked for
    next(gen)
    assert guarded.reads == [(0, BATCH)]
    next(gen)
    assert guarded.reads == [(0, BATCH), (3 * BATCH, 4 * BATCH)]
    with pytest.raises(AssertionError, match="more than one chunk"):
        next(make_batches(spec, pid, Guarded(TableSource(tables[pid]), BATCH - 1), randomness, batch_clients=BATCH))


def test_synthetic_source_is_deterministic_and_random_access():
    model = SyntheticRidge(4, seed=9, block=50)
    big = SyntheticRidgeSource(model, 400, offset=30).read(0, 400)
    again = SyntheticRidgeSource(SyntheticRidge(4, seed=9, block=50), 400, offset=30)
    for a, b in [(0, 1), (17, 133), (20, 70), (399, 400), (0, 400), (120, 120)]:
        chunk = again.read(a, b)
        assert all(np.array_equal(chunk[k], big[k][a:b]) for k in model.names), (a, b)
    # another party's view of the same global rows: offset shifts, the data do not
    shifted = SyntheticRidgeSource(model, 100, offset=130).read(0, 100, ["x2", "y"])
    assert np.array_equal(shifted["x2"], big["x2"][100:200]) and np.array_equal(shifted["y"], big["y"][100:200])
    assert np.array_equal(model.rows(30, 430), np.column_stack([big[k] for k in model.names]))
    # the model: y = x·β exactly (no label noise), β from the seed; test rows are other rows
    X = np.column_stack([big[f"x{j}"] for j in range(4)])
    assert np.allclose(X @ model.coefficients, big["y"], rtol=0, atol=1e-12)
    assert np.array_equal(model.coefficients, SyntheticRidge(4, seed=9).coefficients)
    assert not np.array_equal(SyntheticRidge(4, seed=10).coefficients, model.coefficients)
    assert not np.array_equal(model.rows(30, 40, split="test"), model.rows(30, 40))
    noisy = SyntheticRidge(4, seed=9, noise=0.5, block=50).rows(0, 400)
    assert np.array_equal(noisy[:, :4], model.rows(0, 400)[:, :4]) and 0.3 < np.std(noisy[:, 4] - noisy[:, :4] @ model.coefficients) < 0.7
    # each block is generated once when read in order, whatever the chunks
    calls = []
    src = SyntheticRidgeSource(model, 400, offset=30)
    real = model.block_rows
    object.__setattr__(model, "block_rows", lambda j, split="train": calls.append(j) or real(j, split))
    for a in range(0, 400, 37):
        src.read(a, min(a + 37, 400))
    assert calls == list(range(0, 9))


def test_synthetic_descriptors_and_the_model_table(tmp_path):
    src = parse_synthetic("synthetic:ridge?d=3&n=1000&seed=4&offset=500")
    assert (src.rows, src.offset, src.columns, src.model.seed) == (1000, 500, ("x0", "x1", "x2", "y"), 4)
    (tmp_path / "p.synth.json").write_text(json.dumps({"generator": "ridge", "d": 3, "n": 1000, "seed": 4,
                                                        "offset": 500}))
    from_file = open_source(tmp_path / "p.synth.json")
    assert from_file.fingerprint() == src.fingerprint()
    assert np.array_equal(from_file.read(5, 9)["y"], src.read(5, 9)["y"])
    for bad, why in [("synthetic:lowrank?d=3&n=5", "unknown generator"), ("synthetic:ridge?d=3", "needs d and n"),
                     ("synthetic:ridge?d=3&n=5&colour=red", "unknown key"), ("synthetic:ridge?d=x&n=5", "invalid"),
                     ("synthetic:ridge?d=3&n=0", "n ≥ 1")]:
        with pytest.raises(DataSourceError, match=why):
            parse_synthetic(bad)
    model = SyntheticRidge(3, seed=4)
    mt = ModelTable.synthetic_ridge(200_000, model)
    assert mt.features == ["x0", "x1", "x2"] and mt.moments["y"] == (0.0, pytest.approx(np.linalg.norm(model.coefficients)))
    spec, _ = build_job(mt, job_id="big", randomness=Randomness.seeded_insecure(1), parties=16, k=3, m=100)
    assert spec.n == 200_000 and [c.center for c in spec.columns] == [0.0] * 4
    assert spec.columns[-1].scale > spec.columns[0].scale  # the label's scale is its model std, not 1


def test_ledger_fingerprint_of_streamed_data_equals_the_whole_tables(tmp_path):
    spec, tables, _ = _world()
    table = tables["party-0"]
    want = source_fingerprint(table)
    for kind, source in _files(tmp_path, table).items():
        assert source_fingerprint(source) == want, kind
    for fresh in (NpzSource(tmp_path / "p.npz"), NpzSource(tmp_path / "pc.npz"), NpyDirSource(tmp_path / "cols")):
        assert fresh.scan(chunk_rows=7).fingerprint == want  # whatever the chunk size
    changed = {k: v.copy() for k, v in table.items()}
    changed["x1"][123] += 1e-9
    np.savez(tmp_path / "changed.npz", **changed)
    assert source_fingerprint(NpzSource(tmp_path / "changed.npz")) != want
    # a generated source is keyed by its descriptor
    a = SyntheticRidgeSource(SyntheticRidge(3, seed=1), 100, offset=0)
    assert a.fingerprint() == SyntheticRidgeSource(SyntheticRidge(3, seed=1), 100, offset=0).fingerprint()
    assert a.fingerprint() != SyntheticRidgeSource(SyntheticRidge(3, seed=1), 100, offset=1).fingerprint()
    assert a.fingerprint() != SyntheticRidgeSource(SyntheticRidge(3, seed=2), 100, offset=0).fingerprint()


def test_bad_streamed_data_is_refused_before_anything_is_sent(tmp_path):
    """check_source finds NaN/∞ anywhere in the file (count and first row) before the first batch;
    make_batches over the same source names the party row of the chunk where it meets it."""
    spec, tables, randomness = _world()
    table = {k: v.copy() for k, v in tables["party-0"].items()}
    table["x2"][[250, 260]] = [np.nan, np.inf]
    np.savez(tmp_path / "bad.npz", **table)
    source = NpzSource(tmp_path / "bad.npz")
    msg = "column 'x2' has 2 NaN/infinite values (first at row 250); clean or impute them first"
    with pytest.raises(PartyDataError) as err:
        check_source(spec, "party-0", source)
    assert str(err.value) == msg
    gen = make_batches(spec, "party-0", source, randomness, batch_clients=100)
    next(gen), next(gen)  # rows 0–199 are clean
    with pytest.raises(PartyDataError, match=r"first at row 250\)"):
        next(gen)
    np.savez(tmp_path / "short.npz", **{k: v[:-1] for k, v in tables["party-0"].items()})
    with pytest.raises(PartyDataError, match="has 299 values but party 'party-0' holds 300 rows"):
        check_source(spec, "party-0", NpzSource(tmp_path / "short.npz"))
    np.savez(tmp_path / "wide.npz", **{**tables["party-0"], "x0": np.zeros((300, 2))})
    with pytest.raises(PartyDataError, match=r"column 'x0' must be one value per row \(a 1-D array\), got an array "
                                             r"of shape \(300, 2\)"):
        check_source(spec, "party-0", NpzSource(tmp_path / "wide.npz"))
    np.savez(tmp_path / "text.npz", **{**tables["party-0"], "x0": np.array(["a"] * 300)})
    with pytest.raises(PartyDataError, match="column 'x0' holds <U1 values"):
        check_source(spec, "party-0", NpzSource(tmp_path / "text.npz"))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataSourceError, match="not a readable .npz"):
        NpzSource(tmp_path / "junk.npz")


def test_the_journal_resumes_mid_stream(tmp_path):
    """A party dies with batch 1 in flight; restarted over the same streamed file it does not read
    batch 0 again (done), re-derives batch 1 bit for bit from its journaled key, then goes on."""
    spec, tables, _ = _world()
    np.savez(tmp_path / "p.npz", **tables["party-0"])
    base = Randomness.system()

    def batches(journal, source):
        return make_batches(spec, "party-0", source, base, batch_clients=100, skip=journal.done_batches(),
                            batch_randomness=lambda b: journal.randomness_for(b, base))

    j = UploadJournal.open(tmp_path / "state", spec, "party-0", batch_clients=100, seeded=False)
    gen = batches(j, NpzSource(tmp_path / "p.npz"))
    first, second = next(gen), next(gen)
    j.begin(first)
    j.done(0)
    started, _ = j.begin(second)  # ... and the party dies here
    j2 = UploadJournal.open(tmp_path / "state", spec, "party-0", batch_clients=100, seeded=False)
    source = Guarded(NpzSource(tmp_path / "p.npz"), 100)
    gen = batches(j2, source)
    redo = next(gen)
    assert source.reads == [(100, 200)] and redo[0].batch_index == 1
    assert j2.begin(redo) == (started, True)
    assert [b.share.data is None for b in redo] == [b.share.data is None for b in second]
    rest = list(gen)
    assert [p[0].batch_index for p in rest] == [2] and source.reads == [(100, 200), (200, 300)]


def test_file_sources_read_any_range_in_any_order(tmp_path):
    spec, tables, _ = _world()
    table = tables["party-0"]
    for kind, source in _files(tmp_path, table).items():
        assert source.rows == 300 and set(source.columns) == set(table), kind
        for a, b in [(50, 60), (0, 10), (290, 300), (5, 6), (0, 300), (120, 120)]:
            got = source.read(a, b, ["y", "x0"])
            assert list(got) == ["y", "x0"] and all(got[k].dtype == np.float64 for k in got), kind
            assert all(np.array_equal(got[k], table[k][a:b]) for k in got), (kind, a, b)
        with pytest.raises(DataSourceError, match="outside"):
            source.read(0, 301)
        with pytest.raises(DataSourceError, match="no column"):
            source.read(0, 1, ["nope"])


_PEAK_SCRIPT = r"""
import sys
from pathlib import Path
from ltm.randomness import Randomness
from ltm.party.data_source import SyntheticRidge, SyntheticRidgeSource
from ltm.party.randomizer import make_batches, party_randomness
from ltm.datasets.tables import ModelTable
from ltm.sim.runtime.jobs import build_job

n = int(sys.argv[1])
model = SyntheticRidge(10, seed=3)
r = Randomness.seeded_insecure(3)
spec, _ = build_job(ModelTable.synthetic_ridge(n, model), job_id="peak", randomness=r, parties=2, k=3, m=100)
p = spec.parties[0]
source = SyntheticRidgeSource(model, p.size, p.start)
Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: measure the upload's working set only
for _ in make_batches(spec, p.party_id, source, party_randomness(r, spec, p.party_id)):
    pass
print(next(int(l.split()[1]) for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:")))
"""


@pytest.mark.slow
def test_a_partys_peak_memory_does_not_grow_with_its_clients():
    """VmHWM of randomizing and sharing a generated party of 10^5 vs 2·10^6 clients (20× more)."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux /proc")
    peaks = []
    for n in (200_000, 4_000_000):
        out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(n)], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert out.returncode == 0, out.stderr[-2000:]
        peaks.append(int(out.stdout.split()[-1]) * 1024)
    assert peaks[1] - peaks[0] < 24 * 2**20, peaks  # a batch is 65 536 × 11 × 8 B ≈ 5.8 MB


def test_party_cli_helpers_know_generated_sources(tmp_path, monkeypatch):
    from ltm.party.main import data_exists, default_state_dir, read_party_source

    uri = "synthetic:ridge?d=2&n=10&seed=1"
    assert data_exists(uri) and not data_exists(str(tmp_path / "missing.csv"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_state_dir(uri) == tmp_path / "state" / "ltm-party"  # no directory to put it beside
    assert default_state_dir(str(tmp_path / "p.npz")) == tmp_path / ".ltm-party-state"
    assert read_party_source(uri).rows == 10
    with pytest.raises(PartyDataError, match="unknown generator"):
        read_party_source("synthetic:nope?d=2&n=10")

"""The analyst's durable job table (analyst/store.py): what a restarted analyst finds again."""
from __future__ import annotations

import numpy as np
import pytest

from ltm.analyst.store import AnalystStore, AnalystStoreInUse
from ltm.client_set import ClientSet
from ltm.jobfile import parse_job_file, render_job_file
from tests.helpers.jobs import job_doc as doc


def test_jobs_survive_a_reopen_bit_for_bit(tmp_path):
    spec = parse_job_file(render_job_file(doc())).spec
    store = AnalystStore(tmp_path)
    rec = store.add(spec, {"model": "ridge"}, "system", 123.0, "running")
    assert (rec.state, rec.published, rec.close_at) == ("running", False, 123.0)
    assert store.add(spec, {"model": "ols"}, "x", 1.0, "published").fit == {"model": "ridge"}  # idempotent
    other = parse_job_file(render_job_file(doc(privacy={"epsilon": 0.5, "delta": 1e-6}))).spec
    with pytest.raises(KeyError, match="choose a new job id"):
        store.add(other, {}, "system", 1.0, "running")
    with pytest.raises(AnalystStoreInUse):
        AnalystStore(tmp_path)  # one analyst per state directory
    store.update(spec.job_id, published=1, phase="waiting")
    shares = [np.arange(24, dtype=np.uint64).reshape(8, 3) * (i + 1) + np.uint64(2**63) for i in range(2)]
    members = ClientSet.from_mask(np.arange(spec.n) % 3 != 0)
    store.finish(spec.job_id, release_sha256="ab" * 32, participants=members, shares=shares,
                 outputs={"a.json": "{}"})
    store.close()
    again = AnalystStore(tmp_path).get(spec.job_id)
    assert again.state == "done" and again.published and again.spec.digest == spec.digest
    assert again.participants == members and all((a == b).all() for a, b in zip(again.shares, shares))
    assert again.outputs == {"a.json": "{}"} and again.release_sha256 == "ab" * 32


def test_the_participant_set_is_stored_as_ranges_and_an_old_packed_mask_still_reads(tmp_path):
    import sqlite3

    spec = parse_job_file(render_job_file(doc())).spec
    members = ClientSet.from_ranges(spec.n, [(0, 5), (9, spec.n)])
    shares = [np.zeros((8, 3), dtype=np.uint64)] * 2
    store = AnalystStore(tmp_path)
    store.add(spec, {}, "system", 1.0, "running")
    store.finish(spec.job_id, release_sha256="cd" * 32, participants=members, shares=shares, outputs={})
    store.close()
    db = sqlite3.connect(tmp_path / "analyst.db")
    (blob,) = db.execute("SELECT participants FROM jobs").fetchone()
    assert len(blob) == len(b"ranges1\n") + 16 * 2  # 16 bytes per range, whatever n is
    # a finished job of an analyst from before the ranges: the packed (n,) mask
    db.execute("UPDATE jobs SET participants = ?", (np.packbits(members.to_mask()).tobytes(),))
    db.commit()
    db.close()
    store = AnalystStore(tmp_path)
    assert store.get(spec.job_id).participants == members
    store.close()


@pytest.mark.parametrize("bad_id", ["../escape", "a/b", "..", "c\\d"])
def test_the_runner_refuses_a_job_id_that_is_not_one_directory_name(tmp_path, bad_id):
    # The analyst writes a finished job's files to <out>/<job_id>/; a spec sent over gRPC (SubmitJob,
    # RunJob) skips the job file's id check, so the runner must refuse it before storing anything.
    import asyncio
    from dataclasses import replace

    from ltm.analyst.jobs import JobRunner
    from ltm.jobspec import JobSpecError

    spec = replace(parse_job_file(render_job_file(doc())).spec, job_id=bad_id)
    store = AnalystStore(tmp_path / "state")
    runner = JobRunner(store, lambda spec, retries: [], tmp_path / "out")
    with pytest.raises(JobSpecError, match="job id"):
        asyncio.run(runner.submit(spec, None, deadline_s=1.0, start=False))
    assert store.get(bad_id) is None
    store.close()

"""Scratch folders (ltm/sim/localnet/workdir.py): a folder whose owner is dead is reclaimed by the next
start; one whose owner runs, one without an owner file (being made, or kept on purpose) stays."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ltm.sim.localnet import workdir
from ltm.sim.localnet.workdir import OWNER_FILE, keep, make_scratch_dir, process_start, reclaim_stale


def test_only_the_folders_of_dead_owners_are_reclaimed(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir.tempfile, "tempdir", str(tmp_path))
    mine = make_scratch_dir("ltm-demo-")                       # this process: alive
    kept = make_scratch_dir("ltm-load-")
    keep(kept)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    dead = tmp_path / "ltm-e2e-dead"
    dead.mkdir()
    (dead / "logs").mkdir()
    (dead / OWNER_FILE).write_text(json.dumps({"pid": dead_pid, "start": "1"}))
    reused = tmp_path / "ltm-load-reused"                      # this pid, another start time: a reused pid
    reused.mkdir()
    (reused / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start": "0"}))
    unowned = tmp_path / "ltm-demo-unowned"                    # being made, or kept for a post-mortem
    unowned.mkdir()
    other = tmp_path / "something-else"
    other.mkdir()
    (other / OWNER_FILE).write_text(json.dumps({"pid": dead_pid, "start": "1"}))

    assert sorted(reclaim_stale(tmp_path)) == sorted([dead, reused])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, unowned.name, other.name, kept.name])
    assert process_start(dead_pid) is None and process_start(os.getpid())

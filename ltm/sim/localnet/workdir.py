"""Scratch folders of local runs (``ltm demo``, ``ltm bench e2e``, ``ltm loadtest``) that outlive no owner.

A run removes its temporary folder on every way out it sees (``finally``, SIGTERM: the launcher);
a SIGKILL or the OOM killer leaves it behind.  So each folder records its owner — pid and start
time, which together name one process even after the pid is reused — in :data:`OWNER_FILE`, and
every run reclaims, before it makes its own, the folders of owners that are gone
(:func:`make_scratch_dir`).  Only folders this user owns, that carry the file, whose owner is
dead, are removed; a folder kept on purpose (a failed load test's logs, for a post-mortem) drops
its owner file (:func:`keep`) and stays.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

#: The file in a scratch folder that names its owner: ``{"pid": …, "start": …}``.
OWNER_FILE = ".ltm-owner.json"
#: The prefixes of the scratch folders the local runs make in the temporary directory.
PREFIXES = ("ltm-demo-", "ltm-e2e-", "ltm-load-")


def process_start(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, field 22 of ``/proc/PID/stat``), ``""`` where
    there is no /proc but the process exists, None if there is no such process (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields[19]
    except FileNotFoundError:
        return None
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
        return ""
    except ProcessLookupError:
        return None
    except PermissionError:
        return ""


def _owner_alive(folder: Path) -> bool:
    """Whether the owner recorded in ``folder`` runs (True when unsure: the folder stays)."""
    try:
        owner = json.loads((folder / OWNER_FILE).read_text())
        pid, start = int(owner["pid"]), owner["start"]
    except FileNotFoundError:
        return True  # not (or not yet) a folder with an owner: never ours to remove
    except (OSError, ValueError, KeyError, TypeError):
        return True
    now = process_start(pid)
    return now is not None and (start in ("", None) or now in ("", start))


def reclaim_stale(tmp: str | Path | None = None) -> list[Path]:
    """Remove the scratch folders under ``tmp`` (default: the temporary directory) whose owner is
    gone; returns those removed."""
    removed = []
    for prefix in PREFIXES:
        for folder in Path(tmp or tempfile.gettempdir()).glob(prefix + "*"):
            try:
                st = folder.lstat()
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or _owner_alive(folder):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def make_scratch_dir(prefix: str) -> Path:
    """A new temporary folder ``<tmp>/<prefix>…`` owned by this process (:data:`OWNER_FILE`), after
    reclaiming the folders of dead owners."""
    assert prefix in PREFIXES, prefix
    reclaim_stale()
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    me = {"pid": os.getpid(), "start": process_start(os.getpid())}
    tmp = folder / (OWNER_FILE + ".tmp")
    tmp.write_text(json.dumps(me))
    tmp.replace(folder / OWNER_FILE)
    return folder


def keep(folder: Path) -> None:
    """Keep ``folder`` when its owner is gone (a post-mortem's logs): forget its owner."""
    (folder / OWNER_FILE).unlink(missing_ok=True)

"""A child started with a lifeline (ltm/transport/lifeline.py) dies with its launcher, however the launcher
dies: real processes, the launcher SIGKILLed (it runs no cleanup at all)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

CHILD = "from ltm.transport.lifeline import hold_from_env; hold_from_env(); import time; time.sleep(120)"
#: A launcher: starts CHILD with its lifeline from the main thread or from a worker thread (which
#: then ends: the child must outlive that thread), prints the child's pid, then waits to be killed.
LAUNCHER = """
import os, subprocess, sys, threading, time
from ltm.transport.lifeline import child_env
procs = []
def start():
    procs.append(subprocess.Popen([sys.executable, "-c", {child!r}], env=child_env(dict(os.environ))))
if sys.argv[1] == "thread":
    t = threading.Thread(target=start); t.start(); t.join()
else:
    start()
time.sleep(1.0)  # past the thread's end
print(procs[0].pid, flush=True)
time.sleep(120)
""".format(child=CHILD)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("where", ["main", "thread"])
def test_the_child_dies_with_a_sigkilled_launcher(where):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, where], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
    child = int(launcher.stdout.readline())
    try:
        assert _alive(child)  # a worker thread that ended did not take it along
        launcher.kill()
        launcher.wait()
        end = time.monotonic() + 5
        while _alive(child) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its launcher"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_without_a_lifeline_nothing_changes(monkeypatch):
    from ltm.transport import lifeline

    monkeypatch.delenv(lifeline.ENV, raising=False)
    lifeline.hold_from_env()  # a command run by a person: no parent to watch, no thread started
    assert not any(t.name == "ltm-lifeline" for t in __import__("threading").enumerate())


def test_ltm_looks_for_the_variable_the_launcher_sets():
    from ltm.cli import app
    from ltm.transport import lifeline

    assert f'"{lifeline.ENV}" in os.environ' in Path(app.__file__).read_text()

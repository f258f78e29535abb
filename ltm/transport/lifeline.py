"""A child that dies with the launcher that started it, whatever kills the launcher.

``ltm demo``, ``ltm bench e2e`` and ``ltm loadtest`` start servers, an analyst and parties as
processes of their own, each in its own session (a Ctrl-C in the terminal reaches the launcher
only, which stops them: ``ltm.sim.localnet.launcher``).  A launcher that is SIGKILLed, or taken by the
OOM killer, runs no cleanup at all, so each child watches it instead:

* the launcher puts ``LTM_LIFELINE=<its pid>:<1|0>`` in the child's environment (:func:`child_env`);
* the child, first thing in ``ltm`` (:func:`hold_from_env`, called by ``ltm.cli.app.main``), asks
  Linux to SIGKILL it when its parent dies (``prctl(PR_SET_PDEATHSIG)``), then checks that the
  parent is still the launcher (it may have died before the request was made), and on other
  systems watches ``getppid()`` from a daemon thread (a dead parent's children are re-parented).

``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the process: the
launcher spawns from its main thread (``ltm.sim.localnet.launcher`` and the load test's drivers do), and
says so with the ``1``; a child started from another thread gets ``0`` and is watched by the
thread alone (a worker thread that ends must not take the actors with it).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: The environment variable a launcher sets for its children: ``<launcher pid>:<1|0>``.
ENV = "LTM_LIFELINE"
#: How often the portable watch looks at the parent (seconds).
POLL_S = 0.25
_PR_SET_PDEATHSIG = 1


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this process's lifeline for a child about to be started from this thread."""
    on_main = threading.current_thread() is threading.main_thread()
    return {**env, ENV: f"{os.getpid()}:{1 if on_main else 0}"}


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent (thread) dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    _die()


def hold(parent: int, *, from_main_thread: bool = True) -> None:
    """Die (SIGKILL) when ``parent`` does: by the parent-death signal where Linux gives it and the
    parent spawned from its main thread, else by a daemon thread watching ``getppid()``."""
    kernel = from_main_thread and _parent_death_signal()
    if os.getppid() != parent:  # the parent died before the signal was asked for
        _die()
    if not kernel:
        threading.Thread(target=_watch, args=(parent,), name="ltm-lifeline", daemon=True).start()


def hold_from_env() -> None:
    """:func:`hold` for a child a launcher started with :func:`child_env`; nothing otherwise.  The
    variable is removed, so that what this process starts is tied to it, not to the launcher."""
    value = os.environ.pop(ENV, "")
    pid, _, main = value.partition(":")
    if pid.isdigit():
        hold(int(pid), from_main_thread=main == "1")

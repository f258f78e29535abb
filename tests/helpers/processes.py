"""Stopping the processes a test started itself (outside :class:`ltm.sim.localnet.launcher.ProcessGroup`)."""
from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterable


def stop_processes(procs: Iterable[subprocess.Popen], timeout: float = 15) -> None:
    """SIGTERM every process still running, then wait for each up to ``timeout`` seconds and SIGKILL
    the ones that did not exit: all are reaped when this returns."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

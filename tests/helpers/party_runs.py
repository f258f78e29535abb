"""Shared by the tests that run `ltm party` processes and read what they logged."""
from __future__ import annotations

import json
import subprocess

from ltm.sim.localnet.launcher import ActorProcess, ProcessGroup


def log_messages(text: str) -> str:
    """The ``msg`` of every JSON log line (unicode unescaped), one per line; other lines as they are."""
    out = []
    for line in text.splitlines():
        try:
            out.append(str(json.loads(line).get("msg", line)))
        except (ValueError, AttributeError):
            out.append(line)
    return "\n".join(out)


def wait(group: ProcessGroup, ap: ActorProcess, timeout: float = 60) -> tuple[int | None, str]:
    """Wait for one party process, stopping it at ``timeout``: its exit code (None on timeout) and
    its log messages."""
    try:
        code = ap.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        group.stop(ap)
        code = None
    return code, log_messages(ap.log_path.read_text(errors="replace"))


def collect(runs: dict[str, tuple[ProcessGroup, ActorProcess]], timeout: float = 60) -> dict[str, tuple]:
    """Wait for every party process; returns key → (exit code or None on timeout, its log messages).
    Every group is stopped afterwards, whatever happens."""
    try:
        return {key: wait(group, ap, timeout) for key, (group, ap) in runs.items()}
    finally:
        for group, _ in runs.values():
            group.stop_all()

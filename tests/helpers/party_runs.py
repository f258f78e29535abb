"""Shared by the tests that run `ltm party` processes and read what they logged."""
from __future__ import annotations

import json
import subprocess

from sim.localnet.launcher import ActorProcess, ProcessGroup


def log_messages(text: str) -> str:
    """The ``msg`` of every JSON log line (unicode unescaped), one per line; other lines as they are."""
    out = []
    for line in text.splitlines():
        try:
            out.append(str(json.loads(line).get("msg", line)))
        except (ValueError, AttributeError):
            out.append(line)
    return "\n".join(out)


def collect(runs: dict[str, tuple[ProcessGroup, ActorProcess]], timeout: float = 60) -> dict[str, tuple]:
    """Wait for every party process; returns key → (exit code or None on timeout, its log messages).
    Every group is stopped afterwards, whatever happens."""
    out = {}
    try:
        for key, (group, ap) in runs.items():
            try:
                code = ap.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                group.stop(ap)
                code = None
            out[key] = (code, log_messages(ap.log_path.read_text(errors="replace")))
    finally:
        for group, _ in runs.values():
            group.stop_all()
    return out

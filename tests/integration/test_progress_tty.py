"""Progress bars appear on a terminal and nowhere else (issue 33 item 4): a real ``ltm simulate`` with
its stderr on a pseudo-terminal (the pty module) draws the bar there, while its ``--json`` output on
stdout stays one clean JSON object; ``--quiet`` draws nothing, and neither does a stderr that is a pipe.
(How the bar is drawn: tests/unit/ltm/test_progress.py.)"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios

import pytest

if not hasattr(pty, "openpty"):
    pytest.skip("no pseudo-terminals on this platform", allow_module_level=True)

SIMULATE = [sys.executable, "-m", "ltm.cli", "simulate", "--synthetic", "ridge", "--n", "20000", "--seed", "7",
            "--json"]


def _run_on_a_terminal(argv: list[str], size: tuple[int, int] | None = None) -> tuple[str, str]:
    """Run ``argv`` with stderr on a fresh pseudo-terminal (``size``: its rows and columns; None: a
    terminal that states no size, as some CI runners' are) and stdout on a pipe; returns (stdout, what
    the terminal showed)."""
    master, slave = pty.openpty()
    if size is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)  # the child holds it; the master then reads EOF (EIO) once the child is gone
    shown = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                proc.kill()
                raise AssertionError(f"no output and no exit within 120 s; so far: {shown[-500:]!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        out = proc.stdout.read().decode()
        assert proc.wait(timeout=60) == 0, shown.decode(errors="replace")[-2000:]
    finally:
        os.close(master)
    return out, shown.decode(errors="replace")


def _is_bar(text: str) -> bool:
    return "20.0k/20.0k" in text and "100%" in text and "clients" in text


@pytest.mark.parametrize("size", [(24, 80), None], ids=["80x24", "unsized"])
def test_the_bar_is_drawn_on_the_terminal_and_the_json_stays_clean(size):
    out, shown = _run_on_a_terminal(SIMULATE, size)
    assert _is_bar(shown), shown[-2000:]  # the parties' 20 000 clients, on the terminal
    report = json.loads(out)  # stdout: exactly the one JSON object
    assert report["n_train"] > 0 and "\r" not in out and "clients/s" not in out
    if size is not None:  # tqdm follows the terminal's width
        assert all(len(line) <= size[1] for line in shown.replace("\r", "\n").splitlines())


def test_quiet_and_a_pipe_draw_nothing():
    out, shown = _run_on_a_terminal([*SIMULATE, "--quiet"])
    assert not _is_bar(shown) and "\r" not in shown and json.loads(out)["n_train"] > 0
    piped = subprocess.run(SIMULATE, capture_output=True, text=True, timeout=300, check=True)
    assert "clients" not in piped.stderr and "\r" not in piped.stderr and json.loads(piped.stdout)

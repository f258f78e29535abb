"""ltm/progress.py: the one progress bar — drawn on a terminal only, never with --quiet, and without
tqdm by its fallback (issue 33 item 4; the real commands under a pseudo-terminal:
tests/integration/test_progress_tty.py)."""
from __future__ import annotations

import io
import sys

from ltm.progress import bar_enabled, progress_bar


class _Terminal(io.StringIO):
    """A stream that says it is a terminal (what a bar is drawn on)."""

    def isatty(self) -> bool:
        return True


def _run(stream, **kw) -> str:
    with progress_bar(1000, "party-0", unit="clients", stream=stream, **kw) as bar:
        for _ in range(10):
            bar.update(100)
    assert bar.n == 1000  # counted whether or not anything is drawn
    return stream.getvalue()


def test_a_bar_is_drawn_on_a_terminal_only_and_never_when_quiet():
    drawn = _run(_Terminal())
    assert "party-0" in drawn and "100%" in drawn and "1.00k/1.00k" in drawn
    assert _run(io.StringIO()) == ""  # a pipe or a log file: nothing
    assert _run(_Terminal(), quiet=True) == ""
    assert not bar_enabled(io.StringIO()) and bar_enabled(_Terminal()) and not bar_enabled(_Terminal(), quiet=True)


def test_a_delayed_bar_draws_nothing_for_a_short_wait():
    assert _run(_Terminal(), delay_s=60.0) == ""


def test_without_tqdm_the_fallback_draws_the_same_bar(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` now fails
    drawn = _run(_Terminal())
    assert "party-0 [" in drawn and "100.0%" in drawn and "(1000/1000 clients)" in drawn and drawn.endswith("\n")
    assert _run(io.StringIO()) == ""


def test_a_closed_or_odd_stream_is_not_a_terminal():
    closed = io.StringIO()
    closed.close()
    assert not bar_enabled(closed) and not bar_enabled(object())

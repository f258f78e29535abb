"""The one progress bar of the long waits a person sits through: a party's read and upload, ``ltm simulate``
on large inputs, ``ltm bench e2e`` and experiment sweeps.

A bar is drawn on stderr only when stderr is a terminal and the command was not given ``--quiet``: in a
pipe, a log file or under ``--json`` consumers nothing but the command's own output appears (the JSON
goes to stdout, the bar never does).  tqdm draws it when it is installed (the ``progress`` extra);
without tqdm a one-line fallback does.  Every site calls :func:`progress_bar`; none draws its own.

Nothing here touches the network or the disk; the bar is display only, never data.
"""
from __future__ import annotations

import io
import os
import sys
import time
from typing import Any, Self, TextIO

__all__ = ["Bar", "bar_enabled", "progress_bar"]


def bar_enabled(stream: Any = None, *, quiet: bool = False) -> bool:
    """True when a bar would be drawn: not ``quiet`` and ``stream`` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _sized(stream: Any) -> bool:
    """Whether the terminal behind ``stream`` states its size (tqdm then follows it as it changes)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
    return size.columns > 0 and size.lines > 0


class Bar:
    """A progress bar (a no-op when disabled): :meth:`update` by an amount, :meth:`close` at the end;
    usable as a context manager.  ``n`` is the amount done so far (counted even when nothing is drawn)."""

    def __init__(self, total: float | None, label: str, *, unit: str, stream: TextIO | None, enabled: bool,
                 initial: float = 0, delay_s: float = 0.0) -> None:
        self.total, self.label, self.unit, self.n = total, label, unit, initial
        self.stream = sys.stderr if stream is None else stream
        self._tqdm: Any = None
        self._fallback = False
        self._start = time.monotonic()
        self._last = 0.0
        self._delay = delay_s
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._fallback = True
            return
        sized = _sized(self.stream)  # a terminal that states no size (0 × 0) gets 100 × 20: tqdm would draw nothing
        self._tqdm = tqdm(total=total, desc=label, unit=unit, initial=initial, file=self.stream, delay=delay_s,
                          mininterval=0.2, dynamic_ncols=sized, ncols=None if sized else 100,
                          nrows=None if sized else 20, unit_scale=unit not in ("", "it"), leave=True)

    def update(self, amount: float = 1) -> None:
        """Count ``amount`` more done and redraw (tqdm: at most 5 times a second)."""
        self.n += amount
        if self._tqdm is not None:
            self._tqdm.update(amount)
        elif self._fallback:
            self._draw()

    def set_total(self, total: float | None) -> None:
        """Change the amount the work comes to (an estimate that became better)."""
        self.total = total
        if self._tqdm is not None:
            self._tqdm.total = total

    def describe(self, text: str) -> None:
        """Show ``text`` after the counts (e.g. what is running now)."""
        if self._tqdm is not None:
            self._tqdm.set_postfix_str(text, refresh=False)

    def _draw(self, final: bool = False) -> None:
        now = time.monotonic()
        if now - self._start < self._delay or (not final and now - self._last < 0.2):
            return
        self._last = now
        frac = min(self.n / self.total, 1.0) if self.total else 0.0
        fill = round(28 * frac)
        text = f"{self.label} [{'#' * fill}{'.' * (28 - fill)}] {100 * frac:5.1f}% ({self.n:g}/{self.total:g} {self.unit})"
        self.stream.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
        self.stream.flush()

    def close(self) -> None:
        """Finish the bar (its last state stays on the terminal)."""
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
        elif self._fallback and self._last:
            self._draw(final=True)
            self._fallback = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: float | None, label: str, *, unit: str = "it", quiet: bool = False, initial: float = 0,
                 delay_s: float = 0.0, stream: TextIO | None = None) -> Bar:
    """A :class:`Bar` of ``total`` units (None: unknown) on ``stream`` (default stderr), drawn only if
    :func:`bar_enabled` (a terminal, not ``quiet``) and after ``delay_s`` seconds (so a short wait shows nothing).

    Args:
        total: the amount the work comes to (clients, bytes, cells; a float for weighted work).
        label: what is being waited for (a party id, "simulate", a spec's name).
        unit: the unit of ``total`` ("clients", "B": scaled as 1.2M, 3.4 MB).
        initial: the amount already done (a resumed run).
    """
    return Bar(total, label, unit=unit, stream=stream, enabled=bar_enabled(stream, quiet=quiet), initial=initial,
               delay_s=delay_s)

"""Process memory settings for long-running actors (servers, and any actor that wants them).

glibc's malloc raises its mmap threshold each time a large block is freed (up to 32 MiB), after
which blocks of batch size (a few MiB: one upload's buffer, a blob read for the release) come
from per-thread heap arenas that keep freed memory resident.  A server that stores and releases
batches from a thread pool then sits at a multiple of its live data: at 10⁷ clients its peak RSS
was 183–338 MB with at most 54 MB of live Python/numpy memory (tracemalloc), against 122–132 MB
with the threshold pinned at 1 MiB (`ltm bench e2e --n 10000000 --parties 4`, #15).

The price: every block of ≥ 1 MiB is a fresh mmap, page-faulted on first touch.  At 10⁷ clients
the release took 2.7–3.3 s per server against 1.5–1.8 s unpinned (machine under load 9–12), about
0.1 s at 10⁶; the 10⁶ end-to-end wall time stayed below the unpinned code's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: mallopt parameter number of M_MMAP_THRESHOLD in glibc's malloc.h
_M_MMAP_THRESHOLD = -3
#: blocks of at least this size are mmapped and unmapped on free, so freed batches leave the RSS
MMAP_THRESHOLD_BYTES = 1 << 20


def return_large_blocks_to_the_os(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold so that every block ≥ ``threshold`` bytes is returned to the OS
    when freed (RSS then follows live memory).  Returns whether it was set (False off glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False

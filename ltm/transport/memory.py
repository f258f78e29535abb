"""Process memory settings for long-running actors (servers, and any actor that wants them).

glibc's malloc gives each thread that allocates its own arena (up to 8 per core), and an arena
keeps freed blocks for reuse by that thread only.  A server stores and releases batches in a
pool of worker threads, each of which allocates batch-sized blocks (a few MiB: an upload's array,
a blob read, a chunk's index array) — so its RSS settled at a multiple of its live data: at 10⁷
clients 179–195 MB peak with at most 54 MB of live Python/numpy memory (tracemalloc in the
server).  With one arena, freed blocks are reused by whichever thread allocates next: 117–122 MB
at 10⁷ and a release as fast as before (1.7–2.2 s per server; `ltm bench e2e --n 10000000
--parties 4`, #15).  (Pinning the mmap threshold at 1 MiB gave 119–137 MB too, but every block
became a fresh mmap and the release took 2.7–4.7 s.)  The worker threads run one request at a
time (the service's lock), so they do not contend for the arena.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: mallopt parameter number of M_ARENA_MAX in glibc's malloc.h
_M_ARENA_MAX = -8


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def share_one_malloc_arena(arenas: int = 1) -> bool:
    """Limit glibc's malloc to ``arenas`` arenas, so that memory freed by one thread is reused by
    the others instead of staying resident per thread.  Call it at process start, before threads
    allocate.  Returns whether it was set (False off glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(_libc().mallopt(_M_ARENA_MAX, int(arenas)))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


def return_free_memory() -> bool:
    """Give the pages of freed heap blocks back to the OS (glibc ``malloc_trim(0)``).

    Batch-sized blocks (a few MiB) end up inside the heap once glibc's dynamic mmap threshold has
    risen past their size, and freed blocks between live ones stay resident until trimmed.  A
    server calls this after each stored upload and each release, so its resident memory follows
    its live data (#15: 10⁷ clients from 16 parties, 139–165 MB peak without it).  Costs about a
    millisecond per call.  Returns whether anything was released (False off glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(_libc().malloc_trim(0))
    except (OSError, AttributeError):
        return False

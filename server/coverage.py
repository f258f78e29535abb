"""Which (client, column) cells a server holds, as client ranges per uploaded column set.

A party uploads contiguous client ranges, every batch with the same columns (all of them in the
rows partition, its own column block in the columns partition), so what a server holds is a few
ranges per column set even at n = 10⁸.  An (n, W) bool table would cost n·W bytes (1.1 GB at
n = 10⁸, W = 11); :class:`Coverage` costs 16 bytes per range.  Both stores keep one per job
(:class:`ltm.server.store.MemoryStore` updates it on each batch, :class:`ltm.server.sqlite_store.SqliteStore`
rebuilds it from its batch rows at open).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from ltm.client_set import ClientSet


class _Ranges:
    """Sorted, disjoint, non-adjacent half-open ranges, kept merged as ranges are added."""

    __slots__ = ("starts", "stops")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []

    def add(self, start: int, stop: int) -> None:
        """Add ``[start, stop)``, merging every range it overlaps or touches (O(log r + merged))."""
        lo = bisect_left(self.stops, start)  # first range ending at or after start (touching merges)
        hi = bisect_right(self.starts, stop)  # ranges starting at or before stop
        if lo < hi:
            start = min(start, self.starts[lo])
            stop = max(stop, self.stops[hi - 1])
        self.starts[lo:hi] = [start]
        self.stops[lo:hi] = [stop]

    def intersects(self, start: int, stop: int) -> bool:
        """Whether some member lies in ``[start, stop)``."""
        i = bisect_right(self.stops, start)  # first range ending after start
        return i < len(self.starts) and self.starts[i] < stop

    def client_set(self, n: int) -> ClientSet:
        return ClientSet(n, np.array([self.starts, self.stops], dtype=np.int64).T.reshape(-1, 2).copy())

    def copy(self) -> "_Ranges":
        out = _Ranges()
        out.starts, out.stops = list(self.starts), list(self.stops)
        return out


class Coverage:
    """The cells a server holds for one job: per uploaded column set, the client ranges uploaded.

    Attributes:
        n: the job's number of clients.
        width: W, values uploaded per client (columns 0..W−1).
    """

    def __init__(self, n: int, width: int) -> None:
        self.n = int(n)
        self.width = int(width)
        self._sets: dict[tuple[int, ...], _Ranges] = {}
        #: column → the column sets holding it (an upload checks only the sets sharing a column)
        self._by_column: dict[int, list[tuple[int, ...]]] = {}

    def add(self, start: int, stop: int, columns) -> None:
        """Record that clients ``start..stop−1`` are held in ``columns``."""
        start, stop = max(int(start), 0), min(int(stop), self.n)
        if start >= stop:  # nothing to hold (callers validate ranges; this keeps the ranges canonical)
            return
        key = tuple(sorted({int(c) for c in columns}))
        if key not in self._sets:
            self._sets[key] = _Ranges()
            for c in key:
                self._by_column.setdefault(c, []).append(key)
        self._sets[key].add(start, stop)

    def overlaps(self, start: int, stop: int, columns) -> bool:
        """Whether any cell of clients ``start..stop−1`` × ``columns`` is already held (the
        double-count check at upload)."""
        keys = {key for c in columns for key in self._by_column.get(int(c), ())}
        return any(self._sets[key].intersects(int(start), int(stop)) for key in keys)

    def held(self) -> ClientSet:
        """The clients whose every column 0..W−1 is held."""
        # Columns held by the same column sets have the same holders: intersect one union per group.
        groups: dict[tuple[tuple[int, ...], ...], None] = {}
        for c in range(self.width):
            keys = self._by_column.get(c)
            if not keys:
                return ClientSet.empty(self.n)
            groups[tuple(keys)] = None
        if not groups:  # W = 0: no column to hold
            return ClientSet.empty(self.n)
        return ClientSet.intersection([ClientSet.union([self._sets[k].client_set(self.n) for k in keys])
                                       for keys in groups])

    def any(self) -> bool:
        """Whether any cell is held."""
        return any(r.starts for r in self._sets.values())

    def column_sets(self) -> dict[tuple[int, ...], ClientSet]:
        """Per uploaded column set (sorted column tuple), the clients held in it."""
        return {key: r.client_set(self.n) for key, r in self._sets.items()}

    def to_array(self) -> np.ndarray:
        """The (n, W) bool table of held cells.  Costs n·W bytes: for tests and small n only."""
        out = np.zeros((self.n, self.width), dtype=bool)
        for key, r in self._sets.items():
            for a, b in zip(r.starts, r.stops):
                out[a:b, list(key)] = True
        return out

    def copy(self) -> "Coverage":
        """An independent copy (later adds to either do not show in the other)."""
        out = Coverage(self.n, self.width)
        out._sets = {key: r.copy() for key, r in self._sets.items()}
        out._by_column = {c: list(keys) for c, keys in self._by_column.items()}
        return out

    def __eq__(self, other: object) -> bool:
        """Equal when the same cells are held (however the column sets were split)."""
        if not isinstance(other, Coverage) or (self.n, self.width) != (other.n, other.width):
            return False
        mine, theirs = self._per_column(), other._per_column()
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]  # mutable

    def _per_column(self) -> list[ClientSet]:
        sets = self.column_sets()
        return [ClientSet.union([ClientSet.empty(self.n)] + [s for key, s in sets.items() if c in key])
                for c in range(self.width)]

    def __repr__(self) -> str:
        parts = ", ".join(f"{list(k)}: {len(r.starts)} ranges" for k, r in list(self._sets.items())[:4])
        return f"Coverage(n={self.n}, width={self.width}, {{{parts}}})"

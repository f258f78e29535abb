"""A set of client indices held as sorted disjoint ranges: participant sets and coverage at any n.

A job's clients are numbered 0..n−1 and every party uploads contiguous batches, so the sets the
protocol passes around — what a server holds, what the analyst agrees to release over — are
unions of a few ranges even at n = 10⁸.  A boolean mask would cost n bytes (100 MB at 10⁸) in
every server and the analyst, and 12.5 MB packed on the wire; :class:`ClientSet` costs 16 bytes
per range and answers the questions the protocol asks (count, subset, intersection, the local
mask of one batch) without materialising n of anything.

Canonical form: ``ranges`` is an int64 array (r, 2) of half-open ``[start, stop)`` with
``0 ≤ start < stop ≤ n``, sorted, and separated by at least one non-member (adjacent ranges are
merged).  Two equal sets therefore have equal ranges, equal bytes and equal digests.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ltm.errors import LtmError

#: Clients per step when a set is expanded into masks (digest, :meth:`ClientSet.to_mask` chunks).
_MASK_CHUNK = 1 << 23  # a multiple of 8, so packed chunks concatenate to the packed whole


class ClientSetError(LtmError, ValueError):
    """A malformed client set (out of range, unsorted, overlapping, or the wrong encoding)."""

    exit_code = 2


def _merge(ranges: np.ndarray) -> np.ndarray:
    """Sort, drop empty ranges, and merge overlapping or adjacent ones: the canonical (r, 2) form."""
    ranges = ranges[ranges[:, 0] < ranges[:, 1]]
    if len(ranges) <= 1:
        return np.ascontiguousarray(ranges, dtype=np.int64).reshape(-1, 2)
    ranges = ranges[np.argsort(ranges[:, 0], kind="stable")]
    starts, stops = ranges[:, 0], np.maximum.accumulate(ranges[:, 1])
    # A range opens a new group when it starts after everything before it has stopped.
    new = np.empty(len(ranges), dtype=bool)
    new[0] = True
    new[1:] = starts[1:] > stops[:-1]
    group_starts = starts[new]
    last = np.append(np.flatnonzero(new)[1:] - 1, len(ranges) - 1)
    return np.ascontiguousarray(np.stack([group_starts, stops[last]], axis=1), dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ClientSet:
    """A subset of the clients ``0..n−1`` as canonical sorted disjoint ranges.

    Attributes:
        n: the job's number of clients.
        ranges: int64 array (r, 2) of half-open ``[start, stop)`` ranges in canonical form
            (use the constructors; the initializer trusts its input).
    """

    n: int
    ranges: np.ndarray

    # ------------------------------------------------------------------ constructors
    @classmethod
    def empty(cls, n: int) -> "ClientSet":
        return cls(int(n), np.zeros((0, 2), dtype=np.int64))

    @classmethod
    def full(cls, n: int) -> "ClientSet":
        return cls.span(n, 0, n)

    @classmethod
    def span(cls, n: int, start: int, stop: int) -> "ClientSet":
        """The clients ``start..stop−1``."""
        return cls.from_ranges(n, [(start, stop)])

    @classmethod
    def from_ranges(cls, n: int, ranges) -> "ClientSet":
        """Any iterable of ``(start, stop)`` pairs within [0, n] (overlaps and order allowed)."""
        arr = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        if len(arr) and (arr.min() < 0 or arr.max() > n or (arr[:, 0] > arr[:, 1]).any()):
            raise ClientSetError(f"client ranges must satisfy 0 ≤ start ≤ stop ≤ n = {n}")
        return cls(int(n), _merge(arr))

    @classmethod
    def from_mask(cls, mask: np.ndarray) -> "ClientSet":
        """The set of True entries of a bool mask (n,)."""
        m = np.asarray(mask, dtype=bool).ravel()
        pad = np.zeros(1, dtype=np.int8)  # int8 throughout: n bytes of temporaries, not 8·n
        edges = np.flatnonzero(np.diff(np.concatenate((pad, m.view(np.int8), pad))))
        return cls(len(m), edges.astype(np.int64).reshape(-1, 2))

    @classmethod
    def coerce(cls, n: int, members: "ClientSet | np.ndarray | None") -> "ClientSet":
        """A ClientSet from a ClientSet, a bool mask (n,), or None (= every client)."""
        if members is None:
            return cls.full(n)
        if isinstance(members, ClientSet):
            if members.n != n:
                raise ClientSetError(f"client set is over n = {members.n} clients, expected {n}")
            return members
        mask = np.asarray(members)
        if mask.dtype != bool or mask.shape != (n,):
            raise ClientSetError(f"participant mask must be bool of shape ({n},), got {mask.dtype} {mask.shape}")
        return cls.from_mask(mask)

    # ------------------------------------------------------------------ encoding
    def to_bytes(self) -> bytes:
        """Little-endian uint64 ``start, stop`` pairs (16 bytes per range)."""
        return self.ranges.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, n: int, data: bytes, *, max_ranges: int | None = None) -> "ClientSet":
        """Decode :meth:`to_bytes`, refusing anything not in canonical form (hostile input)."""
        if len(data) % 16:
            raise ClientSetError(f"client ranges are 16-byte (start, stop) pairs; got {len(data)} bytes")
        count = len(data) // 16
        if max_ranges is not None and count > max_ranges:
            raise ClientSetError(f"client set has {count} ranges, above the limit of {max_ranges}")
        raw = np.frombuffer(data, dtype="<u8").reshape(-1, 2)
        if count and int(raw.max()) > n:
            raise ClientSetError(f"client range ends past n = {n}")
        arr = raw.astype(np.int64)
        if (arr[:, 0] >= arr[:, 1]).any():
            raise ClientSetError("every client range needs start < stop")
        if count > 1 and (arr[1:, 0] <= arr[:-1, 1]).any():
            raise ClientSetError("client ranges must be sorted and separated (merge adjacent ranges)")
        return cls(int(n), np.ascontiguousarray(arr))

    def digest(self) -> str:
        """SHA-256 of the packed (n,) membership bits (``numpy.packbits``), computed in chunks.

        Independent of the representation: equals the digest of the same set given as a mask.
        """
        h = hashlib.sha256()
        ones: bytes | None = None
        for a in range(0, self.n, _MASK_CHUNK):
            b = min(a + _MASK_CHUNK, self.n)
            if b - a == _MASK_CHUNK and self.covers(a, b):  # a whole chunk of members packs to 0xFF bytes:
                ones = ones or b"\xff" * (_MASK_CHUNK // 8)  # no n-sized mask for the common full set
                h.update(ones)
            else:
                h.update(np.packbits(self.mask(a, b)).tobytes())
        return h.hexdigest()

    # ------------------------------------------------------------------ queries
    @property
    def count(self) -> int:
        """Number of members."""
        return int((self.ranges[:, 1] - self.ranges[:, 0]).sum())

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return len(self.ranges) > 0

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ClientSet) and self.n == other.n
                and np.array_equal(self.ranges, other.ranges))

    def __hash__(self) -> int:
        return hash((self.n, self.ranges.tobytes()))

    def __repr__(self) -> str:
        shown = ", ".join(f"[{a}, {b})" for a, b in self.ranges[:4].tolist())
        more = f", … {len(self.ranges) - 4} more" if len(self.ranges) > 4 else ""
        return f"ClientSet(n={self.n}, count={self.count}, ranges={{{shown}{more}}})"

    def rank(self, positions) -> np.ndarray:
        """Number of members below each position (vectorised; positions in [0, n]): int64."""
        x = np.asarray(positions, dtype=np.int64)
        starts, stops = self.ranges[:, 0], self.ranges[:, 1]
        if not len(starts):
            return np.zeros_like(x)
        before = np.concatenate(([0], np.cumsum(stops - starts)))  # members in ranges 0..j−1
        # Ranges 0..i−1 start below x; all but the last of them also end at or below x (disjoint).
        i = np.searchsorted(starts, x, side="left")
        j = np.maximum(i - 1, 0)
        inside = np.minimum(x, stops[j]) - starts[j]
        return np.where(i > 0, before[j] + inside, 0)

    def count_in(self, start: int, stop: int) -> int:
        """Members in ``[start, stop)``."""
        lo, hi = self.rank([start, stop])
        return int(hi - lo)

    def counts_between(self, boundaries) -> np.ndarray:
        """Members in each ``[boundaries[i], boundaries[i+1])`` (e.g. per party): int64 (len − 1,)."""
        return np.diff(self.rank(boundaries))

    def covers(self, start: int, stop: int) -> bool:
        """Whether every client in ``[start, stop)`` is a member."""
        return self.count_in(start, stop) == stop - start

    def intersects(self, start: int, stop: int) -> bool:
        """Whether some client in ``[start, stop)`` is a member."""
        return self.count_in(start, stop) > 0

    def first(self) -> int | None:
        return int(self.ranges[0, 0]) if len(self.ranges) else None

    def within(self, start: int, stop: int) -> np.ndarray:
        """The member ranges clipped to ``[start, stop)``: int64 (r', 2)."""
        lo = np.searchsorted(self.ranges[:, 1], start, side="right")
        hi = np.searchsorted(self.ranges[:, 0], stop, side="left")
        part = self.ranges[lo:hi].copy()
        if len(part):
            part[0, 0] = max(part[0, 0], start)
            part[-1, 1] = min(part[-1, 1], stop)
        return part

    def mask(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Bool (stop − start,) membership of the clients ``start..stop−1`` (one batch's mask)."""
        stop = self.n if stop is None else stop
        out = np.zeros(stop - start, dtype=bool)
        for a, b in self.within(start, stop).tolist():
            out[a - start:b - start] = True
        return out

    def to_mask(self) -> np.ndarray:
        """The full bool mask (n,).  Costs n bytes: for tests and small n only."""
        return self.mask(0, self.n)

    def spans(self, size: int) -> Iterator[tuple[int, int]]:
        """The members as consecutive ``[a, b)`` pieces of at most ``size`` clients, in order."""
        for start, stop in self.ranges.tolist():
            for a in range(start, stop, size):
                yield a, min(a + size, stop)

    # ------------------------------------------------------------------ algebra
    def _check_same_n(self, other: "ClientSet") -> None:
        if not isinstance(other, ClientSet):
            raise TypeError(f"expected a ClientSet, got {type(other).__name__}")
        if other.n != self.n:
            raise ClientSetError(f"client sets over different n ({self.n} and {other.n})")

    def __or__(self, other: "ClientSet") -> "ClientSet":
        self._check_same_n(other)
        return ClientSet(self.n, _merge(np.concatenate([self.ranges, other.ranges])))

    def __and__(self, other: "ClientSet") -> "ClientSet":
        self._check_same_n(other)
        # Boundary sweep: a position is in both when both coverage counts are 1.
        return self.complement().__or__(other.complement()).complement()

    def complement(self) -> "ClientSet":
        """The clients of 0..n−1 that are not members."""
        edges = np.concatenate(([0], self.ranges.ravel(), [self.n]))
        return ClientSet(self.n, _merge(edges.reshape(-1, 2)))

    def __sub__(self, other: "ClientSet") -> "ClientSet":
        self._check_same_n(other)
        return self & other.complement()

    def issubset(self, other: "ClientSet") -> bool:
        self._check_same_n(other)
        return (self - other).count == 0

    @staticmethod
    def intersection(sets: list["ClientSet"]) -> "ClientSet":
        """The clients in every set (at least one set)."""
        if not sets:
            raise ValueError("intersection of no client sets")
        out = sets[0]
        for s in sets[1:]:
            out = out & s
        return out

    @staticmethod
    def union(sets: list["ClientSet"]) -> "ClientSet":
        """The clients in some set (at least one set)."""
        if not sets:
            raise ValueError("union of no client sets")
        return ClientSet(sets[0].n, _merge(np.concatenate([s.ranges for s in sets])))

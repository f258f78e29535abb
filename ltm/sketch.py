"""The public linear sketch S (m × n), derived from the job's 32-byte seed.

S is never materialised.  For each client j we derive, from an AES-256-CTR keystream keyed by
``SHAKE-256("ltm/sketch/v1" ‖ kind ‖ m ‖ s ‖ seed)``, where each of its ``pieces`` non-zeros sits:
``rows[l, j]`` (the row of piece l) and ``negative[l, j]`` (its sign).  Client j's randomness is the
fixed word range ``[j·W, (j+1)·W)`` of that keystream, so any client range can be derived on its
own (random access), and every host computes the identical matrix with integer operations only,
whatever its numpy version.

Kinds:

* ``sparse`` (OSNAP / CountSketch, Definition 3.1 of Burkhardt et al.): each column has ``s``
  non-zeros ±1 in ``s`` *distinct* rows chosen uniformly (Floyd's algorithm, vectorised over
  clients with a bitmask), in a uniformly random order that assigns them to the pieces
  ``S_1..S_s`` (one non-zero per column each).  Distinct rows matter: they make the replace-one
  sensitivity exactly ``2C√s`` and keep each (client, piece) noise in its own release row.
* ``dense`` (Rademacher): every entry is ±1; the paper's m-piece decomposition puts entry
  (r, j) in piece ``l = (r − j) mod m``, so each piece has one non-zero per column and, when m | n,
  exactly n/m per row.
* ``sum`` (the public map of the lifted release kinds, :mod:`ltm.lifts`): one row, every entry
  +1, one piece.  It needs no randomness; the seed is ignored.

The analyst applies the 1/√s (dense: 1/√m) scaling after reconstruction, in floating point; the
servers only ever add and subtract ring elements.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ltm.randomness import KeystreamBuffer, keystream_uint64, xof

SKETCH_KINDS = ("sparse", "dense", "sum")
#: Clients processed per step when deriving or applying the sketch (bounds temporary memory).
CHUNK_CLIENTS = 1 << 16


@dataclass(frozen=True)
class Sketch:
    """A seeded m × n sketch with ``pieces`` non-zeros per column (sparse: s; dense: m).

    Attributes:
        kind: ``"sparse"`` or ``"dense"``.
        m: number of rows (target dimension).
        n: number of columns (client indices 0..n−1).
        s: non-zeros per column (sparse); ignored for dense (which uses m).
        seed: the job's 32-byte public seed.
    """

    kind: str
    m: int
    n: int
    s: int
    seed: bytes

    def __post_init__(self) -> None:
        if self.kind not in SKETCH_KINDS:
            raise ValueError(f"unknown sketch kind {self.kind!r}; choose one of {SKETCH_KINDS}")
        if self.m < 1 or self.n < 1:
            raise ValueError("sketch needs m ≥ 1 and n ≥ 1")
        if self.kind == "sum" and (self.m != 1 or self.s != 1):
            raise ValueError(f"the sum map has m = 1 and s = 1 (got m={self.m}, s={self.s})")
        if self.kind == "sparse" and not 1 <= self.s <= self.m:
            raise ValueError(f"sparse sketch needs 1 ≤ s ≤ m (got s={self.s}, m={self.m})")
        if len(self.seed) != 32:
            raise ValueError("the sketch seed must be 32 bytes")

    @property
    def pieces(self) -> int:
        """Number of pieces S_l, i.e. non-zeros per column and noisy copies per client."""
        return self.m if self.kind == "dense" else self.s

    @property
    def scale(self) -> float:
        """The public factor 1/√pieces the analyst applies after reconstruction."""
        return 1.0 / float(np.sqrt(self.pieces))

    @property
    def _key(self) -> bytes:
        return xof(b"ltm/sketch/v1", self.kind.encode(), str(self.m).encode(), str(self.s).encode(), self.seed)

    @property
    def _words_per_client(self) -> int:
        sign_words = -(-self.pieces // 64)
        if self.kind == "dense":
            return sign_words
        # s Floyd draws, s − 1 shuffle draws (one spare word keeps the layout simple), signs.
        return 2 * self.s + sign_words

    # ------------------------------------------------------------------ placement
    def placement(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and signs of clients ``start..stop−1``.

        Returns:
            rows: int64 array (pieces, stop − start), the row of each client's non-zero in piece l.
            negative: bool array (pieces, stop − start), True where that non-zero is −1.
        """
        if not 0 <= start <= stop <= self.n:
            raise ValueError(f"client range [{start}, {stop}) outside [0, {self.n})")
        count = stop - start
        if self.kind == "sum":
            return np.zeros((1, count), dtype=np.int64), np.zeros((1, count), dtype=bool)
        width = self._words_per_client
        words = keystream_uint64(self._key, count * width, start * width).reshape(count, width)
        if self.kind == "dense":
            return self._dense_placement(start, count, words)
        return self._sparse_placement(count, words)

    def _signs(self, sign_words: np.ndarray, count: int) -> np.ndarray:
        """(pieces, count) bool: bit l of the client's sign words."""
        l = np.arange(self.pieces)
        bits = sign_words[:, l // 64] >> (l % 64).astype(np.uint64)
        return (bits & np.uint64(1)).astype(bool).T

    def _dense_placement(self, start: int, count: int, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = self.m
        j = np.arange(start, start + count, dtype=np.int64)
        rows = (np.arange(m, dtype=np.int64)[:, None] + j[None, :]) % m
        # Sign of entry (r, j) is bit r of client j's words; piece l holds row (l + j) mod m.
        signs_by_row = self._signs(words, count)  # (m, count), indexed by row
        negative = np.take_along_axis(signs_by_row, rows, axis=0)
        return rows, negative

    def _sparse_placement(self, count: int, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, s = self.m, self.s
        draws, shuffles, sign_words = words[:, :s], words[:, s : 2 * s], words[:, 2 * s :]
        rows = np.empty((s, count), dtype=np.int64)
        if s == 1:
            rows[0] = (draws[:, 0] % np.uint64(m)).astype(np.int64)
        else:
            # Floyd's algorithm: a uniform s-subset of [m], with a per-client bitmask of used rows.
            mask = np.zeros((count, -(-m // 64)), dtype=np.uint64)
            clients = np.arange(count)
            for step, top in enumerate(range(m - s, m)):
                t = (draws[:, step] % np.uint64(top + 1)).astype(np.int64)
                used = (mask[clients, t >> 6] >> (t & 63).astype(np.uint64)) & np.uint64(1)
                chosen = np.where(used.astype(bool), top, t)
                mask[clients, chosen >> 6] |= np.uint64(1) << (chosen & 63).astype(np.uint64)
                rows[step] = chosen
            # Fisher–Yates over the s positions: a uniformly random piece assignment.
            for i in range(s - 1, 0, -1):
                jj = (shuffles[:, i] % np.uint64(i + 1)).astype(np.int64)
                picked = rows[jj, clients]
                rows[jj, clients] = rows[i]
                rows[i] = picked
        return rows, self._signs(sign_words, count)

    def rows(self, start: int, stop: int, buffer: KeystreamBuffer | None = None) -> np.ndarray:
        """The rows of clients ``start..stop−1`` (``placement(start, stop)[0]``) without their signs:
        int64 (pieces, stop − start), a view valid until ``buffer``'s next use when one is given.

        What a row-load count needs.  For a sparse sketch with s = 1 the row is the client's first
        keystream word mod m, so this skips the signs and, with a reused ``buffer``
        (:class:`~ltm.randomness.KeystreamBuffer` of at least ``(stop − start)·3`` words, warm pages),
        runs about twice as fast as :meth:`placement` — the difference a 10⁸-client job's
        validation and release gate feel."""
        if not 0 <= start <= stop <= self.n:
            raise ValueError(f"client range [{start}, {stop}) outside [0, {self.n})")
        if self.kind == "sparse" and self.s == 1:
            width, count = self._words_per_client, stop - start
            words = (buffer.words(self._key, count * width, start * width) if buffer is not None
                     else keystream_uint64(self._key, count * width, start * width))
            return (words[0::width] % np.uint64(self.m)).view(np.int64).reshape(1, count)
        return self.placement(start, stop)[0]

    def chunks(self, start: int, stop: int, size: int = CHUNK_CLIENTS):
        """Yield ``(chunk_start, chunk_stop, rows, negative)`` over a client range, in chunks."""
        for a in range(start, stop, size):
            b = min(a + size, stop)
            yield (a, b, *self.placement(a, b))

    # ------------------------------------------------------------------ loads and application
    def row_loads(self, participants: np.ndarray | None = None) -> np.ndarray:
        """Load of each row: the number of (participant, piece) non-zeros in it, shape (m,) int64.

        ``participants`` is a bool mask of length n (None = every client).
        """
        loads = np.zeros(self.m, dtype=np.int64)
        for a, b, rows, _ in self.chunks(0, self.n):
            if participants is not None:
                rows = rows[:, participants[a:b]]
            loads += np.bincount(rows.ravel(), minlength=self.m)
        return loads

    def slots(self) -> np.ndarray:
        """Every client's accumulator slot ``2·row + negative`` for each piece: int64 (pieces, n).

        A server derives this once per job (it is public) so that applying the sketch to a batch
        is a single scatter-add per piece and chunk; memory is 8·pieces·n bytes.
        """
        out = np.empty((self.pieces, self.n), dtype=np.int64)
        for a, b, rows, negative in self.chunks(0, self.n):
            out[:, a:b] = 2 * rows + negative
        return out

    def slots_of(self, start: int, stop: int, cache: np.ndarray | None = None) -> np.ndarray:
        """The :meth:`slots` of clients ``start..stop−1``: int64 (pieces, stop − start).

        A view into ``cache`` (a precomputed :meth:`slots`) when given, else derived from the
        placement of just that range (so a pass over n clients needs no n-sized array).
        """
        if cache is not None:
            return cache[:, start:stop]
        rows, negative = self.placement(start, stop)
        return 2 * rows + negative

    def accumulator(self, width: int) -> np.ndarray:
        """A zeroed flat accumulator for :meth:`add_piece`: uint64 (2·m·width,)."""
        return np.zeros(2 * self.m * width, dtype=np.uint64)

    def add_piece(self, acc: np.ndarray, piece: int, start: int, values: np.ndarray, slots: np.ndarray,
                  include: np.ndarray | None = None) -> None:
        """Scatter-add piece ``piece`` of clients ``start..start+len(values)`` into ``acc``.

        ``values`` is uint64 (clients, width).  Positive and negative terms go to separate slots
        (2r, 2r+1) so no sign multiplication is needed; :meth:`finish` subtracts them.
        """
        count, width = values.shape
        if self.kind == "sum":  # every client in row 0 with sign +1: a plain (wrapping) column sum
            kept = values if include is None else values[include]
            acc[:width] += kept.sum(axis=0, dtype=np.uint64)
            return
        slot = slots[piece, start:start + count]
        if include is not None:
            slot, values = slot[include], values[include]
        flat = (slot[:, None] * width + np.arange(width, dtype=np.int64)).ravel()
        np.add.at(acc, flat, values.ravel())

    def finish(self, acc: np.ndarray, width: int) -> np.ndarray:
        """The (m, width) uint64 result Σ(positive) − Σ(negative) of an accumulator."""
        pairs = acc.reshape(self.m, 2, width)
        return pairs[:, 0, :] - pairs[:, 1, :]

    def apply(self, start: int, values: np.ndarray, out: np.ndarray | None = None,
              include: np.ndarray | None = None, slots: np.ndarray | None = None) -> np.ndarray:
        """Add ``Σ_l S_l · values[l]`` for clients ``start..start+len`` into ``out`` (mod 2^64).

        Args:
            start: first client index of the batch.
            values: uint64 array (pieces, batch, D): piece l's share of each client's vector.
            out: uint64 accumulator (m, D), created if None.
            include: optional bool mask (batch,) of clients to include (the participant set).
            slots: the precomputed :meth:`slots` array (derived for this range if None).
        Returns:
            ``out``.
        """
        pieces, batch, width = values.shape
        if pieces != self.pieces:
            raise ValueError(f"expected {self.pieces} pieces, got {pieces}")
        if out is None:
            out = np.zeros((self.m, width), dtype=np.uint64)
        if slots is None:
            rows, negative = self.placement(start, start + batch)
            slots, offset = 2 * rows + negative, start
        else:
            offset = 0
        acc = self.accumulator(width)
        for piece in range(pieces):
            for a in range(0, batch, CHUNK_CLIENTS):
                b = min(a + CHUNK_CLIENTS, batch)
                self.add_piece(acc, piece, start - offset + a, values[piece, a:b], slots,
                               None if include is None else include[a:b])
        out += self.finish(acc, width)
        return out

    def to_dense(self) -> np.ndarray:
        """The unscaled integer matrix Σ_l S_l as int64 (m, n).  For tests and small n only."""
        if self.m * self.n > 50_000_000:
            raise ValueError("to_dense is for small sketches only")
        rows, negative = self.placement(0, self.n)
        dense = np.zeros((self.m, self.n), dtype=np.int64)
        cols = np.broadcast_to(np.arange(self.n), rows.shape)
        np.add.at(dense, (rows, cols), np.where(negative, -1, 1))
        return dense

"""k-of-k additive secret sharing over Z_{2^64}, with seed-compressed helper shares.

A value array ``x`` (uint64) is split into k shares that sum to ``x`` mod 2^64.  Any k−1 of them
are jointly uniform, so a coalition of up to k−1 servers learns nothing.

Two share modes:

* ``"seed"`` (default; Prio3's helper-share trick): every share but one — the *primary* — is the
  AES-256-CTR expansion of a fresh 32-byte seed, and only the seed travels.  The primary share is
  ``x − Σ expand(seed_i)``.  A batch then costs 8 bytes per element to its primary server and 32
  bytes to each other server.  Security against k−1 servers is computational (the PRG).
* ``"full"``: every share is an explicit array, information-theoretically hiding.

Which server is primary is chosen per batch (``primary``); rotating it over batches balances the
servers' download and compute.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ltm.randomness import KeystreamBuffer, Randomness, keystream_uint64

SHARE_MODES = ("seed", "full")
SEED_BYTES = 32


@dataclass(frozen=True)
class Share:
    """One server's share of one batch: either an explicit uint64 array or a 32-byte seed.

    Attributes:
        server: 0-based server index.
        shape: shape of the shared array.
        data: the uint64 share array (primary share, or every share in ``"full"`` mode).
        seed: 32-byte seed whose expansion is this share (helper shares in ``"seed"`` mode).
    """

    server: int
    shape: tuple[int, ...]
    data: np.ndarray | None = None
    seed: bytes | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.seed is None):
            raise ValueError("a share holds exactly one of data or seed")
        if self.seed is not None and len(self.seed) != SEED_BYTES:
            raise ValueError(f"share seeds are {SEED_BYTES} bytes")
        if self.data is not None and tuple(self.data.shape) != tuple(self.shape):
            raise ValueError("share data does not match its declared shape")

    def values(self) -> np.ndarray:
        """The share as a uint64 array (expanding the seed if needed)."""
        if self.data is not None:
            return self.data
        assert self.seed is not None  # a share holds data or a seed (checked at construction)
        return expand_seed(self.seed, self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes this share costs on the wire (payload only)."""
        if self.seed is not None:
            return SEED_BYTES
        assert self.data is not None  # a share holds data or a seed (checked at construction)
        return int(self.data.nbytes)


def expand_seed(seed: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """The uint64 array of ``shape`` that a helper-share seed stands for (AES-256-CTR keystream)."""
    count = int(np.prod(shape, dtype=np.int64))
    return keystream_uint64(seed, count).reshape(shape)


def share(x: np.ndarray, k: int, randomness: Randomness, *, mode: str = "seed", primary: int = 0) -> list[Share]:
    """Split uint64 array ``x`` into ``k`` additive shares (one per server, in server order)."""
    if k < 2:
        raise ValueError("additive sharing needs at least 2 servers")
    if mode not in SHARE_MODES:
        raise ValueError(f"unknown share mode {mode!r}; choose one of {SHARE_MODES}")
    if not 0 <= primary < k:
        raise ValueError(f"primary server {primary} out of range for k={k}")
    x = np.asarray(x, dtype=np.uint64)
    shape = tuple(x.shape)
    rest = x.copy()
    shares: list[Share | None] = [None] * k
    stream = randomness.stream()
    for server in range(k):
        if server == primary:
            continue
        if mode == "seed":
            seed = bytes(stream.uint64(SEED_BYTES // 8).tobytes())
            mask = expand_seed(seed, shape)
            shares[server] = Share(server, shape, seed=seed)
        else:
            mask = stream.uint64(shape) if shape else stream.uint64(1).reshape(())
            shares[server] = Share(server, shape, data=mask)
        rest -= mask
    shares[primary] = Share(primary, shape, data=rest)
    return shares  # type: ignore[return-value]


def reconstruct(shares: list[Share] | list[np.ndarray]) -> np.ndarray:
    """Sum shares (``Share`` objects or uint64 arrays) mod 2^64."""
    if not shares:
        raise ValueError("nothing to reconstruct")
    arrays = [s.values() if isinstance(s, Share) else np.asarray(s, dtype=np.uint64) for s in shares]
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    return total


def share_rows(s: Share, a: int, b: int, buffer: KeystreamBuffer) -> np.ndarray:
    """Rows a..b−1 of a 2-D share (n × d): a slice of its data, or of its seed's keystream (so a
    server streams a seed share chunk by chunk without expanding it whole)."""
    d = int(s.shape[1])
    if s.seed is None:
        assert s.data is not None  # a share holds data or a seed (checked at construction)
        return s.data[a:b]
    return buffer.words(s.seed, (b - a) * d, a * d).reshape(b - a, d)

"""Randomness for shares and noise: a CSPRNG in production, an explicit seeded mode for experiments.

Every random value in LTM (share masks, helper-share seeds, client noise) comes from a
:class:`Randomness` object.  Bytes are an AES-256-CTR keystream (``cryptography``), so they are
cryptographically strong and fast (~8 GB/s with AES-NI), and identical on every host for the same
key: numpy's own generators are never used for protocol randomness.

Two modes:

* ``Randomness.system()`` — **production**.  Every object and every child draws a fresh 256-bit
  key from ``os.urandom``; nothing can be reproduced.
* ``Randomness.seeded_insecure(seed)`` — **experiments only**.  Keys are derived from the seed with
  SHAKE-256 and labelled children (``child("party-3")``), so a whole run is reproducible bit for bit
  and independent of numpy's version.  Anyone who knows the seed knows every share and every noise
  value: this mode is *not* private and every output produced with it says so.

(``Randomness.system_derived()`` is production randomness too: one fresh ``os.urandom`` key whose
children are derived from it, so a party that journals the key can redo a batch bit for bit after
a crash; see ``party/journal.py``.)

Samplers are vectorised: uniforms from 53-bit integers, normals by Box–Muller, Gamma by
Marsaglia–Tsang with vectorised rejection rounds (shape < 1 via the ``U^{1/a}`` boost, done in log
space so tiny shapes do not underflow the arithmetic).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

SEEDED_MODE_LABEL = "seeded (reproducible; NOT private: do not use in production)"
SYSTEM_MODE_LABEL = "csprng (os.urandom + AES-256-CTR)"
#: Mode of :meth:`Randomness.system_derived`: a fresh OS key whose children are KDF-derived.
DERIVED_MODE = "system-derived"

_TWO_PI = 2.0 * np.pi
_U52 = float(2.0**-52)


def xof(*parts: bytes, length: int = 32) -> bytes:
    """SHAKE-256 of length-prefixed parts: a domain-separated key-derivation function."""
    h = hashlib.shake_256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest(length)


def aes_ctr_keystream(key: bytes, nbytes: int, start_block: int = 0) -> memoryview:
    """``nbytes`` of AES-256-CTR keystream for a 32-byte key, starting at 16-byte block ``start_block``.

    Seekable: the keystream for bytes [16·b, 16·b + n) can be produced without the preceding bytes,
    which is how the public sketch gives random access to any client's column.
    """
    if len(key) != 32:
        raise ValueError("AES-256 key must be 32 bytes")
    enc = Cipher(algorithms.AES(key), modes.CTR(start_block.to_bytes(16, "big"))).encryptor()
    # update_into wants room for one extra block; encrypting zeros yields the bare keystream.
    out = bytearray(nbytes + 15)
    if nbytes:
        enc.update_into(bytes(nbytes), out)
    return memoryview(out)[:nbytes]


def keystream_uint64(key: bytes, count: int, start_word: int = 0) -> np.ndarray:
    """``count`` little-endian uint64 words of the AES-CTR keystream of ``key`` from word ``start_word``.

    Words are 8 bytes, blocks 16, so an odd start word skips half a block.
    """
    first_block, skip = divmod(start_word, 2)
    raw = aes_ctr_keystream(key, 8 * (count + skip), first_block)
    return np.frombuffer(raw, dtype="<u8", count=count, offset=8 * skip).astype(np.uint64, copy=False)


class KeystreamBuffer:
    """Reusable buffers for expanding many keystream slices of at most ``max_words`` words.

    Expanding helper-share seeds is the server's main cost in seed mode; writing the keystream
    into the same warm buffers (instead of fresh allocations, which page-fault on first touch)
    runs AES-CTR at its full speed.
    """

    def __init__(self, max_words: int) -> None:
        self._zeros = np.zeros(8 * (max_words + 1), dtype=np.uint8)
        self._out = np.empty(8 * (max_words + 1) + 16, dtype=np.uint8)
        self.max_words = max_words

    def words(self, key: bytes, count: int, start_word: int = 0) -> np.ndarray:
        """Like :func:`keystream_uint64`, as a view into this buffer (valid until the next call)."""
        if count > self.max_words:
            raise ValueError(f"slice of {count} words exceeds the buffer's {self.max_words}")
        if len(key) != 32:
            raise ValueError("AES-256 key must be 32 bytes")
        first_block, skip = divmod(start_word, 2)
        nbytes = 8 * (count + skip)
        enc = Cipher(algorithms.AES(key), modes.CTR(first_block.to_bytes(16, "big"))).encryptor()
        enc.update_into(self._zeros.data[:nbytes], self._out.data[:nbytes + 15])  # the arrays' own memoryviews
        return self._out[8 * skip:8 * skip + 8 * count].view("<u8").view(np.uint64)


@dataclass(frozen=True)
class Randomness:
    """A source of cryptographically strong random values (see module docstring).

    Attributes:
        mode: ``"system"`` or ``"seeded"``.
        key: the 32-byte key of this source (for ``system`` a fresh ``os.urandom`` key).
    """

    mode: str
    key: bytes

    @staticmethod
    def system() -> "Randomness":
        """Production randomness: a fresh key from the operating system's CSPRNG."""
        return Randomness("system", os.urandom(32))

    @staticmethod
    def system_derived() -> "Randomness":
        """Production randomness whose whole subtree is determined by one fresh OS key.

        Like :meth:`system` (a fresh 256-bit ``os.urandom`` key that nothing public determines),
        but its children are derived from that key by the KDF instead of drawing fresh OS entropy,
        so the 32-byte key alone re-creates every value drawn from this source and its children.
        A party journals such a key before it uploads a batch, so that after a crash it re-derives
        bit-identical shares instead of re-randomizing a batch some servers already hold
        (``party/journal.py``).  As private as :meth:`system` while the key stays secret.
        """
        return Randomness(DERIVED_MODE, os.urandom(32))

    @staticmethod
    def seeded_insecure(seed: int | bytes | str) -> "Randomness":
        """Reproducible randomness for experiments: NOT private (anyone with the seed sees everything)."""
        if isinstance(seed, int):
            if seed < 0:
                raise ValueError("seed must be non-negative")
            seed_bytes = seed.to_bytes((seed.bit_length() + 8) // 8, "big")
        elif isinstance(seed, str):
            seed_bytes = seed.encode()
        else:
            seed_bytes = bytes(seed)
        return Randomness("seeded", xof(b"ltm/randomness/v1", seed_bytes))

    @property
    def reproducible(self) -> bool:
        return self.mode == "seeded"

    @property
    def label(self) -> str:
        """Human-readable mode, printed in every output produced with this randomness."""
        return SEEDED_MODE_LABEL if self.reproducible else SYSTEM_MODE_LABEL

    def child(self, *labels: str | int) -> "Randomness":
        """An independent source for a sub-task (``child("party", 3, "batch", 0)``).

        Seeded: derived deterministically from this key and the labels.  System: fresh OS entropy
        (labels are ignored, so children are independent of each other and of the parent).
        System-derived: derived from this (secret, OS-drawn) key and the labels, under a domain tag
        of its own, so the same key re-creates the same children.
        """
        if self.mode == "system":
            return Randomness.system()
        parts = [str(x).encode() for x in labels]
        if self.mode == DERIVED_MODE:
            return Randomness(DERIVED_MODE, xof(b"ltm/system-derived-child", self.key, *parts))
        return Randomness("seeded", xof(b"ltm/child", self.key, *parts))

    def bytes(self, n: int) -> bytes:
        """``n`` random bytes (a fresh stream: calling twice on the same object repeats the stream)."""
        return bytes(aes_ctr_keystream(self.key, n))

    def stream(self) -> "RandomStream":
        """A stateful stream over this source's keystream, for drawing many arrays in sequence."""
        return RandomStream(self.key)


class RandomStream:
    """Sequential draws from one AES-CTR keystream (deterministic for a given key)."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._word = 0  # next unused uint64 word of the keystream

    def uint64(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform uint64 array of the given shape."""
        count = int(np.prod(shape, dtype=np.int64))
        words = keystream_uint64(self._key, count, self._word)
        self._word += count
        return words.reshape(shape)

    def uniform(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """Uniform float64 on the open interval (0, 1): (k + ½)·2^-52 for a uniform 52-bit k.

        52 bits, not 53, so that every value — the largest is 1 − 2^-53 — is exactly
        representable and 0 and 1 can never occur (log(u) and log(1 − u) stay finite).
        """
        bits = self.uint64(shape) >> np.uint64(12)
        return (bits.astype(np.float64) + 0.5) * _U52

    def normal(self, shape: int | tuple[int, ...], scale: float = 1.0) -> np.ndarray:
        """i.i.d. N(0, scale²) by the Box–Muller transform."""
        count = int(np.prod(shape, dtype=np.int64))
        half = (count + 1) // 2
        u = self.uniform(2 * half)
        radius = np.sqrt(-2.0 * np.log(u[:half]))
        angle = _TWO_PI * u[half:]
        z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:count]
        if scale != 1.0:
            z *= scale
        return z.reshape(shape)

    def gamma(self, shape_param: float, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
        """i.i.d. Γ(shape_param, scale) (shape–scale: mean = shape·scale).

        Marsaglia & Tsang (2000) for shape ≥ 1; for shape a < 1, Γ(a) = Γ(a+1)·U^{1/a} computed as
        exp(log Γ(a+1) + log(U)/a), which is exactly 0.0 only when the true value is below the
        smallest float64 (a probability that vanishes as a grows; for tiny a it is the right answer).
        """
        if shape_param <= 0 or scale <= 0:
            raise ValueError("gamma shape and scale must be positive")
        count = int(np.prod(size, dtype=np.int64))
        a = shape_param if shape_param >= 1.0 else shape_param + 1.0
        d = a - 1.0 / 3.0
        c = 1.0 / np.sqrt(9.0 * d)
        out = np.empty(count, dtype=np.float64)
        pending = np.arange(count)
        while pending.size:
            k = pending.size
            # Draw a little more than needed: acceptance is ≥ 95% for a ≥ 1.
            x = self.normal(k)
            v = (1.0 + c * x) ** 3
            log_u = np.log(self.uniform(k))
            ok = v > 0
            with np.errstate(invalid="ignore", divide="ignore"):
                accept = ok & (log_u < 0.5 * x * x + d - d * v + d * np.log(np.where(ok, v, 1.0)))
            out[pending[accept]] = d * v[accept]
            pending = pending[~accept]
        if shape_param < 1.0:
            log_boost = np.log(self.uniform(count)) / shape_param
            out = np.exp(np.log(out) + log_boost)
        out *= scale
        return out.reshape(size)

"""Prime fields for the proofs, vectorised over numpy uint64 arrays.

:data:`FIELD64` is the CFRG VDAF draft's Field64, p = 2^64 − 2^32 + 1 ("Goldilocks"): products are
formed from 32-bit limbs in uint64 and reduced with 2^64 ≡ 2^32 − 1 and 2^96 ≡ −1 (mod p), so a
multiplication is about twenty vectorised uint64 operations and no Python loop.  Its multiplicative
group has order 2^32 · (2^32 − 1), so it has roots of unity of every power-of-two order ≤ 2^32,
which the NTT needs.  :func:`small_field` builds a field with p < 2^32 (products fit uint64 as
they are): the soundness and zero-knowledge tests use one, where a cheating prover's success rate
is large enough to be measured.

Elements are canonical uint64 values in [0, p); :meth:`Field.decode` refuses anything else.
"""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field

import numpy as np
import numpy.typing as npt

from ltm.errors import LtmError

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_GOLDILOCKS = (1 << 64) - (1 << 32) + 1


class FieldError(LtmError, ValueError):
    """Bad field input: a non-canonical element, a wrong length or an unsupported parameter."""

    code = "INVALID_ARGUMENT"
    exit_code = 2
    prefix = "validity proof: "


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if a % n == 0:
            continue
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _generator(p: int) -> int:
    """The smallest generator of the multiplicative group of Z_p (p prime)."""
    order, factors, m, f = p - 1, [], p - 1, 2
    while f * f <= m:
        if m % f == 0:
            factors.append(f)
            while m % f == 0:
                m //= f
        f += 1
    if m > 1:
        factors.append(m)
    g = 2
    while any(pow(g, order // q, p) == 1 for q in factors):
        g += 1
    return g


@dataclass(frozen=True)
class Field:
    """A prime field Z_p with vectorised arithmetic on uint64 arrays (elements canonical in [0, p)).

    Attributes:
        p: the prime modulus (p < 2^32, or p = 2^64 − 2^32 + 1).
        generator: a generator of the multiplicative group.
        name: a short name, bound into every hash that derives randomness for this field.
    """

    p: int
    generator: int
    name: str
    _pu: np.uint64 = dc_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (self.p == _GOLDILOCKS or 2 < self.p < (1 << 32)) or not _is_prime(self.p):
            raise FieldError(f"unsupported field modulus {self.p}: a prime below 2^32 or 2^64 - 2^32 + 1")
        object.__setattr__(self, "_pu", np.uint64(self.p))

    @property
    def wide(self) -> bool:
        """True for Field64 (products need the limb reduction)."""
        return self.p == _GOLDILOCKS

    @property
    def encoded_size(self) -> int:
        """Bytes per element on the wire (little-endian)."""
        return 8

    # -- arithmetic (inputs canonical; outputs canonical) -------------------------------------
    def add(self, a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        with np.errstate(over="ignore"):
            s = a + b
            if self.wide:
                # a + b < 2p < 2^65: a wrap dropped 2^64 ≡ 2^32 − 1 (and then s + 2^32 − 1 < p).
                s += (s < a) * np.uint64(0xFFFFFFFF)
            s -= (s >= self._pu) * self._pu
        return s

    def sub(self, a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        with np.errstate(over="ignore"):
            d = a - b
            d += (a < b) * self._pu  # the uint64 wrap plus p is a − b + p
        return d  # uint64 wrap: d + p ≡ a − b + p (mod 2^64)

    def neg(self, a: npt.ArrayLike) -> np.ndarray:
        return self.sub(np.zeros_like(np.asarray(a, np.uint64)), a)

    def mul(self, a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
        a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
        if not self.wide:
            return (a * b) % self._pu  # p < 2^32: the product fits uint64
        shape = np.broadcast_shapes(a.shape, b.shape)
        if b.shape == shape and a.shape != shape:
            a, b = b, a  # keep the smaller operand (a twiddle row) un-broadcast: its limbs stay small
        a = np.broadcast_to(a, shape)
        # The 128-bit product from 32-bit limbs, in place (this is the proofs' hot loop):
        # a·b = a1 b1·2^64 + (a0 b1 + a1 b0)·2^32 + a0 b0.
        a0, a1, b0, b1 = a & _M32, a >> _S32, b & _M32, b >> _S32
        with np.errstate(over="ignore"):
            lo = a0 * b0
            hi = a1 * b1
            a0 *= b1
            a1 *= b0
            a0 += a1  # the middle term, mod 2^64
            hi += (a0 < a1).astype(np.uint64) << _S32  # its carry
            hi += a0 >> _S32
            a0 <<= _S32
            lo += a0
            hi += lo < a0  # the low word's carry
        return self._reduce_in_place(lo, hi)

    def reduce128(self, lo: npt.ArrayLike, hi: npt.ArrayLike) -> np.ndarray:
        """(hi · 2^64 + lo) mod p for uint64 arrays ``lo``, ``hi`` (any values)."""
        lo, hi = np.asarray(lo, np.uint64), np.asarray(hi, np.uint64)
        if not self.wide:
            two64 = np.uint64((1 << 64) % self.p)
            return self.add(self.mul(hi % self._pu, two64), lo % self._pu)
        lo, hi = np.broadcast_arrays(lo, hi)
        return self._reduce_in_place(lo.copy(), hi.copy())

    def _reduce_in_place(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Field64: (hi·2^64 + lo) mod p with 2^96 ≡ −1 and 2^64 ≡ 2^32 − 1, overwriting ``lo``, ``hi``."""
        eps = np.uint64(0xFFFFFFFF)
        hi_hi = hi >> _S32
        with np.errstate(over="ignore"):
            hi &= _M32
            hi *= eps  # hi_lo·(2^32 − 1) < 2^64
            borrow = lo < hi_hi
            lo -= hi_hi  # 2^96 ≡ −1
            lo -= borrow * eps  # a borrow wrapped by 2^64 ≡ 2^32 − 1: take it back
            lo += hi
            lo += (lo < hi) * eps  # a carry dropped 2^64 ≡ 2^32 − 1: add it back
            lo -= (lo >= self._pu) * self._pu
        return lo

    def inv(self, a: int) -> int:
        if int(a) % self.p == 0:
            raise FieldError("0 has no inverse")
        return pow(int(a), self.p - 2, self.p)

    def root_of_unity(self, order: int) -> int:
        """A primitive ``order``-th root of unity (``order`` a power of two dividing p − 1)."""
        if order < 1 or order & (order - 1) or (self.p - 1) % order:
            raise FieldError(f"the field mod {self.p} has no root of unity of order {order}")
        return pow(self.generator, (self.p - 1) // order, self.p)

    def matvec(self, a: npt.ArrayLike, u: npt.ArrayLike) -> np.ndarray:
        """Σ_j a[..., j] · u[j] in the field: a (..., N), u (N,) → (...,)."""
        prod = self.mul(a, np.asarray(u, np.uint64))
        # Sum the 32-bit halves separately (exact in uint64 for N < 2^32), then reduce.
        lo = (prod & _M32).sum(axis=-1, dtype=np.uint64)
        hi = (prod >> _S32).sum(axis=-1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            low = lo + (hi << _S32)
            carry = (low < lo).astype(np.uint64)
        return self.reduce128(low, (hi >> _S32) + carry)

    def matmul(self, a: np.ndarray, m: np.ndarray, chunk: int = 2048) -> np.ndarray:
        """a (C, N) @ m (N, J) in the field → (C, J).

        Field64: both sides split into four 16-bit limbs held in float64, so one BLAS product
        (C, 4N) @ (4N, 7J) gives, for each limb weight 2^(16d), d = 0..6, the exact integer
        Σ_{l+k=d} Σ_j a_l[j]·m_k[j] (each term < 2^32, at most 4N of them: exact below 2^53 for
        N < 2^19); the seven partial sums are then reduced mod p.  ``chunk`` rows at a time.
        """
        m = np.asarray(m, np.uint64)
        a = np.asarray(a, np.uint64)
        if not self.wide:
            return np.stack([self.matvec(a, m[:, j]) for j in range(m.shape[1])], axis=-1)
        n, j = m.shape
        if n >= 1 << 19:
            raise FieldError(f"matmul inner dimension {n} too large for exact float64 limbs")
        limbs = [((m >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.float64) for k in range(4)]
        wide = np.zeros((4 * n, 7 * j), dtype=np.float64)
        for l in range(4):
            for k in range(4):
                wide[l * n:(l + 1) * n, (l + k) * j:(l + k + 1) * j] = limbs[k]
        weights = [np.uint64(pow(2, 16 * d, self.p)) for d in range(7)]
        out = np.empty((a.shape[0], j), dtype=np.uint64)
        for start in range(0, a.shape[0], chunk):
            rows = a[start:start + chunk]
            split = np.empty((rows.shape[0], 4, n), dtype=np.float64)
            for l in range(4):
                split[:, l, :] = (rows >> np.uint64(16 * l)) & np.uint64(0xFFFF)
            sums = (split.reshape(rows.shape[0], 4 * n) @ wide).astype(np.uint64).reshape(-1, 7, j)
            acc = np.zeros((rows.shape[0], j), dtype=np.uint64)
            for d in range(7):  # each partial sum < 2^53 < p: canonical already
                acc = self.add(acc, self.mul(sums[:, d, :], weights[d]))
            out[start:start + chunk] = acc
        return out

    def matmul_bits(self, bits: np.ndarray, m: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """bits (C, N) with every entry 0 or 1 @ m (N, J) in the field → (C, J), N < 2^20: one BLAS
        product (C, N) @ (N, 4J) against m's four 16-bit limbs (each sum s_k < N·2^16, exact in
        float64), then Σ_k s_k·2^(16k) < 2^84 assembled in two words and reduced once."""
        bits, m = np.asarray(bits, np.uint64), np.asarray(m, np.uint64)
        if bits.size and bits.max() > 1:
            raise FieldError("matmul_bits needs entries 0 or 1")
        if m.shape[0] >= 1 << 20:
            raise FieldError(f"matmul_bits inner dimension {m.shape[0]} too large")
        j = m.shape[1]
        limbs = np.concatenate([((m >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.float64)
                                for k in range(4)], axis=1)
        out = np.empty((bits.shape[0], j), dtype=np.uint64)
        s16 = np.uint64(16)
        for start in range(0, bits.shape[0], chunk):
            s = (bits[start:start + chunk].astype(np.float64) @ limbs).astype(np.uint64)
            low = s[:, :j] + (s[:, j:2 * j] << s16)  # < 2^53
            high = s[:, 2 * j:3 * j] + (s[:, 3 * j:] << s16)  # < 2^53, weighs 2^32
            with np.errstate(over="ignore"):
                lo = low + (high << _S32)
            hi = (high >> _S32) + (lo < low)
            out[start:start + chunk] = self.reduce128(lo, hi)
        return out

    # -- bytes ---------------------------------------------------------------------------------
    def from_uniform_words(self, words: npt.ArrayLike) -> np.ndarray:
        """Field elements from pairs of uniform uint64 words: (..., 2·N) → (..., N), (hi·2^64 + lo) mod p
        (statistical distance from uniform ≤ p / 2^128 per element)."""
        words = np.asarray(words, np.uint64)
        return self.reduce128(words[..., 0::2], words[..., 1::2])

    def encode(self, a: np.ndarray) -> bytes:
        """Little-endian 8-byte encoding of canonical elements."""
        return np.ascontiguousarray(self.check(a)).astype("<u8").tobytes()

    def decode(self, data: bytes, count: int | None = None) -> np.ndarray:
        """Elements from :meth:`encode`'s bytes; refuses a wrong length or a non-canonical element."""
        if len(data) % 8 or (count is not None and len(data) != 8 * count):
            want = f"{8 * count} bytes ({count} elements)" if count is not None else "a multiple of 8 bytes"
            raise FieldError(f"field vector of {len(data)} bytes; expected {want}")
        out = np.frombuffer(data, dtype="<u8").astype(np.uint64)
        self.check(out)
        return out

    def check(self, a: np.ndarray, what: str = "field vector") -> np.ndarray:
        """``a`` as uint64, refusing a non-canonical element (≥ p) or a non-integer dtype."""
        arr = np.asarray(a)
        if arr.dtype != np.uint64:
            raise FieldError(f"{what} must be uint64 field elements, got dtype {arr.dtype}")
        bad = arr >= self._pu
        if bad.any():
            first = int(np.flatnonzero(bad.ravel())[0])
            raise FieldError(f"{what}: element {first} is not canonical (≥ p = {self.p})")
        return arr

    def from_int(self, values: np.ndarray) -> np.ndarray:
        """Signed integer values (int64) as field elements."""
        v = np.asarray(values)
        if not np.issubdtype(v.dtype, np.signedinteger):
            raise FieldError(f"from_int needs signed integers, got dtype {v.dtype}")
        u = np.abs(v.astype(np.int64)).astype(np.uint64)
        return np.where(v < 0, self.neg(u % self._pu), u % self._pu)

    def to_int(self, a: np.ndarray) -> np.ndarray:
        """Canonical elements as signed int64 in (−p/2, p/2) (for decoding sums of small values)."""
        a = self.check(a)
        half = self._pu // np.uint64(2)
        return np.where(a > half, -(self._pu - a).astype(np.int64), a.astype(np.int64))


#: The CFRG VDAF draft's Field64 (generator 7, as in the draft).
FIELD64 = Field(_GOLDILOCKS, 7, "Field64")


def small_field(p: int) -> Field:
    """A field with prime p < 2^32, for tests where a cheating prover's success must be measurable."""
    if not (2 < p < (1 << 32)) or not _is_prime(p):
        raise FieldError(f"small_field needs a prime 2 < p < 2^32, got {p}")
    return Field(p, _generator(p), f"F{p}")

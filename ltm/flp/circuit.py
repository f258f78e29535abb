"""The validity circuit "every entry in range and squared L2 norm ≤ B", and its bit encoding.

A client's rounded vector x̂ (int64 grid units, shape (n,)) is valid when every entry lies in
[−2^(b−1), 2^(b−1)) and ‖x̂‖² ≤ B.  The encoded measurement is bits (length L = n·b + s):

* for each entry a, the b bits of x̂_a + 2^(b−1) (little-endian), then
* the s = bit_length(B) bits of the slack B − ‖x̂‖² (≥ 0 for a valid vector).

The circuit calls one gadget, Mul (arity 2, degree 2), M = L + n times: m_i·(m_i − 1) for every
bit (each must be 0) and x_a·x_a for every entry, and requires Σ_a x_a² + slack − B = 0.  Entries
and slack are affine in the bits, so every server computes its share of x̂ (and of the wires) from
its share of the bits.  Because n·4^(b−1) + 2^s < p (checked), the last equation holds in the
field only if it holds over the integers, i.e. ‖x̂‖² ≤ B: the range bits rule out a wrap mod p.

Constants enter each of K shares as constant/K (as in the VDAF draft), so the servers' shares of
the circuit need no leader role.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ltm.flp.field import Field, FieldError


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass(frozen=True)
class BoundedL2:
    """The circuit for n entries of ``bits`` bits each and a squared-norm bound ``bound``.

    Attributes:
        field: the proof field.
        n: entries per client vector.
        bits: entry range [−2^(bits−1), 2^(bits−1)).
        bound: B, the largest allowed ‖x̂‖² (grid units squared).
        reps: independent query points R (soundness error per client ≈ (2P/|F|)^R; see the docs).
    """

    field: Field
    n: int
    bits: int
    bound: int
    reps: int = 2

    def __post_init__(self) -> None:
        if self.n < 1 or self.bits < 1 or self.bound < 0 or self.reps < 1:
            raise FieldError(f"bad circuit parameters n={self.n} bits={self.bits} bound={self.bound} "
                             f"reps={self.reps}: need n, bits, reps ≥ 1 and bound ≥ 0")
        if self.n * 4 ** (self.bits - 1) + 2 ** self.slack_bits >= self.field.p:
            raise FieldError(f"n={self.n} entries of {self.bits} bits and bound {self.bound} can wrap mod "
                             f"p={self.field.p}: the norm check would be unsound; use fewer bits or a larger field")
        if (self.field.p - 1) % (2 * self.wire_len):
            raise FieldError(f"the field mod {self.field.p} has no root of unity of order {2 * self.wire_len}")

    @classmethod
    def for_grid(cls, field: Field, width: int, clip_bound: float, frac_bits: int, reps: int = 2) -> BoundedL2:
        """The circuit for a client's vector clipped to ℓ2 norm ``clip_bound`` and rounded to the grid
        2^-f (``ltm.dp.grid.round_to_grid``), W = ``width`` entries.

        Rounding moves each entry by ≤ 1/2 grid unit, so ‖x̂‖ ≤ C·2^f + √W/2; B is the ceiling of the
        square of that, computed in exact rationals with √W rounded up and C·2^f widened by 2^-40
        (a float clip may overshoot C by a few ulps).  Entries get bits for |x̂_a| ≤ √B.
        """
        if width < 1 or not clip_bound > 0 or frac_bits < 0:
            raise FieldError(f"bad grid parameters width={width} clip_bound={clip_bound} frac_bits={frac_bits}")
        root_w = Fraction(math.isqrt(width) + (0 if math.isqrt(width) ** 2 == width else 1))
        radius = Fraction(clip_bound) * 2**frac_bits * (1 + Fraction(1, 2**40)) + root_w / 2
        bound = math.ceil(radius * radius)
        return cls(field, width, math.isqrt(bound).bit_length() + 1, bound, reps)

    def soundness_error(self) -> float:
        """An upper bound on the probability that one invalid input is accepted (any proof).

        If the gadget polynomial G equals W0·W1, the circuit's outputs are the true ones and each of
        the R independent random combinations q_r misses a nonzero output with probability 1/p.
        Otherwise G − W0·W1 ≠ 0 has degree ≤ 2P − 1 (G is interpolated from 2P values) and each
        query point, uniform over the p − P − r admissible points, is one of its roots with
        probability ≤ (2P − 1)/(p − P − R).  Each derived element is within p/2^128 of uniform.
        """
        p, P, R = self.field.p, self.wire_len, self.reps
        bias = p / 2.0**128
        return ((2 * P - 1) / (p - P - R) + bias) ** R + (1.0 / p + bias) ** R

    @property
    def slack_bits(self) -> int:
        return max(1, int(self.bound).bit_length())

    @property
    def meas_len(self) -> int:
        """L: bits per client."""
        return self.n * self.bits + self.slack_bits

    @property
    def calls(self) -> int:
        """M: gadget calls (one per bit, one per entry)."""
        return self.meas_len + self.n

    @property
    def wire_len(self) -> int:
        """P: points of each wire polynomial (R seeds, M calls, zero padding), a power of two."""
        return next_power_of_2(self.calls + self.reps)

    @property
    def gadget_len(self) -> int:
        """Values of the gadget polynomial (degree 2(P − 1)) sent in the proof: at the 2P-th roots of unity."""
        return 2 * self.wire_len

    @property
    def proof_len(self) -> int:
        """Π: 2R wire seeds, then the gadget polynomial's values at the 2P-th roots of unity."""
        return 2 * self.reps + self.gadget_len

    @property
    def verifier_len(self) -> int:
        """Per repetition: the reduced output, the two wires at t, the gadget polynomial at t."""
        return 4 * self.reps

    @property
    def offset(self) -> int:
        return 1 << (self.bits - 1)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Bits (C, L) uint64 of valid vectors ``x`` (C, n) int64; refuses an invalid vector."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.n or not np.issubdtype(x.dtype, np.integer):
            raise FieldError(f"expected an integer array of shape (clients, {self.n}), got {x.dtype} {x.shape}")
        x = x.astype(np.int64)
        if ((x < -self.offset) | (x >= self.offset)).any():
            raise FieldError(f"an entry is outside [-2^{self.bits - 1}, 2^{self.bits - 1})")
        norm = (np.abs(x).astype(np.uint64) ** np.uint64(2)).sum(axis=1, dtype=np.uint64)
        if (norm > np.uint64(self.bound)).any():
            raise FieldError(f"a vector's squared norm exceeds the bound {self.bound}")
        return self.encode_unchecked((x + self.offset).astype(np.uint64), np.uint64(self.bound) - norm)

    def encode_unchecked(self, shifted: np.ndarray, slack: np.ndarray) -> np.ndarray:
        """Bits of ``shifted`` (C, n) and ``slack`` (C,) as uint64 (C, L); no validity check."""
        j = np.arange(self.bits, dtype=np.uint64)
        ent = (np.asarray(shifted, np.uint64)[:, :, None] >> j) & np.uint64(1)
        js = np.arange(self.slack_bits, dtype=np.uint64)
        sl = (np.asarray(slack, np.uint64)[:, None] >> js) & np.uint64(1)
        return np.concatenate([ent.reshape(len(ent), -1), sl], axis=1)

    def entry_weights(self) -> np.ndarray:
        """2^j for the b bits of an entry (uint64 (bits,))."""
        return np.array([pow(2, j, self.field.p) for j in range(self.bits)], dtype=np.uint64)

    def truncate(self, meas: np.ndarray, num_shares: int) -> np.ndarray:
        """A server's share of x̂ (C, n) from its share of the bits (C, L): Σ_j 2^j m_{a,j} − 2^(b−1)/K."""
        f = self.field
        ent = np.asarray(meas, np.uint64)[:, : self.n * self.bits].reshape(len(meas), self.n, self.bits)
        const = f.mul(np.uint64(self.offset % f.p), np.uint64(f.inv(num_shares)))
        return f.sub(f.matvec(ent, self.entry_weights()), const)

    def wires(self, meas: np.ndarray, num_shares: int) -> tuple[np.ndarray, np.ndarray]:
        """The gadget's two input wires at each call, (C, M) each: (m_i, m_i − 1/K) for each bit, then
        (x_a, x_a) for each entry."""
        f = self.field
        x = self.truncate(meas, num_shares)
        inv_k = np.uint64(f.inv(num_shares))
        return (np.concatenate([meas, x], axis=1), np.concatenate([f.sub(meas, inv_k), x], axis=1))

    def decode_sum(self, x_sum: np.ndarray) -> np.ndarray:
        """Summed x̂ shares (field) as signed int64."""
        return self.field.to_int(x_sum)

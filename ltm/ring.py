"""Fixed-point numbers in the ring Z_{2^64}, stored as numpy ``uint64``.

Encoding rounds ``x·2^f`` to the nearest integer and reduces it mod 2^64 (two's complement), so
wrap-around arithmetic in ``uint64`` *is* the ring arithmetic.  Decoding is the centred lift:
reinterpret as ``int64`` (values in [−2^63, 2^63)) and divide by 2^f.  A sum of encoded values
decodes to the sum of the values as long as the true sum stays inside the centred range; the job
spec's headroom check (``ltm.jobspec``) guarantees that, with a margin, before any data is sent.
"""
from __future__ import annotations

import numpy as np

RING_BITS = 64
#: Largest magnitude the headroom check allows for any reconstructed entry (times 2^f).
HEADROOM_LIMIT = 2.0**62


def encode(values: np.ndarray, frac_bits: int) -> np.ndarray:
    """Fixed-point encode float values (any shape) to uint64 ring elements.

    Raises ValueError for non-finite values or values whose encoding would not fit in int64.
    """
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as ValueError
        scaled = np.rint(x * float(2**frac_bits))
    if not np.all(np.isfinite(scaled)):
        raise ValueError("cannot encode NaN or infinite values")
    if scaled.size and np.max(np.abs(scaled)) >= 2.0**63:
        raise ValueError(f"value too large for fixed point with {frac_bits} fraction bits")
    return scaled.astype(np.int64).view(np.uint64)


def decode(ring: np.ndarray, frac_bits: int) -> np.ndarray:
    """Centred decode of uint64 ring elements to float64 (same shape)."""
    return np.asarray(ring, dtype=np.uint64).view(np.int64).astype(np.float64) / float(2**frac_bits)


def negate(ring: np.ndarray) -> np.ndarray:
    """Additive inverse in Z_{2^64}."""
    return np.uint64(0) - np.asarray(ring, dtype=np.uint64)

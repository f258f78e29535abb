"""Number-theoretic transforms along the last axis, vectorised over every leading axis (clients).

``ntt(field, a)`` evaluates the polynomials whose coefficients are ``a[..., :]`` at the N-th roots
of unity ω^0, …, ω^{N−1} (ω = ``field.root_of_unity(N)``); ``intt`` inverts it.  Radix-2
decimation in time: one bit-reversal gather, then log2 N butterfly stages, each one vectorised
field multiplication over the whole (clients × N/2) array.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ltm.flp.field import Field, FieldError


@lru_cache(maxsize=64)
def _bit_reverse(n: int) -> np.ndarray:
    bits = n.bit_length() - 1
    idx = np.arange(n)
    rev = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    return rev


@lru_cache(maxsize=64)
def _twiddles(field: Field, n: int, inverse: bool) -> tuple[np.ndarray, ...]:
    """Per stage of half-size h: the powers w_{2h}^j, j < h, of a primitive 2h-th root of unity."""
    omega = field.root_of_unity(n)
    if inverse:
        omega = field.inv(omega)
    out, h = [], 1
    while h < n:
        w = pow(omega, n // (2 * h), field.p)
        out.append(np.array([pow(w, j, field.p) for j in range(h)], dtype=np.uint64))
        h *= 2
    return tuple(out)


def _transform(field: Field, a: np.ndarray, inverse: bool) -> np.ndarray:
    a = np.asarray(a, np.uint64)
    n = a.shape[-1]
    if n < 1 or n & (n - 1):
        raise FieldError(f"NTT length must be a power of two, got {n}")
    lead = a.shape[:-1]
    x = a[..., _bit_reverse(n)]
    h = 1
    for w in _twiddles(field, n, inverse):
        x = x.reshape(*lead, n // (2 * h), 2, h)
        even, odd = x[..., 0, :], (x[..., 1, :] if h == 1 else field.mul(x[..., 1, :], w))
        x = np.concatenate([field.add(even, odd), field.sub(even, odd)], axis=-1)
        h *= 2
    return x.reshape(*lead, n)


def ntt(field: Field, coeffs: np.ndarray) -> np.ndarray:
    """Evaluations (..., N) at ω^0..ω^{N−1} of polynomials with coefficients ``coeffs`` (..., N)."""
    return _transform(field, coeffs, inverse=False)


def intt(field: Field, values: np.ndarray) -> np.ndarray:
    """Coefficients (..., N) of the polynomials of degree < N with ``values`` (..., N) at the N-th roots."""
    n = np.asarray(values).shape[-1]
    return field.mul(_transform(field, values, inverse=True), np.uint64(field.inv(n)))

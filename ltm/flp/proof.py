"""The fully linear proof (Boneh et al. 2019, Thm 4.3, as in the CFRG VDAF draft): prove, query, decide.

Vectorised over C clients.  For the circuit of :mod:`ltm.flp.circuit` (one Mul gadget called M
times), the prover builds two wire polynomials of degree < P from their values at the P-th roots
of unity α^j: R random seeds at j < R, the gadget's inputs of call i at j = R + i, zeros after;
the gadget polynomial is their product (degree 2(P − 1)).  The proof is the 2R seeds and the
gadget polynomial's values at the 2P-th roots of unity ω^i (even i: the P-th roots, where they are
products of wire values; odd i: one NTT pair per wire).  A verifier reads the gadget's outputs at
the calls directly off the proof and interpolates G(t) from the 2P values.

The verifier is *linear* in (input share, proof share): for each of R query points t_r (not a
P-th root of unity) and a random linear combination q_r of the circuit's L + 1 outputs it computes

* v_r = Σ_i q_{r,i}·G(α^{R+i}) + q_{r,L}·(Σ_a G(α^{R+L+a}) + slack − B)   (0 for a valid input),
* W0(t_r), W1(t_r), G(t_r)   (the wire polynomials and the gadget polynomial at t_r),

so each server applies one precomputed matrix (:class:`QueryPlan`) to its shares.  The analyst sums
the K verifier shares and accepts iff every v_r = 0 and W0(t_r)·W1(t_r) = G(t_r).

No joint randomness: the query randomness (t, q) is derived from a seed the servers draw after the
upload window closes (:func:`query_randomness`), so the client commits to its proof before any of
it exists, and the circuit itself needs no randomness (the outputs are combined by q, which is
query randomness).  Soundness is therefore not subject to offline grinding (Fiat–Shamir).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ltm.flp.circuit import BoundedL2
from ltm.flp.field import Field, FieldError
from ltm.flp.ntt import intt, ntt
from ltm.randomness import keystream_uint64, xof

_QUERY_TAG = b"ltm/flp/query/v1"


def prove(circuit: BoundedL2, meas: np.ndarray, prove_rand: np.ndarray) -> np.ndarray:
    """The proofs (C, Π) of C clients' bits ``meas`` (C, L), with ``prove_rand`` (C, 2R) uniform field
    elements from the CSPRNG (the wire seeds).  A proof of an invalid input does not verify."""
    f, R, P = circuit.field, circuit.reps, circuit.wire_len
    meas = _checked(circuit, meas, circuit.meas_len, "bits")
    prove_rand = _checked(circuit, prove_rand, 2 * R, "prove randomness")
    w0, w1 = circuit.wires(meas, 1)
    pad = np.zeros((meas.shape[0], P - R - circuit.calls), dtype=np.uint64)
    v0 = np.concatenate([prove_rand[:, :R], w0, pad], axis=1)  # the wires at the P-th roots α^j
    v1 = np.concatenate([prove_rand[:, R:], w1, pad], axis=1)
    # The gadget polynomial W0·W1 at the 2P-th roots ω^i: at even i (ω^{2j} = α^j) the product of the
    # values, at odd i the product of the wires on the coset ω·α^j.  The map to the coset is linear
    # and W1 − W0 is a public constant (−1 at the bit calls) plus the seeds' difference, so one
    # transform pair serves both wires.
    odd0 = _odd_coset_of_wire0(circuit, meas, prove_rand[:, :R], v0)
    odd1 = f.add(odd0, _coset_of_difference(circuit, f.sub(prove_rand[:, R:], prove_rand[:, :R])))
    gadget = np.empty((meas.shape[0], 2 * P), dtype=np.uint64)
    gadget[:, 0::2] = f.mul(v0, v1)
    gadget[:, 1::2] = f.mul(odd0, odd1)
    return np.concatenate([prove_rand, gadget], axis=1)


def _odd_coset_of_wire0(circuit: BoundedL2, meas: np.ndarray, seeds: np.ndarray, v0: np.ndarray) -> np.ndarray:
    """W0 on the odd coset (C, P).  W0's values are affine in (seeds, bits), so for bits that are 0 or 1
    (every honest prover's) one BLAS product against the precomputed images of the bits replaces the
    transform pair; any other input (a cheat's) takes the transforms."""
    f = circuit.field
    if meas.size and meas.max() > 1:
        return _odd_coset(circuit, v0)
    seed_images, bit_images, const = _wire0_images(circuit)
    out = f.add(f.matmul_bits(meas, bit_images), const)
    for r in range(circuit.reps):
        out = f.add(out, f.mul(seeds[:, r:r + 1], seed_images[r]))
    return out


@lru_cache(maxsize=16)
def _wire0_images(circuit: BoundedL2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The odd-coset images of W0's seeds (R, P), of its bits (L, P) and of its constant part (P,)."""
    f, R, L, n, b, P = circuit.field, circuit.reps, circuit.meas_len, circuit.n, circuit.bits, circuit.wire_len
    units = np.zeros((R + L + 1, P), dtype=np.uint64)
    units[np.arange(R), np.arange(R)] = 1
    units[R + np.arange(L), R + np.arange(L)] = 1  # bit i is the first input of call i ...
    weights = circuit.entry_weights()
    for a in range(n):  # ... and bit j of entry a weighs 2^j in x_a, the input of call L + a
        units[R + a * b + np.arange(b), R + L + a] = weights
    units[R + L, R + L:R + L + n] = f.neg(np.uint64(circuit.offset % f.p))  # x_a's constant −2^(b−1)
    images = _odd_coset(circuit, units)
    return images[:R], images[R:R + L], images[R + L]


def _coset_of_difference(circuit: BoundedL2, seed_diff: np.ndarray) -> np.ndarray:
    """(W1 − W0)(ω·α^j) (C, P): the coset image of (seed_diff at j < R, −1 at the bit calls, 0 after)."""
    f, R, P = circuit.field, circuit.reps, circuit.wire_len
    basis, const = _coset_basis(circuit)
    out = np.broadcast_to(const, (seed_diff.shape[0], P)).copy()
    for r in range(R):
        out = f.add(out, f.mul(seed_diff[:, r:r + 1], basis[r]))
    return out


@lru_cache(maxsize=16)
def _coset_basis(circuit: BoundedL2) -> tuple[np.ndarray, np.ndarray]:
    """The coset images of the unit vectors at the R seed positions (R, P), and of the constant part."""
    f, R, P = circuit.field, circuit.reps, circuit.wire_len
    units = np.zeros((R + 1, P), dtype=np.uint64)
    units[np.arange(R), np.arange(R)] = 1
    units[R, R:R + circuit.meas_len] = f.p - 1
    images = _odd_coset(circuit, units)
    return images[:R], images[R]


def _odd_coset(circuit: BoundedL2, values: np.ndarray) -> np.ndarray:
    """W(ω·α^j), j < P, of the polynomials W of degree < P with ``values`` (C, P) at the α^j."""
    f, P = circuit.field, circuit.wire_len
    return ntt(f, f.mul(intt(f, values), _coset_twist(f, P)))


@lru_cache(maxsize=16)
def _coset_twist(f: Field, P: int) -> np.ndarray:
    """ω^i for a primitive 2P-th root ω, i < P."""
    omega = f.root_of_unity(2 * P)
    return np.array([pow(omega, i, f.p) for i in range(P)], dtype=np.uint64)


def _checked(circuit: BoundedL2, a: np.ndarray, width: int, what: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise FieldError(f"{what}: expected shape (clients, {width}), got {arr.shape}")
    return circuit.field.check(arr, what)


@dataclass(frozen=True)
class QueryRandomness:
    """The verifier's randomness for one job: R query points t (R,) and R combinations q (R, L + 1)."""

    t: np.ndarray
    q: np.ndarray


def query_randomness(circuit: BoundedL2, seed: bytes, context: bytes) -> QueryRandomness:
    """(t, q) derived from ``seed`` (≥ 16 bytes the servers draw after the upload window closes) and
    ``context`` (the job's digest): every server derives the same values.  Each t_r is uniform over
    the field minus the P-th roots of unity (the wire polynomials' points; a t among them would
    reveal a wire value) and the t_r are distinct."""
    if len(seed) < 16:
        raise FieldError(f"query seed of {len(seed)} bytes; need at least 16")
    f, R, P = circuit.field, circuit.reps, circuit.wire_len
    key = xof(_QUERY_TAG, f.name.encode(), repr((circuit.n, circuit.bits, circuit.bound, R)).encode(), seed, context)
    q = f.from_uniform_words(keystream_uint64(xof(b"q", key), 2 * R * (circuit.meas_len + 1)))
    ts: list[int] = []
    counter = 0
    while len(ts) < R:  # rejection: expected ≤ 1 + (P + R)/p draws per point
        (t,) = f.from_uniform_words(keystream_uint64(xof(b"t", key, counter.to_bytes(8, "little")), 2)).tolist()
        counter += 1
        if pow(int(t), P, f.p) != 1 and int(t) not in ts:
            ts.append(int(t))
    return QueryRandomness(np.array(ts, dtype=np.uint64), q.reshape(R, circuit.meas_len + 1))


def lagrange_at(field: Field, points: int, t: int) -> np.ndarray:
    """λ_j(t) for the N-th roots α^j (N = ``points``): W(t) = Σ_j λ_j(t)·W(α^j) for deg W < N.

    λ_j(t) = α^j (t^N − 1) / (N (t − α^j)); at t = α^j itself, the indicator of j."""
    p, P = field.p, points
    alpha = field.root_of_unity(P)
    nodes = [pow(alpha, j, p) for j in range(P)]
    if pow(t, P, p) == 1:
        return np.array([int(a == t % p) for a in nodes], dtype=np.uint64)
    scale = (pow(t, P, p) - 1) * pow(P, p - 2, p) % p
    return np.array([scale * a * pow((t - a) % p, p - 2, p) % p for a in nodes], dtype=np.uint64)


@dataclass(frozen=True)
class QueryPlan:
    """The linear map one server applies: verifier share = meas @ meas_map + proof @ proof_map + const.

    Shapes: ``meas_map`` (L, 4R), ``proof_map`` (Π, 4R), ``const`` (4R,); column 4r + (0, 1, 2, 3) is
    (v_r, W0(t_r), W1(t_r), G(t_r)).  ``const`` holds the circuit's constants divided by the K shares.
    """

    circuit: BoundedL2
    num_shares: int
    meas_map: np.ndarray
    proof_map: np.ndarray
    const: np.ndarray


def query_plan(circuit: BoundedL2, rand: QueryRandomness, num_shares: int) -> QueryPlan:
    """Precompute (once per job) the verifier's linear map for ``num_shares`` servers."""
    if num_shares < 1:
        raise FieldError("num_shares must be ≥ 1")
    f, R, L, n, b = circuit.field, circuit.reps, circuit.meas_len, circuit.n, circuit.bits
    p, P, G = f.p, circuit.wire_len, circuit.gadget_len
    inv_k = pow(num_shares, p - 2, p)
    weights = [int(w) for w in circuit.entry_weights()]
    A = np.zeros((L, 4 * R), dtype=object)
    B = np.zeros((circuit.proof_len, 4 * R), dtype=object)
    c = np.zeros(4 * R, dtype=object)
    for r in range(R):
        t, q = int(rand.t[r]), [int(v) for v in rand.q[r]]
        lam = [int(v) for v in lagrange_at(f, P, t)]
        for wire in (0, 1):  # W_w(t) = Σ seeds + Σ_i λ_{R+i}·(call inputs)
            col = 4 * r + 1 + wire
            B[wire * R:(wire + 1) * R, col] = lam[:R]
            A[:, col] = lam[R:R + L]
            for a in range(n):  # x_a = Σ_j 2^j m_{a,j} − 2^(b−1)/K
                A[a * b:(a + 1) * b, col] += [lam[R + L + a] * w for w in weights]
            c[col] = -sum(lam[R + L:R + L + n]) * circuit.offset * inv_k - wire * sum(lam[R:R + L]) * inv_k
        B[2 * R:, 4 * r + 3] = [int(v) for v in lagrange_at(f, G, t)]  # G(t) from its 2P values
        # v_r's gadget part: the gadget's output at call i is G(α^{R+i}) = the proof's value 2(R + i);
        # weighted by q_i at bit calls, by q_L at entry calls.
        B[2 * R + 2 * R:2 * R + 2 * (R + L):2, 4 * r] = q[:L]
        B[2 * R + 2 * (R + L):2 * R + 2 * (R + L + n):2, 4 * r] = q[L]
        A[n * b:, 4 * r] = [q[L] * pow(2, j, p) for j in range(circuit.slack_bits)]
        c[4 * r] = -q[L] * circuit.bound * inv_k
    return QueryPlan(circuit, num_shares, _as_field(A, p), _as_field(B, p), _as_field(c[None, :], p)[0])


def _as_field(m: np.ndarray, p: int) -> np.ndarray:
    """A matrix of Python integers reduced mod p, as uint64."""
    return np.array([[int(v) % p for v in row] for row in m], dtype=np.uint64)


def query(plan: QueryPlan, meas_share: np.ndarray, proof_share: np.ndarray) -> np.ndarray:
    """One server's verifier shares (C, 4R) from its input shares (C, L) and proof shares (C, Π)."""
    circuit, f = plan.circuit, plan.circuit.field
    meas_share = _checked(circuit, meas_share, circuit.meas_len, "input share")
    proof_share = _checked(circuit, proof_share, circuit.proof_len, "proof share")
    if meas_share.shape[0] != proof_share.shape[0]:
        raise FieldError(f"{meas_share.shape[0]} input shares but {proof_share.shape[0]} proof shares")
    out = f.add(f.matmul(meas_share, plan.meas_map), f.matmul(proof_share, plan.proof_map))
    return f.add(out, plan.const)


def combine(circuit: BoundedL2, verifier_shares: list[np.ndarray]) -> np.ndarray:
    """The analyst's sum of the K servers' verifier shares (C, 4R) each."""
    f = circuit.field
    if not verifier_shares:
        raise FieldError("no verifier shares")
    total = _checked(circuit, verifier_shares[0], circuit.verifier_len, "verifier share")
    for s in verifier_shares[1:]:
        s = _checked(circuit, s, circuit.verifier_len, "verifier share")
        if s.shape != total.shape:
            raise FieldError(f"verifier shares of shapes {total.shape} and {s.shape}")
        total = f.add(total, s)
    return total


def decide(circuit: BoundedL2, verifier: np.ndarray) -> np.ndarray:
    """Validity (C,) bool from the summed verifier (C, 4R): every v_r = 0 and W0(t_r)·W1(t_r) = G(t_r)."""
    f = circuit.field
    v = _checked(circuit, verifier, circuit.verifier_len, "verifier").reshape(-1, circuit.reps, 4)
    ok = (v[:, :, 0] == 0) & (f.mul(v[:, :, 1], v[:, :, 2]) == v[:, :, 3])
    return ok.all(axis=1)

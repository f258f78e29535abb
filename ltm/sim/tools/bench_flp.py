"""``ltm bench flp``: the validity proof's cost per client, vectorised over many clients (JSON).

For a per-client job's vector (W entries clipped to ℓ2 norm C and rounded to 2^-f: the default
sparse job uploads W = D + 1 = 11), it times, chunk by chunk of clients: the party's encoding and
proving and its seed-compressed sharing, each server's query (the leader on its full shares, a helper
after expanding its seed), and the analyst's decision; and it reports the bytes each server receives
per client.  CPU seconds of this process (``time.process_time``), so other load on a shared machine
moves the numbers less.  Numbers, not asserts: every client is honest and must be accepted (the
run fails otherwise, so a broken build cannot report a speed).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ltm.clipping import clip_rows
from ltm.dp.defaults import DEFAULT_CLIP_BOUND
from ltm.dp.grid import round_to_grid
from ltm.flp.circuit import BoundedL2
from ltm.flp.field import FIELD64
from ltm.flp.proof import combine, decide, prove, query, query_plan, query_randomness
from ltm.flp.shares import SEED_BYTES, expand_helper, prove_rand, split
from ltm.randomness import Randomness


@dataclass(frozen=True)
class FlpBenchConfig:
    """n clients of W entries, clip bound C, f fraction bits, k servers, R query points, chunk clients."""

    n: int = 100_000
    width: int = 11
    clip_bound: float = DEFAULT_CLIP_BOUND
    frac_bits: int = 20
    k: int = 2
    reps: int = 2
    chunk: int = 8192


def _chunk_times(circuit: BoundedL2, cfg: FlpBenchConfig, x: np.ndarray, index: int,
                 plan: Any, totals: dict[str, float]) -> None:
    """Prove, share, query (every server) and decide one chunk of clients; add CPU seconds to ``totals``."""
    rng = Randomness.seeded_insecure(index)
    context = b"bench|batch-" + str(index).encode()
    clock = time.process_time
    t0 = clock()
    meas = circuit.encode(x)
    proof = prove(circuit, meas, prove_rand(circuit, rng.child("prove"), len(x)))
    t1 = clock()
    shares = split(circuit, meas, proof, cfg.k, rng.child("split"), context)
    t2 = clock()
    verifiers = [query(plan, shares.leader_meas, shares.leader_proof)]
    t3 = clock()
    for j, seed in enumerate(shares.helper_seeds, start=1):
        verifiers.append(query(plan, *expand_helper(circuit, seed, context, len(x), j)))
    t4 = clock()
    ok = decide(circuit, combine(circuit, verifiers))
    t5 = clock()
    if not ok.all():
        raise AssertionError(f"{int((~ok).sum())} honest clients rejected: the proof code is broken")
    for key, dt in (("prove", t1 - t0), ("share", t2 - t1), ("leader_query", t3 - t2),
                    ("helper_query", (t4 - t3) / max(1, cfg.k - 1)), ("decide", t5 - t4)):
        totals[key] = totals.get(key, 0.0) + dt


def bench_flp(cfg: FlpBenchConfig) -> dict[str, Any]:
    """Time the proof's phases over ``cfg.n`` honest clients; the JSON-ready result."""
    circuit = BoundedL2.for_grid(FIELD64, cfg.width, cfg.clip_bound, cfg.frac_bits, cfg.reps)
    t0 = time.process_time()
    plan = query_plan(circuit, query_randomness(circuit, b"bench-query-seed", b"bench-job"), cfg.k)
    plan_seconds = time.process_time() - t0
    data = np.random.default_rng(0)
    totals: dict[str, float] = {}
    wall = time.perf_counter()
    for index, start in enumerate(range(0, cfg.n, cfg.chunk)):
        rows = min(cfg.chunk, cfg.n - start)
        raw = data.normal(size=(rows, cfg.width)) * data.choice([0.1, 10.0], size=(rows, 1))
        x = round_to_grid(clip_rows(raw, cfg.clip_bound), cfg.frac_bits)
        _chunk_times(circuit, cfg, x, index, plan, totals)
    wall = time.perf_counter() - wall
    leader_bytes = 8 * (circuit.meas_len + circuit.proof_len)
    return {
        "benchmark": "flp", "clients": cfg.n, "width": cfg.width, "clip_bound": cfg.clip_bound,
        "frac_bits": cfg.frac_bits, "servers": cfg.k, "chunk": cfg.chunk, "field": circuit.field.name,
        "circuit": {"entry_bits": circuit.bits, "norm_bound": circuit.bound, "bits_per_client": circuit.meas_len,
                    "gadget_calls": circuit.calls, "wire_points": circuit.wire_len, "proof_len": circuit.proof_len,
                    "query_points": circuit.reps,
                    "log2_soundness_error_per_client": round(math.log2(circuit.soundness_error()), 2)},
        "bytes_per_client": {"leader": leader_bytes, "leader_without_proofs": 8 * cfg.width,
                             "helper_seed_per_chunk": SEED_BYTES, "verifier_share": 8 * circuit.verifier_len},
        "cpu_us_per_client": {k: round(1e6 * v / cfg.n, 2) for k, v in totals.items()},
        "cpu_seconds": {**{k: round(v, 3) for k, v in totals.items()}, "query_plan": round(plan_seconds, 3)},
        "wall_seconds": round(wall, 3),
        "note": "CPU seconds of one process; prove and share are the party's, leader/helper query each server's, "
                "decide the analyst's",
    }

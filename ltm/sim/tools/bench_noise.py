"""``ltm bench noise``: ns per draw of the noise samplers, before (#20) and after.

Before: the float samplers a party used until issue #20 (Box–Muller normal; Γ(1/L, b) − Γ(1/L, b)
for Laplace), whose draws were then rounded to the grid per client.  After: the exact integer
samplers of :mod:`ltm.dp.noise` (and a Pólya piece of the distributed discrete Laplace, :mod:`ltm.dp.polya`).  Best of ``--repeat`` timings of ``--draws`` draws each, from the
production CSPRNG stream; numbers, not asserts (docs/testing.md).  ``--cpu`` times this process's
CPU (``time.process_time``) instead of the wall clock: steadier on a shared machine.
"""
from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from ltm.dp.noise import discrete_gaussian, discrete_laplace
from ltm.dp.polya import polya_laplace
from ltm.randomness import Randomness


def bench(draws: int = 1_000_000, repeat: int = 3, cpu: bool = False) -> dict[str, float]:
    """ns per draw of each sampler (best of ``repeat``; ``cpu``: process CPU time, else wall time)."""
    clock = time.process_time if cpu else time.perf_counter
    stream = Randomness.system().stream()
    cases = {
        "before: float normal (Box-Muller), sigma=1e8": lambda: stream.normal(draws, scale=1e8),
        "before: float gamma difference, shape 1/1000": lambda: (stream.gamma(1e-3, 1e8, draws)
                                                                  - stream.gamma(1e-3, 1e8, draws)),
        "after: discrete gaussian, sigma=1e8 grid steps": lambda: discrete_gaussian(stream, 1e16, draws),
        "after: discrete gaussian, sigma=8 grid steps": lambda: discrete_gaussian(stream, 64.0, draws),
        "after: discrete gaussian, sigma=1e12 grid steps": lambda: discrete_gaussian(stream, 1e24, draws),
        "after: discrete laplace, t=1e8 grid steps": lambda: discrete_laplace(stream, 1e8, draws),
        "after: polya piece NB(1/1000) - NB(1/1000), t=1e8 grid steps":
            lambda: polya_laplace(stream, 1e8, Fraction(1, 1000), draws),
    }
    out = {}
    for name, run in cases.items():
        best = np.inf
        for _ in range(repeat):
            t0 = clock()
            run()
            best = min(best, clock() - t0)
        out[name] = best / draws * 1e9
    return out

"""The seeded job most tests start from: a synthetic ridge table and its spec, reproducible from a seed."""
from __future__ import annotations

from typing import Any

from ltm.jobspec import JobSpec
from ltm.randomness import Randomness
from ltm_datasets.synthetic import synthetic_ridge
from ltm_datasets.tables import Table
from sim.runtime.jobs import build_job


def seeded_job(seed: int | bytes | str, n: int, d: int = 4, **build: Any) -> tuple[JobSpec, Table, Randomness]:
    """A job over ``n`` synthetic ridge rows of ``d`` features, everything drawn from ``seed``.

    The randomness is :meth:`Randomness.seeded_insecure` (reproducible, not private: tests only) and
    is returned with the spec and the whole table, so a test can split the table into party tables
    and derive the parties' streams and the release label from it.  ``build`` goes to
    :func:`sim.runtime.jobs.build_job` (``job_id`` is required there)."""
    randomness = Randomness.seeded_insecure(seed)
    table = synthetic_ridge(n, d, randomness)
    spec, _ = build_job(table, randomness=randomness, **build)
    return spec, table, randomness

"""The seeded job most tests start from: a synthetic ridge table and its spec, reproducible from a seed."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ltm.jobspec import JobSpec
from ltm.randomness import Randomness
from sim.data import Table, synthetic_ridge
from sim.jobs import build_job


def seeded_job(seed: int | bytes | str, n: int, d: int = 4, **build: Any) -> tuple[JobSpec, Table, Randomness]:
    """A job over ``n`` synthetic ridge rows of ``d`` features, everything drawn from ``seed``.

    The randomness is :meth:`Randomness.seeded_insecure` (reproducible, not private: tests only) and
    is returned with the spec and the whole table, so a test can split the table into party tables
    and derive the parties' streams and the release label from it.  ``build`` goes to
    :func:`sim.jobs.build_job` (``job_id`` is required there)."""
    randomness = Randomness.seeded_insecure(seed)
    table = synthetic_ridge(n, d, randomness)
    spec, _ = build_job(table, randomness=randomness, **build)
    return spec, table, randomness


def job_doc(endpoints: Sequence[str] = ("h0:1", "h1:1"), **over: Any) -> dict:
    """A small valid job-file document (before :func:`ltm.jobfile.render_job_file`): a rows job of two
    parties of 400 clients, a server per endpoint, three columns (a range, a spread, a label); each
    keyword replaces a whole top-level table."""
    d = {"job": {"id": "j1", "partition": "rows"}, "release": {"kind": "sparse", "m": 8},
         "privacy": {"epsilon": 1.0, "delta": 1e-6}, "fit": {"model": "ridge"},
         "servers": [{"id": f"server-{i}", "endpoint": e} for i, e in enumerate(endpoints)],
         "parties": [{"id": "party-0", "clients": 400}, {"id": "party-1", "clients": 400}],
         "columns": [{"name": "a", "range": [0.0, 10.0]}, {"name": "b", "center": 5.0, "spread": 2.0},
                     {"name": "y", "role": "label", "center": 1.0, "scale": 3.0}]}
    d.update(over)
    return d

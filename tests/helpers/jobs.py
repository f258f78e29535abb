"""The seeded job most tests start from: a synthetic ridge table and its spec, reproducible from a seed."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ltm.datasets.synthetic import synthetic_ridge
from ltm.datasets.tables import Table
from ltm.jobspec import ColumnSpec, JobSpec, PartySpec, PrivacySpec, ServerSpec, SketchSpec, resolve_defaults
from ltm.randomness import Randomness
from ltm.sim.runtime.jobs import build_job


def seeded_job(seed: int | bytes | str, n: int, d: int = 4, **build: Any) -> tuple[JobSpec, Table, Randomness]:
    """A job over ``n`` synthetic ridge rows of ``d`` features, everything drawn from ``seed``.

    The randomness is :meth:`Randomness.seeded_insecure` (reproducible, not private: tests only) and
    is returned with the spec and the whole table, so a test can split the table into party tables
    and derive the parties' streams and the release label from it.  ``build`` goes to
    :func:`ltm.sim.runtime.jobs.build_job` (``job_id`` is required there)."""
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


def bare_spec(job_id: str, epsilon: float = 1.0, delta: float = 1e-6, *, mechanism: str = "gaussian", s: int = 1,
              parties: int = 4, kind: str = "sparse", n: int = 2000, **privacy: Any) -> JobSpec:
    """A resolved rows spec with no data behind it: ``n`` clients split evenly among ``parties``, three
    columns, two servers, a sketch of 20 rows (``s`` per client when sparse); ``privacy`` goes to the
    :class:`PrivacySpec`.  For tests of what a spec alone decides (the ledger's charges)."""
    edges = np.linspace(0, n, parties + 1).astype(int)
    spec = JobSpec(
        job_id=job_id, partition="rows", n=n, columns=tuple(ColumnSpec(f"x{j}") for j in range(3)),
        parties=tuple(PartySpec(f"party-{i}", int(a), int(b), (), 1.0) for i, (a, b) in enumerate(zip(edges, edges[1:]))),
        clip_bound=1.0, frac_bits=0, sketch=SketchSpec(kind, 20, s if kind == "sparse" else 20, "5a" * 32),
        privacy=PrivacySpec(epsilon=epsilon, delta=delta, mechanism=mechanism, **privacy),
        servers=(ServerSpec("server-0"), ServerSpec("server-1")), clip_norm="l1" if mechanism == "laplace" else "l2")
    return resolve_defaults(spec)


def gate_spec(**privacy: Any) -> JobSpec:
    """A small rows-partition job (400 clients, 2 parties, 2 servers, m=8, s=2, id ``gate-kills``),
    optionally with privacy fields replaced."""
    randomness = Randomness.seeded_insecure("gate-kills")
    spec, _ = build_job(synthetic_ridge(400, 3, randomness), job_id="gate-kills", randomness=randomness,
                        parties=2, k=2, m=8, s=2)
    return replace(spec, privacy=replace(spec.privacy, **privacy)) if privacy else spec

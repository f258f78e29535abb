"""The networked experiment backend returns the in-process backend's release (ltm/experiments/release_backends.py).

``NetworkedBackend`` starts real ``ltm server`` and ``ltm analyst`` processes on loopback (mutual
TLS) and one ``ltm party`` process per party, then rebuilds the release from the analyst's
``GetRelease`` reply (:func:`ltm.analyst.release.release_from_reply`, as ``ltm demo`` does).  With the
same seed that release must equal ``InProcessBackend``'s field for field: the matrix bit for bit, the
kind, the client vector's names (after transforms), and the noise it states — for a sketch, a
lifted ``gram`` job and a job with a random-feature transform.  One deployment serves every case;
everything started here is stopped here.
"""
from __future__ import annotations

import numpy as np
import pytest

from ltm.experiments.release_backends import InProcessBackend, NetworkedBackend
from ltm.sim.runtime.jobs import RFFOptions, party_tables
from tests.helpers.jobs import seeded_job

K = 3
SEED = 5


@pytest.fixture(scope="module")
def networked(tmp_path_factory):
    backend = NetworkedBackend(k=K, workdir=tmp_path_factory.mktemp("release-backends"), deadline_s=60.0)
    try:
        yield backend
    finally:
        backend.close()


@pytest.mark.parametrize("job", [dict(kind="sparse", m=8), dict(kind="gram"),
                                 dict(kind="sparse", m=8, rff=RFFOptions(n_features=4, bandwidth=2.0))],
                         ids=["sketch", "gram", "rff-sketch"])
def test_networked_release_equals_the_in_process_one(networked, job):
    spec, table, _ = seeded_job(SEED, 400, d=3, job_id=f"backends-{job['kind']}-{'rff' in job}", parties=2, k=K,
                                endpoints=networked.endpoints(K), **job)
    tables = party_tables(spec, table)

    net = networked.release(spec, tables, SEED)
    local = InProcessBackend().release(spec, tables, SEED)

    assert net.sha256 == local.sha256
    np.testing.assert_array_equal(net.matrix, local.matrix)
    assert (net.kind, net.columns, net.label, net.intercept, net.n) == \
           (local.kind, local.columns, local.label, local.intercept, local.n)
    np.testing.assert_array_equal(net.centers, local.centers)
    np.testing.assert_array_equal(net.scales, local.scales)
    assert net.noise_variance_per_column == local.noise_variance_per_column
    if local.lifted:
        np.testing.assert_array_equal(net.entry_noise_variance, local.entry_noise_variance)
    else:
        assert net.entry_noise_variance is None

"""The release-kind planner (ltm/planner.py): pure, public inputs only; choices pinned on a few
(n, D, ε) cases, and the wiring into build_job / simulate (``--release auto``)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ltm.planner import PlanInputs, plan_release


def plan(**kw):
    kw.setdefault("delta", 1e-6)
    return plan_release(PlanInputs(**kw))


@pytest.mark.parametrize("n,D,eps,kind,m", [
    (100_000, 7, 1.0, "gram", 1),        # rows: the gram kind's error falls like 1/n²
    (20_000, 13, 0.1, "gram", 1),
    (1_000_000, 11, 1.0, "gram", 1),
    (500, 7, 1.0, "gram", 1),            # too few clients for any sketch row load
])
def test_rows_partition_choices_are_pinned(n, D, eps, kind, m):
    p = plan(n=n, width=D, epsilon=eps, party_sizes=(n // 4,) * 4)
    assert (p.kind, p.m, p.s) == (kind, m, 1)
    assert p.kind in p.reason and "R² loss" in p.reason
    assert any("second moment" in a for a in p.assumptions)


@pytest.mark.parametrize("n,D,eps,m", [(100_000, 7, 1.0, 102), (1_000_000, 11, 1.0, 647), (100_000, 7, 0.1, 28)])
def test_columns_partition_tunes_the_sparse_sketch(n, D, eps, m):
    p = plan(n=n, width=D, epsilon=eps, partition="columns")
    assert (p.kind, p.m) == ("sparse", m)
    gram = next(c for c in p.candidates if c.kind == "gram")
    assert not gram.feasible and "columns partition" in gram.note


def test_traffic_cap_makes_wide_vectors_use_a_sketch():
    """D = 101 (e.g. 100 random features + label): the gram upload 5151 values exceeds the cap."""
    p = plan(n=1_000_000, width=101, epsilon=1.0)
    assert p.kind == "sparse"
    assert "exceeds the cap" in next(c for c in p.candidates if c.kind == "gram").note
    assert plan(n=1_000_000, width=101, epsilon=1.0, max_upload_values=10_000).kind == "gram"


def test_predictions_fall_with_n_and_epsilon_and_the_gram_beats_the_sketch_by_a_growing_factor():
    def pred(n, eps, kind):
        p = plan(n=n, width=7, epsilon=eps)
        return next(c.predicted_excess for c in p.candidates if c.kind == kind)
    for kind in ("gram", "sparse"):
        assert pred(10**5, 1.0, kind) < pred(10**4, 1.0, kind)
        assert pred(10**5, 1.0, kind) < pred(10**5, 0.3, kind)
    ratio = [pred(n, 1.0, "sparse") / pred(n, 1.0, "gram") for n in (10**5, 10**6)]
    assert ratio[1] > 5 * ratio[0]  # 1/n against 1/n²


def test_corruption_tolerance_costs_noise():
    base = plan(n=100_000, width=7, epsilon=1.0, party_sizes=(25_000,) * 4)
    worse = plan(n=100_000, width=7, epsilon=1.0, party_sizes=(25_000,) * 4, corrupt_parties=2)
    assert worse.predicted_excess > base.predicted_excess


def test_public_second_moment_changes_the_prediction_not_the_inputs_contract():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(1000, 5)) @ np.diag([1, 1, 0.1, 0.01, 1.0])
    M = Z.T @ Z / 1000
    M /= np.trace(M)
    a = plan(n=50_000, width=5, epsilon=1.0, second_moment=M)
    b = plan(n=50_000, width=5, epsilon=1.0)
    assert a.kind == b.kind == "gram"
    assert a.predicted_excess != b.predicted_excess
    assert "public second moment" in a.assumptions[0]
    with pytest.raises(ValueError, match="5 × 5"):
        plan(n=50_000, width=5, epsilon=1.0, second_moment=np.eye(4))


def test_lowrank_and_bad_input():
    assert plan(n=100_000, width=10, epsilon=1.0, task="lowrank").kind == "gram"
    with pytest.raises(ValueError, match="epsilon"):
        plan(n=1000, width=5, epsilon=0.0)
    with pytest.raises(ValueError, match="kinds"):
        plan(n=1000, width=5, epsilon=1.0, kinds=("cauchy",))
    p = plan(n=100_000, width=7, epsilon=1.0, kinds=("sparse", "dense"))
    assert p.kind in ("sparse", "dense") and math.isfinite(p.predicted_excess)
    assert set(p.to_dict()) >= {"kind", "m", "s", "candidates", "reason", "assumptions"}


def test_build_job_auto_follows_the_plan():
    from ltm.randomness import Randomness
    from ltm_datasets.synthetic import synthetic_ridge
    from sim.runtime.jobs import build_job

    r = Randomness.seeded_insecure("auto")
    table = synthetic_ridge(20_000, 6, r)
    spec, choices = build_job(table, job_id="a", randomness=r, kind="auto")
    assert spec.sketch.kind == choices.plan["kind"] == "gram" and spec.sketch.m == 1
    spec_c, choices_c = build_job(table, job_id="c", randomness=r, kind="auto", partition="columns", parties=2)
    assert spec_c.sketch.kind == "sparse" and spec_c.sketch.m == choices_c.plan["m"]
    spec_p, _ = build_job(table, job_id="p", randomness=r, kind="auto", calibration="paper")
    assert spec_p.sketch.kind == "sparse"


def _costed(n, mode, **kw):
    return plan_release(PlanInputs(n=n, width=11, epsilon=1.0, delta=1e-6, party_sizes=(n // 16,) * 16,
                                   corrupt_parties=1, upload_mode=mode, **kw))


def test_aggregate_uploads_cost_bytes_independent_of_n():
    small, large = _costed(10**6, "aggregate"), _costed(10**8, "aggregate")
    g_small = next(c for c in small.candidates if c.kind == "gram")
    g_large = next(c for c in large.candidates if c.kind == "gram")
    assert g_small.cost["party_upload_bytes"] == g_large.cost["party_upload_bytes"] == 66 * 8 + 2 * 32
    per_client = next(c for c in _costed(10**6, "per-client").candidates if c.kind == "gram")
    assert per_client.cost["party_upload_bytes"] > 1000 * g_small.cost["party_upload_bytes"]
    assert per_client.cost["server_cpu_s"] > g_small.cost["server_cpu_s"]


def test_the_cheapest_candidate_within_the_tolerance_is_chosen_and_explained():
    p = _costed(10**8, "per-client")
    best = min(p.candidates, key=lambda c: c.predicted_excess)
    chosen = next(c for c in p.candidates if c.kind == p.kind)
    assert chosen.cost["total_s"] <= best.cost["total_s"]
    if chosen is not best:
        assert "within the utility tolerance" in p.reason and "B/party" in p.reason
    strict = _costed(10**8, "per-client", utility_tolerance=0.0)
    assert strict.kind == best.kind  # no tolerance: the most accurate candidate


def test_a_job_can_bound_the_bytes_a_party_uploads():
    p = _costed(10**6, "per-client", max_party_upload_bytes=10**7)
    gram = next(c for c in p.candidates if c.kind == "gram")
    assert not gram.feasible and "bound" in gram.note
    assert p.kind == "sparse"
    with pytest.raises(ValueError, match="no release kind is feasible"):
        _costed(10**6, "per-client", max_party_upload_bytes=100)


@pytest.mark.parametrize("n", [10**6, 10**7, 10**8, 10**9])
def test_the_default_job_at_scale_is_the_gram_aggregate(n):
    """With the gram aggregate at BLAS speed (round D values + one W-value block per client) and a
    sketch's O(n·s) row loads counted, the default job (d = 10 + label, aggregate) is gram at every
    n: cheaper and more accurate; its cost per client is the measured one (0.31–0.40 CPU-µs loaded)."""
    from ltm.planner import COST_RATES

    p = _costed(n, "aggregate")
    assert p.kind == "gram"
    gram = next(c for c in p.candidates if c.kind == "gram")
    sparse = next(c for c in p.candidates if c.kind == "sparse")
    per_client = (COST_RATES["client_vector"] + 11 * COST_RATES["round_value"]
                  + 66 * COST_RATES["gram_block_value"])
    assert gram.cost["total_s"] == pytest.approx(n * per_client, rel=1e-3)
    assert 0.25e-6 < per_client < 0.45e-6
    assert sparse.cost["server_cpu_s"] >= n * sparse.s * COST_RATES["row_load_piece"]
    assert gram.cost["total_s"] < sparse.cost["total_s"]
    assert "gram" in p.reason and "B/party" in p.reason


def test_auto_with_verified_clipping_chooses_the_replicated_release():
    """F7 (issue #30 review): a verified job tolerates one corrupt party, so the planner must not refuse
    the replicated candidate for corrupt_parties = 1, and its trust note says the clipping is checked."""
    from ltm.randomness import Randomness
    from ltm_datasets.synthetic import synthetic_ridge
    from sim.runtime.jobs import build_job

    base = {"n": 80_000, "width": 7, "epsilon": 1.0, "delta": 1e-6, "partition": "columns", "parties": 3,
            "colluding_servers": 1, "corrupt_parties": 1}
    refused = plan_release(PlanInputs(**base))
    assert refused.kind != "gram" and not next(c for c in refused.candidates if c.kind == "gram").feasible
    verified = plan_release(PlanInputs(**base, verified_clipping=True))
    assert verified.kind == "gram" and "proven on the shares" in verified.reason
    assert "nothing yet checks" not in verified.reason
    table = synthetic_ridge(2000, 5, Randomness.seeded_insecure(7).child("data"))
    spec, _ = build_job(table, job_id="auto", randomness=Randomness.seeded_insecure(8), partition="columns",
                        parties=3, kind="auto", colluding_servers=1, verified_clipping=True)
    assert spec.sketch.kind == "gram" and spec.verified_clipping and spec.privacy.corrupt_parties == 1

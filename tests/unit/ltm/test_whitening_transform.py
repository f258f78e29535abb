"""The public second-moment whitening as a job transform (ltm.transforms ``whiten``): parties whiten
before clipping, the analyst maps coefficients back.  The round trip through the ACTUAL party
transform (ltm.party.randomizer.client_vectors + the job's clip) and the analyst's map-back
(ltm.analyst.mapback) recovers the raw OLS coefficients exactly when there is no noise; through the
real pipeline (parties → shares → servers → analyst, a sparse sketch) the mapped-back model is the
sketched raw OLS up to the (tiny) noise.  Seeded: deterministic."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ltm.analyst.estimators import OLS
from ltm.analyst.mapback import raw_linear_predictor
from ltm.clipping import clip_rows
from ltm.datasets.tables import Table
from ltm.jobspec import JobSpec, JobSpecError, validate_job
from ltm.party.ledger import UNLIMITED  # near-noiseless test jobs, far past any real budget
from ltm.party.randomizer import client_vectors
from ltm.randomness import Randomness
from ltm.second_moment import PublicSecondMoment
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import build_job, party_tables, whiten_columns
from ltm.transforms import FeaturePipeline, TransformError, Whitening, rff_spec, whiten_spec


def _data(n: int, seed: int, d: int = 4):
    rng = np.random.default_rng(seed)
    mu = np.linspace(0.5, 2.0, d)
    L = np.linalg.cholesky(0.6 ** np.abs(np.subtract.outer(np.arange(d), np.arange(d))))
    beta = rng.standard_normal(d)
    X = mu + rng.standard_normal((n, d)) @ L.T
    y = X @ beta + 0.1 * rng.standard_normal(n)
    B = mu + rng.standard_normal((300, d)) @ L.T  # a public sample of the same population
    public = PublicSecondMoment.from_public_data(B, B @ beta + 0.1 * rng.standard_normal(300))
    names = [f"x{j}" for j in range(d)]
    table = Table({**{f: X[:, j].copy() for j, f in enumerate(names)}, "y": y}, "y", "test")
    return table, X, y, public


def _job(table: Table, public: PublicSecondMoment, **kw) -> JobSpec:
    spec, _ = build_job(table, job_id="whiten", randomness=Randomness.seeded_insecure(3), parties=3, k=2,
                        whiten=public, **kw)
    return spec


def test_round_trip_through_the_party_transform_is_exact_without_noise():
    table, X, y, public = _data(4000, 1)
    spec = _job(table, public)
    assert [t.kind for t in spec.transforms] == ["whiten"]
    # What every party computes (its real code path), before noise: transform, then the job's clip.
    V = np.vstack([clip_rows(client_vectors(spec, p, tbl), p.clip_bound, spec.clip_norm)
                   for p, tbl in zip(spec.parties, party_tables(spec, table).values())])
    pre = np.vstack([client_vectors(spec, p, tbl) for p, tbl in zip(spec.parties, party_tables(spec, table).values())])
    assert np.array_equal(V, pre), "the paper's radius clipped a row of this well-behaved sample"
    # The party's vectors are (C/R)·M x and y·C/(R σ̂_B): whitened, as the paper's PMT.
    scale = spec.clip_bound / math.sqrt(5 * (1 + math.log(2 * 4000 / 0.05)))
    assert np.allclose(V[:, :4], scale * (X @ public.whitening), rtol=1e-13, atol=1e-15)
    assert np.allclose(V[:, 4], scale * y / public.label_rms, rtol=1e-13)
    feat, lab = [j for j in range(spec.width) if j != spec.label_index], spec.label_index
    coef_white = np.linalg.lstsq(V[:, feat], V[:, lab], rcond=None)[0]
    model = raw_linear_predictor(coef_white, spec)
    ols = np.linalg.lstsq(X, y, rcond=None)[0]
    assert np.allclose(model.coef_, ols, rtol=1e-10, atol=1e-12)
    assert model.intercept_ == 0.0 and model.feature_names_in_ == ("x0", "x1", "x2", "x3")
    assert np.allclose(model.predict(X[:5]), X[:5] @ ols, rtol=1e-10)
    # Breaking the map-back (no transpose, or forgetting σ̂_B) is caught: W is not symmetric here.
    assert not np.allclose(coef_white, ols, rtol=1e-3)


def test_non_symmetric_whitening_map_back_uses_the_transpose():
    """Cholesky whitening x̃ = L⁻¹x (row convention Ã = A L⁻ᵀ): pull_back must apply Wᵀ."""
    table, X, y, public = _data(2000, 2)
    W = np.linalg.inv(np.linalg.cholesky(public.sigma))
    cols = (*_job(table, public).columns,)
    pipe = FeaturePipeline(cols, (whiten_spec([f"x{j}" for j in range(4)], W, name="c_"),))
    Z = pipe.vectors(table.columns, rows=table.n)
    assert np.allclose(Z[:, :4], X @ W.T)
    beta_t = np.linalg.lstsq(Z[:, :4], Z[:, 4], rcond=None)[0]
    back = pipe.pull_back(beta_t)
    assert np.allclose(back, np.linalg.lstsq(X, Z[:, 4], rcond=None)[0], rtol=1e-10)


@pytest.mark.parametrize("kind,m", [("sparse", 400), ("dense", 40)])
def test_pipeline_release_maps_back_to_the_sketched_raw_ols(kind, m):
    """The whitened job through the real party → 2 servers → analyst cores (sparse and dense
    sketches): at a huge ε the mapped-back OLS equals OLS of the same sketch applied to the raw
    rows, up to noise."""
    table, X, y, public = _data(6000, 4)
    spec = _job(table, public, epsilon=1e6, delta=1e-6, m=m, kind=kind)
    assert spec.sketch.kind == kind
    release = run_inprocess(spec, party_tables(spec, table), Randomness.seeded_insecure(5), budget=UNLIMITED).release
    model = raw_linear_predictor(OLS().fit(release).coef_scaled_, spec)
    S = spec.make_sketch().to_dense().astype(np.float64)
    ols_sketch = np.linalg.lstsq(S @ X, S @ y, rcond=None)[0]
    ols = np.linalg.lstsq(X, y, rcond=None)[0]
    assert np.linalg.norm(model.coef_ - ols_sketch) < 1e-2 * np.linalg.norm(ols)
    assert np.linalg.norm(model.coef_ - ols) < 0.2 * np.linalg.norm(ols)  # the sketch's own distortion


def test_whiten_transform_validation():
    table, _, _, public = _data(500, 5)
    spec = _job(table, public)
    t = spec.transforms[0]
    W = Whitening(t, 4)
    assert np.allclose(W.linear_map(), t.output_scale * public.whitening)
    with pytest.raises(TransformError, match="16"):
        Whitening(whiten_spec(["a", "b"], np.eye(2)), 4)
    singular = whiten_spec([f"x{j}" for j in range(4)], np.diag([1.0, 1.0, 1.0, 0.0]))
    with pytest.raises(TransformError, match="singular"):
        Whitening(singular, 4)
    with pytest.raises(JobSpecError, match="singular"):
        validate_job(dataclasses.replace(spec, transforms=(singular,)))
    # The spec round-trips through its canonical JSON with the same digest.
    assert JobSpec.from_json(spec.canonical_json()).digest == spec.digest
    # Non-linear transforms have no raw coefficients.
    pipe = FeaturePipeline(spec.columns, (rff_spec(["x0", "x1"], n_features=3, bandwidth=1.0, seed=bytes(32)),))
    with pytest.raises(TransformError, match="not linear"):
        pipe.pull_back(np.ones(5))
    with pytest.raises(ValueError, match="rows partition"):
        _job(table, public, partition="columns")


def test_whitening_composes_with_the_gram_release_kind():
    """The gram kind lifts the clipped WHITENED vector, so its release is the noisy ZᵀZ of whitened
    rows: OLS on it, mapped back, is the raw OLS up to the (here tiny) noise — the LTM analogue of
    DP-PMTOLSE (one release of the whitened sufficient statistics)."""
    table, X, y, public = _data(5000, 6)
    spec = _job(table, public, kind="gram", epsilon=1e4, delta=1e-6)
    assert spec.sketch.kind == "gram" and spec.transforms[0].kind == "whiten"
    release = run_inprocess(spec, party_tables(spec, table), Randomness.seeded_insecure(7), budget=UNLIMITED).release
    model = raw_linear_predictor(OLS().fit(release).coef_scaled_, spec)
    ols = np.linalg.lstsq(X, y, rcond=None)[0]
    assert np.linalg.norm(model.coef_ - ols) < 1e-3 * np.linalg.norm(ols)
    # The released Gram is that of the whitened, clipped rows the parties computed.
    V = np.vstack([clip_rows(client_vectors(spec, p, tbl), p.clip_bound, spec.clip_norm)
                   for p, tbl in zip(spec.parties, party_tables(spec, table).values())])
    assert np.allclose(release.gram, V.T @ V, atol=1e-3 * np.abs(V.T @ V).max())


def test_centred_whitening_round_trip_has_the_intercept():
    """With a public covariance (center=True) the parties subtract the public means; the mapped-back
    model is exactly the OLS of the publicly centred rows, with the intercept that centring implies
    (no noise, no clipping at this radius) — close to, not equal to, the free-intercept OLS."""
    table, X, y, _ = _data(3000, 8)
    rng = np.random.default_rng(9)
    B = X[:400] + 0.05 * rng.standard_normal((400, 4))  # stands in for a public sample
    public = PublicSecondMoment.from_public_data(B, y[:400], center=True)
    spec = _job(table, public, whiten_radius=50.0)
    V = np.vstack([client_vectors(spec, p, tbl) for p, tbl in zip(spec.parties, party_tables(spec, table).values())])
    assert np.max(np.linalg.norm(V, axis=1)) < spec.clip_bound
    coef = np.linalg.lstsq(V[:, :4], V[:, 4], rcond=None)[0]
    model = raw_linear_predictor(coef, spec)
    Xi = np.column_stack([X, np.ones(len(X))])
    full = np.linalg.lstsq(Xi, y, rcond=None)[0]
    Zc = (X - public.feature_mean)
    wc = np.linalg.lstsq(Zc, y - public.label_mean, rcond=None)[0]
    assert np.allclose(model.coef_, wc, rtol=1e-10)
    assert model.intercept_ == pytest.approx(public.label_mean - public.feature_mean @ wc, rel=1e-10)
    assert np.linalg.norm(model.coef_ - full[:4]) < 0.2 * np.linalg.norm(full[:4])


def test_a_job_file_carries_the_public_second_moment():
    """A job file names the whitening as a [[transforms]] table (kind "whiten", the public W row-major):
    it parses to the same transform the simulator builds, the spec validates, and a singular matrix
    is refused with a line that says so."""
    from ltm.jobfile import JobFileError, parse_job_file, render_job_file

    table, _, _, public = _data(800, 10, d=2)
    cols, (t,) = whiten_columns(table, public)
    doc = {"job": {"id": "w1", "partition": "rows"}, "release": {"kind": "gram"},
           "privacy": {"epsilon": 1.0, "delta": 1e-6}, "fit": {"model": "ols"},
           "servers": [{"id": "server-0", "endpoint": "h0:1"}, {"id": "server-1", "endpoint": "h1:1"}],
           "parties": [{"id": "party-0", "clients": 400}, {"id": "party-1", "clients": 400}],
           "columns": [{"name": c.name, "role": c.role, "center": c.center, "scale": c.scale} for c in cols],
           "transforms": [{"kind": "whiten", "columns": list(t.columns), "name": t.name, "matrix": list(t.matrix),
                           "output_scale": t.output_scale}]}
    spec = parse_job_file(render_job_file(doc)).spec
    assert spec.transforms == (t,) and spec.width == 3 and spec.vector_names == ("w_0", "w_1", "y")
    validate_job(spec)
    doc["transforms"][0]["matrix"] = [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(JobFileError, match="singular"):
        parse_job_file(render_job_file(doc))

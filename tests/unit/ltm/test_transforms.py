"""Public transforms (ltm.transforms): the random-feature weights' golden vector and independent
re-derivation, the exact samplers, the kernel the features approximate, the vector layout in the job
spec (digest, round trip, validation), and the LTM pipeline on mapped vectors, bit for bit.

Arithmetic tests use fixed seeds.  The two statistical checks (normal moments, kernel
approximation) use bounds ≥ 6 standard deviations away (flake rate < 1e-8).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ltm.datasets.tables import Table
from ltm.jobspec import ColumnSpec, JobSpec, JobSpecError, validate_job
from ltm.randomness import Randomness, RandomStream
from ltm.sim.runtime.inprocess import run_inprocess
from ltm.sim.runtime.jobs import RFFOptions, build_job, party_tables
from ltm.transforms import (
    FeaturePipeline,
    RandomFeatures,
    TransformError,
    TransformSpec,
    exact_log,
    exact_normal,
    rff_spec,
    rff_weights,
    vector_layout,
)

# --------------------------------------------------------------------------------- golden vectors
# Every party and the analyst derive the same weights from the public seed; any change to the
# derivation (key schedule, sampler, order) must bump the domain tag "ltm/transform/rff/v1" and
# come with new vectors, never a silent edit of these.
GOLDEN_SEED = bytes(range(32)).hex()
GOLDEN_OMEGA = [
    [0.365012271036828, 0.5219842473789164, 0.40257630460535093, 0.17207450622092868],
    [0.25309535971964403, -0.1435912322119726, 0.2074143340805409, -0.34812851992389215],
    [-1.6336366795935986, 0.8942296751121697, 0.1555871467674669, -0.14330648475972751],
]
GOLDEN_B = [0.8693668136000877, 1.2248534907505269, 3.4392013487983597, 5.731212014252217]
GOLDEN_SHA = "d2e35e683ab2999c1f6da0deef7a5525266d7a2c85853f43bbf31afcfc80caa2"
GOLDEN_LAPLACE_ROW0 = [-0.5577132897828431, 0.813988261765832, 0.48695465561430673, -0.3216100521791252]


def test_rff_weights_golden_vector():
    omega, b = rff_weights(GOLDEN_SEED, "gaussian", "cos", 3, 8, 2.0)
    assert omega.shape == (3, 8) and b.shape == (8,)
    assert omega[:, :4].tolist() == GOLDEN_OMEGA  # exact float equality: bit for bit
    assert b[:4].tolist() == GOLDEN_B
    assert hashlib.sha256(omega.tobytes() + b.tobytes()).hexdigest() == GOLDEN_SHA
    lap, _ = rff_weights(GOLDEN_SEED, "laplacian", "cos", 3, 8, 2.0)
    assert lap[0, :4].tolist() == GOLDEN_LAPLACE_ROW0


def _independent_weights(seed_hex: str, d: int, n: int, bandwidth: float) -> tuple[np.ndarray, np.ndarray]:
    """Re-derivation from the spec text with the cryptography package and math.log (not ltm's code)."""
    def parts(*ps: bytes) -> bytes:
        h = hashlib.shake_256()
        for p in ps:
            h.update(len(p).to_bytes(8, "little") + p)
        return h.digest(32)

    def uniforms(key: bytes, count: int, first: int) -> list[float]:
        enc = Cipher(algorithms.AES(key), modes.CTR((0).to_bytes(16, "big"))).encryptor()
        raw = enc.update(bytes(8 * (first + count)))
        words = [int.from_bytes(raw[8 * i:8 * i + 8], "little") for i in range(first, first + count)]
        return [((w >> 12) + 0.5) * 2.0**-52 for w in words]

    key = parts(b"ltm/transform/rff/v1", bytes.fromhex(seed_hex), b"gaussian", str(d).encode(), str(n).encode())
    out: list[float] = []
    used = 0
    while len(out) < d * n:
        need = (d * n - len(out) + 1) // 2
        k = int(need / 0.78) + 16
        u = uniforms(key, 2 * k, used)
        used += 2 * k
        for v1, v2 in zip(u[:k], u[k:]):
            v1, v2 = 2 * v1 - 1, 2 * v2 - 1
            s = v1 * v1 + v2 * v2
            if 0 < s < 1:
                f = math.sqrt(-2 * math.log(s) / s)
                out += [v1 * f, v2 * f]
    omega = np.array(out[:d * n]).reshape(d, n) / bandwidth
    b = 2 * math.pi * np.array(uniforms(parts(b"ltm/transform/rff/v1/phase", key), n, 0))
    return omega, b


def test_rff_weights_match_an_independent_derivation():
    omega, b = rff_weights(GOLDEN_SEED, "gaussian", "cos", 5, 40, 1.5)
    ind_omega, ind_b = _independent_weights(GOLDEN_SEED, 5, 40, 1.5)
    np.testing.assert_allclose(omega, ind_omega, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(b, ind_b, rtol=1e-15)


def test_exact_log_is_accurate_and_exact_normal_has_unit_moments():
    x = np.concatenate([np.geomspace(1e-300, 1e300, 5001), [0.5, 1.0, 2.0, np.nextafter(1.0, 0.0), 3.0]])
    assert np.all(np.abs(exact_log(x) - np.log(x)) <= 4 * np.spacing(np.abs(np.log(x))) + 1e-300)
    assert exact_log(np.array([1.0]))[0] == 0.0
    with pytest.raises(ValueError):
        exact_log(np.array([0.0]))
    z = exact_normal(RandomStream(bytes(32)), 400_000)
    # mean ~ N(0, 1/n), variance ~ N(1, 2/n): 6σ bounds
    assert abs(z.mean()) < 6 / math.sqrt(z.size)
    assert abs(z.var() - 1) < 6 * math.sqrt(2 / z.size)
    # same keystream and count, same values; another keystream, other values
    assert np.array_equal(exact_normal(RandomStream(bytes(32)), 999), exact_normal(RandomStream(bytes(32)), 999))
    assert not np.array_equal(z[:10], exact_normal(RandomStream(b"\x01" * 32), 10))


@pytest.mark.parametrize("feature_map", ["cos", "sincos"])
@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_features_approximate_their_kernel(kernel, feature_map):
    spec = rff_spec(["a", "b", "c"], n_features=20_000, bandwidth=1.3, seed=bytes(32), kernel=kernel,
                    feature_map=feature_map, output_scale=1.0)
    t = RandomFeatures(spec, 3)
    x = np.random.default_rng(1).normal(size=(6, 3))
    phi = t.apply(x)
    assert phi.shape == (6, 20_000 if feature_map == "cos" else 40_000)
    if feature_map == "sincos":
        np.testing.assert_allclose((phi**2).sum(1), 1.0, rtol=1e-12)  # ‖φ‖ = 1 exactly
    # each entry of ΦΦᵀ is a mean of N bounded terms (|term| ≤ 2): std ≤ 2/√N ≈ 0.014; 6σ < 0.09
    assert np.max(np.abs(phi @ phi.T - t.kernel(x, x))) < 0.09


def test_output_scale_and_validation():
    spec = rff_spec(["a"], n_features=4, bandwidth=1.0, seed=bytes(32), output_scale=3.0, feature_map="sincos")
    phi = RandomFeatures(spec, 1).apply(np.zeros((2, 1)))
    np.testing.assert_allclose((phi**2).sum(1), 9.0)
    bad = [replace(spec, bandwidth=0.0), replace(spec, seed="ab"), replace(spec, kernel="poly"),
           replace(spec, feature_map="relu"), replace(spec, n_features=0), replace(spec, matrix=(1.0,))]
    for b in bad:
        with pytest.raises(TransformError):
            RandomFeatures(b, 1)


# ------------------------------------------------------------------------------------- layout
def _cols():
    return (ColumnSpec("a", "feature", 1.0, 2.0), ColumnSpec("b"), ColumnSpec("c"), ColumnSpec("y", "label", 0.5, 4.0))


def test_vector_layout_replaces_the_inputs_in_place():
    t = rff_spec(["b", "c"], n_features=3, bandwidth=1.0, seed=bytes(32), name="phi")
    entries = vector_layout(_cols(), [t])
    assert [e.name for e in entries] == ["a", "phi0", "phi1", "phi2", "y"]
    assert entries[1].sources == ("b", "c") and entries[1].center == 0.0 and entries[1].scale == 1.0
    assert entries[-1].role == "label" and entries[0].center == 1.0
    with pytest.raises(TransformError, match="not features"):
        vector_layout(_cols(), [replace(t, columns=("b", "y"))])
    with pytest.raises(TransformError, match="not .or no longer. entries"):
        vector_layout(_cols(), [t, replace(t, name="psi")])  # b, c were consumed by the first
    with pytest.raises(TransformError, match="unknown kind"):
        vector_layout(_cols(), [replace(t, kind="nope")])
    with pytest.raises(TransformError, match="clash"):
        vector_layout(_cols() + (ColumnSpec("phi1"),), [t])


def test_pipeline_maps_raw_columns_and_predict_inputs_identically():
    t = rff_spec(["b", "c"], n_features=5, bandwidth=0.7, seed=bytes(32), name="phi")
    pipe = FeaturePipeline(_cols(), [t])
    rng = np.random.default_rng(3)
    raw = {"a": rng.normal(size=7), "b": rng.normal(size=7), "c": rng.normal(size=7), "y": rng.normal(size=7)}
    V = pipe.vectors(raw)
    assert V.shape == (7, 7)
    np.testing.assert_allclose(V[:, 0], (raw["a"] - 1.0) / 2.0)
    np.testing.assert_allclose(V[:, -1], (raw["y"] - 0.5) / 4.0)
    omega, b = rff_weights(bytes(32).hex(), "gaussian", "cos", 2, 5, 0.7)
    expect = math.sqrt(2 / 5) * np.cos(np.column_stack([raw["b"], raw["c"]]) @ omega + b)
    np.testing.assert_allclose(V[:, 1:6], expect, rtol=1e-13)
    F = pipe.features(np.column_stack([raw["a"], raw["b"], raw["c"]]))
    assert np.array_equal(F, V[:, :-1])


# ------------------------------------------------------------------------------------- job spec
def _rff_job(partition: str = "rows", feature_map: str = "cos", n: int = 400, **kw):
    randomness = Randomness.seeded_insecure(f"rff-job-{partition}-{feature_map}")
    stream = randomness.child("data").stream()
    X = stream.normal((n, 4))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2]
    table = Table({**{f"x{j}": X[:, j].copy() for j in range(4)}, "y": y}, "y", "test")
    spec, _ = build_job(table, job_id="rff", randomness=randomness, partition=partition, parties=2, k=3,
                        m=kw.pop("m", 24), s=2, rff=RFFOptions(n_features=6, bandwidth=2.0, feature_map=feature_map),
                        **kw)
    return spec, table, randomness


def test_job_spec_with_transforms_round_trips_and_keeps_old_digests():
    spec, _, _ = _rff_job()
    assert spec.transforms and spec.width == 6 + 1
    assert spec.vector_names[-1] == "y" and spec.label_index == 6
    again = JobSpec.from_json(spec.canonical_json())
    assert again == spec and again.digest == spec.digest
    changed = replace(spec, transforms=(replace(spec.transforms[0], bandwidth=2.5),))
    assert changed.digest != spec.digest
    plain = replace(spec, transforms=())
    assert b"transforms" not in plain.canonical_json()  # specs without transforms hash as before
    assert JobSpec.from_json(plain.canonical_json()) == plain


def test_job_validation_names_transform_problems():
    spec, _, _ = _rff_job()
    bad = replace(spec, transforms=(replace(spec.transforms[0], seed="00"),))
    with pytest.raises(JobSpecError, match="seed must be 64 hex"):
        validate_job(bad)
    bad = replace(spec, transforms=(replace(spec.transforms[0], columns=("x0", "nope")),))
    with pytest.raises(JobSpecError, match="not .or no longer. entries"):
        validate_job(bad)
    with pytest.raises(JobSpecError, match="must be a number"):
        d = json.loads(spec.canonical_json())
        d["transforms"][0]["bandwidth"] = "wide"
        JobSpec.from_dict(d)


def test_columns_partition_refuses_a_transform_across_parties():
    spec, _, _ = _rff_job("columns")
    # build_job gives each party its own transform (an additive kernel): valid
    assert len(spec.transforms) == len([p for p in spec.parties if any(c.startswith("x") for c in p.columns)])
    validate_job(spec)
    joint = TransformSpec(**{**spec.transforms[0].__dict__, "columns": ("x0", "x1", "x2", "x3"), "name": "joint"})
    with pytest.raises(JobSpecError, match="mixes columns of parties"):
        validate_job(replace(spec, transforms=(joint,)))


# ------------------------------------------------------------------------------------- LTM pipeline
@pytest.mark.parametrize("partition,feature_map,kind", [("rows", "cos", "sparse"), ("columns", "sincos", "sparse"),
                                                         ("rows", "sincos", "dense")])
def test_ltm_pipeline_on_mapped_vectors_reconstructs_bit_for_bit(partition, feature_map, kind):
    from tests.helpers.clear_releases import BATCH, clear_release, shares_sum

    spec, table, randomness = _rff_job(partition, feature_map, n=300, kind=kind, m=14 if kind == "dense" else 30)
    tables = party_tables(spec, table)
    run = run_inprocess(spec, tables, randomness, batch_clients=BATCH)
    np.testing.assert_array_equal(shares_sum(run), clear_release(spec, tables, randomness))
    assert run.release.columns == spec.vector_names
    assert run.release.matrix.shape == (spec.sketch.m, spec.width)


def test_ltm_simulate_rf_ridge_cli(capsys):
    from ltm.cli.app import main

    assert main(["simulate", "--synthetic", "nonlinear", "--n", "4000", "--d", "3", "--model", "rf_ridge",
                 "--features-n", "12", "--bandwidth", "1.5", "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == "rf_ridge" and report["transforms"][0]["kind"] == "rff"
    assert report["transforms"][0]["n_features"] == 12 and report["transforms"][0]["bandwidth"] == 1.5
    assert len(report["coef"]) == 12 and math.isfinite(report["metrics"]["mse"])
    assert "NOT private" in report["randomness"]
    # a usage error through the one error mapping: one line, status 2
    assert main(["simulate", "--synthetic", "nonlinear", "--n", "4000", "--features-n", "12"]) == 2
    assert "need --model rf_ridge" in capsys.readouterr().err

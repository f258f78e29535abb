"""The summary's non-private row is what it says: OLS fitted on the exact training rows (not on the
clipped vectors the parties release), in the model's own coordinates (ltm/sim/runtime/simulate.py)."""
from __future__ import annotations

import numpy as np
import pytest

from ltm.analyst.metrics import r2
from ltm.randomness import Randomness
from ltm.sim.runtime.simulate import SimulateConfig, load_table, simulate


def _raw_ols_r2(train, test) -> float:
    """OLS with an intercept on the raw training rows, scored on the held-out rows."""
    feats = [c for c in train.columns if c != train.label]
    X = np.column_stack([train.columns[c] for c in feats] + [np.ones(train.n)])
    w = np.linalg.lstsq(X, train.columns[train.label], rcond=None)[0]
    Xt = np.column_stack([test.columns[c] for c in feats] + [np.ones(test.n)])
    return r2(test.columns[test.label], Xt @ w)


def test_the_nonprivate_row_is_ols_on_the_exact_rows():
    # noisy labels (not an exact linear model), and a clip bound that binds on many rows
    cfg = SimulateConfig(synthetic="nonlinear", n=4000, d=4, seed=3, clip=0.5)
    report = simulate(cfg)
    train, test = load_table(cfg, Randomness.seeded_insecure(3))
    expected = _raw_ols_r2(train, test)
    assert report["baselines"]["nonprivate"]["r2"] == pytest.approx(expected, rel=1e-9, abs=1e-12)

"""Experiment outputs checked against values computed independently (not recorded outputs).

Not among the tests scripts/mutation.py runs for the core modules: each test here runs a whole
experiment cell, which would slow every mutant of the core modules it touches."""
from __future__ import annotations

import numpy as np
import pytest


def test_burkhardt_ridge_phi_of_each_series_against_an_independent_optimum():
    from ltm.experiments import burkhardt, ltmjobs

    params = {"n": 20000, "d": 4, "lam": 1.0, "epsilon": 1000.0, "delta": 1e-5, "scaling": "standardise",
              "m": 100, "series": ["tight", "debiased", "zero", "sketch", "ssp"], "path": "fast"}
    seed = 3
    rows = {r["key"]: r for r in burkhardt.ridge_synthetic(params, seed)}
    # Independent φ of the zero output: 1 + x*ᵀ(AᵀA + λI)x* / OPT from a direct solve on the same rows.
    table = burkhardt.synthetic_ridge_table(params["n"], params["d"], params["scaling"], seed)
    columns = burkhardt._ridge_scaling_columns(table, params["scaling"])
    V = ltmjobs.transform_columns(columns, table, 1.0, "l2")
    A, b, lam = V[:, :-1], V[:, -1], params["lam"]
    H = A.T @ A + lam * np.eye(A.shape[1])
    x_opt = np.linalg.solve(H, A.T @ b)
    opt = float(np.sum((A @ x_opt - b) ** 2) + lam * x_opt @ x_opt)
    assert rows["zero"]["opt_objective"] == pytest.approx(opt, rel=1e-9)
    phi_zero = 1 + float(x_opt @ H @ x_opt) / opt
    assert rows["zero"]["phi"] == pytest.approx(phi_zero, rel=1e-9)
    # At ε = 1000 the LTM releases are nearly noiseless: every private series must recover most of
    # the gap between the zero output and the optimum (a coefficient vector scaled by 0, negated
    # or left unfitted gives φ ≥ φ_zero).
    for key in ("tight", "debiased", "sketch", "ssp"):
        assert 1.0 <= rows[key]["phi"] < 1 + 0.01 * (phi_zero - 1), (key, rows[key]["phi"], phi_zero)

"""Cao & Zhang's public second moment (ltm.second_moment, ltm.analyst.public_moment): the whitening round
trip, DP-PMTOLSE's calibration cross-checked independently (sensitivities by brute force, zCDP by
dp_accounting's RDP accountant and by the exact Gaussian-mechanism δ), the noise it really adds, the
non-private baseline's labels, and the white-wine loader.

Everything is seeded; the one distributional test has flake probability < 1e-6.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from ltm.analyst.public_moment import (
    NotPrivateWarning,
    dp_olse,
    dp_pmt_olse,
    dp_pmtse,
    olse_sigmas,
    pmt,
    pmt_olse_sigmas,
)
from ltm.dp.calibration import gaussian_delta
from ltm.second_moment import (
    PublicSecondMoment,
    epsilon_to_zcdp,
    inv_sqrt_spd,
    kappa_bar,
    pmt_radius,
    zcdp_gaussian_sigma,
    zcdp_to_epsilon,
)


def _spd(d: int, rng: np.random.Generator, cond: float = 50.0) -> np.ndarray:
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


def _design(n: int, d: int, seed: int):
    from ltm.experiments.cao_zhang import synthetic_design, synthetic_rows

    rng = np.random.default_rng(seed)
    mu, psi = synthetic_design(d)
    beta = rng.standard_normal(d)
    A, y = synthetic_rows(n, beta, mu, np.linalg.cholesky(psi), 0.05, rng)
    B, yB = synthetic_rows(200, beta, mu, np.linalg.cholesky(psi), 0.05, rng)
    return A, y, B, yB, beta


# ------------------------------------------------------------------------------ whitening round trip
def test_whitening_matrix_is_the_symmetric_inverse_root():
    rng = np.random.default_rng(0)
    S = _spd(6, rng, cond=1e4)
    M = inv_sqrt_spd(S)
    assert np.allclose(M, M.T, atol=0)
    assert np.allclose(M @ S @ M, np.eye(6), atol=1e-9)
    assert kappa_bar(np.diag([1.0, 2.0, 3.0])) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="not positive definite"):
        PublicSecondMoment.from_public_data(rng.standard_normal((4, 6)), np.ones(4))  # n_B < d
    pinv = PublicSecondMoment.from_public_data(rng.standard_normal((4, 6)), np.ones(4), eig_floor=1e-10)
    assert np.linalg.matrix_rank(pinv.whitening) == 4


def test_central_round_trip_recovers_ols_exactly_without_noise():
    """Whiten, solve in whitened coordinates, map back: exactly the OLS of the raw data (OLS is
    affine-equivariant, Eq. (1)).  With no row clipped and negligible noise (ρ = 1e30),
    DP-PMTOLSE returns the same coefficients."""
    rng = np.random.default_rng(1)
    n, d = 3000, 5
    A = rng.standard_normal((n, d)) @ np.linalg.cholesky(_spd(d, rng, 30.0)).T + 0.7
    y = A @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    B = rng.standard_normal((400, d)) @ np.linalg.cholesky(_spd(d, rng, 30.0)).T  # a DIFFERENT distribution
    pub = PublicSecondMoment.from_public_data(B, 3.0 * rng.standard_normal(400))
    ols = np.linalg.lstsq(A, y, rcond=None)[0]
    At, yt = pub.whiten(A), pub.scale_label(y)
    assert np.allclose(pub.coef_back(np.linalg.lstsq(At, yt, rcond=None)[0]), ols, rtol=1e-10, atol=1e-12)
    # Through Alg. 3 itself; use the data's own second moment (and twice the label RMS) so that no
    # row is clipped: then only the negligible noise separates it from OLS.
    own = PublicSecondMoment(A.T @ A / n, 2.0 * float(np.sqrt(np.mean(y**2))))
    res = dp_pmt_olse(A, y, own, 1e30, np.random.default_rng(2))
    assert res.clipped_features == 0 and res.clipped_labels == 0 and not res.failed
    assert np.allclose(res.coef, ols, rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------------------ calibration
def test_calibration_hand_values():
    """Alg. 3 (Cao & Zhang §3.3) by hand: d = 10, n_A = 3000, η = 0.05, ρ = 2 → σ₁ = 0.04232, σ₂ = 0.01338."""
    cal = pmt_olse_sigmas(10, 3000, 2.0)
    assert cal["sigma_gram"] == pytest.approx(0.04232, abs=5e-6)
    assert cal["sigma_moment"] == pytest.approx(0.01338, abs=5e-6)
    assert (cal["R_x"], cal["R_y"]) == (pytest.approx(11.27, abs=5e-3), pytest.approx(3.56, abs=5e-3))
    cal = pmt_olse_sigmas(10, 10000, 10.0)
    assert cal["sigma_gram"] == pytest.approx(0.0062, abs=5e-5) and cal["sigma_moment"] == pytest.approx(0.0020, abs=5e-5)
    # Independent recomputation from Alg. 3's formulas (Theorem 3's proof), not via the module's helpers.
    for d, n, rho in ((10, 3000, 2.0), (11, 4649, 5.0), (3, 50, 0.1)):
        Ln = math.log(2 * n / 0.05)
        cal = pmt_olse_sigmas(d, n, rho)
        assert cal["sigma_gram"] == pytest.approx(2 * d * (1 + Ln) / (math.sqrt(2 * rho) * n), rel=1e-12)
        assert cal["sigma_moment"] == pytest.approx(2 * math.sqrt(d) * (1 + Ln) / (math.sqrt(2 * rho) * n), rel=1e-12)
        tight = pmt_olse_sigmas(d, n, rho, gram_sensitivity="tight")
        assert tight["sigma_gram"] == pytest.approx(cal["sigma_gram"] / math.sqrt(2), rel=1e-12)
    ol = olse_sigmas(10, 3000, 2.0, trace=26.0, label_ms=9.0)
    Ln = math.log(2 * 3000 / 0.05)
    assert ol["sigma_gram"] == pytest.approx(2 * (26 + 10 * Ln) / (2 * 3000), rel=1e-12)
    assert ol["sigma_moment"] == pytest.approx(2 * math.sqrt((26 + 10 * Ln) * (9 + Ln)) / (2 * 3000), rel=1e-12)


def _statistics(X: np.ndarray, y: np.ndarray, pub: PublicSecondMoment):
    """The two released statistics of Alg. 3 before noise, recomputed here from pmt()."""
    n = X.shape[0]
    At, _, _ = pmt(X, pub.whitening)
    yt, _, _ = pmt(pub.scale_label(y)[:, None], np.ones((1, 1)), n=n)
    return At.T @ At / n, At.T @ yt[:, 0] / n


def test_sensitivities_hold_on_neighbours_and_are_attained():
    """Brute force over replace-one neighbours: the Frobenius change of ÃᵀÃ/n never exceeds
    Δ₁ = 2R_x²/n (and √2·R_x²/n, the tight bound, is reached by orthogonal rows at the radius);
    the change of Ãᵀỹ/n never exceeds Δ₂ = 2R_xR_y/n and reaches it for x' = −x at the radii."""
    rng = np.random.default_rng(3)
    n, d = 40, 4
    pub = PublicSecondMoment(_spd(d, rng, 20.0), 2.5)
    cal = pmt_olse_sigmas(d, n, 1.0)
    base_X, base_y = rng.standard_normal((n, d)), rng.standard_normal(n)
    worst_g = worst_m = 0.0
    for _ in range(300):
        X, y = base_X.copy(), base_y.copy()
        X2, y2 = X.copy(), y.copy()
        i = int(rng.integers(n))
        scale = 10.0 ** rng.uniform(-1, 3)  # from tiny rows to rows far outside the radius
        X[i], y[i] = scale * rng.standard_normal(d), scale * rng.standard_normal()
        X2[i], y2[i] = scale * rng.standard_normal(d), scale * rng.standard_normal()
        G1, m1 = _statistics(X, y, pub)
        G2, m2 = _statistics(X2, y2, pub)
        worst_g = max(worst_g, np.linalg.norm(G1 - G2))
        worst_m = max(worst_m, np.linalg.norm(m1 - m2))
    assert worst_g <= cal["delta_gram"] * (1 + 1e-12) and worst_m <= cal["delta_moment"] * (1 + 1e-12)
    # Attained: rows at the radius in whitened space, built by un-whitening chosen whitened vectors.
    Sroot = np.linalg.inv(pub.whitening)  # Σ^{1/2}: whiten(x) = M x
    rx, ry = cal["R_x"], cal["R_y"]
    e1, e2 = np.eye(d)[0], np.eye(d)[1]
    X, y = base_X.copy(), base_y.copy()
    X2, y2 = X.copy(), y.copy()
    X[0], X2[0] = Sroot @ (rx * e1), Sroot @ (rx * e2)
    G1, _ = _statistics(X, y, pub)
    G2, _ = _statistics(X2, y2, pub)
    assert np.linalg.norm(G1 - G2) == pytest.approx(math.sqrt(2) * rx**2 / n, rel=1e-9)
    X2[0], y[0], y2[0] = -X[0], ry * pub.label_rms, ry * pub.label_rms
    _, m1 = _statistics(X, y, pub)
    _, m2 = _statistics(X2, y2, pub)
    assert np.linalg.norm(m1 - m2) == pytest.approx(cal["delta_moment"], rel=1e-9)


@pytest.mark.parametrize("rho", [0.01, 2.0, 10.0, 500.0])
def test_total_privacy_cross_checked_independently(rho):
    """The two Gaussian releases (σ_k = Δ_k/√(2ρ)) together are 2ρ-zCDP.  Checked (a) with
    dp_accounting's RDP accountant, which sees only the noise multipliers σ_k/Δ_k, and (b) with the
    exact Gaussian-mechanism δ (Balle & Wang) of the composition, a Gaussian of Δ/σ = √(4ρ): the
    reported ε(δ) is a valid bound and within 25% of the accountant's tighter conversion."""
    import dp_accounting  # a core dependency: a missing one fails, it does not skip
    cal = pmt_olse_sigmas(10, 3000, rho)
    # Orders from just above 1 (a large ρ needs α near 1) up to 10⁴.
    orders = np.concatenate([1.0 + np.geomspace(1e-5, 1.0, 300), np.geomspace(2.0, 1e4, 300)])
    acc = dp_accounting.rdp.RdpAccountant(list(orders))
    for key in ("gram", "moment"):
        acc.compose(dp_accounting.GaussianDpEvent(cal[f"sigma_{key}"] / cal[f"delta_{key}"]))
    for delta in (1e-5, 1e-9):
        ours = zcdp_to_epsilon(2 * rho, delta)
        theirs = acc.get_epsilon(delta)
        assert theirs <= ours * (1 + 1e-9) and ours <= 1.25 * theirs
        assert gaussian_delta(1.0, ours, math.sqrt(4 * rho)) <= delta * (1 + 1e-9)
    # The result object reports the same numbers.
    A, y, B, yB, _ = _design(3000, 10, 5)
    res = dp_pmt_olse(A, y, PublicSecondMoment.from_public_data(B, yB), rho, np.random.default_rng(0))
    assert res.rho_total == 2 * rho and res.epsilon(1e-5) == zcdp_to_epsilon(2 * rho, 1e-5)
    assert res.sigmas == {"gram": cal["sigma_gram"], "moment": cal["sigma_moment"]}


def test_zcdp_conversions_match_the_spec_table():
    assert zcdp_to_epsilon(4.0, 1e-5) == pytest.approx(17.6, abs=0.05)  # ρ = 2 per statistic
    assert zcdp_to_epsilon(1000.0, 1e-5) == pytest.approx(1214.6, abs=0.05)
    assert zcdp_to_epsilon(100.0, 1e-6) == pytest.approx(174.3, abs=0.05)
    for eps in (0.1, 1.0, 8.0):
        assert zcdp_to_epsilon(epsilon_to_zcdp(eps, 1e-5), 1e-5) == pytest.approx(eps, rel=1e-12)
    assert epsilon_to_zcdp(1.0, 1e-5) == pytest.approx(0.0208, abs=1e-4)
    assert zcdp_gaussian_sigma(2.0, 0.5) == pytest.approx(2.0)


def test_released_noise_has_the_calibrated_variance():
    """Alg. 3's two releases carry noise of variance σ₁² on AND off the diagonal of the Gram (a
    (Z+Zᵀ)/2 sampler would halve the off-diagonal: a privacy bug) and σ₂² on the moment; Alg. 2's
    Gram noise likewise.  χ² tests at two-sided significance 1e-7 each (12 tests: flake < 1e-6)."""
    rng = np.random.default_rng(11)
    n, d, rho, reps = 60, 3, 0.5, 3000
    X, y = rng.standard_normal((n, d)), rng.standard_normal(n)
    pub = PublicSecondMoment(np.eye(d), 1.0)
    G0, m0 = _statistics(X, y, pub)
    cal = pmt_olse_sigmas(d, n, rho)
    noise_rng = np.random.default_rng(12)
    gram, mom, gram2 = [], [], []
    for _ in range(reps):
        res = dp_pmt_olse(X, y, pub, rho, noise_rng)
        gram.append(res.noisy_gram - G0)
        mom.append(res.noisy_moment - m0)
        assert np.allclose(res.coef_whitened, np.linalg.solve(res.noisy_gram, res.noisy_moment))
        gram2.append(dp_pmtse(X, pub, rho, noise_rng)[0] - G0)
    lo, hi = stats.chi2.ppf([5e-8, 1 - 5e-8], reps)
    for E in (np.array(gram), np.array(gram2)):
        assert np.allclose(E, np.transpose(E, (0, 2, 1)))
        for i in range(d):
            for j in range(i, d):
                ss = float(np.sum(E[:, i, j] ** 2)) / cal["sigma_gram"] ** 2
                assert lo < ss < hi, (i, j, ss / reps)
    M = np.array(mom)
    lo, hi = stats.chi2.ppf([5e-8, 1 - 5e-8], M.size)
    assert lo < float(np.sum(M**2)) / cal["sigma_moment"] ** 2 < hi


# ------------------------------------------------------------------------------ baseline and labels
def test_private_oracle_baseline_is_loudly_not_dp():
    A, y, B, yB, _ = _design(2000, 10, 6)
    pub = PublicSecondMoment.from_public_data(B, yB)
    with pytest.warns(NotPrivateWarning, match="NOT DP"):
        res = dp_olse(A, y, 2.0, np.random.default_rng(0), radius_source="private_oracle")
    assert res.is_dp is False and "NOT DP" in res.label and res.epsilon(1e-5) == math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)  # the default must not be the oracle
        res = dp_olse(A, y, 2.0, np.random.default_rng(0), public=pub)
    assert res.is_dp and res.radii["features"] == pytest.approx(
        math.sqrt(np.trace(pub.sigma) + 10 * math.log(2 * 2000 / 0.05)))
    with pytest.raises(ValueError, match="needs the public second moment"):
        dp_olse(A, y, 2.0, np.random.default_rng(0))
    with pytest.raises(TypeError):
        dp_pmt_olse(A, y, pub, 2.0, rng=0)  # type: ignore[arg-type]


def test_pmt_clips_in_whitened_space_at_the_public_radius():
    rng = np.random.default_rng(8)
    S = _spd(5, rng, 100.0)
    X = rng.standard_normal((500, 5)) * 3.0
    M = inv_sqrt_spd(S)
    Xt, clipped, radius = pmt(X, M)
    assert radius == pytest.approx(pmt_radius(5, 500))
    norms_before = np.linalg.norm(X @ M, axis=1)
    assert clipped == int(np.sum(norms_before > radius)) > 0
    assert np.all(np.linalg.norm(Xt, axis=1) <= radius * (1 + 1e-12))
    inside = norms_before <= radius
    assert np.array_equal(Xt[inside], (X @ M)[inside])  # untouched bit for bit


def test_pmt_beats_the_papers_baseline_on_the_calibrated_design():
    """The trend of the paper's Fig. 1 (§4.1), fixed seeds: n_A = 10000, ρ = 10, n_B = 20: the mean
    DP-PMTOLSE error is below half the paper's DP-OLSE error (a prototype measured 0.15 vs 0.61)."""
    from ltm.experiments.cao_zhang import S_ORACLE, S_PMT, synthetic_cell

    errs: dict[str, list[float]] = {S_PMT: [], S_ORACLE: []}
    for seed in range(12):
        for r in synthetic_cell({"n_A": 10000, "rho": 10, "methods": ["pmt", "oracle"]}, seed):
            errs[r["series"]].append(r["err"])
    assert np.mean(errs[S_PMT]) < 0.5 * np.mean(errs[S_ORACLE])


# ------------------------------------------------------------------------------ wine data
def test_white_wine_loader_both_separators_and_checks(tmp_path):
    from ltm.datasets.tables import DataError
    from ltm.experiments import cao_zhang

    table, header = cao_zhang.load_white_wine()
    assert table.shape == (4898, 12) and header[-1] == "quality"
    assert table[cao_zhang.WINE_OUTLIER_ROW, 3] == 65.8 and table[cao_zhang.WINE_OUTLIER_ROW, 7] == 1.03898
    text = (cao_zhang.DATA_DIR / cao_zhang.WINE_FILE).read_text()
    comma = tmp_path / "white.csv"
    comma.write_text(text.replace(";", ",").replace('"', ""))
    assert np.array_equal(cao_zhang.load_white_wine(comma)[0], table)
    short = tmp_path / "short.csv"
    short.write_text("\n".join(text.splitlines()[:100]) + "\n")
    with pytest.raises(DataError, match="rows"):
        cao_zhang.load_white_wine(short)
    split = cao_zhang.wine_split(True, 7)
    assert split["B"].shape == (249, 11) and split["A"].shape == (4648, 11)


def test_medians_digest_of_a_reduced_run(tmp_path):
    """The committed digest (medians.csv) of a run: one row per group with its median and counts."""
    from ltm.experiments import cao_zhang
    from ltm.experiments.runner import run_experiment

    out = tmp_path / "fig4"
    run_experiment("cao_zhang_fig4", out, reduced=True, progress=False, plots=False, command="pytest")
    assert cao_zhang.write_medians(out / "results.csv", tmp_path / "m.csv", ["rho", "n_A", "series"]) == 2 * 4
    import csv as _csv

    rows = list(_csv.DictReader((tmp_path / "m.csv").open()))
    assert {r["count"] for r in rows} == {"2"} and all(float(r["median"]) >= 0 for r in rows)
    ols = [r for r in rows if r["series"] == cao_zhang.S_OLS and r["n_A"] == "4649"]
    assert float(ols[0]["median"]) < 1e-12  # every private row: exactly the reference OLS

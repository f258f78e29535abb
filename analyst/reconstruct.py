"""Reconstruction: sum the servers' result shares, decode, scale, and state what privacy was bought."""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ltm.analyst.release import ReleasedSketch
from ltm.client_set import ClientSet
from ltm.dp import accounting
from ltm.dp.calibration import NoisePlan, gaussian_delta
from ltm.dp.noise import laplace_element_pieces
from ltm.dp.polya import polya_variance
from ltm.jobspec import JobSpec, honest_row_loads, participant_set, range_row_loads
from ltm.lifts import get_lift
from ltm.ring import decode
from ltm.sharing import reconstruct
from ltm.sketch import Sketch


def release_sha256(total: np.ndarray) -> str:
    """Hex SHA-256 of the reconstructed uint64 sketch, little-endian, row-major."""
    return hashlib.sha256(np.ascontiguousarray(total, dtype="<u8").tobytes()).hexdigest()


def tolerated(t_prime: int, corrupt_parties: int) -> str:
    """"up to 2 corrupt clients and 1 corrupt party" — the corruption a guarantee holds against;
    "" when nothing beyond the servers is tolerated (a zero tolerance is not named as one)."""
    def count(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    parts = ([count(t_prime, "corrupt client", "corrupt clients")] if t_prime > 0 else []) + \
        ([count(corrupt_parties, "corrupt party", "corrupt parties")] if corrupt_parties > 0 else [])
    return "up to " + " and ".join(parts) if parts else ""


def _achieved_privacy(spec: JobSpec, plan: NoisePlan, honest: int) -> tuple[float, float, bool]:
    """(achieved ε, achieved δ, calibration holds) when the weakest release entry carries the noise
    of ``honest`` honest (client, piece) draws.

    Check, do not trust, the calibration: what (ε, δ) do ``honest`` draws buy for the stated sensitivity?
    """
    p = spec.privacy
    achieved_epsilon = p.epsilon
    if plan.mechanism == "gaussian" and plan.on_grid:
        # the distributed discrete Gaussian's zCDP over the `honest` draws (ltm.dp.accounting), by the accountant
        if honest > 0:
            rho = accounting.kls_rho(float(np.sqrt(plan.grid_sigma2)), honest, plan.grid_sensitivity,
                                     plan.grid_l1_sensitivity)
            achieved_epsilon = accounting.zcdp_epsilon(rho, p.delta)
            achieved_delta = min(1.0, accounting.zcdp_delta(rho, p.epsilon))
        else:
            achieved_epsilon, achieved_delta = float("inf"), 1.0
        verified = achieved_delta <= p.delta * (1 + 1e-9)
    elif plan.mechanism == "gaussian":
        sigma_weakest = plan.sigma_client * float(np.sqrt(max(honest, 0)))
        achieved_delta = gaussian_delta(sigma_weakest, p.epsilon, plan.sensitivity) if honest > 0 else 1.0
        verified = achieved_delta <= p.delta * (1 + 1e-9)
    else:
        achieved_delta = 0.0
        verified = honest >= round(1.0 / plan.gamma_shape) and plan.sensitivity / plan.laplace_scale <= p.epsilon * (1 + 1e-9)
    return achieved_epsilon, achieved_delta, verified


def _guarantee(spec: JobSpec, achieved_delta: float, calibration_verified: bool, verified: bool,
               seeded: list[str], randomness: str) -> str:
    """The report's one-sentence guarantee: what holds against whom, or why it does not."""
    p = spec.privacy
    who = tolerated(p.t_prime if spec.partition == "rows" else 0, p.corrupt_parties)
    if who and spec.partition == "columns":
        who += " (covering the honest parties' columns)"
    if verified:
        guarantee = (f"({p.epsilon:g}, {achieved_delta:.3g})-DP per client (replace-one), against any {spec.k - 1} of "
                     f"{spec.k} servers" + (f" together with {who}" if who else ""))
    elif calibration_verified:
        guarantee = (f"NOT private: the noise of parties {seeded} was drawn from seeded (reproducible) randomness, "
                     f"so anyone who knows the seed can remove it" if seeded else
                     f"NOT private: seeded randomness (reproduction run); calibrated for ({p.epsilon:g}, "
                     f"{achieved_delta:.3g})-DP had the noise been private")
    else:
        guarantee = (f"NOT ({p.epsilon:g}, {p.delta:g})-DP: the weakest release entry's honest noise only gives "
                     f"δ = {achieved_delta:.3g} at ε = {p.epsilon:g}")
    if p.calibration == "paper":
        guarantee += " [calibration 'paper': Burkhardt et al. Cor 4.7/4.10 as printed, reproduction mode]"
    if randomness.startswith("seeded") and not seeded:
        guarantee += " — seeded randomness: NOT private, for experiments only"
    return guarantee


def privacy_report(spec: JobSpec, plan: NoisePlan, participants: ClientSet | np.ndarray, *, randomness: str,
                   sketch: Sketch | None = None, seeded_parties: Sequence[str] = ()) -> dict[str, Any]:
    """The privacy report of a release over ``participants`` (a ClientSet; a bool mask (n,) is accepted).

    ``calibration_verified``: the weakest row's honest noise buys the stated (ε, δ).
    ``dp_verified``: that, and no party drew seeded (reproducible, NOT private) randomness — the
    servers report every party that uploaded seeded batches (``seeded_parties``; possible only in a
    job marked as a reproduction), and a release with any is never reported as DP.
    """
    participants = participant_set(spec.n, participants)
    loads, deduction = honest_row_loads(spec, participants, sketch)
    honest = int((loads - deduction).min())
    p = spec.privacy
    achieved_epsilon, achieved_delta, verified = _achieved_privacy(spec, plan, honest)
    seeded = sorted(set(seeded_parties))
    calibration_verified = bool(verified)
    verified = calibration_verified and not seeded and not randomness.startswith("seeded")
    guarantee = _guarantee(spec, achieved_delta, calibration_verified, verified, seeded, randomness)
    return {
        "mechanism": plan.mechanism,
        "epsilon": p.epsilon,
        "delta": p.delta,
        "calibration": p.calibration if p.calibration != "interpolate" else f"interpolate({p.interpolate_p:g})",
        "clip_norm": spec.clip_bound,
        "clip_kind": spec.clip_norm,
        "sensitivity_l2" if plan.mechanism == "gaussian" else "sensitivity_l1": plan.sensitivity,
        "sigma_client": plan.sigma_client,
        "sigma_release": plan.sigma_release,
        "laplace_scale": plan.laplace_scale,
        "promised_min_honest_load": p.min_honest_load,
        "min_honest_load": honest,
        "min_row_load": int(loads.min()),
        "t_prime": p.t_prime,
        "corrupt_parties": p.corrupt_parties,
        "servers": spec.k,
        "participants": participants.count,
        "achieved_delta": achieved_delta,
        "achieved_epsilon": achieved_epsilon,
        # the grid the parties rounded to and the per-client noise in grid steps (docs/architecture.md)
        "frac_bits": plan.frac_bits,
        "grid_step": 2.0 ** -plan.frac_bits if plan.on_grid else 0.0,
        "noise_grid_sd": plan.grid_noise_sd if plan.on_grid else 0.0,
        "rounding_widening": plan.rounding_widening,
        "calibration_verified": calibration_verified,
        "dp_verified": bool(verified),
        "reproduction": spec.reproduction,
        "seeded_parties": seeded,
        "randomness": randomness,
        "guarantee": guarantee,
    }


def draw_variance(plan: NoisePlan) -> float:
    """The variance (data units²) of one (client, piece) noise draw of ``plan``, before any
    per-entry factor: σ_c² for the Gaussian (the σ_c the sampler draws with); for a grid Laplace
    plan the exact variance of its Pólya piece NB(1/P, p) − NB(1/P, p), ``2p/(P·(1 − p)²)`` grid
    steps² with p = e^(-1/t) and P = ``plan.laplace_pieces`` (P = 1: DLap(t) itself)."""
    if plan.mechanism == "laplace" and plan.on_grid:
        return math.ldexp(polya_variance(plan.grid_scale, 1.0 / plan.laplace_pieces), -2 * plan.frac_bits)
    return plan.sigma_client**2


def _column_draws(spec: JobSpec, plan: NoisePlan, participants: ClientSet, sketch: Sketch) -> float:
    """``Σ_r draws_r / pieces``: the (client, piece) draws one column of the scaled release sums up
    (draws_r: the draws in each entry of row r; the scale 1/√pieces squared).

    One per participating (client, piece), so ``count`` — the aggregate upload's Gaussian draw of
    multiplicity load_r has the variance of load_r draws — except the aggregate upload's Laplace:
    a party whose clients reach a row load_r times draws the share of min(load_r, P) pairs
    (:func:`ltm.dp.noise.laplace_element_pieces`), every party in the rows partition, only a
    column's owner in the columns partition."""
    if not (spec.aggregated and spec.privacy.mechanism == "laplace"):
        return float(participants.count)
    ranges = [(p.start, p.stop) for p in spec.parties] if spec.partition == "rows" else [(0, spec.n)]
    total = 0
    for start, stop in ranges:
        if not participants.intersects(start, stop):
            continue
        if sketch.kind in ("sum", "dense"):  # every client reaches every row
            total += sketch.m * int(laplace_element_pieces(plan, participants.count_in(start, stop)))
        else:
            total += int(laplace_element_pieces(plan, range_row_loads(sketch, start, stop, participants)).sum())
    return total * sketch.scale**2


def release_noise_variance(spec: JobSpec, plan: NoisePlan, participants: ClientSet,
                           sketch: Sketch) -> tuple[float, np.ndarray | None]:
    """What a release states about its noise: ``(noise_variance_per_column, entry_noise_variance)``
    of :class:`~ltm.analyst.release.ReleasedSketch`, from the plan the parties drew with and who drew.

    A sketch: ``Σ_r draws_r·Var(draw)/pieces`` (the scale 1/√pieces applied) = E[NᵀN]_cc, and None
    (per-client uploads: ``participants·σ_c²``).
    A lifted kind (one row): each entry's ``draws·Var(draw)·factor_j`` (the plan's per-entry
    ``noise_factors``: the Gaussian gram's ½ off the diagonal; Laplace draws are i.i.d.), and its
    largest value as the per-column number."""
    column = _column_draws(spec, plan, participants, sketch) * draw_variance(plan)
    if get_lift(spec.sketch.kind) is None:
        return float(column), None
    # one release row (m = s = 1): the column's draws are the row's
    factors = np.ones(spec.upload_width) if plan.noise_factors is None else np.asarray(plan.noise_factors)
    entries = column * factors
    return float(entries.max(initial=0.0)), entries


def reconstruct_release(spec: JobSpec, result_shares: list[np.ndarray], participants: ClientSet | np.ndarray,
                        plan: NoisePlan, *, randomness: str, sketch: Sketch | None = None,
                        seeded_parties: Sequence[str] = ()) -> ReleasedSketch:
    """Sum k result shares (uint64 (m, W) each) into the scaled DP sketch Ã = (1/√pieces)·decode(Σ).

    For a lifted kind (m = 1, one piece) this is the noisy sum of the clients' lifted vectors.
    ``participants``: the released-over set (a ClientSet; a bool mask (n,) is accepted).
    ``seeded_parties``: the parties the servers saw upload seeded batches (see :func:`privacy_report`)."""
    if len(result_shares) != spec.k:
        raise ValueError(f"need all {spec.k} result shares, got {len(result_shares)}")
    sketch = sketch or spec.make_sketch()
    total = reconstruct(list(result_shares))
    matrix = decode(total, spec.frac_bits) * sketch.scale
    participants = participant_set(spec.n, participants)
    count = participants.count
    per_column, entries = release_noise_variance(spec, plan, participants, sketch)
    privacy = privacy_report(spec, plan, participants, randomness=randomness, sketch=sketch,
                             seeded_parties=seeded_parties)
    privacy["noise_variance_per_column"] = per_column  # what the release states (ReleasedSketch)
    if entries is not None:
        privacy["entry_noise_variance"] = entries.tolist()
    return ReleasedSketch(
        matrix=matrix,
        columns=spec.vector_names,
        centers=np.array([e.center for e in spec.layout]),
        scales=np.array([e.scale for e in spec.layout]),
        label=spec.label_index,
        intercept=spec.intercept_index,
        n=count,
        noise_variance_per_column=per_column,
        privacy=privacy,
        sha256=release_sha256(total),
        kind=spec.sketch.kind,
        entry_noise_variance=entries,
    )

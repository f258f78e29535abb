"""The analyst's side of the replicated degree-2 release: three output shares → a ``gram`` release.

The sum of the servers' output shares is triu(ẐᵀẐ) + Σ_p e_p on the grid 2^-2f (ltm/replicated.py).
It is returned as a :class:`~ltm.analyst.release.ReleasedSketch` of kind ``gram`` (the unweighted
triangle, the gram release's own layout: ltm/lifts.py), so every gram estimator fits it unchanged.  Its noise is i.i.d.
per triangle entry: each of the P parties adds one N_Z(0, σ_c²) draw to each entry, so every Gram
entry, diagonal and off-diagonal alike, carries variance v = P·σ_c² (the rows gram's Gaussian noise
has v/2 off the diagonal).  The release states exactly that, ``entry_noise_variance = v`` for each
of the W entries (``noise_variance_per_column = v``), and so does its privacy report
(``noise_variance_per_entry``, ``entry_noise_variance``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ltm.analyst.reconstruct import draw_variance, reconstruct_release
from ltm.analyst.release import ReleasedSketch
from ltm.client_set import ClientSet
from ltm.dp import accounting
from ltm.jobspec import JobSpec
from ltm.replicated import noise_known_parties, reconstruct_triangle
from ltm.verified_clipping import ClippingProofFailed, check_failures


def replicated_privacy_report(spec: JobSpec, *, randomness: str, seeded_parties: Sequence[str] = ()) -> dict[str, Any]:
    """What the replicated release guarantees, against whom, and how it was checked.  A release
    with any party's seeded (reproducible, NOT private) uploads (``seeded_parties``, as the servers
    report them) is never DP, whatever ``randomness`` the operator declared."""
    plan = spec.noise_plan()
    p = spec.privacy
    honest = len(spec.parties) - noise_known_parties(len(spec.parties), p.corrupt_parties)
    rho = accounting.kls_rho(math.sqrt(plan.grid_sigma2), honest, plan.grid_sensitivity, plan.grid_l1_sensitivity)
    achieved_delta = min(1.0, accounting.zcdp_delta(rho, p.epsilon))
    calibrated = achieved_delta <= p.delta * (1 + 1e-9)
    seeded = randomness.startswith("seeded") or bool(seeded_parties)
    t = spec.tolerated_colluding_servers
    guarantee = (f"({p.epsilon:g}, {achieved_delta:.3g})-DP per client (replace-one), against at most {t} of "
                 f"{spec.k} servers (an honest majority: two colluding servers reconstruct the data) "
                 + (f"together with up to {p.corrupt_parties} corrupt parties (every party's clipping verified "
                    f"on the shares, a cheater passing with probability ≤ 2^-40)" if p.corrupt_parties else
                    "provided every party follows the protocol (nothing checks that a party's shares are "
                    "clipped, issue #30; one party may know its own noise)"))
    return {
        "release": "replicated degree-2 (columns partition)",
        "mechanism": str(plan.mechanism), "calibration": str(plan.calibration),
        "epsilon": p.epsilon, "delta": p.delta, "achieved_delta": achieved_delta, "zcdp_rho": rho,
        "sensitivity": plan.sensitivity, "sigma_party": plan.sigma_client,
        "noise_variance_per_entry": len(spec.parties) * draw_variance(plan),
        "honest_noise_draws": honest, "parties": len(spec.parties), "corrupt_parties": p.corrupt_parties,
        "colluding_servers": t, "servers": spec.k, "frac_bits": spec.frac_bits,
        "verified_clipping": bool(spec.verified_clipping),
        "product_frac_bits": plan.frac_bits,
        "calibration_verified": bool(calibrated),
        "dp_verified": bool(calibrated and not seeded),
        "guarantee": guarantee if not seeded else "NOT private: seeded (reproducible) randomness; " + guarantee,
        "randomness": randomness,
        "seeded_parties": sorted(set(seeded_parties)),
    }


def clipping_verdict(spec: JobSpec, shares: list[dict[str, np.ndarray]]) -> None:
    """The analyst's reading of the clipping checks (issue #30): every party's three re-randomised
    check shares must add up to 0 (copy consistency is inside the check).  Raises
    :class:`ltm.verified_clipping.ClippingProofFailed` naming every party that fails (the same
    decision each server's gate makes on its own, so a lying analyst releases nothing either)."""
    failures = check_failures([p.party_id for p in spec.parties], shares)
    if failures:
        raise ClippingProofFailed(failures)


def replicated_release(spec: JobSpec, outputs: list[np.ndarray], *, randomness: str,
                       seeded_parties: Sequence[str] = ()) -> ReleasedSketch:
    """The ``gram`` release from the three servers' output shares (module docstring)."""
    triangle, digest = reconstruct_triangle(outputs, spec.frac_bits)
    vector = triangle  # the unweighted upper triangle: the gram release's own layout (ltm/lifts.py)
    privacy = replicated_privacy_report(spec, randomness=randomness, seeded_parties=seeded_parties)
    # every party adds one draw to every entry, diagonal or not (ltm/replicated.py)
    entries = np.full(vector.shape[0], privacy["noise_variance_per_entry"])
    privacy["noise_variance_per_column"], privacy["entry_noise_variance"] = float(entries.max()), entries.tolist()
    return ReleasedSketch(
        matrix=vector[None, :], columns=spec.vector_names,
        centers=np.array([e.center for e in spec.layout]), scales=np.array([e.scale for e in spec.layout]),
        label=spec.label_index, intercept=spec.intercept_index, n=spec.n,
        noise_variance_per_column=privacy["noise_variance_per_column"], privacy=privacy, sha256=digest,
        kind="gram", entry_noise_variance=entries,
    )


def release_from_shares(spec: JobSpec, shares: list[np.ndarray], participants: ClientSet, *, randomness: str,
                        seeded_parties: Sequence[str] = ()) -> ReleasedSketch:
    """The release from the servers' result shares, whichever kind the job is: the replicated
    release's three output shares, or a sketch job's shares (:func:`ltm.analyst.reconstruct.reconstruct_release`).
    The coordinator and a finished job's stored shares (analyst/jobs.py) both come here."""
    if spec.replicated:
        return replicated_release(spec, [np.asarray(s).reshape(-1) for s in shares], randomness=randomness,
                                  seeded_parties=seeded_parties)
    return reconstruct_release(spec, shares, participants, spec.noise_plan(), randomness=randomness,
                               seeded_parties=seeded_parties)

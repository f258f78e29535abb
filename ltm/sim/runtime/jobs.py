"""Building job specs for simulations: partitions, parties, column transforms (the default m is
:func:`ltm.planner.default_m`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ltm.datasets.tables import ModelTable, Table, public_columns
from ltm.dp.defaults import DEFAULT_CLIP_BOUND, DEFAULT_DELTA
from ltm.jobspec import (
    INTERCEPT_NAME,
    ColumnSpec,
    JobSpec,
    PartySpec,
    PrivacySpec,
    ServerSpec,
    SketchSpec,
    corrupt_parties_default,
    replicated_corrupt_parties_default,
    resolve_defaults,
)
from ltm.lifts import get_lift
from ltm.planner import Plan, PlanInputs, default_m, plan_release
from ltm.randomness import Randomness
from ltm.second_moment import PublicSecondMoment, pmt_radius
from ltm.transforms import TransformSpec, rff_spec, vector_layout, whiten_spec


@dataclass(frozen=True)
class RFFOptions:
    """A public random-feature map for ``build_job`` (ltm.transforms ``rff``).

    ``bandwidth`` is in standardised input units (features are centred and scaled to unit
    variance before the map); None picks √d (the median-distance heuristic for standardised
    data, where E‖x − x'‖² = 2d: a function of the public d only).  ``label_share`` q is the
    label's share of the clip budget C² (the features get 1 − q); None: 1/(1 + √(width/4)).
    """

    n_features: int
    bandwidth: float | None = None
    feature_map: str = "cos"
    kernel: str = "gaussian"
    label_share: float | None = None


@dataclass(frozen=True)
class JobChoices:
    """What ``build_job`` decided and why (reported in the simulate output)."""

    m: int
    m_rule: str
    plan: dict | None = None  # the planner's output when the kind was "auto" (ltm.planner.Plan.to_dict())


def split_parties(n: int, parties: int) -> list[tuple[int, int]]:
    """Contiguous, near-equal client ranges for ``parties`` parties."""
    if not 1 <= parties <= n:
        raise ValueError(f"need 1 ≤ parties ≤ n (got parties={parties}, n={n})")
    edges = np.linspace(0, n, parties + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _planned_upload_mode(upload_mode: str, sizes: tuple[int, ...], t_prime: int) -> str:
    """The upload mode the planner costs: the given one, or for ``auto`` the rule of
    :func:`ltm.jobspec.default_upload_mode` (every party holds several clients and t′ = 0)."""
    if upload_mode != "auto":
        return upload_mode
    return "aggregate" if t_prime == 0 and all(size > 1 for size in sizes) else "per-client"


def _job_columns(table: Table | ModelTable, *, partition: str, parties: int, intercept: bool, clip_bound: float,  # noqa: PLR0913 - the simulator's job builder; one configuration object is #34 item 2
                 rff: RFFOptions | None, whiten: PublicSecondMoment | None, whiten_eta: float,
                 whiten_radius: float | None, randomness: Randomness
                 ) -> tuple[tuple[ColumnSpec, ...], tuple[TransformSpec, ...], dict[int, float]]:
    """The job's public columns, its transforms (whitening or random features, if asked) and, for
    random features in the columns partition, each party's share of the clip budget."""
    transforms: tuple[TransformSpec, ...] = ()
    party_budget: dict[int, float] = {}
    if whiten is not None:
        if rff is not None or intercept or partition != "rows":
            raise ValueError("whitening: supported for the rows partition without random features or an intercept "
                             "column (the paper's model has none; in the columns partition the map would mix "
                             "parties' columns)")
        columns, transforms = whiten_columns(table, whiten, clip_bound=clip_bound, eta_fail=whiten_eta,
                                             radius=whiten_radius)
    elif rff is None:
        columns = public_columns(table, intercept=intercept, clip_bound=clip_bound)
    else:
        if intercept:
            raise ValueError("random features: the public centering already gives the model an intercept; "
                             "drop --intercept")
        columns, transforms, party_budget = _rff_columns(table, rff, partition, parties, clip_bound, randomness)
    return columns, transforms, party_budget


@dataclass(frozen=True)
class _SketchChoice:
    """The release kind, m and s a job gets, why, the planner's output (``kind="auto"``) and the
    corrupt parties tolerated (raised for the replicated release)."""

    kind: str
    m: int
    s: int
    rule: str
    plan: Plan | None
    corrupt_parties: int


def _choose_sketch(*, table: Table | ModelTable, n: int, width: int, kind: str, m: int | None, s: int,  # noqa: PLR0913 - the simulator's job builder; one configuration object is #34 item 2
                   partition: str, parties: int, k: int, epsilon: float, delta: float, mechanism: str,
                   calibration: str, clip_bound: float, t_prime: int, corrupt_parties: int, replicated_default: int,
                   upload_mode: str, colluding_servers: int | None, verified_clipping: bool = False) -> _SketchChoice:
    """The planner's choice for ``kind="auto"``; a lifted kind's m = s = 1; :func:`default_m` when m
    is not given; else the given m."""
    plan = None
    if kind == "auto":
        sizes = tuple(b - a for a, b in split_parties(n, parties)) if partition == "rows" else ()
        plan = plan_release(PlanInputs(
            n=n, width=width, epsilon=epsilon, delta=delta, partition=partition,
            task="regression" if table.label else "lowrank", mechanism=mechanism, clip_bound=clip_bound,
            party_sizes=sizes, corrupt_parties=corrupt_parties, t_prime=t_prime,
            kinds=("gram", "sparse") if calibration != "paper" else ("sparse",),
            upload_mode=_planned_upload_mode(upload_mode, sizes if partition == "rows" else (n,) * parties, t_prime),
            servers=k, colluding_servers=colluding_servers, parties=parties,
            replicated_corrupt_parties=max(corrupt_parties, replicated_default), verified_clipping=verified_clipping))
        kind, m, s = plan.kind, (m if m is not None and plan.kind != "gram" else plan.m), plan.s
        rule = f"planner: {plan.reason}"
    elif get_lift(kind) is not None:
        m, s, rule = 1, 1, f"{kind}: the public map is the sum over clients (m = s = 1)"
    elif m is None:
        m = default_m(n, width, epsilon=epsilon, delta=delta if delta > 0 else DEFAULT_DELTA, clip_bound=clip_bound,
                      kind=kind)
        rule = "default_m: 0.15·n/(D·1.1·σ₁²), σ₁ = analytic σ for Δ=2C; clamped to [max(4D,16), n/64]"
    else:
        rule = "given"
    return _SketchChoice(kind, m, s, rule, plan, corrupt_parties)


def _party_specs(n: int, partition: str, parties: int, columns: tuple[ColumnSpec, ...], clip_bound: float,
                 party_budget: dict[int, float]) -> tuple[PartySpec, ...]:
    """The parties: contiguous client ranges (rows partition) or column blocks, each clipped to its
    share of C² (columns partition)."""
    if partition == "rows":
        return tuple(PartySpec(f"party-{i}", a, b, (), clip_bound)
                     for i, (a, b) in enumerate(split_parties(n, parties)))
    elif partition == "columns":
        names = [c.name for c in columns]
        if parties > len(names):
            raise ValueError(f"columns partition: {parties} parties but only {len(names)} columns")
        blocks = np.array_split(np.arange(len(names)), parties)
        shares = budget_shares(columns)
        return tuple(
            PartySpec(f"party-{i}", 0, n, tuple(names[j] for j in block),
                      clip_bound * math.sqrt(party_budget.get(i, float(sum(shares[j] for j in block)))) * (1 - 1e-12))
            for i, block in enumerate(blocks))
    else:
        raise ValueError(f"unknown partition {partition!r}; choose rows or columns")


def build_job(table: Table | ModelTable, *, job_id: str, randomness: Randomness, partition: str = "rows", parties: int = 4,  # noqa: PLR0913 - the simulator's job builder; one configuration object is #34 item 2
              k: int = 3, kind: str = "sparse", m: int | None = None, s: int = 1, epsilon: float = 1.0,
              delta: float = DEFAULT_DELTA, mechanism: str = "gaussian", calibration: str = "tight",
              interpolate_p: float | None = None, t_prime: int = 0, corrupt_parties: int | None = None,
              intercept: bool = False, clip_bound: float = DEFAULT_CLIP_BOUND, share_mode: str = "seed",
              frac_bits: int = 0, min_honest_load: int = 0, endpoints: list[str] | None = None,
              rff: RFFOptions | None = None, whiten: PublicSecondMoment | None = None,
              whiten_eta: float = 0.05, whiten_radius: float | None = None,
              reproduction: bool | None = None, upload_mode: str = "per-client",
              colluding_servers: int | None = None, verified_clipping: bool = False) -> tuple[JobSpec, JobChoices]:
    """A resolved, validated job spec for a table, and the choices made.

    ``corrupt_parties`` None: the default (:func:`ltm.jobspec.default_corrupt_parties`: one when
    parties hold several clients each; a private job is raised to it whatever is given, only a
    reproduction keeps a smaller value).  ``reproduction`` None: the job is a reproduction exactly
    when ``randomness`` is seeded (then its servers accept seeded, NOT private batches).

    ``rff``: parties map their (standardised) features with public random features before
    clipping; in the columns partition each party maps its own block (an additive kernel).
    ``whiten``: a PUBLIC second moment (Cao & Zhang; :func:`whiten_columns`): parties whiten their
    raw features with ``Σ̂_B^{-1/2}`` and divide the label by ``σ̂_B`` before clipping.
    ``upload_mode``: ``per-client``, ``aggregate`` or ``auto`` (:func:`ltm.jobspec.default_upload_mode`).
    ``colluding_servers``: the trust assumption (None: k − 1); with an honest majority (1 of 3) the
    columns partition's ``gram`` kind is the replicated degree-2 release (:mod:`ltm.replicated`),
    and the planner (``kind="auto"``) may choose it.  ``verified_clipping``: the replicated release
    with every party's clipping proven on the shares (:mod:`ltm.verified_clipping`; in process and over gRPC),
    which tolerates a corrupt party (the default is then one).

    Columns partition: each party clips its block to its share of C² by the public transform's
    budget shares (:func:`budget_shares`: label q, each regressor (1 − q)/p), so Σ_j C_j² = C².
    """
    n = table.n
    if isinstance(table, ModelTable) and (whiten is not None or rff is not None):
        raise ValueError("whitening and random features need the data's statistics; a ModelTable has only "
                         "its columns' moments")
    if reproduction is None:
        reproduction = randomness.reproducible
    # The replicated release's noise discounts one curious party (ltm.replicated.noise_known_parties);
    # its corrupt_parties (deviating parties) defaults to 0: it cannot tolerate one yet (issue #30).
    replicated_default = replicated_corrupt_parties_default(parties) if partition == "columns" else 0
    if corrupt_parties is None and verified_clipping:  # a deviating party is caught: the realistic default
        corrupt_parties = replicated_default
    if verified_clipping and kind == "auto":  # the proof is of the replicated release: its kind is gram
        kind = "gram"
    if corrupt_parties is None:
        corrupt_parties = corrupt_parties_default(
            partition, [b - a for a, b in split_parties(n, parties)] if partition == "rows" else [])
    columns, transforms, party_budget = _job_columns(
        table, partition=partition, parties=parties, intercept=intercept, clip_bound=clip_bound, rff=rff,
        whiten=whiten, whiten_eta=whiten_eta, whiten_radius=whiten_radius, randomness=randomness)
    width = len(vector_layout(columns, transforms))
    choice = _choose_sketch(table=table, n=n, width=width, kind=kind, m=m, s=s, partition=partition, parties=parties,
                            k=k, epsilon=epsilon, delta=delta, mechanism=mechanism, calibration=calibration,
                            clip_bound=clip_bound, t_prime=t_prime, corrupt_parties=corrupt_parties,
                            replicated_default=replicated_default, upload_mode=upload_mode,
                            colluding_servers=colluding_servers, verified_clipping=verified_clipping)
    kind, m, s, corrupt_parties = choice.kind, choice.m, choice.s, choice.corrupt_parties
    party_specs = _party_specs(n, partition, parties, columns, clip_bound, party_budget)
    seed = randomness.child("sketch-seed").bytes(32).hex()
    spec = JobSpec(
        job_id=job_id, partition=partition, n=n, columns=columns, parties=party_specs,
        clip_bound=clip_bound, frac_bits=frac_bits,
        sketch=SketchSpec(kind=kind, m=m, s=s if kind == "sparse" else m, seed=seed),
        privacy=PrivacySpec(epsilon=epsilon, delta=delta, mechanism=mechanism, calibration=calibration,
                            interpolate_p=interpolate_p, t_prime=t_prime, corrupt_parties=corrupt_parties,
                            min_honest_load=min_honest_load),
        servers=tuple(ServerSpec(f"server-{i}", (endpoints or [""] * k)[i]) for i in range(k)),
        clip_norm="l1" if mechanism == "laplace" else "l2", share_mode=share_mode, transforms=transforms, upload_mode=upload_mode,
        reproduction=reproduction, colluding_servers=colluding_servers, verified_clipping=verified_clipping,
    )
    plan = choice.plan.to_dict() if choice.plan is not None else None
    return resolve_defaults(spec), JobChoices(m, choice.rule, plan)


def budget_shares(columns: tuple[ColumnSpec, ...]) -> list[float]:
    """Each raw column's share of the clip budget C² under :func:`ltm.datasets.tables.public_columns`'s public
    transform: the label q = 1/(1 + √p), each of the p regressors (features and an intercept)
    (1 − q)/p; without a label, 1/D each.  The shares sum to 1, so party clip bounds
    C_j = C·√(Σ of its columns' shares) satisfy Σ_j C_j² = C² (the joint vector stays within C:
    the release's sensitivity is unchanged; docs/planner.md, "Budget-share clipping")."""
    regressors = sum(1 for c in columns if c.role != "label")
    if not any(c.role == "label" for c in columns):
        return [1.0 / len(columns)] * len(columns)
    q = 1.0 / (1.0 + math.sqrt(regressors))
    return [q if c.role == "label" else (1.0 - q) / regressors for c in columns]


def _rff_columns(table: Table, rff: RFFOptions, partition: str, parties: int, clip_bound: float,
                 randomness: Randomness) -> tuple[tuple[ColumnSpec, ...], tuple[TransformSpec, ...], dict[int, float]]:
    """Standardised feature columns, a label with its budget share, and the rff transform(s).

    Returns ``(columns, transforms, party budget shares)``: in the columns partition the raw
    columns are cut into the same blocks as ``build_job`` cuts them, each block with features gets
    its own transform (its own seed), and a party's budget share is its features' share of 1 − q
    plus q if it holds the label.  ``output_scale`` is C·√(share of the map), so ‖φ‖ ≈ that.
    """
    feats = table.features
    if table.label is None:
        raise ValueError("random features need a label (they are for regression)")
    d = len(feats)
    width = rff.n_features * (2 if rff.feature_map == "sincos" else 1)
    q = rff.label_share if rff.label_share is not None else 1.0 / (1.0 + math.sqrt(width / 4.0))
    if not 0 < q < 1:
        raise ValueError(f"label_share must be in (0, 1), got {q}")
    cols = [ColumnSpec(f, "feature", float(table.columns[f].mean()), float(table.columns[f].std()) or 1.0)
            for f in feats]
    y = table.columns[table.label]
    cols.append(ColumnSpec(table.label, "label", float(y.mean()), (float(y.std()) or 1.0) / (math.sqrt(q) * clip_bound)))
    names = [c.name for c in cols]
    blocks = [list(range(len(names)))] if partition == "rows" else \
        [list(b) for b in np.array_split(np.arange(len(names)), parties)]
    transforms: list[TransformSpec] = []
    budget: dict[int, float] = {}
    for i, block in enumerate(blocks):
        inputs = [names[j] for j in block if names[j] != table.label]
        share = (1.0 - q) * len(inputs) / d
        budget[i] = share + (q if table.label in [names[j] for j in block] else 0.0)
        if not inputs:
            continue
        bandwidth = rff.bandwidth if rff.bandwidth is not None else math.sqrt(len(inputs))
        seed = randomness.child("rff-seed", i).bytes(32)
        transforms.append(rff_spec(inputs, n_features=rff.n_features, bandwidth=bandwidth, seed=seed,
                                   kernel=rff.kernel, feature_map=rff.feature_map,
                                   output_scale=clip_bound * math.sqrt(share),
                                   name="rff_" if partition == "rows" else f"rff{i}_"))
    return tuple(cols), tuple(transforms), budget


def whiten_columns(table: Table, public: PublicSecondMoment, *, clip_bound: float = DEFAULT_CLIP_BOUND,
                   eta_fail: float = 0.05, radius: float | None = None, name: str = "w_"
                   ) -> tuple[tuple[ColumnSpec, ...], tuple[TransformSpec, ...]]:
    """Raw features whitened by the public ``M = Σ̂_B^{-1/2}`` and the label divided by the public
    ``σ̂_B`` (Cao & Zhang's PMT, Alg. 1 of their §3.1), scaled so that the job's clip at
    C is the radius ``R`` in whitened units: ``x ↦ (C/R)·M (x − μ_B)`` and ``y ↦ (y − μ_y)·C/(R·σ̂_B)``
    (μ = 0 for the paper's uncentred moment; the public means when ``public`` was built with
    ``center=True``).

    ``radius`` None is Alg. 1's ``R = sqrt((d+1)(1 + log(2n/η)))`` (the paper clips features at R_x
    and the label at R_y separately; the LTM clips the joint vector at ``sqrt(R_x² + R_y²) = R``).
    That radius almost never clips, but its noise is ≈ (1 + log(2n/η))× the typical squared norm
    d + 1; ``radius = sqrt(d + 1)`` (the typical whitened norm) clips the larger rows and adds far
    less noise (docs/experiments/cao_zhang.md, *Cao & Zhang in the LTM*).

    ``public`` must come from public or synthetic data, never from the table being released; its
    d × d matrix is over ``table.features`` in that order.
    """
    feats = list(table.features)
    if table.label is None:
        raise ValueError("whitening is for regression: the table needs a label")
    if public.d != len(feats):
        raise ValueError(f"the public second moment is {public.d}×{public.d}, the table has {len(feats)} features")
    R = pmt_radius(len(feats) + 1, table.n, eta_fail) if radius is None else float(radius)
    if not (math.isfinite(R) and R > 0):
        raise ValueError(f"whitening radius must be a positive finite number, got {radius!r}")
    mu = public.feature_mean if public.feature_mean is not None else np.zeros(len(feats))
    cols = [ColumnSpec(f, "feature", float(mu[j]), 1.0) for j, f in enumerate(feats)]
    cols.append(ColumnSpec(table.label, "label", float(public.label_mean), public.label_rms * R / clip_bound))
    spec = whiten_spec(feats, public.whitening, name=name, output_scale=clip_bound / R)
    return tuple(cols), (spec,)


def party_tables(spec: JobSpec, table: Table) -> dict[str, dict[str, np.ndarray]]:
    """Each party's view of the table: its row range (rows) or its column block (columns)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for p in spec.parties:
        if spec.partition == "rows":
            out[p.party_id] = table.rows(p.start, p.stop)
        else:
            out[p.party_id] = {c: table.columns[c] for c in p.columns if c != INTERCEPT_NAME}
    return out

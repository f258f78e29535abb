"""The released DP sketch: what the analyst reconstructs and every estimator fits on.

A release is the m × D matrix ``Ã = (1/√s) Σ_l S_l (V + G_l)`` (already scaled), where the D columns
are the job's *transformed* columns: features, then an optional intercept column, then the label,
each mapped by a public affine transform ``x' = (x − center) / scale`` so that client rows have
ℓ2 norm ≤ the clip bound.  Estimators work in that transformed space and map coefficients back
to original units with ``centers``/``scales``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ltm.lifts import get_lift, gram_from_vector

if TYPE_CHECKING:
    from ltm.jobspec import JobSpec
    from ltm.v1.ltm_pb2 import GetReleaseResponse


@dataclass(frozen=True)
class ReleasedSketch:
    """A reconstructed, scaled DP sketch with what is needed to interpret it.

    Attributes:
        matrix: float64 array of shape (m, D), the scaled sketch Ã.
        columns: the D column names, in order (features..., optional intercept, label).
        centers, scales: float64 arrays of shape (D,): column j of a client row was
            ``(raw_j - centers[j]) / scales[j]`` before clipping.  The intercept column has
            raw value 1, center 0.
        label: index of the label column, or None for an unlabelled (low-rank) job.
        intercept: index of the intercept column, or None.
        n: number of participating clients (rows of the underlying data).
        noise_variance_per_column: a sketch (``sparse``, ``dense``): Σ_r Var(noise in entry (r, c))
            of the *scaled* matrix, i.e. the expected diagonal of the noise Gram matrix ``E[NᵀN]``
            (same for every column); de-biasing estimators (DGM-OLS) subtract it.  A lifted kind:
            the largest of :attr:`entry_noise_variance` (a ``gram`` release: its diagonal's).
        privacy: the privacy report (epsilon, delta, calibration, sigma_release, ...).
        sha256: hex SHA-256 of the reconstructed uint64 sketch bytes (before decoding).
        kind: the job's release kind (``sparse``, ``dense``, or a lifted kind such as ``gram``).
        entry_noise_variance: a lifted kind (required): float64 (W,), the variance of the noise in
            each of the W released entries, in the released coordinates (a ``gram`` release: the
            unweighted upper triangle, ``triu_indices`` order), as the noise was drawn — derived
            from the noise plan and who drew it (:func:`ltm.analyst.reconstruct.release_noise_variance`,
            :func:`ltm.analyst.replicated.replicated_release`), never assumed by an estimator.  None
            for a sketch.
    """

    matrix: np.ndarray
    columns: tuple[str, ...]
    centers: np.ndarray
    scales: np.ndarray
    label: int | None
    intercept: int | None
    n: int
    noise_variance_per_column: float
    privacy: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""
    kind: str = "sparse"
    entry_noise_variance: np.ndarray | None = None

    def __post_init__(self) -> None:
        shape = np.shape(self.matrix)
        width = len(self.columns) if get_lift(self.kind) is None else None
        if width is not None and (len(shape) != 2 or shape[1] != width):
            raise ValueError(f"a {self.kind!r} release matrix must have shape (m, {width}), got {shape} "
                             f"(a lifted release, e.g. 'gram', must say its kind)")
        if width is not None:
            if self.entry_noise_variance is not None:
                raise ValueError(f"a {self.kind!r} release states its noise as noise_variance_per_column "
                                 f"(E[NᵀN]_cc), not per entry")
            return
        ev = None if self.entry_noise_variance is None else np.asarray(self.entry_noise_variance, dtype=np.float64)
        if ev is None or ev.shape != shape[-1:] or not np.all(np.isfinite(ev)) or bool((ev < 0).any()):
            raise ValueError(f"a lifted {self.kind!r} release must state entry_noise_variance: {shape[-1:]} finite "
                             f"values >= 0, got {None if ev is None else ev.shape}")
        # the one number a lifted release also carries must not disagree with its entries
        if ev.size and not np.isclose(float(self.noise_variance_per_column), float(ev.max()), rtol=1e-12, atol=0.0):
            raise ValueError(f"noise_variance_per_column ({self.noise_variance_per_column!r}) of a lifted release "
                             f"is the largest entry_noise_variance ({float(ev.max())!r})")
        object.__setattr__(self, "entry_noise_variance", ev)

    @property
    def lifted(self) -> bool:
        """True for a lifted release kind (``gram``, …): ``matrix`` is then the 1 × W noisy
        sum of the clients' lifted vectors, not a sketch (see :mod:`ltm.lifts`)."""
        return get_lift(self.kind) is not None

    @property
    def gram(self) -> np.ndarray:
        """The noisy D × D Gram matrix ZᵀZ of a ``gram`` release (features, intercept, label)."""
        if self.kind != "gram":
            raise ValueError(f"a {self.kind!r} release carries no Gram matrix (only a 'gram' release does)")
        return gram_from_vector(self.matrix[0], len(self.columns))

    @property
    def gram_noise_variance(self) -> np.ndarray:
        """(D, D) variance of the noise in each entry of :attr:`gram`, as stated by the release
        (:attr:`entry_noise_variance` mirrored: the rows gram's Gaussian noise has v on the
        diagonal and v/2 off it, its Laplace noise and the replicated release's v everywhere)."""
        if self.kind != "gram":
            raise ValueError(f"a {self.kind!r} release carries no Gram matrix (only a 'gram' release does)")
        return gram_from_vector(self.entry_noise_variance, len(self.columns))

    @property
    def feature_indices(self) -> list[int]:
        """Indices of the regressors (features and intercept), label excluded."""
        return [j for j in range(len(self.columns)) if j != self.label]

    @property
    def design(self) -> np.ndarray:
        """The sketched design matrix X̃, shape (m, D − 1) when labelled, (m, D) otherwise."""
        return self.matrix[:, self.feature_indices]

    @property
    def target(self) -> np.ndarray:
        """The sketched label column ỹ, shape (m,)."""
        if self.label is None:
            raise ValueError("this release has no label column (a low-rank job)")
        return self.matrix[:, self.label]


def stated_noise(privacy: Mapping[str, Any]) -> dict[str, Any]:
    """The noise fields of a :class:`ReleasedSketch` as its privacy report states them
    (``noise_variance_per_column``, ``entry_noise_variance``), for a release rebuilt from its matrix
    and report (a release fetched over gRPC: :func:`release_from_reply`)."""
    entries = privacy.get("entry_noise_variance")
    return {"noise_variance_per_column": float(privacy["noise_variance_per_column"]),
            "entry_noise_variance": None if entries is None else np.asarray(entries, dtype=np.float64)}


def release_from_reply(spec: JobSpec, reply: GetReleaseResponse, participants: int) -> ReleasedSketch:
    """The release an analyst's ``GetRelease`` reply carries (analyst/service.py encodes it), rebuilt
    against its job's spec: the float64 (rows, cols) matrix, the client vector's entries (names,
    centres, scales, after any transforms), the spec's kind, and the noise the privacy report states
    (:func:`stated_noise`).  ``participants``: the released-over client count (``RunJob``'s report).
    The one decoder of that reply (``ltm demo``, the networked experiment backend)."""
    matrix = np.frombuffer(reply.matrix_f64, dtype="<f8").reshape(reply.rows, reply.cols).astype(np.float64)
    privacy = json.loads(reply.privacy_json)
    return ReleasedSketch(
        matrix=matrix, columns=spec.vector_names, centers=np.array([e.center for e in spec.layout]),
        scales=np.array([e.scale for e in spec.layout]), label=spec.label_index,
        intercept=spec.intercept_index, n=int(participants), **stated_noise(privacy),
        privacy=privacy, sha256=reply.release_sha256, kind=spec.sketch.kind)


def release_from_json(obj: Mapping[str, Any], privacy: Mapping[str, Any] | None = None) -> ReleasedSketch:
    """The release a ``release.json`` object describes (the inverse of
    :func:`ltm.analyst.jobs.release_to_json`): the float64 (m, D) matrix (a lifted kind: (1, W)), the
    columns, centres, scales, label and intercept, n, the stated noise, the SHA-256 and the kind.
    ``privacy``: the job's privacy report (``privacy_report.json``), attached as
    :attr:`ReleasedSketch.privacy` (default: empty).  No network and no privacy cost: it only reads
    what was released."""
    entries = obj.get("entry_noise_variance")
    return ReleasedSketch(
        matrix=np.asarray(obj["matrix"], dtype=np.float64), columns=tuple(obj["columns"]),
        centers=np.asarray(obj["centers"], dtype=np.float64), scales=np.asarray(obj["scales"], dtype=np.float64),
        label=obj["label"], intercept=obj["intercept"], n=int(obj["n"]),
        noise_variance_per_column=float(obj["noise_variance_per_column"]),
        entry_noise_variance=None if entries is None else np.asarray(entries, dtype=np.float64),
        privacy=dict(privacy or {}), sha256=str(obj.get("sha256", "")), kind=str(obj.get("kind", "sparse")))

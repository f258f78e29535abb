"""Public transforms named in the job spec, applied by parties before clipping (docs/architecture.md §2).

A job's raw columns (``JobSpec.columns``: features, optional intercept, label) are first mapped by
their public affine ``x' = (x − center) / scale``.  The job's ``transforms`` (a tuple of
:class:`TransformSpec`, part of the canonical, hashed spec) then rewrite the *feature* entries, in
order: each transform consumes the entries named in its ``columns`` (raw feature columns or outputs
of an earlier transform) and puts its outputs where its first input was.  The result is the
**client vector** whose entries the party clips, noises and shares and the servers sketch: its
layout (:func:`vector_layout`, available as ``JobSpec.vector_names``) fixes ``JobSpec.width`` and
the entry indices of ``label_index`` / ``intercept_index`` / ``party_column_indices``.

One implementation serves every actor: a party calls :meth:`FeaturePipeline.vectors` on its raw
columns; the simulator builds its clear-text training matrix with the same call; the analyst
predicts on raw inputs with :meth:`FeaturePipeline.features` (so a model fitted on a release of
mapped vectors takes raw inputs).  Linear transforms also give :meth:`Transform.linear_map`, with
which the analyst maps coefficients back to the input entries.

Kinds (:data:`TRANSFORM_KINDS`, extended with :func:`register_transform`):

* ``rff`` — random features for a shift-invariant kernel (Rahimi & Recht; Liao, Needell & Xue).
  ``n_features`` frequencies ω_k, ``bandwidth`` ℓ, ``kernel`` ``gaussian`` (k = exp(−‖x−x'‖²/2ℓ²),
  ω ~ N(0, I/ℓ²)) or ``laplacian`` (k = exp(−‖x−x'‖₁/ℓ), ω_j ~ Cauchy(0, 1/ℓ)), ``feature_map``
  ``cos`` (φ_k = √(2/N)·cos(⟨ω_k,x⟩ + b_k), b ~ U[0, 2π); N entries, ‖φ‖² ≈ 1, ≤ 2) or ``sincos``
  (the real embedding of the paper's complex map e^{i⟨ω,x⟩}/√N: [cos ⟨ω_k,x⟩, sin ⟨ω_k,x⟩]/√N;
  2N entries, ‖φ‖ = 1 exactly), all multiplied by ``output_scale``.  The weights come from the
  transform's 32-byte public ``seed`` expanded by the project's XOF (SHAKE-256 key → AES-256-CTR
  keystream, :mod:`ltm.randomness`) and are turned into floats with IEEE-exact operations only
  (+, −, ×, ÷, √; a series logarithm), so every host derives bit-identical weights whatever its
  numpy or libm.  (The features themselves use ``np.cos``, exact to an ulp, which is all a party and
  the analyst need to agree on.)

Columns partition: a transform's inputs must all lie in one party's block; each party maps its own
block, so random features give an **additive kernel** k(x, x') = Σ_p k_p(x^{(p)}, x'^{(p)}) over
the blocks (cross-party interactions are lost; the full joint kernel would need MPC).

Pure: no I/O, no actor imports.
"""
from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from ltm.errors import LtmError
from ltm.randomness import RandomStream, xof

__all__ = [
    "TransformSpec",
    "TransformError",
    "Transform",
    "RandomFeatures",
    "TRANSFORM_KINDS",
    "register_transform",
    "rff_spec",
    "Whitening",
    "whiten_spec",
    "rff_weights",
    "exact_normal",
    "exact_log",
    "VectorEntry",
    "vector_layout",
    "transform_problems",
    "FeaturePipeline",
]


class TransformError(LtmError, ValueError):
    """A transform that cannot be built or applied; the message says what to change."""

    exit_code = 2


@dataclass(frozen=True)
class TransformSpec:
    """One public transform of a job spec (a tagged record: ``kind`` says which fields it uses;
    fields a kind does not use must stay at their defaults, so the canonical JSON is unique).

    Attributes:
        kind: a key of :data:`TRANSFORM_KINDS` (``"rff"``; ``"whiten"`` when registered).
        columns: the input entries, in order: raw feature columns of the job, or outputs of an
            earlier transform.
        name: prefix of the output entry names (``f"{name}{k}"``); must be non-empty and make
            names that clash with no other entry.
        n_features: rff: number of random frequencies N.
        bandwidth: rff: kernel bandwidth ℓ > 0, in the units of the inputs (after center/scale).
        seed: rff: 64 hex characters, the public 32-byte seed of the weights.
        kernel: rff: ``"gaussian"`` or ``"laplacian"``.
        feature_map: rff: ``"cos"`` or ``"sincos"``.
        output_scale: every output is multiplied by this public factor (> 0).
        matrix: a linear transform's public matrix, row-major (e.g. whitening, d × d).
    """

    kind: str
    columns: tuple[str, ...]
    name: str = ""
    n_features: int = 0
    bandwidth: float = 0.0
    seed: str = ""
    kernel: str = ""
    feature_map: str = ""
    output_scale: float = 1.0
    matrix: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # Canonical floats (1 → 1.0, −0.0 → 0.0) so equal specs hash equally.
        for f in ("bandwidth", "output_scale"):
            v = getattr(self, f)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                object.__setattr__(self, f, float(v) + 0.0)
        if isinstance(self.matrix, (list, tuple)):
            object.__setattr__(self, "matrix", tuple(float(v) + 0.0 if isinstance(v, (int, float))
                                                     and not isinstance(v, bool) else v for v in self.matrix))
        if isinstance(self.columns, list):
            object.__setattr__(self, "columns", tuple(self.columns))


_DEFAULTS = {f: getattr(TransformSpec("", ()), f) for f in
             ("name", "n_features", "bandwidth", "seed", "kernel", "feature_map", "output_scale", "matrix")}


# ------------------------------------------------------------------------------------ kinds
class Transform(ABC):
    """A built transform: maps (rows, input_width) entries to (rows, output_width) entries.

    Subclasses set ``kind``, list the :class:`TransformSpec` fields they use in ``fields`` and
    implement :meth:`check`, :meth:`output_width` and :meth:`apply`; a linear one also overrides
    :meth:`linear_map`.  Register with :func:`register_transform`.
    """

    kind: ClassVar[str]
    #: TransformSpec fields (besides kind, columns, name, output_scale) this kind uses.
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, spec: TransformSpec, input_width: int) -> None:
        problems = self.check(spec, input_width)
        if problems:
            raise TransformError("; ".join(problems))
        self.spec = spec
        self.input_width = input_width

    @classmethod
    @abstractmethod
    def check(cls, spec: TransformSpec, input_width: int) -> list[str]:
        """Every problem with ``spec`` for this kind (empty list: valid).  Must not be slow."""

    @classmethod
    @abstractmethod
    def output_width(cls, spec: TransformSpec, input_width: int) -> int:
        """Number of output entries (from the spec alone; no weights are derived)."""

    @abstractmethod
    def apply(self, Z: np.ndarray) -> np.ndarray:
        """(rows, input_width) float64 → (rows, output_width) float64."""

    def linear_map(self) -> np.ndarray | None:
        """For a linear transform, W (output_width, input_width) with ``apply(Z) = Z @ W.T``;
        None for a non-linear one (random features: the model lives in feature space)."""
        return None


#: kind → Transform subclass.
TRANSFORM_KINDS: dict[str, type[Transform]] = {}


def register_transform(cls: type[Transform]) -> type[Transform]:
    """Class decorator: make ``cls.kind`` a valid ``TransformSpec.kind``."""
    TRANSFORM_KINDS[cls.kind] = cls
    return cls


def _unused_field_problems(spec: TransformSpec, used: Sequence[str]) -> list[str]:
    keep = set(used) | {"name", "output_scale"}
    return [f"transform {spec.name or spec.kind!r}: field {f!r} is not used by kind {spec.kind!r}; leave it unset"
            for f, default in _DEFAULTS.items() if f not in keep and getattr(spec, f) != default]


# ------------------------------------------------------------------------------- exact float samplers
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: hi has 32 significant bits
_LN2_LO = 1.90821492927058770002e-10
_SQRT_HALF = 0.70710678118654752440
# log(m) = 2·atanh(t), t = (m−1)/(m+1) ∈ [−0.1716, 0.1716]: Σ_{k≤14} t^{2k+1}/(2k+1) leaves < 1e-22.
_ATANH_TERMS = tuple(1.0 / (2 * k + 1) for k in range(15))


def exact_log(x: np.ndarray) -> np.ndarray:
    """Natural log of positive finite float64, using only IEEE-exact operations (frexp, +, −, ×, ÷).

    Bit-identical on every IEEE-754 host (numpy never fuses these separate ufunc calls), unlike
    ``np.log``, whose SIMD/libm implementations may differ in the last bit.  Accuracy ≈ 1 ulp.
    """
    x = np.asarray(x, dtype=np.float64)
    if np.any(~(x > 0)) or np.any(~np.isfinite(x)):
        raise ValueError("exact_log needs positive finite inputs")
    mant, expo = np.frexp(x)  # x = mant·2^expo, mant ∈ [0.5, 1)
    low = mant < _SQRT_HALF
    mant = np.where(low, mant * 2.0, mant)
    expo = expo.astype(np.float64) - low
    t = (mant - 1.0) / (mant + 1.0)
    t2 = t * t
    acc = np.full_like(t, _ATANH_TERMS[-1])
    for c in _ATANH_TERMS[-2::-1]:
        acc = acc * t2 + c
    log_m = 2.0 * t * acc
    return expo * _LN2_HI + (expo * _LN2_LO + log_m)


def exact_normal(stream: RandomStream, count: int) -> np.ndarray:
    """``count`` i.i.d. N(0, 1) by Marsaglia's polar method with :func:`exact_log` and ``np.sqrt``
    (IEEE correctly rounded): the same keystream gives the same bits on every host."""
    out = np.empty(0, dtype=np.float64)
    while out.size < count:
        need = (count - out.size + 1) // 2
        k = int(need / 0.78) + 16  # acceptance π/4 ≈ 0.785: usually one round
        v = 2.0 * stream.uniform(2 * k) - 1.0  # exact: dyadic uniforms
        v1, v2 = v[:k], v[k:]
        s = v1 * v1 + v2 * v2
        ok = (s < 1.0) & (s > 0.0)
        v1, v2, s = v1[ok], v2[ok], s[ok]
        f = np.sqrt(-2.0 * exact_log(s) / s)
        out = np.concatenate([out, np.stack([v1 * f, v2 * f], axis=1).ravel()])
    return out[:count]


# ------------------------------------------------------------------------------------- random features
RFF_KERNELS = ("gaussian", "laplacian")
RFF_MAPS = ("cos", "sincos")
_TWO_PI = 6.283185307179586


@functools.lru_cache(maxsize=16)
def rff_weights(seed_hex: str, kernel: str, feature_map: str, d: int, n_features: int,
                bandwidth: float) -> tuple[np.ndarray, np.ndarray]:
    """The public weights ``(Ω (d, N), b (N,))`` of an rff transform, from its seed alone.

    Key ``SHAKE-256("ltm/transform/rff/v1" ‖ seed ‖ kernel ‖ d ‖ N)``; from its AES-CTR keystream:
    first Ω row-major as standard normals (gaussian) or ratios of two standard normals (standard
    Cauchy, laplacian), then ``b = 2π·u`` (a fresh keystream: key tag ``phase``), then Ω /= ℓ.
    ``b`` is drawn for both maps (``sincos`` ignores it).  Arrays are read-only (cached).
    """
    if kernel not in RFF_KERNELS:
        raise TransformError(f"unknown rff kernel {kernel!r}; choose one of {RFF_KERNELS}")
    seed = bytes.fromhex(seed_hex)
    key = xof(b"ltm/transform/rff/v1", seed, kernel.encode(), str(d).encode(), str(n_features).encode())
    stream = RandomStream(key)
    count = d * n_features
    if kernel == "gaussian":
        omega = exact_normal(stream, count)
    else:
        z = exact_normal(stream, 2 * count)
        omega = z[:count] / z[count:]
    omega = (omega / bandwidth).reshape(d, n_features)
    b = _TWO_PI * RandomStream(xof(b"ltm/transform/rff/v1/phase", key)).uniform(n_features)
    omega.setflags(write=False)
    b.setflags(write=False)
    return omega, b


@register_transform
class RandomFeatures(Transform):
    """Random Fourier features (see the module docstring for the maps and the weight derivation)."""

    kind = "rff"
    fields = ("n_features", "bandwidth", "seed", "kernel", "feature_map")

    @classmethod
    def check(cls, spec: TransformSpec, input_width: int) -> list[str]:
        where = f"transform {spec.name or spec.kind!r}"
        problems = _unused_field_problems(spec, cls.fields)
        if spec.n_features < 1:
            problems.append(f"{where}: n_features must be ≥ 1 (got {spec.n_features})")
        if not (spec.bandwidth > 0 and math.isfinite(spec.bandwidth)):
            problems.append(f"{where}: bandwidth must be a positive finite number (got {spec.bandwidth})")
        try:
            if len(bytes.fromhex(spec.seed)) != 32:
                raise ValueError
        except ValueError:
            problems.append(f"{where}: seed must be 64 hex characters (32 bytes)")
        if spec.kernel not in RFF_KERNELS:
            problems.append(f"{where}: kernel must be one of {RFF_KERNELS}, got {spec.kernel!r}")
        if spec.feature_map not in RFF_MAPS:
            problems.append(f"{where}: feature_map must be one of {RFF_MAPS}, got {spec.feature_map!r}")
        return problems

    @classmethod
    def output_width(cls, spec: TransformSpec, input_width: int) -> int:
        return spec.n_features * (2 if spec.feature_map == "sincos" else 1)

    @property
    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        s = self.spec
        return rff_weights(s.seed.lower(), s.kernel, s.feature_map, self.input_width, s.n_features, s.bandwidth)

    def apply(self, Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.input_width:
            raise TransformError(f"rff input must have shape (rows, {self.input_width}), got {Z.shape}")
        omega, b = self.weights
        # Σ_j z_j·ω_j in a fixed order (not BLAS, whose blocking depends on the batch size): a row's
        # features are the same bits whichever batch it is computed in.
        proj = Z[:, :1] * omega[0]
        for j in range(1, self.input_width):
            proj += Z[:, j:j + 1] * omega[j]
        N = self.spec.n_features
        if self.spec.feature_map == "cos":
            proj += b
            out = np.cos(proj, out=proj)
            out *= math.sqrt(2.0 / N) * self.spec.output_scale
            return out
        out = np.empty((Z.shape[0], 2 * N), dtype=np.float64)
        np.cos(proj, out=out[:, :N])
        np.sin(proj, out=out[:, N:])
        out *= self.spec.output_scale / math.sqrt(N)
        return out

    def kernel(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The exact kernel the features approximate (times output_scale²): (a, d), (b, d) → (a, b)."""
        x, y = np.atleast_2d(x), np.atleast_2d(y)
        ell = self.spec.bandwidth
        if self.spec.kernel == "gaussian":
            sq = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
            k = np.exp(-sq / (2 * ell**2))
        else:
            k = np.exp(-np.abs(x[:, None, :] - y[None, :, :]).sum(-1) / ell)
        return k * self.spec.output_scale**2


def rff_spec(columns: Sequence[str], *, n_features: int, bandwidth: float, seed: bytes | str,
             kernel: str = "gaussian", feature_map: str = "cos", output_scale: float = 1.0,
             name: str = "rff") -> TransformSpec:
    """A random-feature :class:`TransformSpec` (seed: 32 bytes or 64 hex characters)."""
    seed_hex = seed.hex() if isinstance(seed, (bytes, bytearray)) else str(seed)
    return TransformSpec(kind="rff", columns=tuple(columns), name=name, n_features=int(n_features),
                         bandwidth=float(bandwidth), seed=seed_hex, kernel=kernel, feature_map=feature_map,
                         output_scale=float(output_scale))


# ------------------------------------------------------------------------------------ whitening
#: Largest condition number a whitening matrix may have (the analyst inverts nothing, but a nearly
#: singular map would make the mapped-back coefficients meaningless).
WHITEN_MAX_CONDITION = 1e12


@register_transform
class Whitening(Transform):
    """A public linear map ``z ↦ W z`` of the feature entries (Cao & Zhang's second-moment whitening:
    ``W = Σ̂_B^{-1/2}`` of a PUBLIC second moment, see :mod:`ltm.second_moment`; any invertible
    public W is accepted).  ``matrix`` holds W row-major (input_width × input_width).

    The label is scaled by the public σ̂_B through its column's ``scale``; the intercept (if any)
    stays as it is.  A model fitted on the mapped entries is mapped back with
    :meth:`FeaturePipeline.pull_back` (``β_in = Wᵀ β_out``), exactly (OLS is affine-equivariant).
    Rows are accumulated column by column in a fixed order (no BLAS), so a row's entries are the
    same bits whichever batch computes them.
    """

    kind = "whiten"
    fields = ("matrix",)

    @classmethod
    def check(cls, spec: TransformSpec, input_width: int) -> list[str]:
        where = f"transform {spec.name or spec.kind!r}"
        problems = _unused_field_problems(spec, cls.fields)
        if len(spec.matrix) != input_width * input_width:
            return problems + [f"{where}: matrix must hold {input_width}×{input_width} = {input_width**2} numbers "
                               f"(row-major) for its {input_width} input columns, got {len(spec.matrix)}"]
        W = np.array(spec.matrix, dtype=np.float64).reshape(input_width, input_width)
        if not np.all(np.isfinite(W)):
            return problems + [f"{where}: matrix has non-finite entries"]
        if not (spec.output_scale > 0 and math.isfinite(spec.output_scale)):
            problems.append(f"{where}: output_scale must be a positive finite number")
        cond = np.linalg.cond(W) if input_width else 1.0
        if not cond < WHITEN_MAX_CONDITION:
            problems.append(f"{where}: matrix is singular or nearly so (condition number {cond:.3g}); a whitening "
                            f"needs a positive-definite public second moment (more public rows than columns)")
        return problems

    @classmethod
    def output_width(cls, spec: TransformSpec, input_width: int) -> int:
        return input_width

    @functools.cached_property
    def _W(self) -> np.ndarray:
        W = np.array(self.spec.matrix, dtype=np.float64).reshape(self.input_width, self.input_width)
        W *= self.spec.output_scale
        W.setflags(write=False)
        return W

    def apply(self, Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.input_width:
            raise TransformError(f"whiten input must have shape (rows, {self.input_width}), got {Z.shape}")
        Wt = self._W.T
        out = Z[:, :1] * Wt[0]
        for j in range(1, self.input_width):
            out += Z[:, j:j + 1] * Wt[j]
        return out

    def linear_map(self) -> np.ndarray:
        return self._W.copy()


def whiten_spec(columns: Sequence[str], matrix: np.ndarray, *, name: str = "w",
                output_scale: float = 1.0) -> TransformSpec:
    """A whitening :class:`TransformSpec` for the feature ``columns`` with the public (d, d)
    ``matrix`` W (for Cao & Zhang: ``PublicSecondMoment.whitening``), outputs multiplied by
    ``output_scale``."""
    W = np.asarray(matrix, dtype=np.float64)
    if W.shape != (len(columns), len(columns)):
        raise TransformError(f"whitening matrix {W.shape} does not match {len(columns)} columns")
    return TransformSpec(kind="whiten", columns=tuple(columns), name=name,
                         matrix=tuple(float(v) for v in W.ravel()), output_scale=float(output_scale))


# ------------------------------------------------------------------------------------ vector layout
@dataclass(frozen=True)
class VectorEntry:
    """One entry of the client vector: its name, role, the affine map of its raw column (transform
    outputs: center 0, scale 1) and the raw columns it is computed from."""

    name: str
    role: str
    center: float
    scale: float
    sources: tuple[str, ...]


def _layout(columns: Sequence[Any], transforms: Sequence[TransformSpec]) -> tuple[list[VectorEntry], list[str]]:
    """(entries, problems): the vector layout, and every problem met while building it."""
    entries = [VectorEntry(c.name, c.role, c.center, c.scale, (c.name,)) for c in columns]
    problems: list[str] = []
    for i, t in enumerate(transforms):
        where = f"transform {i} ({t.name or t.kind!r})"
        cls = TRANSFORM_KINDS.get(t.kind)
        if cls is None:
            problems.append(f"{where}: unknown kind {t.kind!r}; choose one of {sorted(TRANSFORM_KINDS)}")
            continue
        if not t.columns:
            problems.append(f"{where}: names no input columns")
            continue
        if len(set(t.columns)) != len(t.columns):
            problems.append(f"{where}: input columns repeat")
            continue
        names = [e.name for e in entries]
        missing = [c for c in t.columns if c not in names]
        if missing:
            problems.append(f"{where}: inputs {missing} are not (or no longer) entries of the client vector "
                            f"(available: {names})")
            continue
        pos = [names.index(c) for c in t.columns]
        not_features = [entries[p].name for p in pos if entries[p].role != "feature"]
        if not_features:
            problems.append(f"{where}: inputs {not_features} are not features (a transform may not consume the "
                            f"label or the intercept)")
            continue
        problems += cls.check(t, len(pos))
        if not t.name:
            problems.append(f"{where}: name (the prefix of its output names) must not be empty")
            continue
        width = cls.output_width(t, len(pos))
        sources = tuple(dict.fromkeys(s for p in pos for s in entries[p].sources))
        outputs = [VectorEntry(f"{t.name}{k}", "feature", 0.0, 1.0, sources) for k in range(max(width, 0))]
        keep = [e for j, e in enumerate(entries) if j not in pos]
        insert_at = sum(1 for j in range(min(pos)) if j not in pos)
        entries = keep[:insert_at] + outputs + keep[insert_at:]
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        problems.append(f"transform outputs clash with other entries of the client vector: {dup[:5]}")
    return entries, problems


def vector_layout(columns: Sequence[Any], transforms: Sequence[TransformSpec]) -> tuple[VectorEntry, ...]:
    """The client vector's entries for raw ``columns`` (ColumnSpec-like: name, role, center, scale)
    rewritten by ``transforms``; raises :class:`TransformError` listing every problem."""
    entries, problems = _layout(columns, transforms)
    if problems:
        raise TransformError("; ".join(problems))
    return tuple(entries)


def transform_problems(spec: Any) -> list[str]:
    """Every problem with a job spec's transforms (for ``validate_job``): kinds, parameters,
    references, and — columns partition — that each transform's inputs lie in one party's block."""
    if not spec.transforms:
        return []
    _, problems = _layout(spec.columns, spec.transforms)
    if problems or spec.partition != "columns":
        return problems
    owner = {c: p.party_id for p in spec.parties for c in p.columns}
    entries, _ = _layout(spec.columns, spec.transforms)
    for e in entries:
        parties = sorted({owner.get(s, "?") for s in e.sources})
        if len(parties) > 1:
            problems.append(
                f"entry {e.name!r} mixes columns of parties {parties}: in the columns partition each party maps "
                f"its own block (an additive kernel over the blocks); give each party its own transform")
            break
    return problems


# ------------------------------------------------------------------------------------ applying
class FeaturePipeline:
    """Raw columns → client-vector entries for one job (center/scale, then the transforms).

    Build once per job (``FeaturePipeline.for_spec(spec)``); random-feature weights are derived
    lazily on first use and cached.
    """

    def __init__(self, columns: Sequence[Any], transforms: Sequence[TransformSpec] = ()) -> None:
        self.columns = tuple(columns)
        self.transforms = tuple(transforms)
        self.entries = vector_layout(self.columns, self.transforms)
        self._built: dict[int, Transform] = {}

    @staticmethod
    def for_spec(spec: Any) -> "FeaturePipeline":
        return FeaturePipeline(spec.columns, spec.transforms)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    @property
    def raw_feature_names(self) -> tuple[str, ...]:
        """Raw feature columns, in job order: the columns :meth:`features` expects."""
        return tuple(c.name for c in self.columns if c.role == "feature")

    def transform(self, i: int, input_width: int) -> Transform:
        if i not in self._built:
            t = self.transforms[i]
            self._built[i] = TRANSFORM_KINDS[t.kind](t, input_width)
        return self._built[i]

    def vectors(self, raw: Mapping[str, np.ndarray], entries: Sequence[int] | None = None,
                rows: int | None = None) -> np.ndarray:
        """Client-vector entries (float64 (rows, len(entries))) from raw columns.

        Args:
            raw: raw column name → 1-D values (only the columns the wanted entries need; the
                intercept needs none).
            entries: indices into the vector layout (default: all).
            rows: number of rows (needed only when ``raw`` is empty, e.g. an intercept alone).
        """
        entries = list(range(len(self.entries))) if entries is None else list(entries)
        if rows is None:
            if not raw:
                raise TransformError("no raw columns given: pass rows=")
            rows = len(next(iter(raw.values())))
        need = {s for j in entries for s in self.entries[j].sources}
        used = [c for c in self.columns if c.name in need]
        names: list[str] = [c.name for c in used]
        # Written column by column into one array (no per-column temporaries, no column_stack copy):
        # the same (value − center)/scale in float64, so the same bits (a party's hot path).
        M = np.empty((rows, len(used)), order="F")  # columns contiguous: each write is one sweep
        for k, c in enumerate(used):
            if c.role == "intercept":
                value = np.ones(rows)
            else:
                if c.name not in raw:
                    raise TransformError(f"column {c.name!r} is needed but missing")
                value = np.asarray(raw[c.name], dtype=np.float64)
            np.subtract(value, c.center, out=M[:, k])
            np.divide(M[:, k], c.scale, out=M[:, k])
        for i, t in enumerate(self.transforms):
            present = [c in names for c in t.columns]
            if not any(present):
                continue
            if not all(present):
                raise TransformError(f"transform {t.name!r} needs {list(t.columns)} but only "
                                     f"{[c for c in t.columns if c in names]} are available")
            pos = [names.index(c) for c in t.columns]
            out = self.transform(i, len(pos)).apply(M[:, pos])
            keep = [j for j in range(len(names)) if j not in pos]
            at = sum(1 for j in range(min(pos)) if j not in pos)
            width = out.shape[1]
            M = np.concatenate([M[:, keep[:at]], out, M[:, keep[at:]]], axis=1)
            names = ([names[j] for j in keep[:at]] + [f"{t.name}{k}" for k in range(width)]
                     + [names[j] for j in keep[at:]])
        index = {n: j for j, n in enumerate(names)}
        try:
            order = [index[self.entries[j].name] for j in entries]
            if order == list(range(M.shape[1])):  # already in vector order: no gather copy
                return M
            return M[:, order]
        except KeyError as exc:
            raise TransformError(f"entry {exc.args[0]!r} cannot be computed from the given columns") from None

    def features(self, X_raw: np.ndarray) -> np.ndarray:
        """The regressors of the client vector (every entry but the label, intercept included, in
        vector order) for raw feature rows ``X_raw`` (rows, len(raw_feature_names)): what a model
        fitted on a release multiplies its coefficients with."""
        X = np.asarray(X_raw, dtype=np.float64)
        names = self.raw_feature_names
        if X.ndim != 2 or X.shape[1] != len(names):
            raise TransformError(f"raw inputs must have shape (rows, {len(names)}) for features {list(names)}, "
                                 f"got {X.shape}")
        wanted = [j for j, e in enumerate(self.entries) if e.role != "label"]
        return self.vectors({n: X[:, j] for j, n in enumerate(names)}, wanted, rows=X.shape[0])

    def pull_back(self, coef: np.ndarray) -> np.ndarray:
        """Coefficients on the client vector's regressors (every entry but the label, in vector
        order) → coefficients on the job's raw regressor columns after their center/scale (every
        column but the label, in column order), through the transposes of the LINEAR transforms,
        last transform first: a model ``β_outᵀ(W z)`` is ``(Wᵀβ_out)ᵀ z``.  Exact up to rounding.
        Raises :class:`TransformError` if a transform is not linear (random features: the model
        lives in feature space and has no coefficients on the raw columns)."""
        b = np.asarray(coef, dtype=np.float64).reshape(-1)
        regressors = [e.name for e in self.entries if e.role != "label"]
        if b.shape[0] != len(regressors):
            raise TransformError(f"expected {len(regressors)} coefficients (one per regressor entry), got {b.shape[0]}")
        # Replay the layout to know, per transform, where its outputs and inputs sit.
        stages: list[tuple[int, list[str], list[str], list[str]]] = []
        names = [c.name for c in self.columns if c.role != "label"]
        for i, t in enumerate(self.transforms):
            pos = [names.index(c) for c in t.columns]
            width = TRANSFORM_KINDS[t.kind].output_width(t, len(pos))
            keep = [j for j in range(len(names)) if j not in pos]
            at = sum(1 for j in range(min(pos)) if j not in pos)
            after = ([names[j] for j in keep[:at]] + [f"{t.name}{k}" for k in range(width)]
                     + [names[j] for j in keep[at:]])
            stages.append((i, list(names), list(t.columns), after))
            names = after
        coef_by_name = dict(zip(names, b))
        for i, before, inputs, after in reversed(stages):
            W = self.transform(i, len(inputs)).linear_map()
            if W is None:
                raise TransformError(f"transform {self.transforms[i].name!r} ({self.transforms[i].kind}) is not "
                                     f"linear: its model has no coefficients on the raw columns")
            t = self.transforms[i]
            out = np.array([coef_by_name.pop(f"{t.name}{k}") for k in range(W.shape[0])])
            back = W.T @ out
            for name, v in zip(inputs, back):
                coef_by_name[name] = float(v)
        return np.array([coef_by_name[c.name] for c in self.columns if c.role != "label"])

    def with_scale(self, i: int, output_scale: float) -> "FeaturePipeline":
        """A copy whose transform ``i`` has another ``output_scale`` (experiments)."""
        ts = list(self.transforms)
        ts[i] = replace(ts[i], output_scale=float(output_scale))
        return FeaturePipeline(self.columns, ts)

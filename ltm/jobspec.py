"""The job spec: the public, canonical description of one release, its digest and its validation.

A job fixes everything every actor must agree on (docs/architecture.md §2): the partition, who holds which
clients or columns, the column layout and its public transforms, the clip bound, the fixed-point
format, the sketch, the privacy parameters, the servers and the share mode.  Its canonical JSON
(sorted keys, no whitespace) is hashed with SHA-256; the digest is bound into every message.

``validate_job`` checks a spec and returns a :class:`JobAnalysis` (row loads, noise plan, headroom)
or raises :class:`JobSpecError` listing every problem with a message a person can act on.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from ltm import replicated
from ltm.client_set import ClientSet
from ltm.dp.calibration import CalibrationError, NoisePlan, plan_noise
from ltm.dp.defaults import DEFAULT_CLIP_BOUND, DEFAULT_DELTA, DEFAULT_LOAD_FRACTION
from ltm.dp.grid import grid_step, noise_grid_problem
from ltm.dp.mechanisms import CALIBRATIONS, MECHANISMS
from ltm.dp.noise import noise_tail_bound
from ltm.errors import LtmError
from ltm.identifiers import spec_id_problems
from ltm.lifts import LIFTED_KINDS, Lift, get_lift
from ltm.randomness import KeystreamBuffer
from ltm.ring import HEADROOM_LIMIT
from ltm.sharing import SHARE_MODES
from ltm.sketch import CHUNK_CLIENTS, SKETCH_KINDS, Sketch
from ltm.transforms import TransformSpec, VectorEntry, transform_problems, vector_layout
from ltm.verified_clipping import proof_shape

#: Release kinds a job spec's ``sketch.kind`` may name: the LTM sketches and the lifted kinds
#: (:mod:`ltm.lifts`; their public map is the one-row ``sum`` sketch).
RELEASE_KINDS = tuple(k for k in SKETCH_KINDS if k != "sum") + LIFTED_KINDS

JOB_SPEC_VERSION = "ltm.job.v1"
PARTITIONS = ("rows", "columns")
#: How parties upload their clients (:attr:`JobSpec.upload_mode`).
UPLOAD_MODES = ("per-client", "aggregate")
ROLES = ("feature", "intercept", "label")
INTERCEPT_NAME = "(intercept)"
MAX_FRAC_BITS = 32
MIN_FRAC_BITS = 8


class JobSpecError(LtmError, ValueError):
    """A job spec that must not run; ``problems`` lists every reason."""

    exit_code = 2
    code = "INVALID_ARGUMENT"

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid job spec:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class ColumnSpec:
    """One column of the client vector: ``x' = (x − center) / scale`` before clipping."""

    name: str
    role: str = "feature"
    center: float = 0.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        _canonical_floats(self)


@dataclass(frozen=True)
class PartySpec:
    """A party: in ``rows`` it holds clients ``start..stop−1`` (all columns); in ``columns`` it
    holds every row (start=0, stop=n) of the named column block, clipped to ``clip_bound``."""

    party_id: str
    start: int
    stop: int
    columns: tuple[str, ...] = ()
    clip_bound: float = DEFAULT_CLIP_BOUND

    @property
    def size(self) -> int:
        return self.stop - self.start

    def __post_init__(self) -> None:
        _canonical_floats(self)


@dataclass(frozen=True)
class SketchSpec:
    kind: str = "sparse"
    m: int = 100
    s: int = 1
    seed: str = ""  # 64 hex characters: the public 32-byte sketch seed


@dataclass(frozen=True)
class PrivacySpec:
    """Privacy parameters.  ``t_prime``: corrupt clients tolerated; ``corrupt_parties``: corrupt
    parties tolerated (their whole load in a row is assumed noiseless); ``min_honest_load``: L."""

    epsilon: float = 1.0
    delta: float = DEFAULT_DELTA
    mechanism: str = "gaussian"
    calibration: str = "tight"
    interpolate_p: float | None = None
    t_prime: int = 0
    corrupt_parties: int = 0
    min_honest_load: int = 0
    min_participants: int = 0
    #: The zCDP target ρ of a Gaussian job's noise: the largest ρ whose ε at δ is the job's ε by
    #: dp_accounting's conversion (:func:`ltm.dp.accounting.rho_for`), filled by
    #: :func:`resolve_defaults`.  Public and in the digest, so servers and the analyst plan the noise
    #: (headroom, grid and the fit) from it without loading the accountant; every party checks it
    #: with the accountant before its ledger charges (:func:`ltm.party.ledger.job_loss`).  None: every
    #: actor computes it with the accountant.  Omitted from the canonical JSON when None.
    zcdp_rho: float | None = None

    def __post_init__(self) -> None:
        _canonical_floats(self)


@dataclass(frozen=True)
class ServerSpec:
    server_id: str
    endpoint: str = ""


@dataclass(frozen=True)
class PrejobSpec:
    """A DP pre-job whose release chose some of this job's column centres and scales (e.g. the
    bounds pre-job's histograms).  Recorded so that every actor sees what the transforms cost: a party's
    ledger charges the pre-job's (ε, δ) like any job."""

    kind: str
    job_id: str
    digest: str
    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        _canonical_floats(self)


@dataclass(frozen=True)
class JobSpec:
    """The public description of one release (see module docstring)."""

    job_id: str
    partition: str
    n: int
    columns: tuple[ColumnSpec, ...]
    parties: tuple[PartySpec, ...]
    clip_bound: float
    frac_bits: int
    sketch: SketchSpec
    privacy: PrivacySpec
    servers: tuple[ServerSpec, ...]
    clip_norm: str = "l2"
    share_mode: str = "seed"
    #: A reproduction job (experiments, ``--seed`` runs): servers accept batches drawn with seeded
    #: (reproducible, NOT private) randomness only for such jobs, parties accept such jobs only when
    #: told to, and their releases are labelled not private.  Never set it for a real release.
    #: Omitted from the canonical JSON when false.
    reproduction: bool = False
    version: str = JOB_SPEC_VERSION
    #: Public transforms applied by parties before clipping (ltm.transforms); omitted from the
    #: canonical JSON when empty, so specs without transforms keep their digests.
    transforms: tuple[TransformSpec, ...] = ()
    #: the DP pre-jobs whose releases chose this job's column centres and scales (public
    #: provenance, docs/bounds.md); omitted from the canonical JSON when empty, like ``transforms``
    prejobs: tuple[PrejobSpec, ...] = ()
    #: How parties upload (:data:`UPLOAD_MODES`): ``per-client`` (one noisy copy per client and
    #: piece, summed by the servers) or ``aggregate`` (each party uploads its partial of the public
    #: map with its noise added once per entry: ``party/aggregate.py``).  ``auto`` is resolved by
    #: :func:`resolve_defaults` (:func:`default_upload_mode`).  In the digest; omitted from the
    #: canonical JSON when ``per-client``, so earlier specs keep their digests.
    upload_mode: str = "per-client"
    #: How many colluding servers the release must tolerate (the trust assumption, issue #21).
    #: None: k − 1, every server but one (the sketch's and the rows gram's assumption).  A smaller
    #: value with an honest majority (2t < k) admits the replicated degree-2 release of the columns
    #: partition (ltm/replicated.py), which two colluding servers of three could open.  Omitted from
    #: the canonical JSON when None, so older specs keep their digests.
    colluding_servers: int | None = None
    #: The replicated release with verified clipping (issue #30, :mod:`ltm.verified_clipping`): every
    #: party proves on its shares that each client's block is within its budget share, and nothing
    #: is released unless every proof passes.  Only such a job may tolerate a deviating party
    #: (``corrupt_parties`` ≥ 1).  Omitted from the canonical JSON when false (older specs keep their
    #: digests) and from :attr:`computation_digest` (the checks change nothing an honest job computes).
    verified_clipping: bool = False

    def __post_init__(self) -> None:
        _canonical_floats(self)
        if isinstance(self.transforms, list):
            object.__setattr__(self, "transforms", tuple(self.transforms))

    # ---------------------------------------------------------------- derived views
    @property
    def aggregated(self) -> bool:
        """Each party uploads one aggregate of its clients (upload mode ``aggregate``)."""
        return self.upload_mode == "aggregate"

    @property
    def k(self) -> int:
        """Number of servers."""
        return len(self.servers)

    @functools.cached_property
    def layout(self) -> tuple[VectorEntry, ...]:
        """The client vector's entries: the raw columns rewritten by the transforms
        (ltm.transforms.vector_layout; without transforms, one entry per column)."""
        return vector_layout(self.columns, self.transforms)

    @property
    def width(self) -> int:
        """D: entries per client vector (features after transforms, intercept, label)."""
        return len(self.layout)

    @property
    def column_names(self) -> tuple[str, ...]:
        """Names of the raw columns (before transforms); see :attr:`vector_names`."""
        return tuple(c.name for c in self.columns)

    @property
    def vector_names(self) -> tuple[str, ...]:
        """Names of the client vector's entries (= column_names when there are no transforms)."""
        return tuple(e.name for e in self.layout)

    @property
    def label_index(self) -> int | None:
        """Index of the label entry in the client vector."""
        idx = [i for i, e in enumerate(self.layout) if e.role == "label"]
        return idx[0] if idx else None

    @property
    def intercept_index(self) -> int | None:
        """Index of the intercept entry in the client vector."""
        idx = [i for i, e in enumerate(self.layout) if e.role == "intercept"]
        return idx[0] if idx else None

    @property
    def tolerated_colluding_servers(self) -> int:
        """The colluding servers the job tolerates: :attr:`colluding_servers`, k − 1 when unset."""
        return self.k - 1 if self.colluding_servers is None else self.colluding_servers

    @property
    def replicated(self) -> bool:
        """Whether the release is the replicated degree-2 release (a ``gram`` job in the columns
        partition: :mod:`ltm.replicated`), computed by the servers from 2-of-3 replicated shares."""
        return self.partition == "columns" and self.sketch.kind == "gram"

    @property
    def lift(self) -> Lift | None:
        """The client-side lift of a lifted release kind (``gram``, …), None for a sketch kind."""
        return get_lift(self.sketch.kind)

    @property
    def upload_width(self) -> int:
        """W: values each client uploads per piece (D for a sketch kind, the lift's width else)."""
        lift = self.lift
        return self.width if lift is None else lift.width(self)

    def upload_columns(self, party: PartySpec) -> tuple[int, ...]:
        """Indices (into the uploaded vector) of the values this party's batches carry."""
        if self.lift is not None:
            return tuple(range(self.upload_width))
        return tuple(self.party_column_indices(party))

    @property
    def entry_bound(self) -> float:
        """A bound on |entry| of one client's (noise-free) uploaded vector: C, or the lift's bound."""
        lift = self.lift
        return self.clip_bound if lift is None else lift.max_abs_entry(self)

    def make_sketch(self) -> Sketch:
        """The public linear map: the seeded sketch, or the one-row ``sum`` map of a lifted kind."""
        kind = "sum" if self.lift is not None else self.sketch.kind
        return Sketch(kind, self.sketch.m, self.n, self.sketch.s, bytes.fromhex(self.sketch.seed))

    def party(self, party_id: str) -> PartySpec:
        for p in self.parties:
            if p.party_id == party_id:
                return p
        raise KeyError(f"party {party_id!r} is not in job {self.job_id!r}")

    def party_column_indices(self, party: PartySpec) -> list[int]:
        """Indices (into the client vector, :attr:`layout`) of the entries this party contributes:
        all of them (rows partition), or those computed from its column block (columns)."""
        if self.partition == "rows":
            return list(range(self.width))
        own = set(party.columns)
        return [i for i, e in enumerate(self.layout) if set(e.sources) <= own]

    def party_raw_columns(self, party: PartySpec) -> list[str]:
        """Raw data columns (intercept excluded) the party needs to compute its entries."""
        need = {src for i in self.party_column_indices(party) for src in self.layout[i].sources}
        return [c.name for c in self.columns if c.name in need and c.role != "intercept"]

    def noise_plan(self) -> NoisePlan:
        p = self.privacy
        if self.replicated:  # per-party noise on the product grid 2^-2f (ltm/replicated.py)
            return replicated.replicated_noise_plan(
                epsilon=p.epsilon, delta=p.delta, clip_bound=self.clip_bound, d=self.width,
                parties=len(self.parties), corrupt_parties=p.corrupt_parties, frac_bits=self.frac_bits,
                zcdp_rho=p.zcdp_rho)
        pieces = self.make_sketch().pieces
        return plan_noise(
            mechanism=p.mechanism, calibration=p.calibration, epsilon=p.epsilon, delta=p.delta,
            clip_norm=self.clip_bound, s=pieces, min_honest_load=max(p.min_honest_load, 1),
            interpolate_p=p.interpolate_p, n=self.n, m=self.sketch.m, d=self.width,
            t_prime=p.t_prime, sketch_kind=self.make_sketch().kind,
            sensitivity=None if self.lift is None else self.lift.sensitivity(self),
            frac_bits=self.frac_bits, width=self.upload_width, zcdp_rho=p.zcdp_rho,
            noise_factors=None if self.lift is None or not self.frac_bits else self.lift.noise_factors(self),
        )

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for optional in ("transforms", "prejobs", "reproduction"):  # absent when empty/false: older specs
            if not d[optional]:                                      # keep their digests
                del d[optional]
        if d["upload_mode"] == "per-client":
            del d["upload_mode"]
        if d["colluding_servers"] is None:
            del d["colluding_servers"]
        if not d["verified_clipping"]:
            del d["verified_clipping"]
        if d["privacy"]["zcdp_rho"] is None:
            del d["privacy"]["zcdp_rho"]
        return d

    def canonical_json(self) -> bytes:
        """Canonical bytes: sorted keys, no whitespace, shortest round-trip floats."""
        return self._canonical

    @functools.cached_property
    def _canonical(self) -> bytes:
        # Cached: a spec is immutable, and servers consult its digest on every upload (re-encoding a
        # 1000-party spec costs ~9 ms, which made upload cost grow with the number of parties).
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False).encode()

    @functools.cached_property
    def digest(self) -> str:
        """Hex SHA-256 of the canonical JSON."""
        return hashlib.sha256(self.canonical_json()).hexdigest()

    @functools.cached_property
    def computation_digest(self) -> str:
        """Hex SHA-256 of the canonical spec without its name, its servers' network endpoints and
        :attr:`verified_clipping`: every field that decides what the job computes (data layout,
        sketch, noise, servers' ids).

        Seeded (reproduction) randomness is derived from it, so one seed gives different jobs
        independent noise, while the same job run in process and over the network (different
        endpoints) or re-created under another id draws the very same noise — and so releases the
        very same bytes, which tells nothing new (averaging identical releases removes no noise).
        """
        d = self.to_dict()
        d["job_id"] = ""
        d["servers"] = [{**srv, "endpoint": ""} for srv in d["servers"]]
        d.pop("verified_clipping", None)  # the proof changes nothing an honest job releases
        return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()).hexdigest()

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "JobSpec":
        """Parse a spec dict strictly: every field must have its declared JSON type."""
        try:
            return _typed(JobSpec, d, "job spec")
        except JobSpecError as exc:
            raise JobSpecError([f"malformed job spec: {p}" for p in exc.problems]) from None

    @staticmethod
    def from_json(data: bytes | str) -> "JobSpec":
        try:
            return JobSpec.from_dict(json.loads(data))
        except json.JSONDecodeError as exc:
            raise JobSpecError([f"job spec is not valid JSON: {exc}"]) from exc


# -------------------------------------------------------------------- strict typing
_NESTED = {"columns": ColumnSpec, "parties": PartySpec, "servers": ServerSpec, "transforms": TransformSpec,
           "prejobs": PrejobSpec}


def _typed_value(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against a field's type hint (int, float, str, bool, X | None, tuple)."""
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise JobSpecError([f"{where} must be an integer, got {value!r}"])
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise JobSpecError([f"{where} must be true or false, got {value!r}"])
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise JobSpecError([f"{where} must be a number, got {value!r}"])
        return float(value) + 0.0  # canonical: 1 → 1.0 and −0.0 → 0.0, so equal specs hash equally
    if hint is str:
        if not isinstance(value, str):
            raise JobSpecError([f"{where} must be a string, got {value!r}"])
        return value
    if hint == (float | None):
        return None if value is None else _typed_value(value, float, where)
    if hint == (int | None):
        return None if value is None else _typed_value(value, int, where)
    if hint == tuple[str, ...]:
        if not isinstance(value, (list, tuple)):
            raise JobSpecError([f"{where} must be a list of strings, got {value!r}"])
        return tuple(_typed_value(v, str, f"{where}[{i}]") for i, v in enumerate(value))
    if hint == tuple[float, ...]:
        if not isinstance(value, (list, tuple)):
            raise JobSpecError([f"{where} must be a list of numbers, got {value!r}"])
        return tuple(_typed_value(v, float, f"{where}[{i}]") for i, v in enumerate(value))
    raise TypeError(f"no rule for type {hint!r}")  # a programming error, not bad input


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """Resolved field type hints of a spec dataclass (cached: resolving them is slow)."""
    import typing

    return typing.get_type_hints(cls)


def _typed(cls: type, data: Any, where: str) -> Any:
    """Construct dataclass ``cls`` from a JSON dict, field by field, with JobSpecError on bad input."""
    if not isinstance(data, dict):
        raise JobSpecError([f"{where} must be a JSON object, got {type(data).__name__}"])
    hints = _hints(cls)
    names = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise JobSpecError([f"{where}: unknown fields {unknown}"])
    kwargs: dict[str, Any] = {}
    for name, f in names.items():
        if name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise JobSpecError([f"{where}: missing field {name!r}"])
            continue
        value, hint, here = data[name], hints[name], f"{where}.{name}"
        if name in _NESTED and cls is JobSpec:
            if not isinstance(value, list):
                raise JobSpecError([f"{here} must be a list"])
            kwargs[name] = tuple(_typed(_NESTED[name], v, f"{here}[{i}]") for i, v in enumerate(value))
        elif hint in (SketchSpec, PrivacySpec):
            kwargs[name] = _typed(hint, value, here)
        else:
            kwargs[name] = _typed_value(value, hint, here)
    return cls(**kwargs)


def _canonical_floats(obj: Any) -> None:
    """Coerce a frozen dataclass's float fields in place (1 → 1.0, −0.0 → 0.0)."""
    for name, hint in _hints(type(obj)).items():  # type: ignore[arg-type]  # a class is hashable (lru_cache)
        value = getattr(obj, name)
        if hint is float or (hint == (float | None) and value is not None):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                object.__setattr__(obj, name, float(value) + 0.0)


# -------------------------------------------------------------------- loads and corruption
def participant_mask(n: int, participants: np.ndarray | None) -> np.ndarray:
    """Bool mask of length n from a mask, an index array, or None (everyone)."""
    if participants is None:
        return np.ones(n, dtype=bool)
    arr = np.asarray(participants)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise ValueError(f"participant mask must have length {n}")
        return arr
    mask = np.zeros(n, dtype=bool)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"participant index outside [0, {n})")
    mask[arr.astype(np.int64)] = True
    return mask


def participant_set(n: int, participants: "ClientSet | np.ndarray | None") -> ClientSet:
    """A :class:`~ltm.client_set.ClientSet` from a ClientSet, a bool mask (n,), an index array, or
    None (everyone)."""
    if participants is None or isinstance(participants, ClientSet):
        return ClientSet.coerce(n, participants)
    return ClientSet.from_mask(participant_mask(n, participants))


def honest_row_loads(spec: JobSpec, participants: "ClientSet | np.ndarray | None" = None,
                     sketch: Sketch | None = None, slots: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row loads of a participant set and the corruption deduction per row.

    Returns ``(loads, deduction)``, both int64 (m,).  The honest load of row r is
    ``loads[r] − deduction[r]``.  Rows partition: deduction = t′ (a corrupt client holds at most
    one non-zero per row) plus, per row, the largest load that ``corrupt_parties`` parties hold
    together.  Columns partition: every entry's noise comes from the one party owning its column;
    the guarantee covers the honest parties' columns, so there is nothing to deduct (t′ must be 0).

    ``participants``: a ClientSet, a bool mask (n,), an index array, or None (everyone).

    Cost: O(parties + m) whenever it can be, which is what lets a 10⁸–10⁹-client job be built,
    validated, gated and reported in seconds (docs/performance.md, "Row loads at 10⁸–10⁹ clients"):

    * the lifted kinds' ``sum`` map and the dense sketch place every client exactly once in every
      row, so a party's load in each row is its number of participants (a ClientSet rank);
    * a sparse sketch's per-party loads at full participation are derived once per process and job
      (:func:`_segment_loads`, cached) and a party whose clients all participate — every party of an
      aggregated job, and of a per-client job whose uploads all arrived — reuses them;
    * only a party whose clients partly participate is counted chunk by chunk over its members
      (:data:`~ltm.sketch.CHUNK_CLIENTS` clients at a time; ``slots``, the sketch's precomputed
      :meth:`Sketch.slots`, a server's cache for small jobs, saves re-deriving the placement).

    The corrupt-party deduction is exact at any size: the parties' loads stream through a running
    top-``corrupt_parties`` per row, so memory is O(corrupt_parties·m) beyond the cached table.
    """
    sketch = sketch or spec.make_sketch()
    members = participant_set(spec.n, participants)
    m = sketch.m
    segments = _load_segments(spec)
    bounds = np.array([a for a, _ in segments] + [segments[-1][1]], dtype=np.int64)
    counts = members.counts_between(bounds)  # participants per segment (per party in the rows partition)
    c = spec.privacy.corrupt_parties if spec.partition == "rows" else 0
    deduction = np.full(m, spec.privacy.t_prime if spec.partition == "rows" else 0, dtype=np.int64)
    if sketch.kind in ("sum", "dense"):
        # One non-zero of every client in every row: each row's load is the participant count, and
        # a party's load in every row is its participant count.
        loads = np.full(m, members.count, dtype=np.int64)
        if c > 0:
            deduction += int(np.sort(counts)[-c:].sum())
        return loads, deduction
    table = _segment_loads(sketch, segments) if bool((counts == np.diff(bounds)).any()) else None
    loads = np.zeros(m, dtype=np.int64)
    top = np.zeros((c, m), dtype=np.int64)  # the c largest party loads seen so far, per row, ascending
    for i, (a, b) in enumerate(segments):
        if counts[i] == 0:
            continue
        if counts[i] == b - a and table is not None:
            seg = table[i].astype(np.int64)
        else:
            seg = range_row_loads(sketch, a, b, members, slots)
        loads += seg
        if c == 1:
            np.maximum(top[0], seg, out=top[0])
        elif c > 1:
            top = np.sort(np.vstack([top, seg[None, :]]), axis=0)[1:]
    deduction += top.sum(axis=0)
    return loads, deduction


def _load_segments(spec: JobSpec) -> tuple[tuple[int, int], ...]:
    """The client ranges whose loads :func:`honest_row_loads` keeps apart: each party's in the rows
    partition (the corrupt-party deduction needs them), the whole [0, n) in the columns partition
    (every party holds every client there)."""
    if spec.partition == "rows":
        return tuple((p.start, p.stop) for p in spec.parties)
    return ((0, spec.n),)


def range_row_loads(sketch: Sketch, start: int, stop: int, members: ClientSet | None = None,
                    slots: np.ndarray | None = None) -> np.ndarray:
    """The row loads (int64 (m,)) of the clients in ``[start, stop)`` — of its ``members`` only
    when given — chunk by chunk (:data:`~ltm.sketch.CHUNK_CLIENTS`): memory O(m + one chunk).
    ``slots``: the sketch's precomputed :meth:`Sketch.slots` (read instead of derived)."""
    loads = np.zeros(sketch.m, dtype=np.int64)
    ranges = [(start, stop)] if members is None else members.within(start, stop).tolist()
    buffer = KeystreamBuffer(CHUNK_CLIENTS * 3) if slots is None and sketch.kind == "sparse" and sketch.s == 1 \
        else None
    for lo, hi in ranges:
        for a in range(lo, hi, CHUNK_CLIENTS):
            b = min(a + CHUNK_CLIENTS, hi)
            rows = slots[:, a:b] >> 1 if slots is not None else sketch.rows(a, b, buffer)
            loads += np.bincount(rows.ravel(), minlength=sketch.m)
    return loads


#: The per-party row loads at full participation are cached (per process) when they
#: fit in this many bytes, each party's row stored in the smallest unsigned type that holds its
#: largest load (a 10⁹-client, 64-party job's 606 331-row sketch: loads ≲ 100, 39 MB as uint8).
#: Larger tables are re-derived per use.  At most two jobs' tables are kept (128 MiB at worst).
_LOAD_TABLE_BYTES = 64 << 20


@functools.lru_cache(maxsize=2)
def _cached_segment_loads(sketch: Sketch, segments: tuple[tuple[int, int], ...]) -> np.ndarray | None:
    rows: list[np.ndarray] = []
    for a, b in segments:
        load = range_row_loads(sketch, a, b)
        rows.append(load.astype(np.min_scalar_type(int(load.max()))))
        if len(segments) * sketch.m * max(r.itemsize for r in rows) > _LOAD_TABLE_BYTES:
            return None  # too large to keep: the callers derive each party's loads per use
    table = np.zeros((len(segments), sketch.m), dtype=np.result_type(*rows))
    for i, r in enumerate(rows):
        table[i] = r
    table.flags.writeable = False  # shared by every caller in this process
    return table


def _segment_loads(sketch: Sketch, segments: tuple[tuple[int, int], ...]) -> np.ndarray | None:
    """Each segment's row loads at full participation, (segments, m) of the smallest unsigned type
    that holds them, derived once per process (cached) when they fit :data:`_LOAD_TABLE_BYTES`;
    None otherwise (callers derive what they need range by range).  The placement is public,
    derived from the job's seed, so every actor computes the same table."""
    if len(segments) * sketch.m > _LOAD_TABLE_BYTES:  # even one byte per cell is too many
        return None
    return _cached_segment_loads(sketch, segments)


# -------------------------------------------------------------------- validation
@dataclass(frozen=True)
class JobAnalysis:
    """What validation computed: loads at full participation, the noise plan, the headroom."""

    min_row_load: int
    max_row_load: int
    max_deduction: int
    max_feasible_load: int
    noise_plan: NoisePlan
    headroom_bits: float  # log2(2^62 / worst-case |entry|·2^f); must be > 0
    warnings: tuple[str, ...] = field(default=())


def _check_structure(spec: JobSpec) -> list[str]:
    """Every structural problem of ``spec``, in a fixed order: the job's scalars, its columns, its
    transforms (a transform problem stops here: the vector layout is unknown), the sketch, the
    privacy parameters, the parties."""
    problems = _job_problems(spec) + _column_problems(spec)
    # transforms (before anything reads the vector layout)
    transform_issues = transform_problems(spec)
    if transform_issues:
        return problems + transform_issues
    problems += _sketch_problems(spec)
    problems += _privacy_problems(spec)
    problems += _check_parties(spec)
    return problems


def _job_problems(spec: JobSpec) -> list[str]:
    """The job's own scalars: version, ids, partition, n, k, modes, clipping and the grid."""
    problems: list[str] = []
    p = spec.privacy
    if spec.version != JOB_SPEC_VERSION:
        problems.append(f"version {spec.version!r} is not supported (expected {JOB_SPEC_VERSION!r})")
    if not spec.job_id:
        problems.append("job_id must not be empty")
    # Ids name files, TLS identities and log lines: one grammar (ltm.identifiers), before any is used.
    problems += spec_id_problems(spec.job_id if spec.job_id else "-", [q.party_id for q in spec.parties],
                                 [s.server_id for s in spec.servers], [c.name for c in spec.columns],
                                 [t.name for t in spec.transforms], [x.job_id for x in spec.prejobs],
                                 [s.endpoint for s in spec.servers])
    if spec.partition not in PARTITIONS:
        problems.append(f"partition must be one of {PARTITIONS}, got {spec.partition!r}")
    if spec.n < 1:
        problems.append(f"n must be ≥ 1 (got {spec.n})")
    if spec.k < 2:
        problems.append(f"at least 2 servers are needed for additive sharing (got {spec.k})")
    if len({s.server_id for s in spec.servers}) != spec.k:
        problems.append("server ids must be distinct")
    if spec.upload_mode not in UPLOAD_MODES:
        problems.append(f"upload_mode must be one of {UPLOAD_MODES} (or 'auto' before defaults are resolved), "
                        f"got {spec.upload_mode!r}")
    if spec.share_mode not in SHARE_MODES:
        problems.append(f"share_mode must be one of {SHARE_MODES}, got {spec.share_mode!r}")
    if spec.clip_norm not in ("l2", "l1"):
        problems.append(f"clip_norm must be 'l2' or 'l1', got {spec.clip_norm!r}")
    if p.mechanism == "laplace" and spec.clip_norm != "l1":
        problems.append("the laplace mechanism needs clip_norm 'l1' (its sensitivity is an ℓ1 bound)")
    if p.mechanism == "gaussian" and spec.clip_norm != "l2":
        problems.append("the gaussian mechanism needs clip_norm 'l2'")
    if not (spec.clip_bound > 0 and math.isfinite(spec.clip_bound)):
        problems.append(f"clip_bound must be a positive finite number (got {spec.clip_bound})")
    if not MIN_FRAC_BITS <= spec.frac_bits <= 60:
        problems.append(f"frac_bits must be in [{MIN_FRAC_BITS}, 60] (got {spec.frac_bits})")
    return problems


def _column_problems(spec: JobSpec) -> list[str]:
    """The columns: present, distinct names, known roles, usable scaling, one label and one intercept at most."""
    problems: list[str] = []
    names = spec.column_names
    if not names:
        problems.append("the job has no columns")
    if len(set(names)) != len(names):
        problems.append("column names must be distinct")
    roles = [c.role for c in spec.columns]
    for c in spec.columns:
        if c.role not in ROLES:
            problems.append(f"column {c.name!r}: role must be one of {ROLES}, got {c.role!r}")
        if not (c.scale > 0 and math.isfinite(c.scale) and math.isfinite(c.center)):
            problems.append(f"column {c.name!r}: scale must be positive and center finite")
    if roles.count("label") > 1 or roles.count("intercept") > 1:
        problems.append("at most one label column and one intercept column")
    return problems


def _sketch_problems(spec: JobSpec) -> list[str]:
    """The sketch: a release kind, what a lifted kind needs, m and s against D and n, the seed."""
    problems: list[str] = []
    p, sk = spec.privacy, spec.sketch
    lift = get_lift(sk.kind)
    if sk.kind not in RELEASE_KINDS:
        problems.append(f"sketch kind (the release kind) must be one of {RELEASE_KINDS}, got {sk.kind!r}")
    if lift is not None:
        if (sk.m, sk.s) != (1, 1):
            problems.append(f"release kind {sk.kind!r} sums over clients: set sketch m = 1 and s = 1 "
                            f"(got m={sk.m}, s={sk.s})")
        if spec.replicated:
            problems += _replicated_problems(spec)
        elif spec.partition not in lift.partitions:
            problems.append(f"release kind {sk.kind!r} needs the {' or '.join(lift.partitions)} partition: in "
                            f"the {spec.partition} partition no party holds a whole client vector to lift")
        if p.mechanism not in lift.mechanisms:
            problems.append(f"release kind {sk.kind!r} supports the mechanisms {lift.mechanisms}, not {p.mechanism!r}")
        if p.calibration == "paper":
            problems.append(f"calibration 'paper' reproduces the paper's sketch formulas; release kind "
                            f"{sk.kind!r} needs 'tight' or 'interpolate'")
    if sk.m < 1:
        problems.append(f"sketch m must be ≥ 1 (got {sk.m})")
    elif lift is None and spec.label_index is not None and sk.m < spec.width:
        problems.append(f"sketch m={sk.m} is smaller than the client vector width D={spec.width}: "
                        f"a regression needs m ≥ D (raise m)")
    if sk.kind == "sparse" and not 1 <= sk.s <= max(sk.m, 1):
        problems.append(f"sparsity s must satisfy 1 ≤ s ≤ m (got s={sk.s}, m={sk.m})")
    if sk.m > spec.n:
        problems.append(f"sketch m={sk.m} exceeds the number of clients n={spec.n}")
    try:
        if len(bytes.fromhex(sk.seed)) != 32:
            raise ValueError
    except ValueError:
        problems.append("sketch seed must be 64 hex characters (32 bytes)")
    return problems


def _privacy_problems(spec: JobSpec) -> list[str]:
    """The privacy parameters: mechanism, calibration, (ε, δ), ρ, and the corruption thresholds."""
    problems: list[str] = []
    p = spec.privacy
    if p.mechanism not in MECHANISMS:
        problems.append(f"mechanism must be one of {MECHANISMS}, got {p.mechanism!r}")
    if p.calibration not in CALIBRATIONS:
        problems.append(f"calibration must be one of {CALIBRATIONS}, got {p.calibration!r}")
    if not (p.epsilon > 0 and math.isfinite(p.epsilon)):
        problems.append(f"epsilon must be > 0 (got {p.epsilon})")
    if p.mechanism == "gaussian" and not 0 < p.delta < 1:
        problems.append(f"delta must satisfy 0 < delta < 1 for the gaussian mechanism (got {p.delta})")
    if p.mechanism == "laplace" and p.delta != 0:
        problems.append("the laplace mechanism is pure ε-DP: set delta to 0")
    if p.zcdp_rho is not None:
        if not (p.zcdp_rho > 0 and math.isfinite(p.zcdp_rho)):
            problems.append(f"zcdp_rho must be a positive finite number (got {p.zcdp_rho})")
        if p.mechanism != "gaussian" or p.calibration == "paper":
            problems.append(f"zcdp_rho is the zCDP target of a tight or interpolated gaussian job; drop it for "
                            f"mechanism {p.mechanism!r} with calibration {p.calibration!r}")
    if not 0 <= p.t_prime < spec.n:
        problems.append(f"t_prime (corrupt clients tolerated) must satisfy 0 ≤ t′ < n={spec.n} (got {p.t_prime})")
    if spec.partition == "columns" and p.t_prime:
        problems.append("t_prime must be 0 in the columns partition (noise is added by parties, not clients; "
                        "use corrupt_parties)")
    if not 0 <= p.corrupt_parties < max(len(spec.parties), 1):
        problems.append(f"corrupt_parties must be in [0, number of parties) (got {p.corrupt_parties})")
    if spec.verified_clipping and not spec.replicated:
        problems.append("verified_clipping applies to the replicated release only (columns partition, kind gram, "
                        "colluding_servers = 1)")
    if spec.colluding_servers is not None and not 1 <= spec.colluding_servers < max(spec.k, 2):
        problems.append(f"colluding_servers must be in [1, k) (got {spec.colluding_servers} with k={spec.k})")
    if p.min_participants < 0 or p.min_participants > spec.n:
        problems.append(f"min_participants must be in [0, n] (got {p.min_participants})")
    return problems


def _replicated_problems(spec: JobSpec) -> list[str]:
    """What a columns-partition ``gram`` job (the replicated release) needs beyond a sketch job."""
    problems = []
    t = spec.tolerated_colluding_servers
    if spec.k != replicated.REPLICATED_SERVERS:
        problems.append(f"the replicated release of the columns partition needs k = {replicated.REPLICATED_SERVERS} "
                        f"servers (got {spec.k}); larger k needs a t-out-of-k replicated scheme (docs/architecture.md)")
    elif not replicated.honest_majority(spec.k, t):
        problems.append(f"release kind 'gram' in the columns partition is the replicated release: two colluding "
                        f"servers of three reconstruct the data, so it needs an honest majority; the job tolerates "
                        f"{t} colluding servers (set colluding_servers = 1 to accept that, or use a sketch kind)")
    if spec.privacy.mechanism != "gaussian":
        problems.append("the replicated release supports the gaussian mechanism only")
    if spec.privacy.calibration != "tight":
        problems.append("the replicated release is calibrated 'tight' only (its noise is per party, not per client)")
    trust = replicated.unverified_party_problem(spec.privacy.corrupt_parties)
    if trust is not None and not spec.verified_clipping:
        problems.append(trust)
    honest = len(spec.parties) - replicated.noise_known_parties(len(spec.parties), spec.privacy.corrupt_parties)
    if spec.privacy.min_honest_load not in (0, honest):
        problems.append(f"min_honest_load of the replicated release counts the honest parties' noise draws per "
                        f"entry: it must be parties − max(corrupt_parties, 1) = {honest} "
                        f"(got {spec.privacy.min_honest_load})")
    return problems


def _check_parties(spec: JobSpec) -> list[str]:
    problems: list[str] = []
    if not spec.parties:
        return ["the job has no parties"]
    if len({p.party_id for p in spec.parties}) != len(spec.parties):
        problems.append("party ids must be distinct")
    if spec.partition == "rows":
        expected = 0
        for p in spec.parties:
            if p.start != expected or p.stop <= p.start:
                problems.append(f"party {p.party_id!r}: client ranges must tile [0, n) in order without gaps "
                                f"(expected a range starting at {expected}, got [{p.start}, {p.stop}))")
                break
            expected = p.stop
        else:
            if expected != spec.n:
                problems.append(f"party ranges cover [0, {expected}) but n={spec.n}")
        for p in spec.parties:
            if p.columns:
                problems.append(f"party {p.party_id!r}: rows partition parties hold all columns; leave columns empty")
            if abs(p.clip_bound - spec.clip_bound) > 0:
                problems.append(f"party {p.party_id!r}: clip_bound must equal the job's in the rows partition")
    elif spec.partition == "columns":
        seen: list[str] = []
        for p in spec.parties:
            if (p.start, p.stop) != (0, spec.n):
                problems.append(f"party {p.party_id!r}: in the columns partition every party holds all rows [0, n)")
            unknown = [c for c in p.columns if c not in spec.column_names]
            if unknown:
                problems.append(f"party {p.party_id!r}: unknown columns {unknown}")
            seen += list(p.columns)
        if sorted(seen) != sorted(spec.column_names):
            problems.append("in the columns partition the parties' column blocks must cover every column exactly once")
        total = sum(p.clip_bound**2 for p in spec.parties)
        if total > spec.clip_bound**2 * (1 + 1e-12):
            problems.append(f"party clip bounds must satisfy Σ C_j² ≤ C² (got {total:.6g} > {spec.clip_bound**2:.6g}): "
                            f"otherwise a whole row could exceed the clip bound the noise is calibrated for")
    return problems


def worst_entry_magnitude(max_row_load: float, clip_bound: float, plan: NoisePlan) -> float:
    """Largest |release entry| (before the 2^f scaling), barring a negligible-probability tail:
    every (client, piece) in the busiest row has an entry ≤ ``clip_bound`` (C, or a lifted kind's
    entry bound, :attr:`JobSpec.entry_bound`) plus half a grid step of rounding (grid plans) plus
    one noise draw ≤ the tail bound (:func:`ltm.dp.noise.noise_tail_bound`: exceeded with
    probability < e^-100 per draw).

    The ring bound: the release entry is a sum in Z_2^64 whose centred lift is the true integer sum
    as long as |sum| < 2^63; :func:`validate_job` requires this bound × 2^f ≤ 2^62, so every noisy
    sum of every n and D the limits allow decodes exactly, with a factor-2 margin, except with
    probability < (draws in the busiest row)·e^-100."""
    rounding = 0.5 * grid_step(plan.frac_bits) if plan.frac_bits else 0.0
    return max_row_load * (clip_bound + rounding + noise_tail_bound(plan))


def validate_job(spec: JobSpec, sketch: Sketch | None = None) -> JobAnalysis:
    """Validate a job spec; return its analysis or raise JobSpecError listing every problem."""
    problems = _check_structure(spec)
    if problems:
        raise JobSpecError(problems)
    sketch = sketch or spec.make_sketch()
    loads, deduction = honest_row_loads(spec, None, sketch)
    honest = loads - deduction
    feasible = int(honest.min())
    L = spec.privacy.min_honest_load
    if feasible < 1:
        problems.append(f"some sketch row has no honest load even with every client participating "
                        f"(min load {int(loads.min())}, deduction up to {int(deduction.max())}): "
                        f"lower m (now {spec.sketch.m}) or the corruption tolerance, or add clients")
    elif L < 1 or L > feasible:
        problems.append(f"min_honest_load L={L} is not feasible: with every client participating the "
                        f"smallest honest row load is {feasible}; choose 1 ≤ L ≤ {feasible}")
    if problems:
        raise JobSpecError(problems)
    try:
        plan = spec.noise_plan()
    except CalibrationError as exc:
        raise JobSpecError([f"noise calibration failed: {exc}"]) from exc
    if spec.verified_clipping:  # the proof's norm identity must not wrap at this f (ltm/verified_clipping.py)
        for party in spec.parties:
            try:
                proof_shape(len(spec.party_column_indices(party)), spec.frac_bits, party.clip_bound)
            except ValueError as exc:
                raise JobSpecError([f"party {party.party_id!r}: {exc}"]) from None
    if spec.replicated:  # products on the grid 2^-2f, noise from the parties (ltm/replicated.py)
        worst = replicated.entry_bound(spec.n, spec.clip_bound, spec.width, spec.frac_bits, plan,
                                       len(spec.parties)) * 2.0 ** (2 * spec.frac_bits)
    else:
        worst = worst_entry_magnitude(float(loads.max()), spec.entry_bound, plan) * 2.0**spec.frac_bits
    headroom_bits = math.log2(HEADROOM_LIMIT / worst)
    grid = noise_grid_problem(plan.grid_noise_sd_min, spec.frac_bits)
    if grid is not None:
        raise JobSpecError([grid])
    if headroom_bits <= 0:
        need = math.floor(-headroom_bits) + 1  # the smallest reduction that leaves positive headroom
        raise JobSpecError([
            f"ring headroom: a release entry could reach {worst:.3g} > 2^62 "
            f"(max row load {int(loads.max())} × (entry bound {spec.entry_bound:g} + noise tail "
            f"{noise_tail_bound(plan):.3g}) × 2^{spec.frac_bits}) and overflow Z_2^64; "
            f"use frac_bits ≤ {spec.frac_bits - need} or a smaller noise/clip bound"])
    return JobAnalysis(
        min_row_load=int(loads.min()), max_row_load=int(loads.max()), max_deduction=int(deduction.max()),
        max_feasible_load=feasible, noise_plan=plan, headroom_bits=headroom_bits,
    )


def warm_validation_in_background() -> threading.Thread:
    """Load, on a daemon thread, what the first :func:`validate_job` of a process imports lazily
    (the privacy accountant: dp_accounting with scipy, ~1 s on a quiet host and several on a
    loaded one).  A server or analyst calls it once it serves, so the first job's publication does
    not pay the import while the analyst and parties wait (every actor validates the spec)."""
    def warm() -> None:
        try:
            from ltm.dp import accounting
            accounting.zcdp_epsilon(1.0, 1e-6)
        except Exception:  # a warm-up must never take an actor down; validation reports real errors
            pass

    thread = threading.Thread(target=warm, name="ltm-warm-validation", daemon=True)
    thread.start()
    return thread


def default_corrupt_parties(spec: JobSpec) -> int:
    """The fewest corrupt parties a job must tolerate under the realistic threat (docs/architecture.md §8).

    In the rows partition a party generates, and so knows, its own clients' noise: a curious party
    that subtracts it leaves the *other* parties' clients under less noise than calibrated (the
    default 4-party demo's (1, 1e-6) became ε ≈ 1.15).  So a rows job with at least two parties, any
    of which holds more than one client, tolerates at least one corrupt party: the gate then
    subtracts, row by row, the largest load one party holds (:func:`honest_row_loads`).  Otherwise
    0: single-client parties are covered by t′, a lone party holds every client itself, and in the
    columns partition each party's noise protects its own columns.  The replicated release's default
    is 0 too: it cannot yet tolerate a deviating party (:func:`ltm.replicated.unverified_party_problem`;
    raising the default would refuse every such job), and its calibration discounts one curious
    party's own noise whatever corrupt_parties says (:func:`ltm.replicated.noise_known_parties`).
    A replicated job with :attr:`JobSpec.verified_clipping` catches a deviating party, so it takes
    the realistic default again: one corrupt party when there are two or more.
    """
    if spec.replicated and spec.verified_clipping:
        return replicated_corrupt_parties_default(len(spec.parties))
    return corrupt_parties_default(spec.partition, [p.size for p in spec.parties])


def corrupt_parties_default(partition: str, party_sizes: list[int] | tuple[int, ...]) -> int:
    """:func:`default_corrupt_parties` from the partition and the parties' client counts alone
    (for builders that need it before the spec exists, e.g. to plan the release)."""
    if partition != "rows" or len(party_sizes) < 2:
        return 0
    return 1 if max(party_sizes) > 1 else 0


def default_upload_mode(spec: JobSpec) -> str:
    """The upload mode rule: ``aggregate`` when every party holds more than one client and the job
    tolerates no corrupt clients (t′ = 0: parties are the unit of corruption), else ``per-client``
    (cross-device jobs with a party per client, and the t′-corrupt-client experiments)."""
    if spec.replicated:  # shared by party/replicated.py, one share set per party whatever the mode
        return "per-client"
    if spec.privacy.t_prime == 0 and all(p.size > 1 for p in spec.parties):
        return "aggregate"
    return "per-client"


def replicated_corrupt_parties_default(parties: int) -> int:
    """The parties whose noise the replicated release's calibration discounts by default: as in the rows
    partition, a party knows its own noise, so with two or more parties the noise of one may be
    subtracted (1; :func:`ltm.replicated.noise_known_parties`).  Not the job's ``corrupt_parties``,
    which counts deviating parties and is 0 (:func:`default_corrupt_parties`)."""
    return replicated.noise_known_parties(parties, 0)


def resolve_defaults(spec: JobSpec, load_fraction: float = DEFAULT_LOAD_FRACTION) -> JobSpec:
    """Fill the defaults: corrupt_parties is raised to at least :func:`default_corrupt_parties`
    (except in a reproduction job, which keeps the paper's threat model as given), then the fields
    left at 0: min_honest_load L (``load_fraction`` of the feasible honest load), min_participants
    (half the clients), and frac_bits (the largest ≤ 32 the headroom allows, planned at that f).

    Every way of building a job (``ltm.sim.runtime.jobs.build_job``, job files) goes through here, so a
    deployment job gets the corruption default without asking for it.  An ``auto`` upload mode
    becomes :func:`default_upload_mode`'s choice."""
    if spec.upload_mode == "auto":
        spec = replace(spec, upload_mode=default_upload_mode(spec))
    problems = _check_structure(replace(spec, frac_bits=spec.frac_bits or MAX_FRAC_BITS))
    if problems:
        raise JobSpecError(problems)
    sketch = spec.make_sketch()
    p = spec.privacy
    if not spec.reproduction and p.corrupt_parties < default_corrupt_parties(spec):
        p = replace(p, corrupt_parties=default_corrupt_parties(spec))
        spec = replace(spec, privacy=p)
    if p.min_honest_load == 0 and spec.replicated:  # L counts the parties' per-entry noise draws
        p = replace(p, min_honest_load=max(
            len(spec.parties) - replicated.noise_known_parties(len(spec.parties), p.corrupt_parties), 1))
    if p.min_honest_load == 0:
        loads, deduction = honest_row_loads(spec, None, sketch)
        feasible = int((loads - deduction).min())
        if feasible < 1:
            raise JobSpecError([f"no sketch row keeps an honest load ≥ 1 with all {spec.n} clients "
                                f"(min load {int(loads.min())}): lower m={spec.sketch.m} or add clients"])
        p = replace(p, min_honest_load=max(1, int(math.floor(load_fraction * feasible))))
    if p.min_participants == 0:
        p = replace(p, min_participants=max(1, math.ceil(spec.n / 2)))
    if p.zcdp_rho is None and p.mechanism == "gaussian" and p.calibration != "paper":
        # the one accountant call of a job: every actor but the parties plans from this number
        from ltm.dp.accounting import rho_for
        p = replace(p, zcdp_rho=rho_for(p.epsilon, p.delta))
    spec = replace(spec, privacy=p)
    if spec.frac_bits == 0 and spec.replicated:
        p = spec.privacy
        return replace(spec, frac_bits=replicated.replicated_frac_bits(
            n=spec.n, clip_bound=spec.clip_bound, d=spec.width, epsilon=p.epsilon, delta=p.delta,
            parties=len(spec.parties), corrupt_parties=p.corrupt_parties))
    if spec.frac_bits == 0:
        # The largest f ≤ 32 whose worst-case entry fits the headroom.  The plan depends on f (the
        # rounding widens the sensitivity by √(s·W)·2^-f), so each candidate f is planned anew;
        # the largest fitting f also gives the most noise in grid steps (ltm.dp.grid's check).
        loads, _ = honest_row_loads(spec, None, sketch)
        magnitude = math.inf
        for f in range(MAX_FRAC_BITS, MIN_FRAC_BITS - 1, -1):
            candidate = replace(spec, frac_bits=f)
            magnitude = worst_entry_magnitude(float(loads.max()), spec.entry_bound, candidate.noise_plan())
            if magnitude * 2.0**f <= HEADROOM_LIMIT:
                return candidate
        raise JobSpecError([f"ring headroom: even {MIN_FRAC_BITS} fraction bits could overflow "
                            f"(worst-case entry {magnitude:.3g}); lower the noise or clip bound"])
    return spec

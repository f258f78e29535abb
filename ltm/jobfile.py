"""Job files: a job written by the analyst from public information only, as TOML.

A job file states everything a job needs and nothing that comes from a party's data: the job id
(the user's choice), the partition, the parties and their client counts (``rows``) or the aligned
row count and column blocks (``columns``), each column's name, role and *public* transform, the
release (sketch kind and parameters), the privacy and corruption parameters, the servers, and the
model the analyst fits.  :func:`parse_job_file` turns it into a resolved, validated
:class:`~ltm.jobspec.JobSpec` plus the analyst's :class:`FitSpec`, or raises
:class:`JobFileError` listing every problem, one actionable line each.

A column's transform ``x' = (x − center) / scale`` takes one of three public forms:

* ``range = [lo, hi]``: values are known to lie in ``[lo, hi]`` (units, physical limits).  The
  centre is the midpoint and the scale is chosen so that a value at either end uses exactly the
  column's share of the clip budget (no row is ever clipped if the range holds).
* ``center`` and ``spread``: a typical value and a typical deviation (for instance a standard
  deviation known from domain knowledge, or estimated by the DP bounds pre-job).  The scale puts
  one ``spread`` at the column's share of the clip budget (like a range of ``center ± spread``).
* ``center`` and ``scale``: the transform exactly as written.

The clip budget ``C²`` is split between columns as :func:`budget_shares` says (the label gets a
larger share than a regressor).  ``[[transforms]]`` tables (the fields of
:class:`ltm.transforms.TransformSpec`, e.g. random Fourier features) are passed to the spec as
written; the budget split counts the raw columns.  This module is pure: it parses text; reading the file is the
caller's business.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ltm.jobspec import (CALIBRATIONS, INTERCEPT_NAME, MECHANISMS, PARTITIONS, RELEASE_KINDS, ROLES, ColumnSpec,
                         JobSpec, JobSpecError, PartySpec, PrejobSpec, PrivacySpec, ServerSpec, SketchSpec,
                         UPLOAD_MODES, default_upload_mode, resolve_defaults, validate_job)
from ltm.errors import LtmError, bounded
from ltm.jobconfig import file_default, toml_sections
from ltm.identifiers import column_problem, endpoint_problem, id_problem, party_id_problem, server_id_problem
from ltm.lifts import get_lift
from ltm.jobspec import _typed as typed_record
from ltm.sharing import SHARE_MODES
from ltm.transforms import TransformSpec

#: The models the analyst can fit on a release (``analyst.estimators`` implements each); "none"
#: keeps the release only (e.g. the histograms of the bounds pre-job).
MODELS: tuple[str, ...] = ("ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols", "none")
#: Domain separation for a sketch seed derived from the job id when the file gives none.
SEED_DOMAIN = b"ltm/jobfile/sketch-seed/v1\x00"
DEFAULT_DEADLINE_S = float(file_default("deadline_s"))
#: Longest intake deadline a job may ask for (30 days): a job must end.
MAX_DEADLINE_S = 30 * 24 * 3600.0

#: The tables and their keys, each key declared once (with its default and help) in ltm.jobconfig.
_SECTIONS = toml_sections()
_ARRAYS = {
    "transforms": {f.name for f in fields(TransformSpec)},
    "parties": {"id", "clients", "columns", "clip_bound"},
    "columns": {"name", "role", "range", "center", "spread", "scale"},
    "servers": {"id", "endpoint"},
}
_PREJOB_KEYS = {"kind", "job_id", "digest", "epsilon", "delta"}

# Limits checked before anything in a job file is walked, so a hostile or mistyped file is refused
# at once, in one line: its size and nesting on the raw text (tomllib recurses once per level: an
# array nested 100 000 deep would end in RecursionError), then the counts and sizes that later
# steps loop over (validation walks all n clients once).  The counts equal a server's default
# limits (ltm.limits.ServerLimits): a job above them would be refused by every default server.
#: Largest job file read (bytes): 100 000 parties of ~45 bytes each fit.
MAX_JOB_FILE_BYTES = 8 << 20
#: Deepest nesting of arrays and inline tables (a job file needs 3: [[privacy.prejob]] → range),
#: and the most dots in one dotted key (it needs 1: privacy.prejob).
MAX_TOML_NESTING = 16
#: Largest n (clients of all parties, or [job].rows): ServerLimits.max_n.
MAX_CLIENTS = 1 << 30
#: Most parties, columns (and transform outputs: the client vector's width D), servers.
MAX_PARTIES = 100_000
MAX_COLUMNS = 65_536
MAX_SERVERS = 64
#: Largest sketch m (rows) and s (pieces per client): ServerLimits.max_m and max_pieces.
MAX_SKETCH_ROWS = 1 << 20
MAX_PIECES = 64


class JobFileError(LtmError, ValueError):
    """A job file that cannot run; ``problems`` has one actionable line per problem."""

    exit_code = 2

    #: at most this many problems are shown, each cut to MAX_PROBLEM_CHARS (a hostile file may have
    #: 200 000 unknown keys, or a key a megabyte long); ``problems`` keeps them all
    MAX_SHOWN = 20
    MAX_PROBLEM_CHARS = 500

    def __init__(self, problems: list[str], source: str = "job file") -> None:
        self.problems = list(problems)
        self.source = source
        shown = [bounded(p, self.MAX_PROBLEM_CHARS) for p in self.problems[:self.MAX_SHOWN]]
        if len(self.problems) > self.MAX_SHOWN:
            shown.append(f"… and {len(self.problems) - self.MAX_SHOWN} more problems")
        super().__init__(f"{source}: " + "; ".join(shown) if len(self.problems) == 1 else
                         f"{source}: {len(self.problems)} problems:\n  - " + "\n  - ".join(shown))


@dataclass(frozen=True)
class FitSpec:
    """What the analyst fits on the release (post-processing: it costs no privacy)."""

    model: str = "ridge"
    lam: float = 0.0  # 0 = the default rule (analyst.estimators.default_ridge_lambda)
    rank: int = 5
    debias: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "lambda": self.lam, "rank": self.rank, "debias": self.debias}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "FitSpec":
        return FitSpec(model=str(d.get("model", "ridge")), lam=float(d.get("lambda", 0.0)),
                       rank=int(d.get("rank", 5)), debias=bool(d.get("debias", True)))


@dataclass(frozen=True)
class JobFile:
    """A parsed job file: the resolved, validated spec, the fit, and how long intake stays open."""

    spec: JobSpec
    fit: FitSpec = field(default_factory=FitSpec)
    deadline_s: float = DEFAULT_DEADLINE_S
    #: with ``[release] kind = "auto"``: why the planner chose the spec's kind and parameters
    plan_reason: str = ""


def budget_shares(regressors: int, labelled: bool) -> tuple[float, float]:
    """``(p, q)``: the share of the squared clip budget C² of each regressor and of the label.

    With isotropic release noise the de-biased regression's excess loss is ∝ 1/q + R²/p subject
    to ``regressors·p + q = 1``; at R² ≈ 1 the minimum is ``q = 1/(1 + √regressors)``.  Without a
    label (low rank) the budget is split evenly: ``q = 0``.
    """
    if labelled:
        q = 1.0 / (1.0 + math.sqrt(max(regressors, 1)))
        return (1.0 - q) / max(regressors, 1), q
    return 1.0 / max(regressors, 1), 0.0


def derived_seed(job_id: str) -> str:
    """The public sketch seed used when a job file gives none: SHA-256 of the job id (hex)."""
    return hashlib.sha256(SEED_DOMAIN + job_id.encode()).hexdigest()


# ---------------------------------------------------------------------------- parsing helpers
class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, msg: str) -> None:
        self.items.append(msg)

    def unknown(self, where: str, table: dict, known: set[str]) -> None:
        extra = sorted(set(table) - known)
        for key in extra[:JobFileError.MAX_SHOWN]:
            # difflib costs ~0.1 ms a key: suggestions for the few problems shown, not for 200 000 keys
            near = difflib.get_close_matches(key, sorted(known), n=1) if len(self.items) < JobFileError.MAX_SHOWN \
                else []
            hint = f" (did you mean {near[0]!r}?)" if near else f"; known keys: {', '.join(sorted(known))}"
            self.add(f"{where}: unknown key {bounded(key, 60)!r}{hint}")
        if len(extra) > JobFileError.MAX_SHOWN:
            self.add(f"{where}: {len(extra) - JobFileError.MAX_SHOWN} more unknown keys")

    def get(self, table: dict, key: str, kind: type | tuple, where: str, default: Any = None,
            required: bool = False) -> Any:
        if key not in table:
            if required:
                self.add(f"{where}: missing required key {key!r}")
            return default
        value = table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            ok = False
        else:
            ok = isinstance(value, kinds)
        if not ok:
            names = " or ".join("number" if k is float else k.__name__ for k in kinds if k is not int or float not in kinds)
            self.add(f"{where}.{key} must be a {names}, got {value!r}")
            return default
        return float(value) if float in kinds and not isinstance(value, bool) and isinstance(value, int) else value


def _number(p: _Problems, table: dict, key: str, where: str, default: Any = None, required: bool = False) -> Any:
    return p.get(table, key, (int, float), where, default, required)


def _integer(p: _Problems, table: dict, key: str, where: str, default: Any = None, required: bool = False) -> Any:
    return p.get(table, key, int, where, default, required)


# ---------------------------------------------------------------------------- reading TOML safely
def toml_skeleton(text: str) -> str:
    """TOML ``text`` with every string replaced by ``s`` and every comment removed: what is left
    is structure (brackets, keys, dots, numbers), scanned for depth before :mod:`tomllib` runs.

    A linear scan (regular-expression jumps from one special character to the next).  It follows
    TOML's four string forms and comments; on text that is not valid TOML it may differ from
    tomllib's reading, and tomllib then refuses the text anyway.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while (found := _TOML_SPECIAL.search(text, i)) is not None:
        j, c = found.start(), found.group()
        if c in "[]{}":
            out.append(text[i:j + 1])
            i = j + 1
            continue
        out.append(text[i:j])
        if c == "#":
            k = text.find("\n", j)
            i = n if k < 0 else k
        else:
            quote = c * 3 if text.startswith(c * 3, j) else c
            i = _string_end(text, j + len(quote), quote)
            out.append("s")
    out.append(text[i:])
    return "".join(out)


def toml_nesting(text: str) -> int:
    """The deepest nesting of arrays and inline tables (``[``/``{``) in TOML ``text``, outside
    strings and comments (tomllib recurses once per level)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(toml_skeleton(text)):
        depth = depth + 1 if m.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def toml_key_depth(skeleton: str) -> int:
    """The most dots in one dotted key of a :func:`toml_skeleton` (tomllib's time and memory grow
    with the square of a dotted key's length: ``a.a.a…`` 10 000 deep takes 400 MB).  A value has at
    most one dot outside strings (a float, a time's fraction), so a longer run is a key."""
    return max((m.group().count(".") for m in _DOTTED.finditer(skeleton)), default=0)


_BRACKETS = re.compile(r"[\[\]{}]")
#: starts only where a run of key characters starts, possessive: linear time on a megabyte-long key
#: (a plain ``[…]+(?:\.…)+`` retries at every position of a run without dots: quadratic)
_DOTTED = re.compile(r"(?<![A-Za-z0-9_+-])[A-Za-z0-9_+-]++(?:[ \t]*+\.[ \t]*+[A-Za-z0-9_+-]++)+")
_TOML_SPECIAL = re.compile(r"""[#"'\[\]{}]""")
#: inside a basic string: its end, an escape, or (one-line strings) the end of the line
_BASIC_STOP = {'"': re.compile(r'["\\\n]'), '"""': re.compile(r'"""|\\')}


def _string_end(text: str, i: int, quote: str) -> int:
    """Index just past the string whose text starts at ``i`` (``quote``: how it opened)."""
    n = len(text)
    if quote[0] == "'":  # literal strings have no escapes
        ends = [k for k in (text.find(quote, i), -1 if len(quote) == 3 else text.find("\n", i)) if k >= 0]
        if not ends:
            return n
        j = min(ends)
        if not text.startswith(quote, j):
            return j  # a one-line string ends at the line (tomllib reports the error)
        end = j + len(quote)
    else:
        stop = _BASIC_STOP[quote]
        while True:
            m = stop.search(text, i)
            if m is None:
                return n
            if m.group() == "\\":
                i = m.start() + 2  # an escaped character (\" or \\) cannot end the string
            elif m.group() == "\n":
                return m.start()  # a one-line string ends at the line (tomllib reports the error)
            else:
                end = m.end()
                break
    if len(quote) == 3:  # up to two more quotes belong to a multi-line string's text (a)
        for _ in range(2):
            if text.startswith(quote[0], end):
                end += 1
    return end


def load_toml(text: str, source: str = "job file") -> dict[str, Any]:
    """``tomllib.loads(text)`` within the job-file limits: size and nesting are checked on the raw
    text first (:data:`MAX_JOB_FILE_BYTES`, :data:`MAX_TOML_NESTING`); :class:`JobFileError` in one
    line for anything tomllib refuses."""
    if len(text) > MAX_JOB_FILE_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_JOB_FILE_BYTES:
        raise JobFileError([f"the file is larger than {MAX_JOB_FILE_BYTES} bytes, more than any job needs "
                            f"(the limit of {MAX_PARTIES} parties fits in a few MB)"], source)
    skeleton = toml_skeleton(text)
    depth = toml_nesting(skeleton)  # the skeleton has no strings left: the same count
    if depth > MAX_TOML_NESTING:
        raise JobFileError([f"arrays or inline tables nested {depth} deep; a job file needs at most 3 "
                            f"(limit {MAX_TOML_NESTING})"], source)
    dots = toml_key_depth(skeleton)
    if dots > MAX_TOML_NESTING:
        raise JobFileError([f"a dotted key {dots + 1} parts long; a job file needs at most 2 "
                            f"(limit {MAX_TOML_NESTING + 1})"], source)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise JobFileError([f"not valid TOML: {exc}"], source) from None
    except RecursionError:  # the scan above should make this unreachable; never a traceback
        raise JobFileError([f"nested too deeply to parse (limit {MAX_TOML_NESTING})"], source) from None


def read_job_text(path: Any, source: str | None = None) -> str:
    """A job file's text, read with the limits of :func:`load_toml`: at most
    :data:`MAX_JOB_FILE_BYTES` + 1 bytes are read (``/dev/zero`` ends at once), and text that is
    not UTF-8 is a one-line :class:`JobFileError` naming the byte."""
    source = source or str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_JOB_FILE_BYTES + 1)
    except OSError as exc:
        raise JobFileError([f"cannot read it: {exc.strerror or exc}"], source) from None
    if len(data) > MAX_JOB_FILE_BYTES:
        raise JobFileError([f"the file is larger than {MAX_JOB_FILE_BYTES} bytes, more than any job needs"], source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JobFileError([f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                            f"(save the file as UTF-8)"], source) from None


def _over(count: int, limit: int, what: str) -> str | None:
    return f"{what}: {count} is more than the limit of {limit}" if count > limit else None


# ---------------------------------------------------------------------------- the parser
def parse_job_file(text: str, *, source: str = "job file", resolve: bool = True) -> JobFile:
    """Parse and validate a job file's text.

    ``resolve``: fill the defaults (L, min_participants, frac_bits) and run the full job
    validation (row loads, calibration, ring headroom).  Raises :class:`JobFileError`.

    Limits (the module's ``MAX_*`` constants) are checked before anything is walked: the text's
    size and nesting before TOML parsing, the number of parties, columns and servers before any
    entry is read, each count of clients, m and s as it is read, and every id against
    :mod:`ltm.identifiers`; only then does validation loop over the n clients.

    Each section is read by its own function, in the file's order, into one list of problems; the
    file is refused with all of them at once.
    """
    doc = load_toml(text, source)
    counts = [_over(len(v), limit, f"[[{name}]] tables") for name, limit in
              (("parties", MAX_PARTIES), ("columns", MAX_COLUMNS), ("servers", MAX_SERVERS),
               ("transforms", MAX_COLUMNS)) if isinstance(v := doc.get(name), list)]
    if any(counts):
        raise JobFileError([c for c in counts if c], source)
    p = _Problems()
    tables, arrays = _sections(p, doc)
    job, privacy = _job_keys(p, tables["job"]), _privacy_keys(p, tables["privacy"])
    cols = _columns_section(p, arrays["columns"], job.clip_bound)
    party_specs, n = _parties_section(p, tables["job"], arrays["parties"], job, cols, source)
    kind, m, s, seed = _release_keys(p, tables["release"], job.job_id)
    server_specs = _servers_section(p, arrays["servers"])
    fit = _fit_keys(p, tables["fit"], cols)
    transforms = _transforms_section(p, arrays["transforms"])

    if p.items:
        raise JobFileError(p.items, source)
    privacy_t = tables["privacy"]
    spec = JobSpec(
        job_id=job.job_id, partition=job.partition, n=n, columns=tuple(cols.specs), parties=tuple(party_specs),
        clip_bound=job.clip_bound, frac_bits=job.frac_bits,
        sketch=SketchSpec(kind=kind, m=m or 1, s=s, seed=seed),  # kind 'auto': the planner decides below
        privacy=PrivacySpec(epsilon=privacy.epsilon, delta=privacy.delta, mechanism=privacy.mechanism,
                            calibration=privacy.calibration, interpolate_p=privacy.interpolate_p,
                            t_prime=_integer(p, privacy_t, "t_prime", "[privacy]", file_default("t_prime")),
                            corrupt_parties=_integer(p, privacy_t, "corrupt_parties", "[privacy]", file_default("corrupt_parties")),
                            min_honest_load=_integer(p, privacy_t, "min_honest_load", "[privacy]", file_default("min_honest_load")),
                            min_participants=_integer(p, privacy_t, "min_participants", "[privacy]", file_default("min_participants"))),
        servers=tuple(server_specs), clip_norm="l1" if privacy.mechanism == "laplace" else "l2",
        share_mode=job.share_mode, prejobs=privacy.prejobs, transforms=tuple(transforms),
        reproduction=bool(job.reproduction), upload_mode=job.upload_mode,
        # the trust assumption (JobSpec.colluding_servers): absent = k − 1
        colluding_servers=_integer(p, privacy_t, "colluding_servers", "[privacy]", file_default("colluding_servers")),
    )
    if p.items:
        raise JobFileError(p.items, source)
    plan_reason = ""
    if spec.upload_mode == "auto":
        spec = replace(spec, upload_mode=default_upload_mode(spec))
    if kind == "auto":
        spec, plan_reason = _planned(spec, m, cols.labelled, job.max_party_upload_bytes or 0)
    if resolve:
        try:
            spec = resolve_defaults(spec)
            validate_job(spec)
        except JobSpecError as exc:
            raise JobFileError(exc.problems, source) from None
    return JobFile(spec, fit, job.deadline_s, plan_reason)


def _sections(p: _Problems, doc: dict[str, Any]) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """The file's ``[section]`` tables and ``[[array]]`` entries by name (empty where absent or of
    the wrong shape, which is a problem), each checked for unknown keys."""
    p.unknown("the file", doc, set(_SECTIONS) | set(_ARRAYS))
    tables: dict[str, dict] = {}
    for name in _SECTIONS:
        value = doc.get(name, {})
        if not isinstance(value, dict):
            p.add(f"[{name}] must be a table, e.g. a line '[{name}]' followed by keys")
            value = {}
        p.unknown(f"[{name}]", value, _SECTIONS[name] if name != "privacy" else _SECTIONS[name])
        tables[name] = value
    arrays: dict[str, list[dict]] = {}
    for name in _ARRAYS:
        value = doc.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            p.add(f"{name} must be an array of tables: write each entry under a '[[{name}]]' line")
            value = []
        for i, entry in enumerate(value):
            p.unknown(f"[[{name}]] #{i + 1}", entry, _ARRAYS[name])
        arrays[name] = value
    return tables, arrays


@dataclass(frozen=True)
class _JobKeys:
    """The ``[job]`` table's keys as read (a key of the wrong type reads as its default)."""

    job_id: str
    partition: str
    clip_bound: Any
    share_mode: str
    frac_bits: Any
    deadline_s: Any
    reproduction: bool
    upload_mode: str
    max_party_upload_bytes: Any


def _job_keys(p: _Problems, job: dict) -> _JobKeys:
    """``[job]``: id, partition, clip bound, share and upload modes, deadline (``rows`` is read with the parties)."""
    job_id = p.get(job, "id", str, "[job]", "", required=True)
    if job_id and (bad := id_problem(job_id, "[job].id")):
        p.add(bad + " (it names files and directories of every actor)")
        job_id = ""  # no seed is derived from it
    partition = p.get(job, "partition", str, "[job]", file_default("partition"))
    if partition not in PARTITIONS:
        p.add(f"[job].partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
    clip_bound = _number(p, job, "clip_bound", "[job]", file_default("clip"))
    share_mode = p.get(job, "share_mode", str, "[job]", file_default("share_mode"))
    if share_mode not in SHARE_MODES:
        p.add(f"[job].share_mode must be one of {', '.join(SHARE_MODES)}, got {share_mode!r}")
    frac_bits = _integer(p, job, "frac_bits", "[job]", file_default("frac_bits"))
    deadline_s = _number(p, job, "deadline_s", "[job]", DEFAULT_DEADLINE_S)
    # A reproduction job (JobSpec.reproduction): its servers accept seeded, NOT private batches.
    reproduction = p.get(job, "reproduction", bool, "[job]", file_default("reproduction"))
    # How parties upload (JobSpec.upload_mode); "auto": ltm.jobspec.default_upload_mode's rule.
    upload_mode = p.get(job, "upload_mode", str, "[job]", file_default("upload_mode"))
    if upload_mode not in ("auto", *UPLOAD_MODES):
        p.add(f"[job].upload_mode must be one of auto, {', '.join(UPLOAD_MODES)}, got {upload_mode!r}")
    max_party_upload_bytes = _integer(p, job, "max_party_upload_bytes", "[job]", file_default("max_party_upload_bytes"))
    if isinstance(max_party_upload_bytes, int) and max_party_upload_bytes < 0:
        p.add(f"[job].max_party_upload_bytes must be ≥ 0 (0: no bound), got {max_party_upload_bytes}")
    if not (isinstance(deadline_s, float) and 0 < deadline_s <= MAX_DEADLINE_S):
        p.add(f"[job].deadline_s must be a positive number of seconds, at most {MAX_DEADLINE_S:g} (30 days), "
              f"got {deadline_s!r}")
    return _JobKeys(job_id, partition, clip_bound, share_mode, frac_bits, deadline_s, reproduction, upload_mode,
                    max_party_upload_bytes)


@dataclass(frozen=True)
class _PrivacyKeys:
    """The ``[privacy]`` keys that shape the noise (the trust keys are read when the spec is built)."""

    mechanism: str
    epsilon: Any
    delta: Any
    calibration: str
    interpolate_p: Any
    prejobs: tuple


def _privacy_keys(p: _Problems, privacy: dict) -> _PrivacyKeys:
    """``[privacy]``: mechanism, ε and δ, calibration, and the pre-jobs."""
    mechanism = p.get(privacy, "mechanism", str, "[privacy]", file_default("mechanism"))
    if mechanism not in MECHANISMS:
        p.add(f"[privacy].mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
    epsilon = _number(p, privacy, "epsilon", "[privacy]", None, required=True)
    delta = _number(p, privacy, "delta", "[privacy]", 0.0 if mechanism == "laplace" else None,
                    required=mechanism != "laplace")
    calibration = p.get(privacy, "calibration", str, "[privacy]", file_default("calibration"))
    if calibration not in CALIBRATIONS:
        p.add(f"[privacy].calibration must be one of {', '.join(CALIBRATIONS)}, got {calibration!r}")
    interpolate_p = _number(p, privacy, "interpolate_p", "[privacy]", None)
    if calibration == "interpolate" and interpolate_p is None:
        p.add("[privacy].calibration 'interpolate' needs interpolate_p (0 = local model, 1 = distributed)")
    prejobs = _prejobs(p, privacy.get("prejob", []))
    return _PrivacyKeys(mechanism, epsilon, delta, calibration, interpolate_p, prejobs)


@dataclass(frozen=True)
class _Columns:
    """The ``[[columns]]`` as read: names and roles in file order (one per entry, valid or not), the
    squared-clip-budget shares of a regressor (``share_p``) and of the label (``share_q``), and the
    column specs that could be built."""

    names: list[str]
    roles: list[str]
    labelled: bool
    share_p: float
    share_q: float
    specs: list[ColumnSpec]


def _columns_section(p: _Problems, columns: list[dict], clip_bound: Any) -> _Columns:
    """``[[columns]]``: each column's name and role, then its range or center (:func:`_column`)."""
    if not columns:
        p.add("the job has no columns: add one '[[columns]]' table per column (name, role, and a range or center)")
    names: list[str] = []
    roles: list[str] = []
    for i, c in enumerate(columns):
        where = f"[[columns]] #{i + 1}"
        name = p.get(c, "name", str, where, "", required=True) or ""
        role = p.get(c, "role", str, where, "feature")
        if role not in ROLES:
            p.add(f"{where} ({name!r}): role must be one of {', '.join(ROLES)}, got {role!r}")
        if role == "intercept" and not name:
            name = INTERCEPT_NAME
        if name and (bad := column_problem(name, f"{where}.name")):
            p.add(bad)
        names.append(name)
        roles.append(role)
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        p.add(f"column names must be distinct; repeated: {dup}")
    labelled = "label" in roles
    regressors = sum(r in ("feature", "intercept") for r in roles)
    share_p, share_q = budget_shares(regressors, labelled)
    col_specs: list[ColumnSpec] = []
    for i, c in enumerate(columns):
        col = _column(p, c, f"[[columns]] #{i + 1} ({names[i]!r})", names[i], roles[i],
                      share_q if roles[i] == "label" else share_p, clip_bound)
        if col is not None:
            col_specs.append(col)
    return _Columns(names, roles, labelled, share_p, share_q, col_specs)


def _parties_section(p: _Problems, job: dict, parties: list[dict], keys: _JobKeys, cols: _Columns,
                     source: str) -> tuple[list[PartySpec], int]:
    """``[[parties]]`` (and ``[job].rows``): the party specs and n.  In the rows partition each
    party's clients follow the previous party's; n above the limit is refused at once, before
    validation would walk n clients.  In the columns partition a party without a clip bound gets
    the share of ``[job].clip_bound`` its block of columns carries."""
    partition, clip_bound = keys.partition, keys.clip_bound
    if not parties:
        p.add("the job has no parties: add one '[[parties]]' table per party (id, and clients or columns)")
    rows = _integer(p, job, "rows", "[job]", None, required=partition == "columns")
    if rows is not None and not 1 <= rows <= MAX_CLIENTS:
        p.add(f"[job].rows must be in [1, {MAX_CLIENTS}] (2^30), got {rows}")
        rows = None
    party_specs: list[PartySpec] = []
    start = 0
    if partition == "rows" and rows is not None:
        p.add("[job].rows is for the columns partition; in the rows partition n is the sum of the parties' clients")
    for i, q in enumerate(parties):
        where = f"[[parties]] #{i + 1}"
        pid = p.get(q, "id", str, where, "", required=True) or ""
        if pid and (bad := party_id_problem(pid, f"{where}.id")):
            p.add(bad)
            pid = ""
        where = f"{where} ({pid!r})" if pid else where
        if partition == "rows":
            clients = _integer(p, q, "clients", where, None, required=True)
            if "columns" in q or "clip_bound" in q:
                p.add(f"{where}: in the rows partition a party holds every column of its clients; "
                      f"remove its 'columns'/'clip_bound'")
            if clients is not None:
                if clients < 1:
                    p.add(f"{where}: clients must be ≥ 1, got {clients}")
                elif start + clients > MAX_CLIENTS:  # before validation walks all n clients
                    raise JobFileError(p.items + [f"{where}: clients = {clients} makes n = {start + clients} "
                                                  f"clients, more than the limit of {MAX_CLIENTS} (2^30)"], source)
                else:
                    party_specs.append(PartySpec(pid, start, start + clients, (), clip_bound or 1.0))
                    start += clients
        elif partition == "columns":
            block = p.get(q, "columns", list, where, [], required=True)
            if "clients" in q:
                p.add(f"{where}: in the columns partition every party holds all [job].rows rows; remove 'clients'")
            if not all(isinstance(b, str) for b in block):
                p.add(f"{where}.columns must be a list of column names")
                block = []
            party_clip = _number(p, q, "clip_bound", where, None)
            if party_clip is None and cols.specs and clip_bound:
                # Split C² in proportion to the block's share of the columns' budget.
                shares = {n: (cols.share_q if r == "label" else cols.share_p) for n, r in zip(cols.names, cols.roles)}
                party_clip = clip_bound * math.sqrt(sum(shares.get(b, 0.0) for b in block)) * (1 - 1e-12)
            party_specs.append(PartySpec(pid, 0, rows or 0, tuple(block), party_clip or 0.0))
    n = start if partition == "rows" else (rows or 0)
    return party_specs, n


def _release_keys(p: _Problems, release: dict, job_id: str) -> tuple[str, Any, Any, str | None]:
    """``[release]``: ``(kind, m, s, seed)``; a lifted kind is a sum over clients (m = s = 1), a
    dense sketch has s = m, and a job without a seed gets :func:`derived_seed` of its id."""
    kind = p.get(release, "kind", str, "[release]", file_default("sketch"))
    if kind not in RELEASE_KINDS + ("auto",):
        p.add(f"[release].kind must be auto or one of {', '.join(RELEASE_KINDS)}, got {kind!r}")
    lifted = get_lift(kind) is not None  # a sum over clients: m = s = 1
    m = _integer(p, release, "m", "[release]", 1 if lifted else None, required=kind not in ("auto",) and not lifted)
    s = _integer(p, release, "s", "[release]", file_default("s"))
    for key, value, limit in (("m", m, MAX_SKETCH_ROWS), ("s", s, MAX_PIECES)):
        if isinstance(value, int) and not 1 <= value <= limit:  # before the sketch is sized by them
            p.add(f"[release].{key} must be in [1, {limit}], got {value}")
    if kind == "dense":
        if "s" in release and s != m:
            p.add("[release].s applies to sparse sketches only (a dense sketch has m pieces); remove it")
        s = m or 1
    seed = p.get(release, "seed", str, "[release]", None)
    if seed is None and job_id:
        seed = derived_seed(job_id)
    return kind, m, s, seed


def _servers_section(p: _Problems, servers: list[dict]) -> list[ServerSpec]:
    """``[[servers]]``: id and endpoint of each; at least two (additive sharing)."""
    server_specs = []
    for i, sv in enumerate(servers):
        where = f"[[servers]] #{i + 1}"
        sid = p.get(sv, "id", str, where, "", required=True) or ""
        if sid and (bad := server_id_problem(sid, f"{where}.id")):
            p.add(bad)
        endpoint = p.get(sv, "endpoint", str, where, "", required=True) or ""
        if endpoint and (bad := endpoint_problem(endpoint, f"{where}.endpoint")):
            p.add(bad)
        server_specs.append(ServerSpec(sid, endpoint))
    if len(servers) < 2:
        p.add(f"at least 2 servers are needed for additive sharing; the file names {len(servers)} "
              f"(add '[[servers]]' tables with id and endpoint)")
    return server_specs


def _fit_keys(p: _Problems, fit_t: dict, cols: _Columns) -> FitSpec:
    """``[fit]``: the model (ridge with a label, low rank without), λ, rank and de-biasing."""
    model = p.get(fit_t, "model", str, "[fit]", "ridge" if cols.labelled else "lowrank")
    if model not in MODELS:
        p.add(f"[fit].model must be one of {', '.join(MODELS)}, got {model!r}")
    elif model not in ("lowrank", "none") and not cols.labelled:
        p.add(f"[fit].model {model!r} is a regression: give one column role = \"label\", or use model = \"lowrank\"")
    lam = _number(p, fit_t, "lambda", "[fit]", file_default("lam"))
    rank = _integer(p, fit_t, "rank", "[fit]", file_default("rank"))
    if isinstance(rank, int) and model == "lowrank" and not 1 <= rank <= max(len(cols.names), 1):
        p.add(f"[fit].rank must be in [1, {len(cols.names)}] (the number of columns), got {rank}")
    if isinstance(lam, float) and lam < 0:
        p.add(f"[fit].lambda must be ≥ 0 (0 = the default rule), got {lam}")
    debias = p.get(fit_t, "debias", bool, "[fit]", file_default("debias"))
    return FitSpec(model, lam, rank, debias)


def _transforms_section(p: _Problems, entries: list[dict]) -> list[TransformSpec]:
    """``[[transforms]]``: each a :class:`~ltm.transforms.TransformSpec`, the client vector's width bounded."""
    transforms = []
    outputs = 0  # transform outputs so far (sincos doubles them): the client vector's width is bounded
    for i, entry in enumerate(entries):
        try:  # the fields of ltm.transforms.TransformSpec, checked with the spec (transform_problems)
            t = typed_record(TransformSpec, entry, f"[[transforms]] #{i + 1}")
        except JobSpecError as exc:
            p.items += exc.problems
            continue
        outputs += 2 * max(t.n_features, 0)
        if not 0 <= t.n_features <= MAX_COLUMNS or outputs > 2 * MAX_COLUMNS:  # before the layout is built
            p.add(f"[[transforms]] #{i + 1}: n_features = {t.n_features} makes the client vector wider than "
                  f"the limit of {MAX_COLUMNS} entries")
        elif t.name and (bad := column_problem(t.name, f"[[transforms]] #{i + 1}.name")):
            p.add(bad)
        else:
            transforms.append(t)
    return transforms

def _planned(spec: JobSpec, m: int | None, labelled: bool, max_party_upload_bytes: int = 0) -> tuple[JobSpec, str]:
    """``[release] kind = "auto"``: the planner's kind and parameters (ltm.planner, public inputs only)."""
    from ltm.planner import PlanInputs, plan_release  # noqa: PLC0415 - only for kind "auto"

    p = spec.privacy
    probe = replace(spec, sketch=replace(spec.sketch, kind="sparse", m=1, s=1))
    try:
        plan = plan_release(PlanInputs(
            n=spec.n, width=probe.width, epsilon=p.epsilon, delta=p.delta, partition=spec.partition,
            task="regression" if labelled else "lowrank", mechanism=p.mechanism, clip_bound=spec.clip_bound,
            party_sizes=tuple(q.size for q in spec.parties) if spec.partition == "rows" else (),
            corrupt_parties=p.corrupt_parties, t_prime=p.t_prime,
            kinds=("gram", "sparse") if p.calibration != "paper" else ("sparse",),
            upload_mode=spec.upload_mode, servers=spec.k, max_party_upload_bytes=max_party_upload_bytes,
            colluding_servers=spec.colluding_servers, parties=len(spec.parties),
            replicated_corrupt_parties=max(p.corrupt_parties, 1 if len(spec.parties) >= 2 else 0),
            verified_clipping=spec.verified_clipping))
    except ValueError as exc:
        raise JobFileError([f"[release].kind 'auto': the planner could not choose: {exc}"]) from None
    chosen_m = m if m is not None and plan.kind != "gram" else plan.m
    return replace(spec, sketch=replace(spec.sketch, kind=plan.kind, m=chosen_m, s=plan.s)), plan.reason


def _column(p: _Problems, c: dict, where: str, name: str, role: str, share: float,
            clip_bound: Any) -> ColumnSpec | None:
    """The column's public transform from exactly one of: range, center+spread, center+scale."""
    if role == "intercept":
        if any(k in c for k in ("range", "center", "spread", "scale")):
            p.add(f"{where}: an intercept column takes no transform (its raw value is 1); remove range/center/scale")
            return None
        budget = math.sqrt(share) * (clip_bound or 1.0)
        return ColumnSpec(name, role, 0.0, 1.0 / budget)
    forms = [k for k in ("range", "spread", "scale") if k in c]
    if len(forms) != 1 or ("range" in c) == ("center" in c):
        p.add(f"{where}: give exactly one public transform: range = [lo, hi], or center and spread, or "
              f"center and scale")
        return None
    if not isinstance(clip_bound, float) or clip_bound <= 0:
        return None
    budget = math.sqrt(share) * clip_bound  # the largest |x'| the column may use
    if "range" in c:
        r = c["range"]
        if (not isinstance(r, list) or len(r) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                               for v in r)):
            p.add(f"{where}: range must be two numbers [lo, hi], got {r!r}")
            return None
        lo, hi = float(r[0]), float(r[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            p.add(f"{where}: range [lo, hi] needs finite lo < hi, got [{lo:g}, {hi:g}]")
            return None
        return ColumnSpec(name, role, (lo + hi) / 2.0, (hi - lo) / 2.0 / budget)
    center = _number(p, c, "center", where)
    if "spread" in c:
        spread = _number(p, c, "spread", where)
        if spread is None or not (spread > 0 and math.isfinite(spread)):
            p.add(f"{where}: spread must be a positive number, got {c['spread']!r}")
            return None
        scale = spread / budget
    else:
        scale = _number(p, c, "scale", where)
        if scale is None or not (scale > 0 and math.isfinite(scale)):
            p.add(f"{where}: scale must be a positive number, got {c['scale']!r}")
            return None
    if center is None or not math.isfinite(center):
        p.add(f"{where}: center must be a finite number")
        return None
    return ColumnSpec(name, role, center, scale)


def _prejobs(p: _Problems, value: Any) -> tuple:
    """``[[privacy.prejob]]`` entries: the DP pre-jobs whose releases chose this job's transforms."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        p.add("[[privacy.prejob]] must be an array of tables (kind, job_id, digest, epsilon, delta)")
        return ()
    out = []
    for i, entry in enumerate(value):
        where = f"[[privacy.prejob]] #{i + 1}"
        p.unknown(where, entry, _PREJOB_KEYS)
        digest = p.get(entry, "digest", str, where, "", required=True) or ""
        if digest and (len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest)):
            p.add(f"{where}: digest must be the pre-job's 64-hex-digit SHA-256")
        out.append(PrejobSpec(kind=p.get(entry, "kind", str, where, "bounds"),
                              job_id=p.get(entry, "job_id", str, where, "", required=True) or "",
                              digest=digest, epsilon=_number(p, entry, "epsilon", where, 0.0, required=True) or 0.0,
                              delta=_number(p, entry, "delta", where, 0.0) or 0.0))
    return tuple(out)


# ---------------------------------------------------------------------------- writing job files
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if isinstance(v, int) or math.isfinite(v) else "nan"
    if isinstance(v, str):  # JSON's string escapes are TOML's (a newline in an id must stay inside its string)
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def render_job_file(doc: dict[str, Any], header: str = "") -> str:
    """TOML text for a job-file document (tables of scalars/lists, and arrays of such tables)."""
    lines = [f"# {h}" for h in header.splitlines()] if header else []
    for name in ("job", "release", "privacy", "fit"):
        table = doc.get(name)
        if not table:
            continue
        lines += ["", f"[{name}]"]
        nested = []
        for k, v in table.items():
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                nested.append((k, v))
            elif v is not None:
                lines.append(f"{k} = {_toml_value(v)}")
        for k, entries in nested:
            for e in entries:
                lines += ["", f"[[{name}.{k}]]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in e.items()]
    for name in ("servers", "parties", "columns", "transforms"):
        for entry in doc.get(name, []):
            lines += ["", f"[[{name}]]"] + [f"{k} = {_toml_value(v)}" for k, v in entry.items() if v is not None]
    return "\n".join(lines).lstrip("\n") + "\n"


def job_file_doc(spec: JobSpec, fit: FitSpec | None = None, deadline_s: float | None = None) -> dict[str, Any]:
    """The job-file document that :func:`parse_job_file` turns back into ``spec`` (same digest):
    every column's transform as ``center``/``scale`` exactly, the sketch seed, the resolved
    privacy parameters.  For a spec built elsewhere (the demo builds one from its dataset) that
    must be run through ``ltm job submit``; render it with :func:`render_job_file`."""
    p = spec.privacy
    job: dict[str, Any] = {"id": spec.job_id, "partition": spec.partition, "clip_bound": spec.clip_bound,
                           "share_mode": spec.share_mode, "frac_bits": spec.frac_bits,
                           "upload_mode": spec.upload_mode}
    if spec.partition == "columns":
        job["rows"] = spec.n
    if deadline_s is not None:
        job["deadline_s"] = float(deadline_s)
    if spec.reproduction:
        job["reproduction"] = True
    privacy: dict[str, Any] = {"epsilon": p.epsilon, "delta": p.delta, "mechanism": p.mechanism,
                               "calibration": p.calibration, "interpolate_p": p.interpolate_p,
                               "t_prime": p.t_prime, "corrupt_parties": p.corrupt_parties,
                               "min_honest_load": p.min_honest_load, "min_participants": p.min_participants}
    if spec.colluding_servers is not None:
        privacy["colluding_servers"] = spec.colluding_servers
    if spec.prejobs:
        privacy["prejob"] = [{"kind": x.kind, "job_id": x.job_id, "digest": x.digest, "epsilon": x.epsilon,
                              "delta": x.delta} for x in spec.prejobs]
    if spec.partition == "rows":
        parties = [{"id": q.party_id, "clients": q.size} for q in spec.parties]
    else:
        parties = [{"id": q.party_id, "columns": list(q.columns), "clip_bound": q.clip_bound} for q in spec.parties]
    fit = fit or FitSpec(model="ridge" if spec.label_index is not None else "lowrank")
    return {
        "job": job,
        "release": {"kind": spec.sketch.kind, "m": spec.sketch.m,
                    **({} if spec.sketch.kind == "dense" else {"s": spec.sketch.s}), "seed": spec.sketch.seed},
        "privacy": privacy,
        "fit": fit.to_dict(),
        "servers": [{"id": v.server_id, "endpoint": v.endpoint} for v in spec.servers],
        "parties": parties,
        "columns": [{"name": c.name, "role": c.role, "center": c.center, "scale": c.scale} for c in spec.columns],
        "transforms": [{k: v for k, v in asdict_shallow(t).items() if v not in (None, (), "")}
                       for t in spec.transforms],
    }


def asdict_shallow(record: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict (tuples as lists), for writing TOML."""
    return {f.name: list(v) if isinstance(v := getattr(record, f.name), tuple) else v for f in fields(record)}


def spec_summary(jf: JobFile) -> dict[str, Any]:
    """What ``ltm job check`` prints: the digest and the public choices, resolved."""
    s = jf.spec
    return {
        "job_id": s.job_id, "job_digest": s.digest, "partition": s.partition, "n": s.n, "k": s.k,
        "parties": [{"id": q.party_id, "clients": [q.start, q.stop], **({"columns": list(q.columns)}
                                                                          if q.columns else {})} for q in s.parties],
        "columns": [{"name": c.name, "role": c.role, "center": c.center, "scale": c.scale} for c in s.columns],
        "release": {"kind": s.sketch.kind, "m": s.sketch.m, "s": s.sketch.s, "seed": s.sketch.seed},
        "privacy": {"epsilon": s.privacy.epsilon, "delta": s.privacy.delta, "mechanism": s.privacy.mechanism,
                    "calibration": s.privacy.calibration, "t_prime": s.privacy.t_prime,
                    "corrupt_parties": s.privacy.corrupt_parties, "min_honest_load": s.privacy.min_honest_load,
                    "min_participants": s.privacy.min_participants,
                    "prejobs": [{"kind": x.kind, "job_id": x.job_id, "digest": x.digest, "epsilon": x.epsilon,
                                 "delta": x.delta} for x in s.prejobs]},
        "frac_bits": s.frac_bits, "clip_bound": s.clip_bound, "clip_norm": s.clip_norm,
        "servers": [{"id": v.server_id, "endpoint": v.endpoint} for v in s.servers],
        "fit": jf.fit.to_dict(), "deadline_s": jf.deadline_s,
    }

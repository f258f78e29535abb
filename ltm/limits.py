"""A server's resource limits: what one caller may make it hold, parse or wait for.

In the core, not in ``server/``, because the analyst bounds the specs its callers submit by the same
limits (:func:`parse_spec`), and actors never import each other.

Every limit has a default that suits a real deployment on a modest machine and can be changed per
server (``ltm server --limit NAME=VALUE``, repeatable, or ``limit = ["NAME=VALUE", …]`` in the
config file).  Requests beyond a limit are refused *before* the large allocation or the long
computation they would cause: ``RESOURCE_EXHAUSTED`` when the request is well formed but more than
this server takes, ``INVALID_ARGUMENT`` when a value cannot be valid at all (n = 2⁶⁴ + 5, a sketch m above n,
a sparse sketch's s above m: no server could run it, whatever its limits).

================================  ==============  ================================================
limit                             default         why
================================  ==============  ================================================
``max_spec_bytes``                4 MiB           a spec is parties + columns + servers; 4 MiB
                                                  holds ~40 000 parties or columns.  Parsing
                                                  4 MiB of JSON takes tens of ms; a 50 MB spec
                                                  (D = 10⁶) is refused unread.
``max_n``                         2³⁰ clients     10⁹ clients is beyond any one job we expect
``max_width``                     65 536 (D)      columns of the client vector
``max_m``                         2²⁰             sketch rows (a release is m × D × 8 bytes)
``max_pieces``                    64              sketch pieces s per client
``max_parties``                   100 000         parties named in one spec
``max_servers``                   64              servers named in one spec
``max_job_memory_bytes``          1 GiB           what one job makes the server hold: the
                                                  result share and its accumulator
                                                  (24 · m · D) and the cached sketch slots
                                                  (8 · s · n, only when ≤ 64 MiB) — checked on
                                                  the parsed numbers before any of it is
                                                  allocated; coverage is ranges (16 B each)
``max_participant_ranges``        262 144         ranges in a Release's participant set (16 B
                                                  each on the wire; the set is the clients that
                                                  reached every server, about one range per
                                                  uploaded batch at most)
``max_jobs``                      1 000           stored jobs (each holds memory and disk)
``min_free_disk_bytes``           512 MiB         an upload is refused if storing it would leave
                                                  less free space under the data directory
``max_batch_bytes``               512 MiB         one batch's share payload (a party splits)
``max_streams_per_party``         4               concurrent uploads of one party (its uploader
                                                  runs a few in parallel, not more)
``max_streams``                   1 024           concurrent uploads in total (UNAVAILABLE:
                                                  busy, parties retry); a job with hundreds
                                                  of parties uploads at once, and an open
                                                  stream holds only what it has received
``max_inflight_bytes``            16 MiB          upload budget across all streams: a stream
                                                  whose header passed every check reserves its
                                                  batch's size before reading data, waiting
                                                  (backpressure) up to stream_idle_seconds
                                                  while the budget is taken (then UNAVAILABLE,
                                                  retried); a batch above the budget is admitted
                                                  alone; a stream's buffer grows with bytes
                                                  *received*, never with what its header declares.
                                                  Each party gets at most its share: the budget
                                                  over the parties holding or waiting for some
                                                  of it (a party holding nothing may always take
                                                  one batch, a lone party the whole budget)
``stream_min_bytes``              64 KiB          minimum rate of an admitted upload: this many
``stream_rate_window_seconds``    10 s            bytes in every window of this length, or it is
                                                  cut (DEADLINE_EXCEEDED, its reservation given
                                                  back at once); 6.4 KiB/s, hundreds of times
                                                  below what a loaded 2-core machine sends.  A
                                                  party over its share while another waits must
                                                  receive its batches within one window
                                                  (else UNAVAILABLE: retried)
``stream_silent_seconds``         1 s             an admitted stream that has sent no data for
                                                  this long gives its reservation to a party
                                                  waiting for the budget (it waits again when
                                                  its data comes; nothing was read)
``stream_window_bytes``           1 MiB           HTTP/2 receive window per stream (fixed: no
                                                  bandwidth probing, which grows each window to
                                                  ~4 MiB of unread data per upload stream)
``stream_idle_seconds``           60 s            longest silence inside an upload stream
``stream_total_seconds``          900 s           longest upload stream (512 MiB at ~0.6 MiB/s)
================================  ==============  ================================================

Status messages are cut to :data:`ltm.errors.MAX_MESSAGE_CHARS` characters (gRPC sends them in a
header with an 8 KiB limit).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from ltm.errors import ProtocolError, bounded
from ltm.jobspec import JobSpec, JobSpecError

#: A server caches a job's sketch slots (8 bytes per piece and client) only up to this size; larger
#: jobs derive the placement per chunk (server/core.py).  Here because the spec checks use it too.
SLOT_CACHE_BYTES = 64 << 20

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class ServerLimits:
    """Resource limits of one server (see the module docstring for defaults and reasons)."""

    max_spec_bytes: int = 4 * MiB
    max_n: int = 1 << 30
    max_width: int = 65_536
    max_m: int = 1 << 20
    max_pieces: int = 64
    max_parties: int = 100_000
    max_servers: int = 64
    max_job_memory_bytes: int = 1 * GiB
    max_participant_ranges: int = 1 << 18
    max_jobs: int = 1_000
    min_free_disk_bytes: int = 512 * MiB
    max_batch_bytes: int = 512 * MiB
    max_streams_per_party: int = 4
    max_streams: int = 1024
    max_inflight_bytes: int = 16 * MiB
    stream_window_bytes: int = 1 * MiB
    stream_min_bytes: int = 64 * 1024
    stream_rate_window_seconds: float = 10.0
    stream_silent_seconds: float = 1.0
    stream_idle_seconds: float = 60.0
    stream_total_seconds: float = 900.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"server limit {f.name} must be a non-negative number, got {value!r}")

    @classmethod
    def parse(cls, items: list[str] | tuple[str, ...] | None, **overrides) -> "ServerLimits":
        """Limits from ``NAME=VALUE`` strings (``--limit``); unknown names are refused."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict = {}
        for item in items or ():
            name, sep, raw = str(item).partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in fields:
                raise ValueError(f"--limit {item!r}: expected NAME=VALUE with NAME one of {sorted(fields)}")
            try:
                values[name] = float(raw) if fields[name].type in ("float", float) else int(raw, 0)
            except ValueError:
                raise ValueError(f"--limit {item!r}: {raw!r} is not a number") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    # ------------------------------------------------------------------ job specs
    def check_spec_size(self, size: int) -> None:
        if size > self.max_spec_bytes:
            raise ProtocolError("RESOURCE_EXHAUSTED", f"job spec of {size} bytes exceeds this server's limit of "
                                                      f"{self.max_spec_bytes} bytes (max_spec_bytes)")

    def check_spec(self, spec: JobSpec) -> None:
        """Refuse a parsed spec whose numbers exceed the limits, before anything is sized by them."""
        def bad(name: str, value, limit_name: str) -> ProtocolError:
            limit = getattr(self, limit_name)
            return ProtocolError("RESOURCE_EXHAUSTED", f"{name} = {value} exceeds this server's limit of {limit} "
                                                       f"({limit_name})")
        n, m, s = spec.n, spec.sketch.m, spec.sketch.s
        for name, value in (("n", n), ("sketch.m", m), ("sketch.s", s)):
            if not 0 < value < 1 << 63:
                raise ProtocolError("INVALID_ARGUMENT", f"{name} = {value} must be a positive integer below 2^63")
        # A spec no server could run whatever its limits is INVALID_ARGUMENT, not RESOURCE_EXHAUSTED:
        # the sketch's rows are at most its clients and a sparse sketch's pieces at most its rows.
        if m > n:
            raise ProtocolError("INVALID_ARGUMENT", f"sketch.m = {m} exceeds the number of clients n = {n}")
        if spec.sketch.kind == "sparse" and s > m:
            raise ProtocolError("INVALID_ARGUMENT", f"sketch.s = {s} exceeds sketch.m = {m} (a sparse sketch "
                                                    f"places each client's s pieces in distinct rows)")
        features = sum(max(t.n_features, 0) for t in spec.transforms)
        if features > self.max_width:  # before the client vector's layout is built from them
            raise ProtocolError("RESOURCE_EXHAUSTED", f"transforms with {features} features in all exceed this "
                                                      f"server's limit of {self.max_width} (max_width)")
        width = len(spec.columns)
        checks = (("n", n, "max_n"), ("D (columns)", width, "max_width"), ("sketch.m", m, "max_m"),
                  ("sketch.s", s, "max_pieces"), ("parties", len(spec.parties), "max_parties"),
                  ("servers", len(spec.servers), "max_servers"))
        for name, value, limit_name in checks:
            if value > getattr(self, limit_name):
                raise bad(name, value, limit_name)
        upload = max(spec.upload_width, width, 1)  # a lifted release (gram) uploads more values per client
        pieces = m if spec.sketch.kind == "dense" else s
        slots = 8 * pieces * n if 8 * pieces * n <= SLOT_CACHE_BYTES else 0  # cached only when small
        memory = 24 * m * upload + slots
        if memory > self.max_job_memory_bytes:
            raise ProtocolError("RESOURCE_EXHAUSTED", f"the job would make this server hold ~{memory} bytes "
                                                      f"(24·m·W result and accumulator + the sketch slots it caches "
                                                      f"when they fit in {SLOT_CACHE_BYTES} bytes, W = values "
                                                      f"uploaded per client), over its limit of "
                                                      f"{self.max_job_memory_bytes} (max_job_memory_bytes)")


#: Deepest JSON nesting a spec needs is 3 (spec → parties → party); allow some slack.
MAX_SPEC_DEPTH = 16
_I64 = 1 << 63


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _check_values(obj) -> None:
    """Walk parsed JSON iteratively: bounded depth, strings encodable as UTF-8 (no lone UTF-16
    surrogates from ``\\ud800`` escapes), integers within int64, floats finite."""
    stack = [(obj, 1, "spec")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_SPEC_DEPTH:
            raise ProtocolError("INVALID_ARGUMENT", f"job spec JSON is nested deeper than {MAX_SPEC_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                _check_string(key, where)
                stack.append((item, depth + 1, f"{where}.{bounded(key, 40)}"))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_string(value, where)
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if not -_I64 <= value < _I64:
                raise ProtocolError("INVALID_ARGUMENT", f"{where} = {bounded(str(value), 60)} is outside the "
                                                        f"64-bit integer range")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ProtocolError("INVALID_ARGUMENT", f"{where} = {value} is not a finite number")


def _check_string(value: str, where: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ProtocolError("INVALID_ARGUMENT", f"{where}: string contains a lone UTF-16 surrogate "
                                                f"(U+{ord(value[exc.start]):04X} at character {exc.start}); "
                                                f"ids and names must be valid Unicode") from None


def parse_spec(data: bytes, limits: ServerLimits) -> JobSpec:
    """Parse and bound-check a job spec received from a caller (may take tens of ms for a large
    spec: call it off the event loop).  Raises ProtocolError with a precise status."""
    limits.check_spec_size(len(data))
    spec = decode_spec(data)
    limits.check_spec(spec)
    return spec


def decode_spec(data: bytes) -> JobSpec:
    """A job spec from untrusted bytes, strictly (UTF-8, bounded nesting, int64 integers, finite
    numbers), without any server's capacity limits: what a party reads from a server it has not
    yet pinned.  Raises ProtocolError (INVALID_ARGUMENT) with one line, never RecursionError."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError("INVALID_ARGUMENT", f"job spec is not valid JSON: invalid UTF-8 at byte {exc.start}") \
            from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ProtocolError("INVALID_ARGUMENT", "job spec JSON is nested too deeply") from None
    except ValueError as exc:
        raise ProtocolError("INVALID_ARGUMENT", bounded(f"job spec is not valid JSON: {exc}")) from None
    _check_values(obj)
    try:
        spec = JobSpec.from_dict(obj)
    except (JobSpecError, TypeError, ValueError) as exc:
        raise ProtocolError("INVALID_ARGUMENT", bounded(str(exc))) from None
    return spec

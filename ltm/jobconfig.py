"""The job-configuration model: every job parameter declared once, with its metadata.

A job parameter used to be written three times: as an ``argparse`` flag with a help text in each
command that takes it, as a key of the job file (:mod:`ltm.jobfile`), and as a field of the
simulator's configuration.  Here each :class:`Field` states once its name, type, default, help,
choices and unit, the job-file key it is read from (``[section] key``) and the command-line flag
that sets it.  From this table

* :func:`add_options` generates the flags of a command, one call per option group
  (:data:`GROUPS`: data, sketch, privacy, model, features, run);
* :func:`toml_sections` is the job file's key table, and :func:`file_default` the value an absent
  key takes (``ltm.jobfile`` reads and validates the keys with them);
* :func:`default` gives the simulator's configuration (``ltm.sim.runtime.simulate.SimulateConfig``) its
  defaults, and :func:`config_values` picks a command's parsed flags for it.

A field has a flag, a job-file key, or both.  Where both exist they share one default and one help
text; the few fields whose absent key means something the flag's default cannot say (the file must
state ε and δ; ``corrupt_parties``/``lambda``: an explicit 0 instead of "the rule") name their
file default and why in ``file_note``.  ``tests/unit/ltm/test_jobconfig.py`` checks all of it.

This module is part of the core and imports nothing above it (no actor, no simulator), and nothing
heavy: every ``ltm`` command builds its parser from it.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ltm.dp.defaults import DEFAULT_CLIP_BOUND, DEFAULT_DELTA

__all__ = ["Field", "FIELDS", "GROUPS", "add_options", "config_values", "default", "field", "file_default",
           "flag_fields", "positive_int", "parse_count", "parse_counts", "toml_fields", "toml_sections"]


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number ≥ 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def parse_count(text: str) -> int:
    """A client count: ``1000000``, ``1_000_000``, ``1e6`` or ``2.5e7`` (must be a whole number ≥ 1)."""
    import math

    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of clients: {text!r} (e.g. 1000000 or 1e6)") from None
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise argparse.ArgumentTypeError(f"not a whole number of clients ≥ 1: {text!r}")
    return int(value)


def parse_counts(text: str) -> list[int]:
    """An ``argparse`` type (``ltm bench e2e --n``): one count or a comma-separated series (``1e6,1e7,1e8``)."""
    return [parse_count(t.strip()) for t in text.split(",") if t.strip()]


class _Same:
    """Marker: the job file's default is the flag's default."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()


@dataclass(frozen=True)
class Field:
    """One job parameter.

    ``name`` is the attribute everywhere: the ``argparse`` dest and the simulator configuration's
    field.  ``flags``: the command-line spellings, the first canonical, the rest aliases (empty:
    the parameter is set in job files only).  ``toml``: ``(section, key)`` in a job file (None: a
    command-line option only, such as the data source or the output format).  ``file_default``:
    what an absent key means, when not ``default``; ``file_required``: a job file must state it.
    ``help`` may say ``{default}``: the default in force is written there.
    """

    name: str
    group: str
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    flags: tuple[str, ...] = ()
    toml: tuple[str, str] | None = None
    unit: str | None = None
    action: str | None = None  # "store_true" / "store_false" for a switch
    metavar: str | None = None
    file_default: Any = SAME
    file_required: bool = False
    file_note: str = ""  # why the job file's default differs from the flag's

    def help_text(self, default: Any = SAME) -> str:
        """The help with ``{default}`` filled in (a command may override the default)."""
        return _fill(self.help, self.default if default is SAME else default)

    @property
    def flag(self) -> str | None:
        """The canonical flag (None: job file only)."""
        return self.flags[0] if self.flags else None

    @property
    def key(self) -> str | None:
        """``[section] key`` as a job file spells it (None: command line only)."""
        return f"[{self.toml[0]}] {self.toml[1]}" if self.toml else None


def _g(x: float) -> str:
    """A number as help texts write it: 1e-6, not Python's 1e-06."""
    return f"{x:g}".replace("e-0", "e-").replace("e+0", "e+")


def _fill(text: str, value: Any) -> str:
    """``text`` with ``{default}`` replaced by ``value`` as a help text writes it."""
    return text.replace("{default}", _g(value) if isinstance(value, float) else str(value))


def _f(name: str, group: str, help: str, default: Any = None, **kw: Any) -> Field:
    return Field(name, group, help, default, **kw)


#: Option groups in the order a command's ``--help`` lists them: name → title.
GROUPS: dict[str, str] = {
    "data": "data",
    "sketch": "job",
    "privacy": "privacy",
    "model": "model",
    "features": "random features (--model rf_ridge)",
    "run": "run",
    "file": "job file only",
}

FIELDS: tuple[Field, ...] = (
    # ---- data: where a simulated or demonstrated job's rows come from (never in a job file: a job
    # file is public information only, and each party reads its own data)
    _f("data", "data", "CSV file (header row; ',' ';' or tab separated), Parquet file or folder, SQLite file, or "
                       "postgresql://user@host/db (password from PGPASSWORD, never in the DSN)", flags=("--data",)),
    _f("query", "data", "with a database --data: the table name or a SELECT", flags=("--query",)),
    _f("label", "data", "label column of --data", flags=("--label",)),
    _f("features", "data", "comma-separated feature columns (default: every numeric column)",
       flags=("--features",)),
    _f("synthetic", "data", "generate data instead (ridge/lowrank: Burkhardt et al. §6.2; nonlinear: for rf_ridge)",
       choices=("ridge", "lowrank", "nonlinear"), flags=("--synthetic",)),
    _f("n", "data", "synthetic rows (default {default})", 10_000, type=positive_int, flags=("--n",), unit="rows"),
    _f("d", "data", "synthetic features (default {default})", 10, type=positive_int, flags=("--d",), unit="columns"),
    # ---- the job's shape and its release
    _f("partition", "sketch", "rows: each party holds whole rows (default); columns: each holds some columns of "
                              "every row", "rows", choices=("rows", "columns"), flags=("--partition",),
       toml=("job", "partition")),
    _f("parties", "sketch", "parties the rows are split over (default {default})", 4, type=positive_int,
       flags=("--parties",), unit="parties"),
    _f("k", "sketch", "number of servers (≥ 2, default {default})", 3, type=int, flags=("--k",), unit="servers"),
    _f("sketch", "sketch", "release kind: auto (default: the planner chooses from public quantities, "
                           "ltm/planner.py), a sparse or dense sketch, or gram (noisy sufficient statistics ZᵀZ; "
                           "rows partition only)",
       "auto", choices=("auto", "sparse", "dense", "gram"), flags=("--sketch", "--release"),
       toml=("release", "kind")),
    _f("m", "sketch", "sketch rows (default: the planner's, or a rule from n, D and ε; ltm/planner.py: default_m)",
       type=positive_int, flags=("--m",), toml=("release", "m"), unit="rows"),
    _f("s", "sketch", "non-zeros per column of a sparse sketch (default {default})", 1, type=positive_int,
       flags=("--s",), toml=("release", "s")),
    _f("upload_mode", "sketch", "how parties upload: auto (default: what a real job does, aggregate when every "
                                "party holds several clients and t′ = 0, else per-client; ltm.jobspec.default_upload_mode), "
                                "per-client or aggregate", "auto", choices=("auto", "per-client", "aggregate"),
       flags=("--upload-mode",), toml=("job", "upload_mode")),
    _f("share_mode", "sketch", "seed: helper shares travel as 32-byte seeds (default); full: every share explicit",
       "seed", choices=("seed", "full"), flags=("--share-mode",), toml=("job", "share_mode")),
    # ---- privacy
    _f("epsilon", "privacy", "the job's ε per client (default {default})", 1.0, type=float, flags=("--epsilon",),
       toml=("privacy", "epsilon"), file_required=True,
       file_note="a job file states its privacy parameters: no silent default for ε"),
    _f("delta", "privacy", f"the job's δ (default {_g(DEFAULT_DELTA)}; 0 for a laplace job)",
       DEFAULT_DELTA, type=float, flags=("--delta",), toml=("privacy", "delta"), file_required=True,
       file_note="a job file states its privacy parameters (a laplace job may omit δ: 0)"),
    _f("mechanism", "privacy", "the clients' noise: gaussian (ε, δ)-DP (default) or laplace (pure ε-DP)",
       "gaussian", choices=("gaussian", "laplace"), flags=("--mechanism",), toml=("privacy", "mechanism")),
    _f("calibration", "privacy", "tight (default), paper (Cor 4.7/4.10 as printed), or interpolate(p)", "tight",
       flags=("--calibration",), toml=("privacy", "calibration")),
    _f("interpolate_p", "file", "with calibration 'interpolate': 0 = the local model, 1 = distributed "
                                "(a flag writes it inside --calibration interpolate(p))",
       type=float, toml=("privacy", "interpolate_p")),
    _f("t_prime", "privacy", "corrupt clients tolerated (default {default})", 0, type=int, flags=("--t-prime",),
       toml=("privacy", "t_prime"), unit="clients"),
    _f("corrupt_parties", "privacy", "corrupt parties tolerated (default: 1 when parties hold several clients "
                                     "each; a private job never tolerates fewer, only a --seed reproduction may)",
       type=int, flags=("--corrupt-parties",), toml=("privacy", "corrupt_parties"), unit="parties", file_default=0,
       file_note="a job file is resolved as written: an absent key is 0 and the job's validation then asks for "
                 "the default"),
    _f("colluding_servers", "privacy", "colluding servers the job tolerates (default: k − 1); 1 of 3 (an honest "
                                       "majority) admits the replicated degree-2 release of the columns partition "
                                       "(--release gram)",
       type=int, flags=("--colluding-servers",), toml=("privacy", "colluding_servers"), unit="servers"),
    _f("verified_clipping", "privacy", "with --partition columns --colluding-servers 1: every party proves on its "
                                       "shares that its blocks are clipped, so the job tolerates a corrupt party "
                                       "(issue #30; implies --release gram)", False, flags=("--verified-clipping",),
       action="store_true"),
    _f("min_honest_load", "file", "L, the fewest honest clients in a sketch row (0: the default fraction of the "
                                  "full load)", 0, type=int, toml=("privacy", "min_honest_load"), unit="clients"),
    _f("min_participants", "file", "the smallest participant set the job may be released over (0: the default)",
       0, type=int, toml=("privacy", "min_participants"), unit="clients"),
    _f("prejob", "file", "the DP pre-jobs that chose some column transforms ([[privacy.prejob]] tables)",
       toml=("privacy", "prejob")),
    _f("budget_epsilon", "privacy", "each simulated party's privacy budget ε (default: the party's, 4)",
       type=float, flags=("--budget-epsilon",)),
    _f("budget_delta", "privacy", "the δ of that budget (default: the party's, 1e-6)", type=float,
       flags=("--budget-delta",)),
    _f("ledger_dir", "privacy", "charge the simulated parties' persistent ledgers here, one per party id, across "
                                "runs (as `ltm party --ledger-dir`); default: a fresh in-memory ledger per run",
       flags=("--ledger-dir",)),
    _f("clip", "privacy", "ℓ2 clip bound C on the transformed rows (default {default})",
       DEFAULT_CLIP_BOUND, type=float, flags=("--clip",), toml=("job", "clip_bound")),
    # ---- what the analyst fits (post-processing)
    _f("model", "model", "default: ridge, or lowrank for --synthetic lowrank (a job file: without a label "
                         "column); rf_ridge: parties map their rows with public random features, the analyst fits "
                         "ridge in feature space; none (job files): keep the release only",
       choices=("ols", "ridge", "lowrank", "rmgm_ols", "dgm_ols", "rf_ridge"), flags=("--model",),
       toml=("fit", "model")),
    _f("lam", "model", "ridge λ (default: the release's rule, release_lambda in analyst/estimators.py: v·√m for a "
                       "sketch, AdaSSP-style for gram)",
       type=float, flags=("--lambda",), toml=("fit", "lambda"), file_default=0.0,
       file_note="a job file writes the rule as 0 (FitSpec.lam), a number TOML can hold"),
    _f("debias", "model", "ridge: do not subtract the known noise Gram (the paper's faithful analyst)", True,
       action="store_false", flags=("--no-debias",), toml=("fit", "debias")),
    _f("fallback", "model", "fit the regression even when the plan predicts R² ≤ 0 (default: release the "
                            "intercept-only model then, and say so)", True, action="store_false",
       flags=("--no-fallback",), toml=("fit", "fallback")),
    _f("rank", "model", "components of --model lowrank (default {default})", 5, type=positive_int, flags=("--rank",),
       toml=("fit", "rank")),
    _f("intercept", "model", "add an explicit intercept column (the public centering already makes the model "
                             "affine)", False, action="store_true", flags=("--intercept",)),
    # ---- random features (--model rf_ridge)
    _f("features_n", "features", "random frequencies N (default 16: a sketch's noise grows with the vector width, "
                                 "so keep N ≪ n; see docs/experiments/liao.md)",
       type=positive_int, flags=("--features-n",)),
    _f("bandwidth", "features", "kernel bandwidth in standardised input units (default √d)", type=float,
       flags=("--bandwidth",)),
    _f("feature_map", "features", "cos: √(2/N)cos(ωx+b), N entries; sincos: [cos ωx, sin ωx]/√N, 2N entries, "
                                  "norm 1", "cos", choices=("cos", "sincos"), flags=("--feature-map",)),
    _f("kernel", "features", "the shift-invariant kernel the random features approximate (default {default})",
       "gaussian", choices=("gaussian", "laplacian"), flags=("--kernel",)),
    # ---- how a run is made and reported (not job parameters: never in a job file)
    _f("seed", "run", "SEEDED MODE: reproducible and NOT private (experiments only)", type=int, flags=("--seed",)),
    _f("json", "run", "print one JSON object", False, action="store_true", flags=("--json",)),
    _f("quiet", "run", "no progress bar on stderr (none is drawn either when stderr is not a terminal; "
                       "ltm/progress.py)", False, action="store_true", flags=("--quiet", "--no-progress")),
    # ---- job-file only: the job's identity, structure and intake (a simulation makes its own)
    _f("job_id", "file", "the job id (it names files and directories of every actor)", "", toml=("job", "id"),
       file_required=True),
    _f("rows", "file", "the aligned row count n of a columns-partition job", type=int, toml=("job", "rows"),
       unit="rows"),
    _f("frac_bits", "file", "fraction bits of the fixed-point grid (0: the default)", 0, type=int,
       toml=("job", "frac_bits"), unit="bits"),
    _f("deadline_s", "file", "how long intake stays open", 600.0, type=float, toml=("job", "deadline_s"),
       unit="seconds"),
    _f("reproduction", "file", "a reproduction job: its servers accept seeded, NOT private batches", False,
       toml=("job", "reproduction")),
    _f("max_party_upload_bytes", "file", "the planner's bound on one party's upload (0: no bound)", 0, type=int,
       toml=("job", "max_party_upload_bytes"), unit="bytes"),
    _f("sketch_seed", "file", "the public sketch seed (default: derived from the job id)", toml=("release", "seed")),
)

_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}


def field(name: str) -> Field:
    """The field called ``name`` (KeyError names the known ones)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no job field {name!r}; known: {', '.join(_BY_NAME)}") from None


def default(name: str) -> Any:
    """The default of field ``name`` (what an absent flag means)."""
    return field(name).default


def file_default(name: str) -> Any:
    """What an absent job-file key of field ``name`` means."""
    f = field(name)
    return f.default if f.file_default is SAME else f.file_default


def flag_fields(group: str | None = None) -> list[Field]:
    """The fields with a command-line flag (of one group, or all), in declaration order."""
    return [f for f in FIELDS if f.flags and (group is None or f.group == group)]


def toml_fields() -> list[Field]:
    """The fields read from a job file, in declaration order."""
    return [f for f in FIELDS if f.toml]


def toml_sections() -> dict[str, set[str]]:
    """The job file's tables and the keys each may hold: ``{"job": {"id", ...}, ...}``."""
    out: dict[str, set[str]] = {}
    for f in toml_fields():
        section, key = f.toml  # type: ignore[misc]
        out.setdefault(section, set()).add(key)
    return out


def add_options(parser: argparse.ArgumentParser, group: str, *, only: Iterable[str] | None = None,
                skip: Iterable[str] = (), defaults: dict[str, Any] | None = None,
                helps: dict[str, str] | None = None, types: dict[str, Callable[[str], Any]] | None = None,
                title: str | None = None) -> argparse._ArgumentGroup:
    """Add the flags of option group ``group`` to ``parser`` as one argument group.

    ``only``/``skip``: a command taking some of the group's fields (``only`` also orders them).
    ``defaults``/``helps``/``types``: where a command's meaning differs from the job's (a benchmark
    is always seeded; an audit's ε is the audited job's).  Returns the argument group, for a
    command's own flags that belong beside them.
    """
    if group not in GROUPS:
        raise KeyError(f"no option group {group!r}; known: {', '.join(GROUPS)}")
    members = flag_fields(group)
    if only is not None:
        wanted = list(only)
        unknown = set(wanted) - {f.name for f in members}
        if unknown:
            raise KeyError(f"option group {group!r} has no field {sorted(unknown)}")
        members = [field(n) for n in wanted]
    members = [f for f in members if f.name not in set(skip)]
    defaults, helps, types = defaults or {}, helps or {}, types or {}
    g = parser.add_argument_group(title or GROUPS[group])
    for f in members:
        kw: dict[str, Any] = {"dest": f.name, "help": _fill(helps.get(f.name, f.help), defaults.get(f.name, f.default))}
        if f.action:
            kw["action"] = f.action
            if f.name in defaults:
                kw["default"] = defaults[f.name]
        else:
            kw["default"] = defaults.get(f.name, f.default)
            kind = types.get(f.name, f.type)
            if kind is not None:
                kw["type"] = kind
            if f.choices is not None:
                kw["choices"] = list(f.choices)
            if f.metavar:
                kw["metavar"] = f.metavar
        action = g.add_argument(*f.flags, **kw)
        action.job_field = f.name  # type: ignore[attr-defined]  # which field made it (tests/unit/ltm/test_jobconfig.py)
    return g


def config_values(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """``{name: value}`` of the parsed flags among ``names`` (e.g. a configuration dataclass's
    field names): what a command passes on, without restating each field."""
    return {n: getattr(args, n) for n in names if n in _BY_NAME and hasattr(args, n)}

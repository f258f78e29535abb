"""Experiment spec files (TOML): a scenario, a parameter grid, repetitions, plots, the paper's numbers.

Layout of a spec (every key but ``name``/``scenario``/``grid`` is optional)::

    name = "burkhardt_fig3"                # also the default output folder name
    title = "Burkhardt et al. Fig. 3: ridge φ vs n"
    scenario = "burkhardt.ridge_synthetic" # a registered scenario (ltm/experiments/registry.py)
    module = "ltm.experiments.burkhardt"       # imported first if the scenario is not yet registered
    repetitions = 20
    base_seed = 20240601
    networked = false                      # whether `--networked` is supported for this spec
    notes = "free text copied into summary.md"

    [params]                               # fixed parameters of every cell (any TOML value)
    d = 10
    series = ["tight", "paper", "local"]

    [grid]                                 # axes: the cells are the cartesian product
    n = [1000, 1500, 2250]
    epsilon = [0.01, 0.1]

    [reduced]                              # what `--reduced` (CI) changes
    repetitions = 2
    [reduced.params]                       # overrides of [params]
    path = "real"
    [reduced.grid]                         # overrides of individual axes
    n = [1000, 2250]

    [summary]
    metrics = ["phi"]                      # result columns to aggregate (mean ± std over reps)
    [[summary.table]]                      # optional; default: one table over every grid axis + series
    title = "φ at selected n"
    metric = "phi"
    rows = ["epsilon", "series"]
    columns = "n"                          # optional pivot axis
    where = { n = [1000, 2250] }           # optional filter (value or list of values)

    [[plot]]
    file = "phi_vs_n.png"
    x = "n"
    y = "phi"
    series = "series"
    facet_col = "epsilon"                  # optional; also facet_row
    logx = true
    logy = true
    where = { normalise = "maxnorm" }

    [[paper]]                              # the paper's reported numbers, matched against rows
    where = { dataset = "power", paper_label = "Local" }
    metric = "psi"
    mean = 1.206e-2
    std = 0.651e-2
    source = "Table 7"
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ltm.errors import LtmError
from ltm.experiments.seeds import canonical, derive_seed

SPEC_DIR = Path(__file__).resolve().parent / "specs"
_TOP_KEYS = {"name", "title", "scenario", "module", "repetitions", "base_seed", "networked", "notes",
             "params", "grid", "reduced", "summary", "plot", "paper", "description"}


class SpecError(LtmError, ValueError):
    """A spec file that cannot be used; the message says what to fix."""

    exit_code = 2


@dataclass(frozen=True)
class Cell:
    """One grid point: its full params (fixed params + axes), the axis values alone, and its id."""

    params: dict[str, Any]
    axes: dict[str, Any]
    cell_id: str


@dataclass
class ExperimentSpec:
    name: str
    scenario: str
    path: Path | None
    raw: dict[str, Any]
    title: str = ""
    module: str | None = None
    repetitions: int = 1
    base_seed: int = 0
    networked: bool = False
    notes: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    reduced: bool = False
    summary: dict[str, Any] = field(default_factory=dict)
    plots: list[dict[str, Any]] = field(default_factory=list)
    paper: list[dict[str, Any]] = field(default_factory=list)

    # ------------------------------------------------------------------ derived
    @property
    def axes(self) -> list[str]:
        return list(self.grid)

    @property
    def metrics(self) -> list[str]:
        return list(self.summary.get("metrics", []))

    def cells(self) -> list[Cell]:
        """The cartesian product of the grid, in spec order (first axis varies slowest)."""
        out = []
        values = [self.grid[a] for a in self.axes]
        for combo in itertools.product(*values):
            axes = dict(zip(self.axes, combo))
            params = {**self.params, **axes}
            out.append(Cell(params, axes, cell_id(params)))
        return out

    def seed(self, cell: Cell, rep: int) -> int:
        """The seed of (cell, repetition): a function of the scenario, base seed, params and rep only."""
        return derive_seed("ltm-experiment-v1", self.scenario, self.base_seed, cell.params, rep)

    @property
    def identity_hash(self) -> str:
        """Hash of what makes results comparable across resumed runs (scenario and base seed)."""
        return hashlib.sha256(canonical({"scenario": self.scenario, "base_seed": self.base_seed}).encode()).hexdigest()

    @property
    def file_hash(self) -> str:
        """SHA-256 of the spec file's canonical content (after applying --reduced)."""
        return hashlib.sha256(canonical({"raw": self.raw, "reduced": self.reduced}).encode()).hexdigest()


def cell_id(params: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(params).encode()).hexdigest()[:12]


def resolve_spec_path(spec: str | Path) -> Path:
    """A path as given, or a bare name looked up as ``ltm/experiments/specs/<name>.toml``."""
    p = Path(spec)
    if p.is_file():
        return p
    named = SPEC_DIR / (p.name if p.suffix == ".toml" else f"{p.name}.toml")
    if named.is_file() and len(p.parts) == 1:
        return named
    available = ", ".join(sorted(q.stem for q in SPEC_DIR.glob("*.toml"))) or "none"
    raise SpecError(f"no spec file {spec!r} (and no ltm/experiments/specs/{p.stem}.toml); available: {available}")


def _as_list(name: str, value: Any) -> list[Any]:
    if isinstance(value, list):
        if not value:
            raise SpecError(f"grid axis {name!r} is empty")
        return value
    return [value]


def load_spec(spec: str | Path, *, reduced: bool = False) -> ExperimentSpec:
    """Parse and validate a spec file; with ``reduced`` apply its ``[reduced]`` overrides."""
    path = resolve_spec_path(spec)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    return spec_from_dict(raw, path=path, reduced=reduced)


def spec_from_dict(raw: dict[str, Any], *, path: Path | None = None, reduced: bool = False) -> ExperimentSpec:
    where = str(path) if path else "spec"
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown keys {unknown} (allowed: {sorted(_TOP_KEYS)})")
    for key in ("name", "scenario"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise SpecError(f"{where}: {key!r} must be a non-empty string")
    grid_raw = raw.get("grid", {})
    if not isinstance(grid_raw, dict):
        raise SpecError(f"{where}: [grid] must be a table of axes")
    params = copy.deepcopy(raw.get("params", {}))
    grid = {k: _as_list(k, v) for k, v in grid_raw.items()}
    reps = raw.get("repetitions", 1)
    if reduced:
        red = raw.get("reduced")
        if not isinstance(red, dict):
            raise SpecError(f"{where}: --reduced needs a [reduced] table")
        extra = sorted(set(red) - {"repetitions", "params", "grid"})
        if extra:
            raise SpecError(f"{where}: unknown keys in [reduced]: {extra}")
        params.update(copy.deepcopy(red.get("params", {})))
        for k, v in red.get("grid", {}).items():
            if k not in grid:
                raise SpecError(f"{where}: [reduced.grid] axis {k!r} is not an axis of [grid]")
            grid[k] = _as_list(k, v)
        reps = red.get("repetitions", reps)
    overlap = sorted(set(params) & set(grid))
    if overlap:
        raise SpecError(f"{where}: {overlap} are both fixed params and grid axes")
    if not isinstance(reps, int) or reps < 1:
        raise SpecError(f"{where}: repetitions must be an integer ≥ 1 (got {reps!r})")
    seed = raw.get("base_seed", 0)
    if not isinstance(seed, int):
        raise SpecError(f"{where}: base_seed must be an integer")
    plots = raw.get("plot", [])
    if isinstance(plots, dict):
        plots = [plots]
    for i, pl in enumerate(plots):
        for key in ("file", "x", "y"):
            if key not in pl:
                raise SpecError(f"{where}: [[plot]] #{i + 1} needs {key!r}")
    paper = raw.get("paper", [])
    for i, entry in enumerate(paper):
        if not isinstance(entry.get("where"), dict) or "metric" not in entry or "mean" not in entry:
            raise SpecError(f"{where}: [[paper]] #{i + 1} needs where = {{...}}, metric and mean")
    summary = raw.get("summary", {})
    return ExperimentSpec(
        name=raw["name"], scenario=raw["scenario"], path=path, raw=raw, title=raw.get("title", raw["name"]),
        module=raw.get("module"), repetitions=reps, base_seed=seed, networked=bool(raw.get("networked", False)),
        notes=raw.get("notes", raw.get("description", "")), params=params, grid=grid, reduced=reduced,
        summary=summary, plots=list(plots), paper=list(paper),
    )

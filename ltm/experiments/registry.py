"""The scenario registry: named cell functions that experiment specs refer to.

A *scenario* is a Python function ``cell(params: dict, seed: int) -> list[dict]`` that runs ONE
cell of a parameter grid once (one repetition) and returns rows of results (plain scalars:
str / int / float / bool / None).  The runner (:mod:`ltm.experiments.runner`) expands a spec's grid,
derives the seed of each (cell, repetition) deterministically, calls the function, and appends
its rows to ``results.csv`` with the cell's grid parameters beside them.

Register a scenario in any module listed in :data:`SCENARIO_MODULES` (or named by a spec's
``module`` key)::

    from ltm.experiments.registry import register

    @register("wu.rmgm_insurance", cost=lambda p: p["n"])
    def rmgm_insurance(params: dict, seed: int) -> list[dict]:
        ...
        return [{"series": "RMGM-OLS", "mse": 0.12}, {"series": "DGM-OLS", "mse": 0.15}]

Rules a scenario must follow:

* Deterministic given ``(params, seed)``: derive every random choice from ``seed`` (see
  :func:`ltm.experiments.seeds.subseed`), so a resumed or networked run reproduces the same numbers.
* Protocol runs go through :func:`ltm.experiments.release_backends.current` (in-process by default; the
  real gRPC actors under ``--networked``).  A scenario that does so declares ``networked=True``;
  the runner refuses ``--networked`` for the others.
* Rows should carry a ``series`` column when a cell compares several methods (the plots and the
  summary group by it), and may carry ``paper_label`` to match the paper's reported numbers.

``cost`` (optional) estimates a cell's relative run time from its params; it only weights the
progress bar's ETA.  ``styles`` (optional) maps series names to matplotlib keyword arguments
(color, linestyle, marker, …) so every plot draws a series the same way.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CellFunction = Callable[[dict, int], list[dict]]

#: Modules imported by :func:`load_scenarios`.  A missing one is reported, not fatal: its specs
#: cannot run until it exists.
SCENARIO_MODULES: tuple[str, ...] = (
    "ltm.experiments.burkhardt",
    "ltm.experiments.wu",
    "ltm.experiments.wu_replicated",
    "ltm.experiments.thresholds",
    "ltm.experiments.cao_zhang",
    "ltm.experiments.liao",
)


@dataclass(frozen=True)
class Scenario:
    """A registered cell function and what the runner needs to know about it."""

    name: str
    func: CellFunction
    module: str
    networked: bool = False
    cost: Callable[[dict], float] | None = None
    doc: str = ""


SCENARIOS: dict[str, Scenario] = {}
#: series name → matplotlib keyword arguments (filled by scenario modules).
SERIES_STYLES: dict[str, dict[str, Any]] = {}
#: Modules that failed to import: name → reason.
MISSING_MODULES: dict[str, str] = {}


def register(name: str, *, networked: bool = False, cost: Callable[[dict], float] | None = None,
             styles: dict[str, dict[str, Any]] | None = None) -> Callable[[CellFunction], CellFunction]:
    """Decorator: register ``func`` as scenario ``name`` (names are unique)."""

    def wrap(func: CellFunction) -> CellFunction:
        existing = SCENARIOS.get(name)
        if existing is not None and (existing.module, existing.func.__qualname__) != (func.__module__,
                                                                                      func.__qualname__):
            raise ValueError(f"scenario {name!r} is registered twice ({existing.module} and {func.__module__})")
        SCENARIOS[name] = Scenario(name, func, func.__module__, networked, cost, (func.__doc__ or "").strip())
        if styles:
            SERIES_STYLES.update(styles)
        return func

    return wrap


def load_scenarios(extra_modules: tuple[str, ...] | list[str] = (), *, quiet: bool = False) -> dict[str, Scenario]:
    """Import every scenario module (:data:`SCENARIO_MODULES` plus ``extra_modules``).

    A module that does not exist is recorded in :data:`MISSING_MODULES` with a one-line message on
    stderr (unless ``quiet``); an error raised *inside* an existing module propagates (a broken
    scenario module must not be silently skipped).
    """
    for module in (*SCENARIO_MODULES, *extra_modules):
        if module in sys.modules:
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the module exists but one of ITS imports is missing
                raise
            MISSING_MODULES[module] = f"no module {module!r}"
            if not quiet:
                print(f"ltm experiment: note: scenario module {module} is not present; "
                      f"its scenarios are unavailable", file=sys.stderr)
    return SCENARIOS


def get_scenario(name: str, module: str | None = None) -> Scenario:
    """The scenario ``name`` (importing ``module`` first if given), or a ValueError saying why not."""
    load_scenarios((module,) if module else (), quiet=True)
    if name in SCENARIOS:
        return SCENARIOS[name]
    hint = ""
    if module and module in MISSING_MODULES:
        hint = f"; its module {module} is missing"
    elif MISSING_MODULES:
        hint = f"; missing scenario modules: {', '.join(sorted(MISSING_MODULES))}"
    known = ", ".join(sorted(SCENARIOS)) or "none"
    raise ValueError(f"unknown scenario {name!r}{hint} (registered: {known})")

"""The core imports nothing above it (docs/architecture.md §1).

``ltm/`` is the protocol core every actor shares: it may import the standard library, its own
modules and third-party libraries, never an actor (server, party, analyst), the simulator, the data
library, the experiments, the gRPC plumbing (transport) or the command line (ltm.cli).  The scan reads
every ``import`` of every module in ``ltm/``, at module level or inside a function, from its syntax
tree (a lazy import inside a function is still a dependency).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: The packages of the ``ltm`` namespace above the core.
ABOVE = {"ltm.server", "ltm.party", "ltm.analyst", "ltm.sim", "ltm.datasets", "ltm.experiments", "ltm.transport",
         "ltm.cli"}
#: Where each of them lives in the repository (the actors keep their top-level folders).
FOLDERS = {"ltm.server": "server", "ltm.party": "party", "ltm.analyst": "analyst", "ltm.sim": "ltm/sim",
           "ltm.datasets": "ltm/datasets", "ltm.experiments": "ltm/experiments", "ltm.transport": "ltm/transport",
           "ltm.cli": "ltm/cli"}


def _package(module: str) -> str:
    """``ltm.server.core`` → ``ltm.server``; ``ltm.dp.noise`` → ``ltm.dp``; ``numpy.linalg`` → ``numpy``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "ltm" and len(parts) > 1 else parts[0]


def imported_packages(path: Path) -> set[str]:
    """The package of every module ``path`` imports (absolute imports; relative ones stay in their package)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {_package(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(_package(node.module))
    return out


def core_modules() -> list[Path]:
    """Every module of the core: ``ltm/`` less the packages above it that live inside that folder."""
    inside = [ROOT / folder for folder in FOLDERS.values() if folder.startswith("ltm/")]
    return sorted(p for p in (ROOT / "ltm").rglob("*.py") if not any(p.is_relative_to(d) for d in inside))


def test_the_scan_sees_imports_inside_functions(tmp_path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n\ndef f():\n    from ltm.sim.simulate import simulate\n    import ltm.transport.tls\n")
    assert imported_packages(probe) == {"os", "ltm.sim", "ltm.transport"}


def test_the_core_imports_no_actor_simulator_experiment_transport_or_cli() -> None:
    modules = core_modules()
    assert len(modules) > 20  # the scan found the core
    upward = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & ABOVE) for p in modules}
    upward = {k: v for k, v in upward.items() if v}
    assert not upward, f"the core imports packages above it: {upward}"


def test_nothing_below_the_command_line_imports_it() -> None:
    """``ltm/cli/`` sits on top: the roles it calls (actors, simulator, experiments, transport) never import it."""
    below = [ROOT / FOLDERS[p] for p in sorted(ABOVE - {"ltm.cli"})]
    modules = core_modules() + sorted(p for folder in below for p in folder.rglob("*.py"))
    upward = sorted(str(p.relative_to(ROOT)) for p in modules if "ltm.cli" in imported_packages(p))
    assert not upward, f"modules below the command line import ltm.cli: {upward}"

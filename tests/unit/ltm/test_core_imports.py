"""The core imports nothing above it (docs/architecture.md §1).

``ltm/`` is the protocol core every actor shares: it may import the standard library, its own
modules and third-party libraries, never an actor (server, party, analyst), the simulator, the data
library, the experiments, the gRPC plumbing (transport) or the command line (ltm_cli).  The scan reads
every ``import`` of every module in ``ltm/``, at module level or inside a function, from its syntax
tree (a lazy import inside a function is still a dependency).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: The top-level packages of the repository above the core.
ABOVE = {"server", "party", "analyst", "sim", "ltm_datasets", "experiments", "transport", "ltm_cli"}


def imported_packages(path: Path) -> set[str]:
    """The top-level package of every module ``path`` imports (absolute imports; relative ones stay in ``ltm``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_scan_sees_imports_inside_functions(tmp_path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n\ndef f():\n    from sim.simulate import simulate\n    import transport.tls\n")
    assert imported_packages(probe) == {"os", "sim", "transport"}


def test_the_core_imports_no_actor_simulator_experiment_transport_or_cli() -> None:
    modules = sorted((ROOT / "ltm").rglob("*.py"))
    assert len(modules) > 20  # the scan found the core
    upward = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & ABOVE) for p in modules}
    upward = {k: v for k, v in upward.items() if v}
    assert not upward, f"the core imports packages above it: {upward}"


def test_nothing_below_the_command_line_imports_it() -> None:
    """``ltm_cli/`` sits on top: the roles it calls (actors, simulator, experiments, transport) never import it."""
    below = ("ltm", "server", "party", "analyst", "sim", "ltm_datasets", "experiments", "transport")
    modules = sorted(p for package in below for p in (ROOT / package).rglob("*.py"))
    upward = sorted(str(p.relative_to(ROOT)) for p in modules if "ltm_cli" in imported_packages(p))
    assert not upward, f"modules below the command line import ltm_cli: {upward}"

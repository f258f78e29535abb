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


def test_actors_never_import_each_other() -> None:
    """A party, a server and the analyst are separate processes of separate organisations: their code
    shares the core and the transport, never each other's modules (docs/architecture.md §1)."""
    actors = ("ltm.party", "ltm.server", "ltm.analyst")
    crossing = {f"{FOLDERS[a]}/{p.relative_to(ROOT / FOLDERS[a])}": sorted(imported_packages(p) & (set(actors) - {a}))
                for a in actors for p in sorted((ROOT / FOLDERS[a]).rglob("*.py"))}
    assert len(crossing) > 30  # the scan found the actors' modules
    crossing = {k: v for k, v in crossing.items() if v}
    assert not crossing, f"actors import each other: {crossing}"


#: ``raise SystemExit`` outside the command line's one error mapping (ltm/cli/app.py), with the reason.
SYSTEM_EXIT_ALLOWED = {
    # a `python -m` tool's own Ctrl-C handler: the shell's status for death by that signal
    "ltm/sim/tools/bounds_eval.py": "exits 128 + signum after its cleanup, as ltm does",
}


def _raises_system_exit(path: Path) -> list[int]:
    """Lines of ``raise SystemExit`` in ``path``, except a script's ``if __name__ == "__main__":`` block."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    main_guard = {id(n) for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
                  for n in ast.walk(node)}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Raise) and n.exc is not None
            and "SystemExit" in ast.unparse(n.exc) and id(n) not in main_guard]


def test_system_exit_only_in_the_one_error_mapping() -> None:
    sources = core_modules() + sorted(p for folder in FOLDERS.values() for p in (ROOT / folder).rglob("*.py"))
    found = {str(p.relative_to(ROOT)): _raises_system_exit(p) for p in sources
             if p.relative_to(ROOT).as_posix() not in ("ltm/cli/app.py", "ltm/cli/__main__.py")}
    found = {k: v for k, v in found.items() if v and k not in SYSTEM_EXIT_ALLOWED}
    assert not found, f"raise CommandError (ltm/errors.py) instead of SystemExit: {found}"


def test_the_system_exit_scan_sees_a_raise(tmp_path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('def f():\n    raise SystemExit("no")\n\n\nif __name__ == "__main__":\n    raise SystemExit(f())\n')
    assert _raises_system_exit(probe) == [2]

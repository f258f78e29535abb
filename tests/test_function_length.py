"""No function of the project's code is longer than :data:`MAX_LINES` lines: a longer one is split
into named steps a reader can follow (helpers with docstrings, or a small dataclass for the state
the steps share).  Tests (``tests/``) and the generated protobuf stubs (``*_pb2*.py``) are not
counted.  A function's length runs from its ``def`` line to its last line (decorators aside),
nested functions counting towards the function that holds them as well as on their own.

The sources are parsed when this module is collected, before any test has run, as in
``test_docstrings.py`` (CPython 3.11.7's ``ast.parse`` can fail once tests that ran asyncio and
threads have skewed the interpreter's recursion counter)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 80
#: Directories never scanned: the tests themselves, and what is not the project's source.
SKIP_DIRS = {"tests", "build", "dist", "node_modules", "__pycache__"}

#: (path, function) pairs allowed past MAX_LINES for now, each with the reason.  An entry must still
#: be needed: once its function is short, the stale entry fails the test below, so it is removed.
EXEMPT: dict[tuple[str, str], str] = {}


def project_sources(root: Path) -> list[Path]:
    """Every ``.py`` file of the project under ``root``: not in a hidden directory (``.venv``,
    ``.git``), :data:`SKIP_DIRS` or an ``*.egg-info``, and not a generated ``*_pb2*.py`` stub."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in SKIP_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        if "_pb2" in path.name:
            continue
        found.append(path)
    return found


def long_functions(tree: ast.AST, path: str, limit: int = MAX_LINES) -> dict[tuple[str, str], int]:
    """``{(path, name): lines}`` for every function or method in ``tree`` longer than ``limit`` lines."""
    lengths = {(path, node.name): node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {key: n for key, n in lengths.items() if n > limit}


#: Parsed at collection (module docstring): every project module, and the self-test's sample.
_TREES = {path.relative_to(REPO).as_posix(): ast.parse(path.read_text(), str(path))
          for path in project_sources(REPO)}
_SAMPLE = ast.parse("def short():\n" + "    x = 1\n" * 3 + "\n\n"
                    "class C:\n    async def long(self):\n" + "        x = 1\n" * 80 + "\n\n"
                    "def outer():\n    def inner():\n" + "        x = 1\n" * 77 + "    return inner\n")


def test_no_function_is_longer_than_the_limit():
    assert len(_TREES) > 100  # the walk found the packages (123 modules today)
    too_long = {key: n for path, tree in _TREES.items() for key, n in long_functions(tree, path).items()}
    offenders = sorted(f"{path}: {name} ({n} lines)" for (path, name), n in too_long.items()
                       if (path, name) not in EXEMPT)
    assert not offenders, (f"functions longer than {MAX_LINES} lines (split them into named steps):\n"
                           + "\n".join(offenders))
    stale = sorted(f"{path}: {name} ({why})" for (path, name), why in EXEMPT.items()
                   if (path, name) not in too_long)
    assert not stale, "exemptions no longer needed (remove them from EXEMPT):\n" + "\n".join(stale)


def test_the_scan_skips_tests_hidden_directories_and_generated_stubs():
    scanned = set(_TREES)
    assert "ltm/jobspec.py" in scanned and "ltm/sim/tools/bench_e2e.py" in scanned
    assert not any(p.startswith(("tests/", ".")) or "/." in p or "_pb2" in p for p in scanned)


def test_a_long_function_is_found():
    # A walk that missed methods or nested functions would pass the first test vacuously: the
    # 81-line method is found, the 80-line outer function (holding a 78-line inner one) is not.
    assert long_functions(_SAMPLE, "pkg/mod.py") == {("pkg/mod.py", "long"): 81}

"""Every public function of the actor packages (server/, analyst/, party/, ltm/transport/) has a docstring:
module-level functions and the methods of public classes whose names do not start with ``_``
(read from the source, so nothing is imported).

The sources are parsed when this module is collected, before any test has run: CPython 3.11.7's
``ast.parse`` can fail with "SystemError: AST constructor recursion depth mismatch" once tests that
ran asyncio and threads have left the interpreter's recursion counter skewed (the suite's
conftest.py works around the same bug for hypothesis)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ACTOR_PACKAGES = ("server", "analyst", "party", "ltm/transport")


def undocumented(tree: ast.AST, path: str) -> list[str]:
    """``path:line: Class.method`` for each public function in ``tree`` without a docstring."""
    found: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not child.name.startswith("_") and ast.get_docstring(child) is None:
                    found.append(f"{path}:{child.lineno}: {prefix}{child.name}")
            elif isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


#: Parsed at collection (module docstring): every actor module, and the self-test's sample.
_ACTOR_TREES = {path.relative_to(REPO).as_posix(): ast.parse(path.read_text(), str(path))
                for package in ACTOR_PACKAGES for path in sorted((REPO / package).rglob("*.py"))}
_SAMPLE = ast.parse('def documented():\n    """Yes."""\n\n\ndef bare():\n    pass\n\n\n'
                    'class Public:\n    async def method(self):\n        return 1\n\n'
                    '    def _private(self):\n        return 2\n\n\n'
                    'class _Hidden:\n    def method(self):\n        return 3\n')


def test_every_public_function_of_the_actor_packages_has_a_docstring():
    assert len(_ACTOR_TREES) > 40  # the walk found the packages (49 modules today)
    missing = [line for path, tree in _ACTOR_TREES.items() for line in undocumented(tree, path)]
    assert not missing, "public functions without a docstring:\n" + "\n".join(missing)


def test_a_function_without_a_docstring_is_found():
    # A walk that missed functions would pass the test above vacuously.
    assert undocumented(_SAMPLE, "pkg/mod.py") == ["pkg/mod.py:5: bare", "pkg/mod.py:10: Public.method"]

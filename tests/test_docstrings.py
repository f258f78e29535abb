"""Every public function of the actor packages (server/, analyst/, party/, transport/) has a docstring:
module-level functions and the methods of public classes whose names do not start with ``_``
(read from the source, so nothing is imported)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ACTOR_PACKAGES = ("server", "analyst", "party", "transport")


def undocumented(package: str, root: Path = REPO) -> list[str]:
    """``path:line: Class.method`` for each public function of ``root/package`` without a docstring."""
    found: list[str] = []

    def visit(node: ast.AST, path: Path, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not child.name.startswith("_") and ast.get_docstring(child) is None:
                    found.append(f"{path.relative_to(root).as_posix()}:{child.lineno}: {prefix}{child.name}")
            elif isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                visit(child, path, f"{prefix}{child.name}.")

    for path in sorted((root / package).rglob("*.py")):
        visit(ast.parse(path.read_text(), str(path)), path, "")
    return found


def test_every_public_function_of_the_actor_packages_has_a_docstring():
    missing = [line for package in ACTOR_PACKAGES for line in undocumented(package)]
    assert not missing, "public functions without a docstring:\n" + "\n".join(missing)


def test_a_function_without_a_docstring_is_found(tmp_path):
    # A walk that missed functions would pass the test above vacuously.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text('def documented():\n    """Yes."""\n\n\ndef bare():\n    pass\n\n\n'
                                    'class Public:\n    async def method(self):\n        return 1\n\n'
                                    '    def _private(self):\n        return 2\n\n\n'
                                    'class _Hidden:\n    def method(self):\n        return 3\n')
    assert undocumented("pkg", tmp_path) == ["pkg/mod.py:5: bare", "pkg/mod.py:10: Public.method"]

"""The README and the docs say what the code does: no merge debris, no links outside the
repository, and every `ltm …` command line in a shell block names a real subcommand and real flags."""
from __future__ import annotations

import argparse
import os
import re
import shlex
from pathlib import Path

import pytest

from ltm.cli.app import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "experiments").glob("*.md"))]


def _doc_id(p: Path) -> str:
    return str(p.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_no_merge_debris_or_links_outside_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    markers = [i + 1 for i, line in enumerate(text.splitlines()) if re.match(r"^(<{7}|>{7}|={7})( |$)", line)]
    assert not markers, f"{_doc_id(doc)}: merge conflict markers at lines {markers}"
    assert _SHARED not in text, f"{_doc_id(doc)} links outside the repository ({_SHARED})"
    # A paragraph that starts with a comma or a full stop lost its beginning in an edit.
    broken = [i + 2 for i, (a, b) in enumerate(zip(text.splitlines(), text.splitlines()[1:]))
              if not a.strip() and re.match(r"^[,.;] ", b)]
    assert not broken, f"{_doc_id(doc)}: paragraphs that start mid-sentence at lines {broken}"


def test_readme_cites_only_what_the_repository_holds() -> None:
    # The design notes and paper digests live outside the repository: the README points to docs/.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    outside = sorted(set(re.findall(rf"DESIGN(?:\.md)? ?§\s*\d+|\b{_SPEC_CITATION}\s*[\d.]+", text, flags=re.I)))
    assert not outside, f"README.md cites documents that are not in the repository: {outside}"


def _shell_commands(text: str) -> list[str]:
    """Every `ltm …` command of the ```bash blocks (continuation lines joined, comments dropped)."""
    out: list[str] = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("ltm "):
                out.append(line)
    return out


def _options(parser: argparse.ArgumentParser, words: list[str]) -> tuple[str, set[str]]:
    """(the subcommand path, the option strings it accepts), following nested subparsers."""
    path = []
    opts: set[str] = set()
    for word in words:
        opts |= {o for a in parser._actions for o in a.option_strings}
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
        path.append(word)
    opts |= {o for a in parser._actions for o in a.option_strings}
    return " ".join(path), opts


def _cases() -> list[tuple[str, str]]:
    return [(_doc_id(doc), cmd) for doc in DOCS for cmd in _shell_commands(doc.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("doc,command", _cases())
def test_documented_commands_name_real_subcommands_and_flags(doc: str, command: str) -> None:
    words = shlex.split(command)[1:]
    assert words and words[0] in COMMANDS, f"{doc}: `{command}`: no subcommand {words[:1]} in ltm.cli.app.COMMANDS"
    path, known = _options(build_parser(words[0]), words)
    flags = {w.split("=", 1)[0] for w in words if w.startswith("--")}
    unknown = sorted(flags - known)
    assert not unknown, f"{doc}: `{command}`: `ltm {path}` has no option(s) {unknown}"


def test_what_the_readme_calls_a_runtime_dependency_is_one() -> None:
    import tomllib

    core = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in core}
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    claimed = {m.lower() for m in re.findall(r"`([A-Za-z0-9_.-]+)` is a runtime dependency", text)}
    assert claimed <= names, f"README calls {sorted(claimed - names)} runtime dependencies; pyproject: {sorted(names)}"


# ----------------------------------------------------------------------------- docs by reader (#25)
README_MAX_LINES = 200
#: Markdown links and images, `[text](target)`; a target with a scheme or only an anchor is not a file.
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_the_readme_stays_short() -> None:
    # The README says what LTM is, the two commands, the threat model and where to go next; everything
    # else lives in the document its reader opens (docs/, deploy/README.md).
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def _relative_links(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)  # code is not a link
    return [t for t in _LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)]


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = [t for t in _relative_links(doc) if not (doc.parent / t.split("#", 1)[0]).exists()]
    assert not broken, f"{_doc_id(doc)} links to files that do not exist: {broken}"


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "here.md").write_text("x")
    doc = tmp_path / "doc.md"
    doc.write_text("[a](here.md) [b](gone.md#x) ![c](img/none.png) [d](https://x.org/y) [e](#top)\n"
                   "```\n[f](in-code.md)\n```\n")
    assert _relative_links(doc) == ["here.md", "gone.md#x", "img/none.png"]


#: A test file named in prose or a table: ``tests/unit/ltm/test_jobspec.py``, ``unit/ltm/dp/test_dp_noise.py``
#: (a path below tests/) or a bare ``test_core.py``.  Templates such as ``test_<module>.py`` are not names.
_TEST_FILE = re.compile(r"(?<![\w/.<>-])((?:[\w.-]+/)*test_\w+\.py)\b")


def _missing_test_files(doc: Path, root: Path = ROOT) -> list[str]:
    """The test files ``doc`` names that do not exist: a path must exist below the repository or below
    tests/, a bare name somewhere below tests/."""
    names = {p.name for p in (root / "tests").rglob("test_*.py")}
    missing = []
    for named in sorted(set(_TEST_FILE.findall(doc.read_text(encoding="utf-8")))):
        found = ((root / named).is_file() or (root / "tests" / named).is_file()) if "/" in named else named in names
        if not found:
            missing.append(named)
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_every_test_file_a_document_names_exists(doc: Path) -> None:
    missing = _missing_test_files(doc)
    assert not missing, f"{_doc_id(doc)} names test files that do not exist: {missing}"


def test_the_test_file_check_sees_a_renamed_file(tmp_path: Path) -> None:
    (tmp_path / "tests" / "unit" / "ltm").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "ltm" / "test_here.py").write_text("")
    doc = tmp_path / "doc.md"
    doc.write_text("`tests/unit/ltm/test_here.py`, `unit/ltm/test_here.py`, `test_here.py`, `test_<module>.py`;\n"
                   "`tests/test_here.py` | `test_kills_here.py` | unit/ltm/test_gone.py\n")
    assert _missing_test_files(doc, tmp_path) == ["test_kills_here.py", "tests/test_here.py", "unit/ltm/test_gone.py"]


#: What no file may cite: the design notes by section, and the paper digests (by section, by file name or
#: by path), all of which live outside the repository.  Each is joined at run time, so that neither this
#: file nor its .pyc holds what the test looks for.
_OUTSIDE_CITATION = " ".join(("DESIGN", "§"))
_SPEC_CITATION = " ".join(("spec", "§"))  # matched case-insensitively (a capital S too)
_SHARED = "/".join(("..", "shared"))
_DIGESTS = tuple("-".join(words) for words in (("public", "second", "moment"), ("dp", "random", "features"),
                                               ("ltm", "secure", "sketching"), ("multiparty", "release", "ols")))
#: The digests number the papers as seeds 000–004, which mean nothing inside the repository.
_SEED_NUMBER = re.compile(r"\bseed[ -]00[0-4]\b", flags=re.I)
_SKIP_DIRS = {".git", ".venv", ".mutation", "__pycache__", "node_modules", "build", "dist", ".pytest_cache",
              ".hypothesis"}


def test_nothing_cites_documents_outside_the_repository() -> None:
    # Code comments and docs point to what every reader of the repository has: docs/architecture.md,
    # another repository doc, or the paper itself with its own section, theorem or equation number.
    hits = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")]  # not walked
        for name in files:
            path = Path(top) / name
            if path.suffix in {".py", ".md", ".toml", ".txt", ".sh", ".yml", ".yaml", ".proto", ".cfg", ""}:
                hits += _citations(path)
    assert not hits, f"cite the paper (its own §, Eq., Theorem) or a repository doc instead: {hits}"


def _citations(path: Path, root: Path = ROOT) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):  # binary data, or a file that vanished: nothing a reader cites
        return []
    rel = path.relative_to(root).as_posix()
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        found = [_OUTSIDE_CITATION] if _OUTSIDE_CITATION in line else []
        found += [s for s in (_SHARED, *_DIGESTS) if s in line]
        found += [_SPEC_CITATION] if _SPEC_CITATION in line.lower() else []
        found += _SEED_NUMBER.findall(line)
        hits += [f"{rel}:{i} ({s})" for s in found]
    return hits


def test_the_citation_check_sees_each_outside_reference(tmp_path: Path) -> None:
    lines = [_OUTSIDE_CITATION + "3", "see the " + _SPEC_CITATION + "2.5", _SPEC_CITATION.capitalize() + "2.7",
             "[x](" + _SHARED + "/spec/a.md)", *(f"spec {d} §4.6" for d in _DIGESTS), "the paper (" + "Seed" + " 003)",
             "docs/architecture.md §8", "--seed 7"]  # the last two are fine
    (tmp_path / "a.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = _citations(tmp_path / "a.py", tmp_path)
    assert [h.split(" ", 1)[0] for h in found] == [f"a.py:{i}" for i in range(1, len(lines) - 1)], found
    # The experiments (code, specs, the summaries written from them) are held to the same rule.
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "b.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _citations(tmp_path / "experiments" / "b.py", tmp_path) == [f"experiments/b{h[1:]}" for h in found]


# ------------------------------------------------------------------ the trace of one job (architecture §2)
_CITATION = re.compile(r"`((?:ltm|party|server|analyst)/[\w/]+\.py):([A-Za-z_][\w.]*)`")


def _defined(path: Path, dotted: str) -> bool:
    """Whether ``path`` defines ``dotted`` (a function or class, or ``Class.method``) at that nesting."""
    import ast

    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for name in dotted.split("."):
        found = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.name == name), None)
        if found is None:
            return False
        scope = found.body
    return True


def test_every_step_of_the_job_trace_names_a_real_function() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("### A trace of one job")
    cited = _CITATION.findall(text[start:text.index("\n## ", start)])
    assert len(cited) >= 30  # the table was found
    missing = [f"{p}:{name}" for p, name in cited if not (ROOT / p).is_file() or not _defined(ROOT / p, name)]
    assert not missing, f"the trace in docs/architecture.md §2 names what the code does not define: {missing}"


def test_the_trace_check_sees_a_wrong_name(tmp_path: Path) -> None:
    probe = tmp_path / "m.py"
    probe.write_text("class A:\n    def b(self):\n        pass\n\n\ndef c():\n    pass\n", encoding="utf-8")
    assert _defined(probe, "A.b") and _defined(probe, "c") and _defined(probe, "A")
    assert not _defined(probe, "b") and not _defined(probe, "A.c") and not _defined(probe, "d")

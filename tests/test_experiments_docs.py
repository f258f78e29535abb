"""The experiments' write-ups (docs/experiments.md, the index, and one page per paper or family under
docs/experiments/): every relative link and image resolves inside the repository, every page is
reachable from the index, every spec is written up somewhere, and nothing cites a document the
repository does not hold."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "experiments.md"
PAGES = sorted((ROOT / "docs" / "experiments").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("page", [INDEX, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            bad.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
            bad.append(target)
    assert not bad, f"{page.relative_to(ROOT)}: links that do not resolve: {bad}"


#: The paper digests' file names, joined at run time so that this file does not hold what
#: tests/test_docs.py refuses everywhere.
_DIGESTS = ["-".join(w) for w in (("public", "second", "moment"), ("dp", "random", "features"),
                                  ("ltm", "secure", "sketching"), ("multiparty", "release", "ols"))]
#: The design notes by section, the digests (by section, name or path), their numbering of the papers
#: as seeds 000–004, and absolute paths of this machine: none of them is in the repository.
OUTSIDE = re.compile(r"DESIGN(?:\.md)? ?§|\bspec[ ]§|\.\./shared|/work/|\bseed[ -]00[0-4]\b|"
                     + "|".join(map(re.escape, _DIGESTS)), flags=re.I)


def test_the_pattern_refuses_each_outside_form() -> None:
    refused = ["DESIGN" + " §4", "Spec" + " §6.2", "(spec" + " §2.7)", "../" + "shared/spec/x.md", "/work/" + "main",
               "the paper (" + "Seed" + " 003)", "seed" + "-002", *(f"spec {d} §4.1" for d in _DIGESTS)]
    assert [s for s in refused if not OUTSIDE.search(s)] == []
    fine = ["docs/architecture.md §8", "Cao & Zhang §4.2", "--seed 7", "base seed 3", "Burkhardt et al. Cor 4.7"]
    assert [s for s in fine if OUTSIDE.search(s)] == []


#: The experiments' own code, specs and data notes, and the summaries the runner writes from the specs.
SOURCES = sorted([*(ROOT / "experiments").rglob("*.py"), *(ROOT / "experiments").rglob("*.md"),
                  *(ROOT / "experiments" / "specs").glob("*.toml"), *(ROOT / "docs" / "results").glob("*/summary.md")])


@pytest.mark.parametrize("page", [INDEX, *PAGES, *SOURCES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_of_documents_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    outside = OUTSIDE.findall(text)
    assert not outside, f"{page.relative_to(ROOT)} cites documents outside the repository: {outside}"


def test_every_page_is_in_the_index_and_every_spec_is_written_up() -> None:
    index = INDEX.read_text(encoding="utf-8")
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(index)}
    assert {p.name for p in PAGES} <= linked, f"pages missing from the index: {sorted({p.name for p in PAGES} - linked)}"
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    specs = sorted(p.stem for p in (ROOT / "experiments" / "specs").glob("*.toml"))
    missing = [s for s in specs if not re.search(rf"\b{re.escape(s)}\b", text)]
    assert not missing, f"specs no page of docs/experiments/ mentions: {missing}"

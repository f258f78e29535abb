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


@pytest.mark.parametrize("page", [INDEX, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_of_documents_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    outside = re.findall(r"DESIGN(?:\.md)? ?§|\bspec[ ]§|\bspec ltm-|\.\./shared|/work/", text)
    assert not outside, f"{page.relative_to(ROOT)} cites documents outside the repository: {outside}"


def test_every_page_is_in_the_index_and_every_spec_is_written_up() -> None:
    index = INDEX.read_text(encoding="utf-8")
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(index)}
    assert {p.name for p in PAGES} <= linked, f"pages missing from the index: {sorted({p.name for p in PAGES} - linked)}"
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    specs = sorted(p.stem for p in (ROOT / "experiments" / "specs").glob("*.toml"))
    missing = [s for s in specs if not re.search(rf"\b{re.escape(s)}\b", text)]
    assert not missing, f"specs no page of docs/experiments/ mentions: {missing}"

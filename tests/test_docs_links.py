"""The README and the pages of docs/ link to each other and into the tree: every relative link must name a
file that exists and, when it names a heading (`page.md#anchor`), a heading of that page. Moving or renaming
a section then fails here instead of leaving a newcomer at a dead link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but hyphens dropped, spaces as hyphens, repeats numbered."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_docs_pages_exist_and_the_readme_links_every_one() -> None:
    linked = {t.split("#")[0] for t in relative_links(ROOT / "README.md")}
    assert "docs/README.md" in linked
    for page in PAGES[1:]:
        if page.name != "README.md":
            assert f"docs/{page.name}" in linked, page.name
            assert page.name in {t.split("#")[0] for t in relative_links(ROOT / "docs" / "README.md")}, page.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_an_existing_file_and_heading(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no such heading")
    assert not broken, broken

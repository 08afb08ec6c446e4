"""The product's own documentation as passages the chat can retrieve: the README and the pages of
docs/, split by section, and one passage per operation of the API reference the service serves
(assetcdn/shared/openapi.json).

The README ships with the product twice over: beside the package in a source checkout (what
`make setup` installs, editable) and as the long description in the installed distribution's
metadata (a wheel install). The docs pages are read through `docs/` beside this module: a link to the
checkout's docs/ in the source tree, package data (real files) in a wheel. Code blocks are kept out of
passages (they answer "how", not "what"), links keep only their text, and a section longer than a
passage is split at paragraph and list-item boundaries.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

from assetcdn.shared import openapi

DISTRIBUTION = "assetcdn"
SOURCE_README = Path(__file__).resolve().parents[3] / "README.md"
DOCS = Path(__file__).with_name("docs")   # -> ../../../docs in the source tree (a symlink)
INDEX = "README.md"    # docs/README.md lists the pages; it holds nothing to answer from
MAX_PASSAGE = 700      # characters; MiniLM reads 256 tokens, about 1,000 characters of English
HEADING = re.compile(r"^(#{1,4})\s+(.*)$")
LINK = re.compile(r"\[([^\]]*)\]\([^)\s]+\)")   # [text](target) -> text


@dataclass(frozen=True)
class Passage:
    id: str         # e.g. "api-guide#storage-zones-catalog-2": the page, then the section
    title: str      # the section's heading
    text: str

    def embedding_text(self) -> str:
        return f"{self.title}: {self.text}"


def readme_text() -> str:
    if SOURCE_README.is_file():
        return SOURCE_README.read_text(encoding="utf-8")
    try:
        metadata = importlib.metadata.metadata(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return ""
    return metadata.get_payload() or metadata.get("Description") or ""  # type: ignore[attr-defined]


def docs_pages() -> list[tuple[str, str]]:
    """(page name without .md, its text) for every page of docs/ but the index, by name."""
    if not DOCS.is_dir():
        return []
    return [(page.stem, page.read_text(encoding="utf-8")) for page in sorted(DOCS.glob("*.md")) if page.name != INDEX]


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def _blocks(lines: list[str]) -> list[str]:
    """Paragraphs and list items of a section, code fences dropped, wrapped lines joined."""
    blocks: list[str] = []
    current: list[str] = []
    fenced = False

    def flush() -> None:
        if current:
            blocks.append(LINK.sub(r"\1", " ".join(part.strip() for part in current)))
            current.clear()

    for line in lines:
        if line.strip().startswith("```"):
            fenced = not fenced
            flush()
            continue
        if fenced:
            continue
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith(("- ", "* ", "| ")) or re.match(r"^\d+\. ", stripped):
            flush()
            current.append(stripped)
        else:
            current.append(stripped)
    flush()
    return [b for b in blocks if not set(b) <= set("|-: ")]


def split_passages(markdown: str, source: str = "readme") -> list[Passage]:
    sections: list[tuple[str, list[str]]] = [("Overview", [])]
    fenced = False
    for line in markdown.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        match = HEADING.match(line) if not fenced else None
        if match:
            sections.append((match.group(2).strip().strip("`"), []))
        else:
            sections[-1][1].append(line)
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for title, lines in sections:
        chunk = ""
        for block in _blocks(lines):
            if chunk and len(chunk) + len(block) + 1 > MAX_PASSAGE:
                passages.append(_passage(source, title, chunk, seen))
                chunk = ""
            chunk = f"{chunk}\n{block}".strip()  # one block (paragraph, list item) per line
            while len(chunk) > MAX_PASSAGE:  # one very long block: cut at a sentence end if there is one
                cut = chunk.rfind(". ", 0, MAX_PASSAGE)
                cut = cut + 1 if cut > MAX_PASSAGE // 2 else MAX_PASSAGE
                passages.append(_passage(source, title, chunk[:cut], seen))
                chunk = chunk[cut:].strip()
        if chunk:
            passages.append(_passage(source, title, chunk, seen))
    return passages


def _passage(source: str, title: str, text: str, seen: dict[str, int]) -> Passage:
    slug = _slug(title)
    seen[slug] = seen.get(slug, 0) + 1
    suffix = "" if seen[slug] == 1 else f"-{seen[slug]}"
    return Passage(f"{source}#{slug}{suffix}", title, text)


def api_reference_passages() -> list[Passage]:
    """One passage per operation of the served API reference: method, path, summary and description."""
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for path, item in openapi.document().get("paths", {}).items():
        for method, operation in item.items():
            if method not in openapi.METHOD_ORDER or not isinstance(operation, dict):
                continue
            summary = str(operation.get("summary") or "").strip()
            description = " ".join(str(operation.get("description") or "").split())
            text = f"{method.upper()} {path}: {summary}. {description}".strip()
            passages.append(_passage("api", f"{method.upper()} {path}", text[:MAX_PASSAGE], seen))
    return passages


def documentation_passages() -> list[Passage]:
    return list(_passages_of(readme_text(), tuple(docs_pages())))


@functools.lru_cache(maxsize=2)
def _passages_of(readme: str, pages: tuple[tuple[str, str], ...]) -> tuple[Passage, ...]:
    # Split once per process for the same texts: every control application built in the process reads
    # the same pages, and splitting them is pure work on unchanged input.
    split = [passage for name, text in pages for passage in split_passages(text, name)]
    return (*split_passages(readme), *split, *api_reference_passages())

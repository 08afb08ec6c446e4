"""Alt text from what can be known offline, as one short sentence (at most MAX_ALT characters).

Signals, strongest first: an SVG's own <title>, <desc> or aria-label (the author's words); text in
the image (the SVG's <text>, or Tesseract's reading of a raster); people (assetcdn/shared/faces.py); what
the file is (the category: logo, icon, banner; photo or graphic from its colour count; animated);
the subject words of its file name ("ferrari-488.jpg" -> "Ferrari 488"); its dominant colours and
orientation. `signals` lists those that contributed, so a caller can judge the sentence.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from assetcdn.control.ai.colours import colour_count, dominant_colours
from assetcdn.control.ai.image_input import AnalysisImage
from assetcdn.control.ai.ocr import OcrResult
from assetcdn.shared.faces import Face
from assetcdn.shared.manifest import ManifestEntry

MAX_ALT = 160
MAX_QUOTED = 60
PHOTO_COLOURS = 300        # distinct colours (5 bits per channel, 64x64 copy) above which it is a photo
CATEGORY_NOUNS = {"logos": "logo", "icons": "icon", "banners": "banner", "titles": "title card",
                  "github": "social preview image"}
# File-name words that say nothing about the subject (camera prefixes, sizes, versions).
NOISE = re.compile(r"^(img|image|dsc|dscn|dcim|pxl|photo|pic|picture|final|copy|new|edit|edited|export|"
                   r"v\d+|\d+x\d*|@\d+x|x\d+|\d{5,}|[0-9a-f]{12,})$", re.IGNORECASE)
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class AltText:
    alt: str
    signals: tuple[str, ...]


def subject_words(cdn_path: str) -> str:
    """The words of a file name that name its subject: 'red-ferrari_488@2x.jpg' -> 'red ferrari 488'."""
    stem = posixpath.splitext(posixpath.basename(cdn_path))[0]
    stem = re.sub(r"([a-z])([A-Z])", r"\1 \2", stem)
    words = [w for w in re.split(r"[\s_\-.+,()~=@]+", stem) if w and not NOISE.match(w)]
    return " ".join(words)


def _people(faces: list[Face]) -> str:
    if not faces:
        return ""
    if len(faces) == 1:
        return "one person"
    return f"{NUMBERS[len(faces)]} people" if len(faces) in NUMBERS else "a group of people"


def _orientation(width: int, height: int) -> str:
    ratio = width / max(height, 1)
    return "wide" if ratio >= 2 else "landscape" if ratio > 1.2 else "portrait" if ratio < 0.83 else "square"


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_QUOTED:
        text = text[:MAX_QUOTED].rsplit(" ", 1)[0] + "…"
    return f"“{text}”"


def _fit(parts: list[str]) -> str:
    """Join sentence parts, dropping optional trailing parts until the sentence fits MAX_ALT."""
    while True:
        sentence = "".join(parts).strip()
        sentence = sentence[0].upper() + sentence[1:] if sentence else sentence
        if not sentence.endswith((".", "!", "?", "…")):
            sentence += "."
        if len(sentence) <= MAX_ALT or len(parts) == 1:
            return sentence if len(sentence) <= MAX_ALT else sentence[:MAX_ALT - 1].rsplit(" ", 1)[0] + "…"
        parts = parts[:-1]


def _from_svg(source: AnalysisImage) -> AltText | None:
    svg = source.svg
    if svg is None or not (svg.title or svg.label or svg.desc):
        return None
    head = svg.title or svg.label or svg.desc
    parts = [head]
    if svg.desc and svg.desc != head:
        parts.append(f": {svg.desc}")
    return AltText(_fit(parts), ("svg-title",) if svg.title or svg.label else ("svg-desc",))


def describe(source: AnalysisImage, entry: ManifestEntry, faces: list[Face], ocr: OcrResult | None) -> AltText:
    found = _from_svg(source)
    if found is not None:
        return found
    signals: list[str] = []
    pixels = source.pixels
    subject = subject_words(entry.path)
    noun = CATEGORY_NOUNS.get(entry.category)
    if noun is not None:
        signals.append("category")
    if noun is None:
        noun = "photo" if source.format != "svg" and colour_count(pixels) > PHOTO_COLOURS else "graphic"
    if source.pages > 1:
        noun = f"animated {noun}"
    if entry.category == "logos" and not subject:
        subject = entry.zone
    if subject:
        signals.append("file-name")
        head = f"{subject} {noun}" if entry.category in CATEGORY_NOUNS else f"{subject}, a {_orientation(source.width, source.height)} {noun}"
    else:
        head = f"{_orientation(source.width, source.height)} {noun}"
    parts = [head]
    people = _people(faces)
    if people:
        signals.append("faces")
        parts.append(f" of {people}")
    text = ""
    if source.svg is not None and source.svg.text:
        text, signal = source.svg.text, "svg-text"
    elif ocr is not None and ocr.words:
        text, signal = ocr.text, "ocr"
    if text and text.lower() != subject.lower():
        signals.append(signal)
        parts.append(f" with the text {_quoted(text)}")
    colours = dominant_colours(pixels)
    if colours:
        signals.append("colours")
        parts.append(f", mostly {' and '.join(colours)}")
    return AltText(_fit(parts), tuple(signals))

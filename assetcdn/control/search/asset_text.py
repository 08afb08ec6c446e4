"""The text an asset is embedded as: its name, path words, zone, category and format (plus alt text
when one is known), phrased as a short description, which the sentence model matches better than a
bare path ("ferrari 488 — banner image (jpg) of autoworld")."""

from __future__ import annotations

import hashlib
import posixpath
import re

from assetcdn.shared.manifest import ManifestEntry

# Bump when the recipe changes: every stored vector is then re-embedded on the next start.
RECIPE_VERSION = 1
WORDS = re.compile(r"[a-z0-9]+")
# What a zone's standard sub-directories hold, in the words people search with.
CATEGORY_PHRASES = {"banners": "banner image", "logos": "logo", "icons": "app icon", "github": "social card",
                    "titles": "title card", "photos": "photo"}


PRIVATE_CATEGORY = "private"


def searchable(entry: ManifestEntry) -> bool:
    """Public search and chat never show the `private` category: those assets are served only through
    signed URLs (assetcdn/edge/access.py), and even their names stay out of public answers."""
    return entry.category != PRIVATE_CATEGORY


def words(text: str) -> str:
    return " ".join(WORDS.findall(text.lower()))


def describe(entry: ManifestEntry, alt_text: str | None = None) -> str:
    stem = words(posixpath.splitext(entry.name)[0]) or words(entry.name)
    parts = entry.path.split("/")
    # Folders between the category and the file (e.g. banners/summer/hero.jpg): path words too.
    skip = 3 if len(parts) >= 4 and parts[1] == "v1" else 2
    folders = words(" ".join(parts[skip:-1]))
    category = CATEGORY_PHRASES.get(entry.category, words(entry.category) or "file")
    text = f"{stem} ({folders})" if folders else stem
    text = f"{text} — {category} ({entry.format or 'no extension'}) of {words(entry.zone) or entry.zone}"
    if alt_text:
        text = f"{alt_text.strip()[:300]}. {text}"
    return text


def text_key(model_id: str, text: str) -> str:
    """Identifies a stored vector: the model, the recipe and the text it was made from."""
    return hashlib.sha256(f"{model_id}\n{RECIPE_VERSION}\n{text}".encode()).hexdigest()[:32]

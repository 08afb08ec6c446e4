"""The manifest: what every file of a generation is, as both control and edges see it."""

from __future__ import annotations

import mimetypes
import posixpath
from dataclasses import asdict, dataclass
from typing import Any

from assetcdn.shared.paths import STOCK_ROOT

CONTENT_TYPES = {
    "svg": "image/svg+xml", "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg",
    "webp": "image/webp", "avif": "image/avif", "avifs": "image/avif", "gif": "image/gif",
    "apng": "image/apng", "jxl": "image/jxl", "heic": "image/heic", "heif": "image/heif",
    "ico": "image/x-icon", "bmp": "image/bmp", "tif": "image/tiff", "tiff": "image/tiff",
    "mp4": "video/mp4", "webm": "video/webm", "mov": "video/quicktime", "ts": "video/mp2t",
    "m3u8": "application/vnd.apple.mpegurl", "json": "application/json", "txt": "text/plain; charset=utf-8",
    "css": "text/css; charset=utf-8", "js": "text/javascript; charset=utf-8", "html": "text/html; charset=utf-8",
    "woff": "font/woff", "woff2": "font/woff2", "pdf": "application/pdf",
}


def format_of(name: str) -> str:
    ext = posixpath.splitext(name)[1]
    return ext[1:].lower() if ext else ""


def content_type_of(name: str) -> str:
    fmt = format_of(name)
    if fmt in CONTENT_TYPES:
        return CONTENT_TYPES[fmt]
    guessed, _ = mimetypes.guess_type(name)
    return guessed or "application/octet-stream"


def classify(cdn_path: str) -> tuple[str, str]:
    """(zone, category) of a CDN path. Zone files: ``<zone>/v1/<category>/...``; stock files: ``stocks/<category>/...``."""
    parts = cdn_path.split("/")
    if parts[0] == STOCK_ROOT:
        return STOCK_ROOT, parts[1] if len(parts) > 2 else ""
    if len(parts) >= 4 and parts[1] == "v1":
        return parts[0], parts[2]
    return parts[0], ""


def zone_tag(zone: str) -> str:
    """The cache tag on everything an edge keeps of a zone (its files, a pull zone's responses): deleting the
    zone purges it."""
    return f"project-{zone}"


def cache_tags(zone: str, category: str, fmt: str) -> tuple[str, ...]:
    tags = [zone_tag(zone)]
    if category:
        tags.append(f"type-{category}")
    if fmt:
        tags.append(f"format-{fmt}")
    tags.append("all-assets")
    return tuple(tags)


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    path: str           # CDN path, e.g. "akande/v1/logos/logo.svg"
    zone: str
    category: str
    name: str
    format: str
    size: int
    sha256: str
    blob_id: str        # git blob id: the content id edges fetch by
    content_type: str
    tags: tuple[str, ...]
    modified: str       # ISO time of the commit that last changed the file

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> ManifestEntry:
        return ManifestEntry(**{**data, "tags": tuple(data["tags"])})


def make_entry(cdn_path: str, size: int, sha256: str, blob_id: str, modified: str) -> ManifestEntry:
    zone, category = classify(cdn_path)
    name = posixpath.basename(cdn_path)
    fmt = format_of(name)
    return ManifestEntry(path=cdn_path, zone=zone, category=category, name=name, format=fmt, size=size,
                         sha256=sha256, blob_id=blob_id, content_type=content_type_of(name),
                         tags=cache_tags(zone, category, fmt), modified=modified)


@dataclass(frozen=True, slots=True)
class ManifestChange:
    """One path's change in a generation: ``entry`` is None when the path was deleted."""

    path: str
    entry: ManifestEntry | None
    previous_tags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "entry": self.entry.to_json() if self.entry else None,
                "previous_tags": list(self.previous_tags)}

    @staticmethod
    def from_json(data: dict[str, Any]) -> ManifestChange:
        entry = ManifestEntry.from_json(data["entry"]) if data.get("entry") else None
        return ManifestChange(path=data["path"], entry=entry, previous_tags=tuple(data.get("previous_tags", ())))


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"

"""Cache tags of what the edge stores for a source path: its public tags (`Cache-Tag`, purge by
tag) plus an internal path tag (purge by URL, overwrite and delete of that path)."""

from __future__ import annotations

from collections.abc import Iterable

from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.purge_targets import normal_path


def path_tag(cdn_path: str) -> str:
    """Internal tag on everything cached from one source path (the asset and all its variants)."""
    return f"path:{cdn_path}"


PATH_TAG_PREFIX = path_tag("")  # what every path tag starts with (prefix purges name only these)


def path_tag_zone(tag: str) -> str | None:
    """The zone a path tag's path begins with; None for another tag."""
    return tag[len(PATH_TAG_PREFIX):].split("/", 1)[0] if tag.startswith(PATH_TAG_PREFIX) else None


def pull_path_tag(zone: str, path: str) -> str:
    """A pull zone's path tag: its path (from `/`, percent-encoded) in one spelling of its escapes, so that a
    purge names it however either spelt it (assetcdn/shared/purge_targets.py)."""
    return path_tag(f"{zone}{normal_path(path)}")
def pull_variants_tag(url_key: str) -> str:
    """Internal tag on every variant of a pull zone's image (`url_key`: its URL's key), retired together
    when the origin's image changes."""
    return f"variants:{url_key}"


def source_tags(entry: ManifestEntry) -> tuple[str, ...]:
    """Tags of everything cached from one source: its public cache tags plus its path tag."""
    return (*entry.tags, path_tag(entry.path))


def public_tags(tags: Iterable[str]) -> list[str]:
    return [t for t in tags if ":" not in t]

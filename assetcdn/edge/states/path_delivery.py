"""The per-path half of a delivery: everything a response takes from its path, computed once per
manifest entry.

Two paths may hold the same bytes (one blob id); they still differ in Content-Type, Cache-Tag,
category and everything else derived from the path. So the cache keys an asset by path *and*
content (an overwrite changes the key; a purge of one path leaves the other's entry alone) and
stores it with that path's tags, and the response head comes from the manifest entry, never
from whatever another path stored with the body. The replica keeps one ``PathDelivery`` per entry
(assetcdn/edge/replica.py), so a hit builds no headers of its own beyond the request-dependent ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.cache.tags import public_tags, source_tags
from assetcdn.edge.states.keys import asset_key
from assetcdn.shared.content_security import security_headers
from assetcdn.shared.cors import FILE_READ
from assetcdn.shared.manifest import ManifestEntry

# What the edge's answers on a stored file's own CDN path add (assetcdn/edge/routes/delivery.py), its errors too: the
# file is public, so any origin may read it. Not in `PathDelivery.headers`, which other routes deliver the file with
# (/api/signed's private answers). The hit path's prepared heads hold it (assetcdn/edge/fastpath/prepared.py).
ASSET_HEADERS = FILE_READ


@dataclass(frozen=True, slots=True)
class PathDelivery:
    entry: ManifestEntry
    key: str                                # the asset's cache key (assetcdn/edge/states/keys.py)
    tags: tuple[str, ...]                   # stored with every cache entry made from this path
    content_type: str
    etag: str
    headers: tuple[tuple[str, str], ...]    # Content-Type, ETag, Cache-Tag, nosniff, CSP if active


def path_delivery(entry: ManifestEntry) -> PathDelivery:
    etag = strong_etag(entry.sha256)
    headers = [("Content-Type", entry.content_type), ("ETag", etag)]
    shown = public_tags(entry.tags)
    if shown:
        headers.append(("Cache-Tag", ",".join(shown)))
    headers.extend(security_headers(entry.content_type))
    return PathDelivery(entry=entry, key=asset_key(entry), tags=source_tags(entry),
                        content_type=entry.content_type, etag=etag, headers=tuple(headers))

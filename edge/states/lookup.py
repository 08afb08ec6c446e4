"""look up: the cache key of what a response depends on, and the one place hit or miss is decided."""

from __future__ import annotations

from edge.cache.entry import CachedObject
from edge.node import EdgeNode
from shared.manifest import ManifestEntry


def asset_key(entry: ManifestEntry) -> str:
    # Content-addressed: an overwrite changes the blob id and so the key.
    return f"asset:{entry.blob_id}"


def lookup(node: EdgeNode, key: str) -> CachedObject | None:
    try:
        return node.cache.get(key)
    except FileNotFoundError:
        return None  # evicted between index read and open: a miss

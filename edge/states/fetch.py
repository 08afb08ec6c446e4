"""miss -> fetch: bytes come from control by content id, once per key however many requests wait."""

from __future__ import annotations

import asyncio
import hashlib
import time

from edge.cache.entry import CachedObject, strong_etag
from edge.control_client import ControlUnavailable, NotFoundAtControl
from edge.node import EdgeNode, source_tags
from edge.states.lookup import asset_key, lookup
from shared.manifest import ManifestEntry

HASH_INLINE_MAX = 256 * 1024  # below this an executor hop costs more than the hash


class OriginUnavailable(Exception):
    """Control could not deliver the content (down, or it no longer has the blob)."""


async def fetch_source(node: EdgeNode, entry: ManifestEntry) -> bytes:
    """The verified bytes of a manifest entry, straight from control."""
    started = time.perf_counter()
    try:
        data = await node.control.fetch_blob(entry.blob_id)
    except (ControlUnavailable, NotFoundAtControl) as exc:
        raise OriginUnavailable(str(exc)) from exc
    finally:
        node.metrics.origin_fetch_seconds.labels("asset").observe(time.perf_counter() - started)
    if len(data) <= HASH_INLINE_MAX:
        digest = hashlib.sha256(data).hexdigest()
    else:  # large blobs (videos) are hashed off the event loop; hashlib releases the GIL
        digest = (await asyncio.get_running_loop().run_in_executor(None, hashlib.sha256, data)).hexdigest()
    if digest != entry.sha256:
        raise OriginUnavailable(f"content of {entry.path} does not match its manifest hash")
    return data


async def fetch_asset(node: EdgeNode, entry: ManifestEntry) -> CachedObject:
    key = asset_key(entry)

    async def fill() -> CachedObject:
        cached = lookup(node, key)  # another waiter may have filled it meanwhile
        if cached is not None:
            return cached
        data = await fetch_source(node, entry)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: node.cache.put(key, data, entry.content_type, strong_etag(entry.sha256),
                                         source_tags(entry)))

    return await node.flight.run(key, fill)


async def source_bytes(node: EdgeNode, entry: ManifestEntry) -> bytes:
    """The whole body of a source asset (for transforms), from the cache or control."""
    obj = lookup(node, asset_key(entry)) or await fetch_asset(node, entry)
    if obj.body is not None:
        return obj.body
    return await asyncio.get_running_loop().run_in_executor(None, lambda: obj.read_range(0, obj.size))


async def cached_asset(node: EdgeNode, entry: ManifestEntry) -> tuple[CachedObject, str]:
    """The asset's cache entry and its X-Cache status: HIT, STALE (cached, but control unreachable so we
    cannot confirm it is current) or MISS (fetched now). Counted in the cache metric."""
    obj = lookup(node, asset_key(entry))
    if obj is None:
        obj, status = await fetch_asset(node, entry), "MISS"
    else:
        status = "HIT" if node.control_reachable() else "STALE"
    node.metrics.cache_result(status).inc()
    return obj, status

"""miss -> fetch: bytes come from control by content id, once per key however many requests wait.

The cache entry is the path's (key and tags from its delivery head, edge/states/head.py): two
paths with the same bytes each fetch and keep their own, so a purge of one leaves the other.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from edge.cache.entry import CachedObject
from edge.control_client import ControlUnavailable, NotFoundAtControl
from edge.node import EdgeNode
from edge.states.head import EntryHead
from edge.states.lookup import lookup
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
    head = node.replica.head(entry)
    key = head.key

    async def fill() -> CachedObject:
        cached = lookup(node, key)  # another waiter may have filled it meanwhile
        if cached is not None:
            return cached
        data = await fetch_source(node, entry)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: node.cache.put(key, data, head.content_type, head.etag, head.tags))

    return await node.flight.run(key, fill)


async def source_bytes(node: EdgeNode, entry: ManifestEntry) -> bytes:
    """The whole body of a source asset (for transforms), from the cache or control."""
    obj = lookup(node, node.replica.head(entry).key) or await fetch_asset(node, entry)
    if obj.body is not None:
        return obj.body
    return await asyncio.get_running_loop().run_in_executor(None, lambda: obj.read_range(0, obj.size))


async def cached_asset(node: EdgeNode, entry: ManifestEntry) -> tuple[CachedObject, str, EntryHead]:
    """The asset's cache entry, its X-Cache status (HIT, STALE: cached, but control unreachable so we
    cannot confirm it is current, within the stale-if-error bound of `EdgeNode.hit_status`; MISS:
    fetched now) and the path's delivery head. Counted in the cache metric."""
    head = node.replica.head(entry)
    obj = lookup(node, head.key)
    if obj is None:
        obj, status = await fetch_asset(node, entry), "MISS"
    else:
        hit = node.hit_status()
        if hit is None:  # control unreachable for longer than the stale-if-error bound
            raise OriginUnavailable(f"{entry.path}: cached, but control has been unreachable too long")
        status = hit
    node.metrics.cache_result(status).inc()
    return obj, status, head

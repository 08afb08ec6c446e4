"""miss -> fetch: bytes come from control by content id, once per key however many requests wait."""

from __future__ import annotations

import asyncio
import hashlib
import time

from edge.cache.entry import CachedObject, strong_etag
from edge.control_client import ControlUnavailable, NotFoundAtControl
from edge.node import EdgeNode, path_tag
from edge.states.lookup import asset_key, lookup
from shared.manifest import ManifestEntry


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
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise OriginUnavailable(f"content of {entry.path} does not match its manifest hash")
    return data


async def fetch_asset(node: EdgeNode, entry: ManifestEntry) -> CachedObject:
    key = asset_key(entry)

    async def fill() -> CachedObject:
        cached = lookup(node, key)  # another waiter may have filled it meanwhile
        if cached is not None:
            return cached
        data = await fetch_source(node, entry)
        tags = (*entry.tags, path_tag(entry.path))
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: node.cache.put(key, data, entry.content_type, strong_etag(entry.sha256), tags))

    return await node.flight.run(key, fill)


async def source_bytes(node: EdgeNode, entry: ManifestEntry) -> bytes:
    """The whole body of a source asset (for transforms), from the cache or control."""
    obj = lookup(node, asset_key(entry)) or await fetch_asset(node, entry)
    if obj.body is not None:
        return obj.body
    return await asyncio.get_running_loop().run_in_executor(None, lambda: obj.read_range(0, obj.size))

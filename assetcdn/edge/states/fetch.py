"""miss -> fetch: bytes come from control by content id, once per key however many requests wait.

The cache entry is the path's (key from assetcdn/edge/states/keys.py, tags from its path delivery, assetcdn/edge/states/path_delivery.py): two
paths with the same bytes each fetch and keep their own, so a purge of one leaves the other.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import ClassVar

from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.control_client import ControlUnavailable, NotFoundAtControl
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.states.lookup import lookup
from assetcdn.shared.manifest import ManifestEntry

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


async def store_asset(node: EdgeNode, entry: ManifestEntry) -> CachedObject:
    """Fetch a path's bytes from control and keep them under its key, with its tags (not coalesced:
    callers run it inside ``node.flight``)."""
    head = node.replica.head(entry)
    data = await fetch_source(node, entry)
    stored: CachedObject = await asyncio.get_running_loop().run_in_executor(
        None, lambda: node.cache.put(head.key, data, head.content_type, head.etag, head.tags))
    return stored


async def fetch_asset(node: EdgeNode, entry: ManifestEntry) -> CachedObject:
    """A path's cache entry, fetched once however many callers wait (the source of a variant)."""
    key = node.replica.head(entry).key

    async def fill() -> CachedObject:
        return lookup(node, key) or await store_asset(node, entry)  # another waiter may have filled it

    fetched: CachedObject = await node.flight.run(key, fill)
    return fetched


async def source_bytes(node: EdgeNode, entry: ManifestEntry) -> bytes:
    """The whole body of a source asset (for transforms, an HLS index), from the cache or control."""
    obj = lookup(node, node.replica.head(entry).key) or await fetch_asset(node, entry)
    if obj.body is not None:
        return obj.body
    return await asyncio.get_running_loop().run_in_executor(None, lambda: obj.read_range(0, obj.size))


class AsIs:
    """The path's own file, the representation of a plain delivery (assetcdn/edge/states/serve.py): delivered
    with the path's head, fetched from control on a miss."""

    own_file: ClassVar[bool] = True

    def key(self, node: EdgeNode, entry: ManifestEntry) -> str:
        return node.replica.head(entry).key

    def usable(self, obj: CachedObject) -> bool:
        return True

    def failed(self, key: str) -> Exception | None:
        return None

    async def make(self, node: EdgeNode, entry: ManifestEntry, key: str) -> CachedObject:
        return await store_asset(node, entry)


AS_IS = AsIs()

"""miss -> make a variant: a transform, a format conversion or a placeholder of one source.

Variants are keyed by the source's content id (an overwrite changes the key) and its path,
and stored with the path's cache tags plus its internal path tag, so purging the source by
URL, by tag or by overwriting it removes every variant too, and only that path's (another
path with the same bytes keeps its own, edge/states/head.py). Concurrent misses for one key make the
variant once (`node.flight`); the work runs in the image pool's worker processes. A variant
that failed is answered from the pool's negative cache for a while, without running again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from edge.cache.entry import CachedObject, strong_etag
from edge.image_pool import ImagePool, JobFailed
from edge.node import EdgeNode
from edge.states.fetch import source_bytes
from edge.states.head import variant_key
from edge.states.lookup import lookup
from shared.errors import LegacyError
from shared.manifest import ManifestEntry


@dataclass(frozen=True, slots=True)
class Variant:
    body: bytes
    content_type: str


def _fresh(obj: CachedObject | None, max_age_s: float | None) -> CachedObject | None:
    # The edge cache has no TTL of its own: entries with a lifetime (placeholders: 24 h) check it here.
    if obj is None or max_age_s is None or time.time() - obj.stored_at < max_age_s:
        return obj
    return None


async def cached_variant(node: EdgeNode, pool: ImagePool, entry: ManifestEntry, key: str,
                         make: Callable[[bytes], Variant], *, metric_format: str,
                         before_make: Callable[[], Awaitable[None]] | None = None,
                         refund: Callable[[], Awaitable[None]] | None = None,
                         max_age_s: float | None = None) -> tuple[CachedObject, str]:
    """(entry, "HIT" or "MISS") of the variant under `key`, made from the source's bytes on a miss.

    `before_make` runs once per miss that is really made (never on a hit, never per waiter of
    a coalesced miss): the transform quota. It raises to refuse; `refund` undoes it when the
    variant could not be made. `make(source)` runs in a pool worker: a module-level function
    (edge/transform/jobs.py). OriginUnavailable (source bytes unreachable) and the pipeline's
    LegacyErrors propagate; errors carry X-Cache MISS, or HIT when remembered from a failure.
    `key` names the variant of the source's content; it is scoped to the source's path here.
    """
    key = variant_key(entry, key)
    tags = node.replica.head(entry).tags
    obj = _fresh(lookup(node, key), max_age_s)
    if obj is not None:
        node.metrics.cache_result("HIT").inc()
        return obj, "HIT"
    failed = pool.failed.get(key)
    if failed is not None:
        failed.headers["X-Cache"] = "HIT"
        raise failed

    async def fill() -> CachedObject:
        cached = _fresh(lookup(node, key), max_age_s)  # a waiter before us may have filled it
        if cached is not None:
            return cached
        source = await source_bytes(node, entry)
        if before_make is not None:
            await before_make()
        try:
            variant = await pool.run(make, source)
        except Exception as exc:
            if refund is not None:
                await refund()
            if isinstance(exc, JobFailed):
                pool.failed.remember(key, exc)
            if isinstance(exc, LegacyError):
                exc.headers["X-Cache"] = "MISS"
            raise
        node.metrics.transforms.labels(metric_format).inc()
        etag = strong_etag(hashlib.sha256(variant.body).hexdigest())
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: node.cache.put(key, variant.body, variant.content_type, etag, tags))

    node.metrics.cache_result("MISS").inc()
    return await node.flight.run(key, fill), "MISS"

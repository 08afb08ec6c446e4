"""miss -> make a variant: a transform, a format conversion or a placeholder of one source, a
byte range of it (an HLS segment) or a text built from it (an HLS playlist).

Variants are keyed by the source's content id (an overwrite changes the key) and its path,
and stored with the path's cache tags plus its internal path tag, so purging the source by
URL, by tag or by overwriting it removes every variant too, and only that path's (another
path with the same bytes keeps its own, assetcdn/edge/states/keys.py). Concurrent misses for one key
make the variant once (`node.flight`, assetcdn/edge/states/serve.py); image work runs in the image
pool's worker processes. A variant that failed is answered from the pool's negative cache for
a while, without running again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from assetcdn.edge.cache.entry import CachedObject, strong_etag
from assetcdn.edge.cache.store import PurgedMeanwhile
from assetcdn.edge.image_pool import ImagePool, JobFailed, PoolBusy
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.states.fetch import OriginUnavailable, fetch_asset, source_bytes
from assetcdn.edge.states.keys import variant_key
from assetcdn.edge.transform.jobs import Variant
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.manifest import ManifestEntry


@dataclass(frozen=True, slots=True)
class Made:
    """A variant made in the image pool from the source's bytes: a transform, a format conversion or
    a placeholder (a representation, assetcdn/edge/states/serve.py).

    `before_make` runs once per miss that is really made (never on a hit, never per waiter of a
    coalesced miss): the transform quota. It raises to refuse; `refund(refused)` undoes it when the variant
    could not be made, `refused` when the pool refused the job before running it (PoolBusy). `job(source)` runs in a pool worker: a module-level function
    (assetcdn/edge/transform/jobs.py). OriginUnavailable (source bytes unreachable) and the pipeline's
    LegacyErrors propagate; errors carry X-Cache MISS, or HIT when remembered from a failure.
    """

    pool: ImagePool
    content_key: str                    # names the variant of the source's content; scoped to its path here
    job: Callable[[bytes], Variant]
    metric_format: str
    before_make: Callable[[], Awaitable[None]] | None = None
    refund: Callable[[bool], Awaitable[None]] | None = None
    max_age_s: float | None = None      # the edge cache has no TTL of its own: placeholders keep 24 h
    own_file: ClassVar[bool] = False

    def key(self, node: EdgeNode, entry: ManifestEntry) -> str:
        return variant_key(entry, self.content_key)

    def usable(self, obj: CachedObject) -> bool:
        return self.max_age_s is None or time.time() - obj.stored_at < self.max_age_s

    def failed(self, key: str) -> Exception | None:
        failed = self.pool.failed.get(key)
        if failed is not None:
            failed.headers["X-Cache"] = "HIT"
        return failed

    async def make(self, node: EdgeNode, entry: ManifestEntry, key: str) -> CachedObject:
        source = await source_bytes(node, entry)
        return await self.make_from(node, key, source, entry.blob_id, node.replica.head(entry).tags)

    async def make_from(self, node: EdgeNode, key: str, source: bytes, source_id: str,
                        tags: Iterable[str], *, keep: bool = True, since: int | None = None,
                        since_tags: Iterable[str] | None = None, failure_key: str | None = None) -> CachedObject:
        """Make the variant of `source` (named `source_id`) and keep it under `key` with `tags`: a stored
        zone's file (`make`) or a pull zone's image (assetcdn/edge/states/pull_variant.py). `keep=False`: an
        entry for this answer only, not stored; likewise when a purge published since the purge mark `since`
        (taken before the source was looked up) names it by its key or `since_tags` (default: `tags`): made from
        bytes that purge retired. A failure is remembered under `failure_key` (default: `key`)."""
        if self.before_make is not None:
            await self.before_make()
        try:
            # Affinity by content id: the worker that made this source's other variants holds its decode.
            variant = await self.pool.run(self.job, source, affinity=source_id)
        except Exception as exc:
            if self.refund is not None:
                await self.refund(isinstance(exc, PoolBusy))
            if isinstance(exc, JobFailed):
                self.pool.failed.remember(key if failure_key is None else failure_key, exc)
            if isinstance(exc, LegacyError):
                exc.headers["X-Cache"] = "MISS"
            raise
        node.metrics.transforms.labels(self.metric_format).inc()
        etag = strong_etag(hashlib.sha256(variant.body).hexdigest())
        answered = CachedObject(key, variant.content_type, etag, tuple(tags), len(variant.body), time.time(),
                                body=variant.body)
        if not keep:
            return answered
        try:
            return await asyncio.get_running_loop().run_in_executor(
                None, lambda: node.cache.put(key, variant.body, variant.content_type, etag, tags, since=since,
                                             since_tags=since_tags))
        except PurgedMeanwhile:
            return answered


class CutFromSource:
    """What a representation cut or built in process from its source shares: its key names the source and
    `content_key`, any cached copy is usable, and no failure is remembered (nothing costly to retry)."""

    __slots__ = ()
    content_key: str

    def key(self, node: EdgeNode, entry: ManifestEntry) -> str:
        return variant_key(entry, self.content_key)

    def usable(self, obj: CachedObject) -> bool:
        return True

    def failed(self, key: str) -> Exception | None:
        return None


@dataclass(frozen=True, slots=True)
class ByteRange(CutFromSource):
    """Bytes ``[start, start + length)`` of the source file, cached on their own: an HLS segment of a
    rendition (assetcdn/edge/routes/stream.py). The file is fetched once and cached like any asset."""

    content_key: str
    start: int
    length: int
    content_type: str
    etag: str
    own_file: ClassVar[bool] = False

    async def make(self, node: EdgeNode, entry: ManifestEntry, key: str) -> CachedObject:
        whole = await fetch_asset(node, entry)
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(None, whole.read_range, self.start, self.start + self.length)
        if len(data) != self.length:
            raise OriginUnavailable(f"{entry.path} is shorter than its index says")
        tags = node.replica.head(entry).tags
        return await loop.run_in_executor(
            None, lambda: node.cache.put(key, data, self.content_type, self.etag, tags))


@dataclass(frozen=True, slots=True)
class Built(CutFromSource):
    """A small text made in process from the source's bytes and cached on its own: an HLS playlist built
    from the video's index (assetcdn/edge/routes/stream.py). The source is fetched once and cached like
    any asset; an index overwritten changes the source's content id, so the key, so the playlist."""

    content_key: str
    build: Callable[[bytes], bytes]     # raises the route's LegacyError when the source does not have it
    content_type: str
    own_file: ClassVar[bool] = False

    async def make(self, node: EdgeNode, entry: ManifestEntry, key: str) -> CachedObject:
        body = self.build(await source_bytes(node, entry))
        etag = strong_etag(hashlib.sha256(body).hexdigest())
        tags = node.replica.head(entry).tags
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: node.cache.put(key, body, self.content_type, etag, tags))

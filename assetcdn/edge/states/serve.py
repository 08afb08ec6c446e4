"""The serve sequence: the one walk every delivery route's request takes through the request states.

    find the source (assetcdn/edge/access.py)
    -> look up (lookup.py): HIT, STALE (cached, control unreachable) or MISS
    -> on a MISS, fetch (fetch.py) or make (variant.py), once per key however many requests wait
    -> deliver (deliver.py), again from the top once if the cached body vanished meanwhile

A route receives (parses its request, assetcdn/edge/states/recv.py) and says only what differs:

- the source: the manifest entry it reads (`source_for`; assetcdn/edge/access.py says which it may read);
- the representation served from it: the file as is (`fetch.AS_IS`), a variant made in the image
  pool (`variant.Made`) or a byte range of it (`variant.ByteRange`);
- its `ServePolicy`: Cache-Control, the headers it adds, its `Refusals` (the words and the
  envelope of each way the sequence can say no) and, for a route whose answer is built from the
  cached body rather than being it (the placeholders' JSON), how (`answer`).

So hit / stale / miss accounting, stale-if-error, coalescing, the retry and the bytes-served count
live here only. The hit path (assetcdn/edge/fastpath/) answers the commonest HIT before any of this runs, with
the headers `deliver.final_headers` gives it and the same counts; a hit it cannot answer (STALE,
416, a file gone) comes here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from assetcdn.edge.access import SourceRefused, find_source
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.states.deliver import deliver, final_headers, request_header_changes
from assetcdn.edge.states.fetch import OriginUnavailable
from assetcdn.edge.states.lookup import lookup
from assetcdn.edge.states.path_delivery import PathDelivery
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.manifest import ManifestEntry

DELIVERY_ATTEMPTS = 2  # a second pass only when the cached body was purged or evicted during delivery


class Representation(Protocol):
    """What is served from a source entry (fetch.AsIs, variant.Made, variant.ByteRange)."""

    @property
    def own_file(self) -> bool:
        """The path's own bytes: delivered with the path's delivery headers (assetcdn/edge/states/path_delivery.py)."""
        ...

    def key(self, node: EdgeNode, entry: ManifestEntry) -> str:
        """The cache key: what the response depends on (built in assetcdn/edge/states/keys.py)."""
        ...

    def usable(self, obj: CachedObject) -> bool:
        """Whether a cached entry may still answer (a placeholder keeps 24 h)."""
        ...

    def failed(self, key: str) -> Exception | None:
        """A failure remembered for this key (answered without trying again), if any."""
        ...

    async def make(self, node: EdgeNode, entry: ManifestEntry, key: str) -> CachedObject:
        """On a miss: fetch or make the body and store it under `key` (called once per coalesced miss)."""
        ...


@dataclass(frozen=True, slots=True)
class Refusals:
    """How a route says no, in its own envelope (assetcdn/shared/errors.py) and the words its contract uses."""

    source: Callable[[SourceRefused], Exception]        # unknown, private, another zone's, no manifest yet
    unreachable: Callable[[ManifestEntry], Exception]   # not cached (or stale too long) and control unreachable
    purged: Callable[[], Exception]                     # the body vanished during every delivery attempt


# The lifetime of an answer whose bytes never change under its URL (a variant keyed by its source's content).
IMMUTABLE = "public, max-age=31536000, immutable"


def origin_unreachable(entry: ManifestEntry) -> LegacyError:
    return LegacyError(503, f"The source '/{entry.path}' is not cached on this edge and the control plane "
                       "cannot be reached. Retry shortly.", headers={"Retry-After": "5"})


# /api/transform and /api/auto answer in the legacy envelope with the same words.
LEGACY_REFUSALS = Refusals(
    source=lambda exc: LegacyError(exc.status, exc.message, headers=exc.headers),
    unreachable=origin_unreachable,
    purged=lambda: LegacyError(503, "The variant was purged while it was being delivered. Retry."),
)


@dataclass(frozen=True, slots=True)
class ServePolicy:
    cache_control: str
    refusals: Refusals
    headers: Mapping[str, str] = field(default_factory=dict)   # added to every answer (Vary, CORS...)
    # Headers known only once the look-up is done (the transform quota left after a miss took one).
    late_headers: Callable[[], Awaitable[Mapping[str, str]]] | None = None
    # The answer built from the cached body and its X-Cache status, instead of the body itself (no ETag,
    # no ranges: the placeholders' JSON, a few KB). None: deliver the cached body.
    answer: Callable[[CachedObject, str], web.Response] | None = None


def source_for(node: EdgeNode, cdn_path: str, host_zone: str | None, refusals: Refusals, *,
               private_ok: bool = False) -> ManifestEntry:
    """The entry a route serves from (assetcdn/edge/access.py), or its refusal in the route's envelope."""
    try:
        return find_source(node, cdn_path, host_zone, private_ok=private_ok)
    except SourceRefused as exc:
        raise refusals.source(exc) from None


async def obtain(node: EdgeNode, entry: ManifestEntry, rep: Representation) -> tuple[CachedObject, str]:
    """The cache entry of `rep` of `entry` and its X-Cache status, counted in the cache metric:

    - HIT: cached, and control reachable (what is cached is current);
    - STALE: cached, control unreachable: served within the stale-if-error bound
      (`EdgeNode.hit_status`), past it OriginUnavailable, as for a miss;
    - MISS: made now, once per key however many requests wait (`node.flight`).
    """
    key = rep.key(node, entry)
    obj = lookup(node, key)
    if obj is not None and rep.usable(obj):
        status = node.hit_status()
        if status is None:
            raise OriginUnavailable(f"{entry.path}: cached, but control has been unreachable too long")
        node.metrics.cache_result(status).inc()
        return obj, status
    failure = rep.failed(key)
    if failure is not None:
        raise failure

    async def fill() -> CachedObject:
        cached = lookup(node, key)  # a waiter before us may have filled it
        if cached is not None and rep.usable(cached):
            return cached
        return await rep.make(node, entry, key)

    node.metrics.cache_result("MISS").inc()
    return await node.flight.run(key, fill), "MISS"


async def serve(request: web.Request, entry: ManifestEntry, rep: Representation,
                policy: ServePolicy) -> web.StreamResponse:
    """Answer `request` with `rep` of `entry` under `policy`: look up, fetch or make on a miss, deliver."""
    node = request.app[NODE]
    refusals = policy.refusals
    head = node.replica.head(entry) if rep.own_file else None
    for _attempt in range(DELIVERY_ATTEMPTS):
        try:
            obj, status = await obtain(node, entry, rep)
            return await respond(request, obj, status, policy, head=head, tags=entry.tags)
        except OriginUnavailable:
            raise refusals.unreachable(entry) from None
        except FileNotFoundError:
            # A cache file purged or evicted between its look-up and its opening (the body, or the source
            # of a variant): look up again, which now misses and fetches.
            continue
    raise refusals.purged()


async def respond(request: web.Request, obj: CachedObject, status: str, policy: ServePolicy, *,
                  head: PathDelivery | None = None, tags: tuple[str, ...] | None = None) -> web.StreamResponse:
    """Deliver a cache entry (or the policy's answer built from it) with X-Cache `status` (its body bytes count as
    served once its delivery is recorded, assetcdn/edge/delivery_log.py); `head` is the path's path delivery for its
    own file, `tags` a variant's source's tags. FileNotFoundError when the body went meanwhile."""
    extra: Mapping[str, str] = policy.headers
    if policy.late_headers is not None:
        extra = {**extra, **(await policy.late_headers())}
    if policy.answer is not None:
        answer = policy.answer(obj, status)
        answer.headers.update({"Cache-Control": policy.cache_control, "X-Cache": status, **extra})
        return answer
    headers = final_headers(obj, request_header_changes(request), cache_status=status,
                            cache_control=policy.cache_control, head=head, tags=tags, extra_headers=extra)
    return await deliver(request, obj, headers)

"""The serve sequence of a variant (transform, auto-format conversion, placeholder) of a pull zone's image:

    obtain the source by the pull sequence (assetcdn/edge/states/pull_source.py): fresh, revalidated or fetched
    -> look up the variant under the source URL's key and the source's validator (assetcdn/edge/states/keys.py)
    -> miss: made once per key however many requests wait (`node.flight`), in the image pool, from the
       source's bytes; the variants made from an older validator are retired first
    -> deliver (assetcdn/edge/states/serve.py `respond`), with the Cache-Control the route derives from the
       source's freshness (`pull_source.variant_cache_control`)

A variant is stored with its source's tags (the origin's, the URL's, the zone's) and its variants' own tag,
so a purge of the source by URL or tag, an unsafe request to it and a retirement all drop it. A source that
a purge named while it was fetched is not stored (assetcdn/edge/states/pull_source.py `keep`): its variant is
made for the request that fetched it and not stored either, nor is a variant whose source a purge named while it
was being made. Every check of freshness is the source's: a
variant is used exactly while its source may be, by the validator it was made from. Control takes no part: a
control outage changes nothing here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from assetcdn.edge.access import SourceRefused
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.auto_format import same_format
from assetcdn.edge.cache.entry import CachedObject, strong_etag
from assetcdn.edge.cache.store import SOFT_PURGED
from assetcdn.edge.cache.tags import pull_variants_tag
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.states.freshness import first_value
from assetcdn.edge.states.keys import pull_source_variant_key, pull_variants_made_key
from assetcdn.edge.states.lookup import lookup
from assetcdn.edge.states.pull_source import (
    PullSource,
    PullSourcePath,
    content_codings,
    obtain,
    stored_body,
)
from assetcdn.edge.states.serve import DELIVERY_ATTEMPTS, Refusals, ServePolicy, respond
from assetcdn.edge.states.variant import Made
from assetcdn.shared.manifest import zone_tag


@dataclass(frozen=True, slots=True)
class AsItIs:
    """The image's own bytes, sent as they are (/api/auto of an image already in the client's best format), once
    `check` found them to be `format` within the bounds its conversion has: made and kept as a variant is (once
    per validator, purged and retired with the image's variants, its failures remembered), its body the format
    the bytes hold (assetcdn/edge/transform/jobs.py `checked_as_is`). Bytes of another format than their label
    are answered by `otherwise` (their conversion); a refusal of the check is the conversion's."""

    check: Made
    format: str
    otherwise: tuple[Made, ServePolicy] | None

    @staticmethod
    def possible(source: PullSource) -> bool:
        """Whether the image's stored bytes are the image itself: not under a content coding (decoded for variants,
        stored as they came)."""
        return not content_codings(source.stored.headers)


# What a route makes of the source it got: the variant (or the image as it is), and the policy it is answered with.
Plan = Callable[[PullSource], tuple[Made | AsItIs, ServePolicy]]


async def serve_pull_variant(request: web.Request, at: PullSourcePath, refusals: Refusals,
                             plan: Plan) -> web.StreamResponse:
    """Answer `request` with the variant `plan` names of the pull zone image at `at`; the source's refusals
    (not found, too large, origin failed) in the route's envelope (`refusals.source`)."""
    node = request.app[NODE]
    for _attempt in range(DELIVERY_ATTEMPTS):
        # Taken before the source is looked up: a purge of it published while its variant is made (the image as
        # it was, which the purge retires) leaves that variant unkept.
        mark = node.cache.purge_mark()
        try:
            source = await obtain(request, at)
        except SourceRefused as exc:
            raise refusals.source(exc) from None
        variant, policy = plan(source)
        try:
            if isinstance(variant, AsItIs):
                checked, status = await variant_of(node, source, variant.check, mark)
                if same_format(variant.format, (await stored_body(checked)).decode()):
                    return await respond(request, as_it_is(source, policy), status, policy, tags=source.shown_tags)
                if variant.otherwise is None:
                    raise refusals.source(SourceRefused(404, "AssetNotFound", f"No format of '/{at.cdn_path}' "
                                                        "this client takes."))
                variant, policy = variant.otherwise
            obj, status = await variant_of(node, source, variant, mark)
            return await respond(request, obj, status, policy, tags=source.shown_tags)
        except FileNotFoundError:
            continue  # the source's body or the variant's went meanwhile (purged, evicted): from the top
        except SourceRefused as exc:  # its body read to make the variant: a coding that does not decode
            raise refusals.source(exc) from None
    raise refusals.purged()


async def variant_of(node: EdgeNode, source: PullSource, variant: Made,
                     since: int | None = None) -> tuple[CachedObject, str]:
    """The cache entry of `variant` of `source` and its X-Cache status (HIT, STALE: its source used stale, or MISS:
    made now); one made now
    is not kept when a purge published since the purge mark `since` names it (its source's URL, tags, zone)."""
    key = pull_source_variant_key(source.url_key, variant.content_key)
    failed_as = failure_key(key, since)
    if not source.kept:  # a purge named the source as it was fetched: what is made of it must not outlive that
        node.metrics.cache_result("MISS").inc()
        data = await source.data()
        return await variant.make_from(node, key, data, content_id(source), source.tags,
                                       keep=False, failure_key=failed_as), "MISS"
    obj = lookup(node, key)
    if obj is not None and answers(variant, obj, source):
        # Used while its source may be: STALE when that is stale, as a stored file's variant is without control.
        result = "STALE" if source.stale else "HIT"
        node.metrics.cache_result(result).inc()
        return obj, result
    failure = variant.failed(failed_as)
    if failure is not None:
        raise failure

    async def fill() -> CachedObject:
        cached = lookup(node, key)  # a waiter before us may have filled it
        if cached is not None and answers(variant, cached, source):
            return cached
        data = await source.data()
        await asyncio.get_running_loop().run_in_executor(None, retire_older_variants, node, source)
        # A purge since `since` that names the source leaves this variant unkept; the retirement just above does not.
        named_with_source = [tag for tag in source.tags if tag != pull_variants_tag(source.url_key)]
        return await variant.make_from(node, key, data, content_id(source), source.tags,
                                       since=since, since_tags=named_with_source, failure_key=failed_as)

    node.metrics.cache_result("MISS").inc()
    made: CachedObject = await node.flight.run(key, fill)
    return made, "MISS"


def as_it_is(source: PullSource, policy: ServePolicy) -> CachedObject:
    """The image's stored bytes as an answer of their own: the policy's Content-Type, an ETag named by the image's
    validator (`pull_source_id`: strong when that is a strong ETag or the body's hash, else weak, as Last-Modified
    is), none of the origin's fields."""
    obj = source.stored.obj
    etag = first_value(source.stored.headers, "etag")
    weak = (etag is None or etag.startswith("W/")) and first_value(source.stored.headers, "last-modified") is not None
    body = source.body if source.body is not None else obj.body
    return CachedObject(obj.key, policy.headers.get("Content-Type", obj.content_type),
                        ("W/" if weak else "") + strong_etag(source.source_id), (), obj.size, obj.stored_at,
                        body=body, path=None if body is not None else obj.path)


def failure_key(key: str, since: int | None) -> str:
    """What a variant's failure is remembered under (the image pool's negative cache): its key, as long as no purge
    was published since the purge mark `since` (taken before its source was looked up). The key names the image by
    its validator, which an origin may keep for other bytes (a broken image replaced under its ETag, its URL
    purged): a failure of the bytes a purge retired is not the answer for those fetched after it. Any purge lets
    it go, as it lets a refusal for size go (pull_source.py `TOO_LARGE_SOURCES`): at most one run more each."""
    return key if since is None else f"{key}@{since}"


def content_id(source: PullSource) -> str:
    """What the image pool knows the source's bytes by (`Made.make_from`'s source id: a worker keeps the bytes
    of the sources it ran under it, and is sent only that id for them the next time). Never the validator alone,
    which an origin may keep for other bytes (an image changed and its URL purged, its ETag left as it was): the
    body's SHA-256 when it was stored with one, else the validator and the moment this copy was stored, which
    every new copy of the URL (fetched again, or refreshed by a 304) changes. No hashing per variant made."""
    if source.stored.digest is not None:
        return source.stored.digest
    return f"{source.source_id}@{source.stored.obj.stored_at!r}"


def answers(variant: Made, obj: CachedObject, source: PullSource) -> bool:
    """Whether a stored variant answers as it is (else it is made again): usable (`Made.usable`), not soft-purged, and
    carrying every tag its source has now: an origin may tag an image (a 304's Cache-Tag, or a new response under
    the same validator) after variants of it were made, and a purge of that tag must reach them as it reaches the
    image."""
    return variant.usable(obj) and not soft_purged(obj) and set(source.tags).issubset(obj.tags)


def soft_purged(obj: CachedObject) -> bool:
    """A variant a soft purge named (with its source): made again, from the source as its revalidation left it."""
    return any(name == SOFT_PURGED for name, _ in obj.headers)


def retire_older_variants(node: EdgeNode, source: PullSource) -> None:
    """Before a variant is made: when the URL's variants were made from another validator (the origin's
    image changed since, whichever request saw it first), purge them all, then note this one. Blocking."""
    made_key = pull_variants_made_key(source.url_key)
    made_from = lookup(node, made_key)
    current = source.source_id.encode()
    if made_from is not None and made_from.read_range(0, made_from.size) == current:
        return
    if made_from is not None:
        node.cache.purge_tags([pull_variants_tag(source.url_key)])
    # No copy of the image's: kept through a purge of it by URL or tag (which counts the copies it removes), with
    # the variants' tag (retired with them) and the zone's (gone with the zone).
    node.cache.put(made_key, current, "text/plain", "", (zone_tag(source.at.zone.name), pull_variants_tag(source.url_key)))

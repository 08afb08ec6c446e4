"""GET/HEAD /api/transform: receive (parse options), then the serve sequence (assetcdn/edge/states/serve.py) with
the variant those options make: on a miss it takes one of the client's own misses (a minute's and a
day's, per address) and one unit of the monthly quota, and transforms in the image pool; delivered
with a one-year immutable lifetime. A url naming a pull zone's file takes the pull zone's variant sequence
(assetcdn/edge/states/pull_variant.py) instead, with a lifetime derived from the source's freshness.

Every answer, hit, miss or error, carries the monthly quota as X-RateLimit-Limit, -Remaining
and -Reset (Unix time of the next month's start, UTC); a miss refused by the client's own limit
carries that limit's instead, with Retry-After. Any origin may read it, errors too (assetcdn/shared/cors.py)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from aiohttp import web

from assetcdn.edge.app_keys import COUNTERS, IMAGE_POOL, NODE
from assetcdn.edge.client_limits import refund_client_misses, take_client_misses
from assetcdn.edge.negotiate import (
    NETWORK_AWARE_HEADER,
    NETWORK_AWARE_SLOW,
    VARY_QUERY_ROUTE,
    is_slow_network,
    universal_format,
)
from assetcdn.edge.site_config import request_host, tenant_path
from assetcdn.edge.states.pull_source import pull_source_path, variant_cache_control
from assetcdn.edge.states.pull_variant import Plan, serve_pull_variant
from assetcdn.edge.states.serve import IMMUTABLE, LEGACY_REFUSALS, ServePolicy, serve, source_for
from assetcdn.edge.states.variant import Made
from assetcdn.edge.transform.jobs import transform_variant
from assetcdn.edge.transform.options import (
    AssetUrlError,
    check_stored_source,
    parse_transform_options,
    resolve_output_format,
)
from assetcdn.edge.transform.options.base import bad_parameter
from assetcdn.edge.transform.options.format import FORMAT, is_side_too_long
from assetcdn.shared.cors import RATE_LIMITED_READ, cross_origin
from assetcdn.shared.counter_store import Decision
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.limits import (
    transform_misses_per_client,
    transform_misses_per_client_day,
    transforms_per_month,
)

QUOTA = web.RequestKey("transform_quota", Decision)  # this request's own count, when it made a variant


async def take_transform_quota(request: web.Request) -> None:
    """Count one transform of this client (a minute's and a day's) and of this calendar month (UTC);
    429 when the client's are used (``rate_limit_exceeded``) or the month's (``limit_reached``)."""
    settings = request.app[NODE].settings
    client = await take_client_misses(
        request, (transform_misses_per_client(settings), transform_misses_per_client_day(settings)), "variants")
    limit = transforms_per_month(settings)
    decision = await request.app[COUNTERS].hit(limit)
    request[QUOTA] = decision
    if decision.allowed:
        return
    for taken in client:  # nothing is made: the client's misses are not spent either
        await request.app[COUNTERS].refund(taken)
    message = (f"Monthly transform limit reached ({limit.limit:,} per calendar month). Cached variants are "
               "still served; new ones can be made from the first day of next month (UTC).")
    raise LegacyError(429, "limit_reached", message, extra={"message": message}, headers=decision.refusal_headers())


async def refund_transform_quota(request: web.Request, refused: bool) -> None:
    """A failed transform does not count against the month (the client's misses keep it: the pool worked), nor one
    the pool refused before running it against the client's misses either."""
    if refused:
        await refund_client_misses(request)
    if QUOTA in request:
        taken = request[QUOTA]
        await request.app[COUNTERS].refund(taken)
        request[QUOTA] = replace(taken, remaining=min(taken.remaining + 1, taken.limit))


async def rate_limit_headers(request: web.Request) -> dict[str, str]:
    """The monthly transform quota as it stands after this request (X-RateLimit-*)."""
    decision = request.get(QUOTA)
    if decision is None:
        # A cached variant only reports the count: this process's view of it, at most a second old.
        decision = await request.app[COUNTERS].recent(transforms_per_month(request.app[NODE].settings))
    return decision.headers()


async def _transform_image(request: web.Request) -> web.StreamResponse:
    try:
        return await _transform(request)
    except LegacyError as exc:
        exc.headers = {**(await rate_limit_headers(request)), **exc.headers}
        raise


# A page draws it into a canvas or fetch()es it from another origin: readable there, errors too, its quota as well.
transform_image = cross_origin(_transform_image, RATE_LIMITED_READ)


async def _transform(request: web.Request) -> web.StreamResponse:
    node, pool = request.app[NODE], request.app[IMAGE_POOL]
    opts = parse_transform_options(request.query)
    host_zone = node.config.zone_for_host(request_host(request))
    headers: dict[str, str] = {**RATE_LIMITED_READ}
    slow = False
    if opts.get(FORMAT) == "auto":
        # The choice depends on Accept, and on Save-Data/ECT (slow networks skip AVIF), like /api/auto.
        slow = is_slow_network(request.headers.get("Save-Data"),
                               request.headers.get("Sec-CH-Effective-Connection-Type"))
        headers["Vary"] = VARY_QUERY_ROUTE
        if slow:
            headers[NETWORK_AWARE_HEADER] = NETWORK_AWARE_SLOW

    def variant(source_format: str, source_id: str, source_sha256: str | None, *, universal: bool = False) -> Made:
        output_format = (universal_format(source_format) if universal else
                         resolve_output_format(opts.get(FORMAT), source_format, request.headers.get("Accept"),
                                               slow=slow))
        return Made(pool, opts.cache_key(source_id, output_format),
                    partial(transform_variant, source_format, opts, output_format, pool.limits,
                            source_sha256=source_sha256),
                    metric_format=output_format, before_make=lambda: take_transform_quota(request),
                    refund=lambda refused: refund_transform_quota(request, refused))

    def policy(cache_control: str) -> ServePolicy:
        return ServePolicy(cache_control, LEGACY_REFUSALS, headers=headers,
                           late_headers=lambda: rate_limit_headers(request))

    def auto_again(exc: LegacyError) -> bool:
        # format=auto chose AVIF or WebP, which cannot hold this output (too long a side): a page cannot ask again for
        # another format, so the answer is the one a client taking neither gets (the chosen one stays refused, and
        # remembered so, under its own key: format=avif asked for by name shares it).
        return opts.get(FORMAT) == "auto" and is_side_too_long(exc)

    pulled = pull_source_path(node.config, host_zone, opts.url)
    if pulled is not None:
        def pull_plan(universal: bool) -> Plan:
            return lambda source: (variant(source.format, source.source_id, None, universal=universal),
                                   policy(variant_cache_control(source)))

        try:
            return await serve_pull_variant(request, pulled, LEGACY_REFUSALS, pull_plan(False))
        except LegacyError as exc:
            if not auto_again(exc):
                raise
        return await serve_pull_variant(request, pulled, LEGACY_REFUSALS, pull_plan(True))
    url = tenant_path(host_zone, "/" + opts.url)[1:]  # `/v1/...` on a zone's own host names its file, as delivered
    try:
        check_stored_source(url)
    except AssetUrlError as exc:
        raise bad_parameter(exc.message) from exc
    entry = source_for(node, url, host_zone, LEGACY_REFUSALS)
    try:
        return await serve(request, entry, variant(entry.format, entry.blob_id, entry.sha256), policy(IMMUTABLE))
    except LegacyError as exc:
        if not auto_again(exc):
            raise
    return await serve(request, entry, variant(entry.format, entry.blob_id, entry.sha256, universal=True),
                       policy(IMMUTABLE))

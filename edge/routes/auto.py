"""GET/HEAD /api/auto?path=<base>[&anim=1] and /api/auto/<base>: the best format the client accepts.

receive (path, chain from the request headers), choose (edge/auto_format.py), then look up the
file or the converted variant, fetch or convert on a miss, and deliver with the chain's MIME,
`Vary` (query route: Accept, Save-Data, ECT; path route: Accept) and a one-year lifetime.
"""

from __future__ import annotations

from functools import partial

from aiohttp import web

from edge.access import is_private_path, serves_on_host
from edge.auto_format import AutoChoice, choices, conversion_options
from edge.cache.entry import CachedObject
from edge.negotiate import (
    FORMAT_MIME,
    NETWORK_AWARE_HEADER,
    NETWORK_AWARE_SLOW,
    VARY_PATH_ROUTE,
    VARY_QUERY_ROUTE,
    animated_chain,
    is_slow_network,
    path_route_chain,
    still_chain,
)
from edge.node import EdgeNode
from edge.routes.transform import IMMUTABLE, origin_unreachable
from edge.state import IMAGE_POOL, NODE
from edge.states.deliver import deliver
from edge.states.fetch import OriginUnavailable, cached_asset
from edge.states.head import EntryHead
from edge.states.variant import cached_variant
from edge.transform.jobs import transform_variant
from shared.errors import LegacyError
from shared.paths import InvalidPath, parse_cdn_path

NOT_FOUND = "No suitable format found for the given path"


def parse_base(raw: str | None) -> str:
    """The CDN base path (no extension): `/stocks/...` kept, anything else a zone path."""
    if raw is None or raw.strip() == "":
        raise LegacyError(400, "Missing required parameter: path")
    try:
        base = parse_cdn_path(raw.strip())
    except InvalidPath:
        raise LegacyError(400, "Invalid path: contains disallowed sequences.") from None
    if is_private_path(base):
        raise LegacyError(403, f"'/{base}' is in the private category: it is served only through a "
                          "signed URL (/api/signed).")
    return base


async def _file(node: EdgeNode, choice: AutoChoice) -> tuple[CachedObject, str, EntryHead | None]:
    return await cached_asset(node, choice.entry)


async def _converted(request: web.Request, choice: AutoChoice) -> tuple[CachedObject, str, EntryHead | None]:
    node, pool = request.app[NODE], request.app[IMAGE_POOL]
    source, fmt = choice.entry, choice.format
    opts = conversion_options(source)
    make = partial(transform_variant, source.format, opts, fmt, pool.limits)
    # Not counted against the monthly /api/transform quota: at most one conversion per source
    # and format, cached for a year (README, "Image delivery").
    obj, status = await cached_variant(node, pool, source, opts.cache_key(source.blob_id, fmt), make,
                                       metric_format=fmt)
    return obj, status, None


async def answer(request: web.Request, base: str, chain: list[str], headers: dict[str, str], *,
                 animated: bool) -> web.StreamResponse:
    node = request.app[NODE]
    if not serves_on_host(base, node.config.zone_for_host(request.host)):
        raise LegacyError(404, NOT_FOUND)  # a tenant host serves its zone and the stock pool only
    if not node.replica.loaded:
        raise LegacyError(503, "This edge has not loaded the manifest yet. Retry shortly.")
    options = choices(chain, base, node.replica.get, animated=animated)
    conversion_failed = False
    for choice in options:
        if choice.convert and conversion_failed:
            continue  # the source did not decode; only files as they are remain
        try:
            obj, status, head = await (_converted(request, choice) if choice.convert else _file(node, choice))
        except OriginUnavailable:
            raise origin_unreachable(choice.entry) from None
        except LegacyError as exc:
            if not choice.convert or exc.status not in (415, 422):
                raise
            conversion_failed = True
            continue
        extra = {**headers, "Content-Type": FORMAT_MIME[choice.format]}
        try:
            return await deliver(request, obj, cache_status=status, cache_control=IMMUTABLE,
                                 extra_headers=extra, tags=choice.entry.tags, head=head)
        except FileNotFoundError:
            raise LegacyError(503, "The variant was purged while it was being delivered. Retry.") from None
    raise LegacyError(404, NOT_FOUND)


async def auto_query(request: web.Request) -> web.StreamResponse:
    base = parse_base(request.query.get("path"))
    accept = request.headers.get("Accept")
    save_data = request.headers.get("Save-Data")
    ect = request.headers.get("Sec-CH-Effective-Connection-Type")
    animated = request.query.get("anim") == "1"
    chain = animated_chain(accept, save_data, ect) if animated else still_chain(accept, save_data, ect)
    headers = {"Vary": VARY_QUERY_ROUTE}
    if is_slow_network(save_data, ect):
        headers[NETWORK_AWARE_HEADER] = NETWORK_AWARE_SLOW
    return await answer(request, base, chain, headers, animated=animated)


async def auto_path(request: web.Request) -> web.StreamResponse:
    base = parse_base(request.match_info.get("path"))
    chain = path_route_chain(request.headers.get("Accept"))
    return await answer(request, base, chain, {"Vary": VARY_PATH_ROUTE}, animated=False)

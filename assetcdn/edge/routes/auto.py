"""GET/HEAD /api/auto?path=<base>[&anim=1] and /api/auto/<base>: the best format the client accepts.

receive (path, chain from the request headers), choose (assetcdn/edge/auto_format.py), then the serve sequence
(assetcdn/edge/states/serve.py) with the file as it is or the converted variant, delivered with the chain's
MIME, `Vary` (query route: Accept, Save-Data, ECT; path route: Accept) and a one-year lifetime; a
conversion whose source does not decode falls back to the next file along the chain.

A path of a pull zone names the origin's file itself (`/api/auto?path=/<pullzone>/photo.jpg`): the edge cannot
list the origin's files, so that image is the only candidate (`auto_format.single_file_choices`, the same
decision): sent as it is when its format is the best of the chain before any an encoder here writes (once a
worker has read its header: bytes of another format are converted, as are any when the origin sent them under
a content coding), else converted to the best format of the chain an encoder writes, through the pull zone's
variant sequence (assetcdn/edge/states/pull_variant.py), with a lifetime derived from the source's freshness.

Any origin may read the answers, errors too (assetcdn/shared/cors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from aiohttp import web

from assetcdn.edge.access import SourceRefused, find_source
from assetcdn.edge.app_keys import IMAGE_POOL, NODE
from assetcdn.edge.auto_format import (
    can_convert_to,
    choices,
    conversion_options,
    single_file_choices,
)
from assetcdn.edge.negotiate import (
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
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.site_config import request_host, tenant_path
from assetcdn.edge.states.fetch import AS_IS
from assetcdn.edge.states.keys import as_is_check_key
from assetcdn.edge.states.pull_source import PullSource, pull_source_path, variant_cache_control
from assetcdn.edge.states.pull_variant import AsItIs, serve_pull_variant
from assetcdn.edge.states.serve import IMMUTABLE, LEGACY_REFUSALS, ServePolicy, serve
from assetcdn.edge.states.variant import Made
from assetcdn.edge.transform.jobs import checked_as_is, transform_variant
from assetcdn.edge.transform.options import TransformOptions
from assetcdn.edge.transform.options.base import enum_param
from assetcdn.edge.transform.options.format import is_side_too_long
from assetcdn.shared.cors import PUBLIC_READ, cross_origin
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.paths import InvalidPath, check_pull_path, parse_cdn_path
from assetcdn.shared.query_params import repeated

NOT_FOUND = "No suitable format found for the given path"
READ_PARAMS = frozenset(("path", "anim"))   # each at most once (assetcdn/shared/query_params.py)
ANIM = ("0", "1")
INVALID_PATH = "Invalid path: contains disallowed sequences."
REFUSALS = replace(LEGACY_REFUSALS, source=lambda exc: LegacyError(
    exc.status, NOT_FOUND if exc.status == 404 else exc.message, headers=exc.headers))


def parse_base(raw: str | None) -> str:
    """The CDN base path (no extension): `/stocks/...` kept, anything else a zone path. Read as given, as
    /api/transform's url is: a name may end with a space (`hero .png`), which trimming would trade for another file's."""
    if raw is None or raw.strip() == "":
        raise LegacyError(400, "Missing required parameter: path")
    path = raw
    try:
        return parse_cdn_path(path)
    except InvalidPath:
        path = path[1:] if path.startswith("/") else path
        try:
            check_pull_path(path)  # a pull zone's image may bear a name no stored file may: `answer` decides
        except InvalidPath:
            raise LegacyError(400, INVALID_PATH) from None
        return path


def readable(node: EdgeNode, host_zone: str | None) -> Callable[[str], ManifestEntry | None]:
    """The files of a base this request may read, as every delivery route decides (`find_source`): None
    for a file there is none of (or another zone's, on a tenant host); a private one or no manifest yet
    is the answer's refusal."""
    def get(cdn_path: str) -> ManifestEntry | None:
        try:
            return find_source(node, cdn_path, host_zone)
        except SourceRefused as exc:
            if exc.status == 404:
                return None
            raise REFUSALS.source(exc) from None
    return get


def _conversion(request: web.Request, source: ManifestEntry, fmt: str) -> Made:
    pool = request.app[IMAGE_POOL]
    opts = conversion_options(source)
    # Not counted against the monthly /api/transform quota: at most one conversion per source
    # and format, cached for a year (docs/api-guide.md, "Image delivery").
    return Made(pool, opts.cache_key(source.blob_id, fmt), partial(transform_variant, source.format, opts, fmt,
                                                                   pool.limits, source_sha256=source.sha256),
                metric_format=fmt)


def _pull_conversion(request: web.Request, fmt: str, headers: dict[str, str],
                     source: PullSource) -> tuple[Made, ServePolicy]:
    """A pull zone's image converted to `fmt`."""
    pool = request.app[IMAGE_POOL]
    opts = TransformOptions(url=source.at.cdn_path)  # a plain conversion: /api/transform's key for format=<fmt>
    variant = Made(pool, opts.cache_key(source.source_id, fmt),
                   partial(transform_variant, source.format, opts, fmt, pool.limits), metric_format=fmt)
    return variant, ServePolicy(variant_cache_control(source), REFUSALS,
                                headers={**headers, "Content-Type": FORMAT_MIME[fmt]})


def _pull_answer(request: web.Request, chain: list[str], headers: dict[str, str], too_short: frozenset[str],
                 converts_to: list[str], source: PullSource) -> tuple[Made | AsItIs, ServePolicy]:
    """A pull zone's image as it is, or converted to the best format of the chain an encoder here writes, but those
    of `too_short` (their conversion could not hold the image: too long a side). `converts_to` is set to the format
    a conversion would make, for the caller to try again without it if it cannot."""
    found = [choice for choice in single_file_choices(chain, source, source.format if AsItIs.possible(source) else None)
             if not (choice.convert and choice.format in too_short)]
    if not found:
        raise LegacyError(404, NOT_FOUND)
    best = found[0]
    if best.convert:
        converts_to[:] = [best.format]
        return _pull_conversion(request, best.format, headers, source)
    # Bytes that are not what the origin calls them: converted as any other image is.
    otherwise = next((fmt for fmt in chain if can_convert_to(fmt) and fmt not in too_short), None)
    converts_to[:] = [otherwise] if otherwise is not None else []
    pool = request.app[IMAGE_POOL]
    check = Made(pool, as_is_check_key(source.source_id, best.format),
                 partial(checked_as_is, source.format, best.format, pool.limits), metric_format="as-is")
    return (AsItIs(check, best.format, _pull_conversion(request, otherwise, headers, source) if otherwise else None),
            ServePolicy(variant_cache_control(source), REFUSALS,
                        headers={**headers, "Content-Type": FORMAT_MIME[best.format]}))


async def answer(request: web.Request, base: str, chain: list[str], headers: dict[str, str], *,
                 animated: bool) -> web.StreamResponse:
    node = request.app[NODE]
    host_zone = node.config.zone_for_host(request_host(request))
    pulled = pull_source_path(node.config, host_zone, base)
    if pulled is not None:  # the path names the origin's file itself: its names at the origin are unknown here
        too_short: frozenset[str] = frozenset()
        while True:
            converts_to: list[str] = []
            try:
                return await serve_pull_variant(request, pulled, REFUSALS,
                                                partial(_pull_answer, request, chain, headers, too_short, converts_to))
            except LegacyError as exc:
                if not is_side_too_long(exc) or not converts_to or converts_to[0] in too_short:
                    raise   # not a format too short, or nothing new to try
                too_short |= {converts_to[0]}
    base = tenant_path(host_zone, "/" + base)[1:]  # `/v1/...` on a zone's own host names its files, as delivered
    try:
        parse_cdn_path(base)  # a stored file's base keeps the stored names' rules
    except InvalidPath:
        raise LegacyError(400, INVALID_PATH) from None
    get = readable(node, host_zone)
    conversion_failed = False
    for choice in choices(chain, base, get, animated=animated):
        if choice.convert and conversion_failed:
            continue  # the source did not decode; only files as they are remain
        variant = _conversion(request, choice.entry, choice.format) if choice.convert else AS_IS
        policy = ServePolicy(IMMUTABLE, REFUSALS, headers={**headers, "Content-Type": FORMAT_MIME[choice.format]})
        try:
            return await serve(request, choice.entry, variant, policy)
        except LegacyError as exc:
            if not choice.convert or exc.status not in (415, 422):
                raise
            # A format too short a side for the picture (AVIF, WebP): a later one may hold it. Any other failure is
            # the source's.
            conversion_failed = not is_side_too_long(exc)
    raise LegacyError(404, NOT_FOUND)


async def _auto_query(request: web.Request) -> web.StreamResponse:
    twice = repeated(request.query, READ_PARAMS)
    if twice is not None:
        raise LegacyError(400, f"Parameter '{twice}' is given more than once; give it once.")
    base = parse_base(request.query.get("path"))
    accept = request.headers.get("Accept")
    save_data = request.headers.get("Save-Data")
    ect = request.headers.get("Sec-CH-Effective-Connection-Type")
    animated = enum_param(request.query, "anim", ANIM) == "1"   # anything but 0 or 1 is 400, not the still chain
    chain = animated_chain(accept, save_data, ect) if animated else still_chain(accept, save_data, ect)
    headers = {**PUBLIC_READ, "Vary": VARY_QUERY_ROUTE}
    if is_slow_network(save_data, ect):
        headers[NETWORK_AWARE_HEADER] = NETWORK_AWARE_SLOW
    return await answer(request, base, chain, headers, animated=animated)


async def _auto_path(request: web.Request) -> web.StreamResponse:
    base = parse_base(request.match_info.get("path"))
    chain = path_route_chain(request.headers.get("Accept"))
    return await answer(request, base, chain, {**PUBLIC_READ, "Vary": VARY_PATH_ROUTE}, animated=False)


# A page draws the image into a canvas or fetch()es it from another origin: readable there, errors too.
auto_query, auto_path = cross_origin(_auto_query), cross_origin(_auto_path)

"""Assets plane: the read-only catalog over the manifest. GET /api/assets, GET /api/assets/metadata."""

from __future__ import annotations

import asyncio
import math
import posixpath
from urllib.parse import quote

import orjson
from aiohttp import web

from assetcdn.control.analytics.params import parse_count
from assetcdn.control.app_keys import public_url
from assetcdn.control.storage.catalog_orders import SORTS
from assetcdn.control.storage.service import MANIFEST
from assetcdn.shared.errors import bad_request, not_found
from assetcdn.shared.manifest import ManifestEntry, human_size
from assetcdn.shared.middleware import json_response
from assetcdn.shared.paths import InvalidPath, parse_cdn_path
from assetcdn.shared.timestamps import utc_now_iso

CHUNK = 64


def _asset_json(entry: ManifestEntry) -> dict[str, object]:
    return {"name": entry.name, "path": entry.path, "project": entry.zone, "category": entry.category,
            "format": entry.format, "size": entry.size}


def with_text(entries: list[ManifestEntry], needle: str) -> list[ManifestEntry]:
    """The entries whose name or path holds `needle` (lowercase). A name is its path's last part, and a path lowercases
    as its parts do (no letter's lowercase depends on one across a `/`), so the path alone is read."""
    return [e for e in entries if needle in e.path.lower()]


async def list_assets(request: web.Request) -> web.StreamResponse:
    q = request.query
    project, category, fmt, text = (q.get("project") or None, q.get("category") or None,
                                    (q.get("format") or "").lower() or None, q.get("q") or None)
    sort = q.get("sort", "name") if q.get("sort") in SORTS else "name"
    descending = q.get("order", "asc").lower() == "desc"
    # The API reference clamps paging values instead of refusing them, and reads them as parseInt does.
    page = parse_count(q.get("page"), default=1, maximum=10**9)
    per_page = parse_count(q.get("per_page"), default=50, maximum=200)
    needle = text.lower() if text else None
    manifest = request.app[MANIFEST]
    # Each from the orders the manifest keeps (assetcdn/control/storage/catalog_orders.py; keys end in the path, one per
    # file: the descending sort is the ascending one read from its end): the whole catalog's, or a project's (made
    # alone at its first ask), else the smaller of a category's and a format's; any other filter is checked on its files.
    # Read with no await between the orders read and the page's slice: a change moves them on the event loop.
    catalog = manifest.catalog
    if project is None:  # a category's or a format's first ask in a sort: its files grouped, on a thread
        for facet, value in (("category", category), ("format", fmt)):
            if value is not None:
                await catalog.ready(sort, facet)
    if project is not None:
        matches = catalog.facet(sort, "project", project)
    elif category is not None or fmt is not None:
        matches = min((catalog.facet(sort, facet, value) for facet, value in (("category", category), ("format", fmt))
                       if value is not None), key=len)
    else:
        matches = catalog.whole(sort)
    if [project, category, fmt].count(None) < 2:
        matches = [e for e in matches if (category is None or e.category == category) and (fmt is None or e.format == fmt)]
    if needle is not None:  # text has no index: every file of `matches` checked, on a thread, over a copy (a change
        async with catalog.passes:  # moves the manifest's orders on the event loop); a few copies at once at most
            matches = await asyncio.to_thread(with_text, matches[:], needle)
    total = len(matches)
    first, end = (page - 1) * per_page, page * per_page
    window = matches[max(total - end, 0):max(total - first, 0)][::-1] if descending else matches[first:end]
    head = {"Pagination": {"Page": page, "PerPage": per_page, "TotalItems": total,
                           "TotalPages": max(math.ceil(total / per_page), 1)},
            "Filters": {"Project": project, "Category": category, "Format": fmt, "Query": text},
            "DateFetched": utc_now_iso()}
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "private, max-age=30"})
    await response.prepare(request)
    if request.method == "HEAD":  # the GET's head alone: aiohttp sends what a streamed answer writes, HEAD or not
        return response
    # Streamed in this key order: Pagination, Filters, DateFetched, Data.
    await response.write(orjson.dumps(head)[:-1] + b',"Data":[')
    for start in range(0, len(window), CHUNK):
        items = b",".join(orjson.dumps(_asset_json(e)) for e in window[start:start + CHUNK])
        await response.write((b"," if start else b"") + items)
    await response.write(b"]}")
    await response.write_eof()
    return response


async def asset_metadata(request: web.Request) -> web.Response:
    raw = request.query.get("path")
    if not raw:
        raise bad_request("Missing required parameter: path (an asset path such as '<zone>/v1/logos/logo.svg').",
                          target="path", code="MissingPath")
    try:
        path = parse_cdn_path(raw)
    except InvalidPath as exc:
        raise bad_request(f"Invalid path: {exc}", target="path", code="InvalidPath") from None
    manifest = request.app[MANIFEST]
    entry = manifest.entries.get(path)
    if entry is None:
        raise not_found(f"Asset '{path}' does not exist.", target="path", code="AssetNotFound")
    directory = posixpath.dirname(entry.path)
    base = posixpath.splitext(entry.name)[0]
    formats = sorted({e.format for e in manifest.directory_entries(directory)
                      if posixpath.splitext(e.name)[0] == base and e.format})
    base_url = public_url(request.app)
    return json_response({
        "Path": entry.path, "Name": entry.name, "Project": entry.zone, "Category": entry.category,
        "Format": entry.format, "Size": entry.size, "SizeHuman": human_size(entry.size),
        # Percent-encoded: a name may hold a space or `+` (assetcdn/shared/paths.py), which a query reads as a space.
        "ContentType": entry.content_type, "CdnUrl": f"{base_url}/{quote(entry.path)}",
        "TransformUrl": f"{base_url}/api/transform?url={quote('/' + entry.path, safe='/')}", "AvailableFormats": formats,
        "DateFetched": utc_now_iso(),
    })

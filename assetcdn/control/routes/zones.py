"""Core plane: zones. GET/POST /api/core/zones, GET/DELETE /api/core/zones/{id}, and a pull zone's origin:
GET/PUT/DELETE /api/core/zones/{id}/origin (assetcdn/shared/pull_origin.py says what an origin is).

A zone with an origin is a pull zone: the edges fetch its CDN paths from that origin and cache them by the
origin's headers; without one its paths are the files stored in it. The origin reaches the edges in the
published config, so setting, changing or removing it takes effect on every edge at the next config push."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from yarl import URL

from assetcdn.control.acme.service import CERTIFICATES
from assetcdn.control.app_keys import SETTINGS, public_url
from assetcdn.control.publishing.publisher import Mutation
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.records.recording import AUDIT_META
from assetcdn.control.request_body import read_json
from assetcdn.control.storage.edge_config_store import zone_names as zones_in_git
from assetcdn.control.storage.service import EDGE_CONFIG, GIT, MANIFEST, ZONES
from assetcdn.control.storage.zones_store import ZoneMeta
from assetcdn.control.webhooks.events import zone_created, zone_deleted
from assetcdn.shared.address_guard import (
    LOOPBACK_REFUSED,
    check_address,
    literal_address,
    name_problem,
)
from assetcdn.shared.errors import bad_request, conflict, not_found
from assetcdn.shared.manifest import human_size, zone_tag
from assetcdn.shared.middleware import json_response
from assetcdn.shared.paths import (
    CLIENT_ROOT,
    ZONE_CATEGORIES,
    validate_zone_name,
    zone_scaffold_paths,
)
from assetcdn.shared.pull_origin import OriginProblem, PullOrigin, parse_new_origin
from assetcdn.shared.timestamps import as_iso_utc, utc_now_iso

from .storage import STORAGE_ZONE_NAME


def zone_scaffold(name: str) -> dict[str, bytes]:
    """The files that make a zone: an empty ``v1/<category>/`` directory for each standard category."""
    return dict.fromkeys(zone_scaffold_paths(name), b"")


async def zone_names(request: web.Request) -> list[str]:
    return await zones_in_git(request.app[GIT])


def _summary(request: web.Request, name: str, meta: ZoneMeta | None,
             totals: tuple[int, int, list[str]], origin: PullOrigin | None) -> dict[str, Any]:
    """A zone's description; `totals`: its files, bytes and sorted categories (ManifestStore.zone_totals)."""
    files, used, categories = totals
    return {
        "Kind": "pull" if origin else "storage", "Origin": origin.public_json() if origin else None,
        "Id": name, "Name": name, "StorageZoneName": STORAGE_ZONE_NAME,
        "OriginUrl": f"{public_url(request.app)}/{name}/",
        "FileCount": files, "StorageUsed": used, "StorageUsedHuman": human_size(used), "Categories": categories,
        "DateCreated": as_iso_utc(meta.created_at) if meta else utc_now_iso(),
        "Enabled": meta.enabled if meta else True, "Suspended": meta.suspended if meta else False,
    }


async def require_zone(request: web.Request) -> str:
    """The zone named by the path. Git is the truth (no name pattern here), so a zone created before
    the name rules were tightened can still be read and deleted."""
    zone = request.match_info["id"]
    if zone not in await zone_names(request):
        raise not_found(f"Zone '{zone}' does not exist.", target="id", code="ZoneNotFound")
    return zone


async def list_zones(request: web.Request) -> web.Response:
    metas = await request.app[ZONES].all()
    manifest = request.app[MANIFEST]
    origins = await request.app[EDGE_CONFIG].origins()
    zones = [_summary(request, name, metas.get(name), manifest.zone_totals(name), origins.get(name))
             for name in await zone_names(request)]
    return json_response(zones)


async def get_zone(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    entries = sorted(request.app[MANIFEST].zone_entries(zone), key=lambda e: e.path)
    totals = (len(entries), sum(e.size for e in entries), sorted({e.category for e in entries if e.category}))
    detail = _summary(request, zone, await request.app[ZONES].get(zone), totals,
                      await request.app[EDGE_CONFIG].origin(zone))
    detail["Formats"] = sorted({e.format for e in entries if e.format})
    detail["Files"] = [{"Path": e.path, "Name": e.name, "Format": e.format, "Size": e.size, "Category": e.category}
                       for e in entries]
    return json_response(detail)


async def create_zone(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object: {\"Name\": \"<zone>\"}.", code="InvalidBody")
    name = body.get("Name", body.get("name"))
    if name is None or name == "":  # another type is a name sent, and an invalid one (as the pipeline's `name`)
        raise bad_request("'Name' is required.", target="Name", code="MissingName")
    problem = validate_zone_name(name)
    if problem:
        raise bad_request(problem, target="Name", code="InvalidName")
    data = body["Origin"] if "Origin" in body else body.get("origin")  # as `Name`, also in lower case
    origin = checked_origin(request, data) if data is not None else None

    async def refuse_existing() -> None:
        if name in await zone_names(request):
            raise conflict(f"Zone '{name}' already exists. Choose another name or use the existing zone.",
                           target="Name", code="ZoneExists")

    await forget_left_behind_origin(request, name)
    published = await request.app[PUBLISHER].commit(zone_scaffold(name), f"Create zone {name} with its v1 directories",
                                                    precondition=refuse_existing, change=zone_created(name))
    meta = await request.app[ZONES].ensure(name, published.commit.committed_at)
    if origin is not None:
        async with request.app[EDGE_CONFIG].origin_changes:
            if name in await zone_names(request):  # not deleted meanwhile
                await request.app[EDGE_CONFIG].set_origin(name, origin)
                await request.app[PUBLISHER].publish_config()
    return json_response({
        "HttpCode": 201, "Message": f"Zone '{name}' created" + (f", pulling from {origin.url}." if origin else "."),
        "Id": name, "Name": name, "Kind": "pull" if origin else "storage",
        "Origin": origin.public_json() if origin else None,
        "OriginUrl": f"{public_url(request.app)}/{name}/", "Commit": published.commit.commit_id,
        "Directories": list(ZONE_CATEGORIES), "EdgeStatus": "pending",  # the v1/ sub-directories
        "EdgeNote": published.edge_note, "DateCreated": as_iso_utc(meta.created_at),
    }, status=201)


async def forget_left_behind_origin(request: web.Request, name: str) -> None:
    """Before a zone is created (here or by the pipeline): an origin a deletion of a zone of this name left behind
    (control stopped between its commit and the origin's removal) goes before the zone exists again, so the new
    zone never takes it, nor its secret fields, not even in the config its commit publishes; and so do the custom
    domains such a deletion left (the new zone is not served on them, nor are their certificates kept)."""
    store = request.app[EDGE_CONFIG]
    left_domains = False
    async with store.origin_changes:
        if name not in await zone_names(request):
            await store.remove_origin(name)
            if await store.domains(name):
                await store.remove_zone_domains(name)
                left_domains = True
    if left_domains:
        await request.app[CERTIFICATES].reconcile()  # and no certificates or keys for them


async def delete_zone(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    git = request.app[GIT]

    async def every_file() -> Mutation:
        # Listed under the commit lock: a file an upload committed while this request waited goes too.
        files = [f.path for f in await git.run(lambda: list(git.iter_files(f"{CLIENT_ROOT}/{zone}")))]
        if not files:  # a concurrent delete of the same zone got there first
            raise not_found(f"Zone '{zone}' does not exist.", target="id", code="ZoneNotFound")
        assets = sum(1 for f in files if not f.endswith("/.gitkeep"))
        return Mutation({f: None for f in files}, f"Delete zone {zone} and its {assets} files", [zone_tag(zone)],
                        change=zone_deleted(zone))

    published = await request.app[PUBLISHER].commit_planned(every_file)
    asset_count = sum(1 for c in published.commit.changes if not c.path.endswith("/.gitkeep"))
    async with request.app[EDGE_CONFIG].origin_changes:  # after a change under way; one after this finds no zone
        # A zone created again under the name since this delete's commit is another zone: its record and origin
        # are its own (a create sets its origin under this lock, once its commit is in).
        if zone not in await zone_names(request):
            await request.app[ZONES].remove(zone)
            if await request.app[EDGE_CONFIG].remove_origin(zone):
                await request.app[PUBLISHER].publish_config()
    # A deleted zone keeps no custom domains: they would map hostnames to nothing.
    if await request.app[EDGE_CONFIG].domains(zone):
        await request.app[EDGE_CONFIG].remove_zone_domains(zone)
        await request.app[PUBLISHER].publish_config()
        await request.app[CERTIFICATES].reconcile()  # and no certificates or keys for them
    return json_response({
        "HttpCode": 200, "Message": f"Zone '{zone}' deleted: {asset_count} files removed.",
        "Commit": published.commit.commit_id, "FilesRemoved": asset_count, "EdgeStatus": "purging",
        "EdgeNote": published.edge_note,
    })


def checked_origin(request: web.Request, data: object) -> PullOrigin:
    """The origin of a create or PUT body, or 400: its form (assetcdn/shared/pull_origin.py), and a host that is
    not a private network's name or address (names are checked again, as resolved, by the edge that connects)."""
    try:
        origin = parse_new_origin(data)
    except OriginProblem as exc:
        raise bad_request(str(exc), target=exc.target, code="InvalidOrigin") from None
    allow_loopback = bool(request.app[SETTINGS].get("origin", "allow_loopback"))
    host = URL(origin.url).raw_host or ""
    literal = literal_address(host)
    problem = (check_address(literal, allow_loopback=allow_loopback) if literal is not None
               else name_problem(host, allow_loopback=allow_loopback))
    if problem:
        hint = (" For an origin on this machine, in development only, start control and the edges with [origin]"
                " allow_loopback = true (ASSETCDN_ORIGIN_ALLOW_LOOPBACK=true)." if LOOPBACK_REFUSED in problem else "")
        raise bad_request(f"The origin cannot be reached on the edges' behalf: {problem}.{hint}", target="Origin.Url",
                          code="InvalidOrigin")
    return origin


def origin_answer(request: web.Request, zone: str, origin: PullOrigin | None, message: str) -> web.Response:
    """A zone's origin, and how many files are stored in it: while it pulls they are kept but not served."""
    stored = len(request.app[MANIFEST].zone_entries(zone))
    if origin is not None and stored:
        message += (f" Its {stored} stored file{'s' if stored != 1 else ''} {'are' if stored != 1 else 'is'} kept but "
                    "not served while it pulls; removing the origin serves them again.")
    return json_response({"HttpCode": 200, "Message": message, "Zone": zone, "Kind": "pull" if origin else "storage",
                          "Origin": origin.public_json() if origin else None, "StoredFiles": stored})


async def get_origin(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    origin = await request.app[EDGE_CONFIG].origin(zone)
    if origin is None:
        raise not_found(f"Zone '{zone}' has no origin: its paths are the files stored in it.", target="id",
                        code="NoOrigin")
    return origin_answer(request, zone, origin, f"Zone '{zone}' pulls from {origin.url}.")


async def put_origin(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    origin = checked_origin(request, await read_json(request))
    store = request.app[EDGE_CONFIG]
    async with store.origin_changes:  # one change at a time: each purges what the origin before it left
        zone = await require_zone(request)  # again: the zone may have been deleted while the body came
        before = await store.origin(zone)
        await store.set_origin(zone, origin)
        await request.app[PUBLISHER].publish_config()
        if before is not None and ((before.url, before.host_header) != (origin.url, origin.host_header)
                                   or (before.store_set_cookie and not origin.store_set_cookie)):
            # Another origin's answers, or answers that set cookies the zone no longer lets the edges keep.
            await retire_cached(request, zone)
    return origin_answer(request, zone, origin, f"Zone '{zone}' now pulls from {origin.url}.")


async def delete_origin(request: web.Request) -> web.Response:
    zone = await require_zone(request)
    store = request.app[EDGE_CONFIG]
    async with store.origin_changes:
        removed = await store.origin(zone)
        if removed is None or not await store.remove_origin(zone):
            raise not_found(f"Zone '{zone}' has no origin.", target="id", code="NoOrigin")
        # The audit entry names the origin removed (its answer has none), as an origin set names the one set.
        request[AUDIT_META] = origin_audit(removed)
        await request.app[PUBLISHER].publish_config()
        await retire_cached(request, zone)
    return origin_answer(request, zone, None, f"Zone '{zone}' no longer pulls from an origin: its paths are its stored files.")


def origin_audit(origin: PullOrigin) -> dict[str, str]:
    """Where a zone pulls from, for its audit entry: the URL and Host header, never a request field's value."""
    return {"originUrl": origin.url, **({"originHost": origin.host_header} if origin.host_header else {})}


async def retire_cached(request: web.Request, zone: str) -> None:
    """What the edges cached from a zone's former origin is purged once they have the new config, so no URL
    keeps answering with another origin's response until it expires."""
    await request.app[PUBLISHER].purge({"tags": [zone_tag(zone)]})

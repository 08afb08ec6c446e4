"""Storage plane: PUT/GET/HEAD/DELETE /api/storage/{path} and POST /api/storage/batch."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import re
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from assetcdn.control.app_keys import SETTINGS
from assetcdn.control.publishing.publisher import Published
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.request_body import read_body, read_json, size_text
from assetcdn.control.storage.edge_config_store import EdgeConfigStore
from assetcdn.control.storage.git_store import GitStore, NothingToCommit
from assetcdn.control.storage.service import EDGE_CONFIG, GIT, MANIFEST, ZONES
from assetcdn.shared.conditionals import etag_matches, if_match_holds, joined_field
from assetcdn.shared.errors import (
    ApiError,
    bad_request,
    conflict,
    not_found,
    payload_too_large,
)
from assetcdn.shared.manifest import content_type_of
from assetcdn.shared.middleware import json_response
from assetcdn.shared.paths import (
    CLIENT_ROOT,
    SCAFFOLD_FILE,
    STOCK_ROOT,
    InvalidPath,
    StoragePath,
    cdn_path_of,
    has_extension,
    parse_storage_path,
    zone_scaffold_paths,
)
from assetcdn.shared.timestamps import as_iso_utc, utc_now_iso

STORAGE_ZONE_NAME = "assetcdn"
SHA256_HEX = re.compile(r"^[0-9a-fA-F]{64}\Z")
# An empty body is stored only when the client says it means one: with this Checksum (docs/api-guide.md).
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
GUID_NAMESPACE = uuid.UUID("5b8f8f8e-4c55-4b5e-9d0c-2a8f8a1c0d11")


def _is_directory_request(raw: str) -> bool:
    return raw == "" or raw.endswith("/") or not has_extension(raw)


def _parse(raw: str, *, directory: bool = False) -> StoragePath:
    # The route captures what follows '/api/storage/': a leading '/' here was a '//' in the URL.
    if raw.startswith("/"):
        raise bad_request("Invalid path: The path contains an empty segment ('//').", target="path",
                          code="InvalidPath")
    try:
        return parse_storage_path(raw, directory=directory)
    except InvalidPath as exc:
        raise bad_request(f"Invalid path: {exc}", target="path", code="InvalidPath") from None


def write_problem(git: GitStore, path: StoragePath) -> ApiError | None:
    """Why a file cannot be written at `path` now: its zone does not exist (404 ZoneNotFound), or the tree
    holds a directory there or a file above it (409 PathConflict). The one check of every upload, single
    or batch; it reads the tree, so run it on the git thread (`git.run`) and again under the commit lock,
    as a zone may be deleted or a path taken while the body is read."""
    if path.zone is not None and not git.is_dir(f"{CLIENT_ROOT}/{path.zone}"):
        return not_found(f"Zone '{path.zone}' does not exist. Create it first with POST /api/core/zones.",
                         target="path", code="ZoneNotFound")
    clash = _tree_conflict(git, path.repo_path)
    if clash:
        return conflict(f"Path conflict: {clash}", target="path", code="PathConflict")
    return None


async def pull_zone_problem(store: EdgeConfigStore, zone: str | None) -> str | None:
    """Why no file may be stored in `zone` now: it pulls from an origin, so its paths are the origin's and a file
    stored in it would never be served. Checked with `write_problem` (and under the commit lock too); an origin set
    on a zone that has files keeps them, unserved, until it is removed (docs/api-guide.md)."""
    origin = None if zone is None else await store.origin(zone)
    if origin is None:
        return None
    return (f"Zone '{zone}' is a pull zone: its paths are fetched from its origin ({origin.url}), so a file stored "
            f"in it would never be served. Upload to a storage zone, or remove the origin first (DELETE "
            f"/api/core/zones/{zone}/origin).")


def _tree_conflict(git: GitStore, repo_path: str) -> str | None:
    """Why `repo_path` cannot hold a file: it is a directory, or a parent of it is a file.

    Git would silently replace the one with the other (deleting files the manifest still lists)."""
    if git.is_dir(repo_path):
        return f"'{cdn_path_of(repo_path)}' is a directory; a file cannot replace it."
    parts = repo_path.split("/")
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        if git.read_file(parent) is not None:
            return f"'{cdn_path_of(parent)}' is a file; it cannot contain '{'/'.join(parts[i:])}'."
    return None


def _batch_conflict(repo_path: str, others: dict[str, bytes]) -> str | None:
    for other in others:
        if other.startswith(repo_path + "/") or repo_path.startswith(other + "/"):
            return f"'{cdn_path_of(repo_path)}' and '{cdn_path_of(other)}' cannot both be files."
    return None


def _supplied_checksum(request: web.Request) -> str | None:
    """The Checksum header in upper-case hex (as the mismatch error and listings show it), None when absent;
    an empty, malformed or repeated one is refused."""
    sent = request.headers.getall("Checksum", [])
    if not sent:
        return None
    if len(sent) > 1:
        raise bad_request("Send one Checksum header: the SHA-256 of the body as 64 hex characters.",
                          target="Checksum", code="InvalidChecksum")
    value = sent[0].strip()
    if not value:
        raise bad_request("The Checksum header is empty: send the SHA-256 of the body as 64 hex characters, or "
                          "leave the header out.", target="Checksum", code="InvalidChecksum")
    if not SHA256_HEX.match(value):
        raise bad_request("The Checksum header must be the SHA-256 of the body as 64 hex characters.",
                          target="Checksum", code="InvalidChecksum")
    return value.upper()


async def _stored_etag(request: web.Request, repo_path: str, found: tuple[str, bytes] | None) -> str | None:
    """The ETag a file's answers carry, from its tree entry `found` (None: no file): the manifest's SHA-256 when it
    lists that very blob, else the content's own (a commit the manifest has not taken in yet; off the loop)."""
    if found is None:
        return None
    entry = request.app[MANIFEST].entries.get(cdn_path_of(repo_path))
    if entry is not None and entry.blob_id == found[0]:
        return f'"{entry.sha256}"'
    return f'"{(await asyncio.to_thread(hashlib.sha256, found[1])).hexdigest()}"'


def _precondition_failed(field: str) -> ApiError:
    return ApiError(412, "PreconditionFailed", f"The {field} condition does not hold for the stored file; nothing "
                    "was changed. Read its current ETag (GET or HEAD) and send the change again.", target=field)


async def _check_write_conditions(request: web.Request, repo_path: str, *, absent_is_404: bool = False) -> None:
    """If-Match and If-None-Match of a PUT or DELETE against the file stored at `repo_path` now (RFC 9110 13.1.1,
    13.1.2): 412 PreconditionFailed when one does not hold. `*` names any stored file; If-Match compares strongly.
    Run under the commit lock (a PUT's also before its body is read), so no write slips between. With
    `absent_is_404` (a DELETE) a file gone meanwhile is left to its 404, which comes before any condition (13.2.1)."""
    if_match, if_none_match = joined_field(request, "If-Match"), joined_field(request, "If-None-Match")
    if if_match is None and if_none_match is None:
        return
    git = request.app[GIT]
    found = await git.run(git.read_file, repo_path)
    if found is None and absent_is_404:
        return
    etag = await _stored_etag(request, repo_path, found)
    if if_match is not None and (etag is None or not if_match_holds(if_match, etag)):
        raise _precondition_failed("If-Match")
    if if_none_match is not None and etag is not None and etag_matches(if_none_match, etag):
        raise _precondition_failed("If-None-Match")


def _edge_fields(published: Published, status: str) -> dict[str, str]:
    return {"EdgeStatus": status, "EdgeNote": published.edge_note}


async def put_file(request: web.Request) -> web.Response:
    raw = request.match_info["path"]
    if _is_directory_request(raw):
        raise bad_request("Cannot upload to a directory path: the path must end in a file name with an extension.",
                          target="path", code="InvalidPath")
    path = _parse(raw)
    git = request.app[GIT]

    async def writable() -> None:
        problem = await git.run(write_problem, git, path)
        if problem:
            raise problem
        pulled = await pull_zone_problem(request.app[EDGE_CONFIG], path.zone)
        if pulled:
            raise conflict(pulled, target="path", code="PullZone")
        await _check_write_conditions(request, path.repo_path)

    await writable()  # before reading the body; checked again under the commit lock
    checksum = _supplied_checksum(request)  # before the body too: a malformed one is refused unread
    data = await read_body(request)
    if not data and checksum is None:
        raise bad_request(f"The request body is empty. To store an empty file, send the Checksum header with the "
                          f"SHA-256 of no bytes ({EMPTY_SHA256}); otherwise send the file's bytes (curl "
                          "--data-binary @file sends nothing, and no Checksum header, for a file it cannot read).",
                          code="EmptyBody")
    if checksum is not None:
        received = (await asyncio.to_thread(hashlib.sha256, data)).hexdigest().upper()  # up to 25 MB: off the loop
        if checksum != received:
            raise bad_request("Checksum mismatch: the SHA-256 of the uploaded bytes differs from the Checksum "
                              "header. Nothing was written.", target="Checksum", code="ChecksumMismatch",
                              Expected=checksum, Received=received)
    published = await request.app[PUBLISHER].upload(
        {path.repo_path: data}, f"Upload {path.cdn_path} ({len(data)} bytes) via Storage API", precondition=writable)
    # Whether the path held a file is decided under the commit lock: identical bytes are an overwrite too.
    overwrite = path.repo_path in published.replaced
    return json_response({
        "HttpCode": 201, "Message": "File overwritten successfully" if overwrite else "File uploaded successfully",
        "Path": path.client_path, "Length": len(data), "Checksum": checksum, "DateCreated": utc_now_iso(),
        **_edge_fields(published, "purging" if overwrite else "pending"),
    }, status=201)


def _newest_below(request: web.Request, dir_path: str) -> dict[str, str]:
    """{child directory of `dir_path`: the time of the newest file below it}, from the manifest's index."""
    return request.app[MANIFEST].newest_below(cdn_path_of(f"{dir_path}/").rstrip("/"))


async def _scaffold_dates(request: web.Request, dir_path: str, names: list[str]) -> dict[str, str]:
    """{directory `names` of `dir_path`: when its zone was made}, for directories that hold no file, only the
    scaffold the zone's creation committed: the zones of `clients/`, or the directories inside one zone."""
    zones = request.app[ZONES]
    if dir_path == CLIENT_ROOT:
        return {name: meta.created_at for name, meta in (await zones.all()).items()}
    parts = dir_path.split("/")
    meta = await zones.get(parts[1]) if len(parts) > 1 and parts[0] == CLIENT_ROOT else None
    return dict.fromkeys(names, meta.created_at) if meta else {}


def _entry_json(request: web.Request, dir_path: str, name: str, is_dir: bool, size: int,
                newest: dict[str, str], scaffolded: dict[str, str]) -> dict[str, Any]:
    repo_path = f"{dir_path}/{name}" if dir_path else name
    entry = request.app[MANIFEST].entries.get(cdn_path_of(repo_path))
    # A directory's: its newest file's; one holding none, only its scaffold, its zone's creation (else the listing's
    # time: a directory git keeps holds a file).
    modified = entry.modified if entry else (newest.get(name) or scaffolded.get(name)) if is_dir else None
    changed = as_iso_utc(modified) if modified else utc_now_iso()
    return {
        "Guid": str(uuid.uuid5(GUID_NAMESPACE, repo_path)),
        "StorageZoneName": STORAGE_ZONE_NAME,
        "Path": f"/{dir_path}/" if dir_path else "/",
        "ObjectName": name,
        "Length": 0 if is_dir else size,
        "LastChanged": changed,
        "ServerId": 0,
        "ArrayNumber": 0,
        "IsDirectory": is_dir,
        "UserId": STORAGE_ZONE_NAME,
        "ContentType": "" if is_dir else (entry.content_type if entry else content_type_of(name)),
        "DateCreated": changed,
        "StorageZoneId": 0,
        "Checksum": entry.sha256.upper() if entry and not is_dir else None,
        "ReplicatedZones": "",
    }


async def _list_directory(request: web.Request, raw: str) -> web.Response:
    path = _parse(raw, directory=True)
    dir_path = path.repo_path or CLIENT_ROOT
    git = request.app[GIT]
    children = await git.run(git.list_dir, dir_path)
    if children is None and dir_path in (CLIENT_ROOT, STOCK_ROOT):
        children = []  # a storage root always is (it cannot be deleted): git keeps no empty directory
    if children is None:
        raise not_found(f"Directory '{raw or '/'}' does not exist.", target="path", code="DirectoryNotFound")
    newest = _newest_below(request, dir_path) if any(is_dir for _name, is_dir, _oid, _size in children) else {}
    bare = [name for name, is_dir, _oid, _size in children if is_dir and name not in newest]
    scaffolded = await _scaffold_dates(request, dir_path, bare) if bare else {}
    entries = [_entry_json(request, dir_path, name, is_dir, size, newest, scaffolded)
               for name, is_dir, _oid, size in children if name != SCAFFOLD_FILE]
    return json_response(entries)


async def _file_response(request: web.Request, with_body: bool) -> web.StreamResponse:
    raw = request.match_info["path"]
    if _is_directory_request(raw):
        # A HEAD too: aiohttp sends the listing's head (its Content-Length) without the body (RFC 9110 9.3.2).
        return await _list_directory(request, raw)
    path = _parse(raw)
    git = request.app[GIT]
    # HEAD needs only the size, from the tree entry; GET reads the content.
    found = await git.run(git.read_file if with_body else git.file_size, path.repo_path)
    if found is None:
        raise not_found(f"File '{path.client_path}' does not exist.", target="path", code="FileNotFound")
    entry = request.app[MANIFEST].entries.get(path.cdn_path)
    # Its reader's own cache may keep it and ask again with the ETag (a 304); a shared cache never (behind a key).
    headers = {"Content-Type": entry.content_type if entry else content_type_of(path.repo_path),
               "Cache-Control": "private, no-cache"}
    if entry:
        headers["ETag"] = etag = f'"{entry.sha256}"'
        headers["Checksum"] = entry.sha256.upper()
        # RFC 9110 13.2.2: If-Match first, then If-None-Match, which answers a read 304.
        if_match, if_none_match = joined_field(request, "If-Match"), joined_field(request, "If-None-Match")
        if if_match is not None and not if_match_holds(if_match, etag):
            raise _precondition_failed("If-Match")
        if if_none_match is not None and etag_matches(if_none_match, etag):
            return web.Response(status=304, headers={"ETag": etag, "Cache-Control": headers["Cache-Control"]})
    if not with_body:
        headers["Content-Length"] = str(found)
        return web.Response(status=200, headers=headers)
    return web.Response(body=found[1], headers=headers)


async def get_file(request: web.Request) -> web.StreamResponse:
    return await _file_response(request, with_body=True)


async def head_file(request: web.Request) -> web.StreamResponse:
    return await _file_response(request, with_body=False)


async def delete_file(request: web.Request) -> web.Response:
    raw = request.match_info["path"]
    directory = raw.endswith("/")
    path = _parse(raw, directory=directory)
    # AccessKey cannot remove zones (docs/api-guide.md "Auth and errors"): not a storage root, not a zone root, and a directory delete
    # keeps the zone's own `.gitkeep` scaffolding, so `<zone>/v1/` empties the zone instead of deleting it.
    if path.repo_path in ("", CLIENT_ROOT, STOCK_ROOT):
        raise bad_request("A storage root cannot be deleted; delete files or directories inside it.",
                          target="path", code="InvalidPath")
    if path.zone and path.repo_path == f"{CLIENT_ROOT}/{path.zone}":
        raise bad_request("Delete a whole zone with DELETE /api/core/zones/{id}.", target="path", code="InvalidPath")
    git = request.app[GIT]
    if await git.run(git.is_dir, path.repo_path):
        files = await git.run(_directory_files, git, path)
        if not files:  # listed, so not said not to exist
            raise not_found(f"'{path.client_path}/' holds no file to delete (a zone's own v1/<category>/ directories "
                            "stay).", target="path", code="FileNotFound")
        what = f"{path.client_path}/ ({sum(not _is_scaffold(f) for f in files)} files)"
    elif directory or path.segments[-1] == SCAFFOLD_FILE:
        files, what = [], path.client_path
    else:
        files = [path.repo_path] if await git.run(git.read_file, path.repo_path) is not None else []
        what = path.client_path

    async def conditions() -> None:  # a file's If-Match / If-None-Match, under the commit lock
        await _check_write_conditions(request, path.repo_path, absent_is_404=True)

    if not files:
        raise not_found(f"'{path.client_path}' does not exist or holds no files.", target="path",
                        code="FileNotFound")
    try:
        published = await request.app[PUBLISHER].commit({f: None for f in files}, f"Delete {what} via Storage API",
                                                        precondition=None if files != [path.repo_path] else conditions)
    except NothingToCommit:  # a concurrent delete got there first
        raise not_found(f"'{path.client_path}' does not exist.", target="path", code="FileNotFound") from None
    return json_response({"HttpCode": 200, "Message": f"Deleted {what}.", "Path": path.client_path,
                          **_edge_fields(published, "purging")})


def _is_scaffold(repo_path: str) -> bool:
    return repo_path.endswith("/" + SCAFFOLD_FILE)


def _directory_files(git: GitStore, path: StoragePath) -> list[str]:
    """What deleting the directory `path` removes: its files and the `.gitkeep` of its empty folders, but never the
    zone's own `v1/<category>/` ones, nor a `.gitkeep` at all when nothing else of the zone would be left (a zone made
    before its categories, emptied: AccessKey cannot delete zones)."""
    files = [f.path for f in git.iter_files(path.repo_path)]
    if not path.zone:
        return files
    own = set(zone_scaffold_paths(path.zone))
    removed = [f for f in files if f not in own]
    inside = path.repo_path + "/"
    if len(removed) < len(files) or any(not f.path.startswith(inside)
                                        for f in git.iter_files(f"{CLIENT_ROOT}/{path.zone}")):
        return removed
    return [f for f in files if not _is_scaffold(f)]


@dataclass(frozen=True)
class _BatchFile:
    index: int
    raw_path: str
    path: StoragePath
    data: bytes


@dataclass(frozen=True)
class _Oversize:
    problem: dict[str, Any]


def _problem(index: int, path: Any, message: str) -> dict[str, Any]:
    return {"index": index, "path": path, "message": message}


def _parse_batch_file(index: int, item: Any, max_file: int) -> _BatchFile | _Oversize | dict[str, Any]:
    """One entry of `files`, decoded; or the problem that refuses it (checks that need no repository)."""
    if not isinstance(item, dict):
        return _problem(index, None, "Each file must be an object with 'path' and 'content'.")
    raw_path, content, encoding = item.get("path"), item.get("content"), item.get("encoding", "base64")
    if not isinstance(raw_path, str) or not raw_path:
        return _problem(index, None, "'path' is required.")
    if _is_directory_request(raw_path):
        return _problem(index, raw_path, "'path' must end in a file name with an extension.")
    try:
        path = parse_storage_path(raw_path)
    except InvalidPath as exc:
        return _problem(index, raw_path, f"Invalid path: {exc}")
    if not isinstance(content, str):
        return _problem(index, raw_path, "'content' is required and must be a string.")
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            return _problem(index, raw_path, "'content' is not valid base64.")
    elif encoding == "utf-8":
        data = content.encode("utf-8")
    else:
        return _problem(index, raw_path, "'encoding' must be 'base64' or 'utf-8'.")
    if len(data) > max_file:
        return _Oversize(_problem(index, raw_path,
                                  f"File is {size_text(len(data))}; the limit is {size_text(max_file)} per file."))
    return _BatchFile(index, raw_path, path, data)


def _batch_write_problems(git: GitStore, files: list[_BatchFile]) -> list[dict[str, Any]]:
    """`write_problem` for each file of a batch, in one pass on the git thread."""
    problems = []
    for f in files:
        error = write_problem(git, f.path)
        if error:
            problems.append(_problem(f.index, f.raw_path, error.message))
    return problems


def _batch_error(problems: list[dict[str, Any]], total: int, oversize: int, max_file: int) -> ApiError:
    problems = sorted(problems, key=lambda p: p["index"])
    message = f"{len(problems)} of {total} files are invalid; nothing was committed."
    if oversize == len(problems):
        # Only size problems: 413 as for a single upload (the per-file limit).
        error = payload_too_large(message + " " + problems[0]["message"], max_file)
        error.details = problems
        return error
    return ApiError(400, "InvalidBatch", message, target="files", details=problems)


async def batch_upload(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    max_file = settings.get("control", "max_upload_bytes")
    max_files = settings.get("control", "max_batch_files")
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("files"), list):
        raise bad_request("The body must be a JSON object with a 'files' array.", target="files", code="InvalidBody")
    items = body["files"]
    if not items:
        raise bad_request("'files' must contain at least one file.", target="files", code="InvalidBody")
    if len(items) > max_files:
        raise bad_request(f"Too many files: {len(items)} in one batch, the maximum is {max_files}.",
                          target="files", code="TooManyFiles")
    problems: list[dict[str, Any]] = []
    files: list[_BatchFile] = []
    changes: dict[str, bytes] = {}
    oversize = 0
    for index, item in enumerate(items):
        parsed = _parse_batch_file(index, item, max_file)
        if isinstance(parsed, _Oversize):
            problems.append(parsed.problem)
            oversize += 1
            continue
        if isinstance(parsed, dict):
            problems.append(parsed)
            continue
        repo_path = parsed.path.repo_path
        if repo_path in changes:
            problems.append(_problem(index, parsed.raw_path, "The same path appears more than once in the batch."))
            continue
        clash = _batch_conflict(repo_path, changes)
        if clash:
            problems.append(_problem(index, parsed.raw_path, f"Path conflict: {clash}"))
            continue
        files.append(parsed)
        changes[repo_path] = parsed.data
    git = request.app[GIT]

    async def objections() -> list[dict[str, Any]]:
        """The repository's objections to the batch's files, then those of the files whose zone is a pull zone."""
        found = await git.run(_batch_write_problems, git, files)
        refused = {problem["index"] for problem in found}
        store = request.app[EDGE_CONFIG]
        pulled = {zone: await pull_zone_problem(store, zone) for zone in {f.path.zone for f in files}}
        return found + [_problem(f.index, f.raw_path, why) for f in files
                        if f.index not in refused and (why := pulled[f.path.zone])]

    if problems:  # refused already; list the repository's objections too, so one answer names every bad file
        problems += await objections()
        raise _batch_error(problems, len(items), oversize, max_file)

    async def writable() -> None:  # under the commit lock: a zone deleted (or made a pull zone) meanwhile refuses
        found = await objections()  # the whole batch
        if found:
            raise _batch_error(found, len(items), 0, max_file)

    published = await request.app[PUBLISHER].upload(
        changes, f"Batch upload of {len(changes)} files via Storage API", precondition=writable)
    unchanged = len(published.unchanged)
    if not published.committed:
        message = f"All {len(changes)} files are identical to the stored ones; no commit was needed."
    elif unchanged:
        message = (f"Committed {len(changes) - unchanged} of {len(changes)} files in one commit; "
                   f"{unchanged} were identical to the stored ones.")
    else:
        message = f"Committed {len(changes)} files in one commit."
    return json_response({
        "HttpCode": 201, "Message": message, "Commit": published.commit.commit_id,
        # Physical paths (with `clients/`), as the pipeline's Files.
        "Files": [f.path.repo_path for f in files],
        "EdgeStatus": "purging" if published.replaced else "pending",
        "EdgeNote": published.edge_note, "DateCreated": utc_now_iso(),
    }, status=201)

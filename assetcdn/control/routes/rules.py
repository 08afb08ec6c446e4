"""Core plane: edge rules. GET/POST /api/core/rules (AccountKey).

The rule files ``_headers`` and ``_redirects`` (Cloudflare Pages syntax, see ``shared.edge_rules``)
live at the root of the git repository. A POST validates the whole file before anything is written:
a syntax error is a 400 naming the line, and nothing is committed. A valid file is one commit; the
commit refreshes the config every edge applies to its delivery responses.

Empty (or whitespace-only) ``Content`` removes the file: the rules of that file are then empty, and
GET reports ``null`` for it, as it does for a file that was never written.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.request_body import read_json
from assetcdn.control.storage.git_store import NothingToCommit
from assetcdn.control.storage.service import EDGE_CONFIG, GIT
from assetcdn.shared.edge_rules import RULE_FILES, RulesSyntaxError, parse_rule_file
from assetcdn.shared.errors import ApiError, bad_request
from assetcdn.shared.middleware import json_response
from assetcdn.shared.request_body import RULES_CONTENT_MAX
from assetcdn.shared.timestamps import as_iso_utc, utc_now_iso

MAX_CONTENT_LENGTH = RULES_CONTENT_MAX  # spec: edge rule content, max length 100000


async def get_rules(request: web.Request) -> web.Response:
    rules = await request.app[EDGE_CONFIG].rules()
    return json_response({"Headers": rules["_headers"], "Redirects": rules["_redirects"],
                          "Editable": list(RULE_FILES), "DateFetched": utc_now_iso()})


def parse_rules_update(body: Any) -> tuple[str, str]:
    """(file name, content) of a RulesUpdateRequest; the content is validated as that file."""
    if not isinstance(body, dict):
        raise bad_request('The body must be a JSON object: {"File": "_headers", "Content": "..."}.',
                          code="InvalidBody")
    file_name = body.get("File")
    if file_name is None:
        raise bad_request("Missing required field: File (one of _headers, _redirects).", target="File",
                          code="MissingFile")
    if file_name not in RULE_FILES:
        raise bad_request(f"'File' must be one of {', '.join(RULE_FILES)}.", target="File", code="InvalidFile")
    content = body.get("Content")
    if content is None:
        raise bad_request("Missing required field: Content (the whole file; an empty string removes it).",
                          target="Content", code="MissingContent")
    if not isinstance(content, str):
        raise bad_request("'Content' must be a string.", target="Content", code="InvalidContent")
    if len(content) > MAX_CONTENT_LENGTH:
        raise bad_request(f"'Content' is {len(content)} characters; the limit is {MAX_CONTENT_LENGTH}.",
                          target="Content", code="ContentTooLong")
    try:
        parse_rule_file(file_name, content)
    except RulesSyntaxError as exc:
        raise ApiError(400, "InvalidRules", f"{file_name} line {exc.line}: {exc.message} Nothing was committed.",
                       target="Content", details=[{"line": exc.line, "message": exc.message}]) from None
    return file_name, content


async def update_rules(request: web.Request) -> web.Response:
    file_name, content = parse_rules_update(await read_json(request))
    data = content.encode("utf-8") if content.strip() else None
    action = "updated" if data is not None else "removed"
    try:
        published = await request.app[PUBLISHER].commit({file_name: data}, f"Update edge rules: {file_name} {action}")
    except NothingToCommit:
        git = request.app[GIT]
        return json_response({
            "HttpCode": 200, "Message": f"{file_name} is unchanged; nothing was committed.", "File": file_name,
            "Commit": await git.run(git.head_commit_id), "EdgeStatus": "pending",
            "EdgeNote": "The content is identical to the stored file; edges already apply it.",
            "DateModified": utc_now_iso(),
        })
    return json_response({
        "HttpCode": 200, "Message": f"{file_name} {action} successfully", "File": file_name,
        "Commit": published.commit.commit_id, "EdgeStatus": "pending", "EdgeNote": published.edge_note,
        "DateModified": as_iso_utc(published.commit.committed_at),
    })

"""What every client sees on an error (the standard envelope) and how many commits a mutation made."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pygit2
from aiohttp import ClientResponse

from assetcdn.shared import API_VERSION

ERROR_FIELDS = {"code", "message", "target", "details", "innererror"}
ENVELOPE_FIELDS = {"error", "HttpCode", "Message", "requestId", "timestamp", "apiVersion"}


def parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert parsed.tzinfo is not None, value
    return parsed


async def expect_error(resp: ClientResponse, status: int, code: str) -> dict[str, Any]:
    """Assert the standard envelope with `status` and `code`; return the body for further checks."""
    body = await resp.json()
    assert resp.status == status, body
    assert ENVELOPE_FIELDS <= set(body), body
    assert set(body["error"]) == ERROR_FIELDS
    assert body["error"]["code"] == code, body
    assert body["error"]["message"] and body["Message"] == body["error"]["message"]
    assert isinstance(body["error"]["details"], list) and body["error"]["innererror"] is None
    assert body["HttpCode"] == status
    assert str(uuid.UUID(body["requestId"])) == body["requestId"]
    assert resp.headers["X-Request-ID"] == body["requestId"]
    assert body["apiVersion"] == API_VERSION == resp.headers["X-API-Version"]
    parse_time(body["timestamp"])
    assert resp.content_type == "application/json"
    return body


def _repo(data_dir: Path) -> pygit2.Repository:
    return pygit2.Repository(str(data_dir / "repo.git"))


def head_commit(data_dir: Path) -> str | None:
    try:
        return str(_repo(data_dir).revparse_single("refs/heads/main").id)
    except KeyError:
        return None


def commit_count(data_dir: Path) -> int:
    head = head_commit(data_dir)
    if head is None:
        return 0
    return sum(1 for _ in _repo(data_dir).walk(pygit2.Oid(hex=head)))


def repo_files(data_dir: Path, prefix: str = "") -> dict[str, str]:
    """Every file at HEAD under `prefix`, as {repository path: blob id}."""
    head = head_commit(data_dir)
    if head is None:
        return {}
    files: dict[str, str] = {}

    def walk(tree: pygit2.Tree, base: str) -> None:
        for obj in tree:
            if obj.type_str == "tree":
                walk(obj, base + obj.name + "/")
            else:
                files[base + obj.name] = str(obj.id)
    walk(_repo(data_dir).get(head).peel(pygit2.Tree), "")
    return {p: b for p, b in files.items() if p.startswith(prefix)}

"""Core rules: GET/POST /api/core/rules (AccountKey): one commit per update, validated before writing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.shared.cluster import PREFIX, sign_request
from tests.control.expect import commit_count, expect_error, head_commit, parse_time, repo_files
from tests.support.control import ACCESS, ACCOUNT, SECRETS

HEADERS = "/*.webp\n  Cache-Control: public, max-age=31536000, immutable\n  X-Tenant: yes\n"
REDIRECTS = "/old-logo /akande/v1/logos/logo.svg 301\n"


async def edge_config(control: TestClient) -> dict[str, Any]:
    path = PREFIX + "/config"
    resp = await control.get(path, headers=sign_request(SECRETS.cluster_secret, "GET", path))
    assert resp.status == 200
    return await resp.json()


async def test_get_before_any_rules_reports_null(control: TestClient) -> None:
    resp = await control.get("/api/core/rules", headers=ACCOUNT)
    assert resp.status == 200
    body = await resp.json()
    assert set(body) == {"Headers", "Redirects", "Editable", "DateFetched"}
    assert (body["Headers"], body["Redirects"], body["Editable"]) == (None, None, ["_headers", "_redirects"])
    parse_time(body["DateFetched"])


async def test_update_commits_one_file_at_the_root_and_reaches_the_edge_config(
        control: TestClient, data_dir: Path) -> None:
    before = commit_count(data_dir)
    resp = await control.post("/api/core/rules", json={"File": "_headers", "Content": HEADERS}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert set(body) == {"HttpCode", "Message", "File", "Commit", "EdgeStatus", "EdgeNote", "DateModified"}
    assert (body["HttpCode"], body["File"], body["EdgeStatus"]) == (200, "_headers", "pending")
    assert body["Commit"] == head_commit(data_dir)
    parse_time(body["DateModified"])
    assert commit_count(data_dir) == before + 1
    assert "_headers" in repo_files(data_dir)

    resp = await control.post("/api/core/rules", json={"File": "_redirects", "Content": REDIRECTS}, headers=ACCOUNT)
    assert resp.status == 200
    assert commit_count(data_dir) == before + 2

    got = await (await control.get("/api/core/rules", headers=ACCOUNT)).json()
    assert (got["Headers"], got["Redirects"]) == (HEADERS, REDIRECTS)
    config = await edge_config(control)
    assert (config["headers"], config["redirects"]) == (HEADERS, REDIRECTS)


async def test_identical_content_commits_nothing(control: TestClient, data_dir: Path) -> None:
    await control.post("/api/core/rules", json={"File": "_headers", "Content": HEADERS}, headers=ACCOUNT)
    head = head_commit(data_dir)
    resp = await control.post("/api/core/rules", json={"File": "_headers", "Content": HEADERS}, headers=ACCOUNT)
    assert resp.status == 200
    body = await resp.json()
    assert body["Commit"] == head == head_commit(data_dir)
    assert "unchanged" in body["Message"]


async def test_empty_content_removes_the_file(control: TestClient, data_dir: Path) -> None:
    await control.post("/api/core/rules", json={"File": "_redirects", "Content": REDIRECTS}, headers=ACCOUNT)
    resp = await control.post("/api/core/rules", json={"File": "_redirects", "Content": "  \n"}, headers=ACCOUNT)
    assert resp.status == 200
    assert "_redirects" not in repo_files(data_dir)
    got = await (await control.get("/api/core/rules", headers=ACCOUNT)).json()
    assert got["Redirects"] is None
    assert (await edge_config(control))["redirects"] is None


@pytest.mark.parametrize(("file_name", "content", "line"), [
    ("_headers", "/*.webp\n  Cache-Control: public\n  no colon here\n", 3),
    ("_headers", "  X-Orphan: value\n", 1),
    ("_redirects", "/a /b 301\n/c /d 999\n", 2),
    ("_redirects", "# comment\n/only-source\n", 2),
])
async def test_syntax_error_is_400_with_the_line_and_commits_nothing(
        control: TestClient, data_dir: Path, file_name: str, content: str, line: int) -> None:
    head = head_commit(data_dir)
    resp = await control.post("/api/core/rules", json={"File": file_name, "Content": content}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidRules")
    assert f"line {line}" in body["Message"]
    assert body["error"]["details"][0]["line"] == line
    assert body["error"]["details"][0]["message"]
    assert head_commit(data_dir) == head
    assert file_name not in repo_files(data_dir)


@pytest.mark.parametrize(("body", "code"), [
    ({"Content": HEADERS}, "MissingFile"),
    ({"File": "_routes.json", "Content": "{}"}, "InvalidFile"),
    ({"File": "_headers"}, "MissingContent"),
    ({"File": "_headers", "Content": 42}, "InvalidContent"),
    ({"File": "_headers", "Content": "#" * 100_001}, "ContentTooLong"),
    (["_headers"], "InvalidBody"),
])
async def test_bad_bodies_are_400(control: TestClient, data_dir: Path, body: Any, code: str) -> None:
    head = head_commit(data_dir)
    resp = await control.post("/api/core/rules", json=body, headers=ACCOUNT)
    await expect_error(resp, 400, code)
    assert head_commit(data_dir) == head


async def test_content_at_the_limit_is_accepted(control: TestClient) -> None:
    content = ("#" * 99 + "\n") * 1000
    assert len(content) == 100_000
    resp = await control.post("/api/core/rules", json={"File": "_headers", "Content": content}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert (body["HttpCode"], body["File"], body["EdgeStatus"]) == (200, "_headers", "pending")
    got = await (await control.get("/api/core/rules", headers=ACCOUNT)).json()
    assert got["Headers"] == content      # stored whole, not cut at the limit


async def test_invalid_json_is_400(control: TestClient) -> None:
    resp = await control.post("/api/core/rules", data=b"{nope", headers=ACCOUNT)
    await expect_error(resp, 400, "InvalidJson")


@pytest.mark.parametrize("headers", [{}, ACCESS])
async def test_account_key_is_required(control: TestClient, headers: dict[str, str]) -> None:
    await expect_error(await control.get("/api/core/rules", headers=headers), 401, "Unauthorized")
    resp = await control.post("/api/core/rules", json={"File": "_headers", "Content": HEADERS}, headers=headers)
    await expect_error(resp, 401, "Unauthorized")


async def test_the_reference_states_the_content_length_the_route_enforces(control: TestClient) -> None:
    reference = await (await control.get("/api/openapi.json")).json()
    body = reference["paths"]["/api/core/rules"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    longest = body["properties"]["Content"]["maxLength"]
    assert longest == 100_000
    comment = "# " + "x" * 1000 + "\n"
    at_limit = comment * (longest // len(comment)) + "#" * (longest % len(comment))
    assert len(at_limit) == longest
    resp = await control.post("/api/core/rules", json={"File": "_headers", "Content": at_limit}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    await expect_error(await control.post("/api/core/rules", json={"File": "_headers", "Content": at_limit + "#"},
                                          headers=ACCOUNT), 400, "ContentTooLong")

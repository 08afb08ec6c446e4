"""Validation edges through the HTTP API: names, paths, tags, hostnames and numbers that look valid to
a `^...$` pattern or to `str.isdigit()` but are not, and spellings of `.git` that git itself refuses.

Each is a 400 in the envelope of its endpoint, leaves nothing behind, and is never a 500.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient

from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.routes.zones import zone_scaffold
from assetcdn.shared.cluster import SIGNATURE_HEADER, TIMESTAMP_HEADER
from tests.control.expect import commit_count, expect_error, head_commit
from tests.support.control import ACCESS, ACCOUNT, SECRETS, control_with_zone
from tests.support.sockets import raw_answer

PURGE = {"x-api-key": SECRETS.purge_key}


async def expect_legacy_400(resp: Any) -> dict[str, Any]:
    body = await resp.json()
    assert resp.status == 400, body
    assert isinstance(body["error"], str) and body["HttpCode"] == 400 and body["requestId"]
    return body


# -- zone names ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["nlzone\n", "nlzone\r\n", "nlzone\t", " nlzone", "nlzone "])
async def test_zone_name_with_a_trailing_newline_or_space_is_400(control: TestClient, data_dir: Path,
                                                                 name: str) -> None:
    resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidName")
    assert body["error"]["target"] == "Name"
    assert head_commit(data_dir) is None
    assert await (await control.get("/api/core/zones", headers=ACCOUNT)).json() == []


async def test_a_zone_created_under_the_old_rules_can_still_be_deleted(control: TestClient, data_dir: Path) -> None:
    await control.app[PUBLISHER].commit(zone_scaffold("nlzone\n"), "a zone the old pattern let through")
    listed = await (await control.get("/api/core/zones", headers=ACCOUNT)).json()
    assert [z["Name"] for z in listed] == ["nlzone\n"]
    assert (await control.get("/api/core/zones/nlzone%0A", headers=ACCOUNT)).status == 200
    resp = await control.delete("/api/core/zones/nlzone%0A", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    assert await (await control.get("/api/core/zones", headers=ACCOUNT)).json() == []


async def test_pipeline_client_name_with_a_trailing_newline_is_400(control: TestClient, data_dir: Path) -> None:
    svg = "<svg xmlns='http://www.w3.org/2000/svg' width='10' height='10'/>"
    resp = await control.post("/api/pipeline", json={"mode": "client", "name": "nlzone\n", "svg": svg},
                              headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidName")
    assert body["error"]["target"] == "name"
    assert head_commit(data_dir) is None


async def test_insights_zone_with_a_trailing_newline_is_400(control: TestClient) -> None:
    resp = await control.get("/api/insights/summary", params={"zone": "akande\n"}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidParameter")
    assert body["error"]["target"] == "zone"


# -- storage paths -------------------------------------------------------------------------------------

# Spellings of .git (and the other forbidden names) that git treats as .git: case, trailing dots and
# spaces, the 8.3 short name. Before the fix, the first six reached git and answered 500.
FORBIDDEN = [".GIT/x.svg", ".Git/x.svg", ".git./x.svg", ".git /x.svg", ".git.. . /x.svg", "GIT~1/x.svg",
             "git~1./x.svg", ".GITHUB/x.svg", "Node_Modules/x.svg", "..../x.svg", ".. /x.svg", ". /x.svg"]
# Characters that must never reach git or a response header: control characters (newline first),
# NUL and backslash, sent percent-encoded as a client would.
CONTROL = ["x.svg\n", "x\n.svg", "x.svg\r", "a\tb.svg", "a\x1bb.svg", "a\x7fb.svg", "a\x85b.svg", "a\x00b.svg",
           "a\\b.svg"]


def storage_url(tail: str) -> str:
    return "/api/storage/akande/v1/logos/" + quote(tail, safe="/")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def with_a_zone(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[TestClient, Path]]:
    """Shared by the path refusals below: each checks that no commit was made."""
    data_dir = tmp_path_factory.mktemp("forbidden-paths") / "data"
    async with control_with_zone(data_dir) as client:
        yield client, data_dir


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("tail", FORBIDDEN + CONTROL)
async def test_upload_to_a_forbidden_or_control_character_path_is_400(with_a_zone: tuple[TestClient, Path],
                                                                      tail: str) -> None:
    control, data_dir = with_a_zone
    commits = commit_count(data_dir)
    resp = await control.put(storage_url(tail), data=b"<svg/>", headers=ACCESS)
    body = await expect_error(resp, 400, "InvalidPath")
    assert body["error"]["target"] == "path"
    assert commit_count(data_dir) == commits


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("tail", FORBIDDEN + CONTROL)
@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_reading_or_deleting_a_forbidden_path_is_400(with_a_zone: tuple[TestClient, Path], method: str,
                                                           tail: str) -> None:
    control, data_dir = with_a_zone
    commits = commit_count(data_dir)
    resp = await control.request(method, storage_url(tail), headers=ACCESS)
    await expect_error(resp, 400, "InvalidPath")
    assert commit_count(data_dir) == commits


@pytest.mark.parametrize("tail", [".GIT/x.svg", "git~1/x.svg", "x.svg\n"])
async def test_batch_with_a_forbidden_path_is_400_and_writes_nothing(control: TestClient, zone: str,
                                                                     data_dir: Path, tail: str) -> None:
    commits = commit_count(data_dir)
    files = [{"path": "akande/v1/logos/ok.svg", "content": "<svg/>", "encoding": "utf-8"},
             {"path": f"akande/v1/logos/{tail}", "content": "<svg/>", "encoding": "utf-8"}]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    body = await expect_error(resp, 400, "InvalidBatch")
    assert [p["index"] for p in body["error"]["details"]] == [1]
    assert commit_count(data_dir) == commits


async def test_names_git_accepts_are_still_accepted(control: TestClient, zone: str) -> None:
    for tail in (".gitkeep.svg", "git~2/x.svg", ".git.svg", "x.y.svg", "logo (dark)@2x.svg"):
        resp = await control.put(storage_url(tail), data=b"<svg/>", headers=ACCESS)
        assert resp.status == 201, (tail, await resp.text())


# -- purge --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tag", ["project-akande\n", "project-akande\r", "\nproject-akande", "a b", "é"])
async def test_purge_tag_with_a_newline_is_400_naming_it(control: TestClient, tag: str) -> None:
    resp = await control.post("/api/purge", json={"tags": ["ok-tag", tag]}, headers=PURGE)
    body = await expect_legacy_400(resp)
    assert body["invalid"] == [tag]


@pytest.mark.parametrize("url", ["https://cdn.example.com/akande/v1/logos/a.svg\n",
                                 "https://cdn.example.com/akande/v1/lo\ngos/a.svg",
                                 "https://cdn.example.com/akande/v1/logos/a\t.svg",
                                 "/akande/v1/logos/a.svg\n"])
async def test_purge_url_with_a_newline_is_400_naming_it(control: TestClient, url: str) -> None:
    # urlsplit silently drops tabs and newlines: without the check this purged a different URL.
    resp = await control.post("/api/purge", json={"urls": [url]}, headers=PURGE)
    body = await expect_legacy_400(resp)
    assert body["invalid"] == [url]


# -- custom domains ------------------------------------------------------------------------------------

@pytest.mark.parametrize("hostname", ["cdn.example.com\n", "cdn\n.example.com", "cdn.example.com\t",
                                      "cdn.example.com\r\n", "cdn.example.com..", "cdn.exampl\u212a.com"])
async def test_hostname_with_a_newline_is_400(control: TestClient, zone: str, hostname: str) -> None:
    resp = await control.post(f"/api/core/zones/{zone}/domains", json={"Hostname": hostname}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidHostname")
    assert body["error"]["target"] == "Hostname"
    listed = await (await control.get(f"/api/core/zones/{zone}/domains", headers=ACCOUNT)).json()
    assert listed["Domains"] == []


async def test_hostname_with_surrounding_spaces_and_a_final_dot_is_normalised(control: TestClient,
                                                                               zone: str) -> None:
    resp = await control.post(f"/api/core/zones/{zone}/domains", json={"Hostname": " CDN.Example.com. "},
                              headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["Hostname"] == "cdn.example.com"


# -- edge rules ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", ["/a /b \u00b2\n", "/a /b \u0663\u0660\u0661\n", "/a /b\x01c 301\n",
                                     "/a\x7f /b 301\n"])
async def test_redirect_line_with_odd_digits_or_control_characters_is_400(control: TestClient, data_dir: Path,
                                                                         content: str) -> None:
    resp = await control.post("/api/core/rules", json={"File": "_redirects", "Content": content}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidRules")
    assert body["error"]["details"][0]["line"] == 1
    assert head_commit(data_dir) is None


# -- numbers ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cursor", ["\u00b2", "\u0663", "1\n", str(2**63), "9" * 30, "9" * 5000])  # SQLite's integers: 64 bits
async def test_log_cursor_that_is_not_ascii_digits_is_400(control: TestClient, cursor: str) -> None:
    resp = await control.get("/api/logs", params={"cursor": cursor}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidParameter")
    assert body["error"]["target"] == "cursor"


@pytest.mark.parametrize("number", ["9" * 5000, "-" + "9" * 5000])  # int() reads at most 4,300 digits
@pytest.mark.parametrize(("target", "headers"), [
    ("/api/analytics?days=N", {"x-api-key": SECRETS.analytics_key}), ("/api/core/statistics?days=N", ACCOUNT),
    ("/api/insights/summary?days=N", ACCOUNT), ("/api/core/audit-logs?days=N", ACCOUNT),
    ("/api/core/audit-logs?limit=N", ACCOUNT), ("/api/logs?limit=N", ACCOUNT),
    ("/api/webhooks/deliveries?limit=N", ACCOUNT), ("/api/webhooks/dead-letters?limit=N", ACCOUNT)])
async def test_a_clamped_number_of_any_length_is_clamped(control: TestClient, target: str, headers: dict[str, str],
                                                         number: str) -> None:
    resp = await control.get(target.replace("N", number), headers=headers)
    assert resp.status == 200, await resp.text()


async def test_cluster_timestamp_that_is_not_ascii_digits_is_401(control: TestClient) -> None:
    resp = await control.get("/_cluster/config", headers={TIMESTAMP_HEADER: "\u00b2", SIGNATURE_HEADER: "00"})
    await expect_error(resp, 401, "Unauthorized")


@pytest.mark.parametrize("country", ["DE\n", "de\n"])
async def test_analytics_country_with_a_trailing_newline_is_400(control: TestClient, country: str) -> None:
    hit = {"path": "akande/v1/logos/a.svg", "bytes": 10, "status": 200, "cache": "HIT", "country": country}
    await expect_legacy_400(await control.post("/api/analytics", json=hit))


# -- credentials -----------------------------------------------------------------------------------------

# A credential field whose bytes are not UTF-8, each on a route that reads that field: the server reads such a
# value with surrogate escapes, and each comparison with the secret (or its hash) took it as text.
NOT_UTF8_CREDENTIALS = [
    ("GET", "/api/storage/akande/", b"AccessKey: \xff\xfe"),
    ("GET", "/api/core/zones", b"AccountKey: a\xc3"),
    ("GET", "/api/analytics", b"x-api-key: \xff"),
    ("GET", "/api/core/zones", b"Authorization: Bearer cdnsk_" + b"a" * 39 + b"\xff"),
    ("GET", "/metrics", b"Authorization: Bearer \xff"),
    ("GET", "/api/health?deep=1", b"Authorization: Bearer \xff"),
]


@pytest.mark.parametrize(("method", "target", "field"), NOT_UTF8_CREDENTIALS)
async def test_a_credential_that_is_not_utf8_is_401(control: TestClient, zone: str, method: str, target: str,
                                                    field: bytes) -> None:
    assert control.server.port is not None
    answer = await raw_answer(control.server.port, f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                              + field + b"\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401 "), answer[:300]
    assert b"Unauthorized" in body

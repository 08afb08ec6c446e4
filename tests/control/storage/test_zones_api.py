"""Core zones: GET/POST /api/core/zones, GET/DELETE /api/core/zones/{id} (AccountKey only)."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema_rs
import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import MANIFEST
from assetcdn.shared import paths
from tests.control.expect import commit_count, expect_error, head_commit, parse_time, repo_files
from tests.support.control import ACCESS, ACCOUNT

CATEGORIES = ["banners", "github", "icons", "logos", "titles"]
RESERVED = ["stocks", "shared", "website", "functions", "api", "dashboard", "dist", "content", "global", "clients"]
ZONE_FIELDS = {"Kind", "Origin", "Id", "Name", "StorageZoneName", "OriginUrl", "FileCount", "StorageUsed",
               "StorageUsedHuman", "Categories", "DateCreated", "Enabled", "Suspended"}


async def put(client: TestClient, path: str, data: bytes) -> None:
    resp = await client.put(f"/api/storage/{path}", data=data, headers=ACCESS)
    assert resp.status == 201, await resp.text()


async def test_create_scaffolds_v1_directories_in_one_commit(control: TestClient, data_dir: Path) -> None:
    before = commit_count(data_dir)
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201
    body = await resp.json()
    assert set(body) == {"HttpCode", "Message", "Kind", "Origin", "Id", "Name", "OriginUrl", "Commit", "Directories",
                         "EdgeStatus", "EdgeNote", "DateCreated"}
    assert (body["Kind"], body["Origin"]) == ("storage", None)
    assert (body["HttpCode"], body["Id"], body["Name"], body["EdgeStatus"]) == (201, "akande", "akande", "pending")
    assert body["Directories"] == CATEGORIES  # the bare names of the v1/ sub-directories, as the OpenAPI example
    assert body["OriginUrl"].startswith("http") and body["OriginUrl"].endswith("/akande/")
    assert body["Commit"] == head_commit(data_dir)
    parse_time(body["DateCreated"])
    assert commit_count(data_dir) == before + 1
    assert sorted(repo_files(data_dir, "clients/akande/")) == [f"clients/akande/v1/{c}/.gitkeep" for c in CATEGORIES]


async def test_list_and_detail_reflect_the_files(control: TestClient, zone: str) -> None:
    await put(control, "akande/v1/logos/logo.svg", b"<svg/>")
    await put(control, "akande/v1/icons/192.png", b"x" * 2048)
    resp = await control.get("/api/core/zones", headers=ACCOUNT)
    assert resp.status == 200
    zones = await resp.json()
    assert isinstance(zones, list)  # a bare array, as the API reference says
    (listed,) = zones
    assert set(listed) == ZONE_FIELDS
    assert (listed["Id"], listed["Name"], listed["FileCount"], listed["StorageUsed"]) == ("akande", "akande", 2, 2054)
    assert listed["StorageUsedHuman"] == "2.0 KB"
    assert listed["Categories"] == ["icons", "logos"]
    assert (listed["Enabled"], listed["Suspended"]) == (True, False)
    parse_time(listed["DateCreated"])

    resp = await control.get("/api/core/zones/akande", headers=ACCOUNT)
    assert resp.status == 200
    detail = await resp.json()
    assert set(detail) == ZONE_FIELDS | {"Formats", "Files"}
    assert detail["Formats"] == ["png", "svg"]
    assert detail["Files"] == [
        {"Path": "akande/v1/icons/192.png", "Name": "192.png", "Format": "png", "Size": 2048, "Category": "icons"},
        {"Path": "akande/v1/logos/logo.svg", "Name": "logo.svg", "Format": "svg", "Size": 6, "Category": "logos"},
    ]
    assert detail["DateCreated"] == listed["DateCreated"]


async def test_empty_zone_is_listed_with_no_files(control: TestClient, zone: str) -> None:
    detail = await (await control.get("/api/core/zones/akande", headers=ACCOUNT)).json()
    assert (detail["FileCount"], detail["StorageUsed"], detail["Files"], detail["Categories"]) == (0, 0, [], [])


async def test_delete_removes_every_file_in_one_commit(control: TestClient, zone: str, data_dir: Path) -> None:
    await put(control, "akande/v1/logos/logo.svg", b"<svg/>")
    await put(control, "akande/v1/icons/192.png", b"png")
    before = commit_count(data_dir)
    resp = await control.delete("/api/core/zones/akande", headers=ACCOUNT)
    assert resp.status == 200
    body = await resp.json()
    assert (body["HttpCode"], body["FilesRemoved"], body["EdgeStatus"]) == (200, 2, "purging")
    assert "2" in body["Message"]
    assert body["Commit"] == head_commit(data_dir)
    assert commit_count(data_dir) == before + 1
    assert repo_files(data_dir, "clients/akande/") == {}
    assert control.app[MANIFEST].zone_entries("akande") == []
    assert await (await control.get("/api/core/zones", headers=ACCOUNT)).json() == []
    await expect_error(await control.get("/api/core/zones/akande", headers=ACCOUNT), 404, "ZoneNotFound")
    # The name is free again.
    assert (await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)).status == 201


async def test_lower_case_name_field_is_accepted(control: TestClient) -> None:
    resp = await control.post("/api/core/zones", json={"name": "bantu-2"}, headers=ACCOUNT)
    assert resp.status == 201
    assert (await resp.json())["Id"] == "bantu-2"


@pytest.mark.parametrize("name", RESERVED)
async def test_reserved_names_are_400(control: TestClient, data_dir: Path, name: str) -> None:
    resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidName")
    assert "reserved" in body["Message"]
    assert body["error"]["target"] == "Name"
    assert head_commit(data_dir) is None


@pytest.mark.parametrize("name", ["v1", "metrics"])
async def test_a_name_the_edges_read_as_another_path_is_400(control: TestClient, data_dir: Path, name: str) -> None:
    """On a zone's own host `/v1/...` is short for `/<zone>/v1/...`, so a zone named `v1` could not be named in full
    there: `/v1/v1/logos/a.png` read as `/v1/v1/v1/logos/a.png`, 404 where every other zone's full path is its file,
    and the signed URL `assetcdn sign` prints (the full path) 403 `Invalid signature`. `/metrics` is the edges' own
    route, so a pull zone named `metrics` would lose the root of its origin (`/<zone>`) on the default host. Both
    are refused as reserved names are; a zone made under such a name before keeps working."""
    resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidName")
    assert f"Zone name '{name}' is reserved" in body["Message"] and body["error"]["target"] == "Name"
    assert head_commit(data_dir) is None
    reference = await (await control.get("/api/openapi.json")).json()
    described = reference["paths"]["/api/core/zones"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["properties"]["Name"]["description"]
    assert name in described.split("reserved name (", 1)[1]


async def test_a_zone_made_under_a_name_reserved_since_keeps_working(control: TestClient,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as before:  # as an earlier version made it
        before.setattr(paths, "RESERVED_ZONE_NAMES", paths.RESERVED_ZONE_NAMES - {"v1"})
        resp = await control.post("/api/core/zones", json={"Name": "v1"}, headers=ACCOUNT)
        assert resp.status == 201, await resp.text()
    await put(control, "v1/v1/logos/kept.svg", b"<svg/>")
    resp = await control.get("/api/core/zones/v1", headers=ACCOUNT)
    assert resp.status == 200 and [f["Name"] for f in (await resp.json())["Files"]] == ["kept.svg"]
    resp = await control.delete("/api/core/zones/v1", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()


@pytest.mark.parametrize("name", ["a", "x" * 65, "Akande", "ak_ande", "ak ande", "ak.ande", "akande/x", "../etc",
                                  "ak%2e", "zoné"])
async def test_names_outside_the_pattern_are_400(control: TestClient, data_dir: Path, name: str) -> None:
    resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidName")
    assert "^[a-z0-9-]{2,64}$" in body["Message"]
    assert head_commit(data_dir) is None


async def test_longest_and_shortest_names_are_accepted(control: TestClient) -> None:
    for name in ("ab", "9" * 64):
        assert (await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)).status == 201


@pytest.mark.parametrize("body", [{}, {"Name": ""}, {"Name": None}])
async def test_missing_name_is_400(control: TestClient, body: dict) -> None:
    await expect_error(await control.post("/api/core/zones", json=body, headers=ACCOUNT), 400, "MissingName")


@pytest.mark.parametrize("name", [42, 0, True, ["akande"], {"Name": "akande"}])
async def test_a_name_that_is_no_string_is_an_invalid_name_not_a_missing_one(control: TestClient, data_dir: Path,
                                                                              name: object) -> None:
    """A name of another type was answered MissingName "'Name' is required" though one was sent; an invalid value
    is InvalidName, as for the pipeline's `name` (assetcdn/control/svg_kit/generate.py) and other fields' types."""
    resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidName")
    assert body["error"]["target"] == "Name" and "^[a-z0-9-]{2,64}$" in body["Message"]
    assert head_commit(data_dir) is None


async def test_body_that_is_not_an_object_is_400(control: TestClient) -> None:
    resp = await control.post("/api/core/zones", json=["akande"], headers=ACCOUNT)
    await expect_error(resp, 400, "InvalidBody")


@pytest.mark.parametrize("raw", [b"{", b"", b"Name=akande"])
async def test_bad_json_is_400(control: TestClient, raw: bytes) -> None:
    resp = await control.post("/api/core/zones", data=raw, headers={**ACCOUNT, "Content-Type": "application/json"})
    await expect_error(resp, 400, "InvalidJson")


async def test_duplicate_zone_is_409_and_commits_nothing(control: TestClient, zone: str, data_dir: Path) -> None:
    head = head_commit(data_dir)
    resp = await control.post("/api/core/zones", json={"Name": zone}, headers=ACCOUNT)
    body = await expect_error(resp, 409, "ZoneExists")
    assert zone in body["Message"]
    assert head_commit(data_dir) == head


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("name", ["nobody", "NOBODY", "stocks"])
async def test_unknown_zone_is_404(control: TestClient, zone: str, data_dir: Path, method: str, name: str) -> None:
    head = head_commit(data_dir)
    resp = await control.request(method, f"/api/core/zones/{name}", headers=ACCOUNT)
    body = await expect_error(resp, 404, "ZoneNotFound")
    assert body["error"]["target"] == "id"
    assert head_commit(data_dir) == head


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/core/zones"), ("POST", "/api/core/zones"),
                                              ("GET", "/api/core/zones/akande"),
                                              ("DELETE", "/api/core/zones/akande")])
async def test_core_routes_refuse_the_access_key(control: TestClient, zone: str, data_dir: Path,
                                                method: str, path: str) -> None:
    head = head_commit(data_dir)
    for headers in (ACCESS, {}, {"AccountKey": "wrong"}):
        resp = await control.request(method, path, json={"Name": "other"}, headers=headers)
        await expect_error(resp, 401, "Unauthorized")
    assert head_commit(data_dir) == head


async def test_concurrent_creates_of_one_zone_give_one_201_and_409s(control: TestClient) -> None:
    import asyncio

    responses = await asyncio.gather(*(control.post("/api/core/zones", json={"Name": "racer"}, headers=ACCOUNT)
                                       for _ in range(5)))
    assert sorted(r.status for r in responses) == [201, 409, 409, 409, 409]
    for resp in responses:
        if resp.status == 409:
            assert (await resp.json())["error"]["code"] == "ZoneExists"


async def test_concurrent_deletes_of_one_zone_give_one_200_and_404s(control: TestClient, zone: str) -> None:
    import asyncio

    responses = await asyncio.gather(*(control.delete(f"/api/core/zones/{zone}", headers=ACCOUNT)
                                       for _ in range(4)))
    assert sorted(r.status for r in responses) == [200, 404, 404, 404]


async def test_an_upload_racing_a_zone_delete_never_revives_the_zone(control: TestClient, zone: str) -> None:
    import asyncio

    delete = control.delete(f"/api/core/zones/{zone}", headers=ACCOUNT)
    uploads = [control.put(f"/api/storage/{zone}/v1/logos/l{i}.svg", data=b"<svg/>", headers=ACCESS)
               for i in range(4)]
    results = await asyncio.gather(delete, *uploads)
    assert results[0].status == 200
    assert all(r.status in (201, 404) for r in results[1:])
    listed = await control.get("/api/core/zones", headers=ACCOUNT)
    assert zone not in [z["Name"] for z in await listed.json()]


async def test_the_reference_states_the_zone_name_pattern_the_route_enforces(control: TestClient) -> None:
    # A client made from /api/openapi.json can check a name before sending it: the pattern is the route's own.
    reference = await (await control.get("/api/openapi.json")).json()
    body = reference["paths"]["/api/core/zones"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    pattern = body["properties"]["Name"]["pattern"]
    assert pattern == "^[a-z0-9-]{2,64}$"
    for name, status in (("a" * 64, 201), ("a" * 65, 400), ("a", 400), ("Upper", 400), ("a_b", 400)):
        assert (re.fullmatch(pattern.strip("^$"), name) is not None) == (status == 201)
        resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
        assert resp.status == status, (name, await resp.text())


async def test_the_reference_names_every_field_of_a_zone_and_of_its_files(control: TestClient, zone: str) -> None:
    """A client made from /api/openapi.json reads a zone's fields, and a detail's Files, from the document: each field
    answered is one the Zone schema names as required (the detail's Formats and Files aside: the list has neither)."""
    await put(control, "akande/v1/logos/logo.svg", b"<svg/>")
    reference = await (await control.get("/api/openapi.json")).json()
    schema = reference["components"]["schemas"]["Zone"]
    validator = jsonschema_rs.Draft202012Validator({**schema, "components": reference["components"]},
                                                   validate_formats=True)
    (listed,) = await (await control.get("/api/core/zones", headers=ACCOUNT)).json()
    detail = await (await control.get("/api/core/zones/akande", headers=ACCOUNT)).json()
    assert [error.message for answer in (listed, detail) for error in validator.iter_errors(answer)] == []
    assert set(listed) == set(schema["required"]) == ZONE_FIELDS
    assert set(detail) == set(schema["properties"])
    file_schema = schema["properties"]["Files"]["items"]
    assert set(detail["Files"][0]) == set(file_schema["required"]) == set(file_schema["properties"])

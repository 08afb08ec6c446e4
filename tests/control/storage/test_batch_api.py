"""POST /api/storage/batch: up to 50 files in one atomic commit, or nothing at all."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import MANIFEST
from tests.control.expect import commit_count, expect_error, head_commit, parse_time, repo_files
from tests.control.storage.commit_gate import held_commit_lock
from tests.support.control import ACCESS, ACCOUNT, SMALL_LIMIT


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def item(name: str, data: bytes = b"<svg/>", **extra: Any) -> dict[str, Any]:
    return {"path": f"akande/v1/icons/{name}", "content": b64(data), **extra}



async def test_batch_commits_every_file_in_one_commit(control: TestClient, zone: str, data_dir: Path) -> None:
    before = commit_count(data_dir)
    files = [item("a.svg", b"<svg>a</svg>"),
             {"path": "akande/v1/icons/b.txt", "content": "plain text", "encoding": "utf-8"},
             {"path": "clients/akande/v1/logos/c.svg", "content": b64(b"<svg>c</svg>"), "encoding": "base64"}]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert set(body) == {"HttpCode", "Message", "Commit", "Files", "EdgeStatus", "EdgeNote", "DateCreated"}
    assert body["HttpCode"] == 201
    assert "3" in body["Message"]
    assert body["Files"] == ["clients/akande/v1/icons/a.svg", "clients/akande/v1/icons/b.txt",
                             "clients/akande/v1/logos/c.svg"]
    assert body["Commit"] == head_commit(data_dir)
    assert body["EdgeStatus"] == "pending"
    parse_time(body["DateCreated"])
    assert commit_count(data_dir) == before + 1
    got = await control.get("/api/storage/akande/v1/icons/b.txt", headers=ACCESS)
    assert await got.read() == b"plain text"
    got = await control.get("/api/storage/akande/v1/logos/c.svg", headers=ACCESS)
    assert await got.read() == b"<svg>c</svg>"
    assert {"akande/v1/icons/a.svg", "akande/v1/logos/c.svg"} <= set(control.app[MANIFEST].entries)


async def test_batch_overwriting_a_file_reports_purging(control: TestClient, zone: str) -> None:
    resp = await control.post("/api/storage/batch", json={"files": [item("a.svg")]}, headers=ACCESS)
    assert (await resp.json())["EdgeStatus"] == "pending"
    resp = await control.post("/api/storage/batch", json={"files": [item("a.svg", b"<svg>2</svg>"), item("n.svg")]},
                              headers=ACCESS)
    assert resp.status == 201
    assert (await resp.json())["EdgeStatus"] == "purging"


async def test_fifty_files_is_the_maximum(control: TestClient, zone: str, data_dir: Path) -> None:
    before = commit_count(data_dir)
    resp = await control.post("/api/storage/batch", json={"files": [item(f"{i}.svg") for i in range(50)]},
                              headers=ACCESS)
    assert resp.status == 201
    assert len((await resp.json())["Files"]) == 50
    assert commit_count(data_dir) == before + 1


async def test_fifty_one_files_is_400_and_commits_nothing(control: TestClient, zone: str, data_dir: Path) -> None:
    head = head_commit(data_dir)
    resp = await control.post("/api/storage/batch", json={"files": [item(f"{i}.svg") for i in range(51)]},
                              headers=ACCESS)
    body = await expect_error(resp, 400, "TooManyFiles")
    assert body["error"]["target"] == "files"
    assert head_commit(data_dir) == head
    assert repo_files(data_dir, "clients/akande/v1/icons/") == {
        "clients/akande/v1/icons/.gitkeep": repo_files(data_dir)["clients/akande/v1/icons/.gitkeep"]}


@pytest.mark.parametrize(("bad", "why"), [
    ({"path": "akande/v1/icons/../../x.svg", "content": b64(b"x")}, "Invalid path"),
    ({"path": "akande/v1/icons/%2e%2e/x.svg", "content": b64(b"x")}, "Invalid path"),
    ({"path": "akande/.git/hooks/pre-commit.sh", "content": b64(b"x")}, "Invalid path"),
    ({"path": "akande/v1/icons/", "content": b64(b"x")}, "file name"),
    ({"path": "akande/v1/icons/x.svg", "content": "not base64!"}, "base64"),
    ({"path": "akande/v1/icons/x.svg", "content": "x", "encoding": "latin-1"}, "encoding"),
    ({"path": "akande/v1/icons/x.svg"}, "content"),
    ({"content": b64(b"x")}, "path"),
    ({"path": "nobody/v1/icons/x.svg", "content": b64(b"x")}, "nobody"),
    ({"path": "akande/v1/icons/ok0.svg", "content": b64(b"dup")}, "more than once"),
    ({"path": "akande/v1/icons/ok0.svg/inner.png", "content": b64(b"x")}, "Path conflict"),
    ("just a string", "object"),
])
async def test_one_invalid_file_among_valid_ones_commits_nothing(control: TestClient, zone: str, data_dir: Path,
                                                                 bad: Any, why: str) -> None:
    head = head_commit(data_dir)
    files = [item("ok0.svg"), item("ok1.svg"), bad, item("ok2.svg")]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    body = await expect_error(resp, 400, "InvalidBatch")
    details = body["error"]["details"]
    assert [d["index"] for d in details] == [2]
    assert why in details[0]["message"]
    if isinstance(bad, dict) and "path" in bad:
        assert details[0]["path"] == bad["path"]
    assert "nothing was committed" in body["Message"]
    assert head_commit(data_dir) == head
    assert "akande/v1/icons/ok0.svg" not in control.app[MANIFEST].entries


async def test_file_clashing_with_a_stored_file_commits_nothing(control: TestClient, zone: str,
                                                                data_dir: Path) -> None:
    assert (await control.post("/api/storage/batch", json={"files": [item("a.svg")]}, headers=ACCESS)).status == 201
    head = head_commit(data_dir)
    files = [item("b.svg"), item("a.svg/inner.png")]
    body = await expect_error(await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS),
                              400, "InvalidBatch")
    assert [(d["index"], d["path"]) for d in body["error"]["details"]] == [(1, "akande/v1/icons/a.svg/inner.png")]
    assert head_commit(data_dir) == head
    assert "akande/v1/icons/a.svg" in control.app[MANIFEST].entries


@pytest.mark.parametrize("body", [{}, {"files": "x"}, {"files": []}, [1, 2]])
async def test_body_without_a_files_array_is_400(control: TestClient, zone: str, body: Any) -> None:
    resp = await control.post("/api/storage/batch", json=body, headers=ACCESS)
    await expect_error(resp, 400, "InvalidBody")


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"files": [}'])
async def test_bad_json_is_400_invalid_json(control: TestClient, zone: str, data_dir: Path, raw: bytes) -> None:
    head = head_commit(data_dir)
    resp = await control.post("/api/storage/batch", data=raw,
                              headers={**ACCESS, "Content-Type": "application/json"})
    await expect_error(resp, 400, "InvalidJson")
    assert head_commit(data_dir) == head


async def test_files_are_the_physical_paths_with_their_storage_root(control: TestClient, zone: str) -> None:
    files = [{"path": "akande/v1/logos/x.svg", "content": b64(b"<svg>x</svg>")},
             {"path": "clients/akande/v1/logos/y.svg", "content": b64(b"<svg>y</svg>")},
             {"path": "stocks/images/z.svg", "content": b64(b"<svg>z</svg>")}]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["Files"] == [
        "clients/akande/v1/logos/x.svg", "clients/akande/v1/logos/y.svg", "stocks/images/z.svg"]


async def test_identical_batch_is_an_overwrite_that_commits_nothing(control: TestClient, zone: str,
                                                                   data_dir: Path) -> None:
    resp = await control.post("/api/storage/batch", json={"files": [item("a.svg")]}, headers=ACCESS)
    assert resp.status == 201
    head, count = head_commit(data_dir), commit_count(data_dir)
    generation = control.app[MANIFEST].generation
    resp = await control.post("/api/storage/batch", json={"files": [item("a.svg")]}, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 201, body
    assert (body["EdgeStatus"], body["Commit"], body["Files"]) == ("purging", head, ["clients/akande/v1/icons/a.svg"])
    assert "identical" in body["Message"] and "no commit" in body["EdgeNote"]
    assert (head_commit(data_dir), commit_count(data_dir)) == (head, count)
    delta = await control.app[MANIFEST].changes_since(generation)
    assert delta is not None and delta.purges == [{"urls": ["/akande/v1/icons/a.svg"]}]


async def test_batch_of_new_and_identical_files_purges_the_identical_ones(control: TestClient, zone: str,
                                                                         data_dir: Path) -> None:
    assert (await control.post("/api/storage/batch", json={"files": [item("a.svg")]}, headers=ACCESS)).status == 201
    count = commit_count(data_dir)
    generation = control.app[MANIFEST].generation
    resp = await control.post("/api/storage/batch", json={"files": [item("a.svg"), item("new.svg")]},
                              headers=ACCESS)
    body = await resp.json()
    assert (resp.status, body["EdgeStatus"], body["Commit"]) == (201, "purging", head_commit(data_dir))
    assert commit_count(data_dir) == count + 1
    delta = await control.app[MANIFEST].changes_since(generation)
    assert delta is not None and delta.purges == [{"urls": ["/akande/v1/icons/a.svg"]}]
    assert [c.path for c in delta.changes] == ["akande/v1/icons/new.svg"]


async def test_a_batch_racing_a_zone_delete_never_writes_into_the_deleted_zone(control: TestClient, zone: str,
                                                                              data_dir: Path) -> None:
    # The delete queues for the commit lock first; the batch validates while the zone still exists, then
    # queues behind it. The batch must look again once the delete has committed.
    async with held_commit_lock(control) as gate:
        delete = asyncio.create_task(control.delete(f"/api/core/zones/{zone}", headers=ACCOUNT))
        await gate.until_queued(1)
        batch = asyncio.create_task(control.post("/api/storage/batch",
                                                 json={"files": [item("a.svg"), item("b.svg")]}, headers=ACCESS))
        await gate.until_queued(2)
    assert (await delete).status == 200
    body = await expect_error(await batch, 400, "InvalidBatch")
    assert [(d["index"], d["path"]) for d in body["error"]["details"]] == [
        (0, "akande/v1/icons/a.svg"), (1, "akande/v1/icons/b.svg")]
    assert all("Zone 'akande' does not exist" in d["message"] for d in body["error"]["details"])
    assert repo_files(data_dir, "clients/akande/") == {}
    listed = await control.get("/api/core/zones", headers=ACCOUNT)
    assert zone not in [z["Name"] for z in await listed.json()]
    assert (await control.get("/api/storage/akande/v1/icons/a.svg", headers=ACCESS)).status == 404


async def test_a_zone_delete_queued_behind_a_batch_deletes_the_batch_files_too(control: TestClient, zone: str,
                                                                              data_dir: Path) -> None:
    # The batch commits first; the delete, which saw the zone before that commit, must remove its files.
    async with held_commit_lock(control) as gate:
        batch = asyncio.create_task(control.post("/api/storage/batch", json={"files": [item("a.svg")]},
                                                 headers=ACCESS))
        await gate.until_queued(1)
        delete = asyncio.create_task(control.delete(f"/api/core/zones/{zone}", headers=ACCOUNT))
        await gate.until_queued(2)
    assert (await batch).status == 201
    deleted = await delete
    assert deleted.status == 200
    assert (await deleted.json())["FilesRemoved"] == 1
    assert repo_files(data_dir, "clients/akande/") == {}
    listed = await control.get("/api/core/zones", headers=ACCOUNT)
    assert zone not in [z["Name"] for z in await listed.json()]


async def test_a_batch_whose_path_is_taken_while_it_waits_commits_nothing(control: TestClient, zone: str,
                                                                         data_dir: Path) -> None:
    # A single upload makes a.svg a file after the batch checked the tree; the batch's a.svg/inner.png
    # would silently turn that file into a directory.
    async with held_commit_lock(control) as gate:
        put = asyncio.create_task(control.put("/api/storage/akande/v1/icons/a.svg", data=b"<svg/>", headers=ACCESS))
        await gate.until_queued(1)
        batch = asyncio.create_task(control.post(
            "/api/storage/batch", json={"files": [item("b.svg"), item("a.svg/inner.png")]}, headers=ACCESS))
        await gate.until_queued(2)
    assert (await put).status == 201
    head = head_commit(data_dir)
    body = await expect_error(await batch, 400, "InvalidBatch")
    assert [(d["index"], d["path"]) for d in body["error"]["details"]] == [(1, "akande/v1/icons/a.svg/inner.png")]
    assert "Path conflict" in body["error"]["details"][0]["message"]
    assert head_commit(data_dir) == head
    assert set(repo_files(data_dir, "clients/akande/v1/icons/")) == {
        "clients/akande/v1/icons/.gitkeep", "clients/akande/v1/icons/a.svg"}
    got = await control.get("/api/storage/akande/v1/icons/a.svg", headers=ACCESS)
    assert (got.status, await got.read()) == (200, b"<svg/>")


class TestOversizeFile:
    async def test_one_oversize_file_is_413(self, small_control: TestClient, data_dir: Path) -> None:
        head = head_commit(data_dir)
        files = [item("ok.svg"), item("big.svg", b"x" * (SMALL_LIMIT + 1))]
        resp = await small_control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
        body = await expect_error(resp, 413, "PayloadTooLarge")
        assert body["MaxSize"] == SMALL_LIMIT
        assert [d["path"] for d in body["error"]["details"]] == ["akande/v1/icons/big.svg"]
        assert "File is 1001 bytes; the limit is 1000 bytes per file." in body["Message"]
        assert head_commit(data_dir) == head

    async def test_several_oversize_files_are_413(self, small_control: TestClient, data_dir: Path) -> None:
        head = head_commit(data_dir)
        files = [item("big1.svg", b"x" * (SMALL_LIMIT + 1)), item("ok.svg"), item("big2.svg", b"y" * 5000)]
        resp = await small_control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
        body = await expect_error(resp, 413, "PayloadTooLarge")
        assert [d["index"] for d in body["error"]["details"]] == [0, 2]
        assert head_commit(data_dir) == head

    async def test_oversize_next_to_another_problem_is_400_listing_both(self, small_control: TestClient,
                                                                       data_dir: Path) -> None:
        files = [item("big.svg", b"x" * (SMALL_LIMIT + 1)), {"path": "akande/../x.svg", "content": ""}]
        resp = await small_control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
        body = await expect_error(resp, 400, "InvalidBatch")
        assert [d["index"] for d in body["error"]["details"]] == [0, 1]

    async def test_file_at_the_limit_is_accepted(self, small_control: TestClient) -> None:
        resp = await small_control.post("/api/storage/batch", json={"files": [item("f.txt", b"x" * SMALL_LIMIT)]},
                                        headers=ACCESS)
        assert resp.status == 201, await resp.text()
        body = await resp.json()
        assert (body["HttpCode"], body["Files"]) == (201, ["clients/akande/v1/icons/f.txt"])
        got = await small_control.get("/api/storage/akande/v1/icons/f.txt", headers=ACCESS)
        assert (got.status, await got.read()) == (200, b"x" * SMALL_LIMIT)


async def test_the_reference_states_the_file_count_the_route_enforces(control: TestClient, zone: str) -> None:
    reference = await (await control.get("/api/openapi.json")).json()
    files = reference["components"]["schemas"]["BatchRequest"]["properties"]["files"]
    assert (files["minItems"], files["maxItems"]) == (1, 50)

    def batch(count: int) -> dict[str, Any]:
        return {"files": [{"path": f"{zone}/v1/logos/f{i}.txt", "content": "x", "encoding": "utf-8"}
                          for i in range(count)]}

    await expect_error(await control.post("/api/storage/batch", json=batch(51), headers=ACCESS), 400, "TooManyFiles")
    resp = await control.post("/api/storage/batch", json=batch(50), headers=ACCESS)
    assert resp.status == 201, await resp.text()

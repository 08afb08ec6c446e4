"""Storage plane over HTTP: PUT/GET/HEAD/DELETE /api/storage/{path}, as a client sees it."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict
from yarl import URL

from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.storage.service import MANIFEST
from tests.control.expect import commit_count, expect_error, head_commit, parse_time, repo_files
from tests.control.storage.commit_gate import held_commit_lock
from tests.support.control import ACCESS, ACCOUNT, SECRETS, SMALL_LIMIT, control_with_zone

LOGO = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'
LOGO_PATH = "akande/v1/logos/logo.svg"
STORAGE_ENTRY_FIELDS = {
    "Guid", "StorageZoneName", "Path", "ObjectName", "Length", "LastChanged", "ServerId", "ArrayNumber",
    "IsDirectory", "UserId", "ContentType", "DateCreated", "StorageZoneId", "Checksum", "ReplicatedZones",
}


def raw_url(client: TestClient, path: str) -> URL:
    """A URL sent byte for byte: no dot-segment removal or re-quoting by yarl on the client side."""
    return URL(str(client.make_url("/")).rstrip("/") + path, encoded=True)


async def upload(client: TestClient, path: str, data: bytes, **headers: str) -> dict:
    resp = await client.put(f"/api/storage/{path}", data=data, headers={**ACCESS, **headers})
    assert resp.status == 201, await resp.text()
    return await resp.json()



class TestUpload:
    async def test_new_file_is_201_pending_in_one_commit(self, control: TestClient, zone: str,
                                                         data_dir: Path) -> None:
        before = commit_count(data_dir)
        resp = await control.put(f"/api/storage/{LOGO_PATH}", data=LOGO,
                                 headers={**ACCESS, "Content-Type": "image/svg+xml"})
        assert resp.status == 201
        body = await resp.json()
        assert set(body) == {"HttpCode", "Message", "Path", "Length", "Checksum", "DateCreated", "EdgeStatus",
                             "EdgeNote"}
        assert body["HttpCode"] == 201
        assert body["Path"] == LOGO_PATH
        assert body["Length"] == len(LOGO)
        assert body["Checksum"] is None
        assert body["EdgeStatus"] == "pending"
        assert head_commit(data_dir)[:12] in body["EdgeNote"]  # type: ignore[index]
        parse_time(body["DateCreated"])
        assert commit_count(data_dir) == before + 1
        assert f"clients/{LOGO_PATH}" in repo_files(data_dir)
        got = await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)
        assert got.status == 200
        assert await got.read() == LOGO

    async def test_storage_prefix_is_accepted_and_lands_in_the_same_file(self, control: TestClient, zone: str,
                                                                        data_dir: Path) -> None:
        body = await upload(control, f"clients/{LOGO_PATH}", LOGO)
        assert body["Path"] == LOGO_PATH
        assert list(repo_files(data_dir, "clients/akande/v1/logos/")) == [
            "clients/akande/v1/logos/.gitkeep", f"clients/{LOGO_PATH}"]

    async def test_supplied_checksum_is_verified_and_echoed_upper_case(self, control: TestClient, zone: str) -> None:
        digest = hashlib.sha256(LOGO).hexdigest()
        body = await upload(control, LOGO_PATH, LOGO, Checksum=digest)
        assert body["Checksum"] == digest.upper()

    async def test_overwrite_is_purging_in_one_commit(self, control: TestClient, zone: str, data_dir: Path) -> None:
        await upload(control, LOGO_PATH, LOGO)
        before = commit_count(data_dir)
        body = await upload(control, LOGO_PATH, LOGO + b"\n")
        assert body["EdgeStatus"] == "purging"
        assert body["Length"] == len(LOGO) + 1
        assert commit_count(data_dir) == before + 1
        got = await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)
        assert await got.read() == LOGO + b"\n"

    async def test_identical_reupload_is_an_overwrite_that_purges_without_a_commit(
            self, control: TestClient, zone: str, data_dir: Path) -> None:
        digest = hashlib.sha256(LOGO).hexdigest()
        first = await upload(control, LOGO_PATH, LOGO, Checksum=digest)
        assert (first["Message"], first["EdgeStatus"]) == ("File uploaded successfully", "pending")
        head, count = head_commit(data_dir), commit_count(data_dir)
        generation = control.app[MANIFEST].generation
        body = await upload(control, LOGO_PATH, LOGO, Checksum=digest)  # lower-case hex in the request
        assert (body["Message"], body["EdgeStatus"]) == ("File overwritten successfully", "purging")
        assert (body["Path"], body["Length"], body["Checksum"]) == (LOGO_PATH, len(LOGO), digest.upper())
        assert head[:12] in body["EdgeNote"] and "no commit" in body["EdgeNote"]  # type: ignore[index]
        # No commit (history records changes only); the URL is purged on the edges in a generation of its own.
        assert (head_commit(data_dir), commit_count(data_dir)) == (head, count)
        delta = await control.app[MANIFEST].changes_since(generation)
        assert delta is not None and (delta.changes, delta.purges) == ([], [{"urls": [f"/{LOGO_PATH}"]}])

    async def test_upload_racing_another_upload_of_the_same_path_is_an_overwrite(
            self, control: TestClient, zone: str) -> None:
        # Both check the path while it is free; the second to commit overwrites the first.
        async with held_commit_lock(control) as gate:
            first = asyncio.create_task(control.put(f"/api/storage/{LOGO_PATH}", data=LOGO, headers=ACCESS))
            await gate.until_queued(1)
            second = asyncio.create_task(control.put(f"/api/storage/{LOGO_PATH}", data=LOGO + b" ", headers=ACCESS))
            await gate.until_queued(2)
        bodies = [await (await first).json(), await (await second).json()]
        assert [(b["HttpCode"], b["EdgeStatus"]) for b in bodies] == [(201, "pending"), (201, "purging")]
        assert bodies[1]["Message"] == "File overwritten successfully"

    async def test_upload_racing_a_zone_delete_is_404_and_writes_nothing(self, control: TestClient, zone: str,
                                                                         data_dir: Path) -> None:
        async with held_commit_lock(control) as gate:
            delete = asyncio.create_task(control.delete(f"/api/core/zones/{zone}", headers=ACCOUNT))
            await gate.until_queued(1)
            put = asyncio.create_task(control.put(f"/api/storage/{LOGO_PATH}", data=LOGO, headers=ACCESS))
            await gate.until_queued(2)
        assert (await delete).status == 200
        await expect_error(await put, 404, "ZoneNotFound")
        assert repo_files(data_dir, "clients/akande/") == {}

    async def test_manifest_entry_describes_the_file(self, control: TestClient, zone: str, data_dir: Path) -> None:
        await upload(control, LOGO_PATH, LOGO)
        entry = control.app[MANIFEST].entries[LOGO_PATH]
        assert entry.size == len(LOGO)
        assert entry.sha256 == hashlib.sha256(LOGO).hexdigest()
        assert entry.blob_id == repo_files(data_dir)[f"clients/{LOGO_PATH}"]
        assert entry.content_type == "image/svg+xml"
        assert (entry.zone, entry.category, entry.format, entry.name) == ("akande", "logos", "svg", "logo.svg")
        assert entry.tags == ("project-akande", "type-logos", "format-svg", "all-assets")

    async def test_bad_checksum_on_a_new_file_writes_nothing(self, control: TestClient, zone: str,
                                                             data_dir: Path) -> None:
        head = head_commit(data_dir)
        wrong = hashlib.sha256(b"something else").hexdigest()
        resp = await control.put(f"/api/storage/{LOGO_PATH}", data=LOGO, headers={**ACCESS, "Checksum": wrong})
        body = await expect_error(resp, 400, "ChecksumMismatch")
        assert body["error"]["target"] == "Checksum"
        assert body["Expected"] == wrong.upper()
        assert body["Received"] == hashlib.sha256(LOGO).hexdigest().upper()
        assert head_commit(data_dir) == head
        await expect_error(await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS), 404, "FileNotFound")

    async def test_bad_checksum_on_an_overwrite_keeps_the_old_bytes(self, control: TestClient, zone: str,
                                                                   data_dir: Path) -> None:
        await upload(control, LOGO_PATH, LOGO)
        head = head_commit(data_dir)
        resp = await control.put(f"/api/storage/{LOGO_PATH}", data=b"<svg/>",
                                 headers={**ACCESS, "Checksum": hashlib.sha256(LOGO).hexdigest()})
        await expect_error(resp, 400, "ChecksumMismatch")
        assert head_commit(data_dir) == head
        got = await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)
        assert await got.read() == LOGO

    async def test_checksum_that_is_not_sha256_hex_is_400(self, control: TestClient, zone: str,
                                                          data_dir: Path) -> None:
        head = head_commit(data_dir)
        resp = await control.put(f"/api/storage/{LOGO_PATH}", data=LOGO, headers={**ACCESS, "Checksum": "abc"})
        await expect_error(resp, 400, "InvalidChecksum")
        assert head_commit(data_dir) == head

    @pytest.mark.parametrize("checksum", [
        "", "   ", "sha256:" + hashlib.sha256(LOGO).hexdigest(), hashlib.sha256(LOGO).hexdigest() + "0",
        hashlib.sha256(LOGO).hexdigest()[:-1], "g" * 64, hashlib.sha256(LOGO).hexdigest() + ", x",
    ])
    async def test_an_empty_or_malformed_checksum_is_400_and_writes_nothing(self, control: TestClient, zone: str,
                                                                          data_dir: Path, checksum: str) -> None:
        head = head_commit(data_dir)
        for data in (LOGO, b""):
            resp = await control.put(f"/api/storage/{LOGO_PATH}", data=data, headers={**ACCESS, "Checksum": checksum})
            body = await expect_error(resp, 400, "InvalidChecksum")
            assert body["error"]["target"] == "Checksum"
        assert head_commit(data_dir) == head

    async def test_two_checksum_headers_are_400_even_when_one_is_right(self, control: TestClient, zone: str,
                                                                       data_dir: Path) -> None:
        head = head_commit(data_dir)
        right, wrong = hashlib.sha256(LOGO).hexdigest(), hashlib.sha256(b"other").hexdigest()
        for pair in ((right, wrong), (wrong, right)):
            headers = CIMultiDict([*ACCESS.items(), ("Checksum", pair[0]), ("Checksum", pair[1])])
            resp = await control.put(f"/api/storage/{LOGO_PATH}", data=LOGO, headers=headers)
            await expect_error(resp, 400, "InvalidChecksum")
        assert head_commit(data_dir) == head

    async def test_a_malformed_checksum_is_refused_before_the_body_is_read(self, small_control: TestClient,
                                                                           data_dir: Path) -> None:
        resp = await small_control.put(f"/api/storage/{LOGO_PATH}", data=b"x" * (SMALL_LIMIT + 1),
                                       headers={**ACCESS, "Checksum": "not-a-digest"})
        await expect_error(resp, 400, "InvalidChecksum")

    async def test_an_empty_body_without_a_checksum_is_400_and_writes_nothing(self, control: TestClient, zone: str,
                                                                              data_dir: Path) -> None:
        # What `curl -H "Checksum: $(sha256sum missing | ...)" --data-binary @missing` sends: no bytes, no header.
        head = head_commit(data_dir)
        body = await expect_error(await control.put(f"/api/storage/{LOGO_PATH}", data=b"", headers=ACCESS),
                                  400, "EmptyBody")
        assert hashlib.sha256(b"").hexdigest() in body["Message"]
        await upload(control, LOGO_PATH, LOGO)
        head = head_commit(data_dir)
        await expect_error(await control.put(f"/api/storage/{LOGO_PATH}", data=b"", headers=ACCESS), 400, "EmptyBody")
        assert head_commit(data_dir) == head
        assert await (await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).read() == LOGO

    async def test_an_empty_file_with_its_checksum_is_stored(self, control: TestClient, zone: str) -> None:
        empty = hashlib.sha256(b"").hexdigest()
        body = await upload(control, "akande/v1/logos/empty.svg", b"", Checksum=empty)
        assert (body["Length"], body["Checksum"]) == (0, empty.upper())
        got = await control.get("/api/storage/akande/v1/logos/empty.svg", headers=ACCESS)
        assert got.status == 200 and await got.read() == b""

    async def test_upload_into_a_missing_zone_is_404(self, control: TestClient, zone: str, data_dir: Path) -> None:
        head = head_commit(data_dir)
        resp = await control.put("/api/storage/nobody/v1/logos/logo.svg", data=LOGO, headers=ACCESS)
        body = await expect_error(resp, 404, "ZoneNotFound")
        assert "nobody" in body["Message"]
        assert head_commit(data_dir) == head

    @pytest.mark.parametrize(("existing", "clashing"), [
        ("akande/v1/logos/logo.svg", "akande/v1/logos/logo.svg/inner.png"),
        ("akande/v1/logos/set.v2/logo.svg", "akande/v1/logos/set.v2"),
    ])
    async def test_file_and_directory_cannot_replace_each_other(self, control: TestClient, zone: str,
                                                                data_dir: Path, existing: str,
                                                                clashing: str) -> None:
        await upload(control, existing, LOGO)
        head = head_commit(data_dir)
        resp = await control.put(f"/api/storage/{clashing}", data=b"other", headers=ACCESS)
        body = await expect_error(resp, 409, "PathConflict")
        assert body["error"]["target"] == "path"
        assert head_commit(data_dir) == head
        got = await control.get(f"/api/storage/{existing}", headers=ACCESS)
        assert await got.read() == LOGO
        assert clashing not in control.app[MANIFEST].entries

    async def test_upload_to_a_directory_path_is_400(self, control: TestClient, zone: str) -> None:
        for path in ("akande/v1/logos/", "akande/v1/logos/noext"):
            resp = await control.put(f"/api/storage/{path}", data=LOGO, headers=ACCESS)
            await expect_error(resp, 400, "InvalidPath")


class TestOversize:
    async def test_content_length_over_the_limit_is_413(self, small_control: TestClient, data_dir: Path) -> None:
        head = head_commit(data_dir)
        resp = await small_control.put(f"/api/storage/{LOGO_PATH}", data=b"x" * (SMALL_LIMIT + 1), headers=ACCESS)
        body = await expect_error(resp, 413, "PayloadTooLarge")
        assert body["MaxSize"] == SMALL_LIMIT
        assert "1001 bytes exceeds the 1000 bytes limit" in body["Message"]
        assert head_commit(data_dir) == head

    async def test_chunked_body_over_the_limit_is_413(self, small_control: TestClient, data_dir: Path) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(3):
                yield b"x" * 400

        head = head_commit(data_dir)
        resp = await small_control.put(f"/api/storage/{LOGO_PATH}", data=chunks(), headers=ACCESS)
        assert "Content-Length" not in resp.request_info.headers
        await expect_error(resp, 413, "PayloadTooLarge")
        assert head_commit(data_dir) == head

    async def test_exactly_the_limit_is_accepted(self, small_control: TestClient) -> None:
        body = await upload(small_control, "akande/v1/logos/full.txt", b"x" * SMALL_LIMIT)
        assert body["Length"] == SMALL_LIMIT


class TestRead:
    async def test_get_returns_bytes_and_content_type(self, control: TestClient, zone: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        resp = await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "image/svg+xml"
        assert await resp.read() == LOGO

    async def test_head_gives_length_and_type_without_a_body(self, control: TestClient, zone: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        resp = await control.head(f"/api/storage/{LOGO_PATH}", headers=ACCESS)
        assert resp.status == 200
        assert resp.headers["Content-Length"] == str(len(LOGO))
        assert resp.headers["Content-Type"] == "image/svg+xml"
        assert await resp.read() == b""

    async def test_missing_file_is_404_for_get_and_head(self, control: TestClient, zone: str) -> None:
        await expect_error(await control.get("/api/storage/akande/v1/logos/none.svg", headers=ACCESS),
                           404, "FileNotFound")
        resp = await control.head("/api/storage/akande/v1/logos/none.svg", headers=ACCESS)
        assert resp.status == 404
        assert resp.headers["X-API-Version"] == "2026-04-01"
        assert await resp.read() == b""

    async def test_directory_listing_is_storage_file_entries(self, control: TestClient, zone: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        resp = await control.get("/api/storage/akande/v1/logos/", headers=ACCESS)
        assert resp.status == 200
        entries = await resp.json()
        assert [e["ObjectName"] for e in entries] == ["logo.svg"]  # .gitkeep is hidden
        (entry,) = entries
        assert set(entry) == STORAGE_ENTRY_FIELDS
        uuid.UUID(entry["Guid"])
        assert entry["Path"] == "/clients/akande/v1/logos/"
        assert entry["IsDirectory"] is False
        assert entry["Length"] == len(LOGO)
        assert entry["Checksum"] == hashlib.sha256(LOGO).hexdigest().upper()
        assert entry["ContentType"] == "image/svg+xml"
        assert (entry["ServerId"], entry["ArrayNumber"], entry["StorageZoneId"]) == (0, 0, 0)
        assert entry["ReplicatedZones"] == ""
        parse_time(entry["LastChanged"])
        parse_time(entry["DateCreated"])

    async def test_a_directory_holding_no_file_is_dated_by_its_zone_not_by_the_listing(self, control: TestClient,
                                                                                      zone: str) -> None:
        """A zone's empty category directories (their scaffold only) were dated by the moment of each listing, so
        their LastChanged and even their DateCreated moved on every request; they date from the zone's creation."""
        await upload(control, LOGO_PATH, LOGO)
        created = (await (await control.get("/api/core/zones/akande", headers=ACCOUNT)).json())["DateCreated"]
        listed = {e["ObjectName"]: e for e in await (await control.get("/api/storage/akande/v1/", headers=ACCESS)).json()}
        for name in ("banners", "github", "icons", "titles"):
            assert (listed[name]["LastChanged"], listed[name]["DateCreated"]) == (created, created), name
        await control.delete(f"/api/storage/{LOGO_PATH}", headers=ACCESS)
        await control.post("/api/core/zones", json={"Name": "empty"}, headers=ACCOUNT)
        empty_created = (await (await control.get("/api/core/zones/empty", headers=ACCOUNT)).json())["DateCreated"]
        roots = {e["ObjectName"]: e for e in await (await control.get("/api/storage/", headers=ACCESS)).json()}
        assert roots["empty"]["LastChanged"] == roots["empty"]["DateCreated"] == empty_created
        again = {e["ObjectName"]: e for e in await (await control.get("/api/storage/akande/v1/", headers=ACCESS)).json()}
        assert again["logos"]["LastChanged"] == created  # its only file deleted: its scaffold's date again

    async def test_directories_are_listed_with_zero_length_and_no_checksum(self, control: TestClient,
                                                                         zone: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        for path in ("akande/v1/", "akande/v1"):  # trailing slash or no extension: both list
            resp = await control.get(f"/api/storage/{path}", headers=ACCESS)
            entries = await resp.json()
            assert sorted(e["ObjectName"] for e in entries) == ["banners", "github", "icons", "logos", "titles"]
            for entry in entries:
                assert entry["Path"] == "/clients/akande/v1/"
                assert entry["Path"].endswith("/")
                assert entry["IsDirectory"] is True
                assert (entry["Length"], entry["ContentType"], entry["Checksum"]) == (0, "", None)

    async def test_a_directorys_last_change_is_its_newest_files(self, control: TestClient, zone: str) -> None:
        """A directory's LastChanged (and DateCreated) was the time of the listing itself, a new one at every
        request, so a client comparing listings saw every directory changed each time; it is the time of the
        newest file below it."""
        await upload(control, LOGO_PATH, LOGO)

        async def listed(path: str) -> dict[str, dict[str, Any]]:
            resp = await control.get(f"/api/storage/{path}", headers=ACCESS)
            return {entry["ObjectName"]: entry for entry in await resp.json()}

        logo = (await listed("akande/v1/logos/"))["logo.svg"]
        logos = (await listed("akande/v1/"))["logos"]
        zone_entry = (await listed(""))["akande"]
        for directory in (logos, zone_entry):
            assert directory["IsDirectory"] is True
            assert (directory["LastChanged"], directory["DateCreated"]) == (logo["LastChanged"], logo["LastChanged"])

    async def test_root_listing_shows_zones(self, control: TestClient, zone: str) -> None:
        resp = await control.get("/api/storage/", headers=ACCESS)
        entries = await resp.json()
        assert [(e["ObjectName"], e["IsDirectory"], e["Path"]) for e in entries] == [("akande", True, "/clients/")]

    async def test_a_storage_root_without_files_lists_as_empty(self, control: TestClient) -> None:
        """A storage root with nothing in it (no zone yet, or the last one deleted; no stock file) was 404
        DirectoryNotFound, a root a client cannot delete said not to exist; it lists as empty."""
        for path in ("", "clients/", "stocks/"):
            resp = await control.get(f"/api/storage/{path}", headers=ACCESS)
            assert (resp.status, await resp.json()) == (200, []), path
        resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
        assert resp.status == 201
        assert (await control.delete("/api/core/zones/akande", headers=ACCOUNT)).status == 200
        resp = await control.get("/api/storage/", headers=ACCESS)
        assert (resp.status, await resp.json()) == (200, [])
        head = await control.head("/api/storage/", headers=ACCESS)
        assert head.status == 200 and head.headers["Content-Length"] == "2"

    async def test_listing_a_missing_directory_is_404(self, control: TestClient, zone: str) -> None:
        await expect_error(await control.get("/api/storage/akande/v2/", headers=ACCESS), 404, "DirectoryNotFound")

    async def test_head_of_a_directory_answers_as_its_listing_without_a_body(self, control: TestClient,
                                                                            zone: str) -> None:
        """HEAD answers as GET does (docs/api-guide.md, RFC 9110 9.3.2): a directory's HEAD was 400 InvalidPath
        where its GET lists it."""
        await upload(control, LOGO_PATH, LOGO)
        for path in ("akande/v1/logos/", "akande/v1/logos", ""):
            get = await control.get(f"/api/storage/{path}", headers=ACCESS)
            listing = await get.read()
            head = await control.head(f"/api/storage/{path}", headers=ACCESS)
            assert (head.status, head.headers["Content-Type"]) == (200, get.headers["Content-Type"]), path
            assert head.headers["Content-Length"] == str(len(listing))
            assert await head.read() == b""
        missing = await control.head("/api/storage/akande/v2/", headers=ACCESS)
        assert missing.status == 404 and await missing.read() == b""


class TestDelete:
    async def test_delete_is_purging_in_one_commit(self, control: TestClient, zone: str, data_dir: Path) -> None:
        await upload(control, LOGO_PATH, LOGO)
        before = commit_count(data_dir)
        resp = await control.delete(f"/api/storage/{LOGO_PATH}", headers=ACCESS)
        assert resp.status == 200
        body = await resp.json()
        assert set(body) == {"HttpCode", "Message", "Path", "EdgeStatus", "EdgeNote"}
        assert (body["HttpCode"], body["Path"], body["EdgeStatus"]) == (200, LOGO_PATH, "purging")
        assert commit_count(data_dir) == before + 1
        assert LOGO_PATH not in control.app[MANIFEST].entries
        await expect_error(await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS), 404, "FileNotFound")

    async def test_delete_of_a_missing_file_is_404(self, control: TestClient, zone: str, data_dir: Path) -> None:
        head = head_commit(data_dir)
        await expect_error(await control.delete(f"/api/storage/{LOGO_PATH}", headers=ACCESS), 404, "FileNotFound")
        assert head_commit(data_dir) == head

    async def test_directory_delete_removes_its_files_in_one_commit_and_keeps_the_zone(
            self, control: TestClient, zone: str, data_dir: Path) -> None:
        await upload(control, LOGO_PATH, LOGO)
        await upload(control, "akande/v1/icons/a.png", b"png")
        before = commit_count(data_dir)
        resp = await control.delete("/api/storage/akande/v1/", headers=ACCESS)
        assert resp.status == 200
        body = await resp.json()
        assert (body["EdgeStatus"], body["Message"]) == ("purging", "Deleted akande/v1/ (2 files).")
        assert commit_count(data_dir) == before + 1
        assert control.app[MANIFEST].zone_entries("akande") == []
        # The zone and its category directories survive: AccessKey cannot delete zones.
        zones = await (await control.get("/api/core/zones", headers=ACCOUNT)).json()
        assert [z["Id"] for z in zones] == ["akande"]
        listing = await (await control.get("/api/storage/akande/v1/", headers=ACCESS)).json()
        assert sorted(e["ObjectName"] for e in listing) == ["banners", "github", "icons", "logos", "titles"]

    @pytest.mark.parametrize("path", ["clients/", "stocks/", "akande/", "akande"])
    async def test_roots_and_zone_roots_are_refused(self, control: TestClient, zone: str, data_dir: Path,
                                                    path: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        await upload(control, "stocks/images/sky.png", b"png")
        head = head_commit(data_dir)
        await expect_error(await control.delete(f"/api/storage/{path}", headers=ACCESS), 400, "InvalidPath")
        assert head_commit(data_dir) == head

    @pytest.mark.parametrize("path", ["akande/v1/titles/", "akande/v1/titles/.gitkeep"])
    async def test_scaffolding_alone_is_nothing_to_delete(self, control: TestClient, zone: str, data_dir: Path,
                                                          path: str) -> None:
        head = head_commit(data_dir)
        body = await expect_error(await control.delete(f"/api/storage/{path}", headers=ACCESS), 404, "FileNotFound")
        assert head_commit(data_dir) == head
        if path.endswith("/"):  # a directory the listing shows: not said not to exist
            assert body["Message"] == "'akande/v1/titles/' holds no file to delete (a zone's own v1/<category>/ " \
                                      "directories stay)."

    async def test_a_folder_made_empty_goes_with_its_delete(self, control: TestClient, zone: str, data_dir: Path) -> None:
        """A folder is kept in git by an empty .gitkeep (the dashboard's New folder): deleting it removes it, as does
        deleting a folder it is in; only a zone's own v1/<category>/ directories stay."""
        empty = hashlib.sha256(b"").hexdigest()
        await upload(control, "akande/v1/campaigns/.gitkeep", b"", Checksum=empty)
        await upload(control, "akande/v1/spring/old/.gitkeep", b"", Checksum=empty)
        await upload(control, "akande/v1/spring/a.png", b"png")
        resp = await control.delete("/api/storage/akande/v1/campaigns/", headers=ACCESS)
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["Message"] == "Deleted akande/v1/campaigns/ (0 files)."
        resp = await control.delete("/api/storage/akande/v1/spring/", headers=ACCESS)
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["Message"] == "Deleted akande/v1/spring/ (1 files)."
        listing = await (await control.get("/api/storage/akande/v1/", headers=ACCESS)).json()
        assert sorted(e["ObjectName"] for e in listing) == ["banners", "github", "icons", "logos", "titles"]
        await upload(control, "akande/v1/logos/dark/.gitkeep", b"", Checksum=empty)
        await upload(control, "akande/v1/logos/logo.svg", LOGO)
        resp = await control.delete("/api/storage/akande/v1/", headers=ACCESS)
        assert resp.status == 200, await resp.text()
        assert sorted(repo_files(data_dir, "clients/akande/")) == [
            f"clients/akande/v1/{category}/.gitkeep" for category in ("banners", "github", "icons", "logos", "titles")]

    async def test_a_delete_that_would_empty_a_zone_keeps_its_folders(self, control: TestClient, zone: str,
                                                                      data_dir: Path) -> None:
        """A zone without the standard directories (made before them) is not removed by emptying its v1/: its folders
        stay, as AccessKey cannot delete zones."""
        await control.app[PUBLISHER].commit({"clients/bare/v1/campaigns/.gitkeep": b"", "clients/bare/v1/a.png": b"png"},
                                            "a zone without the standard directories")
        resp = await control.delete("/api/storage/bare/v1/", headers=ACCESS)
        assert resp.status == 200, await resp.text()
        assert list(repo_files(data_dir, "clients/bare/")) == ["clients/bare/v1/campaigns/.gitkeep"]
        zones = await (await control.get("/api/core/zones", headers=ACCOUNT)).json()
        assert "bare" in [z["Id"] for z in zones]

    async def test_delete_of_a_zone_root_is_refused(self, control: TestClient, zone: str, data_dir: Path) -> None:
        head = head_commit(data_dir)
        await expect_error(await control.delete("/api/storage/akande/", headers=ACCESS), 400, "InvalidPath")
        assert head_commit(data_dir) == head


# Each of these must be refused as it is, not normalised into another path or routed to a 404.
TRAVERSALS = [
    "akande/../akande/v1/logos/logo.svg",
    "akande/v1/logos/../../../../etc/passwd.txt",
    "akande/v1/%2e%2e/%2e%2e/logo.svg",
    "%2e%2e/%2e%2e/etc/passwd.txt",
    "akande/v1/%252e%252e/logo.svg",
    "akande/v1/logos/logo%00.svg",
    "akande%5cv1%5clogos%5clogo.svg",
    "akande\\v1\\logos\\logo.svg",
    "akande/v1//logos/logo.svg",
    "/akande/v1/logos/logo.svg",
    "akande/v1/logos//",
    "akande/.git/config.txt",
    "akande/v1/%2egit/HEAD.txt",
    ".git/config",
    "akande/node_modules/x.js",
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def with_a_logo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[TestClient, Path]]:
    """A control plane with the zone and its logo, shared by the refusals below."""
    data_dir = tmp_path_factory.mktemp("traversals") / "data"
    async with control_with_zone(data_dir) as client:
        await upload(client, LOGO_PATH, LOGO)
        yield client, data_dir


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE"])
@pytest.mark.parametrize("path", TRAVERSALS)
async def test_traversal_and_malformed_paths_are_400(with_a_logo: tuple[TestClient, Path], method: str,
                                                     path: str) -> None:
    control, data_dir = with_a_logo
    head = head_commit(data_dir)
    resp = await control.session.request(method, raw_url(control, "/api/storage/" + path), headers=ACCESS,
                                          data=LOGO if method == "PUT" else None)
    if method == "HEAD":
        assert resp.status == 400
        assert await resp.read() == b""
    else:
        body = await expect_error(resp, 400, "InvalidPath")
        assert body["error"]["target"] == "path"
    assert head_commit(data_dir) == head


async def test_traversal_in_the_request_line_reaches_the_server_unchanged(control: TestClient, zone: str) -> None:
    # Guard for the test above: the raw URL is what the server saw (no client-side dot-segment removal).
    url = raw_url(control, "/api/storage/akande/../x.svg")
    assert url.raw_path.endswith("/akande/../x.svg")
    resp = await control.session.get(url, headers=ACCESS)
    body = await expect_error(resp, 400, "InvalidPath")
    assert "'..'" in body["Message"]


async def test_concurrent_deletes_of_one_file_give_one_200_and_404s(control: TestClient, zone: str) -> None:
    import asyncio

    assert (await control.put(f"/api/storage/{zone}/v1/logos/x.svg", data=b"<svg/>", headers=ACCESS)).status == 201
    responses = await asyncio.gather(*(control.delete(f"/api/storage/{zone}/v1/logos/x.svg", headers=ACCESS)
                                       for _ in range(4)))
    assert sorted(r.status for r in responses) == [200, 404, 404, 404]


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate,chunked"])
async def test_an_upload_under_another_transfer_coding_than_chunked_is_501_and_stores_nothing(
        control: TestClient, zone: str, coding: str) -> None:
    """The server takes a `gzip, chunked` body's chunks and leaves the gzip on the bytes: they were stored as the file
    (the compressed bytes where the client sent a text). Refused (RFC 9112 6.1: 501), nothing stored."""
    coded = gzip.compress(b"the file itself")
    assert control.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", control.server.port)
    try:
        writer.write((f"PUT /api/storage/{zone}/coded.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"AccessKey: {SECRETS.access_key}\r\nTransfer-Encoding: {coding}\r\nConnection: close\r\n\r\n"
                      ).encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(coded), coded))
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 501 "), answer[:80]
    assert b"UnsupportedTransferCoding" in answer
    assert (await control.get(f"/api/storage/{zone}/coded.txt", headers=ACCESS)).status == 404


class TestConditionalRequests:
    """A file's answers carry its ETag; If-Match and If-None-Match are held to it (RFC 9110 13.1.1, 13.1.2), so two
    clients editing one file cannot overwrite each other's change unknowingly."""

    async def test_put_with_an_if_match_of_an_older_version_is_412_and_stores_nothing(
            self, control: TestClient, zone: str, data_dir: Path) -> None:
        await upload(control, LOGO_PATH, LOGO)
        first = (await control.head(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).headers["ETag"]
        await upload(control, LOGO_PATH, LOGO + b"<!-- theirs -->")  # another client's change
        head = head_commit(data_dir)
        resp = await control.put(f"/api/storage/{LOGO_PATH}", data=LOGO + b"<!-- mine -->",
                                 headers={**ACCESS, "If-Match": first})
        body = await expect_error(resp, 412, "PreconditionFailed")
        assert body["error"]["target"] == "If-Match"
        assert head_commit(data_dir) == head
        assert await (await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).read() == LOGO + b"<!-- theirs -->"

    async def test_put_with_the_current_etag_in_if_match_is_stored(self, control: TestClient, zone: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        current = (await control.head(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).headers["ETag"]
        body = await upload(control, LOGO_PATH, LOGO + b" ", **{"If-Match": f'"other", {current}'})
        assert body["EdgeStatus"] == "purging"
        assert await (await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).read() == LOGO + b" "

    async def test_put_with_if_match_star_needs_a_stored_file(self, control: TestClient, zone: str) -> None:
        await expect_error(await control.put(f"/api/storage/{LOGO_PATH}", data=LOGO,
                                             headers={**ACCESS, "If-Match": "*"}), 412, "PreconditionFailed")
        await expect_error(await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS), 404, "FileNotFound")

    async def test_put_with_if_none_match_star_creates_but_never_overwrites(self, control: TestClient,
                                                                          zone: str) -> None:
        body = await upload(control, LOGO_PATH, LOGO, **{"If-None-Match": "*"})
        assert body["EdgeStatus"] == "pending"
        resp = await control.put(f"/api/storage/{LOGO_PATH}", data=b"<svg/>", headers={**ACCESS, "If-None-Match": "*"})
        await expect_error(resp, 412, "PreconditionFailed")
        assert await (await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).read() == LOGO

    async def test_delete_with_an_if_match_of_an_older_version_is_412_and_keeps_the_file(
            self, control: TestClient, zone: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        first = (await control.head(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).headers["ETag"]
        await upload(control, LOGO_PATH, LOGO + b" ")
        await expect_error(await control.delete(f"/api/storage/{LOGO_PATH}", headers={**ACCESS, "If-Match": first}),
                           412, "PreconditionFailed")
        assert (await control.get(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).status == 200
        current = (await control.head(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).headers["ETag"]
        resp = await control.delete(f"/api/storage/{LOGO_PATH}", headers={**ACCESS, "If-Match": current})
        assert resp.status == 200, await resp.text()

    @pytest.mark.parametrize("method", ["GET", "HEAD"])
    async def test_a_read_with_the_current_etag_in_if_none_match_is_304(self, control: TestClient, zone: str,
                                                                         method: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        etag = (await control.head(f"/api/storage/{LOGO_PATH}", headers=ACCESS)).headers["ETag"]
        resp = await control.request(method, f"/api/storage/{LOGO_PATH}", headers={**ACCESS, "If-None-Match": etag})
        assert resp.status == 304
        assert resp.headers["ETag"] == etag
        assert await resp.read() == b""
        changed = await control.request(method, f"/api/storage/{LOGO_PATH}",
                                        headers={**ACCESS, "If-None-Match": '"an-older-version"'})
        assert changed.status == 200
        assert await changed.read() == (LOGO if method == "GET" else b"")

    async def test_a_read_with_an_if_match_of_another_version_is_412(self, control: TestClient, zone: str) -> None:
        await upload(control, LOGO_PATH, LOGO)
        await expect_error(await control.get(f"/api/storage/{LOGO_PATH}",
                                             headers={**ACCESS, "If-Match": '"an-older-version"'}),
                           412, "PreconditionFailed")

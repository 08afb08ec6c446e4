"""A storage listing's directories, dated by the newest file below each, as every kind of change leaves them; and
the manifest's index of directories they are read from (assetcdn/control/storage/directory_index.py)."""

from __future__ import annotations

import base64
import random
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.storage.directory_index import DirectoryIndex
from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.storage.service import GIT
from assetcdn.shared.manifest import ManifestEntry, make_entry
from assetcdn.shared.timestamps import from_unix
from tests.control.storage.manifest_passes import refuse_passes
from tests.support.control import ACCESS, ACCOUNT, restarted


def at(second: int) -> str:
    """A commit time of the test's clock: distinct for each second, whatever the real clock does meanwhile."""
    return from_unix(1_600_000_000 + second)


class Clock:
    """The time control's commits are dated by (the commit's time in git, whole seconds), set by the test."""

    def __init__(self, control: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = at(0)
        monkeypatch.setattr(control.app[GIT], "commit_time", lambda _commit_id: self.now)


async def directories(control: TestClient, path: str) -> dict[str, str]:
    """{directory listed at `path`: its LastChanged}."""
    resp = await control.get(f"/api/storage/{path}", headers=ACCESS)
    assert resp.status == 200, await resp.text()
    return {e["ObjectName"]: e["LastChanged"] for e in await resp.json() if e["IsDirectory"]}


async def put(control: TestClient, path: str, data: bytes = b"<svg/>") -> None:
    resp = await control.put(f"/api/storage/{path}", data=data, headers=ACCESS)
    assert resp.status == 201, await resp.text()


async def delete(control: TestClient, path: str) -> None:
    resp = await control.delete(f"/api/storage/{path}", headers=ACCESS)
    assert resp.status == 200, await resp.text()


async def test_directories_are_dated_by_their_newest_file_after_every_kind_of_change(
        control: TestClient, zone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(control, monkeypatch)
    clock.now = at(1)
    await put(control, "akande/v1/logos/a.svg")
    clock.now = at(2)
    await put(control, "akande/v1/icons/b.svg")
    listed = await directories(control, "akande/v1/")
    assert (listed["logos"], listed["icons"]) == (at(1), at(2))
    assert (await directories(control, ""))["akande"] == at(2)

    clock.now = at(3)  # an overwrite
    await put(control, "akande/v1/logos/a.svg", b"<svg>new</svg>")
    assert (await directories(control, "akande/v1/"))["logos"] == at(3)
    assert (await directories(control, ""))["akande"] == at(3)

    clock.now = at(4)  # the newest file deleted: its directories are dated by the next newest
    await delete(control, "akande/v1/logos/a.svg")
    listed = await directories(control, "akande/v1/")
    assert listed["logos"] not in (at(1), at(3))  # no file left below it (only its scaffold): the listing's time
    assert listed["icons"] == at(2)
    assert (await directories(control, ""))["akande"] == at(2)

    clock.now = at(5)  # a batch, one file in a new directory
    files = [{"path": p, "content": base64.b64encode(b"<svg/>").decode()}
             for p in ("akande/v1/logos/deep/c.svg", "akande/v1/icons/d.svg")]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    assert resp.status == 201, await resp.text()
    assert await directories(control, "akande/v1/logos/") == {"deep": at(5)}
    assert (await directories(control, "akande/v1/"))["logos"] == at(5)

    clock.now = at(6)  # a directory deleted
    await delete(control, "akande/v1/logos/deep/")
    assert await directories(control, "akande/v1/logos/") == {}
    assert (await directories(control, "akande/v1/"))["logos"] not in (at(1), at(3), at(5))
    clock.now = at(7)
    await delete(control, "akande/v1/icons/d.svg")
    assert (await directories(control, ""))["akande"] == at(2)

    clock.now = at(8)  # the zone deleted and made again: none of its old files dates it
    resp = await control.post("/api/core/zones", json={"Name": "bantu"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    resp = await control.delete("/api/core/zones/akande", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    assert list(await directories(control, "")) == ["bantu"]
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    clock.now = at(1)  # a commit dated before the deleted files (a clock set back)
    await put(control, "akande/v1/banners/e.svg")
    assert (await directories(control, ""))["akande"] == at(1)
    assert (await directories(control, "akande/v1/"))["banners"] == at(1)


async def test_a_start_dates_each_file_and_directory_as_control_did_before_it(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control built its manifest at start from HEAD and dated every file by HEAD's commit, so after each restart every
    file and directory of a listing showed the time of the last commit (docs/known-gaps.md had it); a file is dated by
    the commit that last changed it, as before the start. One changed outside control is dated by HEAD's."""
    first = restarted(data_dir)
    await first.start_server()
    try:
        resp = await first.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
        assert resp.status == 201, await resp.text()
        clock = Clock(first, monkeypatch)
        for second, path in enumerate(("logos/a.svg", "icons/b.svg", "icons/gone.svg", "titles/c.svg"), start=1):
            clock.now = at(second)
            await put(first, f"akande/v1/{path}")
        clock.now = at(5)
        await put(first, "akande/v1/logos/a.svg", b"<svg>new</svg>")
        clock.now = at(6)
        await delete(first, "akande/v1/icons/gone.svg")
    finally:
        await first.close()
    for start in ("the next start", "a start after a commit made outside control"):
        if start != "the next start":
            git = GitStore(data_dir / "repo.git")
            try:
                outside = (await git.commit({"clients/akande/v1/titles/c.svg": b"<svg>outside</svg>"},
                                            "outside control")).committed_at
            finally:
                git.close()
        client = restarted(data_dir)
        await client.start_server()
        try:
            files = {f"{d}/{e['ObjectName']}": e["LastChanged"] for d in ("logos", "icons", "titles")
                     for e in await (await client.get(f"/api/storage/akande/v1/{d}/", headers=ACCESS)).json()}
            listed = await directories(client, "akande/v1/")
            if start == "the next start":
                assert files == {"logos/a.svg": at(5), "icons/b.svg": at(2), "titles/c.svg": at(4)}, start
                assert (listed["logos"], listed["icons"], listed["titles"]) == (at(5), at(2), at(4))
                assert (await directories(client, ""))["akande"] == at(5)
            else:
                assert files == {"logos/a.svg": at(5), "icons/b.svg": at(2), "titles/c.svg": outside}, start
                assert (listed["logos"], listed["titles"]) == (at(5), outside)
        finally:
            await client.close()


async def test_a_listing_does_not_pass_over_the_whole_manifest(control: TestClient, zone: str) -> None:
    """Listing a directory with subdirectories passed over every file of the manifest on control's event loop (about
    50 ms at 100,000 files, every other request of control waiting); it reads what the directory holds."""
    await put(control, "akande/v1/logos/a.svg")
    refuse_passes(control)
    for path in ("", "akande/", "akande/v1/", "akande/v1/logos/"):
        assert await directories(control, path) is not None


async def test_a_zones_files_are_found_without_a_pass_over_the_whole_manifest(control: TestClient, zone: str) -> None:
    """A zone's details (and the answers about its origin, which count its files) passed over every file of the
    manifest; they read the zone's own, through each kind of change."""
    refuse_passes(control)

    async def files(name: str = "akande") -> list[str]:
        resp = await control.get(f"/api/core/zones/{name}", headers=ACCOUNT)
        assert resp.status == 200, await resp.text()
        detail = await resp.json()
        assert detail["FileCount"] == len(detail["Files"])
        return [f["Path"] for f in detail["Files"]]

    assert await files() == []
    await put(control, "akande/v1/logos/b.svg")
    await put(control, "akande/v1/icons/a.svg")
    await put(control, "akande/v1/icons/a.svg", b"<svg>new</svg>")
    assert await files() == ["akande/v1/icons/a.svg", "akande/v1/logos/b.svg"]
    await delete(control, "akande/v1/icons/")
    assert await files() == ["akande/v1/logos/b.svg"]
    resp = await control.post("/api/core/zones", json={"Name": "akande-2"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    await put(control, "akande-2/v1/logos/c.svg")
    assert (await files(), await files("akande-2")) == (["akande/v1/logos/b.svg"], ["akande-2/v1/logos/c.svg"])
    assert (await control.delete("/api/core/zones/akande", headers=ACCOUNT)).status == 200
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    assert (await files(), await files("akande-2")) == ([], ["akande-2/v1/logos/c.svg"])


async def test_the_zones_are_summed_up_without_a_pass_over_the_whole_manifest(control: TestClient, zone: str) -> None:
    """The list of zones (GET /api/core/zones) passed over every file of the manifest on control's event loop to count
    each zone's files, bytes and categories (23 ms at 100,000 files); the manifest's index keeps those sums."""
    refuse_passes(control)

    async def summed() -> dict[str, tuple[int, int, list[str]]]:
        resp = await control.get("/api/core/zones", headers=ACCOUNT)
        assert resp.status == 200, await resp.text()
        listed = {z["Id"]: (z["FileCount"], z["StorageUsed"], z["Categories"]) for z in await resp.json()}
        for name, summary in listed.items():  # as each zone's own details say
            resp = await control.get(f"/api/core/zones/{name}", headers=ACCOUNT)
            detail = await resp.json()
            assert (detail["FileCount"], detail["StorageUsed"], detail["Categories"]) == summary, name
        return listed

    assert await summed() == {"akande": (0, 0, [])}
    await put(control, "akande/v1/logos/a.svg", b"12345")
    await put(control, "akande/v1/icons/deep/b.svg", b"123")
    assert await summed() == {"akande": (2, 8, ["icons", "logos"])}
    await put(control, "akande/v1/logos/a.svg", b"1")  # an overwrite
    resp = await control.post("/api/core/zones", json={"Name": "bantu"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    files = [{"path": p, "content": base64.b64encode(b"12").decode()}
             for p in ("bantu/v1/titles/c.svg", "bantu/v1/titles/d.svg")]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    assert resp.status == 201, await resp.text()
    assert await summed() == {"akande": (2, 4, ["icons", "logos"]), "bantu": (2, 4, ["titles"])}
    await delete(control, "akande/v1/icons/")
    assert await summed() == {"akande": (1, 1, ["logos"]), "bantu": (2, 4, ["titles"])}
    assert (await control.delete("/api/core/zones/bantu", headers=ACCOUNT)).status == 200
    assert await summed() == {"akande": (1, 1, ["logos"])}


def newest_below_by_a_pass(entries: dict[str, ManifestEntry], directory: str) -> dict[str, str]:
    """What the index answers, by the definition: one pass over every file."""
    prefix = f"{directory}/" if directory else ""
    newest: dict[str, str] = {}
    for path, entry in entries.items():
        if path.startswith(prefix) and "/" in (rest := path[len(prefix):]):
            child = rest.split("/", 1)[0]
            newest[child] = max(newest.get(child, ""), entry.modified)
    return newest


def test_the_index_answers_as_a_pass_over_the_manifest_through_random_changes() -> None:
    rng = random.Random(20261207)
    directories_ = ["a", "a/b", "a/b/c", "a/d", "e", "e/f/g", "h/i/j/k"]
    paths = [f"{d}/{n}.svg" for d in directories_ for n in ("x", "y", "z")]
    entries: dict[str, ManifestEntry] = {}
    index = DirectoryIndex()
    for step in range(3000):
        path = rng.choice(paths)
        previous = entries.get(path)
        if previous is not None:
            index.remove(previous)
            del entries[path]
        if previous is None or rng.random() < 0.5:  # added, or replaced (at times by an older time)
            entries[path] = make_entry(path, rng.randrange(1000), "0" * 64, "1" * 40, at(rng.randrange(50)))
            index.add(entries[path])
        directory = rng.choice(["", *directories_, "a/b/c/none", "none"])
        assert index.newest_below(directory) == newest_below_by_a_pass(entries, directory), (step, directory)
        in_it = sorted(path for path in entries if path.rsplit("/", 1)[0] == directory)
        assert sorted(e.path for e in index.files_in(directory)) == in_it, (step, directory)
        if directory:  # a zone's files, as the zone's directory
            below = sorted(path for path in entries if path.startswith(f"{directory}/"))
            assert sorted(e.path for e in index.entries_below(directory)) == below, (step, directory)
            sizes = [entries[path].size for path in below]
            assert index.totals(directory) == (len(sizes), sum(sizes)), (step, directory)
        assert sorted(index.subdirectories(directory)) == sorted(newest_below_by_a_pass(entries, directory))
    assert DirectoryIndex(entries.values()).newest_below("") == index.newest_below("")
    for entry in list(entries.values()):
        index.remove(entry)
    assert (index.newest_below(""), index.totals("")) == ({}, (0, 0))

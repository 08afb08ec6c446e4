"""The vector index is persisted with the data, re-embeds only what changed, and takes alt text."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from aiohttp.test_utils import TestClient

from assetcdn.control.search.index import SearchIndex
from assetcdn.control.search.service import SEARCH_INDEX
from tests.support.control import MakeControl
from tests.support.search import add_zone, search, upload

ASSETS = ("autoworld/v1/banners/ferrari-488.jpg", "autoworld/v1/banners/school-bus.jpg",
          "autoworld/v1/logos/logo.svg")


def index_of(client: TestClient) -> SearchIndex:
    app = client.app
    assert app is not None
    return app[SEARCH_INDEX]


async def settled(client: TestClient) -> SearchIndex:
    index = index_of(client)
    await index.settled(max_backlog=10**9)
    return index


async def first_start(make_control: MakeControl, data_dir: Path) -> None:
    client = await make_control(data_dir)
    await add_zone(client, "autoworld")
    await upload(client, *ASSETS)
    index = await settled(client)
    assert index.embedded == len(ASSETS)
    await client.close()


def stored(data_dir: Path) -> dict[str, str]:
    with sqlite3.connect(data_dir / "control.sqlite3") as db:
        return dict(db.execute("SELECT path, text_key FROM search_vectors"))


async def test_vectors_are_stored_with_the_data_and_reused_after_a_restart(make_control: MakeControl,
                                                                           tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await first_start(make_control, data_dir)
    assert set(stored(data_dir)) == set(ASSETS)
    client = await make_control(data_dir)
    index = await settled(client)
    assert index.embedded == 0                      # nothing changed: nothing embedded again
    assert (await search(client, "red sports car"))["results"][0]["name"] == "ferrari-488.jpg"


async def test_missing_or_stale_vectors_are_rebuilt_on_start(make_control: MakeControl, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await first_start(make_control, data_dir)
    with sqlite3.connect(data_dir / "control.sqlite3") as db:
        db.execute("DELETE FROM search_vectors WHERE path = ?", (ASSETS[0],))
        db.execute("UPDATE search_vectors SET text_key = 'from-another-model' WHERE path = ?", (ASSETS[1],))
        db.execute("INSERT INTO search_vectors VALUES ('gone/v1/banners/old.jpg', 'k', zeroblob(1536))")
    client = await make_control(data_dir)
    index = await settled(client)
    assert index.embedded == 2
    rows = stored(data_dir)
    assert set(rows) == set(ASSETS) and "from-another-model" not in rows.values()
    assert (await search(client, "red sports car"))["results"][0]["name"] == "ferrari-488.jpg"


async def test_alt_text_becomes_part_of_an_assets_text(make_control: MakeControl) -> None:
    client = await make_control()
    await add_zone(client, "petcare")
    await upload(client, "petcare/v1/banners/img-0042.jpg", "petcare/v1/banners/img-0043.jpg")
    index = await settled(client)
    before = index.embedded
    alt = {"petcare/v1/banners/img-0042.jpg": "A golden retriever puppy playing on the grass"}
    index.alt_text = alt.get
    index.refresh(alt)
    await index.settled(max_backlog=10**9)
    assert index.embedded == before + 1
    answer = await search(client, "dog")
    assert answer["mode"] == "vector" and answer["results"][0]["name"] == "img-0042.jpg"

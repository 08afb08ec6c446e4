"""Control's catch-up answer (`/_cluster/changes`): each change and purge says its generation, and the answer
holds exactly the generations up to the one it names, even when another is recorded while it is made.

The workers of an edge node share one cache and apply each generation's purges to it once (assetcdn/edge/node.py),
so they need to know which generation each purge belongs to, and an answer must never carry a purge of a
generation beyond the one the edge will then say it holds (the push of that generation would apply it twice).
"""

from __future__ import annotations

import orjson
import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import EDGE_CONFIG, MANIFEST
from assetcdn.shared.cluster import PREFIX, sign_request
from tests.support.control import ACCESS, SECRETS

PURGE = {"x-api-key": SECRETS.purge_key}


async def changes_since(control: TestClient, since: int) -> dict:
    path = f"{PREFIX}/changes?since={since}"
    resp = await control.get(path, headers=sign_request(SECRETS.cluster_secret, "GET", path))
    assert resp.status == 200, await resp.text()
    return orjson.loads(await resp.read())


async def test_each_change_and_purge_carries_its_generation(control: TestClient, zone: str) -> None:
    since = control.app[MANIFEST].generation
    path = f"{zone}/v1/logos/a.svg"
    assert (await control.put(f"/api/storage/{path}", data=b"<svg/>", headers=ACCESS)).status == 201
    resp = await control.post("/api/purge", json={"tags": ["format-svg"]}, headers=PURGE)
    assert resp.status == 200
    purged_at = (await resp.json())["generation"]
    assert (await control.put(f"/api/storage/{path}", data=b"<svg />", headers=ACCESS)).status == 201
    reply = await changes_since(control, since)
    assert reply["generation"] == since + 3
    assert reply["purges"] == [{"tags": ["format-svg"], "generation": purged_at}]
    assert [(c["path"], c["generation"]) for c in reply["changes"]] == [(path, since + 3)]  # its latest change


async def test_a_generation_recorded_while_the_answer_is_made_is_left_to_the_next_one(
        control: TestClient, zone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest, edge_config = control.app[MANIFEST], control.app[EDGE_CONFIG]
    since = manifest.generation
    resp = await control.post("/api/purge", json={"tags": ["project-akande"]}, headers=PURGE)
    assert resp.status == 200
    version = edge_config.version

    async def purge_meanwhile() -> str:  # a purge recorded while the answer waits for the config version
        await manifest.record_purge({"tags": ["type-logos"]})
        return await version()

    monkeypatch.setattr(edge_config, "version", purge_meanwhile)
    reply = await changes_since(control, since)
    assert reply["generation"] == since + 1
    assert reply["purges"] == [{"tags": ["project-akande"], "generation": since + 1}]
    monkeypatch.undo()
    assert (await changes_since(control, since + 1))["purges"] == [{"tags": ["type-logos"], "generation": since + 2}]


async def test_a_tag_purge_within_a_zone_is_answered_with_its_zone(control: TestClient, zone: str) -> None:
    """An edge that missed the push learns the purge's scope on catch-up: without it, it would purge the tag in every
    zone."""
    since = control.app[MANIFEST].generation
    resp = await control.post("/api/purge", json={"tags": ["home"], "zone": zone}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    reply = await changes_since(control, since)
    assert reply["purges"] == [{"tags": ["home"], "zone": zone, "generation": since + 1}]

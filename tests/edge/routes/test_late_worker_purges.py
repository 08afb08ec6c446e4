"""A node's worker that starts late keeps its hands off what the node cached after the purges it replays.

The workers of one edge node share the disk tier. A worker that registers with control after some
purges (a slow start on a loaded machine, a restart) learns them from its first catch-up, long after
its sibling applied them to the shared cache; the node then cached the files again. Replaying those
purges on the shared cache would empty it of those fresh entries, and the next request for a file
that no purge of its own touched would be a MISS on every worker. Two edge apps on one cache directory,
talking to a real control, are the two workers here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

import assetcdn.control.app  # noqa: F401
import assetcdn.control.storage.manifest_store  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.control.publishing.edge_registry import FanOut
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.edge.app import EdgeIdentity
from assetcdn.edge.app_keys import NODE
from assetcdn.shared.config import Settings, load_settings
from tests.support.cdn import PURGE, ZONE, Cdn, CdnFactory
from tests.support.control import ACCESS, ACCOUNT, SECRETS
from tests.support.wait import wait_until

SAME = b"<svg xmlns='http://www.w3.org/2000/svg'/>"
VECTOR, TEXT = f"{ZONE}/v1/logos/mark.svg", f"{ZONE}/v1/titles/mark.txt"

Worker = Callable[[int], Awaitable[TestClient]]


@pytest.fixture
async def node(aiohttp_server, aiohttp_client, tmp_path: Path) -> tuple[TestClient, Worker]:  # type: ignore[no-untyped-def]
    """Control, and a way to start worker `i` of one edge node (all on one cache directory)."""
    settings: Settings = load_settings(environ={"ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.2",
                                                "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5",
                                                "ASSETCDN_TRANSFORM_CONCURRENCY": "1"})
    control_client = await aiohttp_client(await aiohttp_server(
        control.app.create_app(settings, SECRETS, tmp_path / "data")))

    async def worker(index: int) -> TestClient:
        identity = EdgeIdentity(name="edge-t", worker=index, control_url=str(control_client.make_url("")).rstrip("/"),
                                cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
        client = await aiohttp_client(edge.app.create_app(settings, SECRETS, identity))

        async def healthy() -> bool:  # caught up with control: its first catch-up is applied
            return (await client.get("/api/health")).status == 200

        await wait_until(healthy, f"worker {index} healthy")
        return client

    return control_client, worker


async def x_cache(worker: TestClient, path: str) -> str:
    resp = await worker.get(f"/{path}")
    assert resp.status == 200 and await resp.read() == SAME
    return resp.headers["X-Cache"]


async def purge(control_client: TestClient, worker: TestClient, body: dict[str, Any]) -> None:
    resp = await control_client.post("/api/purge", json=body, headers=PURGE)
    assert resp.status == 200, await resp.text()
    generation = (await resp.json())["generation"]
    node = worker.app[NODE]

    async def applied() -> bool:
        return node.replica.generation >= generation and not node._sync_lock.locked()

    await wait_until(applied, "the purge reaching the worker")


async def twins_purged_then_cached_again(control_client: TestClient, first: TestClient) -> None:
    """Two paths with one blob, both cached by the first worker, then a purge of each (a URL purge of
    the .txt, a tag purge of the .svg) and both cached again: the node's cache holds both, fresh."""
    resp = await control_client.post("/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    for path in (VECTOR, TEXT):
        resp = await control_client.put(f"/api/storage/{path}", data=SAME, headers=ACCESS)
        assert resp.status == 201, await resp.text()
    node = first.app[NODE]

    async def arrived() -> bool:
        return node.replica.get(TEXT) is not None and node.replica.get(VECTOR) is not None

    await wait_until(arrived, "both paths reaching the worker")
    for path in (VECTOR, TEXT):
        assert await x_cache(first, path) == "MISS"
    await purge(control_client, first, {"urls": [f"https://cdn.example.com/{TEXT}"]})
    assert [await x_cache(first, TEXT), await x_cache(first, TEXT)] == ["MISS", "HIT"]
    await purge(control_client, first, {"tags": ["format-svg"]})
    assert [await x_cache(first, VECTOR), await x_cache(first, VECTOR)] == ["MISS", "HIT"]


async def test_a_late_worker_replaying_old_purges_leaves_the_fresh_entries_in_the_shared_cache(
        node: tuple[TestClient, Worker]) -> None:
    control_client, worker = node
    first = await worker(0)
    await twins_purged_then_cached_again(control_client, first)
    late = await worker(1)  # registers now: its catch-up from generation 0 carries both purges
    assert late.app[NODE].replica.generation == first.app[NODE].replica.generation
    for path in (TEXT, VECTOR):
        assert await x_cache(first, path) == "HIT", path
        assert await x_cache(late, path) == "HIT", path
    # A purge made now still empties the node, whichever worker applies it first.
    await purge(control_client, late, {"urls": [f"https://cdn.example.com/{TEXT}"]})
    await purge(control_client, first, {"tags": ["all-assets"]})
    assert [await x_cache(first, TEXT), await x_cache(late, TEXT)] == ["MISS", "HIT"]
    assert [await x_cache(late, VECTOR), await x_cache(first, VECTOR)] == ["MISS", "HIT"]


async def test_a_late_worker_sent_a_snapshot_does_not_empty_a_cache_the_node_brought_up_to_date(
        node: tuple[TestClient, Worker], monkeypatch: pytest.MonkeyPatch) -> None:
    # Control keeps two generations of history: a worker starting from 0 is sent the whole manifest instead.
    monkeypatch.setattr(control.storage.manifest_store, "HISTORY_KEPT", 2)
    control_client, worker = node
    first = await worker(0)
    await twins_purged_then_cached_again(control_client, first)
    late = await worker(1)
    assert late.app[NODE].replica.generation == first.app[NODE].replica.generation
    for path in (TEXT, VECTOR):
        assert await x_cache(first, path) == "HIT", path
        assert await x_cache(late, path) == "HIT", path


async def two_cached_logos(cdn: Cdn) -> None:
    """Two files uploaded and each delivered twice, so the edge holds them: what a purge removes and counts."""
    for name in ("a", "b"):
        await cdn.upload(f"{ZONE}/v1/logos/{name}.txt", name.encode())
        for _ in range(2):
            resp = await cdn.edge.get(f"/{ZONE}/v1/logos/{name}.txt")
            assert resp.status == 200


async def test_a_purge_taken_by_a_catch_up_before_its_push_still_reports_what_it_removed(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # The edge's periodic catch-up can fetch a purge's generation between control recording it and
    # pushing it; the push then finds it applied, and its answer must still say what was removed.
    cdn = await make_cdn()
    await two_cached_logos(cdn)
    registry = cdn.control.app[REGISTRY]
    push = registry.fan_out

    async def catch_up_first(*args: Any, **kwargs: Any) -> Any:
        await cdn.node.catch_up()
        return await push(*args, **kwargs)

    monkeypatch.setattr(registry, "fan_out", catch_up_first)
    resp = await cdn.control.post("/api/purge", json={"purge_everything": True}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    removed = (await resp.json())["edges"]["entriesRemoved"]
    assert list(removed) == ["edge-t/0"] and removed["edge-t/0"] >= 2, removed


async def test_a_purge_pushed_after_a_missed_generation_reports_what_its_catch_up_removed(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # A push that finds the edge a generation behind (it missed the one before) is applied by a catch-up: its
    # answer says what that catch-up's purges removed, not 0.
    cdn = await make_cdn(ASSETCDN_EDGE_CATCHUP_INTERVAL_S="3600")
    await two_cached_logos(cdn)
    registry = cdn.control.app[REGISTRY]
    missed = cdn.node.replica.generation
    with monkeypatch.context() as patch:
        patch.setattr(registry, "fan_out", lambda *args, **kwargs: _not_sent())  # this generation never arrives
        resp = await cdn.control.post("/api/purge", json={"tags": ["nothing-cached"]}, headers=PURGE)
        assert resp.status == 200, await resp.text()
    assert cdn.node.replica.generation == missed
    resp = await cdn.control.post("/api/purge", json={"purge_everything": True}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["edges"]["acknowledged"] == ["edge-t"]
    removed = answer["edges"]["entriesRemoved"]
    assert list(removed) == ["edge-t/0"] and removed["edge-t/0"] >= 2, removed
    assert (await cdn.edge.get(f"/{ZONE}/v1/logos/a.txt")).headers["X-Cache"] == "MISS"


async def test_a_tag_purge_within_a_zone_learnt_on_catch_up_removes_that_zones_copies_only(
        make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edge that missed a tag purge's push learns it from control's catch-up answer, with its zone: read without
    it, the catch-up purged the tag in every zone (the other zone's file a MISS)."""
    cdn = await make_cdn(ASSETCDN_EDGE_CATCHUP_INTERVAL_S="3600")
    other = "otherzone"
    resp = await cdn.control.post("/api/core/zones", json={"Name": other}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    paths = (f"{ZONE}/v1/logos/same.svg", f"{other}/v1/logos/same.svg")
    for path in paths:
        await cdn.upload(path, SAME)
        assert [(await cdn.edge.get(f"/{path}")).headers["X-Cache"] for _ in range(2)] == ["MISS", "HIT"]
    registry = cdn.control.app[REGISTRY]
    with monkeypatch.context() as patch:
        patch.setattr(registry, "fan_out", lambda *args, **kwargs: _not_sent())  # the push never arrives
        resp = await cdn.control.post("/api/purge", json={"tags": ["format-svg"], "zone": other}, headers=PURGE)
        assert resp.status == 200, await resp.text()
    assert (await cdn.edge.get(f"/{paths[1]}")).headers["X-Cache"] == "HIT"  # not learnt yet
    await cdn.node.catch_up()
    assert [(await cdn.edge.get(f"/{path}")).headers["X-Cache"] for path in paths] == ["HIT", "MISS"]


async def _not_sent() -> FanOut:
    return FanOut((), ("edge-t/0",), 0.0)

"""A pull zone across an edge worker's restarts: what it cached stays in the disk tier and is served again, with
purges made while it was down applied before it answers from that cache. A control app and an edge app on one cache
directory, started again on the same directory as a restarted worker is."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn.edge.app_keys import NODE
from tests.support.cdn import PURGE
from tests.support.control import ACCOUNT, METRICS
from tests.support.metrics_text import metric
from tests.support.origins import ScriptedOrigin
from tests.support.restartable import ZONE, Worker, healthy, restartable_pull
from tests.support.wait import wait_until


@pytest.fixture
async def restartable(aiohttp_server, aiohttp_client, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Control with a pull zone from a scripted origin, and a way to start the edge's worker (again)."""
    async with restartable_pull(aiohttp_server, aiohttp_client, tmp_path) as (control_client, origin, worker):
        yield control_client, origin, worker


async def test_a_url_purged_while_the_edge_was_down_is_not_served_from_its_disk_tier_when_it_starts_again(
        restartable: tuple[TestClient, ScriptedOrigin, Worker]) -> None:
    control_client, origin, worker = restartable
    origin.answer("/logo.txt", b"old", headers={"Cache-Control": "max-age=600"})
    first = await worker()
    await healthy(first)
    assert (await first.get(f"/{ZONE}/logo.txt")).headers["X-Cache"] == "MISS"
    resp = await first.get(f"/{ZONE}/logo.txt")
    assert resp.headers["X-Cache"] == "HIT" and await resp.read() == b"old"
    await first.close()  # a graceful stop: the entry stays in the disk tier

    origin.answer("/logo.txt", b"new", headers={"Cache-Control": "max-age=600"})
    resp = await control_client.post("/api/purge", headers=PURGE,
                                      json={"urls": [f"http://127.0.0.1/{ZONE}/logo.txt"]})
    assert resp.status == 200, await resp.text()

    again = await worker()  # its first request, as soon as it listens
    resp = await again.get(f"/{ZONE}/logo.txt")
    assert await resp.read() == b"new", resp.headers.get("X-Cache")


async def test_a_restarted_worker_serves_its_disk_tier_with_the_age_it_has_and_keeps_a_soft_purge_made_meanwhile(
        restartable: tuple[TestClient, ScriptedOrigin, Worker]) -> None:
    control_client, origin, worker = restartable
    for name in ("/kept.txt", "/soft.txt"):
        origin.answer(name, b"body", headers={"Cache-Control": "max-age=600", "ETag": '"v1"', "Age": "100"})
    first = await worker()
    await healthy(first)
    for name in ("/kept.txt", "/soft.txt"):
        assert (await first.get(f"/{ZONE}{name}")).headers["X-Cache"] == "MISS"
    await first.close()
    resp = await control_client.post("/api/purge", headers=PURGE,
                                     json={"urls": [f"http://127.0.0.1/{ZONE}/soft.txt"], "soft": True})
    assert resp.status == 200, await resp.text()

    again = await worker()
    resp = await again.get(f"/{ZONE}/kept.txt")
    assert resp.headers["X-Cache"] == "HIT" and 100 <= int(resp.headers["Age"]) <= 110
    asked = len(origin.requests("/soft.txt"))
    resp = await again.get(f"/{ZONE}/soft.txt")
    assert await resp.read() == b"body" and resp.headers["X-Cache"] != "HIT"
    assert len(origin.requests("/soft.txt")) == asked + 1
    assert origin.requests("/soft.txt")[-1].headers.get("If-None-Match") == '"v1"'


async def test_a_url_purged_on_a_custom_domain_removed_while_the_edge_was_down_is_not_served_when_it_starts_again(
        restartable: tuple[TestClient, ScriptedOrigin, Worker]) -> None:
    # The purge names the zone's path by the custom domain; the domain is gone from the config the edge takes on
    # its catch-up, which must not make the purge it catches up with name nothing.
    control_client, origin, worker = restartable
    domain = "restart.pulled-brand.example"
    resp = await control_client.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    origin.answer("/brand.txt", b"old", headers={"Cache-Control": "max-age=600"})
    first = await worker()
    await healthy(first)
    assert (await first.get("/brand.txt", headers={"Host": domain})).headers["X-Cache"] == "MISS"
    resp = await first.get(f"/{ZONE}/brand.txt")
    assert resp.headers["X-Cache"] == "HIT" and await resp.read() == b"old"
    await first.close()

    origin.answer("/brand.txt", b"new", headers={"Cache-Control": "max-age=600"})
    resp = await control_client.post("/api/purge", headers=PURGE, json={"urls": [f"https://{domain}/brand.txt"]})
    assert resp.status == 200, await resp.text()
    resp = await control_client.delete(f"/api/core/zones/{ZONE}/domains/{domain}", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()

    again = await worker()
    resp = await again.get(f"/{ZONE}/brand.txt")
    assert await resp.read() == b"new", resp.headers.get("X-Cache")
    assert len(origin.requests("/brand.txt")) == 2


async def test_a_url_purged_on_a_custom_domain_removed_while_control_could_not_reach_the_edge_is_applied_by_its_next_push(
        restartable: tuple[TestClient, ScriptedOrigin, Worker], monkeypatch: pytest.MonkeyPatch) -> None:
    # The edge stays up but takes nothing from control meanwhile (its catch-ups stopped, control's pushes refused);
    # control's next push then finds generations missed, and the edge catches up from it under the new config.
    control_client, origin, worker = restartable
    domain = "away.pulled-brand.example"
    resp = await control_client.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": domain}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    origin.answer("/brand.txt", b"old", headers={"Cache-Control": "max-age=600"})
    edge_client = await worker()
    await healthy(edge_client)
    node = edge_client.app[NODE]

    async def domain_arrived() -> bool:
        return node.config.zone_for_host(domain) == ZONE

    await wait_until(domain_arrived, "the custom domain reaching the edge")
    assert (await edge_client.get("/brand.txt", headers={"Host": domain})).headers["X-Cache"] == "MISS"
    for task in node._tasks:  # no catch-up of its own
        task.cancel()

    async def refused(_push: object) -> tuple[int, int]:
        raise ConnectionError("cut off from control")

    monkeypatch.setattr(node, "apply_push", refused)
    origin.answer("/brand.txt", b"new", headers={"Cache-Control": "max-age=600"})
    resp = await control_client.post("/api/purge", headers=PURGE, json={"urls": [f"https://{domain}/brand.txt"]})
    assert resp.status == 200, await resp.text()
    resp = await control_client.delete(f"/api/core/zones/{ZONE}/domains/{domain}", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    assert (await edge_client.get(f"/{ZONE}/brand.txt")).headers["X-Cache"] == "HIT"  # nothing taken yet

    monkeypatch.undo()  # control reaches the edge again: its next push
    resp = await control_client.post("/api/purge", headers=PURGE, json={"tags": ["unrelated"]})
    assert resp.status == 200, await resp.text()
    generation = (await resp.json())["generation"]

    async def pushed() -> bool:
        return node.replica.generation >= generation

    await wait_until(pushed, f"generation {generation} reaching the edge")
    resp = await edge_client.get(f"/{ZONE}/brand.txt")
    assert await resp.read() == b"new", resp.headers.get("X-Cache")


async def test_a_restarted_worker_reports_the_manifest_generation_it_holds_from_its_start(
        restartable: tuple[TestClient, ScriptedOrigin, Worker]) -> None:
    """`assetcdn_manifest_generation` on the edge's /metrics is the generation the worker holds as soon as it is up,
    also after a restart with nothing new at control (the metrics restart with the node: the series must come back
    without waiting for the next change, or an alert on an edge behind control has nothing to compare)."""
    _control_client, _origin, worker = restartable
    for _start in range(2):
        client = await worker()
        await healthy(client)
        generation = client.app[NODE].replica.generation
        assert generation > 0
        text = await (await client.get("/metrics", headers=METRICS)).text()
        assert metric(text, "assetcdn_manifest_generation", process="edge") == generation
        await client.close()

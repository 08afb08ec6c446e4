"""What a mutation's EdgeNote and a purge's answer say of a registered edge control has not heard from within
`control.edge_timeout_s` (stopped, or cut off from control while it may still serve clients): it is not pushed
to, and it is named as one that has not the change yet, never left out of the count."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from assetcdn.control.publishing.service import REGISTRY
from tests.support.control import ACCESS, SECRETS

PURGE = {"x-api-key": SECRETS.purge_key}
QUIET_FOR_S = 3600  # well past control.edge_timeout_s


async def push_answering_edge(aiohttp_server: Any) -> str:
    """The URL of an edge worker's cluster site that acknowledges every push."""
    async def acknowledge(request: web.Request) -> web.Response:
        return web.json_response({"generation": 1, "purged": 0})

    app = web.Application()
    app.router.add_post("/_cluster/push", acknowledge)
    server: TestServer = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


def quiet_edge(control: TestClient, name: str) -> None:
    registry = control.app[REGISTRY]
    registry.register(name, "http://127.0.0.1:9", 0)  # nothing listens: it would never acknowledge
    registry.edges[name].last_seen -= QUIET_FOR_S


async def upload_note(control: TestClient, zone: str, name: str) -> str:
    resp = await control.put(f"/api/storage/{zone}/v1/logos/{name}", data=b"<svg/>", headers=ACCESS)
    assert resp.status == 201, await resp.text()
    note: str = (await resp.json())["EdgeNote"]
    return note


async def test_an_edge_not_heard_from_is_counted_and_named_in_the_edge_note(control: TestClient, zone: str,
                                                                            aiohttp_server: Any) -> None:
    """With edge-a answering and edge-b silent for an hour the note said 'Acknowledged by 1 of 1 edges': an operator
    read that every edge had the change while edge-b, cut off from control, went on serving what it held."""
    control.app[REGISTRY].register("edge-a/0", await push_answering_edge(aiohttp_server), 0)
    quiet_edge(control, "edge-b/0")
    note = await upload_note(control, zone, "a.svg")
    assert "Acknowledged by 1 of 2 edges" in note and "edge-b" in note and "edge-a" not in note, note


async def test_edges_all_gone_quiet_are_not_told_of_as_no_edge_registered(control: TestClient, zone: str) -> None:
    quiet_edge(control, "edge-b/0")
    note = await upload_note(control, zone, "b.svg")
    assert "No edge is registered" not in note and "Acknowledged by 0 of 1 edges" in note and "edge-b" in note, note


async def test_a_purge_names_an_edge_not_heard_from_as_pending(control: TestClient, aiohttp_server: Any) -> None:
    """'Purged on every edge.' was the answer while a registered edge had not been heard from (nor told)."""
    control.app[REGISTRY].register("edge-a/0", await push_answering_edge(aiohttp_server), 0)
    quiet_edge(control, "edge-b/0")
    resp = await control.post("/api/purge", json={"tags": ["project-x"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    edges = body["edges"]
    assert (edges["total"], edges["acknowledged"], edges["pending"]) == (2, ["edge-a"], ["edge-b"]), edges
    assert "edge-b" in body["note"], body["note"]

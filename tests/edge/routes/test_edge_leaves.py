"""An edge worker that stops says so to control, which forgets it: a purge made after it has stopped neither waits
for it nor names it as pending, as it named one stopped in silence (killed, cut off: it may come back and is caught up
then) in every answer until control restarted. A leave names the address the worker registered, so a worker started
since under the same name at another address keeps its registration."""

from __future__ import annotations

from typing import Any

from assetcdn.control.publishing.service import REGISTRY
from tests.support.cdn import PURGE, ZONE, CdnFactory


async def purge(control: Any) -> dict[str, Any]:
    resp = await control.post("/api/purge", json={"urls": [f"/{ZONE}/v1/a.svg"]}, headers=PURGE)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def test_a_stopped_edge_is_forgotten_not_pending(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    before = await purge(cdn.control)
    assert before["edges"]["total"] == 1 and before["edges"]["acknowledged"] == ["edge-t"], before
    await cdn.edge.close()  # the edge's app stops: its node's last call to control
    after = await purge(cdn.control)
    assert after["edges"]["total"] == 0 and after["edges"]["pending"] == [], after
    assert not cdn.control.app[REGISTRY].edges


async def test_a_leave_for_an_older_address_keeps_the_worker_registered_since(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    registry = cdn.control.app[REGISTRY]
    (name, registered), = ((name, edge.url) for name, edge in registry.edges.items())
    assert not await cdn.node.control.leave(name, "http://127.0.0.1:9")  # the name's earlier worker, say
    assert registry.edges[name].url == registered
    assert await cdn.node.control.leave(name, registered + "/")
    assert name not in registry.edges

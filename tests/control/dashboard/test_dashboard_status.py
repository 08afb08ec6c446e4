"""What the dashboard shows about edges, with a real edge registered: the status report's per-node
generation, lag and last acknowledgement, and the purge answer's per-edge acknowledgement latency."""

from __future__ import annotations

from tests.support.cdn import PURGE, ZONE, CdnFactory
from tests.support.control import ACCOUNT


async def test_purge_reports_each_edges_ack_latency_and_status_its_last_ack(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(f"{ZONE}/v1/logos/a.txt", b"hello")
    resp = await cdn.control.post("/api/purge", json={"urls": [f"/{ZONE}/v1/logos/a.txt"]}, headers=PURGE)
    assert resp.status == 200
    edges = (await resp.json())["edges"]
    assert edges["acknowledged"] == ["edge-t"]
    assert list(edges["latencyMs"]) == ["edge-t/0"]
    assert 0 <= edges["latencyMs"]["edge-t/0"] <= edges["elapsedMs"]

    report = await (await cdn.control.get("/api/dashboard/status", headers=ACCOUNT)).json()
    [node] = report["edges"]["nodes"]
    assert (node["name"], node["alive"], node["lag"]) == ("edge-t", True, 0)
    assert node["generation"] == report["control"]["generation"]
    assert node["lastAckAt"] is not None and node["lastPushMs"] is not None
    [worker] = node["workers"]
    assert worker["name"] == "edge-t/0" and "url" not in worker  # no internal address in the report
    assert report["edges"] == {"total": 1, "alive": 1, "maxLag": 0, "nodes": [node]}

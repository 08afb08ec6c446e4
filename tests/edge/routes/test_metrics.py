"""/metrics counts requests by the route and the status clients actually received."""

from __future__ import annotations

import asyncio

from tests.support.cdn import ZONE, CdnFactory
from tests.support.control import METRICS
from tests.support.metrics_text import metric


def _count(text: str, route: str, status: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("assetcdn_requests_total{") and f'route="{route}"' in line and f'status="{status}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_errors_are_counted_with_their_status_and_route(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    assert (await cdn.edge.get(f"/{ZONE}/v1/logos/missing.svg")).status == 404
    assert (await cdn.edge.get("/api/transform?url=/x/v1/a/b.png&w=0")).status == 400
    assert (await cdn.edge.get("/api/health")).status == 200
    text = await (await cdn.edge.get("/metrics", headers=METRICS)).text()
    cdn_route = next(line.split('route="', 1)[1].split('"', 1)[0] for line in text.splitlines()
                     if line.startswith("assetcdn_requests_total{") and 'status="404"' in line)
    assert "{path" in cdn_route
    assert _count(text, cdn_route, "404") == 1
    assert _count(text, "/api/transform", "400") == 1
    assert _count(text, "/api/health", "200") >= 1
    assert 'status="500"' not in text


async def test_the_disk_tiers_full_and_dropped_writes_are_series_from_the_start(make_cdn: CdnFactory) -> None:
    """An operator can alert on them before the first event (a series that appears only then is missed)."""
    cdn = await make_cdn()
    lines = (await (await cdn.edge.get("/metrics", headers=METRICS)).text()).splitlines()
    assert 'assetcdn_edge_disk_full_total{process="edge"} 0.0' in lines
    assert 'assetcdn_edge_disk_dropped_writes_total{process="edge"} 0.0' in lines
    for reason in ("unread", "writer_behind"):
        assert f'assetcdn_edge_memory_unwritten_evictions_total{{process="edge",reason="{reason}"}} 0.0' in lines


UNREADABLE = (b"FOOA /x HTTP/1.1\r\nHost: x\r\n\r\n",                    # no method HTTP has
              b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n",                  # a field without a colon
              b"GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n")  # a field past the limit


async def unreadable_answers(port: int) -> list[int]:
    """Each of UNREADABLE on a connection of its own: the statuses answered."""
    statuses = []
    for garbage in UNREADABLE:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(garbage)
        statuses.append(int((await reader.readline()).split()[1]))
        writer.close()
    return statuses


async def test_requests_that_could_not_be_read_are_counted_with_their_status(make_cdn: CdnFactory) -> None:
    """A request aiohttp cannot read (a method HTTP does not have, a malformed or oversize head) is answered before
    any route or middleware of the application sees it: it was missing from assetcdn_requests_total, so a client
    sending nothing else showed no 4xx at all. It counts under the route `unreadable` (method `UNKNOWN`)."""
    cdn = await make_cdn()
    for client in (cdn.edge, cdn.control):
        assert client.port is not None
        statuses = await unreadable_answers(client.port)
        assert all(400 <= status < 500 for status in statuses), statuses
        text = await (await client.get("/metrics", headers=METRICS)).text()
        for status in set(statuses):
            assert metric(text, "assetcdn_requests_total", route="unreadable", method="UNKNOWN",
                          status=str(status)) == statuses.count(status), text

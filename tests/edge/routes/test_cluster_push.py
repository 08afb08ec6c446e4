"""Control's pushes to an edge worker (POST /_cluster/push): one that is not a well-formed generation is
refused whole (400 with what is wrong; the manifest and cache stay as they were), and a signed one tells
the worker that control is up."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
import yarl

from assetcdn.control.publishing.service import REGISTRY
from assetcdn.edge.circuit_breaker import CLOSED, OPEN
from assetcdn.shared.cluster import CONTENT_HEADER, PREFIX, sign_request
from assetcdn.shared.tls_state import TLS_STATE_PATH
from tests.control.expect import expect_error
from tests.support.cdn import ZONE, CdnFactory
from tests.support.control import SECRETS

LOGO = b'<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"/>'


@pytest.mark.parametrize(("fields", "says"), [
    ({"generation": "next", "purges": [{"everything": True}]}, "generation"),
    ({"changes": [{"entry": None}], "purges": [{"everything": True}]}, "path"),
    ({"purges": [{"everything": True}, {"tags": "type-logos"}]}, "tags"),
])
async def test_a_malformed_push_is_refused_and_changes_nothing(make_cdn: CdnFactory, fields: dict[str, Any],
                                                                says: str) -> None:
    cdn = await make_cdn()
    path = f"{ZONE}/v1/logos/kept.svg"
    await cdn.upload(path, LOGO)
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "MISS"
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "HIT"
    held = cdn.node.replica.generation

    (member,) = cdn.control.app[REGISTRY].edges.values()
    body = orjson.dumps({"v": 1, "generation": held + 1, "commit": None, "config_version": None, **fields})
    cluster_path = PREFIX + "/push"
    headers = sign_request(SECRETS.cluster_secret, "POST", cluster_path, body, audience=member.name)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(member.url + cluster_path, data=body,
                               headers={**headers, "Content-Type": "application/json"})
        error = await expect_error(resp, 400, "InvalidPush")
    assert says in error["error"]["message"]
    assert cdn.node.replica.generation == held
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "HIT"  # nothing was purged


async def test_a_signed_push_from_control_closes_the_breaker(make_cdn: CdnFactory) -> None:
    # No catch-up or heartbeat runs during the test: the push is the only word from control.
    cdn = await make_cdn(ASSETCDN_EDGE_CATCHUP_INTERVAL_S="3600", ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S="3600")
    control = cdn.node.control
    while control.breaker.state != OPEN:
        control.breaker.failed(slow=True)   # the edge's own calls timed out: control counts as down
    assert not control.reachable(within_s=3600)
    await cdn.upload(f"{ZONE}/v1/logos/pushed.svg", LOGO)   # returns once control's push is applied
    assert control.breaker.state == CLOSED and control.reachable(within_s=5)


DECLARED_SIZE = 15 * 1024 * 1024  # within the cluster site's 16 MB
ANSWER_WAIT_S = 30.0  # an answer that needs the rest of the body never comes: the body is never sent


async def status_with_body_withheld(url: str, path: str, headers: dict[str, str]) -> int:
    """The status a worker's cluster site answers a POST that announces 15 MB and sends only 1 KB of it."""
    parsed = yarl.URL(url)
    assert parsed.host is not None and parsed.port is not None
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
    try:
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        writer.write(f"POST {path} HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {DECLARED_SIZE}\r\n{head}\r\n".encode() + b"{" + b" " * 1023)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), ANSWER_WAIT_S)
        return int(status_line.split()[1])
    finally:
        writer.close()


async def test_a_push_not_signed_by_control_is_refused_before_its_body_is_read(make_cdn: CdnFactory) -> None:
    """Whoever reaches a worker's cluster site (it listens on the edge's own address unless `--advertise-host`
    names another) had the worker read a body of up to 16 MB before the signature was checked: a few such requests
    at once held a worker's memory. It is refused while the body is still on its way, as control refuses an edge's;
    a signed push over the body it declared is refused too."""
    cdn = await make_cdn()
    (member,) = cdn.control.app[REGISTRY].edges.values()
    for path in (PREFIX + "/push", PREFIX + TLS_STATE_PATH):
        forged = sign_request("not-the-cluster-secret", "POST", path, b"{}", audience=member.name)
        assert await status_with_body_withheld(member.url, path, {}) == 401
        assert await status_with_body_withheld(member.url, path, forged) == 401
        without_hash = {name: value for name, value in forged.items() if name != CONTENT_HEADER}
        assert await status_with_body_withheld(member.url, path, without_hash) == 413
    signed_body = orjson.dumps({"v": 1, "generation": 1, "commit": None, "config_version": None})
    path = PREFIX + "/push"
    headers = sign_request(SECRETS.cluster_secret, "POST", path, signed_body, audience=member.name)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(member.url + path, data=signed_body.replace(b"1,", b"9,", 1),
                               headers={**headers, "Content-Type": "application/json"})
        await expect_error(resp, 401, "Unauthorized")

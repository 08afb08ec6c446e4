"""Control's pushes to an edge worker (POST /_cluster/push): one that is not a well-formed generation is
refused whole (400 with what is wrong; the manifest and cache stay as they were), and a signed one tells
the worker that control is up."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from assetcdn.control.publishing.service import REGISTRY
from assetcdn.edge.circuit_breaker import CLOSED, OPEN
from assetcdn.shared.cluster import PREFIX, sign_request
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

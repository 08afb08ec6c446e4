"""A push control signed for an edge worker is accepted once: a captured purge replayed to the edge is
refused (and purges nothing), while the next real push still arrives."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

import assetcdn.control.publishing.edge_registry  # noqa: F401
from assetcdn import control
from assetcdn.control.publishing.service import REGISTRY
from tests.control.expect import expect_error
from tests.support.cdn import ZONE, CdnFactory

LOGO = b'<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"/>'


async def test_a_captured_push_cannot_be_replayed(make_cdn: CdnFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    cdn = await make_cdn()
    path = f"{ZONE}/v1/logos/replay.svg"
    await cdn.upload(path, LOGO)
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "MISS"
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "HIT"

    captured: list[tuple[str, bytes, dict[str, str]]] = []
    real_sign = control.publishing.edge_registry.sign_request

    def recording_sign(secret: str, method: str, path_: str, body: bytes = b"", **kwargs: Any) -> dict[str, str]:
        headers = real_sign(secret, method, path_, body, **kwargs)
        captured.append((path_, body, headers))
        return headers

    monkeypatch.setattr(control.publishing.edge_registry, "sign_request", recording_sign)
    purge = await cdn.purge_urls(f"/{path}")
    assert purge["edges"]["acknowledged"] == ["edge-t"], purge
    assert len(captured) == 1
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "MISS"
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "HIT"

    # An attacker on the network sends the captured purge again, byte for byte.
    cluster_path, body, headers = captured[0]
    (edge_member,) = cdn.control.app[REGISTRY].edges.values()
    async with aiohttp.ClientSession() as http:
        resp = await http.post(edge_member.url + cluster_path, data=body,
                               headers={**headers, "Content-Type": "application/json"})
        await expect_error(resp, 401, "Unauthorized")
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "HIT"  # nothing was purged

    # A different, freshly signed message is still accepted.
    purge = await cdn.purge_urls(f"/{path}")
    assert purge["edges"]["acknowledged"] == ["edge-t"], purge
    assert len(captured) == 2 and captured[1][2] != headers
    assert (await cdn.edge.get(f"/{path}")).headers["X-Cache"] == "MISS"
